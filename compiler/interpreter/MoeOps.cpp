//===- MoeOps.cpp - the interpreter's MoE token permutation ops -----------===//
//
// te.moe_row_map, te.moe_chunk_row_map, te.moe_permute, te.moe_unpermute,
// te.moe_unpermute_grad and te.moe_gather_probs (dialects/TEMoeOps.td,
// docs/moe-permutation.md), in float64. The run-time values are checked
// first, each error naming the operand: `counts` within the capacities,
// split sizes >= 0 summing to at most the rows, sorted_index a permutation
// (the GPU kernels trust them: tejit.pytorch checks what it can). Rows past
// the counts are left 0 here; the GPU does not write them at all.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Frame.h"

#include "llvm/ADT/TypeSwitch.h"

#include <vector>

using namespace mlir;
using namespace tejit::interp;
namespace te = mlir::te;

namespace {

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The real rows of both sides, checked against the capacities `tokens` and
/// `permuted` (0: that side is not bounded by this op).
struct Counts {
  int64_t tokens = 0, permuted = 0;
};

FailureOr<Counts> countsOf(Operation *op, Value counts, int64_t tokens,
                           int64_t permuted, Frame &frame) {
  const Tensor &values = frame.get(counts);
  Counts real{int64_t(values.data[0]), int64_t(values.data[1])};
  if (real.tokens < 0 || real.tokens > tokens)
    return op->emitOpError() << "'counts'[0] (the real tokens) is "
                             << real.tokens << ", outside [0, " << tokens
                             << "] (the token rows the program holds)";
  if (real.permuted < 0 || (permuted > 0 && real.permuted > permuted))
    return op->emitOpError() << "'counts'[1] (the real permuted rows) is "
                             << real.permuted << ", outside [0, " << permuted
                             << "] (the permuted rows the program holds)";
  return real;
}

/// Copies row `from` of `src` into row `to` of `dst` (both [., cols]),
/// times `weight`, added to what is there when `add`.
void moveRow(const Tensor &src, int64_t from, Tensor &dst, int64_t to,
             double weight, bool add) {
  int64_t cols = src.shape.back();
  for (int64_t c = 0; c < cols; ++c) {
    double value = weight * src.data[from * cols + c];
    double &out = dst.data[to * cols + c];
    out = add ? out + value : value;
  }
}

LogicalResult runOp(te::MoeRowMapOp op, Frame &frame) {
  const Tensor &map = frame.get(op.getRoutingMap());
  int64_t tokens = map.shape[0], columns = map.shape[1];
  FailureOr<Counts> real =
      countsOf(op, op.getCounts(), tokens, /*permuted=*/0, frame);
  if (failed(real))
    return failure();
  int64_t experts = op.getNumExperts();
  // column[t][e]: the map's column that routes token t to expert e, or -1.
  std::vector<int64_t> column(real->tokens * experts, -1);
  for (int64_t t = 0; t < real->tokens; ++t)
    for (int64_t c = 0; c < columns; ++c) {
      double value = map.data[t * columns + c];
      if (!op.getIndexMap()) {
        if (value != 0)
          column[t * experts + c] = c;
        continue;
      }
      int64_t expert = int64_t(value);
      if (expert >= 0 && expert < experts && column[t * experts + expert] < 0)
        column[t * experts + expert] = c;
    }
  Tensor rowMap = Tensor::zeros(map.shape);
  for (int64_t t = 0; t < real->tokens; ++t)
    for (int64_t c = 0; c < columns; ++c)
      rowMap.data[t * columns + c] = -1;
  int64_t next = 0;
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t t = 0; t < real->tokens; ++t)
      if (int64_t c = column[t * experts + e]; c >= 0) {
        rowMap.data[t * columns + c] = next < real->permuted ? next : -1;
        ++next;
      }
  return frame.set(op, op.getRowMap(), std::move(rowMap));
}

LogicalResult runOp(te::MoeChunkRowMapOp op, Frame &frame) {
  const Tensor &splits = frame.get(op.getSplitSizes());
  const Tensor &sorted = frame.get(op.getSortedIndex());
  int64_t rows = shapeOf(op.getRowMap())[0];
  FailureOr<Counts> real = countsOf(op, op.getCounts(), rows, 0, frame);
  if (failed(real))
    return failure();
  int64_t chunks = splits.shape[0];
  std::vector<int64_t> inStart(chunks + 1, 0), position(chunks, -1);
  for (int64_t i = 0; i < chunks; ++i) {
    if (splits.data[i] < 0)
      return op.emitOpError()
             << "'split_sizes'[" << i << "] is " << int64_t(splits.data[i])
             << "; sizes must be >= 0";
    inStart[i + 1] = inStart[i] + int64_t(splits.data[i]);
    int64_t index = int64_t(sorted.data[i]);
    if (index < 0 || index >= chunks || position[index] >= 0)
      return op.emitOpError()
             << "'sorted_index' must be a permutation of 0.." << chunks - 1
             << "; element " << i << " is " << index;
    position[index] = i;
  }
  if (inStart[chunks] > rows)
    return op.emitOpError() << "'split_sizes' sum to " << inStart[chunks]
                            << ", more than the " << rows << " rows";
  std::vector<int64_t> outStart(chunks, 0);
  for (int64_t j = 0, at = 0; j < chunks; ++j) {
    int64_t chunk = int64_t(sorted.data[j]);
    outStart[chunk] = at;
    at += int64_t(splits.data[chunk]);
  }
  Tensor rowMap = Tensor::zeros({rows, 1});
  int64_t last = std::min(inStart[chunks], real->tokens);
  for (int64_t i = 0; i < chunks; ++i)
    for (int64_t t = inStart[i]; t < std::min(inStart[i + 1], last); ++t)
      rowMap.data[t] = outStart[i] + (t - inStart[i]);
  return frame.set(op, op.getRowMap(), std::move(rowMap));
}

/// Checks every kept row of `map` (the first `tokens` rows) lies below
/// `permuted`.
LogicalResult checkRowMap(Operation *op, const Tensor &map, int64_t tokens,
                          int64_t permuted) {
  int64_t columns = map.shape[1];
  for (int64_t i = 0; i < tokens * columns; ++i)
    if (map.data[i] >= permuted)
      return op->emitOpError() << "'row_map' sends token " << i / columns
                               << " to row " << map.data[i] << ", past the "
                               << permuted << " real permuted rows (counts[1])";
  return success();
}

LogicalResult runOp(te::MoePermuteOp op, Frame &frame) {
  const Tensor &input = frame.get(op.getInput());
  const Tensor &map = frame.get(op.getRowMap());
  ArrayRef<int64_t> outShape = shapeOf(op.getOutput());
  FailureOr<Counts> real =
      countsOf(op, op.getCounts(), input.shape[0], outShape[0], frame);
  if (failed(real) ||
      failed(checkRowMap(op, map, real->tokens, real->permuted)))
    return failure();
  Tensor output = Tensor::zeros(outShape);
  Tensor probs = Tensor::zeros({outShape[0]});
  const Tensor *inProbs = frame.getOptional(op.getProbs());
  int64_t columns = map.shape[1];
  for (int64_t t = 0; t < real->tokens; ++t)
    for (int64_t c = 0; c < columns; ++c)
      if (int64_t row = int64_t(map.data[t * columns + c]); row >= 0) {
        moveRow(input, t, output, row, 1.0, /*add=*/false);
        if (inProbs)
          probs.data[row] = inProbs->data[t * columns + c];
      }
  if (failed(frame.set(op, op.getOutput(), std::move(output))))
    return failure();
  if (inProbs)
    return frame.set(op, op.getPermutedProbs(), std::move(probs));
  return success();
}

LogicalResult runOp(te::MoeUnpermuteOp op, Frame &frame) {
  const Tensor &input = frame.get(op.getInput());
  const Tensor &map = frame.get(op.getRowMap());
  FailureOr<Counts> real =
      countsOf(op, op.getCounts(), map.shape[0], input.shape[0], frame);
  if (failed(real) ||
      failed(checkRowMap(op, map, real->tokens, real->permuted)))
    return failure();
  const Tensor *probs = frame.getOptional(op.getProbs());
  Tensor output = Tensor::zeros(shapeOf(op.getOutput()));
  int64_t columns = map.shape[1];
  for (int64_t t = 0; t < real->tokens; ++t)
    for (int64_t c = 0; c < columns; ++c)
      if (int64_t row = int64_t(map.data[t * columns + c]); row >= 0)
        moveRow(input, row, output, t,
                probs ? probs->data[t * columns + c] : 1.0, /*add=*/true);
  return frame.set(op, op.getOutput(), std::move(output));
}

LogicalResult runOp(te::MoeUnpermuteGradOp op, Frame &frame) {
  const Tensor &grad = frame.get(op.getGrad());
  const Tensor &input = frame.get(op.getInput());
  const Tensor &map = frame.get(op.getRowMap());
  const Tensor &probs = frame.get(op.getProbs());
  FailureOr<Counts> real =
      countsOf(op, op.getCounts(), map.shape[0], input.shape[0], frame);
  if (failed(real) ||
      failed(checkRowMap(op, map, real->tokens, real->permuted)))
    return failure();
  Tensor inputGrad = Tensor::zeros(input.shape);
  Tensor probsGrad = Tensor::zeros(map.shape);
  int64_t columns = map.shape[1], hidden = grad.shape[1];
  for (int64_t t = 0; t < real->tokens; ++t)
    for (int64_t c = 0; c < columns; ++c) {
      int64_t row = int64_t(map.data[t * columns + c]);
      if (row < 0)
        continue;
      moveRow(grad, t, inputGrad, row, probs.data[t * columns + c], false);
      double dot = 0;
      for (int64_t h = 0; h < hidden; ++h)
        dot += input.data[row * hidden + h] * grad.data[t * hidden + h];
      probsGrad.data[t * columns + c] = dot;
    }
  if (failed(frame.set(op, op.getInputGrad(), std::move(inputGrad))))
    return failure();
  return frame.set(op, op.getProbsGrad(), std::move(probsGrad));
}

LogicalResult runOp(te::MoeGatherProbsOp op, Frame &frame) {
  const Tensor &permuted = frame.get(op.getPermutedProbs());
  const Tensor &map = frame.get(op.getRowMap());
  FailureOr<Counts> real =
      countsOf(op, op.getCounts(), map.shape[0], permuted.shape[0], frame);
  if (failed(real) ||
      failed(checkRowMap(op, map, real->tokens, real->permuted)))
    return failure();
  Tensor output = Tensor::zeros(map.shape);
  for (int64_t i = 0; i < real->tokens * map.shape[1]; ++i)
    if (int64_t row = int64_t(map.data[i]); row >= 0)
      output.data[i] = permuted.data[row];
  return frame.set(op, op.getOutput(), std::move(output));
}

} // namespace

bool tejit::interp::isMoeOp(Operation *op) {
  return isa<te::MoeRowMapOp, te::MoeChunkRowMapOp, te::MoePermuteOp,
             te::MoeUnpermuteOp, te::MoeUnpermuteGradOp, te::MoeGatherProbsOp>(
      op);
}

LogicalResult tejit::interp::runMoeOp(Operation *op, Frame &frame) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<te::MoeRowMapOp, te::MoeChunkRowMapOp, te::MoePermuteOp,
            te::MoeUnpermuteOp, te::MoeUnpermuteGradOp, te::MoeGatherProbsOp>(
          [&](auto op) { return runOp(op, frame); })
      .Default([](Operation *op) {
        return op->emitOpError() << "is not a MoE permutation op";
      });
}
