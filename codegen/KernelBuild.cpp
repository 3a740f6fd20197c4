//===- KernelBuild.cpp - emitted kernels to binaries, through the cache ---===//
#include "codegen/KernelBuild.h"

#include "llvm/Support/ThreadPool.h"

#include <cstdlib>

#include <mutex>

using namespace tejit::codegen;

/// Threads compiling at once: one per hardware thread, or
/// $TEJIT_COMPILE_THREADS (to measure the speed-up, or to leave cores free).
static llvm::ThreadPoolStrategy compileThreads() {
  if (const char *text = std::getenv("TEJIT_COMPILE_THREADS")) {
    unsigned threads = 0;
    if (!llvm::StringRef(text).getAsInteger(10, threads) && threads > 0)
      return llvm::heavyweight_hardware_concurrency(threads);
  }
  return llvm::hardware_concurrency();
}

llvm::Expected<std::vector<BuiltKernel>> tejit::codegen::buildKernels(
    llvm::ArrayRef<EmittedKernel> kernels, llvm::StringRef arch,
    const NvrtcCompiler &compiler, KernelCache &cache) {
  llvm::Expected<NvrtcTarget> target = compiler.target(arch);
  if (!target)
    return target.takeError();
  llvm::Expected<std::vector<std::string>> options =
      normalizedOptions(target->arch, {});
  if (!options)
    return options.takeError();

  std::vector<BuiltKernel> built(kernels.size());
  std::vector<llvm::Error> errors;
  std::mutex errorsLock;
  llvm::DefaultThreadPool pool(compileThreads());
  for (size_t i = 0; i < kernels.size(); ++i)
    pool.async([&, i] {
      const EmittedKernel &kernel = kernels[i];
      KernelCacheKey key{kernel.source, *options, compiler.nvrtcVersionString(),
                         target->arch};
      llvm::Expected<std::string> binary =
          cache.getOrCompile(key, [&]() -> llvm::Expected<std::string> {
            llvm::Expected<CompiledKernel> compiled =
                compiler.compile(kernel.source, kernel.name, arch);
            if (!compiled)
              return compiled.takeError();
            return std::move(compiled->binary);
          });
      if (!binary) {
        std::lock_guard<std::mutex> lock(errorsLock);
        errors.push_back(binary.takeError());
        return;
      }
      built[i] = {&kernel, std::move(*binary), target->isCubin, target->arch};
    });
  pool.wait();
  llvm::Error all = llvm::Error::success();
  for (llvm::Error &error : errors)
    all = llvm::joinErrors(std::move(all), std::move(error));
  if (all)
    return std::move(all);
  return built;
}
