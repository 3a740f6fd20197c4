#!/usr/bin/env python3
"""Does an FP8 GEMM's time at the power cap depend on its data?

    python3 benchmarks/gpu/micro/gemm_data_power.py [--rounds 4] [--hold 2]

One 8192 x 16384 x 4096 E4M3 GEMM (the fc1 forward of the quickstart
LayerNormMLP, bf16 output, fast accumulation) through torch._scaled_mm,
with the weight operand drawn from different distributions, each quantized
the way the layers quantize (scale = 448 / amax): N(0, 1) (tejit's block
benchmark data), U(-1, 1) (nn.Linear's kaiming-uniform init, up to its
factor), and all zeros except a sparse few (a lower bound). The activation
is N(0, 1) throughout. Each variant is timed in every round after --hold
seconds of its own calls; the median ms per round and the power / clock
from nvidia-smi are printed.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
from power_sampler import PowerSampler  # noqa: E402

E4M3 = torch.float8_e4m3fn
M, N, K = 8192, 16384, 4096


def quantize(t):
    scale = 448.0 / t.abs().amax().float()
    return (t.float() * scale).clamp(-448, 448).to(E4M3), scale.reciprocal()


def variants():
    x, x_inv = quantize(torch.randn(M, K, device="cuda"))
    weights = {
        "normal": torch.randn(N, K, device="cuda"),
        "uniform": torch.rand(N, K, device="cuda") * 2 - 1,
        "sparse": torch.where(torch.rand(N, K, device="cuda") < 0.01,
                              torch.randn(N, K, device="cuda"),
                              torch.zeros(N, K, device="cuda")),
    }
    calls = {}
    for name, w in weights.items():
        wq, w_inv = quantize(w)
        calls[name] = (lambda wq=wq, w_inv=w_inv: torch._scaled_mm(
            x, wq.t(), scale_a=x_inv, scale_b=w_inv, out_dtype=torch.bfloat16,
            use_fast_accum=True))
    return calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--power-csv", default="/tmp/gemm-data-power.csv")
    args = parser.parse_args()
    calls = variants()
    names = list(calls)
    windows, times = [], {n: [] for n in names}
    with PowerSampler(args.power_csv) as sampler:
        for r in range(args.rounds):
            for name in names[r % 3:] + names[:r % 3]:
                bench_sustained.hold(calls[name], args.hold)
                per_call, _, window = bench_sustained.timed(calls[name],
                                                            args.iters)
                windows.append((name, window))
                times[name].append(statistics.median(per_call))
    print(torch.cuda.get_device_name())
    for name in names:
        power = [sampler.window(*w) for n, w in windows if n == name]
        power = [p for p in power if p["samples"]]
        watts = statistics.median(p["median_w"] for p in power) if power else 0
        mhz = statistics.median(p["median_sm_mhz"] for p in power) if power \
            else 0
        ms = statistics.median(times[name])
        print(f"{name:8s} {ms:.4f} ms (rounds {min(times[name]):.4f}-"
              f"{max(times[name]):.4f})  {watts:.0f} W  {mhz:.0f} MHz  "
              f"{2 * M * N * K / ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
