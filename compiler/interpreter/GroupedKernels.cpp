//===- GroupedKernels.cpp - GroupedLinear's GEMMs, casts and sums ---------===//
//
// The numerics of docs/grouped-linear.md, one group at a time on the
// kernels of TensorKernels.cpp and ScalingKernels.cpp: group g of a matrix
// [T, .] is its row segment [o_g, o_{g+1}) (a column range of the
// transposed FP8 copies), group g of a stacked tensor [G, R, C] its slice g.
// Rows at and past o_G are padding: written 0 and read by no sum. Empty
// segments are skipped (their outputs stay 0).
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Kernels.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>

using namespace tejit::interp;
using llvm::ArrayRef;

std::string tejit::interp::mSplitsError(const Tensor &mSplits, int64_t tokens,
                                        bool fp8) {
  double sum = 0.0;
  for (auto [g, split] : llvm::enumerate(mSplits.data)) {
    std::string which = "'m_splits'[" + std::to_string(g) + "] = ";
    if (split != std::trunc(split) ||
        std::fabs(split) > std::numeric_limits<int32_t>::max())
      return which + std::to_string(split) + " is not an i32 integer";
    if (split < 0)
      return which + std::to_string(int64_t(split)) +
             " is negative: segments hold 0 or more rows";
    if (fp8 && int64_t(split) % 16 != 0)
      return which + std::to_string(int64_t(split)) +
             " is not a multiple of 16: FP8 grouped GEMMs start every "
             "segment at a 16-aligned row (pad the segments)";
    sum += split;
  }
  if (sum > double(tokens))
    return "'m_splits' sums to " + std::to_string(int64_t(sum)) +
           ", more than the " + std::to_string(tokens) +
           " rows (tokens) it cuts into segments";
  return "";
}

llvm::SmallVector<int64_t>
tejit::interp::segmentOffsets(const Tensor &mSplits) {
  llvm::SmallVector<int64_t> offsets = {0};
  for (double split : mSplits.data)
    offsets.push_back(offsets.back() + int64_t(split));
  return offsets;
}

/// Rows [begin, end) of a matrix.
Tensor tejit::interp::rowRange(const Tensor &x, int64_t begin, int64_t end) {
  assert(x.shape.size() == 2 && 0 <= begin && begin <= end &&
         end <= x.shape[0] && "rows out of range");
  int64_t cols = x.shape[1];
  return Tensor({end - begin, cols},
                std::vector<double>(x.data.begin() + begin * cols,
                                    x.data.begin() + end * cols));
}

/// Copies the matrix `rows` into `out` from row `begin` on.
void tejit::interp::writeRows(Tensor &out, int64_t begin, const Tensor &rows) {
  assert(out.shape.size() == 2 && rows.shape.size() == 2 &&
         out.shape[1] == rows.shape[1] &&
         begin + rows.shape[0] <= out.shape[0] && "rows out of range");
  std::copy(rows.data.begin(), rows.data.end(),
            out.data.begin() + begin * out.shape[1]);
}

/// Slice g of a stacked tensor [G, ...]: a tensor of the trailing dims.
Tensor tejit::interp::groupOf(const Tensor &stack, int64_t g) {
  llvm::SmallVector<int64_t> shape(stack.shape.begin() + 1, stack.shape.end());
  Tensor result = Tensor::zeros(shape);
  int64_t size = result.numElements();
  std::copy_n(stack.data.begin() + g * size, size, result.data.begin());
  return result;
}

/// Copies `slice` into slice g of the stacked tensor `out`.
void tejit::interp::writeGroup(Tensor &out, int64_t g, const Tensor &slice) {
  int64_t size = slice.numElements();
  assert(out.numElements() == out.shape[0] * size && "slice shapes differ");
  std::copy(slice.data.begin(), slice.data.end(), out.data.begin() + g * size);
}

/// The number of groups of `offsets` (o_0 .. o_G).
static int64_t groupCount(ArrayRef<int64_t> offsets) {
  assert(offsets.size() >= 2 && "segments need offsets o_0 .. o_G");
  return int64_t(offsets.size()) - 1;
}

//===----------------------------------------------------------------------===//
// High-precision GEMMs and the bias gradient
//===----------------------------------------------------------------------===//

Tensor tejit::interp::groupedMatmulRows(const Tensor &a, const Tensor &b,
                                        ArrayRef<int64_t> offsets,
                                        bool transposeB, const Tensor *bias) {
  assert(a.shape.size() == 2 && b.shape.size() == 3 && "rows form operands");
  int64_t n = b.shape[transposeB ? 1 : 2];
  Tensor out = Tensor::zeros({a.shape[0], n});
  for (int64_t g = 0; g < groupCount(offsets); ++g) {
    if (offsets[g] == offsets[g + 1])
      continue;
    Tensor y = matmul(rowRange(a, offsets[g], offsets[g + 1]), groupOf(b, g),
                      /*transposeA=*/false, transposeB);
    if (bias)
      y = biasAdd(y, groupOf(*bias, g));
    writeRows(out, offsets[g], y);
  }
  return out;
}

Tensor tejit::interp::groupedMatmulContraction(const Tensor &a, const Tensor &b,
                                               ArrayRef<int64_t> offsets) {
  assert(a.shape.size() == 2 && b.shape.size() == 2 &&
         a.shape[0] == b.shape[0] && "contraction form operands");
  int64_t groups = groupCount(offsets);
  Tensor out = Tensor::zeros({groups, a.shape[1], b.shape[1]});
  for (int64_t g = 0; g < groups; ++g) {
    if (offsets[g] == offsets[g + 1])
      continue;
    writeGroup(out, g,
               matmul(rowRange(a, offsets[g], offsets[g + 1]),
                      rowRange(b, offsets[g], offsets[g + 1]),
                      /*transposeA=*/true, /*transposeB=*/false));
  }
  return out;
}

Tensor tejit::interp::groupedLinear(const Tensor &x, const Tensor &weight,
                                    const Tensor *bias,
                                    ArrayRef<int64_t> offsets) {
  int64_t in = x.shape.back(), out = weight.shape[1];
  Tensor y = groupedMatmulRows(reshape(x, {x.numElements() / in, in}), weight,
                               offsets, /*transposeB=*/true, bias);
  llvm::SmallVector<int64_t> shape(x.shape);
  shape.back() = out;
  return reshape(std::move(y), shape);
}

Tensor tejit::interp::groupedBiasGrad(const Tensor &grad,
                                      ArrayRef<int64_t> offsets) {
  assert(grad.shape.size() == 2 && "bias gradient of a matrix");
  int64_t groups = groupCount(offsets);
  Tensor out = Tensor::zeros({groups, grad.shape[1]});
  for (int64_t g = 0; g < groups; ++g)
    if (offsets[g] != offsets[g + 1])
      writeGroup(out, g, biasGrad(rowRange(grad, offsets[g], offsets[g + 1])));
  return out;
}

//===----------------------------------------------------------------------===//
// FP8: per-group casts, amaxes and GEMMs
//===----------------------------------------------------------------------===//

/// Group g of `x`: a row segment (with offsets) or a stacked slice.
static Tensor groupInput(const Tensor &x, ArrayRef<int64_t> offsets,
                         int64_t g) {
  return offsets.empty() ? groupOf(x, g)
                         : rowRange(x, offsets[g], offsets[g + 1]);
}

/// The groups of a grouped cast's input.
static int64_t inputGroups(const Tensor &x, ArrayRef<int64_t> offsets) {
  return offsets.empty() ? x.shape[0] : groupCount(offsets);
}

Tensor tejit::interp::groupedAmax(const Tensor &x, ArrayRef<int64_t> offsets) {
  int64_t groups = inputGroups(x, offsets);
  Tensor amax = Tensor::zeros({groups});
  for (int64_t g = 0; g < groups; ++g)
    amax.data[g] = absMax(groupInput(x, offsets, g));
  return amax;
}

GroupedQuantized tejit::interp::groupedQuantize(const Tensor &x,
                                                const Tensor &scale,
                                                ArrayRef<int64_t> offsets,
                                                bool transpose, Fp8Kind kind) {
  int64_t groups = inputGroups(x, offsets);
  assert(scale.numElements() == groups && "one scale per group");
  GroupedQuantized result{Tensor::zeros(x.shape), groupedAmax(x, offsets)};
  for (int64_t g = 0; g < groups; ++g) {
    Tensor cast = quantize(groupInput(x, offsets, g), scale.data[g], kind);
    if (offsets.empty())
      writeGroup(result.output, g,
                 transpose ? tejit::interp::transpose(cast) : cast);
    else
      writeRows(result.output, offsets[g], cast);
  }
  if (offsets.empty()) {
    if (transpose)
      std::swap(result.output.shape[1], result.output.shape[2]);
    return result;
  }
  // The cast is element-wise: the transposed copy ([K, T], segment g in
  // columns [o_g, o_{g+1}), padding columns 0) is the row cast transposed.
  if (transpose)
    result.output = tejit::interp::transpose(result.output);
  return result;
}

Tensor tejit::interp::groupedScaledMatmulRows(const Tensor &a, const Tensor &b,
                                              const Tensor &aScaleInv,
                                              const Tensor &bScaleInv,
                                              ArrayRef<int64_t> offsets,
                                              const Tensor *bias) {
  assert(a.shape.size() == 2 && b.shape.size() == 3 && "rows form operands");
  Tensor out = Tensor::zeros({a.shape[0], b.shape[1]});
  for (int64_t g = 0; g < groupCount(offsets); ++g) {
    if (offsets[g] == offsets[g + 1])
      continue;
    // As te.scaled_matmul: the exact product of the dequantized operands.
    Tensor y =
        scaledMatmul(rowRange(a, offsets[g], offsets[g + 1]), groupOf(b, g),
                     aScaleInv.data[g], bScaleInv.data[g]);
    if (bias)
      y = biasAdd(y, groupOf(*bias, g));
    writeRows(out, offsets[g], y);
  }
  return out;
}

Tensor tejit::interp::groupedScaledMatmulContraction(
    const Tensor &a, const Tensor &b, const Tensor &aScaleInv,
    const Tensor &bScaleInv, ArrayRef<int64_t> offsets) {
  assert(a.shape.size() == 2 && b.shape.size() == 2 &&
         a.shape[1] == b.shape[1] && "contraction form operands");
  int64_t groups = groupCount(offsets);
  Tensor out = Tensor::zeros({groups, a.shape[0], b.shape[0]});
  for (int64_t g = 0; g < groups; ++g) {
    int64_t size = offsets[g + 1] - offsets[g];
    if (size == 0)
      continue;
    // Segment g is columns [o_g, o_{g+1}) of both K-major operands.
    writeGroup(out, g,
               scaledMatmul(slice(a, offsets[g], size),
                            slice(b, offsets[g], size), aScaleInv.data[g],
                            bScaleInv.data[g]));
  }
  return out;
}
