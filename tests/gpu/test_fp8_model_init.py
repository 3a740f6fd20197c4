"""GPU tests of fp8_model_init (Transformer Engine's FP8 primary weights):
modules built inside it hold their GEMM weights as Float8Tensors (E4M3 data,
1 byte per element, nominal dtype bf16), the forward under fp8_autocast
uses that data directly, optimizers update the weights in place
(dequantize, op, requantize).

    PYTHONPATH=python python3 -m pytest tests/gpu/test_fp8_model_init.py
    (-k "not full_size" leaves out the 4096/16384 cases)

Every check compares with something computed independently of the
Float8Tensor code: a twin module built normally whose GEMM weights hold the
FP8 weights' dequantized values (`_data` as float32 times `_scale_inv`,
computed here), float64 GEMMs, or a host-side (Python float) model of
shared/FP8.md's scaling rules. Checked, at small sizes (hidden 256, FFN
1024, 4 heads, 128 tokens, bf16) for Linear, LayerNormLinear, LayerNormMLP
(gelu, swiglu), MultiheadAttention (fused QKV, interleaved and not) and
TransformerLayer (fused QKV), under DelayedScaling HYBRID and
Float8CurrentScaling:
- the weights: Float8Tensor parameters of nominal dtype bf16, `_data`
  float8_e4m3fn [out, in], `_scale_inv` float32 [1], no `_transpose` until
  a training forward under FP8 makes it (then `_data` transposed);
- a training step under fp8_autocast equals the twin's: under
  DelayedScaling bit for bit (both quantize the weight with scale 1.0 at
  the first step, the twin's values being exactly the FP8 ones), under
  current scaling within TE's FP8 tolerances (E4M3 rtol 0.125 / atol
  0.0675 for outputs, E5M2 rtol 0.25 / atol 0.125 for gradients) and a
  relative L2 bound (the twin's weight scale differs from the FP8 weight's
  by the bf16 rounding of its dequantized amax); and the LayerNormMLP at
  4096/16384 with 2048 tokens;
- Linear against float64 GEMMs of the dequantized FP8 operands (x, dY and
  W as the program quantized them), TE's tolerances, small and 4096/16384;
- SGD steps (and AdamW steps) with forwards under DelayedScaling between
  them: after each step `_data` is e4m3((w * scale).clamp(-448, 448)) of
  the value the optimizer computed from the dequantized weight, with the
  scale a host-side DelayedScaling predicts (the weight's amaxes, history
  rolled once before each training forward), `_scale_inv` = 1/scale, the
  amax history as predicted, `_transpose` refreshed; under current scaling
  the scale is 448/amax of the new value;
- without fp8_autocast: the dequantized weights, equal to the twin's bf16
  step, the weight gradient in param.grad;
- inference under torch.no_grad(): no `_transpose`, the twin's output, a
  requantized weight seen by the next call; 1 byte per GEMM weight element
  (LayerNormMLP 4096/16384: torch.cuda.memory_allocated after building it
  with and without fp8_model_init);
- make_graphed_callables: replays with SGD steps between them equal an
  eager twin's steps bit for bit, weights and scaling states too;
- torch.save/torch.load (weights_only False and True) and copy.deepcopy
  bit-exact; load_state_dict of a
  plain bf16 state_dict quantizes with the weight's scale; of an FP8 one
  copies the FP8 data and scale_inv (TE's Float8Tensor.copy_);
- preserve_high_precision_init_val=True: the initial bf16 values on the
  CPU, those of a plain module built from the same seed;
- split QKV weights (fuse_qkv_params=False, TE's default) under
  DelayedScaling share one scale; a step equals the twin's bit for bit;
- refusals: tp_size > 1, fuse_qkv_params=False under current scaling, a
  recipe of another kind.
"""
import copy
import gc
import io
import math
import struct

import pytest

from gpu_test_support import hybrid, perturb, run_seed, seed_per_test, torch

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_fp8_model_init")
fresh_seed = seed_per_test(SEED)
BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}
FLT_MAX = float.fromhex("0x1.fffffep+127")
# shared/FP8.md: TE's tolerances for an FP8 result against a reference on
# the dequantized FP8 inputs (outputs E4M3; gradients under HYBRID E5M2).
TOLERANCE = {"e4m3": (0.125, 0.0675), "e5m2": (0.25, 0.125)}
# Relative L2 bounds where the two sides are not bit-equal: current scaling
# against the twin (their weight scales differ in the last bits, which
# moves a few percent of the later FP8 roundings by one step), and the
# float64 references (only accumulation order and bf16 outputs differ).
L2_TWIN_OUTPUT, L2_TWIN_GRAD = 0.05, 0.1
L2_FLOAT64 = 1e-2
# FP8 GEMMs against bf16 ones (test_pytorch_modules.py's bounds).
L2_FP8_VS_BF16_OUTPUT, L2_FP8_VS_BF16_GRAD = 0.1, 0.2


def current():
    return recipe.Float8CurrentScaling(fp8_format=recipe.Format.HYBRID)


RECIPES = {"delayed": hybrid, "current": current}

# name -> (factory, input shape, the names of the GEMM weights). 128 tokens
# each ([s, b, h] = [64, 2, 256] for the attention modules).
LAYERS = {
    "Linear": (lambda: te.Linear(256, 384, params_dtype=BF16), (128, 256),
               {"weight"}),
    "LayerNormLinear": (lambda: te.LayerNormLinear(256, 384,
                                                   params_dtype=BF16),
                        (128, 256), {"weight"}),
    "LayerNormMLP-gelu": (lambda: te.LayerNormMLP(256, 1024,
                                                  params_dtype=BF16),
                          (128, 256), {"fc1_weight", "fc2_weight"}),
    "LayerNormMLP-swiglu": (lambda: te.LayerNormMLP(
        256, 1024, activation="swiglu", params_dtype=BF16), (128, 256),
        {"fc1_weight", "fc2_weight"}),
    # TE's interleaved fused QKV rows (by key/value group, GQA 2 groups):
    # the program permutes the FP8 rows into q | k | v per call.
    "MultiheadAttention-interleaved": (lambda: te.MultiheadAttention(
        256, 4, num_gqa_groups=2, params_dtype=BF16, attention_dropout=0.0,
        fuse_qkv_params=True, qkv_weight_interleaved=True,
        input_layernorm=True), (64, 2, 256),
        {"layernorm_qkv.weight", "proj.weight"}),
    "MultiheadAttention-qkv": (lambda: te.MultiheadAttention(
        256, 4, params_dtype=BF16, attention_dropout=0.0,
        fuse_qkv_params=True, qkv_weight_interleaved=False), (64, 2, 256),
        {"qkv.weight", "proj.weight"}),
    "TransformerLayer": (lambda: te.TransformerLayer(
        256, 1024, 4, params_dtype=BF16, hidden_dropout=0.0,
        attention_dropout=0.0, fuse_qkv_params=True), (64, 2, 256),
        {"self_attention.layernorm_qkv.weight", "self_attention.proj.weight",
         "layernorm_mlp.fc1_weight", "layernorm_mlp.fc2_weight"}),
}


# --- float32 on the host, quantization ---------------------------------------


def f32(value):
    """`value` rounded to float32 (to nearest; overflow gives inf), as a
    Python float. A float64 quotient of two float32 values rounded so is
    the float32 quotient (53 >= 2 * 24 + 2 bits: no double rounding)."""
    return torch.tensor(value, dtype=torch.float64).float().item()


def power_of_2(value):
    """A positive float32 with its mantissa bits cleared: 2^floor(log2)."""
    word = struct.unpack("<I", struct.pack("<f", value))[0]
    return struct.unpack("<f", struct.pack("<I", word & 0xFF800000))[0]


def ulps(a, b):
    """How many float32 steps apart two float32 values of one sign are."""
    words = [struct.unpack("<i", struct.pack("<f", v))[0] for v in (a, b)]
    return abs(words[0] - words[1])


def off_by(got, want):
    """What a float32 `got` that should be `want` is off by; a scale 1 ulp
    off is what torch's `number / tensor` gives (reciprocal(tensor) *
    number, rounded twice) instead of the IEEE quotient TE computes."""
    if not (math.isfinite(got) and math.isfinite(want)) or got * want <= 0:
        return ""
    steps = ulps(got, want)
    hint = (": reciprocal(amax) * fp8_max instead of fp8_max / amax?"
            if steps == 1 else "")
    return f" ({steps} float32 ulp{'s' if steps != 1 else ''} off{hint})"


def scale_for(fp8_max, amax):
    """fp8_max / amax in float32, FLT_MAX when the quotient overflows."""
    scale = f32(fp8_max / amax)
    return FLT_MAX if math.isinf(scale) else scale


def amax_of(value):
    return value.detach().abs().amax().float().item()


def quantize(value, scale, dtype=E4M3):
    """TE's cast: (value as float32 * scale), saturated, rounded to
    `dtype` (NaN stays NaN)."""
    fp8_max = FP8_MAX[dtype]
    s = torch.tensor([scale], dtype=torch.float32, device=value.device)
    return (value.detach().float() * s).clamp(-fp8_max, fp8_max).to(dtype)


def fake_quantize(value, scale, dtype):
    """The float64 value of `value` quantized with `scale`."""
    return quantize(value, scale, dtype).double() * f32(1.0 / scale)


def dequantized(tensor):
    """A Float8Tensor's value, from its raw fields: `_data` as float32
    times `_scale_inv`, rounded to the nominal dtype (TE's dequantize)."""
    return (tensor._data.float() * tensor._scale_inv).to(tensor.dtype)


def bits(tensor):
    return tensor.view(torch.uint8)


def current_scale(value, dtype, power_2):
    """Float8CurrentScaling's scale for `value` (FP8.md)."""
    amax = amax_of(value)
    if amax == 0.0 or not math.isfinite(amax):
        scale = 1.0
    else:
        scale = scale_for(FP8_MAX[dtype], amax)
    return power_of_2(scale) if power_2 else scale


class DelayedScalingModel:
    """FP8.md's DelayedScaling state of one FP8 weight, kept on the host:
    scale 1.0 and a zero history at first; every quantize max-reduces its
    amax into history[0] and casts with the current scale; update() (once
    before each training forward) rolls the history and computes the
    scale from it."""

    def __init__(self, fp8_recipe):
        self.length = fp8_recipe.amax_history_len
        self.algo = fp8_recipe.amax_compute_algo
        self.fp8_max = f32(448.0 * 2.0 ** -fp8_recipe.margin)
        self.scale = 1.0
        self.history = [0.0] * self.length

    def quantize(self, value):
        self.history[0] = max(self.history[0], amax_of(value))
        return quantize(value, self.scale)

    def update(self):
        last = self.history[0]
        if last == 0.0:
            return  # nothing quantized since the last update
        window = self.history[1:] + [last]
        amax = max(window) if self.algo == "max" else last
        rolled = list(self.history)
        for i in range(1, self.length - 1):
            rolled[i] = self.history[i + 1]
        rolled[self.length - 1] = last
        rolled[0] = 0.0
        self.history = rolled
        if math.isfinite(amax) and amax > 0.0:
            self.scale = scale_for(self.fp8_max, amax)

    def errors(self, tensor):
        """How `tensor`'s scaling state differs from this one."""
        state = tensor._scaling
        found = []
        scale = state.scale.item()
        if scale != self.scale:
            found.append(f"scale {scale!r}, expected {self.scale!r}"
                         f"{off_by(scale, self.scale)}")
        history = state.amax_history.flatten().tolist()
        if history != self.history:
            found.append(f"amax_history {history}, expected {self.history}")
        return found


class CurrentScalingModel:
    """Float8CurrentScaling of one FP8 weight: each quantize scales by
    448 / the amax of the value it casts."""

    def __init__(self, fp8_recipe):
        self.power_2 = bool(fp8_recipe.fp8_quant_fwd_weight.power_2_scale)
        self.scale = 1.0

    def quantize(self, value):
        self.scale = current_scale(value, E4M3, self.power_2)
        return quantize(value, self.scale)

    def update(self):
        pass

    def errors(self, tensor):
        return []


def scaling_model(fp8_recipe):
    if isinstance(fp8_recipe, recipe.DelayedScaling):
        return DelayedScalingModel(fp8_recipe)
    return CurrentScalingModel(fp8_recipe)


# --- comparisons -------------------------------------------------------------


def rel_l2(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def same_errors(got, want, what):
    """[] when `got` equals `want` bit for bit, else what differs."""
    if got is None:
        return [f"{what}: missing"]
    if got.dtype != want.dtype or got.shape != want.shape:
        return [f"{what}: {got.dtype} {tuple(got.shape)}, expected "
                f"{want.dtype} {tuple(want.shape)}"]
    if torch.equal(got, want):
        return []
    differ = int((got != want).sum())  # NaNs count as different
    diff = (got.double() - want.double()).abs().max().item()
    return [f"{what}: not bit-equal, {differ} of {want.numel()} elements "
            f"differ (rel L2 {rel_l2(got, want):.3e}, max |diff| "
            f"{diff:.3e})"]


def close_errors(got, want, what, fmt, l2_bound):
    """[] when `got` is within TE's `fmt` tolerance of `want` elementwise
    and within `l2_bound` in relative L2 (NaN fails both)."""
    if got is None:
        return [f"{what}: missing"]
    if got.shape != want.shape:
        return [f"{what}: shape {tuple(got.shape)}, expected "
                f"{tuple(want.shape)}"]
    rtol, atol = TOLERANCE[fmt]
    got64, want64 = got.double(), want.double()
    outside = ~((got64 - want64).abs() <= atol + rtol * want64.abs())
    found = []
    if outside.any():
        found.append(f"{what}: {int(outside.sum())} of {want.numel()} "
                     f"elements outside {fmt} rtol {rtol} / atol {atol} "
                     f"(max |diff| {(got64 - want64).abs().max().item():.3e})")
    error = rel_l2(got, want)
    if not error < l2_bound:
        found.append(f"{what}: rel L2 {error:.3e} >= {l2_bound}")
    return found


def check(errors, what):
    assert not errors, f"{what}:\n  " + "\n  ".join(errors)


def compare_steps(got, want, what, exact):
    """Two train_step results: bit-equal (`exact`), else within TE's FP8
    tolerances. Every difference is reported, not only the first."""
    out, _, dx, grads = got
    ref_out, _, ref_dx, ref_grads = want
    pairs = [("output", out, ref_out, "e4m3", L2_TWIN_OUTPUT),
             ("input gradient", dx, ref_dx, "e5m2", L2_TWIN_GRAD)]
    pairs += [(f"gradient of {name}", grads.get(name), grad, "e5m2",
               L2_TWIN_GRAD) for name, grad in ref_grads.items()]
    errors = []
    for label, a, b, fmt, bound in pairs:
        errors += (same_errors(a, b, label) if exact
                   else close_errors(a, b, label, fmt, bound))
    check(errors, what)


def quantized_errors(tensor, model, want, what):
    """How a Float8Tensor differs from `want` (the FP8 data the host model
    predicts), 1 / the model's scale and the model's scaling state; its
    `_transpose`, where it has one, must be `_data` transposed."""
    errors = []
    got = bits(tensor._data)
    if not torch.equal(got, bits(want)):
        differ = int((got != bits(want)).sum())
        errors.append(f"_data differs from e4m3(w * {model.scale!r}) in "
                      f"{differ} of {want.numel()} elements")
    scale_inv = tensor._scale_inv.item()
    want_inv = f32(1.0 / model.scale)
    if scale_inv != want_inv:
        errors.append(f"_scale_inv {scale_inv!r}, expected 1 / "
                      f"{model.scale!r} = {want_inv!r}"
                      f"{off_by(scale_inv, want_inv)}")
    errors += model.errors(tensor)
    if tensor._transpose is not None:
        errors += transpose_errors(tensor)
    return [f"{what}: {e}" for e in errors]


def transpose_errors(tensor):
    t = tensor._transpose
    if t is None:
        return ["no _transpose after a training forward under FP8"]
    if t.dtype != E4M3 or tuple(t.shape) != tuple(tensor.shape)[::-1]:
        return [f"_transpose is {t.dtype} {tuple(t.shape)}"]
    if not torch.equal(bits(t), bits(tensor._data).t()):
        return ["_transpose is not _data transposed"]
    return []


# --- modules -----------------------------------------------------------------


def build(make, fp8_recipe, preserve=False):
    with te.fp8_model_init(enabled=True, recipe=fp8_recipe,
                           preserve_high_precision_init_val=preserve):
        return make()


def fp8_weights(module):
    return {name: p for name, p in module.named_parameters()
            if isinstance(p, te.Float8Tensor)}


def twin_of(module, make):
    """A module built normally with `module`'s parameter values, its GEMM
    weights the FP8 weights' dequantized values."""
    twin = make()
    assert not getattr(twin, "primary_weights_in_fp8", False)
    twin_params = dict(twin.named_parameters())
    assert set(twin_params) == {n for n, _ in module.named_parameters()}
    with torch.no_grad():
        for name, p in module.named_parameters():
            twin_params[name].copy_(dequantized(p)
                                    if isinstance(p, te.Float8Tensor) else p)
    return twin


def train_step(module, x, fp8_recipe, dy=None):
    """One forward (under fp8_autocast(fp8_recipe); without one for None)
    and backward of `dy` (random when None): (output, dy, input gradient,
    {parameter name: gradient})."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(x)
    if dy is None:
        dy = torch.randn_like(out)
    out.backward(dy)
    return (out.detach(), dy, x.grad,
            {name: p.grad for name, p in module.named_parameters()})


def check_fresh_weights(module, names):
    """Built under fp8_model_init: `names` (the GEMM weights) are
    Float8Tensor parameters as the contract describes, the rest plain."""
    assert getattr(module, "primary_weights_in_fp8", False) is True
    weights = fp8_weights(module)
    assert set(weights) == names, f"FP8 weights {sorted(weights)}"
    for name, p in module.named_parameters():
        if name not in names:
            assert p.dtype == BF16, name
            continue
        assert isinstance(p, torch.nn.Parameter), name
        assert p.dtype == BF16 and p.is_cuda and p.requires_grad, name
        assert p.dim() == 2, name
        data = p._data
        assert data.dtype == E4M3 and data.is_contiguous(), name
        assert tuple(data.shape) == tuple(p.shape), name
        assert data.device == p.device, name
        scale_inv = p._scale_inv
        assert scale_inv.dtype == torch.float32, name
        assert scale_inv.numel() == 1 and scale_inv.is_cuda, name
        assert p._transpose is None, f"{name}: a _transpose before training"


# --- the twin: the same step on the dequantized weights ----------------------


@pytest.mark.parametrize("fp8", list(RECIPES))
@pytest.mark.parametrize("layer", list(LAYERS))
def test_fp8_weights_match_a_twin(layer, fp8):
    """A training step under fp8_autocast equals a plain twin's (bit for bit
    under DelayedScaling), and makes the transposes."""
    make, shape, names = LAYERS[layer]
    fp8_recipe = RECIPES[fp8]()
    module = build(make, fp8_recipe)
    check_fresh_weights(module, names)
    perturb(module)
    twin = twin_of(module, make)
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    got = train_step(module, x, fp8_recipe)
    want = train_step(twin, x, fp8_recipe, dy=got[1])
    compare_steps(got, want, f"{layer} {fp8}", exact=fp8 == "delayed")
    check([f"{name}: {e}" for name, p in fp8_weights(module).items()
           for e in transpose_errors(p)], f"{layer} {fp8}")


SPLIT_LAYERS = {
    # TE's defaults: fuse_qkv_params=False, query_weight / key_weight /
    # value_weight, here with GQA.
    "TransformerLayer": (lambda: te.TransformerLayer(
        256, 1024, 4, num_gqa_groups=2, params_dtype=BF16,
        hidden_dropout=0.0, attention_dropout=0.0), (64, 2, 256),
        "self_attention.layernorm_qkv.",
        {"self_attention.proj.weight", "layernorm_mlp.fc1_weight",
         "layernorm_mlp.fc2_weight"}),
    "MultiheadAttention": (lambda: te.MultiheadAttention(
        256, 4, num_gqa_groups=2, params_dtype=BF16, attention_dropout=0.0,
        input_layernorm=True), (64, 2, 256), "layernorm_qkv.",
        {"proj.weight"}),
}


@pytest.mark.parametrize("layer", list(SPLIT_LAYERS))
def test_split_qkv_weights(layer):
    """fuse_qkv_params=False (TE's default) under DelayedScaling: the
    query/key/value weights are Float8Tensors sharing one scale_inv and
    scaling state (a deepcopy's parts share theirs); a training step
    equals the twin's bit for bit; after SGD steps (which requantize
    each part with the shared scale) a step stays within FP8's distance
    of a bf16 twin of the new values."""
    make, shape, prefix, others = SPLIT_LAYERS[layer]
    fp8_recipe = hybrid()
    module = build(make, fp8_recipe)
    parts = [f"{prefix}{part}_weight" for part in ("query", "key", "value")]
    check_fresh_weights(module, set(parts) | others)
    weights = fp8_weights(module)

    def sharing_errors(weights, what):
        first = weights[parts[0]]
        return [f"{what}: {name} does not share {parts[0]}'s scale"
                for name in parts[1:]
                if weights[name]._scaling is not first._scaling
                or weights[name]._scale_inv is not first._scale_inv]

    errors = sharing_errors(weights, layer)
    copied = fp8_weights(copy.deepcopy(module))
    errors += sharing_errors(copied, f"{layer} deepcopy")
    if copied[parts[0]]._scaling is weights[parts[0]]._scaling:
        errors.append(f"{layer}: the deepcopy shares the original's scale")
    check(errors, layer)
    perturb(module)
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    got = train_step(module, x, fp8_recipe)
    want = train_step(twin_of(module, make), x, fp8_recipe, dy=got[1])
    compare_steps(got, want, f"{layer} split", exact=True)
    optimizer = torch.optim.SGD(module.parameters(), lr=2e-3, foreach=False)
    for _ in range(2):
        optimizer.step()
        train_step(module, x, fp8_recipe)
    check([f"{name}: {e}" for name in parts
           for e in transpose_errors(weights[name])], f"{layer} split")
    check(sharing_errors(fp8_weights(module), f"{layer} after SGD"), layer)
    # Requantized with the shared scale (no longer 1): against bf16.
    check_against_bf16_twin(module, make, shape, fp8_recipe)


def mlp_full_size():
    return te.LayerNormMLP(4096, 16384, params_dtype=BF16)


@pytest.mark.parametrize("fp8", list(RECIPES))
def test_layernorm_mlp_full_size(fp8):
    """The quickstart's LayerNormMLP (4096/16384), 2048 tokens."""
    make = mlp_full_size
    fp8_recipe = RECIPES[fp8]()
    module = build(make, fp8_recipe)
    check_fresh_weights(module, {"fc1_weight", "fc2_weight"})
    perturb(module)
    twin = twin_of(module, make)
    x = torch.randn(2048, 4096, device="cuda", dtype=BF16)
    got = train_step(module, x, fp8_recipe)
    want = train_step(twin, x, fp8_recipe, dy=got[1])
    compare_steps(got, want, f"LayerNormMLP 4096/16384 {fp8}",
                  exact=fp8 == "delayed")


LINEAR_SIZES = {"small": (256, 384, 128), "full_size": (4096, 16384, 2048)}


@pytest.mark.parametrize("size", list(LINEAR_SIZES))
@pytest.mark.parametrize("fp8", list(RECIPES))
def test_linear_against_float64(fp8, size):
    """Y = X W^T + b, dX = dY W, dW = dY^T X of a Linear with FP8 weights
    against float64 products of the FP8 operands as the program quantized
    them: W its FP8 weight; X (E4M3) and dY (E5M2) with scale 1.0 at
    DelayedScaling's first step, 448/amax and 57344/amax under current
    scaling. TE's tolerances elementwise, and a relative L2 bound."""
    in_features, out_features, tokens = LINEAR_SIZES[size]
    fp8_recipe = RECIPES[fp8]()
    module = build(lambda: te.Linear(in_features, out_features,
                                     params_dtype=BF16), fp8_recipe)
    perturb(module)
    x = torch.randn(tokens, in_features, device="cuda", dtype=BF16)
    out, dy, dx, grads = train_step(module, x, fp8_recipe)
    if fp8 == "delayed":
        x_scale = dy_scale = 1.0
    else:
        power_2 = bool(fp8_recipe.fp8_quant_fwd_inp.power_2_scale)
        x_scale = current_scale(x, E4M3, power_2)
        dy_scale = current_scale(dy, E5M2, power_2)
    w = dequantized(module.weight).double()
    x64 = fake_quantize(x, x_scale, E4M3)
    dy64 = fake_quantize(dy, dy_scale, E5M2)
    bias = module.bias.detach().double()
    errors = close_errors(out, x64 @ w.t() + bias, "output", "e4m3",
                          L2_FLOAT64)
    errors += close_errors(dx, dy64 @ w, "input gradient", "e5m2",
                           L2_FLOAT64)
    errors += close_errors(grads["weight"], dy64.t() @ x64,
                           "weight gradient", "e5m2", L2_FLOAT64)
    check(errors, f"Linear {in_features}->{out_features}, {tokens} tokens, "
                  f"{fp8}, against float64")


# --- optimizers --------------------------------------------------------------


def initial_models(module, fp8_recipe):
    """A host model per FP8 weight, fed the weight's initial value (built
    with preserve_high_precision_init_val=True), its construction-time
    quantization checked."""
    models = {}
    errors = []
    for name, p in fp8_weights(module).items():
        model = scaling_model(fp8_recipe)
        want = model.quantize(p.get_high_precision_init_val().cuda())
        errors += quantized_errors(p, model, want, f"{name} as built")
        models[name] = model
    check(errors, "the weights' initial quantization")
    return models


def update_models(module, models, what):
    """The models after a training forward under FP8 (one update each),
    checked against the weights."""
    errors = []
    for name, p in fp8_weights(module).items():
        models[name].update()
        errors += [f"{name}: {e}" for e in models[name].errors(p)]
    check(errors, what)


def check_against_bf16_twin(module, make, shape, fp8_recipe):
    """After training: the module's FP8 step against the twin's bf16 step
    on the dequantized weights, as FP8 compares with bf16. Catches a
    weight scale_inv that the GEMMs ignore (scale_inv is no longer 1)."""
    twin = twin_of(module, make)
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    got = train_step(module, x, fp8_recipe)
    want = train_step(twin, x, None, dy=got[1])
    errors = []
    for label, a, b, bound in (("output", got[0], want[0],
                                L2_FP8_VS_BF16_OUTPUT),
                               ("input gradient", got[2], want[2],
                                L2_FP8_VS_BF16_GRAD)):
        error = rel_l2(a, b)
        if not error < bound:
            errors.append(f"{label}: rel L2 {error:.3e} against bf16 >= "
                          f"{bound}")
    check(errors, "after the optimizer steps")


def sgd_step_errors(weights, models, optimizer, lr):
    """Steps `optimizer` (SGD over `weights`, {name: Float8Tensor}) with
    learning rate `lr`: each weight must then hold the host models'
    quantization of its dequantized value minus lr times its gradient."""
    before = {name: dequantized(p) for name, p in weights.items()}
    grads = {name: p.grad.clone() for name, p in weights.items()}
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    errors = []
    for name, p in weights.items():
        new = before[name].clone().add_(grads[name], alpha=-lr)
        errors += quantized_errors(p, models[name],
                                   models[name].quantize(new), name)
    return errors


SGD_LRS = (1e-3, 4e-3, 5e-4, 2e-3)  # amaxes that rise and fall
DELAYED_VARIANTS = {"max": {"amax_compute_algo": "max", "margin": 0},
                    "most_recent-margin1": {
                        "amax_compute_algo": "most_recent", "margin": 1}}


@pytest.mark.parametrize("variant", list(DELAYED_VARIANTS))
@pytest.mark.parametrize("layer", ["Linear", "LayerNormMLP-gelu"])
def test_sgd_under_delayed_scaling(layer, variant):
    """SGD (param.add_(grad, alpha=-lr)) over 4 steps with training
    forwards between them (history length 4: it rolls over): each step's
    FP8 data is the host model's quantization of dequantized weight - lr *
    grad, the state as the model's; a no_grad forward changes nothing."""
    make, shape, _ = LAYERS[layer]
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                       amax_history_len=4,
                                       **DELAYED_VARIANTS[variant])
    module = build(make, fp8_recipe, preserve=True)
    perturb(module)
    weights = fp8_weights(module)
    models = initial_models(module, fp8_recipe)
    # foreach=False: what torch picks for Float8Tensor parameters anyway
    # (its foreach path takes only plain tensors).
    optimizer = torch.optim.SGD(module.parameters(), lr=SGD_LRS[0],
                                foreach=False)
    for step, lr in enumerate(SGD_LRS):
        x = torch.randn(*shape, device="cuda", dtype=BF16)
        if step == 1:
            with torch.no_grad(), te.fp8_autocast(fp8_recipe=fp8_recipe):
                module(x)
            update_models(module, {n: _Frozen(m) for n, m in models.items()},
                          "after a no_grad forward (no update)")
        train_step(module, x, fp8_recipe)
        update_models(module, models, f"after the forward of step {step}")
        errors = sgd_step_errors(weights, models, optimizer, lr)
        errors += [f"{name}: {e}" for name, p in weights.items()
                   for e in transpose_errors(p)]
        check(errors, f"{layer} {variant}, after SGD step {step} (lr {lr})")
    check_against_bf16_twin(module, make, shape, fp8_recipe)


class _Frozen:
    """A model whose update() does nothing (to check that nothing moved)."""

    def __init__(self, model):
        self.model = model

    def update(self):
        pass

    def errors(self, tensor):
        return self.model.errors(tensor)


def test_adamw_under_delayed_scaling():
    """AdamW (foreach=False, weight decay): each step runs param.mul_(1 -
    lr * wd) and then param.addcdiv_(exp_avg, denom, value=-step_size) on
    the parameter, each an in-place op that requantizes (both amaxes go to
    the same history slot); the moments are plain bf16 tensors
    (zeros_like of the parameter). The expected value is computed with the
    same torch ops on the dequantized weight and the optimizer's moments."""
    make, shape, _ = LAYERS["Linear"]
    fp8_recipe = hybrid()
    module = build(make, fp8_recipe, preserve=True)
    perturb(module)
    models = initial_models(module, fp8_recipe)
    p, model = module.weight, models["weight"]
    lr, wd, betas, eps = 1e-3, 0.1, (0.9, 0.999), 1e-8
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr, betas=betas,
                                  eps=eps, weight_decay=wd, foreach=False)
    for step in range(3):
        x = torch.randn(*shape, device="cuda", dtype=BF16)
        train_step(module, x, fp8_recipe)
        update_models(module, models, f"after the forward of step {step}")
        before = dequantized(p)
        optimizer.step()
        state = optimizer.state[p]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        for moment in (exp_avg, exp_avg_sq):
            assert not isinstance(moment, te.Float8Tensor)
            assert moment.dtype == BF16 and moment.shape == p.shape
        decayed = before.clone().mul_(1 - lr * wd)
        decayed_data = model.quantize(decayed)
        scale_inv = torch.tensor([f32(1.0 / model.scale)],
                                 dtype=torch.float32, device="cuda")
        decayed = (decayed_data.float() * scale_inv).to(BF16)
        count = float(state["step"])
        denom = (exp_avg_sq.sqrt()
                 / math.sqrt(1 - betas[1] ** count)).add_(eps)
        new = decayed.clone().addcdiv_(exp_avg, denom,
                                       value=-(lr / (1 - betas[0] ** count)))
        check(quantized_errors(p, model, model.quantize(new), "weight")
              + transpose_errors(p), f"after AdamW step {step}")
    check_against_bf16_twin(module, make, shape, fp8_recipe)


def test_sgd_under_current_scaling():
    """Float8CurrentScaling: every requantize scales by 448 / the amax of
    the new value (power-of-2 rounded when the recipe says so)."""
    make, shape, _ = LAYERS["LayerNormMLP-gelu"]
    fp8_recipe = current()
    module = build(make, fp8_recipe, preserve=True)
    perturb(module)
    weights = fp8_weights(module)
    models = initial_models(module, fp8_recipe)
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3, foreach=False)
    for step, lr in enumerate((1e-3, 4e-3, 5e-4)):
        x = torch.randn(*shape, device="cuda", dtype=BF16)
        train_step(module, x, fp8_recipe)
        check(sgd_step_errors(weights, models, optimizer, lr),
              f"after SGD step {step}")
    check_against_bf16_twin(module, make, shape, fp8_recipe)


# --- without fp8_autocast, inference -----------------------------------------


@pytest.mark.parametrize("fp8", list(RECIPES))
@pytest.mark.parametrize("layer", list(LAYERS))
def test_without_autocast_runs_dequantized(layer, fp8):
    """No FP8 recipe: the program runs on the dequantized weights, so a
    training step and a no_grad forward equal the twin's bit for bit, the
    weight gradient lands in param.grad (bf16), no transpose is made.
    (Under current scaling scale_inv is not 1: the dequantization shows.)"""
    make, shape, _ = LAYERS[layer]
    module = build(make, RECIPES[fp8]())
    perturb(module)
    twin = twin_of(module, make)
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    got = train_step(module, x, None)
    want = train_step(twin, x, None, dy=got[1])
    compare_steps(got, want, f"{layer} built under {fp8}, no autocast",
                  exact=True)
    for name, p in fp8_weights(module).items():
        assert p.grad is not None and p.grad.dtype == BF16, name
        assert p._transpose is None, name
    with torch.no_grad():
        check(same_errors(module(x), twin(x), "no_grad output"), layer)


@pytest.mark.parametrize("layer", list(LAYERS))
def test_inference_makes_no_transpose(layer):
    """torch.no_grad() under fp8_autocast (DelayedScaling, first call: both
    sides scale 1.0): the twin's output bit for bit, no `_transpose`; after
    an in-place change of the weights (requantized) the next call sees the
    new data (the inference parameter cache moved on)."""
    make, shape, _ = LAYERS[layer]
    fp8_recipe = hybrid()
    module = build(make, fp8_recipe).eval()
    perturb(module)
    twin = twin_of(module, make).eval()
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    with torch.no_grad(), te.fp8_autocast(fp8_recipe=fp8_recipe):
        first = module(x)
        check(same_errors(first, twin(x), "output"), layer)
    weights = fp8_weights(module)
    for name, p in weights.items():
        assert p._transpose is None, f"{name}: a _transpose in inference"
    twin_params = dict(twin.named_parameters())
    with torch.no_grad():
        for name, p in weights.items():
            p.mul_(0.5)
            twin_params[name].copy_(dequantized(p))
    with torch.no_grad(), te.fp8_autocast(fp8_recipe=fp8_recipe):
        second = module(x)
        check(same_errors(second, twin(x), "output after p.mul_(0.5)"),
              layer)
    assert not torch.equal(first, second), "the change did not reach the call"
    for name, p in weights.items():
        assert p._transpose is None, f"{name}: a _transpose in inference"


def test_parameter_memory_full_size():
    """LayerNormMLP 4096/16384: the FP8 weights' storage is 1 byte per
    element, and building it under fp8_model_init allocates that (plus the
    small parameters), where a plain build allocates 2 bytes per element.
    Nothing of the high-precision initialization stays behind."""
    elements = 4096 * 16384 * 2
    slack = 4 << 20  # allocator granularity, scaling state

    def allocated_by(make):
        gc.collect()
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        module = make()
        gc.collect()
        torch.cuda.synchronize()
        return module, torch.cuda.memory_allocated() - start

    make = mlp_full_size
    plain, plain_bytes = allocated_by(make)
    small = sum(p.numel() * p.element_size() for p in plain.parameters()
                if p.dim() == 1)
    del plain
    module, fp8_bytes = allocated_by(lambda: build(make, hybrid()))
    weights = fp8_weights(module)
    data_bytes = sum(p._data.numel() * p._data.element_size()
                     for p in weights.values())
    assert data_bytes == elements, f"FP8 data {data_bytes} bytes"
    assert abs(plain_bytes - (2 * elements + small)) < slack, \
        f"the plain build allocated {plain_bytes} bytes (measure broken?)"
    assert elements <= fp8_bytes < elements + small + slack, (
        f"building under fp8_model_init allocated {fp8_bytes} bytes, "
        f"expected {elements + small} (plain: {plain_bytes})")
    for name, p in weights.items():
        assert p._transpose is None, name


# --- state_dict, copies ------------------------------------------------------


def trained(make, shape, fp8_recipe, steps=2):
    """A module built under fp8_model_init after `steps` FP8 training steps
    and SGD steps (scales other than 1, histories, transposes)."""
    module = build(make, fp8_recipe)
    perturb(module)
    optimizer = torch.optim.SGD(module.parameters(), lr=1e-3, foreach=False)
    for _ in range(steps):
        train_step(module, torch.randn(*shape, device="cuda", dtype=BF16),
                   fp8_recipe)
        optimizer.step()
    module.zero_grad(set_to_none=True)
    return module


def fp8_copy_errors(got, want, what, scaling=True):
    """How Float8Tensor `got` differs from `want`: data bits, scale_inv,
    and (`scaling`) the DelayedScaling state. It must not share `want`'s
    data."""
    if not isinstance(got, te.Float8Tensor):
        return [f"{what}: a {type(got).__name__}, not a Float8Tensor"]
    errors = []
    if got.dtype != want.dtype or got.shape != want.shape:
        errors.append(f"{what}: {got.dtype} {tuple(got.shape)}")
    if not torch.equal(bits(got._data), bits(want._data)):
        errors.append(f"{what}: _data differs")
    if got._data.data_ptr() == want._data.data_ptr():
        errors.append(f"{what}: shares the original's _data")
    if not torch.equal(got._scale_inv, want._scale_inv):
        errors.append(f"{what}: _scale_inv {got._scale_inv.item()!r}, "
                      f"expected {want._scale_inv.item()!r}")
    if scaling and isinstance(got._scaling, type(want._scaling)):
        for field in ("scale", "amax_history"):
            a = getattr(got._scaling, field, None)
            b = getattr(want._scaling, field, None)
            if b is not None and (a is None or not torch.equal(a, b)):
                errors.append(f"{what}: scaling state '{field}' differs")
    elif scaling:
        errors.append(f"{what}: scaling state {type(got._scaling).__name__}")
    return errors


@pytest.mark.parametrize("fp8", list(RECIPES))
def test_save_load_and_deepcopy(fp8):
    """torch.save/torch.load(weights_only=False) of the state_dict gives
    the Float8Tensors back bit for bit (data, scale_inv, scaling state);
    copy.deepcopy of the module too, and its next training step equals the
    original's."""
    make, shape, _ = LAYERS["LayerNormMLP-gelu"]
    fp8_recipe = RECIPES[fp8]()
    module = trained(make, shape, fp8_recipe)
    weights = fp8_weights(module)
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    errors = []
    for name, p in weights.items():
        errors += fp8_copy_errors(loaded[name], p, f"loaded {name}")
    clone = copy.deepcopy(module)
    assert getattr(clone, "primary_weights_in_fp8", False) is True
    clone_weights = fp8_weights(clone)
    for name, p in weights.items():
        errors += fp8_copy_errors(clone_weights.get(name), p,
                                  f"deepcopied {name}")
    check(errors, f"{fp8}: copies")
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    got = train_step(clone, x, fp8_recipe)
    want = train_step(module, x, fp8_recipe, dy=got[1])
    compare_steps(got, want, f"{fp8}: the deepcopy's next step", exact=True)


@pytest.mark.parametrize("fp8", list(RECIPES))
def test_weights_only_load(fp8):
    """torch.load(weights_only=True), torch's default: the Float8Tensors
    come back bit for bit, with their scaling state."""
    make, shape, _ = LAYERS["LayerNormMLP-gelu"]
    module = trained(make, shape, RECIPES[fp8]())
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    errors = []
    for name, p in fp8_weights(module).items():
        errors += fp8_copy_errors(loaded[name], p, f"loaded {name}")
    check(errors, f"{fp8}: weights_only load")


@pytest.mark.parametrize("fp8", list(RECIPES))
def test_graphed_steps_equal_eager_steps(fp8):
    """make_graphed_callables of a module with FP8 weights: replays equal
    an eager twin's steps bit for bit (outputs, input and parameter
    gradients), with an SGD step on the weights between steps (the
    requantizations and the scale updates the graphs replay), and the
    weights' data and scaling states stay equal."""
    make, shape, _ = LAYERS["LayerNormMLP-gelu"]
    fp8_recipe = RECIPES[fp8]()
    eager = build(make, fp8_recipe)
    perturb(eager)
    graphed = copy.deepcopy(eager)
    sample = torch.randn(*shape, device="cuda", dtype=BF16,
                         requires_grad=True)
    graphed = te.make_graphed_callables(graphed, (sample,), fp8_enabled=True,
                                        fp8_recipe=fp8_recipe)
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-2, foreach=False)
                  for m in (eager, graphed)]
    errors = []
    for index in range(3):
        x = torch.randn(*shape, device="cuda", dtype=BF16)
        dy = torch.randn(*shape, device="cuda", dtype=BF16)
        want = train_step(eager, x, fp8_recipe, dy=dy)
        got = train_step(graphed, x, fp8_recipe, dy=dy)
        what = f"{fp8}: step {index}"
        errors += same_errors(got[0], want[0], f"{what} output")
        errors += same_errors(got[2], want[2], f"{what} input gradient")
        for name, grad in want[3].items():
            errors += same_errors(got[3][name], grad, f"{what} {name}.grad")
        for optimizer in optimizers:
            optimizer.step()
        graphed_weights = fp8_weights(graphed)
        for name, p in fp8_weights(eager).items():
            errors += fp8_copy_errors(graphed_weights.get(name), p,
                                      f"{what} {name}")
    check(errors, f"{fp8}: graphed")


@pytest.mark.parametrize("fp8", list(RECIPES))
def test_load_plain_state_dict_quantizes(fp8):
    """load_state_dict of a plain module's bf16 state_dict quantizes each
    weight in place with its own scaling (DelayedScaling: after a training
    forward, scale 448/amax of the initial weight; current: 448/amax of the
    loaded value); the parameters stay the same Float8Tensors."""
    make, shape, _ = LAYERS["LayerNormMLP-gelu"]
    fp8_recipe = RECIPES[fp8]()
    module = build(make, fp8_recipe, preserve=True)
    models = initial_models(module, fp8_recipe)
    train_step(module, torch.randn(*shape, device="cuda", dtype=BF16),
               fp8_recipe)
    update_models(module, models, "after a training forward")
    plain = make()
    perturb(plain)
    weights = fp8_weights(module)
    module.load_state_dict(plain.state_dict())
    errors = []
    plain_params = dict(plain.named_parameters())
    for name, p in module.named_parameters():
        if name not in weights:
            errors += same_errors(p.detach(), plain_params[name].detach(),
                                  name)
            continue
        if p is not weights[name]:
            errors.append(f"{name}: replaced, not loaded in place")
        want = models[name].quantize(plain_params[name].detach())
        errors += quantized_errors(p, models[name], want, name)
    check(errors, f"{fp8}: load_state_dict of bf16 weights")


@pytest.mark.parametrize("fp8", list(RECIPES))
def test_load_fp8_state_dict_copies_fp8_data(fp8):
    """load_state_dict of an FP8 module's state_dict into a fresh FP8
    module copies the FP8 data and scale_inv (TE's Float8Tensor.copy_
    between Float8Tensors does; transformer_engine/pytorch/tensor/
    float8_tensor.py): the checkpoint's values exactly, not requantized with
    the fresh module's scale."""
    make, shape, _ = LAYERS["LayerNormMLP-gelu"]
    fp8_recipe = RECIPES[fp8]()
    source = trained(make, shape, fp8_recipe)
    target = build(make, fp8_recipe)
    target.load_state_dict(source.state_dict())
    source_weights = fp8_weights(source)
    errors = []
    for name, p in fp8_weights(target).items():
        errors += fp8_copy_errors(p, source_weights[name], name,
                                  scaling=False)
    check(errors, f"{fp8}: load_state_dict of FP8 weights")


# --- initial values, tensor behaviour, refusals ------------------------------


@pytest.mark.parametrize("fp8", list(RECIPES))
@pytest.mark.parametrize("layer", ["LayerNormMLP-gelu", "TransformerLayer"])
def test_preserve_high_precision_init_val(layer, fp8):
    """preserve_high_precision_init_val=True keeps each FP8 weight's
    initial bf16 value on the CPU: that of a plain module built from the
    same seed, the FP8 data its quantization; cleared, None; without the
    flag, none is kept."""
    make, _, _ = LAYERS[layer]
    fp8_recipe = RECIPES[fp8]()
    seed = torch.initial_seed()
    torch.manual_seed(seed)
    module = build(make, fp8_recipe, preserve=True)
    torch.manual_seed(seed)
    plain = dict(make().named_parameters())
    errors = []
    for name, p in fp8_weights(module).items():
        initial = p.get_high_precision_init_val()
        assert initial is not None, name
        assert initial.device.type == "cpu", f"{name}: on {initial.device}"
        errors += same_errors(initial, plain[name].detach().cpu(),
                              f"{name}'s initial value")
        model = scaling_model(fp8_recipe)
        errors += quantized_errors(p, model, model.quantize(initial.cuda()),
                                   name)
        p.clear_high_precision_init_val()
        assert p.get_high_precision_init_val() is None, name
    check(errors, f"{layer} {fp8}")
    for name, p in fp8_weights(build(make, fp8_recipe)).items():
        assert p.get_high_precision_init_val() is None, name


def test_tensor_ops_see_the_dequantized_value():
    """What is not an in-place op works on the dequantized value and gives
    plain tensors: dequantize(), .float(), arithmetic, zeros_like (an
    optimizer's state), printing."""
    module = build(LAYERS["Linear"][0], current())  # scale_inv is not 1
    p = module.weight
    value = dequantized(p)
    check(same_errors(p.dequantize(), value, "dequantize()"), "Float8Tensor")
    torch.testing.assert_close(p.detach().float(), value.float(),
                               rtol=2 ** -8, atol=0)
    doubled = p.detach() * 2
    assert not isinstance(doubled, te.Float8Tensor)
    torch.testing.assert_close(doubled.float(), value.float() * 2,
                               rtol=2 ** -8, atol=0)
    zeros = torch.zeros_like(p)
    assert not isinstance(zeros, te.Float8Tensor)
    assert zeros.dtype == BF16 and zeros.shape == p.shape
    assert torch.count_nonzero(zeros) == 0
    assert str(p)


def test_batched_scale_update_equals_one_at_a_time():
    """float8_tensor.update_all runs the DelayedScaling update of all the
    states of one margin / length / algorithm in one kernel: bit for bit
    the update of each alone, for random histories with zero and nonzero
    new amaxes, over mixed margins and algorithms."""
    from tejit.pytorch.float8_tensor import DelayedScalingState, update_all
    settings = [(0, "max"), (1, "max"), (0, "most_recent")] * 3

    def states():
        torch.manual_seed(SEED + 7)
        made = []
        for index, (margin, algo) in enumerate(settings):
            state = DelayedScalingState(margin, 16, algo, device="cuda")
            state.amax_history.copy_(torch.rand(16, device="cuda") * 100)
            if index % 4 == 0:
                state.amax_history[0] = 0.0  # nothing quantized: no change
            state.scale.fill_(float(index + 1))
            made.append(state)
        return made

    batched, single = states(), states()
    update_all(batched)
    for state in single:
        update_all([state])
    for index, (a, b) in enumerate(zip(batched, single)):
        assert torch.equal(a.amax_history, b.amax_history), index
        assert torch.equal(a.scale, b.scale), index
    assert not torch.equal(batched[1].scale, states()[1].scale)


def test_context_and_refusals():
    """fp8_model_init(enabled=False) inside turns it off, modules outside
    are plain; tensor-parallel shards get FP8 weights too; split QKV
    weights (fuse_qkv_params=False) under current scaling, Float8BlockScaling
    and a recipe of another kind are refused."""
    with te.fp8_model_init(enabled=True, recipe=hybrid()):
        with te.fp8_model_init(enabled=False):
            off = te.Linear(256, 256, params_dtype=BF16)
        on = te.Linear(256, 256, params_dtype=BF16)
        shard = te.Linear(256, 256, tp_size=2, parallel_mode="column",
                          params_dtype=BF16)
        assert isinstance(shard.weight, te.Float8Tensor)
        assert tuple(shard.weight.shape) == (128, 256)
    # Split QKV weights share one scale: DelayedScaling only.
    with te.fp8_model_init(enabled=True, recipe=current()):
        with pytest.raises(NotImplementedError, match="fuse_qkv_params"):
            te.MultiheadAttention(256, 4, params_dtype=BF16,
                                  fuse_qkv_params=False)
        with pytest.raises(NotImplementedError, match="fuse_qkv_params"):
            te.TransformerLayer(256, 1024, 4, params_dtype=BF16,
                                fuse_qkv_params=False)
    after = te.Linear(256, 256, params_dtype=BF16)
    assert isinstance(on.weight, te.Float8Tensor) and on.primary_weights_in_fp8
    for module in (off, after):
        assert not isinstance(module.weight, te.Float8Tensor)
        assert not getattr(module, "primary_weights_in_fp8", False)
    with pytest.raises(TypeError):
        with te.fp8_model_init(enabled=True, recipe=object()):
            te.Linear(256, 256, params_dtype=BF16)
    with pytest.raises(NotImplementedError, match="Float8BlockScaling"):
        with te.fp8_model_init(enabled=True,
                               recipe=recipe.Float8BlockScaling()):
            te.Linear(256, 256, params_dtype=BF16)
