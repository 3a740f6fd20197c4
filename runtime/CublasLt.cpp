//===- CublasLt.cpp - cuBLASLt, loaded on first use -----------------------===//
//
// Mirrors CudaDriver.cpp: one load per process, kept in a function-local
// static (whose initialization C++ makes thread-safe), the library never
// dlclose'd: cuBLASLt keeps per-device state and may keep threads until the
// process exits, and runners created on other threads share it.
//
//===----------------------------------------------------------------------===//
#include "runtime/CublasLt.h"
#include "runtime/LibraryLoading.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;

namespace {
/// Major 13 first, the ABI tejit is built against; the unversioned name (a
/// toolkit's development link, or a pip wheel's) covers other releases with
/// the same C API.
const char *const libraryNames[] = {"libcublasLt.so.13", "libcublasLt.so"};

/// cuBLASLt 12.0 has every attribute and epilogue used here (FP8 scales,
/// amax_D, aux data types, fast accumulation) with the values cublasLt.h 13
/// gives them.
constexpr VersionedLibrary cublasLt = {
    libraryNames, "cuBLASLt", "cuBLASLt", 120000, {10000, 100}};

struct LoadResult {
  CublasLt lib;
  /// Empty when the library is usable.
  std::string failure;
};

LoadResult load() {
  LoadResult result;
  LoadedLibrary loaded = openFirstUsable(
      cublasLt, result.lib, [](SymbolResolver &symbols, CublasLt &lib) {
#define TEJIT_RESOLVE(fn) symbols.resolve(lib.fn, #fn);
        TEJIT_CUBLASLT_FUNCTIONS(TEJIT_RESOLVE)
#undef TEJIT_RESOLVE
        return lib.cublasLtGetVersion;
      });
  if (!loaded.handle)
    result.failure =
        llvm::formatv("cuBLASLt could not be loaded; it runs tejit's GEMMs. "
                      "Tried:{0}\nInstall the CUDA 13 cuBLAS libraries (the "
                      "toolkit's lib64, or the nvidia-cublas wheel) where "
                      "the dynamic loader finds them (e.g. LD_LIBRARY_PATH)",
                      loaded.triedText())
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

std::string CublasLt::versionString() const {
  return cublasLt.versionText(version);
}

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
