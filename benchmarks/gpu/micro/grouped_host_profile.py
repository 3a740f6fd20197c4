#!/usr/bin/env python3
"""Where a small GroupedLinear training step spends its time: the wall time
per step against the GPU time of its kernels, and the host functions that
take the wall time (cProfile), for tejit's GroupedLinear and
torch._grouped_mm at one shape.

    python3 benchmarks/gpu/micro/grouped_host_profile.py \
        [--experts 8] [--hidden 1024] [--ffn 2048] [--tokens 4096] \
        [--recipe delayed|current|none] [--steps 50] [--top 25]

Rows: tejit's GroupedLinear, the same replayed from CUDA graphs captured
with the splits fixed (make_graphed_callables; not with --vary), and
torch._grouped_mm. Prints, per row: the wall ms per step (host
synchronized once at the end of --steps steps), the sum of the GPU kernel
and copy times per step (torch.profiler), and for tejit the --top host
functions by their own time (cProfile over --steps steps).
"""
import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "python"))

import torch  # noqa: E402

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16


def splits_for(experts, tokens, seed=7):
    """Unequal multiples of 16 summing to tokens."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.rand(experts, generator=generator) + 0.2
    units = tokens // 16
    counts = (weights / weights.sum() * units).floor().long()
    counts[0] += units - int(counts.sum())
    return [int(c) * 16 for c in counts]


RECIPES = {"delayed": lambda: recipe.DelayedScaling(
               fp8_format=recipe.Format.HYBRID, amax_history_len=1024,
               amax_compute_algo="max"),
           "current": lambda: recipe.Float8CurrentScaling(
               fp8_format=recipe.Format.HYBRID),
           "none": lambda: None}


class VaryingSplits:
    """Stands for the splits: each step takes the next of `pool`."""

    def __init__(self, pool):
        self.pool, self.index = pool, 0

    def next(self):
        self.index = (self.index + 1) % len(self.pool)
        return self.pool[self.index]


def current(splits):
    return splits.next() if isinstance(splits, VaryingSplits) else splits


def tejit_step(args, splits, graphed=False):
    """tejit's GroupedLinear step; `graphed`: replayed from CUDA graphs
    captured with the splits fixed (make_graphed_callables), as
    capacity-padded routing allows."""
    model = te.GroupedLinear(args.experts, args.hidden, args.ffn, bias=False,
                             params_dtype=BF16).cuda().train()
    fp8_recipe = RECIPES[args.recipe]()
    x = torch.randn(args.tokens, args.hidden, device="cuda", dtype=BF16,
                    requires_grad=True)
    dy = torch.randn(args.tokens, args.ffn, device="cuda", dtype=BF16)
    run = model
    if graphed:
        run = te.make_graphed_callables(
            model, (x,), fp8_enabled=fp8_recipe is not None,
            fp8_recipe=fp8_recipe, sample_kwargs={"m_splits": splits})

    def step():
        x.grad = None
        for p in model.parameters():
            p.grad = None
        with te.fp8_autocast(enabled=fp8_recipe is not None,
                             fp8_recipe=fp8_recipe):
            y = run(x, m_splits=current(splits))
        y.backward(dy)
    return step


def grouped_mm_step(args, splits):
    weight = torch.randn(args.experts, args.ffn, args.hidden, device="cuda",
                         dtype=BF16, requires_grad=True)
    x = torch.randn(args.tokens, args.hidden, device="cuda", dtype=BF16,
                    requires_grad=True)
    dy = torch.randn(args.tokens, args.ffn, device="cuda", dtype=BF16)
    def step():
        x.grad = None
        weight.grad = None
        offsets = torch.tensor(current(splits), dtype=torch.int32).cumsum(
            0, dtype=torch.int32).cuda(non_blocking=True)
        y = torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
        y.backward(dy)
    return step


def wall_ms(step, steps):
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def gpu_ms(step, steps):
    """Sum of device kernel / memcpy / memset times per step."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    total_us = 0.0
    kinds = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        total_us += event.device_time
        name = event.name[:60]
        kinds[name] = kinds.get(name, 0) + 1
    return total_us / 1e3 / steps, {k: v / steps for k, v in kinds.items()}


def host_profile(step, steps, top, sort="tottime"):
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(sort).print_stats(top)
    return out.getvalue()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--ffn", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--recipe", default="delayed",
                        choices=["delayed", "current", "none"])
    parser.add_argument("--vary", action="store_true",
                        help="new routed splits at every step (as real "
                             "routing gives), from a pool of 64 draws")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="tottime",
                        choices=["tottime", "cumtime"],
                        help="how the host functions are ordered")
    args = parser.parse_args()
    splits = splits_for(args.experts, args.tokens)
    if args.vary:
        pool = [splits_for(args.experts, args.tokens, seed)
                for seed in range(64)]
        splits = VaryingSplits(pool)
    print(f"{torch.cuda.get_device_name()}; {vars(args)}; splits "
          f"{current(splits)}")
    rows = {"tejit": tejit_step(args, splits)}
    if not args.vary:
        rows["tejit graphed (fixed splits)"] = tejit_step(args, splits,
                                                         graphed=True)
    if hasattr(torch, "_grouped_mm"):
        rows["torch._grouped_mm"] = grouped_mm_step(args, splits)
    for name, step in rows.items():
        wall = wall_ms(step, args.steps)
        device, kinds = gpu_ms(step, max(5, args.steps // 5))
        print(f"\n## {name}: wall {wall:.3f} ms/step, GPU busy "
              f"{device:.3f} ms/step, {sum(kinds.values()):.0f} "
              f"device ops/step")
        for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
            print(f"  {count:5.1f}  {kind}")
        if name == "tejit":
            print(host_profile(step, args.steps, args.top, args.sort))


if __name__ == "__main__":
    main()
