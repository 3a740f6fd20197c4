//===- SumOverlap.h - tensor-parallel sums beside the steps -----*- C++ -*-===//
//
// A program's tensor-parallel steps (tp_allreduce, and sequence
// parallelism's tp_allgather and tp_reducescatter) run on a stream of their
// own, forked from the caller's stream where the step stands and joined
// back before the first later step that touches the collective's input or
// output (and before anything that may communicate or leave the run): the
// steps in between, a layer's wgrad GEMM after its dgrad GEMM's sum or
// reduce-scatter, run beside the collective, as Transformer Engine overlaps
// them. One side stream keeps the collectives in the plan's order. te-fuse
// places each sum right after its input's producer and te-plan-memory keeps the
// input's bytes until the sum's first reader, so those steps do not touch them.
// Forks and joins are event records and waits: a CUDA graph captures them.
// TEJIT_TP_OVERLAP=0 runs them on the caller's stream instead.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_SUMOVERLAP_H
#define TEJIT_RUNTIME_SUMOVERLAP_H

#include "runtime/CudaDriver.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace tejit::runtime {

/// Bytes [begin, end) of device memory.
struct DeviceRange {
  CUdeviceptr begin = 0, end = 0;
  bool overlaps(const DeviceRange &other) const {
    return begin < other.end && other.begin < end;
  }
};

class SumOverlap {
public:
  explicit SumOverlap(const CudaDriver &driver) : driver(driver) {}
  ~SumOverlap();
  SumOverlap(const SumOverlap &) = delete;
  SumOverlap &operator=(const SumOverlap &) = delete;

  /// Whether TEJIT_TP_OVERLAP leaves the overlap on (the default).
  static bool enabled();

  /// Enqueues `enqueue(side)` on the side stream after everything enqueued
  /// on `stream` so far; `buffers` are the bytes the sum reads and writes.
  llvm::Error start(CUstream stream, llvm::ArrayRef<DeviceRange> buffers,
                    llvm::function_ref<llvm::Error(CUstream side)> enqueue);
  /// Makes `stream` wait for the sums in flight that touch any of `touched`.
  llvm::Error joinTouching(CUstream stream,
                           llvm::ArrayRef<DeviceRange> touched);
  /// Makes `stream` wait for every sum in flight.
  llvm::Error joinAll(CUstream stream);
  bool busy() const { return !inFlight.empty(); }

private:
  llvm::Expected<CUevent> nextEvent();
  llvm::Error join(CUstream stream, size_t index);

  struct Sum {
    CUevent done;
    llvm::SmallVector<DeviceRange, 2> buffers;
  };
  const CudaDriver &driver;
  CUstream side = nullptr;
  /// Events for forks and joins; reused from the first once nothing is in
  /// flight (a recorded event may be recorded again: waits already
  /// enqueued keep the earlier record).
  std::vector<CUevent> events;
  size_t eventsUsed = 0;
  std::vector<Sum> inFlight;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_SUMOVERLAP_H
