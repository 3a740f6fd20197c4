//===- LossOps.cpp - the interpreter's cross entropy ops ------------------===//
//
// te.cross_entropy_stats / _loss / _mean / _bwd (docs/cross-entropy.md), in
// double precision: the reference the generated kernels are checked
// against. A vocab-parallel program gathers the ranks' statistics with
// te.tp_all_gather between the stats and the loss op, so a run of one
// rank's program needs the other ranks' interpreters (Options::collectives),
// as every tensor-parallel program does.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Frame.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace tejit::interp;
namespace te = mlir::te;

static constexpr double kInf = std::numeric_limits<double>::infinity();

namespace {
/// A row's statistics: max, sum of exp(x - max), target logit, sum.
struct RowStats {
  double max = -kInf, sumExp = 0, target = -kInf, sum = 0;
};
} // namespace

static RowStats rowStats(const double *row, int64_t cols, int64_t targetCol) {
  RowStats stats;
  for (int64_t j = 0; j < cols; ++j)
    stats.max = std::max(stats.max, row[j]);
  for (int64_t j = 0; j < cols; ++j) {
    stats.sumExp += std::exp(row[j] - stats.max);
    stats.sum += row[j];
  }
  if (targetCol >= 0 && targetCol < cols)
    stats.target = row[targetCol];
  return stats;
}

static LogicalResult runOp(te::CrossEntropyStatsOp op, Frame &frame) {
  const Tensor &logits = frame.get(op.getLogits());
  const Tensor &target = frame.get(op.getTarget());
  int64_t rows = logits.shape[0], cols = logits.shape[1];
  Tensor stats = Tensor::zeros({rows, 4});
  for (int64_t i = 0; i < rows; ++i) {
    auto y = static_cast<int64_t>(target.data[i]);
    RowStats row;
    if (y != static_cast<int64_t>(op.getIgnoreIndex()))
      row = rowStats(&logits.data[i * cols], cols,
                     y - static_cast<int64_t>(op.getVocabStart()));
    double *out = &stats.data[i * 4];
    out[0] = row.max, out[1] = row.sumExp, out[2] = row.target,
    out[3] = row.sum;
  }
  return frame.set(op, op.getStats(), std::move(stats));
}

static LogicalResult runOp(te::CrossEntropyLossOp op, Frame &frame) {
  const Tensor &stats = frame.get(op.getStats());
  const Tensor &target = frame.get(op.getTarget());
  int64_t rows = target.shape[0], ranks = static_cast<int64_t>(op.getRanks());
  double smoothing = op.getLabelSmoothing().convertToDouble();
  double vocab = static_cast<double>(static_cast<int64_t>(op.getVocabSize()));
  Tensor loss = Tensor::zeros({rows}), lse = Tensor::zeros({rows});
  for (int64_t i = 0; i < rows; ++i) {
    if (static_cast<int64_t>(target.data[i]) ==
        static_cast<int64_t>(op.getIgnoreIndex()))
      continue;
    RowStats all;
    for (int64_t r = 0; r < ranks; ++r)
      all.max = std::max(all.max, stats.data[(r * rows + i) * 4]);
    for (int64_t r = 0; r < ranks; ++r) {
      const double *s = &stats.data[(r * rows + i) * 4];
      all.sumExp += s[1] * std::exp(s[0] - all.max);
      all.target = std::max(all.target, s[2]);
      all.sum += s[3];
    }
    lse.data[i] = all.max + std::log(all.sumExp);
    // With ε = 1 the target logit has no weight (and may be -inf).
    double targetTerm = smoothing < 1.0 ? (1.0 - smoothing) * all.target : 0;
    loss.data[i] = lse.data[i] - targetTerm - smoothing / vocab * all.sum;
  }
  if (failed(frame.set(op, op.getLoss(), std::move(loss))))
    return failure();
  return frame.set(op, op.getLse(), std::move(lse));
}

static LogicalResult runOp(te::CrossEntropyMeanOp op, Frame &frame) {
  const Tensor &loss = frame.get(op.getLoss());
  const Tensor &target = frame.get(op.getTarget());
  double sum = 0, count = 0;
  for (auto [value, y] : llvm::zip(loss.data, target.data))
    if (static_cast<int64_t>(y) != static_cast<int64_t>(op.getIgnoreIndex())) {
      sum += value;
      ++count;
    }
  if (failed(frame.set(op, op.getMean(),
                       Tensor({1}, {sum / std::max(count, 1.0)}))))
    return failure();
  return frame.set(op, op.getCount(), Tensor({1}, {count}));
}

static LogicalResult runOp(te::CrossEntropyBwdOp op, Frame &frame) {
  const Tensor &logits = frame.get(op.getLogits());
  const Tensor &target = frame.get(op.getTarget());
  const Tensor &lse = frame.get(op.getLse());
  const Tensor &gradLoss = frame.get(op.getGradLoss());
  const Tensor *count = frame.getOptional(op.getCount());
  int64_t rows = logits.shape[0], cols = logits.shape[1];
  double smoothing = op.getLabelSmoothing().convertToDouble();
  double uniform =
      smoothing / static_cast<double>(static_cast<int64_t>(op.getVocabSize()));
  Tensor grad = Tensor::zeros(logits.shape);
  for (int64_t i = 0; i < rows; ++i) {
    auto y = static_cast<int64_t>(target.data[i]);
    if (y == static_cast<int64_t>(op.getIgnoreIndex()))
      continue;
    double g = count ? gradLoss.data[0] / std::max(count->data[0], 1.0)
                     : gradLoss.data[i];
    for (int64_t j = 0; j < cols; ++j) {
      double p = std::exp(logits.data[i * cols + j] - lse.data[i]);
      double hit = static_cast<int64_t>(op.getVocabStart()) + j == y
                       ? 1.0 - smoothing
                       : 0.0;
      grad.data[i * cols + j] = (p - uniform - hit) * g;
    }
  }
  return frame.set(op, op.getGrad(), std::move(grad));
}

bool tejit::interp::isLossOp(Operation *op) {
  return isa<te::CrossEntropyStatsOp, te::CrossEntropyLossOp,
             te::CrossEntropyMeanOp, te::CrossEntropyBwdOp>(op);
}

LogicalResult tejit::interp::runLossOp(Operation *op, Frame &frame) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<te::CrossEntropyStatsOp, te::CrossEntropyLossOp,
            te::CrossEntropyMeanOp, te::CrossEntropyBwdOp>(
          [&](auto op) { return runOp(op, frame); })
      .Default([](Operation *op) {
        return op->emitOpError() << "is not a cross entropy op";
      });
}
