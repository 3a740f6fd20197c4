"""tejit.pytorch.parallel_cross_entropy's interface without a GPU (needs
PyTorch; skipped without it): exported where TE exports it
(tejit.pytorch.cross_entropy.parallel_cross_entropy and
tejit.pytorch.parallel_cross_entropy), TE's signature, and the refusals,
each naming the argument, that come before any program is compiled: CPU
tensors, dtypes, shapes, label_smoothing, a process group without
torch.distributed. tests/gpu/test_cross_entropy.py runs it.
Run: python3 -m pytest tests/python
"""
import inspect
import unittest

from torch_free import HAVE_TORCH, RefusalAssertions

if HAVE_TORCH:
    import torch

    import tejit.pytorch as te
    from tejit.pytorch.cross_entropy import parallel_cross_entropy


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class InterfaceTest(RefusalAssertions, unittest.TestCase):
    def test_exported_as_in_te(self):
        self.assertIs(te.parallel_cross_entropy, parallel_cross_entropy)
        self.assertIs(te.cross_entropy.parallel_cross_entropy,
                      parallel_cross_entropy)
        self.assertIn("parallel_cross_entropy", te.__all__)

    def test_signature_is_te_s(self):
        parameters = inspect.signature(parallel_cross_entropy).parameters
        self.assertEqual(list(parameters)[:7],
                         ["inp", "target", "label_smoothing", "reduce_loss",
                          "dist_process_group", "ignore_idx",
                          "is_cg_capturable"])
        defaults = {name: p.default for name, p in parameters.items()}
        self.assertEqual(defaults["label_smoothing"], 0.0)
        self.assertIs(defaults["reduce_loss"], False)
        self.assertIsNone(defaults["dist_process_group"])
        self.assertEqual(defaults["ignore_idx"], -100)
        self.assertIs(defaults["is_cg_capturable"], False)

    def logits(self, dtype=None, device="cpu"):
        return torch.randn(2, 3, 10, dtype=dtype or torch.float32,
                           device=device)

    def test_cpu_tensors_are_refused(self):
        target = torch.randint(0, 10, (2, 3))
        self.assertRefused(ValueError, lambda: parallel_cross_entropy(
            self.logits(), target), "inp", "CUDA")

    def test_dtypes_are_named(self):
        target = torch.randint(0, 10, (2, 3))
        self.assertRefused(TypeError, lambda: parallel_cross_entropy(
            self.logits(torch.float64), target), "inp", "float64")
        self.assertRefused(TypeError, lambda: parallel_cross_entropy(
            self.logits(), target.float()), "target", "float32")

    def test_options_are_checked_first(self):
        target = torch.randint(0, 10, (2, 3))
        self.assertRefused(ValueError, lambda: parallel_cross_entropy(
            self.logits(), target, label_smoothing=-0.1), "label_smoothing")
        self.assertRefused(TypeError, lambda: parallel_cross_entropy(
            self.logits(), target, ignore_idx=None), "ignore_idx")

    @unittest.skipUnless(HAVE_TORCH and torch.cuda.is_available(),
                         "needs a CUDA device")
    def test_shapes_are_named(self):
        logits = self.logits(device="cuda")
        self.assertRefused(ValueError, lambda: parallel_cross_entropy(
            logits, torch.randint(0, 10, (5,), device="cuda")), "target",
            "6", "5")
        self.assertRefused(ValueError, lambda: parallel_cross_entropy(
            logits[0, 0], torch.randint(0, 10, (1,), device="cuda")), "inp")


if __name__ == "__main__":
    unittest.main()
