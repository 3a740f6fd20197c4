//===- Fp8.cpp - bit-exact emulation of FP8 conversions -------------------===//
#include "compiler/interpreter/Fp8.h"

#include <algorithm>
#include <cmath>

using namespace tejit::interp;

namespace {
/// What a format's rounding needs: its mantissa bits and the exponent of its
/// smallest normal value.
struct Fp8Layout {
  int mantissaBits;
  int minNormalExponent;
  double maxFinite;
};
} // namespace

static Fp8Layout layoutOf(Fp8Kind kind) {
  // E4M3: bias 7, max 1.75 * 2^8 (1.875 * 2^8 is NaN). E5M2: bias 15,
  // max 1.75 * 2^15 (the exponent 16 encodes infinities).
  if (kind == Fp8Kind::E4M3)
    return {3, -6, 448.0};
  return {2, -14, 57344.0};
}

double tejit::interp::fp8MaxFinite(Fp8Kind kind) {
  return layoutOf(kind).maxFinite;
}

double tejit::interp::roundToFp8(double x, Fp8Kind kind) {
  if (std::isnan(x) || x == 0.0)
    return x;
  Fp8Layout layout = layoutOf(kind);
  double magnitude = std::fabs(x);
  if (magnitude >= layout.maxFinite)
    return std::copysign(layout.maxFinite, x);
  // The spacing of representable values around `magnitude`: 2^(e - m) in
  // binade [2^e, 2^(e+1)), and the subnormal spacing below the normals.
  int exponent;
  std::frexp(magnitude, &exponent); // magnitude = f * 2^exponent, f in [.5, 1)
  int binade = std::max(exponent - 1, layout.minNormalExponent);
  double ulp = std::ldexp(1.0, binade - layout.mantissaBits);
  // Scaling by a power of two is exact; nearbyint rounds ties to even under
  // the default rounding mode, and an even multiple of the ulp has an even
  // last mantissa bit (rounding up into the next binade gives a power of 2).
  double rounded = std::nearbyint(magnitude / ulp) * ulp;
  return std::copysign(std::min(rounded, layout.maxFinite), x);
}
