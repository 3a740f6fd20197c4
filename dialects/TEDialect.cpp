//===- TEDialect.cpp - te dialect registration and printing aliases -------===//
#include "dialects/TEDialect.h"

#include "mlir/IR/DialectImplementation.h"

using namespace mlir;
using namespace mlir::te;

#include "dialects/TEDialect.cpp.inc"

namespace {
/// Prints recipes once at the top of a module (`#delayed_scaling = ...`)
/// instead of repeating them on every layer op that uses them.
struct TEOpAsmInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;

  AliasResult getAlias(Attribute attr, raw_ostream &os) const override {
    if (isa<DelayedScalingAttr>(attr)) {
      os << "delayed_scaling";
      return AliasResult::OverridableAlias;
    }
    if (isa<CurrentScalingAttr>(attr)) {
      os << "current_scaling";
      return AliasResult::OverridableAlias;
    }
    if (isa<BlockScalingAttr>(attr)) {
      os << "block_scaling";
      return AliasResult::OverridableAlias;
    }
    return AliasResult::NoAlias;
  }
};
} // namespace

void TEDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/TEOps.cpp.inc"
      >();
  addInterfaces<TEOpAsmInterface>();
}

bool mlir::te::isGatedActivation(Activation activation) {
  switch (activation) {
  case Activation::geglu:
  case Activation::qgeglu:
  case Activation::reglu:
  case Activation::sreglu:
  case Activation::swiglu:
    return true;
  default:
    return false;
  }
}
