#!/usr/bin/env python3
"""A mixture-of-experts layer's expert path as Megatron-LM runs it on TE,
through tejit, against PyTorch peers, on one GPU, in one process: the
routed tokens permuted by expert (te.moe_permute), the experts' SwiGLU
MLPs (two GroupedLinears, Fp8Padding / Fp8Unpadding under FP8), and the
outputs weighted by their routing probabilities and summed back per token
(te.moe_unpermute with merging_probs); one training step is the forward
and the backward of a fixed random output gradient.

    python3 benchmarks/gpu/bench_moe_layer.py [--small] [--rows KEY ...]
        [--rounds 3] [--hold 0.5] [--iters 10] [--json OUT]
    (the library path as for the other benchmarks: source
    tools/scripts/gpu-env.sh)

Shape: Mixtral 8x7B's experts, 8 experts, hidden 4096, FFN 14336 (fc1
4096 -> 2 x 14336, SwiGLU, fc2 14336 -> 4096), bf16 parameters, no biases,
8192 tokens routed top-2 by a fixed random router (softmax over the chosen
two); --small: hidden 1024, FFN 2048, 2048 tokens.

Rows (the speed-ups are of the first row):
  tejit-fp8     tejit: te.moe_permute, Fp8Padding, GroupedLinear, SwiGLU,
                GroupedLinear, Fp8Unpadding, te.moe_unpermute, under
                DelayedScaling(HYBRID, history 1024, max)
  tejit-bf16    the same without a recipe (no padding)
  torch-bf16    PyTorch eager, Megatron-LM's unfused permutation
                (masked_select + index_select; scatter_add back), one
                F.linear per expert
  compile-bf16  torch.compile of torch-bf16's layer
  compile-fp8   torch.compile of the layer with torch_peers.Fp8Linear per
                expert (torch._scaled_mm, tensorwise current scaling)

Measuring as bench_grouped_linear.py does (bench_sustained.py's
interleaved rounds: each row held in its steady state, then timed; the
median over rounds). Before timing, every row's output and input gradient
(after two warm-up steps: DelayedScaling's first casts with scale 1) are
compared with torch-bf16's (relative L2; FP8 rows within 0.1), so the
rows compute the same layer. TFLOP/s count the expert GEMMs: forward,
dgrad and wgrad of fc1 (2 x FFN wide) and fc2, 18 x routed tokens x
hidden x FFN per step.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import peer_rows  # noqa: E402
import tejit.pytorch as te  # noqa: E402
import torch_peers  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
SIZES = {
    "full": {"experts": 8, "top_k": 2, "hidden": 4096, "ffn": 14336,
             "tokens": 8192},
    "small": {"experts": 8, "top_k": 2, "hidden": 1024, "ffn": 2048,
              "tokens": 2048},
}
ROWS = {
    "tejit-fp8": "tejit FP8 DelayedScaling (permute, GroupedLinear x2, "
                 "unpermute)",
    "tejit-bf16": "tejit bf16",
    "torch-bf16": "torch eager bf16 (unfused permutation, F.linear per "
                  "expert)",
    "compile-bf16": "torch.compile bf16",
    "compile-fp8": "torch.compile FP8 (_scaled_mm tensorwise per expert)",
}
FP8_BOUND = 0.1


def routing(size, seed=1234):
    """(routing_map bool [T, E], probs [T, E] float32 zero off the map,
    tokens per expert): a fixed top-k draw."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(size["tokens"], size["experts"], device="cuda",
                         generator=generator)
    top, chosen = logits.topk(size["top_k"], dim=-1)
    probs = torch.zeros_like(logits).scatter_(1, chosen,
                                              F.softmax(top, dim=-1))
    routing_map = probs > 0
    return routing_map, probs, routing_map.sum(0).tolist()


def swiglu(h):
    a, b = h.chunk(2, dim=-1)
    return F.silu(a) * b


class TejitExperts(torch.nn.Module):
    def __init__(self, size, fp8):
        super().__init__()
        e, hidden, ffn = size["experts"], size["hidden"], size["ffn"]
        self.fc1 = te.GroupedLinear(e, hidden, 2 * ffn, bias=False,
                                    params_dtype=BF16)
        self.fc2 = te.GroupedLinear(e, ffn, hidden, bias=False,
                                    params_dtype=BF16)
        self.fp8 = fp8
        self.pad, self.unpad = te.Fp8Padding(e), te.Fp8Unpadding(e)

    def forward(self, x, routing_map, probs, splits):
        permuted, row_map = te.moe_permute(
            x, routing_map, num_out_tokens=sum(splits))
        padded, padded_splits = (self.pad(permuted, splits) if self.fp8
                                 else (permuted, splits))
        h = swiglu(self.fc1(padded, padded_splits))
        y = self.fc2(h, padded_splits)
        if self.fp8:
            y = self.unpad(y, splits)
        return te.moe_unpermute(y, row_map, merging_probs=probs,
                                restore_shape=x.shape)


class TorchExperts(torch.nn.Module):
    """Megatron-LM's unfused path: permute by a masked_select of token
    indices, one linear per expert, unpermute by scatter_add of the
    probability-weighted rows."""

    def __init__(self, size, linear=torch.nn.Linear):
        super().__init__()
        # torch._scaled_mm needs every dimension a multiple of 16: each
        # expert's rows padded with zeros (Megatron-LM's Fp8Padding).
        self.pad = linear is not torch.nn.Linear
        e, hidden, ffn = size["experts"], size["hidden"], size["ffn"]
        self.fc1 = torch.nn.ModuleList(
            linear(hidden, 2 * ffn, bias=False, device="cuda", dtype=BF16)
            for _ in range(e))
        self.fc2 = torch.nn.ModuleList(
            linear(ffn, hidden, bias=False, device="cuda", dtype=BF16)
            for _ in range(e))

    def forward(self, x, routing_map, probs, splits):
        tokens = x.shape[0]
        by_expert = routing_map.t()
        token_index = torch.arange(tokens, device=x.device).expand(
            by_expert.shape[0], -1).masked_select(by_expert)
        permuted = x.index_select(0, token_index)
        outputs = []
        for part, fc1, fc2 in zip(permuted.split(splits), self.fc1,
                                  self.fc2):
            rows = part.shape[0]
            if self.pad:
                part = F.pad(part, (0, 0, 0, -rows % 16))
            outputs.append(fc2(swiglu(fc1(part)))[:rows])
        y = torch.cat(outputs)
        weights = probs.t().masked_select(by_expert).to(y.dtype)
        y = y * weights.unsqueeze(-1)
        out = torch.zeros_like(x)
        return out.index_add(0, token_index, y)


def copy_weights(tejit_module, torch_module):
    """The torch peer's experts take the tejit module's weights."""
    with torch.no_grad():
        for index in range(len(torch_module.fc1)):
            torch_module.fc1[index].weight.copy_(
                getattr(tejit_module.fc1, f"weight{index}"))
            torch_module.fc2[index].weight.copy_(
                getattr(tejit_module.fc2, f"weight{index}"))


def build(key, size, reference):
    """(step(x, dy) -> (output, input gradient), what it keeps)."""
    if key.startswith("tejit"):
        fp8 = key == "tejit-fp8"
        module = TejitExperts(size, fp8)
        with torch.no_grad():
            for name, parameter in module.named_parameters():
                parameter.copy_(reference.state_dict()[name])
        fp8_recipe = recipe.DelayedScaling(
            fp8_format=recipe.Format.HYBRID, amax_history_len=1024,
            amax_compute_algo="max") if fp8 else None

        def run(*args):
            with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
                return module(*args)
        return run, module
    linear = torch_peers.Fp8Linear if key == "compile-fp8" else \
        torch.nn.Linear
    module = TorchExperts(size, linear)
    copy_weights(reference, module)
    run = torch.compile(module) if key.startswith("compile") else module
    return run, module


def training_step(run, x, dy, routing_map, probs, splits):
    x = x.detach().requires_grad_()
    out = run(x, routing_map, probs, splits)
    out.backward(dy)
    return out, x.grad


def main():
    args, size = peer_rows.parse(__doc__, ROWS, SIZES)
    routing_map, probs, splits = routing(size)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"size {size}, tokens per expert {splits}", flush=True)
    x = torch.randn(size["tokens"], size["hidden"], device="cuda",
                    dtype=BF16)
    dy = torch.randn_like(x)
    reference = TejitExperts(size, fp8=False)  # the shared weights
    for parameter in reference.parameters():
        torch.nn.init.normal_(parameter, std=0.02)
    torch_run, torch_module = build("torch-bf16", size, reference)
    want = training_step(torch_run, x, dy, routing_map, probs, splits)
    rows = []
    for key in args.rows:
        run, keep = build(key, size, reference)
        rows.append(peer_rows.checked_row(
            key, ROWS[key],
            lambda run=run: training_step(run, x, dy, routing_map, probs,
                                          splits),
            keep, want, FP8_BOUND if "fp8" in key else 2e-2))
    routed = size["tokens"] * size["top_k"]
    peer_rows.time_and_report(
        rows, 6 * routed * size["hidden"] * size["ffn"] * 3, args,
        {"size": size, "splits": splits})


if __name__ == "__main__":
    main()
