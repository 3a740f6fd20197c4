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
  split.local = local;
  if (local.mask == AttentionMask::None)
    return split;
  int64_t c = split.chunk;
  // A problem of the chunk's c queries against `keys` keys in the step's
  // buffers.
  auto part = [&](int64_t keys, AttentionMask mask) {
    AttentionProblem p = local;
    p.seqQ = c;
    p.seqKv = keys;
    p.bufferRowsQ = local.seqQ;
    p.bufferRowsKv = local.seqKv;
    // With as many keys as queries both alignments are the same diagonal.
    p.mask = mask == AttentionMask::CausalBottomRight && keys == c
                 ? AttentionMask::Causal
                 : mask;
    return p;
  };
  for (auto [firstRow, keys] : {std::pair{int64_t(0), (rank + 1) * c},
                                std::pair{c, (2 * ranks - rank) * c}}) {
    CpChunk chunk;
    chunk.firstRow = firstRow;
    chunk.keys = keys;
    chunk.forward = part(keys, AttentionMask::CausalBottomRight);
    if (local.dropout > 0 || c < kSplitBackwardMinChunk) {
      chunk.diagonal = chunk.forward;
    } else {
      chunk.diagonalStart = keys - c;
      chunk.diagonal = part(c, AttentionMask::Causal);
      if (keys > c)
        chunk.visible = part(keys - c, AttentionMask::None);
    }
    split.chunks.push_back(chunk);
  }
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
  int64_t batch = 0, rows = 0, width = 0, stride = 0, addFrom = 0, addTo = 0,
          zeroFrom = 0, isSbhd = 0, isHalf = 0;
};
static_assert(sizeof(CpAccumulateParams) == 11 * 8,
              "CpAccumulateParams must match TejitCpAccumulate");
} // namespace

Error tejit::runtime::enqueueCpAccumulate(
    const CudaDriver &driver, CUfunction kernel, const AttentionProblem &p,
    bool keys, int64_t tokenStride, CUdeviceptr grad, CUdeviceptr scratch,
    CpAccumulateRows rows, CUstream stream) {
  CpAccumulateParams params;
  params.dst = grad;
  params.src = scratch;
  params.batch = p.batch;
  params.rows = keys ? p.rowsKv() : p.rowsQ();
  params.width = (keys ? p.kvHeads : p.heads) * p.headDim;
  params.stride = tokenStride ? tokenStride : params.width;
  params.addFrom = rows.addFrom;
  params.addTo = rows.addTo;
  params.zeroFrom = rows.zeroFrom;
  params.isSbhd = p.layout == AttentionLayout::Sbhd ? 1 : 0;
  params.isHalf = p.element == ElementType::F16 ? 1 : 0;
  int64_t total = params.batch * params.rows * params.width;
  unsigned threads = 256;
  unsigned blocks =
      unsigned(std::clamp<int64_t>((total + threads - 1) / threads, 1, 65535));
  void *arguments[] = {&params};
  return driver.check(driver.cuLaunchKernel(kernel, blocks, 1, 1, threads, 1, 1,
                                            0, stream, arguments, nullptr),
                      "launching the context-parallel gradient accumulation");
}
