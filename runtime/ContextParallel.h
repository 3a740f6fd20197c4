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
// The backward runs each chunk as its diagonal block and the keys before it
// (CpChunk), writes the late chunk's dk and dv in place and the early
// chunk's into scratch buffers laid out as dk and dv; enqueueCpAccumulate
// adds partial gradients from such scratch buffers (and zeroes the keys no
// local query sees).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_CONTEXTPARALLEL_H
#define TEJIT_RUNTIME_CONTEXTPARALLEL_H

#include "runtime/Attention.h"
#include "runtime/CudaDriver.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <vector>

namespace tejit::runtime {

/// The shortest chunk whose backward is split into its diagonal block and
/// the keys before it (CpChunk): on an H200 the split made a rank's
/// forward + backward 8% faster at c = 4096 (s 16384, cp 2) and 1.7x slower
/// at c = 256, where the extra launches cost more than the skipped blocks
/// save; lengths in between are not measured.
constexpr int64_t kSplitBackwardMinChunk = 1024;

/// One query chunk of a causal step: its c queries against keys [0, keys).
/// The forward runs it as one problem with the causal diagonal aligned
/// bottom-right. The backward runs the diagonal block (keys [keys - c,
/// keys), the plain causal mask, whose masked blocks cuDNN skips) and the
/// keys before it (no mask) as two problems over the same stats, o and dO:
/// their dq add up and their dk / dv are disjoint rows. cuDNN's backward of
/// the bottom-right mask computes the masked blocks too (slower than no
/// mask, measured on an H200). With dropout the masks would move with the
/// keys, so the backward keeps the forward's one problem then (`visible`
/// absent, `diagonalStart` 0), as it does for chunks shorter than
/// kSplitBackwardMinChunk.
struct CpChunk {
  /// The chunk's first local query row (0 or c) and its keys.
  int64_t firstRow = 0, keys = 0;
  AttentionProblem forward;
  /// Backward: the keys [0, diagonalStart) without a mask (absent when
  /// there are none), and keys [diagonalStart, keys).
  std::optional<AttentionProblem> visible;
  AttentionProblem diagonal;
  int64_t diagonalStart = 0;
};

/// How a context-parallel attention step runs on this rank.
struct CpAttentionSplit {
  int64_t ranks = 1, rank = 0;
  /// Tokens of a chunk (c).
  int64_t chunk = 0;
  /// The step's problem: the local queries against every key.
  AttentionProblem local;
  /// Causal: the early and the late chunk; empty without a mask.
  std::vector<CpChunk> chunks;

  /// The problem the step's own runner runs: `local` without a mask, else
  /// the early chunk's first (its forward, or its backward's diagonal
  /// block).
  const AttentionProblem &first() const {
    if (chunks.empty())
      return local;
    return local.backward ? chunks[0].diagonal : chunks[0].forward;
  }
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

/// Rows of a gradient that runtime/kernels/AttentionPrep.cu's
/// tejit_cp_accumulate adds from a scratch laid out as the gradient: rows
/// [addFrom, addTo) are added, rows from zeroFrom on zeroed.
struct CpAccumulateRows {
  int64_t addFrom = 0, addTo = 0, zeroFrom = 0;
};

/// Enqueues tejit_cp_accumulate on `grad` (dq when `keys` is false, else dk
/// or dv, of `problem`'s layout and buffer rows, tokens `tokenStride`
/// elements apart, 0: packed) and `scratch`.
llvm::Error enqueueCpAccumulate(const CudaDriver &driver, CUfunction kernel,
                                const AttentionProblem &problem, bool keys,
                                int64_t tokenStride, CUdeviceptr grad,
                                CUdeviceptr scratch, CpAccumulateRows rows,
                                CUstream stream);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_CONTEXTPARALLEL_H
