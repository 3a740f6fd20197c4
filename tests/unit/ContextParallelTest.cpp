//===- ContextParallelTest.cpp - context-parallel layers in the interpreter
//===//
//
// An attention layer with cp_size 2 (or 4) runs as two (four) ranks, each in
// its own thread with its own interpreter and its own program (cp_rank is
// baked in), holding its tokens of every sequence in the load-balanced order
// (docs/context-parallel.md: rank r holds chunks r and 2 cp - 1 - r of
// 2 cp). Each
// rank must return its chunks of what the whole layer (cp_size 1, the whole
// sequence) returns for the same parameters: its output and its input
// gradients, while the ranks' parameter gradients add up to the whole
// layer's, up to float64 rounding. Checked at the layer level (the
// interpreter's layer ops), after te-decompose and te-autodiff (the
// te.cp_all_gather placement, the local rotary angles, te.attention's cp
// attributes and the gradients), and as two FP8 DelayedScaling training
// steps through the whole pipeline. The same with cp_comm_type a2a (q, k,
// v and the attention's output through te.cp_all_to_all: each rank attends
// over the whole sequence of half the heads), which must also give what
// all_gather gives, and which also runs a sliding window (the sequence in
// order for no_mask too) and FP8 attention (fp8_dpa, whose amaxes the
// DelayedScaling reduction gathers over the ranks). At cp_size 4 (which the
// two GPUs cannot check) MultiheadAttention and TransformerLayer run with
// both comm types, both masks and both layouts, forward and one training
// step. cp_comm_type p2p imports as a2a where cp_size divides the heads and
// KV groups, else as all_gather. Fresh random data every run.
//
//===----------------------------------------------------------------------===//
#include "Fp8TrainingStep.h"
#include "ThreadCollectives.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace tejit::testing;

namespace {

struct CpCase {
  const char *name;
  /// The spec's layers, with `{cp}` where the context-parallel keys go
  /// (cp_comm_type `commType`), or `{cp_all_gather}` for a layer that keeps
  /// all_gather whatever the case's.
  const char *layers;
  bool bshd = false;
  const char *commType = "all_gather";
  /// cp_size: the number of ranks.
  int ranks = 2;
};

void PrintTo(const CpCase &cpCase, std::ostream *os) { *os << cpCase.name; }

const CpCase kCases[] = {
    {"dpa_causal",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 8,"
     " num_gqa_groups: 2, attn_mask_type: causal{cp}}\n"},
    {"dpa_no_mask_bshd",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 8,"
     " attn_mask_type: no_mask{cp}}\n",
     true},
    {"mha_gqa_rotary_causal",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, input_layernorm: true, attention_dropout: 0.0,"
     " rotary_pos_emb: true{cp}}\n"},
    {"mha_gqa_rotary_no_mask_bshd",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, attention_dropout: 0.0, rotary_pos_emb: true,"
     " attn_mask_type: no_mask{cp}}\n",
     true},
    {"transformer_layer_causal",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n"},
    {"transformer_layer_causal_bshd",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, hidden_dropout: 0.0, attention_dropout: "
     "0.0{cp}}\n",
     true},
    {"transformer_layer_no_mask",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 1, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, self_attn_mask_type: no_mask{cp}}\n"},
    // Two context-parallel layers in a row: the second reads the first's
    // local tokens.
    {"two_transformer_layers",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n"
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, hidden_dropout: 0.0, attention_dropout: 0.0,"
     " self_attn_mask_type: no_mask{cp}}\n"},
};

/// cp_comm_type a2a: 4 query heads and 2 KV groups (or none: 4 KV heads),
/// 2 and 1 (2) a rank.
const CpCase kA2aCases[] = {
    {"dpa_causal",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 8,"
     " num_gqa_groups: 2, attn_mask_type: causal{cp}}\n",
     false, "a2a"},
    {"dpa_no_mask_bshd",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 8,"
     " attn_mask_type: no_mask{cp}}\n",
     true, "a2a"},
    {"dpa_causal_bshd",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 8,"
     " num_gqa_groups: 2, attn_mask_type: causal{cp}}\n",
     true, "a2a"},
    {"mha_gqa_rotary_causal",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, input_layernorm: true, attention_dropout: 0.0,"
     " rotary_pos_emb: true{cp}}\n",
     false, "a2a"},
    {"mha_gqa_rotary_causal_bshd",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n",
     true, "a2a"},
    {"mha_gqa_rotary_no_mask",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, attention_dropout: 0.0, rotary_pos_emb: true,"
     " attn_mask_type: no_mask{cp}}\n",
     false, "a2a"},
    {"mha_gqa_rotary_no_mask_bshd",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, attention_dropout: 0.0, rotary_pos_emb: true,"
     " attn_mask_type: no_mask{cp}}\n",
     true, "a2a"},
    {"transformer_layer_causal",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n",
     false, "a2a"},
    {"transformer_layer_causal_bshd",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, hidden_dropout: 0.0, attention_dropout: "
     "0.0{cp}}\n",
     true, "a2a"},
    {"transformer_layer_no_mask",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, self_attn_mask_type: no_mask{cp}}\n",
     false, "a2a"},
    {"transformer_layer_no_mask_bshd",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true,"
     " self_attn_mask_type: no_mask{cp}}\n",
     true, "a2a"},
    // An a2a layer, then an all_gather one: both hold the same local
    // tokens between layers.
    {"a2a_then_all_gather_layers",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n"
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, hidden_dropout: 0.0, attention_dropout: 0.0,"
     " self_attn_mask_type: no_mask{cp_all_gather}}\n",
     false, "a2a"},
};

/// cp_comm_type a2a with a sliding window (all_gather refuses it): the
/// all-to-all must hand each rank the whole sequence in order, for no_mask
/// too. 8 tokens: windows narrower than the sequence.
const CpCase kA2aWindowCases[] = {
    {"dpa_causal_window",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 8,"
     " num_gqa_groups: 2, attn_mask_type: causal, window_size: [3, 0]{cp}}\n",
     false, "a2a"},
    {"dpa_no_mask_window_bshd",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 8,"
     " attn_mask_type: no_mask, window_size: [2, 2]{cp}}\n",
     true, "a2a"},
    {"mha_gqa_rotary_causal_window_bshd",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, attention_dropout: 0.0, rotary_pos_emb: true,"
     " window_size: [2, 0]{cp}}\n",
     true, "a2a"},
    {"mha_gqa_rotary_no_mask_window",
     "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 4,"
     " num_gqa_groups: 2, attention_dropout: 0.0, rotary_pos_emb: true,"
     " attn_mask_type: no_mask, window_size: [1, 3]{cp}}\n",
     false, "a2a"},
    {"transformer_layer_causal_window",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true, window_size: [3, 0]{cp}}"
     "\n",
     false, "a2a"},
    {"transformer_layer_no_mask_window_bshd",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"
     " num_attention_heads: 4, hidden_dropout: 0.0, attention_dropout: 0.0,"
     " self_attn_mask_type: no_mask, window_size: [2, 2]{cp}}\n",
     true, "a2a"},
};

/// cp_comm_type a2a with FP8 attention (fp8_dpa; all_gather refuses it):
/// head dim 16, no attention dropout.
const CpCase kA2aFp8AttentionCases[] = {
    {"dpa_a2a_fp8_dpa_causal_bshd",
     "  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 16,"
     " num_gqa_groups: 2, attn_mask_type: causal{cp}}\n",
     true, "a2a"},
    {"mha_a2a_fp8_dpa_causal",
     "  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,"
     " num_gqa_groups: 2, input_layernorm: true, attention_dropout: 0.0,"
     " rotary_pos_emb: true{cp}}\n",
     false, "a2a"},
    {"mha_a2a_fp8_dpa_no_mask_bshd",
     "  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,"
     " attention_dropout: 0.0, attn_mask_type: no_mask{cp}}\n",
     true, "a2a"},
    {"transformer_layer_a2a_fp8_dpa_causal",
     "  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 64,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n",
     false, "a2a"},
    {"transformer_layer_a2a_fp8_dpa_no_mask_bshd",
     "  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 64,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, self_attn_mask_type: no_mask{cp}}\n",
     true, "a2a"},
};

/// cp_size 4: MultiheadAttention and TransformerLayer (rotary, 8 query
/// heads of width 4 in 4 GQA groups: 2 and 1 a rank with a2a), causal and
/// no_mask, sbhd and bshd, all_gather and a2a. 16 tokens: chunks of 2.
#define CP4_MHA(mask)                                                          \
  "  - {type: MultiheadAttention, hidden_size: 32, num_attention_heads: 8,"    \
  " num_gqa_groups: 4, input_layernorm: true, attention_dropout: 0.0,"         \
  " rotary_pos_emb: true, attn_mask_type: " mask "{cp}}\n"
#define CP4_LAYER(mask)                                                        \
  "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 48,"         \
  " num_attention_heads: 8, num_gqa_groups: 4, hidden_dropout: 0.0,"           \
  " attention_dropout: 0.0, rotary_pos_emb: true, self_attn_mask_type: " mask  \
  "{cp}}\n"
const CpCase kCp4Cases[] = {
    {"mha_gqa_rotary_causal", CP4_MHA("causal"), false, "all_gather", 4},
    {"mha_gqa_rotary_causal_bshd", CP4_MHA("causal"), true, "all_gather", 4},
    {"mha_gqa_rotary_no_mask", CP4_MHA("no_mask"), false, "all_gather", 4},
    {"mha_gqa_rotary_no_mask_bshd", CP4_MHA("no_mask"), true, "all_gather", 4},
    {"transformer_layer_causal", CP4_LAYER("causal"), false, "all_gather", 4},
    {"transformer_layer_causal_bshd", CP4_LAYER("causal"), true, "all_gather",
     4},
    {"transformer_layer_no_mask", CP4_LAYER("no_mask"), false, "all_gather", 4},
    {"transformer_layer_no_mask_bshd", CP4_LAYER("no_mask"), true, "all_gather",
     4},
};
const CpCase kCp4A2aCases[] = {
    {"mha_gqa_rotary_causal", CP4_MHA("causal"), false, "a2a", 4},
    {"mha_gqa_rotary_causal_bshd", CP4_MHA("causal"), true, "a2a", 4},
    {"mha_gqa_rotary_no_mask", CP4_MHA("no_mask"), false, "a2a", 4},
    {"mha_gqa_rotary_no_mask_bshd", CP4_MHA("no_mask"), true, "a2a", 4},
    {"transformer_layer_causal", CP4_LAYER("causal"), false, "a2a", 4},
    {"transformer_layer_causal_bshd", CP4_LAYER("causal"), true, "a2a", 4},
    {"transformer_layer_no_mask", CP4_LAYER("no_mask"), false, "a2a", 4},
    {"transformer_layer_no_mask_bshd", CP4_LAYER("no_mask"), true, "a2a", 4},
};
#undef CP4_MHA
#undef CP4_LAYER

/// FP8-aligned (16 tokens a rank, dims multiples of 16).
const CpCase kFp8Cases[] = {
    {"transformer_layer_fp8",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 64,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n"},
    {"transformer_layer_a2a_fp8",
     "  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 64,"
     " num_attention_heads: 4, num_gqa_groups: 2, hidden_dropout: 0.0,"
     " attention_dropout: 0.0, rotary_pos_emb: true{cp}}\n",
     false, "a2a"},
};

/// Rank `rank` of `ranks`'s tokens of `whole` along `seqDim`: chunks rank
/// and 2 ranks - 1 - rank of 2 ranks, written here from the contract rather
/// than taken from the interpreter.
Tensor chunksOfRank(const Tensor &whole, int64_t seqDim, int ranks, int rank) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < seqDim; ++d)
    outer *= whole.shape[d];
  for (size_t d = seqDim + 1; d < whole.shape.size(); ++d)
    inner *= whole.shape[d];
  int64_t seq = whole.shape[seqDim], chunk = seq / (2 * ranks);
  Tensor part(whole.shape, {});
  part.shape[seqDim] = 2 * chunk;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t which : {int64_t(rank), int64_t(2 * ranks - 1 - rank)})
      for (int64_t s = which * chunk; s < (which + 1) * chunk; ++s) {
        auto begin = whole.data.begin() + (o * seq + s) * inner;
        part.data.insert(part.data.end(), begin, begin + inner);
      }
  return part;
}

ArrayRef<int64_t> shapeOf(Type type) {
  return cast<RankedTensorType>(type).getShape();
}

class ContextParallel : public ::testing::TestWithParam<CpCase> {
protected:
  ContextParallel()
      : handler(&context, [](Diagnostic &diag) {
          ADD_FAILURE() << diag.str();
          return success();
        }) {
    context.loadDialect<te::TEDialect, func::FuncDialect>();
  }

  /// The layer on the whole sequence (rank < 0) or rank `rank`'s part,
  /// with cp_comm_type `commType` (default: the case's). `seqLength` 0:
  /// two tokens a chunk (8 at cp_size 2, 16 at cp_size 4).
  OwningOpRef<ModuleOp> import(int rank, const std::string &extra = "",
                               int seqLength = 0,
                               const char *commType = nullptr) {
    if (seqLength == 0)
      seqLength = 4 * ranks();
    std::string spec = "seq_length: " + std::to_string(seqLength) +
                       "\nbatch_size: 2\n" + extra;
    if (GetParam().bshd)
      spec += "input_format: bshd\n";
    spec += "layers:\n" + std::string(GetParam().layers);
    auto keys = [&](StringRef comm) {
      return rank < 0 ? std::string()
                      : ", cp_size: " + std::to_string(ranks()) +
                            ", cp_rank: " + std::to_string(rank) +
                            ", cp_comm_type: " + comm.str();
    };
    for (auto [marker, comm] :
         {std::pair<StringRef, StringRef>{
              "{cp}", commType ? commType : GetParam().commType},
          {"{cp_all_gather}", "all_gather"}})
      for (size_t at; (at = spec.find(marker)) != std::string::npos;)
        spec.replace(at, marker.size(), keys(comm));
    return importSpecText(context, spec, GetParam().name);
  }

  int64_t seqDim() const { return GetParam().bshd ? 1 : 0; }
  int ranks() const { return GetParam().ranks; }

  /// Each rank's program of the layer (see import).
  std::vector<OwningOpRef<ModuleOp>>
  importRanks(const std::string &extra = "", int seqLength = 0,
              const char *commType = nullptr) {
    std::vector<OwningOpRef<ModuleOp>> modules;
    for (int rank = 0; rank < ranks(); ++rank)
      modules.push_back(import(rank, extra, seqLength, commType));
    return modules;
  }

  /// `whole` as the rank's program with `localShape` takes or returns it:
  /// its tokens when the shapes differ (an activation), else all of it (a
  /// parameter, the rotary table).
  Tensor localOf(const Tensor &whole, ArrayRef<int64_t> localShape,
                 int rank) const {
    if (ArrayRef<int64_t>(whole.shape) == localShape)
      return whole;
    Tensor part = chunksOfRank(whole, seqDim(), ranks(), rank);
    EXPECT_EQ(ArrayRef<int64_t>(part.shape), localShape);
    return part;
  }

  /// Compiles the whole layer and each rank's to `options.stopAfter`, runs
  /// `steps` training steps of each (FP8 state kept), and checks each
  /// rank's outputs and input gradients against its tokens of the whole
  /// layer's, and the ranks' summed parameter gradients against the whole
  /// layer's, within `tolerance`.
  void checkTrainingSteps(const std::string &extra,
                          const tejit::PipelineOptions &options, int steps,
                          double tolerance, int seqLength = 0) {
    OwningOpRef<ModuleOp> whole = import(-1, extra, seqLength);
    std::vector<OwningOpRef<ModuleOp>> programs = importRanks(extra, seqLength);
    ASSERT_TRUE(whole && runPipeline(*whole, options));
    for (OwningOpRef<ModuleOp> &program : programs)
      ASSERT_TRUE(program && runPipeline(*program, options));
    func::FuncOp wholeFn = firstFunction(*whole);
    func::FuncOp wholeBwd = backwardOf(*whole, wholeFn);
    ASSERT_TRUE(wholeBwd);

    std::vector<Tensor> args = randomLayerArgs(wholeFn, rng);
    std::vector<Tensor> outputGrads = randomOutputGrads(wholeBwd, rng);
    TrainingStep wholeStep(wholeFn, wholeBwd);
    std::map<std::string, Tensor> expected;
    for (int step = 0; step < steps; ++step)
      expected = wholeStep.run(args, outputGrads);
    ASSERT_FALSE(expected.empty());

    onRanks(ranks(), [&](int rank, tejit::interp::Collectives &collectives) {
      func::FuncOp fn = firstFunction(*programs[rank]);
      func::FuncOp bwd = backwardOf(*programs[rank], fn);
      ASSERT_TRUE(bwd);
      std::vector<Tensor> local, localGrads;
      for (auto [index, type] : llvm::enumerate(fn.getArgumentTypes()))
        local.push_back(localOf(args[index], shapeOf(type), rank));
      for (const Tensor &grad : outputGrads)
        localGrads.push_back(localOf(
            grad, shapeOf(fn.getResultTypes()[localGrads.size()]), rank));
      // Gradients of parameters (whole on every rank) are partial sums.
      std::map<std::string, bool> partial;
      for (unsigned r = 0; r < bwd.getNumResults(); ++r)
        if (auto gradOf = bwd.getResultAttrOfType<IntegerAttr>(r, "te.grad_of"))
          partial[bwd.getResultAttrOfType<StringAttr>(r, "te.name").str()] =
              shapeOf(fn.getArgumentTypes()[gradOf.getInt()]) ==
              shapeOf(wholeFn.getArgumentTypes()[gradOf.getInt()]);
      TrainingStep step(fn, bwd, &collectives, rank);
      std::map<std::string, Tensor> actual;
      for (int i = 0; i < steps; ++i)
        actual = step.run(local, localGrads);
      ASSERT_EQ(actual.size(), expected.size());
      // Every rank visits the names in the same (sorted) order, so their
      // sums pair up.
      for (const auto &[name, tensor] : actual) {
        bool sum = partial.count(name) && partial[name];
        Tensor got = sum ? collectives.sum(tensor) : tensor;
        Tensor want =
            sum ? expected[name] : localOf(expected[name], got.shape, rank);
        EXPECT_LT(relativeError(got, want), tolerance)
            << "rank " << rank << ", " << name;
      }
    });
  }

  MLIRContext context;
  ScopedDiagnosticHandler handler;
  std::mt19937_64 rng{std::random_device{}()};
};

TEST_P(ContextParallel, LayerOpsOfTheRanksGiveTheWholeLayer) {
  OwningOpRef<ModuleOp> whole = import(-1);
  std::vector<OwningOpRef<ModuleOp>> programs = importRanks();
  ASSERT_TRUE(whole);
  for (OwningOpRef<ModuleOp> &program : programs)
    ASSERT_TRUE(program);
  func::FuncOp wholeFn = firstFunction(*whole);
  std::vector<Tensor> args = randomLayerArgs(wholeFn, rng);
  std::vector<Tensor> expected = interpret(wholeFn, args, nullptr);
  onRanks(ranks(), [&](int rank, tejit::interp::Collectives &collectives) {
    func::FuncOp fn = firstFunction(*programs[rank]);
    std::vector<Tensor> local;
    for (auto [index, type] : llvm::enumerate(fn.getArgumentTypes()))
      local.push_back(localOf(args[index], shapeOf(type), rank));
    std::vector<Tensor> actual = interpret(fn, local, &collectives, rank);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i)
      EXPECT_LT(
          relativeError(actual[i], localOf(expected[i], actual[i].shape, rank)),
          1e-10)
          << "rank " << rank << " result " << i;
  });
}

/// Every gradient after te-decompose and te-autodiff: one training step of
/// the ranks against the whole layer's (no FP8 recipe).
TEST_P(ContextParallel, GradientsOfTheRanksAreChunksOfTheWholeLayers) {
  tejit::PipelineOptions options;
  options.stopAfter = tejit::Stage::Autodiff;
  checkTrainingSteps("", options, /*steps=*/1, 1e-10);
}

/// FP8 under DelayedScaling: two training steps of the whole pipeline. The
/// amax reduction over the ranks gives both the whole layer's scales for
/// the second step, so the FP8 casts of their tokens agree exactly.
class ContextParallelFp8 : public ContextParallel {};

TEST_P(ContextParallelFp8, StepsOfTheRanksGiveTheWholeLayers) {
  checkTrainingSteps("recipe: {type: DelayedScaling, fp8_format: HYBRID, "
                     "amax_history_len: 4}\n",
                     {}, /*steps=*/2, 1e-9, /*seqLength=*/16);
}

/// FP8 attention (fp8_dpa) with a2a: two DelayedScaling training steps of
/// the whole pipeline. Each rank's attention amaxes cover its heads of the
/// whole sequence; reduced over the ranks they are the whole layer's, so
/// the second step's scales (q, k, v, s, o, dO, dP, ...) and casts agree.
class ContextParallelFp8Attention : public ContextParallel {};

TEST_P(ContextParallelFp8Attention, StepsOfTheRanksGiveTheWholeLayers) {
  const std::string recipe = "recipe: {type: DelayedScaling, fp8_format: "
                             "HYBRID, amax_history_len: 4, fp8_dpa: true}\n";
  // The rank's attention runs in FP8 between the all-to-alls, both ways.
  OwningOpRef<ModuleOp> rank = import(1, recipe, /*seqLength=*/16);
  ASSERT_TRUE(rank && runPipeline(*rank, {}));
  int fp8Attentions = 0, allToAlls = 0;
  rank->walk([&](Operation *op) {
    fp8Attentions += isa<te::Fp8AttentionOp, te::Fp8AttentionBwdOp>(op);
    allToAlls += isa<te::CpAllToAllOp>(op);
  });
  EXPECT_EQ(fp8Attentions, 2);
  EXPECT_EQ(allToAlls, 8);
  checkTrainingSteps(recipe, {}, /*steps=*/2, 1e-9, /*seqLength=*/16);
}

/// cp_comm_type a2a against all_gather: each rank's two programs on the
/// same local inputs, the layer ops' forward and one training step after
/// te-decompose and te-autodiff (every result, parameter gradients
/// unsummed).
class ContextParallelA2a : public ContextParallel {};

TEST_P(ContextParallelA2a, GivesWhatAllGatherGives) {
  tejit::PipelineOptions options;
  options.stopAfter = tejit::Stage::Autodiff;
  // The whole layer's inputs and output gradients, of which each rank
  // takes its tokens.
  OwningOpRef<ModuleOp> whole = import(-1);
  ASSERT_TRUE(whole && runPipeline(*whole, options));
  func::FuncOp wholeFn = firstFunction(*whole);
  func::FuncOp wholeBwd = backwardOf(*whole, wholeFn);
  ASSERT_TRUE(wholeBwd);
  std::vector<Tensor> args = randomLayerArgs(wholeFn, rng);
  std::vector<Tensor> outputGrads = randomOutputGrads(wholeBwd, rng);
  // [comm type][rank]: the layer ops, and their training step.
  constexpr const char *kCommTypes[] = {"a2a", "all_gather"};
  std::vector<OwningOpRef<ModuleOp>> layers[2], steps[2];
  for (int comm = 0; comm < 2; ++comm) {
    layers[comm] = importRanks("", 0, kCommTypes[comm]);
    steps[comm] = importRanks("", 0, kCommTypes[comm]);
    for (int rank = 0; rank < ranks(); ++rank) {
      ASSERT_TRUE(layers[comm][rank] && steps[comm][rank]);
      ASSERT_TRUE(runPipeline(*steps[comm][rank], options));
    }
  }
  onRanks(ranks(), [&](int rank, tejit::interp::Collectives &collectives) {
    std::vector<Tensor> results[2];
    std::map<std::string, Tensor> trained[2];
    for (int comm = 0; comm < 2; ++comm) {
      func::FuncOp fn = firstFunction(*layers[comm][rank]);
      std::vector<Tensor> local;
      for (auto [index, type] : llvm::enumerate(fn.getArgumentTypes()))
        local.push_back(localOf(args[index], shapeOf(type), rank));
      results[comm] = interpret(fn, local, &collectives, rank);

      func::FuncOp forward = firstFunction(*steps[comm][rank]);
      func::FuncOp backward = backwardOf(*steps[comm][rank], forward);
      ASSERT_TRUE(backward);
      std::vector<Tensor> localGrads;
      for (const Tensor &grad : outputGrads)
        localGrads.push_back(localOf(
            grad, shapeOf(forward.getResultTypes()[localGrads.size()]), rank));
      TrainingStep step(forward, backward, &collectives, rank);
      trained[comm] = step.run(local, localGrads);
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i)
      EXPECT_LT(relativeError(results[0][i], results[1][i]), 1e-10)
          << "rank " << rank << ", layer op result " << i;
    ASSERT_FALSE(trained[0].empty());
    ASSERT_EQ(trained[0].size(), trained[1].size());
    for (const auto &[name, tensor] : trained[0])
      EXPECT_LT(relativeError(tensor, trained[1][name]), 1e-10)
          << "rank " << rank << ", " << name;
  });
}

/// cp_comm_type p2p (TE's default): the importer runs it as a2a where
/// cp_size divides every layer's query heads and KV groups, else as
/// all_gather; each rank's program is the one of that comm type.
class ContextParallelP2p : public ContextParallel {};

TEST_P(ContextParallelP2p, ImportsAsA2aWhereHeadsDivide) {
  auto text = [](ModuleOp module) {
    std::string out;
    llvm::raw_string_ostream os(out);
    module.print(os);
    return out;
  };
  for (int rank = 0; rank < ranks(); ++rank) {
    OwningOpRef<ModuleOp> p2p = import(rank, "", 0, "p2p");
    ASSERT_TRUE(p2p);
    int layers = 0, divided = 0;
    p2p->walk([&](Operation *op) {
      if (!op->hasAttr("cp_size"))
        return;
      // DotProductAttention's heads are its query's and key's dim 2.
      int64_t heads, kvHeads;
      if (isa<te::DotProductAttentionOp>(op)) {
        heads = cast<ShapedType>(op->getOperand(0).getType()).getDimSize(2);
        kvHeads = cast<ShapedType>(op->getOperand(1).getType()).getDimSize(2);
      } else {
        heads = op->getAttrOfType<IntegerAttr>("num_attention_heads").getInt();
        auto groups = op->getAttrOfType<IntegerAttr>("num_gqa_groups");
        kvHeads = groups ? groups.getInt() : heads;
      }
      bool divides = heads % ranks() == 0 && kvHeads % ranks() == 0;
      auto comm = op->getAttrOfType<StringAttr>("cp_comm_type");
      EXPECT_EQ(comm ? comm.getValue() : StringRef("all_gather"),
                divides ? "a2a" : "all_gather")
          << "rank " << rank << ", layer " << layers;
      ++layers;
      divided += divides;
    });
    ASSERT_GT(layers, 0);
    // The cases' layers agree, so the program is the one of either type.
    ASSERT_TRUE(divided == 0 || divided == layers);
    OwningOpRef<ModuleOp> resolved =
        import(rank, "", 0, divided ? "a2a" : "all_gather");
    ASSERT_TRUE(resolved);
    EXPECT_EQ(text(*p2p), text(*resolved)) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, ContextParallel, ::testing::ValuesIn(kCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(A2a, ContextParallel, ::testing::ValuesIn(kA2aCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(A2a, ContextParallelA2a,
                         ::testing::ValuesIn(kA2aCases), [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(A2aWindow, ContextParallel,
                         ::testing::ValuesIn(kA2aWindowCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(A2a, ContextParallelFp8Attention,
                         ::testing::ValuesIn(kA2aFp8AttentionCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(Cp4, ContextParallel, ::testing::ValuesIn(kCp4Cases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(Cp4A2a, ContextParallel,
                         ::testing::ValuesIn(kCp4A2aCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(Cp4A2a, ContextParallelA2a,
                         ::testing::ValuesIn(kCp4A2aCases),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(Layers, ContextParallelFp8,
                         ::testing::ValuesIn(kFp8Cases), [](const auto &info) {
                           return std::string(info.param.name);
                         });

INSTANTIATE_TEST_SUITE_P(Layers, ContextParallelP2p,
                         ::testing::ValuesIn(kCases), [](const auto &info) {
                           return std::string(info.param.name);
                         });
INSTANTIATE_TEST_SUITE_P(Cp4, ContextParallelP2p,
                         ::testing::ValuesIn(kCp4Cases), [](const auto &info) {
                           return std::string(info.param.name);
                         });

} // namespace
