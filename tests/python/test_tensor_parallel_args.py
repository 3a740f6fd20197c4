"""Tensor parallelism in tejit.pytorch's modules (docs/tensor-parallel.md),
without PyTorch or a GPU: TE's arguments as the modules take them
(tp_group / tp_size, parallel_mode, set_parallel_mode, sequence_parallel)
with errors naming the argument, the spec keys tp_size and
sequence_parallel add (none at tp_size 1, so existing specs and their
cache keys are unchanged), and the program those specs compile to: its
parameters are one rank's shards, with TE's local shapes (the table in
docs/tensor-parallel.md), while the spec's sizes stay global; with
sequence_parallel its input and output hold this rank's slice of dim 0
(SequenceParallelShapesTest: skipped while the compiler does not know the
key). The argument checks live in
python/tejit/pytorch/module/_args.py and the attention spec builders in
_attention_specs.py, loaded here by path (the tejit.pytorch package needs
PyTorch; tests/python/test_pytorch_tensor_parallel.py checks the modules
themselves where it is installed).
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


args = load("module/_args.py", "tejit_args_tp")
specs = load("module/_attention_specs.py", "tejit_attention_specs_tp")

# The forward's arguments and results: `tensor<SHAPE> {te.name = "NAME"`.
_ARGUMENT = re.compile(r'tensor<([^>]*)> \{te\.name = "([^"]+)"')


def parameters(layer, seq=16, batch=2, input_format=None):
    """{name (parameters without `layers.0.`): shape tuple} of the
    forward's arguments and results, for the program of one layer."""
    spec = {"name": "tp", "params_dtype": "bf16", "seq_length": seq,
            "batch_size": batch, "layers": [layer]}
    if input_format:
        spec["input_format"] = input_format
    text = tejit.compile_ir(spec, "te")
    header = next(line for line in text.splitlines()
                  if "func.func" in line and "_backward" not in line)
    found = {}
    for shape, name in _ARGUMENT.findall(header):
        dims = tuple(int(d) for d in shape.split("x")[:-1])
        found[name[len("layers.0."):] if name.startswith("layers.0.")
              else name] = dims
    return found


class ArgumentTest(RefusalAssertions, unittest.TestCase):

    def test_tp_size_from_the_group_or_the_argument(self):
        sizes = {"a": 2, "b": 4}
        size = sizes.__getitem__
        self.assertEqual(args.tp_world_size("Linear", None, 1), 1)
        self.assertEqual(args.tp_world_size("Linear", None, 4), 4)
        self.assertEqual(args.tp_world_size("Linear", "a", 1, size), 2)
        self.assertEqual(args.tp_world_size("Linear", "b", 4, size), 4)
        self.assertRefused(ValueError,
                           lambda: args.tp_world_size("Linear", "a", 4, size),
                           "Linear", "tp_size (4)", "tp_group (2)")
        for bad in (0, -2, 1.5, True, "2"):
            with self.subTest(tp_size=bad):
                self.assertRefused(ValueError,
                                   lambda: args.tp_world_size("Linear", None,
                                                              bad),
                                   "tp_size")

    def test_tensor_parallel_arguments_are_not_refused_as_defaults(self):
        self.assertNotIn("tp_group", args._DEFAULTS_ONLY)
        self.assertNotIn("tp_size", args._DEFAULTS_ONLY)
        with self.assertRaises(NotImplementedError) as caught:
            args.check_defaults("Linear", ub_overlap_ag=True)
        self.assertIn("tensor parallelism", str(caught.exception))

    def test_sequence_parallel_only_with_tensor_parallelism(self):
        # TE: self.sequence_parallel = tp_size > 1 and sequence_parallel.
        self.assertFalse(args.sequence_parallel_of(True, 1))
        self.assertTrue(args.sequence_parallel_of(True, 2))
        self.assertFalse(args.sequence_parallel_of(False, 4))
        self.assertFalse(args.sequence_parallel_of(None, 4))
        self.assertNotIn("sequence_parallel", args._DEFAULTS_ONLY)

    def test_sequence_parallel_refusals(self):
        args.check_sequence_parallel_format("MultiheadAttention",
                                            "qkv_format", "thd", False)
        args.check_sequence_parallel_format("MultiheadAttention",
                                            "qkv_format", "bshd", True)
        self.assertRefused(NotImplementedError,
                           lambda: args.check_sequence_parallel_format(
                               "TransformerLayer", "attn_input_format",
                               "thd", True),
                           "TransformerLayer(attn_input_format='thd', "
                           "sequence_parallel=True)")
        args.check_sequence_parallel_kv_cache("TransformerLayer", False)
        self.assertRefused(NotImplementedError,
                           lambda: args.check_sequence_parallel_kv_cache(
                               "MultiheadAttention", True),
                           "inference_params", "sequence_parallel=True")

    def test_sequence_parallel_token_counts(self):
        # Column-parallel input: this rank's slice of dim 0, gathered.
        self.assertEqual(args.sequence_parallel_tokens(
            "Linear", (32, 2), 2, True), 128)
        self.assertEqual(args.sequence_parallel_tokens(
            "LayerNormMLP", (48,), 4, True), 192)
        # Row-parallel input: the whole of dim 0, scattered in the output.
        self.assertEqual(args.sequence_parallel_tokens(
            "Linear", (64, 2), 2, False), 128)
        self.assertRefused(ValueError,
                           lambda: args.sequence_parallel_tokens(
                               "Linear", (3, 4), 2, False),
                           "first dimension (3)", "tp_size (2)")
        self.assertRefused(ValueError,
                           lambda: args.sequence_parallel_tokens(
                               "Linear", (), 2, True),
                           "leading dimension")

    def test_sequence_parallel_attention_dims(self):
        # sbhd splits the sequence, bshd the batch (TE's dim 0).
        self.assertEqual(args.sequence_parallel_dims("sbhd", 32, 2, 2),
                         (64, 2))
        self.assertEqual(args.sequence_parallel_dims("bshd", 64, 2, 2),
                         (64, 4))
        self.assertEqual(args.sequence_parallel_dims("sbhd", 32, 2, 1),
                         (32, 2))

    def test_divisibility(self):
        args.check_divisible("LayerNormMLP", 2, ffn_hidden_size=1024)
        self.assertRefused(ValueError,
                           lambda: args.check_divisible(
                               "LayerNormMLP", 3, ffn_hidden_size=16384),
                           "LayerNormMLP", "ffn_hidden_size (16384)",
                           "tp_size (3)")
        self.assertRefused(ValueError,
                           lambda: args.check_divisible(
                               "MultiheadAttention", 4,
                               num_attention_heads=8, num_gqa_groups=2),
                           "num_gqa_groups (2)")

    def test_parallel_modes(self):
        for mode in (None, "column", "row"):
            self.assertEqual(args.check_parallel_mode("Linear", mode), mode)
        self.assertRefused(ValueError,
                           lambda: args.check_parallel_mode("Linear",
                                                            "diagonal"),
                           "parallel_mode")
        args.check_row_parallel("LayerNormLinear", "row", 1)
        args.check_row_parallel("LayerNormLinear", "column", 2)
        self.assertRefused(NotImplementedError,
                           lambda: args.check_row_parallel(
                               "LayerNormLinear", "row", 2),
                           "LayerNormLinear(parallel_mode='row')",
                           "column")

    def test_set_parallel_mode(self):
        args.check_set_parallel_mode("LayerNormMLP", False, 1, "fc1", "fc2")
        args.check_set_parallel_mode("LayerNormMLP", True, 2, "fc1", "fc2")
        self.assertRefused(NotImplementedError,
                           lambda: args.check_set_parallel_mode(
                               "MultiheadAttention", False, 2, "QKV",
                               "proj"),
                           "MultiheadAttention(tp_size=2, "
                           "set_parallel_mode=False)",
                           "set_parallel_mode=True")


class SpecTest(unittest.TestCase):
    def test_no_keys_at_tp_size_1(self):
        layer = {"type": "Linear", "in_features": 64, "out_features": 64}
        self.assertEqual(args.tensor_parallel_spec(dict(layer), 1, "column"),
                         layer)
        mha = specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, False)
        self.assertNotIn("tp_size", mha)
        self.assertEqual(mha, specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, False, tp_size=1))
        block = specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, False)
        self.assertNotIn("tp_size", block)

    def test_keys_at_tp_size_2(self):
        self.assertEqual(
            args.tensor_parallel_spec({"type": "Linear"}, 2, "row"),
            {"type": "Linear", "tp_size": 2, "parallel_mode": "row"})
        self.assertEqual(
            args.tensor_parallel_spec({"type": "LayerNormMLP"}, 2),
            {"type": "LayerNormMLP", "tp_size": 2})
        mha = specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, False, tp_size=2)
        # Global sizes; the compiler derives one rank's.
        self.assertEqual((mha["tp_size"], mha["num_attention_heads"],
                          mha["num_gqa_groups"], mha["hidden_size"]),
                         (2, 8, 4, 256))
        block = specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, False, tp_size=2)
        self.assertEqual((block["tp_size"], block["ffn_hidden_size"]),
                         (2, 1024))


class SequenceParallelSpecTest(unittest.TestCase):
    def test_linear_keys(self):
        self.assertEqual(
            args.tensor_parallel_spec({"type": "Linear"}, 2, "column", True),
            {"type": "Linear", "tp_size": 2, "parallel_mode": "column",
             "sequence_parallel": True})
        self.assertEqual(
            args.tensor_parallel_spec({"type": "LayerNormMLP"}, 4, None,
                                      True),
            {"type": "LayerNormMLP", "tp_size": 4,
             "sequence_parallel": True})
        # Without tensor parallelism nothing is added (TE ignores it).
        self.assertEqual(
            args.tensor_parallel_spec({"type": "Linear"}, 1, "row", True),
            {"type": "Linear"})
        self.assertNotIn("sequence_parallel", args.tensor_parallel_spec(
            {"type": "Linear"}, 2, "row", False))

    def test_attention_keys(self):
        mha = specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, False, tp_size=2, sequence_parallel=True)
        self.assertEqual((mha["tp_size"], mha["sequence_parallel"],
                          mha["num_attention_heads"]), (2, True, 8))
        block = specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, False, tp_size=2, sequence_parallel=True)
        self.assertEqual((block["tp_size"], block["sequence_parallel"],
                          block["ffn_hidden_size"]), (2, True, 1024))
        for tp_size, sequence_parallel in ((1, True), (2, False)):
            with self.subTest(tp_size=tp_size,
                              sequence_parallel=sequence_parallel):
                block = specs.transformer_layer_spec(
                    256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu",
                    0.0, 0.0, "causal", True, False, False,
                    tp_size=tp_size, sequence_parallel=sequence_parallel)
                self.assertNotIn("sequence_parallel", block)
        # The global sizes of a call (program_spec) from a rank's slice.
        seq, batch = args.sequence_parallel_dims("bshd", 64, 1, 2)
        spec = specs.program_spec("TransformerLayer", "bf16", "bshd", seq,
                                  batch, block)
        self.assertEqual((spec["seq_length"], spec["batch_size"]), (64, 2))


_SP_SUPPORT = []


def compiler_takes_sequence_parallel():
    """Whether this build's compiler knows the `sequence_parallel` key
    (the spec importer refuses unknown keys)."""
    if not _SP_SUPPORT:
        try:
            parameters(args.tensor_parallel_spec(
                {"type": "Linear", "in_features": 64, "out_features": 64},
                2, "column", True))
            _SP_SUPPORT.append(True)
        except tejit.TejitError as error:
            if "sequence_parallel" not in str(error):
                raise
            _SP_SUPPORT.append(False)
    return _SP_SUPPORT[0]


class SequenceParallelShapesTest(unittest.TestCase):
    """The specs the modules write with sequence_parallel (tp_size 2, seq
    16, batch 2; global sizes) compile to programs whose input and output
    hold this rank's slice of dim 0 where the contract says (a column
    GEMM's input is gathered, a row GEMM's output scattered), parameters
    unchanged."""

    def setUp(self):
        if not compiler_takes_sequence_parallel():
            self.skipTest("this build's compiler does not take "
                          "'sequence_parallel' yet")

    def test_linear(self):
        column = parameters(args.tensor_parallel_spec(
            {"type": "Linear", "in_features": 256, "out_features": 512},
            2, "column", True))
        self.assertEqual(column, {"input": (8, 2, 256),
                                  "weight": (256, 256), "bias": (256,),
                                  "output": (16, 2, 256)})
        row = parameters(args.tensor_parallel_spec(
            {"type": "Linear", "in_features": 256, "out_features": 512},
            2, "row", True))
        self.assertEqual(row, {"input": (16, 2, 128),
                               "weight": (512, 128), "bias": (512,),
                               "output": (8, 2, 512)})

    def test_per_token_modules_flatten_tokens(self):
        # What base._run compiles for an input [s/tp, b, h] = [8, 2, 256]:
        # seq_length = 8 * 2 * tp tokens, batch 1.
        tokens = args.sequence_parallel_tokens("LayerNormMLP", (8, 2), 2,
                                               True)
        got = parameters(args.tensor_parallel_spec(
            {"type": "LayerNormMLP", "hidden_size": 256,
             "ffn_hidden_size": 1024, "return_layernorm_output": True},
            2, None, True), seq=tokens, batch=1)
        self.assertEqual(got["input"], (16, 1, 256))
        self.assertEqual(got["output"], (16, 1, 256))
        self.assertEqual(got["ln_output"], (16, 1, 256))
        self.assertEqual(got["fc1_weight"], (512, 256))
        self.assertEqual(got["fc2_bias"], (256,))

    def test_layernorm_linear(self):
        got = parameters(args.tensor_parallel_spec(
            {"type": "LayerNormLinear", "in_features": 256,
             "out_features": 512, "return_layernorm_output": True},
            2, "column", True))
        self.assertEqual(got["input"], (8, 2, 256))
        self.assertEqual(got["layer_norm_weight"], (256,))
        self.assertEqual(got["weight"], (256, 256))
        self.assertEqual(got["output"], (16, 2, 256))
        self.assertEqual(got["ln_output"], (8, 2, 256))

    def test_layernorm_mlp(self):
        got = parameters(args.tensor_parallel_spec(
            {"type": "LayerNormMLP", "hidden_size": 256,
             "ffn_hidden_size": 1024, "activation": "swiglu"}, 2, None,
            True))
        self.assertEqual(got["input"], (8, 2, 256))
        self.assertEqual(got["fc1_weight"], (1024, 256))
        self.assertEqual(got["fc2_weight"], (256, 512))
        self.assertEqual(got["output"], (8, 2, 256))

    def test_multihead_attention(self):
        layer = specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, False, tp_size=2, sequence_parallel=True)
        for input_format, slice_shape in (("sbhd", (8, 2, 256)),
                                          ("bshd", (1, 16, 256))):
            with self.subTest(input_format=input_format):
                got = parameters(layer, input_format=input_format)
                self.assertEqual(got["input"], slice_shape)
                self.assertEqual(got["output"], slice_shape)
                self.assertEqual(got["layernorm_qkv.weight"],
                                 ((4 + 2 * 2) * 32, 256))
                self.assertEqual(got["proj.weight"], (256, 4 * 32))

    def test_transformer_layer(self):
        layer = specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0,
            0.0, "causal", True, False, False, tp_size=2,
            sequence_parallel=True)
        got = parameters(layer, input_format="sbhd")
        self.assertEqual(got["input"], (8, 2, 256))
        self.assertEqual(got["output"], (8, 2, 256))
        self.assertEqual(got["layernorm_mlp.fc2_bias"], (256,))
        got = parameters(layer, input_format="bshd")
        self.assertEqual(got["input"], (1, 16, 256))
        self.assertEqual(got["output"], (1, 16, 256))

    def test_decoder_encoder_output_is_a_slice(self):
        layer = specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0,
            0.0, "causal", True, False, False, decoder=(12, "no_mask", False),
            tp_size=2, sequence_parallel=True)
        got = parameters(layer, input_format="sbhd")
        self.assertEqual(got["input"], (8, 2, 256))
        self.assertEqual(got["encoder_output"], (6, 2, 256))
        self.assertEqual(got["output"], (8, 2, 256))


class LocalShapesTest(unittest.TestCase):
    """The specs the modules write for tp_size 2 compile to programs that
    take TE's local shapes (docs/tensor-parallel.md's table)."""

    def test_linear(self):
        column = parameters(args.tensor_parallel_spec(
            {"type": "Linear", "in_features": 256, "out_features": 512},
            2, "column"))
        self.assertEqual(column, {"input": (16, 2, 256),
                                  "weight": (256, 256), "bias": (256,),
                                  "output": (16, 2, 256)})
        row = parameters(args.tensor_parallel_spec(
            {"type": "Linear", "in_features": 256, "out_features": 512},
            2, "row"))
        self.assertEqual(row, {"input": (16, 2, 128),
                               "weight": (512, 128), "bias": (512,),
                               "output": (16, 2, 512)})

    def test_layernorm_linear(self):
        got = parameters(args.tensor_parallel_spec(
            {"type": "LayerNormLinear", "in_features": 256,
             "out_features": 512, "return_layernorm_output": True},
            2, "column"))
        self.assertEqual(got["layer_norm_weight"], (256,))
        self.assertEqual(got["weight"], (256, 256))
        self.assertEqual(got["bias"], (256,))
        self.assertEqual(got["output"], (16, 2, 256))
        self.assertEqual(got["ln_output"], (16, 2, 256))

    def test_layernorm_mlp(self):
        for activation, rows in (("gelu", 512), ("swiglu", 1024)):
            with self.subTest(activation=activation):
                got = parameters(args.tensor_parallel_spec(
                    {"type": "LayerNormMLP", "hidden_size": 256,
                     "ffn_hidden_size": 1024, "activation": activation}, 2))
                self.assertEqual(got["layer_norm_weight"], (256,))
                self.assertEqual(got["fc1_weight"], (rows, 256))
                self.assertEqual(got["fc1_bias"], (rows,))
                self.assertEqual(got["fc2_weight"], (256, 512))
                self.assertEqual(got["fc2_bias"], (256,))
                self.assertEqual(got["output"], (16, 2, 256))

    def test_multihead_attention_gqa(self):
        # 8 heads, 4 groups, kv_channels 32: each rank 4 heads, 2 groups.
        layer = specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, False, tp_size=2)
        got = parameters(layer, input_format="sbhd")
        self.assertEqual(got["layernorm_qkv.layer_norm_weight"], (256,))
        self.assertEqual(got["layernorm_qkv.weight"],
                         ((4 + 2 * 2) * 32, 256))
        self.assertEqual(got["layernorm_qkv.bias"], ((4 + 2 * 2) * 32,))
        self.assertEqual(got["proj.weight"], (256, 4 * 32))
        self.assertEqual(got["proj.bias"], (256,))
        self.assertEqual(got["output"], (16, 2, 256))

    def test_transformer_layer(self):
        layer = specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "swiglu", 0.0,
            0.0, "causal", True, False, False, tp_size=2)
        got = parameters(layer, input_format="sbhd")
        self.assertEqual(got["self_attention.layernorm_qkv.weight"],
                         (256, 256))
        self.assertEqual(got["self_attention.proj.weight"], (256, 128))
        self.assertEqual(got["layernorm_mlp.fc1_weight"], (1024, 256))
        self.assertEqual(got["layernorm_mlp.fc2_weight"], (256, 512))
        self.assertEqual(got["layernorm_mlp.fc2_bias"], (256,))
        self.assertEqual(got["output"], (16, 2, 256))

    def test_dot_product_attention_takes_local_heads(self):
        # DotProductAttention writes its local heads and no tp_size.
        layer = specs.dot_product_attention_spec(8 // 2, 32, 4 // 2,
                                                 "causal", 0.0, 0.125)
        self.assertNotIn("tp_size", layer)
        got = parameters(layer, input_format="sbhd")
        self.assertEqual(got["query"], (16, 2, 4, 32))
        self.assertEqual(got["key"], (16, 2, 2, 32))

    def test_the_compiler_checks_divisibility_too(self):
        with self.assertRaises(tejit.TejitError) as caught:
            parameters(args.tensor_parallel_spec(
                {"type": "LayerNormMLP", "hidden_size": 256,
                 "ffn_hidden_size": 1000}, 16))
        self.assertIn("ffn_hidden_size", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
