//===- SpecImporter.h - layer specs (YAML/JSON) into te IR ------*- C++ -*-===//
//
// A layer spec names one or more Transformer Engine layers, applied in
// sequence, with the shapes to compile them for and an optional FP8 recipe.
// It becomes a module with one func.func whose arguments are the activations
// and parameters. docs/spec-format.md documents the format.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_SPEC_SPECIMPORTER_H
#define TEJIT_COMPILER_SPEC_SPECIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

namespace tejit {

/// Imports the spec in the main buffer of `sourceMgr`; the buffer's name
/// (a file path) decides JSON (".json") or YAML. Errors are reported as MLIR
/// diagnostics located in the spec (file:line:col) and yield a null module.
mlir::OwningOpRef<mlir::ModuleOp> importLayerSpec(llvm::SourceMgr &sourceMgr,
                                                  mlir::MLIRContext *context);

/// True when `path` names a layer spec (.yaml, .yml, .json) rather than IR.
bool isLayerSpecPath(llvm::StringRef path);

} // namespace tejit

#endif // TEJIT_COMPILER_SPEC_SPECIMPORTER_H
