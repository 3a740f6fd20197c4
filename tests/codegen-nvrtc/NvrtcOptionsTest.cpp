//===- NvrtcOptionsTest.cpp - NVRTC target choice and option lists --------===//
//
// The pure halves of the driver, with made-up NVRTC arch lists: which arch a
// GPU gets code for, and the option list the kernel cache hashes.
//
//===----------------------------------------------------------------------===//
#include "codegen/NvrtcCompiler.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

using namespace tejit::codegen;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {
/// An NVRTC older than Blackwell.
const int hopperNvrtc[] = {75, 80, 86, 87, 89, 90};

NvrtcTarget expectTarget(llvm::StringRef arch, llvm::ArrayRef<int> archs) {
  llvm::Expected<NvrtcTarget> target = selectTarget(arch, archs);
  if (!target) {
    ADD_FAILURE() << llvm::toString(target.takeError());
    return {};
  }
  return *target;
}

std::string targetError(llvm::StringRef arch, llvm::ArrayRef<int> archs) {
  llvm::Expected<NvrtcTarget> target = selectTarget(arch, archs);
  if (target) {
    ADD_FAILURE() << arch.str() << " gave target " << target->arch;
    return "";
  }
  return llvm::toString(target.takeError());
}

std::vector<std::string> options(llvm::ArrayRef<std::string> extra) {
  llvm::Expected<std::vector<std::string>> list =
      normalizedOptions("sm_90a", extra);
  if (!list) {
    ADD_FAILURE() << llvm::toString(list.takeError());
    return {};
  }
  return *list;
}

std::string optionsError(llvm::ArrayRef<std::string> extra) {
  llvm::Expected<std::vector<std::string>> list =
      normalizedOptions("sm_90a", extra);
  if (list) {
    ADD_FAILURE() << "options accepted";
    return "";
  }
  return llvm::toString(list.takeError());
}
} // namespace

TEST(NvrtcTarget, SupportedArchGetsCubinWithItsSuffix) {
  NvrtcTarget hopper = expectTarget("sm_90a", hopperNvrtc);
  EXPECT_EQ(hopper.arch, "sm_90a");
  EXPECT_TRUE(hopper.isCubin);
  NvrtcTarget ada = expectTarget("sm_89", hopperNvrtc);
  EXPECT_EQ(ada.arch, "sm_89");
  EXPECT_TRUE(ada.isCubin);
}

TEST(NvrtcTarget, NewerGpuGetsGenericPtxOfNewestOlderArch) {
  // Blackwell on an NVRTC that stops at Hopper: compute_90, never
  // compute_90a, whose PTX would not run on sm_100.
  NvrtcTarget blackwell = expectTarget("sm_100a", hopperNvrtc);
  EXPECT_EQ(blackwell.arch, "compute_90");
  EXPECT_FALSE(blackwell.isCubin);
  // An arch between two supported ones falls back to the lower.
  NvrtcTarget gap = expectTarget("sm_88", hopperNvrtc);
  EXPECT_EQ(gap.arch, "compute_87");
  EXPECT_FALSE(gap.isCubin);
}

TEST(NvrtcTarget, ArchOlderThanNvrtcSupportsIsAnError) {
  std::string message = targetError("sm_70", hopperNvrtc);
  EXPECT_THAT(message, HasSubstr("NVRTC cannot compile for sm_70"));
  EXPECT_THAT(message, HasSubstr("sm_75, sm_80, sm_86, sm_87, sm_89, sm_90"));
}

TEST(NvrtcTarget, MalformedArchIsAnError) {
  for (const char *arch : {"", "sm_", "sm_90x", "compute_90", "gfx90a", "90"})
    EXPECT_THAT(targetError(arch, hopperNvrtc),
                HasSubstr("is not a device arch"))
        << arch;
}

TEST(NvrtcOptions, FixedOptionsComeFirst) {
  EXPECT_THAT(options({}), ElementsAre("-arch=sm_90a", "--std=c++17",
                                       "--fmad=true", "--ftz=false",
                                       "--prec-div=true", "--prec-sqrt=true"));
  llvm::Expected<std::vector<std::string>> ptx =
      normalizedOptions("compute_90", {});
  ASSERT_TRUE(static_cast<bool>(ptx)) << llvm::toString(ptx.takeError());
  EXPECT_EQ(ptx->front(), "-arch=compute_90");
}

TEST(NvrtcOptions, OrderFreeOptionsAreSortedAndDeduplicated) {
  std::vector<std::string> a =
      options({"-lineinfo", "--use_fast_math", "-DN=4", "-lineinfo"});
  std::vector<std::string> b =
      options({"-DN=4", "--use_fast_math", "-lineinfo"});
  EXPECT_EQ(a, b);
  EXPECT_THAT(std::vector<std::string>(a.begin() + 6, a.end()),
              ElementsAre("--use_fast_math", "-DN=4", "-lineinfo"));
}

TEST(NvrtcOptions, LastDefinitionOfAMacroWins) {
  std::vector<std::string> list = options({"-DN=1", "-DM", "-DN=2"});
  EXPECT_THAT(std::vector<std::string>(list.begin() + 6, list.end()),
              ElementsAre("-DM", "-DN=2"));
  list = options({"-DN=1", "-UN"});
  EXPECT_THAT(std::vector<std::string>(list.begin() + 6, list.end()),
              ElementsAre("-UN"));
}

TEST(NvrtcOptions, IncludePathsKeepTheirOrderAtTheEnd) {
  std::vector<std::string> list =
      options({"-I/z", "-lineinfo", "--include-path=/a", "-I/m"});
  EXPECT_THAT(std::vector<std::string>(list.begin() + 6, list.end()),
              ElementsAre("-lineinfo", "-I/z", "--include-path=/a", "-I/m"));
}

TEST(NvrtcOptions, DriverOwnedOptionsAreRejected) {
  for (const char *option :
       {"-arch=sm_80", "--gpu-architecture=sm_80", "-std=c++20", "--std=c++14"})
    EXPECT_THAT(optionsError({option}), HasSubstr("is set by the compiler"))
        << option;
}

TEST(NvrtcOptions, DetachedValuesAreRejected) {
  EXPECT_THAT(optionsError({"-I", "/usr/include"}),
              HasSubstr("'/usr/include' does not start with '-'"));
}
