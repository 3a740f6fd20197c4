//===- GemmAlgos.cpp - cuBLASLt's top-N FP8 algorithms against its top-1 ===//
//
// tejit's GEMM runner (runtime/Gemm.cpp) takes the first algorithm
// cublasLtMatmulAlgoGetHeuristic returns. This tool measures what that
// leaves on the table for the FP8 GEMMs of the headline TransformerLayer
// (hidden 4096, QKV 12288, FFN 16384; tokens = seq 2048 x batch 4 = 8192 by
// default): for each GEMM it asks the heuristic for its top N (16) candidates,
// times every one, and reports the best against the top-1.
//
// The 12 GEMMs: for each linear (qkv 4096->12288, proj 4096->4096,
// fc1 4096->16384, fc2 16384->4096, weight W [out, in]), the three GEMMs
// Transformer Engine runs, all FP8 "TN" as Hopper's FP8 kernels need, written
// as the runner's row-major out[M,N] = a[M,K] * b[N,K]^T:
//
//   fprop  Y[T,out]   = X[T,in]      * W[out,in]^T     E4M3 x E4M3, fast acc.
//   dgrad  dX[T,in]   = dY[T,out]    * (W^T)[in,out]^T E5M2 x E4M3
//   wgrad  dW[out,in] = (dY^T)[out,T] * (X^T)[in,T]^T  E5M2 x E4M3
//
// The transposed copies (W^T, dY^T, X^T) are what TE's cast+transpose kernels
// produce; here they are just buffers of the right size. cuBLASLt sees every
// GEMM as the runner shows it (see Gemm.cpp's file comment): column-major
// D[m=N, n=M] = A^T B with A = b (always E4M3), B = a, TRANSA = T,
// TRANSB = N, lda = ldb = K, ldd = N; compute 32F, alpha 1, beta 0, bf16 C
// and D (C = D), epilogue DEFAULT, A/B scale pointers at device floats of
// 1.0 (16-byte aligned), fast accumulation on for fprop only, 256-byte
// alignment preferences (cuMemAlloc's) and the runtime's workspace: 32 MiB,
// of which the runner keeps the first 256 bytes for staging FP8 scalars.
//
// Timing: every algorithm the heuristic returns with state SUCCESS is run 5
// times to warm up, then in 3 batches of 20 launches back to back, each batch
// timed with CUDA events on the stream; an algorithm's time is the median
// batch's time per launch. The fastest of N noisy times is biased low (it is
// partly the luckiest) and clocks drift as the GPU heats, so when the best
// is not the top-1 both are timed again in 5 alternating batches each: the
// "confirmed" speed-up is the ratio of those medians. Inputs are random
// finite FP8 values of magnitude 1/8 to 4 (no NaN or Inf bit patterns), the
// same buffers for every algorithm. When the best algorithm is not the top-1,
// both outputs are compared (max |difference| over max |top-1 output|) so
// that a "faster" algorithm computing something else shows up.
//
//   tejit-gemm-algos [--tokens N] [--algos N] [--device N] [--sustain MS]
//                    [--fprop-bias] [--only LINEARS] [--json FILE]
//                    [--write-tuning FILE [--min-speedup X | --pick N]]
//
// --sustain MS precedes every timed batch with MS ms of the same algorithm
// back to back. A Hopper board at its power limit (an H100 at 700 W under
// FP8 GEMMs) lowers its clocks within a few hundred ms, and the algorithm
// that is fastest at full clocks need not be the fastest there; short
// batches alone measure the first state, which a training step never stays
// in. --write-tuning FILE writes a GEMM tuning file (runtime/GemmTuning.h)
// with the best algorithm of each GEMM whose confirmed speed-up is at least
// --min-speedup (default 1.02) and whose output matches the top-1's; the
// runtime uses it under TEJIT_GEMM_TUNING=FILE. With --pick N the file
// names every GEMM's candidate #N instead, whatever its time: a test of the
// runtime's tuned path (tools/scripts/gpu-tests.sh).
//
// Exit status: 0 when every GEMM was measured, 1 on a failure, 2 when it
// cannot run here (no driver, no GPU, a GPU without FP8, no cuBLASLt) or on a
// bad command line.
//
//===----------------------------------------------------------------------===//
#include "runtime/CublasLt.h"
#include "runtime/CudaDriver.h"
#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/GemmTuning.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace tejit::runtime;

namespace {

constexpr const char *toolName = "tejit-gemm-algos";
constexpr int exitFailed = 1, exitCannotRun = 2;

constexpr int warmupLaunches = 5, launchesPerBatch = 20, batches = 3;
/// Batches of the top-1 and the best, alternating, in the confirmation.
constexpr int confirmBatches = 5;
/// The runtime's GEMM workspace (runtime/Program.cpp) and the part of it the
/// runner keeps for staging FP8 scalars (runtime/Gemm.cpp).
constexpr size_t workspaceBytes = 32u << 20, scalarStagingBytes = 256;
/// cuMemAlloc's alignment, which the runner's preferences see for its
/// buffers (PyTorch's allocator aligns as much).
constexpr uint32_t pointerAlignment = 256;
/// When the best algorithm's output differs from the top-1's by more than
/// this (relative to the largest output), it is flagged. bf16 outputs of
/// sums computed in another order differ by a few bf16 ulps.
constexpr double outputTolerance = 2e-2;

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

/// `text` on one line: a line break and its indentation become "; " (just a
/// space after a colon), so that a multi-line loader message stays readable.
std::string oneLine(const std::string &text) {
  std::string line;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      line += text[i];
      continue;
    }
    while (i + 1 < text.size() && text[i + 1] == ' ')
      ++i;
    line += !line.empty() && line.back() == ':' ? " " : "; ";
  }
  return line;
}

[[noreturn]] void cannotRun(llvm::Error error) {
  std::fprintf(stderr, "%s: cannot run here: %s\n", toolName,
               oneLine(llvm::toString(std::move(error))).c_str());
  std::exit(exitCannotRun);
}

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", toolName, oneLine(message).c_str());
  std::exit(exitFailed);
}

void orDie(llvm::Error error) {
  if (error)
    die(llvm::toString(std::move(error)));
}

template <typename T> T orDie(llvm::Expected<T> value) {
  if (!value)
    die(llvm::toString(value.takeError()));
  return std::move(*value);
}

float fromBf16(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}

template <size_t N> double median(std::array<double, N> values) {
  std::sort(values.begin(), values.end());
  return values[N / 2];
}

double teraflops(int64_t m, int64_t n, int64_t k, double ms) {
  return 2.0 * double(m) * double(n) * double(k) / (ms * 1e-3) / 1e12;
}

//===----------------------------------------------------------------------===//
// The GEMMs
//===----------------------------------------------------------------------===//

enum class Pass { Fprop, Dgrad, Wgrad };

const char *passName(Pass pass) {
  switch (pass) {
  case Pass::Fprop:
    return "fprop";
  case Pass::Dgrad:
    return "dgrad";
  case Pass::Wgrad:
    return "wgrad";
  }
  return "?";
}

/// One GEMM, in the runner's row-major terms: out[M,N] = a[M,K] * b[N,K]^T.
struct Gemm {
  std::string linear;
  Pass pass;
  int64_t m, n, k;

  std::string name() const { return linear + " " + passName(pass); }
  /// a is dY (E5M2) in the backward GEMMs, X (E4M3) in fprop; b is always
  /// E4M3 (W, W^T or X^T).
  bool aIsE5M2() const { return pass != Pass::Fprop; }
  /// TE accumulates the forward GEMM fast (FP8 accumulator precision) and
  /// the gradients in full precision.
  bool fastAccum() const { return pass == Pass::Fprop; }
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
  size_t aBytes() const { return size_t(m * k); }
  size_t bBytes() const { return size_t(n * k); }
  size_t outBytes() const { return size_t(m * n) * 2; }
};

std::vector<Gemm> headlineGemms(int64_t tokens) {
  struct Linear {
    const char *name;
    int64_t in, out;
  };
  const Linear linears[] = {{"qkv", 4096, 12288},
                            {"proj", 4096, 4096},
                            {"fc1", 4096, 16384},
                            {"fc2", 16384, 4096}};
  std::vector<Gemm> gemms;
  for (const Linear &l : linears) {
    gemms.push_back({l.name, Pass::Fprop, tokens, l.out, l.in});
    gemms.push_back({l.name, Pass::Dgrad, tokens, l.in, l.out});
    gemms.push_back({l.name, Pass::Wgrad, l.out, l.in, tokens});
  }
  return gemms;
}

//===----------------------------------------------------------------------===//
// Results
//===----------------------------------------------------------------------===//

struct AlgoTiming {
  /// Position in the heuristic's list (0 = its top-1).
  int index = 0;
  /// Empty when it ran; otherwise why it was skipped.
  std::string failure;
  std::array<double, batches> batchMs{};
  double ms = 0;
  size_t workspace = 0;
  float waves = 0;
  std::string config;
  /// The algorithm's configuration, when it could be read.
  std::optional<AlgoConfig> algo;
};

struct GemmResult {
  Gemm gemm;
  std::vector<AlgoTiming> algos;
  /// The algorithm the runner picks (the heuristic asked for one result) is
  /// the first of the top-N list. If not, `runnerPick` times it.
  bool runnerPickIsFirst = true;
  AlgoTiming runnerPick;
  /// Indices into `algos`.
  int top1 = -1, best = -1;
  /// The confirmation's medians (ms per launch): the first pass's times
  /// when the best is the top-1.
  double confirmedTop1 = 0, confirmedBest = 0;
  /// max |best - top-1| / max |top-1| over the outputs; -1 when not compared
  /// (the best is the top-1), infinite when the best's output is not finite.
  double outputDifference = -1;

  const AlgoTiming &baseline() const {
    return runnerPickIsFirst ? algos[top1] : runnerPick;
  }
  double speedup() const { return baseline().ms / algos[best].ms; }
  double confirmedSpeedup() const { return confirmedTop1 / confirmedBest; }
};

//===----------------------------------------------------------------------===//
// The benchmark
//===----------------------------------------------------------------------===//

template <typename T> struct Destroyer {
  cublasStatus_t (*destroy)(T);
  T object = nullptr;
  ~Destroyer() {
    if (object)
      destroy(object);
  }
};

class Bench {
public:
  Bench(const CudaDriver &driver, const CublasLt &lib, int requested,
        double sustainMs, bool fpropBias)
      : driver(driver), lib(lib), requested(requested), sustainMs(sustainMs),
        fpropBias(fpropBias) {
    orDie(lib.check(lib.cublasLtCreate(&handle), "cublasLtCreate"));
    orDie(driver.check(driver.cuEventCreate(&start, CU_EVENT_DEFAULT),
                       "cuEventCreate"));
    orDie(driver.check(driver.cuEventCreate(&stop, CU_EVENT_DEFAULT),
                       "cuEventCreate"));
    workspace = orDie(DeviceBuffer::allocate(workspaceBytes, "the workspace"));
    // The two scales, 16 bytes apart: FP8 kernels need them 16-byte aligned.
    scales = orDie(DeviceBuffer::allocate(256, "the FP8 scales"));
    const float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    upload(scales, ones, sizeof(ones));
  }
  ~Bench() {
    driver.cuEventDestroy(start);
    driver.cuEventDestroy(stop);
    lib.cublasLtDestroy(handle);
  }

  /// Allocates the inputs and output for `gemms` and fills the inputs.
  void prepare(const std::vector<Gemm> &gemms, uint64_t seed);
  GemmResult run(const Gemm &gemm);
  /// Runs `gemm`'s top-1 for about `ms` milliseconds, so that the first
  /// GEMM measured does not pay for the GPU's clocks ramping up.
  void spinUp(const Gemm &gemm, double ms);

private:
  /// A GEMM's cuBLASLt objects.
  struct Problem {
    Destroyer<cublasLtMatmulDesc_t> desc;
    Destroyer<cublasLtMatrixLayout_t> a, b, d;
    Destroyer<cublasLtMatmulPreference_t> preference;
    const void *aData, *bData;
    void *dData;
  };
  void makeProblem(const Gemm &gemm, Problem &p);
  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(Problem &p, int count);
  cublasStatus_t launch(Problem &p, const cublasLtMatmulAlgo_t &algo);
  /// One batch of launches of a (warm) algorithm: ms per launch. With
  /// --sustain, the batch follows `sustainMs` of the same algorithm back to
  /// back, so that it is timed in the power state it settles into.
  double batch(Problem &p, const cublasLtMatmulAlgo_t &algo);
  AlgoTiming time(Problem &p, const cublasLtMatmulHeuristicResult_t &result,
                  int index);
  std::vector<float> output(const Gemm &gemm);
  void upload(const DeviceBuffer &buffer, const void *data, size_t bytes);
  void synchronize(const char *what) {
    orDie(driver.check(driver.cuStreamSynchronize(stream), what));
  }

  const CudaDriver &driver;
  const CublasLt &lib;
  int requested;
  double sustainMs;
  /// Forward GEMMs with a bf16 bias epilogue (BIAS), as layers with biases
  /// run them: cuBLASLt has fewer kernels for it.
  bool fpropBias;
  /// The GEMM being measured (for the sustained launches' count).
  double currentFlops = 0;
  cublasLtHandle_t handle = nullptr;
  /// The legacy default stream, which the events and cuBLASLt share.
  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  DeviceBuffer workspace, scales;
  /// cuBLASLt's B (the runner's a) in E4M3 and E5M2, its A (the runner's b)
  /// in E4M3, and D: each as large as the largest GEMM needs, every GEMM
  /// using their starts.
  DeviceBuffer aE4M3, aE5M2, bE4M3, out, bias;
};

void Bench::upload(const DeviceBuffer &buffer, const void *data, size_t bytes) {
  orDie(
      driver.check(driver.cuMemcpyHtoDAsync(buffer.get(), data, bytes, stream),
                   "cuMemcpyHtoDAsync"));
  synchronize("uploading inputs");
}

void Bench::prepare(const std::vector<Gemm> &gemms, uint64_t seed) {
  size_t aBytes = 0, bBytes = 0, outBytes = 0;
  for (const Gemm &gemm : gemms) {
    aBytes = std::max(aBytes, gemm.aBytes());
    bBytes = std::max(bBytes, gemm.bBytes());
    outBytes = std::max(outBytes, gemm.outBytes());
  }
  aE4M3 = orDie(DeviceBuffer::allocate(aBytes, "E4M3 activations"));
  aE5M2 = orDie(DeviceBuffer::allocate(aBytes, "E5M2 gradients"));
  bE4M3 = orDie(DeviceBuffer::allocate(bBytes, "E4M3 weights"));
  out = orDie(DeviceBuffer::allocate(outBytes, "the bf16 outputs"));
  size_t biasBytes = 0;
  for (const Gemm &gemm : gemms)
    biasBytes = std::max(biasBytes, size_t(gemm.n) * 2);
  bias = orDie(DeviceBuffer::allocate(biasBytes, "the bf16 bias"));
  std::vector<uint16_t> biasValues(biasBytes / 2, 0x3c00); // bf16 0.0078
  upload(bias, biasValues.data(), biasBytes);

  // Random FP8 bytes mapped to finite values of magnitude 1/8 to 4: a
  // random sign and mantissa, an exponent of -3 to 1. Random raw bytes would
  // hold NaNs (and Infs in E5M2).
  auto encoder = [](int mantissaBits, int bias) {
    std::array<uint8_t, 256> table;
    for (int raw = 0; raw < 256; ++raw) {
      int sign = raw & 0x80, mantissa = raw & ((1 << mantissaBits) - 1);
      int exponent = bias - 3 + (raw >> mantissaBits & 0xf) % 5;
      table[raw] = uint8_t(sign | exponent << mantissaBits | mantissa);
    }
    return table;
  };
  const std::array<uint8_t, 256> e4m3 = encoder(3, 7), e5m2 = encoder(2, 15);
  std::mt19937_64 random(seed);
  std::vector<uint8_t> host;
  auto fill = [&](const DeviceBuffer &buffer,
                  const std::array<uint8_t, 256> &table) {
    host.resize(buffer.bytes());
    for (size_t i = 0; i < host.size(); i += 8) {
      uint64_t bits = random();
      for (size_t j = 0; j < 8 && i + j < host.size(); ++j)
        host[i + j] = table[bits >> (8 * j) & 0xff];
    }
    upload(buffer, host.data(), host.size());
  };
  fill(aE4M3, e4m3);
  fill(aE5M2, e5m2);
  fill(bE4M3, e4m3);
}

void Bench::makeProblem(const Gemm &gemm, Problem &p) {
  p.desc.destroy = lib.cublasLtMatmulDescDestroy;
  p.a.destroy = p.b.destroy = p.d.destroy = lib.cublasLtMatrixLayoutDestroy;
  p.preference.destroy = lib.cublasLtMatmulPreferenceDestroy;
  p.aData = reinterpret_cast<const void *>(bE4M3.get());
  p.bData = reinterpret_cast<const void *>(gemm.aIsE5M2() ? aE5M2.get()
                                                          : aE4M3.get());
  p.dData = reinterpret_cast<void *>(out.get());

  orDie(lib.check(lib.cublasLtMatmulDescCreate(&p.desc.object,
                                               CUBLAS_COMPUTE_32F, CUDA_R_32F),
                  "cublasLtMatmulDescCreate"));
  auto set = [&](cublasLtMatmulDescAttributes_t attribute, const auto &value,
                 const char *name) {
    orDie(
        lib.check(lib.cublasLtMatmulDescSetAttribute(p.desc.object, attribute,
                                                     &value, sizeof(value)),
                  std::string("cublasLtMatmulDescSetAttribute(") + name + ")"));
  };
  // The attributes the runner sets for an FP8 GEMM without an epilogue, in
  // its order; cuBLASLt's A scale is the runner's b's, its B scale a's.
  set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T), "TRANSA");
  set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N), "TRANSB");
  bool withBias = fpropBias && gemm.pass == Pass::Fprop;
  set(CUBLASLT_MATMUL_DESC_EPILOGUE,
      uint32_t(withBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT),
      "EPILOGUE");
  if (withBias) {
    set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_16BF),
        "BIAS_DATA_TYPE");
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER,
        reinterpret_cast<const void *>(bias.get()), "BIAS_POINTER");
  }
  set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(gemm.fastAccum() ? 1 : 0),
      "FAST_ACCUM");
  const void *aScale = reinterpret_cast<const void *>(scales.get());
  const void *bScale = reinterpret_cast<const void *>(scales.get() + 16);
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, aScale, "A_SCALE_POINTER");
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, bScale, "B_SCALE_POINTER");

  // Column-major layouts of the stored matrices: A [K, N], B [K, M], D (and
  // C) [N, M].
  auto layout = [&](Destroyer<cublasLtMatrixLayout_t> &l, cudaDataType_t type,
                    int64_t rows, int64_t cols, const char *which) {
    orDie(lib.check(
        lib.cublasLtMatrixLayoutCreate(&l.object, type, rows, cols, rows),
        std::string("cublasLtMatrixLayoutCreate(") + which + ")"));
  };
  layout(p.a, CUDA_R_8F_E4M3, gemm.k, gemm.n, "A");
  layout(p.b, gemm.aIsE5M2() ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3, gemm.k, gemm.m,
         "B");
  layout(p.d, CUDA_R_16BF, gemm.n, gemm.m, "D");

  orDie(lib.check(lib.cublasLtMatmulPreferenceCreate(&p.preference.object),
                  "cublasLtMatmulPreferenceCreate"));
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute,
                    const auto &value) {
    orDie(lib.check(lib.cublasLtMatmulPreferenceSetAttribute(
                        p.preference.object, attribute, &value, sizeof(value)),
                    "cublasLtMatmulPreferenceSetAttribute"));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
         uint64_t(workspaceBytes - scalarStagingBytes));
  for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    prefer(attribute, pointerAlignment);
}

std::vector<cublasLtMatmulHeuristicResult_t> Bench::heuristic(Problem &p,
                                                              int count) {
  std::vector<cublasLtMatmulHeuristicResult_t> results(count);
  int found = 0;
  cublasStatus_t status = lib.cublasLtMatmulAlgoGetHeuristic(
      handle, p.desc.object, p.a.object, p.b.object, p.d.object, p.d.object,
      p.preference.object, count, results.data(), &found);
  // NOT_SUPPORTED is how the heuristic says it found nothing.
  if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED)
    orDie(lib.error(status, "cublasLtMatmulAlgoGetHeuristic"));
  results.resize(status == CUBLAS_STATUS_SUCCESS ? found : 0);
  return results;
}

cublasStatus_t Bench::launch(Problem &p, const cublasLtMatmulAlgo_t &algo) {
  static const float one = 1.0f, zero = 0.0f;
  // The workspace past the runner's scalar slots, as the runner passes it.
  void *work = reinterpret_cast<void *>(workspace.get() + scalarStagingBytes);
  return lib.cublasLtMatmul(handle, p.desc.object, &one, p.aData, p.a.object,
                            p.bData, p.b.object, &zero, p.dData, p.d.object,
                            p.dData, p.d.object, &algo, work,
                            workspaceBytes - scalarStagingBytes, stream);
}

AlgoTiming Bench::time(Problem &p,
                       const cublasLtMatmulHeuristicResult_t &result,
                       int index) {
  AlgoTiming timing;
  timing.index = index;
  timing.workspace = result.workspaceSize;
  timing.waves = result.wavesCount;
  if (llvm::Expected<AlgoConfig> config = lib.configOf(result.algo)) {
    timing.algo = *config;
    timing.config = config->describe();
  } else {
    timing.config = oneLine(llvm::toString(config.takeError()));
  }
  if (result.state != CUBLAS_STATUS_SUCCESS) {
    timing.failure = "heuristic state " + lib.statusText(result.state);
    return timing;
  }
  // Some candidates fail at launch (cuBLASLt checks more there than in the
  // heuristic): skip them rather than stop.
  for (int i = 0; i < warmupLaunches; ++i)
    if (cublasStatus_t status = launch(p, result.algo);
        status != CUBLAS_STATUS_SUCCESS) {
      timing.failure = "cublasLtMatmul: " + lib.statusText(status);
      synchronize("running a GEMM");
      return timing;
    }
  synchronize("running a GEMM");
  for (double &ms : timing.batchMs)
    ms = batch(p, result.algo);
  timing.ms = median(timing.batchMs);
  return timing;
}

double Bench::batch(Problem &p, const cublasLtMatmulAlgo_t &algo) {
  if (sustainMs > 0) {
    // Launches at about 1000 TFLOP/s fill sustainMs (slower GPUs: longer).
    double launchMs = std::max(currentFlops / 1e12, 0.01);
    for (int i = 0; i < std::max(int(sustainMs / launchMs), 1); ++i)
      if (launch(p, algo) != CUBLAS_STATUS_SUCCESS)
        break;
  }
  orDie(driver.check(driver.cuEventRecord(start, stream), "cuEventRecord"));
  for (int i = 0; i < launchesPerBatch; ++i)
    if (cublasStatus_t status = launch(p, algo);
        status != CUBLAS_STATUS_SUCCESS)
      die("cublasLtMatmul failed after succeeding: " + lib.statusText(status));
  orDie(driver.check(driver.cuEventRecord(stop, stream), "cuEventRecord"));
  orDie(driver.check(driver.cuEventSynchronize(stop), "cuEventSynchronize"));
  float elapsed = 0;
  orDie(driver.check(driver.cuEventElapsedTime(&elapsed, start, stop),
                     "cuEventElapsedTime"));
  return elapsed / launchesPerBatch;
}

std::vector<float> Bench::output(const Gemm &gemm) {
  std::vector<uint16_t> bits(gemm.outBytes() / 2);
  orDie(driver.check(
      driver.cuMemcpyDtoHAsync(bits.data(), out.get(), gemm.outBytes(), stream),
      "cuMemcpyDtoHAsync"));
  synchronize("downloading an output");
  std::vector<float> values(bits.size());
  std::transform(bits.begin(), bits.end(), values.begin(), fromBf16);
  return values;
}

void Bench::spinUp(const Gemm &gemm, double ms) {
  Problem p;
  makeProblem(gemm, p);
  std::vector<cublasLtMatmulHeuristicResult_t> top = heuristic(p, 1);
  if (top.empty())
    return; // run() reports it.
  // A launch's time at about 1000 TFLOP/s (Hopper's dense FP8 peak is near
  // that); a slower GPU just spins up for longer.
  double launchMs = std::max(gemm.flops() / 1e12, 0.01);
  for (int i = 0; i < std::max(int(ms / launchMs), 10); ++i)
    if (launch(p, top[0].algo) != CUBLAS_STATUS_SUCCESS)
      break;
  synchronize("warming the GPU up");
}

GemmResult Bench::run(const Gemm &gemm) {
  GemmResult r;
  r.gemm = gemm;
  currentFlops = gemm.flops();
  Problem p;
  makeProblem(gemm, p);
  // What the runner uses: the heuristic asked for one algorithm.
  std::vector<cublasLtMatmulHeuristicResult_t> pick = heuristic(p, 1);
  std::vector<cublasLtMatmulHeuristicResult_t> candidates =
      heuristic(p, requested);
  if (pick.empty() || candidates.empty())
    die("cuBLASLt " + lib.versionString() + " has no algorithm for " +
        gemm.name());
  r.runnerPickIsFirst = std::memcmp(&pick[0].algo, &candidates[0].algo,
                                    sizeof(cublasLtMatmulAlgo_t)) == 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    r.algos.push_back(time(p, candidates[i], int(i)));
    const AlgoTiming &t = r.algos.back();
    if (!t.failure.empty())
      continue;
    if (r.top1 < 0)
      r.top1 = int(i);
    if (r.best < 0 || t.ms < r.algos[r.best].ms)
      r.best = int(i);
  }
  if (r.top1 != 0)
    die(gemm.name() +
        ": the heuristic's top-1 algorithm did not run: " + r.algos[0].failure);
  if (!r.runnerPickIsFirst) {
    r.runnerPick = time(p, pick[0], -1);
    if (!r.runnerPick.failure.empty())
      die(gemm.name() +
          ": the runner's algorithm did not run: " + r.runnerPick.failure);
  }

  // The confirmation: the top-1 (the runner's pick) and the best again, in
  // alternating batches, so that both see the same clocks.
  const cublasLtMatmulAlgo_t &baseline =
      r.runnerPickIsFirst ? candidates[r.top1].algo : pick[0].algo;
  r.confirmedTop1 = r.baseline().ms;
  r.confirmedBest = r.algos[r.best].ms;
  if (r.best != r.top1 || !r.runnerPickIsFirst) {
    std::array<double, confirmBatches> top1Ms, bestMs;
    for (int i = 0; i < confirmBatches; ++i) {
      top1Ms[i] = batch(p, baseline);
      bestMs[i] = batch(p, candidates[r.best].algo);
    }
    r.confirmedTop1 = median(top1Ms);
    r.confirmedBest = median(bestMs);
  }

  // Does the best algorithm compute the same thing?
  if (r.best != r.top1 || !r.runnerPickIsFirst) {
    std::vector<float> reference, other;
    if (launch(p, baseline) == CUBLAS_STATUS_SUCCESS)
      reference = output(gemm);
    if (launch(p, candidates[r.best].algo) == CUBLAS_STATUS_SUCCESS)
      other = output(gemm);
    if (!reference.empty() && !other.empty()) {
      double largest = 0, difference = 0;
      for (size_t i = 0; i < reference.size(); ++i) {
        largest = std::max(largest, double(std::fabs(reference[i])));
        difference =
            std::max(difference, double(std::fabs(reference[i] - other[i])));
      }
      // NaNs fail both comparisons above: make them count.
      bool finite = std::all_of(other.begin(), other.end(),
                                [](float v) { return std::isfinite(v); });
      r.outputDifference =
          finite ? difference / std::max(largest, 1e-30) : INFINITY;
    }
  }
  return r;
}

//===----------------------------------------------------------------------===//
// Reporting
//===----------------------------------------------------------------------===//

void printTable(const std::vector<GemmResult> &results) {
  std::printf("%-11s %6s %6s %6s %6s %9s %9s %5s %8s %10s %9s %9s\n", "gemm",
              "M", "N", "K", "algos", "top-1 ms", "best ms", "best#",
              "speed-up", "top-1 TF/s", "best TF/s", "confirmed");
  double top1Total = 0, bestTotal = 0, flops = 0;
  double confirmedTop1 = 0, confirmedBest = 0;
  for (const GemmResult &r : results) {
    const Gemm &g = r.gemm;
    const AlgoTiming &top1 = r.baseline(), &best = r.algos[r.best];
    int ran = int(
        std::count_if(r.algos.begin(), r.algos.end(),
                      [](const AlgoTiming &t) { return t.failure.empty(); }));
    std::string algos =
        std::to_string(ran) + "/" + std::to_string(r.algos.size());
    std::printf("%-11s %6lld %6lld %6lld %6s %9.4f %9.4f %5d %7.3fx %10.1f "
                "%9.1f %8.3fx\n",
                g.name().c_str(), (long long)g.m, (long long)g.n,
                (long long)g.k, algos.c_str(), top1.ms, best.ms, r.best,
                r.speedup(), teraflops(g.m, g.n, g.k, top1.ms),
                teraflops(g.m, g.n, g.k, best.ms), r.confirmedSpeedup());
    top1Total += top1.ms;
    bestTotal += best.ms;
    confirmedTop1 += r.confirmedTop1;
    confirmedBest += r.confirmedBest;
    flops += g.flops();
  }
  std::printf("%-11s %27s %9.4f %9.4f %5s %7.3fx %10.1f %9.1f %8.3fx\n",
              "total", "", top1Total, bestTotal, "", top1Total / bestTotal,
              flops / (top1Total * 1e-3) / 1e12,
              flops / (bestTotal * 1e-3) / 1e12, confirmedTop1 / confirmedBest);
  std::printf("(confirmed: top-1 and best timed again in %d alternating "
              "batches each; totals %.4f ms vs %.4f ms)\n",
              confirmBatches, confirmedTop1, confirmedBest);

  // What the table cannot show: which algorithms won, and anything odd.
  std::printf("\nbest algorithms (cublasLt.h enum values):\n");
  for (const GemmResult &r : results) {
    std::printf("  %-11s #%-2d %s\n", r.gemm.name().c_str(), r.best,
                r.algos[r.best].config.c_str());
    if (r.best != r.top1 || !r.runnerPickIsFirst)
      std::printf("  %-11s top-1 %s\n", "", r.baseline().config.c_str());
  }
  for (const GemmResult &r : results) {
    if (!r.runnerPickIsFirst)
      std::printf("note: %s: the heuristic's single pick differs from the "
                  "first of its top-%zu; the top-1 column times the single "
                  "pick\n",
                  r.gemm.name().c_str(), r.algos.size());
    if (r.outputDifference > outputTolerance)
      std::printf("WARNING: %s: the best algorithm's output differs from the "
                  "top-1's by %.3g of its largest value\n",
                  r.gemm.name().c_str(), r.outputDifference);
    for (const AlgoTiming &t : r.algos)
      if (!t.failure.empty())
        std::printf("note: %s: algorithm #%d skipped: %s\n",
                    r.gemm.name().c_str(), t.index, t.failure.c_str());
  }
}

void writeJson(const std::string &path, const DeviceInfo &device,
               const CublasLt &lib, int64_t tokens, int requested,
               const std::vector<GemmResult> &results) {
  std::error_code error;
  llvm::raw_fd_ostream file(path, error);
  if (error)
    die("cannot write " + path + ": " + error.message());
  llvm::json::OStream json(file, 2);
  auto algoJson = [&](const Gemm &g, const AlgoTiming &t) {
    json.object([&] {
      json.attribute("index", t.index);
      json.attribute("config", t.config);
      json.attribute("workspace_bytes", int64_t(t.workspace));
      json.attribute("waves", double(t.waves));
      if (!t.failure.empty()) {
        json.attribute("skipped", t.failure);
        return;
      }
      json.attribute("ms", t.ms);
      json.attributeArray("batch_ms", [&] {
        for (double ms : t.batchMs)
          json.value(ms);
      });
      json.attribute("tflops", teraflops(g.m, g.n, g.k, t.ms));
    });
  };
  double top1Total = 0, bestTotal = 0, confirmedTop1 = 0, confirmedBest = 0;
  json.object([&] {
    json.attribute("tool", toolName);
    json.attribute("device", device.name);
    json.attribute("arch", device.arch);
    json.attribute("cublaslt", lib.versionString());
    json.attribute("cublaslt_path", lib.path);
    json.attribute("tokens", tokens);
    json.attribute("requested_algos", requested);
    json.attribute("workspace_bytes", int64_t(workspaceBytes));
    json.attribute("warmup_launches", warmupLaunches);
    json.attribute("launches_per_batch", launchesPerBatch);
    json.attribute("batches", batches);
    json.attribute("confirm_batches", confirmBatches);
    json.attributeArray("gemms", [&] {
      for (const GemmResult &r : results) {
        const Gemm &g = r.gemm;
        const AlgoTiming &top1 = r.baseline(), &best = r.algos[r.best];
        top1Total += top1.ms;
        bestTotal += best.ms;
        confirmedTop1 += r.confirmedTop1;
        confirmedBest += r.confirmedBest;
        json.object([&] {
          json.attribute("name", g.name());
          json.attribute("linear", g.linear);
          json.attribute("pass", passName(g.pass));
          json.attribute("m", g.m);
          json.attribute("n", g.n);
          json.attribute("k", g.k);
          json.attribute("a_type", g.aIsE5M2() ? "e5m2" : "e4m3");
          json.attribute("b_type", "e4m3");
          json.attribute("fast_accum", g.fastAccum());
          json.attribute("top1_ms", top1.ms);
          json.attribute("best_ms", best.ms);
          json.attribute("best_index", r.best);
          json.attribute("speedup", r.speedup());
          json.attribute("top1_tflops", teraflops(g.m, g.n, g.k, top1.ms));
          json.attribute("best_tflops", teraflops(g.m, g.n, g.k, best.ms));
          json.attribute("confirmed_top1_ms", r.confirmedTop1);
          json.attribute("confirmed_best_ms", r.confirmedBest);
          json.attribute("confirmed_speedup", r.confirmedSpeedup());
          json.attribute("runner_pick_is_first", r.runnerPickIsFirst);
          if (!r.runnerPickIsFirst) {
            json.attributeBegin("runner_pick");
            algoJson(g, r.runnerPick);
            json.attributeEnd();
          }
          // JSON has no infinity: a non-finite output is null.
          if (r.outputDifference >= 0)
            json.attribute("best_output_difference",
                           std::isfinite(r.outputDifference)
                               ? llvm::json::Value(r.outputDifference)
                               : llvm::json::Value(nullptr));
          json.attributeArray("algos", [&] {
            for (const AlgoTiming &t : r.algos)
              algoJson(g, t);
          });
        });
      }
    });
    json.attributeObject("total", [&] {
      json.attribute("top1_ms", top1Total);
      json.attribute("best_ms", bestTotal);
      json.attribute("speedup", top1Total / bestTotal);
      json.attribute("confirmed_top1_ms", confirmedTop1);
      json.attribute("confirmed_best_ms", confirmedBest);
      json.attribute("confirmed_speedup", confirmedTop1 / confirmedBest);
    });
  });
  file << "\n";
  file.close();
  if (file.has_error())
    die("cannot write " + path + ": " + file.error().message());
}

/// The tuning file: the confirmed winners of at least `minSpeedup`, or with
/// `pick` every GEMM's candidate #pick whatever its time (to test the
/// runtime's tuned path with an algorithm the heuristic would not pick).
void writeTuning(const std::string &path, const DeviceInfo &device,
                 const CublasLt &lib, const std::vector<GemmResult> &results,
                 double minSpeedup, std::optional<int> pick) {
  GemmTuning tuning;
  tuning.device = device.name;
  tuning.cublasLt = lib.versionString();
  for (const GemmResult &r : results) {
    const AlgoTiming *chosen = &r.algos[r.best];
    double tunedMs = r.confirmedBest;
    if (pick) {
      if (*pick >= int(r.algos.size()) || !r.algos[*pick].failure.empty())
        continue;
      chosen = &r.algos[*pick];
      tunedMs = chosen->ms;
    } else {
      bool differs = r.best != r.top1 || !r.runnerPickIsFirst;
      if (!differs || r.confirmedSpeedup() < minSpeedup ||
          !(r.outputDifference <= outputTolerance))
        continue;
    }
    if (!chosen->algo)
      continue;
    TunedGemm gemm;
    gemm.m = r.gemm.m;
    gemm.n = r.gemm.n;
    gemm.k = r.gemm.k;
    gemm.a = r.gemm.aIsE5M2() ? ElementType::F8E5M2 : ElementType::F8E4M3;
    gemm.b = ElementType::F8E4M3;
    gemm.fastAccum = r.gemm.fastAccum();
    gemm.algo = *chosen->algo;
    gemm.heuristicMs = pick ? r.baseline().ms : r.confirmedTop1;
    gemm.tunedMs = tunedMs;
    tuning.gemms.push_back(gemm);
  }
  std::error_code error;
  llvm::raw_fd_ostream file(path, error);
  if (error)
    die("cannot write " + path + ": " + error.message());
  tuning.write(file);
  file.close();
  if (file.has_error())
    die("cannot write " + path + ": " + file.error().message());
  if (pick)
    std::printf("\nwrote %s: candidate #%d of %zu of %zu GEMMs, whatever "
                "its time\n",
                path.c_str(), *pick, tuning.gemms.size(), results.size());
  else
    std::printf("\nwrote %s: %zu of %zu GEMMs with a confirmed speed-up of "
                "%.2fx or more\n",
                path.c_str(), tuning.gemms.size(), results.size(), minSpeedup);
}

[[noreturn]] void usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s [--tokens N] [--algos N] [--device N] [--sustain "
               "MS] [--fprop-bias] [--only LINEARS] [--json FILE] "
               "[--write-tuning FILE "
               "[--min-speedup X | --pick N]]\n"
               "  --tokens N  the GEMMs' token count (seq x batch; default "
               "8192, a multiple of 16)\n"
               "  --algos N   heuristic candidates per GEMM (default 16)\n"
               "  --device N  the CUDA device (default 0)\n"
               "  --sustain MS run each timed batch after MS ms of the same "
               "algorithm back to back (the power-capped state; default 0)\n"
               "  --fprop-bias forward GEMMs with a bf16 bias epilogue, "
               "as layers with biases run them\n"
               "  --only LINEARS comma-separated linears to measure (qkv, "
               "proj, fc1, fc2; default all)\n"
               "  --json FILE also write the results as JSON\n"
               "  --write-tuning FILE write a GEMM tuning file "
               "(TEJIT_GEMM_TUNING) with the confirmed winners\n"
               "  --min-speedup X the confirmed speed-up a winner needs "
               "(default 1.02)\n"
               "  --pick N    --write-tuning records every GEMM's candidate "
               "#N instead, whatever its time (tests the tuned path)\n",
               argv0);
  std::exit(exitCannotRun);
}

} // namespace

int main(int argc, char **argv) {
  int64_t tokens = 8192;
  int requested = 16, ordinal = 0;
  std::string jsonPath, only, tuningPath;
  double sustainMs = 0, minSpeedup = 1.02;
  bool fpropBias = false;
  std::optional<int> pick;
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
    if (arg == "--tokens")
      tokens = number(16, int64_t(1) << 20);
    else if (arg == "--algos")
      requested = int(number(1, 256));
    else if (arg == "--device")
      ordinal = int(number(0, 1024));
    else if (arg == "--sustain")
      sustainMs = double(number(0, 60000));
    else if (arg == "--pick")
      pick = int(number(0, 255));
    else if (arg == "--fprop-bias")
      fpropBias = true;
    else if (arg == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (arg == "--json" && i + 1 < argc)
      jsonPath = argv[++i];
    else if (arg == "--write-tuning" && i + 1 < argc)
      tuningPath = argv[++i];
    else if (arg == "--min-speedup" && i + 1 < argc) {
      char *end = nullptr;
      minSpeedup = std::strtod(argv[++i], &end);
      if (*end || !(minSpeedup >= 1.0))
        usage(argv[0]);
    } else
      usage(argv[0]);
  }
  // The wgrad GEMMs' K is the token count; FP8 kernels need 16-byte leading
  // dimensions.
  if (tokens % 16 != 0) {
    std::fprintf(stderr, "%s: --tokens must be a multiple of 16\n", toolName);
    return exitCannotRun;
  }

  auto driver = CudaDriver::get();
  if (!driver)
    cannotRun(driver.takeError());
  auto device = useDevice(ordinal);
  if (!device)
    cannotRun(device.takeError());
  auto lib = CublasLt::get();
  if (!lib)
    cannotRun(lib.takeError());
  std::printf("device %d: %s (%s), cuBLASLt %s (%s)\n", ordinal,
              device->name.c_str(), device->arch.c_str(),
              lib->versionString().c_str(), lib->path.c_str());
  std::printf("tokens %lld; top-%d heuristic candidates per GEMM; %d warm-up "
              "launches, median of %d batches of %d launches\n\n",
              (long long)tokens, requested, warmupLaunches, batches,
              launchesPerBatch);
  std::fflush(stdout);

  std::vector<Gemm> gemms = headlineGemms(tokens);
  if (!only.empty()) {
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(only).split(names, ',');
    llvm::erase_if(gemms, [&](const Gemm &gemm) {
      return !llvm::is_contained(names, gemm.linear);
    });
    if (gemms.empty())
      usage(argv[0]);
  }
  if (sustainMs > 0)
    std::printf("every timed batch follows %.0f ms of the same algorithm "
                "back to back\n",
                sustainMs);
  if (fpropBias)
    std::printf("forward GEMMs add a bf16 bias (epilogue BIAS)\n");
  Bench bench(*driver, *lib, requested, sustainMs, fpropBias);
  bench.prepare(gemms, /*seed=*/1);
  bench.spinUp(gemms.front(), 500);
  std::vector<GemmResult> results;
  for (const Gemm &gemm : gemms) {
    results.push_back(bench.run(gemm));
    const GemmResult &r = results.back();
    // Progress, on stderr so that stdout is just the report.
    std::fprintf(stderr,
                 "  %-11s %zu candidates: top-1 %.4f ms, best #%d %.4f "
                 "ms\n",
                 gemm.name().c_str(), r.algos.size(), r.baseline().ms, r.best,
                 r.algos[r.best].ms);
  }
  printTable(results);
  if (!jsonPath.empty())
    writeJson(jsonPath, *device, *lib, tokens, requested, results);
  if (!tuningPath.empty())
    writeTuning(tuningPath, *device, *lib, results, minSpeedup, pick);
  return 0;
}
