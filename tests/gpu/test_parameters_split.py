"""GPU tests of TE's `parameters_split` on Linear and LayerNormLinear (the
GEMM's weight and bias registered as several parameters, row blocks):

    PYTHONPATH=python python3 -m pytest tests/gpu/test_parameters_split.py

On fresh random data, a split module against an unsplit twin holding the
same rows in one `weight` / `bias` (the same program): outputs and input
gradients bit-equal, each part's gradient bit-equal to the twin's rows,
without a recipe (also against a float64 x W^T + b) and under
DelayedScaling and Float8CurrentScaling; TE's names (tuple and dict
forms, trailing underscores stripped) and sizes; the parts stay views of
one buffer after .to() and deepcopy (the program gets no copy) and are
concatenated per call when load_state_dict(assign=True) separates them;
return_bias returns the joined bias and its gradient reaches the parts;
Megatron-LM's main_grads (fuse_wgrad_accumulation) and delay_wgrad_compute's
backward_dw give each part its rows; and the clear errors.
"""
import copy

import pytest

from gpu_test_support import hybrid, perturb, run_seed, seed_per_test, torch

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402
from tejit.pytorch.module._groups import adjacent  # noqa: E402

SEED = run_seed("test_parameters_split")
fresh_seed = seed_per_test(SEED)
BF16 = torch.bfloat16
RECIPES = {"none": lambda: None, "delayed": hybrid,
           "current": lambda: recipe.Float8CurrentScaling()}
SPLITS = {"tuple": (("query_", "key_", "value_"), [256, 256, 256]),
          "dict": ({"q": 512, "kv": 256}, [512, 256])}


def make(kind, split, **kwargs):
    if kind == "Linear":
        return te.Linear(256, 768, parameters_split=split,
                         params_dtype=BF16, **kwargs)
    return te.LayerNormLinear(256, 768, parameters_split=split,
                              params_dtype=BF16, **kwargs)


def names_of(split):
    keys = split if not isinstance(split, dict) else list(split)
    return [key.rstrip("_") for key in keys]


def twin_of(module, split, kind, **kwargs):
    """An unsplit module with `module`'s rows in one weight / bias."""
    twin = make(kind, None, **kwargs)
    prefixes = names_of(split)
    with torch.no_grad():
        for kind_name in ("weight", "bias"):
            getattr(twin, kind_name).copy_(torch.cat(
                [getattr(module, f"{p}_{kind_name}") for p in prefixes]))
        for name, parameter in twin.named_parameters():
            if name.startswith("layer_norm"):
                parameter.copy_(getattr(module, name))
    return twin


def step(module, x, dy, fp8_recipe, **forward):
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(x, **forward)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(dy)
    return out.detach(), x.grad


@pytest.mark.parametrize("kind", ["Linear", "LayerNormLinear"])
@pytest.mark.parametrize("split_name", sorted(SPLITS))
@pytest.mark.parametrize("recipe_name", sorted(RECIPES))
def test_split_matches_unsplit_twin(kind, split_name, recipe_name):
    split, sizes = SPLITS[split_name]
    module = make(kind, split)
    perturb(module)
    prefixes = names_of(split)
    expected = [f"{p}_{k}" for k in ("weight", "bias") for p in prefixes]
    got_names = [n for n, _ in module.named_parameters()
                 if not n.startswith("layer_norm")]
    assert sorted(got_names) == sorted(expected)
    assert [getattr(module, f"{p}_weight").shape[0]
            for p in prefixes] == sizes
    assert adjacent([getattr(module, f"{p}_weight") for p in prefixes])
    twin = twin_of(module, split, kind)
    x = torch.randn(128, 256, device="cuda", dtype=BF16)
    dy = torch.randn(128, 768, device="cuda", dtype=BF16)
    for _ in range(2):  # the second step runs on updated FP8 scales
        fp8_recipe = RECIPES[recipe_name]()
        out, dx = step(module, x, dy, fp8_recipe)
        want, want_dx = step(twin, x, dy, RECIPES[recipe_name]())
        assert torch.equal(out, want)
        assert torch.equal(dx, want_dx)
    for kind_name in ("weight", "bias"):
        rows = getattr(twin, kind_name).grad.split(sizes)
        for prefix, want_rows in zip(prefixes, rows):
            assert torch.equal(getattr(module, f"{prefix}_{kind_name}").grad,
                               want_rows), f"{prefix}_{kind_name}"
    if kind == "Linear" and recipe_name == "none":
        weight = torch.cat([getattr(module, f"{p}_weight")
                            for p in prefixes]).double()
        bias = torch.cat([getattr(module, f"{p}_bias")
                          for p in prefixes]).double()
        reference = x.double() @ weight.T + bias
        error = ((out.double() - reference).norm()
                 / reference.norm()).item()
        assert error < 1e-2, f"output rel L2 {error} against float64"


def test_copies_keep_one_buffer_and_separated_parts_still_run():
    split, _ = SPLITS["tuple"]
    module = make("Linear", split)
    prefixes = names_of(split)

    def parts(m):
        return [getattr(m, f"{p}_weight") for p in prefixes]
    for copied in (copy.deepcopy(module), module.float().to(BF16)):
        assert adjacent(parts(copied))
    # Separate tensors (assign=True): concatenated per call, same result.
    x = torch.randn(64, 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        want = module(x)
    state = {k: v.clone() for k, v in module.state_dict().items()}
    separated = make("Linear", split)
    separated.load_state_dict(state, assign=True)
    assert not adjacent(parts(separated))
    with torch.no_grad():
        assert torch.equal(separated(x), want)


def test_return_bias_reaches_the_parts():
    split, sizes = SPLITS["dict"]
    module = make("LayerNormLinear", split, return_bias=True)
    perturb(module)
    twin = twin_of(module, split, "LayerNormLinear", return_bias=True)
    x = torch.randn(64, 256, device="cuda", dtype=BF16)
    outputs = []
    for m in (module, twin):
        out, bias = m(x)
        assert bias.shape == (768,)
        (out.float().sum() + (bias.float() * 3).sum()).backward()
        outputs.append((out, bias))
    assert torch.equal(outputs[0][0], outputs[1][0])
    assert torch.equal(outputs[0][1], outputs[1][1])
    for prefix, rows in zip(names_of(split), twin.bias.grad.split(sizes)):
        assert torch.equal(getattr(module, f"{prefix}_bias").grad, rows)


def test_main_grads_and_delayed_wgrad_deliver_rows():
    split, sizes = SPLITS["tuple"]
    prefixes = names_of(split)
    x = torch.randn(128, 256, device="cuda", dtype=BF16)
    dy = torch.randn(128, 768, device="cuda", dtype=BF16)
    for options in ({"fuse_wgrad_accumulation": True},
                    {"delay_wgrad_compute": True}):
        module = make("Linear", split, **options)
        twin = twin_of(module, split, "Linear")
        if "fuse_wgrad_accumulation" in options:
            for prefix in prefixes:
                weight = getattr(module, f"{prefix}_weight")
                weight.main_grad = torch.zeros_like(weight,
                                                    dtype=torch.float32)
        step(module, x, dy, hybrid())
        if "delay_wgrad_compute" in options:
            assert getattr(module, f"{prefixes[0]}_weight").grad is None
            module.backward_dw()
        step(twin, x, dy, hybrid())
        for prefix, rows in zip(prefixes, twin.weight.grad.split(sizes)):
            weight = getattr(module, f"{prefix}_weight")
            got = (weight.main_grad if "fuse_wgrad_accumulation" in options
                   else weight.grad)
            # main_grad adds in float32; the twin's gradient is bf16.
            assert torch.allclose(got.float(), rows.float(), rtol=1e-2,
                                  atol=1e-2 * rows.float().abs().max()), \
                f"{options}: {prefix}"
            if "delay_wgrad_compute" in options:
                assert torch.equal(got, rows)


def test_errors_name_parameters_split():
    with pytest.raises(ValueError, match="parameters_split.*evenly"):
        te.Linear(256, 700, parameters_split=("a", "b", "c"))
    with pytest.raises(ValueError, match="add up to 700"):
        te.Linear(256, 768, parameters_split={"a": 500, "b": 200})
    with pytest.raises(ValueError, match="repeat"):
        te.Linear(256, 768, parameters_split=("a", "a_"))
    with pytest.raises(TypeError, match="parameters_split"):
        te.Linear(256, 768, parameters_split="abc")
    with pytest.raises(ValueError, match="0 parameters"):
        te.Linear(256, 768, parameters_split=())
    with te.fp8_model_init():
        with pytest.raises(NotImplementedError, match="fp8_model_init"):
            te.Linear(256, 768, parameters_split=("a", "b"))
