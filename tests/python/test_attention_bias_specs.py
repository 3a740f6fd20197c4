"""The attention bias keys of the specs tejit.pytorch's attention modules
compile (docs/attention-bias.md), without PyTorch or a GPU: the spec
builders of python/tejit/pytorch/module/_attention_specs.py (loaded by
path) write `core_attention_bias_type`, `bias_shape`,
`bias_requires_grad` and `alibi_slopes` only for a call with a bias
(specs without one stay as they were), TE's bias shape names from the
bias's leading dims, and, against the compiler, the program inputs
`core_attention_bias` ([1 or b, 1 or h, s_q, s_kv] in the params dtype)
and `alibi_slopes` (f32 [h] or [b, h]), the backward result
`grad.core_attention_bias` exactly when asked for, and the compiler's
refusals (pre_scale_bias, a gradient for another shape than 1hss, a bias
with the arbitrary mask type).
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
from torch_free import load  # noqa: E402

specs = load("module/_attention_specs.py", "tejit_attention_specs_bias")

_ARGUMENT = re.compile(r'%arg\d+: tensor<([^>]*)> \{te\.name = "([^"]+)"')
_RESULT = re.compile(r'tensor<([^>]*)> \{[^}]*te\.name = "([^"]+)"')
HEADS, GROUPS, D, SEQ, BATCH = 4, 2, 16, 32, 2


def functions(spec, stage="autodiff", training=True):
    """({forward argument: shape string}, {backward result: shape
    string}; empty without a backward) of the program of `spec`."""
    text = tejit.compile_ir(spec, stage, training=training)
    forward, backward = {}, {}
    for line in text.splitlines():
        if "func.func" not in line:
            continue
        if "_backward" in line:
            backward = {n: s for s, n in
                        _RESULT.findall(line.split(") -> (")[1])}
        else:
            forward = {n: s for s, n in
                       _ARGUMENT.findall(line.split(") -> (")[0])}
    return forward, backward


def dpa(bias, mask="causal", kv_seq_length=None, dtype="bf16",
        qkv_format="sbhd"):
    layer = specs.dot_product_attention_spec(
        HEADS, D, GROUPS, mask, 0.0, 0.25, kv_seq_length=kv_seq_length,
        attention_bias=bias)
    return specs.program_spec("DotProductAttention", dtype, qkv_format, SEQ,
                              BATCH, layer)


def mha(bias, mask="causal", kv_seq_length=None):
    layer = specs.multihead_attention_spec(
        HEADS * D, HEADS, D, GROUPS, True, "LayerNorm", 1e-5, False, mask,
        0.0, True, False, kv_seq_length=kv_seq_length, attention_bias=bias)
    return specs.program_spec("MultiheadAttention", "bf16", "sbhd", SEQ,
                              BATCH, layer)


def transformer(bias, mask="causal", decoder=None):
    layer = specs.transformer_layer_spec(
        HEADS * D, 4 * HEADS * D, HEADS, D, GROUPS, 1e-5, "LayerNorm", False,
        "gelu", 0.0, 0.0, mask, True, False, False, decoder=decoder,
        attention_bias=bias)
    return specs.program_spec("TransformerLayer", "bf16", "bshd", SEQ, BATCH,
                              layer)


def post(shape="1hss", grad=False):
    return ("post_scale_bias", shape, grad, None)


def alibi(slopes="none"):
    return ("alibi", None, False, slopes)


class BiasKeysTest(unittest.TestCase):
    """What the builders write, without the compiler."""

    def test_shape_codes(self):
        code = specs.bias_shape_code
        self.assertEqual(code(1, 8, 2, 8), "1hss")
        self.assertEqual(code(2, 1, 2, 8), "b1ss")
        self.assertEqual(code(2, 8, 2, 8), "bhss")
        self.assertEqual(code(1, 1, 2, 8), "11ss")
        # Broadcast dims read as 1: [1, h] is 1hss (the shape that takes
        # a gradient) also for one sequence, and [1, 1] 1hss for one head.
        self.assertEqual(code(1, 8, 1, 8), "1hss")
        self.assertEqual(code(1, 1, 2, 1), "1hss")
        self.assertEqual(code(2, 1, 2, 1), "b1ss")
        for dims in ((3, 8), (2, 4), (0, 8), (1, 2)):
            with self.subTest(dims=dims):
                self.assertIsNone(code(*dims, 2, 8))
        for name in specs.BIAS_SHAPES:
            self.assertEqual(code(*specs.bias_dims(name, 2, 8), 2, 8), name)

    def test_keys(self):
        keys = specs.bias_spec_keys
        self.assertEqual(keys(None), {})
        self.assertEqual(keys(("no_bias", None, False, None)), {})
        self.assertEqual(keys(post()), {
            "core_attention_bias_type": "post_scale_bias",
            "bias_shape": "1hss"})
        self.assertEqual(keys(post("1hss", True)), {
            "core_attention_bias_type": "post_scale_bias",
            "bias_shape": "1hss", "bias_requires_grad": True})
        self.assertEqual(keys(post("b1ss"))["bias_shape"], "b1ss")
        self.assertEqual(keys(alibi()), {
            "core_attention_bias_type": "alibi", "alibi_slopes": "none"})
        self.assertEqual(keys(alibi("batch_heads"))["alibi_slopes"],
                         "batch_heads")
        with self.assertRaises(ValueError):
            keys(("pre_scale_bias", "1hss", False, None))
        # Shapes and slopes the spec importer would refuse fail here.
        with self.assertRaises(ValueError):
            keys(post(None))
        with self.assertRaises(ValueError):
            keys(alibi("b"))

    def test_specs_without_a_bias_are_unchanged(self):
        for build in (dpa, mha, transformer):
            with self.subTest(build=build.__name__):
                layer = build(None)["layers"][0]
                self.assertFalse(any("bias_" in key or "alibi" in key
                                     for key in layer))
                with_bias = build(post("bhss", False))["layers"][0]
                self.assertEqual(with_bias["core_attention_bias_type"],
                                 "post_scale_bias")
                self.assertEqual(with_bias["bias_shape"], "bhss")
                self.assertEqual({k: v for k, v in with_bias.items()
                                  if k not in ("core_attention_bias_type",
                                               "bias_shape")}, layer)
                self.assertEqual(build(alibi("heads"))["layers"][0][
                    "alibi_slopes"], "heads")
        # The blocks' linear `bias` key stays the projections'.
        self.assertIs(mha(post())["layers"][0]["bias"], True)
        self.assertIs(transformer(alibi())["layers"][0]["bias"], True)


class CompiledBiasSpecTest(unittest.TestCase):
    """The compiler's side of the contract (the spec importer, the IR,
    te-autodiff)."""

    def test_bias_input_of_each_shape(self):
        for name in specs.BIAS_SHAPES:
            b, h = specs.bias_dims(name, BATCH, HEADS)
            for dtype in ("bf16", "fp16"):
                with self.subTest(shape=name, dtype=dtype):
                    forward, backward = functions(dpa(post(name),
                                                      dtype=dtype))
                    element = {"bf16": "bf16", "fp16": "f16"}[dtype]
                    self.assertEqual(forward["core_attention_bias"],
                                     f"{b}x{h}x{SEQ}x{SEQ}x{element}")
                    self.assertNotIn("grad.core_attention_bias", backward)
                    self.assertNotIn("alibi_slopes", forward)

    def test_bias_gradient(self):
        forward, backward = functions(dpa(post("1hss", True)))
        self.assertEqual(backward["grad.core_attention_bias"],
                         f"1x{HEADS}x{SEQ}x{SEQ}xbf16")
        self.assertIn("grad.query", backward)
        # Inference programs have no backward.
        forward, backward = functions(dpa(post("1hss", True)),
                                      stage="primitive", training=False)
        self.assertEqual(forward["core_attention_bias"],
                         f"1x{HEADS}x{SEQ}x{SEQ}xbf16")
        self.assertEqual(backward, {})

    def test_alibi_slopes(self):
        forward, backward = functions(dpa(alibi()))
        self.assertNotIn("alibi_slopes", forward)
        self.assertNotIn("core_attention_bias", forward)
        forward, backward = functions(dpa(alibi("heads")))
        self.assertEqual(forward["alibi_slopes"], f"{HEADS}xf32")
        self.assertNotIn("grad.alibi_slopes", backward)
        forward, _ = functions(dpa(alibi("batch_heads"),
                                   mask="padding_causal"))
        self.assertEqual(forward["alibi_slopes"], f"{BATCH}x{HEADS}xf32")
        self.assertIn("attention_mask", forward)

    def test_bias_type_reaches_the_ir(self):
        text = tejit.compile_ir(dpa(alibi()), "te")
        self.assertIn("attn_bias_type<alibi>", text)
        text = tejit.compile_ir(mha(post()), "te")
        self.assertIn("attn_bias_type<post_scale_bias>", text)

    def test_cross_attention(self):
        forward, backward = functions(dpa(post("1hss", True),
                                          kv_seq_length=48))
        self.assertEqual(forward["core_attention_bias"],
                         f"1x{HEADS}x{SEQ}x48xbf16")
        self.assertEqual(backward["grad.core_attention_bias"],
                         f"1x{HEADS}x{SEQ}x48xbf16")
        forward, _ = functions(mha(post("b1ss"), mask="no_mask",
                                   kv_seq_length=48))
        self.assertEqual(forward["core_attention_bias"],
                         f"{BATCH}x1x{SEQ}x48xbf16")
        # A decoder layer's bias is its self-attention's.
        forward, _ = functions(transformer(post("11ss"),
                                           decoder=(48, "no_mask", False)))
        self.assertEqual(forward["core_attention_bias"],
                         f"1x1x{SEQ}x{SEQ}xbf16")
        self.assertEqual(forward["encoder_output"],
                         f"{BATCH}x48x{HEADS * D}xbf16")

    def test_blocks(self):
        for build in (mha, transformer):
            with self.subTest(build=build.__name__):
                forward, backward = functions(build(post("1hss", True)))
                self.assertEqual(forward["core_attention_bias"],
                                 f"1x{HEADS}x{SEQ}x{SEQ}xbf16")
                self.assertEqual(backward["grad.core_attention_bias"],
                                 f"1x{HEADS}x{SEQ}x{SEQ}xbf16")
                forward, backward = functions(build(alibi("heads")))
                self.assertEqual(forward["alibi_slopes"], f"{HEADS}xf32")
                self.assertNotIn("grad.core_attention_bias", backward)

    def test_planned_program_takes_the_inputs(self):
        forward, _ = functions(transformer(post("1hss", True)), "planned")
        self.assertEqual(forward["core_attention_bias"],
                         f"1x{HEADS}x{SEQ}x{SEQ}xbf16")
        forward, _ = functions(dpa(alibi("heads")), "planned")
        self.assertEqual(forward["alibi_slopes"], f"{HEADS}xf32")

    def assertRejected(self, spec, *words):
        """The compiler refuses `spec` with `words` in its error lines
        (not in the spec text the message repeats)."""
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.compile_ir(spec, "te")
        errors = "\n".join(line for line in str(caught.exception)
                           .splitlines() if "error" in line)
        for word in words:
            self.assertIn(word, errors)

    def test_refusals(self):
        spec = dpa(post())
        spec["layers"][0]["core_attention_bias_type"] = "pre_scale_bias"
        self.assertRejected(spec, "pre_scale_bias", "scale")
        self.assertRejected(dpa(post("b1ss", True)), "requires_grad")
        self.assertRejected(dpa(post("bhss", True)), "requires_grad")
        self.assertRejected(dpa(post(), mask="arbitrary"), "arbitrary")
        for key, value in (("bias_shape", "hbss"), ("alibi_slopes", "all"),
                           ("core_attention_bias_type", "relative")):
            with self.subTest(key=key):
                spec = dpa(alibi() if key == "alibi_slopes" else post())
                spec["layers"][0][key] = value
                self.assertRejected(spec, key)


if __name__ == "__main__":
    unittest.main()
