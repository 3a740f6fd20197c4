#!/usr/bin/env python3
"""Do bandwidth-bound kernels on fewer SMs cost less energy at the cap?

    python3 benchmarks/gpu/micro/mem_grid_power.py [--rounds 3] [--hold 2]

tejit's generated memory-bound kernels fill every SM. Alone they run below
the power cap at the top clock; in a training step they sit between FP8
GEMMs that hold the GPU at its 700 W cap, so their energy comes out of the
GEMMs' budget (overlap_power.py: energies add up). If HBM can be kept busy
by part of the SMs, the idle SMs' power is saved. A Triton kernel reads two
bf16 8192 x 16384 tensors and writes their sum (768 MiB, like the dGELU +
cast kernel) with a persistent grid of N programs (1 per SM, or fewer);
each variant runs alone and after the fc1-sized FP8 GEMM (one stream),
held --hold seconds before each timing, rounds rotated. Energy per step is
the sampled power times the step time.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
from power_sampler import PowerSampler  # noqa: E402

E4M3 = torch.float8_e4m3fn
M, N, K = 8192, 16384, 4096
BLOCK = 8192


@triton.jit
def _add_kernel(a, b, c, n, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    step = tl.num_programs(0) * BLOCK
    for offset in range(start, n, step):
        index = offset + tl.arange(0, BLOCK)
        mask = index < n
        tl.store(c + index, tl.load(a + index, mask=mask) +
                 tl.load(b + index, mask=mask), mask=mask)


def quantize(t):
    scale = 448.0 / t.abs().amax().float()
    return (t.float() * scale).clamp(-448, 448).to(E4M3), scale.reciprocal()


def build(grids):
    x, x_inv = quantize(torch.randn(M, K, device="cuda"))
    w, w_inv = quantize(torch.rand(N, K, device="cuda") * 2 - 1)
    a = torch.randn(M * N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    c = torch.empty_like(a)

    def gemm():
        torch._scaled_mm(x, w.t(), scale_a=x_inv, scale_b=w_inv,
                         out_dtype=torch.bfloat16, use_fast_accum=True)

    variants = {}
    for programs in grids:
        def mem(programs=programs):
            _add_kernel[(programs,)](a, b, c, a.numel(), BLOCK=BLOCK)

        def serial(mem=mem):
            gemm()
            mem()

        variants[f"mem{programs}"] = mem
        variants[f"gemm+mem{programs}"] = serial
    variants["gemm"] = gemm
    return variants


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--power-csv", default="/tmp/mem-grid-power.csv")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grids = [4 * sms, sms, (3 * sms) // 4, sms // 2, sms // 4]
    variants = build(grids)
    names = list(variants)
    windows, times = [], {n: [] for n in names}
    with PowerSampler(args.power_csv) as sampler:
        for r in range(args.rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                bench_sustained.hold(variants[name], args.hold)
                per_call, _, window = bench_sustained.timed(variants[name],
                                                            args.iters)
                windows.append((name, window))
                times[name].append(statistics.median(per_call))
    print(torch.cuda.get_device_name(), torch.__version__, f"{sms} SMs")
    for name in names:
        power = [sampler.window(*w) for n, w in windows if n == name]
        power = [p for p in power if p["samples"]]
        watts = statistics.median(p["median_w"] for p in power) if power else 0
        mhz = statistics.median(p["median_sm_mhz"] for p in power) if power \
            else 0
        ms = statistics.median(times[name])
        extra = ""
        if name.startswith("mem"):
            extra = f"  {3 * M * N * 2 / ms / 1e6:.0f} GB/s"
        print(f"{name:14s} {ms:.4f} ms  {watts:.0f} W  {mhz:.0f} MHz  "
              f"{watts * ms / 1000:.3f} J{extra}")


if __name__ == "__main__":
    main()
