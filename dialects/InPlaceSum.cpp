//===- InPlaceSum.cpp - tensor-parallel sums that need no buffer ----------===//
#include "dialects/InPlaceSum.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace mlir::te;

/// Whether `value` reaches func.return, directly or through reshapes.
static bool reachesReturn(Value value) {
  SmallVector<Value> pending{value};
  while (!pending.empty()) {
    Value current = pending.pop_back_val();
    for (Operation *user : current.getUsers()) {
      if (isa<func::ReturnOp>(user))
        return true;
      if (isa<ReshapeOp>(user))
        pending.push_back(user->getResult(0));
    }
  }
  return false;
}

bool mlir::te::isInPlaceSum(Operation *op) {
  auto sum = dyn_cast<TpAllReduceOp>(op);
  if (!sum)
    return false;
  Value input = sum.getInput();
  Operation *producer = input.getDefiningOp();
  auto fused = dyn_cast_or_null<FusedOp>(producer);
  bool gemm = isa_and_nonnull<MatmulOp, ScaledMatmulOp>(producer) ||
              (fused && fused.getKind() == "gemm");
  return gemm && input.hasOneUse() && !reachesReturn(sum.getOutput());
}
