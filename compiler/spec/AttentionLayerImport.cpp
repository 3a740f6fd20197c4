//===- AttentionLayerImport.cpp - spec layers with attention
//---------------===//
//
// DotProductAttention, MultiheadAttention and TransformerLayer. Keys and
// parameter names follow Transformer Engine's constructor arguments and
// state_dict names.
//
//===----------------------------------------------------------------------===//
#include "compiler/spec/LayerContext.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::spec;
using llvm::StringRef;

static QkvFormatAttr formatAttr(LayerContext &ctx, QkvFormat format) {
  return QkvFormatAttr::get(ctx.context(), format);
}

static AttnMaskTypeAttr maskAttr(LayerContext &ctx, AttnMaskType type) {
  return AttnMaskTypeAttr::get(ctx.context(), type);
}

/// Transformer Engine's `window_size: [left, right]` (-1 = unbounded);
/// null when absent or unbounded on both sides.
static FailureOr<DenseI64ArrayAttr>
readWindow(LayerContext &ctx, FailureOr<AttnMaskType> maskType) {
  FailureOr<std::optional<SmallVector<int64_t>>> window =
      ctx.layer.getIntList("window_size", 2);
  if (failed(window))
    return failure();
  if (!*window)
    return DenseI64ArrayAttr();
  int64_t left = (**window)[0], right = (**window)[1];
  if (left < -1 || right < -1)
    return emitError(ctx.layer.valueLoc("window_size"))
           << "'window_size' in " << ctx.layer.getWhat()
           << " must be [left, right] with each >= -1 (-1: unbounded), got ["
           << left << ", " << right << "]";
  if (succeeded(maskType) && *maskType == AttnMaskType::arbitrary)
    return emitError(ctx.layer.valueLoc("window_size"))
           << "'window_size' is not supported with the arbitrary mask type";
  if (left == -1 && right == -1)
    return DenseI64ArrayAttr();
  return DenseI64ArrayAttr::get(ctx.context(), {left, right});
}

/// [seq, b, heads, headDim] or [b, seq, heads, headDim] ([tokens, heads,
/// headDim] for thd).
static RankedTensorType headsType(LayerContext &ctx, int64_t seq, int64_t heads,
                                  int64_t headDim) {
  ImportState &state = ctx.state;
  if (state.inputFormat == QkvFormat::thd)
    return RankedTensorType::get({state.tokens, heads, headDim}, state.dtype);
  SmallVector<int64_t> shape = {seq, state.batchSize, heads, headDim};
  if (state.inputFormat == QkvFormat::bshd)
    std::swap(shape[0], shape[1]);
  return RankedTensorType::get(shape, state.dtype);
}

/// Refuses `padded_queries` (TE's mask pair: the queries' own padding
/// mask) unless `maskType`, read under `maskKey`, is a padding type.
static LogicalResult checkPaddedQueries(SpecMap &layer, bool paddedQueries,
                                        AttnMaskType maskType,
                                        StringRef maskKey) {
  if (!paddedQueries || maskType == AttnMaskType::padding ||
      maskType == AttnMaskType::padding_causal)
    return success();
  return emitError(layer.valueLoc("padded_queries"))
         << "'padded_queries' needs the padding or padding_causal mask type "
            "in '"
         << maskKey << "'";
}

/// The queries' padding mask input `name`, i1 [b, 1, 1, seq_length].
static Value queryMaskInput(LayerContext &ctx, StringRef name) {
  ImportState &state = ctx.state;
  return state.addInput(
      name,
      RankedTensorType::get({state.batchSize, 1, 1, state.seqLength},
                            IntegerType::get(ctx.context(), 1)),
      ctx.loc());
}

/// The spec's KV cache (`kv_cache`): `cu_seqlens_kv` (when `cuSeqlensKvSlot`;
/// DotProductAttention fills its own slot, just before), the shared
/// `page_table` of paged caches, and the layer's `<name>.key_cache` /
/// `<name>.value_cache` inputs ([b, S, kvHeads, headDim], or [pages,
/// page_size, kvHeads, headDim] when paged); empty slots without a cache.
/// The slots follow the ops' operand order: cu_seqlens_kv, key_cache,
/// value_cache, page_table.
static void addKvCache(LayerContext &ctx, LayerOpParts &parts, int64_t kvHeads,
                       int64_t headDim, bool cuSeqlensKvSlot) {
  ImportState &state = ctx.state;
  if (!state.kvCacheRows) {
    for (int slot = cuSeqlensKvSlot ? 0 : 1; slot < 4; ++slot)
      parts.addOptional(Value());
    return;
  }
  if (cuSeqlensKvSlot)
    parts.addOptional(state.cuSeqlensKv(ctx.loc()));
  // The table is an input right after cu_seqlens_kv, before the caches.
  Value pageTable = state.pageTable(ctx.loc());
  auto type =
      RankedTensorType::get(state.kvCacheShape(kvHeads, headDim), state.dtype);
  parts.addOptional(state.addInput(ctx.name + ".key_cache", type, ctx.loc()));
  parts.addOptional(state.addInput(ctx.name + ".value_cache", type, ctx.loc()));
  parts.addOptional(pageTable);
}

/// Whether `type` is one context parallelism refuses (docs/context-parallel.md:
/// no_mask and causal only).
static bool isCpRefusedMask(AttnMaskType type) {
  return type != AttnMaskType::no_mask && type != AttnMaskType::causal;
}

namespace {
/// A layer's attention bias (docs/attention-bias.md): Transformer Engine's
/// `core_attention_bias_type`, the bias's shape (TE's names) and whether it
/// takes a gradient, and which ALiBi slopes the caller passes (`none`:
/// TE's vanilla ones). One `core_attention_bias` and one `alibi_slopes`
/// input serve every layer of a spec, as one mask does.
struct BiasOptions {
  AttnBiasType type = AttnBiasType::no_bias;
  std::string shape = "1hss";
  bool requiresGrad = false;
  std::string slopes = "none";

  /// Reads the keys; `maskType` is the layer's (self-)attention mask type.
  static FailureOr<BiasOptions> read(LayerContext &ctx,
                                     FailureOr<AttnMaskType> maskType) {
    SpecMap &layer = ctx.layer;
    FailureOr<std::optional<std::string>> type = layer.getChoice(
        "core_attention_bias_type",
        {"no_bias", "pre_scale_bias", "post_scale_bias", "alibi"});
    FailureOr<std::optional<std::string>> shape =
        layer.getChoice("bias_shape", {"1hss", "b1ss", "bhss", "11ss"});
    FailureOr<bool> requiresGrad = layer.getBool("bias_requires_grad", false);
    FailureOr<std::optional<std::string>> slopes =
        layer.getChoice("alibi_slopes", {"none", "heads", "batch_heads"});
    if (failed(type) || failed(shape) || failed(requiresGrad) || failed(slopes))
      return failure();
    if (*type == "pre_scale_bias")
      return emitError(layer.valueLoc("core_attention_bias_type"))
             << "'core_attention_bias_type' pre_scale_bias is not supported: "
                "pass bias * softmax_scale as a post_scale_bias (scale * (q.k "
                "+ bias) = scale * q.k + scale * bias)";
    BiasOptions options;
    options.type = symbolizeAttnBiasType(type->value_or("no_bias")).value();
    options.shape = shape->value_or("1hss");
    options.requiresGrad = *requiresGrad;
    options.slopes = slopes->value_or("none");
    if (failed(options.checkKeys(ctx)) ||
        failed(options.checkSupported(ctx, maskType)))
      return failure();
    return options;
  }

  /// Adds the `core_attention_bias` ([1|b, 1|h, s, s_kv] of the spec's
  /// dtype, `heads` the layer's) and `alibi_slopes` (f32 [h] or [b, h])
  /// operands, or empty slots.
  LogicalResult addOperands(LayerContext &ctx, LayerOpParts &parts,
                            int64_t heads, int64_t kvSeq) const {
    ImportState &state = ctx.state;
    FailureOr<Value> bias = Value(), alibiSlopes = Value();
    if (type == AttnBiasType::post_scale_bias) {
      auto biasType = RankedTensorType::get(
          {shape[0] == 'b' ? state.batchSize : 1, shape[1] == 'h' ? heads : 1,
           state.seqLength, kvSeq},
          state.dtype);
      bias =
          sharedInput(ctx, "core_attention_bias", biasType,
                      ctx.layer.has("bias_shape") ? "bias_shape"
                                                  : "core_attention_bias_type");
      if (failed(bias) || failed(agreeOnGrad(ctx)))
        return failure();
    }
    if (type == AttnBiasType::alibi && slopes != "none") {
      SmallVector<int64_t> slopesShape = {heads};
      if (slopes == "batch_heads")
        slopesShape.insert(slopesShape.begin(), state.batchSize);
      alibiSlopes = sharedInput(
          ctx, "alibi_slopes",
          RankedTensorType::get(slopesShape, Float32Type::get(ctx.context())),
          "alibi_slopes");
      if (failed(alibiSlopes))
        return failure();
    }
    parts.addOptional(*bias);
    parts.addOptional(*alibiSlopes);
    return success();
  }

  void addAttributes(LayerContext &ctx, LayerOpParts &parts) const {
    if (type != AttnBiasType::no_bias)
      parts.set("core_attention_bias_type",
                AttnBiasTypeAttr::get(ctx.context(), type));
    parts.set("bias_requires_grad", ctx.flag(requiresGrad));
  }

private:
  /// The keys that refine one bias type appear with that type alone, and
  /// the gradient goes with TE's one shape that takes it.
  LogicalResult checkKeys(LayerContext &ctx) const {
    SpecMap &layer = ctx.layer;
    for (auto [key, needed] :
         {std::pair<StringRef, AttnBiasType>{"bias_shape",
                                             AttnBiasType::post_scale_bias},
          {"bias_requires_grad", AttnBiasType::post_scale_bias},
          {"alibi_slopes", AttnBiasType::alibi}})
      if (layer.has(key) && type != needed)
        return emitError(layer.keyLoc(key))
               << "'" << key << "' needs 'core_attention_bias_type: "
               << stringifyAttnBiasType(needed) << "'";
    if (requiresGrad && shape != "1hss")
      return emitError(layer.valueLoc("bias_requires_grad"))
             << "'bias_requires_grad' needs bias_shape 1hss (the gradient is "
                "[1, heads, s, s_kv], summed over the batch), got "
             << shape;
    return success();
  }

  /// A bias or ALiBi is refused with packed sequences, a KV cache and the
  /// arbitrary mask type.
  LogicalResult checkSupported(LayerContext &ctx,
                               FailureOr<AttnMaskType> maskType) const {
    if (type == AttnBiasType::no_bias)
      return success();
    StringRef with =
        ctx.state.kvCacheRows ? "a 'kv_cache' (inference)"
        : ctx.state.inputFormat == QkvFormat::thd
            ? "packed sequences (input_format thd)"
        : succeeded(maskType) && *maskType == AttnMaskType::arbitrary
            ? "the arbitrary mask type (fold the mask into the bias)"
            : "";
    if (with.empty())
      return success();
    return emitError(ctx.layer.valueLoc("core_attention_bias_type"))
           << "'core_attention_bias_type' " << stringifyAttnBiasType(type)
           << " is not supported with " << with;
  }

  /// Every layer reading the one bias input agrees on its gradient.
  LogicalResult agreeOnGrad(LayerContext &ctx) const {
    std::optional<bool> &earlier = ctx.state.biasRequiresGrad;
    if (earlier && *earlier != requiresGrad)
      return emitError(ctx.layer.has("bias_requires_grad")
                           ? ctx.layer.valueLoc("bias_requires_grad")
                           : ctx.layer.valueLoc("core_attention_bias_type"))
             << "'bias_requires_grad' is " << (requiresGrad ? "true" : "false")
             << " here but " << (*earlier ? "true" : "false")
             << " in an earlier layer: the layers of a spec share one "
                "'core_attention_bias', which takes a gradient or not";
    earlier = requiresGrad;
    return success();
  }

  /// The input `name` of `type`, shared with earlier layers, whose type
  /// must then agree (an error at `key`).
  static FailureOr<Value> sharedInput(LayerContext &ctx, StringRef name,
                                      RankedTensorType type, StringRef key) {
    if (Value shared = ctx.state.lookupInput(name);
        shared && shared.getType() != type)
      return emitError(ctx.layer.valueLoc(key))
             << ctx.layer.getWhat() << " needs the input '" << name << "' of "
             << type << ", but an earlier layer's is " << shared.getType()
             << ": one '" << name
             << "' serves every layer of a spec, so their shapes must agree";
    return ctx.state.addInput(name, type, ctx.loc());
  }
};
} // namespace

FailureOr<Value> tejit::spec::importDotProductAttention(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> heads = layer.requirePositive("num_attention_heads");
  FailureOr<int64_t> headDim = layer.requirePositive("kv_channels");
  FailureOr<std::optional<int64_t>> groups =
      layer.getPositive("num_gqa_groups");
  FailureOr<AttnMaskType> maskType =
      ctx.readMaskType("attn_mask_type", AttnMaskType::causal);
  FailureOr<double> dropout = layer.getFloat("attention_dropout", 0.0);
  FailureOr<std::optional<double>> scale = layer.getFloat("softmax_scale");
  FailureOr<QkvFormat> format = ctx.readFormat("qkv_format");
  FailureOr<DenseI64ArrayAttr> window = readWindow(ctx, maskType);
  // Cross-attention: keys and values of their own length.
  FailureOr<std::optional<int64_t>> kvSeq = layer.getPositive("kv_seq_length");
  // Packed keys of their own (thd cross-attention): their token count.
  FailureOr<std::optional<int64_t>> kvTokens = layer.getPositive("kv_tokens");
  // TE's mask pair: the queries have a padding mask of their own.
  FailureOr<bool> paddedQueries = layer.getBool("padded_queries", false);
  FailureOr<BiasOptions> bias = BiasOptions::read(ctx, maskType);
  FailureOr<ContextParallelOptions> cp = ContextParallelOptions::read(ctx);
  // It runs no GEMM: a recipe (its own or the spec's) applies only as a
  // DelayedScaling with fp8_dpa, which runs the attention in FP8.
  auto fp8Dpa = dyn_cast_or_null<DelayedScalingAttr>(ctx.recipe);
  if (fp8Dpa && !fp8Dpa.getFp8Dpa())
    fp8Dpa = nullptr;
  if (failed(layer.finish()) || failed(heads) || failed(headDim) ||
      failed(groups) || failed(maskType) || failed(dropout) || failed(scale) ||
      failed(format) || failed(window) || failed(kvSeq) || failed(kvTokens) ||
      failed(paddedQueries) || failed(bias) || failed(cp) ||
      (!fp8Dpa && failed(ctx.rejectRecipe())) ||
      failed(checkPaddedQueries(layer, *paddedQueries, *maskType,
                                "attn_mask_type")))
    return failure();
  cp->resolve(*heads, *groups);
  if (failed(cp->refuse(ctx, {{"attn_mask_type", isCpRefusedMask(*maskType)},
                              {"window_size", bool(*window), true},
                              {"core_attention_bias_type",
                               bias->type != AttnBiasType::no_bias},
                              {"fp8_dpa", bool(fp8Dpa), true},
                              {"kv_seq_length", bool(*kvSeq)},
                              {"padded_queries", *paddedQueries}})) ||
      failed(cp->checkHeads(ctx, *heads, *groups)))
    return failure();
  bool packed = ctx.state.inputFormat == QkvFormat::thd;
  if (packed && *paddedQueries)
    return emitError(layer.keyLoc("padded_queries"))
           << "'padded_queries' is not supported with packed sequences "
              "(input_format thd: cu_seqlens gives the queries' lengths)";
  if (!packed && *kvTokens)
    return emitError(layer.keyLoc("kv_tokens"))
           << "'kv_tokens' (the keys' packed token count) needs "
              "'input_format: thd'";
  if (ctx.state.kvCacheRows && (*kvSeq || *kvTokens))
    return emitError(layer.keyLoc(*kvSeq ? "kv_seq_length" : "kv_tokens"))
           << "with a 'kv_cache', 'key' and 'value' are the step's new "
              "tokens, packed like the queries: no '"
           << (*kvSeq ? "kv_seq_length" : "kv_tokens") << "'";
  // thd with kv_seq_length or kv_tokens: the keys are packed on their own,
  // with the input cu_seqlens_kv.
  bool packedKeys = packed && (*kvSeq || *kvTokens);
  if (ctx.input)
    return emitError(ctx.loc())
           << "DotProductAttention takes query, key and value, so it can "
              "only be the first layer of a spec";
  int64_t kvHeads = groups->value_or(*heads);
  LayerOpParts parts;
  // Context parallelism: this rank's tokens of each sequence.
  int64_t seq = cp->local(ctx.state.seqLength),
          kvSeqLength = kvSeq->value_or(seq);
  RankedTensorType kvType =
      packedKeys ? RankedTensorType::get(
                       {kvTokens->value_or(ctx.state.batchSize * kvSeqLength),
                        kvHeads, *headDim},
                       ctx.state.dtype)
                 : headsType(ctx, kvSeqLength, kvHeads, *headDim);
  parts.add(ctx.state.addInput("query", headsType(ctx, seq, *heads, *headDim),
                               ctx.loc()));
  parts.add(ctx.state.addInput("key", kvType, ctx.loc()));
  parts.add(ctx.state.addInput("value", kvType, ctx.loc()));
  parts.addOptional(ctx.attentionMask(*maskType, kvSeqLength));
  parts.addOptional(*paddedQueries ? queryMaskInput(ctx, "query_mask")
                                   : Value());
  Value cuSeqlens = ctx.state.cuSeqlens(ctx.loc());
  parts.addOptional(cuSeqlens);
  parts.addOptional(packedKeys || ctx.state.kvCacheRows
                        ? ctx.state.cuSeqlensKv(ctx.loc())
                        : Value());
  addKvCache(ctx, parts, kvHeads, *headDim, /*cuSeqlensKvSlot=*/false);
  if (failed(bias->addOperands(ctx, parts, *heads, kvSeqLength)))
    return failure();
  bias->addAttributes(ctx, parts);
  if (packed) {
    parts.set("max_seqlen_q", ctx.i64(seq));
    parts.set("max_seqlen_kv",
              ctx.i64(ctx.state.kvCacheRows.value_or(kvSeqLength)));
  }
  parts.set("attn_mask_type", maskAttr(ctx, *maskType));
  parts.set("attention_dropout", ctx.f64(*dropout));
  parts.set("qkv_format", formatAttr(ctx, *format));
  if (*scale)
    parts.set("softmax_scale", ctx.f64(**scale));
  if (*window)
    parts.set("window_size", *window);
  if (fp8Dpa)
    parts.set("fp8_recipe", fp8Dpa);
  cp->addAttributes(ctx, parts);
  RankedTensorType outputType = ctx.state.activationType(*heads * *headDim);
  if (cp->size > 1) {
    SmallVector<int64_t> shape(outputType.getShape());
    unsigned seqDim = ctx.state.inputFormat == QkvFormat::bshd ? 1 : 0;
    shape[seqDim] = seq;
    outputType = RankedTensorType::get(shape, outputType.getElementType());
  }
  return ctx.build(DotProductAttentionOp::getOperationName(), parts, outputType,
                   /*segmented=*/true);
}

namespace {
/// The self-attention options MultiheadAttention and TransformerLayer share.
struct AttentionOptions {
  int64_t heads;
  std::optional<int64_t> groups, kvChannels;
  AttnMaskType maskType;
  double dropout;
  bool bias, rotary;
  QkvFormat format;
  DenseI64ArrayAttr window;
  /// The rotary table's width (partial rotary; default: kv_channels), and
  /// GPT-J's interleaved pairs.
  std::optional<int64_t> rotaryDim;
  bool rotaryInterleaved;
  TensorParallelOptions tp;
  /// The attention's bias or ALiBi (core_attention_bias_type).
  BiasOptions coreBias;
  /// Context parallelism (cp_size, cp_rank, cp_comm_type).
  ContextParallelOptions cp;

  static FailureOr<AttentionOptions> read(LayerContext &ctx, StringRef maskKey,
                                          StringRef formatKey) {
    SpecMap &layer = ctx.layer;
    FailureOr<int64_t> heads = layer.requirePositive("num_attention_heads");
    FailureOr<std::optional<int64_t>> groups =
        layer.getPositive("num_gqa_groups");
    FailureOr<std::optional<int64_t>> kvChannels =
        layer.getPositive("kv_channels");
    FailureOr<AttnMaskType> maskType =
        ctx.readMaskType(maskKey, AttnMaskType::causal);
    FailureOr<double> dropout = layer.getFloat("attention_dropout", 0.1);
    FailureOr<bool> bias = layer.getBool("bias", true);
    FailureOr<bool> rotary = layer.getBool("rotary_pos_emb", false);
    FailureOr<QkvFormat> format = ctx.readFormat(formatKey);
    FailureOr<DenseI64ArrayAttr> window = readWindow(ctx, maskType);
    FailureOr<std::optional<int64_t>> rotaryDim =
        layer.getPositive("rotary_dim");
    FailureOr<bool> interleaved =
        layer.getBool("rotary_pos_interleaved", false);
    FailureOr<TensorParallelOptions> tp =
        TensorParallelOptions::read(ctx, /*hasMode=*/false);
    FailureOr<BiasOptions> attentionBias = BiasOptions::read(ctx, maskType);
    FailureOr<ContextParallelOptions> cp = ContextParallelOptions::read(ctx);
    if (failed(heads) || failed(groups) || failed(kvChannels) ||
        failed(maskType) || failed(dropout) || failed(bias) || failed(rotary) ||
        failed(format) || failed(window) || failed(rotaryDim) ||
        failed(interleaved) || failed(tp) || failed(attentionBias) ||
        failed(cp))
      return failure();
    for (StringRef key : {"rotary_dim", "rotary_pos_interleaved"})
      if (!*rotary && layer.has(key))
        return emitError(layer.keyLoc(key))
               << "'" << key << "' needs 'rotary_pos_emb: true'";
    return AttentionOptions{*heads,         *groups,    *kvChannels,  *maskType,
                            *dropout,       *bias,      *rotary,      *format,
                            *window,        *rotaryDim, *interleaved, *tp,
                            *attentionBias, *cp};
  }

  /// What context parallelism refuses: besides the mask type (read under
  /// `maskKey`), bias and cross-attention (named by `crossKey`, set when
  /// `cross`), a window and FP8 attention unless cp_comm_type is a2a; with
  /// sequence parallelism in sbhd, tp_size must divide the local tokens;
  /// with a2a, cp_size this rank's heads. After splitHeads: p2p first
  /// becomes a2a or all_gather by this rank's heads.
  LogicalResult checkContextParallel(LayerContext &ctx, StringRef maskKey,
                                     StringRef crossKey, bool cross) {
    cp.resolve(heads, groups, tp.size);
    auto delayed = dyn_cast_or_null<DelayedScalingAttr>(ctx.recipe);
    if (failed(
            cp.refuse(ctx, {{maskKey, isCpRefusedMask(maskType)},
                            {"window_size", bool(window), true},
                            {"core_attention_bias_type",
                             coreBias.type != AttnBiasType::no_bias},
                            {"fp8_dpa", delayed && delayed.getFp8Dpa(), true},
                            {crossKey, cross}})) ||
        failed(cp.checkHeads(ctx, heads, groups, tp.size)))
      return failure();
    int64_t localSeq = cp.local(ctx.state.seqLength);
    if (cp.size > 1 && tp.sequence &&
        ctx.state.inputFormat == QkvFormat::sbhd && localSeq % tp.size != 0)
      return emitError(ctx.layer.valueLoc("sequence_parallel"))
             << "'sequence_parallel' cuts this rank's " << localSeq
             << " tokens (seq_length / cp_size) into tp_size (" << tp.size
             << ") slices: it must be divisible";
    return success();
  }

  /// With tp_size > 1, keeps one rank's heads and KV groups, and their
  /// width, which the global hidden size and head count give, as
  /// kv_channels.
  LogicalResult splitHeads(LayerContext &ctx, int64_t hidden) {
    if (tp.size == 1)
      return success();
    if (!kvChannels && hidden % heads != 0)
      return emitError(ctx.layer.valueLoc("num_attention_heads"))
             << "hidden size (" << hidden
             << ") must be divisible by num_attention_heads (" << heads
             << ") unless kv_channels is given";
    kvChannels = headDim(hidden);
    FailureOr<int64_t> localHeads = tp.split(ctx, "num_attention_heads", heads);
    FailureOr<int64_t> localGroups =
        groups ? tp.split(ctx, "num_gqa_groups", *groups) : localHeads;
    if (failed(localHeads) || failed(localGroups))
      return failure();
    heads = *localHeads;
    if (groups)
      groups = *localGroups;
    return success();
  }

  int64_t headDim(int64_t hidden) const {
    return kvChannels.value_or(hidden / heads);
  }

  /// Adds the fused QKV weight/bias (`qkvPrefix`.weight/.bias), with no
  /// cross-attention key/value projection when `kvSlots`, and the output
  /// projection (`projPrefix`.weight/.bias).
  void addProjections(LayerContext &ctx, LayerOpParts &parts, int64_t hidden,
                      StringRef qkvPrefix, StringRef projPrefix,
                      bool kvSlots = false) const {
    int64_t qkvRows = (heads + 2 * groups.value_or(heads)) * headDim(hidden);
    parts.add(ctx.param((qkvPrefix + ".weight").str(), {qkvRows, hidden}));
    parts.addOptional(ctx.param((qkvPrefix + ".bias").str(), {qkvRows}, bias));
    if (kvSlots) {
      parts.addOptional(Value());
      parts.addOptional(Value());
    }
    parts.add(ctx.param((projPrefix + ".weight").str(),
                        {hidden, heads * headDim(hidden)}));
    parts.addOptional(ctx.param((projPrefix + ".bias").str(), {hidden}, bias));
  }

  /// Adds the rotary-embedding input when the block asks for one.
  LogicalResult addRotary(LayerContext &ctx, LayerOpParts &parts,
                          int64_t hidden) const {
    if (!rotary) {
      parts.addOptional(Value());
      return success();
    }
    int64_t width = rotaryDim.value_or(headDim(hidden));
    if (width % 2 != 0 || width > headDim(hidden))
      return emitError(ctx.layer.valueLoc("rotary_dim"))
             << "'rotary_dim' must be even and at most kv_channels ("
             << headDim(hidden) << "), got " << width;
    // Packed sequences: a row of angles per token (positions restart at
    // every sequence).
    int64_t rows = ctx.state.inputFormat == QkvFormat::thd
                       ? ctx.state.tokens
                       : ctx.state.seqLength;
    auto type = RankedTensorType::get({rows, 1, 1, width},
                                      Float32Type::get(ctx.context()));
    // One table serves every layer, so they must agree on its shape.
    if (Value shared = ctx.state.lookupInput("rotary_pos_emb"))
      if (shared.getType() != type)
        return emitError(ctx.loc())
               << ctx.layer.getWhat() << " needs a 'rotary_pos_emb' input of "
               << type << " (rotary_dim = " << width
               << "), but an earlier layer's is " << shared.getType()
               << ": the layers of a spec share one rotary table, so their "
                  "rotary widths must match";
    parts.addOptional(ctx.state.addInput("rotary_pos_emb", type, ctx.loc()));
    return success();
  }

  /// Adds the packed sequences' `cu_seqlens` input and `max_seqlen` (the
  /// spec's seq_length) for input_format thd; an empty slot otherwise.
  static void addPackedSequences(LayerContext &ctx, LayerOpParts &parts) {
    parts.addOptional(ctx.state.cuSeqlens(ctx.loc()));
    if (ctx.state.inputFormat == QkvFormat::thd)
      parts.set("max_seqlen", ctx.i64(ctx.state.seqLength));
  }

  void addAttributes(LayerContext &ctx, LayerOpParts &parts, StringRef maskName,
                     StringRef formatName) const {
    parts.set("num_attention_heads", ctx.i64(heads));
    parts.set("num_gqa_groups", ctx.i64(groups));
    parts.set("kv_channels", ctx.i64(kvChannels));
    parts.set(maskName, maskAttr(ctx, maskType));
    parts.set("attention_dropout", ctx.f64(dropout));
    parts.set(formatName, formatAttr(ctx, format));
    if (window)
      parts.set("window_size", window);
    parts.set("rotary_pos_interleaved", ctx.flag(rotaryInterleaved));
    coreBias.addAttributes(ctx, parts);
    tp.addAttributes(ctx, parts);
    cp.addAttributes(ctx, parts);
    parts.set("fp8_recipe", ctx.recipe);
  }
};

/// Cross-attention's keys and values: `encoder_output` [s_kv, b, hidden]
/// ([b, s_kv, hidden] for bshd), with s_kv from `kv_seq_length` (default:
/// the spec's seq_length), and its padding mask. Every cross-attention
/// layer of a spec attends to the same encoder output.
struct CrossOptions {
  int64_t kvSeq;
  AttnMaskType maskType;
  /// `padded_queries`: the queries have a padding mask of their own.
  bool paddedQueries;

  /// Reads `kv_seq_length`; `maskType` is what the layer read under
  /// `maskKey`. `present` says whether the layer is a cross-attention one,
  /// else `kv_seq_length` and, with `ownMaskKey`, `maskKey` are refused,
  /// naming `why`.
  static FailureOr<std::optional<CrossOptions>>
  read(LayerContext &ctx, bool present, StringRef maskKey,
       FailureOr<AttnMaskType> maskType, bool ownMaskKey, StringRef why) {
    SpecMap &layer = ctx.layer;
    FailureOr<std::optional<int64_t>> kvSeq =
        layer.getPositive("kv_seq_length");
    FailureOr<bool> paddedQueries = layer.getBool("padded_queries", false);
    if (failed(kvSeq) || failed(maskType) || failed(paddedQueries))
      return failure();
    if (!present) {
      SmallVector<StringRef, 3> keys = {"kv_seq_length", "padded_queries"};
      if (ownMaskKey)
        keys.push_back(maskKey);
      for (StringRef key : keys)
        if (layer.has(key))
          return emitError(layer.keyLoc(key))
                 << "'" << key << "' applies to cross-attention only (" << why
                 << ")";
      return std::optional<CrossOptions>();
    }
    switch (*maskType) {
    case AttnMaskType::no_mask:
    case AttnMaskType::causal:
    case AttnMaskType::padding:
    case AttnMaskType::padding_causal:
      break;
    default:
      return emitError(layer.has(maskKey) ? layer.valueLoc(maskKey) : ctx.loc())
             << "'" << maskKey << "' " << stringifyAttnMaskType(*maskType)
             << " is not supported with cross-attention (no_mask, causal, "
                "padding and padding_causal are; causal aligns top-left)";
    }
    if (failed(checkPaddedQueries(layer, *paddedQueries, *maskType, maskKey)))
      return failure();
    return std::optional<CrossOptions>(CrossOptions{
        kvSeq->value_or(ctx.state.seqLength), *maskType, *paddedQueries});
  }

  /// Refuses the self-attention options cross-attention does not take.
  static LogicalResult rejectSelfOnly(LayerContext &ctx,
                                      const AttentionOptions &attention) {
    SpecMap &layer = ctx.layer;
    if (attention.rotary)
      return emitError(layer.valueLoc("rotary_pos_emb"))
             << "'rotary_pos_emb' is not supported with cross-attention";
    if (attention.window)
      return emitError(layer.valueLoc("window_size"))
             << "'window_size' is not supported with cross-attention";
    return success();
  }

  /// The `encoder_output` argument, shared by every cross-attention layer.
  /// With sequence parallelism (`slices` > 1), this rank's slice of its
  /// dim 0.
  FailureOr<Value> encoderOutput(LayerContext &ctx, int64_t hidden,
                                 int64_t slices) const {
    ImportState &state = ctx.state;
    SmallVector<int64_t> shape = {kvSeq, state.batchSize, hidden};
    if (state.inputFormat == QkvFormat::bshd)
      std::swap(shape[0], shape[1]);
    if (shape[0] % slices != 0)
      return emitError(ctx.layer.valueLoc("sequence_parallel"))
             << "'sequence_parallel' cuts dim 0 of 'encoder_output' ("
             << shape[0] << " rows) into tp_size (" << slices
             << ") slices: it must be divisible";
    shape[0] /= slices;
    auto type = RankedTensorType::get(shape, state.dtype);
    if (Value shared = state.lookupInput("encoder_output"))
      if (shared.getType() != type)
        return emitError(ctx.loc())
               << ctx.layer.getWhat() << " needs an 'encoder_output' of "
               << type << " (kv_seq_length " << kvSeq << ", hidden_size "
               << hidden << "), but an earlier layer's is " << shared.getType()
               << ": the layers of a spec attend to one encoder output";
    return state.addInput("encoder_output", type, ctx.loc());
  }

  /// The keys' padding mask `enc_dec_attn_mask` [b, 1, 1, s_kv] for the
  /// padding types, else null.
  FailureOr<Value> mask(LayerContext &ctx) const {
    if (maskType != AttnMaskType::padding &&
        maskType != AttnMaskType::padding_causal)
      return Value();
    ImportState &state = ctx.state;
    auto type = RankedTensorType::get({state.batchSize, 1, 1, kvSeq},
                                      IntegerType::get(ctx.context(), 1));
    if (Value shared = state.lookupInput("enc_dec_attn_mask"))
      if (shared.getType() != type)
        return emitError(ctx.loc())
               << ctx.layer.getWhat() << " needs an 'enc_dec_attn_mask' of "
               << type << ", but an earlier layer's is " << shared.getType();
    return state.addInput("enc_dec_attn_mask", type, ctx.loc());
  }

  /// The queries' padding mask `enc_dec_query_mask` [b, 1, 1, s] with
  /// `padded_queries`, else null.
  Value queryMask(LayerContext &ctx) const {
    return paddedQueries ? queryMaskInput(ctx, "enc_dec_query_mask") : Value();
  }

  /// Adds the query projection `<qPrefix>.weight/.bias` [heads * d,
  /// hidden] and the key/value projection `<kvPrefix>.weight/.bias` [2 *
  /// groups * d, hidden] (rows of k, then v).
  static void addProjections(LayerContext &ctx, LayerOpParts &parts,
                             const AttentionOptions &attention, int64_t hidden,
                             StringRef qPrefix, StringRef kvPrefix) {
    int64_t d = attention.headDim(hidden);
    int64_t qRows = attention.heads * d;
    int64_t kvRows = 2 * attention.groups.value_or(attention.heads) * d;
    parts.add(ctx.param((qPrefix + ".weight").str(), {qRows, hidden}));
    parts.addOptional(
        ctx.param((qPrefix + ".bias").str(), {qRows}, attention.bias));
    parts.addOptional(
        ctx.param((kvPrefix + ".weight").str(), {kvRows, hidden}));
    parts.addOptional(
        ctx.param((kvPrefix + ".bias").str(), {kvRows}, attention.bias));
  }

  static void addOutputProjection(LayerContext &ctx, LayerOpParts &parts,
                                  const AttentionOptions &attention,
                                  int64_t hidden, StringRef prefix) {
    parts.addOptional(
        ctx.param((prefix + ".weight").str(),
                  {hidden, attention.heads * attention.headDim(hidden)}));
    parts.addOptional(
        ctx.param((prefix + ".bias").str(), {hidden}, attention.bias));
  }
};

} // namespace

FailureOr<Value> tejit::spec::importMultiheadAttention(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> hidden = layer.requirePositive("hidden_size");
  FailureOr<bool> inputLayernorm = layer.getBool("input_layernorm", false);
  FailureOr<bool> returnNorm = layer.getBool("return_layernorm_output", false);
  FailureOr<std::optional<std::string>> attentionType =
      layer.getChoice("attention_type", {"self", "cross"});
  FailureOr<NormOptions> norm = NormOptions::read(ctx, "layernorm_epsilon");
  FailureOr<AttentionOptions> attention =
      AttentionOptions::read(ctx, "attn_mask_type", "qkv_format");
  bool isCross = succeeded(attentionType) && *attentionType == "cross";
  FailureOr<std::optional<CrossOptions>> cross = CrossOptions::read(
      ctx, isCross, "attn_mask_type",
      succeeded(attention) ? FailureOr<AttnMaskType>(attention->maskType)
                           : FailureOr<AttnMaskType>(failure()),
      /*ownMaskKey=*/false, "attention_type 'cross'");
  if (failed(layer.finish()) || failed(hidden) || failed(inputLayernorm) ||
      failed(returnNorm) || failed(attentionType) || failed(norm) ||
      failed(attention) || failed(cross) ||
      (isCross && failed(CrossOptions::rejectSelfOnly(ctx, *attention))) ||
      failed(attention->splitHeads(ctx, *hidden)))
    return failure();
  if (*returnNorm && !*inputLayernorm)
    return emitError(layer.valueLoc("return_layernorm_output"))
           << "'return_layernorm_output' needs 'input_layernorm: true'";
  if (failed(attention->checkContextParallel(ctx, "attn_mask_type",
                                             "attention_type", isCross)))
    return failure();
  // The attention reads whole sequences: a sequence-parallel layer's
  // slice, gathered, or all of dim 0 (this rank's tokens of each sequence
  // under context parallelism).
  FailureOr<Value> input = ctx.takeInput(
      "hidden_size", *hidden, attention->tp.slices(), attention->cp.size);
  if (failed(input))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  if (*cross) {
    FailureOr<Value> encoder =
        (*cross)->encoderOutput(ctx, *hidden, attention->tp.slices());
    if (failed(encoder))
      return failure();
    parts.addOptional(*encoder);
  } else {
    parts.addOptional(Value());
  }
  StringRef normPrefix = *cross ? "layernorm_query." : "layernorm_qkv.";
  if (*inputLayernorm) {
    norm->addParams(ctx, parts, normPrefix, *hidden);
  } else {
    parts.addOptional(Value());
    parts.addOptional(Value());
  }
  if (*cross) {
    CrossOptions::addProjections(
        ctx, parts, *attention, *hidden,
        *inputLayernorm ? "layernorm_query" : "query_layer", "key_value");
    CrossOptions::addOutputProjection(ctx, parts, *attention, *hidden, "proj");
    FailureOr<Value> mask = (*cross)->mask(ctx);
    if (failed(mask))
      return failure();
    parts.addOptional(*mask);
    parts.addOptional((*cross)->queryMask(ctx));
    parts.addOptional(Value()); // no rotary embeddings
    parts.addOptional(Value()); // no packed sequences
    if (ctx.state.kvCacheRows)
      return emitError(ctx.loc()) << "a 'kv_cache' serves self-attention "
                                     "only, not 'attention_type: cross'";
    addKvCache(ctx, parts, 0, 0, /*cuSeqlensKvSlot=*/true);
  } else {
    attention->addProjections(ctx, parts, *hidden,
                              *inputLayernorm ? "layernorm_qkv" : "qkv", "proj",
                              /*kvSlots=*/true);
    parts.addOptional(ctx.attentionMask(attention->maskType));
    parts.addOptional(Value()); // no query mask
    if (failed(attention->addRotary(ctx, parts, *hidden)))
      return failure();
    AttentionOptions::addPackedSequences(ctx, parts);
    addKvCache(ctx, parts, attention->groups.value_or(attention->heads),
               attention->headDim(*hidden), /*cuSeqlensKvSlot=*/true);
  }
  if (failed(attention->coreBias.addOperands(ctx, parts, attention->heads,
                                             *cross ? (*cross)->kvSeq
                                                    : ctx.state.seqLength)))
    return failure();
  attention->addAttributes(ctx, parts, "attn_mask_type", "qkv_format");
  norm->addAttributes(ctx, parts);
  parts.set("return_layernorm_output", ctx.flag(*returnNorm));
  return ctx.build(MultiheadAttentionOp::getOperationName(), parts,
                   input->getType(), /*segmented=*/true, *returnNorm);
}

FailureOr<Value> tejit::spec::importTransformerLayer(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> hidden = layer.requirePositive("hidden_size");
  FailureOr<int64_t> ffn = layer.requirePositive("ffn_hidden_size");
  FailureOr<double> hiddenDropout = layer.getFloat("hidden_dropout", 0.1);
  // TE's DropPath (stochastic depth).
  FailureOr<double> dropPath = layer.getFloat("drop_path_rate", 0.0);
  FailureOr<Activation> activation = ctx.readActivation();
  FailureOr<SmallVector<NamedAttribute>> activationParams =
      ctx.readActivationParams(activation);
  FailureOr<bool> postLnResidual =
      layer.getBool("apply_residual_connection_post_layernorm", false);
  // TE's output_layernorm: the self-attention's norm moves to the output.
  FailureOr<bool> outputNorm = layer.getBool("output_layernorm", false);
  // TE's parallel block: attention and MLP both read the input.
  FailureOr<bool> parallel = layer.getBool("parallel_attention_mlp", false);
  FailureOr<std::optional<std::string>> layerType =
      layer.getChoice("layer_type", {"encoder", "decoder"});
  FailureOr<NormOptions> norm = NormOptions::read(ctx, "layernorm_epsilon");
  FailureOr<AttentionOptions> attention =
      AttentionOptions::read(ctx, "self_attn_mask_type", "attn_input_format");
  bool decoder = succeeded(layerType) && *layerType == "decoder";
  FailureOr<std::optional<CrossOptions>> cross = CrossOptions::read(
      ctx, decoder, "enc_dec_attn_mask_type",
      ctx.readMaskType("enc_dec_attn_mask_type", AttnMaskType::no_mask),
      /*ownMaskKey=*/true, "layer_type 'decoder'");
  if (failed(layer.finish()) || failed(hidden) || failed(ffn) ||
      failed(hiddenDropout) || failed(dropPath) || failed(activation) ||
      failed(activationParams) || failed(postLnResidual) ||
      failed(outputNorm) || failed(layerType) || failed(norm) ||
      failed(attention) || failed(cross) || failed(parallel) ||
      failed(attention->splitHeads(ctx, *hidden)))
    return failure();
  FailureOr<int64_t> localFfn =
      attention->tp.split(ctx, "ffn_hidden_size", *ffn);
  if (failed(localFfn))
    return failure();
  if (*parallel) {
    // Transformer Engine's constraints on its parallel block.
    for (auto [key, set] :
         {std::pair<StringRef, bool>{"layer_type", decoder},
          {"apply_residual_connection_post_layernorm", *postLnResidual},
          {"output_layernorm", *outputNorm}})
      if (set)
        return emitError(layer.valueLoc("parallel_attention_mlp"))
               << "'parallel_attention_mlp' is not supported with '" << key
               << "' " << (key == "layer_type" ? "decoder" : "true");
  }
  if (failed(attention->checkContextParallel(ctx, "self_attn_mask_type",
                                             "layer_type", decoder)))
    return failure();
  // The attention reads whole sequences: a sequence-parallel layer's
  // slice, gathered, or all of dim 0 (this rank's tokens of each sequence
  // under context parallelism).
  FailureOr<Value> input = ctx.takeInput(
      "hidden_size", *hidden, attention->tp.slices(), attention->cp.size);
  if (failed(input))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  Value encoder;
  if (*cross) {
    FailureOr<Value> shared =
        (*cross)->encoderOutput(ctx, *hidden, attention->tp.slices());
    if (failed(shared))
      return failure();
    encoder = *shared;
  }
  parts.addOptional(encoder);
  // TE's self_attention has input_layernorm = not output_layernorm, and so
  // names its QKV group layernorm_qkv or qkv.
  StringRef qkvGroup =
      *outputNorm ? "self_attention.qkv" : "self_attention.layernorm_qkv";
  if (*outputNorm) {
    parts.addOptional(Value());
    parts.addOptional(Value());
  } else {
    norm->addParams(ctx, parts, "self_attention.layernorm_qkv.", *hidden);
  }
  attention->addProjections(ctx, parts, *hidden, qkvGroup,
                            "self_attention.proj");
  if (*cross) {
    // TE's inter_attention: a cross-attention MultiheadAttention with
    // input_layernorm.
    norm->addParams(ctx, parts, "inter_attention.layernorm_query.", *hidden);
    CrossOptions::addProjections(ctx, parts, *attention, *hidden,
                                 "inter_attention.layernorm_query",
                                 "inter_attention.key_value");
    CrossOptions::addOutputProjection(ctx, parts, *attention, *hidden,
                                      "inter_attention.proj");
  } else {
    for (int i = 0; i < 8; ++i)
      parts.addOptional(Value());
  }
  norm->addParams(ctx, parts, "layernorm_mlp.", *hidden);
  ctx.addMlpParams(parts, "layernorm_mlp.", *activation, *hidden, *localFfn,
                   attention->bias);
  if (*outputNorm) {
    // TE's `layernorm` module: `weight`, `bias` (LayerNorm only).
    parts.add(ctx.param("layernorm.weight", {*hidden}));
    parts.addOptional(
        ctx.param("layernorm.bias", {*hidden},
                  norm->normalization == Normalization::LayerNorm));
  } else {
    parts.addOptional(Value());
    parts.addOptional(Value());
  }
  // The self-attention mask, the cross-attention mask, the rotary table.
  parts.addOptional(ctx.attentionMask(attention->maskType));
  if (*cross) {
    FailureOr<Value> mask = (*cross)->mask(ctx);
    if (failed(mask))
      return failure();
    parts.addOptional(*mask);
    parts.addOptional((*cross)->queryMask(ctx));
  } else {
    parts.addOptional(Value());
    parts.addOptional(Value());
  }
  if (failed(attention->addRotary(ctx, parts, *hidden)))
    return failure();
  AttentionOptions::addPackedSequences(ctx, parts);
  addKvCache(ctx, parts, attention->groups.value_or(attention->heads),
             attention->headDim(*hidden), /*cuSeqlensKvSlot=*/true);
  // The bias belongs to the self-attention.
  if (failed(attention->coreBias.addOperands(ctx, parts, attention->heads,
                                             ctx.state.seqLength)))
    return failure();
  attention->addAttributes(ctx, parts, "self_attn_mask_type",
                           "attn_input_format");
  if (*cross)
    parts.set("enc_dec_attn_mask_type", maskAttr(ctx, (*cross)->maskType));
  norm->addAttributes(ctx, parts);
  parts.set("activation", ActivationAttr::get(ctx.context(), *activation));
  for (NamedAttribute param : *activationParams)
    parts.set(param.getName(), param.getValue());
  parts.set("hidden_dropout", ctx.f64(*hiddenDropout));
  if (*dropPath != 0.0)
    parts.set("drop_path_rate", ctx.f64(*dropPath));
  parts.set("apply_residual_connection_post_layernorm",
            ctx.flag(*postLnResidual));
  parts.set("parallel_attention_mlp", ctx.flag(*parallel));
  return ctx.build(TransformerLayerOp::getOperationName(), parts,
                   input->getType(), /*segmented=*/true);
}
