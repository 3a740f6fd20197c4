//===- RouterEmitTest.cpp - the MoE router's kernels ----------------------===//
//
// The programs tejit.pytorch.router compiles (Inputs/router-kernels.mlir,
// written by python/tejit/pytorch/_router_ir.py; docs/router.md) through
// the inference pipeline to kernels (codegen/RouterKernels.cpp): a kernel
// an op, a warp a token (several tokens a block) for the row ops, and
// every kernel compiled with NVRTC for sm_90a and sm_89 (no GPU needed).
//
//===----------------------------------------------------------------------===//
#include "codegen/KernelEmitter.h"
#include "compiler/passes/Pipeline.h"
#include "tests/codegen-emit/ExpectCompiles.h"
#include "tests/codegen-emit/TeIrTest.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

using namespace mlir;
using tejit::codegen::EmittedKernel;
using tejit::testing::expectCompiles;

namespace {

class RouterEmit : public tejit::testing::TeIrTest {
protected:
  /// The kernels of every function of the inputs.
  std::vector<EmittedKernel> emitAll() {
    auto buffer = llvm::MemoryBuffer::getFile(TEJIT_ROUTER_INPUTS);
    EXPECT_TRUE(bool(buffer)) << TEJIT_ROUTER_INPUTS;
    if (!buffer)
      return {};
    OwningOpRef<ModuleOp> module = parse((*buffer)->getBuffer());
    EXPECT_TRUE(module);
    if (!module)
      return {};
    PassManager pm(&context);
    tejit::buildPipeline(pm, {tejit::Stage::Planned, /*training=*/false, ""});
    EXPECT_TRUE(succeeded(pm.run(*module)));
    auto kernels = tejit::codegen::emitKernels(*module);
    EXPECT_TRUE(bool(kernels)) << llvm::toString(kernels.takeError());
    return kernels ? std::move(*kernels) : std::vector<EmittedKernel>{};
  }
};

const EmittedKernel *named(const std::vector<EmittedKernel> &kernels,
                           StringRef prefix) {
  for (const EmittedKernel &kernel : kernels)
    if (StringRef(kernel.name).starts_with(prefix))
      return &kernel;
  return nullptr;
}

} // namespace

TEST_F(RouterEmit, AKernelAnOpAWarpAToken) {
  std::vector<EmittedKernel> kernels = emitAll();
  // 6 top-k configurations and 2 aux-score functions (forward and
  // backward each), 4 aux-loss types (loss and gradient).
  ASSERT_EQ(kernels.size(), 24u);
  const EmittedKernel *deepseek = named(kernels, "deepseek_fwd");
  ASSERT_NE(deepseek, nullptr);
  EXPECT_EQ(deepseek->grid.x, 8); // 64 tokens, 8 warps a block
  EXPECT_EQ(deepseek->block.x, 256);
  StringRef source = deepseek->source;
  EXPECT_TRUE(source.contains("kGroups = 8, kGroupTopk = 4, kGroupSize = 32, "
                              "kPerGroup = 2"));
  EXPECT_TRUE(source.contains("2.5f * rt_p"));
  const EmittedKernel *wide = named(kernels, "wide_fwd");
  ASSERT_NE(wide, nullptr);
  EXPECT_EQ(wide->block.x, 160); // 1000 experts: 5 warps fit the budget
  const EmittedKernel *loss = named(kernels, "aux_loss_bf16_i64_router");
  ASSERT_NE(loss, nullptr);
  // 300 rows over up to 528 blocks: a row a block, whose sums the last
  // block adds in block order (a fixed order: deterministic).
  EXPECT_EQ(loss->grid.x, 1);
  EXPECT_EQ(loss->grid.y, 300);
  EXPECT_TRUE(StringRef(loss->source).contains("tj_last_block"));
  EXPECT_TRUE(StringRef(loss->source)
                  .contains("for (int rt_s = threadIdx.x; rt_s < kSplits;"));
}

TEST_F(RouterEmit, KernelsCompile) {
  std::vector<EmittedKernel> kernels = emitAll();
  ASSERT_FALSE(kernels.empty());
  expectCompiles(kernels, "sm_90a");
  expectCompiles(kernels, "sm_89");
}
