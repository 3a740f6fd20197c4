"""tejit.pytorch.GroupedLinear, Fp8Padding and Fp8Unpadding on the CPU
(parameters on the CPU, no program runs): TE's parameter names and
shapes as views of one stacked buffer (what the program takes: the spec's
layers.0.weight [G, out, in] and layers.0.bias [G, out]), TE's
initialization, the stacked argument after a parameter was replaced
(values and gradients reach the right parameters), re-packing after
.to() and deepcopy, the constructor's refusals, m_splits given as a
tensor, and Fp8Padding / Fp8Unpadding against a per-segment reference.
Needs PyTorch (skipped without it; test_grouped_linear_args.py checks the
argument checks and the spec without it). tests/gpu/test_grouped_linear.py
runs the module.
Run: python3 -m pytest tests/python
"""
import copy
import importlib.util
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

HAVE_TORCH = importlib.util.find_spec("torch") is not None
if HAVE_TORCH:
    import torch

    import tejit
    import tejit.pytorch as te
    from tejit.pytorch.module import grouped_linear

CPU = "cpu"


def storage_start(tensor):
    return tensor.untyped_storage().data_ptr()


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ParametersTest(unittest.TestCase):
    def make(self, **kwargs):
        arguments = dict(params_dtype=torch.float32, device=CPU)
        arguments.update(kwargs)
        return te.GroupedLinear(3, 64, 48, **arguments)

    def test_names_shapes_and_one_buffer(self):
        module = self.make()
        names = [name for name, _ in module.named_parameters()]
        self.assertEqual(names, ["weight0", "weight1", "weight2", "bias0",
                                 "bias1", "bias2"])
        self.assertEqual(sorted(module.state_dict()), sorted(names))
        for index in range(3):
            self.assertEqual(tuple(getattr(module, f"weight{index}").shape),
                             (48, 64))
            self.assertEqual(tuple(getattr(module, f"bias{index}").shape),
                             (48,))
        weights = [module.weight0, module.weight1, module.weight2]
        self.assertEqual(len({storage_start(w) for w in weights}), 1)
        step = 48 * 64 * weights[0].element_size()
        self.assertEqual([w.data_ptr() - weights[0].data_ptr()
                          for w in weights], [0, step, 2 * step])
        stacked = module._argument("weight", torch.float32)
        self.assertEqual(tuple(stacked.shape), (3, 48, 64))
        self.assertEqual(stacked.data_ptr(), weights[0].data_ptr())
        self.assertEqual(tuple(module._argument("bias", torch.float32).shape),
                         (3, 48))
        self.assertIn("num_gemms=3", repr(module))

    def test_te_initialization(self):
        torch.manual_seed(0)
        module = te.GroupedLinear(2, 512, 256, device=CPU,
                                  params_dtype=torch.float32)
        for index in range(2):
            weight = getattr(module, f"weight{index}")
            self.assertAlmostEqual(weight.std().item(), 0.023, delta=1e-3)
            self.assertEqual(getattr(module, f"bias{index}").abs().sum(), 0)
        # Each weight is drawn on its own, not copies of one another.
        self.assertFalse(torch.equal(module.weight0, module.weight1))
        calls = []

        def init_method(tensor):
            calls.append(tuple(tensor.shape))
            torch.nn.init.constant_(tensor, 0.5)

        module = te.GroupedLinear(3, 16, 8, init_method=init_method,
                                  device=CPU)
        self.assertEqual(calls, [(8, 16)] * 3)
        self.assertTrue(torch.all(module._argument(
            "weight", module.params_dtype) == 0.5))

    def test_without_bias_and_return_bias(self):
        module = self.make(bias=False)
        self.assertEqual([n for n, _ in module.named_parameters()],
                         ["weight0", "weight1", "weight2"])
        self.assertIsNone(module.bias1)
        self.assertEqual(module._layer_spec()["bias"], False)
        module = self.make(return_bias=True)
        zeros = module._argument("bias", torch.float32)
        self.assertEqual(tuple(zeros.shape), (3, 48))
        self.assertEqual(zeros.abs().sum().item(), 0)

    def test_spec_matches_the_program(self):
        module = self.make()
        self.assertEqual(module._layer_spec(),
                         {"type": "GroupedLinear", "num_gemms": 3,
                          "in_features": 64, "out_features": 48,
                          "bias": True})
        spec = {"name": "g", "params_dtype": "fp32", "seq_length": 64,
                "batch_size": 1, "layers": [module._layer_spec()]}
        text = tejit.compile_ir(spec, "te")
        self.assertIn('tensor<3x48x64xf32> {te.name = "layers.0.weight"',
                      text)
        self.assertIn('tensor<3x48xf32> {te.name = "layers.0.bias"', text)
        self.assertIn('tensor<3xi32> {te.name = "m_splits"', text)

    def test_replaced_parameter_is_stacked_per_call(self):
        module = self.make()
        replacement = torch.nn.Parameter(torch.randn(48, 64))
        module.weight1 = replacement
        stacked = module._argument("weight", torch.float32)
        self.assertNotEqual(stacked.data_ptr(), module.weight0.data_ptr())
        self.assertTrue(torch.equal(stacked[1], replacement))
        self.assertTrue(torch.equal(stacked[0], module.weight0))
        # The gradient of the stacked tensor reaches each parameter.
        scale = torch.arange(3.0).view(3, 1, 1)
        (stacked * scale).sum().backward()
        for index in range(3):
            grad = getattr(module, f"weight{index}").grad
            self.assertTrue(torch.all(grad == float(index)), index)

    def test_adjacent_argument_is_differentiable(self):
        module = self.make()
        (module._argument("bias", torch.float32)
         * torch.arange(3.0).view(3, 1)).sum().backward()
        self.assertTrue(torch.all(module.bias2.grad == 2.0))
        self.assertTrue(torch.all(module.bias0.grad == 0.0))

    def test_to_and_deepcopy_pack_again(self):
        module = self.make()
        half = module.to(torch.float64)
        weights = [half.weight0, half.weight1, half.weight2]
        self.assertEqual(len({storage_start(w) for w in weights}), 1)
        copied = copy.deepcopy(module)
        weights = [copied.weight0, copied.weight1, copied.weight2]
        self.assertEqual(len({storage_start(w) for w in weights}), 1)
        self.assertNotEqual(storage_start(copied.weight0),
                            storage_start(module.weight0))
        self.assertTrue(torch.equal(copied.weight2, module.weight2))

    def test_load_state_dict_keeps_the_buffer(self):
        module, other = self.make(), self.make()
        module.load_state_dict(other.state_dict())
        self.assertTrue(torch.equal(module.weight1, other.weight1))
        self.assertEqual(module._argument("weight",
                                          torch.float32).data_ptr(),
                         module.weight0.data_ptr())

    def test_constructor_refusals(self):
        for name in ("fuse_wgrad_accumulation", "ub_overlap_rs",
                     "ub_overlap_ag", "delay_wgrad_compute",
                     "save_original_input"):
            with self.subTest(name=name):
                with self.assertRaises(NotImplementedError) as caught:
                    self.make(**{name: True})
                self.assertIn(name, str(caught.exception))
        with self.assertRaises(NotImplementedError) as caught:
            self.make(tp_size=2, parallel_mode="column")
        self.assertIn("tp_size=2", str(caught.exception))
        with self.assertRaises(ValueError):
            te.GroupedLinear(0, 64, 48, device=CPU)
        # TE's rule: nothing to split at tp_size 1.
        self.make(sequence_parallel=True, parallel_mode="row",
                  ub_name="fc1")
        with self.assertRaises(NotImplementedError) as caught:
            with te.fp8_model_init(enabled=True):
                self.make()
        self.assertIn("fp8_model_init", str(caught.exception))

    def test_forward_needs_a_cuda_input(self):
        module = self.make()
        with self.assertRaises(ValueError) as caught:
            module(torch.randn(8, 64), [8, 0, 0])
        self.assertIn("CUDA", str(caught.exception))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class SplitValuesTest(unittest.TestCase):
    def test_tensors(self):
        values = grouped_linear._split_values(
            torch.tensor([3, 0, 5], dtype=torch.int64), 3)
        self.assertEqual(values, [3, 0, 5])
        self.assertEqual(grouped_linear._split_values((1, 2), 2), (1, 2))
        for bad in (torch.tensor([1.0, 2.0]), torch.tensor([[1, 2]]),
                    torch.tensor([True, False])):
            with self.assertRaises(ValueError) as caught:
                grouped_linear._split_values(bad, 2)
            self.assertIn("m_splits", str(caught.exception))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class PaddingTest(unittest.TestCase):
    def test_round_trip_against_segments(self):
        torch.manual_seed(1)
        splits = [5, 0, 16, 17]
        x = torch.randn(sum(splits), 8, dtype=torch.float64,
                        requires_grad=True)
        padded, padded_splits = te.Fp8Padding(4)(x, splits)
        self.assertEqual(padded_splits, [16, 0, 16, 32])
        self.assertEqual(tuple(padded.shape), (64, 8))
        start = 0
        for part, size, target in zip(padded.split(padded_splits), splits,
                                      padded_splits):
            self.assertTrue(torch.equal(part[:size], x[start:start + size]))
            self.assertEqual(part[size:target].abs().sum().item(), 0)
            start += size
        back = te.Fp8Unpadding(4)(padded, splits)
        self.assertTrue(torch.equal(back, x))
        weights = torch.randn_like(back)
        (back * weights).sum().backward()
        self.assertTrue(torch.equal(x.grad, weights))

    def test_aligned_splits_pass_through(self):
        x = torch.randn(32, 4)
        out, splits = te.Fp8Padding(2)(x, torch.tensor([16, 16]))
        self.assertIs(out, x)
        self.assertEqual(splits, [16, 16])
        self.assertIs(te.Fp8Unpadding(2)(x, [16, 16]), x)

    def test_align_size_and_errors(self):
        padded, splits = te.Fp8Padding(2, align_size=32)(torch.ones(3, 2),
                                                         [1, 2])
        self.assertEqual(splits, [32, 32])
        self.assertEqual(padded.sum().item(), 6.0)
        with self.assertRaises(ValueError) as caught:
            te.Fp8Padding(2)(torch.ones(3, 2), [1, 1, 1])
        self.assertIn("num_gemms=2", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            te.Fp8Padding(2)(torch.ones(3, 2), [1, 1])
        self.assertIn("sums to 2", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            te.Fp8Unpadding(2)(torch.ones(20, 2), [1, 1])
        self.assertIn("sum to 32", str(caught.exception))
        with self.assertRaises(ValueError):
            te.Fp8Padding(2, align_size=0)


if __name__ == "__main__":
    unittest.main()
