//===- GemmSizeClassTest.cpp - size classes of varying GEMM dims ----------===//
#include "runtime/Gemm.h"

#include <gtest/gtest.h>

#include <random>

using namespace tejit::runtime;

namespace {

// The classes: 16 and below, then powers of two and their midpoints.
TEST(GemmSizeClassTest, PowersOfTwoAndMidpoints) {
  const std::pair<int64_t, int64_t> cases[] = {
      {1, 16},      {16, 16},     {17, 24},     {24, 24},
      {25, 32},     {32, 32},     {33, 48},     {48, 48},
      {49, 64},     {300, 384},   {384, 384},   {385, 512},
      {2048, 2048}, {2049, 3072}, {3072, 3072}, {3073, 4096}};
  for (auto [size, want] : cases)
    EXPECT_EQ(gemmSizeClass(size), want) << size;
}

// On fresh sizes: a class is at least the size, less than twice it, and
// never below the class of a smaller size (monotone), so one class covers a
// contiguous range of sizes.
TEST(GemmSizeClassTest, CoversTheSizeAndIsMonotone) {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> size(17, int64_t(1) << 40);
  for (int i = 0; i < 10000; ++i) {
    int64_t a = size(rng), b = size(rng);
    if (a > b)
      std::swap(a, b);
    int64_t classOfA = gemmSizeClass(a);
    EXPECT_GE(classOfA, a);
    EXPECT_LT(classOfA, 2 * a);
    EXPECT_LE(classOfA, gemmSizeClass(b)) << a << " " << b;
    EXPECT_EQ(gemmSizeClass(classOfA), classOfA) << a;
  }
}

} // namespace
