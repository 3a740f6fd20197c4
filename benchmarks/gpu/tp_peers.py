"""Megatron-style tensor-parallel PyTorch peers of the seed layer, for
benchmarks/gpu/bench_tensor_parallel.py.

transformer_peers.BasicTransformerLayer split over the ranks of a process
group as Megatron-LM (and TE) split it: the QKV projection and fc1
column-parallel (each rank its heads / its FFN slice), the projection and
fc2 row-parallel (their outputs all-reduced, then their bias added once);
the LayerNorms, dropouts and residuals replicated. The input of each
column-parallel block goes through copy_to_region (identity; all-reduce of
the gradient), the output of each row-parallel one through reduce_from_region
(all-reduce; identity gradient). The all-reduces are out of place
(functional collectives, which torch.compile traces). Linears are torch.nn.Linear or
torch_peers.Fp8Linear (torch._scaled_mm), attention SDPA.

With sequence_parallel (Megatron-LM's, TE's sequence_parallel=True) each
rank holds s/tp positions of the sequence outside the column -> row pairs:
the input and output are [s/tp, b, h], the LayerNorms, dropouts, residuals
and row-parallel biases run on the slice; the input of each column-parallel
block is all-gathered along dim 0 (gather_from_sequence_region: its
gradient reduce-scattered), the output of each row-parallel one
reduce-scattered along dim 0 (reduce_scatter_to_sequence_region: its
gradient all-gathered), out of place too.
"""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from torch_peers import Fp8Linear
from transformer_peers import DROPOUT, LAYERNORM_EPS, SdpaAttention


def _sum(x, group):
    """`x` summed over the group, in a new tensor."""
    return funcol.wait_tensor(funcol.all_reduce(x.contiguous(), "sum", group))


class _CopyToRegion(torch.autograd.Function):
    """Identity forward; the gradient summed over the group (Megatron's
    copy_to_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        return _sum(grad, ctx.group), None


class _ReduceFromRegion(torch.autograd.Function):
    """The sum over the group forward; identity gradient (Megatron's
    reduce_from_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, x, group):
        return _sum(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _gather(x, group):
    """The ranks' `x` concatenated along dim 0 (rank order), in a new
    tensor."""
    return funcol.wait_tensor(funcol.all_gather_tensor(x.contiguous(), 0,
                                                       group))


def _scatter_sum(x, group):
    """Chunk `rank` along dim 0 of `x` summed over the group, in a new
    tensor."""
    return funcol.wait_tensor(funcol.reduce_scatter_tensor(
        x.contiguous(), "sum", 0, group))


class _GatherFromSequenceRegion(torch.autograd.Function):
    """All-gather along dim 0; the gradient reduce-scattered (Megatron's
    gather_from_sequence_parallel_region before a column-parallel GEMM)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _gather(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _scatter_sum(grad, ctx.group), None


class _ReduceScatterToSequenceRegion(torch.autograd.Function):
    """Reduce-scatter along dim 0; the gradient all-gathered (Megatron's
    reduce_scatter_to_sequence_parallel_region after a row-parallel
    GEMM)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _scatter_sum(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather(grad, ctx.group), None


class TensorParallelLayer(torch.nn.Module):
    """One rank's part of the seed layer over `group` (tp ranks)."""

    def __init__(self, hidden, ffn_hidden, heads, group, linear=torch.nn.Linear,
                 dropout=DROPOUT, eps=LAYERNORM_EPS, sequence_parallel=False):
        super().__init__()
        tp = dist.get_world_size(group)
        # Megatron's: only with more than one rank.
        self.sequence_parallel = bool(sequence_parallel) and tp > 1
        if heads % tp or ffn_hidden % tp:
            raise ValueError(f"{heads} heads and FFN {ffn_hidden} must be "
                             f"divisible by the {tp} ranks")
        self.group = group
        self.heads = heads // tp
        self.kv_channels = hidden // heads
        self.ln1 = torch.nn.LayerNorm(hidden, eps=eps)
        self.qkv = linear(hidden, 3 * self.heads * self.kv_channels)
        self.attention = SdpaAttention(self.heads, self.kv_channels, dropout)
        self.projection = linear(self.heads * self.kv_channels, hidden,
                                 bias=False)
        self.projection_bias = torch.nn.Parameter(torch.zeros(hidden))
        self.dropout = torch.nn.Dropout(dropout)
        self.ln2 = torch.nn.LayerNorm(hidden, eps=eps)
        self.fc1 = linear(hidden, ffn_hidden // tp)
        self.fc2 = linear(ffn_hidden // tp, hidden, bias=False)
        self.fc2_bias = torch.nn.Parameter(torch.zeros(hidden))

    def _into_column(self, h):
        """The input of a column-parallel GEMM: replicated (the gradient
        summed), or with sequence parallelism gathered from the ranks'
        slices."""
        if self.sequence_parallel:
            return _GatherFromSequenceRegion.apply(h, self.group)
        return _CopyToRegion.apply(h, self.group)

    def _out_of_row(self, h):
        """The output of a row-parallel GEMM: summed over the ranks, or
        with sequence parallelism summed and scattered (this rank's slice
        of dim 0)."""
        if self.sequence_parallel:
            return _ReduceScatterToSequenceRegion.apply(h, self.group)
        return _ReduceFromRegion.apply(h, self.group)

    def forward(self, x):
        residual = x
        h = self._into_column(self.ln1(x))
        qkv = self.qkv(h)
        qkv = qkv.view(qkv.shape[0], qkv.shape[1], self.heads,
                       3 * self.kv_channels)
        q, k, v = torch.split(qkv, self.kv_channels, dim=3)
        attention = self._out_of_row(self.projection(self.attention(q, k, v)))
        x = residual + self.dropout(attention + self.projection_bias)
        residual = x
        h = self._into_column(self.ln2(x))
        h = self.fc2(F.gelu(self.fc1(h), approximate="tanh"))
        return self._out_of_row(h) + self.fc2_bias + residual


def make_tp_layer(hidden, ffn_hidden, heads, group, fp8=False,
                  dtype=torch.bfloat16, dropout=DROPOUT,
                  sequence_parallel=False):
    """One rank's part of the layer; with `sequence_parallel` it takes and
    returns this rank's [s/tp, b, h] slice."""
    layer = TensorParallelLayer(hidden, ffn_hidden, heads, group,
                                linear=Fp8Linear if fp8 else torch.nn.Linear,
                                dropout=dropout,
                                sequence_parallel=sequence_parallel)
    return layer.to(device="cuda", dtype=dtype).train()
