//===- AttentionLauncher.cpp - a plan's attention step on cuDNN -----------===//
#include "runtime/AttentionLauncher.h"
#include "runtime/Device.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

using namespace tejit::runtime;
using llvm::Error;
using llvm::StringRef;

namespace {
#include "AttentionPrepPtx.inc"
#include "DecodeAttentionPtx.inc"

/// cuDNN wants 16-byte aligned tensors; scratch pieces start on 256 bytes.
constexpr size_t scratchAlignment = 256;
size_t alignUp(size_t bytes) {
  return (bytes + scratchAlignment - 1) / scratchAlignment * scratchAlignment;
}

/// The Philox counter distance between the dropout streams of two attention
/// sites of one program; each forward moves the program's offset by 2^32.
constexpr unsigned siteOffsetShift = 16;

/// The step's attributes as the plan printed them.
struct StepAttributes {
  const AttentionStep &step;
  const FunctionPlan &function;

  Error error(const llvm::Twine &message) const {
    return makeError(ErrorCode::Unsupported,
                     llvm::formatv("function '{0}', attention step: {1}",
                                   function.name, message.str()));
  }
  std::optional<StringRef> raw(StringRef name) const {
    auto found = step.attributes.find(name.str());
    if (found == step.attributes.end())
      return std::nullopt;
    return StringRef(found->second);
  }
  /// "#te.attn_mask_type<causal>" -> "causal".
  llvm::Expected<StringRef> enumCase(StringRef name) const {
    std::optional<StringRef> text = raw(name);
    if (!text)
      return error("has no '" + name + "' attribute");
    size_t open = text->find('<'), close = text->rfind('>');
    if (open == StringRef::npos || close == StringRef::npos || close < open)
      return error("attribute '" + name + "' is '" + *text +
                   "', not an enum attribute");
    return text->slice(open + 1, close).trim();
  }
  /// bias_type's case ("#te.attn_bias_type<alibi>" -> "alibi"); "no_bias"
  /// when absent.
  llvm::Expected<StringRef> biasType() const {
    if (!raw("bias_type"))
      return StringRef("no_bias");
    return enumCase("bias_type");
  }
  /// "2.500000e-01 : f64" -> 0.25; `fallback` when absent.
  llvm::Expected<double> number(StringRef name, double fallback) const {
    std::optional<StringRef> text = raw(name);
    if (!text)
      return fallback;
    double value = 0;
    if (text->split(':').first.trim().getAsDouble(value))
      return error("attribute '" + name + "' is '" + *text + "', not a number");
    return value;
  }
  /// "128 : i64" -> 128; an error when absent.
  llvm::Expected<int64_t> integer(StringRef name) const {
    std::optional<StringRef> text = raw(name);
    if (!text)
      return error("has no '" + name + "' attribute");
    int64_t value = 0;
    if (text->split(':').first.trim().getAsInteger(10, value))
      return error("attribute '" + name + "' is '" + *text +
                   "', not an integer");
    return value;
  }
  /// "array<i64: 4096, 0>" -> {4096, 0}; {-1, -1} when absent.
  llvm::Expected<std::pair<int64_t, int64_t>> window(StringRef name) const {
    std::optional<StringRef> text = raw(name);
    if (!text)
      return std::pair<int64_t, int64_t>{-1, -1};
    StringRef body = text->trim();
    int64_t left = 0, right = 0;
    if (!body.consume_front("array<i64:") || !body.consume_back(">"))
      return error("attribute '" + name + "' is '" + *text +
                   "', not an array<i64: left, right>");
    auto [first, second] = body.split(',');
    if (first.trim().getAsInteger(10, left) ||
        second.trim().getAsInteger(10, right))
      return error("attribute '" + name + "' is '" + *text +
                   "', not an array<i64: left, right>");
    return std::pair<int64_t, int64_t>{left, right};
  }
};

llvm::Expected<AttentionMask> maskOf(StringRef name, bool sameLengths,
                                     const StepAttributes &attributes) {
  // With as many queries as keys (self-attention), bottom-right alignment
  // is top-left alignment.
  if (name == "no_mask")
    return AttentionMask::None;
  if (name == "causal" || (sameLengths && name == "causal_bottom_right"))
    return AttentionMask::Causal;
  if (name == "padding")
    return AttentionMask::Padding;
  if (name == "padding_causal" ||
      (sameLengths && name == "padding_causal_bottom_right"))
    return AttentionMask::PaddingCausal;
  return attributes.error("attn_mask_type '" + name +
                          "' is not supported by the cuDNN path yet "
                          "(no_mask, causal, padding and padding_causal are)");
}

/// A step's cp_ranks / cp_rank attributes (docs/context-parallel.md): the
/// split of its parsed problem over the ranks, or nullopt without them.
llvm::Expected<std::optional<CpAttentionSplit>>
readContextParallel(const StepAttributes &attributes,
                    const AttentionProblem &problem, bool masked) {
  // Absent: the attributes' defaults (MLIR leaves them out when printing).
  int64_t ranks = 1, rank = 0;
  for (auto [name, value] :
       {std::pair{"cp_ranks", &ranks}, std::pair{"cp_rank", &rank}}) {
    if (!attributes.raw(name))
      continue;
    auto read = attributes.integer(name);
    if (!read)
      return read.takeError();
    *value = *read;
  }
  if (ranks == 1 && rank == 0)
    return std::nullopt;
  if (masked)
    return attributes.error("context parallelism takes no padding mask");
  auto split = splitCpAttention(problem, ranks, rank);
  if (!split)
    return attributes.error(llvm::toString(split.takeError()));
  return std::optional<CpAttentionSplit>(std::move(*split));
}

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  return "[" +
         llvm::join(llvm::map_range(
                        shape, [](int64_t d) { return std::to_string(d); }),
                    ", ") +
         "]";
}

/// The value ids of a thd step that thd's shapes are read from and checked
/// against: cuDNN reads and writes every one of them in full.
struct ThdValues {
  int64_t q, k, v, out, stats;
  std::optional<int64_t> gradOut, gradQ, gradK, gradV;
  int64_t cuSeqlensQ;
  std::optional<int64_t> cuSeqlensKv;
};

/// thd: q [t, h, d], k and v [t_kv, kv_heads, d], cu_seqlens i32 [b + 1],
/// stats f32 [b, h, max_seqlen_q]; max_seqlen_q/kv from the attributes.
Error readThdProblem(const StepAttributes &attributes,
                     const FunctionPlan &function, const ThdValues &ids,
                     AttentionProblem &problem) {
  auto type = [&](int64_t id) -> const TensorType & {
    return function.values[id].type;
  };
  const TensorType &qType = type(ids.q), &kType = type(ids.k);
  if (qType.shape.size() != 3 || kType.shape.size() != 3)
    return attributes.error("qkv_format thd takes 3-D query and key tensors "
                            "[tokens, heads, head dim]; got " +
                            shapeText(qType.shape) + " and " +
                            shapeText(kType.shape));
  const TensorType &cuType = type(ids.cuSeqlensQ);
  if (cuType.element != ElementType::I32 || cuType.shape.size() != 1 ||
      cuType.shape[0] < 2)
    return attributes.error("qkv_format thd takes cu_seqlens as i32 [b + 1] "
                            "with b >= 1; got " +
                            shapeText(cuType.shape) + " of " +
                            elementTypeName(cuType.element));
  if (ids.cuSeqlensKv && type(*ids.cuSeqlensKv).shape != cuType.shape)
    return attributes.error(
        "cu_seqlens_kv " + shapeText(type(*ids.cuSeqlensKv).shape) +
        " does not match cu_seqlens_q " + shapeText(cuType.shape));
  auto maxQ = attributes.integer("max_seqlen_q");
  if (!maxQ)
    return maxQ.takeError();
  auto maxKv = attributes.integer("max_seqlen_kv");
  if (!maxKv)
    return maxKv.takeError();
  if (*maxQ <= 0 || *maxKv <= 0)
    return attributes.error(llvm::formatv(
        "max_seqlen_q ({0}) and max_seqlen_kv ({1}) must be positive", *maxQ,
        *maxKv));
  problem.batch = cuType.shape[0] - 1;
  problem.tokensQ = qType.shape[0];
  problem.heads = qType.shape[1];
  problem.headDim = qType.shape[2];
  problem.tokensKv = kType.shape[0];
  problem.kvHeads = kType.shape[1];
  problem.seqQ = *maxQ;
  problem.seqKv = *maxKv;
  problem.element = qType.element;
  if (kType.shape[2] != problem.headDim)
    return attributes.error("the key's head dim differs from the query's");

  if (type(ids.stats).element != ElementType::F32)
    return attributes.error("qkv_format thd takes f32 softmax statistics");
  // cuDNN writes (and the backward reads) every row of these: a smaller
  // buffer would be written out of bounds.
  std::vector<int64_t> stats{problem.batch, problem.heads, problem.seqQ};
  std::pair<std::optional<int64_t>, const std::vector<int64_t> *> expected[] = {
      {ids.v, &kType.shape},     {ids.out, &qType.shape},
      {ids.stats, &stats},       {ids.gradOut, &qType.shape},
      {ids.gradQ, &qType.shape}, {ids.gradK, &kType.shape},
      {ids.gradV, &kType.shape}};
  for (auto [id, shape] : expected)
    if (id && type(*id).shape != *shape)
      return attributes.error(
          "qkv_format thd: a value of shape " + shapeText(type(*id).shape) +
          " where " + shapeText(*shape) +
          " is expected (value, output, gradients as q [t, h, d] or k "
          "[t_kv, kv_heads, d]; stats [b, h, max_seqlen_q])");
  return Error::success();
}

/// The value ids of a step's bias, ALiBi slopes and dbias, when it has them.
struct BiasValues {
  std::optional<int64_t> bias, slopes, gradBias;
};

/// bias_type as a problem's AttentionBias.
llvm::Expected<AttentionBias> biasOf(StringRef name,
                                     const StepAttributes &attributes) {
  if (name == "no_bias")
    return AttentionBias::None;
  if (name == "post_scale_bias")
    return AttentionBias::PostScale;
  if (name == "alibi")
    return AttentionBias::Alibi;
  if (name == "pre_scale_bias")
    return attributes.error("bias_type pre_scale_bias is not supported: pass "
                            "bias * softmax_scale as a post_scale_bias");
  return attributes.error("bias_type '" + name +
                          "' is not supported (no_bias, post_scale_bias and "
                          "alibi are)");
}

/// The bias operand [1|b, 1|h, s_q, s_kv] of q's type and, with bias_grad,
/// dbias [1, h, s_q, s_kv] of the same type.
Error readPostScaleBias(const StepAttributes &attributes,
                        const FunctionPlan &function, const BiasValues &ids,
                        bool grad, AttentionProblem &problem) {
  const AttentionProblem &p = problem;
  const TensorType &type = function.values[*ids.bias].type;
  const std::vector<int64_t> &shape = type.shape;
  if (type.element != p.element || shape[2] != p.seqQ || shape[3] != p.seqKv ||
      (shape[0] != 1 && shape[0] != p.batch) ||
      (shape[1] != 1 && shape[1] != p.heads))
    return attributes.error(llvm::formatv(
        "the bias (value {0}) is {1} of {2}; expected [1 or b, 1 or h, s_q, "
        "s_kv] = [1 or {3}, 1 or {4}, {5}, {6}] of {7} (q's type)",
        *ids.bias, shapeText(shape), elementTypeName(type.element), p.batch,
        p.heads, p.seqQ, p.seqKv, elementTypeName(p.element)));
  problem.biasBatch = shape[0];
  problem.biasHeads = shape[1];
  if (grad && (shape[0] != 1 || shape[1] != p.heads))
    return attributes.error("bias_grad takes the bias shape 1hss ([1, h, s_q, "
                            "s_kv]) only, not " +
                            p.biasShapeName() + " " + shapeText(shape));
  if (!ids.gradBias)
    return Error::success();
  const TensorType &gradType = function.values[*ids.gradBias].type;
  std::vector<int64_t> expected{1, p.heads, p.seqQ, p.seqKv};
  if (gradType.shape != expected || gradType.element != type.element)
    return attributes.error(llvm::formatv(
        "dbias (value {0}) is {1} of {2}; expected {3} of {4} (the bias's "
        "type)",
        *ids.gradBias, shapeText(gradType.shape),
        elementTypeName(gradType.element), shapeText(expected),
        elementTypeName(type.element)));
  return Error::success();
}

/// ALiBi's slopes operand, when there is one: f32 [h] or [b, h].
Error readAlibiSlopes(const StepAttributes &attributes,
                      const FunctionPlan &function, const BiasValues &ids,
                      AttentionProblem &problem) {
  if (!ids.slopes)
    return Error::success();
  const TensorType &type = function.values[*ids.slopes].type;
  if (type.element == ElementType::F32 &&
      type.shape == std::vector<int64_t>{problem.heads}) {
    problem.alibiSlopes = AlibiSlopes::Heads;
    return Error::success();
  }
  if (type.element == ElementType::F32 &&
      type.shape == std::vector<int64_t>{problem.batch, problem.heads}) {
    problem.alibiSlopes = AlibiSlopes::BatchHeads;
    return Error::success();
  }
  return attributes.error(llvm::formatv(
      "the ALiBi slopes (value {0}) are {1} of {2}; expected f32 [h] = [{3}] "
      "or [b, h] = [{4}, {3}]",
      *ids.slopes, shapeText(type.shape), elementTypeName(type.element),
      problem.heads, problem.batch));
}

/// bias_type and bias_grad, and the operands and result they need
/// (docs/attention-bias.md), into `problem` (shapes already read).
Error readBias(const StepAttributes &attributes, const FunctionPlan &function,
               const BiasValues &ids, AttentionProblem &problem) {
  auto name = attributes.biasType();
  if (!name)
    return name.takeError();
  auto bias = biasOf(*name, attributes);
  if (!bias)
    return bias.takeError();
  bool grad = attributes.raw("bias_grad").has_value();
  if (ids.bias && *bias != AttentionBias::PostScale)
    return attributes.error("a bias operand needs bias_type post_scale_bias, "
                            "not '" +
                            *name + "'");
  if (*bias == AttentionBias::PostScale && !ids.bias)
    return attributes.error("bias_type post_scale_bias without a bias "
                            "operand");
  if (ids.slopes && *bias != AttentionBias::Alibi)
    return attributes.error("an ALiBi slopes operand needs bias_type alibi, "
                            "not '" +
                            *name + "'");
  if (grad && *bias != AttentionBias::PostScale)
    return attributes.error("bias_grad needs bias_type post_scale_bias, not '" +
                            *name + "'");
  if (problem.backward && grad != ids.gradBias.has_value())
    return attributes.error(
        grad ? "attention_bwd with bias_grad has 4 results (dq, dk, dv, "
               "dbias), got 3"
             : "attention_bwd has 3 results (dq, dk, dv) without bias_grad, "
               "got 4");
  if (*bias != AttentionBias::None && problem.thd())
    return attributes.error("qkv_format thd takes no bias or ALiBi (bias_type "
                            "'" +
                            *name + "')");
  problem.bias = *bias;
  problem.biasGrad = problem.backward && grad;
  if (*bias == AttentionBias::PostScale)
    return readPostScaleBias(attributes, function, ids, grad, problem);
  return readAlibiSlopes(attributes, function, ids, problem);
}

/// The host mirror of runtime/kernels/AttentionPrep.cu's TejitAttentionPrep,
/// passed by value: 8-byte fields only, in the same order.
struct PrepParams {
  static constexpr int raggedCount = 7, zeroedCount = 3;
  CUdeviceptr mask = 0, maskLengths = 0;
  int64_t batch = 0, maskSeq = 0;
  CUdeviceptr rngIn = 0, rngOut = 0;
  uint64_t rngOffsetDelta = 0;
  CUdeviceptr cuSeqlens[2] = {};
  int64_t tokens[2] = {}, maxSeqlen[2] = {};
  CUdeviceptr lengths[2] = {};
  CUdeviceptr offsets[raggedCount] = {};
  int64_t offsetSide[raggedCount] = {}, offsetScale[raggedCount] = {};
  CUdeviceptr zeroed[zeroedCount] = {};
  int64_t zeroedSide[zeroedCount] = {}, zeroedWidth[zeroedCount] = {},
          zeroedStride[zeroedCount] = {};
  CUdeviceptr appendFrom[2] = {}, appendTo[2] = {};
  int64_t appendStride[2] = {}, appendWidth = 0;
  CUdeviceptr pageTable = 0, pageTableOut = 0;
  int64_t pageSize = 0, pages = 0, pagesPerSequence = 0;
};
static_assert(sizeof(PrepParams) == 60 * 8,
              "PrepParams must match TejitAttentionPrep field for field");

Error launchPrep(const CudaDriver &driver, CUfunction prep,
                 const PrepParams &params, unsigned blocks, unsigned threads,
                 CUstream stream, const char *what) {
  PrepParams copy = params;
  void *arguments[] = {&copy};
  return driver.check(driver.cuLaunchKernel(prep, blocks, 1, 1, threads, 1, 1,
                                            0, stream, arguments, nullptr),
                      what);
}

/// One block for the padding-mask path: a thread per batch row.
unsigned maskThreads(int64_t batch) {
  return unsigned(std::clamp<int64_t>(batch, 32, 1024));
}
} // namespace

const char *tejit::runtime::attentionPrepPtx() { return tejitAttentionPrepPtx; }
const char *tejit::runtime::decodeAttentionPtx() {
  return tejitDecodeAttentionPtx;
}

//===----------------------------------------------------------------------===//
// The decode kernels' grid
//===----------------------------------------------------------------------===//

namespace {
/// runtime/kernels/DecodeAttention.cu: 4 warps a CTA, 4 query rows a warp
/// block (up to 4 blocks, 16 rows, a CTA), CTAs resident per SM as its
/// launch bounds say (TEJIT_DECODE_MMA_CTAS_PER_SM, TEJIT_DECODE_CTAS_PER_SM).
constexpr int64_t decodeWarps = 4, decodeRowsPerWarp = 4;
int64_t decodeResidentCtas(const AttentionProblem &p) {
  return decodeUsesTensorCores(p) ? 3 : 4;
}
constexpr int64_t decodeMaxSplits = 64;

/// The host mirror of DecodeAttention.cu's TejitDecodeAttention, passed by
/// value: 8-byte fields only, in the same order.
struct DecodeParams {
  CUdeviceptr q = 0, kCache = 0, vCache = 0;
  CUdeviceptr seqLenQ = 0, seqLenKv = 0, qOffsets = 0, oOffsets = 0;
  CUdeviceptr partialStats = 0, partialO = 0, o = 0;
  int64_t batch = 0, heads = 0, kvHeads = 0, headDim = 0, seqQ = 0,
          cacheRows = 0, splits = 0, qStride = 0, rowBlocksPerCta = 0,
          causal = 0, f16 = 0;
  double scaleLog2 = 0;
  CUdeviceptr pageTable = 0;
  int64_t pageSize = 0, pagesPerSequence = 0;
};
static_assert(sizeof(DecodeParams) == 25 * 8,
              "DecodeParams must match TejitDecodeAttention field for field");

/// The rows of one (sequence, kv head) in blocks of a warp's rows, how many
/// of those blocks a CTA holds (1, 2 or 4: the rest of its warps divide the
/// keys) and the CTAs (grid z) that cover them.
struct DecodeRows {
  int64_t blocks = 1, perCta = 1, groups = 1;

  explicit DecodeRows(const AttentionProblem &p) {
    int64_t rows = p.heads / std::max<int64_t>(p.kvHeads, 1) * p.seqQ;
    blocks = (rows + decodeRowsPerWarp - 1) / decodeRowsPerWarp;
    perCta = blocks >= 3 ? decodeWarps : blocks;
    groups = (blocks + perCta - 1) / perCta;
  }
};

/// Elements between consecutive tokens of q: its stride or the packed width.
int64_t queryStride(const AttentionProblem &p) {
  return p.tokenStrides.q ? p.tokenStrides.q : p.heads * p.headDim;
}

/// The device's SM count, for the context current on this thread.
llvm::Expected<int64_t> currentSmCount(const CudaDriver &driver) {
  CUdevice device;
  if (Error error =
          driver.check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice"))
    return std::move(error);
  auto info = describeDevice(int(device));
  if (!info)
    return info.takeError();
  return int64_t(info->multiprocessors);
}
} // namespace

bool tejit::runtime::decodeAttentionEligible(const AttentionProblem &p) {
  if (!p.kvCache || p.seqQ > kDecodeMaxQueries)
    return false;
  if (Error error = p.validate()) {
    llvm::consumeError(std::move(error));
    return false;
  }
  DecodeRows rows(p);
  constexpr int64_t gridLimit = 65535;
  return p.batch * p.kvHeads <= gridLimit && rows.groups <= gridLimit &&
         p.batch * p.heads * p.seqQ <= std::numeric_limits<int32_t>::max() &&
         p.seqKv <= (int64_t(1) << 30);
}

DecodeChoice tejit::runtime::decodeAttentionChoice() {
  const char *value = std::getenv("TEJIT_DECODE_ATTENTION");
  StringRef choice = value ? StringRef(value).trim() : "";
  if (choice == "0")
    return DecodeChoice::Never;
  if (choice == "1")
    return DecodeChoice::Always;
  return DecodeChoice::ByCacheRows;
}

namespace {
/// decodeAttentionPreferred for a problem known to be eligible.
bool prefersDecodeKernels(const AttentionProblem &p, DecodeChoice choice) {
  return choice == DecodeChoice::Always ||
         (choice == DecodeChoice::ByCacheRows &&
          p.seqKv >= kDecodePreferredCacheRows);
}
} // namespace

bool tejit::runtime::decodeAttentionPreferred(const AttentionProblem &p,
                                              DecodeChoice choice) {
  return decodeAttentionEligible(p) && prefersDecodeKernels(p, choice);
}

DecodeSplits tejit::runtime::decodeSplits(const AttentionProblem &p,
                                          int64_t smCount) {
  // The CTAs of one split: every (sequence, kv head, row group).
  int64_t perSplit =
      std::max<int64_t>(p.batch * p.kvHeads * DecodeRows(p).groups, 1);
  int64_t slots = std::max<int64_t>(smCount, 1) * decodeResidentCtas(p);
  DecodeSplits result;
  result.splits = std::clamp<int64_t>(slots / perSplit, 1, decodeMaxSplits);
  return result;
}

namespace {
/// (max, sum) pairs, then o rows: where each starts in the partials.
struct DecodePartials {
  size_t stats = 0, total = 0;

  DecodePartials(const AttentionProblem &p, const DecodeSplits &splits) {
    size_t rows = size_t(p.batch * p.heads * p.seqQ * splits.splits);
    stats = alignUp(rows * 2 * sizeof(float));
    total = stats + alignUp(rows * size_t(p.headDim) * sizeof(float));
  }
};
} // namespace

size_t tejit::runtime::decodePartialBytes(const AttentionProblem &problem,
                                          const DecodeSplits &splits) {
  return DecodePartials(problem, splits).total;
}

/// `launcher`, once its problem passes AttentionProblem::validate().
static llvm::Expected<AttentionLauncher>
validated(AttentionLauncher launcher, const FunctionPlan &function) {
  if (Error error = launcher.problem().validate())
    return annotate(std::move(error),
                    "function '" + function.name + "', attention step",
                    ErrorCode::Unsupported);
  return launcher;
}

/// One FP8 attention scale, scale inverse or amax: its name in
/// te.fp8_attention(_bwd), where the step holds it (an operand or a result,
/// by index) and the AttentionPointers field cuDNN reads it from. The one
/// list of them: parse(), fp8Roles() and run() all read it.
struct AttentionLauncher::Fp8Role {
  const char *name;
  bool backward, result;
  size_t index;
  CUdeviceptr AttentionPointers::*pointer;
};

namespace {
using Role = AttentionLauncher::Fp8Role;
using P = AttentionPointers;
// Forward: q, k, v, qkv_scale_inv, o_scale; o, lse, amax_s, amax_o.
// Backward: dO, q, k, v, o, lse, qkv_scale_inv, o_scale_inv,
// grad_scale_inv, dp_scale, dp_scale_inv, dqkv_scale; dq, dk, dv, amax_dp,
// amax_dq, amax_dk, amax_dv.
const Role fp8RoleTable[] = {
    {"qkv_scale_inv", false, false, 3, &P::descaleQkv},
    {"o_scale", false, false, 4, &P::scaleO},
    {"amax_s", false, true, 2, &P::amaxS},
    {"amax_o", false, true, 3, &P::amaxO},
    {"qkv_scale_inv", true, false, 6, &P::descaleQkv},
    {"o_scale_inv", true, false, 7, &P::descaleO},
    {"grad_scale_inv", true, false, 8, &P::descaleGradO},
    {"dp_scale", true, false, 9, &P::scaleDp},
    {"dp_scale_inv", true, false, 10, &P::descaleDp},
    {"dqkv_scale", true, false, 11, &P::scaleGradQkv},
    {"amax_dp", true, true, 3, &P::amaxDp},
    {"amax_dq", true, true, 4, &P::amaxGradQ},
    {"amax_dk", true, true, 5, &P::amaxGradK},
    {"amax_dv", true, true, 6, &P::amaxGradV},
};
} // namespace

std::vector<std::pair<std::string, int64_t>>
AttentionLauncher::fp8Roles() const {
  std::vector<std::pair<std::string, int64_t>> roles;
  for (auto [role, id] : fp8)
    roles.emplace_back(role->name, id);
  return roles;
}

llvm::Expected<AttentionLauncher>
AttentionLauncher::parse(const AttentionStep &step,
                         const FunctionPlan &function, int64_t smCount) {
  if (step.kvCache) {
    auto launcher = parseKvCache(step, function);
    if (!launcher)
      return launcher.takeError();
    launcher->eligible = decodeAttentionEligible(launcher->problemDesc);
    launcher->decode =
        launcher->eligible &&
        prefersDecodeKernels(launcher->problemDesc, decodeAttentionChoice());
    if (launcher->decode && smCount > 0)
      launcher->splits = decodeSplits(launcher->problemDesc, smCount);
    return launcher;
  }
  StepAttributes attributes{step, function};
  AttentionLauncher launcher;
  // Optional operands (masks, rng, cu_seqlens, bias, ALiBi slopes) follow
  // the fixed ones; their element types and ranks tell them apart (the plan
  // drops operandSegmentSizes).
  size_t maxOptional = step.fp8 ? 3 : 7;
  size_t fixed = step.backward ? 6 : 3;
  // attention_bwd: dq, dk, dv, and dbias with bias_grad (readBias checks).
  size_t results = step.backward ? 3 : 2, maxResults = step.backward ? 4 : 2;
  // FP8 (docs/fp8-attention.md): the scales after the fixed operands, the
  // amaxes after the results; masks and the RNG state only.
  if (step.fp8) {
    fixed = step.backward ? 12 : 5;
    results = maxResults = step.backward ? 7 : 4;
  }
  if (step.operands.size() < fixed ||
      step.operands.size() > fixed + maxOptional ||
      step.results.size() < results || step.results.size() > maxResults)
    return attributes.error(llvm::formatv(
        "expected {0} to {1} operands and {2} results, got {3} and {4}", fixed,
        fixed + maxOptional,
        results == maxResults
            ? std::to_string(results)
            : llvm::formatv("{0} or {1}", results, maxResults).str(),
        step.operands.size(), step.results.size()));
  // Masks come in operand order: the padding mask, then the query mask; so
  // do cu_seqlens: the queries', then the keys'.
  for (int64_t id : llvm::ArrayRef(step.operands).drop_front(fixed)) {
    const TensorType &type = function.values[id].type;
    ElementType element = type.element;
    bool floating = element == ElementType::BF16 ||
                    element == ElementType::F16 || element == ElementType::F32;
    if (element == ElementType::I1 && !launcher.mask)
      launcher.mask = id;
    else if (element == ElementType::I1 && !launcher.queryMask)
      launcher.queryMask = id;
    else if (element == ElementType::I64 && !launcher.rng)
      launcher.rng = id;
    else if (element == ElementType::I32 && !launcher.cuSeqlensQ)
      launcher.cuSeqlensQ = id;
    else if (element == ElementType::I32 && !launcher.cuSeqlensKv)
      launcher.cuSeqlensKv = id;
    else if (floating && type.shape.size() == 4 && !launcher.bias)
      launcher.bias = id;
    else if (element == ElementType::F32 && type.shape.size() <= 2 &&
             !launcher.alibiSlopes)
      launcher.alibiSlopes = id;
    else
      return attributes.error("an optional operand is neither an i1 mask, an "
                              "i64 RNG state, i32 cu_seqlens, a 4-D bias nor "
                              "f32 ALiBi slopes");
  }
  const auto &ops = step.operands;
  if (step.fp8) {
    // The operand and result counts are checked above.
    for (const Fp8Role &role : fp8RoleTable) {
      if (role.backward != step.backward)
        continue;
      int64_t id = (role.result ? step.results : ops)[role.index];
      const TensorType &type = function.values[id].type;
      if (type.element != ElementType::F32 || type.numElements() != 1)
        return attributes.error(llvm::formatv(
            "FP8 attention's scales and amaxes are single f32 values; {0} "
            "(value {1}) is {2} of {3}",
            role.name, id, shapeText(type.shape),
            elementTypeName(type.element)));
      launcher.fp8.emplace_back(&role, id);
    }
  } else if (step.results.size() == 4)
    launcher.gradBias = step.results[3];
  if (step.backward) {
    launcher.gradOut = ops[0];
    launcher.q = ops[1];
    launcher.k = ops[2];
    launcher.v = ops[3];
    launcher.out = ops[4];
    launcher.stats = ops[5];
    launcher.gradQ = step.results[0];
    launcher.gradK = step.results[1];
    launcher.gradV = step.results[2];
  } else {
    launcher.q = ops[0];
    launcher.k = ops[1];
    launcher.v = ops[2];
    launcher.out = step.results[0];
    launcher.stats = step.results[1];
  }

  auto format = attributes.enumCase("qkv_format");
  if (!format)
    return format.takeError();
  AttentionProblem &problem = launcher.problemDesc;
  problem.backward = step.backward;
  if (*format == "sbhd")
    problem.layout = AttentionLayout::Sbhd;
  else if (*format == "bshd")
    problem.layout = AttentionLayout::Bshd;
  else if (*format == "thd")
    problem.layout = AttentionLayout::Thd;
  else
    return attributes.error("qkv_format '" + *format +
                            "' is not supported (sbhd, bshd and thd are)");
  bool thd = problem.thd();
  if (thd) {
    if (!launcher.cuSeqlensQ)
      return attributes.error("qkv_format thd without a cu_seqlens operand");
    if (launcher.mask)
      return attributes.error("qkv_format thd takes no mask operand: the "
                              "sequences come from cu_seqlens");
    ThdValues ids{launcher.q,           launcher.k,          launcher.v,
                  launcher.out,         launcher.stats,      std::nullopt,
                  std::nullopt,         std::nullopt,        std::nullopt,
                  *launcher.cuSeqlensQ, launcher.cuSeqlensKv};
    if (step.backward) {
      ids.gradOut = launcher.gradOut;
      ids.gradQ = launcher.gradQ;
      ids.gradK = launcher.gradK;
      ids.gradV = launcher.gradV;
    }
    if (Error error = readThdProblem(attributes, function, ids, problem))
      return std::move(error);
  } else {
    if (launcher.cuSeqlensQ)
      return attributes.error("cu_seqlens operands need qkv_format thd");
    const TensorType &qType = function.values[launcher.q].type;
    const TensorType &kType = function.values[launcher.k].type;
    if (qType.shape.size() != 4 || kType.shape.size() != 4)
      return attributes.error("query and key must be 4-D");
    bool sbhd = problem.layout == AttentionLayout::Sbhd;
    problem.seqQ = qType.shape[sbhd ? 0 : 1];
    problem.batch = qType.shape[sbhd ? 1 : 0];
    problem.heads = qType.shape[2];
    problem.headDim = qType.shape[3];
    problem.seqKv = kType.shape[sbhd ? 0 : 1];
    problem.kvHeads = kType.shape[2];
    problem.element = qType.element;
    problem.fp8 = step.fp8;
    if (step.fp8 && step.backward)
      problem.gradElement = function.values[launcher.gradOut].type.element;
  }
  problem.tokenStrides = {
      step.tokenStride("q"),      step.tokenStride("k"),
      step.tokenStride("v"),      step.tokenStride("grad_q"),
      step.tokenStride("grad_k"), step.tokenStride("grad_v")};
  if (!step.backward &&
      (problem.tokenStrides.gradQ || problem.tokenStrides.gradK ||
       problem.tokenStrides.gradV))
    return attributes.error("the forward has no gradients to give strides");

  auto maskName = attributes.enumCase("attn_mask_type");
  if (!maskName)
    return maskName.takeError();
  // thd: each sequence has its own lengths, so bottom-right alignment is
  // never top-left's, and there is no unpadded thd.
  if (thd && *maskName != "padding" && *maskName != "padding_causal")
    return attributes.error("qkv_format thd takes attn_mask_type padding or "
                            "padding_causal, not '" +
                            *maskName + "'");
  auto maskKind = maskOf(*maskName, problem.seqQ == problem.seqKv, attributes);
  if (!maskKind)
    return maskKind.takeError();
  problem.mask = *maskKind;
  bool padding = problem.mask == AttentionMask::Padding ||
                 problem.mask == AttentionMask::PaddingCausal;
  if (padding && !thd) {
    if (!launcher.mask)
      return attributes.error("a padding mask type without a mask operand");
    const TensorType &maskType = function.values[*launcher.mask].type;
    std::vector<int64_t> expected{problem.batch, 1, 1, problem.seqKv};
    // Self-attention: the mask pads queries and keys alike; cross-attention
    // (s_q != s_kv, or pad_keys_only): it pads the keys, and the queries
    // are valid unless a query mask pads them.
    bool keysOnly = problem.seqQ != problem.seqKv ||
                    attributes.raw("pad_keys_only").has_value();
    launcher.fullQueryLengths = keysOnly && !launcher.queryMask;
    if (launcher.queryMask) {
      const TensorType &queryMaskType =
          function.values[*launcher.queryMask].type;
      if (!keysOnly ||
          queryMaskType.shape !=
              std::vector<int64_t>{problem.batch, 1, 1, problem.seqQ})
        return attributes.error("a query mask needs cross-attention and the "
                                "shape [b, 1, 1, s_q]");
      if (problem.backward && problem.tokenStrides.gradQ)
        return attributes.error("a query mask with a strided dq");
      int64_t id = problem.backward ? launcher.gradQ : launcher.out;
      launcher.zeroedBytes = size_t(function.values[id].type.bytes());
    }
    if (maskType.shape != expected)
      return attributes.error(
          "the cuDNN path takes a padding mask [b, 1, 1, s_kv] "
          "(Transformer Engine's, True = padded; right padding); got a "
          "mask of " +
          llvm::join(
              llvm::map_range(maskType.shape,
                              [](int64_t d) { return std::to_string(d); }),
              "x") +
          " for " + std::to_string(problem.seqQ) + " queries and " +
          std::to_string(problem.seqKv) + " keys");
  } else {
    if (launcher.queryMask)
      return attributes.error(thd ? "qkv_format thd takes no query mask"
                                  : "a query mask without a padding mask type");
    launcher.mask.reset(); // an unused mask operand
  }

  auto scale = attributes.number("softmax_scale", 0);
  auto dropout = attributes.number("dropout", 0);
  auto site = attributes.number("stream", 0);
  if (!scale)
    return scale.takeError();
  if (!dropout)
    return dropout.takeError();
  if (!site)
    return site.takeError();
  auto window = attributes.window("window_size");
  if (!window)
    return window.takeError();
  problem.softmaxScale = *scale;
  problem.dropout = *dropout;
  problem.windowLeft = window->first;
  problem.windowRight = window->second;
  // A right bound of 0 is the causal mask (with as many queries as keys),
  // and a causal mask already hides every key right of the diagonal.
  if (problem.windowRight == 0 && problem.seqQ == problem.seqKv) {
    if (problem.mask == AttentionMask::None)
      problem.mask = AttentionMask::Causal;
    else if (problem.mask == AttentionMask::Padding)
      problem.mask = AttentionMask::PaddingCausal;
  }
  if (problem.causal())
    problem.windowRight = -1;
  BiasValues biasIds{launcher.bias, launcher.alibiSlopes, launcher.gradBias};
  if (Error error = readBias(attributes, function, biasIds, problem))
    return std::move(error);
  if (problem.dropout > 0 && !launcher.rng)
    return attributes.error("attention dropout without an RNG state operand");
  if (problem.dropout == 0)
    launcher.rng.reset();
  launcher.offsetDelta = uint64_t(*site) << siteOffsetShift;
  auto split = readContextParallel(attributes, problem,
                                   launcher.mask || launcher.queryMask);
  if (!split)
    return split.takeError();
  if (*split) {
    launcher.problemDesc = (*split)->first();
    launcher.cpSplit = std::move(*split);
  }
  return validated(std::move(launcher), function);
}

llvm::Expected<AttentionLauncher>
AttentionLauncher::parseKvCache(const AttentionStep &step,
                                const FunctionPlan &function) {
  StepAttributes attributes{step, function};
  AttentionLauncher launcher;
  // Plan.cpp checks these counts too; steps may also be made by hand.
  if ((step.operands.size() != 7 && step.operands.size() != 8) ||
      step.results.size() != 1)
    return attributes.error(llvm::formatv(
        "kv_cache_attention takes 7 operands (q, k, v, k_cache, v_cache, "
        "cu_seqlens_q, cu_seqlens_kv), 8 with a page table, and 1 result "
        "(o), got {0} and {1}",
        step.operands.size(), step.results.size()));
  const auto &ops = step.operands;
  launcher.q = ops[0];
  launcher.k = ops[1];
  launcher.v = ops[2];
  launcher.kCache = ops[3];
  launcher.vCache = ops[4];
  launcher.cuSeqlensQ = ops[5];
  launcher.cuSeqlensKv = ops[6];
  if (ops.size() == 8)
    launcher.pageTable = ops[7];
  launcher.out = step.results[0];

  // Each operand against the contract's shape, by name: the first that
  // differs is the error.
  auto typeOf = [&](int64_t id) -> const TensorType & {
    return function.values[id].type;
  };
  // `expected` is empty while the sizes are still unknown (a wrong rank).
  auto mismatch = [&](const char *name, int64_t id, const char *pattern,
                      const std::vector<int64_t> &expected,
                      ElementType element) {
    const TensorType &type = typeOf(id);
    return attributes.error(llvm::formatv(
        "kv_cache_attention: {0} (value {1}) is {2} of {3}; expected {4}{5} "
        "of {6}",
        name, id, shapeText(type.shape), elementTypeName(type.element), pattern,
        expected.empty() ? "" : " = " + shapeText(expected),
        elementTypeName(element)));
  };
  const TensorType &qType = typeOf(launcher.q), &kType = typeOf(launcher.k),
                   &cacheType = typeOf(*launcher.kCache),
                   &cuType = typeOf(*launcher.cuSeqlensQ);
  ElementType element = qType.element;
  if (qType.shape.size() != 3)
    return mismatch("q", launcher.q, "[t, heads, head dim]", {}, element);
  if (cuType.shape.size() != 1 || cuType.shape[0] < 2 ||
      cuType.element != ElementType::I32)
    return mismatch("cu_seqlens_q", *launcher.cuSeqlensQ, "[b + 1] with b >= 1",
                    {}, ElementType::I32);
  if (kType.shape.size() != 3)
    return mismatch("k", launcher.k, "[t, kv_heads, head dim]", {}, element);
  bool paged = launcher.pageTable.has_value();
  const char *cachePattern =
      paged ? "[pages, page_size, kv_heads, head dim]"
            : "[b, max_sequence_length, kv_heads, head dim]";
  if (cacheType.shape.size() != 4)
    return mismatch("k_cache", *launcher.kCache, cachePattern, {}, element);
  int64_t tokens = qType.shape[0], heads = qType.shape[1], dim = qType.shape[2],
          batch = cuType.shape[0] - 1, kvHeads = kType.shape[1],
          cacheRows = cacheType.shape[1], pages = 0, pageSize = 0;
  if (paged) {
    const TensorType &tableType = typeOf(*launcher.pageTable);
    if (tableType.shape.size() != 2 || tableType.shape[0] != batch ||
        tableType.element != ElementType::I32)
      return mismatch("page_table", *launcher.pageTable,
                      "[b, pages per sequence]", {}, ElementType::I32);
    pages = cacheType.shape[0];
    pageSize = cacheType.shape[1];
    cacheRows = tableType.shape[1] * pageSize;
  }
  std::vector<int64_t> newTokens{tokens, kvHeads, dim},
      cache = paged ? std::vector<int64_t>{pages, pageSize, kvHeads, dim}
                    : std::vector<int64_t>{batch, cacheRows, kvHeads, dim};
  struct Contract {
    const char *name;
    int64_t id;
    const char *pattern;
    std::vector<int64_t> shape;
    ElementType element;
  };
  const Contract contract[] = {
      {"k", launcher.k, "[t, kv_heads, head dim]", newTokens, element},
      {"v", launcher.v, "[t, kv_heads, head dim]", newTokens, element},
      {"k_cache", *launcher.kCache, cachePattern, cache, element},
      {"v_cache", *launcher.vCache, cachePattern, cache, element},
      {"cu_seqlens_kv",
       *launcher.cuSeqlensKv,
       "[b + 1]",
       {batch + 1},
       ElementType::I32},
      {"o (the result)", launcher.out, "q's [t, heads, head dim]", qType.shape,
       element},
  };
  for (const Contract &e : contract) {
    const TensorType &type = typeOf(e.id);
    if (type.shape != e.shape || type.element != e.element)
      return mismatch(e.name, e.id, e.pattern, e.shape, e.element);
  }

  auto maxQ = attributes.integer("max_seqlen_q");
  if (!maxQ)
    return maxQ.takeError();
  if (*maxQ <= 0)
    return attributes.error(
        llvm::formatv("max_seqlen_q ({0}) must be positive", *maxQ));
  auto maskName = attributes.enumCase("attn_mask_type");
  if (!maskName)
    return maskName.takeError();
  AttentionProblem &problem = launcher.problemDesc;
  if (*maskName == "padding")
    problem.mask = AttentionMask::Padding;
  else if (*maskName == "padding_causal_bottom_right")
    problem.mask = AttentionMask::PaddingCausalBottomRight;
  else
    return attributes.error("kv_cache_attention takes attn_mask_type padding "
                            "or padding_causal_bottom_right, not '" +
                            *maskName + "'");
  auto biasType = attributes.biasType();
  if (!biasType)
    return biasType.takeError();
  if (*biasType != "no_bias" || attributes.raw("bias_grad"))
    return attributes.error("kv_cache_attention takes no bias or ALiBi "
                            "(bias_type '" +
                            *biasType + "')");
  auto scale = attributes.number("softmax_scale", 0);
  if (!scale)
    return scale.takeError();
  for (const auto &[role, stride] : step.tokenStrides)
    if (role != "q" && role != "k" && role != "v")
      return attributes.error("kv_cache_attention has no " + role +
                              " to give a token stride");

  problem.kvCache = true;
  problem.layout = AttentionLayout::Thd;
  problem.element = element;
  problem.batch = batch;
  problem.heads = heads;
  problem.kvHeads = kvHeads;
  problem.headDim = dim;
  problem.seqQ = *maxQ;
  problem.seqKv = cacheRows;
  problem.pageSize = pageSize;
  problem.pages = pages;
  problem.tokensQ = problem.tokensKv = tokens;
  problem.softmaxScale = *scale;
  problem.tokenStrides.q = step.tokenStride("q");
  problem.tokenStrides.k = step.tokenStride("k");
  problem.tokenStrides.v = step.tokenStride("v");
  return validated(std::move(launcher), function);
}

llvm::Expected<AttentionLauncher>
AttentionLauncher::create(const AttentionStep &step,
                          const FunctionPlan &function, CUfunction prep,
                          const DecodeKernels &decode) {
  auto launcher = parse(step, function);
  if (!launcher)
    return launcher.takeError();
  return complete(std::move(*launcher), function, prep, decode);
}

llvm::Expected<AttentionLauncher>
AttentionLauncher::complete(AttentionLauncher parsed,
                            const FunctionPlan &function, CUfunction prep,
                            const DecodeKernels &decode) {
  AttentionLauncher *launcher = &parsed;
  launcher->prep = prep;
  bool haveDecode = decode.canRun(launcher->problemDesc);
  auto useDecode = [&]() -> llvm::Expected<AttentionLauncher> {
    launcher->decode = true;
    launcher->decodeKernels = decode;
    if (launcher->decodeKernels.smCount <= 0) {
      auto driver = CudaDriver::get();
      if (!driver)
        return driver.takeError();
      auto sms = currentSmCount(*driver);
      if (!sms)
        return annotate(sms.takeError(),
                        "function '" + function.name +
                            "', attention step: the decode kernels' grid",
                        ErrorCode::Unsupported);
      launcher->decodeKernels.smCount = *sms;
    }
    launcher->splits =
        decodeSplits(launcher->problemDesc, launcher->decodeKernels.smCount);
    return std::move(parsed);
  };
  // Without the decode kernels, a step that prefers them runs on cuDNN.
  if (launcher->decode && haveDecode)
    return useDecode();
  launcher->decode = false;
  auto runner = AttentionRunner::get(launcher->problemDesc);
  if (!runner) {
    // Where cuDNN cannot run the step, the decode kernels still may.
    if (launcher->eligible && haveDecode) {
      llvm::consumeError(runner.takeError());
      return useDecode();
    }
    return annotate(runner.takeError(),
                    "function '" + function.name + "', attention step",
                    ErrorCode::Unsupported);
  }
  launcher->runner = std::move(*runner);
  if (launcher->cpSplit) {
    auto get = [&](const AttentionProblem &problem)
        -> llvm::Expected<std::shared_ptr<const AttentionRunner>> {
      auto made = AttentionRunner::get(problem);
      if (!made)
        return annotate(made.takeError(),
                        "function '" + function.name +
                            "', attention step (a context-parallel chunk)",
                        ErrorCode::Unsupported);
      return std::move(*made);
    };
    for (const CpChunk &chunk : launcher->cpSplit->chunks) {
      CpChunkRunners runners;
      const AttentionProblem *needed[] = {
          launcher->problemDesc.backward ? nullptr : &chunk.forward,
          launcher->problemDesc.backward && chunk.visible ? &*chunk.visible
                                                          : nullptr,
          launcher->problemDesc.backward ? &chunk.diagonal : nullptr};
      std::shared_ptr<const AttentionRunner> *slots[] = {
          &runners.forward, &runners.visible, &runners.diagonal};
      for (auto [problem, slot] : llvm::zip(needed, slots)) {
        if (!problem)
          continue;
        auto made = get(*problem);
        if (!made)
          return made.takeError();
        *slot = std::move(*made);
      }
      launcher->cpRunners.push_back(std::move(runners));
    }
  }
  return std::move(parsed);
}

size_t AttentionLauncher::scratchBytes() const {
  size_t lengths = problemDesc.thd()
                       ? thdPrepBytes(problemDesc)
                       : 2 * alignUp(problemDesc.batch * sizeof(int32_t));
  size_t workspace =
      decode ? decodePartialBytes(problemDesc, splits) : workspaceBytes();
  return lengths + alignUp(2 * 16) + workspace + cpGradientBytes();
}

size_t AttentionLauncher::workspaceBytes() const {
  size_t bytes = alignUp(runner->workspaceBytes());
  for (const CpChunkRunners &runners : cpRunners)
    for (const auto &each :
         {runners.forward, runners.visible, runners.diagonal})
      if (each)
        bytes = std::max(bytes, alignUp(each->workspaceBytes()));
  return bytes;
}

namespace {
/// The scratch of a causal context-parallel backward's partial gradients,
/// each laid out as the gradient it adds to (256-byte aligned sizes): dq
/// (with the step's dq token stride), then dk and dv (packed).
struct CpGradientScratch {
  size_t dq = 0, dk = 0;

  explicit CpGradientScratch(const AttentionProblem &p) {
    size_t element = elementBytes(p.element);
    int64_t qStride =
        p.tokenStrides.gradQ ? p.tokenStrides.gradQ : p.heads * p.headDim;
    dq = alignUp(size_t(p.batch * p.rowsQ() * qStride) * element);
    dk =
        alignUp(size_t(p.batch * p.rowsKv() * p.kvHeads * p.headDim) * element);
  }
  size_t bytes() const { return dq + 2 * dk; }
};
} // namespace

size_t AttentionLauncher::cpGradientBytes() const {
  return needsCpAccumulate() ? CpGradientScratch(problemDesc).bytes() : 0;
}

Error AttentionLauncher::run(llvm::ArrayRef<CUdeviceptr> addresses,
                             CUdeviceptr scratch, CUstream stream,
                             const CudaDriver &driver) const {
  AttentionPointers pointers;
  pointers.q = addresses[q];
  pointers.k = addresses[k];
  pointers.v = addresses[v];
  pointers.o = addresses[out];
  if (problemDesc.kvCache) {
    // cuDNN reads the caches; the new tokens go to the prep kernel.
    pointers.k = addresses[*kCache];
    pointers.v = addresses[*vCache];
  } else {
    pointers.stats = addresses[stats];
  }
  if (problemDesc.backward) {
    pointers.gradO = addresses[gradOut];
    pointers.gradQ = addresses[gradQ];
    pointers.gradK = addresses[gradK];
    pointers.gradV = addresses[gradV];
  }
  pointers.bias = bias ? addresses[*bias] : 0;
  pointers.alibiSlopes = alibiSlopes ? addresses[*alibiSlopes] : 0;
  pointers.gradBias = gradBias ? addresses[*gradBias] : 0;
  for (auto [role, id] : fp8)
    pointers.*(role->pointer) = addresses[id];
  if (problemDesc.thd())
    return runThd(addresses, pointers, scratch, stream, driver);

  size_t lengthsBytes = alignUp(problemDesc.batch * sizeof(int32_t));
  CUdeviceptr seqLens = scratch;
  CUdeviceptr queryLens = seqLens + lengthsBytes;
  CUdeviceptr rngState = queryLens + lengthsBytes;
  CUdeviceptr workspace = rngState + alignUp(2 * 16);
  if (mask || rng) {
    PrepParams params;
    params.mask = mask ? addresses[*mask] : 0;
    params.maskLengths = seqLens;
    params.batch = problemDesc.batch;
    params.maskSeq = problemDesc.seqKv;
    params.rngIn = rng ? addresses[*rng] : 0;
    params.rngOut = rngState;
    params.rngOffsetDelta = offsetDelta;
    unsigned threads = maskThreads(problemDesc.batch);
    if (Error error = launchPrep(driver, prep, params, 1, threads, stream,
                                 "launching the attention prep kernel"))
      return error;
    if (mask) {
      pointers.seqLenQ = pointers.seqLenKv = seqLens;
      if (queryMask) {
        // The queries' lengths from their own mask; their padded rows of
        // the output (or dq) are zeroed first, as cuDNN leaves them.
        PrepParams queryParams;
        queryParams.mask = addresses[*queryMask];
        queryParams.maskLengths = queryLens;
        queryParams.batch = problemDesc.batch;
        queryParams.maskSeq = problemDesc.seqQ;
        if (Error error =
                launchPrep(driver, prep, queryParams, 1, threads, stream,
                           "launching the attention prep kernel (query mask)"))
          return error;
        CUdeviceptr zeroed = problemDesc.backward ? pointers.gradQ : pointers.o;
        if (Error error = driver.check(
                driver.cuMemsetD8Async(zeroed, 0, zeroedBytes, stream),
                "zeroing the rows of padded queries"))
          return error;
        pointers.seqLenQ = queryLens;
      } else if (fullQueryLengths) {
        if (Error error = driver.check(
                driver.cuMemsetD32Async(queryLens, unsigned(problemDesc.seqQ),
                                        size_t(problemDesc.batch), stream),
                "setting the query lengths of a cross-attention"))
          return error;
        pointers.seqLenQ = queryLens;
      }
    }
    if (rng) {
      pointers.seed = rngState;
      pointers.offset = rngState + sizeof(uint64_t);
    }
  }
  if (cpRunners.empty())
    return runner->run(pointers, workspace, stream);
  CUdeviceptr lateRng = 0;
  if (rng) {
    // The late chunk draws its own dropout stream, half a site on from the
    // early chunk's (sites are 1 << siteOffsetShift apart).
    lateRng = rngState + 16;
    PrepParams params;
    params.batch = problemDesc.batch;
    params.rngIn = addresses[*rng];
    params.rngOut = lateRng;
    params.rngOffsetDelta =
        offsetDelta + (uint64_t(1) << (siteOffsetShift - 1));
    if (Error error = launchPrep(driver, prep, params, 1,
                                 maskThreads(problemDesc.batch), stream,
                                 "launching the attention prep kernel (late "
                                 "context-parallel chunk)"))
      return error;
  }
  return runCpChunks(pointers, lateRng, workspace, workspace + workspaceBytes(),
                     stream, driver);
}

Error AttentionLauncher::runCpChunks(const AttentionPointers &pointers,
                                     CUdeviceptr lateRng, CUdeviceptr workspace,
                                     CUdeviceptr scratch, CUstream stream,
                                     const CudaDriver &driver) const {
  const CpAttentionSplit &split = *cpSplit;
  const AttentionProblem &p = problemDesc;
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  bool backward = p.backward;
  if (backward && !cpAccumulate)
    return makeError(ErrorCode::State,
                     "the context-parallel attention backward has no "
                     "accumulation kernel (setCpAccumulateKernel)");
  // The partial gradients' scratch: dq (the visible keys' share), then the
  // early chunk's dk and dv.
  CpGradientScratch sizes(p);
  CUdeviceptr scratchQ = scratch;
  CUdeviceptr scratchK = scratchQ + sizes.dq;
  CUdeviceptr scratchV = scratchK + sizes.dk;
  for (auto [chunk, runners] : llvm::zip(split.chunks, cpRunners)) {
    // The chunk's queries (and their o, dO, dq, stats) start firstRow rows
    // in; its keys at row 0.
    AttentionPointers at = pointers;
    int64_t row = chunk.firstRow;
    at.q += cpRowOffsetBytes(p, row, t.q, false);
    at.o += cpRowOffsetBytes(p, row, 0, false);
    at.stats += uint64_t(row) * sizeof(float);
    if (row > 0 && lateRng) {
      at.seed = lateRng;
      at.offset = lateRng + sizeof(uint64_t);
    }
    if (!backward) {
      if (Error error = runners.forward->run(at, workspace, stream))
        return error;
      continue;
    }
    at.gradO += cpRowOffsetBytes(p, row, 0, false);
    at.gradQ += cpRowOffsetBytes(p, row, t.gradQ, false);
    // The late chunk sees a superset of the early chunk's keys: it writes dk
    // and dv in place, the early chunk into the scratch.
    bool late = row > 0;
    CUdeviceptr gradK = late ? pointers.gradK : scratchK;
    CUdeviceptr gradV = late ? pointers.gradV : scratchV;
    AttentionPointers diagonal = at;
    int64_t start = chunk.diagonalStart;
    diagonal.k += cpRowOffsetBytes(p, start, t.k, true);
    diagonal.v += cpRowOffsetBytes(p, start, t.v, true);
    diagonal.gradK = gradK + cpRowOffsetBytes(p, start, 0, true);
    diagonal.gradV = gradV + cpRowOffsetBytes(p, start, 0, true);
    if (Error error = runners.diagonal->run(diagonal, workspace, stream))
      return error;
    if (!runners.visible)
      continue;
    // The keys before the diagonal block: dk and dv rows of their own, dq
    // to add to the diagonal block's.
    AttentionPointers visible = at;
    visible.gradQ = scratchQ + cpRowOffsetBytes(p, row, t.gradQ, false);
    visible.gradK = gradK;
    visible.gradV = gradV;
    if (Error error = runners.visible->run(visible, workspace, stream))
      return error;
    if (Error error = enqueueCpAccumulate(
            driver, cpAccumulate, p, false, t.gradQ, pointers.gradQ, scratchQ,
            {row, row + split.chunk, p.rowsQ()}, stream))
      return error;
  }
  if (!backward)
    return Error::success();
  // The early chunk's dk and dv onto the late chunk's; no local query sees
  // the keys past the late chunk's.
  CpAccumulateRows keys{0, split.chunks[0].keys, split.chunks[1].keys};
  if (Error error = enqueueCpAccumulate(driver, cpAccumulate, p, true, 0,
                                        pointers.gradK, scratchK, keys, stream))
    return error;
  return enqueueCpAccumulate(driver, cpAccumulate, p, true, 0, pointers.gradV,
                             scratchV, keys, stream);
}

Error AttentionLauncher::runThd(llvm::ArrayRef<CUdeviceptr> addresses,
                                AttentionPointers &pointers,
                                CUdeviceptr scratch, CUstream stream,
                                const CudaDriver &driver) const {
  CUdeviceptr rngState = scratch + thdPrepBytes(problemDesc);
  CUdeviceptr workspace = rngState + alignUp(16);
  ThdPrepBuffers buffers;
  buffers.cuSeqlensQ = addresses[*cuSeqlensQ];
  buffers.cuSeqlensKv = cuSeqlensKv ? addresses[*cuSeqlensKv] : 0;
  buffers.scratch = scratch;
  if (problemDesc.kvCache) {
    buffers.newK = addresses[k];
    buffers.newV = addresses[v];
    buffers.pageTable = pageTable ? addresses[*pageTable] : 0;
    KvCacheEngine engine;
    engine.runner = decode ? nullptr : runner.get();
    engine.decode = decodeKernels;
    engine.splits = splits;
    return enqueueKvCacheAttention(problemDesc, prep, engine, buffers, pointers,
                                   workspace, stream, driver);
  }
  if (rng) {
    buffers.rngIn = addresses[*rng];
    buffers.rngOut = rngState;
    buffers.rngOffsetDelta = offsetDelta;
    pointers.seed = rngState;
    pointers.offset = rngState + sizeof(uint64_t);
  }
  if (Error error =
          enqueueThdPrep(problemDesc, prep, buffers, pointers, stream, driver))
    return error;
  return runner->run(pointers, workspace, stream);
}

//===----------------------------------------------------------------------===//
// thd prep
//===----------------------------------------------------------------------===//

namespace {
/// Where thd's sequence lengths and ragged offsets lie in the prep scratch.
/// A paged kv cache's clamped page table follows them.
struct ThdScratch {
  size_t lengths = 0, offsets = 0, pageTable = 0, total = 0;

  explicit ThdScratch(const AttentionProblem &p)
      : lengths(alignUp(size_t(p.batch) * sizeof(int32_t))),
        offsets(alignUp(size_t(p.batch + 1) * sizeof(int32_t))),
        pageTable(
            alignUp(size_t(p.batch * p.pagesPerSequence()) * sizeof(int32_t))),
        total(2 * lengths + PrepParams::raggedCount * offsets + pageTable) {}

  /// Where the clamped page table starts.
  size_t pageTableOffset() const { return total - pageTable; }
};

/// One ragged tensor's offsets: where they go, which cu_seqlens they follow
/// (0: the queries', 1: the keys'), and its elements per token.
struct RaggedTensor {
  CUdeviceptr AttentionPointers::*pointer;
  int side;
  int64_t tokenStride;
};

/// `stride`, or the packed width of `heads` heads when it is 0.
int64_t strideOr(int64_t stride, int64_t heads, const AttentionProblem &p) {
  return stride ? stride : heads * p.headDim;
}
} // namespace

size_t tejit::runtime::thdPrepBytes(const AttentionProblem &problem) {
  return ThdScratch(problem).total;
}

Error tejit::runtime::enqueueThdPrep(const AttentionProblem &p, CUfunction prep,
                                     const ThdPrepBuffers &buffers,
                                     AttentionPointers &pointers,
                                     CUstream stream,
                                     const CudaDriver &driver) {
  if (!p.thd() || !buffers.cuSeqlensQ || !buffers.scratch)
    return makeError(ErrorCode::InvalidArgument,
                     p.key() + ": the thd prep needs a thd problem, "
                               "cu_seqlens and scratch");
  if (p.kvCache && (!buffers.newK || !buffers.newV || !buffers.cuSeqlensKv ||
                    !pointers.k || !pointers.v))
    return makeError(ErrorCode::InvalidArgument,
                     p.key() + ": the kv-cache prep needs the new k and v "
                               "tokens, cu_seqlens_kv and the caches");
  if (p.paged() && !buffers.pageTable)
    return makeError(ErrorCode::InvalidArgument,
                     p.key() + ": a paged kv cache's prep needs its page "
                               "table");
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  int64_t qWidth = p.heads * p.headDim, kvWidth = p.kvHeads * p.headDim;
  ThdScratch layout(p);
  PrepParams params;
  params.batch = p.batch;
  params.rngIn = buffers.rngIn;
  params.rngOut = buffers.rngOut;
  params.rngOffsetDelta = buffers.rngOffsetDelta;
  params.cuSeqlens[0] = buffers.cuSeqlensQ;
  params.cuSeqlens[1] =
      buffers.cuSeqlensKv ? buffers.cuSeqlensKv : buffers.cuSeqlensQ;
  params.tokens[0] = p.tokensQ;
  params.tokens[1] = p.tokensKv;
  params.maxSeqlen[0] = p.seqQ;
  params.maxSeqlen[1] = p.seqKv;
  pointers.seqLenQ = params.lengths[0] = buffers.scratch;
  pointers.seqLenKv = params.lengths[1] = buffers.scratch + layout.lengths;
  if (p.kvCache) {
    // cu_seqlens_kv counts cached tokens, which no buffer of the step
    // bounds: its entries are only kept non-negative, and each length is
    // clamped to the cache's rows.
    params.tokens[1] = std::numeric_limits<int32_t>::max();
    params.appendFrom[0] = buffers.newK;
    params.appendFrom[1] = buffers.newV;
    params.appendTo[0] = pointers.k;
    params.appendTo[1] = pointers.v;
    params.appendStride[0] = strideOr(t.k, p.kvHeads, p);
    params.appendStride[1] = strideOr(t.v, p.kvHeads, p);
    params.appendWidth = kvWidth;
  }
  if (p.paged()) {
    params.pageTable = buffers.pageTable;
    pointers.pageTable = params.pageTableOut =
        buffers.scratch + layout.pageTableOffset();
    params.pageSize = p.pageSize;
    params.pages = p.pages;
    params.pagesPerSequence = p.pagesPerSequence();
  }

  // o and dO are packed; q, k, v and the gradients may be strided views. A
  // kv cache's k and v are the caches, read from their start (no offsets).
  llvm::SmallVector<RaggedTensor, PrepParams::raggedCount> ragged = {
      {&AttentionPointers::raggedQ, 0, strideOr(t.q, p.heads, p)}};
  if (!p.kvCache)
    ragged.append(
        {{&AttentionPointers::raggedK, 1, strideOr(t.k, p.kvHeads, p)},
         {&AttentionPointers::raggedV, 1, strideOr(t.v, p.kvHeads, p)}});
  ragged.push_back({&AttentionPointers::raggedO, 0, qWidth});
  if (p.backward)
    ragged.insert(
        ragged.end(),
        {{&AttentionPointers::raggedGradQ, 0, strideOr(t.gradQ, p.heads, p)},
         {&AttentionPointers::raggedGradK, 1, strideOr(t.gradK, p.kvHeads, p)},
         {&AttentionPointers::raggedGradV, 1,
          strideOr(t.gradV, p.kvHeads, p)}});
  CUdeviceptr offsets = buffers.scratch + 2 * layout.lengths;
  for (auto [index, tensor] : llvm::enumerate(ragged)) {
    CUdeviceptr at = offsets + index * layout.offsets;
    pointers.*tensor.pointer = params.offsets[index] = at;
    params.offsetSide[index] = tensor.side;
    params.offsetScale[index] = tensor.tokenStride;
  }

  // The rows cuDNN leaves alone: a packed buffer's tail.
  struct Zeroed {
    CUdeviceptr base;
    int side;
    int64_t width, stride;
  };
  llvm::SmallVector<Zeroed, PrepParams::zeroedCount> zeroed;
  if (p.backward)
    zeroed = {{pointers.gradQ, 0, qWidth, strideOr(t.gradQ, p.heads, p)},
              {pointers.gradK, 1, kvWidth, strideOr(t.gradK, p.kvHeads, p)},
              {pointers.gradV, 1, kvWidth, strideOr(t.gradV, p.kvHeads, p)}};
  else
    zeroed = {{pointers.o, 0, qWidth, qWidth}};
  int64_t widestTail = 0;
  for (auto [index, rows] : llvm::enumerate(zeroed)) {
    if (!rows.base)
      return makeError(ErrorCode::InvalidArgument,
                       p.key() + ": the thd prep zeroes the tail rows of " +
                           (p.backward ? "dq, dk and dv" : "o") +
                           ", whose pointers must be set");
    params.zeroed[index] = rows.base;
    params.zeroedSide[index] = rows.side;
    params.zeroedWidth[index] = rows.width;
    params.zeroedStride[index] = rows.stride;
    widestTail = std::max(widestTail, params.tokens[rows.side] * rows.width);
  }

  // Enough blocks to clear a whole buffer's worth of 16-byte stores (or to
  // append every new token) in one sweep for small problems, capped: usually
  // the tail is short and most blocks find nothing to do.
  constexpr unsigned threads = 256, maxBlocks = 256;
  int64_t appended = p.kvCache ? p.batch * p.seqQ * kvWidth : 0;
  int64_t stores = std::max((std::max(widestTail, appended) + 7) / 8,
                            p.batch * p.pagesPerSequence());
  unsigned blocks = unsigned(
      std::clamp<int64_t>((stores + threads - 1) / threads, 1, maxBlocks));
  return launchPrep(driver, prep, params, blocks, threads, stream,
                    "launching the attention prep kernel (thd)");
}

//===----------------------------------------------------------------------===//
// kv cache: the prep, then cuDNN or the decode kernels
//===----------------------------------------------------------------------===//

Error tejit::runtime::enqueueKvCacheAttention(
    const AttentionProblem &p, CUfunction prep, const KvCacheEngine &engine,
    const ThdPrepBuffers &buffers, AttentionPointers &pointers,
    CUdeviceptr workspace, CUstream stream, const CudaDriver &driver) {
  if (!p.kvCache)
    return makeError(ErrorCode::InvalidArgument,
                     p.key() + ": not a kv cache problem");
  bool useDecode = !engine.runner;
  if (useDecode) {
    if (!engine.decode.canRun(p))
      return makeError(ErrorCode::InvalidArgument,
                       p.key() + ": neither a cuDNN runner nor the decode "
                                 "kernels to run the kv cache attention");
    // The problem was validated when the engine was chosen: only the bound
    // here (validate() on every call would cost host time per step).
    if (p.seqQ > kDecodeMaxQueries)
      return makeError(
          ErrorCode::Unsupported,
          llvm::formatv("{0}: the decode kernels take at most {1} new "
                        "queries per sequence (max_seqlen_q)",
                        p.key(), kDecodeMaxQueries));
    const DecodeSplits &s = engine.splits;
    if (s.splits <= 0 || s.splits > decodeMaxSplits)
      return makeError(ErrorCode::InvalidArgument,
                       llvm::formatv("{0}: {1} decode splits (1 to {2})",
                                     p.key(), s.splits, decodeMaxSplits));
    // The split kernel reads the caches 16 bytes at a time.
    if (pointers.k % 16 != 0 || pointers.v % 16 != 0)
      return makeError(ErrorCode::InvalidArgument,
                       p.key() + ": the decode kernels need 16-byte aligned "
                                 "k and v caches");
  }
  if (Error error = enqueueThdPrep(p, prep, buffers, pointers, stream, driver))
    return error;
  if (!useDecode)
    return engine.runner->run(pointers, workspace, stream);

  DecodeRows rows(p);
  DecodePartials partials(p, engine.splits);
  DecodeParams params;
  params.q = pointers.q;
  params.kCache = pointers.k;
  params.vCache = pointers.v;
  params.seqLenQ = pointers.seqLenQ;
  params.seqLenKv = pointers.seqLenKv;
  params.qOffsets = pointers.raggedQ;
  params.oOffsets = pointers.raggedO;
  params.partialStats = workspace;
  params.partialO = workspace + partials.stats;
  params.o = pointers.o;
  params.batch = p.batch;
  params.heads = p.heads;
  params.kvHeads = p.kvHeads;
  params.headDim = p.headDim;
  params.seqQ = p.seqQ;
  params.cacheRows = p.seqKv;
  params.splits = engine.splits.splits;
  params.qStride = queryStride(p);
  params.rowBlocksPerCta = rows.perCta;
  params.causal = p.bottomRight() ? 1 : 0;
  params.f16 = p.element == ElementType::F16 ? 1 : 0;
  params.scaleLog2 = p.softmaxScale / std::log(2.0);
  params.pageTable = pointers.pageTable;
  params.pageSize = p.pageSize;
  params.pagesPerSequence = p.pagesPerSequence();
  void *arguments[] = {&params};
  if (Error error = driver.check(
          driver.cuLaunchKernel(
              engine.decode.splitFor(p), unsigned(engine.splits.splits),
              unsigned(p.batch * p.kvHeads), unsigned(rows.groups),
              unsigned(decodeWarps * 32), 1, 1, 0, stream, arguments, nullptr),
          "launching the decode attention kernel"))
    return error;
  return driver.check(
      driver.cuLaunchKernel(engine.decode.combine,
                            unsigned(p.batch * p.heads * p.seqQ), 1, 1, 128, 1,
                            1, 0, stream, arguments, nullptr),
      "launching the decode attention combine kernel");
}
