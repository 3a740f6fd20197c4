//===- te-compile.cpp - compile layer specs ahead of time
//------------------===//
//
// te-compile SPEC [-o DIR] [--emit=STAGE] [--training|--inference]
//
// Reads a layer spec (.yaml, .yml, .json) or te IR (.mlir), verifies it, runs
// the compilation pipeline up to the requested stage and prints its IR (or,
// for --emit=cuda, the CUDA C++ of every generated kernel), or writes it
// under DIR. Bad input exits with status 1 and a message located
// in the input.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelBuild.h"
#include "codegen/KernelEmitter.h"
#include "codegen/PlanWriter.h"
#include "compiler/passes/Passes.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/passes/Stats.h"
#include "compiler/spec/SpecImporter.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/Statistic.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

using tejit::Stage;

namespace {
enum class Mode { Training, Inference };

llvm::cl::OptionCategory teCompileCategory("te-compile options");
// MLIR's printing and diagnostic options (--mlir-print-debuginfo shows where
// in the spec each op comes from).
llvm::cl::OptionCategory mlirCategory("MLIR options");

llvm::cl::opt<std::string>
    inputPath(llvm::cl::Positional,
              llvm::cl::desc("<spec.yaml|spec.json|ir.mlir>"),
              llvm::cl::Required, llvm::cl::cat(teCompileCategory));
llvm::cl::opt<std::string>
    outputDir("o",
              llvm::cl::desc("Write under this directory instead of "
                             "printing: the bundle a runtime loads (planned "
                             "IR, kernels and their binaries, plan.json), or "
                             "with --emit the IR of that stage"),
              llvm::cl::value_desc("dir"), llvm::cl::cat(teCompileCategory));
llvm::cl::opt<Stage> emitStage(
    "emit", llvm::cl::desc("The compilation stage to output"),
    llvm::cl::values(
        clEnumValN(Stage::TE, "te", "te layer IR, as imported and verified"),
        clEnumValN(Stage::Primitive, "primitive",
                   "primitive ops (after te-decompose)"),
        clEnumValN(Stage::Autodiff, "autodiff",
                   "forward and backward functions (after te-autodiff; "
                   "training only)"),
        clEnumValN(Stage::Scaled, "scaled",
                   "FP8 GEMMs, casts and scale state (after "
                   "te-place-scaling)"),
        clEnumValN(Stage::Fused, "fused", "kernel regions (after te-fuse)"),
        clEnumValN(Stage::Planned, "planned",
                   "arena offsets of intermediates (after te-plan-memory)"),
        clEnumValN(Stage::Cuda, "cuda",
                   "CUDA C++ of every generated kernel, with its launch "
                   "geometry")),
    llvm::cl::init(Stage::TE), llvm::cl::cat(teCompileCategory));
llvm::cl::opt<Mode> mode(
    llvm::cl::desc("What to compile for:"),
    llvm::cl::values(clEnumValN(Mode::Training, "training",
                                "forward and backward, dropout on (default)"),
                     clEnumValN(Mode::Inference, "inference",
                                "forward only, no dropout")),
    llvm::cl::init(Mode::Training), llvm::cl::cat(teCompileCategory));
llvm::cl::opt<std::string> recipeOverride(
    "recipe",
    llvm::cl::desc("FP8 recipe for every GEMM, overriding the spec's: "
                   "delayed, current, block, none, or an attribute such as "
                   "'#te.delayed_scaling<amax_history_len = 16>'"),
    llvm::cl::value_desc("recipe"), llvm::cl::cat(teCompileCategory));
llvm::cl::opt<std::string> targetArch(
    "arch",
    llvm::cl::desc("GPU arch the kernels are compiled for with --emit=cuda "
                   "-o (default sm_90a)"),
    llvm::cl::init("sm_90a"), llvm::cl::cat(teCompileCategory));
llvm::cl::opt<bool> printCacheStats(
    "cache-stats",
    llvm::cl::desc("Print the kernel cache's hits, misses and size (stderr)"),
    llvm::cl::init(false), llvm::cl::cat(teCompileCategory));
llvm::cl::opt<bool>
    printIRAfterAll("print-ir-after-all",
                    llvm::cl::desc("Print the IR after every pass (to stderr)"),
                    llvm::cl::init(false), llvm::cl::cat(teCompileCategory));
} // namespace

/// Reads `path` as a spec or as IR; diagnostics go through `sourceMgr`.
static OwningOpRef<ModuleOp> loadInput(llvm::SourceMgr &sourceMgr,
                                       MLIRContext &context) {
  if (tejit::isLayerSpecPath(inputPath))
    return tejit::importLayerSpec(sourceMgr, &context);
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}

/// The file name written under -o: the first function's name, else (or
/// when that name would not make a plain file name, as a quoted symbol of an
/// .mlir input may not) the input's stem.
static std::string outputFileName(ModuleOp module) {
  std::string stem = llvm::sys::path::stem(inputPath).str();
  for (auto function : module.getOps<func::FuncOp>()) {
    StringRef name = function.getName();
    bool plain = !name.empty() && !name.starts_with(".") &&
                 llvm::all_of(name, [](char c) {
                   return llvm::isAlnum(c) || c == '_' || c == '.' ||
                          c == '-' || c == '$';
                 });
    if (plain)
      stem = name.str();
    break;
  }
  return stem + ".te.mlir";
}

static LogicalResult writeOutput(ModuleOp module) {
  if (outputDir.empty()) {
    module.print(llvm::outs());
    return success();
  }
  if (std::error_code error = llvm::sys::fs::create_directories(outputDir)) {
    llvm::errs() << "te-compile: error: cannot create directory '" << outputDir
                 << "': " << error.message() << "\n";
    return failure();
  }
  llvm::SmallString<256> path(outputDir);
  llvm::sys::path::append(path, outputFileName(module));
  std::string errorMessage;
  auto output = openOutputFile(path, &errorMessage);
  if (!output) {
    llvm::errs() << "te-compile: error: " << errorMessage << "\n";
    return failure();
  }
  module.print(output->os());
  output->keep();
  llvm::errs() << "te-compile: wrote " << path << "\n";
  return success();
}

/// Prints every generated kernel of `module`: a comment with its launch
/// geometry and parameters, then its source.
static LogicalResult printKernels(ModuleOp module) {
  auto kernels = tejit::codegen::emitKernels(module);
  if (!kernels) {
    llvm::errs() << "te-compile: error: " << llvm::toString(kernels.takeError())
                 << "\n";
    return failure();
  }
  for (const tejit::codegen::EmittedKernel &kernel : *kernels) {
    llvm::outs() << "// ===== kernel " << kernel.name << ": grid ("
                 << kernel.grid.x << ", " << kernel.grid.y << ", "
                 << kernel.grid.z << "), block (" << kernel.block.x << ", "
                 << kernel.block.y << ", " << kernel.block.z << "), shared "
                 << kernel.sharedBytes << " bytes";
    // The scratch, and what of it is zeroed before the launch.
    if (kernel.scratchFromPreviousStep)
      llvm::outs() << ", scratch " << kernel.scratchBytes
                   << " bytes as the previous kernel left them";
    else if (kernel.scratchBytes && !kernel.scratchZeroBytes)
      llvm::outs() << ", scratch " << kernel.scratchBytes
                   << " bytes, none zeroed";
    else if (kernel.scratchBytes)
      llvm::outs() << ", scratch " << kernel.scratchBytes << " bytes, "
                   << kernel.scratchZeroBytes << " zeroed from byte "
                   << kernel.scratchZeroOffset;
    llvm::outs() << "\n// params:";
    for (const tejit::codegen::KernelParam &param : kernel.params)
      llvm::outs() << " " << (param.isOutput ? "out " : "in ") << param.name
                   << (param.zeroBeforeLaunch ? " (zeroed)" : "") << ";";
    llvm::outs() << "\n" << kernel.source << "\n";
  }
  return success();
}

static LogicalResult writeFile(StringRef path, StringRef bytes) {
  std::string errorMessage;
  auto output = openOutputFile(path, &errorMessage);
  if (!output) {
    llvm::errs() << "te-compile: error: " << errorMessage << "\n";
    return failure();
  }
  output->os() << bytes;
  output->keep();
  return success();
}

/// Compiles every kernel of `module` with NVRTC (through the kernel cache)
/// and writes the bundle under -o: the planned IR, kernels/<name>.cu and
/// their binaries, and plan.json (docs/plan-format.md).
static LogicalResult writeBundle(ModuleOp module) {
  auto fail = [](llvm::Error error) {
    llvm::errs() << "te-compile: error: " << llvm::toString(std::move(error))
                 << "\n";
    return failure();
  };
  auto kernels = tejit::codegen::emitKernels(module);
  if (!kernels)
    return fail(kernels.takeError());
  auto compiler = tejit::codegen::NvrtcCompiler::create();
  if (!compiler)
    return fail(compiler.takeError());
  auto built = tejit::codegen::buildKernels(
      *kernels, targetArch, **compiler, tejit::codegen::KernelCache::global());
  if (!built)
    return fail(built.takeError());
  auto plan = tejit::codegen::writePlan(module, *built, targetArch);
  if (!plan)
    return fail(plan.takeError());
  if (failed(writeOutput(module)))
    return failure();
  llvm::SmallString<256> kernelDir(outputDir);
  llvm::sys::path::append(kernelDir, "kernels");
  if (std::error_code error = llvm::sys::fs::create_directories(kernelDir))
    return fail(llvm::createStringError(error, "cannot create '%s'",
                                        kernelDir.c_str()));
  for (const tejit::codegen::BuiltKernel &kernel : *built) {
    llvm::SmallString<256> path(outputDir);
    llvm::sys::path::append(path, "kernels", kernel.kernel->name + ".cu");
    llvm::SmallString<256> binary(outputDir);
    llvm::sys::path::append(binary, tejit::codegen::binaryFileName(kernel));
    if (failed(writeFile(path, kernel.kernel->source)) ||
        failed(writeFile(binary, kernel.binary)))
      return failure();
  }
  llvm::SmallString<256> planPath(outputDir);
  llvm::sys::path::append(planPath, "plan.json");
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", *plan) << "\n";
  if (failed(writeFile(planPath, text)))
    return failure();
  llvm::errs() << "te-compile: wrote " << built->size() << " kernels ("
               << targetArch << ") and " << planPath << "\n";
  return success();
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  // The LLVM libraries register hundreds of backend options; --help lists
  // only te-compile's and MLIR's own.
  for (auto &option : llvm::cl::getRegisteredOptions())
    if (option.getKey().starts_with("mlir-"))
      option.getValue()->addCategory(mlirCategory);
  if (llvm::cl::Option *stats =
          llvm::cl::getRegisteredOptions().lookup("stats")) {
    stats->setDescription("Print kernel, GEMM and attention counts and memory "
                          "per function instead of the IR (compiles to the "
                          "last stage unless --emit says otherwise)");
    stats->addCategory(teCompileCategory);
    stats->setHiddenFlag(llvm::cl::NotHidden);
  }
  llvm::cl::HideUnrelatedOptions({&teCompileCategory, &mlirCategory});
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "te-compile: compile Transformer Engine layer specs ahead of time\n");

  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(inputPath, /*IsText=*/true);
  if (std::error_code error = buffer.getError()) {
    llvm::errs() << "te-compile: error: cannot read '" << inputPath
                 << "': " << error.message() << "\n";
    return 1;
  }
  DialectRegistry registry;
  registry.insert<te::TEDialect, func::FuncDialect>();
  MLIRContext context(registry);
  // Diagnostics point into the spec or IR; a dump of the op in generic form
  // would only bury the message, unless asked for.
  llvm::cl::Option *printOp =
      llvm::cl::getRegisteredOptions().lookup("mlir-print-op-on-diagnostic");
  if (!printOp || !printOp->getNumOccurrences())
    context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  OwningOpRef<ModuleOp> module = loadInput(sourceMgr, context);
  if (!module || failed(verify(*module)))
    return 1;
  if (mode == Mode::Inference && emitStage == Stage::Autodiff &&
      emitStage.getNumOccurrences()) {
    llvm::errs() << "te-compile: error: --emit=autodiff needs --training "
                    "(inference has no backward pass)\n";
    return 1;
  }
  PassManager pm(&context);
  if (printIRAfterAll) {
    context.disableMultithreading();
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
        /*shouldPrintAfterPass=*/[](Pass *, Operation *) { return true; },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  // --stats is LLVM's own option (libLLVM registers it), given our meaning.
  bool printStats = llvm::AreStatisticsEnabled();
  // Without --emit: --stats reports on the planned IR, -o writes the whole
  // bundle a runtime loads, and plain output is the te IR.
  Stage stage = emitStage;
  if (!emitStage.getNumOccurrences() && printStats)
    stage = Stage::Planned;
  else if (!emitStage.getNumOccurrences() && !outputDir.empty())
    stage = Stage::Cuda;
  // Shorthands for TE's default recipes.
  std::string recipe = tejit::expandRecipeShorthand(recipeOverride);
  Stage pipelineStage = stage == Stage::Cuda ? Stage::Planned : stage;
  tejit::buildPipeline(pm, {pipelineStage, mode == Mode::Training, recipe});
  if (failed(pm.run(*module)))
    return 1;
  int status = 0;
  if (stage == Stage::Cuda && !printStats)
    status = failed(outputDir.empty() ? printKernels(*module)
                                      : writeBundle(*module));
  else if (printStats)
    status = failed(tejit::printStats(*module, llvm::outs()));
  else
    status = failed(writeOutput(*module));
  if (printCacheStats)
    tejit::codegen::KernelCache::global().stats().print(llvm::errs());
  return status;
}
