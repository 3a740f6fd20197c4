//===- QuantizedOps.cpp - the interpreter's FP8 quantization ops ----------===//
//
// te.quantize, te.dequantize, te.amax, te.compute_scale, te.scaled_matmul,
// te.amax_allreduce and te.delayed_scaling_update, on the kernels of
// ScalingKernels.cpp; te.block_quantize and te.scaled_matmul with block
// scales (Float8BlockScaling) on those of BlockScalingKernels.cpp;
// te.fp8_attention(_bwd) (docs/fp8-attention.md) on te.attention(_bwd)'s
// kernels. Other ops go to runGroupedOp (GroupedOps.cpp: GroupedLinear's
// grouped ops).
// Conventions:
// - An FP8 tensor is a tensor of doubles holding values its FP8 type
//   represents; te.quantize produces them, and shape ops (te.transpose,
//   te.reshape, te.slice, ...) move them like any other tensor. Operands of
//   te.scaled_matmul are trusted to be representable, not checked.
// - Amaxes are computed exactly, in double (te.quantize and te.amax);
//   te.compute_scale and te.delayed_scaling_update read their f32 operands
//   as float32 values and compute in float32, so that scales are bit-exact.
// - te.dequantize is exact in double, like every other op's output (no
//   rounding to its bf16/f16 element type; see Interpreter.h).
// - FP8 attention is exact attention on the dequantized FP8 operands, its
//   outputs cast as te.quantize casts. The GPU also casts the softmax
//   output P (with a fixed scale) and dS (with dp_scale) to FP8 inside
//   cuDNN; the reference does not, so dp_scale is read by nothing here.
// - te.amax_allreduce is the maximum over the ranks of Options::collectives
//   (the identity in one process).
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Frame.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace tejit::interp;
namespace te = mlir::te;

/// The FP8 format of an FP8 element type (the verifiers allow only these two).
static Fp8Kind fp8KindOf(Type type) {
  return isa<Float8E5M2Type>(type) ? Fp8Kind::E5M2 : Fp8Kind::E4M3;
}

/// The element type of a tensor value.
static Type elementTypeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getElementType();
}

/// The value of a one-element meta slot (a scale, scale_inv or amax).
static double slotValue(const Tensor &slot) { return slot.data.front(); }

/// A tensor<1xf32> meta slot holding `value`.
static Tensor makeSlot(double value) { return Tensor({1}, {value}); }

static LogicalResult runOp(te::QuantizeOp op, Frame &frame) {
  const Tensor &input = frame.get(op.getInput());
  Fp8Kind kind = fp8KindOf(elementTypeOf(op.getOutput()));
  Tensor output = quantize(input, slotValue(frame.get(op.getScale())), kind);
  // Computed before any result is bound: binding may move `input`.
  Tensor amax = makeSlot(absMax(input));
  if (failed(frame.set(op, op.getOutput(), std::move(output))))
    return failure();
  return frame.set(op, op.getAmax(), std::move(amax));
}

static LogicalResult runOp(te::DequantizeOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   dequantize(frame.get(op.getInput()),
                              slotValue(frame.get(op.getScaleInv()))));
}

/// Binds `op`'s one-slot results `slots` to `values`.
static LogicalResult setSlots(Operation *op, Frame &frame, ValueRange slots,
                              ArrayRef<double> values) {
  for (auto [slot, value] : llvm::zip_equal(slots, values))
    if (failed(frame.set(op, slot, makeSlot(value))))
      return failure();
  return success();
}

static LogicalResult runOp(te::Fp8AttentionOp op, Frame &frame) {
  FailureOr<AttentionParams> params = fp8AttentionParams(op, frame);
  if (failed(params))
    return failure();
  double qkvScaleInv = slotValue(frame.get(op.getQkvScaleInv()));
  AttentionOutputs result =
      attention(dequantize(frame.get(op.getQuery()), qkvScaleInv),
                dequantize(frame.get(op.getKey()), qkvScaleInv),
                dequantize(frame.get(op.getValue()), qkvScaleInv), *params);
  double amaxO = absMax(result.output);
  Tensor output = quantize(result.output, slotValue(frame.get(op.getOScale())),
                           fp8KindOf(elementTypeOf(op.getOutput())));
  if (failed(frame.set(op, op.getOutput(), std::move(output))) ||
      failed(frame.set(op, op.getSoftmaxLse(), std::move(result.softmaxLse))))
    return failure();
  return setSlots(op, frame, {op.getAmaxS(), op.getAmaxO()},
                  {result.maxProbability, amaxO});
}

static LogicalResult runOp(te::Fp8AttentionBwdOp op, Frame &frame) {
  FailureOr<AttentionParams> params = fp8AttentionParams(op, frame);
  if (failed(params))
    return failure();
  double qkvScaleInv = slotValue(frame.get(op.getQkvScaleInv()));
  // D = rowsum(dO * O) reads the dequantized FP8 output, as cuDNN does.
  AttentionGrads grads =
      attentionBwd(dequantize(frame.get(op.getGrad()),
                              slotValue(frame.get(op.getGradScaleInv()))),
                   dequantize(frame.get(op.getQuery()), qkvScaleInv),
                   dequantize(frame.get(op.getKey()), qkvScaleInv),
                   dequantize(frame.get(op.getValue()), qkvScaleInv),
                   dequantize(frame.get(op.getOutput()),
                              slotValue(frame.get(op.getOScaleInv()))),
                   frame.get(op.getSoftmaxLse()), *params);
  double amaxDq = absMax(grads.query), amaxDk = absMax(grads.key),
         amaxDv = absMax(grads.value);
  double scale = slotValue(frame.get(op.getDqkvScale()));
  Fp8Kind kind = fp8KindOf(elementTypeOf(op.getQueryGrad()));
  if (failed(frame.set(op, op.getQueryGrad(),
                       quantize(grads.query, scale, kind))) ||
      failed(
          frame.set(op, op.getKeyGrad(), quantize(grads.key, scale, kind))) ||
      failed(
          frame.set(op, op.getValueGrad(), quantize(grads.value, scale, kind))))
    return failure();
  // cuDNN's amax_dp is of dS times the softmax scale: the gradient of the
  // raw q k^T, which its FP8 matmuls for dq and dk read.
  double amaxDp = grads.maxScoreGrad * std::fabs(params->softmaxScale);
  return setSlots(
      op, frame,
      {op.getAmaxDp(), op.getAmaxDq(), op.getAmaxDk(), op.getAmaxDv()},
      {amaxDp, amaxDq, amaxDk, amaxDv});
}

static LogicalResult runOp(te::BlockQuantizeOp op, Frame &frame) {
  BlockQuantized cast = blockQuantize(
      frame.get(op.getInput()), op.getBlockDim(), op.getTranspose(),
      op.getPower_2Scale(), fp8KindOf(elementTypeOf(op.getOutput())));
  if (failed(frame.set(op, op.getOutput(), std::move(cast.output))))
    return failure();
  return frame.set(op, op.getScaleInv(), std::move(cast.scaleInv));
}

static LogicalResult runOp(te::AmaxOp op, Frame &frame) {
  return frame.set(op, op.getAmax(),
                   makeSlot(absMax(frame.get(op.getInput()))));
}

static LogicalResult runOp(te::ComputeScaleOp op, Frame &frame) {
  // Element-wise: one slot, or one per group of a te.grouped_quantize.
  const Tensor &amax = frame.get(op.getAmax());
  Tensor scale = Tensor::zeros(amax.shape), scaleInv = scale;
  for (size_t i = 0; i < amax.data.size(); ++i) {
    Fp8Scale slot = currentScale(amax.data[i], fp8KindOf(op.getFp8Type()),
                                 op.getPower_2Scale());
    scale.data[i] = slot.scale;
    scaleInv.data[i] = slot.scaleInv;
  }
  if (failed(frame.set(op, op.getScale(), std::move(scale))))
    return failure();
  return frame.set(op, op.getScaleInv(), std::move(scaleInv));
}

static LogicalResult runOp(te::ScaledMatmulOp op, Frame &frame) {
  // Block scales: the verifier has checked that the scale_inv shapes name a
  // scaling (neither is -1) and that both operands are block-scaled.
  if (int64_t aScaling = op.getAScaling(); aScaling != 0)
    return frame.set(
        op, op.getOutput(),
        blockScaledMatmul(frame.get(op.getA()), frame.get(op.getB()),
                          frame.get(op.getAScaleInv()), aScaling,
                          frame.get(op.getBScaleInv()), op.getBScaling()));
  // fast_accum only changes how a GPU accumulates; the reference is exact.
  return frame.set(op, op.getOutput(),
                   scaledMatmul(frame.get(op.getA()), frame.get(op.getB()),
                                slotValue(frame.get(op.getAScaleInv())),
                                slotValue(frame.get(op.getBScaleInv()))));
}

static LogicalResult runOp(te::AmaxAllReduceOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   frame.maxOverRanks(frame.get(op.getAmaxes())));
}

static LogicalResult runOp(te::DelayedScalingUpdateOp op, Frame &frame) {
  te::DelayedScalingAttr recipe = op.getRecipe();
  DelayedScalingParams params;
  params.kind = fp8KindOf(op.getFp8Type());
  params.margin = recipe.getMargin();
  params.mostRecent =
      recipe.getAmaxComputeAlgo() == te::AmaxComputeAlgo::most_recent;
  DelayedScalingState state = delayedScalingUpdate(
      frame.get(op.getAmaxHistory()), frame.get(op.getScale()),
      frame.get(op.getAmaxes()), params);
  if (failed(frame.set(op, op.getNewAmaxHistory(),
                       std::move(state.amaxHistory))) ||
      failed(frame.set(op, op.getNewScale(), std::move(state.scale))))
    return failure();
  return frame.set(op, op.getNewScaleInv(), std::move(state.scaleInv));
}

LogicalResult tejit::interp::runQuantizedOp(Operation *op, Frame &frame) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<te::QuantizeOp, te::DequantizeOp, te::BlockQuantizeOp, te::AmaxOp,
            te::ComputeScaleOp, te::ScaledMatmulOp, te::AmaxAllReduceOp,
            te::DelayedScalingUpdateOp, te::Fp8AttentionOp,
            te::Fp8AttentionBwdOp>([&](auto op) { return runOp(op, frame); })
      .Default([&](Operation *op) { return runGroupedOp(op, frame); });
}
