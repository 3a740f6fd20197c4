//===- PlaceScaling.cpp - te-place-scaling: FP8 GEMMs with TE's scaling
//----===//
//
// Forward functions first: their GEMMs' operands are cast to the forward FP8
// format. Then each backward function: the gradient operand of dgrad/wgrad
// is cast to the backward format there, and the forward operand is found
// back in the forward function (through the te.forward_arg/forward_result
// interface and recomputed views), whose FP8 copy, transposed, is saved
// for the backward GEMM.
//
// Under DelayedScaling with fp8_dpa, te.attention and its te.attention_bwd
// become FP8 attention the same way (docs/fp8-attention.md): casts and meta
// slots in each function, and the forward's FP8 tensors and scales saved
// for the backward.
//
//===----------------------------------------------------------------------===//
#include "compiler/passes/FunctionScaler.h"
#include "compiler/passes/Passes.h"
#include "dialects/LayerChecks.h"

#include "mlir/AsmParser/AsmParser.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringSet.h"

namespace tejit {
#define GEN_PASS_DEF_TEPLACESCALING
#include "compiler/passes/Passes.h.inc"
} // namespace tejit

using namespace mlir;
using namespace mlir::te;
using namespace tejit;

namespace {

/// A forward function's FP8 state, which its backward function reuses.
struct ForwardState {
  ForwardState(func::FuncOp function, bool training)
      : function(function), scaler(function, "fp8_meta.fwd"),
        training(training) {}

  func::FuncOp function;
  FunctionScaler scaler;
  /// Whether a backward function reads this one's tensors.
  bool training;
  /// The FP8 copy of each GEMM operand of the forward function.
  DenseMap<Value, Fp8Value> operands;
  /// The per-group FP8 copy of each grouped GEMM operand, by (operand,
  /// m_splits; null for stacked weights).
  DenseMap<std::pair<Value, Value>, Fp8Value> groupedOperands;
  /// The `o` slot's scale_inv of each te.fp8_attention, which dequantizes
  /// its output (and, saved, dO's partner O in the backward).
  DenseMap<Operation *, Value> outputScaleInvs;
};

/// The recipe that runs attention op `op` (te.attention or
/// te.attention_bwd) in FP8: its own, or `overrideRecipe` when `overridden`,
/// when that is a DelayedScaling with fp8_dpa; else null.
template <typename OpT>
DelayedScalingAttr fp8AttentionRecipe(OpT op, bool overridden,
                                      FP8RecipeAttrInterface overrideRecipe) {
  auto recipe = dyn_cast_or_null<DelayedScalingAttr>(
      overridden ? overrideRecipe
                 : FP8RecipeAttrInterface(op.getFp8RecipeAttr()));
  return recipe && recipe.getFp8Dpa() ? recipe : nullptr;
}

/// `value`'s shape with element type `element`.
RankedTensorType withElement(Value value, Type element) {
  return RankedTensorType::get(
      cast<RankedTensorType>(value.getType()).getShape(), element);
}

RankedTensorType slotType(MLIRContext *context) {
  return RankedTensorType::get({1}, Float32Type::get(context));
}

/// The largest of `amaxes` (each tensor<1xf32>): te.amax of their concat,
/// as the max |.| of non-negative values is their max.
Value maxOf(OpBuilder &builder, Location loc, ArrayRef<Value> amaxes) {
  if (amaxes.size() == 1)
    return amaxes.front();
  MLIRContext *context = builder.getContext();
  auto all = RankedTensorType::get({int64_t(amaxes.size())},
                                   Float32Type::get(context));
  Value joined = builder.create<ConcatOp>(loc, all, amaxes);
  return builder.create<AmaxOp>(loc, slotType(context), joined);
}

/// The attributes te.attention (or te.attention_bwd) `op` shares with its
/// FP8 form, with the FP8 op's operand segments: `fixed` operands, then the
/// mask, query mask and RNG state when present.
template <typename OpT>
SmallVector<NamedAttribute> fp8AttentionAttrs(OpT op, int32_t fixed) {
  SmallVector<NamedAttribute> attrs;
  for (StringRef name : {"attn_mask_type", "qkv_format", "softmax_scale",
                         "dropout", "stream", "pad_keys_only"})
    if (Attribute attr = op->getAttr(name))
      attrs.push_back(
          NamedAttribute(StringAttr::get(op.getContext(), name), attr));
  SmallVector<int32_t> segments(fixed, 1);
  for (Value optional :
       {op.getAttentionMask(), op.getQueryMask(), op.getRngState()})
    segments.push_back(optional ? 1 : 0);
  Builder builder(op.getContext());
  attrs.push_back(builder.getNamedAttr("operandSegmentSizes",
                                       builder.getDenseI32ArrayAttr(segments)));
  return attrs;
}

/// The mask, query mask and RNG state of `op`, those present.
template <typename OpT> SmallVector<Value> attentionOptionals(OpT op) {
  SmallVector<Value> values;
  for (Value optional :
       {op.getAttentionMask(), op.getQueryMask(), op.getRngState()})
    if (optional)
      values.push_back(optional);
  return values;
}

/// Refuses what cuDNN's FP8 attention does not run, naming the attribute.
LogicalResult checkFp8Attention(AttentionOp attention) {
  auto refuse = [&]() -> InFlightDiagnostic {
    return attention.emitOpError() << "runs in FP8 (fp8_dpa), which does not "
                                      "support ";
  };
  if (attention.getBiasType() != AttnBiasType::no_bias || attention.getBias() ||
      attention.getAlibiSlopes())
    return refuse() << "bias_type = "
                    << stringifyAttnBiasType(attention.getBiasType())
                    << " (an attention bias or ALiBi)";
  if (attention.getQkvFormat() == QkvFormat::thd)
    return refuse() << "qkv_format = thd (packed sequences)";
  if (std::optional<ArrayRef<int64_t>> window = attention.getWindowSize())
    return refuse() << "window_size = " << formatShape(*window)
                    << " (sliding-window attention)";
  int64_t headDim =
      cast<RankedTensorType>(attention.getQuery().getType()).getDimSize(3);
  if (!isFp8AttentionHeadDim(headDim))
    return refuse() << "head dim " << headDim << " (it needs a multiple of "
                    << kFp8AttentionHeadDimMultiple << ", at most "
                    << kMaxFp8AttentionHeadDim << ")";
  // cuDNN's FP8 engines fault on it (docs/fp8-attention.md).
  if (attention.getDropout().convertToDouble() != 0.0)
    return refuse() << "dropout = " << attention.getDropout().convertToDouble()
                    << " (attention dropout; set it to 0)";
  return success();
}

/// `value`'s FP8 copy oriented as te.scaled_matmul wants it: K-major.
Fp8Value kMajor(FunctionScaler &scaler, Fp8Value value, bool transposed) {
  return transposed ? scaler.transpose(value) : value;
}

/// Rejects FP8 GEMM shapes cuBLASLt cannot run: FP8 operands need the K
/// (leading) dim divisible by 16 and the other dim by 8.
LogicalResult checkFp8Shape(MatmulOp matmul, Value a, Value b) {
  auto shapeA = cast<RankedTensorType>(a.getType()).getShape();
  auto shapeB = cast<RankedTensorType>(b.getType()).getShape();
  StringRef role =
      matmul.getRole() ? stringifyGemmRole(*matmul.getRole()) : "FP8";
  if (shapeA[1] % 16 != 0)
    return matmul.emitOpError()
           << role << " GEMM in FP8 needs its contracting dim divisible by 16"
           << (matmul.getRole() == GemmRole::wgrad
                   ? " (for wgrad, the token count)"
                   : "")
           << ", got " << shapeA[1];
  if (shapeA[0] % 8 != 0 || shapeB[0] % 8 != 0)
    return matmul.emitOpError()
           << role << " GEMM in FP8 needs its output dims divisible by 8, got "
           << shapeA[0] << " x " << shapeB[0];
  return success();
}

/// Replaces `matmul` by an FP8 GEMM of K-major operands `a` [M, K], `b` [N, K].
LogicalResult replaceByScaled(MatmulOp matmul, Fp8Value a, Fp8Value b) {
  if (failed(checkFp8Shape(matmul, a.data, b.data)))
    return failure();
  OpBuilder builder(matmul);
  // TE's GEMM settings: fast accumulation for fprop, except under block
  // scaling, whose cuBLASLt kernels have none.
  bool fastAccum =
      (!matmul.getRole() || *matmul.getRole() == GemmRole::fprop) &&
      !a.blockDim && !b.blockDim;
  Value scaled = builder.create<ScaledMatmulOp>(
      matmul.getLoc(), matmul.getType(), a.data, b.data, a.scaleInv, b.scaleInv,
      fastAccum ? builder.getUnitAttr() : nullptr);
  matmul.replaceAllUsesWith(scaled);
  matmul.erase();
  return success();
}

/// Rejects grouped FP8 GEMM shapes cuBLASLt cannot run (the segment sizes,
/// known at run time, are the runtime's to check: multiples of 16).
LogicalResult checkGroupedFp8Shape(GroupedMatmulOp matmul, Value a, Value b) {
  auto shapeA = cast<RankedTensorType>(a.getType()).getShape();
  auto shapeB = cast<RankedTensorType>(b.getType()).getShape();
  StringRef role =
      matmul.getRole() ? stringifyGemmRole(*matmul.getRole()) : "FP8";
  if (matmul.isRowsForm()) {
    // a [T, K], b [G, N, K]: K leads both; N is the output's width.
    if (shapeA[1] % 16 != 0 || shapeB[1] % 8 != 0)
      return matmul.emitOpError()
             << "grouped " << role
             << " GEMM in FP8 needs its contracting dim divisible by 16 and "
                "its output width by 8, got K = "
             << shapeA[1] << " and N = " << shapeB[1];
    return success();
  }
  // a [M, T], b [N, T]: the segments are column ranges of the token dim.
  if (shapeA[1] % 16 != 0 || shapeA[0] % 8 != 0 || shapeB[0] % 8 != 0)
    return matmul.emitOpError()
           << "grouped " << role
           << " GEMM in FP8 needs the token count divisible by 16 and its "
              "output dims by 8, got T = "
           << shapeA[1] << ", " << shapeA[0] << " x " << shapeB[0];
  return success();
}

/// Replaces `matmul` by a grouped FP8 GEMM of K-major operands: `a` [T, K]
/// and `b` [G, N, K] (rows form), or `a` [M, T] and `b` [N, T]
/// (contraction form).
LogicalResult replaceByGroupedScaled(GroupedMatmulOp matmul, Fp8Value a,
                                     Fp8Value b) {
  if (failed(checkGroupedFp8Shape(matmul, a.data, b.data)))
    return failure();
  OpBuilder builder(matmul);
  // As te.scaled_matmul: fast accumulation for fprop only, and never under
  // block scaling.
  bool fastAccum =
      (!matmul.getRole() || *matmul.getRole() == GemmRole::fprop) &&
      !a.blockDim && !b.blockDim;
  Value scaled = builder.create<GroupedScaledMatmulOp>(
      matmul.getLoc(), matmul.getType(), a.data, b.data, a.scaleInv, b.scaleInv,
      matmul.getMSplits(), matmul.getBias(),
      fastAccum ? builder.getUnitAttr() : nullptr);
  matmul.replaceAllUsesWith(scaled);
  matmul.erase();
  return success();
}

/// The recipes grouped GEMMs take: any, but under Float8BlockScaling the
/// token segments (x and dY) are cast in 1-D blocks, as te.grouped_linear's
/// verifier requires; a `recipe` override reaches here unverified.
LogicalResult checkGroupedRecipe(GroupedMatmulOp matmul,
                                 FP8RecipeAttrInterface recipe) {
  auto block = dyn_cast<BlockScalingAttr>(recipe);
  if (!block)
    return success();
  for (auto [name, dim] :
       {std::pair{"x_block_scaling_dim", block.getXBlockScalingDim()},
        std::pair{"grad_block_scaling_dim", block.getGradBlockScalingDim()}})
    if (dim != 1)
      return matmul.emitOpError()
             << "is a grouped GEMM (GroupedLinear), whose token segments "
                "Float8BlockScaling casts in 1-D blocks; got "
             << name << " = " << dim << " (use 1)";
  return success();
}

/// Finds the forward value that backward value `value` stands for: a forward
/// argument, a saved forward result, or a view of one recomputed backward.
Value forwardValueOf(Value value, func::FuncOp forward) {
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto backward = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    unsigned index = arg.getArgNumber();
    if (auto attr =
            backward.getArgAttrOfType<IntegerAttr>(index, "te.forward_arg"))
      return forward.getArgument(attr.getInt());
    if (auto attr =
            backward.getArgAttrOfType<IntegerAttr>(index, "te.forward_result"))
      return forward.front().getTerminator()->getOperand(attr.getInt());
    return nullptr;
  }
  Operation *view = value.getDefiningOp();
  if (!isa<ReshapeOp, SliceOp, TransposeOp>(view))
    return nullptr;
  Value source = forwardValueOf(view->getOperand(0), forward);
  if (!source)
    return nullptr;
  for (Operation *user : source.getUsers())
    if (user->getName() == view->getName() &&
        user->getAttrDictionary() == view->getAttrDictionary() &&
        user->getResultTypes() == view->getResultTypes())
      return user->getResult(0);
  return nullptr;
}

class BackwardScaler {
public:
  BackwardScaler(func::FuncOp backward, ForwardState &forward)
      : backward(backward), forward(forward), scaler(backward, "fp8_meta.bwd") {
  }

  LogicalResult scale(MatmulOp matmul, FP8RecipeAttrInterface recipe);
  LogicalResult scale(GroupedMatmulOp matmul, FP8RecipeAttrInterface recipe);
  LogicalResult scale(AttentionBwdOp attention, DelayedScalingAttr recipe);
  void finish() {
    scaler.finish();
    pruneSavedValues();
  }

private:
  /// A forward value as a backward argument (saved by the forward function).
  Value save(Value value);
  /// A forward value as a backward argument: the forward's argument itself
  /// when it is one (an FP8 weight's transpose and scale_inv), else saved.
  Value fromForward(Value value);
  void pruneSavedValues();

  func::FuncOp backward;
  ForwardState &forward;
  FunctionScaler scaler;
  DenseMap<Value, Value> savedArgs;
};

Value BackwardScaler::fromForward(Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg || arg.getOwner() != &forward.function.front())
    return save(value);
  if (Value passed = savedArgs.lookup(value))
    return passed;
  unsigned index = backward.getNumArguments();
  OpBuilder builder(backward.getContext());
  backward.insertArgument(
      index, value.getType(),
      builder.getDictionaryAttr(builder.getNamedAttr(
          "te.forward_arg", builder.getI64IntegerAttr(arg.getArgNumber()))),
      backward.getLoc());
  return savedArgs[value] = backward.getArgument(index);
}

Value BackwardScaler::save(Value value) {
  if (Value arg = savedArgs.lookup(value))
    return arg;
  func::FuncOp function = forward.function;
  auto returnOp = cast<func::ReturnOp>(function.front().getTerminator());
  unsigned result = function.getNumResults();
  OpBuilder builder(function.getContext());
  returnOp.getOperandsMutable().append(value);
  function.insertResult(
      result, value.getType(),
      builder.getDictionaryAttr(builder.getNamedAttr(
          "te.name", builder.getStringAttr("saved.fp8." + Twine(result)))));
  unsigned index = backward.getNumArguments();
  backward.insertArgument(
      index, value.getType(),
      builder.getDictionaryAttr(builder.getNamedAttr(
          "te.forward_result", builder.getI64IntegerAttr(result))),
      backward.getLoc());
  return savedArgs[value] = backward.getArgument(index);
}

LogicalResult BackwardScaler::scale(MatmulOp matmul,
                                    FP8RecipeAttrInterface recipe) {
  if (!matmul.getRole() || *matmul.getRole() == GemmRole::fprop)
    return matmul.emitOpError()
           << "in a backward function must be a dgrad or wgrad GEMM";
  // dgrad (dY W) and wgrad (dY^T X): operand a is the output gradient,
  // operand b the forward tensor.
  Fp8Value gradient =
      scaler.quantize(matmul.getA(), recipe, recipe.getBackwardType(), matmul,
                      OperandRole::grad);
  Value source = forwardValueOf(matmul.getB(), forward.function);
  auto it = source ? forward.operands.find(source) : forward.operands.end();
  if (it == forward.operands.end())
    return matmul.emitOpError()
           << "reads a forward tensor that no FP8 forward GEMM quantized";
  Fp8Value saved = kMajor(forward.scaler, it->second, !matmul.getTransposeB());
  Fp8Value b = saved;
  b.data = fromForward(saved.data);
  b.scaleInv = fromForward(saved.scaleInv);
  return replaceByScaled(matmul,
                         kMajor(scaler, gradient, matmul.getTransposeA()), b);
}

LogicalResult BackwardScaler::scale(GroupedMatmulOp matmul,
                                    FP8RecipeAttrInterface recipe) {
  if (!matmul.getRole() || *matmul.getRole() == GemmRole::fprop)
    return matmul.emitOpError()
           << "in a backward function must be a dgrad or wgrad GEMM";
  if (failed(checkGroupedRecipe(matmul, recipe)))
    return failure();
  // dgrad (rows form: dY [T, N] by W [G, N, K], read transposed) and wgrad
  // (contraction form: dY^T and X^T, both [., T]). Each operand is either a
  // forward tensor, whose per-group FP8 copy the forward function made (and
  // now saves, K-major), or a gradient computed here, cast per group in the
  // backward format. The forward's m_splits is the backward's forward
  // argument.
  Value mSplits = matmul.getMSplits();
  Value forwardSplits = forwardValueOf(mSplits, forward.function);
  bool rows = matmul.isRowsForm();
  auto operand = [&](Value value, bool grouped,
                     bool transposed) -> FailureOr<Fp8Value> {
    if (Value source = forwardValueOf(value, forward.function)) {
      auto it = forward.groupedOperands.find(
          {source, grouped ? forwardSplits : Value()});
      if (it == forward.groupedOperands.end())
        return matmul.emitOpError() << "reads a forward tensor that no FP8 "
                                       "grouped forward GEMM quantized";
      Fp8Value saved = kMajor(forward.scaler, it->second, transposed);
      Fp8Value result = saved;
      result.data = fromForward(saved.data);
      result.scaleInv = fromForward(saved.scaleInv);
      return result;
    }
    if (!grouped)
      return matmul.emitOpError()
             << "reads stacked matrices that are no forward tensor";
    Fp8Value gradient =
        scaler.quantizeGrouped(value, mSplits, recipe, recipe.getBackwardType(),
                               matmul, OperandRole::grad);
    return kMajor(scaler, gradient, transposed);
  };
  FailureOr<Fp8Value> a = operand(matmul.getA(), /*grouped=*/true,
                                  /*transposed=*/!rows);
  if (failed(a))
    return failure();
  FailureOr<Fp8Value> b =
      operand(matmul.getB(), /*grouped=*/!rows,
              /*transposed=*/!rows || !matmul.getTransposeB());
  if (failed(b))
    return failure();
  return replaceByGroupedScaled(matmul, *a, *b);
}

LogicalResult BackwardScaler::scale(AttentionBwdOp attention,
                                    DelayedScalingAttr recipe) {
  // The forward op through its statistics, a saved forward result.
  Value lse = forwardValueOf(attention.getSoftmaxLse(), forward.function);
  auto fwd = lse ? lse.getDefiningOp<Fp8AttentionOp>() : Fp8AttentionOp();
  Value outputScaleInv = fwd ? forward.outputScaleInvs.lookup(fwd) : Value();
  if (!outputScaleInv)
    return attention.emitOpError()
           << "is the gradient of an attention that does not run in FP8; "
              "fp8_dpa must run both";
  // dO in the backward format with a slot of its own; then dS's slot
  // (cuDNN's "dP") and the one that dq, dk and dv share.
  FloatType fp8 = FP8RecipeAttrInterface(recipe).getBackwardType();
  Fp8Value grad = scaler.quantize(attention.getGrad(), recipe, fp8, attention,
                                  OperandRole::grad);
  MetaSlot dp = scaler.addSlot(recipe, fp8, attention);
  MetaSlot dqkv = scaler.addSlot(recipe, fp8, attention);
  // The forward's FP8 q, k, v and O, and the scales it used, saved.
  SmallVector<Value> operands = {grad.data,
                                 fromForward(fwd.getQuery()),
                                 fromForward(fwd.getKey()),
                                 fromForward(fwd.getValue()),
                                 fromForward(fwd.getOutput()),
                                 attention.getSoftmaxLse(),
                                 fromForward(fwd.getQkvScaleInv()),
                                 fromForward(outputScaleInv),
                                 grad.scaleInv,
                                 dp.scale,
                                 dp.scaleInv,
                                 dqkv.scale};
  size_t fixed = operands.size();
  operands.append(attentionOptionals(attention));
  MLIRContext *context = attention.getContext();
  SmallVector<Type> types;
  for (Value value :
       {attention.getQuery(), attention.getKey(), attention.getValue()})
    types.push_back(withElement(value, fp8));
  types.append(4, slotType(context));
  OpBuilder builder(attention);
  Location loc = attention.getLoc();
  auto fp8Bwd = builder.create<Fp8AttentionBwdOp>(
      loc, types, operands, fp8AttentionAttrs(attention, fixed));
  scaler.setAmax(dp, fp8Bwd.getAmaxDp());
  scaler.setAmax(dqkv, maxOf(builder, loc,
                             {fp8Bwd.getAmaxDq(), fp8Bwd.getAmaxDk(),
                              fp8Bwd.getAmaxDv()}));
  SmallVector<Value> fp8Grads = {fp8Bwd.getQueryGrad(), fp8Bwd.getKeyGrad(),
                                 fp8Bwd.getValueGrad()};
  for (auto [result, fp8Grad] :
       llvm::zip(attention->getResults().take_front(3), fp8Grads)) {
    Value dequantized = builder.create<DequantizeOp>(loc, result.getType(),
                                                     fp8Grad, dqkv.scaleInv);
    result.replaceAllUsesWith(dequantized);
  }
  attention.erase();
  return success();
}

/// Erases ops whose results nobody reads: views that fed replaced GEMMs.
void eraseDeadOps(func::FuncOp function) {
  for (Operation &op :
       llvm::make_early_inc_range(llvm::reverse(function.front())))
    if (isOpTriviallyDead(&op))
      op.erase();
}

void BackwardScaler::pruneSavedValues() {
  // Forward tensors that only the replaced GEMMs read: high-precision saved
  // values, and forward arguments such as weights (now read in FP8).
  eraseDeadOps(backward);
  func::FuncOp function = forward.function;
  auto returnOp = cast<func::ReturnOp>(function.front().getTerminator());
  llvm::BitVector deadResults(function.getNumResults());
  llvm::BitVector deadArgs(backward.getNumArguments());
  for (BlockArgument arg : backward.getArguments()) {
    auto result = backward.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                         "te.forward_result");
    auto name = result ? function.getResultAttrOfType<StringAttr>(
                             result.getInt(), "te.name")
                       : StringAttr();
    bool forwardArg =
        backward.getArgAttr(arg.getArgNumber(), "te.forward_arg") != nullptr;
    if (!arg.use_empty() || !(forwardArg || result))
      continue;
    // A forward result of its own (attention's output, which FP8 attention
    // no longer reads in high precision) stays a result of the forward.
    deadArgs.set(arg.getArgNumber());
    if (name && name.getValue().starts_with("saved."))
      deadResults.set(result.getInt());
  }
  for (int index = deadResults.size() - 1; index >= 0; --index)
    if (deadResults.test(index))
      returnOp.getOperandsMutable().erase(index);
  function.eraseResults(deadResults);
  backward.eraseArguments(deadArgs);
  eraseDeadOps(function);
  for (BlockArgument arg : backward.getArguments()) {
    auto result = backward.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                         "te.forward_result");
    if (!result)
      continue;
    int64_t renumbered = result.getInt();
    for (int64_t index = 0; index < result.getInt(); ++index)
      renumbered -= deadResults.test(index);
    backward.setArgAttr(arg.getArgNumber(), "te.forward_result",
                        IntegerAttr::get(result.getType(), renumbered));
  }
  // The meta state results name the arguments they update, which moved.
  for (unsigned index = 0; index < backward.getNumResults(); ++index) {
    auto updates =
        backward.getResultAttrOfType<IntegerAttr>(index, "te.updates_arg");
    if (!updates)
      continue;
    int64_t renumbered = updates.getInt();
    for (int64_t arg = 0; arg < updates.getInt(); ++arg)
      renumbered -= deadArgs.test(arg);
    backward.setResultAttr(index, "te.updates_arg",
                           IntegerAttr::get(updates.getType(), renumbered));
  }
}

/// Drops the recipes of the attention ops that stay in high precision
/// (an overriding recipe without fp8_dpa, or none), as GEMMs drop theirs.
void removeAttentionRecipes(ModuleOp module) {
  module.walk([](AttentionOp op) { op.removeFp8RecipeAttr(); });
  module.walk([](AttentionBwdOp op) { op.removeFp8RecipeAttr(); });
}

struct PlaceScalingPass
    : public tejit::impl::TEPlaceScalingBase<PlaceScalingPass> {
  using TEPlaceScalingBase::TEPlaceScalingBase;

  void runOnOperation() override;

private:
  /// The recipe `matmul` (te.matmul or te.grouped_matmul) runs under, or
  /// null for high precision.
  template <typename OpT> FP8RecipeAttrInterface recipeOf(OpT matmul) const {
    return overridden ? overrideRecipe : matmul.getFp8RecipeAttr();
  }
  LogicalResult parseOverride();
  LogicalResult scaleForward(ForwardState &state);
  LogicalResult scaleForward(ForwardState &state, MatmulOp matmul,
                             FP8RecipeAttrInterface recipe);
  LogicalResult scaleForward(ForwardState &state, GroupedMatmulOp matmul,
                             FP8RecipeAttrInterface recipe);
  LogicalResult scaleForward(ForwardState &state, AttentionOp attention,
                             DelayedScalingAttr recipe);
  /// The recipe that runs `op` (te.attention or te.attention_bwd) in FP8.
  template <typename OpT> DelayedScalingAttr fp8RecipeOf(OpT op) const {
    return fp8AttentionRecipe(op, overridden, overrideRecipe);
  }

  bool overridden = false;
  FP8RecipeAttrInterface overrideRecipe;
};

LogicalResult PlaceScalingPass::parseOverride() {
  if (recipe.empty())
    return success();
  overridden = true;
  if (recipe == "none")
    return success();
  Attribute attr = parseAttribute(recipe, &getContext());
  overrideRecipe = dyn_cast_or_null<FP8RecipeAttrInterface>(attr);
  if (!overrideRecipe)
    return emitError(UnknownLoc::get(&getContext()))
           << "te-place-scaling: 'recipe' must be a #te.delayed_scaling, "
              "#te.current_scaling or #te.block_scaling attribute, or none; "
              "got '"
           << recipe << "'";
  return success();
}

StringRef argumentName(func::FuncOp function, unsigned index) {
  auto name = function.getArgAttrOfType<StringAttr>(index, "te.name");
  return name ? name.getValue() : "weight";
}

/// Transformer Engine's fp8_model_init: the arguments marked te.fp8_weight
/// (by the spec's `fp8_weights`) become FP8 arguments with their scale_inv
/// and, for training, their transpose; the GEMMs read them as they are.
void addFp8Weights(ForwardState &state) {
  func::FuncOp function = state.function;
  auto e4m3 = Float8E4M3FNType::get(function.getContext());
  for (BlockArgument arg : llvm::to_vector(function.getArguments())) {
    unsigned index = arg.getArgNumber();
    if (!function.getArgAttr(index, "te.fp8_weight") || arg.use_empty())
      continue;
    state.scaler.fp8Argument(arg, argumentName(function, index), e4m3,
                             state.training);
  }
}

/// Checks that only FP8 GEMMs read the FP8 weights of `function`.
LogicalResult checkFp8WeightUses(func::FuncOp function) {
  for (BlockArgument arg : function.getArguments()) {
    if (!function.getArgAttr(arg.getArgNumber(), "te.fp8_weight"))
      continue;
    for (OpOperand &use : arg.getUses())
      if (!isa<ScaledMatmulOp, GroupedScaledMatmulOp>(use.getOwner()))
        return use.getOwner()->emitOpError()
               << "reads FP8 weight '"
               << argumentName(function, arg.getArgNumber())
               << "' (fp8_weights), but only FP8 GEMMs can read it; give the "
                  "layer an FP8 recipe or drop fp8_weights";
  }
  return success();
}

/// Checks that `backward` reads no FP8 weight of `forward` in high
/// precision (only its FP8 transpose, through a dgrad GEMM).
LogicalResult checkHighPrecisionReads(func::FuncOp backward,
                                      func::FuncOp forward) {
  for (BlockArgument arg : backward.getArguments()) {
    auto of = backward.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                     "te.forward_arg");
    if (!of || !forward.getArgAttr(of.getInt(), "te.fp8_weight") ||
        arg.getType() == forward.getArgument(of.getInt()).getType())
      continue;
    if (arg.use_empty())
      continue;
    Operation *user = *arg.getUsers().begin();
    return user->emitOpError()
           << "reads FP8 weight '" << argumentName(forward, of.getInt())
           << "' (fp8_weights) in high precision in the backward; only FP8 "
              "GEMMs can read it";
  }
  return success();
}

/// Refuses an FP8 weight (fp8_weights) `weight` that GEMM `matmul` reads
/// under Float8BlockScaling, whose GEMMs take block-scaled weights.
LogicalResult checkBlockScaledFp8Weight(func::FuncOp function,
                                        Operation *matmul, Value weight,
                                        FP8RecipeAttrInterface recipe) {
  auto arg = dyn_cast<BlockArgument>(weight);
  if (!isa<BlockScalingAttr>(recipe) || !arg ||
      !function.getArgAttr(arg.getArgNumber(), "te.fp8_weight"))
    return success();
  return matmul->emitOpError()
         << "reads FP8 weight '" << argumentName(function, arg.getArgNumber())
         << "' (fp8_weights), which Float8BlockScaling does not "
            "support yet; use DelayedScaling or Float8CurrentScaling";
}

LogicalResult PlaceScalingPass::scaleForward(ForwardState &state,
                                             MatmulOp matmul,
                                             FP8RecipeAttrInterface recipe) {
  FloatType fp8 = recipe.getForwardType();
  if (failed(checkBlockScaledFp8Weight(state.function, matmul, matmul.getB(),
                                       recipe)))
    return failure();
  // fprop: `a` is the layer's input, `b` its weight.
  Fp8Value a = state.scaler.quantize(matmul.getA(), recipe, fp8, matmul,
                                     OperandRole::input);
  Fp8Value b = state.scaler.quantize(matmul.getB(), recipe, fp8, matmul,
                                     OperandRole::weight);
  state.operands[matmul.getA()] = a;
  state.operands[matmul.getB()] = b;
  return replaceByScaled(matmul,
                         kMajor(state.scaler, a, matmul.getTransposeA()),
                         kMajor(state.scaler, b, !matmul.getTransposeB()));
}

LogicalResult PlaceScalingPass::scaleForward(ForwardState &state,
                                             GroupedMatmulOp matmul,
                                             FP8RecipeAttrInterface recipe) {
  if (failed(checkGroupedRecipe(matmul, recipe)) ||
      failed(checkBlockScaledFp8Weight(state.function, matmul, matmul.getB(),
                                       recipe)))
    return failure();
  if (!matmul.isRowsForm())
    return matmul.emitOpError()
           << "in the contraction form is a wgrad GEMM, which belongs to a "
              "backward function";
  // fprop: `a` [T, K] is the layer's input, cast per row segment (the G
  // input slots; 1-D blocks along K), `b` [G, ., .] its stacked weights,
  // cast per matrix (the G weight slots; w_block_scaling_dim blocks), or,
  // FP8 weights (fp8_weights), the argument itself with its G scales.
  FloatType fp8 = recipe.getForwardType();
  Value mSplits = matmul.getMSplits();
  Fp8Value a = state.scaler.quantizeGrouped(matmul.getA(), mSplits, recipe, fp8,
                                            matmul, OperandRole::input);
  Fp8Value b = state.scaler.quantizeGrouped(matmul.getB(), Value(), recipe, fp8,
                                            matmul, OperandRole::weight);
  state.groupedOperands[{matmul.getA(), mSplits}] = a;
  state.groupedOperands[{matmul.getB(), Value()}] = b;
  return replaceByGroupedScaled(
      matmul, a, kMajor(state.scaler, b, !matmul.getTransposeB()));
}

LogicalResult PlaceScalingPass::scaleForward(ForwardState &state,
                                             AttentionOp attention,
                                             DelayedScalingAttr recipe) {
  if (failed(checkFp8Attention(attention)))
    return failure();
  FunctionScaler &scaler = state.scaler;
  FloatType fp8 = FP8RecipeAttrInterface(recipe).getForwardType();
  MetaSlot qkv = scaler.addSlot(recipe, fp8, attention);
  // P's slot records amax_s only: cuDNN casts P with a fixed scale
  // (docs/fp8-attention.md).
  MetaSlot s = scaler.addSlot(recipe, fp8, attention);
  MetaSlot o = scaler.addSlot(recipe, fp8, attention);
  OpBuilder builder(attention);
  Location loc = attention.getLoc();
  MLIRContext *context = attention.getContext();
  // q, k and v with one scale, as Transformer Engine casts them together;
  // the slot records the largest of their amaxes.
  SmallVector<Value> operands, amaxes;
  DenseMap<Value, Value> casts;
  for (Value value :
       {attention.getQuery(), attention.getKey(), attention.getValue()}) {
    Value &data = casts[value];
    if (!data) {
      auto quantize = builder.create<QuantizeOp>(
          loc, withElement(value, fp8), slotType(context), value, qkv.scale);
      data = quantize.getOutput();
      amaxes.push_back(quantize.getAmax());
    }
    operands.push_back(data);
  }
  scaler.setAmax(qkv, maxOf(builder, loc, amaxes));
  operands.append({qkv.scaleInv, o.scale});
  size_t fixed = operands.size();
  operands.append(attentionOptionals(attention));
  Value output = attention.getOutput();
  auto fp8Attention = builder.create<Fp8AttentionOp>(
      loc,
      TypeRange{withElement(output, fp8), attention.getSoftmaxLse().getType(),
                slotType(context), slotType(context)},
      operands, fp8AttentionAttrs(attention, fixed));
  scaler.setAmax(s, fp8Attention.getAmaxS());
  scaler.setAmax(o, fp8Attention.getAmaxO());
  state.outputScaleInvs[fp8Attention] = o.scaleInv;
  // The layer goes on in high precision (fp8_mha is off).
  Value dequantized = builder.create<DequantizeOp>(
      loc, output.getType(), fp8Attention.getOutput(), o.scaleInv);
  output.replaceAllUsesWith(dequantized);
  attention.getSoftmaxLse().replaceAllUsesWith(fp8Attention.getSoftmaxLse());
  attention.erase();
  return success();
}

LogicalResult PlaceScalingPass::scaleForward(ForwardState &state) {
  addFp8Weights(state);
  // In program order, so that meta slots follow the GEMMs (and attention).
  SmallVector<Operation *> matmuls;
  for (Operation &op : state.function.front())
    if (isa<MatmulOp, GroupedMatmulOp, AttentionOp>(op))
      matmuls.push_back(&op);
  for (Operation *op : matmuls) {
    LogicalResult status = success();
    if (auto matmul = dyn_cast<MatmulOp>(op)) {
      if (FP8RecipeAttrInterface recipe = recipeOf(matmul))
        status = scaleForward(state, matmul, recipe);
    } else if (auto attention = dyn_cast<AttentionOp>(op)) {
      if (DelayedScalingAttr recipe = fp8RecipeOf(attention))
        status = scaleForward(state, attention, recipe);
    } else {
      auto grouped = cast<GroupedMatmulOp>(op);
      if (FP8RecipeAttrInterface recipe = recipeOf(grouped))
        status = scaleForward(state, grouped, recipe);
    }
    if (failed(status))
      return failure();
  }
  state.scaler.finish();
  return checkFp8WeightUses(state.function);
}

void PlaceScalingPass::runOnOperation() {
  if (failed(parseOverride()))
    return signalPassFailure();
  ModuleOp module = getOperation();
  if (overridden && !overrideRecipe) {
    // `none`: the GEMMs stay in high precision, and say so.
    module.walk([](MatmulOp matmul) { matmul.removeFp8RecipeAttr(); });
    module.walk([](GroupedMatmulOp matmul) { matmul.removeFp8RecipeAttr(); });
    removeAttentionRecipes(module);
    for (auto function : module.getOps<func::FuncOp>())
      if (failed(checkFp8WeightUses(function)))
        return signalPassFailure();
    return;
  }
  llvm::StringSet<> differentiated;
  for (auto function : module.getOps<func::FuncOp>())
    if (auto of = function->getAttrOfType<FlatSymbolRefAttr>("te.backward_of"))
      differentiated.insert(of.getValue());
  // std::map keeps ForwardState (which holds a builder) at a stable address.
  std::map<StringRef, std::unique_ptr<ForwardState>> forwards;
  for (auto function : module.getOps<func::FuncOp>()) {
    if (function->hasAttr("te.backward_of") || function.isExternal())
      continue;
    auto state = std::make_unique<ForwardState>(
        function, differentiated.contains(function.getName()));
    if (failed(scaleForward(*state)))
      return signalPassFailure();
    forwards[function.getName()] = std::move(state);
  }
  for (auto backward : module.getOps<func::FuncOp>()) {
    auto of = backward->getAttrOfType<FlatSymbolRefAttr>("te.backward_of");
    if (!of)
      continue;
    auto it = forwards.find(of.getValue());
    if (it == forwards.end()) {
      backward.emitOpError() << "is the backward of " << of
                             << ", which is not a function of this module";
      return signalPassFailure();
    }
    BackwardScaler scaler(backward, *it->second);
    SmallVector<Operation *> matmuls;
    for (Operation &op : backward.front())
      if (isa<MatmulOp, GroupedMatmulOp, AttentionBwdOp>(op))
        matmuls.push_back(&op);
    for (Operation *op : matmuls) {
      LogicalResult status = success();
      if (auto matmul = dyn_cast<MatmulOp>(op)) {
        if (FP8RecipeAttrInterface recipe = recipeOf(matmul))
          status = scaler.scale(matmul, recipe);
      } else if (auto attention = dyn_cast<AttentionBwdOp>(op)) {
        if (DelayedScalingAttr recipe = fp8RecipeOf(attention))
          status = scaler.scale(attention, recipe);
      } else {
        auto grouped = cast<GroupedMatmulOp>(op);
        if (FP8RecipeAttrInterface recipe = recipeOf(grouped))
          status = scaler.scale(grouped, recipe);
      }
      if (failed(status))
        return signalPassFailure();
    }
    scaler.finish();
    if (failed(checkHighPrecisionReads(backward, it->second->function)))
      return signalPassFailure();
  }
  removeAttentionRecipes(module);
}
} // namespace
