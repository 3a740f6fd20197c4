//===- PrimitiveOps.cpp - the interpreter's primitive te ops --------------===//
#include "compiler/interpreter/Frame.h"

#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <tuple>

using namespace mlir;
using namespace tejit::interp;
namespace te = mlir::te;

static ArrayRef<int64_t> shapeOf(Value value) {
  return cast<RankedTensorType>(value.getType()).getShape();
}

/// The dropout key of an op reading `rngState` ([seed, offset]).
static FailureOr<DropoutKey> rngKey(Operation *op, const Tensor &rngState,
                                    int64_t stream) {
  uint64_t words[2];
  for (int i = 0; i < 2; ++i) {
    double value = rngState.data[i];
    if (value != std::trunc(value) || std::fabs(value) > 0x1.0p53)
      return op->emitOpError()
             << "'rng_state' element " << i << " (" << value
             << ") is not an integer the interpreter holds exactly (|x| <= "
                "2^53)";
    words[i] = static_cast<uint64_t>(static_cast<int64_t>(value));
  }
  return DropoutKey{words[0], words[1], static_cast<uint64_t>(stream)};
}

static LogicalResult runOp(te::ReshapeOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   reshape(frame.get(op.getInput()), shapeOf(op.getOutput())));
}

static LogicalResult runOp(te::TransposeOp op, Frame &frame) {
  return frame.set(op, op.getOutput(), transpose(frame.get(op.getInput())));
}

static LogicalResult runOp(te::SliceOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   slice(frame.get(op.getInput()), op.getOffsetAttr().getInt(),
                         shapeOf(op.getOutput()).back()));
}

static LogicalResult runOp(te::ConcatOp op, Frame &frame) {
  SmallVector<const Tensor *> inputs;
  for (Value input : op.getInputs())
    inputs.push_back(&frame.get(input));
  return frame.set(op, op.getOutput(), concat(inputs));
}

static LogicalResult runOp(te::AddOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   add(frame.get(op.getLhs()), frame.get(op.getRhs())));
}

static LogicalResult runOp(te::BiasAddOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   biasAdd(frame.get(op.getInput()), frame.get(op.getBias())));
}

static LogicalResult runOp(te::TpCopyOp op, Frame &frame) {
  return frame.set(op, op.getOutput(), frame.get(op.getInput()));
}

static LogicalResult runOp(te::TpAllReduceOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   frame.sumOverRanks(frame.get(op.getInput())));
}

static LogicalResult runOp(te::TpAllGatherOp op, Frame &frame) {
  FailureOr<Tensor> whole = frame.gatherOverRanks(op, frame.get(op.getInput()));
  return failure(failed(whole) ||
                 failed(frame.set(op, op.getOutput(), std::move(*whole))));
}

static LogicalResult runOp(te::TpReduceScatterOp op, Frame &frame) {
  FailureOr<Tensor> chunk = frame.scatterSumOverRanks(
      op, frame.get(op.getInput()), int64_t(op.getRanks()));
  return failure(failed(chunk) ||
                 failed(frame.set(op, op.getOutput(), std::move(*chunk))));
}

static LogicalResult runOp(te::CpAllGatherOp op, Frame &frame) {
  FailureOr<Tensor> whole =
      frame.gatherSequence(op, frame.get(op.getInput()), int64_t(op.getRanks()),
                           int64_t(op.getSeqDim()), op.getLoadBalanced());
  return failure(failed(whole) ||
                 failed(frame.set(op, op.getOutput(), std::move(*whole))));
}

static LogicalResult runOp(te::CpReduceScatterOp op, Frame &frame) {
  FailureOr<Tensor> local = frame.scatterSequenceSum(
      op, frame.get(op.getInput()), int64_t(op.getRanks()),
      int64_t(op.getSeqDim()), op.getLoadBalanced());
  return failure(failed(local) ||
                 failed(frame.set(op, op.getOutput(), std::move(*local))));
}

static LogicalResult runOp(te::CpAllToAllOp op, Frame &frame) {
  FailureOr<Tensor> output = frame.exchangeHeads(
      op, frame.get(op.getInput()), int64_t(op.getRanks()),
      int64_t(op.getSeqDim()), op.getLoadBalanced(), op.isToHeads());
  return failure(failed(output) ||
                 failed(frame.set(op, op.getOutput(), std::move(*output))));
}

static LogicalResult runOp(te::BiasGradOp op, Frame &frame) {
  return frame.set(op, op.getOutput(), biasGrad(frame.get(op.getGrad())));
}

static LogicalResult runOp(te::ActivationOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   activation(frame.get(op.getInput()), op.getActivation(),
                              te::ActivationParams::of(op)));
}

static LogicalResult runOp(te::ActivationGradOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   activationGrad(frame.get(op.getGrad()),
                                  frame.get(op.getInput()), op.getActivation(),
                                  te::ActivationParams::of(op)));
}

static LogicalResult runOp(te::DropoutOp op, Frame &frame) {
  FailureOr<DropoutKey> key =
      rngKey(op, frame.get(op.getRngState()), op.getStreamAttr().getInt());
  if (failed(key))
    return failure();
  return frame.set(
      op, op.getOutput(),
      applyDropout(frame.get(op.getInput()), op.getRate().convertToDouble(),
                   *key, static_cast<int64_t>(op.getGroup().value_or(1))));
}

static LogicalResult runOp(te::MatmulOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   matmul(frame.get(op.getA()), frame.get(op.getB()),
                          op.getTransposeA(), op.getTransposeB()));
}

static LogicalResult runOp(te::LayerNormFwdOp op, Frame &frame) {
  NormOutputs result =
      layerNorm(frame.get(op.getInput()), frame.get(op.getGamma()),
                frame.get(op.getBeta()), op.getEps().convertToDouble(),
                op.getZeroCenteredGamma());
  if (failed(frame.set(op, op.getOutput(), std::move(result.output))) ||
      failed(frame.set(op, op.getMean(), std::move(result.mean))))
    return failure();
  return frame.set(op, op.getRsigma(), std::move(result.rsigma));
}

static LogicalResult runOp(te::LayerNormBwdOp op, Frame &frame) {
  NormGrads grads =
      layerNormBwd(frame.get(op.getGrad()), frame.get(op.getInput()),
                   frame.get(op.getMean()), frame.get(op.getRsigma()),
                   frame.get(op.getGamma()), op.getZeroCenteredGamma());
  if (failed(frame.set(op, op.getInputGrad(), std::move(grads.input))) ||
      failed(frame.set(op, op.getGammaGrad(), std::move(grads.gamma))))
    return failure();
  return frame.set(op, op.getBetaGrad(), std::move(grads.beta));
}

static LogicalResult runOp(te::RMSNormFwdOp op, Frame &frame) {
  NormOutputs result =
      rmsNorm(frame.get(op.getInput()), frame.get(op.getGamma()),
              op.getEps().convertToDouble(), op.getZeroCenteredGamma());
  if (failed(frame.set(op, op.getOutput(), std::move(result.output))))
    return failure();
  return frame.set(op, op.getRsigma(), std::move(result.rsigma));
}

static LogicalResult runOp(te::RMSNormBwdOp op, Frame &frame) {
  NormGrads grads =
      rmsNormBwd(frame.get(op.getGrad()), frame.get(op.getInput()),
                 frame.get(op.getRsigma()), frame.get(op.getGamma()),
                 op.getZeroCenteredGamma());
  if (failed(frame.set(op, op.getInputGrad(), std::move(grads.input))))
    return failure();
  return frame.set(op, op.getGammaGrad(), std::move(grads.gamma));
}

static LogicalResult runOp(te::RotaryOp op, Frame &frame) {
  return frame.set(op, op.getOutput(),
                   rotary(frame.get(op.getInput()), frame.get(op.getFreqs()),
                          op.getQkvFormat(), op.getInverse(),
                          op.getInterleaved()));
}

/// Whether `type` reads the mask operand.
static bool usesMask(te::AttnMaskType type) {
  return type == te::AttnMaskType::padding ||
         type == te::AttnMaskType::padding_causal ||
         type == te::AttnMaskType::padding_causal_bottom_right ||
         type == te::AttnMaskType::arbitrary;
}

/// The mask operand of te.attention(_bwd), which their verifiers leave
/// unchecked: present exactly when `type` uses it, i1, [b, 1, 1, s_kv] for the
/// padding types, [b or 1, heads or 1, s_q, s_kv] for arbitrary.
static LogicalResult checkMask(Operation *op, te::AttnMaskType type, Value mask,
                               Value query, Value key, te::QkvFormat format) {
  if (usesMask(type) != static_cast<bool>(mask))
    return op->emitOpError()
           << "attn_mask_type " << te::stringifyAttnMaskType(type)
           << (mask ? " takes no mask operand" : " needs a mask operand");
  if (!mask)
    return success();
  unsigned seqDim = format == te::QkvFormat::sbhd ? 0 : 1;
  ArrayRef<int64_t> q = shapeOf(query), m = shapeOf(mask);
  int64_t batch = q[1 - seqDim], heads = q[2];
  int64_t seqQ = q[seqDim], seqKV = shapeOf(key)[seqDim];
  bool ok =
      cast<RankedTensorType>(mask.getType()).getElementType().isInteger(1) &&
      m.size() == 4 && m[3] == seqKV;
  if (type == te::AttnMaskType::arbitrary)
    ok = ok && (m[0] == 1 || m[0] == batch) && (m[1] == 1 || m[1] == heads) &&
         m[2] == seqQ;
  else
    ok = ok && m[0] == batch && m[1] == 1 && m[2] == 1;
  if (!ok)
    return op->emitOpError() << "mask must be i1 of shape "
                             << (type == te::AttnMaskType::arbitrary
                                     ? "[b or 1, heads or 1, s_q, s_kv]"
                                     : "[b, 1, 1, s_kv]")
                             << ", got " << mask.getType();
  return success();
}

LogicalResult tejit::interp::setPackedSequences(
    Operation *op, AttentionParams &params, const Tensor &cuQ,
    const Tensor *cuKv, int64_t maxQ, int64_t maxKv, int64_t tokensQ,
    int64_t tokensKv, StringRef nameQ, StringRef nameKv) {
  for (auto [offsets, longest, tokens, name] :
       {std::tuple(&cuQ, maxQ, tokensQ, nameQ),
        std::tuple(cuKv, maxKv, tokensKv, nameKv)}) {
    if (!offsets)
      continue;
    std::string error = packedSequencesError(*offsets, longest, tokens);
    if (!error.empty())
      return op->emitOpError() << "'" << name << "' " << error;
  }
  params.cuSeqlensQ = &cuQ;
  params.cuSeqlensKv = cuKv ? cuKv : &cuQ;
  params.maxSeqlenQ = maxQ;
  params.maxSeqlenKv = maxKv;
  return success();
}

void tejit::interp::setAttentionBias(AttentionParams &params,
                                     const te::AttentionBias &bias,
                                     const Frame &frame) {
  params.biasType = bias.type;
  params.bias = frame.getOptional(bias.bias);
  params.alibiSlopes = frame.getOptional(bias.slopes);
}

/// What every attention op (te.attention(_bwd), te.fp8_attention(_bwd))
/// has: layout, mask type and masks, softmax scale and dropout rate.
template <typename AttentionOpT>
static AttentionParams commonAttentionParams(AttentionOpT op,
                                             const Frame &frame) {
  AttentionParams params;
  params.format = op.getQkvFormat();
  params.maskType = op.getAttnMaskType();
  params.mask = frame.getOptional(op.getAttentionMask());
  params.queryMask = frame.getOptional(op.getQueryMask());
  params.softmaxScale = op.getSoftmaxScale().convertToDouble();
  params.dropout = op.getDropout().convertToDouble();
  return params;
}

/// Checks the dropout rate and, when it is not 0, takes the key from the
/// op's RNG state.
template <typename AttentionOpT>
static LogicalResult setDropoutKey(AttentionOpT op, const Frame &frame,
                                   AttentionParams &params) {
  if (!(params.dropout >= 0.0 && params.dropout < 1.0))
    return op.emitOpError()
           << "'dropout' must be in [0, 1), got " << params.dropout;
  if (params.dropout == 0.0)
    return success();
  if (!op.getRngState())
    return op.emitOpError() << "dropout needs an 'rng_state' operand";
  FailureOr<DropoutKey> key =
      rngKey(op, frame.get(op.getRngState()), op.getStreamAttr().getInt());
  if (failed(key))
    return failure();
  params.dropoutKey = *key;
  return success();
}

/// The parameters te.attention and te.attention_bwd share.
template <typename AttentionOpT>
static FailureOr<AttentionParams> attentionParams(AttentionOpT op,
                                                  Frame &frame) {
  AttentionParams params = commonAttentionParams(op, frame);
  params.setWindow(op.getWindowSize());
  params.cpRanks = int64_t(op.getCpRanks());
  params.cpRank = int64_t(op.getCpRank());
  setAttentionBias(params, te::primitiveAttentionBias(op), frame);
  if (params.format == te::QkvFormat::thd) {
    // The verifier has checked the operands' types; their values are the
    // caller's. Keys packed as the queries are checked against the keys'
    // own length bound too.
    const Tensor &cuQ = frame.get(op.getCuSeqlensQ());
    const Tensor *cuKv = frame.getOptional(op.getCuSeqlensKv());
    if (failed(setPackedSequences(
            op, params, cuQ, cuKv ? cuKv : &cuQ, int64_t(*op.getMaxSeqlenQ()),
            int64_t(*op.getMaxSeqlenKv()), shapeOf(op.getQuery())[0],
            shapeOf(op.getKey())[0], "cu_seqlens_q", "cu_seqlens_kv")))
      return failure();
  } else if (failed(checkMask(op, params.maskType, op.getAttentionMask(),
                              op.getQuery(), op.getKey(), params.format))) {
    return failure();
  }
  if (failed(setDropoutKey(op, frame, params)))
    return failure();
  return params;
}

/// te.fp8_attention(_bwd) have no bias, window or packed sequences.
template <typename Fp8AttentionOpT>
static FailureOr<AttentionParams> fp8AttentionParamsOf(Fp8AttentionOpT op,
                                                       const Frame &frame) {
  AttentionParams params = commonAttentionParams(op, frame);
  // Without cu_seqlens operands the kernels could not address thd.
  if (params.format == te::QkvFormat::thd)
    return op.emitOpError() << "FP8 attention does not support qkv_format thd";
  if (failed(checkMask(op, params.maskType, op.getAttentionMask(),
                       op.getQuery(), op.getKey(), params.format)) ||
      failed(setDropoutKey(op, frame, params)))
    return failure();
  return params;
}

FailureOr<AttentionParams>
tejit::interp::fp8AttentionParams(te::Fp8AttentionOp op, const Frame &frame) {
  return fp8AttentionParamsOf(op, frame);
}

FailureOr<AttentionParams>
tejit::interp::fp8AttentionParams(te::Fp8AttentionBwdOp op,
                                  const Frame &frame) {
  return fp8AttentionParamsOf(op, frame);
}

static LogicalResult runOp(te::AttentionOp op, Frame &frame) {
  FailureOr<AttentionParams> params = attentionParams(op, frame);
  if (failed(params))
    return failure();
  AttentionOutputs result =
      attention(frame.get(op.getQuery()), frame.get(op.getKey()),
                frame.get(op.getValue()), *params);
  if (failed(frame.set(op, op.getOutput(), std::move(result.output))))
    return failure();
  return frame.set(op, op.getSoftmaxLse(), std::move(result.softmaxLse));
}

static LogicalResult runOp(te::AttentionBwdOp op, Frame &frame) {
  FailureOr<AttentionParams> params = attentionParams(op, frame);
  if (failed(params))
    return failure();
  params->biasGrad = op.getBiasGrad();
  AttentionGrads grads = attentionBwd(
      frame.get(op.getGrad()), frame.get(op.getQuery()), frame.get(op.getKey()),
      frame.get(op.getValue()), frame.get(op.getOutput()),
      frame.get(op.getSoftmaxLse()), *params);
  if (failed(frame.set(op, op.getQueryGrad(), std::move(grads.query))) ||
      failed(frame.set(op, op.getKeyGrad(), std::move(grads.key))) ||
      failed(frame.set(op, op.getValueGrad(), std::move(grads.value))))
    return failure();
  return op.getDbias() ? frame.set(op, op.getDbias(), std::move(grads.bias))
                       : success();
}

FailureOr<Tensor> tejit::interp::runKvCacheAttention(
    Operation *op, Frame &frame, const Tensor &query, const Tensor &key,
    const Tensor &value, Value keyCache, Value valueCache,
    const Tensor &cuSeqlensQ, const Tensor &cuSeqlensKv,
    const Tensor *pageTable, int64_t maxSeqlenQ,
    const AttentionParams &params) {
  auto keyArgument = dyn_cast<BlockArgument>(keyCache);
  auto valueArgument = dyn_cast<BlockArgument>(valueCache);
  if (!keyArgument || !valueArgument)
    return op->emitOpError()
           << "the KV caches must be arguments of the function";
  const Tensor &keys = frame.get(keyCache);
  // A sequence's rows: the cache's, or its pages' when paged.
  int64_t rows = keys.shape[1] * (pageTable ? pageTable->shape[1] : 1);
  if (std::string error = kvCacheSequencesError(
          cuSeqlensQ, cuSeqlensKv, maxSeqlenQ, query.shape[0], rows);
      !error.empty())
    return op->emitOpError() << error;
  if (pageTable)
    if (std::string error = pageTableError(*pageTable, cuSeqlensKv,
                                           keys.shape[1], keys.shape[0]);
        !error.empty())
      return op->emitOpError() << error;
  KvCacheOutputs result =
      pageTable
          ? pagedKvCacheAttention(query, key, value, keys,
                                  frame.get(valueCache), *pageTable, cuSeqlensQ,
                                  cuSeqlensKv, maxSeqlenQ, params)
          : kvCacheAttention(query, key, value, keys, frame.get(valueCache),
                             cuSeqlensQ, cuSeqlensKv, maxSeqlenQ, params);
  frame.updateArgument(keyArgument, std::move(result.keyCache));
  frame.updateArgument(valueArgument, std::move(result.valueCache));
  return std::move(result.output);
}

static LogicalResult runOp(te::KvCacheAttentionOp op, Frame &frame) {
  AttentionParams params;
  params.maskType = op.getAttnMaskType();
  params.softmaxScale = op.getSoftmaxScale().convertToDouble();
  FailureOr<Tensor> output = runKvCacheAttention(
      op, frame, frame.get(op.getQuery()), frame.get(op.getKey()),
      frame.get(op.getValue()), op.getKeyCache(), op.getValueCache(),
      frame.get(op.getCuSeqlensQ()), frame.get(op.getCuSeqlensKv()),
      frame.getOptional(op.getPageTable()), int64_t(op.getMaxSeqlenQ()),
      params);
  if (failed(output))
    return failure();
  return frame.set(op, op.getOutput(), std::move(*output));
}

LogicalResult tejit::interp::runPrimitiveOp(Operation *op, Frame &frame) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<te::ReshapeOp, te::TransposeOp, te::SliceOp, te::ConcatOp,
            te::AddOp, te::BiasAddOp, te::BiasGradOp, te::TpCopyOp,
            te::TpAllReduceOp, te::TpAllGatherOp, te::TpReduceScatterOp,
            te::CpAllGatherOp, te::CpReduceScatterOp, te::CpAllToAllOp,
            te::ActivationOp, te::ActivationGradOp, te::DropoutOp, te::MatmulOp,
            te::LayerNormFwdOp, te::LayerNormBwdOp, te::RMSNormFwdOp,
            te::RMSNormBwdOp, te::RotaryOp, te::AttentionOp, te::AttentionBwdOp,
            te::KvCacheAttentionOp>([&](auto op) { return runOp(op, frame); })
      .Default([&](Operation *op) { return runQuantizedOp(op, frame); });
}
