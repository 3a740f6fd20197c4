//===- DenseLayerImport.cpp - spec layers without attention
//----------------===//
//
// Linear, LayerNorm, RMSNorm, LayerNormLinear and LayerNormMLP. Keys and
// parameter names follow Transformer Engine's constructor arguments and
// state_dict names.
//
//===----------------------------------------------------------------------===//
#include "compiler/spec/LayerContext.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::spec;
using llvm::StringRef;

/// `value`'s type with `width` features; with sequence parallelism, dim 0
/// multiplied by `gathered` (a column-parallel GEMM's output) or divided by
/// `scattered` (a row-parallel one's).
static RankedTensorType withWidth(Value value, int64_t width,
                                  int64_t gathered = 1, int64_t scattered = 1) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = width;
  shape.front() = shape.front() * gathered / scattered;
  return RankedTensorType::get(shape, type.getElementType());
}

FailureOr<Value> tejit::spec::importLinear(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> in = layer.requirePositive("in_features");
  FailureOr<int64_t> out = layer.requirePositive("out_features");
  FailureOr<bool> bias = layer.getBool("bias", true);
  FailureOr<TensorParallelOptions> tp =
      TensorParallelOptions::read(ctx, /*hasMode=*/true);
  if (failed(layer.finish()) || failed(in) || failed(out) || failed(bias) ||
      failed(tp))
    return failure();
  // One rank's features: a column-parallel Linear holds a slice of the
  // outputs, a row-parallel one a slice of the inputs (and reads that slice
  // of the input features; its output and bias are whole).
  bool column = tp->splits(ParallelMode::column);
  bool row = tp->splits(ParallelMode::row);
  FailureOr<int64_t> localIn =
      row ? tp->split(ctx, "in_features", *in) : FailureOr<int64_t>(*in);
  FailureOr<int64_t> localOut =
      column ? tp->split(ctx, "out_features", *out) : FailureOr<int64_t>(*out);
  if (failed(localIn) || failed(localOut))
    return failure();
  // Sequence parallelism: a column-parallel Linear reads one rank's slice
  // of dim 0 and gathers it; a row-parallel one reads all of it and
  // scatters its output.
  std::optional<int64_t> slice;
  if (tp->sequence)
    slice = row ? 1 : tp->size;
  FailureOr<Value> input = ctx.takeInput("in_features", *localIn, slice);
  if (failed(input))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  parts.add(ctx.param("weight", {*localOut, *localIn}));
  parts.addOptional(ctx.param("bias", {*localOut}, *bias));
  tp->addAttributes(ctx, parts);
  parts.set("fp8_recipe", ctx.recipe);
  return ctx.build(LinearOp::getOperationName(), parts,
                   withWidth(*input, *localOut, column ? tp->slices() : 1,
                             row ? tp->slices() : 1),
                   /*segmented=*/false);
}

FailureOr<Value> tejit::spec::importGroupedLinear(LayerContext &ctx) {
  // Transformer Engine's GroupedLinear (docs/grouped-linear.md): num_gemms
  // Linears over consecutive token segments whose sizes, the function's
  // `m_splits` input, are known only at run time. TE's weight0..weight{G-1}
  // (bias0..) are stacked into one parameter.
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> groups = layer.requirePositive("num_gemms");
  FailureOr<int64_t> in = layer.requirePositive("in_features");
  FailureOr<int64_t> out = layer.requirePositive("out_features");
  FailureOr<bool> bias = layer.getBool("bias", true);
  FailureOr<TensorParallelOptions> tp =
      TensorParallelOptions::read(ctx, /*hasMode=*/true);
  if (failed(layer.finish()) || failed(groups) || failed(in) || failed(out) ||
      failed(bias) || failed(tp))
    return failure();
  // Tensor parallelism as Linear's, per expert (docs/grouped-linear.md):
  // column splits every expert's output features, row its input features.
  // Not built: sequence parallelism, and a row-parallel bias (it would be
  // added once, after the sum over the ranks; Transformer Engine refuses a
  // bias with tp_size > 1).
  if (tp->sequence)
    return emitError(layer.valueLoc("sequence_parallel"))
           << "'sequence_parallel' is not supported by GroupedLinear with "
              "tp_size > 1";
  bool column = tp->splits(ParallelMode::column);
  bool row = tp->splits(ParallelMode::row);
  if (row && *bias)
    return emitError(layer.valueLoc("parallel_mode"))
           << "a row-parallel GroupedLinear (tp_size " << tp->size
           << ") has no bias: set 'bias: false'";
  FailureOr<int64_t> localIn =
      row ? tp->split(ctx, "in_features", *in) : FailureOr<int64_t>(*in);
  FailureOr<int64_t> localOut =
      column ? tp->split(ctx, "out_features", *out) : FailureOr<int64_t>(*out);
  if (failed(localIn) || failed(localOut))
    return failure();
  FailureOr<Value> input = ctx.takeInput("in_features", *localIn);
  if (failed(input))
    return failure();
  FailureOr<Value> mSplits =
      ctx.state.mSplits(*groups, layer.valueLoc("num_gemms"));
  if (failed(mSplits))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  parts.add(*mSplits);
  parts.add(ctx.param("weight", {*groups, *localOut, *localIn}));
  parts.addOptional(ctx.param("bias", {*groups, *localOut}, *bias));
  tp->addAttributes(ctx, parts);
  parts.set("fp8_recipe", ctx.recipe);
  return ctx.build(GroupedLinearOp::getOperationName(), parts,
                   withWidth(*input, *localOut), /*segmented=*/false);
}

/// LayerNorm and RMSNorm share their keys; only LayerNorm has a bias.
static FailureOr<Value> importNorm(LayerContext &ctx, Normalization norm) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> hidden = layer.requirePositive("hidden_size");
  FailureOr<double> eps = layer.getFloat("eps", 1e-5);
  FailureOr<bool> zeroCentered = layer.getBool("zero_centered_gamma", false);
  if (failed(layer.finish()) || failed(hidden) || failed(eps) ||
      failed(zeroCentered) || failed(ctx.rejectRecipe()))
    return failure();
  FailureOr<Value> input = ctx.takeInput("hidden_size", *hidden);
  if (failed(input))
    return failure();
  bool isLayerNorm = norm == Normalization::LayerNorm;
  LayerOpParts parts;
  parts.add(*input);
  parts.add(ctx.param("weight", {*hidden}));
  parts.addOptional(ctx.param("bias", {*hidden}, isLayerNorm));
  parts.set("eps", ctx.f64(*eps));
  parts.set("zero_centered_gamma", ctx.flag(*zeroCentered));
  StringRef opName = isLayerNorm ? LayerNormOp::getOperationName()
                                 : RMSNormOp::getOperationName();
  return ctx.build(opName, parts, input->getType(), /*segmented=*/false);
}

FailureOr<Value> tejit::spec::importLayerNorm(LayerContext &ctx) {
  return importNorm(ctx, Normalization::LayerNorm);
}

FailureOr<Value> tejit::spec::importRMSNorm(LayerContext &ctx) {
  return importNorm(ctx, Normalization::RMSNorm);
}

/// Reads the options of a LayerNorm* layer's normalization; adds
/// `return_layernorm_output`'s value to `returnOutput`.
static FailureOr<NormOptions> readFusedNorm(LayerContext &ctx,
                                            bool &returnOutput) {
  FailureOr<bool> ret = ctx.layer.getBool("return_layernorm_output", false);
  FailureOr<NormOptions> norm = NormOptions::read(ctx, "eps");
  if (failed(ret) || failed(norm))
    return failure();
  returnOutput = *ret;
  return norm;
}

FailureOr<Value> tejit::spec::importLayerNormLinear(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> in = layer.requirePositive("in_features");
  FailureOr<int64_t> out = layer.requirePositive("out_features");
  FailureOr<bool> bias = layer.getBool("bias", true);
  bool returnOutput = false;
  FailureOr<NormOptions> norm = readFusedNorm(ctx, returnOutput);
  FailureOr<TensorParallelOptions> tp =
      TensorParallelOptions::read(ctx, /*hasMode=*/true);
  if (failed(layer.finish()) || failed(in) || failed(out) || failed(bias) ||
      failed(norm) || failed(tp))
    return failure();
  if (tp->splits(ParallelMode::row))
    return emitError(layer.valueLoc("parallel_mode"))
           << "'parallel_mode' of a LayerNormLinear must be column: the "
              "norm reads whole rows";
  FailureOr<int64_t> localOut = tp->splits(ParallelMode::column)
                                    ? tp->split(ctx, "out_features", *out)
                                    : FailureOr<int64_t>(*out);
  if (failed(localOut))
    return failure();
  FailureOr<Value> input = ctx.takeInput(
      "in_features", *in,
      tp->sequence ? std::optional<int64_t>(tp->size) : std::nullopt);
  if (failed(input))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  norm->addParams(ctx, parts, "", *in);
  parts.add(ctx.param("weight", {*localOut, *in}));
  parts.addOptional(ctx.param("bias", {*localOut}, *bias));
  norm->addAttributes(ctx, parts);
  parts.set("return_layernorm_output", ctx.flag(returnOutput));
  tp->addAttributes(ctx, parts);
  parts.set("fp8_recipe", ctx.recipe);
  return ctx.build(LayerNormLinearOp::getOperationName(), parts,
                   withWidth(*input, *localOut, tp->slices()),
                   /*segmented=*/true, returnOutput);
}

FailureOr<Value> tejit::spec::importLayerNormMLP(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> hidden = layer.requirePositive("hidden_size");
  FailureOr<int64_t> ffn = layer.requirePositive("ffn_hidden_size");
  FailureOr<bool> bias = layer.getBool("bias", true);
  FailureOr<Activation> activation = ctx.readActivation();
  FailureOr<SmallVector<NamedAttribute>> activationParams =
      ctx.readActivationParams(activation);
  bool returnOutput = false;
  FailureOr<NormOptions> norm = readFusedNorm(ctx, returnOutput);
  FailureOr<TensorParallelOptions> tp =
      TensorParallelOptions::read(ctx, /*hasMode=*/false);
  if (failed(layer.finish()) || failed(hidden) || failed(ffn) || failed(bias) ||
      failed(activation) || failed(activationParams) || failed(norm) ||
      failed(tp))
    return failure();
  FailureOr<int64_t> localFfn = tp->split(ctx, "ffn_hidden_size", *ffn);
  if (failed(localFfn))
    return failure();
  FailureOr<Value> input = ctx.takeInput(
      "hidden_size", *hidden,
      tp->sequence ? std::optional<int64_t>(tp->size) : std::nullopt);
  if (failed(input))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  norm->addParams(ctx, parts, "", *hidden);
  ctx.addMlpParams(parts, "", *activation, *hidden, *localFfn, *bias);
  parts.set("activation", ActivationAttr::get(ctx.context(), *activation));
  for (NamedAttribute param : *activationParams)
    parts.set(param.getName(), param.getValue());
  norm->addAttributes(ctx, parts);
  parts.set("return_layernorm_output", ctx.flag(returnOutput));
  tp->addAttributes(ctx, parts);
  parts.set("fp8_recipe", ctx.recipe);
  return ctx.build(LayerNormMLPOp::getOperationName(), parts, input->getType(),
                   /*segmented=*/true, returnOutput);
}
