//===- attention_check.cpp - cuDNN fused attention against float64 --------===//
//
// Runs the runtime's AttentionRunner (runtime/Attention.h) forward and
// backward on the GPU for a matrix of problems and compares o, stats, dq,
// dk and dv with a float64 CPU reference computed from the same (rounded)
// inputs:
//
//   * {bf16, f16} x head dim {64, 128} x {none, causal, padding,
//     padding_causal} x {MHA, GQA (4 query heads per kv head), MQA} x
//     {sbhd, bshd}, batch 2, 8 heads, s = 128; and s = 256 for d 128 MHA/GQA
//     sbhd. Padding lengths are random per batch entry in [s/2, s]; only
//     valid query rows and key positions are compared, and dk/dv of padded
//     key positions must be exactly 0.
//   * dropout p = 0.1 and 0.5: cuDNN's keep mask is read first by running
//     the forward with q = k = 0 and v = identity (s_kv = d, so o[i, j] =
//     keep[i, j] / ((1 - p) s_kv)); the kept fraction must be near 1 - p,
//     then random inputs with the same seed and offset are compared against
//     the reference using that mask; the same seed/offset must give
//     bit-identical o, another offset a different o.
//   * cross-attention: s_q 128 / s_kv 256 and s_q 256 / s_kv 64, every mask
//     (top-left causal; padding on the keys only), MHA/GQA, both layouts;
//   * sliding windows (window_size): a left bound with each mask type, at
//     s = 256, d 128, MHA/GQA, both layouts and types.
//   * packed sequences (thd), through the runtime's prep kernel as the
//     launcher runs it: lengths of 0 to max_seqlen, a tail of tokens after
//     the last sequence (o, dq, dk, dv rows of exactly 0 there), padding and
//     padding_causal, MHA/GQA/MQA, d 64 and 128, bf16 and f16, a fused QKV
//     buffer, cross-attention (cu_seqlens_kv), sliding windows, long
//     sequences; guard bytes after every buffer (and guard columns in the
//     fused one) must stay untouched, also for bad cu_seqlens, which are
//     clamped on the device;
//   * kv cache (kv_cache_attention, `--filter kv_cache`), through the prep
//     kernel as the launcher runs it: prefill (every token new, lengths 0 to
//     the cache's 256 rows), decode (one new token over 1 to 256 cached),
//     chunked (a few new over cached), padding and
//     padding_causal_bottom_right, MHA/GQA/MQA, d 64 and 128, bf16 and f16,
//     a fused QKV buffer, caches of 2048 rows; the caches must come back
//     with exactly the new rows written (row L_i - n_i + j) and the others
//     untouched, o matches the float64 reference over old rows plus new
//     tokens, o's tail rows are 0, guard bytes stay untouched, also for bad
//     cu_seqlens;
//     Every kv-cache problem the decode kernels can run (max_seqlen_q <= 16)
//     runs twice, through the launcher's enqueueKvCacheAttention: on the
//     decode kernels (" [decode kernel]") and on cuDNN (" [cudnn]"), with
//     more cases for the decode kernels: caches of 4096 and 32768 rows with
//     lengths 1 to S, up to 16 uneven new tokens, MQA with 32 heads, d 64 and
//     128, bf16 and f16, strided q, hostile cu_seqlens;
//     Paged caches (`--filter paged`, docs/paged-kv-cache.md): a share of
//     those cases with their caches scattered into shuffled pages of 16, 64
//     or 256 rows plus spare pages, on both paths; the pages are gathered
//     back and checked as above, spare pages must stay untouched, and bad
//     page ids must keep the run in bounds;
//   * `--time-decode`: only the timing of decode kernel against cuDNN at b 8,
//     h 32, g 8, d 128, one new query, S 4096 (L 512, 3072) and S 32768 (L
//     16384): microseconds per call (median of 50 after 5 warm-ups) and GB/s
//     of cache read;
//   * one real size, batch 2, 32 heads, s = 2048, d 128, causal, bf16 (also
//     with a 512-key sliding window): the reference covers a few (batch,
//     head) slices; forward and backward are timed with CUDA events.
//   * attention bias (`--filter bias`, docs/attention-bias.md): the shapes
//     1hss (with dbias, compared at every position, also those no key sees:
//     0), b1ss, bhss and 11ss under every mask in bf16 and f16; GQA/MQA,
//     bshd, d 128; cross-attention both ways; s 192; sliding windows; a
//     fused QKV buffer; dropout (the keep mask read with a bias of zeros);
//     and b 2, h 16, s 2048, d 128 causal with dbias (timed);
//   * ALiBi (`--filter alibi`): vanilla slopes (the contract's formula,
//     written again here; 8 and 12 heads) and the caller's [h] and [b, h]
//     under every mask with s_q = s_kv, s_q < s_kv and s_q > s_kv (the
//     bottom-right offset), f16/GQA/bshd/d 128, windows, dropout (slopes of
//     0 while the keep mask is read), and the real size with vanilla slopes.
//
// Relative L2 error must stay within 1e-2 (bf16) or 5e-3 (f16). One line per
// problem (PASS/FAIL/UNSUPPORTED), a summary, exit status 1 on any failure,
// 77 (skipped) without a GPU.
//
//   tejit-attention-check [--seed N] [--filter TEXT] [--no-real]
//                         [--time-decode]
//
//===----------------------------------------------------------------------===//
#include "runtime/Attention.h"
#include "runtime/AttentionLauncher.h"
#include "runtime/CudaDriver.h"
#include "runtime/Cudnn.h"
#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"
#include "tests/gpu/CudnnGpu.h"
#include "tests/gpu/GpuCheckUtils.h"
#include "tests/gpu/HostAttention.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace tejit::runtime;
using namespace tejit::gpucheck;

namespace {

//===----------------------------------------------------------------------===//
// Host tensors
//===----------------------------------------------------------------------===//

/// bf16 or f16 bits as a double.
double decodeElement(ElementType element, uint16_t raw) {
  return element == ElementType::BF16 ? fromBf16(raw) : fromHalf(raw);
}

/// A [b, h, s, d] tensor in the problem's layout: the device bits and the
/// same rounded values as doubles, both in device order.
struct HostTensor {
  int64_t batch = 0, heads = 0, seq = 0, dim = 0;
  AttentionLayout layout = AttentionLayout::Sbhd;
  ElementType element = ElementType::BF16;
  std::vector<uint16_t> bits;
  std::vector<double> values;

  HostTensor(const AttentionProblem &p, int64_t heads, int64_t seq)
      : batch(p.batch), heads(heads), seq(seq), dim(p.headDim),
        layout(p.layout), element(p.element),
        bits(size_t(p.batch * heads * seq * p.headDim)), values(bits.size()) {}

  size_t index(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return layoutIndex(layout, batch, heads, seq, dim, b, h, s, d);
  }
  double at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return values[index(b, h, s, d)];
  }
  size_t bytes() const { return bits.size() * 2; }

  void set(size_t i, float value) {
    bits[i] = element == ElementType::BF16 ? toBf16(value) : toHalf(value);
    values[i] = decode(bits[i]);
  }
  double decode(uint16_t raw) const { return decodeElement(element, raw); }
  void randomize(std::mt19937_64 &rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    for (size_t i = 0; i < bits.size(); ++i)
      set(i, normal(rng));
  }
  /// Reads device bits back into `values`.
  void decodeAll() {
    for (size_t i = 0; i < bits.size(); ++i)
      values[i] = decode(bits[i]);
  }
};

/// What a problem with a bias adds to its scores (docs/attention-bias.md):
/// a post-scale bias [biasBatch, biasHeads, s_q, s_kv] (the device bits and
/// their values), or ALiBi's slopes: the caller's as uploaded (f32 [h] or
/// [b, h]; empty for vanilla slopes) and every (batch, head)'s as doubles.
struct ScoreBias {
  std::vector<uint16_t> bits;
  std::vector<double> values;
  std::vector<float> deviceSlopes;
  std::vector<double> slopes; // [b * h]
};

/// TE's vanilla ALiBi slopes as the contract spells them (float64, stored
/// as f32), written here again so that the check does not take the
/// runtime's word for them.
std::vector<double> contractVanillaSlopes(int64_t heads) {
  int64_t n = 1;
  while (n * 2 <= heads)
    n *= 2;
  std::vector<double> slopes;
  for (int64_t k = 0; k < heads; ++k) {
    double exponent = k < n ? -8.0 * double(k + 1) / double(n)
                            : -4.0 * double(2 * (k - n) + 1) / double(n);
    slopes.push_back(double(float(std::pow(2.0, exponent))));
  }
  return slopes;
}

//===----------------------------------------------------------------------===//
// The float64 reference
//===----------------------------------------------------------------------===//

/// Reference outputs in canonical [b, h, s, d] order (stats [b, h, s];
/// dbias [h, s_q, s_kv] with a bias gradient).
struct Reference {
  std::vector<double> o, stats, dq, dk, dv, dbias;
};

struct Inputs {
  const AttentionProblem &p;
  const HostTensor &q, &k, &v, &gradO;
  std::vector<int32_t> lenQ, lenKv; // per batch entry
  /// keep[((b * h + head) * s_q + i) * s_kv + j], empty without dropout.
  const std::vector<uint8_t> *keep = nullptr;
  /// The bias or ALiBi slopes, when the problem has one.
  const ScoreBias *scoreBias = nullptr;
};

/// What the contract adds to the scaled score of (b, h, i, j): the bias, or
/// ALiBi's -slope * |j - i - off| with off = s_kv - s_q, but 0 under the
/// causal and padding_causal masks (TE's top-left alignment).
double scoreBias(const Inputs &in, int64_t b, int64_t h, int64_t i, int64_t j) {
  const AttentionProblem &p = in.p;
  if (p.bias == AttentionBias::PostScale) {
    int64_t bb = p.biasBatch == 1 ? 0 : b, bh = p.biasHeads == 1 ? 0 : h;
    return in.scoreBias
        ->values[size_t(((bb * p.biasHeads + bh) * p.seqQ + i) * p.seqKv + j)];
  }
  if (p.bias != AttentionBias::Alibi)
    return 0;
  bool topLeft =
      p.mask == AttentionMask::Causal || p.mask == AttentionMask::PaddingCausal;
  int64_t off = topLeft ? 0 : p.seqKv - p.seqQ;
  double slope = in.scoreBias->slopes[size_t(b * p.heads + h)];
  return -slope * double(std::abs(j - i - off));
}

/// The keys query i sees, [first, last), with `keys` unpadded keys: the
/// causal mask (top-left), a right bound without it, and a left bound.
std::pair<int64_t, int64_t> visibleKeys(const AttentionProblem &p, int64_t i,
                                        int64_t keys) {
  int64_t last = p.causal() ? std::min(keys, i + 1) : keys;
  if (!p.causal() && p.windowRight >= 0)
    last = std::min(last, i + p.windowRight + 1);
  int64_t first =
      p.windowLeft >= 0 ? std::max<int64_t>(0, i - p.windowLeft) : 0;
  return {first, last};
}

size_t canonical(const AttentionProblem &p, int64_t b, int64_t h, int64_t s,
                 int64_t heads, int64_t seq, int64_t d) {
  return size_t(((b * heads + h) * seq + s) * p.headDim + d);
}

/// Fills `ref` for the (batch, kv head) groups listed (all when empty).
void reference(const Inputs &in, Reference &ref,
               std::vector<std::pair<int64_t, int64_t>> groups) {
  const AttentionProblem &p = in.p;
  int64_t H = p.heads, Hk = p.kvHeads, sq = p.seqQ, skv = p.seqKv,
          D = p.headDim, perGroup = H / Hk;
  ref.o.assign(size_t(p.batch * H * sq * D), 0);
  ref.stats.assign(size_t(p.batch * H * sq), 0);
  ref.dq.assign(ref.o.size(), 0);
  ref.dk.assign(size_t(p.batch * Hk * skv * D), 0);
  ref.dv.assign(ref.dk.size(), 0);
  // dbias sums over the batch: rows of one head from several threads.
  ref.dbias.assign(p.biasGrad ? size_t(H * sq * skv) : 0, 0);
  std::vector<std::mutex> headLocks(size_t(p.biasGrad ? H : 0));
  if (groups.empty())
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t g = 0; g < Hk; ++g)
        groups.push_back({b, g});
  double keepScale = p.dropout > 0 ? 1.0 / (1.0 - p.dropout) : 1.0;

  parallelFor(groups.size(), [&](size_t index) {
    auto [b, g] = groups[index];
    int64_t lq = in.lenQ[b], lk = in.lenKv[b];
    size_t row = static_cast<size_t>(skv);
    std::vector<double> prob(row), keep(row, 1.0), dropped(row), gradP(row);
    for (int64_t h = g * perGroup; h < (g + 1) * perGroup; ++h) {
      for (int64_t i = 0; i < lq; ++i) {
        auto [first, last] = visibleKeys(p, i, lk);
        double max = -INFINITY;
        for (int64_t j = first; j < last; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += in.q.at(b, h, i, d) * in.k.at(b, g, j, d);
          prob[j] = dot * p.softmaxScale + scoreBias(in, b, h, i, j);
          max = std::max(max, prob[j]);
        }
        double sum = 0;
        for (int64_t j = first; j < last; ++j)
          sum += std::exp(prob[j] - max);
        double stats = max + std::log(sum);
        ref.stats[size_t((b * H + h) * sq + i)] = stats;
        for (int64_t j = first; j < last; ++j) {
          prob[j] = std::exp(prob[j] - stats);
          if (in.keep)
            keep[j] = (*in.keep)[size_t(((b * H + h) * sq + i) * skv + j)];
          dropped[j] = prob[j] * keep[j] * keepScale;
        }
        // o and D = dO . o.
        double rowDot = 0;
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = first; j < last; ++j)
            acc += dropped[j] * in.v.at(b, g, j, d);
          ref.o[canonical(p, b, h, i, H, sq, d)] = acc;
          rowDot += acc * in.gradO.at(b, h, i, d);
        }
        // dP (through the dropout mask), dS, then dq, dk, dv.
        for (int64_t j = first; j < last; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += in.gradO.at(b, h, i, d) * in.v.at(b, g, j, d);
          // dS = P (dP - D), dP = dO.v through the dropout mask.
          gradP[j] = prob[j] * (dot * keep[j] * keepScale - rowDot);
        }
        // dbias: dS of the post-scale scores (before `* scale`).
        if (p.biasGrad) {
          std::lock_guard<std::mutex> lock(headLocks[size_t(h)]);
          double *row = &ref.dbias[size_t((h * sq + i) * skv)];
          for (int64_t j = first; j < last; ++j)
            row[j] += gradP[j];
        }
        for (int64_t j = first; j < last; ++j) {
          double ds = gradP[j] * p.softmaxScale;
          for (int64_t d = 0; d < D; ++d) {
            ref.dq[canonical(p, b, h, i, H, sq, d)] += ds * in.k.at(b, g, j, d);
            ref.dk[canonical(p, b, g, j, Hk, skv, d)] +=
                ds * in.q.at(b, h, i, d);
            ref.dv[canonical(p, b, g, j, Hk, skv, d)] +=
                dropped[j] * in.gradO.at(b, h, i, d);
          }
        }
      }
    }
  });
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

struct Error2 {
  double diff = 0, norm = 0, maxAbs = 0;
  bool nan = false;
  void add(double got, double want) {
    if (!std::isfinite(got))
      nan = true;
    diff += (got - want) * (got - want);
    norm += want * want;
    maxAbs = std::max(maxAbs, std::abs(got - want));
  }
  double rel() const {
    if (nan)
      return INFINITY;
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  }
};

struct Outcome {
  std::vector<std::pair<std::string, Error2>> errors;
  std::string problems; // extra failures, e.g. padded gradients
  double worst() const {
    double worst = 0;
    for (auto &[name, error] : errors)
      worst = std::max(worst, error.rel());
    return worst;
  }
};

/// Device outputs of one forward + backward (dbias [h, s_q, s_kv] with a
/// bias gradient).
struct DeviceResults {
  HostTensor o, dq, dk, dv;
  std::vector<float> stats;
  std::vector<double> dbias;
};

/// dbias [h, s_q, s_kv], every position (those no batch entry sees are 0),
/// of the heads whose every batch entry the reference covers.
template <typename Covered>
Error2 compareGradBias(const Inputs &in, const Reference &ref,
                       const DeviceResults &got, Covered covered) {
  const AttentionProblem &p = in.p;
  int64_t perGroup = p.heads / p.kvHeads;
  Error2 error;
  for (int64_t h = 0; h < p.heads; ++h) {
    bool all = true;
    for (int64_t b = 0; b < p.batch; ++b)
      all = all && covered(b, h / perGroup);
    if (!all)
      continue;
    size_t first = size_t(h * p.seqQ * p.seqKv);
    for (size_t at = first; at < first + size_t(p.seqQ * p.seqKv); ++at)
      error.add(got.dbias[at], ref.dbias[at]);
  }
  return error;
}

Outcome compare(const Inputs &in, const Reference &ref,
                const DeviceResults &got,
                const std::vector<std::pair<int64_t, int64_t>> &groups,
                bool backward) {
  const AttentionProblem &p = in.p;
  int64_t H = p.heads, Hk = p.kvHeads, sq = p.seqQ, skv = p.seqKv,
          D = p.headDim, perGroup = H / Hk;
  Error2 o, stats, dq, dk, dv;
  double paddedMax = 0;
  auto covered = [&](int64_t b, int64_t g) {
    if (groups.empty())
      return true;
    return std::find(groups.begin(), groups.end(), std::make_pair(b, g)) !=
           groups.end();
  };
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t g = 0; g < Hk; ++g) {
      if (!covered(b, g))
        continue;
      for (int64_t h = g * perGroup; h < (g + 1) * perGroup; ++h)
        for (int64_t i = 0; i < in.lenQ[b]; ++i) {
          size_t row = size_t((b * H + h) * sq + i);
          stats.add(got.stats[row], ref.stats[row]);
          for (int64_t d = 0; d < D; ++d) {
            size_t at = canonical(p, b, h, i, H, sq, d);
            o.add(got.o.at(b, h, i, d), ref.o[at]);
            if (backward)
              dq.add(got.dq.at(b, h, i, d), ref.dq[at]);
          }
        }
      if (!backward)
        continue;
      for (int64_t j = 0; j < skv; ++j)
        for (int64_t d = 0; d < D; ++d) {
          if (j >= in.lenKv[b]) {
            paddedMax = std::max({paddedMax, std::abs(got.dk.at(b, g, j, d)),
                                  std::abs(got.dv.at(b, g, j, d))});
            if (std::isnan(got.dk.at(b, g, j, d)) ||
                std::isnan(got.dv.at(b, g, j, d)))
              paddedMax = NAN;
            continue;
          }
          size_t at = canonical(p, b, g, j, Hk, skv, d);
          dk.add(got.dk.at(b, g, j, d), ref.dk[at]);
          dv.add(got.dv.at(b, g, j, d), ref.dv[at]);
        }
    }
  Outcome outcome;
  outcome.errors = {{"o", o}, {"stats", stats}};
  if (backward) {
    outcome.errors.push_back({"dq", dq});
    outcome.errors.push_back({"dk", dk});
    outcome.errors.push_back({"dv", dv});
  }
  if (backward && p.biasGrad)
    outcome.errors.push_back({"dbias", compareGradBias(in, ref, got, covered)});
  if (!(paddedMax == 0))
    outcome.problems += "dk/dv of padded key positions are not 0 (max |x| = " +
                        std::to_string(paddedMax) + ", NaN: not written)";
  return outcome;
}

//===----------------------------------------------------------------------===//
// Running one problem
//===----------------------------------------------------------------------===//

/// Rows of `tokens` fused QKV rows, `stride` elements apart: q's `qWidth`
/// elements, then k's and v's `kvWidth` each, then guard columns of
/// 0x3c3c (thd's q, k and v bits are [t, heads, d], row by row).
std::vector<uint16_t> fusedQkvRows(const HostTensor &q, const HostTensor &k,
                                   const HostTensor &v, int64_t tokens,
                                   int64_t qWidth, int64_t kvWidth,
                                   int64_t stride) {
  std::vector<uint16_t> packed(size_t(tokens * stride), 0x3c3c);
  for (int64_t t = 0; t < tokens; ++t) {
    uint16_t *row = packed.data() + t * stride;
    std::copy_n(q.bits.begin() + t * qWidth, qWidth, row);
    std::copy_n(k.bits.begin() + t * kvWidth, kvWidth, row + qWidth);
    std::copy_n(v.bits.begin() + t * kvWidth, kvWidth, row + qWidth + kvWidth);
  }
  return packed;
}

/// Points q, k, v and their gradients at their column ranges of fused
/// QKV rows: q's `qWidth` elements, then k's and v's `kvWidth` each.
void pointAtFusedQkv(AttentionPointers &pointers, CUdeviceptr qkv,
                     CUdeviceptr gradQkv, int64_t qWidth, int64_t kvWidth) {
  pointers.q = qkv;
  pointers.k = qkv + qWidth * 2;
  pointers.v = qkv + (qWidth + kvWidth) * 2;
  pointers.gradQ = gradQkv;
  pointers.gradK = gradQkv + qWidth * 2;
  pointers.gradV = gradQkv + (qWidth + kvWidth) * 2;
}

struct Tally {
  int passed = 0, failed = 0, unsupported = 0;
};

struct Case {
  std::string name;
  AttentionProblem problem; // the forward; the backward flips `backward`
  bool mustPass = false;
  /// (batch, kv head) groups the reference covers; all when empty.
  std::vector<std::pair<int64_t, int64_t>> groups;
  bool timed = false;
};

/// Packed sequences (thd): q [t, h, d], k and v [t_kv, kv_h, d]; sequence
/// i's queries are tokens [cu_q[i], cu_q[i + 1]), its keys [cu_kv[i],
/// cu_kv[i + 1]); tokens after the last sequence (the tail) must come back
/// with o, dq, dk and dv rows of exactly 0.
struct ThdCase {
  std::string name;
  AttentionProblem problem; // the forward: thd, tokens and max lengths set
  std::vector<int32_t> lenQ, lenKv; // lenKv empty: one cu_seqlens for both
  /// q, k and v (and dq, dk, dv) column ranges of one fused buffer.
  bool fused = false;
  bool mustPass = true;
  std::vector<std::pair<int64_t, int64_t>> groups; // all when empty
  /// When set: cu_seqlens_q as uploaded instead (out of order, outside the
  /// tokens); the run must finish within its buffers, nothing is compared.
  std::vector<int32_t> hostileCu;
};

/// kv cache (kv_cache_attention): b sequences with n_i new tokens packed
/// (thd, then a tail of tokens) and L_i tokens in all, the caches [b, s_kv,
/// kv_h, d]; new token j goes to cache row L_i - n_i + j and query j sees
/// the first L_i rows (bottom-right causal: rows <= L_i - n_i + j).
struct KvCacheCase {
  std::string name;
  AttentionProblem problem;          // kvCache, thd, tokens, s_q = max_seqlen_q
  std::vector<int32_t> fresh, total; // n_i, L_i
  /// q and the new k and v as column ranges of one fused buffer.
  bool fused = false;
  bool mustPass = true;
  /// When set: cu_seqlens as uploaded instead (out of order, out of range);
  /// the run must finish within its buffers, nothing is compared.
  std::vector<int32_t> hostileCuQ, hostileCuKv;
  /// Paged (problem.pageSize > 0): the logical caches are scattered into
  /// pages in a shuffled order (seeded by `pageSeed`), with spare pages no
  /// sequence uses; hostilePages puts ids outside [0, pages) into the
  /// table (nothing compared, the run must stay in bounds).
  uint64_t pageSeed = 0;
  bool hostilePages = false;
};

class Checker {
public:
  Checker(Gpu &gpu, uint64_t seed) : gpu(gpu), rng(seed) {}

  Tally tally;

  /// Forward + backward of `c` with random inputs, against the reference.
  void run(const Case &c) {
    const AttentionProblem &p = c.problem;
    Runners runners;
    if (!getRunners(c, runners))
      return;
    HostTensor q(p, p.heads, p.seqQ), k(p, p.kvHeads, p.seqKv),
        v(p, p.kvHeads, p.seqKv), gradO(p, p.heads, p.seqQ);
    for (HostTensor *t : {&q, &k, &v, &gradO})
      t->randomize(rng);
    ScoreBias bias = scoreBiasOf(p);
    Inputs in{p, q, k, v, gradO, lengths(p, p.seqQ), lengths(p, p.seqKv)};
    in.scoreBias = &bias;
    if (!p.padding()) {
      in.lenQ.assign(size_t(p.batch), int32_t(p.seqQ));
      in.lenKv.assign(size_t(p.batch), int32_t(p.seqKv));
    } else if (p.seqQ != p.seqKv) {
      // Cross-attention: the mask pads keys; every query is valid (as
      // tejit's runtime passes it).
      in.lenQ.assign(size_t(p.batch), int32_t(p.seqQ));
    } else if (p.windowLeft >= 0) {
      // Windows come with self-attention, whose queries and keys share one
      // padding mask (tejit's runtime passes the same lengths); unequal
      // lengths would leave rows with no visible key.
      in.lenKv = in.lenQ;
    }
    DeviceResults got = results(p);
    std::string failure;
    Timing timing;
    if (!execute(c, runners, in, got, failure, c.timed ? &timing : nullptr)) {
      report(false, c.name, "run failed: " + failure);
      return;
    }
    Reference ref;
    reference(in, ref, c.groups);
    finish(c, compare(in, ref, got, c.groups, true), timing);
  }

  /// The dropout checks of `c` (dropoutCase's, perhaps with a bias or
  /// ALiBi of the caller's slopes) for keep probability 1 - p.
  void runDropout(const Case &c) {
    const AttentionProblem &p = c.problem;
    double dropout = p.dropout;
    Runners runners;
    if (!getRunners(c, runners))
      return;
    uint64_t seedValue = rng(), offsetValue = rng() % 1000000 * 16;

    // 1. The keep mask: q = k = 0, v = identity (a bias of zeros, ALiBi
    // slopes of 0).
    HostTensor zeros(p, p.heads, p.seqQ), zerosK(p, p.kvHeads, p.seqKv),
        identity(p, p.kvHeads, p.seqKv), gradO(p, p.heads, p.seqQ);
    for (size_t i = 0; i < zeros.bits.size(); ++i)
      zeros.set(i, 0);
    for (size_t i = 0; i < zerosK.bits.size(); ++i)
      zerosK.set(i, 0);
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.kvHeads; ++h)
        for (int64_t j = 0; j < p.seqKv; ++j)
          for (int64_t d = 0; d < p.headDim; ++d)
            identity.set(identity.index(b, h, j, d), j == d ? 1.f : 0.f);
    gradO.randomize(rng);
    Inputs maskIn{p,
                  zeros,
                  zerosK,
                  identity,
                  gradO,
                  std::vector<int32_t>(size_t(p.batch), int32_t(p.seqQ)),
                  std::vector<int32_t>(size_t(p.batch), int32_t(p.seqKv))};
    ScoreBias noBias = scoreBiasOf(p, /*zero=*/true);
    maskIn.scoreBias = &noBias;
    DeviceResults maskOut = results(p);
    std::string failure;
    if (!execute(c, runners, maskIn, maskOut, failure, nullptr, seedValue,
                 offsetValue, /*backward=*/false)) {
      report(false, c.name, "mask read failed: " + failure);
      return;
    }
    std::vector<uint8_t> keep(size_t(p.batch * p.heads * p.seqQ * p.seqKv));
    double worstRounding = 0;
    size_t kept = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t i = 0; i < p.seqQ; ++i)
          for (int64_t j = 0; j < p.seqKv; ++j) {
            double scaled =
                maskOut.o.at(b, h, i, j) * (1 - dropout) * double(p.seqKv);
            double rounded = std::round(scaled);
            worstRounding = std::max(worstRounding, std::abs(scaled - rounded));
            if (std::isnan(scaled))
              worstRounding = INFINITY;
            bool on = rounded >= 1;
            keep[size_t(((b * p.heads + h) * p.seqQ + i) * p.seqKv + j)] = on;
            kept += on;
          }
    double fraction = double(kept) / double(keep.size());
    if (worstRounding > 0.05) {
      report(false, c.name,
             "the mask read gave o values that are not keep / ((1 - p) s_kv) "
             "(worst distance from an integer multiple: " +
                 std::to_string(worstRounding) + ")");
      return;
    }
    if (std::abs(fraction - (1 - dropout)) > 0.01) {
      report(false, c.name,
             "kept fraction " + std::to_string(fraction) + ", expected " +
                 std::to_string(1 - dropout));
      return;
    }

    // 2. Random inputs, same seed and offset, against the reference.
    HostTensor q(p, p.heads, p.seqQ), k(p, p.kvHeads, p.seqKv),
        v(p, p.kvHeads, p.seqKv);
    for (HostTensor *t : {&q, &k, &v})
      t->randomize(rng);
    ScoreBias bias = scoreBiasOf(p);
    Inputs in{p, q, k, v, gradO, maskIn.lenQ, maskIn.lenKv, &keep, &bias};
    DeviceResults got = results(p);
    if (!execute(c, runners, in, got, failure, nullptr, seedValue, offsetValue,
                 /*backward=*/true)) {
      report(false, c.name, "run failed: " + failure);
      return;
    }
    Reference ref;
    reference(in, ref, {});
    Outcome outcome = compare(in, ref, got, {}, true);

    // 3. Same seed/offset: the same bits; another offset: another o.
    DeviceResults again = results(p), shifted = results(p);
    if (!execute(c, runners, in, again, failure, nullptr, seedValue,
                 offsetValue, false) ||
        !execute(c, runners, in, shifted, failure, nullptr, seedValue,
                 offsetValue + 4096, false)) {
      report(false, c.name, "rerun failed: " + failure);
      return;
    }
    if (again.o.bits != got.o.bits)
      outcome.problems += " same seed and offset gave different o;";
    if (shifted.o.bits == got.o.bits)
      outcome.problems += " another offset gave the same o;";
    char note[96];
    std::snprintf(note, sizeof(note), " kept=%.4f", fraction);
    finish(c, outcome, {}, note);
  }

  /// Packed sequences (thd): the prep kernel and cuDNN, forward then
  /// backward, against the reference of the padded problem, sequence by
  /// sequence; see ThdCase.
  void runThd(const ThdCase &c) {
    const AttentionProblem &p = c.problem;
    Case asCase{c.name, p, c.mustPass, c.groups, false};
    Runners runners;
    if (!getRunners(asCase, runners))
      return;
    ThdRun run(c, p);
    run.randomize(rng);
    std::string failure;
    if (!executeThd(c, runners, run, failure)) {
      report(false, c.name, "run failed: " + failure);
      return;
    }
    if (!c.hostileCu.empty()) {
      // Nothing to compare: the run finished and stayed in its buffers.
      if (run.problems.empty())
        report(true, c.name, "bad cu_seqlens stayed in bounds");
      else
        report(false, c.name, run.problems);
      return;
    }
    AttentionProblem padded = paddedOf(p);
    HostTensor q(padded, p.heads, p.seqQ), k(padded, p.kvHeads, p.seqKv),
        v(padded, p.kvHeads, p.seqKv), gradO(padded, p.heads, p.seqQ);
    scatter(run.q, run.cuQ, run.lenQ, q);
    scatter(run.k, run.cuKv, run.lenKv, k);
    scatter(run.v, run.cuKv, run.lenKv, v);
    scatter(run.gradO, run.cuQ, run.lenQ, gradO);
    Inputs in{padded, q, k, v, gradO, run.lenQ, run.lenKv};
    Reference ref;
    reference(in, ref, c.groups);
    Outcome outcome = compareThd(c, run, ref);
    finish(asCase, outcome, {});
  }

  /// kv cache: the prep kernel (lengths, offsets, the append) and cuDNN, as
  /// AttentionLauncher runs a kv_cache_attention step; the caches must come
  /// back with exactly the new rows written, and o must match the float64
  /// reference over the old cache rows plus the new tokens; see KvCacheCase.
  void runKvCache(const KvCacheCase &c) {
    const AttentionProblem &p = c.problem;
    bool eligible = decodeAttentionEligible(p);
    // Eligible problems run on both paths: the decode kernels and cuDNN.
    if (eligible) {
      KvCacheEngine engine;
      engine.decode = decodeKernels(p);
      engine.splits = decodeSplits(p, engine.decode.smCount);
      runKvCacheOn(c, c.name + " [decode kernel]", engine);
    }
    std::string name = eligible ? c.name + " [cudnn]" : c.name;
    auto runner = AttentionRunner::get(p);
    if (!runner) {
      std::string message;
      ErrorCode code = takeError(runner.takeError(), message);
      // Every kv-cache problem needs cuDNN 9.7: older ones refuse it.
      auto lib = Cudnn::get();
      bool old = lib && lib->version < 90700;
      llvm::consumeError(lib.takeError());
      if (code == ErrorCode::Unsupported && (old || !c.mustPass)) {
        std::printf("UNSUPPORTED %s: %s\n", name.c_str(), message.c_str());
        ++tally.unsupported;
      } else {
        report(false, name, message);
      }
      return;
    }
    KvCacheEngine engine;
    engine.runner = runner->get();
    runKvCacheOn(c, name, engine);
  }

  /// One kv-cache case on one engine (cuDNN or the decode kernels).
  void runKvCacheOn(const KvCacheCase &c, const std::string &name,
                    const KvCacheEngine &engine) {
    const AttentionProblem &p = c.problem;
    KvCacheRun run(c, p);
    run.randomize(rng);
    std::string failure;
    if (!executeKvCache(c, engine, run, failure)) {
      report(false, name, "run failed: " + failure);
      return;
    }
    if (!c.hostileCuQ.empty() || c.hostilePages) {
      // Nothing to compare: the run finished and stayed in its buffers.
      if (run.problems.empty())
        report(true, name,
               c.hostilePages ? "bad page ids stayed in bounds"
                              : "bad cu_seqlens stayed in bounds");
      else
        report(false, name, run.problems);
      return;
    }
    Case asCase{name, p, c.mustPass, {}, false};
    finish(asCase, compareKvCache(c, run), {});
  }

  /// --time-decode with --filter: only the rows whose "b=8 S=4096 L=512
  /// paged16 (shuffled)" label contains it (for profiling one row).
  std::string timeFilter;

  /// The decode kernels for `problem`'s caches (decodeKernelNames; each
  /// set loaded once) with the device's SM count.
  void setSmCount(int64_t sms) { smCount = sms; }
  DecodeKernels decodeKernels(const AttentionProblem &problem) {
    DecodeKernelNames names = decodeKernelNames(problem);
    DecodeKernels &decode = decodeSets[names.splitTensorCores];
    if (decode.split)
      return decode;
    const CudaDriver &driver = *gpu.driver;
    if (!decodeModule)
      orDie(driver.check(
                driver.cuModuleLoadData(&decodeModule, decodeAttentionPtx()),
                "cuModuleLoadData"),
            "loading the decode attention kernels");
    for (auto [function, name] :
         {std::pair{&decode.splitTensorCores, names.splitTensorCores},
          std::pair{&decode.split, names.split},
          std::pair{&decode.combine, names.combine}})
      orDie(
          driver.check(driver.cuModuleGetFunction(function, decodeModule, name),
                       "cuModuleGetFunction"),
          (std::string("finding ") + name).c_str());
    decode.smCount = smCount;
    return decode;
  }

  /// `--time-decode`: microseconds per kv_cache_attention call (the prep
  /// kernel, then the decode kernels or cuDNN, through the launcher's
  /// enqueueKvCacheAttention) at b `batch`, h 32, g 8, d 128, one new query per
  /// sequence, every sequence with `total` tokens in caches of `rows`; the
  /// median of 50 calls after 5 warm-ups, CUDA events between calls
  /// enqueued back to back. `pageSize` > 0: the caches are pools of pages
  /// of that many rows, handed to the sequences in a shuffled order.
  void timeDecode(int64_t rows, int32_t total, bool uneven = false,
                  int64_t batch = 8, int64_t pageSize = 0,
                  bool shuffled = true) {
    std::string paged = pageSize
                            ? " paged" + std::to_string(pageSize) +
                                  (shuffled ? " (shuffled)" : " (in order)")
                            : "";
    std::string label = llvm::formatv("b={0} S={1} L={2}{3}{4}", batch, rows,
                                      total, uneven ? " uneven" : "", paged)
                            .str();
    if (!timeFilter.empty() && label.find(timeFilter) == std::string::npos)
      return;
    AttentionProblem p;
    p.kvCache = true;
    p.layout = AttentionLayout::Thd;
    p.element = ElementType::BF16;
    p.mask = AttentionMask::PaddingCausalBottomRight;
    p.batch = batch;
    p.heads = 32;
    p.kvHeads = 8;
    p.headDim = 128;
    p.seqQ = 1;
    p.seqKv = rows;
    p.tokensQ = p.tokensKv = batch;
    p.softmaxScale = 1 / std::sqrt(128.0);
    p.pageSize = pageSize;
    p.pages = pageSize ? batch * rows / pageSize : 0;
    const CudaDriver &driver = *gpu.driver;
    size_t cacheBytes = size_t(p.batch * rows * p.kvHeads * p.headDim) * 2;
    std::vector<int32_t> tableHost(size_t(p.pages));
    std::iota(tableHost.begin(), tableHost.end(), 0);
    if (shuffled)
      std::shuffle(tableHost.begin(), tableHost.end(), std::mt19937_64(7));
    DeviceBuffer table =
        gpu.allocate(std::max<size_t>(tableHost.size() * 4, 4), "page table");
    gpu.upload(table, tableHost.data(), tableHost.size() * 4);
    size_t tokenBytes = size_t(p.tokensQ * p.heads * p.headDim) * 2;
    DeviceBuffer kCache = gpu.allocate(cacheBytes, "k_cache"),
                 vCache = gpu.allocate(cacheBytes, "v_cache"),
                 q = gpu.allocate(tokenBytes, "q"),
                 k = gpu.allocate(tokenBytes, "k"),
                 v = gpu.allocate(tokenBytes, "v"),
                 o = gpu.allocate(tokenBytes, "o"),
                 cuQ = gpu.allocate(size_t(p.batch + 1) * 4, "cu_seqlens_q"),
                 cuKv = gpu.allocate(size_t(p.batch + 1) * 4, "cu_seqlens_kv"),
                 scratch = gpu.allocate(thdPrepBytes(p), "prep scratch");
    // bf16 0x3c00 (1/128) everywhere: the bytes matter, not the values.
    for (const DeviceBuffer *buffer : {&kCache, &vCache, &q, &k, &v})
      orDie(driver.check(driver.cuMemsetD32Async(buffer->get(), 0x3c003c00u,
                                                 buffer->bytes() / 4, nullptr),
                         "cuMemsetD32Async"),
            "fill");
    std::vector<int32_t> cuQHost(size_t(p.batch + 1)),
        cuKvHost(size_t(p.batch + 1));
    // Uneven: sequence i holds (2i + 1) / 8 of `total` tokens (the same sum).
    int64_t keys = 0;
    for (int32_t i = 0; i <= int32_t(p.batch); ++i) {
      cuQHost[size_t(i)] = i;
      cuKvHost[size_t(i)] = int32_t(keys);
      keys += uneven ? std::max<int64_t>(int64_t(total) * (2 * i + 1) / 8, 1)
                     : total;
    }
    gpu.upload(cuQ, cuQHost.data(), cuQHost.size() * 4);
    gpu.upload(cuKv, cuKvHost.data(), cuKvHost.size() * 4);

    auto timeWith = [&](const KvCacheEngine &engine, size_t workspaceBytes) {
      DeviceBuffer workspace = gpu.allocate(workspaceBytes, "workspace");
      ThdPrepBuffers buffers;
      buffers.cuSeqlensQ = cuQ.get();
      buffers.cuSeqlensKv = cuKv.get();
      buffers.scratch = scratch.get();
      buffers.newK = k.get();
      buffers.newV = v.get();
      buffers.pageTable = pageSize ? table.get() : 0;
      AttentionPointers pointers;
      pointers.q = q.get();
      pointers.o = o.get();
      pointers.k = kCache.get();
      pointers.v = vCache.get();
      // Calls back to back, an event between each two: the GPU never waits
      // for the host, and each call's time is that of its own kernels.
      constexpr int warmups = 5, runs = 50;
      std::vector<CUevent> events(warmups + runs + 1);
      for (CUevent &event : events)
        orDie(driver.check(driver.cuEventCreate(&event, CU_EVENT_DEFAULT),
                           "cuEventCreate"),
              "timing");
      driver.cuEventRecord(events[0], nullptr);
      for (int run = 0; run < warmups + runs; ++run) {
        orDie(enqueueKvCacheAttention(p, prepKernel(), engine, buffers,
                                      pointers, workspace.get(), nullptr,
                                      driver),
              "timed run");
        driver.cuEventRecord(events[size_t(run) + 1], nullptr);
      }
      orDie(driver.check(driver.cuEventSynchronize(events.back()),
                         "cuEventSynchronize"),
            "timing");
      std::vector<double> samples;
      for (int run = warmups; run < warmups + runs; ++run) {
        float ms = 0;
        driver.cuEventElapsedTime(&ms, events[size_t(run)],
                                  events[size_t(run) + 1]);
        samples.push_back(double(ms) * 1000);
      }
      for (CUevent event : events)
        driver.cuEventDestroy(event);
      std::sort(samples.begin(), samples.end());
      return samples[samples.size() / 2];
    };
    KvCacheEngine decodeEngine;
    decodeEngine.decode = decodeKernels(p);
    decodeEngine.splits = decodeSplits(p, smCount);
    double decodeUs =
        timeWith(decodeEngine, decodePartialBytes(p, decodeEngine.splits));
    double cudnnUs = NAN;
    auto runner = AttentionRunner::get(p);
    if (runner) {
      KvCacheEngine cudnnEngine;
      cudnnEngine.runner = runner->get();
      cudnnUs = timeWith(cudnnEngine, (*runner)->workspaceBytes());
    } else {
      std::printf("  cuDNN: %s\n", llvm::toString(runner.takeError()).c_str());
    }
    // The cache bytes a call reads: L_i keys and values of every (sequence,
    // kv head).
    double bytes = 2.0 * double(cuKvHost.back() * p.kvHeads * p.headDim) * 2;
    std::printf("TIME decode b=%lld h=32 g=8 d=128 S=%lld L=%d%s%s: decode "
                "kernel %.1f us (%.0f GB/s, %lld splits), cuDNN %.1f us "
                "(%.0f GB/s), cuDNN / decode %.2fx\n",
                (long long)batch, (long long)rows, total,
                uneven ? " (uneven, mean)" : "", paged.c_str(), decodeUs,
                bytes / decodeUs / 1e3, (long long)decodeEngine.splits.splits,
                cudnnUs, bytes / cudnnUs / 1e3, cudnnUs / decodeUs);
    // Other split counts, for tuning decodeSplits().
    if (std::getenv("TEJIT_TIME_DECODE_SPLITS"))
      for (int64_t splits : {int64_t(4), int64_t(16), int64_t(32)}) {
        KvCacheEngine other = decodeEngine;
        other.splits.splits = splits;
        double us = timeWith(other, decodePartialBytes(p, other.splits));
        std::printf("  %lld splits: %.1f us (%.0f GB/s)\n", (long long)splits,
                    us, bytes / us / 1e3);
      }
    std::fflush(stdout);
  }

private:
  struct Runners {
    std::shared_ptr<const AttentionRunner> forward, backward;
  };
  struct Timing {
    double forwardMs = 0, backwardMs = 0;
  };

  Gpu &gpu;
  std::mt19937_64 rng;
  std::map<std::string, DecodeKernels> decodeSets;
  CUmodule decodeModule = nullptr;
  int64_t smCount = 0;

  DeviceResults results(const AttentionProblem &p) {
    return {HostTensor(p, p.heads, p.seqQ),
            HostTensor(p, p.heads, p.seqQ),
            HostTensor(p, p.kvHeads, p.seqKv),
            HostTensor(p, p.kvHeads, p.seqKv),
            {},
            {}};
  }

  /// Random inputs for `p`'s bias (normal, rounded to the element type) or
  /// ALiBi slopes (the caller's: uniform in [0.02, 0.5]; vanilla: the
  /// contract's); with `zero`, a bias of zeros and slopes of 0 instead.
  ScoreBias scoreBiasOf(const AttentionProblem &p, bool zero = false) {
    ScoreBias bias;
    if (p.bias == AttentionBias::PostScale) {
      size_t count = size_t(p.biasBatch * p.biasHeads * p.seqQ * p.seqKv);
      std::normal_distribution<float> normal(0.f, 1.f);
      for (size_t i = 0; i < count; ++i) {
        float value = zero ? 0.f : normal(rng);
        uint16_t raw =
            p.element == ElementType::BF16 ? toBf16(value) : toHalf(value);
        bias.bits.push_back(raw);
        bias.values.push_back(decodeElement(p.element, raw));
      }
    } else if (p.bias == AttentionBias::Alibi) {
      std::vector<double> vanilla = contractVanillaSlopes(p.heads);
      std::uniform_real_distribution<float> uniform(0.02f, 0.5f);
      size_t count =
          size_t(p.alibiSlopes == AlibiSlopes::BatchHeads ? p.batch * p.heads
                                                          : p.heads);
      if (p.alibiSlopes != AlibiSlopes::None)
        for (size_t i = 0; i < count; ++i)
          bias.deviceSlopes.push_back(zero ? 0.f : uniform(rng));
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.heads; ++h)
          bias.slopes.push_back(
              p.alibiSlopes == AlibiSlopes::None
                  ? vanilla[size_t(h)]
                  : double(bias.deviceSlopes[size_t(
                        (p.alibiSlopes == AlibiSlopes::BatchHeads ? b : 0) *
                            p.heads +
                        h)]));
    }
    return bias;
  }

  std::vector<int32_t> lengths(const AttentionProblem &p, int64_t seq) {
    std::uniform_int_distribution<int32_t> pick(int32_t(seq / 2), int32_t(seq));
    std::vector<int32_t> result(size_t(p.batch));
    for (int32_t &length : result)
      length = pick(rng);
    return result;
  }

  /// False (reported) when cuDNN refuses the problem. A case's biasGrad is
  /// its backward's: the forward has no dbias to write.
  bool getRunners(const Case &c, Runners &runners) {
    AttentionProblem forward = c.problem, backward = c.problem;
    forward.biasGrad = false;
    backward.backward = true;
    for (auto [problem, slot] : {std::make_pair(forward, &runners.forward),
                                 std::make_pair(backward, &runners.backward)}) {
      auto runner = AttentionRunner::get(problem);
      if (runner) {
        *slot = std::move(*runner);
        continue;
      }
      std::string message;
      ErrorCode code = takeError(runner.takeError(), message);
      if (code == ErrorCode::Unsupported && !c.mustPass) {
        std::printf("UNSUPPORTED %s: %s\n", c.name.c_str(), message.c_str());
        ++tally.unsupported;
      } else {
        report(false, c.name, message);
      }
      return false;
    }
    return true;
  }

  /// Uploads, runs forward then (if `backward`) backward, downloads.
  bool execute(const Case &c, const Runners &runners, const Inputs &in,
               DeviceResults &got, std::string &failure, Timing *timing,
               uint64_t seedValue = 0, uint64_t offsetValue = 0,
               bool backward = true) {
    const AttentionProblem &p = c.problem;
    DeviceBuffer q = gpu.allocate(in.q.bytes(), "q"),
                 k = gpu.allocate(in.k.bytes(), "k"),
                 v = gpu.allocate(in.v.bytes(), "v"),
                 gradO = gpu.allocate(in.gradO.bytes(), "dO"),
                 o = gpu.allocate(got.o.bytes(), "o"),
                 dq = gpu.allocate(got.dq.bytes(), "dq"),
                 dk = gpu.allocate(got.dk.bytes(), "dk"),
                 dv = gpu.allocate(got.dv.bytes(), "dv"),
                 stats = gpu.allocate(size_t(p.batch * p.heads * p.seqQ) * 4,
                                      "stats"),
                 lenQ = gpu.allocate(size_t(p.batch) * 4, "seq_len_q"),
                 lenKv = gpu.allocate(size_t(p.batch) * 4, "seq_len_kv"),
                 seed = gpu.allocate(8, "seed"),
                 offset = gpu.allocate(8, "offset");
    size_t workspaceBytes = std::max(runners.forward->workspaceBytes(),
                                     runners.backward->workspaceBytes());
    DeviceBuffer workspace = gpu.allocate(workspaceBytes, "workspace");
    gpu.upload(q, in.q.bits.data(), in.q.bytes());
    gpu.upload(k, in.k.bits.data(), in.k.bytes());
    gpu.upload(v, in.v.bits.data(), in.v.bytes());
    gpu.upload(gradO, in.gradO.bits.data(), in.gradO.bytes());
    gpu.upload(lenQ, in.lenQ.data(), in.lenQ.size() * 4);
    gpu.upload(lenKv, in.lenKv.data(), in.lenKv.size() * 4);
    gpu.upload(seed, &seedValue, 8);
    gpu.upload(offset, &offsetValue, 8);
    // Outputs start as NaN, so that anything cuDNN does not write shows.
    for (DeviceBuffer *buffer : {&o, &dq, &dk, &dv, &stats})
      gpu.fill(*buffer, 0xff);

    AttentionPointers pointers;
    pointers.q = q.get();
    pointers.k = k.get();
    pointers.v = v.get();
    pointers.o = o.get();
    pointers.stats = stats.get();
    pointers.gradO = gradO.get();
    pointers.gradQ = dq.get();
    pointers.gradK = dk.get();
    pointers.gradV = dv.get();
    pointers.seqLenQ = lenQ.get();
    pointers.seqLenKv = lenKv.get();
    pointers.seed = seed.get();
    pointers.offset = offset.get();

    // The bias, ALiBi's slopes and dbias (NaN first, as the outputs above).
    DeviceBuffer bias, slopes, gradBias;
    const ScoreBias *score = in.scoreBias;
    if (score && !score->bits.empty()) {
      bias = gpu.allocate(score->bits.size() * 2, "bias");
      gpu.upload(bias, score->bits.data(), score->bits.size() * 2);
      pointers.bias = bias.get();
    }
    if (score && !score->deviceSlopes.empty()) {
      slopes = gpu.allocate(score->deviceSlopes.size() * 4, "alibi slopes");
      gpu.upload(slopes, score->deviceSlopes.data(),
                 score->deviceSlopes.size() * 4);
      pointers.alibiSlopes = slopes.get();
    }
    size_t gradBiasCount = size_t(p.heads * p.seqQ * p.seqKv);
    if (p.biasGrad) {
      gradBias = gpu.allocate(gradBiasCount * 2, "dbias");
      gpu.fill(gradBias, 0xff);
      pointers.gradBias = gradBias.get();
    }

    // Packed: q, k and v as column ranges of one [tokens, (h + 2 kv_h) d]
    // buffer, as a fused QKV projection writes them, and the gradients into
    // one such buffer: the strided views tejit's plans hand cuDNN.
    const int64_t width = p.tokenStrides.q;
    const int64_t tokens = p.batch * p.seqQ, qWidth = p.heads * p.headDim,
                  kvWidth = p.kvHeads * p.headDim;
    DeviceBuffer qkv, gradQkv;
    std::vector<uint16_t> packed;
    // Each token's heads are contiguous in both layouts: rows move as a whole.
    auto eachRow = [&](auto body) {
      for (int64_t t = 0; t < tokens; ++t) {
        body(t, size_t(t * qWidth), size_t(t * width), qWidth, 0);
        body(t, size_t(t * kvWidth), size_t(t * width + qWidth), kvWidth, 1);
        body(t, size_t(t * kvWidth), size_t(t * width + qWidth + kvWidth),
             kvWidth, 2);
      }
    };
    if (width) {
      packed.assign(size_t(tokens * width), 0);
      const HostTensor *parts[] = {&in.q, &in.k, &in.v};
      eachRow([&](int64_t, size_t from, size_t to, int64_t n, int part) {
        std::copy_n(parts[part]->bits.begin() + from, n, packed.begin() + to);
      });
      qkv = gpu.allocate(packed.size() * 2, "packed qkv");
      gradQkv = gpu.allocate(packed.size() * 2, "packed dqkv");
      gpu.upload(qkv, packed.data(), packed.size() * 2);
      gpu.fill(gradQkv, 0xff);
      pointAtFusedQkv(pointers, qkv.get(), gradQkv.get(), qWidth, kvWidth);
    }

    auto runOnce = [&](const AttentionRunner &runner) {
      if (llvm::Error error = runner.run(pointers, workspace.get(), nullptr)) {
        failure = llvm::toString(std::move(error));
        return false;
      }
      return true;
    };
    if (!runOnce(*runners.forward))
      return false;
    if (backward && !runOnce(*runners.backward))
      return false;
    if (CUresult result = gpu.driver->cuStreamSynchronize(nullptr)) {
      failure = llvm::toString(
          gpu.driver->error(result, "cuStreamSynchronize after attention"));
      return false;
    }
    if (timing) {
      timing->forwardMs = time(*runners.forward, pointers, workspace.get());
      timing->backwardMs = time(*runners.backward, pointers, workspace.get());
    }

    gpu.download(got.o.bits.data(), o, got.o.bytes());
    got.o.decodeAll();
    got.stats.resize(size_t(p.batch * p.heads * p.seqQ));
    gpu.download(got.stats.data(), stats, got.stats.size() * 4);
    if (backward && width) {
      gpu.download(packed.data(), gradQkv, packed.size() * 2);
      HostTensor *parts[] = {&got.dq, &got.dk, &got.dv};
      eachRow([&](int64_t, size_t to, size_t from, int64_t n, int part) {
        std::copy_n(packed.begin() + from, n, parts[part]->bits.begin() + to);
      });
      for (HostTensor *part : parts)
        part->decodeAll();
    } else if (backward) {
      for (auto [host, device] :
           {std::make_pair(&got.dq, &dq), std::make_pair(&got.dk, &dk),
            std::make_pair(&got.dv, &dv)}) {
        gpu.download(host->bits.data(), *device, host->bytes());
        host->decodeAll();
      }
    }
    if (backward && p.biasGrad) {
      std::vector<uint16_t> bits(gradBiasCount);
      gpu.download(bits.data(), gradBias, gradBiasCount * 2);
      got.dbias.clear();
      for (uint16_t raw : bits)
        got.dbias.push_back(decodeElement(p.element, raw));
    }
    return true;
  }

  /// Milliseconds per run, from CUDA events over 20 runs after 3 warm-ups.
  double time(const AttentionRunner &runner, const AttentionPointers &pointers,
              CUdeviceptr workspace) {
    return timeRuns(
        *gpu.driver,
        [&] { orDie(runner.run(pointers, workspace, nullptr), "timed run"); },
        /*warmups=*/3, /*runs=*/20);
  }

  void finish(const Case &c, const Outcome &outcome, const Timing &timing,
              const std::string &extra = "") {
    double tolerance = c.problem.element == ElementType::BF16 ? 1e-2 : 5e-3;
    bool pass = outcome.worst() <= tolerance && outcome.problems.empty();
    std::string details;
    char buffer[160];
    std::snprintf(buffer, sizeof(buffer), "rel_l2=%.3e", outcome.worst());
    details += buffer;
    for (auto &[name, error] : outcome.errors) {
      std::snprintf(buffer, sizeof(buffer), " %s=%.2e(max_abs %.2e)",
                    name.c_str(), error.rel(), error.maxAbs);
      details += buffer;
    }
    details += extra;
    if (c.timed) {
      const AttentionProblem &p = c.problem;
      // 4 flops per head dim per visible (query, key) pair.
      double visible = 0;
      for (int64_t i = 0; i < p.seqQ; ++i) {
        auto [first, last] = visibleKeys(p, i, p.seqKv);
        visible += double(std::max<int64_t>(0, last - first));
      }
      double flops =
          4.0 * double(p.batch * p.heads) * visible * double(p.headDim);
      std::snprintf(buffer, sizeof(buffer),
                    " | fwd %.3f ms %.1f TFLOP/s, bwd %.3f ms %.1f TFLOP/s",
                    timing.forwardMs, flops / timing.forwardMs / 1e9,
                    timing.backwardMs, 2.5 * flops / timing.backwardMs / 1e9);
      details += buffer;
    }
    if (!outcome.problems.empty())
      details += " |" + outcome.problems;
    report(pass, c.name, details);
  }

  void report(bool pass, const std::string &name, const std::string &text) {
    std::printf("%s %s %s\n", pass ? "PASS" : "FAIL", name.c_str(),
                text.c_str());
    std::fflush(stdout);
    ++(pass ? tally.passed : tally.failed);
  }

  //===--------------------------------------------------------------------===//
  // thd
  //===--------------------------------------------------------------------===//

  /// Bytes after every thd buffer that nothing may write (checked).
  static constexpr size_t guardBytes = 4096;
  static constexpr uint8_t guardByte = 0x3c;
  /// Elements after each row of a fused QKV buffer that nothing may write.
  static constexpr int64_t guardColumns = 8;

  CUfunction prep = nullptr;

  /// tejit_attention_prep, from the runtime's PTX (loaded once).
  CUfunction prepKernel() {
    if (prep)
      return prep;
    const CudaDriver &driver = *gpu.driver;
    CUmodule module;
    orDie(driver.check(driver.cuModuleLoadData(&module, attentionPrepPtx()),
                       "cuModuleLoadData"),
          "loading the runtime's helper kernels");
    orDie(driver.check(
              driver.cuModuleGetFunction(&prep, module, "tejit_attention_prep"),
              "cuModuleGetFunction"),
          "finding tejit_attention_prep");
    return prep;
  }

  /// What the launcher enqueues for a thd step, on the default
  /// stream: the prep kernel, then cuDNN; then waits for both.
  llvm::Error runPrepared(const AttentionProblem &problem,
                          const ThdPrepBuffers &buffers,
                          AttentionPointers &pointers,
                          const AttentionRunner &runner,
                          CUdeviceptr workspace) {
    const CudaDriver &driver = *gpu.driver;
    if (llvm::Error error = enqueueThdPrep(problem, prepKernel(), buffers,
                                           pointers, nullptr, driver))
      return error;
    if (llvm::Error error = runner.run(pointers, workspace, nullptr))
      return error;
    return driver.check(driver.cuStreamSynchronize(nullptr),
                        "cuStreamSynchronize after attention");
  }

  /// The padded bshd problem a thd problem stands for (the reference's).
  static AttentionProblem paddedOf(const AttentionProblem &p) {
    AttentionProblem padded = p;
    padded.layout = AttentionLayout::Bshd;
    padded.tokensQ = padded.tokensKv = 0;
    padded.tokenStrides = {};
    return padded;
  }

  /// A [rows, heads, d] tensor of tokens (as a bshd tensor of batch 1).
  static HostTensor tokens(const AttentionProblem &p, int64_t heads,
                           int64_t rows) {
    AttentionProblem flat = paddedOf(p);
    flat.batch = 1;
    return HostTensor(flat, heads, rows);
  }

  /// Sequence i's tokens of `from` into batch entry i of `to`.
  static void scatter(const HostTensor &from, const std::vector<int32_t> &cu,
                      const std::vector<int32_t> &lengths, HostTensor &to) {
    for (size_t i = 0; i < lengths.size(); ++i)
      for (int64_t j = 0; j < lengths[i]; ++j)
        for (int64_t h = 0; h < to.heads; ++h)
          for (int64_t d = 0; d < to.dim; ++d)
            to.values[to.index(int64_t(i), h, j, d)] =
                from.at(0, h, cu[i] + j, d);
  }

  /// One thd run's host side: cu_seqlens, inputs and what came back.
  struct ThdRun {
    std::vector<int32_t> lenQ, lenKv, cuQ, cuKv;
    HostTensor q, k, v, gradO, o, dq, dk, dv;
    std::vector<float> stats;
    std::string problems; // guard bytes written, tails not zero

    ThdRun(const ThdCase &c, const AttentionProblem &p)
        : lenQ(c.lenQ), lenKv(c.lenKv.empty() ? c.lenQ : c.lenKv),
          cuQ(prefixSums(lenQ)), cuKv(prefixSums(lenKv)),
          q(tokens(p, p.heads, p.tokensQ)), k(tokens(p, p.kvHeads, p.tokensKv)),
          v(tokens(p, p.kvHeads, p.tokensKv)),
          gradO(tokens(p, p.heads, p.tokensQ)),
          o(tokens(p, p.heads, p.tokensQ)), dq(tokens(p, p.heads, p.tokensQ)),
          dk(tokens(p, p.kvHeads, p.tokensKv)),
          dv(tokens(p, p.kvHeads, p.tokensKv)) {}

    void randomize(std::mt19937_64 &rng) {
      for (HostTensor *t : {&q, &k, &v, &gradO})
        t->randomize(rng);
    }

    static std::vector<int32_t> prefixSums(const std::vector<int32_t> &lens) {
      std::vector<int32_t> cu(lens.size() + 1, 0);
      for (size_t i = 0; i < lens.size(); ++i)
        cu[i + 1] = cu[i] + lens[i];
      return cu;
    }
  };

  /// `bytes` bytes at `at` set to `value`.
  void fillBytes(CUdeviceptr at, size_t bytes, uint8_t value) {
    orDie(gpu.driver->check(
              gpu.driver->cuMemsetD8Async(at, value, bytes, nullptr),
              "cuMemsetD8Async"),
          "fill");
  }
  void fillBytes(const DeviceBuffer &buffer, size_t bytes, uint8_t value) {
    fillBytes(buffer.get(), bytes, value);
  }

  /// A device buffer of `bytes` and guardBytes after it set to guardByte.
  DeviceBuffer guarded(size_t bytes, const char *what) {
    DeviceBuffer buffer = gpu.allocate(bytes + guardBytes, what);
    fillBytes(buffer.get() + bytes, guardBytes, guardByte);
    return buffer;
  }

  /// Notes in `problems` when the guard after `bytes` of `buffer` changed.
  void checkGuard(const DeviceBuffer &buffer, size_t bytes, const char *what,
                  std::string &problems) {
    std::vector<uint8_t> guard(guardBytes);
    orDie(gpu.driver->check(gpu.driver->cuMemcpyDtoHAsync(guard.data(),
                                                          buffer.get() + bytes,
                                                          guardBytes, nullptr),
                            "cuMemcpyDtoHAsync"),
          "guard download");
    gpu.synchronize();
    if (std::any_of(guard.begin(), guard.end(),
                    [](uint8_t b) { return b != guardByte; }))
      problems += std::string(" wrote past the end of ") + what + ";";
  }

  /// Uploads, runs the prep kernel and cuDNN forward then backward (as
  /// AttentionLauncher does), downloads.
  bool executeThd(const ThdCase &c, const Runners &runners, ThdRun &run,
                  std::string &failure) {
    const AttentionProblem &p = c.problem;
    int64_t qWidth = p.heads * p.headDim, kvWidth = p.kvHeads * p.headDim;
    std::vector<int32_t> cuQ = c.hostileCu.empty() ? run.cuQ : c.hostileCu;
    size_t cuBytes = cuQ.size() * 4,
           statsBytes = size_t(p.batch * p.heads * p.seqQ) * 4;
    DeviceBuffer cuQBuffer = guarded(cuBytes, "cu_seqlens_q"),
                 cuKvBuffer = guarded(cuBytes, "cu_seqlens_kv"),
                 gradO = guarded(run.gradO.bytes(), "dO"),
                 o = guarded(run.o.bytes(), "o"),
                 stats = guarded(statsBytes, "stats");
    gpu.upload(cuQBuffer, cuQ.data(), cuBytes);
    if (!c.lenKv.empty())
      gpu.upload(cuKvBuffer, run.cuKv.data(), cuBytes);
    gpu.upload(gradO, run.gradO.bits.data(), run.gradO.bytes());
    // Outputs start as NaN, so that anything neither cuDNN nor the prep
    // kernel writes shows.
    fillBytes(o, run.o.bytes(), 0xff);
    fillBytes(stats, statsBytes, 0xff);

    AttentionPointers pointers;
    pointers.o = o.get();
    pointers.stats = stats.get();
    pointers.gradO = gradO.get();
    DeviceBuffer q, k, v, dq, dk, dv, qkv, dqkv;
    // Fused: q, k and v are column ranges of one [t, (h + 2 kv_h) d + 8]
    // buffer, the last 8 columns a guard; so are dq, dk and dv.
    int64_t stride = qWidth + 2 * kvWidth + guardColumns;
    std::vector<uint16_t> packed;
    if (c.fused) {
      packed =
          fusedQkvRows(run.q, run.k, run.v, p.tokensQ, qWidth, kvWidth, stride);
      qkv = guarded(packed.size() * 2, "fused qkv");
      dqkv = guarded(packed.size() * 2, "fused dqkv");
      gpu.upload(qkv, packed.data(), packed.size() * 2);
      // dq, dk and dv start as NaN; the guard columns keep their pattern.
      std::vector<uint16_t> unwritten = packed;
      for (int64_t t = 0; t < p.tokensQ; ++t)
        std::fill_n(unwritten.begin() + t * stride, qWidth + 2 * kvWidth,
                    uint16_t(0xffff));
      gpu.upload(dqkv, unwritten.data(), unwritten.size() * 2);
      pointAtFusedQkv(pointers, qkv.get(), dqkv.get(), qWidth, kvWidth);
    } else {
      q = guarded(run.q.bytes(), "q");
      k = guarded(run.k.bytes(), "k");
      v = guarded(run.v.bytes(), "v");
      dq = guarded(run.dq.bytes(), "dq");
      dk = guarded(run.dk.bytes(), "dk");
      dv = guarded(run.dv.bytes(), "dv");
      gpu.upload(q, run.q.bits.data(), run.q.bytes());
      gpu.upload(k, run.k.bits.data(), run.k.bytes());
      gpu.upload(v, run.v.bits.data(), run.v.bytes());
      fillBytes(dq, run.dq.bytes(), 0xff);
      fillBytes(dk, run.dk.bytes(), 0xff);
      fillBytes(dv, run.dv.bytes(), 0xff);
      pointers.q = q.get();
      pointers.k = k.get();
      pointers.v = v.get();
      pointers.gradQ = dq.get();
      pointers.gradK = dk.get();
      pointers.gradV = dv.get();
    }

    AttentionProblem backward = p;
    backward.backward = true;
    size_t prepBytes = std::max(thdPrepBytes(p), thdPrepBytes(backward));
    DeviceBuffer scratch = guarded(prepBytes, "prep scratch");
    size_t workspaceBytes = std::max(runners.forward->workspaceBytes(),
                                     runners.backward->workspaceBytes());
    DeviceBuffer workspace = gpu.allocate(workspaceBytes, "workspace");
    ThdPrepBuffers buffers;
    buffers.cuSeqlensQ = cuQBuffer.get();
    buffers.cuSeqlensKv = c.lenKv.empty() ? 0 : cuKvBuffer.get();
    buffers.scratch = scratch.get();
    for (auto [problem, runner] :
         {std::pair{&p, runners.forward.get()},
          std::pair{static_cast<const AttentionProblem *>(&backward),
                    runners.backward.get()}})
      if (llvm::Error error = runPrepared(*problem, buffers, pointers, *runner,
                                          workspace.get())) {
        failure = llvm::toString(std::move(error));
        return false;
      }

    gpu.download(run.o.bits.data(), o, run.o.bytes());
    run.stats.resize(statsBytes / 4);
    gpu.download(run.stats.data(), stats, statsBytes);
    if (c.fused) {
      gpu.download(packed.data(), dqkv, packed.size() * 2);
      bool guardColumnsWritten = false;
      for (int64_t t = 0; t < p.tokensQ; ++t) {
        const uint16_t *row = packed.data() + t * stride;
        std::copy_n(row, qWidth, run.dq.bits.begin() + t * qWidth);
        std::copy_n(row + qWidth, kvWidth, run.dk.bits.begin() + t * kvWidth);
        std::copy_n(row + qWidth + kvWidth, kvWidth,
                    run.dv.bits.begin() + t * kvWidth);
        guardColumnsWritten |=
            std::any_of(row + qWidth + 2 * kvWidth, row + stride,
                        [](uint16_t x) { return x != 0x3c3c; });
      }
      if (guardColumnsWritten)
        run.problems += " wrote into the guard columns of the fused dqkv;";
      checkGuard(dqkv, packed.size() * 2, "the fused dqkv", run.problems);
      checkGuard(qkv, packed.size() * 2, "the fused qkv", run.problems);
    } else {
      for (auto [host, device, name] :
           {std::tuple{&run.dq, &dq, "dq"}, std::tuple{&run.dk, &dk, "dk"},
            std::tuple{&run.dv, &dv, "dv"}}) {
        gpu.download(host->bits.data(), *device, host->bytes());
        checkGuard(*device, host->bytes(), name, run.problems);
      }
    }
    for (HostTensor *t : {&run.o, &run.dq, &run.dk, &run.dv})
      t->decodeAll();
    checkGuard(o, run.o.bytes(), "o", run.problems);
    checkGuard(stats, statsBytes, "stats", run.problems);
    checkGuard(scratch, prepBytes, "the prep scratch", run.problems);
    checkGuard(cuQBuffer, cuBytes, "cu_seqlens_q", run.problems);
    return true;
  }

  /// o, stats, dq (every query of every sequence) and dk, dv (every key)
  /// against the reference; every row outside the sequences of o, dq, dk
  /// and dv must be exactly 0.
  Outcome compareThd(const ThdCase &c, const ThdRun &run,
                     const Reference &ref) {
    const AttentionProblem &p = c.problem;
    int64_t H = p.heads, Hk = p.kvHeads, D = p.headDim, perGroup = H / Hk;
    Error2 o, stats, dq, dk, dv;
    auto covered = [&](int64_t b, int64_t g) {
      return c.groups.empty() ||
             std::find(c.groups.begin(), c.groups.end(),
                       std::make_pair(b, g)) != c.groups.end();
    };
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t g = 0; g < Hk; ++g) {
        if (!covered(b, g))
          continue;
        for (int64_t h = g * perGroup; h < (g + 1) * perGroup; ++h)
          for (int64_t i = 0; i < run.lenQ[b]; ++i) {
            size_t row = size_t((b * H + h) * p.seqQ + i);
            stats.add(run.stats[row], ref.stats[row]);
            for (int64_t d = 0; d < D; ++d) {
              size_t at = canonical(p, b, h, i, H, p.seqQ, d);
              o.add(run.o.at(0, h, run.cuQ[b] + i, d), ref.o[at]);
              dq.add(run.dq.at(0, h, run.cuQ[b] + i, d), ref.dq[at]);
            }
          }
        for (int64_t j = 0; j < run.lenKv[b]; ++j)
          for (int64_t d = 0; d < D; ++d) {
            size_t at = canonical(p, b, g, j, Hk, p.seqKv, d);
            dk.add(run.dk.at(0, g, run.cuKv[b] + j, d), ref.dk[at]);
            dv.add(run.dv.at(0, g, run.cuKv[b] + j, d), ref.dv[at]);
          }
      }
    Outcome outcome;
    outcome.errors = {
        {"o", o}, {"stats", stats}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
    outcome.problems = run.problems;
    // The tails: rows from cu_seqlens[b] on.
    auto tailZero = [&](const HostTensor &t, int64_t first, const char *name) {
      for (size_t i = size_t(first * t.heads * t.dim); i < t.bits.size(); ++i)
        if (t.bits[i] != 0) {
          outcome.problems +=
              std::string(" the tail rows of ") + name + " are not 0;";
          return;
        }
    };
    tailZero(run.o, run.cuQ.back(), "o");
    tailZero(run.dq, run.cuQ.back(), "dq");
    tailZero(run.dk, run.cuKv.back(), "dk");
    tailZero(run.dv, run.cuKv.back(), "dv");
    return outcome;
  }
  //===--------------------------------------------------------------------===//
  // kv cache
  //===--------------------------------------------------------------------===//

  /// One kv-cache run's host side: cu_seqlens, the new tokens, the caches
  /// before the call and after it (expected and returned), and o.
  struct KvCacheRun {
    std::vector<int32_t> fresh, total, cuQ, cuKv;
    HostTensor q, k, v, o;
    HostTensor kCache, vCache;        // before the call
    HostTensor kExpected, vExpected;  // the new rows appended
    std::vector<uint16_t> kGot, vGot; // as returned
    std::string problems; // guard bytes written, tails not zero, cache rows

    KvCacheRun(const KvCacheCase &c, const AttentionProblem &p)
        : fresh(c.fresh), total(c.total), cuQ(ThdRun::prefixSums(fresh)),
          cuKv(ThdRun::prefixSums(total)), q(tokens(p, p.heads, p.tokensQ)),
          k(tokens(p, p.kvHeads, p.tokensQ)),
          v(tokens(p, p.kvHeads, p.tokensQ)), o(tokens(p, p.heads, p.tokensQ)),
          kCache(cacheOf(p)), vCache(cacheOf(p)), kExpected(cacheOf(p)),
          vExpected(cacheOf(p)) {}

    /// A cache [b, s_kv, kv_heads, d].
    static HostTensor cacheOf(const AttentionProblem &p) {
      return HostTensor(paddedOf(p), p.kvHeads, p.seqKv);
    }

    /// Random new tokens and old cache rows; the expected caches are the
    /// old ones with new token j of sequence i at row L_i - n_i + j.
    void randomize(std::mt19937_64 &rng) {
      for (HostTensor *t : {&q, &k, &v, &kCache, &vCache})
        t->randomize(rng);
      kExpected = kCache;
      vExpected = vCache;
      for (size_t i = 0; i < fresh.size(); ++i)
        for (int64_t j = 0; j < fresh[i]; ++j) {
          int64_t row = total[i] - fresh[i] + j;
          for (int64_t h = 0; h < kCache.heads; ++h)
            for (int64_t d = 0; d < kCache.dim; ++d) {
              size_t to = kExpected.index(int64_t(i), h, row, d),
                     from = k.index(0, h, cuQ[i] + j, d);
              kExpected.bits[to] = k.bits[from];
              kExpected.values[to] = k.values[from];
              vExpected.bits[to] = v.bits[from];
              vExpected.values[to] = v.values[from];
            }
        }
    }
  };

  /// A paged case's pools and table: logical row r of sequence i goes to
  /// row r % page_size of page table[i][r / page_size], the pages shuffled;
  /// the spare pages (no sequence's) hold random bits.
  struct PagedCaches {
    const AttentionProblem &p;
    int64_t rowElements = 0, width = 0;
    std::vector<int32_t> table;
    std::vector<uint16_t> kPool, vPool, spareK, spareV;
    std::vector<bool> used;

    PagedCaches(const KvCacheCase &c, const KvCacheRun &run)
        : p(c.problem), rowElements(p.kvHeads * p.headDim),
          width(p.pagesPerSequence()) {
      if (!p.paged())
        return;
      std::vector<int32_t> ids(size_t(p.pages));
      std::iota(ids.begin(), ids.end(), 0);
      std::mt19937_64 shuffle(c.pageSeed);
      std::shuffle(ids.begin(), ids.end(), shuffle);
      table.assign(ids.begin(), ids.begin() + p.batch * width);
      used.assign(size_t(p.pages), false);
      for (int32_t id : table)
        used[size_t(id)] = true;
      size_t poolSize = size_t(p.pages * p.pageSize * rowElements);
      kPool.resize(poolSize);
      vPool.resize(poolSize);
      for (auto *pool : {&kPool, &vPool})
        for (uint16_t &bits : *pool)
          bits = uint16_t(shuffle() & 0x3fff); // finite, |x| < 2
      spareK = kPool;
      spareV = vPool;
      scatter(run.kCache.bits, kPool);
      scatter(run.vCache.bits, vPool);
      if (c.hostilePages)
        for (size_t e = 0; e < table.size(); e += 3)
          table[e] = e % 2 ? int32_t(p.pages + e) : -int32_t(e + 1);
    }

    /// Where logical row r of sequence i starts in the pool.
    size_t poolRow(int64_t i, int64_t r) const {
      int64_t page = table[size_t(i * width + r / p.pageSize)];
      return size_t((page * p.pageSize + r % p.pageSize) * rowElements);
    }
    void scatter(const std::vector<uint16_t> &logical,
                 std::vector<uint16_t> &pool) const {
      for (int64_t i = 0; i < p.batch; ++i)
        for (int64_t r = 0; r < p.seqKv; ++r)
          std::copy_n(logical.begin() + (i * p.seqKv + r) * rowElements,
                      rowElements, pool.begin() + poolRow(i, r));
    }
    std::vector<uint16_t> gather(const std::vector<uint16_t> &pool) const {
      std::vector<uint16_t> logical(size_t(p.batch * p.seqKv * rowElements));
      for (int64_t i = 0; i < p.batch; ++i)
        for (int64_t r = 0; r < p.seqKv; ++r)
          std::copy_n(pool.begin() + poolRow(i, r), rowElements,
                      logical.begin() + (i * p.seqKv + r) * rowElements);
      return logical;
    }
    /// " spare pages written;" when a page no sequence owns changed.
    std::string untouchedSpares(const std::vector<uint16_t> &k,
                                const std::vector<uint16_t> &v) const {
      size_t pageElements = size_t(p.pageSize * rowElements);
      for (size_t page = 0; page < used.size(); ++page) {
        if (used[page])
          continue;
        size_t at = page * pageElements;
        if (!std::equal(k.begin() + at, k.begin() + at + pageElements,
                        spareK.begin() + at) ||
            !std::equal(v.begin() + at, v.begin() + at + pageElements,
                        spareV.begin() + at))
          return " spare pages written;";
      }
      return "";
    }
  };

  /// Uploads, runs the prep kernel and cuDNN (as AttentionLauncher does),
  /// downloads o and both caches; checks every guard.
  bool executeKvCache(const KvCacheCase &c, const KvCacheEngine &engine,
                      KvCacheRun &run, std::string &failure) {
    const AttentionProblem &p = c.problem;
    int64_t qWidth = p.heads * p.headDim, kvWidth = p.kvHeads * p.headDim;
    std::vector<int32_t> cuQ = c.hostileCuQ.empty() ? run.cuQ : c.hostileCuQ;
    std::vector<int32_t> cuKv =
        c.hostileCuKv.empty() ? run.cuKv : c.hostileCuKv;
    PagedCaches pages(c, run);
    const std::vector<uint16_t> &kStart =
        p.paged() ? pages.kPool : run.kCache.bits;
    const std::vector<uint16_t> &vStart =
        p.paged() ? pages.vPool : run.vCache.bits;
    size_t cuBytes = cuQ.size() * 4, cacheBytes = kStart.size() * 2;
    DeviceBuffer cuQBuffer = guarded(cuBytes, "cu_seqlens_q"),
                 cuKvBuffer = guarded(cuBytes, "cu_seqlens_kv"),
                 o = guarded(run.o.bytes(), "o"),
                 kCache = guarded(cacheBytes, "k_cache"),
                 vCache = guarded(cacheBytes, "v_cache");
    gpu.upload(cuQBuffer, cuQ.data(), cuBytes);
    gpu.upload(cuKvBuffer, cuKv.data(), cuBytes);
    gpu.upload(kCache, kStart.data(), cacheBytes);
    gpu.upload(vCache, vStart.data(), cacheBytes);
    size_t tableBytes = pages.table.size() * 4;
    DeviceBuffer table;
    if (p.paged()) {
      table = guarded(tableBytes, "page_table");
      gpu.upload(table, pages.table.data(), tableBytes);
    }
    // o starts as NaN, so that rows neither cuDNN nor the prep kernel
    // writes show.
    fillBytes(o, run.o.bytes(), 0xff);

    AttentionPointers pointers;
    pointers.o = o.get();
    pointers.k = kCache.get();
    pointers.v = vCache.get();
    ThdPrepBuffers buffers;
    DeviceBuffer q, k, v, qkv;
    // Fused: q and the new k and v are column ranges of one [t, (h + 2
    // kv_h) d + 8] buffer, the last 8 columns a guard.
    int64_t stride = qWidth + 2 * kvWidth + guardColumns;
    std::vector<uint16_t> packed;
    if (c.fused) {
      packed =
          fusedQkvRows(run.q, run.k, run.v, p.tokensQ, qWidth, kvWidth, stride);
      qkv = guarded(packed.size() * 2, "fused qkv");
      gpu.upload(qkv, packed.data(), packed.size() * 2);
      pointers.q = qkv.get();
      buffers.newK = qkv.get() + qWidth * 2;
      buffers.newV = qkv.get() + (qWidth + kvWidth) * 2;
    } else {
      q = guarded(run.q.bytes(), "q");
      k = guarded(run.k.bytes(), "k");
      v = guarded(run.v.bytes(), "v");
      gpu.upload(q, run.q.bits.data(), run.q.bytes());
      gpu.upload(k, run.k.bits.data(), run.k.bytes());
      gpu.upload(v, run.v.bits.data(), run.v.bytes());
      pointers.q = q.get();
      buffers.newK = k.get();
      buffers.newV = v.get();
    }

    size_t prepBytes = thdPrepBytes(p);
    DeviceBuffer scratch = guarded(prepBytes, "prep scratch");
    // The decode kernels' partials must stay within their bytes too.
    size_t workspaceBytes = engine.runner
                                ? engine.runner->workspaceBytes()
                                : decodePartialBytes(p, engine.splits);
    DeviceBuffer workspace = guarded(workspaceBytes, "workspace");
    buffers.cuSeqlensQ = cuQBuffer.get();
    buffers.cuSeqlensKv = cuKvBuffer.get();
    buffers.scratch = scratch.get();
    buffers.pageTable = p.paged() ? table.get() : 0;
    // What AttentionLauncher::run enqueues for the step.
    const CudaDriver &driver = *gpu.driver;
    llvm::Error error =
        enqueueKvCacheAttention(p, prepKernel(), engine, buffers, pointers,
                                workspace.get(), nullptr, driver);
    if (!error)
      error = driver.check(driver.cuStreamSynchronize(nullptr),
                           "cuStreamSynchronize after attention");
    if (error) {
      failure = llvm::toString(std::move(error));
      return false;
    }

    gpu.download(run.o.bits.data(), o, run.o.bytes());
    run.o.decodeAll();
    run.kGot.resize(kStart.size());
    run.vGot.resize(vStart.size());
    gpu.download(run.kGot.data(), kCache, cacheBytes);
    gpu.download(run.vGot.data(), vCache, cacheBytes);
    if (p.paged() && !c.hostilePages) {
      // Back to the logical layout, which compareKvCache checks; the pages
      // no sequence uses must be as they were.
      run.problems += pages.untouchedSpares(run.kGot, run.vGot);
      run.kGot = pages.gather(run.kGot);
      run.vGot = pages.gather(run.vGot);
    }
    if (p.paged())
      checkGuard(table, tableBytes, "page_table", run.problems);
    if (c.fused) {
      std::vector<uint16_t> after(packed.size());
      gpu.download(after.data(), qkv, after.size() * 2);
      if (after != packed)
        run.problems += " wrote into the fused qkv;";
      checkGuard(qkv, packed.size() * 2, "the fused qkv", run.problems);
    } else {
      checkGuard(q, run.q.bytes(), "q", run.problems);
      checkGuard(k, run.k.bytes(), "k", run.problems);
      checkGuard(v, run.v.bytes(), "v", run.problems);
    }
    checkGuard(o, run.o.bytes(), "o", run.problems);
    checkGuard(kCache, cacheBytes, "k_cache", run.problems);
    checkGuard(vCache, cacheBytes, "v_cache", run.problems);
    checkGuard(scratch, prepBytes, "the prep scratch", run.problems);
    if (!engine.runner)
      checkGuard(workspace, workspaceBytes, "the decode partials",
                 run.problems);
    checkGuard(cuQBuffer, cuBytes, "cu_seqlens_q", run.problems);
    checkGuard(cuKvBuffer, cuBytes, "cu_seqlens_kv", run.problems);
    return true;
  }

  /// The caches bit for bit (new rows where the contract puts them, every
  /// other row as it was); o of every new token against the float64
  /// reference over the expected cache (the sequence's first L_i rows,
  /// bottom-right causal or not); o's tail rows exactly 0.
  Outcome compareKvCache(const KvCacheCase &c, const KvCacheRun &run) {
    const AttentionProblem &p = c.problem;
    int64_t H = p.heads, G = p.kvHeads, D = p.headDim, perGroup = H / G;
    Outcome outcome;
    outcome.problems = run.problems;
    for (auto [got, want, name] :
         {std::tuple{&run.kGot, &run.kExpected, "k_cache"},
          std::tuple{&run.vGot, &run.vExpected, "v_cache"}}) {
      size_t wrong = 0, first = 0;
      for (size_t i = 0; i < got->size(); ++i)
        if ((*got)[i] != want->bits[i] && wrong++ == 0)
          first = i;
      if (wrong) {
        int64_t row = int64_t(first) / (G * D);
        outcome.problems += llvm::formatv(
            " {0}: {1} elements differ from the expected append, the "
            "first in sequence {2} row {3};",
            name, wrong, row / p.seqKv, row % p.seqKv);
      }
    }

    // The reference, one (sequence, head) per task.
    size_t batch = run.fresh.size();
    std::vector<double> want(run.o.values.size(), 0.0);
    parallelFor(batch * size_t(H), [&](size_t task) {
      int64_t i = int64_t(task) / H, h = int64_t(task) % H, g = h / perGroup;
      int64_t n = run.fresh[i], L = run.total[i];
      std::vector<double> score(size_t(std::max<int64_t>(L, 1)));
      for (int64_t j = 0; j < n; ++j) {
        int64_t keys = p.bottomRight() ? L - n + j + 1 : L;
        double max = -INFINITY;
        for (int64_t r = 0; r < keys; ++r) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += run.q.at(0, h, run.cuQ[i] + j, d) *
                   run.kExpected.at(i, g, r, d);
          score[r] = dot * p.softmaxScale;
          max = std::max(max, score[r]);
        }
        double sum = 0;
        for (int64_t r = 0; r < keys; ++r)
          sum += (score[r] = std::exp(score[r] - max));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t r = 0; r < keys; ++r)
            acc += score[r] * run.vExpected.at(i, g, r, d);
          want[run.o.index(0, h, run.cuQ[i] + j, d)] = acc / sum;
        }
      }
    });
    Error2 o;
    for (size_t i = 0; i < batch; ++i)
      for (int64_t j = 0; j < run.fresh[i]; ++j)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            size_t at = run.o.index(0, h, run.cuQ[i] + j, d);
            o.add(run.o.values[at], want[at]);
          }
    outcome.errors = {{"o", o}};
    for (size_t i = size_t(run.cuQ.back() * H * D); i < run.o.bits.size(); ++i)
      if (run.o.bits[i] != 0) {
        outcome.problems += " the tail rows of o are not 0;";
        break;
      }
    return outcome;
  }
};

//===----------------------------------------------------------------------===//
// The problems
//===----------------------------------------------------------------------===//

/// Batch 2, 8 query heads over `kvHeads`, softmax scale 1/sqrt(d).
AttentionProblem smallProblem(int64_t kvHeads, int64_t seqQ, int64_t seqKv,
                              int64_t dim, ElementType element,
                              AttentionLayout layout, AttentionMask mask) {
  AttentionProblem p;
  p.batch = 2;
  p.heads = 8;
  p.kvHeads = kvHeads;
  p.seqQ = seqQ;
  p.seqKv = seqKv;
  p.headDim = dim;
  p.element = element;
  p.layout = layout;
  p.mask = mask;
  p.softmaxScale = 1 / std::sqrt(double(dim));
  return p;
}

/// Head groupings the cases sweep: 8 query heads on 8, 2 or 1 kv heads.
struct Grouping {
  const char *name;
  int64_t kvHeads;
};
const Grouping groupings[] = {{"mha", 8}, {"gqa", 2}, {"mqa", 1}};

std::vector<Case> smallCases() {
  std::vector<Case> cases;
  const AttentionMask masks[] = {AttentionMask::None, AttentionMask::Causal,
                                 AttentionMask::Padding,
                                 AttentionMask::PaddingCausal};
  for (int64_t seq : {128, 256})
    for (ElementType element : {ElementType::BF16, ElementType::F16})
      for (int64_t dim : {64, 128})
        for (AttentionMask mask : masks)
          for (const Grouping &grouping : groupings)
            for (AttentionLayout layout :
                 {AttentionLayout::Sbhd, AttentionLayout::Bshd}) {
              // s = 256: the d 128 MHA/GQA sbhd problems only.
              if (seq == 256 && (dim != 128 || grouping.kvHeads == 1 ||
                                 layout != AttentionLayout::Sbhd))
                continue;
              AttentionProblem p = smallProblem(grouping.kvHeads, seq, seq, dim,
                                                element, layout, mask);
              char name[128];
              std::snprintf(
                  name, sizeof(name), "%s d%lld %s %s %s s%lld",
                  elementTypeName(element).str().c_str(), (long long)dim,
                  attentionMaskName(mask).str().c_str(), grouping.name,
                  attentionLayoutName(layout).str().c_str(), (long long)seq);
              bool mustPass = grouping.kvHeads != 1 &&
                              layout == AttentionLayout::Sbhd &&
                              (mask == AttentionMask::None ||
                               mask == AttentionMask::Causal);
              cases.push_back({name, p, mustPass, {}, false});
            }
  // Sliding windows (window_size): causal with a left bound (Mistral's),
  // both bounds, and one bound alone.
  struct Window {
    AttentionMask mask;
    int64_t left, right;
    bool mustPass;
  };
  // A right bound other than the causal diagonal is refused (validate()),
  // so it is not among them.
  const Window windows[] = {{AttentionMask::Causal, 32, -1, true},
                            {AttentionMask::Causal, 0, -1, true},
                            {AttentionMask::PaddingCausal, 48, -1, true},
                            {AttentionMask::None, 32, -1, true},
                            {AttentionMask::Padding, 40, -1, true}};
  for (const Window &window : windows)
    for (ElementType element : {ElementType::BF16, ElementType::F16})
      for (const Grouping &grouping : {groupings[0], groupings[1]})
        for (AttentionLayout layout :
             {AttentionLayout::Sbhd, AttentionLayout::Bshd}) {
          AttentionProblem p = smallProblem(grouping.kvHeads, 256, 256, 128,
                                            element, layout, window.mask);
          p.windowLeft = window.left;
          p.windowRight = window.right;
          char name[128];
          std::snprintf(
              name, sizeof(name), "window(%lld,%lld) %s d128 %s %s %s s256",
              (long long)window.left, (long long)window.right,
              elementTypeName(element).str().c_str(),
              attentionMaskName(window.mask).str().c_str(), grouping.name,
              attentionLayoutName(layout).str().c_str());
          cases.push_back({name, p, window.mustPass, {}, false});
        }
  // Cross-attention: queries and keys of other lengths (top-left causal;
  // the padding masks pad the keys).
  for (auto [seqQ, seqKv] : {std::pair<int64_t, int64_t>{128, 256}, {256, 64}})
    for (AttentionMask mask : masks)
      for (const Grouping &grouping : {groupings[0], groupings[1]})
        for (AttentionLayout layout :
             {AttentionLayout::Sbhd, AttentionLayout::Bshd}) {
          AttentionProblem p = smallProblem(grouping.kvHeads, seqQ, seqKv, 128,
                                            ElementType::BF16, layout, mask);
          char name[128];
          std::snprintf(name, sizeof(name),
                        "cross s_q%lld s_kv%lld bf16 d128 %s %s %s",
                        (long long)seqQ, (long long)seqKv,
                        attentionMaskName(mask).str().c_str(), grouping.name,
                        attentionLayoutName(layout).str().c_str());
          cases.push_back({name, p, true, {}, false});
        }
  // q, k and v read in place from a fused QKV projection's output, and
  // their gradients written into one, as tejit's plans run attention.
  for (const Grouping &grouping : groupings)
    for (AttentionLayout layout :
         {AttentionLayout::Sbhd, AttentionLayout::Bshd})
      for (AttentionMask mask : {AttentionMask::None, AttentionMask::Causal}) {
        AttentionProblem p = smallProblem(grouping.kvHeads, 128, 128, 64,
                                          ElementType::BF16, layout, mask);
        int64_t width = (p.heads + 2 * p.kvHeads) * p.headDim;
        p.tokenStrides = {width, width, width, width, width, width};
        char name[128];
        std::snprintf(name, sizeof(name), "packed qkv bf16 d64 %s %s %s",
                      attentionMaskName(mask).str().c_str(), grouping.name,
                      attentionLayoutName(layout).str().c_str());
        cases.push_back({name, p, true, {}, false});
      }
  return cases;
}

/// The dropout checks' problem: s_kv = d (the keep mask is read with v =
/// identity), no mask.
Case dropoutCase(ElementType element, double dropout) {
  AttentionProblem p;
  p.batch = 2;
  p.heads = 8;
  p.kvHeads = 8;
  p.headDim = 128;
  p.seqQ = 128;
  p.seqKv = p.headDim; // v = identity needs s_kv = d
  p.element = element;
  p.layout = AttentionLayout::Sbhd;
  p.mask = AttentionMask::None;
  p.softmaxScale = 1 / std::sqrt(double(p.headDim));
  p.dropout = dropout;
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "dropout p=%g %s d128 s128", dropout,
                elementTypeName(element).str().c_str());
  return {buffer, p, true, {}, false};
}

//===----------------------------------------------------------------------===//
// Bias and ALiBi (docs/attention-bias.md): `--filter bias`, `--filter alibi`
//===----------------------------------------------------------------------===//

/// A post-scale bias of TE's shape `shape` ("1hss", "b1ss", "bhss" or
/// "11ss") on `p`, with its gradient when the shape takes one (1hss).
void setBias(AttentionProblem &p, const std::string &shape) {
  p.bias = AttentionBias::PostScale;
  p.biasBatch = shape[0] == 'b' ? p.batch : 1;
  p.biasHeads = shape[1] == 'h' ? p.heads : 1;
  p.biasGrad = p.biasBatch == 1 && p.biasHeads == p.heads;
}

void setAlibi(AttentionProblem &p, AlibiSlopes slopes) {
  p.bias = AttentionBias::Alibi;
  p.alibiSlopes = slopes;
}

/// "bias 1hss grad" or "alibi vanilla": how case names start.
std::string biasName(const AttentionProblem &p) {
  if (p.bias == AttentionBias::PostScale)
    return "bias " + p.biasShapeName() + (p.biasGrad ? " grad" : "");
  const char *slopes[] = {"vanilla", "heads", "batch_heads"};
  return std::string("alibi ") + slopes[int(p.alibiSlopes)];
}

/// "bias 1hss grad bf16 d64 causal gqa sbhd s_q128 s_kv256 h8".
std::string biasCaseName(const AttentionProblem &p, const char *grouping,
                         const std::string &extra = "") {
  char name[160];
  std::snprintf(name, sizeof(name),
                "%s bf16 d%lld %s %s %s s_q%lld s_kv%lld "
                "h%lld%s",
                biasName(p).c_str(), (long long)p.headDim,
                attentionMaskName(p.mask).str().c_str(), grouping,
                attentionLayoutName(p.layout).str().c_str(), (long long)p.seqQ,
                (long long)p.seqKv, (long long)p.heads, extra.c_str());
  std::string text = name;
  if (p.element == ElementType::F16)
    text.replace(text.find(" bf16 "), 6, " f16 ");
  return text;
}

const AttentionMask allMasks[] = {AttentionMask::None, AttentionMask::Causal,
                                  AttentionMask::Padding,
                                  AttentionMask::PaddingCausal};

std::vector<Case> biasCases() {
  std::vector<Case> cases;
  auto add = [&](AttentionProblem p, const char *grouping,
                 const std::string &extra = "") {
    cases.push_back({biasCaseName(p, grouping, extra), p, true, {}, false});
  };
  // Every shape and mask, both types: d 64, MHA, sbhd (dbias for 1hss).
  for (const char *shape : {"1hss", "b1ss", "bhss", "11ss"})
    for (AttentionMask mask : allMasks)
      for (ElementType element : {ElementType::BF16, ElementType::F16}) {
        AttentionProblem p =
            smallProblem(8, 128, 128, 64, element, AttentionLayout::Sbhd, mask);
        setBias(p, shape);
        add(p, "mha");
      }
  // GQA and MQA, bshd, d 128.
  for (const char *shape : {"1hss", "bhss"})
    for (AttentionMask mask : {AttentionMask::None, AttentionMask::Causal})
      for (const Grouping &grouping : {groupings[1], groupings[2]}) {
        AttentionProblem p =
            smallProblem(grouping.kvHeads, 128, 128, 128, ElementType::BF16,
                         AttentionLayout::Bshd, mask);
        setBias(p, shape);
        add(p, grouping.name);
      }
  // Cross-attention (padding masks pad the keys), with dbias.
  for (auto [seqQ, seqKv] : {std::pair<int64_t, int64_t>{128, 256}, {256, 64}})
    for (AttentionMask mask : allMasks) {
      AttentionProblem p = smallProblem(2, seqQ, seqKv, 128, ElementType::BF16,
                                        AttentionLayout::Bshd, mask);
      setBias(p, "1hss");
      add(p, "gqa");
    }
  // s_kv off 128 (the backward's full-length padding pattern before 9.16),
  // f16 with dbias.
  for (AttentionMask mask : {AttentionMask::None, AttentionMask::Causal}) {
    AttentionProblem p = smallProblem(8, 192, 192, 128, ElementType::F16,
                                      AttentionLayout::Sbhd, mask);
    setBias(p, "1hss");
    add(p, "mha");
  }
  // Sliding windows, and q, k, v read from a fused QKV projection.
  AttentionProblem window =
      smallProblem(2, 256, 256, 128, ElementType::BF16, AttentionLayout::Sbhd,
                   AttentionMask::Causal);
  window.windowLeft = 32;
  setBias(window, "1hss");
  add(window, "gqa", " window(32,-1)");
  window.mask = AttentionMask::Padding;
  window.windowLeft = 40;
  setBias(window, "11ss");
  add(window, "gqa", " window(40,-1)");
  AttentionProblem packed =
      smallProblem(2, 128, 128, 64, ElementType::BF16, AttentionLayout::Sbhd,
                   AttentionMask::Causal);
  int64_t width = (packed.heads + 2 * packed.kvHeads) * packed.headDim;
  packed.tokenStrides = {width, width, width, width, width, width};
  setBias(packed, "1hss");
  add(packed, "gqa", " packed qkv");
  return cases;
}

std::vector<Case> alibiCases() {
  std::vector<Case> cases;
  auto add = [&](AttentionProblem p, const char *grouping,
                 const std::string &extra = "") {
    // Per-batch slopes are refused (validateFor: cuDNN's engines read them
    // wrong); the check reports them as unsupported.
    bool mustPass = p.alibiSlopes != AlibiSlopes::BatchHeads || p.batch == 1;
    cases.push_back({biasCaseName(p, grouping, extra), p, mustPass, {}, false});
  };
  // Every kind of slopes and mask, with s_q != s_kv both ways (the offset).
  for (AlibiSlopes slopes :
       {AlibiSlopes::None, AlibiSlopes::Heads, AlibiSlopes::BatchHeads})
    for (AttentionMask mask : allMasks)
      for (auto [seqQ, seqKv] :
           {std::pair<int64_t, int64_t>{128, 128}, {128, 256}, {256, 128}}) {
        AttentionProblem p = smallProblem(8, seqQ, seqKv, 64, ElementType::BF16,
                                          AttentionLayout::Sbhd, mask);
        setAlibi(p, slopes);
        add(p, "mha");
      }
  // f16, d 128, GQA, bshd; 12 heads (vanilla slopes past the power of two).
  for (AttentionMask mask : {AttentionMask::None, AttentionMask::Causal}) {
    AttentionProblem p = smallProblem(2, 256, 256, 128, ElementType::F16,
                                      AttentionLayout::Bshd, mask);
    setAlibi(p, AlibiSlopes::None);
    add(p, "gqa");
    AttentionProblem twelve = smallProblem(4, 128, 128, 64, ElementType::BF16,
                                           AttentionLayout::Sbhd, mask);
    twelve.heads = 12;
    setAlibi(twelve, AlibiSlopes::None);
    add(twelve, "gqa");
  }
  // Sliding windows.
  for (AttentionMask mask : {AttentionMask::Causal, AttentionMask::None}) {
    AttentionProblem p = smallProblem(8, 256, 256, 128, ElementType::BF16,
                                      AttentionLayout::Sbhd, mask);
    p.windowLeft = 32;
    setAlibi(p, mask == AttentionMask::Causal ? AlibiSlopes::None
                                              : AlibiSlopes::Heads);
    add(p, "mha", " window(32,-1)");
  }
  return cases;
}

/// The dropout checks: no bias, then a bias with dbias and ALiBi with the
/// caller's slopes (zeroed while the keep mask is read).
std::vector<Case> dropoutCases() {
  std::vector<Case> cases;
  for (ElementType element : {ElementType::BF16, ElementType::F16})
    for (double dropout : {0.1, 0.5})
      cases.push_back(dropoutCase(element, dropout));
  for (ElementType element : {ElementType::BF16, ElementType::F16}) {
    Case bias = dropoutCase(element, 0.1);
    setBias(bias.problem, "1hss");
    bias.name = biasName(bias.problem) + " " + bias.name;
    cases.push_back(bias);
    Case alibi = dropoutCase(element, 0.1);
    // The caller's slopes: the check zeroes them while it reads the keep
    // mask (vanilla slopes cannot be zeroed).
    setAlibi(alibi.problem, AlibiSlopes::Heads);
    alibi.name = biasName(alibi.problem) + " " + alibi.name;
    cases.push_back(alibi);
  }
  return cases;
}

Case realCase() {
  AttentionProblem p;
  p.batch = 2;
  p.heads = 32;
  p.kvHeads = 32;
  p.seqQ = p.seqKv = 2048;
  p.headDim = 128;
  p.element = ElementType::BF16;
  p.layout = AttentionLayout::Sbhd;
  p.mask = AttentionMask::Causal;
  p.softmaxScale = 1 / std::sqrt(128.0);
  return {"real bf16 d128 causal mha sbhd b2 h32 s2048",
          p,
          true,
          {{0, 0}, {1, 31}, {0, 17}, {1, 6}},
          true};
}

/// The real size with Mistral's sliding window (4096 keys at s = 2048 would
/// be no window; 512 is a quarter of the sequence).
Case realWindowCase() {
  Case c = realCase();
  c.problem.windowLeft = 511;
  c.name = "real bf16 d128 causal window(511,-1) mha sbhd b2 h32 s2048";
  return c;
}

/// Real sizes with a bias (b 2, h 16, s 2048, d 128, causal, bf16): a 1hss
/// bias with dbias, whose reference covers both batch entries of heads 0, 7
/// and 15, and vanilla ALiBi; timed.
std::vector<Case> realBiasCases() {
  AttentionProblem p = realCase().problem;
  p.heads = p.kvHeads = 16;
  AttentionProblem bias = p, alibi = p;
  setBias(bias, "1hss");
  setAlibi(alibi, AlibiSlopes::None);
  return {{biasName(bias) + " real bf16 d128 causal mha sbhd b2 h16 s2048",
           bias,
           true,
           {{0, 0}, {1, 0}, {0, 7}, {1, 7}, {0, 15}, {1, 15}},
           true},
          {biasName(alibi) + " real bf16 d128 causal mha sbhd b2 h16 s2048",
           alibi,
           true,
           {{0, 3}, {1, 12}},
           true}};
}

/// The longest of `lengths` rounded up to 64 (as callers bucket
/// max_seqlen), at least 64.
int64_t maxSeqlen(const std::vector<int32_t> &lengths) {
  int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  return std::max<int64_t>(64, (longest + 63) / 64 * 64);
}

ThdCase thdCase(const std::string &name, ElementType element, int64_t dim,
                int64_t kvHeads, AttentionMask mask, std::vector<int32_t> lenQ,
                int64_t tailQ, std::vector<int32_t> lenKv = {},
                int64_t tailKv = 0) {
  const std::vector<int32_t> &keys = lenKv.empty() ? lenQ : lenKv;
  AttentionProblem p = smallProblem(kvHeads, maxSeqlen(lenQ), maxSeqlen(keys),
                                    dim, element, AttentionLayout::Thd, mask);
  p.batch = int64_t(lenQ.size());
  p.tokensQ = std::accumulate(lenQ.begin(), lenQ.end(), int64_t(0)) + tailQ;
  p.tokensKv =
      lenKv.empty()
          ? p.tokensQ
          : std::accumulate(keys.begin(), keys.end(), int64_t(0)) + tailKv;
  ThdCase c;
  c.name = name;
  c.problem = p;
  c.lenQ = std::move(lenQ);
  c.lenKv = std::move(lenKv);
  // thd with GQA/MQA or a window needs cuDNN 9.6: older ones refuse it.
  c.mustPass = kvHeads == p.heads;
  return c;
}

std::vector<ThdCase> thdCases() {
  std::vector<ThdCase> cases;
  const Grouping &mha = groupings[0], &gqa = groupings[1], &mqa = groupings[2];
  // Sequences of different lengths (one of max_seqlen, one of a single
  // token) and 19 tokens of tail.
  const std::vector<int32_t> lengths = {37, 128, 90, 1, 64};
  for (ElementType element : {ElementType::BF16, ElementType::F16})
    for (int64_t dim : {64, 128})
      for (AttentionMask mask :
           {AttentionMask::Padding, AttentionMask::PaddingCausal})
        for (const Grouping &grouping : {mha, gqa}) {
          std::string name = "thd " + elementTypeName(element).str() + " d" +
                             std::to_string(dim) + " " +
                             attentionMaskName(mask).str() + " " +
                             grouping.name + " tail19";
          cases.push_back(
              thdCase(name, element, dim, grouping.kvHeads, mask, lengths, 19));
        }
  // Empty sequences: the first, one between, the last.
  for (AttentionMask mask :
       {AttentionMask::Padding, AttentionMask::PaddingCausal})
    cases.push_back(thdCase("thd bf16 d128 " + attentionMaskName(mask).str() +
                                " mha empty sequences tail3",
                            ElementType::BF16, 128, 8, mask,
                            {0, 37, 0, 128, 5, 0}, 3));
  // No tail: the sequences fill the buffer.
  cases.push_back(thdCase("thd bf16 d128 padding_causal mqa no tail",
                          ElementType::BF16, 128, 1,
                          AttentionMask::PaddingCausal, lengths, 0));
  // q, k and v read in place from a fused QKV projection's rows, dq, dk
  // and dv written into one.
  for (const Grouping &grouping : {mha, gqa, mqa}) {
    ThdCase c = thdCase(std::string("thd packed qkv bf16 d64 padding_causal ") +
                            grouping.name + " tail7",
                        ElementType::BF16, 64, grouping.kvHeads,
                        AttentionMask::PaddingCausal, {100, 28, 128, 64}, 7);
    int64_t width = (c.problem.heads + 2 * grouping.kvHeads) * 64 + 8;
    c.problem.tokenStrides = {width, width, width, width, width, width};
    c.fused = true;
    cases.push_back(c);
  }
  // Cross-attention: cu_seqlens_kv of their own, tails on both sides.
  for (AttentionMask mask :
       {AttentionMask::Padding, AttentionMask::PaddingCausal})
    cases.push_back(thdCase("thd cross bf16 d128 " +
                                attentionMaskName(mask).str() + " gqa tail5/11",
                            ElementType::BF16, 128, 2, mask, {50, 128, 3}, 5,
                            {200, 17, 256}, 11));
  // A sequence with keys and no queries: its dk and dv are 0.
  cases.push_back(thdCase("thd cross bf16 d128 padding mha no queries",
                          ElementType::BF16, 128, 8, AttentionMask::Padding,
                          {50, 0, 3}, 5, {200, 40, 256}, 0));
  // Sliding windows within each sequence.
  for (ElementType element : {ElementType::BF16, ElementType::F16})
    for (auto [mask, left] :
         {std::pair{AttentionMask::PaddingCausal, int64_t(31)},
          std::pair{AttentionMask::Padding, int64_t(40)}}) {
      ThdCase c = thdCase("thd window(" + std::to_string(left) + ",-1) " +
                              elementTypeName(element).str() + " d128 " +
                              attentionMaskName(mask).str() + " gqa tail19",
                          element, 128, 2, mask, lengths, 19);
      c.problem.windowLeft = left;
      c.mustPass = false;
      cases.push_back(c);
    }
  // Longer sequences; the reference covers four (sequence, kv head) pairs.
  {
    ThdCase c = thdCase("thd long bf16 d128 padding_causal gqa h16 tail33",
                        ElementType::BF16, 128, 4, AttentionMask::PaddingCausal,
                        {1000, 2048, 517, 1500}, 33);
    c.problem.heads = 16;
    c.groups = {{0, 0}, {1, 3}, {2, 1}, {3, 2}};
    cases.push_back(c);
  }
  // Bad cu_seqlens (past the tokens, decreasing, negative): clamped on the
  // device, so nothing is read or written outside the buffers.
  for (std::vector<int32_t> cu : {std::vector<int32_t>{0, 500, 100, 100000},
                                  std::vector<int32_t>{-50, 10, 400, 20}}) {
    ThdCase c = thdCase("thd hostile cu_seqlens [" + std::to_string(cu[0]) +
                            ", " + std::to_string(cu[1]) +
                            ", ...] bf16 d64 "
                            "padding_causal mha",
                        ElementType::BF16, 64, 8, AttentionMask::PaddingCausal,
                        {100, 100, 100}, 0);
    c.hostileCu = cu;
    cases.push_back(c);
  }
  return cases;
}

/// A kv-cache problem: caches of `cacheRows`, max_seqlen_q the most new
/// tokens of a sequence (at least 1), `tail` tokens after the sequences.
KvCacheCase kvCacheCase(const std::string &name, ElementType element,
                        int64_t dim, int64_t kvHeads, AttentionMask mask,
                        std::vector<int32_t> fresh, std::vector<int32_t> total,
                        int64_t cacheRows, int64_t tail) {
  int64_t most =
      std::max<int64_t>(1, *std::max_element(fresh.begin(), fresh.end()));
  AttentionProblem p = smallProblem(kvHeads, most, cacheRows, dim, element,
                                    AttentionLayout::Thd, mask);
  p.kvCache = true;
  p.batch = int64_t(fresh.size());
  p.tokensQ = p.tokensKv =
      std::accumulate(fresh.begin(), fresh.end(), int64_t(0)) + tail;
  KvCacheCase c;
  c.name = name;
  c.problem = p;
  c.fresh = std::move(fresh);
  c.total = std::move(total);
  return c;
}

std::vector<KvCacheCase> kvCacheCases() {
  std::vector<KvCacheCase> cases;
  // Caches of 256 rows. Prefill: every token new (n_i = L_i), one empty
  // sequence, one filling the cache. Decode: one new token each, caches
  // holding 1 to 256 tokens. Chunked: a few new tokens on top of cached
  // ones, one sequence all new, one with nothing new.
  struct Kind {
    const char *name;
    std::vector<int32_t> fresh, total;
    int64_t tail;
  };
  const Kind kinds[] = {
      {"prefill", {37, 256, 0, 1, 100}, {37, 256, 0, 1, 100}, 13},
      {"decode", {1, 1, 1, 1, 1, 1}, {1, 17, 256, 128, 200, 64}, 2},
      {"chunked", {16, 1, 40, 0, 7}, {100, 256, 40, 30, 250}, 5},
  };
  const AttentionMask masks[] = {AttentionMask::Padding,
                                 AttentionMask::PaddingCausalBottomRight};
  for (const Kind &kind : kinds)
    for (ElementType element : {ElementType::BF16, ElementType::F16})
      for (int64_t dim : {64, 128})
        for (AttentionMask mask : masks)
          for (const Grouping &grouping : groupings)
            cases.push_back(kvCacheCase(
                std::string("kv_cache ") + kind.name + " " +
                    elementTypeName(element).str() + " d" +
                    std::to_string(dim) + " " + attentionMaskName(mask).str() +
                    " " + grouping.name,
                element, dim, grouping.kvHeads, mask, kind.fresh, kind.total,
                256, kind.tail));
  // q and the new k and v read in place from a fused QKV projection's rows.
  for (const Kind &kind : kinds)
    for (AttentionMask mask : masks) {
      KvCacheCase c = kvCacheCase(std::string("kv_cache ") + kind.name +
                                      " packed qkv bf16 d64 " +
                                      attentionMaskName(mask).str() + " gqa",
                                  ElementType::BF16, 64, 2, mask, kind.fresh,
                                  kind.total, 256, kind.tail);
      int64_t width = (c.problem.heads + 2 * 2) * 64 + 8;
      c.problem.tokenStrides = {width, width, width, 0, 0, 0};
      c.fused = true;
      cases.push_back(c);
    }
  // Long caches: decoding 8 sequences against up to 2048 cached tokens, and
  // a chunk of 64 new tokens on top of 1984.
  cases.push_back(kvCacheCase(
      "kv_cache decode long bf16 d128 padding_causal_bottom_right gqa S2048",
      ElementType::BF16, 128, 2, AttentionMask::PaddingCausalBottomRight,
      {1, 1, 1, 1, 1, 1, 1, 1}, {2048, 1, 1000, 1500, 77, 2047, 512, 1024},
      2048, 8));
  cases.push_back(kvCacheCase(
      "kv_cache chunked long bf16 d128 padding_causal_bottom_right mha S2048",
      ElementType::BF16, 128, 8, AttentionMask::PaddingCausalBottomRight,
      {64, 64}, {2048, 64}, 2048, 0));
  // The decode kernels' own shapes (docs/kv-cache-plan.md, session 19):
  // long caches with lengths from 1 to S, up to 16 uneven new tokens (one
  // sequence with none), MQA with 32 query heads on one kv head.
  for (AttentionMask mask : masks) {
    std::string maskName = attentionMaskName(mask).str();
    cases.push_back(
        kvCacheCase("kv_cache decode S4096 bf16 d128 " + maskName + " gqa",
                    ElementType::BF16, 128, 2, mask, {1, 1, 1, 1, 1, 1, 1, 1},
                    {1, 4096, 63, 64, 65, 2000, 4095, 3000}, 4096, 3));
    for (ElementType element : {ElementType::BF16, ElementType::F16})
      for (int64_t dim : {64, 128})
        cases.push_back(kvCacheCase(
            "kv_cache uneven n<=16 S4096 " + elementTypeName(element).str() +
                " d" + std::to_string(dim) + " " + maskName + " gqa",
            element, dim, 2, mask, {16, 1, 7, 0, 16, 3, 9},
            {16, 4096, 1000, 50, 300, 3, 2500}, 4096, 5));
    KvCacheCase mqa = kvCacheCase(
        "kv_cache mqa32 n<=16 S4096 bf16 d128 " + maskName, ElementType::BF16,
        128, 1, mask, {1, 4, 2, 16, 1}, {4096, 100, 17, 2000, 1}, 4096, 2);
    mqa.problem.heads = 32;
    cases.push_back(mqa);
    KvCacheCase mqaDecode = kvCacheCase(
        "kv_cache mqa32 decode S4096 f16 d64 " + maskName, ElementType::F16, 64,
        1, mask, {1, 1, 1, 1}, {4096, 1, 777, 3333}, 4096, 1);
    mqaDecode.problem.heads = 32;
    cases.push_back(mqaDecode);
  }
  // One sequence filling a cache of 32768 rows, one of 1 token, one between
  // (one kv head keeps the host reference and caches small).
  cases.push_back(kvCacheCase(
      "kv_cache decode S32768 bf16 d128 padding_causal_bottom_right mqa",
      ElementType::BF16, 128, 1, AttentionMask::PaddingCausalBottomRight,
      {1, 1, 1}, {32768, 1, 20001}, 32768, 1));
  // Strided q and new k/v (fused QKV rows) with uneven new tokens.
  {
    KvCacheCase c = kvCacheCase(
        "kv_cache uneven n<=16 packed qkv S4096 bf16 d128 "
        "padding_causal_bottom_right gqa",
        ElementType::BF16, 128, 2, AttentionMask::PaddingCausalBottomRight,
        {3, 16, 0, 1}, {3000, 16, 10, 4096}, 4096, 4);
    int64_t width = (c.problem.heads + 2 * 2) * 128 + 8;
    c.problem.tokenStrides = {width, width, width, 0, 0, 0};
    c.fused = true;
    cases.push_back(c);
  }
  // Paged caches (docs/paged-kv-cache.md): the cases above with their
  // caches in shuffled pages, page sizes 8 (not whole 16-key tiles), 16, 64
  // and 256 (one page a sequence), and bad page ids kept in bounds.
  {
    std::vector<KvCacheCase> paged;
    uint64_t pageSeed = 1;
    auto page = [&](KvCacheCase c, int64_t pageSize) {
      c.name += " paged" + std::to_string(pageSize);
      c.problem.pageSize = pageSize;
      c.problem.pages = c.problem.batch * c.problem.seqKv / pageSize + 3;
      c.pageSeed = pageSeed++;
      return c;
    };
    for (const KvCacheCase &c : cases) {
      if (!c.hostileCuQ.empty())
        continue;
      bool small = c.problem.seqKv == 256;
      bool bf16d128 =
          c.problem.element == ElementType::BF16 && c.problem.headDim == 128;
      if (small && !c.fused && !bf16d128)
        continue; // the small grid once per kind, mask and grouping
      paged.push_back(page(c, small ? 16 : 64));
      if (small && c.name.find("chunked") != std::string::npos)
        paged.push_back(page(c, 256));
      // Pages of 8 rows: the tensor-core pass reads the table key by key.
      if (small && c.name.find("decode") != std::string::npos)
        paged.push_back(page(c, 8));
    }
    KvCacheCase hostile =
        page(kvCacheCase("kv_cache hostile page ids bf16 d128 "
                         "padding_causal_bottom_right gqa",
                         ElementType::BF16, 128, 2,
                         AttentionMask::PaddingCausalBottomRight, {16, 1, 3},
                         {100, 256, 40}, 256, 0),
             16);
    hostile.hostilePages = true;
    paged.push_back(hostile);
    cases.insert(cases.end(), paged.begin(), paged.end());
  }
  // Bad cu_seqlens (past the tokens, decreasing, negative, more tokens than
  // the cache holds or than max_seqlen_q): clamped on the device, so
  // nothing is read or written outside the buffers.
  for (auto [cuQ, cuKv] :
       {std::pair{std::vector<int32_t>{0, 500, 100, 100000},
                  std::vector<int32_t>{-50, 10, 4000, 20}},
        std::pair{std::vector<int32_t>{-7, 3, 2, 40},
                  std::vector<int32_t>{0, 300, 100, 2000000000}}}) {
    KvCacheCase c = kvCacheCase(
        "kv_cache hostile cu_seqlens [" + std::to_string(cuQ[0]) + ", " +
            std::to_string(cuQ[1]) + ", ...] [" + std::to_string(cuKv[0]) +
            ", " + std::to_string(cuKv[1]) +
            ", ...] bf16 d64 padding_causal_bottom_right mha",
        ElementType::BF16, 64, 8, AttentionMask::PaddingCausalBottomRight,
        {16, 16, 16}, {100, 256, 16}, 256, 0);
    c.hostileCuQ = cuQ;
    c.hostileCuKv = cuKv;
    cases.push_back(c);
  }
  return cases;
}

} // namespace

int main(int argc, char **argv) {
  std::optional<CheckOptions> options =
      parseCheckOptions(argc, argv, "--time-decode");
  if (!options)
    return 2;
  uint64_t seed = options->seed;
  const std::string &filter = options->filter;
  bool real = options->real, timeDecode = options->extra;

  int exitStatus = 0;
  std::optional<CudnnGpu> opened = openCudnnGpu(exitStatus);
  if (!opened)
    return exitStatus;
  printCheckBanner(*opened, seed);

  Gpu gpu{opened->driver};
  Checker checker(gpu, seed);
  checker.setSmCount(opened->device.multiprocessors);
  if (timeDecode) {
    // Only the timings: decode kernel against cuDNN.
    checker.timeFilter = filter;
    checker.timeDecode(4096, 512);
    checker.timeDecode(4096, 1024);
    checker.timeDecode(4096, 2048);
    checker.timeDecode(4096, 3072);
    checker.timeDecode(4096, 2048, /*uneven=*/true);
    checker.timeDecode(32768, 2048);
    checker.timeDecode(32768, 16384);
    // Short caches, and one sequence (a single user's decode).
    checker.timeDecode(4096, 128);
    checker.timeDecode(4096, 32);
    checker.timeDecode(4096, 512, false, /*batch=*/1);
    checker.timeDecode(32768, 16384, false, /*batch=*/1);
    // Paged caches (docs/paged-kv-cache.md): the same calls through a page
    // table, against the plain rows above.
    for (int64_t pageSize : {16, 64, 256}) {
      checker.timeDecode(4096, 512, false, 8, pageSize);
      checker.timeDecode(4096, 3072, false, 8, pageSize);
      checker.timeDecode(32768, 16384, false, 8, pageSize);
    }
    // Pages in order (each sequence's rows contiguous, as plain caches).
    checker.timeDecode(4096, 512, false, 8, 16, /*shuffled=*/false);
    checker.timeDecode(4096, 3072, false, 8, 16, /*shuffled=*/false);
    return 0;
  }
  auto selected = [&](const std::string &name) {
    return filter.empty() || name.find(filter) != std::string::npos;
  };
  for (const Case &c : smallCases())
    if (selected(c.name))
      checker.run(c);
  for (const ThdCase &c : thdCases())
    if (selected(c.name))
      checker.runThd(c);
  for (const KvCacheCase &c : kvCacheCases())
    if (selected(c.name))
      checker.runKvCache(c);
  for (const std::vector<Case> &cases : {biasCases(), alibiCases()})
    for (const Case &c : cases)
      if (selected(c.name))
        checker.run(c);
  for (const Case &c : dropoutCases())
    if (selected(c.name))
      checker.runDropout(c);
  if (real) {
    // The real size once more with q, k and v read in place (timed too).
    Case packed = realCase();
    packed.name += " packed qkv";
    int64_t width = 3 * packed.problem.heads * packed.problem.headDim;
    packed.problem.tokenStrides = {width, width, width, width, width, width};
    if (selected(packed.name))
      checker.run(packed);
    Case window = realWindowCase();
    if (selected(window.name))
      checker.run(window);
    for (const Case &c : realBiasCases())
      if (selected(c.name))
        checker.run(c);
    Case c = realCase();
    if (selected(c.name)) {
      auto start = std::chrono::steady_clock::now();
      checker.run(c);
      std::printf("  (real size: %.1f s with its reference)\n",
                  std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count());
      auto runner = AttentionRunner::get(c.problem);
      if (runner)
        std::printf("  forward engine: %s\n",
                    (*runner)->describeEngine().c_str());
      else
        llvm::consumeError(runner.takeError());
      AttentionProblem backward = c.problem;
      backward.backward = true;
      auto bwd = AttentionRunner::get(backward);
      if (bwd)
        std::printf("  backward engine: %s\n",
                    (*bwd)->describeEngine().c_str());
      else
        llvm::consumeError(bwd.takeError());
    }
  }
  const Tally &t = checker.tally;
  std::printf("SUMMARY: %d passed, %d failed, %d unsupported (seed %llu)\n",
              t.passed, t.failed, t.unsupported, (unsigned long long)seed);
  return t.failed ? 1 : 0;
}
