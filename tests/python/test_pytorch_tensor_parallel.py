"""tejit.pytorch's modules with TE's tensor-parallel arguments, on the CPU
(parameters on the CPU, nothing runs): each rank's parameter shapes against
the program the module's spec compiles to (which takes one rank's shards),
TE's attributes (local in/out_features, size_per_partition, heads per
partition), the errors naming the argument, initialization under an RNG
tracker's fork(), the attention dropout seed drawn in it,
set_tensor_parallel_group reaching the submodules, TE's interleaved
fused QKV rows of one rank mapped to its q | k | v rows, and sequence
parallelism (SequenceParallelTest: the spec key, TE's `sequence_parallel`
parameter attribute, the refusals, the dropout seed's generator, one
rank's program shapes). Needs PyTorch
(skipped without it; test_tensor_parallel_args.py checks the argument
checks and specs without it). tests/gpu/tensor_parallel_check.py runs the
modules on two GPUs.
Run: python3 -m pytest tests/python
"""
import contextlib
import copy
import pickle
import re
import unittest

from torch_free import HAVE_TORCH, RefusalAssertions

if HAVE_TORCH:
    import torch

    import tejit
    import tejit.pytorch as te
    from tejit.pytorch import _distributed
    from tejit.pytorch.module import _args, _attention_specs

CPU = "cpu"
_TENSOR = re.compile(r'tensor<([^>]*)> \{te\.name = "([^"]+)"')


def program_tensors(module, seq=16, batch=2):
    """{name: shape} of the forward's arguments and results of the program
    `module` compiles for a bf16 [seq, batch] call (parameters without
    `layers.0.`)."""
    if isinstance(module, (te.MultiheadAttention, te.TransformerLayer)):
        layer = module._layer_spec()
        spec = _attention_specs.program_spec(type(module).__name__, "bf16",
                                             "sbhd", seq, batch, layer)
    else:
        spec = {"name": "m", "params_dtype": "bf16", "seq_length": seq,
                "batch_size": batch, "layers": [module._layer_spec()]}
    text = tejit.compile_ir(spec, "te")
    header = next(line for line in text.splitlines()
                  if "func.func" in line and "_backward" not in line)
    return {(name[len("layers.0."):] if name.startswith("layers.0.")
             else name): tuple(int(d) for d in shape.split("x")[:-1])
            for shape, name in _TENSOR.findall(header)}


class FakeTracker:
    """Megatron's CUDA RNG tracker as TE calls it (fork(name)), on the CPU
    generator: each fork draws from its own seeded stream and counts."""

    def __init__(self, seed=1234):
        self.seed = seed
        self.forks = []

    @contextlib.contextmanager
    def fork(self, name="model-parallel-rng"):
        self.forks.append(name)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed + len(self.forks))
            yield


@contextlib.contextmanager
def group_sizes(size):
    """torch.distributed stand-in: every process group has `size` ranks."""
    saved = (_args._group_size, _distributed.group_size)
    _args._group_size = _distributed.group_size = lambda group: size
    try:
        yield
    finally:
        _args._group_size, _distributed.group_size = saved


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ShapesTest(unittest.TestCase):
    def assertProgramTakes(self, module):
        """Every parameter of `module` has the shape of its program's
        parameter input (the program takes one rank's shards)."""
        tensors = program_tensors(module)
        for name, parameter in module.named_parameters():
            fused = name
            for part in ("query_", "key_", "value_"):
                fused = fused.replace(part, "")
            if fused != name:
                continue  # split QKV: checked through the fused rows below
            self.assertEqual(tuple(parameter.shape), tensors[name], name)
        return tensors

    def test_linear(self):
        column = te.Linear(256, 512, tp_size=2, parallel_mode="column",
                           device=CPU)
        self.assertEqual((column.in_features, column.out_features), (256, 256))
        self.assertEqual(tuple(column.weight.shape), (256, 256))
        self.assertEqual(column._layer_spec()["tp_size"], 2)
        self.assertEqual(column._layer_spec()["out_features"], 512)
        tensors = self.assertProgramTakes(column)
        self.assertEqual(tensors["output"], (16, 2, 256))
        row = te.Linear(256, 512, tp_size=2, parallel_mode="row", device=CPU)
        self.assertEqual((row.in_features, row.out_features), (128, 512))
        self.assertEqual(row._input_features(), 128)
        self.assertEqual(tuple(row.bias.shape), (512,))
        self.assertEqual(row._layer_spec()["parallel_mode"], "row")
        tensors = self.assertProgramTakes(row)
        self.assertEqual(tensors["input"], (16, 2, 128))
        # parallel_mode None splits nothing and communicates nothing (TE).
        whole = te.Linear(256, 512, tp_size=2, device=CPU)
        self.assertEqual(tuple(whole.weight.shape), (512, 256))
        self.assertNotIn("tp_size", whole._layer_spec())
        self.assertFalse(whole._tp_communicates())

    def test_tp_size_1_specs_are_unchanged(self):
        for module in (te.Linear(64, 64, parallel_mode="row", device=CPU),
                       te.LayerNormMLP(64, 256, device=CPU),
                       te.TransformerLayer(64, 256, 4, device=CPU)):
            with self.subTest(module=type(module).__name__):
                spec = module._layer_spec()
                self.assertNotIn("tp_size", spec)
                self.assertNotIn("parallel_mode", spec)

    def test_layernorm_linear(self):
        module = te.LayerNormLinear(256, 512, tp_size=2,
                                    parallel_mode="column", device=CPU)
        self.assertEqual(module.out_features, 256)
        self.assertEqual(tuple(module.layer_norm_weight.shape), (256,))
        self.assertEqual(module._layer_spec()["parallel_mode"], "column")
        self.assertProgramTakes(module)

    def test_layernorm_mlp(self):
        for activation, rows in (("gelu", 512), ("swiglu", 1024)):
            with self.subTest(activation=activation):
                module = te.LayerNormMLP(256, 1024, activation=activation,
                                         tp_size=2, set_parallel_mode=True,
                                         device=CPU)
                self.assertEqual(module.size_per_partition, 512)
                self.assertEqual(tuple(module.fc1_weight.shape), (rows, 256))
                self.assertEqual(tuple(module.fc2_weight.shape), (256, 512))
                self.assertEqual(tuple(module.fc2_bias.shape), (256,))
                self.assertEqual(module._layer_spec()["ffn_hidden_size"],
                                 1024)
                self.assertProgramTakes(module)

    def test_multihead_attention(self):
        for fuse in (False, True):
            with self.subTest(fuse_qkv_params=fuse):
                mha = te.MultiheadAttention(
                    256, 8, num_gqa_groups=4, input_layernorm=True,
                    fuse_qkv_params=fuse, tp_size=2, set_parallel_mode=True,
                    device=CPU)
                self.assertEqual((mha.num_attention_heads_per_partition,
                                  mha.num_gqa_groups_per_partition), (4, 2))
                self.assertEqual(mha.core_attention
                                 .num_attention_heads_per_partition, 4)
                tensors = self.assertProgramTakes(mha)
                rows = (4 + 2 * 2) * 32
                self.assertEqual(tensors["layernorm_qkv.weight"], (rows, 256))
                self.assertEqual(tuple(mha.layernorm_qkv._argument(
                    "weight", torch.float32).shape), (rows, 256))
                self.assertEqual(tuple(mha.proj.weight.shape), (256, 128))
                if not fuse:
                    self.assertEqual(
                        tuple(mha.layernorm_qkv.key_weight.shape), (64, 256))

    def test_transformer_layer(self):
        layer = te.TransformerLayer(256, 1024, 8, num_gqa_groups=4,
                                    activation="swiglu", tp_size=2,
                                    set_parallel_mode=True, device=CPU)
        self.assertEqual(layer._layer_spec()["tp_size"], 2)
        self.assertEqual(layer.self_attention.tp_size, 2)
        self.assertEqual(layer.layernorm_mlp.tp_size, 2)
        self.assertProgramTakes(layer)

    def test_dot_product_attention_heads_per_partition(self):
        dpa = te.DotProductAttention(8, 32, num_gqa_groups=4, tp_size=2)
        layer = dpa._layer_spec()
        self.assertEqual((layer["num_attention_heads"],
                          layer["num_gqa_groups"]), (4, 2))
        self.assertNotIn("tp_size", layer)
        self.assertFalse(dpa._tp_communicates())
        self.assertEqual(dpa.num_attention_heads, 8)

    def test_interleaved_fused_rows_of_one_rank(self):
        # TE's interleaved fused weight [groups, heads/groups + 2, d] of the
        # whole layer; rank r holds its contiguous rows (its groups), and
        # the program takes its q heads | k groups | v groups.
        heads, groups, d, hidden, tp = 8, 4, 2, 16, 2
        rows = (heads + 2 * groups) * d
        full = torch.arange(rows * hidden, dtype=torch.float32).reshape(
            rows, hidden)
        order = _attention_specs.interleaved_qkv_rows(heads, groups, d)
        q, k, v = full[order].split([heads * d, groups * d, groups * d])
        for rank in range(tp):
            mha = te.MultiheadAttention(
                hidden, heads, kv_channels=d, num_gqa_groups=groups,
                fuse_qkv_params=True, tp_size=tp, set_parallel_mode=True,
                params_dtype=torch.float32, device=CPU)
            with torch.no_grad():
                mha.qkv.weight.copy_(full.chunk(tp)[rank])
            want = torch.cat([t.chunk(tp)[rank] for t in (q, k, v)])
            self.assertTrue(torch.equal(
                mha.qkv._argument("weight", torch.float32), want), rank)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ArgumentTest(RefusalAssertions, unittest.TestCase):

    def test_refusals(self):
        cases = [
            (NotImplementedError,
             lambda: te.LayerNormMLP(64, 256, tp_size=2, device=CPU),
             "set_parallel_mode"),
            (NotImplementedError,
             lambda: te.MultiheadAttention(64, 4, tp_size=2, device=CPU),
             "set_parallel_mode"),
            (NotImplementedError,
             lambda: te.TransformerLayer(64, 256, 4, tp_size=2, device=CPU),
             "TransformerLayer", "set_parallel_mode"),
            (NotImplementedError,
             lambda: te.LayerNormLinear(64, 64, tp_size=2,
                                        parallel_mode="row", device=CPU),
             "parallel_mode='row'"),
            (NotImplementedError,
             lambda: te.TransformerLayer(64, 256, 4, tp_size=2,
                                         set_parallel_mode=True,
                                         sequence_parallel=True,
                                         attn_input_format="thd",
                                         device=CPU),
             "attn_input_format='thd'", "sequence_parallel=True"),
            (ValueError,
             lambda: te.LayerNormMLP(64, 250, tp_size=4,
                                     set_parallel_mode=True, device=CPU),
             "ffn_hidden_size (250)", "tp_size (4)"),
            (ValueError,
             lambda: te.MultiheadAttention(64, 4, num_gqa_groups=1,
                                           tp_size=2, set_parallel_mode=True,
                                           device=CPU),
             "num_gqa_groups (1)"),
            (ValueError,
             lambda: te.TransformerLayer(64, 256, 4, tp_size=8,
                                         set_parallel_mode=True, device=CPU),
             "TransformerLayer", "num_attention_heads (4)"),
            (ValueError,
             lambda: te.Linear(64, 96, tp_size=5, parallel_mode="column",
                               device=CPU), "out_features (96)"),
            (ValueError,
             lambda: te.Linear(64, 96, tp_size=0, device=CPU), "tp_size"),
            (ValueError,
             lambda: te.Linear(64, 64, parallel_mode="both", device=CPU),
             "parallel_mode"),
        ]
        for error, factory, *words in cases:
            with self.subTest(words=words):
                self.assertRefused(error, factory, *words)

    def test_group_size(self):
        group = object()
        with group_sizes(2):
            module = te.Linear(64, 64, tp_group=group, parallel_mode="row",
                               device=CPU)
            self.assertEqual((module.tp_size, module.in_features), (2, 32))
            self.assertIs(module.tp_group, group)
            self.assertRefused(ValueError,
                               lambda: te.Linear(64, 64, tp_group=group,
                                                 tp_size=4, device=CPU),
                               "tp_size (4)")
        with group_sizes(4):
            self.assertRefused(ValueError,
                               lambda: module.set_tensor_parallel_group(group),
                               "set_tensor_parallel_group", "tp_size 2")

    def test_set_tensor_parallel_group_reaches_submodules(self):
        layer = te.TransformerLayer(64, 256, 4, tp_size=2,
                                    set_parallel_mode=True, device=CPU)
        self.assertIsNone(layer.tp_group)
        with self.assertRaises(RuntimeError) as caught:
            layer._required_tp_group()
        self.assertIn("set_tensor_parallel_group", str(caught.exception))
        group = object()
        with group_sizes(2):
            layer.set_tensor_parallel_group(group)
        for module in (layer, layer.self_attention,
                       layer.self_attention.core_attention,
                       layer.layernorm_mlp):
            self.assertIs(module.tp_group, group, type(module).__name__)
        self.assertIs(copy.deepcopy(layer).tp_group, group)
        self.assertIsNone(pickle.loads(pickle.dumps(layer)).tp_group)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class RngTrackerTest(unittest.TestCase):
    def test_gemm_weights_initialize_in_the_fork(self):
        built = []
        for default_seed in (1, 2):
            torch.manual_seed(default_seed)
            tracker = FakeTracker()
            layer = te.TransformerLayer(
                64, 256, 4, tp_size=2, set_parallel_mode=True,
                get_rng_state_tracker=lambda tracker=tracker: tracker,
                device=CPU)
            built.append((layer, tracker))
        (first, tracker), (second, _) = built
        # q, k, v, proj, fc1, fc2.
        self.assertEqual(len(tracker.forks), 6)
        for (name, a), b in zip(first.named_parameters(),
                                second.parameters()):
            if name.endswith("weight") and a.dim() == 2:
                self.assertTrue(torch.equal(a, b), name)
        torch.manual_seed(3)
        tracker = FakeTracker()
        te.Linear(64, 64, get_rng_state_tracker=lambda: tracker,
                  rng_tracker_name="my-rng", device=CPU)
        self.assertEqual(tracker.forks, ["my-rng"])

    def test_default_generator_without_a_tracker(self):
        torch.manual_seed(5)
        a = te.LayerNormMLP(64, 256, tp_size=2, set_parallel_mode=True,
                            device=CPU)
        torch.manual_seed(5)
        b = te.LayerNormMLP(64, 256, tp_size=2, set_parallel_mode=True,
                            device=CPU)
        self.assertTrue(torch.equal(a.fc1_weight, b.fc1_weight))

    def test_attention_dropout_seed_in_the_fork(self):
        tracker = FakeTracker()
        mha = te.MultiheadAttention(64, 4, get_rng_state_tracker=lambda:
                                    tracker, device=CPU)
        forks = len(tracker.forks)
        with mha._dropout_seed_context():
            pass
        self.assertEqual(len(tracker.forks), forks + 1)
        dpa = te.DotProductAttention(4, 16, get_rng_state_tracker=lambda:
                                     tracker)
        with dpa._dropout_seed_context():
            pass
        self.assertEqual(len(tracker.forks), forks + 2)
        # A TransformerLayer's one stream also draws its hidden dropout,
        # which must be the same on every rank: torch's default generator.
        layer = te.TransformerLayer(64, 256, 4, get_rng_state_tracker=lambda:
                                    tracker, device=CPU)
        forks = len(tracker.forks)
        with layer._dropout_seed_context():
            pass
        self.assertEqual(len(tracker.forks), forks)


def sequence_parallel_marks(module):
    """{parameter name: its `sequence_parallel` attribute} of the
    parameters that have one."""
    return {name: p.sequence_parallel
            for name, p in module.named_parameters()
            if hasattr(p, "sequence_parallel")}


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class SequenceParallelTest(unittest.TestCase):
    def build(self, sequence_parallel=True, tp_size=2):
        """One of each module with sequence_parallel at tp_size."""
        kwargs = dict(tp_size=tp_size, sequence_parallel=sequence_parallel,
                      device=CPU)
        return {
            "column": te.Linear(64, 128, parallel_mode="column", **kwargs),
            "row": te.Linear(128, 64, parallel_mode="row", **kwargs),
            "none": te.Linear(64, 64, **kwargs),
            "lnl": te.LayerNormLinear(64, 128, parallel_mode="column",
                                      **kwargs),
            "mlp": te.LayerNormMLP(64, 256, set_parallel_mode=True,
                                   **kwargs),
            "mha": te.MultiheadAttention(64, 4, input_layernorm=True,
                                         set_parallel_mode=True, **kwargs),
            "layer": te.TransformerLayer(64, 256, 4, set_parallel_mode=True,
                                         **kwargs),
        }

    def test_spec_key_and_the_attribute(self):
        modules = self.build()
        for name, module in modules.items():
            with self.subTest(module=name):
                self.assertTrue(module.sequence_parallel)
                spec = module._layer_spec()
                if name == "none":
                    # parallel_mode None splits nothing (TE).
                    self.assertNotIn("sequence_parallel", spec)
                    self.assertFalse(module._sequence_parallel_active())
                else:
                    self.assertIs(spec["sequence_parallel"], True)
                    self.assertTrue(module._sequence_parallel_active())
        layer = modules["layer"]
        for child in (layer.self_attention, layer.layernorm_mlp):
            self.assertTrue(child.sequence_parallel)

    def test_ignored_at_tp_size_1(self):
        # TE: self.sequence_parallel = tp_size > 1 and sequence_parallel.
        for name, module in self.build(tp_size=1).items():
            with self.subTest(module=name):
                self.assertFalse(module.sequence_parallel)
                self.assertNotIn("sequence_parallel", module._layer_spec())
        thd = te.TransformerLayer(64, 256, 4, sequence_parallel=True,
                                  attn_input_format="thd", device=CPU)
        self.assertFalse(thd.sequence_parallel)

    def test_marked_parameters_follow_te(self):
        want = {
            "column": set(),
            "row": {"bias"},
            "none": set(),
            "lnl": {"layer_norm_weight", "layer_norm_bias"},
            "mlp": {"layer_norm_weight", "layer_norm_bias", "fc2_bias"},
            "mha": {"layernorm_qkv.layer_norm_weight",
                    "layernorm_qkv.layer_norm_bias", "proj.bias"},
            "layer": {"self_attention.layernorm_qkv.layer_norm_weight",
                      "self_attention.layernorm_qkv.layer_norm_bias",
                      "self_attention.proj.bias",
                      "layernorm_mlp.layer_norm_weight",
                      "layernorm_mlp.layer_norm_bias",
                      "layernorm_mlp.fc2_bias"},
        }
        for sequence_parallel in (True, False):
            modules = self.build(sequence_parallel)
            for name, module in modules.items():
                with self.subTest(module=name,
                                  sequence_parallel=sequence_parallel):
                    marks = sequence_parallel_marks(module)
                    self.assertEqual(set(marks), want[name])
                    # TE sets the module's value: False without it.
                    self.assertEqual(set(marks.values()) or {
                        sequence_parallel}, {sequence_parallel})
        # reset_parameters keeps them.
        mlp = modules["mlp"]
        mlp.reset_parameters()
        self.assertEqual(set(sequence_parallel_marks(mlp)), want["mlp"])

    def test_decoder_and_output_layernorm(self):
        layer = te.TransformerLayer(
            64, 256, 4, layer_type="decoder", output_layernorm=True,
            normalization="RMSNorm", tp_size=2, set_parallel_mode=True,
            sequence_parallel=True, device=CPU)
        self.assertEqual(set(sequence_parallel_marks(layer)), {
            "self_attention.proj.bias",
            "inter_attention.layernorm_query.layer_norm_weight",
            "inter_attention.proj.bias",
            "layernorm_mlp.layer_norm_weight", "layernorm_mlp.fc2_bias",
            "layernorm.weight"})
        self.assertTrue(all(sequence_parallel_marks(layer).values()))

    def test_norm_modules(self):
        # TE's LayerNorm/RMSNorm: the attribute only when the argument is
        # given; the computation is unchanged.
        self.assertEqual(sequence_parallel_marks(te.LayerNorm(
            64, sequence_parallel=True, device=CPU)),
            {"weight": True, "bias": True})
        self.assertEqual(sequence_parallel_marks(te.RMSNorm(
            64, sequence_parallel=False, device=CPU)), {"weight": False})
        self.assertEqual(sequence_parallel_marks(te.LayerNorm(
            64, device=CPU)), {})

    def test_refusals(self):
        for factory in (
                lambda: te.MultiheadAttention(
                    64, 4, qkv_format="thd", tp_size=2,
                    set_parallel_mode=True, sequence_parallel=True,
                    device=CPU),
                lambda: te.TransformerLayer(
                    64, 256, 4, attn_input_format="thd", tp_size=2,
                    set_parallel_mode=True, sequence_parallel=True,
                    device=CPU)):
            with self.assertRaises(NotImplementedError) as caught:
                factory()
            self.assertIn("'thd'", str(caught.exception))
        modules = self.build()
        x = torch.zeros(4, 1, 64)
        for name in ("mha", "layer"):
            with self.subTest(module=name):
                with self.assertRaises(NotImplementedError) as caught:
                    modules[name](x, inference_params=object())
                self.assertIn("inference_params", str(caught.exception))
        # TE's seq_length check: an sbhd input holds seq_length / tp.
        layer = te.TransformerLayer(64, 256, 4, seq_length=32, tp_size=2,
                                    set_parallel_mode=True,
                                    sequence_parallel=True, device=CPU)
        with self.assertRaises(ValueError) as caught:
            layer(torch.zeros(32, 2, 64))
        self.assertIn("seq_length / tp_size", str(caught.exception))

    def test_dropout_seed_generator(self):
        tracker = FakeTracker()

        def forks_of(module):
            before = len(tracker.forks)
            with module._dropout_seed_context():
                pass
            return len(tracker.forks) - before
        kwargs = dict(tp_size=2, set_parallel_mode=True,
                      get_rng_state_tracker=lambda: tracker, device=CPU)
        # Each rank's own tokens: the layer's stream in the tracker's fork.
        self.assertEqual(forks_of(te.TransformerLayer(
            64, 256, 4, sequence_parallel=True, **kwargs)), 1)
        # Replicated hidden states: the default generator.
        self.assertEqual(forks_of(te.TransformerLayer(64, 256, 4,
                                                      **kwargs)), 0)
        self.assertEqual(forks_of(te.MultiheadAttention(
            64, 4, sequence_parallel=True, **kwargs)), 1)
        # TE's DotProductAttention: the caller's context under
        # sequence_parallel.
        dpa = te.DotProductAttention(4, 16, tp_size=2,
                                     sequence_parallel=True,
                                     get_rng_state_tracker=lambda: tracker)
        self.assertEqual(forks_of(dpa), 0)

    def test_program_shapes(self):
        modules = self.build()
        try:
            program_tensors(modules["column"])
        except tejit.TejitError as error:
            if "sequence_parallel" not in str(error):
                raise
            self.skipTest("this build's compiler does not take "
                          "'sequence_parallel' yet")
        # Global seq 16, batch 2: a rank's slice holds 8 positions.
        self.assertEqual(program_tensors(modules["column"])["input"],
                         (8, 2, 64))
        self.assertEqual(program_tensors(modules["row"])["output"],
                         (8, 2, 64))
        for name in ("lnl", "mlp", "mha", "layer"):
            with self.subTest(module=name):
                tensors = program_tensors(modules[name])
                self.assertEqual(tensors["input"], (8, 2, 64))
                for parameter_name, parameter in \
                        modules[name].named_parameters():
                    if parameter_name in tensors:
                        self.assertEqual(tuple(parameter.shape),
                                         tensors[parameter_name])


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class CollectiveFunctionsTest(unittest.TestCase):
    """The TensorParallelGroup functions _distributed.tp_group gives the
    runtime, called as the runtime calls them (addresses, elements per
    rank, dtype name, stream), with torch.distributed and device memory
    replaced by recorders: each calls its torch.distributed collective on
    the process group, over views of the right sizes."""

    def test_all_reduce_all_gather_reduce_scatter(self):
        from unittest import mock
        captured, views, calls = {}, [], []

        def from_function(all_reduce, all_gather=None, reduce_scatter=None,
                          all_to_all=None):
            captured.update(all_reduce=all_reduce, all_gather=all_gather,
                            reduce_scatter=reduce_scatter)
            return object()

        def device_view(address, count, dtype, device):
            views.append((address, count, dtype, device))
            return torch.zeros(count, dtype=dtype)

        def record(name):
            def collective(*args, **kwargs):
                calls.append((name, [tuple(a.shape) for a in args],
                              kwargs.get("group"), kwargs.get("op")))
            return collective
        group = object()
        dist = torch.distributed
        with mock.patch.object(tejit.TensorParallelGroup, "from_function",
                               from_function), \
                mock.patch.object(_distributed, "device_view", device_view), \
                mock.patch.object(_distributed, "group_size",
                                  lambda process_group: 2), \
                mock.patch.object(_distributed, "_on_stream",
                                  lambda device, stream:
                                  contextlib.nullcontext()), \
                mock.patch.object(dist, "all_reduce", record("all_reduce"),
                                  create=True), \
                mock.patch.object(dist, "all_gather_into_tensor",
                                  record("all_gather"), create=True), \
                mock.patch.object(dist, "reduce_scatter_tensor",
                                  record("reduce_scatter"), create=True):
            _distributed.tp_group(group, 3)
            captured["all_reduce"](100, 8, "bfloat16", None)
            captured["all_gather"](200, 300, 8, "float16", 7)
            captured["reduce_scatter"](400, 500, 8, "float32", 7)
            with self.assertRaises(ValueError):
                captured["all_gather"](200, 300, 8, "int8", None)
        _distributed._TP_GROUPS.pop((group, 3), None)
        self.assertEqual(views, [
            (100, 8, torch.bfloat16, 3),
            (200, 8, torch.float16, 3), (300, 16, torch.float16, 3),
            (400, 16, torch.float32, 3), (500, 8, torch.float32, 3)])
        self.assertEqual([call[:3] for call in calls], [
            ("all_reduce", [(8,)], group),
            ("all_gather", [(16,), (8,)], group),      # (output, input)
            ("reduce_scatter", [(8,), (16,)], group)])  # (output, input)
        self.assertEqual(calls[2][3], dist.ReduceOp.SUM)


if __name__ == "__main__":
    unittest.main()
