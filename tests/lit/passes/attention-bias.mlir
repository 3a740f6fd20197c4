// RUN: te-opt %s --te-decompose | FileCheck %s
// RUN: te-opt %s --te-decompose --te-autodiff | FileCheck %s --check-prefix=GRAD

// Attention bias and ALiBi (docs/attention-bias.md) through te-decompose
// (the layer ops' operands and attributes reach te.attention) and
// te-autodiff (te.attention_bwd takes them too; with bias_grad its fourth
// result is the bias's gradient). sbhd, s = 8, b = 2, 4 heads of 16.

// CHECK-LABEL: func.func @dpa_bias(
// CHECK-SAME:  %[[Q:[^:]*]]: tensor<8x2x4x16xbf16> {te.name = "query"}
// CHECK-SAME:  %[[B:[^:]*]]: tensor<1x4x8x8xbf16> {te.name = "core_attention_bias"}
// CHECK:       te.attention %[[Q]], %{{.*}}, %{{.*}} rng(%{{.*}}) bias(%[[B]]) {attn_mask_type = #te.attn_mask_type<causal>, bias_grad, bias_type = #te.attn_bias_type<post_scale_bias>, dropout = 1.000000e-01 : f64,
// CHECK-SAME:  : (tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<2xi64>, tensor<1x4x8x8xbf16>) -> (tensor<8x2x4x16xbf16>, tensor<2x4x8xf32>)
// The backward reads the forward's bias argument and returns its gradient.
// GRAD-LABEL: func.func @dpa_bias_backward(
// GRAD-SAME:  %[[B:[^:]*]]: tensor<1x4x8x8xbf16> {te.forward_arg = 3 : i64}
// GRAD-SAME:  -> ({{.*}}, tensor<1x4x8x8xbf16> {te.grad_of = 3 : i64, te.name = "grad.core_attention_bias"})
// GRAD:       %{{.*}}, %{{.*}}, %{{.*}}, %[[DB:.*]] = te.attention_bwd {{.*}} rng(%{{.*}}) bias(%[[B]]) {attn_mask_type = #te.attn_mask_type<causal>, bias_grad, bias_type = #te.attn_bias_type<post_scale_bias>,
// GRAD-SAME:  -> (tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<1x4x8x8xbf16>)
// GRAD:       return {{.*}}, %[[DB]] :
func.func @dpa_bias(%q: tensor<8x2x4x16xbf16> {te.name = "query"},
                    %k: tensor<8x2x4x16xbf16> {te.name = "key"},
                    %v: tensor<8x2x4x16xbf16> {te.name = "value"},
                    %b: tensor<1x4x8x8xbf16> {te.name = "core_attention_bias"})
    -> (tensor<8x2x64xbf16> {te.name = "output"}) {
  %o = te.dot_product_attention %q, %k, %v core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>,
       bias_requires_grad, attention_dropout = 0.1 : f64}
      : (tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>,
         tensor<8x2x4x16xbf16>, tensor<1x4x8x8xbf16>) -> tensor<8x2x64xbf16>
  return %o : tensor<8x2x64xbf16>
}

// Without bias_requires_grad the bias is read, and takes no gradient.
// GRAD-LABEL: func.func @dpa_bias_no_grad_backward(
// GRAD-SAME:  %[[B:[^:]*]]: tensor<2x1x8x8xbf16> {te.forward_arg = 3 : i64}
// GRAD-NOT:   grad.core_attention_bias
// GRAD:       %{{.*}}, %{{.*}}, %{{.*}} = te.attention_bwd {{.*}} bias(%[[B]]) {attn_mask_type = #te.attn_mask_type<no_mask>, bias_type = #te.attn_bias_type<post_scale_bias>,
// GRAD-SAME:  -> (tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>)
func.func @dpa_bias_no_grad(%q: tensor<8x2x4x16xbf16> {te.name = "query"},
                            %k: tensor<8x2x4x16xbf16> {te.name = "key"},
                            %v: tensor<8x2x4x16xbf16> {te.name = "value"},
                            %b: tensor<2x1x8x8xbf16> {te.name = "core_attention_bias"})
    -> (tensor<8x2x64xbf16> {te.name = "output"}) {
  %o = te.dot_product_attention %q, %k, %v core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>,
       attn_mask_type = #te.attn_mask_type<no_mask>}
      : (tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>,
         tensor<8x2x4x16xbf16>, tensor<2x1x8x8xbf16>) -> tensor<8x2x64xbf16>
  return %o : tensor<8x2x64xbf16>
}

// ALiBi with the caller's [b, h] slopes, which the backward reads as a
// forward argument and which take no gradient.
// CHECK-LABEL: func.func @mha_alibi(
// CHECK-SAME:  %[[S:[^:]*]]: tensor<2x4xf32> {te.name = "alibi_slopes"}
// CHECK:       te.attention %{{.*}}, %{{.*}}, %{{.*}} alibi_slopes(%[[S]]) {attn_mask_type = #te.attn_mask_type<causal>, bias_type = #te.attn_bias_type<alibi>,
// GRAD-LABEL: func.func @mha_alibi_backward(
// GRAD-SAME:  %[[S:[^:]*]]: tensor<2x4xf32> {te.forward_arg = 3 : i64}
// GRAD-NOT:   grad.alibi_slopes
// GRAD:       te.attention_bwd {{.*}} alibi_slopes(%[[S]]) {attn_mask_type = #te.attn_mask_type<causal>, bias_type = #te.attn_bias_type<alibi>,
// GRAD-SAME:  -> (tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>)
func.func @mha_alibi(%x: tensor<8x2x64xbf16> {te.name = "input"},
                     %wqkv: tensor<192x64xbf16> {te.name = "qkv.weight"},
                     %wo: tensor<64x64xbf16> {te.name = "proj.weight"},
                     %s: tensor<2x4xf32> {te.name = "alibi_slopes"})
    -> (tensor<8x2x64xbf16> {te.name = "output"}) {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      alibi_slopes(%s)
      {num_attention_heads = 4 : i64, attention_dropout = 0.0 : f64,
       core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<8x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<2x4xf32>) -> tensor<8x2x64xbf16>
  return %y : tensor<8x2x64xbf16>
}

// A cross-attention block: the bias spans the encoder's 12 keys.
// CHECK-LABEL: func.func @mha_cross(
// CHECK:       te.attention {{.*}} bias(%{{.*}}) {attn_mask_type = #te.attn_mask_type<no_mask>, bias_type = #te.attn_bias_type<post_scale_bias>,
// CHECK-SAME:  : (tensor<8x2x4x16xbf16>, tensor<12x2x4x16xbf16>, tensor<12x2x4x16xbf16>, tensor<1x1x8x12xbf16>)
func.func @mha_cross(%x: tensor<8x2x64xbf16>, %enc: tensor<12x2x64xbf16>,
                     %wq: tensor<64x64xbf16>, %wkv: tensor<128x64xbf16>,
                     %wo: tensor<64x64xbf16>, %b: tensor<1x1x8x12xbf16>)
    -> tensor<8x2x64xbf16> {
  %y = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) core_attention_bias(%b)
      {num_attention_heads = 4 : i64, attention_dropout = 0.0 : f64,
       attn_mask_type = #te.attn_mask_type<no_mask>,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<8x2x64xbf16>, tensor<12x2x64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<1x1x8x12xbf16>)
        -> tensor<8x2x64xbf16>
  return %y : tensor<8x2x64xbf16>
}

// A decoder layer: the self-attention takes the bias, the cross-attention
// (keys from the encoder output) none.
// CHECK-LABEL: func.func @decoder(
// CHECK-SAME:  %[[B:[^:]*]]: tensor<1x4x8x8xbf16>)
// CHECK:       te.attention {{.*}} bias(%[[B]]) {attn_mask_type = #te.attn_mask_type<causal>, bias_type = #te.attn_bias_type<post_scale_bias>,
// CHECK-SAME:  : (tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<1x4x8x8xbf16>)
// CHECK:       te.attention
// CHECK-NOT:   bias
// CHECK-SAME:  : (tensor<8x2x4x16xbf16>, tensor<12x2x4x16xbf16>, tensor<12x2x4x16xbf16>) ->
func.func @decoder(%x: tensor<8x2x64xbf16>, %enc: tensor<12x2x64xbf16>,
                   %g: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                   %wq: tensor<64x64xbf16>, %wkv: tensor<128x64xbf16>,
                   %wo: tensor<64x64xbf16>, %w1: tensor<128x64xbf16>,
                   %w2: tensor<64x128xbf16>, %b: tensor<1x4x8x8xbf16>)
    -> tensor<8x2x64xbf16> {
  %y = te.transformer_layer %x encoder_output(%enc) attn_ln_weight(%g)
      qkv_weight(%wqkv) proj_weight(%wo) inter_ln_weight(%g)
      inter_q_weight(%wq) inter_kv_weight(%wkv) inter_proj_weight(%wo)
      mlp_ln_weight(%g) fc1_weight(%w1) fc2_weight(%w2)
      core_attention_bias(%b)
      {num_attention_heads = 4 : i64, attention_dropout = 0.0 : f64,
       hidden_dropout = 0.0 : f64,
       normalization = #te.normalization<RMSNorm>,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<8x2x64xbf16>, tensor<12x2x64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<128x64xbf16>, tensor<64x128xbf16>,
         tensor<1x4x8x8xbf16>) -> tensor<8x2x64xbf16>
  return %y : tensor<8x2x64xbf16>
}
