//===- fp8_attention_check.cpp - FP8 attention against float64 ------------===//
//
// Runs the runtime's FP8 attention (AttentionProblem::fp8, cuDNN's FP8 flash
// attention; docs/fp8-attention.md) on the GPU over fresh random data and
// compares it with float64 attention computed on the host from the
// dequantized FP8 inputs:
//
//   * forward: o (dequantized with its scale) and the statistics, amax_s
//     (max of the softmax probabilities) and amax_o (max |o| before its
//     cast);
//   * backward: dq, dk and dv (dequantized), amax_dp (max |dS * softmax
//     scale|) and the gradients' amaxes, from dO cast to E5M2 (HYBRID) or
//     E4M3;
//   * sbhd and bshd, no_mask / causal / padding / padding_causal, GQA and
//     cross-attention lengths, head dims of 64 and 256 (forward only:
//     Hopper's FP8 backward takes 128) and 128, one real size (b 2, 16 heads, s
//     2048). No dropout: FP8 attention refuses it (runtime/Attention.cpp).
//
// Scales are those DelayedScaling would hold after a step on the same data
// (fp8_max / amax of the reference), so every FP8 tensor uses its range; P
// is cast with the graph's fixed scale (attention::kProbabilityScale).
// Tolerance (FP8.md, FP8 attention against F16): the RMSE of each output
// below 0.11 (forward) or 0.15 (gradients) of the reference's value range;
// the amaxes within 10% of the reference's (cuDNN computes them from its
// FP8 intermediates). Rows of padded queries are not compared. One line per
// case (PASS/FAIL), a summary, exit status 1 on any failure, 77 (skipped)
// without a GPU.
//
//   tejit-fp8-attention-check [--seed N] [--filter TEXT] [--no-real]
//
//===----------------------------------------------------------------------===//
#include "runtime/Attention.h"
#include "runtime/CudaDriver.h"
#include "runtime/Cudnn.h"
#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"
#include "tests/gpu/CheckExit.h"
#include "tests/gpu/CudnnGpu.h"
#include "tests/gpu/HostAttention.h"
#include "tests/gpu/HostFp8.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace tejit::runtime;
using namespace tejit::gpucheck;

namespace {

/// A [b, h, s, d] FP8 tensor in the problem's layout: the device codes and
/// their dequantized values (code value / scale), in device order.
struct Fp8Tensor {
  int64_t batch, heads, seq, dim;
  AttentionLayout layout;
  ElementType type;
  std::vector<uint8_t> codes;
  std::vector<double> values;

  Fp8Tensor(const AttentionProblem &p, int64_t heads, int64_t seq,
            ElementType type)
      : batch(p.batch), heads(heads), seq(seq), dim(p.headDim),
        layout(p.layout), type(type),
        codes(size_t(p.batch * heads * seq * p.headDim)), values(codes.size()) {
  }

  size_t index(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return layoutIndex(layout, batch, heads, seq, dim, b, h, s, d);
  }
  double at(int64_t b, int64_t h, int64_t s, int64_t d) const {
    return values[index(b, h, s, d)];
  }
  /// Casts `source` (device order) with `scale`, as te.quantize does.
  void cast(const std::vector<float> &source, float scale) {
    for (size_t i = 0; i < codes.size(); ++i) {
      codes[i] = toFp8(source[i] * scale, type);
      values[i] = fromFp8(codes[i], type) / scale;
    }
  }
  /// Dequantizes device codes with `scaleInv`.
  void decode(float scaleInv) {
    for (size_t i = 0; i < codes.size(); ++i)
      values[i] = fromFp8(codes[i], type) * scaleInv;
  }
};

double amaxOf(const std::vector<float> &values) {
  double amax = 0;
  for (float v : values)
    amax = std::max(amax, double(std::fabs(v)));
  return amax;
}

struct Case {
  std::string name;
  AttentionProblem problem; // the forward's; the backward flips `backward`
  std::vector<int32_t> lenQ, lenKv;
  bool backward = true;
  ElementType gradType = ElementType::F8E5M2;
};

/// Float64 attention on the dequantized inputs, canonical [b, h, s, d].
struct Reference {
  std::vector<double> o, stats, dq, dk, dv;
  double amaxS = 0, amaxO = 0, amaxDp = 0, amaxDq = 0, amaxDk = 0, amaxDv = 0;
};

struct Checker {
  const CudaDriver &driver;
  std::mt19937_64 rng;
  int passed = 0, failed = 0;

  DeviceBuffer upload(const void *data, size_t bytes, const char *what) {
    DeviceBuffer buffer =
        orDie(DeviceBuffer::allocate(std::max<size_t>(bytes, 256), what));
    check(driver.check(
        driver.cuMemcpyHtoDAsync(buffer.get(), data, bytes, nullptr),
        "cuMemcpyHtoDAsync"));
    check(driver.check(driver.cuStreamSynchronize(nullptr), "synchronize"));
    return buffer;
  }
  template <typename T>
  std::vector<T> download(const DeviceBuffer &buffer, size_t count) {
    std::vector<T> host(count);
    check(driver.check(driver.cuMemcpyDtoHAsync(host.data(), buffer.get(),
                                                count * sizeof(T), nullptr),
                       "cuMemcpyDtoHAsync"));
    check(driver.check(driver.cuStreamSynchronize(nullptr), "synchronize"));
    return host;
  }
  DeviceBuffer scalar(float value, const char *what) {
    return upload(&value, sizeof(float), what);
  }

  std::vector<float> normal(size_t count, float sigma) {
    std::normal_distribution<float> dist(0.f, sigma);
    std::vector<float> values(count);
    for (float &v : values)
      v = dist(rng);
    return values;
  }

  /// Whether key j is visible to query i of batch entry b.
  static bool visible(const Case &c, int64_t b, int64_t i, int64_t j) {
    const AttentionProblem &p = c.problem;
    if (p.padding() && (i >= c.lenQ[b] || j >= c.lenKv[b]))
      return false;
    return !p.causal() || j <= i;
  }
  static bool rowValid(const Case &c, int64_t b, int64_t i) {
    return !c.problem.padding() || i < c.lenQ[b];
  }

  void reference(const Case &c, const Fp8Tensor &q, const Fp8Tensor &k,
                 const Fp8Tensor &v, const Fp8Tensor *dO, Reference &ref) {
    const AttentionProblem &p = c.problem;
    int64_t B = p.batch, H = p.heads, G = p.heads / p.kvHeads, SQ = p.seqQ,
            SK = p.seqKv, D = p.headDim;
    ref.o.assign(size_t(B * H * SQ * D), 0);
    ref.stats.assign(size_t(B * H * SQ), 0);
    if (dO) {
      ref.dq.assign(ref.o.size(), 0);
      ref.dk.assign(size_t(B * H * SK * D), 0); // full heads, summed below
      ref.dv.assign(ref.dk.size(), 0);
    }
    std::vector<double> amaxes(size_t(B * H) * 6, 0);
    parallelFor(size_t(B * H), [&](size_t bh) {
      int64_t b = int64_t(bh) / H, h = int64_t(bh) % H, kh = h / G;
      std::vector<double> prob(size_t(SQ * SK)), dS(size_t(SQ * SK));
      double *amax = &amaxes[bh * 6];
      for (int64_t i = 0; i < SQ; ++i) {
        double *row = &prob[size_t(i * SK)];
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < SK; ++j) {
          if (!visible(c, b, i, j)) {
            row[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q.at(b, h, i, d) * k.at(b, kh, j, d);
          row[j] = dot * p.softmaxScale;
          max = std::max(max, row[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < SK; ++j)
          sum += row[j] = std::isinf(row[j]) ? 0 : std::exp(row[j] - max);
        ref.stats[size_t((b * H + h) * SQ + i)] = max + std::log(sum);
        for (int64_t j = 0; j < SK; ++j) {
          row[j] = sum > 0 ? row[j] / sum : 0;
          if (rowValid(c, b, i))
            amax[0] = std::max(amax[0], row[j]);
        }
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < SK; ++j)
            o += row[j] * v.at(b, kh, j, d);
          ref.o[size_t(((b * H + h) * SQ + i) * D + d)] = o;
          if (rowValid(c, b, i))
            amax[1] = std::max(amax[1], std::fabs(o));
        }
      }
      if (!dO)
        return;
      for (int64_t i = 0; i < SQ; ++i) {
        if (!rowValid(c, b, i))
          continue;
        double rowDot = 0;
        for (int64_t d = 0; d < D; ++d)
          rowDot += dO->at(b, h, i, d) *
                    ref.o[size_t(((b * H + h) * SQ + i) * D + d)];
        for (int64_t j = 0; j < SK; ++j) {
          double dp = 0;
          for (int64_t d = 0; d < D; ++d)
            dp += dO->at(b, h, i, d) * v.at(b, kh, j, d);
          double grad =
              prob[size_t(i * SK + j)] * (dp - rowDot) * p.softmaxScale;
          dS[size_t(i * SK + j)] = grad;
          amax[2] = std::max(amax[2], std::fabs(grad));
        }
      }
      for (int64_t i = 0; i < SQ; ++i)
        for (int64_t d = 0; d < D; ++d) {
          double sum = 0;
          for (int64_t j = 0; j < SK; ++j)
            sum += dS[size_t(i * SK + j)] * k.at(b, kh, j, d);
          ref.dq[size_t(((b * H + h) * SQ + i) * D + d)] = sum;
        }
      for (int64_t j = 0; j < SK; ++j)
        for (int64_t d = 0; d < D; ++d) {
          double dk = 0, dv = 0;
          for (int64_t i = 0; i < SQ; ++i) {
            if (!rowValid(c, b, i))
              continue;
            dk += dS[size_t(i * SK + j)] * q.at(b, h, i, d);
            dv += prob[size_t(i * SK + j)] * dO->at(b, h, i, d);
          }
          ref.dk[size_t(((b * H + h) * SK + j) * D + d)] = dk;
          ref.dv[size_t(((b * H + h) * SK + j) * D + d)] = dv;
        }
    });
    for (size_t bh = 0; bh < size_t(B * H); ++bh) {
      ref.amaxS = std::max(ref.amaxS, amaxes[bh * 6]);
      ref.amaxO = std::max(ref.amaxO, amaxes[bh * 6 + 1]);
      ref.amaxDp = std::max(ref.amaxDp, amaxes[bh * 6 + 2]);
    }
    if (!dO)
      return;
    // GQA: each kv head's gradient is the sum over its query heads.
    std::vector<double> dk(size_t(B * p.kvHeads * SK * D), 0), dv(dk.size(), 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (size_t e = 0; e < size_t(SK * D); ++e) {
          size_t from = size_t((b * H + h) * SK * D) + e;
          size_t to = size_t((b * p.kvHeads + h / G) * SK * D) + e;
          dk[to] += ref.dk[from];
          dv[to] += ref.dv[from];
        }
    ref.dk = std::move(dk);
    ref.dv = std::move(dv);
    for (double x : ref.dq)
      ref.amaxDq = std::max(ref.amaxDq, std::fabs(x));
    for (double x : ref.dk)
      ref.amaxDk = std::max(ref.amaxDk, std::fabs(x));
    for (double x : ref.dv)
      ref.amaxDv = std::max(ref.amaxDv, std::fabs(x));
  }

  /// RMSE of `got` (a device tensor, dequantized) against `want`
  /// (canonical) over valid rows, divided by want's value range.
  double rmseOverRange(const Case &c, const Fp8Tensor &got,
                       const std::vector<double> &want, bool queryRows) {
    double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    size_t count = 0;
    for (int64_t b = 0; b < got.batch; ++b)
      for (int64_t h = 0; h < got.heads; ++h)
        for (int64_t s = 0; s < got.seq; ++s) {
          if (queryRows && !rowValid(c, b, s))
            continue;
          for (int64_t d = 0; d < got.dim; ++d) {
            double w =
                want[size_t(((b * got.heads + h) * got.seq + s) * got.dim + d)];
            double e = got.at(b, h, s, d) - w;
            if (!std::isfinite(got.at(b, h, s, d)))
              return std::numeric_limits<double>::infinity();
            sum += e * e;
            lo = std::min(lo, w);
            hi = std::max(hi, w);
            ++count;
          }
        }
    double range = hi - lo;
    return count == 0 || range == 0 ? 0 : std::sqrt(sum / count) / range;
  }

  void run(const Case &c) {
    const AttentionProblem &p = c.problem;
    std::vector<std::string> problems;
    auto expect = [&](bool ok, const std::string &what) {
      if (!ok)
        problems.push_back(what);
    };
    // Inputs: q, k, v share one scale (TE casts them together).
    Fp8Tensor q(p, p.heads, p.seqQ, ElementType::F8E4M3),
        k(p, p.kvHeads, p.seqKv, ElementType::F8E4M3),
        v(p, p.kvHeads, p.seqKv, ElementType::F8E4M3);
    std::vector<float> qs = normal(q.codes.size(), 1.f),
                       ks = normal(k.codes.size(), 1.f),
                       vs = normal(v.codes.size(), 1.f);
    float qkvScale =
        448.f / float(std::max({amaxOf(qs), amaxOf(ks), amaxOf(vs)}));
    q.cast(qs, qkvScale);
    k.cast(ks, qkvScale);
    v.cast(vs, qkvScale);
    Fp8Tensor gradO(p, p.heads, p.seqQ, c.gradType);
    std::vector<float> dOs = normal(gradO.codes.size(), 1.f);
    float gradOScale = fp8Max(c.gradType) / float(amaxOf(dOs));
    gradO.cast(dOs, gradOScale);
    Reference ref;
    reference(c, q, k, v, c.backward ? &gradO : nullptr, ref);

    auto t0 = std::chrono::steady_clock::now();
    DeviceBuffer dq = upload(q.codes.data(), q.codes.size(), "q"),
                 dk = upload(k.codes.data(), k.codes.size(), "k"),
                 dv = upload(v.codes.data(), v.codes.size(), "v");
    DeviceBuffer out = orDie(DeviceBuffer::allocate(q.codes.size(), "o"));
    DeviceBuffer stats = orDie(DeviceBuffer::allocate(
        size_t(p.batch * p.heads * p.seqQ) * 4, "stats"));
    DeviceBuffer lenQ = upload(c.lenQ.data(), c.lenQ.size() * 4, "seq_len_q"),
                 lenKv =
                     upload(c.lenKv.data(), c.lenKv.size() * 4, "seq_len_kv");
    // The scales DelayedScaling would hold: fp8_max / amax (P's is fixed
    // in the graph).
    float scaleO = 448.f / float(ref.amaxO);
    DeviceBuffer descaleQkv = scalar(1.f / qkvScale, "descale qkv"),
                 oScale = scalar(scaleO, "scale o"),
                 amaxS = scalar(-1.f, "amax s"), amaxO = scalar(-1.f, "amax o");
    AttentionPointers ptr;
    ptr.q = dq.get();
    ptr.k = dk.get();
    ptr.v = dv.get();
    ptr.o = out.get();
    ptr.stats = stats.get();
    if (p.padding()) {
      ptr.seqLenQ = lenQ.get();
      ptr.seqLenKv = lenKv.get();
    }
    ptr.descaleQkv = descaleQkv.get();

    ptr.scaleO = oScale.get();
    ptr.amaxS = amaxS.get();
    ptr.amaxO = amaxO.get();
    auto runner = AttentionRunner::get(p);
    if (!runner) {
      std::printf("UNSUPPORTED %s: %s\n", c.name.c_str(),
                  llvm::toString(runner.takeError()).c_str());
      return;
    }
    DeviceBuffer workspace = orDie(DeviceBuffer::allocate(
        std::max<size_t>((*runner)->workspaceBytes(), 256), "workspace"));
    check((*runner)->run(ptr, workspace.get(), nullptr));
    check(driver.check(driver.cuStreamSynchronize(nullptr), "FP8 forward"));

    Fp8Tensor o(p, p.heads, p.seqQ, ElementType::F8E4M3);
    o.codes = download<uint8_t>(out, o.codes.size());
    o.decode(1.f / scaleO);
    double oError = rmseOverRange(c, o, ref.o, /*queryRows=*/true);
    expect(oError <= 0.11, llvm::formatv("o rmse/range {0:e2}", oError));
    std::vector<float> gotStats =
        download<float>(stats, size_t(p.batch * p.heads * p.seqQ));
    double statsError = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.seqQ; ++i)
        if (rowValid(c, b, i))
          for (int64_t h = 0; h < p.heads; ++h) {
            size_t at = size_t((b * p.heads + h) * p.seqQ + i);
            statsError =
                std::max(statsError, std::fabs(gotStats[at] - ref.stats[at]));
          }
    expect(statsError <= 0.05,
           llvm::formatv("stats max abs error {0:e2}", statsError));
    float gotAmaxS = download<float>(amaxS, 1)[0],
          gotAmaxO = download<float>(amaxO, 1)[0];
    auto near = [](double got, double want) {
      return std::fabs(got - want) <= 0.1 * std::fabs(want);
    };
    expect(near(gotAmaxS, ref.amaxS),
           llvm::formatv("amax_s {0} vs {1}", gotAmaxS, ref.amaxS));
    expect(near(gotAmaxO, ref.amaxO),
           llvm::formatv("amax_o {0} vs {1}", gotAmaxO, ref.amaxO));
    std::string summary =
        llvm::formatv("o {0:e2} amax_s {1:f3}/{2:f3} amax_o {3:f3}/{4:f3}",
                      oError, gotAmaxS, ref.amaxS, gotAmaxO, ref.amaxO)
            .str();

    if (c.backward) {
      AttentionProblem bp = p;
      bp.backward = true;
      bp.gradElement = c.gradType;
      float gradMax = fp8Max(c.gradType);
      float scaleDp = gradMax / float(ref.amaxDp);
      float scaleDqkv =
          gradMax / float(std::max({ref.amaxDq, ref.amaxDk, ref.amaxDv}));
      DeviceBuffer dO = upload(gradO.codes.data(), gradO.codes.size(), "dO");
      DeviceBuffer gq = orDie(DeviceBuffer::allocate(q.codes.size(), "dq")),
                   gk = orDie(DeviceBuffer::allocate(k.codes.size(), "dk")),
                   gv = orDie(DeviceBuffer::allocate(v.codes.size(), "dv"));
      DeviceBuffer descaleO = scalar(1.f / scaleO, "descale o"),
                   descaleGradO = scalar(1.f / gradOScale, "descale dO"),
                   dpScale = scalar(scaleDp, "scale dP"),
                   dpDescale = scalar(1.f / scaleDp, "descale dP"),
                   dqkvScale = scalar(scaleDqkv, "scale dqkv"),
                   amaxDp = scalar(-1.f, "amax dP"),
                   amaxDq = scalar(-1.f, "amax dq"),
                   amaxDk = scalar(-1.f, "amax dk"),
                   amaxDv = scalar(-1.f, "amax dv");
      ptr.gradO = dO.get();
      ptr.gradQ = gq.get();
      ptr.gradK = gk.get();
      ptr.gradV = gv.get();
      ptr.descaleO = descaleO.get();
      ptr.descaleGradO = descaleGradO.get();
      ptr.scaleDp = dpScale.get();
      ptr.descaleDp = dpDescale.get();
      ptr.scaleGradQkv = dqkvScale.get();
      ptr.amaxDp = amaxDp.get();
      ptr.amaxGradQ = amaxDq.get();
      ptr.amaxGradK = amaxDk.get();
      ptr.amaxGradV = amaxDv.get();
      auto backward = AttentionRunner::get(bp);
      if (!backward) {
        std::printf("UNSUPPORTED %s backward: %s\n", c.name.c_str(),
                    llvm::toString(backward.takeError()).c_str());
        ++failed;
        return;
      }
      DeviceBuffer bwdWorkspace = orDie(DeviceBuffer::allocate(
          std::max<size_t>((*backward)->workspaceBytes(), 256), "workspace"));
      check((*backward)->run(ptr, bwdWorkspace.get(), nullptr));
      check(driver.check(driver.cuStreamSynchronize(nullptr), "FP8 backward"));
      Fp8Tensor gotQ(p, p.heads, p.seqQ, c.gradType),
          gotK(p, p.kvHeads, p.seqKv, c.gradType),
          gotV(p, p.kvHeads, p.seqKv, c.gradType);
      gotQ.codes = download<uint8_t>(gq, gotQ.codes.size());
      gotK.codes = download<uint8_t>(gk, gotK.codes.size());
      gotV.codes = download<uint8_t>(gv, gotV.codes.size());
      for (Fp8Tensor *t : {&gotQ, &gotK, &gotV})
        t->decode(1.f / scaleDqkv);
      double eq = rmseOverRange(c, gotQ, ref.dq, true),
             ek = rmseOverRange(c, gotK, ref.dk, false),
             ev = rmseOverRange(c, gotV, ref.dv, false);
      expect(eq <= 0.15, llvm::formatv("dq rmse/range {0:e2}", eq));
      expect(ek <= 0.15, llvm::formatv("dk rmse/range {0:e2}", ek));
      expect(ev <= 0.15, llvm::formatv("dv rmse/range {0:e2}", ev));
      float gotDp = download<float>(amaxDp, 1)[0],
            gotDq = download<float>(amaxDq, 1)[0],
            gotDk = download<float>(amaxDk, 1)[0],
            gotDv = download<float>(amaxDv, 1)[0];
      expect(near(gotDp, ref.amaxDp),
             llvm::formatv("amax_dp {0} vs {1}", gotDp, ref.amaxDp));
      expect(near(gotDq, ref.amaxDq),
             llvm::formatv("amax_dq {0} vs {1}", gotDq, ref.amaxDq));
      expect(near(gotDk, ref.amaxDk),
             llvm::formatv("amax_dk {0} vs {1}", gotDk, ref.amaxDk));
      expect(near(gotDv, ref.amaxDv),
             llvm::formatv("amax_dv {0} vs {1}", gotDv, ref.amaxDv));
      summary += llvm::formatv(" dq {0:e2} dk {1:e2} dv {2:e2} amax_dp "
                               "{3:e2}/{4:e2}",
                               eq, ek, ev, gotDp, ref.amaxDp)
                     .str();
    }
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    if (problems.empty()) {
      ++passed;
      std::printf("PASS %s: %s (%.0f ms)\n", c.name.c_str(), summary.c_str(),
                  ms);
    } else {
      ++failed;
      std::printf("FAIL %s: %s; %s\n", c.name.c_str(), summary.c_str(),
                  llvm::join(problems, "; ").c_str());
    }
    std::fflush(stdout);
  }
};

Case makeCase(AttentionLayout layout, AttentionMask mask, int64_t batch,
              int64_t heads, int64_t kvHeads, int64_t seqQ, int64_t seqKv,
              int64_t dim, bool backward, ElementType gradType) {
  Case c;
  AttentionProblem &p = c.problem;
  p.fp8 = true;
  p.element = ElementType::F8E4M3;
  p.layout = layout;
  p.mask = mask;
  p.batch = batch;
  p.heads = heads;
  p.kvHeads = kvHeads;
  p.seqQ = seqQ;
  p.seqKv = seqKv;
  p.headDim = dim;
  p.softmaxScale = 1.0 / std::sqrt(double(dim));
  c.backward = backward;
  c.gradType = gradType;
  for (int64_t b = 0; b < batch; ++b) {
    // Padding: each entry shorter by a different amount.
    c.lenQ.push_back(
        int32_t(p.padding() ? seqQ - (16 * (b + 1)) % seqQ : seqQ));
    c.lenKv.push_back(
        int32_t(p.padding() ? seqKv - (32 * (b + 1)) % seqKv : seqKv));
  }
  c.name = llvm::formatv("fp8 {0} {1} b={2} h={3} kv={4} s_q={5} s_kv={6} "
                         "d={7}{8}",
                         attentionLayoutName(layout), attentionMaskName(mask),
                         batch, heads, kvHeads, seqQ, seqKv, dim,
                         backward ? (gradType == ElementType::F8E5M2
                                         ? " fwd+bwd e5m2"
                                         : " fwd+bwd e4m3")
                                  : " fwd")
               .str();
  return c;
}

std::vector<Case> smallCases() {
  std::vector<Case> cases;
  using L = AttentionLayout;
  using M = AttentionMask;
  for (L layout : {L::Bshd, L::Sbhd})
    for (M mask : {M::None, M::Causal, M::Padding, M::PaddingCausal})
      cases.push_back(makeCase(layout, mask, 2, 4, 4, 256, 256, 128, true,
                               ElementType::F8E5M2));
  cases.push_back(makeCase(L::Bshd, M::Causal, 2, 4, 4, 256, 256, 128, true,
                           ElementType::F8E4M3));
  // GQA and MQA.
  cases.push_back(makeCase(L::Sbhd, M::Causal, 2, 8, 2, 256, 256, 128, true,
                           ElementType::F8E5M2));
  cases.push_back(makeCase(L::Bshd, M::None, 2, 8, 1, 128, 128, 128, true,
                           ElementType::F8E5M2));
  // Cross-attention lengths, lengths off the tiles.
  cases.push_back(makeCase(L::Bshd, M::None, 2, 4, 4, 128, 384, 128, true,
                           ElementType::F8E5M2));
  cases.push_back(makeCase(L::Bshd, M::Causal, 1, 4, 4, 200, 200, 128, true,
                           ElementType::F8E5M2));
  // Head dim 64: the forward only on Hopper.
  cases.push_back(makeCase(L::Bshd, M::Causal, 2, 4, 4, 256, 256, 64, false,
                           ElementType::F8E5M2));
  // Head dim 256, the largest the forward takes.
  cases.push_back(makeCase(L::Sbhd, M::None, 2, 4, 4, 256, 256, 256, false,
                           ElementType::F8E5M2));
  return cases;
}

} // namespace

int main(int argc, char **argv) {
  std::optional<CheckOptions> options = parseCheckOptions(argc, argv);
  if (!options)
    return 2;
  uint64_t seed = options->seed;
  int exitStatus = 0;
  std::optional<CudnnGpu> gpu = openCudnnGpu(exitStatus);
  if (!gpu)
    return exitStatus;
  printCheckBanner(*gpu, seed);
  Checker checker{*gpu->driver, std::mt19937_64(seed)};
  std::vector<Case> cases = smallCases();
  if (options->real)
    cases.push_back(makeCase(AttentionLayout::Sbhd, AttentionMask::Causal, 2,
                             16, 16, 2048, 2048, 128, true,
                             ElementType::F8E5M2));
  for (const Case &c : cases)
    if (options->filter.empty() ||
        c.name.find(options->filter) != std::string::npos)
      checker.run(c);
  std::printf("%d passed, %d failed\n", checker.passed, checker.failed);
  return checker.failed ? 1 : 0;
}
