//===- CacheEnvironmentTest.cpp - where the cache lives, how big it grows -===//
#include "CacheTestUtils.h"

using namespace tejit::codegen;
using namespace tejit::codegen::testing;

namespace {

/// Sets or (for nullptr) unsets \p name for one test, restoring it after.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      saved = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { saved ? ::setenv(name, saved->c_str(), 1) : ::unsetenv(name); }

private:
  const char *name;
  std::optional<std::string> saved;
};

std::string directory() {
  return KernelCacheOptions::fromEnvironment().directory;
}

TEST(CacheEnvironmentTest, FolderPrecedence) {
  ScopedEnv home("HOME", "/home/u"), xdg("XDG_CACHE_HOME", "/xdg"),
      dir("TEJIT_CACHE_DIR", "/explicit"),
      disable("TEJIT_DISABLE_CACHE", nullptr);
  EXPECT_EQ(directory(), "/explicit");
  ::unsetenv("TEJIT_CACHE_DIR");
  EXPECT_EQ(directory(), "/xdg/tejit");
  ::setenv("XDG_CACHE_HOME", "relative/ignored", 1);
  EXPECT_EQ(directory(), "/home/u/.cache/tejit");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(directory(), "/home/u/.cache/tejit");
  ::setenv("TEJIT_DISABLE_CACHE", "1", 1);
  EXPECT_EQ(directory(), "");
}

TEST(CacheEnvironmentTest, MaxBytes) {
  ScopedEnv maxBytes("TEJIT_CACHE_MAX_BYTES", nullptr);
  std::vector<std::string> warnings;
  auto collect = [&](const llvm::Twine &message) {
    warnings.push_back(message.str());
  };
  EXPECT_EQ(KernelCacheOptions::fromEnvironment(collect).maxBytes, uint64_t(1)
                                                                       << 30);
  ::setenv("TEJIT_CACHE_MAX_BYTES", "4096", 1);
  EXPECT_EQ(KernelCacheOptions::fromEnvironment(collect).maxBytes, 4096u);
  EXPECT_TRUE(warnings.empty());
  ::setenv("TEJIT_CACHE_MAX_BYTES", "1G", 1);
  EXPECT_EQ(KernelCacheOptions::fromEnvironment(collect).maxBytes,
            kDefaultCacheMaxBytes);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "tejit: warning: ignoring TEJIT_CACHE_MAX_BYTES='1G': "
                         "not a byte count");
}

} // namespace
