//===- CacheTestUtils.h - fixture for kernel cache tests --------*- C++ -*-===//
//
// Each test gets a fresh cache folder through TEJIT_CACHE_DIR and a clean
// environment; caches built with makeCache() collect their warnings instead
// of printing them. A new KernelCache object stands for a new process: it
// shares only the disk folder with earlier ones.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_CODEGEN_CACHETESTUTILS_H
#define TEJIT_TESTS_CODEGEN_CACHETESTUTILS_H

#include "codegen/KernelCache.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace tejit::codegen::testing {

/// A key that differs from others by \p source only.
inline KernelCacheKey makeKey(std::string source) {
  KernelCacheKey key;
  key.source = std::move(source);
  key.options = {"--gpu-architecture=sm_90a", "-std=c++17"};
  key.nvrtcVersion = "12.4";
  key.arch = "sm_90a";
  key.buildId = "test-build";
  return key;
}

/// Reads a whole file, or "" when it cannot be read.
inline std::string readFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  return buffer ? (*buffer)->getBuffer().str() : "";
}

/// Replaces a file's contents.
inline void writeFile(llvm::StringRef path, llvm::StringRef bytes) {
  std::error_code error;
  llvm::raw_fd_ostream os(path, error);
  ASSERT_FALSE(error) << error.message();
  os << bytes;
}

class CacheTestBase : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(
        llvm::sys::fs::createUniqueDirectory("tejit-cache-test", root));
    cacheDir = std::string(root) + "/cache";
    for (const char *name :
         {"TEJIT_DISABLE_CACHE", "TEJIT_DUMP_SOURCES", "TEJIT_CACHE_MAX_BYTES"})
      ::unsetenv(name);
    ::setenv("TEJIT_CACHE_DIR", cacheDir.c_str(), /*overwrite=*/1);
  }
  void TearDown() override {
    ::unsetenv("TEJIT_CACHE_DIR");
    llvm::sys::fs::remove_directories(root);
  }

  /// A cache configured from the environment, as a new process would build.
  std::unique_ptr<KernelCache> makeCache() {
    return std::make_unique<KernelCache>(
        KernelCacheOptions::fromEnvironment([this](const llvm::Twine &message) {
          warnings.push_back(message.str());
        }));
  }

  /// Gets \p key's binary, counting compiles; the binary is `bin:` + source.
  std::string get(KernelCache &cache, const KernelCacheKey &key) {
    llvm::Expected<std::string> binary =
        cache.getOrCompile(key, [&]() -> llvm::Expected<std::string> {
          ++compiles;
          return "bin:" + key.source;
        });
    if (!binary) {
      ADD_FAILURE() << llvm::toString(binary.takeError());
      return "";
    }
    return *binary;
  }

  llvm::SmallString<128> root;
  std::string cacheDir;
  std::vector<std::string> warnings;
  int compiles = 0;
};

} // namespace tejit::codegen::testing

#endif // TEJIT_TESTS_CODEGEN_CACHETESTUTILS_H
