//===- TEPrimitiveVerifiers.cpp - shape rules of primitive te ops
//----------===//
//
// Primitive ops are produced by passes rather than written by users, so
// these checks guard the passes: each message still names the operand.
//
//===----------------------------------------------------------------------===//
#include "dialects/LayerChecks.h"
#include "dialects/TEDialect.h"

using namespace mlir;
using namespace mlir::te;

static RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

static ArrayRef<int64_t> shapeOf(Value value) {
  return typeOf(value).getShape();
}

/// `value` must have exactly `expected` type; `what` names it.
static LogicalResult expectType(Operation *op, Value value, StringRef what,
                                Type expected) {
  if (value.getType() != expected)
    return op->emitOpError() << "'" << what << "' must be " << expected
                             << ", got " << value.getType();
  return success();
}

static RankedTensorType withShape(Value like, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, typeOf(like).getElementType());
}

static RankedTensorType withLastDim(Value like, int64_t last) {
  SmallVector<int64_t> shape(shapeOf(like));
  shape.back() = last;
  return withShape(like, shape);
}

/// f32 statistics with one value per row (all dims but the last).
static RankedTensorType rowStatsType(Value input) {
  return RankedTensorType::get(shapeOf(input).drop_back(),
                               Float32Type::get(input.getContext()));
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = typeOf(getInput()), out = getType();
  if (in.getElementType() != out.getElementType() ||
      in.getNumElements() != out.getNumElements())
    return emitOpError() << "must keep the element type and count: " << in
                         << " -> " << out;
  return success();
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (in.size() != 2)
    return emitOpError() << "'input' must be a matrix, got "
                         << getInput().getType();
  return expectType(*this, getOutput(), "output",
                    withShape(getInput(), {in[1], in[0]}));
}

LogicalResult SliceOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getOutput());
  int64_t offset = getOffsetAttr().getInt();
  if (in.size() != out.size() || in.drop_back() != out.drop_back() ||
      typeOf(getInput()).getElementType() !=
          typeOf(getOutput()).getElementType())
    return emitOpError() << "'output' must match 'input' in all dims but the "
                            "last";
  if (offset < 0 || offset + out.back() > in.back())
    return emitOpError() << "slice [" << offset << ", " << offset + out.back()
                         << ") is outside the last dim (" << in.back() << ")";
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input";
  int64_t total = 0;
  Value first = getInputs().front();
  for (Value input : getInputs()) {
    if (withLastDim(input, shapeOf(first).back()) != first.getType())
      return emitOpError() << "inputs must match in all dims but the last";
    total += shapeOf(input).back();
  }
  return expectType(*this, getOutput(), "output", withLastDim(first, total));
}

LogicalResult BiasAddOp::verify() {
  if (failed(expectType(*this, getBias(), "bias",
                        withShape(getInput(), {shapeOf(getInput()).back()}))))
    return failure();
  return expectType(*this, getOutput(), "output", getInput().getType());
}

LogicalResult BiasGradOp::verify() {
  return expectType(*this, getOutput(), "output",
                    withShape(getGrad(), {shapeOf(getGrad()).back()}));
}

/// The last dim an activation produces from `inputWidth` channels.
static FailureOr<int64_t> activationWidth(Operation *op, Activation activation,
                                          int64_t inputWidth) {
  if (!isGatedActivation(activation))
    return inputWidth;
  if (inputWidth % 2 != 0)
    return op->emitOpError()
           << "gated activation " << stringifyActivation(activation)
           << " needs an even last dim, got " << inputWidth;
  return inputWidth / 2;
}

LogicalResult ActivationOp::verify() {
  FailureOr<int64_t> width =
      activationWidth(*this, getActivation(), shapeOf(getInput()).back());
  if (failed(width))
    return failure();
  return expectType(*this, getOutput(), "output",
                    withLastDim(getInput(), *width));
}

LogicalResult ActivationGradOp::verify() {
  FailureOr<int64_t> width =
      activationWidth(*this, getActivation(), shapeOf(getInput()).back());
  if (failed(width) || failed(expectType(*this, getGrad(), "grad",
                                         withLastDim(getInput(), *width))))
    return failure();
  return expectType(*this, getOutput(), "output", getInput().getType());
}

static LogicalResult verifyRate(Operation *op, APFloat rate) {
  double value = rate.convertToDouble();
  if (!(value >= 0.0 && value < 1.0))
    return op->emitOpError() << "'rate' must be in [0, 1), got " << value;
  return success();
}

static RankedTensorType rngStateType(MLIRContext *context) {
  return RankedTensorType::get({2}, IntegerType::get(context, 64));
}

LogicalResult DropoutOp::verify() {
  if (failed(verifyRate(*this, getRate())) ||
      failed(expectType(*this, getRngState(), "rng_state",
                        rngStateType(getContext()))))
    return failure();
  if (std::optional<uint64_t> group = getGroup()) {
    auto type = cast<RankedTensorType>(getInput().getType());
    int64_t size = static_cast<int64_t>(*group);
    if (size < 1 || type.getRank() == 0 || size % type.getShape().back() ||
        type.getNumElements() % size)
      return emitOpError() << "'group' must be a multiple of the last dim "
                              "that divides the element count, got "
                           << size << " for " << type;
  }
  return expectType(*this, getOutput(), "output", getInput().getType());
}

LogicalResult MatmulOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getA()), b = shapeOf(getB());
  if (a.size() != 2 || b.size() != 2)
    return emitOpError() << "operands must be matrices, got "
                         << getA().getType() << " and " << getB().getType();
  int64_t m = getTransposeA() ? a[1] : a[0], k = getTransposeA() ? a[0] : a[1];
  int64_t kb = getTransposeB() ? b[1] : b[0], n = getTransposeB() ? b[0] : b[1];
  if (k != kb)
    return emitOpError() << "contracting dims differ: " << k << " (a) vs " << kb
                         << " (b)";
  ArrayRef<int64_t> out = shapeOf(getOutput());
  if (out.size() != 2 || out[0] != m || out[1] != n)
    return emitOpError() << "'output' must be [" << m << ", " << n << "], got "
                         << getOutput().getType();
  return success();
}

/// Norm parameters are vectors of the input's width and dtype.
static LogicalResult verifyNormParam(Operation *op, Value input, Value param,
                                     StringRef name) {
  return expectType(op, param, name, withShape(input, {shapeOf(input).back()}));
}

LogicalResult LayerNormFwdOp::verify() {
  RankedTensorType stats = rowStatsType(getInput());
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(verifyNormParam(*this, getInput(), getBeta(), "beta")) ||
      failed(expectType(*this, getOutput(), "output", getInput().getType())) ||
      failed(expectType(*this, getMean(), "mean", stats)))
    return failure();
  return expectType(*this, getRsigma(), "rsigma", stats);
}

LogicalResult LayerNormBwdOp::verify() {
  RankedTensorType stats = rowStatsType(getInput());
  Type paramType = getGamma().getType();
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(expectType(*this, getGrad(), "grad", getInput().getType())) ||
      failed(expectType(*this, getMean(), "mean", stats)) ||
      failed(expectType(*this, getRsigma(), "rsigma", stats)) ||
      failed(expectType(*this, getInputGrad(), "input_grad",
                        getInput().getType())) ||
      failed(expectType(*this, getGammaGrad(), "gamma_grad", paramType)))
    return failure();
  return expectType(*this, getBetaGrad(), "beta_grad", paramType);
}

LogicalResult RMSNormFwdOp::verify() {
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(expectType(*this, getOutput(), "output", getInput().getType())))
    return failure();
  return expectType(*this, getRsigma(), "rsigma", rowStatsType(getInput()));
}

LogicalResult RMSNormBwdOp::verify() {
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(expectType(*this, getGrad(), "grad", getInput().getType())) ||
      failed(
          expectType(*this, getRsigma(), "rsigma", rowStatsType(getInput()))) ||
      failed(expectType(*this, getInputGrad(), "input_grad",
                        getInput().getType())))
    return failure();
  return expectType(*this, getGammaGrad(), "gamma_grad", getGamma().getType());
}

LogicalResult RotaryOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (in.size() != 4 || in[3] % 2 != 0)
    return emitOpError() << "'input' must be [s, b, h, d] (or bshd) with an "
                            "even d, got "
                         << getInput().getType();
  int64_t seq = in[getQkvFormat() == QkvFormat::sbhd ? 0 : 1];
  // The table's width r: the rotated channels (partial rotary below d).
  auto freqs = cast<RankedTensorType>(getFreqs().getType());
  int64_t rotated = freqs.getRank() == 4 ? freqs.getShape()[3] : 0;
  if (rotated <= 0 || rotated % 2 != 0 || rotated > in[3])
    return emitOpError() << "'freqs' must be f32 [s, 1, 1, r] with r even "
                            "and at most the head dim "
                         << in[3] << ", got " << freqs;
  auto freqsType = RankedTensorType::get({seq, 1, 1, rotated},
                                         Float32Type::get(getContext()));
  if (failed(expectType(*this, getFreqs(), "freqs", freqsType)))
    return failure();
  return expectType(*this, getOutput(), "output", getInput().getType());
}

/// q/k/v layouts shared by the two attention primitives; returns the
/// (batch, heads, s_q) of the softmax statistics.
static FailureOr<SmallVector<int64_t>>
verifyAttentionOperands(Operation *op, Value query, Value key, Value value,
                        Value rngState, QkvFormat format) {
  ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key);
  if (q.size() != 4 || k.size() != 4 || key.getType() != value.getType())
    return op->emitOpError() << "query/key/value must be 4-D, key and value "
                                "alike";
  unsigned seqDim = format == QkvFormat::sbhd ? 0 : 1;
  unsigned batchDim = 1 - seqDim;
  if (k[batchDim] != q[batchDim] || k[3] != q[3] || k[2] < 1 ||
      q[2] % k[2] != 0)
    return op->emitOpError() << "key/value must share query's batch and head "
                                "dim, with query heads a multiple of theirs";
  if (rngState && failed(expectType(op, rngState, "rng_state",
                                    rngStateType(op->getContext()))))
    return failure();
  return SmallVector<int64_t>{q[batchDim], q[2], q[seqDim]};
}

/// `query_mask`: i1 [b, 1, 1, s_q] (s_q from the statistics' shape), with
/// a padding mask type only.
static LogicalResult verifyQueryMask(Operation *op, Value queryMask,
                                     ArrayRef<int64_t> stats,
                                     AttnMaskType maskType) {
  if (!queryMask)
    return success();
  if (maskType != AttnMaskType::padding &&
      maskType != AttnMaskType::padding_causal)
    return op->emitOpError() << "'query_mask' needs the padding or "
                                "padding_causal mask type";
  auto type = RankedTensorType::get({stats[0], 1, 1, stats[2]},
                                    IntegerType::get(op->getContext(), 1));
  return expectType(op, queryMask, "query_mask", type);
}

LogicalResult AttentionOp::verify() {
  FailureOr<SmallVector<int64_t>> stats = verifyAttentionOperands(
      *this, getQuery(), getKey(), getValue(), getRngState(), getQkvFormat());
  if (failed(stats) ||
      failed(
          verifyQueryMask(*this, getQueryMask(), *stats, getAttnMaskType())) ||
      failed(
          verifyAttentionWindow(*this, getWindowSize(), getAttnMaskType())) ||
      failed(expectType(*this, getOutput(), "output", getQuery().getType())))
    return failure();
  return expectType(
      *this, getSoftmaxLse(), "softmax_lse",
      RankedTensorType::get(*stats, Float32Type::get(getContext())));
}

LogicalResult AttentionBwdOp::verify() {
  FailureOr<SmallVector<int64_t>> stats = verifyAttentionOperands(
      *this, getQuery(), getKey(), getValue(), getRngState(), getQkvFormat());
  if (failed(stats) ||
      failed(
          verifyQueryMask(*this, getQueryMask(), *stats, getAttnMaskType())) ||
      failed(
          verifyAttentionWindow(*this, getWindowSize(), getAttnMaskType())) ||
      failed(expectType(*this, getGrad(), "grad", getQuery().getType())) ||
      failed(expectType(*this, getOutput(), "output", getQuery().getType())) ||
      failed(expectType(
          *this, getSoftmaxLse(), "softmax_lse",
          RankedTensorType::get(*stats, Float32Type::get(getContext())))) ||
      failed(expectType(*this, getQueryGrad(), "query_grad",
                        getQuery().getType())) ||
      failed(expectType(*this, getKeyGrad(), "key_grad", getKey().getType())))
    return failure();
  return expectType(*this, getValueGrad(), "value_grad", getValue().getType());
}
