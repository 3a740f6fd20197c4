//===- TensorParallelTest.cpp - tensor-parallel layers in the interpreter -===//
//
// A layer with tp_size 2 runs as two ranks, each in its own thread with its
// own interpreter and its shard of the parameters (docs/tensor-parallel.md),
// summing through a barrier where the program all-reduces. Both ranks must
// return what the whole layer (tp_size 1) returns for the same parameters:
// its output, its input gradient, and their shard of every parameter
// gradient, up to float64 rounding. Checked at the layer level (the
// interpreter's layer ops) and after te-decompose and te-autodiff (the
// te.tp_copy / te.tp_all_reduce placement and their gradients), and, for
// the FP8-aligned cases, as two DelayedScaling training steps through the
// whole pipeline, where the amax reduction over the ranks must give every
// rank the whole layer's scales. Fresh random data every run.
//
//===----------------------------------------------------------------------===//
#include "Fp8TrainingStep.h"
#include "ThreadCollectives.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace tejit::testing;

namespace {

constexpr int kRanks = 2;

/// How one rank's tensor is cut from the whole layer's.
struct Shard {
  enum Kind {
    whole,
    rows,
    columns,
    gatedRows,
    qkvRows,
    groupRows
  } kind = whole;
  /// qkvRows: query and KV heads of the whole layer, and their width.
  int64_t heads = 0, groups = 0, headDim = 0;
};

/// Rows [begin, begin + count) of a tensor whose first dim has `rowsOf`
/// rows of `width` elements each.
void appendRows(const Tensor &whole, int64_t begin, int64_t count,
                int64_t width, std::vector<double> &out) {
  out.insert(out.end(), whole.data.begin() + begin * width,
             whole.data.begin() + (begin + count) * width);
}

Tensor cut(const Tensor &whole, const Shard &shard, int rank,
           ArrayRef<int64_t> localShape) {
  Tensor part(localShape, {});
  int64_t width = 1;
  for (int64_t dim : ArrayRef<int64_t>(whole.shape).drop_front())
    width *= dim;
  int64_t localRows = localShape.empty() ? 1 : localShape[0];
  switch (shard.kind) {
  case Shard::whole:
    return whole;
  case Shard::rows:
    appendRows(whole, rank * localRows, localRows, width, part.data);
    return part;
  case Shard::gatedRows: {
    // [activation rows; gate rows] (or cross-attention's [k; v]): this
    // rank's slice of each half.
    int64_t half = whole.shape[0] / 2, local = localRows / 2;
    appendRows(whole, rank * local, local, width, part.data);
    appendRows(whole, half + rank * local, local, width, part.data);
    return part;
  }
  case Shard::qkvRows: {
    int64_t d = shard.headDim, q = shard.heads / kRanks,
            kv = shard.groups / kRanks;
    appendRows(whole, rank * q * d, q * d, width, part.data);
    appendRows(whole, (shard.heads + rank * kv) * d, kv * d, width, part.data);
    appendRows(whole, (shard.heads + shard.groups + rank * kv) * d, kv * d,
               width, part.data);
    return part;
  }
  case Shard::groupRows: {
    // GroupedLinear's stacked [G, out, in] weights: this rank's rows of
    // every expert.
    int64_t rows = whole.shape[1], localRows1 = localShape[1],
            rowWidth = whole.shape[2];
    for (int64_t g = 0; g < whole.shape[0]; ++g)
      appendRows(whole, g * rows + rank * localRows1, localRows1, rowWidth,
                 part.data);
    return part;
  }
  case Shard::columns: {
    int64_t last = whole.shape.back(), localLast = localShape.back();
    for (int64_t row = 0; row < int64_t(whole.data.size()) / last; ++row)
      part.data.insert(
          part.data.end(), whole.data.begin() + row * last + rank * localLast,
          whole.data.begin() + row * last + (rank + 1) * localLast);
    return part;
  }
  }
  return part;
}

struct TpCase {
  const char *name;
  /// The spec, with `{tp}` where the tensor-parallel keys go.
  const char *spec;
  /// The keys for tp_size 2.
  const char *tpKeys;
  bool gated = false;
  /// Attention: the whole layer's query heads, KV groups and head dim.
  int64_t heads = 0, groups = 0, headDim = 0;
  /// The keys of a second layer, at `{tp2}`.
  const char *tpKeys2 = "";
  /// The spec's sizes, when not the test's default ones.
  const char *sizes = nullptr;

  /// Sequence parallelism: each rank holds a slice of the activations'
  /// dim 0, and its gradients of replicated parameters are partial sums.
  bool sequenceParallel() const {
    return llvm::StringRef(tpKeys).contains("sequence_parallel");
  }
};

void PrintTo(const TpCase &tpCase, std::ostream *os) { *os << tpCase.name; }

const TpCase kCases[] = {
    {"linear_column",
     "layers:\n  - {type: Linear, in_features: 24, out_features: 32{tp}}\n",
     ", tp_size: 2, parallel_mode: column"},
    {"linear_row",
     "layers:\n  - {type: Linear, in_features: 32, out_features: 24{tp}}\n",
     ", tp_size: 2, parallel_mode: row"},
    {"layernorm_linear",
     "layers:\n  - {type: LayerNormLinear, in_features: 24, out_features: 32,"
     " return_layernorm_output: true{tp}}\n",
     ", tp_size: 2, parallel_mode: column"},
    {"mlp_gelu",
     "layers:\n  - {type: LayerNormMLP, hidden_size: 24, ffn_hidden_size: "
     "40{tp}}\n",
     ", tp_size: 2"},
    {"mlp_swiglu_rmsnorm",
     "layers:\n  - {type: LayerNormMLP, hidden_size: 24, ffn_hidden_size: 40,"
     " activation: swiglu, normalization: RMSNorm{tp}}\n",
     ", tp_size: 2", /*gated=*/true},
    {"mlp_clamped_swiglu",
     "layers:\n  - {type: LayerNormMLP, hidden_size: 24, ffn_hidden_size: 40,"
     " activation: clamped_swiglu, activation_params: {limit: 0.5, "
     "glu_linear_offset: 0.0}{tp}}\n",
     ", tp_size: 2", /*gated=*/true},
    {"mha_gqa_rotary",
     "layers:\n  - {type: MultiheadAttention, hidden_size: 32, "
     "num_attention_heads: 4, num_gqa_groups: 2, input_layernorm: true, "
     "attention_dropout: 0.0, rotary_pos_emb: true{tp}}\n",
     ", tp_size: 2", false, 4, 2, 8},
    {"transformer_layer",
     "layers:\n  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: "
     "48, num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0, "
     "attention_dropout: 0.0{tp}}\n",
     ", tp_size: 2", false, 4, 2, 8},
    {"decoder_layer",
     "layers:\n  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: "
     "48, num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0, "
     "attention_dropout: 0.0, layer_type: decoder{tp}}\n",
     ", tp_size: 2", false, 4, 2, 8},
    {"packed_sequences",
     "input_format: thd\nlayers:\n  - {type: TransformerLayer, hidden_size: "
     "32, ffn_hidden_size: 48, num_attention_heads: 4, hidden_dropout: 0.0, "
     "attention_dropout: 0.0, self_attn_mask_type: padding_causal{tp}}\n",
     ", tp_size: 2", false, 4, 4, 8},
    // Sequence parallelism: gathers before the column-parallel GEMMs,
    // reduce-scatters after the row-parallel ones.
    {"linear_column_sp",
     "layers:\n  - {type: Linear, in_features: 24, out_features: 32{tp}}\n",
     ", tp_size: 2, parallel_mode: column, sequence_parallel: true"},
    {"linear_row_sp",
     "layers:\n  - {type: Linear, in_features: 32, out_features: 24{tp}}\n",
     ", tp_size: 2, parallel_mode: row, sequence_parallel: true"},
    {"column_then_row_sp",
     "layers:\n  - {type: LayerNormLinear, in_features: 24, out_features: 32,"
     " return_layernorm_output: true{tp}}\n  - {type: Linear, in_features: "
     "32, out_features: 24{tp2}}\n",
     ", tp_size: 2, parallel_mode: column, sequence_parallel: true", false, 0,
     0, 0, ", tp_size: 2, parallel_mode: row, sequence_parallel: true"},
    {"mlp_swiglu_rmsnorm_sp",
     "layers:\n  - {type: LayerNormMLP, hidden_size: 24, ffn_hidden_size: 40,"
     " activation: swiglu, normalization: RMSNorm, return_layernorm_output: "
     "true{tp}}\n",
     ", tp_size: 2, sequence_parallel: true", /*gated=*/true},
    {"mha_gqa_rotary_sp",
     "layers:\n  - {type: MultiheadAttention, hidden_size: 32, "
     "num_attention_heads: 4, num_gqa_groups: 2, input_layernorm: true, "
     "attention_dropout: 0.0, rotary_pos_emb: true{tp}}\n",
     ", tp_size: 2, sequence_parallel: true", false, 4, 2, 8},
    {"transformer_layer_sp",
     "layers:\n  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: "
     "48, num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0, "
     "attention_dropout: 0.0{tp}}\n",
     ", tp_size: 2, sequence_parallel: true", false, 4, 2, 8},
    {"transformer_layer_bshd_sp",
     "input_format: bshd\nlayers:\n  - {type: TransformerLayer, hidden_size: "
     "32, ffn_hidden_size: 48, num_attention_heads: 4, hidden_dropout: 0.0, "
     "attention_dropout: 0.0, self_attn_mask_type: padding{tp}}\n",
     ", tp_size: 2, sequence_parallel: true", false, 4, 4, 8},
    // GroupedLinear (docs/grouped-linear.md): every expert split as a
    // Linear, over random m_splits with an empty group and padding rows.
    {"grouped_linear_column",
     "layers:\n  - {type: GroupedLinear, num_gemms: 3, in_features: 24, "
     "out_features: 32{tp}}\n",
     ", tp_size: 2, parallel_mode: column"},
    {"grouped_linear_row",
     "layers:\n  - {type: GroupedLinear, num_gemms: 3, in_features: 32, "
     "out_features: 24, bias: false{tp}}\n",
     ", tp_size: 2, parallel_mode: row"},
    {"grouped_column_then_row",
     "layers:\n  - {type: GroupedLinear, num_gemms: 3, in_features: 24, "
     "out_features: 32{tp}}\n  - {type: GroupedLinear, num_gemms: 3, "
     "in_features: 32, out_features: 24, bias: false{tp2}}\n",
     ", tp_size: 2, parallel_mode: column", false, 0, 0, 0,
     ", tp_size: 2, parallel_mode: row"},
    {"decoder_layer_sp",
     "layers:\n  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: "
     "48, num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0, "
     "attention_dropout: 0.0, layer_type: decoder{tp}}\n",
     ", tp_size: 2, sequence_parallel: true", false, 4, 2, 8},
    // Transformer Engine's fusible ops as tejit.pytorch.ops chains them
    // (docs/fusible-ops.md): a per-token first layer, a column-parallel
    // Linear, its bias and activation on this rank's features, a
    // row-parallel Linear; with sequence parallelism the norm (first
    // layer) reads this rank's slice, and so do the extra input and output.
    {"ops_chain",
     "layers:\n  - {type: LayerNorm, hidden_size: 24}\n  - {type: Linear, "
     "in_features: 24, out_features: 32, bias: false{tp}}\n  - {type: "
     "Bias}\n  - {type: Activation, activation: gelu}\n  - {type: Linear, "
     "in_features: 32, out_features: 24{tp2}}\n",
     ", tp_size: 2, parallel_mode: column", false, 0, 0, 0,
     ", tp_size: 2, parallel_mode: row"},
    {"ops_chain_sp",
     "layers:\n  - {type: LayerNorm, hidden_size: 24}\n  - {type: Linear, "
     "in_features: 24, out_features: 32, bias: false{tp}}\n  - {type: "
     "Bias}\n  - {type: Activation, activation: gelu}\n  - {type: Linear, "
     "in_features: 32, out_features: 24{tp2}}\n",
     ", tp_size: 2, parallel_mode: column, sequence_parallel: true", false, 0,
     0, 0, ", tp_size: 2, parallel_mode: row, sequence_parallel: true"},
    {"ops_residual_sp",
     "layers:\n  - {type: RMSNorm, hidden_size: 24}\n  - {type: "
     "MakeExtraOutput}\n  - {type: Linear, in_features: 24, out_features: 32,"
     " bias: false{tp}}\n  - {type: Activation, activation: relu}\n  - "
     "{type: Linear, in_features: 32, out_features: 24, bias: false{tp2}}\n"
     "  - {type: Bias}\n  - {type: AddExtraInput}\n",
     ", tp_size: 2, parallel_mode: column, sequence_parallel: true", false, 0,
     0, 0, ", tp_size: 2, parallel_mode: row, sequence_parallel: true"},
};

/// FP8-aligned at tp_size 2: one rank's dims are multiples of 16.
const TpCase kFp8Cases[] = {
    {"linear_row_fp8",
     "layers:\n  - {type: Linear, in_features: 64, out_features: 32{tp}}\n",
     ", tp_size: 2, parallel_mode: row", false, 0, 0, 0},
    {"layernorm_linear_fp8",
     "layers:\n  - {type: LayerNormLinear, in_features: 32, out_features: 64,"
     " return_layernorm_output: true{tp}}\n",
     ", tp_size: 2, parallel_mode: column", false, 0, 0, 0},
    {"mlp_swiglu_fp8",
     "layers:\n  - {type: LayerNormMLP, hidden_size: 32, ffn_hidden_size: 64,"
     " activation: swiglu{tp}}\n",
     ", tp_size: 2", /*gated=*/true},
    {"transformer_layer_fp8",
     "layers:\n  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: "
     "64, num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0, "
     "attention_dropout: 0.0{tp}}\n",
     ", tp_size: 2", false, 4, 2, 8},
    // 64 tokens: splits multiples of 16 with an empty group and padding.
    {"grouped_linear_column_fp8",
     "layers:\n  - {type: GroupedLinear, num_gemms: 3, in_features: 32, "
     "out_features: 64{tp}}\n",
     ", tp_size: 2, parallel_mode: column", false, 0, 0, 0, "",
     "seq_length: 32\nbatch_size: 2\n"},
    {"grouped_linear_row_fp8",
     "layers:\n  - {type: GroupedLinear, num_gemms: 3, in_features: 64, "
     "out_features: 32, bias: false{tp}}\n",
     ", tp_size: 2, parallel_mode: row", false, 0, 0, 0, "",
     "seq_length: 32\nbatch_size: 2\n"},
    {"linear_row_fp8_sp",
     "layers:\n  - {type: Linear, in_features: 64, out_features: 32{tp}}\n",
     ", tp_size: 2, parallel_mode: row, sequence_parallel: true"},
    {"mlp_swiglu_fp8_sp",
     "layers:\n  - {type: LayerNormMLP, hidden_size: 32, ffn_hidden_size: 64,"
     " activation: swiglu{tp}}\n",
     ", tp_size: 2, sequence_parallel: true", /*gated=*/true},
    {"ops_chain_fp8_sp",
     "layers:\n  - {type: LayerNorm, hidden_size: 32}\n  - {type: Linear, "
     "in_features: 32, out_features: 64, bias: false{tp}}\n  - {type: "
     "Bias}\n  - {type: Activation, activation: gelu}\n  - {type: Linear, "
     "in_features: 64, out_features: 32{tp2}}\n",
     ", tp_size: 2, parallel_mode: column, sequence_parallel: true", false, 0,
     0, 0, ", tp_size: 2, parallel_mode: row, sequence_parallel: true"},
    // The extra output's gradient joins the column-parallel GEMM's input
    // gradient after the sum over the ranks, not inside it.
    {"ops_residual_fp8",
     "layers:\n  - {type: RMSNorm, hidden_size: 32}\n  - {type: "
     "MakeExtraOutput}\n  - {type: Linear, in_features: 32, out_features: 64,"
     " bias: false{tp}}\n  - {type: Activation, activation: relu}\n  - "
     "{type: Linear, in_features: 64, out_features: 32, bias: false{tp2}}\n"
     "  - {type: Bias}\n  - {type: AddExtraInput}\n",
     ", tp_size: 2, parallel_mode: column", false, 0, 0, 0,
     ", tp_size: 2, parallel_mode: row"},
    {"ops_residual_fp8_sp",
     "layers:\n  - {type: RMSNorm, hidden_size: 32}\n  - {type: "
     "MakeExtraOutput}\n  - {type: Linear, in_features: 32, out_features: 64,"
     " bias: false{tp}}\n  - {type: Activation, activation: relu}\n  - "
     "{type: Linear, in_features: 64, out_features: 32, bias: false{tp2}}\n"
     "  - {type: Bias}\n  - {type: AddExtraInput}\n",
     ", tp_size: 2, parallel_mode: column, sequence_parallel: true", false, 0,
     0, 0, ", tp_size: 2, parallel_mode: row, sequence_parallel: true"},
    {"transformer_layer_fp8_sp",
     "layers:\n  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: "
     "64, num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0, "
     "attention_dropout: 0.0{tp}}\n",
     ", tp_size: 2, sequence_parallel: true", false, 4, 2, 8},
};

std::vector<int64_t> shapeOf(Type type) {
  auto shape = cast<RankedTensorType>(type).getShape();
  return std::vector<int64_t>(shape.begin(), shape.end());
}

class TensorParallel : public ::testing::TestWithParam<TpCase> {
protected:
  TensorParallel()
      : handler(&context, [](Diagnostic &diag) {
          ADD_FAILURE() << diag.str();
          return success();
        }) {
    context.loadDialect<te::TEDialect, func::FuncDialect>();
  }

  OwningOpRef<ModuleOp> import(bool parallel, const std::string &extra = "") {
    // FP8 GEMMs need a token count divisible by 8; sequence parallelism
    // an even sequence (or batch, bshd) to cut in two.
    std::string spec =
        GetParam().sizes ? std::string(GetParam().sizes) + extra
        : !extra.empty() ? "seq_length: 8\nbatch_size: 2\n" + extra
        : GetParam().sequenceParallel() ? "seq_length: 6\nbatch_size: 2\n"
                                        : "seq_length: 5\nbatch_size: 2\n";
    spec += GetParam().spec;
    for (auto [key, keys] :
         {std::pair<std::string, const char *>("{tp}", GetParam().tpKeys),
          {"{tp2}", GetParam().tpKeys2}})
      if (size_t at = spec.find(key); at != std::string::npos)
        spec.replace(at, key.size(), parallel ? keys : "");
    return importSpecText(context, spec, GetParam().name);
  }

  /// How the argument or gradient named `name` (a "<layer>.<param>" name,
  /// or the input) is cut, given its whole and local shapes.
  Shard shardOf(StringRef name, ArrayRef<int64_t> whole,
                ArrayRef<int64_t> local) const {
    Shard shard;
    if (whole == local)
      return shard;
    if (whole.size() == 3 && whole[0] == local[0] && whole[1] != local[1]) {
      shard.kind = Shard::groupRows;
      return shard;
    }
    if (whole[0] != local[0]) {
      bool qkv = name.contains("qkv");
      shard.kind = qkv ? Shard::qkvRows
                   : (GetParam().gated && (name.ends_with("fc1_weight") ||
                                           name.ends_with("fc1_bias"))) ||
                           name.contains("key_value")
                       ? Shard::gatedRows
                       : Shard::rows;
      shard.heads = GetParam().heads;
      shard.groups = GetParam().groups;
      shard.headDim = GetParam().headDim;
      return shard;
    }
    shard.kind = Shard::columns;
    return shard;
  }

  /// Random arguments of `function`; GroupedLinear's `m_splits` cut the
  /// input's tokens at random, leaving an empty group and padding rows
  /// (splits multiples of 16 under `fp8`).
  std::vector<Tensor> layerArgs(func::FuncOp function, bool fp8) {
    std::vector<Tensor> args = randomLayerArgs(function, rng);
    for (size_t i = 0; i < args.size(); ++i) {
      if (argName(function, i) != "m_splits")
        continue;
      int64_t groups = args[i].shape[0], unit = fp8 ? 16 : 1;
      int64_t units =
          int64_t(args[0].data.size() / args[0].shape.back()) / unit;
      int64_t empty = int64_t(rng() % uint64_t(groups));
      std::vector<double> splits(groups, 0.0);
      for (int64_t u = 0; u + 1 < units; ++u) {
        int64_t g = int64_t(rng() % uint64_t(groups - 1));
        splits[g >= empty ? g + 1 : g] += double(unit);
      }
      args[i] = Tensor({groups}, splits);
    }
    return args;
  }

  /// This rank's shard of each of the whole function's arguments `args`.
  std::vector<Tensor> localArgs(func::FuncOp wholeFn, func::FuncOp splitFn,
                                ArrayRef<Tensor> args, int rank) const {
    std::vector<Tensor> local;
    for (auto [index, type] : llvm::enumerate(splitFn.getArgumentTypes())) {
      std::vector<int64_t> localShape = shapeOf(type);
      local.push_back(
          cut(args[index],
              shardOf(argName(splitFn, index),
                      shapeOf(wholeFn.getArgumentTypes()[index]), localShape),
              rank, localShape));
    }
    return local;
  }

  /// Compiles the layer whole and split (with `extra` spec keys) to
  /// `options.stopAfter`, runs `steps` training steps of the whole layer
  /// and of every rank (the FP8 state kept between them), and checks that
  /// each rank's outputs, gradients and FP8 state are its shards of the
  /// whole layer's, within `tolerance`.
  void checkTrainingSteps(const std::string &extra,
                          const tejit::PipelineOptions &options, int steps,
                          double tolerance) {
    OwningOpRef<ModuleOp> whole = import(false, extra),
                          split = import(true, extra);
    ASSERT_TRUE(whole && split);
    ASSERT_TRUE(runPipeline(*whole, options));
    ASSERT_TRUE(runPipeline(*split, options));
    func::FuncOp wholeFn = firstFunction(*whole),
                 splitFn = firstFunction(*split);
    func::FuncOp wholeBwd = backwardOf(*whole, wholeFn),
                 splitBwd = backwardOf(*split, splitFn);
    ASSERT_TRUE(wholeBwd && splitBwd);

    std::vector<Tensor> args = layerArgs(wholeFn, /*fp8=*/!extra.empty());
    std::vector<Tensor> outputGrads = randomOutputGrads(wholeBwd, rng);
    TrainingStep wholeStep(wholeFn, wholeBwd);
    std::map<std::string, Tensor> expected;
    for (int step = 0; step < steps; ++step)
      expected = wholeStep.run(args, outputGrads);

    // The shard of each gradient is its argument's; outputs and the FP8
    // state (no te.grad_of) are cut by their shapes.
    std::map<std::string, Shard> shardOfResult;
    for (unsigned r = 0; r < splitBwd.getNumResults(); ++r) {
      auto gradOf = splitBwd.getResultAttrOfType<IntegerAttr>(r, "te.grad_of");
      if (!gradOf)
        continue;
      int64_t arg = gradOf.getInt();
      auto name = splitBwd.getResultAttrOfType<StringAttr>(r, "te.name");
      shardOfResult[name.str()] = shardOf(
          argName(splitFn, arg), shapeOf(wholeFn.getArgumentTypes()[arg]),
          shapeOf(splitFn.getArgumentTypes()[arg]));
    }
    onRanks([&](int rank, tejit::interp::Collectives &collectives) {
      // Whole outputs have whole gradients on every rank; a column-parallel
      // output's gradient is this rank's slice.
      std::vector<Tensor> localGrads;
      for (const Tensor &grad : outputGrads) {
        std::vector<int64_t> localShape =
            shapeOf(splitFn.getResultTypes()[localGrads.size()]);
        localGrads.push_back(
            cut(grad, shardOf("", grad.shape, localShape), rank, localShape));
      }
      TrainingStep step(splitFn, splitBwd, &collectives, rank);
      std::vector<Tensor> local = localArgs(wholeFn, splitFn, args, rank);
      std::map<std::string, Tensor> actual;
      for (int i = 0; i < steps; ++i)
        actual = step.run(local, localGrads);
      ASSERT_EQ(actual.size(), expected.size());
      for (const auto &[name, tensor] : actual) {
        auto found = shardOfResult.find(name);
        Shard shard = found != shardOfResult.end()
                          ? found->second
                          : shardOf("", expected[name].shape, tensor.shape);
        // Sequence parallelism: a replicated parameter's gradient on a rank
        // is the part from its slice of the tokens; the ranks' parts add up
        // to the whole layer's (Megatron-LM all-reduces them).
        bool partial = GetParam().sequenceParallel() &&
                       found != shardOfResult.end() &&
                       shard.kind == Shard::whole;
        Tensor got = partial ? collectives.sum(tensor) : tensor;
        EXPECT_LT(
            relativeError(got, cut(expected[name], shard, rank, got.shape)),
            tolerance)
            << "rank " << rank << ", " << name;
      }
    });
  }

  /// Runs `run(rank, collectives)` on every rank in its own thread.
  template <typename Fn> void onRanks(Fn run) {
    tejit::testing::onRanks(kRanks, run);
  }

  MLIRContext context;
  ScopedDiagnosticHandler handler;
  std::mt19937_64 rng{std::random_device{}()};
};

TEST_P(TensorParallel, LayerOpsOfTheRanksGiveTheWholeLayer) {
  OwningOpRef<ModuleOp> whole = import(false), split = import(true);
  ASSERT_TRUE(whole && split);
  func::FuncOp wholeFn = firstFunction(*whole), splitFn = firstFunction(*split);
  std::vector<Tensor> args = layerArgs(wholeFn, /*fp8=*/false);
  std::vector<Tensor> expected = interpret(wholeFn, args, nullptr);
  onRanks([&](int rank, tejit::interp::Collectives &collectives) {
    std::vector<Tensor> actual = interpret(
        splitFn, localArgs(wholeFn, splitFn, args, rank), &collectives, rank);
    ASSERT_EQ(actual.size(), expected.size());
    // A column-parallel output is this rank's slice of the features.
    for (size_t i = 0; i < actual.size(); ++i)
      EXPECT_LT(relativeError(actual[i], cut(expected[i],
                                             shardOf("", expected[i].shape,
                                                     actual[i].shape),
                                             rank, actual[i].shape)),
                1e-10)
          << "rank " << rank << " result " << i;
  });
}

/// Every gradient after te-autodiff: one training step of the ranks against
/// the whole layer's (no FP8 recipe).
TEST_P(TensorParallel, GradientsOfTheRanksAreShardsOfTheWholeLayers) {
  tejit::PipelineOptions options;
  options.stopAfter = tejit::Stage::Autodiff;
  checkTrainingSteps("", options, /*steps=*/1, 1e-10);
}

/// FP8 under DelayedScaling: two training steps of the whole pipeline (the
/// second with the scales the first's update made from amaxes reduced over
/// the ranks). The ranks' shards of the whole layer's tensors get the same
/// scales, so their FP8 casts agree exactly and the results agree up to
/// float64 rounding; without the amax reduction the second step's would
/// not.
class TensorParallelFp8 : public TensorParallel {};

TEST_P(TensorParallelFp8, StepsOfTheRanksGiveTheWholeLayers) {
  checkTrainingSteps("recipe: {type: DelayedScaling, fp8_format: HYBRID, "
                     "amax_history_len: 4}\n",
                     {}, /*steps=*/2, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Layers, TensorParallel, ::testing::ValuesIn(kCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(Layers, TensorParallelFp8,
                         ::testing::ValuesIn(kFp8Cases), [](const auto &info) {
                           return std::string(info.param.name);
                         });

} // namespace
