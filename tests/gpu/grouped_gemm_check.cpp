//===- grouped_gemm_check.cpp - grouped GEMMs against float64 -------------===//
//
// Runs the runtime's grouped GEMM (runtime/GroupedGemm.h, through the
// cuBLASLt GemmRunner) on the GPU over random data and compares every
// output with a float64 product computed on the host from the same
// (rounded) inputs (docs/grouped-linear.md):
//
//   * bf16 rows (fprop: b [G, N, K]; dgrad: b [G, K, N]), with and without
//     a per-group bias, f32 and bf16 outputs, sizes that are no multiples of
//     16; bf16 contraction (wgrad: a [T, M] transposed, b [T, N]; and the
//     column-range layout a [M, T], b [N, T]);
//   * FP8 E4M3 x E4M3 and E5M2 x E4M3, rows (with a bias) and contraction
//     (column ranges of [., T] operands, leading dimension T), each group
//     with its own random power-of-two scale_inv for a and b (a misplaced
//     scale moves a product by up to 2^12);
//   * G = 1, 4 and 8 with an empty group and padding rows after the last
//     group: padding rows (rows form) and empty groups' products
//     (contraction) must be exactly 0, every byte after the output must be
//     untouched (the output starts as NaN bytes);
//   * one real size, T = 8192, K = 4096, N = 2048, G = 8: rows bf16 and FP8
//     with bias, FP8 and bf16 wgrad contractions; 8192 sampled entries are
//     compared (all padding rows and empty groups in full), and each GEMM
//     set is timed;
//   * the executor's path: a plan with a host m_splits argument (parsed
//     from JSON), run twice with other splits from a host pointer, a run
//     with bad splits (an error naming m_splits, nothing written), and a
//     run in a capturing stream (refused);
//   * the pinned staging ring of host arguments (HostArgumentStaging):
//     more uploads than it has slots while the GPU is busy, each one's
//     device copy snapshotted on the stream and compared afterwards.
//
// Relative L2 error must stay within 1e-2 for bf16 outputs and 2e-3 for f32
// ones. One line per case (PASS/FAIL), a summary, exit status 1 on any
// failure, 77 (skipped) without a GPU.
//
//   tejit-grouped-gemm-check [--seed N] [--filter TEXT] [--no-large]
//
// Built with the runtime (build/bin/tejit-grouped-gemm-check), which
// tools/scripts/pack-gpu.sh copies to .gpu/bin; run it on the GPU machine
// after `source tools/scripts/gpu-env.sh`.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaDriver.h"
#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Executor.h"
#include "runtime/Gemm.h"
#include "runtime/GroupedGemm.h"
#include "runtime/HostArguments.h"
#include "runtime/Plan.h"
#include "tests/gpu/CheckExit.h"
#include "tests/runtime/ReversedGroups.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace tejit::runtime;
using namespace tejit::gpucheck;
using Form = GroupedGemmStep::Form;

namespace {

//===----------------------------------------------------------------------===//
// Element encodings (host side)
//===----------------------------------------------------------------------===//

uint16_t toBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fff + ((bits >> 16) & 1); // round to nearest even
  return uint16_t(bits >> 16);
}
double fromBf16(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}
/// E4M3FN: bias 7, no infinities, 0x7f/0xff NaN.
double fromE4M3(uint8_t v) {
  int sign = v >> 7, exponent = (v >> 3) & 15, mantissa = v & 7;
  double magnitude = exponent == 0
                         ? std::ldexp(mantissa / 8.0, -6)
                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}
/// E5M2: bias 15.
double fromE5M2(uint8_t v) {
  int sign = v >> 7, exponent = (v >> 2) & 31, mantissa = v & 3;
  double magnitude = exponent == 0
                         ? std::ldexp(mantissa / 4.0, -14)
                         : std::ldexp(1.0 + mantissa / 4.0, exponent - 15);
  return sign ? -magnitude : magnitude;
}

/// A host matrix: its bytes as the device holds them, and the exact values.
struct HostTensor {
  ElementType type = ElementType::BF16;
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};

/// Random values of `type`, about unit magnitude (FP8: exponents 2^-3 ..
/// 2^3, every mantissa, either sign).
HostTensor randomTensor(ElementType type, size_t count, std::mt19937_64 &rng) {
  HostTensor tensor;
  tensor.type = type;
  tensor.bytes.resize(count * elementBytes(type));
  tensor.values.resize(count);
  std::uniform_int_distribution<uint32_t> bits;
  for (size_t i = 0; i < count; ++i) {
    uint32_t r = bits(rng);
    switch (type) {
    case ElementType::BF16: {
      // Uniform in [-2, 2), rounded to bf16.
      float value = (float(r >> 8) / float(1u << 24)) * 4.0f - 2.0f;
      uint16_t encoded = toBf16(value);
      std::memcpy(&tensor.bytes[2 * i], &encoded, 2);
      tensor.values[i] = fromBf16(encoded);
      break;
    }
    case ElementType::F8E4M3: {
      uint8_t encoded =
          uint8_t((r & 0x80) | ((4 + (r >> 8) % 7) << 3) | ((r >> 16) & 7));
      tensor.bytes[i] = encoded;
      tensor.values[i] = fromE4M3(encoded);
      break;
    }
    case ElementType::F8E5M2: {
      uint8_t encoded =
          uint8_t((r & 0x80) | ((12 + (r >> 8) % 7) << 2) | ((r >> 16) & 3));
      tensor.bytes[i] = encoded;
      tensor.values[i] = fromE5M2(encoded);
      break;
    }
    case ElementType::F32: {
      // Uniform in [-8, 8): main_grads the size of a few products.
      float value = (float(r >> 8) / float(1u << 24)) * 16.0f - 8.0f;
      std::memcpy(&tensor.bytes[4 * i], &value, 4);
      tensor.values[i] = value;
      break;
    }
    default:
      std::fprintf(stderr, "unsupported random type\n");
      std::exit(1);
    }
  }
  return tensor;
}

double readElement(const std::vector<uint8_t> &bytes, ElementType type,
                   size_t index) {
  if (type == ElementType::F32) {
    float value;
    std::memcpy(&value, &bytes[4 * index], 4);
    return value;
  }
  uint16_t value;
  std::memcpy(&value, &bytes[2 * index], 2);
  return fromBf16(value);
}

//===----------------------------------------------------------------------===//
// The GPU
//===----------------------------------------------------------------------===//

struct Gpu {
  const CudaDriver &driver;
  CUstream stream = nullptr;

  DeviceBuffer allocate(size_t bytes, const char *what) const {
    return orDie(DeviceBuffer::allocate(std::max<size_t>(bytes, 256), what));
  }
  void upload(const DeviceBuffer &buffer, const void *data,
              size_t bytes) const {
    check(driver.check(
        driver.cuMemcpyHtoDAsync(buffer.get(), data, bytes, stream), "upload"));
    sync();
  }
  void download(void *data, CUdeviceptr from, size_t bytes) const {
    check(driver.check(driver.cuMemcpyDtoHAsync(data, from, bytes, stream),
                       "download"));
    sync();
  }
  void fill(const DeviceBuffer &buffer, uint8_t value) const {
    check(driver.check(
        driver.cuMemsetD8Async(buffer.get(), value, buffer.bytes(), stream),
        "fill"));
    sync();
  }
  void sync() const {
    check(driver.check(driver.cuStreamSynchronize(stream), "synchronize"));
  }
};

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

struct Case {
  std::string name;
  Form form = Form::Rows;
  bool fp8 = false;
  ElementType a = ElementType::BF16, b = ElementType::BF16,
              out = ElementType::BF16;
  /// Rows: a [T, K], b [G, N, K] or [G, K, N], out [T, N]. Contraction:
  /// out [G, M, N], K = m_g.
  int64_t tokens = 0, k = 0, m = 0, n = 0;
  std::vector<int32_t> splits;
  bool bias = false, transposeA = false, transposeB = false;
  bool fastAccum = false;
  /// Contraction form: add the products to a random f32 tensor of out's
  /// shape (fuse_wgrad_accumulation's main_grad), in another buffer, in out
  /// itself, or in place in G matrices given by per-group pointers (laid
  /// out in reverse group order, as Megatron-Core's gradient buffer holds a
  /// GroupedLinear's main_grads).
  enum class Accumulate {
    None,
    OtherBuffer,
    InPlace,
    PerGroupReversed
  } accumulate = Accumulate::None;
  /// Compare this many sampled entries (0: all).
  size_t samples = 0;
  bool timed = false;
  /// Run the groups on side streams (GemmLanes) where they are small.
  bool lanes = false;
};

int64_t groupsOf(const Case &c) { return int64_t(c.splits.size()); }

GroupedGemmStep stepOf(const Case &c) {
  GroupedGemmStep step;
  step.form = c.form;
  step.fp8 = c.fp8;
  step.fastAccum = c.fastAccum;
  step.transposeA = c.transposeA;
  step.transposeB = c.transposeB;
  step.groups = groupsOf(c);
  int64_t g = groupsOf(c);
  bool tb = c.fp8 || c.transposeB, ta = !c.fp8 && c.transposeA;
  if (c.form == Form::Rows) {
    step.aType = {{c.tokens, c.k}, c.a};
    step.bType = {tb ? std::vector<int64_t>{g, c.n, c.k}
                     : std::vector<int64_t>{g, c.k, c.n},
                  c.b};
    step.outType = {{c.tokens, c.n}, c.out};
  } else {
    step.aType = {ta ? std::vector<int64_t>{c.tokens, c.m}
                     : std::vector<int64_t>{c.m, c.tokens},
                  c.a};
    step.bType = {tb ? std::vector<int64_t>{c.n, c.tokens}
                     : std::vector<int64_t>{c.tokens, c.n},
                  c.b};
    step.outType = {{g, c.m, c.n}, c.out};
  }
  // Ids into the function stepOf's caller builds (the bias is value 0).
  if (c.fp8) {
    step.aScaleInv = 1;
    step.bScaleInv = 2;
  }
  if (c.bias)
    step.bias = 0;
  if (c.accumulate != Case::Accumulate::None)
    step.accumulate = 3;
  return step;
}

ElementType biasType(const Case &c) {
  return c.fp8 ? ElementType::BF16 : c.out;
}

struct Result {
  bool pass = true;
  std::string detail;
  void fail(const std::string &why) {
    if (pass)
      detail = why;
    pass = false;
  }
};

/// What the product should be at out[index] (flat), from the host tensors.
struct Reference {
  const Case &c;
  const HostTensor &a, &b, &bias, &accumulated;
  const std::vector<double> &aScale, &bScale;
  std::vector<int64_t> offsets; // o_g, and o_G last

  Reference(const Case &c, const HostTensor &a, const HostTensor &b,
            const HostTensor &bias, const HostTensor &accumulated,
            const std::vector<double> &aScale,
            const std::vector<double> &bScale)
      : c(c), a(a), b(b), bias(bias), accumulated(accumulated), aScale(aScale),
        bScale(bScale) {
    offsets.push_back(0);
    for (int32_t size : c.splits)
      offsets.push_back(offsets.back() + size);
  }

  /// The group of token row `t`, or -1 for padding.
  int64_t groupOfRow(int64_t t) const {
    for (size_t g = 0; g + 1 < offsets.size(); ++g)
      if (t >= offsets[g] && t < offsets[g + 1])
        return int64_t(g);
    return -1;
  }

  /// The expected value, and whether it must be exactly that (nothing
  /// writes it but the zeroing, or the copy of an empty group's
  /// accumulated values).
  double at(int64_t index, bool &zero) const {
    bool tb = c.fp8 || c.transposeB, ta = !c.fp8 && c.transposeA;
    zero = false;
    if (c.form == Form::Rows) {
      int64_t t = index / c.n, col = index % c.n;
      int64_t g = groupOfRow(t);
      if (g < 0) {
        zero = true;
        return 0;
      }
      double sum = 0;
      const double *row = &a.values[size_t(t * c.k)];
      size_t base = size_t(g * c.n * c.k);
      for (int64_t kk = 0; kk < c.k; ++kk)
        sum += row[kk] *
               b.values[base + size_t(tb ? col * c.k + kk : kk * c.n + col)];
      double value = sum * aScale[g] * bScale[g];
      if (c.bias)
        value += bias.values[size_t(g * c.n + col)];
      return value;
    }
    int64_t g = index / (c.m * c.n), rest = index % (c.m * c.n);
    int64_t row = rest / c.n, col = rest % c.n;
    double before = c.accumulate == Case::Accumulate::None
                        ? 0.0
                        : accumulated.values[size_t(index)];
    if (c.splits[g] == 0) {
      zero = true;
      return before;
    }
    double sum = 0;
    for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t)
      sum += a.values[size_t(ta ? t * c.m + row : row * c.tokens + t)] *
             b.values[size_t(tb ? col * c.tokens + t : t * c.n + col)];
    return sum * aScale[g] * bScale[g] + before;
  }
};

/// Checks out (bytes of the whole output) against the reference; `guard`
/// bytes after it must still be 0xff.
void compare(const Case &c, const Reference &reference,
             const std::vector<uint8_t> &out, size_t outBytes, size_t guard,
             std::mt19937_64 &rng, Result &result) {
  for (size_t i = outBytes; i < outBytes + guard; ++i)
    if (out[i] != 0xff) {
      result.fail(
          llvm::formatv("byte {0} after the output was written", i - outBytes));
      break;
    }
  int64_t count = int64_t(outBytes / elementBytes(c.out));
  // Every entry, or the zero regions in full and a random sample of the
  // rest.
  std::vector<int64_t> indices;
  if (!c.samples) {
    indices.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i)
      indices[size_t(i)] = i;
  } else {
    std::uniform_int_distribution<int64_t> pick(0, count - 1);
    for (size_t i = 0; i < c.samples; ++i)
      indices.push_back(pick(rng));
    if (c.form == Form::Rows) {
      for (int64_t i = reference.offsets.back() * c.n; i < count; ++i)
        indices.push_back(i);
    } else {
      for (size_t g = 0; g < c.splits.size(); ++g)
        if (!c.splits[g])
          for (int64_t i = int64_t(g) * c.m * c.n;
               i < int64_t(g + 1) * c.m * c.n; ++i)
            indices.push_back(i);
    }
  }
  double errorSquares = 0, referenceSquares = 0, worst = 0;
  int64_t worstIndex = -1, nonZero = 0;
  for (int64_t index : indices) {
    bool zero = false;
    double want = reference.at(index, zero);
    double got = readElement(out, c.out, size_t(index));
    if (zero) {
      if (got != want && ++nonZero == 1)
        result.fail(llvm::formatv("out[{0}] is {1}, but nothing computes it "
                                  "(padding row or empty group): must be "
                                  "{2}",
                                  index, got, want));
      continue;
    }
    if (!std::isfinite(got)) {
      result.fail(
          llvm::formatv("out[{0}] is {1} (want {2})", index, got, want));
      continue;
    }
    double error = got - want;
    errorSquares += error * error;
    referenceSquares += want * want;
    if (std::fabs(error) > worst) {
      worst = std::fabs(error);
      worstIndex = index;
    }
  }
  double relative =
      referenceSquares ? std::sqrt(errorSquares / referenceSquares) : 0;
  double tolerance = c.out == ElementType::F32 ? 2e-3 : 1e-2;
  std::string summary =
      llvm::formatv("rel L2 {0:e2} (max |err| {1:e2} at "
                    "{2}), {3} entries",
                    relative, worst, worstIndex, indices.size());
  if (relative > tolerance)
    result.fail(summary + llvm::formatv(" > {0:e1}", tolerance).str());
  else if (result.pass)
    result.detail = summary;
}

Result runCase(const Case &c, const Gpu &gpu, GemmRunner &gemms,
               GemmLanes *lanes, uint64_t seed) {
  Result result;
  std::mt19937_64 rng(seed);
  GroupedGemmStep step = stepOf(c);
  int64_t g = groupsOf(c);
  // The function the step's ids refer to: the bias, the two scale vectors.
  FunctionPlan function;
  function.name = "grouped_gemm_check";
  function.values.resize(4);
  function.values[0].type = {{g, c.n}, biasType(c)};
  function.values[1].type = {{g}, ElementType::F32};
  function.values[2].type = {{g}, ElementType::F32};
  function.values[3].type = step.outType;
  llvm::Expected<GroupedGemm> grouped = GroupedGemm::create(step, function);
  if (!grouped) {
    result.fail("create: " + llvm::toString(grouped.takeError()));
    return result;
  }

  HostTensor a = randomTensor(c.a, size_t(step.aType.numElements()), rng);
  HostTensor b = randomTensor(c.b, size_t(step.bType.numElements()), rng);
  HostTensor bias;
  if (c.bias)
    bias = randomTensor(ElementType::BF16, size_t(g * c.n), rng);
  if (c.bias && biasType(c) == ElementType::F32) {
    // An f32 bias: the same values, stored as floats.
    bias.type = ElementType::F32;
    bias.bytes.resize(bias.values.size() * 4);
    for (size_t i = 0; i < bias.values.size(); ++i) {
      float value = float(bias.values[i]);
      std::memcpy(&bias.bytes[4 * i], &value, 4);
    }
  }
  // What the products are added to (f32 outputs only: main_grads).
  HostTensor accumulated;
  if (c.accumulate != Case::Accumulate::None)
    accumulated =
        randomTensor(ElementType::F32, size_t(step.outType.numElements()), rng);
  // Per-group power-of-two scales (1 without FP8).
  std::vector<double> aScale(size_t(g), 1.0), bScale(size_t(g), 1.0);
  std::vector<float> aScaleF(size_t(g), 1.0f), bScaleF(size_t(g), 1.0f);
  if (c.fp8) {
    std::uniform_int_distribution<int> exponent(-3, 3);
    for (int64_t i = 0; i < g; ++i) {
      aScale[size_t(i)] = aScaleF[size_t(i)] = std::ldexp(1.0f, exponent(rng));
      bScale[size_t(i)] = bScaleF[size_t(i)] = std::ldexp(1.0f, exponent(rng));
    }
  }

  constexpr size_t guard = 256;
  size_t outBytes = size_t(step.outType.bytes());
  DeviceBuffer aBuffer = gpu.allocate(a.bytes.size(), "a"),
               bBuffer = gpu.allocate(b.bytes.size(), "b"),
               outBuffer = gpu.allocate(outBytes + guard, "out"),
               biasBuffer = gpu.allocate(bias.bytes.size(), "bias"),
               aScaleBuffer = gpu.allocate(size_t(g) * 4, "a_scale_inv"),
               bScaleBuffer = gpu.allocate(size_t(g) * 4, "b_scale_inv"),
               accumulateBuffer =
                   gpu.allocate(accumulated.bytes.size(), "accumulate");
  gpu.upload(aBuffer, a.bytes.data(), a.bytes.size());
  gpu.upload(bBuffer, b.bytes.data(), b.bytes.size());
  if (c.bias)
    gpu.upload(biasBuffer, bias.bytes.data(), bias.bytes.size());
  gpu.upload(aScaleBuffer, aScaleF.data(), size_t(g) * 4);
  gpu.upload(bScaleBuffer, bScaleF.data(), size_t(g) * 4);
  // NaN everywhere: what the GEMMs or the zeroing do not write shows.
  gpu.fill(outBuffer, 0xff);
  if (c.accumulate == Case::Accumulate::OtherBuffer)
    gpu.upload(accumulateBuffer, accumulated.bytes.data(),
               accumulated.bytes.size());
  if (c.accumulate == Case::Accumulate::InPlace)
    gpu.upload(outBuffer, accumulated.bytes.data(), accumulated.bytes.size());
  // Per-group matrices: group g's at slot G - 1 - g of the out buffer.
  bool perGroup = c.accumulate == Case::Accumulate::PerGroupReversed;
  size_t groupBytes = outBytes / size_t(g);
  auto reverseGroups = [&](uint8_t *bytes) {
    tejit::testing::reverseGroups(bytes, g, groupBytes);
  };
  std::vector<CUdeviceptr> groupOut;
  if (perGroup) {
    std::vector<uint8_t> reversed = accumulated.bytes;
    reverseGroups(reversed.data());
    gpu.upload(outBuffer, reversed.data(), reversed.size());
    for (int64_t i = 0; i < g; ++i)
      groupOut.push_back(outBuffer.get() + CUdeviceptr(g - 1 - i) * groupBytes);
  }

  GroupedGemmPointers pointers;
  pointers.a = reinterpret_cast<const void *>(aBuffer.get());
  pointers.b = reinterpret_cast<const void *>(bBuffer.get());
  pointers.out = reinterpret_cast<void *>(outBuffer.get());
  if (c.fp8) {
    pointers.aScaleInv = reinterpret_cast<const void *>(aScaleBuffer.get());
    pointers.bScaleInv = reinterpret_cast<const void *>(bScaleBuffer.get());
  }
  if (c.bias)
    pointers.bias = reinterpret_cast<const void *>(biasBuffer.get());
  if (c.accumulate == Case::Accumulate::OtherBuffer)
    pointers.accumulate =
        reinterpret_cast<const void *>(accumulateBuffer.get());
  if (c.accumulate == Case::Accumulate::InPlace)
    pointers.accumulate = pointers.out;
  if (perGroup) {
    // The stacked pointers mean nothing then: null.
    pointers.out = nullptr;
    pointers.groupOut = groupOut;
  }
  // FP8: the scales staged into aligned slots with two strided copies (the
  // executor's way; without slots the runner copies each group's).
  DeviceBuffer scaleSlots = gpu.allocate(scaleSlotBytes(g), "scale slots");
  if (c.fp8)
    pointers.scaleSlots = reinterpret_cast<void *>(scaleSlots.get());

  if (llvm::Error error = grouped->run(gemms, c.splits, pointers, gpu.stream,
                                       gpu.driver, c.lanes ? lanes : nullptr)) {
    result.fail("run: " + llvm::toString(std::move(error)));
    return result;
  }
  gpu.sync();
  std::vector<uint8_t> out(outBytes + guard);
  gpu.download(out.data(), outBuffer.get(), out.size());
  if (perGroup)
    reverseGroups(out.data());
  Reference reference(c, a, b, bias, accumulated, aScale, bScale);
  compare(c, reference, out, outBytes, guard, rng, result);

  if (c.timed && result.pass) {
    CUevent start, stop;
    check(gpu.driver.check(gpu.driver.cuEventCreate(&start, 0), "event"));
    check(gpu.driver.check(gpu.driver.cuEventCreate(&stop, 0), "event"));
    const int iterations = 10;
    for (int i = 0; i < 2; ++i)
      check(grouped->run(gemms, c.splits, pointers, gpu.stream, gpu.driver,
                         c.lanes ? lanes : nullptr));
    check(gpu.driver.check(gpu.driver.cuEventRecord(start, gpu.stream), "e"));
    // The host's time to enqueue: one cuBLASLt call per non-empty group.
    auto hostStart = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i)
      check(grouped->run(gemms, c.splits, pointers, gpu.stream, gpu.driver,
                         c.lanes ? lanes : nullptr));
    double hostUs = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - hostStart)
                        .count() /
                    iterations;
    check(gpu.driver.check(gpu.driver.cuEventRecord(stop, gpu.stream), "e"));
    check(gpu.driver.check(gpu.driver.cuEventSynchronize(stop), "e"));
    float ms = 0;
    check(gpu.driver.check(gpu.driver.cuEventElapsedTime(&ms, start, stop),
                           "elapsed"));
    // The GPU's time alone: the same runs captured into a CUDA graph and
    // replayed (eager runs of small groups wait for the host).
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    check(gpu.driver.check(gpu.driver.cuStreamBeginCapture(
                               gpu.stream, CU_STREAM_CAPTURE_MODE_RELAXED),
                           "capture"));
    for (int i = 0; i < iterations; ++i)
      check(grouped->run(gemms, c.splits, pointers, gpu.stream, gpu.driver,
                         c.lanes ? lanes : nullptr));
    check(gpu.driver.check(gpu.driver.cuStreamEndCapture(gpu.stream, &graph),
                           "capture"));
    check(gpu.driver.check(
        gpu.driver.cuGraphInstantiateWithFlags(&exec, graph, 0), "graph"));
    check(gpu.driver.check(gpu.driver.cuGraphLaunch(exec, gpu.stream), "g"));
    check(gpu.driver.check(gpu.driver.cuEventRecord(start, gpu.stream), "e"));
    check(gpu.driver.check(gpu.driver.cuGraphLaunch(exec, gpu.stream), "g"));
    check(gpu.driver.check(gpu.driver.cuEventRecord(stop, gpu.stream), "e"));
    check(gpu.driver.check(gpu.driver.cuEventSynchronize(stop), "e"));
    float graphMs = 0;
    check(gpu.driver.check(gpu.driver.cuEventElapsedTime(&graphMs, start, stop),
                           "elapsed"));
    gpu.driver.cuGraphExecDestroy(exec);
    gpu.driver.cuGraphDestroy(graph);
    gpu.driver.cuEventDestroy(start);
    gpu.driver.cuEventDestroy(stop);
    double perRun = ms / iterations, perReplay = graphMs / iterations;
    int64_t used = 0;
    for (int32_t size : c.splits)
      used += size;
    double flops = c.form == Form::Rows ? 2.0 * double(used) * c.k * c.n
                                        : 2.0 * double(used) * c.m * c.n;
    size_t groups = size_t(
        llvm::count_if(c.splits, [](int32_t size) { return size != 0; }));
    result.detail +=
        llvm::formatv("; {0:f3} ms per grouped GEMM, {1:f0} TFLOP/s; host "
                      "{2:f0} us to enqueue it ({3:f1} us per group); from a "
                      "CUDA graph {4:f3} ms, {5:f0} TFLOP/s",
                      perRun, flops / (perRun * 1e-3) / 1e12, hostUs,
                      hostUs / double(groups), perReplay,
                      flops / (perReplay * 1e-3) / 1e12)
            .str();
  }
  return result;
}

std::vector<Case> cases(bool large) {
  using E = ElementType;
  std::vector<Case> list;
  // Splits with an empty group and padding rows (T = 256: 48 rows of
  // padding; G = 1: 32).
  const std::vector<int32_t> g1 = {224}, g4 = {64, 0, 48, 96},
                             g8 = {32, 16, 0, 64, 48, 0, 32, 16};
  // No multiples of 16 (high precision only): T = 256, 53 rows of padding.
  const std::vector<int32_t> odd4 = {37, 0, 75, 91},
                             odd8 = {5, 0, 41, 17, 33, 1, 0, 106};
  auto rows = [&](std::string name, std::vector<int32_t> splits, E a, E b,
                  E out, bool fp8, bool bias, bool transposeB = true,
                  bool fastAccum = false) {
    Case c;
    c.name = "rows " + name;
    c.form = Form::Rows;
    c.fp8 = fp8;
    c.a = a;
    c.b = b;
    c.out = out;
    c.tokens = 256;
    c.k = 128;
    c.n = 64;
    c.splits = std::move(splits);
    c.bias = bias;
    c.transposeB = transposeB;
    c.fastAccum = fastAccum;
    list.push_back(c);
  };
  using Acc = Case::Accumulate;
  auto contraction = [&](std::string name, std::vector<int32_t> splits, E a,
                         E b, E out, bool fp8, bool transposeA = true,
                         bool transposeB = false, Acc accumulate = Acc::None) {
    Case c;
    c.name = "contraction " + name;
    c.form = Form::Contraction;
    c.fp8 = fp8;
    c.a = a;
    c.b = b;
    c.out = out;
    c.tokens = 256;
    c.m = 64;
    c.n = 128;
    c.splits = std::move(splits);
    c.transposeA = transposeA;
    c.transposeB = transposeB;
    c.accumulate = accumulate;
    list.push_back(c);
  };
  E bf16 = E::BF16, f32 = E::F32, e4m3 = E::F8E4M3, e5m2 = E::F8E5M2;
  rows("bf16 fprop G=1", g1, bf16, bf16, bf16, false, false);
  rows("bf16 fprop G=4 bias", g4, bf16, bf16, bf16, false, true);
  rows("bf16 fprop G=8 bias", g8, bf16, bf16, bf16, false, true);
  rows("bf16 fprop G=4 bias, sizes not multiples of 16", odd4, bf16, bf16, bf16,
       false, true);
  rows("bf16 fprop G=8, sizes not multiples of 16", odd8, bf16, bf16, bf16,
       false, false);
  rows("bf16 dgrad G=4 (b [G, K, N])", g4, bf16, bf16, bf16, false, false,
       /*transposeB=*/false);
  rows("bf16 dgrad G=8 (b [G, K, N]), odd sizes", odd8, bf16, bf16, bf16, false,
       false, /*transposeB=*/false);
  rows("bf16 -> f32 G=4", g4, bf16, bf16, f32, false, false);
  rows("bf16 -> f32 G=8 bias f32", g8, bf16, bf16, f32, false, true);
  contraction("bf16 wgrad G=1", g1, bf16, bf16, bf16, false);
  contraction("bf16 wgrad G=4", g4, bf16, bf16, bf16, false);
  contraction("bf16 wgrad G=8, odd sizes", odd8, bf16, bf16, bf16, false);
  contraction("bf16 wgrad -> f32 G=4", g4, bf16, bf16, f32, false);
  contraction("bf16 column ranges G=4 (a [M, T], b [N, T])", g4, bf16, bf16,
              bf16, false, /*transposeA=*/false, /*transposeB=*/true);
  contraction("bf16 column ranges G=8 -> f32", g8, bf16, bf16, f32, false,
              /*transposeA=*/false, /*transposeB=*/true);
  rows("FP8 E4M3 x E4M3 G=1 fast accumulation", g1, e4m3, e4m3, bf16, true,
       false, true, true);
  rows("FP8 E4M3 x E4M3 G=4 bias fast accumulation", g4, e4m3, e4m3, bf16, true,
       true, true, true);
  rows("FP8 E4M3 x E4M3 G=8 bias", g8, e4m3, e4m3, bf16, true, true);
  rows("FP8 E4M3 x E4M3 -> f32 G=4", g4, e4m3, e4m3, f32, true, false);
  rows("FP8 E5M2 x E4M3 G=4 (dgrad)", g4, e5m2, e4m3, bf16, true, false);
  rows("FP8 E5M2 x E4M3 G=8 bias", g8, e5m2, e4m3, bf16, true, true);
  contraction("FP8 E4M3 x E4M3 G=4", g4, e4m3, e4m3, bf16, true);
  contraction("FP8 E5M2 x E4M3 G=1 (wgrad)", g1, e5m2, e4m3, bf16, true);
  contraction("FP8 E5M2 x E4M3 G=4 (wgrad) -> f32", g4, e5m2, e4m3, f32, true);
  contraction("FP8 E5M2 x E4M3 G=8 (wgrad)", g8, e5m2, e4m3, bf16, true);
  // fuse_wgrad_accumulation: products added to f32 main_grads.
  contraction("bf16 wgrad -> f32 G=4 accumulated in place", g4, bf16, bf16, f32,
              false, true, false, Acc::InPlace);
  contraction("bf16 wgrad -> f32 G=8 accumulated from another buffer", g8, bf16,
              bf16, f32, false, true, false, Acc::OtherBuffer);
  contraction("FP8 E5M2 x E4M3 wgrad -> f32 G=8 accumulated in place", g8, e5m2,
              e4m3, f32, true, false, false, Acc::InPlace);
  contraction("FP8 E5M2 x E4M3 wgrad -> f32 G=4 accumulated from another "
              "buffer",
              g4, e5m2, e4m3, f32, true, false, false, Acc::OtherBuffer);
  // Megatron-Core's layout: per-group main_grads, reversed.
  contraction("bf16 wgrad -> f32 G=8 accumulated into per-group buffers", g8,
              bf16, bf16, f32, false, true, false, Acc::PerGroupReversed);
  contraction("FP8 E5M2 x E4M3 wgrad -> f32 G=4 accumulated into per-group "
              "buffers",
              g4, e5m2, e4m3, f32, true, false, false, Acc::PerGroupReversed);
  // The same groups on side streams (GemmLanes): rows and contractions,
  // empty groups, accumulation in place and into per-group buffers.
  for (size_t index = 0, count = list.size(); index < count; ++index) {
    const Case &base = list[index];
    if (base.name.find("G=8") == std::string::npos)
      continue;
    Case c = base;
    c.name += ", on side streams";
    c.lanes = true;
    list.push_back(c);
  }
  if (!large)
    return list;

  // T = 8192, K = 4096, N = 2048, G = 8, 256 rows of padding.
  const std::vector<int32_t> big = {1024, 2048, 0, 512, 1536, 1024, 768, 1024};
  auto bigRows = [&](std::string name, E a, E b, bool fp8,
                     std::vector<int32_t> splits = {}, int64_t k = 4096,
                     int64_t n = 2048, bool bias = true) -> Case & {
    Case c;
    c.name = "large rows " + name;
    c.form = Form::Rows;
    c.fp8 = fp8;
    c.a = a;
    c.b = b;
    c.out = bf16;
    c.tokens = 8192;
    c.k = k;
    c.n = n;
    c.splits = splits.empty() ? big : std::move(splits); // {}: big
    c.bias = bias;
    c.transposeB = true;
    c.fastAccum = fp8;
    c.samples = 8192;
    c.timed = true;
    list.push_back(c);
    return list.back();
  };
  bigRows("bf16 fprop bias T=8192 K=4096 N=2048 G=8", bf16, bf16, false);
  bigRows("FP8 E4M3 fprop bias T=8192 K=4096 N=2048 G=8", e4m3, e4m3, true);
  // Fine-grained experts (DeepSeek / Qwen MoE): G=32 of 256 tokens each,
  // 2048 -> 1408, where the host's per-group cost shows; also on lanes.
  const std::vector<int32_t> fine(32, 256);
  for (bool lanes : {false, true})
    bigRows(std::string("FP8 E4M3 fprop T=8192 K=2048 N=1408 G=32") +
                (lanes ? ", on 4 side streams" : ""),
            e4m3, e4m3, true, fine, 2048, 1408, /*bias=*/false)
        .lanes = lanes;
  auto bigWgrad = [&](std::string name, E a, E b, bool fp8,
                      Acc accumulate = Acc::None) {
    Case c;
    c.name = "large contraction " + name;
    c.form = Form::Contraction;
    c.fp8 = fp8;
    c.a = a;
    c.b = b;
    c.out = accumulate == Acc::None ? bf16 : f32;
    c.accumulate = accumulate;
    c.tokens = 8192;
    c.m = 2048; // dW_g [N, K] = dy_g^T x_g
    c.n = 4096;
    c.splits = big;
    c.transposeA = !fp8;
    c.samples = 8192;
    c.timed = true;
    list.push_back(c);
  };
  bigWgrad("bf16 wgrad T=8192 M=2048 N=4096 G=8", bf16, bf16, false);
  bigWgrad("FP8 E5M2 x E4M3 wgrad T=8192 M=2048 N=4096 G=8", e5m2, e4m3, true);
  bigWgrad("FP8 E5M2 x E4M3 wgrad into f32 main_grads in place T=8192 "
           "M=2048 N=4096 G=8",
           e5m2, e4m3, true, Acc::InPlace);
  bigWgrad("FP8 E5M2 x E4M3 wgrad into f32 per-group main_grads (reversed) "
           "T=8192 M=2048 N=4096 G=8",
           e5m2, e4m3, true, Acc::PerGroupReversed);
  return list;
}

//===----------------------------------------------------------------------===//
// The executor's path: host m_splits from a plan
//===----------------------------------------------------------------------===//

/// A forward whose one step is a bf16 grouped GEMM (rows, bias) sized by a
/// host m_splits argument: T = 128, K = 64, N = 32, G = 4.
std::string executorPlan() {
  return R"json({
  "format": "tejit-plan", "version": 4, "arch": "sm_90a",
  "functions": [{
    "name": "moe", "arena_bytes": 0,
    "arguments": [
      {"value": 0, "te.name": "input"},
      {"value": 1, "te.name": "m_splits", "host": true},
      {"value": 2, "te.name": "weight", "te.parameter": true},
      {"value": 3, "te.name": "bias", "te.parameter": true}
    ],
    "results": [{"value": 4, "te.name": "output"}],
    "values": [
      {"id": 0, "type": "tensor<128x64xbf16>", "bytes": 16384,
       "storage": {"arg": 0}},
      {"id": 1, "type": "tensor<4xi32>", "bytes": 16, "storage": {"arg": 1}},
      {"id": 2, "type": "tensor<4x32x64xbf16>", "bytes": 16384,
       "storage": {"arg": 2}},
      {"id": 3, "type": "tensor<4x32xbf16>", "bytes": 256,
       "storage": {"arg": 3}},
      {"id": 4, "type": "tensor<128x32xbf16>", "bytes": 8192,
       "storage": {"result": 0}}
    ],
    "steps": [
      {"kind": "grouped_gemm", "form": "rows", "a": 0, "b": 2,
       "m_splits": 1, "out": 4, "a_type": "tensor<128x64xbf16>",
       "b_type": "tensor<4x32x64xbf16>", "out_type": "tensor<128x32xbf16>",
       "groups": 4, "bias": 3, "transpose_a": false, "transpose_b": true}
    ]
  }]
})json";
}

/// Prints and counts one line.
struct Tally {
  int passed = 0, failed = 0;
  void report(const std::string &name, const Result &result) {
    std::printf("%s %s: %s\n", result.pass ? "PASS" : "FAIL", name.c_str(),
                result.detail.c_str());
    std::fflush(stdout);
    (result.pass ? passed : failed) += 1;
  }
};

void executorCases(const Gpu &gpu, GemmRunner &gemms, uint64_t seed,
                   Tally &tally) {
  std::string text = executorPlan();
  llvm::Expected<Plan> parsed = parsePlan(llvm::StringRef(text));
  if (!parsed) {
    Result result;
    result.fail(llvm::toString(parsed.takeError()));
    tally.report("executor: plan", result);
    return;
  }
  Bundle bundle;
  bundle.plan = std::move(*parsed);
  ModuleSet modules(bundle);
  const FunctionPlan &function = bundle.plan.functions[0];
  auto executor = Executor::create(function, modules, gemms);
  if (!executor) {
    Result result;
    result.fail(llvm::toString(executor.takeError()));
    tally.report("executor: create", result);
    return;
  }
  Case c;
  c.form = Form::Rows;
  c.tokens = 128;
  c.k = 64;
  c.n = 32;
  c.bias = true;
  c.transposeB = true;
  c.splits = {0, 0, 0, 0};
  std::mt19937_64 rng(seed);
  HostTensor x = randomTensor(ElementType::BF16, 128 * 64, rng);
  HostTensor w = randomTensor(ElementType::BF16, 4 * 32 * 64, rng);
  HostTensor bias = randomTensor(ElementType::BF16, 4 * 32, rng);
  constexpr size_t guard = 256, outBytes = 128 * 32 * 2;
  DeviceBuffer xBuffer = gpu.allocate(x.bytes.size(), "x"),
               wBuffer = gpu.allocate(w.bytes.size(), "w"),
               biasBuffer = gpu.allocate(bias.bytes.size(), "bias"),
               outBuffer = gpu.allocate(outBytes + guard, "out");
  gpu.upload(xBuffer, x.bytes.data(), x.bytes.size());
  gpu.upload(wBuffer, w.bytes.data(), w.bytes.size());
  gpu.upload(biasBuffer, bias.bytes.data(), bias.bytes.size());
  std::vector<double> ones(4, 1.0);

  // The caller's host memory: a fresh vector per call, freed right after
  // the call returns (the executor must have taken its own copy).
  auto runWith = [&](std::vector<int32_t> splits) -> llvm::Error {
    auto host = std::make_unique<std::vector<int32_t>>(splits);
    CUdeviceptr arguments[] = {
        xBuffer.get(), CUdeviceptr(reinterpret_cast<uintptr_t>(host->data())),
        wBuffer.get(), biasBuffer.get()};
    CUdeviceptr results[] = {outBuffer.get()};
    llvm::Error error = (*executor)->run(arguments, results, 0, 0, gpu.stream);
    std::fill(host->begin(), host->end(), -12345); // the caller reuses it
    return error;
  };
  for (std::vector<int32_t> splits :
       {std::vector<int32_t>{32, 0, 48, 16}, std::vector<int32_t>{8, 72, 0, 30},
        std::vector<int32_t>{0, 0, 128, 0}}) {
    Result result;
    gpu.fill(outBuffer, 0xff);
    c.splits = splits;
    if (llvm::Error error = runWith(splits)) {
      result.fail(llvm::toString(std::move(error)));
    } else {
      gpu.sync();
      std::vector<uint8_t> out(outBytes + guard);
      gpu.download(out.data(), outBuffer.get(), out.size());
      HostTensor nothingAccumulated;
      Reference reference(c, x, w, bias, nothingAccumulated, ones, ones);
      compare(c, reference, out, outBytes, guard, rng, result);
    }
    tally.report(llvm::formatv("executor: host m_splits {0} {1} {2} {3}",
                               splits[0], splits[1], splits[2], splits[3])
                     .str(),
                 result);
  }

  // Per-group outputs: only for a grouped GEMM that accumulates.
  {
    Result result;
    CUdeviceptr groups[] = {outBuffer.get(), outBuffer.get(), outBuffer.get(),
                            outBuffer.get()};
    llvm::Error error = (*executor)->setGroupedOutputs(0, groups);
    std::string message = error ? llvm::toString(std::move(error)) : "";
    if (message.find("only a contraction that accumulates") ==
        std::string::npos)
      result.fail("a rows-form step took per-group outputs: '" + message + "'");
    else
      result.detail = message;
    tally.report("executor: refuses per-group outputs of a rows step", result);
  }

  // Bad splits: refused before anything runs, the output untouched.
  for (auto [splits, rule] :
       {std::pair{std::vector<int32_t>{32, -16, 48, 16}, ">= 0"},
        std::pair{std::vector<int32_t>{64, 64, 1, 0}, "<= the token count"}}) {
    Result result;
    gpu.fill(outBuffer, 0xff);
    llvm::Error error = runWith(splits);
    std::string message = error ? llvm::toString(std::move(error)) : "";
    if (message.empty())
      result.fail("the run was not refused");
    else if (message.find("m_splits") == std::string::npos ||
             message.find(rule) == std::string::npos)
      result.fail("the error does not name m_splits and the rule: " + message);
    else
      result.detail = message;
    gpu.sync();
    std::vector<uint8_t> out(outBytes);
    gpu.download(out.data(), outBuffer.get(), out.size());
    if (std::any_of(out.begin(), out.end(),
                    [](uint8_t byte) { return byte != 0xff; }))
      result.fail("a refused run wrote the output");
    tally.report(std::string("executor: refuses m_splits breaking ") + rule,
                 result);
  }

  // Capture: refused with a clear error.
  {
    Result result;
    const CudaDriver &driver = gpu.driver;
    check(driver.check(
        driver.cuStreamBeginCapture(gpu.stream, CU_STREAM_CAPTURE_MODE_RELAXED),
        "cuStreamBeginCapture"));
    llvm::Error error = runWith({32, 0, 48, 16});
    CUgraph graph = nullptr;
    CUresult ended = driver.cuStreamEndCapture(gpu.stream, &graph);
    if (graph)
      driver.cuGraphDestroy(graph);
    std::string message = error ? llvm::toString(std::move(error)) : "";
    if (message.empty())
      result.fail("a capturing run was not refused");
    else if (message.find("tejit_program_set_capture_host_arguments") ==
             std::string::npos)
      result.fail("unclear error: " + message);
    else
      result.detail = message;
    if (ended != CUDA_SUCCESS)
      result.fail("the capture could not be ended (the refused run left "
                  "work in it?)");
    tally.report("executor: refuses CUDA graph capture", result);
  }

  // Capture allowed (fixed splits): a graph replays the splits it captured,
  // also after an eager run with others changed the device copy. The first
  // capture copies them from pinned memory reserved by the eager runs; a
  // second one right after (none reserved) sets them with memset nodes.
  {
    Result result;
    const CudaDriver &driver = gpu.driver;
    (*executor)->setHostArgumentsCapturable(true);
    struct Captured {
      std::vector<int32_t> splits;
      CUgraph graph = nullptr;
      CUgraphExec exec = nullptr;
    };
    Captured graphs[] = {{{8, 72, 0, 30}}, {{0, 0, 128, 0}}};
    for (Captured &captured : graphs) {
      check(driver.check(driver.cuStreamBeginCapture(
                             gpu.stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
                         "cuStreamBeginCapture"));
      llvm::Error error = runWith(captured.splits);
      CUresult ended = driver.cuStreamEndCapture(gpu.stream, &captured.graph);
      if (error)
        result.fail("capture: " + llvm::toString(std::move(error)));
      else if (ended != CUDA_SUCCESS || !captured.graph)
        result.fail("the capture could not be ended");
      else
        check(driver.check(driver.cuGraphInstantiateWithFlags(
                               &captured.exec, captured.graph, 0),
                           "cuGraphInstantiate"));
    }
    auto replayAndCompare = [&](const Captured &captured, const char *when) {
      if (!captured.exec)
        return;
      gpu.fill(outBuffer, 0xff);
      check(driver.check(driver.cuGraphLaunch(captured.exec, gpu.stream),
                         "cuGraphLaunch"));
      gpu.sync();
      std::vector<uint8_t> out(outBytes + guard);
      gpu.download(out.data(), outBuffer.get(), out.size());
      c.splits = captured.splits;
      HostTensor nothingAccumulated;
      Reference reference(c, x, w, bias, nothingAccumulated, ones, ones);
      Result replay;
      compare(c, reference, out, outBytes, guard, rng, replay);
      if (!replay.pass)
        result.fail(std::string(when) + ": " + replay.detail);
      else if (result.pass)
        result.detail = replay.detail;
    };
    replayAndCompare(graphs[1], "the memset graph");
    replayAndCompare(graphs[0], "the pinned-copy graph");
    if (llvm::Error other = runWith({32, 0, 48, 16}))
      result.fail("eager run: " + llvm::toString(std::move(other)));
    replayAndCompare(graphs[0], "the pinned-copy graph after an eager run");
    replayAndCompare(graphs[1], "the memset graph after an eager run");
    for (Captured &captured : graphs) {
      if (captured.exec)
        driver.cuGraphExecDestroy(captured.exec);
      if (captured.graph)
        driver.cuGraphDestroy(captured.graph);
    }
    (*executor)->setHostArgumentsCapturable(false);
    tally.report("executor: capture allowed replays the captured m_splits",
                 result);
  }
}

/// More uploads than the ring has slots while the GPU is kept busy (so the
/// ring grows and then waits), each upload's device copy snapshotted on the
/// stream right after it: a slot reused before its copy ran would show as
/// a snapshot holding a later upload's values.
void stagingCase(const Gpu &gpu, uint64_t seed, Tally &tally) {
  Result result;
  const std::vector<int64_t> counts = {4, 9};
  auto staging = HostArgumentStaging::create(counts, "staging check");
  if (!staging) {
    result.fail(llvm::toString(staging.takeError()));
    tally.report("staging ring", result);
    return;
  }
  const CudaDriver &driver = gpu.driver;
  const int rounds = 3 * int(HostArgumentStaging::kMaxSlots) + 5;
  const size_t perRound = 13 * sizeof(int32_t);
  DeviceBuffer snapshots = gpu.allocate(rounds * perRound, "snapshots");
  // Work that keeps the stream busy for a while (a few ms of memsets).
  DeviceBuffer busy = gpu.allocate(size_t(1) << 30, "busy");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> value(0, 1 << 20);
  std::vector<std::vector<std::vector<int32_t>>> uploaded;
  for (int round = 0; round < rounds && result.pass; ++round) {
    if (round % 8 == 0)
      check(driver.check(driver.cuMemsetD8Async(busy.get(), uint8_t(round),
                                                busy.bytes(), gpu.stream),
                         "busy work"));
    std::vector<std::vector<int32_t>> values = {std::vector<int32_t>(4),
                                                std::vector<int32_t>(9)};
    for (auto &list : values)
      for (int32_t &entry : list)
        entry = value(rng);
    if (llvm::Error error = (*staging)->upload(values, gpu.stream)) {
      result.fail(llvm::toString(std::move(error)));
      break;
    }
    CUdeviceptr to = snapshots.get() + round * perRound;
    for (size_t i = 0; i < values.size(); ++i) {
      size_t bytes = values[i].size() * sizeof(int32_t);
      check(driver.check(driver.cuMemcpyDtoDAsync(to, (*staging)->address(i),
                                                  bytes, gpu.stream),
                         "snapshot"));
      to += bytes;
    }
    uploaded.push_back(std::move(values));
  }
  gpu.sync();
  std::vector<int32_t> device(size_t(rounds) * 13);
  gpu.download(device.data(), snapshots.get(), device.size() * 4);
  for (size_t round = 0; round < uploaded.size() && result.pass; ++round) {
    std::vector<int32_t> want = uploaded[round][0];
    want.insert(want.end(), uploaded[round][1].begin(),
                uploaded[round][1].end());
    if (!std::equal(want.begin(), want.end(), device.begin() + round * 13))
      result.fail(llvm::formatv("upload {0}: the device copy holds other "
                                "values (a staging slot reused too early?)",
                                round));
  }
  if (result.pass)
    result.detail = llvm::formatv("{0} uploads behind busy work, ring of at "
                                  "most {1} slots",
                                  rounds, HostArgumentStaging::kMaxSlots)
                        .str();
  tally.report("staging ring", result);
}

} // namespace

int main(int argc, char **argv) {
  uint64_t seed = 25;
  std::string filter;
  bool large = true;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--seed" && i + 1 < argc)
      seed = std::stoull(argv[++i]);
    else if (arg == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else if (arg == "--no-large")
      large = false;
    else {
      std::fprintf(stderr,
                   "usage: %s [--seed N] [--filter TEXT] [--no-large]\n",
                   argv[0]);
      return 2;
    }
  }
  auto device = useDevice(0);
  if (!device) {
    std::printf("SKIP: %s\n", llvm::toString(device.takeError()).c_str());
    return exitSkipped;
  }
  const CudaDriver &driver = *CudaDriver::get();
  std::printf("device: %s (%s)\n", device->name.c_str(), device->arch.c_str());
  Gpu gpu{driver};
  check(driver.check(driver.cuStreamCreate(&gpu.stream, CU_STREAM_NON_BLOCKING),
                     "cuStreamCreate"));
  DeviceBuffer workspace =
      orDie(DeviceBuffer::allocate(32u << 20, "the cuBLASLt workspace"));
  std::unique_ptr<GemmRunner> gemms =
      orDie(GemmRunner::create(reinterpret_cast<void *>(workspace.get()),
                               workspace.bytes(), device->name));

  std::unique_ptr<GemmLanes> lanes =
      orDie(GemmLanes::create(4, GemmLanes::kWorkspaceBytes));
  Tally tally;
  std::vector<Case> list = cases(large);
  for (auto [index, c] : llvm::enumerate(list)) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos)
      continue;
    auto start = std::chrono::steady_clock::now();
    Result result = runCase(c, gpu, *gemms, lanes.get(), seed + index);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    result.detail += llvm::formatv(" [{0:f1} s]", seconds).str();
    tally.report(c.name, result);
  }
  if (filter.empty() || std::string("executor").find(filter) == 0)
    executorCases(gpu, *gemms, seed, tally);
  if (filter.empty() || std::string("staging ring").find(filter) == 0)
    stagingCase(gpu, seed, tally);
  std::printf("%d passed, %d failed\n", tally.passed, tally.failed);
  gemms.reset();
  driver.cuStreamDestroy(gpu.stream);
  return tally.failed ? 1 : 0;
}
