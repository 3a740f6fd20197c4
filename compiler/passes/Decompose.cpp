//===- Decompose.cpp - te-decompose: layer ops into primitive ops
//----------===//
//
// Each layer op becomes the primitive ops of its Transformer Engine
// definition. Activations are flattened to [tokens, features] once, so that
// GEMMs, norms, bias adds and residual adds all see 2-D tensors; attention
// reshapes to [d0, d1, heads, head_dim] in the layer's layout and back.
//
//===----------------------------------------------------------------------===//
#include "compiler/passes/Passes.h"
#include "dialects/LayerChecks.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

namespace tejit {
#define GEN_PASS_DEF_TEDECOMPOSE
#include "compiler/passes/Passes.h.inc"
} // namespace tejit

using namespace mlir;
using namespace mlir::te;

namespace {
/// Dropout sites of one layer op; the stream of site `s` of the n-th layer
/// op is 16 * n + s (the interpreter's convention, DropoutRng.h).
enum DropoutSite : int64_t {
  kAttention = 0,
  kAfterAttention = 1,
  kAfterMlp = 2,
  kCrossAttention = 3,
  kAfterCrossAttention = 4,
  kDropPathAfterAttention = 5,
  kDropPathAfterMlp = 6
};

/// The attention block's parameters and options, whichever layer op
/// carries them. Cross-attention when `encoder` is set: `qkvWeight` then
/// holds the query rows and `kvWeight` the k | v rows applied to `encoder`.
struct AttentionParams {
  Value qkvWeight, qkvBias, projWeight, projBias, mask, rotary;
  int64_t heads, kvHeads, headDim;
  AttnMaskType maskType;
  QkvFormat format;
  double dropout;
  DenseI64ArrayAttr window;
  /// GPT-J's rotary layout (adjacent channel pairs).
  bool rotaryInterleaved = false;
  Value encoder = {}, kvWeight = {}, kvBias = {};
  /// Cross-attention's padded queries (i1 [b, 1, 1, s_q]), or null.
  Value queryMask = {};
  int64_t dropoutSite = kAttention;
  /// Packed sequences (format thd): where each starts, and the longest.
  Value cuSeqlens = {};
  int64_t maxSeqlen = 0;
  /// KV cache (inference): each sequence's length after the step, the
  /// caches the new keys and values are stored in, and the page table of
  /// paged caches.
  Value cuSeqlensKv = {}, keyCache = {}, valueCache = {}, pageTable = {};
  /// The bias added to the scaled scores (docs/attention-bias.md).
  AttentionBias bias = {};
};

/// te.attention's packed-sequence operands (format thd only), and the KV
/// caches (with their page table when paged) that make it a
/// te.kv_cache_attention.
struct PackedSequences {
  Value cuSeqlensQ, cuSeqlensKv;
  int64_t maxSeqlenQ = 0, maxSeqlenKv = 0;
  Value keyCache = {}, valueCache = {}, pageTable = {};
};

/// Builds the primitive ops of one layer op, in front of it.
class LayerLowering {
public:
  LayerLowering(Operation *layer, Value rngState, int64_t ordinal,
                bool inference)
      : builder(layer), loc(layer->getLoc()), rngState(rngState),
        recipe(layer->getAttrOfType<FP8RecipeAttrInterface>("fp8_recipe")),
        ordinal(ordinal), inference(inference) {
    if (auto tp = layer->getAttrOfType<IntegerAttr>("tp_size"))
      tpSize = tp.getInt();
    sequenceParallel = tpSize > 1 && layer->hasAttr("sequence_parallel");
    if (auto cp = layer->getAttrOfType<IntegerAttr>("cp_size"))
      cpSize = cp.getInt();
    if (auto rank = layer->getAttrOfType<IntegerAttr>("cp_rank"))
      cpRank = rank.getInt();
    if (auto comm = layer->getAttrOfType<StringAttr>("cp_comm_type"))
      cpAllToAll = cpSize > 1 && comm.getValue() == kCpAllToAll;
  }

  /// How a GEMM of a tensor-parallel layer is split over the ranks.
  enum class Split { none, column, row };

  /// `x` as [tokens, features].
  Value tokens(Value x) {
    ArrayRef<int64_t> shape = shapeOf(x);
    int64_t rows = 1;
    for (int64_t dim : shape.drop_back())
      rows *= dim;
    return reshape(x, {rows, shape.back()});
  }

  Value reshape(Value x, ArrayRef<int64_t> shape) {
    auto type = RankedTensorType::get(shape, elementOf(x));
    if (type == x.getType())
      return x;
    return builder.create<ReshapeOp>(loc, type, x);
  }

  /// `x W^T + b` on tokens, in FP8 under the layer's recipe. In a
  /// tensor-parallel layer (docs/tensor-parallel.md) a column-parallel GEMM
  /// reads `x` through te.tp_copy (its gradient is summed over the ranks),
  /// and a row-parallel one sums its output over the ranks before the bias.
  /// With sequence parallelism `x` of a column-parallel GEMM is this rank's
  /// slice of the tokens, gathered first (te.tp_all_gather), and a
  /// row-parallel GEMM's sum is scattered (te.tp_reduce_scatter): the bias
  /// is added to this rank's slice.
  Value linear(Value x, Value weight, Value bias, Split split = Split::none) {
    bool parallel = tpSize > 1 && split != Split::none;
    IntegerAttr ranks = builder.getI64IntegerAttr(tpSize);
    if (parallel && split == Split::column && sequenceParallel)
      x = builder.create<TpAllGatherOp>(
          loc, withDim0(x, shapeOf(x)[0] * tpSize), x, ranks);
    else if (parallel && split == Split::column)
      x = builder.create<TpCopyOp>(loc, x.getType(), x, ranks);
    auto type = RankedTensorType::get({shapeOf(x)[0], shapeOf(weight)[0]},
                                      elementOf(x));
    Value y = builder.create<MatmulOp>(
        loc, type, x, weight, /*transpose_a=*/nullptr, builder.getUnitAttr(),
        recipe, GemmRoleAttr::get(ctx(), GemmRole::fprop));
    if (parallel && split == Split::row) {
      if (sequenceParallel) {
        type = withDim0(y, shapeOf(y)[0] / tpSize);
        y = builder.create<TpReduceScatterOp>(loc, type, y, ranks);
      } else {
        y = builder.create<TpAllReduceOp>(loc, type, y, ranks);
      }
    }
    if (!bias)
      return y;
    return builder.create<BiasAddOp>(loc, type, y, bias);
  }

  /// GroupedLinear on tokens `x` [T, K]: one GEMM per row segment of
  /// `mSplits` (docs/grouped-linear.md), each segment's bias added by the
  /// grouped GEMM itself; under the layer's recipe every group gets its own
  /// scales (te-place-scaling). Tensor parallelism as linear()'s without
  /// sequence parallelism: a column-parallel GEMM reads `x` through
  /// te.tp_copy, a row-parallel one (no bias) sums its output over the
  /// ranks.
  Value groupedLinear(Value x, Value mSplits, Value weight, Value bias,
                      Split split = Split::none) {
    bool parallel = tpSize > 1 && split != Split::none;
    IntegerAttr ranks = builder.getI64IntegerAttr(tpSize);
    if (parallel && split == Split::column)
      x = builder.create<TpCopyOp>(loc, x.getType(), x, ranks);
    auto type = RankedTensorType::get({shapeOf(x)[0], shapeOf(weight)[1]},
                                      elementOf(x));
    Value y = builder.create<GroupedMatmulOp>(
        loc, type, x, weight, mSplits, bias, /*transpose_a=*/nullptr,
        builder.getUnitAttr(), recipe,
        GemmRoleAttr::get(ctx(), GemmRole::fprop));
    if (parallel && split == Split::row)
      y = builder.create<TpAllReduceOp>(loc, type, y, ranks);
    return y;
  }

  /// `value`'s type with dim 0 of `rows`.
  static RankedTensorType withDim0(Value value, int64_t rows) {
    SmallVector<int64_t> shape(shapeOf(value));
    shape.front() = rows;
    return RankedTensorType::get(shape, elementOf(value));
  }

  /// The whole activation of which a sequence-parallel layer holds a slice
  /// of dim 0 shaped like `shape` (`shape` itself without sequence
  /// parallelism).
  SmallVector<int64_t> whole(ArrayRef<int64_t> shape) const {
    SmallVector<int64_t> result(shape);
    if (sequenceParallel)
      result.front() *= tpSize;
    return result;
  }

  Value norm(Normalization kind, Value x, Value gamma, Value beta, APFloat eps,
             bool zeroCentered) {
    auto stats =
        RankedTensorType::get(shapeOf(x).drop_back(), builder.getF32Type());
    FloatAttr epsAttr = builder.getF64FloatAttr(eps.convertToDouble());
    UnitAttr zeroCenteredAttr = zeroCentered ? builder.getUnitAttr() : nullptr;
    if (kind == Normalization::LayerNorm)
      return builder
          .create<LayerNormFwdOp>(loc, x.getType(), stats, stats, x, gamma,
                                  beta, epsAttr, zeroCenteredAttr)
          .getOutput();
    return builder
        .create<RMSNormFwdOp>(loc, x.getType(), stats, x, gamma, epsAttr,
                              zeroCenteredAttr)
        .getOutput();
  }

  /// FC1, activation, FC2 on tokens; the activation takes the parameters
  /// (clamped_swiglu's) that `layer` carries.
  Value mlp(Value x, Operation *layer, Activation activation, Value fc1Weight,
            Value fc1Bias, Value fc2Weight, Value fc2Bias) {
    Value hidden = linear(x, fc1Weight, fc1Bias, Split::column);
    auto actType = RankedTensorType::get(
        {shapeOf(hidden)[0], shapeOf(fc2Weight)[1]}, elementOf(x));
    auto activated = builder.create<ActivationOp>(
        loc, actType, hidden, ActivationAttr::get(ctx(), activation),
        FloatAttr(), FloatAttr(), FloatAttr());
    copyActivationParams(layer, activated);
    return linear(activated, fc2Weight, fc2Bias, Split::row);
  }

  Value dropout(Value x, double rate, int64_t site, int64_t group = 0) {
    if (inference || rate == 0.0)
      return x;
    return builder.create<DropoutOp>(
        loc, x.getType(), x, rngState, builder.getF64FloatAttr(rate),
        builder.getI64IntegerAttr(stream(site)),
        group ? builder.getI64IntegerAttr(group) : IntegerAttr());
  }

  /// Transformer Engine's DropPath on `x`, the tokens of an activation
  /// shaped like `shape`: one draw per index of its first dim (a sequence
  /// position for sbhd, a sample for bshd, as TE's).
  Value dropPath(Value x, double rate, int64_t site, ArrayRef<int64_t> shape) {
    int64_t group = 1;
    for (int64_t dim : shape.drop_front())
      group *= dim;
    return dropout(x, rate, site, group);
  }

  Value add(Value lhs, Value rhs) {
    return builder.create<AddOp>(loc, lhs.getType(), lhs, rhs);
  }

  /// The attention core on 4-D q/k/v (3-D for thd, with `packed`); returns
  /// the output in q's layout.
  Value attention(Value query, Value key, Value value, Value mask,
                  AttnMaskType maskType, QkvFormat format, double scale,
                  double dropoutRate, DenseI64ArrayAttr window,
                  int64_t dropoutSite = kAttention, Value queryMask = {},
                  bool crossAttention = false,
                  const PackedSequences &packed = {},
                  const AttentionBias &bias = {}) {
    if (packed.keyCache)
      return kvCacheAttention(query, key, value, maskType, scale, packed);
    ArrayRef<int64_t> q = shapeOf(query);
    bool sbhd = format == QkvFormat::sbhd;
    SmallVector<int64_t> lseShape =
        format == QkvFormat::thd
            ? SmallVector<int64_t>{shapeOf(packed.cuSeqlensQ)[0] - 1, q[1],
                                   packed.maxSeqlenQ}
            : SmallVector<int64_t>{q[sbhd ? 1 : 0], q[2], q[sbhd ? 0 : 1]};
    auto lseType = RankedTensorType::get(lseShape, builder.getF32Type());
    double rate = inference ? 0.0 : dropoutRate;
    Value rng = rate > 0.0 ? rngState : Value();
    SmallVector<Value> operands = {query, key, value};
    for (Value optional : {mask, queryMask, rng, packed.cuSeqlensQ,
                           packed.cuSeqlensKv, bias.bias, bias.slopes})
      if (optional)
        operands.push_back(optional);
    SmallVector<NamedAttribute> attrs = {
        builder.getNamedAttr("attn_mask_type",
                             AttnMaskTypeAttr::get(ctx(), maskType)),
        builder.getNamedAttr("qkv_format", QkvFormatAttr::get(ctx(), format)),
        builder.getNamedAttr("softmax_scale", builder.getF64FloatAttr(scale)),
        builder.getNamedAttr(
            "operandSegmentSizes",
            builder.getDenseI32ArrayAttr(
                {1, 1, 1, mask ? 1 : 0, queryMask ? 1 : 0, rng ? 1 : 0,
                 packed.cuSeqlensQ ? 1 : 0, packed.cuSeqlensKv ? 1 : 0,
                 bias.bias ? 1 : 0, bias.slopes ? 1 : 0}))};
    if (bias.type != AttnBiasType::no_bias)
      attrs.push_back(builder.getNamedAttr(
          "bias_type", AttnBiasTypeAttr::get(ctx(), bias.type)));
    if (bias.grad)
      attrs.push_back(builder.getNamedAttr("bias_grad", builder.getUnitAttr()));
    if (packed.cuSeqlensQ) {
      attrs.push_back(builder.getNamedAttr(
          "max_seqlen_q", builder.getI64IntegerAttr(packed.maxSeqlenQ)));
      attrs.push_back(builder.getNamedAttr(
          "max_seqlen_kv", builder.getI64IntegerAttr(packed.maxSeqlenKv)));
    }
    if (window)
      attrs.push_back(builder.getNamedAttr("window_size", window));
    // fp8_dpa: te-place-scaling runs this attention in FP8.
    if (auto delayed = dyn_cast_or_null<DelayedScalingAttr>(recipe);
        delayed && delayed.getFp8Dpa())
      attrs.push_back(builder.getNamedAttr("fp8_recipe", delayed));
    // Keys from another sequence: the mask pads them alone, whatever the
    // lengths.
    if (crossAttention && mask)
      attrs.push_back(
          builder.getNamedAttr("pad_keys_only", builder.getUnitAttr()));
    // With a2a the attention holds the whole sequence of its heads: an
    // ordinary one.
    if (cpSize > 1 && !cpAllToAll) {
      attrs.push_back(
          builder.getNamedAttr("cp_ranks", builder.getI64IntegerAttr(cpSize)));
      attrs.push_back(
          builder.getNamedAttr("cp_rank", builder.getI64IntegerAttr(cpRank)));
    }
    if (rate > 0.0) {
      attrs.push_back(
          builder.getNamedAttr("dropout", builder.getF64FloatAttr(rate)));
      attrs.push_back(builder.getNamedAttr(
          "stream", builder.getI64IntegerAttr(stream(dropoutSite))));
    }
    auto op = builder.create<AttentionOp>(
        loc, TypeRange{query.getType(), lseType}, operands, attrs);
    return op.getOutput();
  }

  /// The new tokens' attention over the KV caches (inference), which stores
  /// them there; causal mask types align bottom-right, as Transformer
  /// Engine's inference does.
  Value kvCacheAttention(Value query, Value key, Value value,
                         AttnMaskType maskType, double scale,
                         const PackedSequences &packed) {
    auto mask = AttnMaskTypeAttr::get(ctx(), kvCacheMaskType(maskType));
    return builder.create<KvCacheAttentionOp>(
        loc, query.getType(), query, key, value, packed.keyCache,
        packed.valueCache, packed.cuSeqlensQ, packed.cuSeqlensKv,
        packed.pageTable, mask, builder.getF64FloatAttr(scale),
        builder.getI64IntegerAttr(packed.maxSeqlenQ));
  }

  /// QKV projection, head split, rotary, attention and output projection on
  /// the tokens `x` of an activation shaped like `inputShape`; for
  /// cross-attention, q from `x` and k, v from the encoder's output.
  Value attentionBlock(Value x, ArrayRef<int64_t> inputShape,
                       const AttentionParams &params) {
    Value qkv = linear(x, params.qkvWeight, params.qkvBias, Split::column);
    int64_t qWidth = params.heads * params.headDim;
    int64_t kvWidth = params.kvHeads * params.headDim;
    bool packed = params.format == QkvFormat::thd;
    // Heads [offset / headDim, + count) of `projected` (the tokens of an
    // activation shaped like `shape`) as [d0, d1, count, headDim] ([t,
    // count, headDim] for thd).
    auto heads = [&](Value projected, ArrayRef<int64_t> shape, int64_t offset,
                     int64_t count) {
      Value slice = projected;
      if (count * params.headDim != shapeOf(projected)[1]) {
        auto sliceType = RankedTensorType::get(
            {shapeOf(projected)[0], count * params.headDim}, elementOf(x));
        slice = builder.create<SliceOp>(loc, sliceType, projected,
                                        builder.getI64IntegerAttr(offset));
      }
      if (packed)
        return reshape(slice, {shape[0], count, params.headDim});
      return reshape(slice, {shape[0], shape[1], count, params.headDim});
    };
    // Sequence parallelism: the heads span the gathered tokens.
    SmallVector<int64_t> gatheredShape = whole(inputShape);
    Value query = heads(qkv, gatheredShape, 0, params.heads);
    Value key, value;
    if (params.encoder) {
      Value kv = linear(tokens(params.encoder), params.kvWeight, params.kvBias,
                        Split::column);
      SmallVector<int64_t> encoderShape = whole(shapeOf(params.encoder));
      key = heads(kv, encoderShape, 0, params.kvHeads);
      value = heads(kv, encoderShape, kvWidth, params.kvHeads);
    } else {
      key = heads(qkv, gatheredShape, qWidth, params.kvHeads);
      value = heads(qkv, gatheredShape, qWidth + kvWidth, params.kvHeads);
    }
    if (params.rotary) {
      Value freqs = localFreqs(params.rotary);
      query = rotary(query, freqs, params);
      key = rotary(key, freqs, params);
    }
    shareSequence(query, key, value, params.format, params.maskType,
                  params.window);
    PackedSequences sequences;
    if (packed)
      sequences = {params.cuSeqlens, params.cuSeqlensKv, params.maxSeqlen,
                   params.maxSeqlen, params.keyCache,    params.valueCache,
                   params.pageTable};
    Value context = attention(
        query, key, value, params.mask, params.maskType, params.format,
        1.0 / std::sqrt(double(params.headDim)), params.dropout, params.window,
        params.dropoutSite, params.queryMask, static_cast<bool>(params.encoder),
        sequences, params.bias);
    context =
        localTokens(context, params.format, params.maskType, params.window);
    return linear(reshape(context, {shapeOf(qkv)[0], qWidth}),
                  params.projWeight, params.projBias, Split::row);
  }

  /// Context parallelism (docs/context-parallel.md): the rows of the whole
  /// sequence's rotary table `freqs` [s, 1, 1, r] that this rank's tokens
  /// take, chunks r and 2N - 1 - r of 2N (`freqs` itself without it).
  Value localFreqs(Value freqs) {
    if (cpSize == 1)
      return freqs;
    ArrayRef<int64_t> shape = shapeOf(freqs);
    int64_t chunk = shape[0] / (2 * cpSize) * shape[3];
    // te.slice and te.concat work on the last dim: the table as one row.
    Value flat = reshape(freqs, {1, shape[0] * shape[3]});
    auto chunkType = RankedTensorType::get({1, chunk}, elementOf(freqs));
    auto sliceAt = [&](int64_t index) {
      return builder.create<SliceOp>(loc, chunkType, flat,
                                     builder.getI64IntegerAttr(index * chunk));
    };
    Value first = sliceAt(cpRank), second = sliceAt(2 * cpSize - 1 - cpRank);
    auto pairType = RankedTensorType::get({1, 2 * chunk}, elementOf(freqs));
    Value pair =
        builder.create<ConcatOp>(loc, pairType, ValueRange{first, second});
    return reshape(pair, {shape[0] / cpSize, 1, 1, shape[3]});
  }

  /// Context parallelism: this rank's keys or values `x` ([s/N, b, h, d]
  /// or bshd) all-gathered into the whole sequence, in sequence order for
  /// the causal mask (load-balanced) and in rank order for no_mask, which
  /// does not care; `x` itself without context parallelism.
  Value gatherSequence(Value x, QkvFormat format, AttnMaskType maskType) {
    if (cpSize == 1)
      return x;
    int64_t seqDim = format == QkvFormat::bshd ? 1 : 0;
    SmallVector<int64_t> shape(shapeOf(x));
    shape[seqDim] *= cpSize;
    return builder.create<CpAllGatherOp>(
        loc, RankedTensorType::get(shape, elementOf(x)), x,
        builder.getI64IntegerAttr(cpSize), builder.getI64IntegerAttr(seqDim),
        maskType == AttnMaskType::causal ? builder.getUnitAttr() : nullptr);
  }

  /// cp_comm_type a2a: heads `x` through te.cp_all_to_all, to the whole
  /// sequence of 1/cpSize of the heads (`toHeads`) or back to this rank's
  /// tokens of all heads; in sequence order (load-balanced) when
  /// `inOrder`, else in rank order.
  Value allToAll(Value x, QkvFormat format, bool inOrder, bool toHeads) {
    int64_t seqDim = format == QkvFormat::bshd ? 1 : 0, headDim = 2;
    SmallVector<int64_t> shape(shapeOf(x));
    shape[seqDim] = toHeads ? shape[seqDim] * cpSize : shape[seqDim] / cpSize;
    shape[headDim] =
        toHeads ? shape[headDim] / cpSize : shape[headDim] * cpSize;
    return builder.create<CpAllToAllOp>(
        loc, RankedTensorType::get(shape, elementOf(x)), x,
        builder.getI64IntegerAttr(cpSize), builder.getI64IntegerAttr(seqDim),
        builder.getI64IntegerAttr(headDim),
        inOrder ? builder.getUnitAttr() : nullptr);
  }

  /// Whether a2a's attention needs the whole sequence in order: for the
  /// causal mask and for a window (both see keys by position); no_mask
  /// alone takes the keys in any order.
  static bool sequenceInOrder(AttnMaskType maskType, DenseI64ArrayAttr window) {
    return maskType == AttnMaskType::causal || window;
  }

  /// Context parallelism before the attention: with all_gather the keys
  /// and values of the whole sequence (the queries stay this rank's), with
  /// a2a all three as the whole sequence of this rank's heads (in order
  /// for the causal mask or a `window`); nothing without context
  /// parallelism.
  void shareSequence(Value &query, Value &key, Value &value, QkvFormat format,
                     AttnMaskType maskType, DenseI64ArrayAttr window) {
    if (!cpAllToAll) {
      key = gatherSequence(key, format, maskType);
      value = gatherSequence(value, format, maskType);
      return;
    }
    bool inOrder = sequenceInOrder(maskType, window);
    query = allToAll(query, format, inOrder, /*toHeads=*/true);
    key = allToAll(key, format, inOrder, /*toHeads=*/true);
    value = allToAll(value, format, inOrder, /*toHeads=*/true);
  }

  /// The attention's output `context` as this rank's tokens of all heads:
  /// with a2a back through the inverse all-to-all, else `context` itself.
  Value localTokens(Value context, QkvFormat format, AttnMaskType maskType,
                    DenseI64ArrayAttr window) {
    if (!cpAllToAll)
      return context;
    return allToAll(context, format, sequenceInOrder(maskType, window),
                    /*toHeads=*/false);
  }

  /// Rotary embeddings on q or k heads by the angles `freqs`. Packed tokens
  /// ([t, h, d]) rotate as an sbhd view [t, 1, h, d] with a row of angles
  /// per token.
  Value rotary(Value heads, Value freqs, const AttentionParams &params) {
    bool packed = params.format == QkvFormat::thd;
    ArrayRef<int64_t> shape = shapeOf(heads);
    Value x =
        packed ? reshape(heads, {shape[0], 1, shape[1], shape[2]}) : heads;
    auto formatAttr =
        QkvFormatAttr::get(ctx(), packed ? QkvFormat::sbhd : params.format);
    UnitAttr interleaved =
        params.rotaryInterleaved ? builder.getUnitAttr() : nullptr;
    Value rotated = builder.create<RotaryOp>(loc, x.getType(), x, freqs,
                                             formatAttr, nullptr, interleaved);
    return packed ? reshape(rotated, shape) : rotated;
  }

  MLIRContext *ctx() { return builder.getContext(); }

  static ArrayRef<int64_t> shapeOf(Value value) {
    return cast<RankedTensorType>(value.getType()).getShape();
  }
  static Type elementOf(Value value) {
    return cast<RankedTensorType>(value.getType()).getElementType();
  }

private:
  int64_t stream(int64_t site) const { return 16 * ordinal + site; }

  OpBuilder builder;
  Location loc;
  Value rngState;
  FP8RecipeAttrInterface recipe;
  int64_t ordinal;
  bool inference;
  int64_t tpSize = 1;
  /// Sequence parallelism (docs/tensor-parallel.md): the layer's tokens
  /// outside its GEMM pairs are this rank's slice of dim 0.
  bool sequenceParallel = false;
  /// Context parallelism (docs/context-parallel.md): the layer holds rank
  /// cpRank's tokens of each sequence, and its attention gathers the keys
  /// and values of all cpSize ranks (cp_comm_type all_gather), or trades
  /// heads for tokens with them around it (`cpAllToAll`, cp_comm_type a2a).
  int64_t cpSize = 1, cpRank = 0;
  bool cpAllToAll = false;
};

/// `y` (tokens) reshaped like `like` with `y`'s last dim; with sequence
/// parallelism `y` may hold tp_size times (gathered) or 1/tp_size
/// (scattered) the tokens of `like`, which scales dim 0.
Value restoreShape(LayerLowering &lower, Value y, Value like) {
  SmallVector<int64_t> shape(LayerLowering::shapeOf(like));
  int64_t rows = 1, tokens = LayerLowering::shapeOf(y)[0];
  for (int64_t dim : ArrayRef<int64_t>(shape).drop_back())
    rows *= dim;
  shape.front() = shape.front() * tokens / rows;
  shape.back() = LayerLowering::shapeOf(y).back();
  return lower.reshape(y, shape);
}

SmallVector<Value> lowerLayer(LinearOp op, LayerLowering &lower) {
  std::optional<ParallelMode> mode = op.getParallelMode();
  auto split = !mode                           ? LayerLowering::Split::none
               : *mode == ParallelMode::column ? LayerLowering::Split::column
                                               : LayerLowering::Split::row;
  Value y = lower.linear(lower.tokens(op.getInput()), op.getWeight(),
                         op.getBias(), split);
  return {restoreShape(lower, y, op.getInput())};
}

SmallVector<Value> lowerLayer(GroupedLinearOp op, LayerLowering &lower) {
  std::optional<ParallelMode> mode = op.getParallelMode();
  LayerLowering::Split split = !mode ? LayerLowering::Split::none
                               : *mode == ParallelMode::column
                                   ? LayerLowering::Split::column
                                   : LayerLowering::Split::row;
  Value y = lower.groupedLinear(lower.tokens(op.getInput()), op.getMSplits(),
                                op.getWeight(), op.getBias(), split);
  return {restoreShape(lower, y, op.getInput())};
}

SmallVector<Value> lowerLayer(LayerNormOp op, LayerLowering &lower) {
  Value y = lower.norm(Normalization::LayerNorm, lower.tokens(op.getInput()),
                       op.getWeight(), op.getBias(), op.getEps(),
                       op.getZeroCenteredGamma());
  return {restoreShape(lower, y, op.getInput())};
}

SmallVector<Value> lowerLayer(RMSNormOp op, LayerLowering &lower) {
  Value y = lower.norm(Normalization::RMSNorm, lower.tokens(op.getInput()),
                       op.getWeight(), Value(), op.getEps(),
                       op.getZeroCenteredGamma());
  return {restoreShape(lower, y, op.getInput())};
}

SmallVector<Value> lowerLayer(LayerNormLinearOp op, LayerLowering &lower) {
  Value normed = lower.norm(op.getNormalization(), lower.tokens(op.getInput()),
                            op.getLnWeight(), op.getLnBias(), op.getEps(),
                            op.getZeroCenteredGamma());
  Value y = lower.linear(normed, op.getWeight(), op.getBias(),
                         LayerLowering::Split::column);
  SmallVector<Value> results = {restoreShape(lower, y, op.getInput())};
  if (op.getLnOutput())
    results.push_back(restoreShape(lower, normed, op.getInput()));
  return results;
}

SmallVector<Value> lowerLayer(LayerNormMLPOp op, LayerLowering &lower) {
  Value normed = lower.norm(op.getNormalization(), lower.tokens(op.getInput()),
                            op.getLnWeight(), op.getLnBias(), op.getEps(),
                            op.getZeroCenteredGamma());
  Value y = lower.mlp(normed, op, op.getActivation(), op.getFc1Weight(),
                      op.getFc1Bias(), op.getFc2Weight(), op.getFc2Bias());
  SmallVector<Value> results = {restoreShape(lower, y, op.getInput())};
  if (op.getLnOutput())
    results.push_back(restoreShape(lower, normed, op.getInput()));
  return results;
}

SmallVector<Value> lowerLayer(DotProductAttentionOp op, LayerLowering &lower) {
  double headDim = double(LayerLowering::shapeOf(op.getQuery()).back());
  PackedSequences packed;
  if (op.getQkvFormat() == QkvFormat::thd) {
    int64_t maxQ = int64_t(*op.getMaxSeqlenQ());
    packed = {op.getCuSeqlensQ(),
              op.getCuSeqlensKv(),
              maxQ,
              int64_t(op.getMaxSeqlenKv().value_or(maxQ)),
              op.getKeyCache(),
              op.getValueCache(),
              op.getPageTable()};
  }
  double scale = op.getSoftmaxScale() ? op.getSoftmaxScale()->convertToDouble()
                                      : 1.0 / std::sqrt(headDim);
  Value query = op.getQuery(), key = op.getKey(), value = op.getValue();
  lower.shareSequence(query, key, value, op.getQkvFormat(),
                      op.getAttnMaskType(), op.getWindowSizeAttr());
  Value context = lower.attention(
      query, key, value, op.getAttentionMask(), op.getAttnMaskType(),
      op.getQkvFormat(), scale, op.getAttentionDropout().convertToDouble(),
      op.getWindowSizeAttr(), kAttention, op.getQueryMask(),
      /*crossAttention=*/bool(op.getQueryMask()), packed,
      layerAttentionBias(op));
  context = lower.localTokens(context, op.getQkvFormat(), op.getAttnMaskType(),
                              op.getWindowSizeAttr());
  return {lower.reshape(context, LayerLowering::shapeOf(op.getOutput()))};
}

template <typename OpT>
AttentionParams attentionParams(OpT op, AttnMaskType maskType,
                                QkvFormat format) {
  AttentionParams params{op.getQkvWeight(),
                         op.getQkvBias(),
                         op.getProjWeight(),
                         op.getProjBias(),
                         op.getAttentionMask(),
                         op.getRotaryPosEmb(),
                         static_cast<int64_t>(op.getNumAttentionHeads()),
                         op.getNumKVHeads(),
                         op.getHeadDim(),
                         maskType,
                         format,
                         op.getAttentionDropout().convertToDouble(),
                         op.getWindowSizeAttr(),
                         op.getRotaryPosInterleaved()};
  params.cuSeqlens = op.getCuSeqlens();
  params.maxSeqlen = int64_t(op.getMaxSeqlen().value_or(0));
  params.cuSeqlensKv = op.getCuSeqlensKv();
  params.keyCache = op.getKeyCache();
  params.valueCache = op.getValueCache();
  params.pageTable = op.getPageTable();
  params.bias = layerAttentionBias(op);
  return params;
}

SmallVector<Value> lowerLayer(MultiheadAttentionOp op, LayerLowering &lower) {
  Value x = lower.tokens(op.getInput());
  if (op.getLnWeight())
    x = lower.norm(op.getNormalization(), x, op.getLnWeight(), op.getLnBias(),
                   op.getLayernormEpsilon(), op.getZeroCenteredGamma());
  Value normed = x;
  AttentionParams params =
      attentionParams(op, op.getAttnMaskType(), op.getQkvFormat());
  params.encoder = op.getEncoderOutput();
  params.kvWeight = op.getKvWeight();
  params.kvBias = op.getKvBias();
  params.queryMask = op.getQueryMask();
  Value y =
      lower.attentionBlock(x, LayerLowering::shapeOf(op.getInput()), params);
  SmallVector<Value> results = {restoreShape(lower, y, op.getInput())};
  if (op.getLnOutput())
    results.push_back(restoreShape(lower, normed, op.getInput()));
  return results;
}

/// A decoder layer's cross-attention block: the inter_* operands over
/// encoder_output, with the enc-dec mask, no rotary and no window.
AttentionParams crossAttentionParams(TransformerLayerOp op) {
  AttentionParams params =
      attentionParams(op, op.getEncDecAttnMaskType(), op.getAttnInputFormat());
  params.qkvWeight = op.getInterQWeight();
  params.qkvBias = op.getInterQBias();
  params.projWeight = op.getInterProjWeight();
  params.projBias = op.getInterProjBias();
  params.mask = op.getEncDecMask();
  params.rotary = Value();
  params.cuSeqlensKv = params.keyCache = params.valueCache = params.pageTable =
      Value();
  params.window = DenseI64ArrayAttr();
  params.encoder = op.getEncoderOutput();
  params.kvWeight = op.getInterKvWeight();
  params.kvBias = op.getInterKvBias();
  params.queryMask = op.getEncDecQueryMask();
  params.dropoutSite = kCrossAttention;
  // The bias belongs to the self-attention.
  params.bias = {};
  return params;
}

SmallVector<Value> lowerLayer(TransformerLayerOp op, LayerLowering &lower) {
  Value x = lower.tokens(op.getInput());
  APFloat eps = op.getLayernormEpsilon();
  bool zeroCentered = op.getZeroCenteredGamma();
  bool postLn = op.getApplyResidualConnectionPostLayernorm();
  double hiddenDropout = op.getHiddenDropout().convertToDouble();
  // TE's drop path follows the hidden dropout after the self-attention and
  // after the MLP (not after a decoder's cross-attention).
  double dropPath = op.getDropPathRate().convertToDouble();
  ArrayRef<int64_t> shape = LayerLowering::shapeOf(op.getInput());
  auto residualBranch = [&](Value branch, int64_t dropoutSite,
                            int64_t dropPathSite) {
    return lower.dropPath(lower.dropout(branch, hiddenDropout, dropoutSite),
                          dropPath, dropPathSite, shape);
  };

  // output_layernorm (out_ln_weight): no norm before the attention, one
  // after the last residual.
  Value attnIn =
      op.getAttnLnWeight()
          ? lower.norm(op.getNormalization(), x, op.getAttnLnWeight(),
                       op.getAttnLnBias(), eps, zeroCentered)
          : x;
  Value attn = lower.attentionBlock(
      attnIn, LayerLowering::shapeOf(op.getInput()),
      attentionParams(op, op.getSelfAttnMaskType(), op.getAttnInputFormat()));
  if (op.getParallelAttentionMlp()) {
    // Both blocks read x; one dropout over their sum (the verifier rules
    // out decoders, post-LN residuals and output_layernorm).
    Value mlpIn = lower.norm(op.getNormalization(), x, op.getMlpLnWeight(),
                             op.getMlpLnBias(), eps, zeroCentered);
    Value mlp = lower.mlp(mlpIn, op, op.getActivation(), op.getFc1Weight(),
                          op.getFc1Bias(), op.getFc2Weight(), op.getFc2Bias());
    Value y = lower.add(
        x, residualBranch(lower.add(attn, mlp), kAfterMlp, kDropPathAfterMlp));
    return {restoreShape(lower, y, op.getInput())};
  }
  Value hidden =
      lower.add(postLn ? attnIn : x,
                residualBranch(attn, kAfterAttention, kDropPathAfterAttention));
  if (op.getEncoderOutput()) {
    Value crossIn =
        lower.norm(op.getNormalization(), hidden, op.getInterLnWeight(),
                   op.getInterLnBias(), eps, zeroCentered);
    Value cross =
        lower.attentionBlock(crossIn, LayerLowering::shapeOf(op.getInput()),
                             crossAttentionParams(op));
    hidden =
        lower.add(postLn ? crossIn : hidden,
                  lower.dropout(cross, hiddenDropout, kAfterCrossAttention));
  }

  Value mlpIn = lower.norm(op.getNormalization(), hidden, op.getMlpLnWeight(),
                           op.getMlpLnBias(), eps, zeroCentered);
  Value mlp = lower.mlp(mlpIn, op, op.getActivation(), op.getFc1Weight(),
                        op.getFc1Bias(), op.getFc2Weight(), op.getFc2Bias());
  Value y = lower.add(postLn ? mlpIn : hidden,
                      residualBranch(mlp, kAfterMlp, kDropPathAfterMlp));
  if (op.getOutLnWeight())
    y = lower.norm(op.getNormalization(), y, op.getOutLnWeight(),
                   op.getOutLnBias(), eps, zeroCentered);
  return {restoreShape(lower, y, op.getInput())};
}

/// Whether the layer op draws random numbers unless in eval mode.
bool usesDropout(Operation *op) {
  auto rate = [&](StringRef name) {
    auto attr = op->getAttrOfType<FloatAttr>(name);
    return attr && attr.getValueAsDouble() > 0.0;
  };
  return rate("attention_dropout") || rate("hidden_dropout") ||
         rate("drop_path_rate");
}

/// The layer ops, in the interpreter's sense: each one counts for the
/// dropout streams of the ones after it.
bool isLayerOp(Operation *op) {
  return isa<LinearOp, GroupedLinearOp, LayerNormOp, RMSNormOp,
             LayerNormLinearOp, LayerNormMLPOp, DotProductAttentionOp,
             MultiheadAttentionOp, TransformerLayerOp>(op);
}

/// Whether `layer` (an attention layer op) attends over a KV cache.
bool usesKvCache(Operation *layer) {
  return TypeSwitch<Operation *, bool>(layer)
      .Case<DotProductAttentionOp, MultiheadAttentionOp, TransformerLayerOp>(
          [](auto op) { return bool(op.getKeyCache()); })
      .Default([](Operation *) { return false; });
}

/// The token-wise primitive ops a spec's fusible-op layers (Activation,
/// Bias, AddExtraInput) import as, on [..., features] activations.
bool isTokenwiseOp(Operation *op) {
  return isa<ActivationOp, BiasAddOp, AddOp>(op) &&
         cast<RankedTensorType>(op->getResult(0).getType()).getRank() > 2;
}

/// [tokens, features] for an activation of type `type` ([..., features]).
RankedTensorType flatType(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  int64_t features = tensor.getShape().back();
  return RankedTensorType::get({tensor.getNumElements() / features, features},
                               tensor.getElementType());
}

/// `value` reshaped to [tokens, features]: the value a reshape made it from
/// when that one already has this shape (a lowered layer's 2-D result),
/// else a new reshape in front of `user`.
Value flatValue(OpBuilder &builder, Operation *user, Value value) {
  RankedTensorType flat = flatType(value.getType());
  if (auto reshape = value.getDefiningOp<ReshapeOp>())
    if (reshape.getInput().getType() == flat)
      return reshape.getInput();
  builder.setInsertionPoint(user);
  return builder.create<ReshapeOp>(user->getLoc(), flat, value);
}

/// Rewrites the token-wise ops `ops` (isTokenwiseOp, in program order) to act
/// on [tokens, features] as the lowered layers do, so that te-fuse sees them
/// next to the GEMMs and norms around them (a bias add in a GEMM's
/// epilogue, an activation in the next GEMM's cast) instead of behind
/// reshapes.
void flattenTokenwiseOps(func::FuncOp function, ArrayRef<Operation *> ops) {
  OpBuilder builder(function.getContext());
  for (Operation *op : ops) {
    for (OpOperand &operand : op->getOpOperands()) {
      auto type = cast<RankedTensorType>(operand.get().getType());
      if (type.getRank() > 2)
        operand.set(flatValue(builder, op, operand.get()));
    }
    Value result = op->getResult(0);
    auto type = cast<RankedTensorType>(result.getType());
    result.setType(flatType(type));
    builder.setInsertionPointAfter(op);
    auto restored = builder.create<ReshapeOp>(op->getLoc(), type, result);
    result.replaceAllUsesExcept(restored, restored);
  }
}

/// Folds each reshape of a reshape (one layer's 3-D output flattened again
/// by the next) into one reshape of the first one's input, or into that
/// input when the shapes agree, so that te-fuse sees a norm or activation
/// next to the cast of the GEMM after it; then erases the reshapes nothing
/// reads any more (users first).
void foldReshapeChains(func::FuncOp function) {
  SmallVector<ReshapeOp> reshapes;
  function.walk([&](ReshapeOp reshape) { reshapes.push_back(reshape); });
  for (ReshapeOp reshape : reshapes) {
    auto inner = reshape.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      continue;
    reshape.getInputMutable().assign(inner.getInput());
    if (reshape.getInput().getType() == reshape.getType())
      reshape.getResult().replaceAllUsesWith(reshape.getInput());
  }
  for (ReshapeOp reshape : llvm::reverse(reshapes))
    if (reshape->use_empty())
      reshape->erase();
}

struct DecomposePass : public tejit::impl::TEDecomposeBase<DecomposePass> {
  using TEDecomposeBase::TEDecomposeBase;

  void runOnOperation() override {
    func::FuncOp function = getOperation();
    SmallVector<Operation *> layers, tokenwise;
    function.walk([&](Operation *op) {
      if (isLayerOp(op))
        layers.push_back(op);
      else if (isTokenwiseOp(op))
        tokenwise.push_back(op);
    });
    Value rngState;
    if (!inference && llvm::any_of(layers, usesDropout))
      rngState = addRngArgument(function);
    for (Operation *layer : layers)
      if (!inference && usesKvCache(layer)) {
        layer->emitOpError()
            << "has a KV cache ('key_cache', 'value_cache'), which only "
               "inference programs take (te-compile --inference, "
               "training=False): the cache holds no gradients";
        return signalPassFailure();
      }
    for (auto [ordinal, layer] : llvm::enumerate(layers)) {
      LayerLowering lowering(layer, rngState, ordinal, inference);
      SmallVector<Value> results =
          TypeSwitch<Operation *, SmallVector<Value>>(layer)
              .Case<LinearOp, GroupedLinearOp, LayerNormOp, RMSNormOp,
                    LayerNormLinearOp, LayerNormMLPOp, DotProductAttentionOp,
                    MultiheadAttentionOp, TransformerLayerOp>(
                  [&](auto op) { return lowerLayer(op, lowering); });
      layer->replaceAllUsesWith(results);
      layer->erase();
    }
    flattenTokenwiseOps(function, tokenwise);
    foldReshapeChains(function);
  }

  /// Appends the `rng_state` ([seed, offset]) argument dropout draws from.
  static Value addRngArgument(func::FuncOp function) {
    OpBuilder builder(function.getContext());
    unsigned index = function.getNumArguments();
    auto type = RankedTensorType::get({2}, builder.getI64Type());
    function.insertArgument(index, type,
                            builder.getDictionaryAttr(builder.getNamedAttr(
                                "te.name", builder.getStringAttr("rng_state"))),
                            function.getLoc());
    return function.getArgument(index);
  }
};
} // namespace
