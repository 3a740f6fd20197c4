//===- TensorParallel.h - the tensor-parallel collectives -------*- C++ -*-===//
//
// A program compiled with tp_size N holds one rank's shard of each
// parallel layer (docs/tensor-parallel.md): the plan's tp_allreduce steps
// sum a partial result over the N ranks (a row-parallel GEMM's output in
// the forward, a column-parallel GEMM's input gradient in the backward).
// With sequence parallelism, tp_allgather steps gather the ranks' slices of
// an activation (before a column-parallel GEMM; in the backward, the
// gradient of a reduce-scatter) and tp_reducescatter steps sum a partial
// result and keep this rank's slice (after a row-parallel GEMM; the
// gradient of a gather). Unlike the amax reduction, there is no
// one-process fallback: a sum over one rank would silently compute the
// wrong layer, so such a program needs a group. Two kinds:
//   * NcclTensorParallelGroup: over an NCCL communicator (NcclComm.h),
//     tejit's own or the caller's;
//   * CallbackTensorParallelGroup: through functions of the caller's
//     (tejit.pytorch calls torch.distributed's collectives on the TP process
//     group, ordered with the job's other collectives on it); any may be
//     missing, and a function whose steps need one fails its runs.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_TENSORPARALLEL_H
#define TEJIT_RUNTIME_TENSORPARALLEL_H

#include "runtime/CudaDriver.h"
#include "runtime/NcclComm.h"
#include "runtime/Plan.h"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>

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
  /// Enqueues on `stream`: `out` = the `countPerRank` elements of type
  /// `element` each rank has at `in`, rank r's at element r * countPerRank
  /// (`in` and `out` do not overlap). Never synchronizes.
  virtual llvm::Error allGather(CUdeviceptr in, CUdeviceptr out,
                                size_t countPerRank, ElementType element,
                                CUstream stream) = 0;
  /// Enqueues on `stream`: `out` = the `countPerRank` elements of chunk
  /// rank (elements [rank * countPerRank, (rank + 1) * countPerRank)) of the
  /// element-wise sum over the ranks of the ranks * countPerRank elements
  /// each rank has at `in` (`in` and `out` do not overlap). Never
  /// synchronizes.
  virtual llvm::Error reduceScatter(CUdeviceptr in, CUdeviceptr out,
                                    size_t countPerRank, ElementType element,
                                    CUstream stream) = 0;
  /// Enqueues on `stream`: block j of `out` (`countPerRank` elements) =
  /// block `rank` of rank j's `in`; `in` and `out` hold ranks *
  /// countPerRank elements and do not overlap (context parallelism's a2a).
  /// Never synchronizes.
  virtual llvm::Error allToAll(CUdeviceptr in, CUdeviceptr out,
                               size_t countPerRank, ElementType element,
                               CUstream stream) = 0;
  /// Whether the group can enqueue `collective` (a group of the caller's
  /// functions may lack some).
  virtual bool has(TpCollective collective) const { return true; }
  /// How many ranks the group has, -1 when unknown (a caller's function).
  virtual int ranks() const { return -1; }
  /// The CUDA device the group works on, -1 when any.
  virtual int device() const { return -1; }
  /// "NCCL 2.28.9, rank 0 of 2 on device 0", for messages.
  virtual std::string describe() const = 0;
};

/// The collectives over an NCCL communicator (sums are ncclSum).
class NcclTensorParallelGroup final : public TensorParallelGroup {
public:
  explicit NcclTensorParallelGroup(std::unique_ptr<NcclComm> comm)
      : comm(std::move(comm)) {}

  /// An ErrorCode::InvalidArgument error for other element types (also
  /// for the gathers and scatters).
  llvm::Error allReduceSum(CUdeviceptr in, CUdeviceptr out, size_t count,
                           ElementType element, CUstream stream) override;
  llvm::Error allGather(CUdeviceptr in, CUdeviceptr out, size_t countPerRank,
                        ElementType element, CUstream stream) override;
  llvm::Error reduceScatter(CUdeviceptr in, CUdeviceptr out,
                            size_t countPerRank, ElementType element,
                            CUstream stream) override;
  llvm::Error allToAll(CUdeviceptr in, CUdeviceptr out, size_t countPerRank,
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
/// The caller's all-gather: returns 0 when it enqueued on `stream` the
/// gather of the `count` elements (per rank) at `input` of every rank into
/// `output`, rank r's at element r * count. The C API's
/// tejit_tp_all_gather_fn.
using TpAllGatherFunction = int (*)(void *userData, const void *input,
                                    void *output, size_t count, int dtype,
                                    void *stream);
/// The caller's reduce-scatter: returns 0 when it enqueued on `stream` the
/// sum over the ranks of the ranks * `count` elements at `input`, of which
/// `output` gets this rank's chunk of `count` elements. The C API's
/// tejit_tp_reduce_scatter_fn.
using TpReduceScatterFunction = int (*)(void *userData, const void *input,
                                        void *output, size_t count, int dtype,
                                        void *stream);

/// The caller's all-to-all: returns 0 when it enqueued on `stream` the
/// exchange in which block j (`count` elements) of `output` gets block rank
/// of rank j's `input` (both hold ranks * `count`). The C API's
/// tejit_tp_all_to_all_fn.
using TpAllToAllFunction = int (*)(void *userData, const void *input,
                                   void *output, size_t count, int dtype,
                                   void *stream);

/// The caller's collectives; any may be null.
struct TpFunctions {
  TpAllReduceFunction allReduce = nullptr;
  TpAllGatherFunction allGather = nullptr;
  TpReduceScatterFunction reduceScatter = nullptr;
  TpAllToAllFunction allToAll = nullptr;
};

class CallbackTensorParallelGroup final : public TensorParallelGroup {
public:
  CallbackTensorParallelGroup(TpFunctions functions, void *userData)
      : functions(functions), userData(userData) {}

  /// Copies `in` to `out` (when they differ) on the stream, then calls the
  /// function on `out`: a function reduces in place, the plan's step is
  /// out of place. A nonzero return is an ErrorCode::Internal error, and so
  /// is a missing function (runs check has() before they enqueue).
  llvm::Error allReduceSum(CUdeviceptr in, CUdeviceptr out, size_t count,
                           ElementType element, CUstream stream) override;
  llvm::Error allGather(CUdeviceptr in, CUdeviceptr out, size_t countPerRank,
                        ElementType element, CUstream stream) override;
  llvm::Error reduceScatter(CUdeviceptr in, CUdeviceptr out,
                            size_t countPerRank, ElementType element,
                            CUstream stream) override;
  llvm::Error allToAll(CUdeviceptr in, CUdeviceptr out, size_t countPerRank,
                       ElementType element, CUstream stream) override;
  bool has(TpCollective collective) const override;
  /// Sets the all-to-all (the C API's tejit_tp_group_set_all_to_all).
  void setAllToAll(TpAllToAllFunction function) {
    functions.allToAll = function;
  }
  std::string describe() const override { return "the caller's function"; }

private:
  TpFunctions functions;
  void *userData;
};

/// The name of the caller's function for `collective`, as the C API's
/// tejit_tp_group_from_functions and Python's from_function call it:
/// "all_reduce", "all_gather", "reduce_scatter" or "all_to_all".
llvm::StringRef tpFunctionName(TpCollective collective);

/// A parallelism whose steps run over a group's collectives: which steps
/// are its own, and the words its messages use.
struct Parallelism {
  /// "tensor" or "context" (as in "tensor-parallel group").
  llvm::StringRef name;
  /// The spec's key for the ranks: "tp_size" or "cp_size".
  llvm::StringRef sizeKey;
  /// The C API's function that gives a program the group:
  /// "tejit_program_set_tp_group" or "tejit_program_set_cp_group".
  llvm::StringRef setter;
  /// What steps other than sums serve, for messages: "sequence
  /// parallelism" (tensor parallelism's gathers and scatters) or "context
  /// parallelism".
  llvm::StringRef gathersServe;
  /// The collective and ranks of `step` when it is one of this
  /// parallelism's steps, else nullopt.
  std::optional<std::pair<TpCollective, int64_t>> (*stepOf)(const Step &step);
  /// The plan's name of this parallelism's step of `collective`.
  llvm::StringRef (*stepKind)(TpCollective collective);

  /// tp_allreduce, tp_allgather and tp_reducescatter (tp_size).
  static const Parallelism Tensor;
  /// cp_allgather, cp_reducescatter and cp_alltoall (cp_size).
  static const Parallelism Context;
};

/// What a plan function asks of the group of one parallelism: the ranks of
/// that parallelism's steps (0: it has none) and which collectives they
/// are.
struct GroupNeeds {
  int64_t ranks = 0;
  std::array<bool, kNumTpCollectives> uses{};

  /// ErrorCode::InvalidArgument when two steps disagree on the ranks
  /// (parsed plans agree; this guards plans built in memory).
  static llvm::Expected<GroupNeeds> of(const FunctionPlan &function,
                                       const Parallelism &parallelism);
  /// Whether `group` (null: none) may be set for the steps of function
  /// `name`: ErrorCode::InvalidArgument when it knows its size and that is
  /// not their ranks (it would combine the wrong shards, or hang in the
  /// collective); one of unknown size (a caller's function) is trusted.
  llvm::Error checkRanks(llvm::StringRef name, const TensorParallelGroup *group,
                         const Parallelism &parallelism) const;
  /// Whether `group` (null: none) can run the steps of function `name`;
  /// else an ErrorCode::State error naming what is missing: the group (and
  /// parallelism.setter), or the function of the caller's that a kind of
  /// step needs.
  llvm::Error check(llvm::StringRef name, const TensorParallelGroup *group,
                    const Parallelism &parallelism) const;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_TENSORPARALLEL_H
