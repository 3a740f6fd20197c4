"""Activation checkpointing with FP8: TE's `checkpoint`.

`checkpoint(function, *args, **kwargs)` runs `function` without keeping
what its backward needs, and runs it again in the backward pass to get it
(TE's transformer_engine.pytorch.checkpoint, reentrant). The recomputed
forward must equal the first one bit for bit, so it runs with what the
first one ran with:
  * the FP8 autocast (recipe, amax reduction group) of the first call: the
    backward runs outside the `with` block (torch.utils.checkpoint does not
    know tejit's autocast, so with it the recomputation would run without
    FP8);
  * the FP8 state: the first forward runs under no_grad, which leaves the
    DelayedScaling state as it stands (module/base.py), so the recomputation
    scales alike and makes the step's one update;
  * the dropout streams: each tejit program the first forward ran has its
    stream's state copied aside (16 bytes, on the stream) and copied back
    before the recomputation, so it draws the same masks and leaves the
    stream where a step without checkpointing leaves it;
  * torch's CPU and CUDA generators and torch.autocast, as
    torch.utils.checkpoint restores them, and the states of an RNG tracker
    (get_rng_state_tracker), as TE restores them.
The first forward runs each module's training program (without keeping its
saved tensors), the program the recomputation runs too.
"""
import contextvars

import torch

from . import fp8

__all__ = ["checkpoint"]

# While a checkpointed function's first forward runs: the list the modules
# append to, one function per program run that rewinds its dropout stream.
_RECORDING = contextvars.ContextVar("tejit_pytorch_checkpoint", default=None)


def recording():
    """The list of dropout-stream rewinds a module appends to when it runs
    inside a checkpointed function's first forward (then it runs its
    training program), or None."""
    return _RECORDING.get()


def checkpoint(function, *args, **kwargs):
    """TE's `checkpoint`: `function(*args, **kwargs)` with its activations
    recomputed in the backward pass. TE's own keyword arguments are taken
    out of kwargs: `use_reentrant` (both values run this reentrant
    implementation); `get_rng_state_tracker` (a function returning an object
    with get_states() / set_states(), such as Megatron's CUDA RNG tracker):
    its states are saved with the first forward and restored for the
    recomputation, as TE does; `tp_group` (used by TE only to distribute
    saved activations); `distribute_saved_activations` (tensor-parallel
    memory saving: NotImplementedError when True). Returns what `function`
    returns (a tensor or a tuple of tensors)."""
    kwargs = dict(kwargs)
    kwargs.pop("use_reentrant", True)
    kwargs.pop("tp_group", None)
    tracker = kwargs.pop("get_rng_state_tracker", None)
    if kwargs.pop("distribute_saved_activations", False):
        raise NotImplementedError(
            "checkpoint(distribute_saved_activations=True) is not supported "
            "by tejit: it splits saved inputs over a tensor-parallel group "
            "(sequence-parallel style), which tejit does not do")
    needs_anchor = torch.is_grad_enabled() and not any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    # Without an input that requires grad the Function's outputs would not
    # either, and the parameters inside would get no gradient: an empty
    # tensor that requires grad keeps the backward.
    anchor = (torch.empty(0, requires_grad=True) if needs_anchor else None)
    return _Checkpoint.apply(function, kwargs, tracker, anchor, *args)


class _Checkpoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, function, kwargs, tracker, anchor, *args):
        ctx.function, ctx.kwargs, ctx.tracker = function, kwargs, tracker
        ctx.tracker_states = (tracker().get_states()
                              if tracker is not None else None)
        ctx.fp8_state = fp8._STATE.get()
        ctx.cpu_rng = torch.get_rng_state()
        ctx.cuda_device = torch.cuda.current_device()
        ctx.cuda_rng = torch.cuda.get_rng_state(ctx.cuda_device)
        ctx.autocast = {"enabled": torch.is_autocast_enabled("cuda"),
                        "dtype": torch.get_autocast_dtype("cuda"),
                        "cache_enabled": torch.is_autocast_cache_enabled()}
        streams = []
        token = _RECORDING.set(streams)
        try:
            outputs = function(*args, **kwargs)
        finally:
            _RECORDING.reset(token)
        ctx.streams = streams
        ctx.tensor_positions = [i for i, a in enumerate(args)
                                if isinstance(a, torch.Tensor)]
        ctx.others = [None if isinstance(a, torch.Tensor) else a
                      for a in args]
        ctx.save_for_backward(*(args[i] for i in ctx.tensor_positions))
        return outputs

    @staticmethod
    def backward(ctx, *grad_outputs):
        args = list(ctx.others)
        for position, tensor in zip(ctx.tensor_positions, ctx.saved_tensors):
            detached = tensor.detach()
            detached.requires_grad_(tensor.requires_grad)
            args[position] = detached
        # Earliest state last, for a program the function ran twice.
        for rewind in reversed(ctx.streams):
            rewind()
        tracker = ctx.tracker() if ctx.tracker is not None else None
        tracker_now = tracker.get_states() if tracker is not None else None
        with torch.random.fork_rng(devices=[ctx.cuda_device]):
            torch.set_rng_state(ctx.cpu_rng)
            torch.cuda.set_rng_state(ctx.cuda_rng, ctx.cuda_device)
            if tracker is not None:
                tracker.set_states(ctx.tracker_states)
            token = fp8._STATE.set(ctx.fp8_state)
            try:
                with torch.enable_grad(), torch.autocast("cuda",
                                                         **ctx.autocast):
                    outputs = ctx.function(*args, **ctx.kwargs)
            finally:
                fp8._STATE.reset(token)
                if tracker is not None:
                    tracker.set_states(tracker_now)
        if isinstance(outputs, torch.Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs)
                 if isinstance(o, torch.Tensor) and o.requires_grad
                 and g is not None]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs],
                                    [g for _, g in pairs])
        grads = [a.grad if isinstance(a, torch.Tensor) and a.requires_grad
                 else None for a in args]
        return (None, None, None, None, *grads)
