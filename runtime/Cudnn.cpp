//===- Cudnn.cpp - cuDNN's backend API, loaded on first use ---------------===//
//
// Mirrors CublasLt.cpp: one load per process, kept in a function-local
// static, the library never dlclose'd (cuDNN loads its sub-libraries and
// keeps per-device state until the process exits).
//
//===----------------------------------------------------------------------===//
#include "runtime/Cudnn.h"
#include "runtime/LibraryLoading.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;

namespace {
/// cuDNN 9 first, whose backend API and error strings tejit is written
/// against; the unversioned name covers a toolkit's development link or a
/// pip wheel's.
const char *const libraryNames[] = {"libcudnn.so.9", "libcudnn.so"};

/// 9.0 brings cudnnGetLastErrorString and the flash-attention fusion
/// patterns built in AttentionGraph.cpp.
constexpr VersionedLibrary cudnn = {
    libraryNames, "cuDNN", "cuDNN 9", 90000, {10000, 100}};

struct LoadResult {
  Cudnn lib;
  /// Empty when the library is usable.
  std::string failure;
};

LoadResult load() {
  LoadResult result;
  LoadedLibrary loaded = openFirstUsable(
      cudnn, result.lib, [](SymbolResolver &symbols, Cudnn &lib) {
#define TEJIT_RESOLVE(fn) symbols.resolve(lib.fn, #fn);
        TEJIT_CUDNN_FUNCTIONS(TEJIT_RESOLVE)
#undef TEJIT_RESOLVE
        return lib.cudnnGetVersion;
      });
  if (!loaded.handle)
    result.failure =
        llvm::formatv("cuDNN could not be loaded; it runs tejit's fused "
                      "attention. Tried:{0}\nInstall cuDNN 9 (e.g. the "
                      "nvidia-cudnn wheel PyTorch brings) where the dynamic "
                      "loader finds it (e.g. LD_LIBRARY_PATH)",
                      loaded.triedText())
            .str();
  return result;
}
} // namespace

llvm::Expected<const Cudnn &> Cudnn::get() {
  static LoadResult loaded = load();
  if (!loaded.failure.empty())
    return makeError(ErrorCode::Unsupported, loaded.failure);
  return loaded.lib;
}

std::string Cudnn::versionString() const { return cudnn.versionText(version); }

std::string Cudnn::lastErrorString() const {
  char message[1024] = {};
  cudnnGetLastErrorString(message, sizeof(message));
  return message;
}

std::string Cudnn::statusText(cudnnStatus_t status) const {
  const char *name = cudnnGetErrorString(status);
  return llvm::formatv("{0} (status {1})", name ? name : "cuDNN error",
                       static_cast<int>(status))
      .str();
}

llvm::Error Cudnn::error(cudnnStatus_t status, const llvm::Twine &what,
                         ErrorCode code) const {
  std::string last = lastErrorString();
  return makeError(code, what + ": " + statusText(status) +
                             (last.empty() ? "" : ": " + last));
}
