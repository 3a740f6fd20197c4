//===- ContextParallel.cpp - context-parallel attention steps -------------===//

#include "runtime/ContextParallel.h"

#include "runtime/Errors.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace tejit::runtime;
using llvm::Error;

llvm::Expected<CpAttentionSplit>
tejit::runtime::splitCpAttention(const AttentionProblem &local, int64_t ranks,
                                 int64_t rank) {
  auto unsupported = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::Unsupported,
                     llvm::formatv("{0}: context parallelism over {1} ranks "
                                   "(rank {2}): {3}",
                                   local.key(), ranks, rank, why.str()));
  };
  if (ranks < 2 || rank < 0 || rank >= ranks)
    return unsupported("cp_rank must lie in [0, cp_ranks) and cp_ranks be at "
                       "least 2");
  if (local.thd() || local.kvCache)
    return unsupported("needs the sbhd or bshd layout, without a kv cache");
  if (local.mask != AttentionMask::None && local.mask != AttentionMask::Causal)
    return unsupported("takes the mask types no_mask and causal only");
  if (local.windowLeft >= 0 || local.windowRight >= 0 ||
      local.bias != AttentionBias::None || local.fp8)
    return unsupported("takes no sliding window, bias or FP8 attention");
  if (local.bufferRowsQ || local.bufferRowsKv)
    return unsupported("the step already runs on part of its buffers");
  if (local.seqQ % 2 != 0 || local.seqKv != ranks * local.seqQ)
    return unsupported(llvm::formatv(
        "each rank holds 2 chunks of the sequence, so s_kv ({0}) must be "
        "cp_ranks times s_q ({1}) and s_q even",
        local.seqKv, local.seqQ));
  // The early chunk's dk and dv go to a packed scratch laid out as dk and dv.
  if (local.backward && (local.tokenStrides.gradK || local.tokenStrides.gradV))
    return unsupported("dk and dv must be packed (they go to the "
                       "reduce-scatter)");
  CpAttentionSplit split;
  split.ranks = ranks;
  split.rank = rank;
  split.chunk = local.seqQ / 2;
  split.early = local;
  if (local.mask == AttentionMask::None)
    return split;
  int64_t c = split.chunk;
  auto chunkProblem = [&](int64_t keys) {
    AttentionProblem p = local;
    p.seqQ = c;
    p.seqKv = keys;
    p.bufferRowsQ = local.seqQ;
    p.bufferRowsKv = local.seqKv;
    // With as many keys as queries both alignments are the same diagonal.
    p.mask =
        keys == c ? AttentionMask::Causal : AttentionMask::CausalBottomRight;
    return p;
  };
  split.early = chunkProblem((rank + 1) * c);
  split.late = chunkProblem((2 * ranks - rank) * c);
  return split;
}

uint64_t tejit::runtime::cpRowOffsetBytes(const AttentionProblem &problem,
                                          int64_t rows, int64_t tokenStride,
                                          bool keys) {
  int64_t token =
      tokenStride ? tokenStride
                  : (keys ? problem.kvHeads : problem.heads) * problem.headDim;
  // sbhd: a position holds every batch entry's token; bshd: the rows of
  // batch entry 0 are consecutive tokens.
  int64_t elements = problem.layout == AttentionLayout::Sbhd
                         ? rows * problem.batch * token
                         : rows * token;
  return uint64_t(elements) * elementBytes(problem.element);
}

namespace {
/// The host mirror of runtime/kernels/AttentionPrep.cu's TejitCpAccumulate.
struct CpAccumulateParams {
  CUdeviceptr dst = 0, src = 0;
  int64_t outer = 0, rows = 0, inner = 0, addRows = 0, zeroFrom = 0, isHalf = 0;
};
static_assert(sizeof(CpAccumulateParams) == 8 * 8,
              "CpAccumulateParams must match TejitCpAccumulate");
} // namespace

Error tejit::runtime::enqueueCpAccumulate(const CudaDriver &driver,
                                          CUfunction kernel,
                                          const CpAttentionSplit &split,
                                          CUdeviceptr grad, CUdeviceptr early,
                                          CUstream stream) {
  const AttentionProblem &p = split.early;
  int64_t rows = p.rowsKv(), width = p.kvHeads * p.headDim;
  bool sbhd = p.layout == AttentionLayout::Sbhd;
  CpAccumulateParams params;
  params.dst = grad;
  params.src = early;
  params.outer = sbhd ? 1 : p.batch;
  params.rows = rows;
  params.inner = sbhd ? p.batch * width : width;
  params.addRows = p.seqKv;
  params.zeroFrom = split.late ? split.late->seqKv : rows;
  params.isHalf = p.element == ElementType::F16 ? 1 : 0;
  int64_t total = params.outer * rows * params.inner;
  unsigned threads = 256;
  unsigned blocks =
      unsigned(std::clamp<int64_t>((total + threads - 1) / threads, 1, 65535));
  void *arguments[] = {&params};
  return driver.check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1,
                                            0, stream, arguments, nullptr),
                      "launching the context-parallel dk/dv accumulation");
}
