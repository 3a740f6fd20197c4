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
//     device copy snapshotted on the stream and compared afterwards;
//   * Float8BlockScaling ("block" cases, session 28): fresh random data
//     (magnitudes changing every 16 x 32 elements, so blocks get their own
//     scales) cast on the host per group as te.grouped_block_quantize does
//     (docs/block-scaling.md's numerics, power-of-two scales) into
//     dialects/GroupedBlockScaleLayout.h's layouts, whose offsets are
//     written out here from the contract: rows form with b 1-D and 2-D
//     (E4M3 fprop, E5M2 x E4M3 dgrad), contraction (wgrad) incl.
//     accumulation into f32 main_grads, side streams, segments that are
//     no multiples of 128 tokens, empty groups and padding; the rows form
//     with a bf16 bias (no bias epilogue there: the runtime writes each
//     group's out rows with its bias row, one kernel launch for all groups,
//     and adds the product as C), with and without side streams; large
//     sizes (T = 8192, timed, with CUDA graph replays, one with a bias) and
//     G = 32; and the executor's path from a block-scaled plan, without and
//     with a bias,
//     eager and captured. The
//     reference is the float64 product of the dequantized operands:
//     besides the relative L2 bound, every entry must be within TE's FP8
//     tolerances (E4M3 rtol 0.125 / atol 0.0675, E5M2 0.25 / 0.125, atol
//     times the reference's rms).
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
#include "dialects/BlockScaleLayout.h"
#include "runtime/CudaDriver.h"
#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Executor.h"
#include "runtime/Gemm.h"
#include "runtime/GroupedGemm.h"
#include "runtime/HostArguments.h"
#include "runtime/Plan.h"
#include "tests/gpu/CheckExit.h"
#include "tests/gpu/HostFp8.h"
#include "tests/runtime/ReversedGroups.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
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
  /// Float8BlockScaling (both not Tensor): the operands are fresh random
  /// data cast per group into dialects/GroupedBlockScaleLayout.h's layouts
  /// (blockOperands) instead of random FP8 bytes with [G] scales.
  GemmScaling aScaling = GemmScaling::Tensor, bScaling = GemmScaling::Tensor;

  bool blockScaled() const { return aScaling != GemmScaling::Tensor; }
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
  step.aScaling = c.aScaling;
  step.bScaling = c.bScaling;
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

/// FP8 biases are bf16, except that a block-scaled GEMM adds its bias as
/// C, of out's type.
ElementType biasType(const Case &c) {
  return c.fp8 && !c.blockScaled() ? ElementType::BF16 : c.out;
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

/// TE's FP8 tolerances (tests/gpu/run_layer_tests.py: E4M3 rtol 0.125,
/// atol 0.0675; E5M2 0.25, 0.125; atol relative to the reference's rms) on
/// every computed entry of a block-scaled case: |got - want| <= atol * rms +
/// rtol * |want|. The reference is exact (the dequantized operands), so
/// the relative L2 bound above is the sharp check; this one is TE's.
void checkFp8Tolerances(const Case &c,
                        const std::vector<std::array<double, 3>> &computed,
                        double referenceSquares, Result &result) {
  bool e5m2 = c.a == ElementType::F8E5M2 || c.b == ElementType::F8E5M2;
  double rtol = e5m2 ? 0.25 : 0.125, atol = e5m2 ? 0.125 : 0.0675;
  double rms = std::sqrt(referenceSquares / double(computed.size()));
  size_t outside = 0;
  for (auto [index, want, got] : computed) {
    if (std::fabs(got - want) <= atol * rms + rtol * std::fabs(want))
      continue;
    if (++outside == 1)
      result.fail(
          llvm::formatv("out[{0}] is {1}, want {2}: beyond TE's FP8 "
                        "tolerances (rtol {3:f3}, atol {4:f4} x rms {5:e2})",
                        int64_t(index), got, want, rtol, atol, rms));
  }
  if (outside > 1)
    result.detail += llvm::formatv(" ({0} entries beyond)", outside).str();
  else if (result.pass)
    result.detail += llvm::formatv("; within TE's FP8 tolerances (rtol "
                                   "{0:f3}, atol {1:f4} x rms)",
                                   rtol, atol)
                         .str();
}

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
  // Block-scaled cases: (index, want, got) of every computed entry, for
  // TE's elementwise FP8 tolerances below.
  std::vector<std::array<double, 3>> computed;
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
    if (c.blockScaled())
      computed.push_back({double(index), want, got});
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
  if (c.blockScaled() && !computed.empty())
    checkFp8Tolerances(c, computed, referenceSquares, result);
}

//===----------------------------------------------------------------------===//
// Float8BlockScaling on the host (docs/block-scaling.md's numerics)
//===----------------------------------------------------------------------===//

/// te.compute_scale's rules with power_2_scale, in float32: fp8_max / amax,
/// 1 for an amax of 0 (or not finite), FLT_MAX on overflow, rounded down
/// to a power of two.
float blockScale(float amax, ElementType type) {
  float scale = 1.0f;
  if (amax > 0 && std::isfinite(amax)) {
    scale = fp8Max(type) / amax;
    if (std::isinf(scale))
      scale = std::numeric_limits<float>::max();
  }
  uint32_t bits;
  std::memcpy(&bits, &scale, 4);
  bits &= 0xff800000u; // sign and exponent: a power of two
  std::memcpy(&scale, &bits, 4);
  return scale;
}

/// te.block_quantize (power_2_scale) of the matrix [rows, cols] whose
/// element (r, c) is `source(r, c)`, in `blockDim`-D blocks: each element's
/// code and dequantized value (code times its block's scale_inv) go to
/// `store(r, c, code, value)`. Returns the scale inverses in
/// dialects/BlockScaleLayout.h's layout for [rows, cols] (padding 0).
template <typename Source, typename Store>
std::vector<float> blockQuantize(int64_t rows, int64_t cols, int64_t blockDim,
                                 ElementType type, Source source, Store store) {
  using namespace tejit::blockscale;
  std::array<int64_t, 2> shape = scaleShape(rows, cols, blockDim);
  std::vector<float> scaleInv(size_t(shape[0] * shape[1]), 0.0f);
  int64_t blockRows = blockDim == 1 ? 1 : kBlock;
  for (int64_t r0 = 0; r0 < rows; r0 += blockRows)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      int64_t r1 = std::min(rows, r0 + blockRows),
              c1 = std::min(cols, c0 + kBlock);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          amax = std::max(amax, std::fabs(source(r, c)));
      float scale = blockScale(amax, type), inverse = 1.0f / scale;
      scaleInv[size_t(scaleIndex(rows, cols, blockDim, r0, c0))] = inverse;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          uint8_t code = toFp8(source(r, c) * scale, type);
          store(r, c, code, fromFp8(code, type) * double(inverse));
        }
    }
  return scaleInv;
}

/// Random high-precision values [rows, cols] (bf16, uniform in [-2, 2))
/// whose magnitude changes by a random power of two, 2^-4 .. 2^4, from one
/// 16 x 32 region to the next, so that neighbouring blocks get other
/// scales and a scale read from the wrong block shows.
std::vector<float> blockSource(int64_t rows, int64_t cols,
                               std::mt19937_64 &rng) {
  int64_t regionCols = (cols + 31) / 32;
  std::vector<float> magnitude(size_t(((rows + 15) / 16) * regionCols));
  std::uniform_int_distribution<int> exponent(-4, 4);
  for (float &value : magnitude)
    value = std::ldexp(1.0f, exponent(rng));
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> values(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float uniform = (float(bits(rng) >> 8) / float(1u << 24)) * 4.0f - 2.0f;
      values[size_t(r * cols + c)] =
          float(fromBf16(toBf16(uniform))) *
          magnitude[size_t((r / 16) * regionCols + c / 32)];
    }
  return values;
}

/// A block-scaled case's operands: FP8 codes with their dequantized values,
/// and the scale_inv tensors.
struct BlockOperands {
  HostTensor a, b;
  std::vector<float> aScales, bScales;
};

/// Casts one operand as te.grouped_block_quantize does (docs/grouped-
/// linear.md): the rows form's a [T, K] per row segment (1-D blocks along
/// K; group g's [nb, m_g] scales from nb * o_g), the contraction's a [M, T]
/// and b [N, T] per column segment (1-D blocks of 128 tokens from the
/// segment's first; group g's [ceil(m_g/128), pad4(R)] scales from pad4(R)
/// * c_g), the rows form's b [G, N, K] per group (1-D or 2-D; group g's
/// from g * s0 * s1). The offsets are written out here from the contract.
/// Tokens no group owns stay 0, as do unowned scales.
void castOperand(const Case &c, const GroupedGemmStep &step, bool operandB,
                 std::mt19937_64 &rng, HostTensor &tensor,
                 std::vector<float> &scales) {
  using tejit::blockscale::pad4;
  const TensorType &type = operandB ? step.bType : step.aType;
  tensor.type = type.element;
  tensor.bytes.assign(size_t(type.numElements()), 0);
  tensor.values.assign(size_t(type.numElements()), 0.0);
  scales.assign(size_t(groupedScaleType(step, operandB).numElements()), 0.0f);
  auto place = [&](const std::vector<float> &local, int64_t offset) {
    std::copy(local.begin(), local.end(), scales.begin() + offset);
  };
  const std::vector<int64_t> &shape = type.shape;
  if (c.form == Form::Rows && operandB) {
    int64_t n = shape[1], k = shape[2];
    int64_t blockDim = c.bScaling == GemmScaling::Block1D ? 1 : 2;
    for (int64_t g = 0; g < groupsOf(c); ++g) {
      std::vector<float> source = blockSource(n, k, rng);
      size_t base = size_t(g * n * k);
      std::vector<float> local = blockQuantize(
          n, k, blockDim, type.element,
          [&](int64_t r, int64_t col) { return source[size_t(r * k + col)]; },
          [&](int64_t r, int64_t col, uint8_t code, double value) {
            tensor.bytes[base + size_t(r * k + col)] = code;
            tensor.values[base + size_t(r * k + col)] = value;
          });
      place(local, g * int64_t(local.size()));
    }
    return;
  }
  int64_t rows = shape[0], cols = shape[1];
  std::vector<float> source = blockSource(rows, cols, rng);
  int64_t o = 0, blocksBefore = 0; // o_g, c_g
  for (int32_t size : c.splits) {
    int64_t m = size;
    if (c.form == Form::Rows) {
      // Rows [o, o + m_g) of a [T, K].
      std::vector<float> local = blockQuantize(
          m, cols, 1, type.element,
          [&](int64_t r, int64_t col) {
            return source[size_t((o + r) * cols + col)];
          },
          [&](int64_t r, int64_t col, uint8_t code, double value) {
            tensor.bytes[size_t((o + r) * cols + col)] = code;
            tensor.values[size_t((o + r) * cols + col)] = value;
          });
      place(local, (cols + 127) / 128 * o);
    } else {
      // Columns [o, o + m_g) of a [R, T] operand, cast transposed.
      std::vector<float> local = blockQuantize(
          rows, m, 1, type.element,
          [&](int64_t r, int64_t t) {
            return source[size_t(r * cols + o + t)];
          },
          [&](int64_t r, int64_t t, uint8_t code, double value) {
            tensor.bytes[size_t(r * cols + o + t)] = code;
            tensor.values[size_t(r * cols + o + t)] = value;
          });
      place(local, pad4(rows) * blocksBefore);
    }
    o += m;
    blocksBefore += (m + 127) / 128;
  }
}

BlockOperands blockOperands(const Case &c, const GroupedGemmStep &step,
                            std::mt19937_64 &rng) {
  BlockOperands operands;
  castOperand(c, step, false, rng, operands.a, operands.aScales);
  castOperand(c, step, true, rng, operands.b, operands.bScales);
  return operands;
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
  function.values[1].type = groupedScaleType(step, false);
  function.values[2].type = groupedScaleType(step, true);
  function.values[3].type = step.outType;
  llvm::Expected<GroupedGemm> grouped = GroupedGemm::create(step, function);
  if (!grouped) {
    result.fail("create: " + llvm::toString(grouped.takeError()));
    return result;
  }

  // Block-scaled: fresh data cast per group into the block layouts (the
  // reference reads the dequantized values, per-tensor scales 1).
  bool blocks = c.blockScaled();
  BlockOperands blockScaled;
  if (blocks)
    blockScaled = blockOperands(c, step, rng);
  HostTensor a = blocks
                     ? std::move(blockScaled.a)
                     : randomTensor(c.a, size_t(step.aType.numElements()), rng);
  HostTensor b = blocks
                     ? std::move(blockScaled.b)
                     : randomTensor(c.b, size_t(step.bType.numElements()), rng);
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
  if (blocks) {
    aScaleF = std::move(blockScaled.aScales);
    bScaleF = std::move(blockScaled.bScales);
  } else if (c.fp8) {
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
               aScaleBuffer = gpu.allocate(aScaleF.size() * 4, "a_scale_inv"),
               bScaleBuffer = gpu.allocate(bScaleF.size() * 4, "b_scale_inv"),
               accumulateBuffer =
                   gpu.allocate(accumulated.bytes.size(), "accumulate");
  gpu.upload(aBuffer, a.bytes.data(), a.bytes.size());
  gpu.upload(bBuffer, b.bytes.data(), b.bytes.size());
  if (c.bias)
    gpu.upload(biasBuffer, bias.bytes.data(), bias.bytes.size());
  gpu.upload(aScaleBuffer, aScaleF.data(), aScaleF.size() * 4);
  gpu.upload(bScaleBuffer, bScaleF.data(), bScaleF.size() * 4);
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
  // executor's way; without slots the runner copies each group's). Block
  // scales are read in place.
  DeviceBuffer scaleSlots = gpu.allocate(scaleSlotBytes(g), "scale slots");
  if (c.fp8 && !blocks)
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

/// The cases of the high-precision and per-tensor FP8 grouped GEMMs.
std::vector<Case> baseCases(bool large) {
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

/// Float8BlockScaling (docs/grouped-linear.md, session 28): both forms,
/// b 1-D and 2-D in the rows form, E4M3 and E5M2 x E4M3 (dgrad, wgrad),
/// bf16 and f32 outputs, accumulation into main_grads (in place, from
/// another buffer, per-group buffers in reverse), side streams; segments
/// longer than a block of 128 tokens and no multiples of 128 (the last
/// block of a segment is short), an empty group, padding tokens.
void appendBlockCases(std::vector<Case> &list, bool large) {
  using E = ElementType;
  using S = GemmScaling;
  using Acc = Case::Accumulate;
  E bf16 = E::BF16, f32 = E::F32, e4m3 = E::F8E4M3, e5m2 = E::F8E5M2;
  // T = 512: 64 or 96 padding tokens (none for G = 1 ... 64).
  const std::vector<int32_t> g1 = {448}, g4 = {192, 0, 48, 176},
                             g8 = {64, 16, 0, 144, 32, 0, 48, 112};
  size_t first = list.size();
  auto rows = [&](std::string name, std::vector<int32_t> splits, E a,
                  S bScaling, E out = E::BF16, bool bias = false) {
    Case c;
    c.bias = bias;
    c.name = "block rows " + name;
    c.form = Form::Rows;
    c.fp8 = true;
    c.a = a;
    c.b = e4m3;
    c.out = out;
    c.tokens = 512;
    c.k = 320; // blocks of 128, 128, 64
    c.n = 192; // 2-D: tile rows of 128 and 64
    c.splits = std::move(splits);
    c.transposeB = true;
    c.aScaling = S::Block1D;
    c.bScaling = bScaling;
    list.push_back(c);
  };
  auto contraction = [&](std::string name, std::vector<int32_t> splits, E a,
                         E out, Acc accumulate = Acc::None) {
    Case c;
    c.name = "block contraction " + name;
    c.form = Form::Contraction;
    c.fp8 = true;
    c.a = a;
    c.b = e4m3;
    c.out = out;
    c.tokens = 512;
    c.m = 96;
    c.n = 160;
    c.splits = std::move(splits);
    c.accumulate = accumulate;
    c.aScaling = c.bScaling = S::Block1D;
    list.push_back(c);
  };
  rows("fprop E4M3, b 1-D G=1", g1, e4m3, S::Block1D);
  rows("fprop E4M3, b 1-D G=4", g4, e4m3, S::Block1D);
  rows("fprop E4M3, b 2-D G=4", g4, e4m3, S::Block2D);
  rows("fprop E4M3, b 2-D G=8 -> f32", g8, e4m3, S::Block2D, f32);
  rows("dgrad E5M2 x E4M3, b 1-D G=4", g4, e5m2, S::Block1D);
  rows("dgrad E5M2 x E4M3, b 2-D G=8", g8, e5m2, S::Block2D);
  // A bias (bf16, out's type): each group's rows filled with it, then C.
  rows("fprop E4M3, b 1-D G=1, bias", g1, e4m3, S::Block1D, bf16, true);
  rows("fprop E4M3, b 2-D G=4, bias", g4, e4m3, S::Block2D, bf16, true);
  rows("fprop E4M3, b 1-D G=8, bias", g8, e4m3, S::Block1D, bf16, true);
  contraction("wgrad E5M2 x E4M3 G=1", g1, e5m2, bf16);
  contraction("wgrad E5M2 x E4M3 G=4", g4, e5m2, bf16);
  contraction("E4M3 G=8 -> f32", g8, e4m3, f32);
  contraction("wgrad E5M2 x E4M3 -> f32 G=8 accumulated in place", g8, e5m2,
              f32, Acc::InPlace);
  contraction("wgrad E5M2 x E4M3 -> f32 G=4 accumulated from another buffer",
              g4, e5m2, f32, Acc::OtherBuffer);
  contraction("wgrad E5M2 x E4M3 -> f32 G=4 accumulated into per-group "
              "buffers",
              g4, e5m2, f32, Acc::PerGroupReversed);
  for (size_t index = first, count = list.size(); index < count; ++index) {
    if (list[index].name.find("G=8") == std::string::npos)
      continue;
    Case c = list[index];
    c.name += ", on side streams";
    c.lanes = true;
    list.push_back(c);
  }
  if (!large)
    return;

  // T = 8192, G = 8, no split a multiple of 128, 256 padding tokens.
  const std::vector<int32_t> big = {1040, 2032, 0, 496, 1552, 1008, 784, 1024};
  auto bigRows = [&](std::string name, S bScaling, std::vector<int32_t> splits,
                     int64_t k, int64_t n, bool lanes = false,
                     bool bias = false) {
    Case c;
    c.bias = bias;
    c.name = "large block rows " + name;
    c.form = Form::Rows;
    c.fp8 = true;
    c.a = c.b = e4m3;
    c.out = bf16;
    c.tokens = 8192;
    c.k = k;
    c.n = n;
    c.splits = std::move(splits);
    c.transposeB = true;
    c.aScaling = S::Block1D;
    c.bScaling = bScaling;
    c.samples = 8192;
    c.timed = true;
    c.lanes = lanes;
    list.push_back(c);
  };
  bigRows("fprop E4M3, b 2-D T=8192 K=4096 N=2048 G=8", S::Block2D, big, 4096,
          2048);
  bigRows("fprop E4M3, b 1-D T=8192 K=4096 N=2048 G=8", S::Block1D, big, 4096,
          2048);
  // Fine-grained experts: 32 of 256 tokens, 2048 -> 1408; also on lanes.
  const std::vector<int32_t> fine(32, 256);
  for (bool lanes : {false, true})
    bigRows(std::string("fprop E4M3, b 2-D T=8192 K=2048 N=1408 G=32") +
                (lanes ? ", on 4 side streams" : ""),
            S::Block2D, fine, 2048, 1408, lanes);
  // With a bias: one tejit_grouped_bias_rows launch for the 32 groups, in
  // the graph.
  bigRows("fprop E4M3, b 2-D T=8192 K=2048 N=1408 G=32, bias, on 4 side "
          "streams",
          S::Block2D, fine, 2048, 1408, true, true);
  for (Acc accumulate : {Acc::None, Acc::InPlace}) {
    Case c;
    c.name = std::string("large block contraction wgrad E5M2 x E4M3 ") +
             (accumulate == Acc::None ? "" : "into f32 main_grads in place ") +
             "T=8192 M=2048 N=4096 G=8";
    c.form = Form::Contraction;
    c.fp8 = true;
    c.a = e5m2;
    c.b = e4m3;
    c.out = accumulate == Acc::None ? bf16 : f32;
    c.accumulate = accumulate;
    c.tokens = 8192;
    c.m = 2048;
    c.n = 4096;
    c.splits = big;
    c.aScaling = c.bScaling = S::Block1D;
    c.samples = 8192;
    c.timed = true;
    list.push_back(c);
  }
}

/// Every case: baseCases' (their seeds unchanged), then the block-scaled.
std::vector<Case> cases(bool large) {
  std::vector<Case> list = baseCases(large);
  appendBlockCases(list, large);
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

/// The executor block cases' name (a prefix of each line they report).
std::string executorBlockName(bool bias) {
  return bias ? "executor: block-scaled plan with a bias"
              : "executor: block-scaled plan";
}

/// A forward whose one step is a block-scaled FP8 grouped GEMM (rows,
/// Float8BlockScaling: a's 1-D segments scales, b's 2-D stacked scales),
/// all operands arguments: T = 256, K = 256, N = 128, G = 4; with `bias`,
/// also a bf16 bias [4, 128] (argument 5, value 6).
std::string executorBlockPlan(bool bias) {
  std::string text = R"json({
  "format": "tejit-plan", "version": 5, "arch": "sm_90a",
  "functions": [{
    "name": "moe_block", "arena_bytes": 0,
    "arguments": [
      {"value": 0, "te.name": "input_fp8"},
      {"value": 1, "te.name": "m_splits", "host": true},
      {"value": 2, "te.name": "weight_fp8", "te.parameter": true},
      {"value": 3, "te.name": "input_scale_inv"},
      {"value": 4, "te.name": "weight_scale_inv", "te.parameter": true}BIAS_ARGUMENT
    ],
    "results": [{"value": 5, "te.name": "output"}],
    "values": [
      {"id": 0, "type": "tensor<256x256xf8E4M3FN>", "bytes": 65536,
       "storage": {"arg": 0}},
      {"id": 1, "type": "tensor<4xi32>", "bytes": 16, "storage": {"arg": 1}},
      {"id": 2, "type": "tensor<4x128x256xf8E4M3FN>", "bytes": 131072,
       "storage": {"arg": 2}},
      {"id": 3, "type": "tensor<2x256xf32>", "bytes": 2048,
       "storage": {"arg": 3}},
      {"id": 4, "type": "tensor<4x1x4xf32>", "bytes": 64,
       "storage": {"arg": 4}},
      {"id": 5, "type": "tensor<256x128xbf16>", "bytes": 65536,
       "storage": {"result": 0}}BIAS_VALUE
    ],
    "steps": [
      {"kind": "grouped_gemm", "form": "rows", "a": 0, "b": 2,
       "m_splits": 1, "out": 5, "a_type": "tensor<256x256xf8E4M3FN>",
       "b_type": "tensor<4x128x256xf8E4M3FN>",
       "out_type": "tensor<256x128xbf16>", "groups": 4, "fp8": true,
       "a_scale_inv": 3, "b_scale_inv": 4, "a_scaling": "block_1d",
       "b_scaling": "block_2d", "fast_accum": falseBIAS_STEP}
    ]
  }]
})json";
  auto replace = [&](llvm::StringRef marker, llvm::StringRef with) {
    size_t at = text.find(marker.str());
    text.replace(at, marker.size(), bias ? with.str() : std::string());
  };
  replace("BIAS_ARGUMENT", R"(,
      {"value": 6, "te.name": "bias", "te.parameter": true})");
  replace("BIAS_VALUE", R"(,
      {"id": 6, "type": "tensor<4x128xbf16>", "bytes": 1024,
       "storage": {"arg": 5}})");
  replace("BIAS_STEP", R"(, "bias": 6)");
  return text;
}

/// The executor's path for a block-scaled grouped GEMM: the plan parsed
/// from JSON (no scale slots: block scales are read in place), eager runs
/// with other splits (the operands cast anew for each), and a capture
/// (allowed) replayed after an eager run with other splits and data. With
/// `bias`, the plan's step adds a bf16 bias (the bias fill's copies are
/// captured too).
void executorBlockCases(const Gpu &gpu, GemmRunner &gemms, uint64_t seed,
                        bool bias, Tally &tally) {
  std::string text = executorBlockPlan(bias);
  std::string name = executorBlockName(bias);
  llvm::Expected<Plan> parsed = parsePlan(llvm::StringRef(text));
  if (!parsed) {
    Result result;
    result.fail(llvm::toString(parsed.takeError()));
    tally.report(name, result);
    return;
  }
  Bundle bundle;
  bundle.plan = std::move(*parsed);
  ModuleSet modules(bundle);
  auto executor = Executor::create(bundle.plan.functions[0], modules, gemms);
  if (!executor) {
    Result result;
    result.fail(llvm::toString(executor.takeError()));
    tally.report(name + ", create", result);
    return;
  }
  Case c;
  c.form = Form::Rows;
  c.fp8 = true;
  c.a = c.b = ElementType::F8E4M3;
  c.out = ElementType::BF16;
  c.tokens = 256;
  c.k = 256;
  c.n = 128;
  c.transposeB = true;
  c.aScaling = GemmScaling::Block1D;
  c.bScaling = GemmScaling::Block2D;
  c.splits = {0, 0, 0, 0};
  c.bias = bias;
  std::mt19937_64 rng(seed + (bias ? 29 : 28));
  GroupedGemmStep step = stepOf(c);
  constexpr size_t guard = 256, outBytes = 256 * 128 * 2;
  DeviceBuffer xBuffer = gpu.allocate(256 * 256, "x"),
               wBuffer = gpu.allocate(4 * 128 * 256, "w"),
               aScaleBuffer = gpu.allocate(
                   size_t(groupedScaleType(step, false).bytes()), "x scales"),
               bScaleBuffer = gpu.allocate(
                   size_t(groupedScaleType(step, true).bytes()), "w scales"),
               outBuffer = gpu.allocate(outBytes + guard, "out"),
               biasBuffer = gpu.allocate(bias ? 4 * 128 * 2 : 0, "bias");
  HostTensor biasValues, none;
  if (bias) {
    biasValues = randomTensor(ElementType::BF16, 4 * 128, rng);
    gpu.upload(biasBuffer, biasValues.bytes.data(), biasValues.bytes.size());
  }
  // The operands cast for `splits` (a's scales depend on them).
  auto cast = [&](const std::vector<int32_t> &splits) {
    c.splits = splits;
    return blockOperands(c, stepOf(c), rng);
  };
  auto upload = [&](const BlockOperands &operands) {
    gpu.upload(xBuffer, operands.a.bytes.data(), operands.a.bytes.size());
    gpu.upload(wBuffer, operands.b.bytes.data(), operands.b.bytes.size());
    gpu.upload(aScaleBuffer, operands.aScales.data(),
               operands.aScales.size() * 4);
    gpu.upload(bScaleBuffer, operands.bScales.data(),
               operands.bScales.size() * 4);
  };
  auto runWith = [&](std::vector<int32_t> splits) -> llvm::Error {
    auto host = std::make_unique<std::vector<int32_t>>(splits);
    std::vector<CUdeviceptr> arguments = {
        xBuffer.get(), CUdeviceptr(reinterpret_cast<uintptr_t>(host->data())),
        wBuffer.get(), aScaleBuffer.get(), bScaleBuffer.get()};
    if (bias)
      arguments.push_back(biasBuffer.get());
    CUdeviceptr results[] = {outBuffer.get()};
    return (*executor)->run(arguments, results, 0, 0, gpu.stream);
  };
  std::vector<double> ones(4, 1.0);
  auto verify = [&](const BlockOperands &operands,
                    const std::vector<int32_t> &splits, Result &result) {
    std::vector<uint8_t> out(outBytes + guard);
    gpu.download(out.data(), outBuffer.get(), out.size());
    c.splits = splits;
    Reference reference(c, operands.a, operands.b, biasValues, none, ones,
                        ones);
    compare(c, reference, out, outBytes, guard, rng, result);
  };

  for (std::vector<int32_t> splits : {std::vector<int32_t>{64, 0, 96, 64},
                                      std::vector<int32_t>{16, 128, 0, 48},
                                      std::vector<int32_t>{0, 0, 0, 256}}) {
    Result result;
    BlockOperands operands = cast(splits);
    upload(operands);
    gpu.fill(outBuffer, 0xff);
    if (llvm::Error error = runWith(splits))
      result.fail(llvm::toString(std::move(error)));
    else
      verify(operands, splits, result);
    tally.report(llvm::formatv("{0}, host m_splits {1} {2} {3} {4}", name,
                               splits[0], splits[1], splits[2], splits[3])
                     .str(),
                 result);
  }

  // Captured with fixed splits, replayed after an eager run with others.
  Result result;
  const CudaDriver &driver = gpu.driver;
  (*executor)->setHostArgumentsCapturable(true);
  const std::vector<int32_t> captured = {32, 64, 0, 128},
                             other = {48, 0, 160, 16};
  BlockOperands capturedOperands = cast(captured);
  upload(capturedOperands);
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  check(driver.check(
      driver.cuStreamBeginCapture(gpu.stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
      "cuStreamBeginCapture"));
  llvm::Error error = runWith(captured);
  CUresult ended = driver.cuStreamEndCapture(gpu.stream, &graph);
  if (error)
    result.fail("capture: " + llvm::toString(std::move(error)));
  else if (ended != CUDA_SUCCESS || !graph)
    result.fail("the capture could not be ended");
  else
    check(driver.check(driver.cuGraphInstantiateWithFlags(&exec, graph, 0),
                       "cuGraphInstantiate"));
  if (exec) {
    BlockOperands otherOperands = cast(other);
    upload(otherOperands);
    gpu.fill(outBuffer, 0xff);
    if (llvm::Error eager = runWith(other))
      result.fail("eager run: " + llvm::toString(std::move(eager)));
    else
      verify(otherOperands, other, result);
    upload(capturedOperands);
    gpu.fill(outBuffer, 0xff);
    check(
        driver.check(driver.cuGraphLaunch(exec, gpu.stream), "cuGraphLaunch"));
    gpu.sync();
    Result replay;
    verify(capturedOperands, captured, replay);
    if (!replay.pass)
      result.fail("the replay: " + replay.detail);
    else if (result.pass)
      result.detail = "replay: " + replay.detail;
    driver.cuGraphExecDestroy(exec);
  }
  if (graph)
    driver.cuGraphDestroy(graph);
  (*executor)->setHostArgumentsCapturable(false);
  tally.report(name + ", capture replays its m_splits", result);
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
  for (bool bias : {false, true})
    if (filter.empty() ||
        executorBlockName(bias).find(filter) != std::string::npos)
      executorBlockCases(gpu, *gemms, seed, bias, tally);
  if (filter.empty() || std::string("staging ring").find(filter) == 0)
    stagingCase(gpu, seed, tally);
  std::printf("%d passed, %d failed\n", tally.passed, tally.failed);
  gemms.reset();
  driver.cuStreamDestroy(gpu.stream);
  return tally.failed ? 1 : 0;
}
