//===- TERouterOps.td - MoE router ops of te ----------------*- tablegen -*-===//
//
// Transformer Engine's MoE router fusions (transformer_engine.pytorch's
// fused_topk_with_score_function, fused_compute_score_for_moe_aux_loss and
// fused_moe_aux_loss; docs/router.md). A token is a row of the router's
// logits [T, E] (bf16, f16 or f32); everything is computed in f32 and the
// probabilities and gradients are written in the logits' type. Top-k picks
// the largest values, a tie going to the lower expert index. The forward
// ops save an f32 [T, E] tensor (`saved`) that their backward reads
// instead of the logits.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECT_TE_ROUTER_OPS_TD
#define TEJIT_DIALECT_TE_ROUTER_OPS_TD

include "TEPrimitiveOps.td"

def TE_RouterTopkOp : TE_PrimOp<"router_topk"> {
  let summary = "Top-k routing of each token with a score function";
  let description = [{
    Per token row x of `logits` [T, E], with s = the score function:
    - softmax, `use_pre_softmax`: s = softmax(x) over all experts, the top
      `topk` of s chosen, p = s at the chosen experts;
    - softmax, not pre: the top `topk` of x chosen, p = softmax of the
      chosen logits;
    - sigmoid: s = sigmoid(x), chosen by s + `expert_bias` (the bias only
      selects), p = s / (sum of the chosen s + 1e-20) when topk > 1, else s.
    With `group_topk` > 0 the E experts form `num_groups` equal groups; a
    group's score is the sum of its top (topk / group_topk) selection
    values, and only the experts of the `group_topk` best groups may be
    chosen. Results: `probs` [T, E] (logits' type) = scaling_factor * p at
    the chosen experts, 0 elsewhere; `routing_map` i1 [T, E]; `saved` f32
    [T, E] = s (pre-softmax and sigmoid) or the chosen softmax (else, 0 at
    the others).

    ```mlir
    %p, %map, %saved = te.router_topk %logits bias(%b)
        {topk = 8, num_groups = 8, group_topk = 4, score_function = "sigmoid",
         scaling_factor = 2.5}
        : (tensor<8192x256xbf16>, tensor<256xf32>)
          -> (tensor<8192x256xbf16>, tensor<8192x256xi1>, tensor<8192x256xf32>)
    ```
  }];
  let arguments = (ins TE_AnyTensor:$logits,
                   Optional<TE_AnyTensor>:$expert_bias,
                   I64Attr:$topk,
                   DefaultValuedAttr<BoolAttr, "false">:$use_pre_softmax,
                   DefaultValuedAttr<I64Attr, "0">:$num_groups,
                   DefaultValuedAttr<I64Attr, "0">:$group_topk,
                   DefaultValuedAttr<F64Attr, "1.0">:$scaling_factor,
                   DefaultValuedAttr<StrAttr, "\"softmax\"">:$score_function);
  let results = (outs TE_AnyTensor:$probs, TE_AnyTensor:$routing_map,
                 TE_AnyTensor:$saved);
  let assemblyFormat = [{
    $logits (`bias` `(` $expert_bias^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def TE_RouterTopkBwdOp : TE_PrimOp<"router_topk_bwd"> {
  let summary = "Gradient of te.router_topk with respect to the logits";
  let description = [{
    From the forward's `routing_map` and `saved` and the probabilities'
    gradient `grad_probs` (logits' type), per row, with g = scaling_factor
    * grad_probs at the chosen experts (0 elsewhere): sigmoid normalization
    (topk > 1) g_i = g_i / (S + ε) - sum_j g_j s_j / (S + ε)^2 (S, sums over
    the chosen); post-softmax g_i = s_i (g_i - sum_j g_j s_j); then
    pre-softmax g_i = s_i (g_i - sum_j g_j s_j) over all experts, sigmoid
    g_i = g_i s_i (1 - s_i). `grad_logits` has grad_probs' type.
  }];
  let arguments = (ins TE_AnyTensor:$routing_map, TE_AnyTensor:$saved,
                   TE_AnyTensor:$grad_probs,
                   I64Attr:$topk,
                   DefaultValuedAttr<BoolAttr, "false">:$use_pre_softmax,
                   DefaultValuedAttr<F64Attr, "1.0">:$scaling_factor,
                   DefaultValuedAttr<StrAttr, "\"softmax\"">:$score_function);
  let results = (outs TE_AnyTensor:$grad_logits);
  let assemblyFormat = [{
    $routing_map `,` $saved `,` $grad_probs attr-dict `:`
    functional-type(operands, results)
  }];
}

def TE_RouterAuxScoresOp : TE_PrimOp<"router_aux_scores"> {
  let summary = "The scores and top-k map of the load-balancing loss";
  let description = [{
    Per token row x: `scores` f32 = softmax(x), or sigmoid(x) / (sum over
    the experts of sigmoid(x) + 1e-20); `routing_map` i1 marks the top
    `topk` scores; `saved` f32 = softmax(x) or sigmoid(x), for the backward.
  }];
  let arguments = (ins TE_AnyTensor:$logits, I64Attr:$topk,
                   DefaultValuedAttr<StrAttr, "\"softmax\"">:$score_function);
  let results = (outs TE_AnyTensor:$routing_map, TE_AnyTensor:$scores,
                 TE_AnyTensor:$saved);
  let assemblyFormat = [{
    $logits attr-dict `:` functional-type(operands, results)
  }];
}

def TE_RouterAuxScoresBwdOp : TE_PrimOp<"router_aux_scores_bwd"> {
  let summary = "Gradient of te.router_aux_scores with respect to the logits";
  let description = [{
    From `saved` (s) and `grad_scores` (g, f32): softmax g_i s_i - s_i sum_j
    g_j s_j; sigmoid (g_i / (S + ε) - sum_j g_j s_j / (S + ε)^2) s_i (1 -
    s_i) with S = sum_j s_j. `grad_logits` is bf16, f16 or f32 (the
    logits' type).
  }];
  let arguments = (ins TE_AnyTensor:$saved, TE_AnyTensor:$grad_scores,
                   DefaultValuedAttr<StrAttr, "\"softmax\"">:$score_function);
  let results = (outs TE_AnyTensor:$grad_logits);
  let assemblyFormat = [{
    $saved `,` $grad_scores attr-dict `:` functional-type(operands, results)
  }];
}

def TE_RouterAuxLossOp : TE_PrimOp<"router_aux_loss"> {
  let summary = "The switch load-balancing loss";
  let description = [{
    loss = C sum_e tokens_per_expert[e] sum_t probs[t, e], with C =
    num_experts coeff / (topk total_num_tokens^2). `probs` [T, C'] (bf16,
    f16 or f32; C' may be a part of the experts), `tokens_per_expert` [C']
    (i32, i64, f32 or bf16); `loss` [1] has probs' type, summed in f32 in a
    fixed order.
  }];
  let arguments = (ins TE_AnyTensor:$probs, TE_AnyTensor:$tokens_per_expert,
                   I64Attr:$total_num_tokens, I64Attr:$num_experts,
                   I64Attr:$topk, F64Attr:$coeff);
  let results = (outs TE_AnyTensor:$loss);
  let assemblyFormat = [{
    $probs `,` $tokens_per_expert attr-dict `:`
    functional-type(operands, results)
  }];
}

def TE_RouterAuxLossBwdOp : TE_PrimOp<"router_aux_loss_bwd"> {
  let summary = "Gradient of te.router_aux_loss with respect to the probs";
  let description = [{
    grad_probs[t, e] = C tokens_per_expert[e] grad_loss[0] (C as in
    te.router_aux_loss); `grad_loss` [1] and `grad_probs` [T, C'] have the
    probs' type.
  }];
  let arguments = (ins TE_AnyTensor:$tokens_per_expert, TE_AnyTensor:$grad_loss,
                   I64Attr:$total_num_tokens,
                   I64Attr:$num_experts, I64Attr:$topk, F64Attr:$coeff);
  let results = (outs TE_AnyTensor:$grad_probs);
  let assemblyFormat = [{
    $tokens_per_expert `,` $grad_loss attr-dict `:`
    functional-type(operands, results)
  }];
}

#endif // TEJIT_DIALECT_TE_ROUTER_OPS_TD
