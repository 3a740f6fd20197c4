//===- TEPrimitiveVerifiers.cpp - shape rules of primitive te ops
//----------===//
//
// Primitive ops are produced by passes rather than written by users, so
// these checks guard the passes: each message still names the operand.
//
//===----------------------------------------------------------------------===//
#include "dialects/LayerChecks.h"
#include "dialects/TEDialect.h"

using namespace mlir;
using namespace mlir::te;

static RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

static ArrayRef<int64_t> shapeOf(Value value) {
  return typeOf(value).getShape();
}

static RankedTensorType withShape(Value like, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, typeOf(like).getElementType());
}

static RankedTensorType withLastDim(Value like, int64_t last) {
  SmallVector<int64_t> shape(shapeOf(like));
  shape.back() = last;
  return withShape(like, shape);
}

/// f32 statistics with one value per row (all dims but the last).
static RankedTensorType rowStatsType(Value input) {
  return RankedTensorType::get(shapeOf(input).drop_back(),
                               Float32Type::get(input.getContext()));
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = typeOf(getInput()), out = getType();
  if (in.getElementType() != out.getElementType() ||
      in.getNumElements() != out.getNumElements())
    return emitOpError() << "must keep the element type and count: " << in
                         << " -> " << out;
  return success();
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (in.size() != 2)
    return emitOpError() << "'input' must be a matrix, got "
                         << getInput().getType();
  return expectType(*this, getOutput(), "output",
                    withShape(getInput(), {in[1], in[0]}));
}

LogicalResult SliceOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getOutput());
  int64_t offset = getOffsetAttr().getInt();
  if (in.size() != out.size() || in.drop_back() != out.drop_back() ||
      typeOf(getInput()).getElementType() !=
          typeOf(getOutput()).getElementType())
    return emitOpError() << "'output' must match 'input' in all dims but the "
                            "last";
  if (offset < 0 || offset + out.back() > in.back())
    return emitOpError() << "slice [" << offset << ", " << offset + out.back()
                         << ") is outside the last dim (" << in.back() << ")";
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "needs at least one input";
  int64_t total = 0;
  Value first = getInputs().front();
  for (Value input : getInputs()) {
    if (withLastDim(input, shapeOf(first).back()) != first.getType())
      return emitOpError() << "inputs must match in all dims but the last";
    total += shapeOf(input).back();
  }
  return expectType(*this, getOutput(), "output", withLastDim(first, total));
}

LogicalResult BiasAddOp::verify() {
  if (failed(expectType(*this, getBias(), "bias",
                        withShape(getInput(), {shapeOf(getInput()).back()}))))
    return failure();
  return expectType(*this, getOutput(), "output", getInput().getType());
}

LogicalResult BiasGradOp::verify() {
  return expectType(*this, getOutput(), "output",
                    withShape(getGrad(), {shapeOf(getGrad()).back()}));
}

/// The collectives of tensor parallelism move float activations between at
/// least two ranks.
static LogicalResult verifyTensorParallel(Operation *op, Value input,
                                          int64_t ranks) {
  if (ranks < 2)
    return op->emitOpError() << "ranks must be at least 2, got " << ranks;
  if (!isa<FloatType>(cast<RankedTensorType>(input.getType()).getElementType()))
    return op->emitOpError()
           << "input must be a float tensor, got " << input.getType();
  return success();
}

LogicalResult TpCopyOp::verify() {
  return verifyTensorParallel(*this, getInput(), getRanks());
}

LogicalResult TpAllReduceOp::verify() {
  return verifyTensorParallel(*this, getInput(), getRanks());
}

/// Sequence parallelism's collectives: `whole` is `slice` with `ranks`
/// times its dim 0 (a chunk per rank).
static LogicalResult verifySequenceParallel(Operation *op, Value slice,
                                            Value whole, int64_t ranks) {
  if (failed(verifyTensorParallel(op, op->getOperand(0), ranks)))
    return failure();
  auto sliceType = cast<RankedTensorType>(slice.getType());
  auto wholeType = cast<RankedTensorType>(whole.getType());
  SmallVector<int64_t> expected(sliceType.getShape());
  if (!expected.empty())
    expected.front() *= ranks;
  if (expected.empty() ||
      wholeType.getElementType() != sliceType.getElementType() ||
      wholeType.getShape() != ArrayRef<int64_t>(expected))
    return op->emitOpError()
           << "the whole tensor " << wholeType << " must be the slice "
           << sliceType << " with " << ranks << " times its dim 0";
  return success();
}

LogicalResult TpAllGatherOp::verify() {
  return verifySequenceParallel(*this, getInput(), getOutput(), getRanks());
}

LogicalResult TpReduceScatterOp::verify() {
  return verifySequenceParallel(*this, getOutput(), getInput(), getRanks());
}

/// Context parallelism's collectives: `whole` is `local` with `ranks` times
/// its dim `seq_dim` (0 or 1), which load balancing cuts into 2 ranks
/// chunks.
static LogicalResult verifyContextParallel(Operation *op, Value local,
                                           Value whole, int64_t ranks,
                                           int64_t seqDim, bool loadBalanced) {
  if (failed(verifyTensorParallel(op, op->getOperand(0), ranks)))
    return failure();
  auto localType = cast<RankedTensorType>(local.getType());
  auto wholeType = cast<RankedTensorType>(whole.getType());
  if (seqDim != 0 && seqDim != 1)
    return op->emitOpError()
           << "seq_dim must be 0 (sbhd) or 1 (bshd), got " << seqDim;
  if (localType.getRank() <= seqDim)
    return op->emitOpError()
           << "the local tensor " << localType << " has no dim " << seqDim;
  SmallVector<int64_t> expected(localType.getShape());
  expected[seqDim] *= ranks;
  if (wholeType.getElementType() != localType.getElementType() ||
      wholeType.getShape() != ArrayRef<int64_t>(expected))
    return op->emitOpError()
           << "the whole tensor " << wholeType << " must be the local "
           << localType << " with " << ranks << " times its dim " << seqDim;
  if (loadBalanced && localType.getShape()[seqDim] % 2 != 0)
    return op->emitOpError()
           << "load_balanced needs an even local dim " << seqDim
           << " (two chunks a rank), got " << localType.getShape()[seqDim];
  return success();
}

LogicalResult CpAllGatherOp::verify() {
  return verifyContextParallel(*this, getInput(), getOutput(), getRanks(),
                               getSeqDim(), getLoadBalanced());
}

LogicalResult CpReduceScatterOp::verify() {
  return verifyContextParallel(*this, getOutput(), getInput(), getRanks(),
                               getSeqDim(), getLoadBalanced());
}

/// te.cp_all_to_all: rank 4; the output is the input with `ranks` times
/// its dim seq_dim and 1/ranks of its dim head_dim (to heads) or the
/// other way round (to sequence), the other dims equal.
LogicalResult CpAllToAllOp::verify() {
  if (failed(verifyTensorParallel(*this, getInput(), getRanks())))
    return failure();
  auto inType = cast<RankedTensorType>(getInput().getType());
  auto outType = cast<RankedTensorType>(getOutput().getType());
  int64_t ranks = getRanks(), seqDim = getSeqDim(), headDim = getHeadDim();
  if (inType.getRank() != 4 || outType.getRank() != 4)
    return emitOpError() << "takes and returns rank-4 tensors (tokens, "
                            "heads, head_dim), got "
                         << inType << " -> " << outType;
  if (seqDim != 0 && seqDim != 1)
    return emitOpError() << "seq_dim must be 0 (sbhd) or 1 (bshd), got "
                         << seqDim;
  if (headDim != 2)
    return emitOpError() << "head_dim must be 2 (the heads of [s, b, h, d] "
                            "or [b, s, h, d]), got "
                         << headDim;
  // The shape on the other side of each direction.
  auto other = [&](bool toHeads) {
    SmallVector<int64_t> shape(inType.getShape());
    if (toHeads) {
      shape[seqDim] *= ranks;
      shape[headDim] /= ranks;
    } else {
      shape[seqDim] /= ranks;
      shape[headDim] *= ranks;
    }
    return shape;
  };
  ArrayRef<int64_t> in = inType.getShape(), out = outType.getShape();
  bool toHeads =
      in[headDim] % ranks == 0 && out == ArrayRef<int64_t>(other(true));
  bool toSequence =
      in[seqDim] % ranks == 0 && out == ArrayRef<int64_t>(other(false));
  if (outType.getElementType() != inType.getElementType() ||
      toHeads == toSequence)
    return emitOpError() << "the output " << outType << " must be the input "
                         << inType << " with " << ranks << " times its dim "
                         << seqDim << " (tokens) and 1/" << ranks
                         << " of its dim " << headDim
                         << " (heads), or the other way round";
  // Load balancing cuts each rank's tokens into two chunks.
  int64_t localTokens = toHeads ? in[seqDim] : out[seqDim];
  if (getLoadBalanced() && localTokens % 2 != 0)
    return emitOpError() << "load_balanced needs an even local dim " << seqDim
                         << " (two chunks a rank), got " << localTokens;
  return success();
}

/// The last dim an activation produces from `inputWidth` channels.
static FailureOr<int64_t> activationWidth(Operation *op, Activation activation,
                                          int64_t inputWidth) {
  if (!isGatedActivation(activation))
    return inputWidth;
  if (inputWidth % 2 != 0)
    return op->emitOpError()
           << "gated activation " << stringifyActivation(activation)
           << " needs an even last dim, got " << inputWidth;
  return inputWidth / 2;
}

LogicalResult ActivationOp::verify() {
  if (failed(verifyActivationParams(*this, getActivation())))
    return failure();
  FailureOr<int64_t> width =
      activationWidth(*this, getActivation(), shapeOf(getInput()).back());
  if (failed(width))
    return failure();
  return expectType(*this, getOutput(), "output",
                    withLastDim(getInput(), *width));
}

LogicalResult ActivationGradOp::verify() {
  if (failed(verifyActivationParams(*this, getActivation())))
    return failure();
  FailureOr<int64_t> width =
      activationWidth(*this, getActivation(), shapeOf(getInput()).back());
  if (failed(width) || failed(expectType(*this, getGrad(), "grad",
                                         withLastDim(getInput(), *width))))
    return failure();
  return expectType(*this, getOutput(), "output", getInput().getType());
}

static LogicalResult verifyRate(Operation *op, APFloat rate) {
  double value = rate.convertToDouble();
  if (!(value >= 0.0 && value < 1.0))
    return op->emitOpError() << "'rate' must be in [0, 1), got " << value;
  return success();
}

static RankedTensorType rngStateType(MLIRContext *context) {
  return RankedTensorType::get({2}, IntegerType::get(context, 64));
}

LogicalResult DropoutOp::verify() {
  if (failed(verifyRate(*this, getRate())) ||
      failed(expectType(*this, getRngState(), "rng_state",
                        rngStateType(getContext()))))
    return failure();
  if (std::optional<uint64_t> group = getGroup()) {
    auto type = cast<RankedTensorType>(getInput().getType());
    int64_t size = static_cast<int64_t>(*group);
    if (size < 1 || type.getRank() == 0 || size % type.getShape().back() ||
        type.getNumElements() % size)
      return emitOpError() << "'group' must be a multiple of the last dim "
                              "that divides the element count, got "
                           << size << " for " << type;
  }
  return expectType(*this, getOutput(), "output", getInput().getType());
}

LogicalResult MatmulOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getA()), b = shapeOf(getB());
  if (a.size() != 2 || b.size() != 2)
    return emitOpError() << "operands must be matrices, got "
                         << getA().getType() << " and " << getB().getType();
  int64_t m = getTransposeA() ? a[1] : a[0], k = getTransposeA() ? a[0] : a[1];
  int64_t kb = getTransposeB() ? b[1] : b[0], n = getTransposeB() ? b[0] : b[1];
  if (k != kb)
    return emitOpError() << "contracting dims differ: " << k << " (a) vs " << kb
                         << " (b)";
  ArrayRef<int64_t> out = shapeOf(getOutput());
  if (out.size() != 2 || out[0] != m || out[1] != n)
    return emitOpError() << "'output' must be [" << m << ", " << n << "], got "
                         << getOutput().getType();
  return success();
}

/// Norm parameters are vectors of the input's width and dtype.
static LogicalResult verifyNormParam(Operation *op, Value input, Value param,
                                     StringRef name) {
  return expectType(op, param, name, withShape(input, {shapeOf(input).back()}));
}

LogicalResult LayerNormFwdOp::verify() {
  RankedTensorType stats = rowStatsType(getInput());
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(verifyNormParam(*this, getInput(), getBeta(), "beta")) ||
      failed(expectType(*this, getOutput(), "output", getInput().getType())) ||
      failed(expectType(*this, getMean(), "mean", stats)))
    return failure();
  return expectType(*this, getRsigma(), "rsigma", stats);
}

LogicalResult LayerNormBwdOp::verify() {
  RankedTensorType stats = rowStatsType(getInput());
  Type paramType = getGamma().getType();
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(expectType(*this, getGrad(), "grad", getInput().getType())) ||
      failed(expectType(*this, getMean(), "mean", stats)) ||
      failed(expectType(*this, getRsigma(), "rsigma", stats)) ||
      failed(expectType(*this, getInputGrad(), "input_grad",
                        getInput().getType())) ||
      failed(expectType(*this, getGammaGrad(), "gamma_grad", paramType)))
    return failure();
  return expectType(*this, getBetaGrad(), "beta_grad", paramType);
}

LogicalResult RMSNormFwdOp::verify() {
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(expectType(*this, getOutput(), "output", getInput().getType())))
    return failure();
  return expectType(*this, getRsigma(), "rsigma", rowStatsType(getInput()));
}

LogicalResult RMSNormBwdOp::verify() {
  if (failed(verifyNormParam(*this, getInput(), getGamma(), "gamma")) ||
      failed(expectType(*this, getGrad(), "grad", getInput().getType())) ||
      failed(
          expectType(*this, getRsigma(), "rsigma", rowStatsType(getInput()))) ||
      failed(expectType(*this, getInputGrad(), "input_grad",
                        getInput().getType())))
    return failure();
  return expectType(*this, getGammaGrad(), "gamma_grad", getGamma().getType());
}

LogicalResult RotaryOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (in.size() != 4 || in[3] % 2 != 0)
    return emitOpError() << "'input' must be [s, b, h, d] (or bshd) with an "
                            "even d, got "
                         << getInput().getType();
  if (getQkvFormat() == QkvFormat::thd)
    return emitOpError() << "takes sbhd or bshd; packed (thd) tokens rotate "
                            "as a [t, 1, h, d] sbhd view with per-token "
                            "angles [t, 1, 1, r]";
  int64_t seq = in[getQkvFormat() == QkvFormat::sbhd ? 0 : 1];
  // The table's width r: the rotated channels (partial rotary below d).
  auto freqs = cast<RankedTensorType>(getFreqs().getType());
  int64_t rotated = freqs.getRank() == 4 ? freqs.getShape()[3] : 0;
  if (rotated <= 0 || rotated % 2 != 0 || rotated > in[3])
    return emitOpError() << "'freqs' must be f32 [s, 1, 1, r] with r even "
                            "and at most the head dim "
                         << in[3] << ", got " << freqs;
  auto freqsType = RankedTensorType::get({seq, 1, 1, rotated},
                                         Float32Type::get(getContext()));
  if (failed(expectType(*this, getFreqs(), "freqs", freqsType)))
    return failure();
  return expectType(*this, getOutput(), "output", getInput().getType());
}

FailureOr<SmallVector<int64_t>>
mlir::te::verifyAttentionOperands(Operation *op, Value query, Value key,
                                  Value value, Value rngState,
                                  QkvFormat format) {
  ArrayRef<int64_t> q = shapeOf(query), k = shapeOf(key);
  if (key.getType() != value.getType())
    return op->emitOpError() << "key and value must have one type";
  if (rngState && failed(expectType(op, rngState, "rng_state",
                                    rngStateType(op->getContext()))))
    return failure();
  if (format == QkvFormat::thd) {
    // Batch and s_q come from cu_seqlens and max_seqlen_q (the caller's).
    if (q.size() != 3 || k.size() != 3 || k[2] != q[2] || k[1] < 1 ||
        q[1] % k[1] != 0)
      return op->emitOpError()
             << "thd query/key/value must be [t, h, d] with one head dim, "
                "query heads a multiple of key/value heads";
    return SmallVector<int64_t>{0, q[1], 0};
  }
  if (q.size() != 4 || k.size() != 4)
    return op->emitOpError() << "query/key/value must be 4-D, key and value "
                                "alike";
  unsigned seqDim = format == QkvFormat::sbhd ? 0 : 1;
  unsigned batchDim = 1 - seqDim;
  if (k[batchDim] != q[batchDim] || k[3] != q[3] || k[2] < 1 ||
      q[2] % k[2] != 0)
    return op->emitOpError() << "key/value must share query's batch and head "
                                "dim, with query heads a multiple of theirs";
  return SmallVector<int64_t>{q[batchDim], q[2], q[seqDim]};
}

/// thd's sequence operands: cu_seqlens_q (and cu_seqlens_kv) i32 [b + 1],
/// both length bounds, a padding mask type and no mask operands; none of
/// them without thd. Fills the batch and s_q of `stats`.
template <typename OpT>
static LogicalResult verifyPackedSequences(OpT op,
                                           SmallVector<int64_t> &stats) {
  Value cuQ = op.getCuSeqlensQ(), cuKv = op.getCuSeqlensKv();
  std::optional<uint64_t> maxQ = op.getMaxSeqlenQ(),
                          maxKv = op.getMaxSeqlenKv();
  if (op.getQkvFormat() != QkvFormat::thd) {
    if (cuQ || cuKv || maxQ || maxKv)
      return op.emitOpError() << "'cu_seqlens_q', 'cu_seqlens_kv', "
                                 "'max_seqlen_q' and 'max_seqlen_kv' need "
                                 "qkv_format = thd";
    return success();
  }
  auto signedMax = [](std::optional<uint64_t> value) {
    return value ? std::optional<int64_t>(int64_t(*value)) : std::nullopt;
  };
  FailureOr<int64_t> batch = verifyPackedSequences(
      op, cuQ, "cu_seqlens_q", signedMax(maxQ), "max_seqlen_q",
      op.getAttnMaskType(), "attn_mask_type");
  if (failed(batch))
    return failure();
  if (cuKv && failed(expectType(op, cuKv, "cu_seqlens_kv", cuQ.getType())))
    return failure();
  if (!maxKv || int64_t(*maxKv) < 1)
    return op.emitOpError() << "'max_seqlen_kv' must be given and >= 1";
  if (op.getAttentionMask() || op.getQueryMask())
    return op.emitOpError() << "qkv_format = thd takes its sequences from "
                               "cu_seqlens, not from mask operands";
  stats[0] = *batch;
  stats[2] = int64_t(*maxQ);
  return success();
}

LogicalResult mlir::te::verifyQueryMask(Operation *op, Value queryMask,
                                        ArrayRef<int64_t> stats,
                                        AttnMaskType maskType) {
  if (!queryMask)
    return success();
  if (maskType != AttnMaskType::padding &&
      maskType != AttnMaskType::padding_causal)
    return op->emitOpError() << "'query_mask' needs the padding or "
                                "padding_causal mask type";
  auto type = RankedTensorType::get({stats[0], 1, 1, stats[2]},
                                    IntegerType::get(op->getContext(), 1));
  return expectType(op, queryMask, "query_mask", type);
}

/// The bias (docs/attention-bias.md) of te.attention or te.attention_bwd,
/// whose statistics are `stats` ([b, heads, s_q]).
template <typename OpT>
static LogicalResult verifyBias(OpT op, ArrayRef<int64_t> stats) {
  static const AttentionBiasNames names = {"bias_type", "bias", "alibi_slopes",
                                           "bias_grad"};
  bool packed = op.getQkvFormat() == QkvFormat::thd;
  SmallVector<int64_t> dims(stats);
  // s_kv; thd refuses a bias before it is read.
  dims.push_back(
      packed
          ? 0
          : shapeOf(op.getKey())[op.getQkvFormat() == QkvFormat::sbhd ? 0 : 1]);
  return verifyAttentionBias(op, names, primitiveAttentionBias(op), dims,
                             typeOf(op.getQuery()).getElementType(),
                             op.getAttnMaskType(),
                             packed ? "packed sequences (thd)" : "");
}

/// Context parallelism (docs/context-parallel.md): with cp_ranks N > 1,
/// q holds this rank's 2c queries and k/v the whole N * 2c keys, under
/// no_mask or causal alone.
template <typename OpT> static LogicalResult verifyAttentionCp(OpT op) {
  int64_t ranks = op.getCpRanks(), rank = op.getCpRank();
  if (ranks < 1 || rank < 0 || rank >= ranks)
    return op.emitOpError() << "'cp_rank' must be in [0, cp_ranks), with "
                               "cp_ranks >= 1; got cp_rank "
                            << rank << " of " << ranks;
  if (ranks == 1)
    return success();
  AttnMaskType mask = op.getAttnMaskType();
  StringRef refused =
      op.getQkvFormat() == QkvFormat::thd ? "qkv_format thd"
      : mask != AttnMaskType::no_mask && mask != AttnMaskType::causal
          ? "a mask type other than no_mask and causal"
      : op.getWindowSize()               ? "'window_size'"
      : op.getAttentionMask()            ? "an attention mask operand"
      : op.getQueryMask()                ? "'query_mask'"
      : primitiveAttentionBias(op).any() ? "an attention bias"
      : op.getFp8RecipeAttr()            ? "'fp8_recipe'"
                                         : "";
  if (!refused.empty())
    return op.emitOpError() << "context parallelism (cp_ranks " << ranks
                            << ") is not supported with " << refused;
  unsigned seqDim = op.getQkvFormat() == QkvFormat::sbhd ? 0 : 1;
  int64_t sq = shapeOf(op.getQuery())[seqDim],
          skv = shapeOf(op.getKey())[seqDim];
  if (sq % 2 != 0 || skv != sq * ranks)
    return op.emitOpError()
           << "with cp_ranks " << ranks
           << " the query holds two chunks of this rank's tokens (an even "
              "length) and key/value the whole sequence (cp_ranks times "
              "it), got "
           << sq << " queries and " << skv << " keys";
  return success();
}

/// What te.attention and te.attention_bwd check alike; returns the
/// softmax statistics' type.
template <typename OpT>
static FailureOr<RankedTensorType> verifyAttentionCommon(OpT op) {
  if (DelayedScalingAttr recipe = op.getFp8RecipeAttr();
      recipe && !recipe.getFp8Dpa())
    return op.emitOpError() << "'fp8_recipe' runs the attention in FP8, so "
                               "it needs fp8_dpa = true";
  FailureOr<SmallVector<int64_t>> stats =
      verifyAttentionOperands(op, op.getQuery(), op.getKey(), op.getValue(),
                              op.getRngState(), op.getQkvFormat());
  if (failed(stats) || failed(verifyPackedSequences(op, *stats)) ||
      failed(verifyQueryMask(op, op.getQueryMask(), *stats,
                             op.getAttnMaskType())) ||
      failed(verifyAttentionWindow(op, op.getWindowSize(),
                                   op.getAttnMaskType())) ||
      failed(verifyBias(op, *stats)) || failed(verifyAttentionCp(op)))
    return failure();
  return RankedTensorType::get(*stats, Float32Type::get(op.getContext()));
}

LogicalResult AttentionOp::verify() {
  FailureOr<RankedTensorType> stats = verifyAttentionCommon(*this);
  if (failed(stats) ||
      failed(expectType(*this, getOutput(), "output", getQuery().getType())))
    return failure();
  return expectType(*this, getSoftmaxLse(), "softmax_lse", *stats);
}

LogicalResult AttentionBwdOp::verify() {
  FailureOr<RankedTensorType> stats = verifyAttentionCommon(*this);
  if (failed(stats) ||
      failed(expectType(*this, getGrad(), "grad", getQuery().getType())) ||
      failed(expectType(*this, getOutput(), "output", getQuery().getType())) ||
      failed(expectType(*this, getSoftmaxLse(), "softmax_lse", *stats)) ||
      failed(expectType(*this, getQueryGrad(), "query_grad",
                        getQuery().getType())) ||
      failed(expectType(*this, getKeyGrad(), "key_grad", getKey().getType())) ||
      failed(expectType(*this, getValueGrad(), "value_grad",
                        getValue().getType())))
    return failure();
  // The bias's gradient: a result exactly with `bias_grad`, of the bias's
  // type (which the verifier has held to [1, heads, s_q, s_kv]).
  if (getBiasGrad() != static_cast<bool>(getDbias()))
    return emitOpError() << "the 'dbias' result must be present exactly when "
                            "'bias_grad' is set";
  return getDbias()
             ? expectType(*this, getDbias(), "dbias", getBias().getType())
             : success();
}

LogicalResult KvCacheAttentionOp::verify() {
  auto fail = [&]() { return emitOpError(); };
  ArrayRef<int64_t> q = shapeOf(getQuery()), k = shapeOf(getKey());
  Type element = typeOf(getQuery()).getElementType();
  if (!element.isBF16() && !element.isF16())
    return fail() << "query must be bf16 or f16, got " << getQuery().getType();
  if (q.size() != 3 || k.size() != 3 || k[0] != q[0] || k[2] != q[2] ||
      k[1] < 1 || q[1] % k[1] != 0)
    return fail() << "query must be [t, heads, d] and key/value [t, kv_heads, "
                     "d] (the step's new tokens) with heads a multiple of "
                     "kv_heads, got "
                  << formatShape(q) << " and " << formatShape(k);
  if (failed(expectType(*this, getKey(), "key",
                        withShape(getQuery(), {q[0], k[1], q[2]}))) ||
      failed(expectType(*this, getValue(), "value", getKey().getType())))
    return failure();
  FailureOr<int64_t> batch = verifyPackedSequences(
      *this, getCuSeqlensQ(), "cu_seqlens_q", int64_t(getMaxSeqlenQ()),
      "max_seqlen_q", /*maskType=*/std::nullopt, "attn_mask_type");
  if (failed(batch) ||
      failed(expectType(*this, getCuSeqlensKv(), "cu_seqlens_kv",
                        getCuSeqlensQ().getType())))
    return failure();
  ArrayRef<int64_t> cache = shapeOf(getKeyCache());
  bool paged = static_cast<bool>(getPageTable());
  if (cache.size() != 4 || cache[0] < 1 || (!paged && cache[0] != *batch) ||
      cache[2] != k[1] || cache[3] != k[2] || cache[1] < 1) {
    if (paged)
      return fail() << "key_cache must be paged [pages, page_size, kv_heads, "
                       "d] = [pages, page_size, "
                    << k[1] << ", " << k[2] << "], got "
                    << getKeyCache().getType();
    return fail() << "key_cache must be [b, s_cache, kv_heads, d] = [" << *batch
                  << ", s_cache, " << k[1] << ", " << k[2] << "], got "
                  << getKeyCache().getType();
  }
  if (failed(expectType(*this, getKeyCache(), "key_cache",
                        withShape(getQuery(), cache))) ||
      failed(expectType(*this, getValueCache(), "value_cache",
                        getKeyCache().getType())))
    return failure();
  // A sequence's rows: the cache's, or its pages' when paged.
  int64_t rows = cache[1];
  if (paged) {
    FailureOr<int64_t> pagedRows =
        verifyPageTable(*this, getPageTable(), *batch, cache[1]);
    if (failed(pagedRows))
      return failure();
    rows = *pagedRows;
  }
  if (int64_t(getMaxSeqlenQ()) > rows)
    return fail() << "'max_seqlen_q' (" << getMaxSeqlenQ() << ") exceeds the "
                  << (paged ? "paged " : "") << "cache's " << rows << " rows";
  AttnMaskType mask = getAttnMaskType();
  if (mask != AttnMaskType::padding &&
      mask != AttnMaskType::padding_causal_bottom_right)
    return fail() << "'attn_mask_type' must be padding or "
                     "padding_causal_bottom_right (new tokens see the cache "
                     "up to their own position), got "
                  << stringifyAttnMaskType(mask);
  // The new tokens land in the caller's buffers.
  for (auto [name, cacheValue] : {std::pair{"key_cache", getKeyCache()},
                                  std::pair{"value_cache", getValueCache()}})
    if (!isa<BlockArgument>(cacheValue))
      return fail() << "'" << name
                    << "' must be an argument of the function (the caller's "
                       "cache, which the op updates in place)";
  if (getKeyCache() == getValueCache())
    return fail() << "key_cache and value_cache must be distinct arguments";
  return expectType(*this, getOutput(), "output", getQuery().getType());
}
