"""PyTorch peers of TE's TransformerLayer at the seed layer's sizes, for
benchmarks/gpu/bench_transformer.py.

The layer is the seed's BasicTransformerLayer (the layer TE's quickstart
starts from): LayerNorm, QKV Linear (hidden -> 3 x hidden), attention,
projection Linear, dropout, residual; LayerNorm, fc1, tanh GELU, fc2,
residual. Activations are [seq, batch, hidden] (sbhd), weights
[out_features, in_features], as in TE and tejit.

What can vary:
- attention: UnfusedAttention, the seed's bmm / softmax / dropout / bmm
  (the score matrix is materialized), or SdpaAttention,
  F.scaled_dot_product_attention, whose kernel (flash, cuDNN, ...) the
  caller picks with sdpa_backend();
- Linear: torch.nn.Linear, or torch_peers.Fp8Linear: both GEMM operands in
  FP8 through torch._scaled_mm, tensorwise current scaling (torchao's
  "tensorwise" recipe), E4M3 forward with fast accumulation, E5M2 output
  gradients, FP8 dgrad and wgrad;
- dtype: fp16 (the seed's plain layer) or bf16.

Neither attention applies a mask: these are the like-for-like peers of
TransformerLayer(self_attn_mask_type="no_mask").

One difference from TE's TransformerLayer, kept from the seed: there is no
dropout after the MLP (TE applies hidden_dropout there too), so the peers
do one elementwise pass less than tejit.
"""
import contextlib
import math

import torch
import torch.nn.functional as F

from torch_peers import Fp8Linear

DROPOUT = 0.1
LAYERNORM_EPS = 1e-5


def layer_flops(hidden, ffn_hidden, heads, seq, batch):
    """Model FLOPs of one forward + backward of the layer (the seed peers'
    count): the four Linears' GEMMs, plus QK^T and PV over the full
    seq x seq score matrix (no mask), all x3 for the backward (dgrad +
    wgrad). A causal mask skips about half of the attention part; the
    count stays the no-mask one, so causal rows' TFLOP/s overstate the
    work they did."""
    tokens = seq * batch
    gemm = 2 * tokens * (hidden * 3 * hidden + hidden * hidden
                         + 2 * hidden * ffn_hidden)
    kv_channels = hidden // heads
    attention = 2 * 2 * batch * heads * seq * seq * kv_channels
    return {"total": 3 * (gemm + attention), "gemm": 3 * gemm,
            "attention": 3 * attention}


# --- attention ------------------------------------------------------------------


class UnfusedAttention(torch.nn.Module):
    """softmax(q k^T / sqrt(d)) v with explicit batched matmuls, the seed's
    plain attention: the [batch x heads, seq, seq] scores and
    probabilities are real tensors (and saved for the backward)."""

    def __init__(self, heads, kv_channels, dropout):
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(kv_channels)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, q, k, v):
        # q, k, v: [seq, batch, heads, kv_channels]
        seq, batch, heads, kv = q.shape
        # -> [batch x heads, seq, kv]
        q, k, v = (t.reshape(seq, batch * heads, kv).transpose(0, 1)
                   for t in (q, k, v))
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        probs = self.dropout(torch.softmax(scores, dim=-1))
        context = torch.bmm(probs, v)          # [batch x heads, seq, kv]
        return (context.view(batch, heads, seq, kv).permute(2, 0, 1, 3)
                .reshape(seq, batch, heads * kv))


class SdpaAttention(torch.nn.Module):
    """F.scaled_dot_product_attention over [batch, heads, seq, kv] views,
    no mask; the kernel is whatever backend is enabled around the call
    (sdpa_backend())."""

    def __init__(self, heads, kv_channels, dropout):
        super().__init__()
        self.dropout = dropout

    def forward(self, q, k, v):
        seq, batch = q.shape[0], q.shape[1]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return out.permute(2, 0, 1, 3).reshape(seq, batch, -1)


ATTENTIONS = {"unfused": UnfusedAttention, "sdpa": SdpaAttention}


def sdpa_backend(name):
    """A context manager that restricts scaled_dot_product_attention to one
    backend: "flash" (PyTorch's FlashAttention-2), "cudnn" (cuDNN's fused
    attention), "efficient" (memory-efficient), "math"; None leaves
    PyTorch's own choice. It must be active when the attention is first
    traced (torch.compile) or called (eager): the forward's kernel fixes
    the backward's."""
    if name is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
    if name not in backends:
        raise ValueError(f"unknown SDPA backend {name!r}; one of "
                         f"{sorted(backends)}")
    return sdpa_kernel([getattr(SDPBackend, backends[name])])


# --- the layer --------------------------------------------------------------------


class BasicTransformerLayer(torch.nn.Module):
    """The seed's layer (see the module docstring). `linear` makes the four
    Linears, `attention` the core attention."""

    def __init__(self, hidden, ffn_hidden, heads, linear=torch.nn.Linear,
                 attention=UnfusedAttention, dropout=DROPOUT,
                 eps=LAYERNORM_EPS, parallel=False):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of "
                             f"{heads} heads")
        self.heads = heads
        self.kv_channels = hidden // heads
        self.ln1 = torch.nn.LayerNorm(hidden, eps=eps)
        self.qkv = linear(hidden, 3 * hidden)
        self.attention = attention(heads, self.kv_channels, dropout)
        self.projection = linear(hidden, hidden)
        self.dropout = torch.nn.Dropout(dropout)
        self.ln2 = torch.nn.LayerNorm(hidden, eps=eps)
        self.fc1 = linear(hidden, ffn_hidden)
        self.fc2 = linear(ffn_hidden, hidden)
        # TE's parallel block: x + dropout(attention(ln1 x) + mlp(ln2 x)).
        self.parallel = parallel

    def forward(self, x):
        residual = x
        qkv = self.qkv(self.ln1(x))
        # Per head: [q | k | v], each kv_channels wide (the seed's layout).
        qkv = qkv.view(qkv.shape[0], qkv.shape[1], self.heads,
                       3 * self.kv_channels)
        q, k, v = torch.split(qkv, self.kv_channels, dim=3)
        attention = self.projection(self.attention(q, k, v))
        if self.parallel:
            mlp = self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
            return residual + self.dropout(attention + mlp)
        x = residual + self.dropout(attention)
        residual = x
        x = self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x + residual


def make_layer(hidden, ffn_hidden, heads, attention="sdpa", fp8=False,
               dtype=torch.bfloat16, dropout=DROPOUT, parallel=False):
    """The layer on the GPU in `dtype`, in training mode. attention:
    "unfused" or "sdpa"; fp8: FP8 Linears (torch_peers.Fp8Linear);
    parallel: TE's parallel block."""
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention {attention!r}; one of "
                         f"{sorted(ATTENTIONS)}")
    layer = BasicTransformerLayer(
        hidden, ffn_hidden, heads,
        linear=Fp8Linear if fp8 else torch.nn.Linear,
        attention=ATTENTIONS[attention], dropout=dropout, parallel=parallel)
    return layer.to(device="cuda", dtype=dtype).train()


# --- a Llama-style layer ----------------------------------------------------------


def llama_flops(hidden, ffn_hidden, heads, gqa_groups, seq, batch):
    """Model FLOPs of one forward + backward of LlamaLayer: the four
    Linears (QKV narrowed by GQA, fc1 doubled by SwiGLU's gate), plus QK^T
    and PV over the causal half of the score matrix (what a causal kernel
    computes), all x3 for the backward."""
    tokens = seq * batch
    kv_channels = hidden // heads
    qkv_out = (heads + 2 * gqa_groups) * kv_channels
    gemm = 2 * tokens * (hidden * qkv_out + hidden * hidden
                         + hidden * 2 * ffn_hidden + ffn_hidden * hidden)
    attention = 2 * batch * heads * seq * seq * kv_channels  # causal half
    return {"total": 3 * (gemm + attention), "gemm": 3 * gemm,
            "attention": 3 * attention}


def rotary_tables(seq, kv_channels, base, dtype, device):
    """cos and sin of the non-interleaved rotary angles, [s, 1, 1, d] in
    the layer's dtype (how Llama implementations keep them)."""
    inv = 1.0 / base ** (torch.arange(0, kv_channels, 2, device=device,
                                      dtype=torch.float32) / kv_channels)
    angles = torch.outer(torch.arange(seq, device=device,
                                      dtype=torch.float32), inv)
    angles = torch.cat([angles, angles], dim=-1).view(seq, 1, 1, -1)
    return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)


def apply_rotary(t, cos, sin):
    half = t.shape[-1] // 2
    return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin


class LlamaLayer(torch.nn.Module):
    """A Llama-3-style decoder layer, the peer of TE's TransformerLayer(...,
    num_gqa_groups, normalization="RMSNorm", activation="swiglu",
    bias=False, self_attn_mask_type="causal") with rotary_pos_emb: RMSNorm,
    QKV Linear (GQA: hidden -> (heads + 2 groups) x kv_channels), rotary
    on q and k, causal SDPA with enable_gqa (the kernel reads the shared
    K/V heads; nothing is repeated), projection, residual; RMSNorm, fc1
    (hidden -> 2 x ffn: SwiGLU's two halves), silu(first) x second, fc2,
    residual. No dropout, no biases. Activations [seq, batch, hidden];
    `seq` fixes the rotary tables (buffers, so a compiled forward reads
    them as inputs)."""

    def __init__(self, hidden, ffn_hidden, heads, gqa_groups, seq,
                 linear=torch.nn.Linear, eps=LAYERNORM_EPS,
                 rotary_base=500000.0):
        super().__init__()
        if hidden % heads or heads % gqa_groups:
            raise ValueError(f"hidden {hidden}, heads {heads} and groups "
                             f"{gqa_groups} must divide evenly")
        self.heads, self.groups = heads, gqa_groups
        self.kv_channels = hidden // heads
        self.norm1 = torch.nn.RMSNorm(hidden, eps=eps)
        self.qkv = linear(hidden, (heads + 2 * gqa_groups) * self.kv_channels,
                          bias=False)
        self.projection = linear(hidden, hidden, bias=False)
        self.norm2 = torch.nn.RMSNorm(hidden, eps=eps)
        self.fc1 = linear(hidden, 2 * ffn_hidden, bias=False)
        self.fc2 = linear(ffn_hidden, hidden, bias=False)
        cos, sin = rotary_tables(seq, self.kv_channels, rotary_base,
                                 torch.float32, "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        seq, batch = x.shape[0], x.shape[1]
        d = self.kv_channels
        q, k, v = torch.split(
            self.qkv(self.norm1(x)),
            [self.heads * d, self.groups * d, self.groups * d], dim=-1)
        q = apply_rotary(q.view(seq, batch, self.heads, d), self.cos,
                         self.sin)
        k = apply_rotary(k.view(seq, batch, self.groups, d), self.cos,
                         self.sin)
        v = v.view(seq, batch, self.groups, d)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                   enable_gqa=True)
        x = x + self.projection(
            attention.permute(2, 0, 1, 3).reshape(seq, batch, -1))
        gate, up = torch.chunk(self.fc1(self.norm2(x)), 2, dim=-1)
        return x + self.fc2(F.silu(gate) * up)


def make_llama_layer(hidden, ffn_hidden, heads, gqa_groups, seq, fp8=False,
                     dtype=torch.bfloat16):
    """LlamaLayer on the GPU in `dtype` (its rotary tables too), training
    mode; fp8: FP8 Linears (torch_peers.Fp8Linear)."""
    layer = LlamaLayer(hidden, ffn_hidden, heads, gqa_groups, seq,
                       linear=Fp8Linear if fp8 else torch.nn.Linear)
    return layer.to(device="cuda", dtype=dtype).train()
