//===- Bundle.cpp - a plan and the kernel binaries it names ---------------===//
#include "runtime/Bundle.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace tejit::runtime;

static llvm::Expected<std::string> readFile(const llvm::Twine &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (std::error_code error = buffer.getError())
    return llvm::createStringError(error, "cannot read '%s': %s",
                                   path.str().c_str(), error.message().c_str());
  return (*buffer)->getBuffer().str();
}

llvm::Expected<Bundle> tejit::runtime::loadBundle(llvm::StringRef dir) {
  llvm::SmallString<256> planPath(dir);
  llvm::sys::path::append(planPath, "plan.json");
  auto text = readFile(planPath);
  if (!text)
    return text.takeError();
  auto plan = parsePlan(llvm::StringRef(*text));
  if (!plan)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "%s: %s",
                                   planPath.c_str(),
                                   llvm::toString(plan.takeError()).c_str());
  Bundle bundle{std::move(*plan), {}, std::move(*text)};
  for (const FunctionPlan &function : bundle.plan.functions)
    for (const Step &step : function.steps) {
      const auto *kernel = std::get_if<KernelStep>(&step);
      if (!kernel || bundle.binaries.count(kernel->binary))
        continue;
      llvm::SmallString<256> path(dir);
      llvm::sys::path::append(path, kernel->binary);
      auto binary = readFile(path);
      if (!binary)
        return binary.takeError();
      bundle.binaries[kernel->binary] = std::move(*binary);
    }
  return bundle;
}

llvm::Error tejit::runtime::checkBinaries(const Bundle &bundle) {
  for (const FunctionPlan &function : bundle.plan.functions)
    for (const Step &step : function.steps)
      if (const auto *kernel = std::get_if<KernelStep>(&step);
          kernel && !bundle.binaries.count(kernel->binary))
        return llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            llvm::formatv("function '{0}': kernel '{1}' names binary '{2}', "
                          "which the bundle lacks",
                          function.name, kernel->name, kernel->binary)
                .str());
  return llvm::Error::success();
}
