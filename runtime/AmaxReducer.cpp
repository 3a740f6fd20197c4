//===- AmaxReducer.cpp - DelayedScaling's amax all-reduce -----------------===//
#include "runtime/AmaxReducer.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;
using llvm::Error;

AmaxReducer::~AmaxReducer() = default;

Error NcclAmaxReducer::allReduceMax(CUdeviceptr in, CUdeviceptr out,
                                    size_t count, CUstream stream) {
  return comm->allReduce(in, out, count, ncclFloat32, ncclMax, stream,
                         "amaxes");
}

Error CallbackAmaxReducer::allReduceMax(CUdeviceptr in, CUdeviceptr out,
                                        size_t count, CUstream stream) {
  if (in != out) {
    auto driver = CudaDriver::get();
    if (!driver)
      return driver.takeError();
    if (Error error = driver->check(
            driver->cuMemcpyDtoDAsync(out, in, count * sizeof(float), stream),
            "copying amaxes"))
      return error;
  }
  if (int status =
          function(userData, reinterpret_cast<void *>(out), count, stream))
    return makeError(ErrorCode::Internal,
                     llvm::formatv("the amax reduction function returned {0} "
                                   "for {1} amaxes",
                                   status, count));
  return Error::success();
}
