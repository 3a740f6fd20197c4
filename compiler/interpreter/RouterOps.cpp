//===- RouterOps.cpp - the interpreter's MoE router ops -------------------===//
//
// te.router_topk, te.router_aux_scores, te.router_aux_loss and their
// backward ops (docs/router.md), in double precision: the reference the
// generated kernels are checked against. Top-k orders by value, then by
// the lower index, as the kernels do.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Frame.h"

#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace tejit::interp;
namespace te = mlir::te;

namespace {

constexpr double kEpsilon = 1e-20;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The indices of the `k` largest of `values`, largest first; a tie goes
/// to the lower index.
std::vector<int64_t> topIndices(ArrayRef<double> values, int64_t k) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return values[a] > values[b]; });
  order.resize(k);
  return order;
}

std::vector<double> softmax(ArrayRef<double> x) {
  double max = -kInf, sum = 0;
  for (double v : x)
    max = std::max(max, v);
  std::vector<double> out(x.size());
  for (auto [o, v] : llvm::zip(out, x))
    sum += o = std::exp(v - max);
  for (double &o : out)
    o /= sum;
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// Group-limited selection (DeepSeek-V3): `values` outside the
/// `groupTopk` groups of the largest sums of their top `perGroup` values
/// become -inf.
void keepBestGroups(std::vector<double> &values, int64_t groups,
                    int64_t groupTopk, int64_t perGroup) {
  int64_t size = static_cast<int64_t>(values.size()) / groups;
  std::vector<double> scores(groups);
  for (int64_t g = 0; g < groups; ++g) {
    ArrayRef<double> group(values.data() + g * size, size);
    for (int64_t i : topIndices(group, perGroup))
      scores[g] += group[i];
  }
  std::vector<bool> kept(groups);
  for (int64_t g : topIndices(scores, groupTopk))
    kept[g] = true;
  for (int64_t e = 0; e < static_cast<int64_t>(values.size()); ++e)
    if (!kept[e / size])
      values[e] = -kInf;
}

} // namespace

static LogicalResult runOp(te::RouterTopkOp op, Frame &frame) {
  const Tensor &logits = frame.get(op.getLogits());
  const Tensor *bias = frame.getOptional(op.getExpertBias());
  int64_t rows = logits.shape[0], experts = logits.shape[1];
  auto topk = static_cast<int64_t>(op.getTopk());
  auto groupTopk = static_cast<int64_t>(op.getGroupTopk());
  bool sigmoidScores = op.getScoreFunction() == "sigmoid";
  bool pre = op.getUsePreSoftmax();
  double scale = op.getScalingFactor().convertToDouble();
  Tensor probs = Tensor::zeros({rows, experts});
  Tensor map = Tensor::zeros({rows, experts});
  Tensor saved = Tensor::zeros({rows, experts});
  for (int64_t t = 0; t < rows; ++t) {
    ArrayRef<double> x(&logits.data[t * experts], experts);
    std::vector<double> scores(x.begin(), x.end());
    if (sigmoidScores)
      for (double &s : scores)
        s = sigmoid(s);
    else if (pre)
      scores = softmax(x);
    std::vector<double> selection = scores;
    if (bias)
      for (int64_t e = 0; e < experts; ++e)
        selection[e] += bias->data[e];
    if (groupTopk > 0)
      keepBestGroups(selection, static_cast<int64_t>(op.getNumGroups()),
                     groupTopk, topk / groupTopk);
    std::vector<int64_t> chosen = topIndices(selection, topk);
    std::vector<double> p(topk);
    for (int64_t i = 0; i < topk; ++i)
      p[i] = scores[chosen[i]];
    if (!sigmoidScores && !pre)
      p = softmax(p);
    if (sigmoidScores && topk > 1) {
      double sum = std::accumulate(p.begin(), p.end(), 0.0);
      for (double &v : p)
        v /= sum + kEpsilon;
    }
    double *savedRow = &saved.data[t * experts];
    if (sigmoidScores || pre)
      std::copy(scores.begin(), scores.end(), savedRow);
    for (int64_t i = 0; i < topk; ++i) {
      probs.data[t * experts + chosen[i]] = scale * p[i];
      map.data[t * experts + chosen[i]] = 1;
      if (!sigmoidScores && !pre)
        savedRow[chosen[i]] = p[i];
    }
  }
  if (failed(frame.set(op, op.getProbs(), std::move(probs))) ||
      failed(frame.set(op, op.getRoutingMap(), std::move(map))))
    return failure();
  return frame.set(op, op.getSaved(), std::move(saved));
}

/// The gradient through s -> s / (sum over `mask` of s + ε), in place on
/// `g` (entries outside the mask become 0).
static void normalizationBackward(MutableArrayRef<double> g, ArrayRef<double> s,
                                  ArrayRef<double> mask) {
  double sum = 0, dot = 0;
  for (size_t e = 0; e < g.size(); ++e)
    if (mask[e] != 0) {
      sum += s[e];
      dot += g[e] * s[e];
    }
  double denominator = sum + kEpsilon;
  for (size_t e = 0; e < g.size(); ++e)
    g[e] = mask[e] != 0 ? g[e] / denominator - dot / (denominator * denominator)
                        : 0.0;
}

/// The gradient through a softmax whose outputs are `s`, in place on `g`,
/// over the entries of `mask` (others become 0).
static void softmaxBackward(MutableArrayRef<double> g, ArrayRef<double> s,
                            ArrayRef<double> mask) {
  double dot = 0;
  for (size_t e = 0; e < g.size(); ++e)
    if (mask[e] != 0)
      dot += g[e] * s[e];
  for (size_t e = 0; e < g.size(); ++e)
    g[e] = mask[e] != 0 ? s[e] * (g[e] - dot) : 0.0;
}

static LogicalResult runOp(te::RouterTopkBwdOp op, Frame &frame) {
  const Tensor &map = frame.get(op.getRoutingMap());
  const Tensor &saved = frame.get(op.getSaved());
  const Tensor &gradProbs = frame.get(op.getGradProbs());
  int64_t rows = map.shape[0], experts = map.shape[1];
  bool sigmoidScores = op.getScoreFunction() == "sigmoid";
  bool pre = op.getUsePreSoftmax();
  double scale = op.getScalingFactor().convertToDouble();
  std::vector<double> all(experts, 1.0);
  Tensor grad = Tensor::zeros({rows, experts});
  for (int64_t t = 0; t < rows; ++t) {
    ArrayRef<double> mask(&map.data[t * experts], experts);
    ArrayRef<double> s(&saved.data[t * experts], experts);
    MutableArrayRef<double> g(&grad.data[t * experts], experts);
    for (int64_t e = 0; e < experts; ++e)
      g[e] = mask[e] != 0 ? scale * gradProbs.data[t * experts + e] : 0.0;
    if (sigmoidScores && op.getTopk() > 1)
      normalizationBackward(g, s, mask);
    if (!sigmoidScores)
      softmaxBackward(g, s, pre ? ArrayRef<double>(all) : mask);
    if (sigmoidScores)
      for (int64_t e = 0; e < experts; ++e)
        g[e] *= s[e] * (1 - s[e]);
  }
  return frame.set(op, op.getGradLogits(), std::move(grad));
}

static LogicalResult runOp(te::RouterAuxScoresOp op, Frame &frame) {
  const Tensor &logits = frame.get(op.getLogits());
  int64_t rows = logits.shape[0], experts = logits.shape[1];
  bool sigmoidScores = op.getScoreFunction() == "sigmoid";
  Tensor map = Tensor::zeros({rows, experts});
  Tensor scores = Tensor::zeros({rows, experts});
  Tensor saved = Tensor::zeros({rows, experts});
  for (int64_t t = 0; t < rows; ++t) {
    ArrayRef<double> x(&logits.data[t * experts], experts);
    std::vector<double> s(x.begin(), x.end()), normalized;
    if (sigmoidScores) {
      for (double &v : s)
        v = sigmoid(v);
      double sum = std::accumulate(s.begin(), s.end(), 0.0);
      for (double v : s)
        normalized.push_back(v / (sum + kEpsilon));
    } else {
      s = softmax(x);
      normalized = s;
    }
    std::copy(s.begin(), s.end(), &saved.data[t * experts]);
    std::copy(normalized.begin(), normalized.end(), &scores.data[t * experts]);
    for (int64_t e : topIndices(normalized, static_cast<int64_t>(op.getTopk())))
      map.data[t * experts + e] = 1;
  }
  if (failed(frame.set(op, op.getRoutingMap(), std::move(map))) ||
      failed(frame.set(op, op.getScores(), std::move(scores))))
    return failure();
  return frame.set(op, op.getSaved(), std::move(saved));
}

static LogicalResult runOp(te::RouterAuxScoresBwdOp op, Frame &frame) {
  const Tensor &saved = frame.get(op.getSaved());
  Tensor grad = frame.get(op.getGradScores());
  int64_t rows = saved.shape[0], experts = saved.shape[1];
  std::vector<double> all(experts, 1.0);
  for (int64_t t = 0; t < rows; ++t) {
    ArrayRef<double> s(&saved.data[t * experts], experts);
    MutableArrayRef<double> g(&grad.data[t * experts], experts);
    if (op.getScoreFunction() == "sigmoid") {
      normalizationBackward(g, s, all);
      for (int64_t e = 0; e < experts; ++e)
        g[e] *= s[e] * (1 - s[e]);
    } else {
      softmaxBackward(g, s, all);
    }
  }
  return frame.set(op, op.getGradLogits(), std::move(grad));
}

/// num_experts coeff / (topk total_num_tokens^2).
template <typename Op> static double auxLossConstant(Op op) {
  auto tokens =
      static_cast<double>(static_cast<int64_t>(op.getTotalNumTokens()));
  return static_cast<double>(static_cast<int64_t>(op.getNumExperts())) *
         op.getCoeff().convertToDouble() /
         static_cast<double>(static_cast<int64_t>(op.getTopk())) / tokens /
         tokens;
}

static LogicalResult runOp(te::RouterAuxLossOp op, Frame &frame) {
  const Tensor &probs = frame.get(op.getProbs());
  const Tensor &counts = frame.get(op.getTokensPerExpert());
  int64_t columns = probs.shape[1];
  double sum = 0;
  for (int64_t i = 0; i < probs.numElements(); ++i)
    sum += probs.data[i] * counts.data[i % columns];
  return frame.set(op, op.getLoss(), Tensor({1}, {auxLossConstant(op) * sum}));
}

static LogicalResult runOp(te::RouterAuxLossBwdOp op, Frame &frame) {
  const Tensor &counts = frame.get(op.getTokensPerExpert());
  double g = frame.get(op.getGradLoss()).data[0] * auxLossConstant(op);
  auto shape = cast<RankedTensorType>(op.getGradProbs().getType()).getShape();
  Tensor grad = Tensor::zeros(shape);
  for (int64_t i = 0; i < grad.numElements(); ++i)
    grad.data[i] = g * counts.data[i % shape[1]];
  return frame.set(op, op.getGradProbs(), std::move(grad));
}

bool tejit::interp::isRouterOp(Operation *op) {
  return isa<te::RouterTopkOp, te::RouterTopkBwdOp, te::RouterAuxScoresOp,
             te::RouterAuxScoresBwdOp, te::RouterAuxLossOp,
             te::RouterAuxLossBwdOp>(op);
}

LogicalResult tejit::interp::runRouterOp(Operation *op, Frame &frame) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<te::RouterTopkOp, te::RouterTopkBwdOp, te::RouterAuxScoresOp,
            te::RouterAuxScoresBwdOp, te::RouterAuxLossOp,
            te::RouterAuxLossBwdOp>([&](auto op) { return runOp(op, frame); })
      .Default([](Operation *op) {
        return op->emitOpError() << "is not a router op";
      });
}
