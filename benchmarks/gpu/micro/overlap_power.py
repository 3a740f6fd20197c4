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
import power_rounds
from power_rounds import M, N, torch


def build_variants(carveouts):
    gemm = power_rounds.fc1_gemm()
    a = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    gemm_stream = torch.cuda.Stream()
    mem_stream = torch.cuda.Stream()

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
    parser = power_rounds.arguments(__doc__, "/tmp/overlap-power.csv")
    parser.add_argument("--carveouts", type=int, nargs="*", default=[16, 32])
    args = parser.parse_args()
    rows = power_rounds.run(build_variants(args.carveouts), args)
    print(torch.cuda.get_device_name(), torch.__version__)
    for row in rows:
        print(power_rounds.describe(row))
    by_name = {row.name: row for row in rows}
    for row in rows[3:]:
        print(f"{row.name}: {by_name['serial'].ms - row.ms:+.4f} ms against "
              f"serial (mem alone {by_name['mem'].ms:.4f} ms)")


if __name__ == "__main__":
    main()
