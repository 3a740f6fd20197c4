#!/usr/bin/env python3
"""FP8 attention (Transformer Engine's fp8_dpa, docs/fp8-attention.md):
tejit's attention on FP8 q, k, v against its bf16 attention and PyTorch's,
same process, same GPU, same inputs.

Run on the GPU machine (after tools/scripts/pack-gpu.sh here, carry .gpu):
    source tools/scripts/gpu-env.sh; PYTHONPATH=$PWD/python \\
        python3 benchmarks/gpu/bench_fp8_attention.py [--batch 2 4]
        [--seq 2048] [--layer-batch 4] [--no-layer] [--profile]

1. The attention core: DotProductAttention at the seed layer's attention
   (32 heads of 128, seq 2048, bshd, causal, batch 2 and 4), one forward
   + backward (q, k, v need gradients): tejit bf16 (no recipe), tejit
   under fp8_autocast(DelayedScaling(fp8_dpa=True)) (q, k, v cast to E4M3
   with one delayed scale, cuDNN's FP8 flash attention, dO and the
   gradients in E5M2), and PyTorch's scaled_dot_product_attention with the
   flash backend (bf16).
2. The seed TransformerLayer (hidden 4096, FFN 16384, 32 heads, seq 2048,
   batch 4, causal, no dropout so that the outputs compare), one training
   step: bf16 (no recipe), DelayedScaling(HYBRID) (FP8 GEMMs, bf16
   attention: the default) and DelayedScaling(HYBRID, fp8_dpa=True).

Times: CUDA events around 10 runs after 3 warm-ups, median of 5 such
batches (bench_attention.timed). Accuracy, after the timed runs (the
delayed scales warmed up): relative RMSE ||got - ref|| / ||ref|| of the
output and of the gradients (attention: dq, dk, dv; layer: the input's)
against the bf16 row on the same inputs and weights. TFLOP/s counts 4 b h
s^2 d for the attention's forward, half of it for causal, and 2.5 times
the forward for the backward; the layer's is bench_transformer.py's model
count (transformer_peers.layer_flops, no-mask attention). --profile lists
each attention row's kernels (which cuDNN engine runs)."""
import argparse
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tejit.pytorch as te
from bench_attention import print_kernels, timed
from tejit.common import recipe
from transformer_peers import layer_flops


def delayed(fp8_dpa):
    return recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                 amax_history_len=16, amax_compute_algo="max",
                                 fp8_dpa=fp8_dpa)


def rel_rmse(got, ref):
    got, ref = got.double(), ref.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def train_step(forward, leaves, grad_out):
    """One forward + backward of `forward()` (under its own autocast),
    the leaves' gradients cleared first: a step for timed()."""
    def step():
        for leaf in leaves:
            leaf.grad = None
        forward().backward(grad_out)
    return step


def results_of(forward, leaves, grad_out):
    """(output, gradient of each leaf) of one more step."""
    for leaf in leaves:
        leaf.grad = None
    out = forward()
    out.backward(grad_out)
    return [out.detach().clone()] + [leaf.grad.detach().clone()
                                     for leaf in leaves]


def with_recipe(module_call, fp8_recipe):
    if fp8_recipe is None:
        return module_call

    def call():
        with te.fp8_autocast(fp8_recipe=fp8_recipe):
            return module_call()
    return call


def accuracy(results, reference, names):
    return ", ".join(f"{name} {rel_rmse(got, want):.2e}" for name, got, want
                     in zip(names, results, reference))


def attention_rows(batch, seq, heads, dim, profile):
    dtype = torch.bfloat16
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda",
                           dtype=dtype, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(batch, seq, heads * dim, device="cuda",
                           dtype=dtype)
    dpa = te.DotProductAttention(heads, dim, attn_mask_type="causal",
                                 qkv_format="bshd", attention_dropout=0.0)

    def tejit_call():
        return dpa(q, k, v)

    def sdpa_flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                is_causal=True)
        return out.transpose(1, 2).reshape(batch, seq, heads * dim)

    rows = [("tejit bf16", tejit_call),
            ("tejit fp8_dpa", with_recipe(tejit_call, delayed(True))),
            ("PyTorch SDPA flash bf16", sdpa_flash)]
    flops = 4.0 * batch * heads * seq * seq * dim * 0.5 * 3.5
    reference = None
    for name, forward in rows:
        try:
            step = train_step(forward, (q, k, v), grad_out)
            ms = timed(step, warmup=3, runs=10)
            results = results_of(forward, (q, k, v), grad_out)
            if reference is None:
                reference, error = results, "-"
            else:
                error = accuracy(results, reference,
                                 ("out", "dq", "dk", "dv"))
            print(f"| attention b{batch} | {name} | {ms:.3f} | "
                  f"{flops / ms / 1e9:.0f} | {error} |", flush=True)
            if profile:
                print_kernels(f"{name} b{batch}", step)
        except Exception as exc:  # a row that cannot run here
            print(f"| attention b{batch} | {name} | n/a | | "
                  f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]} "
                  f"|", flush=True)


def layer_rows(batch, seq):
    hidden, ffn, heads = 4096, 16384, 32
    dtype = torch.bfloat16
    torch.manual_seed(0)
    layer = te.TransformerLayer(hidden, ffn, heads, hidden_dropout=0.0,
                                attention_dropout=0.0,
                                self_attn_mask_type="causal",
                                params_dtype=dtype)
    x = torch.randn(seq, batch, hidden, device="cuda", dtype=dtype,
                    requires_grad=True)
    grad_out = torch.randn_like(x)
    leaves = [x] + list(layer.parameters())
    flops = layer_flops(hidden, ffn, heads, seq, batch)["total"]

    def call():
        return layer(x)

    rows = [("tejit bf16 (no recipe)", call),
            ("tejit DelayedScaling HYBRID", with_recipe(call, delayed(False))),
            ("tejit DelayedScaling HYBRID + fp8_dpa",
             with_recipe(call, delayed(True)))]
    reference = None
    for name, forward in rows:
        try:
            step = train_step(forward, leaves, grad_out)
            ms = timed(step, warmup=3, runs=10)
            results = results_of(forward, [x], grad_out)
            if reference is None:
                reference, error = results, "-"
            else:
                error = accuracy(results, reference, ("out", "dx"))
            print(f"| TransformerLayer b{batch} | {name} | {ms:.3f} | "
                  f"{flops / ms / 1e9:.0f} | {error} |", flush=True)
        except Exception as exc:
            print(f"| TransformerLayer b{batch} | {name} | n/a | | "
                  f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]} "
                  f"|", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--layer-batch", type=int, default=4)
    parser.add_argument("--no-layer", action="store_true",
                        help="leave out the TransformerLayer rows")
    parser.add_argument("--profile", action="store_true",
                        help="also list each attention row's kernels")
    args = parser.parse_args()
    print(f"# FP8 attention (fp8_dpa): {torch.cuda.get_device_name()}, "
          f"h{args.heads} d{args.dim} s{args.seq} bf16 causal, torch "
          f"{torch.__version__}, cuDNN {torch.backends.cudnn.version()}\n")
    print("| case | implementation | fwd+bwd ms | TFLOP/s | rel. RMSE vs "
          "the bf16 row |")
    print("|---|---|---|---|---|")
    for batch in args.batch:
        attention_rows(batch, args.seq, args.heads, args.dim, args.profile)
        torch.cuda.empty_cache()
    if not args.no_layer:
        layer_rows(args.layer_batch, args.seq)


if __name__ == "__main__":
    main()
