//===- KernelEmitter.h - CUDA C++ for te kernels ----------------*- C++ -*-===//
//
// Turns every generated kernel of a planned te function (te.fused regions
// other than GEMMs, and the memory-bound ops left outside regions) into a
// self-contained CUDA C++ source with its launch geometry and parameters.
// GEMMs and attention are library calls and are not emitted here; views
// (te.reshape) and te.amax_allreduce (an identity in one process) need no
// kernel.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_CODEGEN_KERNELEMITTER_H
#define TEJIT_CODEGEN_KERNELEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tejit::codegen {

struct Dim3 {
  int64_t x = 1, y = 1, z = 1;
};

/// One pointer parameter of a kernel: the device buffer of an SSA value of
/// the function (an operand the kernel reads, or a result it writes).
struct KernelParam {
  mlir::Value value;
  /// The parameter's name in the source.
  std::string name;
  /// The C++ element type it points to (`tj_bf16`, `float`, ...).
  std::string elementType;
  bool isOutput = false;
  /// Accumulated by atomics (amaxes): the launcher zeroes it first.
  bool zeroBeforeLaunch = false;
};

/// A generated kernel, ready for NVRTC: the source needs no header. Every
/// kernel takes a `const int *tj_skip` after its other arguments
/// (KernelBuilder::writeSignature): null runs it; a device int that is
/// nonzero at launch makes it return at once.
struct EmittedKernel {
  /// The `extern "C"` entry point: function name, kind and index.
  std::string name;
  std::string source;
  /// In the order of the kernel's arguments.
  std::vector<KernelParam> params;
  Dim3 grid, block;
  /// Dynamic shared memory; all kernels use static shared memory so far.
  int64_t sharedBytes = 0;
  /// Device scratch the launcher passes as a last `float *` argument
  /// (cross-block reductions); 0 for none. One buffer serves every step.
  int64_t scratchBytes = 0;
  /// The bytes of it the launcher zeroes first, [scratchZeroOffset,
  /// scratchZeroOffset + scratchZeroBytes): arrival counters, say; the rest
  /// holds whatever earlier steps left.
  int64_t scratchZeroOffset = 0, scratchZeroBytes = 0;
  /// The kernel reads the scratch as the previous step's kernel left it (a
  /// second kernel of the same op, the step right after the first): the
  /// launcher zeroes none of it.
  bool scratchFromPreviousStep = false;
  /// The op it comes from (a te.fused or a standalone op).
  mlir::Operation *op = nullptr;
};

/// The kernels of `function`, in program order. Fails with
/// "te-emit: no CUDA emitter for <op> yet" for an op that needs a kernel the
/// emitter cannot write.
llvm::Expected<std::vector<EmittedKernel>>
emitKernels(mlir::func::FuncOp function);

/// The kernels of every function of `module`.
llvm::Expected<std::vector<EmittedKernel>> emitKernels(mlir::ModuleOp module);

/// The device helpers every source starts with (runtime_headers/*.cuh).
llvm::StringRef deviceHelpers();

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_KERNELEMITTER_H
