#!/usr/bin/env python3
"""tejit's blocks against PyTorch, on one GPU, in one process.

    python3 benchmarks/gpu/bench_layers.py [--small] [--json OUT]
    (benchmarks/gpu/run.sh sets up the library path, then runs this)

At the quickstart sizes (hidden 4096, FFN 16384, seq 2048 x batch 4 = 8192
tokens; --small: 1024 / 4096 / 512 x 2), bf16 parameters:

1. Blocks: one training step (forward, then the backward of a fixed random
   output gradient) of LayerNormLinear (hidden -> 3 x hidden, the QKV
   projection) and LayerNormMLP (GELU): tejit FP8 DelayedScaling (HYBRID,
   history 1024, max), tejit FP8 Float8CurrentScaling, tejit bf16; PyTorch
   eager bf16, torch.compile bf16, and torch.compile with FP8 linears
   through torch._scaled_mm (torch_peers.py). With CUDA graphs: the tejit
   delayed step captured (one graph per input buffer) against torch.compile
   FP8 with mode="reduce-overhead".
2. GEMMs: tejit steps profiled with torch.profiler (after every config has
   been timed); each GEMM step's kernel time against a raw cuBLASLt call of
   the same shape and dtypes (torch._scaled_mm / torch.matmul), timed
   after its usual warm-up and again after RAW_SUSTAIN_S of back-to-back
   calls (the power-capped state the profiled steps run in).
3. Memory-bound kernels: each generated kernel's bytes moved (its
   arguments' sizes) over its time, against a device-to-device copy
   measured in this run.

Timing follows shared/GPU.md: CUDA events around each step after warm-up,
the median of the timed steps, inputs rotated among 3 buffers so that they
are not L2-resident. Markdown tables go to stdout; --json writes every
number with the device, versions, date and command line.
"""
import argparse
import collections
import dataclasses
import datetime
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import tejit  # noqa: E402
import torch_peers  # noqa: E402
from gemm_tuning_env import gemm_tuning_file  # noqa: E402
from run_layer_tests import TORCH_DTYPES, random_input, short_name  # noqa: E402

# --- what is measured -------------------------------------------------------

SIZES = {
    "full": {"hidden": 4096, "ffn": 16384, "seq": 2048, "batch": 4},
    "small": {"hidden": 1024, "ffn": 4096, "seq": 512, "batch": 2},
}
DELAYED = {"type": "DelayedScaling", "fp8_format": "HYBRID",
           "amax_history_len": 1024, "amax_compute_algo": "max"}
CURRENT = {"type": "Float8CurrentScaling", "fp8_format": "HYBRID"}
# (label, recipe); None is bf16 (recipe "none").
TEJIT_CONFIGS = [("tejit FP8 delayed", DELAYED),
                 ("tejit FP8 current", CURRENT),
                 ("tejit bf16", None)]
# The same step replayed as CUDA graphs (one per input buffer): timed, not
# profiled (its kernels are the delayed config's).
TEJIT_GRAPH = ("tejit FP8 delayed, CUDA graph", DELAYED)
# With --gemm-tuning FILE: the delayed config again, its program created
# with TEJIT_GEMM_TUNING=FILE (measured cuBLASLt algorithms); timed, not
# profiled. Every other config runs cuBLASLt's heuristic.
TEJIT_TUNED = ("tejit FP8 delayed, tuned GEMMs", DELAYED)
TEJIT_FP8 = [label for label, recipe in TEJIT_CONFIGS if recipe] + [
    TEJIT_GRAPH[0], TEJIT_TUNED[0]]
# (label, FP8 linears, torch.compile: False, True or its mode)
PEERS = [("torch eager bf16", False, False),
         ("torch.compile bf16", False, True),
         ("torch.compile FP8", True, True),
         ("torch.compile FP8, CUDA graphs", True, "reduce-overhead")]
COMPILE_FP8 = "torch.compile FP8"
COMPILE_FP8_GRAPHS = "torch.compile FP8, CUDA graphs"

ROTATION = 3            # input buffers, cycled so none stays in L2
COPY_BYTES = 1 << 30    # the copy-bandwidth ceiling's tensor
# Kernels moving less than this are launch/latency-bound, not
# bandwidth-bound: listed, but left out of the headline figure.
HEADLINE_MIN_BYTES = 1 << 20
# Profiled steps are separated by a host sleep; the idle gap it leaves on
# the GPU timeline is how the trace is cut into steps.
STEP_GAP_S = 0.005

# Host time to enqueue one timed library call (a Python call plus two
# events), generously: what queue_ahead covers per call.
QUEUE_AHEAD_S_PER_CALL = 100e-6

GOAL_MLP_SPEEDUP = 1.3      # tejit FP8 LayerNormMLP over torch.compile FP8
GOAL_GEMM_RATIO = 1.05      # tejit GEMM time / raw cuBLASLt time
# The raw GEMM is timed twice: after its usual warm-up (a few tens of ms of
# GEMMs, which leaves the card below its power cap) and after this much
# back-to-back work, which brings it to the power-capped clocks a block's
# steps run at (FP8 GEMMs back to back hold an H200 at its 700 W cap).
RAW_SUSTAIN_S = 2.0
GOAL_BANDWIDTH = 0.80       # generated kernels, of copy bandwidth

MLIR_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16,
               "f32": torch.float32, "f8E4M3FN": torch.float8_e4m3fn,
               "f8E5M2": torch.float8_e5m2}
# Plan steps whose kernels come from a library (cuBLASLt, cuDNN): their
# kernels carry the library's names, so they are matched by position.
LIBRARY_STEPS = ("gemm", "attention", "attention_bwd", "fp8_attention",
                 "fp8_attention_bwd")
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclasses.dataclass
class Block:
    kind: str
    layer: dict           # the spec's layer entry
    dims: tuple           # the PyTorch peer's constructor arguments
    in_features: int
    out_features: int
    forward_flops: int    # GEMM flops of the forward

    @property
    def train_flops(self):
        # Backward = dgrad + wgrad, each as big as the forward GEMM.
        return 3 * self.forward_flops


def make_blocks(size):
    h, f = size["hidden"], size["ffn"]
    tokens = size["seq"] * size["batch"]
    return [
        Block("LayerNormLinear",
              {"type": "LayerNormLinear", "in_features": h,
               "out_features": 3 * h},
              (h, 3 * h), h, 3 * h, 2 * tokens * h * 3 * h),
        Block("LayerNormMLP",
              {"type": "LayerNormMLP", "hidden_size": h,
               "ffn_hidden_size": f, "activation": "gelu"},
              (h, f), h, h, 2 * 2 * tokens * h * f),
    ]


# --- timing and memory ------------------------------------------------------


def summarize(times_ms):
    return {"median_ms": statistics.median(times_ms), "min_ms": min(times_ms),
            "max_ms": max(times_ms), "iters": len(times_ms)}


def time_steps(step, warmup, iters, rotation=ROTATION, queue_ahead=False):
    """Times `iters` calls step(i) (i cycles over `rotation` buffers), each
    between its own pair of CUDA events, after `warmup` untimed calls. The
    events are read only at the end, so the GPU never waits on the host.

    A call shorter than its own launch leaves the GPU idle between its
    events, and the time is the host's. For a ceiling (one library call)
    `queue_ahead` first parks the GPU in a spin kernel long enough for the
    host to enqueue every timed call behind it, so the events time the GPU
    alone. Whole steps are timed without it: a step's launch cost is part
    of what it costs."""
    for i in range(warmup):
        step(i % rotation)
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True),
              torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    if queue_ahead:
        spin_gpu(iters * QUEUE_AHEAD_S_PER_CALL)
    for i, (start, end) in enumerate(pairs):
        start.record()
        step((warmup + i) % rotation)
        end.record()
    torch.cuda.synchronize()
    return summarize([start.elapsed_time(end) for start, end in pairs])


def spin_gpu(seconds):
    """Keeps the GPU busy for about `seconds` (torch.cuda._sleep spins for
    a number of cycles; 2 GHz is above any Hopper's SM clock, so this is a
    lower bound on the time)."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(seconds * 2e9))


def free_memory():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def device_free_bytes():
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def copy_bandwidth(args):
    """The device-to-device copy ceiling: y.copy_(x) of 1 GiB, read + write
    bytes over the median time."""
    x = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").fill_(1)
    y = torch.empty_like(x)
    timing = time_steps(lambda i: y.copy_(x), args.warmup, args.iters, 1)
    del x, y
    free_memory()
    moved = 2 * COPY_BYTES
    return {"bytes_moved": moved, "timing": timing,
            "gb_per_s": moved / (timing["median_ms"] * 1e-3) / 1e9}


# --- tejit --------------------------------------------------------------------


def tejit_spec(block, size, recipe):
    spec = {"name": block.kind.lower(), "params_dtype": "bf16",
            "seq_length": size["seq"], "batch_size": size["batch"],
            "layers": [dict(block.layer)]}
    if recipe:
        spec["recipe"] = dict(recipe)
    return spec


def empty_like_info(info):
    return torch.empty(info.shape, device="cuda",
                       dtype=TORCH_DTYPES[info.dtype])


class TejitStep:
    """One training step of a program: forward then backward on torch's
    current stream. Tensors are allocated by torch and passed as addresses
    (computed once, to keep the host's share of a step small); the
    activation input cycles over `rotation` buffers, the parameters are
    shared."""

    def __init__(self, program, rotation):
        self.program = program
        self.stream = torch.cuda.current_stream().cuda_stream
        params = {}
        self.inputs = [[] for _ in range(rotation)]
        for info in program.inputs:
            is_activation = short_name(info.name) == "input"
            if not is_activation:
                params[info.name] = random_input(info)
            for row in self.inputs:
                row.append(random_input(info) if is_activation
                           else params[info.name])
        self.outputs = [empty_like_info(i) for i in program.outputs]
        self.grad_outputs = [
            torch.randn(i.shape, device="cuda").to(TORCH_DTYPES[i.dtype])
            for i in program.grad_outputs]
        self.grads = [empty_like_info(i) for i in program.grad_inputs]
        self.input_ptrs = [[t.data_ptr() for t in row] for row in self.inputs]
        self.output_ptrs = [t.data_ptr() for t in self.outputs]
        self.grad_output_ptrs = [t.data_ptr() for t in self.grad_outputs]
        self.grad_ptrs = [t.data_ptr() for t in self.grads]

    def __call__(self, i):
        self.program.forward(self.stream, self.input_ptrs[i],
                             self.output_ptrs)
        self.program.backward(self.stream, self.grad_output_ptrs,
                              self.grad_ptrs)


class GraphedStep:
    """A TejitStep captured as one CUDA graph per input buffer (tejit's
    steps only enqueue work), replayed on torch's current stream."""

    def __init__(self, step, rotation):
        self.graphs = []
        stream = step.stream
        for i in range(rotation):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step.stream = torch.cuda.current_stream().cuda_stream
                step(i)
            self.graphs.append(graph)
        step.stream = stream
        self.step = step  # its tensors stay alive with the graphs

    def __call__(self, i):
        self.graphs[i].replay()


def compile_program(block, size, recipe, tuning=None):
    """The block's program, created with TEJIT_GEMM_TUNING=`tuning` (unset
    for None)."""
    with gemm_tuning_file(tuning):
        return tejit.Program.compile(tejit_spec(block, size, recipe),
                                     training=True,
                                     recipe=None if recipe else "none")


# Programs stay loaded until the process ends: PyTorch's profiler names a
# kernel by its CUfunction handle, and a module unloaded with its program
# hands its handles to the next program's kernels, which then show up in
# profiles under the old program's kernel names.
RETIRED = []


def retire(program):
    RETIRED.append(program)


def run_tejit(block, size, label, recipe, args, graphed=False,
              tuning=None):
    """Times one tejit config. tejit's own device memory
    (arena, saved tensors, FP8 state, cuBLASLt workspace, kernel modules)
    is allocated outside PyTorch's allocator, so it is measured as the drop
    in free device memory over compile and over the first step, with
    torch's allocations kept out of both windows."""
    result = {"label": label, "recipe": recipe}
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    free_before = device_free_bytes()
    start = time.perf_counter()
    program = compile_program(block, size, recipe, tuning)
    try:
        result["compile_s"] = time.perf_counter() - start
        tejit_bytes = free_before - device_free_bytes()
        step = TejitStep(program, ROTATION)
        free_before = device_free_bytes()
        step(0)
        tejit_bytes += free_before - device_free_bytes()
        if graphed:
            for i in range(1, ROTATION):  # every buffer seen before capture
                step(i)
            step = GraphedStep(step, ROTATION)
        result["timing"] = time_steps(step, args.warmup, args.iters)
        result["peak_torch_bytes"] = torch.cuda.max_memory_allocated() - base
        result["tejit_device_bytes"] = tejit_bytes
    finally:
        retire(program)
    return result


def run_tejit_profile(block, size, recipe, args):
    """A profile of the config's step (see profile_tejit), from a fresh
    program (the kernel cache makes compiling it again cheap) after
    warm-up: the first runs create the cuBLASLt problems."""
    program = compile_program(block, size, recipe)
    try:
        step = TejitStep(program, ROTATION)
        for i in range(args.warmup):
            step(i % ROTATION)
        return profile_tejit(step, program.plan(), args)
    finally:
        retire(program)


# --- PyTorch peers --------------------------------------------------------------


def peer_step(fn, params, inputs, dy):
    def step(i):
        # Fresh gradients each step: tejit writes its gradients, so the
        # peer must not pay for accumulating into old ones.
        for p in params:
            p.grad = None
        x = inputs[i]
        x.grad = None
        fn(x).backward(dy)
    return step


def run_peer(block, size, label, fp8, compiled, args):
    result = {"label": label}
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    torch.manual_seed(0)
    module = torch_peers.make_block(block.kind, block.dims, fp8=fp8)
    shape = (size["seq"], size["batch"])
    inputs = [torch.randn(shape + (block.in_features,), device="cuda",
                          dtype=torch.bfloat16).requires_grad_()
              for _ in range(ROTATION)]
    dy = torch.randn(shape + (block.out_features,), device="cuda",
                     dtype=torch.bfloat16)
    fn = module
    if compiled:
        reset_dynamo()  # no guards or graphs left from other peers
        fn = torch.compile(module, mode=compiled if isinstance(
            compiled, str) else args.compile_mode)
    step = peer_step(fn, list(module.parameters()), inputs, dy)
    # The first step compiles (forward and backward graphs) under
    # torch.compile: time it apart from the warm-up.
    start = time.perf_counter()
    step(0)
    torch.cuda.synchronize()
    result["first_step_s"] = time.perf_counter() - start
    result["timing"] = time_steps(step, args.warmup, args.iters)
    result["peak_torch_bytes"] = torch.cuda.max_memory_allocated() - base
    return result


def guarded(label, fn, *fn_args):
    """fn(*fn_args), or a record of its failure: one broken config (say,
    torch.compile unavailable) must not stop the others."""
    try:
        return fn(*fn_args)
    except Exception as error:  # noqa: BLE001 - reported, not hidden
        print(f"  {label}: FAILED: {type(error).__name__}: {error}",
              flush=True)
        return {"label": label,
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(limit=-4)}
    finally:
        reset_dynamo()
        free_memory()


def reset_dynamo():
    """Drops torch.compile's graphs and guards (and the memory they hold),
    if torch.compile was used at all."""
    if "torch._dynamo" not in sys.modules:
        return
    try:
        torch._dynamo.reset()
    except Exception as error:  # noqa: BLE001 - cleanup only
        print(f"  (torch._dynamo.reset failed: {error})", flush=True)


# --- profiling: GPU activities of a tejit step ------------------------------------

Activity = collections.namedtuple("Activity", "category name start dur")


def read_trace(prof):
    """The GPU activities (kernels, memcpys, memsets) of a finished
    profile, in start order; times in microseconds. Read from the Chrome
    trace, whose format is stable across PyTorch versions."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    activities = [Activity(str(e["cat"]).lower(), e.get("name", ""),
                           float(e["ts"]), float(e.get("dur", 0.0)))
                  for e in events if e.get("ph") == "X" and
                  str(e.get("cat", "")).lower() in GPU_CATEGORIES]
    return sorted(activities, key=lambda a: a.start)


def profile_activities(step, steps):
    """The activities of `steps` training steps, one list per step. CUPTI
    records kernels of every launch in the process, so tejit's driver-API
    launches and cuBLASLt's kernels both show up."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            # A marker kernel opens each step: activities of earlier work
            # that CUPTI delivers late (other configs' kernels showed up in
            # a config's profile) fall before the first marker.
            torch.cuda._sleep(MARKER_CYCLES)
            step(i % ROTATION)
            torch.cuda.synchronize()
            time.sleep(STEP_GAP_S)
    activities = read_trace(prof)
    marked = split_at_markers(activities, steps)
    return marked if marked is not None else split_steps(activities, steps)


MARKER_CYCLES = 1000


def split_at_markers(activities, steps):
    """The activities after each of the `steps` marker kernels
    (torch.cuda._sleep's spin kernel), markers left out; None when the
    markers are not all there."""
    marks = [i for i, a in enumerate(activities)
             if a.category == "kernel" and "spin_kernel" in a.name]
    if len(marks) != steps:
        return None
    ends = marks[1:] + [len(activities)]
    return [activities[a + 1:b] for a, b in zip(marks, ends)]


def split_steps(activities, steps):
    """Cuts the timeline at its `steps` - 1 widest idle gaps: the host
    sleeps between profiled steps."""
    if steps <= 1 or len(activities) < steps:
        return [activities]

    def gap(i):
        before = activities[i - 1]
        return activities[i].start - (before.start + before.dur)

    widest = sorted(range(1, len(activities)), key=gap, reverse=True)
    cuts = [0] + sorted(widest[:steps - 1]) + [len(activities)]
    return [activities[a:b] for a, b in zip(cuts, cuts[1:])]


# --- profiling: activities to plan steps ------------------------------------------


@dataclasses.dataclass
class PlanEntry:
    function: str
    index: int        # the step's index in its function
    step: dict
    values: dict      # the function's values by id


def plan_entries(plan):
    """The steps of one training step that launch kernels, in launch
    order: the forward's, then its backward's."""
    functions = sorted(plan["functions"],
                       key=lambda f: bool(f.get("backward_of")))
    entries = []
    for function in functions:
        values = {v["id"]: v for v in function["values"]}
        for index, step in enumerate(function["steps"]):
            if step["kind"] == "kernel" or step["kind"] in LIBRARY_STEPS:
                entries.append(PlanEntry(function["name"], index, step,
                                         values))
    return entries


def base_name(trace_name):
    """"void f<T>(int*)" -> "f<T>"; a plain "f" stays "f". Generated
    kernels are extern "C", so CUPTI should report their bare names; this
    only guards against a demangled signature."""
    words = trace_name.split("(")[0].split()
    return words[-1] if words else ""


def is_auxiliary(name):
    """A library kernel that finishes another one's work (split-K
    reduction) rather than starting a GEMM of its own."""
    lowered = name.lower()
    return "splitk" in lowered or "reduce" in lowered


def group_library_kernels(kernels, count):
    """`kernels` split among `count` library steps in order, or None when
    the split is ambiguous. One kernel per step is the usual case; a
    split-K reduction goes with the kernel before it."""
    if len(kernels) == count:
        return [[k] for k in kernels]
    starts = [i for i, k in enumerate(kernels) if not is_auxiliary(k.name)]
    if len(starts) != count or count == 0:
        return None
    starts[0] = 0
    return [kernels[a:b] for a, b in zip(starts, starts[1:] + [len(kernels)])]


def assign_library(pending, kernels, found, problems):
    """Gives the library kernels launched between two generated kernels to
    the library steps planned between them (`pending`, positions in the
    entry list)."""
    names = ", ".join(k.name[:60] for k in kernels)
    if not pending:
        if kernels:
            problems.append(f"kernels no plan step accounts for: {names}")
        return
    groups = group_library_kernels(kernels, len(pending))
    if groups is None:
        total = sum(k.dur for k in kernels)
        problems.append(f"{len(kernels)} library kernels for {len(pending)} "
                        f"library steps, {total:.1f} us in all; left "
                        f"unattributed: {names}")
        return
    for position, group in zip(pending, groups):
        found[position] = group


def match_step(entries, activities):
    """{entry position: its kernels} for one step's activities. Generated
    kernels are found by name (the plan's entry point name is the kernel
    name CUPTI reports); the library kernels between two of them belong to
    the library steps planned between them, in order. Memcpys (scale
    staging, amax copies) and memsets (amax zeroing) are not kernels."""
    kernels = [a for a in activities if a.category == "kernel"]
    found, problems, pending, pos = {}, [], [], 0
    for position, entry in enumerate(entries):
        if entry.step["kind"] != "kernel":
            pending.append(position)
            continue
        name = entry.step["name"]
        hit = next((i for i in range(pos, len(kernels))
                    if base_name(kernels[i].name) == name), None)
        if hit is None:
            problems.append(f"{entry.function} step {entry.index} ({name}): "
                            f"not in the profile")
            continue
        assign_library(pending, kernels[pos:hit], found, problems)
        pending = []
        found[position] = [kernels[hit]]
        pos = hit + 1
    assign_library(pending, kernels[pos:], found, problems)
    return found, problems


def breakdown(activities, own_names):
    """Where one step's GPU time went: span from the first activity's start
    to the last one's end; generated kernels, library kernels, memcpys,
    memsets; idle is the rest (one stream: nothing overlaps)."""
    if not activities:
        return {}
    end = max(a.start + a.dur for a in activities)
    sums = collections.Counter()
    for a in activities:
        if a.category == "kernel":
            sums["generated_us" if base_name(a.name) in own_names
                 else "library_us"] += a.dur
        else:
            sums[a.category.replace("gpu_", "") + "_us"] += a.dur
    span = end - activities[0].start
    row = {"span_us": span, "generated_us": sums["generated_us"],
           "library_us": sums["library_us"], "memcpy_us": sums["memcpy_us"],
           "memset_us": sums["memset_us"]}
    row["idle_us"] = span - sum(v for k, v in row.items() if k != "span_us")
    row["memcpy_count"] = sum(a.category == "gpu_memcpy" for a in activities)
    row["memset_count"] = sum(a.category == "gpu_memset" for a in activities)
    return row


def median_rows(rows):
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def unique(items):
    return list(dict.fromkeys(items))


def profile_tejit(step, plan, args):
    """GEMM and generated-kernel rows of a profiled tejit step (per-step
    median over the profiled steps), the step's time breakdown and any
    matching problems."""
    entries = plan_entries(plan)
    own_names = {e.step["name"] for e in entries if e.step["kind"] == "kernel"}
    per_step = profile_activities(step, args.profile_steps)
    times = [[] for _ in entries]
    names = [None] * len(entries)
    problems = []
    for number, activities in enumerate(per_step, 1):
        found, step_problems = match_step(entries, activities)
        problems += [f"step {number}: {p}" for p in step_problems]
        for position, kernels in found.items():
            times[position].append(sum(k.dur for k in kernels))
            names[position] = names[position] or [k.name for k in kernels]
    medians = [statistics.median(t) if t else None for t in times]
    rows = [breakdown(a, own_names) for a in per_step if a]
    return {"profiled_steps": len(per_step),
            "breakdown": median_rows(rows) if rows else {},
            "gemms": [gemm_row(e, t, n) for e, t, n in
                      zip(entries, medians, names)
                      if e.step["kind"] == "gemm"],
            "kernels": [kernel_row(e, t) for e, t in zip(entries, medians)
                        if e.step["kind"] == "kernel"],
            "problems": unique(problems)}


# --- GEMM rows ------------------------------------------------------------------

TensorType = collections.namedtuple("TensorType", "shape element")
GemmProblem = collections.namedtuple(
    "GemmProblem", "scaled m n k a b out bias gelu fast_accum "
                   "transpose_a transpose_b")


def parse_type(text):
    """"tensor<1024x4096xf8E4M3FN>" -> TensorType((1024, 4096), "f8E4M3FN")."""
    parts = text[len("tensor<"):-1].split("x")
    return TensorType(tuple(int(d) for d in parts[:-1]), parts[-1])


def gemm_problem(step):
    """M, N, K and dtypes of a plan GEMM. FP8 GEMMs are TN: a [M, K], b
    [N, K], out [M, N]; others are out [M, N] = op(a) op(b) with op a
    transpose where flagged (docs/plan-format.md)."""
    a, b, out = (parse_type(step[key])
                 for key in ("a_type", "b_type", "out_type"))
    scaled = "a_scale_inv" in step or "b_scale_inv" in step
    ta = not scaled and bool(step.get("transpose_a"))
    tb = scaled or bool(step.get("transpose_b"))
    m, k = (a.shape[1], a.shape[0]) if ta else a.shape
    n = b.shape[0] if tb else b.shape[1]
    epilogue = step.get("epilogue", {})
    return GemmProblem(scaled, m, n, k, a.element, b.element, out.element,
                       "bias" in epilogue, bool(epilogue.get("gelu")),
                       bool(step.get("fast_accum")), ta, tb)


def epilogue_terms(step):
    epilogue = step.get("epilogue", {})
    return [key for key, value in epilogue.items()
            if value is not False and value is not None]


def gemm_row(entry, time_us, kernel_names):
    problem = gemm_problem(entry.step)
    return {"function": entry.function, "step": entry.index,
            "problem": problem._asdict(),
            "epilogue": epilogue_terms(entry.step),
            "flops": 2 * problem.m * problem.n * problem.k,
            "tejit_us": time_us, "kernels": kernel_names or []}


def raw_gemm(problem, args):
    """Times a raw cuBLASLt call of `problem` through PyTorch: {"us",
    "note"} with what differs from the tejit step, or {"error"}."""
    try:
        if problem.scaled:
            calls, note = torch_peers.raw_fp8_gemm(
                problem.m, problem.n, problem.k, MLIR_DTYPES[problem.a],
                MLIR_DTYPES[problem.b], MLIR_DTYPES[problem.out],
                problem.bias, problem.fast_accum)
            notes = [note]
        else:
            calls = torch_peers.raw_matmul(
                problem.m, problem.n, problem.k, MLIR_DTYPES[problem.a],
                problem.transpose_a, problem.transpose_b, problem.bias,
                problem.gelu)
            notes = [f"{problem.a} output, not {problem.out}"
                     if problem.out != problem.a else ""]
        timing = time_steps(lambda i: calls[i](), args.warmup, args.iters,
                            len(calls), queue_ahead=True)
        us = timing["median_ms"] * 1e3
        sustained = time_steps(lambda i: calls[i](),
                               int(RAW_SUSTAIN_S * 1e6 / us), args.iters,
                               len(calls), queue_ahead=True)
        return {"us": us, "timing": timing,
                "sustained_us": sustained["median_ms"] * 1e3,
                "sustained_timing": sustained,
                "note": "; ".join(n for n in notes if n)}
    except Exception as error:  # noqa: BLE001 - reported in the table
        return {"error": f"{type(error).__name__}: {error}"}


def unmatched_terms(row):
    """Epilogue work the tejit GEMM does that the raw call does not: the
    raw call has the bias and the FP8 output scale, and GELU only as
    _addmm_activation (bf16, with a bias); aux outputs, dGELU, bias
    gradients and amax_D are tejit's alone."""
    problem = row["problem"]
    matched = {"bias", "d_scale"}
    if not problem["scaled"] and problem["bias"]:
        matched.add("gelu")
    return [t for t in row["epilogue"] if t not in matched]


def add_raw_gemms(rows, cache, args):
    """Adds the raw call's time and tejit/raw to each GEMM row; problems
    already timed (same shape, dtypes, epilogue) are not timed again."""
    for row in rows:
        problem = GemmProblem(**row["problem"])
        if problem not in cache:
            cache[problem] = raw_gemm(problem, args)
            free_memory()  # its operands, once raw_gemm's frame is gone
        raw = dict(cache[problem])
        extra = unmatched_terms(row)
        if extra:
            raw["note"] = "; ".join(
                n for n in (raw.get("note", ""),
                            "tejit also does " + ", ".join(extra)) if n)
        row["raw"] = raw
        if row["tejit_us"] and raw.get("us"):
            row["ratio"] = row["tejit_us"] / raw["us"]
            row["ratio_sustained"] = row["tejit_us"] / raw["sustained_us"]


# --- generated-kernel rows --------------------------------------------------------


def kernel_row(entry, time_us):
    """Bytes moved = the sizes of the kernel's arguments, each read or
    written once (what a memory-bound kernel cannot do with less)."""
    moved = sum(entry.values[arg["value"]]["bytes"]
                for arg in entry.step["args"])
    return {"function": entry.function, "step": entry.index,
            "name": entry.step["name"], "grid": entry.step.get("grid"),
            "block": entry.step.get("block"), "bytes": moved,
            "us": time_us, "headline": moved >= HEADLINE_MIN_BYTES}


def add_bandwidth(rows, copy_gb_per_s):
    for row in rows:
        if row["us"]:
            row["gb_per_s"] = row["bytes"] / (row["us"] * 1e3)
            row["of_copy"] = row["gb_per_s"] / copy_gb_per_s


def bandwidth_summary(rows):
    """Over the headline kernels: the bytes-weighted average of their
    fractions of copy bandwidth, and total bytes over total time."""
    timed = [r for r in rows if r["headline"] and r.get("of_copy")]
    if not timed:
        return {}
    total_bytes = sum(r["bytes"] for r in timed)
    total_us = sum(r["us"] for r in timed)
    weighted = sum(r["bytes"] * r["of_copy"] for r in timed) / total_bytes
    return {"kernels": len(timed), "bytes": total_bytes, "us": total_us,
            "weighted_of_copy": weighted,
            "aggregate_gb_per_s": total_bytes / (total_us * 1e3),
            "met": weighted >= GOAL_BANDWIDTH}


def gemm_summary(rows):
    timed = [r for r in rows if r.get("ratio")]
    if not timed:
        return {}
    tejit_us = sum(r["tejit_us"] for r in timed)
    raw_us = sum(r["raw"]["us"] for r in timed)
    worst = max(r["ratio"] for r in timed)
    sustained_us = sum(r["raw"]["sustained_us"] for r in timed)
    return {"gemms": len(rows), "timed": len(timed), "tejit_us": tejit_us,
            "raw_us": raw_us, "total_ratio": tejit_us / raw_us,
            "worst_ratio": worst,
            "met": worst <= GOAL_GEMM_RATIO and len(timed) == len(rows),
            "raw_sustained_us": sustained_us,
            "total_ratio_sustained": tejit_us / sustained_us,
            "worst_ratio_sustained": max(r["ratio_sustained"]
                                         for r in timed)}


# --- one block ------------------------------------------------------------------


def time_block(block, size, args):
    """Every config of a block, timed: tejit's, then the peers'."""
    print(f"== {block.kind}: timing", flush=True)
    configs = []
    for label, recipe in TEJIT_CONFIGS:
        configs.append(guarded(label, run_tejit, block, size, label, recipe,
                               args))
        progress(configs[-1])
    label, recipe = TEJIT_GRAPH
    configs.append(guarded(label, run_tejit, block, size, label, recipe,
                           args, True))
    progress(configs[-1])
    if args.gemm_tuning:
        label, recipe = TEJIT_TUNED
        configs.append(guarded(label, run_tejit, block, size, label, recipe,
                               args, False, args.gemm_tuning))
        progress(configs[-1])
    for label, fp8, compiled in PEERS:
        configs.append(guarded(label, run_peer, block, size, label, fp8,
                               compiled, args))
        progress(configs[-1])
    add_rates(configs, block.train_flops)
    return {"block": block.kind, "layer": block.layer,
            "train_gemm_flops": block.train_flops, "configs": configs}


def profile_block(result, block, size, args, copy_gb_per_s, raw_cache):
    """Adds a profile, with raw GEMM times and kernel bandwidths, to each
    tejit config of a timed block that ran."""
    print(f"== {block.kind}: profiling", flush=True)
    by_label = {c["label"]: c for c in result["configs"]}
    for label, recipe in TEJIT_CONFIGS:
        config = by_label[label]
        if "error" in config:
            continue
        profile = guarded(label, run_tejit_profile, block, size, recipe, args)
        if "error" in profile:
            config["profile_error"] = profile["error"]
            continue
        add_raw_gemms(profile["gemms"], raw_cache, args)
        add_bandwidth(profile["kernels"], copy_gb_per_s)
        profile["gemm_summary"] = gemm_summary(profile["gemms"])
        profile["bandwidth_summary"] = bandwidth_summary(profile["kernels"])
        config["profile"] = profile


def progress(result):
    if "timing" in result:
        print(f"  {result['label']}: {result['timing']['median_ms']:.3f} ms",
              flush=True)


def add_rates(configs, flops):
    """TFLOP/s of every config, and how much faster each tejit FP8 config
    is than it (its time / the tejit config's time)."""
    ms = {c["label"]: c["timing"]["median_ms"]
          for c in configs if "timing" in c}
    for config in configs:
        if config["label"] not in ms:
            continue
        mine = ms[config["label"]]
        config["tflops"] = flops / (mine * 1e-3) / 1e12
        config["tejit_fp8_speedup"] = {label: mine / ms[label]
                                       for label in TEJIT_FP8 if label in ms}


def goals(blocks):
    """The issue's goals, per tejit FP8 config."""
    out = {"mlp_vs_compile_fp8": {}, "gemm_within_5pct": {},
           "kernels_80pct_copy": {}}
    for block in blocks:
        by_label = {c["label"]: c for c in block["configs"]}
        peer = by_label.get(COMPILE_FP8, {})
        for label in TEJIT_FP8:
            if label == TEJIT_TUNED[0] and label not in by_label:
                continue  # no --gemm-tuning
            config = by_label.get(label, {})
            key = f"{block['block']}/{label}"
            # The peer's time over this tejit config's.
            speedup = peer.get("tejit_fp8_speedup", {}).get(label)
            if block["block"] == "LayerNormMLP":
                out["mlp_vs_compile_fp8"][label] = {
                    "speedup": speedup, "goal": GOAL_MLP_SPEEDUP,
                    "met": bool(speedup and speedup >= GOAL_MLP_SPEEDUP)}
            profile = config.get("profile", {})
            out["gemm_within_5pct"][key] = profile.get("gemm_summary", {})
            out["kernels_80pct_copy"][key] = profile.get(
                "bandwidth_summary", {})
        # Graphs against graphs too: each side without its launch gaps.
        graphed_peer = by_label.get(COMPILE_FP8_GRAPHS, {})
        out.setdefault("graphs_vs_graphs", {})[block["block"]] = \
            graphed_peer.get("tejit_fp8_speedup", {}).get(TEJIT_GRAPH[0])
    return out


# --- printing -----------------------------------------------------------------------


def cell(value, spec=".2f"):
    if value is None or value == "":
        return "—"
    return format(value, spec) if isinstance(value, (int, float)) else value


def markdown(headers, rows):
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def mib(nbytes):
    return None if nbytes is None else nbytes / 2**20


def block_table(block):
    headers = ["config", "ms (median)", "min–max ms", "TFLOP/s",
               "peak torch MiB", "tejit-owned MiB", "compile / 1st step s"]
    ran = [label for label in TEJIT_FP8
           if any(c["label"] == label for c in block["configs"])]
    headers += [f"{label} speedup" for label in ran]
    rows = []
    for c in block["configs"]:
        if "error" in c:
            rows.append([c["label"], "FAILED: " + c["error"][:120]] +
                        ["—"] * (len(headers) - 2))
            continue
        t = c["timing"]
        speedups = c.get("tejit_fp8_speedup", {})
        rows.append([c["label"], cell(t["median_ms"], ".3f"),
                     f"{t['min_ms']:.3f}–{t['max_ms']:.3f}",
                     cell(c.get("tflops"), ".0f"),
                     cell(mib(c.get("peak_torch_bytes")), ".0f"),
                     cell(mib(c.get("tejit_device_bytes")), ".0f"),
                     cell(c.get("compile_s", c.get("first_step_s")), ".1f")]
                    + [cell(speedups.get(label), ".2f") for label in ran])
    return markdown(headers, rows)


def profiled(blocks):
    """(block, config, profile) of every profiled tejit config."""
    for block in blocks:
        for config in block["configs"]:
            if config.get("profile"):
                yield block["block"], config["label"], config["profile"]


def breakdown_table(blocks):
    headers = ["block", "config", "GPU span ms", "cuBLASLt ms",
               "generated ms", "memcpy ms (count)", "memset ms (count)",
               "idle ms"]
    rows = []
    for name, label, profile in profiled(blocks):
        b = profile["breakdown"]
        if not b:
            continue
        rows.append([name, label] + [cell(b[k] / 1e3, ".3f") for k in
                                     ("span_us", "library_us",
                                      "generated_us")] +
                    [f"{b['memcpy_us'] / 1e3:.3f} ({b['memcpy_count']:.0f})",
                     f"{b['memset_us'] / 1e3:.3f} ({b['memset_count']:.0f})",
                     cell(b["idle_us"] / 1e3, ".3f")])
    return markdown(headers, rows)


def tflops(flops, us):
    return flops / (us * 1e-6) / 1e12 if us else None


def gemm_table(blocks):
    headers = ["block / config", "step", "M×N×K", "a × b → out", "epilogue",
               "fast acc", "tejit µs", "TFLOP/s", "raw µs", "raw TFLOP/s",
               "tejit/raw", "raw sustained µs", "tejit/sustained",
               "raw differs", "tejit kernel"]
    rows = []
    for name, label, profile in profiled(blocks):
        for r in profile["gemms"]:
            p, raw = r["problem"], r.get("raw", {})
            rows.append([
                f"{name} / {label}", f"{r['function']}#{r['step']}",
                f"{p['m']}×{p['n']}×{p['k']}",
                f"{p['a']} × {p['b']} → {p['out']}",
                ", ".join(r["epilogue"]) or "—",
                "yes" if p["fast_accum"] else "no",
                cell(r["tejit_us"], ".1f"),
                cell(tflops(r["flops"], r["tejit_us"]), ".0f"),
                cell(raw.get("us"), ".1f"),
                cell(tflops(r["flops"], raw.get("us")), ".0f"),
                cell(r.get("ratio"), ".3f"),
                cell(raw.get("sustained_us"), ".1f"),
                cell(r.get("ratio_sustained"), ".3f"),
                raw.get("error", raw.get("note", ""))[:80] or "—",
                " + ".join(k[:48] for k in r["kernels"]) or "—"])
    return markdown(headers, rows)


def kernel_table(blocks):
    headers = ["block / config", "step", "kernel", "grid × block",
               "MiB moved", "µs", "GB/s", "% of copy", "in headline"]
    rows = []
    for name, label, profile in profiled(blocks):
        for r in profile["kernels"]:
            geometry = (f"{r['grid']} × {r['block']}"
                        if r.get("grid") else "—")
            rows.append([f"{name} / {label}", f"{r['function']}#{r['step']}",
                         r["name"], geometry.replace(" ", ""),
                         cell(mib(r["bytes"]), ".2f"), cell(r["us"], ".1f"),
                         cell(r.get("gb_per_s"), ".0f"),
                         cell(100 * r["of_copy"] if r.get("of_copy")
                              else None, ".0f"),
                         "yes" if r["headline"] else "no (< 1 MiB)"])
    return markdown(headers, rows)


def verdict(met):
    return "MET" if met else "NOT met"


def print_goals(report):
    g = report["goals"]
    print("\n## Goals\n")
    for label, item in g["mlp_vs_compile_fp8"].items():
        print(f"- LayerNormMLP, {label} vs {COMPILE_FP8}: "
              f"{cell(item['speedup'], '.2f')}x (goal >= "
              f"{GOAL_MLP_SPEEDUP}x): {verdict(item['met'])}")
    for block, speedup in g.get("graphs_vs_graphs", {}).items():
        print(f"- {block}, {TEJIT_GRAPH[0]} vs {COMPILE_FP8_GRAPHS}: "
              f"{cell(speedup, '.2f')}x")
    for key, s in g["gemm_within_5pct"].items():
        if s:
            print(f"- GEMMs, {key}: worst tejit/raw {s['worst_ratio']:.3f}, "
                  f"all GEMMs {s['total_ratio']:.3f} ({s['timed']}/"
                  f"{s['gemms']} timed; goal <= {GOAL_GEMM_RATIO}): "
                  f"{verdict(s['met'])}; against raw after "
                  f"{RAW_SUSTAIN_S:g} s of back-to-back calls: worst "
                  f"{s['worst_ratio_sustained']:.3f}, all "
                  f"{s['total_ratio_sustained']:.3f}")
    for key, s in g["kernels_80pct_copy"].items():
        if s:
            print(f"- generated kernels >= 1 MiB, {key}: "
                  f"{100 * s['weighted_of_copy']:.0f}% of copy bandwidth "
                  f"(bytes-weighted, {s['kernels']} kernels; aggregate "
                  f"{s['aggregate_gb_per_s']:.0f} GB/s; goal >= "
                  f"{100 * GOAL_BANDWIDTH:.0f}%): {verdict(s['met'])}")


def print_problems(blocks):
    lines = [f"- {block['block']} / {c['label']}: profiling failed: "
             f"{c['profile_error']}"
             for block in blocks for c in block["configs"]
             if "profile_error" in c]
    lines += [f"- {name} / {label}: {p}"
              for name, label, profile in profiled(blocks)
              for p in profile["problems"]]
    if lines:
        print("\n## Profile matching problems\n")
        print("\n".join(lines))


def print_report(report):
    env, copy = report["environment"], report["copy_bandwidth"]
    print(f"\n# tejit block benchmark: {env['device']} "
          f"({env['size']} sizes), {env['date']}\n")
    print(f"torch {env['torch']} (CUDA {env['torch_cuda']}), tejit "
          f"{env['tejit']}; copy bandwidth {copy['gb_per_s']:.0f} GB/s "
          f"(1 GiB y.copy_(x), read + write)")
    print("Peak torch MiB: torch.cuda.max_memory_allocated over the config "
          "(parameters, inputs, outputs, gradients, activations). "
          "tejit-owned MiB: tejit's arena, saved tensors, FP8 state, "
          "workspace and modules, outside PyTorch's allocator (drop in "
          "free device memory over compile and the first step). Speedup "
          "columns: this config's time / the tejit FP8 config's.")
    for block in report["blocks"]:
        print(f"\n## {block['block']}: forward + backward, "
              f"{block['train_gemm_flops'] / 1e12:.3f} TFLOP of GEMMs\n")
        print(block_table(block))
    blocks = report["blocks"]
    print("\n## Where a tejit step's GPU time goes (profiled, median step)\n")
    print(breakdown_table(blocks))
    print("\n## GEMMs: tejit step vs raw cuBLASLt (torch._scaled_mm / "
          "torch.matmul)\n")
    print(gemm_table(blocks))
    print("\n## Generated kernels: bandwidth vs device copy\n")
    print(kernel_table(blocks))
    print_goals(report)
    print_problems(blocks)


# --- main -------------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true",
                        help="hidden 1024, FFN 4096, seq 512 x batch 2")
    parser.add_argument("--gemm-tuning", metavar="FILE",
                        help="a GEMM tuning file (tejit-gemm-algos "
                        "--write-tuning): adds the config '"
                        + TEJIT_TUNED[0] + "', whose program uses it")
    parser.add_argument("--json", metavar="OUT",
                        help="also write every number to this JSON file")
    parser.add_argument("--warmup", type=int, default=10,
                        help="untimed steps before timing (default 10)")
    parser.add_argument("--iters", type=int, default=30,
                        help="individually timed steps (default 30)")
    parser.add_argument("--profile-steps", type=int, default=3,
                        help="tejit steps profiled per config (default 3)")
    parser.add_argument("--compile-mode", default=None,
                        help="torch.compile mode (default: its default)")
    return parser.parse_args()


def environment(args, size_name):
    return {"device": torch.cuda.get_device_name(),
            "capability": list(torch.cuda.get_device_capability()),
            "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "tejit": tejit.version(),
            "tejit_library": tejit._capi.library_path(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "command": " ".join([sys.executable] + sys.argv),
            "size": size_name, "sizes": SIZES[size_name],
            "settings": {"warmup": args.warmup, "iters": args.iters,
                         "rotation": ROTATION,
                         "profile_steps": args.profile_steps,
                         "compile_mode": args.compile_mode}}


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    size_name = "small" if args.small else "full"
    try:
        env = environment(args, size_name)
    except (tejit.TejitError, tejit.LibraryNotFoundError) as error:
        print(f"cannot use tejit: {error}")
        return 1
    print(f"{env['device']}, torch {env['torch']}, tejit {env['tejit']} "
          f"({env['tejit_library']}), {size_name} sizes", flush=True)
    size, blocks = SIZES[size_name], make_blocks(SIZES[size_name])
    report = {"environment": env, "copy_bandwidth": copy_bandwidth(args)}
    # Every config is timed before anything is profiled: once the profiler
    # has run, CUPTI may keep adding to every launch in this process.
    report["blocks"] = [time_block(block, size, args) for block in blocks]
    raw_cache = {}
    for result, block in zip(report["blocks"], blocks):
        profile_block(result, block, size, args,
                      report["copy_bandwidth"]["gb_per_s"], raw_cache)
    report["goals"] = goals(report["blocks"])
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
