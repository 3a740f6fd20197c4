//===- CacheEntry.cpp - encoding and validation of cache entries ----------===//
#include "codegen/CacheEntry.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/SHA256.h"

#include <cassert>

using namespace tejit::codegen;
namespace endian = llvm::support::endian;

static constexpr char kMagic[8] = {'T', 'E', 'J', 'I', 'T', 'K', 'C', '\0'};
static constexpr size_t kKeySize = 64;
static constexpr size_t kVersionOffset = 8, kKeyOffset = 12, kSizeOffset = 76,
                        kChecksumOffset = 84;

static std::array<uint8_t, 32> checksum(llvm::StringRef payload) {
  return llvm::SHA256::hash(llvm::arrayRefFromStringRef(payload));
}

std::string tejit::codegen::encodeCacheEntry(llvm::StringRef key,
                                             llvm::StringRef payload) {
  assert(key.size() == kKeySize && "key must be a hex SHA-256 digest");
  std::string bytes(kCacheEntryHeaderSize, '\0');
  std::copy(std::begin(kMagic), std::end(kMagic), bytes.begin());
  endian::write32le(&bytes[kVersionOffset], kCacheEntryVersion);
  std::copy(key.begin(), key.end(), bytes.begin() + kKeyOffset);
  endian::write64le(&bytes[kSizeOffset], payload.size());
  std::array<uint8_t, 32> sum = checksum(payload);
  std::copy(sum.begin(), sum.end(), bytes.begin() + kChecksumOffset);
  bytes.append(payload.begin(), payload.end());
  return bytes;
}

static llvm::Error invalid(const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), why);
}

llvm::Expected<llvm::StringRef>
tejit::codegen::decodeCacheEntry(llvm::StringRef bytes, llvm::StringRef key) {
  if (bytes.size() < kCacheEntryHeaderSize)
    return invalid("truncated header (" + llvm::Twine(bytes.size()) +
                   " bytes, need " + llvm::Twine(kCacheEntryHeaderSize) + ")");
  if (bytes.substr(0, sizeof(kMagic)) != llvm::StringRef(kMagic, 8))
    return invalid("bad magic");
  uint32_t version = endian::read32le(bytes.data() + kVersionOffset);
  if (version != kCacheEntryVersion)
    return invalid("format version " + llvm::Twine(version) + ", expected " +
                   llvm::Twine(kCacheEntryVersion));
  llvm::StringRef storedKey = bytes.substr(kKeyOffset, kKeySize);
  if (storedKey != key)
    return invalid("holds key " + storedKey + ", expected " + key);
  uint64_t size = endian::read64le(bytes.data() + kSizeOffset);
  llvm::StringRef payload = bytes.drop_front(kCacheEntryHeaderSize);
  if (size != payload.size())
    return invalid("payload is " + llvm::Twine(payload.size()) +
                   " bytes, header says " + llvm::Twine(size));
  std::array<uint8_t, 32> sum = checksum(payload);
  if (!std::equal(sum.begin(), sum.end(),
                  bytes.bytes_begin() + kChecksumOffset))
    return invalid("payload checksum mismatch");
  return payload;
}
