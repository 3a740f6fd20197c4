//===- ClampedSwigluEmitTest.cpp - clamped_swiglu's kernels ---------------===//
//
// A LayerNormMLP with clamped_swiglu through the whole pipeline, under each
// recipe, for training and inference: the activation's kernel calls
// tj_clamped_silu and tj_clamped_linear, the backward's dact kernel their
// derivatives, with the spec's parameters as float literals (so that kernels
// of other parameters differ in their source, and so in their cache keys);
// swiglu's kernels call none of them. Every kernel is compiled with NVRTC
// for sm_90a and sm_89 (no GPU needed).
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/spec/SpecImporter.h"
#include "tests/codegen-emit/ExpectCompiles.h"
#include "tests/codegen-emit/TeIrTest.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

using namespace mlir;
using tejit::codegen::EmittedKernel;
using tejit::testing::expectCompiles;

namespace {

struct Case {
  std::string recipe;
  bool training;
};

std::string nameOf(const Case &c) {
  return (c.recipe.empty() ? std::string("spec") : c.recipe) +
         (c.training ? "_training" : "_inference");
}

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  return nameOf(info.param);
}

/// gtest prints a parameter without one as its bytes, which ctest's test
/// names then carry (pointer values: other names each build).
[[maybe_unused]] void PrintTo(const Case &c, std::ostream *os) {
  *os << nameOf(c);
}

class ClampedSwigluEmit : public tejit::testing::TeIrTest,
                          public ::testing::WithParamInterface<Case> {
protected:
  /// The kernels of a LayerNormMLP (bias, DelayedScaling unless the case's
  /// recipe overrides it) with `activation`, after the whole pipeline.
  std::vector<EmittedKernel> emit(StringRef activation) {
    std::string spec = llvm::formatv(R"(
name: mlp
seq_length: 16
batch_size: 2
recipe: {{type: DelayedScaling, fp8_format: HYBRID}
layers:
  - {{type: LayerNormMLP, hidden_size: 64, ffn_hidden_size: 96, {0}}
)",
                                     activation)
                           .str();
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(spec, "mlp.yaml"), llvm::SMLoc());
    OwningOpRef<ModuleOp> module = tejit::importLayerSpec(sourceMgr, &context);
    EXPECT_TRUE(module) << spec;
    if (!module)
      return {};
    PassManager pm(&context);
    tejit::buildPipeline(pm, {tejit::Stage::Planned, GetParam().training,
                              tejit::expandRecipeShorthand(GetParam().recipe)});
    EXPECT_TRUE(succeeded(pm.run(*module)));
    auto kernels = tejit::codegen::emitKernels(*module);
    EXPECT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
    if (!kernels)
      return {};
    return std::move(*kernels);
  }
};

/// The kernel's own code, after the device helpers.
StringRef body(const EmittedKernel &kernel) {
  StringRef source = kernel.source;
  return source.drop_front(source.find("extern \"C\""));
}

/// The kernels whose code calls `function`.
std::vector<const EmittedKernel *>
calling(const std::vector<EmittedKernel> &kernels, StringRef function) {
  std::vector<const EmittedKernel *> found;
  for (const EmittedKernel &kernel : kernels)
    if (body(kernel).contains((function + "(").str()))
      found.push_back(&kernel);
  return found;
}

} // namespace

TEST_P(ClampedSwigluEmit, ParametersAreLiteralsOfTheKernels) {
  std::vector<EmittedKernel> kernels =
      emit("activation: clamped_swiglu, activation_params: {limit: 0.75, "
           "alpha: 1.5, glu_linear_offset: 0.25}");
  ASSERT_FALSE(kernels.empty());
  // Forward: f(a) g(b), a and b the halves of one row.
  std::vector<const EmittedKernel *> act = calling(kernels, "tj_clamped_silu");
  ASSERT_FALSE(act.empty());
  for (const EmittedKernel *kernel : act) {
    SCOPED_TRACE(kernel->name);
    EXPECT_TRUE(body(*kernel).contains(", 0.75f, 1.5f) * tj_clamped_linear("));
    EXPECT_TRUE(body(*kernel).contains(", 0.75f, 0.25f)"));
  }
  // Backward: da = dy f'(a) g(b), db = dy f(a) g'(b), in one kernel.
  std::vector<const EmittedKernel *> dact =
      calling(kernels, "tj_dclamped_silu");
  EXPECT_EQ(dact.size(), GetParam().training ? 1u : 0u);
  for (const EmittedKernel *kernel : dact) {
    SCOPED_TRACE(kernel->name);
    StringRef code = body(*kernel);
    EXPECT_TRUE(code.contains(", 0.75f, 1.5f) * tj_clamped_linear("));
    EXPECT_TRUE(code.contains(", 0.75f, 1.5f) * tj_dclamped_linear("));
    EXPECT_TRUE(code.contains(", 0.75f)"));
  }
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

TEST_P(ClampedSwigluEmit, OtherParametersMakeOtherKernels) {
  // TE's defaults (limit 7, alpha 1.702, offset 1) when none are given.
  std::vector<EmittedKernel> defaults = emit("activation: clamped_swiglu");
  std::vector<EmittedKernel> other =
      emit("activation: clamped_swiglu, activation_params: {limit: 7.0, "
           "alpha: 1.702, glu_linear_offset: 0.0}");
  std::vector<const EmittedKernel *> act = calling(defaults, "tj_clamped_silu");
  std::vector<const EmittedKernel *> otherAct =
      calling(other, "tj_clamped_silu");
  ASSERT_FALSE(act.empty());
  ASSERT_EQ(act.size(), otherAct.size());
  for (size_t i = 0; i < act.size(); ++i) {
    SCOPED_TRACE(act[i]->name);
    EXPECT_TRUE(body(*act[i]).contains(", 7.f, 1.70200002f) * "));
    EXPECT_TRUE(body(*act[i]).contains(", 7.f, 1.f)"));
    EXPECT_TRUE(body(*otherAct[i]).contains(", 7.f, 0.f)"));
    EXPECT_NE(act[i]->source, otherAct[i]->source);
  }
  // swiglu's kernels call no clamp.
  std::vector<EmittedKernel> swiglu = emit("activation: swiglu");
  EXPECT_FALSE(calling(swiglu, "tj_silu").empty());
  for (StringRef function : {"tj_clamped_silu", "tj_dclamped_silu",
                             "tj_clamped_linear", "tj_dclamped_linear"})
    EXPECT_TRUE(calling(swiglu, function).empty()) << function.str();
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, ClampedSwigluEmit,
    ::testing::Values(Case{"", true}, Case{"", false}, Case{"current", true},
                      Case{"current", false}, Case{"block", true},
                      Case{"block", false}, Case{"none", true},
                      Case{"none", false}),
    caseName);
