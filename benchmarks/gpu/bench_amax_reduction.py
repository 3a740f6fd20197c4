"""What the amax reduction across ranks costs a training step:

    torchrun --nproc_per_node=2 benchmarks/gpu/bench_amax_reduction.py

On every rank, the seed TransformerLayer (hidden 4096, FFN 16384, 32
heads, seq 2048, batch 4, dropout 0.1) and the quickstart's LayerNormMLP
(8192 tokens) take FP8 training steps (DelayedScaling HYBRID, history 16)
with reduce_amax off (each rank alone) and on (every te.amax_allreduce
step all-reduces over the default process group through
torch.distributed, tejit.pytorch's way), and on through a communicator of
tejit's own (tejit.AmaxGroup.create: ncclAllReduce straight on the
compute stream, no Python in the loop), in the same process. Timed with CUDA events after a
warm-up; rows alternate so that both see the same power state. Rank 0
prints the mean ms per step of each rank's median.
"""
import copy
import datetime
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
WARMUP, ITERS, ROUNDS = 10, 20, 3


def hybrid(reduce_amax):
    return recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                 amax_history_len=16, amax_compute_algo="max",
                                 reduce_amax=reduce_amax)


def timed(step, iters):
    torch.cuda.synchronize()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def make_step(model, shape, reduce_amax):
    x = torch.randn(*shape, device="cuda", dtype=BF16, requires_grad=True)
    dy = torch.randn(*shape, device="cuda", dtype=BF16)
    fp8_recipe = hybrid(reduce_amax)

    def step():
        x.grad = None
        for p in model.parameters():
            p.grad = None
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            y = model(x)
        y.backward(dy)

    return step


def use_tejit_communicator(model, group):
    """Points the model's reducing programs at `group` (a tejit.AmaxGroup)
    instead of the torch.distributed one tejit.pytorch gives them."""
    for compiled in model._programs.values():
        if compiled.amax_reductions:
            compiled.program.set_amax_group(group)
            compiled._reduction_group = dist.group.WORLD  # keep it set


def main():
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    torch.manual_seed(1234)
    blocks = {
        "TransformerLayer b4": (te.TransformerLayer(
            4096, 16384, 32, hidden_dropout=0.1, attention_dropout=0.1,
            self_attn_mask_type="no_mask", params_dtype=BF16),
            (2048, 4, 4096)),
        "LayerNormMLP 8192 tokens": (te.LayerNormMLP(
            4096, 16384, params_dtype=BF16), (8192, 4096)),
    }
    if rank == 0:
        print(f"# amax reduction cost: {dist.get_world_size()} ranks, "
              f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}\n")
        print("| block | reduce_amax off ms | on, torch.distributed ms | "
              "on / off | on, tejit's NCCL communicator ms | on / off |")
        print("|---|---|---|---|---|---|")
    ids = [tejit.AmaxGroup.unique_id() if rank == 0 else None]
    dist.broadcast_object_list(ids, src=0)
    own = tejit.AmaxGroup.create(ids[0], dist.get_world_size(), rank,
                                 torch.cuda.current_device())
    for name, (model, shape) in blocks.items():
        twin = copy.deepcopy(model)
        steps = {"off": make_step(model, shape, False),
                 "torch": make_step(model, shape, True),
                 "nccl": make_step(twin, shape, True)}
        for key, step in steps.items():
            step()
            if key == "nccl":
                use_tejit_communicator(twin, own)
            for _ in range(WARMUP):
                step()
        times = {key: [] for key in steps}
        for _ in range(ROUNDS):
            for key, step in steps.items():
                times[key].append(timed(step, ITERS))
        medians = torch.tensor([statistics.median(times[key])
                                for key in steps], device="cuda")
        parts = [torch.empty_like(medians)
                 for _ in range(dist.get_world_size())]
        dist.all_gather(parts, medians)
        off, on, nccl = torch.stack(parts).mean(dim=0).tolist()
        if rank == 0:
            print(f"| {name} | {off:.2f} | {on:.2f} | {on / off:.3f} | "
                  f"{nccl:.2f} | {nccl / off:.3f} |", flush=True)
        del steps, model, twin
        torch.cuda.empty_cache()
    own.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
