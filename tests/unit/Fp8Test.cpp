//===- Fp8Test.cpp - exhaustive tests of the FP8 rounding emulation -------===//
//
// The expected values come from decoding every FP8 bit pattern, not from
// the rounding code: each representable value must map to itself, every
// midpoint must round to the neighbour with the even code, and random values
// must round to the nearest entry of the decoded table.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Fp8.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace tejit::interp;

namespace {

/// A decoded FP8 code.
struct Code {
  unsigned bits;
  double value;
};

/// Decodes FP8 `bits` (sign, exponent, mantissa) from the format's layout:
/// E4M3FN has no infinities and only S.1111.111 as NaN; E5M2 is IEEE-like.
double decode(unsigned bits, Fp8Kind kind) {
  int mantissaBits = kind == Fp8Kind::E4M3 ? 3 : 2;
  int bias = kind == Fp8Kind::E4M3 ? 7 : 15;
  unsigned exponentMask = kind == Fp8Kind::E4M3 ? 0xF : 0x1F;
  unsigned mantissa = bits & ((1u << mantissaBits) - 1);
  unsigned exponent = (bits >> mantissaBits) & exponentMask;
  double sign = (bits & 0x80) ? -1.0 : 1.0;
  if (kind == Fp8Kind::E4M3 && exponent == 0xF && mantissa == 0x7)
    return std::numeric_limits<double>::quiet_NaN();
  if (kind == Fp8Kind::E5M2 && exponent == 0x1F)
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  double fraction = double(mantissa) / (1 << mantissaBits);
  if (exponent == 0)
    return sign * std::ldexp(fraction, 1 - bias);
  return sign * std::ldexp(1.0 + fraction, int(exponent) - bias);
}

/// The non-negative finite codes of `kind`, in increasing order.
std::vector<Code> positiveCodes(Fp8Kind kind) {
  std::vector<Code> codes;
  for (unsigned bits = 0; bits < 0x80; ++bits) {
    double value = decode(bits, kind);
    if (std::isfinite(value))
      codes.push_back({bits, value});
  }
  return codes;
}

/// The entry of `codes` nearest to `x >= 0`, ties to the even code, values
/// above the largest saturating to it.
double nearest(const std::vector<Code> &codes, double x) {
  const Code *best = &codes.front();
  for (const Code &code : codes) {
    double distance = std::fabs(code.value - x);
    double bestDistance = std::fabs(best->value - x);
    if (distance < bestDistance ||
        (distance == bestDistance && code.bits % 2 == 0))
      best = &code;
  }
  return best->value;
}

class Fp8Test : public ::testing::TestWithParam<Fp8Kind> {};

} // namespace

TEST(Fp8DecodeTest, TableMatchesTheFormats) {
  EXPECT_EQ(positiveCodes(Fp8Kind::E4M3).size(), 127u);
  EXPECT_EQ(positiveCodes(Fp8Kind::E5M2).size(), 124u);
  EXPECT_EQ(positiveCodes(Fp8Kind::E4M3).back().value, 448.0);
  EXPECT_EQ(positiveCodes(Fp8Kind::E5M2).back().value, 57344.0);
  EXPECT_EQ(positiveCodes(Fp8Kind::E4M3)[1].value, std::ldexp(1.0, -9));
  EXPECT_EQ(positiveCodes(Fp8Kind::E5M2)[1].value, std::ldexp(1.0, -16));
  EXPECT_EQ(fp8MaxFinite(Fp8Kind::E4M3), 448.0);
  EXPECT_EQ(fp8MaxFinite(Fp8Kind::E5M2), 57344.0);
}

TEST_P(Fp8Test, EveryRepresentableValueMapsToItself) {
  int finite = 0;
  for (unsigned bits = 0; bits < 0x100; ++bits) {
    double value = decode(bits, GetParam());
    if (!std::isfinite(value))
      continue;
    ++finite;
    double rounded = roundToFp8(value, GetParam());
    EXPECT_EQ(rounded, value) << "code 0x" << std::hex << bits;
    EXPECT_EQ(std::signbit(rounded), std::signbit(value));
  }
  EXPECT_EQ(finite, GetParam() == Fp8Kind::E4M3 ? 254 : 248);
}

TEST_P(Fp8Test, MidpointsRoundToEvenAndNeighboursToNearest) {
  std::vector<Code> codes = positiveCodes(GetParam());
  for (size_t i = 0; i + 1 < codes.size(); ++i) {
    const Code &lo = codes[i], &hi = codes[i + 1];
    double mid = 0.5 * (lo.value + hi.value);
    double even = lo.bits % 2 == 0 ? lo.value : hi.value;
    for (double sign : {1.0, -1.0}) {
      EXPECT_EQ(roundToFp8(sign * mid, GetParam()), sign * even)
          << "midpoint " << sign * mid;
      EXPECT_EQ(roundToFp8(sign * std::nextafter(mid, 0.0), GetParam()),
                sign * lo.value);
      EXPECT_EQ(roundToFp8(sign * std::nextafter(mid, 1e9), GetParam()),
                sign * hi.value);
    }
  }
}

TEST_P(Fp8Test, RandomValuesRoundToTheNearestTableEntry) {
  std::vector<Code> codes = positiveCodes(GetParam());
  std::mt19937_64 rng(7);
  // Log-uniform magnitudes from far below the subnormals to above the max.
  std::uniform_real_distribution<double> exponent(-20.0, 17.0);
  for (int i = 0; i < 100000; ++i) {
    double x = std::exp2(exponent(rng));
    double expected = nearest(codes, x);
    ASSERT_EQ(roundToFp8(x, GetParam()), expected) << "x = " << x;
    ASSERT_EQ(roundToFp8(-x, GetParam()), -expected) << "x = " << -x;
  }
}

TEST_P(Fp8Test, SaturatesToMaxFinite) {
  double max = fp8MaxFinite(GetParam());
  // The first value above max (as if the format continued) and beyond.
  double step = GetParam() == Fp8Kind::E4M3 ? 32.0 : 8192.0;
  for (double x :
       {std::nextafter(max, 1e300), max + step / 2, max + step, max * 1000,
        1e300, std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(roundToFp8(x, GetParam()), max) << x;
    EXPECT_EQ(roundToFp8(-x, GetParam()), -max) << -x;
  }
}

TEST_P(Fp8Test, UnderflowsToSignedZeroBelowHalfTheSmallestSubnormal) {
  double tiny = positiveCodes(GetParam())[1].value;
  for (double sign : {1.0, -1.0}) {
    double zero = roundToFp8(sign * tiny / 2, GetParam());
    EXPECT_EQ(zero, 0.0); // A tie: 0 has the even code.
    EXPECT_EQ(std::signbit(zero), sign < 0);
    EXPECT_EQ(roundToFp8(sign * std::nextafter(tiny / 2, 1.0), GetParam()),
              sign * tiny);
    EXPECT_EQ(roundToFp8(sign * 1e-300, GetParam()), 0.0);
    EXPECT_EQ(std::signbit(roundToFp8(sign * 0.0, GetParam())), sign < 0);
  }
}

TEST_P(Fp8Test, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(
      roundToFp8(std::numeric_limits<double>::quiet_NaN(), GetParam())));
  EXPECT_TRUE(std::isnan(
      roundToFp8(-std::numeric_limits<double>::quiet_NaN(), GetParam())));
}

TEST(Fp8SpotTest, KnownRoundings) {
  // E4M3 around 1: spacing 1/8. 1.0625 is a tie -> 1.0 (even); 1.1875 is a
  // tie -> 1.25 (code ...010, even). Near the max: 464 is the tie between
  // 448 and (non-existent) 480, which saturates anyway.
  EXPECT_EQ(roundToFp8(1.0625, Fp8Kind::E4M3), 1.0);
  EXPECT_EQ(roundToFp8(1.1875, Fp8Kind::E4M3), 1.25);
  EXPECT_EQ(roundToFp8(300.0, Fp8Kind::E4M3), 288.0);
  EXPECT_EQ(roundToFp8(464.0, Fp8Kind::E4M3), 448.0);
  // E5M2 around 1: spacing 1/4; 1.125 ties to 1.0, 1.375 to 1.5.
  EXPECT_EQ(roundToFp8(1.125, Fp8Kind::E5M2), 1.0);
  EXPECT_EQ(roundToFp8(1.375, Fp8Kind::E5M2), 1.5);
  EXPECT_EQ(roundToFp8(0.3, Fp8Kind::E5M2), 0.3125);
  EXPECT_EQ(roundToFp8(60000.0, Fp8Kind::E5M2), 57344.0);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test,
                         ::testing::Values(Fp8Kind::E4M3, Fp8Kind::E5M2),
                         [](const ::testing::TestParamInfo<Fp8Kind> &info) {
                           return info.param == Fp8Kind::E4M3 ? "E4M3" : "E5M2";
                         });
