//===- LayerContext.h - what a layer importer works with --------*- C++ -*-===//
#ifndef TEJIT_COMPILER_SPEC_LAYERCONTEXT_H
#define TEJIT_COMPILER_SPEC_LAYERCONTEXT_H

#include "compiler/spec/ImportState.h"

namespace tejit::spec {

/// One layer being imported: its spec mapping, its name (the prefix of its
/// parameters' names), the value flowing into it and its recipe.
struct LayerContext {
  ImportState &state;
  SpecMap &layer;
  std::string name;
  mlir::Value input;
  mlir::te::FP8RecipeAttrInterface recipe;

  mlir::Location loc() const { return layer.loc(); }
  mlir::MLIRContext *context() { return state.getContext(); }
  std::string paramName(llvm::StringRef local) const {
    return name + "." + local.str();
  }

  /// The layer's input of `width` features (read from `widthKey`): the
  /// previous layer's output, whose width must match, or a new `input`
  /// argument for the first layer. With `slice`, its dim 0 must be 1 /
  /// `*slice` of the spec's activations' (1: all of it; a sequence-parallel
  /// layer reads one rank's slice); without, a per-token layer takes any
  /// (as the first layer: ImportState::firstInputSlices).
  /// `cpSize` > 1 (context parallelism) holds seq_length / cpSize tokens
  /// of each sequence, which the input must too.
  mlir::FailureOr<mlir::Value>
  takeInput(llvm::StringRef widthKey, int64_t width,
            std::optional<int64_t> slice = std::nullopt, int64_t cpSize = 1);
  /// A parameter, or null when `present` is false.
  mlir::Value param(llvm::StringRef local, llvm::ArrayRef<int64_t> shape,
                    bool present = true);

  mlir::FailureOr<mlir::te::Normalization> readNormalization();
  mlir::FailureOr<mlir::te::Activation> readActivation();
  /// `activation_params` (Transformer Engine's, for clamped_swiglu: the
  /// mapping of `limit`, `alpha` and `glu_linear_offset`, each optional) as
  /// the op attributes of the parameters it gives; an error when it comes
  /// with another `activation` (when that read failed, none is checked).
  mlir::FailureOr<llvm::SmallVector<mlir::NamedAttribute>>
  readActivationParams(mlir::FailureOr<mlir::te::Activation> activation);
  mlir::FailureOr<mlir::te::AttnMaskType>
  readMaskType(llvm::StringRef key, mlir::te::AttnMaskType fallback);
  /// A layout key; it may only repeat the spec's input_format.
  mlir::FailureOr<mlir::te::QkvFormat> readFormat(llvm::StringRef key);
  /// The attention mask argument `maskType` needs, or null: [b, 1, 1,
  /// s_kv] for the padding types, [b, 1, s, s_kv] for arbitrary; s_kv is
  /// `kvSeq` (cross-attention) or the spec's seq_length.
  mlir::Value attentionMask(mlir::te::AttnMaskType maskType,
                            std::optional<int64_t> kvSeq = std::nullopt);
  /// Fails unless the layer's recipe is unset: for layers without GEMMs.
  mlir::LogicalResult rejectRecipe();

  /// Adds `<prefix>fc1_weight` [ffn (x2 if gated), hidden], `fc1_bias`,
  /// `fc2_weight` [hidden, ffn] and `fc2_bias` (biases when `bias`).
  void addMlpParams(LayerOpParts &parts, llvm::StringRef prefix,
                    mlir::te::Activation activation, int64_t hidden,
                    int64_t ffn, bool bias);

  /// Creates the layer op at the layer's location and returns its first
  /// result. With `lnOutput`, the op's second result becomes a function
  /// result named `<layer>.ln_output`.
  mlir::FailureOr<mlir::Value> build(llvm::StringRef opName,
                                     LayerOpParts &parts, mlir::Type outputType,
                                     bool segmented, bool lnOutput = false);

  /// Typed attribute helpers.
  mlir::FloatAttr f64(double value);
  mlir::IntegerAttr i64(int64_t value);
  mlir::IntegerAttr i64(std::optional<int64_t> value);
  mlir::UnitAttr flag(bool value);
};

/// A layer's LayerNorm/RMSNorm options. `epsKey` names eps in the spec and
/// on the op: "eps" for the LayerNorm* layers, "layernorm_epsilon" for
/// MultiheadAttention and TransformerLayer, as Transformer Engine names it.
struct NormOptions {
  mlir::te::Normalization normalization;
  double eps;
  bool zeroCentered;
  llvm::StringRef epsKey;

  static mlir::FailureOr<NormOptions> read(LayerContext &ctx,
                                           llvm::StringRef epsKey);
  /// Adds `<prefix>layer_norm_weight` and, for LayerNorm,
  /// `<prefix>layer_norm_bias` as operands.
  void addParams(LayerContext &ctx, LayerOpParts &parts, llvm::StringRef prefix,
                 int64_t hidden) const;
  void addAttributes(LayerContext &ctx, LayerOpParts &parts) const;
};

/// A layer's tensor parallelism (docs/tensor-parallel.md): `tp_size`
/// (default 1), for the Linear layers `parallel_mode`, and
/// `sequence_parallel`. Spec sizes are global; the layer op gets one rank's.
struct TensorParallelOptions {
  int64_t size = 1;
  std::optional<mlir::te::ParallelMode> mode;
  /// Sequence parallelism (ignored at tp_size 1, as Transformer Engine
  /// does): activations outside the GEMM pairs hold 1/size of dim 0.
  bool sequence = false;

  /// The number of slices a sequence-parallel activation's dim 0 is cut
  /// into (1 without sequence parallelism).
  int64_t slices() const { return sequence ? size : 1; }

  /// Reads `tp_size`, and `parallel_mode` when `hasMode`.
  static mlir::FailureOr<TensorParallelOptions> read(LayerContext &ctx,
                                                     bool hasMode);
  /// One rank's share of the size `global` under key `key`; an error at
  /// `key` when tp_size does not divide it.
  mlir::FailureOr<int64_t> split(LayerContext &ctx, llvm::StringRef key,
                                 int64_t global) const;
  /// Fails (at `sequence_parallel`) where the layout or the spec's sizes
  /// rule sequence parallelism out.
  mlir::LogicalResult checkSequenceParallel(LayerContext &ctx);
  bool splits(mlir::te::ParallelMode which) const {
    return size > 1 && mode == which;
  }
  /// Sets `tp_size` (and `parallel_mode`) on the op when tp_size > 1.
  void addAttributes(LayerContext &ctx, LayerOpParts &parts) const;
};

/// An attention layer's context parallelism (docs/context-parallel.md):
/// `cp_size` (default 1), `cp_rank` (default 0) and `cp_comm_type`
/// (all_gather, the default, a2a, or p2p: TE's default, which resolve()
/// runs as a2a where cp_size divides the heads and else as all_gather).
/// Spec sequence lengths are global; the layer's activations hold this
/// rank's seq_length / cp_size tokens of every sequence.
struct ContextParallelOptions {
  int64_t size = 1, rank = 0;
  /// cp_comm_type a2a: all-to-alls between heads and tokens instead of the
  /// keys' and values' all-gather (with p2p: after resolve()).
  bool allToAll = false;
  /// cp_comm_type p2p.
  bool p2p = false;
  /// A head count cp_size does not divide: its spec key, one
  /// tensor-parallel rank's count and tp_size.
  struct HeadCount {
    llvm::StringRef key;
    int64_t count, tpSize;
  };
  /// With p2p run as all_gather (after resolve()): the count that keeps it
  /// from a2a.
  std::optional<HeadCount> notAllToAll;

  /// Reads the keys and checks them against the spec's sequences: ranges,
  /// seq_length divisible by 2 * cp_size, no packed sequences or KV cache.
  static mlir::FailureOr<ContextParallelOptions> read(LayerContext &ctx);
  /// The first of the query heads and the KV groups (`groups`, when the
  /// spec gives num_gqa_groups) of one tensor-parallel rank of `tpSize`
  /// that cp_size does not divide (a2a hands each rank 1/cp_size of them);
  /// nullopt when it divides both.
  std::optional<HeadCount> undividedHeads(int64_t heads,
                                          std::optional<int64_t> groups,
                                          int64_t tpSize = 1) const;
  /// With p2p and cp_size > 1: chooses a2a when undividedHeads finds
  /// nothing, else all_gather (recording why in notAllToAll). Before
  /// refuse, checkHeads and addAttributes.
  void resolve(int64_t heads, std::optional<int64_t> groups,
               int64_t tpSize = 1);
  /// A feature context parallelism may refuse: its spec key, whether the
  /// layer uses it, and whether cp_comm_type a2a runs it (each rank's
  /// attention is an ordinary one there).
  struct Feature {
    llvm::StringRef key;
    bool used;
    bool allToAllRuns = false;
  };
  /// With cp_size > 1, fails at the first of `features` that is used and
  /// not run by this cp_comm_type.
  mlir::LogicalResult refuse(LayerContext &ctx,
                             llvm::ArrayRef<Feature> features) const;
  /// With a2a, fails unless cp_size divides the query heads and the KV
  /// groups (`groups`, when the spec gives num_gqa_groups) of one
  /// tensor-parallel rank of `tpSize`; the errors name the spec's values.
  mlir::LogicalResult checkHeads(LayerContext &ctx, int64_t heads,
                                 std::optional<int64_t> groups,
                                 int64_t tpSize = 1) const;
  /// The activations' dim `seqDim` (the sequence dim) of one rank.
  int64_t local(int64_t global) const { return global / size; }
  /// Sets `cp_size`, `cp_rank` and `cp_comm_type` on the op when
  /// cp_size > 1.
  void addAttributes(LayerContext &ctx, LayerOpParts &parts) const;
};

using LayerImporter = mlir::FailureOr<mlir::Value> (*)(LayerContext &);

mlir::FailureOr<mlir::Value> importLinear(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importGroupedLinear(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importLayerNorm(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importRMSNorm(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importLayerNormLinear(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importLayerNormMLP(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importDotProductAttention(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importMultiheadAttention(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importTransformerLayer(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importActivation(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importBias(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importAddExtraInput(LayerContext &ctx);
mlir::FailureOr<mlir::Value> importMakeExtraOutput(LayerContext &ctx);

} // namespace tejit::spec

#endif // TEJIT_COMPILER_SPEC_LAYERCONTEXT_H
