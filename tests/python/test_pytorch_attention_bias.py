"""tejit.pytorch's attention bias and ALiBi (docs/attention-bias.md) on the
CPU, nothing compiled or run: what DotProductAttention, MultiheadAttention
and TransformerLayer hand their program for TE's core_attention_bias_type /
core_attention_bias / alibi_slopes (_run_program replaced by a recorder):
the inputs `core_attention_bias` (cast to the activation dtype, gradient
back through the cast, pre_scale_bias times the softmax scale) and
`alibi_slopes`, the spec keys and the program key (type, bias shape,
requires grad, slopes), arbitrary masks turned into a -10000 bias with the
no_mask type (alone and with a bias, the gradient of the combined bias),
and every refusal, each naming its argument. CompiledSpecTest compiles the
recorded specs (tejit's compiler with the bias spec keys). Needs PyTorch
(skipped without it; test_attention_bias_specs.py checks the spec
builders without it). Run: python3 -m pytest tests/python"""
import math
import re
import unittest

from torch_free import HAVE_TORCH, RefusalAssertions

if HAVE_TORCH:
    import torch

    import tejit
    import tejit.pytorch as te
    from tejit.pytorch.module import _attention_specs, _bias, attention

CPU = "cpu"
HEADS, GROUPS, D, SEQ, BATCH = 4, 2, 16, 8, 2
_ARGUMENT = re.compile(r'%arg\d+: tensor<([^>]*)> \{te\.name = "([^"]+)"')
_RESULT = re.compile(r'tensor<([^>]*)> \{[^}]*te\.name = "([^"]+)"')


def recorder(module):
    """Replaces module._run_program: returns the list every call appends
    {shape_key, dtype, variant, spec (the layer's), activations} to."""
    seen = []

    def capture(activations, dtype, shape_key, shape_spec, shape,
                layer_spec=None, variant=(), is_first_microbatch=None,
                inference_only=False):
        seen.append({"shape_key": shape_key, "dtype": dtype,
                     "variant": variant, "shape_spec": shape_spec,
                     "spec": layer_spec(), "activations": activations})
        out = torch.zeros(1)
        return {"output": out, "ln_output": out}

    module._run_program = capture
    return seen


class OnTheCpu(RefusalAssertions, unittest.TestCase):
    """check_input takes CPU tensors (no CUDA here) during each test."""

    def setUp(self):
        self._check_input = attention.check_input
        attention.check_input = lambda *args: None

    def tearDown(self):
        attention.check_input = self._check_input


def qkv(dtype=None, seq=SEQ, seq_kv=None, fmt="sbhd"):
    dtype = dtype or torch.bfloat16
    seq_kv = seq_kv or seq
    lead_q = (seq, BATCH) if fmt == "sbhd" else (BATCH, seq)
    lead_kv = (seq_kv, BATCH) if fmt == "sbhd" else (BATCH, seq_kv)
    return (torch.randn(*lead_q, HEADS, D, dtype=dtype),
            torch.randn(*lead_kv, GROUPS, D, dtype=dtype),
            torch.randn(*lead_kv, GROUPS, D, dtype=dtype))


def dpa(**kwargs):
    kwargs.setdefault("attn_mask_type", "no_mask")
    return te.DotProductAttention(HEADS, D, num_gqa_groups=GROUPS, **kwargs)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class DotProductAttentionBiasTest(OnTheCpu):
    def call(self, module, *args, **kwargs):
        seen = recorder(module)
        module(*args, **kwargs)
        return seen[-1]

    def test_post_scale_bias_shapes(self):
        q, k, v = qkv()
        module = dpa()
        for dims, code in (((1, HEADS), "1hss"), ((BATCH, 1), "b1ss"),
                           ((BATCH, HEADS), "bhss"), ((1, 1), "11ss")):
            with self.subTest(code=code):
                bias = torch.randn(*dims, SEQ, SEQ)  # float32: cast
                got = self.call(module, q, k, v,
                                core_attention_bias_type="post_scale_bias",
                                core_attention_bias=bias)
                passed = got["activations"]["core_attention_bias"]
                self.assertEqual(passed.dtype, torch.bfloat16)
                self.assertTrue(passed.is_contiguous())
                self.assertTrue(torch.equal(passed, bias.to(torch.bfloat16)))
                key = ("post_scale_bias", code, False, None)
                self.assertEqual(got["variant"],
                                 ("no_mask", False, (-1, -1), False, key))
                layer = got["spec"]
                self.assertEqual(layer["core_attention_bias_type"],
                                 "post_scale_bias")
                self.assertEqual(layer["bias_shape"], code)
                self.assertNotIn("bias_requires_grad", layer)
                self.assertNotIn("alibi_slopes", layer)
                self.assertEqual(layer["attn_mask_type"], "no_mask")

    def test_no_bias_keeps_the_program_key(self):
        q, k, v = qkv()
        module = dpa(attn_mask_type="causal")
        plain = self.call(module, q, k, v)
        explicit = self.call(module, q, k, v,
                             core_attention_bias_type="no_bias")
        for got in (plain, explicit):
            self.assertEqual(got["variant"],
                             ("causal", False, (-1, 0), False))
            self.assertEqual(sorted(got["activations"]),
                             ["key", "query", "value"])
            self.assertNotIn("core_attention_bias_type", got["spec"])

    def test_bias_gradient_of_the_1hss_shape(self):
        """A 1hss bias that requires grad: bias_requires_grad in the spec
        and the key; the program's input carries autograd back to the
        float32 leaf through the cast."""
        q, k, v = qkv()
        bias = torch.randn(1, HEADS, SEQ, SEQ, requires_grad=True)
        module = dpa(attn_mask_type="causal")
        got = self.call(module, q, k, v,
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=bias)
        self.assertEqual(got["variant"][-1],
                         ("post_scale_bias", "1hss", True, None))
        self.assertTrue(got["spec"]["bias_requires_grad"])
        passed = got["activations"]["core_attention_bias"]
        self.assertEqual(passed.dtype, torch.bfloat16)
        self.assertTrue(passed.requires_grad)
        (passed.float() * 3).sum().backward()
        self.assertEqual(bias.grad.dtype, torch.float32)
        self.assertTrue(torch.equal(bias.grad, torch.full_like(bias, 3.0)))
        # Without grad mode no gradient is asked for: another program.
        with torch.no_grad():
            got = self.call(module, q, k, v,
                            core_attention_bias_type="post_scale_bias",
                            core_attention_bias=bias)
        self.assertEqual(got["variant"][-1],
                         ("post_scale_bias", "1hss", False, None))
        self.assertNotIn("bias_requires_grad", got["spec"])

    def test_pre_scale_bias(self):
        """pre_scale_bias: bias * softmax_scale as a post-scale bias (one
        program with post_scale_bias), gradient through the multiply."""
        q, k, v = qkv()
        bias = torch.randn(1, HEADS, SEQ, SEQ, requires_grad=True)
        module = dpa(softmax_scale=0.5)
        got = self.call(module, q, k, v,
                        core_attention_bias_type="pre_scale_bias",
                        core_attention_bias=bias)
        passed = got["activations"]["core_attention_bias"]
        self.assertTrue(torch.equal(
            passed, (bias.detach() * 0.5).to(torch.bfloat16)))
        self.assertEqual(got["variant"][-1],
                         ("post_scale_bias", "1hss", True, None))
        self.assertEqual(got["spec"]["core_attention_bias_type"],
                         "post_scale_bias")
        passed.float().sum().backward()
        self.assertTrue(torch.equal(bias.grad, torch.full_like(bias, 0.5)))
        default = dpa()  # softmax_scale 1/sqrt(kv_channels)
        got = self.call(default, q, k, v,
                        core_attention_bias_type="pre_scale_bias",
                        core_attention_bias=bias.detach())
        self.assertTrue(torch.equal(
            got["activations"]["core_attention_bias"],
            (bias.detach() / math.sqrt(D)).to(torch.bfloat16)))

    def test_alibi(self):
        q, k, v = qkv()
        module = dpa(attn_mask_type="causal")
        got = self.call(module, q, k, v, core_attention_bias_type="alibi")
        self.assertEqual(sorted(got["activations"]),
                         ["key", "query", "value"])
        self.assertEqual(got["variant"][-1], ("alibi", None, False, "none"))
        self.assertEqual(got["spec"]["core_attention_bias_type"], "alibi")
        self.assertEqual(got["spec"]["alibi_slopes"], "none")
        self.assertNotIn("bias_shape", got["spec"])
        slopes = torch.rand(HEADS, requires_grad=True)
        got = self.call(module, q, k, v, core_attention_bias_type="alibi",
                        alibi_slopes=slopes)
        passed = got["activations"]["alibi_slopes"]
        self.assertTrue(torch.equal(passed, slopes.detach()))
        self.assertEqual(passed.dtype, torch.float32)
        self.assertFalse(passed.requires_grad)  # no gradient
        self.assertEqual(got["variant"][-1], ("alibi", None, False, "heads"))
        self.assertEqual(got["spec"]["alibi_slopes"], "heads")
        # Per-batch slopes (batch > 1): the ALiBi bias itself, [b, h, s, s]
        # (the runtime refuses per-batch slopes: cuDNN reads them wrong).
        slopes = torch.rand(BATCH, HEADS)
        got = self.call(module, q, k, v, core_attention_bias_type="alibi",
                        alibi_slopes=slopes)
        self.assertEqual(got["variant"][-1],
                         ("post_scale_bias", "bhss", False, None))
        passed = got["activations"]["core_attention_bias"]
        i = torch.arange(SEQ).view(-1, 1)
        j = torch.arange(SEQ).view(1, -1)
        expected = -slopes.view(BATCH, HEADS, 1, 1) * (i - j).abs()
        self.assertTrue(torch.allclose(passed.float(), expected, rtol=1e-2,
                                       atol=1e-2))

    def test_layouts_gqa_and_cross_attention(self):
        """bshd, and keys of another length: the bias is [.., s_q, s_kv];
        the key and spec as in sbhd self-attention."""
        q, k, v = qkv(fmt="bshd", seq=8, seq_kv=12)
        module = dpa(qkv_format="bshd", attention_type="cross")
        bias = torch.randn(BATCH, HEADS, 8, 12, dtype=torch.bfloat16)
        got = self.call(module, q, k, v,
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=bias)
        self.assertIs(got["activations"]["core_attention_bias"], bias)
        self.assertEqual(got["shape_key"], ("bshd", 8, BATCH, 12))
        self.assertEqual(got["spec"]["kv_seq_length"], 12)
        self.assertEqual(got["spec"]["bias_shape"], "bhss")
        got = self.call(module, q, k, v, core_attention_bias_type="alibi",
                        alibi_slopes=torch.rand(HEADS))
        self.assertEqual(got["variant"][-1], ("alibi", None, False, "heads"))
        self.assertRefused(
            ValueError, lambda: self.call(
                module, q, k, v, core_attention_bias_type="post_scale_bias",
                core_attention_bias=torch.randn(1, HEADS, 8, 8)),
            "core_attention_bias", "[1|2, 1|4, 8, 12]", "[1, 4, 8, 8]")

    def test_with_padding_masks(self):
        q, k, v = qkv()
        module = dpa(attn_mask_type="padding_causal")
        mask = torch.zeros(BATCH, 1, 1, SEQ, dtype=torch.bool)
        got = self.call(module, q, k, v, attention_mask=mask,
                        core_attention_bias_type="alibi")
        self.assertEqual(sorted(got["activations"]),
                         ["attention_mask", "key", "query", "value"])
        self.assertEqual(got["variant"][0], "padding_causal")
        self.assertEqual(got["spec"]["attn_mask_type"], "padding_causal")

    def test_arbitrary_mask_becomes_a_bias(self):
        q, k, v = qkv()
        module = dpa(attn_mask_type="arbitrary")
        mask = torch.rand(BATCH, 1, SEQ, SEQ) > 0.5
        got = self.call(module, q, k, v, attention_mask=mask)
        passed = got["activations"]["core_attention_bias"]
        self.assertEqual(sorted(got["activations"]),
                         ["core_attention_bias", "key", "query", "value"])
        self.assertEqual(passed.dtype, torch.bfloat16)
        self.assertEqual(_bias.ARBITRARY_MASK_FILL, -10000.0)  # TE's
        want = torch.zeros(BATCH, 1, SEQ, SEQ).masked_fill(mask, -10000.0)
        self.assertTrue(torch.equal(passed, want.to(torch.bfloat16)))
        self.assertFalse(passed.requires_grad)
        self.assertEqual(got["variant"],
                         ("no_mask", False, (-1, -1), False,
                          ("post_scale_bias", "b1ss", False, None)))
        self.assertEqual(got["spec"]["attn_mask_type"], "no_mask")
        self.assertEqual(got["spec"]["bias_shape"], "b1ss")
        # A [s, s] mask broadcasts (11ss); a [1, h, s, s] one is 1hss.
        got = self.call(module, q, k, v, attention_mask=mask[0, 0])
        self.assertEqual(got["spec"]["bias_shape"], "11ss")
        heads = torch.rand(1, HEADS, SEQ, SEQ) > 0.5
        got = self.call(module, q, k, v, attention_mask=heads)
        self.assertEqual(got["spec"]["bias_shape"], "1hss")
        # The forward's mask type too (TE's override).
        got = self.call(dpa(attn_mask_type="causal"), q, k, v,
                        attn_mask_type="arbitrary", attention_mask=mask)
        self.assertEqual(got["variant"][0], "no_mask")
        # Keys of another length: [b, 1, s_q, s_kv].
        q8, k5, v5 = qkv(seq=8, seq_kv=5)
        cross = dpa(attn_mask_type="arbitrary", attention_type="cross")
        got = self.call(cross, q8, k5, v5,
                        attention_mask=torch.zeros(BATCH, 1, 8, 5,
                                                   dtype=torch.bool))
        self.assertEqual(
            tuple(got["activations"]["core_attention_bias"].shape),
            (BATCH, 1, 8, 5))
        self.assertEqual(got["spec"]["kv_seq_length"], 5)

    def test_arbitrary_mask_with_a_bias(self):
        """The mask's -10000 added to the caller's bias: the broadcast
        shape; a gradient for the caller's bias when that shape is 1hss,
        summed back over what the bias broadcast."""
        q, k, v = qkv()
        module = dpa(attn_mask_type="arbitrary")
        mask = torch.rand(BATCH, 1, SEQ, SEQ) > 0.5
        bias = torch.randn(1, HEADS, SEQ, SEQ)
        got = self.call(module, q, k, v, attention_mask=mask,
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=bias)
        passed = got["activations"]["core_attention_bias"]
        self.assertEqual(tuple(passed.shape), (BATCH, HEADS, SEQ, SEQ))
        want = (bias.to(torch.bfloat16) + torch.zeros(
            BATCH, 1, SEQ, SEQ, dtype=torch.bfloat16).masked_fill(
                mask, -10000.0))
        self.assertTrue(torch.equal(passed, want))
        self.assertEqual(got["variant"][-1],
                         ("post_scale_bias", "bhss", False, None))
        # A mask the same for every sequence keeps a 1hss bias, which
        # takes its gradient (none through the mask).
        shared = mask[:1]
        bias.requires_grad_()
        got = self.call(module, q, k, v, attention_mask=shared,
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=bias)
        passed = got["activations"]["core_attention_bias"]
        self.assertEqual(got["variant"][-1],
                         ("post_scale_bias", "1hss", True, None))
        passed.float().sum().backward()
        self.assertTrue(torch.equal(bias.grad, torch.ones_like(bias)))
        # An 11ss bias that requires grad with a [1, h] mask: 1hss, the
        # gradient summed over the heads.
        small = torch.randn(1, 1, SEQ, SEQ, requires_grad=True)
        got = self.call(module, q, k, v,
                        attention_mask=torch.rand(1, HEADS, SEQ, SEQ) > 0.5,
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=small)
        got["activations"]["core_attention_bias"].float().sum().backward()
        self.assertTrue(torch.equal(small.grad,
                                    torch.full_like(small, HEADS)))
        # Per-sequence masks make it bhss: no gradient there, said so.
        message = self.assertRefused(
            NotImplementedError, lambda: self.call(
                module, q, k, v, attention_mask=mask,
                core_attention_bias_type="post_scale_bias",
                core_attention_bias=bias),
            "core_attention_bias", "[1, 4, 8, 8]", "[2, 4, 8, 8]", "bhss",
            "1hss", "arbitrary")
        self.assertIn("requires grad", message)
        # Without grad mode it runs.
        with torch.no_grad():
            got = self.call(module, q, k, v, attention_mask=mask,
                            core_attention_bias_type="post_scale_bias",
                            core_attention_bias=bias)
        self.assertEqual(got["variant"][-1],
                         ("post_scale_bias", "bhss", False, None))

    def test_refusals(self):
        q, k, v = qkv()
        module = dpa()
        bias = torch.randn(1, HEADS, SEQ, SEQ)

        def call(**kwargs):
            return lambda: self.call(module, q, k, v, **kwargs)
        post = dict(core_attention_bias_type="post_scale_bias")
        cases = [
            (ValueError, call(core_attention_bias_type="relative"),
             ("core_attention_bias_type", "'relative'", "post_scale_bias")),
            (ValueError, call(core_attention_bias=bias),
             ("core_attention_bias", "'no_bias'", "post_scale_bias")),
            (ValueError, call(core_attention_bias_type="alibi",
                              core_attention_bias=bias),
             ("core_attention_bias", "'alibi'")),
            (ValueError, call(**post), ("'post_scale_bias'", "needs",
                                        "core_attention_bias")),
            (ValueError, call(core_attention_bias_type="pre_scale_bias"),
             ("'pre_scale_bias'", "needs", "core_attention_bias")),
            (ValueError, call(alibi_slopes=torch.rand(HEADS)),
             ("alibi_slopes", "'alibi'")),
            (ValueError, call(core_attention_bias_type="post_scale_bias",
                              core_attention_bias=bias,
                              alibi_slopes=torch.rand(HEADS)),
             ("alibi_slopes", "'post_scale_bias'")),
            (ValueError, call(core_attention_bias=torch.randn(
                3, HEADS, SEQ, SEQ), **post),
             ("core_attention_bias", "[1|2, 1|4, 8, 8]", "[3, 4, 8, 8]")),
            (ValueError, call(core_attention_bias=torch.randn(
                1, 2, SEQ, SEQ), **post),
             ("core_attention_bias", "[1|2, 1|4, 8, 8]", "[1, 2, 8, 8]")),
            (ValueError, call(core_attention_bias=torch.randn(
                HEADS, SEQ, SEQ), **post),
             ("core_attention_bias", "[4, 8, 8]")),
            (ValueError, call(core_attention_bias=torch.randn(
                1, HEADS, SEQ, SEQ + 1), **post),
             ("core_attention_bias", "[1, 4, 8, 9]")),
            (TypeError, call(core_attention_bias=torch.ones(
                1, HEADS, SEQ, SEQ, dtype=torch.int32), **post),
             ("core_attention_bias", "floating")),
            (TypeError, call(core_attention_bias=[[0.0]], **post),
             ("core_attention_bias", "torch.Tensor")),
            (NotImplementedError, call(core_attention_bias=torch.randn(
                BATCH, 1, SEQ, SEQ, requires_grad=True), **post),
             ("core_attention_bias", "b1ss", "requires grad", "1hss",
              "[1, 4, 8, 8]")),
            (NotImplementedError, call(core_attention_bias=torch.randn(
                1, 1, SEQ, SEQ, requires_grad=True), **post),
             ("core_attention_bias", "11ss", "requires grad")),
            (NotImplementedError, call(
                core_attention_bias_type="pre_scale_bias",
                core_attention_bias=torch.randn(
                    BATCH, HEADS, SEQ, SEQ, requires_grad=True)),
             ("core_attention_bias", "bhss", "requires grad")),
            (TypeError, call(core_attention_bias_type="alibi",
                             alibi_slopes=torch.rand(HEADS,
                                                     dtype=torch.float64)),
             ("alibi_slopes", "float32")),
            (TypeError, call(core_attention_bias_type="alibi",
                             alibi_slopes=[0.5] * HEADS),
             ("alibi_slopes", "torch.Tensor")),
            (ValueError, call(core_attention_bias_type="alibi",
                              alibi_slopes=torch.rand(HEADS + 1)),
             ("alibi_slopes", "[4]", "[2, 4]", "[5]")),
            (ValueError, call(core_attention_bias_type="alibi",
                              alibi_slopes=torch.rand(3, HEADS)),
             ("alibi_slopes", "[3, 4]")),
            (NotImplementedError, call(core_attention_bias_type="alibi",
                                       attn_mask_type="arbitrary",
                                       attention_mask=torch.zeros(
                                           BATCH, 1, SEQ, SEQ,
                                           dtype=torch.bool)),
             ("core_attention_bias_type='alibi'", "arbitrary")),
            (ValueError, call(attn_mask_type="arbitrary"),
             ("arbitrary", "attention_mask")),
            (ValueError, call(attn_mask_type="arbitrary",
                              attention_mask=torch.zeros(
                                  BATCH, 2, SEQ, SEQ, dtype=torch.bool)),
             ("arbitrary attention_mask", "[1|2, 1|4, 8, 8]")),
            (TypeError, call(attn_mask_type="arbitrary",
                             attention_mask=torch.zeros(BATCH, 1, SEQ, SEQ)),
             ("attention_mask", "torch.bool")),
        ]
        for error, thunk, words in cases:
            with self.subTest(words=words):
                self.assertRefused(error, thunk, *words)

    def test_devices_are_checked(self):
        """A bias or slopes on another device than the input: refused
        (the device compared; here a meta tensor stands for it)."""
        q, k, v = qkv()
        module = dpa()
        self.assertRefused(
            ValueError, lambda: self.call(
                module, q, k, v, core_attention_bias_type="post_scale_bias",
                core_attention_bias=torch.empty(1, HEADS, SEQ, SEQ,
                                                device="meta")),
            "core_attention_bias", "meta")
        self.assertRefused(
            ValueError, lambda: self.call(
                module, q, k, v, core_attention_bias_type="alibi",
                alibi_slopes=torch.empty(HEADS, device="meta")),
            "alibi_slopes", "meta")

    def test_thd_and_kv_cache_refuse_a_bias(self):
        module = dpa(attn_mask_type="padding", qkv_format="thd")
        q = torch.randn(16, HEADS, D, dtype=torch.bfloat16)
        kv = torch.randn(16, GROUPS, D, dtype=torch.bfloat16)
        cu = torch.tensor([0, 8, 16], dtype=torch.int32)
        for kwargs, word in (
                (dict(core_attention_bias_type="alibi"),
                 "core_attention_bias_type='alibi'"),
                (dict(core_attention_bias=torch.randn(1, HEADS, 8, 8)),
                 "core_attention_bias"),
                (dict(alibi_slopes=torch.rand(HEADS)), "alibi_slopes")):
            with self.subTest(word=word):
                self.assertRefused(
                    NotImplementedError, lambda: self.call(
                        module, q, kv, kv, cu_seqlens_q=cu, cu_seqlens_kv=cu,
                        **kwargs),
                    "DotProductAttention.forward", word, "thd")
                self.assertRefused(
                    NotImplementedError, lambda: self.call(
                        dpa(), *qkv(), inference_params=object(), **kwargs),
                    "DotProductAttention.forward", word, "inference_params")


def mha(**kwargs):
    kwargs.setdefault("attn_mask_type", "no_mask")
    kwargs.setdefault("attention_dropout", 0.0)
    return te.MultiheadAttention(HEADS * D, HEADS, num_gqa_groups=GROUPS,
                                 input_layernorm=True,
                                 params_dtype=torch.bfloat16, device=CPU,
                                 **kwargs)


def layer(**kwargs):
    kwargs.setdefault("self_attn_mask_type", "no_mask")
    kwargs.setdefault("attention_dropout", 0.0)
    kwargs.setdefault("hidden_dropout", 0.0)
    return te.TransformerLayer(HEADS * D, 4 * HEADS * D, HEADS,
                               num_gqa_groups=GROUPS,
                               params_dtype=torch.bfloat16, device=CPU,
                               **kwargs)


def hidden(seq=SEQ, fmt="sbhd"):
    lead = (seq, BATCH) if fmt == "sbhd" else (BATCH, seq)
    return torch.randn(*lead, HEADS * D, dtype=torch.bfloat16)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class BlockBiasTest(OnTheCpu):
    """MultiheadAttention and TransformerLayer pass TE's bias arguments
    to the attention of their program."""

    def call(self, module, *args, **kwargs):
        seen = recorder(module)
        module(*args, **kwargs)
        return seen[-1]

    def test_relative_bias_and_alibi(self):
        for make, mask_key in ((mha, "attn_mask_type"),
                               (layer, "self_attn_mask_type")):
            module = make()
            with self.subTest(module=type(module).__name__):
                bias = torch.randn(1, HEADS, SEQ, SEQ, requires_grad=True)
                got = self.call(module, hidden(),
                                core_attention_bias_type="post_scale_bias",
                                core_attention_bias=bias)
                passed = got["activations"]["core_attention_bias"]
                self.assertEqual(passed.dtype, torch.bfloat16)
                self.assertEqual(got["variant"][-1],
                                 ("post_scale_bias", "1hss", True, None))
                self.assertEqual(len(got["variant"]), 7)
                spec = got["spec"]
                self.assertEqual((spec["core_attention_bias_type"],
                                  spec["bias_shape"],
                                  spec["bias_requires_grad"]),
                                 ("post_scale_bias", "1hss", True))
                passed.float().sum().backward()
                self.assertTrue(torch.equal(bias.grad,
                                            torch.ones_like(bias)))
                got = self.call(module, hidden(),
                                core_attention_bias_type="alibi",
                                alibi_slopes=torch.rand(HEADS))
                self.assertEqual(got["variant"][-1],
                                 ("alibi", None, False, "heads"))
                self.assertEqual(got["spec"]["alibi_slopes"], "heads")
                self.assertIn("alibi_slopes", got["activations"])
                got = self.call(module, hidden())
                self.assertEqual(len(got["variant"]), 6)
                self.assertNotIn("core_attention_bias_type", got["spec"])
                # pre_scale_bias with the attention's scale, 1/sqrt(d).
                got = self.call(module, hidden(),
                                core_attention_bias_type="pre_scale_bias",
                                core_attention_bias=bias.detach())
                self.assertTrue(torch.equal(
                    got["activations"]["core_attention_bias"],
                    (bias.detach() / math.sqrt(D)).to(torch.bfloat16)))
                # An arbitrary mask: the no_mask program with its bias.
                mask = torch.rand(BATCH, 1, SEQ, SEQ) > 0.5
                got = self.call(module, hidden(),
                                **{mask_key: "arbitrary"},
                                attention_mask=mask)
                self.assertEqual(got["variant"][0], "no_mask")
                self.assertEqual(got["spec"][mask_key], "no_mask")
                self.assertEqual(got["spec"]["bias_shape"], "b1ss")
                self.assertNotIn("attention_mask", got["activations"])
                # bshd: the same bias.
                got = self.call(make(**({"qkv_format": "bshd"}
                                        if make is mha else
                                        {"attn_input_format": "bshd"})),
                                hidden(fmt="bshd"),
                                core_attention_bias_type="post_scale_bias",
                                core_attention_bias=bias.detach())
                self.assertEqual(got["spec"]["bias_shape"], "1hss")

    def test_cross_attention_blocks(self):
        """A cross MultiheadAttention's bias is its cross-attention's [..,
        s_q, s_kv]; a decoder TransformerLayer's its self-attention's."""
        enc = torch.randn(12, BATCH, HEADS * D, dtype=torch.bfloat16)
        cross = mha(attention_type="cross")
        got = self.call(cross, hidden(), encoder_output=enc,
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=torch.randn(1, HEADS, SEQ, 12))
        self.assertEqual(got["spec"]["bias_shape"], "1hss")
        self.assertEqual(got["spec"]["kv_seq_length"], 12)
        self.assertRefused(
            ValueError, lambda: self.call(
                cross, hidden(), encoder_output=enc,
                core_attention_bias_type="post_scale_bias",
                core_attention_bias=torch.randn(1, HEADS, SEQ, SEQ)),
            "core_attention_bias", "[1|2, 1|4, 8, 12]")
        decoder = layer(layer_type="decoder")
        got = self.call(decoder, hidden(), encoder_output=enc,
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=torch.randn(BATCH, 1, SEQ, SEQ))
        self.assertEqual(got["spec"]["bias_shape"], "b1ss")
        self.assertEqual(got["spec"]["layer_type"], "decoder")
        self.assertEqual(got["spec"]["enc_dec_attn_mask_type"], "no_mask")
        got = self.call(decoder, hidden(), encoder_output=enc,
                        core_attention_bias_type="alibi")
        self.assertEqual(got["spec"]["core_attention_bias_type"], "alibi")
        # The self-attention's arbitrary mask: its no_mask program with
        # the mask's bias.
        got = self.call(decoder, hidden(), encoder_output=enc,
                        self_attn_mask_type="arbitrary",
                        attention_mask=torch.zeros(SEQ, SEQ,
                                                   dtype=torch.bool))
        self.assertEqual(got["spec"]["self_attn_mask_type"], "no_mask")
        self.assertEqual(got["spec"]["bias_shape"], "11ss")
        self.assertEqual(
            tuple(got["activations"]["core_attention_bias"].shape),
            (1, 1, SEQ, SEQ))

    def test_refusals(self):
        for make in (mha, layer):
            module = make()
            owner = type(module).__name__
            with self.subTest(module=owner):
                self.assertRefused(
                    ValueError, lambda: self.call(
                        module, hidden(),
                        core_attention_bias_type="post_scale_bias"),
                    owner, "core_attention_bias")
                self.assertRefused(
                    ValueError, lambda: self.call(
                        module, hidden(), alibi_slopes=torch.rand(HEADS)),
                    owner, "alibi_slopes", "'alibi'")
                self.assertRefused(
                    NotImplementedError, lambda: self.call(
                        module, hidden(),
                        core_attention_bias_type="post_scale_bias",
                        core_attention_bias=torch.randn(
                            BATCH, HEADS, SEQ, SEQ, requires_grad=True)),
                    owner, "core_attention_bias", "bhss", "requires grad")
                self.assertRefused(
                    NotImplementedError, lambda: self.call(
                        module, hidden(), core_attention_bias_type="alibi",
                        inference_params=object()),
                    f"{owner}.forward", "core_attention_bias_type='alibi'",
                    "inference_params")
                packed = make(**({"qkv_format": "thd",
                                  "attn_mask_type": "padding"}
                                 if make is mha else
                                 {"attn_input_format": "thd",
                                  "self_attn_mask_type": "padding"}))
                self.assertRefused(
                    NotImplementedError, lambda: self.call(
                        packed, torch.randn(16, HEADS * D,
                                            dtype=torch.bfloat16),
                        cu_seqlens_q=torch.tensor([0, 8, 16],
                                                  dtype=torch.int32),
                        core_attention_bias=torch.randn(1, HEADS, 8, 8),
                        core_attention_bias_type="post_scale_bias"),
                    f"{owner}.forward", "core_attention_bias", "thd")
        # Tensor parallelism: refused (the bias's heads would be this
        # rank's; not supported here yet).
        parallel = te.MultiheadAttention(HEADS * D, HEADS, tp_size=2,
                                         set_parallel_mode=True,
                                         attn_mask_type="no_mask",
                                         params_dtype=torch.bfloat16,
                                         device=CPU)
        for kwargs, word in ((dict(core_attention_bias_type="alibi"),
                              "core_attention_bias_type='alibi'"),
                             (dict(attn_mask_type="arbitrary",
                                   attention_mask=torch.zeros(
                                       SEQ, SEQ, dtype=torch.bool)),
                              "attn_mask_type='arbitrary'")):
            with self.subTest(word=word):
                self.assertRefused(
                    NotImplementedError,
                    lambda: self.call(parallel, hidden(), **kwargs),
                    "MultiheadAttention.forward", word, "tp_size 2")


def arguments_of(layer_spec, name, fmt="sbhd", seq=SEQ, batch=BATCH,
                 training=True):
    """({forward argument: shape string}, {backward result: shape string})
    of the program of `layer_spec`."""
    spec = _attention_specs.program_spec(name, "bf16", fmt, seq, batch,
                                         layer_spec)
    text = tejit.compile_ir(spec, "autodiff", training=training)
    forward, backward = {}, {}
    for line in text.splitlines():
        if "func.func" not in line:
            continue
        if "_backward" in line:
            results = line.split(") -> (")[1]
            backward = {n: s for s, n in _RESULT.findall(results)}
        else:
            header = line.split(") -> (")[0]
            forward = {n: s for s, n in _ARGUMENT.findall(header)}
    return forward, backward


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class CompiledSpecTest(OnTheCpu):
    """The specs the modules record compile (tejit's compiler with the
    bias keys): the program takes the inputs the module supplies, of
    their shapes, and has the bias's gradient exactly when asked for."""

    def record(self, module, *args, **kwargs):
        seen = recorder(module)
        module(*args, **kwargs)
        got = seen[-1]
        return got, {name: "x".join(str(d) for d in tensor.shape) +
                     "x" + {torch.bfloat16: "bf16", torch.float32: "f32",
                            torch.bool: "i1"}[tensor.dtype]
                     for name, tensor in got["activations"].items()}

    def test_dot_product_attention(self):
        q, k, v = qkv()
        for kwargs in (
                dict(core_attention_bias_type="post_scale_bias",
                     core_attention_bias=torch.randn(
                         1, HEADS, SEQ, SEQ, requires_grad=True)),
                dict(core_attention_bias_type="post_scale_bias",
                     core_attention_bias=torch.randn(BATCH, 1, SEQ, SEQ)),
                dict(core_attention_bias_type="pre_scale_bias",
                     core_attention_bias=torch.randn(1, 1, SEQ, SEQ)),
                dict(core_attention_bias_type="alibi"),
                dict(core_attention_bias_type="alibi",
                     alibi_slopes=torch.rand(BATCH, HEADS)),
                dict(attn_mask_type="arbitrary",
                     attention_mask=torch.rand(BATCH, 1, SEQ, SEQ) > 0.5)):
            with self.subTest(kwargs=sorted(kwargs)):
                module = dpa(attn_mask_type="causal")
                got, supplied = self.record(module, q, k, v, **kwargs)
                forward, backward = arguments_of(got["spec"],
                                                 "DotProductAttention")
                self.assertEqual(forward, supplied)
                wants_grad = got["variant"][-1][2]
                self.assertEqual("grad.core_attention_bias" in backward,
                                 wants_grad)
                if wants_grad:
                    self.assertEqual(backward["grad.core_attention_bias"],
                                     f"1x{HEADS}x{SEQ}x{SEQ}xbf16")

    def test_cross_attention(self):
        q, k, v = qkv(seq=8, seq_kv=12)
        module = dpa(attention_type="cross", attn_mask_type="causal")
        got, supplied = self.record(
            module, q, k, v, core_attention_bias_type="post_scale_bias",
            core_attention_bias=torch.randn(1, HEADS, 8, 12,
                                            requires_grad=True))
        forward, backward = arguments_of(got["spec"], "DotProductAttention")
        self.assertEqual(forward, supplied)
        self.assertEqual(backward["grad.core_attention_bias"],
                         f"1x{HEADS}x8x12xbf16")

    def test_blocks(self):
        for make in (mha, layer):
            module = make()
            name = type(module).__name__
            for kwargs in (
                    dict(core_attention_bias_type="post_scale_bias",
                         core_attention_bias=torch.randn(
                             1, HEADS, SEQ, SEQ, requires_grad=True)),
                    dict(core_attention_bias_type="alibi",
                         alibi_slopes=torch.rand(HEADS))):
                with self.subTest(module=name, kwargs=sorted(kwargs)):
                    got, supplied = self.record(module, hidden(), **kwargs)
                    forward, backward = arguments_of(got["spec"], name)
                    activations = {n: s for n, s in forward.items()
                                   if not n.startswith("layers.0.")}
                    self.assertEqual(activations, supplied)
                    self.assertEqual(
                        "grad.core_attention_bias" in backward,
                        "core_attention_bias" in kwargs)

    def test_decoder_self_attention_bias(self):
        enc = torch.randn(12, BATCH, HEADS * D, dtype=torch.bfloat16)
        got, supplied = self.record(
            layer(layer_type="decoder"), hidden(), encoder_output=enc,
            core_attention_bias_type="post_scale_bias",
            core_attention_bias=torch.randn(1, HEADS, SEQ, SEQ))
        forward, _ = arguments_of(got["spec"], "TransformerLayer")
        self.assertEqual(forward["core_attention_bias"],
                         f"1x{HEADS}x{SEQ}x{SEQ}xbf16")
        self.assertEqual(forward["encoder_output"],
                         supplied["encoder_output"])


if __name__ == "__main__":
    unittest.main()
