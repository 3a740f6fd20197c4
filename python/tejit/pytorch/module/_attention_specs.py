"""What the attention modules compile, without PyTorch: the layer specs
(docs/spec-format.md) of DotProductAttention, MultiheadAttention and
TransformerLayer, the spec of one call, the parameter names TE registers,
and the row order of TE's interleaved fused QKV weight.

No torch import here: tests/python checks these against the compiler on
machines without PyTorch (loading this file by path).
"""

QKV_SPLIT = ("query", "key", "value")


def _with_tensor_parallel(layer, tp_size, sequence_parallel=False):
    """`layer` with `tp_size` when it is > 1 (the sizes stay global: the
    compiler makes one rank's shapes), and `sequence_parallel: true` with
    sequence parallelism (only with tp_size > 1, TE's rule: the input and
    output are then this rank's slice of dim 0); tp_size 1 specs stay as
    they were."""
    if int(tp_size) > 1:
        layer["tp_size"] = int(tp_size)
        if sequence_parallel:
            layer["sequence_parallel"] = True
    return layer


# The spec's cp_comm_type values (the compiler's).
CP_SPEC_COMM_TYPES = ("all_gather", "a2a")


def _with_context_parallel(layer, context_parallel):
    """`layer` with context parallelism's keys (docs/context-parallel.md)
    when `context_parallel` is (cp_size, cp_rank) or (cp_size, cp_rank,
    comm type) with cp_size > 1: cp_size, cp_rank and cp_comm_type, the
    spec's "all_gather" (the default; TE's "p2p" gives the same numbers)
    or "a2a" (all-to-alls between heads and tokens). The sequence lengths
    of the spec are then global. Specs without it stay as they were."""
    if context_parallel is not None and int(context_parallel[0]) > 1:
        cp_size, cp_rank = (int(value) for value in context_parallel[:2])
        comm_type = (context_parallel[2] if len(context_parallel) > 2
                     else "all_gather")
        if comm_type not in CP_SPEC_COMM_TYPES:
            raise ValueError(f"unknown spec cp_comm_type {comm_type!r} "
                             f"(expected one of "
                             f"{', '.join(CP_SPEC_COMM_TYPES)})")
        layer["cp_size"] = cp_size
        layer["cp_rank"] = cp_rank
        layer["cp_comm_type"] = comm_type
    return layer


def window_limits(mask_type, window_size):
    """Whether a normalized `window_size` limits anything beyond
    `mask_type`: not None, (-1, -1), or (-1, 0) with a causal mask type."""
    if window_size is None:
        return False
    window = [int(w) for w in window_size]
    return window != [-1, -1] and not (window == [-1, 0]
                                       and "causal" in mask_type)


def _with_window(layer, mask_type, window_size):
    """`layer` with `window_size: [left, right]` when the window limits
    something beyond the mask type (window_limits). Specs without a window
    stay as they were (and so their compile cache entries)."""
    if window_limits(mask_type, window_size):
        layer["window_size"] = [int(w) for w in window_size]
    return layer


# FP8 attention (DelayedScaling(fp8_dpa=True), docs/fp8-attention.md):
# cuDNN's FP8 engines take head dims that are multiples of 16 up to 256.
FP8_ATTENTION_HEAD_DIM_MULTIPLE = 16
FP8_ATTENTION_MAX_HEAD_DIM = 256


def check_fp8_attention(owner, kv_channels, qkv_format, mask_type,
                        window_size, core_attention_bias_type="no_bias",
                        format_argument="qkv_format", dropout=0.0):
    """Refuses, before anything compiles, a call that FP8 attention does
    not run: NotImplementedError naming the attribute. `mask_type` is the
    call's (an "arbitrary" mask becomes an attention bias), `window_size`
    its normalized sliding window, `core_attention_bias_type` the
    forward's, `format_argument` the module's name for its qkv_format
    (TransformerLayer's attn_input_format), `dropout` the attention
    dropout the call applies (0 in eval mode). KV-cache steps are not
    checked: their attention stays in the activation dtype."""
    what = None
    if qkv_format == "thd":
        what = f"{format_argument}='thd' (packed sequences)"
    elif core_attention_bias_type not in (None, "no_bias"):
        what = (f"core_attention_bias_type={core_attention_bias_type!r} "
                f"(an attention bias or ALiBi)")
    elif mask_type == "arbitrary":
        what = ("attn_mask_type='arbitrary' (tejit computes the mask as an "
                "attention bias)")
    elif window_limits(mask_type, window_size):
        what = f"window_size={tuple(int(w) for w in window_size)} (a " \
               f"sliding window)"
    elif (kv_channels % FP8_ATTENTION_HEAD_DIM_MULTIPLE
          or kv_channels > FP8_ATTENTION_MAX_HEAD_DIM):
        what = (f"kv_channels={kv_channels} (FP8 attention takes head dims "
                f"that are multiples of {FP8_ATTENTION_HEAD_DIM_MULTIPLE} "
                f"up to {FP8_ATTENTION_MAX_HEAD_DIM})")
    elif dropout > 0:
        # cuDNN's FP8 engines fault on it (docs/fp8-attention.md). After
        # the head dim, as the compiler's verifier checks them.
        what = (f"attention_dropout={dropout} in training (attention "
                f"dropout; set attention_dropout=0)")
    if what is not None:
        raise NotImplementedError(
            f"{owner}: {what} is not supported by FP8 attention "
            f"(DelayedScaling(fp8_dpa=True)); run this call under a recipe "
            f"with fp8_dpa=False (its attention then runs in the "
            f"activation dtype)")


# Attention bias and ALiBi (docs/attention-bias.md): the types a spec takes
# (tejit.pytorch passes TE's pre_scale_bias as a post-scale bias times the
# softmax scale), the bias shapes by TE's names ([1 or b, 1 or h, s_q,
# s_kv]) and how ALiBi slopes arrive (none: TE's vanilla slopes, computed
# by the runtime; [heads] or [batch, heads] float32).
BIAS_TYPES = ("no_bias", "post_scale_bias", "alibi")
BIAS_SHAPES = ("1hss", "b1ss", "bhss", "11ss")
ALIBI_SLOPES = ("none", "heads", "batch_heads")


def bias_shape_code(bias_batch, bias_heads, batch, heads):
    """TE's name of a bias [bias_batch, bias_heads, s_q, s_kv] for `batch`
    sequences of `heads` heads, or None when it is none of them. A dim of
    1 reads as broadcast (so [1, h] is 1hss also when batch is 1: the
    shape that takes a gradient)."""
    if bias_batch == 1 and bias_heads == heads:
        return "1hss"
    if bias_batch == 1 and bias_heads == 1:
        return "11ss"
    if bias_batch == batch and bias_heads == 1:
        return "b1ss"
    if bias_batch == batch and bias_heads == heads:
        return "bhss"
    return None


def bias_dims(code, batch, heads):
    """The leading dims (bias batch, bias heads) of a bias of shape
    `code`."""
    return (batch if code[0] == "b" else 1, heads if code[1] == "h" else 1)


def bias_spec_keys(bias):
    """The layer keys of a call's attention bias: `bias` is None (no bias)
    or (type, bias shape, requires grad, slopes) -- ("post_scale_bias",
    "1hss", True, None), ("alibi", None, False, "heads") -- as the modules
    key their programs by it."""
    if bias is None or bias[0] == "no_bias":
        return {}
    bias_type, shape, requires_grad, slopes = bias
    if bias_type not in BIAS_TYPES:
        raise ValueError(f"unknown attention bias type {bias_type!r}")
    keys = {"core_attention_bias_type": bias_type}
    if bias_type == "post_scale_bias":
        if shape not in BIAS_SHAPES:
            raise ValueError(f"unknown attention bias shape {shape!r}")
        keys["bias_shape"] = shape
        if requires_grad:
            keys["bias_requires_grad"] = True
    else:
        slopes = slopes or "none"
        if slopes not in ALIBI_SLOPES:
            raise ValueError(f"unknown ALiBi slopes {slopes!r}")
        keys["alibi_slopes"] = slopes
    return keys


def _with_bias(layer, bias):
    """`layer` with the keys of the call's attention `bias`
    (bias_spec_keys); specs without one stay as they were."""
    layer.update(bias_spec_keys(bias))
    return layer


def program_spec(name, dtype, qkv_format, seq, batch, layer, recipe=None):
    """The spec of one call: `layer` on [s, b] (sbhd) or [b, s] (bshd)
    activations of the spec dtype `dtype` ("bf16", "fp16", "fp32"), with
    `recipe` (a recipe's to_spec(), or None)."""
    spec = {"name": name, "params_dtype": dtype, "seq_length": int(seq),
            "batch_size": int(batch), "input_format": qkv_format,
            "layers": [layer]}
    if recipe is not None:
        spec["recipe"] = recipe
    return spec


# Mask types a KV-cache step compiles (docs/kv-cache-plan.md): the
# compiler makes the causal ones padding_causal_bottom_right (query j of n
# new tokens sees the cached tokens and new ones up to j) and the others
# padding (every cached and new token).
KV_CACHE_MASK_TYPES = ("no_mask", "causal", "causal_bottom_right", "padding",
                       "padding_causal", "padding_causal_bottom_right")

# The inputs a KV-cache program takes besides its layer's: where each
# sequence's new tokens start, where its cached + new tokens start, with
# paged caches the page table (right after cu_seqlens_kv; shared by the
# layers), and per attention layer its caches (layers.0.key_cache /
# value_cache).
KV_CACHE_INPUTS = ("cu_seqlens", "cu_seqlens_kv")
PAGED_KV_CACHE_INPUTS = KV_CACHE_INPUTS + ("page_table",)
KV_CACHE_TENSORS = ("key_cache", "value_cache")


def kv_cache_input_name(name):
    """"layers.0.key_cache" -> "key_cache" (a cache input, whichever layer
    prefix the program gives it); other names unchanged."""
    for cache in KV_CACHE_TENSORS:
        if name == cache or name.endswith("." + cache):
            return cache
    return name


def kv_cache_shape_spec(batch, seq, tokens, max_sequence_length,
                        page_size=None, total_pages=None):
    """The spec's top-level shape keys of one KV-cache step: `batch`
    sequences (max_batch_size: rows of the caches), at most `seq` new
    tokens in one sequence, `tokens` packed new tokens, caches of
    `max_sequence_length` positions; with `page_size` the caches are
    paged: `total_pages` pages of `page_size` rows per layer
    (docs/paged-kv-cache.md)."""
    kv_cache = {"max_sequence_length": int(max_sequence_length)}
    if page_size is not None:
        kv_cache["page_size"] = int(page_size)
        kv_cache["total_pages"] = int(total_pages)
    return {"input_format": "thd", "batch_size": int(batch),
            "seq_length": int(seq), "tokens": int(tokens),
            "kv_cache": kv_cache}


def kv_cache_shapes(batch, max_sequence_length, groups, kv_channels,
                    page_size=None, total_pages=None):
    """{input name: shape} of a KV-cache step's sequence and cache inputs
    (the caches per attention layer, unprefixed): cu_seqlens and
    cu_seqlens_kv [batch + 1], with `page_size` the page table [batch,
    max_sequence_length / page_size] and caches [total_pages, page_size,
    groups, kv_channels], else caches [batch, max_sequence_length, groups,
    kv_channels]. In the program's input order (the caches after the
    layer's parameters)."""
    shapes = {"cu_seqlens": (batch + 1,), "cu_seqlens_kv": (batch + 1,)}
    if page_size is None:
        cache = (batch, max_sequence_length, groups, kv_channels)
    else:
        shapes["page_table"] = (batch, max_sequence_length // page_size)
        cache = (total_pages, page_size, groups, kv_channels)
    shapes.update(dict.fromkeys(KV_CACHE_TENSORS, cache))
    return shapes


def kv_cache_mask_type(owner, mask_type):
    """`mask_type` for a KV-cache step (the layer's own: the compiler maps
    it), else ValueError."""
    if mask_type not in KV_CACHE_MASK_TYPES:
        raise ValueError(f"{owner}: attn_mask_type={mask_type!r} does not "
                         f"run with inference_params; use one of "
                         f"{', '.join(KV_CACHE_MASK_TYPES)}")
    return mask_type


def _with_rotary(layer, rotary, kv_channels, interleaved):
    """Adds the rotary keys to `layer`: `rotary` is the rotated width (or
    True: every channel; 0/False/None: no rotary table), written as
    rotary_dim when it is not kv_channels; `interleaved` pairs adjacent
    channels (TE's rotary_pos_interleaved)."""
    layer["rotary_pos_emb"] = bool(rotary)
    if rotary and rotary is not True and int(rotary) != kv_channels:
        layer["rotary_dim"] = int(rotary)
    if rotary and interleaved:
        layer["rotary_pos_interleaved"] = True


def dot_product_attention_spec(heads, kv_channels, groups, mask_type,
                               dropout, softmax_scale, window_size=None,
                               kv_seq_length=None, padded_queries=False,
                               attention_bias=None, context_parallel=None):
    """`kv_seq_length`: the keys' and values' length when it is not the
    queries' (cross-attention), else None; `padded_queries`: the queries
    have a padding mask of their own (input `query_mask`, TE's pair);
    `attention_bias`: the call's attention bias (bias_spec_keys);
    `context_parallel`: (cp_size, cp_rank[, comm type]) or None
    (_with_context_parallel)."""
    layer = {"type": "DotProductAttention", "num_attention_heads": heads,
             "kv_channels": kv_channels, "num_gqa_groups": groups,
             "attn_mask_type": mask_type, "attention_dropout": dropout,
             "softmax_scale": softmax_scale}
    if kv_seq_length is not None:
        layer["kv_seq_length"] = int(kv_seq_length)
    if padded_queries:
        layer["padded_queries"] = True
    _with_bias(layer, attention_bias)
    _with_context_parallel(layer, context_parallel)
    return _with_window(layer, mask_type, window_size)


def multihead_attention_spec(hidden, heads, kv_channels, groups,
                             input_layernorm, normalization, eps,
                             zero_centered_gamma, mask_type, dropout, bias,
                             rotary, window_size=None, kv_seq_length=None,
                             padded_queries=False, rotary_interleaved=False,
                             return_layernorm_output=False, tp_size=1,
                             sequence_parallel=False, attention_bias=None,
                             context_parallel=None):
    """`kv_seq_length`: the encoder output's length for cross-attention
    (attention_type "cross"), else None; `padded_queries`: the queries
    have a padding mask of their own (`enc_dec_query_mask`); `tp_size`:
    tensor parallelism (docs/tensor-parallel.md; sizes stay global), with
    `sequence_parallel` its sequence parallelism; `attention_bias`: the
    call's attention bias (bias_spec_keys; the cross-attention's in a
    cross block); `context_parallel`: (cp_size, cp_rank[, comm type]) or None
    (_with_context_parallel)."""
    layer = {"type": "MultiheadAttention", "hidden_size": hidden,
             "num_attention_heads": heads, "kv_channels": kv_channels,
             "num_gqa_groups": groups, "input_layernorm": input_layernorm,
             "normalization": normalization, "layernorm_epsilon": eps,
             "zero_centered_gamma": zero_centered_gamma,
             "attn_mask_type": mask_type, "attention_dropout": dropout,
             "bias": bias}
    _with_rotary(layer, rotary, kv_channels, rotary_interleaved)
    if kv_seq_length is not None:
        layer["attention_type"] = "cross"
        layer["kv_seq_length"] = int(kv_seq_length)
        if padded_queries:
            layer["padded_queries"] = True
    if return_layernorm_output:
        layer["return_layernorm_output"] = True
    _with_tensor_parallel(layer, tp_size, sequence_parallel)
    _with_bias(layer, attention_bias)
    _with_context_parallel(layer, context_parallel)
    return _with_window(layer, mask_type, window_size)


def transformer_layer_spec(hidden, ffn, heads, kv_channels, groups, eps,
                           normalization, zero_centered_gamma, activation,
                           hidden_dropout, attention_dropout, mask_type,
                           bias, post_layernorm_residual, rotary,
                           window_size=None, decoder=None,
                           output_layernorm=False,
                           parallel_attention_mlp=False,
                           rotary_interleaved=False, drop_path_rate=0.0,
                           tp_size=1, sequence_parallel=False,
                           attention_bias=None, context_parallel=None):
    """`decoder`: (encoder output length, enc_dec_attn_mask_type, whether
    the queries are padded too) for layer_type "decoder", else None;
    `output_layernorm`: TE's post-LN layer (the norm after the output
    instead of before the attention); `parallel_attention_mlp`: TE's
    parallel block (attention and MLP both read the input); `tp_size`:
    tensor parallelism (docs/tensor-parallel.md; sizes stay global), with
    `sequence_parallel` its sequence parallelism; `attention_bias`: the
    call's attention bias (bias_spec_keys; a decoder's
    self-attention's); `context_parallel`: (cp_size, cp_rank[, comm
    type]) or None (_with_context_parallel)."""
    layer = {"type": "TransformerLayer", "hidden_size": hidden,
             "ffn_hidden_size": ffn, "num_attention_heads": heads,
             "num_gqa_groups": groups, "kv_channels": kv_channels,
             "layernorm_epsilon": eps, "normalization": normalization,
             "zero_centered_gamma": zero_centered_gamma,
             "activation": activation, "hidden_dropout": hidden_dropout,
             "attention_dropout": attention_dropout,
             "self_attn_mask_type": mask_type, "bias": bias,
             "apply_residual_connection_post_layernorm":
                 post_layernorm_residual}
    _with_rotary(layer, rotary, kv_channels, rotary_interleaved)
    if output_layernorm:
        layer["output_layernorm"] = True
    if parallel_attention_mlp:
        layer["parallel_attention_mlp"] = True
    if drop_path_rate:
        layer["drop_path_rate"] = float(drop_path_rate)
    if decoder is not None:
        layer["layer_type"] = "decoder"
        layer["kv_seq_length"] = int(decoder[0])
        layer["enc_dec_attn_mask_type"] = decoder[1]
        if decoder[2]:
            layer["padded_queries"] = True
    _with_tensor_parallel(layer, tp_size, sequence_parallel)
    _with_bias(layer, attention_bias)
    _with_context_parallel(layer, context_parallel)
    return _with_window(layer, mask_type, window_size)


def qkv_parameter_names(fuse_qkv_params, bias, norm):
    """TE's parameter names in `layernorm_qkv` / `qkv`, in registration
    order; `norm` None, "LayerNorm" or "RMSNorm"."""
    names = []
    if norm is not None:
        names.append("layer_norm_weight")
        if norm == "LayerNorm":
            names.append("layer_norm_bias")
    if fuse_qkv_params:
        return names + ["weight"] + (["bias"] if bias else [])
    names += [f"{part}_weight" for part in QKV_SPLIT]
    if bias:
        names += [f"{part}_bias" for part in QKV_SPLIT]
    return names


def cross_parameter_names(fuse_qkv_params, bias, norm):
    """TE's parameter names of a cross-attention MultiheadAttention's
    query and key/value projections, in registration order; `norm` None
    (`query_layer`), "LayerNorm" or "RMSNorm" (`layernorm_query`)."""
    if norm is None:
        query = ["query_layer.weight"] + (["query_layer.bias"] if bias
                                          else [])
    else:
        query = ["layernorm_query.layer_norm_weight"]
        if norm == "LayerNorm":
            query.append("layernorm_query.layer_norm_bias")
        kind = "" if fuse_qkv_params else "query_"
        query += [f"layernorm_query.{kind}weight"]
        query += [f"layernorm_query.{kind}bias"] if bias else []
    if fuse_qkv_params:
        key_value = ["key_value.weight"] + (["key_value.bias"] if bias
                                            else [])
    else:
        key_value = ["key_value.key_weight", "key_value.value_weight"]
        key_value += (["key_value.key_bias", "key_value.value_bias"]
                      if bias else [])
    return query + key_value


CROSS_MASK_TYPES = ("no_mask", "causal", "padding", "padding_causal")


def interleaved_qkv_rows(heads, groups, kv_channels):
    """For TE's interleaved fused QKV rows [groups, heads / groups + 2,
    kv_channels] (each group's queries, then its key, then its value): the
    source row of each row of the q | k | v order the program takes."""
    per_group = heads // groups
    block = (per_group + 2) * kv_channels

    def rows(group, slot):
        start = group * block + slot * kv_channels
        return list(range(start, start + kv_channels))

    query = [row for g in range(groups) for i in range(per_group)
             for row in rows(g, i)]
    key = [row for g in range(groups) for row in rows(g, per_group)]
    value = [row for g in range(groups) for row in rows(g, per_group + 1)]
    return query + key + value
