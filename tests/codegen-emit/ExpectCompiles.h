//===- ExpectCompiles.h - emitted kernels through NVRTC ---------*- C++ -*-===//
//
// The emitter tests (BlockQuantizeEmitTest, GroupedEmitTest,
// Fp8AttentionEmitTest) compile what they emit with NVRTC: every kernel
// must build for the architecture without an error or a warning.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_CODEGEN_EMIT_EXPECTCOMPILES_H
#define TEJIT_TESTS_CODEGEN_EMIT_EXPECTCOMPILES_H

#include "codegen/KernelEmitter.h"
#include "codegen/NvrtcCompiler.h"

#include "llvm/ADT/STLExtras.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tejit::testing {

/// Compiles `kernels` with NVRTC for `arch` ("sm_90a"); fails the test on
/// any error or warning, skips it where NVRTC does not know `arch`.
inline void expectCompiles(const std::vector<codegen::EmittedKernel> &kernels,
                           llvm::StringRef arch) {
  auto compiler = codegen::NvrtcCompiler::create();
  ASSERT_TRUE(bool(compiler)) << "this test needs the CUDA toolkit's NVRTC: "
                              << llvm::toString(compiler.takeError());
  if (!llvm::is_contained((*compiler)->supportedArchs(),
                          std::stoi(arch.drop_front(3).str())))
    GTEST_SKIP() << "NVRTC " << (*compiler)->nvrtcVersionString()
                 << " does not compile for " << arch.str();
  std::vector<codegen::KernelSource> sources;
  for (const codegen::EmittedKernel &kernel : kernels)
    sources.push_back({kernel.name, kernel.source, arch.str(), {}});
  auto compiled = (*compiler)->compileAll(sources);
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  for (const codegen::CompiledKernel &kernel : *compiled) {
    EXPECT_FALSE(kernel.binary.empty()) << kernel.name;
    // Warnings are errors for generated code, as in the nvcc check.
    EXPECT_EQ(kernel.log, "") << kernel.name;
  }
}

} // namespace tejit::testing

#endif // TEJIT_TESTS_CODEGEN_EMIT_EXPECTCOMPILES_H
