"""Transformer Engine 2.x's block-scaled FP8 quantizer and tensor
(`transformer_engine.pytorch.tensor.float8_blockwise_tensor`):
Float8BlockScaling's casts (docs/block-scaling.md) for direct use.

- Float8BlockQuantizer(fp8_dtype, *, rowwise, columnwise,
  amax_epsilon=0.0, force_pow_2_scales=True, block_scaling_dim=2): each
  block of 128 elements of a row (block_scaling_dim 1) or 128 x 128 tile
  (2) of the tensor's 2-D view [M, K] = [prod(leading dims), last] gets
  its own scale from its own amax: scale = fp8_max / amax in float32 (1
  for an amax of 0, inf or NaN; FLT_MAX on overflow; rounded down to a
  power of 2 with force_pow_2_scales), data = fp8(x * scale) (the
  product in float32, saturated, round to nearest even), scale_inv =
  1 / scale. Partial blocks at the edges are blocks too. The columnwise
  copy is the 2-D view transposed, [K, *leading], cast again from the
  high-precision values with blocks along its own rows (for 2-D blocks:
  the rowwise data transposed, bit for bit).
- Float8BlockwiseQTensor: a torch.Tensor of the input's shape and
  (nominal) dtype holding `_rowwise_data` (FP8, the shape),
  `_rowwise_scale_inv`, `_columnwise_data` (FP8, [K, *leading]),
  `_columnwise_scale_inv`, `_fp8_dtype` (DType), `_quantizer` (a copy of
  the quantizer that made it, as TE's), `_is_2D_scaled`.

scale_inv layouts are TE's "GEMM-ready" ones, which are tejit's
te.block_quantize layout (dialects/BlockScaleLayout.h, what cuBLASLt
reads): float32, for an FP8 matrix [R, C] (rowwise: [M, K]; columnwise:
[K, M]) 1-D blocks [ceil(C/128), pad4(R)], element (j, r) = row r's block
j; 2-D [ceil(R/128), pad4(ceil(C/128))], element (i, j) = tile (i, j);
padding 0 (`Float8BlockQuantizer.get_scale_shape` gives TE's shapes).

The cast is one tejit program per (shape, dtype, device, block dim, pow2,
usages, FP8 format) (_weight_casts.cast_blocks: te.block_quantize,
rowwise and transposed, one kernel that reads the input once). Differences
from TE: the data buffers are torch.float8_e4m3fn / float8_e5m2 tensors
(TE's are uint8; `.view(torch.uint8)` gives TE's); amax_epsilon must be 0
(te.block_quantize has none); the COMPACT data format (all_gather_usage)
is not built; view/reshape, like every other torch op, run on the
dequantized value and return plain tensors; the 2-D view may have at most
65535 * 128 rows (the kernel's grid). Empty tensors need no kernel."""
import torch

from .. import _weight_casts
from .._cast_ir import MAX_BLOCK_ROWS, block_scale_shape
from ..constants import fp8_dtype as as_fp8_dtype
from ..constants import to_dtype, torch_name
from ..float8_tensor import (Dequantized, QuantizedTensor, matrix_shape,
                             run_dequantized, transpose_shape)
from .quantized_tensor import Quantizer, source_of

__all__ = ["Float8BlockQuantizer", "Float8BlockwiseQTensor"]

aten = torch.ops.aten
BLOCK = 128


def _torch_fp8(dtype):
    return getattr(torch, torch_name(dtype))


class Float8BlockQuantizer(Quantizer):
    """TE's block-scaling quantizer (the module docstring). Attributes:
    `dtype` (DType), `block_len` (128), `amax_epsilon`,
    `force_pow_2_scales`, `block_scaling_dim`, the usages."""

    def __init__(self, fp8_dtype, *, rowwise, columnwise, amax_epsilon=0.0,
                 force_pow_2_scales=True, block_scaling_dim=2,
                 all_gather_usage=False):
        super().__init__(rowwise=rowwise, columnwise=columnwise)
        self.dtype = as_fp8_dtype(fp8_dtype)
        self.block_len = BLOCK
        if isinstance(block_scaling_dim, bool) or block_scaling_dim not in (
                1, 2):
            raise ValueError(f"Float8BlockQuantizer: block_scaling_dim must "
                             f"be 1 (1 x 128 blocks) or 2 (128 x 128 "
                             f"tiles), got {block_scaling_dim!r}")
        self.block_scaling_dim = int(block_scaling_dim)
        epsilon = float(amax_epsilon)
        if not epsilon >= 0.0:
            raise ValueError(f"amax_epsilon must be >= 0, got "
                             f"{amax_epsilon!r}")
        if epsilon != 0.0:
            raise NotImplementedError(
                f"Float8BlockQuantizer(amax_epsilon={amax_epsilon!r}) is not "
                f"supported by tejit: its block cast (te.block_quantize) has "
                f"no amax epsilon; use amax_epsilon=0.0 (TE's default)")
        self.amax_epsilon = epsilon
        self.force_pow_2_scales = bool(force_pow_2_scales)
        if all_gather_usage:
            raise NotImplementedError(
                "Float8BlockQuantizer(all_gather_usage=True) is not "
                "supported by tejit: only TE's GEMM-ready scale layout is "
                "built, not the COMPACT one")
        self.all_gather_usage = False

    def __repr__(self):
        return (f"Float8BlockQuantizer(fp8_dtype={self.dtype.name}, "
                f"block_scaling_dim={self.block_scaling_dim}, "
                f"force_pow_2_scales={self.force_pow_2_scales}, "
                f"rowwise_usage={self.rowwise_usage}, "
                f"columnwise_usage={self.columnwise_usage})")

    # --- shapes (TE's) -----------------------------------------------------

    def get_scale_shape(self, shape, columnwise):
        """The scale_inv shape of a tensor of `shape`: of its rowwise data
        [M, K], or (`columnwise`) of the transposed [K, M] (the module
        docstring's layout)."""
        rows, cols = matrix_shape(tuple(shape))
        if columnwise:
            rows, cols = cols, rows
        return block_scale_shape(rows, cols, self.block_scaling_dim)

    def get_columnwise_shape(self, shape):
        """The columnwise data's shape: [last, *leading]."""
        return transpose_shape(tuple(shape))

    # --- tensors -----------------------------------------------------------

    def _allocate(self, shape, device, tensor=None):
        """[rowwise data, scale_inv, columnwise data, scale_inv] of a
        tensor of `shape` under this quantizer's usages, format and block
        dim (None for a usage it lacks); `tensor`'s own reused where they
        fit (data re-viewed in this format)."""
        fp8 = _torch_fp8(self.dtype)
        old = [None] * 4 if tensor is None else tensor._buffers()
        result = []
        for index, (columnwise, used) in enumerate(
                ((False, self.rowwise_usage), (True, self.columnwise_usage))):
            if not used:
                result += [None, None]
                continue
            data_shape = (self.get_columnwise_shape(shape) if columnwise
                          else tuple(shape))
            scale_shape = tuple(self.get_scale_shape(shape, columnwise))
            data, scale_inv = old[2 * index], old[2 * index + 1]
            if data is None or tuple(data.shape) != data_shape:
                data = torch.empty(data_shape, dtype=fp8, device=device)
            if scale_inv is None or tuple(scale_inv.shape) != scale_shape:
                scale_inv = torch.zeros(scale_shape, dtype=torch.float32,
                                        device=device)
            result += [data.view(fp8), scale_inv]
        return result

    def make_empty(self, shape, *, dtype=torch.float32, device=None,
                   requires_grad=False, pin_memory=False):
        """A Float8BlockwiseQTensor of `shape` and nominal `dtype` with
        uninitialized data and zero scale_inv for this quantizer's
        usages."""
        self._check_usages()
        device = torch.device("cuda" if device is None else device)
        shape = tuple(int(d) for d in shape)
        return Float8BlockwiseQTensor._build(
            shape, dtype, self.dtype, self._allocate(shape, device),
            self.copy(), self.block_scaling_dim == 2, requires_grad)

    def _quantize_new(self, tensor, dtype):
        src = source_of(tensor)
        result = self.make_empty(src.shape,
                                 dtype=tensor.dtype if dtype is None
                                 else dtype, device=src.device)
        self._cast_into(src, result)
        return result

    def update_quantized(self, src, dst, *, noop_flag=None):
        """Quantizes `src` (dst's shape) into Float8BlockwiseQTensor `dst`
        in place: dst's buffers follow this quantizer's usages, format and
        block dim (kept where they fit, else made); dst keeps its own
        quantizer. `noop_flag` (float32 [1], 1 = skip) is read on the
        host."""
        src = self._update_source(src, dst, Float8BlockwiseQTensor,
                                  noop_flag)
        if src is None:
            return dst
        dst._set_buffers(self._allocate(tuple(dst.shape), dst.device, dst))
        dst._fp8_dtype = self.dtype
        dst._is_2D_scaled = self.block_scaling_dim == 2
        with torch.no_grad():
            self._cast_into(src, dst)
        return dst

    def _cast_into(self, src, tensor):
        """The block cast of `src` (contiguous, the tensor's shape) into
        `tensor`'s buffers (this quantizer's layout)."""
        if src.numel() == 0:
            return
        rows, cols = matrix_shape(src.shape)
        if rows > MAX_BLOCK_ROWS:
            raise ValueError(
                f"Float8BlockQuantizer: a tensor's 2-D view may have at most "
                f"{MAX_BLOCK_ROWS} rows (65535 tiles of 128; rows = the "
                f"product of the leading dims), got {rows}")
        data, scale_inv, t_data, t_scale_inv = tensor._buffers()
        _weight_casts.cast_blocks(
            src.reshape(rows, cols), self.block_scaling_dim,
            self.force_pow_2_scales,
            None if data is None else (data.view(rows, cols), scale_inv),
            None if t_data is None else (t_data.view(cols, rows),
                                         t_scale_inv))


def _element_scales(scale_inv, rows, cols, block_dim):
    """[rows, cols] float32: the scale_inv of each element's block in an
    FP8 [rows, cols] matrix (the module docstring's layout)."""
    if block_dim == 1:
        per_block = scale_inv[:, :rows].t()  # [rows, ceil(cols / 128)]
        return per_block.repeat_interleave(BLOCK, dim=1)[:, :cols]
    tiles = scale_inv[:, :(cols + BLOCK - 1) // BLOCK]
    return (tiles.repeat_interleave(BLOCK, dim=0)[:rows]
            .repeat_interleave(BLOCK, dim=1)[:, :cols])


def _as_fp8(data, dtype):
    """`data` (None, FP8 of `dtype`, or TE's uint8) as FP8 of `dtype`."""
    if data is None:
        return None
    fp8 = _torch_fp8(dtype)
    if data.dtype == torch.uint8:
        return data.view(fp8)
    if data.dtype != fp8:
        raise TypeError(f"Float8BlockwiseQTensor: {dtype.name} data must be "
                        f"{fp8} or torch.uint8, got {data.dtype}")
    return data


class Float8BlockwiseQTensor(QuantizedTensor):
    """TE's block-scaled FP8 tensor (the module docstring): to PyTorch a
    tensor of `shape` and nominal `dtype`. Torch ops other than detach and
    copy_ run on the dequantized value (in-place ones quantize the result
    back through `_quantizer`)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __new__(cls, *, shape, dtype, fp8_dtype, rowwise_data,
                rowwise_scale_inv, columnwise_data, columnwise_scale_inv,
                quantizer, is_2D_scaled, requires_grad=False):
        fp8 = as_fp8_dtype(fp8_dtype)
        buffers = [_as_fp8(rowwise_data, fp8), rowwise_scale_inv,
                   _as_fp8(columnwise_data, fp8), columnwise_scale_inv]
        for name, data, scale_inv in (("rowwise", *buffers[:2]),
                                      ("columnwise", *buffers[2:])):
            if (data is None) != (scale_inv is None):
                raise ValueError(f"Float8BlockwiseQTensor: {name}_data and "
                                 f"{name}_scale_inv go together")
        if buffers[0] is None and buffers[2] is None:
            raise ValueError("Float8BlockwiseQTensor needs rowwise or "
                             "columnwise data (or both)")
        return cls._build(tuple(shape), dtype, fp8, buffers,
                          None if quantizer is None else quantizer.copy(),
                          bool(is_2D_scaled), requires_grad)

    @classmethod
    def _build(cls, shape, dtype, fp8, buffers, quantizer, is_2d,
               requires_grad=False):
        """The tensor over `buffers` ([rowwise data, scale_inv, columnwise
        data, scale_inv]) with `quantizer` as it is."""
        device = (buffers[0] if buffers[0] is not None else buffers[2]).device
        self = torch.Tensor._make_wrapper_subclass(
            cls, shape, dtype=dtype, device=device,
            requires_grad=requires_grad)
        self._set_buffers(buffers)
        self._fp8_dtype = fp8
        self._quantizer = quantizer
        self._is_2D_scaled = is_2d
        return self

    def _buffers(self):
        return [self._rowwise_data, self._rowwise_scale_inv,
                self._columnwise_data, self._columnwise_scale_inv]

    def _set_buffers(self, buffers):
        (self._rowwise_data, self._rowwise_scale_inv, self._columnwise_data,
         self._columnwise_scale_inv) = buffers

    def _block_dim(self):
        return 2 if self._is_2D_scaled else 1

    def _get_quantizer(self):
        if self._quantizer is None:
            raise ValueError("this Float8BlockwiseQTensor has no quantizer")
        return self._quantizer

    def get_metadata(self):
        """TE's: the constructor's arguments (but shape, dtype)."""
        return {"rowwise_data": self._rowwise_data,
                "rowwise_scale_inv": self._rowwise_scale_inv,
                "columnwise_data": self._columnwise_data,
                "columnwise_scale_inv": self._columnwise_scale_inv,
                "fp8_dtype": self._fp8_dtype, "quantizer": self._quantizer,
                "is_2D_scaled": self._is_2D_scaled}

    # --- values ------------------------------------------------------------

    def dequantize(self, dtype=None):
        """The value as a plain tensor of `dtype` (default: the nominal
        one): each FP8 element times its block's scale_inv in float32,
        rounded once to `dtype`; from the rowwise data when held, else
        from the columnwise. Under autograd the gradient passes to the
        tensor unchanged (TE's)."""
        if torch.is_grad_enabled() and self.requires_grad:
            return Dequantized.apply(self, dtype)
        return self._dequantized(dtype)

    def _dequantized(self, dtype=None):
        dtype = self.dtype if dtype is None else dtype
        if self.numel() == 0:
            return torch.empty(self.shape, dtype=dtype, device=self.device)
        rows, cols = matrix_shape(self.shape)
        if self._rowwise_data is not None:
            matrix = self._rowwise_data.reshape(rows, cols).float()
            matrix = matrix * _element_scales(self._rowwise_scale_inv, rows,
                                              cols, self._block_dim())
        else:
            matrix = self._columnwise_data.reshape(cols, rows).float()
            matrix = (matrix * _element_scales(
                self._columnwise_scale_inv, cols, rows,
                self._block_dim())).t()
        return matrix.to(dtype).reshape(self.shape).contiguous()

    def quantize_(self, tensor, *, noop_flag=None):
        """Quantizes `tensor` (this shape; a quantized tensor is
        dequantized first) into this tensor with its quantizer. Returns
        self."""
        self._get_quantizer().update_quantized(tensor, self,
                                               noop_flag=noop_flag)
        return self

    def update_usage(self, rowwise_usage=None, columnwise_usage=None):
        """TE's: keeps or drops the rowwise and the columnwise copy (None:
        as it is). A copy asked for and missing is made from the other
        only with 2-D blocks (the same tiles, transposed); 1-D copies
        have blocks along different dims and need a new quantization."""
        have_rows = self._rowwise_data is not None
        have_cols = self._columnwise_data is not None
        rowwise = have_rows if rowwise_usage is None else bool(rowwise_usage)
        columnwise = (have_cols if columnwise_usage is None
                      else bool(columnwise_usage))
        if not (rowwise or columnwise):
            raise ValueError("Float8BlockwiseQTensor.update_usage: a tensor "
                             "needs rowwise or columnwise data (or both)")
        missing = [name for name, wanted, held in (
            ("rowwise", rowwise, have_rows),
            ("columnwise", columnwise, have_cols)) if wanted and not held]
        if missing and not self._is_2D_scaled:
            raise ValueError(
                f"Float8BlockwiseQTensor.update_usage: the {missing[0]} "
                f"copy of a 1-D block-scaled tensor cannot be made from the "
                f"other (their blocks run along different dims); quantize "
                f"again with both usages")
        rows, cols = matrix_shape(self.shape)
        if "columnwise" in missing:
            self._columnwise_data, self._columnwise_scale_inv = \
                self._transposed(self._rowwise_data,
                                 self._rowwise_scale_inv, rows, cols,
                                 transpose_shape(tuple(self.shape)))
        if "rowwise" in missing:
            self._rowwise_data, self._rowwise_scale_inv = self._transposed(
                self._columnwise_data, self._columnwise_scale_inv, cols,
                rows, tuple(self.shape))
        if not rowwise:
            self._rowwise_data = self._rowwise_scale_inv = None
        if not columnwise:
            self._columnwise_data = self._columnwise_scale_inv = None

    @staticmethod
    def _transposed(data, scale_inv, rows, cols, shape):
        """The other copy of a 2-D block-scaled FP8 [rows, cols] matrix:
        the bytes transposed (shaped `shape`) and the tile scales
        transposed into [ceil(cols/128), pad4(ceil(rows/128))]."""
        moved = (data.view(torch.uint8).reshape(rows, cols).t().contiguous()
                 .view(data.dtype).reshape(shape))
        tiles_r, tiles_c = ((n + BLOCK - 1) // BLOCK for n in (rows, cols))
        scales = torch.zeros(block_scale_shape(cols, rows, 2),
                             dtype=torch.float32, device=data.device)
        scales[:, :tiles_r] = scale_inv[:, :tiles_c].t()
        return moved, scales

    def clone(self, *, memory_format=None):
        """A tensor with copies of the data and scale_inv, sharing the
        quantizer."""
        return Float8BlockwiseQTensor._build(
            tuple(self.shape), self.dtype, self._fp8_dtype,
            [None if b is None else b.clone() for b in self._buffers()],
            self._quantizer, self._is_2D_scaled)

    def _alias(self):
        return Float8BlockwiseQTensor._build(
            tuple(self.shape), self.dtype, self._fp8_dtype, self._buffers(),
            self._quantizer, self._is_2D_scaled)

    def _copy_from(self, src):
        """copy_: a Float8BlockwiseQTensor of the same layout is copied
        as it is (data and scale_inv); anything else is quantized."""
        mine, theirs = self._buffers(), (
            src._buffers() if isinstance(src, Float8BlockwiseQTensor)
            else None)
        if (theirs is not None and src._is_2D_scaled == self._is_2D_scaled
                and src._fp8_dtype == self._fp8_dtype
                and all((a is None and b is None) or (
                    a is not None and b is not None and a.shape == b.shape)
                    for a, b in zip(mine, theirs))):
            with torch.no_grad():
                for a, b in zip(mine, theirs):
                    if a is not None and a is not b:
                        a.view(torch.uint8).copy_(b.view(torch.uint8))
            return
        if src.shape != self.shape:
            src = src.expand(self.shape)
        self.quantize_(src)

    # --- torch ---------------------------------------------------------------

    def data_ptr(self):
        data = self._rowwise_data
        return (data if data is not None else self._columnwise_data).data_ptr()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.detach.default or func is aten.alias.default:
            return args[0]._alias()
        if func is aten.copy_.default and isinstance(
                args[0], Float8BlockwiseQTensor):
            args[0]._copy_from(args[1])
            return args[0]
        return run_dequantized(func, args, kwargs)

    def __repr__(self, *, tensor_contents=None):
        return (f"Float8BlockwiseQTensor(fp8_dtype={self._fp8_dtype.name}, "
                f"is_2D_scaled={self._is_2D_scaled}, "
                f"data={self._dequantized()!r})")

    def __reduce_ex__(self, protocol):
        return (_rebuild, (tuple(self.shape), self.dtype,
                           int(self._fp8_dtype), self._buffers(),
                           self._quantizer, self._is_2D_scaled,
                           self.requires_grad))


def _rebuild(shape, dtype, fp8, buffers, quantizer, is_2d, requires_grad):
    """A pickled Float8BlockwiseQTensor, rebuilt."""
    return Float8BlockwiseQTensor._build(shape, dtype, to_dtype(fp8),
                                         buffers, quantizer, is_2d,
                                         requires_grad)

