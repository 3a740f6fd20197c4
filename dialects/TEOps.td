//===- TEOps.td - layer ops of the te dialect --------------*- tablegen -*-===//
#ifndef TEJIT_DIALECT_TE_OPS_TD
#define TEJIT_DIALECT_TE_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "TEAttributes.td"

// Element and shape rules are checked in C++ so that each diagnostic can name
// the operand and the rule it breaks; ODS only asks for ranked tensors.
defvar TE_Tensor = AnyRankedTensor;
defvar TE_Eps = DefaultValuedAttr<F64Attr, "1e-5">;
class TE_Dropout<string default> : DefaultValuedAttr<F64Attr, default>;

// Layers run in FP8 when they carry a recipe; GEMM dims must then be aligned.
class TE_LayerOp<string mnemonic, list<Trait> traits = []>
    : TE_Op<mnemonic, !listconcat(traits, [Pure])> {
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

def TE_LayerNormOp : TE_LayerOp<"layernorm"> {
  let summary = "Layer normalization (Transformer Engine's LayerNorm)";
  let description = [{
    `y = (x - mean(x)) * rsqrt(var(x) + eps) * gamma + beta` over the last
    dimension. With `zero_centered_gamma`, `gamma` is stored as `gamma - 1`.

    ```mlir
    %y = te.layernorm %x weight(%gamma) bias(%beta) {eps = 1.0e-05 : f64}
        : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>)
          -> tensor<2048x4x4096xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, TE_Tensor:$weight, TE_Tensor:$bias,
                   TE_Eps:$eps, UnitAttr:$zero_centered_gamma);
  let results = (outs TE_Tensor:$output);
  let assemblyFormat = [{
    $input `weight` `(` $weight `)` `bias` `(` $bias `)` attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_RMSNormOp : TE_LayerOp<"rmsnorm"> {
  let summary = "RMS normalization (Transformer Engine's RMSNorm)";
  let description = [{
    `y = x * rsqrt(mean(x^2) + eps) * gamma` over the last dimension.

    ```mlir
    %y = te.rmsnorm %x weight(%gamma) {eps = 1.0e-06 : f64}
        : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, TE_Tensor:$weight, TE_Eps:$eps,
                   UnitAttr:$zero_centered_gamma);
  let results = (outs TE_Tensor:$output);
  let assemblyFormat = [{
    $input `weight` `(` $weight `)` attr-dict
    `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// GEMM layers
//===----------------------------------------------------------------------===//

def TE_LinearOp : TE_LayerOp<"linear"> {
  let summary = "Fully connected layer (Transformer Engine's Linear)";
  let description = [{
    `y = x W^T + b` with `W` of shape `[out_features, in_features]` and an
    optional bias `b` of shape `[out_features]`. The input may have any
    number of leading dimensions.

    With `tp_size` > 1 the op is one rank's part of a tensor-parallel Linear
    (docs/tensor-parallel.md): `parallel_mode = column` holds
    out_features / tp_size rows of `W` and `b`; `row` holds in_features /
    tp_size columns of `W`, reads the same slice of the input features,
    and sums its output over the ranks before adding the whole `b`.
    With `sequence_parallel` (docs/tensor-parallel.md), a column-parallel
    op reads this rank's 1/tp_size of the input's dim 0 and all-gathers it
    (its output has tp_size times the input's dim 0); a row-parallel one
    reduce-scatters its output, keeping this rank's 1/tp_size of dim 0.

    ```mlir
    %y = te.linear %x weight(%w) bias(%b)
        {fp8_recipe = #te.delayed_scaling<amax_history_len = 16>}
        : (tensor<2048x4x4096xbf16>, tensor<1024x4096xbf16>, tensor<1024xbf16>)
          -> tensor<2048x4x1024xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, TE_Tensor:$weight,
                   Optional<TE_Tensor>:$bias,
                   DefaultValuedAttr<I64Attr, "1">:$tp_size,
                   UnitAttr:$sequence_parallel,
                   OptionalAttr<TE_ParallelModeAttr>:$parallel_mode,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe);
  let results = (outs TE_Tensor:$output);
  let assemblyFormat = [{
    $input `weight` `(` $weight `)` (`bias` `(` $bias^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_GroupedLinearOp : TE_LayerOp<"grouped_linear"> {
  let summary = "One Linear per row segment (Transformer Engine's GroupedLinear)";
  let description = [{
    The experts of a mixture-of-experts layer: the input's tokens (its
    leading dims flattened, T rows) are cut into G consecutive segments of
    `m_splits[g]` rows (`m_splits`: i32 [G], known only at run time), and
    segment g gets `y = x W[g]^T + b[g]`, with `weight` [G, out_features,
    in_features] (TE's weight0..weight{G-1} stacked) and an optional `bias`
    [G, out_features]. Rows past sum(m_splits) (padding) give zeros. The
    runtime refuses negative splits, a sum over T and, under an FP8
    recipe, splits not divisible by 16 (docs/grouped-linear.md).

    With `tp_size` > 1 the op is one rank's part of a tensor-parallel
    GroupedLinear (docs/grouped-linear.md): `parallel_mode = column` holds
    out_features / tp_size rows of every `weight[g]` and `bias[g]`, reads
    the whole input (its gradient is summed over the ranks) and returns
    this rank's output features; `row` holds in_features / tp_size columns
    of every `weight[g]`, reads the same slice of the input features and
    sums its output over the ranks. A row-parallel op takes no bias.

    ```mlir
    %y = te.grouped_linear %x splits(%m) weight(%w) bias(%b)
        {fp8_recipe = #te.delayed_scaling<amax_history_len = 16>}
        : (tensor<8192x4096xbf16>, tensor<8xi32>, tensor<8x1024x4096xbf16>,
           tensor<8x1024xbf16>) -> tensor<8192x1024xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, TE_Tensor:$m_splits,
                   TE_Tensor:$weight, Optional<TE_Tensor>:$bias,
                   DefaultValuedAttr<I64Attr, "1">:$tp_size,
                   OptionalAttr<TE_ParallelModeAttr>:$parallel_mode,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe);
  let results = (outs TE_Tensor:$output);
  let assemblyFormat = [{
    $input `splits` `(` $m_splits `)` `weight` `(` $weight `)`
    (`bias` `(` $bias^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def TE_LayerNormLinearOp : TE_LayerOp<"layernorm_linear",
    [AttrSizedOperandSegments]> {
  let summary = "Normalization followed by a Linear (LayerNormLinear)";
  let description = [{
    `y = norm(x) W^T + b`, where `norm` is LayerNorm (weight `ln_weight`,
    bias `ln_bias`) or RMSNorm (weight `ln_weight` only). With
    `return_layernorm_output`, the normalized input is a second result.
    With `tp_size` > 1, one rank's part of a column-parallel layer: `W` and
    `b` hold out_features / tp_size rows. With `sequence_parallel`, the
    input (and `ln_output`) are this rank's 1/tp_size of dim 0, gathered
    after the norm: the output has tp_size times the input's dim 0.

    ```mlir
    %y = te.layernorm_linear %x ln_weight(%g) ln_bias(%b) weight(%w) bias(%wb)
        : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
           tensor<12288x4096xbf16>, tensor<12288xbf16>)
          -> tensor<2048x4x12288xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, TE_Tensor:$ln_weight,
                   Optional<TE_Tensor>:$ln_bias, TE_Tensor:$weight,
                   Optional<TE_Tensor>:$bias,
                   DefaultValuedAttr<TE_NormalizationAttr,
                     "::mlir::te::Normalization::LayerNorm">:$normalization,
                   TE_Eps:$eps, UnitAttr:$zero_centered_gamma,
                   UnitAttr:$return_layernorm_output,
                   DefaultValuedAttr<I64Attr, "1">:$tp_size,
                   UnitAttr:$sequence_parallel,
                   OptionalAttr<TE_ParallelModeAttr>:$parallel_mode,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe);
  let results = (outs TE_Tensor:$output, Optional<TE_Tensor>:$ln_output);
  let assemblyFormat = [{
    $input `ln_weight` `(` $ln_weight `)` (`ln_bias` `(` $ln_bias^ `)`)?
    `weight` `(` $weight `)` (`bias` `(` $bias^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_LayerNormMLPOp : TE_LayerOp<"layernorm_mlp", [AttrSizedOperandSegments]> {
  let summary = "Normalization followed by a two-layer MLP (LayerNormMLP)";
  let description = [{
    `y = act(norm(x) W1^T + b1) W2^T + b2`. For the gated activations
    (`geglu`, `qgeglu`, `reglu`, `sreglu`, `swiglu`, `clamped_swiglu`) FC1
    produces twice `ffn_hidden_size` features `[a, b]` and the activation
    is `act(a) * b`. `clamped_swiglu` (GPT-OSS's, Transformer Engine's
    `activation_params`) clamps both halves first: `a' = min(a, limit)`,
    `b' = clamp(b, -limit, limit)`, `y = a' sigmoid(alpha a') (b' +
    offset)`, with `activation_limit` (default 7), `activation_alpha`
    (default 1.702) and `glu_linear_offset` (default 1); only
    `clamped_swiglu` takes these three attributes.
    `fc1_weight` is `[ffn_hidden_size (x2 if gated), hidden_size]`,
    `fc2_weight` is `[hidden_size, ffn_hidden_size]`; the two biases are
    both present or both absent (Transformer Engine's `bias` flag).
    With `tp_size` > 1, one rank's part of a tensor-parallel MLP: the
    weights hold this rank's ffn_hidden_size / tp_size features (FC1
    column-parallel, FC2 row-parallel: its output is summed over the ranks
    before `b2` is added). With `sequence_parallel`, the input and output
    are this rank's 1/tp_size of dim 0: the norm's output is all-gathered
    before FC1, FC2's output reduce-scattered before `b2`.

    ```mlir
    %y = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
        fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
        {activation = #te.activation<gelu>}
        : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
           tensor<16384x4096xbf16>, tensor<16384xbf16>,
           tensor<4096x16384xbf16>, tensor<4096xbf16>)
          -> tensor<2048x4x4096xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, TE_Tensor:$ln_weight,
                   Optional<TE_Tensor>:$ln_bias, TE_Tensor:$fc1_weight,
                   Optional<TE_Tensor>:$fc1_bias, TE_Tensor:$fc2_weight,
                   Optional<TE_Tensor>:$fc2_bias,
                   DefaultValuedAttr<TE_NormalizationAttr,
                     "::mlir::te::Normalization::LayerNorm">:$normalization,
                   DefaultValuedAttr<TE_ActivationAttr,
                     "::mlir::te::Activation::gelu">:$activation,
                   OptionalAttr<F64Attr>:$activation_limit,
                   OptionalAttr<F64Attr>:$activation_alpha,
                   OptionalAttr<F64Attr>:$glu_linear_offset,
                   TE_Eps:$eps, UnitAttr:$zero_centered_gamma,
                   UnitAttr:$return_layernorm_output,
                   DefaultValuedAttr<I64Attr, "1">:$tp_size,
                   UnitAttr:$sequence_parallel,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe);
  let results = (outs TE_Tensor:$output, Optional<TE_Tensor>:$ln_output);
  let assemblyFormat = [{
    $input `ln_weight` `(` $ln_weight `)` (`ln_bias` `(` $ln_bias^ `)`)?
    `fc1_weight` `(` $fc1_weight `)` (`fc1_bias` `(` $fc1_bias^ `)`)?
    `fc2_weight` `(` $fc2_weight `)` (`fc2_bias` `(` $fc2_bias^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The MLP's inner width (FC2's input features).
    int64_t getFfnHiddenSize();
  }];
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def TE_DotProductAttentionOp : TE_LayerOp<"dot_product_attention",
    [AttrSizedOperandSegments]> {
  let summary = "Scaled dot-product attention core (DotProductAttention)";
  let description = [{
    `softmax(q k^T * softmax_scale + mask) v` per head. Head counts and the
    head dimension come from the operand shapes: with `qkv_format = sbhd`,
    `query` is `[s_q, b, heads, head_dim]` and `key`/`value` are
    `[s_kv, b, gqa_groups, head_dim]` (`bshd` swaps the first two dims).
    Query heads must be a multiple of key/value heads (GQA/MQA). The output
    is `[s_q, b, heads * head_dim]` (`[b, s_q, ...]` for `bshd`).

    `attention_mask` (i1, `true` = masked out) is required by the padding
    and arbitrary mask types and not allowed otherwise: `[b, 1, 1, s_kv]` for
    padding masks, broadcastable to `[b, heads, s_q, s_kv]` for `arbitrary`.
    `softmax_scale` defaults to `1/sqrt(head_dim)`.

    `query_mask` (i1 `[b, 1, 1, s_q]`, true = padded query; padding mask
    types only) gives the queries a padding mask of their own, Transformer
    Engine's mask pair (query mask, key/value mask): `attention_mask` then
    pads the keys alone, whatever the lengths, and a padded query's output
    row is 0 and takes no gradient.

    `window_size = array<i64: left, right>` (sliding-window attention, as
    Transformer Engine's `window_size`) further hides key j from query i
    unless `i - left <= j <= i + right`, with -1 for an unbounded side;
    the diagonal is aligned bottom-right (shifted by `s_kv - s_q`) except
    for the `causal` and `padding_causal` mask types, as in Transformer
    Engine. Not allowed with the `arbitrary` mask type.

    `core_attention_bias_type` (Transformer Engine's, default `no_bias`;
    docs/attention-bias.md) adds to the scaled scores, before the masks:
    with `post_scale_bias` the `core_attention_bias` operand `[1 or b, 1 or
    heads, s_q, s_kv]` (TE's shapes 1hss, b1ss, bhss, 11ss) of the query's
    element type, broadcast over its dims of size 1; with `alibi`,
    `-slope[h] * |i - j + s_kv - s_q|` (`|i - j|` for the causal and
    padding_causal mask types), the slopes from `alibi_slopes` (f32
    `[heads]` or `[b, heads]`) or, without it, TE's vanilla ones
    (`2^(-8 (k + 1) / n)` for head k, n the largest power of 2 <= heads,
    then interleaved for the heads past n). `bias_requires_grad` (a
    `post_scale_bias` of shape `[1, heads, s_q, s_kv]` only) says the bias
    takes a gradient, the gradient of the post-scale scores summed over the
    batch. Neither with thd, a KV cache or the `arbitrary` mask type.

    `qkv_format = thd` (Transformer Engine's packed variable-length
    sequences): `query` is `[t, heads, head_dim]` and `key`/`value`
    `[t_kv, gqa_groups, head_dim]`, the tokens of every sequence back to
    back; `cu_seqlens_q` (i32 `[b + 1]`) holds where each sequence's
    queries start and `cu_seqlens_kv` where its keys do (default: the
    queries'); `max_seqlen_q` and `max_seqlen_kv` bound the lengths. The
    mask type is padding or padding_causal (no mask operand); the output
    is `[t, heads * head_dim]`, 0 from token `cu_seqlens_q[b]` on.

    KV cache (inference; Transformer Engine's `inference_params`, thd
    only): with `key_cache` and `value_cache` (`[b, s_cache, gqa_groups,
    head_dim]`, arguments of the function), `key`/`value` are the step's
    new tokens packed like the queries, `cu_seqlens_kv` (required) holds
    each sequence's length after the step (cached + new), cumulated, and
    the attention is te.kv_cache_attention's: the new tokens are stored in
    the caches, causal mask types align bottom-right. With `page_table`
    (i32 `[b, max_pages]`, paged caches) the caches are `[pages,
    page_size, gqa_groups, head_dim]` pools of pages, each sequence's rows
    in the pages its table row lists (te.kv_cache_attention's paging).

    `fp8_recipe` (it runs no GEMM, so only a DelayedScaling with
    `fp8_dpa = true`) runs the attention in FP8, Transformer Engine's
    fp8_dpa (docs/fp8-attention.md); a KV cache's attention stays bf16/f16.

    Context parallelism (docs/context-parallel.md): with `cp_size` > 1 the
    op is rank `cp_rank`'s part of the layer: query, key, value and the
    output hold its `s / cp_size` tokens of every sequence, chunks `cp_rank`
    and `2 cp_size - 1 - cp_rank` of `2 cp_size` (load-balanced order); the
    keys and values are all-gathered over the ranks. Masks no_mask and
    causal, sbhd and bshd only. With `cp_comm_type = "a2a"` an all-to-all
    trades heads for tokens instead (te.cp_all_to_all): each rank attends
    over the whole sequence with `heads / cp_size` query heads and
    `gqa_groups / cp_size` key/value heads, which must be whole numbers.

    ```mlir
    %o = te.dot_product_attention %q, %k, %v
        {attn_mask_type = #te.attn_mask_type<causal>}
        : (tensor<2048x4x32x128xbf16>, tensor<2048x4x8x128xbf16>,
           tensor<2048x4x8x128xbf16>) -> tensor<2048x4x4096xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$query, TE_Tensor:$key, TE_Tensor:$value,
                   Optional<TE_Tensor>:$attention_mask,
                   Optional<TE_Tensor>:$query_mask,
                   Optional<TE_Tensor>:$cu_seqlens_q,
                   Optional<TE_Tensor>:$cu_seqlens_kv,
                   Optional<TE_Tensor>:$key_cache,
                   Optional<TE_Tensor>:$value_cache,
                   Optional<TE_Tensor>:$page_table,
                   Optional<TE_Tensor>:$core_attention_bias,
                   Optional<TE_Tensor>:$alibi_slopes,
                   DefaultValuedAttr<TE_AttnMaskTypeAttr,
                     "::mlir::te::AttnMaskType::causal">:$attn_mask_type,
                   DefaultValuedAttr<TE_AttnBiasTypeAttr,
                     "::mlir::te::AttnBiasType::no_bias">:$core_attention_bias_type,
                   UnitAttr:$bias_requires_grad,
                   TE_Dropout<"0.0">:$attention_dropout,
                   DefaultValuedAttr<TE_QkvFormatAttr,
                     "::mlir::te::QkvFormat::sbhd">:$qkv_format,
                   OptionalAttr<F64Attr>:$softmax_scale,
                   OptionalAttr<TE_AttentionWindow>:$window_size,
                   OptionalAttr<I64Attr>:$max_seqlen_q,
                   OptionalAttr<I64Attr>:$max_seqlen_kv,
                   DefaultValuedAttr<I64Attr, "1">:$cp_size,
                   DefaultValuedAttr<I64Attr, "0">:$cp_rank,
                   DefaultValuedStrAttr<StrAttr, "all_gather">:$cp_comm_type,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe);
  let results = (outs TE_Tensor:$output);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` `(` $attention_mask^ `)`)?
    (`query_mask` `(` $query_mask^ `)`)?
    (`cu_seqlens_q` `(` $cu_seqlens_q^ `)`)?
    (`cu_seqlens_kv` `(` $cu_seqlens_kv^ `)`)?
    (`key_cache` `(` $key_cache^ `)`)? (`value_cache` `(` $value_cache^ `)`)?
    (`page_table` `(` $page_table^ `)`)?
    (`core_attention_bias` `(` $core_attention_bias^ `)`)?
    (`alibi_slopes` `(` $alibi_slopes^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
}

def TE_MultiheadAttentionOp : TE_LayerOp<"multihead_attention",
    [AttrSizedOperandSegments]> {
  let summary = "Self-attention block (Transformer Engine's MultiheadAttention)";
  let description = [{
    Optional input normalization (present when `ln_weight` is given), a fused
    QKV projection, rotary embeddings on q and k when `rotary_pos_emb` is
    given, the attention core, and the output projection.

    `qkv_weight` is `[(heads + 2 * gqa_groups) * kv_channels, hidden]`: the
    rows of q, then k, then v. `proj_weight` is `[hidden, heads * kv_channels]`.
    `num_gqa_groups` defaults to `num_attention_heads` and `kv_channels` to
    `hidden / num_attention_heads`. With `tp_size` > 1 the op is one rank's
    part of a tensor-parallel block: the head counts and weights are this
    rank's (QKV column-parallel, the projection row-parallel: summed over
    the ranks before its bias), and `kv_channels` must be given. With
    `sequence_parallel`, the input, `encoder_output`, the output and
    `ln_output` are this rank's 1/tp_size of dim 0 (all-gathered before the
    QKV and KV projections, the projection's output reduce-scattered). `rotary_pos_emb` is f32
    `[s, 1, 1, r]` (angles, as Transformer Engine passes them), r even and
    at most `kv_channels`: the first r channels of each head rotate (all of
    them when r = kv_channels); `rotary_pos_interleaved` pairs adjacent
    channels instead of halves (GPT-J's layout).

    Context parallelism (docs/context-parallel.md): with `cp_size` > 1 the
    input, output and `ln_output` hold rank `cp_rank`'s `s / cp_size`
    tokens of every sequence (chunks `cp_rank` and `2 cp_size - 1 -
    cp_rank` of `2 cp_size`), while `rotary_pos_emb` keeps the whole
    sequence's `[s, 1, 1, r]`; k and v are all-gathered over the ranks
    after the rotary embedding. Self-attention with no_mask or causal,
    sbhd or bshd, no window, bias, FP8 attention or KV cache. With
    `cp_comm_type = "a2a"`, q, k and v go through an all-to-all to the
    whole sequence of `1 / cp_size` of the heads instead (head and
    gqa_groups counts divisible by cp_size), and the attention's output
    back to this rank's tokens of all heads.

    Cross-attention (Transformer Engine's `attention_type = "cross"`) when
    `encoder_output` (`[s_kv, b, hidden]`, `bshd`: `[b, s_kv, hidden]`) is
    given: the queries come from the (normalized) input through
    `qkv_weight`, which then holds only the query rows `[heads *
    kv_channels, hidden]`, and the keys and values from `encoder_output`
    (not normalized) through `kv_weight` `[2 * gqa_groups * kv_channels,
    hidden]`, rows of k, then v. The mask is then the keys' padding mask
    `[b, 1, 1, s_kv]`; causal masks align top-left. No rotary embeddings
    and no sliding window with cross-attention. `query_mask` (i1 `[b, 1, 1,
    s]`, padding mask types) pads queries too: their attention output rows
    are 0 (Transformer Engine's mask pair).

    With `return_layernorm_output` (and `ln_weight`), the normalized input
    is a second result, `ln_output`.

    `qkv_format = thd` (packed sequences, self-attention only): the input
    is `[t, hidden]`, the tokens of every sequence back to back,
    `cu_seqlens` (i32 `[b + 1]`) holds where each starts and `max_seqlen`
    bounds their lengths; the mask type is padding or padding_causal (no
    mask operand) and `rotary_pos_emb` holds each token's angles, `[t, 1,
    1, r]` (positions restart at every sequence).

    KV cache (inference, thd only): `key_cache` / `value_cache` `[b,
    s_cache, kv_heads, head_dim]` (function arguments) and `cu_seqlens_kv`
    (each sequence's length after the step, cumulated) make the input the
    step's new tokens, attending as te.kv_cache_attention does; the
    causal mask types align bottom-right. `page_table` (i32 `[b,
    max_pages]`) pages the caches: they are then `[pages, page_size,
    kv_heads, head_dim]`, as te.kv_cache_attention's paged caches.

    `core_attention_bias_type`, `core_attention_bias`, `alibi_slopes` and
    `bias_requires_grad` are te.dot_product_attention's, over this rank's
    heads; with cross-attention s_kv is the encoder output's length. Not
    with thd or a KV cache.

    ```mlir
    %y = te.multihead_attention %x ln_weight(%g) ln_bias(%b)
        qkv_weight(%wqkv) proj_weight(%wo) {num_attention_heads = 32 : i64}
        : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
           tensor<12288x4096xbf16>, tensor<4096x4096xbf16>)
          -> tensor<2048x4x4096xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, Optional<TE_Tensor>:$encoder_output,
                   Optional<TE_Tensor>:$ln_weight,
                   Optional<TE_Tensor>:$ln_bias, TE_Tensor:$qkv_weight,
                   Optional<TE_Tensor>:$qkv_bias,
                   Optional<TE_Tensor>:$kv_weight,
                   Optional<TE_Tensor>:$kv_bias, TE_Tensor:$proj_weight,
                   Optional<TE_Tensor>:$proj_bias,
                   Optional<TE_Tensor>:$attention_mask,
                   Optional<TE_Tensor>:$query_mask,
                   Optional<TE_Tensor>:$rotary_pos_emb,
                   Optional<TE_Tensor>:$cu_seqlens,
                   Optional<TE_Tensor>:$cu_seqlens_kv,
                   Optional<TE_Tensor>:$key_cache,
                   Optional<TE_Tensor>:$value_cache,
                   Optional<TE_Tensor>:$page_table,
                   Optional<TE_Tensor>:$core_attention_bias,
                   Optional<TE_Tensor>:$alibi_slopes,
                   I64Attr:$num_attention_heads,
                   OptionalAttr<I64Attr>:$num_gqa_groups,
                   OptionalAttr<I64Attr>:$kv_channels,
                   DefaultValuedAttr<TE_NormalizationAttr,
                     "::mlir::te::Normalization::LayerNorm">:$normalization,
                   TE_Eps:$layernorm_epsilon, UnitAttr:$zero_centered_gamma,
                   DefaultValuedAttr<TE_AttnMaskTypeAttr,
                     "::mlir::te::AttnMaskType::causal">:$attn_mask_type,
                   DefaultValuedAttr<TE_AttnBiasTypeAttr,
                     "::mlir::te::AttnBiasType::no_bias">:$core_attention_bias_type,
                   UnitAttr:$bias_requires_grad,
                   TE_Dropout<"0.1">:$attention_dropout,
                   DefaultValuedAttr<TE_QkvFormatAttr,
                     "::mlir::te::QkvFormat::sbhd">:$qkv_format,
                   OptionalAttr<TE_AttentionWindow>:$window_size,
                   UnitAttr:$rotary_pos_interleaved,
                   UnitAttr:$return_layernorm_output,
                   OptionalAttr<I64Attr>:$max_seqlen,
                   DefaultValuedAttr<I64Attr, "1">:$tp_size,
                   UnitAttr:$sequence_parallel,
                   DefaultValuedAttr<I64Attr, "1">:$cp_size,
                   DefaultValuedAttr<I64Attr, "0">:$cp_rank,
                   DefaultValuedStrAttr<StrAttr, "all_gather">:$cp_comm_type,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe);
  let results = (outs TE_Tensor:$output, Optional<TE_Tensor>:$ln_output);
  let assemblyFormat = [{
    $input (`encoder_output` `(` $encoder_output^ `)`)?
    (`ln_weight` `(` $ln_weight^ `)`)? (`ln_bias` `(` $ln_bias^ `)`)?
    `qkv_weight` `(` $qkv_weight `)` (`qkv_bias` `(` $qkv_bias^ `)`)?
    (`kv_weight` `(` $kv_weight^ `)`)? (`kv_bias` `(` $kv_bias^ `)`)?
    `proj_weight` `(` $proj_weight `)` (`proj_bias` `(` $proj_bias^ `)`)?
    (`mask` `(` $attention_mask^ `)`)?
    (`query_mask` `(` $query_mask^ `)`)?
    (`rotary_pos_emb` `(` $rotary_pos_emb^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    (`cu_seqlens_kv` `(` $cu_seqlens_kv^ `)`)?
    (`key_cache` `(` $key_cache^ `)`)? (`value_cache` `(` $value_cache^ `)`)?
    (`page_table` `(` $page_table^ `)`)?
    (`core_attention_bias` `(` $core_attention_bias^ `)`)?
    (`alibi_slopes` `(` $alibi_slopes^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Key/value heads: num_gqa_groups, or num_attention_heads when unset.
    int64_t getNumKVHeads();
    /// Per-head width: kv_channels, or hidden / num_attention_heads.
    int64_t getHeadDim();
  }];
}

def TE_TransformerLayerOp : TE_LayerOp<"transformer_layer",
    [AttrSizedOperandSegments]> {
  let summary = "Pre-norm transformer block (Transformer Engine's TransformerLayer)";
  let description = [{
    `h = x + dropout(attn(norm1(x)))`, `y = h + dropout(mlp(norm2(h)))`,
    where `attn` is a self-attention block laid out as in
    `te.multihead_attention` and `mlp` is the MLP of `te.layernorm_mlp`.
    With `apply_residual_connection_post_layernorm`, the residuals are the
    normalized values instead. The self-attention mask defaults to causal,
    and both dropouts to 0.1, as in Transformer Engine. With `tp_size` > 1,
    one rank's part of a tensor-parallel layer: its attention blocks and
    MLP as in `te.multihead_attention` and `te.layernorm_mlp`; with
    `sequence_parallel` the input, `encoder_output` and output, and so the
    norms, dropouts and residuals, are this rank's 1/tp_size of dim 0.
    `cp_size` / `cp_rank` / `cp_comm_type`: context parallelism of the
    self-attention, as in `te.multihead_attention` (not with a decoder's
    `encoder_output`).

    A decoder layer (Transformer Engine's `layer_type = "decoder"`) when
    `encoder_output` is given: between the two blocks,
    `h' = h + dropout(cross(norm3(h), encoder_output))`, where `cross` is
    the cross-attention of `te.multihead_attention` with the `inter_*`
    parameters (`inter_q_weight` the query rows, `inter_kv_weight` the
    k | v rows), the mask `enc_dec_attn_mask_type` (default `no_mask`; the
    padding types take `enc_dec_mask` `[b, 1, 1, s_kv]`, and
    `enc_dec_query_mask` `[b, 1, 1, s]` pads its queries) and no rotary
    embeddings.

    With `out_ln_weight` (Transformer Engine's `output_layernorm`, the
    post-LN layer of BERT), the attention block takes `x` itself (no
    `attn_ln_*`) and `y` is normalized once more at the end:
    `y = norm_out(h + dropout(mlp(norm2(h))))`.

    `drop_path_rate` is Transformer Engine's DropPath (stochastic depth):
    after the hidden dropout of the self-attention block and of the MLP,
    each index of the input's first dim (a position for sbhd, a sample for
    bshd, as TE draws it) is dropped with that rate, the rest scaled by
    1 / (1 - rate).

    With `parallel_attention_mlp` (Transformer Engine's, the GPT-J/PaLM
    block) the two blocks read the input side by side and share one
    dropout: `y = x + dropout(attn(norm1(x)) + mlp(norm2(x)))`; not with a
    decoder, `apply_residual_connection_post_layernorm` or `out_ln_weight`.

    `attn_input_format = thd` (packed sequences): the input is `[t,
    hidden]` with `cu_seqlens` and `max_seqlen` as in
    `te.multihead_attention`; not with a decoder. The KV cache operands
    (`cu_seqlens_kv`, `key_cache`, `value_cache`, `page_table`) are
    te.multihead_attention's.

    `core_attention_bias_type`, `core_attention_bias`, `alibi_slopes` and
    `bias_requires_grad` (te.dot_product_attention's) apply to the
    self-attention only: a decoder's cross-attention takes no bias (its
    keys are the encoder output's, of another length).

    ```mlir
    %y = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
        qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo)
        mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1) fc1_bias(%bf1)
        fc2_weight(%w2) fc2_bias(%bf2) {num_attention_heads = 32 : i64}
        : (...) -> tensor<2048x4x4096xbf16>
    ```
  }];
  let arguments = (ins TE_Tensor:$input, Optional<TE_Tensor>:$encoder_output,
                   Optional<TE_Tensor>:$attn_ln_weight,
                   Optional<TE_Tensor>:$attn_ln_bias,
                   TE_Tensor:$qkv_weight, Optional<TE_Tensor>:$qkv_bias,
                   TE_Tensor:$proj_weight, Optional<TE_Tensor>:$proj_bias,
                   Optional<TE_Tensor>:$inter_ln_weight,
                   Optional<TE_Tensor>:$inter_ln_bias,
                   Optional<TE_Tensor>:$inter_q_weight,
                   Optional<TE_Tensor>:$inter_q_bias,
                   Optional<TE_Tensor>:$inter_kv_weight,
                   Optional<TE_Tensor>:$inter_kv_bias,
                   Optional<TE_Tensor>:$inter_proj_weight,
                   Optional<TE_Tensor>:$inter_proj_bias,
                   TE_Tensor:$mlp_ln_weight, Optional<TE_Tensor>:$mlp_ln_bias,
                   TE_Tensor:$fc1_weight, Optional<TE_Tensor>:$fc1_bias,
                   TE_Tensor:$fc2_weight, Optional<TE_Tensor>:$fc2_bias,
                   Optional<TE_Tensor>:$out_ln_weight,
                   Optional<TE_Tensor>:$out_ln_bias,
                   Optional<TE_Tensor>:$attention_mask,
                   Optional<TE_Tensor>:$enc_dec_mask,
                   Optional<TE_Tensor>:$enc_dec_query_mask,
                   Optional<TE_Tensor>:$rotary_pos_emb,
                   Optional<TE_Tensor>:$cu_seqlens,
                   Optional<TE_Tensor>:$cu_seqlens_kv,
                   Optional<TE_Tensor>:$key_cache,
                   Optional<TE_Tensor>:$value_cache,
                   Optional<TE_Tensor>:$page_table,
                   Optional<TE_Tensor>:$core_attention_bias,
                   Optional<TE_Tensor>:$alibi_slopes,
                   I64Attr:$num_attention_heads,
                   OptionalAttr<I64Attr>:$num_gqa_groups,
                   OptionalAttr<I64Attr>:$kv_channels,
                   DefaultValuedAttr<TE_NormalizationAttr,
                     "::mlir::te::Normalization::LayerNorm">:$normalization,
                   DefaultValuedAttr<TE_ActivationAttr,
                     "::mlir::te::Activation::gelu">:$activation,
                   OptionalAttr<F64Attr>:$activation_limit,
                   OptionalAttr<F64Attr>:$activation_alpha,
                   OptionalAttr<F64Attr>:$glu_linear_offset,
                   TE_Eps:$layernorm_epsilon, UnitAttr:$zero_centered_gamma,
                   TE_Dropout<"0.1">:$hidden_dropout,
                   TE_Dropout<"0.1">:$attention_dropout,
                   TE_Dropout<"0.0">:$drop_path_rate,
                   DefaultValuedAttr<TE_AttnMaskTypeAttr,
                     "::mlir::te::AttnMaskType::causal">:$self_attn_mask_type,
                   DefaultValuedAttr<TE_AttnMaskTypeAttr,
                     "::mlir::te::AttnMaskType::no_mask">:$enc_dec_attn_mask_type,
                   DefaultValuedAttr<TE_AttnBiasTypeAttr,
                     "::mlir::te::AttnBiasType::no_bias">:$core_attention_bias_type,
                   UnitAttr:$bias_requires_grad,
                   DefaultValuedAttr<TE_QkvFormatAttr,
                     "::mlir::te::QkvFormat::sbhd">:$attn_input_format,
                   UnitAttr:$apply_residual_connection_post_layernorm,
                   UnitAttr:$parallel_attention_mlp,
                   OptionalAttr<TE_AttentionWindow>:$window_size,
                   UnitAttr:$rotary_pos_interleaved,
                   OptionalAttr<I64Attr>:$max_seqlen,
                   DefaultValuedAttr<I64Attr, "1">:$tp_size,
                   UnitAttr:$sequence_parallel,
                   DefaultValuedAttr<I64Attr, "1">:$cp_size,
                   DefaultValuedAttr<I64Attr, "0">:$cp_rank,
                   DefaultValuedStrAttr<StrAttr, "all_gather">:$cp_comm_type,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe);
  let results = (outs TE_Tensor:$output);
  let assemblyFormat = [{
    $input (`encoder_output` `(` $encoder_output^ `)`)?
    (`attn_ln_weight` `(` $attn_ln_weight^ `)`)?
    (`attn_ln_bias` `(` $attn_ln_bias^ `)`)?
    `qkv_weight` `(` $qkv_weight `)` (`qkv_bias` `(` $qkv_bias^ `)`)?
    `proj_weight` `(` $proj_weight `)` (`proj_bias` `(` $proj_bias^ `)`)?
    (`inter_ln_weight` `(` $inter_ln_weight^ `)`)?
    (`inter_ln_bias` `(` $inter_ln_bias^ `)`)?
    (`inter_q_weight` `(` $inter_q_weight^ `)`)?
    (`inter_q_bias` `(` $inter_q_bias^ `)`)?
    (`inter_kv_weight` `(` $inter_kv_weight^ `)`)?
    (`inter_kv_bias` `(` $inter_kv_bias^ `)`)?
    (`inter_proj_weight` `(` $inter_proj_weight^ `)`)?
    (`inter_proj_bias` `(` $inter_proj_bias^ `)`)?
    `mlp_ln_weight` `(` $mlp_ln_weight `)`
    (`mlp_ln_bias` `(` $mlp_ln_bias^ `)`)?
    `fc1_weight` `(` $fc1_weight `)` (`fc1_bias` `(` $fc1_bias^ `)`)?
    `fc2_weight` `(` $fc2_weight `)` (`fc2_bias` `(` $fc2_bias^ `)`)?
    (`out_ln_weight` `(` $out_ln_weight^ `)`)?
    (`out_ln_bias` `(` $out_ln_bias^ `)`)?
    (`mask` `(` $attention_mask^ `)`)?
    (`enc_dec_mask` `(` $enc_dec_mask^ `)`)?
    (`enc_dec_query_mask` `(` $enc_dec_query_mask^ `)`)?
    (`rotary_pos_emb` `(` $rotary_pos_emb^ `)`)?
    (`cu_seqlens` `(` $cu_seqlens^ `)`)?
    (`cu_seqlens_kv` `(` $cu_seqlens_kv^ `)`)?
    (`key_cache` `(` $key_cache^ `)`)? (`value_cache` `(` $value_cache^ `)`)?
    (`page_table` `(` $page_table^ `)`)?
    (`core_attention_bias` `(` $core_attention_bias^ `)`)?
    (`alibi_slopes` `(` $alibi_slopes^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    int64_t getNumKVHeads();
    int64_t getHeadDim();
    int64_t getFfnHiddenSize();
  }];
}

include "TEPrimitiveOps.td"
include "TEQuantizedOps.td"
include "TEGroupedOps.td"
include "TELossOps.td"
include "TEMoeOps.td"
include "TERouterOps.td"
include "TEKernelOps.td"

#endif // TEJIT_DIALECT_TE_OPS_TD
