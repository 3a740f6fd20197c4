//===- CpCollective.cpp - context parallelism's gathers and scatters ------===//

#include "runtime/CpCollective.h"

#include <cstring>

using namespace tejit::runtime;
using llvm::Error;

namespace {
/// The whole tensor as [outer, rows, inner bytes] and each rank's rows.
struct SequenceLayout {
  size_t outer = 1, rows = 0, rowBytes = 0, localRows = 0;

  SequenceLayout(const CpCollectiveStep &step, const FunctionPlan &function) {
    // The whole sequence's tensor (of H / N heads for an all-to-all).
    const TensorType &whole =
        function.values[step.gather ? step.out : step.in].type;
    rowBytes = elementBytes(whole.element);
    for (auto [dim, size] : llvm::enumerate(whole.shape)) {
      if (int64_t(dim) < step.seqDim)
        outer *= size_t(size);
      else if (int64_t(dim) == step.seqDim)
        rows = size_t(size);
      else
        rowBytes *= size_t(size);
    }
    localRows = rows / size_t(step.ranks);
  }

  /// Whether the rank-order layout is the whole tensor's.
  bool inOrder(const CpCollectiveStep &step) const {
    return outer == 1 && !step.loadBalanced;
  }
  size_t bytes() const { return outer * rows * rowBytes; }
};

/// Enqueues `copies` from the rank-order buffer to the whole tensor
/// (`toWhole`) or back.
Error enqueueCopies(llvm::ArrayRef<CpRowCopy> copies, CUdeviceptr rankOrder,
                    CUdeviceptr whole, bool toWhole, const CudaDriver &driver,
                    CUstream stream) {
  for (const CpRowCopy &piece : copies) {
    CUdeviceptr ranked = rankOrder + piece.rankOffset;
    CUdeviceptr placed = whole + piece.wholeOffset;
    CUdeviceptr from = toWhole ? ranked : placed,
                to = toWhole ? placed : ranked;
    if (piece.height == 1) {
      if (Error error = driver.check(
              driver.cuMemcpyDtoDAsync(to, from, piece.width, stream),
              "copying a rank's tokens (context parallelism)"))
        return error;
      continue;
    }
    CUDA_MEMCPY2D copy;
    std::memset(&copy, 0, sizeof(copy));
    copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    copy.srcDevice = from;
    copy.srcPitch = toWhole ? piece.rankPitch : piece.wholePitch;
    copy.dstDevice = to;
    copy.dstPitch = toWhole ? piece.wholePitch : piece.rankPitch;
    copy.WidthInBytes = piece.width;
    copy.Height = piece.height;
    if (Error error = driver.check(driver.cuMemcpy2DAsync(&copy, stream),
                                   "copying a rank's tokens (context "
                                   "parallelism, per batch entry)"))
      return error;
  }
  return Error::success();
}
} // namespace

std::vector<CpRowCopy>
tejit::runtime::cpReorderCopies(const CpCollectiveStep &step,
                                const FunctionPlan &function) {
  SequenceLayout layout(step, function);
  std::vector<CpRowCopy> copies;
  if (layout.inOrder(step))
    return copies;
  size_t ranks = size_t(step.ranks), local = layout.localRows;
  size_t pieces = step.loadBalanced ? 2 : 1, pieceRows = local / pieces;
  for (size_t rank = 0; rank < ranks; ++rank)
    for (size_t piece = 0; piece < pieces; ++piece) {
      // Load balanced: rank r holds chunks r and 2N - 1 - r of 2N.
      size_t chunk =
          step.loadBalanced ? (piece == 0 ? rank : 2 * ranks - 1 - rank) : rank;
      CpRowCopy copy;
      copy.rankOffset =
          (rank * layout.outer * local + piece * pieceRows) * layout.rowBytes;
      copy.wholeOffset = chunk * pieceRows * layout.rowBytes;
      copy.width = pieceRows * layout.rowBytes;
      copy.height = layout.outer;
      copy.rankPitch = local * layout.rowBytes;
      copy.wholePitch = layout.rows * layout.rowBytes;
      copies.push_back(copy);
    }
  return copies;
}

std::vector<CpRowCopy>
tejit::runtime::cpHeadBlockCopies(const CpCollectiveStep &step,
                                  const FunctionPlan &function) {
  // This rank's tokens of all heads: the all-to-all's input to heads, its
  // output to sequence.
  const TensorType &allHeads =
      function.values[step.gather ? step.in : step.out].type;
  size_t rows = 1, headsBytes = elementBytes(allHeads.element);
  for (auto [dim, size] : llvm::enumerate(allHeads.shape)) {
    if (int64_t(dim) < step.headDim)
      rows *= size_t(size);
    else
      headsBytes *= size_t(size);
  }
  size_t ranks = size_t(step.ranks), blockWidth = headsBytes / ranks;
  std::vector<CpRowCopy> copies;
  for (size_t block = 0; block < ranks; ++block) {
    CpRowCopy copy;
    copy.rankOffset = block * rows * blockWidth;
    copy.wholeOffset = block * blockWidth;
    copy.width = blockWidth;
    copy.height = rows;
    copy.rankPitch = blockWidth;
    copy.wholePitch = headsBytes;
    copies.push_back(copy);
  }
  return copies;
}

size_t tejit::runtime::cpCollectiveScratchBytes(const CpCollectiveStep &step,
                                                const FunctionPlan &function) {
  SequenceLayout layout(step, function);
  // An all-to-all sends from one buffer and receives into another; in
  // order, the step's own input or output is one of them.
  if (step.allToAll)
    return (layout.inOrder(step) ? 1 : 2) * layout.bytes();
  return layout.inOrder(step) ? 0 : layout.bytes();
}

namespace {
/// A cp_alltoall: head blocks out, the exchange, the tokens placed (to
/// heads), or the reverse (to sequence). `scratch` holds two buffers, one
/// when the tokens need no reordering.
Error enqueueCpAllToAll(const CpCollectiveStep &step,
                        const FunctionPlan &function, CUdeviceptr in,
                        CUdeviceptr out, CUdeviceptr scratch,
                        TensorParallelGroup &group, const CudaDriver &driver,
                        CUstream stream) {
  SequenceLayout layout(step, function);
  ElementType element = function.values[step.in].type.element;
  size_t perRank = layout.bytes() / size_t(step.ranks) / elementBytes(element);
  std::vector<CpRowCopy> blocks = cpHeadBlockCopies(step, function);
  std::vector<CpRowCopy> tokens = cpReorderCopies(step, function);
  bool inOrder = tokens.empty();
  // In order, to heads receives into `out` and to sequence sends from `in`:
  // the scratch holds the other buffer alone.
  CUdeviceptr send = scratch,
              received = inOrder ? scratch : scratch + layout.bytes();
  if (step.gather) {
    if (Error error = enqueueCopies(blocks, send, in, false, driver, stream))
      return error;
    if (Error error = group.allToAll(send, inOrder ? out : received, perRank,
                                     element, stream))
      return error;
    return enqueueCopies(tokens, received, out, true, driver, stream);
  }
  if (Error error = enqueueCopies(tokens, send, in, false, driver, stream))
    return error;
  if (Error error = group.allToAll(inOrder ? in : send, received, perRank,
                                   element, stream))
    return error;
  return enqueueCopies(blocks, received, out, true, driver, stream);
}
} // namespace

Error tejit::runtime::enqueueCpCollective(
    const CpCollectiveStep &step, const FunctionPlan &function, CUdeviceptr in,
    CUdeviceptr out, CUdeviceptr scratch, TensorParallelGroup &group,
    const CudaDriver &driver, CUstream stream) {
  if (step.allToAll)
    return enqueueCpAllToAll(step, function, in, out, scratch, group, driver,
                             stream);
  SequenceLayout layout(step, function);
  ElementType element = function.values[step.in].type.element;
  size_t perRank = layout.bytes() / size_t(step.ranks) / elementBytes(element);
  std::vector<CpRowCopy> copies = cpReorderCopies(step, function);
  bool inOrder = copies.empty();
  if (step.gather) {
    if (Error error = group.allGather(in, inOrder ? out : scratch, perRank,
                                      element, stream))
      return error;
    return enqueueCopies(copies, scratch, out, true, driver, stream);
  }
  if (Error error = enqueueCopies(copies, scratch, in, false, driver, stream))
    return error;
  return group.reduceScatter(inOrder ? in : scratch, out, perRank, element,
                             stream);
}
