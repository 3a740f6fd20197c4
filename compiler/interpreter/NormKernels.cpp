//===- NormKernels.cpp - LayerNorm and RMSNorm, forward and backward ------===//
#include "compiler/interpreter/Kernels.h"

#include <cassert>
#include <cmath>

using namespace tejit::interp;

namespace {
/// A tensor seen as rows of its last dim.
struct Rows {
  int64_t count, width;
};
} // namespace

static Rows rowsOf(const Tensor &x) {
  int64_t width = x.shape.back();
  return {x.numElements() / width, width};
}

/// Per-row statistics are shaped as the leading dims.
static Tensor rowStats(const Tensor &x) {
  return Tensor::zeros(llvm::ArrayRef<int64_t>(x.shape).drop_back());
}

/// The gamma actually applied: 1 + gamma when stored zero-centered.
static double effectiveGamma(const Tensor &gamma, int64_t i,
                             bool zeroCenteredGamma) {
  return zeroCenteredGamma ? 1.0 + gamma.data[i] : gamma.data[i];
}

NormOutputs tejit::interp::layerNorm(const Tensor &x, const Tensor &gamma,
                                     const Tensor &beta, double eps,
                                     bool zeroCenteredGamma) {
  Rows rows = rowsOf(x);
  NormOutputs result{Tensor::zeros(x.shape), rowStats(x), rowStats(x)};
  for (int64_t r = 0; r < rows.count; ++r) {
    const double *in = x.data.data() + r * rows.width;
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < rows.width; ++i)
      mean += in[i];
    mean /= rows.width;
    for (int64_t i = 0; i < rows.width; ++i)
      var += (in[i] - mean) * (in[i] - mean);
    var /= rows.width;
    double rsigma = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < rows.width; ++i)
      result.output.data[r * rows.width + i] =
          (in[i] - mean) * rsigma *
              effectiveGamma(gamma, i, zeroCenteredGamma) +
          beta.data[i];
    result.mean.data[r] = mean;
    result.rsigma.data[r] = rsigma;
  }
  return result;
}

NormOutputs tejit::interp::rmsNorm(const Tensor &x, const Tensor &gamma,
                                   double eps, bool zeroCenteredGamma) {
  Rows rows = rowsOf(x);
  NormOutputs result{Tensor::zeros(x.shape), Tensor(), rowStats(x)};
  for (int64_t r = 0; r < rows.count; ++r) {
    const double *in = x.data.data() + r * rows.width;
    double meanSquare = 0.0;
    for (int64_t i = 0; i < rows.width; ++i)
      meanSquare += in[i] * in[i];
    meanSquare /= rows.width;
    double rsigma = 1.0 / std::sqrt(meanSquare + eps);
    for (int64_t i = 0; i < rows.width; ++i)
      result.output.data[r * rows.width + i] =
          in[i] * rsigma * effectiveGamma(gamma, i, zeroCenteredGamma);
    result.rsigma.data[r] = rsigma;
  }
  return result;
}

Tensor tejit::interp::normalize(mlir::te::Normalization kind, const Tensor &x,
                                const Tensor &gamma, const Tensor *beta,
                                double eps, bool zeroCenteredGamma) {
  if (kind == mlir::te::Normalization::RMSNorm)
    return rmsNorm(x, gamma, eps, zeroCenteredGamma).output;
  assert(beta && "LayerNorm needs a bias");
  return layerNorm(x, gamma, *beta, eps, zeroCenteredGamma).output;
}

/// Shared by both backwards: with xhat the normalized input and
/// g = grad * gamma', dx = rsigma * (g - [mean(g)] - xhat * mean(g * xhat)),
/// where the bracketed term is LayerNorm's only (`mean` non-null). dgamma
/// sums grad * xhat over the rows (also for a zero-centered gamma), dbeta
/// sums grad.
static NormGrads normBwd(const Tensor &grad, const Tensor &x,
                         const Tensor *mean, const Tensor &rsigma,
                         const Tensor &gamma, bool zeroCenteredGamma) {
  Rows rows = rowsOf(x);
  NormGrads result{Tensor::zeros(x.shape), Tensor::zeros({rows.width}),
                   Tensor::zeros({rows.width})};
  std::vector<double> xhat(rows.width), g(rows.width);
  for (int64_t r = 0; r < rows.count; ++r) {
    int64_t base = r * rows.width;
    double center = mean ? mean->data[r] : 0.0, rs = rsigma.data[r];
    double meanG = 0.0, meanGXhat = 0.0;
    for (int64_t i = 0; i < rows.width; ++i) {
      xhat[i] = (x.data[base + i] - center) * rs;
      g[i] = grad.data[base + i] * effectiveGamma(gamma, i, zeroCenteredGamma);
      meanG += g[i];
      meanGXhat += g[i] * xhat[i];
      result.gamma.data[i] += grad.data[base + i] * xhat[i];
      result.beta.data[i] += grad.data[base + i];
    }
    meanG = mean ? meanG / rows.width : 0.0;
    meanGXhat /= rows.width;
    for (int64_t i = 0; i < rows.width; ++i)
      result.input.data[base + i] = rs * (g[i] - meanG - xhat[i] * meanGXhat);
  }
  return result;
}

NormGrads tejit::interp::layerNormBwd(const Tensor &grad, const Tensor &x,
                                      const Tensor &mean, const Tensor &rsigma,
                                      const Tensor &gamma,
                                      bool zeroCenteredGamma) {
  return normBwd(grad, x, &mean, rsigma, gamma, zeroCenteredGamma);
}

NormGrads tejit::interp::rmsNormBwd(const Tensor &grad, const Tensor &x,
                                    const Tensor &rsigma, const Tensor &gamma,
                                    bool zeroCenteredGamma) {
  NormGrads result =
      normBwd(grad, x, nullptr, rsigma, gamma, zeroCenteredGamma);
  result.beta = Tensor();
  return result;
}
