//===- InterpreterGradTest.cpp - backward ops against finite differences --===//
//
// Every backward op (norm *_bwd, dact, attention_bwd, rotary inverse,
// dropout, bias_grad, the matmul dgrad/wgrad forms) must equal the float64
// central finite difference of its forward op for L = sum(dy * y), with dy
// random: relative error below 1e-6.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"

using namespace tejit::testing;
using mlir::te::Activation;

namespace {

/// A normalization configuration.
struct NormCase {
  bool rms, zeroCenteredGamma;
};

class NormGradTest : public InterpreterTest,
                     public ::testing::WithParamInterface<NormCase> {};

/// LayerNorm's forward and backward on x [3, 2, 6].
const char *kLayerNormGrad = R"mlir(
func.func @fwd(%x: tensor<3x2x6xf32>, %g: tensor<6xf32>, %b: tensor<6xf32>)
    -> (tensor<3x2x6xf32>, tensor<3x2xf32>, tensor<3x2xf32>) {
  %y, %mean, %rsigma = te.layernorm_fwd %x, %g, %b {eps = 0.01 : f64 $FWDATTR}
      : (tensor<3x2x6xf32>, tensor<6xf32>, tensor<6xf32>)
        -> (tensor<3x2x6xf32>, tensor<3x2xf32>, tensor<3x2xf32>)
  return %y, %mean, %rsigma
      : tensor<3x2x6xf32>, tensor<3x2xf32>, tensor<3x2xf32>
}
func.func @bwd(%dy: tensor<3x2x6xf32>, %x: tensor<3x2x6xf32>,
               %mean: tensor<3x2xf32>, %rsigma: tensor<3x2xf32>,
               %g: tensor<6xf32>)
    -> (tensor<3x2x6xf32>, tensor<6xf32>, tensor<6xf32>) {
  %dx, %dg, %db = te.layernorm_bwd %dy, %x, %mean, %rsigma, %g $BWDATTR
      : (tensor<3x2x6xf32>, tensor<3x2x6xf32>, tensor<3x2xf32>,
         tensor<3x2xf32>, tensor<6xf32>)
        -> (tensor<3x2x6xf32>, tensor<6xf32>, tensor<6xf32>)
  return %dx, %dg, %db : tensor<3x2x6xf32>, tensor<6xf32>, tensor<6xf32>
}
)mlir";

/// RMSNorm's forward and backward on x [3, 2, 6].
const char *kRMSNormGrad = R"mlir(
func.func @fwd(%x: tensor<3x2x6xf32>, %g: tensor<6xf32>)
    -> (tensor<3x2x6xf32>, tensor<3x2xf32>) {
  %y, %rsigma = te.rmsnorm_fwd %x, %g {eps = 0.01 : f64 $FWDATTR}
      : (tensor<3x2x6xf32>, tensor<6xf32>)
        -> (tensor<3x2x6xf32>, tensor<3x2xf32>)
  return %y, %rsigma : tensor<3x2x6xf32>, tensor<3x2xf32>
}
func.func @bwd(%dy: tensor<3x2x6xf32>, %x: tensor<3x2x6xf32>,
               %rsigma: tensor<3x2xf32>, %g: tensor<6xf32>)
    -> (tensor<3x2x6xf32>, tensor<6xf32>) {
  %dx, %dg = te.rmsnorm_bwd %dy, %x, %rsigma, %g $BWDATTR
      : (tensor<3x2x6xf32>, tensor<3x2x6xf32>, tensor<3x2xf32>, tensor<6xf32>)
        -> (tensor<3x2x6xf32>, tensor<6xf32>)
  return %dx, %dg : tensor<3x2x6xf32>, tensor<6xf32>
}
)mlir";

} // namespace

TEST_P(NormGradTest, BackwardMatchesFiniteDifferences) {
  NormCase c = GetParam();
  bool zc = c.zeroCenteredGamma;
  std::string source =
      substitute(c.rms ? kRMSNormGrad : kLayerNormGrad,
                 {{"FWDATTR", zc ? ", zero_centered_gamma" : ""},
                  {"BWDATTR", zc ? "{zero_centered_gamma}" : ""}});
  mlir::func::FuncOp fwd = parse(source, "fwd");
  mlir::func::FuncOp bwd =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
  std::vector<Tensor> args = randomArgs(fwd);
  std::vector<Tensor> outs = run(fwd, args);
  ASSERT_EQ(outs.size(), c.rms ? 2u : 3u);
  Tensor dy = randomLike(outs[0].shape);
  // bwd takes (dy, x, [mean,] rsigma, gamma).
  std::vector<Tensor> bwdArgs = {dy, args[0]};
  bwdArgs.insert(bwdArgs.end(), outs.begin() + 1, outs.end());
  bwdArgs.push_back(args[1]);
  std::vector<Tensor> grads = run(bwd, bwdArgs);
  ASSERT_EQ(grads.size(), args.size());
  std::vector<Tensor> weights = {dy, Tensor(), Tensor()};
  for (unsigned i = 0; i < args.size(); ++i)
    EXPECT_TRUE(gradientClose(grads[i], numericGradient(fwd, args, i, weights)))
        << "gradient of operand " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Norms, NormGradTest,
    ::testing::Values(NormCase{false, false}, NormCase{false, true},
                      NormCase{true, false}, NormCase{true, true}),
    [](const ::testing::TestParamInfo<NormCase> &info) {
      return std::string(info.param.rms ? "RMSNorm" : "LayerNorm") +
             (info.param.zeroCenteredGamma ? "ZeroCenteredGamma" : "");
    });

namespace {
class ActivationGradTest : public InterpreterTest,
                           public ::testing::WithParamInterface<Activation> {};
} // namespace

TEST_P(ActivationGradTest, DactMatchesFiniteDifferences) {
  Activation kind = GetParam();
  int64_t out = mlir::te::isGatedActivation(kind) ? 5 : 10;
  mlir::func::FuncOp fwd =
      parse(substitute(R"mlir(
func.func @fwd(%x: tensor<4x10xf32>) -> $OUT {
  %0 = te.act <$ACT> %x : tensor<4x10xf32> -> $OUT
  return %0 : $OUT
}
func.func @bwd(%dy: $OUT, %x: tensor<4x10xf32>) -> tensor<4x10xf32> {
  %0 = te.dact <$ACT> %dy, %x : $OUT, tensor<4x10xf32> -> tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}
)mlir",
                       {{"OUT", tensorType({4, out})},
                        {"ACT", mlir::te::stringifyActivation(kind).str()}}),
            "fwd");
  mlir::func::FuncOp bwd =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
  std::vector<Tensor> args = randomArgs(fwd, 1.5);
  Tensor dy = randomLike({4, out});
  std::vector<Tensor> grads = run(bwd, {dy, args[0]});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(gradientClose(grads[0], numericGradient(fwd, args, 0, {dy})));
}

INSTANTIATE_TEST_SUITE_P(
    All, ActivationGradTest,
    ::testing::Values(Activation::gelu, Activation::geglu, Activation::qgelu,
                      Activation::qgeglu, Activation::relu, Activation::reglu,
                      Activation::srelu, Activation::sreglu, Activation::silu,
                      Activation::swiglu),
    [](const ::testing::TestParamInfo<Activation> &info) {
      return mlir::te::stringifyActivation(info.param).str();
    });

namespace {

/// clamped_swiglu with its parameters, as in InterpreterTest.
struct ClampedSwigluGradCase {
  const char *name;
  double limit, alpha, offset;
  const char *attributes;
};

/// Names the case in gtest's messages.
void PrintTo(const ClampedSwigluGradCase &c, std::ostream *os) {
  *os << c.name;
}

class ClampedSwigluGradTest
    : public InterpreterTest,
      public ::testing::WithParamInterface<ClampedSwigluGradCase> {
protected:
  /// @fwd (te.act) and @bwd (te.dact) on [4, 16] (halves of 8).
  mlir::func::FuncOp parseFwdBwd() {
    return parse(substitute(R"mlir(
func.func @fwd(%x: tensor<4x16xf32>) -> tensor<4x8xf32> {
  %0 = te.act <clamped_swiglu> %x $ATTRS : tensor<4x16xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
func.func @bwd(%dy: tensor<4x8xf32>, %x: tensor<4x16xf32>)
    -> tensor<4x16xf32> {
  %0 = te.dact <clamped_swiglu> %dy, %x $ATTRS
      : tensor<4x8xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}
)mlir",
                            {{"ATTRS", GetParam().attributes}}),
                 "fwd");
  }

  mlir::func::FuncOp bwd() {
    return modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
  }
};

/// Halves in units of the limit: every side of each clamp, each value at
/// least 0.05 limit from a kink (finite differences step 1e-5).
const double kGradA[] = {-3.0, -1.2, -0.4, 0.1, 0.6, 0.95, 1.3, 4.0};
const double kGradB[] = {-4.0, -1.1, -0.7, 0.2, 0.9, 0.95, 1.5, 3.0};

} // namespace

TEST_P(ClampedSwigluGradTest, DactMatchesFiniteDifferences) {
  double limit = GetParam().limit;
  mlir::func::FuncOp fwd = parseFwdBwd();
  // Rows pair the a and b in four orders, so that each a meets b on both
  // sides of the clamps.
  Tensor x = Tensor::zeros({4, 16});
  for (int row = 0; row < 4; ++row)
    for (int i = 0; i < 8; ++i) {
      x.data[row * 16 + i] = kGradA[(i + row) % 8] * limit;
      x.data[row * 16 + 8 + i] = kGradB[(8 + row * 3 - i) % 8] * limit;
    }
  Tensor dy = randomLike({4, 8});
  std::vector<Tensor> grads = run(bwd(), {dy, x});
  ASSERT_EQ(grads.size(), 1u);
  Tensor numeric = numericGradient(fwd, {x}, 0, {dy});
  EXPECT_TRUE(gradientClose(grads[0], numeric));
  // The clamps pass nothing where they clamp.
  for (int row = 0; row < 4; ++row)
    for (int i = 0; i < 8; ++i) {
      double a = x.data[row * 16 + i], b = x.data[row * 16 + 8 + i];
      if (a > limit)
        EXPECT_EQ(grads[0].data[row * 16 + i], 0.0);
      if (std::fabs(b) > limit)
        EXPECT_EQ(grads[0].data[row * 16 + 8 + i], 0.0);
    }
}

TEST_P(ClampedSwigluGradTest, DactMatchesItsFormulaAtTheLimits) {
  // At a = limit and |b| = limit, where finite differences straddle the
  // kink, the gradient passes (Transformer Engine's kernels take the
  // derivative for a <= limit and -limit <= b <= limit).
  const ClampedSwigluGradCase &c = GetParam();
  parseFwdBwd();
  const double as[] = {-1.0, 0.5, 1.0, 1.0, 1.0, 1.0 + 1e-9, 2.0, 0.25};
  const double bs[] = {1.0, -1.0, 0.3, -1.0, 1.0, 0.3, -2.0, 1.0 + 1e-9};
  Tensor x = Tensor::zeros({4, 16});
  for (int row = 0; row < 4; ++row)
    for (int i = 0; i < 8; ++i) {
      x.data[row * 16 + i] = as[(i + row) % 8] * c.limit;
      x.data[row * 16 + 8 + i] = bs[(i + 2 * row) % 8] * c.limit;
    }
  Tensor dy = randomLike({4, 8});
  std::vector<Tensor> grads = run(bwd(), {dy, x});
  ASSERT_EQ(grads.size(), 1u);
  Tensor expected = Tensor::zeros({4, 16});
  for (int row = 0; row < 4; ++row)
    for (int i = 0; i < 8; ++i) {
      double a = x.data[row * 16 + i], b = x.data[row * 16 + 8 + i];
      double g = dy.data[row * 8 + i];
      double ac = std::min(a, c.limit);
      double bc = std::max(-c.limit, std::min(b, c.limit));
      double s = 1 / (1 + std::exp(-c.alpha * ac));
      double f = ac * s, df = s + c.alpha * ac * s * (1 - s);
      expected.data[row * 16 + i] =
          a <= c.limit ? g * df * (bc + c.offset) : 0.0;
      expected.data[row * 16 + 8 + i] =
          b >= -c.limit && b <= c.limit ? g * f : 0.0;
    }
  EXPECT_TRUE(allClose(grads[0], expected, 1e-13, 1e-15));
}

INSTANTIATE_TEST_SUITE_P(
    Params, ClampedSwigluGradTest,
    ::testing::Values(ClampedSwigluGradCase{"Defaults", 7.0, 1.702, 1.0, ""},
                      ClampedSwigluGradCase{"Limit075", 0.75, 1.702, 1.0,
                                            "{activation_limit = 0.75 : f64, "
                                            "activation_alpha = 1.702 : f64, "
                                            "glu_linear_offset = 1.0 : f64}"},
                      ClampedSwigluGradCase{"Limit075NoOffset", 0.75, 1.702,
                                            0.0,
                                            "{activation_limit = 0.75 : f64, "
                                            "glu_linear_offset = 0.0 : f64}"},
                      ClampedSwigluGradCase{"Limit2Alpha1Offset05", 2.0, 1.0,
                                            0.5,
                                            "{activation_limit = 2.0 : f64, "
                                            "activation_alpha = 1.0 : f64, "
                                            "glu_linear_offset = 0.5 : f64}"}),
    [](const ::testing::TestParamInfo<ClampedSwigluGradCase> &info) {
      return std::string(info.param.name);
    });

namespace {
class AttentionGradTest : public InterpreterTest,
                          public ::testing::WithParamInterface<AttentionCase> {
};
} // namespace

TEST_P(AttentionGradTest, BackwardMatchesFiniteDifferences) {
  const AttentionCase &c = GetParam();
  mlir::func::FuncOp fwd = parse(c.module(), "fwd");
  mlir::func::FuncOp bwd =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
  std::vector<Tensor> args = randomArgs(fwd);
  std::vector<Tensor> outs = run(fwd, args);
  ASSERT_EQ(outs.size(), 2u);
  Tensor dout = randomLike(outs[0].shape);
  // bwd takes (grad, q, k, v, o, lse, [mask,] rng).
  std::vector<Tensor> bwdArgs = {dout,    args[0], args[1],
                                 args[2], outs[0], outs[1]};
  bwdArgs.insert(bwdArgs.end(), args.begin() + 3, args.end());
  std::vector<Tensor> grads = run(bwd, bwdArgs);
  ASSERT_EQ(grads.size(), 3u);
  for (unsigned i = 0; i < 3; ++i)
    EXPECT_TRUE(gradientClose(grads[i],
                              numericGradient(fwd, args, i, {dout, Tensor()})))
        << "gradient of "
        << "qkv"[i];
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionGradTest, ::testing::ValuesIn(attentionCases()),
    [](const ::testing::TestParamInfo<AttentionCase> &info) {
      return info.param.name;
    });

TEST_F(InterpreterTest, RotaryInverseIsTheGradient) {
  ASSERT_TRUE(parse(R"mlir(
func.func @sbhd(%x: tensor<3x2x2x6xf32>, %f: tensor<3x1x1x6xf32>)
    -> tensor<3x2x2x6xf32> {
  %0 = te.rotary %x, %f {qkv_format = #te.qkv_format<sbhd>}
      : tensor<3x2x2x6xf32>, tensor<3x1x1x6xf32> -> tensor<3x2x2x6xf32>
  return %0 : tensor<3x2x2x6xf32>
}
func.func @sbhd_inverse(%x: tensor<3x2x2x6xf32>, %f: tensor<3x1x1x6xf32>)
    -> tensor<3x2x2x6xf32> {
  %0 = te.rotary %x, %f {qkv_format = #te.qkv_format<sbhd>, inverse}
      : tensor<3x2x2x6xf32>, tensor<3x1x1x6xf32> -> tensor<3x2x2x6xf32>
  return %0 : tensor<3x2x2x6xf32>
}
func.func @bshd(%x: tensor<2x3x1x6xf32>, %f: tensor<3x1x1x6xf32>)
    -> tensor<2x3x1x6xf32> {
  %0 = te.rotary %x, %f {qkv_format = #te.qkv_format<bshd>}
      : tensor<2x3x1x6xf32>, tensor<3x1x1x6xf32> -> tensor<2x3x1x6xf32>
  return %0 : tensor<2x3x1x6xf32>
}
func.func @bshd_inverse(%x: tensor<2x3x1x6xf32>, %f: tensor<3x1x1x6xf32>)
    -> tensor<2x3x1x6xf32> {
  %0 = te.rotary %x, %f {qkv_format = #te.qkv_format<bshd>, inverse}
      : tensor<2x3x1x6xf32>, tensor<3x1x1x6xf32> -> tensor<2x3x1x6xf32>
  return %0 : tensor<2x3x1x6xf32>
}
)mlir",
                    "sbhd"));
  // Angles laid out as Transformer Engine does: the first half repeated.
  Tensor freqs = randomLike({3, 1, 1, 6}, 2.0);
  for (int s = 0; s < 3; ++s)
    for (int d = 0; d < 3; ++d)
      freqs.data[s * 6 + 3 + d] = freqs.data[s * 6 + d];
  for (const char *layout : {"sbhd", "bshd"}) {
    mlir::func::FuncOp forward =
        modules.back()->lookupSymbol<mlir::func::FuncOp>(layout);
    mlir::func::FuncOp inverse =
        modules.back()->lookupSymbol<mlir::func::FuncOp>(std::string(layout) +
                                                         "_inverse");
    std::vector<Tensor> args = {randomArgs(forward)[0], freqs};
    Tensor dy = randomLike(args[0].shape);
    std::vector<Tensor> grads = run(inverse, {dy, freqs});
    ASSERT_EQ(grads.size(), 1u);
    EXPECT_TRUE(
        gradientClose(grads[0], numericGradient(forward, args, 0, {dy})))
        << layout;
  }
}

TEST_F(InterpreterTest, RotaryPartialAndInterleaved) {
  // One head of 8 channels at 2 positions; the tables rotate the first 4
  // (GPT-NeoX's partial rotary, GPT-J's interleaved pairs).
  ASSERT_TRUE(parse(R"mlir(
func.func @halves(%x: tensor<2x1x1x8xf32>, %f: tensor<2x1x1x4xf32>)
    -> tensor<2x1x1x8xf32> {
  %0 = te.rotary %x, %f {qkv_format = #te.qkv_format<sbhd>}
      : tensor<2x1x1x8xf32>, tensor<2x1x1x4xf32> -> tensor<2x1x1x8xf32>
  return %0 : tensor<2x1x1x8xf32>
}
func.func @pairs(%x: tensor<2x1x1x8xf32>, %f: tensor<2x1x1x4xf32>)
    -> tensor<2x1x1x8xf32> {
  %0 = te.rotary %x, %f {qkv_format = #te.qkv_format<sbhd>, interleaved}
      : tensor<2x1x1x8xf32>, tensor<2x1x1x4xf32> -> tensor<2x1x1x8xf32>
  return %0 : tensor<2x1x1x8xf32>
}
func.func @pairs_inverse(%x: tensor<2x1x1x8xf32>, %f: tensor<2x1x1x4xf32>)
    -> tensor<2x1x1x8xf32> {
  %0 = te.rotary %x, %f {qkv_format = #te.qkv_format<sbhd>, interleaved,
                         inverse}
      : tensor<2x1x1x8xf32>, tensor<2x1x1x4xf32> -> tensor<2x1x1x8xf32>
  return %0 : tensor<2x1x1x8xf32>
}
)mlir",
                    "halves"));
  Tensor x = randomLike({2, 1, 1, 8});
  double angle[2][2] = {{0.3, -1.1}, {2.0, 0.7}}; // [position][frequency]
  Tensor halves = Tensor::zeros({2, 1, 1, 4}),
         pairs = Tensor::zeros({2, 1, 1, 4});
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 2; ++i) {
      halves.data[s * 4 + i] = halves.data[s * 4 + 2 + i] = angle[s][i];
      pairs.data[s * 4 + 2 * i] = pairs.data[s * 4 + 2 * i + 1] = angle[s][i];
    }
  auto lookup = [&](const char *name) {
    return modules.back()->lookupSymbol<mlir::func::FuncOp>(name);
  };
  std::vector<Tensor> byHalves = run(lookup("halves"), {x, halves});
  std::vector<Tensor> byPairs = run(lookup("pairs"), {x, pairs});
  ASSERT_EQ(byHalves.size(), 1u);
  ASSERT_EQ(byPairs.size(), 1u);
  for (int s = 0; s < 2; ++s) {
    const double *in = x.data.data() + s * 8;
    for (int i = 0; i < 2; ++i) {
      double c = std::cos(angle[s][i]), n = std::sin(angle[s][i]);
      // Halves pair channels (i, i + 2); interleaved, (2i, 2i + 1).
      EXPECT_NEAR(byHalves[0].data[s * 8 + i], in[i] * c - in[i + 2] * n,
                  1e-12);
      EXPECT_NEAR(byHalves[0].data[s * 8 + i + 2], in[i + 2] * c + in[i] * n,
                  1e-12);
      EXPECT_NEAR(byPairs[0].data[s * 8 + 2 * i],
                  in[2 * i] * c - in[2 * i + 1] * n, 1e-12);
      EXPECT_NEAR(byPairs[0].data[s * 8 + 2 * i + 1],
                  in[2 * i + 1] * c + in[2 * i] * n, 1e-12);
    }
    for (int d = 4; d < 8; ++d) { // past the table: unchanged
      EXPECT_EQ(byHalves[0].data[s * 8 + d], in[d]);
      EXPECT_EQ(byPairs[0].data[s * 8 + d], in[d]);
    }
  }
  Tensor dy = randomLike(x.shape);
  std::vector<Tensor> grads = run(lookup("pairs_inverse"), {dy, pairs});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(gradientClose(
      grads[0], numericGradient(lookup("pairs"), {x, pairs}, 0, {dy})));
}

TEST_F(InterpreterTest, DropoutIsItsOwnGradient) {
  // The same state and stream draw the same mask, so the backward is the
  // forward's dropout applied to the output gradient.
  mlir::func::FuncOp fwd = parse(R"mlir(
func.func @fwd(%x: tensor<6x5xf32>, %rng: tensor<2xi64>) -> tensor<6x5xf32> {
  %0 = te.dropout %x, %rng {rate = 0.4 : f64, stream = 2 : i64}
      : tensor<6x5xf32>, tensor<2xi64> -> tensor<6x5xf32>
  return %0 : tensor<6x5xf32>
}
)mlir",
                                 "fwd");
  std::vector<Tensor> args = randomArgs(fwd);
  Tensor dy = randomLike({6, 5});
  std::vector<Tensor> grads = run(fwd, {dy, args[1]});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(gradientClose(grads[0], numericGradient(fwd, args, 0, {dy})));
}

TEST_F(InterpreterTest, BiasGradAndMatmulFormsAreTheLinearGradients) {
  mlir::func::FuncOp fwd = parse(R"mlir(
func.func @fwd(%x: tensor<4x3xf32>, %w: tensor<5x3xf32>, %b: tensor<5xf32>)
    -> tensor<4x5xf32> {
  %0 = te.matmul %x, %w {transpose_b}
      : tensor<4x3xf32>, tensor<5x3xf32> -> tensor<4x5xf32>
  %1 = te.bias_add %0, %b : tensor<4x5xf32>, tensor<5xf32> -> tensor<4x5xf32>
  return %1 : tensor<4x5xf32>
}
func.func @bwd(%dy: tensor<4x5xf32>, %x: tensor<4x3xf32>, %w: tensor<5x3xf32>)
    -> (tensor<4x3xf32>, tensor<5x3xf32>, tensor<5xf32>) {
  %dx = te.matmul %dy, %w : tensor<4x5xf32>, tensor<5x3xf32> -> tensor<4x3xf32>
  %dw = te.matmul %dy, %x {transpose_a}
      : tensor<4x5xf32>, tensor<4x3xf32> -> tensor<5x3xf32>
  %db = te.bias_grad %dy : tensor<4x5xf32> -> tensor<5xf32>
  return %dx, %dw, %db : tensor<4x3xf32>, tensor<5x3xf32>, tensor<5xf32>
}
)mlir",
                                 "fwd");
  mlir::func::FuncOp bwd =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
  std::vector<Tensor> args = randomArgs(fwd);
  Tensor dy = randomLike({4, 5});
  std::vector<Tensor> grads = run(bwd, {dy, args[0], args[1]});
  ASSERT_EQ(grads.size(), 3u);
  for (unsigned i = 0; i < 3; ++i)
    EXPECT_TRUE(gradientClose(grads[i], numericGradient(fwd, args, i, {dy})))
        << "gradient of operand " << i;
}
