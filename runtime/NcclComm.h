//===- NcclComm.h - an NCCL communicator, owned or borrowed -----*- C++ -*-===//
//
// What the NCCL groups of the runtime share: the amax reduction of
// DelayedScaling (AmaxReducer.h, MAX over f32) and the tensor-parallel
// all-reduce (TensorParallel.h, SUM over bf16/f16/f32) both reduce over one
// communicator that tejit makes from an NCCL unique id (one rank creates it,
// every rank receives it) or that the caller lends. This class owns (or
// borrows) it, knows its rank, size and device for messages, and enqueues
// all-reduces on it, and the all-gathers and reduce-scatters of sequence
// parallelism.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_NCCLCOMM_H
#define TEJIT_RUNTIME_NCCLCOMM_H

#include "runtime/CudaDriver.h"
#include "runtime/Nccl.h"

#include <memory>
#include <string>

namespace tejit::runtime {

class NcclComm {
public:
  /// A fresh NCCL unique id (NCCL_UNIQUE_ID_BYTES bytes): one rank makes it,
  /// every rank passes it to create().
  static llvm::Expected<ncclUniqueId> uniqueId();
  /// Joins the communicator of `ranks` ranks named by `id` as `rank`, on
  /// device `ordinal` (whose primary context becomes current). Blocks until
  /// every rank has joined (ncclCommInitRank). `group` names the group in
  /// errors ("amax group").
  static llvm::Expected<std::unique_ptr<NcclComm>>
  create(const ncclUniqueId &id, int ranks, int rank, int ordinal,
         llvm::StringRef group);
  /// The caller's communicator, which must outlive this one (it is not
  /// destroyed with it).
  static llvm::Expected<std::unique_ptr<NcclComm>>
  borrow(ncclComm_t comm, llvm::StringRef group);
  ~NcclComm();
  NcclComm(const NcclComm &) = delete;
  NcclComm &operator=(const NcclComm &) = delete;

  /// Enqueues ncclAllReduce of `count` elements on `stream` (`in` may be
  /// `out`). Never synchronizes, so it can be captured in a CUDA graph.
  /// Errors read "ncclAllReduce of <count> <what> (<describe()>): ...".
  llvm::Error allReduce(CUdeviceptr in, CUdeviceptr out, size_t count,
                        ncclDataType_t type, ncclRedOp_t op, CUstream stream,
                        llvm::StringRef what) const;
  /// Enqueues ncclAllGather: `out` gets the `count` elements at `in` of
  /// every rank, rank r's at element r * count. Errors read
  /// "ncclAllGather of <count> <what> per rank (<describe()>): ...".
  llvm::Error allGather(CUdeviceptr in, CUdeviceptr out, size_t count,
                        ncclDataType_t type, CUstream stream,
                        llvm::StringRef what) const;
  /// Enqueues ncclReduceScatter: `out` gets `count` elements, chunk rank()
  /// of the reduction over the ranks of the ranks() * `count` at `in`.
  llvm::Error reduceScatter(CUdeviceptr in, CUdeviceptr out, size_t count,
                            ncclDataType_t type, ncclRedOp_t op,
                            CUstream stream, llvm::StringRef what) const;
  /// Enqueues an all-to-all as grouped ncclSend / ncclRecv: block j of
  /// `out` (`count` elements) gets block rank() of rank j's `in` (`in` and
  /// `out` hold ranks() * `count`; they do not overlap). Errors read "an
  /// all-to-all of <count> <what> per rank (<describe()>): ...".
  llvm::Error allToAll(CUdeviceptr in, CUdeviceptr out, size_t count,
                       ncclDataType_t type, size_t elementBytes,
                       CUstream stream, llvm::StringRef what) const;

  int device() const { return ordinal; }
  int ranks() const { return numRanks; }
  int rank() const { return thisRank; }
  /// "NCCL 2.28.9, rank 0 of 2 on device 0".
  std::string describe() const;

private:
  NcclComm(const Nccl &lib, ncclComm_t comm, bool owned)
      : lib(lib), comm(comm), owned(owned) {}
  /// Reads the rank, size and device from the communicator.
  llvm::Error query();
  static llvm::Expected<std::unique_ptr<NcclComm>>
  wrap(const Nccl &lib, ncclComm_t comm, bool owned);

  const Nccl &lib;
  ncclComm_t comm;
  bool owned;
  int ordinal = -1, numRanks = 0, thisRank = 0;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_NCCLCOMM_H
