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

def TEPlanMemory : Pass<"te-plan-memory", "mlir::func::FuncOp"> {
  let summary = "Assign arena offsets to intermediates by liveness";
  let description = [{
    Plans the device memory of a single-block function's intermediates: every
    op result that is neither returned nor a view owns a buffer in the
    function's arena, sized elements x element bytes (i1 as one byte) and
    rounded up to 256 bytes, live from its defining op through the last op
    that reads it or a view of it. `te.reshape` is the only view: it aliases
    its input, extending the input's live range, and owns no memory.
    Arguments and returned values (with their views) are the caller's.

    Buffers are placed largest first, each into the smallest gap between the
    already placed buffers whose live ranges overlap its own (greedy by
    size). Records `te.offsets` on every op with results (one i64 per result,
    -1 where the result owns no arena memory), and `te.arena_bytes` and
    `te.peak_live_bytes` (the largest total size live at one op, a lower
    bound on the arena) on the function. compiler/passes/PlanMemory.h has the
    same plan as a C++ API.
  }];
}

#endif // TEJIT_COMPILER_PASSES_TD
