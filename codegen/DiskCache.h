//===- DiskCache.h - size-bounded folder of cache entries -------*- C++ -*-===//
//
// One file per key, `<digest>.tkc`, in a folder that several processes may
// share. Writers create a uniquely named temp file in the same folder, fsync
// it and rename it over the entry, so readers see the old entry, the new one
// or none, never a partial one; when two processes write one key, the last
// rename wins and both contents are valid. Readers bump the entry's mtime,
// and after each write the oldest entries (by mtime) are removed until the
// folder is under its size bound; temp files older than an hour, left by
// killed writers, go then too.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_CODEGEN_DISKCACHE_H
#define TEJIT_CODEGEN_DISKCACHE_H

#include "codegen/CacheStats.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Chrono.h"

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tejit::codegen {

/// Receives a one-line warning (without a trailing newline).
using CacheWarningHandler = std::function<void(const llvm::Twine &)>;

/// A folder of cache entries. Thread-safe; safe to share between processes.
class DiskCache {
public:
  DiskCache(std::string directory, uint64_t maxBytes, CacheWarningHandler warn);

  /// Returns the payload stored under \p key, or nothing when there is no
  /// valid entry. A corrupt entry is removed and reported with one warning.
  std::optional<std::string> load(llvm::StringRef key);

  /// Stores \p payload under \p key atomically, then evicts least recently
  /// used entries (never \p key's) until the folder fits the bound. If the
  /// folder is not writable, warns once and stops writing.
  void store(llvm::StringRef key, llvm::StringRef payload);

  /// The path of \p key's entry.
  std::string entryPath(llvm::StringRef key) const;

  /// Adds this folder's counters and current size to \p stats.
  void addStats(CacheStats &stats) const;

private:
  struct Entry {
    std::string path;
    uint64_t size;
    llvm::sys::TimePoint<> lastUse;
  };
  /// Lists the entries in the folder and sums their sizes into \p total;
  /// removes stale temp files on the way.
  std::vector<Entry> listEntries(uint64_t &total) const;
  /// Writes \p bytes to a temp file and renames it to \p path.
  std::error_code writeAtomically(llvm::StringRef key, llvm::StringRef path,
                                  llvm::StringRef bytes);
  /// Removes the oldest entries other than \p keep until under the bound.
  void evict(llvm::StringRef keep);

  std::string directory;
  uint64_t maxBytes;
  CacheWarningHandler warn;
  std::atomic<bool> writable{true};
  std::atomic<uint64_t> hits{0}, corruptEntries{0}, evictions{0};
};

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_DISKCACHE_H
