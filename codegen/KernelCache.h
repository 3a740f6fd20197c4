//===- KernelCache.h - compiled kernels in memory and on disk ---*- C++ -*-===//
//
// Every kernel binary tejit loads goes through KernelCache::getOrCompile,
// which looks in memory, then in the disk folder shared by all processes,
// and only then runs the compiler, storing its result in both layers.
//
// Environment (read by KernelCacheOptions::fromEnvironment):
//   TEJIT_CACHE_DIR        disk folder (default $XDG_CACHE_HOME/tejit, else
//                          ~/.cache/tejit)
//   TEJIT_CACHE_MAX_BYTES  size bound of the folder (default 1 GiB)
//   TEJIT_DISABLE_CACHE=1  memory only, no disk
//   TEJIT_DUMP_SOURCES=DIR write each kernel's source as DIR/<digest>.cu
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_CODEGEN_KERNELCACHE_H
#define TEJIT_CODEGEN_KERNELCACHE_H

#include "codegen/CacheStats.h"
#include "codegen/DiskCache.h"
#include "codegen/KernelCacheKey.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <mutex>
#include <optional>

namespace tejit::codegen {

/// Default size bound of the disk folder.
constexpr uint64_t kDefaultCacheMaxBytes = uint64_t(1) << 30;

/// Prints a warning line to llvm::errs().
void printCacheWarning(const llvm::Twine &message);

/// Where and how a KernelCache stores binaries.
struct KernelCacheOptions {
  /// The disk folder; empty for a memory-only cache.
  std::string directory;
  /// Least recently used entries are evicted above this many bytes.
  uint64_t maxBytes = kDefaultCacheMaxBytes;
  /// Folder receiving each kernel's source as `<digest>.cu`; empty for none.
  std::string dumpDirectory;
  /// Receives warnings (corrupt entries, unwritable folders, bad settings).
  CacheWarningHandler warn = printCacheWarning;

  /// Reads the TEJIT_* variables described above; bad values are reported
  /// through \p warn and replaced by defaults.
  static KernelCacheOptions
  fromEnvironment(CacheWarningHandler warn = printCacheWarning);
};

/// A thread-safe cache of compiled kernels. Concurrent requests for one key
/// compile it once; different keys compile in parallel.
class KernelCache {
public:
  explicit KernelCache(KernelCacheOptions options);
  ~KernelCache();

  /// The process-wide cache, configured from the environment on first use.
  static KernelCache &global();

  /// Returns the binary for \p key, running \p compile only when neither
  /// memory nor disk holds a valid one. Compile errors are returned as they
  /// are and not cached; cache problems never fail the call.
  llvm::Expected<std::string>
  getOrCompile(const KernelCacheKey &key,
               llvm::function_ref<llvm::Expected<std::string>()> compile);

  /// Counters since construction, and the disk folder's current size.
  CacheStats stats() const;

  /// The disk entry path for \p key, or "" for a memory-only cache.
  std::string entryPath(const KernelCacheKey &key) const;

private:
  /// One key's binary, and the lock that makes its compilation happen once.
  struct Slot {
    std::mutex mutex;
    std::optional<std::string> binary;
  };
  Slot &slotFor(llvm::StringRef digest);
  void dumpSource(llvm::StringRef digest, llvm::StringRef source);

  KernelCacheOptions options;
  std::unique_ptr<DiskCache> disk;
  std::mutex slotsMutex;
  llvm::StringMap<std::unique_ptr<Slot>> slots;
  std::atomic<uint64_t> memoryHits{0}, misses{0};
  std::atomic<bool> dumpFailed{false};
};

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_KERNELCACHE_H
