"""tejit.pytorch.permutation's programs and checks without PyTorch or a
GPU (docs/moe-permutation.md): what python/tejit/pytorch/_moe_ir.py
decides, loaded by path: the capacities (powers of two, at least 64, so
token counts share programs), the te IR of every program variant, which
compiles through the whole pipeline to CUDA C++ with `counts` a host
argument (skipped without libtejit), and the argument checks, each naming
the argument. tests/python/test_pytorch_permutation.py runs the ops
(PyTorch and a GPU); tests/unit/InterpreterMoeTest.cpp checks the ops'
semantics in the interpreter.
Run: python3 -m pytest tests/python
"""
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import RefusalAssertions, library_loads, load  # noqa: E402

moe = load("_moe_ir.py", "tejit_moe_ir")


def variants():
    """(name, IR) of every program tejit.pytorch.permutation builds."""
    yield "mask", moe.permute_ir(128, 256, 64, 8, 8, "bf16", "i1", False)
    yield "mask-i32-probs", moe.permute_ir(128, 256, 64, 8, 8, "f32", "i32",
                                           False, "f32")
    yield "index-fp8", moe.permute_ir(128, 256, 64, 2, 16, "f8E4M3FN",
                                      "i32", True)
    yield "permute-bwd", moe.permute_backward_ir(128, 256, 64, 8, "bf16")
    yield "permute-bwd-probs", moe.permute_backward_ir(128, 256, 64, 8,
                                                       "bf16", "f32")
    yield "unpermute", moe.unpermute_ir(128, 256, 64, 8, "f16")
    yield "unpermute-probs", moe.unpermute_ir(128, 256, 64, 8, "bf16",
                                              "bf16")
    yield "unpermute-bwd", moe.unpermute_backward_ir(128, 256, 64, 8, "bf16")
    yield "unpermute-bwd-probs", moe.unpermute_backward_ir(
        128, 256, 64, 8, "bf16", "f32")
    yield "sort", moe.sort_chunks_ir(128, 64, 6, "bf16")
    yield "sort-probs-fp8", moe.sort_chunks_ir(128, 64, 6, "f8E5M2", "f32")
    yield "sort-bwd-probs", moe.permute_backward_ir(128, 128, 64, 1, "f32",
                                                    "f32")


class CapacityTest(unittest.TestCase):
    def test_powers_of_two_from_64(self):
        self.assertEqual([moe.capacity(n) for n in (0, 1, 64, 65, 1000,
                                                     1024, 1025, 65536)],
                         [64, 64, 64, 128, 1024, 1024, 2048, 65536])

    def test_one_program_per_size_class(self):
        # Dropless routing's changing token counts: an octave shares one.
        self.assertEqual({moe.capacity(n) for n in range(40000, 65537, 7)},
                         {65536})


class IrTest(unittest.TestCase):
    def test_signatures(self):
        ir = moe.permute_ir(128, 256, 64, 8, 8, "bf16", "i1", False, "f32")
        self.assertIn('%counts: tensor<2xi32> {te.name = "counts"}', ir)
        self.assertIn('tensor<128x8xi32> {te.name = "row_id_map"}', ir)
        self.assertIn('tensor<256xf32> {te.name = "permuted_probs"}', ir)
        self.assertIn("{num_experts = 8 : i64}", ir)
        index = moe.permute_ir(128, 256, 64, 2, 16, "bf16", "i32", True)
        self.assertIn("{num_experts = 16 : i64, index_map}", index)
        bwd = moe.unpermute_backward_ir(128, 256, 64, 8, "bf16", "f32")
        self.assertIn("te.moe_unpermute_grad", bwd)
        self.assertIn('tensor<128x8xf32> {te.name = "probs_grad"}', bwd)

    @unittest.skipUnless(library_loads(), "needs libtejit.so")
    def test_every_variant_compiles_to_cuda(self):
        for name, ir in variants():
            with self.subTest(name):
                planned = tejit.compile_ir(ir, "planned", training=False)
                self.assertIn("te.moe_", planned)
                cuda = tejit.compile_ir(ir, "cuda", training=False)
                self.assertIn('extern "C" __global__', cuda)


class ChecksTest(RefusalAssertions, unittest.TestCase):
    def test_map_type(self):
        self.assertRefused(ValueError, lambda: moe.check_map_type("sparse"),
                           "map_type", "'mask' or 'index'", "'sparse'")
        moe.check_map_type("index")

    def test_input_and_routing_map(self):
        self.assertRefused(ValueError, lambda: moe.check_input((4, 2, 3)),
                           "inp", "[num_tokens, hidden_size]", "(4, 2, 3)")
        self.assertRefused(ValueError,
                           lambda: moe.check_routing_map((5, 8), 4, "mask"),
                           "routing_map", "[num_tokens, num_experts]",
                           "[4, num_experts]", "(5, 8)")
        self.assertRefused(ValueError,
                           lambda: moe.check_routing_map((4,), 4, "index"),
                           "routing_map", "[num_tokens, topK]")

    def test_num_out_tokens(self):
        moe.check_num_out_tokens(-1, 10)
        moe.check_num_out_tokens(0, 10)
        moe.check_num_out_tokens(10, 10)
        self.assertRefused(ValueError, lambda: moe.check_num_out_tokens(11, 10),
                           "num_out_tokens", "[0, 10]", "11")
        self.assertRefused(ValueError, lambda: moe.check_num_out_tokens(-2, 10),
                           "num_out_tokens", "-2")
        self.assertRefused(ValueError,
                           lambda: moe.check_num_out_tokens(3.0, 10),
                           "num_out_tokens must be an int", "float")

    def test_probs_and_row_id_map(self):
        self.assertRefused(ValueError,
                           lambda: moe.check_probs((4, 3), (4, 8), "probs"),
                           "probs", "(4, 8)", "(4, 3)")
        self.assertRefused(ValueError,
                           lambda: moe.check_probs((4,), (4, 8),
                                                   "merging_probs"),
                           "merging_probs")
        self.assertRefused(ValueError,
                           lambda: moe.check_row_id_map((12,)),
                           "row_id_map", "moe_permute returned", "(12,)")

    def test_experts(self):
        moe.check_experts(1024, "mask")
        self.assertRefused(ValueError,
                           lambda: moe.check_experts(2048, "index"),
                           "routing_map", "at most 1024 experts", "2048",
                           "expert ids")

    def test_chunks(self):
        moe.check_chunks((3, [1, 0, 2]), (3, [2, 0, 1]), 3)
        moe.check_chunks((3, None), (3, None), 7)
        self.assertRefused(ValueError,
                           lambda: moe.check_chunks((3, None), (2, None), 3),
                           "split_sizes and sorted_index", "3 and 2")
        self.assertRefused(ValueError,
                           lambda: moe.check_chunks((2, [1, 1]), (2, [0, 1]),
                                                    3),
                           "split_sizes", "sum to the 3 rows", "[1, 1]")
        self.assertRefused(ValueError,
                           lambda: moe.check_chunks((2, [1, -1]), (2, None),
                                                    0),
                           "split_sizes must be >= 0")
        self.assertRefused(ValueError,
                           lambda: moe.check_chunks((2, [1, 1]), (2, [1, 1]),
                                                    2),
                           "sorted_index must be a permutation of 0..1")
        self.assertRefused(ValueError,
                           lambda: moe.check_chunks((3000, None),
                                                    (3000, None), 2),
                           "at most 2048 chunks")


if __name__ == "__main__":
    unittest.main()
