//===- TEQuantizedVerifiers.cpp - rules of the FP8 quantization ops
//--------===//
#include "dialects/BlockScaleLayout.h"
#include "dialects/LayerChecks.h"
#include "dialects/TEDialect.h"

using namespace mlir;
using namespace mlir::te;

static RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

static bool isFp8(Type type) {
  return isa<Float8E4M3FNType, Float8E5M2Type>(type);
}

/// One f32 meta slot: a scale, scale_inv or amax.
static LogicalResult expectSlot(Operation *op, Value value, StringRef name) {
  auto slot = RankedTensorType::get({1}, Float32Type::get(op->getContext()));
  if (value.getType() != slot)
    return op->emitOpError() << "'" << name << "' must be " << slot << ", got "
                             << value.getType();
  return success();
}

static LogicalResult expectFp8Type(Operation *op, Type type) {
  if (!isFp8(type))
    return op->emitOpError()
           << "'fp8_type' must be f8E4M3FN or f8E5M2, got " << type;
  return success();
}

LogicalResult QuantizeOp::verify() {
  RankedTensorType in = typeOf(getInput()), out = typeOf(getOutput());
  if (!isFp8(out.getElementType()) || out.getShape() != in.getShape())
    return emitOpError() << "'output' must be an f8E4M3FN or f8E5M2 tensor "
                            "shaped like 'input', got "
                         << out;
  if (failed(expectSlot(*this, getScale(), "scale")))
    return failure();
  return expectSlot(*this, getAmax(), "amax");
}

LogicalResult AmaxOp::verify() { return expectSlot(*this, getAmax(), "amax"); }

LogicalResult ComputeScaleOp::verify() {
  if (failed(expectFp8Type(*this, getFp8Type())))
    return failure();
  // One slot, or one per group of a te.grouped_quantize.
  RankedTensorType amax = typeOf(getAmax());
  if (amax.getRank() != 1 || !amax.getElementType().isF32() ||
      amax.getDimSize(0) < 1)
    return emitOpError() << "'amax' must be an f32 vector, got " << amax;
  if (getScale().getType() != amax || getScaleInv().getType() != amax)
    return emitOpError() << "'scale' and 'scale_inv' must be " << amax
                         << " like 'amax'";
  return success();
}

LogicalResult ScaledMatmulOp::verify() {
  RankedTensorType a = typeOf(getA()), b = typeOf(getB());
  if (a.getRank() != 2 || b.getRank() != 2 || !isFp8(a.getElementType()) ||
      !isFp8(b.getElementType()))
    return emitOpError() << "operands must be FP8 matrices, got " << a
                         << " and " << b;
  if (isa<Float8E5M2Type>(a.getElementType()) &&
      isa<Float8E5M2Type>(b.getElementType()))
    return emitOpError() << "E5M2 x E5M2 GEMMs are not supported by FP8 "
                            "tensor cores";
  if (a.getDimSize(1) != b.getDimSize(1))
    return emitOpError() << "'a' [M, K] and 'b' [N, K] must share K, got "
                         << a.getDimSize(1) << " and " << b.getDimSize(1);
  RankedTensorType out = typeOf(getOutput());
  Type element = out.getElementType();
  if (out.getRank() != 2 || out.getDimSize(0) != a.getDimSize(0) ||
      out.getDimSize(1) != b.getDimSize(0) ||
      !(element.isBF16() || element.isF16() || element.isF32()))
    return emitOpError() << "'output' must be a bf16/f16/f32 [M, N] = ["
                         << a.getDimSize(0) << ", " << b.getDimSize(0)
                         << "] matrix, got " << out;
  int64_t aScaling = getAScaling(), bScaling = getBScaling();
  auto expectScale = [&](Value scaleInv, int64_t scaling, StringRef name,
                         RankedTensorType operand) -> LogicalResult {
    if (scaling >= 0)
      return success();
    auto rows = operand.getDimSize(0), cols = operand.getDimSize(1);
    auto vec = tejit::blockscale::scaleShape(rows, cols, 1);
    auto blk = tejit::blockscale::scaleShape(rows, cols, 2);
    if (vec == blk)
      return emitOpError() << "'" << name << "' cannot say whether its " << rows
                           << " x " << cols
                           << " operand has 1-D or 2-D blocks (both scale "
                              "shapes are the same); block-scaled operands "
                              "need more than 4 rows or 128 columns";
    return emitOpError() << "'" << name
                         << "' must be tensor<1xf32> (one scale) or block "
                            "scales: tensor<"
                         << vec[0] << "x" << vec[1] << "xf32> (1-D) or tensor<"
                         << blk[0] << "x" << blk[1] << "xf32> (2-D), got "
                         << scaleInv.getType();
  };
  if (failed(expectScale(getAScaleInv(), aScaling, "a_scale_inv", a)) ||
      failed(expectScale(getBScaleInv(), bScaling, "b_scale_inv", b)))
    return failure();
  if ((aScaling == 0) != (bScaling == 0))
    return emitOpError() << "operands must both be block-scaled or both have "
                            "one scale";
  if (aScaling == 2 && bScaling == 2)
    return emitOpError() << "cannot pair two 2-D block-scaled operands";
  if (aScaling != 0 && getFastAccum())
    return emitOpError() << "block-scaled GEMMs cannot use fast_accum";
  return success();
}

/// 0 (one scale), 1 or 2 (block dims) or -1 (neither) for `scaleInv`
/// scaling `operand`.
static int64_t scalingOf(Value scaleInv, Value operand) {
  auto scale = dyn_cast<RankedTensorType>(scaleInv.getType());
  RankedTensorType matrix = typeOf(operand);
  if (!scale || !scale.getElementType().isF32() || matrix.getRank() != 2)
    return -1;
  return tejit::blockscale::scalingOf(scale.getRank(), scale.getShape().data(),
                                      matrix.getDimSize(0),
                                      matrix.getDimSize(1));
}

int64_t ScaledMatmulOp::getAScaling() {
  return scalingOf(getAScaleInv(), getA());
}
int64_t ScaledMatmulOp::getBScaling() {
  return scalingOf(getBScaleInv(), getB());
}

LogicalResult BlockQuantizeOp::verify() {
  RankedTensorType in = typeOf(getInput()), out = typeOf(getOutput());
  Type element = in.getElementType();
  if (in.getRank() != 2 ||
      !(element.isBF16() || element.isF16() || element.isF32()))
    return emitOpError() << "'input' must be a bf16/f16/f32 matrix, got " << in;
  int64_t rows = in.getDimSize(0), cols = in.getDimSize(1);
  if (getTranspose())
    std::swap(rows, cols);
  if (!isFp8(out.getElementType()) || out.getRank() != 2 ||
      out.getDimSize(0) != rows || out.getDimSize(1) != cols)
    return emitOpError() << "'output' must be an f8E4M3FN or f8E5M2 [" << rows
                         << ", " << cols << "] matrix ('input'"
                         << (getTranspose() ? " transposed" : "") << "), got "
                         << out;
  if (getBlockDim() != 1 && getBlockDim() != 2)
    return emitOpError() << "'block_dim' must be 1 or 2, got " << getBlockDim();
  auto shape = tejit::blockscale::scaleShape(rows, cols, getBlockDim());
  auto expected = RankedTensorType::get({shape[0], shape[1]},
                                        Float32Type::get(getContext()));
  if (getScaleInv().getType() != expected)
    return emitOpError() << "'scale_inv' must be " << expected
                         << " (dialects/BlockScaleLayout.h), got "
                         << getScaleInv().getType();
  return success();
}

LogicalResult AmaxAllReduceOp::verify() {
  RankedTensorType type = typeOf(getAmaxes());
  if (type.getRank() != 1 || !type.getElementType().isF32() ||
      getOutput().getType() != type)
    return emitOpError() << "amaxes must be one f32 vector, got " << type;
  return success();
}

LogicalResult DelayedScalingUpdateOp::verify() {
  if (failed(expectFp8Type(*this, getFp8Type())))
    return failure();
  RankedTensorType amaxes = typeOf(getAmaxes());
  if (amaxes.getRank() != 1 || !amaxes.getElementType().isF32())
    return emitOpError() << "'amaxes' must be an f32 vector, got " << amaxes;
  int64_t slots = amaxes.getDimSize(0);
  int64_t length = getRecipe().getAmaxHistoryLen();
  auto history =
      RankedTensorType::get({length, slots}, amaxes.getElementType());
  if (getAmaxHistory().getType() != history ||
      getNewAmaxHistory().getType() != history)
    return emitOpError() << "'amax_history' must be " << history
                         << " (amax_history_len x slots)";
  for (Value value : {getScale(), getNewScale(), getNewScaleInv()})
    if (value.getType() != amaxes)
      return emitOpError() << "scales must be " << amaxes << " like 'amaxes'";
  return success();
}

// FP8 attention (docs/fp8-attention.md).

LogicalResult DequantizeOp::verify() {
  RankedTensorType in = typeOf(getInput()), out = typeOf(getOutput());
  if (!isFp8(in.getElementType()))
    return emitOpError() << "'input' must be an f8E4M3FN or f8E5M2 tensor, got "
                         << in;
  if (failed(expectSlot(*this, getScaleInv(), "scale_inv")))
    return failure();
  Type element = out.getElementType();
  if (out.getShape() != in.getShape() ||
      !(element.isBF16() || element.isF16() || element.isF32()))
    return emitOpError() << "'output' must be a bf16/f16/f32 tensor shaped "
                            "like 'input', got "
                         << out;
  return success();
}

/// What te.fp8_attention and te.fp8_attention_bwd check alike: FP8 E4M3
/// q, k, v in te.attention's 4-D layouts (not thd) with a head dim cuDNN's
/// FP8 engines take, the query mask, the meta slots among `slots`, the FP8
/// output and the statistics. Returns q's type.
template <typename OpT>
static FailureOr<RankedTensorType>
verifyFp8AttentionCommon(OpT op, ArrayRef<std::pair<Value, StringRef>> slots) {
  if (op.getQkvFormat() == QkvFormat::thd)
    return op.emitOpError() << "takes sbhd or bshd; packed sequences "
                               "(qkv_format = thd) are not supported by FP8 "
                               "attention";
  for (auto [value, name] :
       {std::pair(op.getQuery(), "query"), std::pair(op.getKey(), "key"),
        std::pair(op.getValue(), "value")})
    if (!isa<Float8E4M3FNType>(typeOf(value).getElementType()))
      return op.emitOpError()
             << "'" << name << "' must be f8E4M3FN, got " << value.getType();
  FailureOr<SmallVector<int64_t>> stats =
      verifyAttentionOperands(op, op.getQuery(), op.getKey(), op.getValue(),
                              op.getRngState(), op.getQkvFormat());
  if (failed(stats) || failed(verifyQueryMask(op, op.getQueryMask(), *stats,
                                              op.getAttnMaskType())))
    return failure();
  RankedTensorType query = typeOf(op.getQuery());
  int64_t headDim = query.getDimSize(3);
  if (!isFp8AttentionHeadDim(headDim))
    return op.emitOpError()
           << "head dim must be a multiple of " << kFp8AttentionHeadDimMultiple
           << " and at most " << kMaxFp8AttentionHeadDim
           << " for FP8 attention, got " << headDim;
  for (auto [value, name] : slots)
    if (failed(expectSlot(op, value, name)))
      return failure();
  // cuDNN's FP8 engines fault on attention dropout (docs/fp8-attention.md).
  if (op.getDropout().convertToDouble() != 0.0)
    return op.emitOpError() << "'dropout' must be 0: FP8 attention does not "
                               "support attention dropout, got "
                            << op.getDropout().convertToDouble();
  auto lse = RankedTensorType::get(*stats, Float32Type::get(op.getContext()));
  if (failed(expectType(op, op.getOutput(), "output", query)) ||
      failed(expectType(op, op.getSoftmaxLse(), "softmax_lse", lse)))
    return failure();
  return query;
}

LogicalResult Fp8AttentionOp::verify() {
  return failure(failed(
      verifyFp8AttentionCommon(*this, {{getQkvScaleInv(), "qkv_scale_inv"},
                                       {getOScale(), "o_scale"},
                                       {getAmaxS(), "amax_s"},
                                       {getAmaxO(), "amax_o"}})));
}

LogicalResult Fp8AttentionBwdOp::verify() {
  FailureOr<RankedTensorType> query =
      verifyFp8AttentionCommon(*this, {{getQkvScaleInv(), "qkv_scale_inv"},
                                       {getOScaleInv(), "o_scale_inv"},
                                       {getGradScaleInv(), "grad_scale_inv"},
                                       {getDpScale(), "dp_scale"},
                                       {getDpScaleInv(), "dp_scale_inv"},
                                       {getDqkvScale(), "dqkv_scale"},
                                       {getAmaxDp(), "amax_dp"},
                                       {getAmaxDq(), "amax_dq"},
                                       {getAmaxDk(), "amax_dk"},
                                       {getAmaxDv(), "amax_dv"}});
  if (failed(query))
    return failure();
  // dO and the gradients are in the backward format, E5M2 or E4M3.
  RankedTensorType grad = typeOf(getGrad());
  Type fp8 = grad.getElementType();
  if (!isFp8(fp8) || grad.getShape() != query->getShape())
    return emitOpError() << "'grad' must be an f8E4M3FN or f8E5M2 tensor of "
                            "query's shape, got "
                         << grad;
  auto like = [&](Value value) {
    return RankedTensorType::get(typeOf(value).getShape(), fp8);
  };
  return failure(
      failed(
          expectType(*this, getQueryGrad(), "query_grad", like(getQuery()))) ||
      failed(expectType(*this, getKeyGrad(), "key_grad", like(getKey()))) ||
      failed(
          expectType(*this, getValueGrad(), "value_grad", like(getValue()))));
}
