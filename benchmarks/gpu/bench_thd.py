#!/usr/bin/env python3
"""Packed variable-length sequences (qkv_format="thd"): tejit's
DotProductAttention on packed q/k/v against, in the same process on the
same GPU and data: tejit on the same sequences already padded to bshd
(with a padding mask: what tejit's thd path ran until session 17, around
scatter/gather copies), and PyTorch's flash scaled_dot_product_attention called once per sequence.
Then the seed TransformerLayer's FP8 training step and FP8 inference
forward (a serving prefill) on packed tokens against the same sequences
padded to bshd (transformer_layer()).
tejit's thd runs with and without max_seqlen (without it, each call reads
cu_seqlens back to the host).

Run on the GPU machine (after tools/scripts/pack-gpu.sh here, carry .gpu):
    source tools/scripts/gpu-env.sh; PYTHONPATH=$PWD/python \\
        python3 benchmarks/gpu/bench_thd.py

Shapes: 16384 tokens in six sequences (6223, 4096, 3000, 2048, 1000, 17),
32 heads of 128 in 8 GQA groups, causal, bf16, no dropout; one forward +
backward. Times: CUDA events around 10 runs after 3 warm-ups, median of 5
such batches (bench_attention.timed)."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tejit.pytorch as te
from bench_attention import timed
from tejit.common.recipe import DelayedScaling, Format

LENGTHS = [6223, 4096, 3000, 2048, 1000, 17]
# The TransformerLayer comparison: 8192 tokens, as a packed batch of a
# 2048-token context might hold.
LAYER_LENGTHS = [2048, 1000, 3000, 2048, 96]
HEADS, GROUPS, D = 32, 8, 128


def main():
    torch.manual_seed(0)
    cu = torch.tensor([0] + LENGTHS, device="cuda").cumsum(0).int()
    tokens = int(cu[-1])

    def leaf(groups):
        return torch.randn(tokens, groups, D, device="cuda",
                           dtype=torch.bfloat16, requires_grad=True)
    q, k, v = leaf(HEADS), leaf(GROUPS), leaf(GROUPS)
    dy = torch.randn(tokens, HEADS * D, device="cuda", dtype=torch.bfloat16)
    thd = te.DotProductAttention(HEADS, D, num_gqa_groups=GROUPS,
                                 qkv_format="thd",
                                 attn_mask_type="padding_causal",
                                 attention_dropout=0.0)

    def tejit_thd():
        thd(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu).backward(dy)

    def tejit_thd_max():
        # Megatron-style: max_seqlen given, no host read-back.
        thd(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu,
            max_seqlen_q=max(LENGTHS),
            max_seqlen_kv=max(LENGTHS)).backward(dy)

    # The same sequences, padded once outside the timed region.
    batch, longest = len(LENGTHS), -(-max(LENGTHS) // 64) * 64
    padded = [torch.zeros(batch, longest, t.shape[1], D, device="cuda",
                          dtype=torch.bfloat16) for t in (q, k, v)]
    for i, (start, end) in enumerate(zip(cu[:-1].tolist(),
                                         cu[1:].tolist())):
        for dst, src in zip(padded, (q, k, v)):
            dst[i, :end - start] = src.detach()[start:end]
    for t in padded:
        t.requires_grad_()
    mask = (torch.arange(longest, device="cuda")[None, :]
            >= torch.tensor(LENGTHS, device="cuda")[:, None]).view(
                batch, 1, 1, longest)
    bshd = te.DotProductAttention(HEADS, D, num_gqa_groups=GROUPS,
                                  qkv_format="bshd",
                                  attn_mask_type="padding_causal",
                                  attention_dropout=0.0)
    dy_padded = torch.randn(batch, longest, HEADS * D, device="cuda",
                            dtype=torch.bfloat16)

    def tejit_padded():
        bshd(*padded, attention_mask=mask).backward(dy_padded)

    # PyTorch: flash attention per sequence ([1, h, s, d]), GQA expanded.
    def torch_loop():
        outs = []
        for start, end in zip(cu[:-1].tolist(), cu[1:].tolist()):
            qs, ks, vs = (t[start:end].transpose(0, 1).unsqueeze(0)
                          for t in (q, k, v))
            ks = ks.repeat_interleave(HEADS // GROUPS, dim=1)
            vs = vs.repeat_interleave(HEADS // GROUPS, dim=1)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                o = F.scaled_dot_product_attention(qs, ks, vs,
                                                   is_causal=True)
            outs.append(o.squeeze(0).transpose(0, 1).reshape(end - start,
                                                             -1))
        torch.cat(outs).backward(dy)

    flops = sum(4 * HEADS * s * s * D / 2 for s in LENGTHS) * 3.5
    print(f"{torch.cuda.get_device_name()}, {tokens} tokens in "
          f"{len(LENGTHS)} sequences, {HEADS} heads / {GROUPS} groups of "
          f"{D}, causal bf16, forward + backward")
    for name, fn in (("tejit thd", tejit_thd),
                     ("tejit thd, max_seqlen given", tejit_thd_max),
                     ("tejit bshd, pre-padded", tejit_padded),
                     ("PyTorch flash SDPA per sequence", torch_loop)):
        ms = timed(fn, warmup=3, runs=10)
        print(f"{name:34s} {ms:8.3f} ms  {flops / ms / 1e9:7.1f} TFLOP/s")


def transformer_layer():
    """The seed TransformerLayer (hidden 4096, FFN 16384, 32 heads), one
    FP8 (DelayedScaling HYBRID) training step on the sequences of
    LAYER_LENGTHS: packed (attn_input_format="thd", max_seqlen given)
    against the same sequences padded to bshd with a padding mask (what
    a user without thd runs; every token of the padded batch goes
    through the GEMMs)."""
    torch.manual_seed(0)
    lengths = LAYER_LENGTHS
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).int()
    tokens = int(cu[-1])
    batch, longest = len(lengths), -(-max(lengths) // 64) * 64

    def layer(fmt):
        return te.TransformerLayer(
            4096, 16384, 32, hidden_dropout=0.0, attention_dropout=0.0,
            self_attn_mask_type="padding_causal", attn_input_format=fmt,
            params_dtype=torch.bfloat16)
    packed, padded = layer("thd"), layer("bshd")
    padded.load_state_dict(packed.state_dict())
    x = torch.randn(tokens, 4096, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    dy = torch.randn_like(x)
    xp = torch.zeros(batch, longest, 4096, device="cuda",
                     dtype=torch.bfloat16)
    for i, (start, end) in enumerate(zip(cu[:-1].tolist(),
                                         cu[1:].tolist())):
        xp[i, :end - start] = x.detach()[start:end]
    xp.requires_grad_()
    dyp = torch.randn_like(xp)
    mask = (torch.arange(longest, device="cuda")[None, :]
            >= torch.tensor(lengths, device="cuda")[:, None]).view(
                batch, 1, 1, longest)
    recipe = DelayedScaling(fp8_format=Format.HYBRID)

    def step_packed():
        with te.fp8_autocast(fp8_recipe=recipe):
            y = packed(x, cu_seqlens_q=cu, cu_seqlens_kv=cu,
                       max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths))
        y.backward(dy)

    def step_padded():
        with te.fp8_autocast(fp8_recipe=recipe):
            y = padded(xp, attention_mask=mask)
        y.backward(dyp)

    print(f"TransformerLayer 4096/16384/32 heads, FP8 step, {tokens} tokens "
          f"in {batch} sequences (padded: {batch} x {longest} = "
          f"{batch * longest})")
    for name, fn in (("tejit thd (packed)", step_packed),
                     ("tejit bshd + padding mask", step_padded)):
        ms = timed(fn, warmup=3, runs=5)
        print(f"{name:34s} {ms:8.3f} ms")

    # Serving: a prefill of the same prompts, eval mode, no autograd.
    packed.eval()
    padded.eval()

    def prefill_packed():
        with torch.no_grad(), te.fp8_autocast(fp8_recipe=recipe):
            packed(x, cu_seqlens_q=cu, cu_seqlens_kv=cu,
                   max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths))

    def prefill_padded():
        with torch.no_grad(), te.fp8_autocast(fp8_recipe=recipe):
            padded(xp, attention_mask=mask)

    print("same layer, FP8 inference forward (prefill), eval, no_grad")
    for name, fn in (("tejit thd (packed)", prefill_packed),
                     ("tejit bshd + padding mask", prefill_padded)):
        ms = timed(fn, warmup=3, runs=10)
        print(f"{name:34s} {ms:8.3f} ms")


if __name__ == "__main__":
    main()
    transformer_layer()
