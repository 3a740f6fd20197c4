//===- PlanMemory.h - liveness-based arena plan of a function ---*- C++ -*-===//
//
// The memory plan te-plan-memory records on the IR, as a C++ API for tools
// that want the numbers without the attributes (te-compile --stats).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_PASSES_PLANMEMORY_H
#define TEJIT_COMPILER_PASSES_PLANMEMORY_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/DenseMap.h"

#include <cstdint>
#include <vector>

namespace tejit {

/// Every arena buffer starts at a multiple of this many bytes (and its size is
/// rounded up to one), as cudaMalloc aligns allocations.
constexpr int64_t kBufferAlignment = 256;

/// One arena buffer: an op result that is not a view, with the live range of
/// it and all its views.
struct PlannedBuffer {
  /// The op result that owns the storage.
  mlir::Value value;
  /// Size in bytes, rounded up to kBufferAlignment.
  int64_t bytes = 0;
  /// Live range as positions of ops in the block, both ends included: from
  /// the defining op to the last op that reads the value or a view of it.
  int64_t start = 0, end = 0;
  /// Byte offset into the function's arena.
  int64_t offset = 0;
};

/// Where the intermediates of one function live. Arguments and returned
/// values (and their views) are buffers the caller owns, so they are not
/// part of the plan.
struct MemoryPlan {
  /// Size of the arena: the largest `offset + bytes` of any buffer.
  int64_t arenaBytes = 0;
  /// The largest total size of the buffers live at one op: no plan can use
  /// less than this, so `arenaBytes / peakLiveBytes` measures the allocator.
  int64_t peakLiveBytes = 0;
  /// The arena buffers, in the order their values are defined.
  std::vector<PlannedBuffer> buffers;

  /// The arena offset of `value`, or -1 when it owns no arena memory
  /// (arguments, returned values, views).
  int64_t offsetOf(mlir::Value value) const;

private:
  friend mlir::FailureOr<MemoryPlan> planMemory(mlir::func::FuncOp);
  llvm::DenseMap<mlir::Value, unsigned> bufferIndex;
};

/// Plans the arena of `function`, a single block of ops on statically shaped
/// tensors. Emits a diagnostic at the function or op and fails otherwise.
/// Does not change the IR; the te-plan-memory pass records the result.
mlir::FailureOr<MemoryPlan> planMemory(mlir::func::FuncOp function);

} // namespace tejit

#endif // TEJIT_COMPILER_PASSES_PLANMEMORY_H
