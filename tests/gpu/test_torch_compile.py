"""tejit.pytorch modules inside torch.compile'd models (what a user of
torch.compile expects of TE layers: the model compiles, TE's modules run
as themselves, results match eager):

    PYTHONPATH=python python3 -m pytest tests/gpu/test_torch_compile.py

A model of torch layers around tejit modules (Linear, LayerNormMLP,
TransformerLayer) is compiled with torch.compile and trained for three
steps beside an eager twin with the same parameters: outputs, input
gradients and parameter gradients agree (relative L2 within bf16's
rounding of the torch layers Inductor fuses differently), without a
recipe and under DelayedScaling, with the autocast outside or inside the
compiled function; the FP8 scaling state advances as in eager. Also
parallel_cross_entropy and the MoE permutation inside a compiled function.
"""
import copy

import pytest

from gpu_test_support import hybrid, run_seed, seed_per_test, torch

import tejit.pytorch as te  # noqa: E402

SEED = run_seed("test_torch_compile")
fresh_seed = seed_per_test(SEED)
BF16 = torch.bfloat16
# Inductor may fuse the torch layers' bias adds and activations in another
# order than eager: a few bf16 roundings apart.
TOLERANCE = 2e-2


def rel_l2(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


class Model(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.inp = torch.nn.Linear(256, 256, dtype=BF16, device="cuda")
        self.block = block
        self.out = te.Linear(256, 256, params_dtype=BF16)

    def forward(self, x):
        x = torch.nn.functional.gelu(self.inp(x))
        return self.out(self.block(x)) * 0.5


BLOCKS = {
    "LayerNormMLP": lambda: te.LayerNormMLP(256, 1024, params_dtype=BF16),
    "TransformerLayer": lambda: te.TransformerLayer(
        256, 1024, 8, hidden_dropout=0.0, attention_dropout=0.0,
        params_dtype=BF16),
}


def steps(step, model, inputs, recipe, inside):
    """Three training steps; (outputs, input grads, parameter grads)."""
    results = []
    for x in inputs:
        x = x.clone().requires_grad_()
        if inside or recipe is None:
            y = step(x)
        else:
            with te.fp8_autocast(fp8_recipe=recipe):
                y = step(x)
        y.float().square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        results.append((y.detach(), x.grad, grads))
    return results


@pytest.mark.parametrize("block", sorted(BLOCKS))
@pytest.mark.parametrize("fp8", ["bf16", "delayed-outside", "delayed-inside"])
def test_compiled_model_matches_eager(block, fp8):
    torch._dynamo.reset()
    model = Model(BLOCKS[block]())
    twin = copy.deepcopy(model)
    recipe = None if fp8 == "bf16" else hybrid()
    inside = fp8 == "delayed-inside"

    def with_autocast(module):
        def step(x):
            with te.fp8_autocast(fp8_recipe=recipe):
                return module(x)
        return step

    compiled = torch.compile(with_autocast(model) if inside else model)
    eager = with_autocast(twin) if inside else twin
    shape = (64, 2, 256) if block == "TransformerLayer" else (128, 256)
    inputs = [torch.randn(shape, device="cuda", dtype=BF16)
              for _ in range(3)]
    got = steps(compiled, model, inputs, recipe, inside)
    want = steps(eager, twin, inputs, recipe, inside)
    for index, ((y, dx, grads), (wy, wdx, wgrads)) in enumerate(
            zip(got, want)):
        assert rel_l2(y, wy) < TOLERANCE, f"step {index} output"
        assert rel_l2(dx, wdx) < TOLERANCE, f"step {index} input grad"
        for (name, _), grad, wgrad in zip(model.named_parameters(), grads,
                                          wgrads):
            assert rel_l2(grad, wgrad) < TOLERANCE, f"step {index} {name}"
    if recipe is not None:
        # The scaling state advanced as in eager: as many amaxes in every
        # history, scales as close as the data.
        state, twin_state = model.state_dict(), twin.state_dict()
        histories = [k for k in state if k.endswith("amax_history")]
        assert histories, "no FP8 state in the state_dict"
        for key in histories:
            rows = (state[key] != 0).any(dim=-1).sum().item()
            assert rows == (twin_state[key] != 0).any(dim=-1).sum().item()
            assert rows >= 3, f"{key}: {rows} amaxes after 3 steps"
            scale = key.replace("amax_history", "scale")
            assert rel_l2(state[scale], twin_state[scale]) < TOLERANCE, scale


def test_functional_ops_in_a_compiled_function():
    """parallel_cross_entropy and the MoE permutation inside a
    torch.compile'd function run as themselves: the loss and the
    gradients agree with eager calls' (Inductor compiles the GELU and the
    head around them)."""
    torch._dynamo.reset()
    tokens, hidden, vocab, experts = 256, 128, 1024, 8
    head = torch.nn.Linear(hidden, vocab, dtype=BF16, device="cuda")
    target = torch.randint(0, vocab, (tokens, 1), device="cuda")
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool,
                              device="cuda")
    chosen = torch.rand(tokens, experts, device="cuda").topk(2).indices
    routing_map.scatter_(1, chosen, True)
    probs = torch.rand(tokens, experts, device="cuda") * routing_map

    def step(x):
        permuted, row_map = te.moe_permute(x, routing_map,
                                           num_out_tokens=2 * tokens)
        moved = te.moe_unpermute(torch.nn.functional.gelu(permuted),
                                 row_map, merging_probs=probs,
                                 restore_shape=x.shape)
        logits = head(moved).view(tokens, 1, vocab)
        return te.parallel_cross_entropy(logits, target, reduce_loss=True)

    x = torch.randn(tokens, hidden, device="cuda", dtype=BF16)
    results = []
    for function in (step, torch.compile(step)):
        leaf = x.clone().requires_grad_()
        loss = function(leaf)
        loss.backward()
        results.append((loss.detach(), leaf.grad, head.weight.grad.clone()))
        head.zero_grad(set_to_none=True)
    for got, want in zip(results[1], results[0]):
        assert rel_l2(got, want) < TOLERANCE
