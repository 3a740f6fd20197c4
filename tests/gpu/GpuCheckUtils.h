//===- GpuCheckUtils.h - small helpers of the GPU check tools ---*- C++ -*-===//
//
// What tejit-attention-check and tejit-cp-attention-check share: failing
// with a message, bf16 and f16 conversions on the host, and device buffers
// with blocking uploads and downloads on the legacy stream.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_GPU_GPUCHECKUTILS_H
#define TEJIT_TESTS_GPU_GPUCHECKUTILS_H

#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tejit::gpucheck {

using runtime::CudaDriver;
using runtime::DeviceBuffer;

[[noreturn]] inline void die(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(1);
}

template <typename T> T orDie(llvm::Expected<T> value, const char *what) {
  if (!value)
    die(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

inline void orDie(llvm::Error error, const char *what) {
  if (error)
    die(std::string(what) + ": " + llvm::toString(std::move(error)));
}

inline uint16_t toBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

inline float fromBf16(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}

/// IEEE half, round to nearest even.
inline uint16_t toHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  uint32_t sign = (x >> 16) & 0x8000, mantissa = x & 0x7fffff;
  int32_t biased = int32_t((x >> 23) & 0xff);
  if (biased == 0xff)
    return uint16_t(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  int32_t exponent = biased - 127 + 15;
  if (exponent >= 31)
    return uint16_t(sign | 0x7c00);
  if (exponent <= 0) {
    if (exponent < -10)
      return uint16_t(sign);
    mantissa |= 0x800000;
    int shift = 14 - exponent;
    uint32_t half = mantissa >> shift, rest = mantissa & ((1u << shift) - 1),
             middle = 1u << (shift - 1);
    if (rest > middle || (rest == middle && (half & 1)))
      ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | uint32_t(exponent) << 10 | mantissa >> 13;
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half;
  return uint16_t(half);
}

inline float fromHalf(uint16_t value) {
  int exponent = (value >> 10) & 0x1f, mantissa = value & 0x3ff;
  float magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(float(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = std::ldexp(float(mantissa | 0x400), exponent - 25);
  return (value & 0x8000) ? -magnitude : magnitude;
}

struct Gpu {
  const CudaDriver *driver = nullptr;

  DeviceBuffer allocate(size_t bytes, const char *what) const {
    return orDie(DeviceBuffer::allocate(std::max<size_t>(bytes, 256), what),
                 what);
  }
  void upload(const DeviceBuffer &buffer, const void *data,
              size_t bytes) const {
    orDie(driver->check(
              driver->cuMemcpyHtoDAsync(buffer.get(), data, bytes, nullptr),
              "cuMemcpyHtoDAsync"),
          "upload");
    synchronize();
  }
  void download(void *data, const DeviceBuffer &buffer, size_t bytes) const {
    orDie(driver->check(
              driver->cuMemcpyDtoHAsync(data, buffer.get(), bytes, nullptr),
              "cuMemcpyDtoHAsync"),
          "download");
    synchronize();
  }
  void fill(const DeviceBuffer &buffer, uint8_t value) const {
    orDie(driver->check(driver->cuMemsetD8Async(buffer.get(), value,
                                                buffer.bytes(), nullptr),
                        "cuMemsetD8Async"),
          "fill");
  }
  void synchronize() const {
    orDie(driver->check(driver->cuStreamSynchronize(nullptr),
                        "cuStreamSynchronize"),
          "synchronize");
  }
};

/// The milliseconds one call of `run` (which enqueues on the legacy stream)
/// takes: CUDA events around `runs` calls after `warmups` untimed ones.
template <typename Run>
double timeRuns(const CudaDriver &driver, Run run, int warmups, int runs) {
  for (int i = 0; i < warmups; ++i)
    run();
  CUevent start, stop;
  orDie(driver.check(driver.cuEventCreate(&start, CU_EVENT_DEFAULT),
                     "cuEventCreate"),
        "timing");
  orDie(driver.check(driver.cuEventCreate(&stop, CU_EVENT_DEFAULT),
                     "cuEventCreate"),
        "timing");
  driver.cuEventRecord(start, nullptr);
  for (int i = 0; i < runs; ++i)
    run();
  driver.cuEventRecord(stop, nullptr);
  driver.cuEventSynchronize(stop);
  float ms = 0;
  driver.cuEventElapsedTime(&ms, start, stop);
  driver.cuEventDestroy(start);
  driver.cuEventDestroy(stop);
  return ms / runs;
}

} // namespace tejit::gpucheck

#endif // TEJIT_TESTS_GPU_GPUCHECKUTILS_H
