"""What the one-block peer benchmarks (bench_moe_layer.py,
bench_fusible_ops.py) share: their command line, a row built and
checked against the reference row before it is timed, and the table of
interleaved medians (bench_sustained.interleaved_medians) with its JSON."""
import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import bench_sustained

WARMUP_STEPS = 2


def parse(doc, rows, sizes):
    """(the command line's options, the size they pick from `sizes`, "full"
    or "small"), with torch seeded; `doc` is the benchmark's docstring."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--rows", nargs="+", default=list(rows),
                        choices=list(rows))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=0.5)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.manual_seed(0)
    return args, sizes["small" if args.small else "full"]


def rel_l2(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def checked_row(key, label, step, keep, want, bound):
    """A bench_sustained.Row of `step()` -> (output, input gradient): its
    first step timed (compilation), then WARMUP_STEPS more (DelayedScaling's
    first step casts with scale 1, TE's too), then both tensors compared
    with `want` (the reference row's) by relative L2 within `bound`; exits
    naming the row otherwise."""
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    for _ in range(WARMUP_STEPS):
        out, dx = step()
    errors = (rel_l2(out, want[0]), rel_l2(dx, want[1]))
    if max(errors) > bound:
        raise SystemExit(f"{key}: output / input-gradient rel L2 {errors} "
                         f"against the reference (bound {bound})")
    row = bench_sustained.Row(key, label, step, keep, first)
    row.times, row.errors = [], errors
    print(f"built {key}: first step {first:.1f} s, rel L2 out "
          f"{errors[0]:.2e} dx {errors[1]:.2e}", flush=True)
    return row


def time_and_report(rows, flops, args, extra):
    """Interleaved rounds over `rows`, then a markdown table (ms, TFLOP/s
    of `flops` per step, speed-up of the first row) and, with --json, every
    number with the device, date, command and `extra`."""
    bench_sustained.interleaved_medians(rows, args.rounds, args.hold,
                                        args.iters, lambda row: row.key)
    print("\n| row | ms | TFLOP/s | speed-up of the first row |")
    print("|---|---|---|---|")
    summary = []
    for row in rows:
        ms = statistics.median(row.times)
        ratios = [b / a for a, b in zip(rows[0].times, row.times)]
        summary.append({"key": row.key, "label": row.label, "ms": ms,
                        "rounds_ms": row.times,
                        "speedup": statistics.median(ratios),
                        "tflops": flops / ms / 1e9,
                        "rel_l2_out_dx": row.errors,
                        "first_step_s": row.first_step_s})
        print(f"| {row.label} | {ms:.3f} | {flops / ms / 1e9:.0f} | "
              f"{statistics.median(ratios):.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": datetime.datetime.now().isoformat(),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "command": " ".join(sys.argv), **extra, "rows": summary},
            indent=1))
