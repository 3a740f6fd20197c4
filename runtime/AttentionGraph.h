//===- AttentionGraph.h - cuDNN operation graphs for attention --*- C++ -*-===//
//
// Builds the backend operation graph of one attention problem, forward or
// backward, in the composite form cuDNN 9 fuses into its flash-attention
// engines. What the graph's non-virtual tensors are bound to at run time is
// returned next to it; Attention.cpp turns the graph into an execution plan
// and runs it.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_ATTENTIONGRAPH_H
#define TEJIT_RUNTIME_ATTENTIONGRAPH_H

#include "runtime/Attention.h"
#include "runtime/Cudnn.h"

#include <vector>

namespace tejit::runtime::attention {

/// Where a non-virtual tensor of the graph gets its data when the graph
/// runs: one of the caller's pointers, a buffer in the runner's workspace,
/// or a host scalar (cuDNN's by-value tensors are read from host memory
/// through the variant pack, like device tensors).
enum class Slot {
  Q,
  K,
  V,
  O,
  Stats,
  GradO,
  GradQ,
  GradK,
  GradV,
  SeqLenQ,
  SeqLenKv,
  // A paged kv cache's int32 page table (the prep kernel's clamped copy).
  PageTable,
  Seed,
  Offset,
  // thd: the int32 [b + 1] ragged offsets of q, k, v, o (and dO), dq, dk
  // and dv.
  RaggedQ,
  RaggedK,
  RaggedV,
  RaggedO,
  RaggedGradQ,
  RaggedGradK,
  RaggedGradV,
  // A post-scale bias, its gradient (dbias) and ALiBi's slopes (the
  // caller's, or the runner's vanilla ones).
  Bias,
  GradBias,
  AlibiSlopes,
  // FP8 attention's f32 scales, scale inverses and amaxes (AttentionPointers).
  DescaleQkv,
  ScaleO,
  // FP8: P's fixed scale and its inverse, in a buffer of the runner's own
  // (fp8Constants).
  ProbabilityScale,
  ProbabilityDescale,
  AmaxS,
  AmaxO,
  DescaleO,
  DescaleGradO,
  ScaleDp,
  DescaleDp,
  ScaleGradQkv,
  AmaxDp,
  AmaxGradQ,
  AmaxGradK,
  AmaxGradV,
  Workspace,
  Host,
};

/// The scale P (the softmax output) is cast to E4M3 with inside FP8
/// attention: E4M3's largest value. cuDNN's FP8 kernels cast the
/// unnormalized probabilities of their running softmax, exp(s - running
/// max), which reach 1 in every row whatever the final maximum (amax_s is
/// of the normalized ones): a scale above 448 would saturate them
/// (measured on an H200: attention without a causal mask 10x less
/// accurate, amax_o 60% low).
constexpr float kProbabilityScale = 448.0f;

/// The device constants of an FP8 attention runner (P's scale and its
/// inverse), 16 bytes apart (cuDNN is told every tensor is 16-byte
/// aligned): FP8 engines read P's scales through pointers (by-value ones
/// faulted in a GQA backward on cuDNN 9.19).
std::vector<float> fp8Constants();
/// The byte offset of `slot`'s constant in fp8Constants' buffer.
size_t fp8ConstantOffset(Slot slot);

struct Binding {
  int64_t uid = 0;
  Slot slot = Slot::Q;
  /// Workspace: byte offset into the workspace; Host: index into
  /// Graph::hostScalars.
  size_t index = 0;
};

/// `count` 32-bit words set to `value` at `offset` bytes into the
/// workspace, enqueued before every run.
struct WorkspaceFill {
  size_t offset = 0, count = 0;
  uint32_t value = 0;
};

struct Graph {
  /// Every tensor and operation descriptor, alive as long as the graph.
  std::vector<BackendDescriptor> descriptors;
  BackendDescriptor operationGraph;
  std::vector<Binding> bindings;
  /// By-value scalars, 4 bytes each (the bits of an f32 or an int32, as
  /// the tensor's data type says); their addresses go into the variant pack.
  std::vector<uint32_t> hostScalars;
  /// Bytes at the start of the workspace used by the graph's own buffers
  /// (a multiple of 256); cuDNN's workspace follows.
  size_t workspaceBytes = 0;
  std::vector<WorkspaceFill> fills;
  /// A few words on the version workarounds applied, for describeEngine().
  std::string notes;
};

/// The finalized operation graph of `problem` (already validated) on
/// `handle`. Errors name the operation whose descriptor cuDNN refused.
llvm::Expected<Graph> buildGraph(const Cudnn &lib, cudnnHandle_t handle,
                                 const AttentionProblem &problem);

} // namespace tejit::runtime::attention

#endif // TEJIT_RUNTIME_ATTENTIONGRAPH_H
