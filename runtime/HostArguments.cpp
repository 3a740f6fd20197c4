//===- HostArguments.cpp - arguments the caller passes in host memory -----===//
#include "runtime/HostArguments.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstring>
#include <utility>

using namespace tejit::runtime;
using llvm::Error;

Error tejit::runtime::checkSplits(llvm::ArrayRef<int32_t> splits,
                                  std::optional<int64_t> tokens, bool fp8,
                                  const llvm::Twine &what) {
  auto fail = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::InvalidArgument, what + ": " + why);
  };
  int64_t sum = 0;
  for (auto [index, size] : llvm::enumerate(splits)) {
    if (size < 0)
      return fail(llvm::formatv("m_splits[{0}] is {1}; every m_splits value "
                                "(the tokens of a group) must be >= 0",
                                index, size));
    if (fp8 && size % 16 != 0)
      return fail(llvm::formatv(
          "m_splits[{0}] is {1}, not a multiple of 16; under an FP8 recipe "
          "every m_splits value must be a multiple of 16 (the FP8 wgrad "
          "GEMMs start segments at 16-byte aligned columns; pad the groups, "
          "as Transformer Engine's Fp8Padding does)",
          index, size));
    sum += size;
  }
  if (tokens && sum > *tokens)
    return fail(llvm::formatv("m_splits sums to {0}, more than the {1} rows "
                              "(tokens) of the input; sum(m_splits) must be "
                              "<= the token count (rows past it are padding)",
                              sum, *tokens));
  return Error::success();
}

std::vector<HostArgumentRule>
tejit::runtime::hostArgumentRules(const FunctionPlan &function) {
  std::vector<HostArgumentRule> rules;
  for (size_t index : function.hostArguments()) {
    HostArgumentRule rule;
    rule.argument = index;
    rule.value = function.arguments[index].value;
    rule.count = function.values[rule.value].type.numElements();
    for (const Step &step : function.steps) {
      const auto *grouped = std::get_if<GroupedGemmStep>(&step);
      if (!grouped || grouped->mSplits != rule.value)
        continue;
      int64_t tokens = grouped->tokens();
      rule.tokens = rule.tokens ? std::min(*rule.tokens, tokens) : tokens;
      rule.fp8 |= grouped->fp8;
    }
    rules.push_back(rule);
  }
  return rules;
}

Error tejit::runtime::checkHostArgument(const HostArgumentRule &rule,
                                        llvm::ArrayRef<int32_t> values,
                                        const FunctionPlan &function) {
  const InterfaceEntry &entry = function.arguments[rule.argument];
  return checkSplits(values, rule.tokens, rule.fp8,
                     llvm::formatv("function '{0}', argument {1} ('{2}': "
                                   "{3} int32 values in host memory)",
                                   function.name, rule.argument, entry.name,
                                   rule.count));
}

//===----------------------------------------------------------------------===//
// Staging
//===----------------------------------------------------------------------===//

llvm::Expected<std::unique_ptr<HostArgumentStaging>>
HostArgumentStaging::create(llvm::ArrayRef<int64_t> counts,
                            const llvm::Twine &what) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  std::unique_ptr<HostArgumentStaging> staging(
      new HostArgumentStaging(*driver));
  for (int64_t count : counts) {
    staging->offsets.push_back(staging->bytes);
    staging->bytes += (size_t(count) * sizeof(int32_t) + 15) / 16 * 16;
  }
  auto device = DeviceBuffer::allocate(staging->bytes, what);
  if (!device)
    return device.takeError();
  staging->device = std::move(*device);
  return staging;
}

HostArgumentStaging::~HostArgumentStaging() {
  for (Slot &slot : slots) {
    // A copy may still read the slot: wait before freeing it.
    if (slot.pending)
      driver.cuEventSynchronize(slot.done);
    if (slot.done)
      driver.cuEventDestroy(slot.done);
    if (slot.host)
      driver.cuMemFreeHost(slot.host);
  }
  for (void *host : captured)
    driver.cuMemFreeHost(host);
  if (spare)
    driver.cuMemFreeHost(spare);
}

/// Copies `values` (one vector per host argument) into `host` at
/// `offsets`, zeroing the padding between them.
static void fill(char *host, size_t bytes, llvm::ArrayRef<size_t> offsets,
                 llvm::ArrayRef<std::vector<int32_t>> values) {
  std::memset(host, 0, bytes);
  for (auto [argument, list] : llvm::enumerate(values))
    std::memcpy(host + offsets[argument], list.data(),
                list.size() * sizeof(int32_t));
}

Error HostArgumentStaging::reserveCaptureSlot() {
  if (spare || !bytes)
    return Error::success();
  return driver.check(driver.cuMemAllocHost(&spare, bytes),
                      "allocating pinned host memory for the host "
                      "arguments (m_splits) of a CUDA graph");
}

Error HostArgumentStaging::uploadCaptured(
    llvm::ArrayRef<std::vector<int32_t>> values, CUstream stream) {
  if (!bytes)
    return Error::success();
  if (spare) {
    // The graph's memcpy node reads this memory at every replay: it is the
    // graph's from now on.
    void *host = std::exchange(spare, nullptr);
    captured.push_back(host);
    fill(static_cast<char *>(host), bytes, offsets, values);
    return driver.check(
        driver.cuMemcpyHtoDAsync(device.get(), host, bytes, stream),
        "copying host arguments (m_splits) to the device in a graph");
  }
  // No pinned memory reserved (allocating it would end a global-mode
  // capture): a memset node per value, which holds the value itself.
  for (auto [argument, list] : llvm::enumerate(values))
    for (auto [index, value] : llvm::enumerate(list))
      if (Error error = driver.check(
              driver.cuMemsetD32Async(device.get() + offsets[argument] +
                                          index * sizeof(int32_t),
                                      uint32_t(value), 1, stream),
              "setting host arguments (m_splits) on the device in a graph"))
        return error;
  return Error::success();
}

llvm::Expected<size_t> HostArgumentStaging::freeSlot() {
  // Oldest first: slots are used round-robin, so the one at `next` was
  // enqueued longest ago.
  for (size_t tried = 0; tried < slots.size(); ++tried) {
    size_t index = (next + tried) % slots.size();
    Slot &slot = slots[index];
    if (!slot.pending)
      return index;
    CUresult state = driver.cuEventQuery(slot.done);
    if (state == CUDA_SUCCESS) {
      slot.pending = false;
      return index;
    }
    if (state != CUDA_ERROR_NOT_READY)
      return driver.error(state, "asking whether a copy of host arguments "
                                 "(m_splits) has finished");
  }
  if (slots.size() < kMaxSlots) {
    Slot slot;
    if (Error error = driver.check(driver.cuMemAllocHost(&slot.host, bytes),
                                   "allocating pinned host memory for host "
                                   "arguments (m_splits)"))
      return std::move(error);
    if (CUresult result =
            driver.cuEventCreate(&slot.done, CU_EVENT_DISABLE_TIMING);
        result != CUDA_SUCCESS) {
      driver.cuMemFreeHost(slot.host);
      return driver.error(result, "creating an event for host arguments");
    }
    // Before the oldest: the ring stays in the order it was used.
    slots.insert(slots.begin() + next, slot);
    return next;
  }
  // Every slot's copy is still queued: the host is kMaxSlots runs ahead of
  // the GPU. Wait for the oldest.
  Slot &oldest = slots[next];
  if (Error error = driver.check(driver.cuEventSynchronize(oldest.done),
                                 "waiting for a copy of host arguments "
                                 "(m_splits) to finish"))
    return std::move(error);
  oldest.pending = false;
  return next;
}

Error HostArgumentStaging::upload(llvm::ArrayRef<std::vector<int32_t>> values,
                                  CUstream stream) {
  if (!bytes)
    return Error::success();
  llvm::Expected<size_t> index = freeSlot();
  if (!index)
    return index.takeError();
  Slot &slot = slots[*index];
  // A later capture's pinned memory, allocated now that no capture runs.
  if (Error error = reserveCaptureSlot())
    return error;
  auto *host = static_cast<char *>(slot.host);
  fill(host, bytes, offsets, values);
  if (Error error = driver.check(
          driver.cuMemcpyHtoDAsync(device.get(), host, bytes, stream),
          "copying host arguments (m_splits) to the device"))
    return error;
  slot.pending = true;
  next = (*index + 1) % slots.size();
  return driver.check(driver.cuEventRecord(slot.done, stream),
                      "recording the copy of host arguments");
}
