//===- Plan.h - an executable plan, parsed from plan.json -------*- C++ -*-===//
//
// The in-memory form of docs/plan-format.md: per function, where every
// value lives and the steps to run. Parsing checks the whole document, so
// the executor can trust ids, indices and sizes.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_PLAN_H
#define TEJIT_RUNTIME_PLAN_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tejit::runtime {

enum class ElementType { F32, F16, BF16, F8E4M3, F8E5M2, I64, I32, I8, I1 };

/// Bytes per element (I1 is stored as one byte).
size_t elementBytes(ElementType type);
/// The IR spelling: "f32", "bf16", "f8E4M3FN", ...
llvm::StringRef elementTypeName(ElementType type);
/// The type elementTypeName spells `name`, if any.
std::optional<ElementType> parseElementType(llvm::StringRef name);
bool isFp8(ElementType type);

/// A ranked tensor type as the plan spells it: "tensor<32x1x64xbf16>".
struct TensorType {
  std::vector<int64_t> shape;
  ElementType element = ElementType::F32;
  int64_t numElements() const;
  int64_t bytes() const { return numElements() * elementBytes(element); }
};
llvm::Expected<TensorType> parseTensorType(llvm::StringRef text);

/// Where a value's bytes live while a function runs.
struct Storage {
  enum Kind { Argument, Result, Arena, View };
  Kind kind = Arena;
  /// Argument/result index, arena byte offset, or the viewed value's id.
  int64_t index = 0;
  /// For views: bytes past the start of the viewed value.
  int64_t byteOffset = 0;
};

struct ValueInfo {
  int64_t id = 0;
  TensorType type;
  int64_t bytes = 0;
  Storage storage;
};

/// One argument or result of a function and its interface attributes.
struct InterfaceEntry {
  int64_t value = 0;
  std::string name; // te.name, may be empty
  bool parameter = false;
  std::optional<int64_t> forwardArg, forwardResult, gradOf, updatesArg;
  /// Arguments of a wgrad function (delay_wgrad_compute): the backward's
  /// argument it reads again (te.backward_arg), or the backward's result it
  /// is (te.backward_result, a deferred tensor).
  std::optional<int64_t> backwardArg, backwardResult;
  /// te.accumulates (backward results): this result is the argument it names
  /// plus a gradient (fuse_wgrad_accumulation's main_grad), and the caller
  /// may pass that argument's buffer as the result's (in place).
  std::optional<int64_t> accumulatesArg;
  /// "host": an argument the caller passes in host memory (a grouped op's
  /// m_splits: G int32 values, an i32 [G] value). The executor checks the
  /// values, copies them to device memory of its own for the kernel steps
  /// and gives them to grouped_gemm steps as host values
  /// (docs/grouped-linear.md).
  bool host = false;
};

struct KernelArg {
  int64_t value = 0;
  bool output = false;
  bool zeroBeforeLaunch = false;
};

struct KernelStep {
  std::string name;   // the extern "C" entry point
  std::string binary; // relative path, e.g. kernels/x.cubin
  std::array<unsigned, 3> grid{1, 1, 1}, block{1, 1, 1};
  unsigned sharedBytes = 0;
  /// Device scratch passed as a last argument (cross-block sums); one
  /// buffer serves every step.
  unsigned scratchBytes = 0;
  /// The bytes of it zeroed before the launch, from scratchZeroOffset
  /// ("scratch_zero"; all of them in plans without it).
  unsigned scratchZeroOffset = 0, scratchZeroBytes = 0;
  /// The kernel reads the scratch as the previous step, a kernel with at
  /// least as much scratch, left it: nothing is zeroed.
  bool scratchFromPreviousStep = false;
  /// The kernel takes a `const int *` after everything else ("skip_flag",
  /// plans of version 4): null runs it; a device int nonzero at launch
  /// makes it do nothing (weight casts in graphs, Executor::run).
  bool skipFlag = false;
  std::vector<KernelArg> args;
};

/// cuBLASLt epilogue terms (value ids).
struct GemmEpilogue {
  /// `residual`: a tensor of out's type added to the product (cuBLASLt's C,
  /// beta = 1).
  std::optional<int64_t> bias, aux, dScale, amaxD, biasGrad, residual;
  bool gelu = false, dgelu = false;
};

/// How an FP8 GEMM operand is scaled (the plan's "a_scaling" and
/// "b_scaling"): by one scale_inv for the whole tensor (a tensor<1xf32>),
/// or, under Float8BlockScaling, by one per block of 128 elements along K
/// (1-D) or per 128 x 128 tile (2-D), the scale_inv tensor laid out as
/// dialects/BlockScaleLayout.h says for the operand's [rows, K] shape.
enum class GemmScaling { Tensor, Block1D, Block2D };
/// The plan's spelling: "tensor", "block_1d" or "block_2d".
llvm::StringRef gemmScalingName(GemmScaling scaling);
/// The scaling gemmScalingName spells `name`, if any.
std::optional<GemmScaling> parseGemmScaling(llvm::StringRef name);

/// Row-major `out[M,N] = op(a) * op(b)`. FP8 (`scaled`) GEMMs are TN:
/// a [M,K], b [N,K], with scale_inv pointers; others give transposes.
struct GemmStep {
  int64_t a = 0, b = 0, out = 0;
  TensorType aType, bType, outType;
  bool scaled = false;
  std::optional<int64_t> aScaleInv, bScaleInv;
  /// What aScaleInv and bScaleInv hold (scaled GEMMs; both Tensor or both
  /// block scalings, never two Block2D).
  GemmScaling aScaling = GemmScaling::Tensor, bScaling = GemmScaling::Tensor;
  bool fastAccum = false;
  bool transposeA = false, transposeB = false;
  GemmEpilogue epilogue;
  /// Not in plans: set by the runtime for a grouped GEMM's per-group GEMMs,
  /// whose M (rows form) or K (contraction) changes from call to call with
  /// the routing. The GEMM runner then reuses one algorithm per size class
  /// instead of asking cuBLASLt's heuristic for every new size (Gemm.cpp).
  bool sizesVary = false;
};

/// "grouped_gemm" (docs/grouped-linear.md): G GEMMs over consecutive
/// segments of the token dimension T, segment g being rows [o_g, o_g + m_g)
/// with m_g the host argument `mSplits`'s values and o_g their prefix sum.
///   Rows: out[T,N] rows of segment g = op(a[seg g]) op(b[g]) (+ bias[g]):
///     a [T,K]; b [G,N,K] (FP8, and high precision with transposeB) or
///     [G,K,N]; rows past o_G are zeroed.
///   Contraction: out[g] = op(a[seg g]) op(b[seg g]) with K = m_g: FP8 TN
///     a [M,T], b [N,T] (segments are column ranges); high precision a [T,M]
///     with transposeA, b [T,N] (segments are row ranges; the other
///     transposes take column ranges); empty segments' out[g] is zeroed.
struct GroupedGemmStep {
  enum class Form { Rows, Contraction };
  Form form = Form::Rows;
  int64_t a = 0, b = 0, mSplits = 0, out = 0;
  TensorType aType, bType, outType;
  int64_t groups = 0;
  /// Rows form only: [G, N], group g's bias added to its rows.
  std::optional<int64_t> bias;
  /// Contraction form only: out's type, read as each group's C with beta =
  /// 1 (out[g] = product + accumulate[g]; accumulate[g] where the group is
  /// empty); it may be out itself (fuse_wgrad_accumulation's main_grad).
  std::optional<int64_t> accumulate;
  /// FP8 (`fp8`): TN, with scale_inv tensors and optional fast
  /// accumulation; else transposes.
  bool fp8 = false;
  std::optional<int64_t> aScaleInv, bScaleInv;
  /// What aScaleInv and bScaleInv hold ("a_scaling", "b_scaling"; FP8
  /// only). Tensor: f32 [G] vectors, group g's scale is element g.
  /// Float8BlockScaling: the block scales of te.grouped_block_quantize in
  /// dialects/GroupedBlockScaleLayout.h's layouts (rows a: segments, Block1D;
  /// rows b: stacked, Block1D or Block2D; contraction a and b: transposed
  /// segments, Block1D), group g's at the layout's offset. Both Tensor or
  /// both blocks (groupedScalingProblem).
  GemmScaling aScaling = GemmScaling::Tensor, bScaling = GemmScaling::Tensor;
  bool fastAccum = false;
  bool transposeA = false, transposeB = false;

  /// T, the token count m_splits divides: a's rows, or FP8 contraction's
  /// a columns (a's dimension the segments range over).
  int64_t tokens() const;
  /// Whether the operands carry Float8BlockScaling's block scales.
  bool blockScaled() const { return fp8 && aScaling != GemmScaling::Tensor; }
};
/// The plan's spelling of a grouped GEMM's form: "rows" or "contraction".
llvm::StringRef groupedFormName(GroupedGemmStep::Form form);

/// What `step`'s scalings break, as the plan field to blame and why, or
/// nullopt when they are valid: scalings other than Tensor on a step that
/// is not FP8; one operand block-scaled and the other not; two Block2D;
/// Block2D on another operand than the rows form's b (the token segments
/// are cast in 1-D blocks); fast accumulation with blocks (cuBLASLt's
/// block-scaled GEMMs accumulate without it, docs/block-scaling.md); a
/// bias (of element type `biasElement`, when the step has one) of another
/// type than out under blocks (GroupedGemm adds it as C). The parser and
/// GroupedGemm::create both apply it.
std::optional<std::pair<llvm::StringRef, std::string>>
groupedScalingProblem(const GroupedGemmStep &step,
                      std::optional<ElementType> biasElement);

/// The type operand b's (`operandB`) or a's scale_inv must have in an FP8
/// `step` with valid shapes and scalings: f32 [G] for Tensor, else the
/// dialects/GroupedBlockScaleLayout.h shape of the operand's layout.
TensorType groupedScaleType(const GroupedGemmStep &step, bool operandB);

struct AttentionStep {
  bool backward = false; // "attention_bwd"
  /// "kv_cache_attention" (inference): operands q, k, v, k_cache, v_cache,
  /// cu_seqlens_q, cu_seqlens_kv and result o; the step appends the new k
  /// and v tokens to the caches in place (docs/kv-cache-plan.md).
  bool kvCache = false;
  /// "fp8_attention" / "fp8_attention_bwd" (docs/fp8-attention.md): FP8
  /// operands and results, with their scales and amaxes as operands and
  /// results after the ones te.attention has.
  bool fp8 = false;
  std::vector<int64_t> operands, results;
  std::map<std::string, std::string> attributes; // printed MLIR attributes
  /// Elements between consecutive tokens of the operands and results that
  /// are strided views, by role: q, k, v, grad_q, grad_k, grad_v.
  std::map<std::string, int64_t> tokenStrides;

  /// tokenStrides[role], or 0 (packed) when the role has none.
  int64_t tokenStride(llvm::StringRef role) const {
    auto found = tokenStrides.find(role.str());
    return found == tokenStrides.end() ? 0 : found->second;
  }
};

struct AmaxAllReduceStep {
  int64_t in = 0, out = 0;
};

/// Tensor parallelism (docs/tensor-parallel.md): a collective over the
/// `ranks` ranks of the tensor-parallel group, from `in` to `out`, values of
/// one element type (bf16, f16 or f32). What the three kinds share.
struct TpCollectiveStep {
  int64_t in = 0, out = 0;
  int64_t ranks = 0;
};

/// "tp_allreduce": `out` = the element-wise sum over the ranks of `in`, of
/// the same type.
struct TpAllReduceStep : TpCollectiveStep {};
/// "tp_allgather" (sequence parallelism): `in` holds E elements, `out`
/// ranks * E; elements [r * E, (r + 1) * E) of `out` are rank r's `in`.
/// `in` and `out` never share bytes.
struct TpAllGatherStep : TpCollectiveStep {};
/// "tp_reducescatter" (sequence parallelism): `in` holds ranks * E
/// elements, `out` E: chunk `rank` (elements [rank * E, (rank + 1) * E)) of
/// the element-wise sum over the ranks of `in`. `in` and `out` never share
/// bytes.
struct TpReduceScatterStep : TpCollectiveStep {};

/// Which tensor-parallel collective a step is.
/// (AllToAll is context parallelism's a2a alone: no tensor-parallel step
/// uses it, but the groups are one class.)
enum class TpCollective { AllReduce, AllGather, ReduceScatter, AllToAll };
constexpr size_t kNumTpCollectives = 4;

/// Context parallelism (docs/context-parallel.md): "cp_allgather" gathers
/// the `ranks` ranks' `in` (this rank's tokens of every sequence) along dim
/// `seqDim` (0 or 1) into `out` (the whole sequence); "cp_reducescatter"
/// (gather false) sums `in` (a whole-sequence tensor) over the ranks and
/// keeps this rank's tokens in `out`. With `loadBalanced`, rank r's tokens
/// are chunks r and 2N - 1 - r of the sequence's 2N chunks (each half of its
/// rows) and the whole tensor is in sequence order; without, the ranks'
/// tokens follow each other in rank order. `in` and `out` have one element
/// type (bf16, f16 or f32) and never share bytes.
///
/// "cp_alltoall" (`allToAll`, cp_comm_type a2a) trades heads (dim
/// `headDim`) for tokens: to heads (`gather` set) `in` is this rank's
/// tokens of all H heads and `out` the whole sequence (placed as the
/// gather places it) of head block `rank` (H / N heads); to sequence the
/// inverse. Which one is read from the shapes.
struct CpCollectiveStep {
  int64_t in = 0, out = 0;
  int64_t ranks = 0;
  bool gather = true;
  int64_t seqDim = 0;
  bool loadBalanced = false;
  bool allToAll = false;
  int64_t headDim = 2;

  /// The group's collective the step runs.
  TpCollective collective() const {
    return allToAll ? TpCollective::AllToAll
           : gather ? TpCollective::AllGather
                    : TpCollective::ReduceScatter;
  }
};

using Step =
    std::variant<KernelStep, GemmStep, AttentionStep, AmaxAllReduceStep,
                 TpAllReduceStep, TpAllGatherStep, TpReduceScatterStep,
                 GroupedGemmStep, CpCollectiveStep>;

/// A tensor-parallel step: its collective and its fields.
struct TpStepRef {
  TpCollective collective;
  const TpCollectiveStep &step;
};
/// `step` as a tensor-parallel step, or nullopt for other kinds.
std::optional<TpStepRef> asTpStep(const Step &step);
/// The plan's name of a step of `collective`: "tp_allreduce",
/// "tp_allgather" or "tp_reducescatter"; "cp_alltoall" for AllToAll, which
/// only context parallelism has (there is no tp all-to-all step).
llvm::StringRef tpStepKind(TpCollective collective);
/// The plan's name of a context-parallel step of `collective`:
/// "cp_allgather", "cp_reducescatter" or "cp_alltoall".
llvm::StringRef cpStepKind(TpCollective collective);

struct FunctionPlan {
  std::string name;
  std::string backwardOf; // empty for forward functions
  /// The backward whose weight gradients this function computes
  /// (delay_wgrad_compute, docs/delay-wgrad.md); empty for others.
  std::string wgradOf;
  int64_t arenaBytes = 0;
  std::vector<InterfaceEntry> arguments, results;
  /// Indexed by value id (ids are dense from 0).
  std::vector<ValueInfo> values;
  std::vector<Step> steps;

  /// The value `id`'s view chain ends at (itself when it is no view), and
  /// the bytes past that value's start where `id` begins. Parsed plans have
  /// no cycles of views.
  std::pair<int64_t, int64_t> viewBase(int64_t id) const;
  /// Whether some value is a view of value `id`.
  bool isViewed(int64_t id) const;
  /// Whether no step touches value `id`, no value views it and no result
  /// is it (an argument the caller may pass as null: a backward's main_grad
  /// once delay_wgrad_compute moved its accumulation away).
  bool isUnused(int64_t id) const;
  /// The indices of the arguments with "host" (grouped ops' m_splits).
  std::vector<size_t> hostArguments() const;
  /// Whether result `index` is a view of an argument no step writes (a
  /// slot of the FP8 state the forward saves) that no other value views:
  /// the runtime copies it into its buffer before the steps, which then
  /// read the copy.
  bool resultCopiedFirst(size_t index) const;
  /// Whether result `resultIndex`, the new value of the argument its
  /// te.updates_arg names, may be written into that argument's buffer: the
  /// result lives in its own buffer, one kernel writes it and no other step
  /// touches it, no step after that kernel reads the argument, and every
  /// result viewing the argument is copied first. The kernel itself must
  /// read before it writes (plan format 3).
  bool canUpdateInPlace(size_t resultIndex) const;
  /// Whether result `resultIndex`, which has te.accumulates, may share the
  /// buffer of the argument it names: one step writes the result, in its
  /// own buffer, and reads the argument as it goes (a GEMM whose C it is);
  /// no other step touches the result, and none after that step reads the
  /// argument.
  bool canAccumulateInPlace(size_t resultIndex) const;
  /// The grouped GEMM that writes result `resultIndex` when the result may
  /// take its argument as G separate matrices, one per group (a grouped
  /// weight's main_grads that do not lie in one stacked buffer): the step is
  /// a grouped GEMM accumulating in place (canAccumulateInPlace), and no
  /// other step and no other value touches the argument, whose stacked
  /// address then means nothing. Else nullopt.
  std::optional<size_t> groupedAccumulation(size_t resultIndex) const;
  /// The step that writes result `resultIndex` when it is the only step
  /// touching the result, the result lives in its own buffer that no value
  /// views, and no step after it touches `argument` (a value id); else
  /// nullopt. What both in-place rules above share.
  std::optional<size_t> soleWriter(size_t resultIndex, int64_t argument) const;
  /// Which steps a run still needs when the results `dropped` (by index)
  /// are thrown away, as a forward that leaves the FP8 state drops its
  /// update (one flag per step). A step is needed when it writes an
  /// argument (the caller's memory: caches, accumulated gradients), a
  /// result that is kept, or a value a needed step touches, or when a needed
  /// kernel reads the scratch it leaves; a step that writes no value is
  /// kept. Views count as the values they view.
  std::vector<bool> stepsNeededWithout(llvm::ArrayRef<size_t> dropped) const;
};

/// Calls `visit(value, written)` for every value `step` reads (written
/// false) or writes (true); a GEMM's aux counts as written with GELU and
/// read with dGELU, and a kv-cache attention's caches, read and then
/// written in place, as written.
void forEachStepValue(const Step &step,
                      llvm::function_ref<void(int64_t, bool)> visit);

struct Plan {
  std::string arch, buildId;
  /// The format version. From 3, the kernel writing a result with
  /// `updatesArg` reads its inputs before overwriting them, so the runtime
  /// may pass the argument's own buffer as the result (the update in place)
  /// instead of copying the result over the argument afterwards.
  int64_t version = 0;
  std::vector<FunctionPlan> functions;
  /// The function named `name`, or null.
  const FunctionPlan *find(llvm::StringRef name) const;
  /// The first function that is neither a backward nor a wgrad function,
  /// or null.
  const FunctionPlan *forward() const;
  /// The backward of `forward`, or null.
  const FunctionPlan *backwardOf(const FunctionPlan &forward) const;
  /// The wgrad function of `backward` (its delayed weight gradients), or
  /// null.
  const FunctionPlan *wgradOf(const FunctionPlan &backward) const;
  /// The tensor-parallel size the plan was compiled for: the ranks of its
  /// tensor-parallel steps (tp_allreduce, tp_allgather, tp_reducescatter;
  /// parsing checks they agree), 1 when it has none.
  int64_t tensorParallelRanks() const;
  /// The context-parallel size the plan was compiled for: the ranks of its
  /// cp_allgather / cp_reducescatter steps (parsing checks they agree), 1
  /// when it has none.
  int64_t contextParallelRanks() const;
};

/// Why `step`, which reads the scratch as the step before it left it, cannot
/// run after `before` (the steps before it): there is none, or it is not a
/// kernel with at least as much scratch. Empty when it can.
std::string previousScratchProblem(llvm::ArrayRef<Step> before,
                                   const KernelStep &step);

/// Parses and checks a plan; errors name the function, step and field.
llvm::Expected<Plan> parsePlan(const llvm::json::Value &json);
llvm::Expected<Plan> parsePlan(llvm::StringRef text);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_PLAN_H
