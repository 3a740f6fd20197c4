//===- GemmLanes.cpp - side streams for a grouped GEMM's groups -----------===//
#include "runtime/GemmLanes.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <map>

using namespace tejit::runtime;
using llvm::Error;

size_t GemmLanes::configuredCount() {
  const char *text = std::getenv("TEJIT_GROUPED_GEMM_STREAMS");
  unsigned count = 4;
  if (text && *text && llvm::StringRef(text).getAsInteger(10, count))
    count = 4; // not a number: the default
  return count > 1 ? std::min(count, 16u) : 0;
}

llvm::Expected<std::unique_ptr<GemmLanes>>
GemmLanes::create(size_t count, size_t workspaceBytes) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  std::unique_ptr<GemmLanes> lanes(new GemmLanes(*driver));
  if (Error error = driver->check(
          driver->cuEventCreate(&lanes->forked, CU_EVENT_DISABLE_TIMING),
          "creating a grouped GEMM's fork event"))
    return std::move(error);
  for (size_t index = 0; index < count; ++index) {
    Lane lane;
    if (Error error = driver->check(
            driver->cuStreamCreate(&lane.stream, CU_STREAM_NON_BLOCKING),
            "creating a grouped GEMM's side stream"))
      return std::move(error);
    // Owned from here: the destructor releases what was made.
    lanes->lanes.push_back(std::move(lane));
    Lane &made = lanes->lanes.back();
    if (Error error = driver->check(
            driver->cuEventCreate(&made.done, CU_EVENT_DISABLE_TIMING),
            "creating a grouped GEMM's join event"))
      return std::move(error);
    auto workspace = DeviceBuffer::allocate(
        workspaceBytes,
        llvm::formatv("the cuBLASLt workspace of grouped GEMM lane {0}", index)
            .str());
    if (!workspace)
      return workspace.takeError();
    made.workspace = std::move(*workspace);
    // No device name: the lanes run the heuristic's algorithms (tuning
    // files are measured for whole-GPU GEMMs).
    auto runner = GemmRunner::create(
        reinterpret_cast<void *>(made.workspace.get()), workspaceBytes, "");
    if (!runner)
      return runner.takeError();
    made.runner = std::move(*runner);
  }
  return std::move(lanes);
}

llvm::Expected<GemmLanes *> GemmLanes::shared() {
  size_t count = configuredCount();
  if (!count)
    return nullptr;
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  CUcontext context = nullptr;
  if (Error error =
          driver->check(driver->cuCtxGetCurrent(&context), "cuCtxGetCurrent"))
    return std::move(error);
  static std::mutex made;
  // Never freed: streams outlive every program of the process.
  static auto *byContext =
      new std::map<CUcontext, std::unique_ptr<GemmLanes>>();
  std::lock_guard<std::mutex> lock(made);
  std::unique_ptr<GemmLanes> &lanes = (*byContext)[context];
  if (!lanes) {
    auto created = create(count, kWorkspaceBytes);
    if (!created)
      return created.takeError();
    lanes = std::move(*created);
  }
  return lanes.get();
}

GemmLanes::~GemmLanes() {
  for (Lane &lane : lanes) {
    // The runner and workspace go after the stream's work is done.
    if (lane.stream) {
      driver.cuStreamSynchronize(lane.stream);
      driver.cuStreamDestroy(lane.stream);
    }
    if (lane.done)
      driver.cuEventDestroy(lane.done);
  }
  if (forked)
    driver.cuEventDestroy(forked);
}

Error GemmLanes::fork(CUstream stream) {
  if (Error error = driver.check(driver.cuEventRecord(forked, stream),
                                 "forking a grouped GEMM into side streams"))
    return error;
  for (Lane &lane : lanes)
    if (Error error =
            driver.check(driver.cuStreamWaitEvent(lane.stream, forked, 0),
                         "forking a grouped GEMM into side streams"))
      return error;
  return Error::success();
}

Error GemmLanes::join(CUstream stream) {
  for (Lane &lane : lanes) {
    if (Error error = driver.check(driver.cuEventRecord(lane.done, lane.stream),
                                   "joining a grouped GEMM's side streams"))
      return error;
    if (Error error =
            driver.check(driver.cuStreamWaitEvent(stream, lane.done, 0),
                         "joining a grouped GEMM's side streams"))
      return error;
  }
  return Error::success();
}
