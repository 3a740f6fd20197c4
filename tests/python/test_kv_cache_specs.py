"""tejit.pytorch's KV cache (InferenceParams, inference_params=) without
PyTorch or a GPU: what pre_step decides on the host (row order, finished
sequences dropped, cached tokens moved to new rows, cu_seqlens padded past
the live rows; python/tejit/pytorch/attention/_inference_steps.py) and
the specs a cached step compiles (docs/kv-cache-plan.md, "The contract"):
top-level kv_cache with input_format thd, inputs cu_seqlens /
cu_seqlens_kv and layers.0.key_cache / value_cache [batch, S, groups,
kv_channels] after the layer's parameters, inference only. The spec
checks against the compiler skip while the library does not know
`kv_cache` yet (the compiler part of the contract lands separately).
Run: python3 -m pytest tests/python
"""
import os
import re
import sys
import unittest
from collections import OrderedDict

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import load  # noqa: E402


steps = load("attention/_inference_steps.py", "tejit_inference_steps")
specs = load("module/_attention_specs.py", "tejit_attention_specs_kv")

_ARGUMENT = re.compile(r'%arg\d+: tensor<([^>]*)> \{te\.name = "([^"]+)"')


class PreStepTest(unittest.TestCase):
    def plan(self, previous, step, batch=4, max_s=100):
        return steps.plan_step(OrderedDict(previous), OrderedDict(step),
                               batch, max_s)

    def test_prefill_then_decode(self):
        prefill = self.plan({}, [(7, 5), (3, 2), (9, 4)])
        self.assertEqual(list(prefill.sequences.items()),
                         [(7, 5), (3, 2), (9, 4)])
        self.assertEqual(prefill.cached, [0, 0, 0])
        self.assertEqual(prefill.cu_seqlens_q, [0, 5, 7, 11, 11])
        self.assertEqual(prefill.cu_seqlens_kv, [0, 5, 7, 11, 11])
        self.assertEqual(prefill.pre_step_seqlens, [0, 0, 0, 0])
        self.assertEqual((prefill.total_new, prefill.max_new,
                          prefill.max_total, prefill.moves),
                         (11, 5, 5, []))
        decode = self.plan(prefill.sequences, [(7, 1), (3, 1), (9, 1)])
        self.assertEqual(list(decode.sequences.values()), [6, 3, 5])
        self.assertEqual(decode.cached, [5, 2, 4])
        self.assertEqual(decode.cu_seqlens_q, [0, 1, 2, 3, 3])
        self.assertEqual(decode.cu_seqlens_kv, [0, 6, 9, 14, 14])
        self.assertEqual(decode.pre_step_seqlens, [5, 2, 4, 0])
        self.assertEqual(decode.moves, [])
        self.assertEqual(decode.device_values(),
                         decode.cu_seqlens_q + decode.cu_seqlens_kv
                         + decode.pre_step_seqlens)

    def test_token_positions(self):
        decode = self.plan({7: 5, 3: 2, 9: 4}, [(7, 1), (3, 2), (9, 1)])
        # Row i's new tokens continue after its cached ones; a tail is 0.
        self.assertEqual(decode.token_positions(6), [5, 2, 3, 4, 0, 0])
        self.assertEqual(decode.token_positions(3), [5, 2, 3])
        self.assertEqual(decode.token_positions(0), [])

    def test_finished_sequence_moves_the_later_rows_up(self):
        previous = {7: 6, 3: 3, 9: 5}
        plan = self.plan(previous, [(7, 1), (9, 1), (11, 3)])
        # 3 finished: 9 moves from row 2 to row 1 (its 5 cached tokens);
        # the new 11 takes row 2 and writes from position 0.
        self.assertEqual(list(plan.sequences.items()),
                         [(7, 7), (9, 6), (11, 3)])
        self.assertEqual(plan.moves, [(1, 2)])
        self.assertEqual(plan.move_length, 5)
        self.assertEqual(plan.cached, [6, 5, 0])
        self.assertEqual(plan.cu_seqlens_kv, [0, 7, 13, 16, 16])
        self.assertEqual(plan.pre_step_seqlens, [6, 5, 0, 0])

    def test_reordered_step_dict_swaps_rows(self):
        plan = self.plan({1: 4, 2: 8}, [(2, 1), (1, 1)])
        self.assertEqual(sorted(plan.moves), [(0, 1), (1, 0)])
        self.assertEqual(plan.move_length, 8)

    def test_multi_token_steps_of_continuing_sequences(self):
        # TE's non-paged manager adds 1 whatever the count; tejit adds the
        # count (the same for decode steps).
        plan = self.plan({1: 4}, [(1, 3)])
        self.assertEqual(plan.sequences[1], 7)
        self.assertEqual(plan.cached, [4])

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "max_batch_size"):
            self.plan({}, [(i, 1) for i in range(5)])
        with self.assertRaisesRegex(ValueError, "max_sequence_length"):
            self.plan({1: 99}, [(1, 2)])
        with self.assertRaisesRegex(ValueError, "positive"):
            self.plan({}, [(1, 0)])
        with self.assertRaisesRegex(TypeError, "int"):
            self.plan({}, [(1, "3")])
        with self.assertRaisesRegex(TypeError, "OrderedDict"):
            steps.plan_step(OrderedDict(), [(1, 1)], 4, 100)

    def test_round_up(self):
        self.assertEqual([steps.round_up(n, 64) for n in (0, 1, 64, 65)],
                         [64, 64, 64, 128])


def kv_spec(layer, batch=4, seq=64, tokens=64, max_s=256, dtype="bf16"):
    """The spec a cached step compiles (base._run_program's shape)."""
    return {"name": layer["type"], "params_dtype": dtype,
            **specs.kv_cache_shape_spec(batch, seq, tokens, max_s),
            "layers": [layer]}


def forward_arguments(spec, training=False):
    text = tejit.compile_ir(spec, "te", training=training)
    header = next(line for line in text.splitlines()
                  if "func.func" in line and "_backward" not in line)
    header = header.split(") -> (")[0]
    return {name: shape for shape, name in _ARGUMENT.findall(header)}


def compiler_knows_kv_cache():
    spec = kv_spec(specs.dot_product_attention_spec(
        4, 64, 2, "causal", 0.0, 0.125))
    try:
        tejit.compile_ir(spec, "te", training=False)
    except tejit.TejitError as error:
        if "unknown key 'kv_cache'" in str(error):
            return False
    except Exception:  # no library: the compile tests fail with its error
        return True
    return True


class SpecShapeTest(unittest.TestCase):
    def test_top_level_keys(self):
        self.assertEqual(specs.kv_cache_shape_spec(8, 64, 64, 2048), {
            "input_format": "thd", "batch_size": 8, "seq_length": 64,
            "tokens": 64, "kv_cache": {"max_sequence_length": 2048}})

    def test_cache_input_names(self):
        self.assertEqual(specs.kv_cache_input_name("layers.0.key_cache"),
                         "key_cache")
        self.assertEqual(specs.kv_cache_input_name("value_cache"),
                         "value_cache")
        self.assertEqual(specs.kv_cache_input_name("layers.0.proj.weight"),
                         "layers.0.proj.weight")

    def test_mask_types(self):
        for mask in ("causal", "padding_causal", "no_mask", "padding",
                     "causal_bottom_right", "padding_causal_bottom_right"):
            self.assertEqual(specs.kv_cache_mask_type("M", mask), mask)
        with self.assertRaisesRegex(ValueError, "arbitrary"):
            specs.kv_cache_mask_type("M", "arbitrary")


@unittest.skipUnless(compiler_knows_kv_cache(),
                     "the compiler does not accept the kv_cache spec key yet "
                     "(docs/kv-cache-plan.md: the compiler part of the "
                     "contract)")
class KvCacheCompileTest(unittest.TestCase):
    """The programs' arguments are what the modules pass (_kv_cache.py):
    packed new tokens, the two cu_seqlens, and the caches by name."""

    def check_cache_arguments(self, args, batch, max_s, groups, d):
        self.assertEqual(args.get("cu_seqlens"), f"{batch + 1}xi32")
        self.assertEqual(args.get("cu_seqlens_kv"), f"{batch + 1}xi32")
        for cache in ("layers.0.key_cache", "layers.0.value_cache"):
            self.assertEqual(args.get(cache), f"{batch}x{max_s}x{groups}x"
                             f"{d}xbf16", f"{cache} in {sorted(args)}")
        names = list(args)
        # After the layer's parameters.
        last_parameter = max((i for i, n in enumerate(names)
                              if n.startswith("layers.0.")
                              and not n.endswith("_cache")), default=-1)
        self.assertLess(last_parameter,
                        names.index("layers.0.key_cache"))

    def test_dot_product_attention(self):
        for mask in ("causal", "padding_causal", "no_mask"):
            args = forward_arguments(kv_spec(
                specs.dot_product_attention_spec(8, 64, 2, mask, 0.0,
                                                 0.125),
                batch=4, tokens=128, max_s=512))
            self.assertEqual(args["query"], "128x8x64xbf16")
            self.assertEqual(args["key"], "128x2x64xbf16")
            self.assertEqual(args["value"], "128x2x64xbf16")
            self.check_cache_arguments(args, 4, 512, 2, 64)

    def test_multihead_attention_with_rotary(self):
        layer = specs.multihead_attention_spec(
            256, 8, 32, 2, True, "RMSNorm", 1e-5, False, "causal", 0.0,
            False, 16)
        args = forward_arguments(kv_spec(layer, batch=3, max_s=128))
        self.assertEqual(args["input"], "64x256xbf16")
        self.assertEqual(args["rotary_pos_emb"], "64x1x1x16xf32")
        self.check_cache_arguments(args, 3, 128, 2, 32)

    def test_transformer_layer(self):
        layer = specs.transformer_layer_spec(
            256, 512, 8, 32, 2, 1e-5, "RMSNorm", False, "swiglu", 0.0, 0.0,
            "padding_causal", False, False, True)
        args = forward_arguments(kv_spec(layer, batch=8, max_s=2048,
                                         tokens=64))
        self.assertEqual(args["input"], "64x256xbf16")
        self.check_cache_arguments(args, 8, 2048, 2, 32)

    def test_training_compile_is_refused(self):
        spec = kv_spec(specs.dot_product_attention_spec(
            4, 64, 2, "causal", 0.0, 0.125))
        with self.assertRaisesRegex(tejit.TejitError,
                                    "KV cache.*only inference programs"):
            tejit.compile_ir(spec, "primitive", training=True)


if __name__ == "__main__":
    unittest.main()
