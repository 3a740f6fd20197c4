#!/usr/bin/env python3
"""FP8 training tracks bf16 training: the same small model, from the same
initial weights and on the same data, trained 300 steps once under
fp8_autocast(DelayedScaling(HYBRID)) and once in bf16.

Model: two residual blocks, each x + LayerNormMLP(x) (256 -> 1024 ->
256, gelu) then x + Linear(gelu(LayerNormLinear(x))) (256 -> 1024 -> 256),
then a Linear head; bf16 parameters, AdamW (lr 1e-3). Data: 512 fresh
tokens per step, x ~ N(0, 1), regressed (MSE) onto a fixed random teacher
y = tanh(2 x A) B scaled to unit variance: a nonlinear target the model
cannot fit in 300 steps, so the loss stays well above FP8's own noise and
the comparison measures training, not rounding.

Prints both loss curves (the mean of each 25-step window) and asserts:
- the final loss (mean of the last 25 steps) of FP8 within 10% of bf16's;
- after step 50, every window's relative gap |fp8 - bf16| / bf16 below
  20% (windows, not single steps: each step's loss has sampling noise of
  a few percent, shared by both runs but not exactly).

Run on the GPU machine: python3 tests/gpu/train_curve.py [--steps N]
Prints "1 passed, 0 failed" or the reverse; exits 1 on failure.
"""
import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

HIDDEN, FFN, TOKENS = 256, 1024, 512
TEACHER_WIDTH = 1024
WINDOW = 25
FINAL_BOUND = 0.10
GAP_BOUND = 0.20
GAP_FROM_STEP = 50
BF16 = torch.bfloat16


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = te.LayerNormMLP(HIDDEN, FFN, params_dtype=BF16)
        self.fc = te.LayerNormLinear(HIDDEN, FFN, params_dtype=BF16)
        self.proj = te.Linear(FFN, HIDDEN, params_dtype=BF16)

    def forward(self, x):
        x = x + self.mlp(x)
        return x + self.proj(F.gelu(self.fc(x)))


def make_model():
    torch.manual_seed(0)  # the same initial weights for both runs
    return torch.nn.Sequential(Block(), Block(),
                               te.Linear(HIDDEN, HIDDEN, params_dtype=BF16))


class Teacher:
    """y = tanh(2 x A) B, scaled to unit variance; fixed weights."""

    def __init__(self):
        g = torch.Generator(device="cuda").manual_seed(7)
        self.a = torch.randn(HIDDEN, TEACHER_WIDTH, device="cuda",
                             generator=g) / math.sqrt(HIDDEN)
        self.b = torch.randn(TEACHER_WIDTH, HIDDEN, device="cuda",
                             generator=g) / math.sqrt(TEACHER_WIDTH)
        probe = torch.randn(8192, HIDDEN, device="cuda", generator=g)
        self.scale = 1.0 / self._raw(probe).std().item()

    def _raw(self, x):
        return torch.tanh(2.0 * x @ self.a) @ self.b

    def __call__(self, x):
        return self._raw(x) * self.scale


def train(fp8, steps, teacher):
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator(device="cuda").manual_seed(11)  # same batches
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID)
    losses = []
    for _ in range(steps):
        x = torch.randn(TOKENS, HIDDEN, device="cuda", generator=data)
        y = teacher(x)
        with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
            out = model(x.to(BF16))
        loss = F.mse_loss(out.float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def windows(losses):
    return [sum(losses[i:i + WINDOW]) / len(losses[i:i + WINDOW])
            for i in range(0, len(losses), WINDOW)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    teacher = Teacher()
    curves = {"bf16": windows(train(False, args.steps, teacher)),
              "fp8": windows(train(True, args.steps, teacher))}
    print(f"{'steps':>9}  {'bf16':>8}  {'fp8':>8}  {'gap':>6}")
    gaps = []
    for index, (b, f) in enumerate(zip(curves["bf16"], curves["fp8"])):
        first = index * WINDOW
        gap = abs(f - b) / b
        if first >= GAP_FROM_STEP:
            gaps.append(gap)
        print(f"{first:4}-{min(first + WINDOW, args.steps) - 1:<4}  {b:8.4f}  "
              f"{f:8.4f}  {gap:6.1%}")
    final_gap = abs(curves["fp8"][-1] - curves["bf16"][-1]) / \
        curves["bf16"][-1]
    max_gap = max(gaps, default=0.0)
    learned = curves["bf16"][-1] < 0.8 * curves["bf16"][0]
    print(f"final gap {final_gap:.1%} (bound {FINAL_BOUND:.0%}), max window "
          f"gap after step {GAP_FROM_STEP} {max_gap:.1%} (bound "
          f"{GAP_BOUND:.0%}), bf16 loss {curves['bf16'][0]:.4f} -> "
          f"{curves['bf16'][-1]:.4f}")
    ok = final_gap < FINAL_BOUND and max_gap < GAP_BOUND and learned
    if not learned:
        print("FAIL: bf16 did not learn (loss fell less than 20%)")
    print(f"\n{int(ok)} passed, {int(not ok)} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
