"""GPU tests of MultiheadAttention(qkv_format="thd") and
TransformerLayer(attn_input_format="thd"): packed variable-length
sequences through the whole block (norms and GEMMs on the packed tokens,
cuDNN attention in place), forward and backward, bf16 and FP8.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_thd_blocks.py

Data: fresh random tokens every run from the seed of
tests/gpu/test_attention_layers.py (TEJIT_TEST_SEED=N repeats a run);
sequence lengths include 1 and lengths that are not multiples of 64, some
calls a tail of tokens after the last sequence and token counts that are
not multiples of 64 (the program pads them).

Reference: test_attention_layers.py's float32 compositions (mha_ref,
transformer_ref) run on each sequence alone as sbhd [len, 1, hidden], with
the causal mask for padding_causal, and rotary angles of positions 0 ..
len - 1 (TE restarts positions at every sequence). The output and input
gradient are compared on the sequences' tokens (the tail's output has no
reference: its attention output is 0, as TE's), every parameter gradient
in full (the tail's output gradient is 0). Bounds: check_block's, relative
L2 1.6e-2 in bf16, 0.125 (output) and 0.25 (gradients) in FP8 after the
FP8 warm-up steps.
"""
import copy
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import (  # noqa: E402
    hybrid, perturb, seed_per_test, torch)

import tejit.pytorch as te  # noqa: E402

from test_attention_layers import (  # noqa: E402
    BF16, FP8_WARMUP_STEPS, L2_DTYPE, L2_FP8_GRAD, L2_FP8_OUTPUT, SEED,
    block_step, check_errors, mha_reference, rel_l2, rotary_freqs,
    transformer_ref)


fresh_seed = seed_per_test(SEED)


def sequence_reference(module, reference, x32, params, cu, mask, freqs):
    """`reference` (float32) on each sequence of the packed `x32` alone,
    in sbhd; the tail's rows are zero."""
    attention = getattr(module, "self_attention", module)
    # The compositions read the layout from the module: one sequence is
    # sbhd [len, 1, hidden].
    attention.qkv_format = "sbhd"
    try:
        rows = []
        starts = cu.tolist()
        for start, end in zip(starts[:-1], starts[1:]):
            if end == start:
                continue
            seq_freqs = freqs[:end - start] if freqs is not None else None
            out = reference(module, x32[start:end].unsqueeze(1), params,
                            "causal" if "causal" in mask else "no_mask",
                            None, seq_freqs)
            rows.append(out.squeeze(1))
        rows.append(x32.new_zeros(x32.shape[0] - starts[-1], x32.shape[1]))
        return torch.cat(rows)
    finally:
        attention.qkv_format = "thd"


def check_packed_block(module, reference, lengths, tail, mask, fp8_recipe,
                       rotary=False, what="", give_max=False):
    """One training step of `module` on packed sequences of `lengths`
    (and `tail` spare tokens) against `reference` per sequence."""
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).to(torch.int32)
    end = int(cu[-1])
    tokens = end + tail
    x = torch.randn(tokens, module.hidden_size, device="cuda", dtype=BF16,
                    requires_grad=True)
    attention = getattr(module, "self_attention", module)
    freqs = None
    if rotary:
        freqs = rotary_freqs(max(lengths) + 7, module.kv_channels
                             if rotary is True else rotary, "cuda",
                             getattr(attention, "rotary_pos_interleaved",
                                     False))
    call = dict(cu_seqlens_q=cu, cu_seqlens_kv=cu)
    if give_max:
        call["max_seqlen_q"] = call["max_seqlen_kv"] = max(lengths)
    if freqs is not None:
        call["rotary_pos_emb"] = freqs
    rows = torch.zeros(tokens, 1, device="cuda")
    rows[:end] = 1
    dy = (torch.randn(tokens, module.hidden_size, device="cuda")
          * rows).to(BF16)
    for _ in range(FP8_WARMUP_STEPS if fp8_recipe is not None else 0):
        block_step(module, x, fp8_recipe, dy, **call)
    out = block_step(module, x, fp8_recipe, dy, **call)
    assert tuple(out.shape) == tuple(x.shape), f"{what}: output shape"
    grads = {n: p.grad for n, p in module.named_parameters()}
    dx = x.grad

    params = {n: p.detach().float().requires_grad_()
              for n, p in module.named_parameters()}
    x32 = x.detach().float().requires_grad_()
    ref = sequence_reference(module, reference, x32, params, cu, mask, freqs)
    ref.backward(dy.float())
    errors = {"output": rel_l2(out * rows, ref * rows),
              "input grad": rel_l2(dx * rows, x32.grad * rows)}
    for name, grad in grads.items():
        assert grad is not None, f"{what}: no gradient for {name}"
        if name.endswith("key_bias"):
            continue  # its exact gradient is 0 (see check_block)
        errors[name] = rel_l2(grad, params[name].grad)
    if fp8_recipe is None:
        limits = dict.fromkeys(errors, L2_DTYPE[BF16])
    else:
        limits = dict.fromkeys(errors, L2_FP8_GRAD)
        limits["output"] = L2_FP8_OUTPUT
    check_errors(errors, limits, what)
    return errors


TL_CASES = {
    # kwargs, mask, rotary, lengths, tail, give max_seqlen
    "default-tail": (dict(hidden_size=256, ffn_hidden_size=1024,
                          num_attention_heads=4),
                     "padding_causal", False, [37, 128, 1, 90], 5, False),
    "llama-like-rotary": (dict(
        hidden_size=256, ffn_hidden_size=512, num_attention_heads=8,
        num_gqa_groups=2, normalization="RMSNorm", activation="swiglu",
        bias=False), "padding_causal", True, [100, 3, 64, 200], 17, True),
    "parallel-interleaved-partial-rotary": (dict(
        hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4,
        parallel_attention_mlp=True, rotary_pos_interleaved=True),
        "padding_causal", 16, [64, 64, 128], 0, False),
    "padding-bidirectional": (dict(
        hidden_size=256, ffn_hidden_size=1024, num_attention_heads=8,
        num_gqa_groups=4, fuse_qkv_params=True), "padding", False,
        [150, 7, 77], 3, False),
}


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(TL_CASES))
def test_thd_transformer_layer(case, fp8):
    kwargs, mask, rotary, lengths, tail, give_max = TL_CASES[case]
    layer = te.TransformerLayer(hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type=mask, params_dtype=BF16,
                                attn_input_format="thd", **kwargs)
    perturb(layer)
    check_packed_block(layer, transformer_ref, lengths, tail, mask,
                       hybrid() if fp8 else None, rotary,
                       f"thd TransformerLayer {case} "
                       f"{'fp8' if fp8 else 'bf16'}", give_max)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_thd_multihead_attention(fp8):
    mha = te.MultiheadAttention(256, 8, num_gqa_groups=2,
                                input_layernorm=True, attention_dropout=0.0,
                                attn_mask_type="padding", qkv_format="thd",
                                params_dtype=BF16)
    perturb(mha)
    check_packed_block(mha, mha_reference, [33, 200, 1, 64], 9, "padding",
                       hybrid() if fp8 else None, rotary=32,
                       what="thd MultiheadAttention "
                       + ("fp8" if fp8 else "bf16"))


def test_thd_transformer_layer_full_size_fp8():
    """The seed layer (hidden 4096, FFN 16384, 32 heads) on 8192 packed
    tokens in five sequences, FP8, against float32 per sequence."""
    layer = te.TransformerLayer(4096, 16384, 32, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16,
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd")
    perturb(layer)
    errors = check_packed_block(
        layer, transformer_ref, [2048, 1000, 3000, 2048, 96], 0,
        "padding_causal", hybrid(), what="thd TransformerLayer full size")
    print(f"full-size thd FP8 step: output {errors['output']:.4f}, input "
          f"grad {errors['input grad']:.4f}")


def test_thd_block_with_dropout_runs_and_differs_per_step():
    """Attention and hidden dropout on packed tokens: two training steps
    draw different masks, eval mode draws none."""
    layer = te.TransformerLayer(256, 512, 4, params_dtype=BF16,
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd")
    cu = torch.tensor([0, 60, 100, 128], device="cuda", dtype=torch.int32)
    x = torch.randn(128, 256, device="cuda", dtype=BF16)
    first = layer(x, cu_seqlens_q=cu, cu_seqlens_kv=cu)
    second = layer(x, cu_seqlens_q=cu, cu_seqlens_kv=cu)
    assert not torch.equal(first, second), "dropout drew one mask twice"
    layer.eval()
    with torch.no_grad():
        a = layer(x, cu_seqlens_q=cu, cu_seqlens_kv=cu)
        b = layer(x, cu_seqlens_q=cu, cu_seqlens_kv=cu)
    assert torch.equal(a, b), "eval mode is not deterministic"
    assert torch.isfinite(a).all()


def test_thd_transformer_layer_in_a_cuda_graph():
    """make_graphed_callables on a packed layer (cu_seqlens_q a graph
    input, max_seqlen_q fixed, rotary table an input): replays with other
    packings of the same token count equal an eager twin's steps bit for
    bit, so nothing of a packing is baked into the graph."""
    eager = te.TransformerLayer(256, 512, 8, num_gqa_groups=2,
                                hidden_dropout=0.0, attention_dropout=0.0,
                                normalization="RMSNorm", activation="swiglu",
                                bias=False, params_dtype=BF16,
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd")
    perturb(eager)
    graphed = copy.deepcopy(eager)
    rope = te.attention.RotaryPositionEmbedding(eager.kv_channels)(128)

    def offsets(lengths):
        return torch.tensor([0] + lengths, device="cuda").cumsum(0).to(
            torch.int32)
    sample = torch.randn(200, 256, device="cuda", dtype=BF16,
                         requires_grad=True)
    fp8_recipe = hybrid()
    graphed = te.make_graphed_callables(
        graphed, (sample,), fp8_enabled=True, fp8_recipe=fp8_recipe,
        sample_kwargs={"cu_seqlens_q": offsets([100, 50, 50]),
                       "max_seqlen_q": 128, "rotary_pos_emb": rope})
    for index, lengths in enumerate(([128, 2, 70], [1, 1, 120],
                                     [60, 60, 40])):
        cu = offsets(lengths)
        x = torch.randn(200, 256, device="cuda", dtype=BF16)
        dy = torch.randn_like(x)
        want, got = [], []
        for module, out in ((eager, want), (graphed, got)):
            module.zero_grad(set_to_none=True)
            leaf = x.clone().requires_grad_()
            with te.fp8_autocast(fp8_recipe=fp8_recipe):
                y = module(leaf, cu_seqlens_q=cu, max_seqlen_q=128,
                           rotary_pos_emb=rope)
            y.backward(dy)
            out.extend([y.detach().clone(), leaf.grad.clone()]
                       + [p.grad.clone() for p in module.parameters()])
        for name, a, b in zip(["output", "input grad"]
                              + [n for n, _ in eager.named_parameters()],
                              got, want):
            assert torch.equal(a, b), f"{name}, packing {index}"


def test_thd_transformer_layer_padding_between_sequences():
    """TE's cu_seqlens_q_padded in a TransformerLayer: sequences spread
    out with padding after each, against the float32 composition on each
    sequence alone (output, input gradient on the sequences' tokens, every
    parameter gradient)."""
    layer = te.TransformerLayer(256, 512, 8, num_gqa_groups=2,
                                hidden_dropout=0.0, attention_dropout=0.0,
                                params_dtype=BF16, normalization="RMSNorm",
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd")
    perturb(layer)
    lengths, room = [37, 100, 1, 60], [40, 112, 8, 64]
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
    padded = torch.tensor([0] + room, device="cuda").cumsum(0).int()
    rows = torch.cat([torch.arange(int(padded[i]), int(padded[i]) + n,
                                   device="cuda")
                      for i, n in enumerate(lengths)])
    x = torch.randn(int(cu[-1]), 256, device="cuda", dtype=BF16)
    spread = torch.zeros(int(padded[-1]), 256, device="cuda", dtype=BF16)
    spread[rows] = x
    spread.requires_grad_()
    dy = torch.randn_like(x)
    dy_spread = torch.zeros_like(spread)
    dy_spread[rows] = dy
    got = layer(spread, cu_seqlens_q=cu, cu_seqlens_kv=cu,
                cu_seqlens_q_padded=padded, cu_seqlens_kv_padded=padded,
                pad_between_seqs=True)
    got.backward(dy_spread)
    params = {n: p.detach().float().requires_grad_()
              for n, p in layer.named_parameters()}
    x32 = x.float().requires_grad_()
    ref = sequence_reference(layer, transformer_ref, x32, params, cu,
                             "padding_causal", None)
    ref.backward(dy.float())
    errors = {"output": rel_l2(got[rows], ref),
              "input grad": rel_l2(spread.grad[rows], x32.grad)}
    for name, p in layer.named_parameters():
        if not name.endswith("key_bias"):  # exactly 0 (see check_block)
            errors[name] = rel_l2(p.grad, params[name].grad)
    check_errors(errors, dict.fromkeys(errors, L2_DTYPE[BF16]),
                 "thd TransformerLayer padding between sequences")
