//===- Gemm.h - plan GEMMs through cuBLASLt ---------------------*- C++ -*-===//
//
// Runs a plan's `gemm` step with cuBLASLt: FP8 (E4M3 x E4M3, E4M3 x E5M2 in
// either order, never E5M2 x E5M2) TN GEMMs with A/B scale_inv pointers
// (one scale per operand, or Float8BlockScaling's 1-D/2-D block scales),
// bf16/fp16/fp32 or FP8 output (D scale, amax_D), epilogues BIAS,
// GELU_AUX(_BIAS), DGELU(_BGRAD); and plain bf16/fp16/fp32 GEMMs with
// transposes for layers without a recipe. cuBLASLt is loaded with dlopen on
// first use. Algorithms from the heuristic are cached per problem.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_GEMM_H
#define TEJIT_RUNTIME_GEMM_H

#include "runtime/Plan.h"

#include <memory>

namespace tejit::runtime {

/// Device pointers for one GEMM step; those the step's epilogue does not
/// name stay null.
struct GemmPointers {
  const void *a = nullptr, *b = nullptr;
  void *out = nullptr;
  /// float[1], or a block-scaled operand's scale_inv tensor.
  const void *aScaleInv = nullptr, *bScaleInv = nullptr;
  const void *bias = nullptr;
  void *aux = nullptr;          // written by gelu, read by dgelu
  const void *dScale = nullptr; // float[1], FP8 output
  void *amaxD = nullptr;        // float[1], FP8 output
  void *biasGrad = nullptr;
  const void *residual = nullptr; // out's type, added to the product (C)
  /// Elements from one row of a (b) to the next as stored, 0 for packed
  /// rows (the matrix's column count): a grouped GEMM's contraction reads
  /// column ranges of [., T] operands (GroupedGemm.h).
  int64_t aRowStride = 0, bRowStride = 0;
};

/// The size class of a GEMM dimension that varies from call to call (a
/// grouped GEMM's M or K, GemmStep::sizesVary): the powers of two and the
/// midpoints between them (16, 24, 32, 48, 64, 96, ...), rounding up. The
/// runner reuses, for every size of a class, the algorithm cuBLASLt's
/// heuristic picked for the first.
int64_t gemmSizeClass(int64_t size);

class GemmRunner {
public:
  /// Loads cuBLASLt and creates its handle; the caller's CUDA context must
  /// be current. `workspace` (device memory of `workspaceBytes`, 32 MiB is
  /// what Hopper's best kernels want) must outlive the runner.
  ///
  /// FP8 GEMMs run the algorithm the tuning file TEJIT_GEMM_TUNING records
  /// for them (GemmTuning.h) when it was measured on `deviceName` with this
  /// cuBLASLt; else, and for every other GEMM, the heuristic's first.
  /// TEJIT_LOG_GEMMS=1 reports each problem's algorithm on stderr.
  static llvm::Expected<std::unique_ptr<GemmRunner>>
  create(void *workspace, size_t workspaceBytes, llvm::StringRef deviceName);
  virtual ~GemmRunner() = default;

  /// Enqueues `step` on `stream` (a CUstream; null is the legacy default
  /// stream). Types of the epilogue tensors come from `function`'s values.
  /// Errors name the problem (shape, types, epilogue) and cuBLASLt's status.
  virtual llvm::Error run(const GemmStep &step, const FunctionPlan &function,
                          const GemmPointers &pointers, void *stream) = 0;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_GEMM_H
