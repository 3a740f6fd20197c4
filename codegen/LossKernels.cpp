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
/// class `ce_y` (as a tj_i64). Locals are prefixed `ce_`: parameters are
/// named after the IR's values (`x`, `count`, ...), which must not clash.
void writeRowKernelPrologue(CudaWriter &w, const KernelBuilder &builder,
                            Value logits, Value target, int64_t threads,
                            int64_t vec) {
  w.line(formatv("constexpr int kThreads = {0}, kVec = {1}, kUnroll = {2};",
                 threads, vec, kUnroll)
             .str());
  w.line(formatv("constexpr tj_i64 kCols = {0};", colsOf(logits)).str());
  w.line("constexpr tj_i64 kStride = static_cast<tj_i64>(kThreads) * kVec;");
  w.line("const tj_i64 ce_row = blockIdx.x;");
  w.line("const tj_i64 ce_y = static_cast<tj_i64>(" +
         builder.param(target).str() + "[ce_row]);");
}

/// The loop over a row's vectors, kUnroll loads issued before any is used:
/// `body` sees `ce_v[ce_u][kVec]` (floats) at column `ce_col` < kCols.
void writeRowLoop(CudaWriter &w, StringRef rowPointer,
                  llvm::function_ref<void()> body) {
  w.open("for (tj_i64 ce_base = static_cast<tj_i64>(threadIdx.x) * kVec; "
         "ce_base < kCols; ce_base += kStride * kUnroll)");
  w.line("float ce_v[kUnroll][kVec];");
  w.line("#pragma unroll");
  w.line("for (int ce_u = 0; ce_u < kUnroll; ++ce_u) if (ce_base + ce_u * "
         "kStride < kCols) "
         "tj_load(ce_v[ce_u], " +
         rowPointer.str() + " + ce_base + ce_u * kStride);");
  w.line("#pragma unroll");
  w.open("for (int ce_u = 0; ce_u < kUnroll; ++ce_u)");
  w.line("const tj_i64 ce_col = ce_base + ce_u * kStride;");
  w.line("if (ce_col >= kCols) break;");
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
  std::string out = builder.param(op.getStats()).str() + " + ce_row * 4";
  w.open(
      formatv("if (ce_y == {0}ll)", static_cast<int64_t>(op.getIgnoreIndex()))
          .str());
  w.line("// An ignored row is not read: it has no loss and no gradient.");
  w.line(formatv("if (threadIdx.x == 0) {{ float *ce_s = {0}; ce_s[0] = {1}; "
                 "ce_s[1] = "
                 "0.f; ce_s[2] = {1}; ce_s[3] = 0.f; }",
                 out, kNegInf)
             .str());
  w.line("return;");
  w.close();
  w.line("const auto *ce_x = " + x + " + ce_row * kCols;");
  w.line(std::string("float ce_m = ") + kNegInf + ", ce_d = 0.f, ce_s = 0.f;");
  writeRowLoop(w, "ce_x", [&] {
    w.line("float ce_vmax = ce_v[ce_u][0];");
    w.line("#pragma unroll");
    w.line("for (int ce_i = 1; ce_i < kVec; ++ce_i) ce_vmax = fmaxf(ce_vmax, "
           "ce_v[ce_u][ce_i]);");
    w.line("if (ce_vmax > ce_m) { ce_d *= __expf(ce_m - ce_vmax); ce_m = "
           "ce_vmax; }");
    w.line("#pragma unroll");
    w.line("for (int ce_i = 0; ce_i < kVec; ++ce_i) { ce_d += "
           "__expf(ce_v[ce_u][ce_i] - ce_m); ce_s += "
           "ce_v[ce_u][ce_i]; }");
  });
  w.line("tj_block_softmax_stats(ce_m, ce_d, ce_s);");
  w.open("if (threadIdx.x == 0)");
  w.line(formatv("const tj_i64 ce_c = ce_y - {0}ll;",
                 static_cast<int64_t>(op.getVocabStart()))
             .str());
  w.line("float *ce_out = " + out + ";");
  w.line("ce_out[0] = ce_m; ce_out[1] = ce_d; ce_out[3] = ce_s;");
  w.line(std::string("ce_out[2] = ce_c >= 0 && ce_c < kCols ? "
                     "tj_to_float(ce_x[ce_c]) : ") +
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
  w.line("const tj_i64 ce_row = static_cast<tj_i64>(blockIdx.x) * " +
         std::to_string(threads) + " + threadIdx.x;");
  w.line("if (ce_row >= kRows) return;");
  std::string loss = builder.param(op.getLoss()).str();
  std::string lse = builder.param(op.getLse()).str();
  std::string stats = builder.param(op.getStats()).str();
  w.open(formatv("if (static_cast<tj_i64>({0}[ce_row]) == {1}ll)",
                 builder.param(op.getTarget()),
                 static_cast<int64_t>(op.getIgnoreIndex()))
             .str());
  w.line(loss + "[ce_row] = 0.f; " + lse + "[ce_row] = 0.f;");
  w.line("return;");
  w.close();
  w.line(std::string("float ce_m = ") + kNegInf +
         ", ce_d = 0.f, ce_t = " + kNegInf + ", ce_s = 0.f;");
  w.line("#pragma unroll");
  w.line("for (int ce_r = 0; ce_r < kRanks; ++ce_r) ce_m = fmaxf(ce_m, " +
         stats + "[(ce_r * kRows + ce_row) * 4]);");
  w.line("#pragma unroll");
  w.open("for (int ce_r = 0; ce_r < kRanks; ++ce_r)");
  w.line("const float *ce_st = " + stats + " + (ce_r * kRows + ce_row) * 4;");
  w.line("if (ce_st[1] != 0.f) ce_d += ce_st[1] * expf(ce_st[0] - ce_m);");
  w.line("ce_t = fmaxf(ce_t, ce_st[2]);");
  w.line("ce_s += ce_st[3];");
  w.close();
  w.line("const float ce_l = ce_m + logf(ce_d);");
  w.line(lse + "[ce_row] = ce_l;");
  // With ε = 1 the target logit has no weight (and may be -inf).
  std::string targetTerm =
      smoothing < 1.0 ? " - " + floatLiteral(1.0 - smoothing) + " * ce_t" : "";
  std::string smoothTerm =
      smoothing > 0.0
          ? " - " +
                floatLiteral(smoothing /
                             static_cast<int64_t>(op.getVocabSize())) +
                " * ce_s"
          : "";
  w.line(loss + "[ce_row] = ce_l" + targetTerm + smoothTerm + ";");
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
  w.line("float ce_sum = 0.f, ce_count = 0.f;");
  w.open("for (tj_i64 ce_row = threadIdx.x; ce_row < kRows; ce_row += " +
         std::to_string(threads) + ")");
  w.line(formatv("if (static_cast<tj_i64>({0}[ce_row]) == {1}ll) continue;",
                 builder.param(op.getTarget()),
                 static_cast<int64_t>(op.getIgnoreIndex()))
             .str());
  w.line("ce_sum += " + builder.param(op.getLoss()).str() + "[ce_row];");
  w.line("ce_count += 1.f;");
  w.close();
  w.line("tj_block_sum2(ce_sum, ce_count);");
  w.open("if (threadIdx.x == 0)");
  w.line(builder.param(op.getMean()).str() +
         "[0] = ce_sum / fmaxf(ce_count, 1.f);");
  w.line(builder.param(op.getCount()).str() + "[0] = ce_count;");
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
  w.line("auto *ce_dx = " + builder.param(op.getGrad()).str() +
         " + ce_row * kCols;");
  w.line("const auto *ce_x = " + x + " + ce_row * kCols;");
  w.open(
      formatv("if (ce_y == {0}ll)", static_cast<int64_t>(op.getIgnoreIndex()))
          .str());
  w.line("float ce_zero[kVec] = {};");
  w.line(
      "for (tj_i64 ce_col = static_cast<tj_i64>(threadIdx.x) * kVec; ce_col < "
      "kCols; ce_col += kStride) tj_store(ce_dx + ce_col, ce_zero);");
  w.line("return;");
  w.close();
  w.line("const float ce_l = " + builder.param(op.getLse()).str() +
         "[ce_row];");
  std::string gradLoss = builder.param(op.getGradLoss()).str();
  if (Value count = op.getCount())
    w.line("const float ce_g = " + gradLoss + "[0] / fmaxf(" +
           builder.param(count).str() + "[0], 1.f);");
  else
    w.line("const float ce_g = " + gradLoss + "[ce_row];");
  w.line(formatv("const tj_i64 ce_c = ce_y - {0}ll;",
                 static_cast<int64_t>(op.getVocabStart()))
             .str());
  w.line("const float ce_uniform = " +
         floatLiteral(smoothing / static_cast<int64_t>(op.getVocabSize())) +
         ", ce_hit = " + floatLiteral(1.0 - smoothing) + ";");
  writeRowLoop(w, "ce_x", [&] {
    w.line("float ce_out[kVec];");
    w.line("#pragma unroll");
    w.line("for (int ce_i = 0; ce_i < kVec; ++ce_i) ce_out[ce_i] = "
           "(__expf(ce_v[ce_u][ce_i] - ce_l) - "
           "ce_uniform - (ce_col + ce_i == ce_c ? ce_hit : 0.f)) * ce_g;");
    w.line("tj_store(ce_dx + ce_col, ce_out);");
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
