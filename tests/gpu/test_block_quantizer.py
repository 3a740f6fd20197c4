"""GPU tests of TE 2.x's block-scaled quantizer in tejit.pytorch
(tejit.pytorch.tensor.float8_blockwise_tensor: Float8BlockQuantizer,
Float8BlockwiseQTensor; docs/quantizers.md, docs/block-scaling.md).

    PYTHONPATH=python python3 -m pytest -q -p no:logging tests/gpu/test_block_quantizer.py

Fresh random data each run (the seed is printed; values spread over
magnitudes per element and per row, so that blocks differ), small, odd
tails, 1-D/3-D and real-sized (8192 x 4096 bf16), E4M3 and E5M2, 1 x 128
and 128 x 128 blocks, with and without power-of-2 scales, against an
independent float64 reference of docs/block-scaling.md's numerics: per
block amax (exact), scale = fp8_max / amax rounded to float32 (1 for 0,
FLT_MAX on overflow; with force_pow_2_scales 2^(exponent), by frexp),
scale_inv = 1 / scale in float32, data = the product x * scale rounded
once to float32, saturated, cast with round to nearest even (torch's
cast), the columnwise copy cast the same way from the transposed 2-D
view; scale_inv in TE's GEMM-ready layout with zero padding. All compared
bit for bit. Also: the dequantize round trip (exact against the data and
scales, and within the format's rounding error of the input), usages and
update_usage, make_empty + update_quantized / quantize(out=) / quantize_ /
copy_, noop_flag, torch ops and in-place ops, the straight-through
gradient, clone/detach/pickle, empty tensors, the refusals.
"""
import io
import math
import os
import pickle
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import run_seed, seed_per_test, torch  # noqa: E402

from tejit.pytorch.constants import DType  # noqa: E402
from tejit.pytorch.tensor import QuantizedTensor  # noqa: E402
from tejit.pytorch.tensor.float8_blockwise_tensor import (  # noqa: E402
    Float8BlockQuantizer, Float8BlockwiseQTensor)

SEED = run_seed(__file__)
fresh_seed = seed_per_test(SEED)

FORMATS = {  # TE DType: (torch dtype, fp8_max, smallest subnormal, rtol)
    DType.kFloat8E4M3: (torch.float8_e4m3fn, 448.0, 2.0 ** -9, 2.0 ** -4),
    DType.kFloat8E5M2: (torch.float8_e5m2, 57344.0, 2.0 ** -16, 2.0 ** -3),
}
E4M3 = DType.kFloat8E4M3
FLT_MAX = torch.finfo(torch.float32).max
SHAPES = [(1, 1), (7, 5), (128, 128), (130, 300), (256, 384), (1, 24),
          (300,), (3, 50, 200)]
REAL = (8192, 4096)
B = 128


# --- the reference ---------------------------------------------------------

def view2d(shape):
    rows = math.prod(shape[:-1]) if len(shape) else 1
    return rows, (shape[-1] if len(shape) else 1)


def ref_scales(amax, fp8, power_2):
    """Per-block scale (float32) of block amaxes (float64 tensor)."""
    maximum = FORMATS[fp8][1]
    scale = (maximum / amax).float()  # the float32 quotient, inf for amax 0
    scale = torch.where(torch.isinf(scale), torch.full_like(scale, FLT_MAX),
                        scale)
    scale = torch.where(amax == 0, torch.ones_like(scale), scale)
    if power_2:
        _, exponent = torch.frexp(scale)
        scale = torch.ldexp(torch.ones_like(scale), exponent - 1)
    return scale


def ref_cast(matrix, fp8, block_dim, power_2):
    """te.block_quantize of a float64 [R, C] matrix: (FP8 data [R, C],
    scale_inv in the GEMM-ready layout, per-element block amax [R, C])."""
    torch_dtype, maximum = FORMATS[fp8][:2]
    rows, cols = matrix.shape
    nr, nc = -(-rows // B), -(-cols // B)
    padded = torch.zeros(nr * B, nc * B, dtype=torch.float64,
                         device=matrix.device)
    padded[:rows, :cols] = matrix.abs()
    if block_dim == 1:
        amax = padded[:rows].reshape(rows, nc, B).amax(dim=2)      # [R, nc]
        expand = (lambda t: t.repeat_interleave(B, 1)[:, :cols])
    else:
        amax = padded.reshape(nr, B, nc, B).amax(dim=(1, 3))      # [nr, nc]
        expand = (lambda t: t.repeat_interleave(B, 0)[:rows]
                  .repeat_interleave(B, 1)[:, :cols])
    scale = ref_scales(amax, fp8, power_2)
    scale_inv = (1.0 / scale.double()).float()
    scaled = (matrix * expand(scale).double()).float()
    data = scaled.clamp(-maximum, maximum).to(torch_dtype)
    if block_dim == 1:
        layout = torch.zeros(nc, -(-rows // 4) * 4, device=matrix.device)
        layout[:, :rows] = scale_inv.t()
    else:
        layout = torch.zeros(nr, -(-nc // 4) * 4, device=matrix.device)
        layout[:, :nc] = scale_inv
    return data, layout, expand(amax)


def reference(x, fp8, block_dim, power_2):
    """(rowwise data, scale_inv, columnwise data, scale_inv) of x, the
    data in TE's shapes (x's; [last, *leading])."""
    shape = tuple(x.shape)
    rows, cols = view2d(shape)
    matrix = x.detach().double().reshape(rows, cols)
    data, scale_inv, _ = ref_cast(matrix, fp8, block_dim, power_2)
    t_data, t_scale_inv, _ = ref_cast(matrix.t(), fp8, block_dim, power_2)
    return (data.reshape(shape), scale_inv,
            t_data.reshape(shape[-1:] + shape[:-1]), t_scale_inv)


def bits(tensor):
    return tensor.view(torch.uint8)


def assert_bits(got, want, what):
    assert tuple(got.shape) == tuple(want.shape), (what, got.shape,
                                                   want.shape)
    mismatch = (bits(got) != bits(want)).sum().item()
    assert mismatch == 0, f"{what}: {mismatch} bytes differ"


def assert_same(got, want, what):
    """Float tensors equal bit for bit (scale_inv)."""
    assert tuple(got.shape) == tuple(want.shape), (what, got.shape,
                                                   want.shape)
    differ = (got.view(torch.int32) != want.view(torch.int32)).sum().item()
    assert differ == 0, f"{what}: {differ} values differ"


def assert_tensor(q, x, fp8, block_dim, power_2, what=""):
    data, scale_inv, t_data, t_scale_inv = reference(x, fp8, block_dim,
                                                     power_2)
    if q._rowwise_data is not None:
        assert_bits(q._rowwise_data, data, f"{what} rowwise data")
        assert_same(q._rowwise_scale_inv, scale_inv,
                    f"{what} rowwise scale_inv")
    if q._columnwise_data is not None:
        assert_bits(q._columnwise_data, t_data, f"{what} columnwise data")
        assert_same(q._columnwise_scale_inv, t_scale_inv,
                    f"{what} columnwise scale_inv")


def sample(shape, dtype=torch.bfloat16):
    """Values spread over magnitudes, per element and per row."""
    x = torch.randn(shape, device="cuda") * 3.0
    x = x * torch.exp2(torch.randint(-6, 4, shape, device="cuda").float())
    if len(shape) >= 1:
        rows = torch.randint(-8, 8, tuple(shape[:-1]) + (1,), device="cuda")
        x = x * torch.exp2(rows.float())
    return x.to(dtype)


def quantizer(fp8=E4M3, block_dim=2, power_2=True, **usage):
    usage.setdefault("rowwise", True)
    usage.setdefault("columnwise", True)
    return Float8BlockQuantizer(fp8, block_scaling_dim=block_dim,
                                force_pow_2_scales=power_2, **usage)


# --- casts -----------------------------------------------------------------

@pytest.mark.parametrize("fp8", list(FORMATS))
@pytest.mark.parametrize("block_dim", [1, 2])
@pytest.mark.parametrize("power_2", [True, False])
@pytest.mark.parametrize("shape", SHAPES + [REAL])
def test_bit_exact(fp8, block_dim, power_2, shape):
    x = sample(shape)
    maker = quantizer(fp8, block_dim, power_2)
    q = maker(x)
    assert isinstance(q, Float8BlockwiseQTensor)
    assert isinstance(q, QuantizedTensor)
    assert q.shape == x.shape and q.dtype == x.dtype
    assert q._fp8_dtype == fp8 and q._is_2D_scaled == (block_dim == 2)
    assert q._rowwise_data.dtype == FORMATS[fp8][0]
    assert tuple(q._rowwise_scale_inv.shape) == tuple(
        maker.get_scale_shape(shape, columnwise=False))
    assert tuple(q._columnwise_scale_inv.shape) == tuple(
        maker.get_scale_shape(shape, columnwise=True))
    assert tuple(q._columnwise_data.shape) == tuple(
        maker.get_columnwise_shape(shape))
    assert_tensor(q, x, fp8, block_dim, power_2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("block_dim", [1, 2])
def test_other_input_dtypes(dtype, block_dim):
    x = sample((200, 260), dtype)
    q = quantizer(E4M3, block_dim, False)(x)
    assert q.dtype == dtype
    assert_tensor(q, x, E4M3, block_dim, False)


@pytest.mark.parametrize("fp8", list(FORMATS))
@pytest.mark.parametrize("block_dim", [1, 2])
@pytest.mark.parametrize("power_2", [True, False])
def test_special_blocks(fp8, block_dim, power_2):
    """A zero block (scale 1), a block of tiny float32 values (the scale
    overflows: FLT_MAX), one of huge values, one needing saturation-free
    rounding at fp8_max, beside ordinary ones."""
    x = torch.randn(256, 384, device="cuda") * 2.0
    x[:128, :128] = 0.0
    x[128:, :128] = 1e-37 * torch.sign(torch.randn(128, 128, device="cuda"))
    x[:128, 128:256] = torch.randn(128, 128, device="cuda") * 1e35
    x[128:, 256:] = x[128:, 256:].clamp(-1, 1) * 3.0
    x[200, 300] = 3.0  # the block's amax exactly: scaled to fp8_max
    q = quantizer(fp8, block_dim, power_2)(x)
    assert_tensor(q, x, fp8, block_dim, power_2, "special")
    inv = q._rowwise_scale_inv
    first = inv[0, 0].item()
    assert first == 1.0  # the zero block: row 0, block 0 (either layout)
    assert torch.all(q._rowwise_data[:128, :128].float() == 0)


# --- dequantize --------------------------------------------------------------

@pytest.mark.parametrize("fp8", list(FORMATS))
@pytest.mark.parametrize("block_dim", [1, 2])
@pytest.mark.parametrize("shape", [(130, 300), (3, 50, 200), REAL])
def test_dequantize_round_trip(fp8, block_dim, shape):
    x = sample(shape)
    q = quantizer(fp8, block_dim, True)(x)
    rows, cols = view2d(shape)
    matrix = x.double().reshape(rows, cols)
    data, scale_inv, amax = ref_cast(matrix, fp8, block_dim, True)
    if block_dim == 1:
        element_inv = scale_inv[:, :rows].t().repeat_interleave(B, 1)
        element_inv = element_inv[:, :cols]
    else:
        element_inv = (scale_inv[:, :-(-cols // B)].repeat_interleave(B, 0)
                       .repeat_interleave(B, 1)[:rows, :cols])
    want = (data.float() * element_inv).reshape(shape)
    got = q.dequantize(dtype=torch.float32)
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert torch.equal(got, want)
    assert torch.equal(q.dequantize(), want.to(torch.bfloat16))
    assert q.dequantize().dtype == torch.bfloat16
    # Within the format's rounding: half an ulp relative, or half the
    # subnormal step (in x's units, the scale down to half by pow2).
    _, maximum, subnormal, rtol = FORMATS[fp8]
    atol = amax.float() * (subnormal / maximum) * 2.0
    error = (got.reshape(rows, cols) - matrix.float()).abs()
    bound = rtol * matrix.float().abs() + atol
    assert torch.all(error <= bound), (error - bound).max().item()
    # The columnwise copy alone dequantizes to the same tensor for 2-D
    # blocks (the same tiles), and within the bound for 1-D.
    q.update_usage(rowwise_usage=False)
    alone = q.dequantize(dtype=torch.float32)
    assert alone.shape == x.shape
    if block_dim == 2:
        assert torch.equal(alone, want)
    else:
        t_amax = ref_cast(matrix.t(), fp8, 1, True)[2].t()
        bound = rtol * matrix.float().abs() + t_amax.float() * (
            subnormal / maximum) * 2.0
        assert torch.all((alone.reshape(rows, cols) - matrix.float()).abs()
                         <= bound)


def test_torch_ops_run_on_the_value():
    x = sample((64, 256))
    maker = quantizer(E4M3, 1, True)
    q = maker(x)
    value = q.dequantize()
    assert torch.equal(q.float(), value.float())
    assert torch.equal(q + 1, value + 1)
    assert torch.equal(q.sum(dim=0), value.sum(dim=0))
    # In place: the result is quantized back through the tensor's
    # quantizer.
    q.mul_(2)
    assert_tensor(q, value * 2, E4M3, 1, True, "mul_")


# --- usages ----------------------------------------------------------------

@pytest.mark.parametrize("block_dim", [1, 2])
def test_usages(block_dim):
    x = sample((3, 100, 300))
    full = quantizer(E4M3, block_dim)(x)
    rowwise = quantizer(E4M3, block_dim, columnwise=False)(x)
    assert rowwise._columnwise_data is None
    assert rowwise._columnwise_scale_inv is None
    assert_bits(rowwise._rowwise_data, full._rowwise_data, "rowwise only")
    columnwise = quantizer(E4M3, block_dim, rowwise=False)(x)
    assert columnwise._rowwise_data is None
    assert columnwise.shape == x.shape
    assert tuple(columnwise._columnwise_data.shape) == (300, 3, 100)
    assert_bits(columnwise._columnwise_data, full._columnwise_data,
                "columnwise only")
    assert_same(columnwise._columnwise_scale_inv, full._columnwise_scale_inv,
                "columnwise scale_inv")
    if block_dim == 2:
        # The missing copy is made from the other (the same tiles).
        rowwise.update_usage(columnwise_usage=True)
        assert_bits(rowwise._columnwise_data, full._columnwise_data,
                    "columnwise made")
        assert_same(rowwise._columnwise_scale_inv,
                    full._columnwise_scale_inv, "columnwise scale_inv made")
        columnwise.update_usage(rowwise_usage=True)
        assert_bits(columnwise._rowwise_data, full._rowwise_data,
                    "rowwise made")
        assert_same(columnwise._rowwise_scale_inv, full._rowwise_scale_inv,
                    "rowwise scale_inv made")
    else:
        with pytest.raises(ValueError, match="1-D block-scaled"):
            rowwise.update_usage(columnwise_usage=True)
        with pytest.raises(ValueError, match="1-D block-scaled"):
            columnwise.update_usage(rowwise_usage=True)
    full.update_usage(columnwise_usage=False)
    assert full._columnwise_data is None and full._rowwise_data is not None
    with pytest.raises(ValueError, match="rowwise or columnwise"):
        full.update_usage(rowwise_usage=False)
    maker = quantizer(E4M3, block_dim)
    maker.set_usage(columnwise=False)
    assert maker(x)._columnwise_data is None
    maker.set_usage(rowwise=False)
    with pytest.raises(ValueError, match="set_usage"):
        maker(x)


# --- make_empty, update_quantized ----------------------------------------------

@pytest.mark.parametrize("block_dim", [1, 2])
def test_make_empty_and_update_quantized(block_dim):
    x, y = sample((130, 300)), sample((130, 300))
    maker = quantizer(E4M3, block_dim)
    empty = maker.make_empty((130, 300), dtype=torch.bfloat16,
                             device="cuda")
    assert isinstance(empty, Float8BlockwiseQTensor)
    assert empty.dtype == torch.bfloat16 and empty.shape == (130, 300)
    assert tuple(empty._columnwise_data.shape) == (300, 130)
    assert tuple(empty._rowwise_scale_inv.shape) == tuple(
        maker.get_scale_shape((130, 300), False))
    assert empty._quantizer is not maker  # a copy, as TE's
    assert empty._quantizer.block_scaling_dim == block_dim
    assert maker.update_quantized(x, empty) is empty
    assert_tensor(empty, x, E4M3, block_dim, True, "update_quantized")
    maker.quantize(y, out=empty)
    assert_tensor(empty, y, E4M3, block_dim, True, "quantize(out=)")
    empty.quantize_(x)
    assert_tensor(empty, x, E4M3, block_dim, True, "quantize_")
    empty.copy_(y)  # a plain source: quantized
    assert_tensor(empty, y, E4M3, block_dim, True, "copy_")
    skip = torch.ones(1, device="cuda")
    maker.update_quantized(x, empty, noop_flag=skip)
    assert_tensor(empty, y, E4M3, block_dim, True, "noop_flag")
    other = maker(x)
    empty.copy_(other)  # a block tensor of the same layout: bytes copied
    assert_tensor(empty, x, E4M3, block_dim, True, "copy_ of a tensor")
    # Another quantizer: dst takes its format, block dim and usages.
    dim = 3 - block_dim
    changed = quantizer(DType.kFloat8E5M2, dim, False, columnwise=False)
    changed.update_quantized(y, empty)
    assert empty._fp8_dtype == DType.kFloat8E5M2
    assert empty._is_2D_scaled == (dim == 2)
    assert empty._columnwise_data is None
    assert_tensor(empty, y, DType.kFloat8E5M2, dim, False, "other quantizer")
    assert maker.quantize(x, dtype=torch.float32).dtype == torch.float32


def test_straight_through_gradient():
    x = sample((32, 256)).requires_grad_()
    w = torch.randn(32, 256, device="cuda", dtype=torch.bfloat16)
    maker = quantizer(E4M3, 1)
    q = maker(x)
    assert q.requires_grad
    (q.dequantize() * w).sum().backward()
    assert torch.equal(x.grad, w)
    x.grad = None
    (maker(x).float() * w.float()).sum().backward()
    assert torch.equal(x.grad, w)
    with torch.no_grad():
        assert not maker(x).requires_grad
    maker.internal = True
    assert not maker(x).requires_grad


@pytest.mark.parametrize("block_dim", [1, 2])
def test_empty_tensors(block_dim):
    maker = quantizer(E4M3, block_dim)
    for shape in [(0, 16), (4, 0), (2, 0, 300)]:
        x = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        q = maker(x)
        assert q.shape == x.shape
        assert tuple(q._columnwise_data.shape) == (
            shape[-1:] + shape[:-1])
        assert tuple(q._rowwise_scale_inv.shape) == tuple(
            maker.get_scale_shape(shape, False))
        assert q.dequantize().shape == x.shape


def test_clone_detach_and_pickle():
    x = sample((130, 300))
    maker = quantizer(DType.kFloat8E5M2, 2)
    q = maker(x)
    copy = q.clone()
    assert isinstance(copy, Float8BlockwiseQTensor)
    assert copy._quantizer is q._quantizer
    assert copy._rowwise_data.data_ptr() != q._rowwise_data.data_ptr()
    assert_bits(copy._rowwise_data, q._rowwise_data, "clone")
    assert_same(copy._columnwise_scale_inv, q._columnwise_scale_inv,
                "clone scale_inv")
    alias = q.detach()
    assert alias._rowwise_data.data_ptr() == q._rowwise_data.data_ptr()
    assert alias._is_2D_scaled and alias._fp8_dtype == DType.kFloat8E5M2
    buffer = io.BytesIO()
    torch.save(q, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert isinstance(loaded, Float8BlockwiseQTensor)
    assert_bits(loaded._columnwise_data, q._columnwise_data, "loaded")
    assert torch.equal(loaded.dequantize(), q.dequantize())
    assert pickle.loads(pickle.dumps(maker)).block_scaling_dim == 2


def test_te_constructor():
    """A tensor made from TE-style buffers (uint8 data)."""
    x = sample((128, 256))
    q = quantizer(E4M3, 1)(x)
    made = Float8BlockwiseQTensor(
        shape=x.shape, dtype=torch.float32, fp8_dtype=E4M3,
        rowwise_data=q._rowwise_data.view(torch.uint8),
        rowwise_scale_inv=q._rowwise_scale_inv, columnwise_data=None,
        columnwise_scale_inv=None, quantizer=q._quantizer,
        is_2D_scaled=False)
    assert made.dtype == torch.float32
    assert made._rowwise_data.dtype == torch.float8_e4m3fn
    assert torch.equal(made.dequantize(), q.dequantize(dtype=torch.float32))


def test_refusals():
    maker = quantizer(E4M3, 1)
    with pytest.raises(ValueError, match="CUDA"):
        maker(torch.ones(8, 8))
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        maker(torch.ones(8, 8, device="cuda", dtype=torch.float64))
    with pytest.raises(ValueError, match="shape"):
        maker.update_quantized(torch.ones(8, 8, device="cuda"),
                               maker(torch.ones(8, 16, device="cuda")))
    with pytest.raises(ValueError, match="Float8BlockwiseQTensor"):
        maker.update_quantized(torch.ones(8, device="cuda"),
                               torch.ones(8, device="cuda"))
    with pytest.raises(NotImplementedError, match="amax_epsilon"):
        Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True,
                             amax_epsilon=1e-12)
    with pytest.raises(ValueError, match="block_scaling_dim"):
        Float8BlockQuantizer(E4M3, rowwise=True, columnwise=True,
                             block_scaling_dim=3)
    with pytest.raises(TypeError, match="kFloat8E4M3"):
        Float8BlockQuantizer(DType.kBFloat16, rowwise=True, columnwise=True)
    # The kernel's grid: at most 65535 tiles of 128 rows.
    tall = torch.ones(65535 * 128 + 1, 1, device="cuda",
                      dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="65535"):
        maker(tall)
