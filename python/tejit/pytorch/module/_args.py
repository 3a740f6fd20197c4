"""Transformer Engine arguments the modules share: those accepted only at
their non-distributed defaults, tensor and sequence parallelism's
(tp_group / tp_size, parallel_mode, set_parallel_mode, sequence_parallel),
context parallelism's (cp_group, cp_global_ranks, cp_stream, cp_comm_type;
docs/context-parallel.md), the checks of the others, and TE's default
initialization.

torch is imported only by the initializers and by tp_world_size /
context_parallel_of for a process group: tests/python checks the argument
checks on machines without PyTorch (loading this file by path).
"""
import functools
import math
import operator
import warnings

# TE's arguments for communication overlap (userbuffers) and a few rarer
# options: tejit runs none of these yet, so only their defaults. (Tensor, sequence and context parallelism are
# supported: tp_world_size, context_parallel_of and below.)
_DEFAULTS_ONLY = {
    "ub_overlap_ag": (False,),
    "ub_overlap_rs": (False,),
    "ub_overlap_rs_dgrad": (False,),
    "ub_bulk_dgrad": (False,),
    "ub_bulk_wgrad": (False,),
    "symmetric_ar_type": (None,),
    "save_original_input": (False,),
    "return_layernorm_output_gathered": (False,),
    # The attention modules'.
    "ub_tp_comm_overlap": (False,),
}

NORMALIZATIONS = ("LayerNorm", "RMSNorm")

# TE's activation_params: only clamped_swiglu (GPT-OSS's SwiGLU) takes
# them, with TE's defaults.
CLAMPED_SWIGLU_DEFAULTS = {"limit": 7.0, "alpha": 1.702,
                           "glu_linear_offset": 1.0}


def activation_params_of(owner, activation, activation_params):
    """The spec's `activation_params` for TE's arguments: for
    "clamped_swiglu" every parameter (TE's defaults where not given:
    limit 7.0, alpha 1.702, glu_linear_offset 1.0), as floats; else None.
    ValueError naming activation_params for parameters with another
    activation, an unknown key, a value that is not a finite number, or a
    limit not above 0."""
    if activation != "clamped_swiglu":
        if activation_params:
            raise ValueError(
                f"{owner}: activation_params is only used by "
                f"activation='clamped_swiglu', got {activation_params!r} "
                f"with activation={activation!r}")
        return None
    given = dict(activation_params or {})
    unknown = sorted(set(given) - set(CLAMPED_SWIGLU_DEFAULTS))
    if unknown:
        raise ValueError(
            f"{owner}: activation_params has unknown key(s) "
            f"{', '.join(map(repr, unknown))}; clamped_swiglu takes "
            f"{', '.join(CLAMPED_SWIGLU_DEFAULTS)}")
    params = {}
    for name, default in CLAMPED_SWIGLU_DEFAULTS.items():
        value = given.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueError(f"{owner}: activation_params[{name!r}] must be "
                             f"a finite number, got {value!r}")
        params[name] = float(value)
    if params["limit"] <= 0:
        raise ValueError(f"{owner}: activation_params['limit'] must be "
                         f"greater than 0, got {params['limit']!r}")
    return params


def check_defaults(owner, **arguments):
    """NotImplementedError naming the first argument not at its default."""
    for name, value in arguments.items():
        allowed = _DEFAULTS_ONLY[name]
        if not any(value is a or (value is not None and value == a)
                   for a in allowed):
            raise NotImplementedError(
                f"{owner}({name}={value!r}) is not supported by tejit yet "
                f"(no communication overlap or delayed wgrad "
                f"computation; tensor parallelism through tp_group/tp_size, "
                f"with sequence_parallel too, and context parallelism "
                f"through cp_group are supported); leave it at "
                f"{allowed[0]!r}")


def check_parallel_mode(owner, parallel_mode):
    """`parallel_mode` (None, "column" or "row"), else ValueError."""
    if parallel_mode not in (None, "column", "row"):
        raise ValueError(f"{owner}: parallel_mode must be None, 'column' or "
                         f"'row', got {parallel_mode!r}")
    return parallel_mode


# --- tensor parallelism -----------------------------------------------------

def _group_size(group):
    """TE's get_distributed_world_size: the process group's size, 1 when
    torch.distributed is not initialized."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group=group)


def tp_world_size(owner, tp_group, tp_size, group_size=None):
    """The tensor-parallel size of a module, as TE takes it: tp_group's
    size when a group is given, else `tp_size` (an int >= 1; the group may
    come later through set_tensor_parallel_group). A `tp_size` other than
    1 that disagrees with the group's size is a ValueError. `group_size`
    (a function of the group) defaults to torch.distributed's."""
    try:
        if isinstance(tp_size, bool):
            raise TypeError
        tp_size = operator.index(tp_size)
    except TypeError:
        raise ValueError(f"{owner}: tp_size must be an int >= 1, got "
                         f"{tp_size!r}") from None
    if tp_size < 1:
        raise ValueError(f"{owner}: tp_size must be an int >= 1, got "
                         f"{tp_size}")
    if tp_group is None:
        return tp_size
    size = int((group_size or _group_size)(tp_group))
    if tp_size != 1 and tp_size != size:
        raise ValueError(f"{owner}: tp_size ({tp_size}) differs from the "
                         f"size of tp_group ({size}); give one of them")
    return size


def sequence_parallel_of(sequence_parallel, tp_size):
    """TE's rule: sequence parallelism only with tensor parallelism
    (self.sequence_parallel = tp_size > 1 and sequence_parallel); ignored
    at tp_size 1."""
    return int(tp_size) > 1 and bool(sequence_parallel)


def check_sequence_parallel_format(owner, argument, qkv_format,
                                   sequence_parallel):
    """NotImplementedError for packed sequences (thd) with sequence
    parallelism: the tokens of a rank's slice would not be whole
    sequences."""
    if sequence_parallel and qkv_format == "thd":
        raise NotImplementedError(
            f"{owner}({argument}='thd', sequence_parallel=True) is not "
            f"supported by tejit: packed sequences (thd) are not split over "
            f"the tensor-parallel ranks; use 'sbhd' or 'bshd', or "
            f"sequence_parallel=False")


def check_sequence_parallel_kv_cache(owner, sequence_parallel):
    """NotImplementedError for a KV-cache step (inference_params) of a
    module with sequence parallelism."""
    if sequence_parallel:
        raise NotImplementedError(
            f"{owner}.forward(inference_params=...) with "
            f"sequence_parallel=True is not supported by tejit (no KV-cache "
            f"decoding with sequence parallelism); build the inference "
            f"module with sequence_parallel=False")


def sequence_parallel_tokens(owner, lead, tp_size, input_is_slice):
    """The global token count of a per-token module's call with sequence
    parallelism (the spec's seq_length), from the input's leading dims
    `lead`: the input is this rank's slice of dim 0 (`input_is_slice`:
    column-parallel modules, whose program gathers it), or the whole
    sequence (a row-parallel Linear, whose output is this rank's 1/tp of
    dim 0: dim 0 must divide by tp_size). ValueError for an input without
    a leading dim."""
    if not lead:
        raise ValueError(f"{owner}: with sequence_parallel the input needs a "
                         f"leading dimension to split over the ranks ([s, b, "
                         f"features], [b, s, features] or [tokens, "
                         f"features]), got a 1-D input")
    tokens = functools.reduce(operator.mul, lead, 1)
    if input_is_slice:
        return tokens * int(tp_size)
    if lead[0] % tp_size:
        raise ValueError(f"{owner}: with sequence_parallel the input's first "
                         f"dimension ({lead[0]}) must be divisible by "
                         f"tp_size ({tp_size}): each rank keeps 1/tp_size of "
                         f"it in the output")
    return tokens


def sequence_parallel_dims(qkv_format, seq, batch, tp_size):
    """The global (seq, batch) of an attention module's input [s, b, h]
    (sbhd) or [b, s, h] (bshd) whose dim 0 is this rank's slice (sequence
    parallelism: s/tp rows of the sequence, or b/tp samples)."""
    if qkv_format == "sbhd":
        return seq * int(tp_size), batch
    return seq, batch * int(tp_size)


def check_divisible(owner, tp_size, **sizes):
    """ValueError naming the first of `sizes` (argument name: global size)
    that tp_size does not divide."""
    for name, size in sizes.items():
        if size % tp_size:
            raise ValueError(f"{owner}: {name} ({size}) must be divisible "
                             f"by tp_size ({tp_size})")


def check_row_parallel(owner, parallel_mode, tp_size):
    """LayerNormLinear's parallel_mode: "row" with tp_size > 1 is refused
    (the norm would see a slice of the features)."""
    if parallel_mode == "row" and tp_size > 1:
        raise NotImplementedError(
            f"{owner}(parallel_mode='row') with tensor parallelism is not "
            f"supported by tejit: a row-parallel GEMM's input is a slice of "
            f"the features, which the norm before it cannot normalize; use "
            f"parallel_mode='column', or a LayerNorm and a row-parallel "
            f"Linear")


def check_set_parallel_mode(owner, set_parallel_mode, tp_size, first,
                            second):
    """With tp_size > 1, set_parallel_mode must be True: Transformer
    Engine would otherwise split the layer's sizes over the ranks without
    communicating, which tejit does not do. `first` / `second` name the
    column- and row-parallel GEMMs for the message."""
    if tp_size > 1 and not set_parallel_mode:
        raise NotImplementedError(
            f"{owner}(tp_size={tp_size}, set_parallel_mode=False) is not "
            f"supported by tejit: Transformer Engine would split the "
            f"layer's sizes over the ranks without communicating. Pass "
            f"set_parallel_mode=True ({first} column-parallel, {second} "
            f"row-parallel, as Megatron-LM), or tp_size=1")


def tensor_parallel_spec(layer, tp_size, parallel_mode=None,
                         sequence_parallel=False):
    """`layer` (a layer spec) with `tp_size` and, for Linear and
    LayerNormLinear, `parallel_mode`, when tp_size > 1, and
    `sequence_parallel: true` with sequence parallelism (TE's rule: only
    when tp_size > 1): specs of tp_size 1 stay as they were (and so their
    JIT and kernel cache keys)."""
    if tp_size > 1:
        layer["tp_size"] = int(tp_size)
        if parallel_mode is not None:
            layer["parallel_mode"] = parallel_mode
        if sequence_parallel:
            layer["sequence_parallel"] = True
    return layer


# --- context parallelism (docs/context-parallel.md) ---------------------------

# TE's cp_comm_type values: those tejit runs and those it refuses. "p2p"
# (TE's default, a ring exchanging keys and values) runs as "a2a" (all-to-
# alls trading heads for tokens: faster, leaner, and it runs FP8 attention
# and sliding windows) where each rank's heads and key/value groups divide
# by cp_size and the group has an all-to-all, else as the all-gather of the
# keys and values; every mode gives the same numbers (the attention over
# the whole sequence), up to rounding.
CP_COMM_TYPES = ("p2p", "all_gather", "a2a")
CP_COMM_TYPES_REFUSED = ("a2a+p2p",)


def a2a_undivided(cp_size, num_attention_heads, num_gqa_groups, tp_size=1):
    """(argument name, global count, count per tensor-parallel rank) of the
    first of the heads and the key/value groups whose count per
    tensor-parallel rank (the global one / tp_size) cp_size does not
    divide, so that a2a cannot give each context-parallel rank a whole
    share; None when both divide."""
    tp_size = int(tp_size)
    for name, count in (("num_attention_heads", int(num_attention_heads)),
                        ("num_gqa_groups", int(num_gqa_groups))):
        if (count // tp_size) % int(cp_size):
            return name, count, count // tp_size
    return None


def a2a_divides(cp_size, num_attention_heads, num_gqa_groups, tp_size=1):
    """Whether a2a gives each context-parallel rank a whole share of the
    heads and key/value groups (a2a_undivided finds none)."""
    return a2a_undivided(cp_size, num_attention_heads, num_gqa_groups,
                         tp_size) is None


def spec_comm_type(cp_comm_type, a2a_runs=False):
    """The spec's cp_comm_type ("all_gather" or "a2a") for TE's
    `cp_comm_type` (one tejit runs): "a2a" for "a2a", and for "p2p" when
    `a2a_runs` (the heads divide, a2a_divides, and the group has an
    all-to-all); else "all_gather"."""
    if cp_comm_type == "a2a" or (cp_comm_type == "p2p" and a2a_runs):
        return "a2a"
    return "all_gather"


def _group_rank(group):
    """This process's rank in `group` (torch.distributed.get_rank(group));
    0 when torch.distributed is not initialized."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return 0
    return dist.get_rank(group=group)


def context_parallel_of(owner, cp_group, cp_global_ranks=None,
                        cp_comm_type="p2p", group_size=None,
                        group_rank=None):
    """(cp_size, cp_rank) of TE's context-parallel arguments: (1, 0)
    without a group, else the group's size and this process's rank in it
    (`group_size` / `group_rank`, functions of the group, default to
    torch.distributed's). cp_comm_type "all_gather" runs as an
    all-gather, "a2a" as all-to-alls, "p2p" as either (spec_comm_type);
    "a2a+p2p" raises
    NotImplementedError with cp_size > 1, other values ValueError; a list
    of groups (a2a+p2p's hierarchy) is NotImplementedError; cp_global_ranks,
    when given, must hold cp_size ranks; a process outside the group is a
    ValueError. check_a2a_heads checks a2a's heads."""
    if cp_comm_type not in CP_COMM_TYPES + CP_COMM_TYPES_REFUSED:
        raise ValueError(f"{owner}: cp_comm_type must be one of "
                         f"{', '.join(CP_COMM_TYPES + CP_COMM_TYPES_REFUSED)}"
                         f", got {cp_comm_type!r}")
    if cp_group is None:
        return 1, 0
    if isinstance(cp_group, (list, tuple)):
        raise NotImplementedError(
            f"{owner}(cp_group=[...]): a list of context-parallel groups "
            f"(cp_comm_type='a2a+p2p') is not supported by tejit; pass one "
            f"process group")
    size = int((group_size or _group_size)(cp_group))
    if size > 1 and cp_comm_type in CP_COMM_TYPES_REFUSED:
        raise NotImplementedError(
            f"{owner}(cp_comm_type={cp_comm_type!r}) is not supported by "
            f"tejit: context parallelism runs as an all-gather of the keys "
            f"and values or as all-to-alls between heads and tokens; use "
            f"cp_comm_type='p2p' (a2a where the heads per rank divide by "
            f"cp_size, else the all-gather), 'all_gather' or 'a2a'")
    rank = int((group_rank or _group_rank)(cp_group))
    if not 0 <= rank < size:
        raise ValueError(f"{owner}: this process is not in cp_group (rank "
                         f"{rank} of {size})")
    if cp_global_ranks is not None and len(cp_global_ranks) != size:
        raise ValueError(f"{owner}: cp_global_ranks has "
                         f"{len(cp_global_ranks)} ranks, cp_group {size}")
    return size, rank


def check_a2a_heads(owner, cp_size, cp_comm_type, num_attention_heads,
                    num_gqa_groups, tp_size=1):
    """With cp_comm_type "a2a" and cp_size > 1, ValueError naming
    num_attention_heads or num_gqa_groups when this rank's count (after
    tensor parallelism: the global count / tp_size) is not divisible by
    cp_size: the all-to-all gives each rank 1/cp_size of its heads and of
    its key/value groups over the whole sequence."""
    if cp_size <= 1 or cp_comm_type != "a2a":
        return
    undivided = a2a_undivided(cp_size, num_attention_heads, num_gqa_groups,
                              tp_size)
    if undivided is None:
        return
    name, count, per_rank = undivided
    where = (f" ({per_rank} per tensor-parallel rank with tp_size "
             f"{tp_size})" if int(tp_size) > 1 else "")
    raise ValueError(
        f"{owner}: with cp_comm_type='a2a' each context-parallel rank "
        f"attends over 1/cp_size of the heads, so {name} ({count}){where} "
        f"must be divisible by cp_size ({cp_size}); use "
        f"cp_comm_type='all_gather' or another cp_size")


def check_context_parallel_module(owner, cp_size, refusals):
    """NotImplementedError naming the first of `refusals` ({argument as
    written, e.g. "attn_input_format='thd'": whether the module has it})
    that holds with cp_size > 1: what a module's configuration brings that
    context parallelism does not run."""
    if cp_size <= 1:
        return
    for argument, present in refusals.items():
        if present:
            raise NotImplementedError(
                f"{owner}({argument}) with context parallelism (cp_size "
                f"{cp_size}) is not supported by tejit")


def check_context_parallel_call(owner, cp_size, format_argument="qkv_format",
                                qkv_format="sbhd", mask_argument=
                                "attn_mask_type", mask_type="causal",
                                window_limited=False, bias_arguments=None,
                                fp8_dpa=False, kv_cache=False, cross=False,
                                sequence_arguments=None, cp_comm_type="p2p",
                                runs_a2a=None):
    """With cp_size > 1, NotImplementedError naming the first argument of
    a call that context parallelism does not run: packed sequences (thd,
    `sequence_arguments`: the forward's cu_seqlens and max_seqlen ones),
    mask types other than no_mask and causal (padding masks, arbitrary
    ones, bottom-right alignment), an attention bias or ALiBi
    (`bias_arguments`: the forward's core_attention_bias_type,
    core_attention_bias, alibi_slopes), a KV cache (inference_params), and
    cross-attention (`cross`: the argument that brings it, or False). A
    sliding window (`window_limited`) and FP8 attention (the recipe's
    fp8_dpa) run only where the program trades heads for tokens
    (`runs_a2a`: the spec's cp_comm_type is "a2a"; None: the module's
    `cp_comm_type`, TE's value, is "a2a"); under the all-gather the
    message names cp_comm_type='a2a' as the way to run them (each rank's
    attention is then the ordinary one over the whole sequence for
    1/cp_size of the heads; the all-gather's split attention takes
    neither), and for "p2p" why it did not become a2a."""
    if cp_size <= 1:
        return
    what = None
    a2a_runs_it = False
    a2a = cp_comm_type == "a2a" if runs_a2a is None else runs_a2a
    sequence_arguments = sequence_arguments or {}
    given = [name for name, value in sequence_arguments.items()
             if value is not None and value is not False]
    bias_arguments = bias_arguments or {}
    bias = [name for name, value in bias_arguments.items()
            if value is not None and value is not False
            and not (name == "core_attention_bias_type"
                     and value == "no_bias")]
    if qkv_format == "thd":
        what = f"{format_argument}='thd' (packed sequences)"
    elif given:
        what = f"{given[0]}=... (packed sequences)"
    elif kv_cache:
        what = "inference_params=... (a KV cache)"
    elif cross:
        what = f"{cross} (cross-attention)"
    elif mask_type not in ("no_mask", "causal"):
        what = (f"{mask_argument}={mask_type!r} (context parallelism runs "
                f"'no_mask' and 'causal')")
    elif window_limited and not a2a:
        what, a2a_runs_it = "window_size=... (a sliding window)", True
    elif bias:
        what = f"{bias[0]}=... (an attention bias or ALiBi)"
    elif fp8_dpa and not a2a:
        what, a2a_runs_it = ("a recipe with fp8_dpa=True (FP8 attention)",
                             True)
    if what is None:
        return
    if a2a_runs_it:
        why = ("runs as the all-gather here, as the heads or num_gqa_groups "
               "per rank do not divide by cp_size or the group has no "
               "all-to-all; " if cp_comm_type == "p2p" else "")
        raise NotImplementedError(
            f"{owner}: {what} with context parallelism (cp_size {cp_size}) "
            f"is not supported by tejit with cp_comm_type="
            f"{cp_comm_type!r} ({why}the all-gather splits each rank's "
            f"attention); cp_comm_type='a2a' runs it (each rank attends "
            f"over the whole sequence for 1/cp_size of the heads)")
    raise NotImplementedError(
        f"{owner}: {what} with context parallelism (cp_size {cp_size}) "
        f"is not supported by tejit")


def context_parallel_seed(seed, cp_rank):
    """The dropout seed of context-parallel rank `cp_rank` from the `seed`
    every rank drew alike (one generator state): each rank draws its masks
    by local position (its chunks' rows, or under a2a its block's heads),
    so with one seed rank r's local row i (head j) would drop as rank 0's
    does. Rank 0 keeps `seed`; the others move it by multiples of an odd
    constant (the golden ratio's 64 bits), within the drawn seeds' range
    [0, 2^62), which gives each rank its own Philox key. Within a rank,
    tensor-parallel ranks keep what their own seeding gave them (equal or
    forked)."""
    return (int(seed) + int(cp_rank) * 0x9E3779B97F4A7C15) % 2**62


def context_parallel_seq(owner, argument, local_seq, cp_size):
    """The global sequence length of a call whose `argument` holds this
    rank's `local_seq` positions (two chunks of TE's load-balanced
    order, so an even count): local_seq * cp_size; ValueError naming the
    argument for an odd one."""
    if cp_size <= 1:
        return local_seq
    if local_seq % 2:
        raise ValueError(
            f"{owner}: with context parallelism {argument} holds this "
            f"rank's two chunks of the sequence (chunks r and 2 cp - 1 - r "
            f"of 2 cp), so its sequence length must be divisible by 2, got "
            f"{local_seq}")
    return local_seq * int(cp_size)


def check_forward(owner, fp8_output, fp8_grad):
    for name, value in (("fp8_output", fp8_output), ("fp8_grad", fp8_grad)):
        if value:
            raise NotImplementedError(
                f"{owner}.forward({name}=True) is not supported by tejit: "
                f"outputs and gradients cross modules in the params dtype")


def check_normalization(owner, normalization):
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"{owner}: normalization must be 'LayerNorm' or "
                         f"'RMSNorm', got {normalization!r}")
    return normalization


def normalized_size(owner, normalized_shape, hidden_size):
    """The hidden size from TE 2.x's `normalized_shape` (an int or a
    one-element shape) or TE 1.x's `hidden_size`."""
    if (normalized_shape is None) == (hidden_size is None):
        raise TypeError(f"{owner}: give normalized_shape (or hidden_size), "
                        f"exactly one of them")
    size = normalized_shape if hidden_size is None else hidden_size
    if not isinstance(size, int):
        size = tuple(size)
        if len(size) != 1:
            raise NotImplementedError(
                f"{owner}: only the last dimension can be normalized, got "
                f"normalized_shape={size}")
        size = size[0]
    return int(size)


def default_init_method():
    """TE's default weight initialization: N(0, 0.023^2)."""
    import torch
    return functools.partial(torch.nn.init.normal_, mean=0.0, std=0.023)


def gamma_init(zero_centered_gamma):
    """A norm weight starts at 1, or at 0 when applied as (1 + gamma)."""
    import torch
    return torch.nn.init.zeros_ if zero_centered_gamma else torch.nn.init.ones_


# --- attention --------------------------------------------------------------

# TE's attention mask types, all of which the compiler takes
# (docs/spec-format.md); "padding" ones read an attention_mask [b, 1, 1, s],
# "arbitrary" one [b, 1, s, s].
ATTN_MASK_TYPES = ("no_mask", "padding", "causal", "padding_causal",
                   "causal_bottom_right", "padding_causal_bottom_right",
                   "arbitrary")
QKV_FORMATS = ("sbhd", "bshd")


def check_mask_type(owner, argument, mask_type):
    if mask_type not in ATTN_MASK_TYPES:
        raise ValueError(f"{owner}: {argument} must be one of "
                         f"{', '.join(ATTN_MASK_TYPES)}, got {mask_type!r}")
    return mask_type


def check_qkv_format(owner, argument, qkv_format, allow_thd=False):
    """`qkv_format`; "thd" (packed variable-length sequences) only with
    `allow_thd` (self-attention: DotProductAttention, MultiheadAttention
    and encoder TransformerLayers)."""
    if qkv_format == "thd" and allow_thd:
        return qkv_format
    if qkv_format == "thd":
        raise NotImplementedError(
            f"{owner}({argument}='thd') is not supported by tejit here "
            f"(packed variable-length sequences run in self-attention, not "
            f"in cross-attention); use 'sbhd' or 'bshd' with a padding "
            f"mask")
    if qkv_format not in QKV_FORMATS:
        raise ValueError(f"{owner}: {argument} must be 'sbhd' or 'bshd', "
                         f"got {qkv_format!r}")
    return qkv_format


def _window_pair(owner, argument, window_size):
    """`window_size` as a (left, right) tuple of ints, each >= -1."""
    try:
        if isinstance(window_size, (str, bytes)) or len(window_size) != 2:
            raise TypeError
        left, right = (operator.index(w) for w in window_size)
        if any(isinstance(w, bool) for w in window_size):
            raise TypeError
    except TypeError:
        raise ValueError(
            f"{owner}: {argument} must be None or a pair of ints (left, "
            f"right), each >= -1 (-1: unbounded), got "
            f"{window_size!r}") from None
    if left < -1 or right < -1:
        raise ValueError(
            f"{owner}: {argument} must be (left, right) with each >= -1 "
            f"(-1: unbounded), got {window_size!r}")
    return left, right


def check_window_size(owner, argument, window_size, mask_type):
    """The sliding window (left, right) of `mask_type`, normalized as TE's
    check_set_window_size: key j is visible to query i only for
    i - left <= j <= i + right (-1: unbounded on that side), besides the
    mask type's own rule. None means none: (-1, 0) with a causal mask
    type, else (-1, -1). A causal type's window looks at no later key:
    (left, right) with right != 0 becomes (left, 0); with the other types
    (-1, 0) becomes (-1, -1) -- TE's corrections, with its warning. Takes
    a pair of ints each >= -1 (ValueError otherwise), (left, -1) without a
    causal type too (TE refuses that one). NotImplementedError for any
    window with the arbitrary mask type, and for a right bound other than
    0 (the causal diagonal) or -1, which cuDNN's fused attention does not
    compute (the runtime refuses it too)."""
    causal = "causal" in mask_type
    if window_size is None:
        return (-1, 0) if causal else (-1, -1)
    window = _window_pair(owner, argument, window_size)
    if causal and window[1] != 0:
        window = (window[0], 0)
        warnings.warn(f"{owner}: {argument} should be (-1, 0) or (>=0, 0) "
                      f"for attn_mask_type={mask_type!r}; using {window} "
                      f"(as Transformer Engine does)", stacklevel=3)
    elif not causal and window == (-1, 0):
        window = (-1, -1)
        warnings.warn(f"{owner}: {argument} should be (-1, -1) or (>=0, "
                      f">=0) for attn_mask_type={mask_type!r}; using "
                      f"{window} (as Transformer Engine does)", stacklevel=3)
    if mask_type == "arbitrary" and window != (-1, -1):
        raise NotImplementedError(
            f"{owner}({argument}={window_size!r}) with "
            f"attn_mask_type='arbitrary' is not supported by tejit (no "
            f"sliding window over an arbitrary mask); fold the window into "
            f"the mask or leave it None")
    if window[1] > 0:
        raise NotImplementedError(
            f"{owner}({argument}={window_size!r}) with attn_mask_type="
            f"{mask_type!r} is not supported by tejit: the only right "
            f"bound cuDNN's fused attention computes is the causal "
            f"diagonal; use (left, 0) (a causal band) or (left, -1)")
    return window


def check_no_window(owner, argument, window_size, why):
    """NotImplementedError unless `window_size` is None or (-1, -1): for a
    window of an attention tejit does not have (`why`)."""
    if window_size is None:
        return
    if _window_pair(owner, argument, window_size) != (-1, -1):
        raise NotImplementedError(
            f"{owner}({argument}={window_size!r}) is not supported by tejit "
            f"({why}); leave it None")


def check_dropout(owner, argument, probability):
    probability = float(probability)
    if not 0.0 <= probability < 1.0:
        raise ValueError(f"{owner}: {argument} must be in [0, 1), got "
                         f"{probability}")
    return probability


def check_unsupported(owner, **arguments):
    """NotImplementedError naming the first argument given a value other
    than None/False (features tejit's attention does not have)."""
    for name, value in arguments.items():
        if value is not None and value is not False:
            raise NotImplementedError(
                f"{owner}({name}=...) is not supported by tejit; leave it "
                f"{'None' if value is not True else 'False'}")
