//===- SpecImporter.cpp - layer specs (YAML/JSON) into te IR
//---------------===//
#include "compiler/spec/SpecImporter.h"
#include "compiler/spec/ImportState.h"
#include "compiler/spec/LayerImport.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::spec;
using llvm::StringRef;

bool tejit::isLayerSpecPath(StringRef path) {
  StringRef ext = llvm::sys::path::extension(path);
  return ext.equals_insensitive(".yaml") || ext.equals_insensitive(".yml") ||
         ext.equals_insensitive(".json");
}

static bool isIdentifier(StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name[0]) || name[0] == '_'))
    return false;
  return llvm::all_of(name,
                      [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

/// The function name when the spec gives none: the file's stem, made an
/// identifier.
static std::string defaultFunctionName(StringRef bufferName) {
  std::string name = llvm::sys::path::stem(bufferName).str();
  for (char &c : name)
    if (!llvm::isAlnum(c))
      c = '_';
  if (name.empty() || llvm::isDigit(name[0]))
    name = "layer_" + name;
  return name;
}

static FailureOr<Type> readDtype(SpecMap &spec, MLIRContext *context) {
  FailureOr<std::optional<std::string>> name =
      spec.getChoice("params_dtype", {"bf16", "fp16", "fp32", "bfloat16",
                                      "float16", "float32"});
  if (failed(name))
    return failure();
  StringRef dtype = name->value_or("bf16");
  if (dtype == "fp16" || dtype == "float16")
    return Type(Float16Type::get(context));
  if (dtype == "fp32" || dtype == "float32")
    return Type(Float32Type::get(context));
  return Type(BFloat16Type::get(context));
}

/// Reads `kv_cache` (docs/spec-format.md) into `state`: the rows a sequence
/// holds, at least the `seq` new tokens of a step, and for paged caches
/// (docs/paged-kv-cache.md) the rows of a page, which divide them, and the
/// pages of each layer's caches.
static LogicalResult readKvCache(const SpecNode &node,
                                 const SpecLocations &locations, int64_t seq,
                                 ImportState &state) {
  FailureOr<SpecMap> cache = SpecMap::get(node, locations, "kv_cache");
  if (failed(cache))
    return failure();
  FailureOr<int64_t> rows = cache->requirePositive("max_sequence_length");
  FailureOr<std::optional<int64_t>> pageSize = cache->getPositive("page_size");
  FailureOr<std::optional<int64_t>> pages = cache->getPositive("total_pages");
  if (failed(cache->finish()) || failed(rows) || failed(pageSize) ||
      failed(pages))
    return failure();
  if (*rows < seq)
    return emitError(cache->valueLoc("max_sequence_length"))
           << "'max_sequence_length' (" << *rows
           << ") must hold the 'seq_length' (" << seq
           << ") new tokens a sequence may bring in one step";
  // Paged caches need both keys: the page's rows and the pool's pages.
  if (pageSize->has_value() != pages->has_value()) {
    bool sized = pageSize->has_value();
    return emitError(cache->keyLoc(sized ? "page_size" : "total_pages"))
           << "paged KV caches need both 'page_size' and 'total_pages': '"
           << (sized ? "total_pages" : "page_size") << "' ("
           << (sized ? "the pages of each layer's caches"
                     : "the rows of a page")
           << ") is missing";
  }
  if (*pageSize && *rows % **pageSize != 0)
    return emitError(cache->valueLoc("page_size"))
           << "'page_size' (" << **pageSize
           << ") must divide 'max_sequence_length' (" << *rows << ")";
  state.kvCacheRows = *rows;
  state.kvCachePageSize = pageSize->value_or(0);
  state.kvCachePages = pages->value_or(0);
  return success();
}

/// Reads the top-level keys into `state` and returns the layer list.
static FailureOr<const SpecNode *>
readTopLevel(SpecMap &spec, ImportState &state,
             FP8RecipeAttrInterface &recipe) {
  FailureOr<Type> dtype = readDtype(spec, state.getContext());
  FailureOr<int64_t> seq = spec.requirePositive("seq_length");
  FailureOr<int64_t> batch = spec.requirePositive("batch_size");
  FailureOr<std::optional<std::string>> format =
      spec.getChoice("input_format", {"sbhd", "bshd", "thd"});
  // thd: the packed tokens (default: batch_size full sequences).
  FailureOr<std::optional<int64_t>> tokens = spec.getPositive("tokens");
  FailureOr<std::optional<std::string>> description =
      spec.getString("description");
  spec.allow({"name"});
  const SpecNode *recipeNode = spec.getNode("recipe");
  const SpecNode *kvCacheNode = spec.getNode("kv_cache");
  const SpecNode *layers = spec.getNode("layers");
  if (failed(spec.finish()) || failed(dtype) || failed(seq) || failed(batch) ||
      failed(format) || failed(description) || failed(tokens))
    return failure();
  if (*tokens && format->value_or("sbhd") != "thd")
    return emitError(spec.keyLoc("tokens"))
           << "'tokens' (the packed token count) needs 'input_format: thd'";
  if (kvCacheNode) {
    // Inference with a KV cache (docs/kv-cache-plan.md): the step's new
    // tokens are packed, so the layout is thd.
    if (format->value_or("sbhd") != "thd")
      return emitError(spec.keyLoc("kv_cache"))
             << "'kv_cache' needs 'input_format: thd' (the step's new tokens, "
                "packed by cu_seqlens)";
    if (failed(readKvCache(*kvCacheNode, spec.getLocations(), *seq, state)))
      return failure();
  }
  if (recipeNode) {
    FailureOr<FP8RecipeAttrInterface> parsed =
        readRecipe(*recipeNode, spec.getLocations());
    if (failed(parsed))
      return failure();
    recipe = *parsed;
  }
  if (!layers)
    return emitError(spec.loc()) << "the spec needs 'layers', a list of one "
                                    "or more layers";
  if (layers->kind != SpecNode::Kind::List || layers->items.empty())
    return emitError(spec.valueLoc("layers"))
           << "'layers' must be a non-empty list of layers, got "
           << (layers->kind == SpecNode::Kind::List ? "an empty list"
                                                    : layers->describe());
  state.dtype = *dtype;
  state.seqLength = *seq;
  state.batchSize = *batch;
  state.tokens = tokens->value_or(*batch * *seq);
  state.inputFormat = symbolizeQkvFormat(format->value_or("sbhd")).value();
  return layers;
}

/// Sequence parallelism (docs/tensor-parallel.md): the slices dim 0 of the
/// spec's input is cut into when its first layer reads either (a per-token
/// layer: a norm, or one of Transformer Engine's fusible ops, as in a chain
/// of tejit.pytorch.ops). The first sequence-parallel layer decides: a
/// row-parallel Linear reads all rows (1), any other a rank's slice
/// (tp_size); 1 without one, or when a tensor-parallel layer without
/// sequence parallelism comes first. This only looks: each layer's reader
/// checks its keys.
static int64_t firstInputSlices(const SpecNode &layers) {
  for (const std::unique_ptr<SpecNode> &layer : layers.items) {
    if (layer->kind != SpecNode::Kind::Mapping)
      return 1;
    StringRef type, mode;
    int64_t tpSize = 1;
    bool sequence = false;
    for (const SpecEntry &entry : layer->entries) {
      StringRef text = entry.value->text;
      if (entry.key == "type")
        type = text;
      else if (entry.key == "parallel_mode")
        mode = text;
      else if (entry.key == "tp_size" && text.getAsInteger(10, tpSize))
        return 1;
      else if (entry.key == "sequence_parallel")
        sequence = text.equals_insensitive("true");
    }
    if (tpSize > 1 && !sequence)
      return 1; // a tensor-parallel layer without it comes first
    if (tpSize > 1)
      return (type == "Linear" || type == "linear") && mode == "row" ? 1
                                                                     : tpSize;
  }
  return 1;
}

OwningOpRef<ModuleOp> tejit::importLayerSpec(llvm::SourceMgr &sourceMgr,
                                             MLIRContext *context) {
  context->loadDialect<TEDialect, func::FuncDialect>();
  SpecLocations locations(sourceMgr, context);
  FailureOr<std::unique_ptr<SpecNode>> root =
      parseSpecTree(sourceMgr, locations);
  if (failed(root))
    return nullptr;
  FailureOr<SpecMap> spec = SpecMap::get(**root, locations, "the spec");
  if (failed(spec))
    return nullptr;

  StringRef bufferName = sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID())
                             ->getBufferIdentifier();
  FailureOr<std::optional<std::string>> name = spec->getString("name");
  if (failed(name))
    return nullptr;
  if (*name && !isIdentifier(**name)) {
    emitError(spec->valueLoc("name"))
        << "'name' must be an identifier (letters, digits and '_', not "
           "starting with a digit), got '"
        << **name << "'";
    return nullptr;
  }
  ImportState state(context, spec->loc(),
                    name->value_or(defaultFunctionName(bufferName)));
  FP8RecipeAttrInterface recipe;
  FailureOr<const SpecNode *> layers = readTopLevel(*spec, state, recipe);
  if (failed(layers))
    return nullptr;

  state.firstInputSlices = firstInputSlices(**layers);
  Value current;
  for (auto [index, layer] : llvm::enumerate((*layers)->items)) {
    FailureOr<Value> output =
        importLayer(state, *layer, index, current, recipe, locations);
    if (failed(output))
      return nullptr;
    current = *output;
  }
  state.addResult("output", current, /*first=*/true);
  return state.finish(spec->loc());
}
