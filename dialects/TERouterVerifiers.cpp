//===- TERouterVerifiers.cpp - rules of the MoE router ops ----------------===//
//
// te.router_topk, te.router_aux_scores, te.router_aux_loss and their
// backward ops (docs/router.md). Logits are a bf16/f16/f32 matrix [T, E];
// routing maps i1 and saved scores f32 of the logits' shape.
//
//===----------------------------------------------------------------------===//
#include "dialects/TEDialect.h"

using namespace mlir;
using namespace mlir::te;

static RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

static bool isRouterFloat(Type element) {
  return element.isBF16() || element.isF16() || element.isF32();
}

/// `value` is a bf16, f16 or f32 matrix [T, E] with E >= 1.
static LogicalResult verifyMatrix(Operation *op, Value value, StringRef name) {
  RankedTensorType type = typeOf(value);
  if (type.getRank() != 2 || !isRouterFloat(type.getElementType()))
    return op->emitOpError() << "'" << name
                             << "' must be a bf16, f16 or f32 matrix "
                                "[tokens, experts], got "
                             << type;
  if (type.getDimSize(1) < 1)
    return op->emitOpError()
           << "'" << name << "' must have at least one expert, got " << type;
  return success();
}

/// `value` has the `shape` of the logits and element type `element`.
static LogicalResult expectLike(Operation *op, Value value, StringRef name,
                                ArrayRef<int64_t> shape, Type element) {
  auto expected = RankedTensorType::get(shape, element);
  if (value.getType() != expected)
    return op->emitOpError() << "'" << name << "' must be " << expected
                             << ", got " << value.getType();
  return success();
}

static LogicalResult verifyScoreFunction(Operation *op, StringRef function) {
  if (function != "softmax" && function != "sigmoid")
    return op->emitOpError() << "score_function must be \"softmax\" or "
                                "\"sigmoid\", got \""
                             << function << "\"";
  return success();
}

static LogicalResult verifyTopk(Operation *op, int64_t topk, int64_t experts) {
  if (topk < 1 || topk > experts)
    return op->emitOpError() << "topk must be in [1, " << experts
                             << "] (the experts), got " << topk;
  return success();
}

/// Group-limited routing: num_groups divides the experts, group_topk
/// groups of them are kept, and topk divides evenly over the kept groups.
static LogicalResult verifyGroups(RouterTopkOp op, int64_t experts) {
  auto groups = static_cast<int64_t>(op.getNumGroups());
  auto groupTopk = static_cast<int64_t>(op.getGroupTopk());
  auto topk = static_cast<int64_t>(op.getTopk());
  if (groups < 0 || groupTopk < 0)
    return op.emitOpError() << "num_groups and group_topk must be >= 0, got "
                            << groups << " and " << groupTopk;
  if (groupTopk == 0)
    return success();
  if (groups < 1 || experts % groups != 0)
    return op.emitOpError() << "num_groups must divide the " << experts
                            << " experts, got " << groups;
  if (groupTopk > groups)
    return op.emitOpError() << "group_topk must be <= num_groups (" << groups
                            << "), got " << groupTopk;
  if (topk % groupTopk != 0)
    return op.emitOpError()
           << "topk (" << topk << ") must be divisible by group_topk ("
           << groupTopk << ")";
  if (topk / groupTopk > experts / groups)
    return op.emitOpError() << "topk / group_topk (" << topk / groupTopk
                            << ") must be <= the experts of a group ("
                            << experts / groups << ")";
  return success();
}

LogicalResult RouterTopkOp::verify() {
  if (failed(verifyMatrix(*this, getLogits(), "logits")) ||
      failed(verifyScoreFunction(*this, getScoreFunction())))
    return failure();
  RankedTensorType logits = typeOf(getLogits());
  ArrayRef<int64_t> shape = logits.getShape();
  int64_t experts = shape[1];
  if (failed(verifyTopk(*this, static_cast<int64_t>(getTopk()), experts)) ||
      failed(verifyGroups(*this, experts)))
    return failure();
  if (Value bias = getExpertBias()) {
    if (getScoreFunction() != "sigmoid")
      return emitOpError() << "'expert_bias' is only used with the sigmoid "
                              "score function";
    RankedTensorType type = typeOf(bias);
    Type element = type.getElementType();
    if (type.getShape() != ArrayRef<int64_t>{experts} ||
        !(element.isF32() || element == logits.getElementType()))
      return emitOpError() << "'expert_bias' must be an f32 or "
                           << logits.getElementType() << " vector [" << experts
                           << "], got " << type;
  }
  MLIRContext *context = getContext();
  if (failed(expectLike(*this, getProbs(), "probs", shape,
                        logits.getElementType())) ||
      failed(expectLike(*this, getRoutingMap(), "routing_map", shape,
                        IntegerType::get(context, 1))))
    return failure();
  return expectLike(*this, getSaved(), "saved", shape,
                    Float32Type::get(context));
}

LogicalResult RouterTopkBwdOp::verify() {
  if (failed(verifyMatrix(*this, getGradProbs(), "grad_probs")) ||
      failed(verifyScoreFunction(*this, getScoreFunction())))
    return failure();
  RankedTensorType grad = typeOf(getGradProbs());
  ArrayRef<int64_t> shape = grad.getShape();
  MLIRContext *context = getContext();
  if (failed(verifyTopk(*this, static_cast<int64_t>(getTopk()), shape[1])) ||
      failed(expectLike(*this, getRoutingMap(), "routing_map", shape,
                        IntegerType::get(context, 1))) ||
      failed(expectLike(*this, getSaved(), "saved", shape,
                        Float32Type::get(context))))
    return failure();
  return expectLike(*this, getGradLogits(), "grad_logits", shape,
                    grad.getElementType());
}

LogicalResult RouterAuxScoresOp::verify() {
  if (failed(verifyMatrix(*this, getLogits(), "logits")) ||
      failed(verifyScoreFunction(*this, getScoreFunction())))
    return failure();
  ArrayRef<int64_t> shape = typeOf(getLogits()).getShape();
  if (failed(verifyTopk(*this, static_cast<int64_t>(getTopk()), shape[1])))
    return failure();
  MLIRContext *context = getContext();
  auto f32 = Float32Type::get(context);
  if (failed(expectLike(*this, getRoutingMap(), "routing_map", shape,
                        IntegerType::get(context, 1))) ||
      failed(expectLike(*this, getScores(), "scores", shape, f32)))
    return failure();
  return expectLike(*this, getSaved(), "saved", shape, f32);
}

LogicalResult RouterAuxScoresBwdOp::verify() {
  if (failed(verifyMatrix(*this, getGradLogits(), "grad_logits")) ||
      failed(verifyScoreFunction(*this, getScoreFunction())))
    return failure();
  ArrayRef<int64_t> shape = typeOf(getGradLogits()).getShape();
  auto f32 = Float32Type::get(getContext());
  if (failed(expectLike(*this, getSaved(), "saved", shape, f32)))
    return failure();
  return expectLike(*this, getGradScores(), "grad_scores", shape, f32);
}

/// `tokens_per_expert` is an i32, i64, f32 or bf16 vector of `columns`.
static LogicalResult verifyTokensPerExpert(Operation *op, Value value,
                                           int64_t columns) {
  RankedTensorType type = typeOf(value);
  Type element = type.getElementType();
  if (type.getShape() != ArrayRef<int64_t>{columns} ||
      !(element.isInteger(32) || element.isInteger(64) || element.isF32() ||
        element.isBF16()))
    return op->emitOpError()
           << "'tokens_per_expert' must be an i32, i64, f32 or bf16 vector ["
           << columns << "] (one per column of the probs), got " << type;
  return success();
}

/// The constants of the loss: C = num_experts coeff / (topk T^2).
template <typename Op> static LogicalResult verifyAuxLossConstants(Op op) {
  auto tokens = static_cast<int64_t>(op.getTotalNumTokens());
  auto experts = static_cast<int64_t>(op.getNumExperts());
  auto topk = static_cast<int64_t>(op.getTopk());
  if (tokens < 1)
    return op.emitOpError() << "total_num_tokens must be >= 1, got " << tokens;
  if (experts < 1)
    return op.emitOpError() << "num_experts must be >= 1, got " << experts;
  return verifyTopk(op, topk, experts);
}

LogicalResult RouterAuxLossOp::verify() {
  if (failed(verifyMatrix(*this, getProbs(), "probs")) ||
      failed(verifyAuxLossConstants(*this)))
    return failure();
  RankedTensorType probs = typeOf(getProbs());
  if (failed(verifyTokensPerExpert(*this, getTokensPerExpert(),
                                   probs.getDimSize(1))))
    return failure();
  return expectLike(*this, getLoss(), "loss", {1}, probs.getElementType());
}

LogicalResult RouterAuxLossBwdOp::verify() {
  if (failed(verifyMatrix(*this, getGradProbs(), "grad_probs")) ||
      failed(verifyAuxLossConstants(*this)))
    return failure();
  RankedTensorType grad = typeOf(getGradProbs());
  if (failed(verifyTokensPerExpert(*this, getTokensPerExpert(),
                                   grad.getDimSize(1))))
    return failure();
  return expectLike(*this, getGradLoss(), "grad_loss", {1},
                    grad.getElementType());
}
