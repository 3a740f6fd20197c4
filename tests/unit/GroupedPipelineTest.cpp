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
// Under Float8BlockScaling (docs/grouped-linear.md, "Float8BlockScaling")
// the lowered program is also compared with a float64 emulation of the
// recipe's numerics written here from docs/block-scaling.md: every operand
// cast per group in blocks of its own (x and dY in 1-D blocks along K or N
// row-wise and along each segment's tokens transposed, the weights in 1-D
// or 2-D blocks per matrix), each block scaled by its own amax, then the
// GEMMs of the values read back. Without the layers' rounding in between
// (one GroupedLinear: every cast reads an argument), the interpreter must
// agree with it to float64 rounding. The placement itself (casts,
// kernel regions, saved transposed copies, GEMM scalings) is checked on
// the IR.
//
//===----------------------------------------------------------------------===//
#include "Fp8TestUtils.h"
#include "Fp8TrainingStep.h"

#include "mlir/IR/Diagnostics.h"

#include <cfloat>
#include <map>
#include <optional>

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

/// Float8BlockScaling cases: K and N span a full and a partial block, and
/// over 384 tokens in 3 groups (one empty) a segment spans more than one
/// block of tokens. Bounds: about twice the worst of the emulated recipe
/// (PlannedStepMatchesEmulatedRecipe) over 100 runs of fresh data.
const GroupedCase kBlockCases[] = {
    {"grouped_block", R"(
seq_length: 96
batch_size: 4
recipe: {type: Float8BlockScaling}
layers:
  - {type: GroupedLinear, num_gemms: 3, in_features: 160, out_features: 144}
)",
     0.015, 0.08, true},
    // HYBRID (E5M2 gradients), 1-D weight blocks, float32 scales, and the
    // weight gradient accumulated into a main_grad.
    {"grouped_block_hybrid_w1d_main_grad", R"(
seq_length: 96
batch_size: 4
recipe: {type: Float8BlockScaling, fp8_format: HYBRID, w_block_scaling_dim: 1,
         power_2_scale: false}
layers:
  - {type: GroupedLinear, num_gemms: 3, in_features: 160, out_features: 144,
     fuse_wgrad_accumulation: true}
)",
     0.015, 0.12, true},
    {"experts_block_main_grad", R"(
seq_length: 16
batch_size: 6
recipe: {type: Float8BlockScaling}
layers:
  - {type: GroupedLinear, name: fc1, num_gemms: 3, in_features: 32, out_features: 160,
     fuse_wgrad_accumulation: true}
  - {type: GroupedLinear, name: fc2, num_gemms: 3, in_features: 160, out_features: 32,
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

/// Flat indices of the elements of each block of a block cast.
using Blocks = std::vector<std::vector<int64_t>>;

/// Elements along a block's side (docs/block-scaling.md).
constexpr int64_t kBlockSide = 128;

/// 1-D blocks of rows [rowBegin, rowEnd) of a matrix `cols` wide at flat
/// offset `base`: 128 consecutive elements of a row (the last one of a row
/// shorter).
void addRowBlocks(Blocks &blocks, int64_t base, int64_t rowBegin,
                  int64_t rowEnd, int64_t cols) {
  for (int64_t r = rowBegin; r < rowEnd; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlockSide) {
      blocks.emplace_back();
      for (int64_t c = c0; c < std::min(c0 + kBlockSide, cols); ++c)
        blocks.back().push_back(base + r * cols + c);
    }
}

/// 1-D blocks down each column of rows [rowBegin, rowEnd) of a matrix
/// `cols` wide: the rows of its transpose, counted from `rowBegin`.
void addColumnBlocks(Blocks &blocks, int64_t base, int64_t rowBegin,
                     int64_t rowEnd, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r0 = rowBegin; r0 < rowEnd; r0 += kBlockSide) {
      blocks.emplace_back();
      for (int64_t r = r0; r < std::min(r0 + kBlockSide, rowEnd); ++r)
        blocks.back().push_back(base + r * cols + c);
    }
}

/// 128 x 128 tiles of a matrix [rows, cols] (the same elements as the
/// tiles of its transpose).
void addTiles(Blocks &blocks, int64_t base, int64_t rows, int64_t cols) {
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockSide)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlockSide) {
      blocks.emplace_back();
      for (int64_t r = r0; r < std::min(r0 + kBlockSide, rows); ++r)
        for (int64_t c = c0; c < std::min(c0 + kBlockSide, cols); ++c)
          blocks.back().push_back(base + r * cols + c);
    }
}

/// Block casts of one FP8 type, as docs/block-scaling.md defines them: a
/// block's scale follows te.compute_scale's rules from the block's amax
/// (float32 quotient fp8_max / amax; 1 for amax 0; FLT_MAX on overflow;
/// rounded down to a power of two with `power2`), each element is the
/// float32 product x * scale rounded to the nearest FP8 value (saturating),
/// and the GEMM reads it back as value * scale_inv (1 / scale in float32).
class BlockCaster {
public:
  BlockCaster(const Fp8Type &type, bool power2)
      : table(fp8Values(type.kind)), max(type.max), power2(power2) {}

  /// `values` with every element of `blocks` cast and read back; the
  /// elements of no block as they are.
  std::vector<double> operator()(std::vector<double> values,
                                 const Blocks &blocks) const {
    for (const std::vector<int64_t> &block : blocks) {
      double amax = 0;
      for (int64_t i : block)
        amax = std::max(amax, std::fabs(values[i]));
      auto [scale, scaleInv] = scaleOf(amax);
      for (int64_t i : block) {
        float product = float(values[i]) * float(scale);
        values[i] = nearestFp8(table, double(product)) * scaleInv;
      }
    }
    return values;
  }

private:
  std::pair<double, double> scaleOf(double amax) const {
    double amax32 = float(amax);
    double scale = 1.0;
    if (std::isfinite(amax32) && amax32 > 0.0) {
      scale = floatQuotient(max, amax32);
      if (std::isinf(scale))
        scale = FLT_MAX;
      if (power2)
        scale = powerOfTwoBelow(scale);
    }
    return {scale, floatQuotient(1.0, scale)};
  }

  std::vector<double> table;
  double max;
  bool power2;
};

/// A GroupedLinear's Float8BlockScaling recipe, read off the layer op.
struct BlockRecipe {
  Fp8Type forward, backward;
  int64_t weightDim;
  bool power2;
};

/// The block recipe of the layer function's GroupedLinears, if any.
std::optional<BlockRecipe> blockRecipeOf(func::FuncOp function) {
  std::optional<BlockRecipe> recipe;
  function.walk([&](te::GroupedLinearOp op) {
    auto block = dyn_cast_or_null<te::BlockScalingAttr>(op.getFp8RecipeAttr());
    if (!block)
      return;
    bool hybrid = block.getFp8Format() == te::Fp8Format::HYBRID;
    recipe = BlockRecipe{kE4M3, hybrid ? kE5M2 : kE4M3,
                         block.getWBlockScalingDim(), block.getPower_2Scale()};
  });
  return recipe;
}

/// What GroupedLinear's GEMMs read of each operand under a block recipe
/// (docs/grouped-linear.md): token matrices [T, width] cast per row in
/// 1-D blocks along the width, or transposed, per segment in 1-D blocks
/// along its tokens; stacked weights [G, N, K] cast per matrix, in 1-D
/// blocks along K, or transposed along N, or in 2-D tiles. Without a
/// recipe every operand is read as it is (the definition).
class GroupedOperands {
public:
  GroupedOperands(const std::vector<int64_t> &offsets,
                  std::optional<BlockRecipe> recipe)
      : offsets(offsets), recipe(recipe) {}

  /// Tokens `values` [T, width] as fprop or dgrad (`transposed`: wgrad)
  /// reads them; `gradient`: cast in the backward format.
  std::vector<double> tokens(const std::vector<double> &values, int64_t width,
                             bool transposed, bool gradient) const {
    if (!recipe)
      return values;
    Blocks blocks;
    if (!transposed)
      addRowBlocks(blocks, 0, 0, offsets.back(), width);
    else
      for (size_t g = 0; g + 1 < offsets.size(); ++g)
        addColumnBlocks(blocks, 0, offsets[g], offsets[g + 1], width);
    return BlockCaster(gradient ? recipe->backward : recipe->forward,
                       recipe->power2)(values, blocks);
  }

  /// Stacked weights [G, N, K] as fprop (or, `transposed`, dgrad) reads
  /// them, each read-back value where its weight is.
  Tensor weights(const Tensor &w, bool transposed) const {
    if (!recipe)
      return w;
    int64_t groups = w.shape[0], n = w.shape[1], k = w.shape[2];
    Blocks blocks;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t base = g * n * k;
      if (recipe->weightDim == 2)
        addTiles(blocks, base, n, k);
      else if (!transposed)
        addRowBlocks(blocks, base, 0, n, k);
      else
        addColumnBlocks(blocks, base, 0, n, k);
    }
    return Tensor(w.shape,
                  BlockCaster(recipe->forward, recipe->power2)(w.data, blocks));
  }

private:
  std::vector<int64_t> offsets;
  std::optional<BlockRecipe> recipe;
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

  OwningOpRef<ModuleOp> compile(Stage stage, bool training = true) {
    OwningOpRef<ModuleOp> module = importSpecText(
        context, GetParam().spec, std::string(GetParam().name) + ".yaml");
    EXPECT_TRUE(module && runPipeline(*module, {stage, training}));
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
  /// of the input and every parameter, shaped as the function's. With a
  /// block recipe, each GEMM reads its operands cast as the recipe casts
  /// them (the bias gradient reads dY as it is).
  std::map<std::string, Tensor>
  reference(func::FuncOp function, const std::vector<Tensor> &args,
            const Tensor &outputGrad,
            std::optional<BlockRecipe> recipe = std::nullopt) {
    std::vector<GroupedLayer> layers = groupedLayers(function);
    std::vector<int64_t> offsets;
    for (unsigned i = 0; i < args.size(); ++i)
      if (argName(function, i) == "m_splits")
        offsets = offsetsOf(args[i]);
    GroupedReference ref(offsets);
    GroupedOperands read(offsets, recipe);
    std::vector<std::vector<double>> inputs = {args[0].data};
    for (const GroupedLayer &layer : layers) {
      const Tensor &weight = args[layer.weight];
      const Tensor *bias = layer.bias ? &args[*layer.bias] : nullptr;
      inputs.push_back(
          ref.forward(read.tokens(inputs.back(), weight.shape[2],
                                  /*transposed=*/false, /*gradient=*/false),
                      read.weights(weight, /*transposed=*/false), bias));
    }
    std::map<std::string, Tensor> results;
    results["output"] = Tensor(outputGrad.shape, inputs.back());
    std::vector<double> grad = outputGrad.data;
    for (size_t l = layers.size(); l-- > 0;) {
      const Tensor &weight = args[layers[l].weight];
      int64_t n = weight.shape[1], k = weight.shape[2];
      std::string name = argName(function, layers[l].weight).str();
      // wgrad reads dY^T and x^T, each cast per segment along its tokens.
      std::vector<double> gradColumns =
          read.tokens(grad, n, /*transposed=*/true, /*gradient=*/true);
      std::vector<double> inputColumns =
          read.tokens(inputs[l], k, /*transposed=*/true, /*gradient=*/false);
      results["grad." + name] = Tensor(
          weight.shape, ref.weightGrad(gradColumns, inputColumns, weight));
      if (layers[l].bias) {
        const Tensor &bias = args[*layers[l].bias];
        results["grad." + argName(function, *layers[l].bias).str()] =
            Tensor(bias.shape, ref.biasGrad(grad, bias));
      }
      grad = ref.inputGrad(
          read.tokens(grad, n, /*transposed=*/false, /*gradient=*/true),
          read.weights(weight, /*transposed=*/true));
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

  /// The main_grad that gradient `gradName` ("grad.<weight>") accumulates
  /// into (fuse_wgrad_accumulation), or null.
  const Tensor *mainGradOf(const std::string &gradName) const {
    auto found = mainGrads.find("main_grad." + gradName.substr(5));
    return found == mainGrads.end() ? nullptr : &found->second;
  }

  /// Leaves in each gradient of `results` that accumulates into a main_grad
  /// what was added to it; returns those gradients as they were.
  std::map<std::string, Tensor>
  subtractMainGrads(std::map<std::string, Tensor> &results) const {
    std::map<std::string, Tensor> accumulated;
    for (auto &[name, tensor] : results)
      if (const Tensor *mainGrad = mainGradOf(name)) {
        accumulated[name] = tensor;
        for (size_t i = 0; i < tensor.data.size(); ++i)
          tensor.data[i] -= mainGrad->data[i];
      }
    return accumulated;
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
  std::map<std::string, Tensor> accumulated = subtractMainGrads(actual);
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
  ASSERT_FALSE(expected.empty());
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
INSTANTIATE_TEST_SUITE_P(BlockSpecs, GroupedPipeline,
                         ::testing::ValuesIn(kBlockCases),
                         [](const auto &info) { return info.param.name; });

/// Float8BlockScaling: where te-place-scaling and te-fuse put the casts, and
/// the lowered program against the emulated recipe.
class GroupedBlockPipeline : public GroupedPipeline {
protected:
  /// The FP8 type of `format` in this test's context.
  Type fp8Type(const Fp8Type &format) {
    if (format.kind == interp::Fp8Kind::E5M2)
      return Float8E5M2Type::get(&context);
    return Float8E4M3FNType::get(&context);
  }

  /// Checks one "grouped_block_quantize" region of `function`: the casts of
  /// one input in its groups, in the forward format in forward functions
  /// and the backward format in backward ones; the row-wise cast, and with
  /// `training` the transposed one.
  void checkCastRegion(te::FusedOp region, const BlockRecipe &recipe,
                       bool forward, bool training) {
    int casts = 0, transposed = 0;
    Value input;
    region.getBody().walk([&](te::GroupedBlockQuantizeOp cast) {
      ++casts;
      transposed += cast.getTranspose();
      if (!input)
        input = cast.getInput();
      EXPECT_EQ(cast.getInput(), input);
      // Token segments in 1-D blocks; stacked weights as the recipe says.
      EXPECT_EQ(cast.getBlockDim(), cast.getMSplits() ? 1 : recipe.weightDim);
      EXPECT_EQ(cast.getPower_2Scale(), recipe.power2);
      EXPECT_EQ(getElementTypeOrSelf(cast.getOutput().getType()),
                fp8Type(forward ? recipe.forward : recipe.backward));
    });
    EXPECT_EQ(casts, training ? 2 : 1);
    EXPECT_EQ(transposed, training ? 1 : 0);
  }

  /// Checks the placed casts, kernel regions and GEMMs of `function`, the
  /// forward or backward function of `layers` GroupedLinears.
  void checkFunction(func::FuncOp function, const BlockRecipe &recipe,
                     int64_t layers, bool forward, bool training) {
    SCOPED_TRACE(function.getName().str());
    // No meta state, and no per-group scales.
    for (unsigned i = 0; i < function.getNumArguments(); ++i)
      EXPECT_FALSE(argName(function, i).starts_with("fp8_meta."))
          << argName(function, i).str();
    function.walk([&](Operation *op) {
      EXPECT_FALSE(
          (isa<te::GroupedQuantizeOp, te::GroupedAmaxOp, te::GroupedMatmulOp>(
              op)))
          << op->getName().getStringRef().str();
    });
    function.walk([&](te::GroupedBlockQuantizeOp cast) {
      auto region = dyn_cast<te::FusedOp>(cast->getParentOp());
      EXPECT_TRUE(region && region.getKind() == "grouped_block_quantize");
    });
    // A region per cast tensor: x and W of each layer forward, its dY
    // backward.
    int regions = 0;
    function.walk([&](te::FusedOp region) {
      if (region.getKind() != "grouped_block_quantize")
        return;
      ++regions;
      checkCastRegion(region, recipe, forward, training);
    });
    EXPECT_EQ(regions, (forward ? 2 : 1) * layers);
    // Block-scaled GEMMs (1-D token blocks; the weights' as the recipe
    // says), without fast accumulation: fprop forward, dgrad and wgrad
    // backward.
    int gemms = 0;
    function.walk([&](te::GroupedScaledMatmulOp gemm) {
      ++gemms;
      EXPECT_FALSE(gemm.getFastAccum());
      EXPECT_EQ(gemm.getAScaling(), 1);
      EXPECT_EQ(gemm.getBScaling(), gemm.isRowsForm() ? recipe.weightDim : 1);
    });
    EXPECT_EQ(gemms, (forward ? 1 : 2) * layers);
  }
};

TEST_P(GroupedBlockPipeline, PlacesBlockCasts) {
  OwningOpRef<ModuleOp> layers = compile(Stage::TE);
  ASSERT_TRUE(layers);
  func::FuncOp layerFunction = firstFunction(*layers);
  std::optional<BlockRecipe> recipe = blockRecipeOf(layerFunction);
  ASSERT_TRUE(recipe);
  int64_t numLayers = groupedLayers(layerFunction).size();
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    OwningOpRef<ModuleOp> fused = compile(Stage::Fused, training);
    ASSERT_TRUE(fused);
    func::FuncOp forward = firstFunction(*fused);
    func::FuncOp backward = backwardOf(*fused, forward);
    ASSERT_EQ(static_cast<bool>(backward), training);
    checkFunction(forward, *recipe, numLayers, /*forward=*/true, training);
    if (backward)
      checkFunction(backward, *recipe, numLayers, /*forward=*/false, training);
    // A training forward saves each layer's x^T and W^T casts with their
    // scales for the backward; an inference forward casts no transpose.
    int saved = 0;
    for (unsigned i = 0; i < forward.getNumResults(); ++i)
      if (auto name = forward.getResultAttrOfType<StringAttr>(i, "te.name"))
        saved += name.getValue().starts_with("saved.");
    EXPECT_EQ(saved, training ? 4 * numLayers : 0);
  }
}

TEST_P(GroupedBlockPipeline, PlannedStepMatchesEmulatedRecipe) {
  OwningOpRef<ModuleOp> layers = compile(Stage::TE);
  ASSERT_TRUE(layers);
  func::FuncOp layerFunction = firstFunction(*layers);
  std::optional<BlockRecipe> recipe = blockRecipeOf(layerFunction);
  ASSERT_TRUE(recipe);
  std::vector<Tensor> args = randomArgs(layerFunction);
  std::vector<Tensor> outputGrads = randomResultGrads(layerFunction, rng);
  std::map<std::string, Tensor> definition =
      reference(layerFunction, args, outputGrads[0]);
  std::map<std::string, Tensor> emulated =
      reference(layerFunction, args, outputGrads[0], recipe);

  // The emulation stays within FP8 error of the definition (and rounds).
  double largest = 0;
  for (auto &[name, tensor] : definition) {
    double error = normRelativeError(emulated[name], tensor);
    bool grad = StringRef(name).starts_with("grad.");
    EXPECT_LT(error, grad ? GetParam().gradBound : GetParam().outputBound)
        << name;
    if (getenv("TEJIT_PRINT_ERRORS"))
      llvm::errs() << GetParam().name << " emulated " << name << " " << error
                   << "\n";
    largest = std::max(largest, error);
  }
  EXPECT_GT(largest, 1e-3);

  // The lowered program computes the emulated numerics: to float64
  // rounding for one layer, whose casts all read arguments. Chained layers
  // cast the previous layer's output, which the interpreter sums in
  // another order: an element at an FP8 rounding boundary (about 1 in 10^9)
  // may round the other way, moving the result by about 1e-3 at most.
  OwningOpRef<ModuleOp> planned = compile(Stage::Planned);
  ASSERT_TRUE(planned);
  std::map<std::string, Tensor> actual = step(*planned, args, outputGrads, 1);
  subtractMainGrads(actual);
  bool chained = groupedLayers(layerFunction).size() > 1;
  for (auto &[name, tensor] : emulated) {
    ASSERT_TRUE(actual.count(name)) << name;
    ASSERT_EQ(actual[name].shape, tensor.shape) << name;
    if (chained) {
      EXPECT_LT(normRelativeError(actual[name], tensor), 5e-3) << name;
    } else {
      EXPECT_LT(relativeError(actual[name], tensor), 1e-9) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Specs, GroupedBlockPipeline,
                         ::testing::ValuesIn(kBlockCases),
                         [](const auto &info) { return info.param.name; });

} // namespace
