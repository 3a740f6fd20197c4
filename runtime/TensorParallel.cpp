//===- TensorParallel.cpp - the tensor-parallel collectives ---------------===//
#include "runtime/TensorParallel.h"

#include "llvm/Support/FormatVariadic.h"

#include <optional>

using namespace tejit::runtime;
using llvm::Error;

TensorParallelGroup::~TensorParallelGroup() = default;

namespace {
/// NCCL's name for an element type a tensor-parallel step may move, and
/// what an error calls the elements (a literal: every step builds the call).
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

/// NCCL's element type for `element`, or an error: parsed plans move
/// nothing else; this guards plans built in memory.
llvm::Expected<NcclElement> checkedElement(ElementType element,
                                           llvm::StringRef collective) {
  if (std::optional<NcclElement> nccl = ncclElement(element))
    return *nccl;
  return makeError(ErrorCode::InvalidArgument,
                   "the tensor-parallel " + collective +
                       " moves bf16, f16 or f32, not " +
                       elementTypeName(element));
}

/// An ErrorCode::Internal error for a function of the caller's that
/// returned `status`.
Error functionFailed(TpCollective collective, int status, size_t count,
                     ElementType element) {
  return makeError(ErrorCode::Internal,
                   llvm::formatv("the tensor-parallel {0} function returned "
                                 "{1} for {2} {3} elements",
                                 tpFunctionName(collective), status, count,
                                 elementTypeName(element)));
}

Error functionMissing(TpCollective collective) {
  return makeError(ErrorCode::Internal,
                   llvm::formatv("the tensor-parallel group has no {0} "
                                 "function",
                                 tpFunctionName(collective)));
}
} // namespace

Error NcclTensorParallelGroup::allReduceSum(CUdeviceptr in, CUdeviceptr out,
                                            size_t count, ElementType element,
                                            CUstream stream) {
  llvm::Expected<NcclElement> nccl = checkedElement(element, "all-reduce");
  if (!nccl)
    return nccl.takeError();
  return comm->allReduce(in, out, count, nccl->type, ncclSum, stream,
                         nccl->what);
}

Error NcclTensorParallelGroup::allGather(CUdeviceptr in, CUdeviceptr out,
                                         size_t countPerRank,
                                         ElementType element, CUstream stream) {
  llvm::Expected<NcclElement> nccl = checkedElement(element, "all-gather");
  if (!nccl)
    return nccl.takeError();
  return comm->allGather(in, out, countPerRank, nccl->type, stream, nccl->what);
}

Error NcclTensorParallelGroup::reduceScatter(CUdeviceptr in, CUdeviceptr out,
                                             size_t countPerRank,
                                             ElementType element,
                                             CUstream stream) {
  llvm::Expected<NcclElement> nccl = checkedElement(element, "reduce-scatter");
  if (!nccl)
    return nccl.takeError();
  return comm->reduceScatter(in, out, countPerRank, nccl->type, ncclSum, stream,
                             nccl->what);
}

Error NcclTensorParallelGroup::allToAll(CUdeviceptr in, CUdeviceptr out,
                                        size_t countPerRank,
                                        ElementType element, CUstream stream) {
  llvm::Expected<NcclElement> nccl = checkedElement(element, "all-to-all");
  if (!nccl)
    return nccl.takeError();
  return comm->allToAll(in, out, countPerRank, nccl->type,
                        elementBytes(element), stream, nccl->what);
}

bool CallbackTensorParallelGroup::has(TpCollective collective) const {
  switch (collective) {
  case TpCollective::AllReduce:
    return functions.allReduce;
  case TpCollective::AllGather:
    return functions.allGather;
  case TpCollective::ReduceScatter:
    return functions.reduceScatter;
  case TpCollective::AllToAll:
    return functions.allToAll;
  }
  return false;
}

Error CallbackTensorParallelGroup::allReduceSum(CUdeviceptr in, CUdeviceptr out,
                                                size_t count,
                                                ElementType element,
                                                CUstream stream) {
  if (!functions.allReduce)
    return functionMissing(TpCollective::AllReduce);
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
  if (int status =
          functions.allReduce(userData, reinterpret_cast<void *>(out), count,
                              static_cast<int>(element), stream))
    return functionFailed(TpCollective::AllReduce, status, count, element);
  return Error::success();
}

namespace {
/// Calls the caller's out-of-place `function` for `collective` (the
/// all-gather, reduce-scatter and all-to-all share one signature).
Error callOutOfPlace(TpCollective collective, TpAllGatherFunction function,
                     void *userData, CUdeviceptr in, CUdeviceptr out,
                     size_t countPerRank, ElementType element,
                     CUstream stream) {
  if (!function)
    return functionMissing(collective);
  if (int status = function(userData, reinterpret_cast<const void *>(in),
                            reinterpret_cast<void *>(out), countPerRank,
                            static_cast<int>(element), stream))
    return functionFailed(collective, status, countPerRank, element);
  return Error::success();
}
} // namespace

Error CallbackTensorParallelGroup::allGather(CUdeviceptr in, CUdeviceptr out,
                                             size_t countPerRank,
                                             ElementType element,
                                             CUstream stream) {
  return callOutOfPlace(TpCollective::AllGather, functions.allGather, userData,
                        in, out, countPerRank, element, stream);
}

Error CallbackTensorParallelGroup::reduceScatter(CUdeviceptr in,
                                                 CUdeviceptr out,
                                                 size_t countPerRank,
                                                 ElementType element,
                                                 CUstream stream) {
  return callOutOfPlace(TpCollective::ReduceScatter, functions.reduceScatter,
                        userData, in, out, countPerRank, element, stream);
}

Error CallbackTensorParallelGroup::allToAll(CUdeviceptr in, CUdeviceptr out,
                                            size_t countPerRank,
                                            ElementType element,
                                            CUstream stream) {
  return callOutOfPlace(TpCollective::AllToAll, functions.allToAll, userData,
                        in, out, countPerRank, element, stream);
}

llvm::StringRef tejit::runtime::tpFunctionName(TpCollective collective) {
  switch (collective) {
  case TpCollective::AllReduce:
    return "all_reduce";
  case TpCollective::AllGather:
    return "all_gather";
  case TpCollective::ReduceScatter:
    return "reduce_scatter";
  case TpCollective::AllToAll:
    return "all_to_all";
  }
  llvm_unreachable("unknown tensor-parallel collective");
}

namespace {
std::optional<std::pair<TpCollective, int64_t>>
tensorParallelStep(const Step &step) {
  if (std::optional<TpStepRef> collective = asTpStep(step))
    return std::pair(collective->collective, collective->step.ranks);
  return std::nullopt;
}

std::optional<std::pair<TpCollective, int64_t>>
contextParallelStep(const Step &step) {
  if (const auto *cp = std::get_if<CpCollectiveStep>(&step))
    return std::pair(cp->collective(), cp->ranks);
  return std::nullopt;
}
} // namespace

const Parallelism Parallelism::Tensor = {"tensor",
                                         "tp_size",
                                         "tejit_program_set_tp_group",
                                         "sequence parallelism",
                                         tensorParallelStep,
                                         tpStepKind};
const Parallelism Parallelism::Context = {"context",
                                          "cp_size",
                                          "tejit_program_set_cp_group",
                                          "context parallelism",
                                          contextParallelStep,
                                          cpStepKind};

llvm::Expected<GroupNeeds> GroupNeeds::of(const FunctionPlan &function,
                                          const Parallelism &parallelism) {
  GroupNeeds needs;
  for (auto [index, step] : llvm::enumerate(function.steps)) {
    std::optional<std::pair<TpCollective, int64_t>> collective =
        parallelism.stepOf(step);
    if (!collective)
      continue;
    auto [kind, ranks] = *collective;
    if (needs.ranks && ranks != needs.ranks)
      return makeError(
          ErrorCode::InvalidArgument,
          llvm::formatv("function '{0}', step {1}: a {2} over {3} ranks "
                        "after a {4}-parallel step over {5}",
                        function.name, index, parallelism.stepKind(kind), ranks,
                        parallelism.name, needs.ranks));
    needs.ranks = ranks;
    needs.uses[size_t(kind)] = true;
  }
  return needs;
}

Error GroupNeeds::checkRanks(llvm::StringRef name,
                             const TensorParallelGroup *group,
                             const Parallelism &parallelism) const {
  if (!group || !ranks || group->ranks() < 0 || group->ranks() == ranks)
    return Error::success();
  return makeError(
      ErrorCode::InvalidArgument,
      llvm::formatv("function '{0}' is compiled for {1} parallelism over {2} "
                    "ranks ({3} {2}), but the {1}-parallel group ({4}) has "
                    "{5}",
                    name, parallelism.name, ranks, parallelism.sizeKey,
                    group->describe(), group->ranks()));
}

Error GroupNeeds::check(llvm::StringRef name, const TensorParallelGroup *group,
                        const Parallelism &parallelism) const {
  if (!ranks)
    return Error::success();
  if (!group)
    return makeError(
        ErrorCode::State,
        llvm::formatv("function '{0}': this program is compiled for {1} "
                      "parallelism over {2} ranks ({3} {2}); give it a "
                      "{1}-parallel group ({4})",
                      name, parallelism.name, ranks, parallelism.sizeKey,
                      parallelism.setter));
  for (size_t index = 0; index < kNumTpCollectives; ++index) {
    auto collective = TpCollective(index);
    if (!uses[index] || group->has(collective))
      continue;
    llvm::StringRef function = tpFunctionName(collective);
    // A group of functions gets its all-to-all after it is made.
    llvm::StringRef giver = collective == TpCollective::AllToAll
                                ? "tejit_tp_group_set_all_to_all"
                                : "tejit_tp_group_from_functions";
    std::string serves = collective == TpCollective::AllReduce
                             ? std::string()
                             : (" (" + parallelism.gathersServe + ")").str();
    return makeError(
        ErrorCode::State,
        llvm::formatv("function '{0}' has {1} steps{2}, but its "
                      "{3}-parallel group ({4}) has no {5} function: give "
                      "one to {6} (in Python, "
                      "TensorParallelGroup.from_function's {5})",
                      name, parallelism.stepKind(collective), serves,
                      parallelism.name, group->describe(), function, giver));
  }
  return Error::success();
}
