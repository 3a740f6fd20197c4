//===- ContextParallel.cpp - the sequence over the ranks of a CP group ----===//
//
// Context parallelism (docs/context-parallel.md): each rank holds s / N
// tokens of every sequence along dim `seqDim`; load-balanced, rank r holds
// chunks r and 2N - 1 - r of 2N. The gather puts the whole sequence
// together (in sequence order when load-balanced, in rank order
// otherwise), the reduce-scatter sums a whole-sequence tensor over the
// ranks and keeps this rank's tokens. cp_comm_type a2a's all-to-all trades
// heads (dim 2 of a rank-4 tensor) for tokens: here an all-gather of which
// each rank keeps its part, which the interpreter's collectives give.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Frame.h"

#include <utility>

using namespace mlir;
using namespace tejit::interp;

namespace {
/// `x` with its first two dims swapped (dim 1 to the front), so that the
/// sequence dim of bshd leads as sbhd's does.
Tensor swapLeadingDims(const Tensor &x) {
  assert(x.shape.size() >= 2 && "a sequence dim 1 needs two dims");
  int64_t d0 = x.shape[0], d1 = x.shape[1], inner = x.numElements() / d0 / d1;
  SmallVector<int64_t> shape(x.shape);
  std::swap(shape[0], shape[1]);
  Tensor result(shape, std::vector<double>(x.data.size()));
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j)
      std::copy_n(x.data.begin() + (i * d1 + j) * inner, inner,
                  result.data.begin() + (j * d0 + i) * inner);
  return result;
}

/// Runs `fn` on `x` viewed with its sequence dim `seqDim` first.
template <typename Fn>
Tensor withSequenceFirst(const Tensor &x, int64_t seqDim, Fn fn) {
  if (seqDim == 0)
    return fn(x);
  return swapLeadingDims(fn(swapLeadingDims(x)));
}

/// The rows [begin, begin + count) of dim 0 for each (begin, count), in
/// that order.
Tensor takeRows(const Tensor &x, ArrayRef<std::pair<int64_t, int64_t>> ranges) {
  int64_t width = x.numElements() / x.shape[0];
  SmallVector<int64_t> shape(x.shape);
  shape[0] = 0;
  Tensor result(shape, {});
  for (auto [begin, count] : ranges) {
    result.data.insert(result.data.end(), x.data.begin() + begin * width,
                       x.data.begin() + (begin + count) * width);
    result.shape[0] += count;
  }
  return result;
}

/// Heads [first, first + count) of `x` [d0, d1, heads, d].
Tensor headsOf(const Tensor &x, int64_t first, int64_t count) {
  int64_t d0 = x.shape[0], d1 = x.shape[1], heads = x.shape[2],
          width = x.shape[3];
  Tensor flat = reshape(x, {d0, d1, heads * width});
  return reshape(slice(flat, first * width, count * width),
                 {d0, d1, count, width});
}

/// `blocks` [d0, d1, h, d] side by side along the heads.
Tensor concatHeads(ArrayRef<Tensor> blocks) {
  int64_t d0 = blocks[0].shape[0], d1 = blocks[0].shape[1],
          heads = blocks[0].shape[2], width = blocks[0].shape[3];
  SmallVector<Tensor> flat;
  for (const Tensor &block : blocks)
    flat.push_back(reshape(block, {d0, d1, heads * width}));
  SmallVector<const Tensor *> inputs;
  for (const Tensor &block : flat)
    inputs.push_back(&block);
  return reshape(concat(inputs),
                 {d0, d1, heads * int64_t(blocks.size()), width});
}

/// The rows of the whole sequence (dim 0, `rows` of them) that rank `rank`
/// of `ranks` holds, in its local order.
SmallVector<std::pair<int64_t, int64_t>>
rowsOfRank(int64_t rows, int64_t ranks, int64_t rank, bool loadBalanced) {
  if (!loadBalanced)
    return {{rank * rows / ranks, rows / ranks}};
  int64_t chunk = rows / (2 * ranks);
  return {{rank * chunk, chunk}, {(2 * ranks - 1 - rank) * chunk, chunk}};
}
} // namespace

Tensor tejit::interp::sequenceChunksOfRank(const Tensor &whole, int64_t ranks,
                                           int64_t rank, int64_t seqDim) {
  return withSequenceFirst(whole, seqDim, [&](const Tensor &x) {
    return takeRows(x, rowsOfRank(x.shape[0], ranks, rank, true));
  });
}

FailureOr<Tensor> Frame::gatherSequence(Operation *op, const Tensor &local,
                                        int64_t ranks, int64_t seqDim,
                                        bool loadBalanced) const {
  if (failed(needCollectives(op)))
    return failure();
  return withSequenceFirst(local, seqDim, [&](const Tensor &x) {
    // Rank order: rank r's rows at [r * rows, (r + 1) * rows).
    Tensor gathered = options.collectives->allGather(x, options.rank);
    if (!loadBalanced)
      return gathered;
    // Each rank's rows back to the places rowsOfRank gives them.
    int64_t local = x.shape[0], width = x.numElements() / local;
    Tensor whole(gathered.shape, std::vector<double>(gathered.data.size()));
    for (int64_t rank = 0; rank < ranks; ++rank) {
      auto from = gathered.data.begin() + rank * local * width;
      for (auto [begin, count] :
           rowsOfRank(local * ranks, ranks, rank, /*loadBalanced=*/true)) {
        std::copy_n(from, count * width, whole.data.begin() + begin * width);
        from += count * width;
      }
    }
    return whole;
  });
}

FailureOr<Tensor> Frame::scatterSequenceSum(Operation *op, const Tensor &whole,
                                            int64_t ranks, int64_t seqDim,
                                            bool loadBalanced) const {
  if (failed(needCollectives(op)))
    return failure();
  Tensor sum = options.collectives->sum(whole);
  return withSequenceFirst(sum, seqDim, [&](const Tensor &x) {
    return takeRows(x,
                    rowsOfRank(x.shape[0], ranks, options.rank, loadBalanced));
  });
}

FailureOr<Tensor> Frame::exchangeHeads(Operation *op, const Tensor &x,
                                       int64_t ranks, int64_t seqDim,
                                       bool loadBalanced, bool toHeads) const {
  if (toHeads) {
    // Every rank's tokens of every head, then this rank's head block.
    FailureOr<Tensor> whole =
        gatherSequence(op, x, ranks, seqDim, loadBalanced);
    if (failed(whole))
      return failure();
    int64_t count = whole->shape[2] / ranks;
    return headsOf(*whole, options.rank * count, count);
  }
  if (failed(needCollectives(op)))
    return failure();
  return withSequenceFirst(x, seqDim, [&](const Tensor &y) {
    // Rank j's whole sequence of head block j, of which this rank keeps
    // its rows, as head block j.
    Tensor gathered = options.collectives->allGather(y, options.rank);
    int64_t size = y.numElements();
    SmallVector<Tensor> blocks;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      Tensor block(y.shape, std::vector<double>(
                                gathered.data.begin() + rank * size,
                                gathered.data.begin() + (rank + 1) * size));
      blocks.push_back(takeRows(
          block, rowsOfRank(y.shape[0], ranks, options.rank, loadBalanced)));
    }
    return concatHeads(blocks);
  });
}
