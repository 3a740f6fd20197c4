#!/usr/bin/env python3
"""TE's operation fuser in tejit (tejit.pytorch.ops.Sequential) against
the module it spells out (te.LayerNormMLP) and PyTorch peers, on one GPU,
in one process: one training step (forward, then the backward of a fixed
random output gradient) of the quickstart MLP.

    python3 benchmarks/gpu/bench_fusible_ops.py [--small] [--rows KEY ...]
        [--rounds 3] [--hold 0.5] [--iters 10] [--json OUT]
    (the library path as for the other benchmarks: source
    tools/scripts/gpu-env.sh)

Shape: hidden 4096, FFN 16384, 8192 tokens ([2048, 4, 4096]), bf16
parameters with biases, GELU (tanh); --small: 1024 / 4096 / 2048 tokens.

Rows (the speed-ups are of the first row):
  ops-fp8       te.ops.Sequential(LayerNorm, Linear, GELU, Linear) under
                DelayedScaling(HYBRID, history 1024, max)
  mlp-fp8       te.LayerNormMLP, the same recipe
  ops-bf16      the Sequential without a recipe
  torch-bf16    PyTorch eager (torch_peers.LayerNormMLPBlock)
  compile-bf16  torch.compile of it
  compile-fp8   torch.compile with torch_peers.Fp8Linear (torch._scaled_mm,
                tensorwise current scaling)

Measured as bench_moe_layer.py does (bench_sustained.py's interleaved
rounds, the median over rounds). Before timing, each row's output and
input gradient are compared with torch-bf16's on the same parameters
(relative L2; FP8 rows within 0.1, after two warm-up steps), so the rows
compute the same block.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))

import torch  # noqa: E402

import peer_rows  # noqa: E402
import tejit.pytorch as te  # noqa: E402
import torch_peers  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
SIZES = {"full": {"hidden": 4096, "ffn": 16384, "seq": 2048, "batch": 4},
         "small": {"hidden": 1024, "ffn": 4096, "seq": 512, "batch": 4}}
ROWS = {
    "ops-fp8": "tejit te.ops.Sequential FP8 DelayedScaling",
    "mlp-fp8": "tejit te.LayerNormMLP FP8 DelayedScaling",
    "ops-bf16": "tejit te.ops.Sequential bf16",
    "torch-bf16": "torch eager bf16",
    "compile-bf16": "torch.compile bf16",
    "compile-fp8": "torch.compile FP8 (_scaled_mm tensorwise)",
}
FP8_BOUND = 0.1


def copy_into(module, reference):
    """The reference block's parameters into `module` (a te.ops chain, a
    te.LayerNormMLP or a torch peer), by position."""
    ref = [reference.norm.weight, reference.norm.bias, reference.fc1.weight,
           reference.fc1.bias, reference.fc2.weight, reference.fc2.bias]
    if isinstance(module, te.LayerNormMLP):
        ours = [module.layer_norm_weight, module.layer_norm_bias,
                module.fc1_weight, module.fc1_bias, module.fc2_weight,
                module.fc2_bias]
    elif isinstance(module, te.ops.Sequential):
        ours = [module[0].weight, module[0].bias, module[1].weight,
                module[1].bias, module[3].weight, module[3].bias]
    else:
        ours = [module.norm.weight, module.norm.bias, module.fc1.weight,
                module.fc1.bias, module.fc2.weight, module.fc2.bias]
    with torch.no_grad():
        for mine, theirs in zip(ours, ref):
            mine.copy_(theirs)


def build(key, size, reference):
    """(step(x, dy) -> (output, input gradient), what it keeps)."""
    hidden, ffn = size["hidden"], size["ffn"]
    if key in ("ops-fp8", "mlp-fp8", "ops-bf16"):
        if key.startswith("ops"):
            module = te.ops.Sequential(
                te.ops.LayerNorm(hidden, dtype=BF16),
                te.ops.Linear(hidden, ffn, dtype=BF16), te.ops.GELU(),
                te.ops.Linear(ffn, hidden, dtype=BF16))
        else:
            module = te.LayerNormMLP(hidden, ffn, params_dtype=BF16)
        copy_into(module, reference)
        fp8 = key.endswith("fp8")
        fp8_recipe = recipe.DelayedScaling(
            fp8_format=recipe.Format.HYBRID, amax_history_len=1024,
            amax_compute_algo="max") if fp8 else None

        def run(x):
            with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
                return module(x)
        return run, module
    module = torch_peers.make_block("LayerNormMLP", (hidden, ffn),
                                    fp8=key == "compile-fp8")
    copy_into(module, reference)
    run = torch.compile(module) if key.startswith("compile") else module
    return run, module


def training_step(run, x, dy):
    x = x.detach().requires_grad_()
    out = run(x)
    out.backward(dy)
    return out, x.grad


def main():
    args, size = peer_rows.parse(__doc__, ROWS, SIZES)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"size {size}", flush=True)
    x = torch.randn(size["seq"], size["batch"], size["hidden"], device="cuda",
                    dtype=BF16)
    dy = torch.randn_like(x)
    reference = torch_peers.make_block("LayerNormMLP",
                                       (size["hidden"], size["ffn"]))
    with torch.no_grad():
        for parameter in reference.parameters():
            matrix = parameter.dim() > 1
            parameter.normal_(0.0 if matrix else 0.5, 0.02 if matrix else 0.1)
    want = training_step(reference, x, dy)
    rows = []
    for key in args.rows:
        run, keep = build(key, size, reference)
        rows.append(peer_rows.checked_row(
            key, ROWS[key], lambda run=run: training_step(run, x, dy), keep,
            want, FP8_BOUND if "fp8" in key else 2e-2))
    tokens = size["seq"] * size["batch"]
    peer_rows.time_and_report(rows, 12 * tokens * size["hidden"] * size["ffn"],
                              args, {"size": size})


if __name__ == "__main__":
    main()
