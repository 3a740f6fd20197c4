#!/usr/bin/env python3
"""What fuse_wgrad_accumulation saves a Megatron-style training step.

    python3 benchmarks/gpu/bench_main_grad.py [--block mlp|transformer]
        [--rounds 3] [--hold 2] [--iters 20]

Megatron-LM keeps a float32 `main_grad` per weight and adds every
micro-batch's weight gradient to it. Two tejit rows of the same FP8
(DelayedScaling HYBRID) step, forward + backward of the quickstart block
(LayerNormMLP 4096/16384 or the seed TransformerLayer with fused QKV
weights, 8192 tokens):
  fused    fuse_wgrad_accumulation=True: each wgrad GEMM adds into
           main_grad (cuBLASLt's C, beta 1); autograd gets placeholders
  unfused  the gradients land in bf16 .grad, then main_grad.add_(grad)
           (what Megatron's hooks do without the fusion)
  plain    no main_grad at all: bf16 .grad, set to None after each step
           (the block benchmarks' step; what the fusion adds on top of it)
Each row is held --hold seconds before every timed round (the GPU's power
cap), and the rounds rotate the order; medians per row are printed.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16


def make_block(block, fuse):
    if block == "mlp":
        return te.LayerNormMLP(4096, 16384, params_dtype=BF16,
                               fuse_wgrad_accumulation=fuse), (8192, 4096)
    return te.TransformerLayer(
        4096, 16384, 32, params_dtype=BF16, fuse_qkv_params=True,
        qkv_weight_interleaved=False,
        fuse_wgrad_accumulation=fuse), (2048, 4, 4096)


def make_step(block, fuse, fp8_recipe, main_grads=True):
    torch.manual_seed(0)
    module, shape = make_block(block, fuse)
    weights = [p for p in module.parameters() if p.dim() == 2]
    for p in weights if main_grads else []:
        p.main_grad = torch.zeros(p.shape, dtype=torch.float32,
                                  device="cuda")
        p.grad_added_to_main_grad = False
    x = torch.randn(*shape, device="cuda", dtype=BF16, requires_grad=True)
    dy = torch.randn(*shape, device="cuda", dtype=BF16)

    def step():
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            out = module(x)
        out.backward(dy)
        if main_grads and not fuse:
            for p in weights:
                p.main_grad.add_(p.grad)
        for p in module.parameters():
            p.grad = None
        x.grad = None

    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--block", choices=["mlp", "transformer"],
                        default="mlp")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                       amax_history_len=1024,
                                       amax_compute_algo="max")
    rows = {"fused": make_step(args.block, True, fp8_recipe),
            "unfused": make_step(args.block, False, fp8_recipe),
            "plain": make_step(args.block, False, fp8_recipe,
                               main_grads=False)}
    names = list(rows)
    times = {name: [] for name in names}
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            bench_sustained.hold(rows[name], args.hold)
            per_step, _, _ = bench_sustained.timed(rows[name], args.iters)
            times[name].append(statistics.median(per_step))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"block {args.block}, FP8 DelayedScaling HYBRID, main_grad float32")
    for name in names:
        print(f"{name:8s} {statistics.median(times[name]):.3f} ms "
              f"(rounds {', '.join(f'{t:.3f}' for t in times[name])})")
    ratio = statistics.median(times["unfused"]) / statistics.median(
        times["fused"])
    print(f"fused is {ratio:.3f}x the unfused step's speed")


if __name__ == "__main__":
    main()
