//===- Pipeline.cpp - the te compilation pipeline, stage by stage
//----------===//
#include "compiler/passes/Pipeline.h"
#include "compiler/passes/Passes.h"

using namespace mlir;

void tejit::buildPipeline(OpPassManager &pm, const PipelineOptions &options) {
  if (options.stopAfter == Stage::TE)
    return;
  TEDecomposeOptions decompose;
  decompose.inference = !options.training;
  pm.addNestedPass<func::FuncOp>(createTEDecompose(decompose));
  if (options.stopAfter == Stage::Primitive)
    return;
  if (options.training)
    pm.addPass(createTEAutodiff());
  if (options.stopAfter == Stage::Autodiff)
    return;
  TEPlaceScalingOptions scaling;
  scaling.recipe = options.recipeOverride;
  pm.addPass(createTEPlaceScaling(scaling));
  if (options.training)
    pm.addPass(createTESplitWgrad());
  if (options.stopAfter == Stage::Scaled)
    return;
  pm.addNestedPass<func::FuncOp>(createTEFuse());
  if (options.stopAfter == Stage::Fused)
    return;
  pm.addNestedPass<func::FuncOp>(createTEPlanMemory());
}

llvm::StringRef tejit::stageName(Stage stage) {
  switch (stage) {
  case Stage::TE:
    return "te";
  case Stage::Primitive:
    return "primitive";
  case Stage::Autodiff:
    return "autodiff";
  case Stage::Scaled:
    return "scaled";
  case Stage::Fused:
    return "fused";
  case Stage::Planned:
    return "planned";
  case Stage::Cuda:
    return "cuda";
  }
  return "";
}

std::string tejit::expandRecipeShorthand(llvm::StringRef recipe) {
  if (recipe == "delayed")
    return "#te.delayed_scaling<>";
  if (recipe == "current")
    return "#te.current_scaling<>";
  if (recipe == "block")
    return "#te.block_scaling<>";
  return recipe.str();
}
