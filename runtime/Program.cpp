//===- Program.cpp - compiled layers with their state, ready to run -------===//
#include "runtime/Program.h"
#include "runtime/AmaxReducer.h"
#include "runtime/TensorParallel.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <cstring>

using namespace tejit::runtime;
using llvm::Error;

namespace {
/// cuBLASLt's Hopper FP8 kernels want a 32 MiB workspace.
constexpr size_t kGemmWorkspaceBytes = 32u << 20;

bool isMeta(llvm::StringRef name) { return name.starts_with("fp8_meta."); }

llvm::StringRef kindName(TensorKind kind) {
  switch (kind) {
  case TensorKind::Input:
    return "inputs";
  case TensorKind::Output:
    return "outputs";
  case TensorKind::GradOutput:
    return "output gradients";
  case TensorKind::GradInput:
    return "input gradients";
  case TensorKind::Meta:
    return "meta tensors";
  case TensorKind::Saved:
    return "saved tensors";
  case TensorKind::Deferred:
    return "deferred tensors";
  }
  return "tensors";
}
} // namespace

llvm::Expected<std::unique_ptr<Program>> Program::create(Bundle bundle,
                                                         int ordinal) {
  if (Error error = checkBinaries(bundle))
    return std::move(error);
  std::unique_ptr<Program> program(new Program(std::move(bundle)));
  if (Error error = program->setUp(ordinal))
    return std::move(error);
  return program;
}

Program::~Program() {
  // Executors and modules go before the memory they were bound to.
  forwardFn.executor.reset();
  backwardFn.executor.reset();
  wgradFn.executor.reset();
  gemms.reset();
  modules.reset();
}

Error Program::setUp(int ordinal) {
  auto device = useDevice(ordinal);
  if (!device)
    return device.takeError();
  deviceInfo = *device;
  const Plan &plan = bundle.plan;
  if (plan.arch != deviceInfo.arch &&
      llvm::StringRef(plan.arch).rtrim('a') !=
          llvm::StringRef(deviceInfo.arch).rtrim('a'))
    return makeError(
        ErrorCode::UnsupportedDevice,
        llvm::formatv("the kernels were built for {0}, but device {1} ({2}) "
                      "is {3}: compile for this device",
                      plan.arch, ordinal, deviceInfo.name, deviceInfo.arch));
  const FunctionPlan *forward = plan.forward();
  if (!forward)
    return makeError(ErrorCode::InvalidArgument,
                     "the plan has no forward function");
  const FunctionPlan *backward = plan.backwardOf(*forward);
  const FunctionPlan *wgrad = backward ? plan.wgradOf(*backward) : nullptr;
  if (wgrad) {
    // GradInput keeps the order a backward alone gives: the forward's
    // arguments'.
    for (const FunctionPlan *function : {backward, wgrad})
      for (const InterfaceEntry &entry : function->results)
        if (entry.gradOf)
          gradInputOrder.push_back(*entry.gradOf);
    llvm::sort(gradInputOrder);
    descs[size_t(TensorKind::GradInput)].resize(gradInputOrder.size());
  }

  auto workspaceBuffer =
      DeviceBuffer::allocate(kGemmWorkspaceBytes, "the cuBLASLt workspace");
  if (!workspaceBuffer)
    return workspaceBuffer.takeError();
  workspace = std::move(*workspaceBuffer);
  auto runner = GemmRunner::create(reinterpret_cast<void *>(workspace.get()),
                                   workspace.bytes(), deviceInfo.name);
  if (!runner)
    return runner.takeError();
  gemms = std::move(*runner);
  modules = std::make_unique<ModuleSet>(bundle);

  int64_t arenaBytes = forward->arenaBytes;
  for (const FunctionPlan *function : {backward, wgrad})
    if (function)
      arenaBytes = std::max(arenaBytes, function->arenaBytes);
  auto arenaBuffer = DeviceBuffer::allocate(arenaBytes, "the scratch arena");
  if (!arenaBuffer)
    return arenaBuffer.takeError();
  arena = std::move(*arenaBuffer);

  // Forwards may keep their weight casts between runs: inference programs
  // (no backward) always, training programs once asked to.
  const char *cacheSetting = std::getenv("TEJIT_WEIGHT_CAST_CACHE");
  bool cacheWeightCasts =
      !(cacheSetting && llvm::StringRef(cacheSetting) == "0");
  auto prepare = [&](Function &function, const FunctionPlan &functionPlan,
                     Role role) -> Error {
    auto executor = Executor::create(functionPlan, *modules, *gemms,
                                     /*findStatic=*/role == Role::Forward &&
                                         cacheWeightCasts);
    if (!executor)
      return executor.takeError();
    function.executor = std::move(*executor);
    if (Error error = classify(function, functionPlan, role))
      return error;
    llvm::SmallVector<size_t> updates;
    for (const CopyBack &update : function.updates)
      updates.push_back(update.result);
    function.executor->setResultsDroppedWhenLeavingState(updates);
    return Error::success();
  };
  if (Error error = prepare(forwardFn, *forward, Role::Forward))
    return error;
  if (!backward)
    if (Error error = forwardFn.executor->allocateStaticCache())
      return error;
  if (rngBuffer) {
    auto advance = modules->helper("tejit_rng_advance");
    if (!advance)
      return advance.takeError();
    rngAdvance = *advance;
  }
  if (backward)
    if (Error error = prepare(backwardFn, *backward, Role::Backward))
      return error;
  if (wgrad)
    if (Error error = prepare(wgradFn, *wgrad, Role::Wgrad))
      return error;
  size_t scratchBytes = forwardFn.executor->scratchBytes();
  for (const Function *function : {&backwardFn, &wgradFn})
    if (function->executor)
      scratchBytes = std::max(scratchBytes, function->executor->scratchBytes());
  auto scratchBuffer = DeviceBuffer::allocate(
      scratchBytes, "step scratch (cross-block sums, attention workspace)");
  if (!scratchBuffer)
    return scratchBuffer.takeError();
  scratch = std::move(*scratchBuffer);
  return resetState();
}

llvm::Expected<size_t> Program::own(const ValueInfo &value,
                                    const std::string &name) {
  auto buffer = DeviceBuffer::allocate(value.bytes, "'" + name + "'");
  if (!buffer)
    return buffer.takeError();
  owned.push_back(std::move(*buffer));
  return owned.size() - 1;
}

size_t Program::gradInputIndex(int64_t gradOf) {
  auto &list = descs[size_t(TensorKind::GradInput)];
  if (gradInputOrder.empty()) {
    list.emplace_back();
    return list.size() - 1;
  }
  return llvm::lower_bound(gradInputOrder, gradOf) - gradInputOrder.begin();
}

llvm::Expected<Program::Binding>
Program::wgradArgument(const InterfaceEntry &entry, const FunctionPlan &plan) {
  // The backward's own bindings: the caller's GradOutput pointer, or the
  // deferred tensor's slot.
  if (entry.backwardArg &&
      *entry.backwardArg < int64_t(backwardFn.arguments.size()))
    return backwardFn.arguments[*entry.backwardArg];
  if (entry.backwardResult &&
      *entry.backwardResult < int64_t(backwardFn.results.size()) &&
      backwardFn.results[*entry.backwardResult].kind == Binding::Saved)
    return backwardFn.results[*entry.backwardResult];
  if (entry.forwardArg)
    return Binding{Binding::ForwardArg, size_t(*entry.forwardArg)};
  if (entry.forwardResult)
    return Binding{Binding::ForwardResult, size_t(*entry.forwardResult)};
  return makeError(ErrorCode::Internal,
                   "function '" + plan.name + "': argument '" + entry.name +
                       "' is none of the forward's or the backward's "
                       "tensors (a wgrad function reads only those)");
}

Error Program::classify(Function &function, const FunctionPlan &plan,
                        Role role) {
  bool isBackward = role != Role::Forward;
  auto desc = [&](const InterfaceEntry &entry) {
    return TensorDesc{entry.name, plan.values[entry.value].type,
                      entry.parameter, entry.host};
  };
  for (const InterfaceEntry &entry : plan.arguments) {
    Binding binding;
    const ValueInfo &value = plan.values[entry.value];
    if (role == Role::Wgrad) {
      auto read = wgradArgument(entry, plan);
      if (!read)
        return read.takeError();
      binding = *read;
    } else if (isBackward && entry.forwardArg) {
      binding = {Binding::ForwardArg, size_t(*entry.forwardArg)};
    } else if (isBackward && entry.forwardResult) {
      binding = {Binding::ForwardResult, size_t(*entry.forwardResult)};
    } else if (isMeta(entry.name) ||
               (!isBackward && entry.name == "rng_state")) {
      auto index = own(value, entry.name);
      if (!index)
        return index.takeError();
      binding = {Binding::Owned, *index};
      if (isMeta(entry.name)) {
        metaBuffers.push_back(*index);
        descs[size_t(TensorKind::Meta)].push_back(desc(entry));
      } else {
        rngBuffer = *index;
      }
    } else {
      auto &list = descs[size_t(isBackward ? TensorKind::GradOutput
                                           : TensorKind::Input)];
      binding = {Binding::User, list.size()};
      list.push_back(desc(entry));
    }
    function.arguments.push_back(binding);
  }
  for (const InterfaceEntry &entry : plan.results) {
    Binding binding;
    bool saved = !isBackward && !entry.updatesArg &&
                 llvm::StringRef(entry.name).starts_with("saved.");
    // What the backward hands its wgrad function: the program keeps one
    // set for a backward that runs both, the caller passes its own for one
    // that runs half (several backwards may await their wgrad).
    bool deferred = role == Role::Backward && !entry.updatesArg &&
                    !entry.gradOf &&
                    llvm::StringRef(entry.name).starts_with("deferred.");
    bool user =
        isBackward ? entry.gradOf.has_value() : !entry.updatesArg && !saved;
    if (saved || deferred) {
      // The program keeps one set for tejit_forward; tejit_forward_ex takes
      // the caller's (several forwards may then await their backward).
      auto index = own(plan.values[entry.value], entry.name);
      if (!index)
        return index.takeError();
      auto &list =
          descs[size_t(saved ? TensorKind::Saved : TensorKind::Deferred)];
      binding = {Binding::Saved, list.size(), *index};
      list.push_back(desc(entry));
    } else if (user && isBackward) {
      size_t index = gradInputIndex(*entry.gradOf);
      binding = {Binding::User, index};
      descs[size_t(TensorKind::GradInput)][index] = desc(entry);
    } else if (user) {
      auto &list = descs[size_t(TensorKind::Output)];
      binding = {Binding::User, list.size()};
      list.push_back(desc(entry));
    } else {
      auto index = own(plan.values[entry.value], entry.name);
      if (!index)
        return index.takeError();
      binding = {Binding::Owned, *index};
      if (entry.updatesArg) {
        const Binding &updated = function.arguments[*entry.updatesArg];
        if (updated.kind != Binding::Owned)
          return makeError(ErrorCode::Internal,
                           "function '" + plan.name + "': result '" +
                               entry.name +
                               "' updates an argument the program does not "
                               "own");
        // Plans from format 3 on update the state in place where the
        // executor sees nothing read it afterwards; older ones write the
        // new state beside the old (their kernels take their operands
        // __restrict__) and the program copies it over after the function.
        size_t position = function.results.size();
        bool inPlace =
            bundle.plan.version >= 3 && plan.canUpdateInPlace(position);
        function.updates.push_back({*index, updated.index, position, inPlace});
      }
    }
    if (entry.accumulatesArg) {
      const Binding &accumulated = function.arguments[*entry.accumulatesArg];
      if (!isBackward || binding.kind != Binding::User ||
          accumulated.kind != Binding::User)
        return makeError(ErrorCode::Internal,
                         "function '" + plan.name + "': result '" + entry.name +
                             "' accumulates into an argument that is not the "
                             "caller's");
      size_t position = function.results.size();
      function.accumulations.push_back({accumulated.index, binding.index,
                                        entry.name,
                                        plan.canAccumulateInPlace(position),
                                        plan.groupedAccumulation(position)});
    }
    function.results.push_back(binding);
  }
  return Error::success();
}

Error Program::resetState() {
  forwardFn.executor->invalidateStaticCache();
  const CudaDriver &driver = *CudaDriver::get();
  const auto &metas = descs[size_t(TensorKind::Meta)];
  for (auto [index, desc] : llvm::enumerate(metas)) {
    const DeviceBuffer &buffer = owned[metaBuffers[index]];
    // Scales and their inverses start at 1.0f, histories at 0.
    unsigned pattern =
        llvm::StringRef(desc.name).ends_with("amax_history") ? 0 : 0x3f800000u;
    if (Error error =
            driver.check(driver.cuMemsetD32Async(buffer.get(), pattern,
                                                 buffer.bytes() / 4, nullptr),
                         "initializing '" + desc.name + "'"))
      return error;
  }
  if (Error error = driver.check(driver.cuStreamSynchronize(nullptr),
                                 "initializing the FP8 meta state"))
    return error;
  return rngBuffer ? setSeed(rngHost[0]) : Error::success();
}

size_t Program::amaxAllReduceSteps() const {
  size_t count = 0;
  for (const FunctionPlan &function : bundle.plan.functions)
    for (const Step &step : function.steps)
      count += std::holds_alternative<AmaxAllReduceStep>(step);
  return count;
}

Error Program::setAmaxReducer(std::shared_ptr<AmaxReducer> reducer) {
  if (reducer && reducer->device() >= 0 &&
      reducer->device() != deviceInfo.ordinal)
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("the amax group ({0}) is on device {1}, "
                                   "the program on device {2}",
                                   reducer->describe(), reducer->device(),
                                   deviceInfo.ordinal));
  amaxReducer = std::move(reducer);
  return Error::success();
}

Error Program::setGroup(const std::shared_ptr<TensorParallelGroup> &group,
                        int64_t ranks, llvm::StringRef what,
                        llvm::StringRef sizeName,
                        llvm::function_ref<Error(Executor &)> give) {
  if (group && group->device() >= 0 && group->device() != deviceInfo.ordinal)
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("the {0}-parallel group ({1}) is on device "
                                   "{2}, the program on device {3}",
                                   what, group->describe(), group->device(),
                                   deviceInfo.ordinal));
  // Checked here, before either executor takes the group, so that a
  // refused group leaves both with the one they had.
  if (group && ranks > 1 && group->ranks() >= 0 && group->ranks() != ranks)
    return makeError(
        ErrorCode::InvalidArgument,
        llvm::formatv(
            "the program is compiled for {0} parallelism over {1} "
            "ranks ({2} {1}), but the {0}-parallel group ({3}) has {4}",
            what, ranks, sizeName, group->describe(), group->ranks()));
  // The executors hold it (and keep it alive): every call, also one whose
  // forward leaves the FP8 state, runs its collectives over it.
  for (Function *function : {&forwardFn, &backwardFn, &wgradFn})
    if (function->executor)
      if (Error error = give(*function->executor))
        return error;
  return Error::success();
}

Error Program::setTensorParallelGroup(
    std::shared_ptr<TensorParallelGroup> group) {
  return setGroup(group, tensorParallelRanks(), "tensor", "tp_size",
                  [&](Executor &executor) {
                    return executor.setTensorParallelGroup(group);
                  });
}

Error Program::setContextParallelGroup(
    std::shared_ptr<TensorParallelGroup> group) {
  return setGroup(group, contextParallelRanks(), "context", "cp_size",
                  [&](Executor &executor) {
                    return executor.setContextParallelGroup(group);
                  });
}

Error Program::setSeed(uint64_t seed) {
  rngHost[0] = seed;
  rngHost[1] = 0;
  if (!rngBuffer)
    return Error::success();
  const CudaDriver &driver = *CudaDriver::get();
  if (Error error = driver.check(driver.cuCtxSetCurrent(deviceInfo.context),
                                 "cuCtxSetCurrent"))
    return error;
  if (Error error = driver.check(
          driver.cuMemcpyHtoDAsync(owned[*rngBuffer].get(), rngHost,
                                   sizeof(rngHost), nullptr),
          "setting the dropout RNG state"))
    return error;
  return driver.check(driver.cuStreamSynchronize(nullptr),
                      "setting the dropout RNG state");
}

const std::vector<TensorDesc> &Program::tensors(TensorKind kind) const {
  return descs[size_t(kind)];
}

std::vector<CUdeviceptr> Program::pointersOf(
    llvm::ArrayRef<Binding> bindings, llvm::ArrayRef<CUdeviceptr> user,
    llvm::ArrayRef<CUdeviceptr> saved, const ForwardPointers *forward) const {
  std::vector<CUdeviceptr> pointers;
  for (const Binding &binding : bindings)
    switch (binding.kind) {
    case Binding::User:
      pointers.push_back(user[binding.index]);
      break;
    case Binding::Owned:
      pointers.push_back(owned[binding.index].get());
      break;
    case Binding::Saved:
      pointers.push_back(saved.empty() ? owned[binding.owned].get()
                                       : saved[binding.index]);
      break;
    case Binding::ForwardArg:
      pointers.push_back(forward->arguments[binding.index]);
      break;
    case Binding::ForwardResult:
      pointers.push_back(forward->results[binding.index]);
      break;
    }
  return pointers;
}

Error Program::run(Function &function, CUstream stream,
                   llvm::ArrayRef<CUdeviceptr> userArgs,
                   llvm::ArrayRef<CUdeviceptr> userResults,
                   llvm::ArrayRef<CUdeviceptr> saved,
                   const ForwardPointers *forward, bool updateState) {
  function.pointers.arguments =
      pointersOf(function.arguments, userArgs, saved, forward);
  function.pointers.results =
      pointersOf(function.results, userResults, saved, forward);
  // A run that updates the state writes it in place where it may; one that
  // leaves it writes beside it and drops what it wrote.
  if (updateState)
    for (const CopyBack &update : function.updates)
      if (update.inPlace)
        function.pointers.results[update.result] = owned[update.to].get();
  // A run that leaves the state alone must not wait for other ranks: its
  // update's results are dropped, so its amaxes are reduced over this
  // process only.
  bool isForward = &function == &forwardFn;
  // Inference programs always cast into their cache; training programs only
  // in modes that keep or reuse the casts.
  bool useCache = isForward && (!training() || weightCasts != WeightCasts::Run);
  StaticReuse reuse = !isForward ? StaticReuse::Never
                      : weightCasts == WeightCasts::Reuse
                          ? StaticReuse::WhenUnchanged
                      : weightCasts == WeightCasts::ReuseInGraphs
                          ? StaticReuse::AlsoWhenCapturing
                          : StaticReuse::Never;
  CUdeviceptr skipFlag =
      isForward && weightCasts == WeightCasts::ByFlag ? weightCastFlag : 0;
  if (Error error = function.executor->run(
          function.pointers.arguments, function.pointers.results, arena.get(),
          scratch.get(), stream, updateState ? amaxReducer.get() : nullptr,
          reuse, useCache, /*zeroSkippedAmaxes=*/updateState, skipFlag,
          /*leaveState=*/!updateState))
    return error;
  if (!updateState)
    return Error::success();
  // New scales: casts kept with the old ones are reused only where the
  // caller promised the weights are unchanged (ReuseInGraphs).
  if (!function.updates.empty())
    forwardFn.executor->noteStateUpdated();
  const CudaDriver &driver = *CudaDriver::get();
  for (const CopyBack &update : function.updates) {
    if (update.inPlace)
      continue;
    if (Error error =
            driver.check(driver.cuMemcpyDtoDAsync(
                             owned[update.to].get(), owned[update.from].get(),
                             owned[update.to].bytes(), stream),
                         "updating the FP8 meta state"))
      return error;
  }
  return Error::success();
}

Error Program::beginCall(llvm::StringRef what, size_t numIn, TensorKind in,
                         size_t numOut, TensorKind out) {
  for (auto [given, kind] : {std::pair{numIn, in}, std::pair{numOut, out}})
    if (given != tensors(kind).size())
      return makeError(ErrorCode::InvalidArgument,
                       llvm::formatv("{0}: expected {1} pointers for {2}, "
                                     "given {3}",
                                     what, tensors(kind).size(), kindName(kind),
                                     given));
  // Callers may have switched contexts (or threads) since the last call.
  const CudaDriver &driver = *CudaDriver::get();
  return driver.check(driver.cuCtxSetCurrent(deviceInfo.context),
                      "cuCtxSetCurrent");
}

Error Program::forward(CUstream stream, llvm::ArrayRef<CUdeviceptr> inputs,
                       llvm::ArrayRef<CUdeviceptr> outputs,
                       std::optional<llvm::ArrayRef<CUdeviceptr>> saved) {
  if (Error error = beginCall("forward", inputs.size(), TensorKind::Input,
                              outputs.size(), TensorKind::Output))
    return error;
  if (saved && saved->size() != tensors(TensorKind::Saved).size())
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("forward: expected {0} pointers for saved "
                                   "tensors, given {1}",
                                   tensors(TensorKind::Saved).size(),
                                   saved->size()));
  const CudaDriver &driver = *CudaDriver::get();
  if (Error error = run(forwardFn, stream, inputs, outputs,
                        saved.value_or(llvm::ArrayRef<CUdeviceptr>()), nullptr,
                        forwardUpdatesState))
    return error;
  if (rngBuffer) {
    // The next forward draws from a fresh stretch of the Philox stream; the
    // state lives on the device (and is saved with this forward's tensors
    // for its backward), so graph replays move it on too.
    CUdeviceptr state = owned[*rngBuffer].get();
    uint64_t delta = uint64_t(1) << 32;
    void *params[] = {&state, &delta};
    if (Error error =
            driver.check(driver.cuLaunchKernel(rngAdvance, 1, 1, 1, 32, 1, 1, 0,
                                               stream, params, nullptr),
                         "advancing the dropout RNG state"))
      return error;
  }
  // Only the program's own saved tensors make a later plain backward valid.
  forwardDone = !saved;
  return Error::success();
}

Error Program::checkAccumulations(
    const Function &function, llvm::ArrayRef<CUdeviceptr> gradOutputs,
    llvm::ArrayRef<CUdeviceptr> gradInputs) const {
  for (const Accumulation &accumulation : function.accumulations)
    if (accumulation.groupedStep &&
        function.executor->hasGroupedOutputs(*accumulation.groupedStep) &&
        (gradOutputs[accumulation.gradOutput] ||
         gradInputs[accumulation.gradInput]))
      return makeError(ErrorCode::InvalidArgument,
                       "backward: '" + accumulation.name +
                           "' adds into per-group main_grads "
                           "(tejit_program_set_group_pointers): pass null "
                           "for its main_grad and its gradient");
    else if (!accumulation.inPlace && gradOutputs[accumulation.gradOutput] ==
                                          gradInputs[accumulation.gradInput])
      return makeError(ErrorCode::InvalidArgument,
                       "backward: '" + accumulation.name +
                           "' is given its main_grad's buffer, but this "
                           "plan cannot accumulate it in place; pass a "
                           "buffer of its own");
  return Error::success();
}

Error Program::backward(CUstream stream,
                        llvm::ArrayRef<CUdeviceptr> gradOutputs,
                        llvm::ArrayRef<CUdeviceptr> gradInputs,
                        const ForwardTensors *forward, BackwardPart part,
                        llvm::ArrayRef<CUdeviceptr> deferred) {
  llvm::StringRef what = part == BackwardPart::Both    ? "backward"
                         : part == BackwardPart::Dgrad ? "backward_dgrad"
                                                       : "backward_wgrad";
  if (!training())
    return makeError(ErrorCode::State,
                     what + ": the program was compiled for inference");
  if (part != BackwardPart::Both) {
    if (!delaysWgrad())
      return makeError(ErrorCode::State,
                       what + ": the program does not delay its weight "
                              "gradients (compile it with "
                              "delay_wgrad_compute: true; its backward "
                              "computes them)");
    size_t expected = tensors(TensorKind::Deferred).size();
    if (deferred.size() != expected)
      return makeError(ErrorCode::InvalidArgument,
                       llvm::formatv("{0}: expected {1} pointers for deferred "
                                     "tensors, given {2}",
                                     what, expected, deferred.size()));
    for (auto [index, pointer] : llvm::enumerate(deferred))
      if (!pointer)
        return makeError(
            ErrorCode::InvalidArgument,
            llvm::formatv("{0}: deferred tensor {1} ('{2}') is "
                          "null",
                          what, index,
                          tensors(TensorKind::Deferred)[index].name));
  }
  if (!forward && !forwardDone)
    return makeError(ErrorCode::State,
                     what + ": no forward has run with the program's own "
                            "saved tensors (the backward reads what the "
                            "forward saved; after tejit_forward_ex use "
                            "tejit_backward_ex)");
  if (Error error = beginCall(what, gradOutputs.size(), TensorKind::GradOutput,
                              gradInputs.size(), TensorKind::GradInput))
    return error;
  bool runsBackward = part != BackwardPart::Wgrad;
  bool runsWgrad = delaysWgrad() && part != BackwardPart::Dgrad;
  for (auto [function, runs] :
       {std::pair{&backwardFn, runsBackward}, std::pair{&wgradFn, runsWgrad}})
    if (runs)
      if (Error error = checkAccumulations(*function, gradOutputs, gradInputs))
        return error;
  ForwardPointers pointers;
  if (forward) {
    for (auto [name, given, kind] :
         {std::tuple{"inputs", forward->inputs.size(), TensorKind::Input},
          std::tuple{"outputs", forward->outputs.size(), TensorKind::Output},
          std::tuple{"saved tensors", forward->saved.size(),
                     TensorKind::Saved}})
      if (given != tensors(kind).size())
        return makeError(ErrorCode::InvalidArgument,
                         llvm::formatv("{0}: expected {1} pointers for the "
                                       "forward's {2}, given {3}",
                                       what, tensors(kind).size(), name,
                                       given));
    pointers = {pointersOf(forwardFn.arguments, forward->inputs, forward->saved,
                           nullptr),
                pointersOf(forwardFn.results, forward->outputs, forward->saved,
                           nullptr)};
  }
  const ForwardPointers *seen = forward ? &pointers : &forwardFn.pointers;
  // Deferred tensors: the caller's for one part, the program's for both.
  if (runsBackward)
    if (Error error =
            run(backwardFn, stream, gradOutputs, gradInputs, deferred, seen))
      return error;
  if (runsWgrad)
    return run(wgradFn, stream, gradOutputs, gradInputs, deferred, seen);
  return Error::success();
}

bool Program::usedByWgrad(TensorKind kind, size_t index) const {
  if (!delaysWgrad())
    return false;
  auto is = [&](const Binding &binding, Binding::Kind bindingKind,
                TensorKind tensorKind) {
    return binding.kind == bindingKind && kind == tensorKind &&
           binding.index == index;
  };
  for (const Binding &result : wgradFn.results)
    if (is(result, Binding::User, TensorKind::GradInput))
      return true;
  for (const Binding &argument : wgradFn.arguments) {
    if (is(argument, Binding::User, TensorKind::GradOutput) ||
        is(argument, Binding::Saved, TensorKind::Deferred))
      return true;
    // The forward's tensors, as the caller passed them to the forward.
    const Binding *read = nullptr;
    if (argument.kind == Binding::ForwardArg)
      read = &forwardFn.arguments[argument.index];
    if (argument.kind == Binding::ForwardResult)
      read = &forwardFn.results[argument.index];
    if (read &&
        (is(*read, Binding::User,
            argument.kind == Binding::ForwardArg ? TensorKind::Input
                                                 : TensorKind::Output) ||
         is(*read, Binding::Saved, TensorKind::Saved)))
      return true;
  }
  return false;
}

std::pair<Program::Function *, Program::Accumulation *>
Program::accumulationOf(size_t gradOutput) {
  for (Function *function : {&backwardFn, &wgradFn})
    for (Accumulation &entry : function->accumulations)
      if (entry.gradOutput == gradOutput)
        return {function, &entry};
  return {nullptr, nullptr};
}

void Program::setHostArgumentsCapturable(bool capturable) {
  for (Function *function : {&forwardFn, &backwardFn, &wgradFn})
    if (function->executor)
      function->executor->setHostArgumentsCapturable(capturable);
}

Error Program::setGroupPointers(size_t gradOutput,
                                llvm::ArrayRef<CUdeviceptr> pointers) {
  const auto &gradOutputs = tensors(TensorKind::GradOutput);
  auto [function, accumulation] = accumulationOf(gradOutput);
  if (!accumulation)
    return makeError(
        ErrorCode::InvalidArgument,
        llvm::formatv("set_group_pointers: grad output {0}{1} is not a "
                      "main_grad the backward adds into",
                      gradOutput,
                      gradOutput < gradOutputs.size()
                          ? " ('" + gradOutputs[gradOutput].name + "')"
                          : std::string(" (there are ") +
                                std::to_string(gradOutputs.size()) + ")"));
  if (!accumulation->groupedStep)
    return makeError(ErrorCode::InvalidArgument,
                     "set_group_pointers: '" + accumulation->name +
                         "' is not added in place by a grouped GEMM that "
                         "alone reads its main_grad, so its main_grad must "
                         "be one stacked buffer");
  if (Error error = function->executor->setGroupedOutputs(
          *accumulation->groupedStep, pointers))
    return annotate(std::move(error),
                    "set_group_pointers('" + accumulation->name + "')",
                    ErrorCode::InvalidArgument);
  return Error::success();
}

llvm::Expected<CUdeviceptr> Program::metaPointer(size_t index) const {
  if (index >= metaBuffers.size())
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("meta tensor {0} does not exist (the "
                                   "program has {1})",
                                   index, metaBuffers.size()));
  return owned[metaBuffers[index]].get();
}

static Error checkBytes(const TensorDesc &desc, size_t bytes) {
  if (bytes == size_t(desc.type.bytes()))
    return Error::success();
  return makeError(ErrorCode::InvalidArgument,
                   llvm::formatv("meta tensor '{0}' has {1} bytes, given {2}",
                                 desc.name, desc.type.bytes(), bytes));
}

Error Program::getMeta(size_t index, void *host, size_t bytes,
                       CUstream stream) {
  return copyMeta(index, host, bytes, stream, /*toHost=*/true);
}

size_t Program::weightCastCacheBytes() const {
  return forwardFn.executor->staticCacheBytes();
}

Error Program::setWeightCasts(WeightCasts mode) {
  if (mode != WeightCasts::Run)
    if (Error error = forwardFn.executor->allocateStaticCache())
      return error;
  if (mode == WeightCasts::ByFlag && !weightCastFlag)
    return makeError(ErrorCode::InvalidArgument,
                     "weight casts decided by a device flag need the flag "
                     "(setWeightCastFlag)");
  weightCasts = mode;
  return Error::success();
}

Error Program::setWeightCastFlag(CUdeviceptr flag) {
  if (!flag)
    return makeError(ErrorCode::InvalidArgument,
                     "the weight-cast flag is a null pointer");
  if (Error error = forwardFn.executor->checkStaticStepsTakeSkipFlag())
    return error;
  weightCastFlag = flag;
  return setWeightCasts(WeightCasts::ByFlag);
}

CUdeviceptr Program::savedCachePointer(size_t index) const {
  if (!training() || weightCasts == WeightCasts::Run)
    return 0;
  for (auto [result, binding] : llvm::enumerate(forwardFn.results))
    if (binding.kind == Binding::Saved && binding.index == index)
      return forwardFn.executor->cachedResultAddress(result);
  return 0;
}

size_t Program::lastSkippedSteps() const {
  return forwardFn.executor->lastSkippedSteps();
}

Error Program::setMeta(size_t index, const void *host, size_t bytes,
                       CUstream stream) {
  // Weight casts made with the state being replaced are stale.
  forwardFn.executor->invalidateStaticCache();
  return copyMeta(index, const_cast<void *>(host), bytes, stream,
                  /*toHost=*/false);
}

Error Program::copyMeta(size_t index, void *host, size_t bytes, CUstream stream,
                        bool toHost) {
  auto pointer = metaPointer(index);
  if (!pointer)
    return pointer.takeError();
  if (Error error = checkBytes(tensors(TensorKind::Meta)[index], bytes))
    return error;
  const CudaDriver &driver = *CudaDriver::get();
  CUresult copied =
      toHost ? driver.cuMemcpyDtoHAsync(host, *pointer, bytes, stream)
             : driver.cuMemcpyHtoDAsync(*pointer, host, bytes, stream);
  if (Error error = driver.check(copied, toHost ? "reading the FP8 meta state"
                                                : "writing the FP8 meta state"))
    return error;
  // The host buffer may go away when the call returns.
  return driver.check(driver.cuStreamSynchronize(stream),
                      "cuStreamSynchronize");
}
