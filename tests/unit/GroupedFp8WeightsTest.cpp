//===- GroupedFp8WeightsTest.cpp - GroupedLinear with fp8_weights ---------===//
//
// Transformer Engine's fp8_model_init on GroupedLinear: the stacked weight
// [G, N, K] arrives in FP8, each expert's matrix with its own scale
// (`weight.scale_inv` [G]) and, for training, its own transpose
// (`weight.transpose` [G, K, N]). Each case compiles a spec twice, with and
// without `fp8_weights: true`, and runs one training step of each in the
// reference interpreter (float64). The plain program casts the dequantized
// weights itself with the same per-expert scales: under DelayedScaling its
// weight slots hold the FP8 weights' scales (distinct powers of two, so an
// expert reading another's scale is caught), under power-of-two current
// scaling it computes them from each expert's amax. Outputs and gradients
// must then agree bit for bit; without power_2_scale the recomputed scales
// may differ in their last bits, and the results by FP8 rounding at most.
//
//===----------------------------------------------------------------------===//
#include "Fp8WeightsFixture.h"

#include "compiler/interpreter/Fp8.h"
#include "compiler/interpreter/Kernels.h"

#include <cmath>

using namespace mlir;
using namespace tejit;
using namespace tejit::testing;

namespace {

/// How the FP8 weights were scaled, which the plain program reproduces.
enum class WeightScaling {
  /// DelayedScaling: scale 4^g for expert g, set in the plain program's
  /// weight slots.
  delayed,
  /// Float8CurrentScaling with power_2_scale: each expert's own.
  currentPower2,
  /// Float8CurrentScaling: 448 / each expert's amax.
  current,
};

struct GroupedFp8WeightsCase {
  const char *name;
  /// The spec up to its one GroupedLinear's mapping, which the test closes
  /// with or without `fp8_weights: true`.
  const char *spec;
  WeightScaling scaling;
};

constexpr int64_t kGroups = 4;
/// Tokens of each expert (multiples of 16, as FP8 asks): an empty expert
/// and 16 rows of padding past the segments (80 tokens).
const double kSplits[kGroups] = {32, 0, 16, 16};

const GroupedFp8WeightsCase kCases[] = {
    {"delayed_hybrid", R"(
seq_length: 20
batch_size: 4
recipe: {type: DelayedScaling, fp8_format: HYBRID, amax_history_len: 4}
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 32, out_features: 48)",
     WeightScaling::delayed},
    {"delayed_e4m3_no_bias", R"(
seq_length: 20
batch_size: 4
recipe: {type: DelayedScaling, fp8_format: E4M3}
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 48, out_features: 32,
     bias: false)",
     WeightScaling::delayed},
    {"current_power2", R"(
seq_length: 20
batch_size: 4
recipe: {type: Float8CurrentScaling, power_2_scale: true}
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 32, out_features: 48)",
     WeightScaling::currentPower2},
    {"current_power2_main_grad", R"(
seq_length: 20
batch_size: 4
recipe: {type: Float8CurrentScaling, power_2_scale: true}
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 32, out_features: 48,
     fuse_wgrad_accumulation: true)",
     WeightScaling::currentPower2},
    {"current", R"(
seq_length: 20
batch_size: 4
recipe: {type: Float8CurrentScaling}
layers:
  - {type: GroupedLinear, num_gemms: 4, in_features: 32, out_features: 48)",
     WeightScaling::current},
};

/// The FP8 form of stacked weights: their E4M3 values and each expert's
/// scale_inv.
struct Fp8Stack {
  Tensor values;
  std::vector<double> scales;
  Tensor scaleInvs;
};

class GroupedFp8Weights : public Fp8WeightsFixture<GroupedFp8WeightsCase> {
protected:
  /// Quantizes each expert of `weight` [G, N, K] with its own scale and
  /// leaves in `weight` the values the FP8 copy dequantizes to.
  Fp8Stack quantize(Tensor &weight) {
    int64_t size = weight.numElements() / kGroups;
    Fp8Stack stack{Tensor::zeros(weight.shape), {}, Tensor::zeros({kGroups})};
    for (int64_t g = 0; g < kGroups; ++g) {
      Tensor expert({weight.shape[1], weight.shape[2]},
                    std::vector<double>(weight.data.begin() + g * size,
                                        weight.data.begin() + (g + 1) * size));
      float power = float(std::pow(4.0, double(g)));
      interp::Fp8Scale scale{power, 1.0f / power};
      if (GetParam().scaling != WeightScaling::delayed)
        scale = interp::currentScale(
            interp::absMax(expert), interp::Fp8Kind::E4M3,
            GetParam().scaling == WeightScaling::currentPower2);
      Tensor fp8 = interp::quantize(expert, scale.scale, interp::Fp8Kind::E4M3);
      for (int64_t i = 0; i < size; ++i) {
        stack.values.data[g * size + i] = fp8.data[i];
        weight.data[g * size + i] = fp8.data[i] * double(scale.scaleInv);
      }
      stack.scales.push_back(scale.scale);
      stack.scaleInvs.data[g] = double(scale.scaleInv);
    }
    return stack;
  }

  /// Each expert of `values` [G, N, K] transposed: [G, K, N].
  static Tensor transposed(const Tensor &values) {
    int64_t n = values.shape[1], k = values.shape[2];
    Tensor result = Tensor::zeros({kGroups, k, n});
    for (int64_t g = 0; g < kGroups; ++g)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c)
          result.data[(g * k + c) * n + r] = values.data[(g * n + r) * k + c];
    return result;
  }
};

TEST_P(GroupedFp8Weights, TrainingStepEqualsCastInProgram) {
  Programs programs;
  ASSERT_TRUE(compileBoth(programs));
  func::FuncOp layerFunction = programs.layerFunction;
  func::FuncOp forward = programs.forward;
  std::vector<Tensor> &plainArgs = programs.plainArgs;
  const std::vector<Tensor> &grads = programs.grads;
  ModuleOp plain = *programs.plain, fp8 = *programs.fp8;

  // The layer's arguments: input, m_splits, weight [G, N, K], bias; the FP8
  // program's weight in FP8, then its scale_inv [G] and transpose.
  std::optional<Fp8Stack> stack;
  std::vector<Tensor> fp8Args(forward.getNumArguments());
  for (unsigned i = 0; i < layerFunction.getNumArguments(); ++i) {
    if (argName(layerFunction, i) == "m_splits")
      plainArgs[i] = Tensor({kGroups}, std::vector<double>(std::begin(kSplits),
                                                           std::end(kSplits)));
    fp8Args[i] = plainArgs[i];
    if (!forward.getArgAttr(i, "te.fp8_weight"))
      continue;
    ASSERT_FALSE(stack) << "one FP8 weight expected";
    auto type = cast<RankedTensorType>(forward.getArgumentTypes()[i]);
    EXPECT_TRUE(type.getElementType().isFloat8E4M3FN());
    ASSERT_EQ(type.getRank(), 3);
    stack = quantize(plainArgs[i]);
    fp8Args[i] = stack->values;
  }
  ASSERT_TRUE(stack);
  int extra = 0;
  for (unsigned i = layerFunction.getNumArguments();
       i < forward.getNumArguments(); ++i) {
    StringRef name = argName(forward, i);
    if (name.starts_with("fp8_meta."))
      continue;
    ++extra;
    auto shape =
        cast<RankedTensorType>(forward.getArgumentTypes()[i]).getShape();
    if (name.ends_with(".scale_inv")) {
      EXPECT_EQ(shape, ArrayRef<int64_t>(kGroups));
      fp8Args[i] = stack->scaleInvs;
    } else if (name.ends_with(".transpose")) {
      fp8Args[i] = transposed(stack->values);
      EXPECT_EQ(shape, ArrayRef<int64_t>(fp8Args[i].shape));
    } else {
      ADD_FAILURE() << "unexpected argument " << name.str();
    }
  }
  EXPECT_EQ(extra, 2);

  func::FuncOp plainForward = firstFunction(plain);
  TrainingStep plainStep(plainForward, backwardOf(plain, plainForward));
  TrainingStep fp8Step(forward, backwardOf(fp8, forward));
  if (GetParam().scaling == WeightScaling::delayed) {
    // The plain program's forward slots: the G inputs' (scale 1, as the
    // FP8 program's), then the G weights' (the FP8 weights' scales).
    std::vector<double> scale(2 * kGroups, 1.0), scaleInv(2 * kGroups, 1.0);
    for (int64_t g = 0; g < kGroups; ++g) {
      scale[kGroups + g] = stack->scales[g];
      scaleInv[kGroups + g] = stack->scaleInvs.data[g];
    }
    plainStep.setMeta("fp8_meta.fwd.scale", Tensor({2 * kGroups}, scale));
    plainStep.setMeta("fp8_meta.fwd.scale_inv",
                      Tensor({2 * kGroups}, scaleInv));
  }
  // fuse_wgrad_accumulation: both add into the same main_grads.
  func::FuncOp backward = backwardOf(fp8, forward);
  for (auto [index, type] : llvm::enumerate(backward.getArgumentTypes())) {
    std::string name = argName(backward, index).str();
    if (StringRef(name).starts_with("main_grad."))
      plainStep.mainGrads[name] = fp8Step.mainGrads[name] =
          interp::randomTensor(cast<RankedTensorType>(type), rng);
  }
  std::map<std::string, Tensor> expected = plainStep.run(plainArgs, grads);
  std::map<std::string, Tensor> actual = fp8Step.run(fp8Args, grads);
  expectSameResults(expected, actual,
                    GetParam().scaling == WeightScaling::current
                        ? std::optional<double>(0.02)
                        : std::nullopt);
  // The weight gradient is high precision and the empty expert's is zero
  // (its main_grad's slice unchanged).
  std::string gradName = "grad." + argName(layerFunction, 2).str();
  ASSERT_TRUE(actual.count(gradName));
  const Tensor &weightGrad = actual[gradName];
  auto mainGrad = fp8Step.mainGrads.find("main_grad." + gradName.substr(5));
  int64_t size = weightGrad.numElements() / kGroups;
  for (int64_t i = 0; i < size; ++i) {
    double before = mainGrad == fp8Step.mainGrads.end()
                        ? 0.0
                        : mainGrad->second.data[size + i];
    ASSERT_EQ(weightGrad.data[size + i], before) << "expert 1 is empty";
  }
}

TEST_P(GroupedFp8Weights, InferenceTakesScalesNoTranspose) {
  OwningOpRef<ModuleOp> module = compile(true, false, Stage::Scaled);
  ASSERT_TRUE(module);
  func::FuncOp forward = firstFunction(*module);
  int scaleInvs = 0;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    StringRef name = argName(forward, i);
    EXPECT_FALSE(name.ends_with(".transpose")) << name.str();
    if (name.ends_with(".scale_inv") && !name.starts_with("fp8_meta.")) {
      ++scaleInvs;
      EXPECT_EQ(
          cast<RankedTensorType>(forward.getArgumentTypes()[i]).getShape(),
          ArrayRef<int64_t>(kGroups));
    }
  }
  EXPECT_EQ(scaleInvs, 1);
  // Only the tokens are cast: no grouped cast of stacked weights.
  forward.walk([&](te::GroupedQuantizeOp quantize) {
    EXPECT_TRUE(quantize.getMSplits()) << "a weight is cast";
  });
}

INSTANTIATE_TEST_SUITE_P(Specs, GroupedFp8Weights, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return info.param.name; });

} // namespace
