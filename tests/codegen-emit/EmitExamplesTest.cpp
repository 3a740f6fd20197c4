//===- EmitExamplesTest.cpp - the CUDA emitter on every example spec ------===//
#include "codegen/KernelEmitter.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/spec/SpecImporter.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

#include <set>

using namespace mlir;

namespace {

struct Case {
  std::string spec, recipe;
  bool training;
};

std::string caseName(const testing::TestParamInfo<Case> &info) {
  std::string name = llvm::sys::path::stem(info.param.spec).str() + "_" +
                     (info.param.recipe.empty() ? "spec" : info.param.recipe) +
                     (info.param.training ? "_training" : "_inference");
  for (char &c : name)
    if (!isalnum(c))
      c = '_';
  return name;
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  std::error_code error;
  std::vector<std::string> specs;
  for (llvm::sys::fs::directory_iterator it(TEJIT_EXAMPLES_DIR, error), end;
       it != end && !error; it.increment(error))
    if (tejit::isLayerSpecPath(it->path()))
      specs.push_back(it->path());
  std::sort(specs.begin(), specs.end());
  for (const std::string &spec : specs) {
    // FP8 weights (fp8_weights) feed FP8 GEMMs only: no `none` override,
    // and Float8BlockScaling does not take them, nor GroupedLinear yet.
    auto text = llvm::MemoryBuffer::getFile(spec, /*IsText=*/true);
    bool fp8Weights =
        text && (*text)->getBuffer().contains("fp8_weights: true");
    bool grouped = text && (*text)->getBuffer().contains("type: GroupedLinear");
    for (const char *recipe : {"", "none", "current", "delayed", "block"})
      for (bool training : {true, false})
        if (!(fp8Weights &&
              (StringRef(recipe) == "none" || StringRef(recipe) == "block")) &&
            !(grouped && StringRef(recipe) == "block"))
          cases.push_back({spec, recipe, training});
  }
  return cases;
}

class EmitExamples : public testing::TestWithParam<Case> {};

TEST_P(EmitExamples, EveryKernelSelfContained) {
  const Case &c = GetParam();
  MLIRContext context;
  context.loadDialect<te::TEDialect, func::FuncDialect>();
  auto buffer = llvm::MemoryBuffer::getFile(c.spec, /*IsText=*/true);
  ASSERT_TRUE(buffer) << c.spec;
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = tejit::importLayerSpec(sourceMgr, &context);
  ASSERT_TRUE(module);
  PassManager pm(&context);
  std::string recipe = tejit::expandRecipeShorthand(c.recipe);
  tejit::buildPipeline(pm, {tejit::Stage::Planned, c.training, recipe});
  ASSERT_TRUE(succeeded(pm.run(*module)));

  auto kernels = tejit::codegen::emitKernels(*module);
  ASSERT_TRUE(!!kernels) << llvm::toString(kernels.takeError());
  // The attention-only layer is all cuDNN and views: no generated kernel;
  // nor has GroupedLinear's inference without FP8 (grouped GEMMs alone).
  bool noKernels = llvm::sys::path::stem(c.spec) == "attention_small" ||
                   ((StringRef(c.spec).contains("grouped_linear") ||
                     StringRef(c.spec).contains("grouped_main_grad")) &&
                    c.recipe == "none" && !c.training);
  EXPECT_EQ(kernels->empty(), noKernels);
  std::set<std::string> names;
  for (const tejit::codegen::EmittedKernel &kernel : *kernels) {
    SCOPED_TRACE(kernel.name);
    EXPECT_TRUE(names.insert(kernel.name).second) << "duplicate kernel name";
    EXPECT_FALSE(kernel.source.empty());
    EXPECT_EQ(kernel.source.find("#include"), std::string::npos);
    EXPECT_NE(kernel.source.find("extern \"C\" __global__"), std::string::npos);
    EXPECT_NE(kernel.source.find(kernel.name + "("), std::string::npos);
    EXPECT_GE(kernel.grid.x, 1);
    EXPECT_GE(kernel.block.x, 32);
    EXPECT_LE(kernel.block.x * kernel.block.y * kernel.block.z, 1024);
    EXPECT_FALSE(kernel.params.empty());
    // Float8BlockScaling's casts: a kernel of their own, one block per
    // 128 x 128 tile of the input, which they read to write an FP8 matrix
    // and its scale_inv.
    if (auto quantize = dyn_cast<te::BlockQuantizeOp>(kernel.op)) {
      auto input = cast<RankedTensorType>(quantize.getInput().getType());
      EXPECT_EQ(kernel.grid.x, (input.getDimSize(1) + 127) / 128);
      EXPECT_EQ(kernel.grid.y, (input.getDimSize(0) + 127) / 128);
      ASSERT_EQ(kernel.params.size(), 3u);
      EXPECT_EQ(kernel.params[0].value, quantize.getInput());
      EXPECT_EQ(kernel.params[1].value, quantize.getOutput());
      EXPECT_EQ(kernel.params[2].value, quantize.getScaleInv());
      EXPECT_FALSE(kernel.params[2].zeroBeforeLaunch);
    }
    // GroupedLinear's kernels (codegen/GroupedKernels.cpp) read m_splits as
    // a `const int *` and accumulate their [G] amaxes atomically.
    if (auto fused = dyn_cast<te::FusedOp>(kernel.op);
        fused && fused.getKind().starts_with("grouped_"))
      for (const tejit::codegen::KernelParam &param : kernel.params) {
        auto type = cast<RankedTensorType>(param.value.getType());
        if (type.getElementType().isInteger(32)) {
          EXPECT_EQ(param.elementType, "int");
          EXPECT_FALSE(param.isOutput);
        }
        if (param.isOutput && type.getRank() == 1) {
          EXPECT_TRUE(param.zeroBeforeLaunch) << param.name;
        }
      }
    // Pointers are __restrict__ but in the norm backward's row kernel.
    bool restricted =
        kernel.source.find(" *__restrict__ ") != std::string::npos;
    for (const tejit::codegen::KernelParam &param : kernel.params) {
      EXPECT_TRUE(param.value);
      EXPECT_FALSE(param.elementType.empty());
      EXPECT_NE(kernel.source.find((restricted ? " *__restrict__ " : " *") +
                                   param.name),
                std::string::npos)
          << param.name;
    }
    // The scratch: the zeroed bytes lie inside it; a kernel that reads it as
    // the previous step left it follows a kernel of the same op (the plan
    // step before it) with at least as much.
    EXPECT_GE(kernel.scratchBytes, 0);
    EXPECT_GE(kernel.scratchZeroOffset, 0);
    EXPECT_LE(kernel.scratchZeroOffset + kernel.scratchZeroBytes,
              kernel.scratchBytes);
    EXPECT_EQ(kernel.source.find("tj_scratch") != std::string::npos,
              kernel.scratchBytes > 0);
    if (kernel.scratchFromPreviousStep) {
      EXPECT_GT(kernel.scratchBytes, 0);
      EXPECT_EQ(kernel.scratchZeroBytes, 0);
      ASSERT_NE(&kernel, &kernels->front());
      const tejit::codegen::EmittedKernel &previous = (&kernel)[-1];
      EXPECT_EQ(previous.op, kernel.op);
      EXPECT_GE(previous.scratchBytes, kernel.scratchBytes);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, EmitExamples, testing::ValuesIn(allCases()),
                         caseName);

} // namespace
