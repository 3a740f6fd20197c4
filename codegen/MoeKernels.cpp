//===- MoeKernels.cpp - row moves of the MoE token permutation ops --------===//
//
// docs/moe-permutation.md. Every kernel reads `counts` (the real token rows,
// then the real permuted rows) on the device and loops over the real rows
// with a grid stride, so the grid, fixed by the program's capacities, never
// needs to match the step's token count; rows past the counts are neither
// read nor written.
//
// Row moves (te.moe_permute, te.moe_unpermute, te.moe_unpermute_grad): a
// block per token. Its first warp compacts the token's row map row (C
// columns, 32 at a time, by ballot, in column order) into shared memory:
// the kept expert-side rows and their weights. Then the threads move the
// hidden dim in 16-byte vectors where it divides them, up to kMaxPer vectors
// a thread in registers per pass: permute reads the token row once and
// stores it once per kept row; unpermute reads each kept row and sums in
// float32 in column order, storing the token row once (no [T * C, H]
// temporary); the unpermute gradient reads the gradient row, stores its
// scaled copy to each kept row and reduces dot(input row, gradient row)
// over the block (warp shuffles, then the warps in order: the same bits on
// every run).
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include "dialects/TEDialect.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using llvm::formatv;

namespace {

/// Vectors a thread keeps in registers per pass over a row.
constexpr int64_t kMaxPer = 8;
/// Row map columns a block compacts in shared memory (two int arrays).
constexpr int64_t kMaxColumns = 4096;
/// Blocks of a grid-stride launch: two waves of an H200 at 2048 threads an
/// SM; blocks past the real rows leave at once.
constexpr int64_t kResidentThreads = 132 * 2048 * 2;

/// How a row of `hidden` elements of `bytes` each is cut among a block.
struct RowGeometry {
  int64_t vec = 1, vectors = 1, threads = 32, per = 1;

  RowGeometry(int64_t hidden, int64_t bytes) {
    // 16-byte accesses where the row allows (FP8 rows move 16 elements).
    vec = 1;
    for (int64_t width = 16 / bytes; width > 1 && vec == 1; width /= 2)
      if (hidden % width == 0)
        vec = width;
    vectors = hidden / vec;
    // About four vectors a thread, whole warps, at most 256 threads.
    threads = std::clamp<int64_t>(
        llvm::alignTo(llvm::divideCeilSigned(vectors, 4), 32), 32, 256);
    per = std::min<int64_t>(kMaxPer, llvm::divideCeilSigned(vectors, threads));
  }
};

/// A grid of one block per token, capped for a grid-stride loop.
Dim3 tokenGrid(int64_t tokens, int64_t threads) {
  return {
      std::max<int64_t>(1, std::min(tokens, kResidentThreads /
                                                std::max<int64_t>(threads, 1))),
      1, 1};
}

/// The geometry constants and the per-token loop head.
void writeRowPrologue(CudaWriter &w, const RowGeometry &g, int64_t columns,
                      StringRef counts) {
  w.line(formatv("constexpr int kVec = {0}, kThreads = {1}, kPer = {2}, kC "
                 "= {3};",
                 g.vec, g.threads, g.per, columns)
             .str());
  w.line(formatv("constexpr tj_i64 kVectors = {0};", g.vectors).str());
  w.line(("const tj_i64 tokens = " + counts + "[0];").str());
  w.line("const int lane = threadIdx.x & 31;");
  w.line("__shared__ int kept_rows[kC];");
  w.line("__shared__ float kept_weights[kC];");
  w.line("__shared__ int kept;");
}

/// Ends the per-token loop and the kernel: one block per token of
/// `tokens` (the capacity), in a grid-stride loop.
EmittedKernel finishTokenLoop(KernelBuilder &builder, CudaWriter &w,
                              int64_t tokens, const RowGeometry &g) {
  w.line("__syncthreads();  // before the next token's compaction");
  w.close();
  return builder.finish(w, tokenGrid(tokens, g.threads), {g.threads, 1, 1});
}

/// The first warp compacts row `t` of the row map into kept_rows (and
/// kept_weights: `weight(c)`, a float expression, or 1); `onKept` and
/// `onDropped` are statements run by the lane that sees column `c` kept
/// (its row in `r`) or dropped.
void writeCompaction(CudaWriter &w, StringRef rowMap, StringRef weight,
                     StringRef onKept, StringRef onDropped) {
  w.open("if (threadIdx.x < 32)");
  w.line("int n = 0;");
  w.open("for (int c0 = 0; c0 < kC; c0 += 32)");
  w.line("const int c = c0 + lane;");
  w.line(("const int r = c < kC ? " + rowMap + "[t * kC + c] : -1;").str());
  w.line("const unsigned ballot = __ballot_sync(0xffffffffu, r >= 0);");
  w.open("if (r >= 0)");
  w.line("const int at = n + __popc(ballot & ((1u << lane) - 1u));");
  w.line("kept_rows[at] = r;");
  w.line(
      ("kept_weights[at] = " + (weight.empty() ? "1.f" : weight) + ";").str());
  if (!onKept.empty())
    w.line(onKept);
  w.close();
  if (!onDropped.empty())
    w.line(("if (c < kC && r < 0) " + onDropped).str());
  w.line("n += __popc(ballot);");
  w.close();
  w.line("if (lane == 0) kept = n;");
  w.close();
  w.line("__syncthreads();");
}

/// The element type and vector pointer of a row-major [rows, H] operand.
std::string vecType(Value value, const RowGeometry &g) {
  return formatv("tj_vec<{0}, {1}>",
                 elementTypeName(tensorType(value).getElementType()), g.vec)
      .str();
}

/// Declares `local`, the vectors of kernel parameter `param` (read-only
/// unless `output`).
void writeVectors(CudaWriter &w, StringRef local, StringRef vec,
                  StringRef param, bool output) {
  std::string type = ((output ? "" : "const ") + vec + " *").str();
  w.line(type + local + " = reinterpret_cast<" + type + ">(" + param + ");");
}

llvm::Error checkColumns(const KernelGroup &group, int64_t columns) {
  if (columns > kMaxColumns)
    return noEmitter(group.op, "a row map of more than 4096 columns");
  return llvm::Error::success();
}

/// The opening of a row move (te.moe_permute, te.moe_unpermute) of input
/// rows into output rows: the signature, the constants, the vectors tj_src
/// and tj_dst, and the per-token loop.
template <typename MoveOp>
RowGeometry openRowMove(KernelBuilder &builder, CudaWriter &w, MoveOp op) {
  auto inType = tensorType(op.getInput());
  RowGeometry g(inType.getDimSize(1), elementBytes(inType.getElementType()));
  std::string vec = vecType(op.getInput(), g);
  builder.writeSignature(w, g.threads);
  writeRowPrologue(w, g, tensorType(op.getRowMap()).getDimSize(1),
                   builder.param(op.getCounts()));
  writeVectors(w, "tj_src", vec, builder.param(op.getInput()), false);
  writeVectors(w, "tj_dst", vec, builder.param(op.getOutput()), true);
  w.open("for (tj_i64 t = blockIdx.x; t < tokens; t += gridDim.x)");
  return g;
}

EmittedKernel writePermute(KernelBuilder &builder, MoePermuteOp op) {
  auto inType = tensorType(op.getInput());
  CudaWriter w;
  RowGeometry g = openRowMove(builder, w, op);
  std::string vec = vecType(op.getInput(), g);
  std::string onKept;
  if (op.getProbs())
    onKept = (builder.param(op.getPermutedProbs()) +
              "[r] = " + builder.param(op.getProbs()) + "[t * kC + c];")
                 .str();
  writeCompaction(w, builder.param(op.getRowMap()), "", onKept, "");
  w.line("const int n = kept;");
  w.open("for (tj_i64 base = 0; base < kVectors; base += kThreads * kPer)");
  w.line(vec + " v[kPer];");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPer; ++i)");
  w.line("const tj_i64 col = base + i * kThreads + threadIdx.x;");
  w.line("if (col < kVectors) v[i] = tj_src[t * kVectors + col];");
  w.close();
  w.open("for (int j = 0; j < n; ++j)");
  w.line("const tj_i64 row = kept_rows[j];");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPer; ++i)");
  w.line("const tj_i64 col = base + i * kThreads + threadIdx.x;");
  w.line("if (col < kVectors) tj_dst[row * kVectors + col] = v[i];");
  w.close();
  w.close();
  w.close();
  return finishTokenLoop(builder, w, inType.getDimSize(0), g);
}

EmittedKernel writeUnpermute(KernelBuilder &builder, MoeUnpermuteOp op) {
  std::string type =
      elementTypeName(tensorType(op.getInput()).getElementType());
  CudaWriter w;
  RowGeometry g = openRowMove(builder, w, op);
  std::string vec = vecType(op.getInput(), g);
  std::string weight;
  if (op.getProbs())
    weight =
        ("tj_to_float(" + builder.param(op.getProbs()) + "[t * kC + c])").str();
  writeCompaction(w, builder.param(op.getRowMap()), weight, "", "");
  w.line("const int n = kept;");
  w.open("for (tj_i64 base = 0; base < kVectors; base += kThreads * kPer)");
  w.line("float acc[kPer][kVec] = {};");
  w.open("for (int j = 0; j < n; ++j)");
  w.line("const tj_i64 row = kept_rows[j];");
  w.line("const float weight = kept_weights[j];");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPer; ++i)");
  w.line("const tj_i64 col = base + i * kThreads + threadIdx.x;");
  w.line("if (col >= kVectors) continue;");
  w.line("const " + vec + " v = tj_src[row * kVectors + col];");
  w.line("#pragma unroll");
  w.line("for (int e = 0; e < kVec; ++e) acc[i][e] += weight * "
         "tj_to_float(v.v[e]);");
  w.close();
  w.close();
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPer; ++i)");
  w.line("const tj_i64 col = base + i * kThreads + threadIdx.x;");
  w.line("if (col >= kVectors) continue;");
  w.line(vec + " out;");
  w.line("#pragma unroll");
  w.line("for (int e = 0; e < kVec; ++e) out.v[e] = tj_convert<" + type +
         ">::from(acc[i][e]);");
  w.line("tj_dst[t * kVectors + col] = out;");
  w.close();
  w.close();
  return finishTokenLoop(builder, w, tensorType(op.getOutput()).getDimSize(0),
                         g);
}

EmittedKernel writeUnpermuteGrad(KernelBuilder &builder,
                                 MoeUnpermuteGradOp op) {
  auto inType = tensorType(op.getInput());
  auto mapType = tensorType(op.getRowMap());
  int64_t columns = mapType.getDimSize(1);
  RowGeometry g(inType.getDimSize(1), elementBytes(inType.getElementType()));
  std::string vec = vecType(op.getInput(), g);
  std::string type = elementTypeName(inType.getElementType());
  std::string probsType =
      elementTypeName(tensorType(op.getProbs()).getElementType());
  std::string probsGrad = builder.param(op.getProbsGrad()).str();
  CudaWriter w;
  builder.writeSignature(w, g.threads);
  writeRowPrologue(w, g, columns, builder.param(op.getCounts()));
  w.line("__shared__ int kept_cols[kC];");
  w.line("__shared__ float warp_sums[kThreads / 32];");
  writeVectors(w, "tj_grad", vec, builder.param(op.getGrad()), false);
  writeVectors(w, "tj_x", vec, builder.param(op.getInput()), false);
  writeVectors(w, "tj_dx", vec, builder.param(op.getInputGrad()), true);
  w.open("for (tj_i64 t = blockIdx.x; t < tokens; t += gridDim.x)");
  writeCompaction(
      w, builder.param(op.getRowMap()),
      ("tj_to_float(" + builder.param(op.getProbs()) + "[t * kC + c])").str(),
      "kept_cols[at] = c;",
      (probsGrad + "[t * kC + c] = tj_convert<" + probsType + ">::from(0.f);"));
  w.line("const int n = kept;");
  w.open("for (int j = 0; j < n; ++j)");
  w.line("const tj_i64 row = kept_rows[j];");
  w.line("const float weight = kept_weights[j];");
  w.line("float dot = 0.f;");
  w.open("for (tj_i64 base = 0; base < kVectors; base += kThreads * kPer)");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPer; ++i)");
  w.line("const tj_i64 col = base + i * kThreads + threadIdx.x;");
  w.line("if (col >= kVectors) continue;");
  w.line("const " + vec + " g = tj_grad[t * kVectors + col];");
  w.line("const " + vec + " v = tj_x[row * kVectors + col];");
  w.line(vec + " out;");
  w.line("#pragma unroll");
  w.open("for (int e = 0; e < kVec; ++e)");
  w.line("const float ge = tj_to_float(g.v[e]);");
  w.line("dot += ge * tj_to_float(v.v[e]);");
  w.line("out.v[e] = tj_convert<" + type + ">::from(ge * weight);");
  w.close();
  w.line("tj_dx[row * kVectors + col] = out;");
  w.close();
  w.close();
  w.line("// The block's sum, warps added in order.");
  w.line("#pragma unroll");
  w.line("for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, "
         "dot, o);");
  w.line("if (lane == 0) warp_sums[threadIdx.x / 32] = dot;");
  w.line("__syncthreads();");
  w.open("if (threadIdx.x == 0)");
  w.line("float sum = 0.f;");
  w.line("for (int k = 0; k < kThreads / 32; ++k) sum += warp_sums[k];");
  w.line(probsGrad + "[t * kC + kept_cols[j]] = tj_convert<" + probsType +
         ">::from(sum);");
  w.close();
  w.line("__syncthreads();");
  w.close();
  return finishTokenLoop(builder, w, mapType.getDimSize(0), g);
}

EmittedKernel writeGatherProbs(KernelBuilder &builder, MoeGatherProbsOp op) {
  auto mapType = tensorType(op.getRowMap());
  std::string type =
      elementTypeName(tensorType(op.getOutput()).getElementType());
  constexpr int64_t kThreads = 256;
  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(formatv("constexpr tj_i64 kC = {0};", mapType.getDimSize(1)).str());
  w.line(("const tj_i64 total = " + builder.param(op.getCounts()) + "[0] * kC;")
             .str());
  w.open("for (tj_i64 i = blockIdx.x * tj_i64(blockDim.x) + threadIdx.x; i < "
         "total; i += tj_i64(gridDim.x) * blockDim.x)");
  w.line(("const int r = " + builder.param(op.getRowMap()) + "[i];").str());
  w.line((builder.param(op.getOutput()) + "[i] = r >= 0 ? " +
          builder.param(op.getPermutedProbs()) + "[r] : tj_convert<" + type +
          ">::from(0.f);")
             .str());
  w.close();
  int64_t blocks = llvm::divideCeilSigned(mapType.getNumElements(), kThreads);
  return builder.finish(
      w, {std::clamp<int64_t>(blocks, 1, kResidentThreads / kThreads), 1, 1},
      {kThreads, 1, 1});
}

} // namespace

llvm::Error tejit::codegen::emitMoe(KernelBuilder &builder,
                                    std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  if (group.ops.size() != 1)
    return noEmitter(group.op, "a MoE op fused with others");
  Operation *op = group.ops.front();
  if (isa<MoeRowMapOp, MoeChunkRowMapOp>(op))
    return emitMoeRowMap(builder, kernels);
  if (auto gather = dyn_cast<MoeGatherProbsOp>(op)) {
    kernels.push_back(writeGatherProbs(builder, gather));
    return llvm::Error::success();
  }
  int64_t columns = tensorType(op->getOperand(1)).getDimSize(1);
  if (auto grad = dyn_cast<MoeUnpermuteGradOp>(op))
    columns = tensorType(grad.getRowMap()).getDimSize(1);
  if (llvm::Error error = checkColumns(group, columns))
    return error;
  if (auto permute = dyn_cast<MoePermuteOp>(op))
    kernels.push_back(writePermute(builder, permute));
  else if (auto unpermute = dyn_cast<MoeUnpermuteOp>(op))
    kernels.push_back(writeUnpermute(builder, unpermute));
  else if (auto grad = dyn_cast<MoeUnpermuteGradOp>(op))
    kernels.push_back(writeUnpermuteGrad(builder, grad));
  else
    return noEmitter(group.op);
  return llvm::Error::success();
}
