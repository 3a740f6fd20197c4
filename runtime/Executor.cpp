//===- Executor.cpp - running one plan function on a stream ---------------===//
#include "runtime/Executor.h"
#include "runtime/AmaxReducer.h"
#include "runtime/CpCollective.h"
#include "runtime/TensorParallel.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>

using namespace tejit::runtime;
using llvm::Error;

ModuleSet::~ModuleSet() {
  auto driver = CudaDriver::get();
  if (!driver) {
    llvm::consumeError(driver.takeError());
    return;
  }
  for (auto &entry : modules)
    driver->cuModuleUnload(entry.second);
}

llvm::Expected<CUfunction> ModuleSet::function(llvm::StringRef binary,
                                               llvm::StringRef name) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  auto found = modules.find(binary);
  if (found == modules.end()) {
    auto bytes = bundle.binaries.find(binary);
    if (bytes == bundle.binaries.end())
      return makeError(ErrorCode::Internal,
                       "the bundle has no binary '" + binary + "'");
    CUmodule module;
    if (Error error = driver->check(
            driver->cuModuleLoadData(&module, bytes->second.data()),
            "loading kernel binary '" + binary + "' (built for " +
                bundle.plan.arch + ")"))
      return std::move(error);
    found = modules.try_emplace(binary, module).first;
  }
  CUfunction function;
  if (Error error =
          driver->check(driver->cuModuleGetFunction(&function, found->second,
                                                    name.str().c_str()),
                        "finding kernel '" + name + "' in '" + binary + "'"))
    return std::move(error);
  return function;
}

llvm::Expected<CUfunction> ModuleSet::helper(llvm::StringRef name) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  // Three PTX modules, each JIT-compiled on first use: the decode
  // attention kernels (tejit_decode_attention*), the grouped GEMM's bias
  // rows (tejit_grouped_*) and everything else.
  struct Source {
    llvm::StringRef key;
    const char *ptx;
    const char *what;
  };
  Source source = {"<runtime helpers>", attentionPrepPtx(),
                   "loading the runtime helper kernels (PTX)"};
  if (name.starts_with("tejit_decode_attention"))
    source = {"<runtime decode attention>", decodeAttentionPtx(),
              "loading the decode attention kernels (PTX)"};
  else if (name.starts_with("tejit_grouped_"))
    source = {"<runtime grouped GEMM>", groupedBiasPtx(),
              "loading the grouped GEMM bias rows kernel (PTX)"};
  auto found = modules.find(source.key);
  if (found == modules.end()) {
    CUmodule module;
    if (Error error = driver->check(
            driver->cuModuleLoadData(&module, source.ptx), source.what))
      return std::move(error);
    found = modules.try_emplace(source.key, module).first;
  }
  CUfunction function;
  if (Error error =
          driver->check(driver->cuModuleGetFunction(&function, found->second,
                                                    name.str().c_str()),
                        "finding the runtime helper kernel '" + name + "'"))
    return std::move(error);
  return function;
}

llvm::Expected<std::unique_ptr<Executor>>
Executor::create(const FunctionPlan &function, ModuleSet &modules,
                 GemmRunner &gemms, bool findStatic) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  std::unique_ptr<Executor> executor(
      new Executor(function, modules, gemms, *driver));
  for (auto [index, step] : llvm::enumerate(function.steps)) {
    CUfunction entry = nullptr;
    if (const auto *kernel = std::get_if<KernelStep>(&step)) {
      // Parsed plans are checked already; this guards plans built in memory.
      if (kernel->scratchFromPreviousStep) {
        std::string problem = previousScratchProblem(
            llvm::ArrayRef<Step>(function.steps).take_front(index), *kernel);
        if (!problem.empty())
          return makeError(
              ErrorCode::InvalidArgument,
              llvm::formatv("function '{0}', step {1} ('{2}') reads the "
                            "scratch as the previous step left it, but {3}",
                            function.name, index, kernel->name, problem));
      }
      auto found = modules.function(kernel->binary, kernel->name);
      if (!found)
        return found.takeError();
      entry = *found;
      // Above 48 KiB, dynamic shared memory must be asked for.
      if (kernel->sharedBytes > 48 * 1024)
        if (Error error = driver->check(
                driver->cuFuncSetAttribute(
                    entry, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    kernel->sharedBytes),
                "reserving shared memory for '" + kernel->name + "'"))
          return std::move(error);
    }
    std::optional<AttentionLauncher> attention;
    if (const auto *attentionStep = std::get_if<AttentionStep>(&step)) {
      auto prep = modules.helper("tejit_attention_prep");
      if (!prep)
        return prep.takeError();
      // A kv cache step with few new queries may run on the decode
      // kernels: loaded (a JIT of their PTX) only for a step that prefers
      // them, or that they can run when cuDNN cannot.
      auto decodeKernels = [&](const AttentionProblem &problem)
          -> llvm::Expected<DecodeKernels> {
        DecodeKernels decode;
        DecodeKernelNames names = decodeKernelNames(problem);
        auto splitTensorCores = modules.helper(names.splitTensorCores);
        if (!splitTensorCores)
          return splitTensorCores.takeError();
        auto split = modules.helper(names.split);
        if (!split)
          return split.takeError();
        auto combine = modules.helper(names.combine);
        if (!combine)
          return combine.takeError();
        decode.splitTensorCores = *splitTensorCores;
        decode.split = *split;
        decode.combine = *combine;
        return decode;
      };
      // Parsed once: what it says decides the kernels to load.
      auto parsed = AttentionLauncher::parse(*attentionStep, function);
      if (!parsed)
        return annotate(parsed.takeError(), llvm::formatv("step {0}", index),
                        ErrorCode::Unsupported);
      bool prefersDecode = parsed->usesDecodeKernels();
      DecodeKernels decode;
      if (prefersDecode) {
        auto loaded = decodeKernels(parsed->problem());
        if (!loaded)
          return loaded.takeError();
        decode = *loaded;
      }
      auto launcher =
          AttentionLauncher::complete(*parsed, function, *prep, decode);
      if (!launcher && parsed->decodeEligible() && !prefersDecode) {
        llvm::consumeError(launcher.takeError());
        auto loaded = decodeKernels(parsed->problem());
        if (!loaded)
          return loaded.takeError();
        launcher =
            AttentionLauncher::complete(*parsed, function, *prep, *loaded);
      }
      if (!launcher)
        return annotate(launcher.takeError(), llvm::formatv("step {0}", index),
                        ErrorCode::Unsupported);
      if (launcher->needsCpAccumulate()) {
        auto accumulate = modules.helper("tejit_cp_accumulate");
        if (!accumulate)
          return accumulate.takeError();
        launcher->setCpAccumulateKernel(*accumulate);
      }
      attention = std::move(*launcher);
    }
    std::optional<GroupedGemm> grouped;
    if (const auto *groupedStep = std::get_if<GroupedGemmStep>(&step)) {
      auto created = GroupedGemm::create(*groupedStep, function);
      if (!created)
        return annotate(
            created.takeError(),
            llvm::formatv("function '{0}', step {1}", function.name, index),
            ErrorCode::InvalidArgument);
      grouped = std::move(*created);
      // Now, not on a first run that may be under stream capture.
      if (grouped->writesBiasRows()) {
        auto kernel = modules.helper("tejit_grouped_bias_rows");
        if (!kernel)
          return kernel.takeError();
        grouped->useBiasRowsKernel(*kernel);
      }
    }
    // Per-tensor FP8 scales are staged into aligned slots; block scales are
    // read in place.
    DeviceBuffer scaleSlots;
    if (grouped && grouped->step().fp8 && !grouped->step().blockScaled()) {
      auto slots = DeviceBuffer::allocate(
          scaleSlotBytes(grouped->step().groups),
          llvm::formatv("the scale slots of function '{0}', step {1}",
                        function.name, index)
              .str());
      if (!slots)
        return slots.takeError();
      scaleSlots = std::move(*slots);
    }
    executor->kernels.push_back(entry);
    executor->attentions.push_back(std::move(attention));
    executor->groupedGemms.push_back(std::move(grouped));
    executor->groupedScaleSlots.push_back(std::move(scaleSlots));
    executor->groupedOutputs.emplace_back();
  }
  // Host arguments (m_splits): device copies of their own, refreshed by
  // every run.
  executor->hostRules = hostArgumentRules(function);
  if (!executor->hostRules.empty()) {
    std::vector<int64_t> counts;
    for (const HostArgumentRule &rule : executor->hostRules) {
      counts.push_back(rule.count);
      executor->hostValues.emplace_back(size_t(rule.count));
    }
    auto staging = HostArgumentStaging::create(
        counts,
        "the device copies of the host arguments of '" + function.name + "'");
    if (!staging)
      return staging.takeError();
    executor->hostStaging = std::move(*staging);
  }
  llvm::Expected<GroupNeeds> tpNeeds =
      GroupNeeds::of(function, Parallelism::Tensor);
  if (!tpNeeds)
    return tpNeeds.takeError();
  executor->tpNeeds = *tpNeeds;
  llvm::Expected<GroupNeeds> cpNeeds =
      GroupNeeds::of(function, Parallelism::Context);
  if (!cpNeeds)
    return cpNeeds.takeError();
  executor->cpNeeds = *cpNeeds;
  executor->addresses.assign(function.values.size(), 0);
  // A view's address is its root's plus an offset, the same on every run:
  // follow each chain once here (the plan parser rejects cycles).
  for (const ValueInfo &value : function.values) {
    auto [base, offset] = function.viewBase(value.id);
    const Storage &storage = function.values[base].storage;
    Root root;
    root.kind = storage.kind == Storage::Argument ? Root::Argument
                : storage.kind == Storage::Result ? Root::Result
                                                  : Root::Arena;
    root.index = storage.index;
    root.byteOffset = offset;
    executor->roots.push_back(root);
  }
  executor->resultsToCopy(executor->roots, executor->firstCopiedResults,
                          executor->copiedResults);
  if (findStatic)
    executor->staticSteps = findStaticSteps(function);
  return executor;
}

void Executor::resultsToCopy(llvm::ArrayRef<Root> table,
                             std::vector<size_t> &first,
                             std::vector<size_t> &last) const {
  first.clear();
  last.clear();
  for (auto [index, entry] : llvm::enumerate(plan.results)) {
    const Root &root = table[entry.value];
    if (root.kind == Root::Result && root.index == int64_t(index) &&
        !root.byteOffset)
      continue;
    // No step writes the argument (in-place updates write through results
    // the program binds to it, after every read of it).
    bool before = root.kind == Root::Argument && plan.resultCopiedFirst(index);
    (before ? first : last).push_back(index);
  }
}

Error Executor::copyResults(llvm::ArrayRef<size_t> indices,
                            llvm::ArrayRef<CUdeviceptr> results,
                            CUstream stream) {
  for (size_t index : indices) {
    int64_t id = plan.results[index].value;
    // A caller given the cached result's address reads it in place.
    if (results[index] == addresses[id])
      continue;
    if (Error error = driver.check(
            driver.cuMemcpyDtoDAsync(results[index], addresses[id],
                                     plan.values[id].bytes, stream),
            "copying result '" + plan.results[index].name + "'"))
      return error;
  }
  return Error::success();
}

Error Executor::allocateStaticCache() {
  if (staticSteps.empty() || staticCache.bytes())
    return Error::success();
  // Each static output gets bytes of its own in the cache (in the arena,
  // values that are never live together share bytes).
  constexpr int64_t alignment = 256;
  auto round = [&](int64_t bytes) {
    return (bytes + alignment - 1) / alignment * alignment;
  };
  llvm::DenseMap<int64_t, int64_t> cacheOffset; // value id -> offset
  int64_t bytes = 0;
  for (int64_t id : staticSteps.outputs) {
    cacheOffset[id] = bytes;
    bytes += round(plan.values[id].bytes);
  }
  // A GEMM operand cast by a static step is dequantized by a scale_inv
  // that, under DelayedScaling, is a view of the state: the cache keeps a
  // copy taken with the cast (the state moves on at every update).
  llvm::DenseSet<int64_t> staticValues(staticSteps.outputs.begin(),
                                       staticSteps.outputs.end());
  for (const Step &step : plan.steps) {
    // FP8 GEMMs, plain or grouped (whose scale_inv is a [G] vector or
    // block scales).
    std::optional<std::array<std::pair<int64_t, std::optional<int64_t>>, 2>>
        operands;
    if (const auto *gemm = std::get_if<GemmStep>(&step); gemm && gemm->scaled)
      operands = {{{gemm->a, gemm->aScaleInv}, {gemm->b, gemm->bScaleInv}}};
    if (const auto *grouped = std::get_if<GroupedGemmStep>(&step);
        grouped && grouped->fp8)
      operands = {
          {{grouped->a, grouped->aScaleInv}, {grouped->b, grouped->bScaleInv}}};
    if (!operands)
      continue;
    for (auto [operand, scaleInv] : *operands) {
      if (!scaleInv || !staticValues.count(plan.viewBase(operand).first) ||
          cacheOffset.count(*scaleInv))
        continue;
      const Root &root = roots[*scaleInv];
      if (root.kind != Root::Argument)
        continue; // a static output (current scaling) is cached already
      cacheOffset[*scaleInv] = bytes;
      scaleCopies.push_back({size_t(root.index), root.byteOffset,
                             plan.values[*scaleInv].bytes, bytes});
      bytes += round(plan.values[*scaleInv].bytes);
    }
  }
  auto buffer = DeviceBuffer::allocate(bytes, "the weight-cast cache of '" +
                                                  plan.name + "'");
  if (!buffer)
    return buffer.takeError();
  staticCache = std::move(*buffer);
  // The cached values, and every view of one, move there; a view keeps its
  // byte offset from the cached value's start.
  cachedRoots = roots;
  for (const ValueInfo &value : plan.values) {
    int64_t id = value.id, offset = 0;
    while (true) {
      if (auto found = cacheOffset.find(id); found != cacheOffset.end()) {
        cachedRoots[value.id] = {Root::Cache, found->second, offset};
        break;
      }
      if (plan.values[id].storage.kind != Storage::View)
        break;
      offset += plan.values[id].storage.byteOffset;
      id = plan.values[id].storage.index;
    }
  }
  resultsToCopy(cachedRoots, cachedFirstCopiedResults, cachedCopiedResults);
  for (auto [index, step] : llvm::enumerate(plan.steps))
    if (staticSteps.isStatic[index])
      for (const KernelArg &arg : std::get<KernelStep>(step).args)
        if (arg.output && arg.zeroBeforeLaunch)
          staticAmaxes.push_back(arg.value);
  return Error::success();
}

Error Executor::checkStaticStepsTakeSkipFlag() const {
  if (staticSteps.isStatic.empty()) // no cache: the flag is never passed
    return Error::success();
  for (auto [index, step] : llvm::enumerate(plan.steps))
    if (staticSteps.isStatic[index] && !std::get<KernelStep>(step).skipFlag)
      return makeError(
          ErrorCode::Unsupported,
          llvm::formatv("function '{0}': its weight cast '{1}' takes no "
                        "skip flag (a plan older than format 4): compile it "
                        "again to decide the casts on the device",
                        plan.name, std::get<KernelStep>(step).name));
  return Error::success();
}

CUdeviceptr Executor::cachedResultAddress(size_t index) const {
  if (!staticCache.bytes() || index >= plan.results.size())
    return 0;
  const Root &root = cachedRoots[plan.results[index].value];
  return root.kind == Root::Cache
             ? staticCache.get() + root.index + root.byteOffset
             : 0;
}

Error Executor::snapshotScales(llvm::ArrayRef<CUdeviceptr> arguments,
                               CUstream stream, CUdeviceptr skipFlag) {
  if (skipFlag && !copyUnlessFlag && !scaleCopies.empty()) {
    auto helper = modules.helper("tejit_copy_unless_flag");
    if (!helper)
      return helper.takeError();
    copyUnlessFlag = *helper;
  }
  for (const ScaleCopy &copy : scaleCopies) {
    CUdeviceptr to = staticCache.get() + copy.cacheOffset;
    CUdeviceptr from = arguments[copy.argument] + copy.byteOffset;
    if (!skipFlag) {
      if (Error error = driver.check(
              driver.cuMemcpyDtoDAsync(to, from, copy.bytes, stream),
              "keeping a weight's scale_inv with its cast"))
        return error;
      continue;
    }
    unsigned long long bytes = copy.bytes;
    void *params[] = {&skipFlag, &to, &from, &bytes};
    if (Error error =
            driver.check(driver.cuLaunchKernel(copyUnlessFlag, 1, 1, 1, 32, 1,
                                               1, 0, stream, params, nullptr),
                         "keeping a weight's scale_inv with its cast"))
      return error;
  }
  return Error::success();
}

llvm::Expected<bool>
Executor::canSkipStaticSteps(llvm::ArrayRef<CUdeviceptr> arguments,
                             CUstream stream, StaticReuse reuse,
                             bool &capturing) const {
  capturing = false;
  if (staticSteps.empty())
    return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (Error error = driver.check(driver.cuStreamIsCapturing(stream, &status),
                                 "asking whether the stream is capturing"))
    return std::move(error);
  capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
  if (reuse == StaticReuse::Never || !staticCacheValid ||
      (reuse == StaticReuse::WhenUnchanged &&
       (capturing || stateUpdatedSinceCast)))
    return false;
  for (auto [index, argument] : llvm::enumerate(staticSteps.arguments))
    if (arguments[argument] != staticArgumentPointers[index])
      return false;
  return true;
}

Error Executor::bind(llvm::ArrayRef<CUdeviceptr> arguments,
                     llvm::ArrayRef<CUdeviceptr> results, CUdeviceptr arena,
                     llvm::ArrayRef<Root> table) {
  if (arguments.size() != plan.arguments.size() ||
      results.size() != plan.results.size())
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("function '{0}' takes {1} arguments and {2} "
                                   "results, given {3} and {4}",
                                   plan.name, plan.arguments.size(),
                                   plan.results.size(), arguments.size(),
                                   results.size()));
  for (auto [id, root] : llvm::enumerate(table)) {
    CUdeviceptr base = 0;
    switch (root.kind) {
    case Root::Argument:
      base = arguments[root.index];
      break;
    case Root::Result:
      base = results[root.index];
      break;
    case Root::Arena:
      base = arena + root.index;
      break;
    case Root::Cache:
      base = staticCache.get() + root.index;
      break;
    }
    addresses[id] = base + root.byteOffset;
  }
  // A grouped GEMM given per-group outputs reads and writes neither its
  // stacked accumulate nor its stacked out (setGroupedOutputs).
  auto perGroup = [&](int64_t value) {
    for (auto [step, outputs] : llvm::enumerate(groupedOutputs))
      if (!outputs.empty()) {
        const auto &grouped = std::get<GroupedGemmStep>(plan.steps[step]);
        if (grouped.out == value || grouped.accumulate == value)
          return true;
      }
    return false;
  };
  for (auto [index, entry] : llvm::enumerate(plan.arguments))
    if (!arguments[index] && plan.values[entry.value].bytes &&
        !perGroup(entry.value) && !plan.isUnused(entry.value))
      return makeError(ErrorCode::InvalidArgument,
                       llvm::formatv("function '{0}': argument {1} ('{2}') is "
                                     "a null pointer",
                                     plan.name, index, entry.name));
  for (auto [index, entry] : llvm::enumerate(plan.results))
    if (!results[index] && plan.values[entry.value].bytes &&
        !perGroup(entry.value))
      return makeError(ErrorCode::InvalidArgument,
                       llvm::formatv("function '{0}': result {1} ('{2}') is "
                                     "a null pointer",
                                     plan.name, index, entry.name));
  return Error::success();
}

Error Executor::setTensorParallelGroup(
    std::shared_ptr<TensorParallelGroup> group) {
  if (Error error =
          tpNeeds.checkRanks(plan.name, group.get(), Parallelism::Tensor))
    return error;
  tpGroup = std::move(group);
  return Error::success();
}

Error Executor::setContextParallelGroup(
    std::shared_ptr<TensorParallelGroup> group) {
  if (Error error =
          cpNeeds.checkRanks(plan.name, group.get(), Parallelism::Context))
    return error;
  cpGroup = std::move(group);
  return Error::success();
}

llvm::SmallVector<DeviceRange, 8> Executor::bytesOf(const Step &step) const {
  llvm::SmallVector<DeviceRange, 8> ranges;
  forEachStepValue(step, [&](int64_t id, bool) {
    CUdeviceptr begin = addresses[id];
    ranges.push_back({begin, begin + CUdeviceptr(plan.values[id].bytes)});
  });
  return ranges;
}

Error Executor::startCollective(TpStepRef step, CUstream stream) {
  CUdeviceptr in = addresses[step.step.in], out = addresses[step.step.out];
  const TensorType &inType = plan.values[step.step.in].type;
  const TensorType &outType = plan.values[step.step.out].type;
  auto enqueue = [&](CUstream on) {
    switch (step.collective) {
    case TpCollective::AllReduce:
      return tpGroup->allReduceSum(in, out, size_t(inType.numElements()),
                                   inType.element, on);
    case TpCollective::AllGather:
      // Counts are per rank: the gather's input, the scatter's output.
      return tpGroup->allGather(in, out, size_t(inType.numElements()),
                                inType.element, on);
    case TpCollective::ReduceScatter:
      return tpGroup->reduceScatter(in, out, size_t(outType.numElements()),
                                    inType.element, on);
    case TpCollective::AllToAll:
      break; // context parallelism's alone: asTpStep never gives one
    }
    llvm_unreachable("not a tensor-parallel collective");
  };
  if (!overlapSums)
    return enqueue(stream);
  // Every collective of the group goes to the one side stream, so they keep
  // the plan's order there (the same on every rank); a step that reads the
  // gathered or scattered value joins it first, like a sum's reader.
  if (!sumOverlap)
    sumOverlap = std::make_unique<SumOverlap>(driver);
  DeviceRange buffers[] = {
      {in, in + CUdeviceptr(plan.values[step.step.in].bytes)},
      {out, out + CUdeviceptr(plan.values[step.step.out].bytes)}};
  return sumOverlap->start(stream, buffers, enqueue);
}

size_t Executor::scratchBytes() const {
  size_t bytes = 0;
  for (const Step &step : plan.steps)
    if (const auto *kernel = std::get_if<KernelStep>(&step))
      bytes = std::max<size_t>(bytes, kernel->scratchBytes);
  for (const std::optional<AttentionLauncher> &attention : attentions)
    if (attention)
      bytes = std::max(bytes, attention->scratchBytes());
  for (const Step &step : plan.steps)
    if (const auto *cp = std::get_if<CpCollectiveStep>(&step))
      bytes = std::max(bytes, cpCollectiveScratchBytes(*cp, plan));
  return bytes;
}

Error Executor::launch(const KernelStep &step, CUfunction function,
                       CUdeviceptr scratch, CUstream stream,
                       CUdeviceptr skipFlag) {
  llvm::SmallVector<CUdeviceptr, 16> pointers;
  llvm::SmallVector<void *, 16> params;
  pointers.reserve(step.args.size() + 1);
  for (const KernelArg &arg : step.args) {
    pointers.push_back(addresses[arg.value]);
    // Amaxes the kernel max-reduces into with atomics start from zero.
    if (arg.zeroBeforeLaunch)
      if (Error error = driver.check(
              driver.cuMemsetD8Async(pointers.back(), 0,
                                     plan.values[arg.value].bytes, stream),
              "zeroing an amax of '" + step.name + "'"))
        return error;
  }
  // Cross-block sums take the scratch last, with the bytes they ask for
  // zeroed (arrival counters); a kernel that reads what the previous step
  // left there asks for none.
  if (step.scratchBytes) {
    if (!step.scratchFromPreviousStep && step.scratchZeroBytes)
      if (Error error = driver.check(
              driver.cuMemsetD8Async(scratch + step.scratchZeroOffset, 0,
                                     step.scratchZeroBytes, stream),
              "zeroing the scratch of '" + step.name + "'"))
        return error;
    pointers.push_back(scratch);
  }
  if (step.skipFlag)
    pointers.push_back(skipFlag);
  for (CUdeviceptr &pointer : pointers)
    params.push_back(&pointer);
  return driver.check(
      driver.cuLaunchKernel(function, step.grid[0], step.grid[1], step.grid[2],
                            step.block[0], step.block[1], step.block[2],
                            step.sharedBytes, stream, params.data(), nullptr),
      "launching '" + step.name + "'");
}

Error Executor::gemm(const GemmStep &step, CUstream stream) {
  auto pointer = [&](std::optional<int64_t> id) -> void * {
    return id ? reinterpret_cast<void *>(addresses[*id]) : nullptr;
  };
  GemmPointers pointers;
  pointers.a = reinterpret_cast<const void *>(addresses[step.a]);
  pointers.b = reinterpret_cast<const void *>(addresses[step.b]);
  pointers.out = reinterpret_cast<void *>(addresses[step.out]);
  pointers.aScaleInv = pointer(step.aScaleInv);
  pointers.bScaleInv = pointer(step.bScaleInv);
  pointers.bias = pointer(step.epilogue.bias);
  pointers.aux = pointer(step.epilogue.aux);
  pointers.dScale = pointer(step.epilogue.dScale);
  pointers.amaxD = pointer(step.epilogue.amaxD);
  pointers.biasGrad = pointer(step.epilogue.biasGrad);
  pointers.residual = pointer(step.epilogue.residual);
  // cuBLASLt overwrites amax_D (measured on an H200): no zeroing needed.
  return gemms.run(step, plan, pointers, stream);
}

Error Executor::readHostArguments(llvm::ArrayRef<CUdeviceptr> arguments,
                                  CUstream stream, bool &capturing) {
  // A graph replays the sizes of the captured call (the grouped GEMMs'
  // shapes are fixed when they are enqueued): refused before enqueueing
  // unless the caller said its values stay.
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (Error error = driver.check(driver.cuStreamIsCapturing(stream, &status),
                                 "asking whether the stream is capturing"))
    return error;
  const HostArgumentRule &first = hostRules.front();
  capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
  if (capturing && !hostArgumentsCapturable)
    return makeError(
        ErrorCode::Unsupported,
        llvm::formatv("function '{0}' takes argument {1} ('{2}', m_splits) "
                      "in host memory and sizes its grouped GEMMs from it at "
                      "every call, so a CUDA graph would replay the values "
                      "of the captured call (the stream is capturing); run "
                      "it eagerly, or allow it for fixed splits "
                      "(tejit_program_set_capture_host_arguments)",
                      plan.name, first.argument,
                      plan.arguments[first.argument].name));
  for (auto [rule, values] : llvm::zip(hostRules, hostValues)) {
    if (!rule.count)
      continue;
    const auto *host = reinterpret_cast<const int32_t *>(
        static_cast<uintptr_t>(arguments[rule.argument]));
    if (!host)
      return makeError(
          ErrorCode::InvalidArgument,
          llvm::formatv("function '{0}': argument {1} ('{2}', m_splits) is a "
                        "null pointer; it takes {3} int32 values in host "
                        "memory",
                        plan.name, rule.argument,
                        plan.arguments[rule.argument].name, rule.count));
    // Read once, now: the caller may change the memory after the call.
    std::copy(host, host + rule.count, values.begin());
    if (Error error = checkHostArgument(rule, values, plan))
      return error;
  }
  return Error::success();
}

Error Executor::setGroupedOutputs(size_t step,
                                  llvm::ArrayRef<CUdeviceptr> pointers) {
  if (step >= groupedGemms.size() || !groupedGemms[step])
    return makeError(ErrorCode::InvalidArgument,
                     llvm::formatv("function '{0}': step {1} is not a grouped "
                                   "GEMM",
                                   plan.name, step));
  if (Error error =
          GroupedGemm::checkGroupOut(groupedGemms[step]->step(), pointers))
    return annotate(std::move(error),
                    llvm::formatv("function '{0}', step {1}", plan.name, step),
                    ErrorCode::InvalidArgument);
  groupedOutputs[step].assign(pointers.begin(), pointers.end());
  return Error::success();
}

Error Executor::groupedGemm(size_t index, const GroupedGemmStep &step,
                            CUstream stream) {
  auto rule = llvm::find_if(hostRules, [&](const HostArgumentRule &rule) {
    return rule.value == step.mSplits;
  });
  if (rule == hostRules.end() || !groupedGemms[index])
    return makeError(ErrorCode::Internal,
                     "a grouped GEMM's m_splits is not a host argument");
  auto pointer = [&](std::optional<int64_t> id) -> const void * {
    return id ? reinterpret_cast<const void *>(addresses[*id]) : nullptr;
  };
  GroupedGemmPointers pointers;
  pointers.a = pointer(step.a);
  pointers.b = pointer(step.b);
  pointers.out = reinterpret_cast<void *>(addresses[step.out]);
  pointers.aScaleInv = pointer(step.aScaleInv);
  pointers.bScaleInv = pointer(step.bScaleInv);
  pointers.bias = pointer(step.bias);
  pointers.accumulate = pointer(step.accumulate);
  if (CUdeviceptr slots = groupedScaleSlots[index].get())
    pointers.scaleSlots = reinterpret_cast<void *>(slots);
  pointers.groupOut = groupedOutputs[index];
  if (!lanesLooked) {
    // The process's side streams for small groups (GemmLanes.h), made on
    // the first grouped GEMM that runs (eagerly: a capture may not create
    // streams or allocate).
    llvm::Expected<GemmLanes *> shared = GemmLanes::shared();
    if (!shared)
      return shared.takeError();
    lanes = *shared;
    lanesLooked = true;
  }
  // Only in a capture: eagerly the groups wait for the host anyway
  // (GemmLanes.h).
  return groupedGemms[index]->run(gemms, hostValues[rule - hostRules.begin()],
                                  pointers, stream, driver,
                                  capturingHostArguments ? lanes : nullptr);
}

Error Executor::run(llvm::ArrayRef<CUdeviceptr> callerArguments,
                    llvm::ArrayRef<CUdeviceptr> results, CUdeviceptr arena,
                    CUdeviceptr scratch, CUstream stream,
                    AmaxReducer *amaxReducer, StaticReuse reuse, bool useCache,
                    bool zeroSkippedAmaxes, CUdeviceptr skipFlag,
                    bool leaveState) {
  // Before anything is enqueued: a run that stopped at the first
  // tensor-parallel step would leave half a function on the stream (or in a
  // graph being captured).
  if (Error error =
          tpNeeds.check(plan.name, tpGroup.get(), Parallelism::Tensor))
    return error;
  if (Error error =
          cpNeeds.check(plan.name, cpGroup.get(), Parallelism::Context))
    return error;
  // Host arguments: read and checked before anything is enqueued, then
  // copied to the device (HostArguments.h), where everything but the
  // grouped GEMMs reads them.
  llvm::ArrayRef<CUdeviceptr> arguments = callerArguments;
  if (!hostRules.empty() && arguments.size() == plan.arguments.size()) {
    bool &capturing = capturingHostArguments;
    if (Error error = readHostArguments(arguments, stream, capturing))
      return error;
    if (Error error = capturing
                          ? hostStaging->uploadCaptured(hostValues, stream)
                          : hostStaging->upload(hostValues, stream))
      return error;
    boundArguments.assign(arguments.begin(), arguments.end());
    for (auto [index, rule] : llvm::enumerate(hostRules))
      boundArguments[rule.argument] = hostStaging->address(index);
    arguments = boundArguments;
  }
  useCache = useCache && staticCache.bytes();
  if (!useCache)
    skipFlag = 0;
  if (Error error =
          bind(arguments, results, arena, useCache ? cachedRoots : roots))
    return error;
  bool capturing = false, skip = false;
  if (skipFlag) {
    // The device decides; what the cache holds after this run is unknown
    // here.
    staticCacheValid = false;
    if (Error error = snapshotScales(arguments, stream, skipFlag))
      return error;
  } else if (useCache) {
    llvm::Expected<bool> canSkip =
        canSkipStaticSteps(arguments, stream, reuse, capturing);
    if (!canSkip)
      return canSkip.takeError();
    skip = *canSkip;
    // Until this run has enqueued every static step, the cache is not known
    // to hold anything.
    if (!skip) {
      staticCacheValid = false;
      if (Error error = snapshotScales(arguments, stream))
        return error;
    } else if (zeroSkippedAmaxes) {
      for (int64_t id : staticAmaxes)
        if (Error error = driver.check(
                driver.cuMemsetD8Async(addresses[id], 0, plan.values[id].bytes,
                                       stream),
                "zeroing the amax of a weight cast skipped"))
          return error;
    }
  }
  // Saved views of the arguments are copied first, and the steps read the
  // copies: the state may be updated in place, and cuBLASLt wants its
  // scalars 16-byte aligned, which slots of a meta vector are not.
  llvm::ArrayRef<size_t> first =
      useCache ? cachedFirstCopiedResults : firstCopiedResults;
  if (Error error = copyResults(first, results, stream))
    return error;
  for (size_t index : first)
    addresses[plan.results[index].value] = results[index];
  skippedSteps = 0;
  for (auto [index, step] : llvm::enumerate(plan.steps)) {
    if (skip && staticSteps.isStatic[index]) {
      ++skippedSteps;
      continue;
    }
    if (leaveState && !neededWhenLeavingState.empty() &&
        !neededWhenLeavingState[index])
      continue;
    auto failed = [&](Error error) {
      // Leave no fork open on the stream (or in a graph being captured).
      if (sumOverlap)
        llvm::consumeError(sumOverlap->joinAll(stream));
      return annotate(
          std::move(error),
          llvm::formatv("function '{0}', step {1}", plan.name, index));
    };
    // A sum in flight is waited for by the steps that touch its bytes, and
    // by collectives on other communicators (one order on every rank).
    if (sumOverlap && sumOverlap->busy())
      if (Error error = std::holds_alternative<AmaxAllReduceStep>(step) ||
                                std::holds_alternative<CpCollectiveStep>(step)
                            ? sumOverlap->joinAll(stream)
                            : sumOverlap->joinTouching(stream, bytesOf(step)))
        return failed(std::move(error));
    Error error = Error::success();
    if (const auto *kernel = std::get_if<KernelStep>(&step)) {
      error =
          launch(*kernel, kernels[index], scratch, stream,
                 staticSteps.isStatic.empty() || !staticSteps.isStatic[index]
                     ? 0
                     : skipFlag);
    } else if (const auto *gemmStep = std::get_if<GemmStep>(&step)) {
      error = gemm(*gemmStep, stream);
    } else if (const auto *grouped = std::get_if<GroupedGemmStep>(&step)) {
      error = groupedGemm(index, *grouped, stream);
    } else if (attentions[index]) {
      error = attentions[index]->run(addresses, scratch, stream, driver);
    } else if (const auto *reduce = std::get_if<AmaxAllReduceStep>(&step)) {
      if (amaxReducer)
        error = amaxReducer->allReduceMax(
            addresses[reduce->in], addresses[reduce->out],
            plan.values[reduce->in].bytes / sizeof(float), stream);
      // One process: the reduction over ranks is a copy.
      else if (addresses[reduce->in] != addresses[reduce->out])
        error = driver.check(driver.cuMemcpyDtoDAsync(
                                 addresses[reduce->out], addresses[reduce->in],
                                 plan.values[reduce->in].bytes, stream),
                             "copying amaxes");
    } else if (std::optional<TpStepRef> collective = asTpStep(step)) {
      error = startCollective(*collective, stream);
    } else if (const auto *cp = std::get_if<CpCollectiveStep>(&step)) {
      // On the caller's stream: the reordering copies use the scratch.
      error =
          enqueueCpCollective(*cp, plan, addresses[cp->in], addresses[cp->out],
                              scratch, *cpGroup, driver, stream);
    }
    if (error)
      return failed(std::move(error));
  }
  if (sumOverlap)
    if (Error error = sumOverlap->joinAll(stream))
      return error;
  // The static steps ran into the cache (not only into a graph): later runs
  // may reuse what they wrote while the arguments stay where they are.
  if (useCache && !skip && !capturing && !skipFlag) {
    staticArgumentPointers.clear();
    for (size_t argument : staticSteps.arguments)
      staticArgumentPointers.push_back(arguments[argument]);
    staticCacheValid = true;
    stateUpdatedSinceCast = false;
  }
  return copyResults(useCache ? cachedCopiedResults : copiedResults, results,
                     stream);
}
