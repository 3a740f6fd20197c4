//===- FusibleOpImport.cpp - spec layers for Transformer Engine's ops ----===//
//
// The basic operations of Transformer Engine's operation fuser
// (`transformer_engine.pytorch.ops`) that are not layers of their own:
// Activation, Bias, AddExtraInput and MakeExtraOutput. With Linear,
// LayerNorm and RMSNorm they let a spec describe any chain of TE's fusible
// ops (docs/fusible-ops.md); te-decompose leaves these as the primitive ops
// they import into, and te-fuse fuses them with their neighbours as it does
// inside a layer.
//
//===----------------------------------------------------------------------===//
#include "compiler/spec/LayerContext.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::spec;
using llvm::StringRef;

/// The op's input: the previous layer's output, whose width `features`
/// (optional then) must match, or, for the first layer, a new `input`
/// argument of `features` (required then) features.
static FailureOr<Value> takeOpInput(LayerContext &ctx, StringRef key) {
  FailureOr<std::optional<int64_t>> features = ctx.layer.getPositive(key);
  if (failed(features))
    return failure();
  if (*features)
    return ctx.takeInput(key, **features);
  if (!ctx.input)
    return emitError(ctx.loc())
           << ctx.layer.getWhat() << " is the first layer: it needs '" << key
           << "', the features of its input";
  return ctx.input;
}

static int64_t widthOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape().back();
}

static RankedTensorType withWidth(Value value, int64_t width) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = width;
  return RankedTensorType::get(shape, type.getElementType());
}

/// Builds the primitive op `opName` on `parts` at the layer's location.
static FailureOr<Value> buildPrimitive(LayerContext &ctx, StringRef opName,
                                       LayerOpParts &parts, Type resultType) {
  FailureOr<Operation *> op = ctx.state.createLayerOp(
      opName, ctx.loc(), parts, resultType, /*segmented=*/false);
  if (failed(op))
    return failure();
  return (*op)->getResult(0);
}

FailureOr<Value> tejit::spec::importActivation(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<Activation> activation = ctx.readActivation();
  FailureOr<SmallVector<NamedAttribute>> params =
      ctx.readActivationParams(activation);
  FailureOr<Value> input = takeOpInput(ctx, "features");
  if (failed(layer.finish()) || failed(activation) || failed(params) ||
      failed(input) || failed(ctx.rejectRecipe()))
    return failure();
  int64_t width = widthOf(*input);
  bool gated = isGatedActivation(*activation);
  if (gated && width % 2 != 0)
    return emitError(layer.loc())
           << "a gated activation (" << stringifyActivation(*activation)
           << ") splits its input's " << width
           << " features into two halves: they must be even";
  LayerOpParts parts;
  parts.add(*input);
  parts.set("activation", ActivationAttr::get(ctx.context(), *activation));
  for (NamedAttribute param : *params)
    parts.set(param.getName(), param.getValue());
  return buildPrimitive(ctx, ActivationOp::getOperationName(), parts,
                        withWidth(*input, gated ? width / 2 : width));
}

FailureOr<Value> tejit::spec::importBias(LayerContext &ctx) {
  FailureOr<Value> input = takeOpInput(ctx, "size");
  if (failed(ctx.layer.finish()) || failed(input) || failed(ctx.rejectRecipe()))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  parts.add(ctx.param("bias", {widthOf(*input)}));
  return buildPrimitive(ctx, BiasAddOp::getOperationName(), parts,
                        input->getType());
}

FailureOr<Value> tejit::spec::importAddExtraInput(LayerContext &ctx) {
  FailureOr<Value> input = takeOpInput(ctx, "features");
  if (failed(ctx.layer.finish()) || failed(input) || failed(ctx.rejectRecipe()))
    return failure();
  // The extra input is shaped like the value it is added to.
  Value extra = ctx.state.addInput(ctx.paramName("extra_input"),
                                   input->getType(), ctx.loc());
  LayerOpParts parts;
  parts.add(*input);
  parts.add(extra);
  return buildPrimitive(ctx, AddOp::getOperationName(), parts,
                        input->getType());
}

FailureOr<Value> tejit::spec::importMakeExtraOutput(LayerContext &ctx) {
  FailureOr<Value> input = takeOpInput(ctx, "features");
  if (failed(ctx.layer.finish()) || failed(input) || failed(ctx.rejectRecipe()))
    return failure();
  ctx.state.addResult(ctx.paramName("extra_output"), *input);
  return input;
}
