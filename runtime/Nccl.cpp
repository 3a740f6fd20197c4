//===- Nccl.cpp - NCCL, loaded on first use -------------------------------===//
//
// Mirrors Cudnn.cpp: one load per process, kept in a function-local static,
// never dlclose'd (communicators own threads and device memory until the
// process exits).
//
//===----------------------------------------------------------------------===//
#include "runtime/Nccl.h"
#include "runtime/LibraryLoading.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;

namespace {
/// NCCL 2's soname first (in a PyTorch process the wheel's copy is already
/// loaded under it, and the dynamic loader hands that one back).
const char *const libraryNames[] = {"libnccl.so.2", "libnccl.so"};

/// 2.12 is the oldest NCCL with ncclGetLastError; every NCCL since 2.9
/// encodes its version as major * 10000 + minor * 100 + patch.
constexpr VersionedLibrary nccl = {
    libraryNames, "NCCL", "NCCL 2", 21200, {10000, 100}};

struct LoadResult {
  Nccl lib;
  /// Empty when the library is usable.
  std::string failure;
};

/// ncclGetVersion reports through an out-parameter; VersionedLibrary wants
/// `size_t f()`. The resolved pointer is kept here for the adapter.
decltype(&::ncclGetVersion) candidateGetVersion = nullptr;

size_t getVersionAdapter() {
  int version = 0;
  if (!candidateGetVersion || candidateGetVersion(&version) != ncclSuccess)
    return 0;
  return static_cast<size_t>(version);
}

LoadResult load() {
  LoadResult result;
  LoadedLibrary loaded =
      openFirstUsable(nccl, result.lib, [](SymbolResolver &symbols, Nccl &lib) {
#define TEJIT_RESOLVE(fn) symbols.resolve(lib.fn, #fn);
        TEJIT_NCCL_FUNCTIONS(TEJIT_RESOLVE)
#undef TEJIT_RESOLVE
        candidateGetVersion = lib.ncclGetVersion;
        return lib.ncclGetVersion ? &getVersionAdapter : nullptr;
      });
  if (!loaded.handle)
    result.failure =
        llvm::formatv("NCCL could not be loaded; it reduces FP8 amaxes "
                      "across ranks. Tried:{0}\nInstall NCCL 2 (e.g. the "
                      "nvidia-nccl wheel PyTorch brings) where the dynamic "
                      "loader finds it (e.g. LD_LIBRARY_PATH)",
                      loaded.triedText())
            .str();
  return result;
}
} // namespace

llvm::Expected<const Nccl &> Nccl::get() {
  static LoadResult loaded = load();
  if (!loaded.failure.empty())
    return makeError(ErrorCode::Unsupported, loaded.failure);
  return loaded.lib;
}

std::string Nccl::versionString() const { return nccl.versionText(version); }

llvm::Error Nccl::check(ncclResult_t result, const llvm::Twine &what,
                        ncclComm_t comm) const {
  if (result == ncclSuccess)
    return llvm::Error::success();
  const char *name = ncclGetErrorString(result);
  const char *last = ncclGetLastError(comm);
  std::string detail = last && *last ? std::string(": ") + last : "";
  return makeError(ErrorCode::Cuda,
                   what + llvm::formatv(": {0} (result {1}){2}",
                                        name ? name : "NCCL error",
                                        static_cast<int>(result), detail)
                              .str());
}
