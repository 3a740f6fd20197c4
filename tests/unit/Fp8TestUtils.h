//===- Fp8TestUtils.h - host models of FP8 for tests ------------*- C++ -*-===//
//
// What the FP8 op tests compare the interpreter with, written from
// shared/FP8.md and not from the interpreter's kernels: the FP8 values
// decoded from their bit patterns, nearest-value rounding over that table,
// float32 quotients, and a fixture drawing random magnitudes and FP8 values.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_UNIT_FP8TESTUTILS_H
#define TEJIT_TESTS_UNIT_FP8TESTUTILS_H

#include "InterpreterTestUtils.h"

#include "compiler/interpreter/Fp8.h"

#include <limits>
#include <random>
#include <vector>

namespace tejit::testing {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// An FP8 element type as the IR spells it, and its largest finite value.
struct Fp8Type {
  const char *name;
  interp::Fp8Kind kind;
  double max;
};

inline const Fp8Type kE4M3{"f8E4M3FN", interp::Fp8Kind::E4M3, 448.0};
inline const Fp8Type kE5M2{"f8E5M2", interp::Fp8Kind::E5M2, 57344.0};

/// The non-negative finite values of `kind`, increasing, decoded from codes
/// 0, 1, ... (so a value's index is its code: the NaN/inf codes come last).
inline std::vector<double> fp8Values(interp::Fp8Kind kind) {
  bool e4m3 = kind == interp::Fp8Kind::E4M3;
  int mantissaBits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  std::vector<double> values;
  for (int bits = 0; bits < 0x80; ++bits) {
    int mantissa = bits & ((1 << mantissaBits) - 1);
    int exponent = bits >> mantissaBits;
    if ((e4m3 && bits == 0x7F) || (!e4m3 && exponent == 0x1F))
      break;
    values.push_back(exponent == 0
                         ? std::ldexp(mantissa, 1 - bias - mantissaBits)
                         : std::ldexp((1 << mantissaBits) + mantissa,
                                      exponent - bias - mantissaBits));
  }
  return values;
}

/// `x` rounded to the nearest entry of `table` (fp8Values), ties to the even
/// code, saturating at the largest; NaN stays NaN.
inline double nearestFp8(const std::vector<double> &table, double x) {
  double magnitude = std::fabs(x);
  if (std::isnan(x) || magnitude == 0.0)
    return x;
  if (magnitude >= table.back())
    return std::copysign(table.back(), x);
  size_t hi =
      std::lower_bound(table.begin(), table.end(), magnitude) - table.begin();
  // lo <= magnitude < up <= 2 lo: both distances are exact.
  double lo = table[hi - 1], up = table[hi];
  double pick = magnitude - lo < up - magnitude   ? lo
                : up - magnitude < magnitude - lo ? up
                : hi % 2 == 0                     ? up
                                                  : lo;
  return std::copysign(pick, x);
}

/// A one-element f32 meta slot.
inline Tensor slot(double value) { return Tensor({1}, {value}); }

/// Whether `value` is a float32 value.
inline bool isFloat32(double value) {
  return std::isnan(value) || double(float(value)) == value;
}

/// A float32 quotient a / b, from the double quotient rounded once more
/// (double rounding is innocuous for division from 53 to 24 bits).
inline float floatQuotient(double a, double b) { return float(a / b); }

/// The largest power of two <= x (x > 0 finite), from frexp, not bit masks.
inline double powerOfTwoBelow(double x) {
  int exponent;
  std::frexp(x, &exponent);
  return std::ldexp(1.0, exponent - 1);
}

/// The FP8 op tests' fixture: random magnitudes and FP8 values from `rng`.
class InterpreterFp8OpsTest : public InterpreterTest {
protected:
  /// A random double of magnitude 2^U(lo, hi) and random sign.
  double logUniform(double lo, double hi, bool signed_ = true) {
    std::uniform_real_distribution<double> exponent(lo, hi);
    double value = std::exp2(exponent(rng));
    return signed_ && std::bernoulli_distribution(0.5)(rng) ? -value : value;
  }

  /// A random FP8 value of `kind` (any finite code, either sign).
  double randomFp8(interp::Fp8Kind kind) {
    static const std::vector<double> tables[2] = {
        fp8Values(interp::Fp8Kind::E4M3), fp8Values(interp::Fp8Kind::E5M2)};
    const std::vector<double> &table = tables[kind == interp::Fp8Kind::E5M2];
    std::uniform_int_distribution<size_t> index(0, table.size() - 1);
    double value = table[index(rng)];
    return std::bernoulli_distribution(0.5)(rng) ? -value : value;
  }
};

} // namespace tejit::testing

#endif // TEJIT_TESTS_UNIT_FP8TESTUTILS_H
