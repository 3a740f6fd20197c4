"""Tensor-parallel training step of the seed TransformerLayer, tejit against
Megatron-style PyTorch peers in the same processes, on the same GPUs:

    torchrun --nproc_per_node=2 benchmarks/gpu/bench_tensor_parallel.py
        [--size seed|small] [--batch 4] [--iters 20] [--json FILE]
        [--sequence-parallel]

Every rank holds 1/tp of the layer (docs/tensor-parallel.md) and all ranks
process the same batch (hidden 4096, FFN 16384, 32 heads, seq 2048, no
mask, dropout 0.1 as in bench_transformer.py). Rows:
  * tejit FP8 (DelayedScaling HYBRID, amaxes reduced over the group) and
    tejit bf16, tp_group = WORLD;
  * PyTorch bf16 + SDPA flash, and torch.compile of the same layer with
    FP8 Linears (torch._scaled_mm, torch_peers.Fp8Linear), split as
    Megatron-LM splits it (tp_peers.py);
  * for scale: tejit FP8 with the whole layer on each GPU (tp_size 1, no
    communication), the same batch.
--sequence-parallel: the tensor-parallel rows with sequence parallelism
(TE's sequence_parallel=True; Megatron-LM's all-gather before the column-
parallel GEMMs and reduce-scatter after the row-parallel ones in the
peers): each rank's input, output gradient and output are its [seq/tp,
batch, hidden] slice of the same batch (the tp 1 row keeps the whole).
A step is forward + backward of a fixed output gradient, gradients cleared
first. Times are CUDA-event means over --iters steps after warm-up, the
slowest rank's; TFLOP/s per GPU counts the layer's FLOPs / tp; memory on
rank 0, as bench_transformer.py measures it: the peak of PyTorch's
allocations during the row, and the drop in the device's free memory
(everything the row holds, tejit's own arena and workspaces included).
"""
import argparse
import contextlib
import datetime
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
sys.path.insert(0, str(HERE))

import tp_peers  # noqa: E402
import transformer_peers as peers  # noqa: E402
from bench_transformer import (DROPOUT, memory_mark, memory_since,  # noqa: E402
                               recipe_for_tejit, speedometer)

SIZES = {
    "seed": {"hidden": 4096, "ffn": 16384, "heads": 32, "seq": 2048},
    "small": {"hidden": 1024, "ffn": 4096, "heads": 16, "seq": 512},
}
ROWS = ("tejit-fp8", "tejit-bf16", "torch-bf16-sdpa", "torch-compile-fp8",
        "tejit-fp8-tp1")
LABELS = {
    "tejit-fp8": "tejit FP8, tp 2",
    "tejit-bf16": "tejit bf16, tp 2",
    "torch-bf16-sdpa": "PyTorch bf16 + SDPA flash, Megatron tp 2",
    "torch-compile-fp8": "torch.compile FP8 (_scaled_mm) + SDPA, Megatron tp 2",
    "tejit-fp8-tp1": "tejit FP8, whole layer per GPU (tp 1)",
}


def label(row, sequence_parallel):
    """The row's label, "+ SP" on the tensor-parallel rows with sequence
    parallelism."""
    if not sequence_parallel or row.endswith("tp1"):
        return LABELS[row]
    return LABELS[row].replace("tp 2", "tp 2 + SP")


def build(row, size, group, sequence_parallel=False):
    """(model, forward context, callable)."""
    torch.manual_seed(1234)
    if row.startswith("tejit"):
        import tejit.pytorch as te
        tp1 = row.endswith("tp1")
        model = te.TransformerLayer(
            size["hidden"], size["ffn"], size["heads"],
            hidden_dropout=DROPOUT, attention_dropout=DROPOUT,
            self_attn_mask_type="no_mask", params_dtype=torch.bfloat16,
            tp_group=None if tp1 else group, set_parallel_mode=not tp1,
            sequence_parallel=sequence_parallel and not tp1)
        model = model.cuda().train()
        if "fp8" in row:
            fp8_recipe = recipe_for_tejit()
            fp8_group = None if tp1 else group
            return model, lambda: te.fp8_autocast(
                enabled=True, fp8_recipe=fp8_recipe, fp8_group=fp8_group), model
        return model, contextlib.nullcontext, model
    fp8 = row == "torch-compile-fp8"
    model = tp_peers.make_tp_layer(size["hidden"], size["ffn"], size["heads"],
                                   group, fp8=fp8,
                                   sequence_parallel=sequence_parallel)
    fn = torch.compile(model) if fp8 else model
    return model, contextlib.nullcontext, fn


def run_row(row, size, batch, group, args):
    torch.cuda.reset_peak_memory_stats()
    mark = memory_mark()
    sequence_parallel = args.sequence_parallel and not row.endswith("tp1")
    model, context, fn = build(row, size, group, sequence_parallel)
    seq = size["seq"]
    if sequence_parallel:
        # This rank's slice of the sequence: the ranks together process
        # the batch every rank of the other rows processes whole.
        if seq % dist.get_world_size():
            raise ValueError(f"seq {seq} is not divisible by the "
                             f"{dist.get_world_size()} ranks")
        seq //= dist.get_world_size()
    shape = (seq, batch, size["hidden"])
    generator = torch.Generator(device="cuda").manual_seed(99)
    x = torch.rand(shape, device="cuda", dtype=torch.bfloat16,
                   generator=generator, requires_grad=True)
    dy = torch.rand(shape, device="cuda", dtype=torch.bfloat16,
                    generator=generator)
    params = list(model.parameters())

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        with peers.sdpa_backend("flash"), context():
            y = fn(x)
        y.backward(dy)

    timing = speedometer(step, args.warmup, args.iters)
    memory = memory_since(mark)
    slowest = torch.tensor([timing["mean_ms"]], device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    tp = 1 if row.endswith("tp1") else dist.get_world_size()
    flops = peers.layer_flops(size["hidden"], size["ffn"], size["heads"],
                              size["seq"], batch)["total"] / tp
    ms = slowest.item()
    return {"row": row, "label": label(row, sequence_parallel), "ms": ms,
            "sequence_parallel": sequence_parallel,
            "rank0_ms": timing["mean_ms"], "median_ms": timing["median_ms"],
            "tflops_per_gpu": flops / (ms * 1e-3) / 1e12,
            "peak_gib": memory["peak_allocated_bytes"] / 2**30,
            "device_gib": memory["device_used_bytes"] / 2**30}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="seed")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--sequence-parallel", action="store_true",
                        help="the tensor-parallel rows with sequence "
                             "parallelism (each rank its slice of the "
                             "sequence)")
    args = parser.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    group = dist.group.WORLD
    size = SIZES[args.size]
    results = []
    for row in args.rows.split(","):
        try:
            results.append(run_row(row, size, args.batch, group, args))
        except Exception as error:  # noqa: BLE001 - a row that fails is reported
            if rank == 0:
                traceback.print_exc()
            results.append({"row": row,
                            "label": label(row, args.sequence_parallel),
                            "error": f"{type(error).__name__}: {error}"})
        torch.cuda.empty_cache()
        dist.barrier()
    if rank == 0:
        base = next((r for r in results if r["row"] == "tejit-fp8"
                     and "ms" in r), None)
        print(f"\n{args.size} TransformerLayer {size}, batch {args.batch}, "
              f"{dist.get_world_size()} x {torch.cuda.get_device_name()}, "
              f"torch {torch.__version__}, {datetime.date.today()}"
              + (", sequence parallelism" if args.sequence_parallel else "")
              + "\n")
        print("| row | ms / step | TFLOP/s per GPU | torch peak GiB | "
              "device GiB | tejit FP8 tp 2 is |")
        print("|---|---|---|---|---|---|")
        for r in results:
            if "ms" not in r:
                print(f"| {r['label']} | failed: {r['error'][:80]} | | | | |")
                continue
            speedup = f"{r['ms'] / base['ms']:.2f}x faster" if base else ""
            print(f"| {r['label']} | {r['ms']:.2f} | {r['tflops_per_gpu']:.0f}"
                  f" | {r['peak_gib']:.2f} | {r['device_gib']:.2f} | {speedup} |")
        if args.json:
            args.json.write_text(json.dumps(
                {"size": size, "batch": args.batch,
                 "sequence_parallel": args.sequence_parallel,
                 "results": results}, indent=2))
    dist.destroy_process_group()
    return 0 if all("ms" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
