//===- BuildId.h - identity of this tejit build -----------------*- C++ -*-===//
#ifndef TEJIT_CODEGEN_BUILDID_H
#define TEJIT_CODEGEN_BUILDID_H

#include "llvm/ADT/StringRef.h"

namespace tejit {

/// Identifies the tejit build: the git commit of the sources it was built
/// from, with "-dirty" when tracked files differed from that commit, else
/// the project version. Part of every kernel cache key, so that a new tejit
/// never reuses binaries a different one compiled.
llvm::StringRef buildId();

} // namespace tejit

#endif // TEJIT_CODEGEN_BUILDID_H
