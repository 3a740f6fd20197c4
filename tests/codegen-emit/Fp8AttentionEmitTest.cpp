//===- Fp8AttentionEmitTest.cpp - FP8 attention's kernels and plan steps --===//
//
// What FP8 attention (docs/fp8-attention.md) asks of the backend: te.dequantize
// as an element-wise kernel (FP8 in, bf16/f16/f32 out, over vector widths
// from 8 elements down to 1), in te-fuse's cast_transpose group with the
// cast the projection GEMM reads and in a hand-made region with an add and
// a cast; no kernel for te.fp8_attention(_bwd), which the plan runs as
// "fp8_attention" / "fp8_attention_bwd" steps with the ops' operands and
// results in order; te.amax over the concatenated amaxes of the shared qkv
// slot. Every kernel is compiled with NVRTC for sm_90a and sm_89 (no GPU
// needed).
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelBuild.h"
#include "codegen/KernelEmitter.h"
#include "codegen/NvrtcCompiler.h"
#include "codegen/PlanWriter.h"
#include "compiler/passes/Passes.h"
#include "tests/codegen-emit/ExpectCompiles.h"
#include "tests/codegen-emit/TeIrTest.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <map>

using namespace mlir;
using tejit::codegen::EmittedKernel;
using tejit::testing::expectCompiles;
namespace json = llvm::json;

namespace {

class Fp8AttentionEmit : public tejit::testing::TeIrTest {
protected:
  /// The kernels of `module` after te-fuse when `fuse`; fails the test when
  /// emission fails.
  std::vector<EmittedKernel> emit(ModuleOp module, bool fuse) {
    if (fuse) {
      PassManager pm(&context);
      pm.addNestedPass<func::FuncOp>(tejit::createTEFuse());
      EXPECT_TRUE(succeeded(pm.run(module)));
    }
    auto kernels = tejit::codegen::emitKernels(module);
    EXPECT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
    if (!kernels)
      return {};
    return std::move(*kernels);
  }
};

/// The kernel's own code, after the device helpers.
llvm::StringRef body(const EmittedKernel &kernel) {
  llvm::StringRef source = kernel.source;
  return source.drop_front(source.find("extern \"C\""));
}

/// One standalone te.dequantize.
struct DequantizeCase {
  const char *shape, *fp8, *output, *outputName;
  int64_t vec;
};

const DequantizeCase kDequantizes[] = {
    // FP8 attention's dq: 8 FP8 elements a vector.
    {"32x256", "f8E5M2", "bf16", "tj_bf16", 8},
    // 4-D, a width of 12: 4 elements.
    {"3x2x5x12", "f8E4M3FN", "f16", "tj_f16", 4},
    // An odd width: one element a vector, with bounds checks.
    {"7x33", "f8E4M3FN", "f32", "float", 1},
};

} // namespace

TEST_F(Fp8AttentionEmit, DequantizeKernelsEmitAndCompile) {
  std::string text;
  for (auto [index, c] : llvm::enumerate(kDequantizes))
    text += llvm::formatv(R"mlir(
func.func @d{0}(%x: tensor<{1}x{2}>, %s: tensor<1xf32> {{te.name = "scale_inv"})
    -> tensor<{1}x{3}> {{
  %y = te.dequantize %x, %s : tensor<{1}x{2}>, tensor<1xf32> -> tensor<{1}x{3}>
  return %y : tensor<{1}x{3}>
}
)mlir",
                          index, c.shape, c.fp8, c.output)
                .str();
  OwningOpRef<ModuleOp> module = parse(text);
  ASSERT_TRUE(module);
  std::vector<EmittedKernel> kernels = emit(*module, /*fuse=*/true);
  ASSERT_EQ(kernels.size(), std::size(kDequantizes));
  for (auto [index, c] : llvm::enumerate(kDequantizes)) {
    const EmittedKernel &kernel = kernels[index];
    SCOPED_TRACE(kernel.name);
    EXPECT_EQ(kernel.name, "d" + std::to_string(index) + "_dequantize_0");
    // The FP8 input and the scale inverse in, the output out; no amax.
    ASSERT_EQ(kernel.params.size(), 3u);
    EXPECT_EQ(kernel.params[0].elementType,
              llvm::StringRef(c.fp8) == "f8E5M2" ? "tj_e5m2" : "tj_e4m3");
    EXPECT_FALSE(kernel.params[0].isOutput);
    EXPECT_EQ(kernel.params[1].name, "scale_inv");
    EXPECT_EQ(kernel.params[1].elementType, "float");
    EXPECT_EQ(kernel.params[2].elementType, c.outputName);
    EXPECT_TRUE(kernel.params[2].isOutput);
    EXPECT_FALSE(kernel.params[2].zeroBeforeLaunch);
    llvm::StringRef source = body(kernel);
    EXPECT_TRUE(source.contains("const float scale_inv_v = "
                                "tj_to_float(scale_inv[0]);"));
    EXPECT_TRUE(source.contains("_in[u][i] * scale_inv_v;"));
    EXPECT_TRUE(source.contains(
        llvm::formatv("constexpr int kVec = {0},", c.vec).str()));
    EXPECT_FALSE(source.contains("tj_atomic_amax"));
  }
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

// te-fuse puts FP8 attention's dequantized output into the cast and
// transpose of the projection GEMM's input, through the reshape to
// [tokens, hidden]; a dequantization feeding an add and a cast in one
// region (as a hand-made group) is one kernel too.
TEST_F(Fp8AttentionEmit, DequantizeFusesWithNeighbours) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
func.func @fwd(%q8: tensor<8x2x4x32xf8E4M3FN>, %k8: tensor<8x2x2x32xf8E4M3FN>,
               %v8: tensor<8x2x2x32xf8E4M3FN>,
               %qkv_si: tensor<1xf32>, %o_s: tensor<1xf32>,
               %o_si: tensor<1xf32> {te.name = "o_scale_inv"},
               %x_s: tensor<1xf32> {te.name = "x_scale"})
    -> (tensor<16x128xf8E4M3FN>, tensor<128x16xf8E4M3FN>, tensor<1xf32>,
        tensor<2x4x8xf32>, tensor<1xf32>, tensor<1xf32>) {
  %o8, %lse, %as, %ao = te.fp8_attention %q8, %k8, %v8, %qkv_si, %o_s
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.125 : f64}
      : (tensor<8x2x4x32xf8E4M3FN>, tensor<8x2x2x32xf8E4M3FN>,
         tensor<8x2x2x32xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<8x2x4x32xf8E4M3FN>, tensor<2x4x8xf32>, tensor<1xf32>,
            tensor<1xf32>)
  %o = te.dequantize %o8, %o_si : tensor<8x2x4x32xf8E4M3FN>, tensor<1xf32>
      -> tensor<8x2x4x32xbf16>
  %o2 = te.reshape %o : tensor<8x2x4x32xbf16> -> tensor<16x128xbf16>
  %x8, %ax = te.quantize %o2, %x_s : tensor<16x128xbf16>, tensor<1xf32>
      -> tensor<16x128xf8E4M3FN>, tensor<1xf32>
  %xt = te.transpose %x8 : tensor<16x128xf8E4M3FN> -> tensor<128x16xf8E4M3FN>
  return %x8, %xt, %ax, %lse, %as, %ao
      : tensor<16x128xf8E4M3FN>, tensor<128x16xf8E4M3FN>, tensor<1xf32>,
        tensor<2x4x8xf32>, tensor<1xf32>, tensor<1xf32>
}
func.func @add(%g8: tensor<16x64xf8E5M2>, %si: tensor<1xf32>,
               %r: tensor<16x64xbf16>, %s: tensor<1xf32>)
    -> (tensor<16x64xbf16>, tensor<16x64xf8E5M2>, tensor<1xf32>) {
  %k:3 = te.fused "dequantize_add"(%g8, %si, %r, %s)
      : (tensor<16x64xf8E5M2>, tensor<1xf32>, tensor<16x64xbf16>,
         tensor<1xf32>)
        -> (tensor<16x64xbf16>, tensor<16x64xf8E5M2>, tensor<1xf32>) {
  ^bb0(%a: tensor<16x64xf8E5M2>, %b: tensor<1xf32>, %c: tensor<16x64xbf16>,
       %d: tensor<1xf32>):
    %g = te.dequantize %a, %b : tensor<16x64xf8E5M2>, tensor<1xf32>
        -> tensor<16x64xbf16>
    %sum = te.add %g, %c : tensor<16x64xbf16>
    %q, %amax = te.quantize %sum, %d : tensor<16x64xbf16>, tensor<1xf32>
        -> tensor<16x64xf8E5M2>, tensor<1xf32>
    te.yield %sum, %q, %amax
        : tensor<16x64xbf16>, tensor<16x64xf8E5M2>, tensor<1xf32>
  }
  return %k#0, %k#1, %k#2
      : tensor<16x64xbf16>, tensor<16x64xf8E5M2>, tensor<1xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<EmittedKernel> kernels = emit(*module, /*fuse=*/true);
  // No kernel for te.fp8_attention: one for the dequantization, cast and
  // transpose, one for the hand-made region.
  ASSERT_EQ(kernels.size(), 2u);
  const EmittedKernel &cast = kernels[0];
  EXPECT_EQ(cast.name, "fwd_cast_transpose_0");
  // FP8 O (reshaped), its scale inverse, the cast's scale in; the cast, its
  // amax and its transpose out: the bf16 O is never written.
  ASSERT_EQ(cast.params.size(), 6u);
  EXPECT_EQ(cast.params[0].elementType, "tj_e4m3");
  EXPECT_EQ(cast.params[1].name, "o_scale_inv");
  EXPECT_EQ(cast.params[2].name, "x_scale");
  for (size_t i = 3; i < 6; ++i)
    EXPECT_TRUE(cast.params[i].isOutput);
  EXPECT_TRUE(cast.params[4].zeroBeforeLaunch);
  llvm::StringRef source = body(cast);
  EXPECT_TRUE(source.contains("const float t0 = v0_in[u][i] * o_scale_inv_v;"))
      << source.str();
  EXPECT_TRUE(source.contains("amax0 = fmaxf(amax0, fabsf(t0));"));
  EXPECT_TRUE(source.contains("const float t1 = t0 * x_scale_v;"));
  EXPECT_TRUE(source.contains("tj_transpose_8x4("));
  EXPECT_FALSE(source.contains("tj_bf16"));

  const EmittedKernel &add = kernels[1];
  EXPECT_EQ(add.name, "add_dequantize_add_0");
  llvm::StringRef addSource = body(add);
  EXPECT_TRUE(addSource.contains("const float t0 = arg0_in[u][i] * arg1_v;"))
      << addSource.str();
  EXPECT_TRUE(addSource.contains("const float t1 = t0 + arg2_in[u][i];"));
  EXPECT_TRUE(addSource.contains("const float t2 = t1 * arg3_v;"));
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

// The qkv slot's amax (docs/fp8-attention.md): the three casts' amaxes
// concatenated and reduced, a kernel over a vector alone.
TEST_F(Fp8AttentionEmit, AmaxOfConcatenatedAmaxesEmitsAndCompiles) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
func.func @qkv(%a: tensor<1xf32>, %b: tensor<1xf32>, %c: tensor<1xf32>)
    -> tensor<1xf32> {
  %x = te.concat %a, %b, %c : tensor<1xf32>, tensor<1xf32>, tensor<1xf32>
      -> tensor<3xf32>
  %m = te.amax %x : tensor<3xf32> -> tensor<1xf32>
  return %m : tensor<1xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<EmittedKernel> kernels = emit(*module, /*fuse=*/true);
  ASSERT_EQ(kernels.size(), 2u);
  const EmittedKernel &amax = kernels[1];
  EXPECT_EQ(amax.name, "qkv_amax_0");
  ASSERT_EQ(amax.params.size(), 2u);
  EXPECT_TRUE(amax.params[1].zeroBeforeLaunch);
  llvm::StringRef source = body(amax);
  EXPECT_TRUE(source.contains("constexpr Index kRows = 1, kCols = 3;"))
      << source.str();
  EXPECT_TRUE(source.contains("tj_load(v0_in[u], v0 + col);"));
  EXPECT_TRUE(source.contains("tj_atomic_amax(v1, amax0_block);"));
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

namespace {

/// The steps of function `name` of `plan`, and its value types by id.
struct FunctionSteps {
  std::vector<const json::Object *> steps;
  std::map<int64_t, std::string> types;
};
FunctionSteps stepsOf(const json::Value &plan, llvm::StringRef name) {
  FunctionSteps result;
  for (const json::Value &function :
       *plan.getAsObject()->getArray("functions")) {
    const json::Object &fields = *function.getAsObject();
    if (fields.getString("name") != name)
      continue;
    for (const json::Value &value : *fields.getArray("values"))
      result.types[*value.getAsObject()->getInteger("id")] =
          value.getAsObject()->getString("type")->str();
    for (const json::Value &step : *fields.getArray("steps"))
      result.steps.push_back(step.getAsObject());
  }
  return result;
}

/// The types of the ids in `list`.
std::vector<std::string> typesOf(const FunctionSteps &f,
                                 const json::Array &list) {
  std::vector<std::string> types;
  for (const json::Value &id : list)
    types.push_back(f.types.at(*id.getAsInteger()));
  return types;
}

} // namespace

TEST_F(Fp8AttentionEmit, PlanStepsListOperandsAndResultsInOrder) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
func.func @bwd(%do8: tensor<2x8x4x32xf8E5M2>, %q8: tensor<2x8x4x32xf8E4M3FN>,
               %k8: tensor<2x8x2x32xf8E4M3FN>, %v8: tensor<2x8x2x32xf8E4M3FN>,
               %o8: tensor<2x8x4x32xf8E4M3FN>, %lse: tensor<2x4x8xf32>,
               %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>,
               %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>,
               %mask: tensor<2x1x1x8xi1>, %qmask: tensor<2x1x1x8xi1>,
               %rng: tensor<2xi64>)
    -> (tensor<2x8x4x32xf8E5M2>, tensor<2x8x2x32xf8E5M2>,
        tensor<2x8x2x32xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
        tensor<1xf32>) {
  %r:7 = te.fp8_attention_bwd %do8, %q8, %k8, %v8, %o8, %lse, %s0, %s1, %s2,
      %s3, %s4, %s5 mask(%mask) query_mask(%qmask) rng(%rng)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.125 : f64,
       stream = 4 : i64, pad_keys_only}
      : (tensor<2x8x4x32xf8E5M2>, tensor<2x8x4x32xf8E4M3FN>,
         tensor<2x8x2x32xf8E4M3FN>, tensor<2x8x2x32xf8E4M3FN>,
         tensor<2x8x4x32xf8E4M3FN>, tensor<2x4x8xf32>, tensor<1xf32>,
         tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
         tensor<1xf32>, tensor<2x1x1x8xi1>,
         tensor<2x1x1x8xi1>, tensor<2xi64>)
        -> (tensor<2x8x4x32xf8E5M2>, tensor<2x8x2x32xf8E5M2>,
            tensor<2x8x2x32xf8E5M2>, tensor<1xf32>, tensor<1xf32>,
            tensor<1xf32>, tensor<1xf32>)
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6
      : tensor<2x8x4x32xf8E5M2>, tensor<2x8x2x32xf8E5M2>,
        tensor<2x8x2x32xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
        tensor<1xf32>
}
)mlir");
  ASSERT_TRUE(module);
  std::vector<EmittedKernel> kernels = emit(*module, /*fuse=*/false);
  EXPECT_TRUE(kernels.empty());
  auto plan = tejit::codegen::writePlan(*module, {}, "sm_90a");
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  FunctionSteps f = stepsOf(*plan, "bwd");
  ASSERT_EQ(f.steps.size(), 1u);
  const json::Object &step = *f.steps[0];
  EXPECT_EQ(step.getString("kind"), "fp8_attention_bwd");
  // The arguments in order: every operand is one, the optional masks and
  // the RNG state last.
  const json::Array &operands = *step.getArray("operands");
  ASSERT_EQ(operands.size(), 15u);
  for (auto [index, id] : llvm::enumerate(operands))
    EXPECT_EQ(id.getAsInteger(), int64_t(index));
  std::vector<std::string> results = typesOf(f, *step.getArray("results"));
  std::vector<std::string> expected = {"tensor<2x8x4x32xf8E5M2>",
                                       "tensor<2x8x2x32xf8E5M2>",
                                       "tensor<2x8x2x32xf8E5M2>",
                                       "tensor<1xf32>",
                                       "tensor<1xf32>",
                                       "tensor<1xf32>",
                                       "tensor<1xf32>"};
  EXPECT_EQ(results, expected);
  const json::Object &attrs = *step.getObject("attributes");
  EXPECT_EQ(attrs.getString("attn_mask_type"), "#te.attn_mask_type<padding>");
  EXPECT_EQ(attrs.getString("qkv_format"), "#te.qkv_format<bshd>");
  EXPECT_EQ(attrs.getString("stream"), "4 : i64");
  EXPECT_TRUE(attrs.getString("pad_keys_only"));
  EXPECT_FALSE(attrs.get("operandSegmentSizes"));
  // Packed operands: no strides.
  EXPECT_FALSE(step.get("token_strides"));
}
