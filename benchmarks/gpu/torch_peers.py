"""PyTorch peers of tejit's blocks, for benchmarks/gpu/bench_layers.py.

- LayerNormLinear / LayerNormMLP as plain nn modules (nn.LayerNorm,
  nn.Linear, tanh GELU), run eager or under torch.compile;
- the same modules with FP8 linears through torch._scaled_mm: tensorwise
  current scaling (torchao's "tensorwise" recipe), E4M3 for the forward
  operands and E5M2 for gradients, as a custom autograd.Function;
- FP8 linears with DeepSeek-V3's block scaling (TE's Float8BlockScaling
  defaults) through torch._scaled_mm's blockwise modes, where the
  installed PyTorch has them (blockwise_support() says);
- raw_gemm(): one cuBLASLt call of a given shape and dtypes, the ceiling a
  tejit GEMM step is compared with.

Shapes follow tejit's: activations [seq, batch, features], weights
[out_features, in_features].
"""
import torch
import torch.nn.functional as F

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
# An all-zero tensor would give an infinite scale; torchao clamps its amax
# the same way.
AMAX_FLOOR = 1e-12


# --- FP8 linear, tensorwise current scaling ------------------------------------


def quantize_tensorwise(t, fp8_dtype):
    """(t in FP8 scaled so its amax maps to the format's max, the float32
    inverse scale the GEMM multiplies back). Saturates: torch's cast gives
    NaN past the largest finite value instead."""
    fp8_max = torch.finfo(fp8_dtype).max
    amax = t.abs().amax().float().clamp(min=AMAX_FLOOR)
    scale = fp8_max / amax
    q = (t.float() * scale).clamp(-fp8_max, fp8_max).to(fp8_dtype)
    return q, scale.reciprocal()


def column_major(t):
    """The same matrix stored column-major: _scaled_mm (cuBLASLt's FP8
    kernels on Hopper) wants its second operand that way."""
    return t.t().contiguous().t()


class _Fp8LinearFunction(torch.autograd.Function):
    """y = x w^T + b with both GEMM operands in E4M3; in the backward the
    incoming gradient is E5M2 and both GEMMs (dgrad, wgrad) are FP8 too.
    Saves the quantized operands, so the backward does not requantize
    them (what torchao does under torch.compile)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x2d = x.reshape(-1, x.shape[-1])
        xq, x_inv = quantize_tensorwise(x2d, E4M3)
        wq, w_inv = quantize_tensorwise(weight, E4M3)
        # weight is [out, in] row-major: its transpose is column-major.
        y = torch._scaled_mm(xq, wq.t(), scale_a=x_inv, scale_b=w_inv,
                             bias=bias, out_dtype=x.dtype,
                             use_fast_accum=True)
        ctx.save_for_backward(xq, x_inv, wq, w_inv)
        ctx.x_shape = x.shape
        ctx.has_bias = bias is not None
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xq, x_inv, wq, w_inv = ctx.saved_tensors
        dy2d = dy.reshape(-1, dy.shape[-1])
        dyq, dy_inv = quantize_tensorwise(dy2d, E5M2)
        # dgrad: dx [T, in] = dy [T, out] @ w [out, in]
        dx = torch._scaled_mm(dyq, column_major(wq), scale_a=dy_inv,
                              scale_b=w_inv, out_dtype=dy.dtype)
        # wgrad: dw [out, in] = dy^T [out, T] @ x [T, in]
        dw = torch._scaled_mm(dyq.t().contiguous(), column_major(xq),
                              scale_a=dy_inv, scale_b=x_inv,
                              out_dtype=dy.dtype)
        db = dy2d.sum(0) if ctx.has_bias else None
        return dx.view(ctx.x_shape), dw, db


class Fp8Linear(torch.nn.Linear):
    """nn.Linear whose matmuls run in FP8 (see _Fp8LinearFunction)."""

    def forward(self, x):
        return _Fp8LinearFunction.apply(x, self.weight, self.bias)


# --- FP8 linear, block scaling (DeepSeek-V3's recipe) -------------------------

BLOCK = 128


def _power_of_2_scales(amax):
    """E4M3's max over each amax, rounded down to a power of two (TE's
    default power_2_scale); an all-zero block gets a huge but finite scale
    (its values stay 0)."""
    scale = torch.finfo(E4M3).max / amax.clamp(min=AMAX_FLOOR)
    return torch.exp2(torch.floor(torch.log2(scale)))


def quantize_1x128(t):
    """`t` [R, C] (C a multiple of 128) in E4M3 with one scale per 128
    consecutive elements of a row: (FP8 [R, C], float32 inverse scales
    [R, C / 128] stored column-major, stride (1, R): the layout
    torch._scaled_mm takes for 1x128 blocks)."""
    rows, cols = t.shape
    # contiguous(): a transposed view (X^T, dY^T for wgrad) would otherwise
    # keep its strides through the cast, and torch._scaled_mm needs its
    # first operand row-major.
    blocks = t.float().contiguous().reshape(rows, cols // BLOCK, BLOCK)
    scale = _power_of_2_scales(blocks.abs().amax(dim=-1))
    fp8_max = torch.finfo(E4M3).max
    q = (blocks * scale.unsqueeze(-1)).clamp(-fp8_max, fp8_max).to(E4M3)
    return q.reshape(rows, cols), column_major(scale.reciprocal())


def quantize_128x128(t):
    """`t` [R, C] (multiples of 128) in E4M3 with one scale per 128 x 128
    tile: (FP8 [R, C], float32 inverse scales [R / 128, C / 128],
    row-major)."""
    rows, cols = t.shape
    tiles = t.float().contiguous().reshape(rows // BLOCK, BLOCK,
                                           cols // BLOCK, BLOCK)
    scale = _power_of_2_scales(tiles.abs().amax(dim=(1, 3)))
    fp8_max = torch.finfo(E4M3).max
    q = (tiles * scale[:, None, :, None]).clamp(-fp8_max, fp8_max).to(E4M3)
    return q.reshape(rows, cols), scale.reciprocal().contiguous()


def blockwise_mm(a, a_scale_inv, b, b_scale_inv):
    """a [M, K] @ b [N, K]^T in bf16, both block-scaled along K (the
    quantize_1x128 / quantize_128x128 results of the two K-major
    matrices). torch._scaled_mm reads its second operand column-major and
    that operand's scales transposed."""
    return torch._scaled_mm(a, b.t(), scale_a=a_scale_inv,
                            scale_b=b_scale_inv.t(), out_dtype=torch.bfloat16)


def dequantize_blocks(q, scale_inv):
    """The values a block-scaled FP8 matrix stands for, in float32: each
    block times its inverse scale (1x128 or 128x128, told by the shape)."""
    rows, cols = q.shape
    if scale_inv.shape[0] == rows:  # 1x128
        blocks = q.float().reshape(rows, cols // BLOCK, BLOCK)
        return (blocks * scale_inv.unsqueeze(-1)).reshape(rows, cols)
    tiles = q.float().reshape(rows // BLOCK, BLOCK, cols // BLOCK, BLOCK)
    return (tiles * scale_inv[:, None, :, None]).reshape(rows, cols)


def blockwise_support(compile_too=True):
    """None when torch._scaled_mm multiplies DeepSeek-style block-scaled
    operands on this GPU with the right results (1x128 by 128x128, the
    forward and dgrad GEMMs, and 1x128 by 1x128, the wgrad GEMM; eagerly
    and, with `compile_too`, under torch.compile), else the reason why not
    (recent PyTorch with CUDA >= 12.9 on Hopper has them)."""
    if not hasattr(torch, "_scaled_mm"):
        return "this PyTorch has no torch._scaled_mm"
    m, n, k = 256, 384, 512
    try:
        for b_quantize in (quantize_128x128, quantize_1x128):
            a = quantize_1x128(torch.randn(m, k, device="cuda"))
            b = b_quantize(torch.randn(n, k, device="cuda") / 16)
            want = dequantize_blocks(*a) @ dequantize_blocks(*b).t()
            calls = [("eager", blockwise_mm)]
            if compile_too:
                calls.append(("torch.compile", torch.compile(blockwise_mm)))
            for how, mm in calls:
                got = mm(*a, *b).float()
                error = ((got - want).norm() / want.norm()).item()
                if not error < 1e-2:  # bf16 output: ~2e-3
                    return (f"{how} torch._scaled_mm with "
                            f"{b_quantize.__name__[len('quantize_'):]} "
                            f"scales on b gave a relative error of "
                            f"{error:.2e}")
    except Exception as error:  # noqa: BLE001 - the reason is the report
        first_line = str(error).strip().splitlines()[0] if str(error) else ""
        return f"{type(error).__name__}: {first_line[:200]}"
    return None


class _BlockwiseFp8LinearFunction(torch.autograd.Function):
    """y = x w^T + b with TE's Float8BlockScaling defaults: E4M3
    everywhere, x and the output gradient in 1x128 blocks along the GEMM's
    contracting dim, w in 128 x 128 tiles, power-of-2 scales, split
    accumulation (no fast accumulation). The backward's operands are cast
    again in their own orientation: X^T and dY^T along the tokens (wgrad),
    W^T in tiles (dgrad; the tiles of W, transposed)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x2d = x.reshape(-1, x.shape[-1])
        xq, x_inv = quantize_1x128(x2d)
        wq, w_inv = quantize_128x128(weight)
        y = blockwise_mm(xq, x_inv, wq, w_inv)
        if bias is not None:
            y = y + bias
        xtq, xt_inv = quantize_1x128(x2d.t())
        ctx.save_for_backward(xtq, xt_inv, wq, w_inv)
        ctx.x_shape = x.shape
        ctx.has_bias = bias is not None
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xtq, xt_inv, wq, w_inv = ctx.saved_tensors
        dy2d = dy.reshape(-1, dy.shape[-1])
        # dgrad: dx [T, in] = dy [T, out] @ w [out, in]: b = w^T [in, out].
        dyq, dy_inv = quantize_1x128(dy2d)
        dx = blockwise_mm(dyq, dy_inv, wq.t().contiguous(),
                          w_inv.t().contiguous())
        # wgrad: dw [out, in] = dy^T [out, T] @ x [T, in]: b = x^T [in, T].
        dytq, dyt_inv = quantize_1x128(dy2d.t())
        dw = blockwise_mm(dytq, dyt_inv, xtq, xt_inv)
        db = dy2d.sum(0) if ctx.has_bias else None
        return dx.view(ctx.x_shape), dw.to(dy.dtype), db


class BlockwiseFp8Linear(torch.nn.Linear):
    """nn.Linear whose matmuls run in block-scaled FP8 (see
    _BlockwiseFp8LinearFunction; dims multiples of 128)."""

    def forward(self, x):
        return _BlockwiseFp8LinearFunction.apply(x, self.weight, self.bias)


# --- the blocks ----------------------------------------------------------------


class LayerNormLinearBlock(torch.nn.Module):
    """TE's LayerNormLinear: LayerNorm then one Linear (the QKV projection
    when out = 3 * in)."""

    def __init__(self, in_features, out_features, linear=torch.nn.Linear):
        super().__init__()
        self.norm = torch.nn.LayerNorm(in_features, eps=1e-5)
        self.linear = linear(in_features, out_features)

    def forward(self, x):
        return self.linear(self.norm(x))


class LayerNormMLPBlock(torch.nn.Module):
    """TE's LayerNormMLP with GELU (tanh approximation, as TE computes it):
    LayerNorm, fc1, gelu, fc2."""

    def __init__(self, hidden, ffn_hidden, linear=torch.nn.Linear):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = linear(hidden, ffn_hidden)
        self.fc2 = linear(ffn_hidden, hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.norm(x)), approximate="tanh"))


def make_block(kind, dims, fp8=False, dtype=torch.bfloat16):
    """A block on the GPU in `dtype`. kind: "LayerNormLinear" (dims = (in,
    out)) or "LayerNormMLP" (dims = (hidden, ffn_hidden))."""
    linear = Fp8Linear if fp8 else torch.nn.Linear
    if kind == "LayerNormLinear":
        block = LayerNormLinearBlock(*dims, linear=linear)
    elif kind == "LayerNormMLP":
        block = LayerNormMLPBlock(*dims, linear=linear)
    else:
        raise ValueError(f"no peer for block {kind}")
    return block.to(device="cuda", dtype=dtype)


# --- raw GEMMs -----------------------------------------------------------------


def _fp8_random(shape, dtype):
    # Unit-scale data: every FP8 value in range, none saturated.
    return torch.randn(shape, device="cuda").to(dtype)


def _scaled_mm_call(a, b, out_dtype, bias, fast_accum):
    """The FP8 call: a [M, K] row-major, b [N, K] row-major (so b.t() is
    column-major [K, N]), unit scales; an FP8 output gets a unit output
    scale."""
    one = torch.ones((), device="cuda", dtype=torch.float32)
    kwargs = dict(scale_a=one, scale_b=one, bias=bias, out_dtype=out_dtype,
                  use_fast_accum=fast_accum)
    if out_dtype in (E4M3, E5M2):
        kwargs["scale_result"] = one
    return lambda: torch._scaled_mm(a, b.t(), **kwargs)


def _fp8_gemm_variants(out_dtype, bias):
    """(out_dtype, with bias, note) to try in order: cuBLASLt through
    _scaled_mm does not take every output/bias combination, so fall back to
    the nearest one it does and say so."""
    variants = [(out_dtype, bias, "")]
    if bias:
        variants.append((out_dtype, False, "without bias"))
    if out_dtype != torch.bfloat16:
        variants.append((torch.bfloat16, bias, "bf16 output"))
        variants.append((torch.bfloat16, False, "bf16 output, without bias"))
    return variants


def raw_fp8_gemm(m, n, k, a_dtype, b_dtype, out_dtype, bias, fast_accum,
                 copies=3):
    """(list of `copies` callables, note): each runs one _scaled_mm on its
    own operands (rotating them keeps them out of L2). Raises if no variant
    runs."""
    last_error = None
    for dtype, with_bias, note in _fp8_gemm_variants(out_dtype, bias):
        try:
            calls = []
            for _ in range(copies):
                a = _fp8_random((m, k), a_dtype)
                b = _fp8_random((n, k), b_dtype)
                vector = (torch.randn(n, device="cuda", dtype=torch.bfloat16)
                          if with_bias else None)
                calls.append(_scaled_mm_call(a, b, dtype, vector, fast_accum))
            calls[0]()  # raises here if cuBLASLt refuses the combination
            return calls, note
        except RuntimeError as error:
            last_error = error
    raise last_error


def raw_matmul(m, n, k, dtype, transpose_a, transpose_b, bias, gelu,
               copies=3):
    """Callables for a non-FP8 GEMM out [M, N] = op(a) op(b), with a and b
    stored as the plan stores them (op = transpose when flagged), so cuBLAS
    sees the same transposes. Bias (+ GELU) go through addmm /
    _addmm_activation, which use cuBLASLt's epilogues; GELU without a bias
    is left out (PyTorch has no such single call). The output is in the
    operands' dtype."""
    calls = []
    for _ in range(copies):
        a = torch.randn((k, m) if transpose_a else (m, k), device="cuda",
                        dtype=dtype)
        b = torch.randn((n, k) if transpose_b else (k, n), device="cuda",
                        dtype=dtype)
        op_a = a.t() if transpose_a else a
        op_b = b.t() if transpose_b else b
        if bias:
            vector = torch.randn(n, device="cuda", dtype=dtype)
            if gelu:
                calls.append(lambda a=op_a, b=op_b, v=vector:
                             torch._addmm_activation(v, a, b, use_gelu=True))
            else:
                calls.append(lambda a=op_a, b=op_b, v=vector:
                             torch.addmm(v, a, b))
        else:
            calls.append(lambda a=op_a, b=op_b: torch.matmul(a, b))
    return calls
