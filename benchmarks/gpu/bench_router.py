#!/usr/bin/env python3
"""What a MoE router step (forward + backward) costs in tejit.pytorch's
router fusions, against Megatron-LM's unfused PyTorch path and
torch.compile of it, in the same process on the same GPU.

    python3 benchmarks/gpu/bench_router.py [--dtype bf16|fp32]
        [--rounds 3] [--hold 1] [--iters 50] [--profile-steps 20]

Configurations (tokens x experts, top-k):
  deepseek_v3  8192 x 256, top-8, sigmoid, 8 groups / top-4, expert bias,
               scaling 2.5
  mixtral      4096 x 8, top-2, softmax after the top-k
  qwen_pre     8192 x 64, top-8, softmax before the top-k
  aux_scores   8192 x 256, top-8, softmax scores of the aux loss
  aux_loss     8192 x 256 probs, the switch load-balancing loss
A step is the forward and torch.autograd.grad of (outputs * a fixed
random weight).sum() with respect to the logits (probs for the loss).
Rows: tejit (te.fused_*), torch (the unfused functions, float32 math as
Megatron), torch-compile (torch.compile of the same). Each row is held
--hold seconds before every timed round (bench_sustained.py); medians in
ms, and tejit's speedup over each peer, are printed with the device name.
These steps are small: a loop of them waits on the host (Python,
autograd, launches) as much as on the GPU, so a second table gives each
row's GPU kernel time per step (torch.profiler over --profile-steps
steps: the sum of its kernels' durations), what the step costs inside a
training step whose host runs ahead.
"""
import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
import tejit.pytorch as te  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def megatron_topk(logits, topk, pre, groups, group_topk, scale, function,
                  bias):
    """Megatron-LM's unfused topk_routing_with_score_function (torch.topk,
    float32 softmax / sigmoid), as it runs without --moe-router-fusion."""
    tokens, experts = logits.shape

    def choose(scores):
        if not group_topk:
            return torch.topk(scores, topk, dim=1)
        group_scores = scores.view(tokens, groups, -1).topk(
            topk // group_topk, dim=-1)[0].sum(-1)
        idx = torch.topk(group_scores, group_topk, dim=-1, sorted=False)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, idx, 1)
        mask = mask.unsqueeze(-1).expand(tokens, groups, experts // groups)
        masked = scores.masked_fill(~mask.reshape(tokens, -1).bool(),
                                    float("-inf"))
        return torch.topk(masked, topk, dim=-1)

    if function == "softmax":
        if pre:
            scores = torch.softmax(logits, -1, dtype=torch.float32).type_as(
                logits)
            probs, idx = choose(scores)
        else:
            scores, idx = choose(logits)
            probs = torch.softmax(scores, -1, dtype=torch.float32).type_as(
                logits)
    else:
        scores = torch.sigmoid(logits.float()).type_as(logits)
        if bias is not None:
            idx = choose(scores + bias)[1]
            scores = torch.gather(scores, 1, idx).type_as(logits)
        else:
            scores, idx = choose(scores)
        probs = scores / (scores.sum(-1, keepdim=True) + 1e-20) \
            if topk > 1 else scores
    if scale:
        probs = probs * scale
    routing_probs = torch.zeros_like(logits).scatter(1, idx, probs)
    routing_map = torch.zeros_like(logits).int().scatter(1, idx, 1).bool()
    return routing_probs, routing_map


def megatron_aux_scores(logits, topk, function):
    if function == "softmax":
        scores = torch.softmax(logits, -1, dtype=torch.float32)
    else:
        scores = torch.sigmoid(logits)
        scores = scores / (scores.sum(-1, keepdim=True) + 1e-20)
    idx = torch.topk(scores, topk, dim=1)[1]
    return torch.zeros_like(logits).int().scatter(1, idx, 1).bool(), scores


def megatron_aux_loss(probs, tokens_per_expert, total, experts, topk,
                      coeff):
    per_expert = probs.sum(dim=0)
    return torch.sum(per_expert * tokens_per_expert) * (
        experts * coeff / (topk * total * total))


TOPK_CASES = {
    "deepseek_v3": (8192, 256, 8, False, 8, 4, 2.5, "sigmoid", True),
    "mixtral": (4096, 8, 2, False, None, None, None, "softmax", False),
    "qwen_pre": (8192, 64, 8, True, None, None, None, "softmax", False),
}


def step_of(function, x, weight, index=0):
    def step():
        out = function(x)
        out = out[index] if isinstance(out, tuple) else out
        torch.autograd.grad((out.float() * weight).sum(), x)
    return step


def rows_of(args):
    dtype = DTYPES[args.dtype]
    rows = []

    def add(case, kind, step):
        rows.append(_Row(case, kind, step))

    torch.manual_seed(0)
    for case, (tokens, experts, k, pre, groups, gtopk, scale, function,
               has_bias) in TOPK_CASES.items():
        x = (2 * torch.randn(tokens, experts, device="cuda")).to(dtype)
        x.requires_grad_()
        bias = 0.1 * torch.randn(experts, device="cuda") if has_bias else None
        weight = torch.randn(tokens, experts, device="cuda")
        options = (k, pre, groups, gtopk, scale, function, bias)
        add(case, "tejit", step_of(
            lambda x, o=options: te.fused_topk_with_score_function(x, *o),
            x, weight))
        add(case, "torch", step_of(
            lambda x, o=options: megatron_topk(x, *o), x, weight))
        add(case, "torch-compile", step_of(
            lambda x, o=options, c=torch.compile(megatron_topk): c(x, *o),
            x, weight))
    x = (2 * torch.randn(8192, 256, device="cuda")).to(dtype)
    x.requires_grad_()
    weight = torch.randn(8192, 256, device="cuda")
    add("aux_scores", "tejit", step_of(
        lambda x: te.fused_compute_score_for_moe_aux_loss(x, 8, "softmax"),
        x, weight, 1))
    add("aux_scores", "torch", step_of(
        lambda x: megatron_aux_scores(x, 8, "softmax"), x, weight, 1))
    compiled_scores = torch.compile(megatron_aux_scores)
    add("aux_scores", "torch-compile", step_of(
        lambda x: compiled_scores(x, 8, "softmax"), x, weight, 1))
    probs = torch.softmax(torch.randn(8192, 256, device="cuda"), -1).to(dtype)
    probs.requires_grad_()
    counts = torch.randint(0, 512, (256,), device="cuda")
    one = torch.ones((), device="cuda")
    loss_args = (counts, 8192, 256, 8, 1e-2)
    add("aux_loss", "tejit", step_of(
        lambda p: te.fused_moe_aux_loss(p, *loss_args), probs, one))
    add("aux_loss", "torch", step_of(
        lambda p: megatron_aux_loss(p, *loss_args), probs, one))
    compiled_loss = torch.compile(megatron_aux_loss)
    add("aux_loss", "torch-compile", step_of(
        lambda p: compiled_loss(p, *loss_args), probs, one))
    return rows


class _Row:
    """A row of interleaved_medians: a step and its times."""

    def __init__(self, case, kind, step):
        self.case, self.kind, self.step = case, kind, step
        self.times = []
        for _ in range(3):  # compile (tejit's programs, torch.compile)
            step()
        torch.cuda.synchronize()


def kernel_ms(step, steps):
    """The summed duration of the GPU kernels of one step (ms), averaged
    over `steps` profiled steps."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    total_us = sum(event.device_time for event in prof.events()
                   if event.device_type.name == "CUDA")
    return total_us / steps / 1e3


def print_table(title, rows, ms_of):
    print(f"\n{title}")
    print(f"{'case':<12} {'tejit':>9} {'torch':>9} {'compile':>9} "
          f"{'vs torch':>9} {'vs compile':>10}")
    for case in dict.fromkeys(row.case for row in rows):
        ms = {row.kind: ms_of(row) for row in rows if row.case == case}
        print(f"{case:<12} {ms['tejit']:9.3f} {ms['torch']:9.3f} "
              f"{ms['torch-compile']:9.3f} "
              f"{ms['torch'] / ms['tejit']:8.2f}x "
              f"{ms['torch-compile'] / ms['tejit']:9.2f}x")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.0)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--profile-steps", type=int, default=20)
    args = parser.parse_args()
    rows = rows_of(args)
    bench_sustained.interleaved_medians(
        rows, args.rounds, args.hold, args.iters,
        lambda row: f"{row.case} {row.kind}")
    kernels = {id(row): kernel_ms(row.step, args.profile_steps)
               for row in rows}
    device = torch.cuda.get_device_name()
    print_table(f"{device}, {args.dtype}, forward + backward, median ms "
                f"per step (wall: host and GPU)", rows,
                lambda row: statistics.median(row.times))
    print_table(f"{device}, {args.dtype}, forward + backward, GPU kernel "
                f"ms per step", rows, lambda row: kernels[id(row)])


if __name__ == "__main__":
    main()
