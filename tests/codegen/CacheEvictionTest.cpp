//===- CacheEvictionTest.cpp - the folder stays under its size bound ------===//
//
// Filesystem timestamps can be as coarse as a scheduler tick, so steps that
// must be ordered by mtime sleep a little between them.
//
//===----------------------------------------------------------------------===//
#include "CacheTestUtils.h"

#include "codegen/CacheEntry.h"

#include <thread>
#include <unistd.h>

using namespace tejit::codegen;
using namespace tejit::codegen::testing;

namespace {

using CacheEvictionTest = CacheTestBase;

void tick() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

/// Sources of one length, so each entry has the same size.
KernelCacheKey kernel(char name) { return makeKey(std::string(1000, name)); }
constexpr uint64_t kEntrySize = kCacheEntryHeaderSize + 4 + 1000;

TEST_F(CacheEvictionTest, LeastRecentlyUsedGoFirst) {
  ::setenv("TEJIT_CACHE_MAX_BYTES", std::to_string(3 * kEntrySize).c_str(), 1);
  for (char name : {'a', 'b', 'c'}) {
    get(*makeCache(), kernel(name));
    tick();
  }
  // A new process uses "a" from disk: now "b" is the oldest.
  get(*makeCache(), kernel('a'));
  tick();
  auto cache = makeCache();
  get(*cache, kernel('d'));
  EXPECT_EQ(cache->stats().evictions, 1u);
  EXPECT_EQ(cache->stats().bytesOnDisk, 3 * kEntrySize);
  for (char name : {'a', 'c', 'd'})
    EXPECT_TRUE(llvm::sys::fs::exists(cache->entryPath(kernel(name)))) << name;
  EXPECT_FALSE(llvm::sys::fs::exists(cache->entryPath(kernel('b'))));
  tick();
  get(*cache, kernel('e'));
  tick();
  get(*cache, kernel('f'));
  EXPECT_EQ(cache->stats().evictions, 3u);
  for (char name : {'d', 'e', 'f'})
    EXPECT_TRUE(llvm::sys::fs::exists(cache->entryPath(kernel(name)))) << name;
  EXPECT_EQ(compiles, 6);
}

TEST_F(CacheEvictionTest, NewEntryLargerThanTheBoundIsKept) {
  ::setenv("TEJIT_CACHE_MAX_BYTES", "100", 1);
  auto cache = makeCache();
  get(*cache, kernel('a'));
  tick();
  get(*cache, kernel('b'));
  EXPECT_FALSE(llvm::sys::fs::exists(cache->entryPath(kernel('a'))));
  EXPECT_TRUE(llvm::sys::fs::exists(cache->entryPath(kernel('b'))));
  EXPECT_EQ(cache->stats().entriesOnDisk, 1u);
}

TEST_F(CacheEvictionTest, OtherFilesAreNotCountedOrRemoved) {
  ::setenv("TEJIT_CACHE_MAX_BYTES", std::to_string(kEntrySize).c_str(), 1);
  ASSERT_FALSE(llvm::sys::fs::create_directories(cacheDir));
  std::string other = cacheDir + "/README";
  writeFile(other, std::string(5000, 'x'));
  auto cache = makeCache();
  get(*cache, kernel('a'));
  EXPECT_EQ(cache->stats().evictions, 0u);
  EXPECT_TRUE(llvm::sys::fs::exists(other));
}

} // namespace

/// Creates \p path with a modification time \p age ago.
void writeAged(llvm::StringRef path, std::chrono::minutes age) {
  writeFile(path, "partial");
  int fd;
  ASSERT_FALSE(llvm::sys::fs::openFileForWrite(path, fd,
                                               llvm::sys::fs::CD_OpenExisting));
  auto when = std::chrono::time_point_cast<std::chrono::nanoseconds>(
      std::chrono::system_clock::now() - age);
  EXPECT_FALSE(llvm::sys::fs::setLastAccessAndModificationTime(fd, when));
  ::close(fd);
}

TEST_F(CacheEvictionTest, StaleTempFilesOfKilledWritersAreRemoved) {
  ASSERT_FALSE(llvm::sys::fs::create_directories(cacheDir));
  std::string stale = cacheDir + "/.tmp-0123456789abcdef-42-abcdefgh";
  std::string fresh = cacheDir + "/.tmp-0123456789abcdef-43-abcdefgh";
  writeAged(stale, std::chrono::minutes(61));
  writeAged(fresh, std::chrono::minutes(59));
  auto cache = makeCache();
  get(*cache, kernel('a'));
  EXPECT_FALSE(llvm::sys::fs::exists(stale));
  EXPECT_TRUE(llvm::sys::fs::exists(fresh)) << "may be a writer at work";
  EXPECT_EQ(cache->stats().entriesOnDisk, 1u);
}
