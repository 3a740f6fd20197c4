"""te.DotProductAttention: softmax(q k^T * scale + bias + mask) v over [s,
b, h, d] (sbhd) or [b, s, h, d] (bshd) query/key/value, on cuDNN's fused
attention (runtime); and what the attention modules share: the call's mask
type, attention mask, attention bias (_bias.py), rotary table, the
forward arguments they refuse, and what FP8 attention (a recipe's fp8_dpa)
refuses.

Unlike the per-token modules these compile for the call's real sequence
length, batch size and layout (base.py): the JIT key holds (qkv_format,
seq, batch), and the program is further keyed by the call's mask type,
sliding window, whether dropout is on (training mode with p > 0), whether
a rotary table is given and the attention bias (type, shape, whether it
takes a gradient, ALiBi slopes).
"""
import math

import torch

from .. import fp8
from . import _args, _attention_specs, _bias, _kv_cache, _thd
from .base import TransformerEngineBaseModule, rng_fork


def _one_of_pair(value, message):
    """`value`, or the one tensor of a TE (query, key/value) pair of equal
    tensors; NotImplementedError(message) for a pair of different ones."""
    if not isinstance(value, (tuple, list)):
        return value
    if len(value) != 2 or not (value[0] is value[1]
                               or torch.equal(value[0], value[1])):
        raise NotImplementedError(message)
    return value[0]


def _distinct_pair(mask_type, attention_mask):
    """Whether `attention_mask` is TE's (query mask, key/value mask) pair
    of two tensors for a padding mask type: then the queries and the keys
    are padded apart, even when they are equal (comparing them would
    wait for the GPU)."""
    return ("padding" in mask_type
            and isinstance(attention_mask, (tuple, list))
            and len(attention_mask) == 2
            and attention_mask[0] is not attention_mask[1])


def _sequence_dims(qkv_format, tensor):
    """(seq, batch) of an [s, b, ...] (sbhd) or [b, s, ...] (bshd) tensor."""
    if qkv_format == "sbhd":
        return tensor.shape[0], tensor.shape[1]
    return tensor.shape[1], tensor.shape[0]


def mask_type_of_call(owner, constructed, given):
    """The mask type of a call: the forward's when given (TE's override),
    else the constructor's."""
    if given is None:
        return constructed
    return _args.check_mask_type(owner, "attn_mask_type", given)


def window_of_call(owner, constructed, given, mask_type):
    """The sliding window (left, right) of a call: the forward's
    window_size when given (TE's override), else `constructed` (the
    constructor's, or None), normalized for the call's mask type
    (_args.check_window_size)."""
    if given is not None:
        return _args.check_window_size(f"{owner}.forward", "window_size",
                                       given, mask_type)
    return _args.check_window_size(owner, "window_size", constructed,
                                   mask_type)


def check_bool_mask(owner, mask_type, attention_mask, device):
    """Refuses a missing `attention_mask` (`mask_type` needs one), or one
    that is not a bool tensor on `device` (True = masked out, as in TE)."""
    if attention_mask is None:
        raise ValueError(f"{owner}: attn_mask_type={mask_type!r} needs an "
                         f"attention_mask (bool, True = masked out)")
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"{owner}: attention_mask must be a torch.Tensor, "
                        f"got {type(attention_mask).__name__}")
    if attention_mask.dtype != torch.bool:
        raise TypeError(f"{owner}: attention_mask must be torch.bool (True "
                        f"= masked out), as in Transformer Engine; got "
                        f"{attention_mask.dtype}")
    if attention_mask.device != device:
        raise ValueError(f"{owner}: attention_mask is on "
                         f"{attention_mask.device}, the input on {device}")


def attention_mask_input(owner, mask_type, attention_mask, batch, seq,
                         device):
    """The program's mask input for `mask_type`: {"attention_mask": [b, 1,
    1, s] bool} for the padding types, else {} -- TE ignores a mask given
    with the other types, and so does tejit (an "arbitrary" mask is part of
    the call's bias: _bias.call_bias). True means masked out, as in TE."""
    if "padding" not in mask_type:
        return {}
    # TE's (query mask, key/value mask) pair: self-attention has one.
    attention_mask = _one_of_pair(
        attention_mask, f"{owner}: different query and key/value padding "
        f"masks (cross-attention) are not supported by tejit")
    check_bool_mask(owner, mask_type, attention_mask, device)
    shape = (batch, 1, 1, seq)
    if tuple(attention_mask.shape) != shape:
        raise ValueError(f"{owner}: a padding attention_mask must be [b, 1, "
                         f"1, s] = {list(shape)} (True = padding), got "
                         f"{list(attention_mask.shape)}")
    return {"attention_mask": attention_mask.contiguous()}


def check_query_mask(owner, query_mask, batch, seq_q, device):
    """Refuses a cross-attention pair's query mask unless it is bool [b,
    1, 1, s_q] on `device`."""
    if (not isinstance(query_mask, torch.Tensor)
            or query_mask.dtype != torch.bool
            or tuple(query_mask.shape) != (batch, 1, 1, seq_q)):
        raise ValueError(f"{owner}: the query mask of a cross-attention "
                         f"pair must be bool [b, 1, 1, s_q] = "
                         f"{[batch, 1, 1, seq_q]}, got "
                         f"{getattr(query_mask, 'dtype', None)} "
                         f"{list(getattr(query_mask, 'shape', []))}")
    if query_mask.device != device:
        raise ValueError(f"{owner}: the query mask is on "
                         f"{query_mask.device}, the input on {device}")


def cross_attention_mask_input(owner, mask_type, attention_mask, batch,
                               seq_kv, device, padded_queries):
    """attention_mask_input for cross-attention (keys and values of
    another length than the queries): the padding types take TE's pair
    (query mask, key/value mask [b, 1, 1, s_kv]) or the key/value mask
    alone. The list `padded_queries` takes the pair's query mask."""
    if mask_type == "arbitrary":
        raise NotImplementedError(
            f"{owner}: attn_mask_type='arbitrary' with keys and values of "
            f"another length than the queries is not supported by tejit")
    if "padding" not in mask_type:
        return {}
    if isinstance(attention_mask, (tuple, list)):
        if len(attention_mask) != 2:
            raise ValueError(f"{owner}: a cross-attention attention_mask is "
                             f"TE's pair (query mask, key/value mask), got "
                             f"{len(attention_mask)} tensors")
        query_mask, attention_mask = attention_mask
        if query_mask is not None:
            padded_queries.append(query_mask)
    return attention_mask_input(owner, mask_type, attention_mask, batch,
                                seq_kv, device)


def rotary_input(owner, rotary_pos_emb, seq, kv_channels, device):
    """The program's `rotary_pos_emb` input [s, 1, 1, r] float32 from TE's
    freqs tensor [>= s, 1, 1, r] (the first s positions, as TE applies
    them; r <= kv_channels, even: the first r channels of each head
    rotate), or {} without one."""
    if rotary_pos_emb is None:
        return {}
    # TE's (query freqs, key freqs) pair.
    freqs = _one_of_pair(
        rotary_pos_emb, f"{owner}: different rotary embeddings for queries "
        f"and keys are not supported by tejit; pass one freqs tensor")
    if (not isinstance(freqs, torch.Tensor) or freqs.dim() != 4
            or tuple(freqs.shape[1:3]) != (1, 1) or freqs.shape[0] < seq):
        raise ValueError(f"{owner}: rotary_pos_emb must be TE's freqs tensor "
                         f"[s, 1, 1, d] with s >= {seq}, got "
                         f"{getattr(freqs, 'shape', type(freqs).__name__)}")
    if freqs.shape[3] > kv_channels or freqs.shape[3] % 2:
        raise ValueError(
            f"{owner}: rotary_pos_emb rotates {freqs.shape[3]} channels of "
            f"each head; it must be an even number at most kv_channels "
            f"({kv_channels})")
    if freqs.device != device:
        raise ValueError(f"{owner}: rotary_pos_emb is on {freqs.device}, "
                         f"the input on {device}")
    return {"rotary_pos_emb":
            freqs[:seq].detach().to(torch.float32).contiguous()}


def check_attention_call(owner, seq, inference_params=None,
                         cu_seqlens_q=None, cu_seqlens_kv=None,
                         cu_seqlens_q_padded=None, cu_seqlens_kv_padded=None,
                         max_seqlen_q=None, max_seqlen_kv=None,
                         pad_between_seqs=None, encoder_output=None):
    """Refuses forward arguments tejit's attention does not implement (the
    bias arguments are the callers': _bias.call_bias, _bias.refuse)."""
    _args.check_unsupported(
        f"{owner}.forward", inference_params=inference_params,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
        cu_seqlens_q_padded=cu_seqlens_q_padded,
        cu_seqlens_kv_padded=cu_seqlens_kv_padded,
        pad_between_seqs=pad_between_seqs, encoder_output=encoder_output)
    for name, value in (("max_seqlen_q", max_seqlen_q),
                        ("max_seqlen_kv", max_seqlen_kv)):
        if value is not None and int(value) != seq:
            raise NotImplementedError(
                f"{owner}.forward({name}={value}) is not supported by tejit: "
                f"sequences are padded to the input's length ({seq}); leave "
                f"it None")


def refuse_for_fp8_attention(owner, kv_channels, qkv_format, mask_type,
                             window, bias_type, dropout,
                             format_argument="qkv_format"):
    """Under an autocast whose recipe has fp8_dpa, refuses what FP8
    attention does not run (_attention_specs.check_fp8_attention); a
    KV-cache step does not call it."""
    if getattr(fp8.get_fp8_recipe(), "fp8_dpa", False):
        _attention_specs.check_fp8_attention(
            owner, kv_channels, qkv_format, mask_type, window, bias_type,
            format_argument, dropout)


# The forward's arguments of packed sequences and of an attention bias, as
# check_context_parallel_call takes them.
_CP_SEQUENCE_ARGUMENTS = ("cu_seqlens_q", "cu_seqlens_kv",
                          "cu_seqlens_q_padded", "cu_seqlens_kv_padded",
                          "pad_between_seqs")
_CP_BIAS_ARGUMENTS = ("core_attention_bias_type", "core_attention_bias",
                      "alibi_slopes")


def refuse_for_context_parallel(module, owner, qkv_format, mask_type, window,
                                call_arguments, inference_params=None,
                                format_argument="qkv_format",
                                mask_argument="attn_mask_type"):
    """With context parallelism (module._context_parallel()), refuses
    what it does not run (_args.check_context_parallel_call): packed
    sequences, a KV cache, masks other than no_mask and causal, an
    attention bias or ALiBi and the sequence arguments among
    `call_arguments` (the forward's), and under the all-gather (the
    spec's cp_comm_type: TE's "all_gather", or "p2p" where a2a does not
    run) a sliding window (`window`: the call's normalized one) and FP8
    attention (the autocast recipe's fp8_dpa), which a2a runs (the spec
    keeps the window and the recipe's fp8_dpa as without context
    parallelism)."""
    context_parallel = module._context_parallel()
    if context_parallel is None:
        return
    _args.check_context_parallel_call(
        owner, context_parallel[0], format_argument, qkv_format,
        mask_argument, mask_type,
        _attention_specs.window_limits(mask_type, window),
        {name: call_arguments.get(name) for name in _CP_BIAS_ARGUMENTS},
        getattr(fp8.get_fp8_recipe(), "fp8_dpa", False),
        inference_params is not None, False,
        {name: call_arguments.get(name) for name in _CP_SEQUENCE_ARGUMENTS},
        module.cp_comm_type, context_parallel[2] == "a2a")


def context_parallel_seq(module, owner, argument, local_seq):
    """The call's global sequence length: `local_seq` (this rank's, in
    `argument`) times cp_size with context parallelism, which needs it
    even (_args.context_parallel_seq); else `local_seq`."""
    context_parallel = module._context_parallel()
    if context_parallel is None:
        return local_seq
    return _args.context_parallel_seq(owner, argument, local_seq,
                                      context_parallel[0])


def check_input(owner, name, tensor, rank):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{owner}: expected a torch.Tensor {name}, got "
                        f"{type(tensor).__name__}")
    if tensor.dim() != rank:
        raise ValueError(f"{owner}: expected a {rank}-D {name}, got "
                         f"{tuple(tensor.shape)}")
    if not tensor.is_cuda:
        raise ValueError(f"{owner}: {name} must be a CUDA tensor, got one "
                         f"on {tensor.device}")


class DotProductAttention(TransformerEngineBaseModule):
    """Transformer Engine's DotProductAttention, compiled by tejit (the
    attention itself on cuDNN's fused kernels). No parameters. forward
    takes query [s, b, heads, kv_channels] and key/value [s, b,
    num_gqa_groups, kv_channels] (sbhd; [b, s, ...] with bshd) and returns
    [s, b, heads * kv_channels] (bshd: [b, s, ...]).

    Masks: attn_mask_type (constructor, or the forward's, which selects
    its own program) "no_mask", "causal", "causal_bottom_right", and
    "padding", "padding_causal", "padding_causal_bottom_right" with
    attention_mask [b, 1, 1, s] bool (True = padding), or "arbitrary" with
    [1 or b, 1 or h, s_q, s_kv] (computed as a post-scale bias, -10000
    where masked, on top of core_attention_bias if given). Attention bias
    (docs/attention-bias.md, _bias.py), TE's forward arguments:
    core_attention_bias_type "post_scale_bias" / "pre_scale_bias" with
    core_attention_bias [1 or b, 1 or h, s_q, s_kv] (cast to the
    activation dtype; its gradient for the shape [1, h, s_q, s_kv] only),
    or "alibi" with alibi_slopes float32 [h] or [b, h] (None: TE's vanilla
    slopes). Sliding windows: window_size (left, right), the
    constructor's or the forward's (which selects its own program),
    normalized for the call's mask type as TE does
    (_args.check_window_size): key j is visible to query i only for
    i - left <= j <= i + right (-1: unbounded), besides the mask type's
    rule; not with "arbitrary". Dropout (attention_dropout) only in
    training mode, from a stream seeded from torch's CUDA generator, in
    get_rng_state_tracker().fork() when a tracker is given (TE's rule:
    tensor-parallel ranks then draw different masks).
    Cross-attention (attention_type="cross", or any key_layer/value_layer
    of another length than query_layer): no_mask, causal (top-left) and
    the padding types with TE's (query mask, key/value mask) pair (padded
    queries' output rows are 0, as in TE), or the key/value mask [b, 1, 1,
    s_kv] alone. Packed variable-length sequences (qkv_format="thd": q
    [t, heads, d], k/v [t_kv, groups, d], cu_seqlens_q and cu_seqlens_kv
    [b + 1] int32 (the keys packed as the queries or on their own), a
    padding mask type; output [t, heads * d]) run in place (_thd.py:
    cuDNN's ragged offsets; padding between sequences, TE's
    cu_seqlens_q_padded, by a permutation of the tokens). Tensor
    parallelism (tp_size, or tp_group's size): this rank's heads, as TE's
    heads per partition: query [.., heads/tp, d], key/value [..,
    groups/tp, d], output [.., heads/tp * d]; nothing is communicated.
    sequence_parallel changes no shape (the attention sees the whole
    sequence, gathered before it); as in TE, the dropout seed is then
    drawn in the caller's RNG context rather than the tracker's fork()
    (Megatron-LM forks around the whole layer under sequence
    parallelism).
    Context parallelism (cp_group, or set_context_parallel_group;
    docs/context-parallel.md): q, k, v, the output and its gradients are
    this rank's two load-balanced chunks of each sequence
    (tejit.pytorch.distributed.context_parallel_split), the program
    all-gathers the keys and values over the group (cp_comm_type
    "all_gather"); with "a2a" all-to-alls trade heads for tokens instead
    (heads and num_gqa_groups per rank divisible by cp_size, else
    ValueError); "p2p" (TE's default) runs as "a2a" where they divide,
    else as "all_gather"; "a2a+p2p" is refused;
    no_mask and causal only, no thd, bias, KV cache or cross-attention,
    and sliding windows and fp8_dpa under a2a only (NotImplementedError
    naming the argument).
    Refused (NotImplementedError naming the argument): attention bias and
    ALiBi with thd or inference_params,
    ALiBi with an arbitrary mask, thd padding between
    sequences with keys packed on their own, kv_channels differing for k
    and v. inference_params (TE's KV cache,
    InferenceParams; eval mode or torch.no_grad(), self-attention): q/k/v
    are the step's new tokens (thd, or bshd/sbhd with as many in every
    sequence), written into layer_number's caches and attended against
    each sequence's cached and new tokens (module/_kv_cache.py). Accepted
    and unused: layer_number, checkpoint_core_attention (recomputation
    changes no result), fast_zero_fill.
    FP8 attention (docs/fp8-attention.md): inside an fp8_autocast whose
    recipe is DelayedScaling(fp8_dpa=True) the program takes the recipe
    and runs the attention on FP8 q, k, v (amax histories and scales in
    the module's fp8_meta state); without fp8_dpa, and in KV-cache steps,
    it ignores the recipe (TE's default). With fp8_dpa, refused
    (NotImplementedError naming the attribute, before compiling): an
    attention bias or ALiBi, an arbitrary mask, thd, a sliding window,
    attention dropout in training (cuDNN's FP8 engines fault on it),
    kv_channels not a multiple of 16 or above 256 (and, on Hopper, a
    backward at a head dim other than 128: the runtime's error)."""

    # No GEMM: the recipe applies only with fp8_dpa (_program_recipe).
    _uses_fp8 = False
    _has_attention = True

    def __init__(self, num_attention_heads, kv_channels, num_gqa_groups=None,
                 attention_dropout=0.0, qkv_format="sbhd",
                 attn_mask_type="causal", window_size=None,
                 sequence_parallel=False, tp_size=1,
                 get_rng_state_tracker=None, tp_group=None,
                 layer_number=None, attention_type="self", cp_group=None,
                 cp_global_ranks=None, cp_stream=None, cp_comm_type="p2p",
                 softmax_scale=None, softmax_type="vanilla",
                 return_max_logit=False):
        super().__init__(None)
        owner = "DotProductAttention"
        if softmax_type != "vanilla":
            raise NotImplementedError(
                f"{owner}(softmax_type={softmax_type!r}) is not supported by "
                f"tejit; leave it 'vanilla'")
        _args.check_unsupported(owner, return_max_logit=return_max_logit)
        if attention_type not in ("self", "cross"):
            raise ValueError(f"{owner}: attention_type must be 'self' or "
                             f"'cross', got {attention_type!r}")
        if isinstance(kv_channels, (tuple, list)):
            if len(kv_channels) != 2 or kv_channels[0] != kv_channels[1]:
                raise NotImplementedError(
                    f"{owner}(kv_channels={tuple(kv_channels)}): different "
                    f"head sizes for keys and values are not supported by "
                    f"tejit")
            kv_channels = kv_channels[0]
        self.num_attention_heads = int(num_attention_heads)
        self.kv_channels = int(kv_channels)
        self.num_gqa_groups = int(num_gqa_groups if num_gqa_groups is not None
                                  else num_attention_heads)
        if self.num_attention_heads % self.num_gqa_groups:
            raise ValueError(f"{owner}: num_gqa_groups "
                             f"({self.num_gqa_groups}) must divide "
                             f"num_attention_heads "
                             f"({self.num_attention_heads})")
        tp = self._init_tensor_parallel(owner, tp_group, tp_size,
                                        sequence_parallel,
                                        get_rng_state_tracker)
        # TE's DotProductAttention: with sequence_parallel (the argument as
        # given) its dropout runs in the caller's RNG context, not in the
        # tracker's fork().
        self._dropout_in_caller_context = bool(sequence_parallel)
        _args.check_divisible(owner, tp,
                              num_attention_heads=self.num_attention_heads,
                              num_gqa_groups=self.num_gqa_groups)
        # This rank's heads (tensor parallelism: TE's heads per partition);
        # the attention itself communicates nothing.
        self.num_attention_heads_per_partition = self.num_attention_heads // tp
        self.num_gqa_groups_per_partition = self.num_gqa_groups // tp
        self.attention_dropout = _args.check_dropout(
            owner, "attention_dropout", attention_dropout)
        self.qkv_format = _args.check_qkv_format(owner, "qkv_format",
                                                 qkv_format, allow_thd=True)
        self.attn_mask_type = _args.check_mask_type(owner, "attn_mask_type",
                                                    attn_mask_type)
        # TE's: normalized for the constructor's mask type. A forward with
        # another mask type normalizes it again, or, when the constructor
        # gave none, that type's default (window_of_call).
        self.window_size = _args.check_window_size(
            owner, "window_size", window_size, self.attn_mask_type)
        self._window_given = window_size is not None
        self.attention_type = attention_type
        self.layer_number = layer_number
        self.softmax_scale = (float(softmax_scale) if softmax_scale is not None
                              else 1.0 / math.sqrt(self.kv_channels))
        self._init_context_parallel(owner, cp_group, cp_global_ranks,
                                    cp_stream, cp_comm_type)

    def _context_parallel_refusals(self):
        return {"qkv_format='thd'": self.qkv_format == "thd",
                "attention_type='cross'": self.attention_type == "cross"}

    def _context_parallel_heads(self):
        return self.num_attention_heads, self.num_gqa_groups

    def _dropout_active(self):
        return self.training and self.attention_dropout > 0

    def _tp_communicates(self):
        return False

    def _dropout_seed_context(self):
        # TE draws attention dropout in get_rng_state_tracker().fork(),
        # unless sequence_parallel (then in the caller's context).
        if getattr(self, "_dropout_in_caller_context", False):
            return rng_fork(None)
        return rng_fork(self._rng_tracker)

    def _layer_spec(self, mask_type=None, window_size=None, seq_kv=None,
                    padded_queries=False, bias=None):
        """The layer's spec for a call with `mask_type`, the normalized
        `window_size` (the constructor's when None), keys/values of
        `seq_kv` positions (None: as many as the queries), with
        `padded_queries` a padding mask of the queries' own, and the
        attention `bias` (_bias.CallBias.key, None: none)."""
        mask_type = mask_type or self.attn_mask_type
        if window_size is None:
            window_size = window_of_call("DotProductAttention",
                                         self._constructed_window(), None,
                                         mask_type)
        return _attention_specs.dot_product_attention_spec(
            self.num_attention_heads_per_partition, self.kv_channels,
            self.num_gqa_groups_per_partition, mask_type,
            self.attention_dropout if self._dropout_active() else 0.0,
            self.softmax_scale, window_size, seq_kv, padded_queries,
            attention_bias=bias, context_parallel=self._context_parallel())

    def _constructed_window(self):
        return self.window_size if self._window_given else None

    def forward(self, query_layer, key_layer, value_layer,
                attention_mask=None, qkv_format=None, cu_seqlens_q=None,
                cu_seqlens_kv=None, cu_seqlens_q_padded=None,
                cu_seqlens_kv_padded=None, max_seqlen_q=None,
                max_seqlen_kv=None, attn_mask_type=None, window_size=None,
                checkpoint_core_attention=False,
                core_attention_bias_type="no_bias", core_attention_bias=None,
                alibi_slopes=None, fast_zero_fill=True,
                inference_params=None, pad_between_seqs=None,
                fp8_output=False):
        owner = "DotProductAttention"
        qkv_format = _args.check_qkv_format(
            owner, "qkv_format", qkv_format or self.qkv_format,
            allow_thd=True)
        mask_type = mask_type_of_call(owner, self.attn_mask_type,
                                      attn_mask_type)
        window = window_of_call(owner, self._constructed_window(),
                                window_size, mask_type)
        _args.check_forward(owner, fp8_output, False)
        bias_arguments = dict(
            core_attention_bias_type=core_attention_bias_type,
            core_attention_bias=core_attention_bias,
            alibi_slopes=alibi_slopes)
        refuse_for_context_parallel(
            self, owner, qkv_format, mask_type, window,
            dict(bias_arguments, cu_seqlens_q=cu_seqlens_q,
                 cu_seqlens_kv=cu_seqlens_kv,
                 cu_seqlens_q_padded=cu_seqlens_q_padded,
                 cu_seqlens_kv_padded=cu_seqlens_kv_padded,
                 pad_between_seqs=pad_between_seqs), inference_params)
        if inference_params is not None:
            _bias.refuse(owner, "inference_params (a KV cache)",
                         **bias_arguments)
            return self._kv_cache_forward(
                query_layer, key_layer, value_layer, attention_mask,
                mask_type, window, qkv_format, inference_params,
                cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv,
                max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
                cu_seqlens_q_padded=cu_seqlens_q_padded,
                cu_seqlens_kv_padded=cu_seqlens_kv_padded,
                pad_between_seqs=pad_between_seqs)
        refuse_for_fp8_attention(
            owner, self.kv_channels, qkv_format, mask_type, window,
            core_attention_bias_type,
            self.attention_dropout if self._dropout_active() else 0.0)
        if qkv_format == "thd":
            _bias.refuse(owner, "qkv_format='thd'", **bias_arguments)
            return self._packed_forward(
                query_layer, key_layer, value_layer, attention_mask,
                mask_type, window, cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_kv=cu_seqlens_kv,
                cu_seqlens_q_padded=cu_seqlens_q_padded,
                cu_seqlens_kv_padded=cu_seqlens_kv_padded,
                max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv,
                pad_between_seqs=pad_between_seqs)
        for name, tensor in (("query_layer", query_layer),
                             ("key_layer", key_layer),
                             ("value_layer", value_layer)):
            check_input(owner, name, tensor, 4)
        local_seq, batch = _sequence_dims(qkv_format, query_layer)
        # Cross-attention: keys and values of their own length.
        local_seq_kv = _sequence_dims(qkv_format, key_layer)[0]
        if self._context_parallel() is not None and local_seq_kv != local_seq:
            _args.check_context_parallel_call(
                owner, self.cp_size, cross="key_layer of another length "
                "than query_layer")
        # Context parallelism: q, k and v hold this rank's chunks of the
        # sequence, whose global length the spec and the checks take.
        seq = context_parallel_seq(self, owner, "query_layer", local_seq)
        seq_kv = seq if local_seq_kv == local_seq else local_seq_kv
        check_attention_call(
            owner, seq, inference_params, cu_seqlens_q, cu_seqlens_kv,
            cu_seqlens_q_padded, cu_seqlens_kv_padded, max_seqlen_q,
            None, pad_between_seqs)
        if max_seqlen_kv is not None and int(max_seqlen_kv) != seq_kv:
            raise NotImplementedError(
                f"{owner}.forward(max_seqlen_kv={max_seqlen_kv}) other than "
                f"the keys' length ({seq_kv}) is not supported by tejit")
        heads, groups, d = (self.num_attention_heads_per_partition,
                            self.num_gqa_groups_per_partition,
                            self.kv_channels)
        for name, tensor, count, length in (
                ("query_layer", query_layer, heads, local_seq),
                ("key_layer", key_layer, groups, local_seq_kv),
                ("value_layer", value_layer, groups, local_seq_kv)):
            lead = (length, batch) if qkv_format == "sbhd" else (batch,
                                                                 length)
            want = (*lead, count, d)
            if tuple(tensor.shape) != want:
                raise ValueError(f"{owner}: expected {name} {list(want)} "
                                 f"({qkv_format}), got "
                                 f"{list(tensor.shape)}")
        dtype = self._checked_dtype(query_layer)
        activations = {
            "query": query_layer.to(dtype).contiguous(),
            "key": key_layer.to(dtype).contiguous(),
            "value": value_layer.to(dtype).contiguous()}
        bias = _bias.call_bias(
            owner, mask_type, attention_mask, core_attention_bias_type,
            core_attention_bias, alibi_slopes, batch=batch, heads=heads,
            seq_q=seq, seq_kv=seq_kv, dtype=dtype, device=query_layer.device,
            softmax_scale=self.softmax_scale)
        activations.update(bias.inputs)
        if bias.mask_type != mask_type:  # an arbitrary mask, now the bias
            mask_type, attention_mask = bias.mask_type, None
        query_masks = []  # TE's pair's query mask
        if seq_kv == seq and not _distinct_pair(mask_type, attention_mask):
            activations.update(attention_mask_input(
                owner, mask_type, attention_mask, batch, seq,
                query_layer.device))
        else:
            # Keys padded by their own mask (cross-attention, or TE's pair
            # of two tensors); the program pads the pair's queries too
            # (their output rows are 0, as in TE, and take no gradient).
            activations.update(cross_attention_mask_input(
                owner, mask_type, attention_mask, batch, seq_kv,
                query_layer.device, padded_queries=query_masks))
        if query_masks:
            check_query_mask(owner, query_masks[0], batch, seq,
                             query_layer.device)
            activations["query_mask"] = query_masks[0].contiguous()
        padded_queries = "query_mask" in activations
        variant = (mask_type, self._dropout_active(), window,
                   padded_queries) + bias.variant()
        out = self._run_program(
            activations, dtype, (qkv_format, seq, batch, seq_kv),
            {"seq_length": seq, "batch_size": batch,
             "input_format": qkv_format},
            query_layer.shape,
            lambda: self._layer_spec(mask_type, window, seq_kv=(
                seq_kv if seq_kv != seq else None),
                padded_queries=padded_queries, bias=bias.key),
            variant)
        return out["output"]

    def _packed_forward(self, query_layer, key_layer, value_layer,
                        attention_mask, mask_type, window, **sequences):
        """A thd call: q [t, heads, d], k/v [t_kv, groups, d] packed as
        `sequences` (the forward's cu_seqlens and max_seqlen arguments,
        _thd.packed_calls) say, the keys as the queries or on their own
        (cross-attention); output [t, heads * d]."""
        owner = "DotProductAttention"
        heads, groups, d = (self.num_attention_heads_per_partition,
                            self.num_gqa_groups_per_partition,
                            self.kv_channels)
        for name, tensor, count in (("query_layer", query_layer, heads),
                                    ("key_layer", key_layer, groups),
                                    ("value_layer", value_layer, groups)):
            check_input(owner, name, tensor, 3)
            rows = (query_layer if tensor is query_layer
                    else key_layer).shape[0]
            if tuple(tensor.shape) != (rows, count, d):
                raise ValueError(
                    f"{owner}: qkv_format='thd' takes {name} [tokens, "
                    f"{'heads' if count == heads else 'gqa_groups'}, d] = "
                    f"{[rows, count, d]} (keys and values hold the same "
                    f"tokens), got {list(tensor.shape)}")
        if attention_mask is not None:
            raise ValueError(f"{owner}: qkv_format='thd' takes the "
                             f"sequences from cu_seqlens_q/cu_seqlens_kv, "
                             f"not an attention_mask")
        mask_type = _thd.thd_mask_type(owner, mask_type)
        queries, keys = _thd.packed_calls(
            owner, query_layer.shape[0], key_layer.shape[0],
            query_layer.device, cross=True, **sequences)
        dtype = self._checked_dtype(query_layer)
        kv_side = keys or queries
        activations = {
            "query": queries.pad(query_layer.to(dtype).contiguous()),
            "key": kv_side.pad(key_layer.to(dtype).contiguous()),
            "value": kv_side.pad(value_layer.to(dtype).contiguous()),
            "cu_seqlens": queries.cu_seqlens}
        shape_key = queries.shape_key()
        if keys is not None:
            activations["cu_seqlens_kv"] = keys.cu_seqlens
            shape_key += keys.shape_key()

        def layer_spec():
            layer = self._layer_spec(mask_type, window, seq_kv=(
                keys.max_s if keys is not None else None))
            if keys is not None:
                layer["kv_tokens"] = keys.padded_tokens
            return layer
        variant = (mask_type, self._dropout_active(), window, False)
        out = self._run_program(
            activations, dtype, shape_key, queries.shape_spec(),
            query_layer.shape, layer_spec, variant)
        return queries.unpad(out["output"])

    def _kv_cache_forward(self, query_layer, key_layer, value_layer,
                          attention_mask, mask_type, window, qkv_format,
                          inference_params, cu_seqlens_q=None,
                          cu_seqlens_kv=None, max_seqlen_q=None,
                          max_seqlen_kv=None, **call_arguments):
        """A step with a KV cache (_kv_cache.py): query [.., heads, d] and
        key/value [.., groups, d], the step's new tokens in `qkv_format`
        (thd [t, ...], bshd [b, s, ...], sbhd [s, b, ...]); the new keys
        and values go into layer_number's caches, and the queries attend to
        each sequence's cached and new tokens. Output [.., heads * d] in
        the input's layout."""
        owner = "DotProductAttention"
        heads, groups, d = (self.num_attention_heads_per_partition,
                            self.num_gqa_groups_per_partition,
                            self.kv_channels)
        rank = 3 if qkv_format == "thd" else 4
        for name, tensor in (("query_layer", query_layer),
                             ("key_layer", key_layer),
                             ("value_layer", value_layer)):
            check_input(owner, name, tensor, rank)
        lead = tuple(query_layer.shape[:-2])
        for name, tensor, count in (("query_layer", query_layer, heads),
                                    ("key_layer", key_layer, groups),
                                    ("value_layer", value_layer, groups)):
            if tuple(tensor.shape) != (*lead, count, d):
                raise ValueError(
                    f"{owner}: with inference_params, {name} must be "
                    f"{[*lead, count, d]} ({qkv_format}: the step's new "
                    f"tokens, as the query's), got {list(tensor.shape)}")
        mask_type, layout, step = _kv_cache.start_step(
            owner, self, inference_params, qkv_format, mask_type,
            attention_mask, window, self.attention_type == "cross", lead,
            call_arguments, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q)
        dtype = self._checked_dtype(query_layer)
        activations = {
            name: step.pad(layout.pack(tensor.to(dtype)).contiguous())
            for name, tensor in (("query", query_layer), ("key", key_layer),
                                 ("value", value_layer))}
        activations.update(step.inputs(owner, self, groups, d, dtype,
                                       query_layer.device))
        out = self._run_program(
            activations, dtype, step.shape_key(), step.shape_spec(),
            query_layer.shape,
            lambda: self._layer_spec(mask_type, window),
            ("kv_cache", mask_type), inference_only=True)
        return layout.unpack(step.unpad(out["output"]))

    def extra_repr(self):
        return (f"num_attention_heads={self.num_attention_heads}, "
                f"kv_channels={self.kv_channels}, "
                f"num_gqa_groups={self.num_gqa_groups}, "
                f"attn_mask_type={self.attn_mask_type}, "
                f"window_size={self.window_size}, "
                f"qkv_format={self.qkv_format}")


def check_cross_mask_type(owner, argument, mask_type):
    """`mask_type` for cross-attention in MultiheadAttention and
    TransformerLayer: those tejit computes there (causal aligned
    top-left, as TE's), else NotImplementedError naming `argument`."""
    if mask_type not in _attention_specs.CROSS_MASK_TYPES:
        raise NotImplementedError(
            f"{owner}: {argument}={mask_type!r} with cross-attention is not "
            f"supported by tejit; use one of "
            f"{', '.join(_attention_specs.CROSS_MASK_TYPES)}")
    return mask_type


def encoder_output_input(owner, encoder_output, qkv_format, batch, hidden,
                         dtype):
    """(the program's `encoder_output` input, its length s_kv) from TE's
    encoder_output [s_kv, b, hidden] (sbhd) / [b, s_kv, hidden] (bshd);
    `batch` and s_kv are the tensor's own (with sequence parallelism this
    rank's slice of dim 0: the caller makes s_kv global)."""
    if encoder_output is None:
        raise ValueError(f"{owner}: cross-attention needs encoder_output "
                         f"(the keys' and values' source)")
    check_input(owner, "encoder_output", encoder_output, 3)
    seq_kv, enc_batch = _sequence_dims(qkv_format, encoder_output)
    if enc_batch != batch or encoder_output.shape[-1] != hidden:
        lead = "[s_kv, b" if qkv_format == "sbhd" else "[b, s_kv"
        raise ValueError(f"{owner}: expected encoder_output {lead}, "
                         f"{hidden}] ({qkv_format}) with b = {batch}, got "
                         f"{list(encoder_output.shape)}")
    return encoder_output.to(dtype).contiguous(), seq_kv


def run_attention_block(module, owner, hidden_states, hidden_size,
                        qkv_format, mask_type, attention_mask, rotary_pos_emb,
                        kv_channels, layer_spec, is_first_microbatch=None,
                        window=(-1, -1), cross=None, **call_arguments):
    """Runs MultiheadAttention's or TransformerLayer's program on
    hidden_states [s, b, hidden] (sbhd) / [b, s, hidden] (bshd): the
    outputs by name, in the input's shape. `layer_spec(mask_type, rotary,
    seq_kv, padded_queries, bias)` is the layer's spec for this call
    (`mask_type` the program's: no_mask for an arbitrary mask, which
    becomes part of the bias; `bias` _bias.CallBias.key), with the call's
    normalized sliding `window` (window_of_call), which also keys the
    program;
    `is_first_microbatch` is TE's (weight casts of inference forwards,
    _run_program); `call_arguments` are the forward's bias arguments
    (_bias.call_bias: the self-attention's, or a cross-attention block's
    cross-attention's) and those check_attention_call refuses. `cross` is
    None, or for cross-attention
    (encoder_output, its mask type, its attention mask as TE takes it, and
    whether the block also self-attends: a decoder TransformerLayer, whose
    self-attention then takes `mask_type` and `attention_mask`)."""
    if qkv_format == "thd":
        _args.check_sequence_parallel_format(
            owner, "qkv_format", qkv_format,
            module._sequence_parallel_active())
        return _run_packed_block(
            module, owner, hidden_states, hidden_size, mask_type,
            attention_mask, rotary_pos_emb, kv_channels, layer_spec,
            is_first_microbatch, window, cross, **call_arguments)
    check_input(owner, "hidden_states", hidden_states, 3)
    if hidden_states.shape[-1] != hidden_size:
        raise ValueError(f"{owner}: expected hidden_states "
                         f"{'[s, b' if qkv_format == 'sbhd' else '[b, s'}, "
                         f"{hidden_size}] ({qkv_format}), got "
                         f"{list(hidden_states.shape)}")
    local_seq, local_batch = _sequence_dims(qkv_format, hidden_states)
    # Sequence parallelism: hidden_states (and encoder_output) are this
    # rank's slice of dim 0 (s/tp positions in sbhd, b/tp sequences in
    # bshd); the spec, the masks and the rotary table take the global
    # sizes.
    tp_split = module.tp_size if module._sequence_parallel_active() else 1
    seq, batch = _args.sequence_parallel_dims(qkv_format, local_seq,
                                              local_batch, tp_split)
    # Context parallelism: this rank's two chunks of each sequence; the
    # spec and the rotary table take the whole sequence.
    seq = context_parallel_seq(module, owner, "hidden_states", seq)
    # With cross-attention, max_seqlen_kv is the encoder output's length.
    max_seqlen_kv = (call_arguments.pop("max_seqlen_kv", None)
                     if cross is not None else None)
    bias_arguments = _bias.pop_arguments(call_arguments)
    check_attention_call(owner, seq, **call_arguments)
    dtype = module._checked_dtype(hidden_states)
    device = hidden_states.device
    activations = {"input": hidden_states.to(dtype).contiguous()}
    seq_kv, cross_mask_type = None, None
    if cross is not None:
        encoder_output, cross_mask_type, cross_mask, self_attends = cross
        activations["encoder_output"], seq_kv = encoder_output_input(
            owner, encoder_output, qkv_format, local_batch, hidden_size,
            dtype)
        seq_kv = _args.sequence_parallel_dims(qkv_format, seq_kv,
                                              local_batch, tp_split)[0]
        if max_seqlen_kv is not None and int(max_seqlen_kv) != seq_kv:
            raise NotImplementedError(
                f"{owner}.forward(max_seqlen_kv={max_seqlen_kv}) other than "
                f"the encoder output's length ({seq_kv}) is not supported "
                f"by tejit")
        query_masks = []
        masks = cross_attention_mask_input(owner, cross_mask_type,
                                           cross_mask, batch, seq_kv, device,
                                           padded_queries=query_masks)
        if masks:
            activations["enc_dec_attn_mask"] = masks["attention_mask"]
        if query_masks:
            # TE's pair with a query mask: the program pads the queries too.
            check_query_mask(owner, query_masks[0], batch, seq, device)
            activations["enc_dec_query_mask"] = query_masks[0].contiguous()
    # The bias is the self-attention's, or a cross-attention block's
    # cross-attention's (s_kv: the encoder output's length); an arbitrary
    # mask of the self-attention becomes part of it.
    self_attention = cross is None or self_attends
    core = getattr(module, "self_attention", module).core_attention
    bias = _bias.call_bias(
        owner, mask_type if self_attention else cross_mask_type,
        attention_mask if self_attention else None,
        bias_arguments["core_attention_bias_type"],
        bias_arguments["core_attention_bias"],
        bias_arguments["alibi_slopes"], batch=batch,
        heads=core.num_attention_heads_per_partition, seq_q=seq,
        seq_kv=seq if self_attention else seq_kv, dtype=dtype,
        device=device, softmax_scale=core.softmax_scale,
        tp_size=module.tp_size)
    activations.update(bias.inputs)
    if self_attention:
        if bias.mask_type != mask_type:  # an arbitrary mask, now the bias
            mask_type, attention_mask = bias.mask_type, None
        activations.update(attention_mask_input(
            owner, mask_type, attention_mask, batch, seq, device))
    rotary = rotary_input(owner, rotary_pos_emb, seq, kv_channels, device)
    activations.update(rotary)
    # The rotated width (0: no rotary) selects the program.
    rotary_dim = rotary["rotary_pos_emb"].shape[3] if rotary else 0
    padded_queries = "enc_dec_query_mask" in activations
    variant = (mask_type, module._dropout_active(), rotary_dim,
               tuple(window), cross_mask_type,
               padded_queries) + bias.variant()
    return module._run_program(
        activations, dtype, (qkv_format, seq, batch, seq_kv),
        {"seq_length": seq, "batch_size": batch, "input_format": qkv_format},
        hidden_states.shape,
        lambda: layer_spec(mask_type, rotary_dim, seq_kv, padded_queries,
                           bias.key), variant,
        is_first_microbatch=is_first_microbatch)


_SEQUENCE_ARGUMENTS = ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded",
                       "cu_seqlens_kv_padded", "max_seqlen_q",
                       "max_seqlen_kv", "pad_between_seqs")


def _run_packed_block(module, owner, hidden_states, hidden_size, mask_type,
                      attention_mask, rotary_pos_emb, kv_channels, layer_spec,
                      is_first_microbatch, window, cross, **call_arguments):
    """run_attention_block on packed sequences (thd): hidden_states [t,
    hidden] with the forward's cu_seqlens and max_seqlen arguments
    (_thd.packed_calls); `mask_type` is already a padding type
    (_thd.thd_mask_type). TE's rotary table [s, 1, 1, r] becomes each
    token's angles, positions restarting at every sequence."""
    check_input(owner, "hidden_states", hidden_states, 2)
    if hidden_states.shape[-1] != hidden_size:
        raise ValueError(f"{owner}: expected hidden_states [t, "
                         f"{hidden_size}] (thd), got "
                         f"{list(hidden_states.shape)}")
    if cross is not None:
        raise NotImplementedError(f"{owner}: cross-attention of packed "
                                  f"sequences (thd) is not supported by "
                                  f"tejit")
    if attention_mask is not None:
        raise ValueError(f"{owner}: packed sequences (thd) take their "
                         f"lengths from cu_seqlens_q, not an "
                         f"attention_mask")
    sequences = {name: call_arguments.pop(name, None)
                 for name in _SEQUENCE_ARGUMENTS}
    _bias.refuse(owner, "qkv_format='thd'",
                 **_bias.pop_arguments(call_arguments))
    check_attention_call(owner, None, **call_arguments)
    device = hidden_states.device
    tokens = hidden_states.shape[0]
    packed, _ = _thd.packed_calls(owner, tokens, tokens, device, **sequences)
    dtype = module._checked_dtype(hidden_states)
    activations = {"input": packed.pad(hidden_states.to(dtype).contiguous()),
                   "cu_seqlens": packed.cu_seqlens}
    rotary_dim = 0
    if rotary_pos_emb is not None:
        longest = max(packed.longest, 1)
        table = rotary_input(owner, rotary_pos_emb, longest, kv_channels,
                             device)["rotary_pos_emb"]
        activations["rotary_pos_emb"] = packed.token_angles(owner, table)
        rotary_dim = table.shape[3]
    variant = (mask_type, module._dropout_active(), rotary_dim,
               tuple(window), None, False)
    outputs = module._run_program(
        activations, dtype, packed.shape_key(), packed.shape_spec(),
        hidden_states.shape,
        lambda: layer_spec(mask_type, rotary_dim, None, False, None),
        variant, is_first_microbatch=is_first_microbatch)
    return {name: packed.unpad(tensor) for name, tensor in outputs.items()}
