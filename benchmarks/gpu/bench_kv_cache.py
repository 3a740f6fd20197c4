#!/usr/bin/env python3
"""Autoregressive decoding through a KV cache (inference_params): tokens/s
of a decode loop of one Llama-3-8B-style TransformerLayer (hidden 4096,
FFN 14336, 32 heads, 8 KV heads, RMSNorm, swiglu, rotary, no biases, bf16),
batch 8, cache 4096 positions, against the same layer composed in PyTorch
(the same weights; RMSNorm, the q/k/v/o and MLP GEMMs with F.linear,
rotary, the new keys/values written into a torch KV cache [b, S, g, d],
scaled_dot_product_attention (GQA) over the cached prefix), eager and
under torch.compile with a static cache, in the same process on the same
GPU.

Run on the GPU machine (after tools/scripts/pack-gpu.sh here, carry .gpu):
    source tools/scripts/gpu-env.sh; PYTHONPATH=$PWD/python \\
        python3 benchmarks/gpu/bench_kv_cache.py [--steps 128] [--layers N]
        [--profile N] [--fp8] [--paged 64] [--no-compile-peer]

--paged PAGE_SIZE adds tejit bf16 rows with paged caches
(InferenceParams(is_paged=True): pages of PAGE_SIZE rows, as many as the
non-paged caches hold; the same decode loop, eager and CUDA graph).
--fp8 adds tejit rows under fp8_autocast (DelayedScaling: FP8 GEMMs with
the weight casts kept, attention in bf16), after two training steps that
calibrate the FP8 state. --layers N decodes through a stack of N such layers (one cache each, as a
model's decoder does; per-step work that tejit shares between layers, such
as the rotary angles, is then paid once). --profile N also prints the
host time of N eager steps and cProfile's and torch.profiler's view of
them. --no-compile-peer skips the torch.compile rows (their first compile
takes 20-30 s).

Each context length: a prefill of 8 prompts of that length (bshd [8, s,
4096], untimed), then `steps` decode steps ([8, 1, 4096]: pre_step + the
layer per step; the host loop included, as a server runs it), timed with
CUDA events around the whole loop, median of 3 loops. tejit runs eager
and with the decode step captured in a CUDA graph (pre_step outside it,
replay per step); PyTorch runs eager (its cache slice grows every step, so
the step has no fixed shape to capture). Before timing, the first decode
step's outputs of tejit and PyTorch are compared (relative L2, printed).

The torch.compile rows (bf16 only; kv_cache_peers.py) are what users who
serve with torch.compile run (the "gpt-fast" recipe): the same layers and
weights over a static cache [b, S, g, d] written at each sequence's
position (a device tensor, advanced by the host loop after each step),
attention over all S rows with a mask hiding those past each sequence's
length, so the step has fixed shapes. The step is compiled with
mode="max-autotune-no-cudagraphs" and, as a second row, with
mode="reduce-overhead" (CUDA graphs inside torch.compile); the prefill is
eager. Their compile is timed apart (first calls, printed), and their first
decode step must match PyTorch eager's to a relative L2 of 2e-2.
"""
import argparse
import statistics
from collections import OrderedDict

import torch
import torch.nn.functional as F

import kv_cache_peers
import tejit.pytorch as te
from tejit.common import recipe

HIDDEN, FFN, HEADS, GROUPS, D = 4096, 14336, 32, 8, 128
BATCH, CACHE = 8, 4096
EPS = 1e-5
CONTEXTS = (512, 3072)
# (row, torch.compile mode) of the static-cache peer (kv_cache_peers)
PEER_MODES = (("torch.compile bf16 (static cache)",
               "max-autotune-no-cudagraphs"),
              ("torch.compile bf16 (static cache, reduce-overhead)",
               "reduce-overhead"))
# The peer's first decode step against TorchLayer's: bf16 rounding gives
# about 1e-2 (tejit's rows see 7-9e-3), a wrong mask or position far more.
PEER_TOLERANCE = 2e-2


def tejit_layer(number):
    return te.TransformerLayer(
        HIDDEN, FFN, HEADS, num_gqa_groups=GROUPS, hidden_dropout=0.0,
        attention_dropout=0.0, normalization="RMSNorm", activation="swiglu",
        bias=False, layernorm_epsilon=EPS, self_attn_mask_type="causal",
        attn_input_format="bshd", params_dtype=torch.bfloat16,
        layer_number=number).eval()


class Stack:
    """Layers applied in turn (a model's decoder stack, one KV cache per
    layer_number)."""

    def __init__(self, layers):
        self.layers = layers

    def __call__(self, x, **kwargs):
        for layer in self.layers:
            x = layer(x, **kwargs)
        return x

    def reset(self):
        """The PyTorch layers' caches emptied (tejit's: params.reset())."""
        for layer in self.layers:
            layer.length = 0


class TorchLayer:
    """The same layer in PyTorch with its own KV cache."""

    def __init__(self, layer, rope):
        p = {n: t.detach() for n, t in layer.named_parameters()}
        qkv = "self_attention.layernorm_qkv."
        self.norm1 = p[qkv + "layer_norm_weight"]
        self.wq, self.wk, self.wv = (p[qkv + f"{n}_weight"]
                                     for n in ("query", "key", "value"))
        self.wo = p["self_attention.proj.weight"]
        self.norm2 = p["layernorm_mlp.layer_norm_weight"]
        self.fc1 = p["layernorm_mlp.fc1_weight"]
        self.fc2 = p["layernorm_mlp.fc2_weight"]
        self.cos = torch.cos(rope).to(torch.bfloat16)  # [S, 1, 1, D]
        self.sin = torch.sin(rope).to(torch.bfloat16)
        shape = (BATCH, CACHE, GROUPS, D)
        self.k_cache = torch.zeros(shape, device="cuda", dtype=torch.bfloat16)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.length = 0

    @staticmethod
    def rms(x, w):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)
                ).to(x.dtype) * w

    @staticmethod
    def rotary(t, cos, sin):
        """TE's rotary (halves) on t [b, s, h, d] with the angles' cos and
        sin broadcast to it."""
        half = D // 2
        rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * cos + rotated * sin

    def qkv(self, x, cos, sin):
        """q [b, s, heads, D] and k [b, s, groups, D], rotated, and v of
        x [b, s, hidden]."""
        b, s, _ = x.shape
        h = self.rms(x, self.norm1)
        q = self.rotary(F.linear(h, self.wq).view(b, s, HEADS, D), cos, sin)
        k = self.rotary(F.linear(h, self.wk).view(b, s, GROUPS, D), cos,
                        sin)
        return q, k, F.linear(h, self.wv).view(b, s, GROUPS, D)

    def finish(self, x, attn):
        """The layer's output from its input x and attention's [b, s,
        heads * D]: projection, residual, MLP, residual."""
        x = x + F.linear(attn, self.wo)
        a, g = F.linear(self.rms(x, self.norm2), self.fc1).chunk(2, dim=-1)
        return x + F.linear(F.silu(a) * g, self.fc2)

    def __call__(self, x):
        """x [b, s, hidden]: s new tokens of every sequence."""
        b, s, _ = x.shape
        start, end = self.length, self.length + s
        # positions start.. : [1, s, 1, D]
        cos = self.cos[start:end].transpose(0, 1)
        sin = self.sin[start:end].transpose(0, 1)
        q, k, v = self.qkv(x, cos, sin)
        self.k_cache[:, start:end] = k
        self.v_cache[:, start:end] = v
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2), self.k_cache[:, :end].transpose(1, 2),
            self.v_cache[:, :end].transpose(1, 2), is_causal=s > 1,
            enable_gqa=True)
        self.length = end
        return self.finish(x, attn.transpose(1, 2).reshape(b, s, HEADS * D))


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return ((a - b).norm() / b.norm()).item()


def timed_loop(run_steps, repeats=3):
    """Median over `repeats` of run_steps()'s milliseconds (CUDA events;
    run_steps does its own untimed setup before calling mark())."""
    results = []
    for _ in range(repeats):
        events = []

        def mark():
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            events.append(event)
        run_steps(mark)
        events[-1].synchronize()
        results.append(events[0].elapsed_time(events[-1]))
    return statistics.median(results)


def profile_eager(layer, params, decode, step_x, rope, prefill, context,
                  steps, fp8_recipe=None):
    """Host milliseconds per eager decode step (the GPU never waited for:
    the loop only enqueues) and cProfile's top functions over `steps`
    steps (under fp8_autocast with `fp8_recipe` when given)."""
    import cProfile
    import pstats
    import time

    def loop():
        with torch.no_grad(), te.fp8_autocast(enabled=fp8_recipe is not None,
                                              fp8_recipe=fp8_recipe):
            for _ in range(steps):
                params.pre_step(decode)
                layer(step_x, inference_params=params, rotary_pos_emb=rope)

    print(f"  profile: tejit {'FP8' if fp8_recipe else 'bf16'} eager")
    for timed in (False, True):
        prefill(context, fp8_recipe)
        torch.cuda.synchronize()
        if timed:
            start = time.perf_counter()
            loop()
            host = (time.perf_counter() - start) * 1e3 / steps
            torch.cuda.synchronize()
            print(f"  tejit eager host time {host:.3f} ms/step "
                  f"(enqueue only)")
    prefill(context, fp8_recipe)
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    loop()
    profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    prefill(context, fp8_recipe)
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CUDA]) as kernels:
        loop()
        torch.cuda.synchronize()
    print(kernels.key_averages().table(sort_by="cuda_time_total",
                                       row_limit=25))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--layers", type=int, default=1,
                        help="decode through a stack of this many layers "
                        "(one KV cache each), as a model does")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile N eager tejit decode steps "
                        "(cProfile, host time) and print where the host "
                        "time goes")
    parser.add_argument("--fp8", action="store_true",
                        help="also run tejit under fp8_autocast "
                        "(DelayedScaling: FP8 GEMMs, weight casts kept)")
    parser.add_argument("--paged", type=int, default=0, metavar="PAGE_SIZE",
                        help="also run tejit bf16 with paged caches of "
                        "this page size (InferenceParams(is_paged=True), "
                        "as many pages as the non-paged caches' rows)")
    parser.add_argument("--no-compile-peer", action="store_true",
                        help="skip the torch.compile static-cache rows "
                        "(their first compile takes 20-30 s)")
    args = parser.parse_args()
    torch.manual_seed(0)
    layers = [tejit_layer(number + 1) for number in range(args.layers)]
    layer = Stack(layers)
    rope = te.attention.RotaryPositionEmbedding(D)(CACHE)
    reference = Stack([TorchLayer(one, rope) for one in layers])
    params = te.InferenceParams(BATCH, CACHE, GROUPS, D, torch.bfloat16,
                                qkv_format="bshd")
    paged = (te.InferenceParams(BATCH, CACHE, GROUPS, D, torch.bfloat16,
                                qkv_format="bshd", is_paged=True,
                                total_num_pages=BATCH * CACHE // args.paged,
                                page_size=args.paged)
             if args.paged else None)
    step_x = torch.randn(BATCH, 1, HIDDEN, device="cuda",
                         dtype=torch.bfloat16)
    decode = OrderedDict((i, 1) for i in range(BATCH))
    print(f"{torch.cuda.get_device_name()}: {args.layers} x "
          f"TransformerLayer {HIDDEN}/{FFN}/"
          f"{HEADS} heads/{GROUPS} KV heads, RMSNorm swiglu rotary bf16, "
          f"batch {BATCH}, cache {CACHE}, {args.steps} decode steps")

    def forward(model, x, fp8_recipe, cache=None, **kwargs):
        """`model` on x with the InferenceParams `cache` (default: the
        non-paged `params`)."""
        with torch.no_grad(), te.fp8_autocast(enabled=fp8_recipe is not None,
                                              fp8_recipe=fp8_recipe):
            return model(x, inference_params=cache or params,
                         rotary_pos_emb=rope, **kwargs)

    def prefill(context, fp8_recipe=None, peer=None, cache=None):
        """tejit's (InferenceParams `cache`, default `params`) and
        PyTorch's caches (and the static-cache `peer`'s, given one) filled
        with the same random prompts; the relative L2 of tejit's prefill
        output against PyTorch's."""
        cache = cache or params
        prompt = torch.randn(BATCH, context, HIDDEN, device="cuda",
                             dtype=torch.bfloat16)
        cache.reset()
        cache.pre_step(OrderedDict((i, context) for i in range(BATCH)))
        reference.reset()
        a = forward(layer, prompt, fp8_recipe, cache)
        with torch.no_grad():
            b = reference(prompt)
            if peer is not None:
                peer.stack.prefill(prompt)
        return rel_l2(a, b)

    def tejit_rows(label, fp8_recipe, context, cache=None):
        """(name, loop) of tejit eager and of its step in a CUDA graph
        (captured here, once per context and precision; FP8 captures reuse
        the weight casts the eager steps before made), with the
        InferenceParams `cache` (default `params`)."""
        cache = cache or params

        def eager(mark):
            prefill(context, fp8_recipe, cache=cache)
            mark()
            for _ in range(args.steps):
                cache.pre_step(decode)
                forward(layer, step_x, fp8_recipe, cache)
            mark()

        prefill(context, fp8_recipe, cache=cache)
        cache.pre_step(decode)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                forward(layer, step_x, fp8_recipe, cache)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward(layer, step_x, fp8_recipe, cache,
                    is_first_microbatch=False if fp8_recipe else None)

        def graphed(mark):
            prefill(context, fp8_recipe, cache=cache)
            mark()
            for _ in range(args.steps):
                cache.pre_step(decode)
                graph.replay()
            mark()
        return [(f"tejit {label} (eager)", eager),
                (f"tejit {label} (CUDA graph per step)", graphed)]

    def calibrate(fp8_recipe):
        """A served FP8 model's scales come from its training: two
        training steps of the stack on random prompts (no cache) give the
        FP8 state real amaxes before the inference rows use it."""
        x = torch.randn(BATCH, 512, HIDDEN, device="cuda",
                        dtype=torch.bfloat16, requires_grad=True)
        for one in layers:
            one.train()
        for _ in range(2):
            with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
                y = layer(x)
            y.float().square().mean().backward()
        for one in layers:
            one.eval()
            for parameter in one.parameters():
                parameter.grad = None

    def compile_peers():
        """(row, CompiledDecode) of each PEER_MODES mode that compiles,
        warmed up; a mode that fails is reported and left out."""
        peers = []
        for name, mode in PEER_MODES:
            peer = kv_cache_peers.CompiledDecode(reference.layers, mode)
            try:
                prefill(CONTEXTS[0], peer=peer)
                times = peer.warm_up(step_x)
            except Exception as error:  # noqa: BLE001 - reported, skipped
                print(f"{name}: torch.compile(mode={mode!r}) FAILED: "
                      f"{type(error).__name__}: {str(error)[:3000]}",
                      flush=True)
                continue
            later = ", ".join(f"{t * 1e3:.1f}" for t in times[1:])
            print(f"{name}: torch.compile(mode={mode!r}) first call "
                  f"(compile) {times[0]:.1f} s, next calls {later} ms",
                  flush=True)
            peers.append((name, peer))
        if kv_cache_peers.cudagraph_skips():
            print(f"  WARNING: inductor skipped CUDA graphs "
                  f"{kv_cache_peers.cudagraph_skips()} time(s) "
                  f"(TORCH_LOGS=perf_hints says why)")
        return peers

    def check_peer(name, peer, context):
        """The compiled peer's first decode step against PyTorch eager's
        on the same prompts and input; raises past PEER_TOLERANCE."""
        prefill(context, peer=peer)
        with torch.no_grad():
            b = reference(step_x)
            error = rel_l2(peer(step_x), b)
        print(f"context {context}: {name} vs PyTorch bf16 eager, relative "
              f"L2: first decode step {error:.2e}", flush=True)
        if error > PEER_TOLERANCE:
            raise RuntimeError(f"{name}: first decode step's relative L2 "
                               f"{error:.2e} > {PEER_TOLERANCE}")

    def peer_loop(peer, context):
        def run(mark):
            prefill(context, peer=peer)
            mark()
            with torch.no_grad():
                for _ in range(args.steps):
                    peer(step_x)
            mark()
        return run

    def paged_rows(context):
        """tejit bf16 with the paged caches: the first decode step against
        the non-paged one's on the same prompts (printed), then its rows."""
        torch.manual_seed(context)
        prefill(context)
        params.pre_step(decode)
        a = forward(layer, step_x, None)
        torch.manual_seed(context)
        prefill(context, cache=paged)
        paged.pre_step(decode)
        b = forward(layer, step_x, None, paged)
        print(f"context {context}: tejit bf16 paged (page size "
              f"{args.paged}) vs non-paged, relative L2: first decode step "
              f"{rel_l2(b, a):.2e}")
        return tejit_rows(f"bf16 paged (page size {args.paged})", None,
                          context, paged)

    peers = [] if args.no_compile_peer else compile_peers()
    precisions = [("bf16", None)]
    if args.fp8:
        precisions.append(("FP8", recipe.DelayedScaling()))
        calibrate(precisions[-1][1])
    for context in CONTEXTS:
        rows = []
        for label, fp8_recipe in precisions:
            error = prefill(context, fp8_recipe)
            params.pre_step(decode)
            a = forward(layer, step_x, fp8_recipe)
            with torch.no_grad():
                b = reference(step_x)
            print(f"context {context}: tejit {label} vs PyTorch bf16, "
                  f"relative L2: prefill {error:.2e}, first decode step "
                  f"{rel_l2(a, b):.2e}")
            rows += tejit_rows(label, fp8_recipe, context)
            if paged is not None and fp8_recipe is None:
                rows += paged_rows(context)
            if args.profile:
                profile_eager(layer, params, decode, step_x, rope, prefill,
                              context, args.profile, fp8_recipe)

        def torch_eager(mark):
            prefill(context)
            mark()
            with torch.no_grad():
                for _ in range(args.steps):
                    reference(step_x)
            mark()

        rows.append(("PyTorch bf16 SDPA + KV cache", torch_eager))
        for name, peer in peers:
            check_peer(name, peer, context)
            rows.append((name, peer_loop(peer, context)))
        width = max(len(name) for name, _ in rows)
        for name, loop in rows:
            loop(lambda: None)  # warm-up: compiles, fills caches
            ms = timed_loop(loop)
            print(f"  {name:{width}s} {ms / args.steps:7.3f} ms/step  "
                  f"{BATCH * args.steps / ms * 1e3:9.0f} tokens/s",
                  flush=True)


if __name__ == "__main__":
    main()
