//===- CublasLt.cpp - cuBLASLt, loaded on first use -----------------------===//
//
// Mirrors CudaDriver.cpp: one load per process, kept in a function-local
// static (whose initialization C++ makes thread-safe), the library never
// dlclose'd: cuBLASLt keeps per-device state and may keep threads until the
// process exits, and runners created on other threads share it.
//
//===----------------------------------------------------------------------===//
#include "runtime/CublasLt.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <dlfcn.h>

using namespace tejit::runtime;

namespace {
/// Major 13 first, the ABI tejit is built against; the unversioned name (a
/// toolkit's development link, or a pip wheel's) covers other releases with
/// the same C API.
const char *const libraryNames[] = {"libcublasLt.so.13", "libcublasLt.so"};

/// cuBLASLt 12.0 has every attribute and epilogue used here (FP8 scales,
/// amax_D, aux data types, fast accumulation) with the values cublasLt.h 13
/// gives them.
constexpr size_t minimumVersion = 120000;

std::string versionText(size_t version) {
  return llvm::formatv("{0}.{1}.{2}", version / 10000, version / 100 % 100,
                       version % 100)
      .str();
}

/// Opens `name` into `lib`; "" on success, otherwise why it is not usable
/// (and `lib` is left empty).
std::string tryLoad(const char *name, CublasLt &lib) {
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
  TEJIT_CUBLASLT_FUNCTIONS(TEJIT_RESOLVE)
#undef TEJIT_RESOLVE
  std::string failure;
  if (!missing.empty())
    failure = llvm::formatv("{0} is not a usable cuBLASLt: it lacks {1}", name,
                            missing);
  else if (size_t version = lib.cublasLtGetVersion(); version < minimumVersion)
    failure =
        llvm::formatv("{0} is cuBLASLt {1}; tejit needs {2} or newer", name,
                      versionText(version), versionText(minimumVersion));
  if (!failure.empty()) {
    // Nothing of it runs, so it can go.
    dlclose(handle);
    lib = CublasLt();
    return failure;
  }
  lib.version = lib.cublasLtGetVersion();
  // The file the loader picked, for messages: the name alone does not say
  // which of several installed copies answered.
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(lib.cublasLtCreate), &info) &&
      info.dli_fname)
    lib.path = info.dli_fname;
  else
    lib.path = name;
  return "";
}

struct LoadResult {
  CublasLt lib;
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
      llvm::formatv("cuBLASLt could not be loaded; it runs tejit's GEMMs. "
                    "Tried:{0}\nInstall the CUDA 13 cuBLAS libraries (the "
                    "toolkit's lib64, or the nvidia-cublas wheel) where the "
                    "dynamic loader finds them (e.g. LD_LIBRARY_PATH)",
                    tried)
          .str();
  return result;
}
} // namespace

llvm::Expected<const CublasLt &> CublasLt::get() {
  static LoadResult loaded = load();
  if (!loaded.failure.empty())
    return makeError(ErrorCode::Cublas, loaded.failure);
  return loaded.lib;
}

std::string CublasLt::versionString() const { return versionText(version); }

std::string CublasLt::statusText(cublasStatus_t status) const {
  const char *name = cublasLtGetStatusName(status);
  const char *text = cublasLtGetStatusString(status);
  return llvm::formatv("{0} (status {1}: {2})", name ? name : "cuBLAS error",
                       static_cast<int>(status), text ? text : "no description")
      .str();
}

llvm::Error CublasLt::error(cublasStatus_t status,
                            const llvm::Twine &what) const {
  return makeError(ErrorCode::Cublas, what + ": " + statusText(status));
}
