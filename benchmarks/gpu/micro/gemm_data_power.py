#!/usr/bin/env python3
"""Does an FP8 GEMM's time at the power cap depend on its data?

    python3 benchmarks/gpu/micro/gemm_data_power.py [--rounds 4] [--hold 2]
        [--iters 50]

One 8192 x 16384 x 4096 E4M3 GEMM (the fc1 forward of the quickstart
LayerNormMLP, bf16 output, fast accumulation) through torch._scaled_mm,
with the weight operand drawn from different distributions, each quantized
the way the layers quantize (scale = 448 / amax): N(0, 1) (tejit's block
benchmark data), U(-1, 1) (nn.Linear's kaiming-uniform init, up to its
factor), and all zeros except a sparse few (a lower bound). The activation
is N(0, 1) throughout. Each variant is timed in every round after --hold
seconds of its own calls; the median ms per round and the power / clock
from nvidia-smi are printed.
"""
import power_rounds
from power_rounds import K, M, N, torch


def variants():
    weights = {
        "normal": torch.randn(N, K, device="cuda"),
        "uniform": torch.rand(N, K, device="cuda") * 2 - 1,
        "sparse": torch.where(torch.rand(N, K, device="cuda") < 0.01,
                              torch.randn(N, K, device="cuda"),
                              torch.zeros(N, K, device="cuda")),
    }
    return {name: power_rounds.fc1_gemm(w) for name, w in weights.items()}


def main():
    parser = power_rounds.arguments(__doc__, "/tmp/gemm-data-power.csv",
                                    rounds=4)
    parser.set_defaults(iters=50)
    args = parser.parse_args()
    print(torch.cuda.get_device_name())
    for row in power_rounds.run(variants(), args):
        print(f"{power_rounds.describe(row)}  "
              f"{2 * M * N * K / row.ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
