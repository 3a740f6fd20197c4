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

def TEAutodiff : Pass<"te-autodiff", "mlir::ModuleOp"> {
  let summary = "Derive the backward function of each forward function";
  let description = [{
    For every function `@f` of primitive te ops (run te-decompose first),
    adds `@f_backward`, which takes the gradients of `@f`'s results and the
    values the backward pass needs, and returns the gradient of every float
    argument that influences the results (inputs and parameters).

    The interface between the two is explicit: a value the backward pass
    needs is either an argument of `@f` (the backward argument carries
    `te.forward_arg = i`), or recomputed in `@f_backward` when it is a view
    (reshape, slice, transpose) of an available value, or saved: `@f` then
    returns it as an extra result named `saved.<k>`, and the backward
    argument carries `te.forward_result = j`. Gradient arguments are named
    `grad.<result name>`, gradient results `grad.<argument name>`.
  }];
  let dependentDialects = ["::mlir::te::TEDialect"];
}

#endif // TEJIT_COMPILER_PASSES_TD
