//===- KernelCacheTest.cpp - memory and disk layers, corruption recovery --===//
#include "CacheTestUtils.h"

#include "codegen/CacheEntry.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <thread>

using namespace tejit::codegen;
using namespace tejit::codegen::testing;

namespace {

using KernelCacheTest = CacheTestBase;

TEST_F(KernelCacheTest, SecondLookupIsAMemoryHit) {
  auto cache = makeCache();
  KernelCacheKey key = makeKey("k1");
  EXPECT_EQ(get(*cache, key), "bin:k1");
  EXPECT_EQ(get(*cache, key), "bin:k1");
  EXPECT_EQ(compiles, 1);
  CacheStats stats = cache->stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.memoryHits, 1u);
  EXPECT_EQ(stats.diskHits, 0u);
  EXPECT_EQ(stats.entriesOnDisk, 1u);
  EXPECT_EQ(stats.bytesOnDisk, kCacheEntryHeaderSize + 6);
  EXPECT_TRUE(warnings.empty());
}

TEST_F(KernelCacheTest, StatsPrintOneCounterPerLine) {
  auto cache = makeCache();
  get(*cache, makeKey("k1"));
  get(*cache, makeKey("k1"));
  std::string text;
  llvm::raw_string_ostream os(text);
  cache->stats().print(os);
  EXPECT_EQ(os.str(), "memory hits: 1\ndisk hits: 0\nmisses: 1\n"
                      "corrupt entries: 0\nevictions: 0\nentries on disk: 1\n"
                      "bytes on disk: 122\ndisk cache: on\n");
}

TEST_F(KernelCacheTest, NewProcessHitsTheDisk) {
  KernelCacheKey key = makeKey("k1");
  EXPECT_EQ(get(*makeCache(), key), "bin:k1");
  EXPECT_TRUE(llvm::sys::fs::exists(makeCache()->entryPath(key)));
  auto fresh = makeCache();
  llvm::Expected<std::string> binary =
      fresh->getOrCompile(key, []() -> llvm::Expected<std::string> {
        ADD_FAILURE() << "compiled although the disk holds the kernel";
        return "recompiled";
      });
  ASSERT_TRUE(bool(binary));
  EXPECT_EQ(*binary, "bin:k1");
  EXPECT_EQ(fresh->stats().diskHits, 1u);
  EXPECT_EQ(fresh->stats().misses, 0u);
}

TEST_F(KernelCacheTest, DifferentKeysGetDifferentBinaries) {
  auto cache = makeCache();
  EXPECT_EQ(get(*cache, makeKey("a")), "bin:a");
  EXPECT_EQ(get(*cache, makeKey("b")), "bin:b");
  EXPECT_EQ(get(*makeCache(), makeKey("a")), "bin:a");
  EXPECT_EQ(compiles, 2);
}

TEST_F(KernelCacheTest, CompileErrorsAreReturnedAndNotCached) {
  auto cache = makeCache();
  KernelCacheKey key = makeKey("bad");
  llvm::Expected<std::string> failed =
      cache->getOrCompile(key, []() -> llvm::Expected<std::string> {
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "nvrtc: error: expected a ';'");
      });
  ASSERT_FALSE(bool(failed));
  EXPECT_EQ(llvm::toString(failed.takeError()), "nvrtc: error: expected a ';'");
  EXPECT_FALSE(llvm::sys::fs::exists(cache->entryPath(key)));
  EXPECT_EQ(get(*cache, key), "bin:bad");
  EXPECT_EQ(compiles, 1);
}

TEST_F(KernelCacheTest, ThreadsAskingForOneKeyCompileItOnce) {
  auto cache = makeCache();
  KernelCacheKey key = makeKey("shared");
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  std::vector<std::string> results(8);
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      llvm::Expected<std::string> binary =
          cache->getOrCompile(key, [&]() -> llvm::Expected<std::string> {
            ++calls;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            return std::string("bin");
          });
      results[i] = binary ? *binary : llvm::toString(binary.takeError());
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(calls, 1);
  for (const std::string &result : results)
    EXPECT_EQ(result, "bin");
}

TEST_F(KernelCacheTest, DisabledCacheWritesNothing) {
  ::setenv("TEJIT_DISABLE_CACHE", "1", 1);
  auto cache = makeCache();
  KernelCacheKey key = makeKey("k1");
  EXPECT_EQ(get(*cache, key), "bin:k1");
  EXPECT_EQ(get(*cache, key), "bin:k1");
  EXPECT_EQ(get(*makeCache(), key), "bin:k1");
  EXPECT_EQ(compiles, 2) << "memory layer still on, disk off";
  EXPECT_EQ(cache->entryPath(key), "");
  EXPECT_FALSE(llvm::sys::fs::exists(cacheDir));
  EXPECT_FALSE(cache->stats().diskEnabled);
}

TEST_F(KernelCacheTest, ZeroDoesNotDisable) {
  ::setenv("TEJIT_DISABLE_CACHE", "0", 1);
  auto cache = makeCache();
  get(*cache, makeKey("k1"));
  EXPECT_TRUE(cache->stats().diskEnabled);
  EXPECT_EQ(cache->stats().entriesOnDisk, 1u);
}

TEST_F(KernelCacheTest, DumpsEachSourceOnce) {
  std::string dumpDir = std::string(root) + "/sources";
  ::setenv("TEJIT_DUMP_SOURCES", dumpDir.c_str(), 1);
  auto cache = makeCache();
  KernelCacheKey a = makeKey("__global__ void a() {}");
  KernelCacheKey b = makeKey("__global__ void b() {}");
  get(*cache, a);
  get(*cache, b);
  EXPECT_EQ(readFile(dumpDir + "/" + a.digest() + ".cu"), a.source);
  EXPECT_EQ(readFile(dumpDir + "/" + b.digest() + ".cu"), b.source);
  // Also from the disk cache: a dump shows what a run used, compiled or not.
  llvm::sys::fs::remove_directories(dumpDir);
  get(*makeCache(), a);
  EXPECT_EQ(readFile(dumpDir + "/" + a.digest() + ".cu"), a.source);
  EXPECT_EQ(compiles, 2);
}

TEST_F(KernelCacheTest, UnwritableFolderWarnsOnceAndRunsUncached) {
  // A regular file where a parent folder should be: fails even as root.
  std::string blocker = std::string(root) + "/file";
  writeFile(blocker, "not a folder");
  ::setenv("TEJIT_CACHE_DIR", (blocker + "/cache").c_str(), 1);
  auto cache = makeCache();
  EXPECT_EQ(get(*cache, makeKey("a")), "bin:a");
  EXPECT_EQ(get(*cache, makeKey("b")), "bin:b");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("tejit: warning: cannot write kernel cache in " +
                             blocker + "/cache"),
            std::string::npos)
      << warnings[0];
  EXPECT_FALSE(cache->stats().diskEnabled);
}

TEST_F(KernelCacheTest, UnwritableDumpFolderWarnsOnce) {
  std::string blocker = std::string(root) + "/file";
  writeFile(blocker, "not a folder");
  ::setenv("TEJIT_DUMP_SOURCES", (blocker + "/dump").c_str(), 1);
  auto cache = makeCache();
  EXPECT_EQ(get(*cache, makeKey("a")), "bin:a");
  EXPECT_EQ(get(*cache, makeKey("b")), "bin:b");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("cannot dump kernel source to " + blocker),
            std::string::npos)
      << warnings[0];
}

/// Damages the entry of key "k1", then checks that a new process warns
/// once, recompiles, and leaves a valid entry behind.
class CacheCorruptionTest : public CacheTestBase {
protected:
  void damageAndRecover(llvm::function_ref<std::string(std::string)> damage,
                        llvm::StringRef why) {
    KernelCacheKey key = makeKey("k1");
    get(*makeCache(), key);
    std::string path = makeCache()->entryPath(key);
    writeFile(path, damage(readFile(path)));
    auto cache = makeCache();
    EXPECT_EQ(get(*cache, key), "bin:k1");
    EXPECT_EQ(get(*cache, key), "bin:k1");
    EXPECT_EQ(compiles, 2);
    EXPECT_EQ(cache->stats().corruptEntries, 1u);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0], "tejit: warning: discarding corrupt kernel cache "
                           "entry " +
                               path + ": " + why.str());
    // The replacement is valid: the next process neither warns nor compiles.
    auto next = makeCache();
    EXPECT_EQ(get(*next, key), "bin:k1");
    EXPECT_EQ(next->stats().diskHits, 1u);
    EXPECT_EQ(compiles, 2);
    EXPECT_EQ(warnings.size(), 1u);
  }
};

TEST_F(CacheCorruptionTest, Truncated) {
  damageAndRecover([](std::string bytes) { return bytes.substr(0, 118); },
                   "payload is 2 bytes, header says 6");
}

TEST_F(CacheCorruptionTest, TruncatedToNothing) {
  damageAndRecover([](std::string) { return std::string(); },
                   "truncated header (0 bytes, need 116)");
}

TEST_F(CacheCorruptionTest, FlippedPayloadByte) {
  damageAndRecover(
      [](std::string bytes) {
        bytes.back() ^= 0x20;
        return bytes;
      },
      "payload checksum mismatch");
}

TEST_F(CacheCorruptionTest, GarbageHeader) {
  damageAndRecover([](std::string bytes) { return std::string(200, '\x5a'); },
                   "bad magic");
}

TEST_F(CacheCorruptionTest, WrongKeyInside) {
  KernelCacheKey other = makeKey("k2");
  std::string otherDigest = other.digest();
  damageAndRecover(
      [&](std::string) { return encodeCacheEntry(otherDigest, "bin:k2"); },
      "holds key " + otherDigest + ", expected " + makeKey("k1").digest());
}

} // namespace
