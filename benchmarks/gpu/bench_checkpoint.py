"""What activation checkpointing (tejit.pytorch.checkpoint) trades: a stack
of the seed TransformerLayer (hidden 4096, FFN 16384, 32 heads, seq 2048,
dropout 0.1, no mask), FP8 DelayedScaling HYBRID, one training step
(forward + backward of a fixed output gradient) with every layer plain and
with every layer under te.checkpoint, in the same process:

    python3 benchmarks/gpu/bench_checkpoint.py [--layers 4] [--batch 4]

Prints ms per step (CUDA events, mean of 10 after 5 warm-up steps) and
PyTorch's peak allocated memory over the timed steps above what the
parameters and inputs take (what the forward keeps for the backward, and
the gradients, live there; tejit's own arena and FP8 state are outside it
and the same in both).
"""
import argparse
import datetime
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

WARMUP, ITERS = 5, 10


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(1234)
    layers = torch.nn.ModuleList(
        te.TransformerLayer(4096, 16384, 32, hidden_dropout=0.1,
                            attention_dropout=0.1,
                            self_attn_mask_type="no_mask",
                            params_dtype=torch.bfloat16)
        for _ in range(args.layers))
    fp8 = recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                amax_history_len=16, amax_compute_algo="max")
    x = torch.randn(2048, args.batch, 4096, device="cuda",
                    dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)

    def step(checkpointed):
        x.grad = None
        for p in layers.parameters():
            p.grad = None
        with te.fp8_autocast(enabled=True, fp8_recipe=fp8):
            h = x
            for layer in layers:
                h = te.checkpoint(layer, h) if checkpointed else layer(h)
        h.backward(dy)

    print(f"# activation checkpointing: {args.layers} x TransformerLayer, "
          f"batch {args.batch}, {torch.cuda.get_device_name()}, tejit "
          f"{tejit.version()[:12]}, torch {torch.__version__}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}\n")
    print("| layers | ms/step | peak allocated GiB |")
    print("|---|---|---|")
    for checkpointed in (False, True):
        for _ in range(WARMUP):
            step(checkpointed)
        x.grad = None
        for p in layers.parameters():
            p.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()  # parameters, x, dy
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for _ in range(ITERS):
            step(checkpointed)
        end.record()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
        name = "te.checkpoint each" if checkpointed else "plain"
        print(f"| {name} | {start.elapsed_time(end) / ITERS:.2f} | "
              f"{peak:.2f} |", flush=True)


if __name__ == "__main__":
    main()
