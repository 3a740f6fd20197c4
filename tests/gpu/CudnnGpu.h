//===- CudnnGpu.h - what the cuDNN GPU checks start from --------*- C++ -*-===//
//
// tejit-attention-check and tejit-fp8-attention-check need the CUDA driver,
// device 0 made current and cuDNN. Without a driver or a GPU they are
// skipped (exit 77); any other failure fails them. Either way the reason is
// printed.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_GPU_CUDNNGPU_H
#define TEJIT_TESTS_GPU_CUDNNGPU_H

#include "runtime/CudaDriver.h"
#include "runtime/Cudnn.h"
#include "runtime/Device.h"
#include "tests/gpu/CheckExit.h"

#include <cstdio>
#include <optional>
#include <string>

namespace tejit::gpucheck {

struct CudnnGpu {
  const runtime::CudaDriver *driver = nullptr;
  runtime::DeviceInfo device;
  const runtime::Cudnn *cudnn = nullptr;
};

/// The driver, device 0 (current on this thread) and cuDNN, or nothing with
/// `exitStatus` set to what the check should return.
inline std::optional<CudnnGpu> openCudnnGpu(int &exitStatus) {
  auto driver = runtime::CudaDriver::get();
  if (!driver) {
    std::printf("SKIPPED: %s\n", llvm::toString(driver.takeError()).c_str());
    exitStatus = exitSkipped;
    return std::nullopt;
  }
  auto device = runtime::useDevice(0);
  if (!device) {
    std::string message;
    runtime::ErrorCode code = runtime::takeError(device.takeError(), message);
    std::printf("SKIPPED: %s\n", message.c_str());
    // No usable GPU is a skip; anything else is a failure.
    exitStatus = code == runtime::ErrorCode::NoDevice ? exitSkipped : 1;
    return std::nullopt;
  }
  auto cudnn = runtime::Cudnn::get();
  if (!cudnn) {
    std::printf("FAIL: %s\n", llvm::toString(cudnn.takeError()).c_str());
    exitStatus = 1;
    return std::nullopt;
  }
  return CudnnGpu{&*driver, *device, &*cudnn};
}

} // namespace tejit::gpucheck

#endif // TEJIT_TESTS_GPU_CUDNNGPU_H
