"""TE 2.x's quantizers in tejit.pytorch (docs/quantizers.md) without a
GPU: TE's DType enum (constants.py: values, the FP8 formats accepted and
refused), the te IR of the casts (_cast_ir.py: every mode, E4M3 and E5M2,
compiled through the whole pipeline to CUDA C++, skipped without
libtejit; kernel_transposes agrees with the code generator on which
shapes the cast kernel transposes), Float8BlockQuantizer's block cast
program (block_cast_ir: every variant one kernel, the scale shapes TE's
GEMM-ready ones, the 65535-tile row limit the code generator's), and,
with PyTorch, the quantizers' checks that need no GPU (the block tensor's
dequantize and update_usage on CPU buffers). tests/gpu/test_quantizers.py
and tests/gpu/test_block_quantizer.py run them on a GPU.
Run: python3 -m pytest tests/python
"""
import unittest

from torch_free import HAVE_TORCH, RefusalAssertions, library_loads, load

import tejit  # noqa: E402  (torch_free puts the checkout's python/ first)

constants = load("constants.py", "tejit_constants")
cast_ir = load("_cast_ir.py", "tejit_cast_ir")


class DTypeTest(RefusalAssertions, unittest.TestCase):

    def test_te_values(self):
        D = constants.DType
        self.assertEqual((D.kByte, D.kFloat32, D.kFloat16, D.kBFloat16,
                          D.kFloat8E4M3, D.kFloat8E5M2), (0, 4, 5, 6, 7, 8))

    def test_fp8_formats(self):
        D = constants.DType
        self.assertEqual(constants.fp8_max(D.kFloat8E4M3), 448.0)
        self.assertEqual(constants.fp8_max(D.kFloat8E5M2), 57344.0)
        self.assertEqual(constants.ir_element(D.kFloat8E5M2), "f8E5M2")
        self.assertEqual(constants.fp8_dtype(7), D.kFloat8E4M3)
        self.assertEqual(constants.torch_name(D.kFloat8E4M3),
                         "float8_e4m3fn")

    def test_non_fp8_refused(self):
        D = constants.DType
        for value in (D.kBFloat16, "float8_e4m3fn", 99, None, True):
            self.assertRefused(TypeError, lambda: constants.fp8_dtype(value),
                               "kFloat8E4M3", "kFloat8E5M2")


class CastIrTest(RefusalAssertions, unittest.TestCase):

    def variants(self):
        for fp8 in cast_ir.FP8_ELEMENTS:
            for mode in cast_ir.MODES:
                for transpose in (False, True):
                    for power_2 in (False, True):
                        yield ((64, 128), "bf16", transpose, mode, power_2,
                               fp8)
        yield (3, 5), "f32", False, "current", False, "f8E5M2"
        yield (1, 1), "f16", False, "delayed", False, "f8E4M3FN"
        yield (8, 12), "bf16", True, "from_amax", False, "f8E5M2"

    def test_ir_names_the_format(self):
        text = cast_ir.cast_ir((16, 32), "bf16", True, "current", True,
                               "f8E5M2")
        self.assertIn("fp8_type = f8E5M2, power_2_scale", text)
        self.assertIn("tensor<32x16xf8E5M2>", text)
        self.assertIn('te.name = "amax"', text)

    @unittest.skipUnless(library_loads(), "needs libtejit")
    def test_every_variant_compiles_to_cuda(self):
        for variant in self.variants():
            with self.subTest(variant=variant):
                cuda = tejit.compile_ir(cast_ir.cast_ir(*variant),
                                        stage="cuda", training=False)
                self.assertIn("__global__", cuda)
        cuda = tejit.compile_ir(cast_ir.amax_ir((7, 3), "bf16"),
                                stage="cuda", training=False)
        self.assertIn("__global__", cuda)

    @unittest.skipUnless(library_loads(), "needs libtejit")
    def test_kernel_transposes_matches_the_code_generator(self):
        for shape in ((8, 4), (16, 12), (7, 12), (8, 6), (1, 16), (24, 2)):
            with self.subTest(shape=shape):
                ir = cast_ir.cast_ir(shape, "bf16", True, "delayed")
                if cast_ir.kernel_transposes(*shape):
                    tejit.compile_ir(ir, stage="cuda", training=False)
                else:
                    self.assertRefused(
                        tejit.TejitError,
                        lambda: tejit.compile_ir(ir, stage="cuda",
                                                 training=False),
                        "rows % 8 == 0")

    def test_bad_arguments(self):
        self.assertRefused(ValueError, lambda: cast_ir.cast_ir(
            (0, 16), "bf16", False, "delayed"), "non-empty matrix")
        self.assertRefused(ValueError, lambda: cast_ir.cast_ir(
            (2, 3, 4), "bf16", False, "delayed"), "matrix")
        self.assertRefused(ValueError, lambda: cast_ir.cast_ir(
            (16, 16), "f64", False, "delayed"), "bf16, f16, f32")
        self.assertRefused(ValueError, lambda: cast_ir.cast_ir(
            (16, 16), "bf16", False, "delayed", fp8="f8E4M3FNUZ"), "f8E5M2")
        self.assertRefused(ValueError, lambda: cast_ir.cast_ir(
            (16, 16), "bf16", False, "blocks"), "delayed, current")


def te_scale_shape(shape, columnwise, block_scaling_dim):
    """TE's Float8BlockQuantizer.get_scale_shape, written out from its
    docstring: M = prod(leading dims), K = last; 2-D: rowwise
    (ceil(M/128), roundup4(ceil(K/128))), columnwise (ceil(K/128),
    roundup4(ceil(M/128))); 1-D: rowwise (ceil(K/128), roundup4(M)),
    columnwise (ceil(M/128), roundup4(K))."""
    m = 1
    for dim in shape[:-1]:
        m *= dim
    k = shape[-1] if shape else 1

    def ceil128(n):
        return -(-n // 128)

    def round4(n):
        return -(-n // 4) * 4

    if block_scaling_dim == 2:
        if columnwise:
            return ceil128(k), round4(ceil128(m))
        return ceil128(m), round4(ceil128(k))
    if columnwise:
        return ceil128(m), round4(k)
    return ceil128(k), round4(m)


class BlockCastIrTest(RefusalAssertions, unittest.TestCase):
    """Float8BlockQuantizer's cast program (_cast_ir.block_cast_ir)."""

    SHAPES = [(1,), (), (1, 1), (7, 5), (128, 128), (129, 257), (4, 3, 300),
              (8192, 4096), (0, 16)]

    def test_scale_shapes_are_te_gemm_ready_ones(self):
        for shape in self.SHAPES:
            rows = 1
            for dim in shape[:-1]:
                rows *= dim
            cols = shape[-1] if shape else 1
            for dim in (1, 2):
                with self.subTest(shape=shape, dim=dim):
                    self.assertEqual(cast_ir.block_scale_shape(rows, cols,
                                                               dim),
                                     te_scale_shape(shape, False, dim))
                    self.assertEqual(cast_ir.block_scale_shape(cols, rows,
                                                               dim),
                                     te_scale_shape(shape, True, dim))

    def variants(self):
        for fp8 in cast_ir.FP8_ELEMENTS:
            for dim in (1, 2):
                for rowwise, columnwise in ((True, True), (True, False),
                                            (False, True)):
                    for power_2 in (False, True):
                        yield ((256, 384), "bf16", dim, rowwise, columnwise,
                               power_2, fp8)
        for shape in ((1, 1), (7, 5), (129, 257), (300, 130)):
            for dim in (1, 2):
                yield shape, "f32", dim, True, True, True, "f8E4M3FN"
        yield (64, 128), "f16", 1, True, False, False, "f8E5M2"

    def test_ir_names_results_in_order(self):
        text = cast_ir.block_cast_ir((300, 130), "bf16", 1, True, True, True)
        names = [part.split('"')[1] for part in text.split("te.name = ")[1:]]
        self.assertEqual(names, ["input", "rowwise_data", "rowwise_scale_inv",
                                 "columnwise_data", "columnwise_scale_inv"])
        self.assertIn("tensor<130x300xf8E4M3FN>", text)
        self.assertIn("tensor<2x300xf32>", text)   # rowwise: [ceil(130/128),
        self.assertIn("tensor<3x132xf32>", text)   # pad4(300)]; columnwise
        self.assertIn("block_dim = 1 : i64, transpose, power_2_scale", text)
        text = cast_ir.block_cast_ir((300, 130), "bf16", 2, False, True,
                                     False, "f8E5M2")
        self.assertNotIn("power_2_scale", text)
        self.assertNotIn("rowwise", text)
        self.assertIn("tensor<2x4xf32>", text)

    @unittest.skipUnless(library_loads(), "needs libtejit")
    def test_every_variant_compiles_to_one_kernel(self):
        for variant in self.variants():
            with self.subTest(variant=variant):
                cuda = tejit.compile_ir(cast_ir.block_cast_ir(*variant),
                                        stage="cuda", training=False)
                self.assertEqual(cuda.count("__global__"), 1)

    @unittest.skipUnless(library_loads(), "needs libtejit")
    def test_row_limit_matches_the_code_generator(self):
        rows = cast_ir.MAX_BLOCK_ROWS
        tejit.compile_ir(cast_ir.block_cast_ir((rows, 4), "bf16", 1, True,
                                               True, True),
                         stage="cuda", training=False)
        # One more row, past block_cast_ir's own check: the code generator
        # refuses it too.
        text = cast_ir.block_cast_ir((rows, 4), "bf16", 1, True, False, True)
        text = text.replace(f"1x{rows}xf32", f"1x{rows + 4}xf32").replace(
            f"{rows}x", f"{rows + 1}x")
        self.assertRefused(tejit.TejitError,
                           lambda: tejit.compile_ir(text, stage="cuda",
                                                    training=False),
                           "65535")

    def test_bad_arguments(self):
        ir = cast_ir.block_cast_ir
        self.assertRefused(ValueError, lambda: ir(
            (16, 16), "bf16", 3, True, True, True), "block_dim must be 1 or 2")
        self.assertRefused(ValueError, lambda: ir(
            (16, 16), "bf16", 1, False, False, True), "rowwise or columnwise")
        self.assertRefused(ValueError, lambda: ir(
            (cast_ir.MAX_BLOCK_ROWS + 1, 16), "bf16", 1, True, True, True),
            "65535", "leading dims")
        self.assertRefused(ValueError, lambda: ir(
            (0, 16), "bf16", 1, True, True, True), "non-empty")
        self.assertRefused(ValueError, lambda: ir(
            (16, 16), "f64", 1, True, True, True), "bf16, f16, f32")


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class QuantizerChecksTest(RefusalAssertions, unittest.TestCase):
    """What the quantizers decide before touching a GPU."""

    def setUp(self):
        import torch
        from tejit.pytorch.tensor import float8_tensor
        self.torch, self.module = torch, float8_tensor

    def delayed(self, **kwargs):
        torch = self.torch
        return self.module.Float8Quantizer(
            torch.ones(1), torch.zeros(1), torch.float8_e5m2, **kwargs)

    def test_te_names_and_usages(self):
        from tejit.pytorch.constants import DType
        from tejit.pytorch.tensor import (QuantizedTensor, Quantizer,
                                          float8_blockwise_tensor)
        quantizer = self.delayed(columnwise=False)
        self.assertIsInstance(quantizer, Quantizer)
        self.assertEqual(quantizer.dtype, DType.kFloat8E5M2)
        self.assertEqual((quantizer.rowwise_usage,
                          quantizer.columnwise_usage), (True, False))
        copy = quantizer.copy()
        copy.set_usage(rowwise=False, columnwise=True)
        self.assertTrue(quantizer.rowwise_usage)
        self.assertIs(copy.scale, quantizer.scale)
        self.assertTrue(issubclass(self.module.Float8Tensor, QuantizedTensor))
        self.assertTrue(issubclass(
            float8_blockwise_tensor.Float8BlockwiseQTensor, QuantizedTensor))
        self.assertTrue(issubclass(
            float8_blockwise_tensor.Float8BlockQuantizer, Quantizer))

    def test_refusals(self):
        torch = self.torch
        module = self.module
        self.assertRefused(TypeError, lambda: module.Float8Quantizer(
            torch.ones(1), torch.zeros(1), torch.bfloat16), "kFloat8E4M3")
        self.assertRefused(TypeError, lambda: module.Float8Quantizer(
            torch.ones(2), torch.zeros(1), torch.float8_e4m3fn), "scale")
        self.assertRefused(ValueError,
                           lambda: module.Float8CurrentScalingQuantizer(
                               torch.float8_e4m3fn, "cpu",
                               amax_epsilon=-1.0), "amax_epsilon")
        quantizer = self.delayed()
        self.assertRefused(ValueError, lambda: quantizer(torch.ones(16, 16)),
                           "CUDA")
        self.assertRefused(TypeError, lambda: quantizer(
            torch.ones(16, 16, dtype=torch.float64)), "float32, bfloat16")
        self.assertRefused(TypeError, lambda: quantizer([1.0]),
                           "torch.Tensor")
        self.assertRefused(ValueError, lambda: quantizer.update_quantized(
            torch.ones(4), torch.ones(4)), "Float8Tensor")
        quantizer.set_usage(rowwise=False, columnwise=False)
        self.assertRefused(ValueError, lambda: quantizer.make_empty(
            (4, 4), device="cpu"), "set_usage")


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class BlockQuantizerChecksTest(RefusalAssertions, unittest.TestCase):
    """Float8BlockQuantizer / Float8BlockwiseQTensor without a GPU: the
    arguments, TE's shapes, and the tensor's CPU-side logic (dequantize
    and update_usage on hand-made CPU buffers)."""

    def setUp(self):
        import torch
        from tejit.pytorch.tensor import float8_blockwise_tensor
        self.torch, self.module = torch, float8_blockwise_tensor

    def quantizer(self, **kwargs):
        kwargs.setdefault("rowwise", True)
        kwargs.setdefault("columnwise", True)
        return self.module.Float8BlockQuantizer(self.torch.float8_e4m3fn,
                                                **kwargs)

    def test_te_defaults_and_shapes(self):
        from tejit.pytorch.constants import DType
        quantizer = self.quantizer()
        self.assertEqual(quantizer.dtype, DType.kFloat8E4M3)
        self.assertEqual((quantizer.block_len, quantizer.block_scaling_dim,
                          quantizer.force_pow_2_scales,
                          quantizer.amax_epsilon), (128, 2, True, 0.0))
        for shape in BlockCastIrTest.SHAPES:
            for dim in (1, 2):
                quantizer.block_scaling_dim = dim
                for columnwise in (False, True):
                    self.assertEqual(
                        tuple(quantizer.get_scale_shape(shape, columnwise)),
                        te_scale_shape(shape, columnwise, dim))
        self.assertEqual(quantizer.get_columnwise_shape((2, 3, 5)), (5, 2, 3))
        self.assertEqual(quantizer.get_columnwise_shape(()), ())
        empty = quantizer.make_empty((130, 300), dtype=self.torch.bfloat16,
                                     device="cpu")
        self.assertEqual(tuple(empty._rowwise_scale_inv.shape), (2, 4))
        self.assertEqual(tuple(empty._columnwise_data.shape), (300, 130))
        self.assertEqual(empty.dtype, self.torch.bfloat16)

    def test_refusals(self):
        torch = self.torch
        self.assertRefused(NotImplementedError, lambda: self.quantizer(
            amax_epsilon=1e-6), "amax_epsilon", "te.block_quantize")
        self.assertRefused(ValueError, lambda: self.quantizer(
            amax_epsilon=-1.0), "amax_epsilon")
        for dim in (0, 3, True):
            self.assertRefused(ValueError, lambda: self.quantizer(
                block_scaling_dim=dim), "block_scaling_dim")
        self.assertRefused(NotImplementedError, lambda: self.quantizer(
            all_gather_usage=True), "COMPACT")
        self.assertRefused(TypeError, lambda: self.module.Float8BlockQuantizer(
            torch.bfloat16, rowwise=True, columnwise=True), "kFloat8E4M3")
        quantizer = self.quantizer()
        self.assertRefused(ValueError, lambda: quantizer(torch.ones(8, 8)),
                           "CUDA")
        self.assertRefused(ValueError, lambda: quantizer.update_quantized(
            torch.ones(4), torch.ones(4)), "Float8BlockwiseQTensor")
        quantizer.set_usage(rowwise=False, columnwise=False)
        self.assertRefused(ValueError, lambda: quantizer.make_empty(
            (4, 4), device="cpu"), "set_usage")
        self.assertRefused(ValueError, lambda: self.module.Float8BlockwiseQTensor(
            shape=(4, 4), dtype=torch.float32, fp8_dtype=torch.float8_e4m3fn,
            rowwise_data=None, rowwise_scale_inv=None, columnwise_data=None,
            columnwise_scale_inv=None, quantizer=None, is_2D_scaled=True),
            "rowwise or columnwise")

    def tensor(self, rows, cols, dim, columnwise):
        """A CPU tensor of FP8 codes with known per-block scale_invs."""
        torch = self.torch
        quantizer = self.quantizer(block_scaling_dim=dim,
                                   rowwise=not columnwise,
                                   columnwise=columnwise)
        tensor = quantizer.make_empty((rows, cols), device="cpu")
        codes = (torch.arange(rows * cols) % 7 - 3).float()
        data_rows, data_cols = (cols, rows) if columnwise else (rows, cols)
        data = codes.reshape(data_rows, data_cols)
        buffers = tensor._buffers()
        index = 2 if columnwise else 0
        buffers[index].copy_(data.to(torch.float8_e4m3fn))
        scale_inv = buffers[index + 1]
        scale_inv.copy_(torch.arange(scale_inv.numel()).float()
                        .reshape(scale_inv.shape) + 1)
        # Each element's scale_inv, read off TE's layout element by element.
        want = torch.empty(data_rows, data_cols)
        for r in range(data_rows):
            for c in range(data_cols):
                want[r, c] = (scale_inv[c // 128, r] if dim == 1
                              else scale_inv[r // 128, c // 128])
        want = data * want
        return tensor, (want.t() if columnwise else want)

    def test_dequantize_reads_te_layout(self):
        for dim in (1, 2):
            for columnwise in (False, True):
                with self.subTest(dim=dim, columnwise=columnwise):
                    tensor, want = self.tensor(130, 260, dim, columnwise)
                    got = tensor.dequantize()
                    self.assertEqual(got.dtype, self.torch.float32)
                    self.assertTrue(self.torch.equal(got, want))

    def test_update_usage(self):
        torch = self.torch
        tensor, want = self.tensor(130, 260, 2, False)
        tensor.update_usage(columnwise_usage=True)
        self.assertEqual(tuple(tensor._columnwise_data.shape), (260, 130))
        self.assertEqual(tuple(tensor._columnwise_scale_inv.shape), (3, 4))
        tensor.update_usage(rowwise_usage=False)
        self.assertIsNone(tensor._rowwise_data)
        self.assertTrue(torch.equal(tensor.dequantize(), want))
        tensor.update_usage(rowwise_usage=True)
        self.assertTrue(torch.equal(tensor.dequantize(), want))
        self.assertRefused(ValueError, lambda: tensor.update_usage(
            rowwise_usage=False, columnwise_usage=False),
            "rowwise or columnwise")
        vector, _ = self.tensor(130, 260, 1, False)
        self.assertRefused(ValueError, lambda: vector.update_usage(
            columnwise_usage=True), "1-D block-scaled")
        vector.update_usage(rowwise_usage=True, columnwise_usage=False)


if __name__ == "__main__":
    unittest.main()
