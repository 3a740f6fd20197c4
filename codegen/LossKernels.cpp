//===- LossKernels.cpp - cross entropy: a block per logits row -----------===//
//
// docs/cross-entropy.md. Vocab rows are long (up to 256k columns a rank),
// so a block of up to 512 threads walks each row in strides of 16-byte
// vectors, kUnroll of them in flight per thread:
// - te.cross_entropy_stats reads the row once, keeping an online max and
//   sum of exponentials (and the plain sum for label smoothing), merged
//   over the block at the end (loss.cuh);
// - te.cross_entropy_bwd reads each vector and writes its gradient in the
//   same thread, so the output may be the logits' own memory (the
//   pointers are not __restrict__);
// - te.cross_entropy_loss is a thread per row over the ranks' statistics,
//   te.cross_entropy_mean one block over all rows (a fixed order, so the
//   mean does not depend on scheduling).
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

constexpr int64_t kMaxRowThreads = 512, kUnroll = 4;
constexpr const char *kNegInf = "__int_as_float(0xff800000)";

/// Threads per row block: enough that each walks about kUnroll vectors a
/// pass or more, a multiple of 32 between 64 and kMaxRowThreads.
int64_t rowThreads(int64_t vectors) {
  int64_t threads = llvm::alignTo(llvm::divideCeil(vectors, kUnroll), 32);
  return std::clamp<int64_t>(threads, 64, kMaxRowThreads);
}

/// The constants and the row of a block-per-row kernel, and its target
/// class `y` (as a tj_i64).
void writeRowKernelPrologue(CudaWriter &w, const KernelBuilder &builder,
                            Value logits, Value target, int64_t threads,
                            int64_t vec) {
  w.line(formatv("constexpr int kThreads = {0}, kVec = {1}, kUnroll = {2};",
                 threads, vec, kUnroll)
             .str());
  w.line(formatv("constexpr tj_i64 kCols = {0};", colsOf(logits)).str());
  w.line("constexpr tj_i64 kStride = static_cast<tj_i64>(kThreads) * kVec;");
  w.line("const tj_i64 row = blockIdx.x;");
  w.line("const tj_i64 y = static_cast<tj_i64>(" + builder.param(target).str() +
         "[row]);");
}

/// The loop over a row's vectors, kUnroll loads issued before any is used:
/// `body` sees `v[u][kVec]` (floats) at column `col` when `col < kCols`.
void writeRowLoop(CudaWriter &w, StringRef rowPointer,
                  llvm::function_ref<void()> body) {
  w.open("for (tj_i64 base = static_cast<tj_i64>(threadIdx.x) * kVec; "
         "base < kCols; base += kStride * kUnroll)");
  w.line("float v[kUnroll][kVec];");
  w.line("#pragma unroll");
  w.line("for (int u = 0; u < kUnroll; ++u) if (base + u * kStride < kCols) "
         "tj_load(v[u], " +
         rowPointer.str() + " + base + u * kStride);");
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("const tj_i64 col = base + u * kStride;");
  w.line("if (col >= kCols) break;");
  body();
  w.close();
  w.close();
}

int64_t logitsVector(Value logits) {
  return vectorWidth({colsOf(logits)},
                     elementBytes(tensorType(logits).getElementType()));
}

llvm::Error emitStats(KernelBuilder &builder, CrossEntropyStatsOp op,
                      std::vector<EmittedKernel> &kernels) {
  Value logits = op.getLogits();
  int64_t vec = logitsVector(logits);
  int64_t threads = rowThreads(colsOf(logits) / vec);
  CudaWriter w;
  builder.writeSignature(w, threads);
  writeRowKernelPrologue(w, builder, logits, op.getTarget(), threads, vec);
  std::string x = builder.param(logits).str();
  std::string out = builder.param(op.getStats()).str() + " + row * 4";
  w.open(formatv("if (y == {0}ll)", static_cast<int64_t>(op.getIgnoreIndex()))
             .str());
  w.line("// An ignored row is not read: it has no loss and no gradient.");
  w.line(formatv("if (threadIdx.x == 0) {{ float *s = {0}; s[0] = {1}; s[1] = "
                 "0.f; s[2] = {1}; s[3] = 0.f; }",
                 out, kNegInf)
             .str());
  w.line("return;");
  w.close();
  w.line("const auto *x = " + x + " + row * kCols;");
  w.line(std::string("float m = ") + kNegInf + ", d = 0.f, s = 0.f;");
  writeRowLoop(w, "x", [&] {
    w.line("float vmax = v[u][0];");
    w.line("#pragma unroll");
    w.line("for (int i = 1; i < kVec; ++i) vmax = fmaxf(vmax, v[u][i]);");
    w.line("if (vmax > m) { d *= __expf(m - vmax); m = vmax; }");
    w.line("#pragma unroll");
    w.line("for (int i = 0; i < kVec; ++i) { d += __expf(v[u][i] - m); s += "
           "v[u][i]; }");
  });
  w.line("tj_block_softmax_stats(m, d, s);");
  w.open("if (threadIdx.x == 0)");
  w.line(formatv("const tj_i64 c = y - {0}ll;",
                 static_cast<int64_t>(op.getVocabStart()))
             .str());
  w.line("float *out = " + out + ";");
  w.line("out[0] = m; out[1] = d; out[3] = s;");
  w.line(std::string("out[2] = c >= 0 && c < kCols ? tj_to_float(x[c]) : ") +
         kNegInf + ";");
  w.close();
  kernels.push_back(builder.finish(w, {rowsOf(logits), 1, 1}, {threads, 1, 1}));
  return llvm::Error::success();
}

llvm::Error emitLoss(KernelBuilder &builder, CrossEntropyLossOp op,
                     std::vector<EmittedKernel> &kernels) {
  constexpr int64_t threads = 256;
  int64_t rows = tensorType(op.getTarget()).getDimSize(0);
  double smoothing = op.getLabelSmoothing().convertToDouble();
  CudaWriter w;
  builder.writeSignature(w, threads);
  w.line(formatv("constexpr tj_i64 kRows = {0}; constexpr int kRanks = {1};",
                 rows, static_cast<int64_t>(op.getRanks()))
             .str());
  w.line("const tj_i64 row = static_cast<tj_i64>(blockIdx.x) * " +
         std::to_string(threads) + " + threadIdx.x;");
  w.line("if (row >= kRows) return;");
  std::string loss = builder.param(op.getLoss()).str();
  std::string lse = builder.param(op.getLse()).str();
  std::string stats = builder.param(op.getStats()).str();
  w.open(formatv("if (static_cast<tj_i64>({0}[row]) == {1}ll)",
                 builder.param(op.getTarget()),
                 static_cast<int64_t>(op.getIgnoreIndex()))
             .str());
  w.line(loss + "[row] = 0.f; " + lse + "[row] = 0.f;");
  w.line("return;");
  w.close();
  w.line(std::string("float m = ") + kNegInf + ", d = 0.f, t = " + kNegInf +
         ", s = 0.f;");
  w.line("#pragma unroll");
  w.line("for (int r = 0; r < kRanks; ++r) m = fmaxf(m, " + stats +
         "[(r * kRows + row) * 4]);");
  w.line("#pragma unroll");
  w.open("for (int r = 0; r < kRanks; ++r)");
  w.line("const float *st = " + stats + " + (r * kRows + row) * 4;");
  w.line("if (st[1] != 0.f) d += st[1] * expf(st[0] - m);");
  w.line("t = fmaxf(t, st[2]);");
  w.line("s += st[3];");
  w.close();
  w.line("const float l = m + logf(d);");
  w.line(lse + "[row] = l;");
  // With ε = 1 the target logit has no weight (and may be -inf).
  std::string targetTerm =
      smoothing < 1.0 ? " - " + floatLiteral(1.0 - smoothing) + " * t" : "";
  std::string smoothTerm =
      smoothing > 0.0
          ? " - " +
                floatLiteral(smoothing /
                             static_cast<int64_t>(op.getVocabSize())) +
                " * s"
          : "";
  w.line(loss + "[row] = l" + targetTerm + smoothTerm + ";");
  kernels.push_back(builder.finish(w, {llvm::divideCeil(rows, threads), 1, 1},
                                   {threads, 1, 1}));
  return llvm::Error::success();
}

llvm::Error emitMean(KernelBuilder &builder, CrossEntropyMeanOp op,
                     std::vector<EmittedKernel> &kernels) {
  constexpr int64_t threads = 1024;
  CudaWriter w;
  builder.writeSignature(w, threads);
  w.line(formatv("constexpr tj_i64 kRows = {0};",
                 tensorType(op.getTarget()).getDimSize(0))
             .str());
  w.line("float sum = 0.f, count = 0.f;");
  w.open("for (tj_i64 row = threadIdx.x; row < kRows; row += " +
         std::to_string(threads) + ")");
  w.line(formatv("if (static_cast<tj_i64>({0}[row]) == {1}ll) continue;",
                 builder.param(op.getTarget()),
                 static_cast<int64_t>(op.getIgnoreIndex()))
             .str());
  w.line("sum += " + builder.param(op.getLoss()).str() + "[row];");
  w.line("count += 1.f;");
  w.close();
  w.line("tj_block_sum2(sum, count);");
  w.open("if (threadIdx.x == 0)");
  w.line(builder.param(op.getMean()).str() + "[0] = sum / fmaxf(count, 1.f);");
  w.line(builder.param(op.getCount()).str() + "[0] = count;");
  w.close();
  kernels.push_back(builder.finish(w, {1, 1, 1}, {threads, 1, 1}));
  return llvm::Error::success();
}

llvm::Error emitBackward(KernelBuilder &builder, CrossEntropyBwdOp op,
                         std::vector<EmittedKernel> &kernels) {
  Value logits = op.getLogits();
  int64_t vec = logitsVector(logits);
  int64_t threads = rowThreads(colsOf(logits) / vec);
  double smoothing = op.getLabelSmoothing().convertToDouble();
  CudaWriter w;
  // The gradient may be written over the logits it is computed from.
  builder.writeSignature(w, threads, 0, /*restrictPointers=*/false);
  writeRowKernelPrologue(w, builder, logits, op.getTarget(), threads, vec);
  std::string x = builder.param(logits).str();
  w.line("auto *dx = " + builder.param(op.getGrad()).str() + " + row * kCols;");
  w.line("const auto *x = " + x + " + row * kCols;");
  w.open(formatv("if (y == {0}ll)", static_cast<int64_t>(op.getIgnoreIndex()))
             .str());
  w.line("float zero[kVec] = {};");
  w.line("for (tj_i64 col = static_cast<tj_i64>(threadIdx.x) * kVec; col < "
         "kCols; col += kStride) tj_store(dx + col, zero);");
  w.line("return;");
  w.close();
  w.line("const float l = " + builder.param(op.getLse()).str() + "[row];");
  std::string gradLoss = builder.param(op.getGradLoss()).str();
  if (Value count = op.getCount())
    w.line("const float g = " + gradLoss + "[0] / fmaxf(" +
           builder.param(count).str() + "[0], 1.f);");
  else
    w.line("const float g = " + gradLoss + "[row];");
  w.line(formatv("const tj_i64 c = y - {0}ll;",
                 static_cast<int64_t>(op.getVocabStart()))
             .str());
  w.line("const float uniform = " +
         floatLiteral(smoothing / static_cast<int64_t>(op.getVocabSize())) +
         ", hit = " + floatLiteral(1.0 - smoothing) + ";");
  writeRowLoop(w, "x", [&] {
    w.line("float out[kVec];");
    w.line("#pragma unroll");
    w.line("for (int i = 0; i < kVec; ++i) out[i] = (__expf(v[u][i] - l) - "
           "uniform - (col + i == c ? hit : 0.f)) * g;");
    w.line("tj_store(dx + col, out);");
  });
  kernels.push_back(builder.finish(w, {rowsOf(logits), 1, 1}, {threads, 1, 1}));
  return llvm::Error::success();
}

} // namespace

llvm::Error
tejit::codegen::emitCrossEntropy(KernelBuilder &builder,
                                 std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  if (group.ops.size() != 1)
    return noEmitter(group.op, "a cross entropy op is a kernel of its own");
  Operation *op = group.ops.front();
  if (auto stats = dyn_cast<CrossEntropyStatsOp>(op))
    return emitStats(builder, stats, kernels);
  if (auto loss = dyn_cast<CrossEntropyLossOp>(op))
    return emitLoss(builder, loss, kernels);
  if (auto mean = dyn_cast<CrossEntropyMeanOp>(op))
    return emitMean(builder, mean, kernels);
  if (auto bwd = dyn_cast<CrossEntropyBwdOp>(op))
    return emitBackward(builder, bwd, kernels);
  return noEmitter(op);
}
