"""GPU tests of autoregressive decoding through a KV cache
(tejit.pytorch.InferenceParams passed as inference_params to
DotProductAttention, MultiheadAttention and TransformerLayer;
docs/kv-cache-plan.md, python/tejit/pytorch/module/_kv_cache.py).

    PYTHONPATH=python python3 -m pytest -q tests/gpu/test_kv_cache.py
    (-k "not full_size" leaves out the full-size layer)

A decode loop (SCHEDULE): a prefill of three prompts of different
lengths, single-token steps, sequences finishing at different steps (the
later rows move up in the cache), new sequences joining with their own
prompt in a mixed step. Each step's output is compared with:
  * the same module run WITHOUT a cache on the full prefix of every live
    sequence (packed, thd; the last n_i rows of each sequence): relative
    L2 below 1.6e-2 in bf16, 0.125 in FP8 (the same FP8 scales in both:
    the loop runs under torch.no_grad(), which updates no FP8 state);
  * for DotProductAttention also a float32 softmax attention of the new
    queries over the cache's rows [0, L_i) (causal bottom-right, or all
    rows for a padding mask), relative L2 below 1.6e-2.
The cache rows: DotProductAttention's hold the given keys/values bit for
bit; MultiheadAttention's / TransformerLayer's the float32 composition's
keys (after rotary) and values within the bf16 bound; positions past the
longest sequence stay 0.
Also: bshd and sbhd decode inputs (a finished sequence's row becomes a
tail), a CUDA-graph captured decode step equal to the eager step bit for
bit (fixed input shape, sequences finishing and joining between
replays), and a full-size Llama-style layer (hidden 4096, 32 heads, 8 KV
heads, cache 2048, batch 8).

Paged caches (InferenceParams(is_paged=True), docs/paged-kv-cache.md;
-k paged selects them): DotProductAttention, MultiheadAttention and
TransformerLayer (bf16 and FP8) decode loops with paged caches against
the same loop and inputs with non-paged ones (PAGED_CONFIGS: bit-equal
where both take the decode kernels, within bf16 rounding on cuDNN), the
pages handed out in a shuffled order, finished sequences' pages reused
(checked), convert_paged_to_nonpaged equal to the non-paged caches after
every step; and a paged decode step captured in a CUDA graph, replayed
while the page table changes, equal to its eager twin bit for bit.

Failures name the module, the step (its step_dict) and each error.
Data: fresh random tokens every run from test_attention_layers.py's seed
(TEJIT_TEST_SEED=N repeats a run).
"""
import copy
import math
import os
import sys
from collections import OrderedDict

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import (  # noqa: E402
    hybrid, perturb, seed_per_test, torch)

import torch.nn.functional as F  # noqa: E402

import tejit.pytorch as te  # noqa: E402

from test_attention_layers import (  # noqa: E402
    BF16, L2_DTYPE, L2_FP8_OUTPUT, SEED, check_errors, norm_ref, rel_l2,
    rotary_ref, split_qkv)

L2_BF16 = L2_DTYPE[BF16]

# seq_id -> new tokens, per step; rows follow each step's order.
SCHEDULE = [
    [(0, 37), (1, 5), (2, 64)],            # prefill: three prompts
    [(0, 1), (1, 1), (2, 1)],
    [(0, 1), (2, 1)],                      # 1 finished: 2 moves up a row
    [(0, 1), (2, 1), (3, 20)],             # 3 joins with a 20-token prompt
    [(0, 1), (2, 1), (3, 1)],
    [(2, 1), (3, 1)],                      # 0 finished
    [(2, 1), (3, 1), (4, 3)],              # 4 joins
    [(2, 1), (3, 1), (4, 1)],
]
MAX_BATCH = 4
MAX_SEQUENCE = 128
MAX_CTX = 64


fresh_seed = seed_per_test(SEED)


def offsets(lengths):
    return torch.tensor([0] + list(lengths), device="cuda").cumsum(0).to(
        torch.int32)


def new_params(groups, kv_channels, max_batch=MAX_BATCH,
               max_sequence=MAX_SEQUENCE, max_ctx=MAX_CTX):
    return te.InferenceParams(max_batch, max_sequence, groups, kv_channels,
                              BF16, qkv_format="thd", max_ctx_len=max_ctx)


def last_rows(packed, step, lengths):
    """The last n_i rows of each sequence of `packed` (sequences of
    `lengths` back to back), in the step's order."""
    rows, end = [], 0
    for (_, n), length in zip(step.items(), lengths):
        end += length
        rows.append(packed[end - n:end])
    return torch.cat(rows)


def per_sequence_errors(got, want, step):
    errors, start = {}, 0
    for seq, n in step.items():
        errors[f"sequence {seq}"] = rel_l2(got[start:start + n],
                                           want[start:start + n])
        start += n
    return errors


def check_step(got, want, step, limit, what):
    """Overall and per-sequence relative L2 of one step's new rows."""
    errors = {"output": rel_l2(got, want)}
    errors.update(per_sequence_errors(got, want, step))
    check_errors(errors, dict.fromkeys(errors, limit), what)


def check_untouched_tail(params, longest, what):
    """Positions no sequence reached are still 0 in every cache."""
    for layer, caches in params.cache_manager.cache.items():
        for name, cache in zip(("key", "value"), caches):
            tail = cache[:, longest:]
            assert not tail.any(), (
                f"{what}: layer {layer}'s {name} cache has non-zero values "
                f"past position {longest} (no sequence reached there): "
                f"written out of place")


# --- DotProductAttention ------------------------------------------------------


def cache_attention_ref(q, k_cache, v_cache, cached, causal, scale):
    """float32 softmax attention of one sequence's new queries q [n, h,
    d] over its cache rows [0, cached + n) ([S, g, d] caches); causal
    aligned bottom-right: query j sees rows <= cached + j."""
    n, heads = q.shape[0], q.shape[1]
    total = cached + n
    k = k_cache[:total].float().repeat_interleave(heads // k_cache.shape[1],
                                                  dim=1)
    v = v_cache[:total].float().repeat_interleave(heads // v_cache.shape[1],
                                                  dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if causal:
        rows = torch.arange(total, device=q.device)[None, :]
        allowed = rows <= (cached + torch.arange(n, device=q.device))[:, None]
        scores = scores.masked_fill(~allowed[None], float("-inf"))
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)
    return out.reshape(n, -1)


def dpa_check_step(params, layer, step, q_new, got, causal, scale, what):
    """The float32 reference on the cache contents, and the cache rows
    against the keys/values given (bit for bit)."""
    k_cache, v_cache = params.cache_manager.cache[layer]
    refs, start = [], 0
    for row, (seq, n) in enumerate(step.items()):
        cached = params.sequences_pre_step[seq]
        refs.append(cache_attention_ref(q_new[start:start + n], k_cache[row],
                                        v_cache[row], cached, causal, scale))
        start += n
    check_step(got, torch.cat(refs), step, L2_BF16,
               f"{what}: against float32 attention on the cache")


@pytest.mark.parametrize("mask", ["padding_causal", "padding"])
def test_dot_product_attention_decode_loop(mask):
    """GQA (8 heads, 2 groups, d 64), thd new tokens, over SCHEDULE."""
    heads, groups, d = 8, 2, 64
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format="thd", attn_mask_type=mask,
                                 attention_dropout=0.0, layer_number=3)
    params = new_params(groups, d)
    history = {}
    longest = 0
    for index, pairs in enumerate(SCHEDULE):
        step = OrderedDict(pairs)
        what = f"DotProductAttention {mask}, step {index} {dict(step)}"
        history = {s: h for s, h in history.items() if s in step}
        params.pre_step(step)
        new = {seq: [torch.randn(n, c, d, device="cuda", dtype=BF16)
                     for c in (heads, groups, groups)]
               for seq, n in step.items()}
        for seq, tensors in new.items():
            old = history.get(seq, [t[:0] for t in tensors])
            history[seq] = [torch.cat([a, b]) for a, b in zip(old, tensors)]
        q, k, v = (torch.cat([new[s][i] for s in step]) for i in range(3))
        with torch.no_grad():
            got = dpa(q, k, v, inference_params=params)
            lengths = [history[s][0].shape[0] for s in step]
            longest = max(longest, *lengths)
            cu = offsets(lengths)
            full = [torch.cat([history[s][i] for s in step])
                    for i in range(3)]
            ref = dpa(*full, cu_seqlens_q=cu, cu_seqlens_kv=cu)
        assert tuple(got.shape) == (q.shape[0], heads * d), what
        check_step(got, last_rows(ref, step, lengths), step, L2_BF16,
                   f"{what}: against the full prefix without a cache")
        dpa_check_step(params, 3, step, q, got, "causal" in mask,
                       dpa.softmax_scale, what)
        k_cache, v_cache = params.cache_manager.cache[3]
        for row, seq in enumerate(step):
            for name, cache, given in (("key", k_cache, history[seq][1]),
                                       ("value", v_cache, history[seq][2])):
                length = given.shape[0]
                assert torch.equal(cache[row, :length], given), (
                    f"{what}: the {name} cache row {row} (sequence {seq}) "
                    f"does not hold its {length} tokens as given")
    check_untouched_tail(params, longest, f"DotProductAttention {mask}")


@pytest.mark.parametrize("fmt", ["bshd", "sbhd"])
def test_dot_product_attention_padded_layouts(fmt):
    """bshd [b, s, h, d] / sbhd [s, b, h, d] steps (every live sequence
    with s new tokens): a 16-token prefill, decode steps, one sequence
    finishing while the input keeps 3 rows (the third is then a tail);
    against a thd twin without a cache on the full prefixes."""
    heads, groups, d = 8, 4, 128
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format=fmt, attn_mask_type="causal",
                                 attention_dropout=0.0)
    twin = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                  qkv_format="thd",
                                  attn_mask_type="padding_causal",
                                  attention_dropout=0.0)
    params = te.InferenceParams(MAX_BATCH, MAX_SEQUENCE, groups, d, BF16,
                                qkv_format=fmt)
    schedule = [[(0, 16), (1, 16), (2, 16)], [(0, 1), (1, 1), (2, 1)],
                [(0, 1), (2, 1)], [(0, 1), (2, 1)]]
    history = {}
    for index, pairs in enumerate(schedule):
        step = OrderedDict(pairs)
        what = f"DotProductAttention {fmt}, step {index} {dict(step)}"
        history = {s: h for s, h in history.items() if s in step}
        params.pre_step(step)
        seq_len = next(iter(step.values()))
        rows = 3  # the input keeps its batch size
        new = [torch.randn(rows, seq_len, c, d, device="cuda", dtype=BF16)
               for c in (heads, groups, groups)]  # [b, s, ...]
        for row, seq in enumerate(step):
            old = history.get(seq, [t[0, :0] for t in new])
            history[seq] = [torch.cat([a, t[row]]) for a, t in zip(old, new)]
        inputs = new if fmt == "bshd" else [t.transpose(0, 1).contiguous()
                                            for t in new]
        with torch.no_grad():
            out = dpa(*inputs, inference_params=params)
            lengths = [history[s][0].shape[0] for s in step]
            cu = offsets(lengths)
            ref = twin(*[torch.cat([history[s][i] for s in step])
                         for i in range(3)], cu_seqlens_q=cu,
                       cu_seqlens_kv=cu)
        want_shape = ((rows, seq_len) if fmt == "bshd" else (seq_len, rows))
        assert tuple(out.shape) == (*want_shape, heads * d), what
        if fmt == "sbhd":
            out = out.transpose(0, 1)
        got = out[:len(step)].reshape(-1, heads * d)
        check_step(got, last_rows(ref, step, lengths), step, L2_BF16, what)
        tail = out[len(step):]
        assert not tail.any(), f"{what}: the tail row's output is not 0"


# --- MultiheadAttention / TransformerLayer -------------------------------------


def mha_keys_values(mha, x, p, freqs, prefix=""):
    """float32 keys (after rotary) and values [L, g, d] of one sequence x
    [L, hidden] through MultiheadAttention `mha` (parameters `p`, TE's
    names under `prefix`), positions 0 .. L - 1."""
    g, d = mha.num_gqa_groups, mha.kv_channels
    group_name = "layernorm_qkv." if mha.input_layernorm else "qkv."
    inp = x
    if mha.input_layernorm:
        inp = norm_ref(x, p[prefix + group_name + "layer_norm_weight"],
                       p.get(prefix + group_name + "layer_norm_bias"),
                       mha.normalization, mha.layernorm_epsilon,
                       mha.zero_centered_gamma)
    weights, biases = split_qkv(getattr(mha, group_name[:-1]), p,
                                prefix + group_name, mha.num_attention_heads,
                                g, d)
    k = F.linear(inp, weights[1], biases[1]).view(-1, 1, g, d)
    v = F.linear(inp, weights[2], biases[2]).view(-1, g, d)
    if freqs is not None:
        k = rotary_ref(k, freqs, "sbhd", mha.rotary_pos_interleaved)
    return k.view(-1, g, d), v


def fp8_context(fp8_recipe):
    return te.fp8_autocast(enabled=fp8_recipe is not None,
                           fp8_recipe=fp8_recipe)


def warm_fp8(module, schedule, hidden, call, fp8_recipe):
    """FP8 scales from two recorded forwards on the first step's prompts
    (nothing without a recipe); the loops (no_grad) then update nothing,
    so the steps they compare quantize alike."""
    if fp8_recipe is None:
        return
    first = OrderedDict(schedule[0])
    warm = torch.randn(sum(first.values()), hidden, device="cuda",
                       dtype=BF16)
    cu = offsets(first.values())
    for _ in range(2):
        with fp8_context(fp8_recipe):
            module(warm, cu_seqlens_q=cu, cu_seqlens_kv=cu, **call)


def block_decode_loop(module, params, hidden, rope, what, fp8_recipe=None,
                      limit=L2_BF16, schedule=SCHEDULE, check_cache=True):
    """SCHEDULE through `module` (thd, eval) with a cache, each step
    against the module on the live sequences' full prefixes without one."""
    attention = getattr(module, "self_attention", module)
    prefix = "self_attention." if attention is not module else ""
    call = {} if rope is None else {"rotary_pos_emb": rope}
    module.eval()
    history, longest = {}, 0

    def fp8():
        return fp8_context(fp8_recipe)
    warm_fp8(module, schedule, hidden, call, fp8_recipe)
    for index, pairs in enumerate(schedule):
        step = OrderedDict(pairs)
        where = f"{what}, step {index} {dict(step)}"
        history = {s: h for s, h in history.items() if s in step}
        params.pre_step(step)
        new = {seq: torch.randn(n, hidden, device="cuda", dtype=BF16)
               for seq, n in step.items()}
        for seq, x in new.items():
            history[seq] = torch.cat([history.get(seq, x[:0]), x])
        x = torch.cat(list(new.values()))
        lengths = [history[s].shape[0] for s in step]
        longest = max(longest, *lengths)
        cu = offsets(lengths)
        with torch.no_grad(), fp8():
            got = module(x, inference_params=params, **call)
            ref = module(torch.cat([history[s] for s in step]),
                         cu_seqlens_q=cu, cu_seqlens_kv=cu, **call)
        assert tuple(got.shape) == tuple(x.shape), where
        check_step(got, last_rows(ref, step, lengths), step, limit,
                   f"{where}: against the full prefix without a cache")
    if check_cache:
        p = {n: t.detach().float() for n, t in module.named_parameters()}
        layer = 1 if attention.layer_number is None else attention.layer_number
        k_cache, v_cache = params.cache_manager.cache[layer]
        errors = {}
        for row, seq in enumerate(step):
            length = history[seq].shape[0]
            k, v = mha_keys_values(attention, history[seq].float(), p, rope,
                                   prefix)
            errors[f"key row {row}"] = rel_l2(k_cache[row, :length], k)
            errors[f"value row {row}"] = rel_l2(v_cache[row, :length], v)
        check_errors(errors, dict.fromkeys(errors, limit),
                     f"{what}: cache rows after the loop against the float32 "
                     f"keys and values")
        check_untouched_tail(params, longest, what)


def small_mha():
    """The MultiheadAttention the decode loops run (hidden 256, 8 heads on
    2 KV groups, LayerNorm input, thd, layer 2), weights perturbed."""
    mha = te.MultiheadAttention(256, 8, num_gqa_groups=2,
                                input_layernorm=True, attention_dropout=0.0,
                                attn_mask_type="padding_causal",
                                qkv_format="thd", params_dtype=BF16,
                                layer_number=2)
    perturb(mha)
    return mha


@pytest.mark.parametrize("rotary", [False, True], ids=["plain", "rotary"])
def test_multihead_attention_decode_loop(rotary):
    mha = small_mha()
    rope = (te.attention.RotaryPositionEmbedding(mha.kv_channels)(
        MAX_SEQUENCE) if rotary else None)
    block_decode_loop(mha, new_params(2, mha.kv_channels), 256, rope,
                      f"MultiheadAttention {'rotary' if rotary else 'plain'}")


TL_CASES = {
    # kwargs, rotary, fp8
    "layernorm-gelu": (dict(hidden_size=256, ffn_hidden_size=1024,
                            num_attention_heads=4), False, False),
    "llama-rotary": (dict(hidden_size=256, ffn_hidden_size=512,
                          num_attention_heads=8, num_gqa_groups=2,
                          normalization="RMSNorm", activation="swiglu",
                          bias=False), True, False),
    "llama-rotary-fp8": (dict(hidden_size=256, ffn_hidden_size=512,
                              num_attention_heads=8, num_gqa_groups=2,
                              normalization="RMSNorm", activation="swiglu",
                              bias=False), True, True),
}


@pytest.mark.parametrize("case", list(TL_CASES))
def test_transformer_layer_decode_loop(case):
    kwargs, rotary, fp8 = TL_CASES[case]
    layer = te.TransformerLayer(hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd", params_dtype=BF16,
                                **kwargs)
    perturb(layer)
    rope = (te.attention.RotaryPositionEmbedding(layer.kv_channels)(
        MAX_SEQUENCE) if rotary else None)
    block_decode_loop(layer, new_params(layer.num_gqa_groups,
                                        layer.kv_channels),
                      layer.hidden_size, rope, f"TransformerLayer {case}",
                      fp8_recipe=hybrid() if fp8 else None,
                      limit=L2_FP8_OUTPUT if fp8 else L2_BF16,
                      check_cache=not fp8)


def test_multihead_attention_sbhd_decode_steps():
    """sbhd [s, b, hidden] steps with rotary against a thd twin (the same
    parameters) without a cache; the third input row becomes a tail when
    a sequence finishes."""
    kwargs = dict(num_gqa_groups=2, input_layernorm=True,
                  attention_dropout=0.0, params_dtype=BF16,
                  normalization="RMSNorm", bias=False)
    mha = te.MultiheadAttention(256, 8, attn_mask_type="causal",
                                qkv_format="sbhd", **kwargs)
    perturb(mha)
    twin = te.MultiheadAttention(256, 8, attn_mask_type="padding_causal",
                                 qkv_format="thd", **kwargs)
    twin.load_state_dict(mha.state_dict())
    mha.eval()
    twin.eval()
    rope = te.attention.RotaryPositionEmbedding(mha.kv_channels)(
        MAX_SEQUENCE)
    params = te.InferenceParams(MAX_BATCH, MAX_SEQUENCE, 2, mha.kv_channels,
                                BF16, qkv_format="sbhd")
    history = {}
    for index, pairs in enumerate([[(0, 24), (1, 24), (2, 24)],
                                   [(0, 1), (1, 1), (2, 1)],
                                   [(1, 1), (2, 1)], [(1, 1), (2, 1)]]):
        step = OrderedDict(pairs)
        what = f"MultiheadAttention sbhd, step {index} {dict(step)}"
        history = {s: h for s, h in history.items() if s in step}
        params.pre_step(step)
        seq_len = next(iter(step.values()))
        x = torch.randn(seq_len, 3, 256, device="cuda", dtype=BF16)
        for row, seq in enumerate(step):
            history[seq] = torch.cat([history.get(seq, x[:0, 0]),
                                      x[:, row]])
        lengths = [history[s].shape[0] for s in step]
        cu = offsets(lengths)
        with torch.no_grad():
            out = mha(x, inference_params=params, rotary_pos_emb=rope)
            ref = twin(torch.cat([history[s] for s in step]),
                       cu_seqlens_q=cu, cu_seqlens_kv=cu,
                       rotary_pos_emb=rope)
        assert tuple(out.shape) == tuple(x.shape), what
        got = out[:, :len(step)].transpose(0, 1).reshape(-1, 256)
        check_step(got, last_rows(ref, step, lengths), step, L2_BF16, what)


# --- CUDA graphs ----------------------------------------------------------------


def graph_twins():
    """Two equal small TransformerLayers (RMSNorm, SwiGLU, GQA, thd; eval)
    for an eager step and a graphed one, and their rotary table."""
    kwargs = dict(hidden_dropout=0.0, attention_dropout=0.0,
                  normalization="RMSNorm", activation="swiglu", bias=False,
                  params_dtype=BF16, self_attn_mask_type="padding_causal",
                  attn_input_format="thd")
    eager = te.TransformerLayer(256, 512, 8, num_gqa_groups=2, **kwargs)
    perturb(eager)
    graphed = copy.deepcopy(eager)
    eager.eval()
    graphed.eval()
    rope = te.attention.RotaryPositionEmbedding(eager.kv_channels)(
        MAX_SEQUENCE)
    return eager, graphed, rope


def capture_step(module, static_x, params, rope):
    """(graph, output) of one decode step of `module` on `static_x`
    captured with torch.cuda.graph after two warm-up calls on a side
    stream (the first compiles; both write the step's cache slots, which
    every replay rewrites)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            module(static_x, inference_params=params, rotary_pos_emb=rope)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = module(static_x, inference_params=params,
                          rotary_pos_emb=rope)
    return graph, static_y


def check_replay(graph, static_x, static_y, x, eager, params, rope, live,
                 what):
    """The eager twin's step on `x` against a replay of `graph` on it: the
    first `live` output rows equal bit for bit."""
    with torch.no_grad():
        want = eager(x, inference_params=params, rotary_pos_emb=rope)
    static_x.copy_(x)
    graph.replay()
    diff = (static_y[:live].float() - want[:live].float()).abs().max()
    assert torch.equal(static_y[:live], want[:live]), (
        f"{what}: the replay differs from the eager step (max abs "
        f"difference {diff.item():.3e})")


def test_transformer_layer_decode_step_in_a_cuda_graph():
    """One decode step of a fixed shape (4 packed tokens, 4 cache rows)
    captured with torch.cuda.graph, replayed for later steps (sequences
    finishing, one joining) against an eager twin with its own
    InferenceParams: outputs and caches equal bit for bit."""
    eager, graphed, rope = graph_twins()
    both = [(eager, new_params(2, 32)), (graphed, new_params(2, 32))]

    def step_both(step, x):
        outs = []
        for module, params in both:
            params.pre_step(step)
            with torch.no_grad():
                outs.append(module(x, inference_params=params,
                                   rotary_pos_emb=rope))
        return outs

    prefill = OrderedDict([(0, 20), (1, 7), (2, 30)])
    a, b = step_both(prefill, torch.randn(57, 256, device="cuda",
                                          dtype=BF16))
    assert torch.equal(a, b), "prefill: the twins differ"

    decode = [[(0, 1), (1, 1), (2, 1)], [(0, 1), (2, 1)],
              [(0, 1), (2, 1), (5, 1)], [(2, 1), (5, 1)],
              [(2, 1), (5, 1)]]
    static_x = torch.randn(4, 256, device="cuda", dtype=BF16)
    # The first decode step: pre_step, a warm-up (compiles; writes the
    # step's cache slots, which the replay rewrites), the capture.
    first = OrderedDict(decode[0])
    for _, params in both:
        params.pre_step(first)
    graph, static_y = capture_step(graphed, static_x, both[1][1], rope)
    for index, pairs in enumerate(decode):
        step = OrderedDict(pairs)
        what = f"CUDA-graph decode step {index} {dict(step)}"
        x = torch.randn(4, 256, device="cuda", dtype=BF16)
        if index > 0:
            for _, params in both:
                params.pre_step(step)
        check_replay(graph, static_x, static_y, x, eager, both[0][1], rope,
                     len(step), what)
    for layer in both[0][1].cache_manager.cache:
        for name, a, b in zip(("key", "value"),
                              both[0][1].cache_manager.cache[layer],
                              both[1][1].cache_manager.cache[layer]):
            assert torch.equal(a, b), (f"CUDA graph: the {name} caches of "
                                       f"eager and replayed steps differ")


# --- paged caches (docs/paged-kv-cache.md) --------------------------------------

# Prompts of at most 16 tokens, then decode steps crossing page boundaries
# (page_size 8), sequences finishing and joining.
SHORT_SCHEDULE = [
    [(0, 13), (1, 5), (2, 16)],
    [(0, 1), (1, 1), (2, 1)],
    [(0, 1), (2, 1)],                      # 1 finished: its page is free
    [(0, 1), (2, 1), (3, 9)],
    [(0, 1), (2, 1), (3, 1)],              # 0 reaches a third page
    [(2, 1), (3, 1)],                      # 0 finished
    [(2, 1), (3, 1), (4, 3)],
    [(2, 1), (3, 1), (4, 1)],
]

# The paged twin loops: the same module and inputs through non-paged and
# paged InferenceParams of one shape.
#  "cudnn": SCHEDULE, max_ctx_len 64 (every step compiles 64 queries a
#      sequence, which cuDNN runs: paged cache loads against plain
#      caches): outputs equal within bf16 rounding.
#  "decode": SHORT_SCHEDULE, max_ctx_len 16, caches of 256 rows (every
#      step takes the runtime's decode kernels, paged or not:
#      kDecodeMaxQueries, kDecodePreferredCacheRows): bit-equal outputs.
# total_pages is a little above the most pages a step holds, so freed
# pages are handed out again (checked).
PAGED_CONFIGS = {
    "cudnn": dict(schedule=SCHEDULE, max_sequence=128, max_ctx=64,
                  page_size=16, total_pages=11, exact=False),
    "decode": dict(schedule=SHORT_SCHEDULE, max_sequence=256, max_ctx=16,
                   page_size=8, total_pages=8, exact=True),
}


def shuffle_pages(params):
    """The free pool of a fresh paged InferenceParams in a random order:
    sequences get scattered, non-adjacent pages from the first step."""
    allocator = params.cache_manager.allocator
    order = torch.randperm(allocator.total_pages).tolist()
    allocator.free = type(allocator.free)(order)


def paged_twins(groups, kv_channels, config):
    """(non-paged, paged) InferenceParams of `config`'s shape."""
    shape = dict(max_batch=MAX_BATCH, max_sequence=config["max_sequence"],
                 max_ctx=config["max_ctx"])
    flat = new_params(groups, kv_channels, **shape)
    paged = te.InferenceParams(
        MAX_BATCH, config["max_sequence"], groups, kv_channels, BF16,
        qkv_format="thd", max_ctx_len=config["max_ctx"], is_paged=True,
        total_num_pages=config["total_pages"],
        page_size=config["page_size"])
    shuffle_pages(paged)
    return flat, paged


def assert_same(got, want, exact, what, fp8=False):
    """Paged against non-paged outputs: bit-equal where both take the
    decode kernels; else within bf16 rounding (cuDNN's paged and plain
    engines may sum in another order): a few units of bf16's last place
    of the output's scale, or with FP8 GEMMs (where a rounding flips an
    FP8 code of the projection's input) a relative L2 of 1e-2."""
    assert tuple(got.shape) == tuple(want.shape), what
    if exact:
        torch.testing.assert_close(
            got, want, rtol=0, atol=0,
            msg=lambda m: f"{what}: paged differs from non-paged: {m}")
    elif fp8:
        check_errors({"output": rel_l2(got, want)}, {"output": 1e-2},
                     f"{what}: paged against non-paged")
    else:
        scale = want.float().abs().max().item()
        torch.testing.assert_close(
            got, want, rtol=2 ** -6, atol=2 ** -7 * scale,
            msg=lambda m: f"{what}: paged against non-paged: {m}")


def check_converted(paged, flat, layer, what):
    """convert_paged_to_nonpaged(layer) holds the non-paged caches' rows
    of each live sequence bit for bit, zeros past them."""
    converted = paged.convert_paged_to_nonpaged(layer)
    for name, got, want in zip(("key", "value"), converted,
                               flat.cache_manager.cache[layer]):
        assert tuple(got.shape) == tuple(want.shape), (what, name)
        for row, length in enumerate(flat.sequences.values()):
            assert torch.equal(got[row, :length], want[row, :length]), (
                f"{what}: the paged {name} cache's row {row} (through the "
                f"page table) differs from the non-paged one")
            assert not got[row, length:].any(), (
                f"{what}: converted {name} row {row} is not 0 past its "
                f"{length} tokens")
        assert not got[len(flat.sequences):].any(), (
            f"{what}: converted {name} rows without a sequence are not 0")


class PageReuse:
    """Watches a paged InferenceParams over a loop: which pages finished
    sequences gave back, and whether any was handed out again."""

    def __init__(self, params):
        self.allocator = params.cache_manager.allocator
        self.freed, self.reused = set(), set()

    def before(self, step):
        for seq, pages in self.allocator.pages.items():
            if seq not in step:
                self.freed.update(pages)

    def after(self):
        held = {p for pages in self.allocator.pages.values() for p in pages}
        self.reused |= held & self.freed

    def check(self, what):
        assert self.reused, (f"{what}: no page of a finished sequence was "
                             f"handed out again (freed {sorted(self.freed)})")


def paged_twin_loop(config, groups, kv_channels, layer, inputs_of, forward,
                    what, fp8=False):
    """config's schedule through `forward(inputs, params)` with non-paged
    and paged caches (`inputs_of(step)`: the step's packed new tokens):
    outputs compared each step (assert_same), the paged caches through
    convert_paged_to_nonpaged against the non-paged ones."""
    flat, paged = paged_twins(groups, kv_channels, config)
    reuse = PageReuse(paged)
    for index, pairs in enumerate(config["schedule"]):
        step = OrderedDict(pairs)
        where = f"{what}, step {index} {dict(step)}"
        reuse.before(step)
        for params in (flat, paged):
            params.pre_step(step)
        reuse.after()
        inputs = inputs_of(step)
        with torch.no_grad():
            want = forward(inputs, flat)
            got = forward(inputs, paged)
        assert_same(got, want, config["exact"], where, fp8)
        check_converted(paged, flat, layer, where)
    reuse.check(what)


@pytest.mark.parametrize("config", list(PAGED_CONFIGS))
@pytest.mark.parametrize("mask", ["padding_causal", "padding"])
def test_dot_product_attention_paged_decode_loop(mask, config):
    """GQA (8 heads, 2 groups, d 64), thd new tokens: paged against
    non-paged caches."""
    heads, groups, d = 8, 2, 64
    dpa = te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                 qkv_format="thd", attn_mask_type=mask,
                                 attention_dropout=0.0, layer_number=3)

    def inputs_of(step):
        tokens = sum(step.values())
        return [torch.randn(tokens, c, d, device="cuda", dtype=BF16)
                for c in (heads, groups, groups)]

    paged_twin_loop(PAGED_CONFIGS[config], groups, d, 3, inputs_of,
                    lambda qkv, params: dpa(*qkv, inference_params=params),
                    f"DotProductAttention {mask} paged ({config})")


def block_inputs(hidden):
    def inputs_of(step):
        return torch.randn(sum(step.values()), hidden, device="cuda",
                           dtype=BF16)
    return inputs_of


@pytest.mark.parametrize("config", list(PAGED_CONFIGS))
def test_multihead_attention_paged_decode_loop(config):
    mha = small_mha()
    mha.eval()
    settings = PAGED_CONFIGS[config]
    rope = te.attention.RotaryPositionEmbedding(mha.kv_channels)(
        settings["max_sequence"])
    paged_twin_loop(
        settings, 2, mha.kv_channels, 2, block_inputs(256),
        lambda x, params: mha(x, inference_params=params,
                              rotary_pos_emb=rope),
        f"MultiheadAttention rotary paged ({config})")


@pytest.mark.parametrize("config", list(PAGED_CONFIGS))
@pytest.mark.parametrize("case", list(TL_CASES))
def test_transformer_layer_paged_decode_loop(case, config):
    kwargs, rotary, fp8 = TL_CASES[case]
    layer = te.TransformerLayer(hidden_dropout=0.0, attention_dropout=0.0,
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd", params_dtype=BF16,
                                **kwargs)
    perturb(layer)
    layer.eval()
    settings = PAGED_CONFIGS[config]
    call = ({"rotary_pos_emb": te.attention.RotaryPositionEmbedding(
        layer.kv_channels)(settings["max_sequence"])} if rotary else {})
    fp8_recipe = hybrid() if fp8 else None
    warm_fp8(layer, settings["schedule"], layer.hidden_size, call,
             fp8_recipe)

    def forward(x, params):
        with fp8_context(fp8_recipe):
            return layer(x, inference_params=params, **call)

    paged_twin_loop(settings, layer.num_gqa_groups, layer.kv_channels, 1,
                    block_inputs(layer.hidden_size), forward,
                    f"TransformerLayer {case} paged ({config})", fp8=fp8)


def test_transformer_layer_paged_decode_step_in_a_cuda_graph():
    """A decode step with paged caches (page_size 4: sequences take new
    pages between replays; finished sequences' pages go to the one that
    joins) captured once and replayed, against an eager twin with its own
    paged InferenceParams (the same page order): outputs and caches equal
    bit for bit. The replays read the page table pre_step rewrote in
    place. 17 pages: at most 16 are held at once, so the joining
    sequence takes a page the finished one gave back."""
    eager, graphed, rope = graph_twins()

    def paged_params(order):
        params = te.InferenceParams(MAX_BATCH, MAX_SEQUENCE, 2, 32, BF16,
                                    qkv_format="thd", max_ctx_len=MAX_CTX,
                                    is_paged=True, total_num_pages=17,
                                    page_size=4)
        allocator = params.cache_manager.allocator
        allocator.free = type(allocator.free)(order)
        return params

    order = torch.randperm(17).tolist()
    both = [(eager, paged_params(order)), (graphed, paged_params(order))]
    table = both[1][1].cache_manager.page_table
    address = table.data_ptr()

    def pre_step(step):
        for _, params in both:
            params.pre_step(step)

    prefill = OrderedDict([(0, 20), (1, 7), (2, 30)])
    pre_step(prefill)
    x = torch.randn(57, 256, device="cuda", dtype=BF16)
    with torch.no_grad():
        a, b = (module(x, inference_params=params, rotary_pos_emb=rope)
                for module, params in both)
    assert torch.equal(a, b), "paged prefill: the twins differ"

    decode = [[(0, 1), (1, 1), (2, 1)], [(0, 1), (2, 1)],
              [(0, 1), (2, 1), (5, 1)], [(2, 1), (5, 1)],
              [(2, 1), (5, 1)], [(2, 1), (5, 1)], [(2, 1), (5, 1)]]
    static_x = torch.randn(4, 256, device="cuda", dtype=BF16)
    pre_step(OrderedDict(decode[0]))
    graph, static_y = capture_step(graphed, static_x, both[1][1], rope)
    tables = set()
    reuse = PageReuse(both[1][1])
    for index, pairs in enumerate(decode):
        step = OrderedDict(pairs)
        what = f"paged CUDA-graph decode step {index} {dict(step)}"
        x = torch.randn(4, 256, device="cuda", dtype=BF16)
        if index > 0:
            reuse.before(step)
            pre_step(step)
            reuse.after()
        tables.add(str(table.tolist()))
        check_replay(graph, static_x, static_y, x, eager, both[0][1], rope,
                     len(step), what)
    assert table.data_ptr() == address, "the page table moved"
    assert len(tables) > 3, "the page table did not change between replays"
    reuse.check("paged CUDA graph")
    for name, a, b in zip(("key", "value"),
                          both[0][1].cache_manager.cache[1],
                          both[1][1].cache_manager.cache[1]):
        assert torch.equal(a, b), (f"paged CUDA graph: the {name} caches of "
                                   f"eager and replayed steps differ")


# --- full size ------------------------------------------------------------------


def test_transformer_layer_decode_full_size():
    """A Llama-3-8B-style layer (hidden 4096, FFN 14336, 32 heads, 8 KV
    heads, RMSNorm, swiglu, rotary, bf16), cache 2048 for batch 8: a
    prefill of eight prompts, then decode steps with two sequences
    finishing, against the full prefixes without a cache."""
    layer = te.TransformerLayer(4096, 14336, 32, num_gqa_groups=8,
                                hidden_dropout=0.0, attention_dropout=0.0,
                                normalization="RMSNorm", activation="swiglu",
                                bias=False, params_dtype=BF16,
                                self_attn_mask_type="padding_causal",
                                attn_input_format="thd")
    perturb(layer)
    prompts = [1000, 17, 512, 64, 1, 300, 777, 129]
    everyone = list(range(8))
    schedule = [list(zip(everyone, prompts))]
    schedule += [[(s, 1) for s in everyone]] * 3
    schedule += [[(s, 1) for s in everyone if s not in (1, 4)]] * 3
    params = te.InferenceParams(8, 2048, 8, 128, BF16, qkv_format="thd",
                                max_ctx_len=1024)
    rope = te.attention.RotaryPositionEmbedding(128)(2048)
    block_decode_loop(layer, params, 4096, rope,
                      "TransformerLayer full size", schedule=schedule,
                      check_cache=False)
    # The caches' rows: each live sequence's cached length is right where
    # the next token goes (the cache holds prompt + 6 decode tokens).
    k_cache = params.cache_manager.cache[1][0]
    for row, seq in enumerate(params.sequences):
        length = params.sequences[seq]
        assert k_cache[row, length - 1].any(), (
            f"full size: row {row} (sequence {seq}) has nothing at its "
            f"last position {length - 1}")
        assert math.isfinite(k_cache[row, :length].float().abs().max())
