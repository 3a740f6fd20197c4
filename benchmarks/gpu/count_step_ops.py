"""Counts the GPU activities of one training step of a compiled spec
(kernels, memcpys, memsets) with torch.profiler, per function call.

    python3 benchmarks/gpu/count_step_ops.py examples/layernorm_mlp.yaml

The device copies and memsets of a step are what the FP8 bookkeeping
costs besides its kernels: cuBLASLt's staged scalars, state copy-backs,
saved scale_inv snapshots, amax zeroing (benchmarks/RESULTS.md).
"""
import collections
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import bench_layers  # noqa: E402 (puts python/ on the path)
import tejit  # noqa: E402

WARMUP_STEPS = 3
LABELS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

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

    for _ in range(WARMUP_STEPS):
        step()
    # The block benchmark's profiler: the trace's own categories, one step
    # after a marker kernel.
    activities = bench_layers.profile_activities(lambda i: step(), 1)[0]
    counts, micros = collections.Counter(), collections.Counter()
    for activity in activities:
        counts[LABELS[activity.category]] += 1
        micros[LABELS[activity.category]] += activity.dur
    print(f"{sys.argv[1]}: one training step: " + ", ".join(
        f"{counts[c]} {c}s ({micros[c]:.1f} us)"
        for c in ("kernel", "memcpy", "memset")))
    # The update ran in place: the state moved on from TE's initial scales.
    for index, info in enumerate(program.meta):
        if info.name.endswith(".scale"):
            values = torch.frombuffer(bytearray(program.meta_get(
                index, stream)), dtype=torch.float32)
            print(f"{info.name} after {WARMUP_STEPS + 1} steps: "
                  f"{values.tolist()}")


if __name__ == "__main__":
    main()
