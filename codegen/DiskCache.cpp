//===- DiskCache.cpp - atomic writes, validated reads, LRU eviction -------===//
#include "codegen/DiskCache.h"

#include "codegen/CacheEntry.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <unistd.h>

using namespace tejit::codegen;
namespace fs = llvm::sys::fs;

static constexpr llvm::StringLiteral kEntryExtension = ".tkc";
static constexpr llvm::StringLiteral kTempPrefix = ".tmp-";
/// No write takes this long, so an older temp file is a killed writer's.
static constexpr std::chrono::hours kStaleTempAge(1);

DiskCache::DiskCache(std::string directory, uint64_t maxBytes,
                     CacheWarningHandler warn)
    : directory(std::move(directory)), maxBytes(maxBytes),
      warn(std::move(warn)) {}

std::string DiskCache::entryPath(llvm::StringRef key) const {
  llvm::SmallString<256> path(directory);
  llvm::sys::path::append(path, key + kEntryExtension);
  return std::string(path);
}

std::optional<std::string> DiskCache::load(llvm::StringRef key) {
  std::string path = entryPath(key);
  int fd;
  // A missing or unreadable entry is a miss; the compiler's result replaces it.
  if (fs::openFileForRead(path, fd))
    return std::nullopt;
  auto closeFd = llvm::make_scope_exit([fd] { ::close(fd); });
  // Volatile: read, not mmap, so the bytes stay ours whatever happens to the
  // file afterwards.
  auto buffer = llvm::MemoryBuffer::getOpenFile(
      fs::convertFDToNativeFile(fd), path, /*FileSize=*/-1,
      /*RequiresNullTerminator=*/false, /*IsVolatile=*/true);
  if (!buffer)
    return std::nullopt;
  llvm::Expected<llvm::StringRef> payload =
      decodeCacheEntry((*buffer)->getBuffer(), key);
  if (!payload) {
    ++corruptEntries;
    warn("tejit: warning: discarding corrupt kernel cache entry " + path +
         ": " + llvm::toString(payload.takeError()));
    // Should another process have just renamed a good entry here, removing
    // it costs that key one recompile, nothing worse.
    fs::remove(path);
    return std::nullopt;
  }
  // The mtime orders eviction (atime is unreliable under relatime); failing
  // to bump it only makes the entry look older.
  (void)fs::setLastAccessAndModificationTime(
      fd, std::chrono::time_point_cast<std::chrono::nanoseconds>(
              std::chrono::system_clock::now()));
  ++hits;
  return payload->str();
}

void DiskCache::store(llvm::StringRef key, llvm::StringRef payload) {
  if (!writable)
    return;
  std::error_code error = fs::create_directories(directory);
  if (!error)
    error =
        writeAtomically(key, entryPath(key), encodeCacheEntry(key, payload));
  if (error) {
    // A read-only or full cache must not fail compilation: run uncached.
    if (writable.exchange(false))
      warn("tejit: warning: cannot write kernel cache in " + directory + " (" +
           error.message() + "); continuing without the disk cache");
    return;
  }
  evict(key);
}

std::error_code DiskCache::writeAtomically(llvm::StringRef key,
                                           llvm::StringRef path,
                                           llvm::StringRef bytes) {
  // Same folder as the entry so that rename is atomic; the pid keeps names of
  // concurrent processes apart even if they share a random seed after fork.
  llvm::SmallString<256> model(directory);
  llvm::sys::path::append(model, kTempPrefix + key.take_front(16) + "-" +
                                     llvm::Twine(::getpid()) + "-%%%%%%%%");
  llvm::SmallString<256> tempPath;
  int fd;
  if (std::error_code error = fs::createUniqueFile(model, fd, tempPath))
    return error;
  std::error_code error;
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << bytes;
    os.flush();
    // Without fsync a crash after the rename could leave an empty entry.
    if (!os.has_error() && ::fsync(fd) != 0)
      error = std::error_code(errno, std::generic_category());
    os.close();
    if (os.has_error())
      error = os.error();
    os.clear_error();
  }
  if (!error)
    error = fs::rename(tempPath, path);
  if (error)
    fs::remove(tempPath);
  return error;
}

std::vector<DiskCache::Entry> DiskCache::listEntries(uint64_t &total) const {
  std::vector<Entry> entries;
  total = 0;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; it != end && !error;
       it.increment(error)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    bool isTemp = name.starts_with(kTempPrefix);
    if (!isTemp && llvm::sys::path::extension(name) != kEntryExtension)
      continue;
    llvm::ErrorOr<fs::basic_file_status> status = it->status();
    if (!status) // Removed by another process since the listing.
      continue;
    // Temp files belong to writers at work, unless a killed one left them.
    if (isTemp) {
      if (std::chrono::system_clock::now() - status->getLastModificationTime() >
          kStaleTempAge)
        fs::remove(it->path());
      continue;
    }
    total += status->getSize();
    entries.push_back(
        {it->path(), status->getSize(), status->getLastModificationTime()});
  }
  return entries;
}

void DiskCache::evict(llvm::StringRef keep) {
  // A full scan per write is cheap next to the compile that preceded it, and
  // needs no index that concurrent processes would have to agree on.
  uint64_t total;
  std::vector<Entry> entries = listEntries(total);
  if (total <= maxBytes)
    return;
  llvm::sort(entries, [](const Entry &a, const Entry &b) {
    return std::tie(a.lastUse, a.path) < std::tie(b.lastUse, b.path);
  });
  std::string keepPath = entryPath(keep);
  for (const Entry &entry : entries) {
    if (total <= maxBytes)
      break;
    if (entry.path == keepPath)
      continue;
    std::error_code error = fs::remove(entry.path, /*IgnoreNonExisting=*/false);
    if (!error)
      ++evictions;
    // Gone either way, if another process evicted it first.
    if (!error || error == std::errc::no_such_file_or_directory)
      total -= entry.size;
  }
}

void DiskCache::addStats(CacheStats &stats) const {
  stats.diskHits += hits;
  stats.corruptEntries += corruptEntries;
  stats.evictions += evictions;
  stats.diskEnabled = writable;
  uint64_t total;
  stats.entriesOnDisk = listEntries(total).size();
  stats.bytesOnDisk = total;
}
