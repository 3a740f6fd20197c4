"""tejit.pytorch's DotProductAttention, MultiheadAttention and
TransformerLayer on the CPU (parameters on the CPU, nothing runs): TE's
constructor arguments, the errors naming unsupported ones, parameter names
and shapes against TE's, the fused QKV tensor the program gets (no copy
while the split parameters are adjacent; gradients split back; TE's
interleaved layout permuted), state_dict round trips (TE checkpoints with
`_extra_state` included), the spec each module compiles (its inputs bind
to the module's tensors), the JIT key of a call and the sliding window
(window_size) each call compiles. Needs PyTorch (skipped without it;
test_attention_specs.py checks the specs without it).
Run: python3 -m pytest tests/python"""
import re
import unittest
import warnings

from torch_free import HAVE_TORCH, RefusalAssertions

if HAVE_TORCH:
    import torch

    import tejit
    import tejit.pytorch as te
    from tejit.pytorch.module import _attention_specs, _thd, attention
    from tejit.pytorch.module.base import SPEC_DTYPES

CPU = "cpu"
_ARGUMENT = re.compile(r'%arg\d+: tensor<([^>]*)> \{te\.name = "([^"]+)"')


def program_arguments(module, dtype="bf16", seq=8, batch=2, mask=None,
                      rotary=False):
    """{name: (shape tuple, dtype string)} of the forward's arguments of
    the program `module` would compile for an [s, b] call."""
    if isinstance(module, te.DotProductAttention):
        layer = module._layer_spec(mask)
        fmt = module.qkv_format
    elif isinstance(module, te.TransformerLayer):
        layer = module._layer_spec(mask, rotary)
        fmt = module.attn_input_format
    else:
        layer = module._layer_spec(mask, rotary)
        fmt = module.qkv_format
    return arguments_of(_attention_specs.program_spec(
        type(module).__name__, dtype, fmt, seq, batch, layer))


def arguments_of(spec):
    """{name: (shape tuple, dtype string)} of the forward's arguments of
    the program of `spec`."""
    text = tejit.compile_ir(spec, "te")
    header = next(line for line in text.splitlines() if "func.func" in line)
    header = header.split(") -> (")[0]
    result = {}
    for shape, name in _ARGUMENT.findall(header):
        *dims, element = shape.split("x")
        result[name] = (tuple(int(d) for d in dims), element)
    return result


def te_names(prefix, norm="LayerNorm", fused=False, bias=True):
    names = [prefix + n for n in _attention_specs.qkv_parameter_names(
        fused, bias, norm)]
    return names


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ConstructionTest(unittest.TestCase):
    def test_dot_product_attention_defaults(self):
        dpa = te.DotProductAttention(8, 64)
        self.assertEqual((dpa.num_gqa_groups, dpa.attention_dropout,
                          dpa.qkv_format, dpa.attn_mask_type),
                         (8, 0.0, "sbhd", "causal"))
        self.assertAlmostEqual(dpa.softmax_scale, 0.125)
        self.assertEqual(list(dpa.parameters()), [])
        self.assertEqual(te.DotProductAttention(8, (64, 64)).kv_channels, 64)

    def test_multihead_attention_names_and_shapes(self):
        mha = te.MultiheadAttention(64, 4, num_gqa_groups=2,
                                    input_layernorm=True,
                                    params_dtype=torch.bfloat16, device=CPU)
        names = [n for n, _ in mha.named_parameters()]
        self.assertEqual(names, te_names("layernorm_qkv.") +
                         ["proj.weight", "proj.bias"])
        shapes = {n: tuple(p.shape) for n, p in mha.named_parameters()}
        self.assertEqual(shapes["layernorm_qkv.query_weight"], (64, 64))
        self.assertEqual(shapes["layernorm_qkv.key_weight"], (32, 64))
        self.assertEqual(shapes["layernorm_qkv.value_bias"], (32,))
        self.assertEqual(shapes["proj.weight"], (64, 64))
        self.assertTrue(all(p.dtype == torch.bfloat16
                            for p in mha.parameters()))
        # Without the input norm: `qkv.`; fused: weight/bias.
        plain = te.MultiheadAttention(64, 4, device=CPU)
        self.assertEqual([n for n, _ in plain.named_parameters()],
                         te_names("qkv.", norm=None) +
                         ["proj.weight", "proj.bias"])
        fused = te.MultiheadAttention(64, 4, fuse_qkv_params=True,
                                      bias=False, device=CPU)
        self.assertEqual([n for n, _ in fused.named_parameters()],
                         ["qkv.weight", "proj.weight"])
        self.assertEqual(tuple(fused.qkv.weight.shape), (192, 64))

    def test_transformer_layer_names(self):
        layer = te.TransformerLayer(64, 256, 4, normalization="RMSNorm",
                                    activation="swiglu", device=CPU)
        names = [n for n, _ in layer.named_parameters()]
        self.assertEqual(names, te_names(
            "self_attention.layernorm_qkv.", norm="RMSNorm") + [
            "self_attention.proj.weight", "self_attention.proj.bias",
            "layernorm_mlp.layer_norm_weight", "layernorm_mlp.fc1_weight",
            "layernorm_mlp.fc1_bias", "layernorm_mlp.fc2_weight",
            "layernorm_mlp.fc2_bias"])
        self.assertEqual(tuple(layer.layernorm_mlp.fc1_weight.shape),
                         (512, 64))
        self.assertIsInstance(layer.self_attention, te.MultiheadAttention)
        self.assertIsInstance(layer.self_attention.core_attention,
                              te.DotProductAttention)

    def test_initialization(self):
        torch.manual_seed(0)
        layer = te.TransformerLayer(256, 1024, 4, device=CPU,
                                    zero_centered_gamma=True)
        qkv = layer.self_attention.layernorm_qkv
        for weight in (qkv.query_weight, qkv.key_weight,
                       layer.self_attention.proj.weight,
                       layer.layernorm_mlp.fc2_weight):
            self.assertAlmostEqual(weight.float().std().item(), 0.023,
                                   delta=0.002)
        self.assertEqual(qkv.query_bias.abs().max().item(), 0)
        self.assertEqual(qkv.layer_norm_weight.abs().max().item(), 0)
        layer = te.TransformerLayer(
            64, 256, 4, device=CPU,
            init_method=torch.nn.init.ones_,
            output_layer_init_method=torch.nn.init.zeros_)
        self.assertTrue(bool((layer.self_attention.layernorm_qkv.value_weight
                              == 1).all()))
        self.assertTrue(bool((layer.layernorm_mlp.fc1_weight == 1).all()))
        self.assertTrue(bool((layer.self_attention.proj.weight == 0).all()))
        self.assertTrue(bool((layer.layernorm_mlp.fc2_weight == 0).all()))
        self.assertTrue(bool((layer.self_attention.layernorm_qkv
                              .layer_norm_weight == 1).all()))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ArgumentTest(RefusalAssertions, unittest.TestCase):

    def test_unsupported_constructor_arguments(self):
        cases = [
            (lambda: te.DotProductAttention(8, 64, window_size=(128, 0),
                                            attn_mask_type="arbitrary"),
             "window_size"),
            (lambda: te.MultiheadAttention(64, 4, qkv_format="thd",
                                           attention_type="cross",
                                           device=CPU), "thd"),
            (lambda: te.TransformerLayer(64, 256, 4, attn_input_format="thd",
                                         layer_type="decoder",
                                         device=CPU), "thd"),
            (lambda: te.DotProductAttention(
                8, 64, cp_group=[object(), object()],
                cp_comm_type="a2a+p2p"), "cp_group"),
            (lambda: te.DotProductAttention(8, (64, 32)), "kv_channels"),
            (lambda: te.MultiheadAttention(
                64, 4, attention_type="cross",
                attn_mask_type="causal_bottom_right", device=CPU),
             "attn_mask_type"),
            (lambda: te.MultiheadAttention(64, 4, attention_type="cross",
                                           window_size=(8, 0), device=CPU),
             "cross-attention"),
            (lambda: te.MultiheadAttention(64, 4, sequence_parallel=True,
                                           tp_size=2, set_parallel_mode=True,
                                           qkv_format="thd", device=CPU),
             "sequence_parallel"),
            (lambda: te.MultiheadAttention(64, 4, ub_overlap_ag=True,
                                           device=CPU), "ub_overlap_ag"),
            (lambda: te.TransformerLayer(
                64, 256, 4, layer_type="decoder",
                enc_dec_attn_mask_type="padding_causal_bottom_right",
                device=CPU), "enc_dec_attn_mask_type"),
            (lambda: te.TransformerLayer(64, 256, 4, ub_tp_comm_overlap=True,
                                         device=CPU), "ub_tp_comm_overlap"),
            (lambda: te.TransformerLayer(64, 256, 4,
                                         enc_dec_window_size=(64, 64),
                                         device=CPU), "enc_dec_window_size"),
            (lambda: te.MultiheadAttention(64, 4, window_size=(8, 8),
                                           attn_mask_type="arbitrary",
                                           device=CPU), "window_size"),
            (lambda: te.MultiheadAttention(64, 4, window_size=(8, 8),
                                           attn_mask_type="padding",
                                           device=CPU), "window_size"),
        ]
        for factory, word in cases:
            with self.subTest(word=word):
                self.assertRefused(NotImplementedError, factory, word)

    def test_bad_values(self):
        self.assertRefused(ValueError,
                           lambda: te.DotProductAttention(8, 64,
                                                          num_gqa_groups=3),
                           "num_gqa_groups")
        self.assertRefused(ValueError,
                           lambda: te.DotProductAttention(8, 64, tp_size=3),
                           "num_attention_heads", "tp_size")
        self.assertRefused(ValueError,
                           lambda: te.DotProductAttention(
                               8, 64, attn_mask_type="sliding"),
                           "attn_mask_type")
        self.assertRefused(ValueError,
                           lambda: te.TransformerLayer(64, 256, 4,
                                                       activation="tanh",
                                                       device=CPU),
                           "activation")
        self.assertRefused(ValueError,
                           lambda: te.MultiheadAttention(
                               64, 4, normalization="BatchNorm", device=CPU),
                           "normalization")
        for window in ((-2, 0), (1, 2, 3), 8, (1.5, 0)):
            with self.subTest(window=window):
                self.assertRefused(ValueError,
                                   lambda: te.DotProductAttention(
                                       8, 64, window_size=window),
                                   "DotProductAttention", "window_size",
                                   ">= -1")
        self.assertRefused(ValueError,
                           lambda: te.TransformerLayer(
                               64, 256, 4, window_size=(0, -4), device=CPU),
                           "TransformerLayer", "window_size")

    def test_accepted_defaults(self):
        # TE's defaults (ub_* True in TransformerLayer act only with
        # ub_tp_comm_overlap) and no-op arguments construct.
        te.TransformerLayer(64, 256, 4, seq_length=8, micro_batch_size=2,
                            layer_number=3, set_parallel_mode=True,
                            window_size=(-1, 0), device=CPU, name="block")
        te.DotProductAttention(8, 64, window_size=(-1, -1),
                               attn_mask_type="no_mask", layer_number=1)

    def test_forward_refusals(self):
        mha = te.MultiheadAttention(64, 4, device=CPU)
        x = torch.zeros(8, 2, 64)
        # (Attention bias and ALiBi: test_pytorch_attention_bias.py.)
        cases = [
            (dict(cu_seqlens_q=torch.zeros(3)), "cu_seqlens_q"),
            (dict(encoder_output=x), "encoder_output"),
            (dict(attn_mask_type="arbitrary", window_size=(4, 4)),
             "window_size"),
        ]
        original = attention.check_input
        attention.check_input = lambda *args: None  # no CUDA here
        try:
            for kwargs, word in cases:
                with self.subTest(word=word):
                    self.assertRefused(NotImplementedError,
                                       lambda: mha(x, **kwargs), word)
            self.assertRefused(NotImplementedError,
                               lambda: mha(x, max_seqlen_q=16),
                               "max_seqlen_q")
            # A KV cache (tests/python/test_pytorch_kv_cache.py): TE's
            # InferenceParams only, and in inference only.
            self.assertRefused(TypeError,
                               lambda: mha(x, inference_params=object()),
                               "inference_params", "InferenceParams")
            self.assertRefused(ValueError,
                               lambda: mha(x, attn_mask_type="padding"),
                               "attention_mask")
            self.assertRefused(ValueError,
                               lambda: mha(x, window_size=(-7, 0)),
                               "MultiheadAttention.forward", "window_size")
            self.assertRefused(
                ValueError, lambda: mha(x, attn_mask_type="padding",
                                        attention_mask=torch.zeros(
                                            2, 1, 1, 4, dtype=torch.bool)),
                "[2, 1, 1, 8]")
            self.assertRefused(
                TypeError, lambda: mha(x, attn_mask_type="padding",
                                       attention_mask=torch.zeros(2, 1, 1, 8)),
                "torch.bool")
            # A table rotates an even number of channels, at most a head.
            for width in (7, 4 * mha.kv_channels):
                self.assertRefused(
                    ValueError,
                    lambda: mha(x, rotary_pos_emb=torch.zeros(8, 1, 1,
                                                              width)),
                    "rotary_pos_emb")
            # TE's (query, key/value) pairs: one tensor twice is unwrapped
            # (and checked as one mask), different ones are refused.
            small = torch.zeros(2, 1, 1, 4, dtype=torch.bool)
            self.assertRefused(
                ValueError, lambda: mha(x, attn_mask_type="padding",
                                        attention_mask=(small, small)),
                "[2, 1, 1, 8]")
            self.assertRefused(
                NotImplementedError,
                lambda: mha(x, attn_mask_type="padding",
                            attention_mask=(small, ~small)),
                "cross-attention")
            freqs = torch.zeros(8, 1, 1, 8)
            self.assertRefused(
                NotImplementedError,
                lambda: mha(x, rotary_pos_emb=(freqs, freqs + 1)),
                "pass one freqs tensor")
        finally:
            attention.check_input = original
        self.assertRefused(ValueError, lambda: mha(x), "CUDA")


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class FusedQkvTest(unittest.TestCase):
    def test_adjacent_views_are_passed_without_a_copy(self):
        mha = te.MultiheadAttention(64, 4, num_gqa_groups=2, device=CPU)
        qkv = mha.qkv
        weight = mha._argument("qkv.weight", torch.float32)
        self.assertEqual(tuple(weight.shape), (128, 64))
        self.assertEqual(weight.data_ptr(), qkv.query_weight.data_ptr())
        self.assertTrue(weight.is_contiguous())
        self.assertTrue(torch.equal(weight, torch.cat(
            [qkv.query_weight, qkv.key_weight, qkv.value_weight])))
        bias = mha._argument("qkv.bias", torch.float32)
        self.assertEqual(bias.data_ptr(), qkv.query_bias.data_ptr())
        # Gradients split back into the three parameters.
        grad = torch.arange(128 * 64, dtype=torch.float32).view(128, 64)
        (weight * grad).sum().backward()
        self.assertTrue(torch.equal(qkv.query_weight.grad, grad[:64]))
        self.assertTrue(torch.equal(qkv.key_weight.grad, grad[64:96]))
        self.assertTrue(torch.equal(qkv.value_weight.grad, grad[96:]))

    def test_replaced_parameters_are_concatenated(self):
        mha = te.MultiheadAttention(64, 4, device=CPU)
        mha.qkv.key_weight = torch.nn.Parameter(
            mha.qkv.key_weight.detach().clone())
        weight = mha._argument("qkv.weight", torch.float32)
        self.assertNotEqual(weight.data_ptr(), mha.qkv.query_weight.data_ptr())
        self.assertTrue(torch.equal(weight[64:128], mha.qkv.key_weight))

    def test_conversion_repacks(self):
        mha = te.MultiheadAttention(64, 4, device=CPU)
        query = mha.qkv.query_weight
        mha.to(torch.float64)
        self.assertIs(mha.qkv.query_weight, query)
        self.assertEqual(query.dtype, torch.float64)
        weight = mha._argument("qkv.weight", torch.float64)
        self.assertEqual(weight.data_ptr(), query.data_ptr())

    def test_interleaved_rows_are_permuted(self):
        mha = te.MultiheadAttention(64, 4, num_gqa_groups=2, kv_channels=8,
                                    fuse_qkv_params=True, device=CPU)
        self.assertTrue(mha.qkv_weight_interleaved)
        with torch.no_grad():
            mha.qkv.weight.copy_(torch.arange(64, dtype=torch.float32)
                                 .view(64, 1).expand(64, 64))
            mha.qkv.bias.copy_(torch.arange(64, dtype=torch.float32))
        rows = _attention_specs.interleaved_qkv_rows(4, 2, 8)
        weight = mha._argument("qkv.weight", torch.float32)
        self.assertEqual(weight[:, 0].tolist(), [float(r) for r in rows])
        self.assertEqual(mha._argument("qkv.bias", torch.float32).tolist(),
                         [float(r) for r in rows])
        weight.sum().backward()
        self.assertTrue(bool((mha.qkv.weight.grad == 1).all()))
        # Not interleaved: the rows are q | k | v already.
        plain = te.MultiheadAttention(64, 4, fuse_qkv_params=True,
                                      qkv_weight_interleaved=False,
                                      device=CPU)
        self.assertIs(plain._argument("qkv.weight", torch.float32),
                      plain.qkv.weight)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class StateDictTest(unittest.TestCase):
    def test_round_trip(self):
        a = te.TransformerLayer(64, 256, 4, device=CPU)
        b = te.TransformerLayer(64, 256, 4, device=CPU)
        state = a.state_dict()
        self.assertEqual(list(state), [n for n, _ in a.named_parameters()])
        b.load_state_dict(state)
        for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
            self.assertTrue(torch.equal(pa, pb), name)
        # Loading copies in place: the split views stay one buffer.
        qkv = b.self_attention.layernorm_qkv
        self.assertEqual(
            b._argument("self_attention.layernorm_qkv.weight",
                        torch.float32).data_ptr(),
            qkv.query_weight.data_ptr())

    def test_te_checkpoint_with_extra_state_loads(self):
        layer = te.TransformerLayer(64, 256, 4, device=CPU)
        state = {name: torch.randn_like(p)
                 for name, p in layer.named_parameters()}
        # TE saves each TE module's FP8 state as `_extra_state` (empty
        # before FP8 ran).
        for prefix in ("self_attention.layernorm_qkv.",
                       "self_attention.core_attention.",
                       "self_attention.proj.", "layernorm_mlp.", ""):
            state[prefix + "_extra_state"] = torch.empty(0, dtype=torch.uint8)
        result = layer.load_state_dict(state, strict=True)
        self.assertEqual((result.missing_keys, result.unexpected_keys),
                         ([], []))
        self.assertTrue(torch.equal(layer.layernorm_mlp.fc1_weight,
                                    state["layernorm_mlp.fc1_weight"]))
        state["layernorm_mlp._extra_state"] = torch.ones(4, dtype=torch.uint8)
        with self.assertWarns(UserWarning):
            layer.load_state_dict(state)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class SpecTest(unittest.TestCase):
    def check_binds(self, module, **call):
        """Every parameter input of the module's program is a tensor of
        the module of the same shape."""
        args = program_arguments(module, **call)
        count = 0
        for name, (shape, element) in args.items():
            if not name.startswith("layers.0."):
                continue
            tensor = module._argument(name[len("layers.0."):],
                                      torch.bfloat16)
            self.assertEqual(tuple(tensor.shape), shape, name)
            count += 1
        self.assertEqual(count, len(args) - sum(
            1 for n in args if not n.startswith("layers.0.")))
        return args

    def test_parameters_bind(self):
        bf16 = torch.bfloat16
        self.check_binds(te.TransformerLayer(64, 256, 4, num_gqa_groups=2,
                                             params_dtype=bf16, device=CPU))
        self.check_binds(te.TransformerLayer(
            64, 256, 4, fuse_qkv_params=True, bias=False,
            normalization="RMSNorm", activation="swiglu", params_dtype=bf16,
            device=CPU))
        args = self.check_binds(te.MultiheadAttention(
            64, 4, kv_channels=32, params_dtype=bf16, device=CPU),
            rotary=True, mask="padding")
        self.assertEqual(args["rotary_pos_emb"], ((8, 1, 1, 32), "f32"))
        self.assertEqual(args["attention_mask"], ((2, 1, 1, 8), "i1"))
        args = self.check_binds(te.DotProductAttention(4, 16,
                                                       qkv_format="bshd"))
        self.assertEqual(args["query"], ((2, 8, 4, 16), "bf16"))

    def test_dropout_follows_the_mode(self):
        layer = te.TransformerLayer(64, 256, 4, hidden_dropout=0.2,
                                    device=CPU)
        spec = layer._layer_spec()
        self.assertEqual((spec["hidden_dropout"], spec["attention_dropout"]),
                         (0.2, 0.1))
        self.assertTrue(layer._dropout_active())
        layer.eval()
        spec = layer._layer_spec()
        self.assertEqual((spec["hidden_dropout"], spec["attention_dropout"]),
                         (0.0, 0.0))
        self.assertFalse(layer._dropout_active())
        quiet = te.TransformerLayer(64, 256, 4, hidden_dropout=0.0,
                                    attention_dropout=0.0, device=CPU)
        self.assertFalse(quiet._dropout_active())


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class JitKeyTest(unittest.TestCase):
    """The key of a call, captured before anything compiles (no GPU)."""

    def calls(self, module, calls):
        seen = []

        def capture(activations, dtype, shape_key, shape_spec, shape,
                    layer_spec=None, variant=(), is_first_microbatch=None):
            seen.append((shape_key, dtype, variant, shape_spec,
                         layer_spec(), sorted(activations)))
            out = torch.zeros(1)
            return {"output": out, "ln_output": out}

        module._run_program = capture
        original = attention.check_input
        attention.check_input = lambda *args: None
        try:
            for args, kwargs in calls:
                module(*args, **kwargs)
        finally:
            attention.check_input = original
        return seen

    def test_multihead_attention_layernorm_output(self):
        """return_layernorm_output reaches the spec with input_layernorm
        only (as TE returns the norm's output only then); the forward
        returns (output, proj bias, norm output) in TE's order."""
        plain = te.MultiheadAttention(64, 4, return_layernorm_output=True,
                                      device=CPU)
        normed = te.MultiheadAttention(64, 4, return_layernorm_output=True,
                                       input_layernorm=True,
                                       return_bias=True, device=CPU)
        x = torch.zeros(8, 2, 64)
        seen = self.calls(plain, [((x,), {})])
        self.assertNotIn("return_layernorm_output", seen[0][4])
        seen = self.calls(normed, [((x,), {})])
        self.assertTrue(seen[0][4]["return_layernorm_output"])
        text = tejit.compile_ir(_attention_specs.program_spec(
            "MultiheadAttention", "bf16", "sbhd", 8, 2, seen[0][4]), "te")
        self.assertIn(".ln_output", text)

    def test_drop_path(self):
        """drop_path_rate reaches the spec in training mode only."""
        layer = te.TransformerLayer(64, 256, 4, device=CPU,
                                    hidden_dropout=0.0, attention_dropout=0.0,
                                    drop_path_rate=0.2)
        x = torch.zeros(8, 2, 64)
        seen = self.calls(layer, [((x,), {})])
        self.assertEqual(seen[0][4]["drop_path_rate"], 0.2)
        self.assertTrue(seen[0][2][1])  # dropout active: its own program
        layer.eval()
        seen = self.calls(layer, [((x,), {})])
        self.assertNotIn("drop_path_rate", seen[0][4])
        with self.assertRaises(ValueError):
            te.TransformerLayer(64, 256, 4, device=CPU, drop_path_rate=1.0)

    def test_rotary_layouts(self):
        """A table narrower than a head (partial rotary) keys its own
        program and writes rotary_dim; rotary_pos_interleaved reaches the
        spec with a table only."""
        layer = te.TransformerLayer(64, 256, 4, device=CPU,
                                    rotary_pos_interleaved=True)
        self.assertTrue(layer.self_attention.rotary_pos_interleaved)
        x = torch.zeros(8, 2, 64)
        seen = self.calls(layer, [
            ((x,), dict(rotary_pos_emb=torch.zeros(8, 1, 1, 16))),
            ((x,), dict(rotary_pos_emb=torch.zeros(8, 1, 1, 4))),
            ((x,), {})])
        self.assertEqual([key[2][2] for key in seen], [16, 4, 0])
        self.assertNotIn("rotary_dim", seen[0][4])
        self.assertEqual(seen[1][4]["rotary_dim"], 4)
        self.assertTrue(seen[0][4]["rotary_pos_interleaved"])
        self.assertNotIn("rotary_pos_interleaved", seen[2][4])
        args = arguments_of(_attention_specs.program_spec(
            "TransformerLayer", "bf16", "sbhd", 8, 2, seen[1][4]))
        self.assertEqual(args["rotary_pos_emb"], ((8, 1, 1, 4), "f32"))

    def test_parallel_attention_mlp(self):
        """TE's parallel block: the flag reaches the spec; TE's
        constraints are ValueErrors."""
        layer = te.TransformerLayer(64, 256, 4, device=CPU,
                                    parallel_attention_mlp=True)
        seen = self.calls(layer, [((torch.zeros(8, 2, 64),), {})])
        self.assertTrue(seen[0][4]["parallel_attention_mlp"])
        for conflict in (dict(layer_type="decoder"),
                         dict(apply_residual_connection_post_layernorm=True),
                         dict(output_layernorm=True)):
            with self.assertRaises(ValueError):
                te.TransformerLayer(64, 256, 4, device=CPU,
                                    parallel_attention_mlp=True, **conflict)

    def test_transformer_layer_keys(self):
        layer = te.TransformerLayer(64, 256, 4, device=CPU,
                                    attn_input_format="bshd")
        x = torch.zeros(2, 8, 64)
        mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
        freqs = torch.zeros(16, 1, 1, 16)
        seen = self.calls(layer, [
            ((x,), {}),
            ((x,), dict(self_attn_mask_type="padding", attention_mask=mask)),
            ((x,), dict(rotary_pos_emb=freqs)),
            ((torch.zeros(3, 16, 64),), {}),
        ])
        self.assertEqual(seen[0][0], ("bshd", 8, 2, None))
        self.assertEqual(seen[0][2],
                         ("causal", True, False, (-1, 0), None, False))
        self.assertEqual(seen[0][3], {"seq_length": 8, "batch_size": 2,
                                      "input_format": "bshd"})
        self.assertEqual(seen[0][5], ["input"])
        self.assertEqual(seen[1][2],
                         ("padding", True, False, (-1, -1), None, False))
        self.assertEqual(seen[1][4]["self_attn_mask_type"], "padding")
        self.assertEqual(seen[1][5], ["attention_mask", "input"])
        self.assertEqual(seen[2][2],
                         ("causal", True, 16, (-1, 0), None, False))
        self.assertTrue(seen[2][4]["rotary_pos_emb"])
        self.assertNotIn("rotary_dim", seen[2][4])
        self.assertEqual(seen[3][0], ("bshd", 16, 3, None))
        layer.eval()
        seen = self.calls(layer, [((x,), {})])
        self.assertEqual(seen[0][2],
                         ("causal", False, False, (-1, 0), None, False))
        self.assertEqual(seen[0][4]["hidden_dropout"], 0.0)
        self.assertNotIn("window_size", seen[0][4])

    def test_dot_product_attention_keys(self):
        dpa = te.DotProductAttention(4, 16, num_gqa_groups=1)
        q = torch.zeros(8, 2, 4, 16)
        kv = torch.zeros(8, 2, 1, 16)
        seen = self.calls(dpa, [((q, kv, kv), {}),
                                ((q, kv, kv), dict(attn_mask_type="no_mask")),
                                ((q.transpose(0, 1), kv.transpose(0, 1),
                                  kv.transpose(0, 1)),
                                 dict(qkv_format="bshd"))])
        self.assertEqual(seen[0][0], ("sbhd", 8, 2, 8))
        self.assertEqual(seen[0][2], ("causal", False, (-1, 0), False))
        self.assertEqual(seen[1][2], ("no_mask", False, (-1, -1), False))
        self.assertEqual(seen[1][4]["attn_mask_type"], "no_mask")
        self.assertEqual(seen[2][0], ("bshd", 8, 2, 8))
        self.assertEqual(seen[2][3]["input_format"], "bshd")
        self.assertEqual(seen[0][1], torch.float32)
        self.assertIn(torch.float32, SPEC_DTYPES)

    def test_dot_product_attention_windows(self):
        dpa = te.DotProductAttention(4, 16, num_gqa_groups=2,
                                     window_size=[64, 0])
        self.assertEqual(dpa.window_size, (64, 0))
        q = torch.zeros(8, 2, 4, 16)
        kv = torch.zeros(8, 2, 2, 16)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seen = self.calls(dpa, [
                ((q, kv, kv), {}),
                # The forward's window overrides the constructor's.
                ((q, kv, kv), dict(window_size=(32, 0))),
                # Another mask type keeps the constructor's window.
                ((q, kv, kv), dict(attn_mask_type="no_mask")),
                ((q, kv, kv), dict(attn_mask_type="no_mask",
                                   window_size=(16, -1))),
                ((q, kv, kv), dict(window_size=(-1, 0))),
                # TE's correction: a causal window sees no later key.
                ((q, kv, kv), dict(window_size=(8, 8)))])
        self.assertEqual(len(caught), 1)
        self.assertIn("(8, 0)", str(caught[0].message))
        variants = [key[2] for key in seen]
        self.assertEqual(variants, [
            ("causal", False, (64, 0), False),
            ("causal", False, (32, 0), False),
            ("no_mask", False, (64, 0), False),
            ("no_mask", False, (16, -1), False),
            ("causal", False, (-1, 0), False),
            ("causal", False, (8, 0), False)])
        self.assertEqual(len(set(variants)), len(variants))
        windows = [key[4].get("window_size") for key in seen]
        self.assertEqual(windows, [[64, 0], [32, 0], [64, 0], [16, -1], None,
                                   [8, 0]])
        # A right bound cuDNN does not compute: refused before compiling.
        with self.assertRaises(NotImplementedError) as caught:
            self.calls(dpa, [((q, kv, kv), dict(attn_mask_type="no_mask",
                                                window_size=(16, 16)))])
        self.assertIn("DotProductAttention.forward(window_size=(16, 16))",
                      str(caught.exception))
        # Without a window of its own a forward with another mask type
        # gets that type's default, with no warning.
        plain = te.DotProductAttention(4, 16, num_gqa_groups=2)
        self.assertEqual(plain.window_size, (-1, 0))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            seen = self.calls(plain, [
                ((q, kv, kv), dict(attn_mask_type="no_mask"))])
        self.assertEqual(seen[0][2], ("no_mask", False, (-1, -1), False))
        self.assertNotIn("window_size", seen[0][4])

    def test_block_windows(self):
        with self.assertWarns(UserWarning):
            layer = te.TransformerLayer(64, 256, 4, window_size=(128, 128),
                                        device=CPU)
        # TE's: the layer keeps the window as given, its submodules the
        # normalized one.
        self.assertEqual(layer.window_size, (128, 128))
        self.assertEqual(layer.self_attention.window_size, (128, 0))
        self.assertEqual(layer.self_attention.core_attention.window_size,
                         (128, 0))
        x = torch.zeros(8, 2, 64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.assertEqual(layer._layer_spec()["window_size"], [128, 0])
            seen = self.calls(layer, [
                ((x,), {}), ((x,), dict(window_size=(4, 0))),
                ((x,), dict(self_attn_mask_type="no_mask",
                            window_size=(64, -1))),
                ((x,), dict(window_size=(-1, 0)))])
            # Without a causal mask type the window as given, (128, 128),
            # has a right bound cuDNN does not compute.
            with self.assertRaises(NotImplementedError) as caught:
                self.calls(layer, [((x,), dict(
                    self_attn_mask_type="no_mask"))])
            self.assertIn("TransformerLayer(window_size=(128, 128))",
                          str(caught.exception))
        self.assertEqual([key[2][3] for key in seen],
                         [(128, 0), (4, 0), (64, -1), (-1, 0)])
        self.assertEqual([key[4].get("window_size") for key in seen],
                         [[128, 0], [4, 0], [64, -1], None])
        mha = te.MultiheadAttention(64, 4, window_size=(16, 0),
                                    attn_mask_type="padding_causal",
                                    device=CPU)
        mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
        seen = self.calls(mha, [
            ((x,), dict(attention_mask=mask)),
            ((x,), dict(attention_mask=mask, window_size=(2, 0)))])
        self.assertEqual([key[2] for key in seen],
                         [("padding_causal", True, False, (16, 0), None,
                           False),
                          ("padding_causal", True, False, (2, 0), None,
                           False)])
        self.assertEqual(seen[1][4]["window_size"], [2, 0])
        self.assertEqual(seen[1][4]["attn_mask_type"], "padding_causal")
        # The spec of each compiles (the inputs bind as without a window).
        args = program_arguments(mha, mask="padding_causal")
        self.assertEqual(args["attention_mask"], ((2, 1, 1, 8), "i1"))
        text = tejit.compile_ir(_attention_specs.program_spec(
            "MultiheadAttention", "bf16", "sbhd", 8, 2, seen[1][4]), "te")
        self.assertIn("window_size = array<i64: 2, 0>", text)

    def test_cross_attention(self):
        """Keys and values of another length: their own program (keyed
        by s_kv), kv_seq_length in the spec, which compiles; the key
        padding mask alone or in TE's pair."""
        dpa = te.DotProductAttention(4, 16, num_gqa_groups=2,
                                     attention_type="cross",
                                     attn_mask_type="no_mask")
        q = torch.zeros(8, 2, 4, 16)
        kv = torch.zeros(5, 2, 2, 16)
        kv_mask = torch.zeros(2, 1, 1, 5, dtype=torch.bool)
        q_mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
        seen = self.calls(dpa, [
            ((q, kv, kv), {}),
            ((q, kv, kv), dict(attn_mask_type="padding",
                               attention_mask=(q_mask, kv_mask))),
            ((q, kv, kv), dict(attn_mask_type="padding_causal",
                               attention_mask=kv_mask)),
            ((q, q[:, :, :2], q[:, :, :2]), {})])
        self.assertEqual([key[0] for key in seen],
                         [("sbhd", 8, 2, 5)] * 3 + [("sbhd", 8, 2, 8)])
        self.assertEqual(seen[0][4]["kv_seq_length"], 5)
        self.assertNotIn("kv_seq_length", seen[3][4])
        self.assertIn("attention_mask", seen[1][5])
        text = tejit.compile_ir(_attention_specs.program_spec(
            "DotProductAttention", "bf16", "sbhd", 8, 2, seen[1][4]), "te")
        self.assertIn("tensor<5x2x2x16xbf16>", text)
        self.assertIn("tensor<2x1x1x5xi1>", text)
        # TE's pair pads the queries in the program (input query_mask,
        # spec key padded_queries), also with as many keys as queries;
        # one tensor twice is self-attention's padding; a query mask of
        # another shape is refused; an arbitrary mask [b, 1, s_q, s_kv]
        # becomes a bias of the no_mask program (_bias.py).
        q_mask[0, 0, 0, 7] = True
        self_mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
        kv8 = torch.zeros(8, 2, 2, 16)
        seen = self.calls(dpa, [
            ((q, kv, kv), dict(attn_mask_type="padding",
                               attention_mask=(q_mask, kv_mask))),
            ((q, kv8, kv8), dict(attn_mask_type="padding",
                                 attention_mask=(q_mask, self_mask))),
            ((q, kv8, kv8), dict(attn_mask_type="padding",
                                 attention_mask=(self_mask, self_mask)))])
        self.assertEqual(seen[0][5], ["attention_mask", "key", "query",
                                      "query_mask", "value"])
        self.assertTrue(seen[0][4]["padded_queries"])
        self.assertTrue(seen[0][2][3])
        self.assertEqual(seen[1][5], seen[0][5])
        self.assertEqual(seen[1][0], ("sbhd", 8, 2, 8))
        self.assertNotIn("kv_seq_length", seen[1][4])
        self.assertEqual(seen[2][5], ["attention_mask", "key", "query",
                                      "value"])
        self.assertNotIn("padded_queries", seen[2][4])
        for padded in seen[:2]:
            args = arguments_of(_attention_specs.program_spec(
                "DotProductAttention", "bf16", "sbhd", 8, 2, padded[4]))
            self.assertEqual(args["query_mask"], ((2, 1, 1, 8), "i1"))
        with self.assertRaises(ValueError):
            self.calls(dpa, [((q, kv, kv), dict(
                attn_mask_type="padding",
                attention_mask=(q_mask[:, :, :, :4], kv_mask)))])
        arbitrary = self.calls(dpa, [((q, kv, kv), dict(
            attn_mask_type="arbitrary",
            attention_mask=torch.zeros(2, 1, 8, 5, dtype=torch.bool)))])[0]
        self.assertEqual(arbitrary[2][0], "no_mask")
        self.assertEqual(arbitrary[5], ["core_attention_bias", "key",
                                        "query", "value"])
        self.assertEqual(arbitrary[4]["bias_shape"], "b1ss")

    def test_cross_attention_blocks(self):
        """MultiheadAttention(attention_type="cross") and a decoder
        TransformerLayer: keyed by the encoder output's length and the
        cross mask type; encoder_output and enc_dec_attn_mask reach the
        program under their names; the specs compile."""
        mha = te.MultiheadAttention(64, 4, num_gqa_groups=2,
                                    attention_type="cross",
                                    input_layernorm=True,
                                    attn_mask_type="no_mask", device=CPU)
        x = torch.zeros(8, 2, 64)
        enc = torch.zeros(5, 2, 64)
        kv_mask = torch.zeros(2, 1, 1, 5, dtype=torch.bool)
        seen = self.calls(mha, [
            ((x,), dict(encoder_output=enc)),
            ((x,), dict(encoder_output=enc, attn_mask_type="padding",
                        attention_mask=kv_mask))])
        self.assertEqual(seen[0][0], ("sbhd", 8, 2, 5))
        self.assertEqual(seen[0][5], ["encoder_output", "input"])
        self.assertEqual(seen[1][5], ["enc_dec_attn_mask", "encoder_output",
                                      "input"])
        self.assertEqual(seen[1][4]["attention_type"], "cross")
        self.assertEqual(seen[1][4]["kv_seq_length"], 5)
        # TE's pair with a query mask: the program pads the queries too.
        q_mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
        q_mask[1, ..., 6:] = True
        padded = self.calls(mha, [((x,), dict(
            encoder_output=enc, attn_mask_type="padding",
            attention_mask=(q_mask, kv_mask)))])[0]
        self.assertEqual(padded[5], ["enc_dec_attn_mask",
                                     "enc_dec_query_mask", "encoder_output",
                                     "input"])
        self.assertTrue(padded[4]["padded_queries"])
        self.assertTrue(padded[2][5])
        args = arguments_of(_attention_specs.program_spec(
            "MultiheadAttention", "bf16", "sbhd", 8, 2, padded[4]))
        self.assertEqual(args["enc_dec_query_mask"], ((2, 1, 1, 8), "i1"))
        args = arguments_of(_attention_specs.program_spec(
            "MultiheadAttention", "bf16", "sbhd", 8, 2, seen[1][4]))
        self.assertEqual(args["encoder_output"], ((5, 2, 64), "bf16"))
        self.assertEqual(args["enc_dec_attn_mask"], ((2, 1, 1, 5), "i1"))
        names = [n for n, _ in mha.named_parameters()]
        self.assertEqual(names[:-2], _attention_specs.cross_parameter_names(
            False, True, "LayerNorm"))
        with self.assertRaises(ValueError):
            self.calls(mha, [((x,), {})])
        with self.assertRaises(NotImplementedError):
            self.calls(mha, [((x,), dict(encoder_output=enc,
                                         rotary_pos_emb=torch.zeros(
                                             8, 1, 1, 16)))])
        layer = te.TransformerLayer(64, 256, 4, layer_type="decoder",
                                    enc_dec_attn_mask_type="padding",
                                    device=CPU)
        mask = torch.zeros(2, 1, 1, 8, dtype=torch.bool)
        seen = self.calls(layer, [
            ((x,), dict(encoder_output=enc, enc_dec_attn_mask=kv_mask)),
            ((x,), dict(encoder_output=enc, self_attn_mask_type="padding",
                        attention_mask=mask,
                        enc_dec_attn_mask_type="no_mask"))])
        self.assertEqual(seen[0][2], ("causal", True, False, (-1, 0),
                                      "padding", False))
        self.assertEqual(seen[0][5], ["enc_dec_attn_mask", "encoder_output",
                                      "input"])
        self.assertEqual(seen[1][2][4], "no_mask")
        self.assertEqual(seen[1][5], ["attention_mask", "encoder_output",
                                      "input"])
        self.assertEqual(seen[0][4]["layer_type"], "decoder")
        self.assertEqual(seen[1][4]["enc_dec_attn_mask_type"], "no_mask")
        args = arguments_of(_attention_specs.program_spec(
            "TransformerLayer", "bf16", "sbhd", 8, 2, seen[0][4]))
        inter = [n for n in args if n.startswith("layers.0.inter_attention")]
        self.assertEqual(len(inter), 8)
        self.assertTrue(any(n.startswith("inter_attention.")
                            for n, _ in layer.named_parameters()))
        with self.assertRaises(NotImplementedError):
            te.TransformerLayer(64, 256, 4, layer_type="decoder",
                                enc_dec_attn_mask_type="arbitrary",
                                device=CPU)

    def test_output_layernorm(self):
        """TE's post-LN TransformerLayer: its parameters (no input norm in
        self_attention, a `layernorm` module) are the program's."""
        layer = te.TransformerLayer(64, 256, 4, output_layernorm=True,
                                    device=CPU)
        names = [n for n, _ in layer.named_parameters()]
        self.assertIn("self_attention.qkv.query_weight", names)
        self.assertIn("layernorm.weight", names)
        self.assertFalse(any("layernorm_qkv" in n for n in names))
        args = program_arguments(layer)
        self.assertIn("layers.0.layernorm.bias", args)
        self.assertIn("layers.0.self_attention.qkv.weight", args)

    def test_shape_errors(self):
        dpa = te.DotProductAttention(4, 16)
        q = torch.zeros(8, 2, 4, 16)
        short = torch.zeros(4, 2, 4, 16)
        with self.assertRaises(ValueError) as caught:
            self.calls(dpa, [((q, short, q), {})])
        self.assertIn("expected value_layer [4, 2, 4, 16]",
                      str(caught.exception))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class PackedCallTest(unittest.TestCase):
    """thd's call checks (_thd.PackedCall) on the CPU: the compiled shape
    (tokens and longest sequence rounded up to 64), the padding of the
    tokens with its gradient, each token's rotary angles, and bad
    offsets."""

    def test_shape_padding_and_angles(self):
        cu = torch.tensor([0, 3, 3, 70], dtype=torch.int32)
        packed = _thd.PackedCall("test", 72, cu.device, cu)
        self.assertEqual((packed.batch, packed.longest, packed.max_s,
                          packed.padded_tokens), (3, 67, 128, 128))
        self.assertEqual(packed.shape_spec(), {
            "seq_length": 128, "batch_size": 3, "input_format": "thd",
            "tokens": 128})
        x = torch.randn(72, 8, requires_grad=True)
        padded = packed.pad(x)
        self.assertEqual(tuple(padded.shape), (128, 8))
        self.assertEqual(float(padded[72:].detach().abs().sum()), 0.0)
        back = packed.unpad(padded * 2)
        self.assertEqual(tuple(back.shape), (72, 8))
        back.sum().backward()
        self.assertEqual(x.grad.unique().tolist(), [2.0])
        # Angles of position p are p * (1, 10): positions restart at every
        # sequence; the tail and the padding take position 0.
        freqs = torch.arange(80.0).view(80, 1, 1, 1) * torch.tensor(
            [1.0, 10.0]).view(1, 1, 1, 2)
        angles = packed.token_angles("test", freqs)
        self.assertEqual(tuple(angles.shape), (128, 1, 1, 2))
        want = [0, 1, 2] + list(range(67)) + [0] * 58
        self.assertEqual(angles[:, 0, 0, 0].tolist(), want)
        self.assertEqual(angles[:, 0, 0, 1].tolist(),
                         [10.0 * p for p in want])
        with self.assertRaisesRegex(ValueError, "67 long"):
            packed.token_angles("test", freqs[:40])

    def test_padding_between_sequences(self):
        # Sequences of 3 and 2 tokens starting at rows 0 and 4 of 10: rows
        # 3, 6 and 7 pad them, 8 and 9 are the tail. The program sees the
        # sequences back to back, then the padding and the tail in order.
        cu = torch.tensor([0, 3, 5], dtype=torch.int32)
        padded = torch.tensor([0, 4, 8], dtype=torch.int32)
        queries, keys = _thd.packed_calls("test", 10, 10, cu.device, cu,
                                          None, cu_seqlens_q_padded=padded,
                                          cu_seqlens_kv_padded=padded)
        self.assertIsNone(keys)
        gaps = queries.gaps
        self.assertEqual(gaps.from_program.tolist(),
                         [0, 1, 2, 4, 5, 3, 6, 7, 8, 9])
        self.assertEqual(gaps.to_program.tolist(),
                         [0, 1, 2, 5, 3, 4, 6, 7, 8, 9])
        x = torch.arange(10.0).view(10, 1)
        program = queries.pad(x)
        self.assertEqual(tuple(program.shape), (64, 1))
        self.assertEqual(program[:10, 0].tolist(),
                         [0, 1, 2, 4, 5, 3, 6, 7, 8, 9])
        self.assertTrue(torch.equal(queries.unpad(program), x))
        with self.assertRaisesRegex(ValueError, "room"):
            _thd.packed_calls("test", 10, 10, cu.device, cu, None,
                              cu_seqlens_q_padded=torch.tensor(
                                  [0, 2, 8], dtype=torch.int32))
        with self.assertRaisesRegex(NotImplementedError, "kv_padded"):
            _thd.packed_calls("test", 10, 10, cu.device, cu, None,
                              cu_seqlens_q_padded=padded,
                              cu_seqlens_kv_padded=torch.tensor(
                                  [0, 5, 8], dtype=torch.int32))
        with self.assertRaisesRegex(ValueError, "pad_between_seqs"):
            _thd.packed_calls("test", 10, 10, cu.device, cu, None,
                              pad_between_seqs=True)

    def test_a_multiple_of_64_tokens_is_not_copied(self):
        cu = torch.tensor([0, 64], dtype=torch.int32)
        packed = _thd.PackedCall("test", 64, cu.device, cu)
        x = torch.randn(64, 4)
        self.assertIs(packed.pad(x), x)

    def test_bad_offsets(self):
        for cu in ([1, 3, 5], [0, 5, 3], [0, 4, 90]):
            with self.assertRaises(ValueError):
                offsets = torch.tensor(cu, dtype=torch.int32)
                _thd.PackedCall("test", 80, offsets.device, offsets)
        # A given max_seqlen is checked by torch._assert_async: on the
        # CPU at once (RuntimeError), on the GPU as a device-side assert.
        with self.assertRaises(RuntimeError):
            offsets = torch.tensor([0, 40, 80], dtype=torch.int32)
            _thd.PackedCall("test", 80, offsets.device, offsets,
                            max_seqlen=16)
        cu = torch.tensor([0, 40], dtype=torch.int32)
        with self.assertRaisesRegex(ValueError, "padding"):
            _thd.thd_mask_type("test", "causal")
        self.assertEqual(_thd.thd_mask_type(
            "test", "padding_causal_bottom_right"), "padding_causal")
        other = torch.tensor([0, 30], dtype=torch.int32)
        # Keys packed otherwise: DotProductAttention's cross-attention
        # only (cross=True), with a side of their own.
        with self.assertRaisesRegex(NotImplementedError, "cu_seqlens_kv"):
            _thd.packed_calls("test", 80, 80, cu.device, cu, other)
        queries, keys = _thd.packed_calls("test", 80, 60, cu.device, cu,
                                          other, cross=True)
        self.assertEqual((queries.longest, keys.longest, keys.tokens),
                         (40, 30, 60))
        same, none = _thd.packed_calls("test", 80, 80, cu.device, cu, None)
        self.assertIsNone(none)
        self.assertIs(same.cu_seqlens, cu)
        with self.assertRaisesRegex(ValueError, "sequences"):
            _thd.packed_calls("test", 80, 80, cu.device, cu,
                              torch.tensor([0, 30, 50], dtype=torch.int32),
                              cross=True)


if __name__ == "__main__":
    unittest.main()
