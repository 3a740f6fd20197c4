"""GPU tests of Float8BlockScaling (DeepSeek-V3's recipe, TE's
Float8BlockScaling; docs/block-scaling.md) through tejit.pytorch.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_block_scaling.py
    (-k "not full_size" leaves out the hidden-4096 cases)

Every module runs forward and backward under
fp8_autocast(fp8_recipe=Float8BlockScaling(...)), with three settings:
TE's default (E4M3, 1-D blocks for x and grad, 128 x 128 tiles for w,
power-of-2 scales), 2-D x with 1-D w, and HYBRID (E5M2 gradients) with
float32 scales. Checked:
- Linear, LayerNormLinear (LayerNorm, RMSNorm), LayerNormMLP (gelu,
  relu, swiglu without biases) against run_layer_tests.py's float64
  reference with its block-by-block emulation of the recipe (the same
  casts of the same stored tensors, the transposed casts of X, dY and W
  for the backward, no GEMM epilogues), elementwise with TE's FP8
  tolerances (E4M3 rtol 0.125 / atol 0.0675, E5M2 0.25 / 0.125, atol
  relative to the reference's rms) and the suite's allowance for
  rounding-boundary outliers; on data whose magnitude varies between
  128 x 128 tiles (so that each block has its own scale); two steps, then
  the same step again bit for bit (no state between steps); and the
  quickstart's LayerNormMLP (hidden 4096, FFN 16384, 8192 tokens) against
  the float32 reference;
- MultiheadAttention and TransformerLayer against a float32 composition of
  TE's definitions whose every GEMM goes through the same emulation
  (BlockScaledLinear: the operands rounded to bf16 as tejit stores them,
  then cast), by relative L2 error (the composition rounds at other points
  than the kernels and runs attention in float32, so an elementwise bound
  would flag FP8 rounding-boundary flips): output below 0.05, gradients
  below 0.1 (0.15 with E5M2 gradients); and against the composition
  without FP8 (float32 GEMMs), test_attention_layers.py's FP8 bounds
  (0.125 output, 0.25 gradients); small, and the quickstart's layer
  (hidden 4096, FFN 16384, 32 heads, seq 2048, batch 4: output and input
  gradient);
- block scaling is more accurate than Float8CurrentScaling where it
  matters: a Linear whose input has a few outlier tokens (2^15 times the
  others) against the float64 product of its bf16 operands, on the other
  tokens' outputs (per-tensor scaling pushes them into E4M3's subnormals);
- modules hold no FP8 meta state under it; a recipe with other settings
  compiles a program of its own; fp8_model_init with it is refused
  (NotImplementedError), as is running FP8 weights made under another
  recipe with it, and Float8Tensor.from_tensor with it.
The relative-L2 bounds of the composition comparison are estimates (a
one-ulp bf16 difference before a cast flips about 1 in 30 of E4M3's
roundings, about 2% relative L2 per cast tensor): the measured errors are
printed, so that they can be tightened on the GPU.
"""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import perturb, seed_per_test, torch  # noqa: E402

import torch.nn.functional as F  # noqa: E402

import run_layer_tests as layers  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402
from test_attention_layers import (  # noqa: E402
    BF16, L2_FP8_GRAD, L2_FP8_OUTPUT, SEED, activation_ref, attention_ref,
    check_errors, norm_ref, rel_l2, split_qkv)

fresh_seed = seed_per_test(SEED)
# The references are float32/float64 math (PyTorch's default, made sure).
torch.backends.cuda.matmul.allow_tf32 = False

# Relative L2 bounds against the emulated composition (see the module
# docstring); against the composition without FP8, test_attention_layers'
# L2_FP8_OUTPUT and L2_FP8_GRAD.
L2_EMULATED_OUTPUT = 0.05
L2_EMULATED_GRAD = {"E4M3": 0.1, "HYBRID": 0.15}


def block_default():
    return recipe.Float8BlockScaling()


def block_x2_w1():
    return recipe.Float8BlockScaling(x_block_scaling_dim=2,
                                     w_block_scaling_dim=1)


def block_hybrid_fp32():
    fp32 = recipe.QParams(power_2_scale=False)
    return recipe.Float8BlockScaling(fp8_format=recipe.Format.HYBRID,
                                     fp8_quant_fwd_inp=fp32,
                                     fp8_quant_fwd_weight=fp32,
                                     fp8_quant_bwd_grad=fp32)


RECIPES = {"default": block_default, "x2-w1": block_x2_w1,
           "hybrid-fp32": block_hybrid_fp32}


def tolerances(fp8_recipe):
    """TE's FP8 tolerances (run_layer_tests.py): E4M3 forward; gradients
    E5M2 under HYBRID."""
    hybrid = fp8_recipe.fp8_format is recipe.Format.HYBRID
    return layers.TOL_E4M3, layers.TOL_E5M2 if hybrid else layers.TOL_E4M3


# --- modules against the exact emulation -------------------------------------

# name -> (layer spec as run_layer_tests.py's references read it, input
# shape). Dims span several blocks; 256 or 384 tokens.
MODULE_CASES = {
    "Linear": ({"type": "Linear", "in_features": 384,
                "out_features": 640}, (128, 2, 384)),
    "Linear-nobias-2d-input": ({"type": "Linear", "in_features": 256,
                                "out_features": 384, "bias": False},
                               (384, 256)),
    "LayerNormLinear": ({"type": "LayerNormLinear", "in_features": 384,
                         "out_features": 256}, (128, 2, 384)),
    "LayerNormLinear-RMSNorm": ({"type": "LayerNormLinear",
                                 "in_features": 256, "out_features": 640,
                                 "normalization": "RMSNorm"}, (64, 4, 256)),
    "LayerNormMLP-gelu": ({"type": "LayerNormMLP", "hidden_size": 256,
                           "ffn_hidden_size": 1024, "activation": "gelu"},
                          (128, 2, 256)),
    "LayerNormMLP-relu": ({"type": "LayerNormMLP", "hidden_size": 384,
                           "ffn_hidden_size": 768, "activation": "relu"},
                          (128, 2, 384)),
    "LayerNormMLP-swiglu-RMSNorm-nobias": (
        {"type": "LayerNormMLP", "hidden_size": 256, "ffn_hidden_size": 640,
         "activation": "swiglu", "normalization": "RMSNorm", "bias": False},
        (128, 3, 256)),
}


def build(cfg):
    """The tejit.pytorch module of a run_layer_tests.py layer spec, with
    non-trivial biases and norm weights and GEMM weights whose magnitude
    varies between 128 x 128 tiles."""
    kind, bias = cfg["type"], cfg.get("bias", True)
    normalization = cfg.get("normalization", "LayerNorm")
    if kind == "Linear":
        module = te.Linear(cfg["in_features"], cfg["out_features"],
                           bias=bias, params_dtype=BF16)
    elif kind == "LayerNormLinear":
        module = te.LayerNormLinear(cfg["in_features"], cfg["out_features"],
                                    bias=bias, normalization=normalization,
                                    params_dtype=BF16)
    else:
        module = te.LayerNormMLP(cfg["hidden_size"], cfg["ffn_hidden_size"],
                                 bias=bias, normalization=normalization,
                                 activation=cfg["activation"],
                                 params_dtype=BF16)
    perturb(module)
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 2:
                p.mul_(layers.tile_magnitudes(p.shape).to(p.dtype))
    return module


def varied(shape):
    """bf16 N(0, 1) data times tile_magnitudes over [tokens, features]."""
    x = torch.randn(shape, device="cuda")
    return (x * layers.tile_magnitudes(shape)).to(BF16)


def module_step(module, x, dy, fp8_recipe):
    """One forward + backward under `fp8_recipe`: (output, input gradient,
    {parameter: gradient}), detached copies."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
        out = module(x)
    out.backward(dy)
    return (out.detach().clone(), x.grad.clone(),
            {n: p.grad.clone() for n, p in module.named_parameters()})


def reference(cfg, module, x, dy, fp8_recipe, dtype):
    """run_layer_tests.py's reference step in `dtype` (float64 or float32)
    with its emulation of `fp8_recipe` (its spec mapping)."""
    ref = layers.Ref(dtype, BF16, layers.Fp8Emulator(fp8_recipe.to_spec()))
    p = {n: t.detach().to(dtype) for n, t in module.named_parameters()}
    p["input"] = x.detach().reshape(-1, x.shape[-1]).to(dtype)
    dy = dy.reshape(-1, dy.shape[-1]).to(dtype)
    return layers.reference_step(ref, cfg, p, dy)


def check_against_emulation(cfg, module, x, dy, fp8_recipe, got, dtype,
                            what):
    """The module's step `got` against the emulated reference, elementwise
    (run_layer_tests.compare and its outlier allowance)."""
    out, dx, grads = got
    ref_out, ref_grads = reference(cfg, module, x, dy, fp8_recipe, dtype)
    assert set(ref_grads) == set(grads) | {"input"}, (
        f"{what}: gradients {sorted(grads)}, reference {sorted(ref_grads)}")
    tol_fwd, tol_bwd = tolerances(fp8_recipe)
    checks = [layers.compare("output", out, ref_out["output"], tol_fwd),
              layers.compare("grad.input", dx, ref_grads["input"], tol_bwd)]
    checks += [layers.compare(f"grad.{name}", grad, ref_grads[name], tol_bwd)
               for name, grad in grads.items()]
    if cfg.get("activation") in ("relu", "reglu"):
        for check in checks[1:]:
            check.max_outlier_fraction = layers.MAX_OUTLIER_FRACTION_RELU
    failing = [c.describe() for c in checks if not c.ok]
    worst = max(checks, key=lambda c: c.ratio)
    print(f"{what}: worst {worst.describe()}")
    assert not failing, (f"{what} (seed {SEED}):\n  " +
                         "\n  ".join(failing))


@pytest.mark.parametrize("recipe_name", list(RECIPES))
@pytest.mark.parametrize("case", list(MODULE_CASES))
def test_module_matches_emulation(case, recipe_name):
    """Two training steps of fresh data against the float64 emulation,
    then the second step again: the same bits (the recipe keeps no state),
    and no FP8 meta state in the state_dict."""
    cfg, shape = MODULE_CASES[case]
    fp8_recipe = RECIPES[recipe_name]()
    module = build(cfg)
    out_features = layers.layer_dims(cfg)[1]
    for step in (1, 2):
        x = varied(shape)
        dy = varied((*shape[:-1], out_features))
        got = module_step(module, x, dy, fp8_recipe)
        check_against_emulation(cfg, module, x, dy, fp8_recipe, got,
                                torch.float64,
                                f"{case} {recipe_name} step {step}")
    again = module_step(module, x, dy, fp8_recipe)
    assert torch.equal(again[0], got[0]) and torch.equal(again[1], got[1])
    assert all(torch.equal(again[2][n], g) for n, g in got[2].items())
    assert not [k for k in module.state_dict() if k.startswith("fp8_meta")]


def test_layernorm_mlp_full_size():
    """The quickstart's LayerNormMLP (hidden 4096, FFN 16384, 8192 tokens)
    under the default recipe against the float32 emulation."""
    cfg = {"type": "LayerNormMLP", "hidden_size": 4096,
           "ffn_hidden_size": 16384, "activation": "gelu"}
    module = build(cfg)
    x, dy = varied((2048, 4, 4096)), varied((2048, 4, 4096))
    got = module_step(module, x, dy, block_default())
    check_against_emulation(cfg, module, x, dy, block_default(), got,
                            torch.float32, "LayerNormMLP 4096/16384 full size")


# --- attention blocks against the emulated composition -----------------------


class BlockScaledLinear(torch.autograd.Function):
    """F.linear(x, weight, bias) as a block-scaled tejit GEMM computes it,
    with run_layer_tests.Fp8Emulator `emulator`: forward x (rounded to
    bf16, as tejit stores a GEMM's input) and the weight cast with their
    block dims, the product plus the bias added to its bf16 rounding (no
    epilogue); backward the incoming gradient rounded to bf16 and cast
    rowwise for dgrad (with W^T cast again) and transposed for wgrad (with
    X^T cast again), the bias gradient summed from the rounded gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias, emulator):
        dtype = x.dtype
        x2 = x.reshape(-1, x.shape[-1]).to(BF16).to(dtype)
        w = weight.to(BF16).to(dtype)
        xq = emulator.quantize("gemm.input", x2, "fwd", dtype)
        wq = emulator.quantize("gemm.weight", w, "fwd", dtype)
        y = xq @ wq.T
        if bias is not None:
            y = y.to(BF16).to(dtype) + bias
        ctx.save_for_backward(x2, w)
        ctx.emulator = emulator
        ctx.has_bias = bias is not None
        ctx.x_shape = x.shape
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        emulator, dtype = ctx.emulator, x2.dtype
        g = dy.reshape(-1, dy.shape[-1]).to(BF16).to(dtype)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            gq = emulator.quantize("gemm.grad_output", g, "bwd", dtype)
            wc = emulator.quantize("gemm.weight", w, "fwd", dtype,
                                   transpose=True)
            dx = (gq @ wc).reshape(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            gc = emulator.quantize("gemm.grad_output", g, "bwd", dtype,
                                   transpose=True)
            xc = emulator.quantize("gemm.input", x2, "fwd", dtype,
                                   transpose=True)
            dw = gc.T @ xc
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0)
        return dx, dw, db, None


def block_scaled_linear(fp8_recipe):
    """A linear(x, weight, bias) of float32 tensors through
    BlockScaledLinear under `fp8_recipe`."""
    emulator = layers.Fp8Emulator(fp8_recipe.to_spec())

    def linear(x, weight, bias=None):
        return BlockScaledLinear.apply(x, weight, bias, emulator)
    return linear


def mha_composition(mha, x, p, linear, prefix=""):
    """MultiheadAttention (causal self-attention, no rotary) from TE's
    definitions with `linear` for its GEMMs (test_attention_layers.mha_ref's
    composition; the Q, K and V GEMMs run separately, which casts as the
    fused QKV GEMM does while each part spans whole 128-row blocks)."""
    fmt, heads, groups, d = (mha.qkv_format, mha.num_attention_heads,
                             mha.num_gqa_groups, mha.kv_channels)
    group_name = "layernorm_qkv." if mha.input_layernorm else "qkv."
    group = getattr(mha, group_name[:-1])
    inp = x
    if mha.input_layernorm:
        inp = norm_ref(x, p[prefix + group_name + "layer_norm_weight"],
                       p.get(prefix + group_name + "layer_norm_bias"),
                       mha.normalization, mha.layernorm_epsilon,
                       mha.zero_centered_gamma)
    weights, biases = split_qkv(group, p, prefix + group_name, heads, groups,
                                d)
    q, k, v = (linear(inp, w, b) for w, b in zip(weights, biases))
    q = q.view(*q.shape[:2], heads, d)
    k = k.view(*k.shape[:2], groups, d)
    v = v.view(*v.shape[:2], groups, d)
    attn = attention_ref(q, k, v, "causal", None, fmt, 1.0 / math.sqrt(d))
    return linear(attn, p[prefix + "proj.weight"], p.get(prefix + "proj.bias"))


def transformer_composition(layer, x, p, linear):
    """A pre-LN TransformerLayer (TE's default) with `linear` for its GEMMs:
    x + attention, then + MLP."""
    hidden = x + mha_composition(layer.self_attention, x, p, linear,
                                 prefix="self_attention.")
    ln = norm_ref(hidden, p["layernorm_mlp.layer_norm_weight"],
                  p.get("layernorm_mlp.layer_norm_bias"), layer.normalization,
                  layer.layernorm_epsilon, layer.zero_centered_gamma)
    fc1 = linear(ln, p["layernorm_mlp.fc1_weight"],
                 p.get("layernorm_mlp.fc1_bias"))
    act = activation_ref(fc1, layer.activation)
    return hidden + linear(act, p["layernorm_mlp.fc2_weight"],
                           p.get("layernorm_mlp.fc2_bias"))


def composition_step(composition, module, x, dy, linear, param_grads):
    """The float32 composition's output, input gradient and (with
    `param_grads`) parameter gradients."""
    params = {n: p.detach().float().requires_grad_(param_grads)
              for n, p in module.named_parameters()}
    x32 = x.detach().float().requires_grad_()
    out = composition(module, x32, params, linear)
    out.backward(dy.float())
    grads = {n: p.grad for n, p in params.items()} if param_grads else {}
    return out.detach(), x32.grad, grads


def block_errors(got, want, param_grads):
    """Relative L2 errors by name; a key bias gradient, whose exact value
    is zero, is measured against the query bias gradient's size (as
    test_attention_layers.py does)."""
    out, dx, grads = got
    ref_out, ref_dx, ref_grads = want
    errors = {"output": rel_l2(out, ref_out),
              "input grad": rel_l2(dx, ref_dx)}
    if param_grads:
        for name, grad in grads.items():
            if name.endswith("key_bias"):
                scale = ref_grads[name.replace("key_bias", "query_bias")]
                errors[name] = ((grad.double() - ref_grads[name].double())
                                .norm() / scale.double().norm()
                                .clamp_min(1e-30)).item()
            else:
                errors[name] = rel_l2(grad, ref_grads[name])
    return errors


def check_block_module(module, composition, shape, fp8_recipe, what,
                       param_grads=True):
    """One training step of an attention block under `fp8_recipe` against
    the composition with BlockScaledLinear GEMMs (tight bounds) and with
    float32 GEMMs (FP8's bounds)."""
    x = torch.randn(shape, device="cuda", dtype=BF16)
    dy = torch.randn(shape, device="cuda", dtype=BF16)
    got = module_step(module, x, dy, fp8_recipe)
    if not param_grads:
        got = (got[0], got[1], {})
    grad_bound = L2_EMULATED_GRAD[fp8_recipe.fp8_format.name]
    emulated = block_errors(got, composition_step(
        composition, module, x, dy, block_scaled_linear(fp8_recipe),
        param_grads), param_grads)
    exact = block_errors(got, composition_step(
        composition, module, x, dy, F.linear, param_grads), param_grads)
    print(f"{what}: vs emulation " +
          ", ".join(f"{n} {e:.2e}" for n, e in emulated.items()) +
          "; vs float32 GEMMs " +
          ", ".join(f"{n} {e:.2e}" for n, e in exact.items()))
    check_errors(emulated,
                 {n: L2_EMULATED_OUTPUT if n == "output" else grad_bound
                  for n in emulated}, f"{what} vs the emulated composition")
    check_errors(exact, {n: L2_FP8_OUTPUT if n == "output" else L2_FP8_GRAD
                         for n in exact}, f"{what} vs float32 GEMMs")
    assert not [k for k in module.state_dict() if k.startswith("fp8_meta")]


def mha_call(module, x, p, linear):
    return mha_composition(module, x, p, linear)


@pytest.mark.parametrize("recipe_name", list(RECIPES))
@pytest.mark.parametrize("groups", [None, 4], ids=["mha", "gqa"])
def test_multihead_attention(groups, recipe_name):
    """8 heads of 32 channels (4 GQA groups: K and V 128 rows each, so
    that each of Q, K, V spans whole blocks of the fused QKV GEMM)."""
    mha = te.MultiheadAttention(256, 8, num_gqa_groups=groups,
                                attention_dropout=0.0, input_layernorm=True,
                                attn_mask_type="causal", params_dtype=BF16)
    perturb(mha)
    check_block_module(mha, mha_call, (128, 2, 256), RECIPES[recipe_name](),
                       f"MultiheadAttention {groups or 8} groups "
                       f"{recipe_name}")


@pytest.mark.parametrize("recipe_name", list(RECIPES))
def test_transformer_layer(recipe_name):
    layer = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    perturb(layer)
    check_block_module(layer, transformer_composition, (128, 2, 256),
                       RECIPES[recipe_name](),
                       f"TransformerLayer {recipe_name}")


def test_transformer_layer_full_size():
    """The quickstart's layer (hidden 4096, FFN 16384, 32 heads, seq 2048,
    batch 4) under the default recipe: output and input gradient."""
    layer = te.TransformerLayer(4096, 16384, 32, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    perturb(layer)
    check_block_module(layer, transformer_composition, (2048, 4, 4096),
                       block_default(), "TransformerLayer full size",
                       param_grads=False)


# --- accuracy with outliers ----------------------------------------------------


def test_more_accurate_than_current_scaling_with_outliers():
    """A Linear (2048 -> 2048, 1024 tokens) whose input has 8 outlier
    tokens 2^15 times the others (LLMs' massive activations): under
    Float8CurrentScaling their amax sets the one input scale, and the other
    tokens land in E4M3's subnormals; block scaling gives each 128-element
    block its own scale. Error of the other tokens' outputs against the
    float64 product of the bf16 operands: block scaling's at most half of
    current scaling's, and within an FP8 output's usual error."""
    module = te.Linear(2048, 2048, params_dtype=BF16)
    perturb(module)
    tokens = 1024
    x = torch.randn(tokens, 2048, device="cuda")
    outliers = torch.randperm(tokens, device="cuda")[:8]
    x[outliers] *= 2.0 ** 15
    x = x.to(BF16)
    normal = torch.ones(tokens, dtype=torch.bool, device="cuda")
    normal[outliers] = False
    truth = (x.double() @ module.weight.detach().double().T +
             module.bias.detach().double())
    errors = {}
    with torch.no_grad():
        for name, fp8_recipe in (("block", block_default()),
                                 ("current", recipe.Float8CurrentScaling())):
            with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
                out = module(x)
            errors[name] = rel_l2(out[normal], truth[normal])
            errors[name + " outlier tokens"] = rel_l2(out[~normal],
                                                      truth[~normal])
    print("relative L2 error against float64: " +
          ", ".join(f"{n} {e:.3e}" for n, e in errors.items()))
    assert errors["block"] < 0.5 * errors["current"], errors
    assert errors["block"] < 0.08, errors
    assert errors["block outlier tokens"] < 0.08, errors


# --- state, JIT key and refusals -----------------------------------------------


def test_settings_compile_their_own_programs():
    """Each setting of the recipe is its own program (the recipe is in the
    JIT key); an equal recipe object reuses it; the DelayedScaling program
    of the same module keeps its meta state apart from them."""
    module = te.Linear(256, 256, params_dtype=BF16)
    x = torch.randn(256, 256, device="cuda", dtype=BF16, requires_grad=True)
    start = te.compile_count()
    for make in (block_default, block_default, block_x2_w1,
                 block_hybrid_fp32):
        with te.autocast(recipe=make()):
            module(x).sum().backward()
    assert te.compile_count() - start == 3
    assert not [k for k in module.state_dict() if k.startswith("fp8_meta")]
    with te.fp8_autocast(fp8_recipe=recipe.DelayedScaling()):
        module(x).sum().backward()
    assert [k for k in module.state_dict() if k.startswith("fp8_meta")]
    with te.fp8_autocast(fp8_recipe=block_default()):
        module(x).sum().backward()
    assert te.compile_count() - start == 4


def test_main_grad_accumulates_in_the_wgrad_gemm():
    """fuse_wgrad_accumulation (Megatron-LM's main_grad) under block
    scaling: the wgrad GEMM adds into main_grad as cuBLASLt's C (beta = 1),
    its one epilogue term. Two steps into a non-zero main_grad equal the
    unfused module's .grad summed the same way."""
    torch.manual_seed(3)
    fused = te.LayerNormMLP(256, 1024, params_dtype=BF16,
                            fuse_wgrad_accumulation=True)
    plain = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    plain.load_state_dict(fused.state_dict())
    weights = ("fc1_weight", "fc2_weight")
    start = {name: torch.randn(getattr(fused, name).shape, device="cuda")
             for name in weights}
    for name in weights:
        getattr(fused, name).main_grad = start[name].clone()
    sums = {name: start[name].clone() for name in weights}
    for step in range(2):
        x = torch.randn(128, 256, device="cuda", dtype=BF16)
        dy = torch.randn(128, 256, device="cuda", dtype=BF16)
        for module in (fused, plain):
            with te.fp8_autocast(fp8_recipe=block_default()):
                module(x).backward(dy)
        for name in weights:
            sums[name] += getattr(plain, name).grad.float()
            getattr(plain, name).grad = None
    for name in weights:
        got, want = getattr(fused, name).main_grad, sums[name]
        # f32 accumulation in the GEMM against bf16 .grad added after it.
        error = ((got - want).norm() / want.norm()).item()
        assert error < 1e-2, (name, error)


def test_invalid_settings_are_refused_at_the_autocast():
    bad = recipe.Float8BlockScaling()
    bad.x_block_scaling_dim = 2  # with 2-D weights: a 2-D x 2-D fprop
    with pytest.raises(ValueError, match="x_block_scaling_dim"):
        te.fp8_autocast(fp8_recipe=bad)


def test_fp8_model_init_is_refused():
    """fp8_model_init(recipe=Float8BlockScaling()) raises; FP8 weights
    made under DelayedScaling refuse a block-scaling autocast, naming
    fp8_model_init; Float8Tensor.from_tensor refuses the recipe too."""
    with pytest.raises(NotImplementedError, match="Float8BlockScaling"):
        with te.fp8_model_init(enabled=True, recipe=block_default()):
            te.Linear(256, 256, params_dtype=BF16)
    with te.fp8_model_init(enabled=True,
                           recipe=recipe.DelayedScaling()):
        module = te.Linear(256, 256, params_dtype=BF16)
    assert module.primary_weights_in_fp8
    x = torch.randn(128, 256, device="cuda", dtype=BF16, requires_grad=True)
    with pytest.raises(NotImplementedError, match="fp8_model_init"):
        with te.fp8_autocast(fp8_recipe=block_default()):
            module(x)
    with te.fp8_autocast(fp8_recipe=recipe.DelayedScaling()):
        module(x).sum().backward()  # the module still works as it was made
    weight = torch.randn(256, 256, device="cuda", dtype=BF16)
    with pytest.raises(NotImplementedError, match="Float8BlockScaling"):
        te.Float8Tensor.from_tensor(weight, block_default())
