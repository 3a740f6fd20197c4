//===- BlockQuantizeEmitTest.cpp - te.block_quantize kernels, compiled ----===//
//
// The CUDA emitter on te.block_quantize (Float8BlockScaling's cast,
// docs/block-scaling.md) over shapes and types that take each of its paths:
// whole and partial 128 x 128 tiles; 16-byte, 8-, 4-, 2- and 1-element
// vectors; row, column and tile amaxes; transposed copies stored as words
// and byte by byte; E4M3 and E5M2; a group of several casts of one input.
// Every kernel is compiled with the toolkit's NVRTC for sm_90a and sm_89,
// which needs no GPU; what the kernels compute is for the GPU tests.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "codegen/NvrtcCompiler.h"
#include "dialects/BlockScaleLayout.h"
#include "dialects/TEDialect.h"
#include "tests/codegen-emit/ExpectCompiles.h"
#include "tests/codegen-emit/TeIrTest.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

using namespace mlir;
using tejit::testing::expectCompiles;
namespace blockscale = tejit::blockscale;

namespace {

/// One te.block_quantize: input [rows, cols] of `input`, cast to `fp8`.
struct CastCase {
  int64_t rows, cols;
  const char *input, *fp8;
  int64_t blockDim;
  bool transpose, power2;
};

/// The types of a cast's results, "tensor<...>, tensor<...>".
std::string resultTypes(const CastCase &c) {
  int64_t rows = c.transpose ? c.cols : c.rows;
  int64_t cols = c.transpose ? c.rows : c.cols;
  auto shape = blockscale::scaleShape(rows, cols, c.blockDim);
  return llvm::formatv("tensor<{0}x{1}x{2}>, tensor<{3}x{4}xf32>", rows, cols,
                       c.fp8, shape[0], shape[1])
      .str();
}

std::string castOp(const CastCase &c, llvm::StringRef results,
                   llvm::StringRef input) {
  std::string attrs = llvm::formatv("block_dim = {0} : i64", c.blockDim);
  if (c.transpose)
    attrs += ", transpose";
  if (c.power2)
    attrs += ", power_2_scale";
  return llvm::formatv("{0} = te.block_quantize {1} {{{2}} : "
                       "tensor<{3}x{4}x{5}> -> {6}",
                       results, input, attrs, c.rows, c.cols, c.input,
                       resultTypes(c))
      .str();
}

/// A function `name` of one standalone cast.
std::string castFunction(llvm::StringRef name, const CastCase &c) {
  return llvm::formatv(R"mlir(
func.func @{0}(%x: tensor<{1}x{2}x{3}> {{te.name = "x"}) -> ({4}) {{
  {5}
  return %q, %s : {4}
}
)mlir",
                       name, c.rows, c.cols, c.input, resultTypes(c),
                       castOp(c, "%q, %s", "%x"))
      .str();
}

const CastCase kCases[] = {
    // Whole tiles, 16-byte bf16 vectors, rowwise (the forward's x).
    {256, 512, "bf16", "f8E4M3FN", 1, false, true},
    // Partial tiles, the columnwise copy stored as words (R % 8 == 0).
    {200, 136, "bf16", "f8E5M2", 1, true, true},
    // 2-D, transposed byte by byte (R % 8 != 0), 2-element vectors.
    {130, 262, "f16", "f8E4M3FN", 2, true, true},
    // One element a vector, no power-of-two rounding.
    {257, 131, "f32", "f8E4M3FN", 1, false, false},
    // f32 in two 16-byte pieces per thread, 2-D rowwise.
    {72, 40, "f32", "f8E5M2", 2, false, true},
    // 4-element bf16 vectors, transposed as words.
    {384, 260, "bf16", "f8E4M3FN", 2, true, false},
};

/// A te.fused group of three casts of one input (rowwise 1-D, columnwise
/// 1-D, columnwise 2-D): one kernel, one read of the input.
std::string fusedFunction() {
  CastCase rowwise{200, 136, "bf16", "f8E4M3FN", 1, false, true};
  CastCase columnwise{200, 136, "bf16", "f8E4M3FN", 1, true, true};
  CastCase tiles{200, 136, "bf16", "f8E5M2", 2, true, false};
  std::string types = resultTypes(rowwise) + ", " + resultTypes(columnwise) +
                      ", " + resultTypes(tiles);
  return llvm::formatv(R"mlir(
func.func @fused(%x: tensor<200x136xbf16> {{te.name = "x"}) -> ({0}) {{
  %r:6 = te.fused "block_quantize"(%x) : (tensor<200x136xbf16>) -> ({0}) {{
  ^bb0(%a: tensor<200x136xbf16>):
    {1}
    {2}
    {3}
    te.yield %q0, %s0, %q1, %s1, %q2, %s2 : {0}
  }
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : {0}
}
)mlir",
                       types, castOp(rowwise, "%q0, %s0", "%a"),
                       castOp(columnwise, "%q1, %s1", "%a"),
                       castOp(tiles, "%q2, %s2", "%a"))
      .str();
}

class BlockQuantizeEmit : public tejit::testing::TeIrTest {};

TEST_F(BlockQuantizeEmit, EveryPathEmitsAndCompiles) {
  std::string text;
  for (auto [index, c] : llvm::enumerate(kCases))
    text += castFunction("cast" + std::to_string(index), c);
  text += fusedFunction();
  OwningOpRef<ModuleOp> module = parse(text);
  ASSERT_TRUE(module);
  auto kernels = tejit::codegen::emitKernels(*module);
  ASSERT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
  ASSERT_EQ(kernels->size(), std::size(kCases) + 1);

  for (auto [index, c] : llvm::enumerate(kCases)) {
    const tejit::codegen::EmittedKernel &kernel = (*kernels)[index];
    SCOPED_TRACE(kernel.name);
    EXPECT_EQ(kernel.name,
              "cast" + std::to_string(index) + "_block_quantize_0");
    // A block of 256 threads per 128 x 128 tile of the input.
    EXPECT_EQ(kernel.grid.x, blockscale::ceilDiv(c.cols, 128));
    EXPECT_EQ(kernel.grid.y, blockscale::ceilDiv(c.rows, 128));
    EXPECT_EQ(kernel.grid.z, 1);
    EXPECT_EQ(kernel.block.x, 256);
    EXPECT_EQ(kernel.scratchBytes, 0);
    // The input, then the FP8 matrix and its scale_inv.
    ASSERT_EQ(kernel.params.size(), 3u);
    EXPECT_FALSE(kernel.params[0].isOutput);
    EXPECT_TRUE(kernel.params[1].isOutput);
    EXPECT_TRUE(kernel.params[2].isOutput);
    EXPECT_EQ(kernel.params[2].elementType, "float");
    EXPECT_FALSE(kernel.params[2].zeroBeforeLaunch);
    const std::string &source = kernel.source;
    // te.compute_scale's rule with the output type's largest value.
    std::string fp8Max =
        llvm::StringRef(c.fp8) == "f8E5M2" ? "57344.f" : "448.f";
    EXPECT_NE(
        source.find(", " + fp8Max + ", " + (c.power2 ? "true" : "false") + ")"),
        std::string::npos);
    // Transposed copies: words through tj_transpose_8x4 where S's rows are
    // whole 8-byte groups and the input's columns whole words.
    bool wide = c.rows % 8 == 0 && c.cols % 4 == 0;
    EXPECT_EQ(source.find("tj_transpose_8x4(lo") != std::string::npos,
              c.transpose && wide);
    EXPECT_EQ(source.find("].bits = tile") != std::string::npos,
              c.transpose && !wide);
    // The padding of scale_inv rows is written where there is some.
    int64_t sRows = c.transpose ? c.cols : c.rows;
    int64_t sCols = c.transpose ? c.rows : c.cols;
    bool padded = c.blockDim == 1 ? sRows % 4 != 0
                                  : blockscale::ceilDiv(sCols, 128) % 4 != 0;
    EXPECT_EQ(source.find("// padding") != std::string::npos, padded);
  }

  const tejit::codegen::EmittedKernel &fused = kernels->back();
  EXPECT_EQ(fused.name, "fused_block_quantize_0");
  EXPECT_EQ(fused.grid.x, 2);
  EXPECT_EQ(fused.grid.y, 2);
  ASSERT_EQ(fused.params.size(), 7u);
  // One load of the input for the three casts.
  EXPECT_EQ(fused.source.find("x_in[p][q] = *reinterpret_cast"),
            fused.source.rfind("x_in[p][q] = *reinterpret_cast"));

  expectCompiles(*kernels, "sm_90a");
  expectCompiles(*kernels, "sm_89");
}

TEST_F(BlockQuantizeEmit, OtherOpsInTheGroupAreRefused) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
func.func @mixed(%x: tensor<128x128xbf16>) -> (tensor<128x128xf8E4M3FN>, tensor<1x128xf32>, tensor<128x128xbf16>) {
  %r:3 = te.fused "block_quantize"(%x) : (tensor<128x128xbf16>) -> (tensor<128x128xf8E4M3FN>, tensor<1x128xf32>, tensor<128x128xbf16>) {
  ^bb0(%a: tensor<128x128xbf16>):
    %q, %s = te.block_quantize %a {block_dim = 1 : i64} : tensor<128x128xbf16> -> tensor<128x128xf8E4M3FN>, tensor<1x128xf32>
    %g = te.act <gelu> %a : tensor<128x128xbf16> -> tensor<128x128xbf16>
    te.yield %q, %s, %g : tensor<128x128xf8E4M3FN>, tensor<1x128xf32>, tensor<128x128xbf16>
  }
  return %r#0, %r#1, %r#2 : tensor<128x128xf8E4M3FN>, tensor<1x128xf32>, tensor<128x128xbf16>
}
)mlir");
  ASSERT_TRUE(module);
  auto kernels = tejit::codegen::emitKernels(*module);
  ASSERT_FALSE(bool(kernels));
  std::string message = llvm::toString(kernels.takeError());
  EXPECT_NE(message.find("te.fused"), std::string::npos) << message;
  EXPECT_NE(message.find("ops other than te.block_quantize"), std::string::npos)
      << message;
}

} // namespace
