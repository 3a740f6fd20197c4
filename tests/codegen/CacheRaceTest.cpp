//===- CacheRaceTest.cpp - two processes compiling one kernel at once -----===//
//
// Two forked children look up the same key over and over, each lookup from
// a fresh KernelCache (a new process as far as the cache knows), and now and
// then delete the entry so that both keep rewriting it while the other
// reads. A reader must never get a wrong payload nor see a corrupt entry
// (which would show as a warning); afterwards the entry must be valid and no
// temp file may be left behind.
//
//===----------------------------------------------------------------------===//
#include "CacheTestUtils.h"

#include "codegen/CacheEntry.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace tejit::codegen;
using namespace tejit::codegen::testing;

namespace {

using CacheRaceTest = CacheTestBase;

/// Large enough that a non-atomic write would be seen half done.
std::string bigPayload() {
  std::string payload(512 * 1024, '\0');
  for (size_t i = 0; i < payload.size(); ++i)
    payload[i] = char(i * 131 % 251);
  return payload;
}

enum ChildStatus { kOk = 0, kWrongPayload = 1, kWarned = 2, kCompileError = 3 };

/// The child's loop; returns its exit status.
int raceChild(const KernelCacheKey &key, const std::string &expected,
              int iterations) {
  bool warned = false;
  for (int i = 0; i < iterations; ++i) {
    KernelCache cache(KernelCacheOptions::fromEnvironment(
        [&](const llvm::Twine &) { warned = true; }));
    llvm::Expected<std::string> binary =
        cache.getOrCompile(key, [&]() -> llvm::Expected<std::string> {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          return expected;
        });
    if (!binary) {
      llvm::consumeError(binary.takeError());
      return kCompileError;
    }
    if (*binary != expected)
      return kWrongPayload;
    if (warned)
      return kWarned;
    if (i % 3 == 0)
      llvm::sys::fs::remove(cache.entryPath(key));
  }
  return kOk;
}

TEST_F(CacheRaceTest, TwoProcessesShareOneEntry) {
  KernelCacheKey key = makeKey("__global__ void raced() {}");
  std::string expected = bigPayload();
  std::vector<pid_t> children;
  for (int child = 0; child < 2; ++child) {
    pid_t pid = ::fork();
    ASSERT_NE(pid, -1);
    if (pid == 0)
      ::_exit(raceChild(key, expected, 150));
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), kOk)
        << "1: wrong payload, 2: corrupt entry seen, 3: compile error";
  }

  auto cache = makeCache();
  get(*cache, key); // Recreates the entry if the last iteration removed it.
  llvm::Expected<llvm::StringRef> payload =
      decodeCacheEntry(readFile(cache->entryPath(key)), key.digest());
  EXPECT_TRUE(bool(payload)) << llvm::toString(payload.takeError());
  std::error_code error;
  for (llvm::sys::fs::directory_iterator it(cacheDir, error), end;
       it != end && !error; it.increment(error))
    EXPECT_FALSE(llvm::sys::path::filename(it->path()).starts_with(".tmp-"))
        << "temp file left behind: " << it->path();
  EXPECT_TRUE(warnings.empty());
}

} // namespace
