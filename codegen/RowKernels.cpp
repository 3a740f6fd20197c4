//===- RowKernels.cpp - normalizations: a warp per row --------------------===//
//
// LayerNorm and RMSNorm forward (with their FP8 cast and amax) keep a row in
// the registers of one warp and reduce with shuffles, so a row is read once.
// A transposed FP8 copy is a second, tiled kernel over the cast output.
// The backward pass is a row kernel for dx and a column kernel for dgamma
// and dbeta (sums over rows, with no atomics, so they are deterministic).
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include "dialects/TEDialect.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using llvm::formatv;

namespace {

constexpr int64_t kWarps = 4, kMaxChunks = 32;

/// The user of `value` inside the group of type OpT.
template <typename OpT> OpT userIn(const KernelGroup &group, Value value) {
  for (Operation *user : value.getUsers())
    if (auto op = dyn_cast<OpT>(user);
        op && llvm::is_contained(group.ops, user))
      return op;
  return nullptr;
}

/// Row-kernel constants and the registers of one row: `kChunks` vectors of
/// kVec per lane, lane-interleaved so that a warp's loads are contiguous.
void writeRowPrologue(CudaWriter &w, int64_t vec, int64_t rows, int64_t cols) {
  int64_t chunks = (cols + 32 * vec - 1) / (32 * vec);
  w.line(formatv("constexpr int kVec = {0}, kChunks = {1}, kWarps = {2};", vec,
                 chunks, kWarps)
             .str());
  w.line(
      formatv("constexpr tj_i64 kRows = {0}, kCols = {1};", rows, cols).str());
  w.line("const tj_i64 row = static_cast<tj_i64>(blockIdx.x) * kWarps + "
         "threadIdx.x / 32;");
  w.line("const int lane = threadIdx.x % 32;");
}

/// Loads `array[kChunks][kVec]` of a row of `pointer` (zeros past the end).
void writeRowLoad(CudaWriter &w, StringRef array, StringRef rowPointer) {
  w.line("float " + array + "[kChunks][kVec];");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  w.line("const tj_i64 col = static_cast<tj_i64>(lane + 32 * k) * kVec;");
  w.line("if (col < kCols) tj_load(" + array + "[k], " + rowPointer +
         " + col);");
  w.line("else for (int i = 0; i < kVec; ++i) " + array + "[k][i] = 0.f;");
  w.close();
}

/// A sum over the row's registers: `expr` of element (k, i), past the end
/// excluded.
void writeRowSum(CudaWriter &w, StringRef name, StringRef expr) {
  w.line("float " + name + " = 0.f;");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  w.line("#pragma unroll");
  w.line("for (int i = 0; i < kVec; ++i) if ((lane + 32 * k) * kVec < kCols) " +
         name + " += " + expr + ";");
  w.close();
  w.line(name + " = tj_warp_sum(" + name + ");");
}

Dim3 rowGrid(int64_t rows) { return {(rows + kWarps - 1) / kWarps, 1, 1}; }

std::string gammaExpr(bool zeroCentered) {
  return zeroCentered ? "(1.f + gamma_in[k][i])" : "gamma_in[k][i]";
}

} // namespace

llvm::Error
tejit::codegen::emitNormForward(KernelBuilder &builder,
                                std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  Operation *norm = group.ops.front();
  auto layerNorm = dyn_cast<LayerNormFwdOp>(norm);
  auto rmsNorm = dyn_cast<RMSNormFwdOp>(norm);
  if (!layerNorm && !rmsNorm)
    return noEmitter(group.op, "the norm must come first");
  Value x = norm->getOperand(0), gamma = norm->getOperand(1);
  Value y = norm->getResult(0);
  Value mean = layerNorm ? layerNorm.getMean() : Value();
  Value rsigma = layerNorm ? layerNorm.getRsigma() : rmsNorm.getRsigma();
  double eps =
      (layerNorm ? layerNorm.getEps() : rmsNorm.getEps()).convertToDouble();
  bool zeroCentered = layerNorm ? layerNorm.getZeroCenteredGamma()
                                : rmsNorm.getZeroCenteredGamma();
  QuantizeOp quantize = userIn<QuantizeOp>(group, y);
  AmaxOp amax = userIn<AmaxOp>(group, y);
  TransposeOp transpose =
      quantize ? userIn<TransposeOp>(group, quantize.getOutput()) : nullptr;
  unsigned handled = 1 + !!quantize + !!amax + !!transpose;
  if (handled != group.ops.size())
    return noEmitter(group.op, "ops other than a cast after the norm");
  int64_t rows = rowsOf(x), cols = colsOf(x);
  int64_t vec =
      vectorWidth({cols}, elementBytes(tensorType(x).getElementType()));
  if ((cols + 32 * vec - 1) / (32 * vec) > kMaxChunks)
    return noEmitter(group.op, "rows wider than a warp's registers");

  CudaWriter w;
  builder.writeSignature(w, 32 * kWarps);
  writeRowPrologue(w, vec, rows, cols);
  Value amaxValue = quantize ? quantize.getAmax()
                    : amax   ? amax.getAmax()
                             : Value();
  bool writesAmax = amaxValue && group.isOutput(amaxValue);
  if (quantize)
    w.line("const float scale_v = " + builder.param(quantize.getScale()).str() +
           "[0];");
  if (amaxValue)
    w.line("float amax0 = 0.f;");
  w.open("if (row < kRows)");
  writeRowLoad(w, "x_in", builder.param(x).str() + " + row * kCols");
  if (layerNorm) {
    writeRowSum(w, "mu", "x_in[k][i]");
    w.line("mu /= kCols;");
    writeRowSum(w, "var", "(x_in[k][i] - mu) * (x_in[k][i] - mu)");
  } else {
    w.line("const float mu = 0.f;");
    writeRowSum(w, "var", "x_in[k][i] * x_in[k][i]");
  }
  w.line("const float rs = rsqrtf(var / kCols + " + floatLiteral(eps) + ");");
  w.open("if (lane == 0)");
  if (mean && group.isOutput(mean))
    w.line(builder.param(mean).str() + "[row] = mu;");
  if (group.isOutput(rsigma))
    w.line(builder.param(rsigma).str() + "[row] = rs;");
  w.close();
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  w.line("const tj_i64 col = static_cast<tj_i64>(lane + 32 * k) * kVec;");
  w.open("if (col < kCols)");
  w.line(std::string("float gamma_k[kVec], y_out[kVec]") +
         (layerNorm ? ", beta_k[kVec]" : "") +
         (quantize ? ", q_out[kVec]" : "") + ";");
  w.line("tj_load(gamma_k, " + builder.param(gamma).str() + " + col);");
  if (layerNorm)
    w.line("tj_load(beta_k, " + builder.param(layerNorm.getBeta()).str() +
           " + col);");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  std::string g = zeroCentered ? "(1.f + gamma_k[i])" : "gamma_k[i]";
  w.line("y_out[i] = (x_in[k][i] - mu) * rs * " + g +
         (layerNorm ? " + beta_k[i];" : ";"));
  if (amaxValue)
    w.line("amax0 = fmaxf(amax0, fabsf(y_out[i]));");
  if (quantize)
    w.line("q_out[i] = y_out[i] * scale_v;");
  w.close();
  if (group.isOutput(y))
    w.line("tj_store(" + builder.param(y).str() +
           " + row * kCols + col, y_out);");
  if (quantize && group.isOutput(quantize.getOutput()))
    w.line("tj_store(" + builder.param(quantize.getOutput()).str() +
           " + row * kCols + col, q_out);");
  w.close();
  w.close();
  w.close();
  if (writesAmax) {
    w.line("// One atomic per block: the block's max, by warp shuffles.");
    w.line("const float amax0_block = tj_block_max(amax0);");
    w.line("if (threadIdx.x == 0) tj_atomic_amax(" +
           builder.param(amaxValue).str() + ", amax0_block);");
  }
  kernels.push_back(builder.finish(w, rowGrid(rows), {32 * kWarps, 1, 1}));
  if (!transpose)
    return llvm::Error::success();

  // The transposed copy reads the FP8 output back, so that must be written.
  if (!group.isOutput(quantize.getOutput()))
    return noEmitter(group.op, "a transpose of an FP8 value not written");
  KernelGroup copy;
  copy.op = group.op;
  copy.kind = group.kind + "_transpose";
  copy.ops = {transpose};
  copy.inputs = {quantize.getOutput()};
  copy.outputs = {transpose.getOutput()};
  copy.outer = group.outer;
  KernelBuilder copyBuilder(copy, builder.name + "_transpose", builder.state());
  return emitPointwise(copyBuilder, kernels);
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

namespace {
/// dx = rs * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma', one
/// warp per row; mean(g) is LayerNorm's only. With an `add` of dx, its other
/// operand is read beside dx's columns and the sum, taken from the float dx,
/// is stored (dx only when it is an output too).
EmittedKernel writeNormDx(KernelBuilder &builder, Value dy, Value x, Value mean,
                          Value rsigma, Value gamma, Value dx, AddOp add,
                          bool zeroCentered) {
  int64_t rows = rowsOf(x), cols = colsOf(x);
  int64_t vec =
      vectorWidth({cols}, elementBytes(tensorType(x).getElementType()));
  CudaWriter w;
  builder.writeSignature(w, 32 * kWarps);
  writeRowPrologue(w, vec, rows, cols);
  w.open("if (row < kRows)");
  w.line("const float mu = " +
         (mean ? builder.param(mean).str() + "[row]" : std::string("0.f")) +
         ", rs = " + builder.param(rsigma).str() + "[row];");
  writeRowLoad(w, "dy_in", builder.param(dy).str() + " + row * kCols");
  writeRowLoad(w, "x_in", builder.param(x).str() + " + row * kCols");
  writeRowLoad(w, "gamma_in", builder.param(gamma).str());
  std::string g = "dy_in[k][i] * " + gammaExpr(zeroCentered);
  std::string xhat = "(x_in[k][i] - mu) * rs";
  if (mean) {
    writeRowSum(w, "mean_g", g);
    w.line("mean_g /= kCols;");
  } else {
    w.line("const float mean_g = 0.f;");
  }
  writeRowSum(w, "mean_gx", g + " * " + xhat);
  w.line("mean_gx /= kCols;");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  w.line("const tj_i64 col = static_cast<tj_i64>(lane + 32 * k) * kVec;");
  w.open("if (col < kCols)");
  std::string dxValue = "rs * (" + g + " - mean_g - " + xhat + " * mean_gx)";
  if (add) {
    Value addend = add.getLhs() == dx ? add.getRhs() : add.getLhs();
    w.line("float dx_out[kVec], addend_k[kVec], sum_out[kVec];");
    w.line("tj_load(addend_k, " + builder.param(addend).str() +
           " + row * kCols + col);");
    w.line("#pragma unroll");
    w.open("for (int i = 0; i < kVec; ++i)");
    w.line("dx_out[i] = " + dxValue + ";");
    w.line("sum_out[i] = dx_out[i] + addend_k[i];");
    w.close();
  } else {
    w.line("float dx_out[kVec];");
    w.line("#pragma unroll");
    w.line("for (int i = 0; i < kVec; ++i) dx_out[i] = " + dxValue + ";");
  }
  if (builder.group.isOutput(dx))
    w.line("tj_store(" + builder.param(dx).str() +
           " + row * kCols + col, dx_out);");
  if (add && builder.group.isOutput(add.getOutput()))
    w.line("tj_store(" + builder.param(add.getOutput()).str() +
           " + row * kCols + col, sum_out);");
  w.close();
  w.close();
  w.close();
  return builder.finish(w, rowGrid(rows), {32 * kWarps, 1, 1});
}

/// dgamma = sum over rows of dy * xhat, dbeta = sum of dy: a stream over dy
/// and x (bandwidth-bound) into kVec columns per thread. A block sums a strip
/// of kLanes * kVec columns over a split of the rows, in kGroups row groups
/// of kLanes lanes; each thread issues the loads of kUnroll rows, the row
/// statistics too, before their first use. The row groups of a warp meet by
/// shuffles, the warps in shared memory; with several splits, their partial
/// sums meet in scratch, added in split order by the strip's last block.
/// Every sum is in a fixed order: the result is deterministic.
///
/// The sizes come from benchmarks/gpu/micro/dgamma_variants.cu, on an H200
/// at 8192 x 4096 bf16 (LayerNorm; a device copy moves 4.0 TB/s), where the
/// earlier 512-thread, 4-row, 64 x 5-block version of this kernel took 62 us
/// (54% of the copy's bandwidth) and this one takes 40 us (84%):
/// - Rows stay in their storage type until used: converted to float at the
///   load, they took twice the registers and spilled (84 us instead of 44 at
///   256 threads x 4 rows).
/// - 256 threads with 8 rows in flight each, two blocks per SM (100-125
///   registers; writeSignature sets no minimum of blocks, so that rests on
///   staying under 128): as much in flight as 512 threads x 4 rows, in
///   blocks that start and end apart.
/// - About eight blocks per SM of 132 in all (four waves), as the pointwise
///   bias gradients: 9, 13, 17 and 25 splits took 41.9, 41.6, 41.1 and 44.1
///   us. A block's start and end (its first loads, the reduction, the last
///   block's sums) cost about a microsecond, so more, shorter blocks lose
///   (the earlier 512-thread kernel took 98 us with 33 splits), while too
///   few leave a ragged last wave.
/// - Warps' row groups add up by shuffles (one smem row per group instead:
///   48 us instead of 44 at 256 x 4); 32-bit indices where they fit (64-bit
///   ones spilled: 56 us).
/// - The last block spreads a strip's splits over all its threads (100003 x
///   64 rows in 390 splits: 16 us instead of 25).
EmittedKernel writeNormDgamma(KernelBuilder &builder, Value dy, Value x,
                              Value mean, Value rsigma, Value dgamma,
                              Value dbeta) {
  constexpr int64_t kThreads = 256, kUnroll = 8, kTargetBlocks = 8 * 132;
  int64_t rows = rowsOf(x), cols = colsOf(x);
  int64_t bytes = elementBytes(tensorType(x).getElementType());
  int64_t vec = vectorWidth({cols}, bytes);
  // A row group reads 128 contiguous bytes of a row (whole sectors), or the
  // whole row when narrower; lanes divide a warp, so that the groups of a
  // warp add up by shuffles.
  int64_t lanes = std::min<int64_t>(
      std::clamp<int64_t>(128 / (vec * bytes), 1, 32),
      static_cast<int64_t>(llvm::PowerOf2Ceil((cols + vec - 1) / vec)));
  int64_t groups = kThreads / lanes, stripCols = lanes * vec;
  int64_t strips = (cols + stripCols - 1) / stripCols;
  // Splits for about kTargetBlocks blocks, each at least a pass of rows.
  int64_t rowsPerPass = groups * kUnroll;
  int64_t splits =
      std::clamp<int64_t>((kTargetBlocks + strips - 1) / strips, 1,
                          std::max<int64_t>(1, rows / rowsPerPass));
  int64_t splitRows = (rows + splits - 1) / splits;
  splits = (rows + splitRows - 1) / splitRows; // none empty
  SmallVector<std::pair<StringRef, Value>> outputs;
  for (auto [name, value] : {std::pair<StringRef, Value>{"dgamma", dgamma},
                             std::pair<StringRef, Value>{"dbeta", dbeta}})
    if (value)
      outputs.push_back({name, value});
  int64_t sums = outputs.size();
  if (splits > 1)
    builder.requestScratch((splits * sums * cols + strips) * 4);
  // Element offsets (and the scratch's) in 32 bits when they fit.
  StringRef indexType = rows * cols < (int64_t(1) << 31) ? "int" : "tj_i64";
  auto vecType = [&](Value value) {
    return formatv("tj_vec<{0}, kVec>",
                   elementTypeName(tensorType(value).getElementType()))
        .str();
  };

  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(formatv("constexpr int kVec = {0}, kLanes = {1}, kGroups = {2}, "
                 "kUnroll = {3}, kWarps = {4};",
                 vec, lanes, groups, kUnroll, kThreads / 32)
             .str());
  w.line(formatv("constexpr {0} kRows = {1}, kCols = {2}, kSplitRows = {3};",
                 indexType, rows, cols, splitRows)
             .str());
  w.line("const int lane = threadIdx.x % kLanes, group = threadIdx.x / "
         "kLanes;");
  w.line(formatv("const {0} col = (static_cast<{0}>(blockIdx.x) * kLanes + "
                 "lane) * kVec;",
                 indexType)
             .str());
  w.line(formatv("const {0} row_begin = static_cast<{0}>(blockIdx.y) * "
                 "kSplitRows;",
                 indexType)
             .str());
  w.line(formatv("const {0} row_end = row_begin + kSplitRows < kRows ? "
                 "row_begin + kSplitRows : kRows;",
                 indexType)
             .str());
  std::string accs;
  for (auto [name, value] : outputs)
    accs += (accs.empty() ? "" : ", ") + (name + "_acc[kVec] = {}").str();
  w.line("float " + accs + ";");
  w.open("if (col < kCols)");
  w.open(formatv("for ({0} base = row_begin + group; base < row_end; base += "
                 "kGroups * kUnroll)",
                 indexType)
             .str());
  w.line("// Every load, the row statistics too, before the first use; rows "
         "in their");
  w.line("// storage type (half the registers of floats for 16-bit types).");
  w.line(vecType(dy) + " dy_v[kUnroll];");
  w.line(vecType(x) + " x_v[kUnroll];");
  w.line(mean ? "float mu_v[kUnroll], rs_v[kUnroll];" : "float rs_v[kUnroll];");
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line(formatv("const {0} row = base + u * kGroups;", indexType).str());
  w.open("if (row < row_end)");
  w.line(formatv("dy_v[u] = *reinterpret_cast<const {0} *>({1} + row * kCols "
                 "+ col);",
                 vecType(dy), builder.param(dy))
             .str());
  w.line(formatv("x_v[u] = *reinterpret_cast<const {0} *>({1} + row * kCols + "
                 "col);",
                 vecType(x), builder.param(x))
             .str());
  if (mean)
    w.line("mu_v[u] = " + builder.param(mean).str() + "[row];");
  w.line("rs_v[u] = " + builder.param(rsigma).str() + "[row];");
  w.close();
  w.close();
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("if (base + u * kGroups >= row_end) break;");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  w.line("const float dy_f = tj_to_float(dy_v[u].v[i]);");
  if (dgamma)
    w.line(std::string("dgamma_acc[i] += dy_f * ") +
           (mean ? "(tj_to_float(x_v[u].v[i]) - mu_v[u])"
                 : "tj_to_float(x_v[u].v[i])") +
           " * rs_v[u];");
  if (dbeta)
    w.line("dbeta_acc[i] += dy_f;");
  w.close();
  w.close();
  w.close();
  w.close();

  w.line("// The row groups of a warp add up by shuffles, then the warps in "
         "shared");
  w.line("// memory, in a fixed order.");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  w.line("#pragma unroll");
  w.open("for (int offset = kLanes; offset < 32; offset *= 2)");
  for (auto [name, value] : outputs)
    w.line(formatv("{0}_acc[i] += __shfl_xor_sync(0xffffffffu, {0}_acc[i], "
                   "offset);",
                   name)
               .str());
  w.close();
  w.close();
  w.line(formatv("__shared__ float partial[{0}][kWarps][kLanes * kVec];", sums)
             .str());
  w.open("if (threadIdx.x % 32 < kLanes)");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  for (auto [index, output] : llvm::enumerate(outputs))
    w.line(formatv("partial[{0}][threadIdx.x / 32][lane * kVec + i] = "
                   "{1}_acc[i];",
                   index, output.first)
               .str());
  w.close();
  w.close();
  w.line("__syncthreads();");
  // Thread c of the strip's sums: which sum, which column.
  auto writeSumColumn = [&] {
    w.line("const int sum_index = c / (kLanes * kVec);");
    w.line(formatv("const {0} out = static_cast<{0}>(blockIdx.x) * kLanes * "
                   "kVec + c % (kLanes * kVec);",
                   indexType)
               .str());
  };
  auto openSums = [&] {
    w.open(formatv("for (int c = threadIdx.x; c < {0} * kLanes * kVec; c += "
                   "blockDim.x)",
                   sums)
               .str());
    writeSumColumn();
  };
  auto store = [&](StringRef sum) {
    for (auto [index, output] : llvm::enumerate(outputs)) {
      Value value = output.second;
      w.line(formatv("{0}if (sum_index == {1}) {2}[out] = "
                     "tj_convert<{3}>::from({4});",
                     index ? "else " : "", index, builder.param(value),
                     elementTypeName(tensorType(value).getElementType()), sum)
                 .str());
    }
  };
  openSums();
  w.line("if (out >= kCols) continue;");
  w.line("float sum = 0.f;");
  w.line("#pragma unroll");
  w.line("for (int w = 0; w < kWarps; ++w) sum += "
         "partial[sum_index][w][c % (kLanes * kVec)];");
  if (splits > 1)
    w.line(formatv("tj_scratch[(blockIdx.y * {0} + sum_index) * kCols + out] "
                   "= sum;",
                   sums)
               .str());
  else
    store("sum");
  w.close();
  if (splits > 1) {
    writeLastBlockOfStrip(
        w, formatv("reinterpret_cast<unsigned *>(tj_scratch + {0})",
                   splits * sums * cols)
               .str());
    w.line("const volatile float *partials = tj_scratch;");
    // The strip's sums in split order, eight loads in flight at a time;
    // when they are fewer than the threads, kParts threads per sum take
    // every kParts-th split each, and meet in shared memory.
    int64_t outs = sums * stripCols;
    int64_t parts = outs < kThreads ? kThreads / outs : 1;
    w.line(formatv("constexpr int kSplits = {0}, kParts = {1};", splits, parts)
               .str());
    auto sumSplits = [&](StringRef first) {
      w.line("float sum = 0.f;");
      w.open(("for (int s0 = " + first + "; s0 < kSplits; s0 += 8 * kParts)")
                 .str());
      w.line("float part[8];");
      w.line("#pragma unroll");
      w.line(formatv("for (int j = 0; j < 8; ++j) if (s0 + j * kParts < "
                     "kSplits) part[j] = partials[((s0 + j * kParts) * {0} + "
                     "sum_index) * kCols + out];",
                     sums)
                 .str());
      w.line("#pragma unroll");
      w.line("for (int j = 0; j < 8; ++j) if (s0 + j * kParts < kSplits) sum "
             "+= part[j];");
      w.close();
    };
    if (parts == 1) {
      openSums();
      w.line("if (out >= kCols) continue;");
      sumSplits("0");
      store("sum");
      w.close();
    } else {
      w.line(formatv("__shared__ float final_part[kParts][{0}];", outs).str());
      w.line(formatv("const int c = threadIdx.x % {0}, first = threadIdx.x / "
                     "{0};",
                     outs)
                 .str());
      writeSumColumn();
      w.open("if (out < kCols)");
      sumSplits("first");
      w.line("final_part[first][c] = sum;");
      w.close();
      w.line("__syncthreads();");
      w.line("if (first != 0 || out >= kCols) return;");
      w.line("float sum = final_part[0][c];");
      w.line("#pragma unroll");
      w.line("for (int p = 1; p < kParts; ++p) sum += final_part[p][c];");
      store("sum");
    }
  }
  return builder.finish(w, {strips, splits, 1}, {kThreads, 1, 1});
}
} // namespace

llvm::Error
tejit::codegen::emitNormBackward(KernelBuilder &builder,
                                 std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  Operation *op = group.ops.front();
  Value dy, x, mean, rsigma, gamma, dx, dgamma, dbeta;
  bool zeroCentered;
  if (auto ln = dyn_cast<LayerNormBwdOp>(op)) {
    dy = ln.getGrad(), x = ln.getInput(), mean = ln.getMean();
    rsigma = ln.getRsigma(), gamma = ln.getGamma();
    dx = ln.getInputGrad(), dgamma = ln.getGammaGrad(),
    dbeta = ln.getBetaGrad();
    zeroCentered = ln.getZeroCenteredGamma();
  } else {
    auto rms = cast<RMSNormBwdOp>(op);
    dy = rms.getGrad(), x = rms.getInput(), rsigma = rms.getRsigma();
    gamma = rms.getGamma(), dx = rms.getInputGrad(),
    dgamma = rms.getGammaGrad();
    zeroCentered = rms.getZeroCenteredGamma();
  }
  // norm_bwd_add: the add of dx to another gradient, in the dx kernel.
  AddOp add = userIn<AddOp>(group, dx);
  if (group.ops.size() != 1u + !!add)
    return noEmitter(group.op, "ops other than an add of dx after the norm");
  if (add && add.getLhs() == add.getRhs())
    return noEmitter(group.op, "an add of dx to itself");
  int64_t cols = colsOf(x);
  int64_t vec =
      vectorWidth({cols}, elementBytes(tensorType(x).getElementType()));
  if ((cols + 32 * vec - 1) / (32 * vec) > kMaxChunks)
    return noEmitter(op, "rows wider than a warp's registers");
  // Each kernel binds only what it uses: two groups over the same op.
  KernelGroup rowGroup = group, columnGroup = group;
  rowGroup.inputs = {dy, x};
  if (mean)
    rowGroup.inputs.push_back(mean);
  rowGroup.inputs.append({rsigma, gamma});
  if (add)
    rowGroup.inputs.push_back(add.getLhs() == dx ? add.getRhs() : add.getLhs());
  // A standalone op writes all its results; a region, what it yields.
  rowGroup.outputs.clear();
  for (Value value : {dx, add ? add.getOutput() : Value()})
    if (value && group.isOutput(value))
      rowGroup.outputs.push_back(value);
  if (!group.isOutput(dgamma))
    dgamma = Value();
  if (dbeta && !group.isOutput(dbeta))
    dbeta = Value();
  columnGroup.inputs = {dy, x};
  if (mean)
    columnGroup.inputs.push_back(mean);
  columnGroup.inputs.push_back(rsigma);
  columnGroup.outputs.clear();
  for (Value value : {dgamma, dbeta})
    if (value)
      columnGroup.outputs.push_back(value);
  KernelBuilder rowBuilder(rowGroup, builder.name + "_dx", builder.state());
  kernels.push_back(writeNormDx(rowBuilder, dy, x, mean, rsigma, gamma, dx, add,
                                zeroCentered));
  if (columnGroup.outputs.empty())
    return llvm::Error::success();
  KernelBuilder columnBuilder(columnGroup, builder.name + "_dgamma",
                              builder.state());
  kernels.push_back(
      writeNormDgamma(columnBuilder, dy, x, mean, rsigma, dgamma, dbeta));
  return llvm::Error::success();
}
