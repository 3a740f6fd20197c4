"""Tensor parallelism in tejit.pytorch.ops (docs/fusible-ops.md), without
PyTorch or a GPU: what python/tejit/pytorch/ops/_parallel.py decides (TE's
canonical tensor-parallel configuration, the spec's Linear layers, the one
group of a chain, where a chain's tensors stand on dim 0 under sequence
parallelism), and that the chains the ops describe compile with this
rank's shapes (a norm first reading this rank's slice under sequence
parallelism). tests/gpu/fusible_ops_parallel_check.py runs them on 2 GPUs.
Run: python3 -m pytest tests/python
"""
import re
import unittest

from torch_free import RefusalAssertions, library_loads, load

import tejit

parallel = load("ops/_parallel.py", "tejit_ops_parallel")

_ARGUMENT = re.compile(r'tensor<([^>]*)> \{te\.name = "([^"]+)"')


def sizes(size):
    return lambda group: size


class CanonicalTest(RefusalAssertions, unittest.TestCase):

    def test_local_sizes(self):
        self.assertEqual(
            parallel.canonical("BasicLinear", "column", "g", sizes(2), True,
                               64, 128),
            ("column", "g", 2, True, 64, 64))
        self.assertEqual(
            parallel.canonical("BasicLinear", "row", "g", sizes(4), False,
                               64, 128),
            ("row", "g", 4, False, 16, 128))

    def test_off_without_a_mode_or_for_one_rank(self):
        for mode, size in ((None, 8), ("column", 1), ("row", 1)):
            with self.subTest(mode=mode, size=size):
                self.assertEqual(
                    parallel.canonical("BasicLinear", mode, "g", sizes(size),
                                       True, 64, 128),
                    (None, None, 1, False, 64, 128))

    def test_errors_name_the_argument(self):
        self.assertRefused(
            ValueError, lambda: parallel.canonical(
                "Linear", "diagonal", None, sizes(2), False, 4, 4),
            "ops.Linear", "tensor_parallel_mode", "'diagonal'")
        self.assertRefused(
            ValueError, lambda: parallel.canonical(
                "BasicLinear", "column", None, sizes(3), False, 4, 4),
            "out_features (4)", "(3)")
        self.assertRefused(
            ValueError, lambda: parallel.canonical(
                "BasicLinear", "row", None, sizes(3), False, 4, 4),
            "in_features (4)")
        self.assertRefused(
            ValueError, lambda: parallel.canonical(
                "Bias", "column", None, sizes(3), False, 1, 4,
                names=("", "size")),
            "ops.Bias", "size (4)")


class LayerTest(unittest.TestCase):

    def test_single_rank_layers_have_no_parallel_keys(self):
        self.assertEqual(
            parallel.linear_layer("1", 8, 16, False),
            {"type": "Linear", "name": "1", "in_features": 8,
             "out_features": 16, "bias": False,
             "fuse_wgrad_accumulation": False})

    def test_parallel_keys(self):
        layer = parallel.linear_layer("3", 32, 8, True, 2, "row", True, True)
        self.assertEqual(layer["tp_size"], 2)
        self.assertEqual(layer["parallel_mode"], "row")
        self.assertTrue(layer["sequence_parallel"])
        self.assertTrue(layer["fuse_wgrad_accumulation"])
        self.assertNotIn("sequence_parallel",
                         parallel.linear_layer("1", 8, 16, False, 2,
                                               "column"))


class ChainGroupTest(RefusalAssertions, unittest.TestCase):

    def test_one_group(self):
        same = lambda a, b: a is b  # noqa: E731
        group = object()
        self.assertEqual(parallel.chain_group([], same), (None, 1))
        self.assertEqual(parallel.chain_group(
            [("op '1'", group, 2), ("op '3'", group, 2)], same), (group, 2))
        self.assertRefused(
            ValueError, lambda: parallel.chain_group(
                [("op '1' (Linear)", group, 2),
                 ("op '3' (Linear)", object(), 4)], same),
            "one tensor_parallel_group", "op '1' (Linear)",
            "op '3' (Linear)", "4 ranks")


def chain(sequence_parallel, extras=False, first_row=False):
    """The spec layers of Sequential(LayerNorm, [MakeExtraOutput], Linear
    column, GELU, Linear row, [AddExtraInput]) as the ops write them (a
    row-parallel Linear first with `first_row`)."""
    sp = sequence_parallel
    layers = []
    if not first_row:
        layers.append({"type": "LayerNorm", "name": "0", "hidden_size": 64,
                       "eps": 1e-5, "zero_centered_gamma": False})
        if extras:
            layers.append({"type": "MakeExtraOutput", "name": "x",
                           "features": 64})
        layers += [
            parallel.linear_layer("1.basic_ops.0", 64, 256, False, 2,
                                  "column", sp),
            {"type": "Bias", "name": "1.basic_ops.1", "size": 128},
            {"type": "Activation", "name": "2", "activation": "gelu",
             "features": 128}]
    layers.append(parallel.linear_layer("3", 256, 64, True, 2, "row", sp))
    if extras:
        layers.append({"type": "AddExtraInput", "name": "r", "features": 64})
    return layers


class RowStatesTest(unittest.TestCase):

    def test_without_sequence_parallelism(self):
        self.assertEqual(parallel.row_states(chain(False, True)),
                         (None, [None] * 7, None))

    def test_column_first_reads_a_slice(self):
        first, reads, last = parallel.row_states(chain(True, True))
        self.assertIs(first, True)
        # norm, extra output, column Linear read slices; bias, activation
        # and row Linear all rows; the extra input a slice.
        self.assertEqual(reads, [True, True, True, False, False, False,
                                 True])
        self.assertIs(last, True)

    def test_row_first_reads_all_rows(self):
        self.assertEqual(parallel.row_states(chain(True, first_row=True)),
                         (False, [False], True))

    def test_rows(self):
        self.assertEqual(parallel.rows(8, None, None, 2), 8)
        self.assertEqual(parallel.rows(8, True, True, 2), 8)
        self.assertEqual(parallel.rows(8, True, False, 2), 16)
        self.assertEqual(parallel.rows(8, False, True, 2), 4)


@unittest.skipUnless(library_loads(), "libtejit.so is not built")
class CompiledChainTest(unittest.TestCase):
    """The program of a chain: this rank's parameter shapes, and under
    sequence parallelism this rank's slice of dim 0 in and out."""

    def arguments(self, layers, tokens=32):
        spec = {"name": "ops", "params_dtype": "bf16",
                "seq_length": tokens, "batch_size": 1, "layers": layers}
        text = tejit.compile_ir(spec, "te")
        header = next(line for line in text.splitlines()
                      if "func.func" in line and "_backward" not in line)
        return {name: tuple(int(d) for d in shape.split("x")[:-1])
                for shape, name in _ARGUMENT.findall(header)}

    def test_local_parameters(self):
        found = self.arguments(chain(False, True))
        self.assertEqual(found["1.basic_ops.0.weight"], (128, 64))
        self.assertEqual(found["1.basic_ops.1.bias"], (128,))
        self.assertEqual(found["3.weight"], (64, 128))
        self.assertEqual(found["3.bias"], (64,))
        for name in ("input", "output", "x.extra_output", "r.extra_input"):
            self.assertEqual(found[name], (32, 1, 64), name)

    def test_sequence_parallel_slices(self):
        found = self.arguments(chain(True, True))
        for name in ("input", "output", "x.extra_output", "r.extra_input"):
            self.assertEqual(found[name], (16, 1, 64), name)

    def test_row_first_reads_all_rows(self):
        found = self.arguments(chain(True, first_row=True))
        self.assertEqual(found["input"], (32, 1, 128))
        self.assertEqual(found["output"], (16, 1, 64))


if __name__ == "__main__":
    unittest.main()
