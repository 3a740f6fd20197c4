//===- AmaxReducer.h - DelayedScaling's amax all-reduce ---------*- C++ -*-===//
//
// With DelayedScaling's reduce_amax, every rank that trains one model scales
// its FP8 tensors from the same amaxes: the te.amax_allreduce step before
// each scale update replaces this rank's amaxes by their element-wise max
// over the ranks (FP8.md). A program without a reducer is one process, and
// the step is a copy. Two ways to reduce:
//   * NcclAmaxReducer: over an NCCL communicator (NcclComm.h), made from a
//     unique id that one rank creates and every rank receives (or the
//     caller's own);
//   * CallbackAmaxReducer: through a function of the caller's (tejit.pytorch
//     calls torch.distributed.all_reduce on the process group TE would use,
//     so the reduction is ordered with the job's other collectives).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_AMAXREDUCER_H
#define TEJIT_RUNTIME_AMAXREDUCER_H

#include "runtime/CudaDriver.h"
#include "runtime/NcclComm.h"

#include <memory>
#include <string>

namespace tejit::runtime {

class AmaxReducer {
public:
  virtual ~AmaxReducer();

  /// Enqueues on `stream`: `out` = the element-wise max over the ranks of
  /// the `count` f32 amaxes each rank has at `in` (`in` and `out` may be the
  /// same buffer). Never synchronizes, so it can be captured in a graph
  /// where the reduction itself can.
  virtual llvm::Error allReduceMax(CUdeviceptr in, CUdeviceptr out,
                                   size_t count, CUstream stream) = 0;
  /// The CUDA device the reducer works on, -1 when any.
  virtual int device() const { return -1; }
  /// "NCCL 2.28.9, rank 0 of 2 on device 0", for messages.
  virtual std::string describe() const = 0;
};

/// MAX over an NCCL communicator (NcclComm.h: tejit's or the caller's).
class NcclAmaxReducer final : public AmaxReducer {
public:
  explicit NcclAmaxReducer(std::unique_ptr<NcclComm> comm)
      : comm(std::move(comm)) {}

  llvm::Error allReduceMax(CUdeviceptr in, CUdeviceptr out, size_t count,
                           CUstream stream) override;
  int device() const override { return comm->device(); }
  std::string describe() const override { return comm->describe(); }
  int ranks() const { return comm->ranks(); }
  int rank() const { return comm->rank(); }

private:
  std::unique_ptr<NcclComm> comm;
};

/// The caller's reduction: returns 0 when it enqueued the max over the ranks
/// of the `count` f32 values at device address `amaxes`, in place, on
/// `stream` (a CUstream). The C API's tejit_amax_reduce_fn.
using AmaxReduceFunction = int (*)(void *userData, void *amaxes, size_t count,
                                   void *stream);

class CallbackAmaxReducer final : public AmaxReducer {
public:
  CallbackAmaxReducer(AmaxReduceFunction function, void *userData)
      : function(function), userData(userData) {}

  /// Copies `in` to `out` when they differ, then calls the function on
  /// `out`; a nonzero return is an ErrorCode::Internal error.
  llvm::Error allReduceMax(CUdeviceptr in, CUdeviceptr out, size_t count,
                           CUstream stream) override;
  std::string describe() const override { return "the caller's function"; }

private:
  AmaxReduceFunction function;
  void *userData;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_AMAXREDUCER_H
