#!/usr/bin/env python3
"""Context parallelism on tejit.pytorch, written as Transformer Engine
users write it: a TransformerLayer whose attention runs over the CP
group (`set_context_parallel_group`), each rank holding its two
load-balanced chunks of the sequence.

    python3 -m torch.distributed.run --nproc-per-node 2 \\
        examples/pytorch/context_parallel.py [--comm a2a|all_gather|p2p]
        [--seq 8192] [--hidden 4096] [--heads 32] [--steps 3]

Every rank builds the same layer (the same seed) and a twin without
context parallelism, trains both a few steps under DelayedScaling (the
amaxes reduced over the CP ranks, as Megatron-LM's data+context-parallel
group does) on the same random sequences, and compares at each step this
rank's output chunks and the summed parameter gradients with the twin's,
printing their relative L2 distances (the key bias's gradient, zero in
exact arithmetic, against the value bias's); exits 1 when one exceeds
FP8's usual bound (0.1). Needs two GPUs with FP8 (sm_89 or newer) and
PyTorch; the library path as for the other scripts (source
tools/scripts/gpu-env.sh).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tejit.pytorch as te  # noqa: E402  (was: transformer_engine.pytorch)
from tejit.common import recipe  # noqa: E402

BOUND = 0.1


def rel_l2(got, want):
    return ((got.float() - want.float()).norm() /
            want.float().norm().clamp_min(1e-30)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comm", default="a2a",
                        choices=("a2a", "all_gather", "p2p"))
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    dist.init_process_group("nccl")
    cp_group = dist.group.WORLD
    cp_size, cp_rank = dist.get_world_size(), dist.get_rank()
    torch.cuda.set_device(cp_rank % torch.cuda.device_count())

    def make():
        torch.manual_seed(1234)
        return te.TransformerLayer(args.hidden, 4 * args.hidden, args.heads,
                                   hidden_dropout=0.0, attention_dropout=0.0,
                                   params_dtype=torch.bfloat16)

    layer, twin = make(), make()
    layer.set_context_parallel_group(cp_group, list(range(cp_size)),
                                     torch.cuda.Stream(),
                                     cp_comm_type=args.comm)
    fp8 = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                amax_history_len=16, amax_compute_algo="max")
    worst = 0.0
    for step in range(1, args.steps + 1):
        torch.manual_seed(step)  # the same whole sequence on every rank
        hidden = torch.randn(args.seq, 1, args.hidden, device="cuda",
                             dtype=torch.bfloat16)
        target = torch.randn_like(hidden)
        x = te.distributed.context_parallel_split(hidden, cp_size, cp_rank)
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8,
                             fp8_group=cp_group):
            y = layer(x)
            y_twin = twin(hidden)
        local_target = te.distributed.context_parallel_split(
            target, cp_size, cp_rank)
        (y.float() * local_target.float()).sum().backward()
        (y_twin.float() * target.float()).sum().backward()
        errors = {"output": rel_l2(
            y, te.distributed.context_parallel_split(y_twin, cp_size,
                                                     cp_rank))}
        twin_grads = dict(twin.named_parameters())
        for name, p in layer.named_parameters():
            grad = p.grad.float().clone()
            dist.all_reduce(grad)  # each rank's part of the gradient
            want = twin_grads[name].grad
            if name.endswith("key_bias"):
                # Zero in exact arithmetic (softmax ignores a shift shared
                # by every key): its rounding noise is measured against the
                # value bias's gradient instead.
                scale = twin_grads[name[:-len("key_bias")] + "value_bias"]
                error = ((grad - want.float()).norm() /
                         scale.grad.float().norm()).item()
            else:
                error = rel_l2(grad, want)
            errors[f"grad of {name}"] = error
        for p in list(layer.parameters()) + list(twin.parameters()):
            p.grad = None
        name, error = max(errors.items(), key=lambda item: item[1])
        worst = max(worst, error)
        if cp_rank == 0:
            print(f"step {step}: output rel L2 {errors['output']:.4f}, "
                  f"worst {name} {error:.4f}")
    if cp_rank == 0:
        print(f"cp {cp_size} ({args.comm}), s {args.seq}: worst relative L2 "
              f"{worst:.4f} (bound {BOUND})")
    dist.destroy_process_group()
    return 0 if worst <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
