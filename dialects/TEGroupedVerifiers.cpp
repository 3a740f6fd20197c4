//===- TEGroupedVerifiers.cpp - rules of te.grouped_linear and its ops ----===//
//
// GroupedLinear (docs/grouped-linear.md): the layer op and the grouped GEMM,
// bias-gradient, quantize and amax ops it lowers to. Every op that reads
// `m_splits` needs it as an i32 [G] vector; G is also the leading dim of the
// per-group operands.
//
//===----------------------------------------------------------------------===//
#include "dialects/GroupedBlockScaleLayout.h"
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

static bool isHighPrecision(Type type) {
  return type.isBF16() || type.isF16() || type.isF32();
}

/// `m_splits` is an i32 [G] vector with G >= 1; returns G.
static FailureOr<int64_t> numGroups(Operation *op, Value mSplits) {
  RankedTensorType type = typeOf(mSplits);
  if (type.getRank() != 1 || !type.getElementType().isInteger(32) ||
      type.getDimSize(0) < 1)
    return op->emitOpError()
           << "'m_splits' must be an i32 vector [num_gemms] with num_gemms "
              ">= 1, got "
           << type;
  return type.getDimSize(0);
}

static LogicalResult expectShape(Operation *op, Value value, StringRef name,
                                 ArrayRef<int64_t> shape, StringRef rule) {
  if (typeOf(value).getShape() != shape) {
    InFlightDiagnostic diag = op->emitOpError() << "'" << name << "' must be ";
    diag << rule << " = [";
    llvm::interleaveComma(shape, diag);
    return diag << "], got " << value.getType();
  }
  return success();
}

/// An f32 vector of one value per group (scales, scale inverses, amaxes).
static LogicalResult expectGroupVector(Operation *op, Value value,
                                       StringRef name, int64_t groups) {
  auto expected =
      RankedTensorType::get({groups}, Float32Type::get(op->getContext()));
  if (value.getType() != expected)
    return op->emitOpError()
           << "'" << name << "' must be " << expected
           << " (one value per group), got " << value.getType();
  return success();
}

LogicalResult GroupedLinearOp::verify() {
  LayerChecker checker(*this);
  if (failed(checker.floatTensor(getInput(), "input", 2)) ||
      failed(checker.floatTensor(getWeight(), "weight", 3)))
    return failure();
  // Tensor parallelism (docs/grouped-linear.md): operand shapes are one
  // rank's; a row-parallel op sums its output over the ranks and has no
  // bias to add after the sum.
  int64_t tpSize = getTpSize();
  if (tpSize < 1)
    return emitOpError() << "'tp_size' must be >= 1, got " << tpSize;
  bool row = tpSize > 1 && getParallelMode() == ParallelMode::row;
  if (tpSize > 1 && !getParallelMode())
    return emitOpError() << "'tp_size' " << tpSize
                         << " needs a 'parallel_mode' (column or row)";
  if (row && getBias())
    return emitOpError() << "a row-parallel te.grouped_linear (tp_size "
                         << tpSize << ") takes no 'bias'";
  FailureOr<int64_t> groups = numGroups(*this, getMSplits());
  if (failed(groups))
    return failure();
  ArrayRef<int64_t> shape = typeOf(getInput()).getShape();
  ArrayRef<int64_t> weight = typeOf(getWeight()).getShape();
  int64_t in = shape.back(), out = weight[1];
  SmallVector<int64_t> outShape(shape);
  outShape.back() = out;
  if (failed(checker.param(getWeight(), "weight", {*groups, out, in},
                           "[num_gemms, out_features, in_features]")) ||
      failed(checker.optionalParam(getBias(), "bias", {*groups, out},
                                   "[num_gemms, out_features]")) ||
      failed(checker.param(getOutput(), "output", outShape,
                           "[leading dims of 'input', out_features]")))
    return failure();
  // Block casts of the token segments are 1-D (blocks along K for the
  // forward, along each segment's tokens for wgrad).
  if (auto block = dyn_cast_or_null<BlockScalingAttr>(getFp8RecipeAttr()))
    for (auto [name, dim] :
         {std::pair{"x_block_scaling_dim", block.getXBlockScalingDim()},
          std::pair{"grad_block_scaling_dim", block.getGradBlockScalingDim()}})
      if (dim != 1)
        return emitOpError()
               << "Float8BlockScaling with " << name << " = " << dim
               << " is not supported by te.grouped_linear "
                  "(token segments are cast in 1-D blocks; "
                  "use 1)";
  // The transposed FP8 copies the wgrad GEMMs read have the token count as
  // their leading dim, and segment g starts at a column multiple of 16.
  int64_t tokens = 1;
  for (int64_t dim : shape.drop_back())
    tokens *= dim;
  return checker.fp8Dims(
      getFp8RecipeAttr(),
      {{"the token count (product of the leading dims of 'input')", tokens, 16},
       {row ? "in_features / tp_size" : "in_features", in, 16},
       {tpSize > 1 && !row ? "out_features / tp_size" : "out_features", out,
        16}});
}

LogicalResult GroupedMatmulOp::verify() {
  FailureOr<int64_t> groups = numGroups(*this, getMSplits());
  if (failed(groups))
    return failure();
  ArrayRef<int64_t> a = typeOf(getA()).getShape(),
                    b = typeOf(getB()).getShape();
  if (a.size() != 2)
    return emitOpError() << "'a' must be a matrix [T, .], got "
                         << getA().getType();
  if (isRowsForm()) {
    if (getTransposeA())
      return emitOpError() << "the rows form (3-D 'b') takes no transpose_a";
    if (b[0] != *groups)
      return emitOpError() << "'b' must hold num_gemms = " << *groups
                           << " matrices, got " << getB().getType();
    int64_t k = getTransposeB() ? b[2] : b[1],
            n = getTransposeB() ? b[1] : b[2];
    if (a[1] != k)
      return emitOpError() << "contracting dims differ: " << a[1] << " (a) vs "
                           << k << " (b)";
    if (getBias() && failed(expectShape(*this, getBias(), "bias", {*groups, n},
                                        "[num_gemms, N]")))
      return failure();
    return expectShape(*this, getOutput(), "output", {a[0], n}, "[T, N]");
  }
  if (b.size() != 2 || !getTransposeA() || getTransposeB())
    return emitOpError() << "'b' must be [num_gemms, ., .] (rows form) or a "
                            "matrix [T, N] with transpose_a alone (contraction "
                            "form), got "
                         << getB().getType();
  if (a[0] != b[0])
    return emitOpError() << "'a' [T, M] and 'b' [T, N] must share T, got "
                         << a[0] << " and " << b[0];
  if (getBias())
    return emitOpError() << "the contraction form takes no bias";
  return expectShape(*this, getOutput(), "output", {*groups, a[1], b[1]},
                     "[num_gemms, M, N]");
}

LogicalResult GroupedBiasGradOp::verify() {
  FailureOr<int64_t> groups = numGroups(*this, getMSplits());
  if (failed(groups))
    return failure();
  RankedTensorType grad = typeOf(getGrad());
  if (grad.getRank() != 2 || !isHighPrecision(grad.getElementType()))
    return emitOpError() << "'grad' must be a bf16/f16/f32 matrix [T, N], got "
                         << grad;
  return expectShape(*this, getOutput(), "output",
                     {*groups, grad.getDimSize(1)}, "[num_gemms, N]");
}

/// The groups of a grouped quantize or amax input: row segments of a
/// matrix with `m_splits`, else the leading index of a rank-3 tensor.
static FailureOr<int64_t> inputGroups(Operation *op, Value input,
                                      Value mSplits) {
  RankedTensorType type = typeOf(input);
  if (!isHighPrecision(type.getElementType()))
    return op->emitOpError()
           << "'input' must be bf16, f16 or f32, got " << type;
  if (mSplits) {
    if (type.getRank() != 2)
      return op->emitOpError()
             << "'input' must be a matrix [T, K] with 'm_splits', got " << type;
    return numGroups(op, mSplits);
  }
  if (type.getRank() != 3 || type.getDimSize(0) < 1)
    return op->emitOpError() << "'input' must be [G, R, C] with G >= 1 "
                                "without 'm_splits', got "
                             << type;
  return type.getDimSize(0);
}

/// The FP8 output of a grouped cast is shaped like its input, with the last
/// two dims swapped by `transpose`; returns that shape.
static FailureOr<SmallVector<int64_t>>
expectCastOutput(Operation *op, Value input, Value output, bool transpose) {
  SmallVector<int64_t> shape(typeOf(input).getShape());
  if (transpose)
    std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
  RankedTensorType out = typeOf(output);
  if (!isFp8(out.getElementType()) || out.getShape() != ArrayRef(shape))
    return op->emitOpError()
           << "'output' must be an f8E4M3FN or f8E5M2 "
              "tensor shaped like 'input'"
           << (transpose ? " transposed per group" : "") << ", got " << out;
  return shape;
}

int64_t GroupedQuantizeOp::getNumGroups() {
  return typeOf(getScale()).getDimSize(0);
}

LogicalResult GroupedQuantizeOp::verify() {
  FailureOr<int64_t> groups = inputGroups(*this, getInput(), getMSplits());
  if (failed(groups))
    return failure();
  FailureOr<SmallVector<int64_t>> shape =
      expectCastOutput(*this, getInput(), getOutput(), getTranspose());
  if (failed(shape))
    return failure();
  if (failed(expectGroupVector(*this, getScale(), "scale", *groups)))
    return failure();
  return expectGroupVector(*this, getAmax(), "amax", *groups);
}

LogicalResult GroupedBlockQuantizeOp::verify() {
  FailureOr<int64_t> groups = inputGroups(*this, getInput(), getMSplits());
  if (failed(groups))
    return failure();
  int64_t blockDim = getBlockDim();
  if (blockDim != 1 && blockDim != 2)
    return emitOpError() << "'block_dim' must be 1 or 2, got " << blockDim;
  if (getMSplits() && blockDim != 1)
    return emitOpError() << "token segments ('m_splits' given) are cast in "
                            "1-D blocks: 'block_dim' must be 1, got "
                         << blockDim;
  FailureOr<SmallVector<int64_t>> shape =
      expectCastOutput(*this, getInput(), getOutput(), getTranspose());
  if (failed(shape))
    return failure();
  namespace layout = tejit::groupedblockscale;
  layout::Layout kind = !getMSplits()    ? layout::Layout::Stacked
                        : getTranspose() ? layout::Layout::TransposedSegments
                                         : layout::Layout::Segments;
  std::vector<int64_t> expected =
      layout::castScaleShape(kind, shape->data(), *groups, blockDim);
  StringRef rule =
      kind == layout::Layout::Stacked
          ? "[G, s0, s1], s = te.block_quantize's scale shape of one group"
      : kind == layout::Layout::Segments ? "[ceil(K/128), T]"
                                         : "[ceil(T/128) + G, pad4(K)]";
  RankedTensorType scale = typeOf(getScaleInv());
  if (!scale.getElementType().isF32())
    return emitOpError() << "'scale_inv' must be f32, got " << scale;
  return expectShape(*this, getScaleInv(), "scale_inv", expected, rule);
}

LogicalResult GroupedAmaxOp::verify() {
  FailureOr<int64_t> groups = inputGroups(*this, getInput(), getMSplits());
  if (failed(groups))
    return failure();
  return expectGroupVector(*this, getAmax(), "amax", *groups);
}

LogicalResult GroupedScaledMatmulOp::verify() {
  FailureOr<int64_t> groups = numGroups(*this, getMSplits());
  if (failed(groups))
    return failure();
  RankedTensorType a = typeOf(getA()), b = typeOf(getB());
  if (a.getRank() != 2 || !isFp8(a.getElementType()) ||
      !isFp8(b.getElementType()) || (b.getRank() != 2 && b.getRank() != 3))
    return emitOpError() << "operands must be an FP8 matrix 'a' and FP8 'b' "
                            "[G, N, K] or [N, T], got "
                         << a << " and " << b;
  if (isa<Float8E5M2Type>(a.getElementType()) &&
      isa<Float8E5M2Type>(b.getElementType()))
    return emitOpError() << "E5M2 x E5M2 GEMMs are not supported by FP8 "
                            "tensor cores";
  int64_t aScaling = getAScaling(), bScaling = getBScaling();
  if ((aScaling == 0 && bScaling > 0) || (aScaling > 0 && bScaling == 0))
    return emitOpError() << "'a_scale_inv' and 'b_scale_inv' must both be "
                            "f32 [G] (one scale per group) or both block "
                            "scales, got "
                         << getAScaleInv().getType() << " and "
                         << getBScaleInv().getType();
  if (aScaling == 0 || bScaling == 0) {
    if (failed(
            expectGroupVector(*this, getAScaleInv(), "a_scale_inv", *groups)) ||
        failed(
            expectGroupVector(*this, getBScaleInv(), "b_scale_inv", *groups)))
      return failure();
  } else if (aScaling < 0 || bScaling < 0) {
    return emitOpError()
           << "'a_scale_inv' and 'b_scale_inv' must be f32 [G] or "
              "te.grouped_block_quantize's block scales of the operands "
              "(dialects/GroupedBlockScaleLayout.h), got "
           << getAScaleInv().getType() << " and " << getBScaleInv().getType();
  } else if (aScaling == 2 && bScaling == 2) {
    return emitOpError() << "two 2-D block-scaled operands: cuBLASLt has no "
                            "such GEMM";
  } else if (getFastAccum()) {
    return emitOpError() << "block-scaled GEMMs take no fast_accum";
  }
  RankedTensorType out = typeOf(getOutput());
  if (!isHighPrecision(out.getElementType()))
    return emitOpError() << "'output' must be bf16, f16 or f32, got " << out;
  // Block-scaled GEMMs have no bias epilogue: the runtime writes the bias
  // into the output rows and accumulates onto them, in the output's type.
  if (aScaling > 0 && getBias() &&
      typeOf(getBias()).getElementType() != out.getElementType())
    return emitOpError() << "a block-scaled grouped GEMM's 'bias' must have "
                            "the output's element type "
                         << out.getElementType() << ", got "
                         << getBias().getType();
  ArrayRef<int64_t> as = a.getShape(), bs = b.getShape();
  if (isRowsForm()) {
    if (bs[0] != *groups || bs[2] != as[1])
      return emitOpError() << "'b' must be [num_gemms, N, K] = [" << *groups
                           << ", N, " << as[1] << "], got " << b;
    if (getBias() && failed(expectShape(*this, getBias(), "bias",
                                        {*groups, bs[1]}, "[num_gemms, N]")))
      return failure();
    return expectShape(*this, getOutput(), "output", {as[0], bs[1]}, "[T, N]");
  }
  if (as[1] != bs[1])
    return emitOpError() << "'a' [M, T] and 'b' [N, T] must share T, got "
                         << as[1] << " and " << bs[1];
  if (getBias())
    return emitOpError() << "the contraction form takes no bias";
  return expectShape(*this, getOutput(), "output", {*groups, as[0], bs[0]},
                     "[num_gemms, M, N]");
}

/// How a grouped GEMM operand is scaled, read off its scale_inv: 0 = f32 [G],
/// 1 or 2 = blocks in GroupedBlockScaleLayout.h's layout for that operand,
/// -1 otherwise. `stacked` is b of the rows form ([G, N, K]); `segmentsOfRows`
/// is a of the rows form ([T, K] in row segments); otherwise the operand is
/// [R, T] in column segments (the contraction form).
static int64_t groupedScaling(Value scaleInv, Value operand, int64_t groups,
                              bool stacked, bool segmentsOfRows) {
  namespace layout = tejit::groupedblockscale;
  auto scale = dyn_cast<RankedTensorType>(scaleInv.getType());
  if (!scale || !scale.getElementType().isF32())
    return -1;
  ArrayRef<int64_t> dims = scale.getShape(), shape = typeOf(operand).getShape();
  if (dims == ArrayRef<int64_t>{groups})
    return 0;
  if (shape.size() != (stacked ? 3u : 2u))
    return -1;
  layout::Layout kind = stacked          ? layout::Layout::Stacked
                        : segmentsOfRows ? layout::Layout::Segments
                                         : layout::Layout::TransposedSegments;
  int64_t found = -1;
  // Segments are 1-D; stacked matrices 1-D or 2-D (-1 when both fit).
  for (int64_t blockDim : {1, 2}) {
    if (blockDim == 2 && !stacked)
      break;
    if (dims == ArrayRef<int64_t>(layout::castScaleShape(kind, shape.data(),
                                                         groups, blockDim)))
      found = found == -1 ? blockDim : -1;
  }
  return found;
}

int64_t GroupedScaledMatmulOp::getAScaling() {
  int64_t groups = typeOf(getMSplits()).getDimSize(0);
  return groupedScaling(getAScaleInv(), getA(), groups, /*stacked=*/false,
                        /*segmentsOfRows=*/isRowsForm());
}

int64_t GroupedScaledMatmulOp::getBScaling() {
  int64_t groups = typeOf(getMSplits()).getDimSize(0);
  return groupedScaling(getBScaleInv(), getB(), groups,
                        /*stacked=*/isRowsForm(), /*segmentsOfRows=*/false);
}
