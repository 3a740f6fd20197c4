"""The FP8 autocast state: `autocast` (TE 2.x) and `fp8_autocast` (TE 1.x),
and what the modules read from it.

The state is a context variable holding (enabled, recipe, amax reduction
group) of the innermost active autocast, so nesting, threads and asyncio
tasks each see their own.
A module reads it when it runs its forward: the recipe is part of the key
of the program it compiles (module/base.py). Unlike TE, nothing happens at
the exit of the outermost autocast: each compiled program updates its own
delayed-scaling state at the end of its forward and of its backward. As in
TE, a forward under torch.no_grad() leaves the state as it stands (an
inference forward scales with the trained state, whatever ran before). As in
TE, with DelayedScaling's reduce_amax and torch.distributed initialized,
the amaxes are first reduced (MAX) across the ranks of the autocast's
amax_reduction_group (fp8_group), or of the default group (_distributed.py).
"""
import contextlib
import contextvars

from ..common import recipe as _recipe

__all__ = ["autocast", "fp8_autocast", "fp8_model_init",
           "get_default_fp8_recipe", "is_fp8_enabled", "get_fp8_recipe",
           "get_fp8_group", "is_fp8_available"]

# (enabled, recipe, amax reduction group) of the innermost active autocast;
# recipe and group are None when disabled.
_STATE = contextvars.ContextVar("tejit_pytorch_autocast",
                                default=(False, None, None))


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


class autocast(contextlib.ContextDecorator):  # noqa: N801 (TE's name)
    """Context manager (or decorator, as TE 1.x's @contextmanager was)
    enabling FP8 for the tejit modules called inside it, with `recipe`
    (default: DelayedScaling()). Signature of TE 2.x's
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
                f"recipe must be a tejit.common.recipe recipe (DelayedScaling "
                f"or Float8CurrentScaling), not {type(recipe).__module__}."
                f"{type(recipe).__name__}")
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


def fp8_model_init(enabled=True, recipe=None,
                   preserve_high_precision_init_val=False):
    """TE's fp8_model_init: only enabled=False (a no-op) is supported."""
    if enabled:
        raise NotImplementedError(
            "fp8_model_init(enabled=True) is not supported by tejit: "
            "parameters stay in params_dtype and are quantized per step")
    return contextlib.nullcontext()


def is_fp8_available(return_reason=False):
    """Whether the current CUDA device runs FP8 (sm_89 or newer) and the
    tejit library loads: a bool, or (bool, reason) with return_reason."""
    import torch  # noqa: PLC0415 (tejit.pytorch checked it is installed)

    import tejit  # noqa: PLC0415

    try:
        tejit.device_info(torch.cuda.current_device())
        available, reason = True, ""
    except (tejit.TejitError, tejit.LibraryNotFoundError, RuntimeError,
            AssertionError) as e:  # AssertionError: torch without CUDA
        available, reason = False, str(e)
    return (available, reason) if return_reason else available
