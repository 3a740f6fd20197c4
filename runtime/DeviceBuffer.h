//===- DeviceBuffer.h - an owned device allocation --------------*- C++ -*-===//
#ifndef TEJIT_RUNTIME_DEVICEBUFFER_H
#define TEJIT_RUNTIME_DEVICEBUFFER_H

#include "runtime/CudaDriver.h"

namespace tejit::runtime {

/// Device memory from cuMemAlloc (256-byte aligned), freed with the buffer.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&other) noexcept
      : pointer(other.pointer), size(other.size) {
    other.pointer = 0;
    other.size = 0;
  }
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept {
    std::swap(pointer, other.pointer);
    std::swap(size, other.size);
    return *this;
  }
  ~DeviceBuffer() {
    if (!pointer)
      return;
    if (auto driver = CudaDriver::get())
      driver->cuMemFree(pointer);
    else
      llvm::consumeError(driver.takeError());
  }

  /// `bytes` of device memory in the current context (none for 0 bytes).
  static llvm::Expected<DeviceBuffer> allocate(size_t bytes,
                                               const llvm::Twine &what) {
    DeviceBuffer buffer;
    if (!bytes)
      return buffer;
    auto driver = CudaDriver::get();
    if (!driver)
      return driver.takeError();
    if (llvm::Error error =
            driver->check(driver->cuMemAlloc(&buffer.pointer, bytes),
                          "allocating " + llvm::Twine(bytes) +
                              " bytes of device memory for " + what))
      return std::move(error);
    buffer.size = bytes;
    return buffer;
  }

  CUdeviceptr get() const { return pointer; }
  size_t bytes() const { return size; }

private:
  CUdeviceptr pointer = 0;
  size_t size = 0;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_DEVICEBUFFER_H
