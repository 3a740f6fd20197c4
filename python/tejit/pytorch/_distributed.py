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
on the current stream. Sequence parallelism's tp_allgather and
tp_reducescatter steps go through the same group's all_gather
(torch.distributed.all_gather_into_tensor: rank r's chunk at r * count)
and reduce_scatter (reduce_scatter_tensor, SUM: this rank keeps chunk
`rank` of the sum) functions, on the program's stream too.

Context parallelism (docs/context-parallel.md): a program with cp_size > 1
gathers its attention's keys and values over the module's cp_group
(cp_allgather steps) and reduce-scatters their gradients
(cp_reducescatter) through tp_group(process_group, device), the same
object a tensor-parallel program over that process group gets (the
all-gather and reduce-scatter functions above; the runtime reorders the
load-balanced chunks itself). With cp_comm_type a2a its cp_alltoall steps
trade heads for tokens through that object's all_to_all function
(torch.distributed.all_to_all_single over the process group, on the
program's stream; given where the library takes one:
TensorParallelGroup.takes_all_to_all).
"""
import contextlib
import functools

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
    """The tejit.TensorParallelGroup that sums (all-reduce), gathers,
    reduce-scatters and (where the library takes one) all-to-alls over
    `process_group` the tensors of tensor- and context-parallel programs
    on CUDA device `device` (an index)."""
    key = (process_group, device)
    group = _TP_GROUPS.get(key)
    if group is None:
        ranks = group_size(process_group)
        optional = {}
        if tejit.TensorParallelGroup.takes_all_to_all():
            optional["all_to_all"] = functools.partial(
                _all_to_all, process_group, ranks, device)
        group = tejit.TensorParallelGroup.from_function(
            functools.partial(_all_reduce_sum, process_group, device),
            all_gather=functools.partial(_all_gather, process_group, ranks,
                                         device),
            reduce_scatter=functools.partial(_reduce_scatter_sum,
                                             process_group, ranks, device),
            **optional)
        _TP_GROUPS[key] = group
    return group


def _stream(device, stream):
    """The torch stream of the program's `stream` handle (None or 0: the
    legacy default stream): the current stream when it is that one."""
    current = torch.cuda.current_stream(device)
    if (stream or 0) == current.cuda_stream:
        return current
    return torch.cuda.ExternalStream(stream or 0, device=device)


@contextlib.contextmanager
def _on_stream(device, stream):
    """CUDA device `device` and the program's `stream` current while a
    collective is enqueued (torch.distributed's NCCL calls run on the
    current stream)."""
    with torch.cuda.device(device), torch.cuda.stream(_stream(device,
                                                              stream)):
        yield


def _all_reduce_max(process_group, device, address, count, stream):
    amaxes = device_view(address, count, torch.float32, device)
    with _on_stream(device, stream):
        torch.distributed.all_reduce(amaxes, op=torch.distributed.ReduceOp.MAX,
                                     group=process_group)


def _tp_dtype(what, dtype):
    """The torch dtype of a tensor-parallel collective's runtime name."""
    if dtype not in _TP_DTYPES:
        raise ValueError(f"tejit: a tensor-parallel {what} of {dtype} "
                         f"(expected one of {', '.join(_TP_DTYPES)})")
    return _TP_DTYPES[dtype]


def _all_reduce_sum(process_group, device, address, count, dtype, stream):
    tensor = device_view(address, count, _tp_dtype("all-reduce", dtype),
                         device)
    with _on_stream(device, stream):
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM,
                                     group=process_group)


def _all_gather(process_group, ranks, device, in_address, out_address, count,
                dtype, stream):
    """Sequence parallelism's gather: `count` elements per rank at
    `in_address`, every rank's at `out_address` (ranks * count, rank r's
    at r * count)."""
    torch_dtype = _tp_dtype("all-gather", dtype)
    chunk = device_view(in_address, count, torch_dtype, device)
    gathered = device_view(out_address, count * ranks, torch_dtype, device)
    with _on_stream(device, stream):
        torch.distributed.all_gather_into_tensor(gathered, chunk,
                                                 group=process_group)


def _reduce_scatter_sum(process_group, ranks, device, in_address, out_address,
                        count, dtype, stream):
    """Sequence parallelism's reduce-scatter: the element-wise sum over
    the ranks of ranks * count elements at `in_address`, of which this
    rank keeps chunk `rank` (`count` elements) at `out_address`."""
    torch_dtype = _tp_dtype("reduce-scatter", dtype)
    whole = device_view(in_address, count * ranks, torch_dtype, device)
    chunk = device_view(out_address, count, torch_dtype, device)
    with _on_stream(device, stream):
        torch.distributed.reduce_scatter_tensor(
            chunk, whole, op=torch.distributed.ReduceOp.SUM,
            group=process_group)


def _all_to_all(process_group, ranks, device, in_address, out_address, count,
                dtype, stream):
    """Context parallelism's a2a: ranks * count elements at `in_address`
    and at `out_address`; block j of the output (`count` elements) is
    block r (this rank's) of rank j's input, as all_to_all_single's equal
    splits."""
    torch_dtype = _tp_dtype("all-to-all", dtype)
    source = device_view(in_address, count * ranks, torch_dtype, device)
    target = device_view(out_address, count * ranks, torch_dtype, device)
    with _on_stream(device, stream):
        torch.distributed.all_to_all_single(target, source,
                                            group=process_group)
