//===- Passes.h - tejit compiler passes -------------------------*- C++ -*-===//
#ifndef TEJIT_COMPILER_PASSES_PASSES_H
#define TEJIT_COMPILER_PASSES_PASSES_H

#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace tejit {

#define GEN_PASS_DECL
#include "compiler/passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/passes/Passes.h.inc"

} // namespace tejit

#endif // TEJIT_COMPILER_PASSES_PASSES_H
