//===- Stats.cpp - what a compiled function costs to run
//-------------------===//
#include "compiler/passes/Stats.h"
#include "compiler/passes/PlanMemory.h"
#include "dialects/AttentionViews.h"
#include "dialects/TEDialect.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit;

static int64_t bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  int64_t elementBytes =
      (tensor.getElementType().getIntOrFloatBitWidth() + 7) / 8;
  return tensor.getNumElements() * elementBytes;
}

FailureOr<FunctionStats> tejit::computeStats(func::FuncOp function) {
  FunctionStats stats;
  stats.name = function.getName().str();
  function.walk([&](Operation *op) {
    // A grouped GEMM (GroupedLinear) counts once: one plan step, which the
    // runtime runs as a cuBLASLt call per non-empty group.
    if (isa<MatmulOp, ScaledMatmulOp, GroupedMatmulOp, GroupedScaledMatmulOp>(
            op)) {
      ++stats.gemms;
      stats.fp8Gemms += isa<ScaledMatmulOp, GroupedScaledMatmulOp>(op);
    }
    if (isa<AttentionOp, AttentionBwdOp, Fp8AttentionOp, Fp8AttentionBwdOp,
            KvCacheAttentionOp>(op))
      ++stats.attentions;
    // The bytes each rank contributes to a collective: a sum's or a
    // scatter's input, a gather's output.
    if (isa<TpAllReduceOp, TpReduceScatterOp>(op)) {
      ++stats.tpSums;
      stats.tpSumBytes += bytesOf(op->getOperand(0).getType());
    }
    if (isa<TpAllGatherOp>(op)) {
      ++stats.tpSums;
      stats.tpSumBytes += bytesOf(op->getResult(0).getType());
    }
    // Context parallelism's: the whole sequence either way.
    if (isa<CpAllGatherOp>(op)) {
      ++stats.cpCollectives;
      stats.cpBytes += bytesOf(op->getResult(0).getType());
    }
    if (isa<CpReduceScatterOp>(op)) {
      ++stats.cpCollectives;
      stats.cpBytes += bytesOf(op->getOperand(0).getType());
    }
    // An all-to-all's sides hold as many bytes: the whole sequence of 1/N
    // of the heads, this rank's tokens of all of them.
    if (isa<CpAllToAllOp>(op)) {
      ++stats.cpCollectives;
      stats.cpBytes += bytesOf(op->getOperand(0).getType());
    }
  });
  for (Operation &op : function.front()) {
    bool libraryCall =
        isa<MatmulOp, ScaledMatmulOp, GroupedMatmulOp, GroupedScaledMatmulOp,
            AttentionOp, AttentionBwdOp, Fp8AttentionOp, Fp8AttentionBwdOp,
            KvCacheAttentionOp>(op);
    if (auto fused = dyn_cast<FusedOp>(op))
      libraryCall = fused.getKind() == "gemm";
    bool view = isa<ReshapeOp>(op) || isMetaSlotRead(&op) ||
                isAttentionInputSlice(&op) || isAttentionGradConcat(&op);
    // Collectives over ranks (NCCL) are not generated kernels.
    bool collective =
        isa<AmaxAllReduceOp, TpAllReduceOp, TpAllGatherOp, TpReduceScatterOp,
            CpAllGatherOp, CpReduceScatterOp, CpAllToAllOp>(op);
    if (!libraryCall && !view && !collective && !isa<func::ReturnOp>(op))
      ++stats.kernels;
  }
  for (unsigned i = 0; i < function.getNumResults(); ++i)
    if (auto name = function.getResultAttrOfType<StringAttr>(i, "te.name");
        name && name.getValue().starts_with("saved."))
      stats.savedBytes += bytesOf(function.getResultTypes()[i]);
  FailureOr<MemoryPlan> plan = planMemory(function);
  if (failed(plan))
    return failure();
  stats.arenaBytes = plan->arenaBytes;
  return stats;
}

LogicalResult tejit::printStats(ModuleOp module, llvm::raw_ostream &os) {
  os << llvm::format("%-28s %8s %6s %9s %10s %12s %12s %14s %14s\n",
                     (const char *)"function", (const char *)"kernels",
                     (const char *)"GEMMs", (const char *)"FP8 GEMMs",
                     (const char *)"attention", (const char *)"arena MiB",
                     (const char *)"saved MiB", (const char *)"TP comm (MiB)",
                     (const char *)"CP comm (MiB)");
  for (auto function : module.getOps<func::FuncOp>()) {
    FailureOr<FunctionStats> stats = computeStats(function);
    if (failed(stats))
      return failure();
    std::string sums = llvm::formatv("{0} ({1:F2})", stats->tpSums,
                                     stats->tpSumBytes / 1048576.0)
                           .str();
    std::string cp = llvm::formatv("{0} ({1:F2})", stats->cpCollectives,
                                   stats->cpBytes / 1048576.0)
                         .str();
    os << llvm::format(
        "%-28s %8lld %6lld %9lld %10lld %12.2f %12.2f %14s %14s\n",
        stats->name.c_str(), (long long)stats->kernels, (long long)stats->gemms,
        (long long)stats->fp8Gemms, (long long)stats->attentions,
        stats->arenaBytes / 1048576.0, stats->savedBytes / 1048576.0,
        sums.c_str(), cp.c_str());
  }
  return success();
}
