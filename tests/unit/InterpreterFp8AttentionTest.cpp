//===- InterpreterFp8AttentionTest.cpp - FP8 attention and te.dequantize --===//
//
// docs/fp8-attention.md's reference semantics. te.fp8_attention and
// te.fp8_attention_bwd on random FP8 operands against a naive float64
// computation written here from the definitions: q, k, v, dO and O
// dequantized by their scale inverses, the masked softmax, O = P V,
// amax_s = max P, amax_o = max |O|; dS = P (dP - rowsum(dO * O)) with
// amax_dp = max |dS| * softmax_scale (cuDNN's: the gradient of the raw
// q k^T) and the gradients' amaxes; FP8 results rounded with the table of
// Fp8TestUtils.h. Then against te.attention(_bwd) on te.dequantize'd
// operands followed by te.quantize; there, with one batch entry, a zero
// post-scale bias's gradient is dS itself, so te.amax of it times the
// softmax scale is amax_dp. te.dequantize is the exact product. (FP8
// attention takes no dropout: docs/fp8-attention.md.)
//
//===----------------------------------------------------------------------===//
#include "Fp8TestUtils.h"

#include <cfloat>

using namespace tejit::testing;
using mlir::te::AttnMaskType;
using mlir::te::QkvFormat;
using tejit::interp::Fp8Kind;

namespace {

/// One FP8 attention problem.
struct Fp8AttentionCase {
  std::string name;
  QkvFormat format;
  AttnMaskType maskType;
  int64_t batch, seqQ, seqKV, heads, groups, dim;
  double dropout = 0.0;
  /// The backward format: dO's and the gradients' FP8 type.
  const Fp8Type *gradType = &kE5M2;

  bool sbhd() const { return format == QkvFormat::sbhd; }
  bool hasMask() const {
    return maskType == AttnMaskType::padding ||
           maskType == AttnMaskType::padding_causal;
  }
  double scale() const { return 0.25; }

  llvm::SmallVector<int64_t> shape(int64_t seq, int64_t count) const {
    return sbhd() ? llvm::SmallVector<int64_t>{seq, batch, count, dim}
                  : llvm::SmallVector<int64_t>{batch, seq, count, dim};
  }

  std::string attributes(bool biasGrad = false) const {
    return "{attn_mask_type = #te.attn_mask_type<" +
           mlir::te::stringifyAttnMaskType(maskType).str() +
           ">, qkv_format = #te.qkv_format<" +
           mlir::te::stringifyQkvFormat(format).str() +
           ">, softmax_scale = 0.25 : f64, dropout = " +
           std::to_string(dropout) + " : f64, stream = 5 : i64" +
           (biasGrad ? ", bias_type = #te.attn_bias_type<post_scale_bias>, "
                       "bias_grad"
                     : "") +
           "}";
  }

  /// `text` with the case's types, mask and attributes substituted.
  std::string fill(std::string text) const {
    std::string mask = tensorType({batch, 1, 1, seqKV}, "i1");
    return substitute(
        std::move(text),
        {{"QG", tensorType(shape(seqQ, heads), gradType->name)},
         {"KVG", tensorType(shape(seqKV, groups), gradType->name)},
         {"QB", tensorType(shape(seqQ, heads), "bf16")},
         {"KVB", tensorType(shape(seqKV, groups), "bf16")},
         {"Q8", tensorType(shape(seqQ, heads), "f8E4M3FN")},
         {"KV8", tensorType(shape(seqKV, groups), "f8E4M3FN")},
         {"LSE", tensorType({batch, heads, seqQ})},
         {"BIAS", tensorType({1, heads, seqQ, seqKV}, "bf16")},
         {"S", "tensor<1xf32>"},
         {"MASKARG", hasMask() ? ", %mask: " + mask : ""},
         {"MASKTYPE", hasMask() ? ", " + mask : ""},
         {"MASKUSE", hasMask() ? "mask(%mask) " : ""},
         {"ATTRS", attributes()},
         {"DBIASATTRS", attributes(/*biasGrad=*/true)}});
  }

  /// @fwd(q, k, v, qkv_scale_inv, o_scale, [mask,] rng) -> (o, lse,
  /// amax_s, amax_o) and @bwd(dO, q, k, v, o, lse, qkv_scale_inv,
  /// o_scale_inv, dO_scale_inv, dp_scale, dp_scale_inv, dqkv_scale,
  /// [mask,] rng) -> (dq, dk, dv, amax_dp, amax_dq, amax_dk, amax_dv).
  std::string module() const {
    return fill(R"mlir(
func.func @fwd(%q: $Q8, %k: $KV8, %v: $KV8, %qkv_si: $S,
               %o_s: $S$MASKARG, %rng: tensor<2xi64>)
    -> ($Q8, $LSE, $S, $S) {
  %o, %lse, %amax_s, %amax_o = te.fp8_attention %q, %k, %v, %qkv_si,
      %o_s $MASKUSE rng(%rng) $ATTRS
      : ($Q8, $KV8, $KV8, $S, $S$MASKTYPE, tensor<2xi64>)
        -> ($Q8, $LSE, $S, $S)
  return %o, %lse, %amax_s, %amax_o : $Q8, $LSE, $S, $S
}
func.func @bwd(%do: $QG, %q: $Q8, %k: $KV8, %v: $KV8, %o: $Q8, %lse: $LSE,
               %qkv_si: $S, %o_si: $S, %do_si: $S,
               %dp_s: $S, %dp_si: $S, %dqkv_s: $S$MASKARG,
               %rng: tensor<2xi64>)
    -> ($QG, $KVG, $KVG, $S, $S, $S, $S) {
  %r:7 = te.fp8_attention_bwd %do, %q, %k, %v, %o, %lse, %qkv_si, %o_si,
      %do_si, %dp_s, %dp_si, %dqkv_s $MASKUSE rng(%rng) $ATTRS
      : ($QG, $Q8, $KV8, $KV8, $Q8, $LSE, $S, $S, $S, $S, $S,
         $S$MASKTYPE, tensor<2xi64>)
        -> ($QG, $KVG, $KVG, $S, $S, $S, $S)
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6
      : $QG, $KVG, $KVG, $S, $S, $S, $S
}
)mlir");
  }

  /// The same computations from te ops (one batch entry for the bias
  /// trick): @fwd_ref(q, k, v, qkv_scale_inv, o_scale, [mask,] rng) ->
  /// (o, lse, amax_o) and @bwd_ref(dO, q, k, v, o, lse, qkv_scale_inv,
  /// o_scale_inv, dO_scale_inv, dqkv_scale, [mask,] bias, rng) -> (dq, dk,
  /// dv, amax_dp, amax_dq, amax_dk, amax_dv).
  std::string referenceModule() const {
    return fill(R"mlir(
func.func @fwd_ref(%q: $Q8, %k: $KV8, %v: $KV8, %qkv_si: $S, %o_s: $S$MASKARG,
                   %rng: tensor<2xi64>) -> ($Q8, $LSE, $S) {
  %qd = te.dequantize %q, %qkv_si : $Q8, $S -> $QB
  %kd = te.dequantize %k, %qkv_si : $KV8, $S -> $KVB
  %vd = te.dequantize %v, %qkv_si : $KV8, $S -> $KVB
  %o, %lse = te.attention %qd, %kd, %vd $MASKUSE rng(%rng) $ATTRS
      : ($QB, $KVB, $KVB$MASKTYPE, tensor<2xi64>) -> ($QB, $LSE)
  %o8, %amax = te.quantize %o, %o_s : $QB, $S -> $Q8, $S
  return %o8, %lse, %amax : $Q8, $LSE, $S
}
func.func @bwd_ref(%do: $QG, %q: $Q8, %k: $KV8, %v: $KV8, %o: $Q8,
                   %lse: $LSE, %qkv_si: $S, %o_si: $S, %do_si: $S,
                   %dqkv_s: $S$MASKARG, %bias: $BIAS, %rng: tensor<2xi64>)
    -> ($QG, $KVG, $KVG, $S, $S, $S, $S) {
  %dod = te.dequantize %do, %do_si : $QG, $S -> $QB
  %qd = te.dequantize %q, %qkv_si : $Q8, $S -> $QB
  %kd = te.dequantize %k, %qkv_si : $KV8, $S -> $KVB
  %vd = te.dequantize %v, %qkv_si : $KV8, $S -> $KVB
  %od = te.dequantize %o, %o_si : $Q8, $S -> $QB
  %dq, %dk, %dv, %db = te.attention_bwd %dod, %qd, %kd, %vd, %od, %lse
      $MASKUSE rng(%rng) bias(%bias) $DBIASATTRS
      : ($QB, $QB, $KVB, $KVB, $QB, $LSE$MASKTYPE, tensor<2xi64>, $BIAS)
        -> ($QB, $KVB, $KVB, $BIAS)
  %dq8, %adq = te.quantize %dq, %dqkv_s : $QB, $S -> $QG, $S
  %dk8, %adk = te.quantize %dk, %dqkv_s : $KVB, $S -> $KVG, $S
  %dv8, %adv = te.quantize %dv, %dqkv_s : $KVB, $S -> $KVG, $S
  %adp = te.amax %db : $BIAS -> $S
  return %dq8, %dk8, %dv8, %adp, %adq, %adk, %adv
      : $QG, $KVG, $KVG, $S, $S, $S, $S
}
)mlir");
  }
};

void PrintTo(const Fp8AttentionCase &c, std::ostream *os) { *os << c.name; }

std::vector<Fp8AttentionCase> definitionCases() {
  using Mask = AttnMaskType;
  QkvFormat sbhd = QkvFormat::sbhd, bshd = QkvFormat::bshd;
  // clang-format off
  //  name, format, mask type, batch, s_q, s_kv, heads, groups, dim
  return {
      {"CausalGqaBshd", bshd, Mask::causal, 2, 4, 4, 4, 2, 16},
      {"NoMaskCrossSbhd", sbhd, Mask::no_mask, 2, 3, 5, 2, 2, 16},
      {"PaddingMqaSbhd", sbhd, Mask::padding, 2, 3, 4, 3, 1, 16},
      {"PaddingCausalE4M3Grads", bshd, Mask::padding_causal, 2, 4, 4, 2, 1,
       16, 0.0, &kE4M3},
  };
  // clang-format on
}

/// The scales of one run: float32 values, as meta slots hold.
struct Scales {
  double qkvInv = float(1.0 / 27.0), oScale = 60.0f, oInv = float(1.0 / 60.0),
         doInv = float(1.0 / 900.0), dqkvScale = 200.0f;
  // Read by nothing in the reference (the GPU's cast inside cuDNN).
  double dpScale = 4096.0f, dpInv = float(1.0 / 4096.0);
};

/// What the definitions give for a case.
struct Expected {
  Tensor o8, lse, dq8, dk8, dv8;
  double amaxS = 0, amaxO = 0, amaxDp = 0, amaxDq = 0, amaxDk = 0, amaxDv = 0;
};

/// `x * scaleInv` per element.
Tensor dequantized(const Tensor &x, double scaleInv) {
  Tensor result = x;
  for (double &value : result.data)
    value *= scaleInv;
  return result;
}

/// TE's cast of `x` with `scale` by the table of `type`, and max |x|.
Tensor castByTable(const Tensor &x, double scale, const Fp8Type &type,
                   double &amax) {
  std::vector<double> table = fp8Values(type.kind);
  Tensor result = x;
  amax = 0.0;
  for (double &value : result.data) {
    amax = std::max(amax, std::fabs(value));
    value = nearestFp8(table, float(float(value) * float(scale)));
  }
  return result;
}

bool isMasked(const Fp8AttentionCase &c, const Tensor *mask, int64_t b,
              int64_t i, int64_t j) {
  if (mask && mask->data[flatIndex(mask->shape, {b, 0, 0, j})] != 0.0)
    return true;
  bool causal = c.maskType == AttnMaskType::causal ||
                c.maskType == AttnMaskType::padding_causal;
  return causal && j > i;
}

/// The forward from (q8, k8, v8, [mask]); then, given the backward's dO8
/// (and the forward's o8 as computed here), the backward.
Expected reference(const Fp8AttentionCase &c, const Scales &s, const Tensor &q8,
                   const Tensor &k8, const Tensor &v8, const Tensor *mask,
                   const Tensor &do8) {
  Tensor q = dequantized(q8, s.qkvInv), k = dequantized(k8, s.qkvInv),
         v = dequantized(v8, s.qkvInv), dO = dequantized(do8, s.doInv);
  auto at = [&](const Tensor &t, int64_t b, int64_t pos, int64_t h, int64_t d) {
    return c.sbhd() ? flatIndex(t.shape, {pos, b, h, d})
                    : flatIndex(t.shape, {b, pos, h, d});
  };
  // Per row: the probabilities over the keys (empty when all are masked).
  auto probabilities = [&](int64_t b, int64_t h, int64_t i, double &lse) {
    int64_t g = h / (c.heads / c.groups);
    std::vector<double> score(c.seqKV, -kInf);
    double max = -kInf;
    for (int64_t j = 0; j < c.seqKV; ++j) {
      if (isMasked(c, mask, b, i, j))
        continue;
      double dot = 0.0;
      for (int64_t d = 0; d < c.dim; ++d)
        dot += q.data[at(q, b, i, h, d)] * k.data[at(k, b, j, g, d)];
      score[j] = c.scale() * dot;
      max = std::max(max, score[j]);
    }
    lse = max;
    if (max == -kInf)
      return std::vector<double>();
    double total = 0.0;
    for (double x : score)
      total += std::exp(x - max);
    lse = max + std::log(total);
    std::vector<double> prob(c.seqKV);
    for (int64_t j = 0; j < c.seqKV; ++j)
      prob[j] = std::exp(score[j] - max) / total;
    return prob;
  };

  Expected e;
  Tensor o = Tensor::zeros(q.shape);
  e.lse = Tensor::zeros({c.batch, c.heads, c.seqQ});
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.seqQ; ++i) {
        int64_t g = h / (c.heads / c.groups);
        double &lse = e.lse.data[(b * c.heads + h) * c.seqQ + i];
        std::vector<double> prob = probabilities(b, h, i, lse);
        for (int64_t j = 0; j < int64_t(prob.size()); ++j) {
          e.amaxS = std::max(e.amaxS, prob[j]);
          for (int64_t d = 0; d < c.dim; ++d)
            o.data[at(o, b, i, h, d)] += prob[j] * v.data[at(v, b, j, g, d)];
        }
      }
  e.o8 = castByTable(o, s.oScale, kE4M3, e.amaxO);

  // The backward reads O as the forward's FP8 output dequantized.
  Tensor oFp8 = dequantized(e.o8, s.oInv);
  Tensor dq = Tensor::zeros(q.shape), dk = Tensor::zeros(k.shape),
         dv = Tensor::zeros(v.shape);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.seqQ; ++i) {
        int64_t g = h / (c.heads / c.groups);
        double lse;
        std::vector<double> prob = probabilities(b, h, i, lse);
        if (prob.empty())
          continue;
        double rowDot = 0.0;
        for (int64_t d = 0; d < c.dim; ++d)
          rowDot += dO.data[at(dO, b, i, h, d)] * oFp8.data[at(o, b, i, h, d)];
        for (int64_t j = 0; j < c.seqKV; ++j) {
          double dProb = 0.0;
          for (int64_t d = 0; d < c.dim; ++d) {
            dProb += dO.data[at(dO, b, i, h, d)] * v.data[at(v, b, j, g, d)];
            dv.data[at(v, b, j, g, d)] += prob[j] * dO.data[at(dO, b, i, h, d)];
          }
          double dScore = prob[j] * (dProb - rowDot);
          e.amaxDp = std::max(e.amaxDp, std::fabs(dScore) * c.scale());
          for (int64_t d = 0; d < c.dim; ++d) {
            dq.data[at(q, b, i, h, d)] +=
                c.scale() * dScore * k.data[at(k, b, j, g, d)];
            dk.data[at(k, b, j, g, d)] +=
                c.scale() * dScore * q.data[at(q, b, i, h, d)];
          }
        }
      }
  e.dq8 = castByTable(dq, s.dqkvScale, *c.gradType, e.amaxDq);
  e.dk8 = castByTable(dk, s.dqkvScale, *c.gradType, e.amaxDk);
  e.dv8 = castByTable(dv, s.dqkvScale, *c.gradType, e.amaxDv);
  return e;
}

class Fp8AttentionTest : public InterpreterFp8OpsTest {
protected:
  /// Random FP8 values of `type` spread as normal(0, stddev) before the
  /// cast, the table's rounding.
  Tensor randomFp8Tensor(llvm::ArrayRef<int64_t> shape, const Fp8Type &type,
                         double stddev) {
    std::vector<double> table = fp8Values(type.kind);
    Tensor tensor = randomLike(shape, stddev);
    for (double &value : tensor.data)
      value = nearestFp8(table, value);
    return tensor;
  }

  /// A padding mask that hides about a third of the keys.
  Tensor randomMask(const Fp8AttentionCase &c) {
    Tensor mask = Tensor::zeros({c.batch, 1, 1, c.seqKV});
    std::bernoulli_distribution hide(1.0 / 3.0);
    for (double &value : mask.data)
      value = hide(rng) ? 1.0 : 0.0;
    return mask;
  }

  /// The arguments of a run: FP8 q, k, v, dO, the mask (or empty).
  struct Inputs {
    Tensor q8, k8, v8, do8, mask;
  };
  Inputs randomInputs(const Fp8AttentionCase &c) {
    Inputs in{
        randomFp8Tensor(c.shape(c.seqQ, c.heads), kE4M3, 27.0),
        randomFp8Tensor(c.shape(c.seqKV, c.groups), kE4M3, 27.0),
        randomFp8Tensor(c.shape(c.seqKV, c.groups), kE4M3, 27.0),
        // E4M3 dO spreads less, within its range.
        randomFp8Tensor(c.shape(c.seqQ, c.heads), *c.gradType,
                        c.gradType->kind == Fp8Kind::E4M3 ? 100.0 : 900.0),
        Tensor()};
    if (c.hasMask())
      in.mask = randomMask(c);
    return in;
  }

  /// Runs @fwd, then @bwd on its o and lse: the forward's four results
  /// followed by the backward's seven (empty when a run failed).
  std::vector<Tensor> runFp8(const Fp8AttentionCase &c, const Scales &s,
                             const Inputs &in, const Tensor &rngState) {
    mlir::func::FuncOp fwd = parse(c.module(), "fwd");
    if (!fwd)
      return {};
    auto bwd = modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
    std::vector<Tensor> args = {in.q8, in.k8, in.v8, slot(s.qkvInv),
                                slot(s.oScale)};
    if (c.hasMask())
      args.push_back(in.mask);
    args.push_back(rngState);
    std::vector<Tensor> outs = run(fwd, args);
    if (outs.size() != 4)
      return {};
    std::vector<Tensor> bwdArgs = {
        in.do8,        in.q8,           in.k8,          in.v8,
        outs[0],       outs[1],         slot(s.qkvInv), slot(s.oInv),
        slot(s.doInv), slot(s.dpScale), slot(s.dpInv),  slot(s.dqkvScale)};
    if (c.hasMask())
      bwdArgs.push_back(in.mask);
    bwdArgs.push_back(rngState);
    std::vector<Tensor> grads = run(bwd, bwdArgs);
    if (grads.size() != 7)
      return {};
    outs.insert(outs.end(), grads.begin(), grads.end());
    return outs;
  }
};

class Fp8AttentionDefinitionTest
    : public Fp8AttentionTest,
      public ::testing::WithParamInterface<Fp8AttentionCase> {};

} // namespace

TEST_P(Fp8AttentionDefinitionTest, MatchesTheDefinition) {
  const Fp8AttentionCase &c = GetParam();
  Scales s;
  Inputs in = randomInputs(c);
  std::vector<Tensor> r = runFp8(c, s, in, Tensor({2}, {7.0, 0.0}));
  ASSERT_EQ(r.size(), 11u);
  Expected e = reference(c, s, in.q8, in.k8, in.v8,
                         c.hasMask() ? &in.mask : nullptr, in.do8);
  // The casts: exact FP8 values (a last-bit difference of the float64 sums
  // changes a rounding only at a tie, which random data does not hit).
  EXPECT_TRUE(allClose(r[0], e.o8, 0, 0)) << "o";
  EXPECT_TRUE(allClose(r[1], e.lse)) << "softmax_lse";
  EXPECT_NEAR(r[2].data[0], e.amaxS, 1e-12) << "amax_s";
  EXPECT_NEAR(r[3].data[0], e.amaxO, 1e-12 * e.amaxO) << "amax_o";
  EXPECT_TRUE(allClose(r[4], e.dq8, 0, 0)) << "dq";
  EXPECT_TRUE(allClose(r[5], e.dk8, 0, 0)) << "dk";
  EXPECT_TRUE(allClose(r[6], e.dv8, 0, 0)) << "dv";
  EXPECT_NEAR(r[7].data[0], e.amaxDp, 1e-12 * e.amaxDp) << "amax_dp";
  EXPECT_NEAR(r[8].data[0], e.amaxDq, 1e-12 * e.amaxDq) << "amax_dq";
  EXPECT_NEAR(r[9].data[0], e.amaxDk, 1e-12 * e.amaxDk) << "amax_dk";
  EXPECT_NEAR(r[10].data[0], e.amaxDv, 1e-12 * e.amaxDv) << "amax_dv";
  // Not a weak test: the data reaches FP8 values well inside the range,
  // and every amax is positive.
  EXPECT_GT(maxAbs(r[0]), 16.0);
  EXPECT_GT(maxAbs(r[4]), 16.0);
  for (size_t i : {2, 3, 7, 8, 9, 10})
    EXPECT_GT(r[i].data[0], 0.0) << "result " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Fp8AttentionDefinitionTest, ::testing::ValuesIn(definitionCases()),
    [](const ::testing::TestParamInfo<Fp8AttentionCase> &info) {
      return info.param.name;
    });

// te.fp8_attention(_bwd) are te.attention(_bwd) on the dequantized
// operands followed by te.quantize.
TEST_F(Fp8AttentionTest, EqualsAttentionOnDequantizedOperands) {
  using Mask = AttnMaskType;
  // clang-format off
  const Fp8AttentionCase cases[] = {
      {"CausalGqa", QkvFormat::sbhd, Mask::causal, 1, 4, 4, 4, 2, 16},
      {"PaddingMqaCross", QkvFormat::bshd, Mask::padding, 1, 3, 5, 2, 1, 16},
      {"NoMaskE4M3Grads", QkvFormat::bshd, Mask::no_mask, 1, 5, 5, 2, 2, 16,
       0.0, &kE4M3},
  };
  // clang-format on
  for (const Fp8AttentionCase &c : cases) {
    SCOPED_TRACE(c.name);
    Scales s;
    Inputs in = randomInputs(c);
    Tensor rngState({2}, {12345.0, 6.0});
    std::vector<Tensor> r = runFp8(c, s, in, rngState);
    ASSERT_EQ(r.size(), 11u);
    mlir::func::FuncOp fwd = parse(c.referenceModule(), "fwd_ref");
    ASSERT_TRUE(fwd);
    auto bwd = modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd_ref");
    std::vector<Tensor> args = {in.q8, in.k8, in.v8, slot(s.qkvInv),
                                slot(s.oScale)};
    if (c.hasMask())
      args.push_back(in.mask);
    args.push_back(rngState);
    std::vector<Tensor> ref = run(fwd, args);
    ASSERT_EQ(ref.size(), 3u);
    EXPECT_TRUE(allClose(r[0], ref[0], 0, 0)) << "o";
    EXPECT_TRUE(allClose(r[1], ref[1], 0, 0)) << "softmax_lse";
    EXPECT_EQ(r[3].data[0], ref[2].data[0]) << "amax_o";
    // The backward at the fp8_attention's own output and statistics.
    std::vector<Tensor> bwdArgs = {
        in.do8, in.q8,          in.k8,        in.v8,         r[0],
        r[1],   slot(s.qkvInv), slot(s.oInv), slot(s.doInv), slot(s.dqkvScale)};
    if (c.hasMask())
      bwdArgs.push_back(in.mask);
    bwdArgs.push_back(Tensor::zeros({1, c.heads, c.seqQ, c.seqKV}));
    bwdArgs.push_back(rngState);
    std::vector<Tensor> grads = run(bwd, bwdArgs);
    ASSERT_EQ(grads.size(), 7u);
    for (size_t i = 0; i < 7; ++i)
      if (i != 3)
        EXPECT_TRUE(allClose(r[4 + i], grads[i], 0, 0)) << "result " << i;
    // amax_dp: dS's (the bias gradient's) times the softmax scale.
    EXPECT_EQ(r[7].data[0], grads[3].data[0] * c.scale()) << "amax_dp";
    EXPECT_GT(r[7].data[0], 0.0) << "amax_dp";
  }
}

TEST_F(InterpreterFp8OpsTest, DequantizeIsTheExactProduct) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<2x3x16xf8E5M2>, %s: tensor<1xf32>)
    -> (tensor<2x3x16xbf16>, tensor<2x3x16xf32>) {
  %a = te.dequantize %x, %s : tensor<2x3x16xf8E5M2>, tensor<1xf32>
      -> tensor<2x3x16xbf16>
  %b = te.dequantize %x, %s : tensor<2x3x16xf8E5M2>, tensor<1xf32>
      -> tensor<2x3x16xf32>
  return %a, %b : tensor<2x3x16xbf16>, tensor<2x3x16xf32>
}
)mlir");
  Tensor x = Tensor::zeros({2, 3, 16});
  for (double &value : x.data)
    value = randomFp8(Fp8Kind::E5M2);
  double scaleInv = float(1.0 / 3.0);
  std::vector<Tensor> out = run(f, {x, slot(scaleInv)});
  ASSERT_EQ(out.size(), 2u);
  Tensor expected = x;
  for (double &value : expected.data)
    value *= scaleInv;
  // Exact in double, and not rounded to the element type (as every
  // interpreter result).
  EXPECT_TRUE(allClose(out[0], expected, 0, 0));
  EXPECT_TRUE(allClose(out[1], expected, 0, 0));
}
