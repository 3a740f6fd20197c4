"""Context parallelism in tejit.pytorch (docs/context-parallel.md), without
PyTorch or a GPU: TE's arguments as the modules take them (cp_group's size
and this process's rank in it, cp_global_ranks, cp_comm_type: "p2p" and
"all_gather" run as the all-gather, "a2a" / "a2a+p2p" refused) with errors
naming the argument, what a context-parallel call refuses (packed
sequences, padding and other masks, sliding windows, attention bias, FP8
attention, KV caches, cross-attention), the global sequence length of a
rank's (even) part, the spec keys (cp_size, cp_rank, cp_comm_type; none at
cp_size 1, so existing specs and their cache keys are unchanged), the
programs those specs compile to (ContextParallelShapesTest: skipped while
the compiler does not know the keys), Program.set_cp_group / cp_size over a
stand-in library, and tejit.pytorch.distributed's load-balanced split and
merge. The checks live in python/tejit/pytorch/module/_args.py, the spec
builders in _attention_specs.py and the split in distributed.py, loaded
here by path (the tejit.pytorch package needs PyTorch;
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
from test_tensor_parallel_args import parameters  # noqa: E402
from torch_free import StandInLibrary, load, library_loads  # noqa: E402

args = load("module/_args.py", "tejit_args_cp")
specs = load("module/_attention_specs.py", "tejit_attention_specs_cp")
split = load("distributed.py", "tejit_distributed_cp")


def sizes(size, rank):
    """group_size and group_rank stand-ins: every group has `size` ranks,
    this process is `rank`."""
    return dict(group_size=lambda group: size, group_rank=lambda group: rank)


class Refusing(unittest.TestCase):
    def assertRefused(self, error, function, *words):
        with self.assertRaises(error) as caught:
            function()
        for word in words:
            self.assertIn(word, str(caught.exception))


class ArgumentTest(Refusing):
    def test_no_group_is_cp_size_1(self):
        self.assertEqual(args.context_parallel_of("DotProductAttention",
                                                  None), (1, 0))
        # TE's default comm type, and the others, without a group.
        for comm_type in ("p2p", "all_gather", "a2a", "a2a+p2p"):
            self.assertEqual(args.context_parallel_of(
                "DotProductAttention", None, None, comm_type), (1, 0))

    def test_size_and_rank_from_the_group(self):
        for comm_type in ("p2p", "all_gather"):
            with self.subTest(cp_comm_type=comm_type):
                self.assertEqual(args.context_parallel_of(
                    "TransformerLayer", "cp", [4, 5], comm_type,
                    **sizes(2, 1)), (2, 1))
        self.assertEqual(args.context_parallel_of(
            "TransformerLayer", "cp", None, "p2p", **sizes(4, 3)), (4, 3))

    def test_a2a_is_refused_naming_cp_comm_type(self):
        for comm_type in ("a2a", "a2a+p2p"):
            with self.subTest(cp_comm_type=comm_type):
                self.assertRefused(
                    NotImplementedError,
                    lambda: args.context_parallel_of(
                        "MultiheadAttention", "cp", None, comm_type,
                        **sizes(2, 0)),
                    "MultiheadAttention", f"cp_comm_type={comm_type!r}",
                    "all_gather")
        # A group of one rank runs nothing in parallel: accepted.
        self.assertEqual(args.context_parallel_of(
            "MultiheadAttention", "cp", None, "a2a", **sizes(1, 0)), (1, 0))

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
                    plain = build()
                    for key in ("cp_size", "cp_rank", "cp_comm_type"):
                        layer.pop(key)
                    self.assertEqual(layer, plain)

    def test_with_tensor_parallelism(self):
        layer = self.block(tp_size=2, context_parallel=(2, 1))
        self.assertEqual((layer["tp_size"], layer["cp_size"],
                          layer["cp_rank"]), (2, 2, 1))

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


@unittest.skipUnless(library_loads(), "needs libtejit.so")
class LibraryDeclarationTest(unittest.TestCase):
    def test_declared_when_present(self):
        library = tejit._capi.lib()
        for name, restype in (("tejit_program_set_cp_group", ctypes.c_int),
                              ("tejit_program_cp_size", ctypes.c_int64)):
            with self.subTest(name=name):
                if not tejit._capi.has(name):
                    self.skipTest(f"this library has no {name} yet")
                self.assertIs(getattr(library, name).restype, restype)


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


class LoadBalancedSplitTest(Refusing):
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
