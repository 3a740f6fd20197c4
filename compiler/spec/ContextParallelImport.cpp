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
  if (*commType && **commType != kCpAllGather && **commType != kCpAllToAll)
    return emitError(layer.valueLoc("cp_comm_type"))
           << "'cp_comm_type' " << **commType
           << " is not supported: the supported values are " << kCpAllGather
           << " and " << kCpAllToAll;
  options.allToAll = *commType && **commType == kCpAllToAll;
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

LogicalResult ContextParallelOptions::checkHeads(LayerContext &ctx,
                                                 int64_t heads,
                                                 std::optional<int64_t> groups,
                                                 int64_t tpSize) const {
  if (!allToAll || size == 1)
    return success();
  for (auto [key, count] : {std::pair<StringRef, std::optional<int64_t>>{
                                "num_attention_heads", heads},
                            {"num_gqa_groups", groups}}) {
    if (!count || *count % size == 0)
      continue;
    InFlightDiagnostic error = emitError(ctx.layer.valueLoc(key));
    error << "'" << key << "' (" << *count * tpSize;
    if (tpSize > 1)
      error << ", " << *count << " a rank with tp_size " << tpSize;
    return error << ") must be divisible by cp_size (" << size
                 << ") with cp_comm_type a2a: each rank attends over "
                    "1/cp_size of the heads";
  }
  return success();
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
