//===- InterpreterBlockScalingTest.cpp - Float8BlockScaling vs host models ===//
//
// te.block_quantize and block-scaled te.scaled_matmul run on seeded random
// data and are compared with a host model written here from
// docs/block-scaling.md, not with the interpreter's kernels nor with
// dialects/BlockScaleLayout.h: each element is assigned to its block by
// division, block amaxes are gathered in a first pass, scales follow
// te.compute_scale's rules in float32 (quotients from rounded doubles, powers
// of two from frexp), FP8 values come from Fp8TestUtils.h's table, and the
// scale_inv layout is spelled out from the document's formulas.
//
//===----------------------------------------------------------------------===//
#include "Fp8TestUtils.h"

#include <algorithm>
#include <cfloat>
#include <string>
#include <vector>

using namespace tejit::testing;
using tejit::interp::Fp8Kind;

namespace {

/// Elements along a block's side (docs/block-scaling.md).
constexpr int64_t kBlockSide = 128;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t roundUpTo4(int64_t n) { return ceilDiv(n, 4) * 4; }

/// Where a matrix [rows, cols] cast with `blockDim`-D blocks keeps its scale
/// inverses: the scale_inv shape and the flat index of each block's entry.
struct HostLayout {
  int64_t rows, cols, blockDim;

  /// Blocks per column and per row of the matrix.
  int64_t blockRows() const {
    return blockDim == 1 ? rows : ceilDiv(rows, kBlockSide);
  }
  int64_t blockCols() const { return ceilDiv(cols, kBlockSide); }

  /// 1-D: [ceil(C/128), pad4(R)]; 2-D: [ceil(R/128), pad4(ceil(C/128))].
  std::vector<int64_t> scaleShape() const {
    if (blockDim == 1)
      return {blockCols(), roundUpTo4(rows)};
    return {blockRows(), roundUpTo4(blockCols())};
  }

  /// The block (i, j) holding element (row, col): i counts blocks down,
  /// j across.
  std::pair<int64_t, int64_t> blockOf(int64_t row, int64_t col) const {
    return {blockDim == 1 ? row : row / kBlockSide, col / kBlockSide};
  }

  /// 1-D: element (j, r) is row r's block j; 2-D: element (i, j) is tile
  /// (i, j).
  int64_t scaleIndex(int64_t i, int64_t j) const {
    if (blockDim == 1)
      return j * roundUpTo4(rows) + i;
    return i * roundUpTo4(blockCols()) + j;
  }
};

/// Current scaling's scale for `amax` (te.compute_scale's rules): amax read
/// as a float32; 1 when it is 0, inf or NaN; fp8_max / amax in float32,
/// FLT_MAX when that overflows; then rounded down to a power of two with
/// `power2`. Returns {scale, 1 / scale in float32}.
std::pair<double, double> hostScale(double amax, double fp8Max, bool power2) {
  double amax32 = float(amax);
  double scale = 1.0;
  if (std::isfinite(amax32) && amax32 > 0.0) {
    scale = floatQuotient(fp8Max, amax32);
    if (std::isinf(scale))
      scale = FLT_MAX;
    if (power2)
      scale = powerOfTwoBelow(scale);
  }
  return {scale, floatQuotient(1.0, scale)};
}

/// One te.block_quantize configuration.
struct BlockCase {
  int64_t rows, cols, blockDim;
  bool transpose, power2;
  Fp8Type type;

  /// The cast matrix's rows and columns (the input's, swapped with
  /// `transpose`).
  int64_t castRows() const { return transpose ? cols : rows; }
  int64_t castCols() const { return transpose ? rows : cols; }
  HostLayout layout() const { return {castRows(), castCols(), blockDim}; }
};

std::string caseName(const BlockCase &c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + "Dim" +
         std::to_string(c.blockDim) + (c.transpose ? "Transposed" : "") +
         (c.power2 ? "Pow2" : "Fp32Scales") +
         (c.type.kind == Fp8Kind::E4M3 ? "E4M3" : "E5M2");
}

/// Names the case in gtest's messages.
void PrintTo(const BlockCase &c, std::ostream *os) { *os << caseName(c); }

/// @f(x) -> (q, scale_inv): one te.block_quantize of `c`.
std::string blockQuantizeModule(const BlockCase &c) {
  std::string flags = std::string(c.transpose ? ", transpose" : "") +
                      (c.power2 ? ", power_2_scale" : "");
  return substitute(
      R"mlir(
func.func @f(%x: $X) -> ($Q, $S) {
  %q, %s = te.block_quantize %x {block_dim = $D : i64$FLAGS} : $X -> $Q, $S
  return %q, %s : $Q, $S
}
)mlir",
      {{"X", tensorType({c.rows, c.cols}, "bf16")},
       {"Q", tensorType({c.castRows(), c.castCols()}, c.type.name)},
       {"S", tensorType(c.layout().scaleShape())},
       {"D", std::to_string(c.blockDim)},
       {"FLAGS", flags}});
}

/// te.block_quantize of `x` under `c`, from the op's definition: the
/// output (the cast matrix's shape) and scale_inv (padding 0).
std::pair<Tensor, Tensor> hostBlockQuantize(const Tensor &x,
                                            const BlockCase &c) {
  static const std::vector<double> tables[2] = {fp8Values(Fp8Kind::E4M3),
                                                fp8Values(Fp8Kind::E5M2)};
  const std::vector<double> &table = tables[c.type.kind == Fp8Kind::E5M2];
  HostLayout layout = c.layout();
  int64_t rows = c.castRows(), cols = c.castCols();
  auto element = [&](int64_t r, int64_t col) {
    return c.transpose ? x.data[col * x.shape[1] + r]
                       : x.data[r * x.shape[1] + col];
  };
  // Pass 1: every block's amax (NaN sticks).
  std::vector<double> amax(layout.blockRows() * layout.blockCols(), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col) {
      auto [i, j] = layout.blockOf(r, col);
      double &blockMax = amax[i * layout.blockCols() + j];
      double magnitude = std::fabs(element(r, col));
      if (std::isnan(magnitude) || std::isnan(blockMax))
        blockMax = kNaN;
      else
        blockMax = std::max(blockMax, magnitude);
    }
  // Pass 2: scales, then each element cast with its block's scale: the
  // product of two float32 values is exact in double, rounded once to
  // float32, then to FP8.
  Tensor scaleInv = Tensor::zeros(layout.scaleShape());
  std::vector<double> scales(amax.size());
  for (int64_t i = 0; i < layout.blockRows(); ++i)
    for (int64_t j = 0; j < layout.blockCols(); ++j) {
      auto [scale, inverse] =
          hostScale(amax[i * layout.blockCols() + j], c.type.max, c.power2);
      scales[i * layout.blockCols() + j] = scale;
      scaleInv.data[layout.scaleIndex(i, j)] = inverse;
    }
  Tensor output = Tensor::zeros({rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col) {
      auto [i, j] = layout.blockOf(r, col);
      double product = float(double(float(element(r, col))) *
                             scales[i * layout.blockCols() + j]);
      output.data[r * cols + col] = nearestFp8(table, product);
    }
  return {output, scaleInv};
}

class InterpreterBlockScalingTest : public InterpreterFp8OpsTest {
protected:
  /// Random values in the cast matrix's coordinates ([castRows, castCols],
  /// returned as the op's input, transposed back when `c.transpose`). The
  /// magnitudes follow a smooth random field (2^(3 sin + 3 sin) over rows
  /// and columns, periods of 200 to 500 elements) times 2^U(-3, 0), so that
  /// neighbouring blocks get different scales, power-of-two ones too, and
  /// few elements fall below a block's FP8 range.
  /// With `specials`: an all-zero block at (0, 0), one huge value (-1e30) at
  /// the last element, a value beyond float32 (amax inf) at (last row, 0),
  /// a NaN at (0, last column) and a block of float32 subnormals (FLT_MAX
  /// scale) around the middle.
  Tensor randomInput(const BlockCase &c, bool specials) {
    int64_t rows = c.castRows(), cols = c.castCols();
    std::uniform_real_distribution<double> period(200, 500), phase(0, 6.3);
    double rowPeriod = period(rng), rowPhase = phase(rng);
    double colPeriod = period(rng), colPhase = phase(rng);
    Tensor cast = Tensor::zeros({rows, cols});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col) {
        double exponent = 3 * std::sin(6.3 * r / rowPeriod + rowPhase) +
                          3 * std::sin(6.3 * col / colPeriod + colPhase);
        cast.data[r * cols + col] = logUniform(-3, 0) * std::exp2(exponent);
      }
    if (specials) {
      HostLayout layout = c.layout();
      // Applies `set` to every element of the block holding (row, col).
      auto forBlock = [&](int64_t row, int64_t col, auto set) {
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t k = 0; k < cols; ++k)
            if (layout.blockOf(r, k) == layout.blockOf(row, col))
              set(cast.data[r * cols + k]);
      };
      forBlock(rows / 2, cols / 2,
               [&](double &value) { value = logUniform(-148, -140); });
      forBlock(0, 0, [](double &value) { value = 0.0; });
      cast.data[rows * cols - 1] = -1e30;
      cast.data[(rows - 1) * cols] = 1e39;
      cast.data[cols - 1] = kNaN;
    }
    return c.transpose ? transposed(cast) : cast;
  }

  /// The transpose of a matrix, written here.
  static Tensor transposed(const Tensor &x) {
    int64_t rows = x.shape[0], cols = x.shape[1];
    Tensor result = Tensor::zeros({cols, rows});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col)
        result.data[col * rows + r] = x.data[r * cols + col];
    return result;
  }
};

class BlockQuantizeTest : public InterpreterBlockScalingTest,
                          public ::testing::WithParamInterface<BlockCase> {};

} // namespace

//===----------------------------------------------------------------------===//
// te.block_quantize
//===----------------------------------------------------------------------===//

TEST_P(BlockQuantizeTest, MatchesTheHostModel) {
  const BlockCase &c = GetParam();
  mlir::func::FuncOp f = parse(blockQuantizeModule(c));
  ASSERT_TRUE(f);
  for (int trial = 0; trial < 4; ++trial) {
    bool specials = trial % 2 == 1;
    Tensor x = randomInput(c, specials);
    std::vector<Tensor> out = run(f, {x});
    ASSERT_EQ(out.size(), 2u);
    auto [output, scaleInv] = hostBlockQuantize(x, c);
    EXPECT_TRUE(allClose(out[1], scaleInv, 0, 0)) << "trial " << trial;
    EXPECT_TRUE(allClose(out[0], output, 0, 0)) << "trial " << trial;
    if (specials)
      continue;
    // The data is not degenerate: blocks have scales of their own, and
    // almost no element is flushed to 0.
    std::vector<double> distinct;
    for (double value : scaleInv.data)
      if (value != 0.0 &&
          std::find(distinct.begin(), distinct.end(), value) == distinct.end())
        distinct.push_back(value);
    HostLayout layout = c.layout();
    int64_t blocks = layout.blockRows() * layout.blockCols();
    EXPECT_GE(int64_t(distinct.size()), std::min<int64_t>(3, blocks / 2));
    int64_t zeros = std::count(output.data.begin(), output.data.end(), 0.0);
    EXPECT_LT(zeros, int64_t(output.data.size()) / 20);
  }
}

static std::vector<BlockCase> blockCases() {
  std::vector<BlockCase> cases;
  // Partial edge blocks in both dims, exact blocks, and a thin matrix whose
  // transposed cast has one block column.
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{200, 300}, {256, 384}, {9, 131}})
    for (int64_t blockDim : {1, 2})
      for (bool transpose : {false, true})
        for (bool power2 : {true, false})
          for (const Fp8Type &type : {kE4M3, kE5M2})
            cases.push_back({rows, cols, blockDim, transpose, power2, type});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Casts, BlockQuantizeTest,
                         ::testing::ValuesIn(blockCases()),
                         [](const ::testing::TestParamInfo<BlockCase> &info) {
                           return caseName(info.param);
                         });

TEST_F(InterpreterBlockScalingTest, BlockQuantizeHandWorkedExample) {
  // A [2, 130] matrix, E4M3. 1-D blocks: row 0 = [0, 128) amax 2, [128, 130)
  // amax 0.5; row 1 = [0, 128) all zero, [128, 130) amax 3. Scales 448 / amax
  // rounded down to powers of two: 224 -> 128, 896 -> 512, 1 for the zero
  // block, 149.33 -> 128; scale_inv [2, 4] holds (j, r) at j * 4 + r,
  // padding 0. 2-D (no power_2_scale): one tile per 128 columns, amaxes 2
  // and 3, scales 224 and 448 / 3 in float32. Transposed: 130 rows of two
  // elements, one block each.
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<2x130xf32>)
    -> (tensor<2x130xf8E4M3FN>, tensor<2x4xf32>, tensor<2x130xf8E4M3FN>,
        tensor<1x4xf32>, tensor<130x2xf8E4M3FN>, tensor<1x132xf32>) {
  %q1, %s1 = te.block_quantize %x {block_dim = 1 : i64, power_2_scale}
      : tensor<2x130xf32> -> tensor<2x130xf8E4M3FN>, tensor<2x4xf32>
  %q2, %s2 = te.block_quantize %x {block_dim = 2 : i64}
      : tensor<2x130xf32> -> tensor<2x130xf8E4M3FN>, tensor<1x4xf32>
  %qt, %st = te.block_quantize %x {block_dim = 1 : i64, transpose,
                                   power_2_scale}
      : tensor<2x130xf32> -> tensor<130x2xf8E4M3FN>, tensor<1x132xf32>
  return %q1, %s1, %q2, %s2, %qt, %st
      : tensor<2x130xf8E4M3FN>, tensor<2x4xf32>, tensor<2x130xf8E4M3FN>,
        tensor<1x4xf32>, tensor<130x2xf8E4M3FN>, tensor<1x132xf32>
}
)mlir");
  ASSERT_TRUE(f);
  Tensor x = Tensor::zeros({2, 130});
  for (int64_t col = 0; col < 128; ++col)
    x.data[col] = col == 5 ? -2.0 : 0.001 * col; // |0.127| < 2
  x.data[128] = 0.5;
  x.data[129] = -0.25;
  x.data[130 + 128] = 3.0;
  x.data[130 + 129] = 1.0 / 3.0;
  std::vector<Tensor> out = run(f, {x});
  ASSERT_EQ(out.size(), 6u);
  EXPECT_TRUE(allClose(out[1],
                       Tensor({2, 4}, {1.0 / 128, 1.0, 0, 0, //
                                       1.0 / 512, 1.0 / 128, 0, 0}),
                       0, 0));
  EXPECT_EQ(out[0].data[5], -256.0);        // -2 * 128
  EXPECT_EQ(out[0].data[128], 256.0);       // 0.5 * 512
  EXPECT_EQ(out[0].data[129], -128.0);      // -0.25 * 512
  EXPECT_EQ(out[0].data[130 + 128], 384.0); // 3 * 128
  EXPECT_EQ(out[0].data[130 + 129], 44.0);  // 42.67 -> 44 (E4M3 step 4)
  EXPECT_EQ(out[0].data[130 + 7], 0.0);     // the zero block
  EXPECT_EQ(out[0].data[100], 13.0);        // 0.1 * 128 = 12.8 -> 13
  double scale0 = float(448.0f / 2.0f), scale1 = float(448.0f / 3.0f);
  EXPECT_TRUE(allClose(out[3],
                       Tensor({1, 4}, {double(1.0f / float(scale0)),
                                       double(1.0f / float(scale1)), 0, 0}),
                       0, 0));
  EXPECT_EQ(out[2].data[5], -448.0); // the amax maps to fp8_max
  EXPECT_EQ(out[2].data[130 + 128], 448.0);
  // Transposed: scale_inv [1, 132], row r's at r.
  EXPECT_EQ(out[5].data[0], 1.0);         // (0, 0): the zero block
  EXPECT_EQ(out[5].data[5], 1.0 / 128);   // (-2, 0): 224 -> 128
  EXPECT_EQ(out[5].data[7], 1.0 / 32768); // (0.007, 0): 64000 -> 2^15
  EXPECT_EQ(out[5].data[128], 1.0 / 128); // (0.5, 3): 149.33 -> 128
  EXPECT_EQ(out[5].data[131], 0.0);       // padding
  // 0.007 * 32768 = 229.4 -> 224 (E4M3 step 16 in [128, 256)).
  EXPECT_EQ(out[4].data[7 * 2], 224.0);
}

TEST_F(InterpreterBlockScalingTest, TileCastCommutesWithTranspose) {
  // A 128 x 128 tile is the same set of elements in x and x^T, so the 2-D
  // cast of x^T is the transpose of x's, tile scales transposed too (unlike
  // 1-D blocks, which is why the backward recasts 1-D operands).
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<200x300xbf16>)
    -> (tensor<200x300xf8E5M2>, tensor<2x4xf32>, tensor<300x200xf8E5M2>,
        tensor<3x4xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 2 : i64}
      : tensor<200x300xbf16> -> tensor<200x300xf8E5M2>, tensor<2x4xf32>
  %qt, %st = te.block_quantize %x {block_dim = 2 : i64, transpose}
      : tensor<200x300xbf16> -> tensor<300x200xf8E5M2>, tensor<3x4xf32>
  return %q, %s, %qt, %st : tensor<200x300xf8E5M2>, tensor<2x4xf32>,
      tensor<300x200xf8E5M2>, tensor<3x4xf32>
}
)mlir");
  ASSERT_TRUE(f);
  BlockCase c{200, 300, 2, false, false, kE5M2};
  for (bool specials : {false, true}) {
    std::vector<Tensor> out = run(f, {randomInput(c, specials)});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_TRUE(allClose(out[2], transposed(out[0]), 0, 0));
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(out[3].data[j * 4 + i], out[1].data[i * 4 + j]);
  }
}

//===----------------------------------------------------------------------===//
// te.scaled_matmul with block scales
//===----------------------------------------------------------------------===//

namespace {
/// A block-scaled te.scaled_matmul: a [M, K] of `aType` with `aDim`-D
/// blocks, b [N, K] of `bType` with `bDim`-D blocks.
struct MatmulCase {
  const char *name;
  int64_t m, n, k, aDim, bDim;
  Fp8Type aType, bType;
};
} // namespace

TEST_F(InterpreterBlockScalingTest, ScaledMatmulReadsEachElementsBlockScale) {
  const MatmulCase cases[] = {
      {"Fprop1Dx2D", 200, 136, 300, 1, 2, kE4M3, kE4M3},
      {"Dgrad2Dx1D", 136, 200, 300, 2, 1, kE4M3, kE4M3},
      {"Wgrad1Dx1D", 200, 136, 300, 1, 1, kE5M2, kE4M3},
      {"ExactBlocks1Dx2D", 256, 128, 384, 1, 2, kE4M3, kE5M2},
  };
  for (const MatmulCase &c : cases) {
    HostLayout aLayout{c.m, c.k, c.aDim}, bLayout{c.n, c.k, c.bDim};
    std::string aScale = tensorType(aLayout.scaleShape()),
                bScale = tensorType(bLayout.scaleShape()),
                aType = tensorType({c.m, c.k}, c.aType.name),
                bType = tensorType({c.n, c.k}, c.bType.name),
                yType = tensorType({c.m, c.n});
    mlir::func::FuncOp f = parse(substitute(R"mlir(
func.func @f(%a: $A, %b: $B, %sa: $SA, %sb: $SB) -> $Y {
  %y = te.scaled_matmul %a, %b, %sa, %sb : ($A, $B, $SA, $SB) -> $Y
  return %y : $Y
}
)mlir",
                                            {{"A", aType},
                                             {"B", bType},
                                             {"SA", aScale},
                                             {"SB", bScale},
                                             {"Y", yType}}));
    ASSERT_TRUE(f) << c.name;
    for (int trial = 0; trial < 3; ++trial) {
      Tensor a = Tensor::zeros({c.m, c.k}), b = Tensor::zeros({c.n, c.k});
      for (double &v : a.data)
        v = randomFp8(c.aType.kind);
      for (double &v : b.data)
        v = randomFp8(c.bType.kind);
      // Block scales: float32 values of 2^U(-12, 4); padding NaN, which
      // must never be read.
      auto scales = [&](const HostLayout &layout) {
        Tensor s = Tensor::zeros(layout.scaleShape());
        std::fill(s.data.begin(), s.data.end(), kNaN);
        for (int64_t i = 0; i < layout.blockRows(); ++i)
          for (int64_t j = 0; j < layout.blockCols(); ++j)
            s.data[layout.scaleIndex(i, j)] =
                float(logUniform(-12, 4, /*signed_=*/false));
        return s;
      };
      Tensor sa = scales(aLayout), sb = scales(bLayout);
      std::vector<Tensor> out = run(f, {a, b, sa, sb});
      ASSERT_EQ(out.size(), 1u) << c.name;
      for (int64_t m = 0; m < c.m; ++m)
        for (int64_t n = 0; n < c.n; ++n) {
          double sum = 0.0, magnitude = 0.0;
          for (int64_t k = 0; k < c.k; ++k) {
            auto [ai, aj] = aLayout.blockOf(m, k);
            auto [bi, bj] = bLayout.blockOf(n, k);
            double term =
                a.data[m * c.k + k] * sa.data[aLayout.scaleIndex(ai, aj)] *
                b.data[n * c.k + k] * sb.data[bLayout.scaleIndex(bi, bj)];
            sum += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(out[0].data[m * c.n + n], sum, 1e-14 * magnitude)
              << c.name << " [" << m << ", " << n << "]";
        }
    }
  }
}

TEST_F(InterpreterBlockScalingTest, BlockScaledGemmIsExactOnItsCasts) {
  // fprop of Float8BlockScaling's defaults: x 1-D, W 2-D, both cast by
  // te.block_quantize. The GEMM is the exact product of the dequantized
  // casts, within FP8 error of the high-precision product; with rows and
  // columns of very different magnitudes, well within it.
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<200x300xbf16>, %w: tensor<136x300xbf16>)
    -> (tensor<200x136xf32>, tensor<200x300xf8E4M3FN>, tensor<3x200xf32>,
        tensor<136x300xf8E4M3FN>, tensor<2x4xf32>) {
  %qx, %sx = te.block_quantize %x {block_dim = 1 : i64, power_2_scale}
      : tensor<200x300xbf16> -> tensor<200x300xf8E4M3FN>, tensor<3x200xf32>
  %qw, %sw = te.block_quantize %w {block_dim = 2 : i64, power_2_scale}
      : tensor<136x300xbf16> -> tensor<136x300xf8E4M3FN>, tensor<2x4xf32>
  %y = te.scaled_matmul %qx, %qw, %sx, %sw
      : (tensor<200x300xf8E4M3FN>, tensor<136x300xf8E4M3FN>, tensor<3x200xf32>,
         tensor<2x4xf32>) -> tensor<200x136xf32>
  return %y, %qx, %sx, %qw, %sw
      : tensor<200x136xf32>, tensor<200x300xf8E4M3FN>, tensor<3x200xf32>,
        tensor<136x300xf8E4M3FN>, tensor<2x4xf32>
}
)mlir");
  ASSERT_TRUE(f);
  BlockCase xCase{200, 300, 1, false, true, kE4M3},
      wCase{136, 300, 2, false, true, kE4M3};
  for (int trial = 0; trial < 3; ++trial) {
    Tensor x = randomInput(xCase, false), w = randomLike({136, 300}, 0.05);
    std::vector<Tensor> out = run(f, {x, w});
    ASSERT_EQ(out.size(), 5u);
    auto [qx, sx] = hostBlockQuantize(x, xCase);
    auto [qw, sw] = hostBlockQuantize(w, wCase);
    EXPECT_TRUE(allClose(out[1], qx, 0, 0) && allClose(out[2], sx, 0, 0));
    EXPECT_TRUE(allClose(out[3], qw, 0, 0) && allClose(out[4], sw, 0, 0));
    HostLayout xLayout = xCase.layout(), wLayout = wCase.layout();
    double worst = 0.0;
    for (int64_t m = 0; m < 200; ++m)
      for (int64_t n = 0; n < 136; ++n) {
        double dequantized = 0.0, exact = 0.0, magnitude = 0.0;
        for (int64_t k = 0; k < 300; ++k) {
          auto [xi, xj] = xLayout.blockOf(m, k);
          auto [wi, wj] = wLayout.blockOf(n, k);
          dequantized +=
              qx.data[m * 300 + k] * sx.data[xLayout.scaleIndex(xi, xj)] *
              qw.data[n * 300 + k] * sw.data[wLayout.scaleIndex(wi, wj)];
          exact += x.data[m * 300 + k] * w.data[n * 300 + k];
          magnitude += std::fabs(x.data[m * 300 + k] * w.data[n * 300 + k]);
        }
        ASSERT_NEAR(out[0].data[m * 136 + n], dequantized, 1e-14 * magnitude);
        worst = std::max(worst, std::fabs(out[0].data[m * 136 + n] - exact) /
                                    magnitude);
      }
    // E4M3 rounds each operand by at most 2^-4 relative (subnormals of a
    // block's small elements aside): the error of a sum stays below ~2^-3
    // of its magnitude.
    EXPECT_LT(worst, 0.125);
    EXPECT_GT(worst, 0.0);
  }
}
