//===- TEAttributes.cpp - FP8 recipe attributes and enums
//------------------===//
#include "dialects/TEDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::te;

#include "dialects/TEAttrInterfaces.cpp.inc"
#include "dialects/TEEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/TEAttributes.cpp.inc"

void TEDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/TEAttributes.cpp.inc"
      >();
}

FailureOr<bool> mlir::te::parseBoolParameter(AsmParser &parser) {
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (succeeded(parser.parseOptionalKeyword(&keyword, {"true", "false"})))
    return keyword == "true";
  return parser.emitError(loc, "expected 'true' or 'false'");
}

double mlir::te::getFp8MaxFinite(FloatType fp8Type) {
  return isa<Float8E5M2Type>(fp8Type) ? 57344.0 : 448.0;
}

FloatType FP8RecipeAttrInterface::getForwardType() const {
  return Float8E4M3FNType::get(getContext());
}

FloatType FP8RecipeAttrInterface::getBackwardType() const {
  if (getFormat() == Fp8Format::HYBRID)
    return Float8E5M2Type::get(getContext());
  return Float8E4M3FNType::get(getContext());
}

/// Both recipes accept e4m3 and hybrid; like Transformer Engine, neither
/// runs pure E5M2 (its 2-bit mantissa is too coarse for forward tensors).
static LogicalResult
verifyRecipeFormat(function_ref<InFlightDiagnostic()> emitError,
                   Fp8Format format) {
  if (format == Fp8Format::E5M2)
    return emitError() << "fp8_format = e5m2 is not a valid recipe format: "
                          "use hybrid (E4M3 forward, E5M2 backward) or e4m3";
  return success();
}

LogicalResult
DelayedScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                           int64_t margin, Fp8Format format,
                           int64_t amaxHistoryLen, AmaxComputeAlgo,
                           bool /*reduceAmax*/, bool /*fp8Dpa*/) {
  if (margin < 0)
    return emitError() << "delayed_scaling margin must be >= 0, got " << margin;
  if (amaxHistoryLen < 1)
    return emitError() << "delayed_scaling amax_history_len must be >= 1, got "
                       << amaxHistoryLen;
  return verifyRecipeFormat(emitError, format);
}

Fp8Format DelayedScalingAttr::getFormat() const { return getFp8Format(); }

LogicalResult
CurrentScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                           Fp8Format format, bool /*power2Scale*/) {
  return verifyRecipeFormat(emitError, format);
}

Fp8Format CurrentScalingAttr::getFormat() const { return getFp8Format(); }

LogicalResult
BlockScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                         Fp8Format format, int64_t xDim, int64_t wDim,
                         int64_t gradDim, bool /*power2Scale*/) {
  for (auto [name, dim] : {std::pair<StringRef, int64_t>{"x", xDim},
                           {"w", wDim},
                           {"grad", gradDim}})
    if (dim != 1 && dim != 2)
      return emitError() << "block_scaling " << name
                         << "_block_scaling_dim must be 1 or 2, got " << dim;
  // fprop pairs x with w, dgrad grad with w, wgrad grad with x.
  if ((xDim == 2 && wDim == 2) || (gradDim == 2 && wDim == 2) ||
      (gradDim == 2 && xDim == 2))
    return emitError() << "block_scaling: no GEMM can pair two 2-D scaled "
                          "operands (x with w, grad with w, grad with x); "
                          "got x = "
                       << xDim << ", w = " << wDim << ", grad = " << gradDim;
  return verifyRecipeFormat(emitError, format);
}

Fp8Format BlockScalingAttr::getFormat() const { return getFp8Format(); }
