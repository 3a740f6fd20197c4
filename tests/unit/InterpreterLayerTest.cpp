//===- InterpreterLayerTest.cpp - layer ops vs primitive compositions -----===//
//
// Each layer op must compute what a hand-written sequence of primitive ops
// computes (norm, matmul, bias_add, slice, reshape, rotary, attention, act,
// dropout, add), with dropout streams following DropoutRng.h: layer op n of a
// function draws from streams 16 n + site, seeded by Options.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"

using namespace tejit::testing;
using mlir::te::Activation;

namespace {

/// The seed and offset the layer ops run with, and the rng_state argument
/// that gives the composed primitives the same key.
constexpr uint64_t kSeed = 1234, kOffset = 99;
const tejit::interp::Options kOptions = {kSeed, kOffset};
Tensor rngState() { return Tensor({2}, {double(kSeed), double(kOffset)}); }

/// Runs @layer on random args and @composed on the same args (plus the
/// rng_state when `withRng`); expects equal results, and returns them.
class LayerTest : public InterpreterTest {
protected:
  std::vector<Tensor> expectSameAsComposition(const std::string &source,
                                              bool withRng,
                                              double stddev = 1.0) {
    mlir::func::FuncOp layer = parse(source, "layer");
    mlir::func::FuncOp composed =
        modules.back()->lookupSymbol<mlir::func::FuncOp>("composed");
    if (!layer || !composed)
      return {};
    std::vector<Tensor> args = randomArgs(layer, stddev);
    std::vector<Tensor> expected =
        run(composed, withRng ? withRngState(args) : args);
    std::vector<Tensor> actual = run(layer, args, kOptions);
    EXPECT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size() && i < expected.size(); ++i)
      EXPECT_TRUE(allClose(actual[i], expected[i], 1e-12, 1e-12))
          << "result " << i;
    lastArgs = args;
    return actual;
  }

  static std::vector<Tensor> withRngState(std::vector<Tensor> args) {
    args.push_back(rngState());
    return args;
  }

  /// The args of the last expectSameAsComposition.
  std::vector<Tensor> lastArgs;
};

} // namespace

//===----------------------------------------------------------------------===//
// GEMM layers
//===----------------------------------------------------------------------===//

TEST_F(LayerTest, LinearAndLayerNormLinear) {
  expectSameAsComposition(R"mlir(
func.func @layer(%x: tensor<3x2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>,
                 %w: tensor<6x8xf32>, %wb: tensor<6xf32>, %rg: tensor<8xf32>)
    -> (tensor<3x2x6xf32>, tensor<3x2x8xf32>, tensor<3x2x6xf32>,
        tensor<3x2x6xf32>) {
  %0:2 = te.layernorm_linear %x ln_weight(%g) ln_bias(%b) weight(%w)
      {eps = 0.001 : f64, return_layernorm_output}
      : (tensor<3x2x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<6x8xf32>)
        -> (tensor<3x2x6xf32>, tensor<3x2x8xf32>)
  %1 = te.layernorm_linear %x ln_weight(%rg) weight(%w) bias(%wb)
      {normalization = #te.normalization<RMSNorm>, zero_centered_gamma}
      : (tensor<3x2x8xf32>, tensor<8xf32>, tensor<6x8xf32>, tensor<6xf32>)
        -> tensor<3x2x6xf32>
  %2 = te.linear %x weight(%w) bias(%wb)
      : (tensor<3x2x8xf32>, tensor<6x8xf32>, tensor<6xf32>) -> tensor<3x2x6xf32>
  return %0#0, %0#1, %1, %2 : tensor<3x2x6xf32>, tensor<3x2x8xf32>,
      tensor<3x2x6xf32>, tensor<3x2x6xf32>
}
func.func @composed(%x: tensor<3x2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>,
                    %w: tensor<6x8xf32>, %wb: tensor<6xf32>, %rg: tensor<8xf32>)
    -> (tensor<3x2x6xf32>, tensor<3x2x8xf32>, tensor<3x2x6xf32>,
        tensor<3x2x6xf32>) {
  %n, %mean, %rs = te.layernorm_fwd %x, %g, %b {eps = 0.001 : f64}
      : (tensor<3x2x8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<3x2x8xf32>, tensor<3x2xf32>, tensor<3x2xf32>)
  %nf = te.reshape %n : tensor<3x2x8xf32> -> tensor<6x8xf32>
  %y0 = te.matmul %nf, %w {transpose_b}
      : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x6xf32>
  %y0r = te.reshape %y0 : tensor<6x6xf32> -> tensor<3x2x6xf32>
  %r, %rrs = te.rmsnorm_fwd %x, %rg {eps = 1.0e-5 : f64, zero_centered_gamma}
      : (tensor<3x2x8xf32>, tensor<8xf32>)
        -> (tensor<3x2x8xf32>, tensor<3x2xf32>)
  %rf = te.reshape %r : tensor<3x2x8xf32> -> tensor<6x8xf32>
  %y1 = te.matmul %rf, %w {transpose_b}
      : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x6xf32>
  %y1b = te.bias_add %y1, %wb
      : tensor<6x6xf32>, tensor<6xf32> -> tensor<6x6xf32>
  %y1r = te.reshape %y1b : tensor<6x6xf32> -> tensor<3x2x6xf32>
  %xf = te.reshape %x : tensor<3x2x8xf32> -> tensor<6x8xf32>
  %y2 = te.matmul %xf, %w {transpose_b}
      : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x6xf32>
  %y2b = te.bias_add %y2, %wb
      : tensor<6x6xf32>, tensor<6xf32> -> tensor<6x6xf32>
  %y2r = te.reshape %y2b : tensor<6x6xf32> -> tensor<3x2x6xf32>
  return %y0r, %n, %y1r, %y2r : tensor<3x2x6xf32>, tensor<3x2x8xf32>,
      tensor<3x2x6xf32>, tensor<3x2x6xf32>
}
)mlir",
                          /*withRng=*/false);
}

namespace {

/// LayerNorm MLP with both biases: fc1 is [$ROWS, 8], ffn_hidden_size 5.
const char *kLayerNormMlp = R"mlir(
func.func @layer(%x: tensor<3x2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>,
                 %w1: $W1, %b1: $B1, %w2: tensor<8x5xf32>, %b2: tensor<8xf32>)
    -> tensor<3x2x8xf32> {
  %0 = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
      {activation = #te.activation<$ACT>$LAYERPARAMS, eps = 0.001 : f64}
      : (tensor<3x2x8xf32>, tensor<8xf32>, tensor<8xf32>, $W1, $B1,
         tensor<8x5xf32>, tensor<8xf32>) -> tensor<3x2x8xf32>
  return %0 : tensor<3x2x8xf32>
}
func.func @composed(%x: tensor<3x2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>,
                    %w1: $W1, %b1: $B1, %w2: tensor<8x5xf32>,
                    %b2: tensor<8xf32>)
    -> tensor<3x2x8xf32> {
  %n, %mean, %rs = te.layernorm_fwd %x, %g, %b {eps = 0.001 : f64}
      : (tensor<3x2x8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<3x2x8xf32>, tensor<3x2xf32>, tensor<3x2xf32>)
  %nf = te.reshape %n : tensor<3x2x8xf32> -> tensor<6x8xf32>
  %h0 = te.matmul %nf, %w1 {transpose_b} : tensor<6x8xf32>, $W1 -> $H
  %h = te.bias_add %h0, %b1 : $H, $B1 -> $H
  %a = te.act <$ACT> %h $PRIMPARAMS : $H -> tensor<6x5xf32>
  %o0 = te.matmul %a, %w2 {transpose_b}
      : tensor<6x5xf32>, tensor<8x5xf32> -> tensor<6x8xf32>
  %o = te.bias_add %o0, %b2 : tensor<6x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
  %y = te.reshape %o : tensor<6x8xf32> -> tensor<3x2x8xf32>
  return %y : tensor<3x2x8xf32>
}
)mlir";

/// RMSNorm MLP without biases, zero-centered gamma, returning the norm
/// output.
const char *kRMSNormMlp = R"mlir(
func.func @layer(%x: tensor<3x2x8xf32>, %g: tensor<8xf32>, %w1: $W1,
                 %w2: tensor<8x5xf32>)
    -> (tensor<3x2x8xf32>, tensor<3x2x8xf32>) {
  %0:2 = te.layernorm_mlp %x ln_weight(%g) fc1_weight(%w1) fc2_weight(%w2)
      {activation = #te.activation<$ACT>$LAYERPARAMS,
       normalization = #te.normalization<RMSNorm>, zero_centered_gamma,
       return_layernorm_output}
      : (tensor<3x2x8xf32>, tensor<8xf32>, $W1, tensor<8x5xf32>)
        -> (tensor<3x2x8xf32>, tensor<3x2x8xf32>)
  return %0#0, %0#1 : tensor<3x2x8xf32>, tensor<3x2x8xf32>
}
func.func @composed(%x: tensor<3x2x8xf32>, %g: tensor<8xf32>, %w1: $W1,
                    %w2: tensor<8x5xf32>)
    -> (tensor<3x2x8xf32>, tensor<3x2x8xf32>) {
  %n, %rs = te.rmsnorm_fwd %x, %g {eps = 1.0e-5 : f64, zero_centered_gamma}
      : (tensor<3x2x8xf32>, tensor<8xf32>)
        -> (tensor<3x2x8xf32>, tensor<3x2xf32>)
  %nf = te.reshape %n : tensor<3x2x8xf32> -> tensor<6x8xf32>
  %h = te.matmul %nf, %w1 {transpose_b} : tensor<6x8xf32>, $W1 -> $H
  %a = te.act <$ACT> %h $PRIMPARAMS : $H -> tensor<6x5xf32>
  %o = te.matmul %a, %w2 {transpose_b}
      : tensor<6x5xf32>, tensor<8x5xf32> -> tensor<6x8xf32>
  %y = te.reshape %o : tensor<6x8xf32> -> tensor<3x2x8xf32>
  return %y, %n : tensor<3x2x8xf32>, tensor<3x2x8xf32>
}
)mlir";

class LayerNormMlpTest : public LayerTest,
                         public ::testing::WithParamInterface<Activation> {
protected:
  std::string instantiate(const char *source) {
    int64_t rows = mlir::te::isGatedActivation(GetParam()) ? 10 : 5;
    // clamped_swiglu with a limit that FC1's outputs (std about 3) cross
    // on both sides: the layer must hand its parameters to the activation.
    std::string params =
        GetParam() == Activation::clamped_swiglu
            ? "activation_limit = 0.75 : f64, activation_alpha = 1.5 : f64, "
              "glu_linear_offset = 0.25 : f64"
            : "";
    return substitute(
        source, {{"W1", tensorType({rows, 8})},
                 {"B1", tensorType({rows})},
                 {"H", tensorType({6, rows})},
                 {"ACT", mlir::te::stringifyActivation(GetParam()).str()},
                 {"LAYERPARAMS", params.empty() ? "" : ", " + params},
                 {"PRIMPARAMS", params.empty() ? "" : "{" + params + "}"}});
  }
};

} // namespace

TEST_P(LayerNormMlpTest, LayerNormWithBiases) {
  expectSameAsComposition(instantiate(kLayerNormMlp), /*withRng=*/false);
}

TEST_P(LayerNormMlpTest, RMSNormWithoutBiases) {
  expectSameAsComposition(instantiate(kRMSNormMlp), /*withRng=*/false);
}

INSTANTIATE_TEST_SUITE_P(
    All, LayerNormMlpTest,
    ::testing::Values(Activation::gelu, Activation::geglu, Activation::qgelu,
                      Activation::qgeglu, Activation::relu, Activation::reglu,
                      Activation::srelu, Activation::sreglu, Activation::silu,
                      Activation::swiglu, Activation::clamped_swiglu),
    [](const ::testing::TestParamInfo<Activation> &info) {
      return mlir::te::stringifyActivation(info.param).str();
    });

//===----------------------------------------------------------------------===//
// Attention layers
//===----------------------------------------------------------------------===//

TEST_F(LayerTest, DotProductAttentionIsTheAttentionPrimitive) {
  // Layer ops 1 and 2 (after an RMSNorm): attention dropout streams 16, 32.
  // The first is bshd, GQA, bottom-right causal with s_q < s_kv and the
  // default scale 1/sqrt(4); the second sbhd with a padding mask.
  std::string source = R"mlir(
func.func @layer(%z: tensor<2x8xf32>, %zg: tensor<8xf32>,
                 %q: tensor<2x3x4x4xf32>, %k: tensor<2x5x2x4xf32>,
                 %v: tensor<2x5x2x4xf32>, %q2: tensor<3x2x2x4xf32>,
                 %kv2: tensor<4x2x2x4xf32>, %mask: tensor<2x1x1x4xi1>)
    -> (tensor<2x3x16xf32>, tensor<3x2x8xf32>) {
  %n = te.rmsnorm %z weight(%zg)
      : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %0 = te.dot_product_attention %q, %k, %v
      {attn_mask_type = #te.attn_mask_type<causal_bottom_right>,
       qkv_format = #te.qkv_format<bshd>, attention_dropout = 0.25 : f64}
      : (tensor<2x3x4x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>)
        -> tensor<2x3x16xf32>
  %1 = te.dot_product_attention %q2, %kv2, %kv2 mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>,
       attention_dropout = 0.5 : f64, softmax_scale = 0.3 : f64}
      : (tensor<3x2x2x4xf32>, tensor<4x2x2x4xf32>, tensor<4x2x2x4xf32>,
         tensor<2x1x1x4xi1>) -> tensor<3x2x8xf32>
  return %0, %1 : tensor<2x3x16xf32>, tensor<3x2x8xf32>
}
func.func @composed(%z: tensor<2x8xf32>, %zg: tensor<8xf32>,
                    %q: tensor<2x3x4x4xf32>, %k: tensor<2x5x2x4xf32>,
                    %v: tensor<2x5x2x4xf32>, %q2: tensor<3x2x2x4xf32>,
                    %kv2: tensor<4x2x2x4xf32>, %mask: tensor<2x1x1x4xi1>,
                    %rng: tensor<2xi64>)
    -> (tensor<2x3x16xf32>, tensor<3x2x8xf32>) {
  %o, %lse = te.attention %q, %k, %v rng(%rng)
      {attn_mask_type = #te.attn_mask_type<causal_bottom_right>,
       qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.5 : f64,
       dropout = 0.25 : f64, stream = 16 : i64}
      : (tensor<2x3x4x4xf32>, tensor<2x5x2x4xf32>, tensor<2x5x2x4xf32>,
         tensor<2xi64>) -> (tensor<2x3x4x4xf32>, tensor<2x4x3xf32>)
  %0 = te.reshape %o : tensor<2x3x4x4xf32> -> tensor<2x3x16xf32>
  %o2, %lse2 = te.attention %q2, %kv2, %kv2 mask(%mask) rng(%rng)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.3 : f64,
       dropout = 0.5 : f64, stream = 32 : i64}
      : (tensor<3x2x2x4xf32>, tensor<4x2x2x4xf32>, tensor<4x2x2x4xf32>,
         tensor<2x1x1x4xi1>, tensor<2xi64>)
        -> (tensor<3x2x2x4xf32>, tensor<2x2x3xf32>)
  %1 = te.reshape %o2 : tensor<3x2x2x4xf32> -> tensor<3x2x8xf32>
  return %0, %1 : tensor<2x3x16xf32>, tensor<3x2x8xf32>
}
)mlir";
  std::vector<Tensor> seeded =
      expectSameAsComposition(source, /*withRng=*/true);
  ASSERT_EQ(seeded.size(), 2u);
  // The dropouts use Options: another seed changes both outputs.
  mlir::func::FuncOp layer =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("layer");
  std::vector<Tensor> reseeded =
      run(layer, lastArgs, tejit::interp::Options{kSeed + 1, kOffset});
  ASSERT_EQ(reseeded.size(), 2u);
  EXPECT_FALSE(allClose(reseeded[0], seeded[0]));
  EXPECT_FALSE(allClose(reseeded[1], seeded[1]));
}

TEST_F(LayerTest, MultiheadAttentionIsItsComposition) {
  // Layer 0: bshd, RMSNorm with zero-centered gamma, GQA (2 heads, 1 group,
  // head_dim 4), biases, rotary, an arbitrary mask broadcast over the batch,
  // attention dropout (stream 0). Layer 1: sbhd, no norm, no biases,
  // kv_channels 4 with 3 heads over hidden 8, causal, dropout (stream 16).
  expectSameAsComposition(R"mlir(
func.func @layer(%x: tensor<2x3x8xf32>, %g: tensor<8xf32>,
                 %wqkv: tensor<16x8xf32>, %bqkv: tensor<16xf32>,
                 %wo: tensor<8x8xf32>, %bo: tensor<8xf32>,
                 %mask: tensor<1x2x3x3xi1>, %rope: tensor<3x1x1x4xf32>,
                 %x2: tensor<3x2x8xf32>, %wqkv2: tensor<36x8xf32>,
                 %wo2: tensor<8x12xf32>)
    -> (tensor<2x3x8xf32>, tensor<3x2x8xf32>) {
  %0 = te.multihead_attention %x ln_weight(%g) qkv_weight(%wqkv)
      qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo) mask(%mask)
      rotary_pos_emb(%rope)
      {num_attention_heads = 2 : i64, num_gqa_groups = 1 : i64,
       normalization = #te.normalization<RMSNorm>, zero_centered_gamma,
       layernorm_epsilon = 0.001 : f64,
       attn_mask_type = #te.attn_mask_type<arbitrary>,
       attention_dropout = 0.3 : f64, qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<16x8xf32>, tensor<16xf32>,
         tensor<8x8xf32>, tensor<8xf32>, tensor<1x2x3x3xi1>,
         tensor<3x1x1x4xf32>) -> tensor<2x3x8xf32>
  %1 = te.multihead_attention %x2 qkv_weight(%wqkv2) proj_weight(%wo2)
      {num_attention_heads = 3 : i64, kv_channels = 4 : i64,
       attention_dropout = 0.2 : f64}
      : (tensor<3x2x8xf32>, tensor<36x8xf32>, tensor<8x12xf32>)
        -> tensor<3x2x8xf32>
  return %0, %1 : tensor<2x3x8xf32>, tensor<3x2x8xf32>
}
func.func @composed(%x: tensor<2x3x8xf32>, %g: tensor<8xf32>,
                    %wqkv: tensor<16x8xf32>, %bqkv: tensor<16xf32>,
                    %wo: tensor<8x8xf32>, %bo: tensor<8xf32>,
                    %mask: tensor<1x2x3x3xi1>, %rope: tensor<3x1x1x4xf32>,
                    %x2: tensor<3x2x8xf32>, %wqkv2: tensor<36x8xf32>,
                    %wo2: tensor<8x12xf32>, %rng: tensor<2xi64>)
    -> (tensor<2x3x8xf32>, tensor<3x2x8xf32>) {
  %n, %rs = te.rmsnorm_fwd %x, %g {eps = 0.001 : f64, zero_centered_gamma}
      : (tensor<2x3x8xf32>, tensor<8xf32>)
        -> (tensor<2x3x8xf32>, tensor<2x3xf32>)
  %nf = te.reshape %n : tensor<2x3x8xf32> -> tensor<6x8xf32>
  %qkv0 = te.matmul %nf, %wqkv {transpose_b}
      : tensor<6x8xf32>, tensor<16x8xf32> -> tensor<6x16xf32>
  %qkv = te.bias_add %qkv0, %bqkv
      : tensor<6x16xf32>, tensor<16xf32> -> tensor<6x16xf32>
  %q2 = te.slice %qkv[0] : tensor<6x16xf32> -> tensor<6x8xf32>
  %k2 = te.slice %qkv[8] : tensor<6x16xf32> -> tensor<6x4xf32>
  %v2 = te.slice %qkv[12] : tensor<6x16xf32> -> tensor<6x4xf32>
  %q = te.reshape %q2 : tensor<6x8xf32> -> tensor<2x3x2x4xf32>
  %k = te.reshape %k2 : tensor<6x4xf32> -> tensor<2x3x1x4xf32>
  %v = te.reshape %v2 : tensor<6x4xf32> -> tensor<2x3x1x4xf32>
  %qr = te.rotary %q, %rope {qkv_format = #te.qkv_format<bshd>}
      : tensor<2x3x2x4xf32>, tensor<3x1x1x4xf32> -> tensor<2x3x2x4xf32>
  %kr = te.rotary %k, %rope {qkv_format = #te.qkv_format<bshd>}
      : tensor<2x3x1x4xf32>, tensor<3x1x1x4xf32> -> tensor<2x3x1x4xf32>
  %o, %lse = te.attention %qr, %kr, %v mask(%mask) rng(%rng)
      {attn_mask_type = #te.attn_mask_type<arbitrary>,
       qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.5 : f64,
       dropout = 0.3 : f64, stream = 0 : i64}
      : (tensor<2x3x2x4xf32>, tensor<2x3x1x4xf32>, tensor<2x3x1x4xf32>,
         tensor<1x2x3x3xi1>, tensor<2xi64>)
        -> (tensor<2x3x2x4xf32>, tensor<2x2x3xf32>)
  %ctx = te.reshape %o : tensor<2x3x2x4xf32> -> tensor<6x8xf32>
  %p0 = te.matmul %ctx, %wo {transpose_b}
      : tensor<6x8xf32>, tensor<8x8xf32> -> tensor<6x8xf32>
  %p = te.bias_add %p0, %bo : tensor<6x8xf32>, tensor<8xf32> -> tensor<6x8xf32>
  %y = te.reshape %p : tensor<6x8xf32> -> tensor<2x3x8xf32>

  %xf2 = te.reshape %x2 : tensor<3x2x8xf32> -> tensor<6x8xf32>
  %qkv2 = te.matmul %xf2, %wqkv2 {transpose_b}
      : tensor<6x8xf32>, tensor<36x8xf32> -> tensor<6x36xf32>
  %q3 = te.slice %qkv2[0] : tensor<6x36xf32> -> tensor<6x12xf32>
  %k3 = te.slice %qkv2[12] : tensor<6x36xf32> -> tensor<6x12xf32>
  %v3 = te.slice %qkv2[24] : tensor<6x36xf32> -> tensor<6x12xf32>
  %q4 = te.reshape %q3 : tensor<6x12xf32> -> tensor<3x2x3x4xf32>
  %k4 = te.reshape %k3 : tensor<6x12xf32> -> tensor<3x2x3x4xf32>
  %v4 = te.reshape %v3 : tensor<6x12xf32> -> tensor<3x2x3x4xf32>
  %o2, %lse2 = te.attention %q4, %k4, %v4 rng(%rng)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.5 : f64,
       dropout = 0.2 : f64, stream = 16 : i64}
      : (tensor<3x2x3x4xf32>, tensor<3x2x3x4xf32>, tensor<3x2x3x4xf32>,
         tensor<2xi64>) -> (tensor<3x2x3x4xf32>, tensor<2x3x3xf32>)
  %ctx2 = te.reshape %o2 : tensor<3x2x3x4xf32> -> tensor<6x12xf32>
  %p2 = te.matmul %ctx2, %wo2 {transpose_b}
      : tensor<6x12xf32>, tensor<8x12xf32> -> tensor<6x8xf32>
  %y2 = te.reshape %p2 : tensor<6x8xf32> -> tensor<3x2x8xf32>
  return %y, %y2 : tensor<2x3x8xf32>, tensor<3x2x8xf32>
}
)mlir",
                          /*withRng=*/true);
}

namespace {

/// A LayerNorm (layer op 0) feeding a TransformerLayer (layer op 1, so its
/// dropout streams are 16, 17 and 18): sbhd, s 4, b 2, hidden 8, 2 heads of 4
/// sharing 1 key/value head, swiglu MLP of width 6, padding_causal mask,
/// rotary, zero-centered gamma. $HD / $AD are the hidden / attention dropout
/// rates, $POSTLN the post-LN flag and $R1 / $R2 the composed residuals;
/// $ACT the gated activation, with $LAYERPARAMS / $PRIMPARAMS the layer's
/// and te.act's clamped_swiglu parameters.
const char *kTransformerLayer = R"mlir(
func.func @layer(%x: tensor<4x2x8xf32>, %g0: tensor<8xf32>, %b0: tensor<8xf32>,
                 %g1: tensor<8xf32>, %b1: tensor<8xf32>,
                 %wqkv: tensor<16x8xf32>, %bqkv: tensor<16xf32>,
                 %wo: tensor<8x8xf32>, %bo: tensor<8xf32>,
                 %g2: tensor<8xf32>, %b2: tensor<8xf32>,
                 %w1: tensor<12x8xf32>, %bf1: tensor<12xf32>,
                 %w2: tensor<8x6xf32>, %bf2: tensor<8xf32>,
                 %mask: tensor<2x1x1x4xi1>, %rope: tensor<4x1x1x4xf32>)
    -> tensor<4x2x8xf32> {
  %n0 = te.layernorm %x weight(%g0) bias(%b0)
      : (tensor<4x2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x2x8xf32>
  %y = te.transformer_layer %n0 attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo)
      mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1) fc1_bias(%bf1)
      fc2_weight(%w2) fc2_bias(%bf2) mask(%mask) rotary_pos_emb(%rope)
      {num_attention_heads = 2 : i64, num_gqa_groups = 1 : i64,
       activation = #te.activation<$ACT>$LAYERPARAMS,
       layernorm_epsilon = 0.001 : f64,
       zero_centered_gamma, hidden_dropout = $HD : f64,
       attention_dropout = $AD : f64,
       self_attn_mask_type = #te.attn_mask_type<padding_causal> $POSTLN}
      : (tensor<4x2x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<16x8xf32>,
         tensor<16xf32>, tensor<8x8xf32>, tensor<8xf32>, tensor<8xf32>,
         tensor<8xf32>, tensor<12x8xf32>, tensor<12xf32>, tensor<8x6xf32>,
         tensor<8xf32>, tensor<2x1x1x4xi1>, tensor<4x1x1x4xf32>)
        -> tensor<4x2x8xf32>
  return %y : tensor<4x2x8xf32>
}
func.func @composed(%x: tensor<4x2x8xf32>, %g0: tensor<8xf32>,
                    %b0: tensor<8xf32>, %g1: tensor<8xf32>, %b1: tensor<8xf32>,
                    %wqkv: tensor<16x8xf32>, %bqkv: tensor<16xf32>,
                    %wo: tensor<8x8xf32>, %bo: tensor<8xf32>,
                    %g2: tensor<8xf32>, %b2: tensor<8xf32>,
                    %w1: tensor<12x8xf32>, %bf1: tensor<12xf32>,
                    %w2: tensor<8x6xf32>, %bf2: tensor<8xf32>,
                    %mask: tensor<2x1x1x4xi1>, %rope: tensor<4x1x1x4xf32>,
                    %rng: tensor<2xi64>) -> tensor<4x2x8xf32> {
  %n0, %m0, %r0 = te.layernorm_fwd %x, %g0, %b0 {eps = 1.0e-5 : f64}
      : (tensor<4x2x8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<4x2x8xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
  %ln1, %m1, %r1 = te.layernorm_fwd %n0, %g1, %b1
      {eps = 0.001 : f64, zero_centered_gamma}
      : (tensor<4x2x8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<4x2x8xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
  %ln1f = te.reshape %ln1 : tensor<4x2x8xf32> -> tensor<8x8xf32>
  %qkv0 = te.matmul %ln1f, %wqkv {transpose_b}
      : tensor<8x8xf32>, tensor<16x8xf32> -> tensor<8x16xf32>
  %qkv = te.bias_add %qkv0, %bqkv
      : tensor<8x16xf32>, tensor<16xf32> -> tensor<8x16xf32>
  %q2 = te.slice %qkv[0] : tensor<8x16xf32> -> tensor<8x8xf32>
  %k2 = te.slice %qkv[8] : tensor<8x16xf32> -> tensor<8x4xf32>
  %v2 = te.slice %qkv[12] : tensor<8x16xf32> -> tensor<8x4xf32>
  %q = te.reshape %q2 : tensor<8x8xf32> -> tensor<4x2x2x4xf32>
  %k = te.reshape %k2 : tensor<8x4xf32> -> tensor<4x2x1x4xf32>
  %v = te.reshape %v2 : tensor<8x4xf32> -> tensor<4x2x1x4xf32>
  %qr = te.rotary %q, %rope {qkv_format = #te.qkv_format<sbhd>}
      : tensor<4x2x2x4xf32>, tensor<4x1x1x4xf32> -> tensor<4x2x2x4xf32>
  %kr = te.rotary %k, %rope {qkv_format = #te.qkv_format<sbhd>}
      : tensor<4x2x1x4xf32>, tensor<4x1x1x4xf32> -> tensor<4x2x1x4xf32>
  %o, %lse = te.attention %qr, %kr, %v mask(%mask) rng(%rng)
      {attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.5 : f64,
       dropout = $AD : f64, stream = 16 : i64}
      : (tensor<4x2x2x4xf32>, tensor<4x2x1x4xf32>, tensor<4x2x1x4xf32>,
         tensor<2x1x1x4xi1>, tensor<2xi64>)
        -> (tensor<4x2x2x4xf32>, tensor<2x2x4xf32>)
  %ctx = te.reshape %o : tensor<4x2x2x4xf32> -> tensor<8x8xf32>
  %p0 = te.matmul %ctx, %wo {transpose_b}
      : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %p = te.bias_add %p0, %bo : tensor<8x8xf32>, tensor<8xf32> -> tensor<8x8xf32>
  %p3 = te.reshape %p : tensor<8x8xf32> -> tensor<4x2x8xf32>
  %pd = te.dropout %p3, %rng {rate = $HD : f64, stream = 17 : i64}
      : tensor<4x2x8xf32>, tensor<2xi64> -> tensor<4x2x8xf32>
  %h = te.add $R1, %pd : tensor<4x2x8xf32>
  %ln2, %m2, %r2 = te.layernorm_fwd %h, %g2, %b2
      {eps = 0.001 : f64, zero_centered_gamma}
      : (tensor<4x2x8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<4x2x8xf32>, tensor<4x2xf32>, tensor<4x2xf32>)
  %ln2f = te.reshape %ln2 : tensor<4x2x8xf32> -> tensor<8x8xf32>
  %f1 = te.matmul %ln2f, %w1 {transpose_b}
      : tensor<8x8xf32>, tensor<12x8xf32> -> tensor<8x12xf32>
  %f1b = te.bias_add %f1, %bf1
      : tensor<8x12xf32>, tensor<12xf32> -> tensor<8x12xf32>
  %a = te.act <$ACT> %f1b $PRIMPARAMS : tensor<8x12xf32> -> tensor<8x6xf32>
  %f2 = te.matmul %a, %w2 {transpose_b}
      : tensor<8x6xf32>, tensor<8x6xf32> -> tensor<8x8xf32>
  %f2b = te.bias_add %f2, %bf2
      : tensor<8x8xf32>, tensor<8xf32> -> tensor<8x8xf32>
  %m3 = te.reshape %f2b : tensor<8x8xf32> -> tensor<4x2x8xf32>
  %md = te.dropout %m3, %rng {rate = $HD : f64, stream = 18 : i64}
      : tensor<4x2x8xf32>, tensor<2xi64> -> tensor<4x2x8xf32>
  %y = te.add $R2, %md : tensor<4x2x8xf32>
  return %y : tensor<4x2x8xf32>
}
)mlir";

/// A TransformerLayer variant: dropout rates, the post-LN flag, and the
/// attributes of clamped_swiglu's parameters (empty: swiglu).
struct TransformerCase {
  std::string name;
  std::string hiddenDropout, attentionDropout;
  bool postLn;
  std::string activationParams = "";
};

class TransformerLayerTest
    : public LayerTest,
      public ::testing::WithParamInterface<TransformerCase> {};

} // namespace

TEST_P(TransformerLayerTest, IsItsPrimitiveComposition) {
  const TransformerCase &c = GetParam();
  expectSameAsComposition(
      substitute(
          kTransformerLayer,
          {{"HD", c.hiddenDropout},
           {"AD", c.attentionDropout},
           {"POSTLN",
            c.postLn ? ", apply_residual_connection_post_layernorm" : ""},
           {"R1", c.postLn ? "%ln1" : "%n0"},
           {"R2", c.postLn ? "%ln2" : "%h"},
           {"ACT", c.activationParams.empty() ? "swiglu" : "clamped_swiglu"},
           {"LAYERPARAMS",
            c.activationParams.empty() ? "" : ", " + c.activationParams},
           {"PRIMPARAMS",
            c.activationParams.empty() ? "" : "{" + c.activationParams + "}"}}),
      /*withRng=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, TransformerLayerTest,
    ::testing::Values(TransformerCase{"NoDropout", "0.0", "0.0", false},
                      TransformerCase{"Dropout", "0.3", "0.2", false},
                      TransformerCase{"PostLnNoDropout", "0.0", "0.0", true},
                      TransformerCase{"PostLnDropout", "0.25", "0.5", true},
                      TransformerCase{"ClampedSwiglu", "0.3", "0.2", false,
                                      "activation_limit = 0.5 : f64, "
                                      "glu_linear_offset = 0.0 : f64"},
                      TransformerCase{"ClampedSwigluDefaults", "0.0", "0.0",
                                      true, "activation_alpha = 1.702 : f64"}),
    [](const ::testing::TestParamInfo<TransformerCase> &info) {
      return info.param.name;
    });

TEST_F(LayerTest, TransformerLayerBshdRMSNormWithoutBiases) {
  // bshd, RMSNorm, gelu, no biases, the default causal mask and dropouts
  // (0.1), no rotary; the only layer op, so streams 0, 1 and 2.
  expectSameAsComposition(R"mlir(
func.func @layer(%x: tensor<2x3x4xf32>, %g1: tensor<4xf32>,
                 %wqkv: tensor<12x4xf32>, %wo: tensor<4x4xf32>,
                 %g2: tensor<4xf32>, %w1: tensor<5x4xf32>,
                 %w2: tensor<4x5xf32>) -> tensor<2x3x4xf32> {
  %y = te.transformer_layer %x attn_ln_weight(%g1) qkv_weight(%wqkv)
      proj_weight(%wo) mlp_ln_weight(%g2) fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 2 : i64,
       normalization = #te.normalization<RMSNorm>,
       attn_input_format = #te.qkv_format<bshd>}
      : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<12x4xf32>, tensor<4x4xf32>,
         tensor<4xf32>, tensor<5x4xf32>, tensor<4x5xf32>) -> tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}
func.func @composed(%x: tensor<2x3x4xf32>, %g1: tensor<4xf32>,
                    %wqkv: tensor<12x4xf32>, %wo: tensor<4x4xf32>,
                    %g2: tensor<4xf32>, %w1: tensor<5x4xf32>,
                    %w2: tensor<4x5xf32>, %rng: tensor<2xi64>)
    -> tensor<2x3x4xf32> {
  %ln1, %r1 = te.rmsnorm_fwd %x, %g1 {eps = 1.0e-5 : f64}
      : (tensor<2x3x4xf32>, tensor<4xf32>)
        -> (tensor<2x3x4xf32>, tensor<2x3xf32>)
  %ln1f = te.reshape %ln1 : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %qkv = te.matmul %ln1f, %wqkv {transpose_b}
      : tensor<6x4xf32>, tensor<12x4xf32> -> tensor<6x12xf32>
  %q2 = te.slice %qkv[0] : tensor<6x12xf32> -> tensor<6x4xf32>
  %k2 = te.slice %qkv[4] : tensor<6x12xf32> -> tensor<6x4xf32>
  %v2 = te.slice %qkv[8] : tensor<6x12xf32> -> tensor<6x4xf32>
  %q = te.reshape %q2 : tensor<6x4xf32> -> tensor<2x3x2x2xf32>
  %k = te.reshape %k2 : tensor<6x4xf32> -> tensor<2x3x2x2xf32>
  %v = te.reshape %v2 : tensor<6x4xf32> -> tensor<2x3x2x2xf32>
  %o, %lse = te.attention %q, %k, %v rng(%rng)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<bshd>,
       softmax_scale = 0.70710678118654757 : f64,
       dropout = 0.1 : f64, stream = 0 : i64}
      : (tensor<2x3x2x2xf32>, tensor<2x3x2x2xf32>, tensor<2x3x2x2xf32>,
         tensor<2xi64>) -> (tensor<2x3x2x2xf32>, tensor<2x2x3xf32>)
  %ctx = te.reshape %o : tensor<2x3x2x2xf32> -> tensor<6x4xf32>
  %p = te.matmul %ctx, %wo {transpose_b}
      : tensor<6x4xf32>, tensor<4x4xf32> -> tensor<6x4xf32>
  %p3 = te.reshape %p : tensor<6x4xf32> -> tensor<2x3x4xf32>
  %pd = te.dropout %p3, %rng {rate = 0.1 : f64, stream = 1 : i64}
      : tensor<2x3x4xf32>, tensor<2xi64> -> tensor<2x3x4xf32>
  %h = te.add %x, %pd : tensor<2x3x4xf32>
  %ln2, %r2 = te.rmsnorm_fwd %h, %g2 {eps = 1.0e-5 : f64}
      : (tensor<2x3x4xf32>, tensor<4xf32>)
        -> (tensor<2x3x4xf32>, tensor<2x3xf32>)
  %ln2f = te.reshape %ln2 : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %f1 = te.matmul %ln2f, %w1 {transpose_b}
      : tensor<6x4xf32>, tensor<5x4xf32> -> tensor<6x5xf32>
  %a = te.act <gelu> %f1 : tensor<6x5xf32> -> tensor<6x5xf32>
  %f2 = te.matmul %a, %w2 {transpose_b}
      : tensor<6x5xf32>, tensor<4x5xf32> -> tensor<6x4xf32>
  %m3 = te.reshape %f2 : tensor<6x4xf32> -> tensor<2x3x4xf32>
  %md = te.dropout %m3, %rng {rate = 0.1 : f64, stream = 2 : i64}
      : tensor<2x3x4xf32>, tensor<2xi64> -> tensor<2x3x4xf32>
  %y = te.add %h, %md : tensor<2x3x4xf32>
  return %y : tensor<2x3x4xf32>
}
)mlir",
                          /*withRng=*/true);
}
