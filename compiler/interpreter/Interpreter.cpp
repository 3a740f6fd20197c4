//===- Interpreter.cpp - runs a func.func of te ops -----------------------===//
#include "compiler/interpreter/Interpreter.h"
#include "compiler/interpreter/Frame.h"

#include "mlir/IR/Verifier.h"

#include <cassert>

using namespace mlir;
using namespace tejit::interp;

Collectives::~Collectives() = default;

Tensor Tensor::zeros(ArrayRef<int64_t> shape) {
  Tensor result(shape, {});
  result.data.assign(result.numElements(), 0.0);
  return result;
}

int64_t Tensor::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

const Tensor &Frame::get(Value value) const {
  auto it = values.find(value.getAsOpaquePointer());
  assert(it != values.end() && "value used before it was computed");
  return it->second;
}

/// Sequence and context parallelism need the other ranks' tokens.
LogicalResult Frame::needCollectives(Operation *op) const {
  if (options.collectives)
    return success();
  return op->emitOpError()
         << "gathers or scatters over the ranks of a sequence- or "
            "context-parallel group: run it with interp::Options::collectives";
}

FailureOr<Tensor> Frame::gatherOverRanks(Operation *op,
                                         const Tensor &local) const {
  if (failed(needCollectives(op)))
    return failure();
  return options.collectives->allGather(local, options.rank);
}

FailureOr<Tensor> Frame::scatterSumOverRanks(Operation *op,
                                             const Tensor &partial,
                                             int64_t ranks) const {
  if (failed(needCollectives(op)))
    return failure();
  if (partial.shape.empty() || partial.shape[0] % ranks != 0)
    return op->emitOpError()
           << "cannot scatter dim 0 over " << ranks << " ranks";
  Tensor sum = options.collectives->sum(partial);
  int64_t chunkElements = sum.numElements() / ranks;
  auto begin = sum.data.begin() + options.rank * chunkElements;
  SmallVector<int64_t> shape(sum.shape);
  shape.front() /= ranks;
  return Tensor(shape, std::vector<double>(begin, begin + chunkElements));
}

void Frame::updateArgument(BlockArgument argument, Tensor tensor) {
  values[argument.getAsOpaquePointer()] = std::move(tensor);
}

/// Whether `tensor` holds a value of `type` (a statically shaped tensor).
static bool matchesType(const Tensor &tensor, Type type) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  return tensorType && tensorType.hasStaticShape() &&
         tensorType.getShape() == ArrayRef<int64_t>(tensor.shape) &&
         static_cast<int64_t>(tensor.data.size()) == tensor.numElements();
}

/// Formats a shape as "[2, 3]".
static std::string formatShape(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (auto [i, dim] : llvm::enumerate(shape))
    text += (i ? ", " : "") + std::to_string(dim);
  return text + "]";
}

LogicalResult Frame::set(Operation *op, Value value, Tensor tensor) {
  if (!matchesType(tensor, value.getType()))
    return op->emitOpError()
           << "computed a tensor of shape " << formatShape(tensor.shape) << " ("
           << tensor.data.size() << " elements) for a result of type "
           << value.getType();
  values[value.getAsOpaquePointer()] = std::move(tensor);
  return success();
}

/// Binds the arguments of `body`, checking them against its types.
static LogicalResult bindArguments(func::FuncOp function, Block &body,
                                   ArrayRef<Tensor> args, Frame &frame) {
  if (args.size() != body.getNumArguments())
    return function.emitError() << "the interpreter got " << args.size()
                                << " arguments for " << body.getNumArguments();
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    if (!matchesType(args[i], arg.getType()))
      return function.emitError()
             << "argument #" << i << " has shape " << formatShape(args[i].shape)
             << " (" << args[i].data.size() << " elements) but the function "
             << "takes " << arg.getType();
    if (failed(frame.set(function, arg, args[i])))
      return failure();
  }
  return success();
}

static LogicalResult runOp(Operation &op, Frame &frame);

/// Runs a kernel region: its ops see the fused op's operands as the block's
/// arguments, and its yielded values become the fused op's results.
static LogicalResult runFused(te::FusedOp fused, Frame &frame) {
  Block &body = fused.getBody().front();
  for (auto [arg, input] : llvm::zip(body.getArguments(), fused.getInputs()))
    if (failed(frame.set(fused, arg, frame.get(input))))
      return failure();
  for (Operation &op : body.without_terminator())
    if (failed(runOp(op, frame)))
      return failure();
  for (auto [result, yielded] :
       llvm::zip(fused.getResults(), body.getTerminator()->getOperands()))
    if (failed(frame.set(fused, result, frame.get(yielded))))
      return failure();
  return success();
}

/// Runs one op of the function body.
static LogicalResult runOp(Operation &op, Frame &frame) {
  if (auto fused = dyn_cast<te::FusedOp>(op))
    return runFused(fused, frame);
  if (isLayerOp(&op)) {
    LogicalResult status = runLayerOp(&op, frame);
    ++frame.layerIndex;
    return status;
  }
  if (isLossOp(&op))
    return runLossOp(&op, frame);
  if (isMoeOp(&op))
    return runMoeOp(&op, frame);
  if (isRouterOp(&op))
    return runRouterOp(&op, frame);
  if (isa<te::TEDialect>(op.getDialect()))
    return runPrimitiveOp(&op, frame);
  return op.emitOpError() << "is not supported by the te interpreter";
}

FailureOr<std::vector<Tensor>> tejit::interp::run(func::FuncOp function,
                                                  ArrayRef<Tensor> args,
                                                  const Options &options) {
  if (failed(verify(function)))
    return failure();
  if (!llvm::hasSingleElement(function.getBody()))
    return function.emitError()
           << "the te interpreter runs functions of exactly one block";
  Block &body = function.getBody().front();
  Frame frame(options);
  if (failed(bindArguments(function, body, args, frame)))
    return failure();
  for (Operation &op : body.without_terminator())
    if (failed(runOp(op, frame)))
      return failure();
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret)
    return body.getTerminator()->emitOpError()
           << "is not supported by the te interpreter";
  std::vector<Tensor> results;
  for (Value value : ret.getOperands())
    results.push_back(frame.get(value));
  if (options.updatedArguments) {
    options.updatedArguments->clear();
    for (BlockArgument argument : body.getArguments())
      options.updatedArguments->push_back(frame.get(argument));
  }
  return results;
}

Tensor tejit::interp::randomTensor(RankedTensorType type, std::mt19937_64 &rng,
                                   double stddev) {
  assert(type.hasStaticShape() && "random tensors need a static shape");
  Tensor result = Tensor::zeros(type.getShape());
  Type element = type.getElementType();
  std::normal_distribution<double> normal(0.0, stddev);
  std::bernoulli_distribution coin(0.5);
  std::uniform_int_distribution<int64_t> integer(0, (int64_t(1) << 31) - 1);
  for (double &value : result.data) {
    if (isa<FloatType>(element))
      value = normal(rng);
    else if (element.isInteger(1))
      value = coin(rng) ? 1.0 : 0.0;
    else
      value = static_cast<double>(integer(rng));
  }
  return result;
}
