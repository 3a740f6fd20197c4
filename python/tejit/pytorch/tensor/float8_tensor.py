"""Transformer Engine 2.x's per-tensor FP8 quantizers
(`transformer_engine.pytorch.tensor.float8_tensor`), over tejit's cast
kernels (_weight_casts.py), and the tensor they make, tejit's Float8Tensor
(float8_tensor.py; fp8_model_init's weights are Float8Tensors too).

- Float8Quantizer(scale, amax, fp8_dtype): delayed scaling. The caller
  owns `scale` and `amax` (float32, one element, on the device): a
  quantization casts with `scale`, max-reduces the input's amax into
  `amax` (TE's atomic max: zero it to start a new window) and gives the
  tensor scale_inv = 1 / scale.
- Float8CurrentScalingQuantizer(fp8_dtype, device): current scaling.
  Each quantization computes amax = max |x| (into `amax`; all-reduced MAX
  over `amax_reduction_group` with `with_amax_reduction`), then
  scale = fp8_max / max(amax, amax_epsilon) by TE's rules (1 for 0, inf or
  NaN; FLT_MAX on overflow; with `force_pow_2_scales` rounded down to a
  power of 2), into `scale`, then the cast.

The tensors: `_data` (the FP8 data, the tensor's shape), `_transpose` (TE's
columnwise copy: the data's 2-D view [prod(leading dims), last]
transposed, of shape [last, *leading]), `_scale_inv` (float32 [1]),
`_fp8_dtype` (DType), `_quantizer` (the quantizer, shared: a
requantization, quantize_, copy_ or in-place op, goes through it). The
rowwise usage makes `_data`, the columnwise one `_transpose`. The cast is
one kernel writing both; a matrix whose rows are not a multiple of 8 or
whose last dim is not a multiple of 4 gets its transpose copied from the
data's bytes after the cast instead (the same bits). Empty tensors need
no kernel: Float8Quantizer leaves `amax` as it is, the current-scaling one
sets amax 0 and scale 1 (after the reduction, which every rank joins)."""
import copy

import torch

from .. import _weight_casts
from ..constants import DType, fp8_dtype, fp8_max, torch_name
from ..float8_tensor import (CurrentScalingState, DelayedScalingState,
                             Float8Tensor, QuantizerScaling, matrix_shape,
                             transpose_shape)
from .quantized_tensor import Quantizer, source_of

__all__ = ["Float8Quantizer", "Float8CurrentScalingQuantizer",
           "Float8Tensor"]

FLT_MAX = torch.finfo(torch.float32).max


def scale_from_amax(amax, maximum, power_2_scale):
    """te.compute_scale's scale, in torch: maximum / amax (a float32
    division of tensors, as the kernel divides), 1 for an amax of 0, inf
    or NaN, FLT_MAX on overflow; with power_2_scale the mantissa masked."""
    scale = torch.full_like(amax, maximum) / amax
    scale = torch.where(torch.isinf(scale), torch.full_like(scale, FLT_MAX),
                        scale)
    valid = (amax > 0) & torch.isfinite(amax)
    scale = torch.where(valid, scale, torch.ones_like(scale))
    if power_2_scale:
        scale = (scale.view(torch.int32) & 0x7F800000).view(torch.float32)
    return scale


def _slot(tensor, name):
    """`tensor` checked as a float32 one-element device tensor."""
    if (not isinstance(tensor, torch.Tensor) or tensor.numel() != 1
            or tensor.dtype != torch.float32):
        raise TypeError(f"Float8Quantizer: {name} must be a float32 tensor "
                        f"of one element, got {tensor!r}")
    return tensor


class _PerTensorQuantizer(Quantizer):
    """What both per-tensor quantizers share: the FP8 format (`dtype`, a
    DType), tensors made and updated, the cast into their buffers."""

    def __init__(self, fp8, rowwise, columnwise):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.dtype = fp8_dtype(fp8)

    def _torch_fp8(self):
        return getattr(torch, torch_name(self.dtype))

    def _to(self, device):
        """A copy whose scale and amax are on `device`."""
        result = copy.copy(self)
        result.scale = self.scale.to(device)
        result.amax = self.amax.to(device)
        return result

    def make_empty(self, shape, *, dtype=torch.float32, device=None,
                   requires_grad=False, pin_memory=False):
        """A Float8Tensor of `shape` and nominal `dtype` with uninitialized
        data (rowwise usage) and transpose (columnwise usage), scale_inv 1,
        quantized through this quantizer."""
        self._check_usages()
        device = torch.device("cuda" if device is None else device)
        shape = tuple(int(d) for d in shape)
        fp8 = self._torch_fp8()
        data = (torch.empty(shape, dtype=fp8, device=device)
                if self.rowwise_usage else None)
        transpose = (torch.empty(transpose_shape(shape), dtype=fp8,
                                 device=device)
                     if self.columnwise_usage else None)
        scale_inv = torch.ones(1, dtype=torch.float32, device=device)
        return Float8Tensor(data, scale_inv, QuantizerScaling(self), dtype,
                            requires_grad, transpose)

    def _quantize_new(self, tensor, dtype):
        src = source_of(tensor)
        nominal = tensor.dtype if dtype is None else dtype
        result = self.make_empty(src.shape, dtype=nominal, device=src.device)
        store = result._store
        self._quantize_into(src, store.data, store.scale_inv, store.transpose)
        return result

    def update_quantized(self, src, dst, *, noop_flag=None):
        """Quantizes `src` into Float8Tensor `dst` (of its shape) with this
        quantizer, in place: dst's buffers follow this quantizer's usages
        and FP8 format; dst keeps its own quantizer (TE's). `noop_flag`
        (float32 [1], 1 = skip) is read on the host."""
        src = self._update_source(src, dst, Float8Tensor, noop_flag)
        if src is None:
            return dst
        store, fp8 = dst._store, self._torch_fp8()
        shape = tuple(dst.shape)
        if store.data is not None:
            store.data = store.data.view(fp8)
        if store.transpose is not None:
            store.transpose = store.transpose.view(fp8)
        if self.rowwise_usage and store.data is None:
            store.data = torch.empty(shape, dtype=fp8, device=dst.device)
        if self.columnwise_usage and store.transpose is None:
            store.transpose = torch.empty(transpose_shape(shape), dtype=fp8,
                                          device=dst.device)
        if not self.rowwise_usage:
            store.data = None
        if not self.columnwise_usage:
            store.transpose = None
        with torch.no_grad():
            self._quantize_into(src, store.data, store.scale_inv,
                                store.transpose)
        store.transpose_stale = False
        return dst

    def _quantize_into(self, src, data, scale_inv, transpose):
        """The cast of `src` (contiguous, the tensor's shape) into `data`
        and `transpose` (either may be None), writing `scale_inv`."""
        fp8 = self._torch_fp8()
        for name, buffer in (("data", data), ("transpose", transpose)):
            if buffer is not None and buffer.dtype != fp8:
                raise ValueError(
                    f"{type(self).__name__} writes {self.dtype.name}, but "
                    f"the tensor's {name} is {buffer.dtype}; requantize "
                    f"with update_quantized to change its format")
        rows, cols = matrix_shape(src.shape)
        if src.numel() == 0:
            self._empty_cast(src.device, scale_inv)
            return
        matrix = src.reshape(rows, cols)
        out = (data.view(rows, cols) if data is not None
               else torch.empty((rows, cols), dtype=fp8, device=src.device))
        self._cast(matrix, out,
                   None if transpose is None else transpose.view(cols, rows),
                   scale_inv)

    def _check_device(self, device):
        if self.scale.device != device or self.amax.device != device:
            raise ValueError(
                f"{type(self).__name__}: scale ({self.scale.device}) and "
                f"amax ({self.amax.device}) must be on the tensor's device "
                f"({device})")


class Float8Quantizer(_PerTensorQuantizer):
    """TE's delayed-scaling quantizer (the module docstring)."""

    def __init__(self, scale, amax, fp8_dtype, *, rowwise=True,
                 columnwise=True):
        super().__init__(fp8_dtype, rowwise, columnwise)
        self.scale = _slot(scale, "scale")
        self.amax = _slot(amax, "amax")

    def _cast(self, matrix, out, transpose, scale_inv):
        self._check_device(matrix.device)
        amax = torch.empty(1, dtype=torch.float32, device=matrix.device)
        _weight_casts.cast_delayed(matrix, self.scale.reshape(1), out,
                                   transpose, amax)
        self.amax.copy_(torch.maximum(self.amax.reshape(1), amax)
                        .reshape(self.amax.shape))
        self._write_scale_inv(scale_inv)

    def _empty_cast(self, device, scale_inv):
        self._check_device(device)
        self._write_scale_inv(scale_inv)

    def _write_scale_inv(self, scale_inv):
        scale = self.scale.reshape(1)
        scale_inv.copy_(torch.ones_like(scale) / scale)

    def calibrate(self, tensor):
        """Sets `amax` to |tensor|'s amax, quantizing nothing (TE's)."""
        src = source_of(tensor)
        if src.numel():
            self.amax.copy_(src.abs().amax().float().reshape(
                self.amax.shape))


class Float8CurrentScalingQuantizer(_PerTensorQuantizer):
    """TE's current-scaling quantizer (the module docstring). `scale` and
    `amax` (float32 [1] on `device`) hold the last quantization's."""

    def __init__(self, fp8_dtype, device, *, rowwise=True, columnwise=True,
                 with_amax_reduction=False, amax_reduction_group=None,
                 force_pow_2_scales=False, amax_epsilon=0.0):
        super().__init__(fp8_dtype, rowwise, columnwise)
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.scale = torch.ones(1, dtype=torch.float32, device=device)
        self.amax = torch.zeros(1, dtype=torch.float32, device=device)
        self.with_amax_reduction = bool(with_amax_reduction)
        self.amax_reduction_group = amax_reduction_group
        self.force_pow_2_scales = bool(force_pow_2_scales)
        self.amax_epsilon = float(amax_epsilon)
        if not self.amax_epsilon >= 0.0:
            raise ValueError(f"amax_epsilon must be >= 0, got {amax_epsilon}")

    def __getstate__(self):
        state = dict(self.__dict__)
        state["amax_reduction_group"] = None  # a process group: not kept
        return state

    def _reduce(self):
        if not self.with_amax_reduction:
            return
        distributed = torch.distributed
        if not (distributed.is_available() and distributed.is_initialized()):
            raise RuntimeError(
                "Float8CurrentScalingQuantizer(with_amax_reduction=True) "
                "needs torch.distributed initialized")
        distributed.all_reduce(self.amax, op=distributed.ReduceOp.MAX,
                               group=self.amax_reduction_group)

    def _clamped_amax(self):
        if self.amax_epsilon == 0.0:
            return self.amax
        epsilon = torch.full_like(self.amax, self.amax_epsilon)
        return torch.where(self.amax < epsilon, epsilon, self.amax)

    def _cast(self, matrix, out, transpose, scale_inv):
        self._check_device(matrix.device)
        power_2 = self.force_pow_2_scales
        if not self.with_amax_reduction and self.amax_epsilon == 0.0:
            _weight_casts.cast_current(matrix, power_2, out, transpose,
                                       self.scale, scale_inv, self.amax)
            return
        _weight_casts.amax_of(matrix, self.amax)
        self._reduce()
        _weight_casts.cast_from_amax(matrix, self._clamped_amax(), power_2,
                                     out, transpose, self.scale, scale_inv)

    def _empty_cast(self, device, scale_inv):
        self._check_device(device)
        self.amax.zero_()
        self._reduce()
        self.scale.copy_(scale_from_amax(self._clamped_amax(),
                                         fp8_max(self.dtype),
                                         self.force_pow_2_scales))
        scale_inv.copy_(torch.ones_like(self.scale) / self.scale)


def quantizer_of_scaling(scaling):
    """A quantizer over an fp8_model_init weight's scaling state's own
    tensors (Float8Tensor._quantizer): DelayedScaling's scale and pending
    amax slot; current scaling's scale. None for other states."""
    if isinstance(scaling, DelayedScalingState):
        return Float8Quantizer(scaling.scale, scaling.amax_history[:1],
                               DType.kFloat8E4M3)
    if isinstance(scaling, CurrentScalingState):
        quantizer = Float8CurrentScalingQuantizer(
            DType.kFloat8E4M3, scaling.scale.device,
            force_pow_2_scales=scaling.power_2_scale)
        quantizer.scale = scaling.scale
        return quantizer
    return None
