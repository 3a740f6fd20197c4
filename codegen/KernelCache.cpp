//===- KernelCache.cpp - memory layer, environment, source dumps ----------===//
#include "codegen/KernelCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace tejit::codegen;

void tejit::codegen::printCacheWarning(const llvm::Twine &message) {
  llvm::errs() << message << "\n";
}

/// Returns the value of \p name, or "" when unset.
static llvm::StringRef env(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

/// $TEJIT_CACHE_DIR, else the XDG cache folder, else "" (no home).
static std::string defaultDirectory() {
  if (!env("TEJIT_CACHE_DIR").empty())
    return env("TEJIT_CACHE_DIR").str();
  llvm::SmallString<256> path;
  // The XDG spec says relative values are invalid and must be ignored.
  llvm::StringRef xdg = env("XDG_CACHE_HOME");
  if (llvm::sys::path::is_absolute(xdg))
    path = xdg;
  else if (llvm::sys::path::home_directory(path))
    llvm::sys::path::append(path, ".cache");
  else
    return "";
  llvm::sys::path::append(path, "tejit");
  return std::string(path);
}

KernelCacheOptions
KernelCacheOptions::fromEnvironment(CacheWarningHandler warn) {
  KernelCacheOptions options;
  options.warn = warn;
  options.dumpDirectory = env("TEJIT_DUMP_SOURCES").str();
  llvm::StringRef disable = env("TEJIT_DISABLE_CACHE");
  if (!disable.empty() && disable != "0")
    return options;
  options.directory = defaultDirectory();
  llvm::StringRef maxBytes = env("TEJIT_CACHE_MAX_BYTES");
  if (!maxBytes.empty() && maxBytes.getAsInteger(10, options.maxBytes)) {
    options.maxBytes = kDefaultCacheMaxBytes;
    warn("tejit: warning: ignoring TEJIT_CACHE_MAX_BYTES='" + maxBytes +
         "': not a byte count");
  }
  return options;
}

KernelCache::KernelCache(KernelCacheOptions options)
    : options(std::move(options)) {
  if (!this->options.directory.empty())
    disk = std::make_unique<DiskCache>(
        this->options.directory, this->options.maxBytes, this->options.warn);
}

KernelCache::~KernelCache() = default;

KernelCache &KernelCache::global() {
  static KernelCache cache(KernelCacheOptions::fromEnvironment());
  return cache;
}

KernelCache::Slot &KernelCache::slotFor(llvm::StringRef digest) {
  std::lock_guard<std::mutex> lock(slotsMutex);
  std::unique_ptr<Slot> &slot = slots[digest];
  if (!slot)
    slot = std::make_unique<Slot>();
  return *slot;
}

llvm::Expected<std::string> KernelCache::getOrCompile(
    const KernelCacheKey &key,
    llvm::function_ref<llvm::Expected<std::string>()> compile) {
  std::string digest = key.digest();
  Slot &slot = slotFor(digest);
  // Held through the compile: a second thread asking for this key waits for
  // the first one's binary instead of compiling it again.
  std::lock_guard<std::mutex> lock(slot.mutex);
  if (slot.binary) {
    ++memoryHits;
    return *slot.binary;
  }
  if (!options.dumpDirectory.empty())
    dumpSource(digest, key.source);
  if (disk) {
    if (std::optional<std::string> binary = disk->load(digest)) {
      slot.binary = std::move(binary);
      return *slot.binary;
    }
  }
  ++misses;
  llvm::Expected<std::string> binary = compile();
  if (!binary)
    return binary.takeError();
  if (disk)
    disk->store(digest, *binary);
  slot.binary = std::move(*binary);
  return *slot.binary;
}

void KernelCache::dumpSource(llvm::StringRef digest, llvm::StringRef source) {
  llvm::SmallString<256> path(options.dumpDirectory);
  llvm::sys::path::append(path, digest + ".cu");
  std::error_code error =
      llvm::sys::fs::create_directories(options.dumpDirectory);
  if (!error) {
    llvm::raw_fd_ostream os(path, error);
    os << source;
    os.close();
    if (!error && os.has_error())
      error = os.error();
    os.clear_error();
  }
  // Dumping is a debugging aid: report the first failure, never fail.
  if (error && !dumpFailed.exchange(true))
    options.warn("tejit: warning: cannot dump kernel source to " + path + ": " +
                 error.message());
}

CacheStats KernelCache::stats() const {
  CacheStats stats;
  stats.memoryHits = memoryHits;
  stats.misses = misses;
  if (disk)
    disk->addStats(stats);
  return stats;
}

std::string KernelCache::entryPath(const KernelCacheKey &key) const {
  return disk ? disk->entryPath(key.digest()) : "";
}
