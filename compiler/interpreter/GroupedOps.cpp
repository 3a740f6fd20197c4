//===- GroupedOps.cpp - the interpreter's GroupedLinear ops ---------------===//
//
// te.grouped_linear (the layer op, from its definition) and the ops it
// lowers to: te.grouped_matmul, te.grouped_bias_grad, te.grouped_quantize,
// te.grouped_amax and te.grouped_scaled_matmul, on the kernels of
// GroupedKernels.cpp; under Float8BlockScaling te.grouped_block_quantize and
// te.grouped_scaled_matmul with block scales, on those of
// GroupedBlockScalingKernels.cpp. `m_splits` holds its values only at run
// time, so each op checks them first (docs/grouped-linear.md): integers >= 0
// summing to at most the rows they cut, and multiples of 16 where an FP8
// GEMM reads the segments (te.grouped_quantize and te.grouped_block_quantize
// with `m_splits`, te.grouped_scaled_matmul, and te.grouped_linear /
// te.grouped_matmul with an `fp8_recipe`, which their lowering turns into
// those). The interpreter computes exactly, as everywhere: f32 accumulation
// and fast_accum are a GPU's, not modelled.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Frame.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tejit::interp;
namespace te = mlir::te;

static ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The segment offsets of `mSplits` over `tokens` rows, or an error at `op`
/// naming `m_splits` and the rule it breaks (mSplitsError).
static FailureOr<SmallVector<int64_t>>
segments(Operation *op, Value mSplits, int64_t tokens, bool fp8, Frame &frame) {
  const Tensor &splits = frame.get(mSplits);
  if (std::string error = mSplitsError(splits, tokens, fp8); !error.empty())
    return op->emitOpError() << error;
  return segmentOffsets(splits);
}

static LogicalResult runOp(te::GroupedLinearOp op, Frame &frame) {
  const Tensor &input = frame.get(op.getInput());
  FailureOr<SmallVector<int64_t>> offsets =
      segments(op, op.getMSplits(), input.numElements() / input.shape.back(),
               bool(op.getFp8RecipeAttr()), frame);
  if (failed(offsets))
    return failure();
  Tensor output = groupedLinear(input, frame.get(op.getWeight()),
                                frame.getOptional(op.getBias()), *offsets);
  // A row-parallel rank's products are summed over the ranks (it has no
  // bias); a column-parallel one reads the whole input and communicates
  // nothing forward.
  if (op.getTpSize() > 1 && op.getParallelMode() == te::ParallelMode::row)
    output = frame.sumOverRanks(output);
  return frame.set(op, op.getOutput(), std::move(output));
}

static LogicalResult runOp(te::GroupedMatmulOp op, Frame &frame) {
  const Tensor &a = frame.get(op.getA()), &b = frame.get(op.getB());
  // Both forms cut the rows of `a`.
  FailureOr<SmallVector<int64_t>> offsets = segments(
      op, op.getMSplits(), a.shape[0], bool(op.getFp8RecipeAttr()), frame);
  if (failed(offsets))
    return failure();
  if (op.isRowsForm())
    return frame.set(op, op.getOutput(),
                     groupedMatmulRows(a, b, *offsets, op.getTransposeB(),
                                       frame.getOptional(op.getBias())));
  return frame.set(op, op.getOutput(),
                   groupedMatmulContraction(a, b, *offsets));
}

static LogicalResult runOp(te::GroupedBiasGradOp op, Frame &frame) {
  const Tensor &grad = frame.get(op.getGrad());
  FailureOr<SmallVector<int64_t>> offsets =
      segments(op, op.getMSplits(), grad.shape[0], /*fp8=*/false, frame);
  if (failed(offsets))
    return failure();
  return frame.set(op, op.getOutput(), groupedBiasGrad(grad, *offsets));
}

/// The segment offsets of a grouped cast or amax of `input`: none for a
/// stacked input (no `m_splits`); `fp8` asks for 16-aligned segments.
static FailureOr<SmallVector<int64_t>> inputSegments(Operation *op, Value input,
                                                     Value mSplits, bool fp8,
                                                     Frame &frame) {
  if (!mSplits)
    return SmallVector<int64_t>();
  return segments(op, mSplits, shapeOf(input)[0], fp8, frame);
}

static LogicalResult runOp(te::GroupedAmaxOp op, Frame &frame) {
  // The amax alone reads no FP8 operand: any segments will do.
  FailureOr<SmallVector<int64_t>> offsets =
      inputSegments(op, op.getInput(), op.getMSplits(), /*fp8=*/false, frame);
  if (failed(offsets))
    return failure();
  return frame.set(op, op.getAmax(),
                   groupedAmax(frame.get(op.getInput()), *offsets));
}

/// The FP8 format of a cast's output.
static Fp8Kind fp8KindOf(Value output) {
  Type element = cast<RankedTensorType>(output.getType()).getElementType();
  return isa<Float8E5M2Type>(element) ? Fp8Kind::E5M2 : Fp8Kind::E4M3;
}

static LogicalResult runOp(te::GroupedQuantizeOp op, Frame &frame) {
  FailureOr<SmallVector<int64_t>> offsets =
      inputSegments(op, op.getInput(), op.getMSplits(), /*fp8=*/true, frame);
  if (failed(offsets))
    return failure();
  GroupedQuantized cast =
      groupedQuantize(frame.get(op.getInput()), frame.get(op.getScale()),
                      *offsets, op.getTranspose(), fp8KindOf(op.getOutput()));
  if (failed(frame.set(op, op.getOutput(), std::move(cast.output))))
    return failure();
  return frame.set(op, op.getAmax(), std::move(cast.amax));
}

static LogicalResult runOp(te::GroupedBlockQuantizeOp op, Frame &frame) {
  // The segments layout also relies on 16-aligned segments: a segment's
  // te.block_quantize scales [ceil(K/128), pad4(m_g)] fill its m_g columns.
  FailureOr<SmallVector<int64_t>> offsets =
      inputSegments(op, op.getInput(), op.getMSplits(), /*fp8=*/true, frame);
  if (failed(offsets))
    return failure();
  BlockQuantized cast = groupedBlockQuantize(
      frame.get(op.getInput()), *offsets, op.getBlockDim(), op.getTranspose(),
      op.getPower_2Scale(), fp8KindOf(op.getOutput()));
  if (failed(frame.set(op, op.getOutput(), std::move(cast.output))))
    return failure();
  return frame.set(op, op.getScaleInv(), std::move(cast.scaleInv));
}

/// te.grouped_scaled_matmul with block scales, after the run-time checks.
/// The verifier has made both operands block-scaled, a in 1-D blocks.
static LogicalResult runBlockScaled(te::GroupedScaledMatmulOp op,
                                    ArrayRef<int64_t> offsets, Frame &frame) {
  const Tensor &a = frame.get(op.getA()), &b = frame.get(op.getB());
  const Tensor &aScaleInv = frame.get(op.getAScaleInv()),
               &bScaleInv = frame.get(op.getBScaleInv());
  if (op.isRowsForm())
    return frame.set(op, op.getOutput(),
                     groupedBlockScaledMatmulRows(
                         a, b, aScaleInv, bScaleInv, op.getBScaling(), offsets,
                         frame.getOptional(op.getBias())));
  return frame.set(
      op, op.getOutput(),
      groupedBlockScaledMatmulContraction(a, b, aScaleInv, bScaleInv, offsets));
}

static LogicalResult runOp(te::GroupedScaledMatmulOp op, Frame &frame) {
  const Tensor &a = frame.get(op.getA()), &b = frame.get(op.getB());
  const Tensor &aScaleInv = frame.get(op.getAScaleInv()),
               &bScaleInv = frame.get(op.getBScaleInv());
  // Rows form: segments of a's rows; contraction form: of its columns.
  bool rows = op.isRowsForm();
  FailureOr<SmallVector<int64_t>> offsets =
      segments(op, op.getMSplits(), a.shape[rows ? 0 : 1], /*fp8=*/true, frame);
  if (failed(offsets))
    return failure();
  if (op.getAScaling() != 0)
    return runBlockScaled(op, *offsets, frame);
  if (rows)
    return frame.set(op, op.getOutput(),
                     groupedScaledMatmulRows(a, b, aScaleInv, bScaleInv,
                                             *offsets,
                                             frame.getOptional(op.getBias())));
  return frame.set(
      op, op.getOutput(),
      groupedScaledMatmulContraction(a, b, aScaleInv, bScaleInv, *offsets));
}

LogicalResult tejit::interp::runGroupedOp(Operation *op, Frame &frame) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<te::GroupedLinearOp, te::GroupedMatmulOp, te::GroupedBiasGradOp,
            te::GroupedAmaxOp, te::GroupedQuantizeOp,
            te::GroupedBlockQuantizeOp, te::GroupedScaledMatmulOp>(
          [&](auto op) { return runOp(op, frame); })
      .Default([](Operation *op) {
        return op->emitOpError() << "is not supported by the te interpreter";
      });
}
