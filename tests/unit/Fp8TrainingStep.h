//===- Fp8TrainingStep.h - FP8 training steps, interpreted ------*- C++ -*-===//
//
// Runs a compiled forward/backward pair as a training step does, keeping
// the FP8 meta state (arguments named fp8_meta.*) between steps: shared by
// the FP8 pipeline test and the tensor-parallel test (whose ranks pass
// their collectives).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_UNIT_FP8TRAININGSTEP_H
#define TEJIT_TESTS_UNIT_FP8TRAININGSTEP_H

#include "PipelineTestUtils.h"

#include <map>

namespace tejit::testing {

/// Random gradients, N(0, 1), for the output-gradient arguments of
/// `backward` (neither forward arguments or results nor FP8 meta state), in
/// TrainingStep::run's order.
inline std::vector<Tensor> randomOutputGrads(mlir::func::FuncOp backward,
                                             std::mt19937_64 &rng) {
  std::vector<Tensor> grads;
  for (unsigned i = 0; i < backward.getNumArguments(); ++i)
    if (!backward.getArgAttr(i, "te.forward_arg") &&
        !backward.getArgAttr(i, "te.forward_result") &&
        !argName(backward, i).starts_with("fp8_meta."))
      grads.push_back(interp::randomTensor(
          llvm::cast<mlir::RankedTensorType>(backward.getArgumentTypes()[i]),
          rng));
  return grads;
}

/// Runs a forward/backward pair as a training step does, keeping the FP8
/// meta state (arguments named fp8_meta.*) between steps.
class TrainingStep {
public:
  /// `collectives` and `rank`: one rank's program of a tensor-parallel
  /// group.
  TrainingStep(mlir::func::FuncOp forward, mlir::func::FuncOp backward,
               interp::Collectives *collectives = nullptr, int64_t rank = 0)
      : forward(forward), backward(backward), collectives(collectives),
        rank(rank) {}

  /// The dropout streams' key (the rng_state argument).
  static constexpr uint64_t kSeed = 99, kOffset = 5;

  /// Runs forward then backward; returns the forward's user results followed
  /// by the gradients, in te.grad_of order.
  std::map<std::string, Tensor> run(const std::vector<Tensor> &layerArgs,
                                    const std::vector<Tensor> &outputGrads) {
    std::vector<Tensor> args = forwardArgs(layerArgs);
    std::vector<Tensor> results = call(forward, args);
    // A failed run (reported by call()) leaves nothing for the backward.
    if (results.size() != forward.getNumResults())
      return {};
    lastForward = results;
    update(forward, results);
    std::map<std::string, Tensor> named;
    for (unsigned i = 0; i < forward.getNumResults(); ++i)
      if (resultName(forward, i) == "output" ||
          llvm::StringRef(resultName(forward, i)).ends_with(".ln_output"))
        named[resultName(forward, i)] = results[i];
    if (!backward)
      return named;
    std::vector<Tensor> grads =
        call(backward, backwardArgs(args, results, outputGrads));
    if (grads.size() != backward.getNumResults())
      return {};
    update(backward, grads);
    for (unsigned i = 0; i < backward.getNumResults(); ++i)
      named[resultName(backward, i)] = grads[i];
    return named;
  }

  /// Sets FP8 meta state `name` (an fp8_meta.* argument) before a step;
  /// otherwise scales start at 1 and histories at 0.
  void setMeta(const std::string &name, Tensor value) {
    state[name] = std::move(value);
  }

  std::vector<Tensor> lastForward;
  /// The backward's `main_grad.<weight>` arguments (fuse_wgrad_accumulation),
  /// by name.
  std::map<std::string, Tensor> mainGrads;

private:
  static std::string resultName(mlir::func::FuncOp function, unsigned index) {
    auto name =
        function.getResultAttrOfType<mlir::StringAttr>(index, "te.name");
    return name ? name.getValue().str() : "";
  }

  std::vector<Tensor> call(mlir::func::FuncOp function,
                           const std::vector<Tensor> &args) {
    interp::Options options;
    options.collectives = collectives;
    options.rank = rank;
    mlir::FailureOr<std::vector<Tensor>> results =
        interp::run(function, args, options);
    EXPECT_TRUE(mlir::succeeded(results)) << function.getName().str();
    return mlir::succeeded(results) ? *results : std::vector<Tensor>();
  }

  /// Meta state: scales start at 1 and histories at 0, as in TE.
  Tensor &meta(mlir::func::FuncOp function, unsigned index) {
    std::string name = argName(function, index).str();
    auto it = state.find(name);
    if (it != state.end())
      return it->second;
    auto type =
        llvm::cast<mlir::RankedTensorType>(function.getArgumentTypes()[index]);
    Tensor init = Tensor::zeros(type.getShape());
    if (!llvm::StringRef(name).ends_with("amax_history"))
      std::fill(init.data.begin(), init.data.end(), 1.0);
    return state[name] = init;
  }

  void update(mlir::func::FuncOp function, const std::vector<Tensor> &results) {
    for (unsigned i = 0; i < results.size() && i < function.getNumResults();
         ++i)
      if (function.getResultAttr(i, "te.updates_arg"))
        state[resultName(function, i)] = results[i];
  }

  std::vector<Tensor> forwardArgs(const std::vector<Tensor> &layerArgs) {
    std::vector<Tensor> args;
    for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
      llvm::StringRef name = argName(forward, i);
      if (name.starts_with("fp8_meta."))
        args.push_back(meta(forward, i));
      else if (name == "rng_state")
        args.push_back(Tensor({2}, {double(kSeed), double(kOffset)}));
      else
        args.push_back(layerArgs.at(i));
    }
    return args;
  }

  std::vector<Tensor> backwardArgs(const std::vector<Tensor> &forwardArgs,
                                   const std::vector<Tensor> &forwardResults,
                                   const std::vector<Tensor> &outputGrads) {
    std::vector<Tensor> args;
    size_t nextGrad = 0;
    for (unsigned i = 0; i < backward.getNumArguments(); ++i) {
      if (auto arg =
              backward.getArgAttrOfType<mlir::IntegerAttr>(i, "te.forward_arg"))
        args.push_back(forwardArgs[arg.getInt()]);
      else if (auto result = backward.getArgAttrOfType<mlir::IntegerAttr>(
                   i, "te.forward_result"))
        args.push_back(forwardResults[result.getInt()]);
      else if (argName(backward, i).starts_with("fp8_meta."))
        args.push_back(meta(backward, i));
      else if (argName(backward, i).starts_with("main_grad."))
        args.push_back(mainGrads.at(argName(backward, i).str()));
      else
        args.push_back(outputGrads.at(nextGrad++));
    }
    return args;
  }

  mlir::func::FuncOp forward, backward;
  interp::Collectives *collectives;
  int64_t rank;
  std::map<std::string, Tensor> state;
};

} // namespace tejit::testing

#endif // TEJIT_TESTS_UNIT_FP8TRAININGSTEP_H
