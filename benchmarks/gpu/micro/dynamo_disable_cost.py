#!/usr/bin/env python3
"""Host cost of the torch._dynamo.disable wrapper on the modules' forward
(module/base.py's _outside_torch_compile): a small te.Linear's inference
call through the wrapped forward against the same call through the
unwrapped function, interleaved, host time per call (the GPU work is tiny,
so the host dominates).

    PYTHONPATH=python python3 benchmarks/gpu/micro/dynamo_disable_cost.py
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))

import torch  # noqa: E402

import tejit.pytorch as te  # noqa: E402


def per_call_us(call, iters=2000):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters * 1e6


def main():
    module = te.Linear(256, 256, params_dtype=torch.bfloat16).eval()
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    unwrapped = type(module).forward.__wrapped__
    rows = {"wrapped forward": lambda: module.forward(x),
            "unwrapped forward": lambda: unwrapped(module, x),
            "module(x)": lambda: module(x)}
    with torch.no_grad():
        for call in rows.values():
            per_call_us(call, 200)  # compile and warm up
        times = {name: [] for name in rows}
        for _ in range(7):
            for name, call in rows.items():
                times[name].append(per_call_us(call))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, values in times.items():
        print(f"{name:24s} median {statistics.median(values):7.2f} us/call "
              f"(7 rounds of 2000)")


if __name__ == "__main__":
    main()
