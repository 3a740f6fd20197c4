"""The specs tejit.pytorch's attention modules (DotProductAttention,
MultiheadAttention, TransformerLayer) compile, against the compiler,
without PyTorch or a GPU: their program's inputs are what the modules
supply (parameter names under TE's names, query/key/value, masks, rotary
tables, shapes of the call's layout), dropout gives the runtime-owned
`rng_state` only when on, TE's interleaved fused QKV rows map onto the
compiler's q | k | v rows, and a sliding window (window_size) reaches the
attention forward and backward, normalized as TE's check_set_window_size
and left out of the spec when it limits nothing. The spec builders live in
python/tejit/pytorch/module/_attention_specs.py and the argument checks in
_args.py, loaded here by path (the tejit.pytorch package needs PyTorch).
Run: python3 -m pytest tests/python
"""
import os
import re
import sys
import unittest
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import load  # noqa: E402


specs = load("module/_attention_specs.py", "tejit_attention_specs")
args_checks = load("module/_args.py", "tejit_args")

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

    def test_cross_attention_names_and_inputs(self):
        # Queries from 32 tokens, keys/values from a 48-token encoder
        # output through the k | v rows (2 groups of 16, twice).
        layer = specs.multihead_attention_spec(
            64, 4, 16, 2, True, "LayerNorm", 1e-5, False, "padding", 0.0,
            True, False, kv_seq_length=48)
        args = arguments(specs.program_spec("MultiheadAttention", "bf16",
                                            "bshd", 32, 2, layer))
        self.assertEqual(args["input"], "2x32x64xbf16")
        self.assertEqual(args["encoder_output"], "2x48x64xbf16")
        self.assertEqual(args["enc_dec_attn_mask"], "2x1x1x48xi1")
        self.assertNotIn("attention_mask", args)
        self.assertEqual(parameters(args), [
            "layernorm_query.layer_norm_weight",
            "layernorm_query.layer_norm_bias", "layernorm_query.weight",
            "layernorm_query.bias", "key_value.weight", "key_value.bias",
            "proj.weight", "proj.bias"])
        self.assertEqual(args["layers.0.layernorm_query.weight"],
                         "64x64xbf16")
        self.assertEqual(args["layers.0.key_value.weight"], "64x64xbf16")
        layer = specs.multihead_attention_spec(
            64, 4, 16, 4, False, "LayerNorm", 1e-5, False, "no_mask", 0.0,
            False, False, kv_seq_length=16)
        args = arguments(specs.program_spec("MultiheadAttention", "bf16",
                                            "sbhd", 32, 2, layer))
        self.assertEqual(parameters(args), ["query_layer.weight",
                                            "key_value.weight", "proj.weight"])
        self.assertEqual(args["layers.0.key_value.weight"], "128x64xbf16")

    def test_decoder_layer_names_and_inputs(self):
        layer = specs.transformer_layer_spec(
            64, 256, 4, 16, 2, 1e-5, "RMSNorm", False, "swiglu", 0.0, 0.0,
            "padding_causal", False, False, True, None,
            decoder=(40, "padding", False))
        args = arguments(specs.program_spec("TransformerLayer", "bf16",
                                            "sbhd", 32, 2, layer))
        self.assertEqual(args["encoder_output"], "40x2x64xbf16")
        self.assertEqual(args["attention_mask"], "2x1x1x32xi1")
        self.assertEqual(args["enc_dec_attn_mask"], "2x1x1x40xi1")
        self.assertEqual(args["rotary_pos_emb"], "32x1x1x16xf32")
        self.assertEqual(
            [n for n in parameters(args) if n.startswith("inter_attention.")],
            ["inter_attention.layernorm_query.layer_norm_weight",
             "inter_attention.layernorm_query.weight",
             "inter_attention.key_value.weight",
             "inter_attention.proj.weight"])

    def test_output_layernorm_names(self):
        # TE's post-LN layer: self_attention's QKV group is `qkv` (no input
        # norm) and the output norm is the `layernorm` module.
        layer = specs.transformer_layer_spec(
            64, 256, 4, 16, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, False, None, output_layernorm=True)
        args = arguments(specs.program_spec("TransformerLayer", "bf16",
                                            "sbhd", 32, 2, layer))
        names = parameters(args)
        self.assertEqual(names[:2], ["self_attention.qkv.weight",
                                     "self_attention.qkv.bias"])
        self.assertEqual(names[-2:], ["layernorm.weight", "layernorm.bias"])
        self.assertFalse(any("layernorm_qkv" in n for n in names))

    def test_padded_queries_input(self):
        layer = specs.transformer_layer_spec(
            64, 256, 4, 16, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, False, None,
            decoder=(24, "padding_causal", True))
        args = arguments(specs.program_spec("TransformerLayer", "bf16",
                                            "bshd", 32, 2, layer))
        self.assertEqual(args["enc_dec_query_mask"], "2x1x1x32xi1")
        self.assertEqual(args["enc_dec_attn_mask"], "2x1x1x24xi1")
        text = tejit.compile_ir(specs.program_spec(
            "TransformerLayer", "bf16", "bshd", 32, 2, layer), "autodiff")
        self.assertIn("query_mask(", text)
        self.assertIn("pad_keys_only", text)

    def test_parallel_attention_mlp(self):
        # TE's parallel block: the sequential layer's names and inputs; the
        # layer op carries the flag and its backward compiles.
        plain, parallel = (specs.transformer_layer_spec(
            64, 256, 4, 16, 4, 1e-5, "LayerNorm", False, "gelu", 0.1, 0.0,
            "causal", True, False, True, None, parallel_attention_mlp=flag)
            for flag in (False, True))
        self.assertNotIn("parallel_attention_mlp", plain)
        self.assertTrue(parallel["parallel_attention_mlp"])
        spec = specs.program_spec("TransformerLayer", "bf16", "sbhd", 32, 2,
                                  parallel)
        self.assertEqual(arguments(spec), arguments(specs.program_spec(
            "TransformerLayer", "bf16", "sbhd", 32, 2, plain)))
        self.assertIn("parallel_attention_mlp", tejit.compile_ir(spec, "te"))
        self.assertIn("te.dropout", tejit.compile_ir(spec, "autodiff"))

    def test_partial_interleaved_rotary(self):
        # GPT-J's rotary: 8 of 16 channels, adjacent pairs; the table input
        # is as wide as the rotated part, and both te.rotary ops (q, k) and
        # their gradients carry `interleaved`.
        layer = specs.transformer_layer_spec(
            64, 256, 4, 16, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, 8, None, parallel_attention_mlp=True,
            rotary_interleaved=True)
        self.assertEqual(layer["rotary_dim"], 8)
        spec = specs.program_spec("TransformerLayer", "bf16", "sbhd", 32, 2,
                                  layer)
        self.assertEqual(arguments(spec)["rotary_pos_emb"], "32x1x1x8xf32")
        text = tejit.compile_ir(spec, "autodiff")
        rotations = [line for line in text.splitlines()
                     if "te.rotary" in line]
        self.assertEqual(len(rotations), 4)
        self.assertTrue(all("interleaved" in line for line in rotations))
        # A full-width table leaves rotary_dim out.
        full = specs.transformer_layer_spec(
            64, 256, 4, 16, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, 16, None)
        self.assertNotIn("rotary_dim", full)
        self.assertNotIn("rotary_pos_interleaved", full)

    def test_packed_sequences(self):
        # thd as the modules compile it (_thd.PackedCall.shape_spec): the
        # tokens rounded up to 64, seq_length the rounded longest
        # sequence; inputs [tokens, ...], cu_seqlens [b + 1] and each
        # token's rotary angles, and attention on cu_seqlens in the
        # forward and the backward.
        top = {"seq_length": 128, "batch_size": 3, "input_format": "thd",
               "tokens": 192}
        layer = specs.transformer_layer_spec(
            64, 256, 4, 16, 2, 1e-5, "RMSNorm", False, "swiglu", 0.1, 0.1,
            "padding_causal", False, False, 16, None)
        spec = {"name": "TransformerLayer", "params_dtype": "bf16", **top,
                "layers": [layer]}
        args = arguments(spec)
        self.assertEqual(args["input"], "192x64xbf16")
        self.assertEqual(args["cu_seqlens"], "4xi32")
        self.assertEqual(args["rotary_pos_emb"], "192x1x1x16xf32")
        self.assertNotIn("attention_mask", args)
        text = tejit.compile_ir(spec, "autodiff")
        attention = [line for line in text.splitlines()
                     if "te.attention" in line]
        self.assertEqual(len(attention), 2)
        for line in attention:
            self.assertIn("cu_seqlens_q(", line)
            self.assertIn("max_seqlen_q = 128", line)
            self.assertIn("tensor<3x4x128xf32>", line)
        dpa = specs.dot_product_attention_spec(4, 16, 2, "padding", 0.0,
                                               0.25)
        args = arguments({"name": "DotProductAttention",
                          "params_dtype": "bf16", **top, "layers": [dpa]})
        self.assertEqual(args["query"], "192x4x16xbf16")
        self.assertEqual(args["key"], "192x2x16xbf16")
        # TE's default causal mask type is refused: thd needs padding.
        mha = specs.multihead_attention_spec(
            64, 4, 16, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, False)
        with self.assertRaisesRegex(tejit.TejitError, "padding"):
            arguments({"name": "MultiheadAttention", "params_dtype": "bf16",
                       **top, "layers": [mha]})

    def test_dpa_padded_queries_input(self):
        # TE's mask pair in DotProductAttention, keys as long as queries.
        layer = specs.dot_product_attention_spec(
            4, 16, 2, "padding", 0.0, 0.25, None, None, padded_queries=True)
        spec = specs.program_spec("DotProductAttention", "bf16", "sbhd", 32,
                                  2, layer)
        args = arguments(spec)
        self.assertEqual(args["query_mask"], "2x1x1x32xi1")
        self.assertEqual(args["attention_mask"], "2x1x1x32xi1")
        text = tejit.compile_ir(spec, "autodiff")
        self.assertIn("query_mask(", text)
        self.assertIn("pad_keys_only", text)

    def test_te_cross_parameter_names(self):
        # TE's registration order, written out by hand.
        self.assertEqual(specs.cross_parameter_names(False, True, "LayerNorm"),
                         ["layernorm_query.layer_norm_weight",
                          "layernorm_query.layer_norm_bias",
                          "layernorm_query.query_weight",
                          "layernorm_query.query_bias",
                          "key_value.key_weight", "key_value.value_weight",
                          "key_value.key_bias", "key_value.value_bias"])
        self.assertEqual(specs.cross_parameter_names(True, False, None),
                         ["query_layer.weight", "key_value.weight"])

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


_WINDOW = re.compile(r"window_size = array<i64: (-?\d+), (-?\d+)>")


def windows(spec, stage="te", op=None):
    """The window_size attributes [(left, right)] in the IR of `spec` at
    `stage`, of the lines with `op` (all lines when None)."""
    text = tejit.compile_ir(spec, stage)
    return [tuple(int(w) for w in found)
            for line in text.splitlines() if op is None or op in line
            for found in _WINDOW.findall(line)]


class WindowSpecTest(unittest.TestCase):
    """window_size in the specs of the three layer types, against the
    compiler."""

    def dpa(self, window, mask="causal", qkv_format="sbhd"):
        layer = specs.dot_product_attention_spec(8, 16, 2, mask, 0.0, 0.25,
                                                 window)
        return specs.program_spec("DotProductAttention", "bf16", qkv_format,
                                  32, 2, layer)

    def mha(self, window, mask="causal"):
        layer = specs.multihead_attention_spec(
            64, 4, 16, 2, True, "LayerNorm", 1e-5, False, mask, 0.0, True,
            False, window)
        return specs.program_spec("MultiheadAttention", "bf16", "sbhd", 32,
                                  2, layer)

    def layer(self, window, mask="causal"):
        layer = specs.transformer_layer_spec(
            64, 256, 4, 16, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            mask, True, False, False, window)
        return specs.program_spec("TransformerLayer", "bf16", "bshd", 32, 2,
                                  layer)

    def test_no_op_windows_leave_the_spec_as_it_was(self):
        # What a module passes for no window (None, or the normalized
        # default of its mask type): the spec, and so its compile cache
        # entries, as before windows existed.
        for build in (self.dpa, self.mha, self.layer):
            for mask, window in (("causal", None), ("causal", (-1, 0)),
                                 ("causal", (-1, -1)),
                                 ("padding_causal", (-1, 0)),
                                 ("causal_bottom_right", (-1, 0)),
                                 ("no_mask", (-1, -1)),
                                 ("padding", (-1, -1)),
                                 ("arbitrary", (-1, -1))):
                with self.subTest(build=build.__name__, mask=mask,
                                  window=window):
                    self.assertEqual(build(window, mask), build(None, mask))
                    self.assertNotIn("window_size",
                                     build(window, mask)["layers"][0])
        self.assertEqual(self.dpa((64, 0))["layers"][0]["window_size"],
                         [64, 0])
        # Without a causal mask type (-1, 0) limits (the modules normalize
        # it to (-1, -1) first, as TE does).
        self.assertEqual(
            self.dpa((-1, 0), "no_mask")["layers"][0]["window_size"], [-1, 0])
        self.assertEqual(windows(self.dpa(None)), [])
        self.assertEqual(windows(self.layer((-1, 0))), [])

    def test_window_reaches_the_ir(self):
        cases = [(self.dpa, (4, 0), "causal"), (self.dpa, (8, 8), "no_mask"),
                 (self.dpa, (4, 0), "padding_causal"),
                 (self.dpa, (0, 0), "padding"),
                 (self.dpa, (16, -1), "no_mask"),
                 (self.dpa, (6, 0), "causal_bottom_right"),
                 (self.mha, (8, 0), "causal"), (self.mha, (3, 5), "padding"),
                 (self.layer, (8, 0), "causal"),
                 (self.layer, (2, 2), "no_mask")]
        for build, window, mask in cases:
            with self.subTest(build=build.__name__, window=window,
                              mask=mask):
                spec = build(window, mask)
                self.assertEqual(spec["layers"][0]["window_size"],
                                 list(window))
                self.assertEqual(windows(spec), [window])
                # The decomposed attention, forward and backward, keeps it.
                self.assertEqual(windows(spec, "autodiff", "te.attention "),
                                 [window])
                self.assertEqual(
                    windows(spec, "autodiff", "te.attention_bwd"), [window])
        # Both layouts; the inputs do not change.
        for qkv_format in ("sbhd", "bshd"):
            spec = self.dpa((4, 0), qkv_format=qkv_format)
            self.assertEqual(windows(spec), [(4, 0)])
            self.assertEqual(arguments(spec),
                             arguments(self.dpa(None, qkv_format=qkv_format)))
        # The planned program too (what the runtime runs).
        self.assertEqual(windows(self.mha((8, 0)), "planned",
                                 "te.attention "), [(8, 0)])

    def assertRejected(self, spec, *words):
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.compile_ir(spec, "te")
        for word in words:
            self.assertIn(word, str(caught.exception))

    def test_bad_windows_are_rejected(self):
        self.assertRejected(self.dpa((-2, 0)), "'window_size'",
                            "DotProductAttention", ">= -1", "[-2, 0]")
        self.assertRejected(self.mha((4, -3), "no_mask"), "'window_size'",
                            "MultiheadAttention", ">= -1")
        self.assertRejected(self.layer((-5, 0)), "'window_size'",
                            "TransformerLayer", ">= -1")
        for build in (self.dpa, self.mha, self.layer):
            with self.subTest(build=build.__name__):
                self.assertRejected(build((4, 4), "arbitrary"),
                                    "'window_size'", "arbitrary")
        for value in ([1, 2, 3], [4], "wide", [1.5, 0], ["4", 0]):
            with self.subTest(value=value):
                spec = self.dpa(None)
                spec["layers"][0]["window_size"] = value
                self.assertRejected(spec, "'window_size'",
                                    "a list of 2 integers")


class WindowArgumentTest(unittest.TestCase):
    """_args.check_window_size: TE's check_set_window_size normalization
    (with its warnings), the modules' errors."""

    def normalized(self, window, mask):
        """(the normalized window, the warnings' messages)."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = args_checks.check_window_size("Owner", "window_size",
                                                   window, mask)
        return result, [str(w.message) for w in caught]

    def test_none_is_the_mask_types_default(self):
        for mask in args_checks.ATTN_MASK_TYPES:
            with self.subTest(mask=mask):
                self.assertEqual(self.normalized(None, mask),
                                 ((-1, 0) if "causal" in mask else (-1, -1),
                                  []))

    def test_windows_taken_as_given(self):
        for window, mask in (((64, 0), "causal"), ((-1, 0), "causal"),
                             ((0, 0), "padding_causal"),
                             ((32, 0), "causal_bottom_right"),
                             ((128, 0), "padding_causal_bottom_right"),
                             ((32, 0), "no_mask"), ((-1, -1), "no_mask"),
                             ((0, 0), "padding"), ((16, -1), "no_mask"),
                             ((40, -1), "padding"),
                             ((-1, -1), "arbitrary")):
            with self.subTest(window=window, mask=mask):
                self.assertEqual(self.normalized(window, mask), (window, []))
                # A list (YAML, JSON) gives the tuple.
                self.assertEqual(self.normalized(list(window), mask),
                                 (window, []))

    def test_te_corrections_warn(self):
        for window, mask, want in (((64, 64), "causal", (64, 0)),
                                   ((-1, -1), "causal", (-1, 0)),
                                   ((8, -1), "padding_causal", (8, 0)),
                                   ((-1, 5), "causal_bottom_right", (-1, 0)),
                                   ((-1, 0), "no_mask", (-1, -1)),
                                   ((-1, 0), "padding", (-1, -1)),
                                   ((-1, 0), "arbitrary", (-1, -1))):
            with self.subTest(window=window, mask=mask):
                result, messages = self.normalized(window, mask)
                self.assertEqual(result, want)
                self.assertEqual(len(messages), 1)
                self.assertIn("window_size", messages[0])
                self.assertIn(mask, messages[0])
                # Normalized windows are normalized: no second warning.
                self.assertEqual(self.normalized(result, mask),
                                 (result, []))

    def test_bad_windows(self):
        for window in ((-2, 0), (0, -2), [5, -7], (1, 2, 3), (4,), 4, "44",
                       (1.5, 0), (True, 0), ("4", 0), (None, 0)):
            with self.subTest(window=window):
                with self.assertRaises(ValueError) as caught:
                    args_checks.check_window_size("Owner.forward",
                                                  "window_size", window,
                                                  "causal")
                message = str(caught.exception)
                for word in ("Owner.forward", "window_size", ">= -1"):
                    self.assertIn(word, message)

    def test_right_bounds_cudnn_does_not_compute(self):
        # TE's two-sided windows: the runtime's cuDNN attention takes the
        # causal diagonal as its only right bound.
        for window, mask in (((32, 32), "no_mask"), ((0, 7), "padding"),
                             ((-1, 16), "no_mask"), ((8, 1), "padding")):
            with self.subTest(window=window, mask=mask):
                with self.assertRaises(NotImplementedError) as caught:
                    args_checks.check_window_size("Owner", "window_size",
                                                  window, mask)
                message = str(caught.exception)
                for word in ("Owner", "window_size", "right bound",
                             "(left, 0)"):
                    self.assertIn(word, message)
        # With a causal mask type TE's correction comes first.
        self.assertEqual(self.normalized((32, 32), "causal")[0], (32, 0))

    def test_no_window_with_an_arbitrary_mask(self):
        for window in ((4, 4), (0, 0), (-1, 8), (16, -1)):
            with self.subTest(window=window):
                with self.assertRaises(NotImplementedError) as caught:
                    args_checks.check_window_size("Owner", "window_size",
                                                  window, "arbitrary")
                self.assertIn("window_size", str(caught.exception))
                self.assertIn("arbitrary", str(caught.exception))

    def test_check_no_window(self):
        for window in (None, (-1, -1), [-1, -1]):
            args_checks.check_no_window("Owner", "enc_dec_window_size",
                                        window, "no cross-attention")
        for window in ((4, 0), (-1, 0), (8, 8)):
            with self.subTest(window=window):
                with self.assertRaises(NotImplementedError) as caught:
                    args_checks.check_no_window(
                        "Owner", "enc_dec_window_size", window,
                        "no cross-attention")
                self.assertIn("enc_dec_window_size", str(caught.exception))
        with self.assertRaises(ValueError):
            args_checks.check_no_window("Owner", "enc_dec_window_size",
                                        (-3, 0), "no cross-attention")

    def test_normalized_windows_compile(self):
        # What a module derives and passes to the spec builders: the
        # compiler takes each; the defaults add nothing to the spec.
        for mask in ("causal", "padding_causal", "no_mask", "padding"):
            for window in (None, (32, 0), (32, -1), (-1, -1)):
                with self.subTest(mask=mask, window=window):
                    normal, _ = self.normalized(window, mask)
                    self.assertIn(normal[1], (-1, 0))
                    layer = specs.dot_product_attention_spec(
                        8, 16, 2, mask, 0.0, 0.25, normal)
                    spec = specs.program_spec("DotProductAttention", "bf16",
                                              "sbhd", 64, 2, layer)
                    limits = normal not in ((-1, 0), (-1, -1))
                    self.assertEqual(windows(spec),
                                     [normal] if limits else [])


if __name__ == "__main__":
    unittest.main()
