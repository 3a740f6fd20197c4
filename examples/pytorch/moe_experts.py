#!/usr/bin/env python3
"""A mixture-of-experts MLP on tejit.pytorch, written as Transformer
Engine users write it: a top-k router, the tokens permuted by expert
(te.moe_permute), Fp8Padding, GroupedLinear (fc1), GELU, GroupedLinear
(fc2), Fp8Unpadding, then the experts' outputs weighted by their routing
probabilities and summed back per token (te.moe_unpermute).

    python3 examples/pytorch/moe_experts.py [--hidden 1024] [--ffn 4096]
        [--experts 8] [--top-k 2] [--tokens 4096] [--steps 5]
        [--recipe delayed|current|block|none] [--main-grads]

Trains a few steps under fp8_autocast and, at each one, compares the
layer's output and input gradient with the same model run in bf16 by
PyTorch (one nn.functional.linear per expert over the same weights, the
routed tokens moved by PyTorch's own indexing), printing their relative
L2 distances; exits 1 when they exceed FP8's usual bounds (0.1). With
--main-grads the experts' weights accumulate their gradients into
float32 `main_grad`s (Megatron-LM's
gradient-accumulation fusion, fuse_wgrad_accumulation=True). Needs a GPU
with FP8 (sm_89 or newer) and PyTorch; the library path as for the other
scripts (source tools/scripts/gpu-env.sh).
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tejit.pytorch as te  # noqa: E402  (was: transformer_engine.pytorch)
from tejit.common import recipe  # noqa: E402


class MoeExperts(torch.nn.Module):
    """Router plus G expert MLPs (hidden -> ffn -> hidden, GELU)."""

    def __init__(self, hidden, ffn, experts, top_k, main_grads):
        super().__init__()
        self.experts, self.top_k = experts, top_k
        self.router = torch.nn.Linear(hidden, experts, bias=False,
                                      device="cuda", dtype=torch.bfloat16)
        self.fc1 = te.GroupedLinear(experts, hidden, ffn, bias=True,
                                    params_dtype=torch.bfloat16,
                                    fuse_wgrad_accumulation=main_grads)
        self.fc2 = te.GroupedLinear(experts, ffn, hidden, bias=True,
                                    params_dtype=torch.bfloat16,
                                    fuse_wgrad_accumulation=main_grads)
        self.pad = te.Fp8Padding(experts)
        self.unpad = te.Fp8Unpadding(experts)

    def route(self, x):
        """(token index per routed row, its weight, tokens per expert),
        the rows sorted by expert."""
        probs = F.softmax(self.router(x).float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        expert = chosen.flatten()
        order = expert.argsort(stable=True)
        token = torch.arange(x.shape[0], device=x.device)
        token = token.repeat_interleave(self.top_k)[order]
        counts = torch.bincount(expert, minlength=self.experts)
        return token, weights.flatten()[order], counts.tolist()

    def routing(self, x):
        """TE's routing tensors: (routing_map bool [tokens, experts],
        probs [tokens, experts] float32, zero where not routed, tokens
        per expert)."""
        probs = F.softmax(self.router(x).float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        dense = torch.zeros_like(probs).scatter(1, chosen, weights)
        routing_map = torch.zeros_like(probs, dtype=torch.bool).scatter(
            1, chosen, True)
        return routing_map, dense, routing_map.sum(0).tolist()

    def forward(self, x, experts_fn=None):
        if experts_fn is not None:
            # The PyTorch twin: its own permutation, by indexing.
            token, weight, splits = self.route(x)
            y = experts_fn(x[token], splits)
            return torch.zeros_like(x).index_add(0, token, y * weight[:, None])
        routing_map, probs, splits = self.routing(x)
        permuted, row_map = te.moe_permute(x, routing_map,
                                           num_out_tokens=sum(splits))
        padded, padded_splits = self.pad(permuted, splits)
        h = F.gelu(self.fc1(padded, padded_splits), approximate="tanh")
        y = self.unpad(self.fc2(h, padded_splits), splits)
        return te.moe_unpermute(y, row_map, merging_probs=probs,
                                restore_shape=x.shape)

    def reference_experts(self, rows, splits):
        """The experts in plain PyTorch bf16, over the same parameters."""
        parts = []
        for i, part in enumerate(rows.split(splits)):
            w1, b1 = getattr(self.fc1, f"weight{i}"), getattr(self.fc1,
                                                               f"bias{i}")
            w2, b2 = getattr(self.fc2, f"weight{i}"), getattr(self.fc2,
                                                               f"bias{i}")
            h = F.gelu(F.linear(part, w1, b1), approximate="tanh")
            parts.append(F.linear(h, w2, b2))
        return torch.cat(parts)


def relative(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--ffn", type=int, default=4096)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--recipe",
                        choices=["delayed", "current", "block", "none"],
                        default="delayed")
    parser.add_argument("--main-grads", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    torch.manual_seed(0)
    model = MoeExperts(args.hidden, args.ffn, args.experts, args.top_k,
                       args.main_grads)
    expert_weights = [p for name, p in model.named_parameters()
                      if name.split(".")[-1].startswith("weight")
                      and not name.startswith("router")]
    if args.main_grads:
        for p in expert_weights:
            p.main_grad = torch.zeros_like(p, dtype=torch.float32)
    fp8_recipe = {"delayed": lambda: recipe.DelayedScaling(
                      fp8_format=recipe.Format.HYBRID, amax_history_len=16,
                      amax_compute_algo="max"),
                  "current": lambda: recipe.Float8CurrentScaling(),
                  # DeepSeek-V3's recipe (TE's defaults).
                  "block": lambda: recipe.Float8BlockScaling(),
                  "none": lambda: None}[args.recipe]()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    worst = 0.0
    for step in range(args.steps):
        x = torch.randn(args.tokens, args.hidden, device="cuda",
                        dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn_like(x)
        with te.fp8_autocast(enabled=fp8_recipe is not None,
                             fp8_recipe=fp8_recipe):
            y = model(x)
        y.backward(dy)
        dx = x.grad
        x.grad = None
        # The same step in plain PyTorch (its gradients discarded).
        y_ref = model(x, experts_fn=model.reference_experts)
        (dx_ref,) = torch.autograd.grad(y_ref, x, dy)
        errors = (relative(y, y_ref), relative(dx, dx_ref))
        worst = max(worst, *errors)
        moved = ""
        if args.main_grads:
            moved = ", main_grad norms " + " ".join(
                f"{p.main_grad.norm():.3g}" for p in expert_weights[:2])
        print(f"step {step}: output rel L2 {errors[0]:.4f}, input grad "
              f"{errors[1]:.4f}{moved}")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    bound = 0.1 if fp8_recipe is not None else 0.02
    print(f"worst relative L2 {worst:.4f} (bound {bound})")
    return 0 if worst < bound else 1


if __name__ == "__main__":
    sys.exit(main())
