//===- PlanMemory.cpp - te-plan-memory: arena offsets by liveness ---------===//
//
// Liveness is by position in the function's single block: a buffer is live
// from its defining op through the last op that reads it or one of its
// views, both ends included, so an op's results never share memory with its
// operands (kernels are not assumed to work in place).
//
// Offsets are assigned greedily by size (Pisarchyk & Lee, "Efficient Memory
// Management for Deep Neural Net Inference", 2020): buffers are placed
// largest first, each into the smallest gap between the buffers already
// placed whose live ranges overlap its own, or above all of them when no gap
// fits. Placing large buffers first keeps small ones from fragmenting the
// arena: on every bundled example the arena equals the peak live size, the
// lower bound, and on random functions it is 5% above it on average
// (tests/unit/PlanMemoryTest.cpp reports both).
//
//===----------------------------------------------------------------------===//
#include "compiler/passes/PlanMemory.h"
#include "compiler/passes/Passes.h"
#include "dialects/AttentionViews.h"
#include "dialects/InPlaceSum.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"

namespace tejit {
#define GEN_PASS_DEF_TEPLANMEMORY
#include "compiler/passes/Passes.h.inc"
} // namespace tejit

using namespace mlir;
using namespace tejit;

int64_t MemoryPlan::offsetOf(Value value) const {
  auto it = bufferIndex.find(value);
  return it == bufferIndex.end() ? -1 : buffers[it->second].offset;
}

namespace {

/// Whether `op` aliases its operand instead of writing a buffer of its own:
/// a reshape, a read of one FP8 meta slot (a pointer offset), q, k or v
/// sliced out of a QKV projection for attention (a strided view), or a
/// tensor-parallel sum in place (dialects/InPlaceSum.h).
bool isView(Operation *op) {
  return isa<te::ReshapeOp>(op) || te::isMetaSlotRead(op) ||
         te::isAttentionInputSlice(op) || te::isInPlaceSum(op);
}

/// The bytes of an op result that is a statically shaped tensor, rounded up to
/// kBufferAlignment; fails with a diagnostic at the op for anything else.
FailureOr<int64_t> bufferBytes(Value value) {
  Operation *op = value.getDefiningOp();
  auto type = dyn_cast<RankedTensorType>(value.getType());
  unsigned number = cast<OpResult>(value).getResultNumber();
  if (!type || !type.hasStaticShape())
    return op->emitOpError() << "result #" << number
                             << " needs a static shape for te-plan-memory, got "
                             << value.getType();
  Type element = type.getElementType();
  if (!element.isIntOrFloat())
    return op->emitOpError() << "result #" << number
                             << " has an element type te-plan-memory cannot "
                                "size: "
                             << element;
  // Sub-byte types (i1 masks) take a byte per element, as kernels store them.
  int64_t elementBytes = (element.getIntOrFloatBitWidth() + 7) / 8;
  int64_t bytes = type.getNumElements() * elementBytes;
  return llvm::alignTo(bytes, kBufferAlignment);
}

/// Checks what te-plan-memory can handle: one block, no nested regions but
/// te.fused kernels, whose inner values live in registers and shared memory.
LogicalResult checkStructure(func::FuncOp function) {
  if (!llvm::hasSingleElement(function.getBody()))
    return function.emitOpError()
           << "te-plan-memory needs a single-block function";
  for (Operation &op : function.front())
    if (op.getNumRegions() != 0 && !isa<te::FusedOp>(op))
      return op.emitOpError()
             << "has regions, which te-plan-memory does not handle";
  return success();
}

/// The live range of every op result that is not a view, extended to the
/// last reader of any view of it. Results that reach func.return, directly or
/// through views, are left out: the caller owns them. Sizes are left at 0.
std::vector<PlannedBuffer> liveRanges(func::FuncOp function) {
  SmallVector<PlannedBuffer> buffers;
  SmallVector<bool> returned;
  // The first op that reads each buffer (-1: none yet).
  SmallVector<int64_t> firstRead;
  // The buffer of each value that owns one or views one.
  DenseMap<Value, unsigned> bufferOf;
  // Tensor-parallel collectives: (input's buffer, output's buffer).
  SmallVector<std::pair<unsigned, unsigned>> collectives;
  for (auto [here, op] : llvm::enumerate(function.front())) {
    for (Value operand : op.getOperands()) {
      auto it = bufferOf.find(operand);
      if (it == bufferOf.end())
        continue; // An argument, or a view of one.
      if (isa<func::ReturnOp>(op))
        returned[it->second] = true;
      buffers[it->second].end = int64_t(here);
      if (firstRead[it->second] < 0)
        firstRead[it->second] = int64_t(here);
    }
    // (A sum in place is a view: its readers keep its input's buffer.)
    // Context parallelism's gathers, scatters and all-to-alls run on the
    // caller's stream (they reorder through the scratch): their inputs
    // need no more time.
    if (isa<te::TpAllReduceOp, te::TpAllGatherOp, te::TpReduceScatterOp>(op) &&
        !te::isInPlaceSum(&op)) {
      auto input = bufferOf.find(op.getOperand(0));
      if (input != bufferOf.end())
        collectives.push_back({input->second, unsigned(buffers.size())});
    }
    if (isView(&op)) {
      auto it = bufferOf.find(op.getOperand(0));
      if (it != bufferOf.end())
        bufferOf[op.getResult(0)] = it->second;
      continue;
    }
    auto newBuffer = [&](Value value) {
      bufferOf[value] = buffers.size();
      buffers.push_back({value, /*bytes=*/0, int64_t(here), int64_t(here),
                         /*offset=*/0});
      returned.push_back(false);
      firstRead.push_back(-1);
    };
    // Attention gradients that a concat gathers live in the concat's
    // buffer, which starts with the first of them.
    if (te::isAttentionGradConcat(&op))
      continue;
    for (Value result : op.getResults()) {
      if (auto slot = te::gradConcatSlot(result)) {
        Value gathered = slot->first.getOutput();
        if (!bufferOf.count(gathered))
          newBuffer(gathered);
        bufferOf[result] = bufferOf[gathered];
        continue;
      }
      newBuffer(result);
    }
  }
  // The runtime runs tensor-parallel collectives (sums, gathers, scatters)
  // on a stream of its own while the ops up to the output's first reader
  // run (docs/tensor-parallel.md, "Overlap"): the input must stay untouched
  // until then.
  for (auto [input, output] : collectives)
    buffers[input].end = std::max(
        buffers[input].end, std::max(firstRead[output], buffers[output].start));
  std::vector<PlannedBuffer> arena;
  for (auto [buffer, isReturned] : llvm::zip(buffers, returned))
    if (!isReturned)
      arena.push_back(buffer);
  return arena;
}

bool liveRangesOverlap(const PlannedBuffer &a, const PlannedBuffer &b) {
  return a.start <= b.end && b.start <= a.end;
}

/// The offset for `buffer`: the smallest gap between the placed buffers whose
/// live ranges overlap its own that fits it, else the top of those buffers.
int64_t bestFit(const PlannedBuffer &buffer,
                ArrayRef<const PlannedBuffer *> placed) {
  SmallVector<const PlannedBuffer *> conflicts;
  for (const PlannedBuffer *other : placed)
    if (liveRangesOverlap(buffer, *other))
      conflicts.push_back(other);
  llvm::sort(conflicts, [](const PlannedBuffer *a, const PlannedBuffer *b) {
    return a->offset < b->offset;
  });
  int64_t top = 0, best = -1, bestGap = INT64_MAX;
  for (const PlannedBuffer *other : conflicts) {
    int64_t gap = other->offset - top;
    if (gap >= buffer.bytes && gap < bestGap) {
      best = top;
      bestGap = gap;
    }
    top = std::max(top, other->offset + other->bytes);
  }
  return best >= 0 ? best : top;
}

/// Assigns offsets, largest buffer first (earlier definition on ties), and
/// returns the arena size.
int64_t assignOffsets(MutableArrayRef<PlannedBuffer> buffers) {
  SmallVector<PlannedBuffer *> order;
  for (PlannedBuffer &buffer : buffers)
    order.push_back(&buffer);
  llvm::stable_sort(order, [](const PlannedBuffer *a, const PlannedBuffer *b) {
    return a->bytes > b->bytes;
  });
  SmallVector<const PlannedBuffer *> placed;
  int64_t arena = 0;
  for (PlannedBuffer *buffer : order) {
    buffer->offset = bestFit(*buffer, placed);
    placed.push_back(buffer);
    arena = std::max(arena, buffer->offset + buffer->bytes);
  }
  return arena;
}

/// The largest sum of the sizes of the buffers live at one position.
int64_t peakLiveBytes(ArrayRef<PlannedBuffer> buffers, int64_t positions) {
  // +bytes where a range starts, -bytes one past where it ends.
  SmallVector<int64_t> delta(positions + 1, 0);
  for (const PlannedBuffer &buffer : buffers) {
    delta[buffer.start] += buffer.bytes;
    delta[buffer.end + 1] -= buffer.bytes;
  }
  int64_t live = 0, peak = 0;
  for (int64_t change : delta)
    peak = std::max(peak, live += change);
  return peak;
}

} // namespace

FailureOr<MemoryPlan> tejit::planMemory(func::FuncOp function) {
  if (function.isExternal())
    return MemoryPlan();
  if (failed(checkStructure(function)))
    return failure();
  MemoryPlan plan;
  plan.buffers = liveRanges(function);
  // Size every buffer before failing, so that all unsized ones are reported.
  bool sized = true;
  for (PlannedBuffer &buffer : plan.buffers) {
    FailureOr<int64_t> bytes = bufferBytes(buffer.value);
    sized &= succeeded(bytes);
    buffer.bytes = succeeded(bytes) ? *bytes : 0;
  }
  if (!sized)
    return failure();
  plan.arenaBytes = assignOffsets(plan.buffers);
  plan.peakLiveBytes =
      peakLiveBytes(plan.buffers, std::distance(function.front().begin(),
                                                function.front().end()));
  for (auto [index, buffer] : llvm::enumerate(plan.buffers))
    plan.bufferIndex[buffer.value] = index;
  return plan;
}

namespace {

/// Writes `te.offsets` on every op with results and the arena and peak sizes
/// on the function.
void recordPlan(func::FuncOp function, const MemoryPlan &plan) {
  Builder builder(function.getContext());
  for (Operation &op : function.front()) {
    if (op.getNumResults() == 0)
      continue;
    SmallVector<int64_t> offsets;
    for (Value result : op.getResults())
      offsets.push_back(plan.offsetOf(result));
    op.setAttr("te.offsets", builder.getI64ArrayAttr(offsets));
  }
  function->setAttr("te.arena_bytes",
                    builder.getI64IntegerAttr(plan.arenaBytes));
  function->setAttr("te.peak_live_bytes",
                    builder.getI64IntegerAttr(plan.peakLiveBytes));
}

struct PlanMemoryPass : public tejit::impl::TEPlanMemoryBase<PlanMemoryPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    FailureOr<MemoryPlan> plan = planMemory(function);
    if (failed(plan))
      return signalPassFailure();
    recordPlan(function, *plan);
  }
};

} // namespace
