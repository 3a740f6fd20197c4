//===- LayerChecks.h - rules shared by layer verifiers ----------*- C++ -*-===//
//
// Every diagnostic names the operand (by its assembly keyword) and the rule
// it breaks, so that a user who wrote a spec can find the field to fix.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECTS_LAYERCHECKS_H
#define TEJIT_DIALECTS_LAYERCHECKS_H

#include "dialects/TEDialect.h"

namespace mlir::te {

/// `value` must have exactly `expected` type; `what` names it.
LogicalResult expectType(Operation *op, Value value, StringRef what,
                         Type expected);

/// The head dims cuDNN's FP8 attention runs: multiples of 16 up to 256
/// (docs/fp8-attention.md; Hopper's backward takes 128 alone, which the
/// runtime checks against the GPU).
constexpr int64_t kFp8AttentionHeadDimMultiple = 16;
constexpr int64_t kMaxFp8AttentionHeadDim = 256;
inline bool isFp8AttentionHeadDim(int64_t headDim) {
  return headDim % kFp8AttentionHeadDimMultiple == 0 &&
         headDim <= kMaxFp8AttentionHeadDim;
}

/// A dimension that FP8 GEMMs need divisible by some number.
struct Fp8Dim {
  StringRef what;
  int64_t size;
  int64_t multiple;
};

/// Checks the operands and results of one layer op. The first float tensor
/// checked fixes the layer's dtype; every later one must match it.
class LayerChecker {
public:
  explicit LayerChecker(Operation *op) : op(op) {}

  /// `value` is a statically shaped bf16/f16/f32 tensor of rank >= minRank
  /// whose element type matches the layer's.
  LogicalResult floatTensor(Value value, StringRef name, int64_t minRank = 1);

  /// floatTensor, and `value` has exactly `expected` shape; `rule` spells the
  /// shape symbolically, e.g. "[out_features, in_features]".
  LogicalResult param(Value value, StringRef name, ArrayRef<int64_t> expected,
                      StringRef rule);

  /// `value`, when present, satisfies param(); absent values pass.
  LogicalResult optionalParam(Value value, StringRef name,
                              ArrayRef<int64_t> expected, StringRef rule);

  /// A boolean (i1) attention mask of the given shape; `rule` as in param().
  LogicalResult mask(Value value, ArrayRef<int64_t> expected, StringRef rule,
                     StringRef name = "mask");

  /// When `recipe` is set, each dim must be divisible by its multiple.
  LogicalResult fp8Dims(FP8RecipeAttrInterface recipe, ArrayRef<Fp8Dim> dims);

  /// Checks normalization parameters: `weightName` is [hidden]; the bias is
  /// required by LayerNorm and not allowed with RMSNorm.
  LogicalResult normParams(Normalization norm, Value weight, Value bias,
                           StringRef weightName, StringRef biasName,
                           int64_t hidden);

  /// Checks an MLP's FC1/FC2 parameters for `hidden` features; returns the
  /// inner width (ffn_hidden_size).
  FailureOr<int64_t> mlpParams(Activation activation, Value fc1Weight,
                               Value fc1Bias, Value fc2Weight, Value fc2Bias,
                               int64_t hidden);

  InFlightDiagnostic emitError() { return op->emitOpError(); }
  Operation *getOperation() const { return op; }

private:
  Operation *op;
  Type dtype;
  std::string dtypeSource;
};

/// A `window_size` attribute (absent, or [left, right] with each >= -1),
/// which the `arbitrary` mask type does not take.
LogicalResult verifyAttentionWindow(Operation *op,
                                    std::optional<ArrayRef<int64_t>> window,
                                    AttnMaskType maskType);

/// The operands of packed sequences (qkv_format = thd): `cuSeqlens`
/// (named `cuName`) is i32 [b + 1] with b >= 1, `maxSeqlen` (named
/// `maxName`) is present and positive, and the mask type, when given, is
/// padding or padding_causal (`maskTypeName`; te.kv_cache_attention checks
/// its own). Returns b.
FailureOr<int64_t> verifyPackedSequences(Operation *op, Value cuSeqlens,
                                         StringRef cuName,
                                         std::optional<int64_t> maxSeqlen,
                                         StringRef maxName,
                                         std::optional<AttnMaskType> maskType,
                                         StringRef maskTypeName);

/// The KV cache operands of an attention layer op (docs/kv-cache-plan.md):
/// none of `keyCache`, `valueCache`, `pageTable` (and `cuSeqlensKv` when
/// `cuSeqlensKvIsCacheOnly`), or both caches `[b, s_cache, kvHeads,
/// headDim]` of `element`, arguments of the function, with `cuSeqlensKv`
/// typed like `cuSeqlensQ`; packed sequences (`packed`) only, no sliding
/// window, and at most s_cache new tokens a sequence (`maxSeqlen`). With
/// `pageTable` the caches are paged (docs/paged-kv-cache.md): `[pages,
/// page_size, kvHeads, headDim]`, and a sequence holds max_pages *
/// page_size rows.
LogicalResult verifyKvCache(Operation *op, Value keyCache, Value valueCache,
                            Value pageTable, Value cuSeqlensQ,
                            Value cuSeqlensKv, bool cuSeqlensKvIsCacheOnly,
                            bool packed, int64_t kvHeads, int64_t headDim,
                            Type element, std::optional<int64_t> maxSeqlen,
                            bool window);

/// A paged cache's `page_table`: i32 `[batch, max_pages]`, each sequence's
/// pages of `pageSize` rows. Returns the rows a sequence holds, max_pages *
/// pageSize.
FailureOr<int64_t> verifyPageTable(Operation *op, Value pageTable,
                                   int64_t batch, int64_t pageSize);

/// How an attention op names its bias operands and attributes in
/// diagnostics: the layer ops' `core_attention_bias_type`,
/// `core_attention_bias`, `alibi_slopes`, `bias_requires_grad`, or the
/// primitives' `bias_type`, `bias`, `alibi_slopes`, `bias_grad`.
struct AttentionBiasNames {
  StringRef type, bias, slopes, grad;
};

/// An attention op's bias (docs/attention-bias.md): its type, the bias and
/// slopes operands (or null) and whether the bias takes a gradient.
struct AttentionBias {
  AttnBiasType type = AttnBiasType::no_bias;
  Value bias = {}, slopes = {};
  bool grad = false;

  /// Whether the op asks for anything beyond plain scores.
  bool any() const {
    return type != AttnBiasType::no_bias || bias || slopes || grad;
  }
};

/// The bias of te.dot_product_attention, te.multihead_attention or
/// te.transformer_layer.
template <typename OpT> AttentionBias layerAttentionBias(OpT op) {
  return {op.getCoreAttentionBiasType(), op.getCoreAttentionBias(),
          op.getAlibiSlopes(), op.getBiasRequiresGrad()};
}

/// The bias of te.attention or te.attention_bwd.
template <typename OpT> AttentionBias primitiveAttentionBias(OpT op) {
  return {op.getBiasType(), op.getBias(), op.getAlibiSlopes(),
          op.getBiasGrad()};
}

/// Checks an attention op's bias against its problem: `dims` = {b, heads,
/// s_q, s_kv} and q's `element` type. The bias operand goes with
/// post_scale_bias alone and is `element` [1|b, 1|heads, s_q, s_kv]; the
/// slopes with alibi alone, f32 [heads] or [b, heads]; the gradient with a
/// [1, heads, s_q, s_kv] post_scale_bias alone; none of it with the
/// arbitrary mask type or, when `unsupported` names it (packed sequences,
/// a KV cache), at all.
LogicalResult verifyAttentionBias(Operation *op,
                                  const AttentionBiasNames &names,
                                  const AttentionBias &bias,
                                  ArrayRef<int64_t> dims, Type element,
                                  AttnMaskType maskType,
                                  StringRef unsupported = "");

/// The mask type of te.kv_cache_attention for an attention layer's
/// `maskType`: causal ones align bottom-right (the new tokens end each
/// sequence, as in Transformer Engine's inference), the others pad only.
AttnMaskType kvCacheMaskType(AttnMaskType maskType);

// The operand rules of the attention primitives (te.attention,
// te.attention_bwd and their FP8 forms), defined in TEPrimitiveVerifiers.cpp.

/// q/k/v layouts in `format`: 4-D (sbhd or bshd; 3-D [t, h, d] for thd), key
/// and value of one type sharing query's batch and head dim, query heads a
/// multiple of theirs; `rngState`, when present, i64 [2]. Returns the
/// (batch, heads, s_q) of the softmax statistics (batch and s_q are 0 for
/// thd, whose sequence operands say them).
FailureOr<SmallVector<int64_t>>
verifyAttentionOperands(Operation *op, Value query, Value key, Value value,
                        Value rngState, QkvFormat format);

/// `queryMask`, when present: i1 [b, 1, 1, s_q] (from the statistics'
/// shape `stats`), with a padding mask type only.
LogicalResult verifyQueryMask(Operation *op, Value queryMask,
                              ArrayRef<int64_t> stats, AttnMaskType maskType);

/// The layer ops' `cp_comm_type` values (docs/context-parallel.md): the
/// keys and values all-gathered, or q, k, v and the attention's output
/// through all-to-alls between heads and tokens.
inline constexpr StringLiteral kCpAllGather = "all_gather", kCpAllToAll = "a2a";

/// An attention layer op's context parallelism (docs/context-parallel.md)
/// and the features it is checked against.
struct ContextParallel {
  int64_t size = 1, rank = 0;
  QkvFormat format = QkvFormat::sbhd;
  AttnMaskType maskType = AttnMaskType::no_mask;
  /// The op's name for the mask type, for diagnostics.
  StringRef maskTypeName = "attn_mask_type";
  bool window = false;
  AttentionBias bias = {};
  FP8RecipeAttrInterface recipe = {};
  bool kvCache = false, cross = false;
  /// The sequence length of the op's operands (this rank's tokens).
  int64_t localSeq = 0;
  /// `cp_comm_type`, and this rank's query and key/value head counts
  /// (which "a2a" splits over the ranks).
  StringRef commType = kCpAllGather;
  int64_t heads = 0, groups = 0;
};

/// `cp_comm_type` all_gather or a2a; `cp_rank` in [0, cp_size); with
/// cp_size > 1 no thd, masks other than no_mask and causal, bias, KV cache
/// or cross-attention, no window or FP8 attention with all_gather, and an
/// even local sequence (two chunks a rank); with a2a, heads and groups
/// divisible by cp_size.
LogicalResult verifyLayerContextParallel(Operation *op,
                                         const ContextParallel &cp);

/// Formats a shape as "[2048, 4, 4096]".
std::string formatShape(ArrayRef<int64_t> shape);

/// Product of all dims but the last: the number of tokens a GEMM sees.
int64_t leadingDimsProduct(ShapedType type);

} // namespace mlir::te

#endif // TEJIT_DIALECTS_LAYERCHECKS_H
