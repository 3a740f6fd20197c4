"""tejit.pytorch's paged KV cache (InferenceParams(is_paged=True)) without
PyTorch or a GPU (docs/paged-kv-cache.md): the page allocation pre_step
makes on the host (python/tejit/pytorch/attention/_pages.py: pages grow
with the sequences, finished sequences' pages go back to the pool and are
reused, running out raises before anything changes, reset() frees all,
the table rows follow pre_step's rows) and the specs a paged step
compiles: kv_cache with page_size and total_pages, the input page_table
[batch, S / page_size] i32 right after cu_seqlens_kv, the caches
[total_pages, page_size, groups, kv_channels]. The spec checks against
the compiler skip while the library does not know `page_size` yet (the
compiler part of the contract lands separately).
Run: python3 -m pytest tests/python
"""
import os
import sys
import unittest
from collections import OrderedDict

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import load  # noqa: E402
from test_kv_cache_specs import forward_arguments, kv_spec  # noqa: E402

pages = load("attention/_pages.py", "tejit_pages")
steps = load("attention/_inference_steps.py", "tejit_inference_steps_paged")
specs = load("module/_attention_specs.py", "tejit_attention_specs_paged")


class Pool:
    """An allocator driven as pre_step drives it: plan_step decides the
    rows, the allocator the pages."""

    def __init__(self, total_pages=8, page_size=4, batch=3, max_s=16):
        self.batch, self.max_s = batch, max_s
        self.allocator = pages.PageAllocator(total_pages, page_size, batch,
                                             max_s // page_size)
        self.sequences = OrderedDict()

    def step(self, pairs):
        plan = steps.plan_step(self.sequences, OrderedDict(pairs),
                               self.batch, self.max_s)
        self.allocator.step(plan.sequences)
        self.sequences = plan.sequences
        return plan

    def held(self):
        return {seq: list(held)
                for seq, held in self.allocator.pages.items()}

    def rows(self):
        """The table as rows."""
        table = self.allocator.table()
        width = self.allocator.max_pages
        return [table[i * width:(i + 1) * width] for i in range(self.batch)]


class PageAllocatorTest(unittest.TestCase):
    def test_pages_grow_with_the_sequences(self):
        pool = Pool()
        pool.step([(7, 5), (3, 4)])  # 2 pages and 1 page
        self.assertEqual(pool.held(), {7: [0, 1], 3: [2]})
        self.assertEqual(list(pool.allocator.free), [3, 4, 5, 6, 7])
        pool.step([(7, 1), (3, 1)])  # 6 rows: still 2; 5 rows: a 2nd page
        self.assertEqual(pool.held(), {7: [0, 1], 3: [2, 3]})
        for _ in range(3):
            pool.step([(7, 1), (3, 1)])
        # 9 rows: 3 pages; 8 rows: still 2.
        self.assertEqual(pool.held(), {7: [0, 1, 4], 3: [2, 3]})

    def test_finished_sequences_free_their_pages_for_reuse(self):
        pool = Pool()
        pool.step([(1, 8), (2, 4), (3, 4)])
        self.assertEqual(pool.held(), {1: [0, 1], 2: [2], 3: [3]})
        # 1 finished: its pages join the pool's end, after 4..7.
        pool.step([(2, 1), (3, 1)])
        self.assertEqual(pool.held(), {2: [2, 4], 3: [3, 5]})
        self.assertEqual(list(pool.allocator.free), [6, 7, 0, 1])
        # 4 joins with 12 rows: 6, 7 and then 1's old page 0.
        pool.step([(2, 1), (3, 1), (4, 12)])
        self.assertEqual(pool.held()[4], [6, 7, 0])
        self.assertEqual(list(pool.allocator.free), [1])
        # Every page is held once at most.
        held = [p for ids in pool.held().values() for p in ids]
        self.assertEqual(len(held), len(set(held)))
        self.assertEqual(sorted(held + list(pool.allocator.free)),
                         list(range(8)))

    def test_pages_freed_in_the_step_they_are_needed(self):
        pool = Pool(total_pages=4)
        pool.step([(1, 8), (2, 8)])
        self.assertEqual(list(pool.allocator.free), [])
        # 2 finishes in the step 3 needs its pages.
        pool.step([(1, 1), (3, 4)])
        self.assertEqual(pool.held(), {1: [0, 1, 2], 3: [3]})

    def test_out_of_pages_changes_nothing(self):
        pool = Pool(total_pages=4)
        pool.step([(1, 8), (2, 3)])
        before = (pool.held(), list(pool.allocator.free),
                  pool.allocator.table())
        with self.assertRaises(RuntimeError) as raised:
            pool.step([(1, 1), (2, 1), (5, 8)])
        message = str(raised.exception)
        for word in ("total_num_pages = 4", "sequence 5", "needs 2 more"):
            self.assertIn(word, message)
        self.assertEqual((pool.held(), list(pool.allocator.free),
                          pool.allocator.table()), before)
        # Still usable: without 5 the step fits.
        pool.step([(1, 1), (2, 1)])
        self.assertEqual(pool.held(), {1: [0, 1, 3], 2: [2]})

    def test_out_of_pages_counts_the_finished_sequences(self):
        pool = Pool(total_pages=4)
        pool.step([(1, 8), (2, 8)])
        with self.assertRaisesRegex(RuntimeError, "sequence 3 needs 3"):
            pool.step([(1, 1), (3, 12)])  # 2's 2 pages free; 1 needs 1

    def test_reset_frees_every_page(self):
        pool = Pool()
        pool.step([(1, 16), (2, 9)])
        pool.allocator.reset()
        self.assertEqual(pool.held(), {})
        self.assertEqual(list(pool.allocator.free), list(range(8)))
        self.assertEqual(pool.allocator.table(), [0] * 12)

    def test_table_kept_up_to_date_equals_a_rebuilt_one(self):
        # The allocator rewrites only the table rows that changed; over
        # random steps (rows reordered, sequences finishing, joining and
        # growing, a step refused for want of pages) its table must equal
        # one built afresh from the pages each sequence holds.
        import random
        rng = random.Random(31)
        pool = Pool(total_pages=40, page_size=4, batch=5, max_s=64)
        live, next_id = OrderedDict(), 0
        for _ in range(300):
            step = [(seq, 1) for seq in live if rng.random() < 0.8]
            rng.shuffle(step)
            while len(step) < 5 and rng.random() < 0.5:
                step.append((next_id, rng.randint(1, 12)))
                next_id += 1
            try:
                plan = pool.step(step)
            except RuntimeError:
                continue
            live = OrderedDict((seq, n) for seq, n in plan.sequences.items()
                               if n < 60)
            width = pool.allocator.max_pages
            want = []
            for held in pool.allocator.pages.values():
                want += held + [0] * (width - len(held))
            want += [0] * (pool.batch * width - len(want))
            self.assertEqual(pool.allocator.table(), want)

    def test_table_rows_follow_the_step_rows(self):
        pool = Pool()
        pool.step([(1, 8), (2, 1), (3, 5)])
        self.assertEqual(pool.rows(), [[0, 1, 0, 0], [2, 0, 0, 0],
                                       [3, 4, 0, 0]])
        # 2 finished and 3 listed first: rows follow step_dict's order;
        # the sequences keep their pages (nothing moves).
        plan = pool.step([(3, 1), (1, 1)])
        self.assertEqual(list(plan.sequences), [3, 1])
        self.assertEqual(pool.rows(), [[3, 4, 0, 0], [0, 1, 5, 0],
                                       [0, 0, 0, 0]])

    def test_slots(self):
        allocator = pages.PageAllocator(8, 4, 2, 4)
        self.assertEqual(allocator.slots([6, 2, 5], [3, 4, 9]),
                         [(6, 3), (2, 0), (5, 1)])

    def test_check_paging(self):
        self.assertEqual(pages.check_paging(2048, 256, 64), (256, 64))
        with self.assertRaisesRegex(ValueError,
                                    r"page_size \(48\) must divide "
                                    r"max_sequence_length \(2048\)"):
            pages.check_paging(2048, 256, 48)
        for total, size, word in ((0, 64, "total_num_pages"),
                                  (8, -1, "page_size"),
                                  (None, 64, "total_num_pages"),
                                  (8, None, "page_size")):
            with self.assertRaisesRegex(ValueError, word):
                pages.check_paging(2048, total, size)


def paged_spec(layer, batch=4, seq=64, tokens=64, max_s=256, page_size=16,
               total_pages=32):
    spec = kv_spec(layer, batch=batch, seq=seq, tokens=tokens, max_s=max_s)
    spec.update(specs.kv_cache_shape_spec(batch, seq, tokens, max_s,
                                          page_size, total_pages))
    return spec


def compiler_knows_paging():
    spec = paged_spec(specs.dot_product_attention_spec(
        4, 64, 2, "causal", 0.0, 0.125))
    try:
        tejit.compile_ir(spec, "te", training=False)
    except tejit.TejitError as error:
        if "page_size" in str(error) and "unknown key" in str(error):
            return False
    except Exception:  # no library: the compile tests fail with its error
        return True
    return True


class PagedSpecTest(unittest.TestCase):
    def test_top_level_keys(self):
        self.assertEqual(specs.kv_cache_shape_spec(8, 1, 64, 2048, 64, 256), {
            "input_format": "thd", "batch_size": 8, "seq_length": 1,
            "tokens": 64, "kv_cache": {"max_sequence_length": 2048,
                                       "page_size": 64, "total_pages": 256}})
        # Non-paged specs stay as they were.
        self.assertEqual(specs.kv_cache_shape_spec(8, 1, 64, 2048)[
            "kv_cache"], {"max_sequence_length": 2048})

    def test_input_shapes_and_order(self):
        shapes = specs.kv_cache_shapes(4, 256, 2, 64, page_size=16,
                                       total_pages=32)
        self.assertEqual(list(shapes), ["cu_seqlens", "cu_seqlens_kv",
                                        "page_table", "key_cache",
                                        "value_cache"])
        self.assertEqual(shapes["page_table"], (4, 16))
        self.assertEqual(shapes["key_cache"], (32, 16, 2, 64))
        self.assertEqual(specs.kv_cache_shapes(4, 256, 2, 64)["value_cache"],
                         (4, 256, 2, 64))
        self.assertEqual(specs.PAGED_KV_CACHE_INPUTS,
                         ("cu_seqlens", "cu_seqlens_kv", "page_table"))


@unittest.skipUnless(compiler_knows_paging(),
                     "the compiler does not accept kv_cache's page_size yet "
                     "(docs/paged-kv-cache.md: the compiler part of the "
                     "contract)")
class PagedCompileTest(unittest.TestCase):
    """The programs' arguments are what the modules pass (_kv_cache.py):
    the page table right after cu_seqlens_kv, the paged caches by name."""

    def check_arguments(self, args, batch, max_s, groups, d, page_size,
                        total_pages):
        want = specs.kv_cache_shapes(batch, max_s, groups, d, page_size,
                                     total_pages)
        types = {"cu_seqlens": "i32", "cu_seqlens_kv": "i32",
                 "page_table": "i32", "key_cache": "bf16",
                 "value_cache": "bf16"}
        for name, shape in want.items():
            program_name = (f"layers.0.{name}" if name.endswith("_cache")
                            else name)
            self.assertEqual(args.get(program_name),
                             "x".join(map(str, shape)) + "x" + types[name],
                             f"{program_name} in {sorted(args)}")
        names = list(args)
        self.assertEqual(names.index("page_table"),
                         names.index("cu_seqlens_kv") + 1, names)
        self.assertEqual(names.count("page_table"), 1)

    def test_dot_product_attention(self):
        for mask in ("causal", "padding_causal", "no_mask"):
            args = forward_arguments(paged_spec(
                specs.dot_product_attention_spec(8, 64, 2, mask, 0.0,
                                                 0.125),
                batch=4, tokens=128, max_s=512, page_size=32,
                total_pages=40))
            self.assertEqual(args["query"], "128x8x64xbf16")
            self.check_arguments(args, 4, 512, 2, 64, 32, 40)

    def test_multihead_attention_decode_step_with_rotary(self):
        layer = specs.multihead_attention_spec(
            256, 8, 32, 2, True, "RMSNorm", 1e-5, False, "causal", 0.0,
            False, 16)
        args = forward_arguments(paged_spec(layer, batch=3, seq=1,
                                            max_s=128, page_size=8,
                                            total_pages=20))
        self.assertEqual(args["input"], "64x256xbf16")
        self.check_arguments(args, 3, 128, 2, 32, 8, 20)

    def test_transformer_layer(self):
        layer = specs.transformer_layer_spec(
            256, 512, 8, 32, 2, 1e-5, "RMSNorm", False, "swiglu", 0.0, 0.0,
            "padding_causal", False, False, True)
        args = forward_arguments(paged_spec(layer, batch=8, max_s=2048,
                                            page_size=64, total_pages=100))
        self.check_arguments(args, 8, 2048, 2, 32, 64, 100)

    def test_bad_page_size_is_refused(self):
        spec = paged_spec(specs.dot_product_attention_spec(
            4, 64, 2, "causal", 0.0, 0.125), max_s=256, page_size=48)
        with self.assertRaisesRegex(tejit.TejitError, "page_size.*divide"):
            tejit.compile_ir(spec, "te", training=False)


if __name__ == "__main__":
    unittest.main()
