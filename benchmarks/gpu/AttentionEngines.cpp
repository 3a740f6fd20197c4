//===- AttentionEngines.cpp - cuDNN attention configurations timed -------===//
//
// tejit's attention runner (runtime/Attention.cpp) takes the first engine
// configuration cuDNN's heuristics offer. This tool measures what that
// leaves on the table for the headline layer's attention (batch 4, 32 heads,
// seq 2048, head dim 128, bf16, sbhd, q/k/v read in place from a fused QKV
// projection's rows): for the forward and the backward, with and without
// dropout, it times every configuration AttentionRunner::candidates()
// lists (the heuristics' modes A and B, the first one with each knob moved
// through its range, every other engine's defaults) that plans, and
// compares each one's outputs with the heuristics' first.
//
// Timing: 3 warm-up runs, then 5 batches of 10 runs back to back, each batch
// timed with CUDA events; a configuration's time is the median batch's per
// run. The heuristics' first is timed again after the others (the GPU
// heats); its row shows both. Outputs: the largest |difference| from the
// first configuration's outputs over the largest |output|, on the same
// random inputs and dropout seed; "identical" when every bit matches. A
// configuration with different dropout masks shows a large difference: its
// forward and backward could not be paired with other configurations.
//
//   tejit-attention-engines [--batch N] [--seq N] [--heads N] [--dim N]
//       [--mask none|causal] [--dropout P]... [--max N] [--device N]
//
// Exit status: 0 when every problem was measured, 1 on a failure, 2 when it
// cannot run here (no driver, no GPU, no cuDNN) or on a bad command line.
//
//===----------------------------------------------------------------------===//
#include "runtime/Attention.h"
#include "runtime/CudaDriver.h"
#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace tejit::runtime;

namespace {

constexpr const char *toolName = "tejit-attention-engines";
constexpr int exitFailed = 1, exitCannotRun = 2;
constexpr int warmupRuns = 3, runsPerBatch = 10, batches = 5;

[[noreturn]] void usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s [--batch N] [--seq N] [--heads N] [--dim N] "
               "[--mask none|causal] [--dropout P]... [--max N] [--device N]\n",
               argv0);
  std::exit(exitCannotRun);
}

[[noreturn]] void fail(llvm::Error error, int status) {
  std::fprintf(stderr, "%s: %s\n", toolName,
               llvm::toString(std::move(error)).c_str());
  std::exit(status);
}

template <typename T> T orFail(llvm::Expected<T> value) {
  if (!value)
    fail(value.takeError(), exitFailed);
  return std::move(*value);
}

void orFail(llvm::Error error) {
  if (error)
    fail(std::move(error), exitFailed);
}

float fromBf16(uint16_t bits) {
  uint32_t word = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

uint16_t toBf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  return uint16_t((word + 0x7fff + ((word >> 16) & 1)) >> 16);
}

/// The buffers of one problem size, shared by every configuration.
struct Buffers {
  DeviceBuffer qkv, o, stats, gradO, gradQkv, seed, offset, workspace;
};

class Bench {
public:
  Bench(const CudaDriver &driver) : driver(driver) {
    orFail(driver.check(driver.cuEventCreate(&start, CU_EVENT_DEFAULT),
                        "cuEventCreate"));
    orFail(driver.check(driver.cuEventCreate(&stop, CU_EVENT_DEFAULT),
                        "cuEventCreate"));
  }

  void allocate(const AttentionProblem &p);
  AttentionPointers pointers(const AttentionProblem &p) const;
  /// Median ms per run of `runner`.
  double time(const AttentionRunner &runner, const AttentionPointers &ptrs);
  /// The problem's outputs (o, or dq/dk/dv), as floats.
  std::vector<float> outputs(const AttentionProblem &p);
  void grow(size_t workspace);
  void runOnce(const AttentionRunner &runner, const AttentionPointers &ptrs) {
    grow(runner.workspaceBytes());
    orFail(runner.run(ptrs, b.workspace.get(), nullptr));
  }

private:
  void upload(const DeviceBuffer &buffer, const std::vector<uint16_t> &data);
  const CudaDriver &driver;
  CUevent start = nullptr, stop = nullptr;
  Buffers b;
};

size_t rowsOf(const AttentionProblem &p) { return size_t(p.seqQ * p.batch); }
size_t widthOf(const AttentionProblem &p) {
  return size_t(p.heads * p.headDim);
}

void Bench::upload(const DeviceBuffer &buffer,
                   const std::vector<uint16_t> &data) {
  orFail(driver.check(driver.cuMemcpyHtoDAsync(buffer.get(), data.data(),
                                               data.size() * 2, nullptr),
                      "uploading inputs"));
  orFail(driver.check(driver.cuStreamSynchronize(nullptr), "synchronizing"));
}

void Bench::allocate(const AttentionProblem &p) {
  size_t rows = rowsOf(p), width = widthOf(p);
  b.qkv = orFail(DeviceBuffer::allocate(rows * 3 * width * 2, "qkv"));
  b.o = orFail(DeviceBuffer::allocate(rows * width * 2, "o"));
  b.stats = orFail(DeviceBuffer::allocate(rows * p.heads * 4, "stats"));
  b.gradO = orFail(DeviceBuffer::allocate(rows * width * 2, "dO"));
  b.gradQkv = orFail(DeviceBuffer::allocate(rows * 3 * width * 2, "dqkv"));
  b.seed = orFail(DeviceBuffer::allocate(8, "seed"));
  b.offset = orFail(DeviceBuffer::allocate(8, "offset"));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto random = [&](size_t count) {
    std::vector<uint16_t> data(count);
    for (uint16_t &value : data)
      value = toBf16(normal(rng));
    return data;
  };
  upload(b.qkv, random(rows * 3 * width));
  upload(b.gradO, random(rows * width));
  int64_t seed = 1234, offset = 0;
  orFail(driver.check(driver.cuMemcpyHtoDAsync(b.seed.get(), &seed, 8, nullptr),
                      "uploading the seed"));
  orFail(driver.check(
      driver.cuMemcpyHtoDAsync(b.offset.get(), &offset, 8, nullptr),
      "uploading the offset"));
}

void Bench::grow(size_t workspace) {
  if (workspace > b.workspace.bytes())
    b.workspace = orFail(DeviceBuffer::allocate(workspace, "workspace"));
}

AttentionPointers Bench::pointers(const AttentionProblem &p) const {
  size_t part = widthOf(p) * 2; // bytes of q (or k, or v) in a row
  AttentionPointers ptrs;
  ptrs.q = b.qkv.get(), ptrs.k = b.qkv.get() + part;
  ptrs.v = b.qkv.get() + 2 * part;
  ptrs.o = b.o.get(), ptrs.stats = b.stats.get();
  ptrs.seed = b.seed.get(), ptrs.offset = b.offset.get();
  if (p.backward) {
    ptrs.gradO = b.gradO.get();
    ptrs.gradQ = b.gradQkv.get(), ptrs.gradK = b.gradQkv.get() + part;
    ptrs.gradV = b.gradQkv.get() + 2 * part;
  }
  return ptrs;
}

double Bench::time(const AttentionRunner &runner,
                   const AttentionPointers &ptrs) {
  grow(runner.workspaceBytes());
  for (int i = 0; i < warmupRuns; ++i)
    orFail(runner.run(ptrs, b.workspace.get(), nullptr));
  std::vector<double> times;
  for (int batch = 0; batch < batches; ++batch) {
    orFail(driver.check(driver.cuEventRecord(start, nullptr), "event"));
    for (int i = 0; i < runsPerBatch; ++i)
      orFail(runner.run(ptrs, b.workspace.get(), nullptr));
    orFail(driver.check(driver.cuEventRecord(stop, nullptr), "event"));
    orFail(driver.check(driver.cuEventSynchronize(stop), "event sync"));
    float ms = 0;
    orFail(driver.check(driver.cuEventElapsedTime(&ms, start, stop),
                        "cuEventElapsedTime"));
    times.push_back(ms / runsPerBatch);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::vector<float> Bench::outputs(const AttentionProblem &p) {
  const DeviceBuffer &buffer = p.backward ? b.gradQkv : b.o;
  std::vector<uint16_t> raw(buffer.bytes() / 2);
  orFail(driver.check(driver.cuMemcpyDtoHAsync(raw.data(), buffer.get(),
                                               buffer.bytes(), nullptr),
                      "downloading outputs"));
  orFail(driver.check(driver.cuStreamSynchronize(nullptr), "synchronizing"));
  std::vector<float> result(raw.size());
  for (size_t i = 0; i < raw.size(); ++i)
    result[i] = fromBf16(raw[i]);
  return result;
}

/// max |a - b| / max |b|; 0 when identical bit for bit.
double relativeDifference(const std::vector<float> &a,
                          const std::vector<float> &b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

void runProblem(Bench &bench, const AttentionProblem &problem, size_t max) {
  std::printf("## %s\n\n", problem.key().c_str());
  std::fflush(stdout);
  auto heuristic = orFail(AttentionRunner::get(problem));
  AttentionPointers ptrs = bench.pointers(problem);
  if (problem.backward) { // o and stats from the forward
    AttentionProblem forward = problem;
    forward.backward = false;
    auto fwd = orFail(AttentionRunner::get(forward));
    bench.runOnce(*fwd, bench.pointers(forward));
  }
  std::vector<AttentionEngineConfig> candidates =
      orFail(AttentionRunner::candidates(problem));
  double first = bench.time(*heuristic, ptrs);
  std::vector<float> reference = bench.outputs(problem);
  std::printf("heuristics' first: %s, %.4f ms; %zu candidates (at most %zu "
              "tried)\n\n",
              heuristic->engineConfig().str().c_str(), first, candidates.size(),
              max);
  std::printf("| configuration | plan s | ms | vs first | outputs |\n");
  std::printf("|---|---|---|---|---|\n");
  std::fflush(stdout);
  size_t tried = 0;
  for (const AttentionEngineConfig &config : candidates) {
    if (config == heuristic->engineConfig())
      continue;
    if (tried++ == max)
      break;
    auto began = std::chrono::steady_clock::now();
    auto runner = AttentionRunner::create(problem, config);
    double planSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
            .count();
    if (!runner) {
      std::string why = llvm::toString(runner.takeError());
      if (why.size() > 140)
        why = why.substr(why.size() - 140);
      std::replace(why.begin(), why.end(), '\n', ' ');
      std::printf("| %s | %.2f | - | - | refused: %s |\n", config.str().c_str(),
                  planSeconds, why.c_str());
      std::fflush(stdout);
      continue;
    }
    double ms = bench.time(**runner, ptrs);
    double difference = relativeDifference(bench.outputs(problem), reference);
    char outputs[64];
    if (difference == 0)
      std::snprintf(outputs, sizeof(outputs), "identical");
    else
      std::snprintf(outputs, sizeof(outputs), "differ by %.2e", difference);
    std::printf("| %s | %.2f | %.4f | %.3fx | %s |\n", config.str().c_str(),
                planSeconds, ms, first / ms, outputs);
    std::fflush(stdout);
  }
  double again = bench.time(*heuristic, ptrs);
  std::printf("\nheuristics' first again: %.4f ms (first timing %.4f)\n\n",
              again, first);
}
} // namespace

int main(int argc, char **argv) {
  AttentionProblem base;
  base.batch = 4, base.heads = 32, base.kvHeads = 32, base.seqQ = 2048;
  base.headDim = 128, base.layout = AttentionLayout::Sbhd;
  std::vector<double> dropouts;
  size_t max = 48;
  int ordinal = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto number = [&](int64_t low, int64_t high) {
      if (i + 1 >= argc)
        usage(argv[0]);
      char *end = nullptr;
      long long value = std::strtoll(argv[++i], &end, 10);
      if (*end || value < low || value > high)
        usage(argv[0]);
      return int64_t(value);
    };
    if (arg == "--batch")
      base.batch = number(1, 1 << 16);
    else if (arg == "--seq")
      base.seqQ = number(1, 1 << 20);
    else if (arg == "--heads")
      base.heads = base.kvHeads = number(1, 1024);
    else if (arg == "--dim")
      base.headDim = number(8, 128);
    else if (arg == "--max")
      max = size_t(number(0, 100000));
    else if (arg == "--device")
      ordinal = int(number(0, 1024));
    else if (arg == "--mask" && i + 1 < argc) {
      std::string mask = argv[++i];
      if (mask == "none")
        base.mask = AttentionMask::None;
      else if (mask == "causal")
        base.mask = AttentionMask::Causal;
      else
        usage(argv[0]);
    } else if (arg == "--dropout" && i + 1 < argc) {
      char *end = nullptr;
      dropouts.push_back(std::strtod(argv[++i], &end));
      if (*end)
        usage(argv[0]);
    } else
      usage(argv[0]);
  }
  if (dropouts.empty())
    dropouts = {0.1, 0.0};
  base.seqKv = base.seqQ;
  base.softmaxScale = 1.0 / std::sqrt(double(base.headDim));
  int64_t row = 3 * base.heads * base.headDim;
  base.tokenStrides = {row, row, row, row, row, row};

  auto driver = CudaDriver::get();
  if (!driver)
    fail(driver.takeError(), exitCannotRun);
  auto device = useDevice(ordinal);
  if (!device)
    fail(device.takeError(), exitCannotRun);
  std::printf("# %s: device %d, %s (%s)\n\n", toolName, ordinal,
              device->name.c_str(), device->arch.c_str());
  Bench bench(*driver);
  bench.allocate(base);
  for (double dropout : dropouts)
    for (bool backward : {false, true}) {
      AttentionProblem problem = base;
      problem.dropout = dropout;
      problem.backward = backward;
      runProblem(bench, problem, max);
    }
  return 0;
}
