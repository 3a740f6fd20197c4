#!/usr/bin/env python3
"""GPU tests of tejit.pytorch: the modules through autograd against the
same math in plain PyTorch, the JIT cache, the FP8 meta state in the
state_dict, streams and torch.autocast.

Run on the GPU machine (Python + PyTorch + CUDA), from anywhere:
    python3 tests/gpu/test_pytorch_modules.py [--filter SUBSTR] [--seed N]
Prints one line per check (PASS/FAIL and what it measured) and
"N passed, M failed"; exits 1 on any failure.

Numerics: every module runs a training step (forward, backward with a
random output gradient) in bf16, without a recipe and under
fp8_autocast(DelayedScaling(HYBRID)), and is compared with a float32
autograd model of the layer on the same parameters and input, by relative
L2 error ||got - ref|| / ||ref||:
- no recipe: below 1.6e-2 (TE's bf16 rtol, as an L2 bound: the reference
  does not round where tejit's kernels store bf16, so elementwise bounds
  would flag rounding-point differences; see run_layer_tests.py);
- FP8: below 0.1 for outputs and 0.2 for gradients (run_layer_tests.py's
  FP8-vs-bf16 limits). Two warm-up steps come first: DelayedScaling's first
  step casts with scale 1 (TE's initial state), where weights of std 0.023
  fall into E4M3's subnormals.
The layer suite (run_layer_tests.py) checks the numerics exactly; this one
checks the PyTorch plumbing: names, shapes, gradients reaching the right
parameters, and state.
"""
import argparse
import copy
import io
import math
import random
import sys
import time
import traceback
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
L2_NONE = 1.6e-2
L2_FP8_OUTPUT = 0.1
L2_FP8_GRAD = 0.2
# clamped_swiglu's derivative steps at +-limit: where tejit's fc1 output
# and the float32 reference's lie on two sides of a limit, a whole
# gradient element passes on one side and stops on the other. In bf16 the
# norm's output and fc1's output are rounded (the reference rounds fc1's
# too, clamped_swiglu_ref, but not the norm's), which left 2-4.5% relative
# L2 in every gradient behind the activation on an H200 (0.04-0.5% at
# most in the outputs); under FP8 the inputs' rounding moves many more
# (tests/unit's FP8 bounds for it are 0.4-0.55). The exact check is
# run_layer_tests.py's, whose reference rounds as tejit does.
L2_CLAMPED_GRAD = 0.1
L2_FP8_CLAMPED_GRAD = 0.5
FP8_WARMUP_STEPS = 2


def hybrid():
    return recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                 amax_history_len=16)


def rel_l2(got, want):
    """||got - want|| / ||want||; inf when `got` holds a NaN or inf (an
    element tejit never wrote), so no comparison can pass on NaN."""
    want = want.float()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got.float() - want).norm() / want.norm().clamp_min(1e-30)).item()


# --- the float32 reference models --------------------------------------------


def norm_ref(x, weight, bias, normalization, eps=1e-5,
             zero_centered_gamma=False):
    gamma = 1 + weight if zero_centered_gamma else weight
    if normalization == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
    return F.layer_norm(x, (x.shape[-1],), gamma, bias, eps)


def activation_ref(h, activation, params=None):
    if activation == "gelu":
        return F.gelu(h, approximate="tanh")  # TE's GELU
    if activation == "swiglu":  # act(first half) * second half, as TE
        a, b = h.chunk(2, dim=-1)
        return F.silu(a) * b
    if activation == "clamped_swiglu":
        return clamped_swiglu_ref(h, **params)
    raise ValueError(activation)


def clamped_swiglu_ref(h, limit, alpha, glu_linear_offset,
                       straight_through=False):
    """GPT-OSS's SwiGLU as TE's clamped_swiglu: the first half clamped
    above, the second both ways and offset. fc1's output is rounded to
    bf16 first, as tejit stores it before the activation kernel reads it:
    the clamps' gradients are steps, and float32 values on the other side
    of a limit from the bf16 ones would flip whole gradient elements
    (about 0.25% of them here, 4-5% relative L2 in every gradient behind
    the activation). `straight_through`: the clamps pass gradients
    everywhere (check_clamps_matter's wrong model)."""
    h = h.to(BF16).float()
    a, b = h.chunk(2, dim=-1)

    def clamp(t, low):
        clamped = t.clamp(low, limit)
        return t + (clamped - t).detach() if straight_through else clamped
    a = clamp(a, None)
    return a * torch.sigmoid(alpha * a) * (clamp(b, -limit)
                                           + glu_linear_offset)


def linear_ref(m, x, p):
    if m.return_bias:
        return (F.linear(x, p["weight"]), p["bias"])
    return (F.linear(x, p["weight"], p.get("bias")),)


def norm_module_ref(m, x, p):
    normalization = "RMSNorm" if isinstance(m, te.RMSNorm) else "LayerNorm"
    return (norm_ref(x, p["weight"], p.get("bias"), normalization, m.eps,
                     m.zero_centered_gamma),)


def ln_linear_ref(m, x, p):
    ln = norm_ref(x, p["layer_norm_weight"], p.get("layer_norm_bias"),
                  m.normalization, m.eps, m.zero_centered_gamma)
    out = F.linear(ln, p["weight"], p.get("bias"))
    return (out, ln) if m.return_layernorm_output else (out,)


def mlp_ref(m, x, p):
    ln = norm_ref(x, p["layer_norm_weight"], p.get("layer_norm_bias"),
                  m.normalization, m.eps, m.zero_centered_gamma)
    h = activation_ref(F.linear(ln, p["fc1_weight"], p.get("fc1_bias")),
                       m.activation, m.activation_params)
    return (F.linear(h, p["fc2_weight"], p.get("fc2_bias")),)


# name, module factory, reference, input shape (leading dims vary on
# purpose: [s, b, h], [tokens, h], [a, b, c, h]).
CASES = [
    ("Linear", lambda: te.Linear(256, 384, params_dtype=BF16), linear_ref,
     (64, 2, 256)),
    ("Linear bias=False 2-D input",
     lambda: te.Linear(256, 384, bias=False, params_dtype=BF16), linear_ref,
     (128, 256)),
    ("Linear return_bias",
     lambda: te.Linear(256, 384, return_bias=True, params_dtype=BF16),
     linear_ref, (64, 2, 256)),
    ("LayerNorm", lambda: te.LayerNorm(256, params_dtype=BF16),
     norm_module_ref, (64, 2, 256)),
    ("RMSNorm zero_centered_gamma 4-D input",
     lambda: te.RMSNorm(256, zero_centered_gamma=True, params_dtype=BF16),
     norm_module_ref, (2, 4, 16, 256)),
    ("LayerNormLinear return_layernorm_output",
     lambda: te.LayerNormLinear(256, 768, return_layernorm_output=True,
                                params_dtype=BF16), ln_linear_ref,
     (64, 2, 256)),
    ("LayerNormLinear RMSNorm",
     lambda: te.LayerNormLinear(256, 384, normalization="RMSNorm",
                                params_dtype=BF16), ln_linear_ref,
     (64, 2, 256)),
    ("LayerNormMLP gelu", lambda: te.LayerNormMLP(256, 1024,
                                                  params_dtype=BF16),
     mlp_ref, (64, 2, 256)),
    ("LayerNormMLP swiglu RMSNorm",
     lambda: te.LayerNormMLP(256, 512, activation="swiglu",
                             normalization="RMSNorm", params_dtype=BF16),
     mlp_ref, (64, 2, 256)),
    # fc1's outputs have a standard deviation near 0.4 here: a limit of
    # 0.3 clamps a good part of both halves (and their gradients).
    ("LayerNormMLP clamped_swiglu (GPT-OSS) limit 0.3",
     lambda: te.LayerNormMLP(256, 512, activation="clamped_swiglu",
                             activation_params={"limit": 0.3,
                                                "alpha": 1.702},
                             normalization="RMSNorm", params_dtype=BF16),
     mlp_ref, (64, 2, 256)),
    ("LayerNormMLP clamped_swiglu limit 0.5, no offset",
     lambda: te.LayerNormMLP(256, 512, activation="clamped_swiglu",
                             activation_params={"limit": 0.5, "alpha": 1.0,
                                                "glu_linear_offset": 0.0},
                             params_dtype=BF16),
     mlp_ref, (64, 2, 256)),
]


def perturb(module):
    """Non-trivial biases and norm weights (TE initializes them to 0 and 1,
    which would hide a swapped or missing bias)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif p.dim() == 1:  # a norm weight
                p.add_(0.1 * torch.randn_like(p))


def as_tuple(outputs):
    return outputs if isinstance(outputs, tuple) else (outputs,)


def train_step(module, x, fp8_recipe, grad_outputs=None):
    """One forward + backward; returns (outputs, output grads used)."""
    module.zero_grad(set_to_none=True)
    x.grad = None
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        outputs = as_tuple(module(x))
    if grad_outputs is None:
        grad_outputs = [torch.randn_like(o) for o in outputs]
    sum((o * g).sum() for o, g in zip(outputs, grad_outputs)).backward()
    return outputs, grad_outputs


def reference_step(module, reference, x, grad_outputs):
    params = {name: p.detach().float().requires_grad_()
              for name, p in module.named_parameters()}
    x32 = x.detach().float().requires_grad_()
    outputs = reference(module, x32, params)
    sum((o * g.float()).sum()
        for o, g in zip(outputs, grad_outputs)).backward()
    return outputs, x32.grad, {n: p.grad for n, p in params.items()}


def check_layer(factory, reference, shape, fp8_recipe):
    module = factory()
    perturb(module)
    x = torch.randn(shape, device="cuda", dtype=BF16, requires_grad=True)
    uses_fp8 = fp8_recipe is not None and not isinstance(module, te.LayerNorm)
    for _ in range(FP8_WARMUP_STEPS if uses_fp8 else 0):
        train_step(module, x, fp8_recipe)
    outputs, dys = train_step(module, x, fp8_recipe)
    ref_outputs, ref_dx, ref_grads = reference_step(module, reference, x, dys)
    out_limit = L2_FP8_OUTPUT if uses_fp8 else L2_NONE
    grad_limit = L2_FP8_GRAD if uses_fp8 else L2_NONE
    if getattr(module, "activation", "") == "clamped_swiglu":
        grad_limit = L2_FP8_CLAMPED_GRAD if uses_fp8 else L2_CLAMPED_GRAD
    errors = {}
    for index, (got, want) in enumerate(zip(outputs, ref_outputs)):
        if tuple(got.shape) != tuple(want.shape):
            raise AssertionError(f"output {index} is {tuple(got.shape)}, "
                                 f"expected {tuple(want.shape)}")
        errors[f"out{index}"] = (rel_l2(got, want), out_limit)
    errors["d_input"] = (rel_l2(x.grad, ref_dx), grad_limit)
    for pname, p in module.named_parameters():
        if p.grad is None:
            raise AssertionError(f"no gradient reached {pname}")
        if p.grad.dtype != p.dtype or p.grad.shape != p.shape:
            raise AssertionError(f"{pname}.grad is {p.grad.dtype} "
                                 f"{tuple(p.grad.shape)}")
        errors[f"d_{pname}"] = (rel_l2(p.grad, ref_grads[pname]), grad_limit)
    worst = max(errors, key=lambda k: errors[k][0] / errors[k][1]
                if math.isfinite(errors[k][0]) else math.inf)
    detail = ", ".join(f"{k} {e:.4f}" for k, (e, _) in errors.items())
    if not errors[worst][0] < errors[worst][1]:  # NaN fails too
        raise AssertionError(f"{worst}: rel L2 {errors[worst][0]:.4f} >= "
                             f"{errors[worst][1]} ({detail})")
    return f"rel L2 {detail}"


# --- the other checks --------------------------------------------------------


def check_jit_cache():
    module = te.Linear(256, 256, params_dtype=BF16)
    x = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)

    def calls():
        module(x).sum().backward()
        module(torch.randn(256, 256, device="cuda", dtype=BF16))  # no grad
        with torch.no_grad():
            module(x)
        with te.fp8_autocast(fp8_recipe=hybrid()):
            module(x).sum().backward()

    start = te.compile_count()
    t0 = time.perf_counter()
    calls()
    first = time.perf_counter() - t0
    # training 128, weight-requires-grad 256 (training), inference 128,
    # FP8 training 128.
    if te.compile_count() - start != 4 or len(module._programs) != 4:
        raise AssertionError(f"first round compiled "
                             f"{te.compile_count() - start} programs "
                             f"({len(module._programs)} kept), expected 4")
    calls()
    if te.compile_count() - start != 4:
        raise AssertionError("the second round compiled again")
    # A second module of the same configuration compiles its own program
    # (programs hold state) but takes every kernel from the kernel cache.
    other = te.Linear(256, 256, params_dtype=BF16)
    t0 = time.perf_counter()
    other(x).sum().backward()
    torch.cuda.synchronize()
    second = time.perf_counter() - t0
    return (f"4 programs, none on repeat; first round {first * 1e3:.0f} ms, "
            f"same config in a new module {second * 1e3:.1f} ms")


def fp8_steps(module, x, steps, fp8_recipe):
    for _ in range(steps):
        train_step(module, x, fp8_recipe)


def check_state_dict_round_trip():
    torch.manual_seed(1)
    a = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16, requires_grad=True)
    fp8_steps(a, x, 3, hybrid())
    state = a.state_dict()
    bad = {k: type(v).__name__ for k, v in state.items()
           if not isinstance(v, torch.Tensor)}
    if bad:
        raise AssertionError(f"state_dict values that are not tensors: {bad}")
    meta = sorted(k for k in state if k.startswith("fp8_meta."))
    want = sorted(f"fp8_meta.{d}.{t}" for d in ("fwd", "bwd")
                  for t in ("scale", "scale_inv", "amax_history"))
    if meta != want:
        raise AssertionError(f"meta keys {meta}, expected {want}")
    if torch.all(state["fp8_meta.fwd.scale"] == 1.0):
        raise AssertionError("forward scales are still 1 after 3 steps: the "
                             "state_dict does not read the program's state")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)  # no pickled objects
    torch.manual_seed(2)  # different initial weights
    b = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    b.load_state_dict(loaded)  # strict
    c = copy.deepcopy(a)
    dys = None
    results = []
    for module in (a, b, c):
        outputs, dys = train_step(module, x, hybrid(), dys)
        results.append((outputs[0].detach().clone(),
                        x.grad.clone(),
                        {n: p.grad.clone()
                         for n, p in module.named_parameters()}))
    for label, other in (("loaded", results[1]), ("deepcopy", results[2])):
        same = (torch.equal(results[0][0], other[0]) and
                torch.equal(results[0][1], other[1]) and
                all(torch.equal(g, other[2][n])
                    for n, g in results[0][2].items()))
        if not same:
            raise AssertionError(f"the {label} module's next step differs "
                                 f"from the original's (output rel L2 "
                                 f"{rel_l2(other[0], results[0][0]):.2e})")
    after_a, after_b = a.state_dict(), b.state_dict()
    for key in want:
        if not torch.equal(after_a[key], after_b[key]):
            raise AssertionError(f"{key} differs after the next step")
    return "8 tensors, weights_only load, bit-identical next step (load, " \
           "deepcopy)"


def check_meta_follows_shapes():
    """The module's history continues when a new shape compiles a new
    program: after 3 steps at 128 tokens and 1 at 256, the history holds 4
    amaxes (a fresh program would hold 1); a forward that autograd records
    continues it too, also without a backward (TE updates at the autocast's
    exit while grad is enabled)."""
    module = te.Linear(256, 256, params_dtype=BF16)
    x = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    fp8_steps(module, x, 3, hybrid())
    x2 = torch.randn(256, 256, device="cuda", dtype=BF16, requires_grad=True)
    fp8_steps(module, x2, 1, hybrid())
    with te.fp8_autocast(fp8_recipe=hybrid()):
        module(x)  # recorded (the weight requires grad), never backward
    state = module.state_dict()
    counts = {d: int((state[f"fp8_meta.{d}.amax_history"][:, 0] != 0).sum())
              for d in ("fwd", "bwd")}
    if counts != {"fwd": 5, "bwd": 4}:
        raise AssertionError(f"amaxes in the histories: {counts}, expected "
                             f"fwd 5 (4 steps + 1 recorded forward), bwd 4")
    return f"history rows {counts}"


def check_no_grad_leaves_fp8_state():
    """Inference under torch.no_grad() scales with the state as it stands
    and leaves it alone (TE updates only while autograd records): after
    training steps, no_grad forwards of other data change no FP8 state, and
    the same input gives the same output bit for bit before and after them
    (a request's result does not depend on the requests before it)."""
    module = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    perturb(module)
    x = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    fp8_steps(module, x, 3, hybrid())
    before = {k: v.clone() for k, v in module.state_dict().items()
              if k.startswith("fp8_meta.")}
    probe = torch.randn(128, 256, device="cuda", dtype=BF16)
    outputs = []
    for mode in ("train", "eval"):
        getattr(module, mode)()
        with torch.no_grad(), te.fp8_autocast(fp8_recipe=hybrid()):
            first = module(probe)
            for scale in (10.0, 0.01):  # other data, other amaxes
                module(scale * torch.randn_like(probe))
            again = module(probe)
        if not torch.equal(first, again):
            raise AssertionError(f"{mode} mode: the probe's output changed "
                                 f"after other no_grad forwards")
        outputs.append(first)
    after = module.state_dict()
    for name, value in before.items():
        if not torch.equal(after[name], value):
            raise AssertionError(f"{name} changed under torch.no_grad()")
    train_step(module, x, hybrid())  # and training moves it on again
    if torch.equal(module.state_dict()["fp8_meta.fwd.amax_history"],
                   before["fp8_meta.fwd.amax_history"]):
        raise AssertionError("a training step after no_grad forwards did not "
                             "update the state")
    return f"{len(before)} state tensors unchanged over 6 no_grad forwards"


def check_activation_checkpointing():
    """te.checkpoint recomputes the forward in the backward with the first
    forward's FP8 autocast, FP8 state and dropout masks: 3 FP8 steps of a
    checkpointed TransformerLayer with hidden and attention dropout equal a
    plain twin's bit for bit (outputs, input and parameter gradients, FP8
    state after the steps); a checkpointed LayerNormMLP whose input needs
    no gradient still gives its parameters theirs; tensor-parallel
    arguments are refused."""
    def run(make, shape, checkpointed, x_grad):
        torch.manual_seed(1234)  # the same parameters and dropout seeds
        module = make()
        perturb(module)
        generator = torch.Generator(device="cuda")
        generator.manual_seed(99)
        steps = []
        for _ in range(3):
            x = torch.randn(*shape, device="cuda", dtype=BF16,
                            generator=generator).requires_grad_(x_grad)
            dy = torch.randn(*shape, device="cuda", dtype=BF16,
                             generator=generator)
            module.zero_grad(set_to_none=True)
            with te.fp8_autocast(enabled=True, fp8_recipe=hybrid()):
                out = te.checkpoint(module, x) if checkpointed else module(x)
            out.backward(dy)
            steps.append([out.detach().clone()]
                         + ([x.grad.clone()] if x_grad else [])
                         + [p.grad.clone() for p in module.parameters()])
        state = [v.clone() for k, v in module.state_dict().items()
                 if k.startswith("fp8_meta.")]
        return steps, state

    cases = [
        ("TransformerLayer with dropout", lambda: te.TransformerLayer(
            256, 1024, 4, hidden_dropout=0.1, attention_dropout=0.1,
            params_dtype=BF16), (64, 2, 256), True),
        ("LayerNormMLP, input without grad", lambda: te.LayerNormMLP(
            256, 1024, params_dtype=BF16), (128, 256), False),
    ]
    for what, make, shape, x_grad in cases:
        plain = run(make, shape, False, x_grad)
        checkpointed = run(make, shape, True, x_grad)
        for index, (want, got) in enumerate(zip(plain[0], checkpointed[0])):
            for number, (a, b) in enumerate(zip(want, got)):
                if not torch.equal(a, b):
                    raise AssertionError(f"{what}: step {index}, tensor "
                                         f"{number} differs from the plain "
                                         f"step's")
        if not all(torch.equal(a, b) for a, b in zip(plain[1],
                                                     checkpointed[1])):
            raise AssertionError(f"{what}: FP8 state after the steps")
        if len(plain[1]) != 6:
            raise AssertionError(f"{what}: {len(plain[1])} FP8 state tensors")
    # Randomness of the caller's own under an RNG tracker (Megatron's way):
    # the recomputation must draw what the first forward drew.
    tracked = []
    for checkpointed in (False, True):
        torch.manual_seed(7)
        module = te.Linear(64, 64, params_dtype=BF16)
        tracker = _rng_tracker(seed=11)

        def function(x):
            with tracker.fork():
                keep = torch.rand_like(x, dtype=torch.float32) > 0.5
            return module(x * keep)

        x = torch.randn(16, 64, device="cuda", dtype=BF16, requires_grad=True)
        with te.fp8_autocast(enabled=True, fp8_recipe=hybrid()):
            out = (te.checkpoint(function, x,
                                 get_rng_state_tracker=lambda: tracker,
                                 tp_group=None)
                   if checkpointed else function(x))
        out.backward(torch.ones_like(out))
        tracked.append([out.detach(), x.grad, module.weight.grad])
    if not all(torch.equal(a, b) for a, b in zip(*tracked)):
        raise AssertionError("an RNG tracker's draws differ in the "
                             "recomputation")
    try:
        te.checkpoint(module, x, distribute_saved_activations=True)
    except NotImplementedError:
        pass
    else:
        raise AssertionError("distribute_saved_activations=True accepted")
    # torch.utils.checkpoint recomputes outside the FP8 autocast: warned;
    # te.checkpoint: not.
    import torch.utils.checkpoint as torch_checkpoint  # noqa: PLC0415
    for use_torch, want in ((False, 0), (True, 1)):
        module = te.LayerNormMLP(64, 256, params_dtype=BF16)
        x = torch.randn(32, 64, device="cuda", dtype=BF16, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                with te.fp8_autocast(enabled=True, fp8_recipe=hybrid()):
                    out = (torch_checkpoint.checkpoint(module, x,
                                                       use_reentrant=True)
                           if use_torch else te.checkpoint(module, x))
                out.sum().backward()
        got = sum("outside fp8_autocast" in str(w.message) for w in caught)
        if got != want:
            raise AssertionError(f"{'torch.utils' if use_torch else 'te'}"
                                 f".checkpoint: {got} recompute warnings, "
                                 f"expected {want}")
    return (f"{len(cases)} modules x 3 steps and an RNG tracker's draws "
            f"bit-identical to plain steps")


def _rng_tracker(seed):
    """TE's CUDA RNG tracker with Megatron's model-parallel stream."""
    tracker = te.distributed.CudaRNGStatesTracker()
    tracker.add("model-parallel-rng", seed)
    return tracker


def check_clamps_matter():
    """The clamped_swiglu cases can fail: at their sizes and limits
    dropping the clamps, changing alpha or the offset moves the reference's
    output by more than 3x the bf16 output bound, and clamps that pass
    gradients everywhere move its input gradient by more than 3x the bf16
    clamped gradient bound (so the bf16 cases would fail a kernel that did
    any of these), and tejit's LayerNormMLP in bf16 follows the clamped
    reference."""
    gaps = []
    for name, factory, reference, shape in CASES:
        if "clamped_swiglu" not in name:
            continue
        module = factory()
        perturb(module)
        x = torch.randn(shape, device="cuda", dtype=BF16, requires_grad=True)
        outputs, dys = train_step(module, x, None)
        want, want_dx, _ = reference_step(module, reference, x, dys)
        params = module.activation_params
        # (label, parameters, compare the input gradient, not the output)
        variants = [("no clamp", dict(params, limit=1e30), False),
                    ("alpha x 3", dict(params, alpha=3 * params["alpha"]),
                     False),
                    ("offset + 1", dict(params, glu_linear_offset=params[
                        "glu_linear_offset"] + 1.0), False),
                    ("gradient through the clamps",
                     dict(params, straight_through=True), True)]
        for label, changed, backward in variants:
            module.activation_params = changed
            other, other_dx, _ = reference_step(module, reference, x, dys)
            module.activation_params = params
            gap = (rel_l2(other_dx, want_dx) if backward
                   else rel_l2(other[0], want[0]))
            if not gap > 3 * (L2_CLAMPED_GRAD if backward else L2_NONE):
                raise AssertionError(f"{name}: {label} moves the reference "
                                     f"by only {gap:.4f}")
            gaps.append(f"{label} {gap:.3f}")
        error = rel_l2(outputs[0], want[0])
        if not error < L2_NONE:
            raise AssertionError(f"{name}: output rel L2 {error:.4f}")
    return "reference moves by " + ", ".join(gaps)


def check_norms_ignore_fp8():
    module = te.LayerNorm(256, params_dtype=BF16)
    x = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    module(x).sum().backward()
    start = te.compile_count()
    with te.fp8_autocast(fp8_recipe=hybrid()):
        module(x).sum().backward()
    if te.compile_count() != start or module.state_dict().keys() != {
            "weight", "bias"}:
        raise AssertionError("LayerNorm compiled an FP8 program or has meta")
    return "no FP8 program, no meta"


def check_interleaved_forwards():
    """Two forwards, then one backward of both (gradient accumulation, a
    module used twice): caller-kept saved tensors."""
    module = te.LayerNormLinear(256, 384, params_dtype=BF16)
    perturb(module)
    x1 = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    x2 = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    y1, y2 = module(x1), module(x2)
    d1, d2 = torch.randn_like(y1), torch.randn_like(y2)
    ((y1 * d1).sum() + (y2 * d2).sum()).backward()
    params = {n: p.detach().float().requires_grad_()
              for n, p in module.named_parameters()}
    r1 = ln_linear_ref(module, x1.detach().float(), params)[0]
    r2 = ln_linear_ref(module, x2.detach().float(), params)[0]
    ((r1 * d1.float()).sum() + (r2 * d2.float()).sum()).backward()
    errors = {n: rel_l2(p.grad, params[n].grad)
              for n, p in module.named_parameters()}
    worst = max(errors.values())
    if worst >= L2_NONE:
        raise AssertionError(f"parameter gradients: {errors}")
    return f"worst parameter gradient rel L2 {worst:.4f}"


def check_unused_output():
    """return_layernorm_output with the norm output unused: its gradient is
    undefined in autograd and must be passed as zeros."""
    module = te.LayerNormLinear(256, 384, return_layernorm_output=True,
                                params_dtype=BF16)
    perturb(module)
    x = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    out, _ = module(x)
    dy = torch.randn_like(out)
    (out * dy).sum().backward()
    _, ref_dx, _ = reference_step(module, ln_linear_ref, x,
                                  [dy, torch.zeros_like(x)])
    error = rel_l2(x.grad, ref_dx)
    if not error < L2_NONE:  # NaN fails too
        raise AssertionError(f"d_input rel L2 {error:.4f}")
    return f"d_input rel L2 {error:.4f}"


def check_side_stream():
    """Work runs on PyTorch's current stream: a step inside
    torch.cuda.stream(s) gives the bits of a step on the default stream."""
    module = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    x = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    dy = torch.randn(128, 256, device="cuda", dtype=BF16)
    (y0,), _ = train_step(module, x, None, [dy])
    g0 = module.fc1_weight.grad.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        (y1,), _ = train_step(module, x, None, [dy])
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    if not (torch.equal(y0, y1) and torch.equal(g0, module.fc1_weight.grad)):
        raise AssertionError("the side-stream step differs")
    return "bit-identical"


def check_torch_autocast():
    """float32 parameters under torch.autocast(bfloat16): the program runs
    in bf16, gradients come back to the float32 parameters."""
    module = te.Linear(256, 384, params_dtype=torch.float32)
    perturb(module)
    x = torch.randn(128, 256, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=BF16):
        y = module(x)
    if y.dtype != BF16:
        raise AssertionError(f"output is {y.dtype}, expected bfloat16")
    dy = torch.randn_like(y)
    (y * dy).sum().backward()
    _, _, ref = reference_step(module, linear_ref, x, [dy])
    if module.weight.grad.dtype != torch.float32:
        raise AssertionError(f"weight grad is {module.weight.grad.dtype}")
    error = rel_l2(module.weight.grad, ref["weight"])
    if not error < L2_NONE:  # NaN fails too
        raise AssertionError(f"d_weight rel L2 {error:.4f}")
    return f"bf16 output, d_weight rel L2 {error:.4f}"


def check_dtype_mismatch_refused():
    """Outside torch.autocast the parameters must have the input's dtype
    (TE's rule): a bf16 input to float32 parameters is refused with a
    message naming the parameter, also after inference calls reused the
    parameter inputs (the module cast to float32 in between); under
    torch.autocast the same call runs."""
    module = te.Linear(256, 256, params_dtype=BF16).eval()
    x = torch.randn(64, 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        module(x)
        module(x)  # reuses the parameter inputs of the first call
        module.float()
        try:
            module(x)
        except TypeError as error:
            text = str(error)
        else:
            raise AssertionError("a bf16 input to float32 parameters ran")
        for expected in ("'weight'", "torch.float32", "must match"):
            if expected not in text:
                raise AssertionError(f"{expected!r} not in: {text}")
        with torch.autocast("cuda", dtype=BF16):
            y = module(x)
    if y.dtype != BF16:
        raise AssertionError(f"autocast output is {y.dtype}")
    return "refused outside autocast, runs under it"


def check_compile_error_surfaces():
    """FP8 GEMMs need a token count divisible by 8: the compiler's message
    reaches the caller with the module and the shape."""
    module = te.Linear(256, 256, params_dtype=BF16)
    x = torch.randn(20, 256, device="cuda", dtype=BF16, requires_grad=True)
    try:
        with te.fp8_autocast(fp8_recipe=hybrid()):
            module(x)
    except tejit.TejitError as error:
        text = str(error)
        if "divisible" not in text or "Linear" not in text:
            raise AssertionError(f"unhelpful message: {text}") from error
        return text.splitlines()[0][:120]
    raise AssertionError("20 tokens compiled under FP8")


def check_fp8_available():
    available, reason = te.is_fp8_available(return_reason=True)
    if not available:
        raise AssertionError(reason)
    return "yes"


def all_checks():
    checks = []
    for name, factory, reference, shape in CASES:
        for label, make_recipe in (("bf16", lambda: None),
                                   ("fp8 delayed HYBRID", hybrid)):
            checks.append((f"{name} [{label}]",
                           lambda f=factory, r=reference, s=shape,
                           m=make_recipe: check_layer(f, r, s, m())))
    checks += [
        ("JIT cache", check_jit_cache),
        ("state_dict round trip", check_state_dict_round_trip),
        ("FP8 state follows new shapes", check_meta_follows_shapes),
        ("no_grad leaves the FP8 state", check_no_grad_leaves_fp8_state),
        ("activation checkpointing", check_activation_checkpointing),
        ("norm modules ignore FP8", check_norms_ignore_fp8),
        ("clamped_swiglu's clamps matter", check_clamps_matter),
        ("interleaved forwards", check_interleaved_forwards),
        ("unused ln_output", check_unused_output),
        ("side stream", check_side_stream),
        ("torch.autocast", check_torch_autocast),
        ("dtype mismatch refused", check_dtype_mismatch_refused),
        ("compile error surfaces", check_compile_error_surfaces),
        ("is_fp8_available", check_fp8_available),
    ]
    return checks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--filter", default="")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    # The float32 references must not use TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"tejit {tejit.version()} from {tejit._capi.library_path()}, "
          f"seed {seed}", flush=True)
    passed = failed = 0
    for index, (name, check) in enumerate(all_checks()):
        if args.filter not in name:
            continue
        torch.manual_seed(seed + index)
        start = time.perf_counter()
        try:
            detail, ok = check(), True
        except Exception as error:  # one failure must not stop the rest
            detail, ok = f"{type(error).__name__}: {error}", False
            if not isinstance(error, AssertionError):
                detail += "\n" + traceback.format_exc(limit=-4)
        seconds = time.perf_counter() - start
        print(f"{'PASS' if ok else 'FAIL'}  {name}  {detail}  "
              f"{seconds:.1f}s", flush=True)
        passed, failed = passed + ok, failed + (not ok)
    print(f"\n{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
