//===- Stats.h - what a compiled function costs to run ----------*- C++ -*-===//
#ifndef TEJIT_COMPILER_PASSES_STATS_H
#define TEJIT_COMPILER_PASSES_STATS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace tejit {

/// Launch counts and memory of one function, for te-compile --stats.
struct FunctionStats {
  std::string name;
  /// Generated kernels: te.fused regions and every other op that computes
  /// (not views, not reads of a meta slot, not library calls, not
  /// all-reduces over ranks).
  int64_t kernels = 0;
  /// GEMMs (cuBLASLt calls), FP8 or not, fused epilogues included; a
  /// grouped GEMM (GroupedLinear) counts once, though the runtime calls
  /// cuBLASLt once per non-empty group.
  int64_t gemms = 0, fp8Gemms = 0;
  /// Fused attention calls (cuDNN), forward or backward.
  int64_t attentions = 0;
  /// Arena of intermediates (te-plan-memory), and bytes of the values a
  /// forward function saves for its backward function.
  int64_t arenaBytes = 0, savedBytes = 0;
  /// Tensor-parallel collectives (te.tp_all_reduce, te.tp_all_gather,
  /// te.tp_reduce_scatter) and the bytes each rank sends into them (a sum's
  /// or a scatter's input, a gather's output).
  int64_t tpSums = 0, tpSumBytes = 0;
  /// Context-parallel collectives (te.cp_all_gather, te.cp_reduce_scatter,
  /// te.cp_all_to_all) and the whole-sequence bytes each moves (an
  /// all-to-all's: the whole sequence of its 1/N of the heads).
  int64_t cpCollectives = 0, cpBytes = 0;
};

/// Counts `function`'s launches and plans its memory; fails (with a
/// diagnostic) when the memory cannot be planned.
mlir::FailureOr<FunctionStats> computeStats(mlir::func::FuncOp function);

/// Prints one row per function of `module`.
mlir::LogicalResult printStats(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace tejit

#endif // TEJIT_COMPILER_PASSES_STATS_H
