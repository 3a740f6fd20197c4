"""GPU tests of tejit.pytorch.attention's rotary embeddings (TE's
RotaryPositionEmbedding and apply_rotary_pos_emb) against float64
references written here from the definition, and of the table driving
tejit's compiled attention.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_rope.py

- The table: angle p * base^(-2i / d) for position p (shifted by offset,
  scaled by the interpolation rules) and frequency i, each written twice
  (the two halves, or adjacent pairs when interleaved), float32 [s, 1, 1,
  d]; within float32's rounding of the float64 angles.
- apply_rotary_pos_emb: the rotation of each (x_j, x_j+d/2) pair (or
  adjacent pair) by its angle, channels past the table's width unchanged;
  sbhd and bshd, bf16 / fp16 / float32, against float64 rotations of the
  same inputs; packed sequences (thd, cu_seqlens) bit-equal to each
  sequence rotated on its own, the tail untouched.
- A MultiheadAttention forward with rotary_pos_emb from the class matches
  the forward with the float64 angles built here (rounded to float32; the
  two tables differ in the last bit of some angles): relative L2 below
  1e-3, and differs from the forward without rotary.
"""

import pytest

from gpu_test_support import run_seed, seed_per_test, torch

import tejit.pytorch as te  # noqa: E402
from tejit.pytorch.attention import (RotaryPositionEmbedding,  # noqa: E402
                                     apply_rotary_pos_emb)

SEED = run_seed("test_rope")
# Relative error of float32 angles and of a rotation in each dtype (its
# unit roundoff times a few operations).
TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 1.6e-2,
             torch.float16: 2e-3}


fresh_seed = seed_per_test(SEED)


def reference_angles(seq, dim, base=10000.0, offset=0, scale=1.0,
                     interleaved=False):
    """[seq, dim] float64 angles, loop-free but from the definition."""
    positions = (torch.arange(seq, dtype=torch.float64) + offset) * scale
    i = torch.arange(dim // 2, dtype=torch.float64)
    angles = positions[:, None] * base ** (-2.0 * i / dim)[None, :]
    if interleaved:
        return angles.repeat_interleave(2, dim=1)
    return torch.cat([angles, angles], dim=1)


TABLE_CASES = {
    "default": (dict(dim=128), dict(max_seq_len=512), dict()),
    "llama3-base": (dict(dim=128, rotary_base=500000.0),
                    dict(max_seq_len=4096), dict(base=500000.0)),
    "interleaved-offset": (dict(dim=64, interleaved=True),
                           dict(max_seq_len=300, offset=7),
                           dict(offset=7, interleaved=True)),
    "rotary-percent": (dict(dim=128, rotary_percent=0.5),
                       dict(max_seq_len=256), dict(dim=64)),
    "interpolation": (dict(dim=64, seq_len_interpolation_factor=4.0,
                           pretrained_max_position_embeddings=1000),
                      dict(max_seq_len=1000), dict(scale=0.25)),
    # TE interpolates only when given the pretrained length as well.
    "factor-alone": (dict(dim=64, seq_len_interpolation_factor=4.0),
                     dict(max_seq_len=1000), dict()),
    # Longer than pretrained x factor = 400: squeezed into 100 positions.
    "dynamic-interpolation": (dict(dim=64, seq_len_interpolation_factor=4.0,
                                   pretrained_max_position_embeddings=100),
                              dict(max_seq_len=1000), dict(scale=0.1)),
}


@pytest.mark.parametrize("case", list(TABLE_CASES))
def test_table_matches_definition(case):
    init, call, ref = TABLE_CASES[case]
    ref = dict(ref)
    table = RotaryPositionEmbedding(**init)(**call)
    dim = ref.pop("dim", init["dim"])
    want = reference_angles(call["max_seq_len"], dim,
                            base=ref.pop("base", 10000.0), **ref)
    assert table.dtype == torch.float32 and table.is_cuda
    assert tuple(table.shape) == (call["max_seq_len"], 1, 1, dim)
    got = table.view(call["max_seq_len"], dim).double().cpu()
    error = ((got - want).abs().max() / want.abs().max()).item()
    assert error < TOLERANCE[torch.float32], f"{case}: max error {error:.2e}"


def reference_rotation(t, angles, tensor_format, interleaved):
    """t rotated in float64 pair by pair: for each pair (a, b) of channels
    sharing angle θ, (a cos θ - b sin θ, b cos θ + a sin θ); angles [s,
    rot]."""
    x = t.double().cpu()
    if tensor_format == "bshd":
        x = x.transpose(0, 1)
    seq, rot = x.shape[0], angles.shape[1]
    theta = angles[:seq, None, None, :]  # [s, 1, 1, rot]
    out = x.clone()
    if interleaved:
        first, second = torch.arange(0, rot, 2), torch.arange(1, rot, 2)
    else:
        first, second = torch.arange(rot // 2), torch.arange(rot // 2, rot)
    a, b = x[..., first], x[..., second]
    cos, sin = torch.cos(theta[..., first]), torch.sin(theta[..., first])
    out[..., first] = a * cos - b * sin
    out[..., second] = b * cos + a * sin
    return out.transpose(0, 1) if tensor_format == "bshd" else out


APPLY_CASES = [(fmt, dtype, interleaved, rot)
               for fmt in ("sbhd", "bshd")
               for dtype in (torch.bfloat16, torch.float16, torch.float32)
               for interleaved in (False, True) for rot in (64, 32)]


@pytest.mark.parametrize(
    "fmt,dtype,interleaved,rot", APPLY_CASES,
    ids=[f"{c[0]}-{str(c[1])[6:]}-{'inter' if c[2] else 'halves'}-r{c[3]}"
         for c in APPLY_CASES])
def test_apply_matches_rotation(fmt, dtype, interleaved, rot):
    seq, batch, heads, dim = 96, 2, 4, 64
    shape = (seq, batch, heads, dim) if fmt == "sbhd" else (batch, seq,
                                                             heads, dim)
    t = torch.randn(shape, device="cuda", dtype=dtype)
    freqs = RotaryPositionEmbedding(rot, interleaved=interleaved)(seq + 10)
    got = apply_rotary_pos_emb(t, freqs, tensor_format=fmt,
                               interleaved=interleaved)
    assert got.dtype == dtype and got.shape == t.shape
    want = reference_rotation(t, reference_angles(seq + 10, rot,
                                                  interleaved=interleaved),
                              fmt, interleaved)
    error = ((got.double().cpu() - want).norm() / want.norm()).item()
    assert error < TOLERANCE[dtype], f"relative L2 {error:.2e}"
    # Channels past the rotated ones are passed through untouched.
    assert torch.equal(got[..., rot:], t[..., rot:])


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_thd_restarts_positions_per_sequence(interleaved):
    """Packed sequences (tensor_format="thd", cu_seqlens): each sequence
    rotates as an sbhd tensor of its own would; the tail after the last
    sequence passes through."""
    lengths, tail, heads, dim, rot = [7, 1, 30, 12], 5, 4, 64, 32
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
    t = torch.randn(int(cu[-1]) + tail, heads, dim, device="cuda",
                    dtype=torch.bfloat16)
    freqs = RotaryPositionEmbedding(rot, interleaved=interleaved)(40)
    got = apply_rotary_pos_emb(t, freqs, tensor_format="thd",
                               interleaved=interleaved, cu_seqlens=cu)
    assert got.shape == t.shape
    for i, n in enumerate(lengths):
        start = int(cu[i])
        want = apply_rotary_pos_emb(t[start:start + n].unsqueeze(1), freqs,
                                    interleaved=interleaved).squeeze(1)
        assert torch.equal(got[start:start + n], want), f"sequence {i}"
    assert torch.equal(got[int(cu[-1]):], t[int(cu[-1]):])


def test_apply_refuses_what_it_does_not_do():
    t = torch.randn(8, 2, 2, 16, device="cuda")
    freqs = RotaryPositionEmbedding(16)(8)
    with pytest.raises(ValueError, match="thd"):
        apply_rotary_pos_emb(t, freqs, tensor_format="thd")
    with pytest.raises(ValueError, match="cu_seqlens"):
        apply_rotary_pos_emb(t, freqs, cu_seqlens=torch.tensor([0, 8]))
    with pytest.raises(NotImplementedError, match="cp_size"):
        apply_rotary_pos_emb(t, freqs, cp_size=2)
    with pytest.raises(ValueError, match="cover"):
        apply_rotary_pos_emb(t, RotaryPositionEmbedding(16)(4))
    with pytest.raises(ValueError, match="rotary_percent"):
        RotaryPositionEmbedding(16, rotary_percent=0.0)


def test_table_drives_compiled_attention():
    """MultiheadAttention given the class's table computes what it computes
    with the angles built here; a rotary_percent < 1 table runs, an odd
    one is refused."""
    seq, hidden, heads = 64, 256, 4
    mha = te.MultiheadAttention(hidden, heads, attention_dropout=0.0,
                                input_layernorm=True,
                                params_dtype=torch.bfloat16)
    x = torch.randn(seq, 2, hidden, device="cuda", dtype=torch.bfloat16)
    table = RotaryPositionEmbedding(mha.kv_channels)(seq)
    here = reference_angles(seq, mha.kv_channels).float().cuda().view(
        seq, 1, 1, -1)
    with torch.no_grad():
        a = mha(x, rotary_pos_emb=table)
        b = mha(x, rotary_pos_emb=here)
        plain = mha(x)
    error = ((a.float() - b.float()).norm() / b.float().norm()).item()
    assert error < 1e-3, f"class table vs reference table: {error:.2e}"
    moved = ((a.float() - plain.float()).norm() / plain.float().norm()).item()
    assert moved > 1e-2, f"rotary_pos_emb moved the output by {moved:.2e}"
    # rotary_percent < 1: the compiled attention rotates the table's width
    # (test_attention_layers checks the values); an odd width is refused.
    partial = RotaryPositionEmbedding(mha.kv_channels, rotary_percent=0.5)
    with torch.no_grad():
        c = mha(x, rotary_pos_emb=partial(seq))
    assert not torch.equal(c, a) and not torch.equal(c, plain)
    with pytest.raises(ValueError, match="even number at most kv_channels"):
        with torch.no_grad():
            mha(x, rotary_pos_emb=here[..., :7].contiguous())

