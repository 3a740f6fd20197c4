#!/usr/bin/env python3
"""Issue 6, item 3: Transformer Engine's quickstart fused layer, written as
TE code, on tejit. The only tejit-specific lines are the two imports
marked below; everything else is what the TE quickstart runs (attention in
PyTorch: scaled_dot_product_attention, no causal mask).

The layer (LayerNormLinear QKV, attention, Linear projection, residual,
LayerNormMLP, residual) runs forward and backward under
fp8_autocast(DelayedScaling(HYBRID, amax_history_len=16, "max")) for three
steps, and once in bf16 (FP8 disabled) on the same weights, input and
output gradient. The third FP8 step (the first two set the delayed scales:
step 1 casts with scale 1) is compared with the bf16 step: relative L2 of
the output below 0.125 and of the input gradient below 0.25 -- TE's FP8
tolerances (E4M3 rtol for forward results, E5M2 for gradients; FP8's own
error at full size is about 0.10 / 0.12, measured on an H200) (both also
printed for the block's own contribution, output - input and d_input -
d_output, which the residuals would otherwise dominate). Then both are
timed.

Sizes: hidden 1024, ffn 4096, 16 heads, seq 512, batch 4; --full: 4096,
16384, 32, 2048, 4 (the quickstart's). Run on the GPU machine with tejit
importable (pip install ./python, or PYTHONPATH=python):
    PYTHONPATH=python python3 tests/gpu/quickstart_te.py [--full]
Exits 1 when a bound is exceeded.
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F

# The two tejit-specific lines; TE's quickstart has
# `import transformer_engine.pytorch as te` and
# `from transformer_engine.common import recipe`.
import tejit.pytorch as te
from tejit.common import recipe


class DotProductAttention(torch.nn.Module):
    """Attention over [s, b, heads, kv_channels] query/key/value, with
    PyTorch's fused scaled_dot_product_attention."""

    def __init__(self, num_attention_heads, kv_channels, attention_dropout):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.kv_channels = kv_channels
        self.attention_dropout = attention_dropout

    def forward(self, q, k, v):
        s, b = q.size(0), q.size(1)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, h, s, d]
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=False,
            dropout_p=self.attention_dropout if self.training else 0.0)
        return out.permute(2, 0, 1, 3).reshape(s, b, -1)


class FusedTETransformerLayer(torch.nn.Module):
    def __init__(self, hidden_size, ffn_hidden_size, num_attention_heads,
                 layernorm_eps=1e-5, attention_dropout=0.0,
                 hidden_dropout=0.0):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.kv_channels = hidden_size // num_attention_heads
        self.ln_qkv = te.LayerNormLinear(hidden_size, 3 * hidden_size,
                                         eps=layernorm_eps, bias=True)
        self.attention = DotProductAttention(
            num_attention_heads=num_attention_heads,
            kv_channels=self.kv_channels,
            attention_dropout=attention_dropout)
        self.projection = te.Linear(hidden_size, hidden_size, bias=True)
        self.dropout = torch.nn.Dropout(hidden_dropout)
        self.ln_mlp = te.LayerNormMLP(hidden_size, ffn_hidden_size,
                                      eps=layernorm_eps, bias=True)

    def forward(self, x):
        res = x
        qkv = self.ln_qkv(x)
        # Split qkv into query, key and value
        qkv = qkv.view(qkv.size(0), qkv.size(1), self.num_attention_heads,
                       3 * self.kv_channels)
        q, k, v = torch.split(qkv, qkv.size(3) // 3, dim=3)
        x = self.attention(q, k, v)
        x = self.projection(x)
        x = self.dropout(x)
        x = res + x
        res = x
        x = self.ln_mlp(x)
        x = self.dropout(x)
        return x + res


def rel_l2(got, want):
    return ((got - want).norm() / want.norm()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true",
                        help="the quickstart's size (4096/16384/32/2048/4)")
    args = parser.parse_args()
    if args.full:
        hidden_size, ffn_hidden_size, num_attention_heads = 4096, 16384, 32
        sequence_length, batch_size = 2048, 4
    else:
        hidden_size, ffn_hidden_size, num_attention_heads = 1024, 4096, 16
        sequence_length, batch_size = 512, 4
    dtype = torch.bfloat16

    torch.manual_seed(1234)
    te_transformer = FusedTETransformerLayer(hidden_size, ffn_hidden_size,
                                             num_attention_heads)
    te_transformer.to(dtype=dtype).cuda()
    x = torch.rand(sequence_length, batch_size, hidden_size).cuda().to(
        dtype=dtype).requires_grad_()
    dy = torch.rand(sequence_length, batch_size, hidden_size).cuda().to(
        dtype=dtype)
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                       amax_history_len=16,
                                       amax_compute_algo="max")

    def step(fp8):
        x.grad = None
        te_transformer.zero_grad(set_to_none=True)
        with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
            y = te_transformer(x)
        y.backward(dy)
        return y.detach().float(), x.grad.detach().float()

    for _ in range(3):
        y8, dx8 = step(fp8=True)
    y16, dx16 = step(fp8=False)
    x32, dy32 = x.detach().float(), dy.float()
    errors = {
        "output": rel_l2(y8, y16),
        "input grad": rel_l2(dx8, dx16),
        "output - input": rel_l2(y8 - x32, y16 - x32),
        "input grad - output grad": rel_l2(dx8 - dy32, dx16 - dy32),
    }
    print(f"hidden {hidden_size}, ffn {ffn_hidden_size}, heads "
          f"{num_attention_heads}, seq {sequence_length}, batch "
          f"{batch_size}: FP8 (step 3) vs bf16, relative L2:")
    for name, value in errors.items():
        print(f"  {name:26} {value:.4f}")

    for fp8 in (False, True):
        for _ in range(3):
            step(fp8)
        torch.cuda.synchronize()
        start, iterations = time.perf_counter(), 10
        for _ in range(iterations):
            step(fp8)
        torch.cuda.synchronize()
        milliseconds = (time.perf_counter() - start) * 1e3 / iterations
        print(f"  {'FP8' if fp8 else 'bf16':4} forward+backward "
              f"{milliseconds:.2f} ms")

    ok = errors["output"] < 0.125 and errors["input grad"] < 0.25
    print("PASS" if ok else "FAIL: bound exceeded (output < 0.125, input "
          "grad < 0.25)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
