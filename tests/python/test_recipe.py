"""tejit.common.recipe, TE's recipe API, without torch or a GPU: formats,
defaults, to_spec(), and the rejections. The specs must also be what the
spec reader accepts (tejit.compile_ir, when the library loads). Also
fp8_autocast / fp8_model_init with each recipe (tejit/pytorch/fp8.py
imports no torch: loaded from its file where PyTorch is missing).
Run: python3 -m unittest discover tests/python"""
import importlib.util
import os
import sys
import unittest
import warnings
from unittest import mock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import library_loads, load  # noqa: E402
from tejit.common import recipe  # noqa: E402


def load_fp8_module():
    """tejit.pytorch.fp8 (the autocast state): imported where PyTorch is
    installed, else loaded alone from its file (tejit.pytorch's __init__
    needs torch; fp8.py itself imports only tejit.common)."""
    if importlib.util.find_spec("torch") is not None:
        from tejit.pytorch import fp8  # noqa: PLC0415
        return fp8
    return load("fp8.py", "tejit.pytorch.fp8")


class FormatTest(unittest.TestCase):
    def test_formats_and_their_maxima(self):
        self.assertEqual(recipe.Format.E4M3.value.max_fwd, 448)
        self.assertEqual(recipe.Format.E4M3.value.max_bwd, 448)
        self.assertEqual(recipe.Format.HYBRID.value.max_fwd, 448)
        self.assertEqual(recipe.Format.HYBRID.value.max_bwd, 57344)
        self.assertEqual(recipe.Format.E5M2.value.max_fwd, 57344)

    def test_e5m2_is_not_a_recipe_format(self):
        for make in (recipe.DelayedScaling, recipe.Float8CurrentScaling,
                     recipe.Float8BlockScaling):
            with self.subTest(recipe=make.__name__):
                with self.assertRaises(ValueError) as caught:
                    make(fp8_format=recipe.Format.E5M2)
                self.assertIn("E5M2", str(caught.exception))

    def test_format_must_be_a_format(self):
        with self.assertRaises(TypeError):
            recipe.DelayedScaling(fp8_format="HYBRID")


class DelayedScalingTest(unittest.TestCase):
    def test_defaults_are_te_defaults(self):
        r = recipe.DelayedScaling()
        self.assertEqual((r.margin, r.fp8_format, r.amax_history_len,
                          r.amax_compute_algo, r.reduce_amax),
                         (0, recipe.Format.HYBRID, 1024, "max", True))
        self.assertTrue(r.delayed())
        self.assertFalse(r.float8_current_scaling())
        self.assertTrue(recipe.DelayedScaling.float8_per_tensor_scaling())

    def test_to_spec(self):
        r = recipe.DelayedScaling(margin=1, fp8_format=recipe.Format.E4M3,
                                  amax_history_len=16,
                                  amax_compute_algo="most_recent",
                                  reduce_amax=False)
        self.assertEqual(r.to_spec(), {
            "type": "DelayedScaling", "fp8_format": "E4M3", "margin": 1,
            "amax_history_len": 16, "amax_compute_algo": "most_recent",
            "reduce_amax": False})

    def test_to_spec_revalidates_a_mutated_recipe(self):
        r = recipe.DelayedScaling()
        r.amax_history_len = 16
        self.assertEqual(r.to_spec()["amax_history_len"], 16)
        r.fp8_format = recipe.Format.E5M2
        with self.assertRaises(ValueError):
            r.to_spec()

    def test_rejected_values(self):
        for kwargs in ({"margin": -1}, {"margin": 1.5},
                       {"amax_history_len": 0},
                       {"amax_compute_algo": "mean"}):
            with self.subTest(**kwargs):
                with self.assertRaises(ValueError):
                    recipe.DelayedScaling(**kwargs)

    def test_unsupported_te_features(self):
        cases = {
            "amax_compute_algo": lambda history: history.max(),
            "scaling_factor_compute_algo": lambda *args: 1.0,
            "fp8_mha": True,
            "backward_override": "high_precision",
            "override_linear_precision": (False, False, True),
        }
        for name, value in cases.items():
            with self.subTest(argument=name):
                with self.assertRaises(NotImplementedError) as caught:
                    recipe.DelayedScaling(**{name: value})
                self.assertIn(name, str(caught.exception))

    def test_fp8_dpa(self):
        """FP8 attention (docs/fp8-attention.md): `fp8_dpa: true` in the
        spec only when it is on (specs without it stay as they were)."""
        self.assertNotIn("fp8_dpa", recipe.DelayedScaling().to_spec())
        r = recipe.DelayedScaling(fp8_dpa=True, amax_history_len=16)
        self.assertTrue(r.fp8_dpa)
        self.assertEqual(r.to_spec(), {
            "type": "DelayedScaling", "fp8_format": "HYBRID", "margin": 0,
            "amax_history_len": 16, "amax_compute_algo": "max",
            "reduce_amax": True, "fp8_dpa": True})
        r.fp8_dpa = False
        self.assertNotIn("fp8_dpa", r.to_spec())

    def test_fp8_mha_names_what_runs(self):
        for kwargs in ({"fp8_mha": True}, {"fp8_mha": True, "fp8_dpa": True}):
            with self.subTest(**kwargs):
                with self.assertRaises(NotImplementedError) as caught:
                    recipe.DelayedScaling(**kwargs)
                self.assertIn("fp8_mha", str(caught.exception))
                self.assertIn("fp8_dpa=True", str(caught.exception))
        r = recipe.DelayedScaling(fp8_dpa=True)
        r.fp8_mha = True  # mutated after construction: to_spec checks again
        with self.assertRaises(NotImplementedError):
            r.to_spec()

    def test_fp8_attention_flags_are_bools(self):
        for name in ("fp8_dpa", "fp8_mha"):
            with self.subTest(argument=name):
                with self.assertRaises(TypeError) as caught:
                    recipe.DelayedScaling(**{name: 1})
                self.assertIn(name, str(caught.exception))

    def test_interval_is_deprecated_and_unused(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = recipe.DelayedScaling(interval=1)
        self.assertTrue(any(issubclass(w.category, DeprecationWarning)
                            for w in caught))
        self.assertNotIn("interval", r.to_spec())


class CurrentScalingTest(unittest.TestCase):
    def test_defaults_and_to_spec(self):
        r = recipe.Float8CurrentScaling()
        self.assertTrue(r.float8_current_scaling())
        self.assertEqual(r.to_spec(), {"type": "Float8CurrentScaling",
                                       "fp8_format": "HYBRID",
                                       "power_2_scale": False})

    def test_power_2_scales(self):
        r = recipe.Float8CurrentScaling(use_power_2_scales=True,
                                        fp8_format=recipe.Format.E4M3)
        self.assertTrue(r.fp8_quant_fwd_inp.power_2_scale)
        self.assertEqual(r.to_spec()["power_2_scale"], True)
        q = recipe.QParams(power_2_scale=True)
        r = recipe.Float8CurrentScaling(fp8_quant_fwd_inp=q,
                                        fp8_quant_fwd_weight=q,
                                        fp8_quant_bwd_grad=q)
        self.assertEqual(r.to_spec()["power_2_scale"], True)

    def test_unsupported_te_features(self):
        cases = {
            "fp8_quant_fwd_inp": recipe.QParams(power_2_scale=True),
            "fp8_quant_bwd_grad": recipe.QParams(amax_epsilon=1e-6),
            "fp8_gemm_fprop": recipe.MMParams(use_split_accumulator=True),
            "fp8_dpa": True, "fp8_mha": True,
            "backward_override": "dequantized",
        }
        for name, value in cases.items():
            with self.subTest(argument=name):
                with self.assertRaises(NotImplementedError):
                    recipe.Float8CurrentScaling(**{name: value})

    def test_fp8_attention_needs_delayed_scaling(self):
        for make in (recipe.Float8CurrentScaling, recipe.Float8BlockScaling):
            for name in ("fp8_dpa", "fp8_mha"):
                with self.subTest(recipe=make.__name__, argument=name):
                    with self.assertRaises(NotImplementedError) as caught:
                        make(**{name: True})
                    message = str(caught.exception)
                    self.assertIn(f"{make.__name__}({name}=True)", message)
                    self.assertIn("fp8_dpa needs the DelayedScaling recipe",
                                  message)

    def test_blackwell_recipes_say_why(self):
        for make in (recipe.MXFP8BlockScaling, recipe.NVFP4BlockScaling):
            with self.subTest(recipe=make.__name__):
                with self.assertRaises(NotImplementedError) as caught:
                    make()
                self.assertIn("Blackwell", str(caught.exception))
                self.assertIn("Float8BlockScaling", str(caught.exception))


class BlockScalingTest(unittest.TestCase):
    """Float8BlockScaling: TE 2.x's fields and defaults, the spec mapping
    (docs/block-scaling.md) and the rejections, each naming its field."""

    def test_defaults_are_te_defaults(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", None)
            r = recipe.Float8BlockScaling()
        default_q = recipe.QParams(power_2_scale=True, amax_epsilon=0.0)
        split = recipe.MMParams(use_split_accumulator=True)
        self.assertEqual(
            (r.use_f32_scales, r.fp8_format, r.x_block_scaling_dim,
             r.w_block_scaling_dim, r.grad_block_scaling_dim, r.fp8_dpa,
             r.fp8_mha, r.backward_override),
            (False, recipe.Format.E4M3, 1, 2, 1, False, False, None))
        self.assertEqual((r.fp8_quant_fwd_inp, r.fp8_quant_fwd_weight,
                          r.fp8_quant_bwd_grad), (default_q,) * 3)
        self.assertEqual((r.fp8_gemm_fprop, r.fp8_gemm_dgrad,
                          r.fp8_gemm_wgrad), (split,) * 3)

    def test_classification(self):
        r = recipe.Float8BlockScaling()
        self.assertTrue(r.float8_block_scaling())
        self.assertTrue(recipe.Float8BlockScaling.float8_block_scaling())
        for other in (r.delayed(), r.float8_current_scaling(),
                      r.float8_per_tensor_scaling(), r.mxfp8(), r.nvfp4()):
            self.assertFalse(other)
        self.assertFalse(recipe.Float8CurrentScaling.float8_block_scaling())
        self.assertIsInstance(r, recipe.Recipe)

    def test_default_to_spec(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", None)
            spec = recipe.Float8BlockScaling().to_spec()
        self.assertEqual(spec, {"type": "Float8BlockScaling",
                                "fp8_format": "E4M3",
                                "x_block_scaling_dim": 1,
                                "w_block_scaling_dim": 2,
                                "grad_block_scaling_dim": 1,
                                "power_2_scale": True})

    def test_fp32_scales_from_the_environment(self):
        with mock.patch.dict(os.environ,
                             {"NVTE_FP8_BLOCK_SCALING_FP32_SCALES": "1"}):
            r = recipe.Float8BlockScaling()
        self.assertTrue(r.use_f32_scales)
        self.assertFalse(r.fp8_quant_bwd_grad.power_2_scale)
        self.assertFalse(r.to_spec()["power_2_scale"])
        r = recipe.Float8BlockScaling(use_f32_scales=True)
        self.assertFalse(r.to_spec()["power_2_scale"])

    def test_to_spec_of_other_settings(self):
        q = recipe.QParams(power_2_scale=False)
        r = recipe.Float8BlockScaling(fp8_format=recipe.Format.HYBRID,
                                      fp8_quant_fwd_inp=q,
                                      fp8_quant_fwd_weight=q,
                                      fp8_quant_bwd_grad=q,
                                      x_block_scaling_dim=2,
                                      w_block_scaling_dim=1)
        self.assertEqual(r.to_spec(), {"type": "Float8BlockScaling",
                                       "fp8_format": "HYBRID",
                                       "x_block_scaling_dim": 2,
                                       "w_block_scaling_dim": 1,
                                       "grad_block_scaling_dim": 1,
                                       "power_2_scale": False})
        r = recipe.Float8BlockScaling(w_block_scaling_dim=1,
                                      grad_block_scaling_dim=2)
        self.assertEqual(r.to_spec()["grad_block_scaling_dim"], 2)
        r = recipe.Float8BlockScaling(w_block_scaling_dim=1)
        self.assertEqual(r.to_spec()["w_block_scaling_dim"], 1)

    def test_dims_must_be_1_or_2(self):
        for name in ("x_block_scaling_dim", "w_block_scaling_dim",
                     "grad_block_scaling_dim"):
            for value in (0, 3, -1, 1.0, True, "1", None):
                with self.subTest(field=name, value=value):
                    with self.assertRaises(ValueError) as caught:
                        recipe.Float8BlockScaling(**{
                            "w_block_scaling_dim": 1, name: value})
                    self.assertIn(name, str(caught.exception))

    def test_no_gemm_pairs_two_2d_operands(self):
        cases = [({"x_block_scaling_dim": 2}, "fprop"),
                 ({"grad_block_scaling_dim": 2}, "dgrad"),
                 ({"w_block_scaling_dim": 1, "x_block_scaling_dim": 2,
                   "grad_block_scaling_dim": 2}, "wgrad")]
        for kwargs, gemm in cases:
            with self.subTest(**kwargs):
                with self.assertRaises(ValueError) as caught:
                    recipe.Float8BlockScaling(**kwargs)
                message = str(caught.exception)
                self.assertIn(gemm, message)
                for name, value in kwargs.items():
                    if value == 2:
                        self.assertIn(name, message)

    def test_quantization_parameters(self):
        for name in ("fp8_quant_fwd_inp", "fp8_quant_fwd_weight",
                     "fp8_quant_bwd_grad"):
            with self.subTest(field=name):
                with self.assertRaises(NotImplementedError) as caught:
                    recipe.Float8BlockScaling(**{name: recipe.QParams(
                        power_2_scale=True, amax_epsilon=1e-12)})
                self.assertIn(f"{name}.amax_epsilon", str(caught.exception))
                # One power_2_scale for every tensor.
                with self.assertRaises(NotImplementedError) as caught:
                    recipe.Float8BlockScaling(**{name: recipe.QParams(
                        power_2_scale=False)})
                self.assertIn("power_2_scale", str(caught.exception))
                with self.assertRaises(TypeError) as caught:
                    recipe.Float8BlockScaling(**{name: (True, 0.0)})
                self.assertIn(name, str(caught.exception))

    def test_rejected_settings_name_their_field(self):
        cases = {
            "fp8_gemm_fprop": (recipe.MMParams(use_split_accumulator=False),
                               ValueError),
            "fp8_gemm_dgrad": (recipe.MMParams(use_split_accumulator=False),
                               ValueError),
            "fp8_gemm_wgrad": (recipe.MMParams(use_split_accumulator=False),
                               ValueError),
            "fp8_dpa": (True, NotImplementedError),
            "fp8_mha": (True, NotImplementedError),
            "backward_override": ("high_precision", NotImplementedError),
            "use_f32_scales": ("yes", TypeError),
        }
        for name, (value, error) in cases.items():
            with self.subTest(argument=name):
                with self.assertRaises(error) as caught:
                    recipe.Float8BlockScaling(**{name: value})
                self.assertIn(name, str(caught.exception))
        with self.assertRaises(TypeError):
            recipe.Float8BlockScaling(fp8_format="E4M3")

    def test_to_spec_revalidates_a_mutated_recipe(self):
        r = recipe.Float8BlockScaling()
        r.w_block_scaling_dim = 1
        r.x_block_scaling_dim = 2
        self.assertEqual(r.to_spec()["x_block_scaling_dim"], 2)
        r.w_block_scaling_dim = 2
        with self.assertRaises(ValueError):
            r.to_spec()
        r = recipe.Float8BlockScaling()
        r.grad_block_scaling_dim = 4
        with self.assertRaises(ValueError):
            r.to_spec()
        r = recipe.Float8BlockScaling()
        r.fp8_quant_bwd_grad = recipe.QParams(power_2_scale=False)
        with self.assertRaises(NotImplementedError):
            r.to_spec()


class AutocastTest(unittest.TestCase):
    """fp8_autocast and fp8_model_init take each recipe as the modules
    will: Float8BlockScaling works under autocast (it keeps no meta state,
    like current scaling); fp8_model_init refuses it."""

    @classmethod
    def setUpClass(cls):
        cls.fp8 = load_fp8_module()

    def test_autocast_takes_every_recipe(self):
        for r in (recipe.DelayedScaling(), recipe.Float8CurrentScaling(),
                  recipe.DelayedScaling(fp8_dpa=True),
                  recipe.Float8BlockScaling(),
                  recipe.Float8BlockScaling(x_block_scaling_dim=2,
                                            w_block_scaling_dim=1)):
            with self.subTest(recipe=type(r).__name__):
                with self.fp8.fp8_autocast(enabled=True, fp8_recipe=r):
                    self.assertTrue(self.fp8.is_fp8_enabled())
                    self.assertIs(self.fp8.get_fp8_recipe(), r)
                with self.fp8.autocast(recipe=r):
                    self.assertIs(self.fp8.get_fp8_recipe(), r)
                self.assertFalse(self.fp8.is_fp8_enabled())

    def test_autocast_reports_a_bad_block_recipe(self):
        r = recipe.Float8BlockScaling()
        r.x_block_scaling_dim = 2  # with the 2-D weights: fprop 2-D x 2-D
        with self.assertRaises(ValueError) as caught:
            self.fp8.fp8_autocast(fp8_recipe=r)
        self.assertIn("x_block_scaling_dim", str(caught.exception))
        with self.assertRaises(TypeError) as caught:
            self.fp8.fp8_autocast(fp8_recipe=object())
        self.assertIn("Float8BlockScaling", str(caught.exception))

    def test_fp8_model_init_refuses_block_scaling(self):
        with self.assertRaises(NotImplementedError) as caught:
            self.fp8.fp8_model_init(enabled=True,
                                    recipe=recipe.Float8BlockScaling())
        self.assertIn("Float8BlockScaling", str(caught.exception))
        self.assertIn("fp8_model_init", str(caught.exception))
        # Disabled, the recipe is not looked at (as for every recipe).
        with self.fp8.fp8_model_init(enabled=False,
                                     recipe=recipe.Float8BlockScaling()):
            self.assertIsNone(self.fp8.get_fp8_model_init())
        for r in (recipe.DelayedScaling(), recipe.Float8CurrentScaling()):
            with self.fp8.fp8_model_init(enabled=True, recipe=r):
                self.assertIs(self.fp8.get_fp8_model_init().recipe, r)


@unittest.skipUnless(library_loads(), "libtejit.so is not available")
class SpecTest(unittest.TestCase):
    """Every to_spec() compiles: the spec reader knows each key."""

    def test_specs_compile(self):
        recipes = [recipe.DelayedScaling(),
                   recipe.DelayedScaling(margin=2,
                                         fp8_format=recipe.Format.E4M3,
                                         amax_history_len=16,
                                         amax_compute_algo="most_recent",
                                         reduce_amax=False),
                   recipe.DelayedScaling(fp8_dpa=True),
                   recipe.Float8CurrentScaling(),
                   recipe.Float8CurrentScaling(use_power_2_scales=True)]
        for r in recipes:
            with self.subTest(recipe=r.to_spec()):
                spec = {"name": "linear", "params_dtype": "bf16",
                        "seq_length": 32, "batch_size": 1,
                        "recipe": r.to_spec(),
                        "layers": [{"type": "Linear", "in_features": 64,
                                    "out_features": 32}]}
                text = tejit.compile_ir(spec, "scaled")
                self.assertIn("te.scaled_matmul", text)

    def test_block_scaling_specs_compile(self):
        """Each Float8BlockScaling setting reaches the compiler: the
        block_quantize casts carry its block dims and power_2_scale (an
        E5M2 gradient under HYBRID)."""
        fp32 = recipe.QParams(power_2_scale=False)
        cases = [
            (recipe.Float8BlockScaling(), (1, 2, 1), True, "f8E4M3FN"),
            (recipe.Float8BlockScaling(x_block_scaling_dim=2,
                                       w_block_scaling_dim=1),
             (2, 1, 1), True, "f8E4M3FN"),
            (recipe.Float8BlockScaling(fp8_format=recipe.Format.HYBRID,
                                       fp8_quant_fwd_inp=fp32,
                                       fp8_quant_fwd_weight=fp32,
                                       fp8_quant_bwd_grad=fp32),
             (1, 2, 1), False, "f8E5M2"),
        ]
        # The cast of each role, told apart by its input: x [256, 384],
        # W [512, 384], dY [256, 512].
        roles = {"tensor<256x384xbf16>": "x", "tensor<512x384xbf16>": "w",
                 "tensor<256x512xbf16>": "grad"}
        for r, dims, power_2, grad_type in cases:
            with self.subTest(recipe=r.to_spec()):
                spec = {"name": "linear", "params_dtype": "bf16",
                        "seq_length": 128, "batch_size": 2,
                        "recipe": r.to_spec(),
                        "layers": [{"type": "Linear", "in_features": 384,
                                    "out_features": 512}]}
                text = tejit.compile_ir(spec, "scaled")
                casts = {}
                for line in text.splitlines():
                    if "te.block_quantize" in line:
                        source = line.split(" : ")[-1].split(" -> ")[0]
                        casts.setdefault(roles[source], []).append(line)
                # Each role cast rowwise and transposed (the backward's
                # copy), with the role's block dim.
                self.assertEqual(sorted(casts), ["grad", "w", "x"], text)
                for role, dim in zip(("x", "w", "grad"), dims):
                    lines = casts[role]
                    self.assertEqual(len(lines), 2, lines)
                    self.assertEqual(sum("transpose" in c for c in lines), 1)
                    self.assertTrue(all(f"block_dim = {dim} " in c
                                        for c in lines), lines)
                    self.assertTrue(all(("power_2_scale" in c) == power_2
                                        for c in lines), lines)
                self.assertTrue(all(grad_type in c for c in casts["grad"]))
                self.assertNotIn(" te.quantize ", text)


if __name__ == "__main__":
    unittest.main()
