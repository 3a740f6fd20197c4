// The programs tejit.pytorch.router compiles (python/tejit/pytorch/_router_ir.py,
// docs/router.md), written by it: Mixtral-like top-2 softmax, pre-softmax
// top-8, DeepSeek-V3 (256 experts, 8 groups of which 4, sigmoid, expert
// bias, scaling), sigmoid top-1, 1000 experts (bf16 bias), 512 experts in
// 16 groups; the aux-loss scores and the load-balancing loss for each
// tokens_per_expert type. RouterEmitTest compiles every kernel with NVRTC.

func.func @mixtral_fwd(%logits: tensor<100x8xbf16> {te.name = "logits"}) -> (tensor<100x8xbf16> {te.name = "probs"}, tensor<100x8xi1> {te.name = "routing_map"}, tensor<100x8xf32> {te.name = "saved"}) {
  %probs, %map, %saved = te.router_topk %logits {topk = 2, use_pre_softmax = false, scaling_factor = 1.00000000000000000e+00, score_function = "softmax"} : (tensor<100x8xbf16>) -> (tensor<100x8xbf16>, tensor<100x8xi1>, tensor<100x8xf32>)
  return %probs, %map, %saved : tensor<100x8xbf16>, tensor<100x8xi1>, tensor<100x8xf32>
}

func.func @mixtral_bwd(%routing_map: tensor<100x8xi1> {te.name = "routing_map"}, %saved: tensor<100x8xf32> {te.name = "saved"}, %grad_probs: tensor<100x8xbf16> {te.name = "grad_probs"}) -> (tensor<100x8xbf16> {te.name = "grad_logits"}) {
  %grad = te.router_topk_bwd %routing_map, %saved, %grad_probs {topk = 2, use_pre_softmax = false, scaling_factor = 1.00000000000000000e+00, score_function = "softmax"} : (tensor<100x8xi1>, tensor<100x8xf32>, tensor<100x8xbf16>) -> tensor<100x8xbf16>
  return %grad : tensor<100x8xbf16>
}

func.func @qwen_pre_fwd(%logits: tensor<64x64xf16> {te.name = "logits"}) -> (tensor<64x64xf16> {te.name = "probs"}, tensor<64x64xi1> {te.name = "routing_map"}, tensor<64x64xf32> {te.name = "saved"}) {
  %probs, %map, %saved = te.router_topk %logits {topk = 8, use_pre_softmax = true, scaling_factor = 1.00000000000000000e+00, score_function = "softmax"} : (tensor<64x64xf16>) -> (tensor<64x64xf16>, tensor<64x64xi1>, tensor<64x64xf32>)
  return %probs, %map, %saved : tensor<64x64xf16>, tensor<64x64xi1>, tensor<64x64xf32>
}

func.func @qwen_pre_bwd(%routing_map: tensor<64x64xi1> {te.name = "routing_map"}, %saved: tensor<64x64xf32> {te.name = "saved"}, %grad_probs: tensor<64x64xf16> {te.name = "grad_probs"}) -> (tensor<64x64xf16> {te.name = "grad_logits"}) {
  %grad = te.router_topk_bwd %routing_map, %saved, %grad_probs {topk = 8, use_pre_softmax = true, scaling_factor = 1.00000000000000000e+00, score_function = "softmax"} : (tensor<64x64xi1>, tensor<64x64xf32>, tensor<64x64xf16>) -> tensor<64x64xf16>
  return %grad : tensor<64x64xf16>
}

func.func @deepseek_fwd(%logits: tensor<64x256xbf16> {te.name = "logits"}, %expert_bias: tensor<256xf32> {te.name = "expert_bias"}) -> (tensor<64x256xbf16> {te.name = "probs"}, tensor<64x256xi1> {te.name = "routing_map"}, tensor<64x256xf32> {te.name = "saved"}) {
  %probs, %map, %saved = te.router_topk %logits bias(%expert_bias) {topk = 8, use_pre_softmax = false, scaling_factor = 2.50000000000000000e+00, score_function = "sigmoid", num_groups = 8, group_topk = 4} : (tensor<64x256xbf16>, tensor<256xf32>) -> (tensor<64x256xbf16>, tensor<64x256xi1>, tensor<64x256xf32>)
  return %probs, %map, %saved : tensor<64x256xbf16>, tensor<64x256xi1>, tensor<64x256xf32>
}

func.func @deepseek_bwd(%routing_map: tensor<64x256xi1> {te.name = "routing_map"}, %saved: tensor<64x256xf32> {te.name = "saved"}, %grad_probs: tensor<64x256xbf16> {te.name = "grad_probs"}) -> (tensor<64x256xbf16> {te.name = "grad_logits"}) {
  %grad = te.router_topk_bwd %routing_map, %saved, %grad_probs {topk = 8, use_pre_softmax = false, scaling_factor = 2.50000000000000000e+00, score_function = "sigmoid"} : (tensor<64x256xi1>, tensor<64x256xf32>, tensor<64x256xbf16>) -> tensor<64x256xbf16>
  return %grad : tensor<64x256xbf16>
}

func.func @sigmoid_top1_fwd(%logits: tensor<33x40xf32> {te.name = "logits"}) -> (tensor<33x40xf32> {te.name = "probs"}, tensor<33x40xi1> {te.name = "routing_map"}, tensor<33x40xf32> {te.name = "saved"}) {
  %probs, %map, %saved = te.router_topk %logits {topk = 1, use_pre_softmax = false, scaling_factor = 1.00000000000000000e+00, score_function = "sigmoid"} : (tensor<33x40xf32>) -> (tensor<33x40xf32>, tensor<33x40xi1>, tensor<33x40xf32>)
  return %probs, %map, %saved : tensor<33x40xf32>, tensor<33x40xi1>, tensor<33x40xf32>
}

func.func @sigmoid_top1_bwd(%routing_map: tensor<33x40xi1> {te.name = "routing_map"}, %saved: tensor<33x40xf32> {te.name = "saved"}, %grad_probs: tensor<33x40xf32> {te.name = "grad_probs"}) -> (tensor<33x40xf32> {te.name = "grad_logits"}) {
  %grad = te.router_topk_bwd %routing_map, %saved, %grad_probs {topk = 1, use_pre_softmax = false, scaling_factor = 1.00000000000000000e+00, score_function = "sigmoid"} : (tensor<33x40xi1>, tensor<33x40xf32>, tensor<33x40xf32>) -> tensor<33x40xf32>
  return %grad : tensor<33x40xf32>
}

func.func @wide_fwd(%logits: tensor<16x1000xbf16> {te.name = "logits"}, %expert_bias: tensor<1000xbf16> {te.name = "expert_bias"}) -> (tensor<16x1000xbf16> {te.name = "probs"}, tensor<16x1000xi1> {te.name = "routing_map"}, tensor<16x1000xf32> {te.name = "saved"}) {
  %probs, %map, %saved = te.router_topk %logits bias(%expert_bias) {topk = 16, use_pre_softmax = false, scaling_factor = 1.00000000000000000e+00, score_function = "sigmoid", num_groups = 10, group_topk = 4} : (tensor<16x1000xbf16>, tensor<1000xbf16>) -> (tensor<16x1000xbf16>, tensor<16x1000xi1>, tensor<16x1000xf32>)
  return %probs, %map, %saved : tensor<16x1000xbf16>, tensor<16x1000xi1>, tensor<16x1000xf32>
}

func.func @wide_bwd(%routing_map: tensor<16x1000xi1> {te.name = "routing_map"}, %saved: tensor<16x1000xf32> {te.name = "saved"}, %grad_probs: tensor<16x1000xbf16> {te.name = "grad_probs"}) -> (tensor<16x1000xbf16> {te.name = "grad_logits"}) {
  %grad = te.router_topk_bwd %routing_map, %saved, %grad_probs {topk = 16, use_pre_softmax = false, scaling_factor = 1.00000000000000000e+00, score_function = "sigmoid"} : (tensor<16x1000xi1>, tensor<16x1000xf32>, tensor<16x1000xbf16>) -> tensor<16x1000xbf16>
  return %grad : tensor<16x1000xbf16>
}

func.func @grouped_pre_fwd(%logits: tensor<16x512xf32> {te.name = "logits"}) -> (tensor<16x512xf32> {te.name = "probs"}, tensor<16x512xi1> {te.name = "routing_map"}, tensor<16x512xf32> {te.name = "saved"}) {
  %probs, %map, %saved = te.router_topk %logits {topk = 8, use_pre_softmax = true, scaling_factor = 1.00000000000000000e+00, score_function = "softmax", num_groups = 16, group_topk = 2} : (tensor<16x512xf32>) -> (tensor<16x512xf32>, tensor<16x512xi1>, tensor<16x512xf32>)
  return %probs, %map, %saved : tensor<16x512xf32>, tensor<16x512xi1>, tensor<16x512xf32>
}

func.func @grouped_pre_bwd(%routing_map: tensor<16x512xi1> {te.name = "routing_map"}, %saved: tensor<16x512xf32> {te.name = "saved"}, %grad_probs: tensor<16x512xf32> {te.name = "grad_probs"}) -> (tensor<16x512xf32> {te.name = "grad_logits"}) {
  %grad = te.router_topk_bwd %routing_map, %saved, %grad_probs {topk = 8, use_pre_softmax = true, scaling_factor = 1.00000000000000000e+00, score_function = "softmax"} : (tensor<16x512xi1>, tensor<16x512xf32>, tensor<16x512xf32>) -> tensor<16x512xf32>
  return %grad : tensor<16x512xf32>
}

func.func @aux_scores_softmax(%logits: tensor<50x128xbf16> {te.name = "logits"}) -> (tensor<50x128xi1> {te.name = "routing_map"}, tensor<50x128xf32> {te.name = "scores"}, tensor<50x128xf32> {te.name = "saved"}) {
  %map, %scores, %saved = te.router_aux_scores %logits {topk = 6, score_function = "softmax"} : (tensor<50x128xbf16>) -> (tensor<50x128xi1>, tensor<50x128xf32>, tensor<50x128xf32>)
  return %map, %scores, %saved : tensor<50x128xi1>, tensor<50x128xf32>, tensor<50x128xf32>
}

func.func @aux_scores_softmax_bwd(%saved: tensor<50x128xf32> {te.name = "saved"}, %grad_scores: tensor<50x128xf32> {te.name = "grad_scores"}) -> (tensor<50x128xf16> {te.name = "grad_logits"}) {
  %grad = te.router_aux_scores_bwd %saved, %grad_scores {score_function = "softmax"} : (tensor<50x128xf32>, tensor<50x128xf32>) -> tensor<50x128xf16>
  return %grad : tensor<50x128xf16>
}

func.func @aux_scores_sigmoid(%logits: tensor<50x128xbf16> {te.name = "logits"}) -> (tensor<50x128xi1> {te.name = "routing_map"}, tensor<50x128xf32> {te.name = "scores"}, tensor<50x128xf32> {te.name = "saved"}) {
  %map, %scores, %saved = te.router_aux_scores %logits {topk = 6, score_function = "sigmoid"} : (tensor<50x128xbf16>) -> (tensor<50x128xi1>, tensor<50x128xf32>, tensor<50x128xf32>)
  return %map, %scores, %saved : tensor<50x128xi1>, tensor<50x128xf32>, tensor<50x128xf32>
}

func.func @aux_scores_sigmoid_bwd(%saved: tensor<50x128xf32> {te.name = "saved"}, %grad_scores: tensor<50x128xf32> {te.name = "grad_scores"}) -> (tensor<50x128xf16> {te.name = "grad_logits"}) {
  %grad = te.router_aux_scores_bwd %saved, %grad_scores {score_function = "sigmoid"} : (tensor<50x128xf32>, tensor<50x128xf32>) -> tensor<50x128xf16>
  return %grad : tensor<50x128xf16>
}

func.func @aux_loss_bf16_i64(%probs: tensor<300x64xbf16> {te.name = "probs"}, %tokens_per_expert: tensor<64xi64> {te.name = "tokens_per_expert"}) -> (tensor<1xbf16> {te.name = "aux_loss"}) {
  %loss = te.router_aux_loss %probs, %tokens_per_expert {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<300x64xbf16>, tensor<64xi64>) -> tensor<1xbf16>
  return %loss : tensor<1xbf16>
}

func.func @aux_loss_bf16_i64_bwd(%tokens_per_expert: tensor<64xi64> {te.name = "tokens_per_expert"}, %grad_loss: tensor<1xbf16> {te.name = "grad_loss"}) -> (tensor<300x64xbf16> {te.name = "grad_probs"}) {
  %grad = te.router_aux_loss_bwd %tokens_per_expert, %grad_loss {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<64xi64>, tensor<1xbf16>) -> tensor<300x64xbf16>
  return %grad : tensor<300x64xbf16>
}

func.func @aux_loss_f32_i32(%probs: tensor<300x64xf32> {te.name = "probs"}, %tokens_per_expert: tensor<64xi32> {te.name = "tokens_per_expert"}) -> (tensor<1xf32> {te.name = "aux_loss"}) {
  %loss = te.router_aux_loss %probs, %tokens_per_expert {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<300x64xf32>, tensor<64xi32>) -> tensor<1xf32>
  return %loss : tensor<1xf32>
}

func.func @aux_loss_f32_i32_bwd(%tokens_per_expert: tensor<64xi32> {te.name = "tokens_per_expert"}, %grad_loss: tensor<1xf32> {te.name = "grad_loss"}) -> (tensor<300x64xf32> {te.name = "grad_probs"}) {
  %grad = te.router_aux_loss_bwd %tokens_per_expert, %grad_loss {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<64xi32>, tensor<1xf32>) -> tensor<300x64xf32>
  return %grad : tensor<300x64xf32>
}

func.func @aux_loss_f16_f32(%probs: tensor<300x64xf16> {te.name = "probs"}, %tokens_per_expert: tensor<64xf32> {te.name = "tokens_per_expert"}) -> (tensor<1xf16> {te.name = "aux_loss"}) {
  %loss = te.router_aux_loss %probs, %tokens_per_expert {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<300x64xf16>, tensor<64xf32>) -> tensor<1xf16>
  return %loss : tensor<1xf16>
}

func.func @aux_loss_f16_f32_bwd(%tokens_per_expert: tensor<64xf32> {te.name = "tokens_per_expert"}, %grad_loss: tensor<1xf16> {te.name = "grad_loss"}) -> (tensor<300x64xf16> {te.name = "grad_probs"}) {
  %grad = te.router_aux_loss_bwd %tokens_per_expert, %grad_loss {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<64xf32>, tensor<1xf16>) -> tensor<300x64xf16>
  return %grad : tensor<300x64xf16>
}

func.func @aux_loss_bf16_bf16(%probs: tensor<300x64xbf16> {te.name = "probs"}, %tokens_per_expert: tensor<64xbf16> {te.name = "tokens_per_expert"}) -> (tensor<1xbf16> {te.name = "aux_loss"}) {
  %loss = te.router_aux_loss %probs, %tokens_per_expert {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<300x64xbf16>, tensor<64xbf16>) -> tensor<1xbf16>
  return %loss : tensor<1xbf16>
}

func.func @aux_loss_bf16_bf16_bwd(%tokens_per_expert: tensor<64xbf16> {te.name = "tokens_per_expert"}, %grad_loss: tensor<1xbf16> {te.name = "grad_loss"}) -> (tensor<300x64xbf16> {te.name = "grad_probs"}) {
  %grad = te.router_aux_loss_bwd %tokens_per_expert, %grad_loss {total_num_tokens = 1200, num_experts = 256, topk = 8, coeff = 1.00000000000000002e-02} : (tensor<64xbf16>, tensor<1xbf16>) -> tensor<300x64xbf16>
  return %grad : tensor<300x64xbf16>
}
