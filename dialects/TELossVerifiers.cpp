//===- TELossVerifiers.cpp - rules of the cross entropy ops ---------------===//
//
// te.cross_entropy_stats, te.cross_entropy_loss, te.cross_entropy_mean and
// te.cross_entropy_bwd (docs/cross-entropy.md). Logits are 2-D [N, V_local]
// bf16/f16/f32; targets an i32 or i64 [N] vector; everything computed per
// row is f32.
//
//===----------------------------------------------------------------------===//
#include "dialects/TEDialect.h"

using namespace mlir;
using namespace mlir::te;

static RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

/// `logits` is a bf16, f16 or f32 matrix [N, V_local]; returns N.
static FailureOr<int64_t> verifyLogits(Operation *op, Value logits) {
  RankedTensorType type = typeOf(logits);
  Type element = type.getElementType();
  if (type.getRank() != 2 ||
      !(element.isBF16() || element.isF16() || element.isF32()))
    return op->emitOpError() << "'logits' must be a bf16, f16 or f32 matrix "
                                "[rows, vocab_local], got "
                             << type;
  if (type.getDimSize(1) < 1)
    return op->emitOpError() << "'logits' must have at least one vocab "
                                "column, got "
                             << type;
  return type.getDimSize(0);
}

/// `target` is an integer vector of one class index per row.
static LogicalResult verifyTarget(Operation *op, Value target, int64_t rows) {
  RankedTensorType type = typeOf(target);
  Type element = type.getElementType();
  if (type.getRank() != 1 || !(element.isInteger(32) || element.isInteger(64)))
    return op->emitOpError()
           << "'target' must be an i32 or i64 vector [rows], got " << type;
  if (type.getDimSize(0) != rows)
    return op->emitOpError() << "'target' must have one class index per row ("
                             << rows << "), got " << type;
  return success();
}

/// `value` has exactly the f32 `shape` that `rule` describes.
static LogicalResult expectF32(Operation *op, Value value, StringRef name,
                               ArrayRef<int64_t> shape, StringRef rule) {
  auto expected =
      RankedTensorType::get(shape, Float32Type::get(op->getContext()));
  if (value.getType() != expected)
    return op->emitOpError() << "'" << name << "' must be " << expected << " ("
                             << rule << "), got " << value.getType();
  return success();
}

static LogicalResult verifyLabelSmoothing(Operation *op, double smoothing) {
  if (!(smoothing >= 0.0 && smoothing <= 1.0))
    return op->emitOpError()
           << "label_smoothing must be in [0, 1], got " << smoothing;
  return success();
}

LogicalResult CrossEntropyStatsOp::verify() {
  FailureOr<int64_t> rows = verifyLogits(*this, getLogits());
  if (failed(rows) || failed(verifyTarget(*this, getTarget(), *rows)))
    return failure();
  if (auto start = static_cast<int64_t>(getVocabStart()); start < 0)
    return emitOpError() << "vocab_start must be >= 0, got " << start;
  return expectF32(*this, getStats(), "stats", {*rows, 4},
                   "max, sum of exponentials, target logit and sum per row");
}

LogicalResult CrossEntropyLossOp::verify() {
  auto ranks = static_cast<int64_t>(getRanks());
  auto vocab = static_cast<int64_t>(getVocabSize());
  if (ranks < 1)
    return emitOpError() << "ranks must be at least 1, got " << ranks;
  if (vocab < 1)
    return emitOpError() << "vocab_size must be at least 1, got " << vocab;
  if (failed(
          verifyLabelSmoothing(*this, getLabelSmoothing().convertToDouble())))
    return failure();
  RankedTensorType target = typeOf(getTarget());
  int64_t rows = target.getRank() == 1 ? target.getDimSize(0) : 0;
  if (failed(verifyTarget(*this, getTarget(), rows)))
    return failure();
  if (failed(expectF32(*this, getStats(), "stats", {ranks * rows, 4},
                       "ranks x rows statistics, rank by rank")))
    return failure();
  if (failed(expectF32(*this, getLoss(), "loss", {rows}, "one per row")))
    return failure();
  return expectF32(*this, getLse(), "lse", {rows}, "one per row");
}

LogicalResult CrossEntropyMeanOp::verify() {
  RankedTensorType loss = typeOf(getLoss());
  int64_t rows = loss.getRank() == 1 ? loss.getDimSize(0) : 0;
  if (failed(expectF32(*this, getLoss(), "loss", {rows}, "one per row")) ||
      failed(verifyTarget(*this, getTarget(), rows)))
    return failure();
  if (failed(expectF32(*this, getMean(), "mean", {1}, "one value")))
    return failure();
  return expectF32(*this, getCount(), "count", {1}, "one value");
}

LogicalResult CrossEntropyBwdOp::verify() {
  FailureOr<int64_t> rows = verifyLogits(*this, getLogits());
  if (failed(rows) || failed(verifyTarget(*this, getTarget(), *rows)))
    return failure();
  int64_t local = typeOf(getLogits()).getDimSize(1);
  auto start = static_cast<int64_t>(getVocabStart());
  auto vocab = static_cast<int64_t>(getVocabSize());
  if (start < 0 || start + local > vocab)
    return emitOpError() << "the logits' columns [" << start << ", "
                         << start + local << ") must lie in the vocab [0, "
                         << vocab << ")";
  if (failed(
          verifyLabelSmoothing(*this, getLabelSmoothing().convertToDouble())))
    return failure();
  if (failed(expectF32(*this, getLse(), "lse", {*rows}, "one per row")))
    return failure();
  if (getCount()) {
    if (failed(expectF32(*this, getCount(), "count", {1}, "the mean's")) ||
        failed(expectF32(*this, getGradLoss(), "grad_loss", {1},
                         "the mean's gradient, given a count")))
      return failure();
  } else if (failed(expectF32(*this, getGradLoss(), "grad_loss", {*rows},
                              "one per row, without a count"))) {
    return failure();
  }
  if (getGrad().getType() != getLogits().getType())
    return emitOpError() << "'grad' must have the logits' type "
                         << getLogits().getType() << ", got "
                         << getGrad().getType();
  return success();
}
