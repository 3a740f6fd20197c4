#!/usr/bin/env python3
"""What a cross entropy step (forward + backward) over LM-head logits
costs in tejit.pytorch.parallel_cross_entropy, against PyTorch's.

    python3 benchmarks/gpu/bench_cross_entropy.py [--tokens 8192]
        [--vocab 32000 128256 151936] [--dtype bf16|fp32]
        [--smoothing 0.0] [--rounds 3] [--hold 1] [--iters 20]

Logits [B, SQ, V] (B = 4, SQ = tokens / 4), int64 targets with 5% of the
rows ignored (ignore_index -100), loss averaged over rows not ignored; a
step is the loss and torch.autograd.grad of it with respect to the logits
(so that no row pays for accumulating a .grad). Rows, in the same process
on the same GPU, per vocab:
  tejit          te.parallel_cross_entropy(x, t, smoothing, reduce_loss=True)
                 (on its own copy of x, since its backward writes the
                 gradient over it: each step reads what the previous one
                 left, which costs the same)
  torch          F.cross_entropy(x.view(-1, V).float(), t.view(-1), ...)
                 (float32 softmax, as Megatron-LM's unfused loss)
  torch-compile  torch.compile of the same function
  torch-bf16     F.cross_entropy on the logits as they are (no upcast)
Ceilings measured in the same run: a device-to-device copy of the logits
(x_copy.copy_(x): bandwidth = 2 x bytes / time). tejit's forward alone is
timed too; its bytes are 1 x the logits' forward and 3 x for the step (one
read forward, one read and one write backward), reported as GB/s and as a
share of the copy's bandwidth. Each row is held --hold seconds before every
timed round (bench_sustained.py's loops); rounds rotate the order; medians
are printed with the device name.
"""
import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
import tejit.pytorch as te  # noqa: E402

F = torch.nn.functional
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
IGNORE = -100


def make_inputs(tokens, vocab, dtype):
    torch.manual_seed(0)
    shape = (4, tokens // 4)
    x = (2.0 * torch.randn(*shape, vocab, device="cuda")).to(dtype)
    t = torch.randint(0, vocab, shape, device="cuda")
    t[torch.rand(shape, device="cuda") < 0.05] = IGNORE
    return x.requires_grad_(), t


def tejit_rows(x, t, smoothing):
    def forward():
        with torch.no_grad():
            te.parallel_cross_entropy(x, t, smoothing, True, None, IGNORE)

    def step():
        loss = te.parallel_cross_entropy(x, t, smoothing, True, None, IGNORE)
        torch.autograd.grad(loss, x)
    return {"tejit": step, "tejit-forward": forward}


def torch_rows(x, t, smoothing, vocab):
    def loss_fn(logits, target):
        return F.cross_entropy(logits.view(-1, vocab).float(),
                               target.view(-1), ignore_index=IGNORE,
                               label_smoothing=smoothing)

    def loss_bf16(logits, target):
        return F.cross_entropy(logits.view(-1, vocab), target.view(-1),
                               ignore_index=IGNORE,
                               label_smoothing=smoothing)

    compiled = torch.compile(loss_fn)

    def stepper(fn):
        def step():
            torch.autograd.grad(fn(x, t), x)
        return step
    rows = {"torch": stepper(loss_fn), "torch-compile": stepper(compiled)}
    if x.dtype != torch.float32:
        rows["torch-bf16"] = stepper(loss_bf16)
    return rows


def copy_row(x):
    source = x.detach()
    target = torch.empty_like(source)
    return {"copy": lambda: target.copy_(source)}


def bench_vocab(args, vocab):
    dtype = DTYPES[args.dtype]
    x, t = make_inputs(args.tokens, vocab, dtype)
    steps = {}
    steps.update(copy_row(x))
    # Its own copy: tejit's backward writes the gradient over it.
    steps.update(tejit_rows(x.detach().clone().requires_grad_(), t,
                            args.smoothing))
    steps.update(torch_rows(x, t, args.smoothing, vocab))
    rows = []
    for name, step in steps.items():
        step()  # tejit's JIT compile, torch.compile's compile
        torch.cuda.synchronize()
        rows.append(SimpleNamespace(name=name, step=step, times=[]))
    bench_sustained.interleaved_medians(
        rows, args.rounds, args.hold, args.iters,
        lambda row: f"V={vocab} {row.name}")
    ms = {row.name: statistics.median(row.times) for row in rows}
    logits_bytes = x.numel() * x.element_size()
    copy_gbs = 2 * logits_bytes / ms["copy"] / 1e6
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}: "
          f"{args.tokens} tokens, vocab {vocab}, {args.dtype} logits "
          f"({logits_bytes / 2**30:.2f} GiB), label_smoothing "
          f"{args.smoothing}, mean over rows not ignored")
    print(f"  copy           {ms['copy']:8.3f} ms  {copy_gbs:7.0f} GB/s "
          f"(2 x the logits' bytes)")
    forward_gbs = logits_bytes / ms["tejit-forward"] / 1e6
    print(f"  tejit forward  {ms['tejit-forward']:8.3f} ms  "
          f"{forward_gbs:7.0f} GB/s ({100 * forward_gbs / copy_gbs:.0f}% of "
          f"the copy's)")
    step_gbs = 3 * logits_bytes / ms["tejit"] / 1e6
    print(f"  tejit step     {ms['tejit']:8.3f} ms  {step_gbs:7.0f} GB/s "
          f"({100 * step_gbs / copy_gbs:.0f}% of the copy's; backward "
          f"{ms['tejit'] - ms['tejit-forward']:.3f} ms)")
    for name in ("torch", "torch-compile", "torch-bf16"):
        if name in ms:
            print(f"  {name:14s} {ms[name]:8.3f} ms  "
                  f"({ms[name] / ms['tejit']:.2f}x tejit's step)")
    del rows, steps, x, t
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--vocab", type=int, nargs="+",
                        default=[32000, 128256, 151936])
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--smoothing", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.0)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    for vocab in args.vocab:
        bench_vocab(args, vocab)


if __name__ == "__main__":
    main()
