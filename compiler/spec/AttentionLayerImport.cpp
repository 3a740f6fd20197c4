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

/// [seq, b, heads, headDim] or [b, seq, heads, headDim].
static RankedTensorType headsType(LayerContext &ctx, int64_t seq, int64_t heads,
                                  int64_t headDim) {
  ImportState &state = ctx.state;
  SmallVector<int64_t> shape = {seq, state.batchSize, heads, headDim};
  if (state.inputFormat == QkvFormat::bshd)
    std::swap(shape[0], shape[1]);
  return RankedTensorType::get(shape, state.dtype);
}

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
  if (failed(layer.finish()) || failed(heads) || failed(headDim) ||
      failed(groups) || failed(maskType) || failed(dropout) || failed(scale) ||
      failed(format) || failed(window) || failed(kvSeq) ||
      failed(ctx.rejectRecipe()))
    return failure();
  if (ctx.input)
    return emitError(ctx.loc())
           << "DotProductAttention takes query, key and value, so it can "
              "only be the first layer of a spec";
  int64_t kvHeads = groups->value_or(*heads);
  LayerOpParts parts;
  int64_t seq = ctx.state.seqLength, kvSeqLength = kvSeq->value_or(seq);
  parts.add(ctx.state.addInput("query", headsType(ctx, seq, *heads, *headDim),
                               ctx.loc()));
  parts.add(ctx.state.addInput(
      "key", headsType(ctx, kvSeqLength, kvHeads, *headDim), ctx.loc()));
  parts.add(ctx.state.addInput(
      "value", headsType(ctx, kvSeqLength, kvHeads, *headDim), ctx.loc()));
  parts.addOptional(ctx.attentionMask(*maskType, kvSeqLength));
  parts.set("attn_mask_type", maskAttr(ctx, *maskType));
  parts.set("attention_dropout", ctx.f64(*dropout));
  parts.set("qkv_format", formatAttr(ctx, *format));
  if (*scale)
    parts.set("softmax_scale", ctx.f64(**scale));
  if (*window)
    parts.set("window_size", *window);
  return ctx.build(DotProductAttentionOp::getOperationName(), parts,
                   ctx.state.activationType(*heads * *headDim),
                   /*segmented=*/false);
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
    if (failed(heads) || failed(groups) || failed(kvChannels) ||
        failed(maskType) || failed(dropout) || failed(bias) || failed(rotary) ||
        failed(format) || failed(window))
      return failure();
    return AttentionOptions{*heads, *groups, *kvChannels, *maskType, *dropout,
                            *bias,  *rotary, *format,     *window};
  }

  int64_t headDim(int64_t hidden) const {
    return kvChannels.value_or(hidden / heads);
  }

  /// Adds the fused QKV weight/bias (`qkvPrefix`.weight/.bias) and the output
  /// projection (`projPrefix`.weight/.bias).
  void addProjections(LayerContext &ctx, LayerOpParts &parts, int64_t hidden,
                      StringRef qkvPrefix, StringRef projPrefix) const {
    int64_t qkvRows = (heads + 2 * groups.value_or(heads)) * headDim(hidden);
    parts.add(ctx.param((qkvPrefix + ".weight").str(), {qkvRows, hidden}));
    parts.addOptional(ctx.param((qkvPrefix + ".bias").str(), {qkvRows}, bias));
    parts.add(ctx.param((projPrefix + ".weight").str(),
                        {hidden, heads * headDim(hidden)}));
    parts.addOptional(ctx.param((projPrefix + ".bias").str(), {hidden}, bias));
  }

  /// Adds the mask and rotary-embedding inputs the block asks for.
  LogicalResult addInputs(LayerContext &ctx, LayerOpParts &parts,
                          int64_t hidden) const {
    parts.addOptional(ctx.attentionMask(maskType));
    if (!rotary) {
      parts.addOptional(Value());
      return success();
    }
    auto type =
        RankedTensorType::get({ctx.state.seqLength, 1, 1, headDim(hidden)},
                              Float32Type::get(ctx.context()));
    // One table serves every layer, so they must agree on its shape.
    if (Value shared = ctx.state.lookupInput("rotary_pos_emb"))
      if (shared.getType() != type)
        return emitError(ctx.loc())
               << ctx.layer.getWhat() << " needs a 'rotary_pos_emb' input of "
               << type << " (kv_channels = " << headDim(hidden)
               << "), but an earlier layer's is " << shared.getType()
               << ": the layers of a spec share one rotary table, so their "
                  "kv_channels must match";
    parts.addOptional(ctx.state.addInput("rotary_pos_emb", type, ctx.loc()));
    return success();
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
    parts.set("fp8_recipe", ctx.recipe);
  }
};

} // namespace

FailureOr<Value> tejit::spec::importMultiheadAttention(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> hidden = layer.requirePositive("hidden_size");
  FailureOr<bool> inputLayernorm = layer.getBool("input_layernorm", false);
  FailureOr<NormOptions> norm = NormOptions::read(ctx, "layernorm_epsilon");
  FailureOr<AttentionOptions> attention =
      AttentionOptions::read(ctx, "attn_mask_type", "qkv_format");
  if (failed(layer.finish()) || failed(hidden) || failed(inputLayernorm) ||
      failed(norm) || failed(attention))
    return failure();
  FailureOr<Value> input = ctx.takeInput("hidden_size", *hidden);
  if (failed(input))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  if (*inputLayernorm) {
    norm->addParams(ctx, parts, "layernorm_qkv.", *hidden);
  } else {
    parts.addOptional(Value());
    parts.addOptional(Value());
  }
  attention->addProjections(ctx, parts, *hidden,
                            *inputLayernorm ? "layernorm_qkv" : "qkv", "proj");
  if (failed(attention->addInputs(ctx, parts, *hidden)))
    return failure();
  attention->addAttributes(ctx, parts, "attn_mask_type", "qkv_format");
  norm->addAttributes(ctx, parts);
  return ctx.build(MultiheadAttentionOp::getOperationName(), parts,
                   input->getType(), /*segmented=*/true);
}

FailureOr<Value> tejit::spec::importTransformerLayer(LayerContext &ctx) {
  SpecMap &layer = ctx.layer;
  FailureOr<int64_t> hidden = layer.requirePositive("hidden_size");
  FailureOr<int64_t> ffn = layer.requirePositive("ffn_hidden_size");
  FailureOr<double> hiddenDropout = layer.getFloat("hidden_dropout", 0.1);
  FailureOr<Activation> activation = ctx.readActivation();
  FailureOr<bool> postLnResidual =
      layer.getBool("apply_residual_connection_post_layernorm", false);
  FailureOr<std::optional<std::string>> layerType =
      layer.getChoice("layer_type", {"encoder", "decoder"});
  FailureOr<NormOptions> norm = NormOptions::read(ctx, "layernorm_epsilon");
  FailureOr<AttentionOptions> attention =
      AttentionOptions::read(ctx, "self_attn_mask_type", "attn_input_format");
  if (failed(layer.finish()) || failed(hidden) || failed(ffn) ||
      failed(hiddenDropout) || failed(activation) || failed(postLnResidual) ||
      failed(layerType) || failed(norm) || failed(attention))
    return failure();
  if (layerType->value_or("encoder") == "decoder")
    return emitError(layer.valueLoc("layer_type"))
           << "layer_type 'decoder' (cross-attention over an encoder's "
              "output) is not supported yet; use 'encoder'";
  FailureOr<Value> input = ctx.takeInput("hidden_size", *hidden);
  if (failed(input))
    return failure();
  LayerOpParts parts;
  parts.add(*input);
  norm->addParams(ctx, parts, "self_attention.layernorm_qkv.", *hidden);
  attention->addProjections(ctx, parts, *hidden, "self_attention.layernorm_qkv",
                            "self_attention.proj");
  norm->addParams(ctx, parts, "layernorm_mlp.", *hidden);
  ctx.addMlpParams(parts, "layernorm_mlp.", *activation, *hidden, *ffn,
                   attention->bias);
  if (failed(attention->addInputs(ctx, parts, *hidden)))
    return failure();
  attention->addAttributes(ctx, parts, "self_attn_mask_type",
                           "attn_input_format");
  norm->addAttributes(ctx, parts);
  parts.set("activation", ActivationAttr::get(ctx.context(), *activation));
  parts.set("hidden_dropout", ctx.f64(*hiddenDropout));
  parts.set("apply_residual_connection_post_layernorm",
            ctx.flag(*postLnResidual));
  return ctx.build(TransformerLayerOp::getOperationName(), parts,
                   input->getType(), /*segmented=*/true);
}
