//===- DelayWgradTest.cpp - delay_wgrad_compute against the whole backward ===//
//
// te-split-wgrad (docs/delay-wgrad.md) moves the weight-gradient GEMMs of
// layers with delay_wgrad_compute into `@f_backward_wgrad`. Running the
// forward, the backward (dgrad half) and later the wgrad function must give
// the gradients, main_grads and FP8 state of the same spec without the key,
// bit for bit, over two steps (the second with the scales the first
// updated, so a wgrad GEMM that read the backward's meta after its update
// would differ), and with two steps queued before their wgrads as
// Megatron's pipeline schedules queue them.
//
//===----------------------------------------------------------------------===//
#include "PipelineTestUtils.h"
#include "ThreadCollectives.h"

#include "llvm/ADT/StringExtras.h"

#include <map>

using namespace mlir;
using namespace tejit;
using namespace tejit::testing;

namespace {

struct DelayCase {
  const char *name;
  /// A spec whose layers end in DELAY (replaced by the key or nothing).
  const char *layers;
  /// GroupedLinear: m_splits in multiples of 16.
  bool grouped = false;
};

const DelayCase kLayers[] = {
    {"linear", R"(
  - {type: Linear, in_features: 64, out_features: 48 DELAY})"},
    {"layernorm_linear", R"(
  - {type: LayerNormLinear, in_features: 64, out_features: 32,
     normalization: RMSNorm DELAY})"},
    {"mlp_gelu", R"(
  - {type: LayerNormMLP, hidden_size: 32, ffn_hidden_size: 64 DELAY})"},
    {"mlp_swiglu", R"(
  - {type: LayerNormMLP, hidden_size: 32, ffn_hidden_size: 64,
     activation: swiglu, bias: false DELAY})"},
    {"linear_main_grad", R"(
  - {type: Linear, in_features: 64, out_features: 48,
     fuse_wgrad_accumulation: true DELAY})"},
    {"mlp_main_grad_then_linear", R"(
  - {type: LayerNormMLP, hidden_size: 32, ffn_hidden_size: 64,
     fuse_wgrad_accumulation: true DELAY}
  - {type: Linear, in_features: 32, out_features: 16})"},
    {"grouped", R"(
  - {type: GroupedLinear, num_gemms: 3, in_features: 32, out_features: 48 DELAY}
  - {type: GroupedLinear, num_gemms: 3, in_features: 48, out_features: 32,
     bias: false, fuse_wgrad_accumulation: true DELAY})",
     true},
};

struct Recipe {
  const char *name;
  const char *yaml;
};

// DelayedScaling uses the most recent amax only, so that every update
// changes the scales.
const Recipe kRecipes[] = {
    {"none", "none"},
    {"delayed", "{type: DelayedScaling, fp8_format: HYBRID, "
                "amax_compute_algo: most_recent}"},
    {"current", "{type: Float8CurrentScaling}"},
    {"block", "{type: Float8BlockScaling}"},
};

using Param = std::tuple<DelayCase, Recipe>;

// Cases print as their names (ctest's test names carry them).
void PrintTo(const DelayCase &layers, std::ostream *os) { *os << layers.name; }
void PrintTo(const Recipe &recipe, std::ostream *os) { *os << recipe.name; }

/// Runs a program's functions as a caller does, keeping the FP8 meta state
/// and the main_grads (by argument name) between calls.
class Runner {
public:
  /// `options`: one rank's collectives (tensor parallelism).
  Runner(ModuleOp module, std::map<std::string, Tensor> mainGrads,
         interp::Options options = {})
      : state(std::move(mainGrads)), options(options) {
    forward = firstFunction(module);
    backward = backwardOf(module, forward);
    wgrad = module.lookupSymbol<func::FuncOp>(
        (backward.getName() + "_wgrad").str());
  }

  /// What a backward leaves for its wgrad function.
  struct Pending {
    std::vector<Tensor> forwardArgs, forwardResults, backwardArgs,
        backwardResults;
  };

  /// Forward and backward; the gradients they return go to `grads`.
  Pending forwardBackward(const std::vector<Tensor> &layerArgs,
                          const std::vector<Tensor> &outputGrads,
                          std::map<std::string, Tensor> &grads) {
    Pending pending;
    for (unsigned i = 0; i < forward.getNumArguments(); ++i)
      pending.forwardArgs.push_back(isMeta(forward, i) ? meta(forward, i)
                                                       : layerArgs.at(i));
    pending.forwardResults = call(forward, pending.forwardArgs);
    grads["output"] = pending.forwardResults.at(0);
    size_t nextGrad = 0;
    for (unsigned i = 0; i < backward.getNumArguments(); ++i) {
      if (auto arg =
              backward.getArgAttrOfType<IntegerAttr>(i, "te.forward_arg"))
        pending.backwardArgs.push_back(pending.forwardArgs[arg.getInt()]);
      else if (auto result = backward.getArgAttrOfType<IntegerAttr>(
                   i, "te.forward_result"))
        pending.backwardArgs.push_back(pending.forwardResults[result.getInt()]);
      else if (isMeta(backward, i) ||
               argName(backward, i).starts_with("main_grad."))
        pending.backwardArgs.push_back(meta(backward, i));
      else
        pending.backwardArgs.push_back(outputGrads.at(nextGrad++));
    }
    pending.backwardResults = call(backward, pending.backwardArgs);
    collect(backward, pending.backwardResults, grads);
    return pending;
  }

  /// The wgrad function of `pending`'s backward.
  void runWgrad(const Pending &pending, std::map<std::string, Tensor> &grads) {
    std::vector<Tensor> args;
    for (unsigned i = 0; i < wgrad.getNumArguments(); ++i) {
      auto index = [&](StringRef key) {
        auto attr = wgrad.getArgAttrOfType<IntegerAttr>(i, key);
        return attr ? attr.getInt() : -1;
      };
      if (index("te.forward_arg") >= 0)
        args.push_back(pending.forwardArgs[index("te.forward_arg")]);
      else if (index("te.forward_result") >= 0)
        args.push_back(pending.forwardResults[index("te.forward_result")]);
      else if (index("te.backward_result") >= 0)
        args.push_back(pending.backwardResults[index("te.backward_result")]);
      else if (argName(wgrad, i).starts_with("main_grad.") ||
               argName(wgrad, i).starts_with("fp8_meta."))
        // What the program holds now, as a runtime would pass it.
        args.push_back(meta(wgrad, i));
      else
        args.push_back(pending.backwardArgs.at(index("te.backward_arg")));
    }
    collect(wgrad, call(wgrad, args), grads);
  }

  func::FuncOp forward, backward, wgrad;
  /// FP8 meta state and main_grads, by argument name.
  std::map<std::string, Tensor> state;

private:
  interp::Options options;

  static bool isMeta(func::FuncOp function, unsigned index) {
    return argName(function, index).starts_with("fp8_meta.");
  }

  std::vector<Tensor> call(func::FuncOp function,
                           const std::vector<Tensor> &args) const {
    FailureOr<std::vector<Tensor>> results =
        interp::run(function, args, options);
    EXPECT_TRUE(succeeded(results)) << function.getName().str();
    if (failed(results))
      return std::vector<Tensor>(function.getNumResults());
    return *results;
  }

  /// Meta state starts as TE's does: scales 1, histories 0.
  Tensor &meta(func::FuncOp function, unsigned index) {
    std::string name = argName(function, index).str();
    auto it = state.find(name);
    if (it != state.end())
      return it->second;
    auto type = cast<RankedTensorType>(function.getArgumentTypes()[index]);
    Tensor init = Tensor::zeros(type.getShape());
    if (!StringRef(name).ends_with("amax_history"))
      std::fill(init.data.begin(), init.data.end(), 1.0);
    return state[name] = init;
  }

  /// Keeps updated state and accumulated main_grads; gradients go to
  /// `grads` (deferred tensors are the backward's business).
  void collect(func::FuncOp function, const std::vector<Tensor> &results,
               std::map<std::string, Tensor> &grads) {
    for (unsigned i = 0; i < results.size(); ++i) {
      auto name = function.getResultAttrOfType<StringAttr>(i, "te.name");
      if (function.getResultAttr(i, "te.updates_arg"))
        state[name.getValue().str()] = results[i];
      else if (auto into = function.getResultAttrOfType<StringAttr>(
                   i, "te.accumulates"))
        state[into.getValue().str()] = results[i];
      if (name && name.getValue().starts_with("grad."))
        grads[name.getValue().str()] = results[i];
    }
  }
};

class DelayWgrad : public ::testing::TestWithParam<Param> {
protected:
  DelayWgrad() { context.loadDialect<te::TEDialect, func::FuncDialect>(); }

  std::string spec(bool delay) const {
    auto [layers, recipe] = GetParam();
    std::string text =
        "seq_length: 16\nbatch_size: 4\nrecipe: " + std::string(recipe.yaml) +
        "\nlayers:" + layers.layers + "\n";
    std::string key = delay ? ", delay_wgrad_compute: true" : "";
    for (size_t at; (at = text.find(" DELAY")) != std::string::npos;)
      text.replace(at, 6, key);
    return text;
  }

  OwningOpRef<ModuleOp> compile(bool delay, Stage stage = Stage::Planned) {
    OwningOpRef<ModuleOp> module =
        importSpecText(context, spec(delay), "delay.yaml");
    EXPECT_TRUE(module && runPipeline(*module, {stage, /*training=*/true}));
    return module;
  }

  /// Random layer arguments (m_splits in multiples of 16 with an empty
  /// group and padding rows), output gradients and main_grads.
  void drawStep(func::FuncOp layerFunction, std::vector<Tensor> &args,
                std::vector<Tensor> &grads) {
    args = randomLayerArgs(layerFunction, rng);
    for (unsigned i = 0; i < layerFunction.getNumArguments(); ++i)
      if (argName(layerFunction, i) == "m_splits")
        args[i] = Tensor({3}, {16, 0, 32});
    grads = randomResultGrads(layerFunction, rng);
  }

  std::map<std::string, Tensor> randomMainGrads(func::FuncOp backward) {
    std::map<std::string, Tensor> mainGrads;
    for (unsigned i = 0; i < backward.getNumArguments(); ++i)
      if (argName(backward, i).starts_with("main_grad."))
        mainGrads[argName(backward, i).str()] = interp::randomTensor(
            cast<RankedTensorType>(backward.getArgumentTypes()[i]), rng);
    return mainGrads;
  }

  MLIRContext context;
  std::mt19937_64 rng{std::random_device{}()};
};

using Grads = std::map<std::string, Tensor>;

void expectSame(const Grads &actual, const Grads &expected,
                const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (auto &[name, tensor] : expected) {
    auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << what << ": " << name;
    EXPECT_EQ(it->second.data, tensor.data) << what << ": " << name;
  }
}

TEST_P(DelayWgrad, SplitsOffTheWeightGradients) {
  OwningOpRef<ModuleOp> whole = compile(false), split = compile(true);
  ASSERT_TRUE(whole && split);
  Runner wholeRunner(*whole, {});
  EXPECT_FALSE(wholeRunner.wgrad);
  func::FuncOp backward = backwardOf(*split, firstFunction(*split));
  func::FuncOp wgrad = *std::next(split->getOps<func::FuncOp>().begin(), 2);
  EXPECT_EQ(wgrad.getName(), backward.getName().str() + "_wgrad");
  // Exactly the marked weights' gradients moved (biases' stay), and
  // main_grads accumulate in the wgrad function only.
  func::FuncOp forward = firstFunction(*split);
  auto delayed = [&](func::FuncOp function, unsigned result) {
    auto of = function.getResultAttrOfType<IntegerAttr>(result, "te.grad_of");
    return of && forward.getArgAttr(of.getInt(), "te.delay_wgrad");
  };
  for (unsigned i = 0; i < backward.getNumResults(); ++i) {
    EXPECT_FALSE(delayed(backward, i)) << i;
    EXPECT_FALSE(backward.getResultAttr(i, "te.accumulates")) << i;
  }
  EXPECT_GT(wgrad.getNumResults(), 0u);
  for (unsigned i = 0; i < wgrad.getNumResults(); ++i)
    EXPECT_TRUE(delayed(wgrad, i)) << i;
  unsigned deferred = 0;
  for (unsigned i = 0; i < backward.getNumResults(); ++i)
    deferred += backward.getResultAttrOfType<StringAttr>(i, "te.name")
                    .getValue()
                    .starts_with("deferred.");
  func::FuncOp wholeBackward = backwardOf(*whole, firstFunction(*whole));
  EXPECT_EQ(backward.getNumResults() + wgrad.getNumResults(),
            wholeBackward.getNumResults() + deferred);
}

TEST_P(DelayWgrad, GradientsMatchTheWholeBackward) {
  OwningOpRef<ModuleOp> whole = compile(false), split = compile(true);
  ASSERT_TRUE(whole && split);
  Runner wholeRunner(*whole, {});
  wholeRunner.state = randomMainGrads(wholeRunner.backward);
  Runner splitRunner(*split, wholeRunner.state);
  ASSERT_TRUE(splitRunner.wgrad);
  OwningOpRef<ModuleOp> layers =
      importSpecText(context, spec(false), "delay.yaml");
  for (int step = 0; step < 2; ++step) {
    std::vector<Tensor> args, outputGrads;
    drawStep(firstFunction(*layers), args, outputGrads);
    Grads expected, actual;
    wholeRunner.forwardBackward(args, outputGrads, expected);
    Runner::Pending pending =
        splitRunner.forwardBackward(args, outputGrads, actual);
    splitRunner.runWgrad(pending, actual);
    expectSame(actual, expected, "step " + std::to_string(step));
  }
  expectSame(splitRunner.state, wholeRunner.state, "state");
}

// Two micro-batches' forwards and backwards before their wgrads (FIFO), as
// pipeline schedules run them: the same as one step at a time.
TEST_P(DelayWgrad, QueuedWgradsMatchInterleavedOnes) {
  OwningOpRef<ModuleOp> split = compile(true);
  ASSERT_TRUE(split);
  Runner interleaved(*split, {});
  interleaved.state = randomMainGrads(interleaved.backward);
  Runner queued(*split, interleaved.state);
  OwningOpRef<ModuleOp> layers =
      importSpecText(context, spec(false), "delay.yaml");
  std::vector<Tensor> args[2], outputGrads[2];
  for (int i = 0; i < 2; ++i)
    drawStep(firstFunction(*layers), args[i], outputGrads[i]);

  Grads expected[2], actual[2];
  for (int i = 0; i < 2; ++i)
    interleaved.runWgrad(
        interleaved.forwardBackward(args[i], outputGrads[i], expected[i]),
        expected[i]);
  Runner::Pending pending[2];
  for (int i = 0; i < 2; ++i)
    pending[i] = queued.forwardBackward(args[i], outputGrads[i], actual[i]);
  for (int i = 0; i < 2; ++i)
    queued.runWgrad(pending[i], actual[i]);
  for (int i = 0; i < 2; ++i)
    expectSame(actual[i], expected[i], "micro-batch " + std::to_string(i));
  expectSame(queued.state, interleaved.state, "state");
}

// The IR before fusion gives the same values (the split itself, without
// te-fuse and te-plan-memory's part).
TEST_P(DelayWgrad, ScaledStageMatchesPlanned) {
  OwningOpRef<ModuleOp> scaled = compile(true, Stage::Scaled);
  OwningOpRef<ModuleOp> planned = compile(true);
  ASSERT_TRUE(scaled && planned);
  Runner a(*scaled, {}), b(*planned, {});
  a.state = randomMainGrads(a.backward);
  b.state = a.state;
  OwningOpRef<ModuleOp> layers =
      importSpecText(context, spec(false), "delay.yaml");
  std::vector<Tensor> args, outputGrads;
  drawStep(firstFunction(*layers), args, outputGrads);
  Grads expected, actual;
  a.runWgrad(a.forwardBackward(args, outputGrads, expected), expected);
  b.runWgrad(b.forwardBackward(args, outputGrads, actual), actual);
  expectSame(actual, expected, "planned");
}

std::vector<Param> allParams() {
  std::vector<Param> params;
  for (const DelayCase &layers : kLayers)
    for (const Recipe &recipe : kRecipes)
      params.push_back({layers, recipe});
  return params;
}

// Tensor and sequence parallelism: each of two ranks runs its shard of a
// column- and a row-parallel Linear; its split steps give the whole
// backward's bits (the amax reduction and the gathers span both ranks).
TEST(DelayWgradParallel, RanksMatchTheWholeBackward) {
  for (const char *recipe : {"none", "{type: DelayedScaling}"}) {
    MLIRContext context;
    context.loadDialect<te::TEDialect, func::FuncDialect>();
    auto spec = [&](bool delay) {
      std::string key = delay ? ", delay_wgrad_compute: true" : "";
      std::string parallel = "tp_size: 2, sequence_parallel: true" + key;
      return "seq_length: 32\nbatch_size: 2\nrecipe: " + std::string(recipe) +
             "\nlayers:\n"
             "  - {type: Linear, in_features: 64, out_features: 128, "
             "parallel_mode: column, " +
             parallel +
             "}\n"
             "  - {type: Linear, in_features: 128, out_features: 64, "
             "parallel_mode: row, " +
             parallel + "}\n";
    };
    auto compile = [&](bool delay) {
      OwningOpRef<ModuleOp> module =
          importSpecText(context, spec(delay), "parallel.yaml");
      EXPECT_TRUE(module && runPipeline(*module, {Stage::Planned, true}));
      return module;
    };
    OwningOpRef<ModuleOp> whole = compile(false), split = compile(true);
    ASSERT_TRUE(whole && split);
    OwningOpRef<ModuleOp> layers =
        importSpecText(context, spec(false), "parallel.yaml");
    // Each rank's arguments and output gradients, drawn before the threads.
    std::mt19937_64 rng{std::random_device{}()};
    std::vector<Tensor> args[2][2], grads[2][2];
    for (int rank = 0; rank < 2; ++rank)
      for (int step = 0; step < 2; ++step) {
        args[rank][step] = randomLayerArgs(firstFunction(*layers), rng);
        grads[rank][step] = randomResultGrads(firstFunction(*layers), rng);
      }
    onRanks(2, [&](int rank, interp::Collectives &collectives) {
      interp::Options options;
      options.collectives = &collectives;
      options.rank = rank;
      Runner wholeRunner(*whole, {}, options), splitRunner(*split, {}, options);
      for (int step = 0; step < 2; ++step) {
        Grads expected, actual;
        wholeRunner.forwardBackward(args[rank][step], grads[rank][step],
                                    expected);
        splitRunner.runWgrad(splitRunner.forwardBackward(
                                 args[rank][step], grads[rank][step], actual),
                             actual);
        expectSame(actual, expected,
                   std::string(recipe) + ", rank " + std::to_string(rank));
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, DelayWgrad, ::testing::ValuesIn(allParams()),
                         [](const auto &info) {
                           return std::string(std::get<0>(info.param).name) +
                                  "_" + std::get<1>(info.param).name;
                         });

} // namespace
