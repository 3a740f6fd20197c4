//===- AttentionLauncher.h - a plan's attention step on cuDNN ---*- C++ -*-===//
//
// Turns one te.attention / te.attention_bwd plan step into a cuDNN flash
// attention call: reads the step's shapes and printed attributes once, at
// executor creation (where cuDNN's plan is built, or its refusal reported),
// and on each run launches the small prep kernel (padding mask -> sequence
// lengths, thd cu_seqlens -> lengths and ragged offsets, this site's
// dropout offset) and then cuDNN.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_ATTENTIONLAUNCHER_H
#define TEJIT_RUNTIME_ATTENTIONLAUNCHER_H

#include "runtime/Attention.h"
#include "runtime/CudaDriver.h"
#include "runtime/Plan.h"

#include "llvm/ADT/ArrayRef.h"

#include <memory>
#include <optional>

namespace tejit::runtime {

class AttentionLauncher {
public:
  /// The problem `step` describes in `function` (the attributes the plan
  /// printed and the operand types), with a clear error for what tejit or
  /// cuDNN cannot run; builds cuDNN's plan. `prep` is the prep kernel.
  static llvm::Expected<AttentionLauncher> create(const AttentionStep &step,
                                                  const FunctionPlan &function,
                                                  CUfunction prep);
  /// create() without cuDNN: reads the step into a problem (validated) and
  /// the operands' roles, and builds no plan (for tests: scratchBytes() and
  /// run() need create()'s).
  static llvm::Expected<AttentionLauncher> parse(const AttentionStep &step,
                                                 const FunctionPlan &function);

  /// Device scratch a run needs: the sequence lengths, the dropout state,
  /// thd's ragged offsets and cuDNN's workspace.
  size_t scratchBytes() const;

  /// Enqueues the step; `addresses` holds every value's address.
  llvm::Error run(llvm::ArrayRef<CUdeviceptr> addresses, CUdeviceptr scratch,
                  CUstream stream, const CudaDriver &driver) const;

  const AttentionProblem &problem() const { return problemDesc; }
  /// thd: the value ids of cu_seqlens_q and cu_seqlens_kv (q's when the
  /// step has one).
  std::optional<int64_t> cuSeqlensQValue() const { return cuSeqlensQ; }
  std::optional<int64_t> cuSeqlensKvValue() const { return cuSeqlensKv; }

private:
  llvm::Error runThd(llvm::ArrayRef<CUdeviceptr> addresses,
                     AttentionPointers &pointers, CUdeviceptr scratch,
                     CUstream stream, const CudaDriver &driver) const;

  AttentionProblem problemDesc;
  std::shared_ptr<const AttentionRunner> runner;
  CUfunction prep = nullptr;
  // Value ids of the step's operands and results.
  int64_t q = 0, k = 0, v = 0, out = 0, stats = 0;
  int64_t gradOut = 0, gradQ = 0, gradK = 0, gradV = 0;
  std::optional<int64_t> mask, queryMask, rng, cuSeqlensQ, cuSeqlensKv;
  uint64_t offsetDelta = 0;
  /// Cross-attention (s_q != s_kv, or pad_keys_only) with a key padding
  /// mask and no query mask: every query is valid, so cuDNN gets s_q as
  /// each query length.
  bool fullQueryLengths = false;
  /// Bytes of the output (forward) or dq (backward) to zero before cuDNN
  /// runs with a query mask: padded queries' rows are 0.
  size_t zeroedBytes = 0;
};

/// The PTX of runtime/kernels/AttentionPrep.cu.
const char *attentionPrepPtx();

/// Where a thd attention's prep reads and writes (see enqueueThdPrep).
struct ThdPrepBuffers {
  /// int32 [batch + 1] each; a null cuSeqlensKv takes cuSeqlensQ's.
  CUdeviceptr cuSeqlensQ = 0, cuSeqlensKv = 0;
  /// thdPrepBytes(problem) bytes, 256-byte aligned: the sequence lengths
  /// and ragged offsets cuDNN reads.
  CUdeviceptr scratch = 0;
  /// Optional: the dropout state (seed, offset) copied from rngIn to rngOut
  /// with the offset moved on by rngOffsetDelta.
  CUdeviceptr rngIn = 0, rngOut = 0;
  uint64_t rngOffsetDelta = 0;
};

/// The scratch enqueueThdPrep needs for `problem` (a multiple of 256).
size_t thdPrepBytes(const AttentionProblem &problem);

/// Enqueues the one launch of the prep kernel `prep` (tejit_attention_prep)
/// that a thd `problem` needs before its runner runs: sequence lengths from
/// cu_seqlens differences and every ragged tensor's offsets (cu_seqlens
/// times its token stride), clamped on the device so that bad cu_seqlens
/// cannot send cuDNN out of bounds, and the rows no sequence covers (a
/// packed buffer's tail) of o (forward) or dq, dk and dv (backward) zeroed.
/// Points `pointers`' lengths and ragged offsets into buffers.scratch; its
/// o or gradQ/K/V must already be set. Captures into a CUDA graph.
llvm::Error enqueueThdPrep(const AttentionProblem &problem, CUfunction prep,
                           const ThdPrepBuffers &buffers,
                           AttentionPointers &pointers, CUstream stream,
                           const CudaDriver &driver);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_ATTENTIONLAUNCHER_H
