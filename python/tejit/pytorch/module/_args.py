"""Transformer Engine arguments the modules share: those accepted only at
their non-distributed defaults, the checks of the others, and TE's default
initialization."""
import functools

import torch

# TE's arguments for tensor/sequence/context parallelism, communication
# overlap (userbuffers), delayed wgrad computation and a few rarer options:
# tejit runs one GPU per module and none of these yet, so only their
# defaults.
_DEFAULTS_ONLY = {
    "sequence_parallel": (False, None),
    "tp_group": (None,),
    "tp_size": (1,),
    "parameters_split": (None,),
    "ub_overlap_ag": (False,),
    "ub_overlap_rs": (False,),
    "ub_overlap_rs_dgrad": (False,),
    "ub_bulk_dgrad": (False,),
    "ub_bulk_wgrad": (False,),
    "delay_wgrad_compute": (False,),
    "symmetric_ar_type": (None,),
    "save_original_input": (False,),
    "return_layernorm_output_gathered": (False,),
    "activation_params": (None,),
    # The attention modules'.
    "ub_tp_comm_overlap": (False,),
    "cp_group": (None,),
    "cp_global_ranks": (None,),
    "cp_stream": (None,),
}

NORMALIZATIONS = ("LayerNorm", "RMSNorm")


def check_defaults(owner, **arguments):
    """NotImplementedError naming the first argument not at its default."""
    for name, value in arguments.items():
        allowed = _DEFAULTS_ONLY[name]
        if not any(value is a or (value is not None and value == a)
                   for a in allowed):
            raise NotImplementedError(
                f"{owner}({name}={value!r}) is not supported by tejit yet "
                f"(one GPU per module: no tensor, sequence or context "
                f"parallelism, communication overlap or delayed wgrad "
                f"computation); leave it at "
                f"{allowed[0]!r}")


def check_parallel_mode(owner, parallel_mode):
    # With tp_size 1 (the only one accepted) "column" and "row" change
    # nothing, as in TE.
    if parallel_mode not in (None, "column", "row"):
        raise ValueError(f"{owner}: parallel_mode must be None, 'column' or "
                         f"'row', got {parallel_mode!r}")


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
    return functools.partial(torch.nn.init.normal_, mean=0.0, std=0.023)


def gamma_init(zero_centered_gamma):
    """A norm weight starts at 1, or at 0 when applied as (1 + gamma)."""
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


def check_qkv_format(owner, argument, qkv_format):
    if qkv_format == "thd":
        raise NotImplementedError(
            f"{owner}({argument}='thd') is not supported by tejit (packed "
            f"variable-length sequences); use 'sbhd' or 'bshd' with a "
            f"padding mask")
    if qkv_format not in QKV_FORMATS:
        raise ValueError(f"{owner}: {argument} must be 'sbhd' or 'bshd', "
                         f"got {qkv_format!r}")
    return qkv_format


def check_window_size(owner, argument, window_size, mask_type):
    """Only full attention: window_size None or (-1, -1), or (-1, 0) with a
    causal mask (what TE sets it to then)."""
    if window_size is None:
        return
    window = tuple(window_size)
    if window == (-1, -1) or (window == (-1, 0) and "causal" in mask_type):
        return
    raise NotImplementedError(
        f"{owner}({argument}={window_size!r}) is not supported by tejit "
        f"(no sliding-window attention yet); leave it None")


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
