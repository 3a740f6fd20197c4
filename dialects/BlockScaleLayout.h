//===- BlockScaleLayout.h - where block-scaled FP8 keeps scales -*- C++ -*-===//
//
// Float8BlockScaling quantizes an FP8 matrix [rows, cols] (cols: the GEMM's
// contracting dim, contiguous) in blocks of 128 consecutive elements of a
// row (1-D) or in 128 x 128 tiles (2-D), each with its own scale. The scale
// inverses are stored as cuBLASLt reads them (its VEC128_32F and
// BLK128x128_32F scale modes on Hopper, Transformer Engine's "GEMM-ready"
// layout), with the inner dim padded to a multiple of 4 floats:
// - 1-D: [ceil(cols / 128), pad4(rows)]; element (j, r) is row r's block j.
// - 2-D: [ceil(rows / 128), pad4(ceil(cols / 128))]; element (i, j) is tile
//   (i, j).
// Padding elements are written as 0 and never read.
//
// Plain C++ (no MLIR), so that the verifiers, the interpreter, the code
// generator and the runtime share it.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECTS_BLOCKSCALELAYOUT_H
#define TEJIT_DIALECTS_BLOCKSCALELAYOUT_H

#include <array>
#include <cstdint>

namespace tejit::blockscale {

/// Elements along a block's side.
constexpr int64_t kBlock = 128;

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t pad4(int64_t n) { return (n + 3) / 4 * 4; }

/// The scale_inv shape of an FP8 [rows, cols] matrix with `blockDim`-D
/// blocks (1 or 2).
inline std::array<int64_t, 2> scaleShape(int64_t rows, int64_t cols,
                                         int64_t blockDim) {
  if (blockDim == 1)
    return {ceilDiv(cols, kBlock), pad4(rows)};
  return {ceilDiv(rows, kBlock), pad4(ceilDiv(cols, kBlock))};
}

/// The flat index, in that tensor, of the scale that covers element
/// (row, col).
inline int64_t scaleIndex(int64_t rows, int64_t cols, int64_t blockDim,
                          int64_t row, int64_t col) {
  std::array<int64_t, 2> shape = scaleShape(rows, cols, blockDim);
  if (blockDim == 1)
    return col / kBlock * shape[1] + row;
  return row / kBlock * shape[1] + col / kBlock;
}

/// How a te.scaled_matmul operand [rows, cols] is scaled, read off its
/// scale_inv's shape: 0 = one scale for the tensor ([1]), 1 or 2 = blocks,
/// -1 = none of these, or both (at most 4 rows and 128 columns, where the
/// two shapes coincide; FP8 GEMMs need 8 rows anyway).
inline int64_t scalingOf(int64_t scaleRank, const int64_t *scaleDims,
                         int64_t rows, int64_t cols) {
  if (scaleRank == 1 && scaleDims[0] == 1)
    return 0;
  if (scaleRank != 2)
    return -1;
  int64_t found = -1;
  for (int64_t blockDim : {1, 2}) {
    std::array<int64_t, 2> shape = scaleShape(rows, cols, blockDim);
    if (scaleDims[0] == shape[0] && scaleDims[1] == shape[1])
      found = found == -1 ? blockDim : -1;
  }
  return found;
}

} // namespace tejit::blockscale

#endif // TEJIT_DIALECTS_BLOCKSCALELAYOUT_H
