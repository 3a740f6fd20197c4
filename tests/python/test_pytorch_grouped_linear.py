"""tejit.pytorch.GroupedLinear, Fp8Padding and Fp8Unpadding on the CPU
(parameters on the CPU, no program runs): TE's parameter names and
shapes as views of one stacked buffer (what the program takes: the spec's
layers.0.weight [G, out, in] and layers.0.bias [G, out]), TE's
initialization, the stacked argument after a parameter was replaced
(values and gradients reach the right parameters), re-packing after
.to() and deepcopy, the constructor's refusals, m_splits given as a
tensor, fuse_wgrad_accumulation's stacked main_grad (a view of main_grads
back to back in order, else a copy written back; frozen experts; the
errors naming the parameter) and TE's .grad rule per weight, and
Fp8Padding / Fp8Unpadding against a per-segment reference.
Needs PyTorch (skipped without it; test_grouped_linear_args.py checks the
argument checks and the spec without it). tests/gpu/test_grouped_linear.py
runs the module.
Run: python3 -m pytest tests/python
"""
import copy
import unittest

from torch_free import HAVE_TORCH

if HAVE_TORCH:
    import torch

    import tejit
    import tejit.pytorch as te
    from tejit.pytorch.module import _main_grad, grouped_linear

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
        self.assertFalse(self.make().fuse_wgrad_accumulation)
        self.assertTrue(self.make(
            fuse_wgrad_accumulation=True).fuse_wgrad_accumulation)
        self.assertTrue(self.make(
            delay_wgrad_compute=True).need_backward_dw())
        for name in ("ub_overlap_rs", "ub_overlap_ag",
                     "save_original_input"):
            with self.subTest(name=name):
                with self.assertRaises(NotImplementedError) as caught:
                    self.make(**{name: True})
                self.assertIn(name, str(caught.exception))
        # Tensor parallelism as TE's: the rank's shapes, a spec of them
        # with no tensor-parallel keys (the layer communicates nothing), no
        # bias; sequence_parallel changes nothing.
        column = self.make(tp_size=2, parallel_mode="column", bias=False,
                           sequence_parallel=True)
        self.assertEqual((column.in_features, column.out_features), (64, 24))
        self.assertEqual(tuple(column.weight0.shape), (24, 64))
        self.assertEqual(column._layer_spec()["out_features"], 24)
        self.assertNotIn("tp_size", column._layer_spec())
        self.assertFalse(column._tp_communicates())
        row = self.make(tp_size=2, parallel_mode="row", bias=False)
        self.assertEqual(tuple(row.weight1.shape), (48, 32))
        self.assertEqual(row._layer_spec()["in_features"], 32)
        for mode in ("column", "row"):
            with self.assertRaises(ValueError) as caught:
                self.make(tp_size=2, parallel_mode=mode)
            self.assertIn("bias=True", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            self.make(tp_size=5, parallel_mode="column", bias=False)
        self.assertIn("out_features (48)", str(caught.exception))
        with self.assertRaises(ValueError):
            te.GroupedLinear(0, 64, 48, device=CPU)
        # TE's rule: nothing to split at tp_size 1.
        self.make(sequence_parallel=True, parallel_mode="row",
                  ub_name="fc1")
        # FP8 experts are quantized on the GPU (tejit's cast kernel).
        with self.assertRaises(ValueError) as caught:
            with te.fp8_model_init(enabled=True):
                self.make()
        self.assertIn("device='cuda'", str(caught.exception))

    def test_forward_needs_a_cuda_input(self):
        module = self.make()
        with self.assertRaises(ValueError) as caught:
            module(torch.randn(8, 64), [8, 0, 0])
        self.assertIn("CUDA", str(caught.exception))


if HAVE_TORCH:
    class FakeProgram(torch.autograd.Function):
        """What _autograd.ProgramFunction returns for the stacked weight
        under fuse_wgrad_accumulation: the slot's placeholder (or
        None)."""

        @staticmethod
        def forward(ctx, slot, stacked):
            ctx.slot, ctx.spec = slot, (tuple(stacked.shape), stacked.dtype)
            return torch.zeros(1, dtype=stacked.dtype)

        @staticmethod
        def backward(ctx, grad):
            shape, dtype = ctx.spec
            return None, ctx.slot.gradient(shape, dtype, torch.device(CPU))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class MainGradTest(unittest.TestCase):
    """fuse_wgrad_accumulation on the CPU: the buffer the program's
    backward adds into (module._main_grad_slot("weight"), as
    _autograd.ProgramFunction uses it) and the gradients autograd gets."""
    G, OUT, IN = 3, 48, 64
    SHAPE = (3, 48, 64)

    def make(self, **kwargs):
        return te.GroupedLinear(self.G, self.IN, self.OUT,
                                params_dtype=torch.float32, device=CPU,
                                fuse_wgrad_accumulation=True, **kwargs)

    def weights(self, module):
        return [getattr(module, f"weight{i}") for i in range(self.G)]

    def give_main_grads(self, module, order=None, dtype=None, gap=0):
        """Views of one random `dtype` (float32) buffer in `order` (weight
        indices, default 0..G-1), `gap` elements between them; returns
        the buffer."""
        dtype = dtype or torch.float32
        order = list(range(self.G)) if order is None else order
        size = self.OUT * self.IN
        flat = torch.randn(len(order) * (size + gap), dtype=dtype)
        for slot, index in enumerate(order):
            start = slot * (size + gap)
            self.weights(module)[index].main_grad = flat[
                start:start + size].view(self.OUT, self.IN)
        return flat

    def buffer(self, module, dtype=None):
        slot = module._main_grad_slot("weight")
        dtype = dtype or torch.float32
        return slot, slot.buffer(self.SHAPE, dtype, torch.device(CPU))

    def add_and_finish(self, module, slot, buffer):
        """What the backward does: add each expert's gradient (here
        index + 1) in place, then finish; returns the expected sums."""
        want = [w.main_grad + float(index + 1)
                for index, w in enumerate(self.weights(module))]
        if isinstance(buffer, _main_grad.GroupBuffers):
            for index, tensor in enumerate(buffer.tensors):
                tensor += float(index + 1)
        else:
            buffer += torch.arange(1.0, self.G + 1).view(self.G, 1, 1).to(
                buffer.dtype)
        slot.finish(buffer)
        return want

    def test_one_buffer_in_order_is_a_view(self):
        module = self.make()
        flat = self.give_main_grads(module)
        slot, buffer = self.buffer(module)
        self.assertEqual(tuple(buffer.shape), self.SHAPE)
        self.assertEqual(buffer.data_ptr(), flat.data_ptr())
        self.assertTrue(buffer.is_contiguous())
        want = self.add_and_finish(module, slot, buffer)
        for weight, expected in zip(self.weights(module), want):
            self.assertTrue(torch.equal(weight.main_grad, expected))
        # bf16 main_grads too, of the dtype the program takes.
        module = self.make()
        flat = self.give_main_grads(module, dtype=torch.bfloat16)
        _, buffer = self.buffer(module, torch.bfloat16)
        self.assertEqual(buffer.data_ptr(), flat.data_ptr())

    def test_other_layouts_are_per_group_buffers(self):
        """Main_grads not back to back in weight order reach the program as
        their own G buffers (GroupBuffers: set_group_pointers), no copy."""
        layouts = {"reversed": dict(order=[2, 1, 0]),
                   "shuffled": dict(order=[1, 0, 2]),
                   "gaps": dict(gap=8)}
        for name, layout in layouts.items():
            with self.subTest(layout=name):
                module = self.make()
                self.give_main_grads(module, **layout)
                slot, buffer = self.buffer(module)
                self.assertIsInstance(buffer, _main_grad.GroupBuffers)
                self.assertEqual(buffer.pointers(),
                                 [w.main_grad.data_ptr()
                                  for w in self.weights(module)])
                want = self.add_and_finish(module, slot, buffer)
                for index, weight in enumerate(self.weights(module)):
                    self.assertTrue(torch.equal(weight.main_grad,
                                                want[index]), index)
        # Tensors of their own.
        module = self.make()
        for weight in self.weights(module):
            weight.main_grad = torch.randn(self.OUT, self.IN)
        slot, buffer = self.buffer(module)
        self.assertIsInstance(buffer, _main_grad.GroupBuffers)
        want = self.add_and_finish(module, slot, buffer)
        for weight, expected in zip(self.weights(module), want):
            self.assertTrue(torch.equal(weight.main_grad, expected))

    def test_frozen_experts_need_no_main_grad(self):
        module = self.make()
        self.give_main_grads(module)
        module.weight1.requires_grad_(False)
        del module.weight1.main_grad
        slot, buffer = self.buffer(module)
        # The others' main_grads themselves, scratch zeros for weight1.
        self.assertIsInstance(buffer, _main_grad.GroupBuffers)
        self.assertEqual(buffer.tensors[1].abs().sum().item(), 0)
        self.assertEqual([buffer.pointers()[i] for i in (0, 2)],
                         [module.weight0.main_grad.data_ptr(),
                          module.weight2.main_grad.data_ptr()])
        kept = [module.weight0.main_grad.clone(),
                module.weight2.main_grad.clone()]
        for tensor in buffer.tensors:
            tensor += 5.0
        slot.finish(buffer)
        self.assertTrue(torch.equal(module.weight0.main_grad, kept[0] + 5))
        self.assertTrue(torch.equal(module.weight2.main_grad, kept[1] + 5))
        self.assertFalse(hasattr(module.weight1, "main_grad"))
        # Every expert frozen: a scratch buffer.
        module = self.make()
        for weight in self.weights(module):
            weight.requires_grad_(False)
        slot, buffer = self.buffer(module)
        self.assertEqual(tuple(buffer.shape), self.SHAPE)
        slot.finish(buffer)

    def test_bad_main_grads_name_the_parameter(self):
        cases = {
            "missing": (lambda w: delattr(w, "main_grad"), "no .main_grad"),
            "shape": (lambda w: setattr(w, "main_grad", torch.zeros(
                self.IN, self.OUT)), "(64, 48)"),
            "dtype": (lambda w: setattr(w, "main_grad", torch.zeros(
                self.OUT, self.IN, dtype=torch.bfloat16)), "bfloat16"),
            "layout": (lambda w: setattr(w, "main_grad", torch.zeros(
                self.IN, self.OUT).t()), "not contiguous"),
        }
        for name, (spoil, words) in cases.items():
            with self.subTest(case=name):
                module = self.make()
                self.give_main_grads(module)
                spoil(module.weight2)
                with self.assertRaises(RuntimeError) as caught:
                    self.buffer(module)
                self.assertIn("weight2", str(caught.exception))
                self.assertIn(words, str(caught.exception))
        # Mixed dtypes: the module's main_grad dtype is refused first.
        module = self.make()
        self.give_main_grads(module)
        module.weight1.main_grad = module.weight1.main_grad.to(
            torch.float64)
        with self.assertRaises(RuntimeError) as caught:
            _main_grad.main_grad_dtype(module.parameters())
        self.assertIn("share one dtype", str(caught.exception))

    def backward(self, module, dtype=None):
        """The stacked argument through a fake program whose backward
        returns the slot's placeholder, as ProgramFunction does."""
        dtype = dtype or torch.float32
        stacked = module._argument("weight", dtype)
        self.assertEqual(tuple(stacked.shape), self.SHAPE)
        FakeProgram.apply(module._main_grad_slot("weight"),
                          stacked).sum().backward()

    def test_te_grad_rule(self):
        module = self.make()
        self.give_main_grads(module)
        stacked = module._argument("weight", torch.float32)
        # The weights' own buffer, no copy.
        self.assertEqual(stacked.data_ptr(), module.weight0.data_ptr())
        for weight in self.weights(module):
            weight.grad_added_to_main_grad = False
        module.weight2.zero_out_wgrad = True
        self.backward(module)
        for weight in self.weights(module):
            self.assertTrue(weight.grad_added_to_main_grad)
            self.assertEqual(tuple(weight.grad.shape), (self.OUT, self.IN))
        self.assertEqual(module.weight2.grad.abs().sum().item(), 0)
        # Without the attribute: no .grad at all (not zeros).
        module = self.make()
        self.give_main_grads(module)
        self.backward(module)
        for weight in self.weights(module):
            self.assertIsNone(weight.grad)
            self.assertFalse(hasattr(weight, "grad_added_to_main_grad"))
        # Per weight: only those with it get a placeholder.
        module = self.make()
        self.give_main_grads(module)
        module.weight1.grad_added_to_main_grad = False
        module.weight1.zero_out_wgrad = True
        self.backward(module)
        self.assertIsNone(module.weight0.grad)
        self.assertIsNone(module.weight2.grad)
        self.assertTrue(module.weight1.grad_added_to_main_grad)
        self.assertEqual(module.weight1.grad.abs().sum().item(), 0)

    def test_grad_rule_through_casts_and_frozen_experts(self):
        """A cast argument (torch.autocast's dtype): a stack of the casts,
        the placeholders cast back to the weights' dtype; a frozen expert
        gets nothing."""
        module = self.make()
        self.give_main_grads(module)
        module.weight0.requires_grad_(False)
        for weight in self.weights(module):
            weight.grad_added_to_main_grad = False
            weight.zero_out_wgrad = True
        stacked = module._argument("weight", torch.float64)
        self.assertEqual(stacked.dtype, torch.float64)
        self.assertTrue(torch.equal(stacked[1], module.weight1.double()))
        self.backward(module, torch.float64)
        self.assertIsNone(module.weight0.grad)
        self.assertFalse(module.weight0.grad_added_to_main_grad)
        for weight in (module.weight1, module.weight2):
            self.assertTrue(weight.grad_added_to_main_grad)
            self.assertEqual(weight.grad.dtype, torch.float32)
            self.assertEqual(weight.grad.abs().sum().item(), 0)

    def test_replaced_weight_is_stacked(self):
        module = self.make()
        module.weight1 = torch.nn.Parameter(torch.randn(self.OUT, self.IN))
        stacked = module._argument("weight", torch.float32)
        self.assertNotEqual(stacked.data_ptr(), module.weight0.data_ptr())
        self.assertTrue(torch.equal(stacked[1], module.weight1))
        for weight in self.weights(module):
            weight.grad_added_to_main_grad = False
        self.give_main_grads(module)
        self.backward(module)
        self.assertEqual(tuple(module.weight1.grad.shape),
                         (self.OUT, self.IN))


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
