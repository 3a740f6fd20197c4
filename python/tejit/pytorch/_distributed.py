"""Collectives tejit's programs run through torch.distributed: DelayedScaling's
amax reduction across ranks, and tensor parallelism's all-reduces.

TE reduces (MAX) the amaxes of every FP8 tensor before each scale update
when the recipe's reduce_amax is on (the default) and torch.distributed is
initialized: over the autocast's amax_reduction_group (fp8_group), or the
default group when none is given. tejit's programs reduce at their own
te.amax_allreduce steps through an AmaxGroup whose function calls
torch.distributed.all_reduce on that process group, on the stream the
program runs on, so the reduction is ordered with the job's other
collectives on the group (DDP's gradient buckets) as TE's is.

Tensor parallelism (docs/tensor-parallel.md): a program with tp_allreduce
steps sums its partial results over the module's tp_group through a
TensorParallelGroup whose function calls torch.distributed.all_reduce
(SUM) on that group, on the program's stream, as TE's modules all-reduce
on the current stream.
"""
import torch

import tejit

from ..common import recipe as _recipe
from ._device_view import device_view

# One tejit.AmaxGroup per (torch process group, CUDA device), made on first
# use.
_GROUPS = {}
# One tejit.TensorParallelGroup per (torch process group, CUDA device).
_TP_GROUPS = {}
# The dtypes a tensor-parallel all-reduce sums, by the runtime's names.
_TP_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16,
              "float32": torch.float32}


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


def group_size(process_group):
    """The number of ranks of `process_group` (1 when torch.distributed is
    not initialized, as TE's get_distributed_world_size)."""
    distributed = torch.distributed
    if not distributed.is_available() or not distributed.is_initialized():
        return 1
    return distributed.get_world_size(process_group)


def tp_group(process_group, device):
    """The tejit.TensorParallelGroup that sums over `process_group` the
    tensors of tensor-parallel programs on CUDA device `device` (an
    index)."""
    key = (process_group, device)
    group = _TP_GROUPS.get(key)
    if group is None:
        group = tejit.TensorParallelGroup.from_function(
            lambda address, count, dtype, stream: _all_reduce_sum(
                process_group, device, address, count, dtype, stream))
        _TP_GROUPS[key] = group
    return group


def _stream(device, stream):
    """The torch stream of the program's `stream` handle (None or 0: the
    legacy default stream): the current stream when it is that one."""
    current = torch.cuda.current_stream(device)
    if (stream or 0) == current.cuda_stream:
        return current
    return torch.cuda.ExternalStream(stream or 0, device=device)


def _all_reduce_max(process_group, device, address, count, stream):
    amaxes = device_view(address, count, torch.float32, device)
    with torch.cuda.device(device), torch.cuda.stream(_stream(device,
                                                              stream)):
        torch.distributed.all_reduce(amaxes, op=torch.distributed.ReduceOp.MAX,
                                     group=process_group)


def _all_reduce_sum(process_group, device, address, count, dtype, stream):
    if dtype not in _TP_DTYPES:
        raise ValueError(f"tejit: a tensor-parallel all-reduce of {dtype} "
                         f"(expected one of {', '.join(_TP_DTYPES)})")
    tensor = device_view(address, count, _TP_DTYPES[dtype], device)
    with torch.cuda.device(device), torch.cuda.stream(_stream(device,
                                                              stream)):
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM,
                                     group=process_group)
