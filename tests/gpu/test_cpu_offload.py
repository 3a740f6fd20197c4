"""GPU tests of activation offloading: TE's get_cpu_offload_context, and
PyTorch's torch.autograd.graph.save_on_cpu over tejit's modules (their
saved buffers are moved and handed back elsewhere: the backward must read
them where autograd hands them back).

    PYTHONPATH=python python3 -m pytest tests/gpu/test_cpu_offload.py

On fresh random data, a stack of layers runs forward and backward with and
without offloading (twins with the same parameters; dropout off, so the
programs are deterministic):
- the outputs, input gradients and every parameter gradient are equal bit
  for bit (TransformerLayer under DelayedScaling and without a recipe,
  LayerNormMLP under current scaling);
- with get_cpu_offload_context(num_layers=3, model_layers=4) the GPU
  memory held from the end of the forward to the backward falls by at
  least half of what the three offloaded layers saved;
- num_layers outside [0, model_layers) and double_buffering are refused.
"""
import copy

import pytest

from gpu_test_support import hybrid, perturb, run_seed, seed_per_test, torch

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_cpu_offload")
fresh_seed = seed_per_test(SEED)
BF16 = torch.bfloat16
LAYERS = 4


def transformer_stack():
    return torch.nn.ModuleList(
        te.TransformerLayer(1024, 4096, 16, hidden_dropout=0.0,
                            attention_dropout=0.0, params_dtype=BF16)
        for _ in range(LAYERS))


def mlp_stack():
    return torch.nn.ModuleList(te.LayerNormMLP(1024, 4096, params_dtype=BF16)
                               for _ in range(LAYERS))


STACKS = {"TransformerLayer": (transformer_stack, (512, 2, 1024)),
          "LayerNormMLP": (mlp_stack, (1024, 1024))}
RECIPES = {"delayed": hybrid, "none": lambda: None,
           "current": lambda: recipe.Float8CurrentScaling()}


def forward(stack, x, fp8_recipe, context=None, sync=None):
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        for layer in stack:
            if context is None:
                x = layer(x)
            else:
                with context:
                    x = layer(x)
                x = sync(x)
    return x


def step(stack, x, dy, fp8_recipe, context=None, sync=None):
    """Forward (each layer inside `context`, its output through `sync`,
    when given), backward; returns (output, input gradient, memory
    the forward left allocated)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    x = x.detach().requires_grad_()
    out = forward(stack, x, fp8_recipe, context, sync)
    torch.cuda.synchronize()
    # Blocks freed behind a side stream return at the next allocation.
    torch.empty(1, device="cuda")
    held = torch.cuda.memory_allocated() - before
    out.backward(dy)
    return out.detach(), x.grad, held


def check_equal(a, b, first, second):
    (out_a, grad_a, _), (out_b, grad_b, _) = first, second
    assert torch.equal(out_a, out_b), "outputs differ"
    assert torch.equal(grad_a, grad_b), "input gradients differ"
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad), f"gradient of {name} differs"


def twins(stack_name):
    make, shape = STACKS[stack_name]
    plain = make().cuda()
    perturb(plain)
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    return plain, copy.deepcopy(plain), x, torch.randn_like(x)


@pytest.mark.parametrize("stack_name,recipe_name",
                         [("TransformerLayer", "delayed"),
                          ("TransformerLayer", "none"),
                          ("LayerNormMLP", "current")])
def test_get_cpu_offload_context(stack_name, recipe_name):
    plain, offloaded, x, dy = twins(stack_name)
    fp8_recipe = RECIPES[recipe_name]()
    context, sync = te.get_cpu_offload_context(
        enabled=True, num_layers=LAYERS - 1, model_layers=LAYERS)
    # Two steps each (the first compiles; the FP8 state moves alike).
    for _ in range(2):
        for module in (plain, offloaded):
            module.zero_grad(set_to_none=True)
        first = step(plain, x, dy, fp8_recipe)
        second = step(offloaded, x, dy, fp8_recipe, context, sync)
        check_equal(plain, offloaded, first, second)
    held_plain, held_offloaded = first[2], second[2]
    print(f"{stack_name} [{recipe_name}]: held after the forward "
          f"{held_plain / 2**20:.0f} MiB without offloading, "
          f"{held_offloaded / 2**20:.0f} MiB with 3 of 4 layers offloaded")
    # 3 of 4 layers' saved tensors leave; at least half of that must show.
    assert held_offloaded < (1 - 0.5 * 0.75) * held_plain, \
        (held_plain, held_offloaded)


@pytest.mark.parametrize("recipe_name", ["delayed", "current"])
def test_torch_save_on_cpu(recipe_name):
    """PyTorch's own offloading: the saved buffers come back as new
    tensors, which the backward must read (not the forward's addresses)."""
    plain, offloaded, x, dy = twins("TransformerLayer")
    fp8_recipe = RECIPES[recipe_name]()
    for _ in range(2):
        for module in (plain, offloaded):
            module.zero_grad(set_to_none=True)
        first = step(plain, x, dy, fp8_recipe)
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            second = step(offloaded, x, dy, fp8_recipe)
        check_equal(plain, offloaded, first, second)


def test_refusals():
    context, sync = te.get_cpu_offload_context(enabled=False)
    t = torch.ones(2)
    assert sync(t) is t
    with pytest.raises(ValueError, match="num_layers"):
        te.get_cpu_offload_context(enabled=True, num_layers=4,
                                   model_layers=4)
    with pytest.raises(NotImplementedError, match="double_buffering"):
        te.get_cpu_offload_context(enabled=True, double_buffering=True)
