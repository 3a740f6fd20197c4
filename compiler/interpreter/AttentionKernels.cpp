//===- AttentionKernels.cpp - attention core, its backward, rotary --------===//
#include "compiler/interpreter/DropoutRng.h"
#include "compiler/interpreter/Kernels.h"
#include "dialects/AlibiSlopes.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <limits>

using namespace tejit::interp;
using mlir::te::AttnMaskType;
using mlir::te::QkvFormat;

namespace {
/// Addressing of a 4-D tensor laid out as [s, b, h, d] or [b, s, h, d], or
/// of packed sequences [t, h, d] (thd): sequence b's position s is token
/// starts[b] + s, and only its first lengths[b] positions exist.
struct Layout {
  int64_t seq, batch, heads, dim;
  bool sbhd;
  std::vector<int64_t> starts, lengths;

  Layout(const Tensor &t, QkvFormat format)
      : seq(t.shape[format == QkvFormat::sbhd ? 0 : 1]),
        batch(t.shape[format == QkvFormat::sbhd ? 1 : 0]), heads(t.shape[2]),
        dim(t.shape[3]), sbhd(format == QkvFormat::sbhd) {
    assert(t.shape.size() == 4 && "attention tensors are 4-D");
  }

  /// Packed sequences: `cuSeqlens` [b + 1] (checked by the caller), the
  /// longest length `maxSeqlen`.
  Layout(const Tensor &t, const Tensor &cuSeqlens, int64_t maxSeqlen)
      : seq(maxSeqlen), batch(int64_t(cuSeqlens.data.size()) - 1),
        heads(t.shape[1]), dim(t.shape[2]), sbhd(false) {
    assert(t.shape.size() == 3 && "packed attention tensors are 3-D");
    for (int64_t b = 0; b < batch; ++b) {
      starts.push_back(int64_t(cuSeqlens.data[b]));
      lengths.push_back(int64_t(cuSeqlens.data[b + 1] - cuSeqlens.data[b]));
    }
  }

  static Layout of(const Tensor &t, const AttentionParams &params, bool query) {
    if (params.format != QkvFormat::thd)
      return Layout(t, params.format);
    return query ? Layout(t, *params.cuSeqlensQ, params.maxSeqlenQ)
                 : Layout(t, *params.cuSeqlensKv, params.maxSeqlenKv);
  }

  bool packed() const { return !starts.empty(); }
  /// How many positions of batch entry b hold tokens.
  int64_t length(int64_t b) const { return packed() ? lengths[b] : seq; }

  /// Offset of the head vector at (batch b, position s, head h).
  int64_t at(int64_t b, int64_t s, int64_t h) const {
    if (packed())
      return ((starts[b] + s) * heads + h) * dim;
    return ((sbhd ? s * batch + b : b * seq + s) * heads + h) * dim;
  }
};

/// The shapes of one attention problem, and its parameters.
struct Problem {
  Layout q, kv;
  const AttentionParams &params;

  /// The key/value head that query head `h` reads (GQA).
  int64_t kvHead(int64_t h) const { return h / (q.heads / kv.heads); }

  /// Flat index of (b, h, i) in the [b, heads, s_q] softmax statistics.
  int64_t row(int64_t b, int64_t h, int64_t i) const {
    return (b * q.heads + h) * q.seq + i;
  }

  /// Whether the mask hides key j from query i of batch b, head h.
  bool isMasked(int64_t b, int64_t h, int64_t i, int64_t j) const;

  /// What the bias type adds to score (b, h, i, j) after the scale.
  double biasAt(int64_t b, int64_t h, int64_t i, int64_t j) const;

  /// Whether query i of batch b is padded (queryMask, or past the end of
  /// a packed sequence).
  bool isPaddedQuery(int64_t b, int64_t i) const {
    if (q.packed())
      return i >= q.length(b);
    return params.queryMask && params.queryMask->data[b * q.seq + i] != 0.0;
  }

  /// The dropout multiplier (0 or 1 / (1 - rate)) of probability (b, h, i, j).
  double dropoutScale(int64_t b, int64_t h, int64_t i, int64_t j) const;

  /// Scaled scores of query (b, h, i) against every key; masked ones are
  /// -inf.
  void scores(const Tensor &query, const Tensor &key, int64_t b, int64_t h,
              int64_t i, std::vector<double> &out) const;
};
} // namespace

bool Problem::isMasked(int64_t b, int64_t h, int64_t i, int64_t j) const {
  AttnMaskType type = params.maskType;
  // Context parallelism takes no_mask or causal over the whole sequence.
  if (params.cpRanks > 1)
    return type == AttnMaskType::causal && j > params.queryPosition(i, q.seq);
  bool padding = type == AttnMaskType::padding ||
                 type == AttnMaskType::padding_causal ||
                 type == AttnMaskType::padding_causal_bottom_right;
  if (kv.packed() ? j >= kv.length(b)
                  : padding && params.mask->data[b * kv.seq + j] != 0.0)
    return true;
  bool topLeft =
      type == AttnMaskType::causal || type == AttnMaskType::padding_causal;
  int64_t diagonal = i + (topLeft ? 0 : kv.seq - q.seq);
  if ((params.windowLeft >= 0 && j < diagonal - params.windowLeft) ||
      (params.windowRight >= 0 && j > diagonal + params.windowRight))
    return true;
  if (topLeft)
    return j > i;
  // Bottom-right: the diagonal ends at the last key; packed sequences
  // (the KV cache's) align each sequence's own lengths.
  if (type == AttnMaskType::causal_bottom_right ||
      type == AttnMaskType::padding_causal_bottom_right)
    return j > i + (q.packed() ? kv.length(b) - q.length(b) : kv.seq - q.seq);
  if (type != AttnMaskType::arbitrary)
    return false;
  // [b or 1, heads or 1, s_q, s_kv]: size-1 dims broadcast.
  const Tensor &mask = *params.mask;
  int64_t mb = mask.shape[0] == 1 ? 0 : b, mh = mask.shape[1] == 1 ? 0 : h;
  return mask.data[((mb * mask.shape[1] + mh) * q.seq + i) * kv.seq + j] != 0.0;
}

double tejit::interp::vanillaAlibiSlope(int64_t head, int64_t heads) {
  return tejit::alibi::vanillaSlope(head, heads);
}

double Problem::biasAt(int64_t b, int64_t h, int64_t i, int64_t j) const {
  switch (params.biasType) {
  case mlir::te::AttnBiasType::no_bias:
    return 0.0;
  case mlir::te::AttnBiasType::post_scale_bias: {
    // [1 or b, 1 or h, s_q, s_kv]: size-1 dims broadcast.
    const Tensor &bias = *params.bias;
    int64_t bb = bias.shape[0] == 1 ? 0 : b, bh = bias.shape[1] == 1 ? 0 : h;
    return bias.data[((bb * bias.shape[1] + bh) * q.seq + i) * kv.seq + j];
  }
  case mlir::te::AttnBiasType::alibi: {
    const Tensor *slopes = params.alibiSlopes;
    double slope = !slopes                     ? vanillaAlibiSlope(h, q.heads)
                   : slopes->shape.size() == 1 ? slopes->data[h]
                                               : slopes->data[b * q.heads + h];
    // TE's bottom-right alignment, except for the top-left causal types.
    bool topLeft = params.maskType == AttnMaskType::causal ||
                   params.maskType == AttnMaskType::padding_causal;
    int64_t offset = topLeft ? 0 : kv.seq - q.seq;
    return -slope * double(std::abs(i - j + offset));
  }
  }
  return 0.0;
}

double Problem::dropoutScale(int64_t b, int64_t h, int64_t i, int64_t j) const {
  const DropoutKey &key = params.dropoutKey;
  uint64_t index = row(b, h, i) * kv.seq + j;
  return tejit::dropout::keeps(params.dropout, key.seed, key.offset, key.stream,
                               index)
             ? 1.0 / (1.0 - params.dropout)
             : 0.0;
}

void Problem::scores(const Tensor &query, const Tensor &key, int64_t b,
                     int64_t h, int64_t i, std::vector<double> &out) const {
  out.assign(kv.seq, -std::numeric_limits<double>::infinity());
  const double *qi = query.data.data() + q.at(b, i, h);
  for (int64_t j = 0; j < kv.seq; ++j) {
    if (isMasked(b, h, i, j))
      continue;
    const double *kj = key.data.data() + kv.at(b, j, kvHead(h));
    double dot = 0.0;
    for (int64_t d = 0; d < q.dim; ++d)
      dot += qi[d] * kj[d];
    out[j] = dot * params.softmaxScale + biasAt(b, h, i, j);
  }
}

/// log(sum(exp(scores))), -inf when every score is.
static double logSumExp(const std::vector<double> &scores) {
  double max = -std::numeric_limits<double>::infinity();
  for (double s : scores)
    max = std::max(max, s);
  if (std::isinf(max))
    return max;
  double sum = 0.0;
  for (double s : scores)
    sum += std::exp(s - max);
  return max + std::log(sum);
}

/// `acc = max(acc, value)`, NaN from the first NaN on (as absMax()).
static void foldMax(double &acc, double value) {
  acc = std::isnan(acc) || std::isnan(value)
            ? std::numeric_limits<double>::quiet_NaN()
            : std::max(acc, value);
}

std::string tejit::interp::packedSequencesError(const Tensor &cuSeqlens,
                                                int64_t maxSeqlen,
                                                int64_t tokens) {
  const std::vector<double> &starts = cuSeqlens.data;
  bool ok =
      !starts.empty() && starts.front() == 0 && starts.back() <= double(tokens);
  for (size_t i = 1; ok && i < starts.size(); ++i)
    ok = starts[i] >= starts[i - 1] &&
         starts[i] - starts[i - 1] <= double(maxSeqlen);
  if (ok)
    return "";
  return "must start at 0, never decrease, hold no sequence longer than " +
         std::to_string(maxSeqlen) + " and end at most at the " +
         std::to_string(tokens) + " tokens";
}

AttentionOutputs tejit::interp::attention(const Tensor &query,
                                          const Tensor &key,
                                          const Tensor &value,
                                          const AttentionParams &params) {
  Problem p{Layout::of(query, params, /*query=*/true),
            Layout::of(key, params, /*query=*/false), params};
  AttentionOutputs result{Tensor::zeros(query.shape),
                          Tensor::zeros({p.q.batch, p.q.heads, p.q.seq})};
  std::vector<double> scores;
  for (int64_t b = 0; b < p.q.batch; ++b)
    for (int64_t h = 0; h < p.q.heads; ++h)
      for (int64_t i = 0; i < p.q.seq; ++i) {
        if (p.isPaddedQuery(b, i)) {
          result.softmaxLse.data[p.row(b, h, i)] =
              -std::numeric_limits<double>::infinity();
          continue;
        }
        p.scores(query, key, b, h, i, scores);
        double lse = logSumExp(scores);
        result.softmaxLse.data[p.row(b, h, i)] = lse;
        double *out = result.output.data.data() + p.q.at(b, i, h);
        for (int64_t j = 0; j < p.kv.seq && !std::isinf(lse); ++j) {
          if (std::isinf(scores[j]))
            continue;
          double prob = std::exp(scores[j] - lse);
          foldMax(result.maxProbability, prob);
          double weight = prob * p.dropoutScale(b, h, i, j);
          const double *vj = value.data.data() + p.kv.at(b, j, p.kvHead(h));
          for (int64_t d = 0; d < p.q.dim; ++d)
            out[d] += weight * vj[d];
        }
      }
  return result;
}

AttentionGrads
tejit::interp::attentionBwd(const Tensor &grad, const Tensor &query,
                            const Tensor &key, const Tensor &value,
                            const Tensor &output, const Tensor &softmaxLse,
                            const AttentionParams &params) {
  Problem p{Layout::of(query, params, /*query=*/true),
            Layout::of(key, params, /*query=*/false), params};
  AttentionGrads result{Tensor::zeros(query.shape), Tensor::zeros(key.shape),
                        Tensor::zeros(value.shape), Tensor()};
  if (params.biasGrad)
    result.bias = Tensor::zeros({1, p.q.heads, p.q.seq, p.kv.seq});
  std::vector<double> scores;
  for (int64_t b = 0; b < p.q.batch; ++b)
    for (int64_t h = 0; h < p.q.heads; ++h)
      for (int64_t i = 0; i < p.q.seq; ++i) {
        double lse = softmaxLse.data[p.row(b, h, i)];
        if (std::isinf(lse) || p.isPaddedQuery(b, i))
          continue;
        p.scores(query, key, b, h, i, scores);
        int64_t qOffset = p.q.at(b, i, h);
        const double *dO = grad.data.data() + qOffset;
        // D = rowsum(dO * O) = sum_j P_ij dP_ij.
        double correction = 0.0;
        for (int64_t d = 0; d < p.q.dim; ++d)
          correction += dO[d] * output.data[qOffset + d];
        for (int64_t j = 0; j < p.kv.seq; ++j) {
          if (std::isinf(scores[j]))
            continue;
          int64_t kvOffset = p.kv.at(b, j, p.kvHead(h));
          double prob = std::exp(scores[j] - lse);
          double keep = p.dropoutScale(b, h, i, j);
          // dV_j += P_ij keep dO_i; dP_ij = keep (dO_i . v_j).
          double dProb = 0.0;
          for (int64_t d = 0; d < p.q.dim; ++d) {
            result.value.data[kvOffset + d] += prob * keep * dO[d];
            dProb += dO[d] * value.data[kvOffset + d];
          }
          // dS_ij = P_ij (dP_ij - D), the gradient of the post-scale
          // score (the bias's, summed over the batch); scores = scale *
          // q . k + bias.
          double dScaled = prob * (keep * dProb - correction);
          foldMax(result.maxScoreGrad, std::fabs(dScaled));
          if (params.biasGrad)
            result.bias.data[(h * p.q.seq + i) * p.kv.seq + j] += dScaled;
          double dScore = dScaled * params.softmaxScale;
          for (int64_t d = 0; d < p.q.dim; ++d) {
            result.query.data[qOffset + d] += dScore * key.data[kvOffset + d];
            result.key.data[kvOffset + d] += dScore * query.data[qOffset + d];
          }
        }
      }
  return result;
}

Tensor tejit::interp::rotary(const Tensor &x, const Tensor &freqs,
                             QkvFormat format, bool inverse, bool interleaved) {
  Layout layout(x, format);
  // The rotated width r (the table's); channels [r, d) pass through.
  int64_t width = freqs.shape.back(), half = width / 2;
  double sign = inverse ? -1.0 : 1.0;
  Tensor result = x;
  for (int64_t b = 0; b < layout.batch; ++b)
    for (int64_t s = 0; s < layout.seq; ++s)
      for (int64_t h = 0; h < layout.heads; ++h) {
        const double *in = x.data.data() + layout.at(b, s, h);
        double *out = result.data.data() + layout.at(b, s, h);
        const double *angles = freqs.data.data() + s * width;
        for (int64_t d = 0; d < width; ++d) {
          // rotate_half(x) = concat(-x[r/2:r], x[:r/2]); interleaved, each
          // pair (x[2i], x[2i+1]) becomes (-x[2i+1], x[2i]).
          double rotated = interleaved ? (d % 2 == 0 ? -in[d + 1] : in[d - 1])
                           : d < half  ? -in[d + half]
                                       : in[d - half];
          out[d] = in[d] * std::cos(angles[d]) +
                   sign * rotated * std::sin(angles[d]);
        }
      }
  return result;
}

std::string tejit::interp::kvCacheSequencesError(const Tensor &cuSeqlensQ,
                                                 const Tensor &cuSeqlensKv,
                                                 int64_t maxSeqlenQ,
                                                 int64_t tokens,
                                                 int64_t cacheRows) {
  if (std::string error = packedSequencesError(cuSeqlensQ, maxSeqlenQ, tokens);
      !error.empty())
    return "cu_seqlens_q " + error;
  const std::vector<double> &q = cuSeqlensQ.data, &kv = cuSeqlensKv.data;
  bool ok = kv.size() == q.size() && kv.front() == 0;
  for (size_t i = 1; ok && i < kv.size(); ++i) {
    double total = kv[i] - kv[i - 1], fresh = q[i] - q[i - 1];
    ok = total >= fresh && total <= double(cacheRows);
  }
  if (ok)
    return "";
  return "cu_seqlens_kv must start at 0 and give every sequence at least its "
         "new tokens and at most the cache's " +
         std::to_string(cacheRows) + " rows";
}

KvCacheOutputs tejit::interp::kvCacheAttention(
    const Tensor &query, const Tensor &key, const Tensor &value,
    const Tensor &keyCache, const Tensor &valueCache, const Tensor &cuSeqlensQ,
    const Tensor &cuSeqlensKv, int64_t maxSeqlenQ, AttentionParams params) {
  KvCacheOutputs result{Tensor(), keyCache, valueCache};
  int64_t batch = int64_t(cuSeqlensQ.data.size()) - 1;
  int64_t rows = keyCache.shape[1];
  int64_t width = keyCache.shape[2] * keyCache.shape[3];
  auto sequenceStart = [](const Tensor &cu, int64_t i) {
    return int64_t(cu.data[i]);
  };
  // Store the new tokens, then gather each sequence's rows [0, L) back to
  // back: the keys as packed sequences with cu_seqlens_kv.
  int64_t total = sequenceStart(cuSeqlensKv, batch);
  Tensor packedKey =
      Tensor::zeros({total, keyCache.shape[2], keyCache.shape[3]});
  Tensor packedValue = Tensor::zeros(packedKey.shape);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t first = sequenceStart(cuSeqlensQ, i);
    int64_t fresh = sequenceStart(cuSeqlensQ, i + 1) - first;
    int64_t length =
        sequenceStart(cuSeqlensKv, i + 1) - sequenceStart(cuSeqlensKv, i);
    for (int64_t j = 0; j < fresh; ++j) {
      int64_t row = i * rows + length - fresh + j;
      std::copy_n(key.data.begin() + (first + j) * width, width,
                  result.keyCache.data.begin() + row * width);
      std::copy_n(value.data.begin() + (first + j) * width, width,
                  result.valueCache.data.begin() + row * width);
    }
    int64_t packedRow = sequenceStart(cuSeqlensKv, i);
    std::copy_n(result.keyCache.data.begin() + i * rows * width, length * width,
                packedKey.data.begin() + packedRow * width);
    std::copy_n(result.valueCache.data.begin() + i * rows * width,
                length * width, packedValue.data.begin() + packedRow * width);
  }
  params.format = QkvFormat::thd;
  params.cuSeqlensQ = &cuSeqlensQ;
  params.cuSeqlensKv = &cuSeqlensKv;
  params.maxSeqlenQ = maxSeqlenQ;
  params.maxSeqlenKv = rows;
  params.dropout = 0.0;
  result.output = attention(query, packedKey, packedValue, params).output;
  return result;
}

namespace {
/// A sequence's rows in a paged cache: where logical row `row` of sequence
/// `seq` lives, as a row of the pool seen as [pages * page_size, ...].
struct PagedRows {
  const Tensor &pageTable;
  int64_t pageSize;

  int64_t operator()(int64_t seq, int64_t row) const {
    int64_t maxPages = pageTable.shape[1];
    auto page = int64_t(pageTable.data[seq * maxPages + row / pageSize]);
    return page * pageSize + row % pageSize;
  }
};

/// Copies row `fromRow` of `from` to row `toRow` of `to` (rows of `width`).
void copyRow(const Tensor &from, int64_t fromRow, Tensor &to, int64_t toRow,
             int64_t width) {
  std::copy_n(from.data.begin() + fromRow * width, width,
              to.data.begin() + toRow * width);
}

/// Sequence i's length after the step, L_i.
int64_t lengthAfterStep(const Tensor &cuSeqlensKv, int64_t i) {
  return int64_t(cuSeqlensKv.data[i + 1] - cuSeqlensKv.data[i]);
}
} // namespace

std::string tejit::interp::pageTableError(const Tensor &pageTable,
                                          const Tensor &cuSeqlensKv,
                                          int64_t pageSize, int64_t pages) {
  int64_t batch = pageTable.shape[0], maxPages = pageTable.shape[1];
  for (int64_t i = 0; i < batch; ++i) {
    // The pages holding rows [0, L_i), the ones the step touches.
    int64_t used = std::clamp<int64_t>(
        (lengthAfterStep(cuSeqlensKv, i) + pageSize - 1) / pageSize, 0,
        maxPages);
    for (int64_t p = 0; p < used; ++p) {
      double id = pageTable.data[i * maxPages + p];
      if (id >= 0 && id < double(pages))
        continue;
      return "page_table[" + std::to_string(i) + ", " + std::to_string(p) +
             "] = " + std::to_string(int64_t(id)) + " (the page of sequence " +
             std::to_string(i) + "'s rows from " +
             std::to_string(p * pageSize) + ") is not a page in [0, " +
             std::to_string(pages) + ")";
    }
  }
  return "";
}

KvCacheOutputs tejit::interp::pagedKvCacheAttention(
    const Tensor &query, const Tensor &key, const Tensor &value,
    const Tensor &keyCache, const Tensor &valueCache, const Tensor &pageTable,
    const Tensor &cuSeqlensQ, const Tensor &cuSeqlensKv, int64_t maxSeqlenQ,
    const AttentionParams &params) {
  int64_t batch = int64_t(cuSeqlensQ.data.size()) - 1;
  PagedRows paged{pageTable, keyCache.shape[1]};
  int64_t rows = paged.pageSize * pageTable.shape[1];
  int64_t width = keyCache.shape[2] * keyCache.shape[3];
  // The non-paged caches [b, S, g, d] whose row r of sequence i holds its
  // paged row r, for the rows the step reads ([0, L_i); the others stay 0).
  Tensor keys =
      Tensor::zeros({batch, rows, keyCache.shape[2], keyCache.shape[3]});
  Tensor values = Tensor::zeros(keys.shape);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < lengthAfterStep(cuSeqlensKv, i); ++r) {
      copyRow(keyCache, paged(i, r), keys, i * rows + r, width);
      copyRow(valueCache, paged(i, r), values, i * rows + r, width);
    }
  KvCacheOutputs flat =
      kvCacheAttention(query, key, value, keys, values, cuSeqlensQ, cuSeqlensKv,
                       maxSeqlenQ, params);
  // Store the new tokens (rows [L_i - n_i, L_i)) through the table.
  KvCacheOutputs result{std::move(flat.output), keyCache, valueCache};
  for (int64_t i = 0; i < batch; ++i) {
    int64_t length = lengthAfterStep(cuSeqlensKv, i);
    int64_t fresh = int64_t(cuSeqlensQ.data[i + 1] - cuSeqlensQ.data[i]);
    for (int64_t r = length - fresh; r < length; ++r) {
      copyRow(flat.keyCache, i * rows + r, result.keyCache, paged(i, r), width);
      copyRow(flat.valueCache, i * rows + r, result.valueCache, paged(i, r),
              width);
    }
  }
  return result;
}
