//===- CudaDriver.cpp - the CUDA driver API, loaded on first use ----------===//
#include "runtime/CudaDriver.h"
#include "runtime/LibraryLoading.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;

char CodedError::ID = 0;

// Expands a cuda.h name to its versioned symbol before stringizing it:
// cuMemAlloc -> "cuMemAlloc_v2".
#define TEJIT_SYMBOL_NAME(fn) TEJIT_STRINGIZE(fn)
#define TEJIT_STRINGIZE(fn) #fn

namespace {
struct LoadResult {
  CudaDriver driver;
  /// Empty when the driver is usable.
  std::string failure;
  tejit::runtime::ErrorCode code = tejit::runtime::ErrorCode::NoDevice;
};

LoadResult load() {
  LoadResult result;
  // The driver is never dlclose'd: CUDA keeps threads and state alive until
  // the process exits.
  std::string reason;
  void *handle = openLibrary("libcuda.so.1", reason);
  if (!handle) {
    result.failure =
        llvm::formatv("no CUDA driver: cannot load libcuda.so.1 ({0}); tejit "
                      "runs its kernels on an NVIDIA GPU (sm_89 or newer) "
                      "with its driver installed",
                      reason)
            .str();
    return result;
  }
  CudaDriver &driver = result.driver;
  SymbolResolver symbols(handle);
#define TEJIT_RESOLVE(fn) symbols.resolve(driver.fn, TEJIT_SYMBOL_NAME(fn));
  TEJIT_CUDA_DRIVER_FUNCTIONS(TEJIT_RESOLVE)
#undef TEJIT_RESOLVE
  if (!symbols.missing().empty()) {
    result.failure = "the CUDA driver is too old (CUDA 12 or newer needed): "
                     "libcuda.so.1 lacks " +
                     symbols.missingText();
    result.code = tejit::runtime::ErrorCode::UnsupportedDevice;
    return result;
  }
  CUresult init = driver.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char *name = nullptr;
    driver.cuGetErrorName(init, &name);
    result.failure =
        llvm::formatv("no CUDA device: cuInit failed with {0}{1}",
                      name ? name : "an unknown error",
                      init == CUDA_ERROR_NO_DEVICE
                          ? " (no GPU is visible to this process; check "
                            "CUDA_VISIBLE_DEVICES and nvidia-smi)"
                          : "")
            .str();
  }
  return result;
}
} // namespace

llvm::Expected<const CudaDriver &> CudaDriver::get() {
  static LoadResult loaded = load();
  if (!loaded.failure.empty())
    return makeError(loaded.code, loaded.failure);
  return loaded.driver;
}

llvm::Error CudaDriver::error(CUresult result, const llvm::Twine &what) const {
  const char *name = nullptr, *text = nullptr;
  cuGetErrorName(result, &name);
  cuGetErrorString(result, &text);
  return makeError(ErrorCode::Cuda,
                   llvm::formatv("{0}: {1} ({2})", what.str(),
                                 name ? name : "CUDA error",
                                 text ? text : "no description"));
}
