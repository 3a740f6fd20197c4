//===- GroupedPipelineTest.cpp - GroupedLinear through the whole pipeline -===//
//
// Specs of GroupedLinear layers (docs/grouped-linear.md) are compiled
// through the whole pipeline (te-decompose, te-autodiff, te-place-scaling,
// te-fuse, te-plan-memory) with no recipe, DelayedScaling and
// Float8CurrentScaling, and a training step of the planned program runs in
// the reference interpreter. Its output and gradients are compared with a
// float64 computation of GroupedLinear's definition written here (forward,
// dgrad, wgrad and bias gradient per segment), as is the interpreted layer
// op itself: exactly without a recipe, within FP8 error under a recipe
// (DelayedScaling's second step, which runs on the scales of the first).
// Random m_splits leave an empty group and padding rows past the segments,
// whose outputs and gradients must be exactly zero. Under
// fuse_wgrad_accumulation the weight gradients are added to random
// main_grads (te-fuse folds the add into the grouped wgrad GEMM): the
// result less the main_grad must be the definition's gradient, and an empty
// group's slice the main_grad's.
//
//===----------------------------------------------------------------------===//
#include "Fp8TrainingStep.h"

#include "mlir/IR/Diagnostics.h"

#include <map>

using namespace mlir;
using namespace tejit;
using namespace tejit::testing;

namespace {

struct GroupedCase {
  const char *name;
  const char *spec;
  /// Bounds on ||result - reference|| / ||reference|| (FP8), about twice the
  /// worst seen over 100 runs of fresh data (E4M3 forward; E5M2 gradients
  /// under HYBRID); without a recipe, on the largest elementwise relative
  /// error, which stays at float64 rounding.
  double outputBound, gradBound;
  bool fp8;
};

void PrintTo(const GroupedCase &c, std::ostream *os) { *os << c.name; }

const GroupedCase kCases[] = {
    {"grouped_none", R"(
seq_length: 32
batch_size: 4
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 64, out_features: 48}
)",
     1e-10, 1e-10, false},
    {"grouped_delayed_hybrid", R"(
seq_length: 32
batch_size: 4
recipe: {type: DelayedScaling, fp8_format: HYBRID, amax_history_len: 4}
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 64, out_features: 48}
)",
     0.025, 0.12, true},
    {"grouped_current", R"(
seq_length: 32
batch_size: 4
recipe: {type: Float8CurrentScaling}
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 64, out_features: 48}
)",
     0.025, 0.12, true},
    // An MoE expert MLP without its activation: FC1 and FC2 share m_splits;
    // FC2 has no bias. bshd, so the tokens are batch-major.
    {"experts_none_fp32", R"(
params_dtype: fp32
seq_length: 16
batch_size: 6
input_format: bshd
layers:
  - {type: GroupedLinear, name: fc1, num_gemms: 3, in_features: 32, out_features: 80}
  - {type: GroupedLinear, name: fc2, num_gemms: 3, in_features: 80, out_features: 32, bias: false}
)",
     1e-10, 1e-10, false},
    {"experts_delayed_e4m3", R"(
seq_length: 16
batch_size: 6
recipe: {type: DelayedScaling, fp8_format: E4M3, amax_compute_algo: most_recent}
layers:
  - {type: GroupedLinear, name: fc1, num_gemms: 3, in_features: 32, out_features: 80}
  - {type: GroupedLinear, name: fc2, num_gemms: 3, in_features: 80, out_features: 32, bias: false}
)",
     0.1, 0.12, true},
    {"experts_current_power2", R"(
seq_length: 16
batch_size: 6
recipe: {type: Float8CurrentScaling, power_2_scale: true}
layers:
  - {type: GroupedLinear, name: fc1, num_gemms: 3, in_features: 32, out_features: 80}
  - {type: GroupedLinear, name: fc2, num_gemms: 3, in_features: 80, out_features: 32, bias: false}
)",
     0.1, 0.18, true},
    {"grouped_none_main_grad", R"(
seq_length: 32
batch_size: 4
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 64, out_features: 48,
     fuse_wgrad_accumulation: true}
)",
     1e-10, 1e-10, false},
    {"experts_delayed_main_grad", R"(
seq_length: 16
batch_size: 6
recipe: {type: DelayedScaling, fp8_format: HYBRID, amax_history_len: 4}
layers:
  - {type: GroupedLinear, name: fc1, num_gemms: 3, in_features: 32, out_features: 80,
     fuse_wgrad_accumulation: true}
  - {type: GroupedLinear, name: fc2, num_gemms: 3, in_features: 80, out_features: 32,
     bias: false, fuse_wgrad_accumulation: true}
)",
     0.1, 0.12, true},
};

/// Segment offsets o_0 = 0, ..., o_G = sum(m_splits).
std::vector<int64_t> offsetsOf(const Tensor &splits) {
  std::vector<int64_t> offsets = {0};
  for (double m : splits.data)
    offsets.push_back(offsets.back() + int64_t(m));
  return offsets;
}

/// Random splits of `tokens` rows into `groups` segments: one group empty,
/// at least one padding row left over, and under FP8 every split a multiple
/// of 16 (the GEMMs' alignment rule).
Tensor randomSplits(int64_t groups, int64_t tokens, bool fp8,
                    std::mt19937_64 &rng) {
  int64_t unit = fp8 ? 16 : 1;
  int64_t units = tokens / unit;
  // Leave 1 or 2 units of padding.
  int64_t available = units - 1 - int64_t(rng() % 2);
  int64_t empty = int64_t(rng() % uint64_t(groups));
  std::vector<double> splits(groups, 0.0);
  for (int64_t i = 0; i < available; ++i) {
    int64_t g = int64_t(rng() % uint64_t(groups - 1));
    if (g >= empty)
      ++g;
    splits[g] += double(unit);
  }
  return Tensor({groups}, splits);
}

/// One GroupedLinear of the layer function: its stacked weights [G, N, K]
/// and bias [G, N] (null when none), as argument indices.
struct GroupedLayer {
  unsigned weight;
  std::optional<unsigned> bias;
};

/// The layer function's GroupedLinears, in order; each reads the previous
/// one's output (the test specs chain them).
std::vector<GroupedLayer> groupedLayers(func::FuncOp function) {
  std::vector<GroupedLayer> layers;
  function.walk([&](te::GroupedLinearOp op) {
    GroupedLayer layer{cast<BlockArgument>(op.getWeight()).getArgNumber(), {}};
    if (Value bias = op.getBias())
      layer.bias = cast<BlockArgument>(bias).getArgNumber();
    layers.push_back(layer);
  });
  return layers;
}

/// GroupedLinear's definition in float64, on rows [T, K]: the forward
/// output, and from the output gradient the input's, each weight's and
/// each bias's gradient.
class GroupedReference {
public:
  GroupedReference(const std::vector<int64_t> &offsets) : offsets(offsets) {}

  /// y[seg g] = x[seg g] W_g^T + b_g; rows past the segments 0.
  std::vector<double> forward(const std::vector<double> &x, const Tensor &w,
                              const Tensor *b) const {
    int64_t n = w.shape[1], k = w.shape[2], tokens = x.size() / k;
    std::vector<double> y(tokens * n, 0.0);
    for (size_t g = 0; g + 1 < offsets.size(); ++g)
      for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
        for (int64_t j = 0; j < n; ++j) {
          double sum = b ? b->data[g * n + j] : 0.0;
          for (int64_t i = 0; i < k; ++i)
            sum += x[t * k + i] * w.data[(g * n + j) * k + i];
          y[t * n + j] = sum;
        }
    return y;
  }

  /// dx[seg g] = dy[seg g] W_g; rows past the segments 0.
  std::vector<double> inputGrad(const std::vector<double> &dy,
                                const Tensor &w) const {
    int64_t n = w.shape[1], k = w.shape[2], tokens = dy.size() / n;
    std::vector<double> dx(tokens * k, 0.0);
    for (size_t g = 0; g + 1 < offsets.size(); ++g)
      for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
        for (int64_t i = 0; i < k; ++i) {
          double sum = 0;
          for (int64_t j = 0; j < n; ++j)
            sum += dy[t * n + j] * w.data[(g * n + j) * k + i];
          dx[t * k + i] = sum;
        }
    return dx;
  }

  /// dW_g = dy[seg g]^T x[seg g] (zeros for an empty segment).
  std::vector<double> weightGrad(const std::vector<double> &dy,
                                 const std::vector<double> &x,
                                 const Tensor &w) const {
    int64_t n = w.shape[1], k = w.shape[2];
    std::vector<double> dw(w.data.size(), 0.0);
    for (size_t g = 0; g + 1 < offsets.size(); ++g)
      for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < k; ++i)
            dw[(g * n + j) * k + i] += dy[t * n + j] * x[t * k + i];
    return dw;
  }

  /// db_g = column sums of dy[seg g].
  std::vector<double> biasGrad(const std::vector<double> &dy,
                               const Tensor &b) const {
    int64_t n = b.shape[1];
    std::vector<double> db(b.data.size(), 0.0);
    for (size_t g = 0; g + 1 < offsets.size(); ++g)
      for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
        for (int64_t j = 0; j < n; ++j)
          db[g * n + j] += dy[t * n + j];
    return db;
  }

private:
  std::vector<int64_t> offsets;
};

class GroupedPipeline : public ::testing::TestWithParam<GroupedCase> {
protected:
  GroupedPipeline()
      : handler(&context, [](Diagnostic &diag) {
          ADD_FAILURE() << diag.str();
          return success();
        }) {
    context.loadDialect<te::TEDialect, func::FuncDialect>();
  }

  OwningOpRef<ModuleOp> compile(Stage stage) {
    OwningOpRef<ModuleOp> module = importSpecText(
        context, GetParam().spec, std::string(GetParam().name) + ".yaml");
    EXPECT_TRUE(module && runPipeline(*module, {stage, /*training=*/true}));
    return module;
  }

  /// Arguments of the layer function: weights scaled by 1/sqrt(in_features),
  /// biases and the input N(0, 0.5), and random m_splits.
  std::vector<Tensor> randomArgs(func::FuncOp function) {
    std::vector<Tensor> args;
    int64_t tokens = 0;
    for (auto [index, type] : llvm::enumerate(function.getArgumentTypes())) {
      auto tensor = cast<RankedTensorType>(type);
      if (argName(function, index) == "m_splits") {
        args.push_back(
            randomSplits(tensor.getDimSize(0), tokens, GetParam().fp8, rng));
        continue;
      }
      if (index == 0)
        tokens = tensor.getNumElements() / tensor.getShape().back();
      double stddev = tensor.getRank() == 3
                          ? 1.0 / std::sqrt(double(tensor.getDimSize(2)))
                          : 0.5;
      args.push_back(interp::randomTensor(tensor, rng, stddev));
    }
    return args;
  }

  /// Runs the definition on `args`: returns "output" and "grad.<argument>"
  /// of the input and every parameter, shaped as the function's.
  std::map<std::string, Tensor> reference(func::FuncOp function,
                                          const std::vector<Tensor> &args,
                                          const Tensor &outputGrad) {
    std::vector<GroupedLayer> layers = groupedLayers(function);
    std::vector<int64_t> offsets;
    for (unsigned i = 0; i < args.size(); ++i)
      if (argName(function, i) == "m_splits")
        offsets = offsetsOf(args[i]);
    GroupedReference ref(offsets);
    std::vector<std::vector<double>> inputs = {args[0].data};
    for (const GroupedLayer &layer : layers) {
      const Tensor *bias = layer.bias ? &args[*layer.bias] : nullptr;
      inputs.push_back(ref.forward(inputs.back(), args[layer.weight], bias));
    }
    std::map<std::string, Tensor> results;
    results["output"] = Tensor(outputGrad.shape, inputs.back());
    std::vector<double> grad = outputGrad.data;
    for (size_t l = layers.size(); l-- > 0;) {
      const Tensor &weight = args[layers[l].weight];
      std::string name = argName(function, layers[l].weight).str();
      results["grad." + name] =
          Tensor(weight.shape, ref.weightGrad(grad, inputs[l], weight));
      if (layers[l].bias) {
        const Tensor &bias = args[*layers[l].bias];
        results["grad." + argName(function, *layers[l].bias).str()] =
            Tensor(bias.shape, ref.biasGrad(grad, bias));
      }
      grad = ref.inputGrad(grad, weight);
    }
    results["grad." + argName(function, 0).str()] = Tensor(args[0].shape, grad);
    return results;
  }

  std::map<std::string, Tensor> step(ModuleOp module,
                                     const std::vector<Tensor> &args,
                                     const std::vector<Tensor> &grads,
                                     int steps) {
    func::FuncOp forward = firstFunction(module);
    func::FuncOp backward = backwardOf(module, forward);
    TrainingStep runner(forward, backward);
    // The same main_grads for every stage of one test (made on first use).
    for (auto [index, type] : llvm::enumerate(backward.getArgumentTypes())) {
      std::string name = argName(backward, index).str();
      if (StringRef(name).starts_with("main_grad.") && !mainGrads.count(name))
        mainGrads[name] =
            interp::randomTensor(cast<RankedTensorType>(type), rng);
    }
    runner.mainGrads = mainGrads;
    std::map<std::string, Tensor> results;
    for (int i = 0; i < steps; ++i)
      results = runner.run(args, grads);
    return results;
  }

  MLIRContext context;
  ScopedDiagnosticHandler handler;
  /// The backward's main_grad arguments, by name (fuse_wgrad_accumulation).
  std::map<std::string, Tensor> mainGrads;
  std::mt19937_64 rng{std::random_device{}()};
};

/// The rows of `tensor` (its leading dims flattened) from `row` on are all 0.
bool rowsZeroFrom(const Tensor &tensor, int64_t row) {
  int64_t width = tensor.shape.back();
  for (size_t i = row * width; i < tensor.data.size(); ++i)
    if (tensor.data[i] != 0.0)
      return false;
  return true;
}

TEST_P(GroupedPipeline, PlannedStepMatchesDefinition) {
  OwningOpRef<ModuleOp> layers = compile(Stage::TE);
  ASSERT_TRUE(layers);
  func::FuncOp layerFunction = firstFunction(*layers);
  std::vector<Tensor> args = randomArgs(layerFunction);
  std::vector<Tensor> outputGrads = randomResultGrads(layerFunction, rng);
  std::map<std::string, Tensor> expected =
      reference(layerFunction, args, outputGrads[0]);
  std::vector<int64_t> offsets;
  for (unsigned i = 0; i < args.size(); ++i)
    if (argName(layerFunction, i) == "m_splits")
      offsets = offsetsOf(args[i]);
  ASSERT_FALSE(offsets.empty());
  ASSERT_LT(offsets.back(), args[0].numElements() / args[0].shape.back());

  // The un-lowered layer ops, interpreted, compute the definition.
  FailureOr<std::vector<Tensor>> layerOutputs =
      interp::run(layerFunction, args);
  ASSERT_TRUE(succeeded(layerOutputs));
  EXPECT_LT(relativeError((*layerOutputs)[0], expected["output"]), 1e-12);

  // The planned program: a training step (DelayedScaling: the second, on
  // the scales the first one's amaxes gave).
  OwningOpRef<ModuleOp> planned = compile(Stage::Planned);
  ASSERT_TRUE(planned);
  std::map<std::string, Tensor> actual =
      step(*planned, args, outputGrads, GetParam().fp8 ? 2 : 1);
  // Gradients accumulated into main_grad: compare what was added to it.
  auto mainGradOf = [&](const std::string &gradName) -> const Tensor * {
    auto found = mainGrads.find("main_grad." + gradName.substr(5));
    return found == mainGrads.end() ? nullptr : &found->second;
  };
  std::map<std::string, Tensor> accumulated;
  for (auto &[name, tensor] : actual)
    if (const Tensor *mainGrad = mainGradOf(name)) {
      accumulated[name] = tensor;
      for (size_t i = 0; i < tensor.data.size(); ++i)
        tensor.data[i] -= mainGrad->data[i];
    }
  if (StringRef(GetParam().name).ends_with("main_grad")) {
    EXPECT_FALSE(accumulated.empty()) << "no gradient went to a main_grad";
  }
  // (The backward also returns DelayedScaling's new state.)
  double largest = 0;
  for (auto &[name, tensor] : expected) {
    ASSERT_TRUE(actual.count(name)) << name;
    ASSERT_EQ(actual[name].shape, tensor.shape) << name;
    bool grad = StringRef(name).starts_with("grad.");
    double error = GetParam().fp8 ? normRelativeError(actual[name], tensor)
                                  : relativeError(actual[name], tensor);
    EXPECT_LT(error, grad ? GetParam().gradBound : GetParam().outputBound)
        << name;
    if (getenv("TEJIT_PRINT_ERRORS"))
      llvm::errs() << GetParam().name << " " << name << " " << error << "\n";
    largest = std::max(largest, error);
  }
  // Padding rows: zero output and input gradient, FP8 or not.
  int64_t used = offsets.back();
  EXPECT_TRUE(rowsZeroFrom(actual["output"], used));
  EXPECT_TRUE(
      rowsZeroFrom(actual["grad." + argName(layerFunction, 0).str()], used));
  // The empty group: zero weight and bias gradients (a main_grad's slice
  // as it was, where the gradient accumulates).
  auto emptyGroupIsZero = [&](unsigned arg) {
    std::string name = "grad." + argName(layerFunction, arg).str();
    const Tensor *mainGrad = mainGradOf(name);
    const Tensor &grad = mainGrad ? accumulated[name] : actual[name];
    int64_t size = grad.numElements() / grad.shape[0];
    for (size_t g = 0; g + 1 < offsets.size(); ++g) {
      if (offsets[g] != offsets[g + 1])
        continue;
      for (int64_t i = 0; i < size; ++i) {
        double before = mainGrad ? mainGrad->data[g * size + i] : 0.0;
        if (grad.data[g * size + i] != before)
          return false;
      }
    }
    return true;
  };
  for (const GroupedLayer &layer : groupedLayers(layerFunction)) {
    EXPECT_TRUE(emptyGroupIsZero(layer.weight));
    if (layer.bias) {
      EXPECT_TRUE(emptyGroupIsZero(*layer.bias));
    }
  }
  if (GetParam().fp8) {
    // FP8 rounds: results all equal to the definition would mean nothing
    // ran in FP8.
    EXPECT_GT(largest, 1e-3);
  }
}

TEST_P(GroupedPipeline, FusionChangesNoValue) {
  OwningOpRef<ModuleOp> layers = compile(Stage::TE);
  ASSERT_TRUE(layers);
  func::FuncOp layerFunction = firstFunction(*layers);
  std::vector<Tensor> args = randomArgs(layerFunction);
  std::vector<Tensor> grads = randomResultGrads(layerFunction, rng);

  OwningOpRef<ModuleOp> scaled = compile(Stage::Scaled);
  OwningOpRef<ModuleOp> fused = compile(Stage::Fused);
  ASSERT_TRUE(scaled && fused);
  int regions = 0;
  fused->walk([&](te::FusedOp) { ++regions; });
  // At least the bias gradient (and under FP8 the casts) are kernels.
  EXPECT_GT(regions, 0);
  std::map<std::string, Tensor> expected = step(*scaled, args, grads, 2);
  std::map<std::string, Tensor> actual = step(*fused, args, grads, 2);
  ASSERT_EQ(actual.size(), expected.size());
  for (auto &[name, tensor] : expected)
    EXPECT_EQ(actual[name].data, tensor.data) << name;
  // fuse_wgrad_accumulation: each layer's main_grad add is folded into its
  // wgrad GEMM (a "gemm" region around the grouped GEMM and the add).
  int accumulatingGemms = 0;
  fused->walk([&](te::FusedOp region) {
    bool grouped = false, add = false;
    region.getBody().walk([&](Operation *op) {
      grouped |= isa<te::GroupedMatmulOp, te::GroupedScaledMatmulOp>(op);
      add |= isa<te::AddOp>(op);
    });
    accumulatingGemms += region.getKind() == "gemm" && grouped && add;
  });
  EXPECT_EQ(accumulatingGemms, int(mainGrads.size()));
}

INSTANTIATE_TEST_SUITE_P(Specs, GroupedPipeline, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return info.param.name; });

} // namespace
