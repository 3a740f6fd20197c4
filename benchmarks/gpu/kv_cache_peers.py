"""torch.compile peers of benchmarks/gpu/bench_kv_cache.py's decode loop.

bench_kv_cache's TorchLayer grows its KV cache slice every step, so its
step has no fixed shape and torch.compile cannot capture it. Users who
serve a model under torch.compile use a static cache instead (the
"gpt-fast" recipe, also transformers' StaticCache):

- each layer's cache is [b, S, g, d] and is written at each sequence's
  positions, held in a device tensor (index_put_), so a decode step has
  the same shapes and reads the same tensors every step;
- attention covers all S cache rows, a boolean mask hiding the rows past
  each token's own position;
- the host loop advances the positions after each step (outside the
  compiled step, as gpt-fast's `input_pos += 1`).

StaticCacheStack runs bench_kv_cache's TorchLayer objects' weights and
code (rms, q/k/v projections, rotary, output projection, MLP) around that
cache, so only the cache write and the attention differ from the eager
reference. CompiledDecode puts its step under torch.compile in one mode.
"""
import time

import torch
import torch.nn.functional as F


def grouped_attention(q, k_cache, v_cache, mask):
    """softmax(q k^T / sqrt(d)) v over all S rows of the caches.

    q [b, s, heads, d]; k_cache, v_cache [b, S, groups, d]; mask [b, s, S]
    (True: the row is attended). Returns [b, s, heads * d].

    SDPA's enable_gqa pairs query head h with KV head h // (heads /
    groups), as TorchLayer does; with the mask, torch 2.11 runs it in
    cuDNN's attention under torch.compile. (Folding the heads / groups
    query heads of a KV head into the query length instead, [b, groups,
    rep * s, d] against the caches, also runs in cuDNN, but the whole step
    was 0.05-0.16 ms slower on an H200.)
    """
    b, s, heads, d = q.shape
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2),
        attn_mask=mask.unsqueeze(1), enable_gqa=True)
    return out.transpose(1, 2).reshape(b, s, heads * d)


class StaticCacheLayer:
    """One reference layer (bench_kv_cache.TorchLayer: its weights and
    code) with its own static KV cache."""

    def __init__(self, reference):
        self.reference = reference
        self.k_cache = torch.zeros_like(reference.k_cache)
        self.v_cache = torch.zeros_like(reference.v_cache)
        # [S, D] copies: the rows are gathered per position (a copy, not a
        # view, so torch.compile sees the tensor that is marked static).
        self.cos = reference.cos.flatten(1).clone()
        self.sin = reference.sin.flatten(1).clone()

    def tensors(self):
        """Every tensor the step reads or writes (their addresses never
        change)."""
        ref = self.reference
        return [self.k_cache, self.v_cache, self.cos, self.sin, ref.norm1,
                ref.wq, ref.wk, ref.wv, ref.wo, ref.norm2, ref.fc1, ref.fc2]

    def __call__(self, x, rows, cols, mask):
        """x [b, s, hidden]: the tokens at positions cols [b, s] of
        sequences rows [b, 1]; mask [b, s, S] as grouped_attention's."""
        ref = self.reference
        cos = self.cos[cols].unsqueeze(2)  # [b, s, 1, D]
        sin = self.sin[cols].unsqueeze(2)
        q, k, v = ref.qkv(x, cos, sin)
        self.k_cache[rows, cols] = k
        self.v_cache[rows, cols] = v
        return ref.finish(x, grouped_attention(q, self.k_cache, self.v_cache,
                                               mask))


class StaticCacheStack:
    """The reference layers in turn over static caches, with each
    sequence's length (the position of its next token) on the device."""

    def __init__(self, references):
        self.layers = [StaticCacheLayer(one) for one in references]
        batch, self.cache = references[0].k_cache.shape[:2]
        self.positions = torch.zeros(batch, dtype=torch.long, device="cuda")
        # Under CUDA graphs (reduce-overhead), an input not marked static is
        # copied into the graph's own buffer before every replay, and one
        # that the step mutates (the caches) disables the graph. These are
        # plain tensors, not nn.Module parameters, so they are marked here
        # (as transformers' StaticCache marks its caches).
        for layer in self.layers:
            for tensor in layer.tensors():
                torch._dynamo.mark_static_address(tensor)
        torch._dynamo.mark_static_address(self.positions)

    def step(self, x):
        """x [b, s, hidden]: s new tokens of every sequence, at its
        positions; returns the stack's output (positions not advanced)."""
        b, s, _ = x.shape
        rows = torch.arange(b, device=x.device)[:, None]
        cols = self.positions[:, None] + torch.arange(s, device=x.device)
        # Causal over the cache: token i sees rows 0..its own position.
        mask = (torch.arange(self.cache, device=x.device)
                <= cols[:, :, None])
        for layer in self.layers:
            x = layer(x, rows, cols, mask)
        return x

    def advance(self, tokens=1):
        self.positions += tokens

    def prefill(self, prompt):
        """The caches filled with prompt [b, s, hidden] (eager)."""
        self.positions.zero_()
        out = self.step(prompt)
        self.advance(prompt.shape[1])
        return out


class CompiledDecode:
    """A StaticCacheStack whose decode step runs under
    torch.compile(mode=mode); calling it runs one step and advances the
    positions (the host loop a server runs)."""

    def __init__(self, references, mode):
        self.stack = StaticCacheStack(references)
        self.graphs = mode == "reduce-overhead"
        # fullgraph: a graph break would split the step (and its CUDA
        # graph) and measure something else than the recipe.
        self.compiled = torch.compile(self.stack.step, mode=mode,
                                      fullgraph=True)

    def __call__(self, x):
        if self.graphs:
            # A new step: CUDA graph trees may reuse the last step's
            # output memory (what the torch.compile docs ask of a loop).
            torch.compiler.cudagraph_mark_step_begin()
        out = self.compiled(x)
        self.stack.advance()
        return out

    def warm_up(self, x, calls=3):
        """Seconds of each of the first `calls` steps (after a prefill):
        the first compiles (and under max-autotune benchmarks kernel
        choices); reduce-overhead records its CUDA graph in a later one."""
        times = []
        with torch.no_grad():
            for _ in range(calls):
                start = time.perf_counter()
                self(x)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        return times


def cudagraph_skips():
    """How many times inductor fell back from CUDA graphs (the reasons are
    logged under TORCH_LOGS=perf_hints)."""
    from torch._dynamo.utils import counters
    return counters["inductor"]["cudagraph_skips"]
