"""Context-parallel training step of the seed TransformerLayer at long
sequences (docs/context-parallel.md), in the same processes, on the same
GPUs:

    torchrun --nproc_per_node=2 benchmarks/gpu/bench_context_parallel.py
        [--seq 16384] [--batch 1] [--iters 10] [--rows ...]
        [--comm all_gather,a2a] [--json FILE]

The layer: hidden 4096, FFN 16384, 32 heads, causal self-attention,
dropout 0, bf16 parameters. Rows:
  * tejit FP8 (DelayedScaling HYBRID, fp8_group = the CP ranks) and tejit
    bf16 with cp_group = WORLD, one row per cp_comm_type of --comm
    (all_gather: keys and values gathered; a2a: all-to-alls trade heads
    for tokens): each rank runs its load-balanced s / cp tokens
    (tejit.pytorch.distributed.context_parallel_split);
  * for scale: tejit FP8 with the whole sequence on each GPU (cp 1).
No PyTorch peer runs context parallelism here (torch's experimental
context_parallel is not set up yet): the rows measure how tejit's step
scales, not a comparison with a peer. A step is forward + backward of a
fixed output gradient; times are CUDA-event means over --iters steps after
warm-up, the slowest rank's; memory on rank 0 as bench_transformer.py
measures it.
"""
import argparse
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

from bench_transformer import (memory_mark, memory_since,  # noqa: E402
                               recipe_for_tejit, speedometer)

HIDDEN, FFN, HEADS = 4096, 16384, 32
ROWS = ("tejit-fp8-cp", "tejit-bf16-cp", "tejit-fp8-cp1")
COMM_TYPES = ("all_gather", "a2a")
LABELS = {
    "tejit-fp8-cp": "tejit FP8, context parallel over the ranks",
    "tejit-bf16-cp": "tejit bf16, context parallel over the ranks",
    "tejit-fp8-cp1": "tejit FP8, whole sequence per GPU (cp 1)",
}


def label(row, comm):
    """The row's label; a context-parallel row's names its comm type."""
    return LABELS[row] + ("" if comm is None else f" ({comm})")


def run_row(row, comm, seq, batch, args):
    """One row: `comm` is the cp_comm_type of a context-parallel row, None
    for the cp 1 row."""
    import tejit.pytorch as te
    from tejit.pytorch.distributed import context_parallel_split
    torch.cuda.reset_peak_memory_stats()
    mark = memory_mark()
    whole = row.endswith("cp1")
    group = None if whole else dist.group.WORLD
    cp = 1 if whole else dist.get_world_size()
    torch.manual_seed(1234)
    model = te.TransformerLayer(
        HIDDEN, FFN, HEADS, hidden_dropout=0.0, attention_dropout=0.0,
        self_attn_mask_type="causal", params_dtype=torch.bfloat16,
        cp_group=group, cp_comm_type=comm or "all_gather").cuda().train()
    fp8 = "fp8" in row
    recipe = recipe_for_tejit() if fp8 else None
    generator = torch.Generator(device="cuda").manual_seed(99)
    shape = (seq, batch, HIDDEN)
    x = torch.rand(shape, device="cuda", dtype=torch.bfloat16,
                   generator=generator)
    dy = torch.rand(shape, device="cuda", dtype=torch.bfloat16,
                    generator=generator)
    if not whole:
        rank = dist.get_rank()
        x = context_parallel_split(x, cp, rank)
        dy = context_parallel_split(dy, cp, rank)
    x = x.contiguous().requires_grad_(True)
    dy = dy.contiguous()
    params = list(model.parameters())

    def step():
        x.grad = None
        for p in params:
            p.grad = None
        with te.fp8_autocast(enabled=fp8, fp8_recipe=recipe, fp8_group=group):
            y = model(x)
        y.backward(dy)

    timing = speedometer(step, args.warmup, args.iters)
    memory = memory_since(mark)
    slowest = torch.tensor([timing["mean_ms"]], device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return {"row": row, "comm": comm, "label": label(row, comm), "cp": cp,
            "ms": slowest.item(), "rank0_ms": timing["mean_ms"],
            "peak_gib": memory["peak_allocated_bytes"] / 2**30,
            "device_gib": memory["device_used_bytes"] / 2**30}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=16384)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--comm", default=",".join(COMM_TYPES),
                        help="the cp_comm_types of the context-parallel "
                             "rows, a row each (all_gather, a2a)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    comms = args.comm.split(",")
    unknown = [comm for comm in comms if comm not in COMM_TYPES]
    if unknown:
        parser.error(f"--comm: unknown {', '.join(unknown)} (expected "
                     f"{', '.join(COMM_TYPES)})")
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    results = []
    runs = [(row, comm) for row in args.rows.split(",")
            for comm in ((None,) if row.endswith("cp1") else comms)]
    for row, comm in runs:
        try:
            results.append(run_row(row, comm, args.seq, args.batch, args))
        except Exception as error:  # noqa: BLE001 - a failed row is reported
            if rank == 0:
                traceback.print_exc()
            results.append({"row": row, "comm": comm,
                            "label": label(row, comm),
                            "error": f"{type(error).__name__}: {error}"})
        torch.cuda.empty_cache()
        dist.barrier()
    if rank == 0:
        whole = next((r for r in results if r["row"] == "tejit-fp8-cp1"
                      and "ms" in r), None)
        print(f"\nseed TransformerLayer (hidden {HIDDEN}, FFN {FFN}, {HEADS} "
              f"heads, causal), seq {args.seq}, batch {args.batch}, "
              f"{dist.get_world_size()} x {torch.cuda.get_device_name()}, "
              f"torch {torch.__version__}, {datetime.date.today()}\n")
        print("| row | ms / step | torch peak GiB | device GiB | "
              "vs whole sequence per GPU |")
        print("|---|---|---|---|---|")
        for r in results:
            if "ms" not in r:
                print(f"| {r['label']} | failed: {r['error'][:80]} | | | |")
                continue
            scale = f"{whole['ms'] / r['ms']:.2f}x" if whole else ""
            print(f"| {r['label']} | {r['ms']:.2f} | {r['peak_gib']:.2f} | "
                  f"{r['device_gib']:.2f} | {scale} |")
        if args.json:
            args.json.write_text(json.dumps(
                {"seq": args.seq, "batch": args.batch, "comm": comms,
                 "results": results}, indent=2))
    dist.destroy_process_group()
    return 0 if all("ms" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
