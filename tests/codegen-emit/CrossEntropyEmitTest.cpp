//===- CrossEntropyEmitTest.cpp - parallel_cross_entropy's kernels --------===//
//
// The programs tejit.pytorch.cross_entropy compiles (docs/cross-entropy.md)
// through the inference pipeline to kernels (codegen/LossKernels.cpp):
// bf16, f16 and f32 logits, i32 and i64 targets, vocab rows from 7 columns
// (1-element vectors) to 256k (many passes a thread), one rank and a vocab
// split over two (a tp_all_gather between the stats and the loss kernel),
// with and without the mean and label smoothing. Every kernel is compiled
// with NVRTC for sm_90a and sm_89 (no GPU needed); the backward kernel's
// pointers are not __restrict__, since it writes over the logits it reads.
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "compiler/passes/Pipeline.h"
#include "tests/codegen-emit/ExpectCompiles.h"
#include "tests/codegen-emit/TeIrTest.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

using namespace mlir;
using tejit::codegen::EmittedKernel;
using tejit::testing::expectCompiles;

namespace {

struct Case {
  int64_t rows, local;
  const char *logits, *target;
  int64_t ranks;
  bool reduce;
  double smoothing;
};

std::string nameOf(const Case &c) {
  return llvm::formatv("{0}x{1}_{2}_{3}_tp{4}{5}{6}", c.rows, c.local, c.logits,
                       c.target, c.ranks, c.reduce ? "_mean" : "",
                       c.smoothing > 0 ? "_smoothed" : "")
      .str();
}

[[maybe_unused]] void PrintTo(const Case &c, std::ostream *os) {
  *os << nameOf(c);
}

std::string tensor(std::initializer_list<int64_t> shape, StringRef element) {
  std::string text = "tensor<";
  for (int64_t dim : shape)
    text += std::to_string(dim) + "x";
  return text + element.str() + ">";
}

/// The forward and backward functions of rank `ranks - 1`, as
/// tejit.pytorch.cross_entropy writes them.
std::string program(const Case &c) {
  int64_t vocab = c.local * c.ranks, start = c.local * (c.ranks - 1);
  std::string x = tensor({c.rows, c.local}, c.logits);
  std::string y = tensor({c.rows}, c.target), row = tensor({c.rows}, "f32");
  std::string one = tensor({1}, "f32"), stats = tensor({c.rows, 4}, "f32");
  std::string all = tensor({c.ranks * c.rows, 4}, "f32");
  std::string smoothing = llvm::formatv("{0:e}", c.smoothing).str();
  std::string gather =
      c.ranks > 1
          ? llvm::formatv("  %all = te.tp_all_gather %s {{ranks = {0}} : {1} "
                          "-> {2}\n",
                          c.ranks, stats, all)
                .str()
          : "";
  std::string mean =
      c.reduce ? llvm::formatv("  %mean, %count = te.cross_entropy_mean %loss, "
                               "%y : ({0}, {1}) -> ({2}, {2})\n",
                               row, y, one)
                     .str()
               : "";
  std::string results =
      c.reduce ? one + ", " + one + ", " + row : row + ", " + row;
  std::string returned = c.reduce ? "%mean, %count, %lse" : "%loss, %lse";
  std::string g = c.reduce ? one : row;
  return llvm::formatv(R"(
func.func @fwd(%x: {0}, %y: {1}) -> ({2}) {{
  %s = te.cross_entropy_stats %x, %y {{vocab_start = {3}} : ({0}, {1}) -> {4}
{5}  %loss, %lse = te.cross_entropy_loss {6}, %y {{vocab_size = {7}, label_smoothing = {8}, ranks = {9}} : ({10}, {1}) -> ({11}, {11})
{12}  return {13} : {2}
}
func.func @bwd(%x: {0}, %y: {1}, %lse: {11}, %g: {14}{15}) -> {0} {{
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g{16} {{vocab_size = {7}, vocab_start = {3}, label_smoothing = {8}} : ({0}, {1}, {11}, {14}{17}) -> {0}
  return %dx : {0}
}
)",
                       x, y, results, start, stats, gather,
                       c.ranks > 1 ? "%all" : "%s", vocab, smoothing, c.ranks,
                       all, row, mean, returned, g,
                       c.reduce ? ", %c: " + one : "",
                       c.reduce ? " count(%c)" : "", c.reduce ? ", " + one : "")
      .str();
}

class CrossEntropyEmit : public tejit::testing::TeIrTest,
                         public ::testing::WithParamInterface<Case> {};

/// The kernel's own code, after the device helpers.
StringRef body(const EmittedKernel &kernel) {
  StringRef source = kernel.source;
  return source.drop_front(source.find("extern \"C\""));
}

} // namespace

TEST_P(CrossEntropyEmit, KernelsCompile) {
  const Case &c = GetParam();
  std::string text = program(c);
  OwningOpRef<ModuleOp> module = parse(text);
  ASSERT_TRUE(module);
  PassManager pm(&context);
  tejit::buildPipeline(pm, {tejit::Stage::Planned, /*training=*/false, ""});
  ASSERT_TRUE(succeeded(pm.run(*module))) << text;
  auto kernels = tejit::codegen::emitKernels(*module);
  ASSERT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
  // stats, loss, (mean,) bwd: the gather is a runtime step.
  ASSERT_EQ(kernels->size(), c.reduce ? 4u : 3u);
  const EmittedKernel &bwd = kernels->back();
  EXPECT_TRUE(StringRef(bwd.name).contains("cross_entropy_bwd"));
  EXPECT_FALSE(body(bwd).contains("__restrict__"));
  EXPECT_EQ(bwd.grid.x, c.rows);
  EXPECT_TRUE(
      body(kernels->front())
          .contains(llvm::formatv("ce_y - {0}ll", c.local * (c.ranks - 1)).str()));
  expectCompiles(*kernels, "sm_90a");
  expectCompiles(*kernels, "sm_89");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyEmit,
    ::testing::Values(Case{64, 32000, "bf16", "i64", 1, false, 0.0},
                      Case{64, 32000, "bf16", "i64", 2, true, 0.1},
                      Case{16, 262144, "bf16", "i32", 1, true, 0.0},
                      Case{16, 7, "f16", "i64", 1, false, 1.0},
                      Case{16, 100, "f32", "i32", 3, false, 0.25},
                      Case{16, 50257, "f32", "i64", 2, true, 0.0}),
    [](const ::testing::TestParamInfo<Case> &info) {
      return nameOf(info.param);
    });
