"""Context parallelism in tejit.pytorch (docs/context-parallel.md), without
PyTorch or a GPU: TE's arguments as the modules take them (cp_group's size
and this process's rank in it, cp_global_ranks, cp_comm_type:
"all_gather" runs as the all-gather, "a2a" as all-to-alls with heads and
num_gqa_groups per rank divisible by cp_size, TE's default "p2p" as a2a
where they divide and the group takes an all-to-all, else as the
all-gather, "a2a+p2p" refused; each rank's dropout seed) with
errors naming the argument, what a context-parallel call refuses (packed
sequences, padding and other masks, attention bias, KV caches,
cross-attention; sliding windows and FP8 attention unless the spec's
cp_comm_type is "a2a", the message naming a2a), the global sequence length of a
rank's (even) part, the spec keys (cp_size, cp_rank, cp_comm_type
"all_gather" or "a2a"; none at cp_size 1, so existing specs and their
cache keys are unchanged), the programs those specs compile to
(ContextParallelShapesTest and A2aShapesTest: skipped while the compiler
does not know the keys or the value a2a; A2aWindowShapesTest and
A2aFp8AttentionShapesTest: while it refuses a window or fp8_dpa with a2a,
session 33's second contract), Program.set_cp_group / cp_size
and TensorParallelGroup.from_function's all_to_all
(tejit_tp_group_set_all_to_all, declared only where the library has it)
over stand-in libraries, and tejit.pytorch.distributed's load-balanced
split and merge. The checks live in python/tejit/pytorch/module/_args.py,
the spec builders in _attention_specs.py and the split in distributed.py,
loaded here by path (the tejit.pytorch package needs PyTorch;
tests/python/test_pytorch_context_parallel.py checks the modules where it
is installed, tests/gpu/context_parallel_check.py runs them on 2 GPUs).
Run: python3 -m pytest tests/python
"""
import ctypes
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from tejit.common import recipe  # noqa: E402
from test_tensor_parallel_args import parameters  # noqa: E402
from torch_free import RefusalAssertions, StandInLibrary, library_loads, load  # noqa: E402

args = load("module/_args.py", "tejit_args_cp")
specs = load("module/_attention_specs.py", "tejit_attention_specs_cp")
split = load("distributed.py", "tejit_distributed_cp")


def sizes(size, rank):
    """group_size and group_rank stand-ins: every group has `size` ranks,
    this process is `rank`."""
    return dict(group_size=lambda group: size, group_rank=lambda group: rank)


class ArgumentTest(RefusalAssertions, unittest.TestCase):
    def test_no_group_is_cp_size_1(self):
        self.assertEqual(args.context_parallel_of("DotProductAttention",
                                                  None), (1, 0))
        # TE's default comm type, and the others, without a group.
        for comm_type in ("p2p", "all_gather", "a2a", "a2a+p2p"):
            self.assertEqual(args.context_parallel_of(
                "DotProductAttention", None, None, comm_type), (1, 0))

    def test_size_and_rank_from_the_group(self):
        for comm_type in ("p2p", "all_gather", "a2a"):
            with self.subTest(cp_comm_type=comm_type):
                self.assertEqual(args.context_parallel_of(
                    "TransformerLayer", "cp", [4, 5], comm_type,
                    **sizes(2, 1)), (2, 1))
        self.assertEqual(args.context_parallel_of(
            "TransformerLayer", "cp", None, "p2p", **sizes(4, 3)), (4, 3))

    def test_a2a_p2p_is_refused_naming_cp_comm_type(self):
        self.assertRefused(
            NotImplementedError,
            lambda: args.context_parallel_of(
                "MultiheadAttention", "cp", None, "a2a+p2p", **sizes(2, 0)),
            "MultiheadAttention", "cp_comm_type='a2a+p2p'", "all_gather",
            "'a2a'")
        # A group of one rank runs nothing in parallel: accepted.
        self.assertEqual(args.context_parallel_of(
            "MultiheadAttention", "cp", None, "a2a+p2p", **sizes(1, 0)),
            (1, 0))
        # a2a+p2p's list of groups, with any comm type.
        for comm_type in ("a2a", "a2a+p2p", "p2p"):
            with self.subTest(cp_comm_type=comm_type):
                self.assertRefused(
                    NotImplementedError,
                    lambda: args.context_parallel_of(
                        "MultiheadAttention", ["a", "b"], None, comm_type,
                        **sizes(2, 0)),
                    "cp_group=[...]", "a2a+p2p")

    def test_spec_comm_types(self):
        # TE's p2p runs as a2a where a2a runs (the heads divide and the
        # group takes an all-to-all), else as the all-gather.
        for a2a_runs, p2p in ((True, "a2a"), (False, "all_gather")):
            with self.subTest(a2a_runs=a2a_runs):
                self.assertEqual(
                    {comm_type: args.spec_comm_type(comm_type, a2a_runs)
                     for comm_type in args.CP_COMM_TYPES},
                    {"p2p": p2p, "all_gather": "all_gather", "a2a": "a2a"})
        self.assertEqual({args.spec_comm_type(comm_type, a2a_runs)
                          for comm_type in args.CP_COMM_TYPES
                          for a2a_runs in (True, False)},
                         set(specs.CP_SPEC_COMM_TYPES))

    def test_a2a_divides(self):
        # (cp_size, heads, groups, tp_size): whether each rank's share of
        # the heads and of the groups is whole.
        cases = [((2, 8, 4, 1), True), ((4, 8, 4, 1), True),
                 ((8, 8, 4, 1), False), ((2, 8, 1, 1), False),
                 ((2, 6, 2, 1), True), ((4, 6, 2, 1), False),
                 ((2, 8, 4, 2), True), ((4, 8, 4, 2), False),
                 ((2, 32, 8, 4), True), ((4, 32, 8, 4), False)]
        for arguments, divides in cases:
            with self.subTest(arguments=arguments):
                cp_size, heads, groups, tp_size = arguments
                self.assertEqual(args.a2a_divides(cp_size, heads, groups,
                                                  tp_size), divides)

    def test_context_parallel_seed(self):
        seed = 0x123456789ABCDEF
        seeds = [args.context_parallel_seed(seed, rank) for rank in range(64)]
        self.assertEqual(seeds[0], seed)
        self.assertEqual(len(set(seeds)), 64)
        self.assertTrue(all(0 <= value < 2**62 for value in seeds))
        # Near the top of the range it wraps, still distinct per rank.
        top = [args.context_parallel_seed(2**62 - 1, rank)
               for rank in range(8)]
        self.assertEqual(len(set(top)), 8)
        self.assertTrue(all(0 <= value < 2**62 for value in top))

    def test_a2a_heads_divisible_by_cp_size(self):
        check = args.check_a2a_heads
        # What runs: heads and groups per rank divisible by cp_size.
        for cp_size, heads, groups, tp_size in ((2, 8, 4, 1), (2, 8, 2, 1),
                                                (4, 16, 4, 1), (2, 8, 4, 2),
                                                (2, 16, 8, 4)):
            check("TransformerLayer", cp_size, "a2a", heads, groups,
                  tp_size=tp_size)
        cases = [
            # (cp_size, heads, groups, tp_size), the argument, its value,
            # what else the message says.
            ((2, 6, 3, 1), "num_gqa_groups", "(3)", ()),
            ((4, 6, 2, 1), "num_attention_heads", "(6)", ()),
            ((2, 8, 1, 1), "num_gqa_groups", "(1)", ()),  # MQA
            ((4, 8, 2, 1), "num_gqa_groups", "(2)", ()),
            ((4, 8, 8, 4), "num_attention_heads", "(8)",
             ("2 per tensor-parallel rank", "tp_size 4")),
            ((4, 16, 4, 2), "num_gqa_groups", "(4)",
             ("2 per tensor-parallel rank", "tp_size 2")),
        ]
        for (cp_size, heads, groups, tp_size), name, value, words in cases:
            with self.subTest(cp_size=cp_size, heads=heads, groups=groups,
                              tp_size=tp_size):
                self.assertRefused(ValueError,
                                   lambda: check("MultiheadAttention",
                                                 cp_size, "a2a", heads,
                                                 groups, tp_size=tp_size),
                                   "MultiheadAttention",
                                   f"{name} {value}",
                                   f"cp_size ({cp_size})",
                                   "cp_comm_type='a2a'", *words)
                # The all-gather has no such rule, nor cp_size 1.
                for comm_type in ("p2p", "all_gather"):
                    check("MultiheadAttention", cp_size, comm_type, heads,
                          groups, tp_size=tp_size)
                check("MultiheadAttention", 1, "a2a", heads, groups,
                      tp_size=tp_size)

    def test_bad_values(self):
        self.assertRefused(ValueError,
                           lambda: args.context_parallel_of(
                               "DotProductAttention", "cp", None, "ring",
                               **sizes(2, 0)),
                           "cp_comm_type", "'ring'")
        self.assertRefused(NotImplementedError,
                           lambda: args.context_parallel_of(
                               "DotProductAttention", ["a", "b"], None,
                               "a2a+p2p", **sizes(2, 0)),
                           "cp_group=[...]")
        self.assertRefused(ValueError,
                           lambda: args.context_parallel_of(
                               "DotProductAttention", "cp", [0, 1, 2],
                               "p2p", **sizes(2, 0)),
                           "cp_global_ranks", "3 ranks", "cp_group 2")
        self.assertRefused(ValueError,
                           lambda: args.context_parallel_of(
                               "DotProductAttention", "cp", None, "p2p",
                               **sizes(2, -1)),
                           "not in cp_group")

    def test_cp_arguments_are_not_refused_as_defaults(self):
        for name in ("cp_group", "cp_global_ranks", "cp_stream"):
            self.assertNotIn(name, args._DEFAULTS_ONLY)

    def test_module_refusals(self):
        refusals = {"attn_input_format='thd'": False,
                    "layer_type='decoder'": True}
        args.check_context_parallel_module("TransformerLayer", 1, refusals)
        args.check_context_parallel_module(
            "TransformerLayer", 2, {"layer_type='decoder'": False})
        self.assertRefused(NotImplementedError,
                           lambda: args.check_context_parallel_module(
                               "TransformerLayer", 2, refusals),
                           "TransformerLayer(layer_type='decoder')",
                           "context parallelism", "cp_size 2")

    def test_call_refusals_name_the_argument(self):
        call = args.check_context_parallel_call
        # What runs: no_mask and causal, sbhd and bshd, no bias.
        for mask_type in ("no_mask", "causal"):
            for qkv_format in ("sbhd", "bshd"):
                call("DotProductAttention", 2, qkv_format=qkv_format,
                     mask_type=mask_type,
                     bias_arguments={"core_attention_bias_type": "no_bias",
                                     "core_attention_bias": None,
                                     "alibi_slopes": None},
                     sequence_arguments={"cu_seqlens_q": None})
        cases = [
            (dict(qkv_format="thd"), "qkv_format='thd'"),
            (dict(format_argument="attn_input_format", qkv_format="thd"),
             "attn_input_format='thd'"),
            (dict(sequence_arguments={"cu_seqlens_q": object()}),
             "cu_seqlens_q"),
            (dict(kv_cache=True), "inference_params"),
            (dict(cross="key_layer of another length"), "key_layer"),
            (dict(mask_type="padding"), "attn_mask_type='padding'"),
            (dict(mask_type="padding_causal",
                  mask_argument="self_attn_mask_type"),
             "self_attn_mask_type='padding_causal'"),
            (dict(mask_type="arbitrary"), "attn_mask_type='arbitrary'"),
            (dict(mask_type="causal_bottom_right"), "causal_bottom_right"),
            (dict(window_limited=True), "window_size"),
            (dict(bias_arguments={"core_attention_bias_type":
                                  "post_scale_bias"}),
             "core_attention_bias_type"),
            (dict(bias_arguments={"core_attention_bias_type": "no_bias",
                                  "alibi_slopes": object()}),
             "alibi_slopes"),
            (dict(fp8_dpa=True), "fp8_dpa"),
        ]
        for arguments, word in cases:
            with self.subTest(word=word):
                self.assertRefused(
                    NotImplementedError,
                    lambda: call("MultiheadAttention", 2, **arguments),
                    "MultiheadAttention", word, "context parallelism")
                call("MultiheadAttention", 1, **arguments)  # cp_size 1

    def test_a2a_runs_windows_and_fp8_attention(self):
        call = args.check_context_parallel_call
        lifted = [(dict(window_limited=True), "window_size"),
                  (dict(fp8_dpa=True), "fp8_dpa"),
                  (dict(window_limited=True, fp8_dpa=True), "window_size")]
        for arguments, word in lifted:
            for mask_type in ("no_mask", "causal"):
                with self.subTest(word=word, mask_type=mask_type):
                    call("TransformerLayer", 2, mask_type=mask_type,
                         cp_comm_type="a2a", **arguments)
                    call("TransformerLayer", 4, mask_type=mask_type,
                         cp_comm_type="a2a", **arguments)
                    # The all-gather (and TE's p2p where it runs as it)
                    # refuses them, naming a2a as the way to run them.
                    for comm_type in ("p2p", "all_gather"):
                        self.assertRefused(
                            NotImplementedError,
                            lambda: call("TransformerLayer", 2,
                                         mask_type=mask_type,
                                         cp_comm_type=comm_type,
                                         **arguments),
                            "TransformerLayer", word, "context parallelism",
                            f"cp_comm_type={comm_type!r}",
                            "cp_comm_type='a2a' runs it")
        # TE's default comm type is p2p: refused where it runs as the
        # all-gather (the message says why), run where it runs as a2a.
        self.assertRefused(NotImplementedError,
                           lambda: call("DotProductAttention", 2,
                                        fp8_dpa=True),
                           "fp8_dpa", "cp_comm_type='p2p'",
                           "runs as the all-gather here",
                           "cp_comm_type='a2a'")
        self.assertRefused(NotImplementedError,
                           lambda: call("DotProductAttention", 2,
                                        fp8_dpa=True, runs_a2a=False),
                           "fp8_dpa", "runs as the all-gather here")
        call("DotProductAttention", 2, fp8_dpa=True, window_limited=True,
             runs_a2a=True)
        # The spec's comm type decides, not TE's name.
        self.assertRefused(NotImplementedError,
                           lambda: call("DotProductAttention", 2,
                                        window_limited=True,
                                        cp_comm_type="a2a", runs_a2a=False),
                           "window_size")

    def test_a2a_keeps_the_other_refusals(self):
        call = args.check_context_parallel_call
        cases = [
            (dict(qkv_format="thd"), "qkv_format='thd'"),
            (dict(sequence_arguments={"cu_seqlens_kv": object()}),
             "cu_seqlens_kv"),
            (dict(kv_cache=True), "inference_params"),
            (dict(cross="key_layer of another length"), "key_layer"),
            (dict(mask_type="padding_causal"),
             "attn_mask_type='padding_causal'"),
            (dict(mask_type="causal_bottom_right"), "causal_bottom_right"),
            (dict(bias_arguments={"core_attention_bias_type": "alibi"}),
             "core_attention_bias_type"),
            # What a2a runs does not hide what it does not.
            (dict(window_limited=True, fp8_dpa=True,
                  bias_arguments={"core_attention_bias": object()}),
             "core_attention_bias"),
            (dict(window_limited=True, mask_type="padding"),
             "attn_mask_type='padding'"),
        ]
        for arguments, word in cases:
            with self.subTest(word=word):
                with self.assertRaises(NotImplementedError) as caught:
                    call("MultiheadAttention", 2, cp_comm_type="a2a",
                         **arguments)
                message = str(caught.exception)
                self.assertIn(word, message)
                self.assertIn("context parallelism", message)
                # Not lifted by a2a: the message does not send the user
                # there.
                self.assertNotIn("'a2a'", message)

    def test_global_sequence_length(self):
        self.assertEqual(args.context_parallel_seq("MultiheadAttention",
                                                   "hidden_states", 64, 2),
                         128)
        self.assertEqual(args.context_parallel_seq("MultiheadAttention",
                                                   "hidden_states", 63, 1),
                         63)
        self.assertRefused(ValueError,
                           lambda: args.context_parallel_seq(
                               "DotProductAttention", "query_layer", 63, 2),
                           "query_layer", "divisible by 2", "63")


class SpecTest(unittest.TestCase):
    def mha(self, **kwargs):
        return specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal", 0.0,
            True, 32, **kwargs)

    def block(self, **kwargs):
        return specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            "causal", True, False, 32, **kwargs)

    def dpa(self, **kwargs):
        return specs.dot_product_attention_spec(8, 32, 4, "causal", 0.0,
                                                0.125, **kwargs)

    def test_no_keys_without_context_parallelism(self):
        for build in (self.mha, self.block, self.dpa):
            with self.subTest(build=build.__name__):
                plain = build()
                self.assertNotIn("cp_size", plain)
                self.assertEqual(build(context_parallel=None), plain)
                self.assertEqual(build(context_parallel=(1, 0)), plain)

    def test_keys(self):
        for build in (self.mha, self.block, self.dpa):
            for rank in (0, 1):
                with self.subTest(build=build.__name__, rank=rank):
                    layer = build(context_parallel=(2, rank))
                    self.assertEqual(
                        (layer["cp_size"], layer["cp_rank"],
                         layer["cp_comm_type"]), (2, rank, "all_gather"))
                    self.assertEqual(
                        build(context_parallel=(2, rank, "all_gather")),
                        layer)
                    plain = build()
                    for key in ("cp_size", "cp_rank", "cp_comm_type"):
                        layer.pop(key)
                    self.assertEqual(layer, plain)

    def test_a2a_keys(self):
        for build in (self.mha, self.block, self.dpa):
            for rank in (0, 1):
                with self.subTest(build=build.__name__, rank=rank):
                    layer = build(context_parallel=(2, rank, "a2a"))
                    self.assertEqual(
                        (layer["cp_size"], layer["cp_rank"],
                         layer["cp_comm_type"]), (2, rank, "a2a"))
                    gathered = build(context_parallel=(2, rank))
                    gathered["cp_comm_type"] = "a2a"
                    self.assertEqual(layer, gathered)
            with self.subTest(build=build.__name__, cp_size=1):
                # No keys at cp_size 1, whatever the comm type.
                self.assertEqual(build(context_parallel=(1, 0, "a2a")),
                                 build())
            with self.subTest(build=build.__name__, comm_type="p2p"):
                # The spec's values only (TE's p2p is the module's
                # business: _args.spec_comm_type).
                with self.assertRaises(ValueError) as caught:
                    build(context_parallel=(2, 0, "p2p"))
                self.assertIn("'p2p'", str(caught.exception))

    def windowed(self, kind, mask_type, window, **kwargs):
        """The layer of `kind` (as mha, block, dpa) with `mask_type` and
        the sliding `window`."""
        if kind == "DotProductAttention":
            return specs.dot_product_attention_spec(
                8, 32, 4, mask_type, 0.0, 0.125, window_size=window,
                **kwargs)
        if kind == "MultiheadAttention":
            return specs.multihead_attention_spec(
                256, 8, 32, 4, True, "LayerNorm", 1e-5, False, mask_type,
                0.0, True, 32, window_size=window, **kwargs)
        return specs.transformer_layer_spec(
            256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0, 0.0,
            mask_type, True, False, 32, window_size=window, **kwargs)

    def test_a2a_keeps_the_window(self):
        """A sliding window reaches the spec under context parallelism as
        without it (only the cp keys differ)."""
        for kind in ("DotProductAttention", "MultiheadAttention",
                     "TransformerLayer"):
            for mask_type, window in (("causal", (128, 0)),
                                      ("no_mask", (128, -1))):
                with self.subTest(kind=kind, mask_type=mask_type):
                    plain = self.windowed(kind, mask_type, window)
                    layer = self.windowed(kind, mask_type, window,
                                          context_parallel=(2, 1, "a2a"))
                    self.assertEqual(layer["window_size"], list(window))
                    self.assertEqual(
                        (layer.pop("cp_size"), layer.pop("cp_rank"),
                         layer.pop("cp_comm_type")), (2, 1, "a2a"))
                    self.assertEqual(layer, plain)

    def test_a2a_keeps_the_recipe(self):
        """fp8_dpa reaches the program's spec under context parallelism
        (the recipe is the call's, next to the layer)."""
        fp8 = recipe.DelayedScaling(fp8_dpa=True).to_spec()
        spec = specs.program_spec("TransformerLayer", "bf16", "sbhd", 64, 2,
                                  self.block(context_parallel=(2, 0, "a2a")),
                                  fp8)
        self.assertTrue(spec["recipe"]["fp8_dpa"])
        self.assertEqual(spec["layers"][0]["cp_comm_type"], "a2a")

    def test_with_tensor_parallelism(self):
        layer = self.block(tp_size=2, context_parallel=(2, 1))
        self.assertEqual((layer["tp_size"], layer["cp_size"],
                          layer["cp_rank"]), (2, 2, 1))
        layer = self.mha(tp_size=2, context_parallel=(2, 1, "a2a"))
        self.assertEqual((layer["tp_size"], layer["cp_size"],
                          layer["cp_rank"], layer["cp_comm_type"]),
                         (2, 2, 1, "a2a"))

    def test_global_lengths_of_a_call(self):
        # A rank's [s/cp, b, h] input: the spec's seq_length is global.
        seq = args.context_parallel_seq("TransformerLayer", "hidden_states",
                                        32, 2)
        spec = specs.program_spec("TransformerLayer", "bf16", "sbhd", seq, 2,
                                  self.block(context_parallel=(2, 0)))
        self.assertEqual((spec["seq_length"], spec["batch_size"]), (64, 2))


_CP_SUPPORT = []


def compiler_takes_context_parallelism():
    """Whether this build's compiler knows the `cp_size` key (the spec
    importer refuses unknown keys)."""
    if not library_loads():
        return False
    if not _CP_SUPPORT:
        try:
            parameters(specs.dot_product_attention_spec(
                4, 32, 2, "causal", 0.0, 0.125, context_parallel=(2, 0)))
            _CP_SUPPORT.append(True)
        except tejit.TejitError as error:
            if "cp_" not in str(error):
                raise
            _CP_SUPPORT.append(False)
    return _CP_SUPPORT[0]


class ContextParallelShapesTest(unittest.TestCase):
    """The specs the modules write at cp_size 2 (global seq 32, batch 2)
    compile to programs whose activations are one rank's 16 positions and
    whose rotary table is the whole sequence's, parameters unchanged; the
    rank reaches the layer op."""

    def setUp(self):
        if not compiler_takes_context_parallelism():
            self.skipTest("this build's compiler does not take 'cp_size' "
                          "yet (or no library)")

    def test_dot_product_attention_gqa(self):
        for layout, local in (("sbhd", (16, 2)), ("bshd", (2, 16))):
            with self.subTest(layout=layout):
                got = parameters(specs.dot_product_attention_spec(
                    8, 32, 2, "causal", 0.0, 0.125, context_parallel=(2, 1)),
                    seq=32, input_format=layout)
                self.assertEqual(got["query"], (*local, 8, 32))
                self.assertEqual(got["key"], (*local, 2, 32))
                self.assertEqual(got["output"], (*local, 256))

    def test_multihead_attention_rotary(self):
        layer = specs.multihead_attention_spec(
            256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "no_mask", 0.0,
            True, 32, context_parallel=(2, 0))
        got = parameters(layer, seq=32)
        self.assertEqual(got["input"], (16, 2, 256))
        self.assertEqual(got["output"], (16, 2, 256))
        self.assertEqual(got["rotary_pos_emb"], (32, 1, 1, 32))
        self.assertEqual(got["layernorm_qkv.weight"], ((8 + 2 * 4) * 32, 256))

    def test_transformer_layer_rank_reaches_the_op(self):
        for rank in (0, 1):
            layer = specs.transformer_layer_spec(
                256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu", 0.0,
                0.0, "causal", True, False, False,
                context_parallel=(2, rank))
            spec = specs.program_spec("TransformerLayer", "bf16", "bshd", 32,
                                      2, layer)
            got = parameters(layer, seq=32, input_format="bshd")
            self.assertEqual(got["input"], (2, 16, 256))
            text = tejit.compile_ir(spec, "te")
            self.assertIn("cp_size = 2", text)
            if rank:
                self.assertIn(f"cp_rank = {rank}", text)

    def test_the_compiler_checks_the_length(self):
        with self.assertRaises(tejit.TejitError) as caught:
            parameters(specs.dot_product_attention_spec(
                4, 32, 2, "causal", 0.0, 0.125, context_parallel=(2, 0)),
                seq=30)
        self.assertIn("seq_length", str(caught.exception))


_A2A_SUPPORT = []


def compiler_takes_a2a():
    """Whether this build's compiler takes `cp_comm_type: a2a` (session
    33's contract; an older one refuses the value naming the key)."""
    if not compiler_takes_context_parallelism():
        return False
    if not _A2A_SUPPORT:
        try:
            parameters(specs.dot_product_attention_spec(
                4, 32, 2, "causal", 0.0, 0.125,
                context_parallel=(2, 0, "a2a")), seq=32)
            _A2A_SUPPORT.append(True)
        except tejit.TejitError as error:
            if "cp_comm_type" not in str(error):
                raise
            _A2A_SUPPORT.append(False)
    return _A2A_SUPPORT[0]


class A2aShapesTest(unittest.TestCase):
    """cp_comm_type a2a's specs (global seq 32, batch 2, cp 2) compile to
    programs of the all-gather's shapes (one rank's 16 positions of every
    head in and out, the whole sequence's rotary table); the comm type
    reaches the layer op, te-decompose makes all-to-alls (no gather), and
    the compiler refuses heads or groups per rank that cp_size does not
    divide, naming the key."""

    def setUp(self):
        if not compiler_takes_a2a():
            self.skipTest("this build's compiler does not take "
                          "'cp_comm_type: a2a' yet (or no library)")

    def test_dot_product_attention_shapes_are_the_all_gathers(self):
        for layout in ("sbhd", "bshd"):
            for mask_type in ("causal", "no_mask"):
                with self.subTest(layout=layout, mask_type=mask_type):
                    def shapes(comm_type):
                        return parameters(specs.dot_product_attention_spec(
                            8, 32, 2, mask_type, 0.0, 0.125,
                            context_parallel=(2, 1, comm_type)),
                            seq=32, input_format=layout)
                    got = shapes("a2a")
                    self.assertEqual(got, shapes("all_gather"))
                    local = (16, 2) if layout == "sbhd" else (2, 16)
                    self.assertEqual(got["query"], (*local, 8, 32))
                    self.assertEqual(got["key"], (*local, 2, 32))
                    self.assertEqual(got["output"], (*local, 256))

    def test_multihead_attention_rotary(self):
        def shapes(comm_type):
            return parameters(specs.multihead_attention_spec(
                256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal",
                0.0, True, 32, context_parallel=(2, 0, comm_type)), seq=32)
        got = shapes("a2a")
        self.assertEqual(got, shapes("all_gather"))
        self.assertEqual(got["input"], (16, 2, 256))
        self.assertEqual(got["rotary_pos_emb"], (32, 1, 1, 32))

    def test_transformer_layer_all_to_alls(self):
        for rank in (0, 1):
            with self.subTest(rank=rank):
                layer = specs.transformer_layer_spec(
                    256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu",
                    0.0, 0.0, "causal", True, False, 32,
                    context_parallel=(2, rank, "a2a"))
                spec = specs.program_spec("TransformerLayer", "bf16", "bshd",
                                          32, 2, layer)
                got = parameters(layer, seq=32, input_format="bshd")
                self.assertEqual(got["input"], (2, 16, 256))
                text = tejit.compile_ir(spec, "te")
                self.assertIn("cp_size = 2", text)
                self.assertIn('cp_comm_type = "a2a"', text)
                decomposed = tejit.compile_ir(spec, "primitive")
                self.assertIn("te.cp_all_to_all", decomposed)
                self.assertNotIn("te.cp_all_gather", decomposed)
                # The backward's are all-to-alls too (no sums).
                trained = tejit.compile_ir(spec, "autodiff")
                self.assertNotIn("te.cp_reduce_scatter", trained)

    def test_the_compiler_checks_the_heads(self):
        cases = [
            (specs.dot_product_attention_spec(
                8, 32, 1, "causal", 0.0, 0.125,
                context_parallel=(2, 0, "a2a")), "num_gqa_groups"),
            (specs.dot_product_attention_spec(
                6, 32, 6, "causal", 0.0, 0.125,
                context_parallel=(4, 0, "a2a")), "num_attention_heads"),
            # Per tensor-parallel rank: 4 groups over tp 2 are 2, over cp 4.
            (specs.multihead_attention_spec(
                256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal",
                0.0, True, 32, tp_size=2, context_parallel=(4, 0, "a2a")),
             "num_gqa_groups"),
        ]
        for layer, key in cases:
            with self.subTest(key=key, layer=layer["type"]):
                with self.assertRaises(tejit.TejitError) as caught:
                    parameters(layer, seq=64)
                self.assertIn(key, str(caught.exception))
                self.assertIn("cp_size", str(caught.exception))


_A2A_FEATURES = {}


def compiler_runs_with_a2a(feature):
    """Whether this build's compiler takes `feature` ("window_size" or
    "fp8_dpa") with cp_comm_type a2a (session 33's second contract; an
    older one refuses it naming the key whatever the comm type)."""
    if not compiler_takes_a2a():
        return False
    if feature not in _A2A_FEATURES:
        window = (8, 0) if feature == "window_size" else None
        fp8 = (recipe.DelayedScaling(fp8_dpa=True).to_spec()
               if feature == "fp8_dpa" else None)
        layer = specs.dot_product_attention_spec(
            4, 32, 2, "causal", 0.0, 0.125, window_size=window,
            context_parallel=(2, 0, "a2a"))
        try:
            tejit.compile_ir(specs.program_spec(
                "DotProductAttention", "bf16", "sbhd", 32, 2, layer, fp8),
                "te")
            _A2A_FEATURES[feature] = True
        except tejit.TejitError as error:
            if feature not in str(error):
                raise
            _A2A_FEATURES[feature] = False
    return _A2A_FEATURES[feature]


def all_to_alls(text):
    """The te.cp_all_to_all lines of an IR text."""
    return [line for line in text.splitlines() if "te.cp_all_to_all" in line]


class A2aWindowShapesTest(unittest.TestCase):
    """Sliding windows with cp_comm_type a2a (global seq 32, batch 2, cp 2):
    the programs take the all-gather's local shapes, the all-to-alls are
    load balanced also without a causal mask (the window needs the
    sequence in order), the attention carries the window and no cp
    attributes (it is the ordinary attention over the whole sequence), and
    all_gather's refusal names a2a. Needs the compiler of session 33's
    second contract (h3); skipped before."""

    def setUp(self):
        if not compiler_runs_with_a2a("window_size"):
            self.skipTest("this build's compiler refuses window_size with "
                          "cp_comm_type a2a (or does not take a2a, or no "
                          "library)")

    def spec(self, mask_type, window, comm_type="a2a", layout="sbhd"):
        layer = specs.dot_product_attention_spec(
            8, 32, 2, mask_type, 0.0, 0.125, window_size=window,
            context_parallel=(2, 1, comm_type))
        return specs.program_spec("DotProductAttention", "bf16", layout, 32,
                                  2, layer)

    def test_dot_product_attention(self):
        for layout, local in (("sbhd", (16, 2)), ("bshd", (2, 16))):
            for mask_type, window in (("causal", (8, 0)),
                                      ("no_mask", (8, -1))):
                with self.subTest(layout=layout, mask_type=mask_type):
                    spec = self.spec(mask_type, window, layout=layout)
                    got = parameters(spec["layers"][0], seq=32,
                                     input_format=layout)
                    self.assertEqual(got["query"], (*local, 8, 32))
                    self.assertEqual(got["output"], (*local, 256))
                    text = tejit.compile_ir(spec, "primitive")
                    exchanged = all_to_alls(text)
                    self.assertEqual(len(exchanged), 4, text)
                    for line in exchanged:
                        self.assertIn("load_balanced", line)
                    attention = [line for line in text.splitlines()
                                 if "te.attention " in line]
                    self.assertEqual(len(attention), 1, text)
                    self.assertIn(f"window_size = array<i64: {window[0]}, "
                                  f"{window[1]}>", attention[0])
                    self.assertNotIn("cp_ranks", attention[0])
                    trained = tejit.compile_ir(spec, "autodiff")
                    self.assertIn("te.attention_bwd", trained)
                    self.assertNotIn("te.cp_all_gather", trained)

    def test_blocks(self):
        for layer in (
                specs.multihead_attention_spec(
                    256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal",
                    0.0, True, 32, window_size=(8, 0),
                    context_parallel=(2, 0, "a2a")),
                specs.transformer_layer_spec(
                    256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu",
                    0.0, 0.0, "no_mask", True, False, 32,
                    window_size=(8, -1), context_parallel=(2, 0, "a2a"))):
            with self.subTest(layer=layer["type"]):
                got = parameters(layer, seq=32)
                self.assertEqual(got["input"], (16, 2, 256))
                self.assertEqual(got["rotary_pos_emb"], (32, 1, 1, 32))
                text = tejit.compile_ir(specs.program_spec(
                    layer["type"], "bf16", "sbhd", 32, 2, layer),
                    "primitive")
                self.assertTrue(all_to_alls(text))
                for line in all_to_alls(text):
                    self.assertIn("load_balanced", line)
                self.assertIn("window_size = array<i64: 8", text)

    def test_all_gather_refuses_naming_a2a(self):
        for mask_type, window in (("causal", (8, 0)), ("no_mask", (8, -1))):
            with self.subTest(mask_type=mask_type):
                with self.assertRaises(tejit.TejitError) as caught:
                    tejit.compile_ir(self.spec(mask_type, window,
                                               "all_gather"), "te")
                message = str(caught.exception)
                self.assertIn("window", message)
                self.assertIn("a2a", message)


class A2aFp8AttentionShapesTest(unittest.TestCase):
    """FP8 attention (DelayedScaling(fp8_dpa=True)) with cp_comm_type a2a
    (global seq 32, batch 2, cp 2): te.fp8_attention and its backward over
    the rank's heads of the whole sequence, q, k and v cast after the
    all-to-alls (which move bf16), and all_gather's refusal naming a2a.
    Needs the compiler of session 33's second contract (h3); skipped
    before."""

    FP8_DPA = recipe.DelayedScaling(fp8_dpa=True, amax_history_len=16)

    def setUp(self):
        if not compiler_runs_with_a2a("fp8_dpa"):
            self.skipTest("this build's compiler refuses fp8_dpa with "
                          "cp_comm_type a2a (or does not take a2a, or no "
                          "library)")

    def scaled(self, layer, layout="sbhd"):
        return tejit.compile_ir(specs.program_spec(
            layer["type"], "bf16", layout, 32, 2, layer,
            self.FP8_DPA.to_spec()), "scaled", training=True)

    def check(self, text, heads, groups):
        """The attention over 32 positions of heads / 2 and groups / 2
        (sbhd), on FP8 operands cast from the all-to-alls' bf16."""
        self.assertIn("te.fp8_attention ", text)
        self.assertIn("te.fp8_attention_bwd", text)
        exchanged = all_to_alls(text)
        self.assertTrue(exchanged, text)
        for line in exchanged:
            self.assertNotIn("xf8", line)
        self.assertIn(f"tensor<32x2x{heads // 2}x32xf8E4M3FN>", text)
        self.assertIn(f"tensor<32x2x{groups // 2}x32xf8E4M3FN>", text)
        # Not the local tokens of every head.
        self.assertNotIn(f"tensor<16x2x{heads}x32xf8", text)

    def test_dot_product_attention(self):
        for mask_type in ("causal", "no_mask"):
            with self.subTest(mask_type=mask_type):
                self.check(self.scaled(specs.dot_product_attention_spec(
                    8, 32, 4, mask_type, 0.0, 0.125,
                    context_parallel=(2, 1, "a2a"))), 8, 4)

    def test_blocks(self):
        for layer in (
                specs.multihead_attention_spec(
                    256, 8, 32, 4, True, "LayerNorm", 1e-5, False, "causal",
                    0.0, True, 32, context_parallel=(2, 0, "a2a")),
                specs.transformer_layer_spec(
                    256, 1024, 8, 32, 4, 1e-5, "LayerNorm", False, "gelu",
                    0.0, 0.0, "no_mask", True, False, False,
                    context_parallel=(2, 1, "a2a"))):
            with self.subTest(layer=layer["type"]):
                text = self.scaled(layer)
                self.check(text, 8, 4)
                # The GEMMs run in FP8 under the recipe as without cp.
                self.assertIn("te.scaled_matmul", text)

    def test_all_gather_refuses_naming_a2a(self):
        with self.assertRaises(tejit.TejitError) as caught:
            self.scaled(specs.dot_product_attention_spec(
                8, 32, 4, "causal", 0.0, 0.125,
                context_parallel=(2, 1, "all_gather")))
        message = str(caught.exception)
        self.assertIn("fp8", message.lower())
        self.assertIn("a2a", message)


class ProgramContextParallelTest(StandInLibrary, unittest.TestCase):
    """Program.set_cp_group and Program.cp_size over a stand-in library
    (a real program needs a GPU), as test_capi's tensor-parallel test:
    what reaches the C API, the group kept only once accepted, and a
    library without the functions (built before context parallelism)."""

    class FakeLibrary:
        _name = "fake-libtejit.so"

        def __init__(self):
            self.calls = []
            self.status = 0

        def tejit_program_set_cp_group(self, program, group):
            self.calls.append((program, group.value if group else None))
            return self.status

        def tejit_program_cp_size(self, program):
            return 2

        def tejit_last_error(self):
            return b"the context-parallel group has 4 ranks"

    class OldLibrary:
        _name = "old-libtejit.so"

    Library = FakeLibrary

    def test_set_and_clear(self):
        self.assertEqual(self.program.cp_size, 2)
        self.program.set_cp_group(self.group)
        self.assertIs(self.program._cp_group, self.group)
        self.program.set_cp_group(None)
        self.assertIsNone(self.program._cp_group)
        self.assertEqual(self.library.calls,
                         [(0x5000, 0x6000), (0x5000, None)])

    def test_refused_group_is_not_kept(self):
        self.library.status = 1
        with self.assertRaisesRegex(tejit.TejitError, "has 4 ranks"):
            self.program.set_cp_group(self.group)
        self.assertIsNone(self.program._cp_group)

    def test_a_library_without_context_parallelism(self):
        self.library = self.OldLibrary()
        self.assertEqual(self.program.cp_size, 1)
        self.program.set_cp_group(None)  # nothing to clear
        with self.assertRaises(NotImplementedError) as caught:
            self.program.set_cp_group(self.group)
        self.assertIn("tejit_program_set_cp_group", str(caught.exception))
        self.assertIn("old-libtejit.so", str(caught.exception))

    def test_the_group_error_comes_first(self):
        # What the CP group's gather raised in a call is that call's error.
        self.group._failed(RuntimeError("all_gather failed"))
        self.program._cp_group = self.group
        with self.assertRaises(tejit.TejitError) as caught:
            self.program._check(9)
        self.assertIsInstance(caught.exception.__cause__, RuntimeError)
        self.assertIn("all_gather failed", str(caught.exception.__cause__))


class AllToAllFunctionTest(unittest.TestCase):
    """TensorParallelGroup.from_function's all_to_all (cp_comm_type a2a)
    over a stand-in library: given to tejit_tp_group_set_all_to_all after
    the group is made, its callback passing the addresses, the count per
    rank, torch's dtype name and the stream; a refusal releases the group;
    a library without the function takes groups without all_to_all and
    refuses one with it, naming the function."""

    class FakeLibrary:
        _name = "fake-libtejit.so"

        def __init__(self):
            self.calls = []
            self.status = 0

        def tejit_tp_group_from_functions(self, reduce, gather, scatter,
                                          user_data, handle):
            self.calls.append(("from_functions", reduce is not None,
                               gather is not None, scatter is not None))
            handle._obj.value = 0x7000
            return 0

        def tejit_tp_group_set_all_to_all(self, group, function):
            self.calls.append(("set_all_to_all", group.value))
            self.function = function
            return self.status

        def tejit_tp_group_destroy(self, group):
            self.calls.append(("destroy", group.value))

        def tejit_last_error(self):
            return b"tejit_tp_group_set_all_to_all: not a function group"

    class OldLibrary(FakeLibrary):
        """Built before context parallelism's a2a."""
        _name = "old-libtejit.so"

        def __getattribute__(self, name):
            if name == "tejit_tp_group_set_all_to_all":
                raise AttributeError(name)
            return super().__getattribute__(name)

    def setUp(self):
        self.library = self.FakeLibrary()
        self.saved_library = tejit._capi.lib
        tejit._capi.lib = lambda: self.library

    def tearDown(self):
        tejit._capi.lib = self.saved_library

    def test_the_function_reaches_the_group(self):
        calls = []
        self.assertTrue(tejit.TensorParallelGroup.takes_all_to_all())
        group = tejit.TensorParallelGroup.from_function(
            lambda *a: None, all_to_all=lambda *a: calls.append(a))
        self.assertEqual(self.library.calls,
                         [("from_functions", True, False, False),
                          ("set_all_to_all", 0x7000)])
        self.assertIs(self.library.function, group._all_to_all)
        self.assertEqual(len(group._callbacks), 3)
        # As the runtime calls it: (user_data, input, output, count per
        # rank, tejit_dtype, stream).
        for dtype, name in ((2, "bfloat16"), (1, "float16"),
                            (0, "float32")):
            self.assertEqual(group._all_to_all(None, 0x1000, 0x2000, 16,
                                               dtype, 0x5000), 0)
            self.assertEqual(calls[-1], (0x1000, 0x2000, 16, name, 0x5000))
        group.raise_pending()  # nothing pending
        # What it raises is kept for the program call (Program._check).
        self.assertEqual(group._all_to_all(None, 0x1000, 0x2000, 16, 3,
                                           None), 1)
        with self.assertRaisesRegex(ValueError, "dtype 3"):
            group.raise_pending()
        group._handle.value = None

    def test_without_all_to_all_nothing_is_set(self):
        group = tejit.TensorParallelGroup.from_function(
            lambda *a: None, all_gather=lambda *a: None)
        self.assertIsNone(group._all_to_all)
        self.assertEqual(self.library.calls,
                         [("from_functions", True, True, False)])
        group._handle.value = None

    def test_a_refused_function_releases_the_group(self):
        self.library.status = 1
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.TensorParallelGroup.from_function(
                None, all_to_all=lambda *a: None)
        self.assertEqual(caught.exception.status, 1)
        self.assertIn("not a function group", str(caught.exception))
        self.assertEqual(self.library.calls[-1], ("destroy", 0x7000))

    def test_a_library_without_the_function(self):
        self.library = self.OldLibrary()
        self.assertFalse(tejit.TensorParallelGroup.takes_all_to_all())
        with self.assertRaises(NotImplementedError) as caught:
            tejit.TensorParallelGroup.from_function(
                lambda *a: None, all_to_all=lambda *a: None)
        self.assertIn("tejit_tp_group_set_all_to_all", str(caught.exception))
        self.assertIn("old-libtejit.so", str(caught.exception))
        self.assertEqual(self.library.calls, [])  # refused before making
        group = tejit.TensorParallelGroup.from_function(lambda *a: None)
        self.assertIsNone(group._all_to_all)
        group._handle.value = None


class DeclarationTest(unittest.TestCase):
    """_capi declares the optional functions only where the library has
    them (a stand-in library of every function but those left out)."""

    class Functions:
        def __init__(self, missing):
            self.missing = frozenset(missing)
            self.made = {}

        def __getattr__(self, name):
            if name.startswith("_") or name in self.missing:
                raise AttributeError(name)
            return self.made.setdefault(name, type("Function", (), {})())

    def test_all_to_all_declared_only_when_present(self):
        name = "tejit_tp_group_set_all_to_all"
        self.assertIn(name, tejit._capi.OPTIONAL)
        old = self.Functions({name})
        tejit._capi._declare(old)
        self.assertNotIn(name, old.made)
        self.assertIn("tejit_tp_group_from_functions", old.made)
        new = self.Functions(())
        tejit._capi._declare(new)
        self.assertIs(new.made[name].restype, ctypes.c_int)
        self.assertEqual(new.made[name].argtypes,
                         [ctypes.c_void_p, ctypes.c_void_p])


@unittest.skipUnless(library_loads(), "needs libtejit.so")
class LibraryDeclarationTest(unittest.TestCase):
    def test_declared_when_present(self):
        library = tejit._capi.lib()
        for name, restype in (("tejit_program_set_cp_group", ctypes.c_int),
                              ("tejit_program_cp_size", ctypes.c_int64),
                              ("tejit_tp_group_set_all_to_all",
                               ctypes.c_int)):
            with self.subTest(name=name):
                if not tejit._capi.has(name):
                    continue
                self.assertIs(getattr(library, name).restype, restype)

    def test_all_to_all_of_a_function_group(self):
        # This library's own answer: a function group takes all_to_all
        # where the library has tejit_tp_group_set_all_to_all, else the
        # call names the missing function.
        calls = []
        if not tejit.TensorParallelGroup.takes_all_to_all():
            with self.assertRaises(NotImplementedError) as caught:
                tejit.TensorParallelGroup.from_function(
                    None, all_to_all=lambda *a: calls.append(a))
            self.assertIn("tejit_tp_group_set_all_to_all",
                          str(caught.exception))
            return
        group = tejit.TensorParallelGroup.from_function(
            None, all_to_all=lambda *a: calls.append(a))
        self.assertTrue(group.handle.value)
        group.close()
        self.assertEqual(calls, [])  # nothing ran without a program


class Fake:
    """A stand-in tensor over nested lists (2-D), with torch's narrow and
    shape, for distributed.py's split and merge without PyTorch."""

    def __init__(self, rows):
        self.rows = rows
        self.shape = (len(rows), len(rows[0]))

    def narrow(self, dim, start, length):
        if dim == 0:
            return Fake(self.rows[start:start + length])
        return Fake([row[start:start + length] for row in self.rows])


def fake_cat(parts, dim):
    if dim == 0:
        return Fake([row for part in parts for row in part.rows])
    return Fake([sum((part.rows[i] for part in parts), [])
                 for i in range(parts[0].shape[0])])


class LoadBalancedSplitTest(RefusalAssertions, unittest.TestCase):
    def setUp(self):
        self.saved = split._cat
        split._cat = fake_cat

    def tearDown(self):
        split._cat = self.saved

    def test_positions(self):
        self.assertEqual(split.context_parallel_chunks(2, 0), (0, 3))
        self.assertEqual(split.context_parallel_chunks(2, 1), (1, 2))
        self.assertEqual(split.context_parallel_positions(8, 2, 0),
                         [0, 1, 6, 7])
        self.assertEqual(split.context_parallel_positions(8, 2, 1),
                         [2, 3, 4, 5])
        for cp_size in (1, 2, 3, 4):
            seq = 2 * cp_size * 3
            every = sorted(p for rank in range(cp_size) for p in
                           split.context_parallel_positions(seq, cp_size,
                                                            rank))
            self.assertEqual(every, list(range(seq)), cp_size)

    def test_split_and_merge_round_trip(self):
        for cp_size in (1, 2, 4):
            for seq_dim in (0, 1):
                with self.subTest(cp_size=cp_size, seq_dim=seq_dim):
                    seq = 4 * cp_size
                    if seq_dim == 0:
                        whole = Fake([[10 * i, 10 * i + 1]
                                      for i in range(seq)])
                    else:
                        whole = Fake([[100 * j + i for i in range(seq)]
                                      for j in range(3)])
                    parts = [split.context_parallel_split(whole, cp_size, r,
                                                          seq_dim)
                             for r in range(cp_size)]
                    for rank, part in enumerate(parts):
                        # Rank r's rows are the positions the contract says.
                        want = split.context_parallel_positions(seq, cp_size,
                                                                rank)
                        got = fake_cat([whole.narrow(seq_dim, p, 1)
                                        for p in want], seq_dim)
                        self.assertEqual(part.rows, got.rows)
                    merged = split.context_parallel_merge(parts, seq_dim)
                    self.assertEqual(merged.rows, whole.rows)

    def test_merge_is_not_rank_order(self):
        # The ranks' parts joined in plain rank order are not the sequence.
        whole = Fake([[i] for i in range(8)])
        parts = [split.context_parallel_split(whole, 2, r) for r in (0, 1)]
        self.assertEqual([row[0] for row in fake_cat(parts, 0).rows],
                         [0, 1, 6, 7, 2, 3, 4, 5])

    def test_refusals(self):
        whole = Fake([[i] for i in range(6)])
        self.assertRefused(ValueError,
                           lambda: split.context_parallel_split(whole, 2, 0),
                           "dim 0", "(6)", "2 * cp_size = 4")
        self.assertRefused(ValueError,
                           lambda: split.context_parallel_split(whole, 2, 2),
                           "cp_rank")
        self.assertRefused(ValueError,
                           lambda: split.context_parallel_split(whole, 0, 0),
                           "cp_size")
        self.assertRefused(ValueError,
                           lambda: split.context_parallel_merge(
                               [Fake([[0], [1]]), Fake([[2]])]),
                           "differ")
        self.assertRefused(ValueError,
                           lambda: split.context_parallel_merge(
                               [Fake([[0]]), Fake([[1]])]),
                           "even")


if __name__ == "__main__":
    unittest.main()
