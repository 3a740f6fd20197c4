//===- CacheEntryTest.cpp - the entry format rejects every kind of damage -===//
#include "codegen/CacheEntry.h"

#include "gtest/gtest.h"

#include <string>

using namespace tejit::codegen;

namespace {

const std::string kKey(64, 'a');
const std::string kOtherKey(64, 'b');

/// The reason \p bytes is rejected, or "" when it decodes.
std::string rejection(llvm::StringRef bytes, llvm::StringRef key = kKey) {
  llvm::Expected<llvm::StringRef> payload = decodeCacheEntry(bytes, key);
  return payload ? "" : llvm::toString(payload.takeError());
}

TEST(CacheEntryTest, RoundTrips) {
  std::string payload("cubin\0bytes", 11);
  std::string entry = encodeCacheEntry(kKey, payload);
  EXPECT_EQ(entry.size(), kCacheEntryHeaderSize + payload.size());
  llvm::Expected<llvm::StringRef> decoded = decodeCacheEntry(entry, kKey);
  ASSERT_TRUE(bool(decoded)) << llvm::toString(decoded.takeError());
  EXPECT_EQ(*decoded, payload);
  EXPECT_EQ(rejection(encodeCacheEntry(kKey, "")), "");
}

TEST(CacheEntryTest, RejectsDamage) {
  std::string entry = encodeCacheEntry(kKey, "payload");
  EXPECT_EQ(rejection(""), "truncated header (0 bytes, need 116)");
  EXPECT_EQ(rejection(llvm::StringRef(entry).take_front(100)),
            "truncated header (100 bytes, need 116)");
  EXPECT_EQ(rejection(llvm::StringRef(entry).drop_back(1)),
            "payload is 6 bytes, header says 7");
  EXPECT_EQ(rejection(entry + "x"), "payload is 8 bytes, header says 7");
  EXPECT_EQ(rejection(entry, kOtherKey),
            "holds key " + kKey + ", expected " + kOtherKey);

  std::string flipped = entry;
  flipped.back() ^= 1;
  EXPECT_EQ(rejection(flipped), "payload checksum mismatch");
  std::string badMagic = entry;
  badMagic[0] = 'X';
  EXPECT_EQ(rejection(badMagic), "bad magic");
  std::string badVersion = entry;
  badVersion[8] = 7;
  EXPECT_EQ(rejection(badVersion), "format version 7, expected 1");
  std::string badChecksum = entry;
  badChecksum[90] ^= 0x40;
  EXPECT_EQ(rejection(badChecksum), "payload checksum mismatch");
}

} // namespace
