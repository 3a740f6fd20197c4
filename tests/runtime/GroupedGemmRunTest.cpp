//===- GroupedGemmRunTest.cpp - a grouped GEMM's groups, without a GPU ----===//
//
// GroupedGemm::run (runtime/GroupedGemm.h) splits a grouped_gemm step into
// one plan GEMM per non-empty group and zeroes what no group writes. Here
// the GemmRunner is a host one that computes each GEMM it is given as the
// runner's contract says (row-major out = op(a) op(b), FP8 TN with the
// scale_inv pointers, the bias epilogue, row strides), on host memory, and
// the driver's memset is the host's. Every output of random grouped GEMMs
// (both forms, every layout, f32 and FP8 operands, G = 1, 4, 8 with empty
// groups and padding rows) is compared with a float64 product computed
// here from the whole tensors; padding rows and empty groups' products
// must be exactly 0 and nothing past the output may be written. A
// contraction step that accumulates (fuse_wgrad_accumulation's main_grad)
// adds each product to its [M, N] slice of `accumulate`, in place or from
// another buffer, and leaves an empty group's slice as it is there. Then
// run must refuse bad m_splits before it issues anything.
// Float8BlockScaling: each group's GEMM is block-scaled (1-D a, 1-D or 2-D
// b; no fast accumulation) with scale pointers at the group's offsets in
// the layouts of docs/grouped-linear.md (written out here independently of
// dialects/GroupedBlockScaleLayout.h), and the host runner dequantizes by
// blocks as cuBLASLt reads them (BlockScaleLayout.h for one matrix): the
// result must match a float64 product of the whole operands dequantized
// through the contract's layouts, whose unowned scales are NaN. Misaligned
// block scales and bad block scalings are refused. A block-scaled rows
// step's bias is no epilogue: before the groups' GEMMs, one launch of
// tejit_grouped_bias_rows per 256 groups (its parameters checked and the
// kernel emulated here on the host: no module is loaded for real) writes
// every group's out rows with its bias row, which the group's GEMM reads as
// C (residual = out, beta = 1); a bias of another type than out is
// refused.
//
//===----------------------------------------------------------------------===//
#include "runtime/GroupedGemm.h"
#include "tests/runtime/ReversedGroups.h"

#include "dialects/BlockScaleLayout.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

using namespace tejit::runtime;
using Form = GroupedGemmStep::Form;

namespace {

double decode(const void *base, ElementType type, int64_t index) {
  const auto *bytes = static_cast<const uint8_t *>(base);
  switch (type) {
  case ElementType::F32: {
    float value;
    std::memcpy(&value, bytes + 4 * index, 4);
    return value;
  }
  case ElementType::BF16: {
    uint32_t bits = 0;
    std::memcpy(reinterpret_cast<char *>(&bits) + 2, bytes + 2 * index, 2);
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  }
  case ElementType::F8E4M3: {
    uint8_t v = bytes[index];
    int exponent = (v >> 3) & 15, mantissa = v & 7;
    double magnitude = exponent ? std::ldexp(1 + mantissa / 8.0, exponent - 7)
                                : std::ldexp(mantissa / 8.0, -6);
    return v & 0x80 ? -magnitude : magnitude;
  }
  case ElementType::F8E5M2: {
    uint8_t v = bytes[index];
    int exponent = (v >> 2) & 31, mantissa = v & 3;
    double magnitude = exponent ? std::ldexp(1 + mantissa / 4.0, exponent - 15)
                                : std::ldexp(mantissa / 4.0, -14);
    return v & 0x80 ? -magnitude : magnitude;
  }
  default:
    ADD_FAILURE() << "unexpected type";
    return 0;
  }
}

/// One GEMM the runner was asked for.
struct Call {
  int64_t m, n, k;
  int64_t aRowStride, bRowStride;
  GemmScaling aScaling = GemmScaling::Tensor, bScaling = GemmScaling::Tensor;
  bool fastAccum = false;
  const void *a = nullptr, *b = nullptr;
  const void *aScaleInv = nullptr, *bScaleInv = nullptr;
};

/// The block scale (Float8BlockScaling) of element (row, col) of an FP8
/// operand [rows, cols] whose scale_inv tensor is at `scales`, laid out as
/// dialects/BlockScaleLayout.h says for one matrix: what cuBLASLt reads.
double blockScale(const void *scales, GemmScaling scaling, int64_t rows,
                  int64_t cols, int64_t row, int64_t col) {
  int64_t blockDim = scaling == GemmScaling::Block1D ? 1 : 2;
  return decode(scales, ElementType::F32,
                tejit::blockscale::scaleIndex(rows, cols, blockDim, row, col));
}

/// Runs plan GEMMs on the host as GemmRunner's contract says.
class HostGemmRunner final : public GemmRunner {
public:
  llvm::Error run(const GemmStep &step, const FunctionPlan &function,
                  const GemmPointers &pointers, void *stream) override {
    if (inspect)
      inspect(step, function, pointers);
    const std::vector<int64_t> &a = step.aType.shape, &b = step.bType.shape;
    bool transposeA = !step.scaled && step.transposeA;
    bool transposeB = step.scaled || step.transposeB;
    int64_t m = transposeA ? a[1] : a[0], k = transposeA ? a[0] : a[1];
    int64_t n = transposeB ? b[0] : b[1];
    EXPECT_EQ(transposeB ? b[1] : b[0], k);
    EXPECT_EQ(step.outType.shape, (std::vector<int64_t>{m, n}));
    calls.push_back({m, n, k, pointers.aRowStride, pointers.bRowStride,
                     step.aScaling, step.bScaling, step.fastAccum, pointers.a,
                     pointers.b, pointers.aScaleInv, pointers.bScaleInv});
    int64_t lda = pointers.aRowStride ? pointers.aRowStride : a[1];
    int64_t ldb = pointers.bRowStride ? pointers.bRowStride : b[1];
    double scale = 1;
    bool blocks = step.scaled && step.aScaling != GemmScaling::Tensor;
    if (blocks) {
      // Read in place: cuBLASLt wants them 16-byte aligned.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers.aScaleInv) % 16, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers.bScaleInv) % 16, 0u);
      EXPECT_FALSE(step.fastAccum);
      EXPECT_NE(step.bScaling, GemmScaling::Tensor);
    }
    if (step.scaled && alignedScales && !blocks) {
      // Staged by the grouped GEMM into its scale slots.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers.aScaleInv) % 16, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers.bScaleInv) % 16, 0u);
    }
    if (step.scaled && !blocks)
      scale = decode(pointers.aScaleInv, ElementType::F32, 0) *
              decode(pointers.bScaleInv, ElementType::F32, 0);
    if (step.epilogue.residual) {
      const TensorType &type = function.values[*step.epilogue.residual].type;
      EXPECT_EQ(type.shape, (std::vector<int64_t>{m, n}));
      EXPECT_EQ(type.element, ElementType::F32);
    }
    std::optional<ElementType> biasType;
    if (step.epilogue.bias) {
      const TensorType &type = function.values[*step.epilogue.bias].type;
      EXPECT_EQ(type.shape, std::vector<int64_t>{n});
      biasType = type.element;
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          // a as stored: [m, k] or [k, m]; b: [n, k] or [k, n].
          int64_t aIndex = transposeA ? kk * lda + i : i * lda + kk;
          int64_t bIndex = transposeB ? j * ldb + kk : kk * ldb + j;
          double product = decode(pointers.a, step.aType.element, aIndex) *
                           decode(pointers.b, step.bType.element, bIndex);
          // FP8 block-scaled: TN, a [m, k] and b [n, k].
          if (blocks)
            product *=
                blockScale(pointers.aScaleInv, step.aScaling, m, k, i, kk) *
                blockScale(pointers.bScaleInv, step.bScaling, n, k, j, kk);
          sum += product;
        }
        sum *= scale;
        if (biasType)
          sum += decode(pointers.bias, *biasType, j);
        if (step.epilogue.residual)
          sum += decode(pointers.residual, ElementType::F32, i * n + j);
        EXPECT_EQ(step.outType.element, ElementType::F32);
        float value = float(sum);
        std::memcpy(static_cast<char *>(pointers.out) + 4 * (i * n + j), &value,
                    4);
      }
    return llvm::Error::success();
  }
  std::vector<Call> calls;
  /// Whether the FP8 scale pointers must be 16-byte aligned (staged).
  bool alignedScales = false;
  /// Called with each GEMM before it runs (what its C holds then).
  std::function<void(const GemmStep &, const FunctionPlan &,
                     const GemmPointers &)>
      inspect;
};

CUresult hostMemset(CUdeviceptr pointer, unsigned char value, size_t bytes,
                    CUstream) {
  std::memset(reinterpret_cast<void *>(static_cast<uintptr_t>(pointer)), value,
              bytes);
  return CUDA_SUCCESS;
}

CUresult hostCopy(CUdeviceptr to, CUdeviceptr from, size_t bytes, CUstream) {
  std::memcpy(reinterpret_cast<void *>(static_cast<uintptr_t>(to)),
              reinterpret_cast<const void *>(static_cast<uintptr_t>(from)),
              bytes);
  return CUDA_SUCCESS;
}

CUresult hostCopy2D(const CUDA_MEMCPY2D *copy, CUstream) {
  for (size_t row = 0; row < copy->Height; ++row)
    std::memcpy(reinterpret_cast<char *>(static_cast<uintptr_t>(
                    copy->dstDevice + row * copy->dstPitch)),
                reinterpret_cast<const char *>(static_cast<uintptr_t>(
                    copy->srcDevice + row * copy->srcPitch)),
                copy->WidthInBytes);
  return CUDA_SUCCESS;
}

/// The device-to-device copies recordingCopy made (to, from, bytes).
struct Copy {
  uintptr_t to, from;
  size_t bytes;
};
std::vector<Copy> recordedCopies;

CUresult recordingCopy(CUdeviceptr to, CUdeviceptr from, size_t bytes,
                       CUstream stream) {
  recordedCopies.push_back({uintptr_t(to), uintptr_t(from), bytes});
  return hostCopy(to, from, bytes, stream);
}

/// The fake driver's context, module and bias rows kernel.
CUcontext const fakeContext = reinterpret_cast<CUcontext>(uintptr_t(0x100));
CUmodule const fakeModule = reinterpret_cast<CUmodule>(uintptr_t(0x200));
CUfunction const fakeBiasRows = reinterpret_cast<CUfunction>(uintptr_t(0x300));
/// The kernel an executor hands over (GroupedGemm::useBiasRowsKernel).
CUfunction const handedBiasRows =
    reinterpret_cast<CUfunction>(uintptr_t(0x310));

/// The launches emulatedLaunch ran: the function, its grid and block, its
/// stream and its parameters.
struct Launch {
  CUfunction function;
  unsigned blocks[3], threads[3];
  CUstream stream;
  GroupedBiasRowsParams params;
};
std::vector<Launch> recordedLaunches;

/// tejit_grouped_bias_rows (runtime/kernels/GroupedBias.cu) on the host:
/// row t < rows of out gets bias row g, the first group whose end is past
/// t.
CUresult emulatedLaunch(CUfunction function, unsigned gx, unsigned gy,
                        unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sharedBytes, CUstream stream, void **params,
                        void **extra) {
  EXPECT_TRUE(function == fakeBiasRows || function == handedBiasRows);
  EXPECT_EQ(sharedBytes, 0u);
  EXPECT_EQ(extra, nullptr);
  Launch launch = {function, {gx, gy, gz}, {bx, by, bz}, stream, {}};
  std::memcpy(&launch.params, params[0], sizeof(GroupedBiasRowsParams));
  recordedLaunches.push_back(launch);
  const GroupedBiasRowsParams &p = launch.params;
  for (int64_t row = 0, group = 0; row < p.rows; ++row) {
    while (group < p.groups && p.ends[group] <= row)
      ++group;
    if (group == p.groups) {
      ADD_FAILURE() << "row " << row << " is past the last group's end";
      return CUDA_ERROR_INVALID_VALUE;
    }
    std::memcpy(reinterpret_cast<char *>(
                    static_cast<uintptr_t>(p.out + row * p.rowBytes)),
                reinterpret_cast<const char *>(
                    static_cast<uintptr_t>(p.bias + group * p.rowBytes)),
                size_t(p.rowBytes));
  }
  return CUDA_SUCCESS;
}

CudaDriver hostDriver() {
  CudaDriver driver;
  driver.cuMemsetD8Async = hostMemset;
  driver.cuMemcpyDtoDAsync = hostCopy;
  driver.cuMemcpy2DAsync = hostCopy2D;
  driver.cuCtxGetCurrent = [](CUcontext *context) {
    *context = fakeContext;
    return CUDA_SUCCESS;
  };
  driver.cuModuleLoadData = [](CUmodule *module, const void *image) {
    EXPECT_NE(std::strstr(static_cast<const char *>(image),
                          "tejit_grouped_bias_rows"),
              nullptr);
    *module = fakeModule;
    return CUDA_SUCCESS;
  };
  driver.cuModuleGetFunction = [](CUfunction *function, CUmodule module,
                                  const char *name) {
    EXPECT_EQ(module, fakeModule);
    EXPECT_STREQ(name, "tejit_grouped_bias_rows");
    *function = fakeBiasRows;
    return CUDA_SUCCESS;
  };
  driver.cuLaunchKernel = emulatedLaunch;
  return driver;
}

/// Random bytes of `count` elements of `type`: f32 and bf16 in [-2, 2),
/// FP8 with exponents 2^-3 .. 2^3.
std::vector<uint8_t> randomBytes(ElementType type, int64_t count,
                                 std::mt19937 &rng) {
  std::vector<uint8_t> bytes(size_t(count) * elementBytes(type));
  std::uniform_real_distribution<float> uniform(-2, 2);
  std::uniform_int_distribution<int> bits(0, 255), exponent(0, 6);
  for (int64_t i = 0; i < count; ++i) {
    float value = uniform(rng);
    switch (type) {
    case ElementType::F32:
      std::memcpy(&bytes[4 * i], &value, 4);
      break;
    case ElementType::BF16: {
      uint32_t word;
      std::memcpy(&word, &value, 4);
      uint16_t half = uint16_t(word >> 16);
      std::memcpy(&bytes[2 * i], &half, 2);
      break;
    }
    case ElementType::F8E4M3:
      bytes[i] = uint8_t((bits(rng) & 0x80) | ((4 + exponent(rng)) << 3) |
                         (bits(rng) & 7));
      break;
    case ElementType::F8E5M2:
      bytes[i] = uint8_t((bits(rng) & 0x80) | ((12 + exponent(rng)) << 2) |
                         (bits(rng) & 3));
      break;
    default:
      break;
    }
  }
  return bytes;
}

/// Where a contraction step's products are added (its "accumulate").
/// (PerGroupReversed: in place, in G matrices given by per-group pointers,
/// laid out in reverse group order as Megatron-Core's gradient buffer holds
/// a GroupedLinear's main_grads.)
enum class Accumulate { None, OtherBuffer, InPlace, PerGroupReversed };

struct Problem {
  std::string name;
  Form form;
  bool fp8;
  ElementType a, b;
  bool transposeA, transposeB, bias;
  std::vector<int32_t> splits;
  Accumulate accumulate = Accumulate::None;
  /// FP8: give the grouped GEMM scale slots to stage the scales in (else
  /// the runner gets them 4 bytes apart).
  bool scaleSlots = true;
};

/// T = 96; rows: K = 32, N = 16; contraction: M = 16, N = 32.
constexpr int64_t kTokens = 96;

void runProblem(const Problem &problem, unsigned seed) {
  SCOPED_TRACE(problem.name);
  std::mt19937 rng(seed);
  int64_t g = int64_t(problem.splits.size());
  bool rows = problem.form == Form::Rows;
  bool ta = !problem.fp8 && problem.transposeA;
  bool tb = problem.fp8 || problem.transposeB;
  int64_t k = 32, m = 16, n = rows ? 16 : 32, t = kTokens;
  GroupedGemmStep step;
  step.form = problem.form;
  step.fp8 = problem.fp8;
  step.groups = g;
  step.transposeA = problem.transposeA;
  step.transposeB = problem.transposeB;
  if (rows) {
    step.aType = {{t, k}, problem.a};
    step.bType = {tb ? std::vector<int64_t>{g, n, k}
                     : std::vector<int64_t>{g, k, n},
                  problem.b};
    step.outType = {{t, n}, ElementType::F32};
  } else {
    step.aType = {ta ? std::vector<int64_t>{t, m} : std::vector<int64_t>{m, t},
                  problem.a};
    step.bType = {tb ? std::vector<int64_t>{n, t} : std::vector<int64_t>{t, n},
                  problem.b};
    step.outType = {{g, m, n}, ElementType::F32};
  }
  ElementType biasType = problem.fp8 ? ElementType::BF16 : ElementType::F32;
  FunctionPlan function;
  function.values.resize(4);
  function.values[0].type = {{g, n}, biasType};
  function.values[3].type = step.outType;
  if (problem.accumulate != Accumulate::None)
    step.accumulate = 3;
  if (problem.bias)
    step.bias = 0;
  if (problem.fp8) {
    step.aScaleInv = 1;
    step.bScaleInv = 2;
  }
  llvm::Expected<GroupedGemm> grouped = GroupedGemm::create(step, function);
  ASSERT_TRUE(bool(grouped)) << llvm::toString(grouped.takeError());

  std::vector<uint8_t> a = randomBytes(problem.a, step.aType.numElements(),
                                       rng),
                       b = randomBytes(problem.b, step.bType.numElements(),
                                       rng),
                       bias = randomBytes(biasType, g * n, rng);
  std::vector<float> aScale(size_t(g), 1), bScale(size_t(g), 1);
  std::uniform_int_distribution<int> exponent(-3, 3);
  for (int64_t i = 0; i < g; ++i) {
    aScale[size_t(i)] = std::ldexp(1.0f, exponent(rng));
    bScale[size_t(i)] = std::ldexp(1.0f, exponent(rng));
  }
  int64_t outCount = step.outType.numElements();
  constexpr size_t guard = 64;
  std::vector<uint8_t> out(size_t(outCount) * 4 + guard, 0xff);
  std::vector<uint8_t> accumulated =
      randomBytes(ElementType::F32, outCount, rng);
  if (problem.accumulate == Accumulate::InPlace)
    std::memcpy(out.data(), accumulated.data(), accumulated.size());
  // Per-group matrices: group i's at slot G - 1 - i of `out`.
  bool perGroup = problem.accumulate == Accumulate::PerGroupReversed;
  size_t groupBytes = size_t(m * n) * 4;
  auto reverseGroups = [&](uint8_t *bytes) {
    tejit::testing::reverseGroups(bytes, g, groupBytes);
  };
  std::vector<CUdeviceptr> groupOut;
  if (perGroup) {
    std::memcpy(out.data(), accumulated.data(), accumulated.size());
    reverseGroups(out.data());
    for (int64_t i = 0; i < g; ++i)
      groupOut.push_back(reinterpret_cast<CUdeviceptr>(
          out.data() + size_t(g - 1 - i) * groupBytes));
  }

  GroupedGemmPointers pointers;
  pointers.a = a.data();
  pointers.b = b.data();
  pointers.out = out.data();
  if (problem.bias)
    pointers.bias = bias.data();
  if (problem.accumulate == Accumulate::OtherBuffer)
    pointers.accumulate = accumulated.data();
  if (problem.accumulate == Accumulate::InPlace)
    pointers.accumulate = out.data();
  if (perGroup) {
    // The stacked pointers mean nothing then.
    pointers.out = nullptr;
    pointers.groupOut = groupOut;
  }
  if (problem.fp8) {
    pointers.aScaleInv = aScale.data();
    pointers.bScaleInv = bScale.data();
  }
  // 16-byte aligned host memory for the staged scales.
  std::vector<uint8_t> slots(scaleSlotBytes(g) + 16);
  size_t misalignment = reinterpret_cast<uintptr_t>(slots.data()) % 16;
  if (problem.fp8 && problem.scaleSlots)
    pointers.scaleSlots = slots.data() + (misalignment ? 16 - misalignment : 0);
  HostGemmRunner runner;
  runner.alignedScales = pointers.scaleSlots != nullptr;
  CudaDriver driver = hostDriver();
  llvm::Error error =
      grouped->run(runner, problem.splits, pointers, nullptr, driver);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));
  if (perGroup)
    reverseGroups(out.data());

  // One GEMM per non-empty group; column ranges have row stride T.
  size_t nonEmpty = 0;
  for (int32_t size : problem.splits)
    nonEmpty += size != 0;
  EXPECT_EQ(runner.calls.size(), nonEmpty);
  for (const Call &call : runner.calls) {
    if (rows) {
      EXPECT_EQ(call.aRowStride, 0);
      EXPECT_EQ(call.bRowStride, 0);
    } else {
      EXPECT_EQ(call.aRowStride, ta ? 0 : t);
      EXPECT_EQ(call.bRowStride, tb ? t : 0);
    }
  }

  // The float64 reference, from the whole tensors.
  std::vector<int64_t> offsets = {0};
  for (int32_t size : problem.splits)
    offsets.push_back(offsets.back() + size);
  auto aAt = [&](int64_t row, int64_t col, int64_t cols) {
    return decode(a.data(), problem.a, row * cols + col);
  };
  auto bAt = [&](int64_t index) { return decode(b.data(), problem.b, index); };
  for (int64_t index = 0; index < outCount; ++index) {
    double want = 0;
    bool zero = false;
    if (rows) {
      int64_t row = index / n, col = index % n;
      int64_t group = -1;
      for (int64_t i = 0; i < g; ++i)
        if (row >= offsets[i] && row < offsets[i + 1])
          group = i;
      if (group < 0) {
        zero = true;
      } else {
        for (int64_t kk = 0; kk < k; ++kk)
          want += aAt(row, kk, k) *
                  bAt(group * n * k + (tb ? col * k + kk : kk * n + col));
        if (problem.fp8)
          want *= double(aScale[group]) * bScale[group];
        if (problem.bias)
          want += decode(bias.data(), biasType, group * n + col);
      }
    } else {
      int64_t group = index / (m * n), row = (index / n) % m, col = index % n;
      zero = problem.splits[group] == 0;
      for (int64_t tt = offsets[group]; tt < offsets[group + 1]; ++tt)
        want += (ta ? aAt(tt, row, m) : aAt(row, tt, t)) *
                bAt(tb ? col * t + tt : tt * n + col);
      if (problem.fp8)
        want *= double(aScale[group]) * bScale[group];
      if (problem.accumulate != Accumulate::None) {
        // An empty group's slice keeps the accumulated values.
        want += decode(accumulated.data(), ElementType::F32, index);
        zero = false;
      }
    }
    double got = decode(out.data(), ElementType::F32, index);
    if (zero) {
      ASSERT_EQ(got, 0.0) << "out[" << index
                          << "] is written by no group and must be 0";
      continue;
    }
    ASSERT_NEAR(got, want, 1e-5 * (1 + std::fabs(want)))
        << "out[" << index << "]";
  }
  for (size_t i = size_t(outCount) * 4; i < out.size(); ++i)
    ASSERT_EQ(out[i], 0xff) << "byte " << i << " past the output";
}

TEST(GroupedGemmRunTest, MatchesFloat64) {
  using E = ElementType;
  const std::vector<int32_t> g1 = {80}, g4 = {16, 0, 32, 32},
                             g8 = {16, 0, 16, 16, 0, 16, 16, 0},
                             odd = {7, 0, 29, 41};
  const std::vector<Problem> problems = {
      {"rows fprop G=1", Form::Rows, false, E::F32, E::F32, false, true, false,
       g1},
      {"rows fprop bias G=4", Form::Rows, false, E::F32, E::F32, false, true,
       true, g4},
      {"rows dgrad G=8", Form::Rows, false, E::F32, E::F32, false, false, false,
       g8},
      {"rows bias odd sizes", Form::Rows, false, E::F32, E::F32, false, true,
       true, odd},
      {"contraction wgrad G=4", Form::Contraction, false, E::F32, E::F32, true,
       false, false, g4},
      {"contraction wgrad odd sizes", Form::Contraction, false, E::F32, E::F32,
       true, false, false, odd},
      {"contraction columns G=8", Form::Contraction, false, E::F32, E::F32,
       false, true, false, g8},
      {"contraction a columns, b rows G=4", Form::Contraction, false, E::F32,
       E::F32, false, false, false, g4},
      {"contraction a rows, b columns G=1", Form::Contraction, false, E::F32,
       E::F32, true, true, false, g1},
      {"FP8 rows E4M3 bias G=4", Form::Rows, true, E::F8E4M3, E::F8E4M3, false,
       false, true, g4},
      {"FP8 rows E5M2 x E4M3 G=8", Form::Rows, true, E::F8E5M2, E::F8E4M3,
       false, false, false, g8},
      {"FP8 contraction E5M2 x E4M3 G=4", Form::Contraction, true, E::F8E5M2,
       E::F8E4M3, false, false, false, g4},
      {"FP8 contraction E4M3 G=8", Form::Contraction, true, E::F8E4M3,
       E::F8E4M3, false, false, false, g8},
      {"contraction wgrad accumulated in place G=4", Form::Contraction, false,
       E::F32, E::F32, true, false, false, g4, Accumulate::InPlace},
      {"contraction wgrad accumulated from another buffer G=8",
       Form::Contraction, false, E::F32, E::F32, true, false, false, g8,
       Accumulate::OtherBuffer},
      {"FP8 contraction accumulated in place G=8", Form::Contraction, true,
       E::F8E5M2, E::F8E4M3, false, false, false, g8, Accumulate::InPlace},
      {"FP8 contraction accumulated from another buffer G=4", Form::Contraction,
       true, E::F8E5M2, E::F8E4M3, false, false, false, g4,
       Accumulate::OtherBuffer},
      {"contraction accumulated into per-group buffers G=8", Form::Contraction,
       false, E::F32, E::F32, true, false, false, g8,
       Accumulate::PerGroupReversed},
      {"FP8 contraction accumulated into per-group buffers G=4",
       Form::Contraction, true, E::F8E5M2, E::F8E4M3, false, false, false, g4,
       Accumulate::PerGroupReversed},
      {"FP8 rows, scales staged by the runner G=8", Form::Rows, true, E::F8E4M3,
       E::F8E4M3, false, false, true, g8, Accumulate::None,
       /*scaleSlots=*/false},
  };
  for (auto [index, problem] : llvm::enumerate(problems))
    runProblem(problem, 100 + unsigned(index));
}

TEST(GroupedGemmRunTest, RefusesBadSplitsBeforeIssuingAnything) {
  GroupedGemmStep step;
  step.form = Form::Rows;
  step.fp8 = true;
  step.groups = 4;
  step.aType = {{64, 32}, ElementType::F8E4M3};
  step.bType = {{4, 16, 32}, ElementType::F8E4M3};
  step.outType = {{64, 16}, ElementType::BF16};
  step.aScaleInv = 0;
  step.bScaleInv = 0;
  FunctionPlan function;
  llvm::Expected<GroupedGemm> grouped = GroupedGemm::create(step, function);
  ASSERT_TRUE(bool(grouped)) << llvm::toString(grouped.takeError());
  std::vector<uint8_t> a(64 * 32), b(4 * 16 * 32), out(64 * 16 * 2, 0xff);
  float scales[4] = {1, 1, 1, 1};
  GroupedGemmPointers pointers{a.data(), b.data(), out.data(),
                               scales,   scales,   nullptr};
  CudaDriver driver = hostDriver();
  for (auto [splits, expected] :
       {std::pair{std::vector<int32_t>{16, 16, 16}, "m_splits has 3 values "
                                                    "for 4 groups"},
        std::pair{std::vector<int32_t>{16, -16, 16, 0}, "m_splits[1] is -16"},
        std::pair{std::vector<int32_t>{32, 32, 16, 0}, "m_splits sums to 80"},
        std::pair{std::vector<int32_t>{16, 8, 16, 0},
                  "m_splits[1] is 8, not a multiple of 16"}}) {
    HostGemmRunner runner;
    llvm::Error error = grouped->run(runner, splits, pointers, nullptr, driver);
    ASSERT_TRUE(bool(error));
    std::string message = llvm::toString(std::move(error));
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_TRUE(runner.calls.empty());
    EXPECT_TRUE(std::all_of(out.begin(), out.end(),
                            [](uint8_t byte) { return byte == 0xff; }));
  }
}

// Per-group output pointers: only a contraction that accumulates takes
// them, one per group, none null; nothing is issued otherwise.
TEST(GroupedGemmRunTest, RefusesBadPerGroupOutputs) {
  GroupedGemmStep contraction;
  contraction.form = Form::Contraction;
  contraction.groups = 2;
  contraction.transposeA = true;
  contraction.aType = {{32, 16}, ElementType::F32};
  contraction.bType = {{32, 8}, ElementType::F32};
  contraction.outType = {{2, 16, 8}, ElementType::F32};
  GroupedGemmStep rows;
  rows.form = Form::Rows;
  rows.groups = 2;
  rows.transposeB = true;
  rows.aType = {{32, 16}, ElementType::F32};
  rows.bType = {{2, 8, 16}, ElementType::F32};
  rows.outType = {{32, 8}, ElementType::F32};
  GroupedGemmStep accumulating = contraction;
  accumulating.accumulate = 0;
  const CUdeviceptr two[] = {0x1000, 0x2000}, three[] = {1, 2, 3},
                    withNull[] = {0x1000, 0};
  auto message = [](const GroupedGemmStep &step,
                    llvm::ArrayRef<CUdeviceptr> groupOut) {
    llvm::Error error = GroupedGemm::checkGroupOut(step, groupOut);
    return error ? llvm::toString(std::move(error)) : std::string();
  };
  EXPECT_EQ(message(accumulating, two), "");
  EXPECT_EQ(message(rows, {}), "");
  const std::string onlyContractions =
      "only a contraction that accumulates takes per-group output pointers";
  EXPECT_NE(message(rows, two).find(onlyContractions), std::string::npos);
  EXPECT_NE(message(contraction, two).find(onlyContractions),
            std::string::npos);
  EXPECT_NE(message(accumulating, three)
                .find("3 per-group output pointers for 2 groups"),
            std::string::npos);
  EXPECT_NE(message(accumulating, withNull)
                .find("a per-group output pointer is null"),
            std::string::npos);
}

TEST(GroupedGemmRunTest, CreateRefusesInconsistentSteps) {
  GroupedGemmStep step;
  step.form = Form::Rows;
  step.groups = 2;
  step.aType = {{64, 32}, ElementType::F32};
  step.bType = {{2, 16, 32}, ElementType::F32};
  step.outType = {{64, 16}, ElementType::F32};
  step.transposeB = true;
  FunctionPlan function;
  EXPECT_TRUE(bool(GroupedGemm::create(step, function)));
  GroupedGemmStep broken = step;
  broken.transposeB = false; // b would be [G, K, N] = [2, 32, 16]
  llvm::Expected<GroupedGemm> refused = GroupedGemm::create(broken, function);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("b must be"),
            std::string::npos);
  broken = step;
  broken.fp8 = true; // no scales
  broken.aType.element = broken.bType.element = ElementType::F8E4M3;
  refused = GroupedGemm::create(broken, function);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find("a_scale_inv"),
            std::string::npos);
  broken = step;
  broken.form = Form::Contraction;
  broken.bias = 0;
  refused = GroupedGemm::create(broken, function);
  EXPECT_FALSE(bool(refused));
  llvm::consumeError(refused.takeError());
}

//===----------------------------------------------------------------------===//
// Float8BlockScaling
//===----------------------------------------------------------------------===//

/// A block-scaled grouped GEMM: rows (a [T, K] in row segments, b [G, N, K]
/// per group, 1-D or 2-D) or contraction (a [M, T], b [N, T], transposed
/// segments); f32 out.
struct BlockProblem {
  std::string name;
  Form form;
  ElementType a, b;
  GemmScaling bScaling;
  std::vector<int32_t> splits;
  Accumulate accumulate = Accumulate::None;
  /// Rows: a bias [G, N] of out's type (f32), added as C.
  bool bias = false;
};

/// T = 320; rows: K = 288 (blocks of 128, 128, 32), N = 130 (pad4: 132;
/// 2-D: 2 x 3 tiles, pad4: 4); contraction: M = 18, N = 130 (pad4 20, 132).
constexpr int64_t kBlockTokens = 320, kBlockK = 288, kBlockM = 18,
                  kBlockN = 130;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t pad4(int64_t n) { return (n + 3) / 4 * 4; }

/// Where group g's scales start in each operand's scale_inv tensor, from
/// the contract's layouts (docs/grouped-linear.md), written out here rather
/// than taken from GroupedBlockScaleLayout.h; and the flat index of the
/// scale of each element of the whole operands.
struct BlockLayouts {
  const BlockProblem &problem;
  std::vector<int64_t> offsets;      // o_g, then o_G
  std::vector<int64_t> blocksBefore; // c_g: token blocks of earlier groups
  bool rows;
  int64_t t = kBlockTokens, k = kBlockK, m = kBlockM, n = kBlockN;

  explicit BlockLayouts(const BlockProblem &problem)
      : problem(problem), rows(problem.form == Form::Rows) {
    offsets.push_back(0);
    blocksBefore.push_back(0);
    for (int32_t size : problem.splits) {
      offsets.push_back(offsets.back() + size);
      blocksBefore.push_back(blocksBefore.back() + ceilDiv(size, 128));
    }
  }
  int64_t groups() const { return int64_t(problem.splits.size()); }
  bool twoD() const { return problem.bScaling == GemmScaling::Block2D; }
  /// The scale tensors' element counts.
  int64_t aScaleCount() const {
    return rows ? ceilDiv(k, 128) * t : (ceilDiv(t, 128) + groups()) * pad4(m);
  }
  int64_t bScaleCount() const {
    if (!rows)
      return (ceilDiv(t, 128) + groups()) * pad4(n);
    return groups() * bPerGroup();
  }
  int64_t bPerGroup() const {
    return twoD() ? ceilDiv(n, 128) * pad4(ceilDiv(k, 128))
                  : ceilDiv(k, 128) * pad4(n);
  }
  /// Group g's first scale.
  int64_t aStart(int64_t g) const {
    return rows ? ceilDiv(k, 128) * offsets[g] : pad4(m) * blocksBefore[g];
  }
  int64_t bStart(int64_t g) const {
    return rows ? g * bPerGroup() : pad4(n) * blocksBefore[g];
  }
  int64_t groupOf(int64_t token) const {
    for (int64_t g = 0; g < groups(); ++g)
      if (token >= offsets[g] && token < offsets[g + 1])
        return g;
    return -1;
  }
  /// Rows: a[token, col]'s scale (segment (j, r) at nb * o_g + j * m_g +
  /// (r - o_g)). Contraction: a[row, token]'s (transposed segment (j, r)
  /// at pad4(M) * (c_g + j) + r, j counted from the segment's first token).
  int64_t aScale(int64_t row, int64_t col) const {
    if (rows) {
      int64_t g = groupOf(row);
      return aStart(g) + col / 128 * problem.splits[g] + (row - offsets[g]);
    }
    int64_t g = groupOf(col);
    return pad4(m) * (blocksBefore[g] + (col - offsets[g]) / 128) + row;
  }
  /// Rows: b[g][row, col]'s scale (te.block_quantize of b[g]).
  /// Contraction: b[row, token]'s.
  int64_t bScale(int64_t g, int64_t row, int64_t col) const {
    if (rows)
      return bStart(g) + (twoD() ? row / 128 * pad4(ceilDiv(k, 128)) + col / 128
                                 : col / 128 * pad4(n) + row);
    int64_t group = groupOf(col);
    return pad4(n) * (blocksBefore[group] + (col - offsets[group]) / 128) + row;
  }
};

/// Scale tensors whose elements no group owns are NaN (a GEMM reading one
/// shows); owned ones random powers of two, 2^-3 .. 2^3 (a misplaced scale
/// moves a product by up to 2^6).
void fillBlockScales(const BlockLayouts &layouts, std::vector<float> &a,
                     std::vector<float> &b, std::mt19937 &rng) {
  a.assign(size_t(layouts.aScaleCount()), std::nanf(""));
  b.assign(size_t(layouts.bScaleCount()), std::nanf(""));
  std::uniform_int_distribution<int> exponent(-3, 3);
  auto power = [&] { return std::ldexp(1.0f, exponent(rng)); };
  int64_t k = layouts.k, m = layouts.m, n = layouts.n;
  if (layouts.rows) {
    for (int64_t row = 0; row < layouts.offsets.back(); ++row)
      for (int64_t col = 0; col < k; col += 128)
        a[size_t(layouts.aScale(row, col))] = power();
    for (int64_t g = 0; g < layouts.groups(); ++g)
      for (int64_t row = 0; row < n; ++row)
        for (int64_t col = 0; col < k; col += 128)
          b[size_t(layouts.bScale(g, row, col))] = power();
    return;
  }
  for (int64_t g = 0; g < layouts.groups(); ++g)
    for (int64_t token = layouts.offsets[g]; token < layouts.offsets[g + 1];
         token += 128) {
      for (int64_t row = 0; row < m; ++row)
        a[size_t(layouts.aScale(row, token))] = power();
      for (int64_t row = 0; row < n; ++row)
        b[size_t(layouts.bScale(0, row, token))] = power();
    }
}

/// 16-byte aligned host copies (what the arena gives the scales).
struct AlignedFloats {
  std::vector<float> storage;
  float *data = nullptr;
  explicit AlignedFloats(const std::vector<float> &values)
      : storage(values.size() + 4) {
    size_t misalignment = reinterpret_cast<uintptr_t>(storage.data()) % 16;
    data = storage.data() + (misalignment ? (16 - misalignment) / 4 : 0);
    std::copy(values.begin(), values.end(), data);
  }
};

void runBlockProblem(const BlockProblem &problem, unsigned seed) {
  SCOPED_TRACE(problem.name);
  std::mt19937 rng(seed);
  BlockLayouts layouts(problem);
  bool rows = layouts.rows;
  int64_t g = layouts.groups(), t = layouts.t, k = layouts.k, m = layouts.m,
          n = layouts.n;
  GroupedGemmStep step;
  step.form = problem.form;
  step.fp8 = true;
  step.groups = g;
  step.aScaling = GemmScaling::Block1D;
  step.bScaling = problem.bScaling;
  if (rows) {
    step.aType = {{t, k}, problem.a};
    step.bType = {{g, n, k}, problem.b};
    step.outType = {{t, n}, ElementType::F32};
  } else {
    step.aType = {{m, t}, problem.a};
    step.bType = {{n, t}, problem.b};
    step.outType = {{g, m, n}, ElementType::F32};
  }
  step.aScaleInv = 1;
  step.bScaleInv = 2;
  FunctionPlan function;
  function.values.resize(4);
  function.values[1].type = groupedScaleType(step, false);
  function.values[2].type = groupedScaleType(step, true);
  function.values[3].type = step.outType;
  // The header's shapes are the contract's.
  EXPECT_EQ(function.values[1].type.numElements(), layouts.aScaleCount());
  EXPECT_EQ(function.values[2].type.numElements(), layouts.bScaleCount());
  if (problem.accumulate != Accumulate::None)
    step.accumulate = 3;
  if (problem.bias) {
    function.values.resize(5);
    function.values[4].type = {{g, n}, ElementType::F32};
    step.bias = 4;
  }
  llvm::Expected<GroupedGemm> grouped = GroupedGemm::create(step, function);
  ASSERT_TRUE(bool(grouped)) << llvm::toString(grouped.takeError());

  std::vector<uint8_t> a = randomBytes(problem.a, step.aType.numElements(),
                                       rng),
                       b = randomBytes(problem.b, step.bType.numElements(),
                                       rng);
  std::vector<float> aScales, bScales;
  fillBlockScales(layouts, aScales, bScales, rng);
  AlignedFloats aScaleInv(aScales), bScaleInv(bScales);
  int64_t outCount = step.outType.numElements();
  constexpr size_t guard = 64;
  std::vector<uint8_t> out(size_t(outCount) * 4 + guard, 0xff);
  std::vector<uint8_t> accumulated =
      randomBytes(ElementType::F32, outCount, rng);
  std::vector<uint8_t> bias = randomBytes(ElementType::F32, g * n, rng);
  GroupedGemmPointers pointers;
  pointers.a = a.data();
  pointers.b = b.data();
  pointers.out = out.data();
  pointers.aScaleInv = aScaleInv.data;
  pointers.bScaleInv = bScaleInv.data;
  if (problem.accumulate == Accumulate::InPlace) {
    std::memcpy(out.data(), accumulated.data(), accumulated.size());
    pointers.accumulate = out.data();
  } else if (problem.accumulate == Accumulate::OtherBuffer) {
    pointers.accumulate = accumulated.data();
  }
  if (problem.bias)
    pointers.bias = bias.data();
  HostGemmRunner runner;
  int64_t rowBytes = n * 4;
  if (problem.bias)
    // No bias epilogue: C is the group's out rows, each its bias row.
    runner.inspect = [&](const GemmStep &gemm, const FunctionPlan &values,
                         const GemmPointers &group) {
      EXPECT_FALSE(gemm.epilogue.bias);
      EXPECT_EQ(group.bias, nullptr);
      ASSERT_TRUE(gemm.epilogue.residual);
      EXPECT_EQ(group.residual, group.out);
      const TensorType &type = values.values[*gemm.epilogue.residual].type;
      EXPECT_EQ(type.shape, gemm.outType.shape);
      EXPECT_EQ(type.element, ElementType::F32);
      int64_t first =
          (static_cast<const uint8_t *>(group.out) - out.data()) / rowBytes;
      int64_t owner = layouts.groupOf(first);
      ASSERT_GE(owner, 0);
      EXPECT_EQ(first, layouts.offsets[owner]);
      for (int64_t row = 0; row < gemm.outType.shape[0]; ++row)
        ASSERT_EQ(std::memcmp(out.data() + (first + row) * rowBytes,
                              bias.data() + owner * rowBytes, size_t(rowBytes)),
                  0)
            << "row " << first + row << " does not hold group " << owner
            << "'s bias when its GEMM runs";
    };
  CudaDriver driver = hostDriver();
  // Block scales are read in place: no staging copies.
  driver.cuMemcpy2DAsync = [](const CUDA_MEMCPY2D *, CUstream) {
    ADD_FAILURE() << "block scales were staged";
    return CUDA_SUCCESS;
  };
  driver.cuMemcpyDtoDAsync = recordingCopy;
  recordedCopies.clear();
  recordedLaunches.clear();
  EXPECT_EQ(grouped->writesBiasRows(), problem.bias);
  // Every other bias case takes the kernel as the executor hands it over
  // (useBiasRowsKernel): then nothing is loaded.
  if (problem.bias && seed % 2 == 0) {
    grouped->useBiasRowsKernel(handedBiasRows);
    driver.cuModuleLoadData = [](CUmodule *, const void *) {
      ADD_FAILURE() << "a module was loaded despite useBiasRowsKernel";
      return CUDA_ERROR_INVALID_VALUE;
    };
    driver.cuModuleGetFunction = [](CUfunction *, CUmodule, const char *) {
      ADD_FAILURE() << "a function was looked up despite useBiasRowsKernel";
      return CUDA_ERROR_INVALID_VALUE;
    };
  }
  CUstream stream = reinterpret_cast<CUstream>(uintptr_t(0x400));
  llvm::Error error =
      grouped->run(runner, problem.splits, pointers, stream, driver);
  ASSERT_FALSE(bool(error)) << llvm::toString(std::move(error));

  if (problem.bias) {
    // No copies: per 256 groups owning rows, one launch on the step's
    // stream, its groups' row ends by value, out and bias at its first
    // group's rows, stores as wide as rows and addresses allow.
    EXPECT_TRUE(recordedCopies.empty());
    constexpr int64_t cap = GroupedBiasRowsParams::kMaxGroups;
    int64_t widest = 16;
    while (widest > 1 &&
           (rowBytes % widest != 0 ||
            reinterpret_cast<uintptr_t>(out.data()) % uintptr_t(widest) != 0 ||
            reinterpret_cast<uintptr_t>(bias.data()) % uintptr_t(widest) != 0))
      widest /= 2;
    size_t next = 0;
    for (int64_t start = 0; start < g; start += cap) {
      SCOPED_TRACE("bias rows of groups from " + std::to_string(start));
      int64_t groups = std::min(cap, g - start), rows = 0;
      for (int64_t i = 0; i < groups; ++i)
        rows += problem.splits[size_t(start + i)];
      if (!rows)
        continue;
      ASSERT_LT(next, recordedLaunches.size());
      const Launch &launch = recordedLaunches[next++];
      EXPECT_EQ(launch.function, seed % 2 == 0 ? handedBiasRows : fakeBiasRows);
      const GroupedBiasRowsParams &p = launch.params;
      EXPECT_EQ(launch.stream, stream);
      EXPECT_GE(launch.blocks[0], 1u);
      EXPECT_LE(int64_t(launch.blocks[0]), rows);
      EXPECT_EQ(launch.blocks[1] * launch.blocks[2], 1u);
      EXPECT_EQ(launch.threads[0] % 32, 0u);
      EXPECT_LE(launch.threads[0], 1024u);
      EXPECT_EQ(launch.threads[1] * launch.threads[2], 1u);
      EXPECT_EQ(p.groups, groups);
      EXPECT_EQ(p.rows, rows);
      EXPECT_EQ(p.rowBytes, rowBytes);
      EXPECT_EQ(p.vectorBytes, widest);
      EXPECT_EQ(p.out,
                CUdeviceptr(out.data() + layouts.offsets[start] * rowBytes));
      EXPECT_EQ(p.bias, CUdeviceptr(bias.data() + start * rowBytes));
      for (int64_t i = 0; i < groups; ++i) {
        EXPECT_EQ(p.ends[i],
                  layouts.offsets[start + i + 1] - layouts.offsets[start])
            << "group " << start + i;
      }
    }
    EXPECT_EQ(next, recordedLaunches.size());
  } else {
    EXPECT_TRUE(recordedLaunches.empty());
    if (problem.accumulate == Accumulate::None) {
      EXPECT_TRUE(recordedCopies.empty());
    }
  }

  // One block-scaled GEMM per non-empty group, in group order, its scale
  // pointers at the group's offsets.
  std::vector<int64_t> nonEmpty;
  for (int64_t i = 0; i < g; ++i)
    if (problem.splits[size_t(i)])
      nonEmpty.push_back(i);
  ASSERT_EQ(runner.calls.size(), nonEmpty.size());
  for (auto [call, group] : llvm::zip(runner.calls, nonEmpty)) {
    SCOPED_TRACE("group " + std::to_string(group));
    int64_t size = problem.splits[size_t(group)], o = layouts.offsets[group];
    EXPECT_EQ(call.aScaling, GemmScaling::Block1D);
    EXPECT_EQ(call.bScaling, problem.bScaling);
    EXPECT_FALSE(call.fastAccum);
    EXPECT_EQ(call.aScaleInv, aScaleInv.data + layouts.aStart(group));
    EXPECT_EQ(call.bScaleInv, bScaleInv.data + layouts.bStart(group));
    int64_t bytesA = int64_t(elementBytes(problem.a)),
            bytesB = int64_t(elementBytes(problem.b));
    if (rows) {
      EXPECT_EQ(call.m, size);
      EXPECT_EQ(call.n, n);
      EXPECT_EQ(call.k, k);
      EXPECT_EQ(call.a, a.data() + o * k * bytesA);
      EXPECT_EQ(call.b, b.data() + group * n * k * bytesB);
    } else {
      EXPECT_EQ(call.m, m);
      EXPECT_EQ(call.n, n);
      EXPECT_EQ(call.k, size);
      EXPECT_EQ(call.aRowStride, t);
      EXPECT_EQ(call.bRowStride, t);
      EXPECT_EQ(call.a, a.data() + o * bytesA);
      EXPECT_EQ(call.b, b.data() + o * bytesB);
    }
  }

  // The float64 reference: the dequantized operands, each element times
  // its block's scale as the contract's layouts place it.
  auto aAt = [&](int64_t row, int64_t col) {
    int64_t cols = rows ? k : t;
    return decode(a.data(), problem.a, row * cols + col) *
           aScales[size_t(layouts.aScale(row, col))];
  };
  auto bAt = [&](int64_t group, int64_t row, int64_t col) {
    int64_t index = rows ? (group * n + row) * k + col : row * t + col;
    return decode(b.data(), problem.b, index) *
           bScales[size_t(layouts.bScale(group, row, col))];
  };
  for (int64_t index = 0; index < outCount; ++index) {
    double want = 0;
    bool exact = false;
    if (rows) {
      int64_t row = index / n, col = index % n;
      int64_t group = layouts.groupOf(row);
      exact = group < 0;
      for (int64_t kk = 0; group >= 0 && kk < k; ++kk)
        want += aAt(row, kk) * bAt(group, col, kk);
      if (group >= 0 && problem.bias)
        want += decode(bias.data(), ElementType::F32, group * n + col);
    } else {
      int64_t group = index / (m * n), row = (index / n) % m, col = index % n;
      exact = problem.splits[size_t(group)] == 0;
      for (int64_t token = layouts.offsets[group];
           token < layouts.offsets[group + 1]; ++token)
        want += aAt(row, token) * bAt(group, col, token);
      if (problem.accumulate != Accumulate::None)
        want += decode(accumulated.data(), ElementType::F32, index);
    }
    double got = decode(out.data(), ElementType::F32, index);
    if (exact) {
      ASSERT_EQ(got, want) << "out[" << index
                           << "] is written by no group's GEMM";
      continue;
    }
    ASSERT_NEAR(got, want, 1e-5 * (1 + std::fabs(want)))
        << "out[" << index << "]";
  }
  for (size_t i = size_t(outCount) * 4; i < out.size(); ++i)
    ASSERT_EQ(out[i], 0xff) << "byte " << i << " past the output";
}

TEST(GroupedGemmRunTest, BlockScalesMatchFloat64) {
  using E = ElementType;
  using S = GemmScaling;
  // T = 320: segments longer than a block of 128 tokens, an empty group,
  // padding tokens after the last group (none for G = 1).
  const std::vector<int32_t> g1 = {320}, g4 = {144, 0, 16, 128},
                             g8 = {16, 0, 48, 0, 144, 16, 0, 32};
  // G = 300: past the bias rows kernel's 256 groups a launch, two launches;
  // 19 groups of 16 rows, 7 of them past group 255, some adjacent.
  std::vector<int32_t> g300(300, 0);
  for (int group : {0, 1, 17, 100, 101, 200, 254, 255, 256, 257, 258, 270, 280,
                    290, 291, 299, 40, 60, 80})
    g300[size_t(group)] = 16;
  // And none past group 255: one launch.
  std::vector<int32_t> g300Low(300, 0);
  g300Low[0] = g300Low[5] = g300Low[255] = 16;
  const std::vector<BlockProblem> problems = {
      {"rows, b 1-D, G=1", Form::Rows, E::F8E4M3, E::F8E4M3, S::Block1D, g1},
      {"rows, b 1-D, G=4", Form::Rows, E::F8E4M3, E::F8E4M3, S::Block1D, g4},
      {"rows, b 2-D, G=4", Form::Rows, E::F8E4M3, E::F8E4M3, S::Block2D, g4},
      {"rows dgrad E5M2 x E4M3, b 2-D, G=8", Form::Rows, E::F8E5M2, E::F8E4M3,
       S::Block2D, g8},
      {"rows, b 1-D, G=8", Form::Rows, E::F8E4M3, E::F8E4M3, S::Block1D, g8},
      {"rows, b 2-D, G=4, bias", Form::Rows, E::F8E4M3, E::F8E4M3, S::Block2D,
       g4, Accumulate::None, true},
      {"rows, b 1-D, G=8, bias", Form::Rows, E::F8E4M3, E::F8E4M3, S::Block1D,
       g8, Accumulate::None, true},
      {"rows dgrad E5M2 x E4M3, b 1-D, G=1, bias", Form::Rows, E::F8E5M2,
       E::F8E4M3, S::Block1D, g1, Accumulate::None, true},
      {"rows, b 1-D, G=300, bias", Form::Rows, E::F8E4M3, E::F8E4M3, S::Block1D,
       g300, Accumulate::None, true},
      {"rows, b 2-D, G=300, bias, groups past 255 empty", Form::Rows, E::F8E4M3,
       E::F8E4M3, S::Block2D, g300Low, Accumulate::None, true},
      {"contraction E5M2 x E4M3 G=4", Form::Contraction, E::F8E5M2, E::F8E4M3,
       S::Block1D, g4},
      {"contraction E4M3 G=1", Form::Contraction, E::F8E4M3, E::F8E4M3,
       S::Block1D, g1},
      {"contraction G=8 accumulated in place", Form::Contraction, E::F8E5M2,
       E::F8E4M3, S::Block1D, g8, Accumulate::InPlace},
      {"contraction G=4 accumulated from another buffer", Form::Contraction,
       E::F8E5M2, E::F8E4M3, S::Block1D, g4, Accumulate::OtherBuffer},
  };
  for (auto [index, problem] : llvm::enumerate(problems))
    runBlockProblem(problem, 300 + unsigned(index));
}

// The header's offsets are the contract's (rows a: nb * o_g; rows b:
// g * s0 * s1; contraction: pad4(rows) * c_g), for random splits.
TEST(GroupedGemmRunTest, BlockScaleOffsetsFollowTheLayouts) {
  std::mt19937 rng(28);
  std::uniform_int_distribution<int> size(0, 40), groups(1, 12);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> splits(size_t(groups(rng)));
    for (int32_t &value : splits)
      value = 16 * size(rng);
    for (Form form : {Form::Rows, Form::Contraction})
      for (GemmScaling bScaling :
           {GemmScaling::Block1D, GemmScaling::Block2D}) {
        if (form == Form::Contraction && bScaling == GemmScaling::Block2D)
          continue;
        BlockProblem problem{
            "",       form,  ElementType::F8E4M3, ElementType::F8E4M3,
            bScaling, splits};
        BlockLayouts layouts(problem);
        GroupedGemmStep step;
        step.form = form;
        step.fp8 = true;
        step.groups = layouts.groups();
        step.aScaling = GemmScaling::Block1D;
        step.bScaling = bScaling;
        int64_t t = layouts.t, k = layouts.k, m = layouts.m, n = layouts.n,
                g = layouts.groups();
        step.aType = {form == Form::Rows ? std::vector<int64_t>{t, k}
                                         : std::vector<int64_t>{m, t},
                      ElementType::F8E4M3};
        step.bType = {form == Form::Rows ? std::vector<int64_t>{g, n, k}
                                         : std::vector<int64_t>{n, t},
                      ElementType::F8E4M3};
        for (int64_t group = 0; group < g; ++group) {
          EXPECT_EQ(GroupedGemm::blockScaleOffset(step, false, splits, group),
                    layouts.aStart(group))
              << "trial " << trial << " group " << group;
          EXPECT_EQ(GroupedGemm::blockScaleOffset(step, true, splits, group),
                    layouts.bStart(group))
              << "trial " << trial << " group " << group;
          EXPECT_EQ(layouts.aStart(group) % 4, 0);
          EXPECT_EQ(layouts.bStart(group) % 4, 0);
        }
      }
  }
}

// Block scales are used in place: a scale_inv base that is not 16-byte
// aligned is refused before anything is issued.
TEST(GroupedGemmRunTest, RefusesMisalignedBlockScales) {
  GroupedGemmStep step;
  step.form = Form::Rows;
  step.fp8 = true;
  step.groups = 2;
  step.aScaling = GemmScaling::Block1D;
  step.bScaling = GemmScaling::Block2D;
  step.aType = {{64, 32}, ElementType::F8E4M3};
  step.bType = {{2, 16, 32}, ElementType::F8E4M3};
  step.outType = {{64, 16}, ElementType::BF16};
  step.aScaleInv = 0;
  step.bScaleInv = 0;
  FunctionPlan function;
  llvm::Expected<GroupedGemm> grouped = GroupedGemm::create(step, function);
  ASSERT_TRUE(bool(grouped)) << llvm::toString(grouped.takeError());
  std::vector<uint8_t> a(64 * 32), b(2 * 16 * 32), out(64 * 16 * 2, 0xff);
  AlignedFloats scales(std::vector<float>(64 + 8, 1.0f));
  CudaDriver driver = hostDriver();
  for (bool misalignA : {true, false}) {
    GroupedGemmPointers pointers;
    pointers.a = a.data();
    pointers.b = b.data();
    pointers.out = out.data();
    pointers.aScaleInv = scales.data + (misalignA ? 1 : 0);
    pointers.bScaleInv = scales.data + (misalignA ? 0 : 2);
    HostGemmRunner runner;
    llvm::Error error =
        grouped->run(runner, {16, 32}, pointers, nullptr, driver);
    ASSERT_TRUE(bool(error));
    std::string message = llvm::toString(std::move(error));
    EXPECT_NE(
        message.find(std::string("grouped_gemm (rows): the block scales ") +
                     (misalignA ? "a_scale_inv" : "b_scale_inv")),
        std::string::npos)
        << message;
    EXPECT_NE(message.find("not 16-byte aligned"), std::string::npos)
        << message;
    EXPECT_TRUE(runner.calls.empty());
    EXPECT_TRUE(std::all_of(out.begin(), out.end(),
                            [](uint8_t byte) { return byte == 0xff; }));
  }
}

// What a step built in memory may not ask of block scales.
TEST(GroupedGemmRunTest, CreateRefusesBadBlockScalings) {
  GroupedGemmStep step;
  step.form = Form::Rows;
  step.fp8 = true;
  step.groups = 2;
  step.aScaling = GemmScaling::Block1D;
  step.bScaling = GemmScaling::Block2D;
  step.aType = {{64, 32}, ElementType::F8E4M3};
  step.bType = {{2, 16, 32}, ElementType::F8E4M3};
  step.outType = {{64, 16}, ElementType::BF16};
  step.aScaleInv = 1;
  step.bScaleInv = 2;
  FunctionPlan function;
  function.values.resize(3);
  function.values[0].type = {{2, 16}, ElementType::BF16};
  EXPECT_TRUE(bool(GroupedGemm::create(step, function)));
  auto refused = [&](const GroupedGemmStep &broken) {
    llvm::Expected<GroupedGemm> grouped = GroupedGemm::create(broken, function);
    return grouped ? std::string() : llvm::toString(grouped.takeError());
  };
  GroupedGemmStep broken = step;
  broken.fastAccum = true;
  EXPECT_NE(refused(broken).find("'fast_accum' is true for a block-scaled"),
            std::string::npos);
  broken = step;
  broken.bScaling = GemmScaling::Tensor;
  EXPECT_NE(refused(broken).find("both operands are block-scaled or neither"),
            std::string::npos);
  broken = step;
  broken.aScaling = GemmScaling::Block2D;
  EXPECT_NE(refused(broken).find("two 2-D block-scaled operands"),
            std::string::npos);
  // A bias is added as C: of out's element type (value 0: bf16 like out).
  broken = step;
  broken.bias = 0;
  EXPECT_TRUE(bool(GroupedGemm::create(broken, function)));
  function.values[0].type.element = ElementType::F16;
  EXPECT_NE(refused(broken).find("'bias' is f16; a block-scaled grouped GEMM "
                                 "adds its bias as C (beta = 1), which must "
                                 "have out's element type bf16"),
            std::string::npos)
      << refused(broken);
  function.values[0].type.element = ElementType::BF16;
  broken = step;
  broken.fp8 = false;
  broken.transposeB = true; // b [G, N, K]
  broken.aType.element = broken.bType.element = ElementType::BF16;
  EXPECT_NE(refused(broken).find("for a grouped GEMM that is not FP8"),
            std::string::npos);
}

} // namespace
