//===- Device.h - picking and checking the GPU ------------------*- C++ -*-===//
#ifndef TEJIT_RUNTIME_DEVICE_H
#define TEJIT_RUNTIME_DEVICE_H

#include "runtime/CudaDriver.h"

#include <string>

namespace tejit::runtime {

struct DeviceInfo {
  int ordinal = 0;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  std::string name;
  /// The arch kernels are compiled for: "sm_90a" on Hopper (its FP8 and
  /// arch-specific instructions), "sm_<major><minor>" elsewhere.
  std::string arch;
  /// The device's primary context: the one PyTorch and the CUDA runtime
  /// (and so cuBLASLt) use, so pointers and streams are shared with them.
  CUcontext context = nullptr;
};

/// Describes device `ordinal` without checking it can run FP8.
llvm::Expected<DeviceInfo> describeDevice(int ordinal);

/// Makes device `ordinal`'s primary context current on this thread and
/// checks it can run tejit's FP8 kernels (sm_89 or newer); the error names
/// the device and its compute capability otherwise.
llvm::Expected<DeviceInfo> useDevice(int ordinal);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_DEVICE_H
