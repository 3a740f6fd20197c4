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

/// The parameters of the clamped_swiglu activation (GPT-OSS's SwiGLU, as
/// Transformer Engine's `activation_params`): on the halves [a, b],
/// a' = min(a, limit), b' = clamp(b, -limit, limit) and
/// y = a' sigmoid(alpha a') (b' + offset). Ops that carry an activation
/// (te.layernorm_mlp, te.transformer_layer, te.act, te.dact) hold them as
/// the optional F64 attributes `activation_limit`, `activation_alpha` and
/// `glu_linear_offset`; an absent one takes TE's default.
struct ActivationParams {
  double limit = 7.0, alpha = 1.702, offset = 1.0;

  /// The parameters `op` carries, defaults where absent.
  static ActivationParams of(Operation *op);
};

/// The attribute names of the activation parameters.
ArrayRef<StringLiteral> activationParamNames();

/// Copies the activation parameter attributes `from` carries to `to`.
void copyActivationParams(Operation *from, Operation *to);

/// Checks `op`'s activation parameters: only clamped_swiglu takes them;
/// the limit is finite and > 0, alpha and the offset finite.
LogicalResult verifyActivationParams(Operation *op, Activation activation);
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
