//===- CacheEntry.h - on-disk format of one kernel cache entry --*- C++ -*-===//
//
// An entry file is a fixed header followed by the payload (cubin or PTX):
//
//   offset  size  field
//        0     8  magic "TEJITKC\0"
//        8     4  format version (little-endian), kCacheEntryVersion
//       12    64  key digest, lowercase hex
//       76     8  payload size in bytes (little-endian)
//       84    32  SHA-256 of the payload
//      116     n  payload
//
// The key inside guards against an entry renamed or copied to another key's
// path; the size and checksum catch truncation and bit rot.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_CODEGEN_CACHEENTRY_H
#define TEJIT_CODEGEN_CACHEENTRY_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace tejit::codegen {

/// Bumped whenever the layout above changes; older entries then read as
/// corrupt and are recompiled.
constexpr uint32_t kCacheEntryVersion = 1;
/// Bytes before the payload.
constexpr size_t kCacheEntryHeaderSize = 116;

/// Serializes an entry holding \p payload under the 64-digit \p key.
std::string encodeCacheEntry(llvm::StringRef key, llvm::StringRef payload);

/// Returns the payload of the entry in \p bytes, or an error saying why the
/// entry is not a valid entry for \p key. The payload points into \p bytes.
llvm::Expected<llvm::StringRef> decodeCacheEntry(llvm::StringRef bytes,
                                                 llvm::StringRef key);

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_CACHEENTRY_H
