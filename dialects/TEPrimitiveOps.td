//===- TEPrimitiveOps.td - primitive ops of the te dialect -*- tablegen -*-===//
//
// What te-decompose lowers layer ops to, and te-autodiff differentiates:
// GEMMs, normalizations, activations, attention, dropout, elementwise adds and
// shape changes, each with its backward counterpart. Tensors keep the layer's
// dtype; normalization and softmax statistics are f32.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECT_TE_PRIMITIVE_OPS_TD
#define TEJIT_DIALECT_TE_PRIMITIVE_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "TEAttributes.td"

class TE_PrimOp<string mnemonic, list<Trait> traits = []>
    : TE_Op<mnemonic, !listconcat(traits, [Pure])> {
  let hasVerifier = 1;
}

defvar TE_AnyTensor = AnyRankedTensor;

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

def TE_ReshapeOp : TE_PrimOp<"reshape"> {
  let summary = "Reinterprets a tensor with a new shape of the same size";
  let description = [{
    Row-major reshape; no data moves.

    ```mlir
    %2 = te.reshape %x : tensor<2048x4x4096xbf16> -> tensor<8192x4096xbf16>
    ```
  }];
  let arguments = (ins TE_AnyTensor:$input);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
  let hasFolder = 1;
}

def TE_TransposeOp : TE_PrimOp<"transpose"> {
  let summary = "Swaps the two dims of a matrix";
  let arguments = (ins TE_AnyTensor:$input);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($output)";
}

def TE_SliceOp : TE_PrimOp<"slice"> {
  let summary = "A contiguous range of the last dim";
  let description = [{
    `output[..., i] = input[..., offset + i]` for `i < size`, where `size` is
    the output's last dim. Splits fused QKV projections and gated FC1
    outputs.
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$offset);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input `[` $offset `]` attr-dict `:` type($input) `->` type($output)
  }];
}

def TE_ConcatOp : TE_PrimOp<"concat"> {
  let summary = "Concatenates tensors along the last dim";
  let arguments = (ins Variadic<TE_AnyTensor>:$inputs);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($output)";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def TE_AddOp : TE_PrimOp<"add", [SameOperandsAndResultType]> {
  let summary = "Elementwise sum (residual connections, gradient sums)";
  let arguments = (ins TE_AnyTensor:$lhs, TE_AnyTensor:$rhs);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($output)";
  let hasVerifier = 0;
}

def TE_BiasAddOp : TE_PrimOp<"bias_add"> {
  let summary = "Adds a vector along the last dim";
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$bias);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input `,` $bias attr-dict `:` type($input) `,` type($bias) `->` type($output)
  }];
}

def TE_BiasGradOp : TE_PrimOp<"bias_grad"> {
  let summary = "Sums a gradient over all dims but the last (dbias)";
  let arguments = (ins TE_AnyTensor:$grad);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$grad attr-dict `:` type($grad) `->` type($output)";
}

def TE_TpCopyOp : TE_PrimOp<"tp_copy", [SameOperandsAndResultType]> {
  let summary = "Input of a column-parallel GEMM (identity; sums its gradient)";
  let description = [{
    The identity on each of the `ranks` ranks of a tensor-parallel group.
    Its gradient is the sum of the ranks' gradients (`te.tp_all_reduce`):
    each rank holds a slice of the GEMM's output features, so the input's
    gradient has a part from every rank. `te-fuse` drops the op.
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$ranks);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def TE_TpAllReduceOp : TE_PrimOp<"tp_all_reduce",
    [SameOperandsAndResultType]> {
  let summary = "Sum over the ranks of a tensor-parallel group";
  let description = [{
    The element-wise sum of `input` over the `ranks` ranks (the output of a
    row-parallel GEMM, or the gradient of a `te.tp_copy`); the identity in
    the one-process interpreter. Its gradient is the identity.
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$ranks);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($output)";
}

def TE_TpAllGatherOp : TE_PrimOp<"tp_all_gather"> {
  let summary = "Concatenation along dim 0 of the ranks' slices";
  let description = [{
    Sequence parallelism: each of the `ranks` ranks holds chunk r of dim 0
    (its slice of the sequence, or of the batch for bshd); the output is
    the whole tensor, the chunks in rank order (the input of a
    column-parallel GEMM). Its gradient is a `te.tp_reduce_scatter`.
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$ranks);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output)
  }];
}

def TE_TpReduceScatterOp : TE_PrimOp<"tp_reduce_scatter"> {
  let summary = "Sum over the ranks, each keeping its chunk of dim 0";
  let description = [{
    Sequence parallelism: the element-wise sum of `input` over the `ranks`
    ranks (the output of a row-parallel GEMM), of which rank r keeps chunk
    r of dim 0. Its gradient is a `te.tp_all_gather`.
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$ranks);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output)
  }];
}

def TE_CpAllGatherOp : TE_PrimOp<"cp_all_gather"> {
  let summary = "Context parallelism: the whole sequence from the ranks' tokens";
  let description = [{
    Each of the `ranks` ranks holds `s / ranks` tokens of dim `seq_dim` (0
    for sbhd, 1 for bshd); the output holds all `s`. With `load_balanced`,
    rank r's input is chunks r and 2 ranks - 1 - r of the `2 ranks` chunks
    (each half of its rows) and the output is the sequence in order;
    without, the output is the ranks' inputs in rank order. Its gradient
    is a `te.cp_reduce_scatter` with the same attributes
    (docs/context-parallel.md).
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$ranks, I64Attr:$seq_dim,
                   UnitAttr:$load_balanced);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output)
  }];
}

def TE_CpReduceScatterOp : TE_PrimOp<"cp_reduce_scatter"> {
  let summary = "Context parallelism: sum over the ranks, each keeping its tokens";
  let description = [{
    The element-wise sum of the whole-sequence `input` over the `ranks`
    ranks, of which each keeps the rows of dim `seq_dim` that
    `te.cp_all_gather` with the same attributes takes from it (with
    `load_balanced`, chunks r and 2 ranks - 1 - r, in that order). Its
    gradient is that `te.cp_all_gather`.
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$ranks, I64Attr:$seq_dim,
                   UnitAttr:$load_balanced);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output)
  }];
}

def TE_CpAllToAllOp : TE_PrimOp<"cp_all_to_all"> {
  let summary = "Context parallelism: trades heads for tokens between the ranks";
  let description = [{
    cp_comm_type a2a (DeepSpeed-Ulysses, docs/context-parallel.md) on a
    rank-4 tensor whose dim `seq_dim` (0 for sbhd, 1 for bshd) is tokens
    and dim `head_dim` (2) heads; the types give the direction:

    - to heads: input `[.., s / ranks, .., H, d]` (this rank's tokens of
      every head), output `[.., s, .., H / ranks, d]`: rank r's output is
      head block r (heads [r H / ranks, (r + 1) H / ranks)) of every
      rank's input, placed along `seq_dim` as `te.cp_all_gather` with the
      same `load_balanced` places the ranks' tokens (the sequence in
      order, or rank order without it);
    - to sequence, the inverse: input `[.., s, .., H / ranks, d]`, output
      `[.., s / ranks, .., H, d]`: head block j of rank r's output is the
      rows of rank j's input that `te.cp_all_gather` takes from rank r.

    Each direction's gradient is the other with the same attributes.
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$ranks, I64Attr:$seq_dim,
                   I64Attr:$head_dim, UnitAttr:$load_balanced);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output)
  }];
  let extraClassDeclaration = [{
    /// Whether the output holds the whole sequence of 1/ranks of the heads
    /// (else this rank's tokens of all heads); the verifier checks that
    /// the types say one or the other.
    bool isToHeads() {
      auto in = ::llvm::cast<::mlir::RankedTensorType>(getInput().getType());
      auto out = ::llvm::cast<::mlir::RankedTensorType>(getOutput().getType());
      return out.getDimSize(getSeqDim()) > in.getDimSize(getSeqDim());
    }
  }];
}

def TE_ActivationOp : TE_PrimOp<"act"> {
  let summary = "Applies an MLP activation along the last dim";
  let description = [{
    GELU is the tanh approximation, qgelu `x * sigmoid(1.702 x)`, srelu
    `relu(x)^2`. Gated activations split the last dim into halves `[a, b]`
    and return `act(a) * b`, halving the last dim. `clamped_swiglu` returns
    `a' sigmoid(alpha a') (b' + offset)` with `a' = min(a, limit)` and `b' =
    clamp(b, -limit, limit)`; its parameters are the optional
    `activation_limit` (default 7), `activation_alpha` (default 1.702) and
    `glu_linear_offset` (default 1), which no other activation takes.
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_ActivationAttr:$activation,
                   OptionalAttr<F64Attr>:$activation_limit,
                   OptionalAttr<F64Attr>:$activation_alpha,
                   OptionalAttr<F64Attr>:$glu_linear_offset);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $activation $input attr-dict `:` type($input) `->` type($output)
  }];
}

def TE_ActivationGradOp : TE_PrimOp<"dact"> {
  let summary = "Gradient of te.act with respect to its input";
  let description = [{
    Takes te.act's activation and parameters. `clamped_swiglu`'s clamps
    pass no gradient where they clamp: `da = 0` where `a > limit`, `db = 0`
    where `|b| > limit` (at `a = limit` and `|b| = limit` the gradient
    passes, as in Transformer Engine's kernels).
  }];
  let arguments = (ins TE_AnyTensor:$grad, TE_AnyTensor:$input,
                   TE_ActivationAttr:$activation,
                   OptionalAttr<F64Attr>:$activation_limit,
                   OptionalAttr<F64Attr>:$activation_alpha,
                   OptionalAttr<F64Attr>:$glu_linear_offset);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $activation $grad `,` $input attr-dict `:` type($grad) `,` type($input)
    `->` type($output)
  }];
}

def TE_DropoutOp : TE_PrimOp<"dropout"> {
  let summary = "Zeroes elements with probability `rate`, scales the rest";
  let description = [{
    `output = input * keep / (1 - rate)`, where `keep` is drawn from a
    counter-based generator keyed by the `rng_state` operand (`[seed,
    offset]`, advanced by the runtime each step) and the op's `stream`, so
    that every dropout site draws its own bits. The mask is a pure function
    of the state, the stream and the element index: the gradient of a
    dropout is the same dropout (same state and stream) applied to the
    output gradient, so no mask is stored between forward and backward.

    With `group = n` (a multiple of the last dim), runs of n consecutive
    elements share one draw (element i draws i / n): Transformer Engine's
    DropPath (stochastic depth), which keeps or drops whole slices along
    an activation's first dim.
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$rng_state,
                   F64Attr:$rate, I64Attr:$stream,
                   OptionalAttr<I64Attr>:$group);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input `,` $rng_state attr-dict `:` type($input) `,` type($rng_state)
    `->` type($output)
  }];
}

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

def TE_MatmulOp : TE_PrimOp<"matmul"> {
  let summary = "Matrix product with optional transposed operands";
  let description = [{
    `output = op(a) * op(b)` on 2-D tensors, where `op` transposes when its
    flag is set; accumulation is f32. A Linear's forward is
    `te.matmul %x, %w {transpose_b}` (`Y = X W^T`), its dgrad
    `te.matmul %dy, %w` and its wgrad `te.matmul %dy, %x {transpose_a}`.

    `fp8_recipe` (from the layer op) asks te-place-scaling to run the GEMM
    in FP8; `role` says which GEMM of a Linear's training step it is, which
    decides the FP8 formats (the gradient operand of dgrad and wgrad is a
    backward tensor) and the accumulation (fast for fprop).
  }];
  let arguments = (ins TE_AnyTensor:$a, TE_AnyTensor:$b, UnitAttr:$transpose_a,
                   UnitAttr:$transpose_b,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe,
                   OptionalAttr<TE_GemmRoleAttr>:$role);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $a `,` $b attr-dict `:` type($a) `,` type($b) `->` type($output)
  }];
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

def TE_LayerNormFwdOp : TE_PrimOp<"layernorm_fwd"> {
  let summary = "LayerNorm over the last dim, with statistics for backward";
  let description = [{
    Returns `y`, the f32 mean and the f32 reciprocal standard deviation
    (`rsigma = rsqrt(var + eps)`) of every row.
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$gamma,
                   TE_AnyTensor:$beta, F64Attr:$eps,
                   UnitAttr:$zero_centered_gamma);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$mean,
                 TE_AnyTensor:$rsigma);
  let assemblyFormat = [{
    $input `,` $gamma `,` $beta attr-dict `:` functional-type(operands, results)
  }];
}

def TE_LayerNormBwdOp : TE_PrimOp<"layernorm_bwd"> {
  let summary = "Gradients of te.layernorm_fwd: dx, dgamma, dbeta";
  let arguments = (ins TE_AnyTensor:$grad, TE_AnyTensor:$input,
                   TE_AnyTensor:$mean, TE_AnyTensor:$rsigma,
                   TE_AnyTensor:$gamma, UnitAttr:$zero_centered_gamma);
  let results = (outs TE_AnyTensor:$input_grad, TE_AnyTensor:$gamma_grad,
                 TE_AnyTensor:$beta_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $mean `,` $rsigma `,` $gamma attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_RMSNormFwdOp : TE_PrimOp<"rmsnorm_fwd"> {
  let summary = "RMSNorm over the last dim, with statistics for backward";
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$gamma, F64Attr:$eps,
                   UnitAttr:$zero_centered_gamma);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$rsigma);
  let assemblyFormat = [{
    $input `,` $gamma attr-dict `:` functional-type(operands, results)
  }];
}

def TE_RMSNormBwdOp : TE_PrimOp<"rmsnorm_bwd"> {
  let summary = "Gradients of te.rmsnorm_fwd: dx, dgamma";
  let arguments = (ins TE_AnyTensor:$grad, TE_AnyTensor:$input,
                   TE_AnyTensor:$rsigma, TE_AnyTensor:$gamma,
                   UnitAttr:$zero_centered_gamma);
  let results = (outs TE_AnyTensor:$input_grad, TE_AnyTensor:$gamma_grad);
  let assemblyFormat = [{
    $grad `,` $input `,` $rsigma `,` $gamma attr-dict
    `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def TE_RotaryOp : TE_PrimOp<"rotary"> {
  let summary = "Rotary position embedding of q or k";
  let description = [{
    Rotates channel pairs `(x[i], x[i + r/2])` of each head by the angles in
    `freqs` (`[s, 1, 1, r]` f32, the first half repeated as Transformer
    Engine lays it out), `r` even and at most the head dim `d`; channels
    `[r, d)` pass through (partial rotary). With `interleaved` the pairs
    are `(x[2i], x[2i + 1])` and the table holds each angle twice in a row
    (GPT-J's layout). With `inverse`, rotates by the negated angles, which
    is the op's gradient.
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$freqs,
                   TE_QkvFormatAttr:$qkv_format, UnitAttr:$inverse,
                   UnitAttr:$interleaved);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input `,` $freqs attr-dict `:` type($input) `,` type($freqs)
    `->` type($output)
  }];
}

def TE_AttentionOp : TE_PrimOp<"attention", [AttrSizedOperandSegments]> {
  let summary = "Fused attention core, with softmax statistics for backward";
  let description = [{
    `o = softmax(q k^T * softmax_scale + mask) v` per head, on 4-D q/k/v in
    `qkv_format`; returns `o` in q's layout and the f32 log-sum-exp of each
    softmax row (`[b, heads, s_q]`), which te.attention_bwd consumes.
    Attention dropout draws from `rng_state` like te.dropout.
    `window_size` is te.dot_product_attention's sliding window.
    `query_mask` (i1 `[b, 1, 1, s_q]`, true = padded query; padding mask
    types only) pads queries on their own (cross-attention): a padded
    query's output row is 0 and its log-sum-exp -inf, and te.attention_bwd
    gives it no gradient and takes none from it. `pad_keys_only` (set on
    cross-attention, whose keys come from another sequence) says the mask
    pads the keys alone even when s_q = s_kv; without it a padding mask of
    equal lengths pads the queries too, as Transformer Engine's one mask of
    self-attention does (their rows are then unspecified).

    `qkv_format = thd` (packed sequences): q is `[t, heads, d]` and k/v
    `[t_kv, kv_heads, d]`, the tokens of every sequence back to back;
    `cu_seqlens_q` (i32 `[b + 1]`) says where each sequence's queries start
    and `cu_seqlens_kv` where its keys do (the queries' when absent).
    `max_seqlen_q` / `max_seqlen_kv` bound the lengths (the statistics are
    `[b, heads, max_seqlen_q]`, padded). Each sequence attends to itself
    alone; the mask type is padding or padding_causal and there is no mask
    operand. Tokens from `cu_seqlens_q[b]` on (a packed buffer's tail) get
    output rows 0 and no gradient.

    `bias_type` (docs/attention-bias.md, Transformer Engine's
    core_attention_bias_type) adds to the scaled scores, before the masks
    and dropout: `post_scale_bias` the `bias` operand `[1 or b, 1 or heads,
    s_q, s_kv]` of q's element type (dims of size 1 broadcast); `alibi`
    `-slope[h] * |i - j + s_kv - s_q|` (`|i - j|` for the causal and
    padding_causal mask types), with the slopes of `alibi_slopes` (f32
    `[heads]` or `[b, heads]`) or TE's vanilla ones when it is absent.
    `bias_grad` (a `[1, heads, s_q, s_kv]` bias only) makes
    te.attention_bwd return the bias's gradient. Not with thd.

    `fp8_recipe` (a DelayedScaling with `fp8_dpa`, from the layer op) asks
    te-place-scaling to run the attention in FP8: te.fp8_attention and
    te.fp8_attention_bwd (docs/fp8-attention.md).

    Context parallelism (docs/context-parallel.md): with `cp_ranks` N > 1,
    q, the output and `softmax_lse` hold rank `cp_rank`'s 2c local queries,
    local row i at global position r c + i for i < c and (2N - 1 - r) c +
    (i - c) otherwise, and k / v the whole sequence (a te.cp_all_gather's
    output, N times q's sequence length). `causal` shows key j to local
    query i iff j <= its global position (k/v in sequence order);
    `no_mask` shows every key. te.attention_bwd's dk / dv are then this
    rank's queries' contributions, which a te.cp_reduce_scatter sums.
    Masks no_mask and causal, sbhd and bshd only; no window, bias, query
    mask or FP8.
  }];
  let arguments = (ins TE_AnyTensor:$query, TE_AnyTensor:$key,
                   TE_AnyTensor:$value, Optional<TE_AnyTensor>:$attention_mask,
                   Optional<TE_AnyTensor>:$query_mask,
                   Optional<TE_AnyTensor>:$rng_state,
                   Optional<TE_AnyTensor>:$cu_seqlens_q,
                   Optional<TE_AnyTensor>:$cu_seqlens_kv,
                   Optional<TE_AnyTensor>:$bias,
                   Optional<TE_AnyTensor>:$alibi_slopes,
                   TE_AttnMaskTypeAttr:$attn_mask_type,
                   TE_QkvFormatAttr:$qkv_format, F64Attr:$softmax_scale,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   OptionalAttr<TE_AttentionWindow>:$window_size,
                   DefaultValuedAttr<I64Attr, "0">:$stream,
                   UnitAttr:$pad_keys_only,
                   OptionalAttr<I64Attr>:$max_seqlen_q,
                   OptionalAttr<I64Attr>:$max_seqlen_kv,
                   DefaultValuedAttr<TE_AttnBiasTypeAttr,
                     "::mlir::te::AttnBiasType::no_bias">:$bias_type,
                   UnitAttr:$bias_grad,
                   DefaultValuedAttr<I64Attr, "1">:$cp_ranks,
                   DefaultValuedAttr<I64Attr, "0">:$cp_rank,
                   OptionalAttr<TE_DelayedScalingAttr>:$fp8_recipe);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$softmax_lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` `(` $attention_mask^ `)`)?
    (`query_mask` `(` $query_mask^ `)`)? (`rng` `(` $rng_state^ `)`)?
    (`cu_seqlens_q` `(` $cu_seqlens_q^ `)`)?
    (`cu_seqlens_kv` `(` $cu_seqlens_kv^ `)`)? (`bias` `(` $bias^ `)`)?
    (`alibi_slopes` `(` $alibi_slopes^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_AttentionBwdOp : TE_PrimOp<"attention_bwd",
    [AttrSizedOperandSegments]> {
  let summary = "Gradients of te.attention: dq, dk, dv (and dbias)";
  let description = [{
    Takes te.attention's operands and attributes, and its output and
    log-sum-exp. With `bias_grad`, a fourth result `dbias` `[1, heads, s_q,
    s_kv]` (the bias's type) is the bias's gradient: the gradient of the
    post-scale scores (softmax backward, dropout included, 0 where masked)
    summed over the batch. ALiBi slopes take no gradient.
  }];
  let arguments = (ins TE_AnyTensor:$grad, TE_AnyTensor:$query,
                   TE_AnyTensor:$key, TE_AnyTensor:$value,
                   TE_AnyTensor:$output, TE_AnyTensor:$softmax_lse,
                   Optional<TE_AnyTensor>:$attention_mask,
                   Optional<TE_AnyTensor>:$query_mask,
                   Optional<TE_AnyTensor>:$rng_state,
                   Optional<TE_AnyTensor>:$cu_seqlens_q,
                   Optional<TE_AnyTensor>:$cu_seqlens_kv,
                   Optional<TE_AnyTensor>:$bias,
                   Optional<TE_AnyTensor>:$alibi_slopes,
                   TE_AttnMaskTypeAttr:$attn_mask_type,
                   TE_QkvFormatAttr:$qkv_format, F64Attr:$softmax_scale,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   OptionalAttr<TE_AttentionWindow>:$window_size,
                   DefaultValuedAttr<I64Attr, "0">:$stream,
                   UnitAttr:$pad_keys_only,
                   OptionalAttr<I64Attr>:$max_seqlen_q,
                   OptionalAttr<I64Attr>:$max_seqlen_kv,
                   DefaultValuedAttr<TE_AttnBiasTypeAttr,
                     "::mlir::te::AttnBiasType::no_bias">:$bias_type,
                   UnitAttr:$bias_grad,
                   DefaultValuedAttr<I64Attr, "1">:$cp_ranks,
                   DefaultValuedAttr<I64Attr, "0">:$cp_rank,
                   OptionalAttr<TE_DelayedScalingAttr>:$fp8_recipe);
  // The bias's gradient is named `dbias`: `bias_grad` is the attribute.
  let results = (outs TE_AnyTensor:$query_grad, TE_AnyTensor:$key_grad,
                 TE_AnyTensor:$value_grad, Optional<TE_AnyTensor>:$dbias);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output `,` $softmax_lse
    (`mask` `(` $attention_mask^ `)`)? (`query_mask` `(` $query_mask^ `)`)?
    (`rng` `(` $rng_state^ `)`)? (`cu_seqlens_q` `(` $cu_seqlens_q^ `)`)?
    (`cu_seqlens_kv` `(` $cu_seqlens_kv^ `)`)? (`bias` `(` $bias^ `)`)?
    (`alibi_slopes` `(` $alibi_slopes^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

// Not Pure: it writes the caches.
def TE_KvCacheAttentionOp : TE_Op<"kv_cache_attention"> {
  let summary = "Attention of new tokens over a KV cache (inference)";
  let description = [{
    One decoding (or prefill) step of `batch` sequences whose keys and
    values live in caches `[b, s_cache, kv_heads, d]` (bshd), Transformer
    Engine's `InferenceParams`. `query` `[t, heads, d]` and `key` / `value`
    `[t, kv_heads, d]` are the step's new tokens, packed (thd) as
    `cu_seqlens_q` (i32 `[b + 1]`) says; `cu_seqlens_kv` (i32 `[b + 1]`)
    holds each sequence's length after the step (cached + new), cumulated.

    The op stores the new tokens in `key_cache` / `value_cache`, which must
    be arguments of the enclosing function (the caller's buffers): with
    n_i new and L_i total tokens, new token j of sequence i goes to cache
    row `L_i - n_i + j`. Query j of sequence i then attends to cache rows
    `[0, L_i)` of its sequence; `padding_causal_bottom_right` hides rows
    after `L_i - n_i + j`, `padding` none. Tokens from `cu_seqlens_q[b]` on
    (a packed buffer's tail) get output rows of 0. No dropout, no
    statistics and no backward: inference only.

    Paged caches (Transformer Engine's `is_paged`): with `page_table` (i32
    `[b, max_pages]`) the caches are pools of pages `[pages, page_size,
    kv_heads, d]` and a sequence holds `max_pages * page_size` rows; its
    row r lives in page `page_table[i, r / page_size]`, row `r % page_size`
    of that page. Everything else is as above, over these rows.
  }];
  let arguments = (ins TE_AnyTensor:$query, TE_AnyTensor:$key,
                   TE_AnyTensor:$value, TE_AnyTensor:$key_cache,
                   TE_AnyTensor:$value_cache, TE_AnyTensor:$cu_seqlens_q,
                   TE_AnyTensor:$cu_seqlens_kv,
                   Optional<TE_AnyTensor>:$page_table,
                   TE_AttnMaskTypeAttr:$attn_mask_type,
                   F64Attr:$softmax_scale, I64Attr:$max_seqlen_q);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $key_cache `,` $value_cache
    `cu_seqlens_q` `(` $cu_seqlens_q `)` `cu_seqlens_kv` `(` $cu_seqlens_kv `)`
    (`page_table` `(` $page_table^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // TEJIT_DIALECT_TE_PRIMITIVE_OPS_TD
