//===- LayerImport.h - one spec layer into one te layer op ------*- C++ -*-===//
#ifndef TEJIT_COMPILER_SPEC_LAYERIMPORT_H
#define TEJIT_COMPILER_SPEC_LAYERIMPORT_H

#include "compiler/spec/ImportState.h"

namespace tejit::spec {

/// Imports the layer mapping `node`, the `index`-th of the spec, fed by
/// `input` (null for the first layer, which then asks for the function's
/// `input` argument). `defaultRecipe` is the spec's recipe, which a layer may
/// override with its own `recipe` (or `recipe: none`). Returns the layer's
/// output.
mlir::FailureOr<mlir::Value>
importLayer(ImportState &state, const SpecNode &node, unsigned index,
            mlir::Value input, mlir::te::FP8RecipeAttrInterface defaultRecipe,
            const SpecLocations &locations);

/// The layer type names a spec accepts (Transformer Engine's class names).
llvm::ArrayRef<llvm::StringRef> getLayerTypeNames();

} // namespace tejit::spec

#endif // TEJIT_COMPILER_SPEC_LAYERIMPORT_H
