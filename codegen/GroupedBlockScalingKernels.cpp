//===- GroupedBlockScalingKernels.cpp - GroupedLinear's block casts -------===//
//
// te.grouped_block_quantize (Float8BlockScaling for GroupedLinear,
// docs/grouped-linear.md): the casts of one input, rowwise and/or
// transposed, are one kernel ("grouped_block_quantize") that reads it once.
// Scale layouts: dialects/GroupedBlockScaleLayout.h.
//
// Stacked matrices ([G, R, C], no m_splits): te.block_quantize's kernel
// (BlockScalingKernels.cpp) over each matrix, blockIdx.z = g; each group's
// outputs and scale_inv layout lie one after another.
//
// Token segments (x [T, K] cut by m_splits, a device `const int *` of G
// sizes known only at run time): 1-D blocks of 128 columns for the rowwise
// copy; for x^T [K, T], blocks of 128 tokens counted from each segment's
// first token. The grid is 128-column tiles x chunks. A chunk is up to 128
// rows of one segment: segment g is cut into ceil(m_g / 128) chunks from
// its first row, in segment order, and the padding rows past o_G follow as
// if they were a segment G of T - o_G rows. G + 1 ranges of rows summing to
// T make at most ceil(T/128) + G chunks, which is the grid's height (and
// the transposed scale_inv's row count). Each block finds its chunk's
// segment and rows (a warp scans the G sizes and their chunk counts, then a
// binary search), loads the chunk's 128-column tile as te.block_quantize's
// kernel loads a tile (rows past the chunk as 0), and casts it with the
// same pieces (BlockCastParts.h): per-row amaxes over the 128 columns for
// the rowwise copy, per-column amaxes over the chunk's rows for x^T (a
// chunk's column is one block of x^T).
//
// Who writes what (no memset: every element is written by one block):
// - The FP8 outputs: each chunk its rows of x (columns of x^T); padding
//   chunks load nothing and write zeros.
// - Rowwise scale_inv, f32 [nb, T] flat (nb = ceil(K/128)): segment g's
//   element (j, r) at nb o_g + j m_g + (r - o_g), written by r's chunk in
//   column tile j. The padding chunks write 0 where that formula puts a
//   segment G of T - o_G rows, which is exactly the flat range [nb o_G,
//   nb T) that no segment owns.
// - Transposed scale_inv, f32 [ceil(T/128) + G, pad4(K)]: row c belongs to
//   chunk c (segment g's block j is chunk c_g + j). Block (tile x, chunk c)
//   writes row c's columns [128 x, 128 x + 128) below pad4(K): its
//   segment's scales where the column is < K, zeros in the pad4 padding,
//   and zeros throughout for padding chunks and the chunks past the last.
//
// x^T leaves as in te.block_quantize's kernel, 8 tokens x 4 columns a
// thread (8-byte stores), when T % 8 == 0, K % 4 == 0 and the chunk starts
// at a token that is a multiple of 8 (under FP8 every m_g is a multiple of
// 16); other chunks, and a chunk's last tokens short of 8, go byte by
// byte.
//
//===----------------------------------------------------------------------===//
#include "codegen/BlockCastParts.h"

#include "dialects/GroupedBlockScaleLayout.h"
#include "dialects/TEDialect.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using namespace tejit::codegen::blockcast;
using llvm::formatv;
namespace layout = tejit::groupedblockscale;

namespace {

/// The casts of a group and the input they read.
struct GroupedBlockCasts {
  Value input, mSplits;
  SmallVector<Cast> casts;
};

/// Reads the group's te.grouped_block_quantize ops; fails on what the
/// kernels do not take.
llvm::Error collectCasts(KernelBuilder &builder, GroupedBlockCasts &found) {
  const KernelGroup &group = builder.group;
  for (Operation *op : group.ops) {
    auto quantize = dyn_cast<GroupedBlockQuantizeOp>(op);
    if (!quantize)
      return noEmitter(group.op, "ops other than te.grouped_block_quantize");
    if (found.input && (quantize.getInput() != found.input ||
                        quantize.getMSplits() != found.mSplits))
      return noEmitter(group.op, "grouped block casts of different inputs "
                                 "or segments");
    found.input = quantize.getInput();
    found.mSplits = quantize.getMSplits();
    if (!group.isOutput(quantize.getOutput()) ||
        !group.isOutput(quantize.getScaleInv()))
      return noEmitter(group.op, "a grouped block cast whose output or "
                                 "scale_inv the kernel does not write");
    if (found.mSplits && quantize.getBlockDim() != 1)
      return noEmitter(group.op, "token segments in 2-D blocks");
    found.casts.push_back(
        describeCast(builder, quantize.getOutput(), quantize.getScaleInv(),
                     quantize.getBlockDim(), quantize.getTranspose(),
                     quantize.getPower_2Scale(), found.casts.size()));
  }
  if (!found.input || !llvm::is_contained(group.inputs, found.input) ||
      (found.mSplits && !llvm::is_contained(group.inputs, found.mSplits)))
    return noEmitter(group.op, "a grouped block cast of a value computed in "
                               "the kernel");
  auto type = tensorType(found.input);
  Type element = type.getElementType();
  if (!(element.isBF16() || element.isF16() || element.isF32()))
    return noEmitter(group.op, "a grouped block cast of other than bf16, f16 "
                               "or f32");
  if (type.getRank() != (found.mSplits ? 2 : 3))
    return noEmitter(group.op, "a grouped block cast of other than [T, K] "
                               "with m_splits or [G, R, C] without");
  return llvm::Error::success();
}

/// The shape of a segments kernel.
struct Segments {
  std::string input, mSplits;
  Type element;
  int64_t tokens = 0, cols = 0, groups = 0;

  /// Chunks of up to 128 tokens: the rows of the transposed scale_inv.
  int64_t chunks() const {
    return layout::transposedSegmentsShape(cols, tokens, groups)[0];
  }
};

/// Finds this block's chunk: segment `g` (kGroups for the padding rows),
/// `pad`, its rows [row0, row_end) and the segment's [seg_begin,
/// seg_stop); `load_end` (row_end, or row0 for padding, which is not read).
/// The kernel trusts m_splits to sum to at most T: the runtime checks that
/// before any step (HostArguments.cpp), from the grouped GEMM that reads
/// the same m_splits in every plan that has these casts; the stores stay
/// in bounds anyway (rows are clamped to T).
void writeChunk(CudaWriter &w, const Segments &seg) {
  w.line("__shared__ int seg_end[kGroups], chunk_end[kGroups];");
  w.line("tj_chunk_ends(" + seg.mSplits +
         ", seg_end, chunk_end, kGroups, kTile);");
  w.line("__syncthreads();");
  w.line("const int chunk = blockIdx.y;");
  w.line("// Chunks past the segments' are the padding rows' (g = kGroups), "
         "then rowless.");
  w.line("const int g = tj_segment_of(chunk_end, kGroups, chunk);");
  w.line("const bool pad = g == kGroups;");
  w.line("const Index seg_begin = g > 0 ? seg_end[g - 1] : 0;");
  w.line("const Index seg_stop = pad || seg_end[g] > kRows ? kRows : "
         "seg_end[g];");
  w.line("const Index row0 = seg_begin + static_cast<Index>(chunk - (g > 0 ? "
         "chunk_end[g - 1] : 0)) * kTile;");
  w.line("const Index row_end = row0 >= seg_stop ? row0 : row0 + kTile < "
         "seg_stop ? row0 + kTile : seg_stop;");
  w.line("// Padding is not read: its tile is 0, cast to 0 whatever x holds.");
  w.line("const Index load_end = pad ? row0 : row_end;");
}

/// Rowwise: the store of the scale_inv of tile row r (segments layout;
/// zeros for padding rows).
std::string rowScaleStore(const Cast &cast) {
  return formatv("if (row0 + r < row_end) {0}[kBlocksK * seg_begin + "
                 "static_cast<Index>(blockIdx.x) * (seg_stop - seg_begin) + "
                 "(row0 + r - seg_begin)] = pad ? 0.f : 1.f / scale{1};",
                 cast.scaleInv, cast.suffix)
      .str();
}

/// Transposed: the store of column threadIdx.x's scale_inv in row `chunk`
/// (transposed segments layout; zeros in padding).
std::string colScaleStore(const Cast &cast) {
  return formatv("const Index col = col0 + threadIdx.x;\nif (col < kScaleCols) "
                 "{0}[chunk * kScaleCols + col] = pad || col >= kCols ? 0.f : "
                 "1.f / scale;",
                 cast.scaleInv)
      .str();
}

/// Stores a transposed cast's tile into x^T [K, T]: row col0 + c, tokens
/// row0 + r for r < row_end - row0. With `wide` (T % 8 == 0, K % 4 == 0)
/// the layout of te.block_quantize's kernel, 8-byte stores where the
/// chunk's first token is a multiple of 8 and 8 tokens remain; else bytes.
void writeSegmentTransposedStores(CudaWriter &w, const Cast &cast, bool wide) {
  std::string tile = transposedTile(cast);
  if (!wide) {
    w.open("for (int e = threadIdx.x; e < kTile * kTile; e += kThreads)");
    w.line("const int c = e / kTile, r = e % kTile;");
    w.line("if (row0 + r < row_end && (kWholeCols || col0 + c < kCols)) " +
           cast.out + "[(col0 + c) * kRows + row0 + r].bits = " + tile +
           "[r][c];");
    w.close();
    return;
  }
  w.line("#pragma unroll");
  w.open("for (int half = 0; half < 2; ++half)");
  w.line("const int b = warp + kWarps * half;");
  w.line("const int r = (b % 4 * 4 + lane % 4) * 8, c = (b / 4 * 8 + lane / 4) "
         "* 4;");
  w.open("if (row0 + r < row_end && (kWholeCols || col0 + c < kCols))");
  w.line("tj_u32 lo[4], hi[4];");
  w.line("tj_transpose_8x4(lo, hi, &" + tile + "[r][c], kTile + 4);");
  w.open("if (row0 % 8 == 0 && row0 + r + 8 <= row_end)");
  w.line("#pragma unroll");
  w.line("for (int j = 0; j < 4; ++j) *reinterpret_cast<tj_vec<tj_u32, 2> *>(" +
         cast.out +
         " + (col0 + c + j) * kRows + row0 + r) = tj_vec<tj_u32, 2>{{lo[j], "
         "hi[j]}};");
  w.reopen("else");
  w.line("// lo[j] holds tokens r .. r + 3 of column c + j, hi[j] the next "
         "four.");
  w.line("#pragma unroll");
  w.line("for (int j = 0; j < 4; ++j)");
  w.line("#pragma unroll");
  w.line("  for (int i = 0; i < 8; ++i) if (row0 + r + i < row_end) " +
         cast.out +
         "[(col0 + c + j) * kRows + row0 + r + i].bits = static_cast<tj_u8>((i "
         "< 4 ? lo[j] : hi[j]) >> (8 * (i % 4)));");
  w.close();
  w.close();
  w.close();
}

/// The kernel of casts of x [T, K] in token segments.
EmittedKernel writeSegmentsKernel(KernelBuilder &builder, const Segments &seg,
                                  ArrayRef<Cast> casts) {
  int64_t vec = vectorWidth({seg.cols}, elementBytes(seg.element));
  bool narrow = seg.tokens * seg.cols < (int64_t(1) << 31) &&
                seg.chunks() * layout::pad4(seg.cols) < (int64_t(1) << 31);
  bool anyRows = false, anyCols = false;
  for (const Cast &cast : casts) {
    anyRows |= !cast.transpose;
    anyCols |= cast.transpose;
  }

  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(std::string("using Index = ") + (narrow ? "int;" : "tj_i64;"));
  w.line(formatv("constexpr int kGroups = {0};", seg.groups).str());
  w.line(formatv("[[maybe_unused]] constexpr Index kRows = {0}, kCols = {1}, "
                 "kBlocksK = {2}, kScaleCols = {3};",
                 seg.tokens, seg.cols, layout::ceilDiv(seg.cols, kTile),
                 layout::pad4(seg.cols))
             .str());
  w.line(formatv("constexpr bool kWholeCols = {0};  // no column bounds checks",
                 seg.cols % kTile == 0 ? "true" : "false")
             .str());
  writeTileLayout(w, vec);
  w.line("const Index col0 = static_cast<Index>(blockIdx.x) * kTile;");
  writeChunk(w, seg);
  writeLoads(w, seg.input, elementTypeName(seg.element),
             "row < load_end && (kWholeCols || col < kCols)");
  if (anyRows)
    writeRowAmaxes(w);
  if (anyCols)
    writeColAmaxes(w, /*keep=*/false);
  for (const Cast &cast : casts) {
    if (cast.transpose)
      writeColScales(w, cast, colScaleStore(cast));
    else
      writeRowScales(w, cast, rowScaleStore(cast));
  }
  if (anyCols)
    w.line("__syncthreads();  // the column scales");
  for (const Cast &cast : casts)
    writeCastOutput(w, cast, vec,
                    "row < row_end && (kWholeCols || col < kCols)");
  if (anyCols) {
    w.line("__syncthreads();  // the transposed tiles");
    bool wide = vec % 4 == 0 && seg.tokens % 8 == 0;
    for (const Cast &cast : casts)
      if (cast.transpose)
        writeSegmentTransposedStores(w, cast, wide);
  }
  return builder.finish(w, {layout::ceilDiv(seg.cols, kTile), seg.chunks(), 1},
                        {kThreads, 1, 1});
}

} // namespace

llvm::Error
tejit::codegen::emitGroupedBlockQuantize(KernelBuilder &builder,
                                         std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  GroupedBlockCasts found;
  if (llvm::Error error = collectCasts(builder, found))
    return error;
  auto type = tensorType(found.input);
  if (!found.mSplits) {
    BlockCastInput input{builder.param(found.input).str(),
                         type.getElementType(), type.getDimSize(1),
                         type.getDimSize(2), type.getDimSize(0)};
    return emitBlockCastKernel(builder, input, found.casts, kernels);
  }
  Segments seg{builder.param(found.input).str(),
               builder.param(found.mSplits).str(),
               type.getElementType(),
               type.getDimSize(0),
               type.getDimSize(1),
               tensorType(found.mSplits).getDimSize(0)};
  if (seg.tokens <= 0 || seg.cols <= 0 || seg.groups <= 0)
    return noEmitter(group.op, "an empty input");
  if (seg.chunks() > 65535)
    return noEmitter(group.op, "more than 65535 chunks of 128 tokens");
  kernels.push_back(writeSegmentsKernel(builder, seg, found.casts));
  return llvm::Error::success();
}
