//===- TensorParallel.cpp - the tensor-parallel all-reduce ----------------===//
#include "runtime/TensorParallel.h"

#include "llvm/Support/FormatVariadic.h"

#include <optional>

using namespace tejit::runtime;
using llvm::Error;

TensorParallelGroup::~TensorParallelGroup() = default;

namespace {
/// NCCL's name for an element type a tp_allreduce step may sum, and what
/// an error calls the elements (a literal: every step builds the call).
struct NcclElement {
  ncclDataType_t type;
  llvm::StringLiteral what;
};

std::optional<NcclElement> ncclElement(ElementType element) {
  switch (element) {
  case ElementType::F32:
    return NcclElement{ncclFloat32, "f32 elements"};
  case ElementType::F16:
    return NcclElement{ncclFloat16, "f16 elements"};
  case ElementType::BF16:
    return NcclElement{ncclBfloat16, "bf16 elements"};
  default:
    return std::nullopt;
  }
}
} // namespace

Error NcclTensorParallelGroup::allReduceSum(CUdeviceptr in, CUdeviceptr out,
                                            size_t count, ElementType element,
                                            CUstream stream) {
  std::optional<NcclElement> nccl = ncclElement(element);
  // Parsed plans sum nothing else; this guards plans built in memory.
  if (!nccl)
    return makeError(ErrorCode::InvalidArgument,
                     "the tensor-parallel all-reduce sums bf16, f16 or f32, "
                     "not " +
                         elementTypeName(element));
  return comm->allReduce(in, out, count, nccl->type, ncclSum, stream,
                         nccl->what);
}

Error CallbackTensorParallelGroup::allReduceSum(CUdeviceptr in, CUdeviceptr out,
                                                size_t count,
                                                ElementType element,
                                                CUstream stream) {
  if (in != out) {
    auto driver = CudaDriver::get();
    if (!driver)
      return driver.takeError();
    if (Error error = driver->check(
            driver->cuMemcpyDtoDAsync(out, in, count * elementBytes(element),
                                      stream),
            "copying the tensor-parallel all-reduce's input to its output"))
      return error;
  }
  if (int status = function(userData, reinterpret_cast<void *>(out), count,
                            static_cast<int>(element), stream))
    return makeError(ErrorCode::Internal,
                     llvm::formatv("the tensor-parallel all-reduce function "
                                   "returned {0} for {1} {2} elements",
                                   status, count, elementTypeName(element)));
  return Error::success();
}
