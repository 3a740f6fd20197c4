"""FP8 attention (TE's fp8_dpa, docs/fp8-attention.md) on the Python side,
without a GPU: the refusals of _attention_specs.check_fp8_attention (loaded
by path, no PyTorch), the specs with `fp8_dpa: true` against the compiler
(te.fp8_attention and its backward in the program, the compiler's own
refusals; skipped without libtejit.so), and, with PyTorch (skipped
without it), what the attention modules do under
fp8_autocast(DelayedScaling(fp8_dpa=True)): DotProductAttention takes the
recipe only with fp8_dpa, only the attention modules' specs carry it, a
KV-cache step's program is the recipe's without it, and every refusal
comes before anything compiles, naming its argument.
Run: python3 -m pytest tests/python
"""
import importlib.util
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from tejit.common import recipe  # noqa: E402
from torch_free import library_loads, load  # noqa: E402

specs = load("module/_attention_specs.py", "tejit_attention_specs_fp8")

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HEADS, GROUPS, D, SEQ, BATCH = 4, 2, 64, 32, 2
FP8_DPA = recipe.DelayedScaling(fp8_dpa=True, amax_history_len=16)


class CheckTest(unittest.TestCase):
    """check_fp8_attention: what FP8 attention runs passes; the rest is a
    NotImplementedError naming the attribute and FP8 attention."""

    def refused(self, *words, owner="DotProductAttention", d=D,
                qkv_format="sbhd", mask="causal", window=(-1, 0),
                bias_type="no_bias", format_argument="qkv_format",
                dropout=0.0):
        with self.assertRaises(NotImplementedError) as caught:
            specs.check_fp8_attention(owner, d, qkv_format, mask, window,
                                      bias_type, format_argument, dropout)
        message = str(caught.exception)
        for word in (owner, "FP8 attention", "fp8_dpa") + words:
            self.assertIn(word, message)
        return message

    def test_what_runs(self):
        for mask, window in (("no_mask", (-1, -1)), ("causal", (-1, 0)),
                             ("padding", (-1, -1)),
                             ("padding_causal", (-1, 0)),
                             ("causal_bottom_right", (-1, 0)),
                             ("padding_causal_bottom_right", (-1, 0)),
                             ("causal", None)):
            for d in (16, 64, 128, 192, 256):
                for fmt in ("sbhd", "bshd"):
                    with self.subTest(mask=mask, d=d, fmt=fmt):
                        specs.check_fp8_attention("DotProductAttention", d,
                                                  fmt, mask, window)
                        specs.check_fp8_attention("DotProductAttention", d,
                                                  fmt, mask, window, None)

    def test_bias_and_alibi(self):
        for bias_type in ("post_scale_bias", "pre_scale_bias", "alibi"):
            with self.subTest(bias_type=bias_type):
                self.refused(f"core_attention_bias_type={bias_type!r}",
                             bias_type=bias_type)

    def test_arbitrary_mask(self):
        message = self.refused("attn_mask_type='arbitrary'",
                               mask="arbitrary", window=(-1, -1))
        self.assertIn("bias", message)

    def test_thd(self):
        self.refused("qkv_format='thd'", qkv_format="thd",
                     mask="padding_causal")
        self.refused("attn_input_format='thd'", owner="TransformerLayer",
                     qkv_format="thd", mask="padding",
                     format_argument="attn_input_format")

    def test_sliding_windows(self):
        for mask, window in (("causal", (128, 0)), ("no_mask", (32, -1)),
                             ("no_mask", (-1, 0)), ("padding", (16, 16)),
                             ("padding_causal", (8, 0))):
            with self.subTest(mask=mask, window=window):
                self.refused(f"window_size={window}", mask=mask,
                             window=window)

    def test_head_dims(self):
        for d in (8, 24, 72, 100, 257, 272, 320, 512):
            with self.subTest(d=d):
                self.refused(f"kv_channels={d}", "16", "256", d=d)

    def test_attention_dropout(self):
        self.refused("attention_dropout=0.1", dropout=0.1)
        specs.check_fp8_attention("DotProductAttention", D, "sbhd", "causal",
                                  (-1, 0), "no_bias", "qkv_format", 0.0)

    def test_window_limits(self):
        limits = specs.window_limits
        self.assertFalse(limits("causal", None))
        self.assertFalse(limits("no_mask", (-1, -1)))
        self.assertFalse(limits("causal", (-1, 0)))
        self.assertFalse(limits("padding_causal_bottom_right", [-1, 0]))
        self.assertTrue(limits("no_mask", (-1, 0)))
        self.assertTrue(limits("causal", (0, 0)))
        self.assertTrue(limits("padding", (4, -1)))


def dpa_spec(fp8_recipe=FP8_DPA, mask="causal", d=D, dtype="bf16",
             qkv_format="bshd", window=None, bias=None, dropout=0.0):
    layer = specs.dot_product_attention_spec(
        HEADS, d, GROUPS, mask, dropout, d ** -0.5, window_size=window,
        attention_bias=bias)
    return specs.program_spec(
        "DotProductAttention", dtype, qkv_format, SEQ, BATCH, layer,
        fp8_recipe.to_spec() if fp8_recipe is not None else None)


def mha_spec(fp8_recipe=FP8_DPA, mask="causal"):
    layer = specs.multihead_attention_spec(
        HEADS * D, HEADS, D, GROUPS, True, "LayerNorm", 1e-5, False, mask,
        0.0, True, False)
    return specs.program_spec("MultiheadAttention", "bf16", "sbhd", SEQ,
                              BATCH, layer, fp8_recipe.to_spec())


def transformer_spec(fp8_recipe=FP8_DPA, mask="causal"):
    layer = specs.transformer_layer_spec(
        HEADS * D, 4 * HEADS * D, HEADS, D, GROUPS, 1e-5, "LayerNorm", False,
        "gelu", 0.0, 0.0, mask, True, False, False)
    return specs.program_spec("TransformerLayer", "bf16", "sbhd", SEQ, BATCH,
                              layer, fp8_recipe.to_spec())


class SpecKeysTest(unittest.TestCase):
    def test_recipe_key(self):
        self.assertTrue(dpa_spec()["recipe"]["fp8_dpa"])
        for build in (dpa_spec, mha_spec, transformer_spec):
            with self.subTest(build=build.__name__):
                plain = build(fp8_recipe=recipe.DelayedScaling(
                    amax_history_len=16))
                self.assertNotIn("fp8_dpa", plain["recipe"])
                with_dpa = build()
                self.assertEqual(with_dpa["recipe"],
                                 {**plain["recipe"], "fp8_dpa": True})
                # The layer itself does not change.
                self.assertEqual(with_dpa["layers"], plain["layers"])


@unittest.skipUnless(library_loads(), "libtejit.so is not available")
class CompiledSpecTest(unittest.TestCase):
    """The compiler with `fp8_dpa: true` (docs/fp8-attention.md): the
    attention becomes te.fp8_attention after te-place-scaling (and
    te.fp8_attention_bwd in training programs); without the key it stays
    te.attention. Needs a library with the compiler's fp8_dpa."""

    def scaled(self, spec, training=True):
        return tejit.compile_ir(spec, "scaled", training=training)

    def test_recipe_attribute(self):
        self.assertIn("fp8_dpa = true",
                      tejit.compile_ir(dpa_spec(), "autodiff"))
        plain = dpa_spec(fp8_recipe=recipe.DelayedScaling())
        self.assertNotIn("fp8_dpa", tejit.compile_ir(plain, "autodiff"))

    def test_dot_product_attention(self):
        for mask in ("no_mask", "causal", "padding", "padding_causal"):
            for dtype in ("bf16", "fp16"):
                for fmt in ("sbhd", "bshd"):
                    with self.subTest(mask=mask, dtype=dtype, fmt=fmt):
                        text = self.scaled(dpa_spec(mask=mask, dtype=dtype,
                                                    qkv_format=fmt))
                        self.assertIn("te.fp8_attention ", text)
                        self.assertIn("te.fp8_attention_bwd", text)
                        self.assertIn("te.dequantize", text)

    def test_head_dims(self):
        for d in (16, 128, 256):
            with self.subTest(d=d):
                self.assertIn("te.fp8_attention ",
                              self.scaled(dpa_spec(d=d)))

    def test_inference_program(self):
        text = self.scaled(dpa_spec(), training=False)
        self.assertIn("te.fp8_attention ", text)
        self.assertNotIn("te.fp8_attention_bwd", text)

    def test_blocks(self):
        for build in (mha_spec, transformer_spec):
            with self.subTest(build=build.__name__):
                text = self.scaled(build())
                self.assertIn("te.fp8_attention ", text)
                self.assertIn("te.fp8_attention_bwd", text)
                plain = self.scaled(build(
                    fp8_recipe=recipe.DelayedScaling()))
                self.assertNotIn("te.fp8_attention", plain)
                self.assertIn("te.scaled_matmul", plain)

    def test_without_fp8_dpa(self):
        text = self.scaled(dpa_spec(fp8_recipe=recipe.DelayedScaling()))
        self.assertNotIn("te.fp8_attention", text)
        self.assertNotIn("te.fp8_attention", self.scaled(dpa_spec(None)))

    def test_compiler_refusals(self):
        """What tejit.pytorch refuses before compiling, the compiler
        refuses too (a spec written by hand), naming the attribute (one of
        the words listed) and FP8 attention / fp8_dpa."""
        current = dpa_spec(fp8_recipe=None)
        current["recipe"] = {"type": "Float8CurrentScaling", "fp8_dpa": True}
        cases = {  # name: (spec, words one of which the message has)
            "window": (dpa_spec(window=(8, 0)), ("window",)),
            "bias": (dpa_spec(bias=("post_scale_bias", "1hss", False, None)),
                     ("bias",)),
            "alibi": (dpa_spec(bias=("alibi", None, False, "none")),
                      ("alibi",)),
            "head dim 72": (dpa_spec(d=72), ("kv_channels", "head")),
            "head dim 320": (dpa_spec(d=320), ("kv_channels", "head")),
            "dropout": (dpa_spec(dropout=0.1), ("dropout",)),
            "current scaling": (current, ("delayedscaling",)),
        }
        for name, (spec, words) in cases.items():
            with self.subTest(case=name):
                with self.assertRaises(tejit.TejitError) as caught:
                    self.scaled(spec)
                message = str(caught.exception).lower()
                self.assertNotIn("unknown key", message)
                self.assertIn("fp8", message)
                self.assertTrue(any(word in message for word in words),
                                message)


if HAVE_TORCH:
    import torch

    import tejit.pytorch as te
    from tejit.pytorch.module import base
    from test_pytorch_attention_bias import (OnTheCpu, dpa, hidden, layer,
                                             mha, qkv, recorder)
else:
    OnTheCpu = unittest.TestCase


class CompileReached(Exception):
    """Raised by captured_spec's stand-in for _compile."""


def captured_spec(module, *args, **kwargs):
    """The spec `module(*args, **kwargs)` would compile (its _compile
    replaced: nothing compiles)."""
    seen = []

    def capture(key, spec, shape):
        seen.append(spec)
        raise CompileReached()

    module._compile = capture
    try:
        module(*args, **kwargs)
    except CompileReached:
        return seen[0]
    raise AssertionError("the call did not reach _compile")


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ModuleRecipeTest(OnTheCpu):
    def test_dot_product_attention_takes_fp8_dpa_only(self):
        q, k, v = qkv()
        module = dpa(attn_mask_type="causal")
        with te.fp8_autocast(fp8_recipe=recipe.DelayedScaling()):
            self.assertNotIn("recipe", captured_spec(module, q, k, v))
        with te.fp8_autocast(fp8_recipe=FP8_DPA):
            spec = captured_spec(module, q, k, v)
        self.assertEqual(spec["recipe"], FP8_DPA.to_spec())
        self.assertEqual(spec["layers"][0]["type"], "DotProductAttention")
        with te.fp8_autocast(enabled=False, fp8_recipe=FP8_DPA):
            self.assertNotIn("recipe", captured_spec(module, q, k, v))

    def test_blocks_carry_fp8_dpa(self):
        for make in (mha, layer):
            with self.subTest(module=make.__name__):
                module = make(attn_mask_type="causal") if make is mha \
                    else make(self_attn_mask_type="causal")
                x = hidden()
                with te.fp8_autocast(fp8_recipe=FP8_DPA):
                    spec = captured_spec(module, x)
                self.assertTrue(spec["recipe"]["fp8_dpa"])
                with te.fp8_autocast(fp8_recipe=recipe.DelayedScaling(
                        amax_history_len=16)):
                    plain = captured_spec(module, x)
                self.assertNotIn("fp8_dpa", plain["recipe"])
                self.assertEqual(spec["layers"], plain["layers"])

    def test_only_attention_modules_carry_fp8_dpa(self):
        self.assertTrue(te.DotProductAttention._has_attention)
        self.assertTrue(te.MultiheadAttention._has_attention)
        self.assertTrue(te.TransformerLayer._has_attention)
        for cls in (te.Linear, te.LayerNormLinear, te.LayerNormMLP,
                    te.LayerNorm, te.GroupedLinear):
            self.assertFalse(cls._has_attention, cls.__name__)
        plain = base._recipe_spec(recipe.DelayedScaling(amax_history_len=16))
        # A program without an attention core compiles the recipe without
        # fp8_dpa: the same spec and JIT key.
        self.assertEqual(base._recipe_spec(FP8_DPA, fp8_attention=False),
                         plain)
        self.assertNotEqual(base._recipe_spec(FP8_DPA), plain)

    def test_kv_cache_steps_keep_their_attention(self):
        """A KV-cache step (inference_params) compiles its attention in
        the activation dtype: DotProductAttention without a recipe, the
        blocks with the recipe less fp8_dpa."""
        core, block = dpa(), mha()
        with te.fp8_autocast(fp8_recipe=FP8_DPA):
            self.assertIs(core._program_recipe(), FP8_DPA)
            self.assertIsNone(core._program_recipe(kv_cache=True))
            self.assertIs(block._program_recipe(kv_cache=True), FP8_DPA)
        with te.fp8_autocast(fp8_recipe=recipe.DelayedScaling()):
            self.assertIsNone(core._program_recipe())


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ModuleRefusalTest(OnTheCpu):
    """Under fp8_dpa each refusal comes before the program is looked up
    (the recorder sees no call) and names its argument; without fp8_dpa
    the same calls run."""

    def refused(self, module, args, kwargs, *words):
        seen = recorder(module)
        with te.fp8_autocast(fp8_recipe=FP8_DPA):
            with self.assertRaises(NotImplementedError) as caught:
                module(*args, **kwargs)
        self.assertEqual(seen, [])
        message = str(caught.exception)
        for word in (type(module).__name__, "FP8 attention") + words:
            self.assertIn(word, message)
        return seen

    def runs_without_fp8_dpa(self, module, args, kwargs):
        seen = recorder(module)
        with te.fp8_autocast(fp8_recipe=recipe.DelayedScaling()):
            module(*args, **kwargs)
        self.assertEqual(len(seen), 1)

    def test_dot_product_attention(self):
        q, k, v = qkv()
        bias = torch.randn(1, 4, q.shape[0], q.shape[0])
        arbitrary = torch.rand(2, 1, q.shape[0], q.shape[0]) > 0.5
        cases = {
            "post_scale_bias": (dpa(), {
                "core_attention_bias_type": "post_scale_bias",
                "core_attention_bias": bias}),
            "pre_scale_bias": (dpa(), {
                "core_attention_bias_type": "pre_scale_bias",
                "core_attention_bias": bias}),
            "alibi": (dpa(attn_mask_type="causal"),
                      {"core_attention_bias_type": "alibi"}),
            "arbitrary": (dpa(attn_mask_type="arbitrary"),
                          {"attention_mask": arbitrary}),
            "window_size": (dpa(attn_mask_type="causal", window_size=(8, 0)),
                            {}),
        }
        cases["attention_dropout=0.1"] = (dpa(attention_dropout=0.1), {})
        for word, (module, kwargs) in cases.items():
            with self.subTest(argument=word):
                self.refused(module, (q, k, v), kwargs, word)
                self.runs_without_fp8_dpa(module, (q, k, v), kwargs)
        # A forward's own window and mask type.
        module = dpa(attn_mask_type="causal")
        self.refused(module, (q, k, v), {"window_size": (4, 0)},
                     "window_size=(4, 0)")
        self.refused(module, (q, k, v), {"attn_mask_type": "arbitrary",
                                         "attention_mask": arbitrary},
                     "arbitrary")

    def test_thd_and_head_dims(self):
        tokens = torch.randn(16, 4, 64)
        cu = torch.tensor([0, 8, 16], dtype=torch.int32)
        self.refused(te.DotProductAttention(4, 64, qkv_format="thd",
                                            attn_mask_type="padding"),
                     (tokens, tokens, tokens),
                     {"cu_seqlens_q": cu, "cu_seqlens_kv": cu}, "'thd'")
        for d in (72, 320):
            with self.subTest(kv_channels=d):
                q = torch.randn(SEQ, BATCH, 4, d, dtype=torch.bfloat16)
                module = te.DotProductAttention(4, d,
                                                attn_mask_type="causal")
                self.refused(module, (q, q, q), {}, f"kv_channels={d}")
                self.runs_without_fp8_dpa(module, (q, q, q), {})

    def test_blocks(self):
        x = hidden()
        bias = torch.randn(1, 4, x.shape[0], x.shape[0])
        arbitrary = torch.rand(2, 1, x.shape[0], x.shape[0]) > 0.5
        for make, mask_argument in ((mha, "attn_mask_type"),
                                    (layer, "self_attn_mask_type")):
            cases = {
                "post_scale_bias": ({}, {
                    "core_attention_bias_type": "post_scale_bias",
                    "core_attention_bias": bias}),
                "alibi": ({}, {"core_attention_bias_type": "alibi"}),
                "arbitrary": ({mask_argument: "arbitrary"},
                              {"attention_mask": arbitrary}),
                "window_size=(16, 0)": ({mask_argument: "causal",
                                         "window_size": (16, 0)}, {}),
                "attention_dropout=0.1": ({"attention_dropout": 0.1}, {}),
            }
            for word, (constructor, kwargs) in cases.items():
                with self.subTest(module=make.__name__, argument=word):
                    module = make(**constructor)
                    self.refused(module, (x,), kwargs, word)
                    self.runs_without_fp8_dpa(module, (x,), kwargs)
        packed = (torch.randn(32, x.shape[-1], dtype=torch.bfloat16),)
        cu = {"cu_seqlens_q": torch.tensor([0, 16, 32], dtype=torch.int32)}
        self.refused(mha(qkv_format="thd", attn_mask_type="padding"),
                     packed, cu, "qkv_format='thd'")
        self.refused(layer(attn_input_format="thd",
                           self_attn_mask_type="padding"),
                     packed, cu, "attn_input_format='thd'")
        self.refused(mha(kv_channels=72), (x,), {}, "kv_channels=72")


if __name__ == "__main__":
    unittest.main()
