//===- ScalingKernels.cpp - FP8 scale bookkeeping, slices, concats --------===//
//
// Small kernels over the FP8 meta state (one thread per slot) with the
// numerics of compiler/interpreter/ScalingKernels.cpp, and the copies of
// te.slice and te.concat along the last dim, vectorized where every width
// and offset allows.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include "dialects/TEDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using llvm::formatv;

namespace {

constexpr int64_t kThreads = 256;

Dim3 gridFor(int64_t items) {
  return {(items + kThreads - 1) / kThreads, 1, 1};
}

/// scale = fp8_max / amax (1 for 0, inf, NaN; FLT_MAX on overflow; power-of-2
/// rounding masks the mantissa after the FLT_MAX substitution, as TE).
EmittedKernel writeComputeScale(KernelBuilder &builder, ComputeScaleOp op) {
  CudaWriter w;
  builder.writeSignature(w, kThreads);
  int64_t slots = tensorType(op.getAmax()).getNumElements();
  w.line(formatv("constexpr tj_i64 kSlots = {0};", slots).str());
  w.line("const tj_i64 slot = static_cast<tj_i64>(blockIdx.x) * blockDim.x + "
         "threadIdx.x;");
  w.line("if (slot >= kSlots) return;");
  w.line("const float amax_f = " + builder.param(op.getAmax()).str() +
         "[slot];");
  w.line("float scale_f = 1.f;");
  w.open("if (amax_f > 0.f && amax_f < __int_as_float(0x7f800000))");
  w.line("scale_f = " +
         floatLiteral(getFp8MaxFinite(cast<FloatType>(op.getFp8Type()))) +
         " / amax_f;");
  w.line("if (scale_f == __int_as_float(0x7f800000)) scale_f = "
         "__int_as_float(0x7f7fffff);  // FLT_MAX");
  if (op.getPower_2Scale())
    w.line("scale_f = __int_as_float(__float_as_int(scale_f) & 0xff800000);");
  w.close();
  w.line(builder.param(op.getScale()).str() + "[slot] = scale_f;");
  w.line(builder.param(op.getScaleInv()).str() + "[slot] = 1.f / scale_f;");
  return builder.finish(w, gridFor(slots), {kThreads, 1, 1});
}

/// TE's amax-and-scale_f update, one warp per slot (a history of 1024
/// entries read by one thread would take tens of microseconds); row 0 of the
/// history is this step's slot, which `amaxes` supplies.
///
/// The runtime may pass the state itself as the new history, scale and
/// scale_inv (plan format 3: the update in place, no copy back), so the
/// pointers are not __restrict__ and every value is read before any is
/// overwritten: each lane holds its history entries in registers until the
/// warp has read them all, and a slot's scale is read before its lane 0
/// writes it.
EmittedKernel writeDelayedUpdate(KernelBuilder &builder,
                                 DelayedScalingUpdateOp op) {
  auto history = tensorType(op.getAmaxHistory());
  int64_t length = history.getShape()[0], slots = history.getShape()[1];
  DelayedScalingAttr recipe = op.getRecipe();
  bool mostRecent = recipe.getAmaxComputeAlgo() == AmaxComputeAlgo::most_recent;
  double scaledMax =
      static_cast<float>(getFp8MaxFinite(cast<FloatType>(op.getFp8Type())) *
                         std::pow(2.0, -double(recipe.getMargin())));
  std::string in = builder.param(op.getAmaxHistory()).str();
  std::string out = builder.param(op.getNewAmaxHistory()).str();
  std::string scale_f = builder.param(op.getScale()).str();
  std::string newScale = builder.param(op.getNewScale()).str();
  CudaWriter w;
  builder.writeSignature(w, kThreads, /*minBlocksPerSm=*/0,
                         /*restrictPointers=*/false);
  w.line(formatv("constexpr tj_i64 kSlots = {0}, kLength = {1};", slots, length)
             .str());
  // Rows 1 .. kLength-1, 32 lanes apart: at most 32 per lane for 1024.
  w.line("constexpr int kPerLane = (kLength - 1 + 31) / 32;");
  w.line("const tj_i64 slot = (static_cast<tj_i64>(blockIdx.x) * blockDim.x + "
         "threadIdx.x) / 32;");
  w.line("const int lane = threadIdx.x % 32;");
  w.line("if (slot >= kSlots) return;  // whole warps leave together");
  w.line("const float last_f = " + builder.param(op.getAmaxes()).str() +
         "[slot];");
  w.line("float scale_f = " + scale_f + "[slot];");
  w.open("if (last_f == 0.f)");
  w.line("// Nothing recorded this step: history and scale stay (each entry "
         "read and written by one lane).");
  w.line("for (tj_i64 r = lane; r < kLength; r += 32) " + out +
         "[r * kSlots + slot] = " + in + "[r * kSlots + slot];");
  w.close();
  w.open("else");
  w.line("float amax_f = " +
         std::string(mostRecent ? "last_f" : "fmaxf(0.f, last_f)") + ";");
  w.line("float entries[kPerLane > 0 ? kPerLane : 1];");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kPerLane; ++k)");
  w.line("const tj_i64 r = 1 + lane + 32 * k;");
  w.line("entries[k] = r < kLength ? " + in + "[r * kSlots + slot] : 0.f;");
  if (!mostRecent)
    w.line("amax_f = fmaxf(amax_f, entries[k]);");
  w.close();
  if (!mostRecent)
    w.line("amax_f = tj_warp_max(amax_f);");
  w.line("__syncwarp();  // the whole column read before it moves up a row");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kPerLane; ++k)");
  w.line("const tj_i64 r = 1 + lane + 32 * k;");
  w.line("if (r > 1 && r < kLength) " + out +
         "[(r - 1) * kSlots + slot] = entries[k];");
  w.close();
  w.open("if (lane == 0)");
  w.line("if (kLength > 1) " + out +
         "[(kLength - 1) * kSlots + slot] = last_f;");
  w.line(out + "[slot] = 0.f;");
  w.open("if (amax_f > 0.f && amax_f < __int_as_float(0x7f800000))");
  w.line("scale_f = " + floatLiteral(scaledMax) + " / amax_f;");
  w.line("if (scale_f == __int_as_float(0x7f800000)) scale_f = "
         "__int_as_float(0x7f7fffff);  // FLT_MAX");
  w.close();
  w.close();
  w.close();
  w.open("if (lane == 0)");
  w.line(newScale + "[slot] = scale_f;");
  w.line(builder.param(op.getNewScaleInv()).str() + "[slot] = 1.f / scale_f;");
  w.close();
  return builder.finish(w, gridFor(slots * 32), {kThreads, 1, 1});
}

} // namespace

llvm::Error tejit::codegen::emitScaling(KernelBuilder &builder,
                                        std::vector<EmittedKernel> &kernels) {
  Operation *op = builder.group.ops.front();
  if (auto computeScale = dyn_cast<ComputeScaleOp>(op))
    kernels.push_back(writeComputeScale(builder, computeScale));
  else
    kernels.push_back(
        writeDelayedUpdate(builder, cast<DelayedScalingUpdateOp>(op)));
  return llvm::Error::success();
}

/// out[r, c] = the input that covers column c, at its column; each thread
/// copies one vector of kVec elements.
llvm::Error tejit::codegen::emitCopy(KernelBuilder &builder,
                                     std::vector<EmittedKernel> &kernels) {
  Operation *op = builder.group.ops.front();
  Value output = op->getResult(0);
  Type element = tensorType(output).getElementType();
  // (input, its first output column, its column offset).
  SmallVector<std::tuple<Value, int64_t, int64_t>> pieces;
  SmallVector<int64_t> widths = {colsOf(output)};
  if (auto slice = dyn_cast<SliceOp>(op)) {
    pieces.push_back({slice.getInput(), 0, slice.getOffset()});
    widths.append({colsOf(slice.getInput()), int64_t(slice.getOffset())});
  } else {
    int64_t at = 0;
    for (Value input : cast<ConcatOp>(op).getInputs()) {
      pieces.push_back({input, at, 0});
      widths.append({colsOf(input), at});
      at += colsOf(input);
    }
  }
  int64_t vec = vectorWidth(widths, elementBytes(element));
  int64_t rows = rowsOf(output), cols = colsOf(output);
  std::string type = elementTypeName(element);
  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(formatv("constexpr int kVec = {0};", vec).str());
  w.line(
      formatv("constexpr tj_i64 kRows = {0}, kCols = {1};", rows, cols).str());
  w.line("const tj_i64 v = static_cast<tj_i64>(blockIdx.x) * blockDim.x + "
         "threadIdx.x;");
  w.line("if (v >= kRows * (kCols / kVec)) return;");
  w.line("const tj_i64 row = v / (kCols / kVec), col = v % (kCols / kVec) * "
         "kVec;");
  std::string store = "*reinterpret_cast<tj_vec<" + type + ", kVec> *>(" +
                      builder.param(output).str() + " + row * kCols + col) = ";
  for (auto [index, piece] : llvm::enumerate(pieces)) {
    auto [input, first, offset] = piece;
    int64_t last = first + colsOf(input) - (pieces.size() == 1 ? 0 : 0);
    std::string load =
        formatv("*reinterpret_cast<const tj_vec<{0}, kVec> *>("
                "{1} + row * {2} + col - {3} + {4})",
                type, builder.param(input), colsOf(input), first, offset)
            .str();
    if (pieces.size() == 1)
      w.line(store + load + ";");
    else
      w.line(formatv("{0}if (col < {1}) {2}{3};", index ? "else " : "", last,
                     store, load)
                 .str());
  }
  kernels.push_back(
      builder.finish(w, gridFor(rows * cols / vec), {kThreads, 1, 1}));
  return llvm::Error::success();
}
