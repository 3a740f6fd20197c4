// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -emit-bytecode | te-opt | FileCheck %s

// Packed sequences (qkv_format / attn_input_format thd): 3 sequences of at
// most 16 tokens in 40 tokens, 4 heads of head_dim 16 (hidden 64), 2
// key/value heads.

// CHECK-LABEL: func.func @dpa_thd
// CHECK: te.dot_product_attention {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}} cu_seqlens_q({{%[a-z0-9_]+}}) cu_seqlens_kv({{%[a-z0-9_]+}})
// CHECK-SAME: max_seqlen_kv = 16 : i64, max_seqlen_q = 16 : i64, qkv_format = #te.qkv_format<thd>
// CHECK-SAME: -> tensor<40x64xbf16>
func.func @dpa_thd(%q: tensor<40x4x16xbf16>, %k: tensor<40x2x16xbf16>,
                   %v: tensor<40x2x16xbf16>, %cu: tensor<4xi32>)
    -> tensor<40x64xbf16> {
  %o = te.dot_product_attention %q, %k, %v cu_seqlens_q(%cu)
      cu_seqlens_kv(%cu)
      {attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 16 : i64,
       max_seqlen_kv = 16 : i64}
      : (tensor<40x4x16xbf16>, tensor<40x2x16xbf16>, tensor<40x2x16xbf16>,
         tensor<4xi32>, tensor<4xi32>) -> tensor<40x64xbf16>
  return %o : tensor<40x64xbf16>
}

// CHECK-LABEL: func.func @mha_thd
// CHECK: te.multihead_attention {{%[a-z0-9_]+}} qkv_weight({{%[a-z0-9_]+}}) proj_weight({{%[a-z0-9_]+}}) rotary_pos_emb({{%[a-z0-9_]+}}) cu_seqlens({{%[a-z0-9_]+}})
// CHECK-SAME: max_seqlen = 16 : i64
// CHECK-SAME: qkv_format = #te.qkv_format<thd>
func.func @mha_thd(%x: tensor<40x64xbf16>, %wqkv: tensor<128x64xbf16>,
                   %wo: tensor<64x64xbf16>, %freqs: tensor<40x1x1x16xf32>,
                   %cu: tensor<4xi32>) -> tensor<40x64xbf16> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      rotary_pos_emb(%freqs) cu_seqlens(%cu)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 16 : i64}
      : (tensor<40x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<40x1x1x16xf32>, tensor<4xi32>) -> tensor<40x64xbf16>
  return %y : tensor<40x64xbf16>
}

// CHECK-LABEL: func.func @transformer_layer_thd
// CHECK: te.transformer_layer
// CHECK-SAME: cu_seqlens({{%[a-z0-9_]+}})
// CHECK-SAME: attn_input_format = #te.qkv_format<thd>, max_seqlen = 16 : i64
func.func @transformer_layer_thd(%x: tensor<40x64xbf16>, %g: tensor<64xbf16>,
    %b: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>, %cu: tensor<4xi32>)
    -> tensor<40x64xbf16> {
  %y = te.transformer_layer %x attn_ln_weight(%g) attn_ln_bias(%b)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b)
      fc1_weight(%w1) fc2_weight(%w2) cu_seqlens(%cu)
      {num_attention_heads = 4 : i64,
       self_attn_mask_type = #te.attn_mask_type<padding_causal>,
       attn_input_format = #te.qkv_format<thd>, max_seqlen = 16 : i64}
      : (tensor<40x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<4xi32>) -> tensor<40x64xbf16>
  return %y : tensor<40x64xbf16>
}

// The primitives: statistics [b, heads, max_seqlen_q].
// CHECK-LABEL: func.func @attention_thd
// CHECK: te.attention {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}} cu_seqlens_q({{%[a-z0-9_]+}})
// CHECK: te.attention_bwd {{.*}}, {{%[a-z0-9_]+}} cu_seqlens_q({{%[a-z0-9_]+}}) cu_seqlens_kv({{%[a-z0-9_]+}})
func.func @attention_thd(%q: tensor<40x4x16xbf16>, %k: tensor<40x2x16xbf16>,
                         %cu: tensor<4xi32>)
    -> (tensor<40x4x16xbf16>, tensor<40x2x16xbf16>) {
  %o, %lse = te.attention %q, %k, %k cu_seqlens_q(%cu)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, softmax_scale = 0.25 : f64,
       max_seqlen_q = 16 : i64, max_seqlen_kv = 16 : i64}
      : (tensor<40x4x16xbf16>, tensor<40x2x16xbf16>, tensor<40x2x16xbf16>,
         tensor<4xi32>) -> (tensor<40x4x16xbf16>, tensor<3x4x16xf32>)
  %dq, %dk, %dv = te.attention_bwd %o, %q, %k, %k, %o, %lse
      cu_seqlens_q(%cu) cu_seqlens_kv(%cu)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, softmax_scale = 0.25 : f64,
       max_seqlen_q = 16 : i64, max_seqlen_kv = 16 : i64}
      : (tensor<40x4x16xbf16>, tensor<40x4x16xbf16>, tensor<40x2x16xbf16>,
         tensor<40x2x16xbf16>, tensor<40x4x16xbf16>, tensor<3x4x16xf32>,
         tensor<4xi32>, tensor<4xi32>)
        -> (tensor<40x4x16xbf16>, tensor<40x2x16xbf16>, tensor<40x2x16xbf16>)
  return %dq, %dk : tensor<40x4x16xbf16>, tensor<40x2x16xbf16>
}
