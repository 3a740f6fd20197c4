"""TE's FP8 state queries in tejit.pytorch: FP8GlobalStateManager (what
Megatron-LM reads), the recipe availability checks, and the
`quantization` module (TE 2.x's name for fp8). Each query is checked
against the autocast / fp8_model_init it is asked inside, including
nesting and a snapshot restored by set_autocast_state. Needs PyTorch
(skipped without it); on a machine without a GPU the availability checks
must answer False with a reason, on an FP8 GPU True.
Run: python3 -m pytest tests/python
"""
import unittest

from torch_free import HAVE_TORCH

if HAVE_TORCH:
    import torch

    import tejit.pytorch as te
    from tejit.common import recipe
    from tejit.pytorch.fp8 import FP8GlobalStateManager as Manager


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class GlobalStateManagerTest(unittest.TestCase):
    def test_queries_follow_the_innermost_autocast(self):
        outer = recipe.Float8CurrentScaling()
        inner = recipe.DelayedScaling(amax_history_len=16)
        self.assertFalse(Manager.is_fp8_enabled())
        # Outside an autocast TE answers its default recipe.
        self.assertIsInstance(Manager.get_fp8_recipe(), recipe.DelayedScaling)
        with te.autocast(recipe=outer, amax_reduction_group="g"):
            self.assertTrue(Manager.is_fp8_enabled())
            self.assertIs(Manager.get_fp8_recipe(), outer)
            self.assertEqual(Manager.get_fp8_group(), "g")
            with te.fp8_autocast(fp8_recipe=inner):
                self.assertIs(Manager.get_fp8_recipe(), inner)
                self.assertIsNone(Manager.get_fp8_group())
            with te.autocast(enabled=False):
                self.assertFalse(Manager.is_fp8_enabled())
            self.assertIs(Manager.get_fp8_recipe(), outer)
        self.assertFalse(Manager.is_fp8_enabled())
        self.assertFalse(Manager.is_fp8_calibration())

    def test_snapshot_restores_and_autocast_exit_undoes_it(self):
        first = recipe.Float8CurrentScaling()
        with te.autocast(recipe=first):
            snapshot = Manager.get_autocast_state()
        self.assertFalse(Manager.is_fp8_enabled())
        with te.autocast(enabled=False):
            Manager.set_autocast_state(snapshot)
            self.assertTrue(Manager.is_fp8_enabled())
            self.assertIs(Manager.get_fp8_recipe(), first)
        # The autocast's exit restored the state from before its entry.
        self.assertFalse(Manager.is_fp8_enabled())
        with self.assertRaisesRegex(TypeError, "autocast_state"):
            Manager.set_fp8_autocast_state("not a state")

    def test_reset_leaves_no_autocast_nor_model_init(self):
        with te.fp8_model_init():
            with te.autocast(recipe=recipe.DelayedScaling()):
                Manager.reset()
                self.assertFalse(Manager.is_fp8_enabled())
                self.assertFalse(Manager.with_fp8_parameters())

    def test_fp8_parameters_follow_fp8_model_init(self):
        self.assertFalse(Manager.with_fp8_parameters())
        with te.fp8_model_init(preserve_high_precision_init_val=True):
            self.assertTrue(Manager.with_fp8_parameters())
            self.assertTrue(Manager.with_high_precision_init_val())
            with te.fp8_model_init(enabled=False):
                self.assertFalse(Manager.with_fp8_parameters())
        with te.quantized_model_init():
            self.assertFalse(Manager.with_high_precision_init_val())
        self.assertFalse(Manager.with_fp8_parameters())

    def test_keys_graph_capture_and_update_step(self):
        self.assertEqual(Manager.get_meta_tensor_key(), "scaling_fwd")
        self.assertEqual(Manager.get_meta_tensor_key(forward=False),
                         "scaling_bwd")
        self.assertEqual(Manager.get_fwd_bwd_key(False), "backward")
        self.assertFalse(Manager.fp8_graph_capturing())
        self.assertIsNone(Manager.reduce_and_update_fp8_tensors(forward=True))
        self.assertIsNone(Manager.get_skip_fp8_weight_update_tensor())
        with self.assertRaisesRegex(NotImplementedError,
                                    "is_first_microbatch"):
            Manager.set_skip_fp8_weight_update_tensor(True)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class AvailabilityTest(unittest.TestCase):
    def device_capability(self):
        """(major, minor) of the current device when tejit can run FP8 on
        it (the library loads and the device is sm_89+), else None."""
        if not torch.cuda.is_available():
            return None
        capability = torch.cuda.get_device_capability()
        return capability if capability >= (8, 9) else None

    def test_fp8_and_block_scaling_follow_the_device(self):
        capability = self.device_capability()
        available, reason = te.is_fp8_available(return_reason=True)
        if capability is None:
            self.assertFalse(available)
            self.assertTrue(reason)
        elif available:
            self.assertEqual(reason, "")
        block, block_reason = te.is_fp8_block_scaling_available(True)
        self.assertEqual(block, available and capability >= (9, 0))
        self.assertEqual(block_reason == "", block)
        self.assertEqual(Manager.is_fp8_block_scaling_available(),
                         (block, block_reason))
        self.assertEqual(Manager.is_fp8_available(), (available, reason))

    def test_blackwell_recipes_are_unavailable_with_a_reason(self):
        for check, name in ((te.is_mxfp8_available, "MXFP8"),
                            (te.is_nvfp4_available, "NVFP4")):
            self.assertFalse(check())
            available, reason = check(return_reason=True)
            self.assertFalse(available)
            self.assertIn(name, reason)
        self.assertFalse(Manager.is_mxfp8_available()[0])
        self.assertFalse(Manager.is_nvfp4_available()[0])

    def test_quantization_module_is_fp8(self):
        from tejit.pytorch import quantization
        self.assertIs(quantization.autocast, te.autocast)
        self.assertIs(quantization.FP8GlobalStateManager, Manager)
        self.assertIsInstance(quantization.get_default_recipe(),
                              recipe.DelayedScaling)


if __name__ == "__main__":
    unittest.main()
