//===- RowKernels.cpp - normalizations: a warp per row --------------------===//
//
// LayerNorm and RMSNorm forward (with their FP8 cast and amax) keep a row in
// the registers of one warp and reduce with shuffles, so a row is read once.
// A transposed FP8 copy is a second, tiled kernel over the cast output.
// The backward pass reads dy and x once: a row kernel computes dx and
// per-block partial sums of dgamma and dbeta, and a finalize kernel adds
// those in a fixed order (no atomics: deterministic); see "Backward".
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
//
// One pass over dy and x. A row kernel computes dx (and, for norm_bwd_add,
// dx plus another gradient) and, while dy and xhat are in its registers,
// the sums of dgamma (dy * xhat) and dbeta (dy) over its block's rows; each
// block writes one partial row to the scratch ([blocks][sums][cols]
// floats), and a small finalize kernel, the next plan step, adds them in
// block order from the scratch as the row kernel left it (Transformer
// Engine's way). Nothing is zeroed and no sum depends on block timing.
//
// The design is the "finalize kernel, 256 threads a row, 2 blocks an SM,
// prefetch" variant of benchmarks/gpu/micro/norm_bwd_fused.cu. Measured
// there on an H200 at 8192 x 4096 bf16 with the residual add, memsets
// included (us, LayerNorm / RMSNorm):
// - the earlier pair, a row kernel for dx (a warp a row, 77.8 / 78.6) and a
//   column kernel that read dy and x again for dgamma (42.4 / 40.6), took
//   121.2 / 120.3; this design 82.1 / 76.6.
// - Two 16-byte vectors of a row a thread (256 threads a row at 4096 bf16)
//   and two blocks an SM, so at most 128 registers: 128 threads a row (four
//   vectors, 3 blocks an SM) took 122.9 / 106.4, 512 threads a row (one
//   vector) 93.0 / 88.0, 256 threads at 3 blocks an SM (80 registers)
//   153.5 / 92.2.
// - The next row's loads (dy, x, its statistics) go out before this row's
//   arithmetic (without: 104.1 / 99.2). So that they have the registers,
//   gamma is read again for each row (from L1) rather than kept, 16-bit
//   rows stay in their storage type across the row reduction
//   (tj_hide_words), and norm_bwd_add's addend, needed only after the
//   reduction, is loaded as its own row starts, not a row ahead as in the
//   micro-benchmark. At 4096 bf16 with the add the kernel then takes 120
//   registers (LayerNorm) and 107 (RMSNorm) without spilling (ptxas of CUDA
//   13.0, sm_90a); with the addend a row ahead, LayerNorm took 128 and
//   spilled 10 bytes (the micro-benchmark's kernel: 8). Where the addend is
//   loaded has not been timed on its own.
// - No __restrict__ on the pointers (the micro-benchmark has none): with it
//   the compiler keeps the first phase's gamma across the reduction and
//   loads through the non-coherent path; te-compile's earlier emitted
//   version of this loop ran so at 106.9 / 98.9 us, as the loop without the
//   prefetch.
//
//===----------------------------------------------------------------------===//

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// How the row kernel covers the matrix: kRowThreads threads a row, each
/// with kChunks vectors of kVec elements (lane-interleaved, so that a
/// warp's accesses are contiguous); kRowGroups rows at a time in a block of
/// kThreads; a block takes kBlockRows consecutive rows, so that the partial
/// rows are few (one a block, about one wave of blocks). Rows narrower than
/// 4096 bf16 take fewer threads (a warp at least) and a block of 256 runs
/// several at a time, their sums meeting in shared memory; wider ones take
/// 512 threads, one block an SM.
struct RowBlocking {
  int64_t vec, chunks, rowThreads, rowGroups, threads, minBlocks, blockRows,
      grid;
};

RowBlocking rowBlocking(int64_t rows, int64_t cols, int64_t elementBytes) {
  // Two vectors a thread; at least 256 threads a block, two such blocks (512
  // threads) an SM; one wave on the 132 SMs of an H100 or H200 SXM.
  constexpr int64_t kChunksWanted = 2, kMinThreads = 256, kThreadsPerSm = 512,
                    kSms = 132;
  RowBlocking b;
  b.vec = vectorWidth({cols}, elementBytes);
  int64_t vectors = ceilDiv(cols, b.vec);
  b.rowThreads = std::clamp<int64_t>(
      llvm::PowerOf2Ceil(ceilDiv(vectors, kChunksWanted)), 32, 1024);
  b.chunks = ceilDiv(vectors, b.rowThreads);
  b.threads = std::max(kMinThreads, b.rowThreads);
  b.rowGroups = b.threads / b.rowThreads;
  b.minBlocks = std::max<int64_t>(1, kThreadsPerSm / b.threads);
  // Whole passes of the row groups, at least one.
  int64_t perBlock = ceilDiv(rows, b.minBlocks * kSms);
  b.blockRows =
      std::max(b.rowGroups, ceilDiv(perBlock, b.rowGroups) * b.rowGroups);
  b.grid = std::max<int64_t>(1, ceilDiv(rows, b.blockRows));
  return b;
}

/// The values of a norm backward group; null where absent, and dx, the
/// add's output, dgamma and dbeta null where the group does not write them.
struct NormBwd {
  Value dy, x, mean, rsigma, gamma, dx, sum, addend, dgamma, dbeta;
  bool zeroCentered = false;

  /// The column sums the group writes, by name, in partial-row order.
  SmallVector<std::pair<StringRef, Value>> columnSums() const {
    SmallVector<std::pair<StringRef, Value>> sums;
    if (dgamma)
      sums.push_back({"dgamma", dgamma});
    if (dbeta)
      sums.push_back({"dbeta", dbeta});
    return sums;
  }
};

std::string vecType(Value value) {
  return formatv("tj_vec<{0}, kVec>",
                 elementTypeName(tensorType(value).getElementType()))
      .str();
}

/// `const Index col = ...` of chunk k of this thread's row.
constexpr const char *kColLine =
    "const Index col = static_cast<Index>(t + kRowThreads * k) * kVec;";

/// The end of a row in the row kernel: its sums (a warp's by shuffles, then
/// a row's warps in shared memory, in warp order), then dx.
void writeNormDxRowEnd(CudaWriter &w, KernelBuilder &builder, const NormBwd &n,
                       int64_t vec, int64_t rowWarps, StringRef gamma,
                       StringRef xhat) {
  if (n.mean)
    w.line("sum_g = tj_warp_sum(sum_g);");
  w.line("sum_gx = tj_warp_sum(sum_gx);");
  if (rowWarps > 1) {
    w.line("// Two buffers, so that a row takes one barrier.");
    w.open("if (t % 32 == 0)");
    w.line("row_sums[parity][group][t / 32][0] = sum_gx;");
    if (n.mean)
      w.line("row_sums[parity][group][t / 32][1] = sum_g;");
    w.close();
    w.line("__syncthreads();");
    w.line(n.mean ? "sum_g = 0.f, sum_gx = 0.f;" : "sum_gx = 0.f;");
    w.line("#pragma unroll");
    w.open("for (int w = 0; w < kRowWarps; ++w)");
    w.line("sum_gx += row_sums[parity][group][w][0];");
    if (n.mean)
      w.line("sum_g += row_sums[parity][group][w][1];");
    w.close();
    w.line("parity ^= 1;");
  }
  // 16-bit rows in whole words are converted again below rather than kept
  // as floats, which would take the next row's registers.
  SmallVector<StringRef> hidden;
  for (auto [field, value] : {std::pair<StringRef, Value>{"dy", n.dy},
                              std::pair<StringRef, Value>{"x", n.x}})
    if (elementBytes(tensorType(value).getElementType()) == 2 && vec % 2 == 0)
      hidden.push_back(field);
  if (!hidden.empty()) {
    w.line("#pragma unroll");
    w.open("for (int k = 0; k < kChunks; ++k)");
    for (StringRef field : hidden)
      w.line("tj_hide_words(cur." + field.str() + "[k]);");
    w.close();
  }
  w.line(n.mean ? "const float mean_g = sum_g / kCols, mean_gx = sum_gx / "
                  "kCols;"
                : "const float mean_g = 0.f, mean_gx = sum_gx / kCols;");
  w.line("const Index row = base + group;");
  w.open("if (row < row_end)");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  w.line(kColLine);
  w.open("if (col < kCols)");
  w.line(std::string("float gamma_k[kVec], dx_out[kVec]") +
         (n.sum ? ", sum_out[kVec];" : ";"));
  w.line("tj_load(gamma_k, " + builder.param(n.gamma).str() + " + col);");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  w.line("const float dy_f = tj_to_float(cur.dy[k].v[i]);");
  w.line("const float xhat = " + xhat.str() + ";");
  w.line("dx_out[i] = cur.rs * (dy_f * " + gamma.str() +
         " - mean_g - xhat * mean_gx);");
  if (n.sum)
    w.line("sum_out[i] = dx_out[i] + tj_to_float(addend_v[k].v[i]);");
  w.close();
  if (n.dx)
    w.line("tj_store(" + builder.param(n.dx).str() +
           " + row * kCols + col, dx_out);");
  if (n.sum)
    w.line("tj_store(" + builder.param(n.sum).str() +
           " + row * kCols + col, sum_out);");
  w.close();
  w.close();
  w.close();
}

/// The block's partial sums, row blockIdx.x of [blocks][kSums][kCols]
/// floats in the scratch; a block's row groups add up in shared memory
/// first, in group order.
void writeNormDxPartials(CudaWriter &w,
                         ArrayRef<std::pair<StringRef, Value>> sums,
                         int64_t rowGroups) {
  auto offset = [](size_t index) {
    return index ? std::to_string(index) + " * kCols + " : std::string();
  };
  w.line("float *partial = tj_scratch + static_cast<Index>(blockIdx.x) * "
         "(kSums * kCols);");
  if (rowGroups == 1) {
    w.line("#pragma unroll");
    w.open("for (int k = 0; k < kChunks; ++k)");
    w.line(kColLine);
    w.open("if (col < kCols)");
    for (auto [index, sum] : llvm::enumerate(sums))
      w.line("tj_store(partial + " + offset(index) + "col, " + sum.first.str() +
             "_acc[k]);");
    w.close();
    w.close();
    return;
  }
  w.line("__shared__ float stage[kSums * kCols];");
  w.open("for (int j = 0; j < kRowGroups; ++j)");
  w.open("if (group == j)");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  w.line(kColLine);
  w.line("if (col >= kCols) continue;");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  for (auto [index, sum] : llvm::enumerate(sums)) {
    std::string at = "stage[" + offset(index) + "col + i]";
    std::string acc = sum.first.str() + "_acc[k][i]";
    w.line(at + " = j ? " + at + " + " + acc + " : " + acc + ";");
  }
  w.close();
  w.close();
  w.close();
  w.line("__syncthreads();");
  w.close();
  w.line("for (int e = threadIdx.x; e < kSums * kCols; e += blockDim.x) "
         "partial[e] = stage[e];");
}

/// The row kernel (see above): dx = rs * (g - mean(g) - xhat * mean(g *
/// xhat)), g = dy * gamma', xhat = (x - mu) * rs, mean(g) LayerNorm's only;
/// with an add, its other operand is read beside dx's columns and the sum,
/// taken from the float dx, is stored (dx only when it is written too).
EmittedKernel writeNormDx(KernelBuilder &builder, const NormBwd &n,
                          const RowBlocking &b) {
  int64_t rows = rowsOf(n.x), cols = colsOf(n.x);
  bool needsDx = n.dx || n.sum;
  auto sums = n.columnSums();
  int64_t sumCount = sums.size(), rowWarps = b.rowThreads / 32;
  if (!sums.empty())
    builder.requestScratch(b.grid * sumCount * cols * 4, 0, 0);
  // 32-bit offsets where every one fits, the last block's row_end and the
  // partial rows' too.
  bool narrow = (rows + b.blockRows) * cols < (int64_t(1) << 31) &&
                b.grid * sumCount * cols < (int64_t(1) << 31);
  std::string gamma = n.zeroCentered ? "(1.f + gamma_k[i])" : "gamma_k[i]";
  std::string xhat = n.mean ? "(tj_to_float(cur.x[k].v[i]) - cur.mu) * cur.rs"
                            : "tj_to_float(cur.x[k].v[i]) * cur.rs";

  CudaWriter w;
  builder.writeSignature(w, b.threads, b.minBlocks,
                         /*restrictPointers=*/false);
  bool warpsMeet = needsDx && rowWarps > 1;
  w.line(formatv("constexpr int kVec = {0}, kChunks = {1}, kRowThreads = {2}, "
                 "kRowGroups = {3}{4}{5};",
                 b.vec, b.chunks, b.rowThreads, b.rowGroups,
                 warpsMeet ? ", kRowWarps = " + std::to_string(rowWarps) : "",
                 sums.empty() ? "" : ", kSums = " + std::to_string(sumCount))
             .str());
  w.line(std::string("using Index = ") + (narrow ? "int;" : "tj_i64;"));
  w.line(formatv("constexpr Index kRows = {0}, kCols = {1}, kBlockRows = {2};",
                 rows, cols, b.blockRows)
             .str());
  w.line("const int t = threadIdx.x % kRowThreads, group = threadIdx.x / "
         "kRowThreads;");
  w.line("const Index row_begin = static_cast<Index>(blockIdx.x) * "
         "kBlockRows;");
  w.line("const Index row_end = row_begin + kBlockRows < kRows ? row_begin + "
         "kBlockRows : kRows;");

  // A row of this thread's columns, in the storage types.
  SmallVector<std::pair<StringRef, Value>> rowValues = {{"dy", n.dy},
                                                        {"x", n.x}};
  w.open("struct Row");
  for (auto [field, value] : rowValues)
    w.line(vecType(value) + " " + field.str() + "[kChunks];");
  w.line(n.mean ? "float mu, rs;" : "float rs;");
  w.close(";");
  w.line("// Row `row`, zeros past the block's rows and the row's end.");
  w.open("auto load_row = [&](Row &r, Index row)");
  w.line("const bool valid = row < row_end;");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  w.line(kColLine);
  w.open("if (valid && col < kCols)");
  for (auto [field, value] : rowValues)
    w.line(formatv("r.{0}[k] = *reinterpret_cast<const {1} *>({2} + row * "
                   "kCols + col);",
                   field, vecType(value), builder.param(value))
               .str());
  w.reopen("else");
  for (auto [field, value] : rowValues)
    w.line("r." + field.str() + "[k] = {};");
  w.close();
  w.close();
  if (n.mean)
    w.line("r.mu = valid ? " + builder.param(n.mean).str() + "[row] : 0.f;");
  w.line("r.rs = valid ? " + builder.param(n.rsigma).str() + "[row] : 0.f;");
  w.close(";");

  if (!sums.empty()) {
    std::string accs;
    for (auto [name, value] : sums)
      accs +=
          (accs.empty() ? "" : ", ") + name.str() + "_acc[kChunks][kVec] = {}";
    w.line("float " + accs + ";");
  }
  // LayerNorm sums g and g * xhat over a row, RMSNorm g * xhat only.
  int64_t rowSums = n.mean ? 2 : 1;
  if (warpsMeet) {
    w.line(formatv("__shared__ float row_sums[2][kRowGroups][kRowWarps][{0}];",
                   rowSums)
               .str());
    w.line("int parity = 0;");
  }
  w.line("Row cur;");
  w.line("load_row(cur, row_begin + group);");
  w.open("for (Index base = row_begin; base < row_end; base += kRowGroups)");
  w.line("// The next row's loads go out before this row's arithmetic.");
  w.line("Row next;");
  w.line("load_row(next, base + kRowGroups + group);");
  if (n.sum) {
    // Needed only after the row's sums, the addend is loaded in its own
    // row: a second buffer of it (8 registers at 4096 bf16) made the
    // LayerNorm kernel spill.
    w.line(vecType(n.addend) + " addend_v[kChunks];");
    w.line("#pragma unroll");
    w.open("for (int k = 0; k < kChunks; ++k)");
    w.line(kColLine);
    w.line(formatv("if (base + group < row_end && col < kCols) addend_v[k] = "
                   "*reinterpret_cast<const {0} *>({1} + (base + group) * "
                   "kCols + col);",
                   vecType(n.addend), builder.param(n.addend))
               .str());
    w.close();
  }
  if (needsDx)
    w.line(n.mean ? "float sum_g = 0.f, sum_gx = 0.f;" : "float sum_gx = 0.f;");
  w.line("#pragma unroll");
  w.open("for (int k = 0; k < kChunks; ++k)");
  if (needsDx) {
    w.line(kColLine);
    w.line("float gamma_k[kVec];");
    w.line("if (col < kCols) tj_load(gamma_k, " + builder.param(n.gamma).str() +
           " + col);");
    w.line("else for (int i = 0; i < kVec; ++i) gamma_k[i] = 0.f;");
  }
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  w.line("const float dy_f = tj_to_float(cur.dy[k].v[i]);");
  w.line("const float xhat = " + xhat + ";");
  if (needsDx) {
    w.line("const float g = dy_f * " + gamma + ";");
    if (n.mean)
      w.line("sum_g += g;");
    w.line("sum_gx += g * xhat;");
  }
  if (n.dgamma)
    w.line("dgamma_acc[k][i] += dy_f * xhat;");
  if (n.dbeta)
    w.line("dbeta_acc[k][i] += dy_f;");
  w.close();
  w.close();
  if (needsDx)
    writeNormDxRowEnd(w, builder, n, b.vec, rowWarps, gamma, xhat);
  w.line("cur = next;");
  w.close();
  if (!sums.empty())
    writeNormDxPartials(w, sums, b.rowGroups);
  return builder.finish(w, {b.grid, 1, 1}, {b.threads, 1, 1});
}

/// dgamma and dbeta from the row kernel's partial sums, [parts][sums][cols]
/// floats in the scratch as that kernel left it: a thread takes kVec
/// columns of one sum; warp w of a block adds the partial rows w, w + 8,
/// w + 16, ... in order, eight loads in flight, and the warps' sums meet in
/// shared memory in warp order: the same bits on every run.
EmittedKernel
writeNormDgammaFinalize(KernelBuilder &builder,
                        ArrayRef<std::pair<StringRef, Value>> sums,
                        int64_t cols, int64_t parts) {
  constexpr int64_t kThreads = 256, kUnroll = 8;
  int64_t vec = cols % 4 == 0 ? 4 : cols % 2 == 0 ? 2 : 1;
  int64_t flat = int64_t(sums.size()) * cols;
  builder.requestPreviousScratch(parts * flat * 4);
  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(formatv("constexpr int kVec = {0}, kWarps = {1}, kUnroll = {2};", vec,
                 kThreads / 32, kUnroll)
             .str());
  w.line(formatv("constexpr int kCols = {0}, kFlat = {1}, kParts = {2};", cols,
                 flat, parts)
             .str());
  w.line("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;");
  w.line("// Elements e.. of a partial row: columns e % kCols.. of sum e / "
         "kCols.");
  w.line("const int e = (static_cast<int>(blockIdx.x) * 32 + lane) * kVec;");
  w.line("float sum[kVec] = {};");
  w.open("if (e < kFlat)");
  w.open("for (int p0 = warp; p0 < kParts; p0 += kWarps * kUnroll)");
  w.line("tj_vec<float, kVec> part[kUnroll];");
  w.line("#pragma unroll");
  w.line("for (int u = 0; u < kUnroll; ++u) if (p0 + u * kWarps < kParts) "
         "part[u] = *reinterpret_cast<const tj_vec<float, kVec> *>(tj_scratch "
         "+ (p0 + u * kWarps) * kFlat + e);");
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("if (p0 + u * kWarps >= kParts) break;");
  w.line("#pragma unroll");
  w.line("for (int i = 0; i < kVec; ++i) sum[i] += part[u].v[i];");
  w.close();
  w.close();
  w.close();
  w.line("__shared__ float warp_sums[kWarps][32 * kVec];");
  w.line("#pragma unroll");
  w.line("for (int i = 0; i < kVec; ++i) warp_sums[warp][lane * kVec + i] = "
         "sum[i];");
  w.line("__syncthreads();");
  w.line("if (warp != 0 || e >= kFlat) return;");
  w.line("#pragma unroll");
  w.open("for (int v = 1; v < kWarps; ++v)");
  w.line("#pragma unroll");
  w.line("for (int i = 0; i < kVec; ++i) sum[i] += warp_sums[v][lane * kVec "
         "+ i];");
  w.close();
  for (auto [index, sum] : llvm::enumerate(sums)) {
    std::string first = index ? std::to_string(index) + " * kCols" : "";
    w.line(formatv("{0}if (e < {1}kCols) tj_store({2}{3}, sum);",
                   index ? "else " : "",
                   index ? std::to_string(index + 1) + " * " : "",
                   builder.param(sum.second),
                   index ? " + e - " + first : " + e")
               .str());
  }
  return builder.finish(w, {ceilDiv(flat, 32 * vec), 1, 1}, {kThreads, 1, 1});
}
} // namespace

llvm::Error
tejit::codegen::emitNormBackward(KernelBuilder &builder,
                                 std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  Operation *op = group.ops.front();
  NormBwd n;
  if (auto ln = dyn_cast<LayerNormBwdOp>(op)) {
    n.dy = ln.getGrad(), n.x = ln.getInput(), n.mean = ln.getMean();
    n.rsigma = ln.getRsigma(), n.gamma = ln.getGamma();
    n.dx = ln.getInputGrad(), n.dgamma = ln.getGammaGrad(),
    n.dbeta = ln.getBetaGrad();
    n.zeroCentered = ln.getZeroCenteredGamma();
  } else {
    auto rms = cast<RMSNormBwdOp>(op);
    n.dy = rms.getGrad(), n.x = rms.getInput(), n.rsigma = rms.getRsigma();
    n.gamma = rms.getGamma(), n.dx = rms.getInputGrad(),
    n.dgamma = rms.getGammaGrad();
    n.zeroCentered = rms.getZeroCenteredGamma();
  }
  // norm_bwd_add: the add of dx to another gradient, in the dx kernel.
  AddOp add = userIn<AddOp>(group, n.dx);
  if (group.ops.size() != 1u + !!add)
    return noEmitter(group.op, "ops other than an add of dx after the norm");
  if (add && add.getLhs() == add.getRhs())
    return noEmitter(group.op, "an add of dx to itself");
  int64_t rows = rowsOf(n.x), cols = colsOf(n.x);
  int64_t bytes = elementBytes(tensorType(n.x).getElementType());
  int64_t vec = vectorWidth({cols}, bytes);
  if ((cols + 32 * vec - 1) / (32 * vec) > kMaxChunks)
    return noEmitter(op, "rows wider than a warp's registers");
  // Each kernel binds only what it uses: two groups over the same op. A
  // standalone op writes all its results; a region, what it yields.
  KernelGroup rowGroup = group, finalizeGroup = group;
  rowGroup.inputs = {n.dy, n.x};
  if (n.mean)
    rowGroup.inputs.push_back(n.mean);
  rowGroup.inputs.append({n.rsigma, n.gamma});
  if (add && group.isOutput(add.getOutput())) {
    n.sum = add.getOutput();
    n.addend = add.getLhs() == n.dx ? add.getRhs() : add.getLhs();
    rowGroup.inputs.push_back(n.addend);
  }
  if (!group.isOutput(n.dx))
    n.dx = Value();
  rowGroup.outputs.clear();
  for (Value value : {n.dx, n.sum})
    if (value)
      rowGroup.outputs.push_back(value);
  if (!group.isOutput(n.dgamma))
    n.dgamma = Value();
  if (n.dbeta && !group.isOutput(n.dbeta))
    n.dbeta = Value();
  RowBlocking blocking = rowBlocking(rows, cols, bytes);
  KernelBuilder rowBuilder(rowGroup, builder.name + "_dx", builder.state());
  kernels.push_back(writeNormDx(rowBuilder, n, blocking));
  auto sums = n.columnSums();
  if (sums.empty())
    return llvm::Error::success();
  finalizeGroup.inputs.clear();
  finalizeGroup.outputs.clear();
  for (auto [name, value] : sums)
    finalizeGroup.outputs.push_back(value);
  KernelBuilder finalizeBuilder(
      finalizeGroup, builder.name + "_dgamma_finalize", builder.state());
  kernels.push_back(
      writeNormDgammaFinalize(finalizeBuilder, sums, cols, blocking.grid));
  return llvm::Error::success();
}
