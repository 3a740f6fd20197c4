"""tejit.common.recipe, TE's recipe API, without torch or a GPU: formats,
defaults, to_spec(), and the rejections. The specs must also be what the
spec reader accepts (tejit.compile_ir, when the library loads).
Run: python3 -m unittest discover tests/python"""
import os
import sys
import unittest
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from tejit.common import recipe  # noqa: E402


def library_loads():
    try:
        tejit.version()
        return True
    except tejit.LibraryNotFoundError:
        return False


class FormatTest(unittest.TestCase):
    def test_formats_and_their_maxima(self):
        self.assertEqual(recipe.Format.E4M3.value.max_fwd, 448)
        self.assertEqual(recipe.Format.E4M3.value.max_bwd, 448)
        self.assertEqual(recipe.Format.HYBRID.value.max_fwd, 448)
        self.assertEqual(recipe.Format.HYBRID.value.max_bwd, 57344)
        self.assertEqual(recipe.Format.E5M2.value.max_fwd, 57344)

    def test_e5m2_is_not_a_recipe_format(self):
        for make in (recipe.DelayedScaling, recipe.Float8CurrentScaling):
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
            "fp8_dpa": True, "fp8_mha": True,
            "backward_override": "high_precision",
            "override_linear_precision": (False, False, True),
        }
        for name, value in cases.items():
            with self.subTest(argument=name):
                with self.assertRaises(NotImplementedError) as caught:
                    recipe.DelayedScaling(**{name: value})
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
            "fp8_dpa": True,
            "backward_override": "dequantized",
        }
        for name, value in cases.items():
            with self.subTest(argument=name):
                with self.assertRaises(NotImplementedError):
                    recipe.Float8CurrentScaling(**{name: value})

    def test_block_scaling_recipes_say_why(self):
        for make in (recipe.MXFP8BlockScaling, recipe.Float8BlockScaling,
                     recipe.NVFP4BlockScaling):
            with self.subTest(recipe=make.__name__):
                with self.assertRaises(NotImplementedError) as caught:
                    make()
                self.assertIn("DelayedScaling", str(caught.exception))


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


if __name__ == "__main__":
    unittest.main()
