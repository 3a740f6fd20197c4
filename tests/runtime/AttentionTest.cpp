//===- AttentionTest.cpp - the cuDNN attention runner without a GPU -------===//
//
// What can be checked without a GPU: problems are validated with messages
// that name the problem and the offending value, keys tell problems apart,
// and asking for a runner where there is no GPU (or no cuDNN) is a clear
// error, not a crash. Where cuDNN can be loaded (no GPU needed), every
// graph variant must also pass cuDNN's own checks of each descriptor and of
// the operation graph. A plan's attention steps (the launcher) are read into
// problems without cuDNN. tests/gpu/attention_check.cpp checks the numbers.
//
//===----------------------------------------------------------------------===//
#include "runtime/Attention.h"
#include "runtime/AttentionGraph.h"
#include "runtime/AttentionLauncher.h"
#include "runtime/Cudnn.h"
#include "tests/runtime/StepFunctions.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <tuple>

using namespace tejit::runtime;
using namespace tejit::runtime::steptest;

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

/// Packed sequences: 3 of them in 1000 query and 1000 key tokens, the
/// longest at most 128, GQA, read in place from a fused QKV projection.
AttentionProblem thdProblem() {
  AttentionProblem problem = validProblem();
  problem.layout = AttentionLayout::Thd;
  problem.batch = 3;
  problem.seqQ = problem.seqKv = 128;
  problem.tokensQ = problem.tokensKv = 1000;
  problem.mask = AttentionMask::PaddingCausal;
  problem.tokenStrides = {768, 768, 768, 768, 768, 768};
  return problem;
}

/// A kv-cache step: 4 sequences, 64 new tokens packed (thd), caches of 2048
/// rows, GQA, the new k and v read from a fused QKV projection's rows.
AttentionProblem kvCacheProblem() {
  AttentionProblem problem = thdProblem();
  problem.kvCache = true;
  problem.backward = false;
  problem.dropout = 0;
  problem.batch = 4;
  problem.seqQ = 16;
  problem.seqKv = 2048;
  problem.tokensQ = problem.tokensKv = 64;
  problem.mask = AttentionMask::PaddingCausalBottomRight;
  problem.tokenStrides = {768, 768, 768, 0, 0, 0};
  return problem;
}

/// The message and code of `error` (which must be one).
std::pair<ErrorCode, std::string> takeFailure(llvm::Error error) {
  EXPECT_TRUE(bool(error));
  std::string message;
  ErrorCode code = takeError(std::move(error), message);
  return {code, message};
}

/// A change that makes a valid plan step unreadable, and a part of the
/// message AttentionLauncher::parse must give.
struct StepRejection {
  const char *name;
  void (*change)(AttentionStep &);
  const char *expected;
};

/// Applies each rejection to the step `stepOf` picks of a fresh `Fixture`
/// (a plan function with its steps): parse() must fail as Unsupported
/// with the expected words, naming the function and the step.
template <typename Fixture, typename StepOf>
void expectStepRejections(llvm::ArrayRef<StepRejection> rejections,
                          StepOf stepOf) {
  for (const StepRejection &c : rejections) {
    Fixture fixture;
    AttentionStep &step = stepOf(fixture);
    c.change(step);
    auto launcher = AttentionLauncher::parse(step, fixture.function);
    ASSERT_FALSE(bool(launcher)) << c.name;
    auto [code, message] = takeFailure(launcher.takeError());
    EXPECT_EQ(code, ErrorCode::Unsupported) << c.name;
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.name << ": " << message;
    EXPECT_NE(message.find("function 'layer', attention step"),
              std::string::npos)
        << c.name << ": " << message;
  }
}

/// A change that makes a valid problem invalid, and a part of the message
/// validate() must give.
struct Rejection {
  const char *name;
  void (*change)(AttentionProblem &);
  const char *expected;
};

/// Applies each rejection to `make()`'s problem: validate() must fail as
/// Unsupported with a message that has the expected words and names the
/// problem (its key).
void expectRejections(AttentionProblem (*make)(),
                      llvm::ArrayRef<Rejection> rejections) {
  for (const Rejection &c : rejections) {
    AttentionProblem problem = make();
    c.change(problem);
    auto [code, message] = takeFailure(problem.validate());
    EXPECT_EQ(code, ErrorCode::Unsupported) << c.name;
    EXPECT_NE(message.find(c.expected), std::string::npos)
        << c.name << ": " << message;
    EXPECT_NE(message.find(problem.key()), std::string::npos)
        << c.name << ": " << message;
  }
}

/// A cuDNN version and compute capability that must or must not run a
/// problem: validateFor's verdict, with the expected words (null: runs).
struct VersionCase {
  const AttentionProblem &problem;
  int64_t version, capability;
  const char *expected;
};

void expectVersionCases(llvm::ArrayRef<VersionCase> cases) {
  for (const VersionCase &c : cases) {
    llvm::Error error = c.problem.validateFor(c.version, c.capability);
    if (!c.expected) {
      EXPECT_FALSE(bool(error)) << c.version << " sm_" << c.capability << ": "
                                << llvm::toString(std::move(error));
      continue;
    }
    auto [code, message] = takeFailure(std::move(error));
    EXPECT_EQ(code, ErrorCode::Unsupported);
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_NE(message.find(c.problem.key()), std::string::npos) << message;
  }
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
  const Rejection cases[] = {
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
  expectRejections(validProblem, cases);
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
      [](AttentionProblem &p) { p.layout = AttentionLayout::Thd; },
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

//===----------------------------------------------------------------------===//
// Packed sequences (thd)
//===----------------------------------------------------------------------===//

TEST(AttentionThdTest, KeyNamesTheLayoutButNotTheTokenCounts) {
  AttentionProblem problem = thdProblem();
  EXPECT_FALSE(bool(problem.validate()));
  EXPECT_EQ(problem.key(),
            "attention_bwd bf16 thd b=3 h=8 kv_heads=2 s_q=128 s_kv=128 d=64 "
            "mask=padding_causal scale=0.125 dropout=0.1 q_stride=768 "
            "k_stride=768 v_stride=768 dq_stride=768 dk_stride=768 "
            "dv_stride=768");
  EXPECT_EQ(attentionLayoutName(AttentionLayout::Thd), "thd");
  // The graph is the same whatever the buffer's token count: one plan.
  AttentionProblem longer = problem;
  longer.tokensQ = longer.tokensKv = 4000;
  EXPECT_EQ(longer.key(), problem.key());
  // The padded bshd problem of the same sizes is another graph.
  AttentionProblem padded = problem;
  padded.layout = AttentionLayout::Bshd;
  EXPECT_NE(padded.key(), problem.key());
}

TEST(AttentionThdTest, RejectsWithClearMessages) {
  const Rejection cases[] = {
      {"no mask", [](AttentionProblem &p) { p.mask = AttentionMask::None; },
       "the thd layout needs a padding mask type"},
      {"causal", [](AttentionProblem &p) { p.mask = AttentionMask::Causal; },
       "(padding or padding_causal)"},
      {"no tokens", [](AttentionProblem &p) { p.tokensKv = 0; },
       "token counts of q and k/v (t, t_kv) to be positive"},
      // 768 elements a token: 2^31 / 768 = 2796202 tokens at most.
      {"offsets past int32", [](AttentionProblem &p) { p.tokensQ = 2796203; },
       "do not fit the int32 element offsets"},
      {"window, s_q != s_kv",
       [](AttentionProblem &p) {
         p.seqKv = 256;
         p.windowLeft = 16;
       },
       "a sliding window needs as many queries as keys"},
  };
  expectRejections(thdProblem, cases);
  // The largest buffer that still fits passes.
  AttentionProblem largest = thdProblem();
  largest.tokensQ = 2796202;
  EXPECT_FALSE(bool(largest.validate()));
}

TEST(AttentionThdTest, NeedsARecentEnoughCudnnAndGpu) {
  AttentionProblem gqa = thdProblem(); // kv_heads 2 < heads 8
  AttentionProblem mha = thdProblem();
  mha.kvHeads = mha.heads;
  mha.tokenStrides = {};
  AttentionProblem window = mha;
  window.windowLeft = 31;
  const VersionCase cases[] = {
      {mha, 90003, 90, "needs cuDNN 9.1.0 or newer (this is 9.0.3)"},
      {mha, 90100, 90, nullptr},
      {gqa, 90501, 90, "with kv_heads < heads needs cuDNN 9.6.0"},
      {gqa, 90600, 90, nullptr},
      {window, 90500, 90, "with a sliding window needs cuDNN 9.6.0"},
      {window, 91900, 90, nullptr},
      {gqa, 91800, 80, "needs a Hopper or newer GPU before cuDNN 9.18.1"},
      {gqa, 91801, 86, nullptr},
      {gqa, 91900, 100, nullptr},
  };
  expectVersionCases(cases);
  // The padded layouts have no such limits here.
  EXPECT_FALSE(bool(validProblem().validateFor(90000, 80)));
}

/// Every thd variant builds and finalizes on the host, with the ragged
/// offsets of q, k, v, o (and dq, dk, dv) and the sequence lengths bound.
TEST(AttentionThdTest, EveryVariantFinalizesWithoutAGpu) {
  auto lib = Cudnn::get();
  if (!lib) {
    std::string message = llvm::toString(lib.takeError());
    GTEST_SKIP() << "no cuDNN: " << message;
  }
  using attention::Slot;
  int built = 0;
  for (bool backward : {false, true})
    for (AttentionMask mask :
         {AttentionMask::Padding, AttentionMask::PaddingCausal})
      for (double dropout : {0.0, 0.2})
        for (int64_t kvHeads : {8, 2, 1})
          for (bool strided : {false, true})
            for (int64_t window : {-1, 31}) {
              AttentionProblem problem = thdProblem();
              problem.backward = backward;
              problem.mask = mask;
              problem.dropout = dropout;
              problem.kvHeads = kvHeads;
              int64_t width = (8 + 2 * kvHeads) * 64;
              problem.tokenStrides = {};
              if (strided)
                problem.tokenStrides = {width, width, width,
                                        width, width, width};
              problem.windowLeft = window;
              ASSERT_FALSE(bool(problem.validate())) << problem.key();
              auto graph = attention::buildGraph(*lib, nullptr, problem);
              ASSERT_TRUE(bool(graph)) << llvm::toString(graph.takeError());
              ++built;
              std::multiset<Slot> slots;
              for (const attention::Binding &binding : graph->bindings)
                slots.insert(binding.slot);
              for (Slot slot : {Slot::RaggedQ, Slot::RaggedK, Slot::RaggedV,
                                Slot::RaggedO, Slot::SeqLenQ, Slot::SeqLenKv})
                EXPECT_EQ(slots.count(slot), 1u) << problem.key();
              for (Slot slot :
                   {Slot::RaggedGradQ, Slot::RaggedGradK, Slot::RaggedGradV})
                EXPECT_EQ(slots.count(slot), size_t(backward)) << problem.key();
            }
  EXPECT_EQ(built, 2 * 2 * 2 * 3 * 2 * 2);
}

TEST(AttentionThdTest, PrepScratchHoldsLengthsAndOffsets) {
  AttentionProblem problem = thdProblem();
  size_t bytes = thdPrepBytes(problem);
  EXPECT_EQ(bytes % 256, 0u);
  // Two length arrays [b] and seven offset arrays [b + 1], 256-aligned.
  EXPECT_EQ(bytes, size_t(9 * 256));
  problem.batch = 100;
  EXPECT_EQ(thdPrepBytes(problem), size_t(2 * 512 + 7 * 512));
}

//===----------------------------------------------------------------------===//
// kv cache
//===----------------------------------------------------------------------===//

TEST(AttentionKvCacheTest, KeyNamesTheCacheAndTheMask) {
  AttentionProblem problem = kvCacheProblem();
  EXPECT_FALSE(bool(problem.validate()));
  EXPECT_EQ(problem.key(),
            "attention bf16 thd kv_cache b=4 h=8 kv_heads=2 s_q=16 s_kv=2048 "
            "d=64 mask=padding_causal_bottom_right scale=0.125 dropout=0 "
            "q_stride=768 k_stride=768 v_stride=768");
  EXPECT_EQ(attentionMaskName(AttentionMask::PaddingCausalBottomRight),
            "padding_causal_bottom_right");
  EXPECT_TRUE(problem.padding());
  EXPECT_TRUE(problem.causal());
  EXPECT_TRUE(problem.bottomRight());
  // The same packed queries over thd keys: another graph.
  AttentionProblem thd = problem;
  thd.kvCache = false;
  thd.mask = AttentionMask::PaddingCausal;
  EXPECT_NE(thd.key(), problem.key());
  AttentionProblem padding = problem;
  padding.mask = AttentionMask::Padding;
  EXPECT_FALSE(bool(padding.validate()));
  EXPECT_NE(padding.key(), problem.key());
  // The number of new tokens bounds the sequences, not the graph.
  AttentionProblem more = problem;
  more.tokensQ = more.tokensKv = 4096;
  EXPECT_EQ(more.key(), problem.key());
  // Decoding: one new token per sequence.
  AttentionProblem decode = problem;
  decode.seqQ = 1;
  EXPECT_FALSE(bool(decode.validate()));
  EXPECT_NE(decode.key(), problem.key());
}

TEST(AttentionKvCacheTest, RejectsWithClearMessages) {
  const Rejection cases[] = {
      {"backward", [](AttentionProblem &p) { p.backward = true; },
       "a kv cache is for inference: there is no backward"},
      {"dropout", [](AttentionProblem &p) { p.dropout = 0.1; },
       "dropout must be 0"},
      {"window", [](AttentionProblem &p) { p.windowLeft = 31; },
       "a kv cache takes no sliding window"},
      {"top-left causal",
       [](AttentionProblem &p) { p.mask = AttentionMask::PaddingCausal; },
       "takes the mask type padding or padding_causal_bottom_right, not "
       "padding_causal"},
      {"no mask", [](AttentionProblem &p) { p.mask = AttentionMask::None; },
       "not none"},
      {"bshd queries",
       [](AttentionProblem &p) { p.layout = AttentionLayout::Bshd; },
       "a kv cache takes thd queries"},
      {"more new tokens than rows",
       [](AttentionProblem &p) {
         p.seqQ = 4096;
         p.seqKv = 2048;
       },
       "max_seqlen_q (4096) exceeds the cache's 2048 rows"},
      {"gradient strides",
       [](AttentionProblem &p) { p.tokenStrides.gradQ = 768; },
       "a kv cache has no gradients to give strides"},
      {"no tokens", [](AttentionProblem &p) { p.tokensQ = p.tokensKv = 0; },
       "token counts of q and k/v (t, t_kv) to be positive"},
      {"head dim 100", [](AttentionProblem &p) { p.headDim = 100; },
       "head dim 100 is not supported"},
      {"a paged cache of no pages",
       [](AttentionProblem &p) {
         p.pageSize = 16;
         p.pages = 0;
       },
       "a paged kv cache needs a positive page size and number of pages"},
      {"a paged cache of part pages",
       [](AttentionProblem &p) {
         p.pageSize = 48;
         p.pages = 10;
       },
       "a paged kv cache's 2048 rows a sequence must be whole pages of 48"},
      {"a page table without a cache",
       [](AttentionProblem &p) {
         p.kvCache = false;
         p.pageSize = 16;
         p.pages = 10;
       },
       "a page table serves a kv cache only"},
      // Bottom-right alignment outside the kv cache.
      {"bottom right without a cache",
       [](AttentionProblem &p) { p.kvCache = false; },
       "padding_causal_bottom_right is supported with a kv cache only"},
  };
  expectRejections(kvCacheProblem, cases);
}

TEST(AttentionKvCacheTest, NeedsCudnn97) {
  AttentionProblem problem = kvCacheProblem();
  auto [code, message] = takeFailure(problem.validateFor(90600, 90));
  EXPECT_EQ(code, ErrorCode::Unsupported);
  EXPECT_NE(message.find("a kv cache (thd queries over bshd k/v caches) needs "
                         "cuDNN 9.7.0 or newer (this is 9.6.0)"),
            std::string::npos)
      << message;
  EXPECT_FALSE(bool(problem.validateFor(90700, 90)));
  // Ragged queries: Hopper or newer before 9.18.1, as thd.
  auto [adaCode, ada] = takeFailure(problem.validateFor(91000, 89));
  EXPECT_NE(ada.find("needs a Hopper or newer GPU before cuDNN 9.18.1"),
            std::string::npos)
      << ada;
  EXPECT_FALSE(bool(problem.validateFor(91801, 89)));
}

/// The kv-cache graph builds and finalizes on the host: ragged q and o,
/// plain K and V (the caches), the lengths, no stats pointer (the
/// statistics stay in the workspace).
TEST(AttentionKvCacheTest, EveryVariantFinalizesWithoutAGpu) {
  auto lib = Cudnn::get();
  if (!lib) {
    std::string message = llvm::toString(lib.takeError());
    GTEST_SKIP() << "no cuDNN: " << message;
  }
  using attention::Slot;
  int built = 0;
  for (AttentionMask mask :
       {AttentionMask::Padding, AttentionMask::PaddingCausalBottomRight})
    for (int64_t kvHeads : {8, 2, 1})
      for (int64_t seqQ : {1, 16})
        for (ElementType element : {ElementType::BF16, ElementType::F16}) {
          AttentionProblem problem = kvCacheProblem();
          problem.mask = mask;
          problem.kvHeads = kvHeads;
          problem.seqQ = seqQ;
          problem.element = element;
          int64_t width = (8 + 2 * kvHeads) * 64;
          problem.tokenStrides = {width, width, width, 0, 0, 0};
          ASSERT_FALSE(bool(problem.validate())) << problem.key();
          auto graph = attention::buildGraph(*lib, nullptr, problem);
          ASSERT_TRUE(bool(graph)) << llvm::toString(graph.takeError());
          ++built;
          std::multiset<Slot> slots;
          for (const attention::Binding &binding : graph->bindings)
            slots.insert(binding.slot);
          for (Slot slot : {Slot::Q, Slot::K, Slot::V, Slot::O, Slot::RaggedQ,
                            Slot::RaggedO, Slot::SeqLenQ, Slot::SeqLenKv})
            EXPECT_EQ(slots.count(slot), 1u) << problem.key();
          for (Slot slot : {Slot::RaggedK, Slot::RaggedV, Slot::Stats,
                            Slot::GradQ, Slot::Seed})
            EXPECT_EQ(slots.count(slot), 0u) << problem.key();
          // The statistics: [b, h, s_q] floats.
          EXPECT_GE(graph->workspaceBytes, size_t(4 * 8 * seqQ * 4));
        }
  EXPECT_EQ(built, 2 * 3 * 2 * 2);
}

//===----------------------------------------------------------------------===//
// Plan steps
//===----------------------------------------------------------------------===//

/// A function whose values have the given types (ids in order).

/// A thd forward step over values 0-7: q [1000, 8, 64], k and v [1000, 2,
/// 64], cu_seqlens i32 [4], o and stats results, an rng state; and a thd
/// backward step over values 0-12 (dO 8, dq 9, dk 10, dv 11, a second
/// cu_seqlens 12).
struct ThdSteps {
  FunctionPlan function = functionWith({
      tensorOf({1000, 8, 64}, ElementType::BF16), // 0 q
      tensorOf({1000, 2, 64}, ElementType::BF16), // 1 k
      tensorOf({1000, 2, 64}, ElementType::BF16), // 2 v
      tensorOf({4}, ElementType::I32),            // 3 cu_seqlens
      tensorOf({1000, 8, 64}, ElementType::BF16), // 4 o
      tensorOf({3, 8, 128}, ElementType::F32),    // 5 stats
      tensorOf({2}, ElementType::I64),            // 6 rng state
      tensorOf({3, 1, 1, 128}, ElementType::I1),  // 7 a mask
      tensorOf({1000, 8, 64}, ElementType::BF16), // 8 dO
      tensorOf({1000, 8, 64}, ElementType::BF16), // 9 dq
      tensorOf({1000, 2, 64}, ElementType::BF16), // 10 dk
      tensorOf({1000, 2, 64}, ElementType::BF16), // 11 dv
      tensorOf({4}, ElementType::I32),            // 12 cu_seqlens_kv
      tensorOf({1}, ElementType::I32),            // 13 too short
      tensorOf({3, 8, 64}, ElementType::F32),     // 14 stats too short
  });
  AttentionStep forward, backward;

  ThdSteps() {
    forward.operands = {0, 1, 2, 3};
    forward.results = {4, 5};
    forward.attributes = {{"qkv_format", "#te.qkv_format<thd>"},
                          {"attn_mask_type", "#te.attn_mask_type<padding>"},
                          {"softmax_scale", "1.250000e-01 : f64"},
                          {"max_seqlen_q", "128 : i64"},
                          {"max_seqlen_kv", "128 : i64"}};
    backward = forward;
    backward.backward = true;
    backward.operands = {8, 0, 1, 2, 4, 5, 3, 12};
    backward.results = {9, 10, 11};
  }
};

TEST(AttentionLauncherTest, ReadsAThdStep) {
  ThdSteps steps;
  auto launcher = AttentionLauncher::parse(steps.forward, steps.function);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  const AttentionProblem &p = launcher->problem();
  EXPECT_EQ(p.layout, AttentionLayout::Thd);
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.heads, 8);
  EXPECT_EQ(p.kvHeads, 2);
  EXPECT_EQ(p.headDim, 64);
  EXPECT_EQ(p.seqQ, 128);
  EXPECT_EQ(p.seqKv, 128);
  EXPECT_EQ(p.tokensQ, 1000);
  EXPECT_EQ(p.tokensKv, 1000);
  EXPECT_EQ(p.mask, AttentionMask::Padding);
  EXPECT_EQ(p.softmaxScale, 0.125);
  EXPECT_FALSE(p.backward);
  // One cu_seqlens serves queries and keys.
  EXPECT_EQ(launcher->cuSeqlensQValue(), std::optional<int64_t>(3));
  EXPECT_EQ(launcher->cuSeqlensKvValue(), std::nullopt);

  // The backward, with dropout, a right window bound of 0 (the causal
  // mask), a fused QKV projection's strides and cu_seqlens for each side.
  steps.backward.operands = {8, 0, 1, 2, 4, 5, 6, 3, 12};
  steps.backward.attributes["dropout"] = "1.000000e-01 : f64";
  steps.backward.attributes["window_size"] = "array<i64: 64, 0>";
  steps.backward.tokenStrides = {{"q", 768}, {"k", 768}, {"v", 768}};
  auto backward = AttentionLauncher::parse(steps.backward, steps.function);
  ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
  const AttentionProblem &b = backward->problem();
  EXPECT_TRUE(b.backward);
  EXPECT_EQ(b.mask, AttentionMask::PaddingCausal);
  EXPECT_EQ(b.windowLeft, 64);
  EXPECT_EQ(b.windowRight, -1);
  EXPECT_EQ(b.dropout, 0.1);
  EXPECT_EQ(b.tokenStrides.q, 768);
  EXPECT_EQ(b.tokenStrides.gradQ, 0);
  EXPECT_EQ(backward->cuSeqlensQValue(), std::optional<int64_t>(3));
  EXPECT_EQ(backward->cuSeqlensKvValue(), std::optional<int64_t>(12));
}

TEST(AttentionLauncherTest, RefusesMalformedThdSteps) {
  const StepRejection cases[] = {
      {"causal",
       [](AttentionStep &s) {
         s.attributes["attn_mask_type"] = "#te.attn_mask_type<causal>";
       },
       "qkv_format thd takes attn_mask_type padding or padding_causal, not "
       "'causal'"},
      {"bottom right",
       [](AttentionStep &s) {
         s.attributes["attn_mask_type"] =
             "#te.attn_mask_type<padding_causal_bottom_right>";
       },
       "not 'padding_causal_bottom_right'"},
      {"no max_seqlen_kv",
       [](AttentionStep &s) { s.attributes.erase("max_seqlen_kv"); },
       "has no 'max_seqlen_kv' attribute"},
      {"max_seqlen not an integer",
       [](AttentionStep &s) { s.attributes["max_seqlen_q"] = "x : i64"; },
       "attribute 'max_seqlen_q' is 'x : i64', not an integer"},
      {"no cu_seqlens",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2};
       },
       "qkv_format thd without a cu_seqlens operand"},
      {"a mask operand",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 7, 3};
       },
       "qkv_format thd takes no mask operand"},
      {"4-D query",
       [](AttentionStep &s) {
         s.attributes["qkv_format"] = "#te.qkv_format<thd>";
         s.operands = {7, 1, 2, 3};
       },
       "qkv_format thd takes 3-D query and key tensors"},
      {"stats of the wrong shape",
       [](AttentionStep &s) {
         s.results = {4, 14};
       },
       "a value of shape [3, 8, 64] where [3, 8, 128] is expected"},
      {"stats of bf16",
       [](AttentionStep &s) {
         s.results = {4, 0};
       },
       "qkv_format thd takes f32 softmax statistics"},
      {"cu_seqlens of one entry",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 13};
       },
       "takes cu_seqlens as i32 [b + 1] with b >= 1; got [1] of i32"},
      {"cu_seqlens_kv of another batch",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 3, 13};
       },
       "cu_seqlens_kv [1] does not match cu_seqlens_q [4]"},
      {"cu_seqlens with bshd",
       [](AttentionStep &s) {
         s.attributes["qkv_format"] = "#te.qkv_format<bshd>";
       },
       "cu_seqlens operands need qkv_format thd"},
      {"max_seqlen 0",
       [](AttentionStep &s) { s.attributes["max_seqlen_q"] = "0 : i64"; },
       "max_seqlen_q (0) and max_seqlen_kv (128) must be positive"},
  };
  expectStepRejections<ThdSteps>(
      cases,
      [](ThdSteps &fixture) -> AttentionStep & { return fixture.forward; });
}

/// A kv_cache_attention step over values 0-8: q [64, 8, 64], k and v [64,
/// 2, 64], caches [4, 2048, 2, 64], cu_seqlens_q and _kv i32 [5], o; and
/// values to get wrong (9-13).
struct KvCacheStep {
  FunctionPlan function = functionWith({
      tensorOf({64, 8, 64}, ElementType::BF16),      // 0 q
      tensorOf({64, 2, 64}, ElementType::BF16),      // 1 k
      tensorOf({64, 2, 64}, ElementType::BF16),      // 2 v
      tensorOf({4, 2048, 2, 64}, ElementType::BF16), // 3 k_cache
      tensorOf({4, 2048, 2, 64}, ElementType::BF16), // 4 v_cache
      tensorOf({5}, ElementType::I32),               // 5 cu_seqlens_q
      tensorOf({5}, ElementType::I32),               // 6 cu_seqlens_kv
      tensorOf({64, 8, 64}, ElementType::BF16),      // 7 o
      tensorOf({4, 2048, 2, 64}, ElementType::F16),  // 8 an f16 cache
      tensorOf({3, 2048, 2, 64}, ElementType::BF16), // 9 a cache of 3
      tensorOf({4}, ElementType::I32),               // 10 cu_seqlens of 3
      tensorOf({64, 2, 64}, ElementType::BF16),      // 11 (unused)
      tensorOf({64, 8, 64, 1}, ElementType::BF16),   // 12 a 4-D q
      tensorOf({4, 2048, 4, 64}, ElementType::BF16), // 13 4 kv heads
  });
  AttentionStep step;

  KvCacheStep() {
    step.kvCache = true;
    step.operands = {0, 1, 2, 3, 4, 5, 6};
    step.results = {7};
    step.attributes = {
        {"attn_mask_type", "#te.attn_mask_type<padding_causal_bottom_right>"},
        {"softmax_scale", "1.250000e-01 : f64"},
        {"max_seqlen_q", "1 : i64"}};
  }
};

TEST(AttentionLauncherTest, ReadsAKvCacheStep) {
  KvCacheStep kv;
  kv.step.tokenStrides = {{"q", 768}, {"k", 768}, {"v", 768}};
  auto launcher = AttentionLauncher::parse(kv.step, kv.function);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  const AttentionProblem &p = launcher->problem();
  EXPECT_TRUE(p.kvCache);
  EXPECT_FALSE(p.backward);
  EXPECT_EQ(p.layout, AttentionLayout::Thd);
  EXPECT_EQ(p.mask, AttentionMask::PaddingCausalBottomRight);
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.heads, 8);
  EXPECT_EQ(p.kvHeads, 2);
  EXPECT_EQ(p.headDim, 64);
  EXPECT_EQ(p.seqQ, 1);
  EXPECT_EQ(p.seqKv, 2048);
  EXPECT_EQ(p.tokensQ, 64);
  EXPECT_EQ(p.tokensKv, 64);
  EXPECT_EQ(p.softmaxScale, 0.125);
  EXPECT_EQ(p.tokenStrides.k, 768);
  EXPECT_EQ(p.key(), "attention bf16 thd kv_cache b=4 h=8 kv_heads=2 s_q=1 "
                     "s_kv=2048 d=64 mask=padding_causal_bottom_right "
                     "scale=0.125 dropout=0 q_stride=768 k_stride=768 "
                     "v_stride=768");
  EXPECT_EQ(launcher->cuSeqlensQValue(), std::optional<int64_t>(5));
  EXPECT_EQ(launcher->cuSeqlensKvValue(), std::optional<int64_t>(6));
  EXPECT_EQ(launcher->kCacheValue(), std::optional<int64_t>(3));
  EXPECT_EQ(launcher->vCacheValue(), std::optional<int64_t>(4));

  kv.step.attributes["attn_mask_type"] = "#te.attn_mask_type<padding>";
  auto padding = AttentionLauncher::parse(kv.step, kv.function);
  ASSERT_TRUE(bool(padding)) << llvm::toString(padding.takeError());
  EXPECT_EQ(padding->problem().mask, AttentionMask::Padding);
  // thd steps have no caches.
  ThdSteps steps;
  auto thd = AttentionLauncher::parse(steps.forward, steps.function);
  ASSERT_TRUE(bool(thd)) << llvm::toString(thd.takeError());
  EXPECT_EQ(thd->kCacheValue(), std::nullopt);
  EXPECT_FALSE(thd->problem().kvCache);
}

TEST(AttentionLauncherTest, RefusesMalformedKvCacheSteps) {
  const StepRejection cases[] = {
      {"top-left causal",
       [](AttentionStep &s) {
         s.attributes["attn_mask_type"] = "#te.attn_mask_type<padding_causal>";
       },
       "kv_cache_attention takes attn_mask_type padding or "
       "padding_causal_bottom_right, not 'padding_causal'"},
      {"no max_seqlen_q",
       [](AttentionStep &s) { s.attributes.erase("max_seqlen_q"); },
       "has no 'max_seqlen_q' attribute"},
      {"max_seqlen_q 0",
       [](AttentionStep &s) { s.attributes["max_seqlen_q"] = "0 : i64"; },
       "max_seqlen_q (0) must be positive"},
      {"more new tokens than cache rows",
       [](AttentionStep &s) { s.attributes["max_seqlen_q"] = "4096 : i64"; },
       "max_seqlen_q (4096) exceeds the cache's 2048 rows"},
      {"a 4-D q", [](AttentionStep &s) { s.operands[0] = 12; },
       "kv_cache_attention: q (value 12) is [64, 8, 64, 1] of bf16; expected "
       "[t, heads, head dim] of bf16"},
      {"an f16 cache", [](AttentionStep &s) { s.operands[4] = 8; },
       "v_cache (value 8) is [4, 2048, 2, 64] of f16; expected [b, "
       "max_sequence_length, kv_heads, head dim] = [4, 2048, 2, 64] of bf16"},
      {"a cache of another batch", [](AttentionStep &s) { s.operands[3] = 9; },
       "k_cache (value 9) is [3, 2048, 2, 64] of bf16; expected [b, "
       "max_sequence_length, kv_heads, head dim] = [4, 2048, 2, 64]"},
      {"a cache of other heads", [](AttentionStep &s) { s.operands[3] = 13; },
       "k_cache (value 13) is [4, 2048, 4, 64] of bf16"},
      {"cu_seqlens_kv of another batch",
       [](AttentionStep &s) { s.operands[6] = 10; },
       "cu_seqlens_kv (value 10) is [4] of i32; expected [b + 1] = [5] of i32"},
      {"cu_seqlens_q of bf16", [](AttentionStep &s) { s.operands[5] = 0; },
       "cu_seqlens_q (value 0) is [64, 8, 64] of bf16; expected [b + 1] with "
       "b >= 1 of i32"},
      {"o of k's shape", [](AttentionStep &s) { s.results[0] = 11; },
       "o (the result) (value 11) is [64, 2, 64] of bf16; expected q's [t, "
       "heads, head dim] = [64, 8, 64] of bf16"},
      {"a gradient stride",
       [](AttentionStep &s) { s.tokenStrides["grad_q"] = 768; },
       "kv_cache_attention has no grad_q to give a token stride"},
      {"no cu_seqlens_kv", [](AttentionStep &s) { s.operands.pop_back(); },
       "kv_cache_attention takes 7 operands (q, k, v, k_cache, v_cache, "
       "cu_seqlens_q, cu_seqlens_kv), 8 with a page table, and 1 result (o), "
       "got 6 and 1"},
      {"an unaligned k stride",
       [](AttentionStep &s) { s.tokenStrides["k"] = 130; },
       "the token stride of k (130 elements)"},
  };
  expectStepRejections<KvCacheStep>(
      cases,
      [](KvCacheStep &fixture) -> AttentionStep & { return fixture.step; });
}

/// A paged kv_cache_attention step (docs/paged-kv-cache.md) over values
/// 0-7: q [64, 8, 64], k and v [64, 2, 64], page pools [40, 16, 2, 64]
/// (40 pages of 16 rows), cu_seqlens_q and _kv i32 [5], page table i32
/// [4, 8] (128 rows a sequence), o; and values to get wrong (8-11).
struct PagedKvCacheStep {
  FunctionPlan function = functionWith({
      tensorOf({64, 8, 64}, ElementType::BF16),     // 0 q
      tensorOf({64, 2, 64}, ElementType::BF16),     // 1 k
      tensorOf({64, 2, 64}, ElementType::BF16),     // 2 v
      tensorOf({40, 16, 2, 64}, ElementType::BF16), // 3 k pages
      tensorOf({40, 16, 2, 64}, ElementType::BF16), // 4 v pages
      tensorOf({5}, ElementType::I32),              // 5 cu_seqlens_q
      tensorOf({5}, ElementType::I32),              // 6 cu_seqlens_kv
      tensorOf({4, 8}, ElementType::I32),           // 7 page table
      tensorOf({64, 8, 64}, ElementType::BF16),     // 8 o
      tensorOf({3, 8}, ElementType::I32),           // 9 a table of 3 rows
      tensorOf({4, 8}, ElementType::BF16),          // 10 a bf16 table
      tensorOf({40, 32, 2, 64}, ElementType::BF16), // 11 pages of 32 rows
  });
  AttentionStep step;

  PagedKvCacheStep() {
    step.kvCache = true;
    step.operands = {0, 1, 2, 3, 4, 5, 6, 7};
    step.results = {8};
    step.attributes = {
        {"attn_mask_type", "#te.attn_mask_type<padding_causal_bottom_right>"},
        {"softmax_scale", "1.250000e-01 : f64"},
        {"max_seqlen_q", "4 : i64"}};
  }
};

TEST(AttentionLauncherTest, ReadsAPagedKvCacheStep) {
  PagedKvCacheStep kv;
  auto launcher = AttentionLauncher::parse(kv.step, kv.function);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  const AttentionProblem &p = launcher->problem();
  EXPECT_TRUE(p.kvCache);
  EXPECT_TRUE(p.paged());
  EXPECT_EQ(p.batch, 4);
  EXPECT_EQ(p.pageSize, 16);
  EXPECT_EQ(p.pages, 40);
  // A sequence's rows: the table's 8 entries of 16 rows.
  EXPECT_EQ(p.seqKv, 128);
  EXPECT_EQ(p.pagesPerSequence(), 8);
  EXPECT_EQ(p.key(), "attention bf16 thd kv_cache b=4 h=8 kv_heads=2 s_q=4 "
                     "s_kv=128 d=64 mask=padding_causal_bottom_right "
                     "scale=0.125 dropout=0 paged pages=40 page_size=16");
  EXPECT_EQ(launcher->pageTableValue(), std::optional<int64_t>(7));
  EXPECT_EQ(launcher->kCacheValue(), std::optional<int64_t>(3));
  // The clamped table follows the lengths and offsets in the prep scratch.
  AttentionProblem plain = p;
  plain.pageSize = plain.pages = 0;
  EXPECT_EQ(thdPrepBytes(p), thdPrepBytes(plain) + 256);
  // Plain steps have no table.
  KvCacheStep plainStep;
  auto unpaged = AttentionLauncher::parse(plainStep.step, plainStep.function);
  ASSERT_TRUE(bool(unpaged)) << llvm::toString(unpaged.takeError());
  EXPECT_EQ(unpaged->pageTableValue(), std::nullopt);
  EXPECT_FALSE(unpaged->problem().paged());
}

TEST(AttentionLauncherTest, RefusesMalformedPagedKvCacheSteps) {
  const StepRejection cases[] = {
      {"a table of another batch", [](AttentionStep &s) { s.operands[7] = 9; },
       "page_table (value 9) is [3, 8] of i32; expected [b, pages per "
       "sequence] of i32"},
      {"a bf16 table", [](AttentionStep &s) { s.operands[7] = 10; },
       "page_table (value 10) is [4, 8] of bf16"},
      {"pools of other page sizes",
       [](AttentionStep &s) { s.operands[4] = 11; },
       "v_cache (value 11) is [40, 32, 2, 64] of bf16; expected [pages, "
       "page_size, kv_heads, head dim] = [40, 16, 2, 64] of bf16"},
      {"more new tokens than a sequence's rows",
       [](AttentionStep &s) { s.attributes["max_seqlen_q"] = "129 : i64"; },
       "max_seqlen_q (129) exceeds the cache's 128 rows"},
  };
  expectStepRejections<PagedKvCacheStep>(
      cases, [](PagedKvCacheStep &fixture) -> AttentionStep & {
        return fixture.step;
      });
}

//===----------------------------------------------------------------------===//
// Decode kernels (kv cache steps with few new queries)
//===----------------------------------------------------------------------===//

/// The decode benchmark's shape: 8 sequences, 32 heads on 8 kv heads, d 128,
/// one new query each, caches of `rows`.
AttentionProblem decodeProblem(int64_t rows) {
  AttentionProblem problem = kvCacheProblem();
  problem.batch = 8;
  problem.heads = 32;
  problem.kvHeads = 8;
  problem.headDim = 128;
  problem.seqQ = 1;
  problem.seqKv = rows;
  problem.tokensQ = problem.tokensKv = 8;
  problem.tokenStrides = {};
  return problem;
}

TEST(DecodeSplitsTest, AtMost64AndNotFromTheCacheRows) {
  for (int64_t sms : {1, 78, 132, 1000})
    for (auto [batch, heads, kvHeads, queries] :
         {std::tuple{1, 1, 1, 1}, std::tuple{8, 32, 8, 1},
          std::tuple{8, 32, 1, 16}, std::tuple{64, 64, 64, 4},
          std::tuple{2, 8, 2, 7}}) {
      AttentionProblem problem = decodeProblem(4096);
      problem.batch = batch;
      problem.heads = heads;
      problem.kvHeads = kvHeads;
      problem.seqQ = queries;
      DecodeSplits s = decodeSplits(problem, sms);
      std::string what = "sms=" + std::to_string(sms) +
                         " b=" + std::to_string(batch) +
                         " kv_heads=" + std::to_string(kvHeads) +
                         " s_q=" + std::to_string(queries);
      EXPECT_GE(s.splits, 1) << what;
      EXPECT_LE(s.splits, 64) << what;
      // The chunks are the device's, per sequence: S changes nothing.
      for (int64_t rows : {16, 4096, 32768, 1 << 20}) {
        problem.seqKv = rows;
        EXPECT_EQ(decodeSplits(problem, sms).splits, s.splits)
            << what << " S=" << rows;
      }
    }
}

TEST(DecodeSplitsTest, FillTheResidentSlotsOnce) {
  // 64 (sequence, kv head) pairs, one row group. Head dim 128 runs on
  // tensor cores, 3 CTAs an SM: 132 SMs are 396 slots, 6 splits of 64 CTAs;
  // one SM (3 slots) gets one split.
  ASSERT_TRUE(decodeUsesTensorCores(decodeProblem(4096)));
  EXPECT_EQ(decodeSplits(decodeProblem(4096), 132).splits, 6);
  EXPECT_EQ(decodeSplits(decodeProblem(32768), 132).splits, 6);
  EXPECT_EQ(decodeSplits(decodeProblem(32768), 1).splits, 1);
  // 78 SMs: 234 slots, 3 splits.
  EXPECT_EQ(decodeSplits(decodeProblem(4096), 78).splits, 3);
  // Head dim 32 runs on the CUDA cores, 4 CTAs an SM: 528 slots, 8 splits.
  AttentionProblem narrow = decodeProblem(4096);
  narrow.headDim = 32;
  ASSERT_FALSE(decodeUsesTensorCores(narrow));
  EXPECT_EQ(decodeSplits(narrow, 132).splits, 8);
  EXPECT_EQ(decodeSplits(narrow, 78).splits, 4);
  // MQA with 16 queries: 32 * 16 rows a sequence in 32 row groups of 16
  // rows (256 CTAs a split): 396 slots hold one split.
  AttentionProblem mqa = decodeProblem(4096);
  mqa.kvHeads = 1;
  mqa.seqQ = 16;
  EXPECT_EQ(decodeSplits(mqa, 132).splits, 1);
  mqa.headDim = 32;
  EXPECT_EQ(decodeSplits(mqa, 132).splits, 2);
  // A tiny batch on a big GPU: at most 64 splits.
  AttentionProblem tiny = decodeProblem(1 << 20);
  tiny.batch = 1;
  tiny.heads = tiny.kvHeads = 1;
  EXPECT_EQ(decodeSplits(tiny, 132).splits, 64);
  // More CTAs than slots: one split.
  AttentionProblem wide = decodeProblem(4096);
  wide.batch = 64;
  wide.heads = wide.kvHeads = 64;
  EXPECT_EQ(decodeSplits(wide, 132).splits, 1);
}

TEST(DecodeSplitsTest, EligibleProblems) {
  EXPECT_TRUE(decodeAttentionEligible(decodeProblem(4096)));
  AttentionProblem mqa = decodeProblem(4096);
  mqa.kvHeads = 1;
  mqa.seqQ = 16;
  mqa.element = ElementType::F16;
  mqa.headDim = 64;
  mqa.mask = AttentionMask::Padding;
  EXPECT_TRUE(decodeAttentionEligible(mqa));
  AttentionProblem many = decodeProblem(4096);
  many.seqQ = kDecodeMaxQueries + 1;
  EXPECT_FALSE(decodeAttentionEligible(many));
  EXPECT_FALSE(decodeAttentionEligible(thdProblem()));
  AttentionProblem invalid = decodeProblem(4096);
  invalid.headDim = 256;
  EXPECT_FALSE(decodeAttentionEligible(invalid));
}

TEST(DecodeSplitsTest, PreferredFromTheCacheRowsOrAsTheEnvironmentSays) {
  AttentionProblem small = decodeProblem(kDecodePreferredCacheRows - 64);
  AttentionProblem large = decodeProblem(kDecodePreferredCacheRows);
  EXPECT_FALSE(decodeAttentionPreferred(small, DecodeChoice::ByCacheRows));
  EXPECT_TRUE(decodeAttentionPreferred(large, DecodeChoice::ByCacheRows));
  EXPECT_TRUE(decodeAttentionPreferred(small, DecodeChoice::Always));
  EXPECT_FALSE(decodeAttentionPreferred(large, DecodeChoice::Never));
  AttentionProblem prefill = large;
  prefill.seqQ = kDecodeMaxQueries + 1;
  EXPECT_FALSE(decodeAttentionPreferred(prefill, DecodeChoice::Always));

  ::unsetenv("TEJIT_DECODE_ATTENTION");
  EXPECT_EQ(decodeAttentionChoice(), DecodeChoice::ByCacheRows);
  for (auto [value, choice] : {std::pair{"0", DecodeChoice::Never},
                               std::pair{" 1", DecodeChoice::Always},
                               std::pair{"yes", DecodeChoice::ByCacheRows}}) {
    ::setenv("TEJIT_DECODE_ATTENTION", value, 1);
    EXPECT_EQ(decodeAttentionChoice(), choice) << value;
  }
  ::unsetenv("TEJIT_DECODE_ATTENTION");
}

TEST(AttentionLauncherTest, KvCacheStepsWithFewQueriesTakeTheDecodeKernels) {
  // The step's 2048-row caches take the decode kernels by default;
  // TEJIT_DECODE_ATTENTION=0 keeps them on cuDNN (eligible still), =1 sends
  // them to the decode kernels too.
  static_assert(2048 >= kDecodePreferredCacheRows);
  ::unsetenv("TEJIT_DECODE_ATTENTION");
  KvCacheStep kv;
  auto byRows = AttentionLauncher::parse(kv.step, kv.function, 132);
  ASSERT_TRUE(bool(byRows)) << llvm::toString(byRows.takeError());
  EXPECT_TRUE(byRows->usesDecodeKernels());
  ::setenv("TEJIT_DECODE_ATTENTION", "0", 1);
  auto never = AttentionLauncher::parse(kv.step, kv.function, 132);
  ASSERT_TRUE(bool(never)) << llvm::toString(never.takeError());
  EXPECT_FALSE(never->usesDecodeKernels());
  EXPECT_TRUE(never->decodeEligible());
  ::setenv("TEJIT_DECODE_ATTENTION", "1", 1);
  auto launcher = AttentionLauncher::parse(kv.step, kv.function, 132);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  EXPECT_TRUE(launcher->usesDecodeKernels());
  const AttentionProblem &p = launcher->problem();
  DecodeSplits s = launcher->decodeSplitsUsed();
  EXPECT_EQ(s.splits, decodeSplits(p, 132).splits);
  // The prep scratch, the dropout slot, then the partials: (max, sum) and
  // o[64] per (sequence, head, query, split), each 256-byte aligned.
  size_t rows = size_t(4 * 8 * 1 * s.splits);
  auto align = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  size_t partials = align(rows * 2 * 4) + align(rows * 64 * 4);
  EXPECT_EQ(decodePartialBytes(p, s), partials);
  EXPECT_EQ(launcher->scratchBytes(), thdPrepBytes(p) + 256 + partials);

  // 16 new queries still qualify; 64 go to cuDNN.
  kv.step.attributes["max_seqlen_q"] = "16 : i64";
  auto sixteen = AttentionLauncher::parse(kv.step, kv.function, 132);
  ASSERT_TRUE(bool(sixteen)) << llvm::toString(sixteen.takeError());
  EXPECT_TRUE(sixteen->usesDecodeKernels());
  kv.step.attributes["max_seqlen_q"] = "64 : i64";
  auto prefill = AttentionLauncher::parse(kv.step, kv.function, 132);
  ASSERT_TRUE(bool(prefill)) << llvm::toString(prefill.takeError());
  EXPECT_FALSE(prefill->usesDecodeKernels());
  EXPECT_EQ(prefill->problem().seqQ, 64);

  // TEJIT_DECODE_ATTENTION=0 sends eligible steps to cuDNN.
  kv.step.attributes["max_seqlen_q"] = "1 : i64";
  ::setenv("TEJIT_DECODE_ATTENTION", "0", 1);
  auto forced = AttentionLauncher::parse(kv.step, kv.function, 132);
  ::unsetenv("TEJIT_DECODE_ATTENTION");
  ASSERT_TRUE(bool(forced)) << llvm::toString(forced.takeError());
  EXPECT_FALSE(forced->usesDecodeKernels());
  EXPECT_TRUE(forced->decodeEligible());

  // thd steps never do.
  ThdSteps steps;
  auto thd = AttentionLauncher::parse(steps.forward, steps.function, 132);
  ASSERT_TRUE(bool(thd)) << llvm::toString(thd.takeError());
  EXPECT_FALSE(thd->usesDecodeKernels());
}

TEST(AttentionLauncherTest, DecodeKernelsRunWhatCudnnCannot) {
  // A 2048-row cache prefers cuDNN; where cuDNN cannot build the step (on
  // this machine: no GPU), create() falls back to the decode kernels when
  // it has them, and reports cuDNN's error when it has not.
  ::unsetenv("TEJIT_DECODE_ATTENTION");
  KvCacheStep kv;
  // Stand-ins: create() only keeps the handles (nothing is launched).
  DecodeKernels decode;
  decode.splitTensorCores = reinterpret_cast<CUfunction>(uintptr_t(0x08));
  decode.split = reinterpret_cast<CUfunction>(uintptr_t(0x10));
  decode.combine = reinterpret_cast<CUfunction>(uintptr_t(0x20));
  decode.smCount = 132;
  auto withoutKernels = AttentionLauncher::create(kv.step, kv.function,
                                                  /*prep=*/nullptr);
  if (withoutKernels) // a machine where cuDNN runs the step: nothing to see
    GTEST_SKIP() << "cuDNN built the step here";
  llvm::consumeError(withoutKernels.takeError());
  auto launcher =
      AttentionLauncher::create(kv.step, kv.function, nullptr, decode);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  EXPECT_TRUE(launcher->usesDecodeKernels());
  EXPECT_EQ(launcher->decodeSplitsUsed().splits,
            decodeSplits(launcher->problem(), 132).splits);
  EXPECT_EQ(launcher->scratchBytes(),
            thdPrepBytes(launcher->problem()) + 256 +
                decodePartialBytes(launcher->problem(),
                                   launcher->decodeSplitsUsed()));
  // A step the decode kernels cannot run keeps cuDNN's error.
  kv.step.attributes["max_seqlen_q"] = "64 : i64";
  auto prefill =
      AttentionLauncher::create(kv.step, kv.function, nullptr, decode);
  EXPECT_FALSE(bool(prefill));
  llvm::consumeError(prefill.takeError());
}

TEST(AttentionLauncherTest, DecodePtxHasBothKernels) {
  llvm::StringRef ptx = decodeAttentionPtx();
  EXPECT_NE(ptx.find(".entry tejit_decode_attention("), llvm::StringRef::npos);
  EXPECT_NE(ptx.find(".entry tejit_decode_attention_combine("),
            llvm::StringRef::npos);
}

TEST(AttentionLauncherTest, ReadsAPaddedStepAsBefore) {
  // bshd: q [2, 128, 8, 64], k and v [2, 256, 2, 64] and a key mask.
  FunctionPlan function = functionWith({
      tensorOf({2, 128, 8, 64}, ElementType::F16), // 0 q
      tensorOf({2, 256, 2, 64}, ElementType::F16), // 1 k
      tensorOf({2, 256, 2, 64}, ElementType::F16), // 2 v
      tensorOf({2, 1, 1, 256}, ElementType::I1),   // 3 mask
      tensorOf({2, 128, 8, 64}, ElementType::F16), // 4 o
      tensorOf({2, 8, 128}, ElementType::F32),     // 5 stats
  });
  AttentionStep step;
  step.operands = {0, 1, 2, 3};
  step.results = {4, 5};
  step.attributes = {{"qkv_format", "#te.qkv_format<bshd>"},
                     {"attn_mask_type", "#te.attn_mask_type<padding>"},
                     {"softmax_scale", "1.250000e-01 : f64"}};
  auto launcher = AttentionLauncher::parse(step, function);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  EXPECT_EQ(launcher->problem().key(),
            "attention f16 bshd b=2 h=8 kv_heads=2 s_q=128 s_kv=256 d=64 "
            "mask=padding scale=0.125 dropout=0");
  EXPECT_EQ(launcher->cuSeqlensQValue(), std::nullopt);
}

//===----------------------------------------------------------------------===//
// Bias and ALiBi (docs/attention-bias.md)
//===----------------------------------------------------------------------===//

/// validProblem() (backward, causal, s_q 128, s_kv 256, 8 heads, batch 2)
/// with a [1, h, s_q, s_kv] bias and its gradient.
AttentionProblem biasProblem() {
  AttentionProblem problem = validProblem();
  problem.bias = AttentionBias::PostScale;
  problem.biasBatch = 1;
  problem.biasHeads = 8;
  problem.biasGrad = true;
  return problem;
}

/// validProblem() with ALiBi, the caller's slopes [b, h].
AttentionProblem alibiProblem() {
  AttentionProblem problem = validProblem();
  problem.bias = AttentionBias::Alibi;
  problem.alibiSlopes = AlibiSlopes::BatchHeads;
  return problem;
}

TEST(AttentionBiasTest, KeyNamesTheBiasAfterTheWindow) {
  AttentionProblem bias = biasProblem();
  EXPECT_FALSE(bool(bias.validate()));
  EXPECT_EQ(bias.key(),
            "attention_bwd bf16 sbhd b=2 h=8 kv_heads=2 s_q=128 s_kv=256 d=64 "
            "mask=causal scale=0.125 dropout=0.1 bias=1hss grad");
  bias.biasGrad = false;
  bias.biasBatch = 2;
  bias.biasHeads = 1;
  bias.tokenStrides.q = 768;
  EXPECT_EQ(bias.key(),
            "attention_bwd bf16 sbhd b=2 h=8 kv_heads=2 s_q=128 s_kv=256 d=64 "
            "mask=causal scale=0.125 dropout=0.1 bias=b1ss q_stride=768");
  AttentionProblem alibi = alibiProblem();
  alibi.seqKv = 128;
  alibi.windowLeft = 15;
  EXPECT_FALSE(bool(alibi.validate()));
  EXPECT_EQ(alibi.key(),
            "attention_bwd bf16 sbhd b=2 h=8 kv_heads=2 s_q=128 s_kv=128 d=64 "
            "mask=causal scale=0.125 dropout=0.1 window=15,-1 "
            "alibi=batch_heads");
  alibi.alibiSlopes = AlibiSlopes::Heads;
  EXPECT_NE(alibi.key().find(" alibi=heads"), std::string::npos);
  alibi.alibiSlopes = AlibiSlopes::None;
  EXPECT_NE(alibi.key().find(" alibi=vanilla"), std::string::npos);
}

TEST(AttentionBiasTest, KeysTellEveryBiasApart) {
  std::vector<void (*)(AttentionProblem &)> changes = {
      [](AttentionProblem &p) {
        p.biasGrad = false;
        p.bias = AttentionBias::None;
      },
      [](AttentionProblem &p) { p.biasGrad = false; },
      [](AttentionProblem &p) {
        p.biasGrad = false;
        p.biasBatch = 2;
      },
      [](AttentionProblem &p) {
        p.biasGrad = false;
        p.biasHeads = 1;
      },
      [](AttentionProblem &p) {
        p.biasGrad = false;
        p.biasBatch = 2;
        p.biasHeads = 1;
      },
      [](AttentionProblem &p) {
        p.biasGrad = false;
        p.bias = AttentionBias::Alibi;
      },
      [](AttentionProblem &p) {
        p.biasGrad = false;
        p.bias = AttentionBias::Alibi;
        p.alibiSlopes = AlibiSlopes::Heads;
      },
      [](AttentionProblem &p) {
        p.biasGrad = false;
        p.bias = AttentionBias::Alibi;
        p.alibiSlopes = AlibiSlopes::BatchHeads;
      },
  };
  std::set<std::string> keys = {biasProblem().key()};
  for (auto change : changes) {
    AttentionProblem problem = biasProblem();
    change(problem);
    EXPECT_FALSE(bool(problem.validate())) << problem.key();
    EXPECT_TRUE(keys.insert(problem.key()).second) << problem.key();
  }
}

TEST(AttentionBiasTest, RejectsWithClearMessages) {
  const Rejection cases[] = {
      {"bias batch 3", [](AttentionProblem &p) { p.biasBatch = 3; },
       "a bias of shape [3, 8, s_q, s_kv] does not broadcast: its first two "
       "dims must be 1 or the batch (2) and 1 or the heads (8)"},
      {"bias heads 2", [](AttentionProblem &p) { p.biasHeads = 2; },
       "a bias of shape [1, 2, s_q, s_kv] does not broadcast"},
      {"grad of b1ss",
       [](AttentionProblem &p) {
         p.biasBatch = 2;
         p.biasHeads = 1;
       },
       "a bias gradient is supported for the bias shape 1hss ([1, h, s_q, "
       "s_kv]) only, not b1ss"},
      {"grad of bhss", [](AttentionProblem &p) { p.biasBatch = 2; },
       "only, not bhss"},
      {"grad of 11ss", [](AttentionProblem &p) { p.biasHeads = 1; },
       "only, not 11ss"},
      {"grad in the forward", [](AttentionProblem &p) { p.backward = false; },
       "a bias gradient comes from the backward"},
      {"grad without a bias",
       [](AttentionProblem &p) { p.bias = AttentionBias::None; },
       "a bias gradient needs a post-scale bias"},
      {"grad of ALiBi",
       [](AttentionProblem &p) { p.bias = AttentionBias::Alibi; },
       "ALiBi slopes take no gradient"},
      {"slopes without ALiBi",
       [](AttentionProblem &p) {
         p.biasGrad = false;
         p.alibiSlopes = AlibiSlopes::Heads;
       },
       "ALiBi slopes need the alibi bias type"},
      {"bias with thd",
       [](AttentionProblem &p) {
         AttentionProblem thd = thdProblem();
         thd.bias = p.bias;
         thd.biasHeads = p.biasHeads;
         p = thd;
       },
       "a bias or ALiBi is not supported with the thd layout (packed "
       "sequences)"},
      {"ALiBi with a kv cache",
       [](AttentionProblem &p) {
         p = kvCacheProblem();
         p.bias = AttentionBias::Alibi;
       },
       "a bias or ALiBi is not supported with a kv cache"},
  };
  expectRejections(biasProblem, cases);
}

TEST(AttentionBiasTest, NeedsAGpuAndCudnnThatHaveIt) {
  AttentionProblem bias = biasProblem();
  AttentionProblem forward = biasProblem();
  forward.backward = false;
  forward.biasGrad = false;
  AttentionProblem padded = biasProblem();
  padded.mask = AttentionMask::Padding;
  AttentionProblem aligned = biasProblem(); // s_q 128, s_kv 256
  aligned.mask = AttentionMask::None;
  AttentionProblem window = forward;
  window.seqKv = 128;
  window.windowLeft = 31;
  AttentionProblem alibi = alibiProblem();
  alibi.alibiSlopes = AlibiSlopes::Heads;
  // Per-batch slopes: cuDNN's engines read them wrong (Attention.cpp).
  AttentionProblem perBatch = alibiProblem();
  AttentionProblem oneBatch = alibiProblem();
  oneBatch.batch = 1;
  const VersionCase cases[] = {
      {perBatch, 91900, 90,
       "per-batch ALiBi slopes [b, h] are not supported on cuDNN's fused "
       "attention"},
      {oneBatch, 91900, 90, nullptr},
      {forward, 90000, 75,
       "a post-scale bias needs an Ampere or newer GPU (this is sm_75)"},
      {forward, 90000, 80, nullptr},
      {alibi, 91900, 89, "ALiBi needs a Hopper or newer GPU (this is sm_89)"},
      {alibi, 90000, 90, nullptr},
      {window, 90900, 90,
       "a sliding window with a bias or ALiBi needs cuDNN 9.10.2 or newer "
       "(this is 9.9.0)"},
      {window, 91002, 80, nullptr},
      {padded, 90400, 90,
       "a bias gradient with a padding mask, s_q not a multiple of 64 or s_kv "
       "not a multiple of 128 needs cuDNN 9.5.0 or newer (this is 9.4.0)"},
      {padded, 90500, 90, nullptr},
      {aligned, 90000, 80, nullptr},
      {bias, 91002, 80, nullptr},
  };
  expectVersionCases(cases);
  // s_kv 200 takes the backward's full-length padding pattern before 9.16.
  AttentionProblem ragged = aligned;
  ragged.seqKv = 200;
  auto [code, message] = takeFailure(ragged.validateFor(90400, 90));
  EXPECT_NE(message.find("needs cuDNN 9.5.0"), std::string::npos) << message;
}

TEST(AttentionBiasTest, VanillaSlopesAreTransformerEngines) {
  // 8 heads: 2^-1 ... 2^-8.
  std::vector<float> eight = vanillaAlibiSlopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int k = 0; k < 8; ++k)
    EXPECT_EQ(eight[k], std::ldexp(1.0f, -(k + 1))) << k;
  // 12 heads: n = 8's, then 2^(-4 (2 j + 1) / 8) = 2^-0.5, 2^-1.5, ...
  std::vector<float> twelve = vanillaAlibiSlopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  for (int k = 0; k < 8; ++k)
    EXPECT_EQ(twelve[k], eight[k]) << k;
  for (int j = 0; j < 4; ++j)
    EXPECT_EQ(twelve[8 + j], float(std::exp2(-0.5 - j))) << j;
  // One head: 2^-8; 6 heads: n = 4, 2^-2 ... 2^-8, then 2^-1, 2^-3.
  EXPECT_EQ(vanillaAlibiSlopes(1), std::vector<float>{std::ldexp(1.0f, -8)});
  std::vector<float> six = vanillaAlibiSlopes(6);
  std::vector<float> expected = {0.25f,       0.0625f, 0.015625f,
                                 0.00390625f, 0.5f,    0.125f};
  EXPECT_EQ(six, expected);
  EXPECT_TRUE(vanillaAlibiSlopes(0).empty());
}

/// Every bias and ALiBi variant builds and finalizes on the host, with
/// the bias, dbias and slopes bound where the problem has them.
TEST(AttentionBiasTest, EveryVariantFinalizesWithoutAGpu) {
  auto lib = Cudnn::get();
  if (!lib) {
    std::string message = llvm::toString(lib.takeError());
    GTEST_SKIP() << "no cuDNN: " << message;
  }
  using attention::Slot;
  struct Shape {
    int64_t batch, heads;
  };
  const Shape shapes[] = {{1, 8}, {2, 1}, {2, 8}, {1, 1}};
  const AttentionMask masks[] = {AttentionMask::None, AttentionMask::Causal,
                                 AttentionMask::Padding,
                                 AttentionMask::PaddingCausal};
  auto check = [&](const AttentionProblem &problem) {
    ASSERT_FALSE(bool(problem.validate())) << problem.key();
    auto graph = attention::buildGraph(*lib, nullptr, problem);
    ASSERT_TRUE(bool(graph)) << llvm::toString(graph.takeError());
    std::multiset<Slot> slots;
    for (const attention::Binding &binding : graph->bindings)
      slots.insert(binding.slot);
    bool postScale = problem.bias == AttentionBias::PostScale;
    EXPECT_EQ(slots.count(Slot::Bias), size_t(postScale)) << problem.key();
    EXPECT_EQ(slots.count(Slot::GradBias), size_t(problem.biasGrad))
        << problem.key();
    EXPECT_EQ(slots.count(Slot::AlibiSlopes), size_t(!postScale))
        << problem.key();
    EXPECT_EQ(slots.count(Slot::GradQ), size_t(problem.backward))
        << problem.key();
    // With dbias, dQ comes straight from its matmul: the workspace holds
    // the softmax sum only.
    if (problem.biasGrad) {
      EXPECT_EQ(
          graph->workspaceBytes,
          llvm::alignTo(problem.batch * problem.heads * problem.seqQ * 4, 256))
          << problem.key();
    }
  };
  int built = 0;
  for (bool backward : {false, true})
    for (AttentionMask mask : masks)
      for (const Shape &shape : shapes)
        for (int64_t kvHeads : {8, 2})
          for (double dropout : {0.0, 0.2}) {
            AttentionProblem problem = biasProblem();
            problem.backward = backward;
            problem.mask = mask;
            problem.biasBatch = shape.batch;
            problem.biasHeads = shape.heads;
            problem.biasGrad = backward && shape.batch == 1 && shape.heads == 8;
            problem.kvHeads = kvHeads;
            problem.dropout = dropout;
            check(problem);
            ++built;
          }
  for (bool backward : {false, true})
    for (AttentionMask mask : masks)
      for (AlibiSlopes slopes :
           {AlibiSlopes::None, AlibiSlopes::Heads, AlibiSlopes::BatchHeads})
        for (int64_t seqKv : {128, 256}) {
          AttentionProblem problem = alibiProblem();
          problem.backward = backward;
          problem.mask = mask;
          problem.alibiSlopes = slopes;
          problem.seqKv = seqKv;
          check(problem);
          ++built;
        }
  // A window with each, f16, a fused QKV's strides.
  AttentionProblem window = biasProblem();
  window.seqKv = 128;
  window.windowLeft = 31;
  window.element = ElementType::F16;
  window.tokenStrides = {768, 768, 768, 768, 768, 768};
  check(window);
  window.bias = AttentionBias::Alibi;
  window.biasGrad = false;
  check(window);
  EXPECT_EQ(built, 2 * 4 * 4 * 2 * 2 + 2 * 4 * 3 * 2);
}

/// bshd steps over values 0-16: q [2, 128, 8, 64] (bf16), k and v [2,
/// 256, 2, 64], o and stats, dO, dq, dk, dv; then biases, slopes and dbias
/// of every shape (and some wrong ones).
struct BiasSteps {
  FunctionPlan function = functionWith({
      tensorOf({2, 128, 8, 64}, ElementType::BF16),  // 0 q
      tensorOf({2, 256, 2, 64}, ElementType::BF16),  // 1 k
      tensorOf({2, 256, 2, 64}, ElementType::BF16),  // 2 v
      tensorOf({2, 128, 8, 64}, ElementType::BF16),  // 3 o
      tensorOf({2, 8, 128}, ElementType::F32),       // 4 stats
      tensorOf({2, 128, 8, 64}, ElementType::BF16),  // 5 dO
      tensorOf({2, 128, 8, 64}, ElementType::BF16),  // 6 dq
      tensorOf({2, 256, 2, 64}, ElementType::BF16),  // 7 dk
      tensorOf({2, 256, 2, 64}, ElementType::BF16),  // 8 dv
      tensorOf({1, 8, 128, 256}, ElementType::BF16), // 9 bias 1hss
      tensorOf({2, 1, 128, 256}, ElementType::BF16), // 10 bias b1ss
      tensorOf({1, 8, 128, 256}, ElementType::BF16), // 11 dbias
      tensorOf({8}, ElementType::F32),               // 12 slopes [h]
      tensorOf({2, 8}, ElementType::F32),            // 13 slopes [b, h]
      tensorOf({1, 8, 128, 128}, ElementType::BF16), // 14 a square bias
      tensorOf({1, 8, 128, 256}, ElementType::F16),  // 15 an f16 bias
      tensorOf({4}, ElementType::F32),               // 16 slopes [4]
      tensorOf({2, 1, 1, 256}, ElementType::I1),     // 17 a padding mask
      tensorOf({2}, ElementType::I64),               // 18 rng state
      tensorOf({8}, ElementType::BF16),              // 19 bf16 slopes
  });
  AttentionStep forward, backward;

  BiasSteps() {
    forward.operands = {0, 1, 2, 9};
    forward.results = {3, 4};
    forward.attributes = {{"qkv_format", "#te.qkv_format<bshd>"},
                          {"attn_mask_type", "#te.attn_mask_type<causal>"},
                          {"bias_type", "#te.attn_bias_type<post_scale_bias>"},
                          {"softmax_scale", "1.250000e-01 : f64"}};
    backward = forward;
    backward.backward = true;
    backward.operands = {5, 0, 1, 2, 3, 4, 9};
    backward.results = {6, 7, 8, 11};
    backward.attributes["bias_grad"] = "unit";
  }
};

TEST(AttentionLauncherTest, ReadsBiasAndAlibiSteps) {
  BiasSteps steps;
  auto forward = AttentionLauncher::parse(steps.forward, steps.function);
  ASSERT_TRUE(bool(forward)) << llvm::toString(forward.takeError());
  const AttentionProblem &f = forward->problem();
  EXPECT_EQ(f.bias, AttentionBias::PostScale);
  EXPECT_EQ(f.biasBatch, 1);
  EXPECT_EQ(f.biasHeads, 8);
  EXPECT_FALSE(f.biasGrad);
  EXPECT_EQ(f.key(), "attention bf16 bshd b=2 h=8 kv_heads=2 s_q=128 "
                     "s_kv=256 d=64 mask=causal scale=0.125 dropout=0 "
                     "bias=1hss");

  auto backward = AttentionLauncher::parse(steps.backward, steps.function);
  ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
  EXPECT_TRUE(backward->problem().biasGrad);
  EXPECT_NE(backward->problem().key().find(" bias=1hss grad"),
            std::string::npos);

  // b1ss after a padding mask and dropout's RNG state, no gradient; the
  // forward may carry bias_grad (the backward's business).
  steps.forward.operands = {0, 1, 2, 17, 18, 10};
  steps.forward.attributes["attn_mask_type"] = "#te.attn_mask_type<padding>";
  steps.forward.attributes["dropout"] = "1.000000e-01 : f64";
  auto b1ss = AttentionLauncher::parse(steps.forward, steps.function);
  ASSERT_TRUE(bool(b1ss)) << llvm::toString(b1ss.takeError());
  EXPECT_EQ(b1ss->problem().biasBatch, 2);
  EXPECT_EQ(b1ss->problem().biasHeads, 1);
  EXPECT_EQ(b1ss->problem().mask, AttentionMask::Padding);

  // ALiBi: vanilla (no operand), [h] and [b, h] slopes.
  BiasSteps alibiSteps;
  AttentionStep &alibi = alibiSteps.forward;
  alibi.attributes["bias_type"] = "#te.attn_bias_type<alibi>";
  struct Case {
    std::vector<int64_t> operands;
    AlibiSlopes slopes;
  };
  const Case cases[] = {{{0, 1, 2}, AlibiSlopes::None},
                        {{0, 1, 2, 12}, AlibiSlopes::Heads},
                        {{0, 1, 2, 13}, AlibiSlopes::BatchHeads}};
  for (const Case &c : cases) {
    alibi.operands = c.operands;
    auto launcher = AttentionLauncher::parse(alibi, alibiSteps.function);
    ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
    EXPECT_EQ(launcher->problem().bias, AttentionBias::Alibi);
    EXPECT_EQ(launcher->problem().alibiSlopes, c.slopes);
  }
  // No bias_type: no bias, as before.
  BiasSteps plain;
  plain.forward.attributes.erase("bias_type");
  plain.forward.operands = {0, 1, 2};
  auto none = AttentionLauncher::parse(plain.forward, plain.function);
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_EQ(none->problem().bias, AttentionBias::None);
  plain.forward.attributes["bias_type"] = "#te.attn_bias_type<no_bias>";
  none = AttentionLauncher::parse(plain.forward, plain.function);
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_EQ(none->problem().bias, AttentionBias::None);
}

TEST(AttentionLauncherTest, RefusesMalformedBiasSteps) {
  const StepRejection forwardCases[] = {
      {"a bias without bias_type",
       [](AttentionStep &s) { s.attributes.erase("bias_type"); },
       "a bias operand needs bias_type post_scale_bias, not 'no_bias'"},
      {"a bias with alibi",
       [](AttentionStep &s) {
         s.attributes["bias_type"] = "#te.attn_bias_type<alibi>";
       },
       "a bias operand needs bias_type post_scale_bias, not 'alibi'"},
      {"post_scale_bias without a bias",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2};
       },
       "bias_type post_scale_bias without a bias operand"},
      {"pre_scale_bias",
       [](AttentionStep &s) {
         s.attributes["bias_type"] = "#te.attn_bias_type<pre_scale_bias>";
       },
       "pass bias * softmax_scale as a post_scale_bias"},
      {"an unknown bias type",
       [](AttentionStep &s) {
         s.attributes["bias_type"] = "#te.attn_bias_type<relative>";
       },
       "bias_type 'relative' is not supported"},
      {"bias_type not an enum",
       [](AttentionStep &s) { s.attributes["bias_type"] = "1 : i64"; },
       "attribute 'bias_type' is '1 : i64', not an enum attribute"},
      {"a bias of s_kv 128",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 14};
       },
       "the bias (value 14) is [1, 8, 128, 128] of bf16; expected [1 or b, 1 "
       "or h, s_q, s_kv] = [1 or 2, 1 or 8, 128, 256] of bf16 (q's type)"},
      {"an f16 bias for bf16 q",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 15};
       },
       "the bias (value 15) is [1, 8, 128, 256] of f16"},
      {"bias_grad of b1ss",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 10};
         s.attributes["bias_grad"] = "unit";
       },
       "bias_grad takes the bias shape 1hss ([1, h, s_q, s_kv]) only, not "
       "b1ss [2, 1, 128, 256]"},
      {"slopes with post_scale_bias",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 9, 12};
       },
       "an ALiBi slopes operand needs bias_type alibi, not "
       "'post_scale_bias'"},
      {"slopes without a bias type",
       [](AttentionStep &s) {
         s.attributes.erase("bias_type");
         s.operands = {0, 1, 2, 12};
       },
       "an ALiBi slopes operand needs bias_type alibi, not 'no_bias'"},
      {"slopes of 4 heads",
       [](AttentionStep &s) {
         s.attributes["bias_type"] = "#te.attn_bias_type<alibi>";
         s.operands = {0, 1, 2, 16};
       },
       "the ALiBi slopes (value 16) are [4] of f32; expected f32 [h] = [8] or "
       "[b, h] = [2, 8]"},
      {"bf16 slopes",
       [](AttentionStep &s) {
         s.attributes["bias_type"] = "#te.attn_bias_type<alibi>";
         s.operands = {0, 1, 2, 19};
       },
       "neither an i1 mask, an i64 RNG state, i32 cu_seqlens, a 4-D bias nor "
       "f32 ALiBi slopes"},
      {"bias_grad with alibi",
       [](AttentionStep &s) {
         s.attributes["bias_type"] = "#te.attn_bias_type<alibi>";
         s.attributes["bias_grad"] = "unit";
         s.operands = {0, 1, 2};
       },
       "bias_grad needs bias_type post_scale_bias, not 'alibi'"},
      {"two biases",
       [](AttentionStep &s) {
         s.operands = {0, 1, 2, 9, 10};
       },
       "neither an i1 mask"},
  };
  expectStepRejections<BiasSteps>(
      forwardCases,
      [](BiasSteps &fixture) -> AttentionStep & { return fixture.forward; });
  const StepRejection backwardCases[] = {
      {"bias_grad without dbias",
       [](AttentionStep &s) {
         s.results = {6, 7, 8};
       },
       "attention_bwd with bias_grad has 4 results (dq, dk, dv, dbias), got "
       "3"},
      {"dbias without bias_grad",
       [](AttentionStep &s) { s.attributes.erase("bias_grad"); },
       "attention_bwd has 3 results (dq, dk, dv) without bias_grad, got 4"},
      {"dbias of b1ss's shape",
       [](AttentionStep &s) {
         s.results = {6, 7, 8, 10};
       },
       "dbias (value 10) is [2, 1, 128, 256] of bf16; expected [1, 8, 128, "
       "256] of bf16 (the bias's type)"},
      {"five results",
       [](AttentionStep &s) {
         s.results = {6, 7, 8, 11, 9};
       },
       "expected 6 to 13 operands and 3 or 4 results, got 7 and 5"},
  };
  expectStepRejections<BiasSteps>(
      backwardCases,
      [](BiasSteps &fixture) -> AttentionStep & { return fixture.backward; });
}

TEST(AttentionLauncherTest, RefusesBiasWithThdOrAKvCache) {
  ThdSteps thd;
  thd.forward.attributes["bias_type"] = "#te.attn_bias_type<alibi>";
  auto launcher = AttentionLauncher::parse(thd.forward, thd.function);
  ASSERT_FALSE(bool(launcher));
  auto [code, message] = takeFailure(launcher.takeError());
  EXPECT_NE(message.find("qkv_format thd takes no bias or ALiBi (bias_type "
                         "'alibi')"),
            std::string::npos)
      << message;
  KvCacheStep kv;
  kv.step.attributes["bias_type"] = "#te.attn_bias_type<alibi>";
  auto cache = AttentionLauncher::parse(kv.step, kv.function);
  ASSERT_FALSE(bool(cache));
  auto [cacheCode, cacheMessage] = takeFailure(cache.takeError());
  EXPECT_NE(cacheMessage.find("kv_cache_attention takes no bias or ALiBi "
                              "(bias_type 'alibi')"),
            std::string::npos)
      << cacheMessage;
}

} // namespace
