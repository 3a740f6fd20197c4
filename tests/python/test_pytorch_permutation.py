"""tejit.pytorch's MoE token permutation (TE's moe_permute,
moe_permute_with_probs, moe_unpermute, moe_sort_chunks_by_index(_with_probs);
docs/moe-permutation.md) against a plain-PyTorch reference with Megatron-LM's
unfused semantics (moe_utils.permute / unpermute / sort_chunks_by_idxs),
forward and backward, probabilities' gradients included, in float64 on the
same random routing. The refusals run on the CPU (PyTorch needed); the ops
need a CUDA GPU (skipped without one). tests/gpu/test_moe_permutation.py
runs the full sizes and FP8.
Run: python3 -m pytest tests/python
"""
import unittest

from torch_free import HAVE_TORCH

if HAVE_TORCH:
    import torch

    import tejit.pytorch as te

HAVE_CUDA = HAVE_TORCH and torch.cuda.is_available()


def routing(tokens, experts, topk, device):
    """A bool mask [tokens, experts] with `topk` distinct experts a token
    and its index map [tokens, topk] (the experts in random order)."""
    scores = torch.rand(tokens, experts, device=device)
    index = scores.topk(topk, dim=1).indices.to(torch.int32)
    mask = torch.zeros(tokens, experts, dtype=torch.bool, device=device)
    mask.scatter_(1, index.long(), True)
    return mask, index


def ref_permute(tokens, mask, probs=None, num_out=None):
    """Megatron-LM's unfused permute of a mask map (tokens expert by
    expert, in token order), cut to the first `num_out` rows."""
    experts = mask.shape[1]
    mask_t = mask.T.contiguous()
    indices = torch.arange(tokens.shape[0], device=tokens.device)
    sorted_indices = indices.unsqueeze(0).expand(experts, -1).masked_select(
        mask_t)
    permuted_probs = (None if probs is None
                      else probs.T.contiguous().masked_select(mask_t))
    if num_out is not None:
        sorted_indices = sorted_indices[:num_out]
        if permuted_probs is not None:
            permuted_probs = permuted_probs[:num_out]
    return tokens.index_select(0, sorted_indices), permuted_probs, \
        sorted_indices


def ref_unpermute(permuted, sorted_indices, tokens, probs=None, mask=None):
    """Megatron-LM's unfused unpermute: rows weighted by their probs,
    scatter-added into their tokens."""
    if probs is not None:
        weights = probs.T.contiguous().masked_select(mask.T.contiguous())
        permuted = permuted * weights[:permuted.shape[0]].unsqueeze(-1)
    out = torch.zeros(tokens, permuted.shape[1], dtype=permuted.dtype,
                      device=permuted.device)
    return out.scatter_add(0, sorted_indices.unsqueeze(1).expand(
        -1, permuted.shape[1]), permuted)


def leaf(tensor):
    return tensor.detach().clone().requires_grad_()


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class RefusalTest(unittest.TestCase):
    """The argument checks name the argument (CPU tensors: they come
    before anything runs)."""

    def refused(self, error, call, *words):
        with self.assertRaises(error) as caught:
            call()
        for word in words:
            self.assertIn(word, str(caught.exception))

    def test_refusals(self):
        x = torch.zeros(4, 8)
        mask = torch.zeros(4, 3, dtype=torch.bool)
        self.refused(ValueError, lambda: te.moe_permute(x, mask,
                                                        map_type="dense"),
                     "map_type")
        self.refused(ValueError, lambda: te.moe_permute(x, mask[:3]),
                     "routing_map", "[4, num_experts]")
        self.refused(ValueError, lambda: te.moe_permute(x.view(4, 2, 4),
                                                        mask), "inp")
        self.refused(ValueError, lambda: te.moe_permute(x, mask,
                                                        num_out_tokens=13),
                     "num_out_tokens", "[0, 12]")
        self.refused(ValueError, lambda: te.moe_permute_with_probs(
            x, torch.zeros(4, 2), mask), "probs", "(4, 3)")
        self.refused(ValueError, lambda: te.moe_permute(x, mask),
                     "CUDA tensor")
        self.refused(ValueError, lambda: te.moe_unpermute(
            x, torch.zeros(4, 3, dtype=torch.int32),
            merging_probs=torch.zeros(4, 2)), "merging_probs", "(4, 3)")
        self.refused(ValueError, lambda: te.moe_unpermute(
            x, torch.zeros(12, dtype=torch.int32)), "row_id_map")
        self.refused(ValueError, lambda: te.moe_unpermute(
            x, torch.zeros(4, 3, dtype=torch.int32), probs=x,
            merging_probs=x), "probs is deprecated")
        self.refused(ValueError, lambda: te.moe_sort_chunks_by_index(
            x, [1, 3], [0]), "split_sizes and sorted_index")
        self.refused(ValueError, lambda: te.moe_sort_chunks_by_index(
            x, [1, 2], [0, 1]), "sum to the 4 rows")
        self.refused(ValueError, lambda: te.moe_sort_chunks_by_index(
            x, [1, 3], [1, 1]), "permutation")

    def test_exported_as_te_does(self):
        from tejit.pytorch import permutation
        for name in ("moe_permute", "moe_permute_with_probs",
                     "moe_unpermute", "moe_sort_chunks_by_index",
                     "moe_sort_chunks_by_index_with_probs"):
            self.assertIs(getattr(te, name), getattr(permutation, name))


@unittest.skipUnless(HAVE_CUDA, "needs PyTorch with a CUDA GPU")
class PermutationTest(unittest.TestCase):
    tokens, hidden, experts, topk = 300, 96, 8, 2

    def setUp(self):
        torch.manual_seed(1234)
        self.device = torch.device("cuda")

    def close(self, actual, expected, tol=1e-2):
        torch.testing.assert_close(actual.double(), expected.double(),
                                   rtol=tol, atol=tol)

    def test_permute_with_probs_forward_and_backward(self):
        for num_out in (None, 400):
            with self.subTest(num_out=num_out):
                mask, _ = routing(self.tokens, self.experts, self.topk,
                                  self.device)
                x = torch.randn(self.tokens, self.hidden, device=self.device,
                                dtype=torch.bfloat16)
                probs = torch.rand(self.tokens, self.experts,
                                   device=self.device) * mask
                xl, pl = leaf(x), leaf(probs)
                out, pp, _ = te.moe_permute_with_probs(
                    xl, pl, mask, num_out_tokens=-1 if num_out is None
                    else num_out)
                xr, pr = leaf(x.double()), leaf(probs.double())
                ref, ref_pp, _ = ref_permute(xr, mask, pr, num_out)
                self.assertTrue(torch.equal(out.double(), ref.detach()))
                self.assertTrue(torch.equal(pp.double(), ref_pp.detach()))
                dy = torch.randn_like(out)
                dp = torch.randn_like(pp)
                torch.autograd.backward([out, pp], [dy, dp])
                torch.autograd.backward([ref, ref_pp],
                                        [dy.double(), dp.double()])
                self.close(xl.grad, xr.grad)
                self.close(pl.grad, pr.grad, 1e-6)

    def test_index_map_matches_the_mask_map(self):
        mask, index = routing(self.tokens, self.experts, self.topk,
                              self.device)
        x = torch.randn(self.tokens, self.hidden, device=self.device)
        by_mask, _ = te.moe_permute(x, mask)
        by_index, row_map = te.moe_permute(x, index, map_type="index")
        self.assertTrue(torch.equal(by_mask, by_index))
        self.assertEqual(tuple(row_map.shape), (self.tokens, self.topk))
        back = te.moe_unpermute(by_index, row_map, map_type="index")
        self.close(back, x * self.topk, 1e-5)

    def test_unpermute_with_merging_probs(self):
        mask, _ = routing(self.tokens, self.experts, self.topk, self.device)
        x = torch.randn(self.tokens, self.hidden, device=self.device,
                        dtype=torch.bfloat16)
        permuted, row_map = te.moe_permute(x, mask)
        probs = torch.rand(self.tokens, self.experts, device=self.device)
        yl, pl = leaf(permuted), leaf(probs)
        out = te.moe_unpermute(yl, row_map, merging_probs=pl,
                               restore_shape=x.shape)
        _, _, sorted_indices = ref_permute(x, mask)
        yr, pr = leaf(permuted.double()), leaf(probs.double())
        ref = ref_unpermute(yr, sorted_indices, self.tokens, pr, mask)
        self.close(out, ref.detach())
        dy = torch.randn_like(out)
        out.backward(dy)
        ref.backward(dy.double())
        self.close(yl.grad, yr.grad)
        # Gradients of probs the routing does not use are 0.
        self.close(pl.grad, pr.grad, 5e-2)

    def test_sort_chunks_with_probs(self):
        splits = [5, 0, 7, 3, 9, 1]
        order = [3, 0, 5, 1, 4, 2]
        rows = sum(splits)
        x = torch.randn(rows, self.hidden, device=self.device)
        probs = torch.rand(rows, device=self.device)
        xl, pl = leaf(x), leaf(probs)
        out, pp = te.moe_sort_chunks_by_index_with_probs(
            xl, pl, torch.tensor(splits), torch.tensor(order,
                                                       device=self.device))
        pieces = torch.split(x, splits)
        ref = torch.cat([pieces[i] for i in order])
        prob_pieces = torch.split(probs, splits)
        self.assertTrue(torch.equal(out, ref))
        self.assertTrue(torch.equal(pp, torch.cat([prob_pieces[i]
                                                   for i in order])))
        dy, dp = torch.randn_like(out), torch.randn_like(pp)
        torch.autograd.backward([out, pp], [dy, dp])
        inverse = torch.split(dy, [splits[i] for i in order])
        back = [None] * len(order)
        for position, chunk in enumerate(order):
            back[chunk] = inverse[position]
        self.assertTrue(torch.equal(xl.grad, torch.cat(back)))
        self.assertEqual(tuple(pl.grad.shape), (rows,))


if __name__ == "__main__":
    unittest.main()
