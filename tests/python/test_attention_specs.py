"""The specs tejit.pytorch's attention modules (DotProductAttention,
MultiheadAttention, TransformerLayer) compile, against the compiler,
without PyTorch or a GPU: their program's inputs are what the modules
supply (parameter names under TE's names, query/key/value, masks, rotary
tables, shapes of the call's layout), dropout gives the runtime-owned
`rng_state` only when on, and TE's interleaved fused QKV rows map onto the
compiler's q | k | v rows. The spec builders live in
python/tejit/pytorch/module/_attention_specs.py, loaded here by path (the
tejit.pytorch package needs PyTorch). Run: python3 -m pytest tests/python
"""
import importlib.util
import os
import re
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402


def _load_specs():
    path = os.path.join(REPO, "python", "tejit", "pytorch", "module",
                        "_attention_specs.py")
    spec = importlib.util.spec_from_file_location("tejit_attention_specs",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


specs = _load_specs()

_ARGUMENT = re.compile(r'%arg\d+: tensor<([^>]*)> \{te\.name = "([^"]+)"')


def arguments(spec, stage="te", training=True):
    """{te.name: shape string} of the forward function's arguments."""
    text = tejit.compile_ir(spec, stage, training=training)
    header = next(line for line in text.splitlines()
                  if "func.func" in line and "_backward" not in line)
    header = header.split(") -> (")[0]
    return {name: shape for shape, name in _ARGUMENT.findall(header)}


def parameters(args):
    return [name[len("layers.0."):] for name in args
            if name.startswith("layers.0.")]


# Transformer Engine's state_dict names (TE 2.x, no _extra_state), written
# out by hand: what the modules register and what the fused program names
# must map onto.
TE_MHA_NAMES = [
    "layernorm_qkv.layer_norm_weight", "layernorm_qkv.layer_norm_bias",
    "layernorm_qkv.query_weight", "layernorm_qkv.key_weight",
    "layernorm_qkv.value_weight", "layernorm_qkv.query_bias",
    "layernorm_qkv.key_bias", "layernorm_qkv.value_bias",
    "proj.weight", "proj.bias"]


class QkvNamesTest(unittest.TestCase):
    def test_split_and_fused_names(self):
        self.assertEqual(
            ["layernorm_qkv." + n for n in specs.qkv_parameter_names(
                False, True, "LayerNorm")] + ["proj.weight", "proj.bias"],
            TE_MHA_NAMES)
        self.assertEqual(specs.qkv_parameter_names(True, True, None),
                         ["weight", "bias"])
        self.assertEqual(specs.qkv_parameter_names(False, False, "RMSNorm"),
                         ["layer_norm_weight", "query_weight", "key_weight",
                          "value_weight"])

    def test_interleaved_rows(self):
        # 4 heads over 2 groups, 1 channel: TE's rows are
        # [q0 q1 k0 v0 | q2 q3 k1 v1]; the program's q0..q3 k0 k1 v0 v1.
        self.assertEqual(specs.interleaved_qkv_rows(4, 2, 1),
                         [0, 1, 4, 5, 2, 6, 3, 7])
        # Multi-head (groups = heads), 2 channels: [h, (q, k, v), d].
        self.assertEqual(specs.interleaved_qkv_rows(2, 2, 2),
                         [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11])
        rows = specs.interleaved_qkv_rows(8, 2, 4)
        self.assertEqual(sorted(rows), list(range((8 + 2 * 2) * 4)))


class DotProductAttentionSpecTest(unittest.TestCase):
    def spec(self, qkv_format="sbhd", mask="causal", groups=2, dropout=0.0):
        layer = specs.dot_product_attention_spec(8, 16, groups, mask,
                                                 dropout, 0.25)
        return specs.program_spec("DotProductAttention", "bf16", qkv_format,
                                   32, 2, layer)

    def test_inputs_follow_the_layout(self):
        args = arguments(self.spec())
        self.assertEqual(args, {"query": "32x2x8x16xbf16",
                                "key": "32x2x2x16xbf16",
                                "value": "32x2x2x16xbf16"})
        args = arguments(self.spec(qkv_format="bshd", groups=1))
        self.assertEqual(args["query"], "2x32x8x16xbf16")
        self.assertEqual(args["key"], "2x32x1x16xbf16")

    def test_masks(self):
        for mask in ("padding", "padding_causal",
                     "padding_causal_bottom_right"):
            with self.subTest(mask=mask):
                self.assertEqual(
                    arguments(self.spec(mask=mask))["attention_mask"],
                    "2x1x1x32xi1")
        self.assertEqual(
            arguments(self.spec(mask="arbitrary"))[
                "arbitrary_attention_mask"], "2x1x32x32xi1")
        for mask in ("no_mask", "causal", "causal_bottom_right"):
            with self.subTest(mask=mask):
                self.assertNotIn("attention_mask",
                                 arguments(self.spec(mask=mask)))

    def test_dropout_state_only_with_dropout(self):
        planned = arguments(self.spec(dropout=0.1), "planned")
        self.assertIn("rng_state", planned)
        self.assertNotIn("rng_state", arguments(self.spec(), "planned"))


class BlockSpecTest(unittest.TestCase):
    def mha(self, input_layernorm=True, bias=True, rotary=False,
            normalization="LayerNorm", mask="causal", dropout=0.0,
            qkv_format="sbhd"):
        layer = specs.multihead_attention_spec(
            64, 4, 16, 2, input_layernorm, normalization, 1e-5, False, mask,
            dropout, bias, rotary)
        return specs.program_spec("MultiheadAttention", "bf16", qkv_format,
                                  32, 2, layer)

    def layer(self, activation="gelu", normalization="LayerNorm",
              rotary=False, mask="causal", dropout=(0.0, 0.0), bias=True,
              qkv_format="sbhd", recipe=None):
        layer = specs.transformer_layer_spec(
            64, 256, 4, 16, 4, 1e-5, normalization, False, activation,
            dropout[0], dropout[1], mask, bias, False, rotary)
        return specs.program_spec("TransformerLayer", "bf16", qkv_format,
                                  32, 2, layer, recipe)

    def test_multihead_attention_names(self):
        args = arguments(self.mha())
        self.assertEqual(args["input"], "32x2x64xbf16")
        self.assertEqual(parameters(args), [
            "layernorm_qkv.layer_norm_weight",
            "layernorm_qkv.layer_norm_bias", "layernorm_qkv.weight",
            "layernorm_qkv.bias", "proj.weight", "proj.bias"])
        # (4 + 2 * 2) heads of 16 rows: q | k | v.
        self.assertEqual(args["layers.0.layernorm_qkv.weight"], "128x64xbf16")
        args = arguments(self.mha(input_layernorm=False, bias=False,
                                  qkv_format="bshd"))
        self.assertEqual(args["input"], "2x32x64xbf16")
        self.assertEqual(parameters(args), ["qkv.weight", "proj.weight"])
        args = arguments(self.mha(normalization="RMSNorm"))
        self.assertNotIn("layers.0.layernorm_qkv.layer_norm_bias", args)

    def test_mask_and_rotary_inputs(self):
        args = arguments(self.mha(rotary=True, mask="padding_causal"))
        self.assertEqual(args["attention_mask"], "2x1x1x32xi1")
        self.assertEqual(args["rotary_pos_emb"], "32x1x1x16xf32")
        args = arguments(self.layer(rotary=True, mask="padding",
                                    qkv_format="bshd"))
        self.assertEqual(args["attention_mask"], "2x1x1x32xi1")
        self.assertEqual(args["rotary_pos_emb"], "32x1x1x16xf32")

    def test_transformer_layer_names(self):
        args = arguments(self.layer())
        self.assertEqual(parameters(args), [
            "self_attention.layernorm_qkv.layer_norm_weight",
            "self_attention.layernorm_qkv.layer_norm_bias",
            "self_attention.layernorm_qkv.weight",
            "self_attention.layernorm_qkv.bias",
            "self_attention.proj.weight", "self_attention.proj.bias",
            "layernorm_mlp.layer_norm_weight",
            "layernorm_mlp.layer_norm_bias", "layernorm_mlp.fc1_weight",
            "layernorm_mlp.fc1_bias", "layernorm_mlp.fc2_weight",
            "layernorm_mlp.fc2_bias"])
        args = arguments(self.layer(activation="swiglu",
                                    normalization="RMSNorm", bias=False))
        self.assertEqual(args["layers.0.layernorm_mlp.fc1_weight"],
                         "512x64xbf16")
        self.assertNotIn("layers.0.layernorm_mlp.fc1_bias", args)

    def test_the_quickstart_layer(self):
        # The spec of te.TransformerLayer(64, 256, 4) as the modules build
        # it equals examples/quickstart_small.yaml's (FP8 included).
        recipe = {"type": "DelayedScaling", "fp8_format": "HYBRID",
                  "amax_history_len": 16, "amax_compute_algo": "max"}
        ours = arguments(self.layer(dropout=(0.1, 0.1), recipe=recipe),
                         "scaled")
        example = arguments(os.path.join(REPO, "examples",
                                         "quickstart_small.yaml"), "scaled")
        self.assertEqual(ours, example)

    def test_dropout_only_when_on(self):
        self.assertIn("rng_state",
                      arguments(self.layer(dropout=(0.1, 0.0)), "planned"))
        self.assertIn("rng_state",
                      arguments(self.mha(dropout=0.1), "planned"))
        self.assertNotIn("rng_state", arguments(self.layer(), "planned"))
        # An inference program has no dropout at all.
        self.assertNotIn("rng_state", arguments(
            self.layer(dropout=(0.1, 0.1)), "planned", training=False))


if __name__ == "__main__":
    unittest.main()
