//===- GroupedGemmTest.cpp - host arguments and grouped_gemm steps --------===//
//
// GroupedLinear's plan parts without a GPU (docs/grouped-linear.md): a
// hand-written plan whose forward runs a bf16 grouped GEMM with a bias and
// an FP8 one (rows form), and whose backward runs the dgrad (rows), the
// high-precision wgrad and an FP8 wgrad (contraction), all sized by the
// host argument m_splits, parses into the expected steps; every check of
// the parser is broken in turn and its error must name the place and the
// field; the m_splits rules (checkSplits) accept and refuse what the
// contract says; the executor's rules for a host argument (its T and FP8
// rule) come from the steps that read it; and neither m_splits nor a step
// reading it is static (kept between runs), while the weight cast is.
// Float8BlockScaling: the FP8 steps with "a_scaling"/"b_scaling" and block
// scale tensors in dialects/GroupedBlockScaleLayout.h's shapes parse, and
// each of its rules (both or neither block-scaled, 2-D only for the rows
// form's b, never two 2-D, no fast_accum, the scales' shapes, a bias of
// out's element type) is broken in turn; the rows step takes a bias.
//
//===----------------------------------------------------------------------===//
#include "runtime/GroupedGemm.h"
#include "runtime/HostArguments.h"
#include "runtime/Plan.h"
#include "runtime/StaticSteps.h"
#include "tests/runtime/PlanJson.h"

#include "gtest/gtest.h"

#include <functional>
#include <random>

using namespace tejit::runtime;
using namespace tejit::runtime::plantest;
namespace json = llvm::json;

namespace {

// Forward "moe": T = 64 tokens, K = 32, N = 16, G = 4.
//   step 0: a kernel reading x and m_splits (the grouped input cast)
//   step 1: the weight cast (reads the weight and the FP8 state only)
//   step 2: bf16 rows: y = x W_g^T + b_g        ({"kind": "grouped_gemm"})
//   step 3: FP8 rows: y8 = xq Wq_g^T, scales    ({"kind": "gemm", "op"})
// Backward "moe_backward":
//   step 0: bf16 rows dgrad: dx = dy W_g        (b [G, K, N] = [4, 16, 32])
//   step 1: bf16 contraction wgrad: dW_g = dy_g^T x_g (a [T, M], transpose_a)
//   step 2: FP8 contraction: [16, 64] E5M2 x [32, 64] E4M3 -> [4, 16, 32] f32
constexpr const char *kGroupedPlan = R"json({
  "format": "tejit-plan", "version": 5, "arch": "sm_90a",
  "functions": [
    {
      "name": "moe", "arena_bytes": 4096,
      "arguments": [
        {"value": 0, "te.name": "input"},
        {"value": 1, "te.name": "m_splits", "host": true},
        {"value": 2, "te.name": "weight", "te.parameter": true},
        {"value": 3, "te.name": "bias", "te.parameter": true},
        {"value": 4, "te.name": "fp8_meta.fwd.scale_inv"}
      ],
      "results": [
        {"value": 5, "te.name": "output"},
        {"value": 10, "te.name": "output_fp8"}
      ],
      "values": [
        {"id": 0, "type": "tensor<64x32xbf16>", "bytes": 4096,
         "storage": {"arg": 0}},
        {"id": 1, "type": "tensor<4xi32>", "bytes": 16, "storage": {"arg": 1}},
        {"id": 2, "type": "tensor<4x16x32xbf16>", "bytes": 4096,
         "storage": {"arg": 2}},
        {"id": 3, "type": "tensor<4x16xbf16>", "bytes": 128,
         "storage": {"arg": 3}},
        {"id": 4, "type": "tensor<8xf32>", "bytes": 32, "storage": {"arg": 4}},
        {"id": 5, "type": "tensor<64x16xbf16>", "bytes": 2048,
         "storage": {"result": 0}},
        {"id": 6, "type": "tensor<64x32xf8E4M3FN>", "bytes": 2048,
         "storage": {"arena_offset": 0}},
        {"id": 7, "type": "tensor<4x16x32xf8E4M3FN>", "bytes": 2048,
         "storage": {"arena_offset": 2048}},
        {"id": 8, "type": "tensor<4xf32>", "bytes": 16,
         "storage": {"view_of": 4, "byte_offset": 0}},
        {"id": 9, "type": "tensor<4xf32>", "bytes": 16,
         "storage": {"view_of": 4, "byte_offset": 16}},
        {"id": 10, "type": "tensor<64x16xbf16>", "bytes": 2048,
         "storage": {"result": 1}}
      ],
      "steps": [
        {"kind": "kernel", "name": "moe_grouped_quantize_0",
         "binary": "kernels/moe_grouped_quantize_0.cubin",
         "grid": [4, 1, 1], "block": [128, 1, 1], "shared_bytes": 0,
         "args": [
           {"value": 0, "output": false, "zero_before_launch": false},
           {"value": 1, "output": false, "zero_before_launch": false},
           {"value": 8, "output": false, "zero_before_launch": false},
           {"value": 6, "output": true, "zero_before_launch": false}
         ]},
        {"kind": "kernel", "name": "moe_grouped_quantize_1",
         "binary": "kernels/moe_grouped_quantize_1.cubin",
         "grid": [4, 1, 1], "block": [128, 1, 1], "shared_bytes": 0,
         "args": [
           {"value": 2, "output": false, "zero_before_launch": false},
           {"value": 9, "output": false, "zero_before_launch": false},
           {"value": 7, "output": true, "zero_before_launch": false}
         ]},
        {"kind": "grouped_gemm", "form": "rows", "a": 0, "b": 2,
         "m_splits": 1, "out": 5, "a_type": "tensor<64x32xbf16>",
         "b_type": "tensor<4x16x32xbf16>", "out_type": "tensor<64x16xbf16>",
         "groups": 4, "bias": 3, "transpose_a": false, "transpose_b": true},
        {"kind": "gemm", "op": "grouped_gemm", "form": "rows", "a": 6, "b": 7,
         "m_splits": 1, "out": 10, "a_type": "tensor<64x32xf8E4M3FN>",
         "b_type": "tensor<4x16x32xf8E4M3FN>",
         "out_type": "tensor<64x16xbf16>", "groups": 4, "fp8": true,
         "a_scale_inv": 8, "b_scale_inv": 9, "fast_accum": true}
      ]
    },
    {
      "name": "moe_backward", "backward_of": "moe", "arena_bytes": 11280,
      "arguments": [
        {"value": 0, "te.name": "grad.output"},
        {"value": 1, "te.forward_arg": 0},
        {"value": 2, "te.forward_arg": 1, "host": true},
        {"value": 3, "te.forward_arg": 2}
      ],
      "results": [
        {"value": 4, "te.name": "grad.input", "te.grad_of": 0},
        {"value": 5, "te.name": "grad.weight", "te.grad_of": 2}
      ],
      "values": [
        {"id": 0, "type": "tensor<64x16xbf16>", "bytes": 2048,
         "storage": {"arg": 0}},
        {"id": 1, "type": "tensor<64x32xbf16>", "bytes": 4096,
         "storage": {"arg": 1}},
        {"id": 2, "type": "tensor<4xi32>", "bytes": 16, "storage": {"arg": 2}},
        {"id": 3, "type": "tensor<4x16x32xbf16>", "bytes": 4096,
         "storage": {"arg": 3}},
        {"id": 4, "type": "tensor<64x32xbf16>", "bytes": 4096,
         "storage": {"result": 0}},
        {"id": 5, "type": "tensor<4x16x32xbf16>", "bytes": 4096,
         "storage": {"result": 1}},
        {"id": 6, "type": "tensor<16x64xf8E5M2>", "bytes": 1024,
         "storage": {"arena_offset": 0}},
        {"id": 7, "type": "tensor<32x64xf8E4M3FN>", "bytes": 2048,
         "storage": {"arena_offset": 1024}},
        {"id": 8, "type": "tensor<4xf32>", "bytes": 16,
         "storage": {"arena_offset": 3072}},
        {"id": 9, "type": "tensor<4x16x32xf32>", "bytes": 8192,
         "storage": {"arena_offset": 3088}}
      ],
      "steps": [
        {"kind": "grouped_gemm", "form": "rows", "a": 0, "b": 3,
         "m_splits": 2, "out": 4, "a_type": "tensor<64x16xbf16>",
         "b_type": "tensor<4x16x32xbf16>", "out_type": "tensor<64x32xbf16>",
         "groups": 4, "transpose_a": false, "transpose_b": false},
        {"kind": "grouped_gemm", "form": "contraction", "a": 0, "b": 1,
         "m_splits": 2, "out": 5, "a_type": "tensor<64x16xbf16>",
         "b_type": "tensor<64x32xbf16>", "out_type": "tensor<4x16x32xbf16>",
         "groups": 4, "transpose_a": true, "transpose_b": false},
        {"kind": "grouped_gemm", "form": "contraction", "a": 6, "b": 7,
         "m_splits": 2, "out": 9, "a_type": "tensor<16x64xf8E5M2>",
         "b_type": "tensor<32x64xf8E4M3FN>",
         "out_type": "tensor<4x16x32xf32>", "groups": 4, "fp8": true,
         "a_scale_inv": 8, "b_scale_inv": 8, "fast_accum": false}
      ]
    }
  ]
})json";

json::Value basePlan() { return parseJson(kGroupedPlan, "kGroupedPlan"); }

Plan parsed(const json::Value &document) {
  llvm::Expected<Plan> plan = parsePlan(document);
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  return plan ? std::move(*plan) : Plan();
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

TEST(GroupedPlanTest, HostArgumentsAndGroupedStepsParse) {
  Plan plan = parsed(basePlan());
  ASSERT_EQ(plan.functions.size(), 2u);
  const FunctionPlan &forward = plan.functions[0];
  const FunctionPlan &backward = plan.functions[1];

  EXPECT_TRUE(forward.arguments[1].host);
  EXPECT_FALSE(forward.arguments[0].host);
  EXPECT_FALSE(forward.arguments[2].host);
  EXPECT_EQ(forward.hostArguments(), std::vector<size_t>{1});
  EXPECT_TRUE(backward.arguments[2].host);
  EXPECT_EQ(backward.arguments[2].forwardArg, 1);
  EXPECT_EQ(backward.hostArguments(), std::vector<size_t>{2});

  ASSERT_EQ(forward.steps.size(), 4u);
  const auto *bf16 = std::get_if<GroupedGemmStep>(&forward.steps[2]);
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(bf16->form, GroupedGemmStep::Form::Rows);
  EXPECT_EQ(bf16->a, 0);
  EXPECT_EQ(bf16->b, 2);
  EXPECT_EQ(bf16->mSplits, 1);
  EXPECT_EQ(bf16->out, 5);
  EXPECT_EQ(bf16->groups, 4);
  EXPECT_EQ(bf16->bias, 3);
  EXPECT_FALSE(bf16->fp8);
  EXPECT_FALSE(bf16->transposeA);
  EXPECT_TRUE(bf16->transposeB);
  EXPECT_FALSE(bf16->aScaleInv);
  EXPECT_EQ(bf16->aType.shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(bf16->bType.shape, (std::vector<int64_t>{4, 16, 32}));
  EXPECT_EQ(bf16->outType.element, ElementType::BF16);
  EXPECT_EQ(bf16->tokens(), 64);

  // "kind": "gemm" with "op": "grouped_gemm" is the same step.
  const auto *fp8 = std::get_if<GroupedGemmStep>(&forward.steps[3]);
  ASSERT_NE(fp8, nullptr);
  EXPECT_TRUE(fp8->fp8);
  EXPECT_TRUE(fp8->fastAccum);
  EXPECT_EQ(fp8->aScaleInv, 8);
  EXPECT_EQ(fp8->bScaleInv, 9);
  EXPECT_FALSE(fp8->bias);
  EXPECT_EQ(fp8->aType.element, ElementType::F8E4M3);
  EXPECT_EQ(fp8->tokens(), 64);

  ASSERT_EQ(backward.steps.size(), 3u);
  const auto *dgrad = std::get_if<GroupedGemmStep>(&backward.steps[0]);
  ASSERT_NE(dgrad, nullptr);
  EXPECT_EQ(dgrad->form, GroupedGemmStep::Form::Rows);
  EXPECT_FALSE(dgrad->transposeB);
  const auto *wgrad = std::get_if<GroupedGemmStep>(&backward.steps[1]);
  ASSERT_NE(wgrad, nullptr);
  EXPECT_EQ(wgrad->form, GroupedGemmStep::Form::Contraction);
  EXPECT_TRUE(wgrad->transposeA);
  EXPECT_EQ(wgrad->tokens(), 64);
  const auto *fp8Wgrad = std::get_if<GroupedGemmStep>(&backward.steps[2]);
  ASSERT_NE(fp8Wgrad, nullptr);
  EXPECT_EQ(fp8Wgrad->form, GroupedGemmStep::Form::Contraction);
  EXPECT_TRUE(fp8Wgrad->fp8);
  EXPECT_FALSE(fp8Wgrad->fastAccum);
  EXPECT_EQ(fp8Wgrad->aType.element, ElementType::F8E5M2);
  // The FP8 contraction's T is a's second dimension.
  EXPECT_EQ(fp8Wgrad->tokens(), 64);
  EXPECT_EQ(groupedFormName(fp8Wgrad->form), "contraction");
}

TEST(GroupedPlanTest, StepValuesIncludeMSplits) {
  Plan plan = parsed(basePlan());
  std::vector<std::pair<int64_t, bool>> seen;
  forEachStepValue(plan.functions[0].steps[3], [&](int64_t value, bool out) {
    seen.push_back({value, out});
  });
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, bool>>{{1, false},
                                                         {6, false},
                                                         {7, false},
                                                         {8, false},
                                                         {9, false},
                                                         {10, true}}));
  seen.clear();
  forEachStepValue(plan.functions[0].steps[2], [&](int64_t value, bool out) {
    seen.push_back({value, out});
  });
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen,
            (std::vector<std::pair<int64_t, bool>>{
                {0, false}, {1, false}, {2, false}, {3, false}, {5, true}}));
}

TEST(GroupedPlanTest, HighPrecisionContractionTakesEveryLayout) {
  // a [M, T] (no transpose_a) and b [N, T] (transpose_b): column ranges.
  json::Value document = basePlan();
  json::Object &wgrad = step(document, 1, 1);
  wgrad["a"] = 6;
  wgrad["b"] = 7;
  entry(document, 1, "values", 6)["type"] = "tensor<16x64xbf16>";
  entry(document, 1, "values", 6)["bytes"] = 2048;
  entry(document, 1, "values", 6)["storage"] =
      json::Object{{"arena_offset", 3088}};
  entry(document, 1, "values", 7)["type"] = "tensor<32x64xbf16>";
  entry(document, 1, "values", 7)["bytes"] = 4096;
  entry(document, 1, "values", 7)["storage"] =
      json::Object{{"arena_offset", 5136}};
  wgrad["a_type"] = "tensor<16x64xbf16>";
  wgrad["b_type"] = "tensor<32x64xbf16>";
  wgrad["transpose_a"] = false;
  wgrad["transpose_b"] = true;
  // The FP8 step read those values: drop it.
  function(document, 1).getArray("steps")->pop_back();
  Plan plan = parsed(document);
  ASSERT_EQ(plan.functions.size(), 2u);
  const auto &step = std::get<GroupedGemmStep>(plan.functions[1].steps[1]);
  EXPECT_FALSE(step.transposeA);
  EXPECT_TRUE(step.transposeB);
  EXPECT_EQ(step.tokens(), 64);
}

TEST(GroupedPlanTest, ContractionAccumulates) {
  // fuse_wgrad_accumulation: the FP8 wgrad adds its products to a value of
  // out's type (here out itself, in place).
  json::Value document = basePlan();
  step(document, 1, 2)["accumulate"] = 9;
  Plan plan = parsed(document);
  ASSERT_EQ(plan.functions.size(), 2u);
  const auto &step = std::get<GroupedGemmStep>(plan.functions[1].steps[2]);
  EXPECT_EQ(step.accumulate, std::optional<int64_t>(9));
  bool read = false;
  forEachStepValue(plan.functions[1].steps[2], [&](int64_t value, bool out) {
    read |= value == 9 && !out;
  });
  EXPECT_TRUE(read) << "the accumulated value is not among the step's reads";
}

//===----------------------------------------------------------------------===//
// Each check, broken
//===----------------------------------------------------------------------===//

std::vector<ErrorCase> errorCases() {
  using V = json::Value &;
  const std::string moe = "plan: function 'moe'";
  const std::string back = "plan: function 'moe_backward'";
  const std::string bf16Step = moe + ", step 2 (grouped_gemm): ";
  const std::string fp8Step = moe + ", step 3 (grouped_gemm): ";
  const std::string wgrad = back + ", step 1 (grouped_gemm): ";
  const std::string fp8Wgrad = back + ", step 2 (grouped_gemm): ";
  return {
      // What a contraction step accumulates into.
      {"AccumulateOnRows",
       [](V p) { step(p, 1, 0)["accumulate"] = 4; },
       {back + ", step 0 (grouped_gemm): 'accumulate' is given for a grouped "
               "GEMM of form \"rows\""}},
      {"AccumulateOtherType",
       [](V p) { step(p, 1, 2)["accumulate"] = 5; },
       {fp8Wgrad + "'accumulate' refers to value 5 of type "
                   "tensor<4x16x32xbf16>; it must have out's type "
                   "tensor<4x16x32xf32>"}},
      // Host arguments.
      {"HostNotBoolean",
       [](V p) { entry(p, 0, "arguments", 1)["host"] = 1; },
       {moe + ", argument 1: 'host' must be a boolean"}},
      {"HostOnResult",
       [](V p) { entry(p, 0, "results", 0)["host"] = true; },
       {moe + ", result 0: 'host' is set on a result"}},
      {"HostOnParameter",
       [](V p) { entry(p, 0, "arguments", 2)["host"] = true; },
       {moe + ", argument 2: 'host' is set on a parameter"}},
      {"HostNotI32Vector",
       [](V p) { entry(p, 0, "arguments", 0)["host"] = true; },
       {moe + ", argument 0: 'host' is set on value 0 of type "
              "tensor<64x32xbf16>; a host argument is an i32 vector"}},
      {"HostWritten",
       [](V p) {
         (*(*step(p, 0, 0).getArray("args"))[1].getAsObject())["output"] = true;
       },
       {moe + ", step 0: writes value 1 of argument 1, a host argument"}},
      {"HostUpdated",
       [](V p) { entry(p, 0, "results", 1)["te.updates_arg"] = 1; },
       {moe + ", result 1: 'te.updates_arg' names argument 1, a host "
              "argument"}},
      {"ForwardArgHostMismatch",
       [](V p) {
         entry(p, 1, "arguments", 2).erase("host");
         function(p, 1)["steps"] = json::Array{};
       },
       {back + ", argument 2: 'te.forward_arg' is 1, a host argument of "
               "'moe', but the argument is not"}},

      // The step's kind and fields.
      {"OpOnKernel",
       [](V p) { step(p, 0, 0)["op"] = "grouped_gemm"; },
       {moe + ", step 0: 'op' is the string \"grouped_gemm\" in a step of "
              "kind \"kernel\""}},
      {"OpUnknown",
       [](V p) { step(p, 0, 3)["op"] = "batched_gemm"; },
       {moe + ", step 3: 'op' is the string \"batched_gemm\""}},
      {"FormMissing",
       [](V p) { step(p, 0, 2).erase("form"); },
       {bf16Step + "'form' is missing"}},
      {"FormUnknown",
       [](V p) { step(p, 0, 2)["form"] = "columns"; },
       {bf16Step + "'form' is \"columns\"; expected \"rows\" or "
                   "\"contraction\""}},
      {"OperandTypeDisagrees",
       [](V p) { step(p, 0, 2)["a_type"] = "tensor<64x32xf16>"; },
       {bf16Step + "'a_type' is tensor<64x32xf16> but 'a' (value 0) is "
                   "tensor<64x32xbf16>"}},
      {"MSplitsMissing",
       [](V p) { step(p, 0, 2).erase("m_splits"); },
       {bf16Step + "'m_splits' is missing"}},
      {"MSplitsNotHost",
       [](V p) { step(p, 0, 2)["m_splits"] = 3; },
       {bf16Step + "'m_splits' is value 3, which is not a host argument's "
                   "value"}},
      {"GroupsMissing",
       [](V p) { step(p, 0, 2).erase("groups"); },
       {bf16Step + "'groups' is missing"}},
      {"GroupsZero",
       [](V p) { step(p, 0, 2)["groups"] = 0; },
       {bf16Step + "'groups' is 0; a grouped GEMM has at least 1 group"}},
      {"GroupsDisagreeWithMSplits",
       [](V p) { step(p, 0, 2)["groups"] = 3; },
       {bf16Step + "'m_splits' is value 1 of type tensor<4xi32>, expected "
                   "tensor<3xi32>"}},

      // Rows form shapes.
      {"RowsTransposeA",
       [](V p) { step(p, 0, 2)["transpose_a"] = true; },
       {bf16Step + "'transpose_a' is true, but a grouped GEMM of form "
                   "\"rows\" takes a as [T, K]"}},
      {"RowsBNotStacked",
       [](V p) {
         step(p, 0, 2)["b"] = 0;
         step(p, 0, 2)["b_type"] = "tensor<64x32xbf16>";
       },
       {bf16Step + "'b_type' is tensor<64x32xbf16>, expected [G, N, K]"}},
      {"RowsBGroupsDisagree",
       [](V p) {
         step(p, 1, 0)["groups"] = 2;
         // The backward is parsed (and fails) before its interface is
         // compared with the forward's.
         entry(p, 1, "values", 2)["type"] = "tensor<2xi32>";
         entry(p, 1, "values", 2)["bytes"] = 8;
       },
       {back + ", step 0 (grouped_gemm): 'b_type' is tensor<4x16x32xbf16>, "
               "expected [G, K, N] with G = 2"}},
      {"RowsKDisagrees",
       [](V p) { step(p, 0, 2)["transpose_b"] = false; },
       {bf16Step + "'b_type' is tensor<4x16x32xbf16>, expected [G, K, N] "
                   "with G = 4 ('groups') and K = 32"}},
      {"RowsOut",
       [](V p) {
         step(p, 0, 2)["out"] = 0;
         step(p, 0, 2)["out_type"] = "tensor<64x32xbf16>";
       },
       {bf16Step + "'out_type' is tensor<64x32xbf16>, expected [T, N] = "
                   "[64, 16]"}},
      {"BiasShape",
       [](V p) { step(p, 0, 2)["bias"] = 9; },
       {bf16Step + "'bias' refers to value 9 of type tensor<4xf32>, expected "
                   "[G, N] = [4, 16]"}},
      {"BiasOnContraction",
       [](V p) { step(p, 1, 1)["bias"] = 0; },
       {wgrad + "'bias' is given for a grouped GEMM of form "
                "\"contraction\""}},
      {"FP8OutputType",
       [](V p) {
         step(p, 0, 3)["out"] = 6;
         step(p, 0, 3)["out_type"] = "tensor<64x32xf8E4M3FN>";
       },
       {fp8Step + "'out_type' is tensor<64x32xf8E4M3FN>; a grouped GEMM "
                  "writes bf16, f16 or f32"}},

      // FP8.
      {"FP8NotSaid",
       [](V p) { step(p, 0, 3).erase("fp8"); },
       {fp8Step + "'fp8' is not true, but the operands are FP8"}},
      {"FP8HighPrecisionOperand",
       [](V p) {
         step(p, 0, 3)["a"] = 0;
         step(p, 0, 3)["a_type"] = "tensor<64x32xbf16>";
       },
       {fp8Step + "'a_type' is tensor<64x32xbf16>, but an FP8 grouped GEMM "
                  "('fp8': true) takes FP8 operands"}},
      {"FP8TwoE5M2",
       [](V p) {
         entry(p, 1, "values", 7)["type"] = "tensor<32x64xf8E5M2>";
         step(p, 1, 2)["b_type"] = "tensor<32x64xf8E5M2>";
       },
       {fp8Wgrad + "'b_type' is E5M2 like 'a_type'"}},
      {"FP8Transpose",
       [](V p) { step(p, 0, 3)["transpose_b"] = true; },
       {fp8Step + "'transpose_b' is true for an FP8 grouped GEMM, which is "
                  "TN"}},
      {"FP8ScaleMissing",
       [](V p) { step(p, 0, 3).erase("a_scale_inv"); },
       {fp8Step + "'a_scale_inv' is missing; an FP8 grouped GEMM needs both "
                  "scale_inv vectors"}},
      {"FP8ScaleNotPerGroup",
       [](V p) { step(p, 0, 3)["b_scale_inv"] = 4; },
       {fp8Step + "'b_scale_inv' refers to value 4 of type tensor<8xf32>, "
                  "expected tensor<4xf32>"}},
      {"FP8FastAccumNotBoolean",
       [](V p) { step(p, 0, 3)["fast_accum"] = "yes"; },
       {fp8Step + "'fast_accum' must be a boolean"}},
      {"FP8BiasType",
       [](V p) { step(p, 0, 3)["bias"] = 9; },
       {fp8Step + "'bias' refers to value 9 of type tensor<4xf32>, expected "
                  "[G, N] = [4, 16] of bf16 or f16"}},

      // High precision.
      {"HighPrecisionScale",
       [](V p) { step(p, 0, 2)["a_scale_inv"] = 8; },
       {bf16Step + "'a_scale_inv' is given for a grouped GEMM that is not "
                   "FP8"}},
      {"HighPrecisionFastAccum",
       [](V p) { step(p, 0, 2)["fast_accum"] = true; },
       {bf16Step + "'fast_accum' is true for a grouped GEMM that is not "
                   "FP8"}},
      {"HighPrecisionMixedOperands",
       [](V p) {
         step(p, 1, 1)["b"] = 9;
         step(p, 1, 1)["b_type"] = "tensor<4x16x32xf32>";
       },
       {wgrad + "'b_type' is tensor<4x16x32xf32> and 'a_type' "
                "tensor<64x16xbf16>; a grouped GEMM takes two bf16, f16 or "
                "f32 operands of one type"}},
      {"HighPrecisionOutType",
       [](V p) {
         entry(p, 0, "values", 5)["type"] = "tensor<64x16xf16>";
         step(p, 0, 2)["out_type"] = "tensor<64x16xf16>";
       },
       {bf16Step + "'out_type' is tensor<64x16xf16>; it must be the "
                   "operands' type or f32"}},
      {"TransposeNotBoolean",
       [](V p) { step(p, 1, 1)["transpose_a"] = 1; },
       {wgrad + "'transpose_a' must be a boolean"}},

      // Contraction form shapes.
      {"ContractionTDisagrees",
       [](V p) {
         step(p, 1, 1)["b"] = 3;
         step(p, 1, 1)["b_type"] = "tensor<4x16x32xbf16>";
       },
       {wgrad + "'b_type' is tensor<4x16x32xbf16>, expected [T, N] with T = "
                "64 (from a)"}},
      {"ContractionWithoutTransposeA",
       [](V p) { step(p, 1, 1)["transpose_a"] = false; },
       {wgrad + "'b_type' is tensor<64x32xbf16>, expected [T, N] with T = "
                "16"}},
      {"ContractionOut",
       [](V p) {
         step(p, 1, 1)["out"] = 4;
         step(p, 1, 1)["out_type"] = "tensor<64x32xbf16>";
       },
       {wgrad + "'out_type' is tensor<64x32xbf16>, expected [G, M, N] = [4, "
                "16, 32]"}},
      {"FP8ContractionBNotTokenMajor",
       [](V p) {
         step(p, 1, 2)["b"] = 1;
         step(p, 1, 2)["b_type"] = "tensor<64x32xbf16>";
       },
       {fp8Wgrad + "'b_type' is tensor<64x32xbf16>, but an FP8 grouped "
                   "GEMM"}},
      {"FP8ContractionShape",
       [](V p) {
         entry(p, 1, "values", 7)["type"] = "tensor<64x32xf8E4M3FN>";
         step(p, 1, 2)["b_type"] = "tensor<64x32xf8E4M3FN>";
       },
       {fp8Wgrad + "'b_type' is tensor<64x32xf8E4M3FN>, expected [N, T] "
                   "with T = 64 (from a) for a grouped GEMM of form "
                   "\"contraction\" (FP8, TN)"}},
  };
}

class GroupedPlanErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(GroupedPlanErrorTest, NamesTheProblem) {
  expectRefused(basePlan(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Checks, GroupedPlanErrorTest,
                         ::testing::ValuesIn(errorCases()), errorCaseName);

//===----------------------------------------------------------------------===//
// Float8BlockScaling (docs/grouped-linear.md, session 28)
//===----------------------------------------------------------------------===//

/// The base plan with its FP8 GEMMs block-scaled: the forward's rows step
/// (a [64, 32] E4M3, b [4, 16, 32]) takes a's segments scales [1, 64] and
/// b's 2-D stacked scales [4, 1, 4] (values 11 and 13; value 12 holds b's
/// 1-D scales [4, 1, 16]); the backward's contraction (a [16, 64], b
/// [32, 64]) takes transposed segments scales [ceil(64/128) + 4, pad4(16)]
/// = [5, 16] and [5, 32] (values 10 and 11). Value 14 is an f16 bias
/// [4, 16] (not out's bf16).
json::Value blockPlan() {
  json::Value document = basePlan();
  auto addValue = [&](size_t fn, int64_t id, const char *type, int64_t bytes,
                      int64_t offset) {
    function(document, fn)
        .getArray("values")
        ->push_back(
            json::Object{{"id", id},
                         {"type", type},
                         {"bytes", bytes},
                         {"storage", json::Object{{"arena_offset", offset}}}});
  };
  function(document, 0)["arena_bytes"] = 8192;
  addValue(0, 11, "tensor<1x64xf32>", 256, 4096);
  addValue(0, 12, "tensor<4x1x16xf32>", 256, 4352);
  addValue(0, 13, "tensor<4x1x4xf32>", 64, 4608);
  addValue(0, 14, "tensor<4x16xf16>", 128, 4672);
  json::Object &fprop = step(document, 0, 3);
  fprop["a_scaling"] = "block_1d";
  fprop["b_scaling"] = "block_2d";
  fprop["a_scale_inv"] = 11;
  fprop["b_scale_inv"] = 13;
  fprop["fast_accum"] = false;
  function(document, 1)["arena_bytes"] = 12240;
  addValue(1, 10, "tensor<5x16xf32>", 320, 11280);
  addValue(1, 11, "tensor<5x32xf32>", 640, 11600);
  json::Object &wgrad = step(document, 1, 2);
  wgrad["a_scaling"] = "block_1d";
  wgrad["b_scaling"] = "block_1d";
  wgrad["a_scale_inv"] = 10;
  wgrad["b_scale_inv"] = 11;
  return document;
}

TEST(GroupedBlockPlanTest, BlockScaledStepsParse) {
  Plan plan = parsed(blockPlan());
  ASSERT_EQ(plan.functions.size(), 2u);
  const auto &fprop = std::get<GroupedGemmStep>(plan.functions[0].steps[3]);
  EXPECT_TRUE(fprop.blockScaled());
  EXPECT_EQ(fprop.aScaling, GemmScaling::Block1D);
  EXPECT_EQ(fprop.bScaling, GemmScaling::Block2D);
  EXPECT_EQ(fprop.aScaleInv, 11);
  EXPECT_EQ(fprop.bScaleInv, 13);
  EXPECT_FALSE(fprop.fastAccum);
  EXPECT_EQ(groupedScaleType(fprop, false).shape,
            (std::vector<int64_t>{1, 64}));
  EXPECT_EQ(groupedScaleType(fprop, true).shape,
            (std::vector<int64_t>{4, 1, 4}));
  const auto &wgrad = std::get<GroupedGemmStep>(plan.functions[1].steps[2]);
  EXPECT_TRUE(wgrad.blockScaled());
  EXPECT_EQ(wgrad.aScaling, GemmScaling::Block1D);
  EXPECT_EQ(wgrad.bScaling, GemmScaling::Block1D);
  EXPECT_EQ(wgrad.aScaleInv, 10);
  EXPECT_EQ(wgrad.bScaleInv, 11);
  // The scales are among the step's reads.
  std::vector<std::pair<int64_t, bool>> seen;
  forEachStepValue(plan.functions[1].steps[2], [&](int64_t value, bool out) {
    seen.push_back({value, out});
  });
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, bool>>{{2, false},
                                                         {6, false},
                                                         {7, false},
                                                         {9, true},
                                                         {10, false},
                                                         {11, false}}));
  // Splits stay multiples of 16 (FP8).
  std::vector<HostArgumentRule> rules = hostArgumentRules(plan.functions[0]);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_TRUE(rules[0].fp8);
}

TEST(GroupedBlockPlanTest, AbsentScalingsArePerTensor) {
  Plan plan = parsed(basePlan());
  ASSERT_EQ(plan.functions.size(), 2u);
  const auto &fprop = std::get<GroupedGemmStep>(plan.functions[0].steps[3]);
  EXPECT_EQ(fprop.aScaling, GemmScaling::Tensor);
  EXPECT_EQ(fprop.bScaling, GemmScaling::Tensor);
  EXPECT_FALSE(fprop.blockScaled());
  EXPECT_EQ(groupedScaleType(fprop, true).shape, std::vector<int64_t>{4});
  // "tensor" spelled out is the same.
  json::Value document = basePlan();
  step(document, 0, 3)["a_scaling"] = "tensor";
  step(document, 0, 3)["b_scaling"] = "tensor";
  Plan spelled = parsed(document);
  ASSERT_EQ(spelled.functions.size(), 2u);
  EXPECT_FALSE(
      std::get<GroupedGemmStep>(spelled.functions[0].steps[3]).blockScaled());
}

TEST(GroupedBlockPlanTest, RowsBTakesOneDimensionalBlocks) {
  json::Value document = blockPlan();
  step(document, 0, 3)["b_scaling"] = "block_1d";
  step(document, 0, 3)["b_scale_inv"] = 12;
  Plan plan = parsed(document);
  ASSERT_EQ(plan.functions.size(), 2u);
  const auto &fprop = std::get<GroupedGemmStep>(plan.functions[0].steps[3]);
  EXPECT_EQ(fprop.bScaling, GemmScaling::Block1D);
  EXPECT_EQ(fprop.bScaleInv, 12);
}

// cuBLASLt's block-scaled GEMMs take no bias epilogue, but the runtime
// adds a bias of out's type as C (GroupedGemm.cpp): the rows step takes
// the forward's bf16 bias.
TEST(GroupedBlockPlanTest, RowsTakesABiasOfOutsType) {
  json::Value document = blockPlan();
  step(document, 0, 3)["bias"] = 3;
  Plan plan = parsed(document);
  ASSERT_EQ(plan.functions.size(), 2u);
  const auto &fprop = std::get<GroupedGemmStep>(plan.functions[0].steps[3]);
  EXPECT_TRUE(fprop.blockScaled());
  EXPECT_EQ(fprop.bias, 3);
  llvm::Expected<GroupedGemm> grouped =
      GroupedGemm::create(fprop, plan.functions[0]);
  EXPECT_TRUE(bool(grouped)) << llvm::toString(grouped.takeError());
}

std::vector<ErrorCase> blockErrorCases() {
  using V = json::Value &;
  const std::string moe = "plan: function 'moe'";
  const std::string fp8Step = moe + ", step 3 (grouped_gemm): ";
  const std::string fp8Wgrad =
      "plan: function 'moe_backward', step 2 (grouped_gemm): ";
  return {
      {"BlockOnlyA",
       [](V p) { step(p, 0, 3).erase("b_scaling"); },
       {fp8Step + "'b_scaling' is \"tensor\", but 'a_scaling' is "
                  "\"block_1d\": both operands are block-scaled or neither"}},
      {"BlockOnlyB",
       [](V p) { step(p, 1, 2)["a_scaling"] = "tensor"; },
       {fp8Wgrad + "'a_scaling' is \"tensor\", but 'b_scaling' is "
                   "\"block_1d\": both operands are block-scaled or "
                   "neither"}},
      {"BlockTwo2D",
       [](V p) { step(p, 0, 3)["a_scaling"] = "block_2d"; },
       {fp8Step + "'b_scaling' is \"block_2d\" like 'a_scaling'; cuBLASLt has "
                  "no GEMM of two 2-D block-scaled operands"}},
      {"Block2DOnRowsA",
       [](V p) {
         step(p, 0, 3)["a_scaling"] = "block_2d";
         step(p, 0, 3)["b_scaling"] = "block_1d";
       },
       {fp8Step + "'a_scaling' is \"block_2d\", but only b of a grouped GEMM "
                  "of form \"rows\" (the stacked weights) takes 2-D blocks"}},
      {"Block2DOnContractionB",
       [](V p) { step(p, 1, 2)["b_scaling"] = "block_2d"; },
       {fp8Wgrad + "'b_scaling' is \"block_2d\", but only b of a grouped "
                   "GEMM of form \"rows\""}},
      {"Block2DOnContractionA",
       [](V p) { step(p, 1, 2)["a_scaling"] = "block_2d"; },
       {fp8Wgrad + "'a_scaling' is \"block_2d\", but only b"}},
      {"BlockFastAccum",
       [](V p) { step(p, 0, 3)["fast_accum"] = true; },
       {fp8Step + "'fast_accum' is true for a block-scaled grouped GEMM, "
                  "which accumulates without it"}},
      {"BlockBiasOtherType",
       [](V p) { step(p, 0, 3)["bias"] = 14; },
       {fp8Step + "'bias' is f16; a block-scaled grouped GEMM adds its "
                  "bias as C (beta = 1), which must have out's element type "
                  "bf16"}},
      {"BlockScalingUnknown",
       [](V p) { step(p, 0, 3)["a_scaling"] = "block_3d"; },
       {fp8Step + "'a_scaling' is \"block_3d\"; expected \"tensor\", "
                  "\"block_1d\" or \"block_2d\""}},
      {"BlockScalingNotString",
       [](V p) { step(p, 0, 3)["b_scaling"] = 2; },
       {fp8Step + "'b_scaling' must be a string"}},
      {"BlockScalingOnHighPrecision",
       [](V p) { step(p, 0, 2)["a_scaling"] = "block_1d"; },
       {moe + ", step 2 (grouped_gemm): 'a_scaling' is given for a grouped "
              "GEMM that is not FP8"}},
      {"BlockRowsAScalesPerTensor",
       [](V p) { step(p, 0, 3)["a_scale_inv"] = 8; },
       {fp8Step + "'a_scale_inv' refers to value 8 of type tensor<4xf32>, "
                  "expected tensor<1x64xf32> (the block_1d scales of "
                  "tensor<64x32xf8E4M3FN> cast in row segments"}},
      {"BlockRowsBScalesOtherDim",
       [](V p) { step(p, 0, 3)["b_scale_inv"] = 12; },
       {fp8Step + "'b_scale_inv' refers to value 12 of type "
                  "tensor<4x1x16xf32>, expected tensor<4x1x4xf32> (the "
                  "block_2d scales of tensor<4x16x32xf8E4M3FN> cast per "
                  "group"}},
      {"BlockRowsB1DScalesOf2D",
       [](V p) { step(p, 0, 3)["b_scaling"] = "block_1d"; },
       {fp8Step + "'b_scale_inv' refers to value 13 of type "
                  "tensor<4x1x4xf32>, expected tensor<4x1x16xf32>"}},
      {"BlockContractionScales",
       [](V p) { step(p, 1, 2)["a_scale_inv"] = 11; },
       {fp8Wgrad + "'a_scale_inv' refers to value 11 of type "
                   "tensor<5x32xf32>, expected tensor<5x16xf32> (the "
                   "block_1d scales of tensor<16x64xf8E5M2> cast transposed "
                   "in token segments"}},
      {"BlockScaleMissing",
       [](V p) { step(p, 1, 2).erase("b_scale_inv"); },
       {fp8Wgrad + "'b_scale_inv' is missing"}},
      {"PerTensorWithBlockScales",
       [](V p) {
         step(p, 0, 3).erase("a_scaling");
         step(p, 0, 3).erase("b_scaling");
       },
       {fp8Step + "'a_scale_inv' refers to value 11 of type "
                  "tensor<1x64xf32>, expected tensor<4xf32> (one scale_inv "
                  "per group)"}},
  };
}

class GroupedBlockPlanErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(GroupedBlockPlanErrorTest, NamesTheProblem) {
  expectRefused(blockPlan(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(BlockChecks, GroupedBlockPlanErrorTest,
                         ::testing::ValuesIn(blockErrorCases()), errorCaseName);

//===----------------------------------------------------------------------===//
// m_splits at run time
//===----------------------------------------------------------------------===//

std::string splitsError(std::vector<int32_t> splits,
                        std::optional<int64_t> tokens, bool fp8) {
  llvm::Error error = checkSplits(splits, tokens, fp8, "argument 1");
  return error ? llvm::toString(std::move(error)) : "";
}

TEST(SplitsTest, AcceptsWhatTheContractAllows) {
  // Sums up to T, empty groups, padding rows after the last group.
  EXPECT_EQ(splitsError({16, 0, 32, 16}, 64, true), "");
  EXPECT_EQ(splitsError({16, 0, 32, 0}, 64, true), "");
  EXPECT_EQ(splitsError({0, 0, 0, 0}, 64, true), "");
  EXPECT_EQ(splitsError({64}, 64, false), "");
  // Without FP8 any non-negative sizes.
  EXPECT_EQ(splitsError({3, 7, 1, 0}, 11, false), "");
  // Without a T (no grouped GEMM reads the argument) the sum is free.
  EXPECT_EQ(splitsError({100, 200}, std::nullopt, false), "");
}

TEST(SplitsTest, RefusesNegativeSizes) {
  std::string message = splitsError({16, -16, 32, 0}, 64, false);
  EXPECT_NE(message.find("argument 1: m_splits[1] is -16; every m_splits "
                         "value (the tokens of a group) must be >= 0"),
            std::string::npos)
      << message;
  message = splitsError({-1}, std::nullopt, false);
  EXPECT_NE(message.find("m_splits[0] is -1"), std::string::npos) << message;
}

TEST(SplitsTest, RefusesMoreTokensThanTheInputHas) {
  std::string message = splitsError({32, 32, 16}, 64, false);
  EXPECT_NE(message.find("argument 1: m_splits sums to 80, more than the 64 "
                         "rows (tokens) of the input; sum(m_splits) must be "
                         "<= the token count"),
            std::string::npos)
      << message;
  // Sums beyond int32 are not wrapped around.
  message = splitsError({2147483647, 2147483647, 2}, 1024, false);
  EXPECT_NE(message.find("sums to 4294967296"), std::string::npos) << message;
}

TEST(SplitsTest, FP8WantsMultiplesOf16) {
  std::string message = splitsError({16, 24, 16, 8}, 64, true);
  EXPECT_NE(message.find("argument 1: m_splits[1] is 24, not a multiple of "
                         "16; under an FP8 recipe every m_splits value must "
                         "be a multiple of 16"),
            std::string::npos)
      << message;
  EXPECT_EQ(splitsError({16, 24, 16, 8}, 64, false), "");
}

TEST(SplitsTest, AgreesWithTheRulesOnRandomSplits) {
  // An independent statement of the rules against random sizes.
  std::mt19937 rng(25);
  std::uniform_int_distribution<int> size(-8, 80), groups(1, 8), tokens(0, 256);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> splits(groups(rng));
    for (int32_t &value : splits)
      value = size(rng) / 4 * 4;
    int64_t t = tokens(rng);
    bool fp8 = trial % 2;
    bool valid = true;
    int64_t sum = 0;
    for (int32_t value : splits) {
      valid &= value >= 0 && (!fp8 || value % 16 == 0);
      sum += value;
    }
    valid &= sum <= t;
    llvm::Error error = checkSplits(splits, t, fp8, "m");
    EXPECT_EQ(!error, valid) << "trial " << trial;
    if (error) {
      std::string message = llvm::toString(std::move(error));
      EXPECT_NE(message.find("m_splits"), std::string::npos) << message;
    }
  }
}

TEST(HostArgumentRulesTest, ComeFromTheStepsReadingTheArgument) {
  Plan plan = parsed(basePlan());
  ASSERT_EQ(plan.functions.size(), 2u);
  std::vector<HostArgumentRule> forward = hostArgumentRules(plan.functions[0]);
  ASSERT_EQ(forward.size(), 1u);
  EXPECT_EQ(forward[0].argument, 1u);
  EXPECT_EQ(forward[0].value, 1);
  EXPECT_EQ(forward[0].count, 4);
  EXPECT_EQ(forward[0].tokens, 64);
  EXPECT_TRUE(forward[0].fp8);
  std::vector<HostArgumentRule> backward = hostArgumentRules(plan.functions[1]);
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(backward[0].argument, 2u);
  EXPECT_TRUE(backward[0].fp8);

  // Without the FP8 steps, sizes need not be multiples of 16.
  json::Value document = basePlan();
  function(document, 0).getArray("steps")->pop_back();
  function(document, 1).getArray("steps")->pop_back();
  Plan highPrecision = parsed(document);
  ASSERT_EQ(highPrecision.functions.size(), 2u);
  std::vector<HostArgumentRule> rules =
      hostArgumentRules(highPrecision.functions[1]);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_FALSE(rules[0].fp8);
  EXPECT_EQ(rules[0].tokens, 64);

  // The executor's check names the function and the argument.
  std::vector<int32_t> tooMany = {32, 32, 16, 0};
  llvm::Error error = checkHostArgument(forward[0], tooMany, plan.functions[0]);
  ASSERT_TRUE(bool(error));
  std::string message = llvm::toString(std::move(error));
  EXPECT_NE(message.find("function 'moe', argument 1 ('m_splits': 4 int32 "
                         "values in host memory): m_splits sums to 80"),
            std::string::npos)
      << message;
  std::vector<int32_t> fine = {16, 0, 32, 16};
  EXPECT_FALSE(bool(checkHostArgument(forward[0], fine, plan.functions[0])));

  // A host argument no grouped GEMM reads has no T.
  function(document, 0).getArray("steps")->pop_back();
  Plan kernelsOnly = parsed(document);
  ASSERT_EQ(kernelsOnly.functions.size(), 2u);
  rules = hostArgumentRules(kernelsOnly.functions[0]);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_FALSE(rules[0].tokens);
}

TEST(GroupedStaticStepsTest, OnlyTheWeightCastIsStatic) {
  Plan plan = parsed(basePlan());
  ASSERT_EQ(plan.functions.size(), 2u);
  StaticSteps steps = findStaticSteps(plan.functions[0]);
  // The input cast reads m_splits and the input; grouped GEMMs are never
  // static; the weight cast reads the weight and the FP8 state only.
  EXPECT_EQ(steps.isStatic, (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(steps.outputs, std::vector<int64_t>{7});
  EXPECT_EQ(steps.arguments, (std::vector<size_t>{2, 4}));
}

TEST(GroupedPlanTest, LeavingTheStateKeepsGroupedGemms) {
  // A grouped GEMM writing a kept result is needed; one whose result is
  // dropped is not.
  Plan plan = parsed(basePlan());
  ASSERT_EQ(plan.functions.size(), 2u);
  std::vector<bool> needed = plan.functions[0].stepsNeededWithout({1});
  EXPECT_EQ(needed, (std::vector<bool>{false, false, true, false}));
}

} // namespace
