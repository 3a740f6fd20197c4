#!/usr/bin/env python3
"""Does running a memory-bound kernel beside an FP8 GEMM save time at the
power cap?

    python3 benchmarks/gpu/micro/overlap_power.py [--rounds 3] [--hold 2]

A training step of the quickstart blocks runs at the H100's 700 W cap, so
its time is its energy divided by the cap. Overlapping the generated
memory-bound kernels with GEMMs (a second stream) can only pay off if part
of a kernel's energy is time-proportional (static power), which this
measures directly. Variants, each held --hold seconds, then timed:

  gemm     one 8192 x 16384 x 4096 E4M3 GEMM (fc1 forward, bf16 out)
  mem      one bandwidth-bound op moving 768 MiB (two bf16 8192 x 16384
           reads, one write: the size of the dGELU + cast kernel)
  serial   gemm then mem on one stream (what tejit does now)
  overlap  gemm and mem on two streams, joined after each step
  carveN   overlap with the GEMM limited to (SMs - N) SMs through
           torch._C._set_sm_carveout_experimental, where PyTorch has it

The gain of overlapping is serial - overlap, set against mem alone.
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


def build_variants(carveouts):
    x, x_inv = quantize(torch.randn(M, K, device="cuda"))
    w, w_inv = quantize(torch.rand(N, K, device="cuda") * 2 - 1)
    a = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    gemm_stream = torch.cuda.Stream()
    mem_stream = torch.cuda.Stream()

    def gemm():
        torch._scaled_mm(x, w.t(), scale_a=x_inv, scale_b=w_inv,
                         out_dtype=torch.bfloat16, use_fast_accum=True)

    def mem():
        torch.add(a, b, out=c)

    def serial():
        gemm()
        mem()

    def overlapped(carveout=None):
        def step():
            current = torch.cuda.current_stream()
            gemm_stream.wait_stream(current)
            mem_stream.wait_stream(current)
            with torch.cuda.stream(gemm_stream):
                if carveout is not None:
                    torch._C._set_sm_carveout_experimental(carveout)
                gemm()
                if carveout is not None:
                    torch._C._set_sm_carveout_experimental(None)
            with torch.cuda.stream(mem_stream):
                mem()
            current.wait_stream(gemm_stream)
            current.wait_stream(mem_stream)
        return step

    variants = {"gemm": gemm, "mem": mem, "serial": serial,
                "overlap": overlapped()}
    if hasattr(torch._C, "_set_sm_carveout_experimental"):
        for n in carveouts:
            variants[f"carve{n}"] = overlapped(n)
    else:
        print("no torch._C._set_sm_carveout_experimental: carve rows left out")
    return variants


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--carveouts", type=int, nargs="*", default=[16, 32])
    parser.add_argument("--power-csv", default="/tmp/overlap-power.csv")
    args = parser.parse_args()
    variants = build_variants(args.carveouts)
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
    print(torch.cuda.get_device_name(), torch.__version__)
    for name in names:
        power = [sampler.window(*w) for n, w in windows if n == name]
        power = [p for p in power if p["samples"]]
        watts = statistics.median(p["median_w"] for p in power) if power else 0
        mhz = statistics.median(p["median_sm_mhz"] for p in power) if power \
            else 0
        capped = statistics.median(p["power_capped_share"] for p in power) \
            if power else 0
        ms = statistics.median(times[name])
        print(f"{name:8s} {ms:.4f} ms (rounds {min(times[name]):.4f}-"
              f"{max(times[name]):.4f})  {watts:.0f} W  {mhz:.0f} MHz  "
              f"capped {capped:.0%}  {watts * ms / 1000:.3f} J")
    serial = statistics.median(times["serial"])
    for name in names[3:]:
        gain = serial - statistics.median(times[name])
        print(f"{name}: {gain:+.4f} ms against serial "
              f"(mem alone {statistics.median(times['mem']):.4f} ms)")


if __name__ == "__main__":
    main()
