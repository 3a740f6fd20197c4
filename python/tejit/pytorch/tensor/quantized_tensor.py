"""Transformer Engine 2.x's quantizer base class
(`transformer_engine.pytorch.tensor.quantized_tensor`): a Quantizer turns
a high-precision tensor into a quantized one (`quantizer(x)`,
`quantize(x, out=..., dtype=...)`), into an existing one
(`update_quantized`), or makes an empty one (`make_empty`); its usages say
which copies the result holds (rowwise: the data as it is, for a GEMM's
row-major operand; columnwise: the transpose of its 2-D view, for the
backward's). QuantizedTensor is the base of the quantized tensor types
(tejit's Float8Tensor and Float8BlockwiseQTensor).

Under autograd (grad enabled, an input that requires grad, a quantizer
not `internal`), `quantize` is straight-through, as TE's: the result's
gradient reaches the input unchanged (cast to the input's dtype). TE's
`internal` quantizers make storage objects that are not tensors; tejit's
always make tensors (`internal` only turns autograd off)."""
import copy

import torch

from ..float8_tensor import QuantizedTensor

__all__ = ["Quantizer", "QuantizedTensor"]

# What the cast kernels read.
SOURCE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def source_of(tensor, device=None):
    """`tensor` as a quantizer reads it: a contiguous float32, bf16 or fp16
    CUDA tensor (a quantized tensor is dequantized; moved to `device` when
    given). Clear errors for anything else."""
    if isinstance(tensor, QuantizedTensor):
        tensor = tensor._dequantized()
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"a quantizer takes a torch.Tensor, not "
                        f"{type(tensor).__name__}")
    if tensor.dtype not in SOURCE_DTYPES:
        raise TypeError(f"tejit's quantizers read float32, bfloat16 or "
                        f"float16 tensors, got {tensor.dtype}")
    tensor = tensor.detach()
    if device is not None:
        tensor = tensor.to(device)
    if tensor.device.type != "cuda":
        raise ValueError(f"tejit's quantizers run on CUDA tensors, got one on "
                         f"{tensor.device}")
    return tensor.contiguous()


class Quantizer:
    """TE's Quantizer: usages (`rowwise_usage`, `columnwise_usage`,
    `set_usage`), `internal`, `quantize`/`__call__`, `update_quantized`,
    `make_empty`, `copy` (shallow: the copy shares the scale and amax
    tensors, as TE's). Subclasses implement update_quantized, make_empty
    and `_quantize_new(tensor, dtype)`."""

    def __init__(self, *, rowwise=True, columnwise=True):
        self.rowwise_usage = bool(rowwise)
        self.columnwise_usage = bool(columnwise)
        self.internal = False

    def __repr__(self):
        return (f"{type(self).__name__}(rowwise_usage={self.rowwise_usage}, "
                f"columnwise_usage={self.columnwise_usage}, "
                f"internal={self.internal})")

    def set_usage(self, *, rowwise=None, columnwise=None):
        """Which copies tensors made from now on hold (None: unchanged)."""
        if rowwise is not None:
            self.rowwise_usage = bool(rowwise)
        if columnwise is not None:
            self.columnwise_usage = bool(columnwise)

    def get_usages(self):
        return {"rowwise": self.rowwise_usage,
                "columnwise": self.columnwise_usage}

    def _check_usages(self):
        if not (self.rowwise_usage or self.columnwise_usage):
            raise ValueError(
                f"{type(self).__name__}: neither rowwise nor columnwise "
                f"usage is set; set_usage(rowwise=True) or "
                f"set_usage(columnwise=True) first")

    def copy(self):
        return copy.copy(self)

    def __call__(self, tensor):
        return self.quantize(tensor)

    def quantize(self, tensor, *, out=None, dtype=None):
        """`tensor` quantized: into `out` (update_quantized) when given,
        else into a new tensor of nominal dtype `dtype` (default: the
        input's)."""
        if out is not None:
            return self.update_quantized(tensor, out)
        if (not self.internal and torch.is_grad_enabled()
                and isinstance(tensor, torch.Tensor) and tensor.requires_grad):
            return _Quantize.apply(tensor, self, dtype)
        return self._quantize_new(tensor, dtype)

    def multi_quantize(self, tensors):
        return [self.quantize(tensor) for tensor in tensors]

    def calibrate(self, tensor):
        """Records the quantizer state a quantization of `tensor` would,
        without one (nothing by default)."""

    def _update_source(self, src, dst, kind, noop_flag):
        """update_quantized's checks: `dst` must be a `kind` (its tensor
        class); `src` as the cast reads it (source_of, on dst's device, of
        dst's shape), or None when `noop_flag` (float32 [1], read on the
        host) is 1: nothing to do."""
        if not isinstance(dst, kind):
            raise ValueError(f"{type(self).__name__}.update_quantized "
                             f"updates a tejit {kind.__name__}, not "
                             f"{type(dst).__name__}")
        if noop_flag is not None and bool(noop_flag.item() == 1.0):
            return None
        self._check_usages()
        src = source_of(src, dst.device)
        if src.shape != dst.shape:
            raise ValueError(f"update_quantized: source of shape "
                             f"{tuple(src.shape)} for a tensor of shape "
                             f"{tuple(dst.shape)}")
        return src

    def update_quantized(self, src, dst, *, noop_flag=None):
        raise NotImplementedError(
            f"{type(self).__name__} does not implement update_quantized")

    def make_empty(self, shape, *, dtype=torch.float32, device=None,
                   requires_grad=False, pin_memory=False):
        raise NotImplementedError(
            f"{type(self).__name__} does not implement make_empty")

    def _quantize_new(self, tensor, dtype):
        raise NotImplementedError(
            f"{type(self).__name__} does not implement quantize")


class _Quantize(torch.autograd.Function):
    """quantize under autograd: straight-through (TE's _QuantizeFunc)."""

    @staticmethod
    def forward(ctx, tensor, quantizer, dtype):
        ctx.dtype = tensor.dtype
        return quantizer._quantize_new(tensor, dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype), None, None
