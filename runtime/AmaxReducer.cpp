//===- AmaxReducer.cpp - DelayedScaling's amax all-reduce -----------------===//
#include "runtime/AmaxReducer.h"
#include "runtime/Device.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;
using llvm::Error;
using llvm::Expected;

AmaxReducer::~AmaxReducer() = default;

Expected<ncclUniqueId> NcclAmaxReducer::uniqueId() {
  auto lib = Nccl::get();
  if (!lib)
    return lib.takeError();
  ncclUniqueId id;
  if (Error error = lib->check(lib->ncclGetUniqueId(&id), "ncclGetUniqueId"))
    return std::move(error);
  return id;
}

Expected<std::unique_ptr<NcclAmaxReducer>>
NcclAmaxReducer::create(const ncclUniqueId &id, int ranks, int rank,
                        int ordinal) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("amax group: rank {0} is not in [0, ranks "
                                   "= {1})",
                                   rank, ranks));
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
          llvm::formatv("ncclCommInitRank (rank {0} of {1}, device {2})", rank,
                        ranks, ordinal)))
    return std::move(error);
  std::unique_ptr<NcclAmaxReducer> reducer(
      new NcclAmaxReducer(*lib, comm, /*owned=*/true));
  if (Error error = reducer->describeComm())
    return std::move(error);
  return reducer;
}

Expected<std::unique_ptr<NcclAmaxReducer>>
NcclAmaxReducer::borrow(ncclComm_t comm) {
  if (!comm)
    return makeError(ErrorCode::InvalidArgument,
                     "amax group: the NCCL communicator is null");
  auto lib = Nccl::get();
  if (!lib)
    return lib.takeError();
  std::unique_ptr<NcclAmaxReducer> reducer(
      new NcclAmaxReducer(*lib, comm, /*owned=*/false));
  if (Error error = reducer->describeComm())
    return std::move(error);
  return reducer;
}

Error NcclAmaxReducer::describeComm() {
  if (Error error =
          lib.check(lib.ncclCommCount(comm, &numRanks), "ncclCommCount", comm))
    return error;
  if (Error error = lib.check(lib.ncclCommUserRank(comm, &thisRank),
                              "ncclCommUserRank", comm))
    return error;
  return lib.check(lib.ncclCommCuDevice(comm, &ordinal), "ncclCommCuDevice",
                   comm);
}

NcclAmaxReducer::~NcclAmaxReducer() {
  if (owned)
    lib.ncclCommDestroy(comm);
}

Error NcclAmaxReducer::allReduceMax(CUdeviceptr in, CUdeviceptr out,
                                    size_t count, CUstream stream) {
  ncclResult_t result = lib.ncclAllReduce(
      reinterpret_cast<const void *>(in), reinterpret_cast<void *>(out), count,
      ncclFloat32, ncclMax, comm, reinterpret_cast<cudaStream_t>(stream));
  // Every step calls this: the message is written only on failure.
  if (result == ncclSuccess)
    return Error::success();
  return lib.check(
      result,
      llvm::formatv("ncclAllReduce of {0} amaxes ({1})", count, describe()),
      comm);
}

std::string NcclAmaxReducer::describe() const {
  return llvm::formatv("NCCL {0}, rank {1} of {2} on device {3}",
                       lib.versionString(), thisRank, numRanks, ordinal)
      .str();
}

Error CallbackAmaxReducer::allReduceMax(CUdeviceptr in, CUdeviceptr out,
                                        size_t count, CUstream stream) {
  if (in != out) {
    auto driver = CudaDriver::get();
    if (!driver)
      return driver.takeError();
    if (Error error = driver->check(
            driver->cuMemcpyDtoDAsync(out, in, count * sizeof(float), stream),
            "copying amaxes"))
      return error;
  }
  if (int status =
          function(userData, reinterpret_cast<void *>(out), count, stream))
    return makeError(ErrorCode::Internal,
                     llvm::formatv("the amax reduction function returned {0} "
                                   "for {1} amaxes",
                                   status, count));
  return Error::success();
}
