"""TE's communication ops (`ops.AllReduce`, `ops.AllGather`,
`ops.ReduceScatter`): torch.distributed collectives with autograd, run as
PyTorch code between programs (a chain's own tensor parallelism runs
inside its program: BasicLinear's tensor_parallel_mode), and the sum of
the row-parallel ops.Linear's per-rank biases.

Dim 0 is the one gathered and scattered, chunk r on rank r (TE's
gather_along_first_dim; torch's all_gather_into_tensor and
reduce_scatter_tensor)."""
import torch

from .. import _distributed
from .op import BasicOperation, group_attribute


def _group(group):
    """The process group (None: the world group)."""
    return torch.distributed.group.WORLD if group is None else group


def _all_reduce(tensor, group):
    """The sum of `tensor` over the ranks of `group`, in a new tensor."""
    total = tensor.contiguous().clone()
    torch.distributed.all_reduce(total, group=_group(group))
    return total


def _all_gather(tensor, group, size):
    """The ranks' `tensor`s concatenated along dim 0, in rank order."""
    tensor = tensor.contiguous()
    out = torch.empty((tensor.shape[0] * size, *tensor.shape[1:]),
                      dtype=tensor.dtype, device=tensor.device)
    torch.distributed.all_gather_into_tensor(out, tensor, group=_group(group))
    return out


def _reduce_scatter(tensor, group, size, owner):
    """Chunk `rank` (along dim 0) of the sum of the ranks' `tensor`s."""
    if tensor.dim() == 0 or tensor.shape[0] % size:
        raise ValueError(f"tejit: ops.{owner}: reduce-scatters dim 0 over "
                         f"{size} ranks; a tensor {tuple(tensor.shape)} "
                         f"does not divide")
    tensor = tensor.contiguous()
    out = torch.empty((tensor.shape[0] // size, *tensor.shape[1:]),
                      dtype=tensor.dtype, device=tensor.device)
    torch.distributed.reduce_scatter_tensor(out, tensor, group=_group(group))
    return out


class _Sum(torch.autograd.Function):
    """The sum over the ranks; its gradient is the output's (each rank's
    use of the sum is the same), or with `reduce_backward` the sum of the
    ranks' output gradients (each rank used the sum on its own data)."""

    @staticmethod
    def forward(ctx, tensor, group, reduce_backward):
        ctx.group, ctx.reduce_backward = group, reduce_backward
        return _all_reduce(tensor, group)

    @staticmethod
    def backward(ctx, grad):
        if ctx.reduce_backward:
            grad = _all_reduce(grad, ctx.group)
        return grad, None, None


class _Gather(torch.autograd.Function):
    """All-gather along dim 0; its gradient is reduce-scattered."""

    @staticmethod
    def forward(ctx, tensor, group, size):
        ctx.group, ctx.size = group, size
        return _all_gather(tensor, group, size)

    @staticmethod
    def backward(ctx, grad):
        return (_reduce_scatter(grad, ctx.group, ctx.size, "AllGather"),
                None, None)


class _Scatter(torch.autograd.Function):
    """Reduce-scatter along dim 0; its gradient is all-gathered."""

    @staticmethod
    def forward(ctx, tensor, group, size):
        ctx.group, ctx.size = group, size
        return _reduce_scatter(tensor, group, size, "ReduceScatter")

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, ctx.group, ctx.size), None, None


def sum_over_ranks(tensor, group, reduce_backward=False):
    """`tensor` summed over `group`'s ranks, differentiably (_Sum)."""
    return _Sum.apply(tensor, group, reduce_backward)


class _Collective(BasicOperation):
    """A communication op: runs between programs (it ends a run of
    compiled ops); a group of one rank passes the input through."""

    compiled = False
    process_group = group_attribute("process_group")

    def __init__(self, process_group=None):
        super().__init__()
        self.process_group = process_group
        self.process_group_size = _distributed.group_size(process_group)


class AllReduce(_Collective):
    """The sum of the input over process_group's ranks (TE's AllReduce:
    its gradient is the output's, as the output is used alike on every
    rank). reduce_in_backward is TE's argument, kept and unused as in
    TE."""

    def __init__(self, process_group=None, reduce_in_backward=True):
        super().__init__(process_group)
        self._reduce_in_backward = bool(reduce_in_backward)

    def _eager(self, x):
        if self.process_group_size == 1:
            return x
        return sum_over_ranks(x, self.process_group)


class AllGather(_Collective):
    """The ranks' inputs concatenated along dim 0 (TE's AllGather; the
    gradient reduce-scattered)."""

    def _eager(self, x):
        if self.process_group_size == 1:
            return x
        return _Gather.apply(x, self.process_group, self.process_group_size)


class ReduceScatter(_Collective):
    """This rank's chunk of dim 0 of the sum of the ranks' inputs (TE's
    ReduceScatter; the gradient all-gathered)."""

    def _eager(self, x):
        if self.process_group_size == 1:
            return x
        return _Scatter.apply(x, self.process_group, self.process_group_size)
