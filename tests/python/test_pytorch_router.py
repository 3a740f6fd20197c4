"""tejit.pytorch.router (docs/router.md) without a GPU. Without PyTorch:
the te IR of its programs (python/tejit/pytorch/_router_ir.py, loaded by
path) and their interface, the option checks naming the argument, and
the programs through the pipeline to the kernels of
codegen/RouterKernels.cpp (tejit.compile_ir). With PyTorch: exported
where TE exports them, TE's signatures, refusals before any program is
compiled. tests/gpu/test_router.py checks the numbers on a GPU.
Run: python3 -m pytest tests/python
"""
import inspect
import re
import unittest

from torch_free import HAVE_TORCH, RefusalAssertions, library_loads, load

import tejit  # noqa: E402  (torch_free puts python/ on sys.path)

ir = load("_router_ir.py", "tejit_router_ir")

if HAVE_TORCH:
    import torch

    import tejit.pytorch as te
    from tejit.pytorch import router

_HEADER = re.compile(r"func\.func @(\w+)\((.*)\) -> \((.*)\) \{")
_TENSOR = re.compile(r'tensor<([^>]*)> \{te\.name = "([^"]+)"\}')

TOPK = "fused_topk_with_score_function"


def interface(text):
    """[(te.name, shape)] of the arguments and of the results."""
    match = _HEADER.search(text)
    return tuple([(n, s) for s, n in _TENSOR.findall(part)]
                 for part in match.group(2, 3))


def deepseek(**changes):
    """check_topk_options' arguments for DeepSeek-V3's router."""
    options = dict(experts=256, topk=8, use_pre_softmax=False, num_groups=8,
                   group_topk=4, scaling_factor=2.5,
                   score_function="sigmoid", bias_shape=(256,))
    options.update(changes)
    return options


class IrTest(unittest.TestCase):
    def test_topk_interface(self):
        text = ir.topk_forward_ir(4096, 256, "bf16", 8, False, 8, 4, 2.5,
                                  "sigmoid", "f32")
        arguments, results = interface(text)
        self.assertEqual(arguments, [("logits", "4096x256xbf16"),
                                     ("expert_bias", "256xf32")])
        self.assertEqual(results, [("probs", "4096x256xbf16"),
                                   ("routing_map", "4096x256xi1"),
                                   ("saved", "4096x256xf32")])
        self.assertIn("num_groups = 8, group_topk = 4", text)
        self.assertIn("bias(%expert_bias)", text)

    def test_no_groups_no_group_attributes(self):
        text = ir.topk_forward_ir(64, 8, "f32", 2, True, 0, 0, 1.0,
                                  "softmax")
        self.assertNotIn("group", text)
        self.assertIn("use_pre_softmax = true", text)
        self.assertEqual(len(interface(text)[0]), 1)

    def test_backward_interfaces(self):
        arguments, results = interface(ir.topk_backward_ir(
            64, 8, "f16", 2, False, 1.0, "softmax"))
        self.assertEqual(arguments, [("routing_map", "64x8xi1"),
                                     ("saved", "64x8xf32"),
                                     ("grad_probs", "64x8xf16")])
        self.assertEqual(results, [("grad_logits", "64x8xf16")])
        arguments, results = interface(ir.aux_scores_backward_ir(
            64, 8, "bf16", "sigmoid"))
        self.assertEqual(arguments, [("saved", "64x8xf32"),
                                     ("grad_scores", "64x8xf32")])
        self.assertEqual(results, [("grad_logits", "64x8xbf16")])

    def test_aux_loss_interface(self):
        text = ir.aux_loss_ir(512, 32, "bf16", "i64", 2048, 64, 2, 0.01)
        arguments, results = interface(text)
        self.assertEqual(arguments, [("probs", "512x32xbf16"),
                                     ("tokens_per_expert", "32xi64")])
        self.assertEqual(results, [("aux_loss", "1xbf16")])
        coeff = re.search(r"coeff = ([^}]+)\}", text).group(1)
        self.assertEqual(float(coeff), 0.01)


class OptionTest(RefusalAssertions, unittest.TestCase):
    def test_deepseek_options(self):
        self.assertEqual(ir.check_topk_options(**deepseek()),
                         (8, False, 8, 4, 2.5, "sigmoid"))

    def test_defaults(self):
        options = ir.check_topk_options(
            64, 2, False, None, None, None, "softmax", None)
        self.assertEqual(options, (2, False, 0, 0, 1.0, "softmax"))

    def test_refusals_name_the_argument(self):
        cases = [
            (ValueError, deepseek(topk=300), ["topk", "300", "256"]),
            (ValueError, deepseek(topk=0), ["topk", ">= 1"]),
            (TypeError, deepseek(topk=2.0), ["topk", "int"]),
            (ValueError, deepseek(num_groups=7), ["num_groups", "divide"]),
            (ValueError, deepseek(group_topk=9), ["group_topk",
                                                  "num_groups"]),
            (ValueError, deepseek(topk=6), ["topk", "divisible",
                                            "group_topk"]),
            (ValueError, deepseek(score_function="relu"),
             ["score_function", "relu"]),
            (ValueError, deepseek(score_function="softmax"),
             ["expert_bias", "sigmoid"]),
            (ValueError, deepseek(bias_shape=(128,)), ["expert_bias",
                                                       "(256,)"]),
            (TypeError, deepseek(scaling_factor="2"), ["scaling_factor"]),
        ]
        for error, options, words in cases:
            with self.subTest(options=options):
                message = self.assertRefused(
                    error, lambda: ir.check_topk_options(**options), *words)
                self.assertIn(TOPK, message)

    def test_logits_shape(self):
        self.assertRefused(ValueError,
                           lambda: ir.check_logits_shape((2, 3, 4), TOPK),
                           "logits", "2-D", "(2, 3, 4)")
        self.assertEqual(ir.check_logits_shape((5, 7), TOPK), (5, 7))

    def test_aux_loss_refusals(self):
        def check(**changes):
            options = dict(probs_shape=(8, 4), counts_shape=(4,),
                           total_num_tokens=8, num_experts=4, topk=2,
                           coeff=0.1)
            options.update(changes)
            return ir.check_aux_loss_options(**options)
        self.assertEqual(check(), (8, 4, 8, 4, 2, 0.1))
        self.assertRefused(ValueError, lambda: check(counts_shape=(5,)),
                           "tokens_per_expert", "(4,)")
        self.assertRefused(ValueError, lambda: check(total_num_tokens=0),
                           "total_num_tokens")
        self.assertRefused(ValueError, lambda: check(topk=5), "topk")
        self.assertRefused(ValueError, lambda: check(probs_shape=(8,)),
                           "probs")


@unittest.skipUnless(library_loads(), "needs libtejit.so (TEJIT_LIBRARY)")
class PipelineTest(unittest.TestCase):
    """The programs compile to one kernel each (RouterKernels.cpp)."""

    def kernels(self, text):
        listing = tejit.compile_ir(text, "cuda", training=False)
        return re.findall(r"===== kernel (\w+)", listing)

    def test_one_kernel_a_program(self):
        programs = {
            "router_topk_router_topk_0": ir.topk_forward_ir(
                128, 256, "bf16", 8, False, 8, 4, 2.5, "sigmoid", "f32"),
            "router_topk_backward_router_topk_bwd_0": ir.topk_backward_ir(
                128, 256, "bf16", 8, False, 2.5, "sigmoid"),
            "router_aux_scores_router_aux_scores_0": ir.aux_scores_ir(
                128, 64, "f16", 2, "softmax"),
            "router_aux_scores_backward_router_aux_scores_bwd_0":
                ir.aux_scores_backward_ir(128, 64, "f16", "softmax"),
            "router_aux_loss_router_aux_loss_0": ir.aux_loss_ir(
                128, 64, "f32", "i32", 128, 64, 2, 0.01),
            "router_aux_loss_backward_router_aux_loss_bwd_0":
                ir.aux_loss_backward_ir(128, 64, "f32", "i32", 128, 64, 2,
                                        0.01),
        }
        for name, text in programs.items():
            with self.subTest(name=name):
                self.assertEqual(self.kernels(text), [name])

    def test_verifier_refusal_reaches_python(self):
        text = ir.topk_forward_ir(8, 8, "bf16", 9, False, 0, 0, 1.0,
                                  "softmax")
        with self.assertRaises(Exception) as caught:
            tejit.compile_ir(text, "cuda", training=False)
        self.assertIn("topk must be in [1, 8]", str(caught.exception))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class InterfaceTest(RefusalAssertions, unittest.TestCase):
    def test_exported_as_in_te(self):
        for name in router.__all__:
            self.assertIs(getattr(te, name), getattr(router, name))
            self.assertIn(name, te.__all__)

    def test_signatures_are_te_s(self):
        self.assertEqual(
            list(inspect.signature(te.fused_topk_with_score_function)
                 .parameters),
            ["logits", "topk", "use_pre_softmax", "num_groups", "group_topk",
             "scaling_factor", "score_function", "expert_bias"])
        self.assertEqual(
            list(inspect.signature(te.fused_compute_score_for_moe_aux_loss)
                 .parameters), ["logits", "topk", "score_function"])
        self.assertEqual(
            list(inspect.signature(te.fused_moe_aux_loss).parameters),
            ["probs", "tokens_per_expert", "total_num_tokens", "num_experts",
             "topk", "coeff"])

    def test_refusals_before_compiling(self):
        logits = torch.zeros(4, 8)
        self.assertRefused(ValueError, lambda: te.fused_topk_with_score_function(
            logits, 9, False, None, None, None, "softmax", None), "topk")
        self.assertRefused(ValueError, lambda: te.fused_topk_with_score_function(
            torch.zeros(2, 4, 8), 2, False, None, None, None, "softmax",
            None), "logits", "2-D")
        self.assertRefused(ValueError, lambda: te.fused_topk_with_score_function(
            logits, 2, False, None, None, None, "softmax", None), "CUDA")
        self.assertRefused(TypeError, lambda: te.fused_topk_with_score_function(
            logits.double(), 2, False, None, None, None, "softmax", None),
            "logits", "float64")
        self.assertRefused(
            ValueError, lambda: te.fused_compute_score_for_moe_aux_loss(
                logits, 2, "tanh"), "score_function")
        self.assertRefused(ValueError, lambda: te.fused_moe_aux_loss(
            logits, torch.zeros(5), 4, 8, 2, 0.1), "tokens_per_expert")
