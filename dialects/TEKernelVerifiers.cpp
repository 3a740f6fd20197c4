//===- TEKernelVerifiers.cpp - rules of te.fused regions
//-------------------===//
#include "dialects/TEDialect.h"

using namespace mlir;
using namespace mlir::te;

LogicalResult FusedOp::verify() {
  Block &body = getBody().front();
  if (body.getArgumentTypes() != getInputs().getTypes())
    return emitOpError() << "region arguments must match the inputs' types";
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().getTypes() != getOutputs().getTypes())
    return emitOpError() << "yielded values must match the results' types";
  for (Operation &op : body.without_terminator())
    if (!op.getDialect() || op.getDialect()->getNamespace() != "te" ||
        isa<FusedOp>(op))
      return op.emitOpError() << "cannot be fused: a te.fused region holds "
                                 "primitive te ops";
  return success();
}
