"""GPU tests of delay_wgrad_compute (Transformer Engine's: weight gradients
computed by `module.backward_dw()`, not in autograd's backward;
docs/delay-wgrad.md).

    PYTHONPATH=python python3 -m pytest tests/gpu/test_delay_wgrad.py

Each case runs a module built with delay_wgrad_compute=True beside a twin
without it (the same parameters) over the same micro-batches, on fresh
random data, and checks:
- after autograd's backward, the input and bias (and norm) gradients equal
  the twin's bit for bit, and the GEMM weights have no gradient yet;
- backward_dw() gives every weight the twin's gradient bit for bit (the
  same FP8 GEMMs on the same FP8 operands and scales), also when two
  backwards are queued before their two backward_dw calls (first in,
  first out; under DelayedScaling the second backward has updated the
  scales before the first wgrad runs), and when backward_dw runs on
  another stream;
- the no-recipe result against a float64 product dY^T X of the same bf16
  tensors (so the twins are not both wrong);
- fuse_wgrad_accumulation: main_grad gets the twin's sum, after
  backward_dw only; the hooks given to
  register_wgrad_accumulation_and_reduce_hooks run after each backward_dw;
- GroupedLinear (4 experts, one empty) in every recipe, with and without
  fuse_wgrad_accumulation;
- the quickstart LayerNormMLP (hidden 4096, FFN 16384, 8192 tokens) under
  DelayedScaling and current scaling.
"""
import copy

import pytest

from gpu_test_support import (hybrid, input_gradient, perturb,
                              run_seed, seed_per_test, torch)

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_delay_wgrad")
fresh_seed = seed_per_test(SEED)
BF16 = torch.bfloat16

RECIPES = {
    "none": lambda: None,
    "delayed": hybrid,
    "current": lambda: recipe.Float8CurrentScaling(),
    "block": lambda: recipe.Float8BlockScaling(),
}

# name -> (make(**arguments), input features)
LAYERS = {
    "Linear": (lambda **kw: te.Linear(512, 256, params_dtype=BF16, **kw),
               512),
    "LayerNormLinear": (lambda **kw: te.LayerNormLinear(
        512, 384, params_dtype=BF16, **kw), 512),
    "LayerNormMLP-gelu": (lambda **kw: te.LayerNormMLP(
        256, 1024, params_dtype=BF16, **kw), 256),
    "LayerNormMLP-swiglu": (lambda **kw: te.LayerNormMLP(
        256, 512, activation="swiglu", normalization="RMSNorm",
        params_dtype=BF16, **kw), 256),
}


def gemm_weights(module):
    return {name: p for name, p in module.named_parameters() if p.dim() == 2}


def make_twins(make, **kw):
    delayed = make(delay_wgrad_compute=True, **kw)
    perturb(delayed)
    plain = make(**kw)
    plain.load_state_dict(delayed.state_dict())
    return delayed, plain


def out_features(module, x):
    with torch.no_grad():
        return module(x).shape[-1]


def check_dgrad_half(delayed, plain, got, want):
    assert torch.equal(got, want), "input gradient differs from the twin"
    plain_params = dict(plain.named_parameters())
    for name, p in delayed.named_parameters():
        if p.dim() == 2:
            assert p.grad is None, f"{name} got a gradient before backward_dw"
        else:
            assert torch.equal(p.grad, plain_params[name].grad), \
                f"gradient of {name} differs from the twin's"


def check_weights_equal(delayed, plain):
    plain_params = dict(plain.named_parameters())
    for name, p in gemm_weights(delayed).items():
        assert p.grad is not None, f"backward_dw gave {name} no gradient"
        want = plain_params[name].grad
        assert torch.equal(p.grad, want), (
            f"{name}: backward_dw's gradient differs from the twin's "
            f"(max |diff| {(p.grad.float() - want.float()).abs().max()})")


@pytest.mark.parametrize("recipe_name", list(RECIPES))
@pytest.mark.parametrize("layer", list(LAYERS))
def test_twin_interleaved_and_queued(layer, recipe_name):
    fp8_recipe = RECIPES[recipe_name]()
    make, features_in = LAYERS[layer]
    delayed, plain = make_twins(make)
    tokens = 256
    x0 = torch.randn(tokens, features_in, device="cuda", dtype=BF16)
    features = out_features(plain, x0)
    batches = [(torch.randn_like(x0), torch.randn(tokens, features,
                                                  device="cuda", dtype=BF16))
               for _ in range(4)]
    # Steps 1-2: backward then backward_dw, one micro-batch at a time.
    for x, dy in batches[:2]:
        plain.zero_grad(set_to_none=True)
        delayed.zero_grad(set_to_none=True)
        want = input_gradient(plain, x, dy, fp8_recipe)
        got = input_gradient(delayed, x, dy, fp8_recipe)
        check_dgrad_half(delayed, plain, got, want)
        assert delayed.need_backward_dw()
        delayed.backward_dw()
        check_weights_equal(delayed, plain)
    # Steps 3-4: two backwards queued, then their two backward_dw (the
    # second on another stream); gradients accumulate as autograd's do.
    plain.zero_grad(set_to_none=True)
    delayed.zero_grad(set_to_none=True)
    for x, dy in batches[2:]:
        want = input_gradient(plain, x, dy, fp8_recipe)
        got = input_gradient(delayed, x, dy, fp8_recipe)
        assert torch.equal(got, want), "input gradient differs (queued)"
    delayed.backward_dw()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        delayed.backward_dw()
    torch.cuda.current_stream().wait_stream(side)
    check_weights_equal(delayed, plain)
    delayed.backward_dw()  # nothing pending: does nothing
    check_weights_equal(delayed, plain)


@pytest.mark.parametrize("recipe_name", list(RECIPES))
@pytest.mark.parametrize("fuse", [False, True])
def test_grouped_linear(recipe_name, fuse):
    """GroupedLinear (an empty expert among 4): each expert's weight
    gradient from backward_dw equals the twin's; bias gradients come with
    autograd's backward; with fuse_wgrad_accumulation the main_grads."""
    fp8_recipe = RECIPES[recipe_name]()
    splits = [64, 0, 128, 64]

    def make(**kw):
        return te.GroupedLinear(4, 256, 512, params_dtype=BF16,
                                fuse_wgrad_accumulation=fuse, **kw)
    delayed, plain = make_twins(make)
    if fuse:
        for p, q in zip(gemm_weights(delayed).values(),
                        gemm_weights(plain).values()):
            p.main_grad = torch.randn(p.shape, device="cuda")
            q.main_grad = p.main_grad.clone()

    def backward_grouped(module, x, dy):
        x = x.detach().requires_grad_()
        with te.fp8_autocast(enabled=fp8_recipe is not None,
                             fp8_recipe=fp8_recipe):
            out = module(x, splits)
        out.backward(dy)
        return x.grad

    for _ in range(2):
        x = torch.randn(256, 256, device="cuda", dtype=BF16)
        dy = torch.randn(256, 512, device="cuda", dtype=BF16)
        for module in (delayed, plain):
            module.zero_grad(set_to_none=True)
        want = backward_grouped(plain, x, dy)
        got = backward_grouped(delayed, x, dy)
        assert torch.equal(got, want), "input gradient differs"
        delayed.backward_dw()
        plain_params = dict(plain.named_parameters())
        for name, p in delayed.named_parameters():
            q = plain_params[name]
            if fuse and p.dim() == 2:
                assert torch.equal(p.main_grad, q.main_grad), name
            elif q.grad is None:
                assert p.grad is None, name
            else:
                assert torch.equal(p.grad, q.grad), \
                    f"gradient of {name} differs from the twin's"


def test_no_recipe_against_float64():
    """Linear without a recipe: weight.grad after backward_dw against the
    float64 product dY^T X of the same bf16 tensors."""
    module = te.Linear(1024, 512, params_dtype=BF16, bias=False,
                       delay_wgrad_compute=True)
    x = torch.randn(2048, 1024, device="cuda", dtype=BF16)
    dy = torch.randn(2048, 512, device="cuda", dtype=BF16)
    input_gradient(module, x, dy, None)
    assert module.weight.grad is None
    module.backward_dw()
    want = dy.double().t() @ x.double()
    got = module.weight.grad.double()
    error = ((got - want).norm() / want.norm()).item()
    assert error < 8e-3, f"weight gradient rel. L2 {error:.2e} (bf16 ~2e-3)"


@pytest.mark.parametrize("recipe_name", ["none", "delayed", "current"])
def test_main_grad_and_hooks(recipe_name):
    fp8_recipe = RECIPES[recipe_name]()
    delayed, plain = make_twins(LAYERS["LayerNormMLP-gelu"][0],
                                fuse_wgrad_accumulation=True)
    starts = {}
    for (name, p), q in zip(gemm_weights(delayed).items(),
                            gemm_weights(plain).values()):
        p.main_grad = torch.randn(p.shape, device="cuda")
        q.main_grad = p.main_grad.clone()
        p.grad_added_to_main_grad = False
        starts[name] = p.main_grad.clone()
    calls = []
    delayed.register_wgrad_accumulation_and_reduce_hooks(
        lambda: calls.append(len(calls)))
    x = torch.randn(512, 256, device="cuda", dtype=BF16)
    dy = torch.randn(512, 256, device="cuda", dtype=BF16)
    want = input_gradient(plain, x, dy, fp8_recipe)
    got = input_gradient(delayed, x, dy, fp8_recipe)
    assert torch.equal(got, want)
    for name, p in gemm_weights(delayed).items():
        assert torch.equal(p.main_grad, starts[name]), \
            f"{name}.main_grad changed before backward_dw"
        assert not p.grad_added_to_main_grad
    assert calls == []
    delayed.backward_dw()
    assert calls == [0], "the hook did not run once after backward_dw"
    for (name, p), q in zip(gemm_weights(delayed).items(),
                            gemm_weights(plain).values()):
        assert p.grad_added_to_main_grad, name
        assert torch.equal(p.main_grad, q.main_grad), \
            f"{name}.main_grad differs from the twin's"


@pytest.mark.parametrize("recipe_name", ["delayed", "current"])
def test_quickstart_layernorm_mlp(recipe_name):
    fp8_recipe = RECIPES[recipe_name]()
    delayed, plain = make_twins(
        lambda **kw: te.LayerNormMLP(4096, 16384, params_dtype=BF16, **kw))
    for _ in range(2):
        x = torch.randn(8192, 4096, device="cuda", dtype=BF16)
        dy = torch.randn_like(x)
        plain.zero_grad(set_to_none=True)
        delayed.zero_grad(set_to_none=True)
        want = input_gradient(plain, x, dy, fp8_recipe)
        got = input_gradient(delayed, x, dy, fp8_recipe)
        check_dgrad_half(delayed, plain, got, want)
        delayed.backward_dw()
        check_weights_equal(delayed, plain)


def test_deepcopy_and_refusals():
    module = te.Linear(256, 256, params_dtype=BF16, delay_wgrad_compute=True)
    x = torch.randn(64, 256, device="cuda", dtype=BF16, requires_grad=True)
    module(x).sum().backward()
    twin = copy.deepcopy(module)  # pending work stays with the original
    twin.backward_dw()
    assert twin.weight.grad is None
    module.backward_dw()
    assert module.weight.grad is not None
    with pytest.raises(NotImplementedError, match="delay_wgrad_compute"):
        te.make_graphed_callables(module, (x,))
