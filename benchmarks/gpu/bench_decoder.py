#!/usr/bin/env python3
"""A decoder layer (TE's TransformerLayer(layer_type="decoder"): causal
self-attention, cross-attention over an encoder's output, MLP) at the seed
layer's sizes, one training step (forward + backward into the input and
the encoder output), tejit against PyTorch peers in the same process on
the same GPU.

Run on the GPU machine (after tools/scripts/pack-gpu.sh here, carry .gpu):
    source tools/scripts/gpu-env.sh; cd benchmarks/gpu; \\
        PYTHONPATH=$PWD/../../python python3 bench_decoder.py [--batch 2]

Shapes: hidden 4096, FFN 16384, 32 heads, 2048 decoder tokens over 2048
encoder tokens, batch 2, bshd, bf16 parameters, no dropout, no padding.
Rows: tejit FP8 (DelayedScaling HYBRID), tejit bf16, and a PyTorch
composition of the same layer (pre-LayerNorm, tanh GELU, F.scaled_dot_
product_attention with the flash backend) eager in bf16, torch.compile'd
in bf16, and torch.compile'd with torch_peers.Fp8Linear (torch._scaled_mm,
tensorwise scaling) for every Linear. Times: CUDA events around 20 steps
after 5 warm-ups (bench_transformer.speedometer), the median step.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_transformer import speedometer
from torch_peers import Fp8Linear

import tejit.pytorch as te
from tejit.common import recipe

HIDDEN, FFN, HEADS = 4096, 16384, 32


class DecoderLayer(torch.nn.Module):
    """TE's decoder layer in plain PyTorch ([b, s, hidden] activations):
    x + proj(attn(ln1 x)), then + proj2(cross(ln_q h, enc)), then +
    fc2(gelu(fc1(ln2 h)))."""

    def __init__(self, linear):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(HIDDEN)
        self.qkv = linear(HIDDEN, 3 * HIDDEN)
        self.proj = linear(HIDDEN, HIDDEN)
        self.ln_q = torch.nn.LayerNorm(HIDDEN)
        self.query = linear(HIDDEN, HIDDEN)
        self.key_value = linear(HIDDEN, 2 * HIDDEN)
        self.proj2 = linear(HIDDEN, HIDDEN)
        self.ln2 = torch.nn.LayerNorm(HIDDEN)
        self.fc1 = linear(HIDDEN, FFN)
        self.fc2 = linear(FFN, HIDDEN)

    @staticmethod
    def heads(t):
        batch, seq = t.shape[:2]
        return t.view(batch, seq, HEADS, -1).transpose(1, 2)

    @staticmethod
    def merge(t):
        batch, _, seq, _ = t.shape
        return t.transpose(1, 2).reshape(batch, seq, -1)

    def forward(self, x, enc):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        attn = F.scaled_dot_product_attention(
            self.heads(q), self.heads(k), self.heads(v), is_causal=True)
        h = x + self.proj(self.merge(attn))
        q = self.query(self.ln_q(h))
        k, v = self.key_value(enc).chunk(2, dim=-1)
        cross = F.scaled_dot_product_attention(
            self.heads(q), self.heads(k), self.heads(v))
        h = h + self.proj2(self.merge(cross))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate="tanh"))


def flops(batch, seq, enc_seq):
    """Forward + backward FLOPs (3x the forward's): the GEMMs and both
    attentions (causal self-attention at half)."""
    tokens, enc_tokens = batch * seq, batch * enc_seq
    gemms = 2 * tokens * HIDDEN * (3 * HIDDEN + HIDDEN + HIDDEN + HIDDEN
                                   + 2 * FFN) + 2 * enc_tokens * HIDDEN * (
                                       2 * HIDDEN)
    attention = 4 * batch * seq * seq * HIDDEN / 2 + 4 * batch * seq * (
        enc_seq) * HIDDEN
    return 3 * (gemms + attention)


def tejit_step(fp8, x, enc, dy):
    layer = te.TransformerLayer(
        HIDDEN, FFN, HEADS, layer_type="decoder", hidden_dropout=0.0,
        attention_dropout=0.0, attn_input_format="bshd",
        params_dtype=torch.bfloat16)
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                       amax_history_len=16,
                                       amax_compute_algo="max")

    def step():
        with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
            y = layer(x, encoder_output=enc)
        y.backward(dy)
    return step


def torch_step(compiled, fp8, x, enc, dy):
    layer = DecoderLayer(Fp8Linear if fp8 else torch.nn.Linear).to(
        device="cuda", dtype=torch.bfloat16)
    forward = torch.compile(layer) if compiled else layer

    def step():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            y = forward(x, enc)
        y.backward(dy)
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--enc-seq", type=int, default=2048)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.seq, HIDDEN, device="cuda",
                    dtype=torch.bfloat16, requires_grad=True)
    enc = torch.randn(args.batch, args.enc_seq, HIDDEN, device="cuda",
                      dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    total = flops(args.batch, args.seq, args.enc_seq)
    print(f"{torch.cuda.get_device_name()}, decoder layer hidden {HIDDEN}, "
          f"FFN {FFN}, {HEADS} heads, {args.seq} tokens over "
          f"{args.enc_seq} encoder tokens, batch {args.batch}, forward + "
          f"backward, PyTorch {torch.__version__}")
    rows = [("tejit FP8 (DelayedScaling HYBRID)",
             lambda: tejit_step(True, x, enc, dy)),
            ("tejit bf16", lambda: tejit_step(False, x, enc, dy)),
            ("torch.compile FP8 (_scaled_mm)",
             lambda: torch_step(True, True, x, enc, dy)),
            ("torch.compile bf16", lambda: torch_step(True, False, x, enc,
                                                      dy)),
            ("PyTorch bf16 (SDPA flash)",
             lambda: torch_step(False, False, x, enc, dy))]
    results = {}
    for name, make in rows:
        step = make()
        timing = speedometer(step, warmup=5, iters=20)
        results[name] = timing["median_ms"]
        del step
        torch.cuda.empty_cache()
    best = results["tejit FP8 (DelayedScaling HYBRID)"]
    print("| step | ms | TFLOP/s | tejit FP8 speed-up |")
    print("|---|---|---|---|")
    for name, ms in results.items():
        print(f"| {name} | {ms:.2f} | {total / ms / 1e9:.0f} | "
              f"{ms / best:.2f}x |")


if __name__ == "__main__":
    main()
