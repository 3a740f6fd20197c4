//===- InterpreterFp8OpsTest.cpp - FP8 quantization ops vs host models ----===//
//
// te.quantize, te.amax, te.compute_scale, te.scaled_matmul,
// te.amax_allreduce and te.delayed_scaling_update run on seeded random data
// and are compared with what is written here (and in Fp8TestUtils.h) from
// the op definitions and shared/FP8.md, not with the interpreter's kernels:
// FP8 values come from a table decoded from the bit patterns, float32 quotients
// are checked against double quotients rounded once (exact: 53 >= 2 * 24 + 2
// bits), and DelayedScaling runs against a per-slot model kept as a
// std::vector.
//
//===----------------------------------------------------------------------===//
#include "Fp8TestUtils.h"

#include <cfloat>
#include <limits>
#include <tuple>

using namespace tejit::testing;
using tejit::interp::Fp8Kind;
using tejit::interp::roundToFp8;

//===----------------------------------------------------------------------===//
// te.quantize and te.amax
//===----------------------------------------------------------------------===//

/// @f(x: 8x16xf32, scale) -> (q, amax, transpose(q), reshape(q), q[:, 4:8]).
static std::string quantizeModule(const Fp8Type &type) {
  return substitute(R"mlir(
func.func @f(%x: tensor<8x16xf32>, %s: tensor<1xf32>)
    -> (tensor<8x16x$T>, tensor<1xf32>, tensor<16x8x$T>, tensor<4x32x$T>,
        tensor<8x4x$T>) {
  %q, %amax = te.quantize %x, %s
      : tensor<8x16xf32>, tensor<1xf32> -> tensor<8x16x$T>, tensor<1xf32>
  %t = te.transpose %q : tensor<8x16x$T> -> tensor<16x8x$T>
  %r = te.reshape %q : tensor<8x16x$T> -> tensor<4x32x$T>
  %s4 = te.slice %q[4] : tensor<8x16x$T> -> tensor<8x4x$T>
  return %q, %amax, %t, %r, %s4 : tensor<8x16x$T>, tensor<1xf32>,
      tensor<16x8x$T>, tensor<4x32x$T>, tensor<8x4x$T>
}
)mlir",
                    {{"T", type.name}});
}

TEST_F(InterpreterFp8OpsTest, QuantizeRoundsToTheNearestFp8Value) {
  for (const Fp8Type &type : {kE4M3, kE5M2}) {
    mlir::func::FuncOp f = parse(quantizeModule(type));
    std::vector<double> table = fp8Values(type.kind);
    // Powers of two (midpoints / scale are exact ties), then other floats.
    for (double scale : {1.0, 0.25, 64.0, double(float(0.37)),
                         double(float(type.max / 3.3)), double(FLT_MAX)}) {
      Tensor x = Tensor::zeros({8, 16});
      for (size_t i = 0; i < x.data.size(); ++i) {
        std::uniform_int_distribution<size_t> code(0, table.size() - 2);
        size_t c = code(rng);
        // Inputs are float32 values, as a bf16/f32 tensor holds.
        x.data[i] = float(i % 4 == 0 ? 0.5 * (table[c] + table[c + 1]) / scale
                                     : logUniform(-24, 20) / std::sqrt(scale));
      }
      std::vector<Tensor> out = run(f, {x, slot(scale)});
      ASSERT_EQ(out.size(), 5u);
      Tensor byTable = x, byRounding = x;
      double amax = 0.0;
      for (size_t i = 0; i < x.data.size(); ++i) {
        // TE's reference: (x.float() * scale) in float32, then to FP8.
        double product = float(float(x.data[i]) * float(scale));
        byTable.data[i] = nearestFp8(table, product);
        byRounding.data[i] = roundToFp8(product, type.kind);
        amax = std::max(amax, std::fabs(x.data[i]));
      }
      EXPECT_TRUE(allClose(out[0], byTable, 0, 0)) << type.name << " " << scale;
      EXPECT_TRUE(allClose(out[0], byRounding, 0, 0));
      EXPECT_EQ(out[1].data[0], amax);
      // FP8 tensors go through shape ops unchanged.
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 16; ++j) {
          EXPECT_EQ(out[2].data[j * 8 + i], out[0].data[i * 16 + j]);
          if (j >= 4 && j < 8) {
            EXPECT_EQ(out[4].data[i * 4 + j - 4], out[0].data[i * 16 + j]);
          }
        }
      EXPECT_EQ(out[3].data, out[0].data);
    }
  }
}

TEST_F(InterpreterFp8OpsTest, QuantizeSaturatesAndKeepsNaN) {
  mlir::func::FuncOp e4m3 = parse(R"mlir(
func.func @f(%x: tensor<12xbf16>, %s: tensor<1xf32>)
    -> (tensor<12xf8E4M3FN>, tensor<1xf32>) {
  %q, %amax = te.quantize %x, %s
      : tensor<12xbf16>, tensor<1xf32> -> tensor<12xf8E4M3FN>, tensor<1xf32>
  return %q, %amax : tensor<12xf8E4M3FN>, tensor<1xf32>
}
)mlir");
  mlir::func::FuncOp e5m2 = parse(R"mlir(
func.func @f(%x: tensor<12xbf16>, %s: tensor<1xf32>)
    -> (tensor<12xf8E5M2>, tensor<1xf32>) {
  %q, %amax = te.quantize %x, %s
      : tensor<12xbf16>, tensor<1xf32> -> tensor<12xf8E5M2>, tensor<1xf32>
  return %q, %amax : tensor<12xf8E5M2>, tensor<1xf32>
}
)mlir");
  for (auto [f, max] : {std::pair{e4m3, 448.0}, std::pair{e5m2, 57344.0}}) {
    // Beyond the max (also by a hair), infinities, NaN, signed zeros, values
    // below half the smallest subnormal.
    Tensor x({12}, {1e6, -1e6, max * 1.0001, -max * 1.07, kInf, -kInf, kNaN,
                    0.0, -0.0, 1e-30, -1e-30, 2.0});
    Tensor expected({12}, {max, -max, max, -max, max, -max, kNaN, 0.0, -0.0,
                           0.0, -0.0, 2.0});
    std::vector<Tensor> out = run(f, {x, slot(1.0)});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_TRUE(allClose(out[0], expected, 0, 0));
    EXPECT_TRUE(std::signbit(out[0].data[8]) && std::signbit(out[0].data[10]));
    EXPECT_TRUE(std::isnan(out[1].data[0])) << "amax must propagate NaN";
    x.data[6] = 3.0;
    out = run(f, {x, slot(1.0)});
    EXPECT_EQ(out[1].data[0], kInf);
    // A FLT_MAX scale (the tiny-amax case) saturates all but zeros, and
    // 0 * inf = NaN stays NaN.
    x = Tensor({12}, {1e-30, -1e-30, 1e-36, 0.0, 1e-45, 1.0, 2.0, 3.0, 4.0, 5.0,
                      6.0, 7.0});
    out = run(f, {x, slot(FLT_MAX)});
    EXPECT_EQ(out[0].data[0], max);
    EXPECT_EQ(out[0].data[1], -max);
    EXPECT_EQ(out[0].data[3], 0.0);
    EXPECT_EQ(out[1].data[0], 7.0);
    x.data[3] = kInf;
    out = run(f, {x, slot(0.0)});
    EXPECT_TRUE(std::isnan(out[0].data[3]));
    EXPECT_EQ(out[0].data[0], 0.0);
  }
}

TEST_F(InterpreterFp8OpsTest, AmaxIsTheLargestMagnitudeAndPropagatesNaN) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<3x5x7xbf16>) -> (tensor<1xf32>, tensor<1xf32>) {
  %a = te.amax %x : tensor<3x5x7xbf16> -> tensor<1xf32>
  %s = te.slice %a[0] : tensor<1xf32> -> tensor<1xf32>
  %r = te.amax_allreduce %s : tensor<1xf32>
  return %a, %r : tensor<1xf32>, tensor<1xf32>
}
)mlir");
  for (int trial = 0; trial < 20; ++trial) {
    Tensor x = randomLike({3, 5, 7}, logUniform(-10, 10, false));
    double expected = 0.0;
    for (double value : x.data)
      expected = std::max(expected, std::fabs(value));
    std::vector<Tensor> out = run(f, {x});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].data[0], expected);
    EXPECT_EQ(out[1].data[0], expected);
    std::uniform_int_distribution<size_t> at(0, x.data.size() - 1);
    size_t where = at(rng);
    x.data[where] = -4 * expected; // The max magnitude may be negative.
    EXPECT_EQ(run(f, {x})[0].data[0], 4 * expected);
    x.data[at(rng)] = -kInf;
    EXPECT_EQ(run(f, {x})[0].data[0], kInf);
    x.data[at(rng)] = kNaN;
    EXPECT_TRUE(std::isnan(run(f, {x})[0].data[0]));
  }
  EXPECT_EQ(run(f, {Tensor::zeros({3, 5, 7})})[0].data[0], 0.0);
}

TEST_F(InterpreterFp8OpsTest, AmaxAllReduceIsTheIdentityInOneProcess) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%a: tensor<6xf32>) -> tensor<6xf32> {
  %r = te.amax_allreduce %a : tensor<6xf32>
  return %r : tensor<6xf32>
}
)mlir");
  Tensor amaxes({6}, {0.0, 1.5, kInf, kNaN, 1e-40, 3e38});
  EXPECT_TRUE(allClose(run(f, {amaxes})[0], amaxes, 0, 0));
}

//===----------------------------------------------------------------------===//
// te.compute_scale
//===----------------------------------------------------------------------===//

namespace {
/// [scale, scale_inv] of te.compute_scale for E4M3, E5M2, E4M3 with
/// power_2_scale and E5M2 with power_2_scale, in that order.
class ComputeScaleFp8Test : public InterpreterFp8OpsTest {
protected:
  void SetUp() override {
    f = parse(R"mlir(
func.func @f(%a: tensor<1xf32>)
    -> (tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
        tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) {
  %s0, %i0 = te.compute_scale %a {fp8_type = f8E4M3FN}
      : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  %s1, %i1 = te.compute_scale %a {fp8_type = f8E5M2}
      : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  %s2, %i2 = te.compute_scale %a {fp8_type = f8E4M3FN, power_2_scale}
      : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  %s3, %i3 = te.compute_scale %a {fp8_type = f8E5M2, power_2_scale}
      : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  return %s0, %i0, %s1, %i1, %s2, %i2, %s3, %i3
      : tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
        tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>
}
)mlir");
  }

  /// The eight results for `amax`, each checked to be a float32 value.
  std::vector<double> scales(double amax) {
    std::vector<double> values;
    for (const Tensor &result : run(f, {slot(amax)})) {
      EXPECT_TRUE(isFloat32(result.data[0])) << result.data[0];
      values.push_back(result.data[0]);
    }
    EXPECT_EQ(values.size(), 8u);
    values.resize(8);
    return values;
  }

  mlir::func::FuncOp f;
};
} // namespace

TEST_F(ComputeScaleFp8Test, DegenerateAmaxesGiveScaleOne) {
  // 0, inf and NaN (and as float32: a double below its range reads as 0, one
  // above it as inf) give scale 1.
  for (double amax : {0.0, -0.0, kInf, kNaN, 1e-50, 1e39})
    EXPECT_EQ(scales(amax), std::vector<double>(8, 1.0)) << amax;
}

TEST_F(ComputeScaleFp8Test, TinyAmaxGivesFltMax) {
  const double fltMax = FLT_MAX; // 3.4028234663852886e38
  EXPECT_EQ(fltMax, 3.4028234663852886e38);
  const double inverse = 1.0f / FLT_MAX, powerOfTwo = std::ldexp(1.0, 127);
  // Below fp8_max / FLT_MAX the float32 quotient overflows: for E4M3 that
  // amax also overflows E5M2's quotient.
  for (double amax : {double(float(448.0 / fltMax)) / 2, 1e-40, 1e-45}) {
    EXPECT_EQ(scales(amax),
              (std::vector<double>{fltMax, inverse, fltMax, inverse, powerOfTwo,
                                   0x1p-127, powerOfTwo, 0x1p-127}))
        << amax;
  }
  EXPECT_GT(inverse, 0.0);
  // Just above the E4M3 threshold the quotient is finite again.
  double edge = float(448.0 / fltMax) * 2;
  EXPECT_EQ(scales(edge)[0], floatQuotient(448.0, edge));
  EXPECT_LT(scales(edge)[0], fltMax);
}

TEST_F(ComputeScaleFp8Test, NormalAmaxIsBitExactInFloat32) {
  for (int trial = 0; trial < 2000; ++trial) {
    // Random doubles (mostly not float32 values) over a wide range.
    double amax = logUniform(-100, 100, false);
    double a = float(amax);
    std::vector<double> got = scales(amax);
    double e4m3 = floatQuotient(448.0, a), e5m2 = floatQuotient(57344.0, a);
    double p4 = powerOfTwoBelow(e4m3), p5 = powerOfTwoBelow(e5m2);
    std::vector<double> expected = {
        e4m3, floatQuotient(1.0, e4m3), e5m2, floatQuotient(1.0, e5m2),
        p4,   floatQuotient(1.0, p4),   p5,   floatQuotient(1.0, p5)};
    ASSERT_EQ(got, expected) << "amax " << amax;
    // The scale maps amax to fp8_max, up to float32 rounding.
    EXPECT_NEAR(a * e4m3, 448.0, 448.0 * 0x1p-23);
  }
}

//===----------------------------------------------------------------------===//
// te.scaled_matmul and a quantize -> scaled_matmul function
//===----------------------------------------------------------------------===//

TEST_F(InterpreterFp8OpsTest, ScaledMatmulMatchesALoop) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%a: tensor<6x16xf8E4M3FN>, %b: tensor<5x16xf8E5M2>,
             %c: tensor<5x16xf8E4M3FN>, %sa: tensor<1xf32>,
             %sb: tensor<1xf32>, %sc: tensor<1xf32>)
    -> (tensor<6x5xbf16>, tensor<6x5xf32>) {
  %ab = te.scaled_matmul %a, %b, %sa, %sb
      : (tensor<6x16xf8E4M3FN>, tensor<5x16xf8E5M2>, tensor<1xf32>,
         tensor<1xf32>) -> tensor<6x5xbf16>
  %ac = te.scaled_matmul %a, %c, %sa, %sc {fast_accum}
      : (tensor<6x16xf8E4M3FN>, tensor<5x16xf8E4M3FN>, tensor<1xf32>,
         tensor<1xf32>) -> tensor<6x5xf32>
  return %ab, %ac : tensor<6x5xbf16>, tensor<6x5xf32>
}
)mlir");
  for (int trial = 0; trial < 10; ++trial) {
    Tensor a = Tensor::zeros({6, 16}), b = Tensor::zeros({5, 16}), c = b;
    for (double &v : a.data)
      v = randomFp8(Fp8Kind::E4M3);
    for (double &v : b.data)
      v = randomFp8(Fp8Kind::E5M2);
    for (double &v : c.data)
      v = randomFp8(Fp8Kind::E4M3);
    double sa = float(logUniform(-12, 0, false)),
           sb = float(logUniform(-20, -8, false)),
           sc = float(logUniform(-12, 0, false));
    std::vector<Tensor> out = run(f, {a, b, c, slot(sa), slot(sb), slot(sc)});
    ASSERT_EQ(out.size(), 2u);
    for (auto [result, rhs, srhs] :
         {std::tuple{&out[0], &b, sb}, std::tuple{&out[1], &c, sc}})
      for (int m = 0; m < 6; ++m)
        for (int n = 0; n < 5; ++n) {
          double sum = 0.0, magnitude = 0.0;
          for (int k = 0; k < 16; ++k) {
            double term =
                a.data[m * 16 + k] * rhs->data[n * 16 + k] * sa * srhs;
            sum += term;
            magnitude += std::fabs(term);
          }
          EXPECT_NEAR(result->data[m * 5 + n], sum, 1e-14 * magnitude);
        }
  }
}

TEST_F(InterpreterFp8OpsTest, CurrentScalingGemmIsWithinFp8ToleranceAndExact) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<24x16xbf16>, %w: tensor<8x16xbf16>)
    -> (tensor<24x8xbf16>, tensor<24x16xf8E4M3FN>, tensor<8x16xf8E4M3FN>,
        tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) {
  %ax = te.amax %x : tensor<24x16xbf16> -> tensor<1xf32>
  %sx, %ix = te.compute_scale %ax {fp8_type = f8E4M3FN}
      : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  %qx, %ax2 = te.quantize %x, %sx : tensor<24x16xbf16>, tensor<1xf32>
      -> tensor<24x16xf8E4M3FN>, tensor<1xf32>
  %aw = te.amax %w : tensor<8x16xbf16> -> tensor<1xf32>
  %sw, %iw = te.compute_scale %aw {fp8_type = f8E4M3FN}
      : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  %qw, %aw2 = te.quantize %w, %sw : tensor<8x16xbf16>, tensor<1xf32>
      -> tensor<8x16xf8E4M3FN>, tensor<1xf32>
  %y = te.scaled_matmul %qx, %qw, %ix, %iw {fast_accum}
      : (tensor<24x16xf8E4M3FN>, tensor<8x16xf8E4M3FN>, tensor<1xf32>,
         tensor<1xf32>) -> tensor<24x8xbf16>
  return %y, %qx, %qw, %sx, %ix, %sw, %iw
      : tensor<24x8xbf16>, tensor<24x16xf8E4M3FN>, tensor<8x16xf8E4M3FN>,
        tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>
}
)mlir");
  for (int trial = 0; trial < 10; ++trial) {
    // Activations ~ N(0, 1), weights ~ N(0, 0.1) as after initialization.
    Tensor x = randomLike({24, 16}), w = randomLike({8, 16}, 0.1);
    std::vector<Tensor> out = run(f, {x, w});
    ASSERT_EQ(out.size(), 7u);
    const Tensor &y = out[0], &qx = out[1], &qw = out[2];
    double sx = out[3].data[0], ix = out[4].data[0];
    double sw = out[5].data[0], iw = out[6].data[0];
    EXPECT_EQ(sx, floatQuotient(448.0, float(maxAbs(x))));
    EXPECT_EQ(ix, floatQuotient(1.0, sx));
    EXPECT_EQ(sw, floatQuotient(448.0, float(maxAbs(w))));
    for (size_t i = 0; i < x.data.size(); ++i)
      ASSERT_EQ(qx.data[i], roundToFp8(x.data[i] * sx, Fp8Kind::E4M3));
    for (size_t i = 0; i < w.data.size(); ++i)
      ASSERT_EQ(qw.data[i], roundToFp8(w.data[i] * sw, Fp8Kind::E4M3));
    Tensor exact = Tensor::zeros({24, 8}), dequantized = exact;
    for (int m = 0; m < 24; ++m)
      for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 16; ++k) {
          exact.data[m * 8 + n] += x.data[m * 16 + k] * w.data[n * 16 + k];
          dequantized.data[m * 8 + n] +=
              (qx.data[m * 16 + k] * ix) * (qw.data[n * 16 + k] * iw);
        }
    EXPECT_TRUE(allClose(y, exact, 0.125, 0.0675));
    EXPECT_TRUE(allClose(y, dequantized, 0, 0));
  }
}

//===----------------------------------------------------------------------===//
// te.delayed_scaling_update
//===----------------------------------------------------------------------===//

namespace {

/// One DelayedScaling configuration.
struct DelayedCase {
  int64_t historyLen;
  bool mostRecent;
  int64_t margin;
  Fp8Type type;
};

std::string caseName(const DelayedCase &c) {
  return "Len" + std::to_string(c.historyLen) +
         (c.mostRecent ? "MostRecent" : "Max") + "Margin" +
         std::to_string(c.margin) +
         (c.type.kind == Fp8Kind::E4M3 ? "E4M3" : "E5M2");
}

/// Names the case in gtest's messages.
void PrintTo(const DelayedCase &c, std::ostream *os) { *os << caseName(c); }

/// The recipe attribute of `c`.
std::string recipeAttr(const DelayedCase &c) {
  return "#te.delayed_scaling<margin = " + std::to_string(c.margin) +
         ", amax_history_len = " + std::to_string(c.historyLen) +
         ", amax_compute_algo = " + (c.mostRecent ? "most_recent" : "max") +
         ">";
}

/// @f(history, scale, amaxes) -> (history, scale, scale_inv) over `slots`.
std::string delayedModule(const DelayedCase &c, int64_t slots) {
  return substitute(R"mlir(
func.func @f(%h: $H, %s: $V, %a: $V) -> ($H, $V, $V) {
  %h2, %s2, %i2 = te.delayed_scaling_update %h, %s, %a
      {recipe = $RECIPE, fp8_type = $T} : ($H, $V, $V) -> ($H, $V, $V)
  return %h2, %s2, %i2 : $H, $V, $V
}
)mlir",
                    {{"H", tensorType({c.historyLen, slots})},
                     {"V", tensorType({slots})},
                     {"RECIPE", recipeAttr(c)},
                     {"T", c.type.name}});
}

/// DelayedScaling of one meta slot written from shared/FP8.md, with the
/// history as a vector (row 0 first). Meta state is float32, so amaxes are
/// read as float32. The "max" of the window skips NaN entries, as the fmaxf
/// reduction of Transformer Engine's kernel does.
struct SlotModel {
  std::vector<float> history;
  float scale = 1.0f, scaleInv = 1.0f;

  void step(double amaxValue, const DelayedCase &c) {
    float last = float(amaxValue);
    if (last != 0.0f) {
      std::vector<float> window(history.begin() + 1, history.end());
      window.push_back(last);
      float windowMax = 0.0f;
      for (float value : window)
        if (value > windowMax) // false for NaN
          windowMax = value;
      float amax = c.mostRecent ? last : windowMax;
      history.erase(history.begin());
      history.push_back(last);
      history[0] = 0.0f; // With one row, clearing wins.
      float scaledMax = float(std::ldexp(c.type.max, -int(c.margin)));
      if (std::isfinite(amax) && amax > 0.0f) {
        float quotient = scaledMax / amax;
        scale = std::isinf(quotient) ? FLT_MAX : quotient;
      }
    }
    scaleInv = 1.0f / scale;
  }
};

class DelayedScalingFp8Test
    : public InterpreterFp8OpsTest,
      public ::testing::WithParamInterface<DelayedCase> {
protected:
  static constexpr int64_t kSlots = 4;

  /// This step's amax for `slot`: 0 = an activation (always quantized),
  /// 1 = a weight quantized every third step (amax 0 otherwise), 2 = a
  /// gradient with zeros, infinities, NaNs and tiny amaxes, 3 = values with
  /// rare large spikes. Magnitudes drift so window maxima expire.
  double amaxFor(int64_t slot, int64_t step) {
    double drift = 8 * std::sin(step / 97.0 + slot);
    double normal = std::fabs(logUniform(drift - 3, drift + 3));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    double r = u(rng);
    switch (slot) {
    case 1:
      return step % 3 == 0 ? normal : 0.0;
    case 2:
      return r < 0.10   ? 0.0
             : r < 0.13 ? kInf
             : r < 0.16 ? kNaN
             : r < 0.19 ? c().type.max / FLT_MAX / 4 // quotient overflows
             : r < 0.21 ? 1e-50                      // 0 as a float32
             : r < 0.23 ? 1e-40                      // a float32 subnormal
                        : normal;
    case 3:
      return r < 0.01 ? normal * 1e4 : normal;
    default:
      return normal;
    }
  }

  const DelayedCase &c() const { return GetParam(); }
};

} // namespace

TEST_P(DelayedScalingFp8Test, ManyStepsMatchTheHostModel) {
  mlir::func::FuncOp f = parse(delayedModule(c(), kSlots));
  int64_t len = c().historyLen;
  // Row 0 starts with junk: the update never reads it.
  Tensor history = Tensor::zeros({len, kSlots});
  for (int64_t s = 0; s < kSlots; ++s)
    history.data[s] = 1e30;
  Tensor scale({kSlots}, std::vector<double>(kSlots, 1.0));
  std::vector<SlotModel> models(kSlots);
  for (int64_t s = 0; s < kSlots; ++s) {
    models[s].history.assign(len, 0.0f);
    models[s].history[0] = 1e30f;
  }
  int64_t steps = std::max<int64_t>(300, 2 * len + 100);
  for (int64_t step = 0; step < steps; ++step) {
    Tensor amaxes = Tensor::zeros({kSlots});
    for (int64_t s = 0; s < kSlots; ++s) {
      amaxes.data[s] = amaxFor(s, step);
      models[s].step(amaxes.data[s], c());
    }
    std::vector<Tensor> out = run(f, {history, scale, amaxes});
    ASSERT_EQ(out.size(), 3u);
    Tensor expectedHistory = Tensor::zeros({len, kSlots});
    Tensor expectedScale = Tensor::zeros({kSlots}), expectedInv = expectedScale;
    for (int64_t s = 0; s < kSlots; ++s) {
      for (int64_t row = 0; row < len; ++row)
        expectedHistory.data[row * kSlots + s] = models[s].history[row];
      expectedScale.data[s] = models[s].scale;
      expectedInv.data[s] = models[s].scaleInv;
    }
    ASSERT_TRUE(allClose(out[0], expectedHistory, 0, 0)) << "step " << step;
    ASSERT_TRUE(allClose(out[1], expectedScale, 0, 0)) << "step " << step;
    ASSERT_TRUE(allClose(out[2], expectedInv, 0, 0)) << "step " << step;
    history = out[0];
    scale = out[1];
  }
  // Every slot ends with a scale of its own, except the gradient slot under
  // "max" with 1024 steps of history: an inf amax (3% of its steps) is
  // always in its window, which keeps the scale (here the initial 1).
  for (int64_t s = 0; s < kSlots; ++s) {
    bool frozen = s == 2 && !c().mostRecent && len == 1024;
    EXPECT_EQ(scale.data[s] == 1.0, frozen) << "slot " << s;
  }
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Recipes, DelayedScalingFp8Test,
    ::testing::Values(
        DelayedCase{1, false, 0, kE4M3}, DelayedCase{1, true, 0, kE4M3},
        DelayedCase{1, false, 2, kE5M2}, DelayedCase{1, true, 2, kE5M2},
        DelayedCase{4, false, 0, kE4M3}, DelayedCase{4, true, 0, kE5M2},
        DelayedCase{4, false, 2, kE5M2}, DelayedCase{4, true, 2, kE4M3},
        DelayedCase{1024, false, 0, kE4M3}, DelayedCase{1024, true, 0, kE4M3},
        DelayedCase{1024, false, 2, kE5M2}, DelayedCase{1024, true, 2, kE5M2},
        DelayedCase{1024, false, 2, kE4M3}, DelayedCase{1024, false, 0, kE5M2}),
    [](const ::testing::TestParamInfo<DelayedCase> &info) {
      return caseName(info.param);
    });
// clang-format on

TEST_F(InterpreterFp8OpsTest, DelayedScalingUpdateHandWorkedExample) {
  // margin 1 (scaled_max 224), history length 4, five slots:
  //   rows 1..3   scale  amax  -> max: window max, scale | most_recent
  //   1, 2, 3     1      0.5   -> 3, 224/3             | 448
  //   5, 0, 0     2      0     -> nothing changes
  //   0, 0, 0     4      NaN   -> 0 (NaN skipped), kept | NaN, kept
  //   7, 0, 0     8      NaN   -> 7, 32                | NaN, kept
  //   1, 1, 1     8      inf   -> inf, kept            | inf, kept
  // Row 0 holds junk (9), which only the untouched slot keeps.
  Tensor history({4, 5}, {9, 9, 9, 9, 9, //
                          1, 5, 0, 7, 1, //
                          2, 0, 0, 0, 1, //
                          3, 0, 0, 0, 1});
  Tensor scale({5}, {1, 2, 4, 8, 8}), amaxes({5}, {0.5, 0, kNaN, kNaN, kInf});
  Tensor rolled({4, 5}, {0,   9, 0,    0,    0, //
                         2,   5, 0,    0,    1, //
                         3,   0, 0,    0,    1, //
                         0.5, 0, kNaN, kNaN, kInf});
  for (bool mostRecent : {false, true}) {
    DelayedCase c{4, mostRecent, 1, kE4M3};
    mlir::func::FuncOp f = parse(delayedModule(c, 5));
    std::vector<Tensor> out = run(f, {history, scale, amaxes});
    ASSERT_EQ(out.size(), 3u);
    Tensor expected = mostRecent
                          ? Tensor({5}, {448, 2, 4, 8, 8})
                          : Tensor({5}, {double(224.0f / 3.0f), 2, 4, 32, 8});
    Tensor inverse = expected;
    for (double &value : inverse.data)
      value = 1.0f / float(value);
    EXPECT_TRUE(allClose(out[0], rolled, 0, 0)) << caseName(c);
    EXPECT_TRUE(allClose(out[1], expected, 0, 0)) << caseName(c);
    EXPECT_TRUE(allClose(out[2], inverse, 0, 0)) << caseName(c);
  }
}

TEST_F(InterpreterFp8OpsTest, DelayedScalingUpdateTransformerEngineScenarios) {
  // TE's numeric scenarios (history length 1, scale 1): amax 0 -> 1, tiny ->
  // FLT_MAX, normal -> fp8_max / amax, inf -> 1, NaN -> 1; one slot each.
  for (const Fp8Type &type : {kE4M3, kE5M2})
    for (bool mostRecent : {false, true}) {
      DelayedCase c{1, mostRecent, 0, type};
      mlir::func::FuncOp f = parse(delayedModule(c, 5));
      double tiny = float(type.max / FLT_MAX) / 2;
      double normal =
          float(std::uniform_real_distribution<double>(0, 1)(rng) + 1e-5);
      Tensor amaxes({5}, {0.0, tiny, normal, kInf, kNaN});
      std::vector<Tensor> out =
          run(f, {Tensor::zeros({1, 5}),
                  Tensor({5}, std::vector<double>(5, 1.0)), amaxes});
      ASSERT_EQ(out.size(), 3u);
      double quotient = floatQuotient(type.max, normal);
      EXPECT_TRUE(allClose(out[0], Tensor::zeros({1, 5}), 0, 0));
      EXPECT_TRUE(
          allClose(out[1], Tensor({5}, {1, FLT_MAX, quotient, 1, 1}), 0, 0))
          << caseName(c);
      EXPECT_EQ(out[2].data[1], double(1.0f / FLT_MAX));
      EXPECT_EQ(out[2].data[2], floatQuotient(1.0, quotient));
    }
}

TEST_F(InterpreterFp8OpsTest, DelayedScalingTrainingLoop) {
  // One linear layer per step: quantize with last step's scales, GEMM, and
  // the meta update from te.concat'ed, all-reduced amaxes.
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<16x16xbf16>, %w: tensor<8x16xbf16>,
             %h: tensor<8x2xf32>, %s: tensor<2xf32>, %i: tensor<2xf32>)
    -> (tensor<16x8xbf16>, tensor<8x2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %sx = te.slice %s[0] : tensor<2xf32> -> tensor<1xf32>
  %sw = te.slice %s[1] : tensor<2xf32> -> tensor<1xf32>
  %ix = te.slice %i[0] : tensor<2xf32> -> tensor<1xf32>
  %iw = te.slice %i[1] : tensor<2xf32> -> tensor<1xf32>
  %qx, %ax = te.quantize %x, %sx : tensor<16x16xbf16>, tensor<1xf32>
      -> tensor<16x16xf8E4M3FN>, tensor<1xf32>
  %qw, %aw = te.quantize %w, %sw : tensor<8x16xbf16>, tensor<1xf32>
      -> tensor<8x16xf8E4M3FN>, tensor<1xf32>
  %y = te.scaled_matmul %qx, %qw, %ix, %iw {fast_accum}
      : (tensor<16x16xf8E4M3FN>, tensor<8x16xf8E4M3FN>, tensor<1xf32>,
         tensor<1xf32>) -> tensor<16x8xbf16>
  %a = te.concat %ax, %aw : tensor<1xf32>, tensor<1xf32> -> tensor<2xf32>
  %r = te.amax_allreduce %a : tensor<2xf32>
  %h2, %s2, %i2 = te.delayed_scaling_update %h, %s, %r
      {recipe = #te.delayed_scaling<amax_history_len = 8>,
       fp8_type = f8E4M3FN}
      : (tensor<8x2xf32>, tensor<2xf32>, tensor<2xf32>)
        -> (tensor<8x2xf32>, tensor<2xf32>, tensor<2xf32>)
  return %y, %h2, %s2, %i2
      : tensor<16x8xbf16>, tensor<8x2xf32>, tensor<2xf32>, tensor<2xf32>
}
)mlir");
  DelayedCase c{8, false, 0, kE4M3};
  std::vector<SlotModel> models(2);
  for (SlotModel &model : models)
    model.history.assign(8, 0.0f);
  Tensor history = Tensor::zeros({8, 2}), scale({2}, {1, 1}), inv = scale;
  Tensor w = randomLike({8, 16}, 0.05);
  for (int step = 0; step < 30; ++step) {
    Tensor x = randomLike({16, 16}, logUniform(-4, 4, false));
    std::vector<Tensor> out = run(f, {x, w, history, scale, inv});
    ASSERT_EQ(out.size(), 4u);
    Tensor y = Tensor::zeros({16, 8});
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 16; ++k)
          y.data[m * 8 + n] +=
              (roundToFp8(x.data[m * 16 + k] * models[0].scale, Fp8Kind::E4M3) *
               models[0].scaleInv) *
              (roundToFp8(w.data[n * 16 + k] * models[1].scale, Fp8Kind::E4M3) *
               models[1].scaleInv);
    ASSERT_TRUE(allClose(out[0], y, 0, 0)) << "step " << step;
    models[0].step(maxAbs(x), c);
    models[1].step(maxAbs(w), c);
    for (int s = 0; s < 2; ++s) {
      for (int row = 0; row < 8; ++row)
        ASSERT_EQ(out[1].data[row * 2 + s], models[s].history[row]);
      ASSERT_EQ(out[2].data[s], models[s].scale) << "step " << step;
      ASSERT_EQ(out[3].data[s], models[s].scaleInv) << "step " << step;
    }
    history = out[1];
    scale = out[2];
    inv = out[3];
  }
}
