"""GPU tests of attention bias and ALiBi in tejit.pytorch
(docs/attention-bias.md; TE's core_attention_bias_type /
core_attention_bias / alibi_slopes): forward and backward against PyTorch
math written here from the contract's formula, on the same inputs.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_attention_bias.py
    (-k full for the full-size TransformerLayer step only; -x -v as usual)

Data: fresh random inputs every run from the seed of
tests/gpu/test_attention_layers.py (whose helpers and bounds this file
imports; one seed for both, printed at the start and in every failure
message; TEJIT_TEST_SEED=N repeats a run).

Reference (float64 for DotProductAttention, float32 for the blocks):
scores S = scale * q.k + bias (post_scale_bias; pre_scale_bias: scale *
(q.k + bias)), or + alibi with alibi[h, i, j] = -slope[h] * |i - j + off|,
off = s_kv - s_q except for causal / padding_causal (off = 0), slopes the
caller's ([h] or [b, h]) or TE's vanilla ones (n = 2^floor(log2 h), 2^(-8
(k + 1) / n) for k < n, then 2^(-4 (2 (k - n) + 1) / n)); then the
masks: causal top-left (j <= i), causal_bottom_right (j <= i + s_kv -
s_q), key padding, arbitrary (TE's unfused fill: -10000 where masked);
softmax; times v (GQA: each key/value head serves heads / groups query
heads). The bias gradient is autograd's through that formula (the sum
over the batch of dS for the 1hss shape).

Compared, by relative L2 error ||got - ref|| / ||ref||:
- DotProductAttention (8 or 12 heads, GQA, batch 2, s = 128; cross-
  attention 64 queries over 160 keys and 192 over 80): output, dq, dk, dv
  below 1.6e-2 in bf16 and 4e-3 in fp16 (test_attention_layers.py's, TE's
  bf16 rtol), the bias gradient below 2.5e-2 in bf16 and 1e-2 in fp16
  (TE's fused-attention test tolerance: it is a sum over the batch of dS);
  rows of padded queries are left out (zero output gradient there). Each
  case also checks that the bias moves its reference by more than 0.05,
  so that a bias left out would fail. Cases: post_scale_bias of every
  shape (1hss with requires_grad, from a float32 bias: the gradient comes
  back through the cast), pre_scale_bias (with TE's default scale and a
  custom one), ALiBi with vanilla slopes (8 and 12 heads), [h] and [b, h]
  slopes, masks no_mask, causal, causal_bottom_right, padding,
  padding_causal, arbitrary masks without and with a bias (its gradient
  with a mask shared by the batch), bf16 and fp16, sbhd and bshd.
- MultiheadAttention and TransformerLayer (hidden 256, 8 heads, GQA, s =
  128) with a T5-style relative position bias [1, h, s, s] built from a
  bucketed table that requires grad (the table's gradient compared too),
  and with ALiBi (vanilla, [h], [b, h] slopes), against the float32
  compositions of test_attention_layers.py (mha_ref, transformer_ref, with
  the attention above): without a recipe every error below 1.6e-2 (the
  bias table's 2.5e-2); under fp8_autocast(DelayedScaling(HYBRID)) after
  two warm-up steps output below 0.125 and gradients below 0.25.
- The seed's size (hidden 4096, FFN 16384, 32 heads, seq 2048, batch 2):
  one FP8 TransformerLayer step with ALiBi (vanilla slopes), output below
  0.125 and input gradient below 0.25.
Also: one program per bias key (type, shape, requires grad, slopes), and
a bias gradient only when the bias requires grad.
"""
import contextlib
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import hybrid, perturb, seed_per_test, torch  # noqa

import tejit.pytorch as te  # noqa: E402

import test_attention_layers as layers  # noqa: E402
from test_attention_layers import (  # noqa: E402
    BF16, FP16, FP8_WARMUP_STEPS, L2_DTYPE, L2_FP8_GRAD, L2_FP8_OUTPUT, SEED,
    block_step, check_errors, mha_ref, random_padding, rel_l2,
    transformer_ref, valid_rows)

fresh_seed = seed_per_test(SEED)

# The bias gradient's bounds (a sum over the batch of dS).
L2_DBIAS = {BF16: 2.5e-2, FP16: 1e-2}
# A bias must move its reference by more than this for a case to count.
BIAS_GAP = 0.05


# --- reference math ----------------------------------------------------------


def vanilla_slopes(heads):
    """TE's default ALiBi slopes, float64 [heads]: n = 2^floor(log2 h),
    2^(-8 (k + 1) / n) for k < n, then 2^(-4 (2 (k - n) + 1) / n)."""
    n = 2 ** int(math.floor(math.log2(heads)))
    slopes = [2.0 ** (-8.0 * (k + 1) / n) for k in range(min(n, heads))]
    slopes += [2.0 ** (-4.0 * (2 * (k - n) + 1) / n)
               for k in range(n, heads)]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(slopes, seq_q, seq_kv, mask_type, device):
    """-slope * |i - j + off| as [1 or b, h, s_q, s_kv] in the slopes'
    dtype; off = s_kv - s_q except for causal and padding_causal."""
    off = 0 if mask_type in ("causal", "padding_causal") else seq_kv - seq_q
    i = torch.arange(seq_q, device=device).view(seq_q, 1)
    j = torch.arange(seq_kv, device=device).view(1, seq_kv)
    distance = (i - j + off).abs().to(slopes.dtype)
    lead = slopes.shape if slopes.dim() == 2 else (1, slopes.shape[0])
    return -slopes.reshape(*lead, 1, 1) * distance


def hidden_keys(mask_type, seq_q, seq_kv, kv_padding, device):
    """[b or 1, 1, s_q, s_kv] bool, True where the mask type hides key j
    from query i (causal top-left, causal_bottom_right, key padding);
    None when it hides nothing."""
    i = torch.arange(seq_q, device=device).view(seq_q, 1)
    j = torch.arange(seq_kv, device=device).view(1, seq_kv)
    hidden = None
    if mask_type in ("causal", "padding_causal"):
        hidden = (j > i)[None, None]
    elif mask_type in ("causal_bottom_right", "padding_causal_bottom_right"):
        hidden = (j > i + seq_kv - seq_q)[None, None]
    if "padding" in mask_type:
        hidden = kv_padding if hidden is None else hidden | kv_padding
    return hidden


def biased_attention_ref(q, k, v, scale, qkv_format, mask_type="no_mask",
                         kv_padding=None, bias=None, pre_scale=False,
                         slopes=None, arbitrary=None):
    """The contract's attention in q's dtype: q [.., h, d], k and v [..,
    g, d] in `qkv_format`; `bias` [1 or b, 1 or h, s_q, s_kv] added after
    the scale (`pre_scale`: before it), or ALiBi with `slopes` ([h] or [b,
    h]); `arbitrary` [b or 1, 1 or h, s_q, s_kv] bool (True = masked)
    fills -10000 as TE's unfused attention; then the mask type's masks.
    Returns [s_q, b, h*d] / [b, s_q, h*d]."""
    if qkv_format == "sbhd":
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, h, s, d]
    else:
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    heads, groups = q.shape[1], k.shape[1]
    seq_q, seq_kv = q.shape[2], k.shape[2]
    k = k.repeat_interleave(heads // groups, dim=1)
    v = v.repeat_interleave(heads // groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2))
    if bias is not None and pre_scale:
        scores = (scores + bias) * scale
    else:
        scores = scores * scale
        if bias is not None:
            scores = scores + bias
    if slopes is not None:
        scores = scores + alibi_bias(slopes.to(q.dtype), seq_q, seq_kv,
                                     mask_type, q.device)
    if arbitrary is not None:
        scores = scores.masked_fill(arbitrary, -10000.0)
    hidden = hidden_keys(mask_type, seq_q, seq_kv, kv_padding, q.device)
    if hidden is not None:
        # A query that may see no key attends to every key (no NaN); such
        # rows are left out of the comparisons.
        hidden = hidden & hidden.logical_not().any(-1, keepdim=True)
        scores = scores.masked_fill(hidden, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    if qkv_format == "sbhd":
        out = out.permute(2, 0, 1, 3)
    else:
        out = out.permute(0, 2, 1, 3)
    return out.reshape(*out.shape[:2], -1)


def random_arbitrary(dims, seq_q, seq_kv, device):
    """A random arbitrary mask [dims..., s_q, s_kv] bool (about a third
    masked), each query keeping at least one key (its diagonal's, or key
    0): no query sees nothing."""
    mask = torch.rand(*dims, seq_q, seq_kv, device=device) < 0.35
    i = torch.arange(seq_q, device=device).view(seq_q, 1)
    j = torch.arange(seq_kv, device=device).view(1, seq_kv)
    keep = (j == i) if seq_q == seq_kv else (j == 0)
    return mask & ~keep


def bias_dims(code, batch, heads):
    return (batch if code[0] == "b" else 1, heads if code[1] == "h" else 1)


# --- DotProductAttention -----------------------------------------------------


def dot_product_attention_case(dtype=BF16, heads=8, groups=2, d=64, batch=2,
                               seq_q=128, seq_kv=None, fmt="sbhd",
                               mask="no_mask", bias_shape=None,
                               bias_grad=False, pre_scale=False, alibi=None,
                               arbitrary=None, softmax_scale=None):
    """One forward and backward of DotProductAttention with the bias
    arguments the case names, against biased_attention_ref in float64 on
    the same q, k, v (and bias): ({output, dq, dk, dv[, dbias]: relative
    L2 error on the valid rows}, how far the bias moves the reference).
    `bias_shape`: TE's name of a core_attention_bias (float32 when
    `bias_grad`, to check the cast's gradient, else `dtype`); `alibi`:
    None, "vanilla", "heads" or "batch_heads"; `arbitrary`: the dims code
    of an arbitrary mask (the mask type is then "arbitrary")."""
    seq_kv = seq_kv or seq_q
    cross = seq_kv != seq_q
    kwargs = {} if softmax_scale is None else {"softmax_scale": softmax_scale}
    dpa = te.DotProductAttention(
        heads, d, num_gqa_groups=groups, qkv_format=fmt,
        attn_mask_type="arbitrary" if arbitrary else mask,
        attention_type="cross" if cross else "self", **kwargs)
    scale = softmax_scale or 1.0 / math.sqrt(d)
    lead_q = (seq_q, batch) if fmt == "sbhd" else (batch, seq_q)
    lead_kv = (seq_kv, batch) if fmt == "sbhd" else (batch, seq_kv)
    q = torch.randn(*lead_q, heads, d, device="cuda", dtype=dtype)
    k = torch.randn(*lead_kv, groups, d, device="cuda", dtype=dtype)
    v = torch.randn(*lead_kv, groups, d, device="cuda", dtype=dtype)
    for t in (q, k, v):
        t.requires_grad_()
    call = {}
    kv_padding = None
    rows = torch.ones(*lead_q, 1, device="cuda", dtype=dtype)
    if "padding" in mask and not arbitrary:
        kv_padding = random_padding(batch, seq_kv, "cuda")
        if cross:  # TE's pair, the queries unpadded
            call["attention_mask"] = (torch.zeros(
                batch, 1, 1, seq_q, dtype=torch.bool, device="cuda"),
                kv_padding)
        else:
            call["attention_mask"] = kv_padding
            rows = valid_rows(kv_padding, fmt).to(dtype)
    mask_tensor = None
    if arbitrary:
        mask_tensor = random_arbitrary(bias_dims(arbitrary, batch, heads),
                                       seq_q, seq_kv, "cuda")
        call["attention_mask"] = mask_tensor
    bias = None
    if bias_shape is not None:
        bias = torch.randn(*bias_dims(bias_shape, batch, heads), seq_q,
                           seq_kv, device="cuda",
                           dtype=torch.float32 if bias_grad else dtype)
        bias.requires_grad_(bias_grad)
        call["core_attention_bias_type"] = ("pre_scale_bias" if pre_scale
                                            else "post_scale_bias")
        call["core_attention_bias"] = bias
    slopes64 = None
    if alibi is not None:
        call["core_attention_bias_type"] = "alibi"
        if alibi == "vanilla":
            slopes64 = vanilla_slopes(heads).cuda()
        else:
            shape = (heads,) if alibi == "heads" else (batch, heads)
            slopes = 0.05 + 0.95 * torch.rand(*shape, device="cuda")
            call["alibi_slopes"] = slopes
            slopes64 = slopes.double()

    out = dpa(q, k, v, **call)
    assert tuple(out.shape) == (*lead_q, heads * d)
    assert out.dtype == dtype
    dy = torch.randn_like(out) * rows
    out.backward(dy)

    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    bias64 = (bias.detach().double().requires_grad_(bias_grad)
              if bias is not None else None)
    reference = dict(mask_type=mask if not arbitrary else "no_mask",
                     kv_padding=kv_padding, pre_scale=pre_scale,
                     arbitrary=mask_tensor)
    ref = biased_attention_ref(q64, k64, v64, scale, fmt, bias=bias64,
                               slopes=slopes64, **reference)
    ref.backward(dy.double())
    rows64, rows4 = rows.double(), rows.double().unsqueeze(-1)
    errors = {"output": rel_l2(out * rows, ref * rows64),
              "dq": rel_l2(q.grad * rows4, q64.grad * rows4),
              "dk": rel_l2(k.grad, k64.grad),
              "dv": rel_l2(v.grad, v64.grad)}
    if bias_grad:
        assert bias.grad is not None and bias.grad.dtype == torch.float32
        errors["dbias"] = rel_l2(bias.grad, bias64.grad)
    elif bias is not None:
        assert bias.grad is None
    with torch.no_grad():
        if arbitrary and bias is None:
            # The mask is the bias here: against no mask at all.
            reference["arbitrary"] = None
        plain = biased_attention_ref(q64, k64, v64, scale, fmt, **reference)
    gap = rel_l2(plain * rows64, ref.detach() * rows64)
    return errors, gap


def check_case(what, dtype, errors, gap):
    limits = dict.fromkeys(errors, L2_DTYPE[dtype])
    if "dbias" in limits:
        limits["dbias"] = L2_DBIAS[dtype]
    check_errors(errors, limits, what)
    assert gap > BIAS_GAP, (
        f"{what} (seed {SEED}): the bias moves the reference by only "
        f"{gap:.2e}, too little to tell it was applied")


POST_SCALE_CASES = [
    (shape, mask, dtype, fmt, groups)
    for shape in ("1hss", "b1ss", "bhss", "11ss")
    for mask in ("no_mask", "causal", "padding", "padding_causal")
    for dtype, fmt, groups in ((BF16, "sbhd", 2), (FP16, "bshd", 8))]


@pytest.mark.parametrize(
    "shape,mask,dtype,fmt,groups", POST_SCALE_CASES,
    ids=[f"{c[0]}-{c[1]}-{str(c[2])[6:]}-{c[3]}-g{c[4]}"
         for c in POST_SCALE_CASES])
def test_post_scale_bias(shape, mask, dtype, fmt, groups):
    """post_scale_bias of each of TE's shapes; the 1hss one requires grad
    (float32: its gradient comes back through the cast)."""
    errors, gap = dot_product_attention_case(
        dtype, groups=groups, fmt=fmt, mask=mask, bias_shape=shape,
        bias_grad=shape == "1hss")
    check_case(f"post_scale_bias {shape} {mask} {dtype} {fmt} groups "
               f"{groups}", dtype, errors, gap)


@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("softmax_scale", [None, 0.3], ids=["default",
                                                            "scale0.3"])
def test_pre_scale_bias(dtype, softmax_scale):
    """pre_scale_bias: scale * (q.k + bias), the bias's gradient through
    tejit's bias * softmax_scale."""
    errors, gap = dot_product_attention_case(
        dtype, mask="causal", bias_shape="1hss", bias_grad=True,
        pre_scale=True, softmax_scale=softmax_scale)
    check_case(f"pre_scale_bias {dtype} scale {softmax_scale}", dtype,
               errors, gap)


ALIBI_CASES = [
    (alibi, mask, dtype, fmt, heads, groups)
    for alibi, heads, groups in (("vanilla", 8, 2), ("vanilla", 12, 4),
                                 ("heads", 8, 8), ("batch_heads", 8, 1))
    for mask in ("no_mask", "causal", "causal_bottom_right", "padding",
                 "padding_causal")
    for dtype, fmt in ((BF16, "sbhd"), (FP16, "bshd"))]


@pytest.mark.parametrize(
    "alibi,mask,dtype,fmt,heads,groups", ALIBI_CASES,
    ids=[f"{c[0]}-{c[1]}-{str(c[2])[6:]}-{c[3]}-h{c[4]}-g{c[5]}"
         for c in ALIBI_CASES])
def test_alibi(alibi, mask, dtype, fmt, heads, groups):
    """ALiBi with TE's vanilla slopes (8 heads, and 12: a count that is
    not a power of 2) or the caller's [h] / [b, h] float32 slopes."""
    errors, gap = dot_product_attention_case(
        dtype, heads=heads, groups=groups, fmt=fmt, mask=mask, alibi=alibi)
    check_case(f"alibi {alibi} {mask} {dtype} {fmt} heads {heads} groups "
               f"{groups}", dtype, errors, gap)


CROSS_CASES = [
    (seq_q, seq_kv, mask, kind, fmt)
    for seq_q, seq_kv in ((64, 160), (192, 80))
    for mask in ("no_mask", "causal", "padding")
    for kind, fmt in (("bias", "sbhd"), ("vanilla", "bshd"),
                      ("heads", "sbhd"))]


@pytest.mark.parametrize(
    "seq_q,seq_kv,mask,kind,fmt", CROSS_CASES,
    ids=[f"q{c[0]}-kv{c[1]}-{c[2]}-{c[3]}-{c[4]}" for c in CROSS_CASES])
def test_cross_attention(seq_q, seq_kv, mask, kind, fmt):
    """Keys and values of their own length: a 1hss bias [1, h, s_q, s_kv]
    with its gradient, or ALiBi (bottom-right aligned, off = s_kv - s_q,
    except for causal: top-left)."""
    errors, gap = dot_product_attention_case(
        BF16, seq_q=seq_q, seq_kv=seq_kv, fmt=fmt, mask=mask,
        bias_shape="1hss" if kind == "bias" else None,
        bias_grad=kind == "bias", alibi=None if kind == "bias" else kind)
    check_case(f"cross s_q {seq_q} s_kv {seq_kv} {mask} {kind} {fmt}", BF16,
               errors, gap)


ARBITRARY_CASES = [
    # (mask dims, bias shape, bias requires grad, dtype, format, s_kv)
    ("b1ss", None, False, BF16, "sbhd", None),
    ("11ss", None, False, FP16, "bshd", None),
    ("1hss", None, False, BF16, "bshd", None),
    ("b1ss", "1hss", False, BF16, "sbhd", None),
    ("11ss", "1hss", True, BF16, "sbhd", None),
    ("1hss", "11ss", True, FP16, "bshd", None),
    ("b1ss", "bhss", False, FP16, "sbhd", None),
    ("b1ss", None, False, BF16, "sbhd", 96),
    ("11ss", "1hss", True, BF16, "bshd", 192),
]


@pytest.mark.parametrize(
    "mask_dims,shape,grad,dtype,fmt,seq_kv", ARBITRARY_CASES,
    ids=[f"mask{c[0]}-bias{c[1]}{'-grad' if c[2] else ''}-"
         f"{str(c[3])[6:]}-{c[4]}{'-kv%d' % c[5] if c[5] else ''}"
         for c in ARBITRARY_CASES])
def test_arbitrary_mask(mask_dims, shape, grad, dtype, fmt, seq_kv):
    """attn_mask_type="arbitrary": the mask as a -10000 post-scale bias of
    the no_mask program, alone or added to the caller's bias (whose
    gradient, with a mask shared by the batch, is the combined 1hss bias's
    summed over what it broadcast), also with keys of their own length."""
    errors, gap = dot_product_attention_case(
        dtype, fmt=fmt, seq_kv=seq_kv, arbitrary=mask_dims, bias_shape=shape,
        bias_grad=grad)
    check_case(f"arbitrary mask {mask_dims} bias {shape} grad {grad} "
               f"{dtype} {fmt} s_kv {seq_kv}", dtype, errors, gap)


def test_programs_per_bias_key():
    """One program per bias key (type, bias shape, requires grad, slopes)
    and mask type; a call with a key seen before compiles nothing."""
    dpa = te.DotProductAttention(8, 64, num_gqa_groups=2,
                                 attn_mask_type="causal")
    q = torch.randn(128, 2, 8, 64, device="cuda", dtype=BF16,
                    requires_grad=True)
    k, v = (torch.randn(128, 2, 2, 64, device="cuda", dtype=BF16,
                        requires_grad=True) for _ in range(2))
    bias = torch.randn(1, 8, 128, 128, device="cuda", dtype=BF16)
    calls = [
        {},
        dict(core_attention_bias_type="post_scale_bias",
             core_attention_bias=bias),
        dict(core_attention_bias_type="post_scale_bias",
             core_attention_bias=bias.clone().requires_grad_()),
        dict(core_attention_bias_type="post_scale_bias",
             core_attention_bias=bias[:, :1]),
        dict(core_attention_bias_type="alibi"),
        dict(core_attention_bias_type="alibi",
             alibi_slopes=torch.rand(8, device="cuda")),
        dict(core_attention_bias_type="alibi",
             alibi_slopes=torch.rand(2, 8, device="cuda")),
        dict(attn_mask_type="arbitrary",
             attention_mask=random_arbitrary((2, 1), 128, 128, "cuda")),
    ]
    for call in calls + calls:
        dpa(q, k, v, **call).float().sum().backward()
    assert len(dpa._programs) == len(calls)
    # pre_scale_bias runs the post_scale_bias program (a scaled bias).
    dpa(q, k, v, core_attention_bias_type="pre_scale_bias",
        core_attention_bias=bias)
    assert len(dpa._programs) == len(calls)
    # Only a bias that requires grad gets one.
    grad_bias = calls[2]["core_attention_bias"]
    assert grad_bias.grad is not None and grad_bias.grad.abs().sum() > 0
    assert bias.grad is None


# --- MultiheadAttention / TransformerLayer -----------------------------------


def t5_buckets(seq_q, seq_kv, device, num_buckets=32, max_distance=128):
    """T5's bidirectional relative position buckets [s_q, s_kv] (written
    from the paper's definition): half the buckets for keys after the
    query; within each half, exact buckets for distances below a quarter
    of the buckets, then logarithmic ones up to max_distance."""
    i = torch.arange(seq_q, device=device).view(seq_q, 1)
    j = torch.arange(seq_kv, device=device).view(1, seq_kv)
    relative = j - i
    half = num_buckets // 2
    bucket = (relative > 0).long() * half
    distance = relative.abs()
    exact = half // 2
    far = exact + (torch.log(distance.clamp_min(1).float() / exact)
                   / math.log(max_distance / exact)
                   * (half - exact)).long()
    far = far.clamp_max(half - 1)
    return bucket + torch.where(distance < exact, distance, far)


def t5_bias(table, buckets):
    """The relative position bias [1, h, s_q, s_kv] from `table`
    [buckets, h] (differentiable in the table)."""
    return table[buckets].permute(2, 0, 1).unsqueeze(0)


@contextlib.contextmanager
def attention_with(bias=None, slopes=None, arbitrary=None):
    """test_attention_layers' compositions (mha_ref, transformer_ref) with
    their attention_ref replaced by biased_attention_ref with `bias`,
    ALiBi `slopes` or an `arbitrary` mask, inside the block."""
    original = layers.attention_ref

    def attention(q, k, v, mask_type, padding, qkv_format, scale,
                  window=None):
        assert window is None
        return biased_attention_ref(q, k, v, scale, qkv_format, mask_type,
                                    kv_padding=padding, bias=bias,
                                    slopes=slopes, arbitrary=arbitrary)
    layers.attention_ref = attention
    try:
        yield
    finally:
        layers.attention_ref = original


def mha_reference(mha, x, p, mask, padding, freqs):
    return mha_ref(mha, x, p, mask, padding, freqs)[0]


def check_block_bias(module, reference, fmt, fp8_recipe, mask, kind,
                     seq=128, batch=2, param_grads=True, what=""):
    """One training step of `module` (after the FP8 warm-up, every step
    with the bias) against `reference` in float32 with the same bias.
    `kind`: "t5" (a T5 relative position bias [1, h, s, s] from a table
    [32, h] that requires grad), "t5-arbitrary" (the same with an
    arbitrary mask shared by the batch), or ALiBi "vanilla", "heads",
    "batch_heads". Returns the errors."""
    attention = getattr(module, "self_attention", module)
    heads, hidden = attention.num_attention_heads, module.hidden_size
    lead = (seq, batch) if fmt == "sbhd" else (batch, seq)
    x = torch.randn(*lead, hidden, device="cuda", dtype=BF16,
                    requires_grad=True)
    padding = random_padding(batch, seq, "cuda") if "padding" in mask \
        else None
    rows = (valid_rows(padding, fmt) if padding is not None
            else torch.ones(*lead, 1, device="cuda"))
    dy = (torch.randn(*lead, hidden, device="cuda") * rows).to(BF16)
    table, slopes, arbitrary = None, None, None
    buckets = t5_buckets(seq, seq, "cuda")
    if kind.startswith("t5"):
        table = (0.5 * torch.randn(32, heads, device="cuda")).requires_grad_()
    elif kind == "vanilla":
        slopes = vanilla_slopes(heads).cuda()
    else:
        slopes = 0.05 + 0.95 * torch.rand(
            *((heads,) if kind == "heads" else (batch, heads)),
            device="cuda")
    mask_key = ("self_attn_mask_type"
                if isinstance(module, te.TransformerLayer)
                else "attn_mask_type")
    if kind == "t5-arbitrary":
        arbitrary = random_arbitrary((1, 1), seq, seq, "cuda")

    def call():
        args = {}
        if padding is not None:
            args["attention_mask"] = padding
        if arbitrary is not None:
            args[mask_key] = "arbitrary"
            args["attention_mask"] = arbitrary
        if table is not None:
            args["core_attention_bias_type"] = "post_scale_bias"
            args["core_attention_bias"] = t5_bias(table, buckets)
        else:
            args["core_attention_bias_type"] = "alibi"
            if kind != "vanilla":
                args["alibi_slopes"] = slopes
        return args

    for _ in range(FP8_WARMUP_STEPS if fp8_recipe is not None else 0):
        block_step(module, x, fp8_recipe, dy, **call())
    if table is not None:
        table.grad = None
    out = block_step(module, x, fp8_recipe, dy, **call())
    grads = {n: p.grad for n, p in module.named_parameters()}
    dx = x.grad

    params = {n: p.detach().float().requires_grad_()
              for n, p in module.named_parameters()}
    x32 = x.detach().float().requires_grad_()
    table32 = (table.detach().clone().requires_grad_() if table is not None
               else None)
    bias32 = t5_bias(table32, buckets) if table32 is not None else None
    slopes32 = slopes.float() if slopes is not None else None
    with attention_with(bias32, slopes32, arbitrary):
        ref = reference(module, x32, params, "no_mask" if arbitrary
                        is not None else mask, padding, None)
    ref.backward(dy.float())
    errors = {"output": rel_l2(out * rows, ref * rows),
              "input grad": rel_l2(dx * rows, x32.grad * rows)}
    if table is not None:
        errors["bias table grad"] = rel_l2(table.grad, table32.grad)
    if param_grads:
        errors.update(layers.param_grad_errors(grads, params, what))
    if fp8_recipe is None:
        limits = dict.fromkeys(errors, L2_DTYPE[BF16])
        limits["bias table grad"] = L2_DBIAS[BF16]
    else:
        limits = dict.fromkeys(errors, L2_FP8_GRAD)
        limits["output"] = L2_FP8_OUTPUT
    check_errors(errors, {n: limits[n] for n in errors}, what)
    # The bias must matter: the attention block's output (less the
    # projection bias) with and without it.
    prefix = "self_attention." if attention is not module else ""
    with torch.no_grad():
        outputs = []
        for context in (attention_with(bias32, slopes32, arbitrary),
                        contextlib.nullcontext()):
            with context:
                block = mha_ref(attention, x32, params, mask if arbitrary
                                is None else "no_mask", padding, None,
                                prefix=prefix)[0]
            outputs.append(block - params.get(prefix + "proj.bias", 0))
        gap = rel_l2(outputs[0] * rows, outputs[1] * rows)
    assert gap > BIAS_GAP, (f"{what} (seed {SEED}): the bias moves the "
                            f"attention by only {gap:.2e}")
    return errors


MHA_CASES = {
    "t5-causal-gqa-sbhd": (dict(num_gqa_groups=2, input_layernorm=True),
                           "causal", "t5"),
    "t5-padding-bshd": (dict(input_layernorm=True, qkv_format="bshd"),
                        "padding", "t5"),
    "t5-arbitrary-mask": (dict(num_gqa_groups=4, input_layernorm=True),
                          "no_mask", "t5-arbitrary"),
    "alibi-vanilla-no_mask-bshd": (dict(
        num_gqa_groups=2, input_layernorm=False, qkv_format="bshd"),
        "no_mask", "vanilla"),
    "alibi-heads-padding_causal": (dict(
        input_layernorm=True, normalization="RMSNorm"), "padding_causal",
        "heads"),
}


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multihead_attention(case, fp8):
    kwargs, mask, kind = MHA_CASES[case]
    mha = te.MultiheadAttention(256, 8, attention_dropout=0.0,
                                attn_mask_type=mask, params_dtype=BF16,
                                **kwargs)
    perturb(mha)
    check_block_bias(mha, mha_reference, mha.qkv_format,
                     hybrid() if fp8 else None, mask, kind,
                     what=f"MultiheadAttention {case} "
                     f"{'fp8' if fp8 else 'bf16'}")


TL_CASES = {
    "t5-causal": (dict(), "causal", "t5"),
    "t5-padding-gqa-rmsnorm-swiglu-bshd": (dict(
        num_gqa_groups=2, normalization="RMSNorm", activation="swiglu",
        bias=False, attn_input_format="bshd"), "padding", "t5"),
    "alibi-vanilla-causal-gqa": (dict(num_gqa_groups=2), "causal",
                                 "vanilla"),
    "alibi-batch_heads-no_mask-bshd": (dict(attn_input_format="bshd"),
                                       "no_mask", "batch_heads"),
}


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(TL_CASES))
def test_transformer_layer(case, fp8):
    kwargs, mask, kind = TL_CASES[case]
    layer = te.TransformerLayer(256, 1024, 8, hidden_dropout=0.0,
                                attention_dropout=0.0,
                                self_attn_mask_type=mask, params_dtype=BF16,
                                **kwargs)
    perturb(layer)
    check_block_bias(layer, transformer_ref, layer.attn_input_format,
                     hybrid() if fp8 else None, mask, kind,
                     what=f"TransformerLayer {case} "
                     f"{'fp8' if fp8 else 'bf16'}")


def test_transformer_layer_full_size_alibi_fp8_step():
    """The seed's size (hidden 4096, FFN 16384, 32 heads, seq 2048, batch
    2) with ALiBi (TE's vanilla slopes), causal: one FP8 step after the
    warm-up against the float32 composition."""
    layer = te.TransformerLayer(4096, 16384, 32, hidden_dropout=0.0,
                                attention_dropout=0.0,
                                self_attn_mask_type="causal",
                                params_dtype=BF16)
    perturb(layer)
    errors = check_block_bias(layer, transformer_ref, "sbhd", hybrid(),
                              "causal", "vanilla", seq=2048, batch=2,
                              param_grads=False,
                              what="TransformerLayer full size alibi fp8")
    print(f"full-size ALiBi FP8 step: output {errors['output']:.4f}, input "
          f"grad {errors['input grad']:.4f}")
