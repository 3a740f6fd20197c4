"""GPU tests of FP8 attention (Transformer Engine's fp8_dpa,
docs/fp8-attention.md): DotProductAttention, MultiheadAttention and
TransformerLayer inside fp8_autocast(recipe=DelayedScaling(fp8_dpa=True)),
forward and backward, against float32 PyTorch math on the same inputs and
parameters (test_attention_layers.py's reference code, imported).

    PYTHONPATH=python python3 -m pytest -q tests/gpu/test_fp8_attention.py
    (-k "not seed_size" leaves out the full-size cases; -x -v as usual)

Data: fresh random inputs every run from test_attention_layers.py's seed
(printed at the start and in every failure message; TEJIT_TEST_SEED=N
repeats a run).

Bounds (shared/FP8.md, "FP8 attention against F16"): RMSE(got - ref) at
most 0.11 of the reference's value range (max - min) for outputs, 0.15 for
gradients; rows of padded tokens are left out (their output gradient is
0). Every case runs STEPS training steps on the same inputs: step 1 casts
q, k, v, O, dO, dS and the gradients with TE's initial scale 1 (and an
FP8 GEMM's operands too; P has a fixed scale of 448), so it is only
checked finite; steps 2 and 3 (scales from the earlier steps' amaxes)
are held to the bounds. Cases:
- DotProductAttention: bf16 and fp16, head dim 128, no_mask,
  causal, padding and padding_causal, 8 heads over 8 (MHA) or 2 (GQA)
  key/value groups, sbhd and bshd, batch 2, s 128; the recipe's E4M3
  format (an E4M3 backward) on a few; the seed's attention (32 heads of
  128, s 2048, b 2, causal). Head dim 64 forward-only (Hopper's FP8
  backward takes 128: a training step says so). Attention dropout in
  training is refused before compiling (cuDNN's FP8 engines fault on it).
- The FP8 state: a DotProductAttention's fp8_meta after each step: three
  forward slots (q/k/v, P, O) and three backward ones (dO, dS, dq/dk/dv),
  one amax per slot and step, history row 0 cleared, scale = fp8_max /
  max(history) and scale_inv = 1 / scale (host recomputation); the q/k/v
  slot's latest amax is max |q, k, v| exactly, dO's max |dO|, P's 1 (the
  first causal row), O's and dq/dk/dv's near the reference's. With fp8_dpa
  the blocks have three more forward and backward slots than without.
- MultiheadAttention and TransformerLayer: test_attention_layers.py's
  MHA_CASES and TL_CASES (norms, GQA, rotary, padding, fused QKV, post-LN,
  parallel blocks, ...), output, input gradient and every parameter
  gradient (a key bias's, zero in exact arithmetic, against the query
  bias gradient's range); TransformerLayer at the seed's size (hidden 4096,
  FFN 16384, 32 heads, s 2048, b 2): output and input gradient.
- A KV-cache decode (inference_params) under fp8_dpa runs its attention in
  bf16: the same outputs, bit for bit, as under the recipe without fp8_dpa.
- Refusals under fp8_dpa before anything compiles (a sliding window, a
  bias, ALiBi, head dim 72), each naming its argument.
"""
import copy
import itertools
import math
import os
import sys
from collections import OrderedDict

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import perturb, seed_per_test, torch  # noqa: E402

import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

from test_attention_layers import (  # noqa: E402
    BF16, FP16, MHA_CASES, SEED, TL_CASES, attention_ref, block_inputs,
    block_step, check_errors, mha_reference, param_grad_errors,
    random_padding, rel_l2, transformer_ref, valid_rows)

fresh_seed = seed_per_test(SEED)

RMSE_OUTPUT = 0.11
RMSE_GRAD = 0.15
STEPS = 3
FIRST_CHECKED_STEP = 2
FP8_MAX = {"E4M3": 448.0, "E5M2": 57344.0}


def fp8_dpa(fp8_format=recipe.Format.HYBRID, enabled=True):
    return recipe.DelayedScaling(fp8_format=fp8_format, amax_history_len=16,
                                 amax_compute_algo="max", fp8_dpa=enabled)


# param_grad_errors' measure for range_rmse: RMSE over the value range.
RANGE_RMSE = (lambda d: d.pow(2).mean().sqrt().item(),
              lambda r: (r.max() - r.min()).item())


def range_rmse(got, want):
    """RMSE(got - want) / (want.max() - want.min()); inf if `got` has a
    NaN or inf."""
    got, want = got.double(), want.double()
    if not torch.isfinite(got).all():
        return math.inf
    span = (want.max() - want.min()).item()
    return (got - want).pow(2).mean().sqrt().item() / max(span, 1e-30)


def check_step(errors, step, what):
    """Step 1 (scale 1) finite only; later steps within the bounds."""
    report = ", ".join(f"{n} {e:.4f}" for n, e in errors.items())
    print(f"{what} step {step}: {report}")
    if step < FIRST_CHECKED_STEP:
        bad = [n for n, e in errors.items() if not math.isfinite(e)]
        assert not bad, f"{what} (seed {SEED}) step {step}: not finite: {bad}"
        return
    limits = {n: RMSE_OUTPUT if n == "output" else RMSE_GRAD
              for n in errors}
    check_errors(errors, limits, f"{what} step {step} (RMSE / range)")


# --- DotProductAttention -----------------------------------------------------


def qkv_inputs(lead, heads, groups, d, dtype):
    q = torch.randn(*lead, heads, d, device="cuda", dtype=dtype)
    k = torch.randn(*lead, groups, d, device="cuda", dtype=dtype)
    v = torch.randn(*lead, groups, d, device="cuda", dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v)]


def dpa_reference(q, k, v, dy, mask, padding, fmt, d):
    """attention_ref in float32 on the same q, k, v: (output, dq, dk,
    dv)."""
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = attention_ref(q32, k32, v32, mask, padding, fmt,
                        1.0 / math.sqrt(d))
    ref.backward(dy.float())
    return ref.detach(), q32.grad, k32.grad, v32.grad


def dpa_step(dpa, q, k, v, dy, fp8_recipe, **call):
    for t in (q, k, v):
        t.grad = None
    with te.fp8_autocast(fp8_recipe=fp8_recipe):
        out = dpa(q, k, v, **call)
    out.backward(dy)
    return out.detach(), q.grad, k.grad, v.grad


def dpa_errors(got, want, keep):
    """{output, dq, dk, dv: RMSE / range} on the rows `keep` selects."""
    names = ("output", "dq", "dk", "dv")
    return {n: range_rmse(g[keep], w[keep])
            for n, g, w in zip(names, got, want)}


def check_dot_product_attention(dtype, d, mask, groups, fmt, heads=8,
                                batch=2, seq=128,
                                fp8_format=recipe.Format.HYBRID):
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format=fmt, attn_mask_type=mask,
                                 attention_dropout=0.0)
    lead = (seq, batch) if fmt == "sbhd" else (batch, seq)
    q, k, v = qkv_inputs(lead, heads, groups, d, dtype)
    padding = random_padding(batch, seq, "cuda") if "padding" in mask \
        else None
    call = {"attention_mask": padding} if padding is not None else {}
    rows = (valid_rows(padding, fmt) if padding is not None
            else torch.ones(*lead, 1, device="cuda"))
    dy = (torch.randn(*lead, heads * d, device="cuda") * rows).to(dtype)
    keep = rows.squeeze(-1).bool()
    want = dpa_reference(q, k, v, dy, mask, padding, fmt, d)
    what = (f"DotProductAttention fp8_dpa {str(dtype)[6:]} d {d} {mask} "
            f"groups {groups} {fmt} {fp8_format.name}")
    for step in range(1, STEPS + 1):
        got = dpa_step(dpa, q, k, v, dy, fp8_dpa(fp8_format), **call)
        assert tuple(got[0].shape) == (*lead, heads * d), what
        assert got[0].dtype == dtype, what
        check_step(dpa_errors(got, want, keep), step, what)


# Hopper's FP8 attention backward takes a head dim of 128 only
# (docs/fp8-attention.md); 64 runs forward-only below.
DPA_CASES = [(dtype, d, mask, groups, fmt)
             for dtype in (BF16, FP16) for d in (128,)
             for mask in ("no_mask", "causal", "padding", "padding_causal")
             for groups in (8, 2) for fmt in ("sbhd", "bshd")]


@pytest.mark.parametrize(
    "dtype,d,mask,groups,fmt", DPA_CASES,
    ids=[f"{str(c[0])[6:]}-d{c[1]}-{c[2]}-g{c[3]}-{c[4]}" for c in DPA_CASES])
def test_dot_product_attention(dtype, d, mask, groups, fmt):
    check_dot_product_attention(dtype, d, mask, groups, fmt)


@pytest.mark.parametrize("mask", ["causal", "padding_causal"])
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
def test_dot_product_attention_e4m3(dtype, mask):
    """Format.E4M3: the backward casts dO, dS and dq/dk/dv to E4M3."""
    check_dot_product_attention(dtype, 128, mask, 2, "bshd",
                                fp8_format=recipe.Format.E4M3)


@pytest.mark.parametrize("mask", ["no_mask", "causal", "padding"])
def test_dot_product_attention_head_dim_64_forward(mask):
    """Head dim 64: the forward (inference) runs in FP8 on Hopper; the
    output within the bound after the scales warm up."""
    heads, groups, d, seq, batch = 8, 2, 64, 128, 2
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 attn_mask_type=mask, attention_dropout=0.0)
    q, k, v = (t.detach() for t in qkv_inputs((seq, batch), heads, groups,
                                               d, BF16))
    padding = random_padding(batch, seq, "cuda") if "padding" in mask \
        else None
    call = {"attention_mask": padding} if padding is not None else {}
    rows = (valid_rows(padding, "sbhd") if padding is not None
            else torch.ones(seq, batch, 1, device="cuda"))
    keep = rows.squeeze(-1).bool()
    with torch.no_grad():
        ref = attention_ref(q.float(), k.float(), v.float(), mask, padding,
                            "sbhd", 1.0 / math.sqrt(d))
        for step in range(1, STEPS + 1):
            with te.fp8_autocast(fp8_recipe=fp8_dpa()):
                out = dpa(q, k, v, **call)
            check_step({"output": range_rmse(out[keep], ref[keep])}, step,
                       f"DotProductAttention fp8_dpa d 64 {mask} forward")


@pytest.mark.skipif(torch.cuda.get_device_capability()[0] != 9,
                    reason="Hopper's FP8 attention backward limit")
def test_hopper_backward_needs_head_dim_128():
    """A training step with head dim 64 under fp8_dpa fails with the
    runtime's message naming the head dim, not a crash."""
    dpa = te.DotProductAttention(4, 64, attn_mask_type="causal",
                                 attention_dropout=0.0)
    q, k, v = qkv_inputs((128, 2), 4, 4, 64, BF16)
    with pytest.raises(tejit.TejitError) as caught:
        with te.fp8_autocast(fp8_recipe=fp8_dpa()):
            out = dpa(q, k, v)
        out.sum().backward()
    assert "head dim of 128" in str(caught.value), str(caught.value)


def test_dot_product_attention_seed_size():
    """The seed layer's attention: 32 heads of 128, s 2048, b 2, causal
    (the warmed-up scales of q, k, v, O and the gradients)."""
    check_dot_product_attention(BF16, 128, "causal", 32, "sbhd", heads=32,
                                seq=2048)


def test_dot_product_attention_dropout_refused():
    """Attention dropout in training under fp8_dpa is refused before
    compiling (cuDNN's FP8 engines fault on it); eval mode runs."""
    heads, d, seq, batch = 4, 128, 128, 2
    dpa = te.DotProductAttention(heads, d, attn_mask_type="causal",
                                 attention_dropout=0.1)
    q, k, v = qkv_inputs((seq, batch), heads, heads, d, BF16)
    before = te.compile_count()
    with pytest.raises(NotImplementedError) as caught:
        with te.fp8_autocast(fp8_recipe=fp8_dpa()):
            dpa(q, k, v)
    assert "attention_dropout" in str(caught.value), str(caught.value)
    assert te.compile_count() == before, "a refused call compiled"
    dpa.eval()
    with torch.no_grad(), te.fp8_autocast(fp8_recipe=fp8_dpa()):
        assert torch.isfinite(dpa(q, k, v)).all()


# --- the FP8 state -----------------------------------------------------------


def meta_of(module):
    return {k[len("fp8_meta."):]: v for k, v in module.state_dict().items()
            if k.startswith("fp8_meta.")}


def match_slots(values, expectations):
    """Whether each (name, test) of `expectations` holds for a distinct
    one of `values` (the slots have no names in the API)."""
    for order in itertools.permutations(values, len(expectations)):
        if all(test(value) for value, (_, test) in zip(order,
                                                        expectations)):
            return True
    return False


def close(want, rtol):
    return lambda got: abs(got - want) <= rtol * abs(want)


def check_host_update(meta, direction, fp8_max, steps, what):
    """History row 0 cleared, `steps` amaxes in every slot, scale =
    fp8_max / max(history) (margin 0, "max"), scale_inv = 1 / scale."""
    history = meta[f"{direction}.amax_history"]
    scale = meta[f"{direction}.scale"]
    scale_inv = meta[f"{direction}.scale_inv"]
    assert torch.all(history[0] == 0), f"{what}: history row 0 not cleared"
    recorded = (history != 0).sum(0)
    assert torch.all(recorded == steps), (
        f"{what}: amaxes per slot {recorded.tolist()} after {steps} steps")
    want = fp8_max / history.max(0).values
    assert torch.allclose(scale, want, rtol=1e-6, atol=0), (
        f"{what}: scales {scale.tolist()}, fp8_max / max(history) "
        f"{want.tolist()}")
    assert torch.allclose(scale_inv, 1.0 / scale, rtol=1e-6, atol=0), \
        f"{what}: scale_inv is not 1 / scale"


@pytest.mark.parametrize("fp8_format", [recipe.Format.HYBRID,
                                        recipe.Format.E4M3],
                         ids=["HYBRID", "E4M3"])
def test_dot_product_attention_fp8_state(fp8_format):
    heads, groups, d, seq, batch = 8, 2, 128, 128, 2
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 attn_mask_type="causal",
                                 attention_dropout=0.0)
    q, k, v = qkv_inputs((seq, batch), heads, groups, d, BF16)
    dy = torch.randn(seq, batch, heads * d, device="cuda", dtype=BF16)
    assert meta_of(dpa) == {}, "FP8 state before any FP8 call"
    with te.fp8_autocast(fp8_recipe=fp8_dpa(enabled=False)):
        dpa(q, k, v).backward(dy)
    assert meta_of(dpa) == {}, "FP8 state from a recipe without fp8_dpa"
    ref_out, *ref_grads = dpa_reference(q, k, v, dy, "causal", None, "sbhd",
                                        d)
    qkv_amax = max(t.detach().abs().max().item() for t in (q, k, v))
    do_amax = dy.abs().max().item()
    o_amax = ref_out.abs().max().item()
    dqkv_amax = max(g.abs().max().item() for g in ref_grads)
    fwd_max = FP8_MAX["E4M3"]
    bwd_max = FP8_MAX["E5M2" if fp8_format is recipe.Format.HYBRID
                      else "E4M3"]
    for step in range(1, STEPS + 1):
        dpa_step(dpa, q, k, v, dy, fp8_dpa(fp8_format))
        meta = meta_of(dpa)
        what = f"fp8_dpa state {fp8_format.name} step {step}"
        assert sorted(meta) == sorted(
            f"{d_}.{t}" for d_ in ("fwd", "bwd")
            for t in ("scale", "scale_inv", "amax_history")), what
        for direction, fp8_max in (("fwd", fwd_max), ("bwd", bwd_max)):
            assert tuple(meta[f"{direction}.amax_history"].shape) == \
                (16, 3), f"{what}: {direction} slots " \
                f"{tuple(meta[f'{direction}.amax_history'].shape)}"
            check_host_update(meta, direction, fp8_max, step,
                              f"{what} {direction}")
        latest_fwd = meta["fwd.amax_history"][-1].tolist()
        latest_bwd = meta["bwd.amax_history"][-1].tolist()
        print(f"{what}: fwd amaxes {latest_fwd} (q/k/v {qkv_amax:.4f}, O "
              f"{o_amax:.4f}), bwd {latest_bwd} (dO {do_amax:.4f}, dq/dk/dv "
              f"{dqkv_amax:.4f})")
        assert match_slots(latest_fwd, [
            ("q/k/v: max |q, k, v|", lambda a: a == qkv_amax),
            ("P: max P = 1 (the first causal row)", close(1.0, 1e-3)),
            ("O: near max |O|", close(o_amax, 0.25))]), \
            f"{what}: forward amaxes {latest_fwd}"
        assert match_slots(latest_bwd, [
            ("dO: max |dO|", lambda a: a == do_amax),
            ("dS: positive", lambda a: 0 < a < math.inf),
            ("dq/dk/dv: near the reference's", close(dqkv_amax, 0.25))]), \
            f"{what}: backward amaxes {latest_bwd}"


@pytest.mark.parametrize("kind", ["MultiheadAttention", "TransformerLayer"])
def test_blocks_add_the_attention_slots(kind):
    """fp8_dpa adds the attention's three forward and three backward
    slots to a block's FP8 state, and they record amaxes too."""
    def make():
        torch.manual_seed(SEED)
        if kind == "MultiheadAttention":
            return te.MultiheadAttention(1024, 8, num_gqa_groups=2,
                                         attention_dropout=0.0,
                                         input_layernorm=True,
                                         params_dtype=BF16)
        return te.TransformerLayer(1024, 2048, 8, num_gqa_groups=2,
                                   hidden_dropout=0.0, attention_dropout=0.0,
                                   params_dtype=BF16)
    x = torch.randn(128, 2, 1024, device="cuda", dtype=BF16,
                    requires_grad=True)
    dy = torch.randn_like(x)
    slots, recorded = {}, {}
    for enabled in (False, True):
        module = make()
        for _ in range(STEPS):
            block_step(module, x, fp8_dpa(enabled=enabled), dy)
        meta = meta_of(module)
        slots[enabled] = {d: meta[f"{d}.amax_history"].shape[1]
                          for d in ("fwd", "bwd")}
        recorded[enabled] = {d: int((meta[f"{d}.amax_history"] != 0).any(0)
                                    .sum()) for d in ("fwd", "bwd")}
    print(f"{kind}: slots {slots}, slots with amaxes {recorded}")
    for d in ("fwd", "bwd"):
        assert slots[True][d] == slots[False][d] + 3, (kind, d, slots)
        assert recorded[True][d] == recorded[False][d] + 3, (kind, d,
                                                            recorded)


# --- MultiheadAttention / TransformerLayer -----------------------------------


def check_block(module, reference, fmt, mask="causal", rotary=False, seq=128,
                batch=2, param_grads=True, what=""):
    """STEPS training steps of `module` under fp8_dpa on one input, each
    against `reference` in float32 (check_step's rule)."""
    x, dy, padding, freqs, call, rows = block_inputs(
        module, fmt, mask, rotary, seq, batch, module.hidden_size)
    keep = rows.squeeze(-1).bool()
    params = {n: p.detach().float().requires_grad_()
              for n, p in module.named_parameters()}
    x32 = x.detach().float().requires_grad_()
    ref = reference(module, x32, params, mask, padding, freqs)
    ref.backward(dy.float())
    ref = ref.detach()
    last = {}
    for step in range(1, STEPS + 1):
        out = block_step(module, x, fp8_dpa(), dy, **call)
        errors = {"output": range_rmse(out[keep], ref[keep]),
                  "input grad": range_rmse(x.grad[keep], x32.grad[keep])}
        if param_grads:
            errors.update(param_grad_errors(
                {n: p.grad for n, p in module.named_parameters()}, params,
                what, measure=RANGE_RMSE))
        print(f"{what} step {step}: output rel. L2 "
              f"{rel_l2(out[keep], ref[keep]):.4f}")
        check_step(errors, step, what)
        last = errors
    return last


def head_dim_128(kwargs):
    """A block case of test_attention_layers with its heads widened to 128
    (what Hopper's FP8 attention backward takes)."""
    kwargs = dict(kwargs)
    kwargs["hidden_size"] = kwargs["num_attention_heads"] * 128
    kwargs.pop("kv_channels", None)
    return kwargs


@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multihead_attention(case):
    kwargs, mask, rotary = MHA_CASES[case]
    kwargs = head_dim_128(kwargs)
    mha = te.MultiheadAttention(attention_dropout=0.0, attn_mask_type=mask,
                                params_dtype=BF16, **kwargs)
    perturb(mha)
    check_block(mha, mha_reference, mha.qkv_format, mask=mask, rotary=rotary,
                what=f"MultiheadAttention fp8_dpa {case}")


@pytest.mark.parametrize("case", list(TL_CASES))
def test_transformer_layer(case):
    kwargs, mask, rotary = TL_CASES[case]
    kwargs = head_dim_128(kwargs)
    layer = te.TransformerLayer(hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type=mask, params_dtype=BF16,
                                **kwargs)
    perturb(layer)
    check_block(layer, transformer_ref, layer.attn_input_format, mask=mask,
                rotary=rotary, what=f"TransformerLayer fp8_dpa {case}")


def test_transformer_layer_seed_size():
    """The seed layer (hidden 4096, FFN 16384, 32 heads, causal) at s 2048,
    b 2 under fp8_dpa: output and input gradient."""
    layer = te.TransformerLayer(4096, 16384, 32, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    perturb(layer)
    errors = check_block(layer, transformer_ref, "sbhd", seq=2048, batch=2,
                         param_grads=False,
                         what="TransformerLayer fp8_dpa seed size")
    print(f"seed size fp8_dpa: output {errors['output']:.4f}, input grad "
          f"{errors['input grad']:.4f} (RMSE / range)")


# --- KV cache and refusals ---------------------------------------------------


def test_kv_cache_attention_stays_bf16():
    """A decode loop (prefill, then single tokens) through a
    TransformerLayer's KV cache under fp8_dpa gives what its twin gives
    under the recipe without fp8_dpa, bit for bit: the same program (its
    GEMMs in FP8, its attention in bf16), no error."""
    layer = te.TransformerLayer(256, 1024, 8, num_gqa_groups=2,
                                hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd", params_dtype=BF16)
    perturb(layer)
    layer.eval()
    twin = copy.deepcopy(layer)
    schedule = [[(0, 12), (1, 5)], [(0, 1), (1, 1)], [(0, 1), (1, 1)]]
    caches = {id(m): te.InferenceParams(2, 64, 2, layer.kv_channels, BF16,
                                        qkv_format="thd", max_ctx_len=16)
              for m in (layer, twin)}
    for pairs in schedule:
        step = OrderedDict(pairs)
        x = torch.randn(sum(step.values()), 256, device="cuda", dtype=BF16)
        outputs = []
        for module, enabled in ((layer, True), (twin, False)):
            params = caches[id(module)]
            params.pre_step(step)
            with torch.no_grad(), te.fp8_autocast(
                    fp8_recipe=fp8_dpa(enabled=enabled)):
                outputs.append(module(x, inference_params=params))
        assert torch.isfinite(outputs[0]).all()
        assert torch.equal(outputs[0], outputs[1]), (
            f"step {dict(step)}: the KV-cache step under fp8_dpa differs "
            f"from the one without (rel. L2 "
            f"{rel_l2(outputs[0], outputs[1]):.2e})")


def test_refusals_before_compiling():
    q, k, v = qkv_inputs((64, 2), 4, 4, 64, BF16)
    cases = {
        "window_size": (te.DotProductAttention(4, 64, window_size=(16, 0)),
                        (q, k, v), {}),
        "post_scale_bias": (te.DotProductAttention(4, 64), (q, k, v), {
            "core_attention_bias_type": "post_scale_bias",
            "core_attention_bias": torch.zeros(1, 4, 64, 64, device="cuda",
                                               dtype=BF16)}),
        "alibi": (te.DotProductAttention(4, 64), (q, k, v),
                  {"core_attention_bias_type": "alibi"}),
        "kv_channels=72": (te.DotProductAttention(4, 72), [
            torch.randn(64, 2, 4, 72, device="cuda", dtype=BF16)] * 3, {}),
    }
    before = te.compile_count()
    for word, (module, args, kwargs) in cases.items():
        with pytest.raises(NotImplementedError) as caught:
            with te.fp8_autocast(fp8_recipe=fp8_dpa()):
                module(*args, **kwargs)
        assert word in str(caught.value), str(caught.value)
        assert "FP8 attention" in str(caught.value), str(caught.value)
    assert te.compile_count() == before, "a refused call compiled"
