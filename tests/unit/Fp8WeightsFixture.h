//===- Fp8WeightsFixture.h - one spec with and without fp8_weights -*- C++
//-*-===//
//
// What the fp8_weights tests (Fp8WeightsTest, GroupedFp8WeightsTest) share:
// a spec compiled twice, with and without `fp8_weights: true` on its one
// layer, and the comparison of a training step of each.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_UNIT_FP8WEIGHTSFIXTURE_H
#define TEJIT_TESTS_UNIT_FP8WEIGHTSFIXTURE_H

#include "Fp8TrainingStep.h"

#include <map>
#include <optional>

namespace tejit::testing {

/// A parameterized test over `Case`s, each with `name` and `spec`: the spec
/// up to its one layer's mapping, which import() closes with or without
/// `fp8_weights: true`.
template <typename Case>
class Fp8WeightsFixture : public ::testing::TestWithParam<Case> {
protected:
  Fp8WeightsFixture() {
    context.loadDialect<mlir::te::TEDialect, mlir::func::FuncDialect>();
  }

  mlir::OwningOpRef<mlir::ModuleOp> import(bool fp8Weights) {
    std::string text = std::string(this->GetParam().spec) +
                       (fp8Weights ? ", fp8_weights: true}\n" : "}\n");
    return importSpecText(context, text,
                          std::string(this->GetParam().name) + ".yaml");
  }

  mlir::OwningOpRef<mlir::ModuleOp> compile(bool fp8Weights, bool training,
                                            Stage stage = Stage::Planned) {
    mlir::OwningOpRef<mlir::ModuleOp> module = import(fp8Weights);
    EXPECT_TRUE(module && runPipeline(*module, {stage, training}));
    return module;
  }

  /// The spec's layer function, random arguments and output gradients for
  /// it, and its training programs without and with fp8_weights.
  struct Programs {
    mlir::OwningOpRef<mlir::ModuleOp> layers, plain, fp8;
    mlir::func::FuncOp layerFunction, forward;
    std::vector<Tensor> plainArgs, grads;
  };

  /// Fills `programs`; false (after reporting) when a spec did not compile.
  bool compileBoth(Programs &programs) {
    programs.layers = import(false);
    programs.plain = compile(false, true);
    programs.fp8 = compile(true, true);
    if (!programs.layers || !programs.plain || !programs.fp8) {
      ADD_FAILURE() << "the spec did not compile";
      return false;
    }
    programs.layerFunction = firstFunction(*programs.layers);
    programs.forward = firstFunction(*programs.fp8);
    programs.plainArgs = randomLayerArgs(programs.layerFunction, rng);
    programs.grads = randomResultGrads(programs.layerFunction, rng);
    return true;
  }

  mlir::MLIRContext context;
  std::mt19937_64 rng{std::random_device{}()};
};

/// Expects `actual` (a TrainingStep's results) to hold every result of
/// `expected`: bit for bit, or, given `bound`, within that relative L2
/// error. TEJIT_PRINT_ERRORS prints each error.
inline void expectSameResults(const std::map<std::string, Tensor> &expected,
                              std::map<std::string, Tensor> &actual,
                              std::optional<double> bound = std::nullopt) {
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(actual.size(), expected.size());
  for (auto &[name, tensor] : expected) {
    ASSERT_TRUE(actual.count(name)) << name;
    if (getenv("TEJIT_PRINT_ERRORS"))
      llvm::errs() << name << " " << normRelativeError(actual[name], tensor)
                   << "\n";
    if (bound) {
      EXPECT_LT(normRelativeError(actual[name], tensor), *bound) << name;
      continue;
    }
    EXPECT_EQ(actual[name].data, tensor.data) << name;
  }
}

} // namespace tejit::testing

#endif // TEJIT_TESTS_UNIT_FP8WEIGHTSFIXTURE_H
