//===- LayerOps.cpp - the interpreter's layer ops (TE modules) ------------===//
//
// Each layer op is computed from the kernels, as Transformer Engine's module
// of the same name computes it in training mode (dropouts on); the op
// verifiers have checked the shapes.
//
//===----------------------------------------------------------------------===//
#include "compiler/interpreter/Frame.h"
#include "dialects/LayerChecks.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace tejit::interp;
namespace te = mlir::te;
namespace dropout = tejit::dropout;

static double toDouble(const APFloat &value) { return value.convertToDouble(); }

static LogicalResult runOp(te::LayerNormOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   layerNorm(frame.get(op.getInput()),
                             frame.get(op.getWeight()), frame.get(op.getBias()),
                             toDouble(op.getEps()), op.getZeroCenteredGamma())
                       .output);
}

static LogicalResult runOp(te::RMSNormOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   rmsNorm(frame.get(op.getInput()), frame.get(op.getWeight()),
                           toDouble(op.getEps()), op.getZeroCenteredGamma())
                       .output);
}

/// The ranks whose slices of dim 0 a sequence-parallel layer op gathers
/// (1 without sequence parallelism).
static int64_t sequenceRanks(Operation *op) {
  auto tp = op->getAttrOfType<IntegerAttr>("tp_size");
  bool parallel = tp && tp.getInt() > 1 && op->hasAttr("sequence_parallel");
  return parallel ? tp.getInt() : 1;
}

/// The input of a column-parallel GEMM of `op`: `x`, or with sequence
/// parallelism the ranks' slices of `x` gathered along dim 0.
static FailureOr<Tensor> columnInput(Operation *op, const Tensor &x,
                                     Frame &frame) {
  if (sequenceRanks(op) == 1)
    return x;
  return frame.gatherOverRanks(op, x);
}

/// `x W^T + b` of one rank's part of a row-parallel GEMM of `op` when
/// `rowParallel`: the products are summed over the ranks before the bias
/// (with sequence parallelism, this rank keeps its chunk of the sum's dim
/// 0, and the bias is added to it).
static FailureOr<Tensor> linearOfRank(Operation *op, const Tensor &x,
                                      const Tensor &weight, const Tensor *bias,
                                      bool rowParallel, Frame &frame) {
  if (!rowParallel)
    return linear(x, weight, bias);
  Tensor partial = linear(x, weight, nullptr);
  int64_t ranks = sequenceRanks(op);
  FailureOr<Tensor> sum = ranks > 1
                              ? frame.scatterSumOverRanks(op, partial, ranks)
                              : frame.sumOverRanks(partial);
  if (failed(sum) || !bias)
    return sum;
  return biasAdd(*sum, *bias);
}

/// Binds `value` to `tensor` unless computing it failed.
static LogicalResult setIfComputed(Operation *op, Value value,
                                   FailureOr<Tensor> tensor, Frame &frame) {
  return failure(failed(tensor) ||
                 failed(frame.set(op, value, std::move(*tensor))));
}

static LogicalResult runOp(te::LinearOp op, Frame &frame) {
  bool parallel = op.getTpSize() > 1;
  bool rowParallel = parallel && op.getParallelMode() == te::ParallelMode::row;
  FailureOr<Tensor> input =
      parallel && !rowParallel
          ? columnInput(op, frame.get(op.getInput()), frame)
          : FailureOr<Tensor>(frame.get(op.getInput()));
  if (failed(input))
    return failure();
  return setIfComputed(op, op.getOutput(),
                       linearOfRank(op, *input, frame.get(op.getWeight()),
                                    frame.getOptional(op.getBias()),
                                    rowParallel, frame),
                       frame);
}

/// Binds the optional `ln_output` result of a LayerNorm* op.
static LogicalResult setLnOutput(Operation *op, Value lnOutput, Frame &frame,
                                 Tensor normalized) {
  if (!lnOutput)
    return success();
  return frame.set(op, lnOutput, std::move(normalized));
}

static LogicalResult runOp(te::LayerNormLinearOp op, Frame &frame) {
  Tensor normalized =
      normalize(op.getNormalization(), frame.get(op.getInput()),
                frame.get(op.getLnWeight()), frame.getOptional(op.getLnBias()),
                toDouble(op.getEps()), op.getZeroCenteredGamma());
  FailureOr<Tensor> input = columnInput(op, normalized, frame);
  if (failed(input) ||
      failed(frame.set(op, op.getOutput(),
                       linear(*input, frame.get(op.getWeight()),
                              frame.getOptional(op.getBias())))))
    return failure();
  return setLnOutput(op, op.getLnOutput(), frame, std::move(normalized));
}

/// FC2(act(FC1(x))) of an MLP; FC1 column-parallel and FC2 row-parallel in
/// a tensor-parallel layer `op`, whose activation parameters act takes.
static FailureOr<Tensor> mlp(Operation *op, const Tensor &x,
                             te::Activation kind, Frame &frame, Value fc1Weight,
                             Value fc1Bias, Value fc2Weight, Value fc2Bias,
                             int64_t tpSize) {
  FailureOr<Tensor> input = columnInput(op, x, frame);
  if (failed(input))
    return failure();
  Tensor hidden =
      linear(*input, frame.get(fc1Weight), frame.getOptional(fc1Bias));
  return linearOfRank(
      op, activation(hidden, kind, te::ActivationParams::of(op)),
      frame.get(fc2Weight), frame.getOptional(fc2Bias), tpSize > 1, frame);
}

static LogicalResult runOp(te::LayerNormMLPOp op, Frame &frame) {
  Tensor normalized =
      normalize(op.getNormalization(), frame.get(op.getInput()),
                frame.get(op.getLnWeight()), frame.getOptional(op.getLnBias()),
                toDouble(op.getEps()), op.getZeroCenteredGamma());
  FailureOr<Tensor> output =
      mlp(op, normalized, op.getActivation(), frame, op.getFc1Weight(),
          op.getFc1Bias(), op.getFc2Weight(), op.getFc2Bias(), op.getTpSize());
  if (failed(setIfComputed(op, op.getOutput(), std::move(output), frame)))
    return failure();
  return setLnOutput(op, op.getLnOutput(), frame, std::move(normalized));
}

/// Context parallelism (docs/context-parallel.md): this rank's keys or
/// values `local` of `op` gathered into the whole sequence, in sequence
/// order for the causal mask and in rank order for no_mask (`local` itself
/// without context parallelism).
static FailureOr<Tensor> gatherSequence(Operation *op, const Tensor &local,
                                        const AttentionParams &params,
                                        Frame &frame) {
  if (params.cpRanks == 1)
    return local;
  return frame.gatherSequence(op, local, params.cpRanks,
                              params.format == te::QkvFormat::bshd ? 1 : 0,
                              params.maskType == te::AttnMaskType::causal);
}

/// Takes the context parallelism of layer op `op` into `params`; returns
/// whether it trades heads for tokens (cp_comm_type a2a).
template <typename OpT>
static bool setContextParallel(OpT op, AttentionParams &params) {
  params.cpRanks = int64_t(op.getCpSize());
  params.cpRank = int64_t(op.getCpRank());
  return params.cpRanks > 1 && op.getCpCommType() == te::kCpAllToAll;
}

/// The attention of layer op `op` on this rank's q, k and v [.., h, d]
/// under the context parallelism in `params`: with all_gather over the
/// whole sequence's keys and values; with a2a (`allToAll`) q, k and v go
/// to the whole sequence of this rank's head block, the attention there
/// is an ordinary one (any window; in sequence order for the causal mask
/// or a window), and its output comes back to this rank's tokens.
static FailureOr<Tensor> attendOverSequence(Operation *op, Tensor query,
                                            Tensor key, Tensor value,
                                            const AttentionParams &params,
                                            bool allToAll, Frame &frame) {
  if (!allToAll) {
    FailureOr<Tensor> wholeKey = gatherSequence(op, key, params, frame);
    FailureOr<Tensor> wholeValue = gatherSequence(op, value, params, frame);
    if (failed(wholeKey) || failed(wholeValue))
      return failure();
    return attention(query, *wholeKey, *wholeValue, params).output;
  }
  int64_t seqDim = params.format == te::QkvFormat::bshd ? 1 : 0;
  // The causal mask and a window see keys by position: the whole sequence
  // in order (load balanced); no_mask alone takes the ranks' order.
  bool loadBalanced = params.maskType == te::AttnMaskType::causal ||
                      params.windowLeft != -1 || params.windowRight != -1;
  auto exchange = [&](const Tensor &x, bool toHeads) {
    return frame.exchangeHeads(op, x, params.cpRanks, seqDim, loadBalanced,
                               toHeads);
  };
  FailureOr<Tensor> q = exchange(query, true), k = exchange(key, true),
                    v = exchange(value, true);
  if (failed(q) || failed(k) || failed(v))
    return failure();
  AttentionParams whole = params;
  whole.cpRanks = 1;
  whole.cpRank = 0;
  return exchange(attention(*q, *k, *v, whole).output, false);
}

/// An attention result [d0, d1, h, d] ([t, h, d] for thd) as the layer
/// ops return it: [d0, d1, h * d] ([t, h * d]).
static Tensor mergeHeads(Tensor x) {
  llvm::SmallVector<int64_t> shape(x.shape.begin(), x.shape.end() - 1);
  shape.back() *= x.shape.back();
  return reshape(std::move(x), shape);
}

static LogicalResult runOp(te::DotProductAttentionOp op, Frame &frame) {
  const Tensor &query = frame.get(op.getQuery());
  AttentionParams params;
  params.format = op.getQkvFormat();
  params.maskType = op.getAttnMaskType();
  params.mask = frame.getOptional(op.getAttentionMask());
  params.queryMask = frame.getOptional(op.getQueryMask());
  params.softmaxScale = op.getSoftmaxScale()
                            ? toDouble(*op.getSoftmaxScale())
                            : 1.0 / std::sqrt(double(query.shape.back()));
  params.dropout = toDouble(op.getAttentionDropout());
  params.dropoutKey = frame.layerDropoutKey(dropout::kAttentionSite);
  params.setWindow(op.getWindowSize());
  setAttentionBias(params, te::layerAttentionBias(op), frame);
  bool allToAll = setContextParallel(op, params);
  if (params.format == te::QkvFormat::thd) {
    int64_t maxQ = int64_t(*op.getMaxSeqlenQ());
    const Tensor &cuQ = frame.get(op.getCuSeqlensQ());
    const Tensor *cuKv = frame.getOptional(op.getCuSeqlensKv());
    if (failed(setPackedSequences(
            op, params, cuQ, cuKv ? cuKv : &cuQ, maxQ,
            int64_t(op.getMaxSeqlenKv().value_or(maxQ)), query.shape[0],
            frame.get(op.getKey()).shape[0], "cu_seqlens_q", "cu_seqlens_kv")))
      return failure();
  }
  if (op.getKeyCache()) {
    params.maskType = te::kvCacheMaskType(params.maskType);
    FailureOr<Tensor> output = runKvCacheAttention(
        op, frame, query, frame.get(op.getKey()), frame.get(op.getValue()),
        op.getKeyCache(), op.getValueCache(), frame.get(op.getCuSeqlensQ()),
        frame.get(op.getCuSeqlensKv()), frame.getOptional(op.getPageTable()),
        int64_t(*op.getMaxSeqlenQ()), params);
    if (failed(output))
      return failure();
    return frame.set(op, op.getOutput(), mergeHeads(std::move(*output)));
  }
  FailureOr<Tensor> output =
      attendOverSequence(op, query, frame.get(op.getKey()),
                         frame.get(op.getValue()), params, allToAll, frame);
  if (failed(output))
    return failure();
  return frame.set(op, op.getOutput(), mergeHeads(std::move(*output)));
}

namespace {
/// The attention block of te.multihead_attention and te.transformer_layer:
/// self-attention, or cross-attention over `encoder` (then `qkvWeight`
/// holds the query rows and `kvWeight` the k | v rows).
struct AttentionBlock {
  Value qkvWeight, qkvBias, projWeight, projBias, rotary;
  Value encoder, kvWeight, kvBias;
  int64_t heads, groups, headDim;
  AttentionParams params;
  /// Tensor parallelism: the projection's products summed over the ranks.
  bool rowParallelProj = false;
  /// GPT-J's rotary layout (rotary_pos_interleaved).
  bool rotaryInterleaved = false;
  /// Context parallelism with cp_comm_type a2a (else all_gather).
  bool cpAllToAll = false;
  /// KV cache (inference): the op, the caches, each sequence's length after
  /// the step and the page table of paged caches; the queries' cu_seqlens
  /// and max_seqlen are in params.
  Operation *op = nullptr;
  Value keyCache, valueCache, cuSeqlensKv, pageTable;
};
} // namespace

/// The attention block of `op` (either op), with its attention dropout.
template <typename OpT>
static AttentionBlock attentionBlock(OpT op, Frame &frame,
                                     te::AttnMaskType maskType,
                                     te::QkvFormat format) {
  AttentionBlock block{op.getQkvWeight(),
                       op.getQkvBias(),
                       op.getProjWeight(),
                       op.getProjBias(),
                       op.getRotaryPosEmb(),
                       Value(),
                       Value(),
                       Value(),
                       static_cast<int64_t>(op.getNumAttentionHeads()),
                       op.getNumKVHeads(),
                       op.getHeadDim(),
                       {}};
  block.params.format = format;
  block.params.maskType = maskType;
  block.params.mask = frame.getOptional(op.getAttentionMask());
  block.params.softmaxScale = 1.0 / std::sqrt(double(block.headDim));
  block.params.dropout = toDouble(op.getAttentionDropout());
  block.params.dropoutKey = frame.layerDropoutKey(dropout::kAttentionSite);
  block.params.setWindow(op.getWindowSize());
  setAttentionBias(block.params, te::layerAttentionBias(op), frame);
  block.cpAllToAll = setContextParallel(op, block.params);
  block.rotaryInterleaved = op.getRotaryPosInterleaved();
  block.rowParallelProj = op.getTpSize() > 1;
  block.op = op;
  block.keyCache = op.getKeyCache();
  block.valueCache = op.getValueCache();
  block.cuSeqlensKv = op.getCuSeqlensKv();
  block.pageTable = op.getPageTable();
  return block;
}

/// Packed sequences (format thd): the block's cu_seqlens serve queries and
/// keys alike.
template <typename OpT>
static LogicalResult packBlock(OpT op, Frame &frame, AttentionBlock &block,
                               int64_t tokens) {
  if (block.params.format != te::QkvFormat::thd)
    return success();
  int64_t maxSeqlen = int64_t(*op.getMaxSeqlen());
  return setPackedSequences(op, block.params, frame.get(op.getCuSeqlens()),
                            /*cuKv=*/nullptr, maxSeqlen, maxSeqlen, tokens,
                            tokens, "cu_seqlens", "cu_seqlens");
}

/// Heads [first, first + count) of a fused projection [d0, d1, rows] ([t,
/// rows] for thd), as [d0, d1, count, headDim] ([t, count, headDim]).
static Tensor splitHeads(const Tensor &qkv, int64_t first, int64_t count,
                         int64_t headDim) {
  llvm::SmallVector<int64_t> shape(qkv.shape.begin(), qkv.shape.end() - 1);
  shape.append({count, headDim});
  return reshape(slice(qkv, first * headDim, count * headDim), shape);
}

/// Rotary embedding of q or k heads; packed tokens [t, h, d] rotate as an
/// sbhd view [t, 1, h, d] with a row of angles per token.
static Tensor rotateHeads(const Tensor &heads, const Tensor &freqs,
                          te::QkvFormat format, bool interleaved) {
  if (format != te::QkvFormat::thd)
    return rotary(heads, freqs, format, /*inverse=*/false, interleaved);
  Tensor view =
      reshape(heads, {heads.shape[0], 1, heads.shape[1], heads.shape[2]});
  return reshape(
      rotary(view, freqs, te::QkvFormat::sbhd, /*inverse=*/false, interleaved),
      heads.shape);
}

/// QKV projection (rows [q; k; v]; for cross-attention q from `x`, [k; v]
/// from the encoder's output), rotary embedding of q and k, attention and
/// output projection of `x` ([s, b, hidden] or [b, s, hidden]).
static FailureOr<Tensor>
attendBlock(const Tensor &x, const AttentionBlock &block, Frame &frame) {
  // Sequence parallelism: the projections read the gathered tokens.
  FailureOr<Tensor> input = columnInput(block.op, x, frame);
  if (failed(input))
    return failure();
  Tensor qkv = linear(*input, frame.get(block.qkvWeight),
                      frame.getOptional(block.qkvBias));
  Tensor query = splitHeads(qkv, 0, block.heads, block.headDim);
  Tensor key, value;
  if (block.encoder) {
    FailureOr<Tensor> encoder =
        columnInput(block.op, frame.get(block.encoder), frame);
    if (failed(encoder))
      return failure();
    Tensor kv = linear(*encoder, frame.get(block.kvWeight),
                       frame.getOptional(block.kvBias));
    key = splitHeads(kv, 0, block.groups, block.headDim);
    value = splitHeads(kv, block.groups, block.groups, block.headDim);
  } else {
    key = splitHeads(qkv, block.heads, block.groups, block.headDim);
    value = splitHeads(qkv, block.heads + block.groups, block.groups,
                       block.headDim);
  }
  const AttentionParams &params = block.params;
  if (const Tensor *freqs = frame.getOptional(block.rotary)) {
    // Context parallelism: the angles of this rank's tokens.
    Tensor local = params.cpRanks > 1
                       ? sequenceChunksOfRank(*freqs, params.cpRanks,
                                              params.cpRank, /*seqDim=*/0)
                       : *freqs;
    query = rotateHeads(query, local, params.format, block.rotaryInterleaved);
    key = rotateHeads(key, local, params.format, block.rotaryInterleaved);
  }
  Tensor context;
  if (block.keyCache) {
    // (No context parallelism: the verifier refuses it with a KV cache.)
    AttentionParams params = block.params;
    params.maskType = te::kvCacheMaskType(params.maskType);
    FailureOr<Tensor> output = runKvCacheAttention(
        block.op, frame, query, key, value, block.keyCache, block.valueCache,
        *block.params.cuSeqlensQ, frame.get(block.cuSeqlensKv),
        frame.getOptional(block.pageTable), block.params.maxSeqlenQ, params);
    if (failed(output))
      return failure();
    context = mergeHeads(std::move(*output));
  } else {
    FailureOr<Tensor> output =
        attendOverSequence(block.op, std::move(query), std::move(key),
                           std::move(value), params, block.cpAllToAll, frame);
    if (failed(output))
      return failure();
    context = mergeHeads(std::move(*output));
  }
  return linearOfRank(block.op, context, frame.get(block.projWeight),
                      frame.getOptional(block.projBias), block.rowParallelProj,
                      frame);
}

static LogicalResult runOp(te::MultiheadAttentionOp op, Frame &frame) {
  const Tensor &input = frame.get(op.getInput());
  Tensor normalized =
      op.getLnWeight()
          ? normalize(op.getNormalization(), input, frame.get(op.getLnWeight()),
                      frame.getOptional(op.getLnBias()),
                      toDouble(op.getLayernormEpsilon()),
                      op.getZeroCenteredGamma())
          : input;
  AttentionBlock block =
      attentionBlock(op, frame, op.getAttnMaskType(), op.getQkvFormat());
  if (failed(packBlock(op, frame, block, input.shape[0])))
    return failure();
  block.encoder = op.getEncoderOutput();
  block.kvWeight = op.getKvWeight();
  block.kvBias = op.getKvBias();
  block.params.queryMask = frame.getOptional(op.getQueryMask());
  FailureOr<Tensor> attended = attendBlock(normalized, block, frame);
  if (failed(attended) ||
      failed(frame.set(op, op.getOutput(), std::move(*attended))))
    return failure();
  return setLnOutput(op, op.getLnOutput(), frame, std::move(normalized));
}

/// A decoder layer's cross-attention block: the inter_* operands over
/// encoder_output, with the enc-dec mask, no rotary and no window.
static AttentionBlock crossAttentionBlock(te::TransformerLayerOp op,
                                          Frame &frame) {
  AttentionBlock block = attentionBlock(op, frame, op.getEncDecAttnMaskType(),
                                        op.getAttnInputFormat());
  block.qkvWeight = op.getInterQWeight();
  block.qkvBias = op.getInterQBias();
  block.projWeight = op.getInterProjWeight();
  block.projBias = op.getInterProjBias();
  block.rotary = Value();
  // Context parallelism serves the self-attention (the verifier refuses
  // it in decoders).
  block.params.cpRanks = 1;
  block.params.cpRank = 0;
  block.cpAllToAll = false;
  block.keyCache = block.valueCache = block.cuSeqlensKv = block.pageTable =
      Value();
  block.encoder = op.getEncoderOutput();
  block.kvWeight = op.getInterKvWeight();
  block.kvBias = op.getInterKvBias();
  block.params.mask = frame.getOptional(op.getEncDecMask());
  block.params.queryMask = frame.getOptional(op.getEncDecQueryMask());
  block.params.dropoutKey = frame.layerDropoutKey(dropout::kCrossAttentionSite);
  block.params.windowLeft = block.params.windowRight = -1;
  // The bias belongs to the self-attention.
  setAttentionBias(block.params, te::AttentionBias(), frame);
  return block;
}

/// h = r1 + dropout(attn(ln1)), y = r2 + dropout(mlp(ln2)), where ln1/ln2
/// normalize x and h, and the residuals r1/r2 are x and h, or ln1 and ln2
/// with apply_residual_connection_post_layernorm. A decoder (encoder_output)
/// adds h = r3 + dropout(cross(ln3)) in between, ln3 normalizing h. With
/// parallel_attention_mlp, y = x + dropout(attn(ln1) + mlp(ln2)), ln2
/// normalizing x. With drop_path_rate, TE's DropPath follows the dropout
/// after the self-attention and after the MLP.
static LogicalResult runOp(te::TransformerLayerOp op, Frame &frame) {
  const Tensor &input = frame.get(op.getInput());
  double eps = toDouble(op.getLayernormEpsilon());
  double rate = toDouble(op.getHiddenDropout());
  double dropPath = toDouble(op.getDropPathRate());
  // One drop-path draw per index of the input's first dim.
  int64_t group = 1;
  for (int64_t dim : llvm::ArrayRef<int64_t>(input.shape).drop_front())
    group *= dim;
  auto residualBranch = [&](Tensor branch, dropout::LayerDropoutSite site,
                            dropout::LayerDropoutSite dropPathSite) {
    return applyDropout(
        applyDropout(std::move(branch), rate, frame.layerDropoutKey(site)),
        dropPath, frame.layerDropoutKey(dropPathSite), group);
  };
  bool postLn = op.getApplyResidualConnectionPostLayernorm();
  // output_layernorm (out_ln_weight): the attention takes the input itself.
  Tensor ln1 = op.getAttnLnWeight()
                   ? normalize(op.getNormalization(), input,
                               frame.get(op.getAttnLnWeight()),
                               frame.getOptional(op.getAttnLnBias()), eps,
                               op.getZeroCenteredGamma())
                   : input;
  AttentionBlock block = attentionBlock(op, frame, op.getSelfAttnMaskType(),
                                        op.getAttnInputFormat());
  if (failed(packBlock(op, frame, block, input.shape[0])))
    return failure();
  FailureOr<Tensor> selfAttended = attendBlock(ln1, block, frame);
  if (failed(selfAttended))
    return failure();
  if (op.getParallelAttentionMlp()) {
    Tensor ln2 = normalize(
        op.getNormalization(), input, frame.get(op.getMlpLnWeight()),
        frame.getOptional(op.getMlpLnBias()), eps, op.getZeroCenteredGamma());
    FailureOr<Tensor> mlpOut = mlp(
        op, ln2, op.getActivation(), frame, op.getFc1Weight(), op.getFc1Bias(),
        op.getFc2Weight(), op.getFc2Bias(), op.getTpSize());
    if (failed(mlpOut))
      return failure();
    Tensor both = add(std::move(*selfAttended), std::move(*mlpOut));
    return frame.set(
        op, op.getOutput(),
        add(input, residualBranch(std::move(both), dropout::kMlpOutputSite,
                                  dropout::kMlpDropPathSite)));
  }
  Tensor attended =
      residualBranch(std::move(*selfAttended), dropout::kAttentionOutputSite,
                     dropout::kAttentionDropPathSite);
  Tensor hidden = add(postLn ? ln1 : input, attended);
  if (op.getEncoderOutput()) {
    Tensor ln3 = normalize(
        op.getNormalization(), hidden, frame.get(op.getInterLnWeight()),
        frame.getOptional(op.getInterLnBias()), eps, op.getZeroCenteredGamma());
    FailureOr<Tensor> crossAttended =
        attendBlock(ln3, crossAttentionBlock(op, frame), frame);
    if (failed(crossAttended))
      return failure();
    Tensor crossed =
        applyDropout(std::move(*crossAttended), rate,
                     frame.layerDropoutKey(dropout::kCrossAttentionOutputSite));
    hidden = add(postLn ? ln3 : hidden, crossed);
  }
  Tensor ln2 = normalize(
      op.getNormalization(), hidden, frame.get(op.getMlpLnWeight()),
      frame.getOptional(op.getMlpLnBias()), eps, op.getZeroCenteredGamma());
  FailureOr<Tensor> mlpBranch =
      mlp(op, ln2, op.getActivation(), frame, op.getFc1Weight(),
          op.getFc1Bias(), op.getFc2Weight(), op.getFc2Bias(), op.getTpSize());
  if (failed(mlpBranch))
    return failure();
  Tensor mlpOut = residualBranch(std::move(*mlpBranch), dropout::kMlpOutputSite,
                                 dropout::kMlpDropPathSite);
  Tensor output = add(postLn ? ln2 : hidden, mlpOut);
  if (op.getOutLnWeight())
    output = normalize(
        op.getNormalization(), output, frame.get(op.getOutLnWeight()),
        frame.getOptional(op.getOutLnBias()), eps, op.getZeroCenteredGamma());
  return frame.set(op, op.getOutput(), std::move(output));
}

bool tejit::interp::isLayerOp(Operation *op) {
  return isa<te::LayerNormOp, te::RMSNormOp, te::LinearOp,
             te::LayerNormLinearOp, te::LayerNormMLPOp,
             te::DotProductAttentionOp, te::MultiheadAttentionOp,
             te::TransformerLayerOp, te::GroupedLinearOp>(op);
}

LogicalResult tejit::interp::runLayerOp(Operation *op, Frame &frame) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<te::LayerNormOp, te::RMSNormOp, te::LinearOp, te::LayerNormLinearOp,
            te::LayerNormMLPOp, te::DotProductAttentionOp,
            te::MultiheadAttentionOp, te::TransformerLayerOp>(
          [&](auto op) { return runOp(op, frame); })
      .Case<te::GroupedLinearOp>(
          [&](auto op) { return runGroupedOp(op, frame); })
      .Default([](Operation *op) {
        return op->emitOpError() << "is not a te layer op";
      });
}
