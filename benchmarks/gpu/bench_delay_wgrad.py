#!/usr/bin/env python3
"""What delay_wgrad_compute costs a training step.

    python3 benchmarks/gpu/bench_delay_wgrad.py [--block mlp|linear]
        [--rounds 3] [--hold 2] [--iters 20]

Two tejit rows of the same FP8 (DelayedScaling HYBRID) step, forward +
backward of the quickstart LayerNormMLP (4096/16384, 8192 tokens) or a
4096 x 4096 Linear:
  inline   the weight gradients in autograd's backward (the default)
  delayed  delay_wgrad_compute=True: autograd's backward runs the dgrad
           half, then module.backward_dw() the wgrad half (Megatron-LM
           moves that call to overlap communication; here it follows at
           once, so the row shows the split's own cost: the deferred
           tensors' writes and the second launch sequence)
Each row is held --hold seconds before every timed round (the GPU's power
cap), and the rounds rotate the order; medians per row and each row's
peak memory over one step are printed.
"""
import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16


def make_step(block, delay, fp8_recipe):
    torch.manual_seed(0)
    if block == "mlp":
        module = te.LayerNormMLP(4096, 16384, params_dtype=BF16,
                                 delay_wgrad_compute=delay)
    else:
        module = te.Linear(4096, 4096, params_dtype=BF16,
                           delay_wgrad_compute=delay)
    x = torch.randn(8192, 4096, device="cuda", dtype=BF16,
                    requires_grad=True)
    dy = torch.randn(8192, 4096, device="cuda", dtype=BF16)

    def step():
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            out = module(x)
        out.backward(dy)
        module.backward_dw()
        for p in module.parameters():
            p.grad = None
        x.grad = None

    return step


def peak_mib(step):
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--block", choices=["mlp", "linear"], default="mlp")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                       amax_history_len=1024,
                                       amax_compute_algo="max")
    rows = [SimpleNamespace(name=name, times=[],
                            step=make_step(args.block, delay, fp8_recipe))
            for name, delay in (("inline", False), ("delayed", True))]
    peaks = {row.name: peak_mib(row.step) for row in rows}
    bench_sustained.interleaved_medians(rows, args.rounds, args.hold,
                                        args.iters, lambda row: row.name)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"block {args.block}, FP8 DelayedScaling HYBRID")
    medians = {row.name: statistics.median(row.times) for row in rows}
    for row in rows:
        print(f"{row.name:8s} {medians[row.name]:.3f} ms (rounds "
              f"{', '.join(f'{t:.3f}' for t in row.times)}), peak "
              f"+{peaks[row.name]:.0f} MiB over a step")
    print(f"delayed takes {medians['delayed'] / medians['inline']:.3f}x the "
          f"inline step's time")


if __name__ == "__main__":
    main()
