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


class TensorParallelLayer(torch.nn.Module):
    """One rank's part of the seed layer over `group` (tp ranks)."""

    def __init__(self, hidden, ffn_hidden, heads, group, linear=torch.nn.Linear,
                 dropout=DROPOUT, eps=LAYERNORM_EPS):
        super().__init__()
        tp = dist.get_world_size(group)
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

    def forward(self, x):
        residual = x
        h = _CopyToRegion.apply(self.ln1(x), self.group)
        qkv = self.qkv(h)
        qkv = qkv.view(qkv.shape[0], qkv.shape[1], self.heads,
                       3 * self.kv_channels)
        q, k, v = torch.split(qkv, self.kv_channels, dim=3)
        attention = _ReduceFromRegion.apply(
            self.projection(self.attention(q, k, v)), self.group)
        x = residual + self.dropout(attention + self.projection_bias)
        residual = x
        h = _CopyToRegion.apply(self.ln2(x), self.group)
        h = self.fc2(F.gelu(self.fc1(h), approximate="tanh"))
        return _ReduceFromRegion.apply(h, self.group) + self.fc2_bias + residual


def make_tp_layer(hidden, ffn_hidden, heads, group, fp8=False,
                  dtype=torch.bfloat16, dropout=DROPOUT):
    layer = TensorParallelLayer(hidden, ffn_hidden, heads, group,
                                linear=Fp8Linear if fp8 else torch.nn.Linear,
                                dropout=dropout)
    return layer.to(device="cuda", dtype=dtype).train()
