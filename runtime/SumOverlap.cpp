//===- SumOverlap.cpp - tensor-parallel sums beside the steps -------------===//
#include "runtime/SumOverlap.h"

#include <cstdlib>
#include <cstring>

using namespace tejit::runtime;
using llvm::Error;

SumOverlap::~SumOverlap() {
  for (CUevent event : events)
    driver.cuEventDestroy(event);
  if (side)
    driver.cuStreamDestroy(side);
}

bool SumOverlap::enabled() {
  const char *value = std::getenv("TEJIT_TP_OVERLAP");
  return !value || std::strcmp(value, "0") != 0;
}

llvm::Expected<CUevent> SumOverlap::nextEvent() {
  if (eventsUsed == events.size()) {
    CUevent event = nullptr;
    if (Error error =
            driver.check(driver.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING),
                         "creating an event for a tensor-parallel sum"))
      return std::move(error);
    events.push_back(event);
  }
  return events[eventsUsed++];
}

Error SumOverlap::start(CUstream stream, llvm::ArrayRef<DeviceRange> buffers,
                        llvm::function_ref<Error(CUstream side)> enqueue) {
  if (!side)
    if (Error error =
            driver.check(driver.cuStreamCreate(&side, CU_STREAM_NON_BLOCKING),
                         "creating the stream of the tensor-parallel sums"))
      return error;
  llvm::Expected<CUevent> forked = nextEvent();
  if (!forked)
    return forked.takeError();
  llvm::Expected<CUevent> done = nextEvent();
  if (!done)
    return done.takeError();
  if (Error error = driver.check(driver.cuEventRecord(*forked, stream),
                                 "forking a tensor-parallel sum"))
    return error;
  if (Error error = driver.check(driver.cuStreamWaitEvent(side, *forked, 0),
                                 "forking a tensor-parallel sum"))
    return error;
  if (Error error = enqueue(side))
    return error;
  if (Error error = driver.check(driver.cuEventRecord(*done, side),
                                 "recording a tensor-parallel sum"))
    return error;
  inFlight.push_back({*done, {buffers.begin(), buffers.end()}});
  return Error::success();
}

Error SumOverlap::join(CUstream stream, size_t index) {
  Error error =
      driver.check(driver.cuStreamWaitEvent(stream, inFlight[index].done, 0),
                   "joining a tensor-parallel sum");
  inFlight.erase(inFlight.begin() + index);
  if (inFlight.empty())
    eventsUsed = 0;
  return error;
}

Error SumOverlap::joinTouching(CUstream stream,
                               llvm::ArrayRef<DeviceRange> touched) {
  for (size_t index = inFlight.size(); index-- > 0;) {
    bool touches = llvm::any_of(touched, [&](const DeviceRange &range) {
      return llvm::any_of(inFlight[index].buffers, [&](const DeviceRange &sum) {
        return sum.overlaps(range);
      });
    });
    if (touches)
      if (Error error = join(stream, index))
        return error;
  }
  return Error::success();
}

Error SumOverlap::joinAll(CUstream stream) {
  while (!inFlight.empty())
    if (Error error = join(stream, inFlight.size() - 1))
      return error;
  return Error::success();
}
