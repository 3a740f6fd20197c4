"""TE 2.x's quantizers in tejit.pytorch (docs/quantizers.md) without a
GPU: TE's DType enum (constants.py: values, the FP8 formats accepted and
refused), the te IR of the casts (_cast_ir.py: every mode, E4M3 and E5M2,
compiled through the whole pipeline to CUDA C++, skipped without
libtejit; kernel_transposes agrees with the code generator on which
shapes the cast kernel transposes), and, with PyTorch, the quantizers'
checks that need no GPU. tests/gpu/test_quantizers.py runs them on a GPU.
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
        self.assertRefused(NotImplementedError,
                           float8_blockwise_tensor.Float8BlockQuantizer,
                           "Float8BlockQuantizer")

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


if __name__ == "__main__":
    unittest.main()
