//===- BlockCastParts.h - what the block cast kernels share -----*- C++ -*-===//
//
// Float8BlockScaling's cast kernels (docs/block-scaling.md): te.block_quantize
// (BlockScalingKernels.cpp) and te.grouped_block_quantize
// (GroupedBlockScalingKernels.cpp) take a 128 x 128 tile of the input with
// 256 threads, 16 across a tile row (8 columns each, as kPieces vectors of
// kVec), 16 rows a pass, 8 passes. The pieces here write the code both use
// over that layout; the emitted code names them so:
//   kTile, kThreads, kThreadsX, kRowsPerPass, kPasses, kWarps, kVec,
//   kPieces (constants); tx, ty, lane, warp (the thread); row0, col0 (the
//   tile's first input row and column, which the caller defines);
//   tile_col(q) (the tile column where the thread's piece q starts);
//   x_in[p][q] (the loaded tile); row_amax[p] (the amax of tile row ty + p
//   * kRowsPerPass, bits); col_part[warp][c] (column amaxes of a warp's two
//   rows); row_scale<s>[p], col_scale<s>[c] (cast s's scales).
// Amaxes are unsigned maxima of |x|'s bits (exact, NaN kept) and scales
// follow te.compute_scale (tj_block_scale, blockscale.cuh).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_CODEGEN_BLOCKCASTPARTS_H
#define TEJIT_CODEGEN_BLOCKCASTPARTS_H

#include "codegen/EmitterImpl.h"

#include "dialects/BlockScaleLayout.h"

#include <array>
#include <string>

namespace tejit::codegen::blockcast {

constexpr int64_t kTile = blockscale::kBlock;
constexpr int64_t kThreads = 256, kThreadsX = 16,
                  kRowsPerPass = kThreads / kThreadsX,
                  kPasses = kTile / kRowsPerPass, kWarps = kThreads / 32;
/// Columns of a tile row one thread loads (as 8 / kVec vectors of kVec).
constexpr int64_t kColsPerThread = kTile / kThreadsX;
static_assert(kColsPerThread == 8 && kPasses == 8, "the layout of the kernel");

/// Which amax a cast's scales come from, in the input's terms.
enum class AmaxKind { Rows, Cols, Tile };

/// One cast of the kernel and the names it writes with.
struct Cast {
  AmaxKind amax;
  bool transpose;
  /// Names of the FP8 output and of scale_inv in the kernel (parameters, or
  /// pointers the kernel derives from them).
  std::string out, scaleInv;
  /// The output's element type and its largest finite value, as C++.
  std::string fp8Type, fp8Max;
  bool power2;
  /// One matrix's scale_inv shape (BlockScaleLayout.h), over S.
  std::array<int64_t, 2> scaleShape;
  /// A suffix for this cast's own variables.
  std::string suffix;
};

/// A cast writing `output` and `scaleInv` (group outputs), whose scale_inv
/// shape ends in one matrix's [s0, s1]; `index` numbers it in its kernel.
Cast describeCast(KernelBuilder &builder, mlir::Value output,
                  mlir::Value scaleInv, int64_t blockDim, bool transpose,
                  bool power2, size_t index);

/// The layout's constants for vectors of `vec` elements, the thread's
/// indices and tile_col.
void writeTileLayout(CudaWriter &w, int64_t vec);

/// Loads the tile into `x_in[kPasses][kPieces]`: the element at (row, col)
/// where `inBounds` (an expression of row, col and p) holds, else 0.
void writeLoads(CudaWriter &w, llvm::StringRef input, llvm::StringRef type,
                llvm::StringRef inBounds);

/// row_amax[p] for each pass.
void writeRowAmaxes(CudaWriter &w);

/// The amax of each column of this warp's two tile rows, in
/// col_part[warp][column] for the warps to meet; with `keep`, in
/// col_amax[q][i] too (for the tile's amax). Ends with a barrier.
void writeColAmaxes(CudaWriter &w, bool keep);

/// `row_scale<s>[p]`, the scales of the thread's rows. Lane tx < kPasses of
/// a tile row's 16 computes the scale of tile row `r` = ty + tx *
/// kRowsPerPass as `scale<s>` and runs `storeScaleInv` (lines separated by
/// '\n', which write scale_inv there); the others read it by shuffles.
void writeRowScales(CudaWriter &w, const Cast &cast,
                    llvm::StringRef storeScaleInv);

/// `col_scale<s>[kTile]` (shared) from col_part: thread threadIdx.x <
/// kTile computes the scale of tile column threadIdx.x as `scale` and runs
/// `storeScaleInv` (lines separated by '\n'). The caller synchronizes before
/// the casts read it.
void writeColScales(CudaWriter &w, const Cast &cast,
                    llvm::StringRef storeScaleInv);

/// Scales, converts and stores one cast's elements: rows of S to memory
/// where `inBounds` (of row and col) holds, a transposed S into its shared
/// tile (transposedTile(cast), the input's layout).
void writeCastOutput(CudaWriter &w, const Cast &cast, int64_t vec,
                     llvm::StringRef inBounds);

/// The shared byte tile of a transposed cast.
std::string transposedTile(const Cast &cast);

/// One kernel of te.block_quantize's casts of a [rows, cols] matrix or, with
/// `groups` > 0, of each of `groups` stacked matrices [groups, rows, cols]
/// (blockIdx.z = the matrix; each cast's output and scale_inv hold one
/// matrix's worth after another).
struct BlockCastInput {
  std::string name;
  mlir::Type element;
  int64_t rows = 0, cols = 0, groups = 0;
};
llvm::Error emitBlockCastKernel(KernelBuilder &builder,
                                const BlockCastInput &input,
                                llvm::SmallVectorImpl<Cast> &casts,
                                std::vector<EmittedKernel> &kernels);

} // namespace tejit::codegen::blockcast

#endif // TEJIT_CODEGEN_BLOCKCASTPARTS_H
