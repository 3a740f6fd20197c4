"""GPU tests of tejit.pytorch.router (TE's MoE router fusions;
docs/router.md) on one GPU:

    PYTHONPATH=python python3 -m pytest -q tests/gpu/test_router.py

Fresh random logits (normal, scale 2) each test; every case against a
float64 reference of Megatron-LM's unfused path (router_reference.py)
computed from the same logits as stored, forward and backward (the
reference's autograd in float64, with the same incoming gradient):
softmax post and pre, sigmoid with and without expert_bias, group-limited
(DeepSeek-V3: 8192 tokens x 256 experts, top-8 of 4 of 8 groups, bias,
scaling 2.5), Mixtral-like (4096 x 8 top-2, 4096 x 64 top-2), 512 experts,
bf16 / fp16 / fp32 logits; the aux-loss scores and the load-balancing loss.
Routing maps must match except on rows whose k-th and (k+1)-th values are
a near tie (f32 vs f64 order, or an exact tie in bf16; at most 1% of
the rows, 10% in bf16), which the
probability checks leave out. Bad input raises naming the argument.
TEJIT_TEST_SEED=N repeats a run.
"""
import pytest

from gpu_test_support import run_seed, seed_per_test, torch

import router_reference as ref  # noqa: E402 - beside this file

import tejit.pytorch as te  # noqa: E402

SEED = run_seed("test_router")
fresh_seed = seed_per_test(SEED)

# Relative to the largest value; the outputs are rounded to logits' dtype.
RTOL = {torch.float32: 2e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
TIE_GAP = {torch.float32: 1e-6, torch.bfloat16: 1e-6, torch.float16: 1e-6}
# The share of rows allowed a near tie at the k-th place. bf16 logits have
# 8-bit mantissas: exact ties between stored values are common (1.7-4.6%
# of the rows in these cases on an H200 run), where tejit takes the lower
# expert and torch.topk either.
TIE_SHARE = {torch.float32: 0.01, torch.bfloat16: 0.1, torch.float16: 0.01}

CASES = [
    # name, tokens, experts, topk, pre, groups, group_topk, scale, function,
    # bias
    ("mixtral", 4096, 8, 2, False, None, None, None, "softmax", False),
    ("mixtral64", 4096, 64, 2, False, None, None, None, "softmax", False),
    ("pre_softmax", 2048, 64, 8, True, None, None, None, "softmax", False),
    ("sigmoid", 2048, 128, 4, False, None, None, None, "sigmoid", False),
    ("sigmoid_top1", 2048, 16, 1, False, None, None, 1.5, "sigmoid", True),
    ("sigmoid_bias", 2048, 128, 6, False, None, None, 2.0, "sigmoid", True),
    ("deepseek_v3", 8192, 256, 8, False, 8, 4, 2.5, "sigmoid", True),
    ("groups_softmax", 2048, 64, 4, True, 8, 2, None, "softmax", False),
    ("wide", 1024, 512, 8, False, 16, 4, None, "sigmoid", True),
]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


# fp16 stores values below 2^-14 as subnormals, 2^-24 apart: rounding
# there costs up to half that spacing whatever the scale (aux-loss
# gradients of ~1e-6 lie there).
ATOL = {torch.float32: 0.0, torch.bfloat16: 0.0, torch.float16: 2.0**-25}


def close(actual, expected, dtype, rows=None):
    actual, expected = actual.double(), expected.double()
    if rows is not None:
        actual, expected = actual[rows], expected[rows]
    scale = expected.abs().max().clamp(min=1e-12)
    excess = ((actual - expected).abs() - ATOL[dtype]).clamp(min=0.0)
    error = excess.max() / scale
    assert error <= RTOL[dtype], f"relative error {error:.3g}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_topk_forward_backward(case, dtype):
    _, tokens, experts, k, pre, groups, group_topk, scale, function, \
        has_bias = case
    logits = (2.0 * torch.randn(tokens, experts, device="cuda")).to(dtype)
    bias = 0.1 * torch.randn(experts, device="cuda") if has_bias else None
    x = logits.clone().requires_grad_()
    probs, routing_map = te.fused_topk_with_score_function(
        x, k, pre, groups, group_topk, scale, function, bias)
    assert probs.dtype == dtype and probs.shape == (tokens, experts)
    assert routing_map.dtype == torch.bool
    assert bool((routing_map.sum(1) == k).all())
    x64 = logits.double().requires_grad_()
    p64, map64, selection = ref.topk_with_score_function(
        x64, k, pre, groups, group_topk, scale, function, bias)
    ties = ref.near_tie_rows(selection, k, TIE_GAP[dtype])
    assert ties.float().mean() <= TIE_SHARE[dtype]
    rows = ~ties
    assert torch.equal(routing_map[rows], map64[rows])
    close(probs, p64, dtype, rows)
    grad = torch.randn(tokens, experts, device="cuda").to(dtype)
    (dx,) = torch.autograd.grad(probs, x, grad)
    (dx64,) = torch.autograd.grad(p64, x64, grad.double())
    assert dx.dtype == dtype
    close(dx, dx64, dtype, rows)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("function", ["softmax", "sigmoid"])
@pytest.mark.parametrize("tokens,experts,k", [(4096, 64, 2),
                                              (8192, 256, 8)])
def test_aux_scores(tokens, experts, k, function, dtype):
    logits = (2.0 * torch.randn(tokens, experts, device="cuda")).to(dtype)
    x = logits.clone().requires_grad_()
    routing_map, scores = te.fused_compute_score_for_moe_aux_loss(
        x, k, function)
    assert scores.dtype == torch.float32
    x64 = logits.double().requires_grad_()
    map64, s64 = ref.scores_for_aux_loss(x64, k, function)
    rows = ~ref.near_tie_rows(s64.detach(), k, 1e-6)
    assert torch.equal(routing_map[rows], map64[rows])
    close(scores, s64, torch.float32)
    grad = torch.randn(tokens, experts, device="cuda")
    (dx,) = torch.autograd.grad(scores, x, grad)
    (dx64,) = torch.autograd.grad(s64, x64, grad.double())
    assert dx.dtype == dtype
    close(dx, dx64, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("count_dtype", [torch.int64, torch.int32,
                                         torch.float32])
def test_aux_loss(dtype, count_dtype):
    tokens, experts, k = 8192, 256, 8
    probs = torch.softmax(torch.randn(tokens, experts, device="cuda"),
                          -1).to(dtype).requires_grad_()
    counts = torch.randint(0, 2 * tokens * k // experts, (experts,),
                           device="cuda").to(count_dtype)
    loss = te.fused_moe_aux_loss(probs, counts, tokens, experts, k, 1e-2)
    assert loss.shape == () and loss.dtype == dtype
    p64 = probs.detach().double().requires_grad_()
    loss64 = ref.aux_loss(p64, counts, tokens, experts, k, 1e-2)
    assert abs(loss.double() - loss64) <= RTOL[dtype] * abs(loss64)
    (dp,) = torch.autograd.grad(loss * 3.0, probs)
    (dp64,) = torch.autograd.grad(loss64 * 3.0, p64)
    close(dp, dp64, dtype)


def test_ties_go_to_the_lower_expert():
    logits = torch.zeros(4, 16, device="cuda", dtype=torch.bfloat16)
    _, routing_map = te.fused_topk_with_score_function(
        logits, 3, False, None, None, None, "softmax", None)
    expected = torch.zeros(4, 16, dtype=torch.bool, device="cuda")
    expected[:, :3] = True
    assert torch.equal(routing_map, expected)


def test_programs_are_cached():
    logits = torch.randn(64, 32, device="cuda")
    for _ in range(3):
        te.fused_topk_with_score_function(logits, 2, False, None, None,
                                          None, "softmax", None)
    from tejit.pytorch import _weight_casts
    keys = [key for key in _weight_casts._programs
            if key[:1] == ("router",) and key[2:6] == ("topk", 64, 32,
                                                       "f32")]
    assert len(keys) == 1


@pytest.mark.parametrize("call,words", [
    (lambda x: te.fused_topk_with_score_function(
        x, 40, False, None, None, None, "softmax", None), ["topk", "40"]),
    (lambda x: te.fused_topk_with_score_function(
        x, 4, False, 3, 1, None, "softmax", None), ["num_groups"]),
    (lambda x: te.fused_topk_with_score_function(
        x, 3, False, 4, 2, None, "sigmoid", None), ["group_topk"]),
    (lambda x: te.fused_topk_with_score_function(
        x[0], 2, False, None, None, None, "softmax", None), ["logits"]),
    (lambda x: te.fused_topk_with_score_function(
        x, 2, False, None, None, None, "sigmoid",
        torch.zeros(5, device="cuda")), ["expert_bias"]),
    (lambda x: te.fused_compute_score_for_moe_aux_loss(x, 2, "gelu"),
     ["score_function"]),
    (lambda x: te.fused_moe_aux_loss(x, torch.zeros(3, device="cuda"), 8,
                                     32, 2, 0.1), ["tokens_per_expert"]),
])
def test_bad_input_names_the_argument(call, words):
    x = torch.randn(8, 32, device="cuda")
    with pytest.raises((ValueError, TypeError)) as caught:
        call(x)
    for word in words:
        assert word in str(caught.value)
