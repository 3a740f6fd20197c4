"""tejit.pytorch's GroupedLinear (docs/grouped-linear.md) without PyTorch
or a GPU: what python/tejit/pytorch/module/_grouped.py decides (loaded
here by path; the module itself needs PyTorch, see
test_pytorch_grouped_linear.py): the refusals of TE's constructor
arguments tejit does not run (naming the argument), the checks of
m_splits (count, signs, sum, FP8's multiples of 16 with Fp8Padding named),
the token count a call compiles for (rounded up to 64), Fp8Padding's
splits, and the layer spec, which compiles through te-compile's importer
to a program taking input [T, 1, in], m_splits i32 [G] and the stacked
layers.0.weight [G, out, in] / layers.0.bias [G, out] (skipped while the
library does not know `type: GroupedLinear`); with
fuse_wgrad_accumulation (and main_grad_dtype) its backward takes one
stacked main_grad.layers.0.weight [G, out, in] and accumulates the
weights' gradient into it.
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
from torch_free import RefusalAssertions, load  # noqa: E402
from tejit.common import recipe  # noqa: E402


grouped = load("module/_grouped.py", "tejit_grouped_args")

# The forward's arguments and results: `tensor<SHAPE> {te.name = "NAME"`.
_TENSOR = re.compile(r'tensor<([^>]*)> \{te\.name = "([^"]+)"')


def program_spec(layer, tokens=128, recipe_spec=None):
    spec = {"name": "grouped", "params_dtype": "bf16",
            "seq_length": tokens, "batch_size": 1, "layers": [layer]}
    if recipe_spec is not None:
        spec["recipe"] = recipe_spec
    return spec


def forward_tensors(spec):
    """{name: (shape tuple, element type)} of the forward's arguments and
    results at the te stage."""
    text = tejit.compile_ir(spec, "te")
    header = next(line for line in text.splitlines()
                  if "func.func" in line and "_backward" not in line)
    found = {}
    for shape, name in _TENSOR.findall(header):
        *dims, element = shape.split("x")
        found[name] = (tuple(int(d) for d in dims), element)
    return found


# A tensor of a function header with its attributes:
# `tensor<SHAPE> {ATTRIBUTES}`.
_TENSOR_ATTRIBUTES = re.compile(r'tensor<([^>]*)> \{([^}]*)\}')
_ATTRIBUTE = re.compile(r'te\.(name|accumulates) = "([^"]+)"')


def backward_tensors(spec):
    """{name: (shape tuple, element type, attributes)} of the backward's
    arguments and results at the autodiff stage (`attributes` maps te.name
    / te.accumulates to their values); None when there is no backward."""
    text = tejit.compile_ir(spec, "autodiff")
    header = next((line for line in text.splitlines()
                   if "func.func" in line and "_backward" in line), None)
    if header is None:
        return None
    found = {}
    for shape, attributes in _TENSOR_ATTRIBUTES.findall(header):
        named = dict(_ATTRIBUTE.findall(attributes))
        if "name" not in named:
            continue
        *dims, element = shape.split("x")
        found[named["name"]] = (tuple(int(d) for d in dims), element, named)
    return found


def compiler_knows_grouped_linear():
    try:
        tejit.compile_ir(program_spec(grouped.layer_spec(2, 64, 32, True)),
                         "te")
        return True
    except tejit.TejitError as error:
        if "GroupedLinear" in str(error) and "type" in str(error):
            return False
        raise


class ConstructorTest(RefusalAssertions, unittest.TestCase):

    def test_sizes(self):
        self.assertEqual(grouped.check_sizes(8, 4096, 2048), (8, 4096, 2048))
        for bad in ({"num_gemms": 0}, {"in_features": -1},
                    {"out_features": 2.5}, {"num_gemms": True}):
            arguments = {"num_gemms": 4, "in_features": 64,
                         "out_features": 32, **bad}
            name = next(iter(bad))
            self.assertRefused(ValueError,
                               lambda a=arguments: grouped.check_sizes(**a),
                               "GroupedLinear", name)

    def test_unsupported_arguments_name_themselves(self):
        grouped.check_unsupported(ub_overlap_rs=False, ub_overlap_ag=False,
                                  save_original_input=False)
        # Supported now (the stacked main_grad; backward_dw).
        self.assertNotIn("fuse_wgrad_accumulation", grouped._UNSUPPORTED)
        self.assertNotIn("delay_wgrad_compute", grouped._UNSUPPORTED)
        for name in ("ub_overlap_rs", "ub_overlap_ag",
                     "save_original_input"):
            message = self.assertRefused(
                NotImplementedError,
                lambda n=name: grouped.check_unsupported(**{n: True}),
                f"GroupedLinear({name}=True)", "not supported")
            self.assertIn("False", message)  # says what to leave it at

    def test_tensor_parallel_arguments(self):
        """TE's rules: tp_size and parallel_mode only shape the weights;
        sequence_parallel changes nothing; a bias at tp_size > 1 is
        refused."""
        grouped.check_tensor_parallel(1, None)
        grouped.check_tensor_parallel(1, "column", bias=True)
        grouped.check_tensor_parallel(1, "row", bias=True)
        grouped.check_tensor_parallel(2, None)
        grouped.check_tensor_parallel(2, "column")
        grouped.check_tensor_parallel(4, "row")
        for mode in (None, "column", "row"):
            self.assertRefused(ValueError,
                               lambda mode=mode: grouped.check_tensor_parallel(
                                   2, mode, bias=True),
                               "tp_size=2, bias=True", "bias=False")
        self.assertRefused(ValueError,
                           lambda: grouped.check_tensor_parallel(
                               1, "diagonal"), "parallel_mode")

    def test_local_features(self):
        self.assertEqual(grouped.local_features(2, "column", 64, 96),
                         (64, 48))
        self.assertEqual(grouped.local_features(2, "row", 64, 96), (32, 96))
        self.assertEqual(grouped.local_features(2, None, 64, 96), (64, 96))
        self.assertEqual(grouped.local_features(1, "row", 64, 96), (64, 96))
        self.assertRefused(ValueError,
                           lambda: grouped.local_features(4, "column", 64,
                                                          90),
                           "out_features (90)", "tp_size (4)")
        self.assertRefused(ValueError,
                           lambda: grouped.local_features(3, "row", 64, 96),
                           "in_features (64)", "tp_size (3)")

    def test_recipes(self):
        grouped.check_recipe(None)
        grouped.check_recipe(recipe.DelayedScaling())
        grouped.check_recipe(recipe.Float8CurrentScaling())
        grouped.check_recipe(recipe.Float8BlockScaling())
        grouped.check_recipe(recipe.Float8BlockScaling(w_block_scaling_dim=1))
        for field in ("x_block_scaling_dim", "grad_block_scaling_dim"):
            block = recipe.Float8BlockScaling(
                w_block_scaling_dim=1, **{field: 2})
            self.assertRefused(NotImplementedError,
                               lambda: grouped.check_recipe(block),
                               "Float8BlockScaling", field, "1-D")


class SplitsTest(unittest.TestCase):
    def assertRefused(self, function, *words):
        with self.assertRaises(ValueError) as caught:
            function()
        message = str(caught.exception)
        self.assertIn("m_splits", message)
        for word in words:
            self.assertIn(word, message)

    def test_valid_splits(self):
        self.assertEqual(grouped.checked_splits([3, 0, 5], 3, 8, False),
                         [3, 0, 5])
        self.assertEqual(grouped.checked_splits((16, 0, 32), 3, 48, True),
                         [16, 0, 32])
        # Every expert empty, no tokens at all.
        self.assertEqual(grouped.checked_splits([0, 0], 2, 0, True), [0, 0])

    def test_count(self):
        self.assertRefused(lambda: grouped.checked_splits([4, 4], 3, 8,
                                                          False),
                           "2 entries", "num_gemms=3")
        self.assertRefused(lambda: grouped.checked_splits(5, 1, 5, False),
                           "list")
        self.assertRefused(lambda: grouped.checked_splits("ab", 2, 2,
                                                          False), "list")

    def test_entries(self):
        self.assertRefused(lambda: grouped.checked_splits([4, -1, 5], 3, 8,
                                                          False),
                           "m_splits[1]", ">= 0")
        self.assertRefused(lambda: grouped.checked_splits([4.0, 4], 2, 8,
                                                          False),
                           "m_splits[0]", "int")
        self.assertRefused(lambda: grouped.checked_splits([True, 7], 2, 8,
                                                          False),
                           "m_splits[0]")

    def test_sum_must_cover_the_tokens(self):
        self.assertRefused(lambda: grouped.checked_splits([4, 4], 2, 9,
                                                          False),
                           "sums to 8", "9 tokens")
        self.assertRefused(lambda: grouped.checked_splits([4, 6], 2, 9,
                                                          False),
                           "sums to 10")

    def test_fp8_needs_multiples_of_16(self):
        self.assertEqual(grouped.checked_splits([24, 8], 2, 32, False),
                         [24, 8])
        self.assertRefused(lambda: grouped.checked_splits([24, 8], 2, 32,
                                                          True),
                           "m_splits[0] is 24", "multiple of 16",
                           "Fp8Padding")
        self.assertRefused(lambda: grouped.checked_splits([16, 0, 8], 3, 24,
                                                          True),
                           "m_splits[2] is 8")


class ShapesTest(unittest.TestCase):
    def test_padded_tokens(self):
        for tokens, rows in ((0, 64), (1, 64), (64, 64), (65, 128),
                             (352, 384), (16384, 16384)):
            self.assertEqual(grouped.padded_tokens(tokens), rows, tokens)

    def test_fp8_padding_splits(self):
        self.assertEqual(grouped.aligned_splits([0, 1, 16, 17, 33]),
                         [0, 16, 16, 32, 48])
        self.assertEqual(grouped.aligned_splits([5, 64], 32), [32, 64])
        self.assertEqual(grouped.alignment(None), 16)
        self.assertEqual(grouped.alignment(32), 32)
        with self.assertRaises(ValueError) as caught:
            grouped.alignment(0, "Fp8Unpadding")
        self.assertIn("Fp8Unpadding: align_size", str(caught.exception))

    def test_layer_spec(self):
        self.assertEqual(grouped.layer_spec(8, 4096, 2048, True),
                         {"type": "GroupedLinear", "num_gemms": 8,
                          "in_features": 4096, "out_features": 2048,
                          "bias": True})
        self.assertFalse(grouped.layer_spec(2, 64, 32, False)["bias"])

    def test_layer_spec_with_fuse_wgrad_accumulation(self):
        """The keys module/base.py adds for fuse_wgrad_accumulation:
        main_grad_dtype only when it is not float32 (the spec's
        default)."""
        base = grouped.layer_spec(4, 64, 32, True)
        self.assertNotIn("fuse_wgrad_accumulation", base)
        self.assertNotIn("main_grad_dtype", base)
        self.assertEqual(
            grouped.layer_spec(4, 64, 32, True, fuse_wgrad_accumulation=True),
            {**base, "fuse_wgrad_accumulation": True})
        for dtype in ("bf16", "fp16"):
            self.assertEqual(
                grouped.layer_spec(4, 64, 32, True,
                                   fuse_wgrad_accumulation=True,
                                   main_grad_dtype=dtype),
                {**base, "fuse_wgrad_accumulation": True,
                 "main_grad_dtype": dtype})
        with self.assertRaises(ValueError) as caught:
            grouped.layer_spec(4, 64, 32, True, fuse_wgrad_accumulation=True,
                               main_grad_dtype="f64")
        self.assertIn("main_grad_dtype", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            grouped.layer_spec(4, 64, 32, True, main_grad_dtype="bf16")
        self.assertIn("fuse_wgrad_accumulation", str(caught.exception))


@unittest.skipUnless(compiler_knows_grouped_linear(),
                     "the library does not know type: GroupedLinear yet")
class SpecCompilesTest(unittest.TestCase):
    def test_program_interface(self):
        rows = grouped.padded_tokens(300)
        tensors = forward_tensors(program_spec(
            grouped.layer_spec(3, 192, 320, True), tokens=rows))
        self.assertEqual(tensors, {
            "input": ((rows, 1, 192), "bf16"),
            "m_splits": ((3,), "i32"),
            "layers.0.weight": ((3, 320, 192), "bf16"),
            "layers.0.bias": ((3, 320), "bf16"),
            "output": ((rows, 1, 320), "bf16")})

    def test_the_specs_tensor_parallel_keys(self):
        """tejit.pytorch's GroupedLinear compiles its rank's shard with no
        tensor-parallel keys (as TE, it communicates nothing); the spec's
        own tp_size / parallel_mode (te-compile's) split the sizes, which
        are then global, and sum as Linear's do."""
        def split(bias, mode):
            return dict(grouped.layer_spec(3, 192, 320, bias), tp_size=2,
                        parallel_mode=mode)
        column = forward_tensors(program_spec(split(True, "column")))
        self.assertEqual(column["input"], ((128, 1, 192), "bf16"))
        self.assertEqual(column["layers.0.weight"], ((3, 160, 192), "bf16"))
        self.assertEqual(column["layers.0.bias"], ((3, 160), "bf16"))
        self.assertEqual(column["output"], ((128, 1, 160), "bf16"))
        row = forward_tensors(program_spec(split(False, "row")))
        self.assertEqual(row["input"], ((128, 1, 96), "bf16"))
        self.assertEqual(row["layers.0.weight"], ((3, 320, 96), "bf16"))
        self.assertEqual(row["output"], ((128, 1, 320), "bf16"))
        self.assertIn("te.tp_all_reduce",
                      tejit.compile_ir(program_spec(split(False, "row")),
                                       "primitive"))
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.compile_ir(program_spec(split(True, "row")), "te")
        self.assertIn("bias", str(caught.exception))

    def test_without_bias(self):
        tensors = forward_tensors(program_spec(
            grouped.layer_spec(1, 64, 128, False)))
        self.assertNotIn("layers.0.bias", tensors)
        self.assertEqual(tensors["layers.0.weight"], ((1, 128, 64), "bf16"))

    def test_training_program_under_each_recipe(self):
        layer = grouped.layer_spec(4, 128, 256, True)
        for fp8_recipe in (None, recipe.DelayedScaling(),
                           recipe.Float8CurrentScaling(),
                           recipe.Float8BlockScaling()):
            spec = program_spec(layer, recipe_spec=(
                fp8_recipe.to_spec() if fp8_recipe else None))
            with self.subTest(recipe=type(fp8_recipe).__name__):
                scaled = tejit.compile_ir(spec, "scaled")
                self.assertIn("_backward", scaled)
                self.assertEqual("te.grouped_scaled_matmul" in scaled,
                                 fp8_recipe is not None)
                # And on to the plan.
                tejit.compile_ir(spec, "planned")

    def test_fuse_wgrad_accumulation_takes_one_stacked_main_grad(self):
        """The backward's extra argument `main_grad.layers.0.weight` [G,
        out, in] (float32 by default, else main_grad_dtype), accumulated
        into by the stacked weight's gradient (the name the module's
        CompiledProgram.main_grad_inputs resolves to the weight input);
        the bias gradient stays a plain one."""
        element = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}
        for dtype in grouped.MAIN_GRAD_DTYPES:
            layer = grouped.layer_spec(3, 64, 96, True,
                                       fuse_wgrad_accumulation=True,
                                       main_grad_dtype=dtype)
            with self.subTest(main_grad_dtype=dtype):
                tensors = backward_tensors(program_spec(layer))
                self.assertIsNotNone(tensors)
                main_grad = tensors.get("main_grad.layers.0.weight")
                self.assertIsNotNone(main_grad, sorted(tensors))
                self.assertEqual(main_grad[:2], ((3, 96, 64),
                                                 element[dtype]))
                grad = tensors["grad.layers.0.weight"]
                self.assertEqual(grad[:2], ((3, 96, 64), element[dtype]))
                self.assertEqual(grad[2].get("accumulates"),
                                 "main_grad.layers.0.weight")
                self.assertNotIn("main_grad.layers.0.bias", tensors)
                self.assertEqual(tensors["grad.layers.0.bias"][:2],
                                 ((3, 96), "bf16"))
        plain = backward_tensors(program_spec(
            grouped.layer_spec(3, 64, 96, True)))
        self.assertFalse([n for n in plain if n.startswith("main_grad.")])

    def test_fuse_wgrad_accumulation_plans_under_each_recipe(self):
        layer = grouped.layer_spec(4, 128, 256, True,
                                   fuse_wgrad_accumulation=True,
                                   main_grad_dtype="bf16")
        for fp8_recipe in (None, recipe.DelayedScaling(),
                           recipe.Float8CurrentScaling(),
                           recipe.Float8BlockScaling()):
            spec = program_spec(layer, recipe_spec=(
                fp8_recipe.to_spec() if fp8_recipe else None))
            with self.subTest(recipe=type(fp8_recipe).__name__):
                self.assertIn("main_grad.layers.0.weight",
                              tejit.compile_ir(spec, "planned"))

    def test_block_scaling_compiles_and_2d_token_blocks_are_refused(self):
        """Float8BlockScaling: the module's spec plans (block casts per
        group, no meta state); 2-D x blocks are refused by the compiler
        too, naming the field."""
        layer = grouped.layer_spec(2, 128, 128, True)
        planned = tejit.compile_ir(program_spec(
            layer, recipe_spec=recipe.Float8BlockScaling().to_spec()),
            "planned")
        self.assertIn("te.grouped_block_quantize", planned)
        self.assertNotIn("fp8_meta", planned)
        spec = program_spec(layer, recipe_spec=recipe.Float8BlockScaling(
            x_block_scaling_dim=2, w_block_scaling_dim=1).to_spec())
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.compile_ir(spec, "scaled")
        self.assertIn("x_block_scaling_dim", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
