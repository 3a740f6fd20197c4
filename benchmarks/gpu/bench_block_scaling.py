#!/usr/bin/env python3
"""What Float8BlockScaling (DeepSeek-V3's recipe, docs/block-scaling.md)
costs: one training step of tejit's blocks under it, against tejit's
per-tensor recipes and torch.compile, on one GPU, in one process.

    python3 benchmarks/gpu/bench_block_scaling.py [--blocks mlp transformer]
        [--rows KEY ...] [--small] [--rounds 3] [--hold 1.0] [--iters 20]
        [--warmup 3] [--json OUT]
    (the library path as for the other benchmarks: benchmarks/gpu/run.sh
    sets it up for bench_layers.py; source tools/scripts/gpu-env.sh)

Blocks, bf16 parameters (--small: hidden 1024, FFN 4096, 16 heads, seq
512, batch 2):
  mlp          the quickstart's LayerNormMLP (hidden 4096, FFN 16384, GELU)
               on 8192 tokens (seq 2048 x batch 4)
  transformer  the seed's TransformerLayer (hidden 4096, FFN 16384, 32
               heads, seq 2048, batch 4, no mask, dropout 0.1 on the
               attention probabilities and the hidden states)
One step: the forward, then the backward of a fixed random output
gradient; gradients set to None before each step.

Rows (--rows picks some, by key; the speed-ups are of each block's first
row):
  tejit-block       tejit under fp8_autocast(Float8BlockScaling()): TE's
                    defaults (E4M3, 1x128 blocks for activations and
                    gradients, 128 x 128 tiles for weights, power-of-2
                    scales, split accumulators)
  tejit-delayed     tejit under DelayedScaling(HYBRID, history 1024, max)
  tejit-current     tejit under Float8CurrentScaling(HYBRID)
  compile-bf16      torch.compile of the PyTorch peer in bf16
                    (torch_peers.LayerNormMLPBlock; transformer_peers'
                    seed layer with SDPA flash)
  compile-fp8-block torch.compile of the same peer with
                    torch_peers.BlockwiseFp8Linear: torch._scaled_mm with
                    1x128 and 128 x 128 block scales, the recipe above.
                    Only where the installed PyTorch multiplies such
                    operands correctly (torch_peers.blockwise_support(),
                    checked first, eagerly and compiled); otherwise it is
                    skipped and the reason printed.

Measuring (bench_sustained.py's way): the rows of a block are built and
kept together, each timed apart on its first step (tejit's JIT compile,
torch.compile's), warmed up; then --rounds rounds, the order rotated from
round to round, each timing --iters steps (a CUDA event after each) after
--hold seconds of the row's own steps (the GPU's power cap: a step's time
depends on what ran before it); per round the median, then the median over
rounds, and the speed-up of the first row per round, then its median.
Memory per row, when built and warmed up (torch's cache emptied first):
peak torch.cuda.max_memory_allocated over the warm-up above what was
allocated before the row (parameters included), and the drop in the
device's free memory (tejit allocates its arena, casts and cuBLASLt
workspace outside torch's allocator). Prints a markdown table per block;
--json writes every number with the GPU, versions, date and command line.
"""
import argparse
import contextlib
import dataclasses
import datetime
import functools
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
import bench_transformer  # noqa: E402
import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
import torch_peers  # noqa: E402
import transformer_peers  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
MIB = 2 ** 20
SIZES = {
    "full": {"hidden": 4096, "ffn": 16384, "heads": 32, "seq": 2048,
             "batch": 4},
    "small": {"hidden": 1024, "ffn": 4096, "heads": 16, "seq": 512,
              "batch": 2},
}
BLOCKS = ("mlp", "transformer")
DROPOUT = 0.1
SDPA = "flash"  # the transformer peers' attention kernel
ROWS = {  # key -> label
    "tejit-block": "tejit FP8 Float8BlockScaling",
    "tejit-delayed": "tejit FP8 DelayedScaling",
    "tejit-current": "tejit FP8 Float8CurrentScaling",
    "compile-bf16": "torch.compile bf16",
    "compile-fp8-block": "torch.compile FP8 blockwise (_scaled_mm)",
}
TEJIT_RECIPES = {
    "tejit-block": lambda: recipe.Float8BlockScaling(),
    "tejit-delayed": lambda: recipe.DelayedScaling(
        fp8_format=recipe.Format.HYBRID, amax_history_len=1024,
        amax_compute_algo="max"),
    "tejit-current": lambda: recipe.Float8CurrentScaling(
        fp8_format=recipe.Format.HYBRID),
}


@dataclasses.dataclass
class Row:
    block: str
    key: str
    label: str
    step: object          # a zero-argument training step
    keep: object          # what the step needs alive
    first_step_s: float
    peak_bytes: int
    device_bytes: int
    times: list = dataclasses.field(default_factory=list)


def step_flops(block, size):
    """Model FLOPs of one training step: the GEMMs (and, for the layer,
    the attention's two batched products over the full score matrix), x3
    for the backward."""
    tokens = size["seq"] * size["batch"]
    if block == "mlp":
        return 3 * 2 * 2 * tokens * size["hidden"] * size["ffn"]
    return transformer_peers.layer_flops(size["hidden"], size["ffn"],
                                         size["heads"], size["seq"],
                                         size["batch"])["total"]


def build_model(block, key, size):
    """The row's module on the GPU, in training mode, and the context each
    forward runs in."""
    h, f = size["hidden"], size["ffn"]
    if key in TEJIT_RECIPES:
        if block == "mlp":
            model = te.LayerNormMLP(h, f, params_dtype=BF16)
        else:
            model = te.TransformerLayer(
                h, f, size["heads"], hidden_dropout=DROPOUT,
                attention_dropout=DROPOUT, self_attn_mask_type="no_mask",
                params_dtype=BF16)
        fp8_recipe = TEJIT_RECIPES[key]()
        return model.train(), lambda: te.fp8_autocast(
            enabled=True, fp8_recipe=fp8_recipe)
    linear = (torch_peers.BlockwiseFp8Linear if key == "compile-fp8-block"
              else torch.nn.Linear)
    if block == "mlp":
        model = torch_peers.LayerNormMLPBlock(h, f, linear=linear)
        context = contextlib.nullcontext
    else:
        model = transformer_peers.BasicTransformerLayer(
            h, f, size["heads"], linear=linear,
            attention=transformer_peers.ATTENTIONS["sdpa"], dropout=DROPOUT)
        # The SDPA backend must be active when the forward is traced.
        context = functools.partial(transformer_peers.sdpa_backend, SDPA)
    model = model.to(device="cuda", dtype=BF16).train()
    return torch.compile(model), context


def make_step(block, key, size):
    """(step, what it keeps alive)."""
    torch.manual_seed(1234)
    model, context = build_model(block, key, size)
    shape = (size["seq"], size["batch"], size["hidden"])
    x = torch.randn(shape, device="cuda", dtype=BF16, requires_grad=True)
    dy = torch.randn(shape, device="cuda", dtype=BF16)
    params = list(model.parameters())

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        with context():
            y = model(x)
        y.backward(dy)

    return step, (model, x, dy, params)


def release_memory():
    """Frees what nothing references (torch.compile's graphs stay: the other
    rows of the block are alive and compiled)."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def build_row(block, key, size, args, steps, labels):
    """Builds the row (`steps(block, key, size)` gives its step and what
    the step keeps alive), times its first step and warms it up, measuring
    its memory."""
    release_memory()
    allocated = torch.cuda.memory_allocated()
    free = torch.cuda.mem_get_info()[0]
    torch.cuda.reset_peak_memory_stats()
    step, keep = steps(block, key, size)
    start = time.perf_counter()
    step()  # tejit's JIT compile, torch.compile's compile
    torch.cuda.synchronize()
    first_step_s = time.perf_counter() - start
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    row = Row(block=block, key=key, label=labels[key], step=step, keep=keep,
              first_step_s=first_step_s,
              peak_bytes=torch.cuda.max_memory_allocated() - allocated,
              device_bytes=free - torch.cuda.mem_get_info()[0])
    print(f"built {block} {key}: first step {first_step_s:.1f} s, peak "
          f"{row.peak_bytes / MIB:.0f} MiB", flush=True)
    return row


def run_block(block, size, args, skipped, steps=make_step, labels=ROWS):
    """The block's rows (args.rows; `steps` and `labels` as build_row's)
    built (a row that fails is reported and left out) and timed in
    rounds."""
    rows = []
    for key in args.rows:
        if key in skipped:
            continue
        try:
            rows.append(build_row(block, key, size, args, steps, labels))
        except Exception as error:  # noqa: BLE001 - reported, not hidden
            print(f"{block} {key}: FAILED: {type(error).__name__}: {error}"
                  f"\n{traceback.format_exc(limit=-4)}", flush=True)
            skipped.setdefault(f"{block}/{key}",
                               f"{type(error).__name__}: {error}")
            release_memory()
    bench_sustained.interleaved_medians(
        rows, args.rounds, args.hold, args.iters,
        lambda row: f"{block:11s} {row.key:18s}")
    for row in rows:  # the numbers stay; the models go
        row.step = row.keep = None
    release_memory()
    reset_dynamo()
    return rows


def reset_dynamo():
    try:
        torch._dynamo.reset()
    except Exception as error:  # noqa: BLE001 - cleanup only
        print(f"(torch._dynamo.reset failed: {error})", flush=True)


def summarize(block, rows, flops):
    """Per row: median ms over rounds, its rounds, TFLOP/s (`flops` a
    step), and the first row's speed-up (this row's time over the first's,
    per round, then the median)."""
    first = rows[0] if rows else None
    summary = []
    for row in rows:
        ms = statistics.median(row.times)
        entry = {"block": block, "key": row.key, "label": row.label,
                 "median_ms": ms, "round_medians_ms": row.times,
                 "tflops": flops / (ms * 1e-3) / 1e12,
                 "first_step_s": row.first_step_s,
                 "peak_bytes": row.peak_bytes,
                 "device_bytes": row.device_bytes}
        if row is not first:
            ratios = [t / f for t, f in zip(row.times, first.times)]
            entry["speedup_of_first"] = statistics.median(ratios)
            entry["speedup_per_round"] = ratios
        summary.append(entry)
    return summary


def markdown(summary, first_label):
    lines = [f"| block | row | median ms (rounds min-max) | TFLOP/s | "
             f"{first_label} speed-up | peak MiB | device MiB | "
             f"first step s |",
             "|---|---|---|---|---|---|---|---|"]
    for e in summary:
        rounds = e["round_medians_ms"]
        speedup = "-"
        if "speedup_of_first" in e:
            ratios = e["speedup_per_round"]
            speedup = (f"{e['speedup_of_first']:.3f}x ({min(ratios):.3f}-"
                       f"{max(ratios):.3f})")
        lines.append(f"| {e['block']} | {e['label']} | {e['median_ms']:.3f} "
                     f"({min(rounds):.3f}-{max(rounds):.3f}) | "
                     f"{e['tflops']:.0f} | {speedup} | "
                     f"{e['peak_bytes'] / MIB:.0f} | "
                     f"{e['device_bytes'] / MIB:.0f} | "
                     f"{e['first_step_s']:.1f} |")
    return "\n".join(lines)


def add_timing_args(parser, hold, iters):
    """The interleaved rounds' arguments (--rounds, --hold, --iters,
    --warmup) and --json, with these defaults for --hold and --iters."""
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=hold,
                        help="seconds of a row's steps before its timing")
    parser.add_argument("--iters", type=int, default=iters)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", metavar="OUT")


def parsed_timing_args(parser):
    """parser.parse_args(), the timing arguments checked."""
    args = parser.parse_args()
    if args.rounds < 1 or args.iters < 2 or args.hold < 0 or args.warmup < 0:
        parser.error("--rounds >= 1, --iters >= 2, --hold >= 0, "
                     "--warmup >= 0")
    return args


def environment():
    """The GPU, driver, versions, date and command line of this run."""
    return {"gpu": torch.cuda.get_device_name(),
            "driver": bench_transformer.driver_version(),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "tejit": tejit.version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(sys.argv)}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", nargs="+", choices=BLOCKS,
                        default=list(BLOCKS))
    parser.add_argument("--rows", nargs="+", choices=list(ROWS),
                        default=list(ROWS),
                        help="rows, the first compared with the others")
    parser.add_argument("--small", action="store_true",
                        help="the small sizes: a quick check")
    add_timing_args(parser, hold=1.0, iters=20)
    return parsed_timing_args(parser)


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    size = SIZES["small" if args.small else "full"]
    env = environment()
    print(f"{env['gpu']} (driver {env['driver']}), torch {env['torch']} "
          f"(CUDA {env['cuda']}), tejit {env['tejit']}; blocks "
          f"{args.blocks}, rows {args.rows}, {args.rounds} rounds, hold "
          f"{args.hold} s, {args.iters} steps", flush=True)
    bench_transformer.warm_device()
    skipped = {}
    if "compile-fp8-block" in args.rows:
        reason = torch_peers.blockwise_support()
        reset_dynamo()
        if reason is not None:
            skipped["compile-fp8-block"] = reason
            print(f"compile-fp8-block skipped: torch._scaled_mm has no "
                  f"usable blockwise scaling here ({reason})", flush=True)
    tables = []
    for block in args.blocks:
        rows = run_block(block, size, args, skipped)
        tables.append(summarize(block, rows, step_flops(block, size)))
    print(f"\n# Float8BlockScaling: {env['gpu']}, tejit "
          f"{env['tejit'][:12]}, torch {env['torch']}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}")
    print(f"sizes {size}; {args.rounds} rounds x {args.iters} steps after "
          f"{args.hold} s holds; command: {env['command']}")
    for summary in tables:
        if summary:
            print()
            print(markdown(summary, summary[0]["label"]))
    print("\nspeed-up: this row's median ms / the block's first row's, per "
          "round, then the median (> 1: the first row is faster); peak: "
          "torch allocations over the first step and warm-up, parameters "
          "included; device: the drop in free device memory (tejit's own "
          "allocations too)")
    for what, reason in skipped.items():
        print(f"skipped {what}: {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "settings": vars(args),
                       "sizes": size,
                       "summary": [e for summary in tables for e in summary],
                       "skipped": skipped}, f, indent=1, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
