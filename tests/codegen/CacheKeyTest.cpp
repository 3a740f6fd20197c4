//===- CacheKeyTest.cpp - the cache key follows every input ---------------===//
//
// Changing any input that can change the binary must change the digest;
// nothing else may. The digest is pinned once so that an accidental change
// of the hashing scheme (which would orphan every user's cache) is noticed.
//
//===----------------------------------------------------------------------===//
#include "CacheTestUtils.h"

#include "codegen/BuildId.h"

#include <set>

using namespace tejit::codegen;
using namespace tejit::codegen::testing;

namespace {

TEST(CacheKeyTest, DigestIsStableHex) {
  KernelCacheKey key = makeKey("__global__ void k() {}");
  std::string digest = key.digest();
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_EQ(digest.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(digest, makeKey("__global__ void k() {}").digest());
}

TEST(CacheKeyTest, EachInputChangesTheDigest) {
  KernelCacheKey base = makeKey("__global__ void k() {}");
  std::vector<KernelCacheKey> variants(9, base);
  variants[0].source += " ";
  variants[1].options[0] = "--gpu-architecture=sm_89";
  variants[2].options[1] = "-std=c++20";
  variants[3].options.push_back("-lineinfo");
  variants[4].options = {base.options[1], base.options[0]};
  variants[5].nvrtcVersion = "12.5";
  variants[6].arch = "sm_90";
  variants[7].buildId = "other-build";
  variants[8].options = {"--gpu-architecture=sm_90a -std=c++17"};
  std::set<std::string> digests = {base.digest()};
  for (const KernelCacheKey &variant : variants)
    digests.insert(variant.digest());
  EXPECT_EQ(digests.size(), variants.size() + 1);
}

TEST(CacheKeyTest, FieldBoundariesMatter) {
  KernelCacheKey a = makeKey("x"), b = makeKey("x");
  a.nvrtcVersion = "12.4sm";
  a.arch = "_90a";
  b.nvrtcVersion = "12.4";
  b.arch = "sm_90a";
  EXPECT_NE(a.digest(), b.digest());
  a = b;
  a.options = {"-ab"};
  b.options = {"-a", "b"};
  EXPECT_NE(a.digest(), b.digest());
}

TEST(CacheKeyTest, OptionsAreTrimmedButKeepTheirOrder) {
  KernelCacheKey a = makeKey("x"), b = makeKey("x");
  b.options = {"  --gpu-architecture=sm_90a\t", "", " ", "-std=c++17 "};
  EXPECT_EQ(a.digest(), b.digest());
  EXPECT_EQ(b.normalizedOptions(), a.options);
}

TEST(CacheKeyTest, BuildIdDefaultsToThisBuild) {
  KernelCacheKey key;
  EXPECT_FALSE(tejit::buildId().empty());
  EXPECT_EQ(key.buildId, tejit::buildId());
}

/// The expected value was computed independently (Python hashlib) from the
/// documented scheme: SHA-256 over length-prefixed (u64 little-endian)
/// fields: a version tag, source, option count, options, NVRTC version,
/// arch, build id.
TEST(CacheKeyTest, DigestOfAFixedKeyIsPinned) {
  EXPECT_EQ(makeKey("__global__ void k() {}").digest(),
            "46e28da1bbd277194d34c1a881ff30e581e2543bfa40741f459498eec75c2264");
}

} // namespace
