#!/usr/bin/env python3
"""Where the host time of a small tejit module call goes: cProfile over
many calls of a tiny te.Linear / te.LayerNormMLP (the GPU work is a few
microseconds, so the host dominates), inference (no_grad) and training
(forward + backward), bf16 and FP8 (DelayedScaling), printing the
functions by own time and the host microseconds per call.

    PYTHONPATH=python python3 benchmarks/gpu/micro/host_profile.py
        [--calls 2000] [--top 25] [--cases linear-infer,...]
"""
import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))

import torch  # noqa: E402

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16


def make(kind):
    if kind == "linear":
        return te.Linear(256, 256, params_dtype=BF16)
    return te.LayerNormMLP(256, 1024, params_dtype=BF16)


def case_step(kind, train, fp8):
    module = make(kind)
    x = torch.randn(64, 256, device="cuda", dtype=BF16, requires_grad=train)
    dy = torch.randn(64, 256, device="cuda", dtype=BF16)
    fp8_recipe = recipe.DelayedScaling() if fp8 else None

    def step():
        with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
            if train:
                module(x).backward(dy)
            else:
                with torch.no_grad():
                    module(x)
    return step


CASES = {f"{kind}-{mode}-{dtype}": (kind, mode == "train", dtype == "fp8")
         for kind in ("linear", "mlp") for mode in ("infer", "train")
         for dtype in ("bf16", "fp8")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--cases", default="linear-infer-bf16,"
                        "linear-infer-fp8,linear-train-fp8")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name in args.cases.split(","):
        step = case_step(*CASES[name])
        for _ in range(50):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.calls):
            step()
        torch.cuda.synchronize()
        per_call = (time.perf_counter() - start) / args.calls * 1e6
        print(f"\n== {name}: {per_call:.1f} us per call (no profiler)")
        if args.no_profile:
            continue
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.calls):
            step()
        torch.cuda.synchronize()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
