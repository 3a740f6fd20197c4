//===- KernelCacheKey.cpp - SHA-256 digest of a kernel's inputs -----------===//
#include "codegen/KernelCacheKey.h"
#include "codegen/KernelEmitter.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/SHA256.h"

using namespace tejit::codegen;

std::vector<std::string> KernelCacheKey::normalizedOptions() const {
  std::vector<std::string> result;
  for (const std::string &option : options) {
    llvm::StringRef trimmed = llvm::StringRef(option).trim();
    if (!trimmed.empty())
      result.push_back(trimmed.str());
  }
  return result;
}

/// Hashes a length before the bytes, so that moving bytes from one field to
/// the next (or splitting one option in two) changes the digest.
static void hashField(llvm::SHA256 &hasher, llvm::StringRef field) {
  uint8_t length[8];
  llvm::support::endian::write64le(length, field.size());
  hasher.update(llvm::ArrayRef<uint8_t>(length));
  hasher.update(field);
}

/// The digest of the device helpers every generated source starts with,
/// computed once: a key then hashes only what follows them, which keeps an
/// in-process cache hit cheap (the helpers are most of each source's bytes).
static llvm::StringRef helpersDigest() {
  static const std::string digest = [] {
    std::array<uint8_t, 32> hash = llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
        reinterpret_cast<const uint8_t *>(deviceHelpers().data()),
        deviceHelpers().size()));
    return llvm::toHex(hash, /*LowerCase=*/true);
  }();
  return digest;
}

std::string KernelCacheKey::digest() const {
  llvm::SHA256 hasher;
  hashField(hasher, "tejit-kernel-cache-key-v1");
  llvm::StringRef text = source;
  if (text.starts_with(deviceHelpers())) {
    hashField(hasher, "device-helpers");
    hashField(hasher, helpersDigest());
    text = text.drop_front(deviceHelpers().size());
  }
  hashField(hasher, text);
  std::vector<std::string> normalized = normalizedOptions();
  hashField(hasher, std::to_string(normalized.size()));
  for (const std::string &option : normalized)
    hashField(hasher, option);
  hashField(hasher, nvrtcVersion);
  hashField(hasher, arch);
  hashField(hasher, buildId);
  std::array<uint8_t, 32> hash = hasher.final();
  return llvm::toHex(hash, /*LowerCase=*/true);
}
