//===- AttentionTest.cpp - the cuDNN attention runner without a GPU -------===//
//
// What can be checked without a GPU: problems are validated with messages
// that name the problem and the offending value, keys tell problems apart,
// and asking for a runner where there is no GPU (or no cuDNN) is a clear
// error, not a crash. Where cuDNN can be loaded (no GPU needed), every
// graph variant must also pass cuDNN's own checks of each descriptor and of
// the operation graph. tests/gpu/attention_check.cpp checks the numbers.
//
//===----------------------------------------------------------------------===//
#include "runtime/Attention.h"
#include "runtime/AttentionGraph.h"
#include "runtime/Cudnn.h"

#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <set>

using namespace tejit::runtime;

namespace {

AttentionProblem validProblem() {
  AttentionProblem problem;
  problem.batch = 2;
  problem.heads = 8;
  problem.kvHeads = 2;
  problem.seqQ = 128;
  problem.seqKv = 256;
  problem.headDim = 64;
  problem.element = ElementType::BF16;
  problem.layout = AttentionLayout::Sbhd;
  problem.mask = AttentionMask::Causal;
  problem.softmaxScale = 0.125;
  problem.dropout = 0.1;
  problem.backward = true;
  return problem;
}

/// The message and code of `error` (which must be one).
std::pair<ErrorCode, std::string> takeFailure(llvm::Error error) {
  EXPECT_TRUE(bool(error));
  std::string message;
  ErrorCode code = takeError(std::move(error), message);
  return {code, message};
}

TEST(AttentionProblemTest, ValidProblemPasses) {
  EXPECT_FALSE(bool(validProblem().validate()));
  AttentionProblem f16 = validProblem();
  f16.element = ElementType::F16;
  f16.headDim = 128;
  f16.dropout = 0;
  f16.kvHeads = 1;
  EXPECT_FALSE(bool(f16.validate()));
}

TEST(AttentionProblemTest, RejectsWithClearMessages) {
  struct Case {
    const char *name;
    void (*change)(AttentionProblem &);
    const char *expected;
  };
  const Case cases[] = {
      {"f32", [](AttentionProblem &p) { p.element = ElementType::F32; },
       "element type f32 is not supported"},
      {"fp8", [](AttentionProblem &p) { p.element = ElementType::F8E4M3; },
       "takes bf16 or f16"},
      {"head dim 100", [](AttentionProblem &p) { p.headDim = 100; },
       "head dim 100 is not supported"},
      {"head dim 256", [](AttentionProblem &p) { p.headDim = 256; },
       "multiple of 8 and at most 128"},
      {"heads 8 / 3", [](AttentionProblem &p) { p.kvHeads = 3; },
       "8 heads cannot share 3 kv heads"},
      {"dropout 1", [](AttentionProblem &p) { p.dropout = 1.0; },
       "dropout probability 1 is out of range"},
      {"dropout -0.5", [](AttentionProblem &p) { p.dropout = -0.5; },
       "dropout probability -0.5 is out of range"},
      {"dropout nan",
       [](AttentionProblem &p) {
         p.dropout = std::numeric_limits<double>::quiet_NaN();
       },
       "in [0, 1)"},
      {"scale 0", [](AttentionProblem &p) { p.softmaxScale = 0; },
       "softmax scale must be finite and non-zero"},
      {"scale inf",
       [](AttentionProblem &p) {
         p.softmaxScale = std::numeric_limits<double>::infinity();
       },
       "softmax scale"},
      {"batch 0", [](AttentionProblem &p) { p.batch = 0; },
       "must all be positive"},
      {"s_kv -1", [](AttentionProblem &p) { p.seqKv = -1; },
       "must all be positive"},
      // q has 8 heads of 64: a token stride of 256 cannot hold them.
      {"q stride too small",
       [](AttentionProblem &p) { p.tokenStrides.q = 256; },
       "the token stride of q (256 elements) must hold its 8 heads of 64"},
      {"dv stride unaligned",
       [](AttentionProblem &p) { p.tokenStrides.gradV = 130; },
       "token stride of dv (130 elements)"},
      // validProblem() has 128 queries and 256 keys.
      {"window, s_q != s_kv", [](AttentionProblem &p) { p.windowLeft = 16; },
       "a sliding window needs as many queries as keys"},
      {"window right bound without a causal mask",
       [](AttentionProblem &p) {
         p.seqKv = p.seqQ;
         p.mask = AttentionMask::Padding;
         p.windowRight = 7;
       },
       "a right window bound of 7 is not supported"},
      {"window right -2",
       [](AttentionProblem &p) {
         p.seqKv = p.seqQ;
         p.windowRight = -2;
       },
       "window bounds must be >= -1"},
  };
  for (const Case &c : cases) {
    AttentionProblem problem = validProblem();
    c.change(problem);
    auto [code, message] = takeFailure(problem.validate());
    EXPECT_EQ(code, ErrorCode::Unsupported) << c.name;
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.name << ": " << message;
    // The message names the problem.
    EXPECT_NE(message.find(problem.key()), std::string::npos)
        << c.name << ": " << message;
  }
}

TEST(AttentionProblemTest, KeySpellsOutTheProblem) {
  EXPECT_EQ(validProblem().key(),
            "attention_bwd bf16 sbhd b=2 h=8 kv_heads=2 s_q=128 s_kv=256 d=64 "
            "mask=causal scale=0.125 dropout=0.1");
  AttentionProblem forward = validProblem();
  forward.backward = false;
  forward.layout = AttentionLayout::Bshd;
  forward.mask = AttentionMask::PaddingCausal;
  forward.softmaxScale = 1 / std::sqrt(72.0);
  EXPECT_EQ(forward.key(),
            "attention bf16 bshd b=2 h=8 kv_heads=2 s_q=128 s_kv=256 d=64 "
            "mask=padding_causal scale=0.11785113019775793 dropout=0.1");
  // q, k and v read in place from a fused QKV projection's rows.
  AttentionProblem packed = validProblem();
  packed.tokenStrides = {768, 768, 768, 768, 768, 768};
  EXPECT_EQ(packed.key(),
            "attention_bwd bf16 sbhd b=2 h=8 kv_heads=2 s_q=128 s_kv=256 d=64 "
            "mask=causal scale=0.125 dropout=0.1 q_stride=768 k_stride=768 "
            "v_stride=768 dq_stride=768 dk_stride=768 dv_stride=768");
  EXPECT_FALSE(bool(packed.validate()));
  // A sliding window, after everything else.
  AttentionProblem window = validProblem();
  window.seqKv = 128;
  window.windowLeft = 31;
  EXPECT_EQ(window.key(),
            "attention_bwd bf16 sbhd b=2 h=8 kv_heads=2 s_q=128 s_kv=128 d=64 "
            "mask=causal scale=0.125 dropout=0.1 window=31,-1");
  EXPECT_FALSE(bool(window.validate()));
}

TEST(AttentionProblemTest, KeysAreUnique) {
  std::vector<void (*)(AttentionProblem &)> changes = {
      [](AttentionProblem &p) { p.batch = 3; },
      [](AttentionProblem &p) { p.heads = 16; },
      [](AttentionProblem &p) { p.kvHeads = 8; },
      [](AttentionProblem &p) { p.seqQ = 256; },
      [](AttentionProblem &p) { p.seqKv = 128; },
      [](AttentionProblem &p) { p.headDim = 128; },
      [](AttentionProblem &p) { p.element = ElementType::F16; },
      [](AttentionProblem &p) { p.layout = AttentionLayout::Bshd; },
      [](AttentionProblem &p) { p.mask = AttentionMask::None; },
      [](AttentionProblem &p) { p.mask = AttentionMask::Padding; },
      [](AttentionProblem &p) { p.mask = AttentionMask::PaddingCausal; },
      // Scales one ulp apart are different graphs (the scale is baked in).
      [](AttentionProblem &p) { p.softmaxScale = std::nextafter(0.125, 1.0); },
      [](AttentionProblem &p) { p.dropout = 0.0; },
      [](AttentionProblem &p) { p.dropout = std::nextafter(0.1, 1.0); },
      [](AttentionProblem &p) { p.backward = false; },
      [](AttentionProblem &p) { p.tokenStrides.q = 768; },
      [](AttentionProblem &p) { p.tokenStrides.k = 768; },
      [](AttentionProblem &p) { p.tokenStrides.v = 768; },
      [](AttentionProblem &p) { p.tokenStrides.gradQ = 768; },
      [](AttentionProblem &p) { p.tokenStrides.gradK = 768; },
      [](AttentionProblem &p) { p.tokenStrides.gradV = 768; },
      [](AttentionProblem &p) { p.windowLeft = 16; },
      [](AttentionProblem &p) { p.windowLeft = 64; },
  };
  std::set<std::string> keys = {validProblem().key()};
  for (auto change : changes) {
    AttentionProblem problem = validProblem();
    change(problem);
    EXPECT_TRUE(keys.insert(problem.key()).second) << problem.key();
  }
  EXPECT_EQ(validProblem().key(), validProblem().key());
}

TEST(AttentionRunnerTest, InvalidProblemFailsBeforeLookingForAGpu) {
  AttentionProblem problem = validProblem();
  problem.headDim = 12;
  auto runner = AttentionRunner::get(problem);
  ASSERT_FALSE(bool(runner));
  auto [code, message] = takeFailure(runner.takeError());
  EXPECT_EQ(code, ErrorCode::Unsupported);
  EXPECT_NE(message.find("head dim 12"), std::string::npos) << message;
}

TEST(AttentionRunnerTest, NoGpuIsAClearError) {
  auto runner = AttentionRunner::get(validProblem());
  if (runner) {
    // A machine with a GPU and cuDNN: the runner is usable.
    EXPECT_EQ((*runner)->problem().key(), validProblem().key());
    GTEST_SKIP() << "a GPU and cuDNN are present: "
                 << (*runner)->describeEngine();
  }
  auto [code, message] = takeFailure(runner.takeError());
  // No driver or GPU, no current context, no cuDNN, or no engine: each is
  // a coded error that names the problem.
  EXPECT_TRUE(code == ErrorCode::NoDevice || code == ErrorCode::State ||
              code == ErrorCode::Unsupported ||
              code == ErrorCode::UnsupportedDevice)
      << message;
  EXPECT_NE(message.find(validProblem().key()), std::string::npos) << message;
}

TEST(AttentionEngineConfigTest, SpellsOutEngineAndKnobs) {
  AttentionEngineConfig config;
  config.engine = 2;
  EXPECT_EQ(config.str(), "engine 2");
  config.knobs = {{24, 7}, {14, 1}};
  EXPECT_EQ(config.str(), "engine 2, knobs 24=7 14=1");
  AttentionEngineConfig other = config;
  EXPECT_TRUE(other == config);
  other.knobs.back().second = 2;
  EXPECT_FALSE(other == config);
}

/// candidates() and create() take get()'s path to a GPU: the same checks,
/// the same clear errors.
TEST(AttentionRunnerTest, EngineChoicesFailAsGetDoes) {
  AttentionProblem bad = validProblem();
  bad.headDim = 12;
  AttentionEngineConfig config;
  config.engine = 0;
  llvm::Error errors[] = {AttentionRunner::candidates(bad).takeError(),
                          AttentionRunner::create(bad, config).takeError()};
  for (llvm::Error &error : errors) {
    auto [code, message] = takeFailure(std::move(error));
    EXPECT_EQ(code, ErrorCode::Unsupported);
    EXPECT_NE(message.find("head dim 12"), std::string::npos) << message;
  }
  auto candidates = AttentionRunner::candidates(validProblem());
  if (candidates) {
    // A GPU and cuDNN: the heuristics' first is among the candidates.
    auto runner = AttentionRunner::get(validProblem());
    ASSERT_TRUE(bool(runner)) << llvm::toString(runner.takeError());
    EXPECT_NE(llvm::find(*candidates, (*runner)->engineConfig()),
              candidates->end());
    GTEST_SKIP() << "a GPU and cuDNN are present";
  }
  auto [code, message] = takeFailure(candidates.takeError());
  EXPECT_TRUE(code == ErrorCode::NoDevice || code == ErrorCode::State ||
              code == ErrorCode::Unsupported ||
              code == ErrorCode::UnsupportedDevice)
      << message;
  EXPECT_NE(message.find(validProblem().key()), std::string::npos) << message;
}

TEST(CudnnTest, LoadsOrSaysWhy) {
  auto lib = Cudnn::get();
  if (!lib) {
    auto [code, message] = takeFailure(lib.takeError());
    EXPECT_EQ(code, ErrorCode::Unsupported);
    EXPECT_NE(message.find("cuDNN could not be loaded"), std::string::npos)
        << message;
    EXPECT_NE(message.find("libcudnn.so.9"), std::string::npos) << message;
    return;
  }
  EXPECT_GE(lib->version, 90000u);
  EXPECT_FALSE(lib->path.empty());
  EXPECT_EQ(lib->versionString().substr(0, 2), "9.");
  std::string text = lib->statusText(CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_NE(text.find("CUDNN_STATUS_NOT_SUPPORTED"), std::string::npos) << text;
  // Descriptors need no GPU.
  auto desc = BackendDescriptor::create(*lib, CUDNN_BACKEND_TENSOR_DESCRIPTOR,
                                        "tensor");
  ASSERT_TRUE(bool(desc)) << llvm::toString(desc.takeError());
  EXPECT_TRUE(bool(*desc));
  // Finalizing an empty tensor descriptor fails with cuDNN's explanation.
  llvm::Error error =
      lib->check(lib->cudnnBackendFinalize(desc->get()), "finalize");
  auto [code, message] = takeFailure(std::move(error));
  EXPECT_EQ(code, ErrorCode::Internal);
  EXPECT_NE(message.find("finalize: CUDNN_STATUS_"), std::string::npos)
      << message;
}

/// Builds the graph of every problem variant without a handle: cuDNN
/// checks each tensor and operation descriptor and the graph's structure on
/// the host, which catches wrong attribute types, shapes and data types
/// before a GPU ever sees them.
TEST(AttentionGraphTest, EveryVariantFinalizesWithoutAGpu) {
  auto lib = Cudnn::get();
  if (!lib) {
    std::string message = llvm::toString(lib.takeError());
    GTEST_SKIP() << "no cuDNN: " << message;
  }
  int built = 0;
  for (bool backward : {false, true})
    for (AttentionMask mask :
         {AttentionMask::None, AttentionMask::Causal, AttentionMask::Padding,
          AttentionMask::PaddingCausal})
      for (double dropout : {0.0, 0.2})
        for (int64_t kvHeads : {8, 2, 1})
          for (AttentionLayout layout :
               {AttentionLayout::Sbhd, AttentionLayout::Bshd})
            for (ElementType element : {ElementType::BF16, ElementType::F16}) {
              AttentionProblem problem = validProblem();
              problem.backward = backward;
              problem.mask = mask;
              problem.dropout = dropout;
              problem.kvHeads = kvHeads;
              problem.layout = layout;
              problem.element = element;
              // s_kv 200 also takes the full-length padding workaround of
              // cuDNN <= 9.15 in the backward.
              problem.seqKv = kvHeads == 2 ? 200 : 256;
              // GQA reads q, k and v in place from a QKV projection's rows
              // (8 + 2 + 2 heads of 64).
              if (kvHeads == 2)
                problem.tokenStrides = {768, 768, 768, 768, 768, 768};
              auto graph = attention::buildGraph(*lib, nullptr, problem);
              ASSERT_TRUE(bool(graph)) << llvm::toString(graph.takeError());
              ++built;
              std::set<attention::Slot> slots;
              for (const attention::Binding &binding : graph->bindings)
                slots.insert(binding.slot);
              using attention::Slot;
              for (Slot slot : {Slot::Q, Slot::K, Slot::V, Slot::O, Slot::Stats,
                                Slot::Host})
                EXPECT_TRUE(slots.count(slot)) << problem.key();
              for (Slot slot : {Slot::GradO, Slot::GradQ, Slot::GradK,
                                Slot::GradV, Slot::Workspace})
                EXPECT_EQ(slots.count(slot), size_t(backward)) << problem.key();
              EXPECT_EQ(slots.count(Slot::SeqLenQ), size_t(problem.padding()))
                  << problem.key();
              EXPECT_EQ(slots.count(Slot::Seed), size_t(dropout > 0))
                  << problem.key();
              EXPECT_EQ(graph->workspaceBytes % 256, 0u);
              if (backward) {
                // The softmax sum and the f32 dQ accumulator at least.
                EXPECT_GE(graph->workspaceBytes,
                          size_t(2 * 8 * 128 * (1 + 64) * 4));
              }
            }
  EXPECT_EQ(built, 2 * 4 * 2 * 3 * 2 * 2);
}

/// The sliding-window masks (a left bound, with and without causal and
/// padding masks) build and finalize too.
TEST(AttentionGraphTest, WindowVariantsFinalizeWithoutAGpu) {
  auto lib = Cudnn::get();
  if (!lib) {
    std::string message = llvm::toString(lib.takeError());
    GTEST_SKIP() << "no cuDNN: " << message;
  }
  int built = 0;
  for (bool backward : {false, true})
    for (AttentionMask mask :
         {AttentionMask::None, AttentionMask::Causal, AttentionMask::Padding,
          AttentionMask::PaddingCausal})
      for (int64_t left : {0, 31, 127}) {
        AttentionProblem problem = validProblem();
        problem.backward = backward;
        problem.mask = mask;
        problem.seqKv = problem.seqQ;
        problem.windowLeft = left;
        ASSERT_FALSE(bool(problem.validate())) << problem.key();
        auto graph = attention::buildGraph(*lib, nullptr, problem);
        ASSERT_TRUE(bool(graph)) << llvm::toString(graph.takeError());
        ++built;
      }
  EXPECT_EQ(built, 2 * 4 * 3);
}

} // namespace
