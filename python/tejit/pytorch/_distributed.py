"""DelayedScaling's amax reduction across ranks, as TE does it.

TE reduces (MAX) the amaxes of every FP8 tensor before each scale update
when the recipe's reduce_amax is on (the default) and torch.distributed is
initialized: over the autocast's amax_reduction_group (fp8_group), or the
default group when none is given. tejit's programs reduce at their own
te.amax_allreduce steps through an AmaxGroup whose function calls
torch.distributed.all_reduce on that process group, on the stream the
program runs on, so the reduction is ordered with the job's other
collectives on the group (DDP's gradient buckets) as TE's is.
"""
import torch

import tejit

from ..common import recipe as _recipe
from ._device_view import device_view

# One tejit.AmaxGroup per (torch process group, CUDA device), made on first
# use.
_GROUPS = {}


def reduction_group(recipe, group):
    """The process group a program's amaxes are reduced over in this call,
    or None (nothing to reduce): `recipe` and `group` are the innermost
    enabled autocast's. As in TE, only while autograd records (a forward
    under torch.no_grad() reduces nothing, so ranks that serve requests
    independently never wait for each other)."""
    if not isinstance(recipe, _recipe.DelayedScaling) or not recipe.reduce_amax:
        return None
    if not torch.is_grad_enabled():
        return None
    distributed = torch.distributed
    if not distributed.is_available() or not distributed.is_initialized():
        return None
    if group is None:
        group = distributed.group.WORLD
    return group if distributed.get_world_size(group) > 1 else None


def amax_group(process_group, device):
    """The tejit.AmaxGroup that all-reduces over `process_group` the amaxes
    of programs on CUDA device `device` (an index)."""
    key = (process_group, device)
    group = _GROUPS.get(key)
    if group is None:
        group = tejit.AmaxGroup.from_function(
            lambda address, count, stream: _all_reduce_max(
                process_group, device, address, count, stream))
        _GROUPS[key] = group
    return group


def _all_reduce_max(process_group, device, address, count, stream):
    amaxes = device_view(address, count, torch.float32, device)
    current = torch.cuda.current_stream(device)
    if (stream or 0) == current.cuda_stream:
        run_on = current
    else:
        run_on = torch.cuda.ExternalStream(stream or 0, device=device)
    with torch.cuda.device(device), torch.cuda.stream(run_on):
        torch.distributed.all_reduce(amaxes, op=torch.distributed.ReduceOp.MAX,
                                     group=process_group)
