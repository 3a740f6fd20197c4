//===- Compile.cpp - specs and IR to runnable bundles, in process ---------===//
#include "runtime/Compile.h"

#include "codegen/KernelBuild.h"
#include "codegen/PlanWriter.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/spec/SpecImporter.h"
#include "dialects/TEDialect.h"
#include "runtime/Errors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

using namespace tejit::runtime;
using namespace mlir;

namespace {
/// The buffer name that tells the importer what `text` is: a spec path
/// decides by extension; inline text is JSON when it starts with '{', IR
/// when it looks like MLIR, YAML otherwise.
std::string bufferName(const CompileInput &input) {
  if (input.text.empty())
    return input.path;
  llvm::StringRef text = llvm::StringRef(input.text).ltrim();
  if (text.starts_with("{"))
    return "<spec>.json";
  if (text.starts_with("module") || text.starts_with("func.func") ||
      text.starts_with("#") || text.starts_with("//") ||
      text.contains("func.func"))
    return "<ir>.mlir";
  return "<spec>.yaml";
}

/// One compilation: a context, the input, and diagnostics gathered into a
/// string for the error.
class Compilation {
public:
  Compilation() : context(registry()), handler(sourceMgr, &context, diagOs) {
    context.printOpOnDiagnostic(false);
  }

  llvm::Expected<OwningOpRef<ModuleOp>> run(const CompileInput &input,
                                            const CompileOptions &options,
                                            tejit::Stage stage) {
    std::unique_ptr<llvm::MemoryBuffer> buffer;
    std::string name = bufferName(input);
    if (input.text.empty()) {
      auto file = llvm::MemoryBuffer::getFile(input.path, /*IsText=*/true);
      if (std::error_code error = file.getError())
        return makeError(ErrorCode::InvalidArgument,
                         "cannot read '" + input.path +
                             "': " + error.message());
      buffer = std::move(*file);
    } else {
      buffer = llvm::MemoryBuffer::getMemBufferCopy(input.text, name);
    }
    sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
    OwningOpRef<ModuleOp> module =
        tejit::isLayerSpecPath(name)
            ? tejit::importLayerSpec(sourceMgr, &context)
            : parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!module || failed(verify(*module)))
      return failure("the input was rejected");
    std::string recipe = tejit::expandRecipeShorthand(options.recipe);
    PassManager pm(&context);
    tejit::buildPipeline(pm, {stage, options.training, recipe});
    if (failed(pm.run(*module)))
      return failure("compilation failed");
    return std::move(module);
  }

private:
  static DialectRegistry registry() {
    DialectRegistry registry;
    registry.insert<te::TEDialect, func::FuncDialect>();
    return registry;
  }
  llvm::Error failure(llvm::StringRef what) {
    return makeError(ErrorCode::Compile, what + ":\n" + diagnostics);
  }

  MLIRContext context;
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  llvm::raw_string_ostream diagOs{diagnostics};
  SourceMgrDiagnosticHandler handler;
};

llvm::Expected<std::vector<tejit::codegen::BuiltKernel>>
build(llvm::ArrayRef<tejit::codegen::EmittedKernel> kernels,
      llvm::StringRef arch) {
  auto compiler = tejit::codegen::NvrtcCompiler::create();
  if (!compiler)
    return compiler.takeError();
  return tejit::codegen::buildKernels(kernels, arch, **compiler,
                                      tejit::codegen::KernelCache::global());
}
} // namespace

llvm::Expected<Bundle>
tejit::runtime::compileBundle(const CompileInput &input,
                              const CompileOptions &options) {
  Compilation compilation;
  auto module = compilation.run(input, options, Stage::Planned);
  if (!module)
    return module.takeError();
  auto kernels = codegen::emitKernels(**module);
  if (!kernels)
    return annotate(kernels.takeError(), "emitting kernels",
                    ErrorCode::Compile);
  auto built = build(*kernels, options.arch);
  if (!built)
    return annotate(built.takeError(), "building kernels", ErrorCode::Compile);
  auto json = codegen::writePlan(**module, *built, options.arch);
  if (!json)
    return annotate(json.takeError(), "writing the plan", ErrorCode::Internal);
  auto plan = parsePlan(*json);
  if (!plan)
    return annotate(plan.takeError(), "reading the plan back",
                    ErrorCode::Internal);
  std::string planText;
  llvm::raw_string_ostream planOs(planText);
  planOs << llvm::formatv("{0:2}", *json);
  Bundle bundle{std::move(*plan), {}, std::move(planText)};
  for (const codegen::BuiltKernel &kernel : *built)
    bundle.binaries[codegen::binaryFileName(kernel)] = kernel.binary;
  return bundle;
}

llvm::Expected<std::string>
tejit::runtime::compileToText(const CompileInput &input,
                              const CompileOptions &options,
                              llvm::StringRef stageName) {
  std::optional<Stage> stage;
  for (Stage candidate :
       {Stage::TE, Stage::Primitive, Stage::Autodiff, Stage::Scaled,
        Stage::Fused, Stage::Planned, Stage::Cuda})
    if (tejit::stageName(candidate) == stageName)
      stage = candidate;
  if (!stage)
    return makeError(ErrorCode::InvalidArgument,
                     "unknown stage '" + stageName +
                         "': te, primitive, autodiff, scaled, fused, planned "
                         "or cuda");
  if (*stage == Stage::Autodiff && !options.training)
    return makeError(ErrorCode::InvalidArgument,
                     "the autodiff stage needs training (inference has no "
                     "backward pass)");
  Compilation compilation;
  auto module = compilation.run(
      input, options, *stage == Stage::Cuda ? Stage::Planned : *stage);
  if (!module)
    return module.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  if (*stage != Stage::Cuda) {
    (*module)->print(os);
    return text;
  }
  auto kernels = codegen::emitKernels(**module);
  if (!kernels)
    return annotate(kernels.takeError(), "emitting kernels",
                    ErrorCode::Compile);
  for (const codegen::EmittedKernel &kernel : *kernels)
    os << "// ===== kernel " << kernel.name << "\n" << kernel.source << "\n";
  return text;
}
