//===- BuildId.cpp - the build id written at build time -------------------===//
#include "codegen/BuildId.h"

// Only this file includes the generated id, so a new commit rebuilds one file.
#include "codegen/BuildId.inc"

llvm::StringRef tejit::buildId() { return TEJIT_BUILD_ID; }
