//===- GroupedEmitTest.cpp - GroupedLinear's kernels, compiled ------------===//
//
// The CUDA emitter on the grouped ops of docs/grouped-linear.md, standalone
// and in the te.fused regions te-fuse makes of them ("grouped_quantize",
// "grouped_amax", "grouped_bias_grad"), over shapes and types that take
// each path of codegen/GroupedKernels.cpp: row segments (m_splits) and
// stacked groups; whole and partial tiles; 16-byte to 1-element vectors;
// transposed copies as words and byte by byte; E4M3 and E5M2; bias
// gradients in one pass and split over blocks; te.compute_scale on [G];
// Float8BlockScaling's te.grouped_block_quantize ("grouped_block_quantize":
// token segments, rowwise and/or transposed, and stacked matrices in 1-D or
// 2-D blocks; codegen/GroupedBlockScalingKernels.cpp). Every kernel is
// compiled with NVRTC for sm_90a and sm_89 (no GPU needed);
// tests/gpu/grouped_kernels_check.cpp runs them on a GPU.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "codegen/NvrtcCompiler.h"
#include "dialects/GroupedBlockScaleLayout.h"
#include "dialects/TEDialect.h"
#include "tests/codegen-emit/ExpectCompiles.h"
#include "tests/codegen-emit/TeIrTest.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

using namespace mlir;
using tejit::codegen::EmittedKernel;
using tejit::testing::expectCompiles;

namespace {

/// A te.grouped_quantize (or, with no fp8 type, te.grouped_amax) kernel:
/// input [rows, cols] with `groups` segments, or stacked [groups, rows,
/// cols] when `stacked`.
struct CastCase {
  int64_t groups, rows, cols;
  bool stacked;
  const char *input;
  /// The casts: row-major, transposed (both: one fused kernel).
  bool rowwise, transposed;
  const char *fp8;
};

std::string tensor(llvm::ArrayRef<int64_t> shape, llvm::StringRef element) {
  std::string text = "tensor<";
  for (int64_t dim : shape)
    text += std::to_string(dim) + "x";
  return text + element.str() + ">";
}

/// The input's shape, and the transposed output's.
std::vector<int64_t> inputShape(const CastCase &c) {
  if (c.stacked)
    return {c.groups, c.rows, c.cols};
  return {c.rows, c.cols};
}
std::vector<int64_t> transposedShape(const CastCase &c) {
  if (c.stacked)
    return {c.groups, c.cols, c.rows};
  return {c.cols, c.rows};
}

/// One te.grouped_quantize of region values `x`, `s` (and `m`).
std::string quantizeOp(const CastCase &c, bool transpose, llvm::StringRef q,
                       llvm::StringRef amax) {
  std::string g = tensor({c.groups}, "f32");
  std::string in = tensor(inputShape(c), c.input);
  std::string out =
      tensor(transpose ? transposedShape(c) : inputShape(c), c.fp8);
  std::string operands = c.stacked ? "%x, %s" : "%x, %s, %m";
  std::string types = c.stacked
                          ? in + ", " + g
                          : in + ", " + g + ", " + tensor({c.groups}, "i32");
  return llvm::formatv("{0}, {1} = te.grouped_quantize {2}{3} : ({4}) -> ({5}, "
                       "{6})",
                       q, amax, operands, transpose ? " {transpose}" : "",
                       types, out, g)
      .str();
}

/// A function `name` holding the case's casts in one te.fused
/// "grouped_quantize" region (te-fuse's form), its results the FP8 copies
/// and their amaxes.
std::string castFunction(llvm::StringRef name, const CastCase &c) {
  std::string g = tensor({c.groups}, "f32");
  std::string in = tensor(inputShape(c), c.input);
  std::string m = tensor({c.groups}, "i32");
  std::string args = "%a: " + in + ", %sa: " + g;
  std::string inputs = "%a, %sa", inputTypes = in + ", " + g;
  std::string blockArgs = "%x: " + in + ", %s: " + g;
  if (!c.stacked) {
    args += ", %ma: " + m + " {te.name = \"m_splits\"}";
    inputs += ", %ma";
    inputTypes += ", " + m;
    blockArgs += ", %m: " + m;
  }
  std::string body, yields, resultTypes;
  auto add = [&](bool transpose, llvm::StringRef suffix) {
    body += "    " +
            quantizeOp(c, transpose, ("%q" + suffix).str(),
                       ("%amax" + suffix).str()) +
            "\n";
    yields += std::string(yields.empty() ? "" : ", ") + "%q" + suffix.str() +
              ", %amax" + suffix.str();
    resultTypes +=
        std::string(resultTypes.empty() ? "" : ", ") +
        tensor(transpose ? transposedShape(c) : inputShape(c), c.fp8) + ", " +
        g;
  };
  if (c.rowwise)
    add(false, "r");
  if (c.transposed)
    add(true, "t");
  size_t results = (c.rowwise + c.transposed) * 2;
  std::string returns;
  for (size_t i = 0; i < results; ++i)
    returns += std::string(i ? ", " : "") + "%r#" + std::to_string(i);
  return llvm::formatv(R"mlir(
func.func @{0}({1}) -> ({2}) {{
  %r:{3} = te.fused "grouped_quantize"({4}) : ({5}) -> ({2}) {{
  ^bb0({6}):
{7}    te.yield {8} : {2}
  }
  return {9} : {2}
}
)mlir",
                       name, args, resultTypes, results, inputs, inputTypes,
                       blockArgs, body, yields, returns)
      .str();
}

const CastCase kCasts[] = {
    // The forward's x: segments, whole tiles, 16-byte bf16 vectors, the
    // row-major and the transposed copy in one kernel.
    {3, 256, 512, false, "bf16", true, true, "f8E4M3FN"},
    // dy's transposed copy alone, E5M2, partial tiles (T % 128 != 0).
    {8, 336, 192, false, "bf16", false, true, "f8E5M2"},
    // f16, T % 8 != 0: transposed byte by byte.
    {2, 100, 96, false, "f16", true, true, "f8E4M3FN"},
    // f32 with one element a vector (K odd).
    {2, 64, 37, false, "f32", true, true, "f8E4M3FN"},
    // One group.
    {1, 128, 64, false, "bf16", true, false, "f8E4M3FN"},
    // Stacked weights [G, N, K] and their [G, K, N] copy (R % 8 == 0).
    {4, 48, 64, true, "bf16", true, true, "f8E4M3FN"},
    // Stacked, R % 8 != 0: bytes; 2-element f16 vectors.
    {3, 20, 36, true, "f16", true, true, "f8E5M2"},
};

/// A te.grouped_amax of [rows, cols] segments (or stacked) as a region.
std::string amaxFunction(llvm::StringRef name, int64_t groups, int64_t rows,
                         int64_t cols, bool stacked, llvm::StringRef input) {
  std::string g = tensor({groups}, "f32");
  std::string m = tensor({groups}, "i32");
  if (stacked) {
    std::string in = tensor({groups, rows, cols}, input);
    return llvm::formatv(R"mlir(
func.func @{0}(%a: {1}) -> {2} {{
  %r = te.fused "grouped_amax"(%a) : ({1}) -> {2} {{
  ^bb0(%x: {1}):
    %amax = te.grouped_amax %x : ({1}) -> {2}
    te.yield %amax : {2}
  }
  return %r : {2}
}
)mlir",
                         name, in, g)
        .str();
  }
  std::string in = tensor({rows, cols}, input);
  return llvm::formatv(R"mlir(
func.func @{0}(%a: {1}, %ma: {3}) -> {2} {{
  %r = te.fused "grouped_amax"(%a, %ma) : ({1}, {3}) -> {2} {{
  ^bb0(%x: {1}, %m: {3}):
    %amax = te.grouped_amax %x, %m : ({1}, {3}) -> {2}
    te.yield %amax : {2}
  }
  return %r : {2}
}
)mlir",
                       name, in, g, m)
      .str();
}

/// A standalone te.grouped_bias_grad of dy [rows, cols].
std::string biasGradFunction(llvm::StringRef name, int64_t groups, int64_t rows,
                             int64_t cols, llvm::StringRef input,
                             llvm::StringRef output) {
  std::string dy = tensor({rows, cols}, input);
  std::string m = tensor({groups}, "i32");
  std::string out = tensor({groups, cols}, output);
  return llvm::formatv(R"mlir(
func.func @{0}(%dy: {1}, %m: {2}) -> {3} {{
  %db = te.grouped_bias_grad %dy, %m : ({1}, {2}) -> {3}
  return %db : {3}
}
)mlir",
                       name, dy, m, out)
      .str();
}

class GroupedEmit : public tejit::testing::TeIrTest {
protected:
  /// The kernels of `text`; fails the test when emission fails.
  std::vector<EmittedKernel> emit(OwningOpRef<ModuleOp> &module,
                                  llvm::StringRef text) {
    module = parse(text);
    if (!module)
      return {};
    auto kernels = tejit::codegen::emitKernels(*module);
    EXPECT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
    if (!kernels)
      return {};
    return std::move(*kernels);
  }
};

/// The parameter of `kernel` named `name`, or null.
const tejit::codegen::KernelParam *paramNamed(const EmittedKernel &kernel,
                                              llvm::StringRef name) {
  for (const tejit::codegen::KernelParam &param : kernel.params)
    if (param.name == name)
      return &param;
  return nullptr;
}

/// The kernel's own code, after the device helpers.
llvm::StringRef body(const EmittedKernel &kernel) {
  llvm::StringRef source = kernel.source;
  return source.drop_front(source.find("extern \"C\""));
}

TEST_F(GroupedEmit, CastsEmitAndCompile) {
  std::string text;
  for (auto [index, c] : llvm::enumerate(kCasts))
    text += castFunction("cast" + std::to_string(index), c);
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels = emit(module, text);
  ASSERT_EQ(kernels.size(), std::size(kCasts));
  for (auto [index, c] : llvm::enumerate(kCasts)) {
    const EmittedKernel &kernel = kernels[index];
    SCOPED_TRACE(kernel.name);
    EXPECT_EQ(kernel.name,
              "cast" + std::to_string(index) + "_grouped_quantize_0");
    // 128-row tiles of 8 vectors of 16 bytes (or fewer elements).
    int64_t rows = c.stacked ? c.groups * c.rows : c.rows;
    int64_t vec = llvm::StringRef(c.input) == "f32" ? 4 : 8;
    while (c.cols % vec != 0)
      vec /= 2;
    EXPECT_EQ(kernel.grid.x, (c.cols + 8 * vec - 1) / (8 * vec));
    EXPECT_EQ(kernel.grid.y, (rows + 127) / 128);
    EXPECT_EQ(kernel.block.x, 256);
    EXPECT_EQ(kernel.scratchBytes, 0);
    // Inputs (x, scale, m_splits), then the copies and their amaxes, which
    // the launcher zeroes.
    size_t casts = c.rowwise + c.transposed;
    ASSERT_EQ(kernel.params.size(), (c.stacked ? 2u : 3u) + 2 * casts);
    const auto *m = paramNamed(kernel, "m_splits");
    EXPECT_EQ(m != nullptr, !c.stacked);
    if (m) {
      EXPECT_EQ(m->elementType, "int");
      EXPECT_FALSE(m->isOutput);
    }
    for (const auto &param : kernel.params) {
      bool amax = llvm::StringRef(param.name).starts_with("amax");
      EXPECT_EQ(param.zeroBeforeLaunch, amax) << param.name;
      if (amax) {
        EXPECT_EQ(param.elementType, "float");
      }
    }
    llvm::StringRef source = body(kernel);
    // The input is read once for every cast, and scaled and converted once
    // for both copies (one scale).
    EXPECT_EQ(source.count("x_in[p] = *reinterpret_cast"), 1u);
    EXPECT_EQ(source.count("tj_to_float(x_in[p].v[i]) * scale_"), 1u);
    // Segments: offsets by a scan and a search; stacked: a division.
    EXPECT_EQ(source.contains("tj_segment_of(seg_end"), !c.stacked);
    // Transposed copies as words where runs of 8 rows are contiguous (T,
    // or R for stacked groups, % 8 == 0) and the rows are whole words;
    // else bytes.
    bool wide = vec % 4 == 0 && c.rows % 8 == 0;
    EXPECT_EQ(source.contains("tj_transpose_8x4(lo"), c.transposed && wide);
    EXPECT_EQ(source.contains("_tile[r][c];"), c.transposed && !wide);
    // One atomic a group a block for each amax written.
    EXPECT_EQ(source.count("atomicMax(reinterpret_cast<tj_u32 *>("), casts);
  }
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

TEST_F(GroupedEmit, StandaloneCastsAndAmaxesEmitAndCompile) {
  // A cast outside te.fused (as before te-fuse) and grouped amaxes of both
  // forms, in regions and standalone.
  std::string text = R"mlir(
func.func @lone(%x: tensor<160x96xbf16>, %s: tensor<5xf32>, %m: tensor<5xi32>) -> (tensor<96x160xf8E4M3FN>, tensor<5xf32>) {
  %q, %a = te.grouped_quantize %x, %s, %m {transpose} : (tensor<160x96xbf16>, tensor<5xf32>, tensor<5xi32>) -> (tensor<96x160xf8E4M3FN>, tensor<5xf32>)
  return %q, %a : tensor<96x160xf8E4M3FN>, tensor<5xf32>
}
func.func @lone_amax(%w: tensor<6x40x24xf32>) -> tensor<6xf32> {
  %a = te.grouped_amax %w : (tensor<6x40x24xf32>) -> tensor<6xf32>
  return %a : tensor<6xf32>
}
)mlir";
  text += amaxFunction("amax_rows", 4, 8192, 256, false, "bf16");
  text += amaxFunction("amax_stacked", 2, 72, 40, true, "f16");
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels = emit(module, text);
  ASSERT_EQ(kernels.size(), 4u);
  EXPECT_EQ(kernels[0].name, "lone_grouped_quantize_0");
  EXPECT_EQ(kernels[1].name, "lone_amax_grouped_amax_0");
  EXPECT_EQ(kernels[2].name, "amax_rows_grouped_amax_0");
  EXPECT_EQ(kernels[3].name, "amax_stacked_grouped_amax_0");
  for (const EmittedKernel &kernel : kernels) {
    SCOPED_TRACE(kernel.name);
    const auto &amax = kernel.params.back();
    EXPECT_TRUE(amax.isOutput);
    EXPECT_TRUE(amax.zeroBeforeLaunch);
  }
  // Amax kernels write nothing but the amaxes.
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_FALSE(body(kernels[i]).contains("tj_pack"));
    EXPECT_EQ(body(kernels[i]).count("atomicMax(reinterpret_cast"), 1u);
  }
  EXPECT_EQ(kernels[2].grid.y, 8192 / 128);
  EXPECT_EQ(kernels[2].params.size(), 3u);
  EXPECT_EQ(kernels[2].params[1].elementType, "int");
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

TEST_F(GroupedEmit, BiasGradientsEmitAndCompile) {
  std::string text;
  // Many groups: one split, sums stored directly.
  text += biasGradFunction("wide", 8, 1024, 512, "bf16", "bf16");
  // One group of a tall matrix: splits meeting in the scratch.
  text += biasGradFunction("tall", 1, 8192, 256, "bf16", "f32");
  // f32 with an odd width, f16 output.
  text += biasGradFunction("odd", 3, 300, 45, "f32", "f16");
  // In a region, as te-fuse leaves it.
  text += R"mlir(
func.func @fused(%dy: tensor<512x128xf16>, %m: tensor<2xi32>) -> tensor<2x128xf16> {
  %r = te.fused "grouped_bias_grad"(%dy, %m) : (tensor<512x128xf16>, tensor<2xi32>) -> tensor<2x128xf16> {
  ^bb0(%g: tensor<512x128xf16>, %n: tensor<2xi32>):
    %db = te.grouped_bias_grad %g, %n : (tensor<512x128xf16>, tensor<2xi32>) -> tensor<2x128xf16>
    te.yield %db : tensor<2x128xf16>
  }
  return %r : tensor<2x128xf16>
}
)mlir";
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels = emit(module, text);
  ASSERT_EQ(kernels.size(), 4u);
  // wide: 8 strips of 64 columns x 8 groups = 64 blocks, few rows a group:
  // 1024 / (8 * 128) = 1 split.
  EXPECT_EQ(kernels[0].name, "wide_grouped_bias_grad_0");
  EXPECT_EQ(kernels[0].grid.x, 8 * 8);
  EXPECT_EQ(kernels[0].grid.y, 1);
  EXPECT_EQ(kernels[0].scratchBytes, 0);
  // tall: 4 strips, 1 group: about 528 / 4 = 132 splits (of 64 tiles of
  // rows at most: 64).
  EXPECT_EQ(kernels[1].grid.x, 4);
  EXPECT_EQ(kernels[1].grid.y, 64);
  int64_t sums = 1 * 64 * 256 * 4;
  EXPECT_EQ(kernels[1].scratchBytes, sums + 4 * 4);
  EXPECT_EQ(kernels[1].scratchZeroOffset, sums);
  EXPECT_EQ(kernels[1].scratchZeroBytes, 4 * 4);
  EXPECT_TRUE(body(kernels[1]).contains("tj_last_block"));
  // odd: vectors of one f32, 8-column strips.
  EXPECT_EQ(kernels[2].grid.x, 3 * 6);
  EXPECT_EQ(kernels[3].name, "fused_grouped_bias_grad_0");
  for (const EmittedKernel &kernel : kernels) {
    SCOPED_TRACE(kernel.name);
    ASSERT_EQ(kernel.params.size(), 3u);
    EXPECT_EQ(kernel.params[1].elementType, "int");
    EXPECT_TRUE(kernel.params[2].isOutput);
    EXPECT_FALSE(kernel.params[2].zeroBeforeLaunch);
  }
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

TEST_F(GroupedEmit, ComputeScaleTakesOneSlotAGroup) {
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels = emit(module, R"mlir(
func.func @scales(%a: tensor<300xf32>) -> (tensor<300xf32>, tensor<300xf32>) {
  %s, %si = te.compute_scale %a {fp8_type = f8E4M3FN, power_2_scale} : tensor<300xf32> -> tensor<300xf32>, tensor<300xf32>
  return %s, %si : tensor<300xf32>, tensor<300xf32>
}
)mlir");
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].grid.x, 2);
  EXPECT_TRUE(body(kernels[0]).contains("kSlots = 300"));
  expectCompiles(kernels, "sm_90a");
}

TEST_F(GroupedEmit, GroupedGemmsLaunchNoKernel) {
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels = emit(module, R"mlir(
func.func @gemm(%x: tensor<64x32xbf16>, %w: tensor<4x48x32xbf16>, %m: tensor<4xi32>) -> tensor<64x48xbf16> {
  %y = te.grouped_matmul %x, %w, %m {transpose_b} : (tensor<64x32xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>) -> tensor<64x48xbf16>
  return %y : tensor<64x48xbf16>
}
)mlir");
  EXPECT_TRUE(kernels.empty());
}

TEST_F(GroupedEmit, CastsOfDifferentInputsAreRefused) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
func.func @mixed(%x: tensor<64x32xbf16>, %y: tensor<64x32xbf16>, %s: tensor<2xf32>, %m: tensor<2xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<32x64xf8E4M3FN>) {
  %r:2 = te.fused "grouped_quantize"(%x, %y, %s, %m) : (tensor<64x32xbf16>, tensor<64x32xbf16>, tensor<2xf32>, tensor<2xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<32x64xf8E4M3FN>) {
  ^bb0(%a: tensor<64x32xbf16>, %b: tensor<64x32xbf16>, %t: tensor<2xf32>, %n: tensor<2xi32>):
    %q0, %a0 = te.grouped_quantize %a, %t, %n : (tensor<64x32xbf16>, tensor<2xf32>, tensor<2xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<2xf32>)
    %q1, %a1 = te.grouped_quantize %b, %t, %n {transpose} : (tensor<64x32xbf16>, tensor<2xf32>, tensor<2xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<2xf32>)
    te.yield %q0, %q1 : tensor<64x32xf8E4M3FN>, tensor<32x64xf8E4M3FN>
  }
  return %r#0, %r#1 : tensor<64x32xf8E4M3FN>, tensor<32x64xf8E4M3FN>
}
)mlir");
  ASSERT_TRUE(module);
  auto kernels = tejit::codegen::emitKernels(*module);
  ASSERT_FALSE(bool(kernels));
  std::string message = llvm::toString(kernels.takeError());
  EXPECT_NE(message.find("kind 'grouped_quantize'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("different inputs"), std::string::npos) << message;
}

//===----------------------------------------------------------------------===//
// Float8BlockScaling: te.grouped_block_quantize
//===----------------------------------------------------------------------===//

/// te.grouped_block_quantize casts of one input: x [rows, cols] in `groups`
/// token segments (block_dim 1), or stacked [groups, rows, cols] when
/// `stacked`.
struct BlockCastCase {
  int64_t groups, rows, cols;
  bool stacked;
  const char *input, *fp8;
  int64_t blockDim;
  bool rowwise, transposed, power2;
};

std::vector<int64_t> blockInputShape(const BlockCastCase &c) {
  if (c.stacked)
    return {c.groups, c.rows, c.cols};
  return {c.rows, c.cols};
}

/// The FP8 output's shape and scale_inv's (GroupedBlockScaleLayout.h).
std::vector<int64_t> blockOutputShape(const BlockCastCase &c, bool transpose) {
  std::vector<int64_t> shape = blockInputShape(c);
  if (transpose)
    std::swap(shape[shape.size() - 2], shape.back());
  return shape;
}
std::vector<int64_t> blockScaleShape(const BlockCastCase &c, bool transpose) {
  namespace layout = tejit::groupedblockscale;
  if (c.stacked) {
    auto shape =
        transpose ? layout::stackedShape(c.groups, c.cols, c.rows, c.blockDim)
                  : layout::stackedShape(c.groups, c.rows, c.cols, c.blockDim);
    return {shape.begin(), shape.end()};
  }
  auto shape = transpose
                   ? layout::transposedSegmentsShape(c.cols, c.rows, c.groups)
                   : layout::segmentsShape(c.rows, c.cols);
  return {shape.begin(), shape.end()};
}

/// One te.grouped_block_quantize of region values `x` (and `m`).
std::string blockQuantizeOp(const BlockCastCase &c, bool transpose,
                            llvm::StringRef results) {
  std::string in = tensor(blockInputShape(c), c.input);
  std::string attrs = llvm::formatv("block_dim = {0} : i64", c.blockDim);
  if (transpose)
    attrs += ", transpose";
  if (c.power2)
    attrs += ", power_2_scale";
  return llvm::formatv(
             "{0} = te.grouped_block_quantize {1} {{{2}} : ({3}) -> ({4}, {5})",
             results, c.stacked ? "%x" : "%x, %m", attrs,
             c.stacked ? in : in + ", " + tensor({c.groups}, "i32"),
             tensor(blockOutputShape(c, transpose), c.fp8),
             tensor(blockScaleShape(c, transpose), "f32"))
      .str();
}

/// A function `name` holding the case's casts in one te.fused
/// "grouped_block_quantize" region (te-fuse's form), its results each
/// cast's output and scale_inv.
std::string blockCastFunction(llvm::StringRef name, const BlockCastCase &c) {
  std::string in = tensor(blockInputShape(c), c.input);
  std::string m = tensor({c.groups}, "i32");
  std::string args = "%a: " + in, inputs = "%a", inputTypes = in,
              blockArgs = "%x: " + in;
  if (!c.stacked) {
    args += ", %ma: " + m + " {te.name = \"m_splits\"}";
    inputs += ", %ma";
    inputTypes += ", " + m;
    blockArgs += ", %m: " + m;
  }
  std::string body, yields, resultTypes;
  auto add = [&](bool transpose, llvm::StringRef suffix) {
    body +=
        "    " +
        blockQuantizeOp(c, transpose, ("%q" + suffix + ", %s" + suffix).str()) +
        "\n";
    yields += std::string(yields.empty() ? "" : ", ") + "%q" + suffix.str() +
              ", %s" + suffix.str();
    resultTypes += std::string(resultTypes.empty() ? "" : ", ") +
                   tensor(blockOutputShape(c, transpose), c.fp8) + ", " +
                   tensor(blockScaleShape(c, transpose), "f32");
  };
  if (c.rowwise)
    add(false, "r");
  if (c.transposed)
    add(true, "t");
  size_t results = (c.rowwise + c.transposed) * 2;
  std::string returns;
  for (size_t i = 0; i < results; ++i)
    returns += std::string(i ? ", " : "") + "%r#" + std::to_string(i);
  return llvm::formatv(R"mlir(
func.func @{0}({1}) -> ({2}) {{
  %r:{3} = te.fused "grouped_block_quantize"({4}) : ({5}) -> ({2}) {{
  ^bb0({6}):
{7}    te.yield {8} : {2}
  }
  return {9} : {2}
}
)mlir",
                       name, args, resultTypes, results, inputs, inputTypes,
                       blockArgs, body, yields, returns)
      .str();
}

const BlockCastCase kBlockCasts[] = {
    // The forward's x and x^T: whole tiles, 16-byte vectors, x^T in words.
    {4, 512, 384, false, "bf16", "f8E4M3FN", 1, true, true, true},
    // dy (HYBRID: E5M2), K % 128 != 0, T % 8 != 0: x^T byte by byte.
    {3, 300, 200, false, "bf16", "f8E5M2", 1, true, true, false},
    // The transposed copy alone, f16.
    {5, 1024, 256, false, "f16", "f8E4M3FN", 1, false, true, false},
    // f32, K odd: one element a vector, bytes.
    {2, 160, 37, false, "f32", "f8E4M3FN", 1, true, true, true},
    // The rowwise copy alone, many groups.
    {8, 2048, 512, false, "bf16", "f8E5M2", 1, true, false, true},
    // Stacked weights W [G, N, K] and W^T, 128 x 128 tiles.
    {4, 256, 384, true, "bf16", "f8E4M3FN", 2, true, true, true},
    // Stacked, 1-D blocks, partial tiles.
    {3, 200, 136, true, "bf16", "f8E4M3FN", 1, true, true, false},
    // Stacked, 2-D, W^T alone, R % 8 != 0 (bytes), E5M2.
    {2, 100, 60, true, "f16", "f8E5M2", 2, false, true, false},
    // Stacked f32, K odd, rowwise.
    {5, 48, 37, true, "f32", "f8E4M3FN", 1, true, false, true},
};

TEST_F(GroupedEmit, BlockCastsEmitAndCompile) {
  std::string text;
  for (auto [index, c] : llvm::enumerate(kBlockCasts))
    text += blockCastFunction("block" + std::to_string(index), c);
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels = emit(module, text);
  ASSERT_EQ(kernels.size(), std::size(kBlockCasts));
  for (auto [index, c] : llvm::enumerate(kBlockCasts)) {
    const EmittedKernel &kernel = kernels[index];
    SCOPED_TRACE(kernel.name);
    EXPECT_EQ(kernel.name,
              "block" + std::to_string(index) + "_grouped_block_quantize_0");
    // 128-column tiles x (chunks of up to 128 tokens, at most ceil(T/128) +
    // G of them; or 128-row tiles of each stacked matrix).
    EXPECT_EQ(kernel.grid.x, (c.cols + 127) / 128);
    if (c.stacked) {
      EXPECT_EQ(kernel.grid.y, (c.rows + 127) / 128);
      EXPECT_EQ(kernel.grid.z, c.groups);
    } else {
      EXPECT_EQ(kernel.grid.y, (c.rows + 127) / 128 + c.groups);
      EXPECT_EQ(kernel.grid.z, 1);
    }
    EXPECT_EQ(kernel.block.x, 256);
    // Every element is written by the kernel: no scratch, nothing zeroed
    // by the launcher.
    EXPECT_EQ(kernel.scratchBytes, 0);
    size_t casts = c.rowwise + c.transposed;
    ASSERT_EQ(kernel.params.size(), (c.stacked ? 1u : 2u) + 2 * casts);
    for (const auto &param : kernel.params)
      EXPECT_FALSE(param.zeroBeforeLaunch) << param.name;
    const auto *m = paramNamed(kernel, "m_splits");
    EXPECT_EQ(m != nullptr, !c.stacked);
    if (m) {
      EXPECT_EQ(m->elementType, "int");
    }
    llvm::StringRef source = body(kernel);
    // One read of the input for every cast.
    EXPECT_EQ(source.count("x_in[p][q] = *reinterpret_cast"), 1u);
    // Segments: chunks found from m_splits on the device; stacked: a
    // matrix a grid layer.
    EXPECT_EQ(source.contains("tj_chunk_ends(m_splits"), !c.stacked);
    EXPECT_EQ(source.contains("blockIdx.z"), c.stacked);
    // Each cast's scales with its format's largest value and rounding.
    std::string max =
        llvm::StringRef(c.fp8) == "f8E4M3FN" ? "448.f" : "57344.f";
    EXPECT_EQ(source.count(max + (c.power2 ? ", true)" : ", false)")), casts);
    // x^T in 8-byte runs where the tokens (rows) are whole groups of 8 and
    // the columns whole words.
    int64_t vec = llvm::StringRef(c.input) == "f32" ? 4 : 8;
    while (c.cols % vec != 0)
      vec /= 2;
    bool wide = vec % 4 == 0 && c.rows % 8 == 0;
    EXPECT_EQ(source.contains("tj_transpose_8x4(lo"), c.transposed && wide);
    EXPECT_EQ(source.contains("[r][c];"), c.transposed && !wide);
  }
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}

TEST_F(GroupedEmit, StandaloneBlockCastsEmitAndCompile) {
  // Casts outside te.fused (as before te-fuse): one kernel each.
  OwningOpRef<ModuleOp> module;
  std::vector<EmittedKernel> kernels = emit(module, R"mlir(
func.func @lone(%x: tensor<200x96xbf16>, %m: tensor<3xi32>) -> (tensor<96x200xf8E4M3FN>, tensor<5x96xf32>) {
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, transpose} : (tensor<200x96xbf16>, tensor<3xi32>) -> (tensor<96x200xf8E4M3FN>, tensor<5x96xf32>)
  return %q, %s : tensor<96x200xf8E4M3FN>, tensor<5x96xf32>
}
func.func @lone_stacked(%w: tensor<3x64x160xbf16>) -> (tensor<3x64x160xf8E4M3FN>, tensor<3x1x4xf32>) {
  %q, %s = te.grouped_block_quantize %w {block_dim = 2 : i64, power_2_scale} : (tensor<3x64x160xbf16>) -> (tensor<3x64x160xf8E4M3FN>, tensor<3x1x4xf32>)
  return %q, %s : tensor<3x64x160xf8E4M3FN>, tensor<3x1x4xf32>
}
)mlir");
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].name, "lone_grouped_block_quantize_0");
  EXPECT_EQ(kernels[0].grid.y, 2 + 3);
  EXPECT_EQ(kernels[1].name, "lone_stacked_grouped_block_quantize_0");
  EXPECT_EQ(kernels[1].grid.z, 3);
  expectCompiles(kernels, "sm_90a");
}

TEST_F(GroupedEmit, BlockCastsOfDifferentSegmentsAreRefused) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
func.func @mixed(%x: tensor<64x32xbf16>, %m: tensor<2xi32>, %n: tensor<2xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<1x64xf32>, tensor<32x64xf8E4M3FN>, tensor<3x32xf32>) {
  %r:4 = te.fused "grouped_block_quantize"(%x, %m, %n) : (tensor<64x32xbf16>, tensor<2xi32>, tensor<2xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<1x64xf32>, tensor<32x64xf8E4M3FN>, tensor<3x32xf32>) {
  ^bb0(%a: tensor<64x32xbf16>, %b: tensor<2xi32>, %c: tensor<2xi32>):
    %q0, %s0 = te.grouped_block_quantize %a, %b {block_dim = 1 : i64} : (tensor<64x32xbf16>, tensor<2xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<1x64xf32>)
    %q1, %s1 = te.grouped_block_quantize %a, %c {block_dim = 1 : i64, transpose} : (tensor<64x32xbf16>, tensor<2xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<3x32xf32>)
    te.yield %q0, %s0, %q1, %s1 : tensor<64x32xf8E4M3FN>, tensor<1x64xf32>, tensor<32x64xf8E4M3FN>, tensor<3x32xf32>
  }
  return %r#0, %r#1, %r#2, %r#3 : tensor<64x32xf8E4M3FN>, tensor<1x64xf32>, tensor<32x64xf8E4M3FN>, tensor<3x32xf32>
}
)mlir");
  ASSERT_TRUE(module);
  auto kernels = tejit::codegen::emitKernels(*module);
  ASSERT_FALSE(bool(kernels));
  std::string message = llvm::toString(kernels.takeError());
  EXPECT_NE(message.find("kind 'grouped_block_quantize'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("different inputs or segments"), std::string::npos)
      << message;
}

} // namespace
