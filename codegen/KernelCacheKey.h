//===- KernelCacheKey.h - what identifies a compiled kernel -----*- C++ -*-===//
#ifndef TEJIT_CODEGEN_KERNELCACHEKEY_H
#define TEJIT_CODEGEN_KERNELCACHEKEY_H

#include "codegen/BuildId.h"

#include <string>
#include <vector>

namespace tejit::codegen {

/// Everything that changes a compiled kernel's bytes. Two keys with the same
/// digest may share one binary, in memory and on disk.
struct KernelCacheKey {
  /// The CUDA C++ source handed to NVRTC.
  std::string source;
  /// NVRTC options in the order they are passed (order can matter to NVRTC).
  std::vector<std::string> options;
  /// NVRTC's version, e.g. "12.4".
  std::string nvrtcVersion;
  /// The target, e.g. "sm_90a"; PTX and cubin targets must differ here.
  std::string arch;
  /// The tejit build that generated the source and chose the options.
  std::string buildId = tejit::buildId().str();

  /// The options with surrounding whitespace trimmed and empty ones dropped,
  /// order kept: spellings that NVRTC treats alike then share a key.
  std::vector<std::string> normalizedOptions() const;

  /// The SHA-256 of all fields as 64 lowercase hex digits.
  std::string digest() const;
};

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_KERNELCACHEKEY_H
