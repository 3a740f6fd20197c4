//===- GroupedBlockScalingKernels.cpp - GroupedLinear's block casts, GEMMs ===//
//
// Float8BlockScaling on GroupedLinear (docs/grouped-linear.md, "session 28
// contract"): every group is its own matrix for te.block_quantize's casts
// (blockQuantize(), BlockScalingKernels.cpp), so no block spans two groups
// or reaches into padding, and its GEMM is te.scaled_matmul with block scales
// (blockScaledMatmul()) reading the group's scales from where
// dialects/GroupedBlockScaleLayout.h puts them. A group's scales there are
// exactly te.block_quantize's layout of the group's matrix, so a cast's
// scale_inv is copied in whole and a GEMM's read back in whole.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Kernels.h"
#include "dialects/GroupedBlockScaleLayout.h"

#include <algorithm>
#include <cassert>

using namespace tejit::interp;
using llvm::ArrayRef;
using llvm::SmallVector;
namespace blockscale = tejit::blockscale;
namespace layout = tejit::groupedblockscale;

/// The row counts m_0 .. m_{G-1} of the segment offsets o_0 .. o_G.
static SmallVector<int64_t> splitsOf(ArrayRef<int64_t> offsets) {
  assert(offsets.size() >= 2 && "segments need offsets o_0 .. o_G");
  SmallVector<int64_t> splits;
  for (size_t g = 0; g + 1 < offsets.size(); ++g)
    splits.push_back(offsets[g + 1] - offsets[g]);
  return splits;
}

/// The elements of `x` from flat index `begin` on, as a tensor of `shape`.
static Tensor flatRange(const Tensor &x, int64_t begin,
                        ArrayRef<int64_t> shape) {
  Tensor result = Tensor::zeros(shape);
  int64_t size = result.numElements();
  assert(begin >= 0 && begin + size <= x.numElements() &&
         "scales out of range");
  std::copy_n(x.data.begin() + begin, size, result.data.begin());
  return result;
}

/// Copies every element of `part` into `out` from flat index `begin` on.
static void writeFlat(Tensor &out, int64_t begin, const Tensor &part) {
  assert(begin >= 0 && begin + part.numElements() <= out.numElements() &&
         "scales out of range");
  std::copy(part.data.begin(), part.data.end(), out.data.begin() + begin);
}

/// Copies the matrix `cols` [R, m] into columns [begin, begin + m) of the
/// matrix `out` [R, T].
static void writeColumns(Tensor &out, int64_t begin, const Tensor &cols) {
  assert(out.shape.size() == 2 && cols.shape.size() == 2 &&
         out.shape[0] == cols.shape[0] &&
         begin + cols.shape[1] <= out.shape[1] && "columns out of range");
  int64_t rows = cols.shape[0], width = cols.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(cols.data.begin() + r * width, width,
                out.data.begin() + r * out.shape[1] + begin);
}

/// The 1-D scale shape of a segment's matrix [m, K] in the segments layout,
/// [ceil(K/128), m]: te.block_quantize's [ceil(K/128), pad4(m)], which the
/// 16-aligned segments never pad.
static std::array<int64_t, 2> segmentScaleShape(int64_t m, int64_t k) {
  assert(blockscale::pad4(m) == m && "segments of 16-aligned rows");
  return blockscale::scaleShape(m, k, /*blockDim=*/1);
}

//===----------------------------------------------------------------------===//
// te.grouped_block_quantize
//===----------------------------------------------------------------------===//

/// Stacked matrices [G, R, C]: group g is te.block_quantize of x[g].
static BlockQuantized stackedBlockQuantize(const Tensor &x, int64_t blockDim,
                                           bool transpose, bool power2,
                                           Fp8Kind kind) {
  assert(x.shape.size() == 3 && "stacked matrices [G, R, C]");
  int64_t groups = x.shape[0];
  int64_t rows = x.shape[transpose ? 2 : 1], cols = x.shape[transpose ? 1 : 2];
  BlockQuantized result{
      Tensor::zeros({groups, rows, cols}),
      Tensor::zeros(layout::stackedShape(groups, rows, cols, blockDim))};
  for (int64_t g = 0; g < groups; ++g) {
    BlockQuantized cast =
        blockQuantize(groupOf(x, g), blockDim, transpose, power2, kind);
    writeGroup(result.output, g, cast.output);
    writeFlat(result.scaleInv, layout::stackedOffset(g, rows, cols, blockDim),
              cast.scaleInv);
  }
  return result;
}

/// Row segments of x [T, K], 1-D blocks: along K, or with `transpose` along
/// each segment's columns of x^T [K, T] (counted from its first column).
static BlockQuantized segmentsBlockQuantize(const Tensor &x,
                                            ArrayRef<int64_t> offsets,
                                            bool transpose, bool power2,
                                            Fp8Kind kind) {
  assert(x.shape.size() == 2 && "segments of a matrix [T, K]");
  int64_t tokens = x.shape[0], cols = x.shape[1];
  SmallVector<int64_t> splits = splitsOf(offsets);
  int64_t groups = splits.size();
  BlockQuantized result{
      transpose ? Tensor::zeros({cols, tokens}) : Tensor::zeros({tokens, cols}),
      transpose
          ? Tensor::zeros(layout::transposedSegmentsShape(cols, tokens, groups))
          : Tensor::zeros(layout::segmentsShape(tokens, cols))};
  for (int64_t g = 0; g < groups; ++g) {
    if (splits[g] == 0)
      continue;
    BlockQuantized cast =
        blockQuantize(rowRange(x, offsets[g], offsets[g + 1]),
                      /*blockDim=*/1, transpose, power2, kind);
    if (transpose) {
      writeColumns(result.output, offsets[g], cast.output);
      writeFlat(result.scaleInv,
                layout::transposedSegmentsOffset(splits, g, cols),
                cast.scaleInv);
      continue;
    }
    assert(ArrayRef<int64_t>(cast.scaleInv.shape) ==
               ArrayRef<int64_t>(segmentScaleShape(splits[g], cols)) &&
           "a segment's scales fill its range");
    writeRows(result.output, offsets[g], cast.output);
    writeFlat(result.scaleInv, layout::segmentsOffset(splits, g, cols),
              cast.scaleInv);
  }
  return result;
}

BlockQuantized tejit::interp::groupedBlockQuantize(const Tensor &x,
                                                   ArrayRef<int64_t> offsets,
                                                   int64_t blockDim,
                                                   bool transpose, bool power2,
                                                   Fp8Kind kind) {
  if (offsets.empty())
    return stackedBlockQuantize(x, blockDim, transpose, power2, kind);
  assert(blockDim == 1 && "token segments are cast in 1-D blocks");
  return segmentsBlockQuantize(x, offsets, transpose, power2, kind);
}

//===----------------------------------------------------------------------===//
// te.grouped_scaled_matmul with block scales
//===----------------------------------------------------------------------===//

Tensor tejit::interp::groupedBlockScaledMatmulRows(
    const Tensor &a, const Tensor &b, const Tensor &aScaleInv,
    const Tensor &bScaleInv, int64_t bScaling, ArrayRef<int64_t> offsets,
    const Tensor *bias) {
  assert(a.shape.size() == 2 && b.shape.size() == 3 &&
         a.shape[1] == b.shape[2] && "rows form operands");
  int64_t k = a.shape[1], n = b.shape[1];
  SmallVector<int64_t> splits = splitsOf(offsets);
  Tensor out = Tensor::zeros({a.shape[0], n});
  for (int64_t g = 0; g < int64_t(splits.size()); ++g) {
    if (splits[g] == 0)
      continue;
    Tensor aScales = flatRange(aScaleInv, layout::segmentsOffset(splits, g, k),
                               segmentScaleShape(splits[g], k));
    Tensor bScales =
        flatRange(bScaleInv, layout::stackedOffset(g, n, k, bScaling),
                  blockscale::scaleShape(n, k, bScaling));
    Tensor y = blockScaledMatmul(rowRange(a, offsets[g], offsets[g + 1]),
                                 groupOf(b, g), aScales, /*aScaling=*/1,
                                 bScales, bScaling);
    if (bias)
      y = biasAdd(y, groupOf(*bias, g));
    writeRows(out, offsets[g], y);
  }
  return out;
}

Tensor tejit::interp::groupedBlockScaledMatmulContraction(
    const Tensor &a, const Tensor &b, const Tensor &aScaleInv,
    const Tensor &bScaleInv, ArrayRef<int64_t> offsets) {
  assert(a.shape.size() == 2 && b.shape.size() == 2 &&
         a.shape[1] == b.shape[1] && "contraction form operands");
  int64_t m = a.shape[0], n = b.shape[0];
  SmallVector<int64_t> splits = splitsOf(offsets);
  int64_t groups = splits.size();
  Tensor out = Tensor::zeros({groups, m, n});
  for (int64_t g = 0; g < groups; ++g) {
    int64_t size = splits[g];
    if (size == 0)
      continue;
    // Segment g is columns [o_g, o_{g+1}) of both K-major operands, each
    // with its 1-D blocks counted from the segment's first column.
    Tensor aScales =
        flatRange(aScaleInv, layout::transposedSegmentsOffset(splits, g, m),
                  blockscale::scaleShape(m, size, /*blockDim=*/1));
    Tensor bScales =
        flatRange(bScaleInv, layout::transposedSegmentsOffset(splits, g, n),
                  blockscale::scaleShape(n, size, /*blockDim=*/1));
    writeGroup(out, g,
               blockScaledMatmul(slice(a, offsets[g], size),
                                 slice(b, offsets[g], size), aScales,
                                 /*aScaling=*/1, bScales, /*bScaling=*/1));
  }
  return out;
}
