"""te.TransformerLayer: self-attention block (norm, QKV, attention,
projection, dropout + residual), for a decoder a cross-attention block over
the encoder's output (the same, queries from this layer), then the MLP
block (LayerNormMLP, dropout + residual), in one program."""

from . import _args, _attention_specs, _fp8_weights, _thd
from .attention import (check_cross_mask_type, mask_type_of_call,
                        refuse_for_context_parallel, refuse_for_fp8_attention,
                        run_attention_block, window_of_call)
from ._kv_cache import run_kv_cache_block
from .base import TransformerEngineBaseModule, rng_fork
from .layernorm import LayerNorm
from .layernorm_mlp import ACTIVATIONS, LayerNormMLP, with_activation_params
from .multi_head_attention import MultiheadAttention
from .rmsnorm import RMSNorm


class TransformerLayer(TransformerEngineBaseModule):
    """Transformer Engine's TransformerLayer, compiled by tejit as one
    program. Submodules and parameters have TE's names: `self_attention`
    (a MultiheadAttention with input_layernorm: its `layernorm_qkv.*` and
    `proj.*`; without input_layernorm, `qkv.*`, with output_layernorm),
    for layer_type="decoder" `inter_attention` (a
    cross-attention MultiheadAttention with input_layernorm:
    `layernorm_query.*`, `key_value.*`, `proj.*`), and `layernorm_mlp` (a
    LayerNormMLP), and with output_layernorm (TE's post-LN layer, BERT's:
    no norm before the self-attention, one after the last residual)
    `layernorm` (a LayerNorm or RMSNorm: `weight`, `bias`); init_method
    initializes QKV and fc1,
    output_layer_init_method proj and fc2 (both default N(0, 0.023^2), as
    TE's). The submodules also run on their own (each compiles its own
    program). activation and activation_params as LayerNormMLP's
    (activation="clamped_swiglu" with activation_params {limit, alpha,
    glu_linear_offset}: GPT-OSS's MLP).

    forward(hidden_states [s, b, hidden] (attn_input_format sbhd) / [b, s,
    hidden] (bshd)) returns the same shape. attention_mask,
    self_attn_mask_type, window_size (the sliding window; the forward's
    overrides the constructor's) and rotary_pos_emb as
    MultiheadAttention's. A decoder's forward takes encoder_output [s_kv,
    b, hidden] (sbhd) / [b, s_kv, hidden] (bshd) and enc_dec_attn_mask for
    the cross-attention, whose mask type is enc_dec_attn_mask_type (the
    constructor's, default "no_mask", or the forward's): no_mask, causal
    (top-left) or the padding types with TE's (query mask, key/value mask
    [b, 1, 1, s_kv]) pair (padded queries' cross-attention rows are 0, as
    in TE), or the key/value mask alone; rotary_pos_emb applies to the
    self-attention only, as in TE; so do core_attention_bias_type,
    core_attention_bias and alibi_slopes (TE's attention bias and ALiBi,
    as DotProductAttention's; not with tensor parallelism).
    hidden_dropout and attention_dropout
    apply in training mode only (module.train()); in eval mode the layer
    compiles without dropout. Refused (NotImplementedError naming the
    argument): enc_dec_window_size other than None or (-1, -1),
    ub_tp_comm_overlap, cu_seqlens outside attn_input_format="thd",
    attention bias and ALiBi with thd, inference_params or tp_size > 1.
    inference_params (TE's KV cache) as MultiheadAttention's, in encoder
    layers. DelayedScaling(fp8_dpa=True): FP8 attention cores (the
    self-attention's, a decoder's cross-attention's), refusals as
    MultiheadAttention's.

    Tensor parallelism (TE's): tp_group (or
    tp_size and set_tensor_parallel_group later, which reaches the
    submodules too) and set_parallel_mode=True (required with tp_size > 1;
    TE passes it to its attention and MLP): the attention blocks and the
    MLP are split as MultiheadAttention's and LayerNormMLP's are, the rest
    (norms, residuals, dropouts) replicated. get_rng_state_tracker
    initializes the GEMM weights under its fork(); the layer's one dropout
    stream (hidden and attention dropout, drop path) is seeded from torch's
    default generator, since the hidden dropout must draw the same masks
    on every tensor-parallel rank (docs/tensor-parallel.md).

    sequence_parallel=True (ignored at tp_size 1, as in TE; passed to the
    submodules): hidden_states, encoder_output and the output are this
    rank's slice of dim 0 ([s/tp, b, hidden] sbhd, [b/tp, s, hidden]
    bshd): the norms, dropouts and residuals run on the slice, each
    column-parallel GEMM's input is all-gathered and each row-parallel
    GEMM's output reduce-scattered before its bias. Masks and the rotary
    table are the whole sequence's. The gradients of the norms' parameters
    and of the proj and fc2 biases are then this rank's partial sums: they
    carry TE's `sequence_parallel` attribute (set by the submodules, and
    by the output layernorm). The layer's dropout stream is then seeded in
    get_rng_state_tracker().fork() when a tracker is given: the hidden
    dropout acts on each rank's own tokens, whose masks must differ, as
    Megatron-LM forks the tracker around the layer under sequence
    parallelism. With seq_length given (TE's), an sbhd input must hold
    seq_length / tp_size positions. Not with attn_input_format="thd" or
    inference_params.

    Under fp8_model_init (FP8 GEMM weights, the submodules' too)
    fuse_qkv_params=True is required (the split QKV weights are refused).

    Context parallelism (cp_group and the rest, or
    set_context_parallel_group, which reaches the submodules): as
    MultiheadAttention's, the whole layer on this rank's two load-balanced
    chunks of each sequence (the per-token parts need nothing more); not
    with layer_type="decoder", attn_input_format="thd" or
    sequence_parallel (docs/context-parallel.md).

    Accepted and unused: layer_number, micro_batch_size, the
    ub_* switches (they only act with ub_tp_comm_overlap), name,
    checkpoint_core_attention, fast_zero_fill.
    `is_first_microbatch` is TE's FP8 weight caching (Linear.forward)."""

    _has_attention = True  # fp8_dpa reaches its spec
    activation_params = None  # (pickles from before clamped_swiglu)

    def __init__(self, hidden_size, ffn_hidden_size, num_attention_heads,
                 num_gqa_groups=None, layernorm_epsilon=1e-5,
                 hidden_dropout=0.1, attention_dropout=0.1, init_method=None,
                 output_layer_init_method=None, layer_number=None,
                 kv_channels=None, self_attn_mask_type="causal",
                 window_size=None, enc_dec_attn_mask_type="no_mask",
                 enc_dec_window_size=None, tp_group=None, tp_size=1,
                 params_dtype=None, get_rng_state_tracker=None,
                 fuse_wgrad_accumulation=False, seq_length=None,
                 micro_batch_size=None, sequence_parallel=False,
                 apply_residual_connection_post_layernorm=False,
                 output_layernorm=False, parallel_attention_mlp=False,
                 layer_type="encoder", drop_path_rate=0.0,
                 set_parallel_mode=False, fuse_qkv_params=False,
                 rotary_pos_interleaved=False, zero_centered_gamma=False,
                 qkv_weight_interleaved=True, ub_tp_comm_overlap=False,
                 ub_overlap_ag=True, ub_overlap_rs=True,
                 ub_overlap_rs_dgrad=False, ub_bulk_dgrad=True,
                 ub_bulk_wgrad=True, bias=True, activation="gelu",
                 activation_params=None, normalization="LayerNorm",
                 device="cuda", attn_input_format="sbhd", name=None,
                 cp_group=None, cp_global_ranks=None, cp_stream=None,
                 cp_comm_type="p2p"):
        super().__init__(params_dtype)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        owner = "TransformerLayer"
        _args.check_defaults(owner, ub_tp_comm_overlap=ub_tp_comm_overlap)
        tp = self._init_tensor_parallel(owner, tp_group, tp_size,
                                        sequence_parallel,
                                        get_rng_state_tracker)
        _fp8_weights.refuse_split_qkv(owner, self._fp8_init,
                                      fuse_qkv_params)
        _args.check_set_parallel_mode(owner, set_parallel_mode, tp,
                                      "QKV and fc1", "proj and fc2")
        _args.check_sequence_parallel_format(
            owner, "attn_input_format", attn_input_format,
            self.sequence_parallel)
        self.set_parallel_mode = bool(set_parallel_mode)
        # TE's: the whole sequence's length, checked against an sbhd
        # input's under sequence parallelism.
        self.seq_length = seq_length
        _args.check_divisible(
            owner, tp, num_attention_heads=int(num_attention_heads),
            num_gqa_groups=int(num_gqa_groups if num_gqa_groups is not None
                               else num_attention_heads),
            ffn_hidden_size=int(ffn_hidden_size))
        if layer_type not in ("encoder", "decoder"):
            raise ValueError(f"{owner}: layer_type must be 'encoder' or "
                             f"'decoder', got {layer_type!r}")
        self.layer_type = layer_type
        self.output_layernorm = bool(output_layernorm)
        # GPT-J's rotary layout: adjacent channel pairs.
        self.rotary_pos_interleaved = bool(rotary_pos_interleaved)
        # TE's parallel block (GPT-J, PaLM): y = x + dropout(attention(x) +
        # mlp(x)), with TE's constraints.
        self.parallel_attention_mlp = bool(parallel_attention_mlp)
        for name, value in (
                ("layer_type='decoder'", layer_type == "decoder"),
                ("apply_residual_connection_post_layernorm=True",
                 apply_residual_connection_post_layernorm),
                ("output_layernorm=True", output_layernorm)):
            if self.parallel_attention_mlp and value:
                raise ValueError(f"{owner}: parallel_attention_mlp=True is "
                                 f"not supported with {name} (nor in "
                                 f"Transformer Engine)")
        # TE's DropPath (stochastic depth) after the self-attention block
        # and after the MLP, in training mode.
        self.drop_path_rate = _args.check_dropout(owner, "drop_path_rate",
                                                  drop_path_rate)
        _args.check_no_window(owner, "enc_dec_window_size",
                              enc_dec_window_size,
                              "no sliding window in cross-attention")
        self.enc_dec_attn_mask_type = _args.check_mask_type(
            owner, "enc_dec_attn_mask_type", enc_dec_attn_mask_type)
        if layer_type == "decoder":
            check_cross_mask_type(owner, "enc_dec_attn_mask_type",
                                  self.enc_dec_attn_mask_type)
        if activation not in ACTIVATIONS:
            raise ValueError(f"{owner}: activation {activation!r} is not "
                             f"supported by tejit; choose one of "
                             f"{', '.join(ACTIVATIONS)}")
        self.activation_params = _args.activation_params_of(
            owner, activation, activation_params)
        self.hidden_size = int(hidden_size)
        self.ffn_hidden_size = int(ffn_hidden_size)
        self.num_attention_heads = int(num_attention_heads)
        # (self_attention's, set again below once it is built; read by
        # _init_context_parallel's a2a check before.)
        self.num_gqa_groups = int(num_gqa_groups if num_gqa_groups is not None
                                  else num_attention_heads)
        self.hidden_dropout = _args.check_dropout(owner, "hidden_dropout",
                                                  hidden_dropout)
        self.attention_dropout = _args.check_dropout(
            owner, "attention_dropout", attention_dropout)
        self.layernorm_epsilon = float(layernorm_epsilon)
        self.self_attn_mask_type = _args.check_mask_type(
            owner, "self_attn_mask_type", self_attn_mask_type)
        # As TE's: the constructor's window as given, normalized for each
        # call's mask type (window_of_call); checked here.
        window = _args.check_window_size(owner, "window_size", window_size,
                                         self.self_attn_mask_type)
        self.window_size = window_size
        self.attn_input_format = _args.check_qkv_format(
            owner, "attn_input_format", attn_input_format,
            allow_thd=layer_type != "decoder")
        self.normalization = _args.check_normalization(owner, normalization)
        self.zero_centered_gamma = bool(zero_centered_gamma)
        self.apply_residual_connection_post_layernorm = bool(
            apply_residual_connection_post_layernorm)
        self.activation = activation
        self.use_bias = bool(bias)
        self.layer_number = layer_number
        self._init_context_parallel(owner, cp_group, cp_global_ranks,
                                    cp_stream, cp_comm_type)
        # What TE's self_attention and inter_attention share.
        attention_kwargs = dict(
            kv_channels=kv_channels, attention_dropout=attention_dropout,
            layernorm_epsilon=layernorm_epsilon, init_method=init_method,
            output_layer_init_method=output_layer_init_method,
            layer_number=layer_number, num_gqa_groups=num_gqa_groups,
            params_dtype=self.params_dtype, fuse_qkv_params=fuse_qkv_params,
            fuse_wgrad_accumulation=self.fuse_wgrad_accumulation,
            zero_centered_gamma=zero_centered_gamma,
            qkv_weight_interleaved=qkv_weight_interleaved, bias=bias,
            normalization=normalization, device=device,
            qkv_format=self.attn_input_format, tp_group=tp_group,
            tp_size=tp, set_parallel_mode=set_parallel_mode,
            sequence_parallel=self.sequence_parallel,
            get_rng_state_tracker=get_rng_state_tracker, cp_group=cp_group,
            cp_global_ranks=cp_global_ranks, cp_stream=cp_stream,
            cp_comm_type=cp_comm_type)
        self.self_attention = MultiheadAttention(
            self.hidden_size, self.num_attention_heads,
            attn_mask_type=self.self_attn_mask_type,
            window_size=window if window_size is not None else None,
            input_layernorm=not self.output_layernorm, attention_type="self",
            rotary_pos_interleaved=self.rotary_pos_interleaved,
            **attention_kwargs)
        self.kv_channels = self.self_attention.kv_channels
        self.num_gqa_groups = self.self_attention.num_gqa_groups
        if layer_type == "decoder":
            # TE's: registered between self_attention and layernorm_mlp.
            self.inter_attention = MultiheadAttention(
                self.hidden_size, self.num_attention_heads,
                attn_mask_type=self.enc_dec_attn_mask_type,
                input_layernorm=True, attention_type="cross",
                **attention_kwargs)
        self.layernorm_mlp = LayerNormMLP(
            self.hidden_size, self.ffn_hidden_size, eps=layernorm_epsilon,
            init_method=init_method, bias=bias, normalization=normalization,
            activation=activation, activation_params=activation_params,
            output_layer_init_method=output_layer_init_method,
            params_dtype=self.params_dtype,
            zero_centered_gamma=zero_centered_gamma, device=device,
            tp_group=tp_group, tp_size=tp,
            set_parallel_mode=set_parallel_mode,
            sequence_parallel=self.sequence_parallel,
            get_rng_state_tracker=get_rng_state_tracker)
        if self.output_layernorm:
            norm = (LayerNorm if self.normalization == "LayerNorm"
                    else RMSNorm)
            # TE passes sequence_parallel (its parameters get the
            # attribute).
            self.layernorm = norm(self.hidden_size, eps=layernorm_epsilon,
                                  sequence_parallel=self.sequence_parallel,
                                  params_dtype=self.params_dtype,
                                  zero_centered_gamma=zero_centered_gamma,
                                  device=device)

    def _dropout_active(self):
        return self.training and (self.hidden_dropout > 0
                                  or self.attention_dropout > 0
                                  or self.drop_path_rate > 0)

    def _context_parallel_refusals(self):
        return {"attn_input_format='thd'": self.attn_input_format == "thd",
                "layer_type='decoder'": self.layer_type == "decoder",
                "sequence_parallel=True": self.sequence_parallel}

    def _context_parallel_heads(self):
        return self.num_attention_heads, self.num_gqa_groups

    def _dropout_seed_context(self):
        # The layer's one dropout stream draws its hidden dropout, drop
        # path and attention dropout. Without sequence parallelism the
        # hidden dropout acts on the hidden states every rank holds whole,
        # so the seed comes from torch's default generator, the same on
        # every rank (base's context; docs/tensor-parallel.md). With it
        # each rank holds its own tokens, whose masks must differ by rank:
        # the seed is drawn in get_rng_state_tracker().fork() when a
        # tracker is given, as Megatron-LM runs the whole layer in the
        # tracker's fork under sequence parallelism (and TE's attention
        # then draws in that context too).
        if self._sequence_parallel_active():
            return rng_fork(self._rng_tracker)
        return super()._dropout_seed_context()

    def _layer_spec(self, mask_type=None, rotary=False, window_size=None,
                    seq_kv=None, enc_dec_mask_type=None,
                    padded_queries=False, bias=None):
        """The layer's spec for a call with `mask_type`, a rotary table or
        not, and the normalized `window_size` (the constructor's when
        None); a decoder's with an encoder output of `seq_kv` positions and
        the cross-attention's `enc_dec_mask_type` (the constructor's when
        None); `bias` the self-attention's attention bias
        (_bias.CallBias.key, None: none)."""
        mask_type = mask_type or self.self_attn_mask_type
        if window_size is None:
            window_size = window_of_call("TransformerLayer", self.window_size,
                                         None, mask_type)
        active = self._dropout_active()
        layer = _attention_specs.transformer_layer_spec(
            self.hidden_size, self.ffn_hidden_size, self.num_attention_heads,
            self.kv_channels, self.num_gqa_groups, self.layernorm_epsilon,
            self.normalization, self.zero_centered_gamma, self.activation,
            self.hidden_dropout if active else 0.0,
            self.attention_dropout if active else 0.0,
            mask_type, self.use_bias,
            self.apply_residual_connection_post_layernorm, rotary,
            window_size,
            (seq_kv, enc_dec_mask_type or self.enc_dec_attn_mask_type,
             padded_queries)
            if self.layer_type == "decoder" else None,
            self.output_layernorm, self.parallel_attention_mlp,
            self.rotary_pos_interleaved,
            self.drop_path_rate if active else 0.0, self.tp_size,
            self.sequence_parallel, attention_bias=bias,
            context_parallel=self._context_parallel())
        return with_activation_params(layer, self.activation_params)

    def forward(self, hidden_states, attention_mask=None,
                self_attn_mask_type=None, window_size=None,
                encoder_output=None, enc_dec_attn_mask=None,
                enc_dec_attn_mask_type=None, enc_dec_window_size=None,
                is_first_microbatch=None, checkpoint_core_attention=False,
                inference_params=None, rotary_pos_emb=None,
                core_attention_bias_type="no_bias", core_attention_bias=None,
                alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_kv=None,
                cu_seqlens_q_padded=None, cu_seqlens_kv_padded=None,
                max_seqlen_q=None, max_seqlen_kv=None, fast_zero_fill=True,
                pad_between_seqs=None):
        owner = "TransformerLayer"
        mask_type = mask_type_of_call(owner, self.self_attn_mask_type,
                                      self_attn_mask_type)
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
            self._refuse_for_context_parallel(owner, mask_type, window,
                                              call_arguments,
                                              inference_params)
            _args.check_unsupported(f"{owner}.forward",
                                    enc_dec_attn_mask=enc_dec_attn_mask)
            outputs = run_kv_cache_block(
                self, owner, hidden_states, self.hidden_size,
                self.attn_input_format, mask_type, attention_mask,
                rotary_pos_emb, self.kv_channels,
                self.self_attention.num_gqa_groups_per_partition,
                lambda rotary: self._layer_spec(mask_type, rotary, window),
                is_first_microbatch, window, inference_params,
                cross=self.layer_type == "decoder",
                encoder_output=encoder_output, **call_arguments)
            return outputs["output"]
        if self.attn_input_format == "thd":
            mask_type = _thd.thd_mask_type(owner, mask_type)
        self._check_sequence_parallel_length(owner, hidden_states)
        window = window_of_call(owner, self.window_size, window_size,
                                mask_type)
        self._refuse_for_context_parallel(owner, mask_type, window,
                                          call_arguments)
        refuse_for_fp8_attention(
            owner, self.kv_channels, self.attn_input_format, mask_type,
            window, core_attention_bias_type,
            self.attention_dropout if self._dropout_active() else 0.0,
            format_argument="attn_input_format")
        cross, enc_dec_mask_type = None, None
        if self.layer_type == "decoder":
            enc_dec_mask_type = check_cross_mask_type(
                f"{owner}.forward", "enc_dec_attn_mask_type",
                mask_type_of_call(owner, self.enc_dec_attn_mask_type,
                                  enc_dec_attn_mask_type))
            _args.check_no_window(f"{owner}.forward", "enc_dec_window_size",
                                  enc_dec_window_size,
                                  "no sliding window in cross-attention")
            cross = (encoder_output, enc_dec_mask_type, enc_dec_attn_mask,
                     True)
            encoder_output = None  # taken: not refused below
        else:
            _args.check_unsupported(f"{owner}.forward",
                                    enc_dec_attn_mask=enc_dec_attn_mask)
        outputs = run_attention_block(
            self, owner, hidden_states, self.hidden_size,
            self.attn_input_format, mask_type, attention_mask,
            rotary_pos_emb, self.kv_channels,
            lambda program_mask_type, rotary, seq_kv, padded, bias:
            self._layer_spec(program_mask_type, rotary, window, seq_kv,
                             enc_dec_mask_type, padded, bias),
            is_first_microbatch=is_first_microbatch, window=window,
            cross=cross,
            encoder_output=encoder_output, **call_arguments)
        return outputs["output"]

    def _refuse_for_context_parallel(self, owner, mask_type, window,
                                     call_arguments, inference_params=None):
        """refuse_for_context_parallel with TransformerLayer's argument
        names (attn_input_format, self_attn_mask_type)."""
        refuse_for_context_parallel(
            self, owner, self.attn_input_format, mask_type, window,
            call_arguments, inference_params,
            format_argument="attn_input_format",
            mask_argument="self_attn_mask_type")

    def _check_sequence_parallel_length(self, owner, hidden_states):
        """TE's check under sequence parallelism with seq_length given: an
        sbhd input holds seq_length / tp_size positions."""
        seq_length = getattr(self, "seq_length", None)
        if (seq_length is None or not self._sequence_parallel_active()
                or self.attn_input_format != "sbhd"
                or getattr(hidden_states, "dim", lambda: 0)() != 3):
            return
        want = int(seq_length) // self.tp_size
        if hidden_states.shape[0] != want:
            raise ValueError(
                f"{owner}: with sequence_parallel, hidden_states must be "
                f"this rank's slice of the sequence, seq_length / tp_size "
                f"= {seq_length} / {self.tp_size} = {want} positions, got "
                f"{list(hidden_states.shape)}")

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, "
                f"ffn_hidden_size={self.ffn_hidden_size}, "
                f"num_attention_heads={self.num_attention_heads}, "
                f"num_gqa_groups={self.num_gqa_groups}, "
                f"layer_type={self.layer_type}, "
                f"activation={self.activation}, "
                f"normalization={self.normalization}")
