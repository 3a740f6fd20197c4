//===- BlockScalingKernels.cpp - Float8BlockScaling casts and GEMMs -------===//
//
// The numerics of docs/block-scaling.md: te.block_quantize casts a matrix in
// blocks of 128 elements of a row or in 128 x 128 tiles, each with
// current scaling's scale of its own amax (currentScale(), castToFp8() of
// ScalingKernels.cpp); te.scaled_matmul with block scales dequantizes every
// element by its block's scale inverse. Scale inverses are laid out as
// cuBLASLt reads them (dialects/BlockScaleLayout.h).
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Kernels.h"
#include "dialects/BlockScaleLayout.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

using namespace tejit::interp;
namespace blockscale = tejit::blockscale;

namespace {
/// A block of a row-major matrix: rows [rowBegin, rowEnd) x columns
/// [colBegin, colEnd).
struct Block {
  int64_t rowBegin, rowEnd, colBegin, colEnd;
};
} // namespace

/// max |x| over `block` of the matrix `x` (`cols` wide), exact; NaN when one
/// element is NaN, as te.amax.
static double blockAmax(const Tensor &x, int64_t cols, const Block &block) {
  double max = 0.0;
  for (int64_t r = block.rowBegin; r < block.rowEnd; ++r)
    for (int64_t c = block.colBegin; c < block.colEnd; ++c) {
      double value = x.data[r * cols + c];
      if (std::isnan(value))
        return std::numeric_limits<double>::quiet_NaN();
      max = std::max(max, std::fabs(value));
    }
  return max;
}

BlockQuantized tejit::interp::blockQuantize(const Tensor &x, int64_t blockDim,
                                            bool transpose, bool power2,
                                            Fp8Kind kind) {
  assert(x.shape.size() == 2 && "block_quantize needs a matrix");
  assert((blockDim == 1 || blockDim == 2) && "blocks are 1-D or 2-D");
  // The cast matrix; the transposed copy is cast from the high-precision
  // values, with blocks of its own (along its rows).
  Tensor matrix = transpose ? tejit::interp::transpose(x) : x;
  int64_t rows = matrix.shape[0], cols = matrix.shape[1];
  std::array<int64_t, 2> scaleShape =
      blockscale::scaleShape(rows, cols, blockDim);
  // Padding stays 0.
  BlockQuantized result{Tensor::zeros({rows, cols}),
                        Tensor::zeros({scaleShape[0], scaleShape[1]})};
  int64_t blockRows = blockDim == 1 ? 1 : blockscale::kBlock;
  for (int64_t row = 0; row < rows; row += blockRows)
    for (int64_t col = 0; col < cols; col += blockscale::kBlock) {
      // Edge blocks are clipped to the matrix.
      Block block{row, std::min(row + blockRows, rows), col,
                  std::min(col + blockscale::kBlock, cols)};
      Fp8Scale scale =
          currentScale(blockAmax(matrix, cols, block), kind, power2);
      for (int64_t r = block.rowBegin; r < block.rowEnd; ++r)
        for (int64_t c = block.colBegin; c < block.colEnd; ++c)
          result.output.data[r * cols + c] =
              castToFp8(matrix.data[r * cols + c], scale.scale, kind);
      result.scaleInv
          .data[blockscale::scaleIndex(rows, cols, blockDim, row, col)] =
          scale.scaleInv;
    }
  return result;
}

Tensor tejit::interp::dequantize(const Tensor &x, const Tensor &scaleInv,
                                 int64_t scaling) {
  assert(x.shape.size() == 2 && "dequantize needs a matrix");
  assert(scaling >= 0 && scaling <= 2 && "unknown scaling");
  int64_t rows = x.shape[0], cols = x.shape[1];
  Tensor result = x;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      int64_t index =
          scaling == 0 ? 0 : blockscale::scaleIndex(rows, cols, scaling, r, c);
      // Exact: an FP8 significand times a float32 one fits in a double.
      result.data[r * cols + c] *= scaleInv.data[index];
    }
  return result;
}

Tensor tejit::interp::blockScaledMatmul(const Tensor &a, const Tensor &b,
                                        const Tensor &aScaleInv,
                                        int64_t aScaling,
                                        const Tensor &bScaleInv,
                                        int64_t bScaling) {
  // As scaledMatmul(): the exact product of the dequantized operands; it
  // does not model cuBLASLt's f32 (split) accumulation.
  return matmul(dequantize(a, aScaleInv, aScaling),
                dequantize(b, bScaleInv, bScaling), /*transposeA=*/false,
                /*transposeB=*/true);
}
