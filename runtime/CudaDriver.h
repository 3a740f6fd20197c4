//===- CudaDriver.h - the CUDA driver API, loaded on first use --*- C++ -*-===//
//
// tejit never links libcuda: every binary starts on a machine without a GPU
// driver (CI, the build machines) and the runtime reports why it cannot run
// only when asked to. The entry points keep cuda.h's names and types.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_CUDADRIVER_H
#define TEJIT_RUNTIME_CUDADRIVER_H

#include "runtime/Errors.h"

#include <cuda.h>

namespace tejit::runtime {

/// The driver's entry points we use. Each member is a pointer to the
/// function cuda.h declares under that name (its current ABI version, e.g.
/// cuMemAlloc is cuMemAlloc_v2).
struct CudaDriver {
#define TEJIT_CUDA_DRIVER_FUNCTIONS(X)                                         \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetName)                                                           \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxGetDevice)                                                            \
  X(cuModuleLoadData)                                                          \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuFuncSetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemAllocHost)                                                            \
  X(cuMemFreeHost)                                                             \
  X(cuMemsetD8Async)                                                           \
  X(cuMemsetD32Async)                                                          \
  X(cuMemcpyHtoDAsync)                                                         \
  X(cuMemcpyDtoHAsync)                                                         \
  X(cuMemcpyDtoDAsync)                                                         \
  X(cuMemcpy2DAsync)                                                           \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamWaitEvent)                                                         \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamIsCapturing)                                                       \
  X(cuStreamBeginCapture)                                                      \
  X(cuStreamEndCapture)                                                        \
  X(cuGraphDestroy)                                                            \
  X(cuGraphInstantiateWithFlags)                                               \
  X(cuGraphLaunch)                                                             \
  X(cuGraphExecDestroy)                                                        \
  X(cuEventCreate)                                                             \
  X(cuEventRecord)                                                             \
  X(cuEventSynchronize)                                                        \
  X(cuEventQuery)                                                              \
  X(cuEventElapsedTime)                                                        \
  X(cuEventDestroy)
#define TEJIT_DECLARE(fn) decltype(&::fn) fn = nullptr;
  TEJIT_CUDA_DRIVER_FUNCTIONS(TEJIT_DECLARE)
#undef TEJIT_DECLARE

  /// The loaded driver (cuInit done), or why it cannot be used: no
  /// libcuda.so.1, or cuInit failed (no GPU visible). Loaded once.
  static llvm::Expected<const CudaDriver &> get();

  /// An error for a failed call: "<what>: CUDA_ERROR_X (message)".
  llvm::Error error(CUresult result, const llvm::Twine &what) const;
  /// Success, or error(result, what).
  llvm::Error check(CUresult result, const llvm::Twine &what) const {
    if (result == CUDA_SUCCESS)
      return llvm::Error::success();
    return error(result, what);
  }
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_CUDADRIVER_H
