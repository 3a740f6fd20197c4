//===- CompileLatency.cpp - how long compiling a layer takes
//---------------===//
//
// tejit-compile-latency [spec] [arch]: compiles a spec's forward and
// backward (import, passes, emission, NVRTC) three ways, each timed as the
// median of several runs:
//   cold:    empty kernel cache: every kernel goes through NVRTC;
//   warm:    a new cache object over the filled folder, as a new process
//            sees it: every kernel is read from disk;
//   hit:     the same cache object again: every kernel is in memory.
// The compiler (import + passes + emission) is timed on its own too.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelBuild.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/spec/SpecImporter.h"
#include "dialects/TEDialect.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <functional>

using namespace mlir;
using namespace tejit::codegen;

namespace {
double seconds(const std::function<void()> &work) {
  auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void check(llvm::Error error) {
  if (error) {
    llvm::errs() << llvm::toString(std::move(error)) << "\n";
    std::exit(1);
  }
}

/// Import + pipeline + emission: the compiler's own work, no NVRTC.
std::vector<EmittedKernel> emit(MLIRContext &context, llvm::StringRef path,
                                OwningOpRef<ModuleOp> &module) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    llvm::errs() << "cannot read " << path << "\n";
    std::exit(1);
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  module = tejit::importLayerSpec(sourceMgr, &context);
  PassManager pm(&context);
  tejit::buildPipeline(pm, {tejit::Stage::Planned, /*training=*/true});
  if (!module || failed(pm.run(*module)))
    std::exit(1);
  auto kernels = emitKernels(*module);
  if (!kernels)
    check(kernels.takeError());
  return std::move(*kernels);
}
} // namespace

int main(int argc, char **argv) {
  std::string spec = argc > 1 ? argv[1] : "examples/quickstart.yaml";
  std::string arch = argc > 2 ? argv[2] : "sm_90a";
  MLIRContext context;
  context.loadDialect<te::TEDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels;
  std::vector<double> compilerTimes;
  for (int i = 0; i < 5; ++i)
    compilerTimes.push_back(
        seconds([&] { kernels = emit(context, spec, module); }));

  auto compiler = NvrtcCompiler::create();
  if (!compiler)
    check(compiler.takeError());
  llvm::SmallString<128> root;
  check(llvm::errorCodeToError(
      llvm::sys::fs::createUniqueDirectory("tejit-bench", root)));
  std::vector<double> cold, warm, hit;
  for (int run = 0; run < 3; ++run) {
    KernelCacheOptions options;
    options.directory = (root + "/cache" + std::to_string(run)).str();
    KernelCache first(options);
    cold.push_back(seconds([&] {
      check(buildKernels(kernels, arch, **compiler, first).takeError());
    }));
    KernelCache second(options);
    warm.push_back(seconds([&] {
      check(buildKernels(kernels, arch, **compiler, second).takeError());
    }));
    for (int i = 0; i < 5; ++i)
      hit.push_back(seconds([&] {
        check(buildKernels(kernels, arch, **compiler, second).takeError());
      }));
  }
  llvm::sys::fs::remove_directories(root);
  llvm::outs() << "spec " << spec << ", " << kernels.size()
               << " kernels, NVRTC " << (*compiler)->nvrtcVersionString()
               << ", " << arch << ", median of runs\n"
               << "| step | time |\n"
               << "|---|---|\n"
               << llvm::format("| %-38s | %7.1f ms |\n",
                               (const char *)"import + passes + emission",
                               median(compilerTimes) * 1e3)
               << llvm::format("| %-38s | %7.1f ms |\n",
                               (const char *)"cold: NVRTC, empty cache",
                               median(cold) * 1e3)
               << llvm::format("| %-38s | %7.1f ms |\n",
                               (const char *)"warm: disk cache, new process",
                               median(warm) * 1e3)
               << llvm::format("| %-38s | %7.3f ms |\n",
                               (const char *)"hit: in-process cache",
                               median(hit) * 1e3);
  return 0;
}
