//===- Fp8AttentionTest.cpp - FP8 attention without a GPU -----------------===//
//
// FP8 attention (docs/fp8-attention.md) as far as it can be checked without
// a GPU: its problems are validated with messages naming what FP8 attention
// does not take, keys tell them apart, validateFor names the cuDNN, GPU and
// head dim they need, every graph variant passes cuDNN's host-side checks
// (where cuDNN loads), and fp8_attention / fp8_attention_bwd plan steps are
// read into problems with their scales and amaxes.
// tests/gpu/fp8_attention_check.cpp checks the numbers.
//
//===----------------------------------------------------------------------===//
#include "runtime/Attention.h"
#include "runtime/AttentionGraph.h"
#include "runtime/AttentionLauncher.h"
#include "runtime/Cudnn.h"
#include "tests/runtime/StepFunctions.h"

#include "gtest/gtest.h"

#include <set>

using namespace tejit::runtime;
using namespace tejit::runtime::steptest;

namespace {

/// A causal FP8 backward: b 2, 8 heads sharing 2 kv heads, s 256, d 128.
AttentionProblem fp8Problem() {
  AttentionProblem problem;
  problem.fp8 = true;
  problem.element = ElementType::F8E4M3;
  problem.gradElement = ElementType::F8E5M2;
  problem.batch = 2;
  problem.heads = 8;
  problem.kvHeads = 2;
  problem.seqQ = problem.seqKv = 256;
  problem.headDim = 128;
  problem.layout = AttentionLayout::Bshd;
  problem.mask = AttentionMask::Causal;
  problem.softmaxScale = 0.125;
  problem.backward = true;
  return problem;
}

std::string failure(llvm::Error error) {
  EXPECT_TRUE(bool(error));
  std::string message;
  EXPECT_EQ(takeError(std::move(error), message), ErrorCode::Unsupported);
  return message;
}

TEST(Fp8AttentionTest, ValidProblemPassesAndKeyNamesFp8) {
  AttentionProblem problem = fp8Problem();
  EXPECT_FALSE(bool(problem.validate()));
  EXPECT_EQ(problem.key(),
            "fp8_attention_bwd f8E4M3FN bshd b=2 h=8 kv_heads=2 s_q=256 "
            "s_kv=256 d=128 mask=causal scale=0.125 dropout=0 grad=f8E5M2");
  AttentionProblem e4m3 = problem;
  e4m3.gradElement = ElementType::F8E4M3;
  AttentionProblem bf16 = problem;
  bf16.fp8 = false;
  bf16.element = ElementType::BF16;
  AttentionProblem forward = problem;
  forward.backward = false;
  std::set<std::string> keys{problem.key(), e4m3.key(), bf16.key(),
                             forward.key()};
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_EQ(forward.key().rfind("fp8_attention f8E4M3FN", 0), 0u);
}

TEST(Fp8AttentionTest, RejectsWhatFp8AttentionDoesNotTake) {
  struct Case {
    const char *name;
    void (*change)(AttentionProblem &);
    const char *expected;
  };
  for (const Case &c : std::initializer_list<Case>{
           {"bf16 q",
            [](AttentionProblem &p) { p.element = ElementType::BF16; },
            "takes q, k, v and o in f8E4M3FN, got bf16"},
           {"bf16 dO",
            [](AttentionProblem &p) { p.gradElement = ElementType::BF16; },
            "takes dO, dq, dk and dv in f8E4M3FN or f8E5M2"},
           {"head dim 72", [](AttentionProblem &p) { p.headDim = 72; },
            "multiple of 16, got 72"},
           {"bias",
            [](AttentionProblem &p) {
              p.bias = AttentionBias::PostScale;
              p.biasHeads = 8;
            },
            "does not support an attention bias or ALiBi"},
           {"alibi", [](AttentionProblem &p) { p.bias = AttentionBias::Alibi; },
            "does not support an attention bias or ALiBi"},
           {"thd",
            [](AttentionProblem &p) {
              p.layout = AttentionLayout::Thd;
              p.mask = AttentionMask::PaddingCausal;
              p.tokensQ = p.tokensKv = 512;
            },
            "does not support the thd layout"},
           {"window", [](AttentionProblem &p) { p.windowLeft = 64; },
            "does not support a sliding window"},
           {"dropout", [](AttentionProblem &p) { p.dropout = 0.1; },
            "does not support attention dropout"},
       }) {
    AttentionProblem problem = fp8Problem();
    c.change(problem);
    std::string message = failure(problem.validate());
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.name << ": " << message;
    EXPECT_NE(message.find(problem.key()), std::string::npos) << c.name;
  }
}

TEST(Fp8AttentionTest, NeedsCudnn91OnHopperAndHeadDim128Backward) {
  AttentionProblem problem = fp8Problem();
  EXPECT_FALSE(bool(problem.validateFor(91900, 90)));
  EXPECT_FALSE(bool(problem.validateFor(91900, 100)));
  EXPECT_NE(failure(problem.validateFor(90000, 90)).find("needs cuDNN 9.1.0"),
            std::string::npos);
  EXPECT_NE(failure(problem.validateFor(91900, 89))
                .find("FP8 attention needs a Hopper or newer GPU"),
            std::string::npos);
  AttentionProblem small = problem;
  small.headDim = 64;
  EXPECT_NE(failure(small.validateFor(91900, 90))
                .find("backward on Hopper needs a head dim of 128"),
            std::string::npos);
  small.backward = false;
  EXPECT_FALSE(bool(small.validateFor(91900, 90)));
}

/// Every FP8 variant's graph passes cuDNN's checks of each descriptor and
/// of the operation graph, without a handle; each binds the scales and
/// amaxes of its direction and none of the other's.
TEST(Fp8AttentionTest, EveryVariantFinalizesWithoutAGpu) {
  auto lib = Cudnn::get();
  if (!lib) {
    std::string message = llvm::toString(lib.takeError());
    GTEST_SKIP() << "no cuDNN: " << message;
  }
  using attention::Slot;
  const std::set<Slot> forwardSlots{Slot::DescaleQkv, Slot::ScaleO, Slot::AmaxS,
                                    Slot::AmaxO};
  const std::set<Slot> backwardSlots{
      Slot::DescaleQkv, Slot::DescaleO,     Slot::DescaleGradO, Slot::ScaleDp,
      Slot::DescaleDp,  Slot::ScaleGradQkv, Slot::AmaxDp,       Slot::AmaxGradQ,
      Slot::AmaxGradK,  Slot::AmaxGradV};
  int built = 0;
  for (bool backward : {false, true})
    for (AttentionMask mask :
         {AttentionMask::None, AttentionMask::Causal, AttentionMask::Padding,
          AttentionMask::PaddingCausal})
      for (int64_t kvHeads : {8, 2})
        for (AttentionLayout layout :
             {AttentionLayout::Sbhd, AttentionLayout::Bshd})
          for (ElementType grad : {ElementType::F8E5M2, ElementType::F8E4M3}) {
            AttentionProblem problem = fp8Problem();
            problem.backward = backward;
            problem.mask = mask;
            problem.kvHeads = kvHeads;
            problem.layout = layout;
            problem.gradElement = grad;
            if (kvHeads == 2) // read in place from a QKV projection's rows
              problem.tokenStrides = {1536, 1536, 1536, 1536, 1536, 1536};
            ASSERT_FALSE(bool(problem.validate())) << problem.key();
            auto graph = attention::buildGraph(*lib, nullptr, problem);
            ASSERT_TRUE(bool(graph)) << llvm::toString(graph.takeError());
            ++built;
            std::set<Slot> slots;
            for (const attention::Binding &binding : graph->bindings)
              slots.insert(binding.slot);
            const std::set<Slot> &mine =
                backward ? backwardSlots : forwardSlots;
            for (Slot slot : forwardSlots)
              EXPECT_EQ(slots.count(slot), mine.count(slot)) << problem.key();
            for (Slot slot : backwardSlots)
              EXPECT_EQ(slots.count(slot), mine.count(slot)) << problem.key();
            EXPECT_EQ(slots.count(Slot::SeqLenQ), size_t(problem.padding()))
                << problem.key();
            EXPECT_EQ(slots.count(Slot::Seed), 0u) << problem.key();
          }
  EXPECT_EQ(built, 2 * 4 * 2 * 2 * 2);
}

/// An fp8_attention step over values 0-8 and an fp8_attention_bwd step
/// over 0-21, as te.fp8_attention(_bwd) lists their operands and results.
struct Fp8Steps {
  FunctionPlan function = functionWith({
      tensorOf({2, 256, 8, 128}, ElementType::F8E4M3), // 0 q
      tensorOf({2, 256, 2, 128}, ElementType::F8E4M3), // 1 k
      tensorOf({2, 256, 2, 128}, ElementType::F8E4M3), // 2 v
      tensorOf({1}, ElementType::F32),                 // 3 qkv_scale_inv
      tensorOf({1}, ElementType::F32),                 // 4 o_scale
      tensorOf({2, 256, 8, 128}, ElementType::F8E4M3), // 5 o
      tensorOf({2, 8, 256}, ElementType::F32),         // 6 lse
      tensorOf({1}, ElementType::F32),                 // 7 amax_s
      tensorOf({1}, ElementType::F32),                 // 8 amax_o
      tensorOf({2, 256, 8, 128}, ElementType::F8E5M2), // 9 dO
      tensorOf({1}, ElementType::F32),                 // 10 o_scale_inv
      tensorOf({1}, ElementType::F32),                 // 11 grad_scale_inv
      tensorOf({1}, ElementType::F32),                 // 12 dp_scale
      tensorOf({1}, ElementType::F32),                 // 13 dp_scale_inv
      tensorOf({1}, ElementType::F32),                 // 14 dqkv_scale
      tensorOf({2, 256, 8, 128}, ElementType::F8E5M2), // 15 dq
      tensorOf({2, 256, 2, 128}, ElementType::F8E5M2), // 16 dk
      tensorOf({2, 256, 2, 128}, ElementType::F8E5M2), // 17 dv
      tensorOf({1}, ElementType::F32),                 // 18 amax_dp
      tensorOf({1}, ElementType::F32),                 // 19 amax_dq
      tensorOf({1}, ElementType::F32),                 // 20 amax_dk
      tensorOf({1}, ElementType::F32),                 // 21 amax_dv
      tensorOf({2, 1, 1, 256}, ElementType::I1),       // 22 mask
      tensorOf({2}, ElementType::I64),                 // 23 rng state
  });
  AttentionStep forward, backward;

  Fp8Steps() {
    std::map<std::string, std::string> attributes{
        {"qkv_format", "#te.qkv_format<bshd>"},
        {"attn_mask_type", "#te.attn_mask_type<causal>"},
        {"softmax_scale", "8.838835e-02 : f64"}};
    forward.fp8 = backward.fp8 = true;
    backward.backward = true;
    forward.attributes = backward.attributes = attributes;
    forward.operands = {0, 1, 2, 3, 4};
    forward.results = {5, 6, 7, 8};
    backward.operands = {9, 0, 1, 2, 5, 6, 3, 10, 11, 12, 13, 14};
    backward.results = {15, 16, 17, 18, 19, 20, 21};
  }
};

TEST(Fp8AttentionTest, ConstantsHoldPsScalesSixteenBytesApart) {
  using attention::Slot;
  std::vector<float> constants = attention::fp8Constants();
  size_t scale = attention::fp8ConstantOffset(Slot::ProbabilityScale),
         descale = attention::fp8ConstantOffset(Slot::ProbabilityDescale);
  EXPECT_NE(scale, descale);
  for (size_t offset : {scale, descale}) {
    EXPECT_EQ(offset % 16, 0u);
    EXPECT_LT(offset / sizeof(float), constants.size());
  }
  EXPECT_EQ(constants[scale / sizeof(float)], attention::kProbabilityScale);
  EXPECT_FLOAT_EQ(
      constants[descale / sizeof(float)] * attention::kProbabilityScale, 1.0f);
}

TEST(Fp8AttentionTest, LauncherReadsFp8Steps) {
  Fp8Steps steps;
  auto forward = AttentionLauncher::parse(steps.forward, steps.function);
  ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
  EXPECT_TRUE(forward->problem().fp8);
  EXPECT_EQ(forward->problem().key(),
            "fp8_attention f8E4M3FN bshd b=2 h=8 kv_heads=2 s_q=256 s_kv=256 "
            "d=128 mask=causal scale=0.08838835 dropout=0");
  using Roles = std::vector<std::pair<std::string, int64_t>>;
  EXPECT_EQ(
      forward->fp8Roles(),
      (Roles{
          {"qkv_scale_inv", 3}, {"o_scale", 4}, {"amax_s", 7}, {"amax_o", 8}}));
  auto backward = AttentionLauncher::parse(steps.backward, steps.function);
  ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
  EXPECT_EQ(backward->problem().gradElement, ElementType::F8E5M2);
  EXPECT_TRUE(backward->problem().backward);
  // Each scale where te.fp8_attention_bwd lists it: a swap of two of them
  // (a scale with its inverse) fails here.
  EXPECT_EQ(backward->fp8Roles(), (Roles{{"qkv_scale_inv", 3},
                                         {"o_scale_inv", 10},
                                         {"grad_scale_inv", 11},
                                         {"dp_scale", 12},
                                         {"dp_scale_inv", 13},
                                         {"dqkv_scale", 14},
                                         {"amax_dp", 18},
                                         {"amax_dq", 19},
                                         {"amax_dk", 20},
                                         {"amax_dv", 21}}));

  // A padding mask follows the fixed operands.
  Fp8Steps padded;
  padded.forward.attributes["attn_mask_type"] = "#te.attn_mask_type<padding>";
  padded.forward.operands.push_back(22);
  auto masked = AttentionLauncher::parse(padded.forward, padded.function);
  ASSERT_TRUE(bool(masked)) << llvm::toString(masked.takeError());
  EXPECT_EQ(masked->problem().mask, AttentionMask::Padding);
}

TEST(Fp8AttentionTest, LauncherRefusesMalformedFp8Steps) {
  {
    Fp8Steps steps;
    steps.forward.results.pop_back(); // no amax_o
    auto launcher = AttentionLauncher::parse(steps.forward, steps.function);
    ASSERT_FALSE(bool(launcher));
    std::string message = failure(launcher.takeError());
    EXPECT_NE(message.find("expected 5 to 8 operands and 4 results"),
              std::string::npos)
        << message;
  }
  {
    Fp8Steps steps;
    steps.forward.operands[4] = 6; // lse where o_scale goes
    auto launcher = AttentionLauncher::parse(steps.forward, steps.function);
    ASSERT_FALSE(bool(launcher));
    std::string message = failure(launcher.takeError());
    EXPECT_NE(message.find(
                  "scales and amaxes are single f32 values; o_scale (value 6)"),
              std::string::npos)
        << message;
  }
  {
    Fp8Steps steps;
    steps.backward.operands[0] = 5; // an E4M3 dO is fine too
    auto launcher = AttentionLauncher::parse(steps.backward, steps.function);
    EXPECT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  }
}

} // namespace
