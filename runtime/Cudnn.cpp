//===- Cudnn.cpp - cuDNN's backend API, loaded on first use ---------------===//
//
// Mirrors CublasLt.cpp: one load per process, kept in a function-local
// static, the library never dlclose'd (cuDNN loads its sub-libraries and
// keeps per-device state until the process exits).
//
//===----------------------------------------------------------------------===//
#include "runtime/Cudnn.h"

#include "llvm/Support/FormatVariadic.h"

#include <dlfcn.h>

using namespace tejit::runtime;

namespace {
/// cuDNN 9 first, whose backend API and error strings tejit is written
/// against; the unversioned name covers a toolkit's development link or a
/// pip wheel's.
const char *const libraryNames[] = {"libcudnn.so.9", "libcudnn.so"};

/// 9.0 brings cudnnGetLastErrorString and the flash-attention fusion
/// patterns built in AttentionGraph.cpp.
constexpr size_t minimumVersion = 90000;

std::string versionText(size_t version) {
  return llvm::formatv("{0}.{1}.{2}", version / 10000, version / 100 % 100,
                       version % 100)
      .str();
}

/// Opens `name` into `lib`; "" on success, otherwise why it is not usable
/// (and `lib` is left empty).
std::string tryLoad(const char *name, Cudnn &lib) {
  void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = dlerror();
    return reason ? reason : std::string(name) + ": dlopen failed";
  }
  std::string missing;
#define TEJIT_RESOLVE(fn)                                                      \
  dlerror();                                                                   \
  lib.fn = reinterpret_cast<decltype(lib.fn)>(dlsym(handle, #fn));             \
  if (!lib.fn)                                                                 \
    missing += std::string(missing.empty() ? "" : ", ") + #fn;
  TEJIT_CUDNN_FUNCTIONS(TEJIT_RESOLVE)
#undef TEJIT_RESOLVE
  std::string failure;
  if (!missing.empty())
    failure = llvm::formatv("{0} is not a usable cuDNN 9: it lacks {1}", name,
                            missing);
  else if (size_t version = lib.cudnnGetVersion(); version < minimumVersion)
    failure = llvm::formatv("{0} is cuDNN {1}; tejit needs {2} or newer", name,
                            versionText(version), versionText(minimumVersion));
  if (!failure.empty()) {
    dlclose(handle);
    lib = Cudnn();
    return failure;
  }
  lib.version = lib.cudnnGetVersion();
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(lib.cudnnCreate), &info) &&
      info.dli_fname)
    lib.path = info.dli_fname;
  else
    lib.path = name;
  return "";
}

struct LoadResult {
  Cudnn lib;
  /// Empty when the library is usable.
  std::string failure;
};

LoadResult load() {
  LoadResult result;
  std::string tried;
  for (const char *name : libraryNames) {
    std::string failure = tryLoad(name, result.lib);
    if (failure.empty())
      return result;
    tried += "\n  " + failure;
  }
  result.failure =
      llvm::formatv("cuDNN could not be loaded; it runs tejit's fused "
                    "attention. Tried:{0}\nInstall cuDNN 9 (e.g. the "
                    "nvidia-cudnn wheel PyTorch brings) where the dynamic "
                    "loader finds it (e.g. LD_LIBRARY_PATH)",
                    tried)
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

std::string Cudnn::versionString() const { return versionText(version); }

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
