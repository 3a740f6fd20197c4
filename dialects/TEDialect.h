//===- TEDialect.h - the te dialect: enums, recipes, layer ops --*- C++ -*-===//
#ifndef TEJIT_DIALECTS_TEDIALECT_H
#define TEJIT_DIALECTS_TEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/TEDialect.h.inc"
#include "dialects/TEEnums.h.inc"

namespace mlir::te {
/// Parses `true` or `false` (a recipe's bool parameter).
FailureOr<bool> parseBoolParameter(AsmParser &parser);

/// The largest finite value of an FP8 element type (448 for E4M3, 57344 for
/// E5M2).
double getFp8MaxFinite(FloatType fp8Type);

/// True for the gated activations, whose FC1 produces two halves.
bool isGatedActivation(Activation activation);
} // namespace mlir::te

#include "dialects/TEAttrInterfaces.h.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/TEAttributes.h.inc"

#define GET_OP_CLASSES
#include "dialects/TEOps.h.inc"

namespace mlir::te {
/// Whether `op` reads one slot (a scale, scale_inv or amax) of a 1-D FP8
/// meta vector: a pointer offset at run time, not a copy.
bool isMetaSlotRead(Operation *op);
} // namespace mlir::te

#endif // TEJIT_DIALECTS_TEDIALECT_H
