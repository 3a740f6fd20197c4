"""The te IR of tejit.pytorch.router's programs (docs/router.md), and the
checks of their arguments. Imports neither torch nor its package, so that
tests without PyTorch load it (tests/python/torch_free.py).

Every program is compiled per shape, dtype and option set:
  - @router_topk(logits[, expert_bias]) -> probs, routing_map, saved and
    @router_topk_backward(routing_map, saved, grad_probs) -> grad_logits;
  - @router_aux_scores(logits) -> routing_map, scores, saved and
    @router_aux_scores_backward(saved, grad_scores) -> grad_logits;
  - @router_aux_loss(probs, tokens_per_expert) -> aux_loss [1] and
    @router_aux_loss_backward(tokens_per_expert, grad_loss) -> grad_probs.
`saved` (f32, the logits' shape) is what the backward reads instead of
the logits."""
from tejit._ir_text import f64 as _float
from tejit._ir_text import function as _function
from tejit._ir_text import tensor_type as _tensor


ELEMENT_TYPES = ("bf16", "f16", "f32")
COUNT_TYPES = ("i32", "i64", "f32", "bf16")
SCORE_FUNCTIONS = ("softmax", "sigmoid")


def _int(value, function, name, minimum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"tejit: {function}'s {name} must be an int, got "
                        f"{type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"tejit: {function}'s {name} must be >= {minimum}, "
                         f"got {value}")
    return value


def check_logits_shape(shape, function, name="logits"):
    """(tokens, experts) of a [tokens, experts] matrix; ValueError naming
    `name` otherwise."""
    if len(shape) != 2:
        raise ValueError(f"tejit: {function}'s {name} must be a 2-D "
                         f"[num_tokens, num_experts] tensor, got shape "
                         f"{tuple(shape)}")
    if shape[1] < 1:
        raise ValueError(f"tejit: {function}'s {name} must have at least one "
                         f"expert, got shape {tuple(shape)}")
    return tuple(shape)


def check_score_function(score_function, function):
    if score_function not in SCORE_FUNCTIONS:
        raise ValueError(f"tejit: {function}'s score_function must be "
                         f"'softmax' or 'sigmoid', got {score_function!r}")
    return score_function


def check_topk(topk, experts, function):
    _int(topk, function, "topk", 1)
    if topk > experts:
        raise ValueError(f"tejit: {function}'s topk ({topk}) must be <= the "
                         f"number of experts ({experts})")
    return topk


def check_topk_options(experts, topk, use_pre_softmax, num_groups,
                       group_topk, scaling_factor, score_function,
                       bias_shape):
    """The options of fused_topk_with_score_function as the IR takes them:
    (topk, use_pre_softmax, num_groups, group_topk, scaling_factor,
    score_function); ValueError/TypeError naming the argument."""
    function = "fused_topk_with_score_function"
    check_topk(topk, experts, function)
    check_score_function(score_function, function)
    groups = 0 if num_groups is None else _int(num_groups, function,
                                               "num_groups", 0)
    kept = 0 if group_topk is None else _int(group_topk, function,
                                             "group_topk", 0)
    if kept:
        if groups < 1 or experts % groups:
            raise ValueError(f"tejit: {function}'s num_groups ({num_groups}) "
                             f"must divide the number of experts "
                             f"({experts})")
        if kept > groups:
            raise ValueError(f"tejit: {function}'s group_topk ({kept}) must "
                             f"be <= num_groups ({groups})")
        if topk % kept:
            raise ValueError(f"tejit: {function}'s topk ({topk}) must be "
                             f"divisible by group_topk ({kept})")
        if topk // kept > experts // groups:
            raise ValueError(f"tejit: {function}'s topk / group_topk "
                             f"({topk // kept}) must be <= the experts of a "
                             f"group ({experts // groups})")
    if scaling_factor is None:
        scale = 1.0
    elif isinstance(scaling_factor, bool) or not isinstance(
            scaling_factor, (int, float)):
        raise TypeError(f"tejit: {function}'s scaling_factor must be a "
                        f"float or None, got {type(scaling_factor).__name__}")
    else:
        scale = float(scaling_factor)
    if bias_shape is not None:
        if score_function != "sigmoid":
            raise ValueError(f"tejit: {function}'s expert_bias is only used "
                             f"with score_function='sigmoid'")
        if tuple(bias_shape) != (experts,):
            raise ValueError(f"tejit: {function}'s expert_bias must have "
                             f"shape ({experts},) (one per expert), got "
                             f"{tuple(bias_shape)}")
    return (topk, bool(use_pre_softmax), groups if kept else 0, kept, scale,
            score_function)


def check_aux_loss_options(probs_shape, counts_shape, total_num_tokens,
                           num_experts, topk, coeff):
    """(rows, columns, total_num_tokens, num_experts, topk, coeff) of
    fused_moe_aux_loss; ValueError/TypeError naming the argument."""
    function = "fused_moe_aux_loss"
    rows, columns = check_logits_shape(probs_shape, function, "probs")
    if tuple(counts_shape) != (columns,):
        raise ValueError(f"tejit: {function}'s tokens_per_expert must have "
                         f"shape ({columns},) (one per column of probs), got "
                         f"{tuple(counts_shape)}")
    _int(total_num_tokens, function, "total_num_tokens", 1)
    _int(num_experts, function, "num_experts", 1)
    check_topk(topk, num_experts, function)
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)):
        raise TypeError(f"tejit: {function}'s coeff must be a float, got "
                        f"{type(coeff).__name__}")
    return rows, columns, total_num_tokens, num_experts, topk, float(coeff)


def _score_attributes(score_function):
    return f'score_function = "{score_function}"'


def topk_forward_ir(tokens, experts, element, topk, use_pre_softmax,
                    num_groups, group_topk, scaling_factor, score_function,
                    bias_element=None):
    """@router_topk(logits[, expert_bias]) -> probs, routing_map, saved."""
    logits = _tensor((tokens, experts), element)
    routing_map = _tensor((tokens, experts), "i1")
    saved = _tensor((tokens, experts), "f32")
    arguments = [("logits", logits)]
    bias = ""
    if bias_element is not None:
        arguments.append(("expert_bias", _tensor((experts,), bias_element)))
        bias = " bias(%expert_bias)"
    attributes = [f"topk = {topk}", f"use_pre_softmax = "
                  f"{'true' if use_pre_softmax else 'false'}",
                  f"scaling_factor = {_float(scaling_factor)}",
                  _score_attributes(score_function)]
    if group_topk:
        attributes += [f"num_groups = {num_groups}",
                       f"group_topk = {group_topk}"]
    types = ", ".join(t for _, t in arguments)
    body = [f"%probs, %map, %saved = te.router_topk %logits{bias} "
            f"{{{', '.join(attributes)}}} : ({types}) -> ({logits}, "
            f"{routing_map}, {saved})"]
    return _function("router_topk", arguments, body,
                     [("%probs", logits, "probs"),
                      ("%map", routing_map, "routing_map"),
                      ("%saved", saved, "saved")])


def topk_backward_ir(tokens, experts, element, topk, use_pre_softmax,
                     scaling_factor, score_function):
    """@router_topk_backward(routing_map, saved, grad_probs) ->
    grad_logits."""
    grad = _tensor((tokens, experts), element)
    arguments = [("routing_map", _tensor((tokens, experts), "i1")),
                 ("saved", _tensor((tokens, experts), "f32")),
                 ("grad_probs", grad)]
    types = ", ".join(t for _, t in arguments)
    body = [f"%grad = te.router_topk_bwd %routing_map, %saved, %grad_probs "
            f"{{topk = {topk}, use_pre_softmax = "
            f"{'true' if use_pre_softmax else 'false'}, scaling_factor = "
            f"{_float(scaling_factor)}, {_score_attributes(score_function)}}}"
            f" : ({types}) -> {grad}"]
    return _function("router_topk_backward", arguments, body,
                     [("%grad", grad, "grad_logits")])


def aux_scores_ir(tokens, experts, element, topk, score_function):
    """@router_aux_scores(logits) -> routing_map, scores, saved."""
    logits = _tensor((tokens, experts), element)
    routing_map = _tensor((tokens, experts), "i1")
    f32 = _tensor((tokens, experts), "f32")
    body = [f"%map, %scores, %saved = te.router_aux_scores %logits "
            f"{{topk = {topk}, {_score_attributes(score_function)}}} : "
            f"({logits}) -> ({routing_map}, {f32}, {f32})"]
    return _function("router_aux_scores", [("logits", logits)], body,
                     [("%map", routing_map, "routing_map"),
                      ("%scores", f32, "scores"), ("%saved", f32, "saved")])


def aux_scores_backward_ir(tokens, experts, element, score_function):
    """@router_aux_scores_backward(saved, grad_scores) -> grad_logits."""
    f32 = _tensor((tokens, experts), "f32")
    grad = _tensor((tokens, experts), element)
    body = [f"%grad = te.router_aux_scores_bwd %saved, %grad_scores "
            f"{{{_score_attributes(score_function)}}} : ({f32}, {f32}) -> "
            f"{grad}"]
    return _function("router_aux_scores_backward",
                     [("saved", f32), ("grad_scores", f32)], body,
                     [("%grad", grad, "grad_logits")])


def _loss_attributes(total_num_tokens, num_experts, topk, coeff):
    return (f"total_num_tokens = {total_num_tokens}, num_experts = "
            f"{num_experts}, topk = {topk}, coeff = {_float(coeff)}")


def _loss_function(name, op, operands, arguments, results, attributes):
    """A function of one loss op: `arguments` [(name, type)], `results`
    [(ssa, type, te.name)]; the op's operands are `operands`."""
    types = ", ".join(t for n, t in arguments if n in operands)
    values = ", ".join(f"%{n}" for n in operands)
    ssa, result_type, _ = results[0]
    body = [f"{ssa} = te.{op} {values} {{{attributes}}} : ({types}) -> "
            f"{result_type}"]
    return _function(name, arguments, body, results)


def aux_loss_ir(rows, columns, element, count_element, total_num_tokens,
                num_experts, topk, coeff):
    """@router_aux_loss(probs, tokens_per_expert) -> aux_loss [1]."""
    counts = ("tokens_per_expert", _tensor((columns,), count_element))
    return _loss_function(
        "router_aux_loss", "router_aux_loss",
        ["probs", "tokens_per_expert"],
        [("probs", _tensor((rows, columns), element)), counts],
        [("%loss", _tensor((1,), element), "aux_loss")],
        _loss_attributes(total_num_tokens, num_experts, topk, coeff))


def aux_loss_backward_ir(rows, columns, element, count_element,
                         total_num_tokens, num_experts, topk, coeff):
    """@router_aux_loss_backward(tokens_per_expert, grad_loss) ->
    grad_probs."""
    counts = ("tokens_per_expert", _tensor((columns,), count_element))
    return _loss_function(
        "router_aux_loss_backward", "router_aux_loss_bwd",
        ["tokens_per_expert", "grad_loss"],
        [counts, ("grad_loss", _tensor((1,), element))],
        [("%grad", _tensor((rows, columns), element), "grad_probs")],
        _loss_attributes(total_num_tokens, num_experts, topk, coeff))
