//===- Program.h - compiled layers with their state -------------*- C++ -*-===//
//
// A program is what the C API hands out: a bundle's forward (and backward)
// executors, and the state that lives between calls in device memory: the
// FP8 meta state (scale, scale_inv, amax history per function), the tensors
// the forward saves for the backward, the scratch arena and the cuBLASLt
// workspace. Callers exchange only their own tensors: inputs and parameters,
// outputs, and their gradients.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_PROGRAM_H
#define TEJIT_RUNTIME_PROGRAM_H

#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Executor.h"

#include <memory>

namespace tejit::runtime {

/// A tensor the caller passes or receives.
struct TensorDesc {
  std::string name;
  TensorType type;
  bool parameter = false;
  /// Passed as a host pointer (a grouped op's m_splits: the plan's "host"
  /// arguments, HostArguments.h).
  bool host = false;
};

enum class TensorKind {
  Input,
  Output,
  GradOutput,
  GradInput,
  Meta,
  Saved,
  /// What a backward hands its wgrad function (delay_wgrad_compute).
  Deferred,
};

/// Which part of a backward a call runs (delay_wgrad_compute,
/// docs/delay-wgrad.md): the backward function alone (data and bias
/// gradients, and the deferred tensors), the wgrad function alone (the
/// delayed weight gradients), or both, one after the other.
enum class BackwardPart { Both, Dgrad, Wgrad };

/// What a forward saw, for a backward given the caller's saved tensors.
struct ForwardTensors {
  llvm::ArrayRef<CUdeviceptr> inputs, outputs, saved;
};

class Program {
public:
  /// Makes a program of `bundle` on device `ordinal` (which becomes
  /// current): loads its kernels and cuBLASLt, allocates its state, and
  /// sets the FP8 meta state to TE's start (scales 1, histories 0).
  static llvm::Expected<std::unique_ptr<Program>> create(Bundle bundle,
                                                         int ordinal);
  ~Program();

  const std::vector<TensorDesc> &tensors(TensorKind kind) const;
  bool training() const { return backwardFn.executor != nullptr; }
  /// Whether the backward's weight gradients are a function of their own
  /// (delay_wgrad_compute).
  bool delaysWgrad() const { return wgradFn.executor != nullptr; }
  /// Whether the wgrad function reads tensor `index` of `kind` (Input,
  /// Output, Saved, GradOutput, Deferred) or writes it (GradInput).
  bool usedByWgrad(TensorKind kind, size_t index) const;
  const DeviceInfo &device() const { return deviceInfo; }
  const Plan &plan() const { return bundle.plan; }
  const std::string &planText() const { return bundle.planText; }

  /// Enqueues the forward on `stream`: one pointer per Input and Output,
  /// and per Saved tensor when the caller keeps them (else the program's
  /// own, which the next forward overwrites).
  llvm::Error
  forward(CUstream stream, llvm::ArrayRef<CUdeviceptr> inputs,
          llvm::ArrayRef<CUdeviceptr> outputs,
          std::optional<llvm::ArrayRef<CUdeviceptr>> saved = std::nullopt);
  /// Enqueues a backward: one pointer per GradOutput and GradInput. Without
  /// `forward`, of the last forward that used the program's saved tensors;
  /// with it, of the forward that saw those tensors. `part` Dgrad or Wgrad
  /// (programs that delay their weight gradients) runs one function, with
  /// one pointer per Deferred tensor in `deferred`, the caller's memory;
  /// Both runs both through the program's own.
  llvm::Error backward(CUstream stream, llvm::ArrayRef<CUdeviceptr> gradOutputs,
                       llvm::ArrayRef<CUdeviceptr> gradInputs,
                       const ForwardTensors *forward = nullptr,
                       BackwardPart part = BackwardPart::Both,
                       llvm::ArrayRef<CUdeviceptr> deferred = {});

  /// Meta tensor `index`'s device memory.
  llvm::Expected<CUdeviceptr> metaPointer(size_t index) const;
  /// Copies meta tensor `index` to/from the host, ordered on `stream`, and
  /// waits for the copy.
  llvm::Error getMeta(size_t index, void *host, size_t bytes, CUstream stream);
  llvm::Error setMeta(size_t index, const void *host, size_t bytes,
                      CUstream stream);
  /// Restarts the dropout stream at (seed, offset 0); waits for the upload.
  llvm::Error setSeed(uint64_t seed);
  /// The device address of the dropout stream's state (two uint64: seed and
  /// offset; each forward moves the offset on), 0 when the program draws no
  /// dropout masks. Copying it aside and back, ordered on the stream,
  /// rewinds the stream: a recomputed forward draws the same masks.
  CUdeviceptr rngStatePointer() const {
    return rngBuffer ? owned[*rngBuffer].get() : 0;
  }

  /// Whether the plan reduces amaxes across ranks (DelayedScaling with
  /// reduce_amax): how many amax_allreduce steps its functions have.
  size_t amaxAllReduceSteps() const;
  /// Whether forwards update the FP8 meta state (the default) or leave it
  /// as it is: TE updates the forward's scales only while autograd records,
  /// so an inference forward under torch.no_grad() scales with the state as
  /// it stands, whatever ran before. A forward that does not update does not
  /// reduce amaxes across ranks either. Backwards always update.
  void setForwardUpdatesState(bool updates) { forwardUpdatesState = updates; }
  bool forwardUpdatesStateEnabled() const { return forwardUpdatesState; }

  /// What forwards do with the weight casts (the FP8 quantization of
  /// parameters, StaticSteps.h) and the device memory a program keeps them
  /// in (unless TEJIT_WEIGHT_CAST_CACHE=0 was set when it was made).
  enum class WeightCasts {
    /// Cast. An inference program casts into its cache; a training program
    /// as if it had none (the saved transposes go to the saved tensors).
    Run,
    /// Reuse the kept casts when the parameters are at the addresses of the
    /// forward that cast them and the FP8 state has not been updated or
    /// written since; not in a forward captured in a CUDA graph.
    Reuse,
    /// Reuse them also after state updates (each cast is kept with its
    /// scale_inv) and in a captured forward, whose replays read the casts
    /// the latest casting forward left: TE's is_first_microbatch=False.
    ReuseInGraphs,
    /// Cast into the cache: TE's is_first_microbatch=True.
    Keep,
    /// Decided on the device at each forward, from the int that
    /// setWeightCastFlag gave: 0 casts into the cache (Keep), nonzero reuses
    /// what is there (ReuseInGraphs). One captured forward serves both
    /// (TE's skip_fp8_weight_update flag).
    ByFlag,
  };
  /// Sets what the next forwards do. The caller promises, when they reuse,
  /// that the parameters' contents have not changed since the cast. A
  /// training program allocates its cache on the first mode other than Run
  /// (1 byte per weight element for the cast and 1 for its transpose).
  llvm::Error setWeightCasts(WeightCasts mode);
  /// Sets WeightCasts::ByFlag with `flag`, the address of a device int
  /// that the caller sets before each forward (or graph replay) runs; the
  /// int must outlive the program's use of it.
  llvm::Error setWeightCastFlag(CUdeviceptr flag);
  /// Where saved tensor `index` lives in the cache while forwards use it
  /// (modes other than Run in a training program), 0 when it does not:
  /// a caller that passes this address for it avoids a copy, and the
  /// backward of every forward that used the cache reads the latest cast.
  CUdeviceptr savedCachePointer(size_t index) const;
  /// Device bytes kept for the weight casts (0: no cache).
  size_t weightCastCacheBytes() const;
  /// Steps the last forward skipped (the weight casts it reused).
  size_t lastSkippedSteps() const;

  /// Who reduces them from the next call on (null: nobody, one process).
  /// The program keeps the reducer alive. ErrorCode::InvalidArgument when
  /// the reducer works on another device than the program.
  llvm::Error setAmaxReducer(std::shared_ptr<AmaxReducer> reducer);

  /// Whether calls on a capturing stream may read the host arguments
  /// (m_splits; Executor::setHostArgumentsCapturable): the captured graph
  /// then replays the splits of the captured call. Off by default: such a
  /// capture is refused.
  void setHostArgumentsCapturable(bool capturable);

  /// fuse_wgrad_accumulation of a grouped weight (GroupedLinear's stacked
  /// [G, N, K] main_grad, GradOutput `gradOutput`) whose main_grads are G
  /// separate [N, K] buffers, e.g. Megatron-Core's gradient buffer, which
  /// lays parameters out in reverse order: from the next backward on, group
  /// g's gradient is added in place into the matrix at `pointers[g]`, and
  /// the backward takes null for that GradOutput and for its weight's
  /// GradInput. Empty `pointers`: one stacked buffer again.
  /// ErrorCode::InvalidArgument for another tensor, a plan whose grouped
  /// GEMM cannot (FunctionPlan::groupedAccumulation), a count other than G
  /// or a null pointer.
  llvm::Error setGroupPointers(size_t gradOutput,
                               llvm::ArrayRef<CUdeviceptr> pointers);

  /// The tensor-parallel size the program was compiled for (tp_size): the
  /// ranks its tensor-parallel steps (tp_allreduce, tp_allgather,
  /// tp_reducescatter) span, 1 when it has none.
  int64_t tensorParallelRanks() const {
    return bundle.plan.tensorParallelRanks();
  }
  /// The group the tensor-parallel steps run over from the next call on (null:
  /// none; a program with such steps then fails its calls). The program
  /// keeps the group alive; one without such steps ignores it.
  /// ErrorCode::InvalidArgument when the group works on another device than
  /// the program, or knows its size and it is not tensorParallelRanks().
  llvm::Error
  setTensorParallelGroup(std::shared_ptr<TensorParallelGroup> group);
  /// The context-parallel size the program was compiled for (cp_size): the
  /// ranks its cp_allgather / cp_reducescatter steps span, 1 when it has
  /// none (docs/context-parallel.md).
  int64_t contextParallelRanks() const {
    return bundle.plan.contextParallelRanks();
  }
  /// The group the context-parallel steps run over, as
  /// setTensorParallelGroup's (its all-gather and reduce-scatter).
  llvm::Error
  setContextParallelGroup(std::shared_ptr<TensorParallelGroup> group);

private:
  /// What setTensorParallelGroup and setContextParallelGroup share: `group`
  /// checked against the device and `ranks` (`what`: "tensor" or
  /// "context", `sizeName` the size's name), then given to both executors
  /// by `give`.
  llvm::Error setGroup(const std::shared_ptr<TensorParallelGroup> &group,
                       int64_t ranks, llvm::StringRef what,
                       llvm::StringRef sizeName,
                       llvm::function_ref<llvm::Error(Executor &)> give);

  /// How one argument or result of a function is supplied.
  struct Binding {
    enum Kind {
      User,          // the caller's pointer (index into its array)
      Owned,         // a buffer of the program (index into `owned`)
      Saved,         // a saved tensor: the caller's (index) or owned[owned]
      ForwardArg,    // backward: the pointer forward argument `index` had
      ForwardResult, // backward: the pointer forward result `index` had
    };
    Kind kind = User;
    size_t index = 0;
    size_t owned = 0;
  };
  /// A function's argument and result addresses in one run.
  struct ForwardPointers {
    std::vector<CUdeviceptr> arguments, results;
  };
  /// A state update: result `result` of the function is the new value of
  /// owned[to]. In place, the result is given owned[to] itself; else it is
  /// written to owned[from] and copied over owned[to] after the function.
  struct CopyBack {
    size_t from, to;
    size_t result = 0;
    bool inPlace = false;
  };
  /// A backward result that is an argument plus a gradient (te.accumulates,
  /// fuse_wgrad_accumulation's main_grad): the caller's pointers, by index
  /// into its arrays, and whether they may be one buffer.
  struct Accumulation {
    size_t gradOutput, gradInput;
    std::string name;
    bool inPlace = false;
    /// The grouped GEMM that may take the main_grad as per-group matrices
    /// (FunctionPlan::groupedAccumulation; whether it does now is its
    /// executor's Executor::hasGroupedOutputs).
    std::optional<size_t> groupedStep;
  };
  struct Function {
    std::unique_ptr<Executor> executor;
    std::vector<Binding> arguments, results;
    std::vector<CopyBack> updates;
    std::vector<Accumulation> accumulations;
    /// Addresses of the last run (a plain backward reads the forward's).
    ForwardPointers pointers;
  };

  /// What a function is to the program.
  enum class Role { Forward, Backward, Wgrad };

  Program(Bundle bundle) : bundle(std::move(bundle)) {}
  llvm::Error setUp(int ordinal);
  llvm::Error classify(Function &function, const FunctionPlan &plan, Role role);
  /// A wgrad function's argument binding: the forward's or the backward's
  /// tensor it reads.
  llvm::Expected<Binding> wgradArgument(const InterfaceEntry &entry,
                                        const FunctionPlan &plan);
  /// Where a backward or wgrad result with te.grad_of goes in GradInput.
  size_t gradInputIndex(int64_t gradOf);
  /// The accumulation of backward or wgrad function whose main_grad is
  /// GradOutput `gradOutput`, with its function; null when none.
  std::pair<Function *, Accumulation *> accumulationOf(size_t gradOutput);
  /// Refuses the main_grad pointers of a backward part that its
  /// accumulations cannot take.
  llvm::Error checkAccumulations(const Function &function,
                                 llvm::ArrayRef<CUdeviceptr> gradOutputs,
                                 llvm::ArrayRef<CUdeviceptr> gradInputs) const;
  llvm::Expected<size_t> own(const ValueInfo &value, const std::string &name);
  llvm::Error resetState();
  llvm::Error copyMeta(size_t index, void *host, size_t bytes, CUstream stream,
                       bool toHost);
  /// Checks the pointer counts of a call and makes the context current.
  llvm::Error beginCall(llvm::StringRef what, size_t numIn, TensorKind in,
                        size_t numOut, TensorKind out);
  std::vector<CUdeviceptr> pointersOf(llvm::ArrayRef<Binding> bindings,
                                      llvm::ArrayRef<CUdeviceptr> user,
                                      llvm::ArrayRef<CUdeviceptr> saved,
                                      const ForwardPointers *forward) const;
  /// Runs `function`; with `updateState` false its amax reduction is the
  /// one-process copy and its state updates are not copied back.
  llvm::Error run(Function &function, CUstream stream,
                  llvm::ArrayRef<CUdeviceptr> userArgs,
                  llvm::ArrayRef<CUdeviceptr> userResults,
                  llvm::ArrayRef<CUdeviceptr> saved,
                  const ForwardPointers *forward, bool updateState = true);

  Bundle bundle;
  DeviceInfo deviceInfo;
  std::unique_ptr<ModuleSet> modules;
  DeviceBuffer workspace, arena, scratch;
  std::unique_ptr<GemmRunner> gemms;
  Function forwardFn, backwardFn, wgradFn;
  /// With a wgrad function: the te.grad_of of every GradInput, in order
  /// (the forward's argument order, as a backward alone returns them).
  std::vector<int64_t> gradInputOrder;
  std::shared_ptr<AmaxReducer> amaxReducer;
  std::vector<DeviceBuffer> owned;
  /// Owned buffers holding FP8 meta state (Meta tensors, in order) and the
  /// dropout RNG state.
  std::vector<size_t> metaBuffers;
  std::optional<size_t> rngBuffer;
  /// Moves the device RNG state on after each forward.
  CUfunction rngAdvance = nullptr;
  uint64_t rngHost[2] = {0x2545f4914f6cdd1dull, 0};
  std::vector<TensorDesc> descs[7];
  bool forwardDone = false;
  bool forwardUpdatesState = true;
  WeightCasts weightCasts = WeightCasts::Run;
  CUdeviceptr weightCastFlag = 0;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_PROGRAM_H
