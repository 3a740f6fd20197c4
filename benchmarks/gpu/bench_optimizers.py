#!/usr/bin/env python3
"""What an optimizer step of tejit's FusedAdam costs, against PyTorch's.

    python3 benchmarks/gpu/bench_optimizers.py [--rounds 3] [--hold 1]
        [--iters 10]

The parameters of the seed TransformerLayer (hidden 4096, FFN 16384, 32
heads: 201 M), bf16 with bf16 gradients, AdamW (lr 1e-4, weight decay
0.01). Rows, in the same process on the same GPU:
  tejit-master   te.optimizers.FusedAdam(master_weights=True): float32
                 masters in the optimizer, written back to the bf16
                 parameters (Megatron-LM's use of TE's FusedAdam)
  torch-master   the same with PyTorch: torch.optim.AdamW(fused=True) over
                 float32 master copies, the bf16 gradients cast into the
                 masters' .grad, then the masters copied into the bf16
                 parameters (torch._foreach_copy_)
  tejit-fp32     te.optimizers.FusedAdam over float32 parameters and
                 gradients (no masters)
  torch-fp32     torch.optim.AdamW(fused=True) over the same
Each row is held --hold seconds before every timed round; rounds rotate
the order; medians are printed.
"""
import argparse
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

import bench_sustained  # noqa: E402 (its hold and timed loops)
import tejit.pytorch as te  # noqa: E402

LR, WD = 1e-4, 0.01


def layer_parameters(dtype):
    torch.manual_seed(0)
    layer = te.TransformerLayer(4096, 16384, 32, params_dtype=torch.bfloat16)
    params = [torch.nn.Parameter(p.detach().to(dtype))
              for p in layer.parameters()]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return params


def tejit_row(dtype, master):
    params = layer_parameters(dtype)
    opt = te.optimizers.FusedAdam(params, lr=LR, weight_decay=WD,
                                  master_weights=master)
    return opt.step


def torch_master_row():
    params = layer_parameters(torch.bfloat16)
    masters = [torch.nn.Parameter(p.detach().float()) for p in params]
    for m in masters:
        m.grad = torch.empty_like(m)
    opt = torch.optim.AdamW(masters, lr=LR, weight_decay=WD, fused=True)

    def step():
        torch._foreach_copy_([m.grad for m in masters],
                             [p.grad for p in params])
        opt.step()
        torch._foreach_copy_([p.data for p in params],
                             [m.data for m in masters])
    return step


def torch_fp32_row():
    params = layer_parameters(torch.float32)
    return torch.optim.AdamW(params, lr=LR, weight_decay=WD,
                             fused=True).step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.0)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    makers = {"tejit-master": lambda: tejit_row(torch.bfloat16, True),
              "torch-master": torch_master_row,
              "tejit-fp32": lambda: tejit_row(torch.float32, False),
              "torch-fp32": torch_fp32_row}
    rows = [SimpleNamespace(name=name, step=make(), times=[])
            for name, make in makers.items()]
    bench_sustained.interleaved_medians(rows, args.rounds, args.hold,
                                        args.iters, lambda row: row.name)
    count = sum(p.numel() for p in layer_parameters(torch.bfloat16))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{count / 1e6:.0f} M parameters (the seed TransformerLayer's)")
    for row in rows:
        print(f"{row.name:13s} {statistics.median(row.times):7.3f} ms "
              f"(rounds {', '.join(f'{t:.3f}' for t in row.times)})")


if __name__ == "__main__":
    main()
