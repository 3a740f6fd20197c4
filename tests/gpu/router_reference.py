"""A float64 reference of Megatron-LM's unfused MoE router
(megatron/core/transformer/moe/moe_utils.py: topk_routing_with_score_function
with group_limited_topk, compute_routing_scores_for_aux_loss,
switch_load_balancing_loss_func), written independently for
tests/gpu/test_router.py and benchmarks/gpu/bench_router.py. Top-k is a
stable descending sort (a tie goes to the lower expert index, as tejit's).
Differentiable with torch.autograd in the logits / probs."""
import torch


def topk(values, k):
    """(values, indices) of the k largest along the last dim, ties to the
    lower index."""
    order = torch.sort(values, dim=-1, descending=True, stable=True)[1]
    indices = order[..., :k]
    return torch.gather(values, -1, indices), indices


def _group_limited(scores, k, num_groups, group_topk):
    tokens, experts = scores.shape
    grouped = scores.view(tokens, num_groups, experts // num_groups)
    group_scores = topk(grouped, k // group_topk)[0].sum(dim=-1)
    kept = topk(group_scores, group_topk)[1]
    mask = torch.zeros_like(group_scores, dtype=torch.bool)
    mask.scatter_(1, kept, True)
    mask = mask.unsqueeze(-1).expand_as(grouped).reshape(tokens, experts)
    return topk(scores.masked_fill(~mask, float("-inf")), k)


def _choose(scores, k, num_groups, group_topk):
    if group_topk:
        return _group_limited(scores, k, num_groups, group_topk)
    return topk(scores, k)


def topk_with_score_function(logits, k, use_pre_softmax=False,
                             num_groups=None, group_topk=None,
                             scaling_factor=None, score_function="softmax",
                             expert_bias=None):
    """(probs [T, E], routing_map [T, E], selection [T, E]) in float64:
    `selection` is what the top-k was taken over (for near-tie checks)."""
    x = logits.double()
    if score_function == "softmax":
        if use_pre_softmax:
            scores = torch.softmax(x, dim=-1)
            selection = scores
            probs, indices = _choose(scores, k, num_groups, group_topk)
        else:
            selection = x
            chosen, indices = _choose(x, k, num_groups, group_topk)
            probs = torch.softmax(chosen, dim=-1)
    else:
        scores = torch.sigmoid(x)
        selection = scores
        if expert_bias is not None:
            selection = scores + expert_bias.double()
            indices = _choose(selection, k, num_groups, group_topk)[1]
            chosen = torch.gather(scores, 1, indices)
        else:
            chosen, indices = _choose(scores, k, num_groups, group_topk)
        probs = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) \
            if k > 1 else chosen
    if scaling_factor:
        probs = probs * scaling_factor
    dense = torch.zeros_like(x).scatter(1, indices, probs)
    routing_map = torch.zeros_like(x, dtype=torch.bool).scatter(
        1, indices, True)
    return dense, routing_map, selection.detach()


def scores_for_aux_loss(logits, k, score_function):
    """(routing_map, scores) in float64."""
    x = logits.double()
    if score_function == "softmax":
        scores = torch.softmax(x, dim=-1)
    else:
        scores = torch.sigmoid(x)
        scores = scores / (scores.sum(-1, keepdim=True) + 1e-20)
    indices = topk(scores, k)[1]
    routing_map = torch.zeros_like(x, dtype=torch.bool).scatter(
        1, indices, True)
    return routing_map, scores


def aux_loss(probs, tokens_per_expert, total_num_tokens, num_experts, k,
             coeff):
    """Switch load-balancing loss in float64."""
    per_expert = probs.double().sum(dim=0)
    constant = num_experts * coeff / (k * total_num_tokens ** 2)
    return (per_expert * tokens_per_expert.double()).sum() * constant


def near_tie_rows(selection, k, gap):
    """Rows whose k-th and (k+1)-th selection values are within `gap`
    (relative): f32 and f64 may order them differently."""
    if k >= selection.shape[1]:
        return torch.zeros(selection.shape[0], dtype=torch.bool,
                           device=selection.device)
    values = torch.sort(selection, dim=-1, descending=True)[0]
    finite = values.clamp(min=-1e30)
    a, b = finite[:, k - 1], finite[:, k]
    return (a - b).abs() <= gap * (1 + a.abs())
