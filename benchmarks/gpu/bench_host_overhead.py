#!/usr/bin/env python3
"""Host time of a tejit.pytorch call: how long Python and the C API take to
issue one TransformerLayer forward (inference) or training step, at token
counts small enough that the GPU waits for the host (serving, small
micro-batches).

    python3 benchmarks/gpu/bench_host_overhead.py [--seq 128] [--batch 1]
        [--iters 200] [--cprofile N] [--graphs] [--split]
    (after `source tools/scripts/gpu-env.sh` and PYTHONPATH=python)

Rows: tejit FP8 (DelayedScaling HYBRID) and bf16, inference (eval mode,
torch.no_grad()) and training (forward + backward); PyTorch's bf16 layer
with SDPA (transformer_peers, eager) for scale. Per row: host ms per call
(perf_counter over `iters` calls issued back to back, before the
synchronize); loop ms per call (CUDA events over the same calls: what a
loop of calls takes); device ms per call (20 calls issued while the GPU
sleeps, then timed by events as they run back to back: the GPU's own
time). Loop time near the host time and above the device time: the loop
is host-bound. --cprofile N prints the N
functions with the most own time over the tejit FP8 inference and training
calls (cProfile; the calls are slower under it).

--graphs times inference forwards captured in CUDA graphs instead (serving
with graphs: no host time per layer), replayed: tejit FP8 captured as is
(the graph casts the weights at every replay), tejit FP8 captured with
is_first_microbatch=False (the graph reads the weight casts kept by the
eager forward before it), tejit bf16, PyTorch's bf16 layer, and
torch.compile FP8 (torch._scaled_mm, weights cast at every call) with
mode="reduce-overhead". --split times tejit FP8's inference forward as a
module call and as the bare C call it makes (tejit_forward on prebuilt
pointer arrays): what the Python costs and what the runtime costs.
"""
import argparse
import contextlib
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import transformer_peers as peers  # noqa: E402

HIDDEN, FFN, HEADS = 4096, 16384, 32


def tejit_layer(fp8):
    import tejit.pytorch as te
    from tejit.common import recipe
    layer = te.TransformerLayer(HIDDEN, FFN, HEADS, hidden_dropout=0.0,
                                attention_dropout=0.0,
                                params_dtype=torch.bfloat16)
    fp8_recipe = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                       amax_history_len=16,
                                       amax_compute_algo="max")
    return layer, lambda: te.fp8_autocast(enabled=fp8,
                                          fp8_recipe=fp8_recipe)


def peer_layer(fp8):
    layer = peers.make_layer(HIDDEN, FFN, HEADS, attention="sdpa", fp8=fp8,
                             dtype=torch.bfloat16, dropout=0.0)
    return layer, contextlib.nullcontext


def make_call(layer, context, x, training):
    if training:
        layer.train()
        dy = torch.randn_like(x)

        def call():
            with context():
                y = layer(x)
            y.backward(dy)
    else:
        layer.eval()

        def call():
            with torch.no_grad(), context():
                return layer(x)
    return call


# Calls issued behind a GPU sleep for the device-time measurement: few
# enough that their launches fit the launch queue.
QUEUED_CALLS = 20
SLEEP_CYCLES = 200_000_000


def time_calls(call, iters):
    """(host ms per call, GPU ms per call back to back, GPU ms per call
    with the queue full). The second is what a loop of calls takes; the
    third is the device's own time: the calls are issued while the GPU
    sleeps, then run without waiting for the host."""
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    start_event, end_event = (torch.cuda.Event(enable_timing=True)
                              for _ in range(2))
    start_event.record()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    host = (time.perf_counter() - start) * 1e3 / iters
    end_event.record()
    torch.cuda.synchronize()
    loop = start_event.elapsed_time(end_event) / iters
    torch.cuda._sleep(SLEEP_CYCLES)
    start_event.record()
    for _ in range(QUEUED_CALLS):
        call()
    end_event.record()
    torch.cuda.synchronize()
    device = start_event.elapsed_time(end_event) / QUEUED_CALLS
    return host, loop, device


def graphed_forward(layer, context, x, kwargs):
    """A replay function of `layer`'s inference forward on `x` captured in
    a CUDA graph, after an eager forward on the capture stream (tejit:
    compiles, and casts the weights, which is_first_microbatch=False
    captures reading)."""
    layer.eval()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.no_grad(), context():
        layer(x)
        with torch.cuda.graph(graph, stream=stream):
            layer(x, **kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    return graph.replay


def compiled_fp8_forward(layer, context, x, kwargs):
    """torch.compile(mode="reduce-overhead") of the FP8 peer's inference
    forward (its own CUDA graphs)."""
    layer.eval()
    compiled = torch.compile(layer, mode="reduce-overhead")

    def call():
        with torch.no_grad():
            return compiled(x)
    return call


def main_split(args):
    """Host time of a tejit FP8 inference forward split into the module's
    Python and the C call (tejit_forward with prebuilt pointer arrays,
    the same program, inputs and outputs)."""
    import tejit
    from tejit import _capi
    torch.manual_seed(0)
    layer, context = tejit_layer(True)
    x = torch.randn(args.seq, args.batch, HIDDEN, device="cuda",
                    dtype=torch.bfloat16)
    module_call = make_call(layer, context, x, False)
    module_call()
    compiled = next(c for c in layer._programs.values() if not c.training)
    seen = {}
    infer = compiled.infer

    def spy(arguments):
        seen["arguments"] = arguments
        return infer(arguments)
    compiled.infer = spy
    module_call()
    compiled.infer = infer
    program = compiled.program
    outputs = compiled.new_outputs(x.device)
    inputs = program._pointers("inputs", program.inputs, seen["arguments"])
    outs = program._pointers("outputs", program.outputs, outputs)
    stream = tejit._stream_handle(torch.cuda.current_stream())
    forward = _capi.lib().tejit_forward
    handle = program.handle

    def c_call():
        forward(handle, stream, inputs, outs)
    for label, call in (("module call", module_call),
                        ("C call (tejit_forward)", c_call)):
        host, loop, device = time_calls(call, args.iters)
        print(f"| tejit FP8 inference forward, {label} | {host:.3f} | "
              f"{loop:.3f} | {device:.3f} |", flush=True)
    return 0


def main_graphs(args):
    rows = [("tejit FP8, graph casting at every replay", tejit_layer, True,
             {}, graphed_forward),
            ("tejit FP8, graph with is_first_microbatch=False",
             tejit_layer, True, {"is_first_microbatch": False},
             graphed_forward),
            ("tejit bf16, graph", tejit_layer, False, {}, graphed_forward),
            ("PyTorch bf16 + SDPA, graph", peer_layer, False, {},
             graphed_forward),
            ("torch.compile FP8 (_scaled_mm) + SDPA, reduce-overhead",
             peer_layer, True, {}, compiled_fp8_forward)]
    for label, build, fp8, kwargs, capture in rows:
        torch.manual_seed(0)
        layer, context = build(fp8)
        x = torch.randn(args.seq, args.batch, HIDDEN, device="cuda",
                        dtype=torch.bfloat16)
        call = capture(layer, context, x, kwargs)
        host, loop, device = time_calls(call, args.iters)
        print(f"| {label}, inference forward | {host:.3f} | {loop:.3f} | "
              f"{device:.3f} |", flush=True)
        del layer, call, x
        torch.cuda.empty_cache()
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument("--graphs", action="store_true",
                        help="time inference forwards replayed from CUDA "
                             "graphs instead")
    parser.add_argument("--split", action="store_true",
                        help="split tejit FP8's inference forward into the "
                             "module's Python and the C call")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch")
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"TransformerLayer {HIDDEN}/{FFN}/{HEADS} heads, seq {args.seq}, "
          f"batch {args.batch} ({args.seq * args.batch} tokens), "
          f"{args.iters} calls per row\n")
    print("| row | host ms / call | loop ms / call | device ms / call "
          "(queue full) |")
    print("|---|---|---|---|")
    if args.graphs:
        return main_graphs(args)
    if args.split:
        return main_split(args)
    rows = [("tejit FP8", tejit_layer, True), ("tejit bf16", tejit_layer,
                                               False),
            ("PyTorch bf16 + SDPA (eager)", peer_layer, False)]
    profiled = []
    for training in (False, True):
        for label, build, fp8 in rows:
            torch.manual_seed(0)
            layer, context = build(fp8)
            x = torch.randn(args.seq, args.batch, HIDDEN, device="cuda",
                            dtype=torch.bfloat16, requires_grad=training)
            call = make_call(layer, context, x, training)
            host, loop, device = time_calls(call, args.iters)
            what = "training step" if training else "inference forward"
            print(f"| {label}, {what} | {host:.3f} | {loop:.3f} | "
                  f"{device:.3f} |", flush=True)
            if args.cprofile and label == "tejit FP8":
                profiled.append((what, call))
            del layer, call, x
            torch.cuda.empty_cache()
    for what, call in profiled:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.iters):
            call()
        torch.cuda.synchronize()
        profile.disable()
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text)
        stats.sort_stats("tottime").print_stats(args.cprofile)
        stats.sort_stats("cumulative").print_stats(args.cprofile)
        print(f"\n## cProfile: tejit FP8 {what}, {args.iters} calls, by own "
              f"and by cumulative time\n")
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
