//===- Passes.td - tejit compiler passes -------------------*- tablegen -*-===//
#ifndef TEJIT_COMPILER_PASSES_TD
#define TEJIT_COMPILER_PASSES_TD

include "mlir/Pass/PassBase.td"

def TEDecompose : Pass<"te-decompose", "mlir::func::FuncOp"> {
  let summary = "Lower te layer ops to primitive te ops";
  let description = [{
    Rewrites every layer op (`te.linear` ... `te.transformer_layer`) into the
    primitive ops it computes: normalizations with their statistics, 2-D
    matmuls on flattened tokens, bias adds, activations, the attention core
    with rotary embeddings, dropout and residual adds, and the reshapes,
    slices that connect them.

    Dropout draws from a `tensor<2xi64>` function argument named
    `rng_state` (`[seed, offset]`), added when some dropout rate is non-zero;
    the n-th layer op of a function uses streams `16 * n + site` (see
    compiler/interpreter/DropoutRng.h). With `inference`, dropout is off, as
    in a module's eval mode.
  }];
  let options = [
    Option<"inference", "inference", "bool", /*default=*/"false",
           "Drop dropout (eval mode)">
  ];
  let dependentDialects = ["::mlir::te::TEDialect"];
}

#endif // TEJIT_COMPILER_PASSES_TD
