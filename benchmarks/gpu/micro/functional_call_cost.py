#!/usr/bin/env python3
"""Host time of one call of a tejit functional op (TE's router fusion at
DeepSeek-V3's size), layer by layer, against PyTorch ops of similar reach:

    python3 benchmarks/gpu/micro/functional_call_cost.py [--calls 2000]

Each line is the median over 5 rounds of `calls` back-to-back calls, in
microseconds of host time per call (the GPU work of each is ~10 us, so
the host is what a loop of them waits on):
  c_api        tejit_forward with prebuilt pointer arrays (the C side)
  program      Program.forward from tensors (pointer arrays, stream)
  stream       torch.cuda.current_stream(device) alone
  empty        torch.empty of one [T, E] output
  router       te.fused_topk_with_score_function under no_grad
  router+bwd   the op and its backward through autograd
  torch.topk   torch.topk(logits, 8) (one PyTorch op)
  torch fwd+bwd  softmax + topk + gather + backward (a small eager chain)
"""
import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit import _capi  # noqa: E402
from tejit.pytorch import _weight_casts  # noqa: E402


def per_call_us(function, calls):
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            function()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    tokens, experts = 8192, 256
    logits = torch.randn(tokens, experts, device="cuda", dtype=torch.bfloat16)
    bias = torch.zeros(experts, device="cuda")

    def router():
        return te.fused_topk_with_score_function(
            logits, 8, False, 8, 4, 2.5, "sigmoid", bias)
    with torch.no_grad():
        router()
    program = next(p for key, p in _weight_casts._programs.items()
                   if key[0] == "router")
    outputs = [torch.empty(tokens, experts, dtype=torch.bfloat16,
                           device="cuda"),
               torch.empty(tokens, experts, dtype=torch.bool, device="cuda"),
               torch.empty(tokens, experts, dtype=torch.float32,
                           device="cuda")]
    inputs = [logits, bias]
    stream = torch.cuda.current_stream()
    in_array = program._pointers("inputs", program.inputs, inputs)
    out_array = program._pointers("outputs", program.outputs, outputs)
    handle, raw_stream = program.handle, tejit._stream_handle(stream)
    library = _capi.lib()

    def c_api():
        library.tejit_forward(handle, raw_stream, in_array, out_array)

    def router_backward():
        x = logits.detach().requires_grad_()
        probs, _ = te.fused_topk_with_score_function(
            x, 8, False, 8, 4, 2.5, "sigmoid", bias)
        probs.backward(torch.ones_like(probs))

    def torch_chain():
        x = logits.detach().requires_grad_()
        scores = torch.softmax(x.float(), -1)
        top, index = torch.topk(scores, 8)
        top.backward(torch.ones_like(top))

    rows = {
        "c_api": c_api,
        "program": lambda: program.forward(stream, inputs, outputs),
        "stream": lambda: torch.cuda.current_stream(logits.device),
        "empty": lambda: torch.empty(tokens, experts, device="cuda"),
        "router": router,
        "router+bwd": router_backward,
        "torch.topk": lambda: torch.topk(logits, 8),
        "torch fwd+bwd": torch_chain,
    }
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: host "
          f"us per call (median of 5 x {args.calls})")
    for name, function in rows.items():
        with torch.no_grad() if name in ("router", "program",
                                         "c_api") else contextlib.nullcontext():
            print(f"{name:>14} {per_call_us(function, args.calls):8.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
