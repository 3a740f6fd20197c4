"""Counts the GPU activities of one training step of a compiled spec
(kernels, memcpys, memsets) with torch.profiler, per function call.

    python3 benchmarks/gpu/count_step_ops.py examples/layernorm_mlp.yaml

The device copies and memsets of a step are what the FP8 bookkeeping
costs besides its kernels: cuBLASLt's staged scalars, state copy-backs,
saved scale_inv snapshots, amax zeroing (benchmarks/RESULTS.md).
"""
import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "python")
import tejit  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16,
          "f32": torch.float32}


def tensors(infos, device):
    return [torch.randn(i.shape, device=device).to(DTYPES[i.dtype])
            if i.dtype in DTYPES else
            torch.zeros(i.nbytes, dtype=torch.uint8, device=device)
            for i in infos]


def main():
    program = tejit.Program.compile(sys.argv[1], training=True)
    device = torch.device("cuda")
    inputs = tensors(program.inputs, device)
    outputs = tensors(program.outputs, device)
    grad_outputs = tensors(program.grad_outputs, device)
    grad_inputs = tensors(program.grad_inputs, device)
    stream = torch.cuda.current_stream()

    def step():
        program.forward(stream, inputs, outputs)
        program.backward(stream, grad_outputs, grad_inputs)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    counts, micros = collections.Counter(), collections.Counter()
    for event in prof.events():
        kind = str(event.device_type)
        if "CUDA" not in kind:
            continue
        name = event.name.lower()
        category = ("memcpy" if "memcpy" in name else
                    "memset" if "memset" in name else "kernel")
        counts[category] += 1
        micros[category] += event.device_time_total
    print(f"{sys.argv[1]}: one training step: " + ", ".join(
        f"{counts[c]} {c}s ({micros[c]:.1f} us)"
        for c in ("kernel", "memcpy", "memset")))
    # The update ran in place: the state moved on from TE's initial scales.
    for index, info in enumerate(program.meta):
        if info.name.endswith(".scale"):
            values = torch.frombuffer(bytearray(program.meta_get(
                index, stream)), dtype=torch.float32)
            print(f"{info.name} after 4 steps: {values.tolist()}")

if __name__ == "__main__":
    main()
