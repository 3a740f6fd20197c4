// RUN: te-opt %s --te-decompose | FileCheck %s
// CHECK: #current_scaling = #te.current_scaling<fp8_format = e4m3>
// RUN: te-opt %s --te-decompose=inference | FileCheck %s --check-prefix=EVAL

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<4x2x32xbf16>, %[[W:.*]]: tensor<48x32xbf16>, %[[B:.*]]: tensor<48xbf16>)
// CHECK:      %[[X2:.*]] = te.reshape %[[X]] : tensor<4x2x32xbf16> -> tensor<8x32xbf16>
// CHECK-NEXT: %[[MM:.*]] = te.matmul %[[X2]], %[[W]] {role = #te.gemm_role<fprop>, transpose_b} : tensor<8x32xbf16>, tensor<48x32xbf16> -> tensor<8x48xbf16>
// CHECK-NEXT: %[[Y:.*]] = te.bias_add %[[MM]], %[[B]]
// CHECK-NEXT: %[[OUT:.*]] = te.reshape %[[Y]] : tensor<8x48xbf16> -> tensor<4x2x48xbf16>
// CHECK-NEXT: return %[[OUT]]
func.func @linear(%x: tensor<4x2x32xbf16>, %w: tensor<48x32xbf16>, %b: tensor<48xbf16>) -> tensor<4x2x48xbf16> {
  %y = te.linear %x weight(%w) bias(%b) : (tensor<4x2x32xbf16>, tensor<48x32xbf16>, tensor<48xbf16>) -> tensor<4x2x48xbf16>
  return %y : tensor<4x2x48xbf16>
}

// A 2-D input needs no reshape; no bias, no bias_add.
// CHECK-LABEL: func.func @linear_2d_no_bias
// CHECK-NEXT: %[[MM:.*]] = te.matmul %arg0, %arg1 {role = #te.gemm_role<fprop>, transpose_b}
// CHECK-NEXT: return %[[MM]]
func.func @linear_2d_no_bias(%x: tensor<8x32xf16>, %w: tensor<16x32xf16>) -> tensor<8x16xf16> {
  %y = te.linear %x weight(%w) : (tensor<8x32xf16>, tensor<16x32xf16>) -> tensor<8x16xf16>
  return %y : tensor<8x16xf16>
}

// CHECK-LABEL: func.func @layernorm
// CHECK:      %[[Y:.*]], %[[MEAN:.*]], %[[RSIGMA:.*]] = te.layernorm_fwd %{{.*}}, %arg1, %arg2 {eps = 9.9999999999999995E-7 : f64, zero_centered_gamma}
// CHECK-SAME: -> (tensor<8x32xf32>, tensor<8xf32>, tensor<8xf32>)
func.func @layernorm(%x: tensor<4x2x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<4x2x32xf32> {
  %y = te.layernorm %x weight(%g) bias(%b) {eps = 1.0e-6 : f64, zero_centered_gamma} : (tensor<4x2x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<4x2x32xf32>
  return %y : tensor<4x2x32xf32>
}

// CHECK-LABEL: func.func @rmsnorm
// CHECK: te.rmsnorm_fwd %{{.*}}, %arg1 {eps = 1.000000e-05 : f64} : (tensor<8x32xbf16>, tensor<32xbf16>) -> (tensor<8x32xbf16>, tensor<8xf32>)
func.func @rmsnorm(%x: tensor<8x32xbf16>, %g: tensor<32xbf16>) -> tensor<8x32xbf16> {
  %y = te.rmsnorm %x weight(%g) : (tensor<8x32xbf16>, tensor<32xbf16>) -> tensor<8x32xbf16>
  return %y : tensor<8x32xbf16>
}

// The normalized input is also the layer's second result.
// CHECK-LABEL: func.func @layernorm_linear_ln_output
// CHECK:      %[[LN:.*]], %{{.*}} = te.rmsnorm_fwd
// CHECK-NEXT: %[[MM:.*]] = te.matmul %[[LN]], %arg2 {role = #te.gemm_role<fprop>, transpose_b}
// CHECK-NEXT: %[[Y:.*]] = te.reshape %[[MM]] : tensor<8x16xbf16> -> tensor<4x2x16xbf16>
// CHECK-NEXT: %[[LN3:.*]] = te.reshape %[[LN]] : tensor<8x32xbf16> -> tensor<4x2x32xbf16>
// CHECK-NEXT: return %[[Y]], %[[LN3]]
func.func @layernorm_linear_ln_output(%x: tensor<4x2x32xbf16>, %g: tensor<32xbf16>, %w: tensor<16x32xbf16>) -> (tensor<4x2x16xbf16>, tensor<4x2x32xbf16>) {
  %y, %ln = te.layernorm_linear %x ln_weight(%g) weight(%w) {normalization = #te.normalization<RMSNorm>, return_layernorm_output} : (tensor<4x2x32xbf16>, tensor<32xbf16>, tensor<16x32xbf16>) -> (tensor<4x2x16xbf16>, tensor<4x2x32xbf16>)
  return %y, %ln : tensor<4x2x16xbf16>, tensor<4x2x32xbf16>
}

// A gated activation halves FC1's output.
// CHECK-LABEL: func.func @layernorm_mlp_swiglu
// CHECK:      te.layernorm_fwd
// CHECK-NEXT: %[[FC1:.*]] = te.matmul %{{.*}}, %arg3 {role = #te.gemm_role<fprop>, transpose_b} : tensor<8x32xbf16>, tensor<128x32xbf16> -> tensor<8x128xbf16>
// CHECK-NEXT: %[[ACT:.*]] = te.act <swiglu> %[[FC1]] : tensor<8x128xbf16> -> tensor<8x64xbf16>
// CHECK-NEXT: %[[FC2:.*]] = te.matmul %[[ACT]], %arg4 {role = #te.gemm_role<fprop>, transpose_b} : tensor<8x64xbf16>, tensor<32x64xbf16> -> tensor<8x32xbf16>
func.func @layernorm_mlp_swiglu(%x: tensor<8x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %w1: tensor<128x32xbf16>, %w2: tensor<32x64xbf16>) -> tensor<8x32xbf16> {
  %y = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {activation = #te.activation<swiglu>} : (tensor<8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<128x32xbf16>, tensor<32x64xbf16>) -> tensor<8x32xbf16>
  return %y : tensor<8x32xbf16>
}

// clamped_swiglu's parameters go from the layer to te.act; a TransformerLayer's
// too.
// CHECK-LABEL: func.func @layernorm_mlp_clamped_swiglu
// CHECK:      te.act <clamped_swiglu> %{{.*}} {activation_alpha = 1.500000e+00 : f64, activation_limit = 7.500000e-01 : f64, glu_linear_offset = 0.000000e+00 : f64} : tensor<8x128xbf16> -> tensor<8x64xbf16>
// CHECK:      te.act <clamped_swiglu> %{{.*}} : tensor<8x128xbf16> -> tensor<8x64xbf16>
// CHECK:      te.act <clamped_swiglu> %{{.*}} {activation_limit = 2.000000e+00 : f64} : tensor<16x128xbf16> -> tensor<16x64xbf16>
func.func @layernorm_mlp_clamped_swiglu(%x: tensor<8x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %w1: tensor<128x32xbf16>, %w2: tensor<32x64xbf16>, %t: tensor<8x2x32xbf16>, %wqkv: tensor<96x32xbf16>, %wo: tensor<32x32xbf16>) -> (tensor<8x32xbf16>, tensor<8x32xbf16>, tensor<8x2x32xbf16>) {
  %y = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {activation = #te.activation<clamped_swiglu>, activation_limit = 0.75 : f64, activation_alpha = 1.5 : f64, glu_linear_offset = 0.0 : f64} : (tensor<8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<128x32xbf16>, tensor<32x64xbf16>) -> tensor<8x32xbf16>
  %z = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {activation = #te.activation<clamped_swiglu>} : (tensor<8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<128x32xbf16>, tensor<32x64xbf16>) -> tensor<8x32xbf16>
  %u = te.transformer_layer %t attn_ln_weight(%g) attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 2 : i64, activation = #te.activation<clamped_swiglu>, activation_limit = 2.0 : f64, hidden_dropout = 0.0 : f64, attention_dropout = 0.0 : f64} : (tensor<8x2x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<96x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<128x32xbf16>, tensor<32x64xbf16>) -> tensor<8x2x32xbf16>
  return %y, %z, %u : tensor<8x32xbf16>, tensor<8x32xbf16>, tensor<8x2x32xbf16>
}

// CHECK-LABEL: func.func @dot_product_attention
// CHECK:      %[[O:.*]], %[[LSE:.*]] = te.attention %arg0, %arg1, %arg2 mask(%arg3) {attn_mask_type = #te.attn_mask_type<padding>, qkv_format = #te.qkv_format<bshd>, softmax_scale = 1.250000e-01 : f64}
// CHECK-SAME: -> (tensor<2x16x8x16xbf16>, tensor<2x8x16xf32>)
// CHECK-NEXT: te.reshape %[[O]] : tensor<2x16x8x16xbf16> -> tensor<2x16x128xbf16>
func.func @dot_product_attention(%q: tensor<2x16x8x16xbf16>, %k: tensor<2x16x2x16xbf16>, %v: tensor<2x16x2x16xbf16>, %m: tensor<2x1x1x16xi1>) -> tensor<2x16x128xbf16> {
  %o = te.dot_product_attention %q, %k, %v mask(%m) {attn_mask_type = #te.attn_mask_type<padding>, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.125 : f64} : (tensor<2x16x8x16xbf16>, tensor<2x16x2x16xbf16>, tensor<2x16x2x16xbf16>, tensor<2x1x1x16xi1>) -> tensor<2x16x128xbf16>
  return %o : tensor<2x16x128xbf16>
}

// TE's mask pair: te.attention takes the query mask and pads the keys alone
// by the mask (pad_keys_only), though there are as many keys as queries.
// CHECK-LABEL: func.func @dot_product_attention_query_mask
// CHECK:      te.attention %arg0, %arg1, %arg2 mask(%arg3) query_mask(%arg4) {attn_mask_type = #te.attn_mask_type<padding>, pad_keys_only, qkv_format = #te.qkv_format<bshd>, softmax_scale = 2.500000e-01 : f64}
func.func @dot_product_attention_query_mask(%q: tensor<2x16x8x16xbf16>, %k: tensor<2x16x2x16xbf16>, %v: tensor<2x16x2x16xbf16>, %m: tensor<2x1x1x16xi1>, %qm: tensor<2x1x1x16xi1>) -> tensor<2x16x128xbf16> {
  %o = te.dot_product_attention %q, %k, %v mask(%m) query_mask(%qm) {attn_mask_type = #te.attn_mask_type<padding>, qkv_format = #te.qkv_format<bshd>} : (tensor<2x16x8x16xbf16>, tensor<2x16x2x16xbf16>, tensor<2x16x2x16xbf16>, tensor<2x1x1x16xi1>, tensor<2x1x1x16xi1>) -> tensor<2x16x128xbf16>
  return %o : tensor<2x16x128xbf16>
}

// GQA (4 query heads over 2 kv heads of 8): the fused QKV output splits into
// q [0, 32), k [32, 48), v [48, 64); rotary applies to q and k.
// CHECK-LABEL: func.func @multihead_attention_gqa_rotary
// CHECK:      %[[QKV:.*]] = te.matmul %{{.*}}, %arg1 {role = #te.gemm_role<fprop>, transpose_b} : tensor<32x32xbf16>, tensor<64x32xbf16> -> tensor<32x64xbf16>
// CHECK-NEXT: %[[Q2:.*]] = te.slice %[[QKV]][0] : tensor<32x64xbf16> -> tensor<32x32xbf16>
// CHECK-NEXT: %[[Q:.*]] = te.reshape %[[Q2]] : tensor<32x32xbf16> -> tensor<16x2x4x8xbf16>
// CHECK-NEXT: %[[K2:.*]] = te.slice %[[QKV]][32] : tensor<32x64xbf16> -> tensor<32x16xbf16>
// CHECK-NEXT: %[[K:.*]] = te.reshape %[[K2]] : tensor<32x16xbf16> -> tensor<16x2x2x8xbf16>
// CHECK-NEXT: %[[V2:.*]] = te.slice %[[QKV]][48]
// CHECK-NEXT: %[[V:.*]] = te.reshape %[[V2]]
// CHECK-NEXT: %[[QR:.*]] = te.rotary %[[Q]], %arg3
// CHECK-NEXT: %[[KR:.*]] = te.rotary %[[K]], %arg3
// CHECK-NEXT: %[[O:.*]], %{{.*}} = te.attention %[[QR]], %[[KR]], %[[V]] rng(%arg4) {attn_mask_type = #te.attn_mask_type<causal>, dropout = 1.000000e-01 : f64, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.35355339059327373 : f64}
// CHECK-NEXT: %[[O2:.*]] = te.reshape %[[O]] : tensor<16x2x4x8xbf16> -> tensor<32x32xbf16>
// CHECK-NEXT: te.matmul %[[O2]], %arg2 {role = #te.gemm_role<fprop>, transpose_b}
// EVAL-LABEL: func.func @multihead_attention_gqa_rotary
// EVAL-NOT:   rng_state
// EVAL:       te.attention %{{.*}}, %{{.*}}, %{{.*}} {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale
func.func @multihead_attention_gqa_rotary(%x: tensor<16x2x32xbf16>, %wqkv: tensor<64x32xbf16>, %wo: tensor<32x32xbf16>, %rope: tensor<16x1x1x8xf32>) -> tensor<16x2x32xbf16> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) rotary_pos_emb(%rope) {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64} : (tensor<16x2x32xbf16>, tensor<64x32xbf16>, tensor<32x32xbf16>, tensor<16x1x1x8xf32>) -> tensor<16x2x32xbf16>
  return %y : tensor<16x2x32xbf16>
}

// Cross-attention (encoder_output): q from the input's tokens through
// qkv_weight (no slice: it holds only the query rows), k | v from the
// encoder's 24 tokens through kv_weight; the mask pads the keys alone
// (pad_keys_only) and query_mask the queries.
// CHECK-LABEL: func.func @multihead_attention_cross
// CHECK:      %[[X:.*]] = te.reshape %arg0 : tensor<16x2x32xbf16> -> tensor<32x32xbf16>
// CHECK-NEXT: %[[QP:.*]] = te.matmul %[[X]], %arg2 {{.*}} -> tensor<32x32xbf16>
// CHECK-NEXT: %[[Q:.*]] = te.reshape %[[QP]] : tensor<32x32xbf16> -> tensor<16x2x4x8xbf16>
// CHECK-NEXT: %[[E:.*]] = te.reshape %arg1 : tensor<12x2x32xbf16> -> tensor<24x32xbf16>
// CHECK-NEXT: %[[KV:.*]] = te.matmul %[[E]], %arg3 {{.*}} -> tensor<24x32xbf16>
// CHECK-NEXT: %[[K2:.*]] = te.slice %[[KV]][0] : tensor<24x32xbf16> -> tensor<24x16xbf16>
// CHECK-NEXT: %[[K:.*]] = te.reshape %[[K2]] : tensor<24x16xbf16> -> tensor<12x2x2x8xbf16>
// CHECK-NEXT: %[[V2:.*]] = te.slice %[[KV]][16] : tensor<24x32xbf16> -> tensor<24x16xbf16>
// CHECK-NEXT: %[[V:.*]] = te.reshape %[[V2]] : tensor<24x16xbf16> -> tensor<12x2x2x8xbf16>
// CHECK-NEXT: te.attention %[[Q]], %[[K]], %[[V]] mask(%arg5) query_mask(%arg6) {attn_mask_type = #te.attn_mask_type<padding>, pad_keys_only, qkv_format = #te.qkv_format<sbhd>
func.func @multihead_attention_cross(%x: tensor<16x2x32xbf16>, %enc: tensor<12x2x32xbf16>, %wq: tensor<32x32xbf16>, %wkv: tensor<32x32xbf16>, %wo: tensor<32x32xbf16>, %mask: tensor<2x1x1x12xi1>, %qmask: tensor<2x1x1x16xi1>) -> tensor<16x2x32xbf16> {
  %y = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq) kv_weight(%wkv) proj_weight(%wo) mask(%mask) query_mask(%qmask) {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64, attn_mask_type = #te.attn_mask_type<padding>, attention_dropout = 0.0 : f64} : (tensor<16x2x32xbf16>, tensor<12x2x32xbf16>, tensor<32x32xbf16>, tensor<32x32xbf16>, tensor<32x32xbf16>, tensor<2x1x1x12xi1>, tensor<2x1x1x16xi1>) -> tensor<16x2x32xbf16>
  return %y : tensor<16x2x32xbf16>
}

// A decoder layer: self-attention block, then the cross-attention block on
// the normalized sum (its attention dropout on stream 3, its hidden
// dropout on stream 4), then the MLP block.
// CHECK-LABEL: func.func @transformer_layer_decoder
// CHECK:      te.attention {{.*}} : (tensor<16x2x4x8xbf16>, tensor<16x2x4x8xbf16>, tensor<16x2x4x8xbf16>, tensor<2xi64>)
// CHECK:      te.dropout {{.*}}stream = 1 : i64
// CHECK:      %[[H:.*]] = te.add
// CHECK-NEXT: %[[LN3:.*]], %{{.*}}, %{{.*}} = te.layernorm_fwd %[[H]], %arg8, %arg9
// CHECK:      te.attention {{.*}}stream = 3 : i64{{.*}} : (tensor<16x2x4x8xbf16>, tensor<12x2x4x8xbf16>, tensor<12x2x4x8xbf16>, tensor<2xi64>)
// CHECK:      %[[D:.*]] = te.dropout {{.*}}stream = 4 : i64
// CHECK-NEXT: %[[H2:.*]] = te.add %[[H]], %[[D]]
// CHECK-NEXT: te.layernorm_fwd %[[H2]]
// CHECK:      te.dropout {{.*}}stream = 2 : i64
func.func @transformer_layer_decoder(%x: tensor<16x2x32xbf16>, %enc: tensor<12x2x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %wqkv: tensor<96x32xbf16>, %wo: tensor<32x32xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<32x64xbf16>, %g3: tensor<32xbf16>, %b3: tensor<32xbf16>, %wq: tensor<32x32xbf16>, %wkv: tensor<64x32xbf16>) -> tensor<16x2x32xbf16> {
  %y = te.transformer_layer %x encoder_output(%enc) attn_ln_weight(%g) attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo) inter_ln_weight(%g3) inter_ln_bias(%b3) inter_q_weight(%wq) inter_kv_weight(%wkv) inter_proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64} : (tensor<16x2x32xbf16>, tensor<12x2x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<96x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<32x32xbf16>, tensor<64x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<64x32xbf16>, tensor<32x64xbf16>) -> tensor<16x2x32xbf16>
  return %y : tensor<16x2x32xbf16>
}

// The block: norm, attention, dropout + residual, norm, MLP, dropout +
// residual. Dropout streams are 16 * (layer index) + site.
// CHECK-LABEL: func.func @transformer_layers
// CHECK-SAME: %[[RNG:[^:]*]]: tensor<2xi64> {te.name = "rng_state"}
// CHECK:      %[[X:.*]] = te.reshape %arg0
// CHECK:      te.attention {{.*}} rng(%[[RNG]]) {{.*}}dropout = 1.000000e-01 : f64
// CHECK-NOT:  stream
// CHECK:      %[[D1:.*]] = te.dropout %{{.*}}, %[[RNG]] {rate = 1.000000e-01 : f64, stream = 1 : i64}
// CHECK-NEXT: %[[H:.*]] = te.add %[[X]], %[[D1]]
// CHECK:      te.act <gelu>
// CHECK:      %[[D2:.*]] = te.dropout %{{.*}}, %[[RNG]] {rate = 1.000000e-01 : f64, stream = 2 : i64}
// CHECK-NEXT: %[[Y:.*]] = te.add %[[H]], %[[D2]]
// CHECK:      te.attention {{.*}}stream = 16 : i64
// CHECK:      te.dropout {{.*}}stream = 17 : i64
// CHECK:      te.dropout {{.*}}stream = 18 : i64
// EVAL-LABEL: func.func @transformer_layers
// EVAL-NOT:   te.dropout
// EVAL:       return
func.func @transformer_layers(%x: tensor<8x2x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %wqkv: tensor<96x32xbf16>, %wo: tensor<32x32xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<32x64xbf16>) -> tensor<8x2x32xbf16> {
  %0 = te.transformer_layer %x attn_ln_weight(%g) attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 2 : i64} : (tensor<8x2x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<96x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x2x32xbf16>
  %1 = te.transformer_layer %0 attn_ln_weight(%g) attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 2 : i64} : (tensor<8x2x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<96x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x2x32xbf16>
  return %1 : tensor<8x2x32xbf16>
}

// TE's drop path (stochastic depth) after each block's hidden dropout: one
// draw per position of the sbhd input (8 positions x 2 x 32 elements).
// CHECK-LABEL: func.func @transformer_layer_drop_path
// CHECK:      %[[D1:.*]] = te.dropout %{{.*}} {rate = 1.000000e-01 : f64, stream = 1 : i64}
// CHECK-NEXT: %[[P1:.*]] = te.dropout %[[D1]], %{{.*}} {group = 64 : i64, rate = 2.500000e-01 : f64, stream = 5 : i64}
// CHECK-NEXT: te.add %{{.*}}, %[[P1]]
// CHECK:      %[[D2:.*]] = te.dropout %{{.*}} {rate = 1.000000e-01 : f64, stream = 2 : i64}
// CHECK-NEXT: %[[P2:.*]] = te.dropout %[[D2]], %{{.*}} {group = 64 : i64, rate = 2.500000e-01 : f64, stream = 6 : i64}
// EVAL-LABEL: func.func @transformer_layer_drop_path
// EVAL-NOT:   te.dropout
// EVAL:       return
func.func @transformer_layer_drop_path(%x: tensor<8x2x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %wqkv: tensor<96x32xbf16>, %wo: tensor<32x32xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<32x64xbf16>) -> tensor<8x2x32xbf16> {
  %0 = te.transformer_layer %x attn_ln_weight(%g) attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 2 : i64, attention_dropout = 0.0 : f64, drop_path_rate = 0.25 : f64} : (tensor<8x2x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<96x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x2x32xbf16>
  return %0 : tensor<8x2x32xbf16>
}

// With apply_residual_connection_post_layernorm the residuals are the
// normalized values.
// CHECK-LABEL: func.func @transformer_layer_post_ln_residual
// CHECK:      %[[LN1:.*]], %{{.*}}, %{{.*}} = te.layernorm_fwd
// CHECK:      %[[H:.*]] = te.add %[[LN1]], %{{.*}}
// CHECK-NEXT: %[[LN2:.*]], %{{.*}}, %{{.*}} = te.layernorm_fwd %[[H]]
// CHECK:      te.add %[[LN2]], %{{.*}}
func.func @transformer_layer_post_ln_residual(%x: tensor<8x2x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %wqkv: tensor<96x32xbf16>, %wo: tensor<32x32xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<32x64xbf16>) -> tensor<8x2x32xbf16> {
  %0 = te.transformer_layer %x attn_ln_weight(%g) attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 2 : i64, hidden_dropout = 0.0 : f64, attention_dropout = 0.0 : f64, apply_residual_connection_post_layernorm} : (tensor<8x2x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<96x32xbf16>, tensor<32x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<64x32xbf16>, tensor<32x64xbf16>) -> tensor<8x2x32xbf16>
  return %0 : tensor<8x2x32xbf16>
}

// The layer's recipe and the GEMM's role travel to the matmul, for
// te-place-scaling.
// CHECK-LABEL: func.func @linear_fp8
// CHECK: te.matmul %{{.*}}, %arg1 {fp8_recipe = #current_scaling, role = #te.gemm_role<fprop>, transpose_b}
func.func @linear_fp8(%x: tensor<16x32xbf16>, %w: tensor<48x32xbf16>) -> tensor<16x48xbf16> {
  %y = te.linear %x weight(%w) {fp8_recipe = #te.current_scaling<fp8_format = e4m3>} : (tensor<16x32xbf16>, tensor<48x32xbf16>) -> tensor<16x48xbf16>
  return %y : tensor<16x48xbf16>
}
