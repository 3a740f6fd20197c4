//===- PassEquivalenceTest.cpp - passes keep the meaning of te IR
//----------===//
//
// Each example spec (and a few variants) is imported, run through the
// reference interpreter at the layer level, decomposed and run again: the
// primitive ops must compute the same outputs up to float64 rounding.
// te-autodiff's backward functions are then checked against central finite
// differences of the forward function, and its forward function against the
// decomposed outputs. Inputs are fresh random data for every test.
//
//===----------------------------------------------------------------------===//
#include "PipelineTestUtils.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace mlir;
using namespace tejit::testing;

namespace {

constexpr uint64_t kSeed = 1234, kOffset = 77;

/// Other shapes and options than the examples': odd batch and sequence
/// sizes, bshd, fp32, each smooth activation, MQA, post-LN residuals,
/// dropout, padding and arbitrary masks.
const std::pair<const char *, const char *> kVariants[] = {
    {"transformer_bshd_mqa", R"(
params_dtype: fp32
seq_length: 6
batch_size: 3
input_format: bshd
layers:
  - {type: TransformerLayer, hidden_size: 24, ffn_hidden_size: 40,
     num_attention_heads: 3, num_gqa_groups: 1, activation: qgelu,
     self_attn_mask_type: padding_causal,
     apply_residual_connection_post_layernorm: true, zero_centered_gamma: true}
)"},
    {"transformer_kv_channels_silu", R"(
seq_length: 5
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, kv_channels: 12, activation: silu,
     normalization: RMSNorm, self_attn_mask_type: arbitrary,
     hidden_dropout: 0.3, attention_dropout: 0.2}
)"},
    {"mlp_variants", R"(
seq_length: 7
batch_size: 1
layers:
  - {type: LayerNormMLP, hidden_size: 12, ffn_hidden_size: 20, activation: qgeglu}
  - {type: LayerNormMLP, hidden_size: 12, ffn_hidden_size: 8, activation: gelu,
     normalization: RMSNorm, bias: false}
  - {type: LayerNormLinear, in_features: 12, out_features: 5, return_layernorm_output: true}
)"},
    // clamped_swiglu (GPT-OSS's MLP) with limits that the FC1 outputs
    // (about N(0, 0.5^2)) cross on both sides, and with TE's defaults.
    {"mlp_clamped_swiglu", R"(
seq_length: 7
batch_size: 1
layers:
  - {type: LayerNormMLP, hidden_size: 12, ffn_hidden_size: 10,
     activation: clamped_swiglu,
     activation_params: {limit: 0.5, glu_linear_offset: 0.0}}
  - {type: LayerNormMLP, hidden_size: 12, ffn_hidden_size: 8,
     activation: clamped_swiglu, normalization: RMSNorm, bias: false}
)"},
    {"transformer_clamped_swiglu", R"(
seq_length: 5
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 12,
     num_attention_heads: 2, normalization: RMSNorm,
     activation: clamped_swiglu,
     activation_params: {limit: 0.6, alpha: 1.5, glu_linear_offset: 1.0},
     hidden_dropout: 0.2, rotary_pos_emb: true}
)"},
    {"main_grad", R"(
seq_length: 4
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, fuse_wgrad_accumulation: true}
  - {type: Linear, in_features: 16, out_features: 8,
     fuse_wgrad_accumulation: true}
)"},
    {"attention_bshd_causal_bottom_right", R"(
seq_length: 9
batch_size: 2
input_format: bshd
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 6,
     num_gqa_groups: 2, attn_mask_type: causal_bottom_right, attention_dropout: 0.25}
)"},
    {"attention_cross", R"(
seq_length: 7
batch_size: 2
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 6,
     num_gqa_groups: 2, kv_seq_length: 5, attn_mask_type: padding_causal,
     attention_dropout: 0.25}
)"},
    {"attention_query_mask", R"(
seq_length: 7
batch_size: 2
input_format: bshd
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 6,
     num_gqa_groups: 2, attn_mask_type: padding, padded_queries: true,
     attention_dropout: 0.25}
)"},
    {"mha_layernorm_output", R"(
seq_length: 6
batch_size: 2
layers:
  - {type: MultiheadAttention, hidden_size: 16, num_attention_heads: 2,
     input_layernorm: true, return_layernorm_output: true,
     rotary_pos_emb: true, rotary_dim: 4, attention_dropout: 0.2}
)"},
    {"drop_path", R"(
seq_length: 5
batch_size: 3
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, drop_path_rate: 0.4, hidden_dropout: 0.2}
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, drop_path_rate: 0.5, hidden_dropout: 0.0,
     parallel_attention_mlp: true}
)"},
    {"parallel_attention_mlp", R"(
seq_length: 5
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, parallel_attention_mlp: true,
     normalization: RMSNorm, activation: swiglu, rotary_pos_emb: true,
     rotary_dim: 4, rotary_pos_interleaved: true, hidden_dropout: 0.3}
)"},
    {"decoder_cross", R"(
seq_length: 6
batch_size: 2
input_format: bshd
layers:
  - {type: MultiheadAttention, hidden_size: 16, num_attention_heads: 4,
     num_gqa_groups: 2, attention_type: cross, kv_seq_length: 5,
     attn_mask_type: padding_causal, padded_queries: true,
     attention_dropout: 0.25}
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, layer_type: decoder, kv_seq_length: 5,
     enc_dec_attn_mask_type: padding, self_attn_mask_type: causal,
     padded_queries: true, apply_residual_connection_post_layernorm: true,
     hidden_dropout: 0.3, attention_dropout: 0.2, rotary_pos_emb: true}
)"},
    {"output_layernorm", R"(
seq_length: 5
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, output_layernorm: true,
     apply_residual_connection_post_layernorm: true, hidden_dropout: 0.2}
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, output_layernorm: true,
     normalization: RMSNorm}
)"},
    {"packed_attention", R"(
params_dtype: fp32
input_format: thd
seq_length: 5
batch_size: 3
tokens: 12
layers:
  - {type: DotProductAttention, num_attention_heads: 4, num_gqa_groups: 2,
     kv_channels: 4, attn_mask_type: padding_causal, attention_dropout: 0.2}
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, self_attn_mask_type: padding,
     rotary_pos_emb: true, drop_path_rate: 0.1}
)"},
    {"packed_cross_attention", R"(
params_dtype: fp32
input_format: thd
seq_length: 5
batch_size: 3
tokens: 12
layers:
  - {type: DotProductAttention, num_attention_heads: 4, num_gqa_groups: 2,
     kv_channels: 4, attn_mask_type: padding, kv_seq_length: 7,
     kv_tokens: 18, attention_dropout: 0.1}
)"},
    {"main_grad_bf16", R"(
seq_length: 4
batch_size: 2
layers:
  - {type: LayerNormMLP, hidden_size: 16, ffn_hidden_size: 24,
     fuse_wgrad_accumulation: true, main_grad_dtype: bf16}
)"},
    {"sliding_window", R"(
seq_length: 7
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, window_size: [2, 0], attention_dropout: 0.2}
  - {type: MultiheadAttention, hidden_size: 16, num_attention_heads: 2,
     attn_mask_type: padding, window_size: [1, 2]}
)"},
    // Attention bias and ALiBi (docs/attention-bias.md): a bhss bias over
    // keys of their own length, then vanilla ALiBi of 3 heads (n = 2).
    {"attention_bias", R"(
seq_length: 5
batch_size: 2
layers:
  - {type: DotProductAttention, num_attention_heads: 3, kv_channels: 4,
     attn_mask_type: padding, kv_seq_length: 7,
     core_attention_bias_type: post_scale_bias, bias_shape: bhss}
  - {type: TransformerLayer, hidden_size: 12, ffn_hidden_size: 16,
     num_attention_heads: 3, core_attention_bias_type: alibi,
     attention_dropout: 0.2}
)"},
    // A bias with its gradient, shared by a decoder's self-attention and a
    // MultiheadAttention, under attention dropout.
    {"attention_bias_grad", R"(
seq_length: 4
batch_size: 2
input_format: bshd
layers:
  - {type: TransformerLayer, hidden_size: 16, ffn_hidden_size: 24,
     num_attention_heads: 2, layer_type: decoder, kv_seq_length: 6,
     core_attention_bias_type: post_scale_bias, bias_requires_grad: true,
     attention_dropout: 0.2}
  - {type: MultiheadAttention, hidden_size: 16, num_attention_heads: 2,
     input_layernorm: true, attn_mask_type: no_mask,
     core_attention_bias_type: post_scale_bias, bias_requires_grad: true}
)"},
    // The caller's [b, h] ALiBi slopes in a cross-attention (padded keys)
    // and a self-attention (padding_causal, top-left).
    {"alibi_slopes", R"(
seq_length: 5
batch_size: 2
layers:
  - {type: MultiheadAttention, hidden_size: 12, num_attention_heads: 3,
     attention_type: cross, kv_seq_length: 3, attn_mask_type: padding,
     core_attention_bias_type: alibi, alibi_slopes: batch_heads}
  - {type: MultiheadAttention, hidden_size: 12, num_attention_heads: 3,
     attn_mask_type: padding_causal, core_attention_bias_type: alibi,
     alibi_slopes: batch_heads}
)"},
    // Transformer Engine's fusible ops as layers (tejit.pytorch.ops): an
    // extra output, a bias and activations outside any layer, a residual
    // from an extra input; te-decompose flattens them to [tokens, features].
    {"fusible_ops", R"(
seq_length: 5
batch_size: 2
layers:
  - {type: RMSNorm, name: norm, hidden_size: 12}
  - {type: MakeExtraOutput, name: branch}
  - {type: Linear, name: fc1, in_features: 12, out_features: 20, bias: false}
  - {type: Bias, name: fc1_bias}
  - {type: Activation, name: act, activation: swiglu}
  - {type: Linear, name: fc2, in_features: 10, out_features: 12}
  - {type: AddExtraInput, name: residual}
  - {type: Activation, name: act2, activation: clamped_swiglu,
     activation_params: {limit: 0.5}}
)"},
};

class PassEquivalence : public ::testing::TestWithParam<std::string> {
protected:
  PassEquivalence()
      : handler(&context, [](Diagnostic &diag) {
          ADD_FAILURE() << diag.str();
          return success();
        }) {
    context.loadDialect<te::TEDialect, func::FuncDialect>();
  }

  /// An example spec by file name, or one of kVariants by its name.
  OwningOpRef<ModuleOp> importExample(StringRef name) {
    for (const auto &[variant, text] : kVariants)
      if (name == variant)
        return importSpecText(context, text, (name + ".yaml").str());
    return importExampleFile(context, name);
  }

  void runPasses(ModuleOp module, bool autodiff) {
    tejit::Stage stage =
        autodiff ? tejit::Stage::Autodiff : tejit::Stage::Primitive;
    ASSERT_TRUE(runPipeline(module, {stage, /*training=*/true}));
  }

  std::vector<Tensor> randomArgs(func::FuncOp function) {
    return randomLayerArgs(function, rng);
  }

  std::vector<Tensor> run(func::FuncOp function, ArrayRef<Tensor> args) {
    FailureOr<std::vector<Tensor>> results =
        tejit::interp::run(function, args, {kSeed, kOffset});
    EXPECT_TRUE(succeeded(results));
    return succeeded(results) ? *results : std::vector<Tensor>();
  }

  /// The decomposed function takes the layer function's arguments plus
  /// rng_state = [seed, offset] when it has dropout.
  static std::vector<Tensor> withRngState(func::FuncOp function,
                                          std::vector<Tensor> args) {
    if (function.getNumArguments() == args.size() + 1)
      args.push_back(Tensor({2}, {double(kSeed), double(kOffset)}));
    return args;
  }

  MLIRContext context;
  ScopedDiagnosticHandler handler;
  std::mt19937_64 rng{std::random_device{}()};
};

TEST_P(PassEquivalence, DecomposeKeepsOutputs) {
  OwningOpRef<ModuleOp> module = importExample(GetParam());
  ASSERT_TRUE(module);
  func::FuncOp layers = firstFunction(*module);
  std::vector<Tensor> args = randomArgs(layers);
  std::vector<Tensor> expected = run(layers, args);

  runPasses(*module, /*autodiff=*/false);
  func::FuncOp primitives = firstFunction(*module);
  std::vector<Tensor> actual = run(primitives, withRngState(primitives, args));
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_LT(relativeError(actual[i], expected[i]), 1e-10) << "result " << i;
}

/// sum(outputs * weights): a scalar whose gradient is the backward function
/// evaluated at `weights`.
double weightedSum(const std::vector<Tensor> &outputs,
                   const std::vector<Tensor> &weights) {
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i)
    for (size_t j = 0; j < weights[i].data.size(); ++j)
      sum += outputs[i].data[j] * weights[i].data[j];
  return sum;
}

TEST_P(PassEquivalence, AutodiffMatchesFiniteDifferences) {
  OwningOpRef<ModuleOp> module = importExample(GetParam());
  ASSERT_TRUE(module);
  func::FuncOp layers = firstFunction(*module);
  std::vector<Tensor> args = randomArgs(layers);
  std::vector<Tensor> expected = run(layers, args);
  size_t numOutputs = expected.size();

  runPasses(*module, /*autodiff=*/true);
  func::FuncOp forward = firstFunction(*module);
  func::FuncOp backward = backwardOf(*module, forward);
  ASSERT_TRUE(backward);
  args = withRngState(forward, args);
  std::vector<Tensor> forwardResults = run(forward, args);
  ASSERT_GE(forwardResults.size(), numOutputs);
  for (size_t i = 0; i < numOutputs; ++i)
    EXPECT_LT(relativeError(forwardResults[i], expected[i]), 1e-10);

  // Backward arguments: output gradients, forward arguments, saved results,
  // and the main_grads that weights under fuse_wgrad_accumulation add to.
  std::vector<Tensor> outputGrads;
  std::vector<Tensor> backwardArgs;
  for (unsigned i = 0; i < backward.getNumArguments(); ++i) {
    auto name = backward.getArgAttrOfType<StringAttr>(i, "te.name");
    if (auto arg = backward.getArgAttrOfType<IntegerAttr>(i, "te.forward_arg"))
      backwardArgs.push_back(args[arg.getInt()]);
    else if (auto result =
                 backward.getArgAttrOfType<IntegerAttr>(i, "te.forward_result"))
      backwardArgs.push_back(forwardResults[result.getInt()]);
    else if (name && name.getValue().starts_with("main_grad."))
      backwardArgs.push_back(tejit::interp::randomTensor(
          cast<RankedTensorType>(backward.getArgumentTypes()[i]), rng));
    else {
      outputGrads.push_back(tejit::interp::randomTensor(
          cast<RankedTensorType>(backward.getArgumentTypes()[i]), rng));
      backwardArgs.push_back(outputGrads.back());
    }
  }
  ASSERT_EQ(outputGrads.size(), numOutputs);
  std::vector<Tensor> grads = run(backward, backwardArgs);
  ASSERT_EQ(grads.size(), backward.getNumResults());

  // Every float argument that reaches an output gets a gradient; one that
  // accumulates into main_grad gets main_grad + the gradient.
  int accumulating = 0;
  for (unsigned r = 0; r < backward.getNumResults(); ++r) {
    int64_t argIndex =
        backward.getResultAttrOfType<IntegerAttr>(r, "te.grad_of").getInt();
    Tensor &arg = args[argIndex];
    const Tensor *mainGrad = nullptr;
    if (auto accumulates =
            backward.getResultAttrOfType<StringAttr>(r, "te.accumulates")) {
      for (unsigned i = 0; i < backward.getNumArguments(); ++i)
        if (backward.getArgAttr(i, "te.name") == accumulates)
          mainGrad = &backwardArgs[i];
      ASSERT_TRUE(mainGrad) << accumulates.str();
      ++accumulating;
      EXPECT_TRUE(forward.getArgAttr(argIndex, "te.main_grad"));
    }
    // A few random elements per argument: each costs two forward runs.
    for (int probe = 0; probe < 3; ++probe) {
      size_t element = rng() % arg.data.size();
      double saved = arg.data[element];
      auto centralDifference = [&](double relativeStep) {
        double step = relativeStep * std::max(1.0, std::fabs(saved));
        arg.data[element] = saved + step;
        double plus = weightedSum(run(forward, args), outputGrads);
        arg.data[element] = saved - step;
        double minus = weightedSum(run(forward, args), outputGrads);
        arg.data[element] = saved;
        return (plus - minus) / (2 * step);
      };
      double analytic =
          grads[r].data[element] - (mainGrad ? mainGrad->data[element] : 0.0);
      auto close = [&](double numeric) {
        return std::fabs(analytic - numeric) <=
               1e-5 * std::max(1.0, std::fabs(numeric));
      };
      double numeric = centralDifference(1e-5);
      // A kink of a piecewise activation (clamped_swiglu's clamps) inside
      // the step spoils the difference (in about 1 run in 300 of the
      // clamped_swiglu variants); a step 1000 times smaller straddles one
      // 1000 times less often, while a wrong gradient stays wrong.
      if (!close(numeric))
        numeric = centralDifference(1e-8);
      EXPECT_NEAR(analytic, numeric, 1e-5 * std::max(1.0, std::fabs(numeric)))
          << "d output / d arg " << argIndex << "[" << element << "]";
    }
  }
  // A bias with bias_requires_grad gets its gradient; one without, none.
  bool biasGrad = false;
  for (unsigned r = 0; r < backward.getNumResults(); ++r)
    biasGrad |= backward.getResultAttr(r, "te.name") ==
                StringAttr::get(&context, "grad.core_attention_bias");
  EXPECT_EQ(biasGrad, GetParam() == "attention_bias_grad");
  // The variant's GEMM weights: qkv, proj, fc1, fc2 and the Linear's.
  EXPECT_EQ(accumulating, GetParam() == "main_grad"        ? 5
                          : GetParam() == "main_grad_bf16" ? 2
                                                           : 0);
}

INSTANTIATE_TEST_SUITE_P(
    Examples, PassEquivalence,
    ::testing::Values(
        "quickstart_small.yaml", "llama_small.json", "all_layers_small.yaml",
        "attention_small.yaml", "decoder_small.yaml", "gptj_small.yaml",
        "transformer_bshd_mqa", "transformer_kv_channels_silu", "mlp_variants",
        "mlp_clamped_swiglu", "transformer_clamped_swiglu", "main_grad",
        "attention_bshd_causal_bottom_right", "sliding_window",
        "main_grad_bf16", "attention_cross", "attention_query_mask",
        "mha_layernorm_output", "drop_path", "parallel_attention_mlp",
        "decoder_cross", "output_layernorm", "packed_small.yaml",
        "packed_attention", "packed_cross_attention", "attention_bias",
        "attention_bias_grad", "alibi_slopes", "fusible_ops"),
    [](const auto &info) {
      std::string name = info.param;
      for (char &c : name)
        if (!isalnum(static_cast<unsigned char>(c)))
          c = '_';
      return name;
    });

} // namespace
