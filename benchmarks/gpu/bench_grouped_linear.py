#!/usr/bin/env python3
"""What a mixture-of-experts layer's expert GEMMs cost through tejit's
GroupedLinear (docs/grouped-linear.md): one training step (forward, then
the backward of a fixed random output gradient) of G experts' Linears
over their routed tokens, against PyTorch peers, on one GPU, in one
process.

    python3 benchmarks/gpu/bench_grouped_linear.py [--small] [--balanced]
        [--rows KEY ...] [--rounds 3] [--hold 0.5] [--iters 10]
        [--warmup 3] [--json OUT]
    (the library path as for the other benchmarks: source
    tools/scripts/gpu-env.sh)

Shape (bf16 parameters, no biases): Mixtral 8x7B's expert up-projection,
8 experts, hidden 4096 -> FFN 14336 each, on 16384 routed tokens (8192
tokens, top-2 routing); --small: 8 experts, 1024 -> 2048, 4096 tokens.
The routed counts are unequal (a fixed draw, each a multiple of 16, as
FP8 needs: Fp8Padding's alignment), or equal with --balanced; the split
is printed.

Rows (--rows picks some, by key; the speed-ups are of the first row):
  tejit-delayed     te.GroupedLinear under DelayedScaling(HYBRID, history
                    1024, max)
  tejit-current     te.GroupedLinear under Float8CurrentScaling(HYBRID)
  tejit-bf16        te.GroupedLinear without a recipe
  loop-bf16         PyTorch eager: torch.split, then one nn.Linear per
                    expert, torch.cat
  grouped-mm-bf16   torch._grouped_mm (one grouped GEMM for all experts,
                    eager), where the installed PyTorch has it and it gives
                    the loop's results forward and backward (checked
                    first; otherwise skipped and the reason printed)
  compile-bf16      torch.compile of loop-bf16
  compile-fp8       torch.compile of the loop with torch_peers.Fp8Linear
                    per expert (torch._scaled_mm, tensorwise current
                    scaling: E4M3 forward operands, E5M2 gradients)
Rows for Float8BlockScaling (DeepSeek-V3's recipe; not run unless named
with --rows; with either, every split is a multiple of 128, as the
blockwise peer needs):
  tejit-block        te.GroupedLinear under Float8BlockScaling (TE's
                     defaults: E4M3, 1x128 blocks for x and dy, 128 x 128
                     weight tiles, power-of-2 scales)
  compile-fp8-block  torch.compile of the loop with
                     torch_peers.BlockwiseFp8Linear per expert (the same
                     numerics through torch._scaled_mm's blockwise
                     scaling), where torch_peers.blockwise_support() finds
                     it usable (otherwise skipped and the reason printed)
Rows for Megatron-LM's main_grads (float32 weight{i}.main_grad, to which
each step adds its gradients; not run unless named with --rows):
  tejit-main-grad           tejit-delayed with fuse_wgrad_accumulation,
                            the main_grads in one buffer in expert order
                            (the program adds into them in its wgrad GEMMs)
  tejit-main-grad-reversed  the same with the main_grads in reverse order
                            (Megatron-Core's buffer layout): the program
                            gets one pointer per expert's main_grad
  tejit-grad-add            tejit-delayed without fuse_wgrad_accumulation,
                            then main_grad.add_(weight.grad) per expert
                            (Megatron's path without gradient accumulation
                            fusion)

Measuring as bench_block_scaling.py does (bench_sustained.py's
interleaved rounds): the rows are built and kept together, each timed on
its first step (tejit's JIT compile, torch.compile's) and warmed up; then
--rounds rounds in rotated order, each timing --iters steps after --hold
seconds of the row's own steps; per round the median, then the median
over rounds, and the first row's speed-up per round (this row's time over
the first's), then its median. TFLOP/s count the three GEMMs of each
expert (6 x tokens x hidden x FFN per step). Memory per row: peak torch
allocations over its first steps above what was allocated before it, and
the drop in the device's free memory. Prints a markdown table; --json
writes every number with the GPU, versions, date and command line.
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))

import torch  # noqa: E402

import bench_block_scaling  # noqa: E402 (its table and cleanup)
import bench_transformer  # noqa: E402
import tejit.pytorch as te  # noqa: E402
import torch_peers  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
SIZES = {
    "full": {"experts": 8, "hidden": 4096, "ffn": 14336, "tokens": 16384},
    "small": {"experts": 8, "hidden": 1024, "ffn": 2048, "tokens": 4096},
}
BLOCK = "experts"  # the table's block column
ROWS = {  # key -> label
    "tejit-delayed": "tejit FP8 DelayedScaling",
    "tejit-current": "tejit FP8 Float8CurrentScaling",
    "tejit-bf16": "tejit bf16",
    "loop-bf16": "torch eager bf16 loop (split + nn.Linear)",
    "grouped-mm-bf16": "torch._grouped_mm bf16",
    "compile-bf16": "torch.compile bf16 loop",
    "compile-fp8": "torch.compile FP8 loop (_scaled_mm tensorwise)",
    "tejit-main-grad": "tejit FP8 DelayedScaling, main_grads fused",
    "tejit-main-grad-reversed": "tejit FP8 DelayedScaling, main_grads "
                                "fused (reversed: per-expert pointers)",
    "tejit-grad-add": "tejit FP8 DelayedScaling + main_grad.add_",
    "tejit-block": "tejit FP8 Float8BlockScaling",
    "compile-fp8-block": "torch.compile FP8 blockwise loop (_scaled_mm)",
}
BLOCK_ROWS = ("tejit-block", "compile-fp8-block")
DEFAULT_ROWS = ["tejit-delayed", "tejit-current", "tejit-bf16", "loop-bf16",
                "grouped-mm-bf16", "compile-bf16", "compile-fp8"]
# The main_grad rows: where the main_grads lie, and whether the program
# adds into them (fuse_wgrad_accumulation).
MAIN_GRAD_ROWS = {"tejit-main-grad": ("in order", True),
                  "tejit-main-grad-reversed": ("reversed", True),
                  "tejit-grad-add": ("in order", False)}
TEJIT_RECIPES = {
    "tejit-delayed": lambda: recipe.DelayedScaling(
        fp8_format=recipe.Format.HYBRID, amax_history_len=1024,
        amax_compute_algo="max"),
    "tejit-current": lambda: recipe.Float8CurrentScaling(
        fp8_format=recipe.Format.HYBRID),
    "tejit-bf16": lambda: None,
    "tejit-block": lambda: recipe.Float8BlockScaling(),
}
for _key in MAIN_GRAD_ROWS:
    TEJIT_RECIPES[_key] = TEJIT_RECIPES["tejit-delayed"]
SPLIT_ALIGNMENT = 16  # FP8's (Fp8Padding's) multiple
# The blockwise peer casts each expert's tokens transposed in 1 x 128
# blocks of whole 128-token columns.
BLOCK_SPLIT_ALIGNMENT = 128


def routed_splits(size, balanced, seed=1234, alignment=SPLIT_ALIGNMENT):
    """Tokens per expert, multiples of 16 summing to the size's tokens:
    equal, or a fixed unequal draw (shares between 0.5 and 1.5 of the
    mean, as a router's load varies)."""
    experts, tokens = size["experts"], size["tokens"]
    units = tokens // alignment
    if balanced:
        shares = [1.0] * experts
    else:
        generator = torch.Generator().manual_seed(seed)
        shares = (torch.rand(experts, generator=generator) + 0.5).tolist()
    counts = [int(units * s / sum(shares)) for s in shares]
    counts[0] += units - sum(counts)
    return [c * alignment for c in counts]


def step_flops(size):
    """The forward, dgrad and wgrad GEMMs of every expert over its
    tokens: 3 x 2 x tokens x hidden x FFN."""
    return 6 * size["tokens"] * size["hidden"] * size["ffn"]


class ExpertLoop(torch.nn.Module):
    """The experts as PyTorch runs them without a grouped GEMM: the input
    split into the experts' segments, one `linear` module per expert
    (nn.Linear or torch_peers.Fp8Linear), the outputs concatenated."""

    def __init__(self, experts, hidden, ffn, splits, linear=torch.nn.Linear,
                 **factory):
        super().__init__()
        self.splits = tuple(splits)
        self.experts = torch.nn.ModuleList(
            linear(hidden, ffn, bias=False, **factory)
            for _ in range(experts))

    def forward(self, x):
        return torch.cat([expert(part) for expert, part in
                          zip(self.experts, x.split(self.splits))])


class GroupedMm(torch.nn.Module):
    """The experts through torch._grouped_mm: weights [G, FFN, hidden],
    the segments given by their cumulative ends (int32 on the device)."""

    def __init__(self, experts, hidden, ffn, splits, **factory):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(experts, ffn, hidden,
                                                     **factory))
        torch.nn.init.normal_(self.weight, std=0.023)
        ends = torch.tensor(splits, dtype=torch.int64).cumsum(0)
        self.register_buffer("offsets", ends.to(self.weight.device,
                                                torch.int32))

    def forward(self, x):
        return torch._grouped_mm(x, self.weight.transpose(-2, -1),
                                 offs=self.offsets)


def grouped_mm_support():
    """None when torch._grouped_mm runs the experts' forward and backward
    in bf16 here with the loop's results (relative L2 below 1e-2 for the
    output and every gradient), else the reason why not."""
    if not hasattr(torch, "_grouped_mm"):
        return "this PyTorch has no torch._grouped_mm"
    splits = [64, 32, 16, 144]
    factory = {"device": "cuda", "dtype": BF16}
    try:
        grouped = GroupedMm(4, 128, 256, splits, **factory)
        loop = ExpertLoop(4, 128, 256, splits, **factory)
        with torch.no_grad():
            for expert, weight in zip(loop.experts, grouped.weight):
                expert.weight.copy_(weight)
        x = torch.randn(sum(splits), 128, device="cuda", dtype=BF16)
        dy = torch.randn(sum(splits), 256, device="cuda", dtype=BF16)
        results = []
        for model in (grouped, loop):
            xi = x.clone().requires_grad_()
            y = model(xi)
            y.backward(dy)
            grads = ([model.weight.grad] if model is grouped else
                     [torch.stack([e.weight.grad for e in model.experts])])
            results.append([y, xi.grad] + grads)
        for name, got, want in zip(("output", "dx", "dW"), *results):
            error = ((got.float() - want.float()).norm()
                     / want.float().norm()).item()
            if not error < 1e-2:
                return (f"torch._grouped_mm's {name} differs from the loop's "
                        f"by a relative L2 error of {error:.2e}")
    except Exception as error:  # noqa: BLE001 - the reason is the report
        first_line = str(error).strip().splitlines()[0] if str(error) else ""
        return f"{type(error).__name__}: {first_line[:200]}"
    return None


def build_model(key, size, splits):
    """(model on the GPU in training mode, forward(model, x))."""
    g, h, f = size["experts"], size["hidden"], size["ffn"]
    if key in TEJIT_RECIPES:
        layout, fused = MAIN_GRAD_ROWS.get(key, (None, False))
        model = te.GroupedLinear(g, h, f, bias=False, params_dtype=BF16,
                                 fuse_wgrad_accumulation=fused)
        if layout:
            # One float32 buffer, as Megatron-LM's gradient buffer.
            buffer = torch.zeros(g * f * h, device="cuda",
                                 dtype=torch.float32)
            for i in range(g):
                at = i if layout == "in order" else g - 1 - i
                getattr(model, f"weight{i}").main_grad = (
                    buffer[at * f * h:(at + 1) * f * h].view(f, h))
        fp8_recipe = TEJIT_RECIPES[key]()

        def forward(m, x):
            with te.fp8_autocast(enabled=fp8_recipe is not None,
                                 fp8_recipe=fp8_recipe):
                return m(x, splits)
        return model.train(), forward
    factory = {"device": "cuda", "dtype": BF16}
    if key == "grouped-mm-bf16":
        model = GroupedMm(g, h, f, splits, **factory)
    else:
        linear = {"compile-fp8": torch_peers.Fp8Linear,
                  "compile-fp8-block": torch_peers.BlockwiseFp8Linear}.get(
                      key, torch.nn.Linear)
        model = ExpertLoop(g, h, f, splits, linear=linear, **factory)
    model = model.train()
    if key.startswith("compile-"):
        model = torch.compile(model)
    return model, lambda m, x: m(x)


def make_step(key, size, splits):
    """(step, what it keeps alive)."""
    torch.manual_seed(1234)
    model, forward = build_model(key, size, splits)
    x = torch.randn(size["tokens"], size["hidden"], device="cuda",
                    dtype=BF16, requires_grad=True)
    dy = torch.randn(size["tokens"], size["ffn"], device="cuda", dtype=BF16)
    params = list(model.parameters())
    add_to_main_grads = (key in MAIN_GRAD_ROWS
                         and not MAIN_GRAD_ROWS[key][1])

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        forward(model, x).backward(dy)
        if add_to_main_grads:
            for p in params:
                p.main_grad.add_(p.grad)

    return step, (model, x, dy, params)


def comparisons(summary):
    """Lines comparing tejit with its peers of the same precision: tejit
    bf16 against each bf16 peer, and the faster tejit FP8 row against
    torch.compile's FP8 loop (time ratios of the medians; > 1: tejit is
    faster)."""
    by_key = {e["key"]: e for e in summary}
    lines = []
    pairs = [("tejit-bf16", peer) for peer in ("loop-bf16",
                                               "grouped-mm-bf16",
                                               "compile-bf16")]
    fp8 = [by_key[k] for k in ("tejit-delayed", "tejit-current")
           if k in by_key]
    if fp8:
        best = min(fp8, key=lambda e: e["median_ms"])["key"]
        pairs += [(best, "compile-fp8"), (best, "tejit-bf16")]
    pairs += [("tejit-block", "compile-fp8-block"),
              ("tejit-block", "tejit-delayed"),
              ("tejit-main-grad", "tejit-grad-add"),
              ("tejit-main-grad", "tejit-main-grad-reversed")]
    for ours, peer in pairs:
        if ours in by_key and peer in by_key:
            ratio = by_key[peer]["median_ms"] / by_key[ours]["median_ms"]
            lines.append(f"{by_key[ours]['label']} vs {by_key[peer]['label']}"
                         f": {ratio:.2f}x")
    return lines


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", choices=list(ROWS),
                        default=DEFAULT_ROWS,
                        help="rows, the first compared with the others")
    parser.add_argument("--small", action="store_true",
                        help="the small sizes: a quick check")
    parser.add_argument("--balanced", action="store_true",
                        help="equal token counts per expert")
    bench_block_scaling.add_timing_args(parser, hold=0.5, iters=10)
    return bench_block_scaling.parsed_timing_args(parser)


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    size = SIZES["small" if args.small else "full"]
    block_rows = any(key in BLOCK_ROWS for key in args.rows)
    splits = routed_splits(size, args.balanced,
                           alignment=(BLOCK_SPLIT_ALIGNMENT if block_rows
                                      else SPLIT_ALIGNMENT))
    env = bench_block_scaling.environment()
    print(f"{env['gpu']} (driver {env['driver']}), torch {env['torch']} "
          f"(CUDA {env['cuda']}), tejit {env['tejit']}; sizes {size}, "
          f"splits {splits}; rows {args.rows}, {args.rounds} rounds, hold "
          f"{args.hold} s, {args.iters} steps", flush=True)
    bench_transformer.warm_device()
    skipped = {}
    if "grouped-mm-bf16" in args.rows:
        reason = grouped_mm_support()
        if reason is not None:
            skipped["grouped-mm-bf16"] = reason
            print(f"grouped-mm-bf16 skipped: {reason}", flush=True)
    if "compile-fp8-block" in args.rows:
        reason = torch_peers.blockwise_support()
        if reason is not None:
            skipped["compile-fp8-block"] = reason
            print(f"compile-fp8-block skipped: {reason}", flush=True)
    # The rows built, timed in interleaved rounds, and released.
    rows = bench_block_scaling.run_block(
        BLOCK, size, args, skipped,
        steps=lambda block, key, size: make_step(key, size, splits),
        labels=ROWS)
    summary = bench_block_scaling.summarize(BLOCK, rows, step_flops(size))
    print(f"\n# GroupedLinear (MoE experts): {env['gpu']}, tejit "
          f"{env['tejit'][:12]}, torch {env['torch']}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}")
    print(f"sizes {size}, splits {splits}; {args.rounds} rounds x "
          f"{args.iters} steps after {args.hold} s holds; command: "
          f"{env['command']}")
    if summary:
        print()
        print(bench_block_scaling.markdown(summary, summary[0]["label"]))
    print("\nspeed-up: this row's median ms / the first row's, per round, "
          "then the median (> 1: the first row is faster); peak: torch "
          "allocations over the first steps, parameters included; device: "
          "the drop in free device memory (tejit's own allocations too)")
    lines = comparisons(summary)
    if lines:
        print("\n" + "\n".join(lines))
    for what, reason in skipped.items():
        print(f"skipped {what}: {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "settings": vars(args),
                       "sizes": size, "splits": splits, "summary": summary,
                       "comparisons": lines, "skipped": skipped}, f,
                      indent=1, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
