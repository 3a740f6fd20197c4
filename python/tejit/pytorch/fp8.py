"""The FP8 autocast state: `autocast` (TE 2.x) and `fp8_autocast` (TE 1.x),
and what the modules read from it.

The state is a context variable holding (enabled, recipe, amax reduction
group) of the innermost active autocast, so nesting, threads and asyncio
tasks each see their own.
fp8_model_init (FP8 primary weights) is a second context variable,
read when a module is built (module/_fp8_weights.py).
A module reads the autocast state when it runs its forward: the recipe is part of the key
of the program it compiles (module/base.py). Unlike TE, nothing happens at
the exit of the outermost autocast: each compiled program updates its own
delayed-scaling state at the end of its forward and of its backward. As in
TE, a forward under torch.no_grad() leaves the state as it stands (an
inference forward scales with the trained state, whatever ran before). As in
TE, with DelayedScaling's reduce_amax and torch.distributed initialized,
the amaxes are first reduced (MAX) across the ranks of the autocast's
amax_reduction_group (fp8_group), or of the default group (_distributed.py).
Float8CurrentScaling and Float8BlockScaling keep no state between steps:
each cast scales by the amax of what it casts (the tensor, or each block),
so there is nothing to update or reduce.
"""
import contextlib
import contextvars
import typing

from ..common import recipe as _recipe

__all__ = ["autocast", "fp8_autocast", "fp8_model_init",
           "quantized_model_init", "get_fp8_model_init",
           "get_default_fp8_recipe", "is_fp8_enabled", "get_fp8_recipe",
           "get_fp8_group", "is_fp8_available", "is_fp8_block_scaling_available",
           "is_mxfp8_available", "is_nvfp4_available", "check_fp8_support",
           "check_fp8_block_scaling_support", "check_mxfp8_support",
           "check_nvfp4_support", "get_default_recipe"]

# (enabled, recipe, amax reduction group) of the innermost active autocast;
# recipe and group are None when disabled.
NO_AUTOCAST = (False, None, None)
_STATE = contextvars.ContextVar("tejit_pytorch_autocast",
                                default=NO_AUTOCAST)


def get_default_fp8_recipe():
    """The recipe of an autocast given none: TE's default DelayedScaling()."""
    return _recipe.DelayedScaling()


def is_fp8_enabled():
    """Whether the innermost autocast enables FP8."""
    return _STATE.get()[0]


def get_fp8_recipe():
    """The recipe of the innermost enabled autocast, or None."""
    return _STATE.get()[1]


def get_fp8_group():
    """The amax reduction group the innermost enabled autocast was given
    (None: the default group, when torch.distributed is initialized)."""
    return _STATE.get()[2]


def autocast_state():
    """An opaque snapshot of the autocast state, for set_autocast_state
    (NO_AUTOCAST: the state outside any autocast)."""
    return _STATE.get()


def set_autocast_state(state):
    """Makes `state` (from autocast_state) current in this context, until
    an enclosing autocast's exit restores its own."""
    if not (isinstance(state, tuple) and len(state) == 3):
        raise TypeError(f"set_autocast_state takes a state from "
                        f"autocast_state(), not {state!r}")
    _STATE.set(state)


class autocast(contextlib.ContextDecorator):  # noqa: N801 (TE's name)
    """Context manager (or decorator, as TE 1.x's @contextmanager was)
    enabling FP8 for the tejit modules called inside it, with `recipe`
    (DelayedScaling, the default DelayedScaling(); Float8CurrentScaling;
    Float8BlockScaling). Signature of TE 2.x's
    `transformer_engine.pytorch.autocast`.

    `amax_reduction_group` (a torch.distributed process group) is where
    DelayedScaling amaxes are reduced when the recipe's reduce_amax is on;
    None means the default group once torch.distributed is initialized.
    calibrating=True is not supported (NotImplementedError); `_graph` is
    accepted and has no effect (programs update their scales themselves,
    also inside CUDA graphs)."""

    __slots__ = ("_state", "_tokens")

    def __init__(self, enabled=True, calibrating=False, recipe=None,
                 amax_reduction_group=None, _graph=False):
        if calibrating:
            raise NotImplementedError(
                "autocast(calibrating=True) is not supported by tejit: "
                "amaxes are recorded only by programs compiled with a recipe")
        if recipe is not None and not isinstance(recipe, _recipe.Recipe):
            raise TypeError(
                f"recipe must be a tejit.common.recipe recipe (DelayedScaling, "
                f"Float8CurrentScaling or Float8BlockScaling), not "
                f"{type(recipe).__module__}.{type(recipe).__name__}")
        if enabled:
            recipe = recipe if recipe is not None else get_default_fp8_recipe()
            recipe.to_spec()  # report a bad recipe here, not at a module
        self._state = (bool(enabled), recipe if enabled else None,
                       amax_reduction_group if enabled else None)
        self._tokens = []  # one per active entry (the object may be reused)

    def __enter__(self):
        self._tokens.append(_STATE.set(self._state))
        return self

    def __exit__(self, *exc_info):
        _STATE.reset(self._tokens.pop())
        return False


def fp8_autocast(enabled=True, calibrating=False, fp8_recipe=None,
                 fp8_group=None, _graph=False):
    """TE 1.x's spelling of `autocast` (fp8_recipe -> recipe, fp8_group ->
    amax_reduction_group)."""
    return autocast(enabled=enabled, calibrating=calibrating,
                    recipe=fp8_recipe, amax_reduction_group=fp8_group,
                    _graph=_graph)


class ModelInit(typing.NamedTuple):
    """What an enabled fp8_model_init gives the modules built inside it."""
    recipe: _recipe.Recipe
    preserve_high_precision_init_val: bool


# The innermost active fp8_model_init's ModelInit, or None (none, or
# enabled=False).
_MODEL_INIT = contextvars.ContextVar("tejit_pytorch_fp8_model_init",
                                     default=None)


def get_fp8_model_init():
    """The ModelInit of the innermost active fp8_model_init, or None when
    there is none or it is disabled: what a module reads when it is
    built."""
    return _MODEL_INIT.get()


class fp8_model_init(contextlib.ContextDecorator):  # noqa: N801 (TE's name)
    """TE's fp8_model_init: the tejit modules built inside hold their GEMM
    weights (Linear's `weight`, LayerNormMLP's `fc1_weight`/`fc2_weight`,
    the attention modules' fused QKV and `proj` weights) as Float8Tensors
    (float8_tensor.py: E4M3 data, 1 byte per element, of nominal dtype
    params_dtype), initialized as without it and then quantized under
    `recipe`'s scaling (DelayedScaling, the default, or
    Float8CurrentScaling; Float8BlockScaling is a NotImplementedError, as
    its block scales have no per-tensor FP8 weight to keep; another recipe
    is a TypeError). Under
    fp8_autocast their programs take the FP8 data as it is (no per-step
    weight cast); without it, the dequantized values. Optimizers update
    them in place (dequantize, op, requantize). With
    `preserve_high_precision_init_val`, each keeps its initial
    high-precision value on the CPU
    (`param.get_high_precision_init_val()`,
    `param.clear_high_precision_init_val()`), for master weights. Such
    modules have `primary_weights_in_fp8 = True`. enabled=False inside
    turns it off. Not with tp_size > 1, nor with split QKV weights
    (fuse_qkv_params=False): NotImplementedError."""

    __slots__ = ("_state", "_tokens")

    def __init__(self, enabled=True, recipe=None,
                 preserve_high_precision_init_val=False):
        state = None
        if enabled:
            if recipe is None:
                recipe = _recipe.DelayedScaling()
            if isinstance(recipe, _recipe.Float8BlockScaling):
                raise NotImplementedError(
                    "fp8_model_init with Float8BlockScaling is not supported "
                    "by tejit: FP8 primary weights hold one per-tensor scale, "
                    "and the compiler refuses fp8_weights under block "
                    "scaling; build the model without fp8_model_init (its "
                    "weights are block-quantized at each forward), or use "
                    "DelayedScaling or Float8CurrentScaling")
            if not isinstance(recipe, (_recipe.DelayedScaling,
                                       _recipe.Float8CurrentScaling)):
                raise TypeError(
                    f"fp8_model_init: recipe must be a DelayedScaling or "
                    f"Float8CurrentScaling (tejit.common.recipe), not "
                    f"{type(recipe).__module__}.{type(recipe).__name__}")
            recipe.to_spec()  # report a bad recipe here, not at a module
            state = ModelInit(recipe, bool(preserve_high_precision_init_val))
        self._state = state
        self._tokens = []  # one per active entry (the object may be reused)

    def __enter__(self):
        self._tokens.append(_MODEL_INIT.set(self._state))
        return self

    def __exit__(self, *exc_info):
        _MODEL_INIT.reset(self._tokens.pop())
        return False


# TE 2.x's name for it.
quantized_model_init = fp8_model_init


def reset_model_init():
    """No fp8_model_init in this context, until an enclosing one's exit."""
    _MODEL_INIT.set(None)


def _current_device_info():
    """(tejit.DeviceInfo of the current CUDA device, "") when it runs FP8
    (sm_89 or newer) and the tejit library loads; else (None, reason)."""
    import torch  # noqa: PLC0415 (tejit.pytorch checked it is installed)

    import tejit  # noqa: PLC0415

    try:
        return tejit.device_info(torch.cuda.current_device()), ""
    except (tejit.TejitError, tejit.LibraryNotFoundError, RuntimeError,
            AssertionError) as e:  # AssertionError: torch without CUDA
        return None, str(e)


def _answer(available, reason, return_reason):
    return (available, "" if available else reason) if return_reason \
        else available


def is_fp8_available(return_reason=False):
    """Whether the current CUDA device runs FP8 (sm_89 or newer) and the
    tejit library loads: a bool, or (bool, reason) with return_reason.
    This is what DelayedScaling and Float8CurrentScaling need."""
    info, reason = _current_device_info()
    return _answer(info is not None, reason, return_reason)


def is_fp8_block_scaling_available(return_reason=False):
    """Whether Float8BlockScaling runs here: its block-scaled GEMMs need a
    Hopper GPU (sm_90); TE's answer for the same device."""
    info, reason = _current_device_info()
    if info is not None and (info.major, info.minor) < (9, 0):
        reason = (f"Float8BlockScaling needs compute capability 9.0 (Hopper) "
                  f"or newer; device {info.ordinal} ({info.name}) is "
                  f"sm_{info.major}{info.minor}")
        info = None
    return _answer(info is not None, reason, return_reason)


def is_mxfp8_available(return_reason=False):
    """False: tejit does not implement MXFP8 (Blackwell's recipe)."""
    return _answer(False, "tejit does not implement MXFP8BlockScaling "
                   "(a Blackwell recipe); use DelayedScaling, "
                   "Float8CurrentScaling or Float8BlockScaling", return_reason)


def is_nvfp4_available(return_reason=False):
    """False: tejit does not implement NVFP4 (Blackwell's recipe)."""
    return _answer(False, "tejit does not implement NVFP4BlockScaling "
                   "(a Blackwell recipe); use DelayedScaling, "
                   "Float8CurrentScaling or Float8BlockScaling", return_reason)


def check_fp8_support():
    """TE's (available, reason) spelling of is_fp8_available."""
    return is_fp8_available(return_reason=True)


def check_fp8_block_scaling_support():
    return is_fp8_block_scaling_available(return_reason=True)


def check_mxfp8_support():
    return is_mxfp8_available(return_reason=True)


def check_nvfp4_support():
    return is_nvfp4_available(return_reason=True)


def get_default_recipe():
    """TE 2.x's name for get_default_fp8_recipe (on Hopper, DelayedScaling)."""
    return get_default_fp8_recipe()


def __getattr__(name):
    # TE's class-level view of this state (Megatron-LM reads it), loaded on
    # first use: it needs torch, and this file loads without it (the
    # recipe tests read it by path).
    if name == "FP8GlobalStateManager":
        from ._state_manager import FP8GlobalStateManager
        return FP8GlobalStateManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
