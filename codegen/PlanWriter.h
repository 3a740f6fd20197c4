//===- PlanWriter.h - the executable plan a runtime loads -------*- C++ -*-===//
//
// A plan (docs/plan-format.md) lists, per function, where every value lives
// (an argument, a result, an arena offset, or a view of another value) and
// the steps to run in order: generated kernels with their binaries and
// launch geometry, GEMMs with their operands and epilogue, grouped GEMMs
// (GroupedLinear, over the segments of a host m_splits argument), attention
// calls, and amax reductions.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_CODEGEN_PLANWRITER_H
#define TEJIT_CODEGEN_PLANWRITER_H

#include "codegen/KernelBuild.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

namespace tejit::codegen {

/// The plan of a planned module (after te-plan-memory) whose kernels are
/// `kernels`; binaries are referenced as `kernels/<name>.cubin` (or .ptx).
llvm::Expected<llvm::json::Value> writePlan(mlir::ModuleOp module,
                                            llvm::ArrayRef<BuiltKernel> kernels,
                                            llvm::StringRef arch);

/// The file name a kernel's binary is written to, relative to the plan.
std::string binaryFileName(const BuiltKernel &kernel);

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_PLANWRITER_H
