//===- Executor.h - running one plan function on a stream -------*- C++ -*-===//
//
// An executor binds a plan function's values to device memory (the caller's
// arguments and results, views of them, and offsets into a scratch arena)
// and enqueues its steps in order on one stream: generated kernels, cuBLASLt
// GEMMs, cuDNN flash attention, and the amax reduction. It allocates nothing
// and never synchronizes, so a run can be captured in a CUDA graph.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_EXECUTOR_H
#define TEJIT_RUNTIME_EXECUTOR_H

#include "runtime/AttentionLauncher.h"
#include "runtime/Bundle.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Gemm.h"
#include "runtime/StaticSteps.h"

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
  /// ("tejit_attention_prep", "tejit_rng_advance"), from PTX the driver
  /// compiles on first use.
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
  /// With `cacheStaticSteps`, the outputs of its static steps (the weight
  /// casts, StaticSteps.h) get device memory of their own, kept between
  /// runs, so that a run may skip those steps (run's reuseStaticSteps).
  static llvm::Expected<std::unique_ptr<Executor>>
  create(const FunctionPlan &function, ModuleSet &modules, GemmRunner &gemms,
         bool cacheStaticSteps = false);

  const FunctionPlan &function() const { return plan; }

  /// Enqueues the function on `stream`. `arguments` and `results` hold one
  /// device pointer per argument and result of the function; `arena` at
  /// least function().arenaBytes of device memory, `scratch`
  /// scratchBytes(). `amaxReducer` runs the amax_allreduce steps across
  /// ranks (null: one process, the step is a copy). `reuse` says whether
  /// the static steps may be skipped (StaticReuse). A run captured in a
  /// CUDA graph never fills the cache (its steps run only at replay).
  llvm::Error run(llvm::ArrayRef<CUdeviceptr> arguments,
                  llvm::ArrayRef<CUdeviceptr> results, CUdeviceptr arena,
                  CUdeviceptr scratch, CUstream stream,
                  AmaxReducer *amaxReducer = nullptr,
                  StaticReuse reuse = StaticReuse::Never);

  /// Device bytes kept for the static steps' outputs (0 without a cache).
  size_t staticCacheBytes() const { return staticCache.bytes(); }
  /// How many steps the last run skipped.
  size_t lastSkippedSteps() const { return skippedSteps; }
  /// Forgets the cached static outputs (the FP8 state they were computed
  /// from changed): the next run runs the static steps again.
  void invalidateStaticCache() { staticCacheValid = false; }

  /// The most scratch any kernel or attention step asks for.
  size_t scratchBytes() const;

private:
  Executor(const FunctionPlan &plan, GemmRunner &gemms,
           const CudaDriver &driver)
      : plan(plan), gemms(gemms), driver(driver) {}

  /// Where a value's bytes start: an argument, a result, the arena or the
  /// static-step cache, plus a byte offset.
  struct Root {
    enum Kind { Argument, Result, Arena, Cache };
    Kind kind = Arena;
    int64_t index = 0;
    int64_t byteOffset = 0;
  };

  /// Each value's address for one run.
  llvm::Error bind(llvm::ArrayRef<CUdeviceptr> arguments,
                   llvm::ArrayRef<CUdeviceptr> results, CUdeviceptr arena);
  /// Gives the static steps' outputs places in a cache of their own.
  llvm::Error setUpStaticCache();
  /// Whether this run may skip the static steps.
  llvm::Expected<bool> canSkipStaticSteps(llvm::ArrayRef<CUdeviceptr> arguments,
                                          CUstream stream, StaticReuse reuse,
                                          bool &capturing) const;
  llvm::Error launch(const KernelStep &step, CUfunction function,
                     CUdeviceptr scratch, CUstream stream);
  llvm::Error gemm(const GemmStep &step, CUstream stream);

  const FunctionPlan &plan;
  GemmRunner &gemms;
  const CudaDriver &driver;
  /// Per step: the kernel's entry point (null for other steps).
  std::vector<CUfunction> kernels;
  /// Per step: the attention step's cuDNN call (empty for other steps).
  std::vector<std::optional<AttentionLauncher>> attentions;
  /// Results whose value lives elsewhere (a view of an argument): copied
  /// into the result buffer after the steps.
  std::vector<size_t> copiedResults;
  /// Per value id: where its bytes start (views followed to an argument,
  /// result, arena or cache offset, plus their byte offsets), fixed by the
  /// plan.
  std::vector<Root> roots;
  /// The static steps and the memory that keeps their outputs between runs
  /// (empty without cacheStaticSteps).
  StaticSteps staticSteps;
  DeviceBuffer staticCache;
  /// Whether the cache holds the static outputs of a finished run, and the
  /// pointers that run gave the arguments static steps read.
  bool staticCacheValid = false;
  std::vector<CUdeviceptr> staticArgumentPointers;
  size_t skippedSteps = 0;
  /// Per value id: its address in the current run.
  std::vector<CUdeviceptr> addresses;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_EXECUTOR_H
