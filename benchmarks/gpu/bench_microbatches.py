#!/usr/bin/env python3
"""Gradient accumulation with TE's FP8 weight caching: one optimizer step's
worth of micro-batches (forward + backward each) through a tejit
TransformerLayer (the seed's sizes) or LayerNormMLP, with
`is_first_microbatch` left at None (every micro-batch casts the weights)
against True for the first micro-batch and False for the rest (the later
ones reuse the first one's casts).

    python3 benchmarks/gpu/bench_microbatches.py [--layer transformer|mlp]
        [--seq 2048] [--batch 1] [--microbatches 4] [--steps 20]
        [--repeats 2]
    (after `source tools/scripts/gpu-env.sh` and PYTHONPATH=python)

FP8 DelayedScaling HYBRID (history 1024, max), bf16 parameters, no
dropout. The two variants alternate, each timed over --steps accumulation
steps with CUDA events after warm-up steps, --repeats times; the table
gives the median ms per accumulation step and per micro-batch.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

HIDDEN, FFN, HEADS = 4096, 16384, 32


def make_layer(kind):
    import tejit.pytorch as te
    if kind == "transformer":
        return te.TransformerLayer(HIDDEN, FFN, HEADS, hidden_dropout=0.0,
                                   attention_dropout=0.0,
                                   params_dtype=torch.bfloat16)
    return te.LayerNormMLP(HIDDEN, FFN, params_dtype=torch.bfloat16)


def accumulation_step(layer, inputs, grad, fp8_recipe, cache):
    import tejit.pytorch as te
    for index, x in enumerate(inputs):
        kwargs = {"is_first_microbatch": index == 0} if cache else {}
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            y = layer(x, **kwargs)
        y.backward(grad)


def time_steps(layer, inputs, grad, fp8_recipe, cache, steps):
    for _ in range(3):
        accumulation_step(layer, inputs, grad, fp8_recipe, cache)
    torch.cuda.synchronize()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    for _ in range(steps):
        accumulation_step(layer, inputs, grad, fp8_recipe, cache)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layer", choices=("transformer", "mlp"),
                        default="transformer")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    from tejit.common import recipe
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID)
    torch.manual_seed(0)
    layer = make_layer(args.layer)
    shape = ((args.seq, args.batch, HIDDEN) if args.layer == "transformer"
             else (args.seq * args.batch, HIDDEN))
    inputs = [torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                          requires_grad=True)
              for _ in range(args.microbatches)]
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    times = {False: [], True: []}
    for _ in range(args.repeats):
        for cache in (False, True):
            times[cache].append(time_steps(layer, inputs, grad, fp8_recipe,
                                           cache, args.steps))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"tejit {args.layer} {HIDDEN}/{FFN}, {args.microbatches} "
          f"micro-batches of {args.seq * args.batch} tokens, "
          f"{args.steps} steps per timing\n")
    print("| is_first_microbatch | ms per step | ms per micro-batch | runs |")
    print("|---|---|---|---|")
    for cache, label in ((False, "None (cast every micro-batch)"),
                         (True, "True, then False")):
        ms = statistics.median(times[cache])
        runs = ", ".join(f"{t:.2f}" for t in times[cache])
        print(f"| {label} | {ms:.2f} | {ms / args.microbatches:.3f} | "
              f"{runs} |")
    saved = (statistics.median(times[False])
             - statistics.median(times[True]))
    print(f"\nsaved per step: {saved:.2f} ms "
          f"({100 * saved / statistics.median(times[False]):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
