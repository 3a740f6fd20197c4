"""GPU tests of tejit.pytorch.ops (TE's operation fuser, compiled):

    PYTHONPATH=python python3 -m pytest -p no:logging tests/gpu/test_fusible_ops.py

On fresh random data, chains of ops through a training step (forward,
backward with a random output gradient) against a float64 PyTorch model
of the same math on the same parameters, by relative L2 error (TE's bf16
rtol 1.6e-2 as an L2 bound without a recipe; 0.1 for outputs and 0.2 for
gradients under FP8, after two warm-up steps, as test_pytorch_modules.py):
a SwiGLU MLP chain under no recipe, DelayedScaling and Float8CurrentScaling;
the same chain at real size (hidden 4096, FFN 16384, 8192 tokens); extra
inputs and outputs (a residual); ops run as PyTorch code and torch
modules between programs; ops called alone. Also: the chain and
te.LayerNormMLP on the same parameters give bit-equal results (the
compiler builds the same kernels for both); TE's state_dict names and
their loading; accumulate_into_main_grad; torch.compile; clear errors.
"""
import copy
import math

import pytest

from gpu_test_support import hybrid, perturb, run_seed, seed_per_test, torch

import tejit.pytorch as te  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_fusible_ops")
fresh_seed = seed_per_test(SEED)
BF16 = torch.bfloat16
F64 = torch.float64
RECIPES = {"none": lambda: None, "delayed": hybrid,
           "current": lambda: recipe.Float8CurrentScaling()}
L2_NONE, L2_FP8_OUT, L2_FP8_GRAD = 1.6e-2, 0.1, 0.2
WARMUP = 2


def rel_l2(got, want):
    if not torch.isfinite(got).all():
        return math.inf
    want = want.double()
    return ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()


def rms_ref(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def swiglu_mlp_ref(x, p):
    """The float64 model of mlp_chain(): RMSNorm, fc1 (no bias), Bias,
    SwiGLU (TE's halves: silu(first) * second), fc2 + bias."""
    h = F.linear(rms_ref(x, p["0.weight"]), p["1.weight"]) + p["2.bias"]
    a, b = h.chunk(2, dim=-1)
    return F.linear(F.silu(a) * b, p["4.weight"], p["4.bias"])


def mlp_chain(hidden, ffn):
    return te.ops.Sequential(
        te.ops.RMSNorm(hidden, dtype=BF16),
        te.ops.BasicLinear(hidden, 2 * ffn, dtype=BF16),
        te.ops.Bias(2 * ffn, dtype=BF16),
        te.ops.SwiGLU(),
        te.ops.Linear(ffn, hidden, dtype=BF16))


def step(module, inputs, grads, fp8_recipe):
    """A training step: outputs (a tuple) and the inputs' gradients; the
    parameters accumulate theirs."""
    leaves = [t.detach().requires_grad_() for t in inputs]
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(*leaves)
    out = out if isinstance(out, tuple) else (out,)
    torch.autograd.backward(out, grads)
    return out, [leaf.grad for leaf in leaves]


def reference(function, module, inputs, grads):
    """`function(*inputs, params)` in float64: outputs, input gradients and
    parameter gradients, by named_parameters() names (an ops.Linear's
    weight and bias are `<key>.weight` / `<key>.bias` there; its
    state_dict has them as its basic ops')."""
    params = {name: p.detach().double().requires_grad_()
              for name, p in module.named_parameters()}
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    out = function(*leaves, params)
    out = out if isinstance(out, tuple) else (out,)
    torch.autograd.backward(out, [g.double() for g in grads])
    return out, [leaf.grad for leaf in leaves], {
        name: p.grad for name, p in params.items()}


def check_against_reference(module, function, inputs, out_grads, fp8_recipe):
    for _ in range(WARMUP if fp8_recipe is not None else 0):
        step(module, inputs, out_grads, fp8_recipe)
    module.zero_grad(set_to_none=True)
    out, dx = step(module, inputs, out_grads, fp8_recipe)
    want, want_dx, want_dp = reference(function, module, inputs, out_grads)
    fp8 = fp8_recipe is not None
    errors = {}
    for index, (got, ref) in enumerate(zip(out, want)):
        errors[f"out{index}"] = (rel_l2(got, ref), L2_FP8_OUT if fp8
                                 else L2_NONE)
    grad_limit = L2_FP8_GRAD if fp8 else L2_NONE
    for index, (got, ref) in enumerate(zip(dx, want_dx)):
        errors[f"d_input{index}"] = (rel_l2(got, ref), grad_limit)
    for name, p in module.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        errors[f"d_{name}"] = (rel_l2(p.grad, want_dp[name]), grad_limit)
    bad = {k: v for k, v in errors.items() if not v[0] < v[1]}
    assert not bad, f"relative L2 above the limit: {bad} (all: {errors})"


@pytest.mark.parametrize("kind", RECIPES)
def test_mlp_chain_against_float64(kind):
    hidden, ffn = 256, 512
    module = mlp_chain(hidden, ffn)
    perturb(module)
    x = torch.randn(64, 4, hidden, device="cuda", dtype=BF16)
    dy = torch.randn_like(x)
    check_against_reference(module, lambda x, p: swiglu_mlp_ref(x, p),
                            [x], [dy], RECIPES[kind]())


def test_mlp_chain_real_size_fp8():
    hidden, ffn, tokens = 4096, 16384, 8192
    module = te.ops.Sequential(
        te.ops.LayerNorm(hidden, dtype=BF16),
        te.ops.Linear(hidden, ffn, dtype=BF16), te.ops.GELU(),
        te.ops.Linear(ffn, hidden, dtype=BF16))
    perturb(module)
    x = torch.randn(tokens // 4, 4, hidden, device="cuda", dtype=BF16)
    dy = torch.randn_like(x)

    def ref(x, p):
        n = F.layer_norm(x, (hidden,), p["0.weight"], p["0.bias"], 1e-5)
        h = F.linear(n, p["1.weight"], p["1.bias"])
        return F.linear(F.gelu(h, approximate="tanh"), p["3.weight"],
                        p["3.bias"])
    check_against_reference(module, ref, [x], [dy], hybrid())


@pytest.mark.parametrize("kind", ["none", "delayed"])
def test_chain_is_layernorm_mlp(kind):
    """The chain compiles to LayerNormMLP's kernels: bit-equal results."""
    hidden, ffn = 256, 512
    mlp = te.LayerNormMLP(hidden, ffn, normalization="RMSNorm",
                          activation="swiglu", params_dtype=BF16)
    perturb(mlp)
    chain = te.ops.Sequential(
        te.ops.RMSNorm(hidden, dtype=BF16),
        te.ops.Linear(hidden, 2 * ffn, dtype=BF16), te.ops.SwiGLU(),
        te.ops.Linear(ffn, hidden, dtype=BF16))
    with torch.no_grad():
        chain[0].weight.copy_(mlp.layer_norm_weight)
        chain[1].weight.copy_(mlp.fc1_weight)
        chain[1].bias.copy_(mlp.fc1_bias)
        chain[3].weight.copy_(mlp.fc2_weight)
        chain[3].bias.copy_(mlp.fc2_bias)
    x = torch.randn(128, 2, hidden, device="cuda", dtype=BF16)
    dy = torch.randn_like(x)
    fp8_recipe = RECIPES[kind]()
    for _ in range(3):
        mlp.zero_grad(set_to_none=True)
        chain.zero_grad(set_to_none=True)
        (want,), (want_dx,) = step(mlp, [x], [dy], fp8_recipe)
        (got,), (got_dx,) = step(chain, [x], [dy], fp8_recipe)
        assert torch.equal(got, want)
        assert torch.equal(got_dx, want_dx)
    pairs = {"0.weight": "layer_norm_weight", "1.weight": "fc1_weight",
             "1.bias": "fc1_bias", "3.weight": "fc2_weight",
             "3.bias": "fc2_bias"}
    for ours, theirs in pairs.items():
        assert torch.equal(chain.get_parameter(ours).grad,
                           mlp.get_parameter(theirs).grad), ours


@pytest.mark.parametrize("kind", ["none", "current"])
def test_extra_input_and_output(kind):
    """A residual block: the normalized input as an extra output, the
    residual added from an extra input; both get their gradients."""
    hidden = 128
    module = te.ops.Sequential(
        te.ops.LayerNorm(hidden, dtype=BF16), te.ops.MakeExtraOutput(),
        te.ops.Linear(hidden, 2 * hidden, dtype=BF16), te.ops.GEGLU(),
        te.ops.Linear(hidden, hidden, dtype=BF16), te.ops.AddExtraInput())
    perturb(module)
    x = torch.randn(96, hidden, device="cuda", dtype=BF16)
    residual = torch.randn_like(x)
    grads = [torch.randn_like(x), torch.randn_like(x)]

    def ref(x, residual, p):
        n = F.layer_norm(x, (hidden,), p["0.weight"], p["0.bias"], 1e-5)
        h = F.linear(n, p["2.weight"], p["2.bias"])
        a, b = h.chunk(2, dim=-1)
        y = F.linear(F.gelu(a, approximate="tanh") * b, p["4.weight"],
                     p["4.bias"])
        return y + residual, n
    check_against_reference(module, ref, [x, residual], grads,
                            RECIPES[kind]())


def test_pytorch_ops_between_programs():
    """Ops that run as PyTorch code and a torch module split the chain into
    programs; the whole still trains as its float64 model. (Smooth
    activations only: ReLU's step derivative flips whole gradient elements
    where bf16 and float64 disagree on a sign, 4% relative L2 here.)"""
    hidden = 64
    module = te.ops.Sequential(
        te.ops.Linear(hidden, hidden, dtype=BF16), te.ops.ConstantScale(0.5),
        te.ops.Reshape((-1, hidden)), torch.nn.Tanh(), te.ops.Identity(),
        te.ops.Quantize(), te.ops.BasicLinear(hidden, hidden, dtype=BF16),
        te.ops.Dropout(0.0), te.ops.SiLU())
    perturb(module)
    x = torch.randn(8, 16, hidden, device="cuda", dtype=BF16)
    dy = torch.randn(128, hidden, device="cuda", dtype=BF16)

    def ref(x, p):
        h = F.linear(x, p["0.weight"], p["0.bias"]) * 0.5
        h = torch.tanh(h.reshape(-1, hidden))
        return F.silu(F.linear(h, p["6.weight"]))
    params = dict(module.named_parameters())
    assert set(params) == {"0.weight", "0.bias", "6.weight"}
    check_against_reference(module, ref, [x], [dy], None)


def test_ops_called_alone():
    x = torch.randn(32, 48, device="cuda", dtype=BF16, requires_grad=True)
    gelu = te.ops.GELU()
    y = gelu(x)
    want = F.gelu(x.detach().double(), approximate="tanh")
    assert rel_l2(y, want) < L2_NONE
    y.sum().backward()
    assert x.grad is not None
    norm = te.ops.RMSNorm(48, dtype=BF16)
    assert rel_l2(norm(x), rms_ref(x.detach().double(), 1.0)) < L2_NONE
    linear = te.ops.Linear(48, 16, dtype=BF16)
    perturb(linear)
    want = F.linear(x.detach().double(), linear.weight.double(),
                    linear.bias.double())
    assert rel_l2(linear(x), want) < L2_NONE
    # Another width through the same activation compiles its own program.
    z = torch.randn(8, 80, device="cuda", dtype=BF16)
    assert rel_l2(gelu(z), F.gelu(z.double(), approximate="tanh")) < L2_NONE


def test_state_dict_names_and_loading():
    chain = mlp_chain(64, 128)
    perturb(chain)
    state = chain.state_dict()
    assert set(state) == {"0.weight", "1.weight", "2.bias",
                          "4.basic_ops.0.weight", "4.basic_ops.1.bias"}
    other = mlp_chain(64, 128)
    other.load_state_dict(state)
    x = torch.randn(16, 64, device="cuda", dtype=BF16)
    assert torch.equal(other(x), chain(x))
    # A Linear loads from its own names too.
    linear = te.ops.Linear(64, 64, dtype=BF16)
    linear.load_state_dict({"weight": state["0.weight"].expand(64, 64),
                            "bias": state["2.bias"][:64]}, strict=False)
    assert torch.equal(linear.basic_ops[0].weight,
                       state["0.weight"].expand(64, 64))
    copied = copy.deepcopy(chain)
    assert torch.equal(copied(x), chain(x))


def test_main_grad_accumulation():
    hidden = 64
    linear = te.ops.Linear(hidden, hidden, dtype=BF16,
                           accumulate_into_main_grad=True)
    weight = linear.weight
    weight.main_grad = torch.zeros(hidden, hidden, device="cuda",
                                   dtype=torch.float32)
    x = torch.randn(32, hidden, device="cuda", dtype=BF16)
    dy = torch.randn_like(x)
    want = (dy.double().t() @ x.double())
    for count in (1, 2):
        out = linear(x)
        out.backward(dy)
        assert rel_l2(weight.main_grad, count * want) < L2_NONE


@pytest.mark.parametrize("kind", ["none", "delayed"])
def test_cuda_graphs(kind):
    """make_graphed_callables of a chain: replays equal an eager twin, bit
    for bit, step after step (FP8 state included: the warm-up's is undone
    for the chain's program too)."""
    eager = mlp_chain(64, 128)
    perturb(eager)
    graphed = copy.deepcopy(eager)
    sample = torch.randn(32, 64, device="cuda", dtype=BF16,
                         requires_grad=True)
    fp8_recipe = RECIPES[kind]()
    graphed = te.make_graphed_callables(
        graphed, (sample,), fp8_enabled=fp8_recipe is not None,
        fp8_recipe=fp8_recipe)
    for index in range(3):
        x = torch.randn(32, 64, device="cuda", dtype=BF16)
        dy = torch.randn_like(x)
        eager.zero_grad(set_to_none=True)
        graphed.zero_grad(set_to_none=True)
        (want,), (want_dx,) = step(eager, [x], [dy], fp8_recipe)
        (got,), (got_dx,) = step(graphed, [x], [dy], fp8_recipe)
        assert torch.equal(got, want), f"output, step {index}"
        assert torch.equal(got_dx, want_dx), f"input gradient, step {index}"
        for (name, p), q in zip(eager.named_parameters(),
                                graphed.parameters()):
            assert torch.equal(q.grad, p.grad), f"{name}, step {index}"


def test_checkpoint_recomputes_the_chain():
    """te.checkpoint around a chain: the same step as without it (twins
    from one chain, so both start from the same FP8 state)."""
    chain = mlp_chain(64, 128)
    perturb(chain)
    plain, checkpointed = copy.deepcopy(chain), copy.deepcopy(chain)
    x = torch.randn(32, 64, device="cuda", dtype=BF16)
    dy = torch.randn_like(x)
    (want,), (want_dx,) = step(plain, [x], [dy], hybrid())
    (got,), (got_dx,) = step(lambda t: te.checkpoint(checkpointed, t), [x],
                             [dy], hybrid())
    assert torch.equal(got, want)
    assert torch.equal(got_dx, want_dx)
    for p, q in zip(plain.parameters(), checkpointed.parameters()):
        assert torch.equal(q.grad, p.grad)


def test_torch_compile():
    chain = mlp_chain(64, 128)
    x = torch.randn(16, 64, device="cuda", dtype=BF16)
    compiled = torch.compile(lambda t: chain(t) * 2)
    assert torch.equal(compiled(x), chain(x) * 2)


def test_errors():
    chain = mlp_chain(64, 128)
    with pytest.raises(ValueError, match=r"\[\.\.\., 64\]"):
        chain(torch.randn(4, 32, device="cuda", dtype=BF16))
    with pytest.raises(ValueError, match="op '1'"):
        te.ops.Sequential(te.ops.Linear(64, 32, dtype=BF16),
                          te.ops.Linear(64, 32, dtype=BF16))(
            torch.randn(4, 64, device="cuda", dtype=BF16))
    with pytest.raises(ValueError, match="two halves"):
        te.ops.SwiGLU()(torch.randn(4, 33, device="cuda", dtype=BF16))
    residual = te.ops.Sequential(te.ops.GELU(), te.ops.AddExtraInput())
    x = torch.randn(4, 32, device="cuda", dtype=BF16)
    with pytest.raises(ValueError, match="1 extra input"):
        residual(x)
    with pytest.raises(ValueError, match="shape"):
        residual(x, torch.randn(4, 16, device="cuda", dtype=BF16))
    with pytest.raises(NotImplementedError, match="in_place"):
        te.ops.AddExtraInput(in_place=True)
    with pytest.raises(NotImplementedError, match="fp8_model_init"):
        with te.fp8_model_init():
            te.ops.BasicLinear(64, 64)
    with pytest.raises(ValueError, match="tensor_parallel_mode"):
        te.ops.Linear(64, 64, tensor_parallel_mode="diagonal")
    with pytest.raises(TypeError, match="float32"):
        mlp_chain(64, 128)(torch.randn(4, 64, device="cuda"))
