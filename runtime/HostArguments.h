//===- HostArguments.h - arguments passed in host memory --------*- C++ -*-===//
//
// A grouped op's m_splits (docs/grouped-linear.md) is a plan argument with
// "host": true: the caller passes a host pointer to G int32 values (the
// tokens routed to each group), which the runtime needs on the host (each
// grouped GEMM's sizes) and on the device (the grouped kernels compute
// their segment offsets from them). Before a function's steps the executor
// reads the values once, checks them (the rules below, checkSplits), and
// copies them into device memory of its own, which kernel steps are given
// wherever their args name the argument; grouped_gemm steps use the host
// copy. A CUDA graph captured from such a function replays the values of
// the captured call (its GEMM sizes and its device copy), so the executor
// refuses capture unless the caller allowed it
// (Executor::setHostArgumentsCapturable): TE's GroupedLinear with fixed
// splits (capacity-padded routing) captured by make_graphed_callables.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_HOSTARGUMENTS_H
#define TEJIT_RUNTIME_HOSTARGUMENTS_H

#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Plan.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace tejit::runtime {

/// Checks segment sizes against the run-time rules of grouped ops: every
/// m_g >= 0, sum(m) <= `tokens` (T; not checked when absent), and with
/// `fp8` every m_g a multiple of 16 (the FP8 wgrad GEMMs read segments of
/// transposed copies at column o_g, which cuBLASLt wants 16-byte aligned;
/// Transformer Engine asks the same of its splits). Errors
/// (ErrorCode::InvalidArgument) start with `what` and name m_splits and the
/// rule broken. A pure function: no device needed.
llvm::Error checkSplits(llvm::ArrayRef<int32_t> splits,
                        std::optional<int64_t> tokens, bool fp8,
                        const llvm::Twine &what);

/// What a function's host argument must satisfy, from the plan alone.
struct HostArgumentRule {
  /// The argument's index in the function, and its value id.
  size_t argument = 0;
  int64_t value = 0;
  /// G: the int32 values the caller passes.
  int64_t count = 0;
  /// The smallest T of the grouped_gemm steps reading it (none: no such
  /// step, and only m_g >= 0 and the FP8 rule are checked).
  std::optional<int64_t> tokens;
  /// Whether an FP8 grouped_gemm step reads it (m_g % 16 == 0).
  bool fp8 = false;
};

/// The rules of `function`'s host arguments, in argument order.
std::vector<HostArgumentRule> hostArgumentRules(const FunctionPlan &function);

/// Checks `values`, the caller's values of the host argument `rule` is
/// about, with checkSplits; errors name the function and the argument.
llvm::Error checkHostArgument(const HostArgumentRule &rule,
                              llvm::ArrayRef<int32_t> values,
                              const FunctionPlan &function);

/// The device copies of a function's host arguments, and the pinned host
/// memory their copies go through.
///
/// Why a staging ring: cuMemcpyHtoDAsync from the caller's (pageable or
/// short-lived) memory would either block or read the memory after the call
/// returned, when the caller may have changed or freed it. So the values
/// are first copied, on the host and during the call, into a pinned slot of
/// the executor's own, and the device copy is enqueued from there on the
/// run's stream, followed by an event. A slot is used again only once its
/// event has completed (cuEventQuery): the host never waits while a free
/// slot exists, and new slots are made (up to kMaxSlots, then it waits for
/// the oldest) while the GPU runs behind. The device buffer itself is
/// overwritten in stream order: runs of one executor share it, as they
/// share the arena, so they must run on one stream (or be ordered).
class HostArgumentStaging {
public:
  /// Device memory for `counts[i]` int32 values per host argument (each at
  /// a 16-byte aligned offset); the context must be current.
  static llvm::Expected<std::unique_ptr<HostArgumentStaging>>
  create(llvm::ArrayRef<int64_t> counts, const llvm::Twine &what);
  ~HostArgumentStaging();
  HostArgumentStaging(const HostArgumentStaging &) = delete;
  HostArgumentStaging &operator=(const HostArgumentStaging &) = delete;

  /// Enqueues on `stream` the copy of `values` (one vector per host
  /// argument, of the counts given to create) to the device copies.
  llvm::Error upload(llvm::ArrayRef<std::vector<int32_t>> values,
                     CUstream stream);
  /// The same on a capturing `stream`, with no call a global-mode capture
  /// refuses (no allocation, no event): the copy reads the pinned memory
  /// that the last upload() reserved, which the graph keeps (until this
  /// object goes) so that every replay copies the captured values; without
  /// one (two captures with no eager run between), one memset node per
  /// value.
  llvm::Error uploadCaptured(llvm::ArrayRef<std::vector<int32_t>> values,
                             CUstream stream);
  /// Where host argument `index`'s device copy lives.
  CUdeviceptr address(size_t index) const {
    return device.get() + offsets[index];
  }

  /// The most pinned slots in flight before upload waits for the oldest.
  static constexpr size_t kMaxSlots = 16;

private:
  HostArgumentStaging(const CudaDriver &driver) : driver(driver) {}
  /// A free slot (its last copy done), made or waited for if need be.
  llvm::Expected<size_t> freeSlot();

  struct Slot {
    void *host = nullptr;
    CUevent done = nullptr;
    /// Whether `done` was recorded after a copy reading `host`.
    bool pending = false;
  };
  const CudaDriver &driver;
  DeviceBuffer device;
  std::vector<size_t> offsets;
  size_t bytes = 0;
  std::vector<Slot> slots;
  /// Pinned copies read by captured graphs (uploadCaptured), and the one
  /// reserved for the next capture.
  std::vector<void *> captured;
  void *spare = nullptr;
  /// Allocates `spare` unless there is one.
  llvm::Error reserveCaptureSlot();
  /// The slot the search for a free one starts at (the oldest in use).
  size_t next = 0;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_HOSTARGUMENTS_H
