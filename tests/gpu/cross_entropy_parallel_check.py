"""Vocab-parallel parallel_cross_entropy (TE's dist_process_group;
docs/cross-entropy.md) on 2 (or more) GPUs:

    python3 -m torch.distributed.run --nproc_per_node=2 \\
        tests/gpu/cross_entropy_parallel_check.py [--full] [--filter S]
        [--tol-scale X]

Built on tensor_parallel_check.py (imported: its runner, seed and report
lines). Every rank draws the same logits [B, SQ, V] and targets (one seed
on every rank; rows ignored at random, targets spread over every rank's
columns) and runs tejit.pytorch.parallel_cross_entropy on its columns
[r V/tp, (r + 1) V/tp) with dist_process_group=WORLD: its forward gathers
four floats per row over the group (te.tp_all_gather), never logits.
Compared against a float64 reference of the whole vocab
(cross_entropy_reference.py, as tests/gpu/test_cross_entropy.py):
  * the loss (per row, or the mean over rows not ignored), which must also
    be bit for bit the same on every rank;
  * this rank's gradient columns against the same columns of the whole
    gradient (the incoming gradient random per row, or the mean's);
  * the one-GPU function (no group) on the whole logits, to the same
    tolerances.
Cases: bf16 and fp32 logits, vocab 64000 and 128256 (32000 and 64128 a
rank at tp 2), label smoothing 0 and 0.1, reduce_loss, 4 x 1024 tokens
(--full: 4 x 2048, and vocab 256000). With one process (world size 1) it
runs unsplit: a check of this script only. TEJIT_TEST_SEED=N repeats a
run.
"""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tensor_parallel_check as tpc  # noqa: E402 - beside this script
from cross_entropy_reference import reference  # noqa: E402

from tejit.pytorch.cross_entropy import parallel_cross_entropy  # noqa: E402

IGNORE = -100
LOSS_RTOL = 2e-5
GRAD_RTOL = {torch.float32: 1e-5, torch.bfloat16: 8e-3}


def max_error(got, want):
    """max |got - want| / max |want|."""
    scale = max(want.abs().max().item(), 1e-30)
    return (got.double() - want).abs().max().item() / scale


def run(logits, target, smoothing, reduce_loss, grad_rows, group):
    """(loss, grad) of parallel_cross_entropy on `logits` (a fresh leaf),
    the incoming gradient `grad_rows` per row (or the mean's 1)."""
    inp = logits.clone().requires_grad_()
    loss = parallel_cross_entropy(inp, target, smoothing, reduce_loss, group,
                                  IGNORE)
    if reduce_loss:
        loss.backward()
    else:
        loss.backward(grad_rows.reshape(loss.shape))
    return loss.detach(), inp.grad


def check_case(shape, vocab, dtype, smoothing, reduce_loss, seed):
    rank, world = tpc.RANK, tpc.WORLD
    vocab -= vocab % world  # equal shards, as TE requires
    local = vocab // world
    generator = torch.Generator(device="cuda").manual_seed(seed)
    logits = (2.0 * torch.randn(*shape, vocab, device="cuda",
                                generator=generator)).to(dtype)
    target = torch.randint(0, vocab, shape, device="cuda",
                           generator=generator)
    target[torch.rand(shape, device="cuda", generator=generator) < 0.1] = \
        IGNORE
    rows = logits.numel() // vocab
    flat_target = target.reshape(rows)
    count = max((flat_target != IGNORE).sum().item(), 1)
    grad_rows = (torch.full((rows,), 1.0 / count, device="cuda")
                 if reduce_loss else
                 torch.rand(rows, device="cuda", generator=generator) + 0.5)
    columns = slice(rank * local, (rank + 1) * local)
    mine = logits[..., columns].contiguous()

    loss, grad = run(mine, target, smoothing, reduce_loss,
                     grad_rows, dist.group.WORLD if world > 1 else None)
    whole_loss, whole_grad = run(logits, target, smoothing, reduce_loss,
                                 grad_rows, None)
    want_loss, want_grad = reference(logits.reshape(rows, vocab),
                                     flat_target, smoothing, grad_rows,
                                     IGNORE)
    if reduce_loss:
        want_loss = want_loss.sum().reshape(1) / count
    loss, whole_loss = loss.reshape(-1), whole_loss.reshape(-1)
    want_mine = want_grad[:, columns]
    errors = {
        "loss": max_error(loss, want_loss),
        "one-GPU loss": max_error(whole_loss, want_loss),
        "grad": max_error(grad.reshape(rows, local), want_mine),
        "one-GPU grad": max_error(whole_grad.reshape(rows, vocab), want_grad),
    }
    limits = {"loss": LOSS_RTOL, "one-GPU loss": LOSS_RTOL,
              "grad": GRAD_RTOL[dtype], "one-GPU grad": GRAD_RTOL[dtype]}
    for name, error in errors.items():
        limit = limits[name] * tpc.TOL_SCALE
        assert error <= limit, (f"{name}: max error {error:.3e} > {limit:.1e}"
                                f" of the largest value")
    ignored = flat_target == IGNORE
    assert torch.all(grad.reshape(rows, local)[ignored] == 0)
    if world > 1:
        losses = [torch.empty_like(loss) for _ in range(world)]
        dist.all_gather(losses, loss)
        assert all(torch.equal(other, loss) for other in losses), \
            "the ranks' losses differ"
    return ", ".join(f"{name} {error:.1e}" for name, error in errors.items())


def cases(full, seed):
    shape = (4, 2048) if full else (4, 1024)
    vocabs = (64000, 128256, 256000) if full else (64000, 128256)
    found = []
    index = 0
    for dtype, dtype_name in ((torch.bfloat16, "bf16"),
                              (torch.float32, "fp32")):
        for vocab in vocabs:
            for smoothing in (0.0, 0.1):
                for reduce_loss in (False, True):
                    name = (f"{dtype_name} V={vocab} smoothing={smoothing} "
                            f"{'mean' if reduce_loss else 'per row'}")
                    found.append((name, lambda args=(
                        shape, vocab, dtype, smoothing, reduce_loss,
                        seed + index): check_case(*args)))
                    index += 1
    return found


if __name__ == "__main__":
    tpc.main(cases, "cross_entropy_parallel_check",
             full_help="4 x 2048 tokens, also vocab 256000")
