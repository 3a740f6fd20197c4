"""tejit.pytorch's attention modules with TE's context-parallel arguments
(docs/context-parallel.md), on the CPU (parameters on the CPU, nothing
runs): cp_group's size and this process's rank reaching the spec (cp_size,
cp_rank, cp_comm_type "all_gather" for TE's all_gather, "a2a" for a2a, and
for TE's default p2p "a2a" where the heads and groups per rank divide by
cp_size and the library takes an all-to-all, else "all_gather") and the
JIT key of DotProductAttention, MultiheadAttention and
TransformerLayer and their submodules, set_context_parallel_group reaching
the submodules, a copy's group (deepcopy shares it, pickling drops it: the
module then refuses to run, naming set_context_parallel_group), the
refusals naming the argument (constructor, set_context_parallel_group and
forward; a2a's heads per rank not divisible by cp_size: ValueError; a
sliding window and fp8_dpa refused under the all-gather, naming a2a, and
reaching the compiled spec with a2a), a2a's and p2p's dropout seeds (one
per rank), the
program's CP group (the process group's TensorParallelGroup,
_distributed.tp_group's, with its all_to_all_single), and
tejit.pytorch.distributed's split and merge on tensors. Needs PyTorch
(skipped without it; test_context_parallel_args.py checks the argument
checks and specs without it). tests/gpu/context_parallel_check.py runs
the modules on two GPUs.
Run: python3 -m pytest tests/python
"""
import contextlib
import copy
import pickle
import unittest

from torch_free import HAVE_TORCH, RefusalAssertions

if HAVE_TORCH:
    import torch

    import tejit
    import tejit.pytorch as te
    from tejit.pytorch import _distributed
    from tejit.common import recipe
    from tejit.pytorch.module import _args
    from test_pytorch_tensor_parallel import group_sizes

    FP8_DPA = recipe.DelayedScaling(fp8_dpa=True, amax_history_len=16)

CPU = "cpu"
CP_KEYS = ("cp_size", "cp_rank", "cp_comm_type")


@contextlib.contextmanager
def cp_world(size, rank):
    """torch.distributed stand-in: every process group has `size` ranks
    (test_pytorch_tensor_parallel's group_sizes), this process is `rank`
    in each."""
    saved = _args._group_rank
    _args._group_rank = lambda group: rank
    try:
        with group_sizes(size):
            yield
    finally:
        _args._group_rank = saved


def cp_keys(module):
    layer = module._layer_spec()
    return tuple(layer.get(key) for key in CP_KEYS)


def small(kind, **kwargs):
    """A small module of `kind` on the CPU (8 heads, 4 key/value groups
    unless `kwargs` say otherwise)."""
    kwargs.setdefault("num_gqa_groups", 4)
    if kind == "DotProductAttention":
        return te.DotProductAttention(8, 32, **kwargs)
    if kind == "MultiheadAttention":
        return te.MultiheadAttention(256, 8, input_layernorm=True,
                                     device=CPU, **kwargs)
    return te.TransformerLayer(256, 1024, 8, device=CPU, **kwargs)


KINDS = ("DotProductAttention", "MultiheadAttention", "TransformerLayer")


class CompileReached(Exception):
    """Raised by compiled_spec's stand-in for _compile."""


def compiled_spec(module, *inputs, **kwargs):
    """The whole spec (layer, lengths, recipe) `module(*inputs, **kwargs)`
    would compile: the input checks (which want CUDA tensors) skipped,
    _compile replaced by a recorder that stops the call."""
    from unittest import mock
    from tejit.pytorch.module import attention as attention_module
    seen = []

    def compile_(key, spec, shape):
        seen.append(spec)
        raise CompileReached()
    with mock.patch.object(attention_module, "check_input",
                           lambda *args: None), \
            mock.patch.object(module, "_compile", compile_):
        try:
            module(*inputs, **kwargs)
        except CompileReached:
            return seen[0]
    raise AssertionError("the call did not reach _compile")


MASK_ARGUMENTS = {"DotProductAttention": "attn_mask_type",
                  "MultiheadAttention": "attn_mask_type",
                  "TransformerLayer": "self_attn_mask_type"}


def small_bf16(kind, mask_type="causal", **kwargs):
    """small(kind) with `mask_type`, no attention dropout (FP8 attention
    refuses it in training) and, for the blocks, bf16 parameters."""
    if kind != "DotProductAttention":
        kwargs.setdefault("params_dtype", torch.bfloat16)
    kwargs[MASK_ARGUMENTS[kind]] = mask_type
    return small(kind, attention_dropout=0.0, **kwargs)


def small_inputs(kind):
    """bf16 CPU inputs of small(kind) for one rank at cp 2: 16 of 32
    positions, batch 2 (sbhd)."""
    if kind == "DotProductAttention":
        return (torch.zeros(16, 2, 8, 32, dtype=torch.bfloat16),
                torch.zeros(16, 2, 4, 32, dtype=torch.bfloat16),
                torch.zeros(16, 2, 4, 32, dtype=torch.bfloat16))
    return (torch.zeros(16, 2, 256, dtype=torch.bfloat16),)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class SpecTest(unittest.TestCase):
    def test_no_keys_without_a_group(self):
        for kind in KINDS:
            with self.subTest(kind=kind):
                module = small(kind)
                self.assertEqual((module.cp_size, module.cp_rank), (1, 0))
                self.assertIsNone(module.cp_group)
                self.assertEqual(cp_keys(module), (None, None, None))
                self.assertIsNone(module._context_parallel())

    def test_constructor_group(self):
        group = object()
        for kind in KINDS:
            for rank in (0, 1):
                with self.subTest(kind=kind, rank=rank), cp_world(2, rank):
                    module = small(kind, cp_group=group,
                                   cp_global_ranks=[0, 1],
                                   cp_comm_type="all_gather")
                    self.assertEqual(cp_keys(module),
                                     (2, rank, "all_gather"))
                    self.assertIs(module.cp_group, group)
                    self.assertEqual(module.cp_global_ranks, [0, 1])
                    self.assertEqual(module.cp_comm_type, "all_gather")
                    # TE's default "p2p" runs as a2a: 8 heads and 4 groups
                    # divide by 2.
                    module = small(kind, cp_group=group)
                    self.assertEqual(module.cp_comm_type, "p2p")
                    self.assertEqual(cp_keys(module), (2, rank, "a2a"))
                    self.assertEqual(module._context_parallel(),
                                     (2, rank, "a2a"))

    def test_p2p_runs_as_a2a_where_the_heads_divide(self):
        from unittest import mock
        group = object()
        # (cp_size, module arguments, the spec's comm type); small(): 8
        # heads, 4 groups.
        cases = [
            (2, {}, "a2a"),
            (4, {}, "a2a"),
            (8, {}, "all_gather"),                     # 4 groups over 8
            (2, {"num_gqa_groups": 1}, "all_gather"),  # MQA
            (2, {"tp_size": 2, "set_parallel_mode": True}, "a2a"),
            # 4 groups over tp 2 are 2 per rank, which 4 does not divide.
            (4, {"tp_size": 2, "set_parallel_mode": True}, "all_gather"),
        ]
        for cp_size, arguments, expected in cases:
            for kind in KINDS:
                if kind == "DotProductAttention" and (
                        "set_parallel_mode" in arguments):
                    continue
                with self.subTest(kind=kind, cp_size=cp_size,
                                  arguments=arguments), \
                        cp_world(cp_size, 1):
                    module = small(kind, cp_group=group, **arguments)
                    self.assertEqual(cp_keys(module)[2], expected)
                    for name, child in module.named_modules():
                        if getattr(child, "_has_attention", False):
                            self.assertEqual(cp_keys(child)[2], expected,
                                             name)
        # A library whose groups take no all-to-all: the all-gather.
        with cp_world(2, 0), mock.patch.object(
                tejit.TensorParallelGroup, "takes_all_to_all",
                lambda: False):
            self.assertEqual(cp_keys(small("TransformerLayer",
                                           cp_group=group))[2],
                             "all_gather")

    def test_a2a(self):
        group = object()
        for kind in KINDS:
            for rank in (0, 1):
                with self.subTest(kind=kind, rank=rank), cp_world(2, rank):
                    module = small(kind, cp_group=group, cp_comm_type="a2a")
                    self.assertEqual(module.cp_comm_type, "a2a")
                    self.assertEqual(cp_keys(module), (2, rank, "a2a"))
                    # Part of the JIT key (_run_program's), unlike the
                    # all-gather's.
                    self.assertEqual(module._context_parallel(),
                                     (2, rank, "a2a"))
                    self.assertNotEqual(
                        module._context_parallel(),
                        small(kind, cp_group=group,
                              cp_comm_type="all_gather")._context_parallel())
                    for name, child in module.named_modules():
                        if getattr(child, "_has_attention", False):
                            self.assertEqual(cp_keys(child),
                                             (2, rank, "a2a"), name)
        # Four ranks: 8 heads and 4 groups per rank divide by 4.
        with cp_world(4, 3):
            layer = small("TransformerLayer", cp_group=group,
                          cp_comm_type="a2a")
        self.assertEqual(cp_keys(layer), (4, 3, "a2a"))

    def test_submodules_get_the_group(self):
        group = object()
        with cp_world(2, 1):
            layer = small("TransformerLayer", cp_group=group)
        for module in (layer.self_attention,
                       layer.self_attention.core_attention):
            self.assertIs(module.cp_group, group, type(module).__name__)
            self.assertEqual((module.cp_size, module.cp_rank), (2, 1))

    def test_set_context_parallel_group_reaches_submodules(self):
        layer = small("TransformerLayer")
        group = object()
        with cp_world(2, 1):
            layer.set_context_parallel_group(group, [2, 3], None,
                                             "all_gather")
        for module in (layer, layer.self_attention,
                       layer.self_attention.core_attention,
                       layer.layernorm_mlp):
            self.assertIs(module.cp_group, group, type(module).__name__)
            self.assertEqual((module.cp_size, module.cp_rank,
                              module.cp_global_ranks), (2, 1, [2, 3]))
        self.assertEqual(cp_keys(layer), (2, 1, "all_gather"))
        self.assertEqual(cp_keys(layer.self_attention),
                         (2, 1, "all_gather"))
        # The per-token MLP keeps the arguments and uses none.
        self.assertIsNone(layer.layernorm_mlp._context_parallel())
        self.assertNotIn("cp_size", layer.layernorm_mlp._layer_spec())
        # None: back to cp_size 1.
        layer.set_context_parallel_group(None, None, None)
        self.assertEqual(cp_keys(layer), (None, None, None))
        self.assertEqual(layer.self_attention.core_attention.cp_size, 1)
        # a2a, the all-gather, and TE's default (a2a here).
        with cp_world(2, 0):
            layer.set_context_parallel_group(group, None, None, "a2a")
            for module in (layer, layer.self_attention,
                           layer.self_attention.core_attention):
                self.assertEqual(cp_keys(module), (2, 0, "a2a"),
                                 type(module).__name__)
            self.assertEqual(layer.layernorm_mlp.cp_comm_type, "a2a")
            self.assertIsNone(layer.layernorm_mlp._context_parallel())
            layer.set_context_parallel_group(group, None, None,
                                             "all_gather")
            self.assertEqual(cp_keys(layer.self_attention.core_attention),
                             (2, 0, "all_gather"))
            layer.set_context_parallel_group(group, None, None)
        self.assertEqual(cp_keys(layer.self_attention.core_attention),
                         (2, 0, "a2a"))

    def run_captured(self, module, *inputs, **kwargs):
        """`module`'s forward on CPU tensors up to its program: the input
        checks (which want CUDA tensors) skipped, _run_program replaced by
        a recorder of what it is given. Returns {activations, shape_spec,
        layer}."""
        from unittest import mock
        from tejit.pytorch.module import attention as attention_module
        captured = {}

        def run_program(activations, dtype, shape_key, shape_spec, shape,
                        layer_spec=None, variant=(), **_kwargs):
            captured.update(activations=activations, shape_spec=shape_spec,
                            layer=(layer_spec or module._layer_spec)())
            return {"output": None}
        with mock.patch.object(attention_module, "check_input",
                               lambda *args: None), \
                mock.patch.object(module, "_run_program", run_program):
            module(*inputs, **kwargs)
        return captured

    def test_a_call_takes_global_lengths(self):
        group = object()
        with cp_world(2, 1):
            block = small("MultiheadAttention", cp_group=group,
                          params_dtype=torch.bfloat16)
            layer = small("TransformerLayer", cp_group=group,
                          params_dtype=torch.bfloat16,
                          attn_input_format="bshd")
            attention = small("DotProductAttention", cp_group=group)
        # sbhd: this rank's 16 of 32 positions; the rotary table is the
        # whole sequence's (TE's), its first 32 positions taken.
        freqs = torch.zeros(64, 1, 1, 32)
        got = self.run_captured(block, torch.zeros(16, 2, 256,
                                                   dtype=torch.bfloat16),
                                rotary_pos_emb=freqs)
        self.assertEqual((got["shape_spec"]["seq_length"],
                          got["shape_spec"]["batch_size"]), (32, 2))
        self.assertEqual(tuple(got["activations"]["rotary_pos_emb"].shape),
                         (32, 1, 1, 32))
        self.assertEqual((got["layer"]["cp_size"], got["layer"]["cp_rank"]),
                         (2, 1))
        # bshd: dim 1 is the sequence.
        got = self.run_captured(layer, torch.zeros(2, 24, 256,
                                                   dtype=torch.bfloat16))
        self.assertEqual((got["shape_spec"]["seq_length"],
                          got["shape_spec"]["batch_size"]), (48, 2))
        # TE's default p2p: a2a, as 8 heads and 4 groups divide by 2.
        self.assertEqual(got["layer"]["cp_comm_type"], "a2a")
        q = torch.zeros(8, 2, 8, 32, dtype=torch.bfloat16)
        kv = torch.zeros(8, 2, 4, 32, dtype=torch.bfloat16)
        got = self.run_captured(attention, q, kv, kv)
        self.assertEqual(got["shape_spec"]["seq_length"], 16)
        self.assertNotIn("kv_seq_length", got["layer"])
        # An odd local length, and keys of another length, are refused.
        with self.assertRaises(ValueError) as caught:
            self.run_captured(block, torch.zeros(15, 2, 256,
                                                 dtype=torch.bfloat16))
        self.assertIn("hidden_states", str(caught.exception))
        with self.assertRaises(NotImplementedError) as caught:
            self.run_captured(attention, q, kv[:4], kv[:4])
        self.assertIn("key_layer", str(caught.exception))

    def test_an_a2a_call(self):
        # The same global lengths and inputs as the all-gather's; the
        # layer's spec says a2a.
        group = object()
        with cp_world(2, 0):
            block = small("MultiheadAttention", cp_group=group,
                          params_dtype=torch.bfloat16, cp_comm_type="a2a")
            attention = small("DotProductAttention", cp_group=group,
                              qkv_format="bshd", cp_comm_type="a2a")
        got = self.run_captured(block, torch.zeros(16, 2, 256,
                                                   dtype=torch.bfloat16),
                                rotary_pos_emb=torch.zeros(64, 1, 1, 32))
        self.assertEqual(got["shape_spec"]["seq_length"], 32)
        self.assertEqual(tuple(got["activations"]["rotary_pos_emb"].shape),
                         (32, 1, 1, 32))
        self.assertEqual(tuple(got["layer"].get(key) for key in CP_KEYS),
                         (2, 0, "a2a"))
        q = torch.zeros(2, 8, 8, 32, dtype=torch.bfloat16)
        kv = torch.zeros(2, 8, 4, 32, dtype=torch.bfloat16)
        got = self.run_captured(attention, q, kv, kv,
                                attn_mask_type="no_mask")
        self.assertEqual((got["shape_spec"]["seq_length"],
                          got["shape_spec"]["batch_size"]), (16, 2))
        self.assertEqual((got["layer"]["cp_comm_type"],
                          got["layer"]["attn_mask_type"]), ("a2a", "no_mask"))

    def test_copies(self):
        group = object()
        with cp_world(2, 0):
            layer = small("TransformerLayer", cp_group=group)
        self.assertIs(copy.deepcopy(layer).cp_group, group)
        restored = pickle.loads(pickle.dumps(layer))
        self.assertIsNone(restored.cp_group)
        self.assertEqual(restored.cp_size, 2)
        with self.assertRaises(RuntimeError) as caught:
            restored._required_cp_group()
        self.assertIn("set_context_parallel_group", str(caught.exception))
        self.assertIs(layer._required_cp_group(), group)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class RefusalTest(RefusalAssertions, unittest.TestCase):

    def test_constructor_and_set_group(self):
        group = object()
        cases = [
            (NotImplementedError,
             lambda: small("TransformerLayer", layer_type="decoder",
                           cp_group=group), "layer_type='decoder'"),
            (NotImplementedError,
             lambda: small("TransformerLayer", attn_input_format="thd",
                           cp_group=group), "attn_input_format='thd'"),
            (NotImplementedError,
             lambda: small("MultiheadAttention", attention_type="cross",
                           cp_group=group), "attention_type='cross'"),
            (NotImplementedError,
             lambda: small("DotProductAttention", qkv_format="thd",
                           cp_group=group), "qkv_format='thd'"),
            (NotImplementedError,
             lambda: small("TransformerLayer", tp_size=2,
                           set_parallel_mode=True, sequence_parallel=True,
                           cp_group=group), "sequence_parallel=True"),
            (NotImplementedError,
             lambda: small("DotProductAttention", cp_group=group,
                           cp_comm_type="a2a+p2p"), "cp_comm_type='a2a+p2p'"),
            (NotImplementedError,
             lambda: small("DotProductAttention", cp_group=[group, group],
                           cp_comm_type="a2a+p2p"), "cp_group=[...]"),
            (ValueError,
             lambda: small("MultiheadAttention", cp_group=group,
                           cp_comm_type="ring"), "cp_comm_type"),
            (NotImplementedError,
             lambda: small("TransformerLayer",
                           layer_type="decoder").set_context_parallel_group(
                               group, None, None),
             "set_context_parallel_group", "layer_type='decoder'"),
        ]
        with cp_world(2, 0):
            for error, factory, *words in cases:
                with self.subTest(words=words):
                    self.assertRefused(error, factory, *words)
        # Without context parallelism the same modules build.
        small("TransformerLayer", layer_type="decoder")
        small("DotProductAttention", qkv_format="thd", cp_comm_type="a2a")
        small("DotProductAttention", cp_comm_type="a2a+p2p")

    def test_a2a_heads_not_divisible(self):
        group = object()
        # small(): 8 heads, 4 groups.
        cases = [
            (8, lambda: small("DotProductAttention", cp_group=group,
                              cp_comm_type="a2a"),
             ("DotProductAttention", "num_gqa_groups (4)", "cp_size (8)")),
            (4, lambda: te.DotProductAttention(6, 32, cp_group=group,
                                               cp_comm_type="a2a"),
             ("DotProductAttention", "num_attention_heads (6)",
              "cp_size (4)")),
            (8, lambda: small("MultiheadAttention", cp_group=group,
                              cp_comm_type="a2a"),
             ("MultiheadAttention", "num_gqa_groups (4)")),
            # Per tensor-parallel rank: 4 groups over tp 2 are 2.
            (4, lambda: small("MultiheadAttention", tp_size=2,
                              set_parallel_mode=True, cp_group=group,
                              cp_comm_type="a2a"),
             ("MultiheadAttention", "num_gqa_groups (4)",
              "2 per tensor-parallel rank", "cp_size (4)")),
            # The layer's own check comes before its submodules'.
            (8, lambda: small("TransformerLayer", cp_group=group,
                              cp_comm_type="a2a"),
             ("TransformerLayer", "num_gqa_groups (4)")),
            (8, lambda: small("TransformerLayer").set_context_parallel_group(
                group, None, None, "a2a"),
             ("TransformerLayer.set_context_parallel_group",
              "num_gqa_groups (4)")),
        ]
        for cp_size, factory, words in cases:
            with self.subTest(words=words), cp_world(cp_size, 0):
                self.assertRefused(ValueError, factory, *words,
                                   "cp_comm_type='a2a'")
        with cp_world(8, 0):
            # The all-gather has no such rule.
            small("TransformerLayer", cp_group=group)
            small("MultiheadAttention", tp_size=2, set_parallel_mode=True,
                  cp_group=group)

    def test_forward(self):
        group = object()
        with cp_world(2, 0):
            attention = small("DotProductAttention", cp_group=group)
            block = small("MultiheadAttention", cp_group=group)
            layer = small("TransformerLayer", cp_group=group)
        q = torch.zeros(8, 2, 8, 32, dtype=torch.bfloat16)
        kv = torch.zeros(8, 2, 4, 32, dtype=torch.bfloat16)
        x = torch.zeros(8, 2, 256)
        cases = [
            (lambda: attention(q, kv, kv, attn_mask_type="padding"),
             "attn_mask_type='padding'"),
            (lambda: attention(q, kv, kv, attn_mask_type="arbitrary"),
             "attn_mask_type='arbitrary'"),
            (lambda: attention(q, kv, kv, core_attention_bias_type="alibi"),
             "core_attention_bias_type"),
            (lambda: attention(q, kv, kv, qkv_format="thd"),
             "qkv_format='thd'"),
            (lambda: attention(q, kv, kv, inference_params=object()),
             "inference_params"),
            (lambda: block(x, attn_mask_type="padding_causal"),
             "attn_mask_type='padding_causal'"),
            (lambda: block(x, inference_params=object()),
             "inference_params"),
            (lambda: layer(x, self_attn_mask_type="padding"),
             "self_attn_mask_type='padding'"),
            (lambda: layer(x, alibi_slopes=torch.zeros(8)), "alibi_slopes"),
            (lambda: layer(x, inference_params=object()),
             "inference_params"),
        ]
        for factory, word in cases:
            with self.subTest(word=word):
                self.assertRefused(NotImplementedError, factory, word,
                                   "context parallelism")


    def test_forward_names_a2a(self):
        """A sliding window and FP8 attention: refused under the
        all-gather (all_gather, and TE's default p2p where a2a does not
        run: here a library without an all-to-all), the message naming a2a
        as the way to run them; before anything compiles."""
        from unittest import mock
        group = object()
        for comm_type in ("p2p", "all_gather"):
            for kind in KINDS:
                with cp_world(2, 0):
                    module = small_bf16(kind, cp_group=group,
                                        cp_comm_type=comm_type)
                inputs = small_inputs(kind)
                refusals = [("window_size", None, {"window_size": (8, 0)}),
                            ("fp8_dpa", FP8_DPA, {})]
                for what, fp8_recipe, call in refusals:
                    with self.subTest(kind=kind, comm_type=comm_type,
                                      what=what), mock.patch.object(
                            tejit.TensorParallelGroup, "takes_all_to_all",
                            lambda: False), te.fp8_autocast(
                            enabled=fp8_recipe is not None,
                            fp8_recipe=fp8_recipe):
                        self.assertRefused(
                            NotImplementedError,
                            lambda: compiled_spec(module, *inputs, **call),
                            kind, what, "context parallelism",
                            f"cp_comm_type={comm_type!r}",
                            "cp_comm_type='a2a' runs it")

    def test_a2a_keeps_what_it_does_not_run(self):
        group = object()
        with cp_world(2, 0):
            attention = small_bf16("DotProductAttention", cp_group=group,
                                   cp_comm_type="a2a")
            layer = small_bf16("TransformerLayer", cp_group=group,
                               cp_comm_type="a2a")
        q, kv, _ = small_inputs("DotProductAttention")
        x, = small_inputs("TransformerLayer")
        cases = [
            (lambda: compiled_spec(attention, q, kv, kv,
                                   attn_mask_type="padding",
                                   window_size=(8, -1)),
             ("attn_mask_type='padding'", "context parallelism")),
            (lambda: compiled_spec(attention, q, kv, kv,
                                   core_attention_bias_type="alibi",
                                   window_size=(8, 0)),
             ("core_attention_bias_type", "context parallelism")),
            (lambda: compiled_spec(layer, x, inference_params=object()),
             ("inference_params", "context parallelism")),
            (lambda: compiled_spec(attention, q, kv[:4], kv[:4]),
             ("key_layer", "context parallelism")),
        ]
        for factory, words in cases:
            with self.subTest(words=words):
                self.assertRefused(NotImplementedError, factory, *words)
        # FP8 attention's own refusals stay: no window under fp8_dpa.
        with te.fp8_autocast(fp8_recipe=FP8_DPA):
            self.assertRefused(
                NotImplementedError,
                lambda: compiled_spec(layer, x, window_size=(8, 0)),
                "TransformerLayer", "window_size", "FP8 attention")


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class A2aRunsMoreTest(unittest.TestCase):
    """With cp_comm_type a2a a sliding window and FP8 attention reach the
    program's spec as at cp_size 1: the layer's window_size next to the cp
    keys, the recipe's fp8_dpa (docs/context-parallel.md, "a2a runs more
    than all_gather")."""

    def modules(self, mask_type="causal", **kwargs):
        """{kind: small_bf16(kind)} at cp 2 (rank 1) with a2a."""
        group = object()
        with cp_world(2, 1):
            return {kind: small_bf16(kind, mask_type, cp_group=group,
                                     cp_comm_type="a2a", **kwargs)
                    for kind in KINDS}

    def test_windows(self):
        for mask_type, window in (("causal", (8, 0)), ("no_mask", (8, -1))):
            for where in ("constructor", "forward"):
                built = self.modules(
                    mask_type, **({"window_size": window}
                                  if where == "constructor" else {}))
                call = {} if where == "constructor" else {
                    "window_size": window}
                for kind, module in built.items():
                    with self.subTest(kind=kind, where=where,
                                      mask_type=mask_type):
                        spec = compiled_spec(module, *small_inputs(kind),
                                             **call)
                        layer = spec["layers"][0]
                        self.assertEqual(
                            tuple(layer.get(k) for k in CP_KEYS),
                            (2, 1, "a2a"))
                        self.assertEqual(layer["window_size"], list(window))
                        self.assertEqual(layer[MASK_ARGUMENTS[kind]],
                                         mask_type)
                        self.assertEqual(spec["seq_length"], 32)

    def test_fp8_attention(self):
        for kind, module in self.modules().items():
            with self.subTest(kind=kind):
                with te.fp8_autocast(fp8_recipe=FP8_DPA):
                    spec = compiled_spec(module, *small_inputs(kind))
                self.assertEqual(spec["recipe"], FP8_DPA.to_spec())
                self.assertTrue(spec["recipe"]["fp8_dpa"])
                self.assertEqual(
                    tuple(spec["layers"][0].get(k) for k in CP_KEYS),
                    (2, 1, "a2a"))
                self.assertNotIn("window_size", spec["layers"][0])
                # The program's recipe (DotProductAttention's too, with
                # fp8_dpa), as at cp_size 1.
                with te.fp8_autocast(fp8_recipe=FP8_DPA):
                    self.assertIs(module._program_recipe(), FP8_DPA)


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class DropoutSeedTest(unittest.TestCase):
    """Each context-parallel rank's training program gets its own dropout
    seed (_args.context_parallel_seed), from one generator state: rank 0
    the seed drawn, as without context parallelism, the others their own
    (each rank draws masks by its local positions and heads)."""

    def seed_of(self, cp_size, rank, comm_type="p2p"):
        """The seed TransformerLayer's training program at cp_size / rank
        gets after torch.manual_seed(7); the program is a recorder that
        stops the call at set_seed."""
        from unittest import mock
        from tejit.pytorch.module import attention as attention_module
        seeds = []

        class Program:
            def set_seed(self, seed):
                seeds.append(seed)
                raise CompileReached()

        class Compiled:
            program = Program()
        with cp_world(cp_size, rank):
            layer = small_bf16("TransformerLayer", hidden_dropout=0.1,
                               cp_group=object() if cp_size > 1 else None,
                               cp_comm_type=comm_type)
        layer.train()
        torch.manual_seed(7)
        with mock.patch.object(attention_module, "check_input",
                               lambda *args: None), \
                mock.patch.object(layer, "_compile",
                                  lambda key, spec, shape: Compiled()):
            with self.assertRaises(CompileReached):
                layer(*small_inputs("TransformerLayer"))
        return seeds[0]

    def test_one_seed_per_rank(self):
        alone = self.seed_of(1, 0)
        for comm_type in ("p2p", "all_gather", "a2a"):
            with self.subTest(comm_type=comm_type):
                seeds = [self.seed_of(4, rank, comm_type) for rank in range(4)]
                self.assertEqual(seeds[0], alone)
                self.assertEqual(len(set(seeds)), 4)
                self.assertTrue(all(0 <= seed < 2**62 for seed in seeds))
                self.assertEqual(self.seed_of(4, 3, comm_type), seeds[3])


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class CollectiveTest(unittest.TestCase):
    def test_cp_group_is_the_process_groups_group(self):
        from unittest import mock
        for takes_all_to_all in (True, False):
            made = []

            def from_function(all_reduce, all_gather=None,
                              reduce_scatter=None, **optional):
                made.append((all_gather, reduce_scatter, optional))
                return object()
            group = object()
            with self.subTest(takes_all_to_all=takes_all_to_all), \
                    mock.patch.object(tejit.TensorParallelGroup,
                                      "from_function", from_function), \
                    mock.patch.object(tejit.TensorParallelGroup,
                                      "takes_all_to_all",
                                      lambda: takes_all_to_all), \
                    mock.patch.object(_distributed, "group_size",
                                      lambda process_group: 2):
                cp = _distributed.tp_group(group, 5)
                self.assertIs(_distributed.tp_group(group, 5), cp)
                _distributed._TP_GROUPS.pop((group, 5), None)
                self.assertEqual(len(made), 1)
                all_gather, reduce_scatter, optional = made[0]
                self.assertIsNotNone(all_gather)
                self.assertIsNotNone(reduce_scatter)
                # all_to_all only where the library takes one (an older
                # one refuses it: TensorParallelGroup.from_function).
                self.assertEqual(list(optional),
                                 ["all_to_all"] if takes_all_to_all else [])
                self.assertTrue(all(function is not None
                                    for function in optional.values()))

    def test_all_to_all_function(self):
        # Called as the runtime calls it: ranks * count elements at each
        # address, torch's all_to_all_single(output, input, group=...).
        from unittest import mock
        captured, views, calls = {}, {}, []

        def from_function(all_reduce, all_gather=None, reduce_scatter=None,
                          all_to_all=None):
            captured["all_to_all"] = all_to_all
            return object()

        def device_view(address, count, dtype, device):
            tensor = torch.zeros(count, dtype=dtype)
            views[id(tensor)] = (address, count, dtype, device)
            return tensor

        def all_to_all_single(target, source, *args, **kwargs):
            calls.append((views[id(target)], views[id(source)], args,
                          kwargs.get("group")))
        group = object()
        dist = torch.distributed
        with mock.patch.object(tejit.TensorParallelGroup, "from_function",
                               from_function), \
                mock.patch.object(tejit.TensorParallelGroup,
                                  "takes_all_to_all", lambda: True), \
                mock.patch.object(_distributed, "device_view", device_view), \
                mock.patch.object(_distributed, "group_size",
                                  lambda process_group: 4), \
                mock.patch.object(_distributed, "_on_stream",
                                  lambda device, stream:
                                  contextlib.nullcontext()), \
                mock.patch.object(dist, "all_to_all_single",
                                  all_to_all_single, create=True):
            _distributed.tp_group(group, 3)
            for dtype, torch_dtype in (("bfloat16", torch.bfloat16),
                                       ("float16", torch.float16),
                                       ("float32", torch.float32)):
                captured["all_to_all"](200, 300, 8, dtype, 7)
                self.assertEqual(calls.pop(), (
                    (300, 32, torch_dtype, 3), (200, 32, torch_dtype, 3),
                    (), group))
            with self.assertRaises(ValueError) as caught:
                captured["all_to_all"](200, 300, 8, "int8", None)
            self.assertIn("all-to-all", str(caught.exception))
        _distributed._TP_GROUPS.pop((group, 3), None)
        self.assertEqual(calls, [])


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class SplitTest(unittest.TestCase):
    def test_round_trip_on_tensors(self):
        split = te.distributed
        for cp_size in (1, 2, 4):
            for seq_dim, shape in ((0, (8 * cp_size, 3, 5)),
                                   (1, (3, 8 * cp_size, 5))):
                with self.subTest(cp_size=cp_size, seq_dim=seq_dim):
                    whole = torch.randn(*shape)
                    parts = [split.context_parallel_split(whole, cp_size, r,
                                                          seq_dim)
                             for r in range(cp_size)]
                    for rank, part in enumerate(parts):
                        positions = torch.tensor(
                            split.context_parallel_positions(
                                shape[seq_dim], cp_size, rank))
                        self.assertTrue(torch.equal(
                            part, whole.index_select(seq_dim, positions)))
                    self.assertTrue(torch.equal(
                        split.context_parallel_merge(parts, seq_dim), whole))
        # Without torch.distributed the gather is this rank's part.
        part = torch.randn(4, 2)
        self.assertTrue(torch.equal(
            split.context_parallel_gather(part, None), part))


if __name__ == "__main__":
    unittest.main()
