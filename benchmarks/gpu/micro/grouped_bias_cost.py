#!/usr/bin/env python3
"""What GroupedLinear's bias costs a training step under each FP8 recipe
(docs/grouped-linear.md): Mixtral's expert up-projection (8 x 4096 ->
14336, 16384 routed tokens, bf16 parameters), with and without bias, in
one process. Under Float8BlockScaling the runtime writes each group's
bias rows into the output before its GEMM (cuBLASLt's block-scaled GEMMs
take no bias epilogue), DelayedScaling adds it in the GEMM's epilogue.

    python3 benchmarks/gpu/micro/grouped_bias_cost.py [--iters 20]
        [--experts 8 --hidden 4096 --ffn 14336 --tokens 16384]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))

import torch  # noqa: E402

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402


def step_ms(module, x, dy, splits, fp8_recipe, iters):
    def step():
        x.grad = None
        for p in module.parameters():
            p.grad = None
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            y = module(x, splits)
        y.backward(dy)
    for _ in range(3):
        step()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--tokens", type=int, default=16384)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    g, h, f, t = args.experts, args.hidden, args.ffn, args.tokens
    # Equal splits, multiples of 128.
    splits = [t // g // 128 * 128] * g
    splits[-1] += t - sum(splits)
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    dy = torch.randn(t, f, device="cuda", dtype=torch.bfloat16)
    recipes = {"DelayedScaling": lambda: recipe.DelayedScaling(
                   fp8_format=recipe.Format.HYBRID),
               "Float8BlockScaling": recipe.Float8BlockScaling}
    print(f"{torch.cuda.get_device_name()}: {g} x {h} -> {f}, {t} tokens, "
          f"{args.iters} steps")
    for name, make in recipes.items():
        times = {}
        for bias in (False, True):
            torch.manual_seed(0)
            module = te.GroupedLinear(g, h, f, bias=bias,
                                      params_dtype=torch.bfloat16)
            times[bias] = step_ms(module, x, dy, splits, make(), args.iters)
            del module
        print(f"{name}: {times[False]:.3f} ms without bias, "
              f"{times[True]:.3f} ms with ({times[True] - times[False]:+.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
