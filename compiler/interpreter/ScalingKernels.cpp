//===- ScalingKernels.cpp - FP8 casts, scales and scaled GEMMs ------------===//
//
// The numerics of Transformer Engine's FP8 recipes (shared/FP8.md). Casts and
// GEMMs run in double like the rest of the interpreter; scale bookkeeping runs
// in float32, the way Transformer Engine's kernels compute it, because scales
// must be bit-exact: an amax is first rounded to float32, quotients are
// float32 divisions, and every scale, scale_inv and history entry produced
// here is a float32 value.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Kernels.h"

#include "llvm/ADT/bit.h"

#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

using namespace tejit::interp;

double tejit::interp::castToFp8(double x, double scale, Fp8Kind kind) {
  // As Transformer Engine's kernels (and its bit-exact reference
  // `(x.float() * scale).to(fp8)`) do: the product is rounded to float32
  // first, then to FP8. Rounding once from double differs on rare ties.
  return roundToFp8(
      static_cast<float>(static_cast<float>(x) * static_cast<float>(scale)),
      kind);
}

Tensor tejit::interp::quantize(const Tensor &x, double scale, Fp8Kind kind) {
  Tensor result = x;
  for (double &value : result.data)
    value = castToFp8(value, scale, kind);
  return result;
}

double tejit::interp::absMax(const Tensor &x) {
  double max = 0.0;
  for (double value : x.data) {
    if (std::isnan(value))
      return std::numeric_limits<double>::quiet_NaN();
    max = std::max(max, std::fabs(value));
  }
  return max;
}

/// `scale` rounded down to a power of two by clearing its mantissa bits, as
/// Transformer Engine's power-of-2 scales do (exact for normal floats).
static float maskMantissa(float scale) {
  uint32_t bits = llvm::bit_cast<uint32_t>(scale) & 0xFF800000u;
  return llvm::bit_cast<float>(bits);
}

Tensor tejit::interp::dequantize(const Tensor &x, double scaleInv) {
  Tensor result = x;
  for (double &value : result.data)
    value *= scaleInv;
  return result;
}

Fp8Scale tejit::interp::currentScale(double amax, Fp8Kind kind, bool power2) {
  // Transformer Engine's compute_scale_from_amax with amax_epsilon 0: amax is
  // a float32 (a double amax below the float32 range reads as 0 and one above
  // it as inf), a negative amax is floored to 0, and 0, inf and NaN give 1.
  float floatAmax = static_cast<float>(amax);
  float scale = 1.0f;
  if (std::isfinite(floatAmax) && floatAmax > 0.0f) {
    scale = static_cast<float>(fp8MaxFinite(kind)) / floatAmax;
    if (std::isinf(scale))
      scale = FLT_MAX;
    // Masking after the FLT_MAX substitution, as TE does: FLT_MAX -> 2^127.
    if (power2)
      scale = maskMantissa(scale);
  }
  return {scale, 1.0f / scale};
}

Tensor tejit::interp::scaledMatmul(const Tensor &a, const Tensor &b,
                                   double aScaleInv, double bScaleInv) {
  // Dequantizing is exact (an FP8 significand times an f32 one fits in a
  // double), so this is the float64 GEMM of the dequantized operands. It
  // models neither the f32 accumulator nor fast_accum: the reference is the
  // exact product, which FP8 GEMMs are compared with under FP8.md's
  // tolerances.
  return matmul(dequantize(a, aScaleInv), dequantize(b, bScaleInv),
                /*transposeA=*/false, /*transposeB=*/true);
}

//===----------------------------------------------------------------------===//
// DelayedScaling
//
// Transformer Engine's amax-and-scale update kernel, one slot at a time, with
// this step's amax taken from the `amaxes` operand instead of history row 0:
// - Every operand is float32 state and is read as float32; all results are
//   float32 values. In particular an amax is zero when it is zero as a
//   float32 (a double amax below half the smallest subnormal counts as 0).
// - Row 0 of the incoming history is never read: in TE it holds this step's
//   amax, which here comes from `amaxes`, and every update leaves it 0.
// - amax == 0: nothing was recorded; history and scale are returned as read.
// - Otherwise the window is rows 1..len-1 and the amax. "max" reduces it the
//   way TE's kernel does, with CUDA's fmaxf starting from 0: a NaN entry
//   never wins (fmax returns the other operand), an inf one always does. So
//   a NaN amax keeps the scale under "most_recent", and under "max" when the
//   rest of the window is empty or 0, but other window entries still set the
//   scale under "max"; the NaN stays in the history like any other amax.
// - The history shifts up by one, the amax written last and row 0 cleared.
//   With len == 1 the single row is both: clearing wins, as in TE's kernel
//   (`history[i] = i > 0 ? entry : 0`), so the history stays [0] and the
//   window is the amax alone.
// - scale = scaled_max / amax in float32, scaled_max = fp8_max * 2^-margin
//   in float32 (TE: fp8_max * powf(2, -margin)), when amax is finite and > 0;
//   FLT_MAX when the quotient is +inf; otherwise the old scale, unchanged
//   (TE's kernel would also turn an incoming +inf scale into FLT_MAX; the op
//   keeps it, and the update itself never produces one).
// - scale_inv = 1 / scale in float32 for every slot, updated or not.
//===----------------------------------------------------------------------===//

namespace {
/// One slot's column of a row-major [len, slots] amax history.
class HistoryColumn {
public:
  HistoryColumn(Tensor &history, int64_t slot)
      : data(history.data), slot(slot), slots(history.shape[1]),
        length(history.shape[0]) {}

  double &operator[](int64_t row) { return data[row * slots + slot]; }
  int64_t size() const { return length; }

private:
  std::vector<double> &data;
  int64_t slot, slots, length;
};
} // namespace

/// `x` with every element rounded to float32.
static Tensor toFloat32(Tensor x) {
  for (double &value : x.data)
    value = static_cast<float>(value);
  return x;
}

/// Shifts `column` up by one, `amax` written last and row 0 cleared; returns
/// the fmax-reduction (from 0) of the window: rows 1..len-1 and `amax`.
static float rollHistory(HistoryColumn column, float amax) {
  int64_t length = column.size();
  float windowMax = 0.0f;
  for (int64_t row = 0; row < length; ++row) {
    // Row `row` receives the (not yet shifted) row below it; the last row
    // receives this step's amax.
    float entry = row + 1 < length ? static_cast<float>(column[row + 1]) : amax;
    windowMax = std::fmax(windowMax, entry);
    column[row] = row > 0 ? entry : 0.0f;
  }
  return windowMax;
}

/// The scale DelayedScaling derives from `amax`, or `oldScale` when amax is
/// 0, negative, inf or NaN.
static float delayedScale(float amax, float scaledMax, float oldScale) {
  if (!(std::isfinite(amax) && amax > 0.0f))
    return oldScale;
  float scale = scaledMax / amax;
  return std::isinf(scale) ? FLT_MAX : scale;
}

DelayedScalingState
tejit::interp::delayedScalingUpdate(const Tensor &amaxHistory,
                                    const Tensor &scale, const Tensor &amaxes,
                                    const DelayedScalingParams &params) {
  assert(amaxHistory.shape.size() == 2 && amaxes.shape.size() == 1 &&
         amaxHistory.shape[1] == amaxes.shape[0] &&
         scale.shape == amaxes.shape && "meta state shapes differ");
  DelayedScalingState state{toFloat32(amaxHistory), toFloat32(scale),
                            Tensor::zeros(scale.shape)};
  float scaledMax = static_cast<float>(fp8MaxFinite(params.kind)) *
                    std::pow(2.0f, -static_cast<float>(params.margin));
  for (int64_t slot = 0; slot < amaxes.shape[0]; ++slot) {
    float amax = static_cast<float>(amaxes.data[slot]);
    float newScale = static_cast<float>(state.scale.data[slot]);
    if (amax != 0.0f) {
      float windowMax = rollHistory({state.amaxHistory, slot}, amax);
      newScale = delayedScale(params.mostRecent ? amax : windowMax, scaledMax,
                              newScale);
    }
    state.scale.data[slot] = newScale;
    state.scaleInv.data[slot] = 1.0f / newScale;
  }
  return state;
}
