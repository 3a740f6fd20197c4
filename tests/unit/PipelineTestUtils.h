//===- PipelineTestUtils.h - specs through the pipeline ---------*- C++ -*-===//
//
// Shared by the tests that check compiler passes with the reference
// interpreter: import a spec, run the pipeline to a stage, draw arguments
// shaped like real ones (initialization-scaled weights, TE-shaped rotary
// tables), and compare tensors.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_UNIT_PIPELINETESTUTILS_H
#define TEJIT_TESTS_UNIT_PIPELINETESTUTILS_H

#include "compiler/interpreter/Interpreter.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/spec/SpecImporter.h"
#include "dialects/TEDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include "gtest/gtest.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace tejit::testing {

using interp::Tensor;

inline mlir::OwningOpRef<mlir::ModuleOp>
importSpecText(mlir::MLIRContext &context, llvm::StringRef text,
               llvm::StringRef bufferName) {
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, bufferName), llvm::SMLoc());
  return importLayerSpec(sourceMgr, &context);
}

/// An example spec of examples/ by file name.
inline mlir::OwningOpRef<mlir::ModuleOp>
importExampleFile(mlir::MLIRContext &context, llvm::StringRef file) {
  auto buffer = llvm::MemoryBuffer::getFile(std::string(TEJIT_EXAMPLES_DIR) +
                                            "/" + file.str());
  EXPECT_TRUE(bool(buffer)) << file.str();
  if (!buffer)
    return nullptr;
  return importSpecText(context, (*buffer)->getBuffer(), file);
}

inline bool runPipeline(mlir::ModuleOp module, const PipelineOptions &options) {
  mlir::PassManager pm(module.getContext());
  buildPipeline(pm, options);
  return mlir::succeeded(pm.run(module));
}

inline mlir::func::FuncOp firstFunction(mlir::ModuleOp module) {
  return *module.getOps<mlir::func::FuncOp>().begin();
}

inline mlir::func::FuncOp backwardOf(mlir::ModuleOp module,
                                     mlir::func::FuncOp forward) {
  return module.lookupSymbol<mlir::func::FuncOp>(
      (forward.getName() + "_backward").str());
}

inline llvm::StringRef argName(mlir::func::FuncOp function, unsigned index) {
  auto name = function.getArgAttrOfType<mlir::StringAttr>(index, "te.name");
  return name ? name.getValue() : "";
}

/// Rotary angles come as cat(theta, theta) along the last dim, as
/// Transformer Engine builds them (interleaved: each angle twice in a
/// row); te.rotary's gradient relies on it.
inline void repeatAngles(Tensor &freqs, bool interleaved) {
  int64_t width = freqs.shape.back();
  for (size_t row = 0; row < freqs.data.size(); row += width)
    for (int64_t i = 0; i < width / 2; ++i) {
      if (interleaved)
        freqs.data[row + 2 * i + 1] = freqs.data[row + 2 * i];
      else
        freqs.data[row + width / 2 + i] = freqs.data[row + i];
    }
}

/// Whether a layer of `function` pairs rotary channels GPT-J's way.
inline bool usesInterleavedRotary(mlir::func::FuncOp function) {
  bool interleaved = false;
  function.walk([&](mlir::Operation *op) {
    interleaved |= op->hasAttr("rotary_pos_interleaved");
  });
  return interleaved;
}

/// The longest sequence a packed (thd) layer of `function` takes (of the
/// keys, with `keys`), or 0.
inline int64_t packedMaxSeqlen(mlir::func::FuncOp function, bool keys) {
  int64_t longest = 0;
  function.walk([&](mlir::Operation *op) {
    for (llvm::StringRef name :
         {keys ? "max_seqlen_kv" : "max_seqlen_q", "max_seqlen"})
      if (auto attr = op->getAttrOfType<mlir::IntegerAttr>(name))
        longest = std::max(longest, attr.getInt());
  });
  return longest;
}

/// Offsets [b + 1] of packed sequences of random lengths up to `maxSeqlen`
/// (some empty) in `tokens`, leaving the rest a padded tail.
inline void packSequences(Tensor &cuSeqlens, int64_t maxSeqlen, int64_t tokens,
                          std::mt19937_64 &rng) {
  int64_t start = 0;
  cuSeqlens.data[0] = 0;
  for (size_t i = 1; i < cuSeqlens.data.size(); ++i) {
    int64_t longest = std::min(maxSeqlen, tokens - start);
    start += int64_t(rng() % uint64_t(longest + 1));
    cuSeqlens.data[i] = double(start);
  }
}

/// Random arguments for a layer-level function: weights scaled like a real
/// initialization (1/sqrt(fan_in)), so that activations stay O(1) through
/// stacked layers; vectors (norm weights, biases) and activations N(0, 0.5).
inline std::vector<Tensor> randomLayerArgs(mlir::func::FuncOp function,
                                           std::mt19937_64 &rng) {
  std::vector<Tensor> args;
  bool interleaved = usesInterleavedRotary(function);
  for (auto [index, type] : llvm::enumerate(function.getArgumentTypes())) {
    auto tensor = llvm::cast<mlir::RankedTensorType>(type);
    double stddev = tensor.getRank() == 2
                        ? 1.0 / std::sqrt(double(tensor.getDimSize(1)))
                        : 0.5;
    args.push_back(interp::randomTensor(tensor, rng, stddev));
    if (argName(function, index) == "rotary_pos_emb")
      repeatAngles(args.back(), interleaved);
    // The first argument (input or query) holds the packed tokens, the
    // second (key) those of keys packed on their own.
    if (argName(function, index) == "cu_seqlens")
      packSequences(args.back(), packedMaxSeqlen(function, /*keys=*/false),
                    args[0].shape[0], rng);
    if (argName(function, index) == "cu_seqlens_kv")
      packSequences(args.back(), packedMaxSeqlen(function, /*keys=*/true),
                    args[1].shape[0], rng);
  }
  return args;
}

/// Random gradients for every result of `function` (a training step's
/// output gradients), N(0, 1).
inline std::vector<Tensor> randomResultGrads(mlir::func::FuncOp function,
                                             std::mt19937_64 &rng) {
  std::vector<Tensor> grads;
  for (mlir::Type type : function.getResultTypes())
    grads.push_back(
        interp::randomTensor(llvm::cast<mlir::RankedTensorType>(type), rng));
  return grads;
}

/// Largest |a - b| over max(|b|, 1e-3 * max|b|), elementwise; infinite when
/// NaNs differ.
inline double relativeError(const Tensor &a, const Tensor &b) {
  EXPECT_EQ(a.shape, b.shape);
  double scale = 0;
  for (double v : b.data)
    scale = std::max(scale, std::fabs(v));
  double worst = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (std::isnan(a.data[i]) != std::isnan(b.data[i]))
      return INFINITY;
    double denom = std::max(std::fabs(b.data[i]), 1e-3 * scale);
    worst = std::max(worst, std::fabs(a.data[i] - b.data[i]) /
                                std::max(denom, 1e-300));
  }
  return worst;
}

/// ||a - b|| / ||b|| in the 2-norm: the error measure for results of FP8
/// GEMMs, whose elements each carry a few percent of rounding.
inline double normRelativeError(const Tensor &a, const Tensor &b) {
  EXPECT_EQ(a.shape, b.shape);
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    diff += (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
    ref += b.data[i] * b.data[i];
  }
  return std::sqrt(diff / std::max(ref, 1e-300));
}

} // namespace tejit::testing

#endif // TEJIT_TESTS_UNIT_PIPELINETESTUTILS_H
