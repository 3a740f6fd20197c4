"""make_graphed_callables: Transformer Engine's CUDA-graph capture of
modules' forward and backward, over torch.cuda.make_graphed_callables.

tejit programs only enqueue work on the caller's stream (launches, library
calls, device copies; no allocation, no synchronization) and update their
FP8 scales and dropout state on the device, so a captured step replays
with fresh dropout masks and delayed scaling that moves on at every replay.
What this adds to PyTorch's function is TE's FP8 arguments and the
warm-up's side effects undone: PyTorch warms up with uninitialized output
gradients, whose amaxes would otherwise sit in the backward's amax history
for `amax_history_len` steps.
"""
import functools
import weakref

import torch

from . import fp8
from .module import base
from .module.base import TransformerEngineBaseModule


def _tejit_modules(callables):
    """Every tejit module in (or under) the callables, each once, with the
    programs' owners of tejit.pytorch.ops' chains (made now if need be, so
    that their FP8 state is snapshotted before the warm-up: they are not
    submodules)."""
    found = {}
    for item in callables:
        if isinstance(item, torch.nn.Module):
            for module in item.modules():
                if isinstance(module, TransformerEngineBaseModule):
                    found[id(module)] = module
                for fuser in getattr(module, "_graph_fusers", list)():
                    found[id(fuser)] = fuser
    return list(found.values())


class _KeywordsAsPositions(torch.nn.Module):
    """`module` called with its keyword arguments' tensors as trailing
    positional arguments, since PyTorch's capture takes positional ones
    only; the keyword arguments that are not tensors are fixed at capture.
    Calls the module's forward as it was when wrapped (its graphed forward
    replaces it later)."""

    def __init__(self, module, positional, keys, fixed):
        super().__init__()
        self.module = module
        self._forward = module.forward
        self.positional, self.keys, self.fixed = positional, keys, fixed
        self.train(module.training)

    def forward(self, *args):
        lead, tail = args[:self.positional], args[self.positional:]
        return self._forward(*lead, **dict(zip(self.keys, tail)),
                             **self.fixed)


def _take_keywords(module, graphed, keys, fixed, cast_flag=None):
    """Gives `module` a forward that takes the captured keyword arguments
    and replays `graphed` (a _KeywordsAsPositions): tensors replace the
    captured ones (copied, as positional inputs are), other values must be
    what they were at capture. With `cast_flag` (fp8_weight_caching, a
    base.WeightCastFlag the graphs' weight casts read), the forward also
    takes is_first_microbatch and sets the flag from it before the
    replay."""
    name = type(module).__name__

    def forward(*args, **kwargs):
        first = (kwargs.pop("is_first_microbatch", None)
                 if cast_flag is not None else None)
        unknown = set(kwargs) - set(keys) - set(fixed)
        missing = [key for key in keys if key not in kwargs]
        if unknown or missing:
            raise TypeError(
                f"graphed {name}: called with keyword arguments "
                f"{sorted(kwargs)}; it was captured with {sorted(keys)} "
                f"(tensors, each required) and {sorted(fixed)} (fixed)")
        for key, value in fixed.items():
            if key in kwargs and kwargs[key] != value:
                raise ValueError(
                    f"graphed {name}: {key}={kwargs[key]!r}, but the graph "
                    f"was captured with {key}={value!r}")
        if cast_flag is not None:
            cast_flag.set(first)
        # PyTorch's graphed forward replays only in the mode it captured.
        graphed.training = module.training
        return graphed(*args, *(kwargs[key] for key in keys))

    module.forward = forward
    return module


class _GradientGuard:
    """Keeps accumulated parameter gradients apart from the graphs' memory.
    A graphed backward returns its graph's static buffers, and autograd
    keeps the first gradient it accumulates into a parameter without .grad
    as that .grad, without a copy (PyTorch issue 181723). Those buffers are
    valid only until the next replay of any graph of the same capture (the
    forward graphs' temporaries share their memory pool), so a .grad still
    holding one when a graphed forward is called would then change under
    the caller: gradient accumulation went wrong. A parameter hook notes
    which buffer a .grad was taken from, and every graphed forward of the
    capture first copies each .grad that still is such a buffer. A training
    loop that sets the gradients to None before the next forward copies
    nothing; accumulation copies once per parameter and step (TE clones
    every returned gradient instead). With a caller-given memory pool,
    graphs of other captures may reuse the buffers too, so every first
    gradient is copied at once (`copy_at_once`)."""

    def __init__(self, callables, copy_at_once=False):
        self.copy_at_once = copy_at_once
        self.parameters = []
        self.borrowed = {}  # id(parameter) -> the graph buffer's data_ptr
        seen = set()
        for item in callables:
            if not isinstance(item, torch.nn.Module):
                continue
            for parameter in item.parameters():
                if parameter.requires_grad and id(parameter) not in seen:
                    seen.add(id(parameter))
                    ref = weakref.ref(parameter)
                    self.parameters.append(ref)
                    parameter.register_hook(
                        functools.partial(self._note, ref))

    def _note(self, ref, grad):
        parameter = ref()
        if parameter is None or parameter.grad is not None:
            return grad
        if self.copy_at_once:
            return grad.clone()
        self.borrowed[id(parameter)] = grad.data_ptr()
        return grad

    def before_forward(self):
        if not self.borrowed:
            return
        for ref in self.parameters:
            parameter = ref()
            if parameter is None:
                continue
            pointer = self.borrowed.pop(id(parameter), None)
            if (pointer is not None and parameter.grad is not None
                    and parameter.grad.data_ptr() == pointer):
                parameter.grad = parameter.grad.clone()
        self.borrowed.clear()

    def wrap(self, graphed):
        """`graphed` (a graphed module, whose forward is replaced, or a
        graphed function) calling before_forward first."""
        if isinstance(graphed, torch.nn.Module):
            forward = graphed.forward

            def guarded_forward(*args, **kwargs):
                self.before_forward()
                return forward(*args, **kwargs)

            graphed.forward = guarded_forward
            return graphed

        def guarded(*args, **kwargs):
            self.before_forward()
            return graphed(*args, **kwargs)

        return guarded


def _keyword_wrappers(callables, sample_args, sample_kwargs,
                      always=False):
    """(callables, sample_args) for PyTorch's capture, with each module's
    tensor keyword arguments appended to its positional ones, and per
    callable (keys, fixed) or None when it takes none. With `always`, every
    callable (a module) is wrapped, so that PyTorch replaces the wrapper's
    forward and the module keeps its own for another capture."""
    if not sample_kwargs and not always:
        return callables, sample_args, [None] * len(callables)
    if not sample_kwargs:
        kwargs_list = [{}] * len(callables)
    else:
        kwargs_list = ([sample_kwargs] if len(callables) == 1
                       and isinstance(sample_kwargs, dict)
                       else list(sample_kwargs))
    if len(kwargs_list) != len(callables):
        raise ValueError(f"make_graphed_callables: {len(kwargs_list)} "
                         f"sample_kwargs for {len(callables)} callables")
    wrapped, args_out, layouts = [], [], []
    for callable_, args, kwargs in zip(callables, sample_args, kwargs_list):
        if not kwargs and not always:
            wrapped.append(callable_)
            args_out.append(args)
            layouts.append(None)
            continue
        if not isinstance(callable_, torch.nn.Module):
            raise NotImplementedError(
                "make_graphed_callables(fp8_weight_caching=True) takes "
                "modules only" if always else
                "make_graphed_callables(sample_kwargs=...) is supported by "
                "tejit for modules only; pass a function's inputs "
                "positionally")
        keys = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        fixed = {k: v for k, v in kwargs.items() if k not in keys}
        wrapped.append(_KeywordsAsPositions(callable_, len(args), keys,
                                            fixed))
        args_out.append(tuple(args) + tuple(kwargs[k] for k in keys))
        layouts.append((keys, fixed))
    return tuple(wrapped), tuple(args_out), layouts


def make_graphed_callables(modules, sample_args, num_warmup_iters=3,
                           allow_unused_input=False, sample_kwargs=None,
                           fp8_enabled=False, fp8_calibrating=False,
                           fp8_recipe=None, fp8_group=None,
                           fp8_weight_caching=False, pool=None):
    """Graphed versions of `modules` (a module or callable, or a tuple of
    them in the order they run): each call replays its forward as one CUDA
    graph and its backward as another, as torch.cuda.make_graphed_callables
    does, which this calls. TE's signature: with `fp8_enabled`, the warm-up
    and capture run under fp8_autocast(fp8_recipe), and the graphs keep
    that recipe whatever the context of later calls.

    `sample_kwargs` (a dict, or one per callable) gives modules keyword
    arguments: tensors (e.g. rotary_pos_emb, attention_mask) become graph
    inputs like the positional ones, each call must pass them all; other
    values (a mask type, None) are fixed at capture and must not change.

    The FP8 state of every tejit module is put back after the warm-up as it
    was before (a fresh module's: TE's initial state), so the first replay
    is the first step. With DelayedScaling's reduce_amax across ranks
    (`fp8_group`, or the default group), the graphs replay the amax
    all-reduces they captured: every rank must replay the same graphs in
    the same order.

    `fp8_weight_caching` (TE's FP8 weight caching across micro-batches,
    callables that are modules): the graphed modules take
    is_first_microbatch. True (or None: unlike an eager call with None,
    which casts without keeping) replays graphs that cast the weights to
    FP8 into memory each program keeps; False replays graphs
    that skip those casts and read what the latest True replay (or eager
    call) left there, recording no weight amax (TE's rule): the caller
    promises the weights have not changed since. Modules inside a callable
    need not take the argument: every tejit module in it follows. As in
    TE, one graph set serves both: its weight-cast kernels read a device
    flag that the graphed forward sets before each replay.

    Not supported (NotImplementedError): `fp8_calibrating` (as in
    fp8_autocast), keyword arguments or fp8_weight_caching for callables
    that are not modules, and modules with delay_wgrad_compute."""
    single = not isinstance(modules, tuple)
    callables = (modules,) if single else modules
    args_list = (sample_args,) if single else sample_args
    # Checks the FP8 arguments before any work (fp8_autocast raises).
    autocast = fp8.fp8_autocast(enabled=fp8_enabled,
                                calibrating=fp8_calibrating,
                                fp8_recipe=fp8_recipe, fp8_group=fp8_group)
    tejit_modules = _tejit_modules(callables)
    delaying = [type(m).__name__ for m in tejit_modules
                if m.delay_wgrad_compute]
    if delaying:
        raise NotImplementedError(
            f"make_graphed_callables: {', '.join(delaying)} built with "
            f"delay_wgrad_compute=True; backward_dw() runs outside the "
            f"captured graphs, which tejit does not support: build the "
            f"modules without it")
    before = [module._fp8_meta_state.tensors() for module in tejit_modules]

    def capture(first_microbatch):
        """PyTorch's warm-up and capture of every callable, with calls that
        do not say is_first_microbatch running as `first_microbatch` (None,
        or a WeightCastFlag)."""
        wrapped, wrapped_args, layouts = _keyword_wrappers(
            callables, args_list, sample_kwargs, always=fp8_weight_caching)
        with autocast, base.first_microbatch_default(first_microbatch):
            graphed = torch.cuda.make_graphed_callables(
                wrapped[0] if single else tuple(wrapped),
                wrapped_args[0] if single else tuple(wrapped_args),
                num_warmup_iters=num_warmup_iters,
                allow_unused_input=allow_unused_input, pool=pool)
        return ([graphed] if single else list(graphed)), layouts

    # One graph set either way. With fp8_weight_caching, the weight casts
    # read a device flag at each replay (0 during the warm-up: cast), which
    # each graphed module's forward sets from is_first_microbatch.
    cast_flag = base.WeightCastFlag() if fp8_weight_caching else None
    graphed, layouts = capture(cast_flag)
    # Ordered before the first replay: both go on the current stream.
    for module, snapshot in zip(tejit_modules, before):
        module._fp8_meta_state.restore(snapshot)
    # After the capture: the hooks are not captured.
    guard = _GradientGuard(callables, copy_at_once=pool is not None)
    results = list(graphed)
    for index, layout in enumerate(layouts):
        if layout is not None:
            results[index] = _take_keywords(callables[index], graphed[index],
                                            *layout, cast_flag=cast_flag)
        results[index] = guard.wrap(results[index])
    return results[0] if single else tuple(results)
