//===- TEOps.cpp - te layer op definitions and derived sizes
//---------------===//
#include "dialects/TEDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::te;

#define GET_OP_CLASSES
#include "dialects/TEOps.cpp.inc"

static int64_t lastDim(Value value) {
  return cast<ShapedType>(value.getType()).getShape().back();
}

int64_t LayerNormMLPOp::getFfnHiddenSize() { return lastDim(getFc2Weight()); }

int64_t MultiheadAttentionOp::getNumKVHeads() {
  return static_cast<int64_t>(
      getNumGqaGroups().value_or(getNumAttentionHeads()));
}

int64_t MultiheadAttentionOp::getHeadDim() {
  if (std::optional<uint64_t> kvChannels = getKvChannels())
    return static_cast<int64_t>(*kvChannels);
  return lastDim(getInput()) / static_cast<int64_t>(getNumAttentionHeads());
}

int64_t TransformerLayerOp::getNumKVHeads() {
  return static_cast<int64_t>(
      getNumGqaGroups().value_or(getNumAttentionHeads()));
}

int64_t TransformerLayerOp::getHeadDim() {
  if (std::optional<uint64_t> kvChannels = getKvChannels())
    return static_cast<int64_t>(*kvChannels);
  return lastDim(getInput()) / static_cast<int64_t>(getNumAttentionHeads());
}

int64_t TransformerLayerOp::getFfnHiddenSize() {
  return lastDim(getFc2Weight());
}

bool mlir::te::isMetaSlotRead(Operation *op) {
  auto slice = dyn_cast<SliceOp>(op);
  return slice &&
         cast<RankedTensorType>(slice.getInput().getType()).getRank() == 1;
}
