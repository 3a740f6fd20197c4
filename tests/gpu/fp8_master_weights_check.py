"""FP8 primary weights under a distributed optimizer
(tejit.pytorch.tensor.utils: cast_master_weights_to_fp8,
post_all_gather_processing, replace_raw_data), on 2 GPUs:

    torchrun --nproc_per_node=2 tests/gpu/fp8_master_weights_check.py

Megatron-LM's layout: the FP8 weights' data lie in one uint8 parameter
buffer (replace_raw_data moves them there), which the ranks cut into
equal ranges; each rank holds float32 master shards of the elements of
its range (a weight may fall on one rank, or across both), quantizes them
into its range with cast_master_weights_to_fp8, then the buffer is
all-gathered and post_all_gather_processing remakes the transposes.
Checked on fresh random weights of uneven shapes, under DelayedScaling (a
scale from a real amax), Float8CurrentScaling and Float8CurrentScaling
with power-of-2 scales: every weight's FP8 bytes, scale_inv, scaling
state (amax history, scale) and transpose equal, bit for bit and on every
rank, those of a twin quantizing the whole master (rounded to bf16) with
tejit's own cast kernel (Float8Tensor.quantize_), also after the next
DelayedScaling update; a rank's stale transpose is remade on use without
post_all_gather_processing. Then the refusals. Prints one line per check
on rank 0; exits non-zero if any rank failed.
"""
import copy
import datetime
import os
import random
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402
from tejit.pytorch import float8_tensor  # noqa: E402
from tejit.pytorch.tensor.utils import (  # noqa: E402
    cast_master_weights_to_fp8, post_all_gather_processing,
    replace_raw_data)

# GEMM weights (FP8 needs dims divisible by 16); the ranks' ranges cut
# some of them at uneven points.
SHAPES = [(256, 512), (1008, 48), (64, 64), (48, 1024), (16, 32)]
RECIPES = {
    "DelayedScaling": lambda: recipe.DelayedScaling(amax_history_len=8),
    "Float8CurrentScaling": lambda: recipe.Float8CurrentScaling(),
    "Float8CurrentScaling power-of-2 scales":
        lambda: recipe.Float8CurrentScaling(use_power_2_scales=True),
}


def bytes_of(tensor):
    return tensor.view(torch.uint8)


def weights_on_buffer(recipe_name, seed, world):
    """(FP8 weights with their data in one uint8 buffer, the buffer,
    each weight's offset in it, the whole masters, twins): the same on
    every rank."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    weights, masters = [], []
    for shape in SHAPES:
        init = torch.randn(shape, device="cuda", generator=generator,
                           dtype=torch.float32).to(torch.bfloat16)
        weight = te.Float8Tensor.from_tensor(init, RECIPES[recipe_name]())
        weight.transpose_data()  # kept, as a training forward makes it
        if isinstance(weight._scaling, float8_tensor.DelayedScalingState):
            weight._scaling.update()  # a scale from the initial amax
            weight.quantize_(init)
        weights.append(weight)
        # An optimizer step's worth of change, in float32.
        masters.append(init.float() + 0.05 * torch.randn(
            shape, device="cuda", generator=generator))
    twins = [copy.deepcopy(weight) for weight in weights]
    total = sum(w.numel() for w in weights)
    total += -total % world
    buffer = torch.zeros(total, dtype=torch.uint8, device="cuda")
    offsets, start = [], 0
    for weight in weights:
        replace_raw_data(weight, buffer[start:start + weight.numel()])
        offsets.append(start)
        start += weight.numel()
    return weights, buffer, offsets, masters, twins


def shards(weights, offsets, masters, buffer, rank, world):
    """This rank's master shards (None where it holds none) and their
    offsets in each weight (Megatron's start_offsets)."""
    size = buffer.numel() // world
    low, high = rank * size, (rank + 1) * size
    parts, starts = [], []
    for weight, offset, master in zip(weights, offsets, masters):
        begin, end = max(low, offset), min(high, offset + weight.numel())
        if begin >= end:
            parts.append(None)
            starts.append(None)
            continue
        parts.append(master.reshape(-1)[begin - offset:end - offset])
        starts.append(begin - offset)
    return parts, starts


def compare(label, weights, twins, failures):
    for index, (weight, twin) in enumerate(zip(weights, twins)):
        where = f"{label}: weight {index} {tuple(weight.shape)}"
        if not torch.equal(bytes_of(weight._data), bytes_of(twin._data)):
            bad = (bytes_of(weight._data) != bytes_of(twin._data)).sum()
            failures.append(f"{where}: {int(bad)} FP8 bytes differ")
        if not torch.equal(weight._scale_inv, twin._scale_inv):
            failures.append(f"{where}: scale_inv {weight._scale_inv.item()} "
                            f"!= {twin._scale_inv.item()}")
        if not torch.equal(weight._scaling.scale, twin._scaling.scale):
            failures.append(f"{where}: scale differs")
        history = getattr(weight._scaling, "amax_history", None)
        if history is not None and not torch.equal(
                history, twin._scaling.amax_history):
            failures.append(f"{where}: amax history {history[:2].tolist()} "
                            f"!= {twin._scaling.amax_history[:2].tolist()}")
        if not torch.equal(bytes_of(weight.transpose_data()),
                           bytes_of(twin.transpose_data())):
            failures.append(f"{where}: transposes differ")


def same_on_ranks(label, tensors, failures):
    flat = torch.cat([bytes_of(t).reshape(-1) for t in tensors])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    if not all(torch.equal(g, gathered[0]) for g in gathered):
        failures.append(f"{label}: differs between ranks")


def check_recipe(recipe_name, seed, rank, world, post_process):
    failures = []
    weights, buffer, offsets, masters, twins = weights_on_buffer(
        recipe_name, seed, world)
    parts, starts = shards(weights, offsets, masters, buffer, rank, world)
    cast_master_weights_to_fp8(weights, parts, starts, dist.group.WORLD)
    size = buffer.numel() // world
    mine = buffer[rank * size:(rank + 1) * size].clone()
    dist.all_gather_into_tensor(buffer, mine)
    if post_process:
        post_all_gather_processing(weights)
    for twin, master in zip(twins, masters):
        twin.quantize_(master.to(torch.bfloat16))
    label = f"{recipe_name}{'' if post_process else ', transposes on use'}"
    compare(label, weights, twins, failures)
    same_on_ranks(label, [w._data for w in weights]
                  + [w._scaling.scale for w in weights], failures)
    if isinstance(weights[0]._scaling, float8_tensor.DelayedScalingState):
        float8_tensor.update_all([w._scaling for w in weights])
        float8_tensor.update_all([w._scaling for w in twins])
        compare(f"{label}, after the update", weights, twins, failures)
    held = sum(part is not None for part in parts)
    return failures, f"{held} of {len(weights)} weights have a shard here"


def check_refusals():
    weight = te.Float8Tensor.from_tensor(
        torch.randn(32, 32, device="cuda", dtype=torch.bfloat16))
    master = torch.zeros(100, device="cuda")
    cases = [
        (lambda: cast_master_weights_to_fp8(
            [torch.zeros(4, device="cuda")], [None], [None], None),
         TypeError, "Float8Tensor"),
        (lambda: cast_master_weights_to_fp8([weight], [master], [1000],
                                            None), ValueError, "runs past"),
        (lambda: cast_master_weights_to_fp8([weight], [master], [-1], None),
         ValueError, "start_offsets"),
        (lambda: cast_master_weights_to_fp8([weight], [], [], None),
         ValueError, "master weights"),
        (lambda: cast_master_weights_to_fp8([weight], [None], [None], None,
                                            fsdp_shard_model_weights=[None]),
         NotImplementedError, "fsdp"),
        (lambda: replace_raw_data(weight, torch.zeros(
            10, dtype=torch.uint8, device="cuda")), ValueError, "1024"),
    ]
    failures = []
    for call, error, text in cases:
        try:
            call()
        except error as caught:
            if text not in str(caught):
                failures.append(f"{error.__name__} without '{text}': "
                                f"{caught}")
        else:
            failures.append(f"no {error.__name__} ('{text}')")
    return failures, f"{len(cases)} refusals"


def main():
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    seed = int(os.environ.get("TEJIT_TEST_SEED",
                              random.SystemRandom().randrange(1 << 31)))
    seed_tensor = torch.tensor([seed], device="cuda")
    dist.broadcast(seed_tensor, 0)
    seed = int(seed_tensor.item())
    if rank == 0:
        print(f"fp8_master_weights_check: {world} rank(s) on "
              f"{torch.cuda.get_device_name()}, seed {seed} "
              f"(TEJIT_TEST_SEED={seed} repeats this run)", flush=True)
    checks = [(f"{name}{'' if post else ' (transposes remade on use)'}",
               lambda name=name, post=post, index=index: check_recipe(
                   name, seed + index, rank, world, post))
              for index, (name, post) in enumerate(
                  [(name, True) for name in RECIPES]
                  + [("DelayedScaling", False)])]
    checks.append(("refusals", check_refusals))
    failed = 0
    for name, check in checks:
        try:
            failures, detail = check()
        except Exception as error:  # one failure must not stop the rest
            failures = [f"{type(error).__name__}: {error}\n"
                        f"{traceback.format_exc(limit=-4)}"]
            detail = ""
        flag = torch.tensor([len(failures)], device="cuda")
        dist.all_reduce(flag)
        failed += int(flag.item() > 0)
        if failures:
            print(f"rank {rank}: FAIL {name}: " + "; ".join(failures[:5]),
                  flush=True)
        if rank == 0:
            print(f"{'PASS' if not flag.item() else 'FAIL'}  {name}  "
                  f"{detail}", flush=True)
    if rank == 0:
        print(f"fp8_master_weights_check: {len(checks) - failed}/"
              f"{len(checks)} passed", flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
