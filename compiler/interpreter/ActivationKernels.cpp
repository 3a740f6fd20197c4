//===- ActivationKernels.cpp - MLP activations and their gradients --------===//
#include "compiler/interpreter/Kernels.h"

#include "llvm/Support/MathExtras.h"

#include <cassert>
#include <cmath>

using namespace tejit::interp;
using mlir::te::Activation;
using mlir::te::ActivationParams;

namespace {
/// An elementwise activation: its value and its derivative at `x`.
struct Scalar {
  double value, derivative;
};
} // namespace

static double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
static Scalar gelu(double x) {
  const double c = std::sqrt(2.0 / llvm::numbers::pi), a = 0.044715;
  double t = std::tanh(c * (x + a * x * x * x));
  return {0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c *
                                                     (1.0 + 3.0 * a * x * x)};
}

/// x sigmoid(k x): qgelu with k = 1.702, silu with k = 1.
static Scalar xSigmoid(double x, double k) {
  double s = sigmoid(k * x);
  return {x * s, s + k * x * s * (1.0 - s)};
}

static Scalar relu(double x) {
  return x > 0.0 ? Scalar{x, 1.0} : Scalar{0.0, 0.0};
}

/// relu(x)^2.
static Scalar squaredRelu(double x) {
  return x > 0.0 ? Scalar{x * x, 2.0 * x} : Scalar{0.0, 0.0};
}

/// clamped_swiglu's first half: x sigmoid(alpha x) of a' = min(a, limit).
/// The clamp passes no gradient where it clamps (a > limit); at a = limit
/// it passes it, as Transformer Engine's kernels take the derivative for
/// a <= limit. fmin, like the device's fminf, turns a NaN into the limit.
static Scalar clampedSilu(double a, const ActivationParams &params) {
  Scalar f = xSigmoid(std::fmin(a, params.limit), params.alpha);
  if (!(a <= params.limit))
    f.derivative = 0.0;
  return f;
}

/// The elementwise function of `kind` (a gated one's applies to its first
/// half).
static Scalar evaluate(Activation kind, double x,
                       const ActivationParams &params) {
  switch (kind) {
  case Activation::gelu:
  case Activation::geglu:
    return gelu(x);
  case Activation::qgelu:
  case Activation::qgeglu:
    return xSigmoid(x, 1.702);
  case Activation::relu:
  case Activation::reglu:
    return relu(x);
  case Activation::srelu:
  case Activation::sreglu:
    return squaredRelu(x);
  case Activation::silu:
  case Activation::swiglu:
    return xSigmoid(x, 1.0);
  case Activation::clamped_swiglu:
    return clampedSilu(x, params);
  }
  llvm_unreachable("unknown activation");
}

/// What a gated activation multiplies by, from the second half's `b`: b
/// itself, or clamped_swiglu's clamp(b, -limit, limit) + offset (no
/// gradient where it clamps, |b| > limit; at |b| = limit it passes).
static Scalar linearHalf(Activation kind, double b,
                         const ActivationParams &params) {
  if (kind != Activation::clamped_swiglu)
    return {b, 1.0};
  bool inside = b >= -params.limit && b <= params.limit;
  return {std::fmax(-params.limit, std::fmin(b, params.limit)) + params.offset,
          inside ? 1.0 : 0.0};
}

/// The output width of `kind` on `width` input channels.
static int64_t outputWidth(Activation kind, int64_t width) {
  return mlir::te::isGatedActivation(kind) ? width / 2 : width;
}

Tensor tejit::interp::activation(const Tensor &x, Activation kind,
                                 const ActivationParams &params) {
  int64_t width = x.shape.back(), out = outputWidth(kind, width);
  bool gated = mlir::te::isGatedActivation(kind);
  llvm::SmallVector<int64_t> shape(x.shape);
  shape.back() = out;
  Tensor result = Tensor::zeros(shape);
  for (int64_t row = 0, rows = x.numElements() / width; row < rows; ++row)
    for (int64_t i = 0; i < out; ++i) {
      const double *in = x.data.data() + row * width;
      double gate = gated ? linearHalf(kind, in[out + i], params).value : 1.0;
      result.data[row * out + i] = evaluate(kind, in[i], params).value * gate;
    }
  return result;
}

Tensor tejit::interp::activationGrad(const Tensor &grad, const Tensor &x,
                                     Activation kind,
                                     const ActivationParams &params) {
  int64_t width = x.shape.back(), out = outputWidth(kind, width);
  bool gated = mlir::te::isGatedActivation(kind);
  assert(grad.numElements() * width == x.numElements() * out);
  Tensor result = Tensor::zeros(x.shape);
  for (int64_t row = 0, rows = x.numElements() / width; row < rows; ++row)
    for (int64_t i = 0; i < out; ++i) {
      const double *in = x.data.data() + row * width;
      double *dx = result.data.data() + row * width;
      double dy = grad.data[row * out + i];
      Scalar f = evaluate(kind, in[i], params);
      if (!gated) {
        dx[i] = dy * f.derivative;
        continue;
      }
      // y = f(a) g(b): da = dy f'(a) g(b), db = dy f(a) g'(b).
      Scalar g = linearHalf(kind, in[out + i], params);
      dx[i] = dy * f.derivative * g.value;
      dx[out + i] = dy * f.value * g.derivative;
    }
  return result;
}
