//===- AttentionViews.cpp - q/k/v and their gradients in place ------------===//
#include "dialects/AttentionViews.h"

using namespace mlir;
using namespace mlir::te;

namespace {

/// cuDNN wants 16-byte aligned tensor starts and strides.
constexpr int64_t kAlignmentBytes = 16;

int64_t elementBytes(Type type) {
  Type element = cast<RankedTensorType>(type).getElementType();
  return (element.getIntOrFloatBitWidth() + 7) / 8;
}

ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// Whether `reshape` turns a 2-D [tokens, heads * d] tensor into a 4-D
/// [t0, t1, heads, d] one (both attention layouts flatten their two token
/// dims in order).
bool splitsTokensAndHeads(ReshapeOp reshape, Value flat, Value split) {
  ArrayRef<int64_t> from = shapeOf(flat), to = shapeOf(split);
  return from.size() == 2 && to.size() == 4 && from[0] == to[0] * to[1] &&
         from[1] == to[2] * to[3];
}

/// Whether `use` reads its value as attention's q, k or v, or as the input
/// of a rotary embedding (whose kernel reads rows at any stride).
bool isAttentionInput(OpOperand &use) {
  Operation *owner = use.getOwner();
  unsigned index = use.getOperandNumber();
  if (isa<AttentionOp, KvCacheAttentionOp>(owner))
    return index <= 2;
  if (isa<AttentionBwdOp>(owner))
    return index >= 1 && index <= 3;
  if (isa<RotaryOp>(owner))
    return index == 0;
  return false;
}

bool aligned(int64_t columns, Type type) {
  return columns * elementBytes(type) % kAlignmentBytes == 0;
}

/// Whether `value` is dq, dk or dv of a te.attention_bwd (not its dbias,
/// which is no token-major tensor).
bool isQkvGrad(Value value) {
  auto result = dyn_cast<OpResult>(value);
  return result && isa<AttentionBwdOp>(result.getOwner()) &&
         result.getResultNumber() < 3;
}

} // namespace

bool mlir::te::isAttentionInputSlice(Operation *op) {
  auto slice = dyn_cast_or_null<SliceOp>(op);
  if (!slice || shapeOf(slice.getInput()).size() != 2)
    return false;
  Type type = slice.getInput().getType();
  if (!aligned(slice.getOffset(), type) ||
      !aligned(shapeOf(slice.getInput())[1], type))
    return false;
  Value output = slice.getOutput();
  if (output.use_empty())
    return false;
  for (Operation *user : output.getUsers()) {
    auto reshape = dyn_cast<ReshapeOp>(user);
    if (!reshape ||
        !splitsTokensAndHeads(reshape, output, reshape->getResult(0)) ||
        reshape->getResult(0).use_empty())
      return false;
    for (OpOperand &use : reshape->getResult(0).getUses())
      if (!isAttentionInput(use))
        return false;
  }
  return true;
}

/// The attention_bwd result that `input` of a concat reshapes, if it is one
/// read by nothing else.
static Value gradBehind(Value input) {
  auto reshape = input.getDefiningOp<ReshapeOp>();
  if (!reshape || !input.hasOneUse())
    return nullptr;
  Value grad = reshape->getOperand(0);
  if (!isQkvGrad(grad) || !grad.hasOneUse() ||
      !splitsTokensAndHeads(reshape, input, grad))
    return nullptr;
  return grad;
}

bool mlir::te::isAttentionGradConcat(Operation *op) {
  auto concat = dyn_cast_or_null<ConcatOp>(op);
  if (!concat || shapeOf(concat.getOutput()).size() != 2)
    return false;
  Type type = concat.getOutput().getType();
  if (!aligned(shapeOf(concat.getOutput())[1], type))
    return false;
  for (Value input : concat.getInputs())
    if (!gradBehind(input) || !aligned(shapeOf(input)[1], type))
      return false;
  return true;
}

std::optional<std::pair<ConcatOp, int64_t>>
mlir::te::gradConcatSlot(Value grad) {
  if (!isQkvGrad(grad) || !grad.hasOneUse())
    return std::nullopt;
  Operation *reshape = *grad.getUsers().begin();
  if (!isa<ReshapeOp>(reshape) || !reshape->getResult(0).hasOneUse())
    return std::nullopt;
  auto concat = dyn_cast<ConcatOp>(*reshape->getResult(0).getUsers().begin());
  if (!concat || !isAttentionGradConcat(concat))
    return std::nullopt;
  int64_t column = 0;
  for (Value input : concat.getInputs()) {
    if (input == reshape->getResult(0))
      return std::make_pair(concat, column);
    column += shapeOf(input)[1];
  }
  return std::nullopt;
}

int64_t mlir::te::attentionTokenStride(Value value) {
  if (auto reshape = value.getDefiningOp<ReshapeOp>()) {
    if (Operation *slice = reshape->getOperand(0).getDefiningOp();
        isAttentionInputSlice(slice))
      return shapeOf(cast<SliceOp>(slice).getInput())[1];
    return 0;
  }
  if (auto slot = gradConcatSlot(value))
    return shapeOf(slot->first.getOutput())[1];
  return 0;
}
