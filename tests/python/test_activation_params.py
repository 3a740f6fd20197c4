"""TE's `activation_params` (only with activation="clamped_swiglu",
GPT-OSS's SwiGLU), as tejit.pytorch's LayerNormMLP and TransformerLayer
take them, without PyTorch or a GPU: _args.activation_params_of's spec
form (TE's defaults limit 7.0, alpha 1.702, glu_linear_offset 1.0 filled
in) and its refusals naming activation_params; and the compiler's reading
of the spec key (a LayerNormMLP and a TransformerLayer with clamped_swiglu
compile, the parameters reach the IR, a bad key is an error naming it).
test_pytorch_modules.py and test_attention_layers.py run the modules on a
GPU against PyTorch compositions.
Run: python3 -m pytest tests/python
"""
import math
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import library_loads, load  # noqa: E402

args = load("module/_args.py", "tejit_args_activation")


class ActivationParamsTest(unittest.TestCase):
    def test_defaults_and_given(self):
        of = args.activation_params_of
        self.assertEqual(of("LayerNormMLP", "clamped_swiglu", None),
                         {"limit": 7.0, "alpha": 1.702,
                          "glu_linear_offset": 1.0})
        self.assertEqual(of("LayerNormMLP", "clamped_swiglu", {}),
                         {"limit": 7.0, "alpha": 1.702,
                          "glu_linear_offset": 1.0})
        got = of("TransformerLayer", "clamped_swiglu",
                 {"limit": 3, "alpha": 1.0, "glu_linear_offset": 0})
        self.assertEqual(got, {"limit": 3.0, "alpha": 1.0,
                               "glu_linear_offset": 0.0})
        self.assertTrue(all(type(value) is float for value in got.values()))
        # Other activations take none (None or an empty dict).
        for activation in ("gelu", "swiglu"):
            self.assertIsNone(of("LayerNormMLP", activation, None))
            self.assertIsNone(of("LayerNormMLP", activation, {}))

    def test_refusals_name_the_argument(self):
        of = args.activation_params_of
        cases = [
            (("swiglu", {"limit": 7.0}), ("activation_params",
                                          "clamped_swiglu", "'swiglu'")),
            (("clamped_swiglu", {"beta": 1.0}), ("activation_params",
                                                 "'beta'", "limit")),
            (("clamped_swiglu", {"limit": 0.0}), ("activation_params",
                                                  "'limit'", "greater")),
            (("clamped_swiglu", {"limit": -1}), ("'limit'", "greater")),
            (("clamped_swiglu", {"alpha": math.inf}), ("'alpha'", "finite")),
            (("clamped_swiglu", {"limit": math.nan}), ("'limit'", "finite")),
            (("clamped_swiglu", {"glu_linear_offset": "1"}),
             ("'glu_linear_offset'", "number")),
            (("clamped_swiglu", {"alpha": True}), ("'alpha'", "number")),
        ]
        for (activation, params), words in cases:
            with self.subTest(activation=activation, params=params):
                with self.assertRaises(ValueError) as caught:
                    of("LayerNormMLP", activation, params)
                for word in words:
                    self.assertIn(word, str(caught.exception))
                self.assertIn("LayerNormMLP", str(caught.exception))


def mlp_spec(activation_params=None, activation="clamped_swiglu"):
    layer = {"type": "LayerNormMLP", "hidden_size": 64,
             "ffn_hidden_size": 128, "activation": activation}
    if activation_params is not None:
        layer["activation_params"] = activation_params
    return {"name": "mlp", "params_dtype": "bf16", "seq_length": 16,
            "batch_size": 2, "layers": [layer]}


@unittest.skipUnless(library_loads(), "needs libtejit.so")
class CompilerTest(unittest.TestCase):
    """The compiler's spec key, through the library (tejit.compile_ir)."""

    def test_clamped_swiglu_compiles_with_its_parameters(self):
        text = tejit.compile_ir(mlp_spec({"limit": 0.75, "alpha": 1.5,
                                          "glu_linear_offset": 0.0}), "te")
        self.assertIn("clamped_swiglu", text)
        self.assertIn("7.500000e-01", text)
        self.assertIn("1.500000e+00", text)
        # TE's defaults when the key is absent; both train.
        self.assertIn("clamped_swiglu",
                      tejit.compile_ir(mlp_spec(), "te", training=True))

    def test_transformer_layer(self):
        layer = {"type": "TransformerLayer", "hidden_size": 64,
                 "ffn_hidden_size": 128, "num_attention_heads": 4,
                 "activation": "clamped_swiglu",
                 "activation_params": {"limit": 5.0}}
        spec = {"name": "layer", "params_dtype": "bf16", "seq_length": 16,
                "batch_size": 2, "layers": [layer]}
        self.assertIn("clamped_swiglu", tejit.compile_ir(spec, "te"))

    def test_bad_key_is_an_error_naming_it(self):
        for params, activation in (({"beta": 1.0}, "clamped_swiglu"),
                                   ({"limit": -1.0}, "clamped_swiglu"),
                                   ({"limit": 7.0}, "swiglu")):
            with self.subTest(params=params, activation=activation):
                with self.assertRaises(tejit.TejitError) as caught:
                    tejit.compile_ir(mlp_spec(params, activation), "te")
                self.assertIn("activation_params", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
