//===- TensorKernels.cpp - shapes, elementwise ops, GEMMs, dropout --------===//
#include "compiler/interpreter/DropoutRng.h"
#include "compiler/interpreter/Kernels.h"

#include <cassert>

using namespace tejit::interp;
using llvm::ArrayRef;

Tensor tejit::interp::reshape(Tensor x, ArrayRef<int64_t> shape) {
  Tensor result(shape, std::move(x.data));
  assert(result.numElements() == static_cast<int64_t>(result.data.size()));
  return result;
}

Tensor tejit::interp::transpose(const Tensor &x) {
  assert(x.shape.size() == 2 && "transpose needs a matrix");
  int64_t rows = x.shape[0], cols = x.shape[1];
  Tensor result = Tensor::zeros({cols, rows});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      result.data[j * rows + i] = x.data[i * cols + j];
  return result;
}

Tensor tejit::interp::slice(const Tensor &x, int64_t offset, int64_t size) {
  int64_t width = x.shape.back();
  assert(offset >= 0 && offset + size <= width && "slice out of range");
  llvm::SmallVector<int64_t> shape(x.shape);
  shape.back() = size;
  Tensor result = Tensor::zeros(shape);
  int64_t rows = result.numElements() / size;
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t i = 0; i < size; ++i)
      result.data[row * size + i] = x.data[row * width + offset + i];
  return result;
}

Tensor tejit::interp::concat(ArrayRef<const Tensor *> inputs) {
  llvm::SmallVector<int64_t> shape(inputs.front()->shape);
  shape.back() = 0;
  for (const Tensor *input : inputs)
    shape.back() += input->shape.back();
  Tensor result = Tensor::zeros(shape);
  int64_t rows = inputs.front()->numElements() / inputs.front()->shape.back();
  double *out = result.data.data();
  for (int64_t row = 0; row < rows; ++row)
    for (const Tensor *input : inputs) {
      int64_t width = input->shape.back();
      out = std::copy_n(input->data.begin() + row * width, width, out);
    }
  return result;
}

Tensor tejit::interp::add(const Tensor &lhs, const Tensor &rhs) {
  assert(lhs.shape == rhs.shape && "add needs equal shapes");
  Tensor result = lhs;
  for (size_t i = 0; i < result.data.size(); ++i)
    result.data[i] += rhs.data[i];
  return result;
}

Tensor tejit::interp::biasAdd(const Tensor &x, const Tensor &bias) {
  int64_t width = x.shape.back();
  assert(bias.numElements() == width && "bias must match the last dim");
  Tensor result = x;
  for (size_t i = 0; i < result.data.size(); ++i)
    result.data[i] += bias.data[i % width];
  return result;
}

Tensor tejit::interp::biasGrad(const Tensor &grad) {
  int64_t width = grad.shape.back();
  Tensor result = Tensor::zeros({width});
  for (size_t i = 0; i < grad.data.size(); ++i)
    result.data[i % width] += grad.data[i];
  return result;
}

Tensor tejit::interp::matmul(const Tensor &a, const Tensor &b, bool transposeA,
                             bool transposeB) {
  assert(a.shape.size() == 2 && b.shape.size() == 2 && "matmul of matrices");
  int64_t m = a.shape[transposeA], k = a.shape[!transposeA];
  int64_t n = b.shape[!transposeB];
  assert(b.shape[transposeB] == k && "contracting dims differ");
  // Element (i, l) of op(a) and (l, j) of op(b), row-major in a and b.
  auto atA = [&](int64_t i, int64_t l) {
    return transposeA ? a.data[l * m + i] : a.data[i * k + l];
  };
  auto atB = [&](int64_t l, int64_t j) {
    return transposeB ? b.data[j * k + l] : b.data[l * n + j];
  };
  Tensor result = Tensor::zeros({m, n});
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t l = 0; l < k; ++l)
        sum += atA(i, l) * atB(l, j);
      result.data[i * n + j] = sum;
    }
  return result;
}

Tensor tejit::interp::linear(const Tensor &x, const Tensor &weight,
                             const Tensor *bias) {
  int64_t in = x.shape.back(), out = weight.shape[0];
  Tensor flat = reshape(x, {x.numElements() / in, in});
  Tensor y = matmul(flat, weight, /*transposeA=*/false, /*transposeB=*/true);
  if (bias)
    y = biasAdd(y, *bias);
  llvm::SmallVector<int64_t> shape(x.shape);
  shape.back() = out;
  return reshape(std::move(y), shape);
}

Tensor tejit::interp::dropoutKeep(ArrayRef<int64_t> shape, double rate,
                                  const DropoutKey &key, int64_t group) {
  Tensor keep = Tensor::zeros(shape);
  for (size_t i = 0; i < keep.data.size(); ++i)
    keep.data[i] =
        tejit::dropout::keeps(rate, key.seed, key.offset, key.stream, i / group)
            ? 1.0
            : 0.0;
  return keep;
}

Tensor tejit::interp::maskScale(const Tensor &x, const Tensor &keep,
                                double rate) {
  assert(x.shape == keep.shape && "keep mask must match the tensor");
  Tensor result = x;
  double scale = 1.0 / (1.0 - rate);
  for (size_t i = 0; i < result.data.size(); ++i)
    result.data[i] = keep.data[i] != 0.0 ? result.data[i] * scale : 0.0;
  return result;
}

Tensor tejit::interp::applyDropout(const Tensor &x, double rate,
                                   const DropoutKey &key, int64_t group) {
  return maskScale(x, dropoutKeep(x.shape, rate, key, group), rate);
}
