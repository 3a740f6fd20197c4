#!/usr/bin/env python3
"""What FP8 primary weights (fp8_model_init, TE's) change: step time, peak
memory and parameter memory, tejit with and without them, in one process.

    python3 benchmarks/gpu/bench_fp8_model_init.py [--size seed|small]
        [--iters 20] [--warmup 5] [--rounds 3] [--hold 1.0]
        [--blocks transformer-train transformer-infer mlp-train]
        [--interleaved-qkv] [--sgd | --master]

Blocks (--size seed; --size small: hidden 1024, FFN 4096, 16 heads, seq
512, batch 4, LayerNormMLP 2048 tokens), each built twice, plainly and
inside fp8_model_init(recipe=DelayedScaling(HYBRID)), bf16 parameters,
run under fp8_autocast with the same recipe (history 1024, "max"):
  transformer-train  the seed TransformerLayer (hidden 4096, FFN 16384, 32
                     heads, seq 2048, batch 4, fuse_qkv_params=True, rows q
                     | k | v unless --interleaved-qkv, TE's default dropout
                     0.1): forward + backward of a fixed output gradient
                     (with --sgd also an SGD step on the parameters: with
                     FP8 weights the weight cast moves there, dequantize,
                     update, requantize; with --master an SGD step on
                     float32 master weights, copied into the parameters,
                     as Megatron-LM keeps them: one cast per FP8 weight)
  transformer-infer  the same layer in eval mode, forward under
                     torch.no_grad()
  mlp-train          LayerNormMLP 4096/16384, 8192 tokens, forward +
                     backward
The two rows of a block are alive together and timed in --rounds rounds,
the order rotated, each timing after --hold seconds of the row's own steps
(the GPU's power cap: bench_main_grad.py); per round the median of --iters
steps (a CUDA event after each), then the median over rounds.

Memory, per row, measured when it is built and warmed up (torch's cache
emptied first, so a row does not reuse the other's blocks):
  params MiB    torch.cuda.memory_allocated grown by building the module
                (FP8 GEMM weights 1 byte per element, else 2)
  GEMM w. MiB   the GEMM weights' storage (FP8 data, or the bf16 tensors)
  peak MiB      torch.cuda.max_memory_allocated over the warm-up steps,
                above what was allocated before the row (parameters
                included)
  device MiB    the drop in the device's free memory (mem_get_info) over
                building and warming up: also what tejit allocates outside
                torch (its arena, the FP8 state, the weight casts that
                programs keep for plain weights, cuBLASLt workspaces)
Prints a markdown table and the speed-up of FP8 weights per block.
"""
import argparse
import dataclasses
import datetime
import gc
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
MIB = 2 ** 20
SIZES = {
    "seed": {"hidden": 4096, "ffn": 16384, "heads": 32, "seq": 2048,
             "batch": 4, "mlp_tokens": 8192},
    "small": {"hidden": 1024, "ffn": 4096, "heads": 16, "seq": 512,
              "batch": 4, "mlp_tokens": 2048},
}
BLOCKS = ("transformer-train", "transformer-infer", "mlp-train")
# (A tejit without FP8 weights still runs the plain rows.)
FLOAT8_TENSOR = getattr(te, "Float8Tensor", ())


def fp8_recipe():
    return recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                 amax_history_len=1024,
                                 amax_compute_algo="max")


@dataclasses.dataclass
class Row:
    block: str
    fp8_weights: bool
    step: object          # a zero-argument step
    keep: object          # what the step needs alive
    params_bytes: int
    gemm_weight_bytes: int
    peak_bytes: int
    device_bytes: int
    times: list = dataclasses.field(default_factory=list)

    @property
    def label(self):
        return "fp8_model_init" if self.fp8_weights else "plain"


def build_module(block, size, fp8_weights, interleaved_qkv):
    def make():
        if block.startswith("mlp"):
            return te.LayerNormMLP(size["hidden"], size["ffn"],
                                   params_dtype=BF16)
        return te.TransformerLayer(
            size["hidden"], size["ffn"], size["heads"], params_dtype=BF16,
            fuse_qkv_params=True, qkv_weight_interleaved=interleaved_qkv)

    if not fp8_weights:
        return make()
    with te.fp8_model_init(enabled=True, recipe=fp8_recipe()):
        return make()


def gemm_weight_bytes(module):
    """The GEMM weights' storage: FP8 data (Float8Tensor) or the tensor."""
    total = 0
    for p in module.parameters():
        if isinstance(p, FLOAT8_TENSOR):
            total += p._data.numel() * p._data.element_size()
        elif p.dim() == 2:
            total += p.numel() * p.element_size()
    return total


def make_step(block, module, size, sgd):
    """The row's step and what it keeps alive."""
    if block.startswith("mlp"):
        shape = (size["mlp_tokens"], size["hidden"])
    else:
        shape = (size["seq"], size["batch"], size["hidden"])
    scaling = fp8_recipe()
    if block.endswith("infer"):
        module.eval()
        x = torch.randn(*shape, device="cuda", dtype=BF16)

        def infer():
            with torch.no_grad(), te.fp8_autocast(enabled=True,
                                                  fp8_recipe=scaling):
                module(x)

        return infer, (module, x)
    x = torch.randn(*shape, device="cuda", dtype=BF16, requires_grad=True)
    dy = torch.randn(*shape, device="cuda", dtype=BF16)
    # A tiny learning rate: the weights change (every requantize runs)
    # without drifting over the steps.
    params = list(module.parameters())
    # --master: float32 master weights (Megatron-LM's main params), which
    # the optimizer updates; each step copies them into the parameters (a
    # cast of each weight: quantize_ for FP8 weights).
    masters = ([p.detach().float().clone() for p in params]
               if sgd == "master" else None)
    optimizer = (torch.optim.SGD(masters if masters else params, lr=1e-7)
                 if sgd else None)

    def train():
        with te.fp8_autocast(enabled=True, fp8_recipe=scaling):
            out = module(x)
        out.backward(dy)
        if masters:
            for master, p in zip(masters, params):
                master.grad = p.grad.float()
        if optimizer is not None:
            optimizer.step()
        if masters:
            with torch.no_grad():
                for master, p in zip(masters, params):
                    p.copy_(master)
                    master.grad = None
        for p in module.parameters():
            p.grad = None
        x.grad = None

    return train, (module, x, dy, optimizer)


def release_memory():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def build_row(block, fp8_weights, size, args):
    """Builds and warms up one row, measuring its memory."""
    release_memory()
    torch.manual_seed(0)
    allocated = torch.cuda.memory_allocated()
    free = torch.cuda.mem_get_info()[0]
    module = build_module(block, size, fp8_weights, args.interleaved_qkv)
    torch.cuda.synchronize()
    params_bytes = torch.cuda.memory_allocated() - allocated
    step, keep = make_step(block, module, size, args.sgd)
    torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    return Row(block=block, fp8_weights=fp8_weights, step=step, keep=keep,
               params_bytes=params_bytes,
               gemm_weight_bytes=gemm_weight_bytes(module),
               peak_bytes=torch.cuda.max_memory_allocated() - allocated,
               device_bytes=free - torch.cuda.mem_get_info()[0])


def run_block(block, size, args):
    """Both rows of `block` (plain first), timed; a row that fails is
    reported and left out."""
    rows = []
    for fp8_weights in (False, True):
        try:
            rows.append(build_row(block, fp8_weights, size, args))
        except Exception as error:  # noqa: BLE001 - report, go on
            print(f"{block} {'fp8_model_init' if fp8_weights else 'plain'}: "
                  f"FAILED: {type(error).__name__}: {error}", flush=True)
    bench_sustained.interleaved_medians(
        rows, args.rounds, args.hold, args.iters,
        lambda row: f"{block:18s} {row.label:15s}")
    for row in rows:  # what is printed stays; the modules go
        row.step = row.keep = None
    release_memory()
    return rows


def table(results):
    lines = ["| block | weights | ms (median) | speed-up | rounds (ms) | "
             "peak MiB | device MiB | params MiB | GEMM w. MiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for block, rows in results:
        plain = next((r for r in rows if not r.fp8_weights), None)
        for row in rows:
            ms = statistics.median(row.times)
            speedup = (f"{statistics.median(plain.times) / ms:.3f}x"
                       if plain is not None else "-")
            rounds = ", ".join(f"{t:.2f}" for t in row.times)
            lines.append(
                f"| {block} | {row.label} | {ms:.3f} | {speedup} | "
                f"{rounds} | {row.peak_bytes / MIB:.0f} | "
                f"{row.device_bytes / MIB:.0f} | "
                f"{row.params_bytes / MIB:.1f} | "
                f"{row.gemm_weight_bytes / MIB:.1f} |")
    return "\n".join(lines)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="seed")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.0,
                        help="seconds of a row's steps before each timing")
    parser.add_argument("--blocks", nargs="+", choices=BLOCKS,
                        default=list(BLOCKS))
    parser.add_argument("--interleaved-qkv", action="store_true",
                        help="TE's default QKV layout (the FP8 rows are "
                        "permuted into q | k | v per call)")
    parser.add_argument("--sgd", action="store_const", const="sgd",
                        dest="sgd",
                        help="an SGD step on the parameters in the training "
                        "rows (FP8 weights: dequantize, update, requantize)")
    parser.add_argument("--master", action="store_const", const="master",
                        dest="sgd",
                        help="an SGD step on float32 master weights, copied "
                        "into the parameters (Megatron-LM's way; FP8 "
                        "weights: one cast each)")
    return parser.parse_args()


def main():
    args = parse_args()
    size = SIZES[args.size]
    # The CUDA context and cuBLAS workspaces before the first row.
    a = torch.randn(256, 256, device="cuda", dtype=BF16)
    (a @ a).sum().item()
    del a
    results = [(block, run_block(block, size, args))
               for block in args.blocks]
    print(f"\n# fp8_model_init: {torch.cuda.get_device_name()}, tejit "
          f"{tejit.version()[:12]}, torch {torch.__version__}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}")
    qkv = "interleaved" if args.interleaved_qkv else "q|k|v"
    print(f"size {args.size} ({size}), FP8 DelayedScaling HYBRID (history "
          f"1024, max), QKV rows {qkv}, "
          f"{ {None: 'no optimizer step', 'sgd': 'SGD on the parameters', 'master': 'SGD on float32 masters copied into the parameters'}[args.sgd]}, {args.rounds} rounds "
          f"x {args.iters} steps after {args.warmup} warm-up; command: "
          f"{' '.join(sys.argv)}\n")
    print(table(results))
    print("\nspeed-up: the plain row's median ms / this row's; peak: torch "
          "allocations over the warm-up steps, parameters included; device: "
          "the drop in free device memory (tejit's own allocations too)")


if __name__ == "__main__":
    main()
