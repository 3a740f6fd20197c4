//===- InterpreterTest.cpp - primitive te ops against direct loops --------===//
//
// Each primitive op runs on seeded random inputs and is compared with a small
// loop written here from the op's definition (not with the interpreter's
// kernels), including the dropout RNG, which is transcribed again below.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"

#include "compiler/interpreter/DropoutRng.h"

#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>

using namespace tejit::testing;
using mlir::te::Activation;
using mlir::te::AttnMaskType;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// SplitMix64's output function, transcribed from the dropout convention.
uint64_t sm(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The 32 random bits of element i: of h = sm(sm(sm(sm(seed) ^ offset) ^
/// stream) ^ (i / 2)), the low half for an even i, the high half for an odd.
uint32_t drawBits(uint64_t seed, uint64_t offset, uint64_t stream,
                  uint64_t index) {
  uint64_t h = sm(sm(sm(sm(seed) ^ offset) ^ stream) ^ (index / 2));
  return uint32_t(index % 2 == 0 ? h & 0xFFFFFFFFu : h >> 32);
}

/// u = bits / 2^32; the element is kept iff u >= rate.
double draw(uint64_t seed, uint64_t offset, uint64_t stream, uint64_t index) {
  return drawBits(seed, offset, stream, index) / 4294967296.0;
}

/// The [seed, offset] of an rng_state tensor.
std::pair<uint64_t, uint64_t> seedOffset(const Tensor &rngState) {
  return {uint64_t(int64_t(rngState.data[0])),
          uint64_t(int64_t(rngState.data[1]))};
}

} // namespace

//===----------------------------------------------------------------------===//
// GEMMs, shapes, elementwise
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, MatmulHonoursBothTransposeFlags) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%a: tensor<3x4xf32>, %at: tensor<4x3xf32>, %b: tensor<4x5xf32>,
             %bt: tensor<5x4xf32>)
    -> (tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>) {
  %0 = te.matmul %a, %b : tensor<3x4xf32>, tensor<4x5xf32> -> tensor<3x5xf32>
  %1 = te.matmul %at, %b {transpose_a}
      : tensor<4x3xf32>, tensor<4x5xf32> -> tensor<3x5xf32>
  %2 = te.matmul %a, %bt {transpose_b}
      : tensor<3x4xf32>, tensor<5x4xf32> -> tensor<3x5xf32>
  %3 = te.matmul %at, %bt {transpose_a, transpose_b}
      : tensor<4x3xf32>, tensor<5x4xf32> -> tensor<3x5xf32>
  return %0, %1, %2, %3
      : tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>
}
)mlir");
  std::vector<Tensor> args = randomArgs(f);
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 4u);
  for (int variant = 0; variant < 4; ++variant) {
    bool ta = variant & 1, tb = variant & 2;
    Tensor expected = Tensor::zeros({3, 5});
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        for (int l = 0; l < 4; ++l)
          expected.data[i * 5 + j] +=
              (ta ? args[1].data[l * 3 + i] : args[0].data[i * 4 + l]) *
              (tb ? args[3].data[j * 4 + l] : args[2].data[l * 5 + j]);
    EXPECT_TRUE(allClose(results[variant], expected)) << "variant " << variant;
  }
}

TEST_F(InterpreterTest, LinearFlattensLeadingDimsAndAddsBias) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<2x3x4xf32>, %w: tensor<5x4xf32>, %b: tensor<5xf32>)
    -> (tensor<2x3x5xf32>, tensor<2x3x5xf32>) {
  %0 = te.linear %x weight(%w) bias(%b)
      : (tensor<2x3x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %1 = te.linear %x weight(%w)
      : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  return %0, %1 : tensor<2x3x5xf32>, tensor<2x3x5xf32>
}
)mlir");
  std::vector<Tensor> args = randomArgs(f);
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 2u);
  Tensor withBias = Tensor::zeros({2, 3, 5}), noBias = withBias;
  for (int t = 0; t < 6; ++t)
    for (int o = 0; o < 5; ++o) {
      double sum = 0.0;
      for (int i = 0; i < 4; ++i)
        sum += args[0].data[t * 4 + i] * args[1].data[o * 4 + i];
      noBias.data[t * 5 + o] = sum;
      withBias.data[t * 5 + o] = sum + args[2].data[o];
    }
  EXPECT_TRUE(allClose(results[0], withBias));
  EXPECT_TRUE(allClose(results[1], noBias));
}

TEST_F(InterpreterTest, ShapeAndElementwiseOps) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<2x3x6xf32>, %y: tensor<2x3x2xf32>, %m: tensor<3x4xf32>,
             %bias: tensor<6xf32>)
    -> (tensor<6x6xf32>, tensor<4x3xf32>, tensor<2x3x3xf32>, tensor<2x3x8xf32>,
        tensor<2x3x6xf32>, tensor<2x3x6xf32>, tensor<6xf32>) {
  %0 = te.reshape %x : tensor<2x3x6xf32> -> tensor<6x6xf32>
  %1 = te.transpose %m : tensor<3x4xf32> -> tensor<4x3xf32>
  %2 = te.slice %x[2] : tensor<2x3x6xf32> -> tensor<2x3x3xf32>
  %3 = te.concat %x, %y
      : tensor<2x3x6xf32>, tensor<2x3x2xf32> -> tensor<2x3x8xf32>
  %4 = te.add %x, %x : tensor<2x3x6xf32>
  %5 = te.bias_add %x, %bias
      : tensor<2x3x6xf32>, tensor<6xf32> -> tensor<2x3x6xf32>
  %6 = te.bias_grad %x : tensor<2x3x6xf32> -> tensor<6xf32>
  return %0, %1, %2, %3, %4, %5, %6
      : tensor<6x6xf32>, tensor<4x3xf32>, tensor<2x3x3xf32>, tensor<2x3x8xf32>,
        tensor<2x3x6xf32>, tensor<2x3x6xf32>, tensor<6xf32>
}
)mlir");
  std::vector<Tensor> args = randomArgs(f);
  const Tensor &x = args[0], &y = args[1], &m = args[2], &bias = args[3];
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 7u);
  EXPECT_TRUE(allClose(results[0], Tensor({6, 6}, x.data)));
  Tensor transposed = Tensor::zeros({4, 3}), sliced = Tensor::zeros({2, 3, 3}),
         joined = Tensor::zeros({2, 3, 8}), doubled = x, biased = x,
         summed = Tensor::zeros({6});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      transposed.data[j * 3 + i] = m.data[i * 4 + j];
  for (int row = 0; row < 6; ++row) {
    for (int c = 0; c < 3; ++c)
      sliced.data[row * 3 + c] = x.data[row * 6 + 2 + c];
    for (int c = 0; c < 8; ++c)
      joined.data[row * 8 + c] =
          c < 6 ? x.data[row * 6 + c] : y.data[row * 2 + c - 6];
    for (int c = 0; c < 6; ++c) {
      doubled.data[row * 6 + c] *= 2;
      biased.data[row * 6 + c] += bias.data[c];
      summed.data[c] += x.data[row * 6 + c];
    }
  }
  EXPECT_TRUE(allClose(results[1], transposed));
  EXPECT_TRUE(allClose(results[2], sliced));
  EXPECT_TRUE(allClose(results[3], joined));
  EXPECT_TRUE(allClose(results[4], doubled));
  EXPECT_TRUE(allClose(results[5], biased));
  EXPECT_TRUE(allClose(results[6], summed));
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, LayerNormFwdAndLayerOp) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<2x3x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>)
    -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>,
        tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %y, %mean, %rsigma = te.layernorm_fwd %x, %g, %b {eps = 0.25 : f64}
      : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  %zc, %m2, %r2 = te.layernorm_fwd %x, %g, %b
      {eps = 0.25 : f64, zero_centered_gamma}
      : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>)
        -> (tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>)
  %layer = te.layernorm %x weight(%g) bias(%b)
      {eps = 0.25 : f64, zero_centered_gamma}
      : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  return %y, %mean, %rsigma, %zc, %layer
      : tensor<2x3x8xf32>, tensor<2x3xf32>, tensor<2x3xf32>,
        tensor<2x3x8xf32>, tensor<2x3x8xf32>
}
)mlir");
  std::vector<Tensor> args = randomArgs(f);
  const Tensor &x = args[0], &g = args[1], &b = args[2];
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 5u);
  Tensor y = Tensor::zeros({2, 3, 8}), zc = y;
  Tensor mean = Tensor::zeros({2, 3}), rsigma = mean;
  for (int row = 0; row < 6; ++row) {
    double mu = 0.0, var = 0.0;
    for (int i = 0; i < 8; ++i)
      mu += x.data[row * 8 + i] / 8;
    for (int i = 0; i < 8; ++i)
      var += std::pow(x.data[row * 8 + i] - mu, 2) / 8;
    mean.data[row] = mu;
    rsigma.data[row] = 1 / std::sqrt(var + 0.25);
    for (int i = 0; i < 8; ++i) {
      double xhat = (x.data[row * 8 + i] - mu) * rsigma.data[row];
      y.data[row * 8 + i] = xhat * g.data[i] + b.data[i];
      zc.data[row * 8 + i] = xhat * (1 + g.data[i]) + b.data[i];
    }
  }
  EXPECT_TRUE(allClose(results[0], y));
  EXPECT_TRUE(allClose(results[1], mean));
  EXPECT_TRUE(allClose(results[2], rsigma));
  EXPECT_TRUE(allClose(results[3], zc));
  EXPECT_TRUE(allClose(results[4], zc));
}

TEST_F(InterpreterTest, RMSNormFwdAndLayerOp) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<4x8xf32>, %g: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %y, %rsigma = te.rmsnorm_fwd %x, %g {eps = 0.5 : f64}
      : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  %zc, %r2 = te.rmsnorm_fwd %x, %g {eps = 0.5 : f64, zero_centered_gamma}
      : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  %layer = te.rmsnorm %x weight(%g) {eps = 0.5 : f64}
      : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y, %rsigma, %zc, %layer
      : tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
)mlir");
  std::vector<Tensor> args = randomArgs(f);
  const Tensor &x = args[0], &g = args[1];
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 4u);
  Tensor y = Tensor::zeros({4, 8}), zc = y, rsigma = Tensor::zeros({4});
  for (int row = 0; row < 4; ++row) {
    double meanSquare = 0.0;
    for (int i = 0; i < 8; ++i)
      meanSquare += std::pow(x.data[row * 8 + i], 2) / 8;
    rsigma.data[row] = 1 / std::sqrt(meanSquare + 0.5);
    for (int i = 0; i < 8; ++i) {
      y.data[row * 8 + i] = x.data[row * 8 + i] * rsigma.data[row] * g.data[i];
      zc.data[row * 8 + i] =
          x.data[row * 8 + i] * rsigma.data[row] * (1 + g.data[i]);
    }
  }
  EXPECT_TRUE(allClose(results[0], y));
  EXPECT_TRUE(allClose(results[1], rsigma));
  EXPECT_TRUE(allClose(results[2], zc));
  EXPECT_TRUE(allClose(results[3], y));
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

namespace {

/// The elementwise function of each activation, from its definition.
double referenceActivation(Activation kind, double x) {
  double sigmoid = 1 / (1 + std::exp(-x));
  switch (kind) {
  case Activation::gelu:
  case Activation::geglu:
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / llvm::numbers::pi) *
                          (x + 0.044715 * x * x * x)));
  case Activation::qgelu:
  case Activation::qgeglu:
    return x / (1 + std::exp(-1.702 * x));
  case Activation::relu:
  case Activation::reglu:
    return std::max(x, 0.0);
  case Activation::srelu:
  case Activation::sreglu:
    return std::pow(std::max(x, 0.0), 2);
  case Activation::silu:
  case Activation::swiglu:
    return x * sigmoid;
  }
  return 0.0;
}

class ActivationTest : public InterpreterTest,
                       public ::testing::WithParamInterface<Activation> {};

} // namespace

TEST_P(ActivationTest, MatchesItsFormula) {
  Activation kind = GetParam();
  bool gated = mlir::te::isGatedActivation(kind);
  int64_t width = 8, out = gated ? 4 : 8;
  mlir::func::FuncOp f =
      parse(substitute(R"mlir(
func.func @f(%x: tensor<3x8xf32>) -> $OUT {
  %0 = te.act <$ACT> %x : tensor<3x8xf32> -> $OUT
  return %0 : $OUT
}
)mlir",
                       {{"OUT", tensorType({3, out})},
                        {"ACT", mlir::te::stringifyActivation(kind).str()}}));
  std::vector<Tensor> args = randomArgs(f, 2.0);
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 1u);
  Tensor expected = Tensor::zeros({3, out});
  for (int row = 0; row < 3; ++row)
    for (int i = 0; i < out; ++i) {
      const double *in = args[0].data.data() + row * width;
      expected.data[row * out + i] =
          referenceActivation(kind, in[i]) * (gated ? in[out + i] : 1.0);
    }
  EXPECT_TRUE(allClose(results[0], expected, 1e-12, 1e-14));
}

INSTANTIATE_TEST_SUITE_P(
    All, ActivationTest,
    ::testing::Values(Activation::gelu, Activation::geglu, Activation::qgelu,
                      Activation::qgeglu, Activation::relu, Activation::reglu,
                      Activation::srelu, Activation::sreglu, Activation::silu,
                      Activation::swiglu),
    [](const ::testing::TestParamInfo<Activation> &info) {
      return mlir::te::stringifyActivation(info.param).str();
    });

namespace {

/// clamped_swiglu's parameters and the attributes that give them (empty:
/// Transformer Engine's defaults, limit 7, alpha 1.702, offset 1).
struct ClampedSwigluCase {
  const char *name;
  double limit, alpha, offset;
  const char *attributes;
};

/// Names the case in gtest's messages.
void PrintTo(const ClampedSwigluCase &c, std::ostream *os) { *os << c.name; }

class ClampedSwigluTest
    : public InterpreterTest,
      public ::testing::WithParamInterface<ClampedSwigluCase> {};

/// First halves a and second halves b, in units of the limit: each side of
/// each clamp (a above the limit, b below -limit and above limit), the
/// limits themselves and values inside.
const double kClampA[] = {-3.0, -1.2, -0.4, 0.0, 0.6, 1.0, 1.3, 4.0};
const double kClampB[] = {-4.0, -1.0, -0.7, 0.2, 0.9, 1.0, 1.5, 3.0};

} // namespace

TEST_P(ClampedSwigluTest, ClampsThenGates) {
  const ClampedSwigluCase &c = GetParam();
  mlir::func::FuncOp f = parse(substitute(R"mlir(
func.func @f(%x: tensor<2x16xf32>) -> tensor<2x8xf32> {
  %0 = te.act <clamped_swiglu> %x $ATTRS : tensor<2x16xf32> -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
)mlir",
                                          {{"ATTRS", c.attributes}}));
  // Row 0: the a and b above, chunked [a | b]; row 1: b reversed.
  Tensor x = Tensor::zeros({2, 16});
  for (int i = 0; i < 8; ++i) {
    x.data[i] = x.data[16 + i] = kClampA[i] * c.limit;
    x.data[8 + i] = kClampB[i] * c.limit;
    x.data[24 + i] = kClampB[7 - i] * c.limit;
  }
  std::vector<Tensor> results = run(f, {x});
  ASSERT_EQ(results.size(), 1u);
  Tensor expected = Tensor::zeros({2, 8});
  for (int row = 0; row < 2; ++row)
    for (int i = 0; i < 8; ++i) {
      double a = x.data[row * 16 + i], b = x.data[row * 16 + 8 + i];
      double ac = a > c.limit ? c.limit : a;
      double bc = b > c.limit ? c.limit : b < -c.limit ? -c.limit : b;
      expected.data[row * 8 + i] =
          ac / (1 + std::exp(-c.alpha * ac)) * (bc + c.offset);
    }
  EXPECT_TRUE(allClose(results[0], expected, 1e-13, 1e-15));
  // Above the limit, a counts as the limit: row 0's a = 1.3 limit and 4
  // limit give what a = limit gives, scaled by their b.
  double atLimit = c.limit / (1 + std::exp(-c.alpha * c.limit));
  EXPECT_NEAR(results[0].data[7], atLimit * (c.limit + c.offset), 1e-12);
  EXPECT_NEAR(results[0].data[6], atLimit * (c.limit + c.offset), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    Params, ClampedSwigluTest,
    ::testing::Values(
        ClampedSwigluCase{"Defaults", 7.0, 1.702, 1.0, ""},
        ClampedSwigluCase{"Limit075", 0.75, 1.702, 1.0,
                          "{activation_limit = 0.75 : f64}"},
        ClampedSwigluCase{"Limit075NoOffset", 0.75, 1.702, 0.0,
                          "{activation_limit = 0.75 : f64, activation_alpha = "
                          "1.702 : f64, glu_linear_offset = 0.0 : f64}"},
        ClampedSwigluCase{"Limit2Alpha1Offset05", 2.0, 1.0, 0.5,
                          "{activation_limit = 2.0 : f64, activation_alpha = "
                          "1.0 : f64, glu_linear_offset = 0.5 : f64}"}),
    [](const ::testing::TestParamInfo<ClampedSwigluCase> &info) {
      return std::string(info.param.name);
    });

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

TEST(DropoutRngTest, FollowsTheConvention) {
  // SplitMix64's published first output for state 0.
  EXPECT_EQ(tejit::dropout::splitMix64(0), 0xE220A8397B1DCDAFull);
  // Known answers (from a separate Python transcription): elements 0 and 1
  // are the low and high halves of one hash, 2 and 3 of the next.
  EXPECT_EQ(tejit::dropout::hashBits(3, 9, 17, 0), 0x26F10D73u);
  EXPECT_EQ(tejit::dropout::hashBits(3, 9, 17, 1), 0xFD34D3C9u);
  EXPECT_EQ(tejit::dropout::hashBits(3, 9, 17, 2), 0xCB675AC6u);
  EXPECT_EQ(tejit::dropout::hashBits(3, 9, 17, 3), 0x6756A1FCu);
  for (uint64_t i : {0ull, 1ull, 76ull, 77ull, 1ull << 40, (1ull << 40) + 1})
    EXPECT_EQ(tejit::dropout::uniform(3, 9, 17, i), draw(3, 9, 17, i));
  EXPECT_EQ(tejit::dropout::layerStream(2, tejit::dropout::kMlpOutputSite),
            34u);
  // Every input of the hash changes the draw.
  double base = draw(1, 2, 3, 4);
  EXPECT_NE(draw(5, 2, 3, 4), base);
  EXPECT_NE(draw(1, 5, 3, 4), base);
  EXPECT_NE(draw(1, 2, 5, 4), base);
  EXPECT_NE(draw(1, 2, 3, 5), base);
}

TEST(DropoutRngTest, ThresholdIsTheExactCeiling) {
  using tejit::dropout::keepThreshold;
  static_assert(keepThreshold(0.0) == 0);
  static_assert(keepThreshold(1.0) == 1ull << 32);
  EXPECT_EQ(keepThreshold(0.5), 1ull << 31);
  EXPECT_EQ(keepThreshold(0.1), 429496730u); // 0.1 * 2^32 = 429496729.6...
  EXPECT_EQ(keepThreshold(0x1p-32), 1u);
  EXPECT_EQ(keepThreshold(0x1p-40), 1u);
  EXPECT_EQ(keepThreshold(std::nextafter(1.0, 0.0)), 1ull << 32);
  // bits >= threshold iff bits / 2^32 >= rate, at the boundary too.
  for (double rate : {0.1, 0.25, 1.0 / 3.0, 0.5, 0.9, 0.999999}) {
    uint64_t t = keepThreshold(rate);
    EXPECT_GE(double(t) / 4294967296.0, rate);
    EXPECT_LT(double(t - 1) / 4294967296.0, rate);
  }
}

TEST(DropoutRngTest, KeepRatesAndPairsAreUnbiased) {
  using tejit::dropout::keeps;
  constexpr uint64_t kPairs = 500000, kElements = 2 * kPairs;
  for (double rate : {0.1, 0.5}) {
    SCOPED_TRACE(rate);
    double kept = 0, keptEven = 0, keptBoth = 0;
    for (uint64_t pair = 0; pair < kPairs; ++pair) {
      bool even = keeps(rate, 11, 22, 5, 2 * pair);
      bool odd = keeps(rate, 11, 22, 5, 2 * pair + 1);
      EXPECT_EQ(even, draw(11, 22, 5, 2 * pair) >= rate);
      kept += even + odd;
      keptEven += even;
      keptBoth += even && odd;
    }
    // Within 5 sigma of a Bernoulli mean over n draws.
    auto near = [](double count, double n, double p) {
      return std::abs(count / n - p) < 5 * std::sqrt(p * (1 - p) / n);
    };
    double q = 1 - rate;
    EXPECT_TRUE(near(kept, kElements, q)) << kept / kElements;
    EXPECT_TRUE(near(keptEven, kPairs, q)) << keptEven / kPairs;
    // The two halves of one hash are independent.
    EXPECT_TRUE(near(keptBoth, kPairs, q * q)) << keptBoth / kPairs;
  }
  for (uint64_t i = 0; i < 100000; ++i) {
    EXPECT_TRUE(keeps(0.0, 11, 22, 5, i));
    EXPECT_FALSE(keeps(1.0, 11, 22, 5, i));
  }
}

TEST_F(InterpreterTest, DropoutKeepsAndScalesByTheHash) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<16x64xf32>, %rng: tensor<2xi64>)
    -> (tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) {
  %0 = te.dropout %x, %rng {rate = 0.25 : f64, stream = 7 : i64}
      : tensor<16x64xf32>, tensor<2xi64> -> tensor<16x64xf32>
  %1 = te.dropout %x, %rng {rate = 0.0 : f64, stream = 7 : i64}
      : tensor<16x64xf32>, tensor<2xi64> -> tensor<16x64xf32>
  %2 = te.dropout %x, %rng {rate = 0.25 : f64, stream = 8 : i64}
      : tensor<16x64xf32>, tensor<2xi64> -> tensor<16x64xf32>
  return %0, %1, %2 : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>
}
)mlir");
  std::vector<Tensor> args = randomArgs(f);
  auto [seed, offset] = seedOffset(args[1]);
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 3u);
  Tensor output = Tensor::zeros({16, 64}), otherStream = output;
  double kept = 0;
  for (int i = 0; i < 16 * 64; ++i) {
    bool keep = draw(seed, offset, 7, i) >= 0.25;
    output.data[i] = keep * args[0].data[i] / 0.75;
    otherStream.data[i] =
        (draw(seed, offset, 8, i) >= 0.25) * args[0].data[i] / 0.75;
    kept += keep;
  }
  EXPECT_TRUE(allClose(results[0], output));
  EXPECT_NEAR(kept / (16 * 64), 0.75, 0.05);
  EXPECT_TRUE(allClose(results[1], args[0]));
  EXPECT_TRUE(allClose(results[2], otherStream));
  EXPECT_FALSE(allClose(results[2], output));
}

//===----------------------------------------------------------------------===//
// Rotary embeddings
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, RotaryRotatesHalvesInBothLayouts) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%s: tensor<3x2x2x4xf32>, %b: tensor<2x3x2x4xf32>,
             %freqs: tensor<3x1x1x4xf32>)
    -> (tensor<3x2x2x4xf32>, tensor<2x3x2x4xf32>, tensor<3x2x2x4xf32>) {
  %0 = te.rotary %s, %freqs {qkv_format = #te.qkv_format<sbhd>}
      : tensor<3x2x2x4xf32>, tensor<3x1x1x4xf32> -> tensor<3x2x2x4xf32>
  %1 = te.rotary %b, %freqs {qkv_format = #te.qkv_format<bshd>}
      : tensor<2x3x2x4xf32>, tensor<3x1x1x4xf32> -> tensor<2x3x2x4xf32>
  %2 = te.rotary %s, %freqs {qkv_format = #te.qkv_format<sbhd>, inverse}
      : tensor<3x2x2x4xf32>, tensor<3x1x1x4xf32> -> tensor<3x2x2x4xf32>
  return %0, %1, %2
      : tensor<3x2x2x4xf32>, tensor<2x3x2x4xf32>, tensor<3x2x2x4xf32>
}
)mlir");
  std::vector<Tensor> args = randomArgs(f);
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 3u);
  const Tensor &freqs = args[2];
  Tensor sbhd = Tensor::zeros({3, 2, 2, 4}), bshd = Tensor::zeros({2, 3, 2, 4}),
         inverse = sbhd;
  for (int s = 0; s < 3; ++s)
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 2; ++h)
        for (int d = 0; d < 4; ++d) {
          double angle = freqs.data[s * 4 + d];
          // rotate_half pairs d with d +- 2, negating the second half.
          int partner = d < 2 ? d + 2 : d - 2;
          double sign = d < 2 ? -1.0 : 1.0;
          auto rotate = [&](const Tensor &x, llvm::ArrayRef<int64_t> at,
                            llvm::ArrayRef<int64_t> partnerAt, double dir) {
            return x.data[flatIndex(x.shape, at)] * std::cos(angle) +
                   dir * sign * x.data[flatIndex(x.shape, partnerAt)] *
                       std::sin(angle);
          };
          sbhd.data[flatIndex(sbhd.shape, {s, b, h, d})] =
              rotate(args[0], {s, b, h, d}, {s, b, h, partner}, 1.0);
          inverse.data[flatIndex(sbhd.shape, {s, b, h, d})] =
              rotate(args[0], {s, b, h, d}, {s, b, h, partner}, -1.0);
          bshd.data[flatIndex(bshd.shape, {b, s, h, d})] =
              rotate(args[1], {b, s, h, d}, {b, s, h, partner}, 1.0);
        }
  EXPECT_TRUE(allClose(results[0], sbhd));
  EXPECT_TRUE(allClose(results[1], bshd));
  EXPECT_TRUE(allClose(results[2], inverse));
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

namespace {

/// Attention from its definition: softmax over the keys the mask leaves,
/// dropout on the probabilities, weighted sum of the values.
std::pair<Tensor, Tensor> referenceAttention(const AttentionCase &c,
                                             const std::vector<Tensor> &args) {
  const Tensor &q = args[0], &k = args[1], &v = args[2];
  llvm::SmallVector<int64_t> maskShape = c.maskShape();
  const Tensor *mask = maskShape.empty() ? nullptr : &args[3];
  auto [seed, offset] = seedOffset(args.back());
  auto at = [&](const Tensor &t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return c.sbhd() ? flatIndex(t.shape, {s, b, h, d})
                    : flatIndex(t.shape, {b, s, h, d});
  };
  // Transformer Engine's window: keys [i' - left, i' + right] of query i,
  // with i' = i, or i + s_kv - s_q unless the mask type is (padding_)causal.
  auto outsideWindow = [&](int64_t i, int64_t j) {
    bool topLeft = c.maskType == AttnMaskType::causal ||
                   c.maskType == AttnMaskType::padding_causal;
    int64_t aligned = topLeft ? i : i + c.seqKV - c.seqQ;
    return (c.windowLeft >= 0 && aligned - j > c.windowLeft) ||
           (c.windowRight >= 0 && j - aligned > c.windowRight);
  };
  auto masked = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    bool pad = mask && c.maskType != AttnMaskType::arbitrary &&
               mask->data[flatIndex(mask->shape, {b, 0, 0, j})];
    if (outsideWindow(i, j))
      return true;
    switch (c.maskType) {
    case AttnMaskType::no_mask:
      return false;
    case AttnMaskType::padding:
      return pad;
    case AttnMaskType::causal:
    case AttnMaskType::padding_causal:
      return pad || j > i;
    case AttnMaskType::causal_bottom_right:
    case AttnMaskType::padding_causal_bottom_right:
      return pad || j > i + c.seqKV - c.seqQ;
    case AttnMaskType::arbitrary:
      return mask->data[flatIndex(mask->shape,
                                  {mask->shape[0] == 1 ? 0 : b,
                                   mask->shape[1] == 1 ? 0 : h, i, j})] != 0.0;
    }
    return false;
  };
  Tensor out = Tensor::zeros(q.shape),
         lse = Tensor::zeros({c.batch, c.heads, c.seqQ});
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.seqQ; ++i) {
        int64_t g = h * c.groups / c.heads;
        std::vector<double> score(c.seqKV);
        double max = -kInf;
        for (int64_t j = 0; j < c.seqKV; ++j) {
          score[j] = 0.0;
          for (int64_t d = 0; d < c.dim; ++d)
            score[j] += q.data[at(q, b, i, h, d)] * k.data[at(k, b, j, g, d)];
          score[j] = masked(b, h, i, j) ? -kInf : score[j] * c.scale();
          max = std::max(max, score[j]);
        }
        int64_t row = (b * c.heads + h) * c.seqQ + i;
        if (max == -kInf) {
          lse.data[row] = -kInf;
          continue;
        }
        double total = 0.0;
        for (int64_t j = 0; j < c.seqKV; ++j)
          total += std::exp(score[j] - max);
        lse.data[row] = max + std::log(total);
        for (int64_t j = 0; j < c.seqKV; ++j) {
          double p = std::exp(score[j] - max) / total;
          if (c.dropout > 0)
            p = draw(seed, offset, 3, row * c.seqKV + j) >= c.dropout
                    ? p / (1 - c.dropout)
                    : 0.0;
          for (int64_t d = 0; d < c.dim; ++d)
            out.data[at(out, b, i, h, d)] += p * v.data[at(v, b, j, g, d)];
        }
      }
  return {out, lse};
}

class AttentionTest : public InterpreterTest,
                      public ::testing::WithParamInterface<AttentionCase> {};

} // namespace

TEST_P(AttentionTest, MatchesTheDefinition) {
  const AttentionCase &c = GetParam();
  mlir::func::FuncOp f = parse(c.module(), "fwd");
  std::vector<Tensor> args = randomArgs(f);
  std::vector<Tensor> results = run(f, args);
  ASSERT_EQ(results.size(), 2u);
  auto [out, lse] = referenceAttention(c, args);
  EXPECT_TRUE(allClose(results[0], out));
  EXPECT_TRUE(allClose(results[1], lse));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionTest, ::testing::ValuesIn(attentionCases()),
    [](const ::testing::TestParamInfo<AttentionCase> &info) {
      return info.param.name;
    });

TEST_F(InterpreterTest, FullyMaskedRowsGiveZeroOutputAndMinusInfLse) {
  // Bottom-right causal with s_q = 5 > s_kv = 3: queries 0 and 1 see no key.
  AttentionCase c{"",
                  mlir::te::QkvFormat::sbhd,
                  AttnMaskType::causal_bottom_right,
                  1,
                  5,
                  3,
                  1,
                  1,
                  2};
  mlir::func::FuncOp f = parse(c.module(), "fwd");
  std::vector<Tensor> results = run(f, randomArgs(f));
  ASSERT_EQ(results.size(), 2u);
  for (int i = 0; i < 5; ++i) {
    bool empty = i < 2;
    EXPECT_EQ(std::isinf(results[1].data[i]) && results[1].data[i] < 0, empty);
    EXPECT_EQ(results[0].data[i * 2] == 0.0 &&
                  results[0].data[i * 2 + 1] == 0.0,
              empty);
  }
}

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, RejectsArgumentsOfTheWrongShapeOrCount) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = te.add %x, %x : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
)mlir");
  EXPECT_NE(runFailing(f, {Tensor::zeros({3, 2})})
                .find("argument #0 has shape [3, 2] (6 elements) but the "
                      "function takes 'tensor<2x3xf32>'"),
            std::string::npos);
  EXPECT_NE(runFailing(f, {Tensor({2, 3}, {1, 2, 3})}).find("3 elements"),
            std::string::npos);
  EXPECT_NE(runFailing(f, {}).find("got 0 arguments for 1"), std::string::npos);
}

TEST_F(InterpreterTest, RejectsUnsupportedOps) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = func.call @g(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
)mlir");
  EXPECT_NE(runFailing(f, {Tensor({2}, {1, 2})})
                .find("'func.call' op is not supported by the te interpreter"),
            std::string::npos);
}

TEST_F(InterpreterTest, RejectsAttentionWithoutItsMaskOrRngState) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%q: tensor<2x1x1x2xf32>) -> tensor<2x1x1x2xf32> {
  %o, %lse = te.attention %q, %q, %q
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 1.0 : f64,
       dropout = 0.5 : f64}
      : (tensor<2x1x1x2xf32>, tensor<2x1x1x2xf32>, tensor<2x1x1x2xf32>)
        -> (tensor<2x1x1x2xf32>, tensor<1x1x2xf32>)
  return %o : tensor<2x1x1x2xf32>
}
func.func @padding(%q: tensor<2x1x1x2xf32>) -> tensor<2x1x1x2xf32> {
  %o, %lse = te.attention %q, %q, %q
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 1.0 : f64}
      : (tensor<2x1x1x2xf32>, tensor<2x1x1x2xf32>, tensor<2x1x1x2xf32>)
        -> (tensor<2x1x1x2xf32>, tensor<1x1x2xf32>)
  return %o : tensor<2x1x1x2xf32>
}
func.func @bad_mask(%q: tensor<2x1x1x2xf32>, %m: tensor<1x1x2x2xi1>)
    -> tensor<2x1x1x2xf32> {
  %o, %lse = te.attention %q, %q, %q mask(%m)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 1.0 : f64}
      : (tensor<2x1x1x2xf32>, tensor<2x1x1x2xf32>, tensor<2x1x1x2xf32>,
         tensor<1x1x2x2xi1>) -> (tensor<2x1x1x2xf32>, tensor<1x1x2xf32>)
  return %o : tensor<2x1x1x2xf32>
}
)mlir");
  Tensor q({2, 1, 1, 2}, {1, 2, 3, 4});
  EXPECT_NE(runFailing(f, {q}).find("dropout needs an 'rng_state' operand"),
            std::string::npos);
  mlir::func::FuncOp padding =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("padding");
  EXPECT_NE(runFailing(padding, {q}).find("padding needs a mask operand"),
            std::string::npos);
  mlir::func::FuncOp badMask =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("bad_mask");
  EXPECT_NE(runFailing(badMask, {q, Tensor::zeros({1, 1, 2, 2})})
                .find("mask must be i1 of shape [b, 1, 1, s_kv]"),
            std::string::npos);
}

TEST_F(InterpreterTest, RejectsRngStatesItCannotHoldExactly) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<4xf32>, %rng: tensor<2xi64>) -> tensor<4xf32> {
  %0 = te.dropout %x, %rng {rate = 0.5 : f64, stream = 0 : i64}
      : tensor<4xf32>, tensor<2xi64> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
)mlir");
  Tensor x({4}, {1, 2, 3, 4});
  EXPECT_NE(runFailing(f, {x, Tensor({2}, {1.5, 0})})
                .find("'rng_state' element 0 (1.500000e+00) is not an integer"),
            std::string::npos);
  EXPECT_NE(runFailing(f, {x, Tensor({2}, {0, 0x1.0p60})})
                .find("'rng_state' element 1"),
            std::string::npos);
}
