#!/usr/bin/env python3
"""Does running a GEMM and its consumer in row chunks that fit L2 save
energy at the power cap?

    python3 benchmarks/gpu/micro/l2_chunk_power.py [--rounds 3] [--hold 2]

In the LayerNormMLP step two bf16 [8192, 16384] GEMM outputs are read back
once by a memory-bound kernel: fc1's output by the GELU + FP8 cast (forward)
and fc2's data gradient by the dGELU + cast (backward; it also reads the
saved fc1 output). Run whole, each output (256 MiB) goes to HBM and comes
back. Run in chunks of R token rows (GEMM on R rows, then the consumer on
them), a chunk's output (R x 16384 x 2 bytes) can still be in the 50 MB L2
when the consumer reads it. At the cap a step's time is its energy
(overlap_power.py), so the question is whether the HBM reads saved are
worth more than the chunked GEMMs lose.

Variants: `gemm` (the fc1-shaped FP8 GEMM alone, whole and chunked), `fwd`
(GEMM + a kernel reading its output and writing FP8), `bwd` (GEMM + a
kernel reading its output and a saved bf16 tensor of the same shape,
writing FP8), each whole and in chunks of --chunks rows; every chunk writes
its own rows of one full-size output, as a saved activation would be.
"""
import triton
import triton.language as tl

import power_rounds
from power_rounds import E4M3, K, M, N, torch

BLOCK = 4096


@triton.jit
def _cast_kernel(c, out, n, scale, BLOCK: tl.constexpr):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = index < n
    value = tl.load(c + index, mask=mask).to(tl.float32) * scale
    tl.store(out + index, value.to(tl.float8e4nv), mask=mask)


@triton.jit
def _grad_cast_kernel(c, saved, out, n, scale, BLOCK: tl.constexpr):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = index < n
    value = (tl.load(c + index, mask=mask).to(tl.float32) *
             tl.load(saved + index, mask=mask).to(tl.float32) * scale)
    tl.store(out + index, value.to(tl.float8e4nv), mask=mask)


def build(chunks):
    x, x_inv = power_rounds.quantize(torch.randn(M, K, device="cuda"))
    w, w_inv = power_rounds.quantize(torch.rand(N, K, device="cuda") * 2 - 1)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    saved = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=E4M3)

    def gemm(rows):
        torch._scaled_mm(x[rows], w.t(), scale_a=x_inv, scale_b=w_inv,
                         out_dtype=torch.bfloat16, use_fast_accum=True,
                         out=c[rows])

    def fwd(rows):
        gemm(rows)
        n = c[rows].numel()
        _cast_kernel[(triton.cdiv(n, BLOCK),)](c[rows], out[rows], n, 0.5,
                                               BLOCK=BLOCK)

    def bwd(rows):
        gemm(rows)
        n = c[rows].numel()
        _grad_cast_kernel[(triton.cdiv(n, BLOCK),)](
            c[rows], saved[rows], out[rows], n, 0.5, BLOCK=BLOCK)

    def chunked(body, size):
        slices = [slice(r, r + size) for r in range(0, M, size)]

        def call():
            for rows in slices:
                body(rows)
        return call

    variants = {}
    for name, body in (("gemm", gemm), ("fwd", fwd), ("bwd", bwd)):
        variants[name] = chunked(body, M)
        for size in chunks:
            variants[f"{name}-r{size}"] = chunked(body, size)
    return variants


def main():
    parser = power_rounds.arguments(__doc__, "/tmp/l2-chunk-power.csv")
    parser.add_argument("--chunks", type=int, nargs="+",
                        default=[512, 1024, 2048])
    args = parser.parse_args()
    rows = power_rounds.run(build(args.chunks), args)
    print(torch.cuda.get_device_name(), torch.__version__,
          f"L2 {torch.cuda.get_device_properties(0).L2_cache_size >> 20} MiB")
    for row in rows:
        print(power_rounds.describe(row))


if __name__ == "__main__":
    main()
