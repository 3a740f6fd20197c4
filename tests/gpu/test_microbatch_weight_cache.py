"""GPU tests of TE's FP8 weight caching across micro-batches in training
(`is_first_microbatch`): a forward with True casts the weights into memory
the program keeps, forwards with False reuse those casts (skipping the cast
kernels) with the scale_inv they were made with, and record no weight amax
(TE's rule); every backward reads the latest casts.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_microbatch_weight_cache.py

The layer is a small TransformerLayer under DelayedScaling with
`most_recent` amaxes (a weight's scale follows its latest amax; history
length 3) and under Float8CurrentScaling. Each case shrinks the weights by 4 right before the
first micro-batch, so the scales the first forward's update computes are
4x those it cast with: a reused cast paired with the new scale_inv instead
of its own would be 4x off. References:
- the first micro-batch with True is the same computation as without
  caching: bit for bit equal to an independent copy (copy.deepcopy, fresh
  programs) run with None;
- later micro-batches (False) cast nothing (skipped steps) and agree with
  the copy, which casts every time, within FP8 noise (relative L2 0.1;
  a mispaired scale is off by 0.75);
- under DelayedScaling a forward with False records amax 0 for the four
  weights, whose history columns then stay as they were (no roll), and
  their scales stay, while every other slot moves on;
- a weight change followed by True casts again;
- two forwards with True before their backwards: both backwards use the
  second cast and its scale_inv, still within FP8 noise of the copy's;
- te.checkpoint around micro-batches with True, then False: bit for bit
  the plain run.
"""
import copy

import pytest

from gpu_test_support import perturb, run_seed, torch

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_microbatch_weight_cache")
BF16 = torch.bfloat16
RECIPES = {
    "delayed": lambda: recipe.DelayedScaling(
        fp8_format=recipe.Format.HYBRID, amax_history_len=3,
        amax_compute_algo="most_recent"),
    "current": lambda: recipe.Float8CurrentScaling(
        fp8_format=recipe.Format.HYBRID),
}
WEIGHTS = 4  # QKV, projection, fc1, fc2


@pytest.fixture(autouse=True)
def fresh_seed():
    torch.manual_seed(SEED)


def make_layer(fp8_recipe):
    """A small TransformerLayer after two FP8 training steps (scales set),
    then its GEMM weights shrunk by 4."""
    layer = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    perturb(layer)
    for _ in range(2):
        step(layer, torch.randn(64, 2, 256, device="cuda", dtype=BF16),
             fp8_recipe)
    layer.zero_grad(set_to_none=True)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if p.dim() == 2:
                p.mul_(0.25)
    return layer


def step(layer, x, fp8_recipe, **kwargs):
    """Forward and backward of one micro-batch: (output, input grad)."""
    x = x.clone().requires_grad_()
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
        y = layer(x, **kwargs)
    y.backward(torch.ones_like(y) / y.numel() ** 0.5 + 0.01 * y.detach())
    return y.detach(), x.grad


def training_program(layer):
    programs = [c for c in layer._programs.values() if c.training]
    assert len(programs) == 1, "one training program expected"
    return programs[0]


def relative_l2(got, want):
    return ((got.float() - want.float()).norm()
            / want.float().norm()).item()


def grads(layer):
    return {name: p.grad.clone() for name, p in layer.named_parameters()
            if p.grad is not None}


@pytest.mark.parametrize("name", list(RECIPES))
def test_microbatches_reuse_the_first_casts(name):
    fp8_recipe = RECIPES[name]()
    layer = make_layer(fp8_recipe)
    twin = copy.deepcopy(layer)
    inputs = [torch.randn(64, 2, 256, device="cuda", dtype=BF16)
              for _ in range(3)]
    compiled = training_program(layer)
    history = None
    for index, x in enumerate(inputs):
        first = index == 0
        y, dx = step(layer, x, fp8_recipe, is_first_microbatch=first)
        skipped = compiled.program.skipped_steps
        y_ref, dx_ref = step(twin, x, fp8_recipe)
        if first:
            assert skipped == 0
            assert torch.equal(y, y_ref)
            assert torch.equal(dx, dx_ref)
            assert compiled.program.weight_cast_cache_bytes > 0
        else:
            assert skipped >= WEIGHTS, skipped
            assert relative_l2(y, y_ref) < 0.1, relative_l2(y, y_ref)
            assert relative_l2(dx, dx_ref) < 0.1, relative_l2(dx, dx_ref)
        if name == "delayed":
            # A slot whose amax is 0 keeps its history (no roll): the
            # weights' after a forward with False.
            before = history
            history = compiled.read_meta("fp8_meta.fwd.amax_history")
            if not first:
                kept = (history == before).all(dim=0)
                assert int(kept.sum()) == WEIGHTS, (before, history)
    # Accumulated over the three micro-batches.
    got, want = grads(layer), grads(twin)
    assert got.keys() == want.keys()
    for key in want:
        error = relative_l2(got[key], want[key])
        assert error < 0.1, f"{key}: {error}"


def test_skipped_weights_keep_their_scales():
    fp8_recipe = RECIPES["delayed"]()
    layer = make_layer(fp8_recipe)
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    step(layer, x, fp8_recipe, is_first_microbatch=True)
    compiled = training_program(layer)
    scale = compiled.read_meta("fp8_meta.fwd.scale").clone()
    history = compiled.read_meta("fp8_meta.fwd.amax_history").clone()
    step(layer, 2.0 * torch.randn_like(x), fp8_recipe,
         is_first_microbatch=False)
    skipped = (compiled.read_meta("fp8_meta.fwd.amax_history")
               == history).all(dim=0)
    after = compiled.read_meta("fp8_meta.fwd.scale")
    assert int(skipped.sum()) == WEIGHTS
    assert torch.equal(after[skipped], scale[skipped])
    # The others moved on: the weights' slots are the ones without an amax.
    assert not torch.equal(after[~skipped], scale[~skipped])


def test_true_after_a_weight_change_casts_again():
    fp8_recipe = RECIPES["delayed"]()
    layer = make_layer(fp8_recipe)
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    step(layer, x, fp8_recipe, is_first_microbatch=True)
    step(layer, x, fp8_recipe, is_first_microbatch=False)
    compiled = training_program(layer)
    with torch.no_grad():
        layer.layernorm_mlp.fc1_weight.mul_(-1.0)
    twin = copy.deepcopy(layer)
    y, dx = step(layer, x, fp8_recipe, is_first_microbatch=True)
    assert compiled.program.skipped_steps == 0
    y_ref, dx_ref = step(twin, x, fp8_recipe)
    assert torch.equal(y, y_ref)
    assert torch.equal(dx, dx_ref)


@pytest.mark.parametrize("name", list(RECIPES))
def test_backwards_after_two_casts_read_the_latest(name):
    fp8_recipe = RECIPES[name]()
    layer = make_layer(fp8_recipe)
    twin = copy.deepcopy(layer)
    xs = [torch.randn(64, 2, 256, device="cuda", dtype=BF16).requires_grad_()
          for _ in range(2)]

    def forwards(module, **kwargs):
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            return [module(x, **kwargs) for x in xs]

    ys = forwards(layer, is_first_microbatch=True)
    dxs = torch.autograd.grad([y.float().square().mean() for y in ys], xs)
    ys_ref = forwards(twin)
    dxs_ref = torch.autograd.grad(
        [y.float().square().mean() for y in ys_ref], xs)
    assert torch.equal(ys[0], ys_ref[0])
    for got, want in zip(dxs, dxs_ref):
        assert relative_l2(got, want) < 0.1, relative_l2(got, want)


def test_checkpointed_microbatches_equal_plain():
    """te.checkpoint with is_first_microbatch (Megatron's activation
    recomputation with gradient accumulation): the recomputation keeps or
    reuses the casts as the first forward did, so two micro-batches give
    the plain run's outputs and gradients bit for bit."""
    fp8_recipe = RECIPES["delayed"]()
    layer = make_layer(fp8_recipe)
    twin = copy.deepcopy(layer)
    inputs = [torch.randn(64, 2, 256, device="cuda", dtype=BF16)
              for _ in range(2)]

    def run(module, checkpointed):
        results = []
        for index, x in enumerate(inputs):
            x = x.clone().requires_grad_()
            kwargs = {"is_first_microbatch": index == 0}
            with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
                y = (te.checkpoint(module, x, **kwargs) if checkpointed
                     else module(x, **kwargs))
            y.backward(torch.ones_like(y))
            # Both runs reuse the casts (the deep copy's Q, K and V
            # weights are one buffer again, the same tensor every call).
            if index > 0:
                assert training_program(module).program.skipped_steps \
                    >= WEIGHTS
            results += [y.detach(), x.grad]
        return results + [p.grad for p in module.parameters()]

    for got, want in zip(run(layer, True), run(twin, False)):
        assert torch.equal(got, want)
