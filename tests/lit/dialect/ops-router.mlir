// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s

// Transformer Engine's MoE router fusions (docs/router.md): group-limited
// sigmoid top-k with an expert bias (DeepSeek-V3) and its gradient, the
// aux-loss scores and their gradient, the load-balancing loss and its
// gradient. Default attributes (no groups, scale 1, softmax, post-softmax)
// are elided.

// CHECK-LABEL: func.func @topk
// CHECK: te.router_topk %arg0 bias(%arg1) {group_topk = 4 : i64, num_groups = 8 : i64, scaling_factor = 2.500000e+00 : f64, score_function = "sigmoid", topk = 8 : i64} : (tensor<16x256xbf16>, tensor<256xf32>) -> (tensor<16x256xbf16>, tensor<16x256xi1>, tensor<16x256xf32>)
// CHECK: te.router_topk %arg0 {topk = 2 : i64, use_pre_softmax = true} : (tensor<16x256xbf16>) -> (tensor<16x256xbf16>, tensor<16x256xi1>, tensor<16x256xf32>)
// CHECK: te.router_topk_bwd %{{.*}}, %{{.*}}, %arg2 {score_function = "sigmoid", topk = 8 : i64} : (tensor<16x256xi1>, tensor<16x256xf32>, tensor<16x256xbf16>) -> tensor<16x256xbf16>
func.func @topk(%logits: tensor<16x256xbf16>, %bias: tensor<256xf32>,
                %grad: tensor<16x256xbf16>) -> tensor<16x256xbf16> {
  %p, %map, %saved = te.router_topk %logits bias(%bias)
      {topk = 8, num_groups = 8, group_topk = 4, scaling_factor = 2.5,
       score_function = "sigmoid"}
      : (tensor<16x256xbf16>, tensor<256xf32>)
        -> (tensor<16x256xbf16>, tensor<16x256xi1>, tensor<16x256xf32>)
  %p2, %map2, %saved2 = te.router_topk %logits
      {topk = 2, use_pre_softmax = true}
      : (tensor<16x256xbf16>)
        -> (tensor<16x256xbf16>, tensor<16x256xi1>, tensor<16x256xf32>)
  %dx = te.router_topk_bwd %map, %saved, %grad
      {topk = 8, score_function = "sigmoid"}
      : (tensor<16x256xi1>, tensor<16x256xf32>, tensor<16x256xbf16>)
        -> tensor<16x256xbf16>
  return %dx : tensor<16x256xbf16>
}

// CHECK-LABEL: func.func @aux
// CHECK: te.router_aux_scores %arg0 {score_function = "sigmoid", topk = 2 : i64} : (tensor<16x64xf16>) -> (tensor<16x64xi1>, tensor<16x64xf32>, tensor<16x64xf32>)
// CHECK: te.router_aux_scores_bwd %{{.*}}, %arg1 {score_function = "sigmoid"} : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf16>
// CHECK: te.router_aux_loss %arg2, %arg3 {coeff = 1.000000e-02 : f64, num_experts = 64 : i64, topk = 2 : i64, total_num_tokens = 16 : i64} : (tensor<16x64xf32>, tensor<64xi64>) -> tensor<1xf32>
// CHECK: te.router_aux_loss_bwd %arg3, %arg4 {coeff = 1.000000e-02 : f64, num_experts = 64 : i64, topk = 2 : i64, total_num_tokens = 16 : i64} : (tensor<64xi64>, tensor<1xf32>) -> tensor<16x64xf32>
func.func @aux(%logits: tensor<16x64xf16>, %grad: tensor<16x64xf32>,
               %probs: tensor<16x64xf32>, %counts: tensor<64xi64>,
               %grad_loss: tensor<1xf32>)
    -> (tensor<16x64xf16>, tensor<1xf32>, tensor<16x64xf32>) {
  %map, %scores, %saved = te.router_aux_scores %logits
      {topk = 2, score_function = "sigmoid"}
      : (tensor<16x64xf16>)
        -> (tensor<16x64xi1>, tensor<16x64xf32>, tensor<16x64xf32>)
  %dx = te.router_aux_scores_bwd %saved, %grad {score_function = "sigmoid"}
      : (tensor<16x64xf32>, tensor<16x64xf32>) -> tensor<16x64xf16>
  %loss = te.router_aux_loss %probs, %counts
      {total_num_tokens = 16, num_experts = 64, topk = 2, coeff = 0.01}
      : (tensor<16x64xf32>, tensor<64xi64>) -> tensor<1xf32>
  %dp = te.router_aux_loss_bwd %counts, %grad_loss
      {total_num_tokens = 16, num_experts = 64, topk = 2, coeff = 0.01}
      : (tensor<64xi64>, tensor<1xf32>) -> tensor<16x64xf32>
  return %dx, %loss, %dp : tensor<16x64xf16>, tensor<1xf32>, tensor<16x64xf32>
}
