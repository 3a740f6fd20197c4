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
//
//===----------------------------------------------------------------------===//
#include "runtime/GroupedGemm.h"
#include "tests/runtime/ReversedGroups.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
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
};

/// Runs plan GEMMs on the host as GemmRunner's contract says.
class HostGemmRunner final : public GemmRunner {
public:
  llvm::Error run(const GemmStep &step, const FunctionPlan &function,
                  const GemmPointers &pointers, void *stream) override {
    const std::vector<int64_t> &a = step.aType.shape, &b = step.bType.shape;
    bool transposeA = !step.scaled && step.transposeA;
    bool transposeB = step.scaled || step.transposeB;
    int64_t m = transposeA ? a[1] : a[0], k = transposeA ? a[0] : a[1];
    int64_t n = transposeB ? b[0] : b[1];
    EXPECT_EQ(transposeB ? b[1] : b[0], k);
    EXPECT_EQ(step.outType.shape, (std::vector<int64_t>{m, n}));
    calls.push_back({m, n, k, pointers.aRowStride, pointers.bRowStride});
    int64_t lda = pointers.aRowStride ? pointers.aRowStride : a[1];
    int64_t ldb = pointers.bRowStride ? pointers.bRowStride : b[1];
    double scale = 1;
    if (step.scaled && alignedScales) {
      // Staged by the grouped GEMM into its scale slots.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers.aScaleInv) % 16, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pointers.bScaleInv) % 16, 0u);
    }
    if (step.scaled)
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
          sum += decode(pointers.a, step.aType.element, aIndex) *
                 decode(pointers.b, step.bType.element, bIndex);
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

CudaDriver hostDriver() {
  CudaDriver driver;
  driver.cuMemsetD8Async = hostMemset;
  driver.cuMemcpyDtoDAsync = hostCopy;
  driver.cuMemcpy2DAsync = hostCopy2D;
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

} // namespace
