//===- Device.cpp - picking and checking the GPU --------------------------===//
#include "runtime/Device.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;

llvm::Expected<DeviceInfo> tejit::runtime::describeDevice(int ordinal) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  int count = 0;
  if (llvm::Error error =
          driver->check(driver->cuDeviceGetCount(&count), "cuDeviceGetCount"))
    return std::move(error);
  if (count == 0)
    return makeError(ErrorCode::NoDevice, "no CUDA device is visible");
  if (ordinal < 0 || ordinal >= count)
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("device {0} does not exist: {1} CUDA "
                                   "device(s) visible (0..{2})",
                                   ordinal, count, count - 1));
  CUdevice device;
  if (llvm::Error error =
          driver->check(driver->cuDeviceGet(&device, ordinal), "cuDeviceGet"))
    return std::move(error);
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  auto attribute = [&](CUdevice_attribute which, int &value) {
    return driver->check(driver->cuDeviceGetAttribute(&value, which, device),
                         "cuDeviceGetAttribute");
  };
  if (llvm::Error error = llvm::joinErrors(
          driver->check(driver->cuDeviceGetName(name, sizeof(name), device),
                        "cuDeviceGetName"),
          llvm::joinErrors(
              attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                        info.major),
              llvm::joinErrors(
                  attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                            info.minor),
                  attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                            info.multiprocessors)))))
    return std::move(error);
  info.name = name;
  info.arch = llvm::formatv("sm_{0}{1}{2}", info.major, info.minor,
                            info.major == 9 && info.minor == 0 ? "a" : "")
                  .str();
  return info;
}

llvm::Expected<DeviceInfo> tejit::runtime::useDevice(int ordinal) {
  auto info = describeDevice(ordinal);
  if (!info)
    return info.takeError();
  if (info->major * 10 + info->minor < 89)
    return makeError(
        ErrorCode::UnsupportedDevice,
        llvm::formatv("unsupported GPU: device {0} ({1}) is sm_{2}{3}; tejit's "
                      "FP8 kernels need sm_89 or newer (Ada, Hopper, "
                      "Blackwell)",
                      ordinal, info->name, info->major, info->minor));
  const CudaDriver &driver = *CudaDriver::get();
  CUdevice device;
  if (llvm::Error error =
          driver.check(driver.cuDeviceGet(&device, ordinal), "cuDeviceGet"))
    return std::move(error);
  if (llvm::Error error =
          driver.check(driver.cuDevicePrimaryCtxRetain(&info->context, device),
                       "cuDevicePrimaryCtxRetain"))
    return std::move(error);
  if (llvm::Error error = driver.check(driver.cuCtxSetCurrent(info->context),
                                       "cuCtxSetCurrent"))
    return std::move(error);
  return info;
}
