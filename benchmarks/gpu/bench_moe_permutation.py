#!/usr/bin/env python3
"""MoE token permutation (docs/moe-permutation.md): tejit's moe_permute /
moe_unpermute / moe_sort_chunks_by_index against Megatron-LM's unfused
PyTorch implementation, forward + backward, in the same process.

    python3 benchmarks/gpu/bench_moe_permutation.py [--tokens 8192]
        [--hidden 4096] [--experts 64] [--topk 8] [--dtype bf16|fp32]
        [--rounds 3] [--hold 1] [--iters 20]

Rows (each a forward and the backward of a random output gradient,
torch.autograd.grad, so nothing accumulates):
  permute     moe_permute_with_probs (Megatron-LM's fused dispatch with
              probs), num_out_tokens = tokens x topk; the peer is
              Megatron-LM's unfused permute (mask transposed, masked_select
              of token indices, index_select; the probs by masked_select)
  unpermute   moe_unpermute with merging_probs (float32 sums, no
              [tokens x topk, hidden] temporary); the peer multiplies the
              rows by their probs and scatter_add_s them (float32, as
              Megatron-LM's promotes), then casts back
  sort        moe_sort_chunks_by_index of the permuted rows cut into
              experts x 8 chunks (8 ranks' chunks per local expert, the
              all-to-all dispatcher's sort), sorted by local expert; the
              peer splits and concatenates (torch.split, torch.cat, the
              sizes read on the host as Megatron-LM's .tolist())
  copy        a device-to-device copy of the permuted tensor: the
              bandwidth the rows are measured against
Bandwidth: the bytes the op must move (rows read and written, forward
and backward; maps and probs left out) over its time, and as a share of
the copy's (read + write) bandwidth. Medians of interleaved rounds
(bench_sustained.interleaved_medians: each row held --hold seconds before
its timed --iters steps).
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

RANKS = 8


# Megatron-LM's unfused implementations (moe_utils.permute, unpermute,
# sort_chunks_by_idxs), written from their semantics.

def torch_permute(tokens, routing_map, probs):
    num_tokens, experts = routing_map.shape
    mask = routing_map.bool().T.contiguous()
    indices = torch.arange(num_tokens, device=tokens.device)
    sorted_indices = indices.unsqueeze(0).expand(experts, -1).masked_select(
        mask)
    permuted_probs = probs.T.contiguous().masked_select(mask)
    return tokens.index_select(0, sorted_indices), permuted_probs, \
        sorted_indices


def torch_unpermute(permuted, sorted_indices, restore_shape, probs,
                    routing_map):
    dtype = permuted.dtype
    weights = probs.T.contiguous().masked_select(routing_map.T.contiguous())
    permuted = permuted * weights.unsqueeze(-1)
    out = torch.zeros(restore_shape, dtype=permuted.dtype,
                      device=permuted.device)
    out.scatter_add_(0, sorted_indices.unsqueeze(1).expand(
        -1, restore_shape[1]), permuted)
    return out.to(dtype)


def torch_sort_chunks(rows, split_sizes, sorted_index):
    chunks = torch.split(rows, split_sizes.tolist(), dim=0)
    return torch.cat([chunks[i] for i in sorted_index.tolist()], dim=0)


def setup(args):
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    t, h, e, k = args.tokens, args.hidden, args.experts, args.topk
    scores = torch.rand(t, e, device="cuda")
    mask = torch.zeros(t, e, dtype=torch.bool, device="cuda")
    mask.scatter_(1, scores.topk(k, dim=1).indices, True)
    probs = torch.softmax(scores, -1) * mask
    x = torch.randn(t, h, dtype=dtype, device="cuda", requires_grad=True)
    p = probs.clone().requires_grad_()
    out_rows = t * k
    permuted = torch.randn(out_rows, h, dtype=dtype, device="cuda",
                           requires_grad=True)
    # The sort's chunks: experts x RANKS, in rank-major order, sorted by
    # local expert.
    chunks = e * RANKS
    cuts = torch.sort(torch.randint(0, out_rows + 1, (chunks - 1,))).values
    edges = torch.cat([torch.tensor([0]), cuts, torch.tensor([out_rows])])
    split_sizes = (edges[1:] - edges[:-1]).to(torch.int32)
    order = torch.arange(chunks).reshape(RANKS, e).T.flatten()
    return SimpleNamespace(dtype=dtype, mask=mask, probs=probs, x=x, p=p,
                           permuted=permuted, out_rows=out_rows,
                           split_sizes=split_sizes,
                           split_sizes_cuda=split_sizes.cuda(),
                           order=order, order_cuda=order.to(torch.int32)
                           .cuda())


def rows_of(s, args):
    _, row_map = te.moe_permute(s.x.detach(), s.mask)
    _, _, sorted_indices = torch_permute(s.x.detach(), s.mask, s.probs)
    dy_perm = torch.randn(s.out_rows, args.hidden, dtype=s.dtype,
                          device="cuda")
    dp_perm = torch.randn(s.out_rows, device="cuda")
    dy_tok = torch.randn(args.tokens, args.hidden, dtype=s.dtype,
                         device="cuda")
    copy_dst = torch.empty_like(s.permuted)

    def tejit_permute():
        out, pp, _ = te.moe_permute_with_probs(s.x, s.p, s.mask,
                                               num_out_tokens=s.out_rows)
        torch.autograd.grad([out, pp], [s.x, s.p], [dy_perm, dp_perm])

    def torch_permute_step():
        out, pp, _ = torch_permute(s.x, s.mask, s.p)
        torch.autograd.grad([out, pp], [s.x, s.p], [dy_perm, dp_perm])

    def tejit_unpermute():
        out = te.moe_unpermute(s.permuted, row_map, merging_probs=s.p,
                               restore_shape=s.x.shape)
        torch.autograd.grad(out, [s.permuted, s.p], dy_tok)

    def torch_unpermute_step():
        out = torch_unpermute(s.permuted, sorted_indices, s.x.shape, s.p,
                              s.mask)
        torch.autograd.grad(out, [s.permuted, s.p], dy_tok)

    def tejit_sort():
        out = te.moe_sort_chunks_by_index(s.permuted, s.split_sizes_cuda,
                                          s.order_cuda)
        torch.autograd.grad(out, s.permuted, dy_perm)

    def torch_sort():
        out = torch_sort_chunks(s.permuted, s.split_sizes, s.order)
        torch.autograd.grad(out, s.permuted, dy_perm)

    def copy():
        copy_dst.copy_(s.permuted.detach())

    size = torch.finfo(s.dtype).bits // 8
    t, o, h = args.tokens, s.out_rows, args.hidden
    moved = {"permute": 2 * (t + o) * h * size,
             "unpermute": (3 * o + 2 * t) * h * size,
             "sort": 4 * o * h * size,
             "copy": 2 * o * h * size}
    steps = [("tejit-permute", tejit_permute, "permute"),
             ("torch-permute", torch_permute_step, "permute"),
             ("tejit-unpermute", tejit_unpermute, "unpermute"),
             ("torch-unpermute", torch_unpermute_step, "unpermute"),
             ("tejit-sort", tejit_sort, "sort"),
             ("torch-sort", torch_sort, "sort"),
             ("copy", copy, "copy")]
    return [SimpleNamespace(name=name, step=step, times=[],
                            bytes=moved[kind], kind=kind)
            for name, step, kind in steps]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.0)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    s = setup(args)
    rows = rows_of(s, args)
    for row in rows:  # compile and warm up outside the timed rounds
        row.step()
    torch.cuda.synchronize()
    bench_sustained.interleaved_medians(rows, args.rounds, args.hold,
                                        args.iters, lambda row: row.name)
    copy_row = rows[-1]
    copy_bw = copy_row.bytes / statistics.median(copy_row.times) / 1e6
    medians = {row.name: statistics.median(row.times) for row in rows}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: "
          f"{args.tokens} tokens x hidden {args.hidden} {args.dtype}, "
          f"{args.experts} experts, topk {args.topk} "
          f"({s.out_rows} permuted rows); forward + backward")
    print(f"{'row':16s} {'ms':>8s} {'GB/s':>7s} {'of copy':>8s} "
          f"{'vs torch':>8s}")
    for row in rows:
        ms = medians[row.name]
        bw = row.bytes / ms / 1e6
        peer = medians.get(f"torch-{row.kind}")
        speedup = (f"{peer / ms:7.2f}x" if row.name.startswith("tejit")
                   and peer else "")
        print(f"{row.name:16s} {ms:8.3f} {bw:7.0f} {bw / copy_bw:7.0%} "
              f"{speedup:>8s}")


if __name__ == "__main__":
    main()
