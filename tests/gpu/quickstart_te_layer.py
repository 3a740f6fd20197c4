#!/usr/bin/env python3
"""Transformer Engine's quickstart with te.TransformerLayer, written as TE
code, on tejit. Only the two import lines marked below differ from TE's.

1. The quickstart as TE writes it: `te.TransformerLayer(hidden_size,
   ffn_hidden_size, num_attention_heads)` (TE's defaults: hidden and
   attention dropout 0.1, causal mask), moved to bf16, one training step
   under fp8_autocast(DelayedScaling(HYBRID, amax_history_len=16,
   amax_compute_algo="max")) with `y = te_transformer(x,
   attention_mask=None)` and `y.backward(dy)`: the output and the input
   gradient must be finite.
2. The same layer (its state_dict) with hidden_dropout=0 and
   attention_dropout=0, so that steps compare: three FP8 steps (the first
   two set the delayed scales) against one bf16 step (FP8 disabled) on the
   same weights, input and output gradient. Relative L2 of the output
   below 0.125 and of the input gradient below 0.25 (TE's E4M3 / E5M2
   rtol, as tests/gpu/quickstart_te.py); also printed for the layer's own
   contribution (output - input, d_input - d_output). Then both are timed.

Sizes: hidden 1024, ffn 4096, 16 heads, seq 512, batch 4; --full: 4096,
16384, 32, 2048, 4 (the quickstart's). Run on the GPU machine:
    PYTHONPATH=python python3 tests/gpu/quickstart_te_layer.py [--full]
Exits 1 when a check fails.
"""
import argparse
import sys
import time

import torch

# The two tejit-specific lines; TE's quickstart has
# `import transformer_engine.pytorch as te` and
# `from transformer_engine.common import recipe`.
import tejit.pytorch as te
from tejit.common import recipe


def rel_l2(got, want):
    return ((got - want).norm() / want.norm()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true",
                        help="the quickstart's size (4096/16384/32/2048/4)")
    args = parser.parse_args()
    if args.full:
        hidden_size, ffn_hidden_size, num_attention_heads = 4096, 16384, 32
        sequence_length, batch_size = 2048, 4
    else:
        hidden_size, ffn_hidden_size, num_attention_heads = 1024, 4096, 16
        sequence_length, batch_size = 512, 4
    dtype = torch.bfloat16

    # --- TE's quickstart, as written for TE -----------------------------
    torch.manual_seed(1234)
    te_transformer = te.TransformerLayer(hidden_size, ffn_hidden_size,
                                         num_attention_heads)
    te_transformer.to(dtype=dtype).cuda()

    x = torch.rand(sequence_length, batch_size, hidden_size).cuda().to(
        dtype=dtype)
    dy = torch.rand(sequence_length, batch_size, hidden_size).cuda().to(
        dtype=dtype)

    fp8_format = recipe.Format.HYBRID
    fp8_recipe = recipe.DelayedScaling(fp8_format=fp8_format,
                                       amax_history_len=16,
                                       amax_compute_algo="max")
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
        y = te_transformer(x, attention_mask=None)
    y.backward(dy)
    # ---------------------------------------------------------------------

    failures = []
    grads_finite = all(torch.isfinite(p.grad).all()
                       for p in te_transformer.parameters())
    print(f"quickstart layer (dropout 0.1/0.1), FP8 step: output finite "
          f"{bool(torch.isfinite(y).all())}, parameter gradients finite "
          f"{bool(grads_finite)}")
    if not torch.isfinite(y).all() or not grads_finite:
        failures.append("the quickstart step is not finite")

    # --- the same layer without dropout: FP8 against bf16 ----------------
    layer = te.TransformerLayer(hidden_size, ffn_hidden_size,
                                num_attention_heads, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=dtype)
    layer.load_state_dict(te_transformer.state_dict())
    x = x.clone().requires_grad_()

    def step(fp8):
        x.grad = None
        layer.zero_grad(set_to_none=True)
        with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
            out = layer(x, attention_mask=None)
        out.backward(dy)
        return out.detach().float(), x.grad.detach().float()

    for _ in range(3):
        y8, dx8 = step(fp8=True)
    y16, dx16 = step(fp8=False)
    x32, dy32 = x.detach().float(), dy.float()
    errors = {
        "output": rel_l2(y8, y16),
        "input grad": rel_l2(dx8, dx16),
        "output - input": rel_l2(y8 - x32, y16 - x32),
        "input grad - output grad": rel_l2(dx8 - dy32, dx16 - dy32),
    }
    print(f"hidden {hidden_size}, ffn {ffn_hidden_size}, heads "
          f"{num_attention_heads}, seq {sequence_length}, batch "
          f"{batch_size}: te.TransformerLayer FP8 (step 3) vs bf16, "
          f"relative L2:")
    for name, value in errors.items():
        print(f"  {name:26} {value:.4f}")
    if not (errors["output"] < 0.125 and errors["input grad"] < 0.25):
        failures.append("bound exceeded (output < 0.125, input grad < 0.25)")

    for fp8 in (False, True):
        for _ in range(3):
            step(fp8)
        torch.cuda.synchronize()
        start, iterations = time.perf_counter(), 10
        for _ in range(iterations):
            step(fp8)
        torch.cuda.synchronize()
        milliseconds = (time.perf_counter() - start) * 1e3 / iterations
        print(f"  {'FP8' if fp8 else 'bf16':4} forward+backward "
              f"{milliseconds:.2f} ms")

    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
