#!/usr/bin/env python3
"""Attention core alone: tejit's DotProductAttention (cuDNN flash through
tejit's own graphs) against PyTorch's scaled_dot_product_attention with the
flash and cuDNN backends, same process, same GPU, same inputs.

Run on the GPU machine (after tools/scripts/pack-gpu.sh here, carry .gpu):
    source tools/scripts/gpu-env.sh; PYTHONPATH=$PWD/python \\
        python3 benchmarks/gpu/bench_attention.py [--batch 4] [--seq 2048]

Shapes: the headline layer's attention (32 heads of 128, seq 2048, sbhd),
no mask and causal, dropout 0 and 0.1; one forward and one forward +
backward, bf16. Times: CUDA events around 20 runs after 5 warm-ups, median
of 5 such batches. TFLOP/s counts 4 b h s^2 d for the forward and 2.5 times
that for the backward (half for causal)."""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tejit.pytorch as te


def timed(fn, warmup=5, runs=20, batches=5):
    for _ in range(warmup):
        fn()
    results = []
    for _ in range(batches):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(runs):
            fn()
        stop.record()
        stop.synchronize()
        results.append(start.elapsed_time(stop) / runs)
    return statistics.median(results)


def print_kernels(name, step):
    """The GPU kernels of one warm `step`, by torch.profiler: which cuDNN
    engine each implementation ends up running, and for how long."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    print(f"\n{name}: kernels of one forward + backward")
    for event in prof.key_averages():
        if event.device_time_total > 0:
            print(f"  {event.device_time_total:9.1f} us  {event.key[:110]}")
    print(flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--profile", action="store_true",
                        help="also list each implementation's kernels (no "
                        "mask, dropout 0.1, one forward + backward)")
    args = parser.parse_args()
    b, s, h, d = args.batch, args.seq, args.heads, args.dim
    print(f"# attention core: {torch.cuda.get_device_name()}, b{b} h{h} s{s} "
          f"d{d} bf16 sbhd, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}\n")
    print("| mask | dropout | implementation | fwd ms | fwd TFLOP/s | "
          "fwd+bwd ms | fwd+bwd TFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for mask in ("no_mask", "causal"):
        for dropout in (0.0, 0.1):
            flops = 4.0 * b * h * s * s * d * (0.5 if mask == "causal" else 1)
            q, k, v = (torch.randn(s, b, h, d, device="cuda",
                                   dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            grad = torch.randn(s, b, h, d, device="cuda",
                               dtype=torch.bfloat16)
            # tejit's module, like TE's, returns [s, b, h * d].
            grad_flat = grad.reshape(s, b, h * d)
            module = te.DotProductAttention(
                h, d, attention_dropout=dropout, qkv_format="sbhd",
                attn_mask_type=mask).cuda().train()

            # Forwards run with autograd on (the training forward: it keeps
            # what the backward needs, and tejit drops out only then).
            def tejit_fwd():
                module(q, k, v)

            def tejit_step():
                module(q, k, v).backward(grad_flat)

            # SDPA takes [b, h, s, d]: views of the same sbhd tensors.
            qb, kb, vb = (t.permute(1, 2, 0, 3) for t in (q, k, v))
            gb = grad.permute(1, 2, 0, 3)

            def sdpa(backend):
                def fwd():
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(
                            qb, kb, vb, dropout_p=dropout,
                            is_causal=mask == "causal")

                def step():
                    with sdpa_kernel(backend):
                        F.scaled_dot_product_attention(
                            qb, kb, vb, dropout_p=dropout,
                            is_causal=mask == "causal").backward(gb)
                return fwd, step

            rows = [("tejit (cuDNN graph)", tejit_fwd, tejit_step)]
            for name, backend in (("SDPA flash", SDPBackend.FLASH_ATTENTION),
                                  ("SDPA cuDNN",
                                   SDPBackend.CUDNN_ATTENTION)):
                rows.append((name, *sdpa(backend)))
            if args.profile and mask == "no_mask" and dropout > 0:
                for name, fwd, step in rows:
                    print_kernels(name, step)
            for name, fwd, step in rows:
                try:
                    f_ms, s_ms = timed(fwd), timed(step)
                except RuntimeError as error:  # a backend refusing the case
                    print(f"| {mask} | {dropout} | {name} | refused: "
                          f"{str(error).splitlines()[0][:60]} | | | |")
                    continue
                print(f"| {mask} | {dropout} | {name} | {f_ms:.3f} | "
                      f"{flops / f_ms / 1e9:.0f} | {s_ms:.3f} | "
                      f"{3.5 * flops / s_ms / 1e9:.0f} |", flush=True)
            del module, q, k, v, grad
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
