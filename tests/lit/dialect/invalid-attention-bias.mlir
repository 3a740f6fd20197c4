// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of attention bias and ALiBi (docs/attention-bias.md) on the
// layer ops and the attention primitives. Shapes are sbhd with s = 16,
// b = 2, 4 heads of head_dim 16 (hidden 64) unless noted.

//===----------------------------------------------------------------------===//
// te.dot_product_attention
//===----------------------------------------------------------------------===//

func.func @post_scale_without_bias(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{core_attention_bias_type = post_scale_bias requires a 'core_attention_bias' operand}}
  %o = te.dot_product_attention %q, %q, %q
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @bias_without_type(%q: tensor<16x2x4x16xbf16>,
                             %b: tensor<1x4x16x16xbf16>) {
  // expected-error @+1 {{core_attention_bias_type = no_bias takes no 'core_attention_bias' operand}}
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @alibi_with_bias(%q: tensor<16x2x4x16xbf16>,
                           %b: tensor<1x4x16x16xbf16>) {
  // expected-error @+1 {{core_attention_bias_type = alibi takes no 'core_attention_bias' operand}}
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @slopes_without_alibi(%q: tensor<16x2x4x16xbf16>,
                                %b: tensor<1x4x16x16xbf16>,
                                %s: tensor<4xf32>) {
  // expected-error @+1 {{'alibi_slopes' needs core_attention_bias_type = alibi, got post_scale_bias}}
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      alibi_slopes(%s)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>, tensor<4xf32>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @grad_of_alibi(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'bias_requires_grad' needs core_attention_bias_type = post_scale_bias (ALiBi slopes take no gradient), got alibi}}
  %o = te.dot_product_attention %q, %q, %q
      {core_attention_bias_type = #te.attn_bias_type<alibi>,
       bias_requires_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

// The bias spans the 32 keys.
func.func @bias_shape(%q: tensor<16x2x4x16xbf16>, %kv: tensor<32x2x4x16xbf16>,
                      %b: tensor<1x4x16x16xbf16>) {
  // expected-error @+1 {{'core_attention_bias' must be 'bf16' of shape [1 or b, 1 or heads, s_q, s_kv] = [1 or 2, 1 or 4, 16, 32] (q's element type), got 'tensor<1x4x16x16xbf16>'}}
  %o = te.dot_product_attention %q, %kv, %kv core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<32x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @bias_heads(%q: tensor<16x2x4x16xbf16>, %b: tensor<1x2x16x16xbf16>) {
  // expected-error @+1 {{'core_attention_bias' must be 'bf16' of shape [1 or b, 1 or heads, s_q, s_kv] = [1 or 2, 1 or 4, 16, 16] (q's element type), got 'tensor<1x2x16x16xbf16>'}}
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x2x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @bias_element_type(%q: tensor<16x2x4x16xbf16>,
                             %b: tensor<1x4x16x16xf32>) {
  // expected-error @+1 {{'core_attention_bias' must be 'bf16' of shape [1 or b, 1 or heads, s_q, s_kv] = [1 or 2, 1 or 4, 16, 16] (q's element type), got 'tensor<1x4x16x16xf32>'}}
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x4x16x16xf32>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

// Only TE's 1hss bias takes a gradient.
func.func @grad_of_bhss(%q: tensor<16x2x4x16xbf16>,
                        %b: tensor<2x4x16x16xbf16>) {
  // expected-error @+1 {{'bias_requires_grad' needs 'core_attention_bias' of shape [1, heads, s_q, s_kv] (1hss: the bias gradient is summed over the batch), got [2, 4, 16, 16] (bhss)}}
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>,
       bias_requires_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @grad_of_11ss(%q: tensor<16x2x4x16xbf16>,
                        %b: tensor<1x1x16x16xbf16>) {
  // expected-error @+1 {{got [1, 1, 16, 16] (11ss)}}
  %o = te.dot_product_attention %q, %q, %q core_attention_bias(%b)
      {core_attention_bias_type = #te.attn_bias_type<post_scale_bias>,
       bias_requires_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<1x1x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @slopes_shape(%q: tensor<16x2x4x16xbf16>, %s: tensor<4x2xf32>) {
  // expected-error @+1 {{'alibi_slopes' must be f32 [heads] = [4] or [b, heads] = [2, 4], got 'tensor<4x2xf32>'}}
  %o = te.dot_product_attention %q, %q, %q alibi_slopes(%s)
      {core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<4x2xf32>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @slopes_type(%q: tensor<16x2x4x16xbf16>, %s: tensor<4xbf16>) {
  // expected-error @+1 {{'alibi_slopes' must be f32 [heads] = [4] or [b, heads] = [2, 4], got 'tensor<4xbf16>'}}
  %o = te.dot_product_attention %q, %q, %q alibi_slopes(%s)
      {core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<4xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @arbitrary_mask(%q: tensor<16x2x4x16xbf16>,
                          %m: tensor<2x4x16x16xi1>) {
  // expected-error @+1 {{'core_attention_bias_type' alibi is not supported with the arbitrary mask type (fold the mask into a post_scale_bias, -10000 where masked, with the no_mask type)}}
  %o = te.dot_product_attention %q, %q, %q mask(%m)
      {core_attention_bias_type = #te.attn_bias_type<alibi>,
       attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @packed(%q: tensor<40x4x16xbf16>, %cu: tensor<4xi32>,
                  %b: tensor<1x4x16x16xbf16>) {
  // expected-error @+1 {{'core_attention_bias_type' post_scale_bias is not supported with packed sequences (thd)}}
  %o = te.dot_product_attention %q, %q, %q cu_seqlens_q(%cu)
      core_attention_bias(%b)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 16 : i64,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<40x4x16xbf16>, tensor<40x4x16xbf16>, tensor<40x4x16xbf16>,
         tensor<4xi32>, tensor<1x4x16x16xbf16>) -> tensor<40x64xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.multihead_attention and te.transformer_layer
//===----------------------------------------------------------------------===//

// With a KV cache (the step's new tokens), no bias and no ALiBi.
func.func @mha_kv_cache(%x: tensor<16x64xbf16>, %wqkv: tensor<128x64xbf16>,
                        %wo: tensor<64x64xbf16>, %cq: tensor<4xi32>,
                        %ckv: tensor<4xi32>, %kc: tensor<3x32x2x16xbf16>,
                        %vc: tensor<3x32x2x16xbf16>) {
  // expected-error @+1 {{'core_attention_bias_type' alibi is not supported with a KV cache (inference)}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%ckv) key_cache(%kc) value_cache(%vc)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64,
       core_attention_bias_type = #te.attn_bias_type<alibi>}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<3x32x2x16xbf16>,
         tensor<3x32x2x16xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// Cross-attention: the bias spans the encoder's 32 keys, not the 16 queries.
func.func @mha_cross_bias_shape(%x: tensor<16x2x64xbf16>,
                                %enc: tensor<32x2x64xbf16>,
                                %wq: tensor<64x64xbf16>,
                                %wkv: tensor<128x64xbf16>,
                                %wo: tensor<64x64xbf16>,
                                %bias: tensor<2x4x16x16xbf16>) {
  // expected-error @+1 {{'core_attention_bias' must be 'bf16' of shape [1 or b, 1 or heads, s_q, s_kv] = [1 or 2, 1 or 4, 16, 32] (q's element type), got 'tensor<2x4x16x16xbf16>'}}
  %y = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) core_attention_bias(%bias)
      {num_attention_heads = 4 : i64,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x64xbf16>, tensor<32x2x64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<2x4x16x16xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

// A decoder layer's bias is its self-attention's: [.., s, s] = 16 x 16,
// whatever the encoder's length.
func.func @decoder_bias_shape(%x: tensor<16x2x64xbf16>,
                              %enc: tensor<32x2x64xbf16>,
                              %g: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                              %wq: tensor<64x64xbf16>,
                              %wkv: tensor<128x64xbf16>,
                              %wo: tensor<64x64xbf16>,
                              %w1: tensor<128x64xbf16>,
                              %w2: tensor<64x128xbf16>,
                              %bias: tensor<1x4x16x32xbf16>) {
  // expected-error @+1 {{'core_attention_bias' must be 'bf16' of shape [1 or b, 1 or heads, s_q, s_kv] = [1 or 2, 1 or 4, 16, 16] (q's element type), got 'tensor<1x4x16x32xbf16>'}}
  %y = te.transformer_layer %x encoder_output(%enc) attn_ln_weight(%g)
      qkv_weight(%wqkv) proj_weight(%wo) inter_ln_weight(%g)
      inter_q_weight(%wq) inter_kv_weight(%wkv) inter_proj_weight(%wo)
      mlp_ln_weight(%g) fc1_weight(%w1) fc2_weight(%w2)
      core_attention_bias(%bias)
      {num_attention_heads = 4 : i64,
       normalization = #te.normalization<RMSNorm>,
       core_attention_bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x64xbf16>, tensor<32x2x64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<128x64xbf16>, tensor<64x128xbf16>,
         tensor<1x4x16x32xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @layer_grad_without_bias(%x: tensor<16x2x64xbf16>,
                                   %g: tensor<64xbf16>,
                                   %wqkv: tensor<192x64xbf16>,
                                   %wo: tensor<64x64xbf16>,
                                   %w1: tensor<128x64xbf16>,
                                   %w2: tensor<64x128xbf16>) {
  // expected-error @+1 {{'bias_requires_grad' needs core_attention_bias_type = post_scale_bias (ALiBi slopes take no gradient), got no_bias}}
  %y = te.transformer_layer %x attn_ln_weight(%g) qkv_weight(%wqkv)
      proj_weight(%wo) mlp_ln_weight(%g) fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       normalization = #te.normalization<RMSNorm>, bias_requires_grad}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<192x64xbf16>,
         tensor<64x64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>,
         tensor<64x128xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.attention and te.attention_bwd
//===----------------------------------------------------------------------===//

func.func @attention_without_bias(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{bias_type = post_scale_bias requires a 'bias' operand}}
  %o, %lse = te.attention %q, %q, %q
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>)
        -> (tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @attention_grad_b1ss(%q: tensor<16x2x4x16xbf16>,
                               %b: tensor<2x1x16x16xbf16>) {
  // expected-error @+1 {{'bias_grad' needs 'bias' of shape [1, heads, s_q, s_kv] (1hss: the bias gradient is summed over the batch), got [2, 1, 16, 16] (b1ss)}}
  %o, %lse = te.attention %q, %q, %q bias(%b)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<post_scale_bias>, bias_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x1x16x16xbf16>)
        -> (tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @attention_packed(%q: tensor<40x4x16xbf16>, %cu: tensor<4xi32>) {
  // expected-error @+1 {{'bias_type' alibi is not supported with packed sequences (thd)}}
  %o, %lse = te.attention %q, %q, %q cu_seqlens_q(%cu)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, softmax_scale = 0.25 : f64,
       max_seqlen_q = 16 : i64, max_seqlen_kv = 16 : i64,
       bias_type = #te.attn_bias_type<alibi>}
      : (tensor<40x4x16xbf16>, tensor<40x4x16xbf16>, tensor<40x4x16xbf16>,
         tensor<4xi32>) -> (tensor<40x4x16xbf16>, tensor<3x4x16xf32>)
  return
}

// -----

func.func @bwd_without_dbias(%q: tensor<16x2x4x16xbf16>,
                             %lse: tensor<2x4x16xf32>,
                             %b: tensor<1x4x16x16xbf16>) {
  // expected-error @+1 {{the 'dbias' result must be present exactly when 'bias_grad' is set}}
  %dq, %dk, %dv = te.attention_bwd %q, %q, %q, %q, %q, %lse bias(%b)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<post_scale_bias>, bias_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>, tensor<1x4x16x16xbf16>)
        -> (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
            tensor<16x2x4x16xbf16>)
  return
}

// -----

func.func @bwd_dbias_without_grad(%q: tensor<16x2x4x16xbf16>,
                                  %lse: tensor<2x4x16xf32>,
                                  %b: tensor<1x4x16x16xbf16>) {
  // expected-error @+1 {{the 'dbias' result must be present exactly when 'bias_grad' is set}}
  %dq, %dk, %dv, %db = te.attention_bwd %q, %q, %q, %q, %q, %lse bias(%b)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<post_scale_bias>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>, tensor<1x4x16x16xbf16>)
        -> (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
            tensor<16x2x4x16xbf16>, tensor<1x4x16x16xbf16>)
  return
}

// -----

func.func @bwd_dbias_type(%q: tensor<16x2x4x16xbf16>, %lse: tensor<2x4x16xf32>,
                          %b: tensor<1x4x16x16xbf16>) {
  // expected-error @+1 {{'dbias' must be 'tensor<1x4x16x16xbf16>', got 'tensor<1x4x16x16xf32>'}}
  %dq, %dk, %dv, %db = te.attention_bwd %q, %q, %q, %q, %q, %lse bias(%b)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       bias_type = #te.attn_bias_type<post_scale_bias>, bias_grad}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>, tensor<1x4x16x16xbf16>)
        -> (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
            tensor<16x2x4x16xbf16>, tensor<1x4x16x16xf32>)
  return
}
