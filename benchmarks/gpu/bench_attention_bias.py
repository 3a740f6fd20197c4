#!/usr/bin/env python3
"""Attention with a bias or ALiBi: tejit's DotProductAttention
(core_attention_bias_type post_scale_bias / alibi on cuDNN's flash
attention) against what PyTorch users run for it, same process, same GPU,
same inputs: scaled_dot_product_attention with the bias materialized as a
float attn_mask (PyTorch picks its memory-efficient or cuDNN backend; flash
takes no mask), and FlexAttention (torch.compile of flex_attention with a
score_mod: ALiBi computed in the kernel, or the bias tensor read in it).

Run on the GPU machine (after tools/scripts/pack-gpu.sh here, carry .gpu):
    source tools/scripts/gpu-env.sh; PYTHONPATH=$PWD/python \\
        python3 benchmarks/gpu/bench_attention_bias.py [--batch 2] [--seq 2048]
        [--no-flex]

Shapes: the seed layer's attention (32 heads of 128, seq 2048, bshd, bf16,
causal). Rows per case: one forward + backward (q, k, v need gradients;
the bias rows' bias too: a T5-style relative bias [1, h, s, s] that
learns). Before timing, each peer's output and gradients are compared with
tejit's (relative L2, printed). Times: CUDA events around 10 runs after 3
warm-ups, median of 5 such batches."""
import argparse
import math

import torch
import torch.nn.functional as F

import tejit.pytorch as te
from bench_attention import timed


def vanilla_slopes(heads):
    """Transformer Engine's default ALiBi slopes (docs/attention-bias.md)."""
    n = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 * (k + 1) / n) for k in range(n)]
    slopes += [2.0 ** (-4.0 * (2 * (k - n) + 1) / n)
               for k in range(n, heads)]
    return torch.tensor(slopes, dtype=torch.float32, device="cuda")


def alibi_bias(slopes, s):
    """[1, h, s, s] f32: -slope * |i - j| (self-attention, no offset)."""
    pos = torch.arange(s, device="cuda", dtype=torch.float32)
    distance = (pos.view(s, 1) - pos.view(1, s)).abs()
    return -slopes.view(1, -1, 1, 1) * distance


def causal_fill(s, dtype):
    """0 on and below the diagonal, -inf above: SDPA's float mask form of
    the causal mask, to add to a bias."""
    keep = torch.ones(s, s, dtype=torch.bool, device="cuda").tril()
    return torch.zeros(s, s, dtype=dtype, device="cuda").masked_fill(
        ~keep, float("-inf"))


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def step_fn(forward, inputs, grad_out):
    """One forward + backward of `forward(*inputs)`, gradients cleared."""
    def step():
        for tensor in inputs:
            tensor.grad = None
        forward(*inputs).backward(grad_out)
    return step


def outputs_of(forward, inputs, grad_out):
    for tensor in inputs:
        tensor.grad = None
    out = forward(*inputs)
    out.backward(grad_out)
    return [out.detach()] + [t.grad.detach() for t in inputs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--no-flex", action="store_true",
                        help="leave out the FlexAttention rows (their "
                        "compile takes a minute)")
    args = parser.parse_args()
    b, s, h, d = args.batch, args.seq, args.heads, args.dim
    dtype = torch.bfloat16
    print(f"# attention with a bias: {torch.cuda.get_device_name()}, b{b} "
          f"h{h} s{s} d{d} bf16 bshd causal, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}\n")
    torch.manual_seed(0)

    def leaf(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", dtype=dtype) *
                scale).requires_grad_()

    q, k, v = (leaf(b, s, h, d) for _ in range(3))
    grad_out = torch.randn(b, s, h * d, device="cuda", dtype=dtype)
    rel_bias = leaf(1, h, s, s, scale=0.5)
    slopes = vanilla_slopes(h)
    alibi = alibi_bias(slopes, s).to(dtype)
    causal = causal_fill(s, dtype)
    flops = 4.0 * b * h * s * s * d * 0.5 * 3.5  # causal, fwd + 2.5x bwd

    dpa = te.DotProductAttention(h, d, attn_mask_type="causal",
                                 qkv_format="bshd")

    def tejit_plain(q, k, v):
        return dpa(q, k, v)

    def tejit_alibi(q, k, v):
        return dpa(q, k, v, core_attention_bias_type="alibi")

    def tejit_bias(q, k, v, bias):
        return dpa(q, k, v, core_attention_bias_type="post_scale_bias",
                   core_attention_bias=bias)

    def sdpa(q, k, v, mask):
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
            attn_mask=mask)
        return out.transpose(1, 2).reshape(b, s, h * d)

    def sdpa_alibi(q, k, v):
        return sdpa(q, k, v, alibi + causal)

    def sdpa_bias(q, k, v, bias):
        return sdpa(q, k, v, bias + causal)

    cases = [
        ("no bias", "tejit", tejit_plain, (q, k, v)),
        ("no bias", "PyTorch SDPA (flash)",
         lambda q, k, v: F.scaled_dot_product_attention(
             q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
             is_causal=True).transpose(1, 2).reshape(b, s, h * d),
         (q, k, v)),
        ("ALiBi", "tejit", tejit_alibi, (q, k, v)),
        ("ALiBi", "PyTorch SDPA, bias as attn_mask", sdpa_alibi, (q, k, v)),
        ("bias [1,h,s,s] + grad", "tejit", tejit_bias, (q, k, v, rel_bias)),
        ("bias [1,h,s,s] + grad", "PyTorch SDPA, bias as attn_mask",
         sdpa_bias, (q, k, v, rel_bias)),
    ]
    if not args.no_flex:
        cases += flex_cases(b, s, h, d, slopes, q, k, v, rel_bias)

    print("| case | implementation | fwd+bwd ms | TFLOP/s | rel. L2 vs "
          "tejit (out, grads) |")
    print("|---|---|---|---|---|")
    reference = {}
    for case, name, forward, inputs in cases:
        try:
            results = outputs_of(forward, inputs, grad_out)
            if case not in reference:
                reference[case] = results
                error = "-"
            else:
                error = ", ".join(f"{rel_l2(a, r):.1e}" for a, r in
                                  zip(results, reference[case]))
            ms = timed(step_fn(forward, inputs, grad_out), warmup=3, runs=10)
            print(f"| {case} | {name} | {ms:.3f} | {flops / ms / 1e9:.0f} "
                  f"| {error} |", flush=True)
        except Exception as exc:  # a peer that cannot run this case
            print(f"| {case} | {name} | n/a | | {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0][:80]} |", flush=True)


def flex_cases(b, s, h, d, slopes, q, k, v, rel_bias):
    """FlexAttention rows: ALiBi and the bias as score_mods, causal as a
    block mask (its sparsity skips the masked tiles)."""
    from torch.nn.attention.flex_attention import (create_block_mask,
                                                   flex_attention)
    flex = torch.compile(flex_attention)
    block_mask = create_block_mask(lambda b_, h_, i, j: j <= i, None, None,
                                   s, s)

    def alibi_mod(score, b_, head, i, j):
        return score - slopes[head] * (i - j).abs()

    def run(q, k, v, score_mod):
        out = flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                   score_mod=score_mod, block_mask=block_mask)
        return out.transpose(1, 2).reshape(b, s, h * d)

    def flex_alibi(q, k, v):
        return run(q, k, v, alibi_mod)

    def flex_bias(q, k, v, bias):
        def bias_mod(score, b_, head, i, j):
            return score + bias[0, head, i, j]
        return run(q, k, v, bias_mod)

    return [("ALiBi", "FlexAttention (torch.compile)", flex_alibi,
             (q, k, v)),
            ("bias [1,h,s,s] + grad", "FlexAttention (torch.compile)",
             flex_bias, (q, k, v, rel_bias))]


if __name__ == "__main__":
    main()
