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
import torch

from . import fp8
from .module.base import TransformerEngineBaseModule


def _tejit_modules(callables):
    """Every tejit module in (or under) the callables, each once."""
    found = {}
    for item in callables:
        if isinstance(item, torch.nn.Module):
            for module in item.modules():
                if isinstance(module, TransformerEngineBaseModule):
                    found[id(module)] = module
    return list(found.values())


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

    The FP8 state of every tejit module is put back after the warm-up as it
    was before (a fresh module's: TE's initial state), so the first replay
    is the first step. With DelayedScaling's reduce_amax across ranks
    (`fp8_group`, or the default group), the graphs replay the amax
    all-reduces they captured: every rank must replay the same graphs in
    the same order. Not supported (NotImplementedError): `fp8_calibrating`
    (as in fp8_autocast), `fp8_weight_caching` (no is_first_microbatch), and
    keyword arguments (`sample_kwargs`), which PyTorch's capture does not
    take."""
    if fp8_weight_caching:
        raise NotImplementedError(
            "make_graphed_callables(fp8_weight_caching=True) is not "
            "supported by tejit: modules quantize their weights every step")
    if sample_kwargs:
        raise NotImplementedError(
            "make_graphed_callables(sample_kwargs=...) is not supported by "
            "tejit: pass every input positionally in sample_args")
    single = not isinstance(modules, tuple)
    callables = (modules,) if single else modules
    # Checks the FP8 arguments before any work (fp8_autocast raises).
    autocast = fp8.fp8_autocast(enabled=fp8_enabled,
                                calibrating=fp8_calibrating,
                                fp8_recipe=fp8_recipe, fp8_group=fp8_group)
    tejit_modules = _tejit_modules(callables)
    before = [module._fp8_meta_state.tensors() for module in tejit_modules]
    with autocast:
        graphed = torch.cuda.make_graphed_callables(
            modules, sample_args, num_warmup_iters=num_warmup_iters,
            allow_unused_input=allow_unused_input, pool=pool)
    # Ordered before the first replay: both go on the current stream.
    for module, snapshot in zip(tejit_modules, before):
        module._fp8_meta_state.restore(snapshot)
    return graphed
