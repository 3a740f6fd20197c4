//===- HostFp8.h - FP8 values on the host for the GPU checks ----*- C++ -*-===//
//
// Decoding and te.quantize's rounding (nearest, ties to the even code,
// saturating at the largest finite value) of E4M3FN and E5M2, written from
// the formats' definitions so that the checks do not take the runtime's or
// the compiler's word for them.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_GPU_HOSTFP8_H
#define TEJIT_TESTS_GPU_HOSTFP8_H

#include "runtime/Plan.h"

#include <array>
#include <cmath>
#include <cstdint>

namespace tejit::gpucheck {

/// E4M3FN: bias 7, no infinities, 0x7f/0xff NaN.
inline double fromE4M3(uint8_t v) {
  if ((v & 0x7f) == 0x7f)
    return std::nan("");
  int sign = v >> 7, exponent = (v >> 3) & 15, mantissa = v & 7;
  double magnitude = exponent == 0
                         ? std::ldexp(mantissa / 8.0, -6)
                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

/// E5M2: bias 15, IEEE-style infinities and NaNs at exponent 31.
inline double fromE5M2(uint8_t v) {
  int sign = v >> 7, exponent = (v >> 2) & 31, mantissa = v & 3;
  if (exponent == 31)
    return mantissa ? std::nan("") : (sign ? -HUGE_VAL : HUGE_VAL);
  double magnitude = exponent == 0
                         ? std::ldexp(mantissa / 4.0, -14)
                         : std::ldexp(1.0 + mantissa / 4.0, exponent - 15);
  return sign ? -magnitude : magnitude;
}

inline double fromFp8(uint8_t code, runtime::ElementType type) {
  return type == runtime::ElementType::F8E4M3 ? fromE4M3(code) : fromE5M2(code);
}

/// The largest finite value of an FP8 type.
inline float fp8Max(runtime::ElementType type) {
  return type == runtime::ElementType::F8E4M3 ? 448.0f : 57344.0f;
}

/// te.quantize's cast: `value` to the nearest FP8 value of `type`, ties to
/// the even code, saturating at +-fp8Max.
inline uint8_t toFp8(float value, runtime::ElementType type) {
  // The non-negative codes' values, increasing up to the largest finite one
  // (E4M3FN 0x7e, E5M2 0x7b).
  static const auto tables = [] {
    std::array<std::array<double, 128>, 2> values{};
    for (int code = 0; code < 128; ++code) {
      values[0][code] = fromE4M3(uint8_t(code));
      values[1][code] = fromE5M2(uint8_t(code));
    }
    return values;
  }();
  bool e4m3 = type == runtime::ElementType::F8E4M3;
  const std::array<double, 128> &table = tables[e4m3 ? 0 : 1];
  uint8_t largest = e4m3 ? 0x7e : 0x7b;
  uint8_t sign = std::signbit(value) ? 0x80 : 0;
  double magnitude = std::fabs(double(value));
  if (magnitude >= table[largest])
    return sign | largest;
  uint8_t low = 0, high = largest; // table[low] <= magnitude < table[high]
  while (high - low > 1) {
    uint8_t middle = uint8_t((low + high) / 2);
    (table[middle] <= magnitude ? low : high) = middle;
  }
  double below = magnitude - table[low], above = table[high] - magnitude;
  uint8_t code = below < above   ? low
                 : above < below ? high
                                 : (low % 2 == 0 ? low : high);
  return sign | code;
}

} // namespace tejit::gpucheck

#endif // TEJIT_TESTS_GPU_HOSTFP8_H
