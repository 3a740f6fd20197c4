//===- Bundle.h - a plan and the kernel binaries it names -------*- C++ -*-===//
#ifndef TEJIT_RUNTIME_BUNDLE_H
#define TEJIT_RUNTIME_BUNDLE_H

#include "runtime/Plan.h"

#include "llvm/ADT/StringMap.h"

namespace tejit::runtime {

/// What the runtime needs to run compiled layers: the plan and, for each
/// binary path the plan's kernel steps name ("kernels/x.cubin"), its bytes
/// (a cubin, or PTX the driver JIT-compiles).
struct Bundle {
  Plan plan;
  llvm::StringMap<std::string> binaries;
  /// The plan as JSON (docs/plan-format.md), for inspection and tools.
  std::string planText;
};

/// Loads a bundle written by `te-compile --emit=cuda -o DIR`: DIR/plan.json
/// and every binary it names.
llvm::Expected<Bundle> loadBundle(llvm::StringRef dir);

/// Checks that every kernel step names a binary the bundle holds.
llvm::Error checkBinaries(const Bundle &bundle);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_BUNDLE_H
