#!/usr/bin/env python3
"""The headline benchmark: one training step of the seed's transformer
layer, tejit against PyTorch, on one GPU, in one process.

    python3 benchmarks/gpu/bench_transformer.py [--model seed|llama|parallel]
        [--inference] [--batch 4 8] [--small] [--only ROW ...] [--all]
        [--iters N] [--warmup N] [--profile] [--json OUT]
    (benchmarks/gpu/run_transformer.sh sets up the library path, then
    runs this)

The layer: hidden 4096, FFN 16384, 32 heads, seq 2048, batch 4 and 8
(--small: 1024 / 4096 / 16 heads / seq 512 / batch 2), dropout 0.1 on the
attention probabilities and the hidden states. One step is the forward,
then the backward of a fixed output gradient: x = torch.rand(seq, batch,
hidden) requiring grad, dy = torch.rand like it (the seed peers' inputs).

--model llama times a Llama-3-8B-style layer instead (hidden 4096, FFN
14336, 32 heads in 8 GQA groups, seq 4096, batch 2 and 4; --small: 1024 /
2816 / 16 heads in 4 groups / seq 512 / batch 2): tejit's
TransformerLayer(normalization="RMSNorm", activation="swiglu", bias=False,
num_gqa_groups, causal) with a RotaryPositionEmbedding table, against
transformer_peers.LlamaLayer (causal SDPA with enable_gqa, rotary in
PyTorch) in the same forms as below; the rows marked seed-only (causal
twin, plain fp16 layer, graphs, checkpointing, cuDNN SDPA) are left out.
The issue's goals are stated for the seed layer; for this one the speed-ups
are reported without a goal.

--model parallel times the seed layer as TE's parallel block (GPT-J's,
PaLM's: TransformerLayer(parallel_attention_mlp=True), y = x +
dropout(attention(ln1 x) + mlp(ln2 x))) at the seed's sizes, against the
seed peers built the same way (transformer_peers.BasicTransformerLayer(
parallel=True)); seed-only rows left out, no goals.

--inference times serving instead of training: every model in eval mode
(no dropout), the forward alone under torch.no_grad() (tejit compiles its
inference program: no saved activations, no backward casts), the rows that
only train (graphs, checkpointing) left out, no goals.

Rows (--only picks some, by key; --all adds the ones marked extra):
- tejit.pytorch.TransformerLayer(hidden, ffn, heads,
  params_dtype=torch.bfloat16) under fp8_autocast(DelayedScaling(HYBRID,
  amax_history_len=16, amax_compute_algo="max")), self_attn_mask_type
  "no_mask" (like-for-like with the peers, which use no mask) and "causal"
  (TE's default, what TE's quickstart times: it does about half the
  attention work); tejit bf16 (no fp8_autocast, no_mask) for reference.
- PyTorch peers (transformer_peers.py): the seed's plain layer in fp16
  with unfused attention (bmm / softmax / bmm); bf16 with SDPA (flash);
  torch.compile bf16 + SDPA; torch.compile FP8 (torch._scaled_mm,
  tensorwise current scaling) + SDPA; eager FP8 + SDPA; extra: cuDNN SDPA
  instead of flash.
- With CUDA graphs: tejit FP8 through tejit.pytorch.make_graphed_callables
  (TE's API; the forward and the backward each replay as one graph), and
  torch.compile FP8 with mode="reduce-overhead" (its CUDA graphs). The
  goals are stated against the rows without graphs, as before.

Per row: ms per step (CUDA events: warm-up, then the mean over the timed
steps as the seed's speedometer computes it, and the median of the
per-step times), model TFLOP/s (transformer_peers.layer_flops, the no-mask
count for every row), peak torch.cuda.max_memory_allocated, and the device
memory the row took as a whole (torch.cuda.mem_get_info before and after:
tejit allocates its scratch arena, FP8 state and cuBLASLt workspace
outside PyTorch's allocator, so max_memory_allocated alone undercounts
it). Each row builds its model fresh and frees it before the next; a row
that fails prints FAILED and the others still run. The first step (tejit's
JIT compile, torch.compile's compile) is timed apart, before the warm-up.

Prints a markdown table per batch size, the speed-up of tejit FP8 over
every row, and the goals: tejit FP8 (no_mask) >= 1.35x torch.compile FP8
and >= 2.5x the plain PyTorch layer. --json writes every number with the
GPU, driver, versions, date and command line. --profile adds a
torch.profiler split of the tejit FP8 step's GPU time (after every row is
timed: CUPTI may slow later launches).
"""
import argparse
import collections
import contextlib
import dataclasses
import datetime
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import transformer_peers as peers  # noqa: E402
from gemm_tuning_env import gemm_tuning_file  # noqa: E402

# The seed peers run with TF32 allowed; it changes nothing for bf16/fp16
# GEMMs, but keeps the settings identical.
torch.backends.cuda.matmul.allow_tf32 = True

# --- what is measured ----------------------------------------------------------

SIZES = {
    "full": {"hidden": 4096, "ffn": 16384, "heads": 32, "seq": 2048,
             "batches": [4, 8]},
    "small": {"hidden": 1024, "ffn": 4096, "heads": 16, "seq": 512,
              "batches": [2]},
}
# --model llama: a Llama-3-8B-style layer (RMSNorm, GQA with 8 groups,
# rotary embeddings, causal attention, SwiGLU, no biases, no dropout) at
# seq 4096; the peers are transformer_peers.LlamaLayer.
LLAMA_SIZES = {
    "full": {"hidden": 4096, "ffn": 14336, "heads": 32, "gqa_groups": 8,
             "seq": 4096, "batches": [2, 4]},
    "small": {"hidden": 1024, "ffn": 2816, "heads": 16, "gqa_groups": 4,
              "seq": 512, "batches": [2]},
}
# --model parallel: the seed layer as TE's parallel block.
PARALLEL_SIZES = {name: dict(size, parallel=True)
                  for name, size in SIZES.items()}
LLAMA_ROTARY_BASE = 500000.0
DROPOUT = 0.1
GOAL_VS_COMPILE_FP8 = 1.35
GOAL_VS_PLAIN = 2.5
GIB = 1 << 30
# Device memory not given back after a row's cleanup, beyond this, is
# reported (a leak, or memory a library keeps for the process).
RESIDUAL_WARN_BYTES = 256 << 20
# Profiled steps are separated by a host sleep; the idle gaps it leaves on
# the GPU timeline cut the trace into steps.
PROFILE_GAP_S = 0.01
PROFILE_TOP_KERNELS = 15


@dataclasses.dataclass(frozen=True)
class Row:
    key: str
    label: str
    tejit: bool
    fp8: bool
    mask: str = "no_mask"          # tejit rows
    dtype: torch.dtype = torch.bfloat16
    attention: str = "sdpa"        # peers: "unfused" or "sdpa"
    sdpa: str = None               # peers: SDPA backend
    compiled: bool = False
    # CUDA graphs: tejit.pytorch.make_graphed_callables for tejit rows,
    # torch.compile(mode="reduce-overhead") for compiled peers.
    graphed: bool = False
    # tejit rows: the layer under tejit.pytorch.checkpoint (activations
    # recomputed in the backward).
    checkpointed: bool = False
    extra: bool = False            # only with --all or --only
    # Rows of the seed layer only (not run with --model llama).
    seed_only: bool = False
    # Rows that time a training step only (not run with --inference).
    training_only: bool = False
    # tejit rows: programs created with TEJIT_GEMM_TUNING=--gemm-tuning
    # (measured cuBLASLt algorithms); run only when that file is given.
    gemm_tuning: bool = False


ROWS = [
    Row("tejit-fp8", "tejit FP8 (no_mask)", tejit=True, fp8=True),
    Row("tejit-fp8-causal",
        "tejit FP8 (causal: about half the attention work)",
        tejit=True, fp8=True, mask="causal", seed_only=True),
    Row("tejit-bf16", "tejit bf16 (no_mask)", tejit=True, fp8=False),
    Row("tejit-fp8-tuned", "tejit FP8 (no_mask), tuned GEMMs "
        "(TEJIT_GEMM_TUNING)", tejit=True, fp8=True, gemm_tuning=True),
    Row("torch-fp16-unfused", "PyTorch fp16, unfused attention (seed layer)",
        tejit=False, fp8=False, dtype=torch.float16, attention="unfused",
        seed_only=True),
    Row("torch-bf16-sdpa", "PyTorch bf16 + SDPA flash", tejit=False,
        fp8=False, sdpa="flash"),
    Row("compile-bf16-sdpa", "torch.compile bf16 + SDPA flash", tejit=False,
        fp8=False, sdpa="flash", compiled=True),
    Row("compile-fp8-sdpa", "torch.compile FP8 (_scaled_mm) + SDPA flash",
        tejit=False, fp8=True, sdpa="flash", compiled=True),
    Row("torch-fp8-sdpa", "PyTorch FP8 (_scaled_mm) + SDPA flash",
        tejit=False, fp8=True, sdpa="flash"),
    Row("tejit-fp8-graph", "tejit FP8 (no_mask), CUDA graph "
        "(make_graphed_callables)", tejit=True, fp8=True, graphed=True,
        seed_only=True, training_only=True),
    Row("compile-fp8-sdpa-graph", "torch.compile FP8 (_scaled_mm) + SDPA "
        "flash, CUDA graphs (reduce-overhead)", tejit=False, fp8=True,
        sdpa="flash", compiled=True, graphed=True, seed_only=True),
    Row("tejit-fp8-checkpoint", "tejit FP8 (no_mask), activation "
        "checkpointing (te.checkpoint)", tejit=True, fp8=True,
        checkpointed=True, extra=True, seed_only=True, training_only=True),
    Row("torch-bf16-cudnn", "PyTorch bf16 + SDPA cuDNN", tejit=False,
        fp8=False, sdpa="cudnn", extra=True, seed_only=True),
    Row("compile-fp8-cudnn", "torch.compile FP8 (_scaled_mm) + SDPA cuDNN",
        tejit=False, fp8=True, sdpa="cudnn", compiled=True, extra=True,
        seed_only=True),
]
ROW_BY_KEY = {row.key: row for row in ROWS}
TEJIT_FP8 = "tejit-fp8"
TEJIT_FP8_TUNED = "tejit-fp8-tuned"
TEJIT_FP8_CAUSAL = "tejit-fp8-causal"
COMPILE_FP8 = "compile-fp8-sdpa"
PLAIN = "torch-fp16-unfused"


# --- timing and memory ---------------------------------------------------------


def speedometer(step, warmup, iters):
    """`warmup` untimed steps, then `iters` steps with a CUDA event before
    the first and after each: the mean is the first-to-last time over
    `iters` (the seed speedometer's figure, one event pair around the
    loop), the per-step times are the gaps between consecutive events.
    Events are read only at the end, so the GPU never waits on the host."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    host_start = time.perf_counter()
    for event in events[1:]:
        step()
        event.record()
    # The host's time to issue the steps: close to the GPU's time per step,
    # the loop is host-bound (the GPU waits for work).
    host_ms = (time.perf_counter() - host_start) * 1e3 / iters
    torch.cuda.synchronize()
    per_step = [a.elapsed_time(b) for a, b in zip(events, events[1:])]
    return {"mean_ms": events[0].elapsed_time(events[-1]) / iters,
            "host_issue_ms": host_ms,
            "median_ms": statistics.median(per_step),
            "min_ms": min(per_step), "max_ms": max(per_step),
            "stdev_ms": statistics.stdev(per_step) if iters > 1 else 0.0,
            "warmup": warmup, "iters": iters}


def release_memory():
    """Frees what nothing references any more: Python cycles (a module's
    programs close when it is collected), torch.compile's graphs, the
    caching allocator's unused blocks; then resets the peak counter."""
    reset_dynamo()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def reset_dynamo():
    if "torch._dynamo" not in sys.modules:
        return
    try:
        torch._dynamo.reset()
    except Exception as error:  # noqa: BLE001 - cleanup only
        print(f"  (torch._dynamo.reset failed: {error})", flush=True)


def memory_mark():
    torch.cuda.synchronize()
    return {"allocated": torch.cuda.memory_allocated(),
            "reserved": torch.cuda.memory_reserved(),
            "free": torch.cuda.mem_get_info()[0]}


def memory_since(mark):
    """A row's memory, measured while its model and tensors are alive,
    after its timed steps: the peak of torch's allocations over the row;
    the drop in the device's free memory (everything the row holds: torch's
    cached blocks, tejit's own arena/state/workspace, loaded kernel
    modules); and the part of that drop outside torch's allocator (drop
    minus the growth of torch's reserved memory, which never shrinks
    without empty_cache, so it is the row's peak reservation)."""
    now = memory_mark()
    used = mark["free"] - now["free"]
    reserved = now["reserved"] - mark["reserved"]
    return {"peak_allocated_bytes": torch.cuda.max_memory_allocated()
            - mark["allocated"],
            "torch_reserved_bytes": reserved,
            "device_used_bytes": used,
            "outside_torch_bytes": used - reserved}


# --- the rows --------------------------------------------------------------------


def recipe_for_tejit():
    from tejit.common import recipe
    return recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                 amax_history_len=16,
                                 amax_compute_algo="max")


def is_llama(size):
    return "gqa_groups" in size


def is_seed(size):
    """The seed layer itself (not --model llama or parallel): the goals'."""
    return not is_llama(size) and not size.get("parallel")


def row_label(row, size):
    """The row's label; the Llama layer's tejit rows run causal."""
    if is_llama(size) and row.tejit:
        return row.label.replace("(no_mask)", "(causal)")
    return row.label


def build_tejit(row, size):
    """(model, the context each forward runs in, the forward's keyword
    arguments)."""
    import tejit.pytorch as te
    if is_llama(size):
        model = te.TransformerLayer(
            size["hidden"], size["ffn"], size["heads"],
            num_gqa_groups=size["gqa_groups"], hidden_dropout=0.0,
            attention_dropout=0.0, self_attn_mask_type="causal",
            normalization="RMSNorm", activation="swiglu", bias=False,
            params_dtype=torch.bfloat16)
        rotary = te.attention.RotaryPositionEmbedding(
            model.kv_channels, rotary_base=LLAMA_ROTARY_BASE)(size["seq"])
        kwargs = {"rotary_pos_emb": rotary}
    else:
        model = te.TransformerLayer(
            size["hidden"], size["ffn"], size["heads"],
            hidden_dropout=DROPOUT, attention_dropout=DROPOUT,
            self_attn_mask_type=row.mask, params_dtype=torch.bfloat16,
            parallel_attention_mlp=size.get("parallel", False))
        kwargs = {}
    if any(not p.is_cuda for p in model.parameters()):
        model = model.cuda()
    model.train()
    if row.fp8:
        fp8_recipe = recipe_for_tejit()
        return model, lambda: te.fp8_autocast(
            enabled=True, fp8_recipe=fp8_recipe), kwargs
    return model, contextlib.nullcontext, kwargs


def build_peer(row, size):
    if is_llama(size):
        model = peers.make_llama_layer(
            size["hidden"], size["ffn"], size["heads"], size["gqa_groups"],
            size["seq"], fp8=row.fp8, dtype=row.dtype)
    else:
        model = peers.make_layer(size["hidden"], size["ffn"], size["heads"],
                                 attention=row.attention, fp8=row.fp8,
                                 dtype=row.dtype, dropout=DROPOUT,
                                 parallel=size.get("parallel", False))
    return model, contextlib.nullcontext, {}


def layer_flops(size, batch):
    if is_llama(size):
        return peers.llama_flops(size["hidden"], size["ffn"], size["heads"],
                                 size["gqa_groups"], size["seq"], batch)
    return peers.layer_flops(size["hidden"], size["ffn"], size["heads"],
                             size["seq"], batch)


def make_step(row, size, batch, args):
    """(step, what it keeps alive). A step: forward (in the row's forward
    context: fp8_autocast for tejit FP8), backward of dy; gradients set to
    None first (a training loop's zero_grad), unless --keep-grads (the seed
    speedometer accumulates them). With --inference: the model in eval
    mode, the forward alone under torch.no_grad()."""
    torch.manual_seed(1234)
    model, forward_context, forward_kwargs = (
        build_tejit if row.tejit else build_peer)(row, size)
    if args.inference:
        model.eval()
    shape = (size["seq"], batch, size["hidden"])
    x = torch.rand(shape, device="cuda", dtype=row.dtype,
                   requires_grad=not args.inference)
    dy = torch.rand(shape, device="cuda", dtype=row.dtype)
    mode = "reduce-overhead" if row.graphed else args.compile_mode
    fn = torch.compile(model, mode=mode) if row.compiled else model
    if forward_kwargs:
        fn = functools.partial(fn, **forward_kwargs)
    params = list(model.parameters())
    backend = row.sdpa if row.sdpa else None
    if row.tejit and row.checkpointed:
        import tejit.pytorch as te
        fn = functools.partial(te.checkpoint, model)
    if row.tejit and row.graphed:
        # Compiles, warms up and captures here: the row's first step is a
        # replay.
        import tejit.pytorch as te
        fn = te.make_graphed_callables(model, (x,), fp8_enabled=row.fp8,
                                       fp8_recipe=recipe_for_tejit())

    def forward():
        with torch.no_grad(), peers.sdpa_backend(backend), forward_context():
            return fn(x)

    def step():
        if not args.keep_grads:
            x.grad = None
            for p in params:
                p.grad = None
        # The SDPA backend is chosen when the forward runs (or is traced);
        # it holds over the backward too, harmlessly.
        with peers.sdpa_backend(backend), forward_context():
            y = fn(x)
        if isinstance(y, (tuple, list)):
            y = y[0]
        y.backward(dy)

    return forward if args.inference else step, (model, fn, x, dy, params)


def run_row(row, size, batch, args, flops):
    result = {"key": row.key, "label": row_label(row, size), "batch": batch}
    mark = memory_mark()
    with gemm_tuning_file(args.gemm_tuning if row.gemm_tuning else None):
        step, keep = make_step(row, size, batch, args)
        compiles = tejit_compiles()
        start = time.perf_counter()
        step()  # tejit's JIT compile / torch.compile's, out of the warm-up
        torch.cuda.synchronize()
    result["first_step_s"] = time.perf_counter() - start
    after_first = tejit_compiles()
    result["timing"] = speedometer(step, args.warmup, args.iters)
    if row.tejit:
        # Every program must have been compiled by the first step: a
        # compile inside the warm-up or the timed steps would be timed.
        later = tejit_compiles() - after_first
        result["tejit_compiles"] = {"first_step": after_first - compiles,
                                    "after_first_step": later}
        if later:
            print(f"  warning: {row.label}: tejit compiled {later} "
                  f"program(s) after the first step", flush=True)
    result["memory"] = memory_since(mark)
    result["model_tflops"] = flops["total"] / (
        result["timing"]["mean_ms"] * 1e-3) / 1e12
    del step, keep
    release_memory()
    result["memory"]["not_returned_bytes"] = mark["free"] - memory_mark()[
        "free"]
    return result


def tejit_compiles():
    """Programs tejit.pytorch has compiled in this process (0 before it is
    imported)."""
    module = sys.modules.get("tejit.pytorch")
    return module.compile_count() if module else 0


def guarded(row, batch, fn, *fn_args):
    """fn(*fn_args), or the record of its failure: one broken row must not
    stop the others."""
    try:
        return fn(*fn_args)
    except Exception as error:  # noqa: BLE001 - reported, not hidden
        message = f"{type(error).__name__}: {error}"
        print(f"  {row.label}: FAILED: {message}", flush=True)
        return {"key": row.key, "label": row.label, "batch": batch,
                "error": message,
                "traceback": traceback.format_exc(limit=-6)}
    finally:
        release_memory()


def describe(result):
    if "error" in result:
        return f"FAILED: {result['error']}"
    t, m = result["timing"], result["memory"]
    return (f"{t['mean_ms']:.2f} ms mean, {t['median_ms']:.2f} median "
            f"(host issues a step in {t['host_issue_ms']:.2f} ms; "
            f"{result['model_tflops']:.0f} TFLOP/s), peak alloc "
            f"{m['peak_allocated_bytes'] / GIB:.2f} GiB, device used "
            f"{m['device_used_bytes'] / GIB:.2f} GiB, first step "
            f"{result['first_step_s']:.1f} s")


def add_speedups(results):
    """Each row's speed-up of tejit FP8 (no_mask, causal): this row's mean
    (and median) time over tejit's."""
    by_key = {r["key"]: r for r in results if "error" not in r}
    for r in results:
        if "error" in r:
            continue
        for key in (TEJIT_FP8, TEJIT_FP8_CAUSAL):
            ref = by_key.get(key)
            if ref is None or key == r["key"]:
                continue
            r.setdefault("speedup_of", {})[key] = {
                stat: r["timing"][stat] / ref["timing"][stat]
                for stat in ("mean_ms", "median_ms")}


def goals(results, batch):
    by_key = {r["key"]: r for r in results if "error" not in r}
    checks = []
    for tejit_key, peer, goal in (
            (TEJIT_FP8, COMPILE_FP8, GOAL_VS_COMPILE_FP8),
            (TEJIT_FP8, PLAIN, GOAL_VS_PLAIN),
            (TEJIT_FP8_TUNED, COMPILE_FP8, GOAL_VS_COMPILE_FP8),
            (TEJIT_FP8_TUNED, PLAIN, GOAL_VS_PLAIN)):
        if tejit_key == TEJIT_FP8_TUNED and tejit_key not in by_key:
            continue  # no tuning file given (or the row failed: listed)
        check = {"batch": batch, "tejit": tejit_key, "peer": peer,
                 "goal": goal}
        if tejit_key in by_key and peer in by_key:
            ours = by_key[tejit_key]["timing"]
            theirs = by_key[peer]["timing"]
            check.update(tejit_ms=ours["mean_ms"], peer_ms=theirs["mean_ms"],
                         speedup=theirs["mean_ms"] / ours["mean_ms"],
                         speedup_median=theirs["median_ms"]
                         / ours["median_ms"])
            check["met"] = check["speedup"] >= goal
        else:
            check["met"] = None
        checks.append(check)
    return checks


# --- profile of the tejit FP8 step ------------------------------------------------

Activity = collections.namedtuple("Activity", "category name start dur")


def kernel_category(name):
    """Who launched a kernel, guessed from its name (the libraries choose
    their names, so this is a heuristic): "attention" (cuDNN's fused
    attention, PyTorch's flash kernels), "gemm" (cuBLASLt: nvjet / xmma /
    cutlass kernels and its epilogue helpers), "library" (any other
    C++-named kernel: PyTorch's own, e.g. autograd's gradient
    accumulation), "generated" (tejit's kernels: bare extern "C" names)."""
    lowered = name.lower()
    if any(w in lowered for w in ("cudnn", "fmha", "flash_fwd", "flash_bwd",
                                  "sdpa")):
        return "attention"
    if any(w in lowered for w in ("nvjet", "cublas", "cutlass", "xmma",
                                  "gemm")):
        return "gemm"
    if "triton" in lowered or any(c in name for c in (":", "<", "(", " ")):
        return "library"
    return "generated"


def trace_activities(prof):
    """GPU activities (kernels, memcpys, memsets) of a finished profile in
    start order, from its Chrome trace; times in microseconds."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    wanted = ("kernel", "gpu_memcpy", "gpu_memset")
    found = [Activity(str(e["cat"]).lower(), e.get("name", ""),
                      float(e["ts"]), float(e.get("dur", 0.0)))
             for e in events if e.get("ph") == "X"
             and str(e.get("cat", "")).lower() in wanted]
    return sorted(found, key=lambda a: a.start)


def cut_steps(activities, steps):
    """The timeline cut at its steps - 1 widest idle gaps (the host sleeps
    between profiled steps)."""
    if steps <= 1 or len(activities) < steps:
        return [activities]
    gaps = sorted(range(1, len(activities)), reverse=True,
                  key=lambda i: activities[i].start
                  - (activities[i - 1].start + activities[i - 1].dur))
    cuts = [0] + sorted(gaps[:steps - 1]) + [len(activities)]
    return [activities[a:b] for a, b in zip(cuts, cuts[1:])]


def profile_tejit(size, batch, args):
    """Where the tejit FP8 (no_mask) step's GPU time goes: per profiled
    step, the span from the first GPU activity to the last, the time in
    each kernel category, memcpy/memset and idle (one stream: nothing
    overlaps); the median over steps; the top kernels by time per step."""
    from torch.profiler import ProfilerActivity, profile
    row = ROW_BY_KEY[TEJIT_FP8]
    step, keep = make_step(row, size, batch, args)
    for _ in range(1 + args.warmup):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.profile_steps):
            step()
            torch.cuda.synchronize()
            time.sleep(PROFILE_GAP_S)
    del step, keep
    per_step = cut_steps(trace_activities(prof), args.profile_steps)
    splits, kernels = [], collections.defaultdict(list)
    for activities in per_step:
        if not activities:
            continue
        end = max(a.start + a.dur for a in activities)
        split = collections.Counter(span_us=end - activities[0].start)
        for a in activities:
            if a.category == "kernel":
                split[kernel_category(a.name) + "_us"] += a.dur
                kernels[a.name].append(a.dur)
            else:
                split[a.category.replace("gpu_", "") + "_us"] += a.dur
        split["idle_us"] = split["span_us"] - sum(
            v for k, v in split.items() if k != "span_us")
        splits.append(split)
    keys = ["span_us", "gemm_us", "attention_us", "generated_us",
            "library_us", "memcpy_us", "memset_us", "idle_us"]
    median = {k: statistics.median(s[k] for s in splits) for k in keys} \
        if splits else {}
    steps = max(len(splits), 1)
    top = sorted(({"name": name, "us_per_step": sum(d) / steps,
                   "launches_per_step": len(d) / steps,
                   "category": kernel_category(name)}
                  for name, d in kernels.items()),
                 key=lambda k: k["us_per_step"], reverse=True)
    what = " forward (inference)" if args.inference else ""
    return {"batch": batch, "label": row_label(row, size) + what,
            "profiled_steps": len(splits), "split": median,
            "top_kernels": top[:PROFILE_TOP_KERNELS],
            "kernels_per_step": sum(len(d) for d in kernels.values()) / steps}


def print_profile(profile):
    split = profile["split"]
    print(f"\n## {profile['label']} step, batch {profile['batch']}: GPU "
          f"time (torch.profiler, median of {profile['profiled_steps']} "
          f"steps, {profile['kernels_per_step']:.0f} kernels per step)\n")
    span = split.get("span_us") or 0.0
    rows = [[name, f"{split.get(key, 0.0) / 1e3:.3f}",
             f"{100 * split.get(key, 0.0) / span:.1f}" if span else "—"]
            for name, key in (
                ("GPU span", "span_us"), ("GEMMs (cuBLASLt)", "gemm_us"),
                ("attention (cuDNN)", "attention_us"),
                ("tejit generated kernels", "generated_us"),
                ("other library kernels (PyTorch, ...)", "library_us"),
                ("memcpy", "memcpy_us"), ("memset", "memset_us"),
                ("idle", "idle_us"))]
    print(markdown(["part", "ms", "% of span"], rows))
    print("\nCategories are guessed from kernel names (kernel_category).\n")
    print(markdown(["kernel", "category", "us per step", "launches"],
                   [[k["name"][:90], k["category"], f"{k['us_per_step']:.1f}",
                     f"{k['launches_per_step']:g}"]
                    for k in profile["top_kernels"]]))


# --- report ------------------------------------------------------------------------


def markdown(headers, rows):
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def gib(value):
    return f"{value / GIB:.2f}"


def speedup_cell(result, key):
    item = result.get("speedup_of", {}).get(key)
    return f"{item['mean_ms']:.2f}x" if item else "—"


def batch_table(results):
    """One row per result; a speed-up column for each tejit reference row
    (no_mask, causal) that ran, headed by its label."""
    references = {r["key"]: r["label"] for r in results
                  if r["key"] in (TEJIT_FP8, TEJIT_FP8_CAUSAL)
                  and "error" not in r}
    headers = ["row", "ms/step (mean)", "median", "model TFLOP/s",
               "peak alloc GiB", "device used GiB", "outside torch GiB",
               "first step s"] + [f"{label} speed-up"
                                  for label in references.values()]
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["label"], "FAILED"] + [""] * (len(headers) - 2))
            continue
        t, m = r["timing"], r["memory"]
        label = f"**{r['label']}**" if r["key"] == TEJIT_FP8 else r["label"]
        rows.append([label, f"{t['mean_ms']:.2f}", f"{t['median_ms']:.2f}",
                     f"{r['model_tflops']:.0f}",
                     gib(m["peak_allocated_bytes"]),
                     gib(m["device_used_bytes"]),
                     gib(m["outside_torch_bytes"]),
                     f"{r['first_step_s']:.1f}"]
                    + [speedup_cell(r, key) for key in references])
    return markdown(headers, rows)


def print_report(report):
    env = report["environment"]
    size = env["sizes"]
    print(f"\n# tejit TransformerLayer benchmark: {env['gpu']} (driver "
          f"{env['driver']}), {env['date']}\n")
    print(f"torch {env['torch']} (CUDA {env['torch_cuda']}, cuDNN "
          f"{env['cudnn']}), tejit {env['tejit']}. Command: "
          f"`{env['command']}`\n")
    if is_llama(size):
        layer = (f"Llama-style layer (RMSNorm, GQA, rotary base "
                 f"{LLAMA_ROTARY_BASE:g}, causal attention, SwiGLU, no "
                 f"biases, no dropout): hidden {size['hidden']}, FFN "
                 f"{size['ffn']}, {size['heads']} heads in "
                 f"{size['gqa_groups']} groups, seq {size['seq']}")
        flop_note = ("the causal FLOP count (half the score matrix) for "
                     "every row")
    else:
        block = ("parallel block (parallel_attention_mlp), "
                 if size.get("parallel") else "")
        layer = (f"{block}hidden {size['hidden']}, FFN {size['ffn']}, "
                 f"{size['heads']} heads, seq {size['seq']}, dropout "
                 f"{DROPOUT}")
        flop_note = ("the no-mask FLOP count for every row (causal rows do "
                     "about half the attention FLOPs, so theirs overstates)")
    what = ("one step = the forward alone (eval mode, torch.no_grad())"
            if env["settings"].get("inference")
            else "one step = forward + backward")
    print(f"Layer: {layer}; {what}; {env['settings']['warmup']} "
          f"warm-up steps, then {env['settings']['iters']} timed (CUDA "
          f"events; mean as the seed speedometer, and the median step); "
          f"first step (JIT / torch.compile compile) timed apart. Model "
          f"TFLOP/s: {flop_note}. Peak "
          f"alloc: torch.cuda.max_memory_allocated over the row. Device "
          f"used: drop in free device memory (mem_get_info) over the row, "
          f"everything it held; outside torch: the part not in PyTorch's "
          f"allocator (tejit's arena, FP8 state, workspace, kernel "
          f"modules). Speed-up: this row's mean time / tejit's.")
    for item in report["batches"]:
        flops = item["flops"]
        print(f"\n## batch {item['batch']} ({size['seq'] * item['batch']} "
              f"tokens): {flops['total'] / 1e12:.2f} TFLOP per step "
              f"(GEMMs {flops['gemm'] / 1e12:.2f}, attention "
              f"{flops['attention'] / 1e12:.2f})\n")
        print(batch_table(item["results"]))
    for profile in report.get("profiles", []):
        if "error" in profile:
            print(f"\nprofile, batch {profile['batch']}: FAILED: "
                  f"{profile['error']}")
        else:
            print_profile(profile)
    if report["goals"]:
        print("\n## Goals (tejit FP8, no_mask; mean step times)\n")
    for check in report["goals"]:
        peer = ROW_BY_KEY[check["peer"]].label
        if check["met"] is None:
            print(f"- batch {check['batch']}: vs {peer}: not measured "
                  f"(a row failed or was not run)")
            continue
        tuned = (", tuned GEMMs" if check["tejit"] == TEJIT_FP8_TUNED
                 else "")
        print(f"- batch {check['batch']}{tuned}: vs {peer}: "
              f"{check['speedup']:.2f}x ({check['tejit_ms']:.2f} ms vs "
              f"{check['peer_ms']:.2f} ms; median-based "
              f"{check['speedup_median']:.2f}x), goal >= {check['goal']}x: "
              f"{'met' if check['met'] else 'NOT met'}")
    leaks = [r for item in report["batches"] for r in item["results"]
             if r.get("memory", {}).get("not_returned_bytes", 0)
             > RESIDUAL_WARN_BYTES]
    for r in leaks:
        print(f"- note: {r['label']} (batch {r['batch']}) left "
              f"{gib(r['memory']['not_returned_bytes'])} GiB of device "
              f"memory in use after its cleanup")


# --- main ----------------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="rows: " + ", ".join(
            f"{r.key}{' (extra)' if r.extra else ''}" for r in ROWS))
    parser.add_argument("--batch", type=int, nargs="+",
                        help="batch sizes (default: 4 8; --small: 2)")
    parser.add_argument("--small", action="store_true",
                        help="hidden 1024, FFN 4096, 16 heads, seq 512, "
                             "batch 2: a quick check")
    parser.add_argument("--model", choices=("seed", "llama", "parallel"),
                        default="seed",
                        help="seed: the seed's GPT layer (the headline; "
                             "default); llama: a Llama-3-8B-style layer "
                             "(RMSNorm, GQA 8, rotary, causal, SwiGLU, no "
                             "bias, seq 4096, batch 2 and 4); parallel: the "
                             "seed layer as TE's parallel block "
                             "(parallel_attention_mlp)")
    parser.add_argument("--inference", action="store_true",
                        help="time the forward alone (eval mode, "
                             "torch.no_grad(): tejit compiles its inference "
                             "program) instead of the training step")
    parser.add_argument("--only", nargs="+", metavar="ROW",
                        help="run only these rows (keys below)")
    parser.add_argument("--all", action="store_true",
                        help="also run the extra rows (cuDNN SDPA peers)")
    parser.add_argument("--warmup", type=int, default=20,
                        help="untimed steps after the first (default 20)")
    parser.add_argument("--iters", type=int, default=30,
                        help="timed steps (default 30)")
    parser.add_argument("--keep-grads", action="store_true",
                        help="accumulate gradients across steps as the "
                             "seed speedometer does (default: set them "
                             "to None before each step)")
    parser.add_argument("--compile-mode", default=None,
                        help="torch.compile mode (default: its default)")
    parser.add_argument("--profile", action="store_true",
                        help="profile the tejit FP8 (no_mask) step after "
                             "the timed rows")
    parser.add_argument("--profile-steps", type=int, default=3,
                        help="steps profiled (default 3)")
    parser.add_argument("--gemm-tuning", metavar="FILE",
                        help="a GEMM tuning file (tejit-gemm-algos "
                        "--write-tuning): adds the row tejit-fp8-tuned, "
                        "whose programs use it; every other row runs "
                        "cuBLASLt's heuristic")
    parser.add_argument("--json", metavar="OUT",
                        help="also write every number to this JSON file")
    args = parser.parse_args()
    unknown = [k for k in args.only or [] if k not in ROW_BY_KEY]
    if unknown:
        parser.error(f"unknown row(s) {', '.join(unknown)}; rows: "
                     f"{', '.join(ROW_BY_KEY)}")
    training_only = [k for k in args.only or []
                     if ROW_BY_KEY[k].training_only]
    if args.inference and training_only:
        parser.error(f"row(s) {', '.join(training_only)} time training "
                     f"steps only")
    seed_only = [k for k in args.only or [] if ROW_BY_KEY[k].seed_only]
    if args.model != "seed" and seed_only:
        parser.error(f"row(s) {', '.join(seed_only)} exist for the seed "
                     f"layer only")
    tuned = [k for k in args.only or [] if ROW_BY_KEY[k].gemm_tuning]
    if tuned and not args.gemm_tuning:
        parser.error(f"row(s) {', '.join(tuned)} need --gemm-tuning FILE")
    if args.gemm_tuning and not os.path.isfile(args.gemm_tuning):
        parser.error(f"--gemm-tuning: no file {args.gemm_tuning}")
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be >= 1 and --warmup >= 0")
    return args


def selected_rows(args):
    if args.only:
        return [ROW_BY_KEY[k] for k in args.only]
    return [r for r in ROWS if (args.all or not r.extra)
            and not (args.model != "seed" and r.seed_only)
            and not (args.inference and r.training_only)
            and not (r.gemm_tuning and not args.gemm_tuning)]


def driver_version():
    try:
        index = torch.cuda.current_device()
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,"
             "noheader", "-i", str(index)], capture_output=True, text=True,
            timeout=30, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({type(error).__name__})"


def tejit_version():
    try:
        import tejit
        return f"{tejit.version()} ({tejit._capi.library_path()})"
    except Exception as error:  # noqa: BLE001 - reported
        return f"unavailable: {type(error).__name__}: {error}"


def environment(args, size_name, size):
    return {"gpu": torch.cuda.get_device_name(),
            "capability": list(torch.cuda.get_device_capability()),
            "driver": driver_version(),
            "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "tejit": tejit_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "command": " ".join([sys.executable] + sys.argv),
            "model": args.model, "size": size_name, "sizes": size,
            "settings": {"warmup": args.warmup, "iters": args.iters,
                     "inference": args.inference,
                         "keep_grads": args.keep_grads,
                         "compile_mode": args.compile_mode,
                         "dropout": DROPOUT,
                         "gemm_tuning": args.gemm_tuning,
                         "rows": [r.key for r in selected_rows(args)]}}


def warm_device():
    """Creates the CUDA context and the cuBLAS handles (and their
    workspaces) before the first row, so that row's memory figures are its
    own."""
    for dtype in (torch.bfloat16, torch.float16):
        a = torch.randn(256, 256, device="cuda", dtype=dtype)
        (a @ a).sum().item()
    del a
    release_memory()


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    size_name = "small" if args.small else "full"
    sizes = {"seed": SIZES, "llama": LLAMA_SIZES,
             "parallel": PARALLEL_SIZES}[args.model]
    size = {k: v for k, v in sizes[size_name].items() if k != "batches"}
    batches = args.batch or sizes[size_name]["batches"]
    env = environment(args, size_name, size)
    print(f"{env['gpu']} (driver {env['driver']}), torch {env['torch']}, "
          f"tejit {env['tejit']}; {size_name} sizes, batches "
          f"{batches}", flush=True)
    warm_device()
    rows = selected_rows(args)
    report = {"environment": env, "batches": [], "goals": []}
    for batch in batches:
        flops = layer_flops(size, batch)
        if args.inference:  # the forward: a third of the step's FLOPs
            flops = {k: v / 3 for k, v in flops.items()}
        print(f"\nbatch {batch}:", flush=True)
        results = []
        for row in rows:
            result = guarded(row, batch, run_row, row, size, batch, args,
                             flops)
            results.append(result)
            if "error" not in result:
                print(f"  {result['label']}: {describe(result)}",
                      flush=True)
        add_speedups(results)
        report["batches"].append({"batch": batch, "flops": flops,
                                  "results": results})
        # The goals are the seed layer's training step's.
        if is_seed(size) and not args.inference:
            report["goals"] += goals(results, batch)
    if args.profile:
        report["profiles"] = []
        for batch in batches:
            try:
                report["profiles"].append(profile_tejit(size, batch, args))
            except Exception as error:  # noqa: BLE001 - reported
                report["profiles"].append(
                    {"batch": batch,
                     "error": f"{type(error).__name__}: {error}"})
            finally:
                release_memory()
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
