//===- LayerImport.cpp - spec layers: dispatch and shared field readers
//----===//
#include "compiler/spec/LayerImport.h"
#include "compiler/spec/LayerContext.h"
#include "dialects/LayerChecks.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::spec;
using llvm::StringRef;

namespace {
struct LayerKind {
  StringRef className;
  StringRef opName;
  LayerImporter import;
  /// The rank of the layer's GEMM weights: 2 ([out, in] matrices), 3
  /// (GroupedLinear's stacked [G, out, in]), or 0 when it has none (and so
  /// no key fuse_wgrad_accumulation).
  unsigned gemmWeightRank;
};
} // namespace

static const LayerKind kLayerKinds[] = {
    {"Linear", "linear", importLinear, 2},
    {"LayerNorm", "layernorm", importLayerNorm, 0},
    {"RMSNorm", "rmsnorm", importRMSNorm, 0},
    {"LayerNormLinear", "layernorm_linear", importLayerNormLinear, 2},
    {"LayerNormMLP", "layernorm_mlp", importLayerNormMLP, 2},
    {"DotProductAttention", "dot_product_attention", importDotProductAttention,
     0},
    {"MultiheadAttention", "multihead_attention", importMultiheadAttention, 2},
    {"TransformerLayer", "transformer_layer", importTransformerLayer, 2},
    {"GroupedLinear", "grouped_linear", importGroupedLinear, 3},
    // Transformer Engine's fusible ops (FusibleOpImport.cpp).
    {"Activation", "act", importActivation, 0},
    {"Bias", "bias_add", importBias, 0},
    {"AddExtraInput", "add_extra_input", importAddExtraInput, 0},
    {"MakeExtraOutput", "make_extra_output", importMakeExtraOutput, 0},
};

ArrayRef<StringRef> tejit::spec::getLayerTypeNames() {
  static const SmallVector<StringRef> names = [] {
    SmallVector<StringRef> result;
    for (const LayerKind &kind : kLayerKinds)
      result.push_back(kind.className);
    return result;
  }();
  return names;
}

FailureOr<Value> tejit::spec::importLayer(ImportState &state,
                                          const SpecNode &node, unsigned index,
                                          Value input,
                                          FP8RecipeAttrInterface defaultRecipe,
                                          const SpecLocations &locations) {
  FailureOr<SpecMap> layer = SpecMap::get(node, locations, "a layer");
  if (failed(layer))
    return failure();
  // Both Transformer Engine's class names and the te op names are accepted.
  SmallVector<StringRef> typeNames(getLayerTypeNames());
  for (const LayerKind &kind : kLayerKinds)
    typeNames.push_back(kind.opName);
  FailureOr<std::optional<std::string>> type =
      layer->getChoice("type", typeNames);
  if (failed(type))
    return failure();
  if (!*type) {
    if (failed(layer->checkMisspelled("type")))
      return failure();
    return emitError(layer->loc())
           << "a layer needs 'type' (one of "
           << llvm::join(getLayerTypeNames(), ", ") << ")";
  }
  const LayerKind *kind = llvm::find_if(kLayerKinds, [&](const LayerKind &k) {
    return k.className == **type || k.opName == **type;
  });
  layer->setWhat(kind->className);

  FailureOr<std::optional<std::string>> name = layer->getString("name");
  if (failed(name))
    return failure();
  std::string layerName = name->value_or("layers." + std::to_string(index));
  if (failed(state.claimLayerName(layerName, *name ? layer->valueLoc("name")
                                                   : layer->loc())))
    return failure();
  FP8RecipeAttrInterface recipe = defaultRecipe;
  if (const SpecNode *recipeNode = layer->getNode("recipe")) {
    FailureOr<FP8RecipeAttrInterface> own = readRecipe(*recipeNode, locations);
    if (failed(own))
      return failure();
    recipe = *own;
  }
  // Transformer Engine's fuse_wgrad_accumulation: the layer's GEMM weights
  // accumulate their gradients into a main_grad (Megatron-LM's), float32
  // unless main_grad_dtype says otherwise.
  bool fuseWgrad = false, fp8Weights = false, delayWgrad = false;
  Type mainGradType = Float32Type::get(state.getContext());
  if (kind->gemmWeightRank != 0) {
    FailureOr<bool> value = layer->getBool("fuse_wgrad_accumulation", false);
    FailureOr<std::optional<std::string>> dtype =
        layer->getChoice("main_grad_dtype", {"fp32", "bf16", "fp16"});
    // Transformer Engine's fp8_model_init: the GEMM weights arrive in FP8.
    FailureOr<bool> fp8 = layer->getBool("fp8_weights", false);
    if (failed(value) || failed(dtype) || failed(fp8))
      return failure();
    fuseWgrad = *value;
    fp8Weights = *fp8;
    // Transformer Engine's delay_wgrad_compute: the weight gradients wait
    // for backward_dw (a function of their own, docs/delay-wgrad.md).
    FailureOr<bool> delay = layer->getBool("delay_wgrad_compute", false);
    if (failed(delay))
      return failure();
    delayWgrad = *delay;
    if (delayWgrad && kind->className != "Linear" &&
        kind->className != "LayerNormLinear" &&
        kind->className != "LayerNormMLP" && kind->className != "GroupedLinear")
      return emitError(layer->valueLoc("delay_wgrad_compute"))
             << "'delay_wgrad_compute' is supported by Linear, "
                "LayerNormLinear, LayerNormMLP and GroupedLinear, not by "
             << kind->className;
    if (fp8Weights && !recipe)
      return emitError(layer->valueLoc("fp8_weights"))
             << "'fp8_weights' needs an FP8 recipe for the layer (FP8 "
                "weights feed FP8 GEMMs only)";
    if (*dtype && !fuseWgrad)
      return emitError(layer->valueLoc("main_grad_dtype"))
             << "'main_grad_dtype' needs 'fuse_wgrad_accumulation: true'";
    if (*dtype == "bf16")
      mainGradType = BFloat16Type::get(state.getContext());
    else if (*dtype == "fp16")
      mainGradType = Float16Type::get(state.getContext());
  }
  size_t firstArgument = state.numArguments();
  LayerContext ctx{state, *layer, layerName, input, recipe};
  FailureOr<Value> output = kind->import(ctx);
  if (failed(output))
    return output;
  if (fp8Weights)
    state.markFp8Weights(firstArgument, kind->gemmWeightRank);
  if (delayWgrad)
    state.markDelayedWgrads(firstArgument, kind->gemmWeightRank);
  if (!fuseWgrad)
    return output;
  if (state.markMainGrads(firstArgument, kind->gemmWeightRank, mainGradType) ==
      0)
    return emitError(layer->valueLoc("fuse_wgrad_accumulation"))
           << "'fuse_wgrad_accumulation' is set, but " << kind->className
           << " has no GEMM weight whose gradient could accumulate into "
              "main_grad";
  return output;
}

FailureOr<Value> LayerContext::takeInput(StringRef widthKey, int64_t width,
                                         std::optional<int64_t> slice,
                                         int64_t cpSize) {
  RankedTensorType whole = state.activationType(width);
  // Context parallelism: this rank's tokens of each sequence.
  unsigned seqDim = state.inputFormat == QkvFormat::bshd ? 1 : 0;
  SmallVector<int64_t> local(whole.getShape());
  if (state.inputFormat != QkvFormat::thd)
    local[seqDim] /= cpSize;
  if (!input) {
    SmallVector<int64_t> shape(local);
    shape.front() /= slice.value_or(state.firstInputSlices);
    return state.addInput(
        "input", RankedTensorType::get(shape, whole.getElementType()), loc());
  }
  ArrayRef<int64_t> have = cast<ShapedType>(input.getType()).getShape();
  if (have.back() != width)
    return emitError(layer.valueLoc(widthKey))
           << "'" << widthKey << "' of " << layer.getWhat() << " is " << width
           << " but its input, the previous layer's output, has " << have.back()
           << " features";
  // In sbhd a sequence-parallel slice cuts dim 0 too: its own messages
  // below explain a mismatch there unless the layer is context-parallel.
  if (slice && state.inputFormat != QkvFormat::thd &&
      (cpSize > 1 || seqDim == 1) &&
      have[seqDim] * (seqDim == 0 ? *slice : 1) != local[seqDim])
    return emitError(loc())
           << layer.getWhat() << " reads "
           << (cpSize > 1 ? "this rank's " : "all ") << local[seqDim]
           << " tokens of each sequence (cp_size " << cpSize
           << "), but its input, the previous layer's output, holds "
           << have[seqDim] * (seqDim == 0 ? *slice : 1)
           << ": the attention layers of a spec share one cp_size";
  if (!slice || have.front() * *slice == local.front())
    return input;
  int64_t rows = local.front() / *slice;
  if (*slice > 1)
    return emitError(layer.valueLoc("sequence_parallel"))
           << "a sequence-parallel " << layer.getWhat()
           << " reads this rank's slice of dim 0 (" << rows
           << " rows), but its input, the previous layer's output, has "
           << have.front()
           << ": the layer before it must end sequence-parallel too";
  return emitError(loc()) << layer.getWhat() << " reads all " << rows
                          << " rows of dim 0, but its input, the previous "
                             "layer's output, has "
                          << have.front()
                          << " (a sequence-parallel slice): give it "
                             "tp_size > 1 and 'sequence_parallel' too";
}

Value LayerContext::param(StringRef local, ArrayRef<int64_t> shape,
                          bool present) {
  return present ? state.addParam(paramName(local), shape, loc()) : Value();
}

FailureOr<Normalization> LayerContext::readNormalization() {
  FailureOr<std::optional<std::string>> text =
      layer.getChoice("normalization", {"LayerNorm", "RMSNorm"});
  if (failed(text))
    return failure();
  return symbolizeNormalization(text->value_or("LayerNorm")).value();
}

FailureOr<Activation> LayerContext::readActivation() {
  SmallVector<StringRef> names;
  for (uint32_t i = 0; i <= getMaxEnumValForActivation(); ++i)
    names.push_back(stringifyActivation(static_cast<Activation>(i)));
  FailureOr<std::optional<std::string>> text =
      layer.getChoice("activation", names);
  if (failed(text))
    return failure();
  return symbolizeActivation(text->value_or("gelu")).value();
}

FailureOr<SmallVector<NamedAttribute>>
LayerContext::readActivationParams(FailureOr<Activation> activation) {
  SmallVector<NamedAttribute> attributes;
  const SpecNode *node = layer.getNode("activation_params");
  if (!node || node->isNull())
    return attributes;
  if (succeeded(activation) && *activation != Activation::clamped_swiglu)
    return emitError(layer.keyLoc("activation_params"))
           << "'activation_params' in " << layer.getWhat()
           << " is for activation clamped_swiglu only, got activation "
           << stringifyActivation(*activation);
  FailureOr<SpecMap> map =
      SpecMap::get(*node, layer.getLocations(),
                   ("'activation_params' in " + layer.getWhat()).str());
  if (failed(map))
    return failure();
  map->setWhat("activation_params");
  // Spec key, op attribute, whether it must be > 0.
  struct Param {
    StringRef key, attribute;
    bool positive;
  };
  const Param params[] = {{"limit", "activation_limit", true},
                          {"alpha", "activation_alpha", false},
                          {"glu_linear_offset", "glu_linear_offset", false}};
  bool ok = true;
  for (const Param &param : params) {
    FailureOr<std::optional<double>> value = map->getFloat(param.key);
    if (failed(value) || !*value) {
      ok &= succeeded(value);
      continue;
    }
    if (!std::isfinite(**value) || (param.positive && !(**value > 0.0))) {
      // The number as the spec spells it ("1e400" reads as infinity).
      emitError(map->valueLoc(param.key))
          << "'" << param.key << "' in activation_params must be finite"
          << (param.positive ? " and > 0" : "") << ", got "
          << map->getNode(param.key)->text;
      ok = false;
      continue;
    }
    attributes.emplace_back(StringAttr::get(context(), param.attribute),
                            f64(**value));
  }
  if (failed(map->finish()) || !ok)
    return failure();
  return attributes;
}

FailureOr<AttnMaskType> LayerContext::readMaskType(StringRef key,
                                                   AttnMaskType fallback) {
  SmallVector<StringRef> names;
  for (uint32_t i = 0; i <= getMaxEnumValForAttnMaskType(); ++i)
    names.push_back(stringifyAttnMaskType(static_cast<AttnMaskType>(i)));
  FailureOr<std::optional<std::string>> text = layer.getChoice(key, names);
  if (failed(text))
    return failure();
  AttnMaskType type = *text ? symbolizeAttnMaskType(**text).value() : fallback;
  // A KV cache's new tokens are packed: the mask types become their padding
  // forms (causal ones then align bottom-right in te-decompose).
  if (state.kvCacheRows && type != AttnMaskType::arbitrary)
    return kvCacheMaskType(type) == AttnMaskType::padding
               ? AttnMaskType::padding
               : AttnMaskType::padding_causal;
  return type;
}

FailureOr<QkvFormat> LayerContext::readFormat(StringRef key) {
  FailureOr<std::optional<std::string>> text =
      layer.getChoice(key, {"sbhd", "bshd"});
  if (failed(text))
    return failure();
  if (*text && **text != stringifyQkvFormat(state.inputFormat))
    return emitError(layer.valueLoc(key))
           << "'" << key << "' (" << **text
           << ") contradicts the spec's input_format ("
           << stringifyQkvFormat(state.inputFormat)
           << "): every layer of a spec shares one layout";
  return state.inputFormat;
}

Value LayerContext::attentionMask(AttnMaskType maskType,
                                  std::optional<int64_t> kvSeq) {
  // Packed sequences take their lengths from cu_seqlens.
  if (state.inputFormat == QkvFormat::thd)
    return Value();
  int64_t b = state.batchSize, s = state.seqLength, skv = kvSeq.value_or(s);
  Type i1 = IntegerType::get(context(), 1);
  switch (maskType) {
  case AttnMaskType::padding:
  case AttnMaskType::padding_causal:
  case AttnMaskType::padding_causal_bottom_right:
    return state.addInput("attention_mask",
                          RankedTensorType::get({b, 1, 1, skv}, i1), loc());
  case AttnMaskType::arbitrary:
    return state.addInput("arbitrary_attention_mask",
                          RankedTensorType::get({b, 1, s, skv}, i1), loc());
  default:
    return Value();
  }
}

LogicalResult LayerContext::rejectRecipe() {
  if (layer.has("recipe") && recipe)
    return emitError(layer.keyLoc("recipe"))
           << layer.getWhat()
           << " runs no GEMM, so a 'recipe' does not apply to it";
  return success();
}

FailureOr<Value> LayerContext::build(StringRef opName, LayerOpParts &parts,
                                     Type outputType, bool segmented,
                                     bool lnOutput) {
  SmallVector<Type, 2> resultTypes = {outputType};
  if (lnOutput)
    resultTypes.push_back(parts.operands.front().getType());
  FailureOr<Operation *> op =
      state.createLayerOp(opName, loc(), parts, resultTypes, segmented);
  if (failed(op))
    return failure();
  if (lnOutput)
    state.addResult(paramName("ln_output"), (*op)->getResult(1));
  return (*op)->getResult(0);
}

void LayerContext::addMlpParams(LayerOpParts &parts, StringRef prefix,
                                Activation activation, int64_t hidden,
                                int64_t ffn, bool bias) {
  int64_t fc1Rows = isGatedActivation(activation) ? 2 * ffn : ffn;
  parts.add(param((prefix + "fc1_weight").str(), {fc1Rows, hidden}));
  parts.addOptional(param((prefix + "fc1_bias").str(), {fc1Rows}, bias));
  parts.add(param((prefix + "fc2_weight").str(), {hidden, ffn}));
  parts.addOptional(param((prefix + "fc2_bias").str(), {hidden}, bias));
}

FailureOr<TensorParallelOptions> TensorParallelOptions::read(LayerContext &ctx,
                                                             bool hasMode) {
  FailureOr<std::optional<int64_t>> size = ctx.layer.getPositive("tp_size");
  if (failed(size))
    return failure();
  TensorParallelOptions options;
  options.size = size->value_or(1);
  FailureOr<bool> sequence = ctx.layer.getBool("sequence_parallel", false);
  if (failed(sequence))
    return failure();
  options.sequence = *sequence && options.size > 1;
  if (options.sequence && failed(options.checkSequenceParallel(ctx)))
    return failure();
  if (!hasMode)
    return options;
  FailureOr<std::optional<std::string>> mode =
      ctx.layer.getChoice("parallel_mode", {"column", "row"});
  if (failed(mode))
    return failure();
  if (*mode)
    options.mode =
        **mode == "column" ? ParallelMode::column : ParallelMode::row;
  if (options.size > 1 && !options.mode)
    return emitError(ctx.layer.valueLoc("tp_size"))
           << "'tp_size' " << options.size
           << " needs 'parallel_mode': column (splits the output features) "
              "or row (splits the input features)";
  return options;
}

LogicalResult TensorParallelOptions::checkSequenceParallel(LayerContext &ctx) {
  ImportState &state = ctx.state;
  Location at = ctx.layer.valueLoc("sequence_parallel");
  if (state.inputFormat == QkvFormat::thd)
    return emitError(at) << "'sequence_parallel' is not supported with "
                            "packed sequences (input_format thd)";
  if (state.kvCacheRows)
    return emitError(at) << "'sequence_parallel' is not supported with a "
                            "'kv_cache' (inference)";
  bool sbhd = state.inputFormat == QkvFormat::sbhd;
  int64_t rows = sbhd ? state.seqLength : state.batchSize;
  if (rows % size != 0)
    return emitError(at)
           << "'sequence_parallel' cuts dim 0 of the activations ("
           << (sbhd ? "seq_length " : "batch_size ") << rows
           << ") into tp_size (" << size << ") slices: it must be divisible";
  return success();
}

FailureOr<int64_t> TensorParallelOptions::split(LayerContext &ctx,
                                                StringRef key,
                                                int64_t global) const {
  if (global % size == 0)
    return global / size;
  return emitError(ctx.layer.valueLoc(key))
         << "'" << key << "' (" << global << ") must be divisible by tp_size ("
         << size << ")";
}

void TensorParallelOptions::addAttributes(LayerContext &ctx,
                                          LayerOpParts &parts) const {
  if (size == 1)
    return;
  parts.set("tp_size", ctx.i64(size));
  parts.set("sequence_parallel", ctx.flag(sequence));
  if (mode)
    parts.set("parallel_mode", ParallelModeAttr::get(ctx.context(), *mode));
}

FailureOr<NormOptions> NormOptions::read(LayerContext &ctx, StringRef epsKey) {
  FailureOr<Normalization> norm = ctx.readNormalization();
  FailureOr<double> eps = ctx.layer.getFloat(epsKey, 1e-5);
  FailureOr<bool> zeroCentered =
      ctx.layer.getBool("zero_centered_gamma", false);
  if (failed(norm) || failed(eps) || failed(zeroCentered))
    return failure();
  return NormOptions{*norm, *eps, *zeroCentered, epsKey};
}

void NormOptions::addParams(LayerContext &ctx, LayerOpParts &parts,
                            StringRef prefix, int64_t hidden) const {
  parts.add(ctx.param((prefix + "layer_norm_weight").str(), {hidden}));
  parts.addOptional(ctx.param((prefix + "layer_norm_bias").str(), {hidden},
                              normalization == Normalization::LayerNorm));
}

void NormOptions::addAttributes(LayerContext &ctx, LayerOpParts &parts) const {
  parts.set("normalization",
            NormalizationAttr::get(ctx.context(), normalization));
  parts.set(epsKey, ctx.f64(eps));
  parts.set("zero_centered_gamma", ctx.flag(zeroCentered));
}

FloatAttr LayerContext::f64(double value) {
  return FloatAttr::get(Float64Type::get(context()), value);
}

IntegerAttr LayerContext::i64(int64_t value) {
  return IntegerAttr::get(IntegerType::get(context(), 64), value);
}

IntegerAttr LayerContext::i64(std::optional<int64_t> value) {
  return value ? i64(*value) : IntegerAttr();
}

UnitAttr LayerContext::flag(bool value) {
  return value ? UnitAttr::get(context()) : UnitAttr();
}
