"""te.MultiheadAttention: [norm], fused QKV projection, [rotary], dot-product
attention, output projection, in one program; or cross-attention: queries
from the (normalized) input, keys and values from an encoder's output."""

from . import _args, _attention_specs, _fp8_weights, _thd
from ._groups import ParameterGroup, QkvGroup
from .attention import (DotProductAttention, check_cross_mask_type,
                        mask_type_of_call, refuse_for_context_parallel,
                        refuse_for_fp8_attention, run_attention_block,
                        window_of_call)
from ._kv_cache import run_kv_cache_block
from .base import TransformerEngineBaseModule, rng_fork


class MultiheadAttention(TransformerEngineBaseModule):
    """Transformer Engine's MultiheadAttention (self-attention), compiled by
    tejit as one program. Parameters, with TE's names:
    `layernorm_qkv.{layer_norm_weight, layer_norm_bias}` with
    input_layernorm=True (no bias with RMSNorm), the QKV projection under
    `layernorm_qkv.` (input_layernorm) or `qkv.`: `query_weight`,
    `key_weight`, `value_weight` and `*_bias` (fuse_qkv_params=False, TE's
    default; views of one q|k|v buffer) or `weight`/`bias`
    (fuse_qkv_params=True, interleaved per key/value group with
    qkv_weight_interleaved=True, TE's default) -- see _groups.py;
    `proj.weight` [hidden, heads * kv_channels], `proj.bias`. QKV weights
    initialized by init_method, proj's by output_layer_init_method (both
    default N(0, 0.023^2), as TE's), biases zeros, the norm weight ones
    (zeros with zero_centered_gamma). `core_attention` is the
    DotProductAttention of the same configuration (no parameters).

    forward(hidden_states [s, b, hidden] (qkv_format sbhd) / [b, s,
    hidden] (bshd)) returns the same shape, plus proj's bias with
    return_bias (not added), as TE's. attention_mask, attn_mask_type,
    window_size (the constructor's, or the forward's; normalized for the
    call's mask type) as DotProductAttention; rotary_pos_emb is TE's freqs
    [s, 1, 1, r], r even and at most kv_channels (the first r channels of
    each head rotate: rotary_percent < 1), in TE's layout: halves, or,
    with rotary_pos_interleaved=True, adjacent pairs (GPT-J's; the table
    from RotaryPositionEmbedding(interleaved=True)).

    Cross-attention (attention_type="cross", TE's): the query projection
    `layernorm_query.*` (input_layernorm; `query_weight`/`query_bias`, or
    `weight`/`bias` with fuse_qkv_params) or `query_layer.{weight, bias}`,
    applied to hidden_states, and `key_value.{key,value}_{weight,bias}`
    (or fused `weight`/`bias` [2 * groups * kv_channels, hidden], TE's
    interleaved rows [groups, 2, kv_channels] with qkv_weight_interleaved)
    applied to forward's encoder_output [s_kv, b, hidden] (sbhd) / [b,
    s_kv, hidden] (bshd). Masks no_mask, causal (top-left) and the padding
    types with TE's (query mask [b, 1, 1, s], key/value mask [b, 1, 1,
    s_kv]) pair (padded queries' attention rows are 0, as in TE), or the
    key/value mask alone; no
    rotary embeddings or sliding windows there. Attention bias and ALiBi
    (core_attention_bias_type, core_attention_bias, alibi_slopes) as
    DotProductAttention's, in the cross-attention of a cross block; not
    with tensor parallelism. With
    return_layernorm_output and input_layernorm, the forward also returns
    the normalized input (last, after proj's bias with return_bias), as
    TE's. Refused (NotImplementedError naming the argument):
    userbuffers, cu_seqlens outside qkv_format="thd", attention bias and
    ALiBi with thd, inference_params or tp_size > 1.

    Tensor parallelism (TE's): tp_group (or
    tp_size and set_tensor_parallel_group later) with
    set_parallel_mode=True (required with tp_size > 1): the QKV projection
    column-parallel, proj row-parallel. Each rank holds
    num_attention_heads_per_partition = heads/tp query heads and
    num_gqa_groups_per_partition = groups/tp key/value groups: its QKV
    parameters are those of its heads and groups (TE's local layout, the
    interleaved one too), proj.weight [hidden, heads/tp * kv_channels],
    proj.bias [hidden] (added once, after the sum over the ranks), the norm
    whole. QKV and proj weights are initialized, and the attention dropout
    seeded, under get_rng_state_tracker().fork() when a tracker is given
    (TE's rule).
    sequence_parallel=True (ignored at tp_size 1, as in TE): hidden_states
    (and a cross-attention's encoder_output) are this rank's slice of dim
    0 ([s/tp, b, hidden] sbhd, [b/tp, s, hidden] bshd), gathered before
    the QKV projection; the output is this rank's slice too (proj's output
    reduce-scattered, then its bias added). Masks and the rotary table are
    the whole sequence's, as without it. The gradients of the input
    norm's parameters and of proj.bias are then this rank's partial sums:
    they carry TE's `sequence_parallel` attribute. The attention dropout
    seed is still drawn in the tracker's fork() (TE's DotProductAttention
    leaves it to the caller's fork under sequence parallelism, Megatron-LM
    forking around the whole layer: the masks differ by rank either way).
    Not with qkv_format="thd" or inference_params.
    inference_params (TE's KV cache, InferenceParams; eval mode or
    torch.no_grad(), self-attention): a decoding step on the new tokens
    (thd, or bshd/sbhd with as many new tokens in every sequence), the
    rotary table's positions continuing after each sequence's cached
    tokens; module/_kv_cache.py.
    Under fp8_model_init (FP8 QKV and proj weights) fuse_qkv_params=True
    is required (the split weights are refused). Under
    DelayedScaling(fp8_dpa=True) the attention core runs on FP8 q, k, v
    too, and what FP8 attention does not run is refused as
    DotProductAttention's (the KV-cache steps keep it in the activation
    dtype).
    Context parallelism (cp_group, cp_global_ranks, cp_stream,
    cp_comm_type here and in set_context_parallel_group, which reaches
    core_attention): hidden_states and the output are this rank's two
    load-balanced chunks of each sequence, rotary_pos_emb the whole
    sequence's table, parameter gradients this rank's part (summed over
    the group by the caller); refusals as DotProductAttention's, and
    attention_type="cross" and sequence_parallel (docs/context-parallel.md).
    Accepted and unused: layer_number, name, checkpoint_core_attention,
    fast_zero_fill. `is_first_microbatch` is
    TE's FP8 weight caching (Linear.forward)."""

    _has_attention = True  # fp8_dpa reaches its spec

    def __init__(self, hidden_size, num_attention_heads, kv_channels=None,
                 attention_dropout=0.1, layernorm_epsilon=1e-5,
                 init_method=None, output_layer_init_method=None,
                 layer_number=None, attn_mask_type="causal",
                 window_size=None, tp_group=None, tp_size=1,
                 num_gqa_groups=None, fuse_wgrad_accumulation=False,
                 get_rng_state_tracker=None, sequence_parallel=False,
                 params_dtype=None, return_bias=False,
                 return_layernorm_output=False, input_layernorm=False,
                 attention_type="self", set_parallel_mode=False,
                 fuse_qkv_params=False, zero_centered_gamma=False,
                 qkv_weight_interleaved=True, ub_overlap_ag=False,
                 ub_overlap_rs=False, ub_overlap_rs_dgrad=False,
                 ub_bulk_dgrad=False, ub_bulk_wgrad=False, bias=True,
                 normalization="LayerNorm", device="cuda", qkv_format="sbhd",
                 name=None, rotary_pos_interleaved=False, cp_group=None,
                 cp_global_ranks=None, cp_stream=None, cp_comm_type="p2p"):
        super().__init__(params_dtype)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        owner = "MultiheadAttention"
        _args.check_defaults(
            owner, ub_overlap_ag=ub_overlap_ag,
            ub_overlap_rs=ub_overlap_rs,
            ub_overlap_rs_dgrad=ub_overlap_rs_dgrad,
            ub_bulk_dgrad=ub_bulk_dgrad, ub_bulk_wgrad=ub_bulk_wgrad)
        tp = self._init_tensor_parallel(owner, tp_group, tp_size,
                                        sequence_parallel,
                                        get_rng_state_tracker)
        _args.check_set_parallel_mode(owner, set_parallel_mode, tp,
                                      "the QKV projection", "proj")
        _args.check_sequence_parallel_format(owner, "qkv_format", qkv_format,
                                             self.sequence_parallel)
        self.set_parallel_mode = bool(set_parallel_mode)
        if attention_type not in ("self", "cross"):
            raise ValueError(f"{owner}: attention_type must be 'self' or "
                             f"'cross', got {attention_type!r}")
        self.attention_type = attention_type
        # GPT-J's rotary layout: adjacent channel pairs (TE's flag).
        self.rotary_pos_interleaved = bool(rotary_pos_interleaved)
        # TE returns the norm's output only with input_layernorm.
        self.return_layernorm_output = bool(return_layernorm_output)
        self.hidden_size = int(hidden_size)
        self.num_attention_heads = int(num_attention_heads)
        if kv_channels is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"{owner}: hidden_size ({self.hidden_size}) must be "
                    f"divisible by num_attention_heads "
                    f"({self.num_attention_heads}) unless kv_channels is "
                    f"given")
            kv_channels = self.hidden_size // self.num_attention_heads
        self.kv_channels = int(kv_channels)
        self.num_gqa_groups = int(num_gqa_groups if num_gqa_groups is not None
                                  else num_attention_heads)
        _args.check_divisible(owner, tp,
                              num_attention_heads=self.num_attention_heads,
                              num_gqa_groups=self.num_gqa_groups)
        # This rank's heads and key/value groups (TE's names).
        self.num_attention_heads_per_partition = self.num_attention_heads // tp
        self.num_gqa_groups_per_partition = self.num_gqa_groups // tp
        self.attention_dropout = _args.check_dropout(
            owner, "attention_dropout", attention_dropout)
        self.layernorm_epsilon = float(layernorm_epsilon)
        self.attn_mask_type = _args.check_mask_type(owner, "attn_mask_type",
                                                    attn_mask_type)
        if attention_type == "cross":
            check_cross_mask_type(owner, "attn_mask_type",
                                  self.attn_mask_type)
        # As TE's: the constructor's window as given, normalized for each
        # call's mask type (window_of_call); checked here.
        window = _args.check_window_size(owner, "window_size", window_size,
                                         self.attn_mask_type)
        if attention_type == "cross" and _attention_specs.window_limits(
                self.attn_mask_type, window):
            raise NotImplementedError(
                f"{owner}: window_size {tuple(window)} with cross-attention "
                f"is not supported by tejit")
        self.window_size = window_size
        self.qkv_format = _args.check_qkv_format(
            owner, "qkv_format", qkv_format,
            allow_thd=attention_type == "self")
        self.normalization = _args.check_normalization(owner, normalization)
        self.zero_centered_gamma = bool(zero_centered_gamma)
        self.input_layernorm = bool(input_layernorm)
        self.use_bias = bool(bias)
        self.return_bias = bool(return_bias)
        self.fuse_qkv_params = bool(fuse_qkv_params)
        _fp8_weights.refuse_split_qkv(owner, self._fp8_init,
                                      self.fuse_qkv_params)
        # TE: "set to False when fuse_qkv_params=False".
        self.qkv_weight_interleaved = (self.fuse_qkv_params
                                       and bool(qkv_weight_interleaved))
        self.layer_number = layer_number
        self._init_context_parallel(owner, cp_group, cp_global_ranks,
                                    cp_stream, cp_comm_type)
        norm = None
        if self.input_layernorm:
            norm = (self.normalization,
                    _args.gamma_init(self.zero_centered_gamma))
        init = init_method or _args.default_init_method()

        def group(fuse, interleaved, group_norm, parts):
            return QkvGroup(self.hidden_size,
                            self.num_attention_heads_per_partition,
                            self.num_gqa_groups_per_partition,
                            self.kv_channels, fuse, interleaved,
                            self.use_bias, group_norm, init,
                            self.params_dtype, device, parts,
                            rng_tracker=get_rng_state_tracker)
        if attention_type == "self":
            self._qkv_name = ("layernorm_qkv" if self.input_layernorm
                              else "qkv")
            self.add_module(self._qkv_name, group(
                self.fuse_qkv_params, self.qkv_weight_interleaved, norm,
                ("query", "key", "value")))
        else:
            # TE's query_layer is a plain Linear (`weight`, `bias`);
            # layernorm_query splits its names unless fuse_qkv_params.
            self._qkv_name = ("layernorm_query" if self.input_layernorm
                              else "query_layer")
            self.add_module(self._qkv_name, group(
                self.fuse_qkv_params or not self.input_layernorm, False,
                norm, ("query",)))
            self.key_value = group(self.fuse_qkv_params,
                                   self.qkv_weight_interleaved, None,
                                   ("key", "value"))
        # Its own module (TE's state_dict has its `_extra_state`), callable
        # on query/key/value of this configuration.
        self.core_attention = DotProductAttention(
            self.num_attention_heads, self.kv_channels,
            num_gqa_groups=self.num_gqa_groups,
            attention_dropout=self.attention_dropout,
            qkv_format=self.qkv_format, attn_mask_type=self.attn_mask_type,
            window_size=window if window_size is not None else None,
            layer_number=layer_number, attention_type=attention_type,
            tp_size=tp, tp_group=tp_group,
            get_rng_state_tracker=get_rng_state_tracker, cp_group=cp_group,
            cp_global_ranks=cp_global_ranks, cp_stream=cp_stream,
            cp_comm_type=cp_comm_type)
        self.proj = ParameterGroup(self.params_dtype, get_rng_state_tracker)
        self.proj.add_linear(
            "weight", "bias", self.hidden_size,
            self.num_attention_heads_per_partition * self.kv_channels,
            output_layer_init_method or _args.default_init_method(),
            self.use_bias, device)
        if self.return_bias and self.use_bias:
            self._returned_bias = "proj.bias"
        self.reset_parameters()

    def _dropout_active(self):
        return self.training and self.attention_dropout > 0

    def _context_parallel_refusals(self):
        return {"qkv_format='thd'": self.qkv_format == "thd",
                "attention_type='cross'": self.attention_type == "cross",
                "sequence_parallel=True": self.sequence_parallel}

    def _context_parallel_heads(self):
        return self.num_attention_heads, self.num_gqa_groups

    def _dropout_seed_context(self):
        # TE draws attention dropout in get_rng_state_tracker().fork()
        # (with sequence parallelism TE's DotProductAttention draws it in
        # the caller's context, which Megatron-LM forks around the whole
        # layer: forking here too gives per-rank masks either way).
        return rng_fork(self._rng_tracker)

    def _sequence_parallel_parameters(self):
        # TE's MultiheadAttention: its LayerNormLinear (layernorm_qkv, or
        # a cross-attention's layernorm_query) marks the norm's parameters,
        # its proj Linear (row-parallel with set_parallel_mode) its bias.
        names = []
        if self.input_layernorm:
            names += [f"{self._qkv_name}.layer_norm_weight",
                      f"{self._qkv_name}.layer_norm_bias"]
        if self.set_parallel_mode:
            names.append("proj.bias")
        return names

    def _layer_spec(self, mask_type=None, rotary=False, window_size=None,
                    seq_kv=None, padded_queries=False, bias=None):
        """The layer's spec for a call with `mask_type`, a rotary table of
        `rotary` channels (True: all, 0/False: none), the normalized
        `window_size` (the constructor's when None), for cross-attention
        an encoder output of `seq_kv` positions, and the attention `bias`
        (_bias.CallBias.key, None: none)."""
        mask_type = mask_type or self.attn_mask_type
        if window_size is None:
            window_size = window_of_call("MultiheadAttention",
                                         self.window_size, None, mask_type)
        return _attention_specs.multihead_attention_spec(
            self.hidden_size, self.num_attention_heads, self.kv_channels,
            self.num_gqa_groups, self.input_layernorm, self.normalization,
            self.layernorm_epsilon, self.zero_centered_gamma, mask_type,
            self.attention_dropout if self._dropout_active() else 0.0,
            self.use_bias, rotary, window_size,
            seq_kv if self.attention_type == "cross" else None,
            padded_queries, self.rotary_pos_interleaved,
            self._returns_layernorm_output(), self.tp_size,
            self.sequence_parallel, attention_bias=bias,
            context_parallel=self._context_parallel())

    def _returns_layernorm_output(self):
        return self.input_layernorm and self.return_layernorm_output

    def _cross_call(self, owner, encoder_output, mask_type, attention_mask,
                    window, rotary_pos_emb):
        """run_attention_block's `cross` for a call of a cross-attention
        module, after refusing what tejit does not compute there."""
        check_cross_mask_type(f"{owner}.forward", "attn_mask_type",
                              mask_type)
        if rotary_pos_emb is not None:
            raise NotImplementedError(
                f"{owner}: rotary_pos_emb with cross-attention is not "
                f"supported by tejit")
        if _attention_specs.window_limits(mask_type, window):
            raise NotImplementedError(
                f"{owner}: window_size {tuple(window)} with cross-attention "
                f"is not supported by tejit")
        return (encoder_output, mask_type, attention_mask, False)

    def forward(self, hidden_states, attention_mask=None,
                encoder_output=None, attn_mask_type=None, window_size=None,
                is_first_microbatch=None, checkpoint_core_attention=False,
                inference_params=None, rotary_pos_emb=None,
                core_attention_bias_type="no_bias", core_attention_bias=None,
                alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_kv=None,
                cu_seqlens_q_padded=None, cu_seqlens_kv_padded=None,
                max_seqlen_q=None, max_seqlen_kv=None, fast_zero_fill=True,
                pad_between_seqs=None):
        owner = "MultiheadAttention"
        mask_type = mask_type_of_call(owner, self.attn_mask_type,
                                      attn_mask_type)
        # The forward's sequence and bias arguments, which both paths check.
        call_arguments = dict(
            core_attention_bias_type=core_attention_bias_type,
            core_attention_bias=core_attention_bias,
            alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q,
            cu_seqlens_kv=cu_seqlens_kv,
            cu_seqlens_q_padded=cu_seqlens_q_padded,
            cu_seqlens_kv_padded=cu_seqlens_kv_padded,
            max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
            pad_between_seqs=pad_between_seqs)
        if inference_params is not None:
            _args.check_sequence_parallel_kv_cache(owner,
                                                   self.sequence_parallel)
            window = window_of_call(owner, self.window_size, window_size,
                                    mask_type)
            refuse_for_context_parallel(self, owner, self.qkv_format,
                                        mask_type, window, call_arguments,
                                        inference_params)
            outputs = run_kv_cache_block(
                self, owner, hidden_states, self.hidden_size,
                self.qkv_format, mask_type, attention_mask, rotary_pos_emb,
                self.kv_channels, self.num_gqa_groups_per_partition,
                lambda rotary: self._layer_spec(mask_type, rotary, window),
                is_first_microbatch, window, inference_params,
                cross=self.attention_type == "cross",
                encoder_output=encoder_output, **call_arguments)
            return self._results(outputs)
        if self.qkv_format == "thd":
            mask_type = _thd.thd_mask_type(owner, mask_type)
        window = window_of_call(owner, self.window_size, window_size,
                                mask_type)
        refuse_for_context_parallel(self, owner, self.qkv_format, mask_type,
                                    window, call_arguments)
        refuse_for_fp8_attention(
            owner, self.kv_channels, self.qkv_format, mask_type, window,
            core_attention_bias_type,
            self.attention_dropout if self._dropout_active() else 0.0)
        cross = None
        if self.attention_type == "cross":
            cross = self._cross_call(owner, encoder_output, mask_type,
                                     attention_mask, window, rotary_pos_emb)
            encoder_output = None  # taken: not refused below
        outputs = run_attention_block(
            self, owner, hidden_states, self.hidden_size, self.qkv_format,
            mask_type, attention_mask, rotary_pos_emb, self.kv_channels,
            lambda program_mask_type, rotary, seq_kv, padded, bias:
            self._layer_spec(program_mask_type, rotary, window, seq_kv,
                             padded, bias),
            is_first_microbatch=is_first_microbatch, window=window,
            cross=cross,
            encoder_output=encoder_output, **call_arguments)
        return self._results(outputs)

    def _results(self, outputs):
        """forward's return value from the program's outputs by name."""
        result = [outputs["output"]]
        if self.return_bias:
            result.append(self._bias_output("proj.bias", result[0]))
        if self._returns_layernorm_output():
            result.append(outputs["ln_output"])
        return tuple(result) if len(result) > 1 else result[0]

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, "
                f"num_attention_heads={self.num_attention_heads}, "
                f"kv_channels={self.kv_channels}, "
                f"num_gqa_groups={self.num_gqa_groups}, "
                f"input_layernorm={self.input_layernorm}, "
                f"attention_type={self.attention_type}, "
                f"attn_mask_type={self.attn_mask_type}, bias={self.use_bias}")
