#!/usr/bin/env python3
"""tejit against its peers at the power cap: every row built once and kept,
then timed in interleaved rounds, each timing after seconds of the row's own
steps.

    python3 benchmarks/gpu/bench_sustained.py --block transformer|mlp|lnlinear
        [--rows KEY ...] [--batch N] [--small] [--rounds 5] [--hold 2.0]
        [--iters 30] [--power-csv FILE] [--json OUT]
    (benchmarks/gpu/run_sustained.sh sets up the library path, then runs
    this)

Why: an H100 running these FP8 steps back to back sits at its 700 W
software power cap (benchmarks/RESULTS.md, session 11), so a step's time
follows its energy, and the clock a row gets depends on what ran before it.
bench_transformer.py and bench_layers.py time each row once, right after
building it (torch.compile's compile leaves the GPU idle and cool for
seconds; tejit's cached compile does not), with under a second of warm-up.
A training run spends hours in the capped state. Here each row is timed in
every round, the order rotated from round to round, and each timing starts
after --hold seconds of that row's steps, so each is measured in its own
steady state; the speed-up is taken per round, then the median over rounds.

Rows: --block transformer uses bench_transformer.py's rows (the seed
layer: hidden 4096, FFN 16384, 32 heads, seq 2048, --batch, default 4;
dropout 0.1); default rows tejit-fp8, compile-fp8-sdpa, torch-fp16-unfused.
--block mlp / lnlinear use bench_layers.py's LayerNormMLP / LayerNormLinear
blocks (8192 tokens) and its configs: tejit-fp8 (DelayedScaling HYBRID,
history 1024), tejit-fp8-current, tejit-bf16, torch-bf16, compile-bf16,
compile-fp8 (torch._scaled_mm); default tejit-fp8, compile-fp8. The first
row is the one the speed-ups are of.

Per row and round: the median and mean ms of --iters steps (a CUDA event
after each), and, from nvidia-smi sampling every 50 ms in the background,
the median power and SM clock over the timed window and the share of
samples at the software power cap; energy per step = power x time.
"""
import argparse
import dataclasses
import datetime
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import bench_layers as layers  # noqa: E402
import bench_transformer as transformer  # noqa: E402
import torch_peers  # noqa: E402
from power_sampler import PowerSampler  # noqa: E402

# Steps enqueued between host synchronizations while holding: enough to keep
# the GPU busy, few enough that the hold ends close to its time.
HOLD_CHUNK = 8

GOALS = {"transformer": {"compile-fp8-sdpa": 1.35, "torch-fp16-unfused": 2.5},
         "mlp": {"compile-fp8": 1.3}}

# bench_layers configs: key -> (label, tejit recipe or False for a peer,
# peer (fp8, compiled)).
LAYER_ROWS = {
    "tejit-fp8": ("tejit FP8 delayed", layers.DELAYED, None),
    "tejit-fp8-current": ("tejit FP8 current", layers.CURRENT, None),
    "tejit-bf16": ("tejit bf16", None, None),
    "torch-bf16": ("torch eager bf16", False, (False, False)),
    "compile-bf16": ("torch.compile bf16", False, (False, True)),
    "compile-fp8": ("torch.compile FP8", False, (True, True)),
}
DEFAULT_ROWS = {"transformer": ["tejit-fp8", "compile-fp8-sdpa",
                                "torch-fp16-unfused"],
                "mlp": ["tejit-fp8", "compile-fp8"],
                "lnlinear": ["tejit-fp8", "compile-fp8"]}


@dataclasses.dataclass
class Row:
    key: str
    label: str
    step: object          # a zero-argument training step
    keep: object          # what the step needs alive
    first_step_s: float


def cycling(step, rotation):
    """A zero-argument step over a step(i) that cycles input buffers."""
    buffers = itertools.cycle(range(rotation))
    return lambda: step(next(buffers))


def build_transformer_row(key, size, batch):
    row = transformer.ROW_BY_KEY[key]
    options = argparse.Namespace(inference=False, keep_grads=False,
                                 compile_mode=None)
    step, keep = transformer.make_step(row, size, batch, options)
    return row.label, step, keep


def build_layer_row(key, block, size):
    label, recipe, peer = LAYER_ROWS[key]
    if peer is None:
        program = layers.compile_program(block, size, recipe)
        step = layers.TejitStep(program, layers.ROTATION)
        return label, cycling(step, layers.ROTATION), (program, step)
    fp8, compiled = peer
    torch.manual_seed(0)
    module = torch_peers.make_block(block.kind, block.dims, fp8=fp8)
    shape = (size["seq"], size["batch"])
    inputs = [torch.randn(shape + (block.in_features,), device="cuda",
                          dtype=torch.bfloat16).requires_grad_()
              for _ in range(layers.ROTATION)]
    dy = torch.randn(shape + (block.out_features,), device="cuda",
                     dtype=torch.bfloat16)
    fn = torch.compile(module) if compiled else module
    step = layers.peer_step(fn, list(module.parameters()), inputs, dy)
    return label, cycling(step, layers.ROTATION), (module, fn, inputs, dy)


def build_rows(args):
    rows = []
    if args.block == "transformer":
        size = {k: v for k, v in transformer.SIZES[
            "small" if args.small else "full"].items() if k != "batches"}
        build = lambda key: build_transformer_row(key, size, args.batch)
    else:
        size = dict(layers.SIZES["small" if args.small else "full"])
        if args.batch:
            size["batch"] = args.batch
        kind = {"mlp": "LayerNormMLP", "lnlinear": "LayerNormLinear"}
        block = next(b for b in layers.make_blocks(size)
                     if b.kind == kind[args.block])
        build = lambda key: build_layer_row(key, block, size)
    for key in args.rows:
        label, step, keep = build(key)
        start = time.perf_counter()
        step()  # tejit's JIT compile, torch.compile's compile
        torch.cuda.synchronize()
        rows.append(Row(key, label, step, keep, time.perf_counter() - start))
        print(f"built {key}: first step {rows[-1].first_step_s:.1f} s",
              flush=True)
    return rows


def hold(step, seconds):
    """The row's own steps for about `seconds`: its steady state."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(HOLD_CHUNK):
            step()
        torch.cuda.synchronize()


def timed(step, iters):
    """(per-step ms, mean ms, host window): a CUDA event before the first
    step and after each, read at the end."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    torch.cuda.synchronize()
    start = time.time()
    events[0].record()
    for event in events[1:]:
        step()
        event.record()
    torch.cuda.synchronize()
    end = time.time()
    per_step = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
    return per_step, events[0].elapsed_time(events[-1]) / iters, (start, end)


def interleaved_medians(rows, rounds, hold_s, iters, describe):
    """Times each row (with `.step` and a `.times` list) in `rounds`
    rounds, each starting at the next row so that no row always runs first
    after another; per round: hold the row's steady state, then append the
    median of `iters` timed steps (ms) to its `.times`. `describe(row)`
    names it in the progress lines."""
    for r in range(rounds):
        shift = r % max(len(rows), 1)
        for row in rows[shift:] + rows[:shift]:
            hold(row.step, hold_s)
            per_step, _, _ = timed(row.step, iters)
            row.times.append(statistics.median(per_step))
            print(f"round {r}: {describe(row)} median {row.times[-1]:.3f} ms",
                  flush=True)


def run_rounds(rows, args, windows):
    results = {row.key: [] for row in rows}
    for r in range(args.rounds):
        shift = r % len(rows)
        for row in rows[shift:] + rows[:shift]:
            hold(row.step, args.hold)
            per_step, mean_ms, window = timed(row.step, args.iters)
            windows.append((row.key, r, window))
            results[row.key].append({"round": r,
                                     "median_ms": statistics.median(per_step),
                                     "mean_ms": mean_ms,
                                     "min_ms": min(per_step),
                                     "max_ms": max(per_step)})
            print(f"round {r}: {row.key:24s} median "
                  f"{results[row.key][-1]['median_ms']:.3f} ms", flush=True)
    return results


def summarize(rows, results, sampler, windows, goals):
    for key, round_index, (start, end) in windows:
        results[key][round_index]["power"] = sampler.window(start, end)
    summary = []
    first = rows[0].key
    for row in rows:
        rounds = results[row.key]
        medians = [r["median_ms"] for r in rounds]
        entry = {"key": row.key, "label": row.label,
                 "first_step_s": row.first_step_s,
                 "median_ms": statistics.median(medians),
                 "round_medians_ms": medians}
        powered = [r["power"] for r in rounds if r["power"]["samples"]]
        if powered:
            watts = statistics.median(p["median_w"] for p in powered)
            entry.update(
                median_w=watts,
                median_sm_mhz=statistics.median(
                    p["median_sm_mhz"] for p in powered),
                power_capped_share=statistics.median(
                    p["power_capped_share"] for p in powered),
                joules_per_step=watts * entry["median_ms"] / 1e3)
        if row.key != first:
            ratios = [o["median_ms"] / f["median_ms"]
                      for f, o in zip(results[first], rounds)]
            entry["speedup_of_first"] = statistics.median(ratios)
            entry["speedup_per_round"] = ratios
            goal = goals.get(row.key)
            if goal:
                entry["goal"] = goal
                entry["goal_met"] = entry["speedup_of_first"] >= goal
        summary.append(entry)
    return summary


def markdown(summary, first_label):
    lines = ["| row | median ms (rounds min-max) | W | SM MHz | capped "
             "| J/step | " + f"{first_label} speed-up (rounds min-max) |",
             "|---|---|---|---|---|---|---|"]
    for e in summary:
        spread = f"{min(e['round_medians_ms']):.3f}-" \
                 f"{max(e['round_medians_ms']):.3f}"
        power = (f"{e['median_w']:.0f} | {e['median_sm_mhz']:.0f} | "
                 f"{e['power_capped_share']:.0%} | "
                 f"{e['joules_per_step']:.2f}" if "median_w" in e
                 else "- | - | - | -")
        speedup = "-"
        if "speedup_of_first" in e:
            ratios = e["speedup_per_round"]
            speedup = (f"{e['speedup_of_first']:.3f}x ({min(ratios):.3f}-"
                       f"{max(ratios):.3f})")
            if "goal" in e:
                speedup += (f", goal {e['goal']}x "
                            f"{'met' if e['goal_met'] else 'NOT met'}")
        lines.append(f"| {e['label']} | {e['median_ms']:.3f} ({spread}) | "
                     f"{power} | {speedup} |")
    return "\n".join(lines)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--block", choices=("transformer", "mlp", "lnlinear"),
                        default="transformer")
    parser.add_argument("--rows", nargs="+", metavar="KEY",
                        help="rows, the first compared with the others "
                             "(default: see the module doc)")
    parser.add_argument("--batch", type=int,
                        help="batch (transformer default 4; blocks: 4)")
    parser.add_argument("--small", action="store_true",
                        help="the small sizes: a quick check")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hold", type=float, default=2.0,
                        help="seconds of a row's steps before its timing")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--power-csv", default="/tmp/tejit-power.csv",
                        help="where nvidia-smi's samples go")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    args.rows = args.rows or DEFAULT_ROWS[args.block]
    known = (transformer.ROW_BY_KEY if args.block == "transformer"
             else LAYER_ROWS)
    unknown = [k for k in args.rows if k not in known]
    if unknown:
        parser.error(f"unknown row(s) {', '.join(unknown)}; rows: "
                     f"{', '.join(known)}")
    if args.block == "transformer":
        bad = [k for k in args.rows if transformer.ROW_BY_KEY[k].graphed
               or transformer.ROW_BY_KEY[k].gemm_tuning]
        if bad:
            parser.error(f"row(s) {', '.join(bad)} are not supported here")
        args.batch = args.batch or (2 if args.small else 4)
    if args.rounds < 1 or args.iters < 2 or args.hold < 0:
        parser.error("--rounds >= 1, --iters >= 2, --hold >= 0")
    return args


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    import tejit
    env = {"gpu": torch.cuda.get_device_name(),
           "driver": transformer.driver_version(),
           "torch": torch.__version__, "tejit": tejit.version(),
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "command": " ".join(sys.argv)}
    print(f"{env['gpu']} (driver {env['driver']}), torch {env['torch']}, "
          f"tejit {env['tejit']}; {args.block}, rows {args.rows}, "
          f"{args.rounds} rounds, hold {args.hold} s, {args.iters} steps",
          flush=True)
    transformer.warm_device()
    rows = build_rows(args)
    windows = []
    with PowerSampler(args.power_csv) as sampler:
        results = run_rounds(rows, args, windows)
    summary = summarize(rows, results, sampler, windows,
                        GOALS.get(args.block, {}))
    print()
    print(markdown(summary, rows[0].label))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "settings": vars(args),
                       "summary": summary, "rounds": results}, f, indent=1,
                      default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
