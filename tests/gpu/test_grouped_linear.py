"""GPU tests of tejit.pytorch.GroupedLinear (mixture-of-experts GEMMs;
docs/grouped-linear.md), Fp8Padding and Fp8Unpadding.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_grouped_linear.py
    (-k "not full_size" leaves out the G=8, 4096 -> 2048, 16384-token
    cases)

Every training step (forward, backward of a random output gradient) is
checked against a float64 reference computed per segment from the same
parameters: y_g = x_g W_g^T + b_g, dx_g = dy_g W_g, dW_g = dy_g^T x_g, db_g
= column sums of dy_g (zeros for an empty expert). Under an FP8 recipe the
reference multiplies what tejit's FP8 GEMMs multiply: each segment of the
input, each weight and each segment of dy cast with its own group's scale
(run_layer_tests.Fp8Emulator, one tensor name per group and role:
DelayedScaling's per-slot state and its update, or Float8CurrentScaling's
amax of the group), then dequantized. Under Float8BlockScaling each
segment and weight is cast block by block as a tensor of its own (TE's
split quantize), and the backward's GEMMs multiply copies cast transposed:
W^T for dgrad, each segment's x^T and dy^T for wgrad (blocks along the
segment's tokens, counted from its first row). Elementwise comparisons with the
layer suite's tolerances (run_layer_tests.compare and its allowance for
rounding-boundary outliers): TE's bf16 / fp16 ones without a recipe, E4M3
forward and E5M2 (HYBRID) or E4M3 gradients under FP8.

The data's magnitude differs by up to 2^12 between groups (the input's
segments and the weights): one scale for all groups would push the small
ones into FP8's subnormals, which the per-group emulation would not
match. Under DelayedScaling the module's FP8 meta state (state_dict
fp8_meta.*) is checked after every step against the emulator's: forward
scales [G input slots, G weight slots], backward [G gradient slots], with
an empty expert's input and gradient slots left at 1 (nothing recorded).

Cases: no recipe in bf16 and fp16 (splits that are no multiples of 16),
DelayedScaling HYBRID and E4M3 (three steps: the scales update),
Float8CurrentScaling, Float8BlockScaling (TE's default, and HYBRID with
1-D weight blocks and float32 scales); splits with an empty expert, unequal splits, one
GEMM; a token count that is no multiple of 64 (the module pads to one);
the full size (G=8, 4096 -> 2048 per expert, 16384 routed tokens). Then
the state_dict's weight{i}/bias{i} and FP8 meta state (a copy loaded from
it continues bit for bit), m_splits as a list, a tuple, a CPU and a CUDA
tensor, is_first_microbatch, return_bias, a replaced parameter (stacked
per call), 3-D inputs, an input without tokens, program sharing across
token counts, Fp8Padding -> GroupedLinear -> Fp8Unpadding under FP8, and
the refusals (bad m_splits, splits no multiple of 16 under FP8,
Float8BlockScaling with 2-D token blocks).

fuse_wgrad_accumulation (Megatron-LM's main_grads, TE's semantics), no
recipe, DelayedScaling and Float8BlockScaling, two steps each (the sums
accumulate): every weight{i}.main_grad ends at its initial random value + the sum of the
reference's float64 dW_i over the steps (float32 main_grads: the added
part compared per expert, an empty expert's left exactly as it was;
bfloat16 ones as a whole), with the main_grads views of one buffer in
weight order (the program adds into it in place), in reverse order
(Megatron-LM's buffer order: stacked and copied back) and tensors of their
own; output, input and bias gradients against the reference at each step;
weight{i}.grad TE's placeholder with grad_added_to_main_grad set (zeros
with zero_out_wgrad), None without the attribute; a frozen expert (no
main_grad needed); one program per main_grad dtype; the errors naming the
weight.

fp8_model_init (`-k fp8_model_init`; FP8 primary weights, each expert a
Float8Tensor with its own scale, their FP8 data, scale_invs and
transposes packed in one buffer each): steps under DelayedScaling and
Float8CurrentScaling against the float64 reference on the dequantized
FP8 weights (which the program reads without a cast; the meta state has
the G input slots only), small (empty expert, unequal splits) and 8 x
2048 -> 4096 over 8192 tokens with an empty expert; against a twin built
without fp8_model_init holding the dequantized weights (relative L2);
without fp8_autocast bit for bit the twin's bf16 step, inference without
transposes; SGD and AdamW steps updating the experts in place (still
packed; SGD's values within E4M3's precision) with steps against the
reference between them; fuse_wgrad_accumulation (main_grads in expert
order and reversed); state_dict into a fresh module, torch.save /
torch.load(weights_only=True) and deepcopy continuing bit for bit, a
bf16 state_dict quantized into the experts,
preserve_high_precision_init_val; Float8BlockScaling refused.
"""
import copy
import io
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import (hybrid, run_seed, seed_per_test,  # noqa: E402
                              torch)

import run_layer_tests as layers  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed(__file__)
fresh_seed = seed_per_test(SEED)
# The references are float64 math (no TF32 anywhere).
torch.backends.cuda.matmul.allow_tf32 = False

BF16, FP16, F64 = torch.bfloat16, torch.float16, torch.float64
IN, OUT = 192, 320  # the small cases' features (FP8: K % 16, N % 8)
# Relative magnitudes of the groups' input segments and weights (cycled):
# 2^12 apart at most.
X_MAGNITUDES = (1.0, 2.0 ** -8, 2.0 ** 4, 2.0 ** -4)
W_MAGNITUDES = (1.0, 2.0 ** 4, 2.0 ** -4, 0.5)


def delayed_e4m3():
    return recipe.DelayedScaling(fp8_format=recipe.Format.E4M3,
                                 amax_history_len=4,
                                 amax_compute_algo="most_recent")


def current():
    return recipe.Float8CurrentScaling(fp8_format=recipe.Format.HYBRID)


def block():
    """TE's default Float8BlockScaling: E4M3, 1-D x and grad blocks, 2-D
    weight tiles, power-of-2 scales."""
    return recipe.Float8BlockScaling()


def block_hybrid_w1():
    """Float8BlockScaling with HYBRID (E5M2 grads), 1-D weight blocks and
    float32 scales."""
    return recipe.Float8BlockScaling(fp8_format=recipe.Format.HYBRID,
                                     w_block_scaling_dim=1,
                                     use_f32_scales=True)


# name -> (params dtype, recipe factory or None, steps)
RECIPES = {
    "bf16": (BF16, None, 2),
    "fp16": (FP16, None, 2),
    "delayed-hybrid": (BF16, hybrid, 3),
    "delayed-e4m3": (BF16, delayed_e4m3, 3),
    "current": (BF16, current, 2),
    "block": (BF16, block, 2),
    "block-hybrid-w1": (BF16, block_hybrid_w1, 2),
}
FP8_RECIPES = [name for name, (_, factory, _) in RECIPES.items() if factory]
# name -> splits (multiples of 16, so that every recipe takes them).
SPLITS = {
    "unequal": [48, 208, 16, 80],        # 352 tokens: padded to 384
    "empty-expert": [96, 0, 160, 32],
    "one-gemm": [144],
    "all-but-one-empty": [0, 0, 128, 0, 0],
}
# Without a recipe any split is fine.
ODD_SPLITS = [45, 0, 211, 3, 93]


def build(num_gemms, dtype, in_features=IN, out_features=OUT, bias=True,
          spread=True, **kwargs):
    """A GroupedLinear with non-zero biases and, with `spread`, weights
    scaled by W_MAGNITUDES per group."""
    module = te.GroupedLinear(num_gemms, in_features, out_features,
                              bias=bias, params_dtype=dtype, **kwargs)
    with torch.no_grad():
        for g in range(num_gemms):
            if spread:
                getattr(module, f"weight{g}").mul_(
                    W_MAGNITUDES[g % len(W_MAGNITUDES)])
            if bias:
                b = getattr(module, f"bias{g}")
                b.copy_(0.1 * torch.randn_like(b))
    return module


def spread_input(splits, features, dtype, spread=True, lead=None):
    """N(0, 1) tokens, segment g scaled by X_MAGNITUDES (with `spread`),
    shaped `lead` + [features] (default [tokens, features])."""
    x = torch.randn(sum(splits), features, device="cuda")
    if spread:
        scale = torch.cat([torch.full((m,), X_MAGNITUDES[g %
                                                         len(X_MAGNITUDES)])
                           for g, m in enumerate(splits)]).to("cuda")
        x = x * scale[:, None]
    return x.to(dtype).reshape(*(lead or (sum(splits),)), features)


def weight_value(weight):
    """A weight in float64: an FP8 one (fp8_model_init, a Float8Tensor)
    as its raw fields give it, `_data` times `_scale_inv`, exactly (what
    the FP8 GEMMs multiply)."""
    if isinstance(weight, te.Float8Tensor):
        return weight._data.to(F64) * weight._scale_inv.to(F64)
    return weight.detach().to(F64)


def parameters(module):
    """(weights, biases or Nones) of `module` in float64."""
    weights = [weight_value(getattr(module, f"weight{g}"))
               for g in range(module.num_gemms)]
    biases = [None if b is None else b.detach().to(F64)
              for b in module._biases()]
    return weights, biases


class Reference:
    """The float64 reference of one module over steps: `emulator` (an
    run_layer_tests.Fp8Emulator, None without a recipe) keeps the FP8
    state between steps as tejit's does."""

    def __init__(self, fp8_recipe):
        self.emulator = (layers.Fp8Emulator(fp8_recipe.to_spec())
                         if fp8_recipe is not None else None)
        # FP8 weights (fp8_model_init): the GEMMs read them as they are.
        self.fp8_weights = False

    def cast(self, name, value, direction, transpose=False):
        """What an FP8 GEMM multiplies of `value`, dequantized. Under
        Float8BlockScaling each segment (weight) is cast as a tensor of
        its own, and the backward's GEMMs read copies cast transposed
        (`transpose`: blocks along the other dim, block scaling only)."""
        if self.emulator is None or value.shape[0] == 0:
            return value  # an empty segment records nothing
        return self.emulator.quantize(name, value, direction, F64,
                                      transpose=transpose)

    def step(self, module, x, dy, splits, with_bias=True):
        """(y, dx, [dW_g], [db_g] or None) of one training step on `x`
        [tokens, in] with output gradient `dy` [tokens, out]; updates the
        emulated state as tejit's forward and backward do."""
        weights, biases = parameters(module)
        x = x.detach().reshape(-1, weights[0].shape[1]).to(F64)
        dy = dy.detach().reshape(-1, weights[0].shape[0]).to(F64)
        self.fp8_weights = module.primary_weights_in_fp8
        wq = (weights if self.fp8_weights else
              [self.cast(f"gemm{g}.weight", w, "fwd")
               for g, w in enumerate(weights)])
        bounds = [0]
        for m in splits:
            bounds.append(bounds[-1] + m)
        segments = list(zip(bounds[:-1], bounds[1:]))
        xq = [self.cast(f"gemm{g}.input", x[a:b], "fwd")
              for g, (a, b) in enumerate(segments)]
        # What the backward's GEMMs read: under block scaling copies cast
        # transposed (W^T for dgrad, x^T and dy^T for wgrad), else the
        # forward's casts (a second cast would record the state twice).
        block = self.emulator is not None and self.emulator.block
        wq_t = ([self.cast(f"gemm{g}.weight", w, "fwd", transpose=True)
                 for g, w in enumerate(weights)] if block else wq)
        xq_t = ([self.cast(f"gemm{g}.input", x[a:b], "fwd", transpose=True)
                 for g, (a, b) in enumerate(segments)] if block else xq)
        ys = []
        for g, (a, b) in enumerate(segments):
            y = xq[g] @ wq[g].T
            if with_bias and biases[g] is not None:
                y = y + biases[g]
            ys.append(y)
        if self.emulator is not None:
            self.emulator.end_forward()
        dyq = [self.cast(f"gemm{g}.grad_output", dy[a:b], "bwd")
               for g, (a, b) in enumerate(segments)]
        dyq_t = ([self.cast(f"gemm{g}.grad_output", dy[a:b], "bwd",
                            transpose=True)
                  for g, (a, b) in enumerate(segments)] if block else dyq)
        dx = torch.cat([dyq[g] @ wq_t[g] for g in range(len(splits))])
        dws = [dyq_t[g].T @ xq_t[g] for g in range(len(splits))]
        dbs = ([dy[a:b].sum(0) for a, b in segments]
               if biases[0] is not None else None)
        if self.emulator is not None:
            self.emulator.end_backward()
        return torch.cat(ys), dx, dws, dbs

    def expected_scales(self, num_gemms):
        """DelayedScaling: the scales the module's meta state should hold,
        {"fwd": [inputs..., weights...], "bwd": [grads...]}; 1 for slots
        never recorded. FP8 weights (fp8_model_init) have no slots."""
        states = self.emulator.states

        def scale(direction, name):
            state = states[direction].get(name)
            return 1.0 if state is None else state.scale
        groups = range(num_gemms)
        weights = ([] if self.fp8_weights else
                   [scale("fwd", f"gemm{g}.weight") for g in groups])
        return {"fwd": ([scale("fwd", f"gemm{g}.input") for g in groups] +
                        weights),
                "bwd": [scale("bwd", f"gemm{g}.grad_output")
                        for g in groups]}


def tolerances(dtype, fp8_recipe):
    if fp8_recipe is None:
        tol = layers.TOL_NONE["bf16" if dtype == BF16 else "fp16"]
        return tol, tol
    hybrid_format = fp8_recipe.fp8_format is recipe.Format.HYBRID
    return layers.TOL_E4M3, (layers.TOL_E5M2 if hybrid_format
                             else layers.TOL_E4M3)


def module_step(module, x, dy, splits, fp8_recipe, m_splits=None):
    """One forward + backward: (output, dx, [dW_g], [db_g] or None),
    detached copies."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(x, splits if m_splits is None else m_splits)
    out.backward(dy)
    grads = [getattr(module, f"weight{g}").grad.clone()
             for g in range(module.num_gemms)]
    bias_grads = (None if not module.use_bias else
                  [getattr(module, f"bias{g}").grad.clone()
                   for g in range(module.num_gemms)])
    return out.detach().clone(), x.grad.clone(), grads, bias_grads


def check_step(got, want, dtype, fp8_recipe, what):
    """Elementwise comparisons of a module step with the reference's."""
    out, dx, dws, dbs = got
    ref_out, ref_dx, ref_dws, ref_dbs = want
    tol_fwd, tol_bwd = tolerances(dtype, fp8_recipe)
    checks = [layers.compare("output", out, ref_out, tol_fwd),
              layers.compare("grad.input", dx, ref_dx, tol_bwd)]
    checks += [layers.compare(f"grad.weight{g}", dw, ref, tol_bwd)
               for g, (dw, ref) in enumerate(zip(dws, ref_dws))]
    if ref_dbs is not None:
        checks += [layers.compare(f"grad.bias{g}", db, ref, tol_bwd)
                   for g, (db, ref) in enumerate(zip(dbs, ref_dbs))]
    failing = [c.describe() for c in checks if not c.ok]
    worst = max(checks, key=lambda c: c.ratio)
    print(f"{what}: worst {worst.describe()}")
    assert not failing, f"{what} (seed {SEED}):\n  " + "\n  ".join(failing)


def check_meta(module, reference, what):
    """DelayedScaling: the module's scales and scale_invs against the
    emulator's, slot by slot."""
    state = module.state_dict()
    expected = reference.expected_scales(module.num_gemms)
    for direction, scales in expected.items():
        got = state[f"fp8_meta.{direction}.scale"].flatten().tolist()
        inverse = state[f"fp8_meta.{direction}.scale_inv"].flatten()
        assert len(got) == len(scales), (
            f"{what}: {direction} has {len(got)} scale slots, expected "
            f"{len(scales)} (G inputs then G weights forward, G gradients "
            f"backward)")
        for slot, (g, w) in enumerate(zip(got, scales)):
            assert math.isclose(g, w, rel_tol=1e-5), (
                f"{what}: {direction} scale slot {slot} is {g}, the "
                f"emulator's {w} (all: {got} vs {scales})")
        want_inverse = (1.0 / torch.tensor(got, dtype=F64)).float()
        assert torch.equal(inverse.float(), want_inverse), (
            f"{what}: {direction} scale_inv {inverse.tolist()} is not "
            f"1/scale in float32")


def run_steps(module, splits, dtype, fp8_recipe, steps, what, spread=True,
              lead=None):
    """`steps` training steps of fresh data, each checked (and the meta
    state under DelayedScaling)."""
    reference = Reference(fp8_recipe)
    for step in range(1, steps + 1):
        x = spread_input(splits, module.in_features, dtype, spread, lead)
        dy = torch.randn(*x.shape[:-1], module.out_features,
                         device="cuda").to(dtype)
        got = module_step(module, x, dy, splits, fp8_recipe)
        want = reference.step(module, x, dy, splits)
        check_step(got, want, dtype, fp8_recipe, f"{what} step {step}")
        if isinstance(fp8_recipe, recipe.DelayedScaling):
            check_meta(module, reference, f"{what} step {step}")
    return reference


# --- numerics against the per-segment reference ------------------------------


@pytest.mark.parametrize("splits_name", list(SPLITS))
@pytest.mark.parametrize("recipe_name", list(RECIPES))
def test_steps_match_reference(recipe_name, splits_name):
    dtype, factory, steps = RECIPES[recipe_name]
    splits = SPLITS[splits_name]
    fp8_recipe = factory() if factory else None
    module = build(len(splits), dtype)
    run_steps(module, splits, dtype, fp8_recipe, steps,
              f"{recipe_name} {splits_name}")


@pytest.mark.parametrize("recipe_name", ["bf16", "fp16"])
def test_odd_splits_without_fp8(recipe_name):
    """Without a recipe the splits need no alignment; a 3-D input."""
    dtype = RECIPES[recipe_name][0]
    module = build(len(ODD_SPLITS), dtype, bias=False)
    assert sum(ODD_SPLITS) == 11 * 32  # no multiple of 64: padded
    run_steps(module, ODD_SPLITS, dtype, None, 2, f"{recipe_name} odd",
              lead=(11, 32))


@pytest.mark.parametrize("recipe_name", ["bf16", "delayed-hybrid",
                                         "current", "block"])
def test_full_size(recipe_name):
    """G=8 experts, 4096 -> 2048 each, 16384 routed tokens in unequal
    splits (multiples of 16), against the float64 reference."""
    dtype, factory, _ = RECIPES[recipe_name]
    fp8_recipe = factory() if factory else None
    generator = torch.Generator().manual_seed(SEED)
    weights = torch.rand(8, generator=generator) + 0.25
    splits = [int(16 * round(w.item() / weights.sum().item() * 1024))
              for w in weights]
    splits[-1] += 16384 - sum(splits)
    assert sum(splits) == 16384 and min(splits) >= 0
    module = build(8, dtype, 4096, 2048, spread=False)
    run_steps(module, splits, dtype, fp8_recipe,
              2 if fp8_recipe else 1, f"full size {recipe_name} {splits}",
              spread=False)


# --- the module's plumbing ---------------------------------------------------


def test_state_dict_and_meta_state_continue():
    """weight{i}/bias{i} and the FP8 meta state in the state_dict; a module
    loaded from it continues bit for bit."""
    splits = SPLITS["unequal"]
    module = build(4, BF16)
    fp8_recipe = hybrid()
    run_steps(module, splits, BF16, fp8_recipe, 2, "state_dict")
    state = module.state_dict()
    names = {k for k in state if not k.startswith("fp8_meta.")}
    assert names == ({f"weight{g}" for g in range(4)} |
                     {f"bias{g}" for g in range(4)})
    assert {k for k in state if k.startswith("fp8_meta.")} == {
        f"fp8_meta.{d}.{t}" for d in ("fwd", "bwd")
        for t in ("scale", "scale_inv", "amax_history")}
    copy = te.GroupedLinear(4, IN, OUT, params_dtype=BF16)
    copy.load_state_dict(state)
    for g in range(4):
        assert torch.equal(copy.get_parameter(f"weight{g}"),
                           module.get_parameter(f"weight{g}"))
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    first = module_step(module, x, dy, splits, fp8_recipe)
    second = module_step(copy, x, dy, splits, fp8_recipe)
    assert torch.equal(first[0], second[0])
    assert torch.equal(first[1], second[1])
    assert all(torch.equal(a, b) for a, b in zip(first[2], second[2]))
    after, after_copy = module.state_dict(), copy.state_dict()
    for name in ("fp8_meta.fwd.scale", "fp8_meta.bwd.scale"):
        assert torch.equal(after[name], after_copy[name]), name


def test_m_splits_forms():
    """A list, a tuple, a CPU int64 tensor and a CUDA int32 tensor give
    the same bits."""
    splits = SPLITS["empty-expert"]
    module = build(4, BF16)
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    fp8_recipe = current()
    results = [module_step(module, x, dy, splits, fp8_recipe, m_splits=form)
               for form in (list(splits), tuple(splits),
                            torch.tensor(splits),
                            torch.tensor(splits, dtype=torch.int32,
                                         device="cuda"))]
    for other in results[1:]:
        assert torch.equal(results[0][0], other[0])
        assert torch.equal(results[0][1], other[1])
        assert all(torch.equal(a, b)
                   for a, b in zip(results[0][2], other[2]))


def test_is_first_microbatch():
    """TE's weight caching: under Float8CurrentScaling (no state) a step
    with is_first_microbatch True (casts the weights and keeps them) and
    then False (reuses them) gives the bits of a step with None."""
    splits = SPLITS["unequal"]
    module = build(4, BF16)
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    fp8_recipe = current()
    results = []
    for first in (None, True, False):
        module.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            out = module(xi, splits, is_first_microbatch=first)
        out.backward(dy)
        results.append((out.detach(), xi.grad, module.weight3.grad.clone()))
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


def test_return_bias():
    """return_bias: the output without the biases, and the biases as a
    list (TE's)."""
    splits = SPLITS["unequal"]
    module = build(4, BF16, return_bias=True)
    x = spread_input(splits, IN, BF16).requires_grad_()
    out, biases = module(x, splits)
    assert isinstance(biases, list) and len(biases) == 4
    for g, b in enumerate(biases):
        assert torch.equal(b, module.get_parameter(f"bias{g}"))
    ref_out = Reference(None).step(module, x, torch.zeros_like(out), splits,
                                   with_bias=False)[0]
    check = layers.compare("output", out.detach(), ref_out,
                           layers.TOL_NONE["bf16"])
    assert check.ok, check.describe()
    out.sum().backward()
    assert x.grad is not None and module.weight2.grad is not None


def test_replaced_parameter():
    """A weight replaced by a new Parameter (no longer a view of the
    stacked buffer) is stacked per call; its gradient reaches it."""
    splits = SPLITS["unequal"]
    module = build(4, BF16)
    new = torch.nn.Parameter(0.05 * torch.randn(OUT, IN, device="cuda",
                                                dtype=BF16))
    module.weight1 = new
    run_steps(module, splits, BF16, None, 1, "replaced weight1")
    assert module.weight1 is new and new.grad is not None
    # .to() packs them into one buffer again.
    module.to(BF16)
    module.cuda()
    weights = [module.get_parameter(f"weight{g}") for g in range(4)]
    assert all(b.data_ptr() - a.data_ptr() == OUT * IN * 2
               for a, b in zip(weights, weights[1:]))


def test_inference_matches_reference():
    """Forwards under torch.no_grad() (the inference program) for each
    precision."""
    splits = SPLITS["empty-expert"]
    for name in ("bf16", "delayed-hybrid", "current", "block"):
        dtype, factory, _ = RECIPES[name]
        fp8_recipe = factory() if factory else None
        module = build(4, dtype)
        x = spread_input(splits, IN, dtype)
        for step in range(2):
            with torch.no_grad(), te.fp8_autocast(
                    enabled=fp8_recipe is not None, fp8_recipe=fp8_recipe):
                out = module(x, splits)
            # Inference scales with the trained state, which no_grad leaves
            # as it stands: scale 1 (DelayedScaling) at every step here.
            want = Reference(fp8_recipe).step(
                module, x, torch.zeros_like(out), splits)[0]
            check = layers.compare("output", out, want,
                                   tolerances(dtype, fp8_recipe)[0])
            assert check.ok, f"{name} step {step}: {check.describe()}"


def test_programs_are_shared_across_token_counts():
    """Token counts that round up to the same multiple of 64 share one
    program; an input without tokens works (all experts empty)."""
    module = build(3, BF16, spread=False)
    before = te.compile_count()
    for splits in ([100, 0, 200], [96, 30, 180], [0, 0, 320]):
        run_steps(module, splits, BF16, None, 1, f"shared {splits}",
                  spread=False)
    assert te.compile_count() - before == 1
    module.zero_grad(set_to_none=True)
    x = torch.empty(0, IN, device="cuda", dtype=BF16, requires_grad=True)
    out = module(x, [0, 0, 0])
    assert tuple(out.shape) == (0, OUT)
    out.sum().backward()
    assert all(module.get_parameter(f"weight{g}").grad.abs().sum() == 0
               for g in range(3))


def test_fp8_padding_round_trip():
    """Fp8Padding -> GroupedLinear under FP8 -> Fp8Unpadding: the real
    tokens' outputs and gradients as the reference computes them on the
    padded input (zero rows change no amax)."""
    splits = [5, 0, 37, 22]
    module = build(4, BF16)
    pad, unpad = te.Fp8Padding(4), te.Fp8Unpadding(4)
    fp8_recipe = current()
    x = spread_input(splits, IN, BF16).requires_grad_()
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    padded, padded_splits = pad(x, splits)
    assert padded_splits == [16, 0, 48, 32]
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
        out = unpad(module(padded, padded_splits), splits)
    out.backward(dy)
    padded_dy, _ = pad(dy, splits)
    ref_out, ref_dx, ref_dws, _ = Reference(fp8_recipe).step(
        module, padded, padded_dy, padded_splits)
    tol_fwd, tol_bwd = tolerances(BF16, fp8_recipe)
    keep = torch.cat([torch.arange(start, start + m) for start, m in
                      zip([0, 16, 16, 64], splits)]).to("cuda")
    checks = [layers.compare("output", out.detach(), ref_out[keep], tol_fwd),
              layers.compare("grad.input", x.grad, ref_dx[keep], tol_bwd)]
    checks += [layers.compare(f"grad.weight{g}",
                              module.get_parameter(f"weight{g}").grad, ref,
                              tol_bwd) for g, ref in enumerate(ref_dws)]
    failing = [c.describe() for c in checks if not c.ok]
    assert not failing, "\n".join(failing)


# --- fuse_wgrad_accumulation -------------------------------------------------

# How weight{i}.main_grad lie: views of one buffer in weight order (the
# program's stacked main_grad is a view of it), of one buffer in reverse
# order (as Megatron-LM's grad buffer holds them) and tensors of their own
# (both given to the program as per-group buffers: set_group_pointers).
MAIN_GRAD_LAYOUTS = ("one-buffer", "reversed", "own-tensors")


def give_main_grads(module, layout, dtype=torch.float32):
    """Random main_grads [out, in] for the weights, laid out as `layout`
    says, and Megatron-LM's grad_added_to_main_grad; returns their initial
    values (copies)."""
    weights = module._weights()
    shape = (module.out_features, module.in_features)
    if layout == "own-tensors":
        grads = [torch.randn(shape, device="cuda").to(dtype)
                 for _ in weights]
    else:
        flat = torch.randn(len(weights), *shape, device="cuda").to(dtype)
        grads = list(flat.unbind(0))
        if layout == "reversed":
            grads.reverse()
    for weight, grad in zip(weights, grads):
        assert grad.is_contiguous()
        weight.main_grad = grad
        weight.grad_added_to_main_grad = False
    return [grad.clone() for grad in grads]


def fused_step(module, x, dy, splits, fp8_recipe):
    """One forward + backward of a fuse_wgrad_accumulation module:
    (output, dx, [db_g] or None), detached copies (the weights' gradients
    went into their main_grads)."""
    module.zero_grad(set_to_none=True)
    for weight in module._weights():
        if hasattr(weight, "grad_added_to_main_grad"):
            weight.grad_added_to_main_grad = False  # as Megatron-LM's
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(x, splits)
    out.backward(dy)
    bias_grads = (None if not module.use_bias else
                  [b.grad.clone() for b in module._biases()])
    return out.detach().clone(), x.grad.clone(), bias_grads


def run_fused_steps(module, splits, dtype, fp8_recipe, steps, what,
                    spread=True):
    """`steps` training steps of fresh data, the output, input and bias
    gradients (and the meta state under DelayedScaling) checked against
    the reference, the weights' .grad TE's placeholders; returns the
    reference's float64 dW_g summed over the steps."""
    reference = Reference(fp8_recipe)
    totals = None
    for step in range(1, steps + 1):
        x = spread_input(splits, module.in_features, dtype, spread)
        dy = torch.randn(x.shape[0], module.out_features,
                         device="cuda").to(dtype)
        out, dx, dbs = fused_step(module, x, dy, splits, fp8_recipe)
        ref_out, ref_dx, ref_dws, ref_dbs = reference.step(module, x, dy,
                                                           splits)
        check_step((out, dx, [], dbs), (ref_out, ref_dx, [], ref_dbs),
                   dtype, fp8_recipe, f"{what} step {step}")
        if isinstance(fp8_recipe, recipe.DelayedScaling):
            check_meta(module, reference, f"{what} step {step}")
        totals = (ref_dws if totals is None else
                  [a + b for a, b in zip(totals, ref_dws)])
        for g, weight in enumerate(module._weights()):
            assert weight.grad_added_to_main_grad, f"{what}: weight{g}"
            assert weight.grad is not None and (
                weight.grad.shape == weight.shape), (
                f"{what}: weight{g}.grad is not TE's placeholder")
    return totals


def check_main_grads(module, start, totals, tol, what, whole=False):
    """weight{g}.main_grad against start[g] + totals[g]: the added part
    (main_grad - start, exact in float64 for float32 main_grads), or with
    `whole` the values themselves (bfloat16 main_grads, rounded at each
    step)."""
    checks = []
    for g, (weight, begin, total) in enumerate(zip(module._weights(), start,
                                                   totals)):
        got, begin = weight.main_grad.to(F64), begin.to(F64)
        if whole:
            checks.append(layers.compare(f"main_grad{g}", got, begin + total,
                                         tol))
        else:
            checks.append(layers.compare(f"main_grad{g} - start",
                                         got - begin, total, tol))
    failing = [c.describe() for c in checks if not c.ok]
    worst = max(checks, key=lambda c: c.ratio)
    print(f"{what}: worst {worst.describe()}")
    assert not failing, f"{what} (seed {SEED}):\n  " + "\n  ".join(failing)


@pytest.mark.parametrize("layout", MAIN_GRAD_LAYOUTS)
@pytest.mark.parametrize("recipe_name", ["bf16", "delayed-hybrid", "block"])
def test_fuse_wgrad_accumulation(recipe_name, layout):
    """Float32 main_grads over two steps, an empty expert among the
    experts (its main_grad unchanged)."""
    dtype, factory, _ = RECIPES[recipe_name]
    fp8_recipe = factory() if factory else None
    splits = SPLITS["empty-expert"]
    module = build(len(splits), dtype, fuse_wgrad_accumulation=True)
    start = give_main_grads(module, layout)
    what = f"fuse_wgrad {recipe_name} {layout}"
    totals = run_fused_steps(module, splits, dtype, fp8_recipe, 2, what)
    check_main_grads(module, start, totals,
                     tolerances(dtype, fp8_recipe)[1], what)
    empty = splits.index(0)
    assert torch.equal(module._weights()[empty].main_grad, start[empty]), (
        f"{what}: the empty expert's main_grad changed")
    weights = module._weights()
    if layout == "one-buffer":
        # Still views of the one buffer (written in place).
        assert all(b.main_grad.data_ptr() - a.main_grad.data_ptr()
                   == OUT * IN * 4 for a, b in zip(weights, weights[1:]))
    # The others went to the program as per-group buffers, no copy.
    assert given_group_pointers(module) == (
        [] if layout == "one-buffer" else
        [w.main_grad.data_ptr() for w in weights]), what


def given_group_pointers(module):
    """The per-group main_grad addresses the module's training program
    was last given (empty: a stacked buffer)."""
    programs = [c for c in module._programs.values() if c.training]
    assert len(programs) == 1, len(programs)
    pointers = programs[0]._group_pointers
    return [list(p) for p in pointers.values() if p][0] if any(
        pointers.values()) else []


def test_group_pointers_refusals():
    """tejit_program_set_group_pointers refuses what it cannot take, naming
    it: a grad output that is no main_grad, a count other than G, a null
    pointer, a main_grad a plain GEMM adds into (te.Linear's); and a
    backward given the stacked main_grad while per-group ones are set."""
    import tejit
    splits = SPLITS["unequal"]
    module = build(len(splits), BF16, fuse_wgrad_accumulation=True)
    give_main_grads(module, "reversed")
    run_fused_steps(module, splits, BF16, None, 1, "refusals")
    compiled = [c for c in module._programs.values() if c.training][0]
    program, index = compiled.program, compiled.main_grad_outputs[0]
    good = [w.main_grad.data_ptr() for w in module._weights()]
    cases = [(0, good, "is not a main_grad the backward adds into"),
             (index, good[:-1], f"{len(good) - 1} per-group output "
                                f"pointers for {len(good)} groups"),
             (index, good[:-1] + [0], "per-group output pointer is null")]
    for grad_output, pointers, words in cases:
        with pytest.raises(tejit.TejitError, match=words):
            program.set_group_pointers(grad_output, pointers)
    # Still per-group (the refusals changed nothing): a stacked main_grad
    # given now is refused by the backward.
    assert given_group_pointers(module) == good
    stacked = torch.zeros(len(good), OUT, IN, device="cuda")
    grad_outputs = [None] * len(program.grad_outputs)
    grad_outputs[index] = stacked
    with pytest.raises(tejit.TejitError, match="pass null for its main_grad"):
        program.backward_ex(torch.cuda.current_stream(),
                            [None] * len(program.inputs),
                            [None] * len(program.outputs),
                            [None] * len(program.saved), grad_outputs,
                            [None] * len(program.grad_inputs))
    linear = te.Linear(IN, OUT, params_dtype=BF16,
                       fuse_wgrad_accumulation=True)
    linear.weight.main_grad = torch.zeros(OUT, IN, device="cuda")
    x = torch.randn(16, IN, device="cuda", dtype=BF16, requires_grad=True)
    linear(x).sum().backward()
    plain = [c for c in linear._programs.values() if c.training][0]
    with pytest.raises(tejit.TejitError, match="not added in place by a "
                                               "grouped GEMM"):
        plain.program.set_group_pointers(plain.main_grad_outputs[0],
                                         [good[0]])


def test_fuse_wgrad_accumulation_layout_changes():
    """One module whose main_grads move between steps: reversed
    (per-group buffers), then one buffer in order (the stacked view: the
    program is taken off the per-group ones), then reversed in new memory.
    Each step's sums land in that step's main_grads. (bf16: each step
    checks against a fresh reference, which has no FP8 state to carry.)"""
    dtype = RECIPES["bf16"][0]
    splits = SPLITS["empty-expert"]
    module = build(len(splits), dtype, fuse_wgrad_accumulation=True)
    for step, layout in enumerate(["reversed", "one-buffer", "reversed"]):
        start = give_main_grads(module, layout)
        what = f"layout change, step {step} ({layout})"
        totals = run_fused_steps(module, splits, dtype, None, 1, what)
        check_main_grads(module, start, totals, tolerances(dtype, None)[1],
                         what)
        assert given_group_pointers(module) == (
            [] if layout == "one-buffer" else
            [w.main_grad.data_ptr() for w in module._weights()]), what


@pytest.mark.parametrize("recipe_name", ["bf16", "delayed-hybrid"])
def test_fuse_wgrad_accumulation_bf16_main_grads(recipe_name):
    """main_grad_dtype bf16 (bfloat16 main_grads of bf16 weights), views
    of one buffer, over two steps: each step's sum is rounded to bf16 once
    (unspread data, so that the gradients dominate the start)."""
    dtype, factory, _ = RECIPES[recipe_name]
    fp8_recipe = factory() if factory else None
    splits = SPLITS["unequal"]
    module = build(len(splits), dtype, spread=False,
                   fuse_wgrad_accumulation=True)
    start = give_main_grads(module, "one-buffer", BF16)
    what = f"fuse_wgrad bf16 main_grads {recipe_name}"
    totals = run_fused_steps(module, splits, dtype, fp8_recipe, 2, what,
                             spread=False)
    check_main_grads(module, start, totals,
                     tolerances(dtype, fp8_recipe)[1], what, whole=True)
    for weight in module._weights():
        assert weight.main_grad.dtype == BF16


def test_fuse_wgrad_grad_rule_and_frozen_expert():
    """TE's .grad per weight: grad_added_to_main_grad set and a
    placeholder (zeros with zero_out_wgrad), None without the attribute;
    a frozen expert needs no main_grad and gets nothing; the others'
    main_grads get their sums."""
    splits = SPLITS["unequal"]
    module = build(4, BF16, fuse_wgrad_accumulation=True)
    start = give_main_grads(module, "one-buffer")
    w0, w1, w2, w3 = module._weights()
    del w0.grad_added_to_main_grad
    w1.zero_out_wgrad = True
    w2.requires_grad_(False)
    del w2.main_grad
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    fused_step(module, x, dy, splits, None)
    ref_dws = Reference(None).step(module, x, dy, splits)[2]
    assert w0.grad is None and not hasattr(w0, "grad_added_to_main_grad")
    assert w1.grad_added_to_main_grad
    assert w1.grad is not None and torch.count_nonzero(w1.grad) == 0
    assert w2.grad is None and not hasattr(w2, "main_grad")
    assert w3.grad_added_to_main_grad and w3.grad is not None
    tol = layers.TOL_NONE["bf16"]
    for g in (0, 1, 3):
        weight = module._weights()[g]
        check = layers.compare(f"main_grad{g} - start",
                               weight.main_grad.to(F64) - start[g].to(F64),
                               ref_dws[g], tol)
        assert check.ok, check.describe()


def test_fuse_wgrad_programs_per_main_grad_dtype():
    """The main_grads' dtype selects the program (float32, then bfloat16:
    one more compile); inference forwards need no main_grad."""
    splits = SPLITS["unequal"]
    module = build(4, BF16, fuse_wgrad_accumulation=True)
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    before = te.compile_count()
    for dtype in (torch.float32, BF16, torch.float32):
        start = give_main_grads(module, "own-tensors", dtype)
        fused_step(module, x, dy, splits, None)
        ref_dws = Reference(None).step(module, x, dy, splits)[2]
        for g, weight in enumerate(module._weights()):
            assert weight.main_grad.dtype == dtype
            check = layers.compare(f"{dtype} main_grad{g}",
                                   weight.main_grad.to(F64),
                                   start[g].to(F64) + ref_dws[g],
                                   layers.TOL_NONE["bf16"])
            assert check.ok, check.describe()
    assert te.compile_count() - before == 2
    for weight in module._weights():
        del weight.main_grad
    with torch.no_grad():
        module(x, splits)


def test_fuse_wgrad_errors_name_the_weight():
    splits = SPLITS["unequal"]
    module = build(4, BF16, fuse_wgrad_accumulation=True)
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    give_main_grads(module, "one-buffer")
    del module.weight1.main_grad
    with pytest.raises(RuntimeError, match="'weight1' has no .main_grad"):
        fused_step(module, x, dy, splits, None)
    module.weight1.main_grad = torch.zeros(IN, OUT, device="cuda")
    with pytest.raises(RuntimeError, match="weight1.main_grad"):
        fused_step(module, x, dy, splits, None)
    module.weight1.main_grad = torch.zeros(OUT, IN, device="cuda",
                                           dtype=torch.float64)
    with pytest.raises(RuntimeError, match="share one dtype"):
        fused_step(module, x, dy, splits, None)


# --- refusals ----------------------------------------------------------------


def test_bad_m_splits_are_refused():
    module = build(3, BF16)
    x = torch.randn(64, IN, device="cuda", dtype=BF16)
    cases = [([32, 32], "2 entries"), ([32, 40, -8], "m_splits[2]"),
             ([32, 16, 8], "sums to 56"),
             (torch.tensor([32.0, 16.0, 16.0]), "integer tensor"),
             (torch.tensor([[32, 16, 16]]), "1-D"), ("abc", "list")]
    for m_splits, words in cases:
        with pytest.raises(ValueError) as caught:
            module(x, m_splits)
        assert "m_splits" in str(caught.value)
        assert words in str(caught.value), str(caught.value)


def test_fp8_needs_multiples_of_16():
    module = build(3, BF16)
    x = torch.randn(64, IN, device="cuda", dtype=BF16)
    for fp8_recipe in (hybrid(), current()):
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            with pytest.raises(ValueError) as caught:
                module(x, [24, 8, 32])
        assert "Fp8Padding" in str(caught.value)
        assert "m_splits[0] is 24" in str(caught.value)
    module(x, [24, 8, 32])  # fine without FP8


def test_block_scaling_token_blocks_must_be_1d():
    """Float8BlockScaling runs with 1-D blocks for the token segments;
    2-D ones are refused, naming the field."""
    module = build(2, BF16)
    x = torch.randn(64, IN, device="cuda", dtype=BF16)
    for field in ("x_block_scaling_dim", "grad_block_scaling_dim"):
        fp8_recipe = recipe.Float8BlockScaling(w_block_scaling_dim=1,
                                               **{field: 2})
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
            with pytest.raises(NotImplementedError) as caught:
                module(x, [32, 32])
        assert field in str(caught.value), str(caught.value)


def test_block_scaling_holds_no_meta_state():
    """Float8BlockScaling scales each block from its own amax: the module
    keeps no FP8 meta state, and two identical steps give the same bits."""
    splits = SPLITS["unequal"]
    module = build(4, BF16)
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    first = module_step(module, x, dy, splits, block())
    second = module_step(module, x, dy, splits, block())
    assert not any(k.startswith("fp8_meta.") for k in module.state_dict())
    assert torch.equal(first[0], second[0])
    assert torch.equal(first[1], second[1])
    assert all(torch.equal(a, b) for a, b in zip(first[2], second[2]))


def test_constructor_refusals():
    for name in ("ub_overlap_rs", "ub_overlap_ag", "save_original_input"):
        with pytest.raises(NotImplementedError) as caught:
            te.GroupedLinear(2, IN, OUT, **{name: True})
        assert name in str(caught.value)
    # Tensor parallelism as TE's: the rank's shard, no bias at tp_size > 1
    # (tests/gpu/tensor_parallel_check.py runs it).
    with pytest.raises(ValueError) as caught:
        te.GroupedLinear(2, IN, OUT, tp_size=2, parallel_mode="column")
    assert "bias=True" in str(caught.value)
    shard = te.GroupedLinear(2, IN, OUT, tp_size=2, parallel_mode="column",
                             bias=False)
    assert shard.out_features == OUT // 2


# --- fp8_model_init (FP8 primary weights, docs/fp8-weights.md) ----------------

# name -> (the autocast's recipe factory, fp8_model_init's recipe factory).
FP8_WEIGHT_RECIPES = {
    "delayed-hybrid": (hybrid, recipe.DelayedScaling),
    "current": (current, recipe.Float8CurrentScaling),
}


def fp8_weights_build(splits, weight_recipe, in_features=IN,
                      out_features=OUT, bias=True, spread=True, **kwargs):
    """A GroupedLinear built inside fp8_model_init(recipe=weight_recipe)
    whose experts hold N(0, 0.05^2) values (times W_MAGNITUDES with
    `spread`: each expert's own scale differs), quantized by copy_; under
    DelayedScaling once more after an update, so that the scales come
    from the amaxes (the first quantization uses scale 1)."""
    with te.fp8_model_init(enabled=True, recipe=weight_recipe):
        module = te.GroupedLinear(len(splits), in_features, out_features,
                                  bias=bias, params_dtype=BF16, **kwargs)
    values = [0.05 * torch.randn(out_features, in_features, device="cuda")
              * (W_MAGNITUDES[g % len(W_MAGNITUDES)] if spread else 1.0)
              for g in range(len(splits))]
    with torch.no_grad():
        for weight, value in zip(module._weights(), values):
            weight.copy_(value)
        if isinstance(weight_recipe, recipe.DelayedScaling):
            for weight, value in zip(module._weights(), values):
                weight._scaling.update()
                weight.copy_(value)
        if bias:
            for b in module._biases():
                b.copy_(0.1 * torch.randn_like(b))
    return module


def check_packed(module, what):
    """The experts' FP8 data, scale_invs (and transposes, once made) lie
    back to back in one buffer each, in expert order."""
    weights = module._weights()
    for field in ("_data", "_scale_inv", "_transpose"):
        values = [getattr(w, field) for w in weights]
        if field == "_transpose" and values[0] is None:
            assert all(v is None for v in values), f"{what}: {field}"
            continue
        size = values[0].numel() * values[0].element_size()
        assert all(b.data_ptr() - a.data_ptr() == size
                   for a, b in zip(values, values[1:])), (
            f"{what}: the experts' {field} are not one buffer")


def plain_twin(module, dtype=BF16):
    """A GroupedLinear built normally (bf16 weights) holding the FP8
    module's dequantized weights (TE's dequantize: `_data` times
    `_scale_inv` in float32, rounded to bf16) and its biases."""
    twin = te.GroupedLinear(module.num_gemms, module.in_features,
                            module.out_features, bias=module.use_bias,
                            params_dtype=dtype)
    with torch.no_grad():
        for g, weight in enumerate(module._weights()):
            twin.get_parameter(f"weight{g}").copy_(
                (weight._data.float() * weight._scale_inv).to(dtype))
        for mine, theirs in zip(twin._biases(), module._biases()):
            if mine is not None:
                mine.copy_(theirs)
    return twin


def bits(tensor):
    return tensor.view(torch.uint8)


def relative_l2(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("splits_name", ["empty-expert", "unequal"])
@pytest.mark.parametrize("recipe_name", list(FP8_WEIGHT_RECIPES))
def test_fp8_model_init_steps_match_reference(recipe_name, splits_name):
    """Float8Tensor experts (nominal bf16, E4M3 [out, in], scale_inv [1],
    packed), forward and backward under fp8_autocast against the float64
    reference on the dequantized FP8 weights (which the program reads
    without a cast), the meta state holding the G input slots only."""
    autocast_recipe, weight_recipe = FP8_WEIGHT_RECIPES[recipe_name]
    splits = SPLITS[splits_name]
    module = fp8_weights_build(splits, weight_recipe())
    what = f"fp8_model_init {recipe_name} {splits_name}"
    assert module.primary_weights_in_fp8
    for g, weight in enumerate(module._weights()):
        assert isinstance(weight, te.Float8Tensor), f"{what}: weight{g}"
        assert module.get_parameter(f"weight{g}") is weight
        assert weight.dtype == BF16 and tuple(weight.shape) == (OUT, IN)
        assert weight._data.dtype == torch.float8_e4m3fn
        assert tuple(weight._scale_inv.shape) == (1,)
        assert weight._transpose is None  # until a training forward
    scales = {w._scale_inv.item() for w in module._weights()}
    assert len(scales) > 1, f"{what}: every expert has the same scale"
    check_packed(module, what)
    run_steps(module, splits, BF16, autocast_recipe(), 2, what)
    for weight in module._weights():
        assert torch.equal(bits(weight._transpose),
                           bits(weight._data).t().contiguous())
    check_packed(module, what)


@pytest.mark.parametrize("recipe_name", list(FP8_WEIGHT_RECIPES))
def test_fp8_model_init_full_size(recipe_name):
    """8 experts, 2048 -> 4096 each, 8192 routed tokens in unequal splits
    with an empty expert, against the float64 reference (two steps)."""
    autocast_recipe, weight_recipe = FP8_WEIGHT_RECIPES[recipe_name]
    generator = torch.Generator().manual_seed(SEED)
    shares = torch.rand(8, generator=generator) + 0.25
    shares[3] = 0.0
    splits = [int(16 * round(w.item() / shares.sum().item() * 512))
              for w in shares]
    splits[-1] += 8192 - sum(splits)
    assert sum(splits) == 8192 and splits[3] == 0 and min(splits) >= 0
    module = fp8_weights_build(splits, weight_recipe(), 2048, 4096,
                               spread=False)
    run_steps(module, splits, BF16, autocast_recipe(), 2,
              f"fp8_model_init full size {recipe_name} {splits}",
              spread=False)


@pytest.mark.parametrize("recipe_name", list(FP8_WEIGHT_RECIPES))
def test_fp8_model_init_against_bf16_weights(recipe_name):
    """The same steps of a GroupedLinear built without fp8_model_init
    whose bf16 weights are the dequantized FP8 ones, under the same
    fp8_autocast: the second step equal within FP8 tolerances (the twin's
    program casts those weights itself: under DelayedScaling with scale 1
    at the first step, then with the scale of their amaxes, close to the
    FP8 weights' own)."""
    autocast_recipe, weight_recipe = FP8_WEIGHT_RECIPES[recipe_name]
    splits = SPLITS["empty-expert"]
    module = fp8_weights_build(splits, weight_recipe())
    twin = plain_twin(module)
    fp8_recipe = autocast_recipe()
    for _ in range(2):
        x = spread_input(splits, IN, BF16)
        dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
        got = module_step(module, x, dy, splits, fp8_recipe)
        want = module_step(twin, x, dy, splits, fp8_recipe)
    bounds = (0.05, 0.1)  # test_fp8_model_init.py's twin bounds
    for name, a, b, bound in (("output", got[0], want[0], bounds[0]),
                              ("grad.input", got[1], want[1], bounds[1])):
        assert relative_l2(a, b) < bound, (recipe_name, name)
    for g, (a, b) in enumerate(zip(got[2], want[2])):
        if splits[g]:
            assert relative_l2(a, b) < bounds[1], (recipe_name, g)
        else:
            assert torch.count_nonzero(a) == 0 and torch.count_nonzero(b) == 0
        assert a.dtype == BF16  # high-precision gradients


def test_fp8_model_init_without_autocast():
    """Without an FP8 recipe the program runs on the dequantized weights:
    the twin's bf16 step bit for bit, the gradient in each weight's .grad;
    inference under no_grad makes no transpose."""
    splits = SPLITS["unequal"]
    module = fp8_weights_build(splits, recipe.DelayedScaling())
    twin = plain_twin(module)
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    got = module_step(module, x, dy, splits, None)
    want = module_step(twin, x, dy, splits, None)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert all(torch.equal(a, b) for a, b in zip(got[2], want[2]))
    assert all(w._transpose is None for w in module._weights())
    with torch.no_grad(), te.fp8_autocast(enabled=True, fp8_recipe=hybrid()):
        out = module(x, splits)
    assert all(w._transpose is None for w in module._weights())
    ref = Reference(hybrid()).step(module, x, torch.zeros_like(out),
                                   splits)[0]
    check = layers.compare("output", out, ref, layers.TOL_E4M3)
    assert check.ok, check.describe()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("recipe_name", list(FP8_WEIGHT_RECIPES))
def test_fp8_model_init_optimizer_steps(recipe_name, optimizer):
    """An optimizer updates the Float8Tensor experts in place (their
    memory stays packed; SGD's new value is the old dequantized one minus
    lr * grad, requantized within E4M3's precision and saturated at the
    new scale's range) and the next forward reads the new weights: steps
    against the reference in between."""
    autocast_recipe, weight_recipe = FP8_WEIGHT_RECIPES[recipe_name]
    splits = SPLITS["empty-expert"]
    module = fp8_weights_build(splits, weight_recipe())
    lr = 1e-4
    opt = (torch.optim.SGD(module.parameters(), lr=lr)
           if optimizer == "sgd" else
           torch.optim.AdamW(module.parameters(), lr=1e-2))
    addresses = [w._data.data_ptr() for w in module._weights()]
    # One reference for the steps: the autocast's state carries over.
    reference = Reference(autocast_recipe())
    for step in range(3):
        what = f"{optimizer} {recipe_name} step {step}"
        x = spread_input(splits, IN, BF16)
        dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
        got = module_step(module, x, dy, splits, autocast_recipe())
        check_step(got, reference.step(module, x, dy, splits), BF16,
                   autocast_recipe(), what)
        before = [w.dequantize().float() for w in module._weights()]
        grads = [w.grad.float() for w in module._weights()]
        data = [bits(w._data).clone() for w in module._weights()]
        opt.step()
        assert [w._data.data_ptr() for w in module._weights()] == addresses
        check_packed(module, what)
        changed = 0
        for g, (w, old, grad, raw) in enumerate(zip(
                module._weights(), before, grads, data)):
            if optimizer == "sgd":
                # Saturated at the range of the scale it was cast with.
                limit = 448.0 * w._scale_inv.item()
                want = (old - lr * grad).clamp(-limit, limit)
                err = (w.dequantize().float() - want).abs()
                # E4M3 keeps 3 mantissa bits (half a step: 1/16 of the
                # value), bf16 rounds on the way; subnormals' floor.
                bound = 0.07 * want.abs() + w._scale_inv.item() / 256
                assert bool((err <= bound).all()), (
                    what, g, (err - bound).max().item())
            changed += not torch.equal(bits(w._data), raw)
            # The kept transpose is refreshed with the data.
            if w._transpose is not None:
                assert torch.equal(bits(w._transpose),
                                   bits(w._data).t().contiguous()), (what, g)
        assert changed, f"{what}: no expert's FP8 data changed"


def test_fp8_model_init_fuse_wgrad_accumulation():
    """Float32 main_grads (one buffer in expert order, and reversed as
    Megatron-LM's buffer): the experts' FP8 wgrads added in place, the
    empty expert's main_grad unchanged, TE's placeholder .grad."""
    splits = SPLITS["empty-expert"]
    for layout in ("one-buffer", "reversed"):
        module = fp8_weights_build(splits, recipe.DelayedScaling(),
                                   fuse_wgrad_accumulation=True)
        start = give_main_grads(module, layout)
        what = f"fp8_model_init fuse_wgrad {layout}"
        totals = run_fused_steps(module, splits, BF16, hybrid(), 2, what)
        check_main_grads(module, start, totals, layers.TOL_E5M2, what)
        empty = splits.index(0)
        assert torch.equal(module._weights()[empty].main_grad,
                           start[empty]), what


def test_fp8_model_init_state_dict_and_copies():
    """state_dict round trip (a fresh fp8_model_init module loads the FP8
    data and scale_inv bit for bit and continues bit for bit),
    torch.save/torch.load(weights_only=True), deepcopy (packed again), a
    bf16 state_dict loaded into FP8 experts (quantized), and
    preserve_high_precision_init_val."""
    splits = SPLITS["unequal"]
    fp8_recipe = hybrid()
    module = fp8_weights_build(splits, recipe.DelayedScaling())
    run_steps(module, splits, BF16, fp8_recipe, 1, "before state_dict")
    state = module.state_dict()
    assert all(isinstance(state[f"weight{g}"], te.Float8Tensor)
               for g in range(4))
    with te.fp8_model_init(enabled=True, recipe=recipe.DelayedScaling()):
        loaded = te.GroupedLinear(4, IN, OUT, params_dtype=BF16)
    loaded.load_state_dict(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    with te.fp8_model_init(enabled=True, recipe=recipe.DelayedScaling()):
        reloaded = te.GroupedLinear(4, IN, OUT, params_dtype=BF16)
    reloaded.load_state_dict(torch.load(buffer, weights_only=True))
    copied = copy.deepcopy(module)
    x = spread_input(splits, IN, BF16)
    dy = torch.randn(x.shape[0], OUT, device="cuda").to(BF16)
    first = module_step(module, x, dy, splits, fp8_recipe)
    for name, other in (("load_state_dict", loaded),
                        ("torch.load", reloaded), ("deepcopy", copied)):
        check_packed(other, name)
        for g in range(4):
            mine, theirs = module._weights()[g], other._weights()[g]
            assert torch.equal(bits(mine._data), bits(theirs._data)), name
            assert torch.equal(mine._scale_inv, theirs._scale_inv), name
        second = module_step(other, x, dy, splits, fp8_recipe)
        assert torch.equal(first[0], second[0]), name
        assert torch.equal(first[1], second[1]), name
        assert all(torch.equal(a, b) for a, b in zip(first[2], second[2]))
    # A bf16 state_dict quantizes into the FP8 experts (current scaling:
    # each with 448 / its amax).
    plain = build(4, BF16)
    fresh = fp8_weights_build(splits, recipe.Float8CurrentScaling())
    fresh.load_state_dict(plain.state_dict(), strict=False)
    for g in range(4):
        value = plain.get_parameter(f"weight{g}").float()
        got = fresh._weights()[g].dequantize().float()
        assert relative_l2(got, value) < 0.05, g
    check_packed(fresh, "bf16 state_dict")
    # preserve_high_precision_init_val: each expert's initial bf16 value.
    with te.fp8_model_init(enabled=True, recipe=recipe.DelayedScaling(),
                           preserve_high_precision_init_val=True):
        kept = te.GroupedLinear(4, IN, OUT, params_dtype=BF16)
    for g, weight in enumerate(kept._weights()):
        value = weight.get_high_precision_init_val()
        assert value is not None and value.device.type == "cpu", g
        assert value.dtype == BF16 and tuple(value.shape) == (OUT, IN)
    check_packed(kept, "preserve_high_precision_init_val")


def test_fp8_model_init_refusals():
    """Float8BlockScaling: an fp8_model_init recipe, and an autocast over
    FP8 experts, are refused (NotImplementedError), as for Linear."""
    with pytest.raises(NotImplementedError):
        with te.fp8_model_init(enabled=True, recipe=block()):
            te.GroupedLinear(2, IN, OUT, params_dtype=BF16)
    splits = [32, 16]
    module = fp8_weights_build(splits, recipe.DelayedScaling())
    x = spread_input(splits, IN, BF16)
    with pytest.raises(NotImplementedError) as caught:
        with te.fp8_autocast(enabled=True, fp8_recipe=block()):
            module(x, splits)
    assert "Float8BlockScaling" in str(caught.value)
