//===- PlanTest.cpp - parsing and checking plan.json ----------------------===//
//
// A small hand-written plan (a forward with every step kind and a backward)
// parses into the expected structures; each check of the parser is then
// broken in turn, and its error must name the function, step or value, and
// the field. Last, every plan that te-compile writes for the bundled
// examples (generated at build time under TEJIT_TEST_PLAN_DIR) must parse.
//
//===----------------------------------------------------------------------===//
#include "runtime/Plan.h"
#include "runtime/AttentionLauncher.h"
#include "tests/runtime/PlanJson.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <functional>
#include <optional>

using namespace tejit::runtime;
using namespace tejit::runtime::plantest;
namespace json = llvm::json;

namespace {

//===----------------------------------------------------------------------===//
// Tensor types
//===----------------------------------------------------------------------===//

TEST(TensorTypeTest, ParsesShapesAndElementTypes) {
  llvm::Expected<TensorType> type = parseTensorType("tensor<32x1x64xbf16>");
  ASSERT_TRUE(bool(type)) << llvm::toString(type.takeError());
  EXPECT_EQ(type->shape, (std::vector<int64_t>{32, 1, 64}));
  EXPECT_EQ(type->element, ElementType::BF16);
  EXPECT_EQ(type->numElements(), 32 * 64);
  EXPECT_EQ(type->bytes(), 32 * 64 * 2);

  llvm::Expected<TensorType> scalar = parseTensorType("tensor<f32>");
  ASSERT_TRUE(bool(scalar)) << llvm::toString(scalar.takeError());
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->numElements(), 1);
  EXPECT_EQ(scalar->bytes(), 4);

  llvm::Expected<TensorType> empty = parseTensorType("tensor<0x8xf16>");
  ASSERT_TRUE(bool(empty)) << llvm::toString(empty.takeError());
  EXPECT_EQ(empty->bytes(), 0);
}

TEST(TensorTypeTest, EveryElementTypeRoundTrips) {
  struct Want {
    ElementType type;
    const char *name;
    size_t bytes;
    bool fp8;
  };
  for (Want want : {Want{ElementType::F32, "f32", 4, false},
                    Want{ElementType::F16, "f16", 2, false},
                    Want{ElementType::BF16, "bf16", 2, false},
                    Want{ElementType::F8E4M3, "f8E4M3FN", 1, true},
                    Want{ElementType::F8E5M2, "f8E5M2", 1, true},
                    Want{ElementType::I64, "i64", 8, false},
                    Want{ElementType::I32, "i32", 4, false},
                    Want{ElementType::I8, "i8", 1, false},
                    // i1 takes a byte, as kernels and the writer store it.
                    Want{ElementType::I1, "i1", 1, false}}) {
    SCOPED_TRACE(want.name);
    EXPECT_EQ(elementTypeName(want.type), want.name);
    EXPECT_EQ(elementBytes(want.type), want.bytes);
    EXPECT_EQ(isFp8(want.type), want.fp8);
    llvm::Expected<TensorType> type =
        parseTensorType(std::string("tensor<3x5x") + want.name + ">");
    ASSERT_TRUE(bool(type)) << llvm::toString(type.takeError());
    EXPECT_EQ(type->element, want.type);
    EXPECT_EQ(type->bytes(), int64_t(15 * want.bytes));
  }
}

TEST(TensorTypeTest, RejectsWhatIsNotAStaticRankedTensor) {
  for (const char *text : {"tensor<3x?xf32>",
                           "tensor<4xq7>",
                           "memref<4xf32>",
                           "tensor<*xf32>",
                           "tensor<4xf32",
                           "tensor4xf32>",
                           "tensor<>",
                           "tensor<4x>",
                           "tensor<x4xf32>",
                           "tensor<4xxf32>",
                           "tensor<-1xf32>",
                           "tensor<+1xf32>",
                           "tensor<4xf32, #enc>",
                           "tensor<4xf8E4M3>",
                           "tensor<4xF32>",
                           "tensor< 4xf32>",
                           "vector<4xf32>",
                           "f32",
                           "tensor<99999999999x99999999999xf32>",
                           "tensor<99999999999999999999xf32>"}) {
    llvm::Expected<TensorType> type = parseTensorType(text);
    EXPECT_FALSE(bool(type)) << text << " parsed";
    if (!type) {
      std::string message = llvm::toString(type.takeError());
      // The message quotes the type it rejects.
      EXPECT_NE(message.find(text), std::string::npos) << message;
    }
  }
}

TEST(TensorTypeTest, ErrorsSayWhatIsWrong) {
  auto messageOf = [](llvm::StringRef text) {
    llvm::Expected<TensorType> type = parseTensorType(text);
    return type ? std::string() : llvm::toString(type.takeError());
  };
  EXPECT_NE(messageOf("tensor<3x?xf32>").find("dimension '?'"),
            std::string::npos);
  EXPECT_NE(messageOf("tensor<4xq7>").find("element type 'q7'"),
            std::string::npos);
  EXPECT_NE(messageOf("memref<4xf32>").find("tensor<...>"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// A hand-written plan
//===----------------------------------------------------------------------===//

// A forward with a cast kernel, an FP8 GEMM (scale_inv slots are views of a
// meta vector argument), attention, a mask kernel and an amax all-reduce;
// and its backward with a kernel, a plain GEMM with a bias-gradient epilogue
// and attention_bwd. Arena: forward 168 bytes, backward 80.
constexpr const char *kPlan = R"json({
  "format": "tejit-plan", "version": 1, "arch": "sm_90a", "build_id": "abc",
  "functions": [
    {
      "name": "layer", "arena_bytes": 168,
      "arguments": [
        {"value": 0, "te.name": "input"},
        {"value": 1, "te.name": "weight", "te.parameter": true},
        {"value": 2, "te.name": "fp8_meta.fwd.scale_inv"}
      ],
      "results": [
        {"value": 8, "te.name": "output"},
        {"value": 10, "te.name": "saved.0"},
        {"value": 12, "te.name": "fp8_meta.fwd.scale_inv",
         "te.updates_arg": 2}
      ],
      "values": [
        {"id": 0, "type": "tensor<4x8xbf16>", "bytes": 64,
         "storage": {"arg": 0}},
        {"id": 1, "type": "tensor<8x8xbf16>", "bytes": 128,
         "storage": {"arg": 1}},
        {"id": 2, "type": "tensor<2xf32>", "bytes": 8, "storage": {"arg": 2}},
        {"id": 3, "type": "tensor<4x8xf8E4M3FN>", "bytes": 32,
         "storage": {"arena_offset": 0}},
        {"id": 4, "type": "tensor<8x8xf8E4M3FN>", "bytes": 64,
         "storage": {"arena_offset": 32}},
        {"id": 5, "type": "tensor<2xf32>", "bytes": 8,
         "storage": {"arena_offset": 96}},
        {"id": 6, "type": "tensor<1xf32>", "bytes": 4,
         "storage": {"view_of": 2, "byte_offset": 0}},
        {"id": 7, "type": "tensor<1xf32>", "bytes": 4,
         "storage": {"view_of": 2, "byte_offset": 4}},
        {"id": 8, "type": "tensor<4x8xbf16>", "bytes": 64,
         "storage": {"result": 0}},
        {"id": 9, "type": "tensor<2x2x8xbf16>", "bytes": 64,
         "storage": {"view_of": 8, "byte_offset": 0}},
        {"id": 10, "type": "tensor<4x8xi1>", "bytes": 32,
         "storage": {"result": 1}},
        {"id": 11, "type": "tensor<4x8xbf16>", "bytes": 64,
         "storage": {"arena_offset": 104}},
        {"id": 12, "type": "tensor<2xf32>", "bytes": 8,
         "storage": {"result": 2}}
      ],
      "steps": [
        {"kind": "kernel", "name": "layer_cast_0",
         "binary": "kernels/layer_cast_0.cubin",
         "grid": [2, 1, 1], "block": [128, 1, 1], "shared_bytes": 1024,
         "args": [
           {"value": 0, "output": false, "zero_before_launch": false},
           {"value": 1, "output": false, "zero_before_launch": false},
           {"value": 3, "output": true, "zero_before_launch": false},
           {"value": 4, "output": true, "zero_before_launch": false},
           {"value": 5, "output": true, "zero_before_launch": true}
         ]},
        {"kind": "gemm", "a": 3, "b": 4,
         "a_type": "tensor<4x8xf8E4M3FN>", "b_type": "tensor<8x8xf8E4M3FN>",
         "a_scale_inv": 6, "b_scale_inv": 7, "fast_accum": true,
         "layout": "TN", "out": 8, "out_type": "tensor<4x8xbf16>",
         "epilogue": {}},
        {"kind": "attention", "operands": [9, 9, 9], "results": [11],
         "attributes": {"qkv_format": "#te.qkv_format<sbhd>",
                        "dropout": "0.000000e+00 : f64"}},
        {"kind": "kernel", "name": "layer_dropout_0",
         "binary": "kernels/layer_dropout_0.ptx",
         "grid": [1, 1, 1], "block": [256, 1, 1], "shared_bytes": 0,
         "args": [
           {"value": 11, "output": false, "zero_before_launch": false},
           {"value": 10, "output": true, "zero_before_launch": false}
         ]},
        {"kind": "amax_allreduce", "in": 5, "out": 12}
      ]
    },
    {
      "name": "layer_backward", "backward_of": "layer", "arena_bytes": 80,
      "arguments": [
        {"value": 0, "te.name": "grad.output"},
        {"value": 1, "te.forward_arg": 0},
        {"value": 2, "te.forward_result": 1}
      ],
      "results": [
        {"value": 4, "te.name": "grad.input", "te.grad_of": 0},
        {"value": 5, "te.name": "grad.weight", "te.grad_of": 1}
      ],
      "values": [
        {"id": 0, "type": "tensor<4x8xbf16>", "bytes": 64,
         "storage": {"arg": 0}},
        {"id": 1, "type": "tensor<4x8xbf16>", "bytes": 64,
         "storage": {"arg": 1}},
        {"id": 2, "type": "tensor<4x8xi1>", "bytes": 32,
         "storage": {"arg": 2}},
        {"id": 3, "type": "tensor<4x8xbf16>", "bytes": 64,
         "storage": {"arena_offset": 0}},
        {"id": 4, "type": "tensor<4x8xbf16>", "bytes": 64,
         "storage": {"result": 0}},
        {"id": 5, "type": "tensor<8x8xbf16>", "bytes": 128,
         "storage": {"result": 1}},
        {"id": 6, "type": "tensor<8xbf16>", "bytes": 16,
         "storage": {"arena_offset": 64}}
      ],
      "steps": [
        {"kind": "kernel", "name": "layer_backward_dropout_0",
         "binary": "kernels/layer_backward_dropout_0.cubin",
         "grid": [1, 1, 1], "block": [256, 1, 1], "shared_bytes": 0,
         "args": [
           {"value": 0, "output": false, "zero_before_launch": false},
           {"value": 2, "output": false, "zero_before_launch": false},
           {"value": 3, "output": true, "zero_before_launch": false}
         ]},
        {"kind": "gemm", "a": 3, "b": 1,
         "a_type": "tensor<4x8xbf16>", "b_type": "tensor<4x8xbf16>",
         "transpose_a": true, "transpose_b": false,
         "out": 5, "out_type": "tensor<8x8xbf16>",
         "epilogue": {"bias_grad": 6}},
        {"kind": "attention_bwd", "operands": [3, 1], "results": [4],
         "attributes": {}}
      ]
    }
  ]
})json";

json::Value basePlan() { return parseJson(kPlan, "kPlan"); }

json::Object &value(json::Value &plan, size_t fn, size_t id) {
  return entry(plan, fn, "values", id);
}
json::Object &storage(json::Value &plan, size_t fn, size_t id) {
  return *value(plan, fn, id).getObject("storage");
}
json::Object &kernelArg(json::Value &plan, size_t fn, size_t stepIndex,
                        size_t arg) {
  return *(*step(plan, fn, stepIndex).getArray("args"))[arg].getAsObject();
}

TEST(PlanTest, HandWrittenPlanParses) {
  llvm::Expected<Plan> parsed = parsePlan(basePlan());
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  const Plan &plan = *parsed;
  EXPECT_EQ(plan.arch, "sm_90a");
  EXPECT_EQ(plan.buildId, "abc");
  ASSERT_EQ(plan.functions.size(), 2u);

  const FunctionPlan *forward = plan.forward();
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->name, "layer");
  EXPECT_TRUE(forward->backwardOf.empty());
  EXPECT_EQ(forward->arenaBytes, 168);
  const FunctionPlan *backward = plan.backwardOf(*forward);
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(backward->name, "layer_backward");
  EXPECT_EQ(backward->backwardOf, "layer");
  EXPECT_EQ(plan.backwardOf(*backward), nullptr);
  EXPECT_EQ(plan.find("layer_backward"), backward);
  EXPECT_EQ(plan.find("missing"), nullptr);

  // Interface.
  ASSERT_EQ(forward->arguments.size(), 3u);
  EXPECT_EQ(forward->arguments[1].name, "weight");
  EXPECT_TRUE(forward->arguments[1].parameter);
  EXPECT_FALSE(forward->arguments[0].parameter);
  ASSERT_EQ(forward->results.size(), 3u);
  EXPECT_EQ(forward->results[2].updatesArg, 2);
  EXPECT_FALSE(forward->results[0].updatesArg);
  EXPECT_EQ(backward->arguments[1].forwardArg, 0);
  EXPECT_EQ(backward->arguments[2].forwardResult, 1);
  EXPECT_EQ(backward->results[1].gradOf, 1);
  EXPECT_TRUE(backward->arguments[1].name.empty());

  // Values.
  ASSERT_EQ(forward->values.size(), 13u);
  const ValueInfo &meta = forward->values[7];
  EXPECT_EQ(meta.id, 7);
  EXPECT_EQ(meta.storage.kind, Storage::View);
  EXPECT_EQ(meta.storage.index, 2);
  EXPECT_EQ(meta.storage.byteOffset, 4);
  EXPECT_EQ(forward->values[0].storage.kind, Storage::Argument);
  EXPECT_EQ(forward->values[12].storage.kind, Storage::Result);
  EXPECT_EQ(forward->values[12].storage.index, 2);
  EXPECT_EQ(forward->values[11].storage.kind, Storage::Arena);
  EXPECT_EQ(forward->values[11].storage.index, 104);
  EXPECT_EQ(forward->values[10].type.element, ElementType::I1);
  EXPECT_EQ(forward->values[10].bytes, 32);

  // Steps.
  ASSERT_EQ(forward->steps.size(), 5u);
  const auto *cast = std::get_if<KernelStep>(&forward->steps[0]);
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(cast->name, "layer_cast_0");
  EXPECT_EQ(cast->binary, "kernels/layer_cast_0.cubin");
  EXPECT_EQ(cast->grid, (std::array<unsigned, 3>{2, 1, 1}));
  EXPECT_EQ(cast->block, (std::array<unsigned, 3>{128, 1, 1}));
  EXPECT_EQ(cast->sharedBytes, 1024u);
  ASSERT_EQ(cast->args.size(), 5u);
  EXPECT_EQ(cast->args[3].value, 4);
  EXPECT_TRUE(cast->args[3].output);
  EXPECT_FALSE(cast->args[0].output);
  EXPECT_TRUE(cast->args[4].zeroBeforeLaunch);
  EXPECT_FALSE(cast->args[3].zeroBeforeLaunch);

  const auto *fprop = std::get_if<GemmStep>(&forward->steps[1]);
  ASSERT_NE(fprop, nullptr);
  EXPECT_TRUE(fprop->scaled);
  EXPECT_EQ(fprop->a, 3);
  EXPECT_EQ(fprop->b, 4);
  EXPECT_EQ(fprop->out, 8);
  EXPECT_EQ(fprop->aType.element, ElementType::F8E4M3);
  EXPECT_EQ(fprop->bType.shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(fprop->outType.element, ElementType::BF16);
  EXPECT_EQ(fprop->aScaleInv, 6);
  EXPECT_EQ(fprop->bScaleInv, 7);
  EXPECT_TRUE(fprop->fastAccum);
  EXPECT_FALSE(fprop->epilogue.bias || fprop->epilogue.aux ||
               fprop->epilogue.dScale || fprop->epilogue.amaxD ||
               fprop->epilogue.biasGrad || fprop->epilogue.gelu ||
               fprop->epilogue.dgelu);

  const auto *attention = std::get_if<AttentionStep>(&forward->steps[2]);
  ASSERT_NE(attention, nullptr);
  EXPECT_FALSE(attention->backward);
  EXPECT_EQ(attention->operands, (std::vector<int64_t>{9, 9, 9}));
  EXPECT_EQ(attention->results, (std::vector<int64_t>{11}));
  EXPECT_EQ(attention->attributes.at("qkv_format"), "#te.qkv_format<sbhd>");
  EXPECT_EQ(attention->attributes.size(), 2u);

  const auto *reduce = std::get_if<AmaxAllReduceStep>(&forward->steps[4]);
  ASSERT_NE(reduce, nullptr);
  EXPECT_EQ(reduce->in, 5);
  EXPECT_EQ(reduce->out, 12);

  ASSERT_EQ(backward->steps.size(), 3u);
  const auto *wgrad = std::get_if<GemmStep>(&backward->steps[1]);
  ASSERT_NE(wgrad, nullptr);
  EXPECT_FALSE(wgrad->scaled);
  EXPECT_TRUE(wgrad->transposeA);
  EXPECT_FALSE(wgrad->transposeB);
  EXPECT_FALSE(wgrad->aScaleInv);
  EXPECT_EQ(wgrad->epilogue.biasGrad, 6);
  const auto *attentionBwd = std::get_if<AttentionStep>(&backward->steps[2]);
  ASSERT_NE(attentionBwd, nullptr);
  EXPECT_TRUE(attentionBwd->backward);
  EXPECT_TRUE(attentionBwd->attributes.empty());
}

/// Inserts, right after kernel step 0 of the forward (which gets 64 bytes of
/// scratch), a copy of it that reads the scratch as step 0 left it; returns
/// the copy.
json::Object &insertStepAfterTheCast(json::Value &plan) {
  step(plan, 0, 0)["scratch_bytes"] = 64;
  json::Object copy = step(plan, 0, 0);
  copy["name"] = "layer_cast_0_finalize";
  copy["scratch_from_previous_step"] = true;
  copy.erase("scratch_zero");
  json::Array &steps = *function(plan, 0).getArray("steps");
  steps.insert(steps.begin() + 1, json::Value(std::move(copy)));
  return step(plan, 0, 1);
}

TEST(PlanTest, ScratchZeroRanges) {
  // Plans written before "scratch_zero": all of the scratch is zeroed.
  {
    json::Value document = basePlan();
    step(document, 0, 0)["scratch_bytes"] = 64;
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    const auto &cast = std::get<KernelStep>(plan->functions[0].steps[0]);
    EXPECT_EQ(cast.scratchBytes, 64u);
    EXPECT_EQ(cast.scratchZeroOffset, 0u);
    EXPECT_EQ(cast.scratchZeroBytes, 64u);
    EXPECT_FALSE(cast.scratchFromPreviousStep);
    // No scratch, nothing zeroed.
    const auto &dropout = std::get<KernelStep>(plan->functions[0].steps[3]);
    EXPECT_EQ(dropout.scratchBytes, 0u);
    EXPECT_EQ(dropout.scratchZeroBytes, 0u);
  }
  // A range (arrival counters after the partial sums), or none at all.
  for (int64_t bytes : {16, 0}) {
    json::Value document = basePlan();
    step(document, 0, 0)["scratch_bytes"] = 64;
    step(document, 0, 0)["scratch_zero"] =
        json::Object{{"offset", 48}, {"bytes", bytes}};
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    const auto &cast = std::get<KernelStep>(plan->functions[0].steps[0]);
    EXPECT_EQ(cast.scratchZeroOffset, 48u);
    EXPECT_EQ(cast.scratchZeroBytes, unsigned(bytes));
  }
}

TEST(PlanTest, StepReadsTheScratchThePreviousStepLeft) {
  json::Value document = basePlan();
  step(document, 0, 0)["scratch_zero"] =
      json::Object{{"offset", 0}, {"bytes", 0}};
  insertStepAfterTheCast(document)["scratch_bytes"] = 48;
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  const auto &finalize = std::get<KernelStep>(plan->functions[0].steps[1]);
  EXPECT_EQ(finalize.name, "layer_cast_0_finalize");
  EXPECT_TRUE(finalize.scratchFromPreviousStep);
  EXPECT_EQ(finalize.scratchBytes, 48u);
  EXPECT_EQ(finalize.scratchZeroBytes, 0u);
  // The rule the executor checks too.
  llvm::ArrayRef<Step> steps = plan->functions[0].steps;
  EXPECT_EQ(previousScratchProblem(steps.take_front(1), finalize), "");
  EXPECT_EQ(previousScratchProblem({}, finalize), "there is no step before it");
  EXPECT_EQ(previousScratchProblem(steps.take_front(3), finalize),
            "step 2, before it, is not a kernel");
}

TEST(PlanTest, ParsesText) {
  llvm::Expected<Plan> plan = parsePlan(llvm::StringRef(kPlan));
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->functions.size(), 2u);

  llvm::Expected<Plan> broken = parsePlan(llvm::StringRef("{\"format\": "));
  ASSERT_FALSE(bool(broken));
  EXPECT_NE(llvm::toString(broken.takeError()).find("plan: not valid JSON"),
            std::string::npos);
}

TEST(PlanTest, ForwardIsTheFirstFunctionThatIsNotABackward) {
  json::Value document = basePlan();
  json::Array &functions = *root(document).getArray("functions");
  std::swap(functions[0], functions[1]);
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_NE(plan->forward(), nullptr);
  EXPECT_EQ(plan->forward()->name, "layer");
  ASSERT_NE(plan->backwardOf(*plan->forward()), nullptr);
  EXPECT_EQ(plan->backwardOf(*plan->forward())->name, "layer_backward");
}

TEST(PlanTest, InferencePlanHasNoBackward) {
  json::Value document = basePlan();
  root(document).getArray("functions")->pop_back();
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_NE(plan->forward(), nullptr);
  EXPECT_EQ(plan->backwardOf(*plan->forward()), nullptr);
}

// An inference step of autoregressive decoding: q, k and v are column
// ranges of a fused QKV buffer (4 tokens of 8 + 2 + 2 heads of 64), the
// caches [2, 16, 2, 64] arguments the step writes in place; result 1 views
// the key cache (as a saved slot of state would).
constexpr const char *kKvCachePlan = R"json({
  "format": "tejit-plan", "version": 4, "arch": "sm_90a", "build_id": "kv",
  "functions": [
    {
      "name": "decode", "arena_bytes": 0,
      "arguments": [
        {"value": 0, "te.name": "qkv"},
        {"value": 1, "te.name": "attn.key_cache"},
        {"value": 2, "te.name": "attn.value_cache"},
        {"value": 3, "te.name": "cu_seqlens"},
        {"value": 4, "te.name": "cu_seqlens_kv"}
      ],
      "results": [
        {"value": 8, "te.name": "output"},
        {"value": 9, "te.name": "cache_row"}
      ],
      "values": [
        {"id": 0, "type": "tensor<4x12x64xbf16>", "bytes": 6144,
         "storage": {"arg": 0}},
        {"id": 1, "type": "tensor<2x16x2x64xbf16>", "bytes": 8192,
         "storage": {"arg": 1}},
        {"id": 2, "type": "tensor<2x16x2x64xbf16>", "bytes": 8192,
         "storage": {"arg": 2}},
        {"id": 3, "type": "tensor<3xi32>", "bytes": 12, "storage": {"arg": 3}},
        {"id": 4, "type": "tensor<3xi32>", "bytes": 12, "storage": {"arg": 4}},
        {"id": 5, "type": "tensor<4x8x64xbf16>", "bytes": 4096,
         "storage": {"view_of": 0, "byte_offset": 0}},
        {"id": 6, "type": "tensor<4x2x64xbf16>", "bytes": 1024,
         "storage": {"view_of": 0, "byte_offset": 1024}},
        {"id": 7, "type": "tensor<4x2x64xbf16>", "bytes": 1024,
         "storage": {"view_of": 0, "byte_offset": 1280}},
        {"id": 8, "type": "tensor<4x8x64xbf16>", "bytes": 4096,
         "storage": {"result": 0}},
        {"id": 9, "type": "tensor<2x64xbf16>", "bytes": 256,
         "storage": {"view_of": 1, "byte_offset": 0}}
      ],
      "steps": [
        {"kind": "kv_cache_attention", "operands": [5, 6, 7, 1, 2, 3, 4],
         "results": [8],
         "attributes": {
           "attn_mask_type": "#te.attn_mask_type<padding_causal_bottom_right>",
           "softmax_scale": "1.250000e-01 : f64",
           "max_seqlen_q": "1 : i64"},
         "token_strides": {"q": 768, "k": 768, "v": 768}}
      ]
    }
  ]
})json";

TEST(PlanTest, KvCacheAttentionStepParses) {
  llvm::Expected<json::Value> document = json::parse(kKvCachePlan);
  ASSERT_TRUE(bool(document)) << llvm::toString(document.takeError());
  llvm::Expected<Plan> plan = parsePlan(*document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  const FunctionPlan &function = plan->functions[0];
  ASSERT_EQ(function.steps.size(), 1u);
  const auto *attention = std::get_if<AttentionStep>(&function.steps[0]);
  ASSERT_NE(attention, nullptr);
  EXPECT_TRUE(attention->kvCache);
  EXPECT_FALSE(attention->backward);
  EXPECT_EQ(attention->operands, (std::vector<int64_t>{5, 6, 7, 1, 2, 3, 4}));
  EXPECT_EQ(attention->results, (std::vector<int64_t>{8}));
  EXPECT_EQ(attention->attributes.at("max_seqlen_q"), "1 : i64");
  EXPECT_EQ(attention->tokenStrides.at("k"), 768);

  // The caches are written (in place), everything else read.
  std::vector<std::pair<int64_t, bool>> visited;
  forEachStepValue(function.steps[0], [&](int64_t value, bool written) {
    visited.emplace_back(value, written);
  });
  EXPECT_EQ(visited, (std::vector<std::pair<int64_t, bool>>{{5, false},
                                                            {6, false},
                                                            {7, false},
                                                            {1, true},
                                                            {2, true},
                                                            {3, false},
                                                            {4, false},
                                                            {8, true}}));
  // So a result viewing a cache is copied after the step, with the new
  // rows, not before it.
  EXPECT_FALSE(function.resultCopiedFirst(1));

  // The same operands under "attention" read the caches only.
  json::Value plain = *document;
  step(plain, 0, 0)["kind"] = "attention";
  llvm::Expected<Plan> reread = parsePlan(plain);
  ASSERT_TRUE(bool(reread)) << llvm::toString(reread.takeError());
  EXPECT_FALSE(std::get<AttentionStep>(reread->functions[0].steps[0]).kvCache);
  EXPECT_TRUE(reread->functions[0].resultCopiedFirst(1));
}

TEST(PlanTest, KvCacheAttentionStepNeedsItsOperands) {
  llvm::Expected<json::Value> document = json::parse(kKvCachePlan);
  ASSERT_TRUE(bool(document)) << llvm::toString(document.takeError());
  step(*document, 0, 0)["operands"] = json::Array{5, 6, 7, 1, 2, 3};
  llvm::Expected<Plan> plan = parsePlan(*document);
  ASSERT_FALSE(bool(plan));
  std::string message = llvm::toString(plan.takeError());
  EXPECT_NE(message.find("function 'decode', step 0 (kv_cache_attention): "
                         "'operands' must be [q, k, v, k_cache, v_cache, "
                         "cu_seqlens_q, cu_seqlens_kv] (and page_table when "
                         "paged) with results [o] for a kv_cache_attention "
                         "step; got 6 operands and 1 results"),
            std::string::npos)
      << message;
}

TEST(PlanTest, AcceptsWhatTheWriterMayWrite) {
  // attention_backward is read as attention_bwd.
  {
    json::Value document = basePlan();
    step(document, 1, 2)["kind"] = "attention_backward";
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_TRUE(std::get<AttentionStep>(plan->functions[1].steps[2]).backward);
  }
  // A GELU whose pre-activation is not kept (inference): "aux": null.
  {
    json::Value document = basePlan();
    step(document, 0, 1)["epilogue"] =
        json::Object{{"gelu", true}, {"aux", nullptr}};
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    const auto &gemm = std::get<GemmStep>(plan->functions[0].steps[1]);
    EXPECT_TRUE(gemm.epilogue.gelu);
    EXPECT_FALSE(gemm.epilogue.aux);
  }
  // A residual added to the product (cuBLASLt's C): a value of out's type.
  {
    json::Value document = basePlan();
    step(document, 0, 1)["epilogue"] = json::Object{{"residual", 11}};
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    const auto &gemm = std::get<GemmStep>(plan->functions[0].steps[1]);
    EXPECT_EQ(gemm.epilogue.residual, 11);
  }
  // A view of a view, and a rank-0 value.
  {
    json::Value document = basePlan();
    storage(document, 0, 7) = json::Object{{"view_of", 6}, {"byte_offset", 0}};
    value(document, 0, 6)["type"] = "tensor<f32>";
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
    EXPECT_TRUE(plan->functions[0].values[6].type.shape.empty());
  }
  // A value that lives in a result through a view (a reshape of it is
  // returned), and one that fills the arena to its last byte.
  {
    json::Value document = basePlan();
    entry(document, 0, "results", 0)["value"] = 9;
    storage(document, 0, 9) = json::Object{{"result", 0}};
    storage(document, 0, 8) = json::Object{{"view_of", 9}, {"byte_offset", 0}};
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  }
}

//===----------------------------------------------------------------------===//
// Tensor parallelism
//===----------------------------------------------------------------------===//

/// Appends to the forward of kPlan a tp_allreduce over 2 ranks that sums
/// value 11 (the attention's bf16 output, in the arena) into a new value 13
/// of its type at the end of a grown arena: step 5.
void appendTpAllReduce(json::Value &plan) {
  function(plan, 0)["arena_bytes"] = 232;
  function(plan, 0).getArray("values")->push_back(
      json::Object{{"id", 13},
                   {"type", "tensor<4x8xbf16>"},
                   {"bytes", 64},
                   {"storage", json::Object{{"arena_offset", 168}}}});
  function(plan, 0).getArray("steps")->push_back(json::Object{
      {"kind", "tp_allreduce"}, {"in", 11}, {"out", 13}, {"ranks", 2}});
}

TEST(PlanTest, TpAllReduceStepParses) {
  json::Value document = basePlan();
  appendTpAllReduce(document);
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  const FunctionPlan &forward = plan->functions[0];
  ASSERT_EQ(forward.steps.size(), 6u);
  const auto *sum = std::get_if<TpAllReduceStep>(&forward.steps[5]);
  ASSERT_NE(sum, nullptr);
  EXPECT_EQ(sum->in, 11);
  EXPECT_EQ(sum->out, 13);
  EXPECT_EQ(sum->ranks, 2);
  // What Program::tensorParallelRanks (tejit_program_tp_size) reports.
  EXPECT_EQ(plan->tensorParallelRanks(), 2);

  // An ordinary data step: it reads `in` and writes `out`.
  std::vector<std::pair<int64_t, bool>> visited;
  forEachStepValue(forward.steps[5], [&](int64_t value, bool written) {
    visited.emplace_back(value, written);
  });
  EXPECT_EQ(visited,
            (std::vector<std::pair<int64_t, bool>>{{11, false}, {13, true}}));
  // A run that leaves the FP8 state skips it like any step whose output
  // nothing kept reads (here an arena value), ...
  std::vector<bool> needed = forward.stepsNeededWithout({});
  ASSERT_EQ(needed.size(), 6u);
  EXPECT_FALSE(needed[5]);
  // ... and keeps it, and the step writing its input, when it writes a kept
  // result.
  FunctionPlan intoResult = forward;
  std::get<TpAllReduceStep>(intoResult.steps[5]).out = 8;
  needed = intoResult.stepsNeededWithout({2});
  EXPECT_TRUE(needed[5]);
  EXPECT_TRUE(needed[2]) << "the attention writes the sum's input";

  // f16 and f32 too, and one group across the forward and the backward.
  for (const char *type : {"tensor<4x8xf16>", "tensor<4x8xf32>"}) {
    json::Value other = basePlan();
    appendTpAllReduce(other);
    value(other, 0, 11)["type"] = type;
    value(other, 0, 13)["type"] = type;
    bool f32 = llvm::StringRef(type).contains("f32");
    value(other, 0, 11)["bytes"] = f32 ? 128 : 64;
    value(other, 0, 13)["bytes"] = f32 ? 128 : 64;
    function(other, 0)["arena_bytes"] = 296;
    // The attention's output stays bf16 in kPlan: point it elsewhere.
    step(other, 0, 2)["results"] = json::Array{8};
    llvm::Expected<Plan> parsed = parsePlan(other);
    EXPECT_TRUE(bool(parsed))
        << type << ": " << llvm::toString(parsed.takeError());
  }
  json::Value both = basePlan();
  appendTpAllReduce(both);
  function(both, 1).getArray("steps")->push_back(json::Object{
      {"kind", "tp_allreduce"}, {"in", 3}, {"out", 4}, {"ranks", 2}});
  llvm::Expected<Plan> twice = parsePlan(both);
  ASSERT_TRUE(bool(twice)) << llvm::toString(twice.takeError());
  EXPECT_EQ(twice->tensorParallelRanks(), 2);
}

/// Appends to the forward of kPlan a sequence-parallel collective over
/// `ranks` ranks, step 5 (`kind` "tp_allgather" or "tp_reducescatter"): from
/// value 11 (the attention's bf16 output, 32 elements in the arena) into a
/// new value 13 at the end of a grown arena, `ranks` times as large for a
/// gather and 1/ranks as large for a scatter.
void appendTpCollective(json::Value &plan, llvm::StringRef kind,
                        int64_t ranks = 2) {
  bool gather = kind == "tp_allgather";
  int64_t rows = gather ? 4 * ranks : 4 / ranks;
  function(plan, 0)["arena_bytes"] = 168 + rows * 16;
  function(plan, 0).getArray("values")->push_back(
      json::Object{{"id", 13},
                   {"type", "tensor<" + std::to_string(rows) + "x8xbf16>"},
                   {"bytes", rows * 16},
                   {"storage", json::Object{{"arena_offset", 168}}}});
  function(plan, 0).getArray("steps")->push_back(
      json::Object{{"kind", kind}, {"in", 11}, {"out", 13}, {"ranks", ranks}});
}

TEST(PlanTest, TpAllGatherAndReduceScatterStepsParse) {
  for (auto [kind, collective] :
       {std::pair{"tp_allgather", TpCollective::AllGather},
        std::pair{"tp_reducescatter", TpCollective::ReduceScatter}}) {
    SCOPED_TRACE(kind);
    EXPECT_EQ(tpStepKind(collective), kind);
    for (int64_t ranks : {2, 4}) {
      json::Value document = basePlan();
      appendTpCollective(document, kind, ranks);
      llvm::Expected<Plan> plan = parsePlan(document);
      ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
      const FunctionPlan &forward = plan->functions[0];
      ASSERT_EQ(forward.steps.size(), 6u);
      const Step &step = forward.steps[5];
      EXPECT_EQ(std::holds_alternative<TpAllGatherStep>(step),
                collective == TpCollective::AllGather);
      EXPECT_EQ(std::holds_alternative<TpReduceScatterStep>(step),
                collective == TpCollective::ReduceScatter);
      std::optional<TpStepRef> parsed = asTpStep(step);
      ASSERT_TRUE(parsed);
      EXPECT_EQ(parsed->collective, collective);
      EXPECT_EQ(parsed->step.in, 11);
      EXPECT_EQ(parsed->step.out, 13);
      EXPECT_EQ(parsed->step.ranks, ranks);
      // They count for tejit_program_tp_size like the sums.
      EXPECT_EQ(plan->tensorParallelRanks(), ranks);
      std::vector<std::pair<int64_t, bool>> visited;
      forEachStepValue(step, [&](int64_t value, bool written) {
        visited.emplace_back(value, written);
      });
      EXPECT_EQ(visited, (std::vector<std::pair<int64_t, bool>>{{11, false},
                                                                {13, true}}));
    }
    // f16 and f32 too.
    for (const char *element : {"f16", "f32"}) {
      json::Value other = basePlan();
      appendTpCollective(other, kind);
      int64_t bytes = llvm::StringRef(element) == "f32" ? 4 : 2;
      int64_t outRows = collective == TpCollective::AllGather ? 8 : 2;
      value(other, 0, 11)["type"] = std::string("tensor<4x8x") + element + ">";
      value(other, 0, 11)["bytes"] = 32 * bytes;
      value(other, 0, 13)["type"] =
          "tensor<" + std::to_string(outRows) + "x8x" + element + ">";
      value(other, 0, 13)["bytes"] = outRows * 8 * bytes;
      storage(other, 0, 13)["arena_offset"] = 232;
      function(other, 0)["arena_bytes"] = 232 + outRows * 8 * bytes;
      // The attention's output stays bf16 in kPlan: point it elsewhere.
      step(other, 0, 2)["results"] = json::Array{8};
      llvm::Expected<Plan> parsed = parsePlan(other);
      EXPECT_TRUE(bool(parsed))
          << element << ": " << llvm::toString(parsed.takeError());
    }
  }
  // The non-tensor-parallel steps are none.
  llvm::Expected<Plan> base = parsePlan(basePlan());
  ASSERT_TRUE(bool(base)) << llvm::toString(base.takeError());
  for (const Step &step : base->functions[0].steps)
    EXPECT_FALSE(asTpStep(step));
}

/// Appends to the forward of kPlan a context-parallel step (`kind`
/// "cp_allgather", "cp_reducescatter" or "cp_alltoall") from value 11 ([4,
/// 8] bf16) into a new value 13 of `outShape`, with the given fields
/// (head_dim when not negative).
void appendCpCollective(json::Value &plan, llvm::StringRef kind,
                        llvm::StringRef outShape, int64_t outElements,
                        int64_t ranks, int64_t seqDim, bool loadBalanced,
                        int64_t headDim = -1) {
  function(plan, 0)["arena_bytes"] = 168 + outElements * 2;
  function(plan, 0).getArray("values")->push_back(
      json::Object{{"id", 13},
                   {"type", ("tensor<" + outShape + "xbf16>").str()},
                   {"bytes", outElements * 2},
                   {"storage", json::Object{{"arena_offset", 168}}}});
  function(plan, 0).getArray("steps")->push_back(
      json::Object{{"kind", kind},
                   {"in", 11},
                   {"out", 13},
                   {"ranks", ranks},
                   {"seq_dim", seqDim},
                   {"load_balanced", loadBalanced}});
  if (headDim >= 0)
    (*function(plan, 0).getArray("steps")->back().getAsObject())["head_dim"] =
        headDim;
}

TEST(PlanTest, ContextParallelStepsParse) {
  json::Value document = basePlan();
  appendCpCollective(document, "cp_allgather", "8x8", 64, 2, 0, true);
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  const auto *gather =
      std::get_if<CpCollectiveStep>(&plan->functions[0].steps[5]);
  ASSERT_TRUE(gather);
  EXPECT_TRUE(gather->gather);
  EXPECT_EQ(gather->in, 11);
  EXPECT_EQ(gather->out, 13);
  EXPECT_EQ(gather->ranks, 2);
  EXPECT_EQ(gather->seqDim, 0);
  EXPECT_TRUE(gather->loadBalanced);
  EXPECT_EQ(plan->contextParallelRanks(), 2);
  // Not a tensor-parallel step: it runs over the other group.
  EXPECT_FALSE(asTpStep(plan->functions[0].steps[5]));
  EXPECT_EQ(plan->tensorParallelRanks(), 1);
  std::vector<std::pair<int64_t, bool>> visited;
  forEachStepValue(*gather, [&](int64_t value, bool written) {
    visited.emplace_back(value, written);
  });
  EXPECT_EQ(visited,
            (std::vector<std::pair<int64_t, bool>>{{11, false}, {13, true}}));

  // The reduce-scatter, along dim 1, over 4 ranks: [4, 8] -> [4, 2].
  json::Value scatter = basePlan();
  appendCpCollective(scatter, "cp_reducescatter", "4x2", 8, 4, 1, false);
  llvm::Expected<Plan> scattered = parsePlan(scatter);
  ASSERT_TRUE(bool(scattered)) << llvm::toString(scattered.takeError());
  const auto *step =
      std::get_if<CpCollectiveStep>(&scattered->functions[0].steps[5]);
  ASSERT_TRUE(step);
  EXPECT_FALSE(step->gather);
  EXPECT_EQ(step->seqDim, 1);
  EXPECT_EQ(scattered->contextParallelRanks(), 4);
  // Without such steps the size is 1.
  llvm::Expected<Plan> base = parsePlan(basePlan());
  ASSERT_TRUE(bool(base)) << llvm::toString(base.takeError());
  EXPECT_EQ(base->contextParallelRanks(), 1);
}

TEST(PlanTest, ContextParallelAllToAllParses) {
  // To heads: [4 tokens, 8 heads] -> [8 tokens, 4 heads] over 2 ranks.
  json::Value toHeads = basePlan();
  appendCpCollective(toHeads, "cp_alltoall", "8x4", 32, 2, 0, true, 1);
  llvm::Expected<Plan> plan = parsePlan(toHeads);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  const auto *step =
      std::get_if<CpCollectiveStep>(&plan->functions[0].steps[5]);
  ASSERT_TRUE(step);
  EXPECT_TRUE(step->allToAll);
  EXPECT_TRUE(step->gather);
  EXPECT_EQ(step->headDim, 1);
  EXPECT_EQ(step->collective(), TpCollective::AllToAll);
  EXPECT_EQ(plan->contextParallelRanks(), 2);
  EXPECT_FALSE(asTpStep(plan->functions[0].steps[5]));
  // To sequence: [4 tokens of the whole sequence, 8 heads] -> [2, 16].
  json::Value toSequence = basePlan();
  appendCpCollective(toSequence, "cp_alltoall", "2x16", 32, 2, 0, false, 1);
  llvm::Expected<Plan> back = parsePlan(toSequence);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  step = std::get_if<CpCollectiveStep>(&back->functions[0].steps[5]);
  ASSERT_TRUE(step);
  EXPECT_TRUE(step->allToAll);
  EXPECT_FALSE(step->gather);
  // Bad ones.
  struct Bad {
    const char *outShape;
    int64_t elements, seqDim, headDim;
    const char *expected;
  };
  for (const Bad &bad : {
           Bad{"8x8", 64, 0, 1,
               "makes dim seq_dim that many times longer and dim head_dim "
               "that many times shorter, or the reverse"},
           Bad{"8x4", 32, 0, 0,
               "'head_dim' is 0; the heads are a dim other than seq_dim"},
           Bad{"8x4", 32, 0, 2, "'head_dim' is 2"},
       }) {
    SCOPED_TRACE(bad.expected);
    json::Value document = basePlan();
    appendCpCollective(document, "cp_alltoall", bad.outShape, bad.elements, 2,
                       bad.seqDim, false, bad.headDim);
    llvm::Expected<Plan> refused = parsePlan(document);
    ASSERT_FALSE(bool(refused));
    EXPECT_THAT(llvm::toString(refused.takeError()),
                ::testing::HasSubstr(bad.expected));
  }
  // head_dim is required.
  json::Value missing = basePlan();
  appendCpCollective(missing, "cp_alltoall", "8x4", 32, 2, 0, false);
  llvm::Expected<Plan> refused = parsePlan(missing);
  ASSERT_FALSE(bool(refused));
  EXPECT_THAT(llvm::toString(refused.takeError()),
              ::testing::HasSubstr("'head_dim' is missing"));
}

TEST(PlanTest, ContextParallelStepsAreChecked) {
  struct Bad {
    const char *kind, *outShape;
    int64_t elements, ranks, seqDim;
    bool loadBalanced;
    const char *expected;
  };
  for (const Bad &bad : {
           Bad{"cp_allgather", "8x4", 32, 2, 0, false,
               "has the same shape with dim seq_dim 2 times longer"},
           Bad{"cp_allgather", "8x8", 64, 2, 2, false,
               "'seq_dim' is 2; the sequence is dim 0 (sbhd) or 1 (bshd)"},
           Bad{"cp_allgather", "8x8", 64, 1, 0, false,
               "'ranks' is 1; a context-parallel all-gather spans at least "
               "2 ranks"},
           Bad{"cp_reducescatter", "4x1", 4, 8, 1, true,
               "'load_balanced' is set, but this rank's 1 tokens do not split"},
       }) {
    SCOPED_TRACE(bad.expected);
    json::Value document = basePlan();
    appendCpCollective(document, bad.kind, bad.outShape, bad.elements,
                       bad.ranks, bad.seqDim, bad.loadBalanced);
    llvm::Expected<Plan> plan = parsePlan(document);
    ASSERT_FALSE(bool(plan));
    EXPECT_THAT(llvm::toString(plan.takeError()),
                ::testing::HasSubstr(bad.expected));
  }
  // Every step of a plan spans one group.
  json::Value twoSizes = basePlan();
  appendCpCollective(twoSizes, "cp_allgather", "8x8", 64, 2, 0, true);
  function(twoSizes, 1)["arena_bytes"] = 96;
  function(twoSizes, 1)
      .getArray("values")
      ->push_back(
          json::Object{{"id", 7},
                       {"type", "tensor<1x8xbf16>"},
                       {"bytes", 16},
                       {"storage", json::Object{{"arena_offset", 80}}}});
  function(twoSizes, 1)
      .getArray("steps")
      ->push_back(json::Object{{"kind", "cp_reducescatter"},
                               {"in", 3},
                               {"out", 7},
                               {"ranks", 4},
                               {"seq_dim", 0},
                               {"load_balanced", false}});
  llvm::Expected<Plan> plan = parsePlan(twoSizes);
  ASSERT_FALSE(bool(plan));
  EXPECT_THAT(llvm::toString(plan.takeError()),
              ::testing::HasSubstr("a plan runs over one context-parallel "
                                   "group"));
}

TEST(PlanTest, SequenceParallelStepsShareTheGroupWithTheSums) {
  // A gather in the forward, a scatter (its gradient) and a sum in the
  // backward, all over 2 ranks: one group. The backward scatters value 3
  // (32 bf16 elements, arena bytes [0, 64)) into value 6 (16 elements, the
  // bias gradient's bytes [64, 80) here).
  json::Value document = basePlan();
  appendTpCollective(document, "tp_allgather");
  value(document, 1, 6)["type"] = "tensor<16xbf16>";
  value(document, 1, 6)["bytes"] = 32;
  function(document, 1)["arena_bytes"] = 96;
  step(document, 1, 1)["epilogue"] = json::Object{};
  function(document, 1)
      .getArray("steps")
      ->push_back(json::Object{
          {"kind", "tp_reducescatter"}, {"in", 3}, {"out", 6}, {"ranks", 2}});
  function(document, 1)
      .getArray("steps")
      ->push_back(json::Object{
          {"kind", "tp_allreduce"}, {"in", 4}, {"out", 4}, {"ranks", 2}});
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->tensorParallelRanks(), 2);
  const FunctionPlan &backward = plan->functions[1];
  ASSERT_EQ(backward.steps.size(), 5u);
  EXPECT_TRUE(std::holds_alternative<TpReduceScatterStep>(backward.steps[3]));
  EXPECT_TRUE(std::holds_alternative<TpAllReduceStep>(backward.steps[4]));
}

TEST(PlanTest, PlanWithoutTpAllReduceHasOneRank) {
  llvm::Expected<Plan> plan = parsePlan(basePlan());
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->tensorParallelRanks(), 1);
}

//===----------------------------------------------------------------------===//
// Float8BlockScaling
//===----------------------------------------------------------------------===//

/// Makes the forward's FP8 GEMM (step 1: a [4, 8], b [8, 8]) block-scaled,
/// a 1-D and b 2-D, reading two new scale_inv values at the end of a grown
/// arena: value 13, a's [ceil(8/128), pad4(4)] = [1, 4], and value 14, b's
/// [ceil(8/128), pad4(ceil(8/128))] = [1, 4] (dialects/BlockScaleLayout.h).
void makeBlockScaled(json::Value &plan) {
  function(plan, 0)["arena_bytes"] = 200;
  for (auto [id, offset] : {std::pair{13, 168}, std::pair{14, 184}})
    function(plan, 0).getArray("values")->push_back(
        json::Object{{"id", id},
                     {"type", "tensor<1x4xf32>"},
                     {"bytes", 16},
                     {"storage", json::Object{{"arena_offset", offset}}}});
  json::Object &gemm = step(plan, 0, 1);
  gemm["a_scale_inv"] = 13;
  gemm["b_scale_inv"] = 14;
  gemm["a_scaling"] = "block_1d";
  gemm["b_scaling"] = "block_2d";
  gemm["fast_accum"] = false;
}

TEST(PlanTest, BlockScaledGemmParses) {
  json::Value document = basePlan();
  makeBlockScaled(document);
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  const auto &gemm = std::get<GemmStep>(plan->functions[0].steps[1]);
  EXPECT_TRUE(gemm.scaled);
  EXPECT_EQ(gemm.aScaling, GemmScaling::Block1D);
  EXPECT_EQ(gemm.bScaling, GemmScaling::Block2D);
  EXPECT_EQ(gemm.aScaleInv, 13);
  EXPECT_EQ(gemm.bScaleInv, 14);
  // Plans without the keys (before them) scale by one scale_inv each.
  llvm::Expected<Plan> base = parsePlan(basePlan());
  ASSERT_TRUE(bool(base)) << llvm::toString(base.takeError());
  const auto &tensor = std::get<GemmStep>(base->functions[0].steps[1]);
  EXPECT_EQ(tensor.aScaling, GemmScaling::Tensor);
  EXPECT_EQ(tensor.bScaling, GemmScaling::Tensor);
  // "tensor" spelled out is the same.
  json::Value spelled = basePlan();
  step(spelled, 0, 1)["a_scaling"] = "tensor";
  step(spelled, 0, 1)["b_scaling"] = "tensor";
  EXPECT_TRUE(bool(parsePlan(spelled)));
  for (GemmScaling scaling :
       {GemmScaling::Tensor, GemmScaling::Block1D, GemmScaling::Block2D})
    EXPECT_EQ(parseGemmScaling(gemmScalingName(scaling)), scaling);
  EXPECT_EQ(parseGemmScaling("block"), std::nullopt);
}

//===----------------------------------------------------------------------===//
// Each check, broken
//===----------------------------------------------------------------------===//

std::vector<ErrorCase> errorCases() {
  using V = json::Value &;
  const std::string layer = "plan: function 'layer'";
  const std::string layerBackward = "plan: function 'layer_backward'";
  return {
      // The document.
      {"Format",
       [](V p) { root(p)["format"] = "tejit-plans"; },
       {"plan: 'format'", "tejit-plans"}},
      {"Version",
       [](V p) { root(p)["version"] = 7; },
       {"plan: 'version' is 7; versions 1 to 6 are read"}},
      {"VersionNotANumber",
       [](V p) { root(p)["version"] = "1"; },
       {"plan: 'version' must be an integer"}},
      {"Arch", [](V p) { root(p).erase("arch"); }, {"plan: 'arch' is missing"}},
      {"Functions",
       [](V p) { root(p).erase("functions"); },
       {"plan: 'functions' is missing"}},
      {"NoFunctions",
       [](V p) { root(p)["functions"] = json::Array{}; },
       {"plan: 'functions' is empty"}},
      {"FunctionName",
       [](V p) { function(p, 1).erase("name"); },
       {"plan: function 1: 'name' is missing"}},
      {"DuplicateName",
       [](V p) { function(p, 1)["name"] = "layer"; },
       {layer, "'name' is used by functions 0 and 1"}},
      {"BackwardOfUnknown",
       [](V p) { function(p, 1)["backward_of"] = "nope"; },
       {layerBackward, "'backward_of'", "'nope'"}},
      {"BackwardOfBackward",
       [](V p) { function(p, 1)["backward_of"] = "layer_backward"; },
       {layerBackward, "'backward_of'", "itself"}},
      {"ArenaBytesNegative",
       [](V p) { function(p, 0)["arena_bytes"] = -8; },
       {layer, "'arena_bytes' is -8"}},

      // Values.
      {"ValueIdNotDense",
       [](V p) { value(p, 0, 3)["id"] = 7; },
       {layer + ", value 3: 'id' is 7", "expected 3"}},
      {"ValueType",
       [](V p) { value(p, 0, 3)["type"] = "tensor<4x?xf8E4M3FN>"; },
       {layer + ", value 3: 'type'", "dimension '?'"}},
      {"ValueElementType",
       [](V p) { value(p, 0, 3)["type"] = "tensor<4x8xf8E4M3>"; },
       {layer + ", value 3: 'type'", "element type 'f8E4M3'"}},
      {"ValueTypeNotTensor",
       [](V p) { value(p, 0, 3)["type"] = "memref<4x8xf8E4M3FN>"; },
       {layer + ", value 3: 'type'", "memref"}},
      {"ValueBytes",
       [](V p) { value(p, 0, 3)["bytes"] = 64; },
       {layer + ", value 3: 'bytes' is 64", "takes 32 bytes"}},
      {"ValueBytesI1PackedAsBits",
       [](V p) { value(p, 0, 10)["bytes"] = 4; },
       {layer + ", value 10: 'bytes' is 4", "tensor<4x8xi1> takes 32 bytes"}},
      {"ViewBytes",
       [](V p) { value(p, 0, 9)["bytes"] = 32; },
       {layer + ", value 9: 'bytes' is 32"}},
      {"StorageMissing",
       [](V p) { value(p, 0, 4).erase("storage"); },
       {layer + ", value 4: 'storage' is missing"}},
      {"StorageTwoKinds",
       [](V p) { storage(p, 0, 4)["result"] = 0; },
       {layer + ", value 4: 'storage' must be one of"}},
      {"StorageUnknownKind",
       [](V p) {
         storage(p, 0, 4) = json::Object{{"constant", 1}};
       },
       {layer + ", value 4: 'storage' must be one of"}},
      {"ArgumentIndex",
       [](V p) { storage(p, 0, 0)["arg"] = 3; },
       {layer + ", value 0: 'storage.arg' is 3",
        "the function has 3 arguments"}},
      {"ResultIndex",
       [](V p) { storage(p, 0, 8)["result"] = 5; },
       {layer + ", value 8: 'storage.result' is 5",
        "the function has 3 results"}},
      {"ResultIndexNegative",
       [](V p) { storage(p, 0, 8)["result"] = -1; },
       {layer + ", value 8: 'storage.result' is -1"}},
      {"ArenaOffsetPastEnd",
       [](V p) { storage(p, 0, 11)["arena_offset"] = 105; },
       {layer + ", value 11: 'storage.arena_offset' is 105",
        "end past the 168 bytes of the arena"}},
      {"ArenaTooSmall",
       [](V p) { function(p, 0)["arena_bytes"] = 160; },
       {layer + ", value 11: 'storage.arena_offset' is 104",
        "end past the 160 bytes"}},
      {"ArenaOffsetNegative",
       [](V p) { storage(p, 0, 11)["arena_offset"] = -1; },
       {layer + ", value 11: 'storage.arena_offset' is -1",
        "no place in the arena"}},
      {"ArenaOffsetNotANumber",
       [](V p) { storage(p, 0, 11)["arena_offset"] = nullptr; },
       {layer + ", value 11: 'storage.arena_offset' must be an integer"}},
      {"ViewOfMissingValue",
       [](V p) { storage(p, 0, 6)["view_of"] = 40; },
       {layer + ", value 6: 'storage.view_of' refers to value 40",
        "the function has 13 values"}},
      {"ViewWithoutOffset",
       [](V p) { storage(p, 0, 6).erase("byte_offset"); },
       {layer + ", value 6: 'storage'"}},
      {"ViewPastItsBase",
       [](V p) { storage(p, 0, 7)["byte_offset"] = 6; },
       {layer + ", value 7: 'storage.byte_offset' is 6",
        "end past the 8 bytes of value 2"}},
      {"ViewOffsetNegative",
       [](V p) { storage(p, 0, 7)["byte_offset"] = -4; },
       {layer + ", value 7: 'storage.byte_offset' is -4"}},
      {"ViewOfItself",
       [](V p) { storage(p, 0, 6)["view_of"] = 6; },
       {layer + ", value 6: 'storage.view_of' refers to the value itself"}},
      {"ViewCycle",
       [](V p) {
         storage(p, 0, 6) = json::Object{{"view_of", 7}, {"byte_offset", 0}};
         storage(p, 0, 7) = json::Object{{"view_of", 6}, {"byte_offset", 0}};
       },
       {layer + ", value 6: 'storage.view_of'", "cycle"}},

      // The interface.
      {"ArgumentValueOutOfRange",
       [](V p) { entry(p, 0, "arguments", 0)["value"] = 50; },
       {layer + ", argument 0: 'value' refers to value 50",
        "the function has 13 values"}},
      {"ArgumentValueNotItsArgument",
       [](V p) { entry(p, 0, "arguments", 1)["value"] = 0; },
       {layer + ", argument 1: 'value' is value 0",
        "storage is not {\"arg\": 1}"}},
      {"InterfaceName",
       [](V p) { entry(p, 0, "arguments", 0)["te.name"] = 3; },
       {layer + ", argument 0: 'te.name' must be a string"}},
      {"InterfaceParameter",
       [](V p) { entry(p, 0, "arguments", 1)["te.parameter"] = 1; },
       {layer + ", argument 1: 'te.parameter' must be a boolean"}},
      {"UpdatesArgOutOfRange",
       [](V p) { entry(p, 0, "results", 2)["te.updates_arg"] = 9; },
       {layer + ", result 2: 'te.updates_arg' is 9",
        "the function has 3 arguments"}},
      {"UpdatesArgOfAnotherType",
       [](V p) { entry(p, 0, "results", 2)["te.updates_arg"] = 1; },
       {layer + ", result 2: 'te.updates_arg' is 1", "tensor<8x8xbf16>",
        "tensor<2xf32>"}},
      {"UpdatesArgNegative",
       [](V p) { entry(p, 0, "results", 2)["te.updates_arg"] = -1; },
       {layer + ", result 2: 'te.updates_arg' is -1"}},
      {"ForwardArgOutOfRange",
       [](V p) { entry(p, 1, "arguments", 1)["te.forward_arg"] = 7; },
       {layerBackward + ", argument 1: 'te.forward_arg' is 7",
        "'layer' has 3 arguments"}},
      {"ForwardResultOfAnotherType",
       [](V p) { entry(p, 1, "arguments", 2)["te.forward_result"] = 0; },
       {layerBackward + ", argument 2: 'te.forward_result' is 0",
        "tensor<4x8xbf16>", "tensor<4x8xi1>"}},
      {"GradOfOutOfRange",
       [](V p) { entry(p, 1, "results", 0)["te.grad_of"] = 3; },
       {layerBackward + ", result 0: 'te.grad_of' is 3"}},
      {"AccumulatesUnknownArgument",
       [](V p) { entry(p, 1, "results", 0)["te.accumulates"] = "main_grad.x"; },
       {layerBackward + ", result 0: 'te.accumulates' names 'main_grad.x'",
        "not an argument"}},
      {"AccumulatesAForwardArgument",
       [](V p) {
         entry(p, 1, "arguments", 1)["te.name"] = "x";
         entry(p, 1, "results", 0)["te.accumulates"] = "x";
       },
       {layerBackward + ", result 0: 'te.accumulates'",
        "an argument of the backward's own"}},
      {"GradOfInAForward",
       [](V p) { entry(p, 0, "results", 0)["te.grad_of"] = 0; },
       {layer + ", result 0: 'te.grad_of'", "not a backward"}},

      // Steps.
      {"StepKindMissing",
       [](V p) { step(p, 0, 0).erase("kind"); },
       {layer + ", step 0: 'kind' is missing"}},
      {"StepKindUnknown",
       [](V p) { step(p, 0, 4)["kind"] = "memcpy"; },
       {layer + ", step 4 (memcpy): 'kind' is unknown",
        "tp_reducescatter, cp_allgather, cp_reducescatter or cp_alltoall)"}},
      {"KernelName",
       [](V p) { step(p, 0, 0).erase("name"); },
       {layer + ", step 0 (kernel): 'name' is missing"}},
      {"KernelBinary",
       [](V p) { step(p, 0, 3)["binary"] = ""; },
       {layer + ", step 3 (kernel): 'binary' is empty"}},
      {"KernelGridRank",
       [](V p) {
         step(p, 0, 0)["grid"] = json::Array{2, 1};
       },
       {layer + ", step 0 (kernel): 'grid' must list 3 sizes", "got 2"}},
      {"KernelGridNotAnArray",
       [](V p) { step(p, 0, 0)["grid"] = 2; },
       {layer + ", step 0 (kernel): 'grid' must be an array"}},
      {"KernelGridNegative",
       [](V p) {
         step(p, 0, 0)["grid"] = json::Array{-2, 1, 1};
       },
       {layer + ", step 0 (kernel): 'grid[0]' is -2"}},
      {"KernelGridFraction",
       [](V p) {
         step(p, 0, 0)["grid"] = json::Array{1, 1.5, 1};
       },
       {layer + ", step 0 (kernel): 'grid[1]' must be an integer"}},
      {"KernelBlockZero",
       [](V p) {
         step(p, 0, 3)["block"] = json::Array{256, 1, 0};
       },
       {layer + ", step 3 (kernel): 'block[2]' is 0", "positive"}},
      {"KernelSharedBytes",
       [](V p) { step(p, 0, 0)["shared_bytes"] = -1; },
       {layer + ", step 0 (kernel): 'shared_bytes' is -1"}},
      {"KernelArgValue",
       [](V p) { kernelArg(p, 0, 0, 2)["value"] = 99; },
       {layer + ", step 0 (kernel): 'args[2].value' refers to value 99 but "
                "the function has 13 values"}},
      {"KernelArgValueMissing",
       [](V p) { kernelArg(p, 1, 0, 1).erase("value"); },
       {layerBackward + ", step 0 (kernel): 'args[1].value' is missing"}},
      {"KernelArgOutput",
       [](V p) { kernelArg(p, 0, 0, 3)["output"] = "yes"; },
       {layer + ", step 0 (kernel): 'args[3].output' must be a boolean"}},
      {"KernelArgZeroedInput",
       [](V p) { kernelArg(p, 0, 0, 0)["zero_before_launch"] = true; },
       {layer + ", step 0 (kernel): 'args[0].zero_before_launch'", "input"}},
      {"KernelArgs",
       [](V p) { step(p, 0, 0).erase("args"); },
       {layer + ", step 0 (kernel): 'args' is missing"}},
      {"ScratchZeroPastTheEnd",
       [](V p) {
         step(p, 0, 0)["scratch_bytes"] = 64;
         step(p, 0, 0)["scratch_zero"] =
             json::Object{{"offset", 48}, {"bytes", 32}};
       },
       {layer + ", step 0 (kernel): 'scratch_zero' is 32 bytes from byte 48",
        "past the end of the step's 64 bytes of scratch"}},
      {"ScratchZeroWithoutScratch",
       [](V p) {
         step(p, 0, 0)["scratch_zero"] =
             json::Object{{"offset", 0}, {"bytes", 4}};
       },
       {layer + ", step 0 (kernel): 'scratch_zero'", "0 bytes of scratch"}},
      {"ScratchZeroOffsetNegative",
       [](V p) {
         step(p, 0, 0)["scratch_bytes"] = 64;
         step(p, 0, 0)["scratch_zero"] =
             json::Object{{"offset", -4}, {"bytes", 4}};
       },
       {layer + ", step 0 (kernel): 'scratch_zero.offset' is -4"}},
      {"ScratchZeroBytesMissing",
       [](V p) {
         step(p, 0, 0)["scratch_bytes"] = 64;
         step(p, 0, 0)["scratch_zero"] = json::Object{{"offset", 0}};
       },
       {layer + ", step 0 (kernel): 'scratch_zero.bytes' is missing"}},
      {"ScratchZeroNotAnObject",
       [](V p) {
         step(p, 0, 0)["scratch_bytes"] = 64;
         step(p, 0, 0)["scratch_zero"] = 64;
       },
       {layer + ", step 0 (kernel): 'scratch_zero' must be an object"}},
      {"ScratchFromPreviousNotABoolean",
       [](V p) { step(p, 0, 3)["scratch_from_previous_step"] = 1; },
       {layer + ", step 3 (kernel): 'scratch_from_previous_step' must be a "
                "boolean"}},
      {"ScratchFromPreviousOnTheFirstStep",
       [](V p) {
         step(p, 1, 0)["scratch_bytes"] = 16;
         step(p, 1, 0)["scratch_from_previous_step"] = true;
       },
       {layerBackward + ", step 0 (kernel): 'scratch_from_previous_step' is "
                        "set, but there is no step before it"}},
      {"ScratchFromPreviousAfterAttention",
       [](V p) {
         step(p, 0, 3)["scratch_bytes"] = 16;
         step(p, 0, 3)["scratch_from_previous_step"] = true;
       },
       {layer + ", step 3 (kernel): 'scratch_from_previous_step' is set, "
                "but step 2, before it, is not a kernel"}},
      {"ScratchFromPreviousWithoutScratch",
       [](V p) { insertStepAfterTheCast(p).erase("scratch_bytes"); },
       {layer + ", step 1 (kernel): 'scratch_from_previous_step' is set, "
                "but the step takes no scratch"}},
      {"ScratchFromPreviousMoreThanItLeft",
       [](V p) { insertStepAfterTheCast(p)["scratch_bytes"] = 128; },
       {layer + ", step 1 (kernel): 'scratch_from_previous_step' is set, "
                "but step 0 ('layer_cast_0'), before it, has 64 bytes of "
                "scratch, fewer than 128"}},
      {"ScratchFromPreviousAfterAKernelWithout",
       [](V p) {
         insertStepAfterTheCast(p);
         step(p, 0, 0).erase("scratch_bytes");
       },
       {layer + ", step 1 (kernel): 'scratch_from_previous_step' is set, "
                "but step 0 ('layer_cast_0'), before it, has 0 bytes of "
                "scratch, fewer than 64"}},
      {"ScratchFromPreviousWithAZeroRange",
       [](V p) {
         insertStepAfterTheCast(p)["scratch_zero"] =
             json::Object{{"offset", 0}, {"bytes", 4}};
       },
       {layer + ", step 1 (kernel): 'scratch_zero' is given, but the step "
                "reads the scratch as the previous step left it"}},

      {"GemmA",
       [](V p) { step(p, 0, 1)["a"] = 99; },
       {layer + ", step 1 (gemm): 'a' refers to value 99 but the function "
                "has 13 values"}},
      {"GemmBNull",
       [](V p) { step(p, 0, 1)["b"] = nullptr; },
       {layer + ", step 1 (gemm): 'b' must be an integer, got null"}},
      {"GemmOut",
       [](V p) { step(p, 1, 1)["out"] = 7; },
       {layerBackward + ", step 1 (gemm): 'out' refers to value 7 but the "
                        "function has 7 values"}},
      {"GemmATypeUnparsable",
       [](V p) { step(p, 0, 1)["a_type"] = "tensor<4x8>"; },
       {layer + ", step 1 (gemm): 'a_type'", "element type '8'"}},
      {"GemmATypeNotTheValues",
       [](V p) { step(p, 0, 1)["a_type"] = "tensor<4x8xf8E5M2>"; },
       {layer + ", step 1 (gemm): 'a_type' is tensor<4x8xf8E5M2>", "value 3",
        "tensor<4x8xf8E4M3FN>"}},
      {"GemmOutTypeMissing",
       [](V p) { step(p, 0, 1).erase("out_type"); },
       {layer + ", step 1 (gemm): 'out_type' is missing"}},
      {"GemmFp8WithoutAScaleInv",
       [](V p) { step(p, 0, 1).erase("a_scale_inv"); },
       {layer + ", step 1 (gemm): 'a_scale_inv' is missing"}},
      {"GemmFp8WithoutBScaleInv",
       [](V p) { step(p, 0, 1).erase("b_scale_inv"); },
       {layer + ", step 1 (gemm): 'b_scale_inv' is missing"}},
      {"GemmScaleInvOutOfRange",
       [](V p) { step(p, 0, 1)["b_scale_inv"] = 13; },
       {layer + ", step 1 (gemm): 'b_scale_inv' refers to value 13"}},
      {"GemmScaleInvNotAScalar",
       [](V p) { step(p, 0, 1)["a_scale_inv"] = 5; },
       {layer + ", step 1 (gemm): 'a_scale_inv' refers to value 5",
        "tensor<2xf32>", "tensor<1xf32>"}},
      {"GemmLayout",
       [](V p) { step(p, 0, 1)["layout"] = "NN"; },
       {layer + ", step 1 (gemm): 'layout' is \"NN\""}},
      {"GemmFp8WithTranspose",
       [](V p) { step(p, 0, 1)["transpose_b"] = true; },
       {layer + ", step 1 (gemm): 'transpose_b'"}},
      {"GemmScaledWithHighPrecisionOperand",
       [](V p) {
         step(p, 1, 1)["a_scale_inv"] = 0;
         step(p, 1, 1)["b_scale_inv"] = 0;
       },
       {layerBackward + ", step 1 (gemm): 'a_type' must be FP8"}},
      {"GemmScalingUnknown",
       [](V p) { step(p, 0, 1)["a_scaling"] = "block"; },
       {layer + ", step 1 (gemm): 'a_scaling' is \"block\"; expected "
                "\"tensor\", \"block_1d\" or \"block_2d\""}},
      {"GemmScalingNotAString",
       [](V p) { step(p, 0, 1)["b_scaling"] = 2; },
       {layer + ", step 1 (gemm): 'b_scaling' must be a string"}},
      {"GemmScalingWithoutFp8",
       [](V p) { step(p, 1, 1)["a_scaling"] = "tensor"; },
       {layerBackward + ", step 1 (gemm): 'a_scaling' is given for a GEMM "
                        "that is not FP8"}},
      {"GemmBlockScalingOfASingleScale",
       [](V p) { step(p, 0, 1)["a_scaling"] = "block_1d"; },
       {layer + ", step 1 (gemm): 'a_scale_inv' refers to value 6 of type "
                "tensor<1xf32>, expected tensor<1x4xf32> (the block_1d "
                "scales of tensor<4x8xf8E4M3FN>"}},
      {"GemmBlockScaleInvOfAnotherShape",
       [](V p) {
         makeBlockScaled(p);
         step(p, 0, 1)["b_scaling"] = "block_1d"; // [1, pad4(8)]
       },
       {layer + ", step 1 (gemm): 'b_scale_inv' refers to value 14 of type "
                "tensor<1x4xf32>, expected tensor<1x8xf32>"}},
      {"GemmBlockScalingOfOneOperand",
       [](V p) {
         makeBlockScaled(p);
         step(p, 0, 1)["b_scaling"] = "tensor";
         step(p, 0, 1)["b_scale_inv"] = 7;
       },
       {layer + ", step 1 (gemm): 'b_scaling' is \"tensor\", but "
                "'a_scaling' is \"block_1d\": both operands are "
                "block-scaled or neither"}},
      {"GemmTwo2DBlockScalings",
       [](V p) {
         makeBlockScaled(p);
         step(p, 0, 1)["a_scaling"] = "block_2d"; // a's 2-D scales: [1, 4]
       },
       {layer + ", step 1 (gemm): 'b_scaling' is \"block_2d\" like "
                "'a_scaling'"}},
      {"GemmBlockScaledWithFastAccum",
       [](V p) {
         makeBlockScaled(p);
         step(p, 0, 1)["fast_accum"] = true;
       },
       {layer + ", step 1 (gemm): 'fast_accum' is true for a block-scaled "
                "GEMM"}},
      {"GemmBlockScaledWithEpilogue",
       [](V p) {
         makeBlockScaled(p);
         step(p, 0, 1)["epilogue"] = json::Object{{"gelu", true}};
       },
       {layer + ", step 1 (gemm): 'epilogue' has terms other than a "
                "residual, which block-scaled GEMMs do not take"}},
      {"GemmFastAccumWithoutFp8",
       [](V p) { step(p, 1, 1)["fast_accum"] = true; },
       {layerBackward + ", step 1 (gemm): 'fast_accum'", "not FP8"}},
      {"GemmTranspose",
       [](V p) { step(p, 1, 1)["transpose_a"] = "yes"; },
       {layerBackward + ", step 1 (gemm): 'transpose_a' must be a boolean"}},
      {"GemmEpilogueBias",
       [](V p) {
         step(p, 0, 1)["epilogue"] = json::Object{{"bias", 77}};
       },
       {layer + ", step 1 (gemm): 'epilogue.bias' refers to value 77"}},
      {"GemmEpilogueBiasGrad",
       [](V p) {
         step(p, 1, 1)["epilogue"] = json::Object{{"bias_grad", -2}};
       },
       {layerBackward + ", step 1 (gemm): 'epilogue.bias_grad' refers to "
                        "value -2"}},
      {"GemmEpilogueUnknownTerm",
       [](V p) {
         step(p, 0, 1)["epilogue"] = json::Object{{"relu", true}};
       },
       {layer + ", step 1 (gemm): 'epilogue.relu' is not an epilogue term"}},
      {"GemmEpilogueGeluNotABoolean",
       [](V p) {
         step(p, 0, 1)["epilogue"] = json::Object{{"gelu", 1}};
       },
       {layer + ", step 1 (gemm): 'epilogue.gelu' must be a boolean"}},
      {"GemmEpilogueDgeluWithoutAux",
       [](V p) {
         step(p, 1, 1)["epilogue"] = json::Object{{"dgelu", true}};
       },
       {layerBackward + ", step 1 (gemm): 'epilogue.aux' is missing"}},
      {"GemmEpilogueAuxOfAnotherShape",
       [](V p) {
         step(p, 0, 1)["epilogue"] = json::Object{{"gelu", true}, {"aux", 5}};
       },
       {layer + ", step 1 (gemm): 'epilogue.aux' is value 5"}},
      {"GemmEpilogueResidualOfAnotherType",
       [](V p) {
         step(p, 0, 1)["epilogue"] = json::Object{{"residual", 5}};
       },
       {layer + ", step 1 (gemm): 'epilogue.residual' is value 5",
        "not the GEMM output's type"}},
      {"GemmEpilogueResidualWithGelu",
       [](V p) {
         step(p, 0, 1)["epilogue"] =
             json::Object{{"gelu", true}, {"residual", 11}};
       },
       {layer + ", step 1 (gemm): 'epilogue.residual' is only added after "
                "a bias"}},
      {"GemmEpilogueAuxWithoutGelu",
       [](V p) {
         step(p, 0, 1)["epilogue"] = json::Object{{"aux", 11}};
       },
       {layer + ", step 1 (gemm): 'epilogue.aux' is given without gelu"}},
      {"GemmEpilogueDScaleForHighPrecisionOutput",
       [](V p) {
         step(p, 0, 1)["epilogue"] =
             json::Object{{"d_scale", 6}, {"amax_d", 7}};
       },
       {layer + ", step 1 (gemm): 'epilogue.d_scale'", "not FP8"}},
      {"GemmEpilogueAmaxDNotAScalar",
       [](V p) {
         step(p, 0, 1)["epilogue"] = json::Object{{"amax_d", 12}};
       },
       {layer + ", step 1 (gemm): 'epilogue.amax_d' refers to value 12",
        "tensor<1xf32>"}},
      {"GemmFp8OutputWithoutDScale",
       [](V p) {
         // Out is value 4 (E4M3): an FP8 output needs a D scale.
         step(p, 0, 1)["out"] = 4;
         step(p, 0, 1)["out_type"] = "tensor<8x8xf8E4M3FN>";
       },
       {layer + ", step 1 (gemm): 'epilogue.d_scale' is missing"}},

      {"AttentionOperand",
       [](V p) {
         step(p, 0, 2)["operands"] = json::Array{9, 42, 9};
       },
       {layer + ", step 2 (attention): 'operands[1]' refers to value 42"}},
      {"AttentionOperandsMissing",
       [](V p) { step(p, 0, 2).erase("operands"); },
       {layer + ", step 2 (attention): 'operands' is missing"}},
      {"AttentionBwdResult",
       [](V p) { step(p, 1, 2)["results"] = json::Array{-1}; },
       {layerBackward +
        ", step 2 (attention_bwd): 'results[0]' refers to value -1"}},
      {"AttentionAttribute",
       [](V p) { (*step(p, 0, 2).getObject("attributes"))["stream"] = 0; },
       {layer + ", step 2 (attention): 'attributes.stream' must be a string"}},
      {"AttentionTokenStrideRole",
       [](V p) {
         step(p, 0, 2)["token_strides"] = json::Object{{"o", 192}};
       },
       {layer + ", step 2 (attention): 'token_strides.o' is not a role (q, k, "
                "v, grad_q, grad_k, grad_v)"}},
      {"AttentionTokenStrideZero",
       [](V p) {
         step(p, 0, 2)["token_strides"] = json::Object{{"q", 0}};
       },
       {layer + ", step 2 (attention): 'token_strides.q' must be positive, "
                "got 0"}},

      {"AmaxAllReduceIn",
       [](V p) { step(p, 0, 4)["in"] = 13; },
       {layer + ", step 4 (amax_allreduce): 'in' refers to value 13 but "
                "the function has 13 values"}},
      {"AmaxAllReduceOutMissing",
       [](V p) { step(p, 0, 4).erase("out"); },
       {layer + ", step 4 (amax_allreduce): 'out' is missing"}},
      {"AmaxAllReduceOutOfAnotherType",
       [](V p) { step(p, 0, 4)["out"] = 11; },
       {layer + ", step 4 (amax_allreduce): 'out' is value 11",
        "tensor<4x8xbf16>"}},

      {"TpAllReduceRanksMissing",
       [](V p) {
         appendTpAllReduce(p);
         step(p, 0, 5).erase("ranks");
       },
       {layer + ", step 5 (tp_allreduce): 'ranks' is missing"}},
      {"TpAllReduceRanksNotAnInteger",
       [](V p) {
         appendTpAllReduce(p);
         step(p, 0, 5)["ranks"] = "2";
       },
       {layer + ", step 5 (tp_allreduce): 'ranks' must be an integer"}},
      {"TpAllReduceOneRank",
       [](V p) {
         appendTpAllReduce(p);
         step(p, 0, 5)["ranks"] = 1;
       },
       {layer + ", step 5 (tp_allreduce): 'ranks' is 1; a tensor-parallel "
                "all-reduce spans at least 2 ranks"}},
      {"TpAllReduceInMissing",
       [](V p) {
         appendTpAllReduce(p);
         step(p, 0, 5).erase("in");
       },
       {layer + ", step 5 (tp_allreduce): 'in' is missing"}},
      {"TpAllReduceOutOutOfRange",
       [](V p) {
         appendTpAllReduce(p);
         step(p, 0, 5)["out"] = 14;
       },
       {layer + ", step 5 (tp_allreduce): 'out' refers to value 14 but the "
                "function has 14 values"}},
      {"TpAllReduceOutOfAnotherType",
       [](V p) {
         appendTpAllReduce(p);
         step(p, 0, 5)["out"] = 5;
       },
       {layer + ", step 5 (tp_allreduce): 'out' is value 5 of type "
                "tensor<2xf32>, but 'in' (value 11) is tensor<4x8xbf16>; "
                "both must have the same type"}},
      {"TpAllReduceOfFp8",
       [](V p) {
         appendTpAllReduce(p);
         step(p, 0, 5)["in"] = 3;
         step(p, 0, 5)["out"] = 3;
       },
       {layer + ", step 5 (tp_allreduce): 'in' is value 3 of type "
                "tensor<4x8xf8E4M3FN>; a tensor-parallel all-reduce sums "
                "bf16, f16 or f32"}},
      {"TpAllReduceRanksDisagree",
       [](V p) {
         appendTpAllReduce(p);
         function(p, 1).getArray("steps")->push_back(json::Object{
             {"kind", "tp_allreduce"}, {"in", 3}, {"out", 4}, {"ranks", 4}});
       },
       {layerBackward + ", step 3 (tp_allreduce): 'ranks' is 4, but function "
                        "'layer', step 5 (tp_allreduce) has 2; a plan runs "
                        "over one tensor-parallel group"}},

      // Sequence parallelism's gathers and scatters.
      {"TpAllGatherRanksMissing",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         step(p, 0, 5).erase("ranks");
       },
       {layer + ", step 5 (tp_allgather): 'ranks' is missing"}},
      {"TpReduceScatterRanksNotAnInteger",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         step(p, 0, 5)["ranks"] = 2.5;
       },
       {layer + ", step 5 (tp_reducescatter): 'ranks' must be an integer"}},
      {"TpAllGatherOneRank",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         step(p, 0, 5)["ranks"] = 1;
       },
       {layer + ", step 5 (tp_allgather): 'ranks' is 1; a tensor-parallel "
                "all-gather spans at least 2 ranks"}},
      {"TpReduceScatterZeroRanks",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         step(p, 0, 5)["ranks"] = 0;
       },
       {layer + ", step 5 (tp_reducescatter): 'ranks' is 0; a "
                "tensor-parallel reduce-scatter spans at least 2 ranks"}},
      {"TpAllGatherInMissing",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         step(p, 0, 5).erase("in");
       },
       {layer + ", step 5 (tp_allgather): 'in' is missing"}},
      {"TpReduceScatterOutMissing",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         step(p, 0, 5).erase("out");
       },
       {layer + ", step 5 (tp_reducescatter): 'out' is missing"}},
      {"TpAllGatherOutOutOfRange",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         step(p, 0, 5)["out"] = 14;
       },
       {layer + ", step 5 (tp_allgather): 'out' refers to value 14 but the "
                "function has 14 values"}},
      {"TpReduceScatterInNegative",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         step(p, 0, 5)["in"] = -1;
       },
       {layer + ", step 5 (tp_reducescatter): 'in'"}},
      {"TpAllGatherOfFp8",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         step(p, 0, 5)["in"] = 3;  // tensor<4x8xf8E4M3FN>
         step(p, 0, 5)["out"] = 4; // tensor<8x8xf8E4M3FN>
       },
       {layer + ", step 5 (tp_allgather): 'in' is value 3 of type "
                "tensor<4x8xf8E4M3FN>; a tensor-parallel all-gather gathers "
                "bf16, f16 or f32"}},
      {"TpReduceScatterOfFp8",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         step(p, 0, 5)["in"] = 4;  // tensor<8x8xf8E4M3FN>
         step(p, 0, 5)["out"] = 3; // tensor<4x8xf8E4M3FN>
       },
       {layer + ", step 5 (tp_reducescatter): 'in' is value 4 of type "
                "tensor<8x8xf8E4M3FN>; a tensor-parallel reduce-scatter sums "
                "bf16, f16 or f32"}},
      {"TpAllGatherOutOfAnotherElementType",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         value(p, 0, 13)["type"] = "tensor<8x8xf16>";
       },
       {layer + ", step 5 (tp_allgather): 'out' is value 13 of type "
                "tensor<8x8xf16>, but 'in' (value 11) is tensor<4x8xbf16>; "
                "both must have the same element type"}},
      {"TpReduceScatterOutOfAnotherElementType",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         step(p, 0, 5)["out"] = 5; // tensor<2xf32>
       },
       {layer + ", step 5 (tp_reducescatter): 'out' is value 5 of type "
                "tensor<2xf32>, but 'in' (value 11) is tensor<4x8xbf16>; "
                "both must have the same element type"}},
      {"TpAllGatherOutTooSmall",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         step(p, 0, 5)["out"] = 8; // tensor<4x8xbf16>, as large as `in`
       },
       {layer + ", step 5 (tp_allgather): 'out' is value 8 of type "
                "tensor<4x8xbf16> (32 elements), but 'in' (value 11) holds "
                "32; a tensor-parallel all-gather over 2 ranks writes 2 times "
                "the elements it reads"}},
      {"TpAllGatherRanksDoNotMatchTheSizes",
       [](V p) {
         appendTpCollective(p, "tp_allgather"); // out: 2 * 32 elements
         step(p, 0, 5)["ranks"] = 4;
       },
       {layer + ", step 5 (tp_allgather): 'out' is value 13 of type "
                "tensor<8x8xbf16> (64 elements), but 'in' (value 11) holds "
                "32; a tensor-parallel all-gather over 4 ranks writes 4 times "
                "the elements it reads"}},
      {"TpReduceScatterOutTooLarge",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         value(p, 0, 13)["type"] = "tensor<3x8xbf16>";
         value(p, 0, 13)["bytes"] = 48;
         function(p, 0)["arena_bytes"] = 216;
       },
       {layer + ", step 5 (tp_reducescatter): 'in' is value 11 of type "
                "tensor<4x8xbf16> (32 elements), but 'out' (value 13) holds "
                "24; a tensor-parallel reduce-scatter over 2 ranks reads 2 "
                "times the elements it writes"}},
      {"TpReduceScatterRanksDoNotDivide",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter"); // out: 16 elements
         step(p, 0, 5)["ranks"] = 3;
       },
       {layer + ", step 5 (tp_reducescatter): 'in' is value 11 of type "
                "tensor<4x8xbf16> (32 elements), but 'out' (value 13) holds "
                "16; a tensor-parallel reduce-scatter over 3 ranks"}},
      {"TpAllGatherInPlace",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         // Rank 1's chunk of `out` is `in`: NCCL's in-place form.
         storage(p, 0, 13)["arena_offset"] = 40;
       },
       {layer + ", step 5 (tp_allgather): 'out' is value 13, which shares "
                "bytes with 'in' (value 11); a tensor-parallel all-gather "
                "runs out of place"}},
      {"TpReduceScatterThroughAView",
       [](V p) {
         appendTpCollective(p, "tp_reducescatter");
         // `out` views the second half of `in`.
         storage(p, 0, 13) = json::Object{{"view_of", 11}, {"byte_offset", 32}};
       },
       {layer + ", step 5 (tp_reducescatter): 'out' is value 13, which "
                "shares bytes with 'in' (value 11); a tensor-parallel "
                "reduce-scatter runs out of place"}},
      {"TpAllGatherRanksDisagreeWithASum",
       [](V p) {
         appendTpCollective(p, "tp_allgather");
         function(p, 1).getArray("steps")->push_back(json::Object{
             {"kind", "tp_allreduce"}, {"in", 3}, {"out", 4}, {"ranks", 4}});
       },
       {layerBackward + ", step 3 (tp_allreduce): 'ranks' is 4, but function "
                        "'layer', step 5 (tp_allgather) has 2; a plan runs "
                        "over one tensor-parallel group"}},
      {"TpReduceScatterRanksDisagreeWithASum",
       [](V p) {
         appendTpAllReduce(p);
         // 32 elements of value 3 to the 8 of value 6 over 4 ranks.
         function(p, 1).getArray("steps")->push_back(
             json::Object{{"kind", "tp_reducescatter"},
                          {"in", 3},
                          {"out", 6},
                          {"ranks", 4}});
       },
       {layerBackward + ", step 3 (tp_reducescatter): 'ranks' is 4, but "
                        "function 'layer', step 5 (tp_allreduce) has 2; a "
                        "plan runs over one tensor-parallel group"}},
  };
}

class PlanErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(PlanErrorTest, NamesTheProblem) {
  expectRefused(basePlan(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Checks, PlanErrorTest,
                         ::testing::ValuesIn(errorCases()), errorCaseName);

//===----------------------------------------------------------------------===//
// The plans te-compile writes
//===----------------------------------------------------------------------===//

#ifdef TEJIT_TEST_PLAN_DIR
/// The directories under TEJIT_TEST_PLAN_DIR that hold a plan.json, sorted.
std::vector<std::string> planDirectories() {
  std::vector<std::string> names;
  std::error_code error;
  for (llvm::sys::fs::directory_iterator it(TEJIT_TEST_PLAN_DIR, error), end;
       !error && it != end; it.increment(error)) {
    llvm::SmallString<256> plan(it->path());
    llvm::sys::path::append(plan, "plan.json");
    if (llvm::sys::fs::exists(plan))
      names.push_back(llvm::sys::path::filename(it->path()).str());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(RealPlansTest, WereGenerated) {
  EXPECT_FALSE(planDirectories().empty())
      << "no */plan.json under " << TEJIT_TEST_PLAN_DIR
      << " (the build generates them with te-compile)";
}

class RealPlanTest : public ::testing::TestWithParam<std::string> {
protected:
  /// The parameter's plan.json, parsed; a test failure when it is not.
  std::optional<Plan> loadPlan() const {
    llvm::SmallString<256> path(TEJIT_TEST_PLAN_DIR);
    llvm::sys::path::append(path, GetParam(), "plan.json");
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> text =
        llvm::MemoryBuffer::getFile(path);
    if (!text) {
      ADD_FAILURE() << "cannot read " << path.str().str();
      return std::nullopt;
    }
    llvm::Expected<Plan> plan = parsePlan((*text)->getBuffer());
    if (!plan) {
      ADD_FAILURE() << llvm::toString(plan.takeError());
      return std::nullopt;
    }
    return std::move(*plan);
  }
};

TEST_P(RealPlanTest, Parses) {
  llvm::SmallString<256> path(TEJIT_TEST_PLAN_DIR);
  llvm::sys::path::append(path, GetParam(), "plan.json");
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> text =
      llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(bool(text)) << "cannot read " << path.str().str() << ": "
                          << text.getError().message();
  llvm::Expected<Plan> plan = parsePlan((*text)->getBuffer());
  ASSERT_TRUE(bool(plan)) << path.str().str() << ": "
                          << llvm::toString(plan.takeError());

  // What the parser keeps agrees with the document.
  llvm::Expected<json::Value> document = json::parse((*text)->getBuffer());
  ASSERT_TRUE(bool(document)) << llvm::toString(document.takeError());
  const json::Array &functions =
      *document->getAsObject()->getArray("functions");
  ASSERT_EQ(plan->functions.size(), functions.size());
  for (auto [function, object] : llvm::zip(plan->functions, functions)) {
    const json::Object &fields = *object.getAsObject();
    EXPECT_EQ(function.values.size(), fields.getArray("values")->size());
    ASSERT_EQ(function.steps.size(), fields.getArray("steps")->size());
    for (auto [step, node] :
         llvm::zip(function.steps, *fields.getArray("steps"))) {
      llvm::StringRef kind = *node.getAsObject()->getString("kind");
      // docs/grouped-linear.md: `"op": "grouped_gemm"` (in a "gemm" step or
      // a kind of its own).
      if (node.getAsObject()->getString("op") == "grouped_gemm")
        kind = "grouped_gemm";
      if (kind == "grouped_gemm")
        EXPECT_TRUE(std::holds_alternative<GroupedGemmStep>(step));
      else if (kind == "kernel")
        EXPECT_TRUE(std::holds_alternative<KernelStep>(step));
      else if (kind == "gemm")
        EXPECT_TRUE(std::holds_alternative<GemmStep>(step));
      else if (kind == "amax_allreduce")
        EXPECT_TRUE(std::holds_alternative<AmaxAllReduceStep>(step));
      else if (kind == "tp_allreduce")
        EXPECT_TRUE(std::holds_alternative<TpAllReduceStep>(step));
      else if (kind == "tp_allgather")
        EXPECT_TRUE(std::holds_alternative<TpAllGatherStep>(step));
      else if (kind == "tp_reducescatter")
        EXPECT_TRUE(std::holds_alternative<TpReduceScatterStep>(step));
      else if (kind == "cp_allgather" || kind == "cp_reducescatter" ||
               kind == "cp_alltoall") {
        const auto *cp = std::get_if<CpCollectiveStep>(&step);
        ASSERT_TRUE(cp) << kind.str();
        EXPECT_EQ(cp->allToAll, kind == "cp_alltoall");
        if (!cp->allToAll) {
          EXPECT_EQ(cp->gather, kind == "cp_allgather");
        }
      } else if (const auto *attention = std::get_if<AttentionStep>(&step)) {
        EXPECT_EQ(attention->backward,
                  kind == "attention_bwd" || kind == "attention_backward")
            << kind.str();
        EXPECT_EQ(attention->kvCache, kind == "kv_cache_attention")
            << kind.str();
      } else
        ADD_FAILURE() << "step kind " << kind.str();
    }
  }

  // A forward, a backward exactly when training, and a wgrad function
  // exactly with delay_wgrad_compute.
  const FunctionPlan *forward = plan->forward();
  ASSERT_NE(forward, nullptr);
  const FunctionPlan *backward = plan->backwardOf(*forward);
  bool inference = llvm::StringRef(GetParam()).contains("inference");
  bool delays = llvm::StringRef(GetParam()).starts_with("delay_wgrad");
  EXPECT_EQ(backward == nullptr, inference);
  EXPECT_EQ(backward && plan->wgradOf(*backward), delays);
  EXPECT_EQ(plan->functions.size(), inference ? 1u : delays ? 3u : 2u);
}

// delay_wgrad_compute: the wgrad function reads the deferred results of the
// backward and the forward's saved tensors, and writes every weight's
// gradient; a main_grad it accumulates into is a backward argument no step
// of the backward touches (the caller may pass null there).
class WgradPlanTest : public RealPlanTest {};

TEST_P(WgradPlanTest, WgradFunctionReadsTheBackwardsResults) {
  std::optional<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  const FunctionPlan &backward = *plan->backwardOf(*plan->forward());
  const FunctionPlan &wgrad = *plan->wgradOf(backward);
  EXPECT_EQ(wgrad.wgradOf, backward.name);
  size_t deferred = 0;
  for (const InterfaceEntry &entry : wgrad.arguments) {
    EXPECT_TRUE(entry.forwardArg || entry.forwardResult || entry.backwardArg ||
                entry.backwardResult)
        << entry.name;
    if (entry.backwardResult) {
      ++deferred;
      EXPECT_EQ(backward.results[*entry.backwardResult].name, entry.name);
    }
    if (entry.backwardArg) {
      const InterfaceEntry &read = backward.arguments[*entry.backwardArg];
      EXPECT_EQ(read.name, entry.name);
      EXPECT_EQ(backward.isUnused(read.value),
                llvm::StringRef(read.name).starts_with("main_grad."));
    }
  }
  EXPECT_GT(deferred, 0u);
  for (const InterfaceEntry &entry : wgrad.results) {
    EXPECT_TRUE(entry.gradOf) << entry.name;
    EXPECT_TRUE(llvm::StringRef(entry.name).ends_with("weight")) << entry.name;
  }
  // Norm weights are no GEMM weights: their gradients stay.
  for (const InterfaceEntry &entry : backward.results)
    EXPECT_FALSE(llvm::StringRef(entry.name).ends_with("weight") &&
                 !llvm::StringRef(entry.name).ends_with("layer_norm_weight"))
        << entry.name;
}

TEST(PlanTest, WgradOfMustNameABackward) {
  const char *text = R"({"format": "tejit-plan", "version": 6,
    "arch": "sm_90a", "functions": [
      {"name": "f", "arguments": [], "results": [], "values": [],
       "steps": []},
      {"name": "f_backward_wgrad", "wgrad_of": "f", "arguments": [],
       "results": [], "values": [], "steps": []}]})";
  llvm::Expected<Plan> plan = parsePlan(llvm::StringRef(text));
  ASSERT_FALSE(bool(plan));
  EXPECT_THAT(llvm::toString(plan.takeError()),
              ::testing::HasSubstr("'wgrad_of' names 'f', which is not a "
                                   "backward function of the plan"));
}

// Every attention step te-compile writes is one the runtime reads (without
// cuDNN: AttentionLauncher::parse), and the KV-cache plans' steps are what
// their specs say: the paged one's (tests/lit/te-compile/Inputs/
// kv_cache_paged.yaml) reads pages of 8 rows from pools of 10 through a
// table of 4 pages a sequence.
TEST_P(RealPlanTest, AttentionStepsParse) {
  std::optional<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  bool paged = llvm::StringRef(GetParam()).contains("paged");
  size_t kvCacheSteps = 0;
  for (const FunctionPlan &function : plan->functions)
    for (const Step &step : function.steps) {
      const auto *attention = std::get_if<AttentionStep>(&step);
      if (!attention)
        continue;
      llvm::Expected<AttentionLauncher> launcher =
          AttentionLauncher::parse(*attention, function);
      ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
      if (!attention->kvCache)
        continue;
      ++kvCacheSteps;
      const AttentionProblem &p = launcher->problem();
      EXPECT_EQ(p.paged(), paged) << p.key();
      EXPECT_EQ(p.seqKv, 32) << p.key();
      if (paged) {
        EXPECT_EQ(p.pageSize, 8) << p.key();
        EXPECT_EQ(p.pages, 10) << p.key();
        EXPECT_TRUE(launcher->pageTableValue().has_value());
      }
    }
  bool kvCache = llvm::StringRef(GetParam()).starts_with("kv_cache");
  EXPECT_EQ(kvCacheSteps > 0, kvCache);
}

// Format 3: every FP8 state update of te-compile's plans may run in place,
// the saved slots of the state are copied before the steps, and a step
// reading the state after its update (made up here) rules it out.
TEST_P(RealPlanTest, StateUpdatesRunInPlace) {
  std::optional<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->version,
            llvm::StringRef(GetParam()).starts_with("delay_wgrad") ? 6 : 5);
  size_t updates = 0;
  for (FunctionPlan &function : plan->functions) {
    for (auto [index, entry] : llvm::enumerate(function.results)) {
      int64_t base = function.viewBase(entry.value).first;
      if (function.values[base].storage.kind == Storage::Argument) {
        EXPECT_TRUE(function.resultCopiedFirst(index))
            << function.name << ": result " << entry.name;
      }
      if (!entry.updatesArg) {
        EXPECT_FALSE(function.canUpdateInPlace(index));
        continue;
      }
      ++updates;
      EXPECT_TRUE(function.canUpdateInPlace(index))
          << function.name << ": " << entry.name;
      // Not when a later step reads the state argument ...
      FunctionPlan readAfter = function;
      KernelStep reader;
      reader.args.push_back(
          {function.arguments[*entry.updatesArg].value, false, false});
      readAfter.steps.push_back(reader);
      EXPECT_FALSE(readAfter.canUpdateInPlace(index))
          << function.name << ": " << entry.name;
      // A step writing the state argument: its saved slots are copied
      // after the steps, so they would see an update in place.
      FunctionPlan writesState = function;
      KernelStep writer;
      writer.args.push_back(
          {function.arguments[*entry.updatesArg].value, true, false});
      writesState.steps.insert(writesState.steps.begin(), writer);
      bool saved = false;
      for (auto [other, result] : llvm::enumerate(writesState.results))
        if (writesState.viewBase(result.value).first ==
            writesState.arguments[*entry.updatesArg].value) {
          saved = true;
          EXPECT_FALSE(writesState.resultCopiedFirst(other));
        }
      EXPECT_EQ(writesState.canUpdateInPlace(index), !saved);
      // ... nor when another step touches the new state.
      FunctionPlan usedElsewhere = function;
      usedElsewhere.steps.push_back(AmaxAllReduceStep{entry.value, 0});
      EXPECT_FALSE(usedElsewhere.canUpdateInPlace(index));
      // ... nor when a result viewing the state is copied after the steps
      // (here: one that another value views).
      FunctionPlan copiedLast = function;
      for (auto [other, result] : llvm::enumerate(copiedLast.results)) {
        int64_t viewed = result.value;
        if (copiedLast.viewBase(viewed).first !=
                copiedLast.arguments[*entry.updatesArg].value ||
            other == index)
          continue;
        ValueInfo view = copiedLast.values[viewed];
        view.id = int64_t(copiedLast.values.size());
        view.storage = {Storage::View, viewed, 0};
        copiedLast.values.push_back(view);
        EXPECT_FALSE(copiedLast.resultCopiedFirst(other));
        EXPECT_FALSE(copiedLast.canUpdateInPlace(index));
        break;
      }
    }
  }
  bool delayed = llvm::StringRef(GetParam()) == "quickstart_small" ||
                 llvm::StringRef(GetParam()) == "all_layers_small";
  if (delayed) {
    EXPECT_GT(updates, 0u) << "a DelayedScaling plan updates its state";
  }
}

// Format 4: every generated kernel takes the skip flag last, so the
// runtime can decide a weight cast on the device (Executor::run).
// fuse_wgrad_accumulation: each weight's gradient is its main_grad argument
// plus the wgrad GEMM, which reads main_grad as C, so the caller may pass
// main_grad's buffer as the result; not when a later step reads main_grad
// (made up here) or when no GEMM adds it. A grouped weight's main_grad may
// also be per-group matrices (groupedAccumulation), unless another step
// reads it, before or after.
TEST_P(RealPlanTest, MainGradsAccumulateInPlace) {
  std::optional<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  bool grouped = llvm::StringRef(GetParam()).starts_with("grouped_main_grad") ||
                 GetParam() == "delay_wgrad_grouped";
  size_t accumulations = 0;
  for (FunctionPlan &function : plan->functions) {
    for (auto [index, entry] : llvm::enumerate(function.results)) {
      if (!entry.accumulatesArg) {
        EXPECT_FALSE(function.canAccumulateInPlace(index));
        EXPECT_FALSE(function.groupedAccumulation(index));
        continue;
      }
      ++accumulations;
      const InterfaceEntry &mainGrad =
          function.arguments[*entry.accumulatesArg];
      EXPECT_EQ(mainGrad.name, "main_grad." + entry.name.substr(5));
      EXPECT_TRUE(function.canAccumulateInPlace(index)) << entry.name;
      std::optional<size_t> groupedStep = function.groupedAccumulation(index);
      EXPECT_EQ(groupedStep.has_value(), grouped) << entry.name;
      if (groupedStep) {
        EXPECT_TRUE(std::holds_alternative<GroupedGemmStep>(
            function.steps[*groupedStep]));
      }
      KernelStep reader;
      reader.args.push_back({mainGrad.value, false, false});
      FunctionPlan readAfter = function;
      readAfter.steps.push_back(reader);
      EXPECT_FALSE(readAfter.canAccumulateInPlace(index)) << entry.name;
      EXPECT_FALSE(readAfter.groupedAccumulation(index)) << entry.name;
      FunctionPlan readBefore = function;
      readBefore.steps.insert(readBefore.steps.begin(), reader);
      EXPECT_EQ(readBefore.canAccumulateInPlace(index), true) << entry.name;
      EXPECT_FALSE(readBefore.groupedAccumulation(index)) << entry.name;
      FunctionPlan noResidual = function;
      for (Step &step : noResidual.steps) {
        if (auto *gemm = std::get_if<GemmStep>(&step);
            gemm && gemm->epilogue.residual &&
            *gemm->epilogue.residual == mainGrad.value)
          gemm->epilogue.residual.reset();
        if (auto *gemm = std::get_if<GroupedGemmStep>(&step);
            gemm && gemm->accumulate && *gemm->accumulate == mainGrad.value)
          gemm->accumulate.reset();
      }
      EXPECT_FALSE(noResidual.canAccumulateInPlace(index)) << entry.name;
      EXPECT_FALSE(noResidual.groupedAccumulation(index)) << entry.name;
    }
  }
  // qkv, proj, fc1 and fc2 of the main_grad example's layer; the grouped
  // example's stacked weight.
  bool mainGradExample = llvm::StringRef(GetParam()).starts_with("main_grad");
  EXPECT_EQ(accumulations, mainGradExample ? 4u : grouped ? 1u : 0u);
}

// A forward that leaves the FP8 state (torch.no_grad()) drops the state's
// update: the steps only that needs (the DelayedScaling update, the amax
// reduction and the amax concatenation it reads) are skipped, nothing that
// writes a kept result or an argument is, and a step reading the update
// (made up here) keeps it.
TEST_P(RealPlanTest, LeavingTheStateSkipsOnlyItsUpdate) {
  std::optional<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  size_t skipped = 0;
  for (const FunctionPlan &function : plan->functions) {
    std::vector<size_t> updates;
    for (auto [index, entry] : llvm::enumerate(function.results))
      if (entry.updatesArg)
        updates.push_back(index);
    std::vector<bool> all = function.stepsNeededWithout({});
    EXPECT_EQ(llvm::count(all, false), 0) << function.name;
    std::vector<bool> needed = function.stepsNeededWithout(updates);
    ASSERT_EQ(needed.size(), function.steps.size());
    for (auto [index, step] : llvm::enumerate(function.steps)) {
      bool writesKept = false;
      forEachStepValue(step, [&](int64_t value, bool written) {
        const Storage &storage =
            function.values[function.viewBase(value).first].storage;
        if (written && (storage.kind == Storage::Argument ||
                        (storage.kind == Storage::Result &&
                         !llvm::is_contained(updates, storage.index))))
          writesKept = true;
      });
      if (writesKept) {
        EXPECT_TRUE(needed[index]) << function.name << ": step " << index;
      }
      if (needed[index])
        continue;
      ++skipped;
      const auto *kernel = std::get_if<KernelStep>(&step);
      bool update =
          kernel &&
          (llvm::StringRef(kernel->name).contains("delayed_scaling_update") ||
           llvm::StringRef(kernel->name).contains("concat"));
      EXPECT_TRUE(update || std::holds_alternative<AmaxAllReduceStep>(step))
          << function.name << ": step " << index;
    }
    // A step after the update that reads its new scales into a kept result.
    for (size_t result : updates) {
      FunctionPlan reads = function;
      KernelStep reader;
      reader.args.push_back({function.results[result].value, false, false});
      reader.args.push_back({function.results[0].value, true, false});
      reads.steps.push_back(reader);
      std::vector<size_t> others;
      for (size_t update : updates)
        if (update != result && update != 0)
          others.push_back(update);
      std::vector<bool> kept = reads.stepsNeededWithout(others);
      for (auto [index, step] : llvm::enumerate(reads.steps))
        forEachStepValue(step, [&](int64_t value, bool written) {
          if (written &&
              reads.viewBase(value).first ==
                  reads.viewBase(reads.results[result].value).first) {
            EXPECT_TRUE(kept[index]) << function.name << ": step " << index;
          }
        });
    }
  }
  // Plans with a DelayedScaling update skip it (and what only it reads);
  // plans without one skip nothing.
  bool delayed = llvm::any_of(plan->functions, [](const FunctionPlan &f) {
    return llvm::any_of(f.steps, [](const Step &step) {
      const auto *kernel = std::get_if<KernelStep>(&step);
      return kernel &&
             llvm::StringRef(kernel->name).contains("delayed_scaling_update");
    });
  });
  EXPECT_EQ(skipped > 0, delayed) << skipped << " steps skipped";
}

TEST_P(RealPlanTest, KernelsTakeASkipFlag) {
  std::optional<Plan> plan = loadPlan();
  ASSERT_TRUE(plan);
  size_t kernels = 0;
  for (const FunctionPlan &function : plan->functions)
    for (const Step &step : function.steps)
      if (const auto *kernel = std::get_if<KernelStep>(&step)) {
        ++kernels;
        EXPECT_TRUE(kernel->skipFlag) << function.name << ": " << kernel->name;
      }
  EXPECT_GT(kernels, 0u);
}

INSTANTIATE_TEST_SUITE_P(TeCompile, RealPlanTest,
                         ::testing::ValuesIn(planDirectories()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (!llvm::isAlnum(c))
                               c = '_';
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RealPlanTest);
// The plans with a wgrad function (tests/runtime/CMakeLists.txt).
INSTANTIATE_TEST_SUITE_P(TeCompile, WgradPlanTest,
                         ::testing::Values("delay_wgrad_mlp",
                                           "delay_wgrad_grouped"));
#endif // TEJIT_TEST_PLAN_DIR

} // namespace
