//===- InterpreterAttentionBiasTest.cpp - attention bias and ALiBi --------===//
//
// te.attention and te.attention_bwd with a post-scale bias of each of
// Transformer Engine's shapes and with ALiBi (vanilla and caller slopes),
// against a naive float64 definition written here (scores, softmax, the
// softmax backward and dbias = sum over the batch of dS), and their
// gradients (dq, and dbias, also under dropout) against central finite
// differences; and the layer ops honour their bias (a mask as a bias of
// -1e30, ALiBi as its bias matrix). docs/attention-bias.md is the contract.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"

#include "compiler/interpreter/Kernels.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

using namespace tejit::testing;
using mlir::te::AttnBiasType;
using mlir::te::AttnMaskType;
using mlir::te::QkvFormat;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// One te.attention problem with a bias.
struct BiasCase {
  std::string name;
  QkvFormat format;
  AttnMaskType maskType;
  int64_t batch, seqQ, seqKV, heads, groups, dim;
  AttnBiasType biasType;
  /// The bias's shape (post_scale_bias) or the slopes' (alibi; empty:
  /// vanilla slopes, no operand).
  llvm::SmallVector<int64_t> operandShape;
  double dropout = 0.0;

  bool sbhd() const { return format == QkvFormat::sbhd; }
  bool hasOperand() const { return !operandShape.empty(); }
  bool hasMask() const {
    return maskType == AttnMaskType::padding ||
           maskType == AttnMaskType::padding_causal ||
           maskType == AttnMaskType::padding_causal_bottom_right;
  }
  /// TE's 1hss bias, the one shape that takes a gradient.
  bool grad() const {
    return biasType == AttnBiasType::post_scale_bias && operandShape[0] == 1 &&
           operandShape[1] == heads;
  }
  double scale() const { return 0.5; }

  llvm::SmallVector<int64_t> shape(int64_t seq, int64_t count) const {
    return sbhd() ? llvm::SmallVector<int64_t>{seq, batch, count, dim}
                  : llvm::SmallVector<int64_t>{batch, seq, count, dim};
  }

  /// @fwd(q, k, v, [mask,] [bias or slopes,] rng) -> (o, lse) and
  /// @bwd(grad, q, k, v, o, lse, [mask,] [bias or slopes,] rng) -> (dq,
  /// dk, dv[, dbias]).
  std::string module() const {
    std::string mask = tensorType({batch, 1, 1, seqKV}, "i1");
    std::string operand = tensorType(operandShape);
    std::string extraArgs, extraTypes, uses;
    if (hasMask()) {
      extraArgs += ", %mask: " + mask;
      extraTypes += ", " + mask;
      uses += "mask(%mask) ";
    }
    uses += "rng(%rng) ";
    if (hasOperand())
      uses += biasType == AttnBiasType::alibi ? "alibi_slopes(%extra) "
                                              : "bias(%extra) ";
    std::string operandArg = hasOperand() ? ", %extra: " + operand : "";
    std::string operandType = hasOperand() ? ", " + operand : "";
    std::string dbias = grad() ? ", " + operand : "";
    return substitute(
        R"mlir(
func.func @fwd(%q: $Q, %k: $KV, %v: $KV$EXTRAARGS$OPARG, %rng: tensor<2xi64>)
    -> ($Q, $LSE) {
  %o, %lse = te.attention %q, %k, %v $USES $ATTRS
      : ($Q, $KV, $KV$EXTRATYPES, tensor<2xi64>$OPTYPE) -> ($Q, $LSE)
  return %o, %lse : $Q, $LSE
}
func.func @bwd(%g: $Q, %q: $Q, %k: $KV, %v: $KV, %o: $Q, %lse: $LSE$EXTRAARGS$OPARG,
               %rng: tensor<2xi64>) -> ($Q, $KV, $KV$DBIAS) {
  %r:$RESULTS = te.attention_bwd %g, %q, %k, %v, %o, %lse $USES $ATTRS
      : ($Q, $Q, $KV, $KV, $Q, $LSE$EXTRATYPES, tensor<2xi64>$OPTYPE)
        -> ($Q, $KV, $KV$DBIAS)
  return $RETURNED : $Q, $KV, $KV$DBIAS
}
)mlir",
        {{"Q", tensorType(shape(seqQ, heads))},
         {"KV", tensorType(shape(seqKV, groups))},
         {"LSE", tensorType({batch, heads, seqQ})},
         {"EXTRAARGS", extraArgs},
         {"EXTRATYPES", extraTypes},
         {"OPARG", operandArg},
         {"OPTYPE", operandType},
         {"DBIAS", dbias},
         {"RESULTS", grad() ? "4" : "3"},
         {"RETURNED", grad() ? "%r#0, %r#1, %r#2, %r#3" : "%r#0, %r#1, %r#2"},
         {"USES", uses},
         {"ATTRS", attributes()}});
  }

  std::string attributes() const {
    return "{attn_mask_type = #te.attn_mask_type<" +
           mlir::te::stringifyAttnMaskType(maskType).str() +
           ">, qkv_format = #te.qkv_format<" +
           mlir::te::stringifyQkvFormat(format).str() +
           ">, softmax_scale = 0.5 : f64, dropout = " +
           std::to_string(dropout) +
           " : f64, stream = 3 : i64, bias_type = #te.attn_bias_type<" +
           mlir::te::stringifyAttnBiasType(biasType).str() + ">" +
           (grad() ? ", bias_grad" : "") + "}";
  }

  /// Where the bias or slopes come among @fwd's arguments.
  unsigned operandIndex() const { return hasMask() ? 4 : 3; }
};

void PrintTo(const BiasCase &c, std::ostream *os) { *os << c.name; }

std::vector<BiasCase> biasCases() {
  using Mask = AttnMaskType;
  using Bias = AttnBiasType;
  QkvFormat sbhd = QkvFormat::sbhd, bshd = QkvFormat::bshd;
  // clang-format off
  //  name, format, mask type, batch, s_q, s_kv, heads, groups, dim, bias
  //  type, bias or slopes shape
  return {
      {"Bias1hssCausal", sbhd, Mask::causal, 2, 4, 4, 2, 2, 3,
       Bias::post_scale_bias, {1, 2, 4, 4}},
      {"BiasB1ssNoMaskCross", bshd, Mask::no_mask, 2, 3, 5, 2, 1, 2,
       Bias::post_scale_bias, {2, 1, 3, 5}},
      {"BiasBhssPadding", sbhd, Mask::padding, 2, 3, 4, 2, 2, 2,
       Bias::post_scale_bias, {2, 2, 3, 4}},
      {"Bias11ssPaddingCausal", bshd, Mask::padding_causal, 2, 4, 4, 2, 1, 2,
       Bias::post_scale_bias, {1, 1, 4, 4}},
      {"Bias1hssBottomRightCross", sbhd, Mask::causal_bottom_right, 1, 3, 5,
       3, 1, 2, Bias::post_scale_bias, {1, 3, 3, 5}},
      {"AlibiVanillaCausal", sbhd, Mask::causal, 2, 4, 4, 3, 3, 2,
       Bias::alibi, {}},
      {"AlibiVanillaNoMaskCross", bshd, Mask::no_mask, 1, 3, 5, 6, 2, 2,
       Bias::alibi, {}},
      {"AlibiHeadsPaddingCausalCross", sbhd, Mask::padding_causal, 2, 3, 5,
       2, 2, 2, Bias::alibi, {2}},
      {"AlibiBatchHeadsPadding", bshd, Mask::padding, 2, 4, 3, 2, 1, 2,
       Bias::alibi, {2, 2}},
      {"AlibiHeadsCausalBottomRight", sbhd, Mask::causal_bottom_right, 2, 3,
       4, 2, 1, 2, Bias::alibi, {2}},
  };
  // clang-format on
}

/// TE's vanilla ALiBi slopes, as get_alibi computes them: powers of
/// 2^(-8/n) for the first n = 2^floor(log2(h)) heads, then odd powers of
/// 2^(-4/n); stored as f32.
double teVanillaSlope(int64_t head, int64_t heads) {
  double n = std::exp2(std::floor(std::log2(double(heads))));
  double slope =
      double(head) < n
          ? std::pow(std::exp2(-8.0 / n), double(head + 1))
          : std::pow(std::exp2(-4.0 / n), double(2 * (head - int64_t(n)) + 1));
  return double(float(slope));
}

/// What the bias adds to score (b, h, i, j), from its definition.
double biasTerm(const BiasCase &c, const Tensor *operand, int64_t b, int64_t h,
                int64_t i, int64_t j) {
  if (c.biasType == AttnBiasType::post_scale_bias) {
    const Tensor &bias = *operand;
    return bias.data[flatIndex(bias.shape, {bias.shape[0] == 1 ? 0 : b,
                                            bias.shape[1] == 1 ? 0 : h, i, j})];
  }
  double slope = !operand                     ? teVanillaSlope(h, c.heads)
                 : operand->shape.size() == 1 ? operand->data[h]
                                              : operand->data[b * c.heads + h];
  // Bottom-right alignment but for the top-left causal mask types.
  bool topLeft = c.maskType == AttnMaskType::causal ||
                 c.maskType == AttnMaskType::padding_causal;
  int64_t offset = topLeft ? 0 : c.seqKV - c.seqQ;
  return -slope * double(std::abs(i - j + offset));
}

bool isMasked(const BiasCase &c, const Tensor *mask, int64_t b, int64_t i,
              int64_t j) {
  if (mask && mask->data[flatIndex(mask->shape, {b, 0, 0, j})] != 0.0)
    return true;
  switch (c.maskType) {
  case AttnMaskType::causal:
  case AttnMaskType::padding_causal:
    return j > i;
  case AttnMaskType::causal_bottom_right:
  case AttnMaskType::padding_causal_bottom_right:
    return j > i + c.seqKV - c.seqQ;
  default:
    return false;
  }
}

/// The forward results and the gradients at `dout`, from the definitions:
/// S = scale q.k + bias, P = softmax(S) over the visible keys, O = P v;
/// dP = dO v^T, dS = P (dP - sum_j P dP), dbias = sum over b of dS.
struct Expected {
  Tensor out, lse, dq, dk, dv, dbias;
};

Expected reference(const BiasCase &c, const std::vector<Tensor> &args,
                   const Tensor &dout) {
  const Tensor &q = args[0], &k = args[1], &v = args[2];
  const Tensor *mask = c.hasMask() ? &args[3] : nullptr;
  const Tensor *operand = c.hasOperand() ? &args[c.operandIndex()] : nullptr;
  auto at = [&](const Tensor &t, int64_t b, int64_t s, int64_t h, int64_t d) {
    return c.sbhd() ? flatIndex(t.shape, {s, b, h, d})
                    : flatIndex(t.shape, {b, s, h, d});
  };
  Expected e{
      Tensor::zeros(q.shape), Tensor::zeros({c.batch, c.heads, c.seqQ}),
      Tensor::zeros(q.shape), Tensor::zeros(k.shape),
      Tensor::zeros(v.shape), Tensor::zeros({1, c.heads, c.seqQ, c.seqKV})};
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.seqQ; ++i) {
        int64_t g = h / (c.heads / c.groups);
        std::vector<double> score(c.seqKV, -kInf), prob(c.seqKV, 0.0);
        double max = -kInf;
        for (int64_t j = 0; j < c.seqKV; ++j) {
          if (isMasked(c, mask, b, i, j))
            continue;
          double dot = 0.0;
          for (int64_t d = 0; d < c.dim; ++d)
            dot += q.data[at(q, b, i, h, d)] * k.data[at(k, b, j, g, d)];
          score[j] = c.scale() * dot + biasTerm(c, operand, b, h, i, j);
          max = std::max(max, score[j]);
        }
        int64_t row = (b * c.heads + h) * c.seqQ + i;
        e.lse.data[row] = max;
        if (max == -kInf)
          continue;
        double total = 0.0;
        for (int64_t j = 0; j < c.seqKV; ++j)
          total += std::exp(score[j] - max);
        e.lse.data[row] = max + std::log(total);
        std::vector<double> dProb(c.seqKV, 0.0);
        double rowDot = 0.0;
        for (int64_t j = 0; j < c.seqKV; ++j) {
          prob[j] = std::exp(score[j] - max) / total;
          for (int64_t d = 0; d < c.dim; ++d) {
            e.out.data[at(q, b, i, h, d)] +=
                prob[j] * v.data[at(v, b, j, g, d)];
            dProb[j] +=
                dout.data[at(q, b, i, h, d)] * v.data[at(v, b, j, g, d)];
            e.dv.data[at(v, b, j, g, d)] +=
                prob[j] * dout.data[at(q, b, i, h, d)];
          }
          rowDot += prob[j] * dProb[j];
        }
        for (int64_t j = 0; j < c.seqKV; ++j) {
          double dScore = prob[j] * (dProb[j] - rowDot);
          e.dbias.data[flatIndex(e.dbias.shape, {0, h, i, j})] += dScore;
          for (int64_t d = 0; d < c.dim; ++d) {
            e.dq.data[at(q, b, i, h, d)] +=
                c.scale() * dScore * k.data[at(k, b, j, g, d)];
            e.dk.data[at(k, b, j, g, d)] +=
                c.scale() * dScore * q.data[at(q, b, i, h, d)];
          }
        }
      }
  return e;
}

/// Runs the cases' modules.
class BiasFixture : public InterpreterTest {
protected:
  /// One case run: @fwd on random arguments, @bwd at a random output
  /// gradient `dout` (grads empty when a run failed).
  struct Run {
    mlir::func::FuncOp fwd;
    std::vector<Tensor> args, outs, grads;
    Tensor dout;
  };

  /// Runs `c`, with `rngState` ([seed, offset]) when given.
  Run runCase(const BiasCase &c, std::optional<Tensor> rngState = {}) {
    Run result;
    result.fwd = parse(c.module(), "fwd");
    if (!result.fwd)
      return result;
    auto bwd = modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
    result.args = randomArgs(result.fwd);
    if (rngState)
      result.args.back() = *rngState;
    result.outs = run(result.fwd, result.args);
    if (result.outs.size() != 2)
      return result;
    result.dout = randomLike(result.outs[0].shape);
    // (dout, q, k, v, o, lse, [mask,] [bias or slopes,] rng).
    std::vector<Tensor> bwdArgs = {result.dout,    result.args[0],
                                   result.args[1], result.args[2],
                                   result.outs[0], result.outs[1]};
    bwdArgs.insert(bwdArgs.end(), result.args.begin() + 3, result.args.end());
    result.grads = run(bwd, bwdArgs);
    EXPECT_EQ(result.grads.size(), c.grad() ? 4u : 3u);
    return result;
  }

  /// dq, and dbias when the case takes it, against central differences of
  /// the forward.
  void expectFiniteDifferences(const BiasCase &c, Run &r) {
    EXPECT_TRUE(gradientClose(
        r.grads[0], numericGradient(r.fwd, r.args, 0, {r.dout, Tensor()})))
        << "dq";
    if (c.grad())
      EXPECT_TRUE(gradientClose(
          r.grads[3],
          numericGradient(r.fwd, r.args, c.operandIndex(), {r.dout, Tensor()})))
          << "dbias";
  }
};

class AttentionBiasTest : public BiasFixture,
                          public ::testing::WithParamInterface<BiasCase> {};

} // namespace

TEST_P(AttentionBiasTest, MatchesTheDefinition) {
  const BiasCase &c = GetParam();
  Run r = runCase(c);
  ASSERT_EQ(r.grads.size(), c.grad() ? 4u : 3u);
  Expected expected = reference(c, r.args, r.dout);
  EXPECT_TRUE(allClose(r.outs[0], expected.out));
  EXPECT_TRUE(allClose(r.outs[1], expected.lse));
  EXPECT_TRUE(allClose(r.grads[0], expected.dq)) << "dq";
  EXPECT_TRUE(allClose(r.grads[1], expected.dk)) << "dk";
  EXPECT_TRUE(allClose(r.grads[2], expected.dv)) << "dv";
  if (c.grad())
    EXPECT_TRUE(allClose(r.grads[3], expected.dbias)) << "dbias";
}

TEST_P(AttentionBiasTest, GradientsMatchFiniteDifferences) {
  const BiasCase &c = GetParam();
  Run r = runCase(c);
  ASSERT_EQ(r.grads.size(), c.grad() ? 4u : 3u);
  expectFiniteDifferences(c, r);
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionBiasTest,
                         ::testing::ValuesIn(biasCases()),
                         [](const ::testing::TestParamInfo<BiasCase> &info) {
                           return info.param.name;
                         });

// With attention dropout, dbias is the gradient of the scores after the
// dropped probabilities' softmax backward: finite differences of the
// forward (whose masks the RNG state fixes) check it.
TEST_F(BiasFixture, GradientsUnderDropoutMatchFiniteDifferences) {
  BiasCase c{"Dropout",
             QkvFormat::bshd,
             AttnMaskType::causal,
             2,
             4,
             4,
             2,
             1,
             2,
             AttnBiasType::post_scale_bias,
             {1, 2, 4, 4},
             0.3};
  Run r = runCase(c, Tensor({2}, {12345.0, 6.0}));
  ASSERT_EQ(r.grads.size(), 4u);
  expectFiniteDifferences(c, r);
}

// TE's get_alibi slopes, spelled out: 8 heads give 2^-1 .. 2^-8; 12 heads
// add the odd powers of 2^-0.5 after those; 6 heads are 2^-2, 2^-4, 2^-6,
// 2^-8, then 2^-1, 2^-3.
TEST(AttentionBias, VanillaSlopesAreTransformerEngines) {
  using tejit::interp::vanillaAlibiSlope;
  for (int64_t k = 0; k < 8; ++k)
    EXPECT_EQ(vanillaAlibiSlope(k, 8), std::ldexp(1.0, -int(k + 1)));
  for (int64_t k = 0; k < 8; ++k)
    EXPECT_EQ(vanillaAlibiSlope(k, 12), std::ldexp(1.0, -int(k + 1)));
  for (int64_t k = 8; k < 12; ++k)
    EXPECT_EQ(vanillaAlibiSlope(k, 12),
              double(float(std::exp2(-0.5 - double(k - 8)))));
  const double six[] = {0x1p-2, 0x1p-4, 0x1p-6, 0x1p-8, 0x1p-1, 0x1p-3};
  for (int64_t k = 0; k < 6; ++k)
    EXPECT_EQ(vanillaAlibiSlope(k, 6), six[k]);
  EXPECT_EQ(vanillaAlibiSlope(0, 1), 0x1p-8);
}

//===----------------------------------------------------------------------===//
// Layer ops: each honours its bias (an arbitrary mask as a bias of -1e30
// where masked gives the masked attention; ALiBi is its bias matrix)
//===----------------------------------------------------------------------===//

namespace {

/// An i1 mask `shape` [b or 1, h or 1, s_q, s_kv] with random entries but
/// the diagonal visible (no row fully masked), and the bias that masks the
/// same keys: -1e30 where masked, 0 elsewhere.
std::pair<Tensor, Tensor> maskAndBias(llvm::ArrayRef<int64_t> shape,
                                      std::mt19937_64 &rng) {
  Tensor mask = Tensor::zeros(shape), bias = Tensor::zeros(shape);
  for (size_t at = 0; at < mask.data.size(); ++at) {
    int64_t j = int64_t(at) % shape[3], i = int64_t(at) / shape[3] % shape[2];
    mask.data[at] = i != j && rng() % 2 == 0 ? 1.0 : 0.0;
    bias.data[at] = mask.data[at] != 0.0 ? -1e30 : 0.0;
  }
  return {mask, bias};
}

const char *kDpaMaskedOrBiased = R"mlir(
func.func @masked(%q: tensor<3x2x2x4xf32>, %m: tensor<2x2x3x3xi1>)
    -> tensor<3x2x8xf32> {
  %o = te.dot_product_attention %q, %q, %q mask(%m)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<3x2x2x4xf32>, tensor<3x2x2x4xf32>, tensor<3x2x2x4xf32>,
         tensor<2x2x3x3xi1>) -> tensor<3x2x8xf32>
  return %o : tensor<3x2x8xf32>
}
func.func @biased(%q: tensor<3x2x2x4xf32>, %b: tensor<2x2x3x3xf32>)
    -> tensor<3x2x8xf32> {
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      {attn_mask_type = #te.attn_mask_type<no_mask>,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<3x2x2x4xf32>, tensor<3x2x2x4xf32>, tensor<3x2x2x4xf32>,
         tensor<2x2x3x3xf32>) -> tensor<3x2x8xf32>
  return %o : tensor<3x2x8xf32>
}
)mlir";

const char *kMhaMaskedOrBiased = R"mlir(
func.func @masked(%x: tensor<3x2x8xf32>, %wqkv: tensor<24x8xf32>,
                  %wo: tensor<8x8xf32>, %m: tensor<2x1x3x3xi1>)
    -> tensor<3x2x8xf32> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) mask(%m)
      {num_attention_heads = 2 : i64, attention_dropout = 0.0 : f64,
       attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<3x2x8xf32>, tensor<24x8xf32>, tensor<8x8xf32>,
         tensor<2x1x3x3xi1>) -> tensor<3x2x8xf32>
  return %y : tensor<3x2x8xf32>
}
func.func @biased(%x: tensor<3x2x8xf32>, %wqkv: tensor<24x8xf32>,
                  %wo: tensor<8x8xf32>, %b: tensor<2x1x3x3xf32>)
    -> tensor<3x2x8xf32> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      core_attention_bias(%b)
      {num_attention_heads = 2 : i64, attention_dropout = 0.0 : f64,
       attn_mask_type = #te.attn_mask_type<no_mask>,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<3x2x8xf32>, tensor<24x8xf32>, tensor<8x8xf32>,
         tensor<2x1x3x3xf32>) -> tensor<3x2x8xf32>
  return %y : tensor<3x2x8xf32>
}
)mlir";

class LayerBiasTest : public InterpreterTest {
protected:
  /// @masked(args..., mask) and @biased(args..., bias) of `source` agree.
  void expectMaskIsBias(const char *source, llvm::ArrayRef<int64_t> maskShape) {
    mlir::func::FuncOp masked = parse(source, "masked");
    ASSERT_TRUE(masked);
    auto biased = modules.back()->lookupSymbol<mlir::func::FuncOp>("biased");
    std::vector<Tensor> args = randomArgs(masked);
    auto [mask, bias] = maskAndBias(maskShape, rng);
    args.back() = mask;
    std::vector<Tensor> expected = run(masked, args);
    args.back() = bias;
    std::vector<Tensor> actual = run(biased, args);
    ASSERT_EQ(actual.size(), 1u);
    ASSERT_EQ(expected.size(), 1u);
    EXPECT_TRUE(allClose(actual[0], expected[0]));
  }
};

} // namespace

TEST_F(LayerBiasTest, DotProductAttentionAddsItsBias) {
  expectMaskIsBias(kDpaMaskedOrBiased, {2, 2, 3, 3});
}

TEST_F(LayerBiasTest, MultiheadAttentionAddsItsBias) {
  expectMaskIsBias(kMhaMaskedOrBiased, {2, 1, 3, 3});
}

// A cross-attention block (3 queries, 5 keys: ALiBi's offset is 2) with
// the caller's [b, h] slopes equals the block with their bias matrix
// -slope[b, h] |i - j + 2| as a bhss post-scale bias.
TEST_F(LayerBiasTest, AlibiIsItsBiasMatrix) {
  mlir::func::FuncOp alibi = parse(R"mlir(
func.func @alibi(%x: tensor<3x2x8xf32>, %enc: tensor<5x2x8xf32>,
                 %wq: tensor<8x8xf32>, %wkv: tensor<16x8xf32>,
                 %wo: tensor<8x8xf32>, %s: tensor<2x2xf32>)
    -> tensor<3x2x8xf32> {
  %y = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) alibi_slopes(%s)
      {num_attention_heads = 2 : i64, attention_dropout = 0.0 : f64,
       attn_mask_type = #te.attn_mask_type<no_mask>,
       core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<3x2x8xf32>, tensor<5x2x8xf32>, tensor<8x8xf32>,
         tensor<16x8xf32>, tensor<8x8xf32>, tensor<2x2xf32>)
        -> tensor<3x2x8xf32>
  return %y : tensor<3x2x8xf32>
}
func.func @biased(%x: tensor<3x2x8xf32>, %enc: tensor<5x2x8xf32>,
                  %wq: tensor<8x8xf32>, %wkv: tensor<16x8xf32>,
                  %wo: tensor<8x8xf32>, %b: tensor<2x2x3x5xf32>)
    -> tensor<3x2x8xf32> {
  %y = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) core_attention_bias(%b)
      {num_attention_heads = 2 : i64, attention_dropout = 0.0 : f64,
       attn_mask_type = #te.attn_mask_type<no_mask>,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<3x2x8xf32>, tensor<5x2x8xf32>, tensor<8x8xf32>,
         tensor<16x8xf32>, tensor<8x8xf32>, tensor<2x2x3x5xf32>)
        -> tensor<3x2x8xf32>
  return %y : tensor<3x2x8xf32>
}
)mlir",
                                   "alibi");
  ASSERT_TRUE(alibi);
  auto biased = modules.back()->lookupSymbol<mlir::func::FuncOp>("biased");
  std::vector<Tensor> args = randomArgs(alibi);
  std::vector<Tensor> expectedArgs = args;
  const Tensor &slopes = args.back();
  Tensor bias = Tensor::zeros({2, 2, 3, 5});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j)
          bias.data[flatIndex(bias.shape, {b, h, i, j})] =
              -slopes.data[b * 2 + h] * double(std::abs(i - j + 2));
  expectedArgs.back() = bias;
  std::vector<Tensor> actual = run(alibi, args);
  std::vector<Tensor> expected = run(biased, expectedArgs);
  ASSERT_EQ(actual.size(), 1u);
  ASSERT_EQ(expected.size(), 1u);
  EXPECT_TRUE(allClose(actual[0], expected[0]));
}
