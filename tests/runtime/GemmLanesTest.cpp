//===- GemmLanesTest.cpp - how many side streams grouped GEMMs use --------===//
#include "runtime/GemmLanes.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace tejit::runtime;

namespace {

// TEJIT_GROUPED_GEMM_STREAMS: 4 by default or when unreadable, none for 0
// or 1, at most 16.
TEST(GemmLanesTest, CountFromTheEnvironment) {
  const char *name = "TEJIT_GROUPED_GEMM_STREAMS";
  const char *saved = std::getenv(name);
  std::string kept = saved ? saved : "";
  unsetenv(name);
  EXPECT_EQ(GemmLanes::configuredCount(), 4u);
  const std::pair<const char *, size_t> cases[] = {
      {"0", 0}, {"1", 0}, {"2", 2}, {"8", 8}, {"99", 16}, {"many", 4}, {"", 4}};
  for (auto [text, want] : cases) {
    setenv(name, text, 1);
    EXPECT_EQ(GemmLanes::configuredCount(), want) << "'" << text << "'";
  }
  if (saved)
    setenv(name, kept.c_str(), 1);
  else
    unsetenv(name);
}

// Without a CUDA driver the lanes are not made, and say why.
TEST(GemmLanesTest, NoDriverIsAnError) {
  auto lanes = GemmLanes::create(2, 1 << 20);
  if (lanes) {
    GTEST_SKIP() << "a CUDA driver is present";
  }
  std::string message = llvm::toString(lanes.takeError());
  EXPECT_NE(message.find("CUDA"), std::string::npos) << message;
}

} // namespace
