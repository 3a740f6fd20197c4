//===- InterpreterGroupedTest.cpp - GroupedLinear's ops vs references -----===//
//
// te.grouped_linear and the grouped ops it lowers to (docs/grouped-linear.md)
// on seeded random data, against references that do not go through the
// grouped kernels: per-segment float64 loops written here, and the
// ungrouped ops (te.matmul, te.quantize, te.amax, te.compute_scale) run by
// the interpreter on each segment or slice. Splits include empty segments
// and padding rows past their sum; padding rows hold large values, so that
// a padding row read by a sum or an amax shows. The run-time checks of
// m_splits are exercised last.
//
//===----------------------------------------------------------------------===//
#include "Fp8TestUtils.h"

#include "gmock/gmock.h"

#include <numeric>
#include <set>
#include <string>
#include <vector>

using namespace tejit::testing;
using ::testing::HasSubstr;

namespace {

/// An m_splits operand: an i32 [G] tensor.
Tensor splitsTensor(const std::vector<int64_t> &splits) {
  return Tensor({int64_t(splits.size())},
                std::vector<double>(splits.begin(), splits.end()));
}

/// o_0 = 0, o_1, ..., o_G.
std::vector<int64_t> offsetsOf(const std::vector<int64_t> &splits) {
  std::vector<int64_t> offsets = {0};
  for (int64_t split : splits)
    offsets.push_back(offsets.back() + split);
  return offsets;
}

/// Rows [begin, end) of a matrix, copied here.
Tensor rowsOf(const Tensor &x, int64_t begin, int64_t end) {
  int64_t cols = x.shape[1];
  Tensor rows = Tensor::zeros({end - begin, cols});
  for (int64_t r = begin; r < end; ++r)
    for (int64_t c = 0; c < cols; ++c)
      rows.data[(r - begin) * cols + c] = x.data[r * cols + c];
  return rows;
}

/// Slice g of a stacked tensor [G, R, C], as a matrix [R, C].
Tensor sliceOf(const Tensor &x, int64_t g) {
  int64_t rows = x.shape[1], cols = x.shape[2];
  Tensor slice = Tensor::zeros({rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i)
    slice.data[i] = x.data[g * rows * cols + i];
  return slice;
}

/// The transpose of a matrix, written here.
Tensor transposed(const Tensor &x) {
  int64_t rows = x.shape[0], cols = x.shape[1];
  Tensor result = Tensor::zeros({cols, rows});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      result.data[c * rows + r] = x.data[r * cols + c];
  return result;
}

/// Whether every element of rows [begin, end) of a matrix is exactly 0.
::testing::AssertionResult rowsAreZero(const Tensor &x, int64_t begin,
                                       int64_t end) {
  int64_t cols = x.shape[1];
  for (int64_t i = begin * cols; i < end * cols; ++i)
    if (x.data[i] != 0.0)
      return ::testing::AssertionFailure()
             << "row " << i / cols << " holds " << x.data[i];
  return ::testing::AssertionSuccess();
}

/// The elements of `x` as a matrix [n, 1]: rowsAreZero() of it checks a
/// range of flat indices.
Tensor asColumn(Tensor x) {
  x.shape = {x.numElements(), 1};
  return x;
}

/// One set of splits over T rows (padding rows past their sum).
struct SplitCase {
  const char *name;
  int64_t tokens;
  std::vector<int64_t> splits;

  int64_t groups() const { return int64_t(splits.size()); }
  int64_t used() const {
    return std::accumulate(splits.begin(), splits.end(), int64_t(0));
  }
};

/// High-precision splits: an empty first, middle and last segment, padding
/// rows, no padding, and one group.
const SplitCase kSplitCases[] = {
    {"EmptyMiddlePadding", 20, {5, 0, 7, 3}},
    {"EmptyEnds", 18, {0, 11, 7, 0}},
    {"OneGroupPadding", 9, {6}},
    {"AllPadding", 6, {0, 0}},
};

/// FP8 splits: multiples of 16, an empty segment, padding rows.
const SplitCase kFp8SplitCases[] = {
    {"Fp8EmptyPadding", 80, {16, 0, 32, 16}},
    {"Fp8Full", 64, {32, 16, 0, 16}},
    {"Fp8OneGroup", 48, {32}},
};

/// Float8BlockScaling splits: segments longer than a block of 128 tokens
/// (with a short last block), an empty one, padding; segments of whole
/// blocks; small segments; nothing but padding.
const SplitCase kBlockSplitCases[] = {
    {"LongSegmentsPadding", 400, {144, 0, 160, 32}},
    {"WholeBlocks", 272, {16, 256}},
    {"Fp8EmptyPadding", 80, {16, 0, 32, 16}},
    {"AllPadding", 32, {0, 0}},
};

/// Elements along a block's side (docs/block-scaling.md).
constexpr int64_t kBlockSide = 128;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t roundUpTo4(int64_t n) { return ceilDiv(n, 4) * 4; }

/// te.block_quantize's scale_inv shape of a cast matrix [rows, cols]
/// (docs/block-scaling.md): 1-D [ceil(cols/128), pad4(rows)], 2-D
/// [ceil(rows/128), pad4(ceil(cols/128))].
std::vector<int64_t> blockScaleShape(int64_t rows, int64_t cols,
                                     int64_t blockDim) {
  if (blockDim == 1)
    return {ceilDiv(cols, kBlockSide), roundUpTo4(rows)};
  return {ceilDiv(rows, kBlockSide), roundUpTo4(ceilDiv(cols, kBlockSide))};
}

/// c_0 = 0, c_1, ..., c_G: the 128-token blocks of the segments before each
/// (the transposed segments layout, docs/grouped-linear.md).
std::vector<int64_t> blocksBefore(const std::vector<int64_t> &splits) {
  std::vector<int64_t> blocks = {0};
  for (int64_t split : splits)
    blocks.push_back(blocks.back() + ceilDiv(split, kBlockSide));
  return blocks;
}

/// A float32 tensor of `shape` filled with NaN: scale inverses whose
/// elements no group owns, so that reading one shows in a GEMM's output.
Tensor nanTensor(const std::vector<int64_t> &shape) {
  Tensor x = Tensor::zeros(shape);
  std::fill(x.data.begin(), x.data.end(), kNaN);
  return x;
}

class InterpreterGroupedTest : public InterpreterFp8OpsTest {
protected:
  /// A random matrix whose rows at and past `used` hold +-1000: padding that
  /// would show in any sum or amax reading it.
  Tensor paddedRandom(int64_t rows, int64_t cols, int64_t used) {
    Tensor x = randomLike({rows, cols});
    for (int64_t i = used * cols; i < rows * cols; ++i)
      x.data[i] = i % 2 ? 1000.0 : -1000.0;
    return x;
  }

  /// te.matmul of a and b run by the interpreter (no zero-size operands).
  Tensor runMatmul(const Tensor &a, const Tensor &b, bool transposeA,
                   bool transposeB) {
    int64_t m = a.shape[transposeA], n = b.shape[!transposeB];
    std::string flags = transposeA && transposeB ? "{transpose_a, transpose_b}"
                        : transposeA             ? "{transpose_a}"
                        : transposeB             ? "{transpose_b}"
                                                 : "";
    mlir::func::FuncOp f = parse(substitute(R"mlir(
func.func @f(%a: $A, %b: $B) -> $Y {
  %y = te.matmul %a, %b $FLAGS : $A, $B -> $Y
  return %y : $Y
}
)mlir",
                                            {{"A", tensorType(a.shape)},
                                             {"B", tensorType(b.shape)},
                                             {"Y", tensorType({m, n})},
                                             {"FLAGS", flags}}));
    std::vector<Tensor> out = f ? run(f, {a, b}) : std::vector<Tensor>();
    return out.empty() ? Tensor() : out[0];
  }

  /// te.quantize of a matrix with `scale` run by the interpreter: the cast
  /// and its amax [1].
  std::pair<Tensor, Tensor> runQuantize(const Tensor &x, double scale,
                                        const Fp8Type &type) {
    mlir::func::FuncOp f = parse(substitute(
        R"mlir(
func.func @f(%x: $X, %s: tensor<1xf32>) -> ($Q, tensor<1xf32>) {
  %q, %amax = te.quantize %x, %s : $X, tensor<1xf32> -> $Q, tensor<1xf32>
  return %q, %amax : $Q, tensor<1xf32>
}
)mlir",
        {{"X", tensorType(x.shape)}, {"Q", tensorType(x.shape, type.name)}}));
    std::vector<Tensor> out =
        f ? run(f, {x, slot(scale)}) : std::vector<Tensor>();
    if (out.size() != 2)
      return {};
    return {out[0], out[1]};
  }

  /// te.compute_scale of one amax slot run by the interpreter: [scale,
  /// scale_inv].
  std::pair<double, double> runComputeScale(double amax, const Fp8Type &type,
                                            bool power2) {
    mlir::func::FuncOp f = parse(
        substitute(R"mlir(
func.func @f(%a: tensor<1xf32>) -> (tensor<1xf32>, tensor<1xf32>) {
  %s, %i = te.compute_scale %a {fp8_type = $T$P}
      : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  return %s, %i : tensor<1xf32>, tensor<1xf32>
}
)mlir",
                   {{"T", type.name}, {"P", power2 ? ", power_2_scale" : ""}}));
    std::vector<Tensor> out = f ? run(f, {slot(amax)}) : std::vector<Tensor>();
    if (out.size() != 2)
      return {kNaN, kNaN};
    return {out[0].data[0], out[1].data[0]};
  }

  /// A float32 scale per group, 2^U(-3, 7): some casts saturate, some
  /// elements become subnormal.
  Tensor randomScales(int64_t groups) {
    Tensor scales = Tensor::zeros({groups});
    for (double &scale : scales.data)
      scale = float(logUniform(-3, 7, /*signed_=*/false));
    return scales;
  }

  /// te.block_quantize of the matrix `x` run by the interpreter: the cast
  /// and its scale_inv.
  std::pair<Tensor, Tensor> runBlockQuantize(const Tensor &x, int64_t blockDim,
                                             bool transpose, bool power2,
                                             const Fp8Type &type) {
    int64_t rows = x.shape[transpose], cols = x.shape[!transpose];
    std::string flags = std::string(transpose ? ", transpose" : "") +
                        (power2 ? ", power_2_scale" : "");
    mlir::func::FuncOp f = parse(substitute(
        R"mlir(
func.func @f(%x: $X) -> ($Q, $S) {
  %q, %s = te.block_quantize %x {block_dim = $D : i64$FLAGS} : $X -> $Q, $S
  return %q, %s : $Q, $S
}
)mlir",
        {{"X", tensorType(x.shape, "bf16")},
         {"Q", tensorType({rows, cols}, type.name)},
         {"S", tensorType(blockScaleShape(rows, cols, blockDim))},
         {"D", std::to_string(blockDim)},
         {"FLAGS", flags}}));
    std::vector<Tensor> out = f ? run(f, {x}) : std::vector<Tensor>();
    if (out.size() != 2)
      return {};
    return {out[0], out[1]};
  }

  /// Random values whose magnitudes vary from row to row (2^U(-8, 8)) and
  /// from one band of 32 columns to the next (2^U(-4, 4)), so that blocks
  /// along either dim get scales of their own. Rows from `used` on are
  /// padding (+-1000, paddedRandom()).
  Tensor blockRandom(int64_t rows, int64_t cols, int64_t used) {
    Tensor x = paddedRandom(rows, cols, used);
    std::uniform_real_distribution<double> rowExp(-8, 8), bandExp(-4, 4);
    std::vector<double> bands(ceilDiv(cols, 32));
    for (double &band : bands)
      band = bandExp(rng);
    for (int64_t r = 0; r < used; ++r) {
      double rowScale = std::exp2(rowExp(rng));
      for (int64_t c = 0; c < cols; ++c)
        x.data[r * cols + c] *= rowScale * std::exp2(bands[c / 32]);
    }
    return x;
  }

  /// A random FP8 tensor of `shape`.
  Tensor fp8Random(const std::vector<int64_t> &shape,
                   tejit::interp::Fp8Kind kind) {
    Tensor x = Tensor::zeros(shape);
    for (double &value : x.data)
      value = randomFp8(kind);
    return x;
  }

  /// A random float32 scale inverse, 2^U(-6, 6): sets `slot` unless an
  /// earlier element of the same block set it.
  void setScale(double &slot) {
    if (std::isnan(slot))
      slot = float(logUniform(-6, 6, /*signed_=*/false));
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// te.grouped_linear and te.grouped_matmul
//===----------------------------------------------------------------------===//

TEST_F(InterpreterGroupedTest, GroupedLinearIsALinearPerSegment) {
  const int64_t k = 6, n = 7;
  for (const SplitCase &c : kSplitCases)
    for (bool withBias : {true, false})
      for (bool rank3 : {false, true}) {
        if (rank3 && c.tokens % 2 != 0)
          continue;
        SCOPED_TRACE(std::string(c.name) + (withBias ? " bias" : "") +
                     (rank3 ? " [T/2, 2, K]" : ""));
        int64_t g = c.groups();
        // A rank-3 input [T/2, 2, K] flattens to the same T rows.
        std::vector<int64_t> xShape = {c.tokens, k}, yShape = {c.tokens, n};
        if (rank3) {
          xShape = {c.tokens / 2, 2, k};
          yShape = {c.tokens / 2, 2, n};
        }
        std::string xType = tensorType(xShape), yType = tensorType(yShape),
                    mType = tensorType({g}, "i32"),
                    wType = tensorType({g, n, k}), bType = tensorType({g, n});
        std::string source =
            withBias
                ? substitute(R"mlir(
func.func @f(%x: $X, %m: $M, %w: $W, %b: $B) -> $Y {
  %y = te.grouped_linear %x splits(%m) weight(%w) bias(%b)
      : ($X, $M, $W, $B) -> $Y
  return %y : $Y
}
)mlir",
                             {{"X", xType},
                              {"M", mType},
                              {"W", wType},
                              {"B", bType},
                              {"Y", yType}})
                : substitute(
                      R"mlir(
func.func @f(%x: $X, %m: $M, %w: $W) -> $Y {
  %y = te.grouped_linear %x splits(%m) weight(%w) : ($X, $M, $W) -> $Y
  return %y : $Y
}
)mlir",
                      {{"X", xType}, {"M", mType}, {"W", wType}, {"Y", yType}});
        mlir::func::FuncOp f = parse(source);
        ASSERT_TRUE(f);
        Tensor x = paddedRandom(c.tokens, k, c.used());
        x.shape.assign(xShape.begin(), xShape.end());
        Tensor w = randomLike({g, n, k}), b = randomLike({g, n});
        std::vector<Tensor> args = {x, splitsTensor(c.splits), w};
        if (withBias)
          args.push_back(b);
        std::vector<Tensor> out = run(f, args);
        ASSERT_EQ(out.size(), 1u);
        // The definition, one row at a time: y[t] = W_g x[t] + b_g for t in
        // segment g, 0 past the segments.
        Tensor expected = Tensor::zeros({c.tokens, n});
        std::vector<int64_t> offsets = offsetsOf(c.splits);
        for (int64_t group = 0; group < g; ++group)
          for (int64_t t = offsets[group]; t < offsets[group + 1]; ++t)
            for (int64_t j = 0; j < n; ++j) {
              double sum = withBias ? b.data[group * n + j] : 0.0;
              for (int64_t i = 0; i < k; ++i)
                sum += x.data[t * k + i] * w.data[(group * n + j) * k + i];
              expected.data[t * n + j] = sum;
            }
        expected.shape.assign(yShape.begin(), yShape.end());
        EXPECT_TRUE(allClose(out[0], expected));
        if (c.used() > 0) {
          EXPECT_GT(maxAbs(expected), 0.5) << "a weak case";
        }
      }
}

TEST_F(InterpreterGroupedTest, GroupedMatmulFormsAreMatmulsPerSegment) {
  // fprop (rows, transpose_b, bias), dgrad (rows) and wgrad (contraction)
  // of GroupedLinear, each segment compared with te.matmul run on it.
  const int64_t k = 5, n = 4;
  for (const SplitCase &c : kSplitCases) {
    SCOPED_TRACE(c.name);
    int64_t g = c.groups(), t = c.tokens;
    mlir::func::FuncOp f = parse(substitute(R"mlir(
func.func @f(%x: $X, %m: $M, %w: $W, %b: $B, %dy: $Y)
    -> ($Y, $X, $DW) {
  %y = te.grouped_matmul %x, %w, %m bias(%b) {transpose_b}
      : ($X, $W, $M, $B) -> $Y
  %dx = te.grouped_matmul %dy, %w, %m : ($Y, $W, $M) -> $X
  %dw = te.grouped_matmul %dy, %x, %m {transpose_a} : ($Y, $X, $M) -> $DW
  return %y, %dx, %dw : $Y, $X, $DW
}
)mlir",
                                            {{"X", tensorType({t, k})},
                                             {"Y", tensorType({t, n})},
                                             {"M", tensorType({g}, "i32")},
                                             {"W", tensorType({g, n, k})},
                                             {"B", tensorType({g, n})},
                                             {"DW", tensorType({g, n, k})}}));
    ASSERT_TRUE(f);
    Tensor x = paddedRandom(t, k, c.used()), dy = paddedRandom(t, n, c.used());
    Tensor w = randomLike({g, n, k}), b = randomLike({g, n});
    std::vector<Tensor> out = run(f, {x, splitsTensor(c.splits), w, b, dy});
    ASSERT_EQ(out.size(), 3u);
    std::vector<int64_t> offsets = offsetsOf(c.splits);
    for (int64_t group = 0; group < g; ++group) {
      int64_t begin = offsets[group], end = offsets[group + 1];
      Tensor wg = sliceOf(w, group);
      if (begin == end) {
        EXPECT_TRUE(allClose(sliceOf(out[2], group), Tensor::zeros({n, k})))
            << "the wgrad of empty group " << group << " is 0";
        continue;
      }
      Tensor y = runMatmul(rowsOf(x, begin, end), wg, false, true);
      for (int64_t i = 0; i < y.numElements(); ++i)
        y.data[i] += b.data[group * n + i % n];
      EXPECT_TRUE(allClose(rowsOf(out[0], begin, end), y)) << group;
      EXPECT_TRUE(allClose(rowsOf(out[1], begin, end),
                           runMatmul(rowsOf(dy, begin, end), wg, false, false)))
          << group;
      EXPECT_TRUE(allClose(sliceOf(out[2], group),
                           runMatmul(rowsOf(dy, begin, end),
                                     rowsOf(x, begin, end), true, false)))
          << group;
    }
    EXPECT_TRUE(rowsAreZero(out[0], c.used(), t));
    EXPECT_TRUE(rowsAreZero(out[1], c.used(), t));
  }
}

TEST_F(InterpreterGroupedTest, BiasGradSumsEachSegment) {
  const int64_t n = 5;
  for (const SplitCase &c : kSplitCases) {
    SCOPED_TRACE(c.name);
    int64_t g = c.groups();
    mlir::func::FuncOp f =
        parse(substitute(R"mlir(
func.func @f(%dy: $Y, %m: $M) -> $DB {
  %db = te.grouped_bias_grad %dy, %m : ($Y, $M) -> $DB
  return %db : $DB
}
)mlir",
                         {{"Y", tensorType({c.tokens, n}, "bf16")},
                          {"M", tensorType({g}, "i32")},
                          {"DB", tensorType({g, n}, "bf16")}}));
    ASSERT_TRUE(f);
    Tensor dy = paddedRandom(c.tokens, n, c.used());
    std::vector<Tensor> out = run(f, {dy, splitsTensor(c.splits)});
    ASSERT_EQ(out.size(), 1u);
    Tensor expected = Tensor::zeros({g, n});
    std::vector<int64_t> offsets = offsetsOf(c.splits);
    for (int64_t group = 0; group < g; ++group)
      for (int64_t t = offsets[group]; t < offsets[group + 1]; ++t)
        for (int64_t j = 0; j < n; ++j)
          expected.data[group * n + j] += dy.data[t * n + j];
    EXPECT_TRUE(allClose(out[0], expected));
  }
}

TEST_F(InterpreterGroupedTest, BackwardOpsAreTheGradientsOfGroupedLinear) {
  // te-autodiff's rule (docs/grouped-linear.md): dgrad, wgrad and the bias
  // gradient of te.grouped_linear, against central differences of its
  // forward, padding rows and an empty segment included.
  const int64_t t = 9, k = 3, n = 4, g = 3;
  const std::vector<int64_t> splits = {3, 0, 4};
  mlir::func::FuncOp fwd = parse(R"mlir(
func.func @fwd(%x: tensor<9x3xf32>, %m: tensor<3xi32>, %w: tensor<3x4x3xf32>,
               %b: tensor<3x4xf32>) -> tensor<9x4xf32> {
  %y = te.grouped_linear %x splits(%m) weight(%w) bias(%b)
      : (tensor<9x3xf32>, tensor<3xi32>, tensor<3x4x3xf32>, tensor<3x4xf32>)
        -> tensor<9x4xf32>
  return %y : tensor<9x4xf32>
}
)mlir",
                                 "fwd");
  mlir::func::FuncOp bwd = parse(R"mlir(
func.func @bwd(%dy: tensor<9x4xf32>, %x: tensor<9x3xf32>, %m: tensor<3xi32>,
               %w: tensor<3x4x3xf32>)
    -> (tensor<9x3xf32>, tensor<3x4x3xf32>, tensor<3x4xf32>) {
  %dx = te.grouped_matmul %dy, %w, %m {role = #te.gemm_role<dgrad>}
      : (tensor<9x4xf32>, tensor<3x4x3xf32>, tensor<3xi32>) -> tensor<9x3xf32>
  %dw = te.grouped_matmul %dy, %x, %m {transpose_a, role = #te.gemm_role<wgrad>}
      : (tensor<9x4xf32>, tensor<9x3xf32>, tensor<3xi32>) -> tensor<3x4x3xf32>
  %db = te.grouped_bias_grad %dy, %m
      : (tensor<9x4xf32>, tensor<3xi32>) -> tensor<3x4xf32>
  return %dx, %dw, %db
      : tensor<9x3xf32>, tensor<3x4x3xf32>, tensor<3x4xf32>
}
)mlir",
                                 "bwd");
  ASSERT_TRUE(fwd && bwd);
  Tensor x = randomLike({t, k}), w = randomLike({g, n, k}),
         b = randomLike({g, n}), dy = randomLike({t, n});
  Tensor m = splitsTensor(splits);
  std::vector<Tensor> grads = run(bwd, {dy, x, m, w});
  ASSERT_EQ(grads.size(), 3u);
  std::vector<Tensor> args = {x, m, w, b};
  EXPECT_TRUE(gradientClose(grads[0], numericGradient(fwd, args, 0, {dy})));
  EXPECT_TRUE(gradientClose(grads[1], numericGradient(fwd, args, 2, {dy})));
  EXPECT_TRUE(gradientClose(grads[2], numericGradient(fwd, args, 3, {dy})));
  // Padding rows (7, 8) and the empty group have zero gradients.
  EXPECT_TRUE(rowsAreZero(grads[0], 7, 9));
  EXPECT_TRUE(allClose(sliceOf(grads[1], 1), Tensor::zeros({n, k})));
}

//===----------------------------------------------------------------------===//
// FP8: te.grouped_quantize, te.grouped_amax, te.compute_scale on [G]
//===----------------------------------------------------------------------===//

TEST_F(InterpreterGroupedTest, GroupedQuantizeCastsEachSegmentAsTeQuantize) {
  const int64_t k = 24;
  for (const SplitCase &c : kFp8SplitCases)
    for (const Fp8Type &type : {kE4M3, kE5M2}) {
      SCOPED_TRACE(std::string(c.name) + " " + type.name);
      int64_t g = c.groups(), t = c.tokens;
      mlir::func::FuncOp f =
          parse(substitute(R"mlir(
func.func @f(%x: $X, %s: $S, %m: $M) -> ($Q, $S, $P, $S) {
  %q, %a = te.grouped_quantize %x, %s, %m : ($X, $S, $M) -> ($Q, $S)
  %qt, %at = te.grouped_quantize %x, %s, %m {transpose}
      : ($X, $S, $M) -> ($P, $S)
  return %q, %a, %qt, %at : $Q, $S, $P, $S
}
)mlir",
                           {{"X", tensorType({t, k}, "bf16")},
                            {"S", tensorType({g})},
                            {"M", tensorType({g}, "i32")},
                            {"Q", tensorType({t, k}, type.name)},
                            {"P", tensorType({k, t}, type.name)}}));
      ASSERT_TRUE(f);
      Tensor x = paddedRandom(t, k, c.used());
      for (int64_t i = 0; i < c.used() * k; ++i)
        x.data[i] = logUniform(-10, 4);
      Tensor scales = randomScales(g);
      std::vector<Tensor> out = run(f, {x, scales, splitsTensor(c.splits)});
      ASSERT_EQ(out.size(), 4u);
      std::vector<int64_t> offsets = offsetsOf(c.splits);
      for (int64_t group = 0; group < g; ++group) {
        int64_t begin = offsets[group], end = offsets[group + 1];
        if (begin == end) {
          EXPECT_EQ(out[1].data[group], 0.0) << "empty group " << group;
          continue;
        }
        auto [cast, amax] =
            runQuantize(rowsOf(x, begin, end), scales.data[group], type);
        EXPECT_TRUE(allClose(rowsOf(out[0], begin, end), cast, 0, 0)) << group;
        EXPECT_EQ(out[1].data[group], amax.data[0]) << group;
      }
      // Padding: written 0, in no amax (its 1000s would exceed every one).
      EXPECT_TRUE(rowsAreZero(out[0], c.used(), t));
      EXPECT_LT(maxAbs(out[1]), 1000.0);
      // The transposed copy is the row cast transposed, amaxes alike.
      EXPECT_TRUE(allClose(out[2], transposed(out[0]), 0, 0));
      EXPECT_TRUE(allClose(out[3], out[1], 0, 0));
      // Some elements saturate or flush, most do not: a real cast.
      int64_t zeros = std::count(out[0].data.begin(),
                                 out[0].data.begin() + c.used() * k, 0.0);
      EXPECT_LT(zeros, c.used() * k / 4);
    }
}

TEST_F(InterpreterGroupedTest, GroupedQuantizeCastsEachStackedSlice) {
  // Stacked weights [G, R, C] (no m_splits), and their per-group transposes
  // [G, C, R] (dgrad's K-major copy).
  const int64_t g = 3, r = 20, cols = 24;
  for (const Fp8Type &type : {kE4M3, kE5M2}) {
    SCOPED_TRACE(type.name);
    mlir::func::FuncOp f =
        parse(substitute(R"mlir(
func.func @f(%w: $W, %s: $S) -> ($Q, $S, $P, $S, $S) {
  %q, %a = te.grouped_quantize %w, %s : ($W, $S) -> ($Q, $S)
  %qt, %at = te.grouped_quantize %w, %s {transpose} : ($W, $S) -> ($P, $S)
  %amax = te.grouped_amax %w : ($W) -> $S
  return %q, %a, %qt, %at, %amax : $Q, $S, $P, $S, $S
}
)mlir",
                         {{"W", tensorType({g, r, cols}, "f16")},
                          {"S", tensorType({g})},
                          {"Q", tensorType({g, r, cols}, type.name)},
                          {"P", tensorType({g, cols, r}, type.name)}}));
    ASSERT_TRUE(f);
    Tensor w = Tensor::zeros({g, r, cols});
    for (double &value : w.data)
      value = logUniform(-10, 4);
    Tensor scales = randomScales(g);
    std::vector<Tensor> out = run(f, {w, scales});
    ASSERT_EQ(out.size(), 5u);
    for (int64_t group = 0; group < g; ++group) {
      auto [cast, amax] =
          runQuantize(sliceOf(w, group), scales.data[group], type);
      EXPECT_TRUE(allClose(sliceOf(out[0], group), cast, 0, 0)) << group;
      EXPECT_TRUE(allClose(sliceOf(out[2], group), transposed(cast), 0, 0))
          << group;
      EXPECT_EQ(out[1].data[group], amax.data[0]) << group;
    }
    EXPECT_TRUE(allClose(out[3], out[1], 0, 0));
    EXPECT_TRUE(allClose(out[4], out[1], 0, 0));
  }
}

TEST_F(InterpreterGroupedTest, GroupedAmaxAndComputeScalePerGroup) {
  // Current scaling's first pass on segments, then te.compute_scale on the
  // [G] amaxes: each element as te.compute_scale of its own slot.
  const SplitCase c = kFp8SplitCases[0];
  int64_t g = c.groups(), t = c.tokens, k = 8;
  mlir::func::FuncOp f = parse(substitute(R"mlir(
func.func @f(%x: $X, %m: $M) -> ($S, $S, $S, $S, $S) {
  %a = te.grouped_amax %x, %m : ($X, $M) -> $S
  %s, %i = te.compute_scale %a {fp8_type = f8E4M3FN} : $S -> $S, $S
  %s2, %i2 = te.compute_scale %a {fp8_type = f8E5M2, power_2_scale}
      : $S -> $S, $S
  return %a, %s, %i, %s2, %i2 : $S, $S, $S, $S, $S
}
)mlir",
                                          {{"X", tensorType({t, k}, "bf16")},
                                           {"S", tensorType({g})},
                                           {"M", tensorType({g}, "i32")}}));
  ASSERT_TRUE(f);
  Tensor x = paddedRandom(t, k, c.used());
  std::vector<Tensor> out = run(f, {x, splitsTensor(c.splits)});
  ASSERT_EQ(out.size(), 5u);
  std::vector<int64_t> offsets = offsetsOf(c.splits);
  for (int64_t group = 0; group < g; ++group) {
    double amax = 0.0;
    for (int64_t i = offsets[group] * k; i < offsets[group + 1] * k; ++i)
      amax = std::max(amax, std::fabs(x.data[i]));
    EXPECT_EQ(out[0].data[group], amax) << group;
    auto [scale, inverse] = runComputeScale(out[0].data[group], kE4M3, false);
    EXPECT_EQ(out[1].data[group], scale) << group;
    EXPECT_EQ(out[2].data[group], inverse) << group;
    auto [scale2, inverse2] = runComputeScale(out[0].data[group], kE5M2, true);
    EXPECT_EQ(out[3].data[group], scale2) << group;
    EXPECT_EQ(out[4].data[group], inverse2) << group;
  }
  EXPECT_EQ(out[1].data[1], 1.0) << "the empty group's amax 0 gives scale 1";
}

TEST_F(InterpreterGroupedTest, ComputeScaleIsElementwiseOnVectors) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%a: tensor<7xf32>) -> (tensor<7xf32>, tensor<7xf32>) {
  %s, %i = te.compute_scale %a {fp8_type = f8E4M3FN, power_2_scale}
      : tensor<7xf32> -> tensor<7xf32>, tensor<7xf32>
  return %s, %i : tensor<7xf32>, tensor<7xf32>
}
)mlir");
  ASSERT_TRUE(f);
  // 0, inf and NaN give 1; a tiny amax overflows to FLT_MAX (-> 2^127).
  Tensor amax({7}, {0.0, kInf, kNaN, 1e-40, 3.5, 448.0, 0.01});
  std::vector<Tensor> out = run(f, {amax});
  ASSERT_EQ(out.size(), 2u);
  for (int64_t i = 0; i < 7; ++i) {
    auto [scale, inverse] = runComputeScale(amax.data[i], kE4M3, true);
    EXPECT_EQ(out[0].data[i], scale) << i;
    EXPECT_EQ(out[1].data[i], inverse) << i;
  }
  EXPECT_EQ(out[0].data[0], 1.0);
  EXPECT_EQ(out[0].data[3], std::ldexp(1.0, 127));
  EXPECT_EQ(out[0].data[4], 128.0); // 448 / 3.5 = 128
}

//===----------------------------------------------------------------------===//
// te.grouped_scaled_matmul
//===----------------------------------------------------------------------===//

TEST_F(InterpreterGroupedTest, GroupedScaledMatmulDequantizesPerGroup) {
  const int64_t k = 32, n = 16, m = 24;
  for (const SplitCase &c : kFp8SplitCases) {
    SCOPED_TRACE(c.name);
    int64_t g = c.groups(), t = c.tokens;
    mlir::func::FuncOp f =
        parse(substitute(R"mlir(
func.func @f(%a: $A, %b: $B, %sa: $S, %sb: $S, %m: $M, %bias: $V,
             %dyt: $DYT, %xt: $XT) -> ($Y, $DW) {
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m bias(%bias) {fast_accum}
      : ($A, $B, $S, $S, $M, $V) -> $Y
  %dw = te.grouped_scaled_matmul %dyt, %xt, %sb, %sa, %m
      : ($DYT, $XT, $S, $S, $M) -> $DW
  return %y, %dw : $Y, $DW
}
)mlir",
                         {{"A", tensorType({t, k}, "f8E4M3FN")},
                          {"B", tensorType({g, n, k}, "f8E4M3FN")},
                          {"S", tensorType({g})},
                          {"M", tensorType({g}, "i32")},
                          {"V", tensorType({g, n}, "bf16")},
                          {"Y", tensorType({t, n}, "bf16")},
                          {"DYT", tensorType({m, t}, "f8E5M2")},
                          {"XT", tensorType({k, t}, "f8E4M3FN")},
                          {"DW", tensorType({g, m, k})}}));
    ASSERT_TRUE(f);
    auto fp8Tensor = [&](std::vector<int64_t> shape,
                         tejit::interp::Fp8Kind kind) {
      Tensor x = Tensor::zeros(shape);
      for (double &value : x.data)
        value = randomFp8(kind);
      return x;
    };
    using tejit::interp::Fp8Kind;
    Tensor a = fp8Tensor({t, k}, Fp8Kind::E4M3),
           b = fp8Tensor({g, n, k}, Fp8Kind::E4M3),
           dyt = fp8Tensor({m, t}, Fp8Kind::E5M2),
           xt = fp8Tensor({k, t}, Fp8Kind::E4M3), bias = randomLike({g, n});
    Tensor sa = randomScales(g), sb = randomScales(g);
    for (double &value : sa.data)
      value = float(1.0 / value);
    std::vector<Tensor> out =
        run(f, {a, b, sa, sb, splitsTensor(c.splits), bias, dyt, xt});
    ASSERT_EQ(out.size(), 2u);
    std::vector<int64_t> offsets = offsetsOf(c.splits);
    // Dequantize, then multiply: rows of group g with b[g]; columns of the
    // transposed copies for the contraction form.
    for (int64_t group = 0; group < g; ++group) {
      int64_t begin = offsets[group], end = offsets[group + 1];
      for (int64_t row = begin; row < end; ++row)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0.0, magnitude = 0.0;
          for (int64_t i = 0; i < k; ++i) {
            double term = a.data[row * k + i] * sa.data[group] *
                          b.data[(group * n + j) * k + i] * sb.data[group];
            sum += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(out[0].data[row * n + j], sum + bias.data[group * n + j],
                      1e-14 * magnitude + 1e-15)
              << "row " << row << " col " << j;
        }
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j) {
          double sum = 0.0, magnitude = 0.0;
          for (int64_t col = begin; col < end; ++col) {
            double term = dyt.data[i * t + col] * sb.data[group] *
                          xt.data[j * t + col] * sa.data[group];
            sum += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(out[1].data[(group * m + i) * k + j], sum,
                      1e-14 * magnitude)
              << "group " << group << " [" << i << ", " << j << "]";
        }
    }
    EXPECT_TRUE(rowsAreZero(out[0], c.used(), t));
    EXPECT_GT(maxAbs(out[1]), 0.0);
  }
}

TEST_F(InterpreterGroupedTest, Fp8PipelineIsCloseToGroupedLinear) {
  // Float8CurrentScaling's forward as te-place-scaling builds it: per-group
  // amaxes, scales, casts (segments of x, stacked W) and the grouped FP8
  // GEMM, within E4M3's error of te.grouped_linear.
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<80x32xbf16>, %m: tensor<4xi32>,
             %w: tensor<4x16x32xbf16>, %b: tensor<4x16xbf16>)
    -> (tensor<80x16xbf16>, tensor<80x16xbf16>) {
  %ref = te.grouped_linear %x splits(%m) weight(%w) bias(%b)
      : (tensor<80x32xbf16>, tensor<4xi32>, tensor<4x16x32xbf16>,
         tensor<4x16xbf16>) -> tensor<80x16xbf16>
  %ax = te.grouped_amax %x, %m
      : (tensor<80x32xbf16>, tensor<4xi32>) -> tensor<4xf32>
  %aw = te.grouped_amax %w : (tensor<4x16x32xbf16>) -> tensor<4xf32>
  %sx, %ix = te.compute_scale %ax {fp8_type = f8E4M3FN}
      : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
  %sw, %iw = te.compute_scale %aw {fp8_type = f8E4M3FN}
      : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
  %qx, %ax2 = te.grouped_quantize %x, %sx, %m
      : (tensor<80x32xbf16>, tensor<4xf32>, tensor<4xi32>)
        -> (tensor<80x32xf8E4M3FN>, tensor<4xf32>)
  %qw, %aw2 = te.grouped_quantize %w, %sw
      : (tensor<4x16x32xbf16>, tensor<4xf32>)
        -> (tensor<4x16x32xf8E4M3FN>, tensor<4xf32>)
  %y = te.grouped_scaled_matmul %qx, %qw, %ix, %iw, %m bias(%b) {fast_accum}
      : (tensor<80x32xf8E4M3FN>, tensor<4x16x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>, tensor<4x16xbf16>) -> tensor<80x16xbf16>
  return %ref, %y : tensor<80x16xbf16>, tensor<80x16xbf16>
}
)mlir");
  ASSERT_TRUE(f);
  const SplitCase c = kFp8SplitCases[0];
  // Segments of very different magnitudes: per-group scales matter.
  Tensor x = paddedRandom(80, 32, c.used());
  std::vector<int64_t> offsets = offsetsOf(c.splits);
  for (int64_t group = 0; group < 4; ++group)
    for (int64_t i = offsets[group] * 32; i < offsets[group + 1] * 32; ++i)
      x.data[i] *= std::ldexp(1.0, 6 * group - 9);
  Tensor w = randomLike({4, 16, 32}, 0.1), b = randomLike({4, 16});
  std::vector<Tensor> out = run(f, {x, splitsTensor(c.splits), w, b});
  ASSERT_EQ(out.size(), 2u);
  for (int64_t row = 0; row < c.used(); ++row) {
    int64_t group = 0;
    while (row >= offsets[group + 1])
      ++group;
    for (int64_t j = 0; j < 16; ++j) {
      double magnitude = std::fabs(b.data[group * 16 + j]);
      for (int64_t i = 0; i < 32; ++i)
        magnitude +=
            std::fabs(x.data[row * 32 + i] * w.data[(group * 16 + j) * 32 + i]);
      EXPECT_NEAR(out[1].data[row * 16 + j], out[0].data[row * 16 + j],
                  0.125 * magnitude)
          << "row " << row << " col " << j;
    }
  }
  EXPECT_TRUE(rowsAreZero(out[1], c.used(), 80));
  EXPECT_FALSE(allClose(out[1], out[0])) << "the casts changed nothing";
}

//===----------------------------------------------------------------------===//
// Float8BlockScaling: te.grouped_block_quantize, te.grouped_scaled_matmul
// with block scales. Layout formulas are written here from
// docs/grouped-linear.md, not taken from GroupedBlockScaleLayout.h.
//===----------------------------------------------------------------------===//

TEST_F(InterpreterGroupedTest,
       GroupedBlockQuantizeOfSegmentsIsBlockQuantizePerSegment) {
  // Rowwise and transposed casts of x [T, K] in segments against
  // te.block_quantize run on each segment as its own matrix, scattered by
  // the segments and transposed segments layouts. K = 198: a full and a
  // short block along K, and pad4(K) = 200 pads the transposed layout.
  const int64_t k = 198, nb = ceilDiv(k, kBlockSide), kPad = roundUpTo4(k);
  for (const SplitCase &c : kBlockSplitCases)
    for (bool power2 : {true, false})
      for (const Fp8Type &type : {kE4M3, kE5M2}) {
        SCOPED_TRACE(std::string(c.name) + " " + type.name +
                     (power2 ? " power_2_scale" : ""));
        int64_t g = c.groups(), t = c.tokens;
        std::vector<int64_t> rowScales = {nb, t},
                             colScales = {ceilDiv(t, kBlockSide) + g, kPad};
        mlir::func::FuncOp f = parse(substitute(
            R"mlir(
func.func @f(%x: $X, %m: $M) -> ($QR, $SR, $QT, $ST) {
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64$P}
      : ($X, $M) -> ($QR, $SR)
  %qt, %st = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, transpose$P}
      : ($X, $M) -> ($QT, $ST)
  return %q, %s, %qt, %st : $QR, $SR, $QT, $ST
}
)mlir",
            {{"X", tensorType({t, k}, "bf16")},
             {"M", tensorType({g}, "i32")},
             {"QR", tensorType({t, k}, type.name)},
             {"SR", tensorType(rowScales)},
             {"QT", tensorType({k, t}, type.name)},
             {"ST", tensorType(colScales)},
             {"P", power2 ? ", power_2_scale" : ""}}));
        ASSERT_TRUE(f);
        Tensor x = blockRandom(t, k, c.used());
        if (c.splits[0] >= 16) {
          // A NaN, an all-zero row (scale 1) and an amax beyond float32.
          x.data[5] = kNaN;
          std::fill_n(x.data.begin() + k, k, 0.0);
          x.data[2 * k + 150] = 1e39;
        }
        std::vector<Tensor> out = run(f, {x, splitsTensor(c.splits)});
        ASSERT_EQ(out.size(), 4u);

        Tensor q = Tensor::zeros({t, k}), s = Tensor::zeros(rowScales);
        Tensor qt = Tensor::zeros({k, t}), st = Tensor::zeros(colScales);
        std::vector<int64_t> offsets = offsetsOf(c.splits),
                             blocks = blocksBefore(c.splits);
        for (int64_t group = 0; group < g; ++group) {
          int64_t begin = offsets[group], m = c.splits[group];
          if (m == 0)
            continue;
          Tensor segment = rowsOf(x, begin, begin + m);
          // Rowwise: [m, K] with scales [nb, m]; element (j, r) of segment
          // g at nb * o_g + j * m_g + (r - o_g).
          auto [rows, rowInv] =
              runBlockQuantize(segment, 1, /*transpose=*/false, power2, type);
          ASSERT_EQ(rowInv.numElements(), nb * m);
          for (int64_t i = 0; i < m * k; ++i)
            q.data[begin * k + i] = rows.data[i];
          for (int64_t j = 0; j < nb; ++j)
            for (int64_t r = 0; r < m; ++r)
              s.data[nb * begin + j * m + r] = rowInv.data[j * m + r];
          // Transposed: [K, m] in columns [o_g, o_g + m) of x^T, scales
          // [ceil(m/128), pad4(K)]; element (j, r) at pad4(K) (c_g + j) + r.
          auto [cols, colInv] =
              runBlockQuantize(segment, 1, /*transpose=*/true, power2, type);
          ASSERT_EQ(colInv.numElements(), ceilDiv(m, kBlockSide) * kPad);
          for (int64_t r = 0; r < k; ++r)
            for (int64_t i = 0; i < m; ++i)
              qt.data[r * t + begin + i] = cols.data[r * m + i];
          for (int64_t i = 0; i < colInv.numElements(); ++i)
            st.data[kPad * blocks[group] + i] = colInv.data[i];
        }
        EXPECT_TRUE(allClose(out[0], q, 0, 0));
        EXPECT_TRUE(allClose(out[1], s, 0, 0));
        EXPECT_TRUE(allClose(out[2], qt, 0, 0));
        EXPECT_TRUE(allClose(out[3], st, 0, 0));
        // Padding: rows (columns) past the segments and the scales no
        // segment owns are 0.
        EXPECT_TRUE(rowsAreZero(out[0], c.used(), t));
        EXPECT_TRUE(rowsAreZero(transposed(out[2]), c.used(), t));
        EXPECT_TRUE(rowsAreZero(asColumn(out[1]), nb * c.used(), nb * t));
        EXPECT_TRUE(rowsAreZero(out[3], blocks[g], colScales[0]));
        if (c.used() == 0)
          continue;
        // Blocks have scales of their own: the data is not degenerate.
        std::set<double> distinct(out[1].data.begin(), out[1].data.end());
        EXPECT_GE(distinct.size(), 8u);
        distinct = std::set<double>(out[3].data.begin(), out[3].data.end());
        EXPECT_GE(distinct.size(), 8u);
      }
}

TEST_F(InterpreterGroupedTest,
       GroupedBlockQuantizeOfStackedIsBlockQuantizePerSlice) {
  // Stacked weights [G, R, C] without m_splits: slice g as te.block_quantize
  // casts it (1-D or 2-D, transposed or not), its scales at g * s0 * s1 of
  // [G, s0, s1]. 136 x 150: partial tiles and blocks in both dims.
  const int64_t g = 3, r = 136, cols = 150;
  for (int64_t blockDim : {1, 2})
    for (bool transpose : {false, true})
      for (bool power2 : {true, false})
        for (const Fp8Type &type : {kE4M3, kE5M2}) {
          SCOPED_TRACE(std::to_string(blockDim) + "-D " + type.name +
                       (transpose ? " transpose" : "") +
                       (power2 ? " power_2_scale" : ""));
          int64_t castRows = transpose ? cols : r,
                  castCols = transpose ? r : cols;
          std::vector<int64_t> one =
              blockScaleShape(castRows, castCols, blockDim);
          std::vector<int64_t> scales = {g, one[0], one[1]};
          std::string flags = std::string(transpose ? ", transpose" : "") +
                              (power2 ? ", power_2_scale" : "");
          mlir::func::FuncOp f = parse(substitute(
              R"mlir(
func.func @f(%w: $W) -> ($Q, $S) {
  %q, %s = te.grouped_block_quantize %w {block_dim = $D : i64$FLAGS}
      : ($W) -> ($Q, $S)
  return %q, %s : $Q, $S
}
)mlir",
              {{"W", tensorType({g, r, cols}, "bf16")},
               {"Q", tensorType({g, castRows, castCols}, type.name)},
               {"S", tensorType(scales)},
               {"D", std::to_string(blockDim)},
               {"FLAGS", flags}}));
          ASSERT_TRUE(f);
          Tensor w = blockRandom(g * r, cols, g * r);
          w.shape = {g, r, cols};
          std::vector<Tensor> out = run(f, {w});
          ASSERT_EQ(out.size(), 2u);
          for (int64_t group = 0; group < g; ++group) {
            auto [cast, inverse] = runBlockQuantize(sliceOf(w, group), blockDim,
                                                    transpose, power2, type);
            EXPECT_TRUE(allClose(sliceOf(out[0], group), cast, 0, 0)) << group;
            EXPECT_TRUE(allClose(sliceOf(out[1], group), inverse, 0, 0))
                << group;
          }
          std::set<double> distinct(out[1].data.begin(), out[1].data.end());
          EXPECT_GE(distinct.size(), 4u);
        }
}

TEST_F(InterpreterGroupedTest,
       BlockScaledGroupedMatmulRowsDequantizesPerGroup) {
  // Rows form: a [T, K] in the segments layout (1-D), b [G, N, K] stacked,
  // 1-D or 2-D: each element of group g dequantized with the scale the
  // layout formulas give, then multiplied in float64. Every scale no group
  // owns is NaN, so a read of one shows. K = 208 (blocks of 128 and 80);
  // N = 134: two tiles of rows, pad4 pads both stacked layouts.
  const int64_t k = 208, n = 134, nb = ceilDiv(k, kBlockSide);
  using tejit::interp::Fp8Kind;
  for (const SplitCase &c : kBlockSplitCases)
    for (int64_t bDim : {1, 2}) {
      bool withBias = bDim == 2;
      SCOPED_TRACE(std::string(c.name) + " b " + std::to_string(bDim) + "-D");
      int64_t g = c.groups(), t = c.tokens;
      std::vector<int64_t> one = blockScaleShape(n, k, bDim);
      std::vector<int64_t> aScales = {nb, t}, bScales = {g, one[0], one[1]};
      mlir::func::FuncOp f = parse(substitute(
          R"mlir(
func.func @f(%a: $A, %b: $B, %sa: $SA, %sb: $SB, %m: $M$OPTARG) -> $Y {
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m$OPTUSE
      : ($A, $B, $SA, $SB, $M$OPTTYPE) -> $Y
  return %y : $Y
}
)mlir",
          {{"A", tensorType({t, k}, "f8E4M3FN")},
           {"B", tensorType({g, n, k}, "f8E4M3FN")},
           {"SA", tensorType(aScales)},
           {"SB", tensorType(bScales)},
           {"M", tensorType({g}, "i32")},
           {"Y", tensorType({t, n}, "bf16")},
           {"OPTARG", withBias ? ", %bias: " + tensorType({g, n}, "bf16") : ""},
           {"OPTUSE", withBias ? " bias(%bias)" : ""},
           {"OPTTYPE", withBias ? ", " + tensorType({g, n}, "bf16") : ""}}));
      ASSERT_TRUE(f);
      Tensor a = fp8Random({t, k}, Fp8Kind::E4M3),
             b = fp8Random({g, n, k}, Fp8Kind::E4M3), bias = randomLike({g, n});
      Tensor sa = nanTensor(aScales), sb = nanTensor(bScales);
      std::vector<int64_t> offsets = offsetsOf(c.splits);
      // a's element (row, col) of segment g: nb * o_g + (col / 128) m_g +
      // (row - o_g).
      auto aScale = [&](int64_t group, int64_t row, int64_t col) -> double & {
        int64_t m = c.splits[group], o = offsets[group];
        return sa.data[nb * o + col / kBlockSide * m + (row - o)];
      };
      // b[g]'s element (row, col): 1-D (col / 128, row), 2-D (row / 128,
      // col / 128) of slice g of [G, s0, s1].
      auto bScale = [&](int64_t group, int64_t row, int64_t col) -> double & {
        int64_t index = bDim == 1
                            ? col / kBlockSide * one[1] + row
                            : row / kBlockSide * one[1] + col / kBlockSide;
        return sb.data[group * one[0] * one[1] + index];
      };
      for (int64_t group = 0; group < g; ++group) {
        for (int64_t row = offsets[group]; row < offsets[group + 1]; ++row)
          for (int64_t col = 0; col < k; ++col)
            setScale(aScale(group, row, col));
        for (int64_t row = 0; row < n; ++row)
          for (int64_t col = 0; col < k; ++col)
            setScale(bScale(group, row, col));
      }
      std::vector<Tensor> args = {a, b, sa, sb, splitsTensor(c.splits)};
      if (withBias)
        args.push_back(bias);
      std::vector<Tensor> out = run(f, args);
      ASSERT_EQ(out.size(), 1u);
      for (int64_t group = 0; group < g; ++group)
        for (int64_t row = offsets[group]; row < offsets[group + 1]; ++row)
          for (int64_t j = 0; j < n; ++j) {
            double sum = withBias ? bias.data[group * n + j] : 0.0;
            double magnitude = std::fabs(sum);
            for (int64_t i = 0; i < k; ++i) {
              double term = a.data[row * k + i] * aScale(group, row, i) *
                            b.data[(group * n + j) * k + i] *
                            bScale(group, j, i);
              sum += term;
              magnitude += std::fabs(term);
            }
            ASSERT_NEAR(out[0].data[row * n + j], sum, 1e-13 * magnitude)
                << "row " << row << " col " << j;
          }
      EXPECT_TRUE(rowsAreZero(out[0], c.used(), t));
      if (c.used() > 0) {
        EXPECT_GT(maxAbs(out[0]), 0.0);
      }
    }
}

TEST_F(InterpreterGroupedTest,
       BlockScaledGroupedMatmulContractionDequantizesPerGroup) {
  // Contraction form (wgrad): a = dy^T [M, T] (E5M2), b = x^T [N, T], both
  // in the transposed segments layout: 1-D blocks of 128 columns counted
  // from each segment's first column. M = 22, N = 18 pad to 24 and 20;
  // scales no group owns are NaN.
  const int64_t m = 22, n = 18;
  using tejit::interp::Fp8Kind;
  for (const SplitCase &c : kBlockSplitCases) {
    SCOPED_TRACE(c.name);
    int64_t g = c.groups(), t = c.tokens,
            blockRows = ceilDiv(t, kBlockSide) + g;
    std::vector<int64_t> aScales = {blockRows, roundUpTo4(m)},
                         bScales = {blockRows, roundUpTo4(n)};
    mlir::func::FuncOp f =
        parse(substitute(R"mlir(
func.func @f(%a: $A, %b: $B, %sa: $SA, %sb: $SB, %m: $M) -> $Y {
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : ($A, $B, $SA, $SB, $M) -> $Y
  return %y : $Y
}
)mlir",
                         {{"A", tensorType({m, t}, "f8E5M2")},
                          {"B", tensorType({n, t}, "f8E4M3FN")},
                          {"SA", tensorType(aScales)},
                          {"SB", tensorType(bScales)},
                          {"M", tensorType({g}, "i32")},
                          {"Y", tensorType({g, m, n})}}));
    ASSERT_TRUE(f);
    Tensor a = fp8Random({m, t}, Fp8Kind::E5M2),
           b = fp8Random({n, t}, Fp8Kind::E4M3);
    Tensor sa = nanTensor(aScales), sb = nanTensor(bScales);
    std::vector<int64_t> offsets = offsetsOf(c.splits),
                         blocks = blocksBefore(c.splits);
    // Element (row, col) of segment g of an operand with `rows` rows:
    // pad4(rows) (c_g + (col - o_g) / 128) + row.
    auto scaleOf = [&](Tensor &scales, int64_t rows, int64_t group, int64_t row,
                       int64_t col) -> double & {
      int64_t block = blocks[group] + (col - offsets[group]) / kBlockSide;
      return scales.data[roundUpTo4(rows) * block + row];
    };
    for (int64_t group = 0; group < g; ++group)
      for (int64_t col = offsets[group]; col < offsets[group + 1]; ++col) {
        for (int64_t row = 0; row < m; ++row)
          setScale(scaleOf(sa, m, group, row, col));
        for (int64_t row = 0; row < n; ++row)
          setScale(scaleOf(sb, n, group, row, col));
      }
    std::vector<Tensor> out = run(f, {a, b, sa, sb, splitsTensor(c.splits)});
    ASSERT_EQ(out.size(), 1u);
    for (int64_t group = 0; group < g; ++group)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0.0, magnitude = 0.0;
          for (int64_t col = offsets[group]; col < offsets[group + 1]; ++col) {
            double term = a.data[i * t + col] * scaleOf(sa, m, group, i, col) *
                          b.data[j * t + col] * scaleOf(sb, n, group, j, col);
            sum += term;
            magnitude += std::fabs(term);
          }
          // An empty group's output is exactly 0.
          ASSERT_NEAR(out[0].data[(group * m + i) * n + j], sum,
                      1e-13 * magnitude)
              << "group " << group << " [" << i << ", " << j << "]";
        }
    if (c.used() > 0) {
      EXPECT_GT(maxAbs(out[0]), 0.0);
    }
  }
}

TEST_F(InterpreterGroupedTest, BlockScaledPipelineIsCloseToGroupedMatmuls) {
  // GroupedLinear's three GEMMs under Float8BlockScaling (HYBRID) as
  // docs/grouped-linear.md has te-place-scaling build them: x in 1-D
  // segments (rowwise for fprop, transposed for wgrad), W in 2-D tiles
  // (W^T for dgrad), dy in E5M2 rowwise (dgrad) and transposed (wgrad).
  // Each within FP8's relative error of te.grouped_matmul on the
  // high-precision operands, measured against the same GEMMs of |operands|.
  const SplitCase c = kBlockSplitCases[0];
  const int64_t t = c.tokens, k = 160, n = 136, g = c.groups();
  mlir::func::FuncOp f = parse(substitute(
      R"mlir(
func.func @f(%x: $X, %m: $M, %w: $W, %b: $B, %dy: $Y)
    -> ($Y, $X, $DW, $Y, $X, $DW) {
  %y = te.grouped_matmul %x, %w, %m bias(%b) {transpose_b}
      : ($X, $W, $M, $B) -> $Y
  %dx = te.grouped_matmul %dy, %w, %m : ($Y, $W, $M) -> $X
  %dw = te.grouped_matmul %dy, %x, %m {transpose_a} : ($Y, $X, $M) -> $DW
  %qx, %sx = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, power_2_scale}
      : ($X, $M) -> ($QX, $SX)
  %qxt, %sxt = te.grouped_block_quantize %x, %m
      {block_dim = 1 : i64, transpose, power_2_scale} : ($X, $M) -> ($QXT, $SXT)
  %qw, %sw = te.grouped_block_quantize %w {block_dim = 2 : i64, power_2_scale}
      : ($W) -> ($QW, $SW)
  %qwt, %swt = te.grouped_block_quantize %w
      {block_dim = 2 : i64, transpose, power_2_scale} : ($W) -> ($QWT, $SWT)
  %qdy, %sdy = te.grouped_block_quantize %dy, %m
      {block_dim = 1 : i64, power_2_scale} : ($Y, $M) -> ($QDY, $SDY)
  %qdyt, %sdyt = te.grouped_block_quantize %dy, %m
      {block_dim = 1 : i64, transpose, power_2_scale} : ($Y, $M) -> ($QDYT, $SDYT)
  %y8 = te.grouped_scaled_matmul %qx, %qw, %sx, %sw, %m bias(%b)
      : ($QX, $QW, $SX, $SW, $M, $B) -> $Y
  %dx8 = te.grouped_scaled_matmul %qdy, %qwt, %sdy, %swt, %m
      : ($QDY, $QWT, $SDY, $SWT, $M) -> $X
  %dw8 = te.grouped_scaled_matmul %qdyt, %qxt, %sdyt, %sxt, %m
      : ($QDYT, $QXT, $SDYT, $SXT, $M) -> $DW
  return %y, %dx, %dw, %y8, %dx8, %dw8 : $Y, $X, $DW, $Y, $X, $DW
}
)mlir",
      // Transposed names first: "$QX" would match the start of "$QXT".
      {{"QXT", tensorType({k, t}, "f8E4M3FN")},
       {"SXT", tensorType({ceilDiv(t, kBlockSide) + g, roundUpTo4(k)})},
       {"QWT", tensorType({g, k, n}, "f8E4M3FN")},
       {"SWT", tensorType({g, ceilDiv(k, kBlockSide),
                           roundUpTo4(ceilDiv(n, kBlockSide))})},
       {"QDYT", tensorType({n, t}, "f8E5M2")},
       {"SDYT", tensorType({ceilDiv(t, kBlockSide) + g, roundUpTo4(n)})},
       {"QX", tensorType({t, k}, "f8E4M3FN")},
       {"SX", tensorType({ceilDiv(k, kBlockSide), t})},
       {"QW", tensorType({g, n, k}, "f8E4M3FN")},
       {"SW", tensorType({g, ceilDiv(n, kBlockSide),
                          roundUpTo4(ceilDiv(k, kBlockSide))})},
       {"QDY", tensorType({t, n}, "f8E5M2")},
       {"SDY", tensorType({ceilDiv(n, kBlockSide), t})},
       {"X", tensorType({t, k}, "bf16")},
       {"Y", tensorType({t, n}, "bf16")},
       {"W", tensorType({g, n, k}, "bf16")},
       {"B", tensorType({g, n}, "bf16")},
       {"DW", tensorType({g, n, k})},
       {"M", tensorType({g}, "i32")}}));
  ASSERT_TRUE(f);
  // Segments of very different magnitudes: per-group (and per-block)
  // scales matter.
  Tensor x = paddedRandom(t, k, c.used()), dy = paddedRandom(t, n, c.used());
  std::vector<int64_t> offsets = offsetsOf(c.splits);
  for (int64_t group = 0; group < g; ++group) {
    double factor = std::ldexp(1.0, 6 * group - 9);
    for (int64_t i = offsets[group] * k; i < offsets[group + 1] * k; ++i)
      x.data[i] *= factor;
    for (int64_t i = offsets[group] * n; i < offsets[group + 1] * n; ++i)
      dy.data[i] /= factor;
  }
  Tensor w = randomLike({g, n, k}, 0.1), b = randomLike({g, n});
  Tensor m = splitsTensor(c.splits);
  std::vector<Tensor> out = run(f, {x, m, w, b, dy});
  ASSERT_EQ(out.size(), 6u);
  // The high-precision GEMMs of the absolute values bound each sum.
  auto absolute = [](Tensor x) {
    for (double &value : x.data)
      value = std::fabs(value);
    return x;
  };
  std::vector<Tensor> bound =
      run(f, {absolute(x), m, absolute(w), absolute(b), absolute(dy)});
  ASSERT_EQ(bound.size(), 6u);
  // E4M3 x E4M3 (fprop): 2^-4 relative per operand; E5M2 x E4M3: 2^-3 and
  // 2^-4.
  const double tolerance[3] = {0.13, 0.2, 0.2};
  const char *names[3] = {"fprop", "dgrad", "wgrad"};
  for (int gemm = 0; gemm < 3; ++gemm) {
    SCOPED_TRACE(names[gemm]);
    const Tensor &exact = out[gemm], &fp8 = out[gemm + 3];
    ASSERT_EQ(exact.shape, fp8.shape);
    for (size_t i = 0; i < exact.data.size(); ++i)
      ASSERT_NEAR(fp8.data[i], exact.data[i],
                  tolerance[gemm] * bound[gemm].data[i])
          << "element " << i;
    EXPECT_FALSE(allClose(fp8, exact)) << "the casts changed nothing";
  }
  EXPECT_TRUE(rowsAreZero(out[3], c.used(), t));
  EXPECT_TRUE(rowsAreZero(out[4], c.used(), t));
  EXPECT_TRUE(allClose(sliceOf(out[5], 1), Tensor::zeros({n, k}), 0, 0))
      << "the empty group's wgrad is 0";
}

TEST_F(InterpreterGroupedTest, BlockScaledMSplitsAreCheckedAtRunTime) {
  // te.grouped_block_quantize with m_splits (both layouts) and the
  // block-scaled te.grouped_scaled_matmul (both forms) check m_splits as
  // the other FP8 grouped ops: >= 0, sum <= T, multiples of 16.
  mlir::func::FuncOp quantize = parse(R"mlir(
func.func @quantize(%x: tensor<48x16xf32>, %m: tensor<3xi32>)
    -> (tensor<48x16xf8E4M3FN>, tensor<1x48xf32>) {
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64}
      : (tensor<48x16xf32>, tensor<3xi32>)
        -> (tensor<48x16xf8E4M3FN>, tensor<1x48xf32>)
  return %q, %s : tensor<48x16xf8E4M3FN>, tensor<1x48xf32>
}
)mlir",
                                      "quantize");
  mlir::func::FuncOp quantizeT = parse(R"mlir(
func.func @quantize_t(%x: tensor<48x16xf32>, %m: tensor<3xi32>)
    -> (tensor<16x48xf8E4M3FN>, tensor<4x16xf32>) {
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, transpose}
      : (tensor<48x16xf32>, tensor<3xi32>)
        -> (tensor<16x48xf8E4M3FN>, tensor<4x16xf32>)
  return %q, %s : tensor<16x48xf8E4M3FN>, tensor<4x16xf32>
}
)mlir",
                                       "quantize_t");
  mlir::func::FuncOp rows = parse(R"mlir(
func.func @rows(%a: tensor<48x16xf8E4M3FN>, %b: tensor<3x16x16xf8E4M3FN>,
                %sa: tensor<1x48xf32>, %sb: tensor<3x1x16xf32>,
                %m: tensor<3xi32>) -> tensor<48x16xf32> {
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<48x16xf8E4M3FN>, tensor<3x16x16xf8E4M3FN>, tensor<1x48xf32>,
         tensor<3x1x16xf32>, tensor<3xi32>) -> tensor<48x16xf32>
  return %y : tensor<48x16xf32>
}
)mlir",
                                  "rows");
  mlir::func::FuncOp contraction = parse(R"mlir(
func.func @contraction(%a: tensor<16x48xf8E5M2>, %b: tensor<16x48xf8E4M3FN>,
                       %s: tensor<4x16xf32>, %m: tensor<3xi32>)
    -> tensor<3x16x16xf32> {
  %y = te.grouped_scaled_matmul %a, %b, %s, %s, %m
      : (tensor<16x48xf8E5M2>, tensor<16x48xf8E4M3FN>, tensor<4x16xf32>,
         tensor<4x16xf32>, tensor<3xi32>) -> tensor<3x16x16xf32>
  return %y : tensor<3x16x16xf32>
}
)mlir",
                                         "contraction");
  ASSERT_TRUE(quantize && quantizeT && rows && contraction);
  Tensor x = randomLike({48, 16});
  Tensor a = Tensor::zeros({48, 16}), b = Tensor::zeros({3, 16, 16});
  Tensor sa = Tensor::zeros({1, 48}), sb = Tensor::zeros({3, 1, 16});
  Tensor at = Tensor::zeros({16, 48}), s = Tensor::zeros({4, 16});
  auto failures = [&](const Tensor &m) {
    return std::vector<std::string>{runFailing(quantize, {x, m}),
                                    runFailing(quantizeT, {x, m}),
                                    runFailing(rows, {a, b, sa, sb, m}),
                                    runFailing(contraction, {at, at, s, m})};
  };
  for (const auto &[splits, rule] :
       {std::pair(std::vector<int64_t>{16, -16, 32},
                  "'m_splits'[1] = -16 is negative"),
        std::pair(std::vector<int64_t>{16, 32, 16},
                  "'m_splits' sums to 64, more than the 48 rows"),
        std::pair(std::vector<int64_t>{8, 24, 8},
                  "'m_splits'[0] = 8 is not a multiple of 16")}) {
    SCOPED_TRACE(rule);
    for (const std::string &message : failures(splitsTensor(splits)))
      EXPECT_THAT(message, HasSubstr(rule));
  }
  // Valid splits run (an empty group, padding rows).
  Tensor valid = splitsTensor({16, 0, 16});
  EXPECT_EQ(run(quantize, {x, valid}).size(), 2u);
  EXPECT_EQ(run(quantizeT, {x, valid}).size(), 2u);
  EXPECT_EQ(run(rows, {a, b, sa, sb, valid}).size(), 1u);
  EXPECT_EQ(run(contraction, {at, at, s, valid}).size(), 1u);
}

//===----------------------------------------------------------------------===//
// Run-time checks of m_splits
//===----------------------------------------------------------------------===//

TEST_F(InterpreterGroupedTest, MSplitsAreCheckedAtRunTime) {
  mlir::func::FuncOp linear = parse(R"mlir(
func.func @linear(%x: tensor<48x16xf32>, %m: tensor<3xi32>,
                  %w: tensor<3x16x16xf32>) -> tensor<48x16xf32> {
  %y = te.grouped_linear %x splits(%m) weight(%w)
      : (tensor<48x16xf32>, tensor<3xi32>, tensor<3x16x16xf32>)
        -> tensor<48x16xf32>
  return %y : tensor<48x16xf32>
}
)mlir",
                                    "linear");
  mlir::func::FuncOp linearFp8 = parse(R"mlir(
func.func @linear_fp8(%x: tensor<48x16xf32>, %m: tensor<3xi32>,
                      %w: tensor<3x16x16xf32>) -> tensor<48x16xf32> {
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<48x16xf32>, tensor<3xi32>, tensor<3x16x16xf32>)
        -> tensor<48x16xf32>
  return %y : tensor<48x16xf32>
}
)mlir",
                                       "linear_fp8");
  mlir::func::FuncOp quantize = parse(R"mlir(
func.func @quantize(%x: tensor<48x16xf32>, %s: tensor<3xf32>,
                    %m: tensor<3xi32>) -> tensor<16x48xf8E4M3FN> {
  %q, %a = te.grouped_quantize %x, %s, %m {transpose}
      : (tensor<48x16xf32>, tensor<3xf32>, tensor<3xi32>)
        -> (tensor<16x48xf8E4M3FN>, tensor<3xf32>)
  return %q : tensor<16x48xf8E4M3FN>
}
)mlir",
                                      "quantize");
  mlir::func::FuncOp scaled = parse(R"mlir(
func.func @scaled(%a: tensor<16x48xf8E5M2>, %b: tensor<16x48xf8E4M3FN>,
                  %s: tensor<3xf32>, %m: tensor<3xi32>) -> tensor<3x16x16xf32> {
  %y = te.grouped_scaled_matmul %a, %b, %s, %s, %m
      : (tensor<16x48xf8E5M2>, tensor<16x48xf8E4M3FN>, tensor<3xf32>,
         tensor<3xf32>, tensor<3xi32>) -> tensor<3x16x16xf32>
  return %y : tensor<3x16x16xf32>
}
)mlir",
                                    "scaled");
  mlir::func::FuncOp amax = parse(R"mlir(
func.func @amax(%x: tensor<48x16xf32>, %m: tensor<3xi32>) -> tensor<3xf32> {
  %a = te.grouped_amax %x, %m : (tensor<48x16xf32>, tensor<3xi32>) -> tensor<3xf32>
  return %a : tensor<3xf32>
}
)mlir",
                                  "amax");
  mlir::func::FuncOp biasGrad = parse(R"mlir(
func.func @bias_grad(%g: tensor<48x16xf32>, %m: tensor<3xi32>)
    -> tensor<3x16xf32> {
  %db = te.grouped_bias_grad %g, %m
      : (tensor<48x16xf32>, tensor<3xi32>) -> tensor<3x16xf32>
  return %db : tensor<3x16xf32>
}
)mlir",
                                      "bias_grad");
  ASSERT_TRUE(linear && linearFp8 && quantize && scaled && amax && biasGrad);
  Tensor x = randomLike({48, 16}), w = randomLike({3, 16, 16});
  Tensor s = Tensor({3}, {1.0, 2.0, 4.0});
  Tensor a = Tensor::zeros({16, 48}), b = Tensor::zeros({16, 48});
  auto m = [](std::vector<int64_t> splits) { return splitsTensor(splits); };

  // Negative and too many rows: every op.
  for (const auto &[splits, rule] :
       {std::pair(std::vector<int64_t>{16, -16, 32},
                  "'m_splits'[1] = -16 is negative"),
        std::pair(std::vector<int64_t>{16, 32, 16},
                  "'m_splits' sums to 64, more than the 48 rows")}) {
    SCOPED_TRACE(rule);
    EXPECT_THAT(runFailing(linear, {x, m(splits), w}), HasSubstr(rule));
    EXPECT_THAT(runFailing(linearFp8, {x, m(splits), w}), HasSubstr(rule));
    EXPECT_THAT(runFailing(quantize, {x, s, m(splits)}), HasSubstr(rule));
    EXPECT_THAT(runFailing(scaled, {a, b, s, m(splits)}), HasSubstr(rule));
    EXPECT_THAT(runFailing(amax, {x, m(splits)}), HasSubstr(rule));
    EXPECT_THAT(runFailing(biasGrad, {x, m(splits)}), HasSubstr(rule));
  }
  // One row too many, and a value that is no integer.
  EXPECT_THAT(runFailing(linear, {x, m({16, 16, 17}), w}),
              HasSubstr("'m_splits' sums to 49, more than the 48 rows"));
  EXPECT_THAT(runFailing(biasGrad, {x, m({0, 0, 49})}),
              HasSubstr("'m_splits' sums to 49, more than the 48 rows"));
  EXPECT_THAT(runFailing(linear, {x, Tensor({3}, {16, 2.5, 0}), w}),
              HasSubstr("'m_splits'[1] = 2.5"));

  // Not multiples of 16: refused where an FP8 GEMM reads the segments,
  // accepted by the high-precision ops (padding rows 40..47).
  Tensor unaligned = m({8, 24, 8});
  const char *rule = "'m_splits'[0] = 8 is not a multiple of 16";
  EXPECT_THAT(runFailing(linearFp8, {x, unaligned, w}), HasSubstr(rule));
  EXPECT_THAT(runFailing(quantize, {x, s, unaligned}), HasSubstr(rule));
  EXPECT_THAT(runFailing(scaled, {a, b, s, unaligned}), HasSubstr(rule));
  EXPECT_EQ(run(linear, {x, unaligned, w}).size(), 1u);
  EXPECT_EQ(run(amax, {x, unaligned}).size(), 1u);
  EXPECT_EQ(run(biasGrad, {x, unaligned}).size(), 1u);
  // The error names the op.
  EXPECT_THAT(runFailing(scaled, {a, b, s, unaligned}),
              HasSubstr("'te.grouped_scaled_matmul' op"));
}
