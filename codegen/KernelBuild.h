//===- KernelBuild.h - kernels to binaries via the cache --------*- C++ -*-===//
#ifndef TEJIT_CODEGEN_KERNELBUILD_H
#define TEJIT_CODEGEN_KERNELBUILD_H

#include "codegen/KernelCache.h"
#include "codegen/KernelEmitter.h"
#include "codegen/NvrtcCompiler.h"

namespace tejit::codegen {

/// An emitted kernel and its binary for one arch.
struct BuiltKernel {
  const EmittedKernel *kernel = nullptr;
  std::string binary;
  /// A cubin for `arch`, or PTX when NVRTC is older than the GPU.
  bool isCubin = true;
  std::string arch;
};

/// Compiles `kernels` for `arch` (e.g. "sm_90a") in parallel, each through
/// `cache`: a kernel compiled before (in this process or on disk) is not
/// compiled again. Returns them in order; fails with every kernel's error.
llvm::Expected<std::vector<BuiltKernel>>
buildKernels(llvm::ArrayRef<EmittedKernel> kernels, llvm::StringRef arch,
             const NvrtcCompiler &compiler, KernelCache &cache);

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_KERNELBUILD_H
