"""tejit.pytorch.parallel_cross_entropy (docs/cross-entropy.md) without
PyTorch or a GPU: the te IR of its two programs
(python/tejit/pytorch/_cross_entropy_ir.py, loaded by path) goes through
the inference pipeline to the kernels the CUDA emitter writes
(tejit.compile_ir, stage "cuda"), with the program interface the Python
function binds (names, shapes, dtypes), the tp_all_gather of the row
statistics on a vocab split, and the refusals naming the argument.
test_pytorch_cross_entropy.py checks the function itself (with PyTorch),
tests/gpu/test_cross_entropy.py its numbers on a GPU.
Run: python3 -m pytest tests/python
"""
import os
import re
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import RefusalAssertions, library_loads, load  # noqa: E402

ce = load("_cross_entropy_ir.py", "tejit_cross_entropy_ir")

# A function's signature: `@NAME(ARGUMENTS) -> (RESULTS)`.
_HEADER = re.compile(r"func\.func @(\w+)\((.*)\) -> \((.*)\) \{")
_TENSOR = re.compile(r'tensor<([^>]*)> \{te\.name = "([^"]+)"\}')


def interface(text, name):
    """[(te.name, shape)] of the arguments and of the results of @name."""
    for line in text.splitlines():
        match = _HEADER.search(line)
        if match and match.group(1) == name:
            return tuple([(n, s) for s, n in _TENSOR.findall(part)]
                         for part in match.group(2, 3))
    raise AssertionError(f"no function @{name} in:\n{text}")


def kernels(text):
    """The names of the kernels of an --emit=cuda listing."""
    return re.findall(r"===== kernel (\w+)", text)


class IrTest(unittest.TestCase):
    def test_forward_interface(self):
        text = ce.forward_ir(64, 1000, "bf16", "i64", 1, 0, 0.0, False, -100)
        arguments, results = interface(text, "cross_entropy")
        self.assertEqual(arguments, [("logits", "64x1000xbf16"),
                                     ("target", "64xi64")])
        self.assertEqual(results, [("loss", "64xf32"), ("lse", "64xf32")])
        self.assertNotIn("tp_all_gather", text)

    def test_mean_returns_the_count(self):
        text = ce.forward_ir(64, 1000, "f32", "i32", 1, 0, 0.1, True, -1)
        _, results = interface(text, "cross_entropy")
        self.assertEqual(results, [("loss", "1xf32"), ("count", "1xf32"),
                                   ("lse", "64xf32")])
        self.assertIn("te.cross_entropy_mean %loss, %target "
                      "{ignore_index = -1}", text)

    def test_vocab_split_gathers_row_statistics(self):
        text = ce.forward_ir(64, 1000, "bf16", "i64", 4, 3, 0.0, False, -100)
        self.assertIn("vocab_start = 3000", text)
        self.assertIn("te.tp_all_gather %stats {ranks = 4} : "
                      "tensor<64x4xf32> -> tensor<256x4xf32>", text)
        self.assertIn("vocab_size = 4000", text)

    def test_backward_interface(self):
        for reduce_loss in (False, True):
            text = ce.backward_ir(64, 1000, "f16", "i64", 2, 1, 0.25,
                                  reduce_loss, -100)
            arguments, results = interface(text, "cross_entropy_backward")
            expected = [("logits", "64x1000xf16"), ("target", "64xi64"),
                        ("lse", "64xf32"),
                        ("grad_loss", "1xf32" if reduce_loss else "64xf32")]
            if reduce_loss:
                expected.append(("count", "1xf32"))
            self.assertEqual(arguments, expected)
            self.assertEqual(results, [("grad", "64x1000xf16")])
            self.assertIn("vocab_start = 1000", text)

    def test_label_smoothing_is_exact(self):
        text = ce.forward_ir(8, 16, "f32", "i64", 1, 0, 0.1, False, -100)
        literal = re.search(r"label_smoothing = ([^,}]+)", text).group(1)
        self.assertEqual(float(literal), 0.1)
        self.assertIn(".", literal)  # MLIR reads "1e-05" as an integer


@unittest.skipUnless(library_loads(), "needs libtejit.so (TEJIT_LIBRARY)")
class PipelineTest(unittest.TestCase):
    """The programs compile to the kernels of codegen/LossKernels.cpp."""

    def emitted(self, text):
        return tejit.compile_ir(text, "cuda", training=False)

    def test_forward_kernels(self):
        for ranks, reduce_loss in ((1, False), (2, True)):
            text = ce.forward_ir(128, 32000, "bf16", "i64", ranks,
                                 ranks - 1, 0.1, reduce_loss, -100)
            names = kernels(self.emitted(text))
            expected = ["cross_entropy_cross_entropy_stats_0",
                        "cross_entropy_cross_entropy_loss_0"]
            if reduce_loss:
                expected.append("cross_entropy_cross_entropy_mean_0")
            self.assertEqual(names, expected)

    def test_vocab_split_plans_one_gather(self):
        text = ce.forward_ir(128, 32000, "bf16", "i64", 2, 1, 0.0, False,
                             -100)
        planned = tejit.compile_ir(text, "planned", training=False)
        self.assertEqual(planned.count("te.tp_all_gather"), 1)

    def test_backward_kernel_reads_and_writes_one_buffer(self):
        text = ce.backward_ir(128, 32000, "bf16", "i32", 2, 1, 0.1, True,
                              -100)
        listing = self.emitted(text)
        self.assertEqual(kernels(listing),
                         ["cross_entropy_backward_cross_entropy_bwd_0"])
        kernel = listing[listing.index('extern "C"'):]
        self.assertNotIn("__restrict__", kernel)
        self.assertIn("ce_y - 32000ll", kernel)

    def test_fused_stage_keeps_the_ops(self):
        # The Python function compiles both programs for inference: the
        # backward is its own program, not te-autodiff's.
        text = ce.forward_ir(16, 64, "f32", "i64", 1, 0, 0.0, False, -100)
        self.assertIn("cross_entropy_stats",
                      tejit.compile_ir(text, "fused", training=False))


class OptionsTest(RefusalAssertions, unittest.TestCase):
    def test_label_smoothing(self):
        self.assertRefused(ValueError,
                           lambda: ce.check_options(1.5, -100),
                           "label_smoothing", "[0, 1]", "1.5")
        self.assertRefused(TypeError,
                           lambda: ce.check_options("0.1", -100),
                           "label_smoothing", "str")
        ce.check_options(0, -100)
        ce.check_options(1.0, -100)

    def test_ignore_idx(self):
        self.assertRefused(TypeError, lambda: ce.check_options(0.0, 1.5),
                           "ignore_idx", "float")

    def test_shapes(self):
        self.assertEqual(ce.check_shapes((2, 3, 100), 6), (6, 100))
        self.assertEqual(ce.check_shapes((6, 100), 6), (6, 100))
        self.assertRefused(ValueError, lambda: ce.check_shapes((100,), 1),
                           "inp", "(100,)")
        self.assertRefused(ValueError,
                           lambda: ce.check_shapes((2, 3, 4, 100), 24),
                           "inp", "[B, SQ, V]")
        self.assertRefused(ValueError, lambda: ce.check_shapes((2, 3, 100), 5),
                           "target", "6", "5")
        self.assertRefused(ValueError, lambda: ce.check_shapes((0, 3, 100), 0),
                           "inp", "no elements")


if __name__ == "__main__":
    unittest.main()
