//===- GroupedGemm.h - a plan's grouped GEMMs -------------------*- C++ -*-===//
//
// Runs a "grouped_gemm" step (GroupedLinear, docs/grouped-linear.md): one
// GEMM per non-empty group through the GemmRunner (Gemm.h), so each group
// gets cuBLASLt's descriptors, heuristic (cached per shape), workspace and
// FP8 scale handling as a plan GEMM does.
//
//   rows         group g: out[o_g : o_g + m_g] = op(a[o_g : o_g + m_g])
//                op(b[g]) (+ bias[g]): M = m_g, a and out offset by o_g
//                rows (packed sub-matrices); out rows from o_G on are
//                zeroed (padding).
//   contraction  group g: out[g] = op(a_g) op(b_g) with K = m_g: a_g and
//                b_g are the segment's rows of a [T, .] operand (packed),
//                or its columns [o_g, o_g + m_g) of a [., T] one (leading
//                dimension T: FP8's TN a [M, T] and b [N, T]); out[g] of an
//                empty group is zeroed.
//
// FP8 steps take per-group scales: group g's scale_inv is element g of the
// f32 [G] vectors (4 bytes apart, so the runner stages them into its 16-byte
// aligned slots); the bias of group g is row g of [G, N]. Under
// Float8BlockScaling (GroupedGemmStep::aScaling, bScaling) the scale_inv
// tensors hold each operand's block scales in dialects/
// GroupedBlockScaleLayout.h's layouts: group g's GEMM is a block-scaled
// GEMM (no fast accumulation) whose scale pointers are the tensors plus the
// group's offset in its layout (segments for the rows form's a, stacked for
// its b, transposed segments for the contraction's a and b), which is a
// multiple of 16 bytes: nothing is staged. cuBLASLt's block-scaled GEMMs
// take no bias epilogue, so a block-scaled rows step adds its bias as C:
// run() first writes every group's out rows with its bias row, out[t] =
// bias[g(t)], by one launch of runtime/kernels/GroupedBias.cu on the step's
// stream (one per kMaxGroups groups; an extra pass over the output), and
// group g's GEMM then reads its rows as its residual (C = out, beta = 1).
// The groups' sizes come from the
// host (the executor's copy of the m_splits host argument), so each call
// may issue other GEMM shapes; nothing synchronizes.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_GROUPEDGEMM_H
#define TEJIT_RUNTIME_GROUPEDGEMM_H

#include "runtime/CudaDriver.h"
#include "runtime/Gemm.h"
#include "runtime/GemmLanes.h"
#include "runtime/Plan.h"

#include "llvm/ADT/ArrayRef.h"

#include <array>
#include <optional>
#include <vector>

namespace tejit::runtime {

/// Device pointers of a grouped_gemm step (bias and scales null when the
/// step has none).
struct GroupedGemmPointers {
  const void *a = nullptr, *b = nullptr;
  void *out = nullptr;
  /// FP8 steps: f32 [G] each, or block scale tensors (16-byte aligned).
  const void *aScaleInv = nullptr, *bScaleInv = nullptr;
  /// [G, N] (rows form).
  const void *bias = nullptr;
  /// [G, M, N], out's type (contraction form): C of each group's GEMM. It
  /// may be `out` (accumulating in place).
  const void *accumulate = nullptr;
  /// Contraction form accumulating in place: G device pointers, group g's
  /// [M, N] matrix, which is both C and out of its GEMM, instead of `out`
  /// and `accumulate` (then unused): a grouped weight's main_grads where
  /// they are G separate buffers (Program::setGroupPointers). Empty: the
  /// stacked buffers.
  llvm::ArrayRef<CUdeviceptr> groupOut;
  /// FP8 steps scaled per tensor (block scales need none):
  /// scaleSlotBytes(G) of 16-byte aligned device memory where
  /// run() stages every group's two scale_inv values with one strided copy
  /// per vector (cuBLASLt wants its FP8 scale pointers 16-byte aligned; the
  /// [G] vectors hold them 4 bytes apart). Null: the GEMM runner stages
  /// each group's scales itself, a 4-byte copy each (about 6 us apiece on
  /// an H200).
  void *scaleSlots = nullptr;
};

/// The bytes of GroupedGemmPointers::scaleSlots for `groups` groups: a
/// 16-byte slot per group for a's scale_inv, then one per group for b's.
inline size_t scaleSlotBytes(int64_t groups) { return size_t(groups) * 32; }

/// The host mirror of runtime/kernels/GroupedBias.cu's TejitGroupedBiasRows,
/// passed by value to tejit_grouped_bias_rows: 8-byte fields only, in the
/// same order. One launch writes the bias rows of up to kMaxGroups
/// consecutive groups: row t < rows of `out` gets the `rowBytes` bytes of
/// bias row g (from `bias`, the launch's first group's row), g the first
/// group with ends[g] > t; stored `vectorBytes` at a time (a power of two
/// up to 16 dividing rowBytes, out and bias).
struct GroupedBiasRowsParams {
  /// The kernel's cap: the row ends travel in the launch's parameters
  /// (2 KiB of the 4 KiB a launch may pass), so a captured launch replays
  /// the captured m_splits.
  static constexpr int64_t kMaxGroups = 256;
  CUdeviceptr out = 0, bias = 0;
  int64_t rows = 0, rowBytes = 0, vectorBytes = 0, groups = 0;
  int64_t ends[kMaxGroups] = {};
};
static_assert(sizeof(GroupedBiasRowsParams) ==
                  (6 + GroupedBiasRowsParams::kMaxGroups) * 8,
              "GroupedBiasRowsParams must match TejitGroupedBiasRows field "
              "for field");

class GroupedGemm {
public:
  /// Checks what a parsed plan guarantees (for steps built in memory):
  /// shapes, types, form. `function` holds the step (its bias's type).
  static llvm::Expected<GroupedGemm> create(const GroupedGemmStep &step,
                                            const FunctionPlan &function);

  /// Enqueues `step` on `stream` with the segment sizes `splits` (G values,
  /// checked here again: >= 0, sum <= T, multiples of 16 for FP8; block
  /// scale tensors 16-byte aligned): zeroes what no group writes (copies
  /// `accumulate` there instead where the step accumulates), then runs one
  /// GEMM per non-empty group (a block-scaled rows step with a bias first
  /// writes every group's out rows with its bias row, one kernel launch on
  /// `stream` per kMaxGroups groups, before the GEMMs fork to the lanes).
  /// Loads the bias rows kernel on first use in the current context
  /// (biasRowsKernel) unless useBiasRowsKernel gave it one: give it one
  /// where that first use could be under stream capture.
  /// With `lanes` (GemmLanes.h), groups too small to keep the GPU busy
  /// alone (fewer than kLaneFlops on average) run on the lanes, round
  /// robin, instead of one after another on `stream`.
  llvm::Error run(GemmRunner &gemms, llvm::ArrayRef<int32_t> splits,
                  const GroupedGemmPointers &pointers, CUstream stream,
                  const CudaDriver &driver, GemmLanes *lanes = nullptr) const;

  /// 16 GFLOP: about 20 us of an H100's or H200's FP8 tensor cores. A
  /// smaller GEMM leaves SMs idle (too few tiles) or is short enough that
  /// its launch and tail count (a small K): the fprop of 32 experts of 256
  /// tokens, 2048 -> 1408 (1.5 GFLOP a GEMM), ran 1.6x faster from a graph
  /// on 4 lanes.
  static constexpr double kLaneFlops = 16e9;

  const GroupedGemmStep &step() const { return grouped; }

  /// Whether run() writes the bias rows with tejit_grouped_bias_rows (a
  /// block-scaled rows step with a bias).
  bool writesBiasRows() const { return biasFilledValue.has_value(); }
  /// Has run() launch `kernel` as tejit_grouped_bias_rows: the executor's,
  /// from its program's modules (ModuleSet::helper), loaded at creation and
  /// unloaded with the program, so that no run loads a module (which a
  /// stream capture may refuse). Without it, run() takes biasRowsKernel's.
  void useBiasRowsKernel(CUfunction kernel) { biasRows = kernel; }
  /// tejit_grouped_bias_rows in the current context for callers without a
  /// program's modules (tools, tests): its module is loaded on the first
  /// call there and kept for the process's life, as the primary contexts
  /// the runtime uses are (Device.cpp). Thread-safe.
  static llvm::Expected<CUfunction> biasRowsKernel(const CudaDriver &driver);

  /// Checks per-group output pointers (GroupedGemmPointers::groupOut) for
  /// `step`: only a contraction that accumulates takes them, one per group,
  /// none null. Empty `groupOut` passes (the stacked buffers).
  static llvm::Error checkGroupOut(const GroupedGemmStep &step,
                                   llvm::ArrayRef<CUdeviceptr> groupOut);

  /// Elements (f32) from the start of a block-scaled step's a (`operandB`
  /// false) or b scale_inv tensor to group `group`'s scales, for the
  /// segment sizes `splits`: its offset in the operand's
  /// GroupedBlockScaleLayout.h layout.
  static int64_t blockScaleOffset(const GroupedGemmStep &step, bool operandB,
                                  llvm::ArrayRef<int32_t> splits,
                                  int64_t group);

private:
  explicit GroupedGemm(const GroupedGemmStep &step) : grouped(step) {}

  /// blockScaleOffset given the rows and the transposed block columns of
  /// the segments before `group`.
  static int64_t blockScaleOffsetAt(const GroupedGemmStep &step, bool operandB,
                                    int64_t group, int64_t rowsBefore,
                                    int64_t blocksBefore);

  /// A block-scaled step's scale offsets (blockScaleOffset) of every group,
  /// a's then b's, once the scale_inv bases are known to be 16-byte aligned
  /// and the offsets to be multiples of 16 bytes (else an error).
  llvm::Expected<std::vector<std::array<int64_t, 2>>>
  blockScaleOffsets(llvm::ArrayRef<int32_t> splits,
                    const GroupedGemmPointers &pointers) const;

  GroupedGemmStep grouped;
  /// A function holding the values the per-group GemmStep's epilogue
  /// names (the runner reads their types there): a group's bias row ([N])
  /// and its accumulated product ([M, N]); for a block-scaled rows step
  /// with a bias, its out rows written with the bias ([m_g, N], out's type;
  /// run() sets m_g per group in a copy) instead of the bias row.
  FunctionPlan groupValues;
  std::optional<int64_t> biasRowValue, accumulateValue, biasFilledValue;
  /// M, K, N of every group (K: the rows form's; M: the contraction's).
  int64_t m = 0, k = 0, n = 0;
  /// The bias's element type (rows form with a bias; out's under blocks).
  ElementType biasElement = ElementType::BF16;
  /// useBiasRowsKernel's kernel, if given.
  CUfunction biasRows = nullptr;
};

/// The PTX of runtime/kernels/GroupedBias.cu (tejit_grouped_bias_rows).
const char *groupedBiasPtx();

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_GROUPEDGEMM_H
