"""Transformer Engine's MoE router fusions (TE's module of that name:
fused_topk_with_score_function, fused_compute_score_for_moe_aux_loss and
fused_moe_aux_loss, which Megatron-LM calls under --moe-router-fusion), on
tejit's generated kernels. docs/router.md is the contract.

Each function runs a small tejit program (te IR from _router_ir.py),
compiled on first use per (op, shape, dtype, device, options) and kept
for the process: make the first call outside a CUDA-graph capture. A
warp routes a token; everything is computed in float32. The forward
saves a float32 [T, E] tensor (the scores the backward needs) instead of
the logits. Top-k ties go to the lower expert index."""
import torch

from ._dynamo import outside_torch_compile
from ._router_ir import (aux_loss_backward_ir, aux_loss_ir,
                         aux_scores_backward_ir, aux_scores_ir,
                         check_aux_loss_options, check_logits_shape,
                         check_score_function, check_topk,
                         check_topk_options, topk_backward_ir,
                         topk_forward_ir)
from ._weight_casts import _compiled

__all__ = ["fused_topk_with_score_function",
           "fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss"]

_ELEMENTS = {torch.bfloat16: "bf16", torch.float16: "f16",
             torch.float32: "f32"}
_COUNTS = {torch.int32: "i32", torch.int64: "i64", torch.float32: "f32",
           torch.bfloat16: "bf16"}


def _matrix(tensor, function, name):
    """`tensor` as a program reads it: a contiguous [T, E] CUDA matrix of
    bf16, fp16 or fp32; (tensor, IR element)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tejit: {function}'s {name} must be a tensor, got "
                        f"{type(tensor).__name__}")
    element = _ELEMENTS.get(tensor.dtype)
    if element is None:
        raise TypeError(f"tejit: {function}'s {name} must be bfloat16, "
                        f"float16 or float32, got {tensor.dtype}")
    check_logits_shape(tuple(tensor.shape), function, name)
    if tensor.device.type != "cuda":
        raise ValueError(f"tejit: {function} runs on a CUDA device; {name} "
                         f"is on {tensor.device}")
    return tensor.detach().contiguous(), element


def _run(key, ir, device, inputs, outputs):
    program = _compiled(("router", device.index) + key, ir, device)
    program.forward(torch.cuda.current_stream(device), inputs, outputs)


def _backward(kind, ir, key, inputs, output):
    """Runs the backward program `kind` (from `ir(*key)`) into `output`
    unless there are no tokens (key[0])."""
    if key[0]:
        _run((kind,) + key, lambda: ir(*key), output.device, inputs,
             [output])
    return output


def _empty(shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


class _TopkFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, expert_bias, options):
        x, element = _matrix(logits, "fused_topk_with_score_function",
                             "logits")
        tokens, experts = x.shape
        device = x.device
        inputs, bias_element = [x], None
        if expert_bias is not None:
            bias = expert_bias.detach()
            if bias.dtype not in (torch.float32, x.dtype):
                bias = bias.float()
            if bias.device != device:
                raise ValueError(f"tejit: fused_topk_with_score_function's "
                                 f"expert_bias must be on logits' device "
                                 f"({device}), got {bias.device}")
            bias_element = _ELEMENTS[bias.dtype]
            inputs.append(bias.contiguous())
        probs = _empty((tokens, experts), x.dtype, device)
        routing_map = _empty((tokens, experts), torch.bool, device)
        saved = _empty((tokens, experts), torch.float32, device)
        if tokens:
            key = (tokens, experts, element) + options + (bias_element,)
            _run(("topk",) + key, lambda: topk_forward_ir(*key), device,
                 inputs, [probs, routing_map, saved])
        ctx.mark_non_differentiable(routing_map)
        ctx.save_for_backward(routing_map, saved)
        ctx.key = (tokens, experts, element, options[0], options[1],
                   options[4], options[5])
        return probs, routing_map

    @staticmethod
    def backward(ctx, grad_probs, _):
        routing_map, saved = ctx.saved_tensors
        key = ctx.key
        tokens, experts = key[0], key[1]
        grad = grad_probs.detach().to(saved.device)
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16,
                 "f32": torch.float32}[key[2]]
        grad = grad.to(dtype).contiguous()
        grad_logits = _empty((tokens, experts), dtype, saved.device)
        return (_backward("topk_backward", topk_backward_ir, key,
                          [routing_map, saved, grad], grad_logits), None,
                None)


@outside_torch_compile
def fused_topk_with_score_function(logits, topk, use_pre_softmax,
                                   num_groups, group_topk, scaling_factor,
                                   score_function, expert_bias):
    """Top-k routing of `logits` [num_tokens, num_experts] (bf16, fp16 or
    fp32), as TE's: (probs [T, E] in logits' dtype, 0 off the chosen
    experts; routing_map bool [T, E]). score_function "softmax" (softmax
    over the chosen logits, or with use_pre_softmax over all before the
    top-k) or "sigmoid" (normalized over the chosen when topk > 1;
    expert_bias [E], added for the selection only). num_groups /
    group_topk limit the choice to the group_topk groups whose top
    (topk / group_topk) scores sum highest; probs are multiplied by
    scaling_factor. Differentiable in logits."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"tejit: fused_topk_with_score_function's logits "
                        f"must be a tensor, got {type(logits).__name__}")
    shape = check_logits_shape(tuple(logits.shape),
                               "fused_topk_with_score_function")
    bias_shape = None if expert_bias is None else tuple(expert_bias.shape)
    options = check_topk_options(shape[1], topk, use_pre_softmax,
                                 num_groups, group_topk, scaling_factor,
                                 score_function, bias_shape)
    return _TopkFunction.apply(logits, expert_bias, options)


class _AuxScoresFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, topk, score_function):
        x, element = _matrix(logits, "fused_compute_score_for_moe_aux_loss",
                             "logits")
        tokens, experts = x.shape
        device = x.device
        routing_map = _empty((tokens, experts), torch.bool, device)
        scores = _empty((tokens, experts), torch.float32, device)
        saved = _empty((tokens, experts), torch.float32, device)
        key = (tokens, experts, element, topk, score_function)
        if tokens:
            _run(("aux_scores",) + key, lambda: aux_scores_ir(*key), device,
                 [x], [routing_map, scores, saved])
        ctx.mark_non_differentiable(routing_map)
        ctx.save_for_backward(saved)
        ctx.key = (tokens, experts, element, score_function)
        ctx.dtype = x.dtype
        return routing_map, scores

    @staticmethod
    def backward(ctx, _, grad_scores):
        (saved,) = ctx.saved_tensors
        key = ctx.key
        grad = grad_scores.detach().to(torch.float32).contiguous()
        grad_logits = _empty(saved.shape, ctx.dtype, saved.device)
        return (_backward("aux_scores_backward", aux_scores_backward_ir, key,
                          [saved, grad], grad_logits), None, None)


@outside_torch_compile
def fused_compute_score_for_moe_aux_loss(logits, topk, score_function):
    """The scores of the load-balancing loss, as TE's: (routing_map bool
    [T, E] of the top `topk` scores, scores float32 [T, E]) with scores =
    softmax(logits), or sigmoid(logits) normalized over the experts.
    Differentiable in logits."""
    function = "fused_compute_score_for_moe_aux_loss"
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"tejit: {function}'s logits must be a tensor, got "
                        f"{type(logits).__name__}")
    _, experts = check_logits_shape(tuple(logits.shape), function)
    check_topk(topk, experts, function)
    check_score_function(score_function, function)
    return _AuxScoresFunction.apply(logits, topk, score_function)


class _AuxLossFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, probs, tokens_per_expert, options):
        p, element = _matrix(probs, "fused_moe_aux_loss", "probs")
        counts = tokens_per_expert.detach()
        if counts.dtype not in _COUNTS:
            counts = counts.to(torch.float32)
        if counts.device != p.device:
            raise ValueError(f"tejit: fused_moe_aux_loss's tokens_per_expert "
                             f"must be on probs' device ({p.device}), got "
                             f"{counts.device}")
        counts = counts.contiguous()
        key = (p.shape[0], p.shape[1], element, _COUNTS[counts.dtype]) \
            + options
        loss = torch.zeros(1, dtype=p.dtype, device=p.device)
        if p.shape[0]:
            _run(("aux_loss",) + key, lambda: aux_loss_ir(*key), p.device,
                 [p, counts], [loss])
        ctx.save_for_backward(counts)
        ctx.key = key
        ctx.dtype = p.dtype
        return loss.view(())

    @staticmethod
    def backward(ctx, grad_loss):
        (counts,) = ctx.saved_tensors
        key = ctx.key
        grad = grad_loss.detach().to(ctx.dtype).reshape(1).contiguous()
        grad_probs = _empty((key[0], key[1]), ctx.dtype, counts.device)
        return (_backward("aux_loss_backward", aux_loss_backward_ir, key,
                          [counts, grad], grad_probs), None, None)


@outside_torch_compile
def fused_moe_aux_loss(probs, tokens_per_expert, total_num_tokens,
                       num_experts, topk, coeff):
    """The switch load-balancing loss, as TE's: a scalar in probs' dtype,
    sum_e tokens_per_expert[e] sum_t probs[t, e] * num_experts * coeff /
    (topk * total_num_tokens^2). probs [T, C] (bf16, fp16 or fp32; C may be
    this rank's part of num_experts), tokens_per_expert [C] (int32, int64,
    fp32 or bf16). Differentiable in probs."""
    if not isinstance(probs, torch.Tensor) or not isinstance(
            tokens_per_expert, torch.Tensor):
        raise TypeError("tejit: fused_moe_aux_loss takes tensors probs and "
                        "tokens_per_expert")
    if isinstance(total_num_tokens, torch.Tensor):
        # TE's graph-safe path takes a device scalar; tejit folds the
        # constant into the program, so it reads it once here.
        total_num_tokens = int(total_num_tokens.item())
    options = check_aux_loss_options(tuple(probs.shape),
                                     tuple(tokens_per_expert.shape),
                                     total_num_tokens, num_experts, topk,
                                     coeff)[2:]
    return _AuxLossFunction.apply(probs, tokens_per_expert, options)
