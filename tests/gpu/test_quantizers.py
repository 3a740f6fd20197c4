"""GPU tests of TE 2.x's per-tensor quantizers in tejit.pytorch
(tejit.pytorch.tensor.float8_tensor; docs/quantizers.md).

    PYTHONPATH=python python3 -m pytest -q -p no:logging tests/gpu/test_quantizers.py

Fresh random data each run (the seed is printed), small, odd-shaped
(the transpose copied from the data's bytes), 3-D and real-sized (8192 x
4096 bf16), E4M3 and E5M2, against an independent float64 reference of
shared/FP8.md's rules: the scaled value rounded once to float32, saturated
to +-fp8_max, rounded to nearest even (torch's cast), compared byte for
byte; current scaling's scale = fp8_max / amax (1 for 0, FLT_MAX on
overflow, rounded down to a power of 2 with force_pow_2_scales, amax
clamped by amax_epsilon); scale_inv = 1 / scale. Also: the amax recorded
(max-reduced) into Float8Quantizer's amax, the transpose (TE's columnwise
copy) and its shape, set_usage / update_usage, make_empty +
update_quantized / quantize(out=) / quantize_, noop_flag, the
straight-through gradient, empty tensors, clone, pickling, fp8_model_init
weights' _quantizer, and the refusals.
"""
import io
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import run_seed, seed_per_test, torch  # noqa: E402

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402
from tejit.pytorch.constants import DType  # noqa: E402
from tejit.pytorch.tensor.float8_tensor import (  # noqa: E402
    Float8CurrentScalingQuantizer, Float8Quantizer, Float8Tensor)
from tejit.pytorch.tensor.quantized_tensor import (  # noqa: E402
    QuantizedTensor, Quantizer)

SEED = run_seed(__file__)
fresh_seed = seed_per_test(SEED)

FORMATS = {  # TE DType: (torch dtype, fp8_max)
    DType.kFloat8E4M3: (torch.float8_e4m3fn, 448.0),
    DType.kFloat8E5M2: (torch.float8_e5m2, 57344.0),
}
FLT_MAX = torch.finfo(torch.float32).max
# Kernel transposes: (16, 32), (2, 8, 64); byte copies: the others.
SHAPES = [(16, 32), (7, 5), (2, 8, 64), (2, 3, 64), (1, 24)]
REAL = (8192, 4096)


def f32(value):
    """A Python float rounded to float32."""
    return torch.tensor(value, dtype=torch.float64).float().item()


def ref_cast(x, scale, fp8):
    """The FP8 bits of x * scale: the product rounded to float32 (exact in
    float64 first), saturated, cast with round to nearest even."""
    torch_dtype, maximum = FORMATS[fp8]
    scaled = (x.double() * scale).float()
    return scaled.clamp(-maximum, maximum).to(torch_dtype)


def ref_scale(amax, fp8, power_2=False, epsilon=0.0):
    """Current scaling's scale of an amax (a Python float), float32."""
    maximum = FORMATS[fp8][1]
    amax = max(amax, epsilon) if not math.isnan(amax) else amax
    if amax == 0 or math.isinf(amax) or math.isnan(amax):
        return 1.0
    scale = f32(maximum / amax)
    if math.isinf(scale):
        scale = FLT_MAX
    if power_2:
        scale = 2.0 ** (math.frexp(scale)[1] - 1)  # the mantissa dropped
    return scale


def bits(tensor):
    return tensor.view(torch.uint8)


def ref_transpose(data):
    """TE's columnwise copy of `data`: its 2-D view transposed, shaped
    [last, *leading]."""
    shape = tuple(data.shape)
    rows = math.prod(shape[:-1])
    matrix = bits(data).reshape(rows, shape[-1]).t().contiguous()
    return matrix.reshape(shape[-1:] + shape[:-1])


def sample(shape, dtype=torch.bfloat16, magnitude=3.0):
    """Random values with a spread of magnitudes (some tiny, some large)."""
    x = torch.randn(shape, device="cuda") * magnitude
    x = x * torch.exp2(torch.randint(-6, 4, shape, device="cuda").float())
    return x.to(dtype)


def assert_bits(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    mismatch = (bits(got) != bits(want)).sum().item()
    assert mismatch == 0, f"{what}: {mismatch} bytes differ"


def delayed_quantizer(fp8, scale, **usage):
    return Float8Quantizer(
        torch.tensor([scale], dtype=torch.float32, device="cuda"),
        torch.zeros(1, dtype=torch.float32, device="cuda"), fp8, **usage)


@pytest.mark.parametrize("fp8", list(FORMATS))
@pytest.mark.parametrize("shape", SHAPES + [REAL])
def test_delayed_bit_exact(fp8, shape):
    x = sample(shape)
    scale = f32(FORMATS[fp8][1] / x.abs().max().item() * 0.7)
    quantizer = delayed_quantizer(fp8, scale)
    q = quantizer(x)
    assert isinstance(q, Float8Tensor) and isinstance(q, QuantizedTensor)
    assert q.shape == x.shape and q.dtype == x.dtype
    assert q._fp8_dtype == fp8 and q._quantizer is quantizer
    want = ref_cast(x, scale, fp8)
    assert_bits(q._data, want, "data")
    assert_bits(q._transpose, ref_transpose(want), "transpose")
    assert q._scale_inv.item() == f32(1.0 / scale)
    assert quantizer.amax.item() == x.abs().max().float().item()
    # The amax is max-reduced (TE's atomic max), not overwritten.
    quantizer(x * 0.5)
    assert quantizer.amax.item() == x.abs().max().float().item()
    # Saturation: a scale that overflows the format.
    big = delayed_quantizer(fp8, scale * 64)(x)
    assert_bits(big._data, ref_cast(x, scale * 64, fp8), "saturated data")


@pytest.mark.parametrize("fp8", list(FORMATS))
@pytest.mark.parametrize("power_2", [False, True])
@pytest.mark.parametrize("shape", SHAPES + [REAL])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_current_bit_exact(fp8, power_2, shape, dtype):
    if dtype == torch.float32 and shape == REAL and power_2:
        pytest.skip("one real-sized float32 case is enough")
    x = sample(shape, dtype)
    quantizer = Float8CurrentScalingQuantizer(fp8, "cuda",
                                              force_pow_2_scales=power_2)
    q = quantizer(x)
    amax = x.abs().max().float().item()
    scale = ref_scale(amax, fp8, power_2)
    assert quantizer.amax.item() == amax
    assert quantizer.scale.item() == scale
    assert q._scale_inv.item() == f32(1.0 / scale)
    want = ref_cast(x, scale, fp8)
    assert_bits(q._data, want, "data")
    assert_bits(q._transpose, ref_transpose(want), "transpose")


@pytest.mark.parametrize("fp8", list(FORMATS))
def test_current_amax_epsilon_and_special_amaxes(fp8):
    x = sample((32, 64)) * 1e-3
    amax = x.abs().max().float().item()
    epsilon = amax * 8
    quantizer = Float8CurrentScalingQuantizer(fp8, "cuda",
                                              amax_epsilon=epsilon)
    q = quantizer(x)
    scale = ref_scale(amax, fp8, epsilon=epsilon)
    assert quantizer.amax.item() == amax  # the raw amax, as TE keeps it
    assert quantizer.scale.item() == scale
    assert_bits(q._data, ref_cast(x, scale, fp8), "data with epsilon")
    plain = Float8CurrentScalingQuantizer(fp8, "cuda")
    zeros = plain(torch.zeros(16, 16, device="cuda", dtype=torch.bfloat16))
    assert plain.scale.item() == 1.0 and zeros._scale_inv.item() == 1.0
    tiny = torch.full((16, 16), 1e-37, device="cuda", dtype=torch.float32)
    plain(tiny)
    assert plain.scale.item() == FLT_MAX == ref_scale(f32(1e-37), fp8)


@pytest.mark.parametrize("fp8", list(FORMATS))
def test_dequantize_round_trip(fp8):
    x = sample((64, 128))
    quantizer = Float8CurrentScalingQuantizer(fp8, "cuda")
    q = quantizer(x)
    want = (q._data.float() * q._scale_inv).to(torch.bfloat16)
    assert torch.equal(q.dequantize(), want)
    assert q.dequantize(dtype=torch.float32).dtype == torch.float32
    rtol = 0.0625 if fp8 == DType.kFloat8E4M3 else 0.125
    amax = x.abs().max().float().item()
    torch.testing.assert_close(q.dequantize().float(), x.float(), rtol=rtol,
                               atol=amax * 2.0 ** -9)
    # Torch ops on the tensor run on its dequantized value.
    assert torch.equal(q.float(), q.dequantize().float())


@pytest.mark.parametrize("fp8", list(FORMATS))
def test_usages(fp8):
    x = sample((3, 16, 32))
    full = Float8CurrentScalingQuantizer(fp8, "cuda")(x)
    rowwise = Float8CurrentScalingQuantizer(fp8, "cuda", columnwise=False)(x)
    assert rowwise._transpose is None
    assert_bits(rowwise._data, full._data, "rowwise data")
    columnwise = Float8CurrentScalingQuantizer(fp8, "cuda", rowwise=False)(x)
    assert columnwise._data is None and columnwise.shape == x.shape
    assert columnwise._transpose.shape == (32, 3, 16)
    assert_bits(columnwise._transpose, full._transpose, "columnwise data")
    assert torch.equal(columnwise.dequantize(), full.dequantize())
    # update_usage makes what is missing from the other copy.
    columnwise.update_usage(rowwise_usage=True)
    assert_bits(columnwise._data, full._data, "data from the transpose")
    rowwise.update_usage(columnwise_usage=True)
    assert_bits(rowwise._transpose, full._transpose, "transpose made")
    rowwise.update_usage(rowwise_usage=False)
    assert rowwise._data is None
    with pytest.raises(ValueError, match="rowwise or columnwise"):
        rowwise.update_usage(columnwise_usage=False)
    # set_usage changes what later tensors hold.
    quantizer = Float8CurrentScalingQuantizer(fp8, "cuda")
    quantizer.set_usage(columnwise=False)
    assert quantizer(x)._transpose is None
    with pytest.raises(ValueError, match="set_usage"):
        quantizer.set_usage(rowwise=False)
        quantizer(x)


@pytest.mark.parametrize("fp8", list(FORMATS))
def test_make_empty_and_update_quantized(fp8):
    x, y = sample((48, 64)), sample((48, 64))
    quantizer = delayed_quantizer(fp8, 2.0)
    empty = quantizer.make_empty((48, 64), dtype=torch.bfloat16,
                                 device="cuda")
    assert isinstance(empty, Float8Tensor) and empty.dtype == torch.bfloat16
    assert empty._transpose.shape == (64, 48)
    out = quantizer.update_quantized(x, empty)
    assert out is empty
    assert_bits(empty._data, ref_cast(x, 2.0, fp8), "update_quantized")
    assert_bits(empty._transpose, ref_transpose(empty._data), "transpose")
    quantizer.quantize(y, out=empty)
    assert_bits(empty._data, ref_cast(y, 2.0, fp8), "quantize(out=)")
    empty.quantize_(x)
    assert_bits(empty._data, ref_cast(x, 2.0, fp8), "quantize_")
    empty.copy_(y)  # copy_ quantizes through the tensor's quantizer
    assert_bits(empty._data, ref_cast(y, 2.0, fp8), "copy_")
    skip = torch.ones(1, device="cuda")
    quantizer.update_quantized(x, empty, noop_flag=skip)
    assert_bits(empty._data, ref_cast(y, 2.0, fp8), "noop_flag")
    # Another quantizer's format: dst takes it (TE's update_quantized).
    other = (DType.kFloat8E5M2 if fp8 == DType.kFloat8E4M3
             else DType.kFloat8E4M3)
    delayed_quantizer(other, 2.0).update_quantized(x, empty)
    assert empty._fp8_dtype == other
    assert_bits(empty._data, ref_cast(x, 2.0, other), "other format")
    # A nominal dtype of the caller's choice.
    assert quantizer.quantize(x, dtype=torch.float32).dtype == torch.float32


def test_straight_through_gradient():
    x = sample((32, 64)).requires_grad_()
    w = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
    quantizer = Float8CurrentScalingQuantizer(DType.kFloat8E4M3, "cuda")
    q = quantizer(x)
    assert q.requires_grad
    (q.dequantize() * w).sum().backward()
    assert torch.equal(x.grad, w)
    x.grad = None
    (quantizer(x).float() * w.float()).sum().backward()
    assert torch.equal(x.grad, w)
    with torch.no_grad():
        assert not quantizer(x).requires_grad
    quantizer.internal = True
    assert not quantizer(x).requires_grad


@pytest.mark.parametrize("fp8", list(FORMATS))
def test_empty_tensors(fp8):
    x = torch.empty(0, 16, device="cuda", dtype=torch.bfloat16)
    delayed = delayed_quantizer(fp8, 4.0)
    delayed.amax.fill_(3.0)
    q = delayed(x)
    assert q.shape == (0, 16) and q._transpose.shape == (16, 0)
    assert delayed.amax.item() == 3.0 and q._scale_inv.item() == 0.25
    assert q.dequantize().shape == (0, 16)
    current = Float8CurrentScalingQuantizer(fp8, "cuda")
    q = current(torch.empty(4, 0, 8, device="cuda"))
    assert current.amax.item() == 0.0 and current.scale.item() == 1.0
    assert q._scale_inv.item() == 1.0 and q._transpose.shape == (8, 4, 0)


def test_clone_detach_and_pickle():
    x = sample((16, 32))
    quantizer = Float8CurrentScalingQuantizer(DType.kFloat8E5M2, "cuda")
    q = quantizer(x)
    copy = q.clone()
    assert isinstance(copy, Float8Tensor) and copy._quantizer is quantizer
    assert copy._data.data_ptr() != q._data.data_ptr()
    assert_bits(copy._data, q._data, "clone")
    alias = q.detach()
    assert alias._data.data_ptr() == q._data.data_ptr()
    buffer = io.BytesIO()
    torch.save(q, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert_bits(loaded._data, q._data, "loaded data")
    assert loaded._fp8_dtype == DType.kFloat8E5M2
    assert torch.equal(loaded.dequantize(), q.dequantize())


@pytest.mark.parametrize("kind", ["delayed", "current"])
def test_fp8_model_init_weights_quantizer(kind):
    chosen = (recipe.DelayedScaling() if kind == "delayed"
              else recipe.Float8CurrentScaling())
    with te.fp8_model_init(enabled=True, recipe=chosen):
        layer = te.Linear(64, 32, params_dtype=torch.bfloat16)
    weight = layer.weight
    assert weight._fp8_dtype == DType.kFloat8E4M3
    quantizer = weight._quantizer
    assert isinstance(quantizer, Quantizer)
    assert quantizer.scale is weight._scaling.scale
    value = sample((32, 64))
    before = weight._data.clone()
    weight.quantize_(value)
    assert not torch.equal(bits(before), bits(weight._data))
    if kind == "current":
        scale = ref_scale(value.abs().max().float().item(),
                          DType.kFloat8E4M3)
        assert_bits(weight._data, ref_cast(value, scale, DType.kFloat8E4M3),
                    "fp8_model_init weight")


def test_refusals():
    quantizer = delayed_quantizer(DType.kFloat8E4M3, 1.0)
    with pytest.raises(ValueError, match="CUDA"):
        quantizer(torch.ones(8, 8))
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        quantizer(torch.ones(8, 8, device="cuda", dtype=torch.float64))
    with pytest.raises(ValueError, match="shape"):
        quantizer.update_quantized(torch.ones(8, 8, device="cuda"),
                                   quantizer(torch.ones(8, 16,
                                                        device="cuda")))
    with pytest.raises(ValueError, match="Float8Tensor"):
        quantizer.update_quantized(torch.ones(8, device="cuda"),
                                   torch.ones(8, device="cuda"))
    with pytest.raises(TypeError, match="kFloat8E4M3"):
        Float8CurrentScalingQuantizer(DType.kBFloat16, "cuda")
    reducing = Float8CurrentScalingQuantizer(DType.kFloat8E4M3, "cuda",
                                             with_amax_reduction=True)
    if not torch.distributed.is_initialized():
        with pytest.raises(RuntimeError, match="torch.distributed"):
            reducing(torch.ones(8, 8, device="cuda"))
