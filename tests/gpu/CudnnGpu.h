//===- CudnnGpu.h - what the cuDNN GPU checks start from --------*- C++ -*-===//
//
// tejit-attention-check and tejit-fp8-attention-check need the CUDA driver,
// device 0 made current and cuDNN. Without a driver or a GPU they are
// skipped (exit 77); any other failure fails them. Either way the reason is
// printed. Both take the same options (CheckOptions) and print the same
// first line (printCheckBanner).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_GPU_CUDNNGPU_H
#define TEJIT_TESTS_GPU_CUDNNGPU_H

#include "runtime/CudaDriver.h"
#include "runtime/Cudnn.h"
#include "runtime/Device.h"
#include "tests/gpu/CheckExit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
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

/// The checks' options: `--seed N` (default: the clock), `--filter TEXT`
/// (cases whose name holds it), `--no-real` (skip the full-size cases), and
/// one flag of the tool's own (`extraFlag`, e.g. "--time-decode").
struct CheckOptions {
  uint64_t seed =
      uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  std::string filter;
  bool real = true, extra = false;
};

/// `argv`'s options, or nothing after printing the usage (exit 2).
inline std::optional<CheckOptions>
parseCheckOptions(int argc, char **argv, const char *extraFlag = nullptr) {
  CheckOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--seed" && i + 1 < argc)
      options.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--filter" && i + 1 < argc)
      options.filter = argv[++i];
    else if (arg == "--no-real")
      options.real = false;
    else if (extraFlag && arg == extraFlag)
      options.extra = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--seed N] [--filter TEXT] [--no-real]%s%s%s\n",
                   argv[0], extraFlag ? " [" : "", extraFlag ? extraFlag : "",
                   extraFlag ? "]" : "");
      return std::nullopt;
    }
  }
  return options;
}

/// The device, the cuDNN loaded (and from where) and the seed.
inline void printCheckBanner(const CudnnGpu &gpu, uint64_t seed) {
  std::printf("device %s (%s), cuDNN %s (%s), seed %llu (--seed %llu to "
              "reproduce)\n",
              gpu.device.name.c_str(), gpu.device.arch.c_str(),
              gpu.cudnn->versionString().c_str(), gpu.cudnn->path.c_str(),
              (unsigned long long)seed, (unsigned long long)seed);
}

} // namespace tejit::gpucheck

#endif // TEJIT_TESTS_GPU_CUDNNGPU_H
