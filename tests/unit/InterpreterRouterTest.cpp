//===- InterpreterRouterTest.cpp - the MoE router ops ---------------------===//
//
// The interpreter's te.router_* ops (docs/router.md) against a float64
// reference written another way: an expert (or group) is chosen when
// fewer than k others come before it (larger value, then lower index);
// group scores by sorting a group's values. Gradients by central
// differences of the forward, for softmax (pre and post), sigmoid with
// and without an expert bias, groups and a scaling factor; the aux-loss
// scores and the load-balancing loss and their gradients.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace tejit::testing;

namespace {

struct Config {
  int64_t tokens = 5, experts = 16, topk = 4, groups = 0, groupTopk = 0;
  bool sigmoid = false, pre = false, bias = false;
  double scale = 1.0;
};

std::string type(int64_t t, int64_t e, const char *element) {
  return llvm::formatv("tensor<{0}x{1}x{2}>", t, e, element).str();
}

std::string topkAttrs(const Config &c) {
  std::string text =
      llvm::formatv("topk = {0}, use_pre_softmax = {1}, scaling_factor = {2:e}"
                    ", score_function = \"{3}\"",
                    c.topk, c.pre ? "true" : "false", c.scale,
                    c.sigmoid ? "sigmoid" : "softmax")
          .str();
  if (c.groupTopk > 0)
    text += llvm::formatv(", num_groups = {0}, group_topk = {1}", c.groups,
                          c.groupTopk)
                .str();
  return text;
}

std::string forwardIr(const Config &c) {
  std::string x = type(c.tokens, c.experts, "f32");
  std::string m = type(c.tokens, c.experts, "i1");
  std::string b = llvm::formatv("tensor<{0}xf32>", c.experts).str();
  return llvm::formatv(
             "func.func @f(%x: {0}{1}) -> ({0}, {2}, {0}) {{\n"
             "  %p, %m, %s = te.router_topk %x{3} {{{4}} : ({0}{5}) -> ({0}, "
             "{2}, {0})\n  return %p, %m, %s : {0}, {2}, {0}\n}\n",
             x, c.bias ? ", %b: " + b : "", m, c.bias ? " bias(%b)" : "",
             topkAttrs(c), c.bias ? ", " + b : "")
      .str();
}

std::string backwardIr(const Config &c) {
  std::string x = type(c.tokens, c.experts, "f32");
  std::string m = type(c.tokens, c.experts, "i1");
  return llvm::formatv("func.func @b(%m: {1}, %s: {0}, %g: {0}) -> {0} {{\n"
                       "  %d = te.router_topk_bwd %m, %s, %g {{topk = {2}, "
                       "use_pre_softmax = {3}, scaling_factor = {4:e}, "
                       "score_function = \"{5}\"} : ({1}, {0}, {0}) -> {0}\n"
                       "  return %d : {0}\n}\n",
                       x, m, c.topk, c.pre ? "true" : "false", c.scale,
                       c.sigmoid ? "sigmoid" : "softmax")
      .str();
}

/// Whether the value at `i` is among the `k` first of `v` (larger, then
/// lower index).
bool amongFirst(const std::vector<double> &v, size_t i, int64_t k) {
  int64_t before = 0;
  for (size_t j = 0; j < v.size(); ++j)
    before += v[j] > v[i] || (v[j] == v[i] && j < i);
  return before < k;
}

/// The expected probs of one token row.
std::vector<double> referenceRow(const Config &c, const double *x,
                                 const double *bias) {
  int64_t e = c.experts;
  std::vector<double> score(x, x + e);
  if (c.sigmoid)
    for (double &s : score)
      s = 1 / (1 + std::exp(-s));
  if (!c.sigmoid && c.pre) {
    double sum = 0;
    for (double v : score)
      sum += std::exp(v);
    for (double &s : score)
      s = std::exp(s) / sum;
  }
  std::vector<double> select = score;
  for (int64_t i = 0; bias && i < e; ++i)
    select[i] += bias[i];
  if (c.groupTopk > 0) {
    int64_t size = e / c.groups;
    std::vector<double> groupScore(c.groups);
    for (int64_t g = 0; g < c.groups; ++g) {
      std::vector<double> part(select.begin() + g * size,
                               select.begin() + (g + 1) * size);
      std::sort(part.begin(), part.end(), std::greater<>());
      for (int64_t j = 0; j < c.topk / c.groupTopk; ++j)
        groupScore[g] += part[j];
    }
    for (int64_t i = 0; i < e; ++i)
      if (!amongFirst(groupScore, i / size, c.groupTopk))
        select[i] = -INFINITY;
  }
  std::vector<double> probs(e, 0.0);
  double sum = 0;
  for (int64_t i = 0; i < e; ++i)
    if (amongFirst(select, i, c.topk)) {
      probs[i] = c.sigmoid || c.pre ? score[i] : std::exp(score[i]);
      sum += probs[i];
    }
  double divide = !c.sigmoid && !c.pre      ? sum
                  : c.sigmoid && c.topk > 1 ? sum + 1e-20
                                            : 1.0;
  for (double &p : probs)
    p *= c.scale / divide;
  return probs;
}

std::vector<Config> configs() {
  std::vector<Config> all;
  for (bool pre : {false, true}) {
    Config c;
    c.pre = pre;
    all.push_back(c);
  }
  Config sigmoid;
  sigmoid.sigmoid = true, sigmoid.scale = 2.5;
  all.push_back(sigmoid);
  sigmoid.bias = true;
  all.push_back(sigmoid);
  sigmoid.groups = 4, sigmoid.groupTopk = 2;
  all.push_back(sigmoid);
  Config one;
  one.sigmoid = true, one.topk = 1;
  all.push_back(one);
  Config grouped;
  grouped.pre = true, grouped.groups = 8, grouped.groupTopk = 4;
  all.push_back(grouped);
  return all;
}

class InterpreterRouterTest : public InterpreterTest {};

TEST_F(InterpreterRouterTest, TopkMatchesReference) {
  for (const Config &c : configs()) {
    SCOPED_TRACE(forwardIr(c));
    mlir::func::FuncOp f = parse(forwardIr(c));
    Tensor x = randomLike({c.tokens, c.experts}, 2.0);
    Tensor b = randomLike({c.experts}, 0.5);
    std::vector<Tensor> args = {x};
    if (c.bias)
      args.push_back(b);
    std::vector<Tensor> out = run(f, args);
    ASSERT_EQ(out.size(), 3u);
    for (int64_t t = 0; t < c.tokens; ++t) {
      std::vector<double> row = referenceRow(c, &x.data[t * c.experts],
                                             c.bias ? b.data.data() : nullptr);
      int64_t chosen = 0;
      for (int64_t i = 0; i < c.experts; ++i) {
        EXPECT_NEAR(out[0].data[t * c.experts + i], row[i], 1e-12);
        EXPECT_EQ(out[1].data[t * c.experts + i], row[i] != 0 ? 1.0 : 0.0);
        chosen += out[1].data[t * c.experts + i] != 0;
      }
      EXPECT_EQ(chosen, c.topk);
    }
  }
}

TEST_F(InterpreterRouterTest, TiesGoToTheLowerExpert) {
  Config c;
  c.tokens = 1, c.topk = 3;
  mlir::func::FuncOp f = parse(forwardIr(c));
  std::vector<Tensor> out = run(f, {Tensor::zeros({1, c.experts})});
  ASSERT_EQ(out.size(), 3u);
  for (int64_t i = 0; i < c.experts; ++i)
    EXPECT_EQ(out[1].data[i], i < 3 ? 1.0 : 0.0) << "expert " << i;
}

TEST_F(InterpreterRouterTest, TopkGradientMatchesFiniteDifferences) {
  for (const Config &c : configs()) {
    SCOPED_TRACE(forwardIr(c));
    mlir::func::FuncOp f = parse(forwardIr(c));
    mlir::func::FuncOp b = parse(backwardIr(c), "b");
    std::vector<Tensor> args = {randomLike({c.tokens, c.experts}, 2.0)};
    if (c.bias)
      args.push_back(randomLike({c.experts}, 0.5));
    std::vector<Tensor> out = run(f, args);
    ASSERT_EQ(out.size(), 3u);
    Tensor weights = randomLike({c.tokens, c.experts});
    std::vector<Tensor> grad = run(b, {out[1], out[2], weights});
    ASSERT_EQ(grad.size(), 1u);
    EXPECT_TRUE(
        gradientClose(grad[0], numericGradient(f, args, 0, {weights}), 1e-7));
  }
}

std::string auxIr(int64_t t, int64_t e, bool sigmoid) {
  std::string x = type(t, e, "f32"), m = type(t, e, "i1");
  const char *function = sigmoid ? "sigmoid" : "softmax";
  return llvm::formatv(
             "func.func @f(%x: {0}) -> ({0}, {1}, {0}) {{\n"
             "  %m, %s, %v = te.router_aux_scores %x {{topk = 2, "
             "score_function = \"{2}\"} : ({0}) -> ({1}, {0}, {0})\n"
             "  return %s, %m, %v : {0}, {1}, {0}\n}\n"
             "func.func @b(%v: {0}, %g: {0}) -> {0} {{\n"
             "  %d = te.router_aux_scores_bwd %v, %g {{score_function = "
             "\"{2}\"} : ({0}, {0}) -> {0}\n  return %d : {0}\n}\n",
             x, m, function)
      .str();
}

TEST_F(InterpreterRouterTest, AuxScoresAndGradient) {
  constexpr int64_t t = 4, e = 10;
  for (bool sigmoid : {false, true}) {
    std::string text = auxIr(t, e, sigmoid);
    SCOPED_TRACE(text);
    mlir::func::FuncOp f = parse(text), b = parse(text, "b");
    Tensor x = randomLike({t, e}, 2.0);
    std::vector<Tensor> out = run(f, {x});
    ASSERT_EQ(out.size(), 3u);
    for (int64_t r = 0; r < t; ++r) {
      std::vector<double> s(&x.data[r * e], &x.data[(r + 1) * e]);
      double sum = 0;
      for (double &v : s)
        sum += v = sigmoid ? 1 / (1 + std::exp(-v)) : std::exp(v);
      for (int64_t i = 0; i < e; ++i) {
        double score = s[i] / (sigmoid ? sum + 1e-20 : sum);
        EXPECT_NEAR(out[0].data[r * e + i], score, 1e-12);
        EXPECT_EQ(out[1].data[r * e + i], amongFirst(s, i, 2) ? 1.0 : 0.0);
      }
    }
    Tensor weights = randomLike({t, e});
    std::vector<Tensor> grad = run(b, {out[2], weights});
    ASSERT_EQ(grad.size(), 1u);
    EXPECT_TRUE(
        gradientClose(grad[0], numericGradient(f, {x}, 0, {weights}), 1e-7));
  }
}

TEST_F(InterpreterRouterTest, AuxLossAndGradient) {
  const char *text = R"(
func.func @f(%p: tensor<3x4xf32>, %c: tensor<4xi64>) -> tensor<1xf32> {
  %l = te.router_aux_loss %p, %c {total_num_tokens = 6, num_experts = 8,
      topk = 2, coeff = 0.5} : (tensor<3x4xf32>, tensor<4xi64>) -> tensor<1xf32>
  return %l : tensor<1xf32>
}
func.func @b(%c: tensor<4xi64>, %g: tensor<1xf32>) -> tensor<3x4xf32> {
  %d = te.router_aux_loss_bwd %c, %g {total_num_tokens = 6, num_experts = 8,
      topk = 2, coeff = 0.5} : (tensor<4xi64>, tensor<1xf32>) -> tensor<3x4xf32>
  return %d : tensor<3x4xf32>
}
)";
  mlir::func::FuncOp f = parse(text), b = parse(text, "b");
  Tensor p = randomLike({3, 4});
  Tensor counts({4}, {5, 0, 7, 12});
  std::vector<Tensor> out = run(f, {p, counts});
  ASSERT_EQ(out.size(), 1u);
  double expected = 0;
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t t = 0; t < 3; ++t)
      expected += p.data[t * 4 + e] * counts.data[e];
  expected *= 8 * 0.5 / (2 * 36.0);
  EXPECT_NEAR(out[0].data[0], expected, 1e-12);
  Tensor g({1}, {1.5});
  std::vector<Tensor> grad = run(b, {counts, g});
  ASSERT_EQ(grad.size(), 1u);
  EXPECT_TRUE(
      gradientClose(grad[0], numericGradient(f, {p, counts}, 0, {g}), 1e-7));
}

} // namespace
