//===- FunctionScaler.h - FP8 casts and scales of a function ----*- C++ -*-===//
//
// The bookkeeping te-place-scaling needs per function: which values are
// already in FP8 (each value is cast once per format), their FP8
// transposes, and for DelayedScaling the meta state (scale, scale_inv and
// amax history arguments) with one slot per quantized tensor and the update
// that closes the function.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_PASSES_FUNCTIONSCALER_H
#define TEJIT_COMPILER_PASSES_FUNCTIONSCALER_H

#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

#include <tuple>

namespace tejit {

/// An FP8 tensor and the scale inverse that dequantizes it. Block-scaled
/// values (Float8BlockScaling) also keep the high-precision value they were
/// cast from, because their transpose is cast again from it.
struct Fp8Value {
  mlir::Value data;
  mlir::Value scaleInv;
  /// Block-scaled values only: the cast's input, its block dims (1 or 2;
  /// 0 = one scale for the tensor) and power-of-two rounding.
  mlir::Value source = nullptr;
  int64_t blockDim = 0;
  bool power2 = false;
  /// Grouped casts (GroupedLinear) only: whether the value is one, the
  /// m_splits of its row segments (null for stacked weights [G, R, C]) and,
  /// for te.grouped_quantize, the f32 [G] scales `source` was cast with.
  /// Their transpose is cast again from `source`: with the same scales, or,
  /// block-scaled (te.grouped_block_quantize), with `blockDim` and `power2`.
  bool grouped = false;
  mlir::Value groupScale = nullptr;
  mlir::Value mSplits = nullptr;

  bool isGrouped() const { return grouped; }
};

/// What a GEMM operand is to the recipe: Float8BlockScaling picks 1-D or 2-D
/// blocks by it.
enum class OperandRole { input, weight, grad };

/// A DelayedScaling meta slot whose casts the caller emits (FP8 attention:
/// one scale shared by three casts, or casts inside cuDNN): the slot's
/// scale and scale_inv, and where FunctionScaler::setAmax() puts its amax.
struct MetaSlot {
  mlir::Value scale, scaleInv;
  std::pair<mlir::Attribute, mlir::Type> group;
  size_t amaxIndex;
};

class FunctionScaler {
public:
  /// `metaPrefix` names the meta arguments: "fp8_meta.fwd" or
  /// "fp8_meta.bwd".
  FunctionScaler(mlir::func::FuncOp function, llvm::StringRef metaPrefix);

  /// `value` cast to `fp8Type` under `recipe`, emitted before `user` the
  /// first time and reused after.
  Fp8Value quantize(mlir::Value value, mlir::te::FP8RecipeAttrInterface recipe,
                    mlir::FloatType fp8Type, mlir::Operation *user,
                    OperandRole role);

  /// `value` cast to `fp8Type` per group: groups are the row segments of
  /// `mSplits` for a matrix [T, K], else the leading dim of stacked weights
  /// [G, R, C]. DelayedScaling gives the cast (te.grouped_quantize) G
  /// consecutive slots of the meta vectors; current scaling computes the G
  /// scales from a te.grouped_amax; Float8BlockScaling casts in blocks
  /// (te.grouped_block_quantize) whose dims `role` picks, no state. Emitted
  /// before `user` the first time and reused after.
  Fp8Value quantizeGrouped(mlir::Value value, mlir::Value mSplits,
                           mlir::te::FP8RecipeAttrInterface recipe,
                           mlir::FloatType fp8Type, mlir::Operation *user,
                           OperandRole role);

  /// The transpose of a 2-D FP8 value, emitted right after it once; for a
  /// block-scaled value, its source cast transposed (te.block_quantize
  /// with `transpose`); for a grouped one, its source cast again per group,
  /// transposed ([K, T], or [G, C, R] for stacked weights), with its scales
  /// (te.grouped_quantize) or its blocks (te.grouped_block_quantize).
  Fp8Value transpose(Fp8Value value);

  /// Transformer Engine's fp8_model_init: GEMM weight argument `weight`
  /// (named `name`) arrives already cast to `fp8Type`. Retypes it, adds the
  /// arguments `<name>.scale_inv` and, with `withTranspose`,
  /// `<name>.transpose` (its K-major copy for the backward's dgrad, kept by
  /// the caller as Transformer Engine's Float8Tensor keeps it), and makes
  /// quantize() and transpose() of the weight return them. GroupedLinear's
  /// stacked weights [G, R, C] are G FP8 matrices, each with its own scale
  /// (scale_inv f32 [G], transpose [G, C, R]); quantizeGrouped() of the
  /// weight (without m_splits) returns them.
  Fp8Value fp8Argument(mlir::BlockArgument weight, llvm::StringRef name,
                       mlir::FloatType fp8Type, bool withTranspose);

  /// A new slot of the `fp8Type` meta vectors of `recipe`, read before
  /// `user`; its amax must be given with setAmax() before finish().
  MetaSlot addSlot(mlir::te::DelayedScalingAttr recipe, mlir::FloatType fp8Type,
                   mlir::Operation *user);

  /// `amax` (tensor<1xf32>) is what `slot` records this step.
  void setAmax(const MetaSlot &slot, mlir::Value amax);

  /// Gathers the DelayedScaling amaxes and emits the state update before the
  /// function's return, which then also returns the new state.
  void finish();

private:
  /// One DelayedScaling recipe's state in this function.
  struct MetaGroup {
    mlir::te::DelayedScalingAttr recipe;
    mlir::FloatType fp8Type;
    mlir::BlockArgument scale, scaleInv, history;
    /// The slots handed out so far (a grouped cast takes G of them) and
    /// the amaxes that fill them, in slot order ([1] or [G] each; null
    /// until setAmax() for an addSlot() slot).
    int64_t slots = 0;
    llvm::SmallVector<mlir::Value> amaxes;
  };

  MetaGroup &metaGroup(mlir::te::DelayedScalingAttr recipe,
                       mlir::FloatType fp8Type);
  mlir::Value addArgument(mlir::Type type, llvm::StringRef name);
  void addResult(mlir::Value value, llvm::StringRef name,
                 mlir::BlockArgument updates);
  /// Slots [index, index + count) of a meta vector.
  mlir::Value slots(mlir::Value vector, int64_t index, int64_t count,
                    mlir::Location loc);

  mlir::func::FuncOp function;
  std::string metaPrefix;
  mlir::OpBuilder builder;
  llvm::MapVector<std::pair<mlir::Attribute, mlir::Type>, MetaGroup> groups;
  llvm::DenseMap<std::pair<mlir::Value, mlir::Type>, Fp8Value> casts;
  /// Grouped casts by (value, format, m_splits): a tensor may also be cast
  /// per tensor by a plain GEMM.
  llvm::DenseMap<std::tuple<mlir::Value, mlir::Type, mlir::Value>, Fp8Value>
      groupedCasts;
  llvm::DenseMap<mlir::Value, Fp8Value> transposed;
  llvm::SmallVector<mlir::Value> metaArgs;
};

} // namespace tejit

#endif // TEJIT_COMPILER_PASSES_FUNCTIONSCALER_H
