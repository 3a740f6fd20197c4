//===- GroupedBlockScaleLayout.h - grouped GEMMs' block scales -*- C++ -*-===//
//-*-===//
//
// Where Float8BlockScaling keeps the scale inverses of GroupedLinear's FP8
// operands (te.grouped_block_quantize, docs/grouped-linear.md). Each group's
// GEMM reads its operands' scales as one cuBLASLt block-scaled GEMM does
// (dialects/BlockScaleLayout.h) at an offset that a 16-byte aligned pointer
// reaches; the groups' scales lie one after another:
// - Segments (the rows of x [T, K] in segments, 1-D blocks along K): the
//   scale_inv tensor is f32 [ceil(K/128), T]. Segment g is the flat range
//   [nb * o_g, nb * (o_g + m_g)) (nb = ceil(K/128)) and holds that
//   segment's [nb, m_g] layout: element (j, r) is at nb * o_g + j * m_g +
//   (r - o_g). Under FP8 every m_g is a multiple of 16, so pad4(m_g) = m_g
//   and the offsets are 16-byte aligned. Elements from nb * o_G on are 0.
// - Transposed segments (x^T [K, T], 1-D blocks of 128 columns that start
//   at each segment's first column): f32 [ceil(T/128) + G, pad4(K)].
//   Segment g has c_g = ceil(m_0/128) + ... + ceil(m_{g-1}/128) block
//   columns before it and holds its [ceil(m_g/128), pad4(K)] layout from
//   flat index pad4(K) * c_g: element (j, r) (row r of x^T, the segment's
//   block j) at pad4(K) * (c_g + j) + r. The rest is 0. ceil(T/128) + G
//   rows always suffice: sum ceil(m_g/128) < T/128 + G.
// - Stacked matrices (weights [G, R, C], per group as te.block_quantize
//   casts one matrix, 1-D or 2-D): f32 [G, s0, s1] with (s0, s1) =
//   blockscale::scaleShape of the cast matrix; group g from g * s0 * s1.
//
// Plain C++ (no MLIR), shared by the verifiers, the interpreter and the
// runtime.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECTS_GROUPEDBLOCKSCALELAYOUT_H
#define TEJIT_DIALECTS_GROUPEDBLOCKSCALELAYOUT_H

#include "dialects/BlockScaleLayout.h"

#include <array>
#include <cstdint>
#include <vector>

namespace tejit::groupedblockscale {

using blockscale::ceilDiv;
using blockscale::kBlock;
using blockscale::pad4;

/// scale_inv shape of x [tokens, cols] cast in row segments (1-D blocks).
inline std::array<int64_t, 2> segmentsShape(int64_t tokens, int64_t cols) {
  return {ceilDiv(cols, kBlock), tokens};
}

/// scale_inv shape of x^T [rows, tokens] cast in column segments.
inline std::array<int64_t, 2>
transposedSegmentsShape(int64_t rows, int64_t tokens, int64_t groups) {
  return {ceilDiv(tokens, kBlock) + groups, pad4(rows)};
}

/// scale_inv shape of stacked matrices, each cast [rows, cols].
inline std::array<int64_t, 3> stackedShape(int64_t groups, int64_t rows,
                                           int64_t cols, int64_t blockDim) {
  std::array<int64_t, 2> one = blockscale::scaleShape(rows, cols, blockDim);
  return {groups, one[0], one[1]};
}

/// Which layout a grouped cast's scales take.
enum class Layout { Segments, TransposedSegments, Stacked };

/// The scale_inv shape of a grouped cast whose FP8 output is `cast` (rank
/// 2: [T, K] for Segments, [K, T] for TransposedSegments; rank 3: [G, R,
/// C] for Stacked) with `groups` groups and `blockDim`-D blocks (Stacked
/// only; segments are 1-D). The one place that picks between the shapes
/// above: the verifiers, the passes and the runtime all ask it.
inline std::vector<int64_t> castScaleShape(Layout layout, const int64_t *cast,
                                           int64_t groups, int64_t blockDim) {
  switch (layout) {
  case Layout::Segments: {
    std::array<int64_t, 2> shape = segmentsShape(cast[0], cast[1]);
    return {shape.begin(), shape.end()};
  }
  case Layout::TransposedSegments: {
    std::array<int64_t, 2> shape =
        transposedSegmentsShape(cast[0], cast[1], groups);
    return {shape.begin(), shape.end()};
  }
  case Layout::Stacked:
    break;
  }
  std::array<int64_t, 3> shape =
      stackedShape(groups, cast[1], cast[2], blockDim);
  return {shape.begin(), shape.end()};
}

/// The flat index where a segment's scales start, for each layout, from
/// the rows (block columns) of the segments before it.
inline int64_t segmentsOffsetAfter(int64_t rowsBefore, int64_t cols) {
  return ceilDiv(cols, kBlock) * rowsBefore;
}

inline int64_t transposedSegmentsOffsetAfter(int64_t blocksBefore,
                                             int64_t rows) {
  return pad4(rows) * blocksBefore;
}

/// The block columns of a segment of `tokens` rows, cast transposed.
inline int64_t transposedSegmentBlocks(int64_t tokens) {
  return ceilDiv(tokens, kBlock);
}

/// The same from the G values of m_splits (any indexable range of ints):
/// where segment `group`'s scales start.
template <typename Splits>
int64_t segmentsOffset(const Splits &splits, int64_t group, int64_t cols) {
  int64_t rowsBefore = 0;
  for (int64_t g = 0; g < group; ++g)
    rowsBefore += int64_t(splits[g]);
  return segmentsOffsetAfter(rowsBefore, cols);
}

template <typename Splits>
int64_t transposedSegmentsOffset(const Splits &splits, int64_t group,
                                 int64_t rows) {
  int64_t blocksBefore = 0;
  for (int64_t g = 0; g < group; ++g)
    blocksBefore += transposedSegmentBlocks(int64_t(splits[g]));
  return transposedSegmentsOffsetAfter(blocksBefore, rows);
}

inline int64_t stackedOffset(int64_t group, int64_t rows, int64_t cols,
                             int64_t blockDim) {
  std::array<int64_t, 2> one = blockscale::scaleShape(rows, cols, blockDim);
  return group * one[0] * one[1];
}

} // namespace tejit::groupedblockscale

#endif // TEJIT_DIALECTS_GROUPEDBLOCKSCALELAYOUT_H
