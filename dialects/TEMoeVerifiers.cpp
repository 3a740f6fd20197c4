//===- TEMoeVerifiers.cpp - rules of the MoE token permutation ops --------===//
//
// docs/moe-permutation.md. Every op takes `counts` (i32 [2]: the real token
// rows, then the real expert-side rows) and most a row map (i32 [T, C]);
// each diagnostic names the operand and the shape it must have.
//
//===----------------------------------------------------------------------===//
#include "dialects/TEDialect.h"

using namespace mlir;
using namespace mlir::te;

namespace {

RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

bool isFp8(Type type) { return isa<Float8E4M3FNType, Float8E5M2Type>(type); }

bool isHighPrecision(Type type) {
  return type.isBF16() || type.isF16() || type.isF32();
}

/// Prints `shape` as [a, b].
void printShape(InFlightDiagnostic &diag, ArrayRef<int64_t> shape) {
  diag << "[";
  llvm::interleaveComma(shape, diag);
  diag << "]";
}

LogicalResult expectShape(Operation *op, Value value, StringRef name,
                          ArrayRef<int64_t> shape, StringRef rule) {
  if (typeOf(value).getShape() == shape)
    return success();
  InFlightDiagnostic diag = op->emitOpError()
                            << "'" << name << "' must be " << rule << " = ";
  printShape(diag, shape);
  return diag << ", got " << value.getType();
}

LogicalResult expectCounts(Operation *op, Value counts) {
  RankedTensorType type = typeOf(counts);
  if (type.getRank() == 1 && type.getDimSize(0) == 2 &&
      type.getElementType().isInteger(32))
    return success();
  return op->emitOpError() << "'counts' must be tensor<2xi32> (the real "
                              "token rows, then the real permuted rows), got "
                           << type;
}

/// A row map is an i32 matrix [T, C] with C >= 1; returns [T, C].
FailureOr<std::pair<int64_t, int64_t>> rowMapShape(Operation *op, Value map,
                                                   StringRef name) {
  RankedTensorType type = typeOf(map);
  if (type.getRank() != 2 || !type.getElementType().isInteger(32) ||
      type.getDimSize(0) < 1 || type.getDimSize(1) < 1)
    return op->emitOpError()
           << "'" << name << "' must be an i32 matrix [tokens, columns], got "
           << type;
  return std::make_pair(type.getDimSize(0), type.getDimSize(1));
}

/// Token rows [T, H] of `name`: fp8 allowed where `allowFp8`.
FailureOr<std::pair<int64_t, int64_t>>
rowsShape(Operation *op, Value value, StringRef name, bool allowFp8) {
  RankedTensorType type = typeOf(value);
  Type element = type.getElementType();
  if (type.getRank() != 2 ||
      !(isHighPrecision(element) || (allowFp8 && isFp8(element))))
    return op->emitOpError()
           << "'" << name << "' must be a matrix [rows, hidden] of bf16, f16, "
           << "f32" << (allowFp8 ? ", f8E4M3FN or f8E5M2" : "") << ", got "
           << type;
  return std::make_pair(type.getDimSize(0), type.getDimSize(1));
}

/// Probabilities: a float tensor of the row map's shape.
LogicalResult expectProbs(Operation *op, Value probs, StringRef name,
                          ArrayRef<int64_t> mapShape) {
  if (!isHighPrecision(typeOf(probs).getElementType()))
    return op->emitOpError()
           << "'" << name << "' must be bf16, f16 or f32, got "
           << probs.getType();
  return expectShape(op, probs, name, mapShape,
                     "the row map's shape [tokens, columns]");
}

LogicalResult expectElement(Operation *op, Value value, StringRef name,
                            Type element, StringRef of) {
  if (typeOf(value).getElementType() == element)
    return success();
  return op->emitOpError() << "'" << name << "' must have " << of
                           << "'s element type " << element << ", got "
                           << value.getType();
}

} // namespace

LogicalResult MoeRowMapOp::verify() {
  if (failed(expectCounts(*this, getCounts())))
    return failure();
  RankedTensorType map = typeOf(getRoutingMap());
  Type element = map.getElementType();
  int64_t experts = getNumExperts();
  if (experts < 1)
    return emitOpError() << "'num_experts' must be >= 1, got " << experts;
  if (map.getRank() != 2 || map.getDimSize(0) < 1 || map.getDimSize(1) < 1)
    return emitOpError() << "'routing_map' must be a matrix [tokens, "
                         << (getIndexMap() ? "topK" : "num_experts")
                         << "], got " << map;
  if (getIndexMap()) {
    if (!element.isInteger(32))
      return emitOpError() << "'routing_map' of an index map must be i32 "
                              "expert ids [tokens, topK], got "
                           << map;
  } else {
    if (!element.isInteger(1) && !element.isInteger(32))
      return emitOpError() << "'routing_map' of a mask map must be i1 or "
                              "i32 [tokens, num_experts], got "
                           << map;
    if (map.getDimSize(1) != experts)
      return emitOpError() << "'routing_map' of a mask map must have "
                              "num_experts = "
                           << experts << " columns, got " << map;
  }
  auto expected =
      RankedTensorType::get(map.getShape(), IntegerType::get(getContext(), 32));
  if (getRowMap().getType() != expected)
    return emitOpError() << "'row_map' must be " << expected
                         << " (the routing map's shape), got "
                         << getRowMap().getType();
  return success();
}

LogicalResult MoeChunkRowMapOp::verify() {
  if (failed(expectCounts(*this, getCounts())))
    return failure();
  RankedTensorType splits = typeOf(getSplitSizes());
  int64_t chunks = splits.getRank() == 1 ? splits.getDimSize(0) : 0;
  if (splits.getRank() != 1 || !splits.getElementType().isInteger(32) ||
      chunks < 1 || chunks > 2048)
    return emitOpError() << "'split_sizes' must be an i32 vector [n] with 1 "
                            "<= n <= 2048, got "
                         << splits;
  RankedTensorType sorted = typeOf(getSortedIndex());
  if (sorted.getShape() != ArrayRef<int64_t>{chunks} ||
      !sorted.getElementType().isInteger(32))
    return emitOpError() << "'sorted_index' must be i32 [" << chunks
                         << "] like 'split_sizes', got "
                         << getSortedIndex().getType();
  FailureOr<std::pair<int64_t, int64_t>> map =
      rowMapShape(*this, getRowMap(), "row_map");
  if (failed(map))
    return failure();
  if (map->second != 1)
    return emitOpError() << "'row_map' must be [rows, 1], got "
                         << getRowMap().getType();
  return success();
}

LogicalResult MoePermuteOp::verify() {
  if (failed(expectCounts(*this, getCounts())))
    return failure();
  auto in = rowsShape(*this, getInput(), "input", /*allowFp8=*/true);
  auto map = rowMapShape(*this, getRowMap(), "row_map");
  if (failed(in) || failed(map))
    return failure();
  if (map->first != in->first)
    return emitOpError() << "'row_map' must have the input's " << in->first
                         << " token rows, got " << getRowMap().getType();
  RankedTensorType out = typeOf(getOutput());
  if (out.getRank() != 2 || out.getDimSize(1) != in->second)
    return emitOpError() << "'output' must be [permuted rows, " << in->second
                         << "] (the input's hidden size), got " << out;
  if (failed(expectElement(*this, getOutput(), "output",
                           typeOf(getInput()).getElementType(), "input")))
    return failure();
  if (bool(getProbs()) != bool(getPermutedProbs()))
    return emitOpError() << "has 'permuted_probs' exactly when it has "
                            "'probs'";
  if (!getProbs())
    return success();
  if (failed(
          expectProbs(*this, getProbs(), "probs", {map->first, map->second})) ||
      failed(expectShape(*this, getPermutedProbs(), "permuted_probs",
                         {out.getDimSize(0)}, "[permuted rows]")))
    return failure();
  return expectElement(*this, getPermutedProbs(), "permuted_probs",
                       typeOf(getProbs()).getElementType(), "probs");
}

LogicalResult MoeUnpermuteOp::verify() {
  if (failed(expectCounts(*this, getCounts())))
    return failure();
  auto in = rowsShape(*this, getInput(), "input", /*allowFp8=*/false);
  auto map = rowMapShape(*this, getRowMap(), "row_map");
  if (failed(in) || failed(map))
    return failure();
  if (failed(expectShape(*this, getOutput(), "output", {map->first, in->second},
                         "[tokens of row_map, hidden of input]")) ||
      failed(expectElement(*this, getOutput(), "output",
                           typeOf(getInput()).getElementType(), "input")))
    return failure();
  if (getProbs())
    return expectProbs(*this, getProbs(), "probs", {map->first, map->second});
  return success();
}

LogicalResult MoeUnpermuteGradOp::verify() {
  if (failed(expectCounts(*this, getCounts())))
    return failure();
  auto grad = rowsShape(*this, getGrad(), "grad", /*allowFp8=*/false);
  auto in = rowsShape(*this, getInput(), "input", /*allowFp8=*/false);
  auto map = rowMapShape(*this, getRowMap(), "row_map");
  if (failed(grad) || failed(in) || failed(map))
    return failure();
  if (failed(expectElement(*this, getInput(), "input",
                           typeOf(getGrad()).getElementType(), "grad")) ||
      failed(expectShape(*this, getGrad(), "grad", {map->first, in->second},
                         "[tokens of row_map, hidden of input]")) ||
      failed(
          expectProbs(*this, getProbs(), "probs", {map->first, map->second})))
    return failure();
  if (getInputGrad().getType() != getInput().getType())
    return emitOpError() << "'input_grad' must be " << getInput().getType()
                         << " (the input's type), got "
                         << getInputGrad().getType();
  if (getProbsGrad().getType() != getProbs().getType())
    return emitOpError() << "'probs_grad' must be " << getProbs().getType()
                         << " (the probs' type), got "
                         << getProbsGrad().getType();
  return success();
}

LogicalResult MoeGatherProbsOp::verify() {
  if (failed(expectCounts(*this, getCounts())))
    return failure();
  auto map = rowMapShape(*this, getRowMap(), "row_map");
  if (failed(map))
    return failure();
  RankedTensorType probs = typeOf(getPermutedProbs());
  if (probs.getRank() != 1 || !isHighPrecision(probs.getElementType()))
    return emitOpError() << "'permuted_probs' must be a bf16, f16 or f32 "
                            "vector [permuted rows], got "
                         << probs;
  if (failed(expectShape(*this, getOutput(), "output",
                         {map->first, map->second}, "the row map's shape")))
    return failure();
  return expectElement(*this, getOutput(), "output", probs.getElementType(),
                       "permuted_probs");
}
