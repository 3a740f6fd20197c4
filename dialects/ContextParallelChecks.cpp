//===- ContextParallelChecks.cpp - cp_size / cp_rank of attention layers --===//
//
// Context parallelism (docs/context-parallel.md): what it refuses (a
// window and FP8 attention only with cp_comm_type all_gather), the local
// sequence the layer ops' operands hold, and the heads cp_comm_type a2a
// splits over the ranks.
//
//===----------------------------------------------------------------------===//
#include "dialects/LayerChecks.h"

using namespace mlir;
using namespace mlir::te;

LogicalResult mlir::te::verifyLayerContextParallel(Operation *op,
                                                   const ContextParallel &cp) {
  if (cp.commType != kCpAllGather && cp.commType != kCpAllToAll)
    return op->emitOpError()
           << "'cp_comm_type' must be " << kCpAllGather << " or " << kCpAllToAll
           << ", got '" << cp.commType << "'";
  if (cp.size < 1 || cp.rank < 0 || cp.rank >= cp.size)
    return op->emitOpError() << "'cp_rank' must be in [0, cp_size) with "
                                "cp_size >= 1, got cp_rank "
                             << cp.rank << " and cp_size " << cp.size;
  if (cp.size == 1)
    return success();
  auto delayed = dyn_cast_or_null<DelayedScalingAttr>(cp.recipe);
  std::string maskRule =
      ("'" + cp.maskTypeName + "' " + stringifyAttnMaskType(cp.maskType) +
       " (no_mask and causal are supported)")
          .str();
  std::string refused =
      cp.format == QkvFormat::thd ? "packed sequences (qkv_format thd)"
      : cp.maskType != AttnMaskType::no_mask &&
              cp.maskType != AttnMaskType::causal
          ? maskRule
      : cp.bias.any() ? "an attention bias ('core_attention_bias_type')"
      : cp.kvCache    ? "a KV cache ('key_cache')"
      : cp.cross      ? "cross-attention ('encoder_output')"
                      : "";
  if (!refused.empty())
    return op->emitOpError() << "context parallelism (cp_size " << cp.size
                             << ") is not supported with " << refused;
  // With a2a each rank's attention is an ordinary one over the whole
  // sequence (in order for a window) of its heads: it takes a window and
  // FP8 attention; the all-gather's split attention takes neither.
  StringRef a2aOnly = cp.window ? "'window_size'"
                      : delayed && delayed.getFp8Dpa()
                          ? "FP8 attention (fp8_dpa)"
                          : "";
  if (!a2aOnly.empty() && cp.commType == kCpAllGather)
    return op->emitOpError() << "context parallelism (cp_size " << cp.size
                             << ") with cp_comm_type " << kCpAllGather
                             << " is not supported with " << a2aOnly
                             << "; cp_comm_type " << kCpAllToAll << " runs it";
  if (cp.localSeq % 2 != 0)
    return op->emitOpError()
           << "with cp_size " << cp.size
           << " each rank holds two chunks of every sequence, so the local "
              "sequence length must be even, got "
           << cp.localSeq;
  if (cp.commType != kCpAllToAll)
    return success();
  // The all-to-all hands each rank 1/cp_size of the query heads and of the
  // key/value heads.
  for (auto [name, count] : {std::pair<StringRef, int64_t>{"query", cp.heads},
                             {"key/value", cp.groups}})
    if (count % cp.size != 0)
      return op->emitOpError()
             << "with cp_comm_type a2a the " << name << " heads (" << count
             << ") must be divisible by cp_size (" << cp.size
             << "): each rank attends over 1/cp_size of them";
  return success();
}
