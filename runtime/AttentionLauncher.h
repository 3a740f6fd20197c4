//===- AttentionLauncher.h - a plan's attention step on cuDNN ---*- C++ -*-===//
//
// Turns one te.attention / te.attention_bwd plan step into a cuDNN flash
// attention call: reads the step's shapes and printed attributes once, at
// executor creation (where cuDNN's plan is built, or its refusal reported),
// and on each run launches the small prep kernel (padding mask -> sequence
// lengths, this site's dropout offset) and then cuDNN.
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

  /// Device scratch a run needs: the sequence lengths, the dropout state
  /// and cuDNN's workspace.
  size_t scratchBytes() const;

  /// Enqueues the step; `addresses` holds every value's address.
  llvm::Error run(llvm::ArrayRef<CUdeviceptr> addresses, CUdeviceptr scratch,
                  CUstream stream, const CudaDriver &driver) const;

  const AttentionProblem &problem() const { return problemDesc; }

private:
  AttentionProblem problemDesc;
  std::shared_ptr<const AttentionRunner> runner;
  CUfunction prep = nullptr;
  // Value ids of the step's operands and results.
  int64_t q = 0, k = 0, v = 0, out = 0, stats = 0;
  int64_t gradOut = 0, gradQ = 0, gradK = 0, gradV = 0;
  std::optional<int64_t> mask, queryMask, rng;
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

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_ATTENTIONLAUNCHER_H
