"""What the amax reduction across ranks costs a training step:

    torchrun --nproc_per_node=2 benchmarks/gpu/bench_amax_reduction.py

On every rank, the seed TransformerLayer (hidden 4096, FFN 16384, 32
heads, seq 2048, batch 4, dropout 0.1) and the quickstart's LayerNormMLP
(8192 tokens) take FP8 training steps (DelayedScaling HYBRID, history 16)
with reduce_amax off (each rank alone) and on (every te.amax_allreduce
step all-reduces over the default process group through
torch.distributed), in the same process. Timed with CUDA events after a
warm-up; rows alternate so that both see the same power state. Rank 0
prints the mean ms per step of each rank's median.
"""
import datetime
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

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
        print("| block | reduce_amax off ms | on ms | on / off |")
        print("|---|---|---|---|")
    for name, (model, shape) in blocks.items():
        steps = {flag: make_step(model, shape, flag) for flag in (False, True)}
        for flag in (False, True):
            for _ in range(WARMUP):
                steps[flag]()
        times = {False: [], True: []}
        for _ in range(ROUNDS):
            for flag in (False, True):
                times[flag].append(timed(steps[flag], ITERS))
        medians = torch.tensor([statistics.median(times[False]),
                                statistics.median(times[True])],
                               device="cuda")
        parts = [torch.empty_like(medians)
                 for _ in range(dist.get_world_size())]
        dist.all_gather(parts, medians)
        off, on = torch.stack(parts).mean(dim=0).tolist()
        if rank == 0:
            print(f"| {name} | {off:.2f} | {on:.2f} | {on / off:.3f} |",
                  flush=True)
        del steps, model
        torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
