//===- Compile.h - specs and IR to runnable bundles, in process -*- C++ -*-===//
//
// What `te-compile --emit=cuda -o DIR` does, without files: import a layer
// spec (or parse te IR), run the pipeline, emit the kernels, build them
// through the kernel cache (memory, then disk, then NVRTC), and write the
// plan. The C API's tejit_compile and tejit_compile_ir sit on this.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_COMPILE_H
#define TEJIT_RUNTIME_COMPILE_H

#include "runtime/Bundle.h"

namespace tejit::runtime {

struct CompileOptions {
  bool training = true;
  /// "" (the spec's), "delayed", "current", "block", "none", or a #te recipe
  /// attribute.
  std::string recipe;
  /// The GPU arch kernels are built for, e.g. "sm_90a".
  std::string arch = "sm_90a";
};

/// The compiler's input: text, or a file when `text` is empty.
struct CompileInput {
  std::string text;
  std::string path;
};

/// Compiles `input` to a bundle. Errors carry the MLIR diagnostics, located
/// in the spec or IR (ErrorCode::Compile), or the NVRTC log.
llvm::Expected<Bundle> compileBundle(const CompileInput &input,
                                     const CompileOptions &options);

/// The IR of `input` after `stage` ("te" ... "planned", as te-compile's
/// --emit spells them), or for "cuda" every kernel's source.
llvm::Expected<std::string> compileToText(const CompileInput &input,
                                          const CompileOptions &options,
                                          llvm::StringRef stage);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_COMPILE_H
