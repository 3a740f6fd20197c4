"""Transformer Engine arguments the modules share: those accepted only at
their non-distributed defaults, the checks of the others, and TE's default
initialization."""
import functools

import torch

# TE's arguments for tensor/sequence parallelism, communication overlap
# (userbuffers), fused/delayed wgrad accumulation and recomputation: tejit
# runs one GPU per module and none of these yet, so only their defaults.
_DEFAULTS_ONLY = {
    "sequence_parallel": (False, None),
    "fuse_wgrad_accumulation": (False,),
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
    "checkpoint": (False,),
}

NORMALIZATIONS = ("LayerNorm", "RMSNorm")


def check_defaults(owner, **arguments):
    """NotImplementedError naming the first argument not at its default."""
    for name, value in arguments.items():
        allowed = _DEFAULTS_ONLY[name]
        if not any(value is a or (value is not None and value == a)
                   for a in allowed):
            raise NotImplementedError(
                f"{owner}({name}={value!r}) is not supported by tejit (no "
                f"tensor/sequence parallelism, communication overlap, fused "
                f"wgrad accumulation or recomputation yet); leave it at "
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
