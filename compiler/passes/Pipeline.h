//===- Pipeline.h - the te compilation pipeline, stage by stage -*- C++ -*-===//
#ifndef TEJIT_COMPILER_PASSES_PIPELINE_H
#define TEJIT_COMPILER_PASSES_PIPELINE_H

#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace tejit {

/// The stages of compilation, in order; each names the IR after it.
enum class Stage {
  /// Layer ops, as imported from a spec.
  TE,
  /// Primitive ops (te-decompose).
  Primitive,
  /// Primitive ops with backward functions (te-autodiff; training only).
  Autodiff,
  /// FP8 GEMMs with their casts and scale state (te-place-scaling).
  Scaled,
  /// Kernel regions (te-fuse).
  Fused,
  /// Arena offsets of intermediates (te-plan-memory).
  Planned,
  /// CUDA C++ of the generated kernels (codegen/, after the Planned
  /// pipeline; not an IR stage).
  Cuda,
};

struct PipelineOptions {
  Stage stopAfter = Stage::Planned;
  /// Training: dropout on and backward functions derived. Inference: no
  /// dropout, forward only.
  bool training = true;
  /// When set, the recipe of every GEMM (te-place-scaling's `recipe`
  /// option): a #te.delayed_scaling / #te.current_scaling /
  /// #te.block_scaling attribute, or "none" for high precision.
  std::string recipeOverride;
};

/// The attribute a recipe shorthand stands for (TE's defaults): "delayed",
/// "current" or "block"; anything else is returned as it is.
std::string expandRecipeShorthand(llvm::StringRef recipe);

/// Adds the passes that take imported te IR to `options.stopAfter`. In
/// inference, stages that only exist for training are skipped.
void buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// The stage's name as te-compile's --emit spells it.
llvm::StringRef stageName(Stage stage);

} // namespace tejit

#endif // TEJIT_COMPILER_PASSES_PIPELINE_H
