//===- BlockScalingKernels.cpp - Float8BlockScaling's block casts ---------===//
//
// te.block_quantize (docs/block-scaling.md) as a memory-bound kernel that
// reads its input once and writes each output once. A block of 256 threads
// takes a 128 x 128 tile of the input, which is a tile of the cast matrix S
// too (S is the input or its transpose, and its blocks start at multiples of
// 128 either way):
// - The tile is loaded into registers, every load (16 bytes where the row
//   width allows) in flight before the first use: 16 threads across a tile
//   row (8 columns each), 16 rows a pass, 8 passes.
// - The amaxes the casts need come from those registers: per row segment
//   (1-D blocks of S = the input: its rows' 16 threads are neighbouring
//   lanes, so shuffles), per column segment (1-D blocks of the transpose,
//   whose rows are the input's columns: a shuffle joins a warp's two rows,
//   shared memory the eight warps), or over the tile (2-D). Amaxes are
//   taken as unsigned maxima of |x|'s bits, exact and keeping NaN; scales
//   follow te.compute_scale (blockscale.cuh).
// - Each cast scales the registers in float32 and converts them with the
//   saturating round-to-nearest-even cvt of te.quantize's kernels. Rows go
//   straight to memory; a transposed copy goes through a shared byte tile
//   that each thread reads back 8 rows x 4 columns (byte permutes), so that
//   every column's four lanes store one whole 32-byte sector of an output
//   row and the shared reads of a warp fall in 32 distinct banks (byte by
//   byte where S's rows are not whole 8-byte groups).
// - scale_inv (1 / scale) is written at dialects/BlockScaleLayout.h's
//   place; the blocks at the tile grid's last row or column also write that
//   layout's padding as zeros.
//
// A group may hold several casts of one input (a rowwise and a columnwise
// copy, should te-fuse ever group them): they share the loads and the
// amaxes. The same kernel casts GroupedLinear's stacked weights
// (te.grouped_block_quantize without m_splits, blockIdx.z = the group), and
// its pieces serve the token segments' kernel too (BlockCastParts.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/BlockCastParts.h"

#include "dialects/TEDialect.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using namespace tejit::codegen::blockcast;
using llvm::formatv;
namespace blockscale = tejit::blockscale;

namespace {

/// The scale of element i of piece q in pass p under `cast`.
std::string scaleOf(const Cast &cast) {
  switch (cast.amax) {
  case AmaxKind::Rows:
    return "row_scale" + cast.suffix + "[p]";
  case AmaxKind::Cols:
    return "col_scale" + cast.suffix + "[tile_col(q) + i]";
  case AmaxKind::Tile:
    return "tile_scale" + cast.suffix;
  }
  llvm_unreachable("unknown amax kind");
}

std::string blockScale(const Cast &cast, llvm::StringRef amaxBits) {
  return formatv("tj_block_scale({0}, {1}, {2})", amaxBits, cast.fp8Max,
                 cast.power2 ? "true" : "false")
      .str();
}

} // namespace

//===----------------------------------------------------------------------===//
// The pieces both block cast kernels use (BlockCastParts.h)
//===----------------------------------------------------------------------===//

Cast blockcast::describeCast(KernelBuilder &builder, Value output,
                             Value scaleInv, int64_t blockDim, bool transpose,
                             bool power2, size_t index) {
  Cast cast;
  cast.transpose = transpose;
  cast.amax = blockDim == 2 ? AmaxKind::Tile
              : transpose   ? AmaxKind::Cols
                            : AmaxKind::Rows;
  cast.out = builder.param(output).str();
  cast.scaleInv = builder.param(scaleInv).str();
  Type fp8 = tensorType(output).getElementType();
  cast.fp8Type = elementTypeName(fp8);
  cast.fp8Max = floatLiteral(getFp8MaxFinite(llvm::cast<FloatType>(fp8)));
  cast.power2 = power2;
  ArrayRef<int64_t> shape = tensorType(scaleInv).getShape();
  cast.scaleShape = {shape[shape.size() - 2], shape.back()};
  cast.suffix = std::to_string(index);
  return cast;
}

void blockcast::writeTileLayout(CudaWriter &w, int64_t vec) {
  w.line(formatv("[[maybe_unused]] constexpr int kTile = {0}, kThreads = {1}, "
                 "kThreadsX = {2}, "
                 "kRowsPerPass = {3}, kPasses = {4}, kWarps = {5};",
                 kTile, kThreads, kThreadsX, kRowsPerPass, kPasses, kWarps)
             .str());
  w.line(formatv("constexpr int kVec = {0}, kPieces = {1};", vec,
                 kColsPerThread / vec)
             .str());
  w.line("const int tx = threadIdx.x % kThreadsX, ty = threadIdx.x / "
         "kThreadsX;");
  w.line("[[maybe_unused]] const int lane = threadIdx.x % 32, warp = "
         "threadIdx.x / 32;");
  w.line("// The tile column where this thread's piece q starts: the pieces "
         "of a tile row's threads interleave, so that each load of a warp is "
         "contiguous.");
  w.line("auto tile_col = [&](int q) { return (q * kThreadsX + tx) * kVec; };");
}

void blockcast::writeLoads(CudaWriter &w, llvm::StringRef input,
                           llvm::StringRef type, llvm::StringRef inBounds) {
  w.line(formatv("tj_vec<{0}, kVec> x_in[kPasses][kPieces];", type).str());
  w.line("// Every load is issued before the first use.");
  w.line("#pragma unroll");
  w.open("for (int p = 0; p < kPasses; ++p)");
  w.line("#pragma unroll");
  w.open("for (int q = 0; q < kPieces; ++q)");
  w.line("const Index row = row0 + ty + p * kRowsPerPass, col = col0 + "
         "tile_col(q);");
  w.line(formatv("if ({0}) x_in[p][q] = *reinterpret_cast<const tj_vec<{1}, "
                 "kVec> *>({2} + row * kCols + col);",
                 inBounds, type, input)
             .str());
  w.line("else x_in[p][q] = {};");
  w.close();
  w.close();
}

void blockcast::writeRowAmaxes(CudaWriter &w) {
  w.line("tj_u32 row_amax[kPasses];");
  w.line("#pragma unroll");
  w.open("for (int p = 0; p < kPasses; ++p)");
  w.line("tj_u32 m = 0;");
  w.line("#pragma unroll");
  w.line("for (int q = 0; q < kPieces; ++q)");
  w.line("#pragma unroll");
  w.line("  for (int i = 0; i < kVec; ++i) m = tj_max_bits(m, "
         "tj_abs_bits(tj_to_float(x_in[p][q].v[i])));");
  w.line("// A tile row's kThreadsX threads are neighbouring lanes.");
  w.line("#pragma unroll");
  w.line("for (int offset = kThreadsX / 2; offset > 0; offset /= 2) m = "
         "tj_max_bits(m, __shfl_xor_sync(0xffffffffu, m, offset));");
  w.line("row_amax[p] = m;");
  w.close();
}

void blockcast::writeColAmaxes(CudaWriter &w, bool keep) {
  w.line("__shared__ tj_u32 col_part[kWarps][kTile];");
  if (keep)
    w.line("tj_u32 col_amax[kPieces][kVec];");
  w.line("#pragma unroll");
  w.open("for (int q = 0; q < kPieces; ++q)");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  w.line("tj_u32 m = 0;");
  w.line("#pragma unroll");
  w.line("for (int p = 0; p < kPasses; ++p) m = tj_max_bits(m, "
         "tj_abs_bits(tj_to_float(x_in[p][q].v[i])));");
  w.line("// Lanes l and l + 16 hold one column of the warp's two rows.");
  w.line("m = tj_max_bits(m, __shfl_xor_sync(0xffffffffu, m, 16));");
  if (keep)
    w.line("col_amax[q][i] = m;");
  w.line("if (lane < 16) col_part[warp][tile_col(q) + i] = m;");
  w.close();
  w.close();
  w.line("__syncthreads();");
}

/// Writes `code`, lines separated by '\n'.
static void writeLines(CudaWriter &w, llvm::StringRef code) {
  SmallVector<llvm::StringRef> lines;
  code.split(lines, '\n');
  for (llvm::StringRef line : lines)
    w.line(line);
}

void blockcast::writeRowScales(CudaWriter &w, const Cast &cast,
                               llvm::StringRef storeScaleInv) {
  // Of a tile row's 16 lanes, lane p divides for pass p and the others read
  // its scale (two float32 divisions a thread rather than sixteen).
  const std::string &s = cast.suffix;
  w.line("tj_u32 mine" + s + " = row_amax[0];");
  w.line("#pragma unroll");
  w.line("for (int p = 1; p < kPasses; ++p) if (tx == p) mine" + s +
         " = row_amax[p];");
  w.line("const float scale" + s + " = " + blockScale(cast, "mine" + s) + ";");
  w.open("if (tx < kPasses)");
  w.line("const int r = ty + tx * kRowsPerPass;");
  writeLines(w, storeScaleInv);
  w.close();
  w.line("float row_scale" + s + "[kPasses];");
  w.line("#pragma unroll");
  w.line("for (int p = 0; p < kPasses; ++p) row_scale" + s +
         "[p] = __shfl_sync(0xffffffffu, scale" + s +
         ", (lane & ~(kThreadsX - 1)) | p);");
}

void blockcast::writeColScales(CudaWriter &w, const Cast &cast,
                               llvm::StringRef storeScaleInv) {
  w.line("__shared__ float col_scale" + cast.suffix + "[kTile];");
  w.open("if (threadIdx.x < kTile)");
  w.line("tj_u32 m = 0;");
  w.line("#pragma unroll");
  w.line("for (int v = 0; v < kWarps; ++v) m = tj_max_bits(m, "
         "col_part[v][threadIdx.x]);");
  w.line("const float scale = " + blockScale(cast, "m") + ";");
  w.line("col_scale" + cast.suffix + "[threadIdx.x] = scale;");
  writeLines(w, storeScaleInv);
  w.close();
}

std::string blockcast::transposedTile(const Cast &cast) {
  return "tile" + cast.suffix;
}

void blockcast::writeCastOutput(CudaWriter &w, const Cast &cast, int64_t vec,
                                llvm::StringRef inBounds) {
  std::string tile = transposedTile(cast);
  if (cast.transpose)
    w.line("__shared__ __align__(16) tj_u8 " + tile +
           "[kTile][kTile + 4];  // +4 bytes a row: no bank conflicts");
  w.line("#pragma unroll");
  w.open("for (int p = 0; p < kPasses; ++p)");
  w.line("#pragma unroll");
  w.open("for (int q = 0; q < kPieces; ++q)");
  if (!cast.transpose) {
    w.line("const Index row = row0 + ty + p * kRowsPerPass, col = col0 + "
           "tile_col(q);");
    w.open(formatv("if ({0})", inBounds).str());
  }
  w.line("float y[kVec];");
  w.line("#pragma unroll");
  w.line("for (int i = 0; i < kVec; ++i) y[i] = tj_to_float(x_in[p][q].v[i]) "
         "* " +
         scaleOf(cast) + ";");
  if (vec % 4 == 0) {
    // Four FP8 elements a word, converted in pairs (te.quantize's cvt).
    w.line("tj_vec<tj_u32, kVec / 4> words;");
    w.line("tj_pack_words<" + cast.fp8Type + ">(words, y);");
    if (cast.transpose) {
      w.line("#pragma unroll");
      w.line("for (int word = 0; word < kVec / 4; ++word) "
             "*reinterpret_cast<tj_u32 *>(&" +
             tile +
             "[ty + p * kRowsPerPass][tile_col(q) + 4 * word]) = "
             "words.v[word];");
    } else {
      w.line("*reinterpret_cast<tj_vec<tj_u32, kVec / 4> *>(" + cast.out +
             " + row * kCols + col) = words;");
    }
  } else if (cast.transpose) {
    w.line("#pragma unroll");
    w.line("for (int i = 0; i < kVec; ++i) " + tile +
           "[ty + p * kRowsPerPass][tile_col(q) + i] = tj_convert<" +
           cast.fp8Type + ">::from(y[i]).bits;");
  } else {
    w.line("tj_store(" + cast.out + " + row * kCols + col, y);");
  }
  if (!cast.transpose)
    w.close();
  w.close();
  w.close();
}

//===----------------------------------------------------------------------===//
// te.block_quantize's kernel
//===----------------------------------------------------------------------===//

namespace {

/// tile_amax, over the whole tile, from the row or column amaxes when those
/// are there; every thread gets it.
void writeTileAmax(CudaWriter &w, bool rows, bool cols) {
  w.line("__shared__ tj_u32 warp_amax[kWarps];");
  w.line("tj_u32 tile_amax = 0;");
  if (rows) {
    w.line("#pragma unroll");
    w.line("for (int p = 0; p < kPasses; ++p) tile_amax = "
           "tj_max_bits(tile_amax, row_amax[p]);");
  } else if (cols) {
    w.line("#pragma unroll");
    w.line("for (int q = 0; q < kPieces; ++q)");
    w.line("#pragma unroll");
    w.line("  for (int i = 0; i < kVec; ++i) tile_amax = "
           "tj_max_bits(tile_amax, col_amax[q][i]);");
  } else {
    w.line("#pragma unroll");
    w.line("for (int p = 0; p < kPasses; ++p)");
    w.line("#pragma unroll");
    w.line("  for (int q = 0; q < kPieces; ++q)");
    w.line("#pragma unroll");
    w.line("    for (int i = 0; i < kVec; ++i) tile_amax = "
           "tj_max_bits(tile_amax, tj_abs_bits(tj_to_float(x_in[p][q].v["
           "i])));");
  }
  w.line("#pragma unroll");
  w.line("for (int offset = 16; offset > 0; offset /= 2) tile_amax = "
         "tj_max_bits(tile_amax, __shfl_xor_sync(0xffffffffu, tile_amax, "
         "offset));");
  w.line("if (lane == 0) warp_amax[warp] = tile_amax;");
  w.line("__syncthreads();");
  w.line("#pragma unroll");
  w.line("for (int v = 0; v < kWarps; ++v) tile_amax = tj_max_bits(tile_amax, "
         "warp_amax[v]);");
}

/// The scales of one cast and its scale_inv, padding included, for an
/// input of `rows` x `cols` (`tilesY` x `tilesX` tiles).
void writeScales(CudaWriter &w, const Cast &cast, int64_t rows, int64_t cols,
                 int64_t tilesX, int64_t tilesY) {
  const std::string &si = cast.scaleInv;
  int64_t stride = cast.scaleShape[1];
  switch (cast.amax) {
  case AmaxKind::Rows:
    // S = the input: element (j, r) is row r's block j = blockIdx.x.
    writeRowScales(w, cast,
                   formatv("const Index row = row0 + r;\nif (kExact || row < "
                           "kRows) {0}[blockIdx.x * {1} + row] = 1.f / "
                           "scale{2};",
                           si, stride, cast.suffix)
                       .str());
    break;
  case AmaxKind::Cols:
    // S = the input transposed: element (j, c) is input column c's block
    // j = blockIdx.y.
    writeColScales(w, cast,
                   formatv("const Index col = col0 + threadIdx.x;\nif (kExact "
                           "|| col < kCols) {0}[blockIdx.y * {1} + col] = 1.f "
                           "/ scale;",
                           si, stride)
                       .str());
    break;
  case AmaxKind::Tile:
    w.line("const float tile_scale" + cast.suffix + " = " +
           blockScale(cast, "tile_amax") + ";");
    // Tile (blockIdx.y, blockIdx.x) of the input is tile (x, y) of S when
    // it is transposed.
    w.line(formatv("if (threadIdx.x == 0) {0}[{1} * {2} + {3}] = 1.f / "
                   "tile_scale{4};",
                   si, cast.transpose ? "blockIdx.x" : "blockIdx.y", stride,
                   cast.transpose ? "blockIdx.y" : "blockIdx.x", cast.suffix)
               .str());
    break;
  }

  // The padding at the end of each scale_inv row: the blocks at the end of
  // that row (of S's rows or of its tiles) write it.
  int64_t padding = 0;
  std::string atEnd, first;
  switch (cast.amax) {
  case AmaxKind::Rows:
    padding = stride - rows;
    atEnd = "blockIdx.y == gridDim.y - 1";
    first = formatv("blockIdx.x * {0} + kRows", stride).str();
    break;
  case AmaxKind::Cols:
    padding = stride - cols;
    atEnd = "blockIdx.x == gridDim.x - 1";
    first = formatv("blockIdx.y * {0} + kCols", stride).str();
    break;
  case AmaxKind::Tile:
    padding = stride - (cast.transpose ? tilesY : tilesX);
    atEnd = cast.transpose ? "blockIdx.y == gridDim.y - 1"
                           : "blockIdx.x == gridDim.x - 1";
    first =
        formatv("{0} * {1} + {2}", cast.transpose ? "blockIdx.x" : "blockIdx.y",
                stride, cast.transpose ? tilesY : tilesX)
            .str();
    break;
  }
  if (padding > 0)
    w.line(formatv("if ({0} && threadIdx.x < {1}) {2}[{3} + threadIdx.x] = "
                   "0.f;  // padding",
                   atEnd, padding, si, first)
               .str());
}

/// Stores a transposed cast's tile: S rows col0 + c, bytes row0 + r on.
/// With `wide`, a task is 8 rows x 4 columns of the tile (eight 4-byte
/// shared reads, byte permutes, four 8-byte stores), laid out so that a
/// warp covers 32 rows x 32 columns: the 4 lanes of a column store one
/// 32-byte sector of its S row, and the 32 lanes' shared reads fall in
/// distinct banks (132-byte rows). It needs 8-byte aligned S rows (R % 8 ==
/// 0) and whole words of columns (C % 4 == 0); otherwise bytes go one by
/// one.
void writeTransposedStores(CudaWriter &w, const Cast &cast, bool wide) {
  std::string tile = transposedTile(cast);
  if (!wide) {
    w.open("for (int e = threadIdx.x; e < kTile * kTile; e += kThreads)");
    w.line("const int c = e / kTile, r = e % kTile;");
    w.line("if (kExact || (row0 + r < kRows && col0 + c < kCols)) " + cast.out +
           "[(col0 + c) * kRows + row0 + r].bits = " + tile + "[r][c];");
    w.close();
    return;
  }
  w.line("#pragma unroll");
  w.open("for (int half = 0; half < 2; ++half)");
  w.line("// 16 warp blocks of 4 x 8 tasks cover the 16 x 32 tasks.");
  w.line("const int b = warp + kWarps * half;");
  w.line("const int r = (b % 4 * 4 + lane % 4) * 8, c = (b / 4 * 8 + lane / 4) "
         "* 4;");
  w.open("if (kExact || (row0 + r < kRows && col0 + c < kCols))");
  w.line("tj_u32 lo[4], hi[4];");
  w.line("tj_transpose_8x4(lo, hi, &" + tile + "[r][c], kTile + 4);");
  w.line("#pragma unroll");
  w.line("for (int j = 0; j < 4; ++j) *reinterpret_cast<tj_vec<tj_u32, 2> *>(" +
         cast.out +
         " + (col0 + c + j) * kRows + row0 + r) = tj_vec<tj_u32, 2>{{lo[j], "
         "hi[j]}};");
  w.close();
  w.close();
}

/// For stacked matrices: pointers to blockIdx.z's matrix of the input and
/// of each cast's output and scale_inv, which the kernel then uses instead
/// of the parameters (renamed in `casts`).
std::string writeGroupPointers(CudaWriter &w, const BlockCastInput &input,
                               SmallVectorImpl<Cast> &casts) {
  w.line("// This block's matrix of the stacked ones.");
  w.line("const tj_i64 group = blockIdx.z;");
  // "tj_" names are the generated code's own (as the device helpers'),
  // apart from the parameters, which are named after the IR.
  std::string in = "tj_g_" + input.name;
  w.line(formatv("const {0} *const {1} = {2} + group * {3};",
                 elementTypeName(input.element), in, input.name,
                 input.rows * input.cols)
             .str());
  for (Cast &cast : casts) {
    std::string out = "tj_g_" + cast.out, scaleInv = "tj_g_" + cast.scaleInv;
    w.line(formatv("{0} *const {1} = {2} + group * {3};", cast.fp8Type, out,
                   cast.out, input.rows * input.cols)
               .str());
    w.line(formatv("float *const {0} = {1} + group * {2};", scaleInv,
                   cast.scaleInv, cast.scaleShape[0] * cast.scaleShape[1])
               .str());
    cast.out = out;
    cast.scaleInv = scaleInv;
  }
  return in;
}

} // namespace

llvm::Error blockcast::emitBlockCastKernel(
    KernelBuilder &builder, const BlockCastInput &input,
    SmallVectorImpl<Cast> &casts, std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  int64_t rows = input.rows, cols = input.cols;
  int64_t tilesX = blockscale::ceilDiv(cols, kTile),
          tilesY = blockscale::ceilDiv(rows, kTile);
  if (rows <= 0 || cols <= 0 || tilesY > 65535)
    return noEmitter(group.op, "more than 65535 tiles of 128 rows");
  if (input.groups > 65535)
    return noEmitter(group.op, "more than 65535 stacked matrices");
  // A thread's 8 columns of a tile row are 8 / kVec vectors of kVec.
  int64_t vec = vectorWidth({cols}, elementBytes(input.element));
  bool exact = rows % kTile == 0 && cols % kTile == 0;
  // Offsets within one matrix (a group's pointers are 64-bit).
  bool narrow = rows * cols < (int64_t(1) << 31);
  bool anyRows = false, anyCols = false, anyTile = false, anyTranspose = false;
  for (const Cast &cast : casts) {
    anyRows |= cast.amax == AmaxKind::Rows;
    anyCols |= cast.amax == AmaxKind::Cols;
    anyTile |= cast.amax == AmaxKind::Tile;
    anyTranspose |= cast.transpose;
  }

  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(std::string("using Index = ") + (narrow ? "int;" : "tj_i64;"));
  w.line(
      formatv("constexpr Index kRows = {0}, kCols = {1};", rows, cols).str());
  w.line(formatv("constexpr bool kExact = {0};  // whole tiles: no bounds "
                 "checks",
                 exact ? "true" : "false")
             .str());
  writeTileLayout(w, vec);
  w.line("const Index row0 = static_cast<Index>(blockIdx.y) * kTile, col0 = "
         "static_cast<Index>(blockIdx.x) * kTile;");
  std::string in =
      input.groups ? writeGroupPointers(w, input, casts) : input.name;
  writeLoads(w, in, elementTypeName(input.element),
             "kExact || (row < kRows && col < kCols)");
  if (anyRows)
    writeRowAmaxes(w);
  if (anyCols)
    writeColAmaxes(w, /*keep=*/anyTile && !anyRows);
  if (anyTile)
    writeTileAmax(w, anyRows, anyCols);
  for (const Cast &cast : casts)
    writeScales(w, cast, rows, cols, tilesX, tilesY);
  if (anyCols)
    w.line("__syncthreads();  // the column scales");
  for (const Cast &cast : casts)
    writeCastOutput(w, cast, vec, "kExact || (row < kRows && col < kCols)");
  if (anyTranspose) {
    w.line("__syncthreads();  // the transposed tiles");
    bool wide = vec % 4 == 0 && rows % 8 == 0;
    for (const Cast &cast : casts)
      if (cast.transpose)
        writeTransposedStores(w, cast, wide);
  }
  kernels.push_back(
      builder.finish(w, {tilesX, tilesY, std::max<int64_t>(input.groups, 1)},
                     {kThreads, 1, 1}));
  return llvm::Error::success();
}

llvm::Error
tejit::codegen::emitBlockQuantize(KernelBuilder &builder,
                                  std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  SmallVector<Cast> casts;
  Value input;
  for (Operation *op : group.ops) {
    auto quantize = dyn_cast<BlockQuantizeOp>(op);
    if (!quantize)
      return noEmitter(group.op, "ops other than te.block_quantize");
    if (input && quantize.getInput() != input)
      return noEmitter(group.op, "block casts of different inputs");
    input = quantize.getInput();
    if (!group.isOutput(quantize.getOutput()) ||
        !group.isOutput(quantize.getScaleInv()))
      return noEmitter(group.op, "a block cast whose output or scale_inv the "
                                 "kernel does not write");
    if (tensorType(quantize.getScaleInv()).getRank() != 2)
      return noEmitter(group.op, "a scale_inv that is not a matrix");
    casts.push_back(describeCast(builder, quantize.getOutput(),
                                 quantize.getScaleInv(), quantize.getBlockDim(),
                                 quantize.getTranspose(),
                                 quantize.getPower_2Scale(), casts.size()));
  }
  if (!input || !llvm::is_contained(group.inputs, input))
    return noEmitter(group.op,
                     "a block cast of a value computed in the kernel");
  auto inputType = tensorType(input);
  Type element = inputType.getElementType();
  if (inputType.getRank() != 2 ||
      !(element.isBF16() || element.isF16() || element.isF32()))
    return noEmitter(group.op, "a block cast of other than a bf16, f16 or f32 "
                               "matrix");
  BlockCastInput in{builder.param(input).str(), element, rowsOf(input),
                    colsOf(input), 0};
  return emitBlockCastKernel(builder, in, casts, kernels);
}
