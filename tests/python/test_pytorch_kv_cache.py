"""tejit.pytorch.InferenceParams and the attention modules'
inference_params path on the CPU (nothing compiles or runs on a GPU):
TE's constructor and refusals, pre_step's device tensors (values and
fixed addresses), cached tokens moving rows when a sequence finishes,
paged caches (the page table pre_step writes, out of pages, step() and
convert_paged_to_nonpaged through the table),
step() (TE's PyTorch-side copy), and what a cached step hands its program
(_run_program replaced by a recorder): packed, padded new tokens, the
InferenceParams' own cu_seqlens and cache tensors (the same objects: the
program writes them in place), per-token rotary angles from the cached
lengths, the kv_cache spec keys, outputs back in the input's layout.
Needs PyTorch (skipped without it). Run: python3 -m pytest tests/python
"""
import unittest
from collections import OrderedDict

from torch_free import HAVE_TORCH

if HAVE_TORCH:
    import torch

    import tejit.pytorch as te
    from tejit.pytorch.module import _kv_cache, attention

CPU = "cpu"


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class OnTheCpu(unittest.TestCase):
    """InferenceParams lives on the current CUDA device when there is one
    (TE's rule): these tests keep it on the CPU also on a GPU machine."""

    def setUp(self):
        self._is_available = torch.cuda.is_available
        torch.cuda.is_available = lambda: False

    def tearDown(self):
        torch.cuda.is_available = self._is_available


class InferenceParamsTest(OnTheCpu):
    def params(self, **kwargs):
        args = dict(max_batch_size=4, max_sequence_length=32,
                    num_heads_kv=2, head_dim_k=8, dtype=torch.bfloat16)
        args.update(kwargs)
        return te.InferenceParams(**args)

    def test_exported_like_te(self):
        self.assertIs(te.InferenceParams, te.attention.InferenceParams)

    def test_refusals(self):
        for kwargs, word in ((dict(custom_cache_manager=object()),
                              "custom_cache_manager"),
                             (dict(head_dim_v=16), "head_dim_v")):
            with self.subTest(word=word):
                with self.assertRaisesRegex(NotImplementedError, word):
                    self.params(**kwargs)
        for kwargs, word in ((dict(is_paged=True), "total_num_pages"),
                             (dict(is_paged=True, total_num_pages=8),
                              "page_size"),
                             (dict(is_paged=True, total_num_pages=0,
                                   page_size=8), "total_num_pages"),
                             (dict(is_paged=True, total_num_pages=8,
                                   page_size=12),
                              r"page_size \(12\) must divide "
                              r"max_sequence_length \(32\)")):
            with self.subTest(word=word):
                with self.assertRaisesRegex(ValueError, word):
                    self.params(**kwargs)
        # TE reads the page arguments only with is_paged=True.
        self.assertFalse(self.params(page_size=12).is_paged)
        with self.assertRaisesRegex(ValueError, "max_ctx_len"):
            self.params(qkv_format="thd")
        with self.assertRaisesRegex(TypeError, "bfloat16"):
            self.params(dtype=torch.float32)

    def test_pre_step_tensors(self):
        params = self.params()
        addresses = [t.data_ptr() for t in (params.cu_seqlens_q,
                                            params.cu_seqlens_kv,
                                            params.pre_step_seqlens)]
        params.pre_step(OrderedDict([(10, 5), (11, 3)]))
        self.assertEqual(params.cu_seqlens_q.tolist(), [0, 5, 8, 8, 8])
        self.assertEqual(params.cu_seqlens_kv.tolist(), [0, 5, 8, 8, 8])
        self.assertEqual(params.batch_size, 2)
        params.pre_step(OrderedDict([(10, 1), (11, 1)]))
        self.assertEqual(params.cu_seqlens_q.tolist(), [0, 1, 2, 2, 2])
        self.assertEqual(params.cu_seqlens_kv.tolist(), [0, 6, 10, 10, 10])
        self.assertEqual(params.get_seqlens_pre_step().tolist(),
                         [5, 3, 0, 0])
        self.assertEqual(dict(params.sequences), {10: 6, 11: 4})
        self.assertEqual(dict(params.sequences_pre_step), {10: 5, 11: 3})
        self.assertEqual(addresses, [t.data_ptr() for t in (
            params.cu_seqlens_q, params.cu_seqlens_kv,
            params.pre_step_seqlens)])
        params.reset()
        self.assertEqual(params.sequences, OrderedDict())
        with self.assertRaisesRegex(RuntimeError, "pre_step"):
            params._step_plan("x")

    def test_finished_sequence_moves_rows(self):
        params = self.params()
        params.allocate_memory(3)
        k, v = params.cache_manager.cache[3]
        self.assertEqual(tuple(k.shape), (4, 32, 2, 8))
        params.pre_step(OrderedDict([(1, 4), (2, 6), (3, 2)]))
        for row in range(3):
            k[row] = row + 1
            v[row] = -(row + 1)
        address = k.data_ptr()
        params.pre_step(OrderedDict([(1, 1), (3, 1), (4, 2)]))
        # 2 finished: 3's two cached positions move from row 2 to row 1.
        self.assertEqual(k.data_ptr(), address)
        self.assertTrue((k[1, :2] == 3).all())
        self.assertTrue((v[1, :2] == -3).all())
        self.assertTrue((k[0] == 1).all())
        self.assertEqual(list(params.sequences.items()),
                         [(1, 5), (3, 3), (4, 2)])

    def test_step_writes_the_new_tokens(self):
        params = self.params()
        params.pre_step(OrderedDict([(1, 3), (2, 2)]))
        new_k = torch.arange(5 * 2 * 8, dtype=torch.float32).view(5, 2, 8)
        k, v, cu_q, cu_kv, max_s, fmt = params.step(7, new_k, -new_k,
                                                    "thd")
        self.assertEqual((max_s, fmt), (32, "thd_2bshd"))
        self.assertIs(cu_q, params.cu_seqlens_q)
        self.assertTrue(torch.equal(k[0, :3].float(), new_k[:3]))
        self.assertTrue(torch.equal(k[1, :2].float(), new_k[3:5]))
        self.assertTrue(torch.equal(v[1, :2].float(), -new_k[3:5]))
        params.pre_step(OrderedDict([(1, 1), (2, 1)]))
        step = torch.ones(2, 1, 2, 8)  # bshd decode
        params.step(7, step, step, "bshd")
        self.assertTrue((k[0, 3] == 1).all() and (k[1, 2] == 1).all())
        self.assertTrue(torch.equal(k[0, :3].float(), new_k[:3]))


class PagedInferenceParamsTest(OnTheCpu):
    """is_paged=True: page pools, the page table pre_step writes, step()
    and convert_paged_to_nonpaged through the table."""

    def params(self, total_num_pages=6, page_size=4, **kwargs):
        args = dict(max_batch_size=3, max_sequence_length=16,
                    num_heads_kv=2, head_dim_k=8, dtype=torch.bfloat16,
                    is_paged=True, total_num_pages=total_num_pages,
                    page_size=page_size)
        args.update(kwargs)
        return te.InferenceParams(**args)

    def test_exported_like_te(self):
        from tejit.pytorch.attention import inference
        params = self.params()
        self.assertIsInstance(params.cache_manager,
                              inference.PagedKVCacheManager)
        self.assertIn("PagedKVCacheManager", inference.__all__)
        self.assertIn("is_paged=True", repr(params))

    def test_caches_and_page_table(self):
        params = self.params()
        params.allocate_memory(2)
        k, v = params.cache_manager.cache[2]
        self.assertEqual(tuple(k.shape), (6, 4, 2, 8))
        self.assertEqual(tuple(v.shape), (6, 4, 2, 8))
        table = params.cache_manager.page_table
        self.assertEqual((tuple(table.shape), table.dtype),
                         ((3, 4), torch.int32))
        address = table.data_ptr()
        params.pre_step(OrderedDict([(10, 5), (11, 3)]))
        self.assertEqual(table.tolist(), [[0, 1, 0, 0], [2, 0, 0, 0],
                                          [0, 0, 0, 0]])
        self.assertEqual(params.cu_seqlens_kv.tolist(), [0, 5, 8, 8])
        params.pre_step(OrderedDict([(11, 2), (12, 5)]))  # 10 finished
        self.assertEqual(table.tolist(), [[2, 3, 0, 0], [4, 5, 0, 0],
                                          [0, 0, 0, 0]])
        self.assertEqual(table.data_ptr(), address)
        self.assertEqual(params.cu_seqlens_kv.tolist(), [0, 5, 10, 10])
        # Rotary positions still follow the sequence tensors' values.
        self.assertEqual(params._token_positions[:6].tolist(),
                         [3, 4, 0, 1, 2, 3])

    def test_out_of_pages_leaves_the_params_unchanged(self):
        params = self.params(total_num_pages=3)
        params.pre_step(OrderedDict([(1, 4), (2, 1)]))
        state = (dict(params.sequences), params.cu_seqlens_kv.tolist(),
                 params.cache_manager.page_table.tolist())
        with self.assertRaisesRegex(RuntimeError,
                                    "sequence 3 needs 2.*total_num_pages "
                                    "= 3"):
            params.pre_step(OrderedDict([(1, 1), (2, 1), (3, 8)]))
        self.assertEqual((dict(params.sequences),
                          params.cu_seqlens_kv.tolist(),
                          params.cache_manager.page_table.tolist()), state)
        params.pre_step(OrderedDict([(1, 1), (2, 1)]))
        self.assertEqual(dict(params.sequences), {1: 5, 2: 2})
        self.assertEqual(params.cache_manager.page_table.tolist()[0],
                         [0, 2, 0, 0])
        params.reset()
        self.assertEqual(list(params.cache_manager.allocator.free),
                         [0, 1, 2])

    def test_step_and_convert_paged_to_nonpaged(self):
        paged = self.params()
        flat = te.InferenceParams(3, 16, 2, 8, torch.bfloat16)
        new_k = torch.randn(9, 2, 8).to(torch.bfloat16)
        for params in (paged, flat):
            params.pre_step(OrderedDict([(1, 6), (2, 3)]))
            params.step(4, new_k, -new_k, "thd")
            params.pre_step(OrderedDict([(2, 1), (3, 2)]))  # 1 finished
            params.step(4, new_k[:3], -new_k[:3], "thd")
        k, v = paged.convert_paged_to_nonpaged(4)
        self.assertEqual(tuple(k.shape), (3, 16, 2, 8))
        want_k, want_v = flat.cache_manager.cache[4]
        for row, length in enumerate((4, 2)):
            self.assertTrue(torch.equal(k[row, :length],
                                        want_k[row, :length]))
            self.assertTrue(torch.equal(v[row, :length],
                                        want_v[row, :length]))
            self.assertFalse(k[row, length:].any())
        self.assertFalse(k[2].any())
        # 2's rows sit in its pages: page 2 (rows 0..3 of sequence 2).
        cache = paged.cache_manager.cache[4][0]
        self.assertTrue(torch.equal(cache[2, :3], new_k[6:9]))
        self.assertTrue(torch.equal(cache[2, 3], new_k[0]))


class CachedStepTest(OnTheCpu):
    """What the modules give their program for a cached step."""

    def setUp(self):
        super().setUp()
        self.original = attention.check_input
        attention.check_input = lambda *args: None  # no CUDA here
        self.calls = []

    def tearDown(self):
        attention.check_input = self.original
        super().tearDown()

    def record(self, module, out_features):
        def run(activations, dtype, shape_key, shape_spec, shape,
                layer_spec=None, variant=(), is_first_microbatch=None,
                inference_only=False):
            self.calls.append(dict(activations=activations,
                                   shape_spec=shape_spec,
                                   layer=layer_spec(), variant=variant,
                                   inference_only=inference_only))
            tokens = next(iter(activations.values())).shape[0]
            return {"output": torch.arange(tokens, dtype=dtype).view(
                tokens, 1).expand(tokens, out_features).contiguous()}
        module._run_program = run

    def test_multihead_attention_decode_bshd_with_rotary(self):
        mha = te.MultiheadAttention(64, 4, num_gqa_groups=2,
                                    input_layernorm=True, qkv_format="bshd",
                                    params_dtype=torch.bfloat16, device=CPU,
                                    layer_number=5)
        self.record(mha, 64)
        params = te.InferenceParams(4, 32)  # shapes from the first layer
        rope = te.attention.RotaryPositionEmbedding(16)(32).to(CPU)
        params.pre_step(OrderedDict([(0, 3), (1, 3)]))
        mha.eval()
        with torch.no_grad():
            x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
            out = mha(x, inference_params=params, rotary_pos_emb=rope)
        self.assertEqual(tuple(out.shape), (2, 3, 64))
        # Row j of the output is the program's row j: b-major tokens.
        self.assertEqual(out[1, 2, 0].item(), 5.0)
        call = self.calls[-1]
        self.assertTrue(call["inference_only"])
        # seq_length: 3 new tokens rounded to a power of two (4).
        self.assertEqual(call["shape_spec"], {
            "input_format": "thd", "batch_size": 4, "seq_length": 4,
            "tokens": 64, "kv_cache": {"max_sequence_length": 32}})
        self.assertEqual(call["layer"]["type"], "MultiheadAttention")
        self.assertEqual(call["layer"]["attn_mask_type"], "causal")
        self.assertTrue(call["layer"]["rotary_pos_emb"])
        acts = call["activations"]
        self.assertEqual(tuple(acts["input"].shape), (64, 64))
        self.assertTrue(torch.equal(acts["input"][:6], x.reshape(6, 64)))
        self.assertTrue((acts["input"][6:] == 0).all())
        self.assertIs(acts["cu_seqlens"], params.cu_seqlens_q)
        self.assertIs(acts["cu_seqlens_kv"], params.cu_seqlens_kv)
        k, v = params.cache_manager.cache[5]
        self.assertIs(acts["key_cache"], k)
        self.assertIs(acts["value_cache"], v)
        self.assertEqual(tuple(k.shape), (4, 32, 2, 16))
        self.assertEqual((params.num_heads_kv, params.head_dim_k,
                          params.dtype), (2, 16, torch.bfloat16))
        # A decode step: positions continue after the cached tokens.
        params.pre_step(OrderedDict([(0, 1), (1, 1)]))
        with torch.no_grad():
            out = mha(x[:, :1], inference_params=params,
                      rotary_pos_emb=rope)
        self.assertEqual(tuple(out.shape), (2, 1, 64))
        angles = self.calls[-1]["activations"]["rotary_pos_emb"]
        self.assertEqual(tuple(angles.shape), (64, 1, 1, 16))
        self.assertTrue(torch.equal(angles[0], rope[3]))
        self.assertTrue(torch.equal(angles[1], rope[3]))
        self.assertTrue(torch.equal(angles[2], rope[0]))  # the tail
        self.assertIs(self.calls[-1]["activations"]["key_cache"], k)

    def test_decode_steps_compile_few_query_rows(self):
        self.assertEqual([_kv_cache.query_bucket(n)
                          for n in (0, 1, 2, 3, 5, 16, 17, 64, 65)],
                         [1, 1, 2, 4, 8, 16, 64, 64, 128])

    def angles_of(self, params, rope, layers, width=64):
        """The rotary angles each of `layers` MHAs (layer numbers 1..)
        hands its program for one step of params' current plan."""
        got = []
        for number in range(1, layers + 1):
            mha = te.MultiheadAttention(width, 4, num_gqa_groups=2,
                                        qkv_format="thd",
                                        params_dtype=torch.bfloat16,
                                        device=CPU, layer_number=number)
            self.record(mha, width)
            mha.eval()
            tokens = params._step_plan("test").total_new
            with torch.no_grad():
                mha(torch.randn(tokens, width, dtype=torch.bfloat16),
                    inference_params=params, rotary_pos_emb=rope)
            got.append(self.calls[-1]["activations"]["rotary_pos_emb"])
        return got

    def expected_angles(self, rope, cached, new, tokens):
        rows = [p for c, n in zip(cached, new) for p in range(c, c + n)]
        rows += [0] * (tokens - len(rows))
        return rope[torch.tensor(rows)]

    def test_rotary_positions_from_pre_step_shared_by_the_layers(self):
        params = te.InferenceParams(2, 128, qkv_format="thd",
                                    max_ctx_len=64)
        rope = te.attention.RotaryPositionEmbedding(16)(128).to(CPU)
        # 60 + 3 tokens (T 64 fits the 2 x 16 -> 64 positions pre_step
        # writes), then a decode step: its positions past the 2 new tokens
        # are 0 again, not the prefill's.
        params.pre_step(OrderedDict([(0, 60), (1, 3)]))
        first, second = self.angles_of(params, rope, 2)
        self.assertTrue(torch.equal(
            first, self.expected_angles(rope, [0, 0], [60, 3], 64)))
        self.assertIs(second, first)  # one gather per step
        params.pre_step(OrderedDict([(0, 1), (1, 1)]))
        (angles,) = self.angles_of(params, rope, 1)
        self.assertIsNot(angles, first)
        self.assertTrue(torch.equal(
            angles, self.expected_angles(rope, [60, 3], [1, 1], 64)))

    def test_rotary_positions_of_long_steps_from_the_device(self):
        params = te.InferenceParams(1, 256, qkv_format="thd",
                                    max_ctx_len=128)
        rope = te.attention.RotaryPositionEmbedding(16)(256).to(CPU)
        params.pre_step(OrderedDict([(0, 100)]))  # T 128 > 64 positions
        (angles,) = self.angles_of(params, rope, 1)
        self.assertTrue(torch.equal(
            angles, self.expected_angles(rope, [0], [100], 128)))
        params.pre_step(OrderedDict([(0, 70)]))
        (angles,) = self.angles_of(params, rope, 1)
        self.assertTrue(torch.equal(
            angles, self.expected_angles(rope, [100], [70], 128)))

    def test_transformer_layer_thd_prefill(self):
        layer = te.TransformerLayer(64, 128, 4, num_gqa_groups=1,
                                    attn_input_format="thd",
                                    self_attn_mask_type="padding_causal",
                                    params_dtype=torch.bfloat16, device=CPU)
        self.record(layer, 64)
        params = te.InferenceParams(3, 200, 1, 16, torch.bfloat16,
                                    qkv_format="thd", max_ctx_len=100)
        params.pre_step(OrderedDict([(7, 70), (8, 1)]))
        layer.eval()
        x = torch.randn(71, 64, dtype=torch.bfloat16)
        out = layer(x, inference_params=params,
                    cu_seqlens_q=params.cu_seqlens_q,
                    cu_seqlens_kv=params.cu_seqlens_kv, max_seqlen_q=100)
        self.assertEqual(tuple(out.shape), (71, 64))
        call = self.calls[-1]
        # max_ctx_len 100 -> seq_length 128; 71 tokens -> 128.
        self.assertEqual((call["shape_spec"]["seq_length"],
                          call["shape_spec"]["tokens"],
                          call["shape_spec"]["batch_size"]), (128, 128, 3))
        self.assertEqual(call["layer"]["self_attn_mask_type"],
                         "padding_causal")
        self.assertIs(call["activations"]["key_cache"],
                      params.cache_manager.cache[1][0])

    def test_dot_product_attention_thd(self):
        dpa = te.DotProductAttention(4, 16, num_gqa_groups=2,
                                     qkv_format="thd", layer_number=2,
                                     attn_mask_type="padding_causal")
        self.record(dpa, 64)
        params = te.InferenceParams(2, 16, 2, 16, torch.bfloat16,
                                    qkv_format="thd", max_ctx_len=4)
        params.pre_step(OrderedDict([(0, 2), (1, 3)]))
        q = torch.randn(5, 4, 16, dtype=torch.bfloat16)
        k = torch.randn(5, 2, 16, dtype=torch.bfloat16)
        with torch.no_grad():
            out = dpa(q, k, k, inference_params=params)
        self.assertEqual(tuple(out.shape), (5, 64))
        acts = self.calls[-1]["activations"]
        self.assertEqual(tuple(acts["query"].shape), (64, 4, 16))
        self.assertEqual(tuple(acts["key"].shape), (64, 2, 16))
        self.assertIs(acts["key_cache"], params.cache_manager.cache[2][0])
        self.assertEqual(self.calls[-1]["variant"],
                         ("kv_cache", "padding_causal"))

    def test_paged_step_passes_the_page_table(self):
        dpa = te.DotProductAttention(4, 16, num_gqa_groups=2,
                                     qkv_format="bshd", layer_number=2)
        self.record(dpa, 64)
        params = te.InferenceParams(2, 16, 2, 16, torch.bfloat16,
                                    is_paged=True, total_num_pages=5,
                                    page_size=4)
        params.pre_step(OrderedDict([(0, 1), (1, 1)]))
        q = torch.randn(2, 1, 4, 16, dtype=torch.bfloat16)
        k = torch.randn(2, 1, 2, 16, dtype=torch.bfloat16)
        with torch.no_grad():
            dpa(q, k, k, inference_params=params)
        call = self.calls[-1]
        self.assertEqual(call["shape_spec"]["kv_cache"], {
            "max_sequence_length": 16, "page_size": 4, "total_pages": 5})
        acts = call["activations"]
        self.assertEqual(list(acts)[3:], ["cu_seqlens", "cu_seqlens_kv",
                                          "page_table", "key_cache",
                                          "value_cache"])
        self.assertIs(acts["page_table"], params.cache_manager.page_table)
        self.assertIs(acts["key_cache"], params.cache_manager.cache[2][0])
        self.assertEqual(tuple(acts["key_cache"].shape), (5, 4, 2, 16))

    def test_refusals(self):
        mha = te.MultiheadAttention(64, 4, qkv_format="bshd",
                                    params_dtype=torch.bfloat16, device=CPU)
        self.record(mha, 64)
        params = te.InferenceParams(4, 32)
        x = torch.randn(2, 1, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(RuntimeError, "eval"):
            mha(x, inference_params=params)  # training mode
        with self.assertRaisesRegex(RuntimeError, "dropout"):
            with torch.no_grad():
                mha(x, inference_params=params)  # attention_dropout 0.1
        mha.eval()
        with self.assertRaisesRegex(RuntimeError, "pre_step"):
            mha(x, inference_params=params)
        params.pre_step(OrderedDict([(0, 2), (1, 1)]))
        with self.assertRaisesRegex(ValueError, "uneven|s = 1"):
            mha(x, inference_params=params)
        params.pre_step(OrderedDict([(0, 1), (1, 1), (2, 1)]))
        with self.assertRaisesRegex(ValueError, "b >="):
            mha(x, inference_params=params)
        params.pre_step(OrderedDict([(0, 1), (1, 1)]))
        with self.assertRaisesRegex(ValueError, "attention_mask"):
            mha(x, inference_params=params,
                attention_mask=torch.zeros(2, 1, 1, 1, dtype=torch.bool))
        with self.assertRaisesRegex(NotImplementedError, "window_size"):
            mha(x, inference_params=params, window_size=(8, 0))
        with self.assertRaisesRegex(ValueError, "arbitrary"):
            mha(x, inference_params=params, attn_mask_type="arbitrary")
        # More rows than live sequences: the extra row is a tail.
        out = mha(torch.randn(3, 1, 64, dtype=torch.bfloat16),
                  inference_params=params)
        self.assertEqual(tuple(out.shape), (3, 1, 64))
        cross = te.MultiheadAttention(64, 4, attention_type="cross",
                                      params_dtype=torch.bfloat16,
                                      device=CPU)
        cross.eval()
        with self.assertRaisesRegex(NotImplementedError, "cross"):
            cross(x, encoder_output=x, inference_params=params)


if __name__ == "__main__":
    unittest.main()
