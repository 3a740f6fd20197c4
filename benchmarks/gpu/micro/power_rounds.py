"""What the power-cap micro benchmarks share (gemm_data_power.py,
overlap_power.py, mem_grid_power.py): the fc1-sized FP8 GEMM they run, and
timing named variants in rotated rounds, each after seconds of its own
calls (bench_sustained's hold and timed loops), with nvidia-smi's power and
SM clock sampled beside them."""
import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import bench_sustained  # noqa: E402
from power_sampler import PowerSampler  # noqa: E402

E4M3 = torch.float8_e4m3fn
# The quickstart LayerNormMLP's fc1 forward GEMM.
M, N, K = 8192, 16384, 4096


def quantize(t):
    """(E4M3 tensor, scale_inv), scaled the way the layers scale: 448 /
    amax."""
    scale = 448.0 / t.abs().amax().float()
    return (t.float() * scale).clamp(-448, 448).to(E4M3), scale.reciprocal()


def fc1_gemm(weight=None):
    """A call of the M x N x K E4M3 GEMM (bf16 out, fast accumulation)
    through torch._scaled_mm: N(0, 1) activations, `weight` [N, K] (default
    U(-1, 1), nn.Linear's init up to its factor)."""
    x, x_inv = quantize(torch.randn(M, K, device="cuda"))
    if weight is None:
        weight = torch.rand(N, K, device="cuda") * 2 - 1
    w, w_inv = quantize(weight)
    return lambda: torch._scaled_mm(x, w.t(), scale_a=x_inv, scale_b=w_inv,
                                    out_dtype=torch.bfloat16,
                                    use_fast_accum=True)


def arguments(description, power_csv, rounds=3):
    """The command line every micro takes (--rounds, --hold, --iters,
    --power-csv); `description` the caller's docstring."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--power-csv", default=power_csv)
    return parser


@dataclass
class Row:
    name: str
    ms: float  # median over rounds of each round's median call
    rounds: list
    watts: float  # 0 when no sample fell in the timed windows
    mhz: float
    capped: float  # share of samples reporting the software power cap

    @property
    def joules(self):
        return self.watts * self.ms / 1000


def run(variants, args):
    """Times every variant (name -> call) in args.rounds rounds, the order
    rotated from round to round, each after args.hold seconds of its own
    calls; returns a Row per variant, in order."""
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
    rows = []
    for name in names:
        power = [sampler.window(*w) for n, w in windows if n == name]
        power = [p for p in power if p["samples"]]

        def median(key):
            return statistics.median(p[key] for p in power) if power else 0

        rows.append(Row(name, statistics.median(times[name]), times[name],
                        median("median_w"), median("median_sm_mhz"),
                        median("power_capped_share")))
    return rows


def describe(row):
    """One line: ms (round range), W, MHz, capped share, J."""
    return (f"{row.name:14s} {row.ms:.4f} ms (rounds {min(row.rounds):.4f}-"
            f"{max(row.rounds):.4f})  {row.watts:.0f} W  {row.mhz:.0f} MHz  "
            f"capped {row.capped:.0%}  {row.joules:.3f} J")
