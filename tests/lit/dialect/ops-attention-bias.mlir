// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -emit-bytecode | te-opt | FileCheck %s

// Attention bias and ALiBi (docs/attention-bias.md) on the layer ops and
// the attention primitives. Shapes are sbhd with s = 16, b = 2, 4 heads of
// head_dim 16 (hidden 64) unless noted.

// A post-scale bias of each of TE's shapes (1hss, b1ss, bhss, 11ss); the
// 1hss one takes a gradient.
// CHECK-LABEL: func.func @dpa_post_scale_bias
// CHECK-SAME: %[[B1:[^:]*]]: tensor<1x4x16x16xbf16>, %[[B2:[^:]*]]: tensor<2x1x16x16xbf16>, %[[B3:[^:]*]]: tensor<2x4x16x16xbf16>, %[[B4:[^:]*]]: tensor<1x1x16x16xbf16>
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} core_attention_bias(%[[B1]]) {bias_requires_grad, core_attention_bias_type = #te.attn_bias_type<post_scale_bias>} :
// CHECK-SAME: tensor<1x4x16x16xbf16>) -> tensor<16x2x64xbf16>
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} core_attention_bias(%[[B2]]) {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>} :
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} core_attention_bias(%[[B3]]) {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>} :
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} core_attention_bias(%[[B4]]) {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>} :
func.func @dpa_post_scale_bias(%q: tensor<16x2x4x16xbf16>,
                               %b1: tensor<1x4x16x16xbf16>,
                               %b2: tensor<2x1x16x16xbf16>,
                               %b3: tensor<2x4x16x16xbf16>,
                               %b4: tensor<1x1x16x16xbf16>) {
  %0 = te.dot_product_attention %q, %q, %q core_attention_bias(%b1)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>,
       bias_requires_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  %1 = te.dot_product_attention %q, %q, %q core_attention_bias(%b2)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x1x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  %2 = te.dot_product_attention %q, %q, %q core_attention_bias(%b3)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  %3 = te.dot_product_attention %q, %q, %q core_attention_bias(%b4)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x1x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// ALiBi: vanilla slopes, the caller's [heads] and [b, heads]; with a
// padding mask, whose operand comes first, and keys of their own length.
// CHECK-LABEL: func.func @dpa_alibi
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} {core_attention_bias_type = #te.attn_bias_type<alibi>} :
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} alibi_slopes(%{{.*}}) {attn_mask_type = #te.attn_mask_type<no_mask>, core_attention_bias_type = #te.attn_bias_type<alibi>} :
// CHECK-SAME: tensor<4xf32>) -> tensor<16x2x64xbf16>
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}}) alibi_slopes(%{{.*}}) {attn_mask_type = #te.attn_mask_type<padding>, core_attention_bias_type = #te.attn_bias_type<alibi>} :
// CHECK-SAME: tensor<2x1x1x32xi1>, tensor<2x4xf32>) -> tensor<16x2x64xbf16>
func.func @dpa_alibi(%q: tensor<16x2x4x16xbf16>, %kv: tensor<32x2x4x16xbf16>,
                     %mask: tensor<2x1x1x32xi1>, %heads: tensor<4xf32>,
                     %batch_heads: tensor<2x4xf32>) {
  %0 = te.dot_product_attention %q, %q, %q
      {core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  %1 = te.dot_product_attention %q, %kv, %kv alibi_slopes(%heads)
      {core_attention_bias_type = #te.attn_bias_type<alibi>,
       attn_mask_type = #te.attn_mask_type<no_mask>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<32x2x4x16xbf16>, tensor<4xf32>) -> tensor<16x2x64xbf16>
  %2 = te.dot_product_attention %q, %kv, %kv mask(%mask)
      alibi_slopes(%batch_heads)
      {core_attention_bias_type = #te.attn_bias_type<alibi>,
       attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<32x2x4x16xbf16>, tensor<2x1x1x32xi1>, tensor<2x4xf32>)
        -> tensor<16x2x64xbf16>
  return
}

// A cross-attention block's bias spans the encoder's 32 keys.
// CHECK-LABEL: func.func @mha_cross_bias
// CHECK: te.multihead_attention %{{.*}} encoder_output(%{{.*}}) qkv_weight(%{{.*}}) kv_weight(%{{.*}}) proj_weight(%{{.*}}) core_attention_bias(%{{.*}}) {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>, num_attention_heads = 4 : i64} :
func.func @mha_cross_bias(%x: tensor<16x2x64xbf16>, %enc: tensor<32x2x64xbf16>,
                          %wq: tensor<64x64xbf16>, %wkv: tensor<128x64xbf16>,
                          %wo: tensor<64x64xbf16>,
                          %bias: tensor<2x4x16x32xbf16>)
    -> tensor<16x2x64xbf16> {
  %y = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) core_attention_bias(%bias)
      {num_attention_heads = 4 : i64,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x64xbf16>, tensor<32x2x64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<2x4x16x32xbf16>)
        -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// CHECK-LABEL: func.func @layer_alibi
// CHECK: te.transformer_layer {{.*}} fc2_weight(%{{.*}}) alibi_slopes(%{{.*}}) {core_attention_bias_type = #te.attn_bias_type<alibi>, normalization = #te.normalization<RMSNorm>, num_attention_heads = 4 : i64} :
func.func @layer_alibi(%x: tensor<16x2x64xbf16>, %g: tensor<64xbf16>,
                       %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>,
                       %w1: tensor<128x64xbf16>, %w2: tensor<64x128xbf16>,
                       %slopes: tensor<4xf32>) -> tensor<16x2x64xbf16> {
  %y = te.transformer_layer %x attn_ln_weight(%g) qkv_weight(%wqkv)
      proj_weight(%wo) mlp_ln_weight(%g) fc1_weight(%w1) fc2_weight(%w2)
      alibi_slopes(%slopes)
      {num_attention_heads = 4 : i64,
       normalization = #te.normalization<RMSNorm>,
       core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<192x64xbf16>,
         tensor<64x64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>,
         tensor<64x128xbf16>, tensor<4xf32>) -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// The primitives: te.attention with a bias, te.attention_bwd returning its
// gradient (a fourth result), and ALiBi.
// CHECK-LABEL: func.func @primitives
// CHECK: te.attention %{{.*}}, %{{.*}}, %{{.*}} bias(%{{.*}}) {attn_mask_type = #te.attn_mask_type<causal>, bias_grad, bias_type = #te.attn_bias_type<post_scale_bias>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 2.500000e-01 : f64}
// CHECK: te.attention_bwd {{.*}} bias(%{{.*}}) {attn_mask_type = #te.attn_mask_type<causal>, bias_grad, bias_type = #te.attn_bias_type<post_scale_bias>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 2.500000e-01 : f64}
// CHECK-SAME: -> (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
// CHECK: te.attention %{{.*}}, %{{.*}}, %{{.*}} alibi_slopes(%{{.*}}) {attn_mask_type = #te.attn_mask_type<no_mask>, bias_type = #te.attn_bias_type<alibi>
// CHECK: te.attention_bwd {{.*}} alibi_slopes(%{{.*}}) {attn_mask_type = #te.attn_mask_type<no_mask>, bias_type = #te.attn_bias_type<alibi>
// CHECK-SAME: -> (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
func.func @primitives(%q: tensor<16x2x4x16xbf16>, %bias: tensor<1x4x16x16xbf16>,
                      %slopes: tensor<2x4xf32>) {
  %o, %lse = te.attention %q, %q, %q bias(%bias)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<post_scale_bias>, bias_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
        -> (tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>)
  %dq, %dk, %dv, %db = te.attention_bwd %o, %q, %q, %q, %o, %lse bias(%bias)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<post_scale_bias>, bias_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>, tensor<1x4x16x16xbf16>)
        -> (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
            tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
  %o2, %lse2 = te.attention %q, %q, %q alibi_slopes(%slopes)
      {attn_mask_type = #te.attn_mask_type<no_mask>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4xf32>)
        -> (tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>)
  %dq2, %dk2, %dv2 = te.attention_bwd %o2, %q, %q, %q, %o2, %lse2
      alibi_slopes(%slopes)
      {attn_mask_type = #te.attn_mask_type<no_mask>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>, tensor<2x4xf32>)
        -> (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
            tensor<16x2x4x16xbf16>)
  return
}
