//===- TEDialect.cpp - te dialect registration and printing aliases -------===//
#include "dialects/TEDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>

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
  case Activation::clamped_swiglu:
    return true;
  default:
    return false;
  }
}

ArrayRef<StringLiteral> mlir::te::activationParamNames() {
  static constexpr StringLiteral names[] = {
      "activation_limit", "activation_alpha", "glu_linear_offset"};
  return names;
}

ActivationParams ActivationParams::of(Operation *op) {
  ActivationParams params;
  double *fields[] = {&params.limit, &params.alpha, &params.offset};
  for (auto [name, field] : llvm::zip_equal(activationParamNames(), fields))
    if (auto attr = op->getAttrOfType<FloatAttr>(name))
      *field = attr.getValueAsDouble();
  return params;
}

void mlir::te::copyActivationParams(Operation *from, Operation *to) {
  for (StringRef name : activationParamNames())
    if (Attribute attr = from->getAttr(name))
      to->setAttr(name, attr);
}

LogicalResult mlir::te::verifyActivationParams(Operation *op,
                                               Activation activation) {
  for (StringRef name : activationParamNames()) {
    auto attr = op->getAttrOfType<FloatAttr>(name);
    if (!attr)
      continue;
    if (activation != Activation::clamped_swiglu)
      return op->emitOpError()
             << "'" << name
             << "' is a parameter of activation clamped_swiglu only, not of "
             << stringifyActivation(activation);
    double value = attr.getValueAsDouble();
    bool isLimit = name == "activation_limit";
    if (!std::isfinite(value) || (isLimit && !(value > 0.0)))
      return op->emitOpError()
             << "'" << name << "' must be finite" << (isLimit ? " and > 0" : "")
             << ", got " << value;
  }
  return success();
}
