"""GPU tests of tejit.pytorch's DotProductAttention, MultiheadAttention and
TransformerLayer: forward and backward against independent PyTorch math on
the same inputs and parameters, dropout behaviour, and TE checkpoints.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_attention_layers.py
    (-k full for the full-size TransformerLayer steps only; -x -v as usual)

Data: fresh random inputs every run from one seed, printed at the start and
in every failure message (TEJIT_TEST_SEED=N repeats a run).

Comparisons (dropout 0), by relative L2 error ||got - ref|| / ||ref|| (an
L2 bound, not elementwise: the reference rounds at other points than the
kernels, see tests/gpu/test_pytorch_modules.py):
- DotProductAttention vs scaled_dot_product_attention in float64 on the
  same (rounded) q, k, v: output, dq, dk, dv below 1.6e-2 in bf16 (TE's
  bf16 rtol) and 4e-3 in fp16; for every mask (no_mask, causal, padding,
  padding_causal; padding compared on the valid rows only, with the output
  gradient zero on the padded ones), head size 64 and 128, multi-head, GQA
  and MQA, sbhd and bshd.
- MultiheadAttention and TransformerLayer vs a float32 composition written
  here from TE's definitions (norm, the q|k|v split of TE's parameters,
  rotary, attention, projection, bias + residual, LayerNormMLP with the
  activation, residual): without a recipe (bf16) below 1.6e-2; under
  fp8_autocast(DelayedScaling(HYBRID)) after two warm-up steps (the first
  casts with scale 1), output below 0.125 and gradients below 0.25 (TE's
  E4M3 / E5M2 rtol, the rule of tests/gpu/quickstart_te.py).
- The quickstart's size (hidden 4096, FFN 16384, 32 heads, seq 2048, batch
  4), and a Llama-3-8B-style layer (FFN 14336, 8 GQA groups, RMSNorm,
  SwiGLU, rotary, no biases, seq 4096, batch 2): one FP8 TransformerLayer
  step against the float32 composition, output below 0.125 and input
  gradient below 0.25.
- The inference program (eval mode under torch.no_grad()) of the seed and
  a Llama-style layer, small in bf16 and full size in FP8 after two
  training steps: output against the float32 composition, same bounds.
- Cross-attention with padded queries (TE's mask pair): padded rows of
  the output and of dq exactly 0, the rest as the float64 reference with
  those rows zeroed, same bounds.
- Sliding windows (window_size (left, right); the reference's band mask
  i - left <= j <= i + right comes from the indices alone): bf16
  DotProductAttention at s = 256 with a left bound on causal,
  padding_causal, no_mask and padding (and (left, 0) on no_mask),
  multi-head, GQA and MQA, sbhd and bshd, the DotProductAttention bounds;
  MultiheadAttention and TransformerLayer with window_size (128, 0) at
  s = 512, bf16 and FP8, their bounds; forward(window_size=...) overriding
  the constructor's (its own program) for all three; TE's two-sided
  window (32, 32) on no_mask either refused with an error naming the
  window or right. Each checks that the window moves its reference well
  beyond the bounds (attention 0.1, the blocks' attention output 0.05),
  so that ignoring it would fail.
Dropout > 0: finite outputs and gradients, train and eval differ, eval is
deterministic, two training forwards differ (fresh masks), and
torch.manual_seed repeats them. Hidden dropout forward and backward (bf16
and FP8) against the composition with the masks the layer drew, read off
its outputs (hidden_dropout_masks).
"""
import copy
import math

import pytest

from gpu_test_support import hybrid, perturb, run_seed, seed_per_test, torch

import torch.nn.functional as F  # noqa: E402

import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402

SEED = run_seed("test_attention_layers")

BF16, FP16 = torch.bfloat16, torch.float16
L2_DTYPE = {BF16: 1.6e-2, FP16: 4e-3}
L2_FP8_OUTPUT = 0.125
L2_FP8_GRAD = 0.25
FP8_WARMUP_STEPS = 2


fresh_seed = seed_per_test(SEED)


def rel_l2(got, want):
    """||got - want|| / ||want||; inf if `got` has a NaN or inf."""
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


RELU_FAMILY = ("relu", "reglu", "srelu", "sreglu")
L2_RELU_FC1 = 0.1
# clamped_swiglu's clamps make its derivative a step at +-limit: a gate or
# linear input rounded across a limit passes or stops the whole element's
# gradient. In bf16 (the norm's output rounded; the reference rounds fc1's
# output too, activation_ref) that left 4.5% relative L2 in the MLP's
# norm and fc1 gradients on an H200: those get L2_RELU_FC1; under FP8
# (tests/unit's FP8 clamped_swiglu bounds are 0.4-0.55 against swiglu's
# 0.2-0.3) every gradient gets this bound.
L2_FP8_CLAMPED_GRAD = 0.5


def check_errors(errors, limits, what):
    """errors: {name: value}; limits: {name: bound}."""
    failed = {n: (e, limits[n]) for n, e in errors.items() if not
              e < limits[n]}
    report = ", ".join(f"{n} {e:.2e}" for n, e in errors.items())
    assert not failed, (f"{what} (seed {SEED}): relative L2 over the bound: "
                        f"{failed}; all: {report}")


# --- reference math ----------------------------------------------------------


def window_allowed(window, seq, device):
    """[1, 1, s, s] bool, True where key j lies in query i's sliding
    window (left, right): i - left <= j <= i + right, -1 leaving that side
    unbounded (TE's window_size, from the index arithmetic alone)."""
    left, right = window
    i = torch.arange(seq, device=device).view(seq, 1)
    j = torch.arange(seq, device=device).view(1, seq)
    allowed = torch.ones(seq, seq, dtype=torch.bool, device=device)
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    return allowed[None, None]


def allowed_mask(mask_type, padding, seq, device, window=None):
    """[b or 1, 1, s, s] bool, True where a query may attend to a key;
    None for no mask. `padding`: [b, 1, 1, s] bool, True = padded;
    `window`: a sliding window (left, right) on top, or None."""
    allowed = None
    if "causal" in mask_type:
        allowed = torch.ones(seq, seq, dtype=torch.bool,
                             device=device).tril()[None, None]
    if "padding" in mask_type:
        keys = ~padding  # [b, 1, 1, s]
        allowed = keys if allowed is None else allowed & keys
    if window is not None:
        band = window_allowed(window, seq, device)
        allowed = band if allowed is None else allowed & band
    return allowed


def attention_ref(q, k, v, mask_type, padding, qkv_format, scale,
                  window=None):
    """softmax(q k^T * scale, masked) v in q's dtype: q [.., h, d] and
    k, v [.., g, d] in `qkv_format`, with the sliding `window` (left,
    right) or None; returns [s, b, h*d] / [b, s, h*d]. A query that may
    see no key (a padded one whose window holds only padding) attends to
    every key instead of giving NaN: such rows are left out of every
    comparison and get a zero output gradient."""
    if qkv_format == "sbhd":
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, h, s, d]
    else:
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    heads, groups, seq = q.shape[1], k.shape[1], q.shape[2]
    k = k.repeat_interleave(heads // groups, dim=1)
    v = v.repeat_interleave(heads // groups, dim=1)
    allowed = allowed_mask(mask_type, padding, seq, q.device, window)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if allowed is not None:
        allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v)  # [b, h, s, d]
    if qkv_format == "sbhd":
        out = out.permute(2, 0, 1, 3)
    else:
        out = out.permute(0, 2, 1, 3)
    return out.reshape(*out.shape[:2], -1)


def random_padding(batch, seq, device):
    """[b, 1, 1, s] bool, True on each sequence's padded tail (lengths in
    [s/4, s], at least one sequence full)."""
    lengths = torch.randint(seq // 4, seq + 1, (batch,))
    lengths[0] = seq
    positions = torch.arange(seq)
    mask = positions[None, :] >= lengths[:, None]
    return mask.view(batch, 1, 1, seq).to(device)


def valid_rows(padding, qkv_format):
    """[s, b, 1] (sbhd) / [b, s, 1] (bshd) float: 1 on valid tokens."""
    valid = (~padding.view(padding.shape[0], -1)).float()  # [b, s]
    valid = valid.t() if qkv_format == "sbhd" else valid
    return valid.unsqueeze(-1)


def norm_ref(x, weight, bias, normalization, eps, zero_centered_gamma):
    gamma = 1 + weight if zero_centered_gamma else weight
    if normalization == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
    return F.layer_norm(x, (x.shape[-1],), gamma, bias, eps)


def activation_ref(h, activation, params=None):
    if activation == "clamped_swiglu":  # GPT-OSS's, as TE's
        # fc1's output rounded to bf16 as tejit stores it before the
        # activation kernel: the clamps' gradients are steps, which float32
        # values across a limit from the bf16 ones would flip (4-5%
        # relative L2 behind the activation).
        a, b = h.to(BF16).float().chunk(2, dim=-1)
        a = a.clamp(max=params["limit"])
        return (a * torch.sigmoid(params["alpha"] * a)
                * (b.clamp(-params["limit"], params["limit"])
                   + params["glu_linear_offset"]))
    if activation in ("geglu", "qgeglu", "reglu", "sreglu", "swiglu"):
        a, b = h.chunk(2, dim=-1)
        return activation_ref(a, activation[:-3] + "lu" if activation !=
                              "swiglu" else "silu") * b
    return {"gelu": lambda t: F.gelu(t, approximate="tanh"),
            "qgelu": lambda t: t * torch.sigmoid(1.702 * t),
            "relu": F.relu, "srelu": lambda t: F.relu(t) ** 2,
            "silu": F.silu}[activation](h)


def rotary_ref(t, freqs, qkv_format, interleaved=False):
    """TE's rotary: t cos(f) + rotate_half(t) sin(f) over the first r
    channels (freqs [s, 1, 1, r]), the rest unchanged; rotate_half pairs
    the halves of the r channels, or, interleaved, adjacent channels."""
    seq = t.shape[0] if qkv_format == "sbhd" else t.shape[1]
    f = freqs[:seq].float()
    if qkv_format == "bshd":
        f = f.transpose(0, 1)  # [1, s, 1, r]
    width = f.shape[-1]
    part, rest = t[..., :width], t[..., width:]
    if interleaved:
        even, odd = part[..., 0::2], part[..., 1::2]
        rotated = torch.stack([-odd, even], dim=-1).flatten(-2)
    else:
        half = width // 2
        rotated = torch.cat([-part[..., half:], part[..., :half]], dim=-1)
    return torch.cat([part * torch.cos(f) + rotated * torch.sin(f), rest],
                     dim=-1)


def split_qkv(group, p, prefix, heads, groups, kv_channels):
    """TE's Q, K, V weights and biases from a module's parameters `p`
    (name -> float32 tensor), written independently of tejit's code."""
    def fused(name):
        tensor = p[prefix + name]
        if not group.interleaved:
            return tensor.split([heads * kv_channels,
                                 groups * kv_channels,
                                 groups * kv_channels])
        per_group = heads // groups
        trailing = tensor.shape[1:]
        t = tensor.view(groups, per_group + 2, kv_channels, *trailing)
        return (t[:, :per_group].reshape(-1, *trailing),
                t[:, per_group].reshape(-1, *trailing),
                t[:, per_group + 1].reshape(-1, *trailing))
    if group.fuse:
        weights = fused("weight")
        biases = fused("bias") if prefix + "bias" in p else (None,) * 3
    else:
        weights = [p[f"{prefix}{n}_weight"] for n in ("query", "key",
                                                       "value")]
        biases = [p.get(f"{prefix}{n}_bias") for n in ("query", "key",
                                                        "value")]
    return weights, biases


def mha_ref(mha, x, p, mask_type, padding, freqs, prefix="", window=None):
    """MultiheadAttention in float32 with the sliding `window` (or None):
    (output incl. proj bias, norm output or None)."""
    fmt, h, g, d = (mha.qkv_format, mha.num_attention_heads,
                    mha.num_gqa_groups, mha.kv_channels)
    group_name = "layernorm_qkv." if mha.input_layernorm else "qkv."
    group = getattr(mha, group_name[:-1])
    ln = None
    if mha.input_layernorm:
        ln = norm_ref(x, p[prefix + group_name + "layer_norm_weight"],
                      p.get(prefix + group_name + "layer_norm_bias"),
                      mha.normalization, mha.layernorm_epsilon,
                      mha.zero_centered_gamma)
    inp = ln if ln is not None else x
    weights, biases = split_qkv(group, p, prefix + group_name, h, g, d)
    q, k, v = (F.linear(inp, w, b) for w, b in zip(weights, biases))
    q = q.view(*q.shape[:2], h, d)
    k = k.view(*k.shape[:2], g, d)
    v = v.view(*v.shape[:2], g, d)
    if freqs is not None:
        interleaved = getattr(mha, "rotary_pos_interleaved", False)
        q, k = (rotary_ref(t, freqs, fmt, interleaved) for t in (q, k))
    attn = attention_ref(q, k, v, mask_type, padding, fmt,
                         1.0 / math.sqrt(d), window)
    out = F.linear(attn, p[prefix + "proj.weight"],
                   p.get(prefix + "proj.bias"))
    return out, ln


def mlp_ref(layer, x, p, with_norm=False):
    """A TransformerLayer's layernorm_mlp on `x` in float32 (and, with
    `with_norm`, the normalized input it read)."""
    ln = norm_ref(x, p["layernorm_mlp.layer_norm_weight"],
                  p.get("layernorm_mlp.layer_norm_bias"),
                  layer.normalization, layer.layernorm_epsilon,
                  layer.zero_centered_gamma)
    fc1 = F.linear(ln, p["layernorm_mlp.fc1_weight"],
                   p.get("layernorm_mlp.fc1_bias"))
    out = F.linear(activation_ref(fc1, layer.activation,
                                  layer.activation_params),
                   p["layernorm_mlp.fc2_weight"],
                   p.get("layernorm_mlp.fc2_bias"))
    return (out, ln) if with_norm else out


def transformer_ref(layer, x, p, mask_type, padding, freqs,
                    dropout_scales=None, window=None):
    """TransformerLayer in float32; `dropout_scales` (keep / (1 - p) after
    the attention block and after the MLP) applies hidden dropout,
    `window` a sliding window (left, right) in the self-attention."""
    attn, ln = mha_ref(layer.self_attention, x, p, mask_type, padding, freqs,
                       prefix="self_attention.", window=window)
    if getattr(layer, "parallel_attention_mlp", False):
        # TE's parallel block: both read x, one dropout over their sum.
        assert dropout_scales is None
        return x + attn + mlp_ref(layer, x, p)
    if dropout_scales is not None:
        attn = attn * dropout_scales[0]
    post = layer.apply_residual_connection_post_layernorm
    # TE: with output_layernorm the attention has no input norm, and its
    # residual is the input itself.
    post_attention = post and not getattr(layer, "output_layernorm", False)
    hidden = (ln if post_attention else x) + attn
    mlp, ln2 = mlp_ref(layer, hidden, p, with_norm=True)
    if dropout_scales is not None:
        mlp = mlp * dropout_scales[1]
    out = (ln2 if post else hidden) + mlp
    if getattr(layer, "output_layernorm", False):
        # TE's post-LN layer: one more norm, after the last residual.
        out = norm_ref(out, p["layernorm.weight"], p.get("layernorm.bias"),
                       layer.normalization, layer.layernorm_epsilon,
                       layer.zero_centered_gamma)
    return out


def rotary_freqs(seq, dim, device, interleaved=False):
    """TE's RotaryPositionEmbedding table [s, 1, 1, d] float32: each angle
    in both halves, or, interleaved, twice in a row."""
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=device).float()
                           / dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), inv)
    if interleaved:
        return angles.repeat_interleave(2, dim=-1).view(seq, 1, 1, dim)
    return torch.cat([angles, angles], dim=-1).view(seq, 1, 1, dim)


# --- DotProductAttention -----------------------------------------------------

DPA_CASES = [(dtype, d, mask, groups, fmt)
             for dtype in (BF16, FP16) for d in (64, 128)
             for mask in ("no_mask", "causal", "padding", "padding_causal")
             for groups in (8, 2, 1) for fmt in ("sbhd", "bshd")]


def dot_product_attention_errors(dtype, d, mask, groups, fmt, seq=128,
                                 window=None):
    """One forward and backward of DotProductAttention (8 heads, batch 2,
    the sliding `window` given to the constructor, or none) against
    attention_ref in float64 on the same q, k, v: ({output, dq, dk, dv:
    relative L2 error on the valid rows}, how far the reference is from
    the one without the window: None without one)."""
    heads, batch = 8, 2
    window_arg = {} if window is None else {"window_size": window}
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format=fmt, attn_mask_type=mask,
                                 **window_arg)
    lead = (seq, batch) if fmt == "sbhd" else (batch, seq)
    q = torch.randn(*lead, heads, d, device="cuda", dtype=dtype)
    k = torch.randn(*lead, groups, d, device="cuda", dtype=dtype)
    v = torch.randn(*lead, groups, d, device="cuda", dtype=dtype)
    for t in (q, k, v):
        t.requires_grad_()
    padding = (random_padding(batch, seq, "cuda") if "padding" in mask
               else None)
    out = dpa(q, k, v, attention_mask=padding)
    assert tuple(out.shape) == (*lead, heads * d)
    assert out.dtype == dtype
    dy = torch.randn_like(out)
    rows = (valid_rows(padding, fmt).to(dtype) if padding is not None else
            torch.ones(*lead, 1, device="cuda", dtype=dtype))
    dy = dy * rows
    out.backward(dy)

    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = attention_ref(q64, k64, v64, mask, padding, fmt,
                        1.0 / math.sqrt(d), window)
    ref.backward(dy.double())
    rows64, rows4 = rows.double(), rows.double().unsqueeze(-1)
    errors = {"output": rel_l2(out * rows, ref * rows64),
              "dq": rel_l2(q.grad * rows4, q64.grad * rows4),
              "dk": rel_l2(k.grad * rows4, k64.grad * rows4),
              "dv": rel_l2(v.grad * rows4, v64.grad * rows4)}
    gap = None
    if window is not None:
        with torch.no_grad():
            full = attention_ref(q64, k64, v64, mask, padding, fmt,
                                 1.0 / math.sqrt(d))
        gap = rel_l2(full * rows64, ref.detach() * rows64)
    return errors, gap


@pytest.mark.parametrize(
    "dtype,d,mask,groups,fmt", DPA_CASES,
    ids=[f"{str(c[0])[6:]}-d{c[1]}-{c[2]}-g{c[3]}-{c[4]}" for c in DPA_CASES])
def test_dot_product_attention(dtype, d, mask, groups, fmt):
    errors, _ = dot_product_attention_errors(dtype, d, mask, groups, fmt)
    limit = L2_DTYPE[dtype]
    check_errors(errors, dict.fromkeys(errors, limit),
                 f"DotProductAttention {dtype} d {d} {mask} groups {groups} "
                 f"{fmt}")


def cross_attention_ref(q, k, v, causal, kv_padding, qkv_format, scale):
    """Cross-attention from its definition in q's dtype: queries [.., h,
    d] over keys/values [.., g, d] of another length, the causal mask
    aligned top-left (query i sees keys j <= i), `kv_padding` [b, 1, 1,
    s_kv] (True = padded key) or None; [s_q, b, h*d] / [b, s_q, h*d]."""
    if qkv_format == "sbhd":
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, h, s, d]
    else:
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    heads, groups = q.shape[1], k.shape[1]
    k = k.repeat_interleave(heads // groups, dim=1)
    v = v.repeat_interleave(heads // groups, dim=1)
    sq, skv = q.shape[2], k.shape[2]
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # [b, h, sq, skv]
    hidden = torch.zeros(sq, skv, dtype=torch.bool, device=q.device)
    if causal:
        i = torch.arange(sq, device=q.device).view(sq, 1)
        j = torch.arange(skv, device=q.device).view(1, skv)
        hidden = j > i
    hidden = hidden[None, None]
    if kv_padding is not None:
        hidden = hidden | kv_padding
    scores = scores.masked_fill(hidden, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    if qkv_format == "sbhd":
        out = out.permute(2, 0, 1, 3)
    else:
        out = out.permute(0, 2, 1, 3)
    return out.reshape(*out.shape[:2], -1)


# Cross-attention: 256 queries over 96 keys and 64 over 320, every mask
# type tejit takes there, GQA and MHA, both layouts.
DPA_CROSS_CASES = [
    (sq, skv, mask, groups, fmt)
    for sq, skv in ((256, 96), (64, 320))
    for mask in ("no_mask", "causal", "padding", "padding_causal")
    for groups in (2, 8) for fmt in ("sbhd", "bshd")]


@pytest.mark.parametrize(
    "sq,skv,mask,groups,fmt", DPA_CROSS_CASES,
    ids=[f"q{c[0]}-kv{c[1]}-{c[2]}-g{c[3]}-{c[4]}" for c in DPA_CROSS_CASES])
def test_dot_product_attention_cross(sq, skv, mask, groups, fmt):
    """DotProductAttention(attention_type="cross") on keys and values of
    their own length, forward and backward, against cross_attention_ref
    in float64 with test_dot_product_attention's bounds; padding masks
    come as TE's (query mask, key/value mask) pair, the query mask all
    False."""
    heads, batch, d, dtype = 8, 2, 64, BF16
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format=fmt, attn_mask_type=mask,
                                 attention_type="cross")
    lead_q = (sq, batch) if fmt == "sbhd" else (batch, sq)
    lead_kv = (skv, batch) if fmt == "sbhd" else (batch, skv)
    q = torch.randn(*lead_q, heads, d, device="cuda", dtype=dtype)
    k = torch.randn(*lead_kv, groups, d, device="cuda", dtype=dtype)
    v = torch.randn(*lead_kv, groups, d, device="cuda", dtype=dtype)
    for t in (q, k, v):
        t.requires_grad_()
    kv_padding = (random_padding(batch, skv, "cuda") if "padding" in mask
                  else None)
    mask_arg = None
    if kv_padding is not None:
        mask_arg = (torch.zeros(batch, 1, 1, sq, dtype=torch.bool,
                                device="cuda"), kv_padding)
    out = dpa(q, k, v, attention_mask=mask_arg)
    assert tuple(out.shape) == (*lead_q, heads * d)
    dy = torch.randn_like(out)
    out.backward(dy)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = cross_attention_ref(q64, k64, v64, "causal" in mask, kv_padding,
                              fmt, 1.0 / math.sqrt(d))
    ref.backward(dy.double())
    errors = {"output": rel_l2(out, ref), "dq": rel_l2(q.grad, q64.grad),
              "dk": rel_l2(k.grad, k64.grad), "dv": rel_l2(v.grad, v64.grad)}
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[dtype]),
                 f"DotProductAttention cross s_q {sq} s_kv {skv} {mask} "
                 f"groups {groups} {fmt}")
    if kv_padding is not None:
        # Padded keys and values get no gradient.
        padded = kv_padding.view(batch, skv)
        padded = padded.t() if fmt == "sbhd" else padded
        assert torch.count_nonzero(k.grad[padded]) == 0
        assert torch.count_nonzero(v.grad[padded]) == 0


@pytest.mark.parametrize("mask", ["padding", "padding_causal"])
@pytest.mark.parametrize("fmt", ["sbhd", "bshd"])
@pytest.mark.parametrize("sq,skv", [(192, 80), (128, 128)])
def test_dot_product_attention_cross_padded_queries(mask, fmt, sq, skv):
    """TE's mask pair with the query mask padding some queries, keys and
    values of their own length or as many as the queries (the pair's two
    masks then differ): the padded queries' output rows and dq rows are
    exactly 0; the rest, dk and dv match cross_attention_ref in float64
    with the padded queries' rows left out (they contribute nothing)."""
    heads, groups, batch, d = 8, 2, 2, 64
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format=fmt, attn_mask_type=mask,
                                 attention_type="cross")
    lead_q = (sq, batch) if fmt == "sbhd" else (batch, sq)
    lead_kv = (skv, batch) if fmt == "sbhd" else (batch, skv)
    q = torch.randn(*lead_q, heads, d, device="cuda", dtype=BF16)
    k = torch.randn(*lead_kv, groups, d, device="cuda", dtype=BF16)
    v = torch.randn(*lead_kv, groups, d, device="cuda", dtype=BF16)
    for t in (q, k, v):
        t.requires_grad_()
    q_padding = random_padding(batch, sq, "cuda")
    kv_padding = random_padding(batch, skv, "cuda")
    out = dpa(q, k, v, attention_mask=(q_padding, kv_padding))
    dy = torch.randn_like(out)
    out.backward(dy)
    rows = valid_rows(q_padding, fmt)  # 1 on valid queries
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = cross_attention_ref(q64, k64, v64, "causal" in mask, kv_padding,
                              fmt, 1.0 / math.sqrt(d)) * rows.double()
    ref.backward(dy.double())
    errors = {"output": rel_l2(out, ref), "dq": rel_l2(q.grad, q64.grad),
              "dk": rel_l2(k.grad, k64.grad), "dv": rel_l2(v.grad, v64.grad)}
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]),
                 f"DotProductAttention cross padded queries {mask} {fmt}")
    padded = rows.squeeze(-1) == 0
    assert torch.count_nonzero(out[padded]) == 0
    assert torch.count_nonzero(q.grad[padded]) == 0


# Sliding windows (window_size (left, right)), bf16, s = 256: a left bound
# with each mask type (and the right bound 0, the causal diagonal, without
# a causal type), multi-head, GQA and MQA, both layouts.
WINDOW_SEQ = 256
DPA_WINDOW_CASES = [
    (d, mask, window, groups, fmt)
    for d, mask, window, groups in (
        (64, "causal", (64, 0), 2), (128, "causal", (64, 0), 8),
        (64, "padding_causal", (48, 0), 2),
        (128, "padding_causal", (32, 0), 1),
        (64, "no_mask", (32, -1), 2), (64, "padding", (40, -1), 1),
        (64, "no_mask", (16, 0), 2))
    for fmt in ("sbhd", "bshd")]
# The window changes the reference by at least this (relative L2), many
# times the bounds: a layer that ignored it would fail.
WINDOW_GAP = 0.1


@pytest.mark.parametrize(
    "d,mask,window,groups,fmt", DPA_WINDOW_CASES,
    ids=[f"d{c[0]}-{c[1]}-w{c[2][0]}_{c[2][1]}-g{c[3]}-{c[4]}"
         for c in DPA_WINDOW_CASES])
def test_dot_product_attention_window(d, mask, window, groups, fmt):
    """DotProductAttention(window_size=window) forward and backward against
    attention_ref with the window's band mask built from the indices,
    test_dot_product_attention's bounds."""
    errors, gap = dot_product_attention_errors(BF16, d, mask, groups, fmt,
                                               seq=WINDOW_SEQ, window=window)
    what = (f"DotProductAttention window {window} d {d} {mask} groups "
            f"{groups} {fmt}")
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]), what)
    assert gap > WINDOW_GAP, (
        f"{what} (seed {SEED}): the window moves the reference by only "
        f"{gap:.2e}, too little to tell it was applied")


def test_dot_product_attention_two_sided_window():
    """TE's two-sided window on no_mask, (32, 32): a right bound other
    than the causal diagonal, which cuDNN's fused engines do not compute
    right on every version. Refused with an error naming the window (the
    module's NotImplementedError, or the runtime's when it builds the
    program), or computed right; never a silently wrong result."""
    try:
        errors, gap = dot_product_attention_errors(
            BF16, 64, "no_mask", 2, "sbhd", seq=WINDOW_SEQ, window=(32, 32))
    except (tejit.TejitError, NotImplementedError) as error:
        assert "window" in str(error), f"unclear refusal: {error}"
        print(f"two-sided window refused: {error}")
        return
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]),
                 "DotProductAttention window (32, 32) no_mask")
    assert gap > WINDOW_GAP


def test_dot_product_attention_forward_window_override():
    """A forward-time window_size overrides the constructor's and selects
    its own program, as in TE; a forward attn_mask_type keeps the
    constructor's window."""
    dpa = te.DotProductAttention(4, 64, num_gqa_groups=2,
                                 attn_mask_type="causal",
                                 window_size=(64, 0))
    q = torch.randn(WINDOW_SEQ, 2, 4, 64, device="cuda", dtype=BF16)
    k, v = (torch.randn(WINDOW_SEQ, 2, 2, 64, device="cuda", dtype=BF16)
            for _ in range(2))
    calls = {  # name: (forward arguments, reference mask type, window)
        "constructor (64, 0)": ({}, "causal", (64, 0)),
        "forward (16, 0)": ({"window_size": (16, 0)}, "causal", (16, 0)),
        "forward (-1, 0)": ({"window_size": (-1, 0)}, "causal", None),
        "no_mask, constructor's": ({"attn_mask_type": "no_mask"}, "no_mask",
                                   (64, 0)),
        "no_mask, forward (32, -1)": ({"attn_mask_type": "no_mask",
                                       "window_size": (32, -1)}, "no_mask",
                                      (32, -1)),
    }
    q64, k64, v64 = (t.double() for t in (q, k, v))
    outputs, errors = {}, {}
    with torch.no_grad():
        for name, (call, mask, window) in calls.items():
            outputs[name] = dpa(q, k, v, **call)
            errors[name] = rel_l2(outputs[name], attention_ref(
                q64, k64, v64, mask, None, "sbhd", 1 / 8, window))
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]),
                 "window override")
    assert len(dpa._programs) == len(calls)
    moved = rel_l2(outputs["forward (16, 0)"], outputs["constructor (64, 0)"])
    assert moved > WINDOW_GAP, f"the forward's window moved the output by " \
        f"only {moved:.2e}"


def test_dot_product_attention_forward_mask_type_override():
    """A forward-time attn_mask_type selects its own program, as in TE."""
    dpa = te.DotProductAttention(4, 64, attn_mask_type="causal")
    q, k, v = (torch.randn(64, 2, 4, 64, device="cuda", dtype=BF16)
               for _ in range(3))
    with torch.no_grad():
        causal = dpa(q, k, v)
        full = dpa(q, k, v, attn_mask_type="no_mask")
    scale = 1 / 8
    check_errors({"causal": rel_l2(causal, attention_ref(
        q.double(), k.double(), v.double(), "causal", None, "sbhd", scale)),
        "no_mask": rel_l2(full, attention_ref(
            q.double(), k.double(), v.double(), "no_mask", None, "sbhd",
            scale))}, {"causal": 1.6e-2, "no_mask": 1.6e-2}, "override")
    assert len(dpa._programs) == 2


# --- MultiheadAttention / TransformerLayer -----------------------------------


def block_step(module, x, fp8_recipe, dy, **call):
    module.zero_grad(set_to_none=True)
    x.grad = None
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(x, **call)
    out.backward(dy)
    return out.detach()


# How far a gradient is from the reference's: (deviation of the
# difference, size of the reference), their quotient the error. NORM gives
# rel_l2's ||got - want|| / ||want||.
NORM = (lambda d: d.norm().item(), lambda r: r.norm().item())


def param_grad_errors(grads, params, what, measure=NORM):
    """{parameter name: error} of the module's gradients `grads` against
    the float32 reference parameters' (`params`) gradients, by `measure`;
    inf for a gradient with a NaN or inf."""
    deviation, size = measure
    errors = {}
    for name, grad in grads.items():
        assert grad is not None, f"{what}: no gradient for {name}"
        got, want = grad.double(), params[name].grad.double()
        reference = want
        if name.endswith("key_bias"):
            # Its exact gradient is zero (adding q.b_k shifts a whole
            # softmax row), so an error relative to it means nothing:
            # measure it against the query bias gradient's size instead.
            reference = params[name.replace("key_bias", "query_bias")].grad
        if not torch.isfinite(got).all():
            errors[name] = math.inf
            continue
        errors[name] = deviation(got - want) / max(
            size(reference.double()), 1e-30)
    return errors


def block_inputs(module, fmt, mask, rotary, seq, batch, hidden):
    """A block's random training inputs: (x, dy, padding, freqs, call,
    rows): x [*lead, hidden] bf16 (sbhd or bshd), a random key padding
    mask under the padding mask types, the rotary table (`rotary`: True for
    every channel, or the rotated width; the module's layout), the forward's
    keyword arguments, the valid rows (1 per kept token) and dy, zero on
    padded rows."""
    lead = (seq, batch) if fmt == "sbhd" else (batch, seq)
    x = torch.randn(*lead, hidden, device="cuda", dtype=BF16,
                    requires_grad=True)
    padding = random_padding(batch, seq, "cuda") if "padding" in mask \
        else None
    attention = getattr(module, "self_attention", module)
    freqs = (rotary_freqs(seq, module.kv_channels if rotary is True
                          else rotary, "cuda",
                          getattr(attention, "rotary_pos_interleaved", False))
             if rotary else None)
    call = {}
    if padding is not None:
        call["attention_mask"] = padding
    if freqs is not None:
        call["rotary_pos_emb"] = freqs
    rows = (valid_rows(padding, fmt) if padding is not None
            else torch.ones(*lead, 1, device="cuda"))
    dy = (torch.randn(*lead, hidden, device="cuda") * rows).to(BF16)
    return x, dy, padding, freqs, call, rows


def check_block(module, reference, fmt, fp8_recipe, mask="causal",
                rotary=False, seq=64, batch=2, hidden=None,
                what="", param_grads=True, before_step=None):
    """One training step of `module` (after the FP8 warm-up) against
    `reference` in float32; `before_step(x, call)` runs just before it."""
    hidden = hidden or module.hidden_size
    x, dy, padding, freqs, call, rows = block_inputs(
        module, fmt, mask, rotary, seq, batch, hidden)
    for _ in range(FP8_WARMUP_STEPS if fp8_recipe is not None else 0):
        block_step(module, x, fp8_recipe, dy, **call)
    if before_step is not None:
        before_step(x, call)
    out = block_step(module, x, fp8_recipe, dy, **call)
    grads = {n: p.grad for n, p in module.named_parameters()}
    dx = x.grad

    params = {n: p.detach().float().requires_grad_()
              for n, p in module.named_parameters()}
    x32 = x.detach().float().requires_grad_()
    ref = reference(module, x32, params, mask, padding, freqs)
    ref.backward(dy.float())
    errors = {"output": rel_l2(out * rows, ref * rows),
              "input grad": rel_l2(dx * rows, x32.grad * rows)}
    if param_grads:
        errors.update(param_grad_errors(grads, params, what))
    if fp8_recipe is None:
        limits = dict.fromkeys(errors, L2_DTYPE[BF16])
        if getattr(module, "activation", "") in RELU_FAMILY:
            # ReLU's derivative is a step: where the bf16 and float32
            # pre-activations straddle 0 (~0.3% of elements at bf16's
            # rounding) whole gradient elements flip, which alone gives a
            # relative L2 of sqrt(0.003) ~ 5% in fc1's gradients.
            for name in errors:
                if "fc1_" in name:
                    limits[name] = L2_RELU_FC1
        if getattr(module, "activation", "") == "clamped_swiglu":
            for name in errors:
                if "fc1_" in name or "layernorm_mlp.layer_norm" in name:
                    limits[name] = L2_RELU_FC1
    else:
        clamped = getattr(module, "activation", "") == "clamped_swiglu"
        limits = dict.fromkeys(
            errors, L2_FP8_CLAMPED_GRAD if clamped else L2_FP8_GRAD)
        limits["output"] = L2_FP8_OUTPUT
    check_errors(errors, limits, what)
    return errors


def mha_reference(mha, x, p, mask, padding, freqs, window=None):
    return mha_ref(mha, x, p, mask, padding, freqs, window=window)[0]


MHA_CASES = {
    "LayerNorm-causal-sbhd-gqa": (dict(hidden_size=256, num_attention_heads=8,
                                       num_gqa_groups=2, input_layernorm=True),
                                  "causal", False),
    "no-layernorm-no_mask-bshd-nobias": (dict(
        hidden_size=256, num_attention_heads=4, input_layernorm=False,
        bias=False, qkv_format="bshd"), "no_mask", False),
    "RMSNorm-padding_causal-rotary": (dict(
        hidden_size=256, num_attention_heads=4, input_layernorm=True,
        normalization="RMSNorm"), "padding_causal", True),
    "fused-interleaved-gqa-kv_channels": (dict(
        hidden_size=256, num_attention_heads=8, num_gqa_groups=2,
        kv_channels=64, fuse_qkv_params=True, input_layernorm=True),
        "causal", False),
}


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multihead_attention(case, fp8):
    kwargs, mask, rotary = MHA_CASES[case]
    mha = te.MultiheadAttention(attention_dropout=0.0, attn_mask_type=mask,
                                params_dtype=BF16, **kwargs)
    perturb(mha)
    check_block(mha, mha_reference, mha.qkv_format,
                hybrid() if fp8 else None, mask=mask, rotary=rotary,
                what=f"MultiheadAttention {case} {'fp8' if fp8 else 'bf16'}")


def test_multihead_attention_return_bias():
    mha = te.MultiheadAttention(256, 4, attention_dropout=0.0,
                                return_bias=True, params_dtype=BF16)
    perturb(mha)
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        out, bias = mha(x)
        params = {n: p.float() for n, p in mha.named_parameters()}
        ref = mha_ref(mha, x.float(), params, "causal", None, None)[0]
    assert bias is mha.proj.bias or torch.equal(bias, mha.proj.bias)
    check_errors({"output": rel_l2(out.float() + bias.float(), ref)},
                 {"output": 1.6e-2}, "return_bias")


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_multihead_attention_layernorm_output(fp8):
    """return_layernorm_output (with input_layernorm and return_bias): the
    forward returns (output, proj bias, norm output), as TE's; both
    against the float32 composition, and the input's gradient through
    both outputs (the norm's output used as, e.g., a post-LN residual)."""
    mha = te.MultiheadAttention(256, 4, attention_dropout=0.0,
                                input_layernorm=True, return_bias=True,
                                return_layernorm_output=True,
                                params_dtype=BF16)
    perturb(mha)
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16,
                    requires_grad=True)
    dy, dln = (torch.randn(64, 2, 256, device="cuda", dtype=BF16)
               for _ in range(2))
    recipe_ = hybrid() if fp8 else None
    for _ in range(FP8_WARMUP_STEPS if fp8 else 1):
        x.grad = None
        with te.fp8_autocast(enabled=fp8, fp8_recipe=recipe_):
            out, bias, ln = mha(x)
        torch.autograd.backward([out, ln], [dy, dln])
    assert bias is mha.proj.bias or torch.equal(bias, mha.proj.bias)
    x32 = x.detach().float().requires_grad_()
    params = {n: p.detach().float() for n, p in mha.named_parameters()}
    ref_out, ref_ln = mha_ref(mha, x32, params, "causal", None, None)
    torch.autograd.backward([ref_out, ref_ln], [dy.float(), dln.float()])
    # check_block's bounds (the norm's output is bf16 in both modes).
    check_errors({"output": rel_l2(out.float() + bias.float(), ref_out),
                  "ln_output": rel_l2(ln, ref_ln),
                  "input grad": rel_l2(x.grad, x32.grad)},
                 {"output": L2_FP8_OUTPUT if fp8 else L2_DTYPE[BF16],
                  "ln_output": L2_DTYPE[BF16],
                  "input grad": L2_FP8_GRAD if fp8 else L2_DTYPE[BF16]},
                 f"return_layernorm_output {'fp8' if fp8 else 'bf16'}")


TL_CASES = {
    "default": (dict(hidden_size=256, ffn_hidden_size=1024,
                     num_attention_heads=4), "causal", False),
    "llama-like-bshd": (dict(
        hidden_size=256, ffn_hidden_size=512, num_attention_heads=8,
        num_gqa_groups=2, normalization="RMSNorm", activation="swiglu",
        bias=False, attn_input_format="bshd"), "padding_causal", True),
    "post-ln-residual-zero-gamma-no_mask": (dict(
        hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4,
        apply_residual_connection_post_layernorm=True,
        zero_centered_gamma=True, activation="relu"), "no_mask", False),
    # GPT-OSS-like: clamped_swiglu (a limit low enough to clamp part of
    # fc1's outputs at these sizes), GQA, RMSNorm, rotary, biases.
    "gpt-oss-like-clamped-swiglu-bshd": (dict(
        hidden_size=256, ffn_hidden_size=512, num_attention_heads=8,
        num_gqa_groups=2, normalization="RMSNorm",
        activation="clamped_swiglu",
        activation_params={"limit": 0.3, "alpha": 1.702},
        attn_input_format="bshd"), "causal", True),
    "fused-qkv-padding": (dict(hidden_size=256, ffn_hidden_size=1024,
                               num_attention_heads=8, num_gqa_groups=4,
                               fuse_qkv_params=True), "padding", False),
    # TE's post-LN (BERT) layer: no norm before the attention, one after.
    "output-layernorm-post-ln-residual": (dict(
        hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4,
        output_layernorm=True,
        apply_residual_connection_post_layernorm=True), "padding", False),
    "output-layernorm-rmsnorm": (dict(
        hidden_size=256, ffn_hidden_size=512, num_attention_heads=4,
        output_layernorm=True, normalization="RMSNorm",
        activation="swiglu"), "causal", False),
    # TE's parallel block (GPT-J, PaLM): attention and MLP both read x.
    "parallel-attention-mlp": (dict(
        hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4,
        parallel_attention_mlp=True), "causal", False),
    "parallel-attention-mlp-rmsnorm-swiglu-rotary-bshd": (dict(
        hidden_size=256, ffn_hidden_size=512, num_attention_heads=8,
        num_gqa_groups=2, normalization="RMSNorm", activation="swiglu",
        bias=False, attn_input_format="bshd", parallel_attention_mlp=True),
        "padding_causal", True),
    # GPT-J's block: parallel, rotary on 16 of the 64 channels of a head,
    # interleaved pairs.
    "gptj-parallel-interleaved-partial-rotary": (dict(
        hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4,
        parallel_attention_mlp=True, rotary_pos_interleaved=True),
        "causal", 16),
    # GPT-NeoX's: parallel, rotary on a quarter of each head (halves).
    "neox-parallel-partial-rotary-bshd": (dict(
        hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4,
        attn_input_format="bshd", parallel_attention_mlp=True),
        "padding_causal", 16),
    "interleaved-rotary-gqa": (dict(
        hidden_size=256, ffn_hidden_size=512, num_attention_heads=8,
        num_gqa_groups=2, normalization="RMSNorm", activation="swiglu",
        bias=False, rotary_pos_interleaved=True), "causal", True),
}


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(TL_CASES))
def test_transformer_layer(case, fp8):
    kwargs, mask, rotary = TL_CASES[case]
    layer = te.TransformerLayer(hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type=mask, params_dtype=BF16,
                                **kwargs)
    perturb(layer)
    check_block(layer, transformer_ref, layer.attn_input_format,
                hybrid() if fp8 else None, mask=mask, rotary=rotary,
                what=f"TransformerLayer {case} {'fp8' if fp8 else 'bf16'}")


# Sliding windows in the fused blocks: window_size (128, 0) on s = 512.
BLOCK_WINDOW = (128, 0)
BLOCK_WINDOW_SEQ = 512
# The window moves the attention block's output (less the projection bias)
# by at least this, 3x the bf16 bound (about 0.15 to 0.5 at these sizes;
# the QKV weights' gradients move by 0.35 to 0.5).
BLOCK_WINDOW_GAP = 0.05
MHA_WINDOW_CASES = {
    "LayerNorm-causal-sbhd-gqa": (dict(hidden_size=256, num_attention_heads=8,
                                       num_gqa_groups=2, input_layernorm=True),
                                  "causal", False),
    "RMSNorm-padding_causal-rotary-bshd": (dict(
        hidden_size=256, num_attention_heads=4, input_layernorm=True,
        normalization="RMSNorm", qkv_format="bshd"), "padding_causal", True),
}
TL_WINDOW_CASES = {
    "default-gqa": (dict(hidden_size=256, ffn_hidden_size=1024,
                         num_attention_heads=8, num_gqa_groups=2), "causal",
                    False),
    "llama-like-bshd": (dict(
        hidden_size=256, ffn_hidden_size=512, num_attention_heads=8,
        num_gqa_groups=2, normalization="RMSNorm", activation="swiglu",
        bias=False, attn_input_format="bshd"), "causal", True),
}


def windowed_reference(reference, window, gaps):
    """check_block's `reference` with the sliding `window`. Appends to
    `gaps` how far the attention block's output (the projection's, less
    its bias) is from the one without the window: the window must matter
    at the test's size for the comparison to tell it was applied."""
    def run(module, x, p, mask, padding, freqs):
        attention = getattr(module, "self_attention", module)
        prefix = "self_attention." if attention is not module else ""
        bias = p.get(prefix + "proj.bias")
        with torch.no_grad():
            outputs = [mha_ref(attention, x, p, mask, padding, freqs,
                               prefix=prefix, window=w)[0]
                       for w in (window, None)]
            if bias is not None:
                outputs = [out - bias for out in outputs]
            gaps.append(rel_l2(*outputs))
        return reference(module, x, p, mask, padding, freqs, window=window)
    return run


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(MHA_WINDOW_CASES))
def test_multihead_attention_window(case, fp8):
    """MultiheadAttention(window_size=(128, 0)), one training step against
    the float32 composition with the window, test_multihead_attention's
    bounds."""
    kwargs, mask, rotary = MHA_WINDOW_CASES[case]
    mha = te.MultiheadAttention(attention_dropout=0.0, attn_mask_type=mask,
                                window_size=BLOCK_WINDOW, params_dtype=BF16,
                                **kwargs)
    perturb(mha)
    gaps = []
    what = (f"MultiheadAttention window {BLOCK_WINDOW} {case} "
            f"{'fp8' if fp8 else 'bf16'}")
    check_block(mha, windowed_reference(mha_reference, BLOCK_WINDOW, gaps),
                mha.qkv_format, hybrid() if fp8 else None, mask=mask,
                rotary=rotary, seq=BLOCK_WINDOW_SEQ, what=what)
    assert gaps[-1] > BLOCK_WINDOW_GAP, (
        f"{what} (seed {SEED}): the window moves the attention by only "
        f"{gaps[-1]:.2e}")


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(TL_WINDOW_CASES))
def test_transformer_layer_window(case, fp8):
    """TransformerLayer(window_size=(128, 0)), one training step against
    the float32 composition with the window, test_transformer_layer's
    bounds (the QKV weights' gradients see the window most)."""
    kwargs, mask, rotary = TL_WINDOW_CASES[case]
    layer = te.TransformerLayer(hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type=mask,
                                window_size=BLOCK_WINDOW, params_dtype=BF16,
                                **kwargs)
    perturb(layer)
    gaps = []
    what = (f"TransformerLayer window {BLOCK_WINDOW} {case} "
            f"{'fp8' if fp8 else 'bf16'}")
    check_block(layer, windowed_reference(transformer_ref, BLOCK_WINDOW,
                                          gaps),
                layer.attn_input_format, hybrid() if fp8 else None,
                mask=mask, rotary=rotary, seq=BLOCK_WINDOW_SEQ, what=what)
    assert gaps[-1] > BLOCK_WINDOW_GAP, (
        f"{what} (seed {SEED}): the window moves the attention by only "
        f"{gaps[-1]:.2e}")


@pytest.mark.parametrize("kind", ["MultiheadAttention", "TransformerLayer"])
def test_block_forward_window_override(kind):
    """forward(window_size=...) overrides the constructor's window with a
    program of its own, as TE's; inference (eval, no_grad), bf16."""
    if kind == "MultiheadAttention":
        module = te.MultiheadAttention(256, 8, num_gqa_groups=2,
                                       attention_dropout=0.0,
                                       input_layernorm=True,
                                       window_size=BLOCK_WINDOW,
                                       params_dtype=BF16)
        reference = mha_reference
    else:
        module = te.TransformerLayer(256, 1024, 8, num_gqa_groups=2,
                                     hidden_dropout=0.0,
                                     attention_dropout=0.0,
                                     window_size=BLOCK_WINDOW,
                                     params_dtype=BF16)
        reference = transformer_ref
    perturb(module)
    module.eval()
    x = torch.randn(BLOCK_WINDOW_SEQ, 2, 256, device="cuda", dtype=BF16)
    params = {n: p.detach().float() for n, p in module.named_parameters()}
    calls = {  # name: (forward arguments, the reference's window)
        "constructor (128, 0)": ({}, BLOCK_WINDOW),
        "forward (32, 0)": ({"window_size": (32, 0)}, (32, 0)),
        "forward (-1, 0)": ({"window_size": (-1, 0)}, None),
    }
    outputs, errors = {}, {}
    with torch.no_grad():
        for name, (call, window) in calls.items():
            outputs[name] = module(x, **call)
            errors[name] = rel_l2(outputs[name], reference(
                module, x.float(), params, "causal", None, None,
                window=window))
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]),
                 f"{kind} window override")
    assert len(module._programs) == len(calls)
    first, *others = outputs.values()
    assert not any(torch.equal(first, other) for other in others), \
        f"{kind}: the forward's window_size changed nothing"


def test_transformer_layer_full_size_fp8_step():
    """The quickstart's layer at its size: one FP8 step (after the warm-up)
    against the float32 composition, quickstart_te.py's bounds."""
    layer = te.TransformerLayer(4096, 16384, 32, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    perturb(layer)
    errors = check_block(layer, transformer_ref, "sbhd", hybrid(),
                         seq=2048, batch=4, param_grads=False,
                         what="TransformerLayer full size fp8")
    print(f"full-size FP8 step: output {errors['output']:.4f}, input grad "
          f"{errors['input grad']:.4f}")


def test_parallel_layer_full_size_fp8_step():
    """TE's parallel block, GPT-J-style (attention and MLP side by side,
    rotary on 64 of each head's 128 channels, interleaved pairs) at the
    quickstart's size: one FP8 step against the float32 composition, the
    same bounds."""
    layer = te.TransformerLayer(4096, 16384, 32, hidden_dropout=0.0,
                                attention_dropout=0.0,
                                parallel_attention_mlp=True,
                                rotary_pos_interleaved=True,
                                params_dtype=BF16)
    perturb(layer)
    errors = check_block(layer, transformer_ref, "sbhd", hybrid(),
                         rotary=64, seq=2048, batch=2, param_grads=False,
                         what="parallel TransformerLayer full size fp8")
    print(f"full-size parallel FP8 step: output {errors['output']:.4f}, "
          f"input grad {errors['input grad']:.4f}")


def test_llama_layer_full_size_fp8_step():
    """A Llama-3-8B-style layer at its size (RMSNorm, 32 heads in 8 GQA
    groups, rotary, causal, SwiGLU, no biases; seq 4096, batch 2): one FP8
    step against the float32 composition, the same bounds."""
    layer = te.TransformerLayer(4096, 14336, 32, num_gqa_groups=8,
                                hidden_dropout=0.0, attention_dropout=0.0,
                                normalization="RMSNorm", activation="swiglu",
                                bias=False, params_dtype=BF16)
    perturb(layer)
    errors = check_block(layer, transformer_ref, "sbhd", hybrid(),
                         rotary=True, seq=4096, batch=2, param_grads=False,
                         what="Llama-style TransformerLayer full size fp8")
    print(f"full-size Llama FP8 step: output {errors['output']:.4f}, input "
          f"grad {errors['input grad']:.4f}")


# --- dropout -----------------------------------------------------------------


def dropout_checks(make, x, what, **call):
    """make(): a module with dropout > 0 (training mode)."""
    torch.manual_seed(SEED)
    module = make()
    twin = copy.deepcopy(module)  # no programs yet: compiles its own
    torch.manual_seed(SEED + 1)
    first = module(x, **call)
    second = module(x, **call)
    assert torch.isfinite(first).all() and torch.isfinite(second).all(), what
    assert not torch.equal(first, second), f"{what}: masks repeat"
    (first.float().square().sum() + second.float().sum()).backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), \
            f"{what}: gradient of {name}"
    torch.manual_seed(SEED + 1)
    again = twin(x, **call)
    assert torch.equal(again, first), \
        f"{what}: torch.manual_seed does not repeat the dropout masks"
    module.eval()
    with torch.no_grad():
        eval_a = module(x, **call)
        eval_b = module(x, **call)
    assert torch.equal(eval_a, eval_b), f"{what}: eval is not deterministic"
    assert not torch.equal(eval_a, first), f"{what}: eval applies dropout"
    module.train()
    return module


def test_dropout_transformer_layer():
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16,
                    requires_grad=True)
    dropout_checks(lambda: te.TransformerLayer(256, 1024, 4,
                                               params_dtype=BF16),
                   x, "TransformerLayer dropout")


def test_dropout_multihead_attention():
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16,
                    requires_grad=True)
    dropout_checks(lambda: te.MultiheadAttention(
        256, 4, attention_dropout=0.3, input_layernorm=True,
        params_dtype=BF16), x, "MultiheadAttention dropout")


def test_dropout_dot_product_attention():
    q, k, v = (torch.randn(64, 2, 4, 64, device="cuda", dtype=BF16,
                           requires_grad=True) for _ in range(3))

    class Wrap(torch.nn.Module):  # one positional input, as the others
        def __init__(self):
            super().__init__()
            self.dpa = te.DotProductAttention(4, 64, attention_dropout=0.3)
            # a parameter so the gradient check has one to look at
            self.scale = torch.nn.Parameter(torch.ones((), device="cuda",
                                                       dtype=BF16))

        def forward(self, x):
            return self.dpa(x * self.scale, k, v)

    dropout_checks(Wrap, q, "DotProductAttention dropout")


def restart_dropout_streams(module, seed):
    """Restarts the dropout stream of each of `module`'s programs at `seed`:
    the next forward of any of them draws the same masks."""
    for compiled in module._programs.values():
        compiled.program.set_seed(seed)


DROPOUT_PROBE = 512.0


def hidden_dropout_masks(layer, x, seed, call):
    """The keep masks (after the attention block, after the MLP) that a
    TransformerLayer's forward draws from a dropout stream restarted at
    `seed`, read off forwards without a recipe: DROPOUT_PROBE added to the
    projection's bias (then fc2's) moves exactly the kept elements of its
    dropout's output, by DROPOUT_PROBE / (1 - p), while what it moves
    through the rest of the layer stays far below DROPOUT_PROBE / 2."""
    params = dict(layer.named_parameters())

    def forward():
        restart_dropout_streams(layer, seed)
        with torch.no_grad():
            return layer(x, **call).float()

    with torch.no_grad():
        layer(x, **call)  # compiles the program a restart then reaches
    base = forward()
    masks = []
    for name in ("self_attention.proj.bias", "layernorm_mlp.fc2_bias"):
        bias = params[name]
        saved = bias.detach().clone()
        with torch.no_grad():
            bias.add_(DROPOUT_PROBE)
        moved = (forward() - base).abs()
        with torch.no_grad():
            bias.copy_(saved)
        masks.append(moved > DROPOUT_PROBE / 2)
    return masks


HIDDEN_DROPOUT_CASES = {
    "small-bf16": ((256, 1024, 4), 64, 2, False),
    "small-fp8": ((256, 1024, 4), 64, 2, True),
    # The quickstart's layer at its size.
    "full-fp8": ((4096, 16384, 32), 2048, 4, True),
}


@pytest.mark.parametrize("case", list(HIDDEN_DROPOUT_CASES))
def test_hidden_dropout_matches_reference(case):
    """TransformerLayer with hidden dropout, forward and backward, against
    the float32 composition with the masks the layer drew: the backward
    must apply its forward's masks, which it draws again from the saved RNG
    state (no mask is stored); a wrong mask moves fc2's and the projection's
    bias gradients by about their own size. The bounds of
    test_transformer_layer."""
    sizes, seq, batch, fp8 = HIDDEN_DROPOUT_CASES[case]
    rate = 0.3
    layer = te.TransformerLayer(*sizes, hidden_dropout=rate,
                                attention_dropout=0.0, params_dtype=BF16)
    perturb(layer)
    seed = SEED + 7
    scales = []

    def before_step(x, call):
        masks = hidden_dropout_masks(layer, x, seed, call)
        for mask in masks:
            kept = mask.float().mean().item()
            assert abs(kept - (1 - rate)) < 0.02, \
                f"hidden dropout kept {kept:.3f} of the elements"
        scales[:] = [mask.float() / (1 - rate) for mask in masks]
        restart_dropout_streams(layer, seed)

    def reference(module, x, p, mask, padding, freqs):
        return transformer_ref(module, x, p, mask, padding, freqs,
                               dropout_scales=scales)

    errors = check_block(layer, reference, "sbhd",
                         hybrid() if fp8 else None, seq=seq, batch=batch,
                         before_step=before_step,
                         what=f"TransformerLayer hidden dropout {case}")
    print(f"hidden dropout {case}: " + ", ".join(
        f"{name} {error:.4f}" for name, error in errors.items()))


# Slices (positions for sbhd, samples for bshd): 64 and 48, so that a
# branch keeping fewer than 20% or more than 80% of them at rate 0.5 (the
# check below) is a one-in-a-thousand event, not one run in fifty.
@pytest.mark.parametrize("fmt,seq,batch", [("sbhd", 64, 2),
                                           ("bshd", 16, 48)])
def test_drop_path_matches_reference(fmt, seq, batch):
    """TransformerLayer(drop_path_rate=0.5), TE's DropPath: each index of
    the input's first dim (a position for sbhd, a sample for bshd) keeps or
    drops the attention block's output and, independently, the MLP's, the
    kept ones scaled by 2. Per slice, the output must match exactly one of
    the four float32 compositions (attention and MLP each kept or
    dropped), the others far from it; both outcomes occur at each site;
    the backward, against the composition with the masks found, applies
    the forward's draws."""
    rate = 0.5
    layer = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.0, drop_path_rate=rate,
                                attn_input_format=fmt, params_dtype=BF16)
    perturb(layer)
    layer.train()
    lead = (seq, batch) if fmt == "sbhd" else (batch, seq)
    # A small input: the branches (whose size the norms fix) then weigh in
    # every slice's output, so the four compositions are far apart.
    x = (0.1 * torch.randn(*lead, 256, device="cuda")).to(
        BF16).requires_grad_()
    dy = torch.randn(*lead, 256, device="cuda", dtype=BF16)
    y = layer(x)
    y.backward(dy)
    params = {n: p.detach().float().requires_grad_()
              for n, p in layer.named_parameters()}
    x32 = x.detach().float().requires_grad_()
    scale = 1.0 / (1.0 - rate)

    def compose(attn_keep, mlp_keep):
        """The layer with per-slice keep factors [first dim, 1, 1]."""
        attn, _ = mha_ref(layer.self_attention, x32, params, "causal", None,
                          None, prefix="self_attention.")
        hidden = x32 + attn * attn_keep * scale
        return hidden + mlp_ref(layer, hidden, params) * mlp_keep * scale

    slices = lead[0]
    with torch.no_grad():
        candidates = {}
        for a in (0.0, 1.0):
            for m in (0.0, 1.0):
                keep = torch.full((slices, 1, 1), 1.0, device="cuda")
                candidates[(a, m)] = compose(keep * a, keep * m)
        got = y.detach().float()
        # Per slice, relative L2 to each candidate.
        errors = {c: ((got - ref).flatten(1).norm(dim=1)
                      / ref.flatten(1).norm(dim=1))
                  for c, ref in candidates.items()}
        stacked = torch.stack(list(errors.values()))  # [4, slices]
        best, order = stacked.sort(dim=0)
    assert (best[0] < L2_DTYPE[BF16]).all(), (
        f"drop path {fmt} (seed {SEED}): some slices match no composition: "
        f"{best[0].max().item():.2e}")
    assert (best[1] > 5 * L2_DTYPE[BF16]).all(), (
        f"drop path {fmt}: some slices match two compositions")
    choice = [list(candidates)[i] for i in order[0].tolist()]
    attn_keep = torch.tensor([c[0] for c in choice], device="cuda")
    mlp_keep = torch.tensor([c[1] for c in choice], device="cuda")
    for name, kept in (("attention", attn_keep), ("mlp", mlp_keep)):
        fraction = kept.mean().item()
        assert 0.2 < fraction < 0.8, (
            f"drop path {fmt}: the {name} branch kept {fraction:.2f} of "
            f"{slices} slices at rate {rate}")
    ref = compose(attn_keep.view(-1, 1, 1), mlp_keep.view(-1, 1, 1))
    ref.backward(dy.float())
    errors = {"input grad": rel_l2(x.grad, x32.grad)}
    for name in ("self_attention.proj.weight", "layernorm_mlp.fc2_weight",
                 "layernorm_mlp.fc1_weight"):
        errors[name] = rel_l2(dict(layer.named_parameters())[name].grad,
                              params[name].grad)
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]),
                 f"drop path {fmt}")


def test_eval_mode_matches_dropout_free_layer():
    """In eval mode a dropout layer computes what a dropout-free one does."""
    layer = te.TransformerLayer(256, 1024, 4, params_dtype=BF16)
    quiet = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    quiet.load_state_dict(layer.state_dict())
    layer.eval()
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        assert torch.equal(layer(x), quiet(x))


INFERENCE_CASES = {
    # (constructor arguments, seq, batch, FP8, rotary)
    "seed-bf16": (dict(hidden_size=256, ffn_hidden_size=1024,
                       num_attention_heads=4), 64, 2, False, False),
    "llama-bf16": (dict(hidden_size=256, ffn_hidden_size=512,
                        num_attention_heads=8, num_gqa_groups=2,
                        normalization="RMSNorm", activation="swiglu",
                        bias=False), 64, 2, False, True),
    "seed-full-fp8": (dict(hidden_size=4096, ffn_hidden_size=16384,
                           num_attention_heads=32), 2048, 4, True, False),
    "llama-full-fp8": (dict(hidden_size=4096, ffn_hidden_size=14336,
                            num_attention_heads=32, num_gqa_groups=8,
                            normalization="RMSNorm", activation="swiglu",
                            bias=False), 4096, 2, True, True),
}


@pytest.mark.parametrize("case", list(INFERENCE_CASES))
def test_inference_forward_matches_reference(case):
    """The inference program (eval mode, torch.no_grad(): no saved
    activations, GELU in the GEMM, residuals read by the GEMMs) against the
    float32 composition: FP8 after two training steps have set the scales
    (output bound 0.125), bf16 below TE's 1.6e-2."""
    kwargs, seq, batch, fp8, rotary = INFERENCE_CASES[case]
    layer = te.TransformerLayer(hidden_dropout=0.0, attention_dropout=0.0,
                                params_dtype=BF16, **kwargs)
    perturb(layer)
    x = torch.randn(seq, batch, layer.hidden_size, device="cuda", dtype=BF16,
                    requires_grad=True)
    freqs = rotary_freqs(seq, layer.kv_channels, "cuda") if rotary else None
    call = {"rotary_pos_emb": freqs} if rotary else {}
    fp8_recipe = hybrid() if fp8 else None
    dy = torch.randn_like(x)
    for _ in range(FP8_WARMUP_STEPS if fp8 else 0):
        block_step(layer, x, fp8_recipe, dy, **call)
    layer.eval()
    with torch.no_grad(), te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
        out = layer(x.detach(), **call)
        params = {n: p.detach().float()
                  for n, p in layer.named_parameters()}
        ref = transformer_ref(layer, x.detach().float(), params, "causal",
                              None, freqs)
    error = rel_l2(out, ref)
    bound = L2_FP8_OUTPUT if fp8 else L2_DTYPE[BF16]
    check_errors({"output": error}, {"output": bound},
                 f"TransformerLayer inference {case}")
    print(f"inference {case}: output {error:.4f}")


def test_training_mode_drops_out_under_no_grad():
    """Dropout follows the module's mode, not grad mode (as in TE): in
    training mode under torch.no_grad() the layer still drops out, with a
    fresh mask each call, at about the configured rate."""
    layer = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.5, params_dtype=BF16)
    quiet = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    quiet.load_state_dict(layer.state_dict())
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        reference = quiet(x)
        first, second = layer(x), layer(x)
    assert torch.isfinite(first).all() and torch.isfinite(second).all()
    assert not torch.equal(first, reference)
    assert not torch.equal(first, second)
    # The same layer recorded by autograd drops out the same way: its
    # output is as far from the dropout-free one.
    recorded = layer(x.clone().requires_grad_())
    far = (first - reference).float().norm() / reference.float().norm()
    far_recorded = ((recorded.detach() - reference).float().norm()
                    / reference.float().norm())
    assert 0.5 * far_recorded < far < 2.0 * far_recorded, (far, far_recorded)
    layer.eval()
    with torch.no_grad():
        assert torch.equal(layer(x), reference)


# --- TE checkpoints ----------------------------------------------------------


def test_te_state_dict_loads():
    """A TE-style state_dict (TE's names, `_extra_state` entries, default
    fuse_qkv_params=False split Q/K/V) loads strictly and gives the layer
    those weights."""
    source = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                 attention_dropout=0.0, params_dtype=BF16)
    perturb(source)
    state = {name: p.detach().clone() for name, p in
             source.named_parameters()}
    for prefix in ("self_attention.layernorm_qkv.",
                   "self_attention.core_attention.", "self_attention.proj.",
                   "layernorm_mlp.", ""):
        state[prefix + "_extra_state"] = torch.empty(0, dtype=torch.uint8)
    expected = {"self_attention.layernorm_qkv.query_weight",
                "self_attention.layernorm_qkv.key_weight",
                "self_attention.layernorm_qkv.value_weight",
                "self_attention.layernorm_qkv.query_bias",
                "self_attention.proj.weight", "layernorm_mlp.fc1_weight",
                "layernorm_mlp.fc2_bias"}
    assert expected <= set(state)
    target = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                 attention_dropout=0.0, params_dtype=BF16)
    result = target.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        assert torch.equal(target(x), source(x))
    # The split Q/K/V still reach the program as one buffer.
    qkv = target.self_attention.layernorm_qkv
    fused = target._argument("self_attention.layernorm_qkv.weight", BF16)
    assert fused.data_ptr() == qkv.query_weight.data_ptr()
