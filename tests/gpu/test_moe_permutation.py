"""GPU tests of tejit.pytorch's MoE token permutation (TE's moe_permute,
moe_permute_with_probs, moe_unpermute, moe_sort_chunks_by_index(_with_probs);
docs/moe-permutation.md).

    PYTHONPATH=python python3 -m pytest tests/gpu/test_moe_permutation.py
    (-k "not full_size" leaves out the 8192 x 4096 cases)

Every case draws a fresh routing (topK distinct experts a token, from
random scores, as a router's top-k) and compares forward and backward with
a float64 reference written here from Megatron-LM's unfused semantics
(moe_utils.permute / unpermute / sort_chunks_by_idxs): tokens gathered
expert by expert in token order, the first num_out_tokens kept; unpermute
a scatter-add of the rows times their merging probs; chunks split and
concatenated in sorted_index's order. Row moves are compared bit for bit
(a permutation copies), sums with TE's bf16 tolerance (float32
accumulation in the kernels) or float32's.

Cases: mask maps (bool and int32) and index maps; bf16 and fp32; 8, 64
and 128 experts, topK 2 and 8, small and full size (8192 tokens x hidden
4096); num_out_tokens below the routed count (dropping) and -1; probs
(permute_with_probs, merging_probs) and their gradients; restore_shape;
FP8 input (a per-tensor Float8Tensor moved as bytes, its scale_inv kept;
unpermute dequantizes); chunk sorts with empty chunks, sizes on the host
and on the device, with probs; Megatron-LM's all-to-all dispatcher's
chain (permute with probs, sort by local expert, sort back, unpermute);
token counts that change between calls sharing one program; empty input;
the refusals naming the argument.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import run_seed, seed_per_test, torch  # noqa: E402

import tejit.pytorch as te  # noqa: E402
from tejit.pytorch import _weight_casts  # noqa: E402
from tejit.pytorch.float8_tensor import Float8Tensor  # noqa: E402

SEED = run_seed(__file__)
fresh_seed = seed_per_test(SEED)

BF16, F32, F64 = torch.bfloat16, torch.float32, torch.float64
CUDA = torch.device("cuda")
# TE's tolerances: bf16 rtol 1.6e-2; float32 sums of a few rows.
TOL = {BF16: (1.6e-2, 1e-2), F32: (1e-5, 1e-5)}

SMALL = [(300, 96, 8, 2), (515, 64, 64, 8), (200, 128, 128, 8)]
FULL = [(8192, 4096, 8, 2), (8192, 4096, 64, 8), (8192, 4096, 128, 8)]


def routing(tokens, experts, topk):
    """(bool mask [tokens, experts], int32 index map [tokens, topk])."""
    scores = torch.rand(tokens, experts, device=CUDA)
    index = scores.topk(topk, dim=1).indices
    mask = torch.zeros(tokens, experts, dtype=torch.bool, device=CUDA)
    mask.scatter_(1, index, True)
    return mask, index.to(torch.int32)


def ref_order(mask, num_out=None):
    """Megatron-LM's sorted_indices: the token of each permuted row."""
    experts = mask.shape[1]
    indices = torch.arange(mask.shape[0], device=CUDA)
    rows = indices.unsqueeze(0).expand(experts, -1).masked_select(
        mask.T.contiguous())
    return rows if num_out is None else rows[:num_out]


def ref_probs(probs, mask, num_out=None):
    flat = probs.T.contiguous().masked_select(mask.T.contiguous())
    return flat if num_out is None else flat[:num_out]


def ref_unpermute(permuted, rows, tokens, weights=None):
    """The scatter-add of (weighted) rows into their tokens, float64."""
    permuted = permuted.to(F64)
    if weights is not None:
        permuted = permuted * weights.to(F64).unsqueeze(-1)
    out = torch.zeros(tokens, permuted.shape[1], dtype=F64, device=CUDA)
    return out.index_add_(0, rows, permuted)


def close(actual, expected, dtype):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(actual.to(F64), expected.to(F64), rtol=rtol,
                               atol=atol)


def leaf(tensor):
    return tensor.detach().clone().requires_grad_()


def size_cases():
    for case in SMALL:
        yield pytest.param(*case, id="x".join(map(str, case)))
    for case in FULL:
        yield pytest.param(*case, id="full_size-" + "x".join(map(str, case)))


@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("tokens,hidden,experts,topk", list(size_cases()))
@pytest.mark.parametrize("drop", [False, True], ids=["dropless", "drop"])
def test_permute_with_probs(tokens, hidden, experts, topk, dtype, drop):
    mask, _ = routing(tokens, experts, topk)
    routed = tokens * topk
    num_out = routed * 3 // 4 if drop else None
    x = torch.randn(tokens, hidden, dtype=dtype, device=CUDA)
    probs = torch.rand(tokens, experts, device=CUDA)
    xl, pl = leaf(x), leaf(probs)
    out, permuted_probs, row_map = te.moe_permute_with_probs(
        xl, pl, mask, num_out_tokens=num_out if drop else routed)
    rows = ref_order(mask, num_out)
    assert torch.equal(out, x[rows])
    assert torch.equal(permuted_probs, ref_probs(probs, mask, num_out))
    assert row_map.dtype == torch.int32
    assert tuple(row_map.shape) == (tokens, experts)
    dy = torch.randn_like(out)
    dp = torch.randn_like(permuted_probs)
    torch.autograd.backward([out, permuted_probs], [dy, dp])
    close(xl.grad, ref_unpermute(dy, rows, tokens), dtype)
    expected_dp = torch.zeros(experts, tokens, device=CUDA)
    kept = mask.T.contiguous().flatten().nonzero().flatten()[:len(rows)]
    expected_dp.view(-1)[kept] = dp
    assert torch.equal(pl.grad, expected_dp.T)


def test_num_out_tokens_as_a_tensor():
    """Megatron-LM's token-dropping dispatcher passes a one-element tensor
    (moved to the host at its synchronization point)."""
    mask, _ = routing(96, 8, 2)
    x = torch.randn(96, 64, dtype=BF16, device=CUDA)
    count = mask.sum()
    for value in (count, count.cpu(), count - 10):
        out, _ = te.moe_permute(x, mask, num_out_tokens=value)
        assert torch.equal(out, x[ref_order(mask, int(value))])


@pytest.mark.parametrize("map_dtype", [torch.bool, torch.int32],
                         ids=["bool", "int32"])
def test_mask_dtypes_and_default_num_out_tokens(map_dtype):
    mask, _ = routing(257, 16, 3)
    x = torch.randn(257, 80, dtype=BF16, device=CUDA)
    out, _ = te.moe_permute(x, mask.to(map_dtype))
    assert torch.equal(out, x[ref_order(mask)])


@pytest.mark.parametrize("tokens,hidden,experts,topk", list(size_cases()))
@pytest.mark.parametrize("drop", [False, True], ids=["dropless", "drop"])
def test_index_map(tokens, hidden, experts, topk, drop):
    _, index = routing(tokens, experts, topk)
    routed = tokens * topk
    num_out = routed // 2 if drop else -1
    x = torch.randn(tokens, hidden, dtype=BF16, device=CUDA)
    xl = leaf(x)
    out, row_map = te.moe_permute(xl, index, num_out_tokens=num_out,
                                  map_type="index")
    # TE's (and Megatron-LM's) index permute: a stable sort of the ids.
    order = torch.argsort(index.flatten().long(), stable=True)
    if drop:
        order = order[:num_out]
    rows = order // topk
    assert torch.equal(out, x[rows])
    assert tuple(row_map.shape) == (tokens, topk)
    dy = torch.randn_like(out)
    out.backward(dy)
    close(xl.grad, ref_unpermute(dy, rows, tokens), BF16)
    # Unpermute through the index map, with merging probs [tokens, topK].
    probs = torch.rand(tokens, topk, device=CUDA)
    merged = te.moe_unpermute(out, row_map, merging_probs=probs,
                              map_type="index")
    weights = probs.flatten()[order]
    close(merged, ref_unpermute(out, rows, tokens, weights), BF16)


@pytest.mark.parametrize("dtype", [BF16, F32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("tokens,hidden,experts,topk", list(size_cases()))
def test_unpermute_with_merging_probs(tokens, hidden, experts, topk, dtype):
    mask, _ = routing(tokens, experts, topk)
    x = torch.randn(tokens, hidden, dtype=dtype, device=CUDA)
    permuted, row_map = te.moe_permute(x, mask, num_out_tokens=tokens * topk)
    probs = torch.rand(tokens, experts, device=CUDA)
    yl, pl = leaf(permuted), leaf(probs)
    out = te.moe_unpermute(yl, row_map, merging_probs=pl,
                           restore_shape=(tokens, hidden))
    rows = ref_order(mask)
    weights = ref_probs(probs, mask)
    close(out, ref_unpermute(permuted, rows, tokens, weights), dtype)
    dy = torch.randn_like(out)
    out.backward(dy)
    # d permuted[i] = weight_i dy[row_i]; d probs[t, e] = <permuted row, dy[t]>.
    close(yl.grad, dy.to(F64)[rows] * weights.to(F64).unsqueeze(-1), dtype)
    dots = (permuted.to(F64) * dy.to(F64)[rows]).sum(-1)
    expected = torch.zeros(experts, tokens, dtype=F64, device=CUDA)
    expected.view(-1)[mask.T.contiguous().flatten().nonzero().flatten()] = \
        dots
    rtol = 1e-2 if dtype == BF16 else 1e-4
    torch.testing.assert_close(pl.grad.to(F64), expected.T, rtol=rtol,
                               atol=rtol * hidden ** 0.5)


def test_unpermute_without_probs_and_restore_shape():
    mask, _ = routing(128, 8, 2)
    x = torch.randn(128, 64, dtype=BF16, device=CUDA)
    permuted, row_map = te.moe_permute(x, mask)
    yl = leaf(permuted)
    out = te.moe_unpermute(yl, row_map, restore_shape=(128, 64))
    close(out, 2 * x.to(F64), BF16)
    dy = torch.randn_like(out)
    out.backward(dy)
    assert torch.equal(yl.grad, dy[ref_order(mask)])
    # TE's deprecated `probs` keyword is merging_probs.
    probs = torch.rand(128, 8, device=CUDA)
    close(te.moe_unpermute(permuted, row_map, probs=probs),
          te.moe_unpermute(permuted, row_map, merging_probs=probs), BF16)


@pytest.mark.parametrize("tokens,hidden,experts,topk",
                         [(300, 96, 8, 2),
                          pytest.param(8192, 4096, 64, 8, id="full_size")])
def test_fp8_input(tokens, hidden, experts, topk):
    mask, index = routing(tokens, experts, topk)
    x = torch.randn(tokens, hidden, dtype=BF16, device=CUDA)
    fp8 = Float8Tensor.from_tensor(x)
    out, row_map = te.moe_permute(fp8, mask)
    assert isinstance(out, Float8Tensor)
    assert out._scale_inv is fp8._scale_inv
    rows = ref_order(mask)
    assert torch.equal(out._data.view(torch.uint8),
                       fp8._data.view(torch.uint8)[rows])
    by_index, _ = te.moe_permute(fp8, index, map_type="index")
    assert torch.equal(by_index._data.view(torch.uint8),
                       out._data.view(torch.uint8))
    # Unpermute dequantizes first: the sum of the dequantized copies.
    back = te.moe_unpermute(out, row_map)
    close(back, topk * fp8.dequantize().to(F64), BF16)
    sorted_fp8 = te.moe_sort_chunks_by_index(
        out, torch.tensor([len(rows) // 2, len(rows) - len(rows) // 2]),
        torch.tensor([1, 0]))
    assert isinstance(sorted_fp8, Float8Tensor)
    half = len(rows) // 2
    data = out._data.view(torch.uint8)
    assert torch.equal(sorted_fp8._data.view(torch.uint8),
                       torch.cat([data[half:], data[:half]]))


@pytest.mark.parametrize("on_device", [False, True], ids=["host", "device"])
@pytest.mark.parametrize("hidden", [96, pytest.param(4096, id="full_size")])
def test_sort_chunks_with_probs(on_device, hidden):
    # 8 ranks x 4 local experts, sorted by local expert then rank (Megatron-
    # LM's sort_input_by_local_experts), with empty chunks.
    ranks, local = 8, 4
    splits = torch.randint(0, 300, (ranks * local,))
    splits[3] = 0
    splits[17] = 0
    order = torch.arange(ranks * local).reshape(ranks, local).T.flatten()
    rows = int(splits.sum())
    x = torch.randn(rows, hidden, dtype=BF16, device=CUDA)
    probs = torch.rand(rows, device=CUDA)
    xl, pl = leaf(x), leaf(probs)
    s, o = ((splits.to(CUDA), order.to(CUDA)) if on_device
            else (splits, order))
    out, permuted_probs = te.moe_sort_chunks_by_index_with_probs(xl, pl, s, o)
    pieces = torch.split(x, splits.tolist())
    prob_pieces = torch.split(probs, splits.tolist())
    assert torch.equal(out, torch.cat([pieces[i] for i in order.tolist()]))
    assert torch.equal(permuted_probs,
                       torch.cat([prob_pieces[i] for i in order.tolist()]))
    dy, dp = torch.randn_like(out), torch.randn_like(permuted_probs)
    torch.autograd.backward([out, permuted_probs], [dy, dp])
    sorted_sizes = [int(splits[i]) for i in order.tolist()]
    back, back_p = [None] * len(order), [None] * len(order)
    for position, (g, gp) in enumerate(zip(torch.split(dy, sorted_sizes),
                                           torch.split(dp, sorted_sizes))):
        back[int(order[position])], back_p[int(order[position])] = g, gp
    assert torch.equal(xl.grad, torch.cat(back))
    assert torch.equal(pl.grad, torch.cat(back_p))
    plain = te.moe_sort_chunks_by_index(x, s, o)
    assert torch.equal(plain, out)


def test_megatron_alltoall_chain():
    """Megatron-LM's all-to-all dispatcher in one process: permute with
    probs, sort the chunks by local expert, (experts), sort back,
    unpermute; the gradient of x through the chain is the probs-weighted
    sum's."""
    tokens, hidden, experts, topk, ranks = 512, 128, 16, 4, 4
    local = experts // ranks
    mask, _ = routing(tokens, experts, topk)
    x = torch.randn(tokens, hidden, dtype=BF16, device=CUDA)
    probs = torch.softmax(torch.randn(tokens, experts, device=CUDA), -1) * mask
    xl = leaf(x)
    permuted, permuted_probs, row_map = te.moe_permute_with_probs(
        xl, probs, mask, num_out_tokens=tokens * topk)
    per_expert = mask.sum(0).cpu()
    splits = per_expert  # one "rank" chunk per expert here
    order = torch.arange(experts).reshape(ranks, local).T.flatten()
    sorted_x = te.moe_sort_chunks_by_index(permuted, splits, order)
    back_order = torch.argsort(order)
    unsorted = te.moe_sort_chunks_by_index(sorted_x, splits[order],
                                           back_order)
    hidden_out = unsorted * permuted_probs.unsqueeze(-1).to(BF16)
    out = te.moe_unpermute(hidden_out, row_map, restore_shape=x.shape)
    close(out, (x.to(F64) * probs.sum(-1, keepdim=True).to(F64)), BF16)
    out.backward(torch.ones_like(out))
    close(xl.grad, probs.sum(-1, keepdim=True).expand(-1, hidden), BF16)


def test_token_counts_share_programs():
    """Counts in one power-of-two class reuse the programs compiled for
    the first (one per op and direction)."""
    def moe_keys():
        return {k for k in _weight_casts._programs if k[0] == "moe"}
    mask, _ = routing(1100, 8, 2)
    x = torch.randn(1100, 64, dtype=BF16, device=CUDA, requires_grad=True)
    out, row_map = te.moe_permute(x, mask)
    te.moe_unpermute(out, row_map).sum().backward()
    before = moe_keys()
    for tokens in (1030, 1500, 2048):
        mask, _ = routing(tokens, 8, 2)
        x = torch.randn(tokens, 64, dtype=BF16, device=CUDA,
                        requires_grad=True)
        out, row_map = te.moe_permute(x, mask)
        y = te.moe_unpermute(out, row_map)
        close(y, 2 * x.detach().to(F64), BF16)
        y.sum().backward()
    assert moe_keys() == before


def test_empty_input():
    x = torch.zeros(0, 32, dtype=BF16, device=CUDA)
    mask = torch.zeros(0, 4, dtype=torch.bool, device=CUDA)
    out, row_map = te.moe_permute(x, mask)
    assert out.shape[0] == 0 and row_map.shape == (0, 4)
    assert te.moe_unpermute(out, row_map).shape == (0, 32)


def test_all_dropped():
    mask, _ = routing(64, 4, 2)
    x = torch.randn(64, 32, dtype=BF16, device=CUDA)
    out, row_map = te.moe_permute(x, mask, num_out_tokens=0)
    assert out.shape == (0, 32)
    assert torch.all(row_map == -1)
    assert torch.equal(te.moe_unpermute(out, row_map),
                       torch.zeros_like(x))


def test_refusals():
    x = torch.randn(8, 16, device=CUDA)
    mask, _ = routing(8, 4, 2)
    with pytest.raises(ValueError, match="map_type"):
        te.moe_permute(x, mask, map_type="dense")
    with pytest.raises(ValueError, match="num_out_tokens"):
        te.moe_permute(x, mask, num_out_tokens=33)
    with pytest.raises(ValueError, match="routing_map"):
        te.moe_permute(x, mask[:4])
    with pytest.raises(ValueError, match="probs"):
        te.moe_permute_with_probs(x, torch.rand(8, 3, device=CUDA), mask)
    with pytest.raises(TypeError, match="routing_map"):
        te.moe_permute(x, mask.float())
    with pytest.raises(ValueError, match="split_sizes and sorted_index"):
        te.moe_sort_chunks_by_index(x, torch.tensor([4, 4]),
                                    torch.tensor([0]))
    with pytest.raises(ValueError, match="sorted_index"):
        te.moe_sort_chunks_by_index(x, torch.tensor([4, 4]),
                                    torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="CUDA"):
        te.moe_permute(x.cpu(), mask.cpu())


def test_cuda_graph_replays_new_routings():
    """A mask map with num_out_tokens fixes the host counts (they follow
    the shapes): permute with probs and unpermute with merging_probs
    captured once replay new inputs and new routings bit for bit as eager
    calls; the calls that must read the device on the host are refused
    inside the capture."""
    tokens, hidden, experts, topk = 512, 256, 8, 2

    def layer(x, mask, probs):
        permuted, moved, row_map = te.moe_permute_with_probs(
            x, probs, mask, num_out_tokens=tokens * topk)
        return te.moe_unpermute(permuted * moved[:, None].to(x.dtype),
                                row_map, merging_probs=probs,
                                restore_shape=x.shape)

    def fresh():
        mask, _ = routing(tokens, experts, topk)
        return (torch.randn(tokens, hidden, device=CUDA, dtype=BF16), mask,
                torch.rand(tokens, experts, device=CUDA) * mask)

    static = fresh()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(2):  # compiles the programs before the capture
            layer(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = layer(*static)
    for _ in range(3):
        inputs = fresh()
        for target, value in zip(static, inputs):
            target.copy_(value)
        graph.replay()
        with torch.no_grad():
            want = layer(*inputs)
        torch.cuda.synchronize()
        assert torch.equal(static_out, want)
    x, mask, _ = static
    index = mask.int().topk(topk, dim=1).indices.to(torch.int32)
    for call, words in ((lambda: te.moe_permute(x, mask), "num_out_tokens"),
                        (lambda: te.moe_permute(x, index, map_type="index"),
                         "index")):
        graph_refused = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match=words):
            with torch.no_grad(), torch.cuda.graph(graph_refused):
                call()
