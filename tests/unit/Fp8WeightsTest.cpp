//===- Fp8WeightsTest.cpp - FP8 weight arguments (fp8_weights) ------------===//
//
// Transformer Engine's fp8_model_init: with `fp8_weights: true` a layer's
// GEMM weights arrive already in FP8, with their scale_inv and (training)
// their transpose. Each case compiles a spec twice, with and without the
// key, and runs one training step of each in the reference interpreter:
// the weights of the plain program are the FP8 weights dequantized, with
// scales it reproduces exactly (1 at the first DelayedScaling step; the
// power-of-two current scale, which maps the dequantized weight back onto
// the same FP8 values), so every output and gradient must agree bit for
// bit. Any slip in which tensor, transpose or scale the FP8 GEMMs read
// breaks that.
//
//===----------------------------------------------------------------------===//
#include "Fp8WeightsFixture.h"

#include "compiler/interpreter/Fp8.h"
#include "compiler/interpreter/Kernels.h"

#include <map>

using namespace mlir;
using namespace tejit;
using namespace tejit::testing;

namespace {

struct Fp8WeightsCase {
  const char *name;
  /// The spec up to its one layer's mapping, which the test closes with or
  /// without `fp8_weights: true`.
  const char *spec;
  /// Whether weights are quantized with power-of-two current scales
  /// (Float8CurrentScaling with power_2_scale) or with scale 1 (the first
  /// step of DelayedScaling).
  bool currentScaling;
  /// How many GEMM weights the layer has.
  int weights;
};

const Fp8WeightsCase kCases[] = {
    {"linear_delayed_hybrid", R"(
seq_length: 16
batch_size: 4
recipe: {type: DelayedScaling, fp8_format: HYBRID, amax_history_len: 4}
layers:
  - {type: Linear, in_features: 64, out_features: 48)",
     false, 1},
    {"mlp_swiglu_current", R"(
seq_length: 8
batch_size: 4
recipe: {type: Float8CurrentScaling, power_2_scale: true}
layers:
  - {type: LayerNormMLP, hidden_size: 32, ffn_hidden_size: 64,
     activation: swiglu, normalization: RMSNorm)",
     true, 2},
    {"llama_current_power2", R"(
seq_length: 16
batch_size: 2
recipe: {type: Float8CurrentScaling, power_2_scale: true}
layers:
  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 96,
     num_attention_heads: 4, num_gqa_groups: 2, normalization: RMSNorm,
     activation: swiglu, bias: false, hidden_dropout: 0.0,
     attention_dropout: 0.0, rotary_pos_emb: true)",
     true, 4},
    {"decoder_delayed_e4m3", R"(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling, fp8_format: E4M3}
layers:
  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 64,
     num_attention_heads: 2, layer_type: decoder, kv_seq_length: 24,
     enc_dec_attn_mask_type: padding, hidden_dropout: 0.0,
     attention_dropout: 0.0)",
     false, 7},
};

class Fp8Weights : public Fp8WeightsFixture<Fp8WeightsCase> {
protected:
  /// Quantizes `weight` in place to the values its FP8 copy dequantizes to
  /// and returns that copy (the FP8 values) and its scale_inv. Current
  /// scaling: the power-of-two scale the plain program's cast computes
  /// from the weight, which maps the dequantized weight back onto the same
  /// FP8 values (its amax stays within a factor 2 of 448 / scale).
  std::pair<Tensor, double> quantize(Tensor &weight) {
    interp::Fp8Scale scale{1, 1};
    if (GetParam().currentScaling)
      scale = interp::currentScale(interp::absMax(weight),
                                   interp::Fp8Kind::E4M3, /*power2=*/true);
    Tensor fp8 = interp::quantize(weight, scale.scale, interp::Fp8Kind::E4M3);
    for (size_t i = 0; i < fp8.data.size(); ++i)
      weight.data[i] = fp8.data[i] * double(scale.scaleInv);
    return {fp8, scale.scaleInv};
  }
};

TEST_P(Fp8Weights, TrainingStepEqualsDequantizedWeights) {
  Programs programs;
  ASSERT_TRUE(compileBoth(programs));
  func::FuncOp layerFunction = programs.layerFunction;
  func::FuncOp forward = programs.forward;
  std::vector<Tensor> &plainArgs = programs.plainArgs;
  const std::vector<Tensor> &grads = programs.grads;
  ModuleOp plain = *programs.plain, fp8 = *programs.fp8;

  // The FP8 program's arguments: the layer's, its weights in FP8, then
  // each weight's scale_inv and transpose (placeholders where the meta
  // state goes: TrainingStep supplies it).
  std::map<std::string, std::pair<Tensor, double>> fp8Weights;
  std::vector<Tensor> fp8Args(forward.getNumArguments());
  int marked = 0;
  for (unsigned i = 0; i < layerFunction.getNumArguments(); ++i) {
    fp8Args[i] = plainArgs[i];
    if (!forward.getArgAttr(i, "te.fp8_weight"))
      continue;
    ++marked;
    EXPECT_TRUE(cast<RankedTensorType>(forward.getArgumentTypes()[i])
                    .getElementType()
                    .isFloat8E4M3FN())
        << argName(forward, i).str();
    auto [values, scaleInv] = quantize(plainArgs[i]);
    fp8Args[i] = values;
    fp8Weights[argName(forward, i).str()] = {values, scaleInv};
  }
  EXPECT_EQ(marked, GetParam().weights);
  int extra = 0;
  for (unsigned i = layerFunction.getNumArguments();
       i < forward.getNumArguments(); ++i) {
    StringRef name = argName(forward, i);
    if (name.starts_with("fp8_meta."))
      continue;
    if (name.consume_back(".scale_inv")) {
      fp8Args[i] = Tensor({1}, {fp8Weights.at(name.str()).second});
      ++extra;
    } else if (name.consume_back(".transpose")) {
      fp8Args[i] = interp::transpose(fp8Weights.at(name.str()).first);
      ++extra;
    } else {
      ADD_FAILURE() << "unexpected argument " << name.str();
    }
  }
  EXPECT_EQ(extra, 2 * GetParam().weights);

  func::FuncOp plainForward = firstFunction(plain);
  TrainingStep plainStep(plainForward, backwardOf(plain, plainForward));
  TrainingStep fp8Step(forward, backwardOf(fp8, forward));
  std::map<std::string, Tensor> expected = plainStep.run(plainArgs, grads);
  std::map<std::string, Tensor> actual = fp8Step.run(fp8Args, grads);
  expectSameResults(expected, actual);
}

TEST_P(Fp8Weights, InferenceTakesNoTranspose) {
  OwningOpRef<ModuleOp> module = compile(true, false, Stage::Scaled);
  ASSERT_TRUE(module);
  func::FuncOp forward = firstFunction(*module);
  int scaleInvs = 0;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    EXPECT_FALSE(argName(forward, i).ends_with(".transpose"));
    scaleInvs += argName(forward, i).ends_with(".scale_inv") &&
                 !argName(forward, i).starts_with("fp8_meta.");
  }
  EXPECT_EQ(scaleInvs, GetParam().weights);
  // No weight is cast in the program: only activations are quantized.
  forward.walk([&](te::QuantizeOp quantize) {
    auto arg = dyn_cast<BlockArgument>(quantize.getInput());
    EXPECT_FALSE(arg && forward.getArgAttr(arg.getArgNumber(), "te.parameter"))
        << argName(forward, arg.getArgNumber()).str();
  });
}

INSTANTIATE_TEST_SUITE_P(Specs, Fp8Weights, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return info.param.name; });

} // namespace
