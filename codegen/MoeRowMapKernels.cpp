//===- MoeRowMapKernels.cpp - row maps of the MoE token permutation -------===//
//
// docs/moe-permutation.md. te.moe_row_map: expert-side rows are the routed
// (token, expert) pairs ordered by expert, then token, so the row of (t, e)
// is first(e) + #{t' < t routed to e}: a per-expert prefix count over the
// tokens. Three kernels over chunks of 256 tokens (the block size) share
// the step scratch, [chunks][E] ints then [E] ints:
// - "count": each chunk's routed tokens per expert: every warp ballots its
//   32 tokens expert by expert into shared counts [8 warps][E] (no
//   barrier in the loop), then one barrier and a sum over the warps;
// - "scan" (one block): a warp per expert scans the chunks' counts into
//   exclusive prefix counts in place (32 chunks a step, by shuffles), and
//   thread 0 scans the experts' totals (in shared memory) into each
//   expert's first row;
// - "rank": the warps' counts again, then each routed (token, expert)
//   goes to first(e) + chunk prefix + the earlier warps' tokens of e + the
//   earlier lanes' (a ballot); -1 at and past counts[1] (dropped) and
//   where the token is not routed. E <= 1024 (the shared counts).
// An index map's token row (topK expert ids) is loaded into registers once;
// it routes the token to e when any id equals e, and the row goes to the
// first column naming e (the others keep -1).
//
// te.moe_chunk_row_map: every block computes the chunks' input starts and
// output starts (thread 0 scans split_sizes, and them in sorted_index's
// order, into shared memory), then maps its rows with a grid stride, each
// finding its chunk by a binary search. A sorted_index that is no
// permutation leaves rows at -1 rather than pointing them out of range.
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

constexpr int64_t kChunk = 256;
constexpr int64_t kScanThreads = 1024;
constexpr int64_t kMaxExperts = 1024;

/// What the row map kernels share: the constants, the chunk's token and
/// whether it is real (the whole block leaves when its chunk is past the
/// real tokens), and for an index map the token's expert ids.
void writeChunkPrologue(CudaWriter &w, MoeRowMapOp op, KernelBuilder &builder) {
  auto mapType = tensorType(op.getRoutingMap());
  w.line(formatv("constexpr int kE = {0}, kC = {1}, kChunk = {2};",
                 op.getNumExperts(), mapType.getDimSize(1), kChunk)
             .str());
  w.line(("const tj_i64 tokens = " + builder.param(op.getCounts()) + "[0];")
             .str());
  w.line("if (tj_i64(blockIdx.x) * kChunk >= tokens) return;");
  w.line("const tj_i64 t = tj_i64(blockIdx.x) * kChunk + threadIdx.x;");
  w.line("const bool real = t < tokens;");
  w.line("int *counts_of_chunks = reinterpret_cast<int *>(tj_scratch);");
  w.line("int *first_rows = counts_of_chunks + tj_i64(gridDim.x) * kE;");
  std::string map = builder.param(op.getRoutingMap()).str();
  if (!op.getIndexMap())
    return;
  w.line("int ids[kC];");
  w.line("#pragma unroll");
  w.line("for (int k = 0; k < kC; ++k) ids[k] = real ? " + map +
         "[t * kC + k] : -1;");
  w.open("auto names_expert = [&](int e)");
  w.line("bool any = false;");
  w.line("#pragma unroll");
  w.line("for (int k = 0; k < kC; ++k) any |= ids[k] == e;");
  w.line("return any;");
  w.close(";");
}

/// Whether token t is routed to expert e (a C++ bool expression).
std::string routed(MoeRowMapOp op, KernelBuilder &builder) {
  std::string map = builder.param(op.getRoutingMap()).str();
  if (op.getIndexMap())
    return "names_expert(e)";
  if (tensorType(op.getRoutingMap()).getElementType().isInteger(1))
    return "(real && " + map + "[t * kC + e].bits != 0)";
  return "(real && " + map + "[t * kC + e] != 0)";
}

/// Each warp's routed tokens per expert, by ballot (no barrier), into
/// warp_counts[warp][e]; then one barrier.
void writeWarpCounts(CudaWriter &w, MoeRowMapOp op, KernelBuilder &builder) {
  w.line("const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;");
  w.line("__shared__ int warp_counts[kChunk / 32][kE];");
  w.open("for (int e = 0; e < kE; ++e)");
  w.line("const unsigned ballot = __ballot_sync(0xffffffffu, " +
         routed(op, builder) + ");");
  w.line("if (lane == 0) warp_counts[warp][e] = __popc(ballot);");
  w.close();
  w.line("__syncthreads();");
}

EmittedKernel writeCount(KernelBuilder &builder, MoeRowMapOp op, int64_t chunks,
                         int64_t scratch) {
  CudaWriter w;
  builder.requestScratch(scratch, 0, 0);
  builder.writeSignature(w, kChunk);
  writeChunkPrologue(w, op, builder);
  writeWarpCounts(w, op, builder);
  w.open("for (int e = threadIdx.x; e < kE; e += kChunk)");
  w.line("int n = 0;");
  w.line("for (int k = 0; k < kChunk / 32; ++k) n += warp_counts[k][e];");
  w.line("counts_of_chunks[tj_i64(blockIdx.x) * kE + e] = n;");
  w.close();
  return builder.finish(w, {chunks, 1, 1}, {kChunk, 1, 1});
}

EmittedKernel writeScan(KernelBuilder &builder, MoeRowMapOp op, int64_t chunks,
                        int64_t scratch) {
  CudaWriter w;
  builder.requestPreviousScratch(scratch);
  builder.writeSignature(w, kScanThreads);
  w.line(formatv("constexpr int kE = {0}, kChunk = {1};", op.getNumExperts(),
                 kChunk)
             .str());
  w.line(formatv("constexpr tj_i64 kChunks = {0};", chunks).str());
  w.line(("const tj_i64 tokens = " + builder.param(op.getCounts()) + "[0];")
             .str());
  w.line("const tj_i64 real_chunks = (tokens + kChunk - 1) / kChunk;");
  w.line("int *counts_of_chunks = reinterpret_cast<int *>(tj_scratch);");
  w.line("int *first_rows = counts_of_chunks + kChunks * kE;");
  w.line("__shared__ int totals[kE];");
  w.line("const int lane = threadIdx.x & 31;");
  w.line("// A warp per expert: an exclusive scan over the chunks, 32 at a "
         "time.");
  w.open("for (int e = threadIdx.x >> 5; e < kE; e += blockDim.x >> 5)");
  w.line("int carry = 0;");
  w.open("for (tj_i64 c0 = 0; c0 < real_chunks; c0 += 32)");
  w.line("const tj_i64 c = c0 + lane;");
  w.line("const int n = c < real_chunks ? counts_of_chunks[c * kE + e] : 0;");
  w.line("int sum = n;");
  w.line("#pragma unroll");
  w.open("for (int o = 1; o < 32; o *= 2)");
  w.line("const int up = __shfl_up_sync(0xffffffffu, sum, o);");
  w.line("if (lane >= o) sum += up;");
  w.close();
  w.line("if (c < real_chunks) counts_of_chunks[c * kE + e] = carry + sum - "
         "n;");
  w.line("carry += __shfl_sync(0xffffffffu, sum, 31);");
  w.close();
  w.line("if (lane == 0) totals[e] = carry;");
  w.close();
  w.line("__syncthreads();");
  w.line("// The experts' first rows: an exclusive scan of their totals.");
  w.open("if (threadIdx.x == 0)");
  w.line("int run = 0;");
  w.open("for (int e = 0; e < kE; ++e)");
  w.line("const int n = totals[e];");
  w.line("totals[e] = run;");
  w.line("run += n;");
  w.close();
  w.close();
  w.line("__syncthreads();");
  w.line("for (int e = threadIdx.x; e < kE; e += blockDim.x) first_rows[e] = "
         "totals[e];");
  return builder.finish(w, {1, 1, 1}, {kScanThreads, 1, 1});
}

EmittedKernel writeRank(KernelBuilder &builder, MoeRowMapOp op, int64_t chunks,
                        int64_t scratch) {
  CudaWriter w;
  builder.requestPreviousScratch(scratch);
  builder.writeSignature(w, kChunk);
  writeChunkPrologue(w, op, builder);
  std::string rowMap = builder.param(op.getRowMap()).str();
  w.line(("const tj_i64 out_rows = " + builder.param(op.getCounts()) + "[1];")
             .str());
  writeWarpCounts(w, op, builder);
  if (op.getIndexMap()) {
    w.line("#pragma unroll");
    w.line("for (int k = 0; k < kC; ++k) if (real) " + rowMap +
           "[t * kC + k] = -1;");
  }
  w.line("const tj_i64 chunk = blockIdx.x;");
  w.open("for (int e = 0; e < kE; ++e)");
  w.line("const bool routed = " + routed(op, builder) + ";");
  w.line("const unsigned ballot = __ballot_sync(0xffffffffu, routed);");
  if (op.getIndexMap())
    w.line("if (!routed) continue;");
  else
    w.open("if (!routed)");
  if (!op.getIndexMap()) {
    w.line("if (real) " + rowMap + "[t * kC + e] = -1;");
    w.line("continue;");
    w.close();
  }
  w.line("// Earlier experts' rows, earlier chunks' and warps' tokens of e, "
         "earlier lanes'.");
  w.line("tj_i64 row = tj_i64(first_rows[e]) + counts_of_chunks[chunk * kE + "
         "e] + __popc(ballot & ((1u << lane) - 1u));");
  w.line("for (int k = 0; k < warp; ++k) row += warp_counts[k][e];");
  w.line("const int value = row < out_rows ? int(row) : -1;");
  if (op.getIndexMap()) {
    w.line("#pragma unroll");
    w.open("for (int k = 0; k < kC; ++k)");
    w.open("if (ids[k] == e)");
    w.line(rowMap + "[t * kC + k] = value;");
    w.line("break;");
    w.close();
    w.close();
  } else {
    w.line(rowMap + "[t * kC + e] = value;");
  }
  w.close();
  return builder.finish(w, {chunks, 1, 1}, {kChunk, 1, 1});
}

EmittedKernel writeChunkRowMap(KernelBuilder &builder, MoeChunkRowMapOp op) {
  int64_t chunks = tensorType(op.getSplitSizes()).getDimSize(0);
  int64_t rows = tensorType(op.getRowMap()).getDimSize(0);
  CudaWriter w;
  builder.writeSignature(w, kChunk);
  w.line(formatv("constexpr int kN = {0};", chunks).str());
  std::string splits = builder.param(op.getSplitSizes()).str();
  std::string sorted = builder.param(op.getSortedIndex()).str();
  w.line("__shared__ int in_start[kN + 1], out_start[kN];");
  w.line("for (int i = threadIdx.x; i < kN; i += blockDim.x) out_start[i] = "
         "-1;");
  w.line("__syncthreads();");
  w.open("if (threadIdx.x == 0)");
  w.line("int run = 0;");
  w.open("for (int i = 0; i < kN; ++i)");
  w.line("in_start[i] = run;");
  w.line("run += " + splits + "[i];");
  w.close();
  w.line("in_start[kN] = run;");
  w.line("run = 0;");
  w.open("for (int j = 0; j < kN; ++j)");
  w.line("const int chunk = " + sorted + "[j];");
  w.line("if (chunk < 0 || chunk >= kN) continue;");
  w.line("out_start[chunk] = run;");
  w.line("run += " + splits + "[chunk];");
  w.close();
  w.close();
  w.line("__syncthreads();");
  w.line(
      ("const tj_i64 real = " + builder.param(op.getCounts()) + "[0];").str());
  w.line("const tj_i64 rows = in_start[kN] < real ? in_start[kN] : real;");
  w.open("for (tj_i64 t = blockIdx.x * tj_i64(blockDim.x) + threadIdx.x; t < "
         "rows; t += tj_i64(gridDim.x) * blockDim.x)");
  w.line("// The last chunk starting at or before t (it holds t).");
  w.line("int lo = 0, hi = kN - 1;");
  w.open("while (lo < hi)");
  w.line("const int mid = (lo + hi + 1) / 2;");
  w.line("if (in_start[mid] <= t) lo = mid; else hi = mid - 1;");
  w.close();
  w.line("const tj_i64 row = out_start[lo] < 0 ? -1 : out_start[lo] + (t - "
         "in_start[lo]);");
  w.line(builder.param(op.getRowMap()) +
         "[t] = row >= 0 && row < rows ? int(row) : -1;");
  w.close();
  int64_t blocks =
      std::clamp<int64_t>(llvm::divideCeilSigned(rows, kChunk), 1, 2 * 132);
  return builder.finish(w, {blocks, 1, 1}, {kChunk, 1, 1});
}

} // namespace

llvm::Error tejit::codegen::emitMoeRowMap(KernelBuilder &builder,
                                          std::vector<EmittedKernel> &kernels) {
  Operation *op = builder.group.ops.front();
  if (auto chunksOp = dyn_cast<MoeChunkRowMapOp>(op)) {
    kernels.push_back(writeChunkRowMap(builder, chunksOp));
    return llvm::Error::success();
  }
  auto rowMap = cast<MoeRowMapOp>(op);
  int64_t tokens = tensorType(rowMap.getRoutingMap()).getDimSize(0);
  int64_t experts = rowMap.getNumExperts();
  if (rowMap.getIndexMap() &&
      tensorType(rowMap.getRoutingMap()).getDimSize(1) > 64)
    return noEmitter(builder.group.op, "an index map of more than 64 columns");
  // warp_counts [8][E] ints in shared memory.
  if (experts > kMaxExperts)
    return noEmitter(builder.group.op, "a routing map of more than 1024 "
                                       "experts");
  int64_t chunks = llvm::divideCeilSigned(tokens, kChunk);
  int64_t scratch = (chunks + 1) * experts * 4;
  KernelBuilder scan(builder.group, builder.name + "_scan", builder.state());
  KernelBuilder rank(builder.group, builder.name + "_rank", builder.state());
  kernels.push_back(writeCount(builder, rowMap, chunks, scratch));
  kernels.push_back(writeScan(scan, rowMap, chunks, scratch));
  kernels.push_back(writeRank(rank, rowMap, chunks, scratch));
  return llvm::Error::success();
}
