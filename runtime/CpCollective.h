//===- CpCollective.h - context parallelism's gathers and scatters -*- C++ -*-//
//
// The cp_allgather and cp_reducescatter steps (runtime/Plan.h,
// docs/context-parallel.md) over a group's all-gather and reduce-scatter,
// which exchange the ranks' tokens in rank order: [ranks, outer, L, inner]
// for a tensor [outer, s, inner] split along its sequence dim (sbhd: outer
// 1; bshd: outer b) into L = s / ranks rows per rank. The whole tensor keeps
// the sequence in order, so a step copies each rank's rows (each of its two
// chunks, load balanced) between the two layouts, through the step's
// scratch; a gather that needs no reordering (sbhd, not load balanced)
// lands in place.
//
// A cp_alltoall (cp_comm_type a2a) exchanges blocks of heads: to heads,
// this rank's tokens are copied head block by head block into a send
// buffer [ranks][outer rows, H / ranks heads] (block j for rank j), the
// group's all-to-all returns [ranks][rank j's tokens of this rank's heads]
// (the gather's rank-order layout for a tensor of H / ranks heads), and the
// gather's reordering places them; to sequence runs the same backwards.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_CPCOLLECTIVE_H
#define TEJIT_RUNTIME_CPCOLLECTIVE_H

#include "runtime/CudaDriver.h"
#include "runtime/Plan.h"
#include "runtime/TensorParallel.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace tejit::runtime {

/// One block of rows between the rank-order buffer and the whole tensor:
/// `height` runs of `width` bytes, `rankPitch` / `wholePitch` bytes apart,
/// starting `rankOffset` / `wholeOffset` bytes in.
struct CpRowCopy {
  size_t rankOffset = 0, wholeOffset = 0, width = 0, height = 0;
  size_t rankPitch = 0, wholePitch = 0;
};

/// The copies that move every rank's tokens of `step` between the
/// rank-order buffer and the whole tensor; empty when the two layouts are
/// the same (the step then runs in place).
std::vector<CpRowCopy> cpReorderCopies(const CpCollectiveStep &step,
                                       const FunctionPlan &function);

/// The copies between a tensor of all H heads (the "whole" side: this
/// rank's tokens) and the all-to-all's rank-order buffer of head blocks
/// (the "rank" side: block j holds heads [j H / N, (j + 1) H / N) of every
/// row before the head dim) for a cp_alltoall step; one 2D copy per block.
std::vector<CpRowCopy> cpHeadBlockCopies(const CpCollectiveStep &step,
                                         const FunctionPlan &function);

/// The scratch `step` of `function` needs: the whole tensor's bytes, or 0
/// when it runs in place; for an all-to-all twice that (a send and a
/// receive buffer), once when the tokens need no reordering.
size_t cpCollectiveScratchBytes(const CpCollectiveStep &step,
                                const FunctionPlan &function);

/// Enqueues `step` on `stream` over `group`: `in` and `out` are its values'
/// addresses, `scratch` holds cpCollectiveScratchBytes().
llvm::Error enqueueCpCollective(const CpCollectiveStep &step,
                                const FunctionPlan &function, CUdeviceptr in,
                                CUdeviceptr out, CUdeviceptr scratch,
                                TensorParallelGroup &group,
                                const CudaDriver &driver, CUstream stream);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_CPCOLLECTIVE_H
