//===- EmitterImpl.h - what the kernel family emitters share ----*- C++ -*-===//
#ifndef TEJIT_CODEGEN_EMITTERIMPL_H
#define TEJIT_CODEGEN_EMITTERIMPL_H

#include "codegen/CudaWriter.h"
#include "codegen/KernelEmitter.h"

#include "mlir/IR/AsmState.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace tejit::codegen {

/// The ops of one kernel: a te.fused body, or a single standalone op. Values
/// are the ones the ops use ("inner"); `outer` maps region arguments and
/// yielded values to the function's values that the parameters bind.
struct KernelGroup {
  mlir::Operation *op = nullptr;
  /// The te.fused kind, or the standalone op's name without `te.`.
  std::string kind;
  llvm::SmallVector<mlir::Operation *> ops;
  llvm::SmallVector<mlir::Value> inputs, outputs;
  llvm::DenseMap<mlir::Value, mlir::Value> outer;

  mlir::Value outerOf(mlir::Value inner) const {
    return outer.lookup(inner) ? outer.lookup(inner) : inner;
  }
  bool isOutput(mlir::Value inner) const {
    return llvm::is_contained(outputs, inner);
  }
};

/// Names the parameters of a kernel after the IR and writes its signature.
class KernelBuilder {
public:
  KernelBuilder(const KernelGroup &group, std::string name,
                mlir::AsmState &asmState);

  /// The parameter name of a group input or output.
  llvm::StringRef param(mlir::Value inner) const;
  /// A readable base name for a value: its te.name; for a backward
  /// argument without one, what it is in the forward (the forward argument's
  /// name, `rng_state`, `saved_3`); else its SSA name.
  std::string valueName(mlir::Value value);
  /// Asks for `bytes` of device scratch, passed as a last parameter named
  /// `tj_scratch` (a float *), of which the launcher zeroes `zeroBytes` from
  /// byte `zeroOffset` first (nothing else is zeroed); call before
  /// writeSignature.
  void requestScratch(int64_t bytes, int64_t zeroOffset, int64_t zeroBytes) {
    scratch = {bytes, zeroOffset, zeroBytes, false};
  }
  /// Asks for the first `bytes` of the scratch as the kernel emitted just
  /// before this one (of the same op, so the plan step before this one)
  /// left them; call before writeSignature.
  void requestPreviousScratch(int64_t bytes) { scratch = {bytes, 0, 0, true}; }
  /// Writes the device helpers and the `extern "C"` signature, opening the
  /// kernel body. `minBlocksPerSm` > 0 goes to __launch_bounds__ (it caps
  /// the registers a thread may take). Pointer parameters are __restrict__
  /// unless `restrictPointers` is false.
  void writeSignature(CudaWriter &w, int64_t threadsPerBlock,
                      int64_t minBlocksPerSm = 0, bool restrictPointers = true);
  /// Closes the body and returns the kernel.
  EmittedKernel finish(CudaWriter &w, Dim3 grid, Dim3 block);

  mlir::AsmState &state() const { return asmState; }

  const KernelGroup &group;
  std::string name;

private:
  mlir::AsmState &asmState;
  std::vector<KernelParam> params;
  llvm::DenseMap<mlir::Value, unsigned> paramIndex;
  struct {
    int64_t bytes = 0, zeroOffset = 0, zeroBytes = 0;
    bool fromPreviousStep = false;
  } scratch;
};

/// Column sums split over blocks: block (strip blockIdx.x, split
/// blockIdx.y) has stored its partial sums in tj_scratch; this makes every
/// block but the last of its strip leave, so that the last one adds the
/// splits in order (the result does not depend on which block came last).
/// The strips' arrival counters live at `counters` (an unsigned * into the
/// scratch): the part of the scratch the launcher must zero, since every
/// partial sum is stored before it is read.
void writeLastBlockOfStrip(CudaWriter &w, llvm::StringRef counters);

/// The C++ storage type of a tensor element type, or "" when unsupported.
std::string elementTypeName(mlir::Type type);
int64_t elementBytes(mlir::Type type);
mlir::RankedTensorType tensorType(mlir::Value value);
/// Product of all dims but the last (1 for vectors).
int64_t rowsOf(mlir::Value value);
int64_t colsOf(mlir::Value value);
/// A float literal that reads back to the same float.
std::string floatLiteral(double value);
/// The widest vector of elements (at most 16 bytes, at most 8 elements) that
/// divides every width in `widths`.
int64_t vectorWidth(llvm::ArrayRef<int64_t> widths, int64_t elementBytes);
llvm::Error noEmitter(mlir::Operation *op, llvm::StringRef why = "");

/// Kernel families; each appends its kernels for `group` to `kernels`.
llvm::Error emitPointwise(KernelBuilder &builder,
                          std::vector<EmittedKernel> &kernels);
llvm::Error emitNormForward(KernelBuilder &builder,
                            std::vector<EmittedKernel> &kernels);
llvm::Error emitNormBackward(KernelBuilder &builder,
                             std::vector<EmittedKernel> &kernels);
llvm::Error emitScaling(KernelBuilder &builder,
                        std::vector<EmittedKernel> &kernels);
/// te.rotary, forward or inverse.
llvm::Error emitRotary(KernelBuilder &builder,
                       std::vector<EmittedKernel> &kernels);
llvm::Error emitCopy(KernelBuilder &builder,
                     std::vector<EmittedKernel> &kernels);
/// te.block_quantize casts of one input (Float8BlockScaling).
llvm::Error emitBlockQuantize(KernelBuilder &builder,
                              std::vector<EmittedKernel> &kernels);
/// GroupedLinear's per-group casts: te.grouped_quantize casts of one input
/// (a row-major and a transposed copy read it once), or te.grouped_amax.
llvm::Error emitGroupedCast(KernelBuilder &builder,
                            std::vector<EmittedKernel> &kernels);
/// te.grouped_block_quantize casts of one input (Float8BlockScaling for
/// GroupedLinear): token segments or stacked matrices.
llvm::Error emitGroupedBlockQuantize(KernelBuilder &builder,
                                     std::vector<EmittedKernel> &kernels);
/// te.grouped_bias_grad: per-segment column sums.
llvm::Error emitGroupedBiasGrad(KernelBuilder &builder,
                                std::vector<EmittedKernel> &kernels);
/// The cross entropy ops (te.cross_entropy_*), a kernel each.
llvm::Error emitCrossEntropy(KernelBuilder &builder,
                             std::vector<EmittedKernel> &kernels);

/// The MoE router ops (te.router_*; RouterKernels.cpp), a kernel each.
llvm::Error emitRouter(KernelBuilder &builder,
                       std::vector<EmittedKernel> &kernels);

/// The MoE token permutation ops (docs/moe-permutation.md): row moves
/// (MoeKernels.cpp), handing the row maps to emitMoeRowMap.
llvm::Error emitMoe(KernelBuilder &builder,
                    std::vector<EmittedKernel> &kernels);
/// te.moe_row_map and te.moe_chunk_row_map (MoeRowMapKernels.cpp).
llvm::Error emitMoeRowMap(KernelBuilder &builder,
                          std::vector<EmittedKernel> &kernels);

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_EMITTERIMPL_H
