//===- ContextParallelImport.cpp - cp_size, cp_rank, cp_comm_type ---------===//
//
// Context parallelism's spec keys on DotProductAttention,
// MultiheadAttention and TransformerLayer (docs/context-parallel.md).
//
//===----------------------------------------------------------------------===//
#include "compiler/spec/LayerContext.h"
#include "dialects/LayerChecks.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::spec;
using llvm::StringRef;

namespace {
/// TE's default cp_comm_type (its ring attention), which the importer runs
/// as a2a or all_gather (ContextParallelOptions::resolve).
constexpr llvm::StringLiteral kCpP2p = "p2p";

/// "'num_attention_heads' (4, 2 a rank with tp_size 2)": the spec's value
/// and, with tensor parallelism, one rank's.
std::string describe(const ContextParallelOptions::HeadCount &heads) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "'" << heads.key << "' (" << heads.count * heads.tpSize;
  if (heads.tpSize > 1)
    os << ", " << heads.count << " a rank with tp_size " << heads.tpSize;
  os << ")";
  return text;
}
} // namespace

FailureOr<ContextParallelOptions>
ContextParallelOptions::read(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<std::optional<int64_t>> size = layer.getPositive("cp_size");
  FailureOr<int64_t> rank = layer.getInt("cp_rank", 0);
  FailureOr<std::optional<std::string>> commType =
      layer.getString("cp_comm_type");
  if (failed(size) || failed(rank) || failed(commType))
    return failure();
  ContextParallelOptions options;
  options.size = size->value_or(1);
  options.rank = *rank;
  if (*commType && **commType != kCpAllGather && **commType != kCpAllToAll &&
      **commType != kCpP2p)
    return emitError(layer.valueLoc("cp_comm_type"))
           << "'cp_comm_type' " << **commType
           << " is not supported: the supported values are " << kCpAllGather
           << ", " << kCpAllToAll << " and " << kCpP2p;
  options.allToAll = *commType && **commType == kCpAllToAll;
  options.p2p = *commType && **commType == kCpP2p;
  if (options.rank < 0 || options.rank >= options.size)
    return emitError(layer.valueLoc("cp_rank"))
           << "'cp_rank' (" << options.rank
           << ") must be in [0, cp_size) = [0, " << options.size << ")";
  if (options.size == 1)
    return options;
  ImportState &state = ctx.state;
  Location at = layer.valueLoc("cp_size");
  if (state.inputFormat == QkvFormat::thd)
    return emitError(at) << "'cp_size' " << options.size
                         << " is not supported with packed sequences "
                            "(input_format thd)";
  if (state.kvCacheRows)
    return emitError(at) << "'cp_size' " << options.size
                         << " is not supported with a 'kv_cache' (inference)";
  if (state.seqLength % (2 * options.size) != 0)
    return emitError(at) << "'seq_length' (" << state.seqLength
                         << ") must be divisible by 2 * cp_size ("
                         << 2 * options.size
                         << "): each rank holds two chunks of every sequence";
  return options;
}

LogicalResult ContextParallelOptions::refuse(LayerContext &ctx,
                                             ArrayRef<Feature> features) const {
  if (size == 1)
    return success();
  for (const Feature &feature : features) {
    if (!feature.used || (feature.allToAllRuns && allToAll))
      continue;
    Location at = ctx.layer.has(feature.key) ? ctx.layer.valueLoc(feature.key)
                                             : ctx.layer.valueLoc("cp_size");
    // p2p on heads a2a cannot split runs as all_gather: say why.
    if (feature.allToAllRuns && notAllToAll)
      return emitError(at) << "'cp_size' " << size << " with cp_comm_type "
                           << kCpP2p << " is not supported with '"
                           << feature.key << "': cp_comm_type " << kCpAllToAll
                           << " runs it, but " << describe(*notAllToAll)
                           << " is not divisible by cp_size (" << size
                           << "), so " << kCpP2p << " runs as " << kCpAllGather;
    if (feature.allToAllRuns)
      return emitError(at) << "'cp_size' " << size << " with cp_comm_type "
                           << kCpAllGather << " is not supported with '"
                           << feature.key << "': cp_comm_type " << kCpAllToAll
                           << " runs it";
    return emitError(at)
           << "'cp_size' " << size << " is not supported with '" << feature.key
           << "' (context parallelism takes no_mask or causal self-attention "
              "without bias or KV cache; a window or FP8 attention with "
              "cp_comm_type a2a)";
  }
  return success();
}

std::optional<ContextParallelOptions::HeadCount>
ContextParallelOptions::undividedHeads(int64_t heads,
                                       std::optional<int64_t> groups,
                                       int64_t tpSize) const {
  for (auto [key, count] : {std::pair<StringRef, std::optional<int64_t>>{
                                "num_attention_heads", heads},
                            {"num_gqa_groups", groups}})
    if (count && *count % size != 0)
      return HeadCount{key, *count, tpSize};
  return std::nullopt;
}

void ContextParallelOptions::resolve(int64_t heads,
                                     std::optional<int64_t> groups,
                                     int64_t tpSize) {
  if (!p2p || size == 1)
    return;
  notAllToAll = undividedHeads(heads, groups, tpSize);
  allToAll = !notAllToAll;
}

LogicalResult ContextParallelOptions::checkHeads(LayerContext &ctx,
                                                 int64_t heads,
                                                 std::optional<int64_t> groups,
                                                 int64_t tpSize) const {
  if (!allToAll || size == 1)
    return success();
  std::optional<HeadCount> undivided = undividedHeads(heads, groups, tpSize);
  if (!undivided)
    return success();
  return emitError(ctx.layer.valueLoc(undivided->key))
         << describe(*undivided) << " must be divisible by cp_size (" << size
         << ") with cp_comm_type a2a: each rank attends over 1/cp_size of the "
            "heads";
}

void ContextParallelOptions::addAttributes(LayerContext &ctx,
                                           LayerOpParts &parts) const {
  if (size == 1)
    return;
  parts.set("cp_size", ctx.i64(size));
  parts.set("cp_rank", ctx.i64(rank));
  if (allToAll)
    parts.set("cp_comm_type", StringAttr::get(ctx.context(), kCpAllToAll));
}
