// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the MoE router ops (dialects/TERouterVerifiers.cpp,
// docs/router.md): one case per rule.

func.func @logits_rank(%x: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{'logits' must be a bf16, f16 or f32 matrix [tokens, experts], got 'tensor<2x4x8xbf16>'}}
  %p, %m, %s = te.router_topk %x {topk = 2} : (tensor<2x4x8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xi1>, tensor<2x4x8xf32>)
  return
}

// -----

func.func @logits_type(%x: tensor<4x8xf64>) {
  // expected-error @+1 {{'logits' must be a bf16, f16 or f32 matrix}}
  %p, %m, %s = te.router_topk %x {topk = 2} : (tensor<4x8xf64>) -> (tensor<4x8xf64>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @topk_too_big(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{topk must be in [1, 8] (the experts), got 9}}
  %p, %m, %s = te.router_topk %x {topk = 9} : (tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @score_function(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{score_function must be "softmax" or "sigmoid", got "relu"}}
  %p, %m, %s = te.router_topk %x {topk = 2, score_function = "relu"} : (tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @groups_divide(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{num_groups must divide the 8 experts, got 3}}
  %p, %m, %s = te.router_topk %x {topk = 2, num_groups = 3, group_topk = 1} : (tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @group_topk(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{group_topk must be <= num_groups (2), got 4}}
  %p, %m, %s = te.router_topk %x {topk = 4, num_groups = 2, group_topk = 4} : (tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @topk_divisible(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{topk (3) must be divisible by group_topk (2)}}
  %p, %m, %s = te.router_topk %x {topk = 3, num_groups = 4, group_topk = 2} : (tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @per_group(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{topk / group_topk (4) must be <= the experts of a group (2)}}
  %p, %m, %s = te.router_topk %x {topk = 4, num_groups = 4, group_topk = 1} : (tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @bias_softmax(%x: tensor<4x8xbf16>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'expert_bias' is only used with the sigmoid score function}}
  %p, %m, %s = te.router_topk %x bias(%b) {topk = 2} : (tensor<4x8xbf16>, tensor<8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @bias_type(%x: tensor<4x8xbf16>, %b: tensor<8xf16>) {
  // expected-error @+1 {{'expert_bias' must be an f32 or 'bf16' vector [8], got 'tensor<8xf16>'}}
  %p, %m, %s = te.router_topk %x bias(%b) {topk = 2, score_function = "sigmoid"} : (tensor<4x8xbf16>, tensor<8xf16>) -> (tensor<4x8xbf16>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @probs_type(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{'probs' must be 'tensor<4x8xbf16>', got 'tensor<4x8xf32>'}}
  %p, %m, %s = te.router_topk %x {topk = 2} : (tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xi1>, tensor<4x8xf32>)
  return
}

// -----

func.func @map_type(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{'routing_map' must be 'tensor<4x8xi1>', got 'tensor<4x8xi32>'}}
  %p, %m, %s = te.router_topk %x {topk = 2} : (tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xi32>, tensor<4x8xf32>)
  return
}

// -----

func.func @bwd_saved(%m: tensor<4x8xi1>, %s: tensor<4x8xbf16>, %g: tensor<4x8xbf16>) {
  // expected-error @+1 {{'saved' must be 'tensor<4x8xf32>', got 'tensor<4x8xbf16>'}}
  %d = te.router_topk_bwd %m, %s, %g {topk = 2} : (tensor<4x8xi1>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  return
}

// -----

func.func @aux_scores_topk(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{topk must be in [1, 8] (the experts), got 0}}
  %m, %s, %v = te.router_aux_scores %x {topk = 0} : (tensor<4x8xf32>) -> (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @aux_scores_bwd_grad(%s: tensor<4x8xf32>, %g: tensor<4x8xbf16>) {
  // expected-error @+1 {{'grad_scores' must be 'tensor<4x8xf32>', got 'tensor<4x8xbf16>'}}
  %d = te.router_aux_scores_bwd %s, %g : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  return
}

// -----

func.func @aux_loss_counts(%p: tensor<4x8xf32>, %c: tensor<6xi64>) {
  // expected-error @+1 {{'tokens_per_expert' must be an i32, i64, f32 or bf16 vector [8] (one per column of the probs), got 'tensor<6xi64>'}}
  %l = te.router_aux_loss %p, %c {total_num_tokens = 4, num_experts = 8, topk = 2, coeff = 0.01} : (tensor<4x8xf32>, tensor<6xi64>) -> tensor<1xf32>
  return
}

// -----

func.func @aux_loss_tokens(%p: tensor<4x8xf32>, %c: tensor<8xi64>) {
  // expected-error @+1 {{total_num_tokens must be >= 1, got 0}}
  %l = te.router_aux_loss %p, %c {total_num_tokens = 0, num_experts = 8, topk = 2, coeff = 0.01} : (tensor<4x8xf32>, tensor<8xi64>) -> tensor<1xf32>
  return
}

// -----

func.func @aux_loss_type(%p: tensor<4x8xbf16>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'loss' must be 'tensor<1xbf16>', got 'tensor<1xf32>'}}
  %l = te.router_aux_loss %p, %c {total_num_tokens = 4, num_experts = 8, topk = 2, coeff = 0.01} : (tensor<4x8xbf16>, tensor<8xi32>) -> tensor<1xf32>
  return
}

// -----

func.func @aux_loss_bwd_grad(%c: tensor<8xi64>, %g: tensor<2xf32>) {
  // expected-error @+1 {{'grad_loss' must be 'tensor<1xf32>', got 'tensor<2xf32>'}}
  %d = te.router_aux_loss_bwd %c, %g {total_num_tokens = 4, num_experts = 8, topk = 2, coeff = 0.01} : (tensor<8xi64>, tensor<2xf32>) -> tensor<4x8xf32>
  return
}
