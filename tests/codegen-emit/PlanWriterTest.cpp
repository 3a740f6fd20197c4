//===- PlanWriterTest.cpp - the GEMM steps of the plans te-compile writes -===//
//
// writePlan on the quickstart layer under Float8BlockScaling and under
// DelayedScaling: every FP8 GEMM step says how each operand is scaled
// ("a_scaling", "b_scaling"), block-scaled ones with the scale_inv shapes
// of dialects/BlockScaleLayout.h, no fast accumulation and no epilogue;
// GEMMs without FP8 have neither key. GroupedLinear's hand-written forward
// and backward (docs/grouped-linear.md): m_splits arguments marked "host",
// grouped_gemm steps with their form, operands, per-group scale inverses or
// transposes; under Float8BlockScaling, how each grouped GEMM operand is
// scaled. (The kernels' binaries play no part: the plan only names them.)
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
#include "mlir/Parser/Parser.h"
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

//===----------------------------------------------------------------------===//
// GroupedLinear: host arguments and grouped_gemm steps
//===----------------------------------------------------------------------===//

/// A GroupedLinear's forward under FP8 and a high-precision backward, as
/// te-place-scaling and te-fuse leave them (docs/grouped-linear.md): the
/// casts in te.fused regions, the grouped GEMMs outside.
constexpr const char *kGroupedModule = R"mlir(
func.func @fwd(%x: tensor<64x32xbf16> {te.name = "x"},
               %m: tensor<4xi32> {te.name = "m_splits"},
               %w: tensor<4x48x32xbf16> {te.name = "weight", te.parameter},
               %b: tensor<4x48xbf16> {te.name = "bias", te.parameter},
               %sx: tensor<4xf32> {te.name = "scale_x"},
               %six: tensor<4xf32> {te.name = "scale_inv_x"},
               %sw: tensor<4xf32> {te.name = "scale_w"},
               %siw: tensor<4xf32> {te.name = "scale_inv_w"})
    -> (tensor<64x48xbf16> {te.name = "y"}, tensor<32x64xf8E4M3FN> {te.name = "xt"}, tensor<4xf32> {te.name = "amax_x"}) {
  %qx:3 = te.fused "grouped_quantize"(%x, %sx, %m) : (tensor<64x32xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>, tensor<32x64xf8E4M3FN>) {
  ^bb0(%x0: tensor<64x32xbf16>, %s0: tensor<4xf32>, %m0: tensor<4xi32>):
    %q, %a = te.grouped_quantize %x0, %s0, %m0 : (tensor<64x32xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
    %qt, %at = te.grouped_quantize %x0, %s0, %m0 {transpose} : (tensor<64x32xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<4xf32>)
    te.yield %q, %a, %qt : tensor<64x32xf8E4M3FN>, tensor<4xf32>, tensor<32x64xf8E4M3FN>
  }
  %qw:2 = te.fused "grouped_quantize"(%w, %sw) : (tensor<4x48x32xbf16>, tensor<4xf32>) -> (tensor<4x48x32xf8E4M3FN>, tensor<4xf32>) {
  ^bb0(%w0: tensor<4x48x32xbf16>, %s1: tensor<4xf32>):
    %q, %a = te.grouped_quantize %w0, %s1 : (tensor<4x48x32xbf16>, tensor<4xf32>) -> (tensor<4x48x32xf8E4M3FN>, tensor<4xf32>)
    te.yield %q, %a : tensor<4x48x32xf8E4M3FN>, tensor<4xf32>
  }
  %y = te.grouped_scaled_matmul %qx#0, %qw#0, %six, %siw, %m bias(%b) {fast_accum} : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<64x48xbf16>
  return %y, %qx#2, %qx#1 : tensor<64x48xbf16>, tensor<32x64xf8E4M3FN>, tensor<4xf32>
}

func.func @fwd_backward(%dy: tensor<64x48xbf16> {te.name = "grad_y"},
                        %x: tensor<64x32xbf16> {te.forward_arg = 0 : i64},
                        %m: tensor<4xi32> {te.forward_arg = 1 : i64},
                        %w: tensor<4x48x32xbf16> {te.forward_arg = 2 : i64})
    -> (tensor<64x32xbf16> {te.name = "grad.x", te.grad_of = 0 : i64}, tensor<4x48x32xbf16> {te.name = "grad.weight", te.grad_of = 2 : i64}, tensor<4x48xbf16> {te.name = "grad.bias", te.grad_of = 3 : i64})
    attributes {te.backward_of = @fwd} {
  %dx = te.grouped_matmul %dy, %w, %m : (tensor<64x48xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>) -> tensor<64x32xbf16>
  %dw = te.grouped_matmul %dy, %x, %m {transpose_a} : (tensor<64x48xbf16>, tensor<64x32xbf16>, tensor<4xi32>) -> tensor<4x48x32xbf16>
  %db = te.fused "grouped_bias_grad"(%dy, %m) : (tensor<64x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16> {
  ^bb0(%g: tensor<64x48xbf16>, %n: tensor<4xi32>):
    %r = te.grouped_bias_grad %g, %n : (tensor<64x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16>
    te.yield %r : tensor<4x48xbf16>
  }
  return %dx, %dw, %db : tensor<64x32xbf16>, tensor<4x48x32xbf16>, tensor<4x48xbf16>
}
)mlir";

/// The plan of `text`, kGroupedModule by default (its kernels emitted, no
/// binaries).
json::Value groupedPlan(llvm::StringRef text = kGroupedModule) {
  MLIRContext context;
  context.loadDialect<te::TEDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(text, ParserConfig(&context));
  EXPECT_TRUE(module);
  if (!module)
    return nullptr;
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

/// A function of a plan with its interface by name and its value types.
struct PlannedFunction {
  const json::Object *fields = nullptr;
  /// te.name (or, in a backward, "forward_arg <i>") -> the entry.
  std::map<std::string, const json::Object *> arguments;
  std::vector<int64_t> results;
  std::map<int64_t, std::string> types;

  int64_t argument(const std::string &name) const {
    return *arguments.at(name)->getInteger("value");
  }
  std::vector<const json::Object *> steps(llvm::StringRef kind) const {
    std::vector<const json::Object *> found;
    for (const json::Value &step : *fields->getArray("steps"))
      if (step.getAsObject()->getString("kind") == kind)
        found.push_back(step.getAsObject());
    return found;
  }
};

PlannedFunction plannedFunction(const json::Value &plan, llvm::StringRef name) {
  PlannedFunction function;
  for (const json::Value &entry : *plan.getAsObject()->getArray("functions"))
    if (entry.getAsObject()->getString("name") == name)
      function.fields = entry.getAsObject();
  EXPECT_NE(function.fields, nullptr) << name.str();
  if (!function.fields)
    return function;
  for (const json::Value &entry : *function.fields->getArray("arguments")) {
    const json::Object &object = *entry.getAsObject();
    std::string key =
        object.getString("te.name")
            ? object.getString("te.name")->str()
            : "forward_arg " +
                  std::to_string(
                      object.getInteger("te.forward_arg").value_or(-1));
    function.arguments[key] = &object;
  }
  for (const json::Value &entry : *function.fields->getArray("results"))
    function.results.push_back(*entry.getAsObject()->getInteger("value"));
  for (const json::Value &value : *function.fields->getArray("values"))
    function.types[*value.getAsObject()->getInteger("id")] =
        value.getAsObject()->getString("type")->str();
  return function;
}

TEST(PlanWriterTest, MSplitsArgumentsLiveOnTheHost) {
  json::Value plan = groupedPlan();
  ASSERT_NE(plan.kind(), json::Value::Null);
  // Host arguments and grouped_gemm steps came with version 5.
  EXPECT_EQ(plan.getAsObject()->getInteger("version"), 5);
  PlannedFunction forward = plannedFunction(plan, "fwd");
  PlannedFunction backward = plannedFunction(plan, "fwd_backward");
  ASSERT_TRUE(forward.fields && backward.fields);
  // m_splits, read by the casts' region and the GEMM in the forward and by
  // the GEMMs and the bias gradient's region in the backward.
  for (auto [function, name] :
       {std::pair{&forward, "m_splits"}, std::pair{&backward, "forward_arg 1"}})
    for (auto &[key, entry] : function->arguments)
      EXPECT_EQ(entry->getBoolean("host"),
                key == name ? std::optional<bool>(true) : std::nullopt)
          << key;
  EXPECT_EQ(forward.types[forward.argument("m_splits")], "tensor<4xi32>");
  // Kernel steps take the argument's value like any other (the runtime
  // passes its device copy).
  std::vector<const json::Object *> kernels = forward.steps("kernel");
  ASSERT_EQ(kernels.size(), 2u);
  auto argsOf = [](const json::Object *step) {
    std::vector<std::pair<int64_t, bool>> args;
    for (const json::Value &arg : *step->getArray("args"))
      args.push_back({*arg.getAsObject()->getInteger("value"),
                      *arg.getAsObject()->getBoolean("zero_before_launch")});
    return args;
  };
  auto xArgs = argsOf(kernels[0]);
  EXPECT_NE(llvm::find(xArgs, std::pair{forward.argument("m_splits"), false}),
            xArgs.end());
  // The x casts' amax (returned) is accumulated: zeroed first.
  EXPECT_NE(llvm::find(xArgs, std::pair{forward.results[2], true}),
            xArgs.end());
  // The stacked weight casts read no m_splits.
  EXPECT_EQ(argsOf(kernels[1]).size(), 4u);
  std::vector<const json::Object *> backwardKernels = backward.steps("kernel");
  ASSERT_EQ(backwardKernels.size(), 1u);
  EXPECT_NE(llvm::find(argsOf(backwardKernels[0]),
                       std::pair{backward.argument("forward_arg 1"), false}),
            argsOf(backwardKernels[0]).end());
}

TEST(PlanWriterTest, GroupedGemmSteps) {
  json::Value plan = groupedPlan();
  ASSERT_NE(plan.kind(), json::Value::Null);
  PlannedFunction forward = plannedFunction(plan, "fwd");
  PlannedFunction backward = plannedFunction(plan, "fwd_backward");
  ASSERT_TRUE(forward.fields && backward.fields);
  EXPECT_TRUE(forward.steps("gemm").empty());

  // FP8 fprop: rows form, TN, per-group scale_inv vectors, the bias.
  std::vector<const json::Object *> fprop = forward.steps("grouped_gemm");
  ASSERT_EQ(fprop.size(), 1u);
  const json::Object &f = *fprop[0];
  EXPECT_EQ(f.getString("op"), "grouped_gemm");
  EXPECT_EQ(f.getString("form"), "rows");
  EXPECT_EQ(f.getBoolean("fp8"), true);
  EXPECT_EQ(f.getBoolean("fast_accum"), true);
  EXPECT_EQ(f.getString("a_scaling"), "tensor");
  EXPECT_EQ(f.getString("b_scaling"), "tensor");
  EXPECT_EQ(f.getInteger("groups"), 4);
  EXPECT_EQ(f.getInteger("m_splits"), forward.argument("m_splits"));
  EXPECT_EQ(f.getInteger("a_scale_inv"), forward.argument("scale_inv_x"));
  EXPECT_EQ(f.getInteger("b_scale_inv"), forward.argument("scale_inv_w"));
  EXPECT_EQ(f.getInteger("bias"), forward.argument("bias"));
  EXPECT_EQ(f.getInteger("out"), forward.results[0]);
  EXPECT_EQ(f.getString("a_type"), "tensor<64x32xf8E4M3FN>");
  EXPECT_EQ(f.getString("b_type"), "tensor<4x48x32xf8E4M3FN>");
  EXPECT_EQ(f.getString("out_type"), "tensor<64x48xbf16>");
  EXPECT_EQ(forward.types[*f.getInteger("a")], "tensor<64x32xf8E4M3FN>");
  EXPECT_EQ(forward.types[*f.getInteger("b")], "tensor<4x48x32xf8E4M3FN>");
  EXPECT_EQ(f.get("transpose_a"), nullptr);
  EXPECT_EQ(f.get("transpose_b"), nullptr);
  // The steps run after the casts that make their operands.
  const json::Array &steps = *forward.fields->getArray("steps");
  EXPECT_EQ(steps.back().getAsObject()->getString("kind"), "grouped_gemm");

  // High precision: dgrad (rows, no transposes, no bias) and wgrad
  // (contraction, transpose_a), in program order.
  std::vector<const json::Object *> gemms = backward.steps("grouped_gemm");
  ASSERT_EQ(gemms.size(), 2u);
  const json::Object &dgrad = *gemms[0], &wgrad = *gemms[1];
  for (const json::Object *step : gemms) {
    EXPECT_EQ(step->getBoolean("fp8"), false);
    EXPECT_EQ(step->get("a_scale_inv"), nullptr);
    EXPECT_EQ(step->get("fast_accum"), nullptr);
    EXPECT_EQ(step->get("a_scaling"), nullptr);
    EXPECT_EQ(step->get("bias"), nullptr);
    EXPECT_EQ(step->getInteger("groups"), 4);
    EXPECT_EQ(step->getInteger("m_splits"), backward.argument("forward_arg 1"));
    EXPECT_EQ(step->getInteger("a"), backward.argument("grad_y"));
  }
  EXPECT_EQ(dgrad.getString("form"), "rows");
  EXPECT_EQ(dgrad.getBoolean("transpose_a"), false);
  EXPECT_EQ(dgrad.getBoolean("transpose_b"), false);
  EXPECT_EQ(dgrad.getInteger("b"), backward.argument("forward_arg 2"));
  EXPECT_EQ(dgrad.getInteger("out"), backward.results[0]);
  EXPECT_EQ(dgrad.getString("out_type"), "tensor<64x32xbf16>");
  EXPECT_EQ(wgrad.getString("form"), "contraction");
  EXPECT_EQ(wgrad.getBoolean("transpose_a"), true);
  EXPECT_EQ(wgrad.getBoolean("transpose_b"), false);
  EXPECT_EQ(wgrad.getInteger("b"), backward.argument("forward_arg 0"));
  EXPECT_EQ(wgrad.getInteger("out"), backward.results[1]);
  EXPECT_EQ(wgrad.getString("out_type"), "tensor<4x48x32xbf16>");
}

/// GroupedLinear's three GEMMs under Float8BlockScaling (HYBRID: dy in
/// E5M2), with the casts te-place-scaling and te-fuse make
/// (docs/grouped-linear.md): x rowwise and transposed in one region, W in
/// 2-D blocks, W^T for dgrad, dy rowwise and transposed.
constexpr const char *kBlockGroupedModule = R"mlir(
func.func @blk(%x: tensor<64x256xbf16> {te.name = "x"},
               %m: tensor<4xi32> {te.name = "m_splits"},
               %w: tensor<4x48x256xbf16> {te.name = "weight"},
               %dy: tensor<64x48xbf16> {te.name = "grad_y"})
    -> (tensor<64x48xbf16>, tensor<4x48x256xbf16>, tensor<64x256xbf16>) {
  %qx:4 = te.fused "grouped_block_quantize"(%x, %m) : (tensor<64x256xbf16>, tensor<4xi32>) -> (tensor<64x256xf8E4M3FN>, tensor<2x64xf32>, tensor<256x64xf8E4M3FN>, tensor<5x256xf32>) {
  ^bb0(%x0: tensor<64x256xbf16>, %m0: tensor<4xi32>):
    %q, %s = te.grouped_block_quantize %x0, %m0 {block_dim = 1 : i64, power_2_scale} : (tensor<64x256xbf16>, tensor<4xi32>) -> (tensor<64x256xf8E4M3FN>, tensor<2x64xf32>)
    %qt, %st = te.grouped_block_quantize %x0, %m0 {block_dim = 1 : i64, transpose, power_2_scale} : (tensor<64x256xbf16>, tensor<4xi32>) -> (tensor<256x64xf8E4M3FN>, tensor<5x256xf32>)
    te.yield %q, %s, %qt, %st : tensor<64x256xf8E4M3FN>, tensor<2x64xf32>, tensor<256x64xf8E4M3FN>, tensor<5x256xf32>
  }
  %qw:4 = te.fused "grouped_block_quantize"(%w) : (tensor<4x48x256xbf16>) -> (tensor<4x48x256xf8E4M3FN>, tensor<4x1x4xf32>, tensor<4x256x48xf8E4M3FN>, tensor<4x2x4xf32>) {
  ^bb0(%w0: tensor<4x48x256xbf16>):
    %q, %s = te.grouped_block_quantize %w0 {block_dim = 2 : i64, power_2_scale} : (tensor<4x48x256xbf16>) -> (tensor<4x48x256xf8E4M3FN>, tensor<4x1x4xf32>)
    %qt, %st = te.grouped_block_quantize %w0 {block_dim = 2 : i64, transpose, power_2_scale} : (tensor<4x48x256xbf16>) -> (tensor<4x256x48xf8E4M3FN>, tensor<4x2x4xf32>)
    te.yield %q, %s, %qt, %st : tensor<4x48x256xf8E4M3FN>, tensor<4x1x4xf32>, tensor<4x256x48xf8E4M3FN>, tensor<4x2x4xf32>
  }
  %y = te.grouped_scaled_matmul %qx#0, %qw#0, %qx#1, %qw#1, %m : (tensor<64x256xf8E4M3FN>, tensor<4x48x256xf8E4M3FN>, tensor<2x64xf32>, tensor<4x1x4xf32>, tensor<4xi32>) -> tensor<64x48xbf16>
  %qdy:4 = te.fused "grouped_block_quantize"(%dy, %m) : (tensor<64x48xbf16>, tensor<4xi32>) -> (tensor<64x48xf8E5M2>, tensor<1x64xf32>, tensor<48x64xf8E5M2>, tensor<5x48xf32>) {
  ^bb0(%g0: tensor<64x48xbf16>, %m1: tensor<4xi32>):
    %q, %s = te.grouped_block_quantize %g0, %m1 {block_dim = 1 : i64, power_2_scale} : (tensor<64x48xbf16>, tensor<4xi32>) -> (tensor<64x48xf8E5M2>, tensor<1x64xf32>)
    %qt, %st = te.grouped_block_quantize %g0, %m1 {block_dim = 1 : i64, transpose, power_2_scale} : (tensor<64x48xbf16>, tensor<4xi32>) -> (tensor<48x64xf8E5M2>, tensor<5x48xf32>)
    te.yield %q, %s, %qt, %st : tensor<64x48xf8E5M2>, tensor<1x64xf32>, tensor<48x64xf8E5M2>, tensor<5x48xf32>
  }
  %dx = te.grouped_scaled_matmul %qdy#0, %qw#2, %qdy#1, %qw#3, %m : (tensor<64x48xf8E5M2>, tensor<4x256x48xf8E4M3FN>, tensor<1x64xf32>, tensor<4x2x4xf32>, tensor<4xi32>) -> tensor<64x256xbf16>
  %dw = te.grouped_scaled_matmul %qdy#2, %qx#2, %qdy#3, %qx#3, %m : (tensor<48x64xf8E5M2>, tensor<256x64xf8E4M3FN>, tensor<5x48xf32>, tensor<5x256xf32>, tensor<4xi32>) -> tensor<4x48x256xbf16>
  return %y, %dw, %dx : tensor<64x48xbf16>, tensor<4x48x256xbf16>, tensor<64x256xbf16>
}
)mlir";

TEST(PlanWriterTest, BlockScaledGroupedGemmSteps) {
  json::Value plan = groupedPlan(kBlockGroupedModule);
  ASSERT_NE(plan.kind(), json::Value::Null);
  // The scalings are new keys of grouped_gemm steps: a runtime before them
  // refuses block scale_inv values (not f32 [G]), so the version stays.
  EXPECT_EQ(plan.getAsObject()->getInteger("version"), 5);
  PlannedFunction function = plannedFunction(plan, "blk");
  ASSERT_TRUE(function.fields);
  EXPECT_EQ(function.arguments.at("m_splits")->getBoolean("host"), true);
  // One kernel a cast input, each reading m_splits where it has segments.
  std::vector<const json::Object *> kernels = function.steps("kernel");
  ASSERT_EQ(kernels.size(), 3u);
  for (const json::Object *kernel : kernels)
    EXPECT_TRUE(kernel->getString("name")->contains("grouped_block_quantize"));

  std::vector<const json::Object *> gemms = function.steps("grouped_gemm");
  ASSERT_EQ(gemms.size(), 3u);
  struct Expected {
    const char *form, *a, *b;
  } expected[] = {{"rows", "block_1d", "block_2d"},
                  {"rows", "block_1d", "block_2d"},
                  {"contraction", "block_1d", "block_1d"}};
  for (auto [step, want] : llvm::zip(gemms, expected)) {
    EXPECT_EQ(step->getString("form"), want.form);
    EXPECT_EQ(step->getBoolean("fp8"), true);
    EXPECT_EQ(step->getString("a_scaling"), want.a);
    EXPECT_EQ(step->getString("b_scaling"), want.b);
    // Block-scaled GEMMs accumulate without fast_accum.
    EXPECT_EQ(step->getBoolean("fast_accum"), false);
    EXPECT_EQ(step->getInteger("m_splits"), function.argument("m_splits"));
  }
  // The scale_inv operands are the block scales the casts wrote.
  EXPECT_EQ(function.types[*gemms[0]->getInteger("a_scale_inv")],
            "tensor<2x64xf32>");
  EXPECT_EQ(function.types[*gemms[0]->getInteger("b_scale_inv")],
            "tensor<4x1x4xf32>");
  EXPECT_EQ(function.types[*gemms[2]->getInteger("a_scale_inv")],
            "tensor<5x48xf32>");
  EXPECT_EQ(function.types[*gemms[2]->getInteger("b_scale_inv")],
            "tensor<5x256xf32>");
}

} // namespace
