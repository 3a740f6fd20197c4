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
import triton
import triton.language as tl

import power_rounds
from power_rounds import M, N, torch

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


def build(grids):
    gemm = power_rounds.fc1_gemm()
    a = torch.randn(M * N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    c = torch.empty_like(a)
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
    args = power_rounds.arguments(__doc__, "/tmp/mem-grid-power.csv") \
        .parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grids = [4 * sms, sms, (3 * sms) // 4, sms // 2, sms // 4]
    rows = power_rounds.run(build(grids), args)
    print(torch.cuda.get_device_name(), torch.__version__, f"{sms} SMs")
    for row in rows:
        extra = (f"  {3 * M * N * 2 / row.ms / 1e6:.0f} GB/s"
                 if row.name.startswith("mem") else "")
        print(power_rounds.describe(row) + extra)


if __name__ == "__main__":
    main()
