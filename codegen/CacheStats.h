//===- CacheStats.h - counters of the kernel cache --------------*- C++ -*-===//
#ifndef TEJIT_CODEGEN_CACHESTATS_H
#define TEJIT_CODEGEN_CACHESTATS_H

#include "llvm/Support/raw_ostream.h"

#include <cstdint>

namespace tejit::codegen {

/// A snapshot of what a KernelCache did since it was created, plus the
/// current size of its folder (shared with other processes).
struct CacheStats {
  uint64_t memoryHits = 0;
  uint64_t diskHits = 0;
  /// Lookups that ran the compiler (including those after a corrupt entry).
  uint64_t misses = 0;
  uint64_t corruptEntries = 0;
  uint64_t evictions = 0;
  uint64_t entriesOnDisk = 0;
  uint64_t bytesOnDisk = 0;
  /// Whether the disk layer is in use (not disabled, folder writable).
  bool diskEnabled = false;

  /// Prints one `name: value` line per counter (te-compile --cache-stats).
  void print(llvm::raw_ostream &os) const {
    os << "memory hits: " << memoryHits << "\ndisk hits: " << diskHits
       << "\nmisses: " << misses << "\ncorrupt entries: " << corruptEntries
       << "\nevictions: " << evictions << "\nentries on disk: " << entriesOnDisk
       << "\nbytes on disk: " << bytesOnDisk
       << "\ndisk cache: " << (diskEnabled ? "on" : "off") << "\n";
  }
};

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_CACHESTATS_H
