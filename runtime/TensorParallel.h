//===- TensorParallel.h - the tensor-parallel all-reduce --------*- C++ -*-===//
//
// A program compiled with tp_size N holds one rank's shard of each
// parallel layer (docs/tensor-parallel.md): the plan's tp_allreduce steps
// sum a partial result over the N ranks (a row-parallel GEMM's output in
// the forward, a column-parallel GEMM's input gradient in the backward).
// Unlike the amax reduction, there is no one-process fallback: a sum over
// one rank would silently compute the wrong layer, so such a program needs
// a group. Two kinds:
//   * NcclTensorParallelGroup: over an NCCL communicator (NcclComm.h),
//     tejit's own or the caller's;
//   * CallbackTensorParallelGroup: through a function of the caller's
//     (tejit.pytorch calls torch.distributed.all_reduce on the TP process
//     group, ordered with the job's other collectives on it).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_TENSORPARALLEL_H
#define TEJIT_RUNTIME_TENSORPARALLEL_H

#include "runtime/CudaDriver.h"
#include "runtime/NcclComm.h"
#include "runtime/Plan.h"

#include <memory>
#include <string>

namespace tejit::runtime {

class TensorParallelGroup {
public:
  virtual ~TensorParallelGroup();

  /// Enqueues on `stream`: `out` = the element-wise sum over the ranks of
  /// the `count` elements of type `element` (bf16, f16 or f32) each rank has
  /// at `in` (`in` and `out` may be the same buffer). Never synchronizes, so
  /// it can be captured in a CUDA graph where the collective itself can.
  virtual llvm::Error allReduceSum(CUdeviceptr in, CUdeviceptr out,
                                   size_t count, ElementType element,
                                   CUstream stream) = 0;
  /// How many ranks the group has, -1 when unknown (a caller's function).
  virtual int ranks() const { return -1; }
  /// The CUDA device the group works on, -1 when any.
  virtual int device() const { return -1; }
  /// "NCCL 2.28.9, rank 0 of 2 on device 0", for messages.
  virtual std::string describe() const = 0;
};

/// SUM over an NCCL communicator.
class NcclTensorParallelGroup final : public TensorParallelGroup {
public:
  explicit NcclTensorParallelGroup(std::unique_ptr<NcclComm> comm)
      : comm(std::move(comm)) {}

  /// An ErrorCode::InvalidArgument error for other element types.
  llvm::Error allReduceSum(CUdeviceptr in, CUdeviceptr out, size_t count,
                           ElementType element, CUstream stream) override;
  int ranks() const override { return comm->ranks(); }
  int device() const override { return comm->device(); }
  std::string describe() const override { return comm->describe(); }

private:
  std::unique_ptr<NcclComm> comm;
};

/// The caller's all-reduce: returns 0 when it enqueued, on `stream` (a
/// CUstream), the sum over the ranks of the `count` elements at device
/// address `data`, in place. `dtype` is int(ElementType) (F32 0, F16 1,
/// BF16 2: the C API's tejit_dtype, which CApi.cpp checks mirrors it). The
/// C API's tejit_tp_all_reduce_fn.
using TpAllReduceFunction = int (*)(void *userData, void *data, size_t count,
                                    int dtype, void *stream);

class CallbackTensorParallelGroup final : public TensorParallelGroup {
public:
  CallbackTensorParallelGroup(TpAllReduceFunction function, void *userData)
      : function(function), userData(userData) {}

  /// Copies `in` to `out` (when they differ) on the stream, then calls the
  /// function on `out`: a function reduces in place, the plan's step is
  /// out of place. A nonzero return is an ErrorCode::Internal error.
  llvm::Error allReduceSum(CUdeviceptr in, CUdeviceptr out, size_t count,
                           ElementType element, CUstream stream) override;
  std::string describe() const override { return "the caller's function"; }

private:
  TpAllReduceFunction function;
  void *userData;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_TENSORPARALLEL_H
