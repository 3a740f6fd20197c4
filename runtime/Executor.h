//===- Executor.h - running one plan function on a stream -------*- C++ -*-===//
//
// An executor binds a plan function's values to device memory (the caller's
// arguments and results, views of them, and offsets into a scratch arena)
// and enqueues its steps in order on one stream: generated kernels, cuBLASLt
// GEMMs, cuDNN flash attention, the amax reduction and the tensor-parallel
// collectives (all-reduce; all-gather and reduce-scatter with sequence
// parallelism), and grouped GEMMs. It allocates no device memory and never
// synchronizes, so a run can be captured in a CUDA graph; except a run of a
// function with host arguments (m_splits, HostArguments.h), which reads them
// on the host at every call and refuses capture.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_EXECUTOR_H
#define TEJIT_RUNTIME_EXECUTOR_H

#include "runtime/AttentionLauncher.h"
#include "runtime/Bundle.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Gemm.h"
#include "runtime/GroupedGemm.h"
#include "runtime/HostArguments.h"
#include "runtime/StaticSteps.h"
#include "runtime/SumOverlap.h"
#include "runtime/TensorParallel.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"

#include <memory>

namespace tejit::runtime {

class AmaxReducer;

/// The CUDA modules of a bundle's binaries, loaded on first use and unloaded
/// with the set. Needs the bundle's context current.
class ModuleSet {
public:
  explicit ModuleSet(const Bundle &bundle) : bundle(bundle) {}
  ~ModuleSet();
  ModuleSet(const ModuleSet &) = delete;
  ModuleSet &operator=(const ModuleSet &) = delete;

  /// The entry point `name` of binary `binary`.
  llvm::Expected<CUfunction> function(llvm::StringRef binary,
                                      llvm::StringRef name);
  /// A runtime helper kernel of runtime/kernels/AttentionPrep.cu
  /// ("tejit_attention_prep", "tejit_rng_advance"), DecodeAttention.cu
  /// ("tejit_decode_attention", "tejit_decode_attention_combine") or
  /// GroupedBias.cu ("tejit_grouped_bias_rows"), from PTX the driver
  /// compiles on first use (one module per file).
  llvm::Expected<CUfunction> helper(llvm::StringRef name);

private:
  const Bundle &bundle;
  llvm::StringMap<CUmodule> modules;
};

/// Whether a run may skip the static steps (StaticSteps.h) and read what
/// an earlier run left in the cache. Skipping needs a cache filled by a
/// finished run that gave the static steps the same argument pointers; the
/// caller promises that what they point to has not changed since.
enum class StaticReuse {
  /// Run them.
  Never,
  /// Skip them, but not in a run captured in a CUDA graph (it runs them at
  /// every replay).
  WhenUnchanged,
  /// Skip them also in a captured run: its replays read the cache as the
  /// latest run that ran the static steps left it.
  AlsoWhenCapturing,
};

class Executor {
public:
  /// Loads the kernels of `function` and checks every step can run here.
  /// With `findStatic`, it finds the static steps (the weight casts,
  /// StaticSteps.h), whose outputs allocateStaticCache can give device
  /// memory of their own, kept between runs, so that a run may skip them.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(const FunctionPlan &function, ModuleSet &modules, GemmRunner &gemms,
         bool findStatic = false);

  const FunctionPlan &function() const { return plan; }

  /// Enqueues the function on `stream`. `arguments` and `results` hold one
  /// device pointer per argument and result of the function (a host
  /// pointer to its values for a host argument: read, checked and copied
  /// to the device before anything else is enqueued); `arena` at
  /// least function().arenaBytes of device memory, `scratch`
  /// scratchBytes(). `amaxReducer` runs the amax_allreduce steps across
  /// ranks (null: one process, the step is a copy); the tensor-parallel
  /// steps (tp_allreduce, tp_allgather, tp_reducescatter) run over
  /// setTensorParallelGroup's group. With `useCache` (the
  /// cache allocated) the static steps write into the cache, and `reuse`
  /// says whether they may be skipped (StaticReuse); a skipping run with
  /// `zeroSkippedAmaxes` zeroes the amaxes they would have recorded (TE
  /// records none for a weight it did not cast). A run captured in a CUDA
  /// graph never fills the cache (its steps run only at replay).
  ///
  /// With `useCache` and a `skipFlag` (a device int), the device decides
  /// instead, at each launch (so one CUDA graph serves both kinds of
  /// micro-batch, as TE's skip_fp8_weight_update): the static steps and
  /// the scale_inv copies that go with them run when the int is 0 and do
  /// nothing otherwise; their amaxes are zeroed before launch either way,
  /// so a skipped weight records amax 0. `reuse` is then ignored, and the
  /// host no longer knows what the cache holds: a later run without the
  /// flag casts again.
  llvm::Error run(llvm::ArrayRef<CUdeviceptr> arguments,
                  llvm::ArrayRef<CUdeviceptr> results, CUdeviceptr arena,
                  CUdeviceptr scratch, CUstream stream,
                  AmaxReducer *amaxReducer = nullptr,
                  StaticReuse reuse = StaticReuse::Never, bool useCache = false,
                  bool zeroSkippedAmaxes = false, CUdeviceptr skipFlag = 0,
                  bool leaveState = false);
  /// The group the tensor-parallel steps run over from the next run on
  /// (null: none, and a run of a function with such steps fails before it
  /// enqueues anything, as does one whose group lacks a function of the
  /// caller's that a step needs). ErrorCode::InvalidArgument when the group
  /// knows its size and it is not the steps' ranks.
  llvm::Error
  setTensorParallelGroup(std::shared_ptr<TensorParallelGroup> group);
  /// The ranks of the function's tensor-parallel steps, 0 when it has none.
  int64_t tensorParallelRanks() const { return tpNeeds.ranks; }
  /// The group the context-parallel steps (cp_allgather, cp_reducescatter;
  /// docs/context-parallel.md) run over, as setTensorParallelGroup's: its
  /// all-gather and reduce-scatter are used.
  llvm::Error
  setContextParallelGroup(std::shared_ptr<TensorParallelGroup> group);
  /// The ranks of the function's context-parallel steps, 0 when it has none.
  int64_t contextParallelRanks() const { return cpNeeds.ranks; }
  /// Whether the function takes host arguments (m_splits).
  bool hasHostArguments() const { return !hostRules.empty(); }
  /// Whether a run on a capturing stream may read its host arguments
  /// (false, the default: refused). A graph captured so replays the
  /// values of the captured run: the GEMM sizes are fixed when enqueued,
  /// and the device copy is made from pinned memory kept for the graph.
  void setHostArgumentsCapturable(bool capturable) {
    hostArgumentsCapturable = capturable;
  }
  /// From the next run on, grouped GEMM step `step` (a contraction that
  /// accumulates in place: FunctionPlan::groupedAccumulation) writes group
  /// g's product into the [M, N] matrix at `pointers[g]`, adding to what is
  /// there, instead of into its stacked out (GroupedGemmPointers::groupOut).
  /// Empty `pointers`: the stacked buffers again.
  /// ErrorCode::InvalidArgument for another step, a wrong count or a null
  /// pointer.
  llvm::Error setGroupedOutputs(size_t step,
                                llvm::ArrayRef<CUdeviceptr> pointers);
  /// Whether grouped GEMM step `step` writes per-group outputs now.
  bool hasGroupedOutputs(size_t step) const {
    return step < groupedOutputs.size() && !groupedOutputs[step].empty();
  }

  /// The results (by index) a run with `leaveState` throws away: the FP8
  /// state's update, which a forward under torch.no_grad() does not keep.
  /// Such a run skips the steps only they need
  /// (FunctionPlan::stepsNeededWithout: the scaling update, the amax
  /// reduction and the concatenation of the amaxes it reads).
  void setResultsDroppedWhenLeavingState(llvm::ArrayRef<size_t> dropped) {
    neededWhenLeavingState = plan.stepsNeededWithout(dropped);
  }

  /// Allocates the cache of the static steps' outputs and lays the values
  /// out in it (once; later calls do nothing). Besides the outputs it keeps
  /// a copy of each DelayedScaling scale_inv that a GEMM pairs with a static
  /// FP8 operand, taken when the static steps run, so that a cast and its
  /// scale_inv stay a pair while the state moves on.
  llvm::Error allocateStaticCache();
  /// ErrorCode::Unsupported unless every static step takes the skip flag
  /// that run's `skipFlag` needs (plans of format 4).
  llvm::Error checkStaticStepsTakeSkipFlag() const;
  /// Device bytes kept for the static steps' outputs (0 without a cache).
  size_t staticCacheBytes() const { return staticCache.bytes(); }
  /// Where result `index` lives in the cache (0 when it does not, or no
  /// cache is allocated): a run with the cache writes it there, and copies
  /// it to the caller's result pointer only when that is another address.
  CUdeviceptr cachedResultAddress(size_t index) const;
  /// How many steps the last run skipped.
  size_t lastSkippedSteps() const { return skippedSteps; }
  /// Forgets the cached static outputs (the FP8 state they were computed
  /// from was written): the next run runs the static steps again.
  void invalidateStaticCache() { staticCacheValid = false; }
  /// The FP8 state was updated since the static steps last ran: a
  /// StaticReuse::WhenUnchanged run casts again (the new scales), one with
  /// AlsoWhenCapturing keeps the casts with their scale_inv copies.
  void noteStateUpdated() { stateUpdatedSinceCast = true; }

  /// The most scratch any kernel or attention step asks for.
  size_t scratchBytes() const;

private:
  Executor(const FunctionPlan &plan, ModuleSet &modules, GemmRunner &gemms,
           const CudaDriver &driver)
      : plan(plan), modules(modules), gemms(gemms), driver(driver) {}

  /// Where a value's bytes start: an argument, a result, the arena or the
  /// static-step cache, plus a byte offset.
  struct Root {
    enum Kind { Argument, Result, Arena, Cache };
    Kind kind = Arena;
    int64_t index = 0;
    int64_t byteOffset = 0;
  };

  /// Each value's address for one run, from `table`.
  llvm::Error bind(llvm::ArrayRef<CUdeviceptr> arguments,
                   llvm::ArrayRef<CUdeviceptr> results, CUdeviceptr arena,
                   llvm::ArrayRef<Root> table);
  /// Whether this run may skip the static steps.
  llvm::Expected<bool> canSkipStaticSteps(llvm::ArrayRef<CUdeviceptr> arguments,
                                          CUstream stream, StaticReuse reuse,
                                          bool &capturing) const;
  /// Copies each scale_inv the cache keeps from the state (a run that runs
  /// the static steps with the cache); with a `skipFlag`, on the device and
  /// only while the int it points to is 0.
  llvm::Error snapshotScales(llvm::ArrayRef<CUdeviceptr> arguments,
                             CUstream stream, CUdeviceptr skipFlag = 0);
  /// Results whose value does not live in the result buffer, under
  /// `table`: views of an argument that no other value views, copied before
  /// the steps (`first`; steps then read the copy), and the rest (values in
  /// the cache), copied after them (`last`).
  void resultsToCopy(llvm::ArrayRef<Root> table, std::vector<size_t> &first,
                     std::vector<size_t> &last) const;
  /// Copies results[index] from the value's bound address, for each index.
  llvm::Error copyResults(llvm::ArrayRef<size_t> indices,
                          llvm::ArrayRef<CUdeviceptr> results, CUstream stream);
  llvm::Error launch(const KernelStep &step, CUfunction function,
                     CUdeviceptr scratch, CUstream stream,
                     CUdeviceptr skipFlag = 0);
  llvm::Error gemm(const GemmStep &step, CUstream stream);
  /// Reads the host arguments' values from `arguments` (host pointers) into
  /// hostValues and checks them; refuses a capturing `stream` unless
  /// setHostArgumentsCapturable allowed it (`capturing` says which).
  llvm::Error readHostArguments(llvm::ArrayRef<CUdeviceptr> arguments,
                                CUstream stream, bool &capturing);
  llvm::Error groupedGemm(size_t index, const GroupedGemmStep &step,
                          CUstream stream);

  const FunctionPlan &plan;
  ModuleSet &modules;
  GemmRunner &gemms;
  const CudaDriver &driver;
  /// The runtime helper that copies unless a flag is set (loaded on the
  /// first run with a skip flag).
  CUfunction copyUnlessFlag = nullptr;
  /// Per step: the kernel's entry point (null for other steps).
  std::vector<CUfunction> kernels;
  /// Per step: the attention step's cuDNN call (empty for other steps).
  std::vector<std::optional<AttentionLauncher>> attentions;
  /// Per step: the grouped GEMM (empty for other steps), and for an FP8 one
  /// the device slots it stages its per-group scales in (GroupedGemm.h).
  std::vector<std::optional<GroupedGemm>> groupedGemms;
  std::vector<DeviceBuffer> groupedScaleSlots;
  /// The side streams grouped GEMMs run small groups on (null: none), once
  /// looked up.
  GemmLanes *lanes = nullptr;
  bool lanesLooked = false;
  /// Whether the current run is being captured (set with the host
  /// arguments).
  bool capturingHostArguments = false;
  /// Per step: a grouped GEMM's per-group outputs (setGroupedOutputs).
  std::vector<std::vector<CUdeviceptr>> groupedOutputs;
  /// The host arguments (m_splits): their rules, the values of the current
  /// run (one vector per rule), their device copies, and the arguments as
  /// bound (each host pointer replaced by its device copy's address).
  std::vector<HostArgumentRule> hostRules;
  std::vector<std::vector<int32_t>> hostValues;
  bool hostArgumentsCapturable = false;
  std::unique_ptr<HostArgumentStaging> hostStaging;
  std::vector<CUdeviceptr> boundArguments;
  /// Results whose value lives elsewhere, copied into the result buffer:
  /// views of an argument before the steps (the FP8 state's scale_inv
  /// slots a forward saves: a snapshot before an in-place update, and a
  /// 16-byte aligned scalar for cuBLASLt), the rest after them; the cached
  /// lists for runs with the cache.
  std::vector<size_t> firstCopiedResults, copiedResults;
  std::vector<size_t> cachedFirstCopiedResults, cachedCopiedResults;
  /// Per value id: where its bytes start (views followed to an argument,
  /// result, arena or cache offset, plus their byte offsets), fixed by the
  /// plan; cachedRoots for runs with the cache (static outputs and the
  /// scale_inv copies, and their views, in the cache).
  std::vector<Root> roots, cachedRoots;
  /// The static steps and the memory that keeps their outputs between runs
  /// (empty without findStatic).
  StaticSteps staticSteps;
  DeviceBuffer staticCache;
  /// A scale_inv copy in the cache: `bytes` from argument `argument` at
  /// `byteOffset`, to cache offset `cacheOffset`.
  struct ScaleCopy {
    size_t argument;
    int64_t byteOffset, bytes, cacheOffset;
  };
  std::vector<ScaleCopy> scaleCopies;
  /// Amaxes the static steps record (zeroed before launch), by value id.
  std::vector<int64_t> staticAmaxes;
  /// Whether the cache holds the static outputs of a finished run, and the
  /// pointers that run gave the arguments static steps read.
  bool staticCacheValid = false;
  bool stateUpdatedSinceCast = false;
  std::vector<CUdeviceptr> staticArgumentPointers;
  size_t skippedSteps = 0;
  /// Per step, whether a run that leaves the state needs it (empty: all).
  std::vector<bool> neededWhenLeavingState;
  /// What the tensor-parallel steps need (their ranks, 0: none, and
  /// collectives), and the group they run over.
  GroupNeeds tpNeeds;
  std::shared_ptr<TensorParallelGroup> tpGroup;
  /// Likewise for the context-parallel steps.
  GroupNeeds cpNeeds;
  std::shared_ptr<TensorParallelGroup> cpGroup;
  /// The collectives' own stream, made by the first run that has one to
  /// start.
  std::unique_ptr<SumOverlap> sumOverlap;
  bool overlapSums = SumOverlap::enabled();
  /// The bytes `step` reads or writes in this run.
  llvm::SmallVector<DeviceRange, 8> bytesOf(const Step &step) const;
  /// Runs the tensor-parallel `step` on the collectives' stream
  /// (overlapSums) or on `stream`.
  llvm::Error startCollective(TpStepRef step, CUstream stream);
  /// Per value id: its address in the current run.
  std::vector<CUdeviceptr> addresses;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_EXECUTOR_H
