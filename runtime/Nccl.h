//===- Nccl.h - NCCL, loaded on first use -----------------------*- C++ -*-===//
//
// The amax all-reduce of DelayedScaling across ranks (te.amax_allreduce)
// runs over an NCCL communicator. Like cuDNN, NCCL is dlopen'ed the first
// time a process asks for it, so every binary still starts without it;
// nccl.h is included for its types only.
//
// Errors: a missing or unusable library is ErrorCode::Unsupported, a failing
// call ErrorCode::Cuda (NCCL's errors are CUDA, network or usage errors of a
// running job), with NCCL's own last error string.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_NCCL_H
#define TEJIT_RUNTIME_NCCL_H

#include "runtime/Errors.h"

#include <nccl.h>

#include <string>

namespace tejit::runtime {

/// The NCCL entry points we use, under nccl.h's names and types.
struct Nccl {
#define TEJIT_NCCL_FUNCTIONS(X)                                                \
  X(ncclGetVersion)                                                            \
  X(ncclGetErrorString)                                                        \
  X(ncclGetLastError)                                                          \
  X(ncclGetUniqueId)                                                           \
  X(ncclCommInitRank)                                                          \
  X(ncclCommDestroy)                                                           \
  X(ncclCommCount)                                                             \
  X(ncclCommCuDevice)                                                          \
  X(ncclCommUserRank)                                                          \
  X(ncclAllReduce)                                                             \
  X(ncclAllGather)                                                             \
  X(ncclReduceScatter)                                                         \
  X(ncclGroupStart)                                                            \
  X(ncclGroupEnd)                                                              \
  X(ncclSend)                                                                  \
  X(ncclRecv)
#define TEJIT_DECLARE(fn) decltype(&::fn) fn = nullptr;
  TEJIT_NCCL_FUNCTIONS(TEJIT_DECLARE)
#undef TEJIT_DECLARE

  /// The file the library was loaded from.
  std::string path;
  /// ncclGetVersion(): major * 10000 + minor * 100 + patch (NCCL >= 2.9).
  size_t version = 0;

  /// The loaded library (libnccl.so.2; the copy PyTorch loaded when it is
  /// already in the process), or why it cannot be used
  /// (ErrorCode::Unsupported). Loaded once per process, never unloaded.
  static llvm::Expected<const Nccl &> get();

  /// "2.28.9".
  std::string versionString() const;
  /// An error: "<what>: <result name> (result N)[: <last error>]", or
  /// success for ncclSuccess. `comm` (may be null) gives the last error.
  llvm::Error check(ncclResult_t result, const llvm::Twine &what,
                    ncclComm_t comm = nullptr) const;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_NCCL_H
