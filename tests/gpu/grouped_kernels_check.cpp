//===- grouped_kernels_check.cpp - GroupedLinear's kernels on the GPU -----===//
//
// Emits the kernels of GroupedLinear's grouped ops (codegen/
// GroupedKernels.cpp; docs/grouped-linear.md) from te IR written here, in
// the te.fused form te-fuse gives them, compiles them with NVRTC, runs them
// on the GPU over random data and compares every output element with a
// reference computed on the host in float64 from the same inputs:
//
//   * te.grouped_quantize, row segments (m_splits) and stacked [G, R, C]
//     groups: the row-major and the transposed copy of one input in one
//     kernel, a transposed copy alone, bf16 / f16 / f32 inputs, E4M3 and
//     E5M2; G = 1, 3, 8; an empty segment; segments that start anywhere in
//     a tile; padding rows (past sum(m_splits)) holding inf and NaN, which
//     must come out as 0 and stay out of the amaxes; scales that saturate;
//     T % 8 != 0 and K odd (the byte paths); T = 8192, K = 4096 (timed).
//     Each FP8 byte must decode to the value of the float32 product x *
//     scale[g] rounded to nearest even and saturated (te.quantize's rule);
//     each amax must equal max |x| over its group (NaN when one is NaN).
//   * te.grouped_amax, both forms, with a NaN and an inf in groups.
//   * te.grouped_bias_grad: one pass and split over blocks (the scratch
//     sums), an empty segment (0), padding rows (not summed); relative error
//     within the output type's rounding.
//   * te.compute_scale on [G] (0, inf, NaN, tiny and ordinary amaxes, with
//     and without power-of-two scales): bit-equal to float32 arithmetic.
//   * current scaling's chain: grouped_amax -> compute_scale -> the two
//     casts, through device values.
//   * te.grouped_block_quantize (Float8BlockScaling; codegen/
//     GroupedBlockScalingKernels.cpp): token segments (x and/or x^T, an
//     empty segment, segments that are not multiples of 128 or of 8,
//     padding rows holding inf and NaN, nothing but padding, T = 8192 x K =
//     4096 timed) and stacked matrices (1-D and 2-D blocks, W and/or W^T);
//     bf16 / f16 / f32, E4M3 and E5M2 (HYBRID's gradients), power_2_scale
//     on and off; outliers: zero and subnormal rows and columns (scale 1,
//     FLT_MAX), large values, a NaN and an inf. Every output value and
//     every scale_inv element (0 where no group owns it) against a host
//     reference of docs/block-scaling.md's rules.
// Outputs start as 0xff bytes (NaN), so an element no kernel writes fails.
//
// One line per case (PASS/FAIL), exit status 1 on any failure, 77 (skipped)
// without a GPU.
//
//   tejit-grouped-kernels-check [--seed N] [--filter TEXT]
//
// Built with the runtime (build/bin/tejit-grouped-kernels-check), which
// tools/scripts/pack-gpu.sh copies to .gpu/bin; run it on the GPU machine
// after `source tools/scripts/gpu-env.sh` (it needs NVRTC there, as the
// Python tests do).
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "codegen/NvrtcCompiler.h"
#include "dialects/TEDialect.h"
#include "runtime/CudaDriver.h"
#include "runtime/Device.h"
#include "runtime/DeviceBuffer.h"
#include "tests/gpu/CheckExit.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace mlir;
using namespace tejit::runtime;
using namespace tejit::gpucheck;
using tejit::codegen::EmittedKernel;

namespace {

//===----------------------------------------------------------------------===//
// Element types on the host
//===----------------------------------------------------------------------===//

enum class Elem { BF16, F16, F32, E4M3, E5M2, I32 };

const char *irName(Elem e) {
  switch (e) {
  case Elem::BF16:
    return "bf16";
  case Elem::F16:
    return "f16";
  case Elem::F32:
    return "f32";
  case Elem::E4M3:
    return "f8E4M3FN";
  case Elem::E5M2:
    return "f8E5M2";
  case Elem::I32:
    return "i32";
  }
  return "";
}

size_t bytesOf(Elem e) {
  switch (e) {
  case Elem::BF16:
  case Elem::F16:
    return 2;
  case Elem::E4M3:
  case Elem::E5M2:
    return 1;
  default:
    return 4;
  }
}

double halfToDouble(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double value;
  if (exponent == 0x1f)
    value = mantissa ? std::numeric_limits<double>::quiet_NaN()
                     : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    value = std::ldexp(mantissa, -24);
  else
    value = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -value : value;
}

float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint32_t floatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

/// FP8 bytes as values: E4M3 (bias 7, 0x7f/0xff NaN, no inf) and E5M2
/// (bias 15, IEEE-like).
double fp8ToDouble(uint8_t v, Elem e) {
  int sign = v >> 7;
  double value;
  if (e == Elem::E4M3) {
    int exponent = (v >> 3) & 0xf, mantissa = v & 7;
    if (exponent == 0xf && mantissa == 7)
      return std::numeric_limits<double>::quiet_NaN();
    value = exponent ? std::ldexp(8 + mantissa, exponent - 10)
                     : std::ldexp(mantissa, -9);
  } else {
    int exponent = (v >> 2) & 0x1f, mantissa = v & 3;
    if (exponent == 0x1f)
      return mantissa ? std::numeric_limits<double>::quiet_NaN()
                      : (sign ? -1.0 : 1.0) *
                            std::numeric_limits<double>::infinity();
    value = exponent ? std::ldexp(4 + mantissa, exponent - 17)
                     : std::ldexp(mantissa, -16);
  }
  return sign ? -value : value;
}

/// te.quantize's rule for the float32 `y`: round to nearest even with
/// saturation to the largest finite value; NaN stays NaN.
double fp8Reference(float y, Elem e) {
  if (std::isnan(y))
    return y;
  int mantissaBits = e == Elem::E4M3 ? 3 : 2;
  int minExponent = e == Elem::E4M3 ? -6 : -14;
  double max = e == Elem::E4M3 ? 448.0 : 57344.0;
  double a = std::fabs(double(y));
  double value;
  if (a >= max) {
    value = max;
  } else if (a == 0.0) {
    value = 0.0;
  } else {
    int exponent = std::max(std::ilogb(a), minExponent);
    double quantum = std::ldexp(1.0, exponent - mantissaBits);
    // a / quantum is exact in double; nearbyint rounds ties to even.
    value = std::nearbyint(a / quantum) * quantum;
    value = std::min(value, max);
  }
  return std::signbit(y) ? -value : value;
}

/// Host data of one tensor: raw bytes in the storage type.
struct HostTensor {
  Elem elem = Elem::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  std::string irType() const {
    std::string text = "tensor<";
    for (int64_t d : shape)
      text += std::to_string(d) + "x";
    return text + irName(elem) + ">";
  }
  double at(int64_t i) const {
    switch (elem) {
    case Elem::BF16: {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      return bitsToFloat(uint32_t(h) << 16);
    }
    case Elem::F16: {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      return halfToDouble(h);
    }
    case Elem::F32: {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      return f;
    }
    case Elem::E4M3:
    case Elem::E5M2:
      return fp8ToDouble(bytes[i], elem);
    case Elem::I32: {
      int32_t v;
      std::memcpy(&v, &bytes[4 * i], 4);
      return v;
    }
    }
    return 0;
  }
  float f32(int64_t i) const {
    float f;
    std::memcpy(&f, &bytes[4 * i], 4);
    return f;
  }
};

HostTensor tensorOf(Elem elem, std::vector<int64_t> shape) {
  HostTensor t{elem, std::move(shape), {}};
  t.bytes.assign(size_t(t.elements()) * bytesOf(elem), 0);
  return t;
}

void setF32(HostTensor &t, int64_t i, float f) {
  std::memcpy(&t.bytes[4 * i], &f, 4);
}

/// Random values of `elem` (bf16, f16 or f32), exactly representable, about
/// 2^-6 .. 2^5 in magnitude with random signs.
HostTensor randomInput(Elem elem, std::vector<int64_t> shape,
                       std::mt19937_64 &rng) {
  HostTensor t = tensorOf(elem, std::move(shape));
  std::uniform_int_distribution<int> exponent(-6, 4), bit(0, 1);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int64_t i = 0; i < t.elements(); ++i) {
    uint32_t sign = bit(rng), e = exponent(rng), m = bits(rng);
    if (elem == Elem::BF16) {
      uint16_t h = uint16_t(sign << 15 | (127 + e) << 7 | (m & 0x7f));
      std::memcpy(&t.bytes[2 * i], &h, 2);
    } else if (elem == Elem::F16) {
      uint16_t h = uint16_t(sign << 15 | (15 + e) << 10 | (m & 0x3ff));
      std::memcpy(&t.bytes[2 * i], &h, 2);
    } else {
      uint32_t f = sign << 31 | (127 + e) << 23 | (m & 0x7fffff);
      std::memcpy(&t.bytes[4 * i], &f, 4);
    }
  }
  return t;
}

/// Writes a special value (inf or NaN) at element i of a bf16/f16/f32
/// tensor.
void setSpecial(HostTensor &t, int64_t i, bool nan, bool negative = false) {
  if (t.elem == Elem::F32) {
    uint32_t f =
        (negative ? 0x80000000u : 0u) | (nan ? 0x7fc00000u : 0x7f800000u);
    std::memcpy(&t.bytes[4 * i], &f, 4);
    return;
  }
  uint16_t h =
      t.elem == Elem::BF16 ? (nan ? 0x7fc0 : 0x7f80) : (nan ? 0x7e00 : 0x7c00);
  if (negative)
    h |= 0x8000;
  std::memcpy(&t.bytes[2 * i], &h, 2);
}

HostTensor splitsTensor(const std::vector<int32_t> &splits) {
  HostTensor t = tensorOf(Elem::I32, {int64_t(splits.size())});
  std::memcpy(t.bytes.data(), splits.data(), 4 * splits.size());
  return t;
}

/// Per-group scales: random float32 in [2^-3, 2^7), not powers of two.
HostTensor randomScales(int64_t groups, std::mt19937_64 &rng) {
  HostTensor t = tensorOf(Elem::F32, {groups});
  std::uniform_real_distribution<float> mantissa(1.f, 2.f);
  std::uniform_int_distribution<int> exponent(-3, 6);
  for (int64_t g = 0; g < groups; ++g)
    setF32(t, g, std::ldexp(mantissa(rng), exponent(rng)));
  return t;
}

//===----------------------------------------------------------------------===//
// Running a function's kernels
//===----------------------------------------------------------------------===//

struct Gpu {
  const CudaDriver &driver;
  std::string arch;
  CUstream stream = nullptr;
  std::unique_ptr<tejit::codegen::NvrtcCompiler> nvrtc;

  DeviceBuffer allocate(size_t bytes, const char *what) const {
    return orDie(DeviceBuffer::allocate(std::max<size_t>(bytes, 256), what));
  }
  void sync() const {
    check(driver.check(driver.cuStreamSynchronize(stream), "synchronize"));
  }
};

/// The kernels of function `name` in `irText`, run in order on `args`
/// (the function's arguments): its results, downloaded. `timedRuns` > 0
/// times that many launches of the whole sequence; `microseconds` gets the
/// mean.
std::vector<HostTensor> runFunction(Gpu &gpu, const std::string &irText,
                                    const std::vector<HostTensor> &args,
                                    const std::vector<HostTensor> &resultLike,
                                    int timedRuns = 0,
                                    double *microseconds = nullptr) {
  const CudaDriver &driver = gpu.driver;
  MLIRContext context;
  context.loadDialect<te::TEDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(irText, ParserConfig(&context));
  if (!module) {
    std::fprintf(stderr, "fatal: the IR does not parse:\n%s\n", irText.c_str());
    std::exit(1);
  }
  auto function = *module->getOps<func::FuncOp>().begin();
  std::vector<EmittedKernel> kernels =
      orDie(tejit::codegen::emitKernels(function));
  std::vector<tejit::codegen::KernelSource> sources;
  for (const EmittedKernel &kernel : kernels)
    sources.push_back({kernel.name, kernel.source, gpu.arch, {}});
  std::vector<tejit::codegen::CompiledKernel> compiled =
      orDie(gpu.nvrtc->compileAll(sources));

  // Device memory for every value a kernel reads or writes; outputs start
  // as 0xff bytes.
  llvm::DenseMap<Value, DeviceBuffer> buffers;
  for (auto [index, arg] : llvm::enumerate(function.getArguments())) {
    const HostTensor &host = args[index];
    DeviceBuffer buffer = gpu.allocate(host.bytes.size(), "an argument");
    check(driver.check(driver.cuMemcpyHtoDAsync(buffer.get(), host.bytes.data(),
                                                host.bytes.size(), gpu.stream),
                       "upload"));
    buffers.try_emplace(arg, std::move(buffer));
  }
  int64_t scratchBytes = 0;
  for (const EmittedKernel &kernel : kernels) {
    scratchBytes = std::max(scratchBytes, kernel.scratchBytes);
    for (const auto &param : kernel.params) {
      if (buffers.count(param.value))
        continue;
      auto type = cast<RankedTensorType>(param.value.getType());
      size_t bytes =
          type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
      DeviceBuffer buffer = gpu.allocate(bytes, "a kernel output");
      check(driver.check(driver.cuMemsetD8Async(buffer.get(), 0xff,
                                                buffer.bytes(), gpu.stream),
                         "fill"));
      buffers.try_emplace(param.value, std::move(buffer));
    }
  }
  DeviceBuffer scratch = gpu.allocate(scratchBytes, "the scratch");
  // Scratch left as garbage except where a kernel asks for zeros.
  check(driver.check(
      driver.cuMemsetD8Async(scratch.get(), 0xa5, scratch.bytes(), gpu.stream),
      "fill"));

  std::vector<CUmodule> modules;
  std::vector<CUfunction> functions;
  for (const auto &binary : compiled) {
    CUmodule cuModule;
    check(
        driver.check(driver.cuModuleLoadData(&cuModule, binary.binary.c_str()),
                     "cuModuleLoadData " + binary.name));
    CUfunction cuFunction;
    check(driver.check(
        driver.cuModuleGetFunction(&cuFunction, cuModule, binary.name.c_str()),
        "cuModuleGetFunction " + binary.name));
    modules.push_back(cuModule);
    functions.push_back(cuFunction);
  }
  // `zero`: the launcher's zeroing of amaxes and scratch counters (left out
  // of timed runs, whose results nobody reads).
  auto launchAll = [&](bool zero) {
    for (auto [index, kernel] : llvm::enumerate(kernels)) {
      std::vector<CUdeviceptr> pointers;
      for (const auto &param : kernel.params) {
        const DeviceBuffer &buffer = buffers.find(param.value)->second;
        if (zero && param.zeroBeforeLaunch)
          check(driver.check(driver.cuMemsetD8Async(buffer.get(), 0,
                                                    buffer.bytes(), gpu.stream),
                             "zero"));
        pointers.push_back(buffer.get());
      }
      if (kernel.scratchBytes) {
        pointers.push_back(scratch.get());
        if (zero && kernel.scratchZeroBytes)
          check(driver.check(
              driver.cuMemsetD8Async(scratch.get() + kernel.scratchZeroOffset,
                                     0, kernel.scratchZeroBytes, gpu.stream),
              "zero the scratch"));
      }
      pointers.push_back(0); // tj_skip: run
      std::vector<void *> params;
      for (CUdeviceptr &pointer : pointers)
        params.push_back(&pointer);
      check(driver.check(
          driver.cuLaunchKernel(functions[index], kernel.grid.x, kernel.grid.y,
                                kernel.grid.z, kernel.block.x, kernel.block.y,
                                kernel.block.z, kernel.sharedBytes, gpu.stream,
                                params.data(), nullptr),
          "launch " + kernel.name));
    }
  };
  launchAll(true);
  gpu.sync();

  std::vector<HostTensor> results;
  auto returned = function.front().getTerminator()->getOperands();
  for (auto [index, value] : llvm::enumerate(returned)) {
    HostTensor host = resultLike[index];
    const DeviceBuffer &buffer = buffers.find(value)->second;
    check(driver.check(driver.cuMemcpyDtoHAsync(host.bytes.data(), buffer.get(),
                                                host.bytes.size(), gpu.stream),
                       "download"));
    results.push_back(std::move(host));
  }
  gpu.sync();

  if (timedRuns > 0 && microseconds) {
    CUevent start, stop;
    check(driver.check(driver.cuEventCreate(&start, 0), "cuEventCreate"));
    check(driver.check(driver.cuEventCreate(&stop, 0), "cuEventCreate"));
    launchAll(true); // warm
    check(driver.check(driver.cuEventRecord(start, gpu.stream), "record"));
    for (int run = 0; run < timedRuns; ++run)
      launchAll(false);
    check(driver.check(driver.cuEventRecord(stop, gpu.stream), "record"));
    check(driver.check(driver.cuEventSynchronize(stop), "synchronize"));
    float ms = 0;
    check(driver.check(driver.cuEventElapsedTime(&ms, start, stop), "time"));
    *microseconds = 1000.0 * ms / timedRuns;
    driver.cuEventDestroy(start);
    driver.cuEventDestroy(stop);
  }
  for (CUmodule cuModule : modules)
    driver.cuModuleUnload(cuModule);
  return results;
}

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

struct Result {
  int64_t checked = 0, wrong = 0;
  std::string first;
  std::string extra;

  void expect(bool ok, const llvm::Twine &what) {
    ++checked;
    if (ok)
      return;
    if (wrong++ < 5)
      first += "\n    " + what.str();
  }
};

bool sameValue(double got, double want) {
  return (std::isnan(got) && std::isnan(want)) || got == want;
}

/// Group offsets o_0 .. o_G of `splits`.
std::vector<int64_t> offsetsOf(const std::vector<int32_t> &splits) {
  std::vector<int64_t> offsets = {0};
  for (int32_t m : splits)
    offsets.push_back(offsets.back() + m);
  return offsets;
}

/// The group of row t of the input as a matrix, or G for padding.
int64_t groupOfRow(int64_t t, const std::vector<int64_t> &offsets,
                   int64_t groupRows) {
  int64_t groups = int64_t(offsets.size()) - 1;
  if (groupRows)
    return t / groupRows;
  for (int64_t g = 0; g < groups; ++g)
    if (t >= offsets[g] && t < offsets[g + 1])
      return g;
  return groups;
}

/// max |x| of each group, NaN when one is NaN.
std::vector<double> groupAmaxes(const HostTensor &x, int64_t rows, int64_t cols,
                                const std::vector<int64_t> &offsets,
                                int64_t groupRows, int64_t groups) {
  std::vector<double> amax(groups, 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    int64_t g = groupOfRow(t, offsets, groupRows);
    if (g >= groups)
      continue;
    for (int64_t c = 0; c < cols; ++c) {
      double v = std::fabs(x.at(t * cols + c));
      if (std::isnan(v) || std::isnan(amax[g]))
        amax[g] = std::numeric_limits<double>::quiet_NaN();
      else
        amax[g] = std::max(amax[g], v);
    }
  }
  return amax;
}

/// A grouped cast's output against the rule: element (t, c) of the input
/// as a matrix is at t * cols + c (row-major) or at its transposed place.
void checkCast(Result &result, const char *what, const HostTensor &x,
               const HostTensor &scale, const HostTensor &out, int64_t rows,
               int64_t cols, const std::vector<int64_t> &offsets,
               int64_t groupRows, bool transposed, int64_t stride = 1) {
  int64_t groups = scale.elements();
  for (int64_t t = 0; t < rows; t += 1) {
    int64_t g = groupOfRow(t, offsets, groupRows);
    for (int64_t c = 0; c < cols; c += stride) {
      double want = 0.0;
      if (g < groups) {
        float y = float(x.at(t * cols + c)) * scale.f32(g);
        want = fp8Reference(y, out.elem);
      }
      int64_t at;
      if (!transposed)
        at = t * cols + c;
      else if (groupRows)
        at = (t / groupRows * cols + c) * groupRows + t % groupRows;
      else
        at = c * rows + t;
      double got = out.at(at);
      result.expect(sameValue(got, want),
                    llvm::formatv("{0} ({1}, {2}) group {3}: got {4}, want "
                                  "{5} (x {6})",
                                  what, t, c, g, got, want,
                                  x.at(t * cols + c)));
    }
  }
}

void checkAmaxes(Result &result, const HostTensor &amax,
                 const std::vector<double> &want) {
  for (size_t g = 0; g < want.size(); ++g)
    result.expect(
        sameValue(amax.f32(g), float(want[g])),
        llvm::formatv("amax[{0}]: got {1}, want {2}", g, amax.f32(g), want[g]));
}

//===----------------------------------------------------------------------===//
// IR
//===----------------------------------------------------------------------===//

/// A function of one te.fused "grouped_quantize" region: the casts of
/// `x` (row-major and/or transposed) with `scale` and, for segments,
/// `m_splits`; results: the copies, then the first cast's amax.
std::string castIr(const HostTensor &x, const HostTensor &scale,
                   const HostTensor *splits, Elem fp8, bool rowwise,
                   bool transposed) {
  std::vector<int64_t> tshape = x.shape;
  std::swap(tshape[tshape.size() - 2], tshape[tshape.size() - 1]);
  HostTensor rowType{fp8, x.shape, {}}, transType{fp8, tshape, {}};
  std::string g = scale.irType();
  std::string args = "%xa: " + x.irType() + ", %sa: " + g;
  std::string inputs = "%xa, %sa", types = x.irType() + ", " + g;
  std::string blockArgs = "%x: " + x.irType() + ", %s: " + g;
  std::string operands = "%x, %s", opTypes = x.irType() + ", " + g;
  if (splits) {
    args += ", %ma: " + splits->irType();
    inputs += ", %ma";
    types += ", " + splits->irType();
    blockArgs += ", %m: " + splits->irType();
    operands += ", %m";
    opTypes += ", " + splits->irType();
  }
  std::string body, yields, results, returns;
  int count = 0;
  auto add = [&](bool transpose) {
    std::string q = "%q" + std::to_string(count),
                a = "%a" + std::to_string(count);
    std::string out = transpose ? transType.irType() : rowType.irType();
    body += llvm::formatv("    {0}, {1} = te.grouped_quantize {2}{3} : ({4}) "
                          "-> ({5}, {6})\n",
                          q, a, operands, transpose ? " {transpose}" : "",
                          opTypes, out, g)
                .str();
    yields += (count ? ", " : "") + q;
    results += (count ? ", " : "") + out;
    ++count;
  };
  if (rowwise)
    add(false);
  if (transposed)
    add(true);
  yields += ", %a0";
  results += ", " + g;
  for (int i = 0; i <= count; ++i)
    returns += (i ? ", %r#" : "%r#") + std::to_string(i);
  return llvm::formatv(R"mlir(
func.func @cast({0}) -> ({1}) {{
  %r:{2} = te.fused "grouped_quantize"({3}) : ({4}) -> ({1}) {{
  ^bb0({5}):
{6}    te.yield {7} : {1}
  }
  return {8} : {1}
}
)mlir",
                       args, results, count + 1, inputs, types, blockArgs, body,
                       yields, returns)
      .str();
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

struct CastCase {
  std::string name;
  Elem input, fp8;
  /// Segments: rows = T, splits; stacked (splits empty): groups x rows.
  int64_t groups, rows, cols;
  std::vector<int32_t> splits;
  bool rowwise, transposed;
  /// Check every `stride`-th column (the large case), all when 1.
  int64_t stride = 1;
  bool timed = false;
};

Result runCast(Gpu &gpu, const CastCase &c, std::mt19937_64 &rng) {
  bool stacked = c.splits.empty();
  std::vector<int64_t> shape =
      stacked ? std::vector<int64_t>{c.groups, c.rows, c.cols}
              : std::vector<int64_t>{c.rows, c.cols};
  int64_t rows = stacked ? c.groups * c.rows : c.rows;
  HostTensor x = randomInput(c.input, shape, rng);
  std::vector<int64_t> offsets = offsetsOf(c.splits);
  // Padding rows hold inf and NaN: written as 0, in no amax.
  if (!stacked)
    for (int64_t t = offsets.back(); t < rows; ++t)
      for (int64_t col = 0; col < c.cols; col += 3)
        setSpecial(x, t * c.cols + col, col % 2 == 0, t % 2 == 1);
  // Scales up to 2^7 times values up to 2^5: E4M3 casts saturate.
  HostTensor scale = randomScales(c.groups, rng);
  std::vector<HostTensor> args = {x, scale};
  HostTensor splits = splitsTensor(c.splits);
  if (!stacked)
    args.push_back(splits);
  std::vector<int64_t> tshape = shape;
  std::swap(tshape[tshape.size() - 2], tshape[tshape.size() - 1]);
  std::vector<HostTensor> like;
  if (c.rowwise)
    like.push_back(tensorOf(c.fp8, shape));
  if (c.transposed)
    like.push_back(tensorOf(c.fp8, tshape));
  like.push_back(tensorOf(Elem::F32, {c.groups}));
  std::string ir = castIr(x, scale, stacked ? nullptr : &splits, c.fp8,
                          c.rowwise, c.transposed);
  double us = 0;
  std::vector<HostTensor> out =
      runFunction(gpu, ir, args, like, c.timed ? 20 : 0, &us);
  Result result;
  int64_t groupRows = stacked ? c.rows : 0;
  size_t next = 0;
  if (c.rowwise)
    checkCast(result, "row-major", x, scale, out[next++], rows, c.cols, offsets,
              groupRows, false, c.stride);
  if (c.transposed)
    checkCast(result, "transposed", x, scale, out[next++], rows, c.cols,
              offsets, groupRows, true, c.stride);
  checkAmaxes(result, out[next],
              groupAmaxes(x, rows, c.cols, offsets, groupRows, c.groups));
  if (c.timed) {
    double bytes =
        double(rows) * c.cols * (bytesOf(c.input) + c.rowwise + c.transposed);
    result.extra =
        llvm::formatv(" {0:f1} us, {1:f0} GB/s", us, bytes / (us * 1e-6) / 1e9)
            .str();
  }
  return result;
}

std::vector<CastCase> castCases() {
  using E = Elem;
  return {
      // The forward's x: G = 3, an empty segment, padding, both copies.
      {"segments bf16 G=3 empty+padding",
       E::BF16,
       E::E4M3,
       3,
       256,
       512,
       {64, 0, 160},
       true,
       true},
      // Segments that start anywhere in a tile, T % 128 != 0, E5M2.
      {"segments bf16 G=8 unaligned",
       E::BF16,
       E::E5M2,
       8,
       336,
       192,
       {17, 40, 1, 0, 100, 33, 64, 50},
       true,
       true},
      // One group with padding; the transposed copy alone.
      {"segments bf16 G=1 transposed",
       E::BF16,
       E::E4M3,
       1,
       128,
       64,
       {100},
       false,
       true},
      // f16, T % 8 != 0: bytes.
      {"segments f16 T=100", E::F16, E::E4M3, 2, 100, 96, {30, 61}, true, true},
      // f32, K odd: one element a vector.
      {"segments f32 K=37",
       E::F32,
       E::E4M3,
       3,
       64,
       37,
       {16, 16, 16},
       true,
       true},
      // f32 wide vectors, E5M2 transposed.
      {"segments f32 G=3",
       E::F32,
       E::E5M2,
       3,
       96,
       40,
       {17, 40, 30},
       false,
       true},
      // Stacked weights [G, N, K] and their [G, K, N] copy.
      {"stacked bf16 G=4", E::BF16, E::E4M3, 4, 48, 64, {}, true, true},
      // Stacked, R % 8 != 0.
      {"stacked f16 R=20", E::F16, E::E5M2, 3, 20, 36, {}, true, true},
      {"stacked bf16 G=8 N=256 K=128",
       E::BF16,
       E::E4M3,
       8,
       256,
       128,
       {},
       true,
       true},
      // A real size: T = 8192, K = 4096, G = 8 (multiples of 16, one empty,
      // 256 padding rows).
      {"segments bf16 T=8192 K=4096 G=8",
       E::BF16,
       E::E4M3,
       8,
       8192,
       4096,
       {1024, 2048, 512, 0, 1536, 1024, 784, 1008},
       true,
       true,
       7,
       true},
  };
}

/// te.grouped_amax of both forms, NaN and inf in groups.
Result runAmaxes(Gpu &gpu, std::mt19937_64 &rng) {
  Result result;
  // Segments: bf16 [1000, 72], G = 5: group 1 holds a NaN, group 3 an inf,
  // group 2 is empty; padding rows hold NaN.
  std::vector<int32_t> splits = {200, 150, 0, 333, 300};
  HostTensor x = randomInput(Elem::BF16, {1000, 72}, rng);
  std::vector<int64_t> offsets = offsetsOf(splits);
  setSpecial(x, (offsets[1] + 7) * 72 + 5, /*nan=*/true);
  setSpecial(x, (offsets[3] + 100) * 72 + 70, /*nan=*/false, true);
  for (int64_t t = offsets.back(); t < 1000; ++t)
    setSpecial(x, t * 72 + t % 72, true);
  HostTensor m = splitsTensor(splits);
  std::string ir = llvm::formatv(R"mlir(
func.func @amax(%xa: {0}, %ma: {1}) -> {2} {{
  %r = te.fused "grouped_amax"(%xa, %ma) : ({0}, {1}) -> {2} {{
  ^bb0(%x: {0}, %m: {1}):
    %a = te.grouped_amax %x, %m : ({0}, {1}) -> {2}
    te.yield %a : {2}
  }
  return %r : {2}
}
)mlir",
                                 x.irType(), m.irType(), "tensor<5xf32>")
                       .str();
  auto out = runFunction(gpu, ir, {x, m}, {tensorOf(Elem::F32, {5})});
  checkAmaxes(result, out[0], groupAmaxes(x, 1000, 72, offsets, 0, 5));
  // Stacked f32 [6, 40, 24]: group 4 holds -inf.
  HostTensor w = randomInput(Elem::F32, {6, 40, 24}, rng);
  setSpecial(w, 4 * 960 + 17, false, true);
  std::string irStacked = llvm::formatv(R"mlir(
func.func @amax(%w: {0}) -> tensor<6xf32> {{
  %a = te.grouped_amax %w : ({0}) -> tensor<6xf32>
  return %a : tensor<6xf32>
}
)mlir",
                                        w.irType())
                              .str();
  out = runFunction(gpu, irStacked, {w}, {tensorOf(Elem::F32, {6})});
  checkAmaxes(result, out[0], groupAmaxes(w, 240, 24, {}, 40, 6));
  return result;
}

/// te.grouped_bias_grad: dy [T, N] -> [G, N] of `out`.
Result runBiasGrad(Gpu &gpu, std::mt19937_64 &rng, Elem in, Elem out,
                   int64_t tokens, int64_t n, std::vector<int32_t> splits) {
  int64_t groups = int64_t(splits.size());
  HostTensor dy = randomInput(in, {tokens, n}, rng);
  std::vector<int64_t> offsets = offsetsOf(splits);
  for (int64_t t = offsets.back(); t < tokens; ++t)
    setSpecial(dy, t * n + t % n, true);
  HostTensor m = splitsTensor(splits);
  HostTensor like = tensorOf(out, {groups, n});
  std::string ir = llvm::formatv(R"mlir(
func.func @bias_grad(%dy: {0}, %m: {1}) -> {2} {{
  %r = te.fused "grouped_bias_grad"(%dy, %m) : ({0}, {1}) -> {2} {{
  ^bb0(%g: {0}, %s: {1}):
    %db = te.grouped_bias_grad %g, %s : ({0}, {1}) -> {2}
    te.yield %db : {2}
  }
  return %r : {2}
}
)mlir",
                                 dy.irType(), m.irType(), like.irType())
                       .str();
  auto got = runFunction(gpu, ir, {dy, m}, {like});
  Result result;
  // float32 sums (at most m_g + 64 additions an element on any path), then
  // the output's rounding (half an ulp).
  double rounding = out == Elem::BF16  ? std::ldexp(1.0, -8)
                    : out == Elem::F16 ? std::ldexp(1.0, -11)
                                       : 0.0;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0, magnitude = 0;
      for (int64_t t = offsets[g]; t < offsets[g + 1]; ++t) {
        sum += dy.at(t * n + c);
        magnitude += std::fabs(dy.at(t * n + c));
      }
      double value = got[0].at(g * n + c);
      double tolerance = rounding * std::fabs(sum) + (splits[g] + 64) *
                                                         std::ldexp(1.0, -24) *
                                                         magnitude * 1.01;
      bool ok =
          splits[g] == 0 ? value == 0.0 : std::fabs(value - sum) <= tolerance;
      result.expect(ok, llvm::formatv("dbias[{0}, {1}]: got {2}, want {3}", g,
                                      c, value, sum));
    }
  return result;
}

/// te.compute_scale on [G]: float32 arithmetic, bit for bit.
Result runComputeScale(Gpu &gpu, std::mt19937_64 &rng, bool power2, Elem fp8) {
  constexpr int64_t groups = 300;
  HostTensor amax = tensorOf(Elem::F32, {groups});
  std::uniform_real_distribution<float> mantissa(1.f, 2.f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (int64_t g = 0; g < groups; ++g) {
    float v = std::ldexp(mantissa(rng), exponent(rng));
    if (g == 0)
      v = 0.f;
    if (g == 1)
      v = INFINITY;
    if (g == 2)
      v = NAN;
    if (g == 3)
      v = 1e-42f; // fp8_max / amax overflows: FLT_MAX
    setF32(amax, g, v);
  }
  std::string ir =
      llvm::formatv(R"mlir(
func.func @scale(%a: tensor<{0}xf32>) -> (tensor<{0}xf32>, tensor<{0}xf32>) {{
  %s, %si = te.compute_scale %a {{fp8_type = {1}{2}} : tensor<{0}xf32> -> tensor<{0}xf32>, tensor<{0}xf32>
  return %s, %si : tensor<{0}xf32>, tensor<{0}xf32>
}
)mlir",
                    groups, irName(fp8), power2 ? ", power_2_scale" : "")
          .str();
  auto out = runFunction(
      gpu, ir, {amax},
      {tensorOf(Elem::F32, {groups}), tensorOf(Elem::F32, {groups})});
  Result result;
  float max = fp8 == Elem::E4M3 ? 448.f : 57344.f;
  for (int64_t g = 0; g < groups; ++g) {
    float a = amax.f32(g), scale = 1.f;
    if (a > 0.f && a < INFINITY) {
      scale = max / a;
      if (scale == INFINITY)
        scale = FLT_MAX;
      if (power2)
        scale = bitsToFloat(floatToBits(scale) & 0xff800000u);
    }
    float inverse = 1.f / scale;
    result.expect(floatToBits(out[0].f32(g)) == floatToBits(scale) &&
                      floatToBits(out[1].f32(g)) == floatToBits(inverse),
                  llvm::formatv("slot {0} (amax {1}): got {2}, {3}, want "
                                "{4}, {5}",
                                g, a, out[0].f32(g), out[1].f32(g), scale,
                                inverse));
  }
  return result;
}

/// Current scaling: grouped_amax -> compute_scale -> both casts of x.
Result runCurrentScalingChain(Gpu &gpu, std::mt19937_64 &rng) {
  std::vector<int32_t> splits = {48, 0, 96, 32};
  HostTensor x = randomInput(Elem::BF16, {192, 64}, rng);
  HostTensor m = splitsTensor(splits);
  std::string ir =
      llvm::formatv(R"mlir(
func.func @chain(%x: {0}, %m: {1}) -> ({2}, {3}, tensor<4xf32>) {{
  %amax = te.fused "grouped_amax"(%x, %m) : ({0}, {1}) -> tensor<4xf32> {{
  ^bb0(%x0: {0}, %m0: {1}):
    %a = te.grouped_amax %x0, %m0 : ({0}, {1}) -> tensor<4xf32>
    te.yield %a : tensor<4xf32>
  }
  %s, %si = te.compute_scale %amax {{fp8_type = f8E4M3FN} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
  %r:2 = te.fused "grouped_quantize"(%x, %s, %m) : ({0}, tensor<4xf32>, {1}) -> ({2}, {3}) {{
  ^bb0(%x1: {0}, %s1: tensor<4xf32>, %m1: {1}):
    %q, %a0 = te.grouped_quantize %x1, %s1, %m1 : ({0}, tensor<4xf32>, {1}) -> ({2}, tensor<4xf32>)
    %qt, %a1 = te.grouped_quantize %x1, %s1, %m1 {{transpose} : ({0}, tensor<4xf32>, {1}) -> ({3}, tensor<4xf32>)
    te.yield %q, %qt : {2}, {3}
  }
  return %r#0, %r#1, %si : {2}, {3}, tensor<4xf32>
}
)mlir",
                    x.irType(), m.irType(), "tensor<192x64xf8E4M3FN>",
                    "tensor<64x192xf8E4M3FN>")
          .str();
  auto out =
      runFunction(gpu, ir, {x, m},
                  {tensorOf(Elem::E4M3, {192, 64}),
                   tensorOf(Elem::E4M3, {64, 192}), tensorOf(Elem::F32, {4})});
  std::vector<int64_t> offsets = offsetsOf(splits);
  std::vector<double> amax = groupAmaxes(x, 192, 64, offsets, 0, 4);
  HostTensor scale = tensorOf(Elem::F32, {4});
  Result result;
  for (int64_t g = 0; g < 4; ++g) {
    float a = float(amax[g]), s = a > 0.f ? 448.f / a : 1.f;
    setF32(scale, g, s);
    result.expect(out[2].f32(g) == 1.f / s,
                  llvm::formatv("scale_inv[{0}]: got {1}, want {2}", g,
                                out[2].f32(g), 1.f / s));
  }
  checkCast(result, "row-major", x, scale, out[0], 192, 64, offsets, 0, false);
  checkCast(result, "transposed", x, scale, out[1], 192, 64, offsets, 0, true);
  return result;
}

//===----------------------------------------------------------------------===//
// Float8BlockScaling: te.grouped_block_quantize
//===----------------------------------------------------------------------===//
//
// The reference is written here from docs/block-scaling.md and
// docs/grouped-linear.md (the check links no interpreter): per block, amax
// = max |x| (NaN when one is NaN), scale = fp8_max / amax in float32 (1 for
// an amax of 0, inf or NaN; FLT_MAX when the quotient overflows; with
// power_2_scale the mantissa bits cleared), scale_inv = 1 / scale, each
// element fp8Reference(x * scale). Outputs are compared as values (every
// byte, but any NaN for NaN and either zero for zero); scale_inv bit for
// bit, 0 wherever no group owns the element.

/// te.compute_scale's rule for a block's amax, in float32.
float blockScaleRef(double amax, Elem fp8, bool power2) {
  float a = float(amax); // exact: inputs are bf16, f16 or f32
  float scale = 1.f;
  if (a > 0.f && std::isfinite(a)) {
    scale = (fp8 == Elem::E4M3 ? 448.f : 57344.f) / a;
    if (std::isinf(scale))
      scale = FLT_MAX;
    if (power2)
      scale = bitsToFloat(floatToBits(scale) & 0xff800000u);
  }
  return scale;
}

/// The expected outputs of one cast: values and scale inverses.
struct BlockCastRef {
  std::vector<double> out;
  std::vector<float> scaleInv;
};

/// Casts one block of `count` elements: element i is x's flat element
/// inAt(i), written at out[outAt(i)]; its scale_inv at `scaleAt`.
template <typename InAt, typename OutAt>
void castBlockRef(const HostTensor &x, int64_t count, InAt inAt, OutAt outAt,
                  int64_t scaleAt, Elem fp8, bool power2, BlockCastRef &ref) {
  double amax = 0.0;
  for (int64_t i = 0; i < count && !std::isnan(amax); ++i) {
    double v = std::fabs(x.at(inAt(i)));
    amax = std::isnan(v) ? v : std::max(amax, v);
  }
  float scale = blockScaleRef(amax, fp8, power2);
  for (int64_t i = 0; i < count; ++i)
    ref.out[outAt(i)] = fp8Reference(float(x.at(inAt(i))) * scale, fp8);
  ref.scaleInv[scaleAt] = 1.f / scale;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t pad4(int64_t n) { return (n + 3) / 4 * 4; }

/// x [T, K] in segments, rowwise: scale_inv [ceil(K/128), T], segment g's
/// element (j, r) at nb o_g + j m_g + (r - o_g).
BlockCastRef segmentsRowwiseRef(const HostTensor &x,
                                const std::vector<int64_t> &offsets, Elem fp8,
                                bool power2) {
  int64_t tokens = x.shape[0], cols = x.shape[1], nb = ceilDiv(cols, 128);
  BlockCastRef ref{std::vector<double>(tokens * cols, 0.0),
                   std::vector<float>(nb * tokens, 0.f)};
  for (size_t g = 0; g + 1 < offsets.size(); ++g) {
    int64_t begin = offsets[g], size = offsets[g + 1] - begin;
    for (int64_t r = begin; r < begin + size; ++r)
      for (int64_t j = 0; j < nb; ++j) {
        int64_t first = r * cols + 128 * j;
        auto at = [&](int64_t i) { return first + i; };
        castBlockRef(x, std::min<int64_t>(128, cols - 128 * j), at, at,
                     nb * begin + j * size + (r - begin), fp8, power2, ref);
      }
  }
  return ref;
}

/// x [T, K] in segments, transposed: x^T [K, T]; scale_inv [ceil(T/128) +
/// G, pad4(K)], segment g's block j of row k at pad4(K) (c_g + j) + k,
/// c_g = the blocks of the segments before g.
BlockCastRef segmentsTransposedRef(const HostTensor &x,
                                   const std::vector<int64_t> &offsets,
                                   Elem fp8, bool power2) {
  int64_t tokens = x.shape[0], cols = x.shape[1];
  int64_t groups = int64_t(offsets.size()) - 1;
  BlockCastRef ref{
      std::vector<double>(tokens * cols, 0.0),
      std::vector<float>((ceilDiv(tokens, 128) + groups) * pad4(cols), 0.f)};
  int64_t blocksBefore = 0;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t begin = offsets[g], size = offsets[g + 1] - begin;
    for (int64_t j = 0; j < ceilDiv(size, 128); ++j) {
      int64_t first = begin + 128 * j;
      int64_t count = std::min<int64_t>(128, begin + size - first);
      for (int64_t k = 0; k < cols; ++k)
        castBlockRef(
            x, count, [&](int64_t i) { return (first + i) * cols + k; },
            [&](int64_t i) { return k * tokens + first + i; },
            pad4(cols) * (blocksBefore + j) + k, fp8, power2, ref);
    }
    blocksBefore += ceilDiv(size, 128);
  }
  return ref;
}

/// Stacked [G, R, C]: te.block_quantize of each x[g] (transposed with
/// `transpose`), 1-D blocks (scale_inv [ceil(cols/128), pad4(rows)] of the
/// cast matrix) or 2-D (ceil(rows/128) x pad4(ceil(cols/128))), one after
/// another.
BlockCastRef stackedRef(const HostTensor &x, int64_t blockDim, bool transpose,
                        Elem fp8, bool power2) {
  int64_t groups = x.shape[0], xRows = x.shape[1], xCols = x.shape[2];
  // The cast matrix S of each group.
  int64_t rows = transpose ? xCols : xRows, cols = transpose ? xRows : xCols;
  int64_t s0 = blockDim == 1 ? ceilDiv(cols, 128) : ceilDiv(rows, 128);
  int64_t s1 = blockDim == 1 ? pad4(rows) : pad4(ceilDiv(cols, 128));
  BlockCastRef ref{std::vector<double>(x.elements(), 0.0),
                   std::vector<float>(groups * s0 * s1, 0.f)};
  int64_t blockRows = blockDim == 1 ? 1 : 128;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t base = g * xRows * xCols;
    for (int64_t r0 = 0; r0 < rows; r0 += blockRows)
      for (int64_t c0 = 0; c0 < cols; c0 += 128) {
        int64_t height = std::min(blockRows, rows - r0);
        int64_t width = std::min<int64_t>(128, cols - c0);
        // Element i of the block is S(r0 + i / width, c0 + i % width).
        auto inAt = [&](int64_t i) {
          int64_t r = r0 + i / width, c = c0 + i % width;
          return base + (transpose ? c * xCols + r : r * xCols + c);
        };
        auto outAt = [&](int64_t i) {
          return base + (r0 + i / width) * cols + c0 + i % width;
        };
        int64_t scaleAt =
            g * s0 * s1 +
            (blockDim == 1 ? c0 / 128 * s1 + r0 : r0 / 128 * s1 + c0 / 128);
        castBlockRef(x, height * width, inAt, outAt, scaleAt, fp8, power2, ref);
      }
  }
  return ref;
}

/// Puts the outliers a block cast must get right into the matrix [rows,
/// cols] of `x`: zero rows and columns (amax 0: scale 1), rows and columns
/// of the smallest subnormals (bf16 and f32: fp8_max / amax overflows, the
/// scale is FLT_MAX), large values, and, with `specials`, a NaN and an inf
/// (scale 1; the NaN stays NaN, the inf saturates).
void addBlockOutliers(HostTensor &x, int64_t rows, int64_t cols, bool specials,
                      std::mt19937_64 &rng) {
  std::uniform_int_distribution<int64_t> row(0, rows - 1), col(0, cols - 1);
  auto set = [&](int64_t i, double value) {
    if (x.elem == Elem::F32) {
      setF32(x, i, float(value));
      return;
    }
    uint32_t bits = floatToBits(float(value));
    uint16_t h;
    if (x.elem == Elem::BF16) {
      h = uint16_t(bits >> 16); // the values below are exact in bf16
    } else {
      // f16: 2^-24 (the smallest subnormal) or a power of two in range.
      int exponent = std::ilogb(std::fabs(value));
      h = value == 0.0     ? 0
          : exponent < -14 ? 1
                           : uint16_t((exponent + 15) << 10);
      if (std::signbit(value))
        h |= 0x8000;
    }
    std::memcpy(&x.bytes[2 * i], &h, 2);
  };
  double tiny =
      x.elem == Elem::F16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -130);
  for (int n = 0; n < 2; ++n) {
    int64_t zeroRow = row(rng), tinyRow = row(rng);
    int64_t zeroCol = col(rng), tinyCol = col(rng);
    for (int64_t c = 0; c < cols; ++c) {
      set(zeroRow * cols + c, 0.0);
      set(tinyRow * cols + c, c % 2 ? tiny : -tiny);
    }
    for (int64_t r = 0; r < rows; ++r) {
      set(r * cols + zeroCol, 0.0);
      set(r * cols + tinyCol, r % 3 ? tiny : -tiny);
    }
  }
  for (int n = 0; n < 8; ++n)
    set(row(rng) * cols + col(rng), n % 2 ? 4096.0 : -2048.0);
  if (specials) {
    setSpecial(x, row(rng) * cols + col(rng), /*nan=*/true);
    setSpecial(x, row(rng) * cols + col(rng), /*nan=*/false, /*negative=*/true);
  }
}

struct BlockCastCase {
  std::string name;
  Elem input, fp8;
  /// Segments: x [rows, cols] cut by `splits`; stacked (splits empty):
  /// [groups, rows, cols].
  int64_t groups, rows, cols;
  std::vector<int32_t> splits;
  int64_t blockDim;
  bool rowwise, transposed, power2;
  bool timed = false;
};

/// The FP8 output and scale_inv types of one cast of the case.
std::pair<HostTensor, HostTensor> blockCastResults(const BlockCastCase &c,
                                                   bool transpose) {
  bool stacked = c.splits.empty();
  if (stacked) {
    int64_t rows = transpose ? c.cols : c.rows;
    int64_t cols = transpose ? c.rows : c.cols;
    std::vector<int64_t> scale =
        c.blockDim == 1
            ? std::vector<int64_t>{c.groups, ceilDiv(cols, 128), pad4(rows)}
            : std::vector<int64_t>{c.groups, ceilDiv(rows, 128),
                                   pad4(ceilDiv(cols, 128))};
    return {tensorOf(c.fp8, {c.groups, rows, cols}),
            tensorOf(Elem::F32, scale)};
  }
  if (transpose)
    return {
        tensorOf(c.fp8, {c.cols, c.rows}),
        tensorOf(Elem::F32, {ceilDiv(c.rows, 128) + c.groups, pad4(c.cols)})};
  return {tensorOf(c.fp8, {c.rows, c.cols}),
          tensorOf(Elem::F32, {ceilDiv(c.cols, 128), c.rows})};
}

/// A function of one te.fused "grouped_block_quantize" region: the case's
/// casts of `x` (with `m_splits` for segments); results: each cast's output
/// and scale_inv.
std::string blockCastIr(const BlockCastCase &c, const HostTensor &x,
                        const HostTensor *splits) {
  std::string args = "%xa: " + x.irType(), inputs = "%xa", types = x.irType(),
              blockArgs = "%x: " + x.irType(), operands = "%x";
  if (splits) {
    args += ", %ma: " + splits->irType();
    inputs += ", %ma";
    types += ", " + splits->irType();
    blockArgs += ", %m: " + splits->irType();
    operands += ", %m";
  }
  std::string body, yields, results, returns;
  int count = 0;
  auto add = [&](bool transpose) {
    auto [out, scale] = blockCastResults(c, transpose);
    std::string q = "%q" + std::to_string(count),
                s = "%s" + std::to_string(count);
    std::string attrs = "block_dim = " + std::to_string(c.blockDim) + " : i64";
    if (transpose)
      attrs += ", transpose";
    if (c.power2)
      attrs += ", power_2_scale";
    body += llvm::formatv("    {0}, {1} = te.grouped_block_quantize {2} {{{3}} "
                          ": ({4}) -> ({5}, {6})\n",
                          q, s, operands, attrs, types, out.irType(),
                          scale.irType())
                .str();
    std::string sep = count ? ", " : "";
    yields += sep + q + ", " + s;
    results += sep + out.irType() + ", " + scale.irType();
    returns += sep + "%r#" + std::to_string(2 * count) + ", %r#" +
               std::to_string(2 * count + 1);
    ++count;
  };
  if (c.rowwise)
    add(false);
  if (c.transposed)
    add(true);
  return llvm::formatv(R"mlir(
func.func @block_cast({0}) -> ({1}) {{
  %r:{2} = te.fused "grouped_block_quantize"({3}) : ({4}) -> ({1}) {{
  ^bb0({5}):
{6}    te.yield {7} : {1}
  }
  return {8} : {1}
}
)mlir",
                       args, results, 2 * count, inputs, types, blockArgs, body,
                       yields, returns)
      .str();
}

/// One cast's output and scale_inv against its reference.
void checkBlockCast(Result &result, const char *what, const HostTensor &out,
                    const HostTensor &scaleInv, const BlockCastRef &want) {
  for (int64_t i = 0; i < out.elements(); ++i)
    result.expect(sameValue(out.at(i), want.out[i]),
                  llvm::formatv("{0} output [{1}]: got {2}, want {3}", what, i,
                                out.at(i), want.out[i]));
  for (int64_t i = 0; i < scaleInv.elements(); ++i)
    result.expect(floatToBits(scaleInv.f32(i)) == floatToBits(want.scaleInv[i]),
                  llvm::formatv("{0} scale_inv [{1}]: got {2}, want {3}", what,
                                i, scaleInv.f32(i), want.scaleInv[i]));
}

Result runBlockCast(Gpu &gpu, const BlockCastCase &c, std::mt19937_64 &rng) {
  bool stacked = c.splits.empty();
  std::vector<int64_t> shape =
      stacked ? std::vector<int64_t>{c.groups, c.rows, c.cols}
              : std::vector<int64_t>{c.rows, c.cols};
  int64_t rows = stacked ? c.groups * c.rows : c.rows;
  HostTensor x = randomInput(c.input, shape, rng);
  std::vector<int64_t> offsets = offsetsOf(c.splits);
  addBlockOutliers(x, stacked ? rows : std::max<int64_t>(offsets.back(), 1),
                   c.cols, !c.timed, rng);
  // Padding rows hold inf and NaN: written as 0, scales 0.
  if (!stacked)
    for (int64_t t = offsets.back(); t < rows; ++t)
      for (int64_t col = 0; col < c.cols; col += 3)
        setSpecial(x, t * c.cols + col, col % 2 == 0, t % 2 == 1);
  std::vector<HostTensor> args = {x};
  HostTensor splits = splitsTensor(c.splits);
  if (!stacked)
    args.push_back(splits);
  std::vector<HostTensor> like;
  for (bool transpose : {false, true})
    if (transpose ? c.transposed : c.rowwise) {
      auto [out, scale] = blockCastResults(c, transpose);
      like.push_back(std::move(out));
      like.push_back(std::move(scale));
    }
  double us = 0;
  std::vector<HostTensor> got =
      runFunction(gpu, blockCastIr(c, x, stacked ? nullptr : &splits), args,
                  like, c.timed ? 20 : 0, &us);
  Result result;
  size_t next = 0;
  for (bool transpose : {false, true}) {
    if (!(transpose ? c.transposed : c.rowwise))
      continue;
    BlockCastRef want =
        stacked     ? stackedRef(x, c.blockDim, transpose, c.fp8, c.power2)
        : transpose ? segmentsTransposedRef(x, offsets, c.fp8, c.power2)
                    : segmentsRowwiseRef(x, offsets, c.fp8, c.power2);
    checkBlockCast(result, transpose ? "transposed" : "rowwise", got[next],
                   got[next + 1], want);
    next += 2;
  }
  if (c.timed) {
    double bytes =
        double(rows) * c.cols * (bytesOf(c.input) + c.rowwise + c.transposed);
    result.extra =
        llvm::formatv(" {0:f1} us, {1:f0} GB/s", us, bytes / (us * 1e-6) / 1e9)
            .str();
  }
  return result;
}

std::vector<BlockCastCase> blockCastCases() {
  using E = Elem;
  std::vector<BlockCastCase> cases;
  auto segments = [&](std::string name, E input, E fp8,
                      std::vector<int32_t> splits, int64_t tokens, int64_t cols,
                      bool rowwise, bool transposed, bool power2) {
    cases.push_back({"segments " + name, input, fp8, int64_t(splits.size()),
                     tokens, cols, std::move(splits), 1, rowwise, transposed,
                     power2});
  };
  auto stacked = [&](std::string name, E input, E fp8, int64_t groups,
                     int64_t rows, int64_t cols, int64_t blockDim, bool rowwise,
                     bool transposed, bool power2) {
    cases.push_back({"stacked " + name,
                     input,
                     fp8,
                     groups,
                     rows,
                     cols,
                     {},
                     blockDim,
                     rowwise,
                     transposed,
                     power2});
  };
  // The forward's x and x^T: an empty segment, padding, whole tiles.
  segments("bf16 G=4 x and x^T, power of 2", E::BF16, E::E4M3,
           {128, 0, 200, 100}, 512, 384, true, true, true);
  // HYBRID's dy (E5M2): segments not multiples of 8 (x^T byte by byte),
  // K % 128 != 0, float32 scales.
  segments("bf16 G=3 E5M2 K=200", E::BF16, E::E5M2, {17, 150, 96}, 300, 200,
           true, true, false);
  // T % 8 == 0 but chunks that start off a multiple of 8 (x^T's 8-byte
  // runs fall back to bytes there); f16.
  segments("f16 G=5 unaligned", E::F16, E::E4M3, {200, 0, 333, 130, 64}, 1024,
           256, true, true, false);
  // f32, K odd: one element a vector.
  segments("f32 K=37", E::F32, E::E4M3, {50, 100}, 160, 37, true, true, true);
  // x^T alone, one group, no padding.
  segments("bf16 G=1 x^T", E::BF16, E::E4M3, {256}, 256, 128, false, true,
           true);
  // dy rowwise alone, E5M2, splits multiples of 16 (FP8's).
  segments("bf16 G=8 E5M2 rowwise", E::BF16, E::E5M2,
           {256, 128, 0, 512, 144, 16, 400, 528}, 2048, 512, true, false, true);
  // Nothing but padding.
  segments("bf16 all padding", E::BF16, E::E4M3, {0, 0}, 128, 64, true, true,
           true);
  // W and W^T in 128 x 128 tiles.
  stacked("bf16 G=4 2-D W and W^T", E::BF16, E::E4M3, 4, 256, 384, 2, true,
          true, true);
  // 1-D, partial tiles, float32 scales.
  stacked("bf16 G=3 1-D partial", E::BF16, E::E4M3, 3, 200, 136, 1, true, true,
          false);
  // W^T alone, 2-D, R % 8 != 0 (bytes), E5M2, f16.
  stacked("f16 G=2 2-D W^T E5M2", E::F16, E::E5M2, 2, 100, 60, 2, false, true,
          false);
  // f32, K odd, 1-D rowwise.
  stacked("f32 G=5 1-D K=37", E::F32, E::E4M3, 5, 48, 37, 1, true, false, true);
  // A real size: T = 8192, K = 4096, G = 8 (one empty, 256 padding rows).
  segments("bf16 T=8192 K=4096 G=8", E::BF16, E::E4M3,
           {1024, 2048, 512, 0, 1536, 1024, 784, 1008}, 8192, 4096, true, true,
           true);
  cases.back().timed = true;
  return cases;
}

} // namespace

int main(int argc, char **argv) {
  uint64_t seed = 25;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--seed" && i + 1 < argc)
      seed = std::stoull(argv[++i]);
    else if (arg == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--seed N] [--filter TEXT]\n", argv[0]);
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
  Gpu gpu{driver, device->arch};
  gpu.nvrtc = orDie(tejit::codegen::NvrtcCompiler::create());
  check(driver.check(driver.cuStreamCreate(&gpu.stream, CU_STREAM_NON_BLOCKING),
                     "cuStreamCreate"));

  int passed = 0, failed = 0;
  auto report = [&](const std::string &name, const Result &result) {
    bool ok = result.wrong == 0 && result.checked > 0;
    (ok ? passed : failed)++;
    std::printf("%s %s: %lld values, %lld wrong%s%s\n", ok ? "PASS" : "FAIL",
                name.c_str(), (long long)result.checked,
                (long long)result.wrong, result.extra.c_str(),
                result.first.c_str());
    std::fflush(stdout);
  };
  auto wanted = [&](const std::string &name) {
    return filter.empty() || name.find(filter) != std::string::npos;
  };
  std::mt19937_64 rng(seed);
  for (const CastCase &c : castCases())
    if (wanted("cast " + c.name))
      report("cast " + c.name, runCast(gpu, c, rng));
  if (wanted("amax"))
    report("amax, both forms, NaN and inf", runAmaxes(gpu, rng));
  struct BiasCase {
    std::string name;
    Elem in, out;
    int64_t tokens, n;
    std::vector<int32_t> splits;
  };
  std::vector<BiasCase> biasCases = {
      {"bias_grad bf16 G=8 one pass",
       Elem::BF16,
       Elem::BF16,
       1024,
       512,
       {128, 0, 200, 100, 96, 150, 50, 250}},
      {"bias_grad bf16 G=1 split", Elem::BF16, Elem::F32, 8192, 256, {8000}},
      {"bias_grad f32 G=3 odd width",
       Elem::F32,
       Elem::F16,
       300,
       45,
       {100, 0, 150}},
      {"bias_grad f16 G=2 split", Elem::F16, Elem::F32, 512, 128, {300, 190}},
  };
  for (const BiasCase &c : biasCases)
    if (wanted(c.name))
      report(c.name,
             runBiasGrad(gpu, rng, c.in, c.out, c.tokens, c.n, c.splits));
  if (wanted("compute_scale")) {
    report("compute_scale [300] E4M3",
           runComputeScale(gpu, rng, false, Elem::E4M3));
    report("compute_scale [300] E5M2 power of 2",
           runComputeScale(gpu, rng, true, Elem::E5M2));
  }
  if (wanted("current scaling chain"))
    report("current scaling chain", runCurrentScalingChain(gpu, rng));
  // After the cases above, which keep their random data.
  for (const BlockCastCase &c : blockCastCases())
    if (wanted("block " + c.name))
      report("block " + c.name, runBlockCast(gpu, c, rng));
  std::printf("%d passed, %d failed\n", passed, failed);
  driver.cuStreamDestroy(gpu.stream);
  return failed ? 1 : 0;
}
