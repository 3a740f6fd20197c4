"""GPU tests of DotProductAttention(qkv_format="thd"): packed
variable-length sequences (TE's cu_seqlens), forward and backward, run in
place by cuDNN (ragged offsets). The blocks' thd: test_thd_blocks.py.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_thd_attention.py
    (-k full_size for the full-size case only)

Data: fresh random tokens and sequence lengths every run from the seed of
tests/gpu/test_attention_layers.py (whose helpers this file imports;
TEJIT_TEST_SEED=N repeats a run). Lengths include 1, lengths that are not
multiples of 64, and a tail of tokens after the last sequence.

Reference: each sequence on its own, attention_ref of
test_attention_layers.py (its own q, k, v, the causal mask when the mask
type has one, the sliding window when given) in float64 (float32 at full
size); rows of the tail are zero. Compared by relative L2 error: output,
dq, dk, dv below 1.6e-2 in bf16 and 4e-3 in fp16 (the DotProductAttention
bounds); the tail's gradients exactly zero. Also: one program for two
batches whose longest sequences round to the same length, and the
refusals (no cu_seqlens, a non-padding mask type, keys packed otherwise
than the queries in a self-attention block, thd cross-attention blocks),
keys packed on their own (cross-attention), and a max_seqlen_q shorter
than a sequence ending its process with a CUDA error (checked on the
device, in a subprocess).
"""
import math
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import seed_per_test, torch  # noqa: E402

import tejit.pytorch as te  # noqa: E402

from test_attention_layers import (  # noqa: E402
    BF16, FP16, L2_DTYPE, SEED, attention_ref, check_errors,
    cross_attention_ref, rel_l2)


fresh_seed = seed_per_test(SEED)


def packed(lengths, tail, heads, groups, d, dtype):
    """(cu_seqlens int32 [b + 1], q [t, heads, d], k, v [t, groups, d])
    for sequences of `lengths` back to back and `tail` spare tokens."""
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0)
    tokens = int(cu[-1]) + tail
    q = torch.randn(tokens, heads, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(tokens, groups, d, device="cuda", dtype=dtype)
            for _ in range(2))
    for t in (q, k, v):
        t.requires_grad_()
    return cu.to(torch.int32), q, k, v


def thd_reference(q, k, v, cu, mask_type, window, dtype):
    """Each sequence's attention in `dtype`, as [t, heads * d]."""
    d = q.shape[-1]
    rows = []
    starts = cu.tolist()
    for start, end in zip(starts[:-1], starts[1:]):
        # [s, 1, h, d]: one sequence in sbhd.
        parts = [t[start:end].to(dtype).unsqueeze(1) for t in (q, k, v)]
        causal = "causal" if "causal" in mask_type else "no_mask"
        out = attention_ref(*parts, causal, None, "sbhd", 1 / math.sqrt(d),
                            window)
        rows.append(out.squeeze(1))
    tail = q.shape[0] - starts[-1]
    rows.append(torch.zeros(tail, q.shape[1] * d, dtype=dtype,
                            device=q.device))
    return torch.cat(rows)


def check_thd(lengths, tail, heads, groups, d, mask, dtype, window=None,
              give_max=False, reference_dtype=torch.float64):
    """One forward and backward of a thd DotProductAttention against
    thd_reference; returns the errors."""
    cu, q, k, v = packed(lengths, tail, heads, groups, d, dtype)
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format="thd", attn_mask_type=mask,
                                 attention_dropout=0.0)
    call = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu)
    if window is not None:
        call["window_size"] = window
    if give_max:
        call["max_seqlen_q"] = call["max_seqlen_kv"] = max(lengths)
    out = dpa(q, k, v, **call)
    assert tuple(out.shape) == (q.shape[0], heads * d)
    dy = torch.randn_like(out)
    out.backward(dy)
    q64, k64, v64 = (t.detach().to(reference_dtype).requires_grad_()
                     for t in (q, k, v))
    ref = thd_reference(q64, k64, v64, cu, mask, window, reference_dtype)
    ref.backward(dy.to(reference_dtype))
    what = (f"thd lengths {lengths} tail {tail} heads {heads} groups "
            f"{groups} d {d} {mask} {dtype} window {window}")
    errors = {"output": rel_l2(out, ref), "dq": rel_l2(q.grad, q64.grad),
              "dk": rel_l2(k.grad, k64.grad), "dv": rel_l2(v.grad, v64.grad)}
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[dtype]), what)
    if tail:
        end = int(cu[-1])
        assert torch.count_nonzero(out[end:]) == 0, f"{what}: tail output"
        for name, t in (("dq", q), ("dk", k), ("dv", v)):
            assert torch.count_nonzero(t.grad[end:]) == 0, \
                f"{what}: tail {name}"
    return errors


THD_CASES = [
    # lengths, tail, heads, groups, d, mask, dtype, window, give_max
    ([37, 128, 1, 200], 5, 8, 2, 64, "padding_causal", BF16, None, False),
    ([64, 64, 64], 0, 8, 8, 128, "padding", BF16, None, True),
    ([300, 17, 90], 11, 4, 1, 128, "padding_causal_bottom_right", FP16,
     None, False),
    ([150, 256, 3], 0, 8, 2, 64, "padding", FP16, None, False),
    ([257, 100, 31, 64, 5], 3, 8, 4, 128, "padding_causal", BF16, (48, 0),
     True),
]


@pytest.mark.parametrize(
    "lengths,tail,heads,groups,d,mask,dtype,window,give_max", THD_CASES,
    ids=[f"{len(c[0])}seqs-tail{c[1]}-h{c[2]}g{c[3]}-d{c[4]}-{c[5]}-"
         f"{'bf16' if c[6] is BF16 else 'fp16'}"
         f"{'-window' if c[7] else ''}" for c in THD_CASES])
def test_thd_dot_product_attention(lengths, tail, heads, groups, d, mask,
                                   dtype, window, give_max):
    check_thd(lengths, tail, heads, groups, d, mask, dtype, window,
              give_max)


@pytest.mark.parametrize("mask,dtype", [("padding", BF16),
                                        ("padding_causal", FP16)])
def test_thd_cross_attention(mask, dtype):
    """Keys packed on their own (cu_seqlens_kv, another token count, a
    tail after each side's last sequence): query sequence i attends to key
    sequence i alone (causal aligned top-left), against float64."""
    lengths_q, lengths_kv = [37, 128, 1, 90], [50, 3, 200, 64]
    heads, groups, d = 8, 2, 64
    cu_q = torch.tensor([0] + lengths_q, device="cuda").cumsum(0).int()
    cu_kv = torch.tensor([0] + lengths_kv, device="cuda").cumsum(0).int()
    q = torch.randn(int(cu_q[-1]) + 5, heads, d, device="cuda", dtype=dtype,
                    requires_grad=True)
    k, v = (torch.randn(int(cu_kv[-1]) + 3, groups, d, device="cuda",
                        dtype=dtype, requires_grad=True) for _ in range(2))
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format="thd", attn_mask_type=mask,
                                 attention_dropout=0.0)
    out = dpa(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    assert tuple(out.shape) == (q.shape[0], heads * d)
    dy = torch.randn_like(out)
    out.backward(dy)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    rows = []
    for i in range(len(lengths_q)):
        qs = q64[int(cu_q[i]):int(cu_q[i + 1])].unsqueeze(1)
        ks, vs = (t[int(cu_kv[i]):int(cu_kv[i + 1])].unsqueeze(1)
                  for t in (k64, v64))
        rows.append(cross_attention_ref(qs, ks, vs, "causal" in mask, None,
                                        "sbhd", 1 / math.sqrt(d)).squeeze(1))
    rows.append(q64.new_zeros(5, heads * d))
    ref = torch.cat(rows)
    ref.backward(dy.double())
    errors = {"output": rel_l2(out, ref), "dq": rel_l2(q.grad, q64.grad),
              "dk": rel_l2(k.grad, k64.grad), "dv": rel_l2(v.grad, v64.grad)}
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[dtype]),
                 f"thd cross-attention {mask}")
    for name, t, end in (("dk", k, int(cu_kv[-1])), ("dv", v, int(cu_kv[-1])),
                         ("dq", q, int(cu_q[-1]))):
        assert torch.count_nonzero(t.grad[end:]) == 0, f"tail {name}"


def test_thd_padding_between_sequences():
    """TE's cu_seqlens_q_padded (pad_between_seqs=True): sequences spread
    out with padding after each, against float64 attention of each
    sequence on its own; outputs and gradients exactly 0 on the
    padding."""
    lengths, room = [37, 128, 1, 90], [64, 130, 16, 96]
    heads, groups, d = 8, 2, 64
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
    padded = torch.tensor([0] + room, device="cuda").cumsum(0).int()
    rows = torch.cat([torch.arange(int(padded[i]), int(padded[i]) + n,
                                   device="cuda")
                      for i, n in enumerate(lengths)])
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format="thd",
                                 attn_mask_type="padding_causal",
                                 attention_dropout=0.0)
    # The sequences' tokens back to back (the reference's input), and
    # spread out as the call takes them.
    packed = [torch.randn(int(cu[-1]), n, d, device="cuda", dtype=BF16)
              for n in (heads, groups, groups)]
    spread = []
    for t in packed:
        s = torch.zeros(int(padded[-1]), *t.shape[1:], device="cuda",
                        dtype=BF16)
        s[rows] = t
        spread.append(s.requires_grad_())
    dy = torch.randn(int(cu[-1]), heads * d, device="cuda", dtype=BF16)
    dy_spread = torch.zeros(int(padded[-1]), heads * d, device="cuda",
                            dtype=BF16)
    dy_spread[rows] = dy
    got = dpa(*spread, cu_seqlens_q=cu, cu_seqlens_kv=cu,
              cu_seqlens_q_padded=padded, cu_seqlens_kv_padded=padded,
              max_seqlen_q=128, max_seqlen_kv=128, pad_between_seqs=True)
    got.backward(dy_spread)
    ref64 = [t.double().requires_grad_() for t in packed]
    ref = thd_reference(*ref64, cu, "padding_causal", None, torch.float64)
    ref.backward(dy.double())
    gaps = torch.ones(int(padded[-1]), dtype=torch.bool, device="cuda")
    gaps[rows] = False
    errors = {"output": rel_l2(got[rows], ref)}
    for name, a, b in zip(("dq", "dk", "dv"), spread, ref64):
        errors[name] = rel_l2(a.grad[rows], b.grad)
        assert torch.count_nonzero(a.grad[gaps]) == 0, f"{name} on padding"
    assert torch.count_nonzero(got[gaps]) == 0, "output on padding"
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]),
                 "thd padding between sequences")


def test_thd_one_program_per_rounded_length():
    """Batches whose token counts and longest sequences round up to the
    same multiples of 64 share one program."""
    dpa = te.DotProductAttention(4, 64, qkv_format="thd",
                                 attn_mask_type="padding_causal")
    start = te.compile_count()
    for lengths in ([100, 20, 7], [90, 30, 1], [65, 60, 3]):
        cu, q, k, v = packed(lengths, 0, 4, 4, 64, BF16)
        with torch.no_grad():
            dpa(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu)
    assert te.compile_count() - start == 1


def test_thd_refusals():
    cu, q, k, v = packed([10, 20], 0, 4, 4, 64, BF16)
    dpa = te.DotProductAttention(4, 64, qkv_format="thd",
                                 attn_mask_type="padding")
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        dpa(q, k, v)
    with pytest.raises(ValueError, match="padding"):
        dpa(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu,
            attn_mask_type="causal")
    other = torch.tensor([0, 20, 30], dtype=torch.int32, device="cuda")
    block = te.MultiheadAttention(256, 4, qkv_format="thd",
                                  attn_mask_type="padding",
                                  params_dtype=BF16)
    with pytest.raises(NotImplementedError, match="cu_seqlens_kv"):
        block(torch.randn(30, 256, device="cuda", dtype=BF16),
              cu_seqlens_q=cu, cu_seqlens_kv=other)
    with pytest.raises(NotImplementedError, match="thd"):
        te.MultiheadAttention(256, 4, qkv_format="thd",
                              attention_type="cross")
    with pytest.raises(NotImplementedError, match="thd"):
        te.TransformerLayer(256, 512, 4, attn_input_format="thd",
                            layer_type="decoder")


# A max_seqlen_q shorter than a sequence: checked on the device (the call
# does not wait for it), so it ends the process with a CUDA error.
SHORT_MAX_SEQLEN = """
import torch, tejit.pytorch as te
cu = torch.tensor([0, 10, 30], dtype=torch.int32, device="cuda")
q = torch.randn(30, 4, 64, device="cuda", dtype=torch.bfloat16)
dpa = te.DotProductAttention(4, 64, qkv_format="thd",
                             attn_mask_type="padding")
dpa(q, q, q, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=8)
torch.cuda.synchronize()
"""


def test_thd_short_max_seqlen_is_an_error():
    result = subprocess.run([sys.executable, "-c", SHORT_MAX_SEQLEN],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                sys.path)))
    assert result.returncode != 0, "a too short max_seqlen_q passed"
    assert "max_seqlen" in result.stderr or "assert" in result.stderr, \
        result.stderr[-2000:]


def test_thd_full_size():
    """Six packed sequences (4096 down to 17 tokens, 16384 in all), 32
    heads in 8 GQA groups, d 128, causal, bf16, against float32."""
    check_thd([4096, 1000, 3000, 2048, 17, 6223], 0, 32, 8, 128,
              "padding_causal", BF16, reference_dtype=torch.float32)
