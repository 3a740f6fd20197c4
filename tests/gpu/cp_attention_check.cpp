//===- cp_attention_check.cpp - context-parallel attention on one GPU -----===//
//
// tejit-cp-attention-check: every rank's context-parallel attention step
// (docs/context-parallel.md) run on one GPU, as AttentionLauncher runs it in
// a plan, against a float64 reference on the whole sequence. Rank r of N
// holds chunks r and 2N - 1 - r of the sequence's 2N chunks of queries and
// reads the whole sequence's keys and values; its o, log-sum-exp and dq must
// be the whole attention's rows at those positions, and its dk and dv the
// part of the whole attention's that its queries contribute (the
// reduce-scatter sums the ranks' parts). dk and dv start as NaN, so rows
// the step leaves unwritten fail. Fresh random data each run (--seed N
// repeats one); errors are relative L2 norms, with the tolerances of
// tejit-attention-check (1e-2 bf16, 5e-3 f16). `--time` also times each
// rank's forward + backward against the whole problem's on the GPU and
// (with the full-size cases) probes whether cuDNN skips the masked blocks
// of bottom-right-aligned chunks.
//
// Exit status: 0 all passed, 1 a failure, 77 no GPU (skipped).
//
//===----------------------------------------------------------------------===//
#include "runtime/AttentionLauncher.h"
#include "tests/gpu/CudnnGpu.h"
#include "tests/gpu/GpuCheckUtils.h"
#include "tests/gpu/HostAttention.h"
#include "tests/runtime/StepFunctions.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <vector>

using namespace tejit::runtime;
using namespace tejit::gpucheck;

namespace {

struct CpCase {
  std::string name;
  AttentionLayout layout = AttentionLayout::Sbhd;
  bool causal = true;
  int64_t ranks = 2, batch = 2, seq = 1024, heads = 8, groups = 2, dim = 64;
  ElementType element = ElementType::BF16;
  /// Full-size: the reference covers KV group 0 only (its query heads).
  bool real = false;
};

/// The whole problem's inputs, [b, h, s, d] row-major doubles (rounded to
/// the element type) and their device encoding in the case's layout.
struct Inputs {
  const CpCase &c;
  std::vector<double> q, k, v, gradO;

  int64_t heads(bool keys) const { return keys ? c.groups : c.heads; }
  size_t at(bool keys, int64_t b, int64_t h, int64_t s, int64_t d) const {
    return size_t(((b * heads(keys) + h) * c.seq + s) * c.dim + d);
  }
};

double roundTo(ElementType element, double x) {
  return element == ElementType::BF16 ? fromBf16(toBf16(float(x)))
                                      : fromHalf(toHalf(float(x)));
}

Inputs makeInputs(const CpCase &c, std::mt19937_64 &random) {
  Inputs in{c, {}, {}, {}, {}};
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](std::vector<double> &x, bool keys) {
    x.resize(size_t(c.batch * in.heads(keys) * c.seq * c.dim));
    for (double &value : x)
      value = roundTo(c.element, normal(random));
  };
  fill(in.q, false);
  fill(in.k, true);
  fill(in.v, true);
  fill(in.gradO, false);
  return in;
}

/// The whole sequence's position of local row i of rank r (c = chunk).
int64_t position(int64_t rank, int64_t ranks, int64_t chunk, int64_t i) {
  return i < chunk ? rank * chunk + i
                   : (2 * ranks - 1 - rank) * chunk + i - chunk;
}

/// Rank r's part of the whole attention: o, lse and dq of its queries, and
/// its queries' contribution to dk and dv, for the query heads of `heads`
/// (all, or KV group 0's for a full-size case).
struct RankReference {
  std::vector<double> o, lse, dq, dk, dv; // [b, h, rows or s, d] / [b, h, rows]
};

RankReference reference(const Inputs &in, int64_t rank, int64_t queryHeads) {
  const CpCase &c = in.c;
  int64_t rows = c.seq / c.ranks, chunk = rows / 2, d = c.dim;
  int64_t perGroup = c.heads / c.groups;
  double scale = 1.0 / std::sqrt(double(d));
  RankReference ref;
  ref.o.assign(size_t(c.batch * c.heads * rows * d), 0);
  ref.dq.assign(ref.o.size(), 0);
  ref.lse.assign(size_t(c.batch * c.heads * rows), 0);
  ref.dk.assign(in.k.size(), 0);
  ref.dv.assign(in.v.size(), 0);
  // One task per (b, query head); dk and dv are summed per task and added
  // under a lock at the end, so the threads never write the same element.
  std::mutex merge;
  parallelFor(size_t(c.batch * queryHeads), [&](size_t task) {
    int64_t b = int64_t(task) / queryHeads, h = int64_t(task) % queryHeads;
    int64_t g = h / perGroup;
    std::vector<double> dk(size_t(c.seq * d), 0), dv(size_t(c.seq * d), 0);
    std::vector<double> p(size_t(c.seq));
    for (int64_t i = 0; i < rows; ++i) {
      int64_t at = position(rank, c.ranks, chunk, i);
      int64_t keys = c.causal ? at + 1 : c.seq;
      const double *qi = &in.q[in.at(false, b, h, at, 0)];
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        const double *kj = &in.k[in.at(true, b, g, j, 0)];
        double dot = 0;
        for (int64_t e = 0; e < d; ++e)
          dot += qi[e] * kj[e];
        p[j] = dot * scale;
        top = std::max(top, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j)
        sum += (p[j] = std::exp(p[j] - top));
      size_t row = size_t((b * c.heads + h) * rows + i);
      ref.lse[row] = top + std::log(sum);
      double *o = &ref.o[row * d];
      for (int64_t j = 0; j < keys; ++j) {
        p[j] /= sum;
        const double *vj = &in.v[in.at(true, b, g, j, 0)];
        for (int64_t e = 0; e < d; ++e)
          o[e] += p[j] * vj[e];
      }
      const double *gi = &in.gradO[in.at(false, b, h, at, 0)];
      double delta = 0;
      for (int64_t e = 0; e < d; ++e)
        delta += gi[e] * o[e];
      double *dq = &ref.dq[row * d];
      for (int64_t j = 0; j < keys; ++j) {
        const double *vj = &in.v[in.at(true, b, g, j, 0)];
        const double *kj = &in.k[in.at(true, b, g, j, 0)];
        double dp = 0;
        for (int64_t e = 0; e < d; ++e)
          dp += gi[e] * vj[e];
        double ds = p[j] * (dp - delta) * scale;
        for (int64_t e = 0; e < d; ++e) {
          dq[e] += ds * kj[e];
          dk[size_t(j * d + e)] += ds * qi[e];
          dv[size_t(j * d + e)] += p[j] * gi[e];
        }
      }
    }
    std::lock_guard<std::mutex> lock(merge);
    for (int64_t j = 0; j < c.seq; ++j)
      for (int64_t e = 0; e < d; ++e) {
        ref.dk[in.at(true, b, g, j, e)] += dk[size_t(j * d + e)];
        ref.dv[in.at(true, b, g, j, e)] += dv[size_t(j * d + e)];
      }
  });
  return ref;
}

/// Encodes `seqRows` positions of a [b, heads, s, d] tensor (position
/// `pick(i)` of the whole for row i) in the case's layout.
template <typename Pick>
std::vector<uint16_t> encode(const Inputs &in, const std::vector<double> &x,
                             bool keys, int64_t seqRows, Pick pick) {
  const CpCase &c = in.c;
  int64_t heads = in.heads(keys);
  std::vector<uint16_t> out(size_t(c.batch * heads * seqRows * c.dim));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seqRows; ++i)
        for (int64_t e = 0; e < c.dim; ++e) {
          double value = x[in.at(keys, b, h, pick(i), e)];
          out[layoutIndex(c.layout, c.batch, heads, seqRows, c.dim, b, h, i,
                          e)] = c.element == ElementType::BF16
                                    ? toBf16(float(value))
                                    : toHalf(float(value));
        }
  return out;
}

/// Relative L2 error of `got` (device encoding, `seqRows` rows) against
/// `want` ([b, heads, seqRows or s, d]) over the heads below `heads`; NaN
/// when the device wrote NaN.
struct Error2 {
  double diff = 0, norm = 0;
  double rel() const {
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  }
};

Error2 compare(const Inputs &in, const std::vector<uint16_t> &got,
               const std::vector<double> &want, bool keys, int64_t seqRows,
               int64_t heads) {
  const CpCase &c = in.c;
  int64_t allHeads = in.heads(keys);
  Error2 error;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seqRows; ++i)
        for (int64_t e = 0; e < c.dim; ++e) {
          uint16_t raw = got[layoutIndex(c.layout, c.batch, allHeads, seqRows,
                                         c.dim, b, h, i, e)];
          double value =
              c.element == ElementType::BF16 ? fromBf16(raw) : fromHalf(raw);
          double expected =
              want[size_t(((b * allHeads + h) * seqRows + i) * c.dim + e)];
          error.diff += (value - expected) * (value - expected);
          error.norm += expected * expected;
        }
  return error;
}

/// The step's values, in CpSteps' order (tests/runtime/ContextParallelTest
/// .cpp): q, k, v, o, stats, dO, dq, dk, dv.
FunctionPlan stepFunction(const CpCase &c) {
  using steptest::tensorOf;
  int64_t rows = c.seq / c.ranks;
  auto shaped = [&](int64_t seqRows, int64_t heads) {
    return c.layout == AttentionLayout::Sbhd
               ? tensorOf({seqRows, c.batch, heads, c.dim}, c.element)
               : tensorOf({c.batch, seqRows, heads, c.dim}, c.element);
  };
  return steptest::functionWith(
      {shaped(rows, c.heads), shaped(c.seq, c.groups), shaped(c.seq, c.groups),
       shaped(rows, c.heads),
       tensorOf({c.batch, c.heads, rows}, ElementType::F32),
       shaped(rows, c.heads), shaped(rows, c.heads), shaped(c.seq, c.groups),
       shaped(c.seq, c.groups)});
}

std::pair<AttentionStep, AttentionStep> steps(const CpCase &c, int64_t rank) {
  AttentionStep forward;
  forward.operands = {0, 1, 2};
  forward.results = {3, 4};
  forward.attributes = {
      {"qkv_format", c.layout == AttentionLayout::Sbhd
                         ? "#te.qkv_format<sbhd>"
                         : "#te.qkv_format<bshd>"},
      {"attn_mask_type",
       c.causal ? "#te.attn_mask_type<causal>" : "#te.attn_mask_type<no_mask>"},
      {"softmax_scale",
       llvm::formatv("{0:e} : f64", 1.0 / std::sqrt(double(c.dim))).str()},
      {"cp_ranks", std::to_string(c.ranks) + " : i64"},
      {"cp_rank", std::to_string(rank) + " : i64"}};
  AttentionStep backward = forward;
  backward.backward = true;
  backward.operands = {5, 0, 1, 2, 3, 4};
  backward.results = {6, 7, 8};
  return {forward, backward};
}

struct Kernels {
  CUfunction prep = nullptr, accumulate = nullptr;
};

Kernels loadKernels(const CudaDriver &driver) {
  CUmodule module;
  orDie(driver.check(driver.cuModuleLoadData(&module, attentionPrepPtx()),
                     "cuModuleLoadData"),
        "loading the runtime's helper kernels");
  Kernels kernels;
  orDie(driver.check(driver.cuModuleGetFunction(&kernels.prep, module,
                                                "tejit_attention_prep"),
                     "cuModuleGetFunction"),
        "tejit_attention_prep");
  orDie(driver.check(driver.cuModuleGetFunction(&kernels.accumulate, module,
                                                "tejit_cp_accumulate"),
                     "cuModuleGetFunction"),
        "tejit_cp_accumulate");
  return kernels;
}

/// Device buffers for every value of `function`, and their addresses.
struct StepBuffers {
  std::vector<DeviceBuffer> buffers;
  std::vector<CUdeviceptr> addresses;

  StepBuffers(const Gpu &gpu, const FunctionPlan &function) {
    for (const ValueInfo &value : function.values) {
      buffers.push_back(gpu.allocate(size_t(value.bytes), "a step value"));
      addresses.push_back(buffers.back().get());
    }
  }
};

/// The forward and backward of the whole problem (one rank, no context
/// parallelism) on the case's data: what a rank's time compares with.
double timeWhole(const Gpu &gpu, const Kernels &kernels, const CpCase &c) {
  CpCase one = c;
  one.ranks = 1;
  FunctionPlan function = stepFunction(one);
  auto [forwardStep, backwardStep] = steps(one, 0);
  AttentionLauncher forward =
      orDie(AttentionLauncher::create(forwardStep, function, kernels.prep),
            "the whole forward");
  AttentionLauncher backward =
      orDie(AttentionLauncher::create(backwardStep, function, kernels.prep),
            "the whole backward");
  StepBuffers values(gpu, function);
  for (const DeviceBuffer &buffer : values.buffers)
    gpu.fill(buffer, 0); // zeros: a valid input, timed like any
  DeviceBuffer scratch = gpu.allocate(
      std::max(forward.scratchBytes(), backward.scratchBytes()), "scratch");
  return timeRuns(
      *gpu.driver,
      [&] {
        orDie(
            forward.run(values.addresses, scratch.get(), nullptr, *gpu.driver),
            "whole forward");
        orDie(
            backward.run(values.addresses, scratch.get(), nullptr, *gpu.driver),
            "whole backward");
      },
      /*warmups=*/3, /*runs=*/10);
}

/// Forward and backward of one rank, checked; with `time`, their time.
bool checkRank(const Gpu &gpu, const Kernels &kernels, const CpCase &c,
               const Inputs &in, int64_t rank, bool time, double &ms) {
  const CudaDriver &driver = *gpu.driver;
  FunctionPlan function = stepFunction(c);
  auto [forwardStep, backwardStep] = steps(c, rank);
  AttentionLauncher forward =
      orDie(AttentionLauncher::create(forwardStep, function, kernels.prep),
            "the forward step");
  AttentionLauncher backward =
      orDie(AttentionLauncher::create(backwardStep, function, kernels.prep),
            "the backward step");
  backward.setCpAccumulateKernel(kernels.accumulate);

  int64_t rows = c.seq / c.ranks, chunk = rows / 2;
  auto local = [&](int64_t i) { return position(rank, c.ranks, chunk, i); };
  auto whole = [](int64_t i) { return i; };
  StepBuffers values(gpu, function);
  std::vector<DeviceBuffer> &buffers = values.buffers;
  const std::vector<CUdeviceptr> &addresses = values.addresses;
  auto put = [&](int64_t id, const std::vector<uint16_t> &data) {
    gpu.upload(buffers[id], data.data(), data.size() * 2);
  };
  put(0, encode(in, in.q, false, rows, local));
  put(1, encode(in, in.k, true, c.seq, whole));
  put(2, encode(in, in.v, true, c.seq, whole));
  put(5, encode(in, in.gradO, false, rows, local));
  // NaN everywhere a step must write (0xffff is a NaN in bf16 and f16).
  for (int64_t id : {3, 4, 6, 7, 8})
    gpu.fill(buffers[id], 0xff);
  DeviceBuffer scratch = gpu.allocate(
      std::max(forward.scratchBytes(), backward.scratchBytes()), "scratch");
  auto run = [&] {
    orDie(forward.run(addresses, scratch.get(), nullptr, driver), "forward");
    orDie(backward.run(addresses, scratch.get(), nullptr, driver), "backward");
  };
  run();
  gpu.synchronize();

  int64_t queryHeads = c.real ? c.heads / c.groups : c.heads;
  int64_t keyHeads = c.real ? 1 : c.groups;
  RankReference ref = reference(in, rank, queryHeads);
  auto download = [&](int64_t id) {
    std::vector<uint16_t> data(size_t(function.values[id].bytes / 2));
    gpu.download(data.data(), buffers[id], data.size() * 2);
    return data;
  };
  std::vector<float> lse(size_t(c.batch * c.heads * rows));
  gpu.download(lse.data(), buffers[4], lse.size() * 4);
  Error2 lseError;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < queryHeads; ++h)
      for (int64_t i = 0; i < rows; ++i) {
        size_t at = size_t((b * c.heads + h) * rows + i);
        lseError.diff += (lse[at] - ref.lse[at]) * (lse[at] - ref.lse[at]);
        lseError.norm += ref.lse[at] * ref.lse[at];
      }
  std::vector<std::pair<const char *, Error2>> errors = {
      {"o", compare(in, download(3), ref.o, false, rows, queryHeads)},
      {"lse", lseError},
      {"dq", compare(in, download(6), ref.dq, false, rows, queryHeads)},
      {"dk", compare(in, download(7), ref.dk, true, c.seq, keyHeads)},
      {"dv", compare(in, download(8), ref.dv, true, c.seq, keyHeads)}};
  double tolerance = c.element == ElementType::BF16 ? 1e-2 : 5e-3;
  bool pass = true;
  std::string details;
  for (auto &[name, error] : errors) {
    double rel = error.rel();
    pass = pass && rel <= tolerance; // false for NaN
    details += llvm::formatv(" {0}={1:e2}", name, rel).str();
  }
  if (time) {
    ms = timeRuns(driver, run, /*warmups=*/3, /*runs=*/10);
    details += llvm::formatv("  fwd+bwd {0:f3} ms", ms).str();
  }
  std::printf("%s  %s rank %lld/%lld:%s\n", pass ? "PASS" : "FAIL",
              c.name.c_str(), (long long)rank, (long long)c.ranks,
              details.c_str());
  return pass;
}

std::vector<CpCase> cases() {
  std::vector<CpCase> all;
  for (AttentionLayout layout : {AttentionLayout::Sbhd, AttentionLayout::Bshd})
    for (bool causal : {true, false})
      for (int64_t ranks : {2, 4}) {
        CpCase c;
        c.layout = layout;
        c.causal = causal;
        c.ranks = ranks;
        c.name = llvm::formatv("{0} {1} cp{2} b2 s1024 h8 g2 d64 bf16",
                               attentionLayoutName(layout),
                               causal ? "causal" : "no_mask", ranks)
                     .str();
        all.push_back(c);
      }
  // Chunks of 1024: the backward's split (kSplitBackwardMinChunk).
  for (auto [layout, ranks] : {std::pair{AttentionLayout::Bshd, int64_t(2)},
                               std::pair{AttentionLayout::Sbhd, int64_t(4)}}) {
    CpCase split;
    split.layout = layout;
    split.ranks = ranks;
    split.batch = 1;
    split.seq = 2048 * ranks;
    split.name = llvm::formatv("{0} causal cp{1} b1 s{2} h8 g2 d64 bf16 "
                               "(split backward)",
                               attentionLayoutName(layout), ranks, split.seq)
                     .str();
    all.push_back(split);
  }
  CpCase half;
  half.element = ElementType::F16;
  half.dim = 128;
  half.groups = 8;
  half.seq = 512;
  half.name = "sbhd causal cp2 b2 s512 h8 g8 d128 f16";
  all.push_back(half);
  CpCase real;
  real.real = true;
  real.batch = 1;
  real.seq = 16384;
  real.heads = 32;
  real.groups = 8;
  real.dim = 128;
  real.name = "real sbhd causal cp2 b1 s16384 h32 g8 d128 bf16";
  all.push_back(real);
  return all;
}

/// Whether cuDNN skips the masked blocks of a bottom-right-aligned causal
/// problem (the chunks' mask): forward and backward times of one problem
/// (b 1, h 32, g 8, d 128, s_q 4096, s_kv 8192: a quarter of its scores
/// masked) under CausalBottomRight and under no mask. Equal times mean no
/// skipping.
void probeBottomRight(const Gpu &gpu) {
  const CudaDriver &driver = *gpu.driver;
  for (AttentionMask mask :
       {AttentionMask::CausalBottomRight, AttentionMask::None}) {
    double ms[2] = {0, 0};
    for (bool backward : {false, true}) {
      AttentionProblem p;
      p.batch = 1;
      p.heads = 32;
      p.kvHeads = 8;
      p.headDim = 128;
      p.seqQ = 4096;
      p.seqKv = 8192;
      p.mask = mask;
      p.softmaxScale = 1.0 / std::sqrt(128.0);
      p.backward = backward;
      auto runner = orDie(AttentionRunner::get(p), "the probe's problem");
      size_t qBytes = size_t(p.seqQ * p.heads * p.headDim * 2);
      size_t kvBytes = size_t(p.seqKv * p.kvHeads * p.headDim * 2);
      std::vector<DeviceBuffer> buffers;
      auto zeros = [&](size_t bytes) {
        buffers.push_back(gpu.allocate(bytes, "probe"));
        gpu.fill(buffers.back(), 0);
        return buffers.back().get();
      };
      AttentionPointers pointers;
      pointers.q = zeros(qBytes);
      pointers.k = zeros(kvBytes);
      pointers.v = zeros(kvBytes);
      pointers.o = zeros(qBytes);
      pointers.stats = zeros(size_t(p.heads * p.seqQ) * sizeof(float));
      if (backward) {
        pointers.gradO = zeros(qBytes);
        pointers.gradQ = zeros(qBytes);
        pointers.gradK = zeros(kvBytes);
        pointers.gradV = zeros(kvBytes);
      }
      CUdeviceptr workspace = zeros(runner->workspaceBytes());
      ms[backward] = timeRuns(
          driver,
          [&] { orDie(runner->run(pointers, workspace, nullptr), "probe"); },
          /*warmups=*/3, /*runs=*/20);
    }
    std::printf("PROBE b1 h32 g8 d128 s_q 4096 s_kv 8192 mask %s: forward "
                "%.3f ms, backward %.3f ms\n",
                attentionMaskName(mask).str().c_str(), ms[0], ms[1]);
  }
}

} // namespace

int main(int argc, char **argv) {
  std::optional<CheckOptions> options = parseCheckOptions(argc, argv, "--time");
  if (!options)
    return 2;
  int status = 0;
  std::optional<CudnnGpu> opened = openCudnnGpu(status);
  if (!opened)
    return status;
  printCheckBanner(*opened, options->seed);
  Gpu gpu{opened->driver};
  Kernels kernels = loadKernels(*opened->driver);
  std::mt19937_64 random(options->seed);
  int passed = 0, failed = 0;
  for (const CpCase &c : cases()) {
    if ((c.real && !options->real) ||
        c.name.find(options->filter) == std::string::npos)
      continue;
    Inputs in = makeInputs(c, random);
    double slowest = 0;
    for (int64_t rank = 0; rank < c.ranks; ++rank) {
      double ms = 0;
      bool pass = checkRank(gpu, kernels, c, in, rank, options->extra, ms);
      (pass ? passed : failed)++;
      slowest = std::max(slowest, ms);
    }
    if (options->extra) {
      // The ideal: the whole problem's time split evenly over the ranks.
      double whole = timeWhole(gpu, kernels, c);
      std::printf("TIME  %s: whole problem on one GPU %.3f ms, / %lld = "
                  "%.3f ms; slowest rank %.3f ms\n",
                  c.name.c_str(), whole, (long long)c.ranks, whole / c.ranks,
                  slowest);
    }
  }
  if (options->extra && options->real)
    probeBottomRight(gpu);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
