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
    slices that connect them. `te.grouped_linear` (GroupedLinear) becomes
    one `te.grouped_matmul` on the flattened tokens with `transpose_b`, the
    per-group bias, the layer's recipe and role fprop.

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

    A te.grouped_matmul (rows form) gets the dgrad grouped GEMM (rows form,
    the weights' transpose flipped), the wgrad grouped GEMM (contraction
    form, `transpose_a`) and te.grouped_bias_grad, all reading the forward's
    `m_splits` argument, which has no gradient (integer arguments never do).
  }];
  let dependentDialects = ["::mlir::te::TEDialect"];
}

def TEPlaceScaling : Pass<"te-place-scaling", "mlir::ModuleOp"> {
  let summary = "Run GEMMs that carry an FP8 recipe in FP8, with TE's scaling";
  let description = [{
    Every te.matmul with an `fp8_recipe` becomes a te.scaled_matmul on FP8
    operands: forward tensors (inputs, weights) in E4M3, gradients in E5M2
    under HYBRID (E4M3 under E4M3), both K-major (TN) as Hopper needs, with
    transposed FP8 copies where dgrad and wgrad read an operand transposed.
    Fast accumulation for fprop, split accumulation for dgrad and wgrad.

    Each value is quantized once per function and FP8 format; a forward
    tensor that a backward GEMM reads (a weight for dgrad, an input for
    wgrad) is quantized once, in the forward function, and its FP8
    transpose is saved for the backward function (te.forward_result), so
    that a weight is quantized once per step. Saved high-precision values
    that no backward op reads any more are dropped from the interface.

    DelayedScaling: each quantized tensor gets a slot of a meta state that
    the function takes as arguments (`fp8_meta.fwd.scale`, `.scale_inv`,
    `.amax_history`; `fp8_meta.bwd.*` in backward functions, one set per
    distinct recipe) and returns updated (same names, `te.updates_arg`):
    te.quantize records amaxes, which are gathered, all-reduced (MAX) when
    `reduce_amax`, and fed to te.delayed_scaling_update once, at the end of
    the function. Float8CurrentScaling: te.amax, te.compute_scale and
    te.quantize for each tensor, no state. Float8BlockScaling: a
    te.block_quantize per operand (1-D or 2-D blocks by its role: input,
    weight or gradient), no state; the backward's transposed operands are
    cast again from the high-precision tensor (docs/block-scaling.md).

    A te.grouped_matmul with a recipe (GroupedLinear) becomes a
    te.grouped_scaled_matmul on operands cast per group: under
    DelayedScaling and Float8CurrentScaling by te.grouped_quantize with one
    scale per group (DelayedScaling gives each cast G consecutive slots of
    the meta vectors: te.slice of G elements, its [G] amax joining the
    update in slot order; current scaling runs te.grouped_amax and
    te.compute_scale on [G] vectors); under Float8BlockScaling by
    te.grouped_block_quantize (x and dY in 1-D blocks per row segment, the
    stacked weights in w_block_scaling_dim blocks per matrix; no state, no
    fast accumulation; x_block_scaling_dim or grad_block_scaling_dim other
    than 1 is refused). The K-major copies the backward reads (W^T
    [G, K, N] for dgrad, x^T [K, T] and dY^T [N, T] for wgrad) are cast
    again from the high-precision tensor, transposed, with the same scales
    or blocks of their own (docs/grouped-linear.md). FP8 stacked weights
    (fp8_weights) are read as they are, with their `<weight>.scale_inv`
    [G] and `<weight>.transpose` [G, K, N] arguments; without a recipe
    grouped GEMMs stay high precision.

    `recipe` overrides the GEMMs' own recipes: an attribute such as
    `#te.delayed_scaling<amax_history_len = 16>`, or `none` to run every
    GEMM in high precision.
  }];
  let options = [
    Option<"recipe", "recipe", "std::string", /*default=*/"\"\"",
           "Recipe for every GEMM, overriding their own (or 'none')">
  ];
  let dependentDialects = ["::mlir::te::TEDialect"];
}

def TESplitWgrad : Pass<"te-split-wgrad", "mlir::ModuleOp"> {
  let summary = "Move delayed weight gradients into a function of their own";
  let description = [{
    Transformer Engine's `delay_wgrad_compute` (docs/delay-wgrad.md): for
    every `@f_backward` whose forward has arguments marked `te.delay_wgrad`
    (the spec key marks a layer's GEMM weights), the GEMMs that serve only
    those weights' gradients, and every op after them that serves only
    those gradients (main_grad's add, casts), move into a new function
    `@f_backward_wgrad` (`te.wgrad_of = @f_backward`), which returns the
    gradients (with their `te.grad_of`, `te.accumulates`) in place of the
    backward. What stays includes the casts that make the GEMMs' FP8
    operands and the bias gradients.

    A value the moved ops read becomes an argument of the wgrad function:
    forward arguments and saved results keep their `te.forward_arg` /
    `te.forward_result`, the backward's output gradients and main_grads
    are read again (`te.backward_arg = i`), views of those are recomputed,
    and anything else, in particular a meta slot that the backward's scale
    update overwrites and the FP8 state a later forward overwrites, is
    returned by the backward as `deferred.<k>` after its other results and
    read as `te.backward_result = j`. Nothing changes without marked
    arguments.
  }];
  let dependentDialects = ["::mlir::te::TEDialect"];
}

def TEFuse : Pass<"te-fuse", "mlir::func::FuncOp"> {
  let summary = "Group primitive ops into te.fused kernel regions";
  let description = [{
    Greedy producer-consumer fusion into the kernel kinds the backend emits,
    in this order of priority:
    `gemm`: a GEMM with the epilogues cuBLASLt fuses (bias; GELU, keeping the
    pre-activation as aux when it is needed later; an FP8 output cast of an
    FP8 GEMM; dGELU and the bias gradient in backward);
    `norm_cast`: LayerNorm/RMSNorm with the FP8 cast of its output and that
    cast's transpose (or, under current scaling, the output's amax);
    `norm_bwd_add`: a LayerNorm/RMSNorm backward with the add of its input
    gradient to another gradient (the residual connection's), when that add
    is the only reader of the input gradient;
    `dact_dbias_cast`: an activation gradient with its bias gradient and FP8
    cast + transpose; `bias_dropout_add`; `act_cast`: bias + activation +
    FP8 cast + transpose (or amax); `cast_transpose`: a lone FP8 cast with its
    transpose (and the te.dequantize it may read: FP8 attention's output
    cast again for the next GEMM; a te.reshape of a dequantization's output
    is first moved to its FP8 input); `block_quantize`: the block casts of one tensor (row-wise and
    transposed). Block-scaled GEMMs take only a residual (C) into their
    `gemm` group. GroupedLinear's ops: each te.grouped_quantize,
    te.grouped_amax and te.grouped_bias_grad is a region of its own
    (`grouped_quantize`, `grouped_amax`, `grouped_bias_grad`), except that
    a tensor's per-group cast and its transposed cast with the same scales
    and `m_splits` share one `grouped_quantize` region; the
    te.grouped_block_quantize ops of one tensor and `m_splits` (or none)
    are one `grouped_block_quantize` region; grouped GEMMs stay outside
    te.fused, as library calls.
    A group grows only while it stays legal: no op outside the group between
    its first and last op may read a value computed inside it.
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
