//===- NcclComm.cpp - an NCCL communicator, owned or borrowed ------------===//
#include "runtime/NcclComm.h"
#include "runtime/Device.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;
using llvm::Error;
using llvm::Expected;

Expected<ncclUniqueId> NcclComm::uniqueId() {
  auto lib = Nccl::get();
  if (!lib)
    return lib.takeError();
  ncclUniqueId id;
  if (Error error = lib->check(lib->ncclGetUniqueId(&id), "ncclGetUniqueId"))
    return std::move(error);
  return id;
}

Expected<std::unique_ptr<NcclComm>> NcclComm::create(const ncclUniqueId &id,
                                                     int ranks, int rank,
                                                     int ordinal,
                                                     llvm::StringRef group) {
  // Checked before anything is loaded, so that the mistake is named even
  // where there is no GPU or NCCL.
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("{0}: rank {1} is not in [0, ranks = {2})",
                                   group, rank, ranks));
  // NCCL joins the device of the current context; the runtime's calls use
  // the primary context, as PyTorch does.
  if (auto device = useDevice(ordinal); !device)
    return device.takeError();
  auto lib = Nccl::get();
  if (!lib)
    return lib.takeError();
  ncclComm_t comm = nullptr;
  if (Error error = lib->check(
          lib->ncclCommInitRank(&comm, ranks, id, rank),
          llvm::formatv("{0}: ncclCommInitRank (rank {1} of {2}, device {3})",
                        group, rank, ranks, ordinal)))
    return std::move(error);
  return wrap(*lib, comm, /*owned=*/true);
}

Expected<std::unique_ptr<NcclComm>> NcclComm::borrow(ncclComm_t comm,
                                                     llvm::StringRef group) {
  if (!comm)
    return makeError(ErrorCode::InvalidArgument,
                     group + ": the NCCL communicator is null");
  auto lib = Nccl::get();
  if (!lib)
    return lib.takeError();
  return wrap(*lib, comm, /*owned=*/false);
}

Expected<std::unique_ptr<NcclComm>>
NcclComm::wrap(const Nccl &lib, ncclComm_t comm, bool owned) {
  // Owned from here on: a failing query destroys a communicator we made.
  std::unique_ptr<NcclComm> wrapped(new NcclComm(lib, comm, owned));
  if (Error error = wrapped->query())
    return std::move(error);
  return wrapped;
}

Error NcclComm::query() {
  if (Error error =
          lib.check(lib.ncclCommCount(comm, &numRanks), "ncclCommCount", comm))
    return error;
  if (Error error = lib.check(lib.ncclCommUserRank(comm, &thisRank),
                              "ncclCommUserRank", comm))
    return error;
  return lib.check(lib.ncclCommCuDevice(comm, &ordinal), "ncclCommCuDevice",
                   comm);
}

NcclComm::~NcclComm() {
  if (owned)
    lib.ncclCommDestroy(comm);
}

Error NcclComm::allReduce(CUdeviceptr in, CUdeviceptr out, size_t count,
                          ncclDataType_t type, ncclRedOp_t op, CUstream stream,
                          llvm::StringRef what) const {
  ncclResult_t result = lib.ncclAllReduce(
      reinterpret_cast<const void *>(in), reinterpret_cast<void *>(out), count,
      type, op, comm, reinterpret_cast<cudaStream_t>(stream));
  // Every step calls this: the message is written only on failure.
  if (result == ncclSuccess)
    return Error::success();
  return lib.check(
      result,
      llvm::formatv("ncclAllReduce of {0} {1} ({2})", count, what, describe()),
      comm);
}

Error NcclComm::allGather(CUdeviceptr in, CUdeviceptr out, size_t count,
                          ncclDataType_t type, CUstream stream,
                          llvm::StringRef what) const {
  ncclResult_t result = lib.ncclAllGather(
      reinterpret_cast<const void *>(in), reinterpret_cast<void *>(out), count,
      type, comm, reinterpret_cast<cudaStream_t>(stream));
  if (result == ncclSuccess)
    return Error::success();
  return lib.check(result,
                   llvm::formatv("ncclAllGather of {0} {1} per rank ({2})",
                                 count, what, describe()),
                   comm);
}

Error NcclComm::reduceScatter(CUdeviceptr in, CUdeviceptr out, size_t count,
                              ncclDataType_t type, ncclRedOp_t op,
                              CUstream stream, llvm::StringRef what) const {
  ncclResult_t result = lib.ncclReduceScatter(
      reinterpret_cast<const void *>(in), reinterpret_cast<void *>(out), count,
      type, op, comm, reinterpret_cast<cudaStream_t>(stream));
  if (result == ncclSuccess)
    return Error::success();
  return lib.check(result,
                   llvm::formatv("ncclReduceScatter to {0} {1} per rank ({2})",
                                 count, what, describe()),
                   comm);
}

Error NcclComm::allToAll(CUdeviceptr in, CUdeviceptr out, size_t count,
                         ncclDataType_t type, size_t elementBytes,
                         CUstream stream, llvm::StringRef what) const {
  auto failed = [&](ncclResult_t result, llvm::StringRef call) {
    return lib.check(result,
                     llvm::formatv("{0} in an all-to-all of {1} {2} per rank "
                                   "({3})",
                                   call, count, what, describe()),
                     comm);
  };
  auto cudaStream = reinterpret_cast<cudaStream_t>(stream);
  size_t blockBytes = count * elementBytes;
  if (ncclResult_t result = lib.ncclGroupStart(); result != ncclSuccess)
    return failed(result, "ncclGroupStart");
  // Every send and receive is posted before the group ends; a failed post
  // still closes the group so that the communicator stays usable.
  ncclResult_t posted = ncclSuccess;
  llvm::StringRef failedCall;
  for (int peer = 0; peer < numRanks && posted == ncclSuccess; ++peer) {
    posted =
        lib.ncclSend(reinterpret_cast<const void *>(in + peer * blockBytes),
                     count, type, peer, comm, cudaStream);
    failedCall = "ncclSend";
    if (posted == ncclSuccess) {
      posted = lib.ncclRecv(reinterpret_cast<void *>(out + peer * blockBytes),
                            count, type, peer, comm, cudaStream);
      failedCall = "ncclRecv";
    }
  }
  ncclResult_t ended = lib.ncclGroupEnd();
  if (posted != ncclSuccess)
    return failed(posted, failedCall);
  if (ended != ncclSuccess)
    return failed(ended, "ncclGroupEnd");
  return Error::success();
}

std::string NcclComm::describe() const {
  return llvm::formatv("NCCL {0}, rank {1} of {2} on device {3}",
                       lib.versionString(), thisRank, numRanks, ordinal)
      .str();
}
