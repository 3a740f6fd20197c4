//===- PlanWriterTest.cpp - the GEMM steps of the plans te-compile writes -===//
//
// writePlan on the quickstart layer under Float8BlockScaling and under
// DelayedScaling: every FP8 GEMM step says how each operand is scaled
// ("a_scaling", "b_scaling"), block-scaled ones with the scale_inv shapes
// of dialects/BlockScaleLayout.h, no fast accumulation and no epilogue;
// GEMMs without FP8 have neither key. (The kernels' binaries play no part:
// the plan only names them.)
//
//===----------------------------------------------------------------------===//
#include "codegen/PlanWriter.h"
#include "codegen/KernelEmitter.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/spec/SpecImporter.h"
#include "dialects/BlockScaleLayout.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace mlir;
namespace json = llvm::json;

namespace {

/// The plan of examples/quickstart_small.yaml under `recipe` (a
/// te-compile shorthand), training.
json::Value quickstartPlan(llvm::StringRef recipe) {
  MLIRContext context;
  context.loadDialect<te::TEDialect, func::FuncDialect>();
  auto buffer = llvm::MemoryBuffer::getFile(
      TEJIT_EXAMPLES_DIR "/quickstart_small.yaml", /*IsText=*/true);
  EXPECT_TRUE(bool(buffer));
  if (!buffer)
    return nullptr;
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = tejit::importLayerSpec(sourceMgr, &context);
  EXPECT_TRUE(module);
  if (!module)
    return nullptr;
  PassManager pm(&context);
  tejit::buildPipeline(pm, {tejit::Stage::Planned, /*training=*/true,
                            tejit::expandRecipeShorthand(recipe)});
  EXPECT_TRUE(succeeded(pm.run(*module)));
  auto kernels = tejit::codegen::emitKernels(*module);
  EXPECT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
  if (!kernels)
    return nullptr;
  std::vector<tejit::codegen::BuiltKernel> built;
  for (const tejit::codegen::EmittedKernel &kernel : *kernels)
    built.push_back({&kernel, "", true, "sm_90a"});
  auto plan = tejit::codegen::writePlan(*module, built, "sm_90a");
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  if (!plan)
    return nullptr;
  return std::move(*plan);
}

/// "tensor<8x4xf32>" -> {8, 4}.
std::vector<int64_t> shapeOf(llvm::StringRef type) {
  type = type.drop_front(strlen("tensor<"));
  std::vector<int64_t> shape;
  while (!type.empty() && llvm::isDigit(type.front())) {
    auto [dim, rest] = type.split('x');
    shape.push_back(std::stoll(dim.str()));
    type = rest;
  }
  return shape;
}

/// The GEMM steps of each function, with the function's value types by id.
struct Gemm {
  std::string function;
  const json::Object *step;
  std::string aScaleType, bScaleType;
};
std::vector<Gemm> gemmsOf(const json::Value &plan) {
  std::vector<Gemm> gemms;
  const json::Array *functions = plan.getAsObject()->getArray("functions");
  for (const json::Value &function : *functions) {
    const json::Object &fields = *function.getAsObject();
    std::map<int64_t, std::string> types;
    for (const json::Value &value : *fields.getArray("values"))
      types[*value.getAsObject()->getInteger("id")] =
          value.getAsObject()->getString("type")->str();
    for (const json::Value &step : *fields.getArray("steps")) {
      const json::Object &object = *step.getAsObject();
      if (object.getString("kind") != "gemm")
        continue;
      Gemm gemm{fields.getString("name")->str(), &object, "", ""};
      if (auto id = object.getInteger("a_scale_inv"))
        gemm.aScaleType = types[*id];
      if (auto id = object.getInteger("b_scale_inv"))
        gemm.bScaleType = types[*id];
      gemms.push_back(gemm);
    }
  }
  return gemms;
}

TEST(PlanWriterTest, BlockScaledGemmsSayHowEachOperandIsScaled) {
  json::Value plan = quickstartPlan("block");
  ASSERT_NE(plan.kind(), json::Value::Null);
  std::vector<Gemm> gemms = gemmsOf(plan);
  ASSERT_FALSE(gemms.empty());
  std::set<std::pair<std::string, std::string>> forward, backward;
  for (const Gemm &gemm : gemms) {
    const json::Object &step = *gemm.step;
    SCOPED_TRACE(gemm.function + ": " +
                 step.getString("a_type").value_or("").str());
    std::optional<llvm::StringRef> a = step.getString("a_scaling");
    std::optional<llvm::StringRef> b = step.getString("b_scaling");
    ASSERT_TRUE(a && b);
    (llvm::StringRef(gemm.function).ends_with("_backward") ? backward : forward)
        .insert({a->str(), b->str()});
    EXPECT_EQ(step.getBoolean("fast_accum"), false);
    EXPECT_TRUE(step.getObject("epilogue")->empty());
    // The scale_inv values are the operands' block scales.
    for (auto [scaling, operandType, scaleType] :
         {std::tuple{*a, step.getString("a_type")->str(), gemm.aScaleType},
          std::tuple{*b, step.getString("b_type")->str(), gemm.bScaleType}}) {
      std::vector<int64_t> operand = shapeOf(operandType);
      ASSERT_EQ(operand.size(), 2u);
      auto expected = tejit::blockscale::scaleShape(
          operand[0], operand[1], scaling == "block_1d" ? 1 : 2);
      EXPECT_EQ(shapeOf(scaleType),
                (std::vector<int64_t>{expected[0], expected[1]}))
          << scaleType;
    }
  }
  // TE's defaults: x and grad 1-D, weights 2-D. Forward x * W; backward
  // dgrad dY * W^T and wgrad dY^T * x^T.
  using Pair = std::pair<std::string, std::string>;
  EXPECT_EQ(forward, (std::set<Pair>{{"block_1d", "block_2d"}}));
  EXPECT_EQ(backward, (std::set<Pair>{{"block_1d", "block_2d"},
                                      {"block_1d", "block_1d"}}));
}

TEST(PlanWriterTest, TensorScaledGemmsSayTensor) {
  json::Value plan = quickstartPlan("delayed");
  ASSERT_NE(plan.kind(), json::Value::Null);
  std::vector<Gemm> gemms = gemmsOf(plan);
  ASSERT_FALSE(gemms.empty());
  for (const Gemm &gemm : gemms) {
    EXPECT_EQ(gemm.step->getString("a_scaling"), "tensor");
    EXPECT_EQ(gemm.step->getString("b_scaling"), "tensor");
    EXPECT_EQ(gemm.aScaleType, "tensor<1xf32>");
  }
}

TEST(PlanWriterTest, HighPrecisionGemmsHaveNoScaling) {
  json::Value plan = quickstartPlan("none");
  ASSERT_NE(plan.kind(), json::Value::Null);
  std::vector<Gemm> gemms = gemmsOf(plan);
  ASSERT_FALSE(gemms.empty());
  for (const Gemm &gemm : gemms) {
    EXPECT_EQ(gemm.step->get("a_scaling"), nullptr);
    EXPECT_EQ(gemm.step->get("b_scaling"), nullptr);
  }
}

} // namespace
