//===- TEOpVerifiers.cpp - shape, dtype and option rules of layer ops
//------===//
#include "dialects/LayerChecks.h"
#include "dialects/TEDialect.h"

#include <cmath>

using namespace mlir;
using namespace mlir::te;

static ArrayRef<int64_t> shapeOf(Value value) {
  return cast<ShapedType>(value.getType()).getShape();
}

static SmallVector<int64_t> withLastDim(ArrayRef<int64_t> shape, int64_t last) {
  SmallVector<int64_t> result(shape.drop_back());
  result.push_back(last);
  return result;
}

static LogicalResult verifyEps(LayerChecker &checker, StringRef name,
                               double eps) {
  if (!(eps >= 0.0) || std::isinf(eps))
    return checker.emitError()
           << "'" << name << "' must be finite and >= 0, got " << eps;
  return success();
}

static LogicalResult verifyDropout(LayerChecker &checker, StringRef name,
                                   double rate) {
  if (!(rate >= 0.0 && rate < 1.0))
    return checker.emitError()
           << "'" << name << "' must be in [0, 1), got " << rate;
  return success();
}

static LogicalResult verifyLnOutput(LayerChecker &checker, bool requested,
                                    Value lnOutput, ArrayRef<int64_t> shape) {
  if (requested != static_cast<bool>(lnOutput))
    return checker.emitError()
           << "'ln_output' result must be present exactly when "
              "'return_layernorm_output' is set";
  return checker.optionalParam(lnOutput, "ln_output", shape, "like 'input'");
}

/// Token count of a GEMM fed by `input`, as FP8.md's rules name it; with
/// sequence parallelism the GEMM reads the `ranks` ranks' tokens gathered.
static Fp8Dim tokenDim(Value input, int64_t ranks = 1) {
  return {ranks > 1 ? "the token count (product of the leading dims of "
                      "'input', times tp_size: sequence_parallel gathers them)"
                    : "the token count (product of the leading dims of "
                      "'input')",
          leadingDimsProduct(cast<ShapedType>(input.getType())) * ranks, 8};
}

/// `sequence_parallel` needs a tensor-parallel layer; returns the number of
/// ranks whose slices of dim 0 the layer's GEMMs gather (1 without it).
static FailureOr<int64_t> verifySequenceParallel(LayerChecker &checker,
                                                 int64_t tpSize,
                                                 bool sequenceParallel) {
  if (!sequenceParallel)
    return int64_t(1);
  if (tpSize < 2)
    return checker.emitError()
           << "'sequence_parallel' needs 'tp_size' > 1, got " << tpSize;
  return tpSize;
}

/// `shape` with its dim 0 multiplied by `ranks` (the whole tensor of which
/// a sequence-parallel rank holds a slice).
static SmallVector<int64_t> wholeShape(ArrayRef<int64_t> shape, int64_t ranks) {
  SmallVector<int64_t> whole(shape);
  if (!whole.empty())
    whole.front() *= ranks;
  return whole;
}

/// `tp_size` >= 1 and, for the Linear layers, the split a tensor-parallel
/// one needs (`row` only where the layer allows it).
static LogicalResult verifyTensorParallel(LayerChecker &checker, int64_t tpSize,
                                          std::optional<ParallelMode> mode,
                                          bool hasMode, bool rowAllowed) {
  if (tpSize < 1)
    return checker.emitError() << "'tp_size' must be >= 1, got " << tpSize;
  if (hasMode && tpSize > 1 && !mode)
    return checker.emitError() << "'tp_size' " << tpSize
                               << " needs a 'parallel_mode' (column or row)";
  if (mode == ParallelMode::row && !rowAllowed)
    return checker.emitError()
           << "'parallel_mode' must be column: the norm's input is not split";
  return success();
}

/// A tensor-parallel attention block holds heads / tp_size heads: their
/// width cannot come from the hidden size.
static LogicalResult verifyAttentionTensorParallel(LayerChecker &checker,
                                                   int64_t tpSize,
                                                   bool hasKvChannels) {
  if (failed(verifyTensorParallel(checker, tpSize, std::nullopt,
                                  /*hasMode=*/false, /*rowAllowed=*/false)))
    return failure();
  if (tpSize > 1 && !hasKvChannels)
    return checker.emitError()
           << "'tp_size' " << tpSize
           << " needs 'kv_channels': the head counts are one rank's";
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  LayerChecker checker(*this);
  if (failed(checker.floatTensor(getInput(), "input")))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  if (failed(checker.normParams(Normalization::LayerNorm, getWeight(),
                                getBias(), "weight", "bias", shape.back())) ||
      failed(checker.param(getOutput(), "output", shape, "like 'input'")))
    return failure();
  return verifyEps(checker, "eps", getEps().convertToDouble());
}

LogicalResult RMSNormOp::verify() {
  LayerChecker checker(*this);
  if (failed(checker.floatTensor(getInput(), "input")))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  if (failed(checker.normParams(Normalization::RMSNorm, getWeight(), Value(),
                                "weight", "bias", shape.back())) ||
      failed(checker.param(getOutput(), "output", shape, "like 'input'")))
    return failure();
  return verifyEps(checker, "eps", getEps().convertToDouble());
}

//===----------------------------------------------------------------------===//
// GEMM layers
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  LayerChecker checker(*this);
  if (failed(verifyTensorParallel(checker, getTpSize(), getParallelMode(),
                                  /*hasMode=*/true, /*rowAllowed=*/true)))
    return failure();
  if (failed(checker.floatTensor(getInput(), "input", 2)) ||
      failed(checker.floatTensor(getWeight(), "weight", 2)))
    return failure();
  FailureOr<int64_t> gathered =
      verifySequenceParallel(checker, getTpSize(), getSequenceParallel());
  if (failed(gathered))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  int64_t in = shape.back(), out = shapeOf(getWeight())[0];
  bool tp = getTpSize() > 1;
  bool row = getParallelMode() == ParallelMode::row;
  // Sequence parallelism: a column-parallel GEMM gathers the ranks' slices
  // of dim 0, a row-parallel one scatters its sum over them.
  SmallVector<int64_t> outShape = withLastDim(shape, out);
  StringRef outRule = "[leading dims of 'input', out_features]";
  if (*gathered > 1 && !row) {
    outShape.front() *= *gathered;
    outRule = "[dim 0 of 'input' * tp_size, other leading dims of 'input', "
              "out_features] (sequence_parallel)";
  } else if (*gathered > 1) {
    if (shape.front() % *gathered != 0)
      return checker.emitError()
             << "dim 0 of 'input' (" << shape.front()
             << ") must be divisible by tp_size (" << *gathered
             << "): sequence_parallel scatters it over the ranks";
    outShape.front() /= *gathered;
    outRule = "[dim 0 of 'input' / tp_size, other leading dims of 'input', "
              "out_features] (sequence_parallel)";
  }
  if (failed(checker.param(getWeight(), "weight", {out, in},
                           "[out_features, in_features]")) ||
      failed(
          checker.optionalParam(getBias(), "bias", {out}, "[out_features]")) ||
      failed(checker.param(getOutput(), "output", outShape, outRule)))
    return failure();
  return checker.fp8Dims(
      getFp8RecipeAttr(),
      {tokenDim(getInput(), row ? 1 : *gathered),
       {tp && row ? "in_features / tp_size" : "in_features", in, 16},
       {tp && !row ? "out_features / tp_size" : "out_features", out, 16}});
}

LogicalResult LayerNormLinearOp::verify() {
  LayerChecker checker(*this);
  if (failed(verifyTensorParallel(checker, getTpSize(), getParallelMode(),
                                  /*hasMode=*/false, /*rowAllowed=*/false)))
    return failure();
  if (failed(checker.floatTensor(getInput(), "input", 2)) ||
      failed(checker.floatTensor(getWeight(), "weight", 2)))
    return failure();
  FailureOr<int64_t> gathered =
      verifySequenceParallel(checker, getTpSize(), getSequenceParallel());
  if (failed(gathered))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  int64_t in = shape.back(), out = shapeOf(getWeight())[0];
  if (failed(checker.normParams(getNormalization(), getLnWeight(), getLnBias(),
                                "ln_weight", "ln_bias", in)) ||
      failed(checker.param(getWeight(), "weight", {out, in},
                           "[out_features, in_features]")) ||
      failed(
          checker.optionalParam(getBias(), "bias", {out}, "[out_features]")) ||
      failed(checker.param(
          getOutput(), "output", withLastDim(wholeShape(shape, *gathered), out),
          *gathered > 1 ? "[dim 0 of 'input' * tp_size, other leading dims of "
                          "'input', out_features] (sequence_parallel)"
                        : "[leading dims of 'input', out_features]")) ||
      failed(verifyLnOutput(checker, getReturnLayernormOutput(), getLnOutput(),
                            shape)) ||
      failed(verifyEps(checker, "eps", getEps().convertToDouble())))
    return failure();
  return checker.fp8Dims(
      getFp8RecipeAttr(),
      {tokenDim(getInput(), *gathered),
       {"in_features", in, 16},
       {getTpSize() > 1 ? "out_features / tp_size" : "out_features", out, 16}});
}

LogicalResult LayerNormMLPOp::verify() {
  LayerChecker checker(*this);
  if (failed(verifyTensorParallel(checker, getTpSize(), std::nullopt,
                                  /*hasMode=*/false, /*rowAllowed=*/false)))
    return failure();
  if (failed(checker.floatTensor(getInput(), "input", 2)))
    return failure();
  FailureOr<int64_t> gathered =
      verifySequenceParallel(checker, getTpSize(), getSequenceParallel());
  if (failed(gathered))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  int64_t hidden = shape.back();
  if (failed(checker.normParams(getNormalization(), getLnWeight(), getLnBias(),
                                "ln_weight", "ln_bias", hidden)))
    return failure();
  FailureOr<int64_t> ffn =
      checker.mlpParams(getActivation(), getFc1Weight(), getFc1Bias(),
                        getFc2Weight(), getFc2Bias(), hidden);
  if (failed(ffn) ||
      failed(checker.param(getOutput(), "output", shape, "like 'input'")) ||
      failed(verifyLnOutput(checker, getReturnLayernormOutput(), getLnOutput(),
                            shape)) ||
      failed(verifyEps(checker, "eps", getEps().convertToDouble())))
    return failure();
  return checker.fp8Dims(
      getFp8RecipeAttr(),
      {tokenDim(getInput(), *gathered),
       {"hidden_size", hidden, 16},
       {getTpSize() > 1 ? "ffn_hidden_size / tp_size" : "ffn_hidden_size", *ffn,
        16}});
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

static bool maskTypeNeedsMask(AttnMaskType type) {
  return type == AttnMaskType::padding ||
         type == AttnMaskType::padding_causal ||
         type == AttnMaskType::padding_causal_bottom_right ||
         type == AttnMaskType::arbitrary;
}

/// Padding masks are [b, 1, 1, s_kv]; an arbitrary mask may broadcast its
/// batch and head dims. `typeName` is the op's mask-type attribute.
static LogicalResult verifyMask(LayerChecker &checker, StringRef typeName,
                                AttnMaskType type, Value mask, int64_t batch,
                                int64_t heads, int64_t seqQ, int64_t seqKV,
                                StringRef maskName = "mask") {
  if (maskTypeNeedsMask(type) != static_cast<bool>(mask))
    return checker.emitError()
           << typeName << " = " << stringifyAttnMaskType(type)
           << (mask ? " takes no '" : " requires a '") << maskName
           << "' operand";
  if (!mask)
    return success();
  if (type != AttnMaskType::arbitrary)
    return checker.mask(mask, {batch, 1, 1, seqKV}, "[b, 1, 1, s_kv]",
                        maskName);
  ArrayRef<int64_t> shape = shapeOf(mask);
  int64_t b = shape.size() == 4 && shape[0] == 1 ? 1 : batch;
  int64_t h = shape.size() == 4 && shape[1] == 1 ? 1 : heads;
  return checker.mask(mask, {b, h, seqQ, seqKV},
                      "[b or 1, heads or 1, s_q, s_kv]", maskName);
}

/// The layer ops' names of their bias operands and attributes.
static const AttentionBiasNames kLayerBiasNames = {
    "core_attention_bias_type", "core_attention_bias", "alibi_slopes",
    "bias_requires_grad"};

/// What the layer ops' attention bias is not supported with, if anything.
static StringRef biasUnsupportedWith(bool packed, bool kvCache) {
  return kvCache  ? "a KV cache (inference)"
         : packed ? "packed sequences (thd)"
                  : "";
}

static Type elementOf(Value value) {
  return cast<ShapedType>(value.getType()).getElementType();
}

/// Positions of the sequence and batch dims for a layout.
static std::pair<unsigned, unsigned> seqBatchDims(QkvFormat format) {
  return format == QkvFormat::sbhd ? std::make_pair(0u, 1u)
                                   : std::make_pair(1u, 0u);
}

/// `value` is a float tensor of rank exactly 4, laid out as `format` says.
static LogicalResult verifyAttentionInput(LayerChecker &checker, Value value,
                                          StringRef name, QkvFormat format) {
  if (failed(checker.floatTensor(value, name)))
    return failure();
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() != 4)
    return checker.emitError()
           << "'" << name << "' must have rank 4 ("
           << (format == QkvFormat::sbhd ? "[s, b, h, d] for sbhd"
                                         : "[b, s, h, d] for bshd")
           << "), got " << type;
  return success();
}

/// I64Attr getters return unsigned values; a negative count must stay
/// negative so that its diagnostic shows what the user wrote.
static std::optional<int64_t> signedValue(IntegerAttr attr) {
  return attr ? std::optional<int64_t>(attr.getInt()) : std::nullopt;
}

/// te.dot_product_attention on packed sequences: q [t, heads, head_dim],
/// k/v [t_kv, gqa_groups, head_dim], output [t, heads * head_dim].
static LogicalResult verifyPackedAttention(DotProductAttentionOp op,
                                           LayerChecker &checker) {
  for (auto [value, name] :
       {std::pair(op.getQuery(), "query"), std::pair(op.getKey(), "key"),
        std::pair(op.getValue(), "value")}) {
    if (failed(checker.floatTensor(value, name)))
      return failure();
    if (shapeOf(value).size() != 3)
      return op.emitOpError()
             << "'" << name << "' must have rank 3 ([t, h, d] for thd), got "
             << value.getType();
  }
  ArrayRef<int64_t> q = shapeOf(op.getQuery()), k = shapeOf(op.getKey());
  int64_t heads = q[1], headDim = q[2], groups = k[1];
  if (failed(checker.param(op.getKey(), "key", {k[0], groups, headDim},
                           "[t_kv, gqa_groups, head_dim]")) ||
      failed(checker.param(op.getValue(), "value", {k[0], groups, headDim},
                           "[t_kv, gqa_groups, head_dim]")))
    return failure();
  if (heads % groups != 0)
    return op.emitOpError()
           << "query heads (" << heads
           << ") must be a multiple of key/value heads (" << groups << ")";
  FailureOr<int64_t> batch =
      verifyPackedSequences(op, op.getCuSeqlensQ(), "cu_seqlens_q",
                            signedValue(op.getMaxSeqlenQAttr()), "max_seqlen_q",
                            op.getAttnMaskType(), "attn_mask_type");
  if (failed(batch))
    return failure();
  if (op.getKeyCache() || op.getValueCache() || op.getPageTable()) {
    if (failed(verifyKvCache(
            op, op.getKeyCache(), op.getValueCache(), op.getPageTable(),
            op.getCuSeqlensQ(), op.getCuSeqlensKv(),
            /*cuSeqlensKvIsCacheOnly=*/false,
            /*packed=*/true, groups, headDim,
            cast<ShapedType>(op.getQuery().getType()).getElementType(),
            signedValue(op.getMaxSeqlenQAttr()),
            op.getWindowSize().has_value())))
      return failure();
    // The keys are the step's new tokens, packed like the queries.
    if (k[0] != q[0])
      return op.emitOpError()
             << "with a KV cache, 'key' and 'value' are the new tokens, "
                "packed like 'query' ("
             << q[0] << " tokens), got " << k[0];
  }
  if (Value cuKv = op.getCuSeqlensKv())
    if (cuKv.getType() != op.getCuSeqlensQ().getType())
      return op.emitOpError()
             << "'cu_seqlens_kv' must be like "
                "'cu_seqlens_q' ("
             << op.getCuSeqlensQ().getType() << "), got " << cuKv.getType();
  if (std::optional<int64_t> maxKv = signedValue(op.getMaxSeqlenKvAttr()))
    if (*maxKv < 1)
      return op.emitOpError() << "'max_seqlen_kv' must be >= 1, got " << *maxKv;
  if (op.getAttentionMask() || op.getQueryMask())
    return op.emitOpError() << "packed sequences (thd) take their lengths "
                               "from cu_seqlens, not from 'mask' or "
                               "'query_mask'";
  return failure(
      failed(checker.param(op.getOutput(), "output", {q[0], heads * headDim},
                           "[t, heads * head_dim]")) ||
      failed(verifyDropout(checker, "attention_dropout",
                           op.getAttentionDropout().convertToDouble())) ||
      failed(
          verifyAttentionWindow(op, op.getWindowSize(), op.getAttnMaskType())));
}

LogicalResult DotProductAttentionOp::verify() {
  LayerChecker checker(*this);
  QkvFormat format = getQkvFormat();
  if (FP8RecipeAttrInterface recipe = getFp8RecipeAttr()) {
    auto delayed = dyn_cast<DelayedScalingAttr>(recipe);
    if (!delayed || !delayed.getFp8Dpa())
      return emitOpError() << "runs no GEMM, so its 'fp8_recipe' must be a "
                              "#te.delayed_scaling with fp8_dpa = true (FP8 "
                              "attention), got "
                           << recipe;
  }
  if (std::optional<APFloat> scale = getSoftmaxScale())
    if (!(scale->convertToDouble() > 0.0) || scale->isInfinity())
      return emitOpError() << "'softmax_scale' must be finite and > 0, got "
                           << scale->convertToDouble();
  AttentionBias bias = layerAttentionBias(*this);
  if (getCpSize() != 1 || getCpRank() != 0 || getCpCommType() != kCpAllGather) {
    ArrayRef<int64_t> q = shapeOf(getQuery()), k = shapeOf(getKey());
    unsigned seqDim = format == QkvFormat::bshd ? 1 : 0;
    bool packed = format == QkvFormat::thd;
    ContextParallel cp{getCpSize(),
                       getCpRank(),
                       format,
                       getAttnMaskType(),
                       "attn_mask_type",
                       getWindowSize().has_value(),
                       bias,
                       getFp8RecipeAttr(),
                       bool(getKeyCache()),
                       !packed && (getQueryMask() || q.size() != k.size() ||
                                   q[seqDim] != k[seqDim]),
                       packed ? 0 : q[seqDim]};
    cp.commType = getCpCommType();
    cp.heads = q.size() == 4 ? q[2] : 0;
    cp.groups = k.size() == 4 ? k[2] : 0;
    if (failed(verifyLayerContextParallel(*this, cp)))
      return failure();
  }
  if (format == QkvFormat::thd)
    return failure(
        failed(verifyAttentionBias(
            *this, kLayerBiasNames, bias, {}, Type(), getAttnMaskType(),
            biasUnsupportedWith(/*packed=*/true, bool(getKeyCache())))) ||
        failed(verifyPackedAttention(*this, checker)));
  if (getCuSeqlensQ() || getCuSeqlensKv() || getMaxSeqlenQAttr() ||
      getMaxSeqlenKvAttr())
    return emitOpError() << "'cu_seqlens_q', 'cu_seqlens_kv', 'max_seqlen_q' "
                            "and 'max_seqlen_kv' belong to packed sequences "
                            "(qkv_format = thd)";
  if (getKeyCache() || getValueCache() || getPageTable())
    return emitOpError() << "a KV cache needs packed new tokens (qkv_format "
                            "= thd, with 'cu_seqlens_q')";
  if (failed(verifyAttentionInput(checker, getQuery(), "query", format)) ||
      failed(verifyAttentionInput(checker, getKey(), "key", format)) ||
      failed(verifyAttentionInput(checker, getValue(), "value", format)))
    return failure();
  auto [seqDim, batchDim] = seqBatchDims(format);
  ArrayRef<int64_t> q = shapeOf(getQuery()), k = shapeOf(getKey());
  int64_t heads = q[2], headDim = q[3], groups = k[2];
  StringRef rule = getQkvFormat() == QkvFormat::sbhd
                       ? "[s_kv, b, gqa_groups, head_dim]"
                       : "[b, s_kv, gqa_groups, head_dim]";
  SmallVector<int64_t> kvShape(k);
  kvShape[batchDim] = q[batchDim];
  kvShape[3] = headDim;
  if (failed(checker.param(getKey(), "key", kvShape, rule)) ||
      failed(checker.param(getValue(), "value", kvShape, rule)))
    return failure();
  if (heads % groups != 0)
    return emitOpError() << "query heads (" << heads
                         << ") must be a multiple of key/value heads ("
                         << groups << ")";
  SmallVector<int64_t> outShape(q.take_front(2));
  outShape.push_back(heads * headDim);
  if (failed(checker.param(getOutput(), "output", outShape,
                           getQkvFormat() == QkvFormat::sbhd
                               ? "[s_q, b, heads * head_dim]"
                               : "[b, s_q, heads * head_dim]")) ||
      failed(verifyMask(checker, "attn_mask_type", getAttnMaskType(),
                        getAttentionMask(), q[batchDim], heads, q[seqDim],
                        k[seqDim])) ||
      failed(verifyAttentionBias(*this, kLayerBiasNames, bias,
                                 {q[batchDim], heads, q[seqDim], k[seqDim]},
                                 elementOf(getQuery()), getAttnMaskType())) ||
      failed(verifyDropout(checker, "attention_dropout",
                           getAttentionDropout().convertToDouble())) ||
      failed(verifyAttentionWindow(*this, getWindowSize(), getAttnMaskType())))
    return failure();
  if (Value queryMask = getQueryMask()) {
    if (getAttnMaskType() != AttnMaskType::padding &&
        getAttnMaskType() != AttnMaskType::padding_causal)
      return emitOpError() << "'query_mask' (padded queries) needs the "
                              "padding or padding_causal mask type";
    if (failed(checker.mask(queryMask, {q[batchDim], 1, 1, q[seqDim]},
                            "[b, 1, 1, s_q]", "query_mask")))
      return failure();
  }
  return success();
}

namespace {
/// The self-attention block shared by MultiheadAttention and
/// TransformerLayer.
struct AttentionBlock {
  Value input, qkvWeight, qkvBias, projWeight, projBias, mask, rotary;
  /// Cross-attention: the keys' and values' source and projection (null
  /// for self-attention, where qkvWeight holds q, k and v).
  Value encoderOutput, kvWeight, kvBias;
  int64_t heads;
  std::optional<int64_t> groups, kvChannels;
  AttnMaskType maskType;
  QkvFormat format;
  double dropout;
  std::optional<ArrayRef<int64_t>> window;
  /// The op's names for `maskType` and the block's operands, for
  /// diagnostics.
  StringRef maskTypeName = "attn_mask_type";
  /// Prefix of the projection operands' names, and the name of the QKV
  /// projection's operands (`<qkvName>_weight`, `<qkvName>_bias`).
  StringRef prefix = "", qkvName = "qkv", maskName = "mask";
  /// Cross-attention's padded queries (operand `queryMaskName`), or null.
  Value queryMask = {};
  StringRef queryMaskName = "query_mask";
  /// Packed sequences (format thd): where each starts, and the longest.
  Value cuSeqlens = {};
  std::optional<int64_t> maxSeqlen = std::nullopt;
  /// Sequence parallelism: the input and encoder_output are one of
  /// `gatheredRanks` slices of dim 0, gathered before the projections.
  int64_t gatheredRanks = 1;
  /// The attention's bias (docs/attention-bias.md), and whether the block
  /// attends over a KV cache, which takes none.
  AttentionBias bias = {};
  bool kvCache = false;
  /// Context parallelism: the input holds one of `cpSize` ranks' tokens,
  /// the rotary table the whole sequence's.
  int64_t cpSize = 1;
};
} // namespace

/// The context parallelism of a self-attention block of `op`
/// (`cross` when it has an encoder_output).
template <typename OpT>
static LogicalResult
verifyBlockContextParallel(OpT op, const AttentionBlock &block, bool cross) {
  ArrayRef<int64_t> in = shapeOf(block.input);
  unsigned seqDim = block.format == QkvFormat::bshd ? 1 : 0;
  ContextParallel cp{op.getCpSize(),
                     op.getCpRank(),
                     block.format,
                     block.maskType,
                     block.maskTypeName,
                     block.window.has_value(),
                     block.bias,
                     op.getFp8RecipeAttr(),
                     block.kvCache,
                     cross,
                     in.size() > seqDim ? in[seqDim] : 0};
  cp.commType = op.getCpCommType();
  cp.heads = block.heads;
  cp.groups = block.groups.value_or(block.heads);
  return verifyLayerContextParallel(op, cp);
}

/// An attention layer's `sequence_parallel` (not with a KV cache: inference
/// attends to the whole cached sequence on every rank).
static FailureOr<int64_t> verifyAttentionSequenceParallel(LayerChecker &checker,
                                                          int64_t tpSize,
                                                          bool sequenceParallel,
                                                          Value keyCache) {
  if (sequenceParallel && keyCache)
    return checker.emitError() << "'sequence_parallel' is not supported with "
                                  "a KV cache ('key_cache')";
  return verifySequenceParallel(checker, tpSize, sequenceParallel);
}

/// Checks a cross-attention block's `encoder_output` ([s_kv, b, hidden] in
/// the block's layout) and returns s_kv.
static FailureOr<int64_t> verifyEncoderOutput(LayerChecker &checker,
                                              const AttentionBlock &block) {
  SmallVector<int64_t> in =
      wholeShape(shapeOf(block.input), block.gatheredRanks);
  if (failed(checker.floatTensor(block.encoderOutput, "encoder_output")))
    return failure();
  SmallVector<int64_t> enc =
      wholeShape(shapeOf(block.encoderOutput), block.gatheredRanks);
  auto [seqDim, batchDim] = seqBatchDims(block.format);
  if (enc.size() != 3 || enc[batchDim] != in[batchDim] || enc[2] != in[2])
    return checker.emitError()
           << "'encoder_output' must be "
           << (block.format == QkvFormat::sbhd ? "[s_kv, b, hidden_size]"
                                               : "[b, s_kv, hidden_size]")
           << " with the input's batch (" << in[batchDim] << ") and hidden ("
           << in[2] << "), got " << formatShape(enc);
  if (block.rotary)
    return checker.emitError() << "'rotary_pos_emb' is not supported with "
                                  "cross-attention ('encoder_output')";
  if (block.window)
    return checker.emitError() << "'window_size' is not supported with "
                                  "cross-attention ('encoder_output')";
  return enc[seqDim];
}

/// A self-attention block on packed sequences: its cu_seqlens and
/// max_seqlen, no mask operands and no cross-attention.
static LogicalResult verifyPackedAttentionBlock(LayerChecker &checker,
                                                const AttentionBlock &block,
                                                bool cross) {
  if (cross)
    return checker.emitError() << "packed sequences (thd) are supported in "
                                  "self-attention only, not with "
                                  "'encoder_output'";
  if (failed(verifyPackedSequences(checker.getOperation(), block.cuSeqlens,
                                   "cu_seqlens", block.maxSeqlen, "max_seqlen",
                                   block.maskType, block.maskTypeName)))
    return failure();
  if (block.mask || block.queryMask)
    return checker.emitError()
           << "packed sequences (thd) take their lengths from 'cu_seqlens', "
              "not from '"
           << (block.mask ? block.maskName : block.queryMaskName) << "'";
  return success();
}

/// Checks the block and appends its FP8 GEMM dims to `fp8Dims`.
static LogicalResult verifyAttentionBlock(LayerChecker &checker,
                                          const AttentionBlock &block,
                                          SmallVectorImpl<Fp8Dim> &fp8Dims) {
  // Sequence parallelism: the attention sees the whole gathered tensor.
  SmallVector<int64_t> shape =
      wholeShape(shapeOf(block.input), block.gatheredRanks);
  bool packed = block.format == QkvFormat::thd;
  if (packed && block.gatheredRanks > 1)
    return checker.emitError() << "'sequence_parallel' is not supported with "
                                  "packed sequences (thd)";
  if (shape.size() != (packed ? 2 : 3))
    return checker.emitError()
           << "'input' must have rank "
           << (packed ? "2 ([t, hidden] for thd)"
                      : "3 ([s, b, hidden] for sbhd, [b, s, hidden] for "
                        "bshd)")
           << ", got rank " << shape.size();
  if (!packed && (block.cuSeqlens || block.maxSeqlen))
    return checker.emitError() << "'cu_seqlens' and 'max_seqlen' belong to "
                                  "packed sequences (thd)";
  int64_t hidden = shape.back();
  if (block.heads < 1)
    return checker.emitError()
           << "'num_attention_heads' must be >= 1, got " << block.heads;
  if (!block.kvChannels && hidden % block.heads != 0)
    return checker.emitError()
           << "hidden size (" << hidden
           << ") must be divisible by num_attention_heads (" << block.heads
           << ") unless kv_channels is given";
  if (block.kvChannels && *block.kvChannels < 1)
    return checker.emitError()
           << "'kv_channels' must be >= 1, got " << *block.kvChannels;
  int64_t groups = block.groups.value_or(block.heads);
  if (groups < 1 || block.heads % groups != 0)
    return checker.emitError()
           << "num_attention_heads (" << block.heads
           << ") must be divisible by num_gqa_groups (" << groups << ")";
  int64_t headDim = block.kvChannels.value_or(hidden / block.heads);
  bool cross = static_cast<bool>(block.encoderOutput);
  int64_t qkvRows = (block.heads + (cross ? 0 : 2 * groups)) * headDim;
  int64_t kvRows = 2 * groups * headDim;
  int64_t projIn = block.heads * headDim;
  auto name = [&](StringRef operand) {
    if (operand.consume_front("qkv"))
      return (block.qkvName + operand).str();
    return (block.prefix + operand).str();
  };
  if (static_cast<bool>(block.qkvBias) != static_cast<bool>(block.projBias))
    return checker.emitError()
           << "'" << name("qkv_bias") << "' and '" << name("proj_bias")
           << "' must be both present or both absent";
  if (!cross && (block.kvWeight || block.kvBias))
    return checker.emitError()
           << "'" << name("kv_weight") << "' and '" << name("kv_bias")
           << "' belong to cross-attention: they need 'encoder_output'";
  if (cross &&
      static_cast<bool>(block.kvBias) != static_cast<bool>(block.qkvBias))
    return checker.emitError()
           << "'" << name("kv_bias") << "' and '" << name("qkv_bias")
           << "' must be both present or both absent";
  StringRef qkvRule = cross ? "[num_attention_heads * kv_channels, "
                              "hidden_size] (the query rows)"
                            : "[(num_attention_heads + 2 * num_gqa_groups) * "
                              "kv_channels, hidden_size]";
  if (failed(checker.param(block.qkvWeight, name("qkv_weight"),
                           {qkvRows, hidden}, qkvRule)) ||
      failed(checker.optionalParam(
          block.qkvBias, name("qkv_bias"), {qkvRows},
          cross ? "[num_attention_heads * kv_channels]"
                : "[(num_attention_heads + 2 * num_gqa_groups) * "
                  "kv_channels]")) ||
      failed(checker.param(block.projWeight, name("proj_weight"),
                           {hidden, projIn},
                           "[hidden_size, num_attention_heads * "
                           "kv_channels]")) ||
      failed(checker.optionalParam(block.projBias, name("proj_bias"), {hidden},
                                   "[hidden_size]")))
    return failure();
  auto [seqDim, batchDim] = seqBatchDims(block.format);
  // thd: the rotary table has a row per token.
  int64_t seq = shape[packed ? 0 : seqDim];
  if (packed && failed(verifyPackedAttentionBlock(checker, block, cross)))
    return failure();
  int64_t batch = packed ? 0 : shape[batchDim], seqKV = seq;
  if (cross) {
    FailureOr<int64_t> encoderSeq = verifyEncoderOutput(checker, block);
    if (failed(encoderSeq) ||
        failed(checker.param(block.kvWeight, name("kv_weight"),
                             {kvRows, hidden},
                             "[2 * num_gqa_groups * kv_channels, "
                             "hidden_size] (rows of k, then v)")) ||
        failed(checker.optionalParam(block.kvBias, name("kv_bias"), {kvRows},
                                     "[2 * num_gqa_groups * kv_channels]")))
      return failure();
    seqKV = *encoderSeq;
  }
  if (block.queryMask) {
    bool padding = block.maskType == AttnMaskType::padding ||
                   block.maskType == AttnMaskType::padding_causal;
    if (!cross || !padding)
      return checker.emitError()
             << "'" << block.queryMaskName
             << "' (padded queries) needs cross-attention with the padding "
                "or padding_causal mask type";
    if (failed(checker.mask(block.queryMask, {batch, 1, 1, seq}, "[b, 1, 1, s]",
                            block.queryMaskName)))
      return failure();
  }
  if ((!packed && failed(verifyMask(checker, block.maskTypeName, block.maskType,
                                    block.mask, batch, block.heads, seq, seqKV,
                                    block.maskName))) ||
      failed(verifyAttentionBias(checker.getOperation(), kLayerBiasNames,
                                 block.bias, {batch, block.heads, seq, seqKV},
                                 elementOf(block.input), block.maskType,
                                 biasUnsupportedWith(packed, block.kvCache))) ||
      failed(verifyDropout(checker, "attention_dropout", block.dropout)) ||
      failed(verifyAttentionWindow(checker.getOperation(), block.window,
                                   block.maskType)))
    return failure();
  if (block.rotary) {
    // [s, 1, 1, r]: the first r channels of each head rotate, in pairs.
    auto type = cast<RankedTensorType>(block.rotary.getType());
    ArrayRef<int64_t> shape = type.getShape();
    int64_t rotated = shape.size() == 4 ? shape[3] : 0;
    if (!type.getElementType().isF32() || shape.size() != 4 ||
        shape[0] != seq * block.cpSize || shape[1] != 1 || shape[2] != 1 ||
        rotated <= 0 || rotated > headDim || rotated % 2 != 0)
      return checker.emitError()
             << "'rotary_pos_emb' must be f32 of shape "
             << (packed ? "[t, 1, 1, r] (each token's angles) = ["
                 : block.cpSize > 1
                     ? "[s, 1, 1, r] (the whole sequence's, cp_size times the "
                       "local one) = ["
                     : "[s, 1, 1, r] = [")
             << seq * block.cpSize
             << ", 1, 1, r] with r even and at most kv_channels (" << headDim
             << "), got " << type;
  }
  fp8Dims.append(
      {tokenDim(block.input, block.gatheredRanks),
       {"hidden_size", hidden, 16},
       {"the QKV width ((heads + 2 * gqa_groups) * kv_channels)", qkvRows, 16},
       {"num_attention_heads * kv_channels", projIn, 16}});
  if (cross)
    fp8Dims.append(
        {{"the encoder token count (product of the leading dims of "
          "'encoder_output')",
          leadingDimsProduct(cast<ShapedType>(block.encoderOutput.getType())) *
              block.gatheredRanks,
          8},
         {"the KV width (2 * gqa_groups * kv_channels)", kvRows, 16}});
  return success();
}

LogicalResult MultiheadAttentionOp::verify() {
  LayerChecker checker(*this);
  if (failed(verifyAttentionTensorParallel(checker, getTpSize(),
                                           getKvChannels().has_value())))
    return failure();
  if (failed(checker.floatTensor(getInput(), "input")))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  if (!getLnWeight() && getLnBias())
    return emitOpError() << "'ln_bias' needs 'ln_weight' (input "
                            "normalization is on when 'ln_weight' is given)";
  if (getLnWeight() &&
      failed(checker.normParams(getNormalization(), getLnWeight(), getLnBias(),
                                "ln_weight", "ln_bias", shape.back())))
    return failure();
  AttentionBlock block{getInput(),
                       getQkvWeight(),
                       getQkvBias(),
                       getProjWeight(),
                       getProjBias(),
                       getAttentionMask(),
                       getRotaryPosEmb(),
                       getEncoderOutput(),
                       getKvWeight(),
                       getKvBias(),
                       getNumAttentionHeadsAttr().getInt(),
                       signedValue(getNumGqaGroupsAttr()),
                       signedValue(getKvChannelsAttr()),
                       getAttnMaskType(),
                       getQkvFormat(),
                       getAttentionDropout().convertToDouble(),
                       getWindowSize()};
  block.queryMask = getQueryMask();
  block.cuSeqlens = getCuSeqlens();
  block.bias = layerAttentionBias(*this);
  block.kvCache = static_cast<bool>(getKeyCache());
  block.maxSeqlen = signedValue(getMaxSeqlenAttr());
  FailureOr<int64_t> gathered = verifyAttentionSequenceParallel(
      checker, getTpSize(), getSequenceParallel(), getKeyCache());
  if (failed(gathered))
    return failure();
  block.gatheredRanks = *gathered;
  block.cpSize = getCpSize();
  if (failed(
          verifyBlockContextParallel(*this, block, bool(getEncoderOutput()))))
    return failure();
  if (getReturnLayernormOutput() && !getLnWeight())
    return emitOpError() << "'return_layernorm_output' needs the input "
                            "normalization ('ln_weight')";
  SmallVector<Fp8Dim> fp8Dims;
  if (failed(verifyAttentionBlock(checker, block, fp8Dims)) ||
      failed(verifyKvCache(
          *this, getKeyCache(), getValueCache(), getPageTable(), getCuSeqlens(),
          getCuSeqlensKv(),
          /*cuSeqlensKvIsCacheOnly=*/true, getQkvFormat() == QkvFormat::thd,
          getNumKVHeads(), getHeadDim(),
          cast<ShapedType>(getInput().getType()).getElementType(),
          block.maxSeqlen, getWindowSize().has_value())) ||
      failed(checker.param(getOutput(), "output", shape, "like 'input'")) ||
      failed(verifyLnOutput(checker, getReturnLayernormOutput(), getLnOutput(),
                            shape)) ||
      failed(verifyEps(checker, "layernorm_epsilon",
                       getLayernormEpsilon().convertToDouble())))
    return failure();
  return checker.fp8Dims(getFp8RecipeAttr(), fp8Dims);
}

/// A decoder layer's cross-attention block (the inter_* operands, present
/// exactly with `encoder_output`), checked like `self` but over the
/// encoder's output.
static LogicalResult verifyDecoderBlock(TransformerLayerOp op,
                                        LayerChecker &checker,
                                        const AttentionBlock &self,
                                        SmallVectorImpl<Fp8Dim> &fp8Dims) {
  if (!op.getEncoderOutput()) {
    bool anyInter = op.getInterLnWeight() || op.getInterLnBias() ||
                    op.getInterQWeight() || op.getInterQBias() ||
                    op.getInterKvWeight() || op.getInterKvBias() ||
                    op.getInterProjWeight() || op.getInterProjBias() ||
                    op.getEncDecMask() || op.getEncDecQueryMask();
    if (anyInter || op.getEncDecAttnMaskType() != AttnMaskType::no_mask)
      return checker.emitError()
             << "the inter_* operands, 'enc_dec_mask' and "
                "'enc_dec_attn_mask_type' belong to a decoder layer: they "
                "need 'encoder_output'";
    return success();
  }
  if (!op.getInterQWeight() || !op.getInterKvWeight() ||
      !op.getInterProjWeight() || !op.getInterLnWeight())
    return checker.emitError()
           << "a decoder layer ('encoder_output') needs 'inter_ln_weight', "
              "'inter_q_weight', 'inter_kv_weight' and 'inter_proj_weight'";
  if (failed(checker.normParams(
          op.getNormalization(), op.getInterLnWeight(), op.getInterLnBias(),
          "inter_ln_weight", "inter_ln_bias", shapeOf(op.getInput()).back())))
    return failure();
  AttentionBlock cross = self;
  cross.qkvWeight = op.getInterQWeight();
  cross.qkvBias = op.getInterQBias();
  cross.kvWeight = op.getInterKvWeight();
  cross.kvBias = op.getInterKvBias();
  cross.projWeight = op.getInterProjWeight();
  cross.projBias = op.getInterProjBias();
  cross.encoderOutput = op.getEncoderOutput();
  cross.mask = op.getEncDecMask();
  cross.maskType = op.getEncDecAttnMaskType();
  cross.rotary = Value();
  cross.window = std::nullopt;
  cross.maskTypeName = "enc_dec_attn_mask_type";
  cross.maskName = "enc_dec_mask";
  cross.queryMask = op.getEncDecQueryMask();
  cross.queryMaskName = "enc_dec_query_mask";
  cross.prefix = "inter_";
  cross.qkvName = "inter_q";
  // The bias belongs to the self-attention.
  cross.bias = {};
  return verifyAttentionBlock(checker, cross, fp8Dims);
}

LogicalResult TransformerLayerOp::verify() {
  LayerChecker checker(*this);
  if (failed(verifyAttentionTensorParallel(checker, getTpSize(),
                                           getKvChannels().has_value())))
    return failure();
  if (failed(checker.floatTensor(getInput(), "input")))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(getInput());
  int64_t hidden = shape.back();
  // output_layernorm: the norm moves from the attention's input to the
  // layer's output.
  bool outputNorm = static_cast<bool>(getOutLnWeight());
  if (outputNorm && (getAttnLnWeight() || getAttnLnBias()))
    return emitOpError() << "'out_ln_weight' (output_layernorm) takes the "
                            "place of 'attn_ln_weight' and 'attn_ln_bias'";
  if (!outputNorm && getOutLnBias())
    return emitOpError() << "'out_ln_bias' needs 'out_ln_weight'";
  if (!outputNorm && !getAttnLnWeight())
    return emitOpError() << "needs 'attn_ln_weight' (or 'out_ln_weight' for "
                            "output_layernorm)";
  if (getParallelAttentionMlp()) {
    // Transformer Engine's constraints on its parallel block.
    StringRef conflict = getEncoderOutput() ? "'encoder_output' (a decoder)"
                         : getApplyResidualConnectionPostLayernorm()
                             ? "'apply_residual_connection_post_layernorm'"
                         : outputNorm ? "'out_ln_weight' (output_layernorm)"
                                      : "";
    if (!conflict.empty())
      return emitOpError() << "'parallel_attention_mlp' is not supported "
                              "with "
                           << conflict;
  }
  if (failed(checker.normParams(
          getNormalization(), outputNorm ? getOutLnWeight() : getAttnLnWeight(),
          outputNorm ? getOutLnBias() : getAttnLnBias(),
          outputNorm ? "out_ln_weight" : "attn_ln_weight",
          outputNorm ? "out_ln_bias" : "attn_ln_bias", hidden)))
    return failure();
  AttentionBlock block{getInput(),
                       getQkvWeight(),
                       getQkvBias(),
                       getProjWeight(),
                       getProjBias(),
                       getAttentionMask(),
                       getRotaryPosEmb(),
                       Value(),
                       Value(),
                       Value(),
                       getNumAttentionHeadsAttr().getInt(),
                       signedValue(getNumGqaGroupsAttr()),
                       signedValue(getKvChannelsAttr()),
                       getSelfAttnMaskType(),
                       getAttnInputFormat(),
                       getAttentionDropout().convertToDouble(),
                       getWindowSize()};
  block.maskTypeName = "self_attn_mask_type";
  block.cuSeqlens = getCuSeqlens();
  block.bias = layerAttentionBias(*this);
  block.kvCache = static_cast<bool>(getKeyCache());
  block.maxSeqlen = signedValue(getMaxSeqlenAttr());
  FailureOr<int64_t> gathered = verifyAttentionSequenceParallel(
      checker, getTpSize(), getSequenceParallel(), getKeyCache());
  if (failed(gathered))
    return failure();
  block.gatheredRanks = *gathered;
  block.cpSize = getCpSize();
  if (failed(
          verifyBlockContextParallel(*this, block, bool(getEncoderOutput()))))
    return failure();
  SmallVector<Fp8Dim> fp8Dims;
  if (failed(verifyAttentionBlock(checker, block, fp8Dims)) ||
      failed(verifyKvCache(
          *this, getKeyCache(), getValueCache(), getPageTable(), getCuSeqlens(),
          getCuSeqlensKv(),
          /*cuSeqlensKvIsCacheOnly=*/true,
          getAttnInputFormat() == QkvFormat::thd, getNumKVHeads(), getHeadDim(),
          cast<ShapedType>(getInput().getType()).getElementType(),
          block.maxSeqlen, getWindowSize().has_value())) ||
      failed(verifyDecoderBlock(*this, checker, block, fp8Dims)) ||
      failed(checker.normParams(getNormalization(), getMlpLnWeight(),
                                getMlpLnBias(), "mlp_ln_weight", "mlp_ln_bias",
                                hidden)))
    return failure();
  FailureOr<int64_t> ffn =
      checker.mlpParams(getActivation(), getFc1Weight(), getFc1Bias(),
                        getFc2Weight(), getFc2Bias(), hidden);
  if (failed(ffn) ||
      failed(checker.param(getOutput(), "output", shape, "like 'input'")) ||
      failed(verifyEps(checker, "layernorm_epsilon",
                       getLayernormEpsilon().convertToDouble())) ||
      failed(verifyDropout(checker, "hidden_dropout",
                           getHiddenDropout().convertToDouble())) ||
      failed(verifyDropout(checker, "drop_path_rate",
                           getDropPathRate().convertToDouble())))
    return failure();
  fp8Dims.push_back({"ffn_hidden_size", *ffn, 16});
  return checker.fp8Dims(getFp8RecipeAttr(), fp8Dims);
}
