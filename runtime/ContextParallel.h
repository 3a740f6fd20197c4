//===- ContextParallel.h - context-parallel attention steps -----*- C++ -*-===//
//
// Context parallelism (docs/context-parallel.md, Transformer Engine's
// cp_group with cp_comm_type all_gather): each of N ranks holds 2c = s / N
// queries of every sequence, chunk r and chunk 2N - 1 - r of the 2N chunks
// of c tokens, and attends them to the whole sequence's keys and values
// (gathered, in sequence order). Under the causal mask the local queries
// run as two cuDNN problems: the early chunk against keys [0, (r + 1) c)
// and the late one against [0, (2N - r) c), each with the causal diagonal
// aligned bottom-right; without a mask they run as one problem against every
// key. The problems read and write part of the step's buffers (their
// bufferRowsQ / bufferRowsKv are the buffers' rows).
//
// The backward writes the late chunk's dk and dv in place, the early chunk's
// into scratch buffers laid out as dk and dv, and enqueueCpAccumulate adds
// those to the prefix they cover and zeroes the keys no local query sees.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_CONTEXTPARALLEL_H
#define TEJIT_RUNTIME_CONTEXTPARALLEL_H

#include "runtime/Attention.h"
#include "runtime/CudaDriver.h"

#include "llvm/Support/Error.h"

#include <optional>

namespace tejit::runtime {

/// How a context-parallel attention step runs on this rank.
struct CpAttentionSplit {
  int64_t ranks = 1, rank = 0;
  /// Tokens of a chunk (c); the late chunk starts c rows into q, o, dO, dq
  /// and the stats.
  int64_t chunk = 0;
  /// The early chunk's problem (the whole step's without a mask), and the
  /// late chunk's under the causal mask.
  AttentionProblem early;
  std::optional<AttentionProblem> late;
};

/// The split of `local` (a step's problem as parsed: s_q = 2c local
/// queries, s_kv = N * 2c gathered keys, its mask none or causal) over
/// `ranks` ranks on rank `rank`; an ErrorCode::Unsupported error naming what
/// context parallelism does not take (thd, padding, a window, a bias, FP8,
/// strided dk/dv, lengths that do not split).
llvm::Expected<CpAttentionSplit> splitCpAttention(const AttentionProblem &local,
                                                  int64_t ranks, int64_t rank);

/// Bytes from the first row of a q-shaped (`keys` false) or k-shaped tensor
/// of `problem` to its row `rows` (batch entry 0), for a tensor whose tokens
/// are `tokenStride` elements apart (0: packed).
uint64_t cpRowOffsetBytes(const AttentionProblem &problem, int64_t rows,
                          int64_t tokenStride, bool keys);

/// Enqueues runtime/kernels/AttentionPrep.cu's tejit_cp_accumulate on one of
/// `split`'s backward gradients: adds `early`'s rows [0, (r + 1) c) into
/// `grad` and zeroes grad's rows from (2N - r) c on. Both are packed k-shaped
/// tensors of the step's problem (s_kv rows).
llvm::Error enqueueCpAccumulate(const CudaDriver &driver, CUfunction kernel,
                                const CpAttentionSplit &split, CUdeviceptr grad,
                                CUdeviceptr early, CUstream stream);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_CONTEXTPARALLEL_H
