"""GPU tests of LayerNormMLP(checkpoint=True), TE's recomputing MLP.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_layernorm_mlp_checkpoint.py

A checkpointed LayerNormMLP keeps only its input for the backward and
recomputes its forward there (tejit.pytorch.checkpoint), so it must equal a
twin with checkpoint=False bit for bit over several steps on fresh random
data (outputs, input and parameter gradients, the FP8 state afterwards),
without a recipe, under DelayedScaling HYBRID and Float8CurrentScaling,
with return_bias and return_layernorm_output; and at the quickstart's sizes
(hidden 4096, FFN 16384, 8192 tokens) it must hold much less memory between
forward and backward.
"""
import copy

import pytest

from gpu_test_support import hybrid, perturb, run_seed, torch

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_layernorm_mlp_checkpoint")
BF16 = torch.bfloat16
RECIPES = {"none": lambda: None, "delayed": hybrid,
           "current": lambda: recipe.Float8CurrentScaling(
               fp8_format=recipe.Format.HYBRID)}


def twins(**kwargs):
    torch.manual_seed(SEED)
    plain = te.LayerNormMLP(256, 1024, params_dtype=BF16, **kwargs)
    perturb(plain)
    checkpointed = copy.deepcopy(plain)
    checkpointed.checkpoint = True
    return plain, checkpointed


def step(module, x, grads, fp8_recipe):
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        outputs = module(x)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    torch.autograd.backward(outputs, grads[:len(outputs)])
    return ([o.detach().clone() for o in outputs], x.grad.clone(),
            {n: p.grad.clone() for n, p in module.named_parameters()})


@pytest.mark.parametrize("returns", [{}, {"return_bias": True,
                                          "return_layernorm_output": True}],
                         ids=["output", "bias-and-ln-output"])
@pytest.mark.parametrize("fp8", list(RECIPES))
def test_checkpointed_equals_plain(fp8, returns):
    plain, checkpointed = twins(**returns)
    fp8_recipe = RECIPES[fp8]()
    for index in range(3):
        x = torch.randn(64, 256, device="cuda", dtype=BF16)
        grads = [torch.randn_like(x), torch.randn(256, device="cuda",
                                                  dtype=BF16),
                 torch.randn_like(x)]
        want = step(plain, x, grads, fp8_recipe)
        got = step(checkpointed, x, grads, fp8_recipe)
        for a, b in zip(got[0], want[0]):
            assert torch.equal(a, b), f"output, step {index}"
        assert torch.equal(got[1], want[1]), f"input gradient, step {index}"
        for name, grad in want[2].items():
            assert torch.equal(got[2][name], grad), \
                f"gradient of {name}, step {index}"
    want_state = plain.state_dict()
    for name, value in checkpointed.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, want_state[name]), name


def test_full_size_keeps_less_memory():
    """Memory held from the forward to the backward (what it saves), and
    both step times (printed)."""
    torch.manual_seed(SEED)
    plain = te.LayerNormMLP(4096, 16384, params_dtype=BF16)
    checkpointed = copy.deepcopy(plain)
    checkpointed.checkpoint = True
    x = torch.randn(8192, 4096, device="cuda", dtype=BF16,
                    requires_grad=True)
    dy = torch.randn_like(x)
    held = {}
    for name, module in (("plain", plain), ("checkpointed", checkpointed)):
        for _ in range(2):  # compile, scales past their first step
            with te.fp8_autocast(enabled=True, fp8_recipe=hybrid()):
                module(x).backward(dy)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        with te.fp8_autocast(enabled=True, fp8_recipe=hybrid()):
            out = module(x)
        held[name] = torch.cuda.memory_allocated() - before
        out.backward(dy)
        del out
    mib = {k: v / 2**20 for k, v in held.items()}
    print(f"LayerNormMLP 4096/16384, 8192 tokens, FP8: memory held from "
          f"forward to backward {mib['plain']:.0f} MiB plain, "
          f"{mib['checkpointed']:.0f} MiB checkpointed")
    # The output (64 MiB) stays either way; the plain one also keeps
    # fc1's output, the activation and the FP8 copies (~700 MiB).
    assert held["checkpointed"] < 0.25 * held["plain"], mib
