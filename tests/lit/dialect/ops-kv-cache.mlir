// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -te-decompose=inference=true | FileCheck %s --check-prefix=DECOMPOSED

// KV cache (inference): 3 sequences bringing at most 4 new tokens each,
// packed in 16 tokens, over caches of 32 rows; 4 heads of head_dim 16
// (hidden 64), 2 key/value heads.

// CHECK-LABEL: func.func @primitive
// CHECK: te.kv_cache_attention {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}} cu_seqlens_q({{%[a-z0-9_]+}}) cu_seqlens_kv({{%[a-z0-9_]+}})
// CHECK-SAME: attn_mask_type = #te.attn_mask_type<padding_causal_bottom_right>, max_seqlen_q = 4 : i64
func.func @primitive(%q: tensor<16x4x16xbf16>, %k: tensor<16x2x16xbf16>,
                     %kc: tensor<3x32x2x16xbf16>, %vc: tensor<3x32x2x16xbf16>,
                     %cq: tensor<4xi32>, %ckv: tensor<4xi32>)
    -> tensor<16x4x16xbf16> {
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%ckv)
      {attn_mask_type = #te.attn_mask_type<padding_causal_bottom_right>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<3x32x2x16xbf16>, tensor<3x32x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>) -> tensor<16x4x16xbf16>
  return %o : tensor<16x4x16xbf16>
}

// CHECK-LABEL: func.func @mha
// CHECK: te.multihead_attention
// CHECK-SAME: cu_seqlens({{%[a-z0-9_]+}}) cu_seqlens_kv({{%[a-z0-9_]+}}) key_cache({{%[a-z0-9_]+}}) value_cache({{%[a-z0-9_]+}})
// DECOMPOSED-LABEL: func.func @mha
// DECOMPOSED: te.kv_cache_attention
// DECOMPOSED-SAME: attn_mask_type = #te.attn_mask_type<padding_causal_bottom_right>
// DECOMPOSED-SAME: max_seqlen_q = 4 : i64
// DECOMPOSED-NOT: te.attention
func.func @mha(%x: tensor<16x64xbf16>, %wqkv: tensor<128x64xbf16>,
               %wo: tensor<64x64xbf16>, %cq: tensor<4xi32>,
               %ckv: tensor<4xi32>, %kc: tensor<3x32x2x16xbf16>,
               %vc: tensor<3x32x2x16xbf16>) -> tensor<16x64xbf16> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%ckv) key_cache(%kc) value_cache(%vc)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<3x32x2x16xbf16>,
         tensor<3x32x2x16xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// CHECK-LABEL: func.func @dpa
// CHECK: te.dot_product_attention
// CHECK-SAME: key_cache({{%[a-z0-9_]+}}) value_cache({{%[a-z0-9_]+}})
// DECOMPOSED-LABEL: func.func @dpa
// DECOMPOSED: te.kv_cache_attention
// DECOMPOSED-SAME: attn_mask_type = #te.attn_mask_type<padding>
func.func @dpa(%q: tensor<16x4x16xbf16>, %k: tensor<16x2x16xbf16>,
               %cq: tensor<4xi32>, %ckv: tensor<4xi32>,
               %kc: tensor<3x32x2x16xbf16>, %vc: tensor<3x32x2x16xbf16>)
    -> tensor<16x64xbf16> {
  %o = te.dot_product_attention %q, %k, %k cu_seqlens_q(%cq)
      cu_seqlens_kv(%ckv) key_cache(%kc) value_cache(%vc)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<3x32x2x16xbf16>,
         tensor<3x32x2x16xbf16>) -> tensor<16x64xbf16>
  return %o : tensor<16x64xbf16>
}

// Paged caches (docs/paged-kv-cache.md): pools of 10 pages of 8 rows, and
// a page table of 4 pages a sequence (32 rows).

// CHECK-LABEL: func.func @primitive_paged
// CHECK: te.kv_cache_attention {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}}, {{%[a-z0-9_]+}} cu_seqlens_q({{%[a-z0-9_]+}}) cu_seqlens_kv({{%[a-z0-9_]+}}) page_table({{%[a-z0-9_]+}})
// CHECK-SAME: tensor<10x8x2x16xbf16>, tensor<10x8x2x16xbf16>, tensor<4xi32>, tensor<4xi32>, tensor<3x4xi32>) -> tensor<16x4x16xbf16>
func.func @primitive_paged(%q: tensor<16x4x16xbf16>, %k: tensor<16x2x16xbf16>,
                           %kc: tensor<10x8x2x16xbf16>,
                           %vc: tensor<10x8x2x16xbf16>, %cq: tensor<4xi32>,
                           %ckv: tensor<4xi32>, %pt: tensor<3x4xi32>)
    -> tensor<16x4x16xbf16> {
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%ckv) page_table(%pt)
      {attn_mask_type = #te.attn_mask_type<padding_causal_bottom_right>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<10x8x2x16xbf16>, tensor<10x8x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>, tensor<3x4xi32>) -> tensor<16x4x16xbf16>
  return %o : tensor<16x4x16xbf16>
}

// CHECK-LABEL: func.func @mha_paged
// CHECK: te.multihead_attention
// CHECK-SAME: cu_seqlens_kv([[CKV:%[a-z0-9_]+]]) key_cache({{%[a-z0-9_]+}}) value_cache({{%[a-z0-9_]+}}) page_table({{%[a-z0-9_]+}})
// DECOMPOSED-LABEL: func.func @mha_paged
// DECOMPOSED-SAME: %[[PT:[a-z0-9_]+]]: tensor<3x4xi32>
// DECOMPOSED: te.kv_cache_attention
// DECOMPOSED-SAME: page_table(%[[PT]])
// DECOMPOSED-SAME: tensor<10x8x2x16xbf16>, tensor<10x8x2x16xbf16>, tensor<4xi32>, tensor<4xi32>, tensor<3x4xi32>)
func.func @mha_paged(%x: tensor<16x64xbf16>, %wqkv: tensor<128x64xbf16>,
                     %wo: tensor<64x64xbf16>, %cq: tensor<4xi32>,
                     %ckv: tensor<4xi32>, %kc: tensor<10x8x2x16xbf16>,
                     %vc: tensor<10x8x2x16xbf16>, %pt: tensor<3x4xi32>)
    -> tensor<16x64xbf16> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%ckv) key_cache(%kc) value_cache(%vc)
      page_table(%pt)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<10x8x2x16xbf16>,
         tensor<10x8x2x16xbf16>, tensor<3x4xi32>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// CHECK-LABEL: func.func @dpa_paged
// CHECK: te.dot_product_attention
// CHECK-SAME: key_cache({{%[a-z0-9_]+}}) value_cache({{%[a-z0-9_]+}}) page_table({{%[a-z0-9_]+}})
// DECOMPOSED-LABEL: func.func @dpa_paged
// DECOMPOSED-SAME: %[[PT:[a-z0-9_]+]]: tensor<3x4xi32>
// DECOMPOSED: te.kv_cache_attention
// DECOMPOSED-SAME: page_table(%[[PT]])
// DECOMPOSED-SAME: attn_mask_type = #te.attn_mask_type<padding>
func.func @dpa_paged(%q: tensor<16x4x16xbf16>, %k: tensor<16x2x16xbf16>,
                     %cq: tensor<4xi32>, %ckv: tensor<4xi32>,
                     %kc: tensor<10x8x2x16xbf16>, %vc: tensor<10x8x2x16xbf16>,
                     %pt: tensor<3x4xi32>) -> tensor<16x64xbf16> {
  %o = te.dot_product_attention %q, %k, %k cu_seqlens_q(%cq)
      cu_seqlens_kv(%ckv) key_cache(%kc) value_cache(%vc) page_table(%pt)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<10x8x2x16xbf16>,
         tensor<10x8x2x16xbf16>, tensor<3x4xi32>) -> tensor<16x64xbf16>
  return %o : tensor<16x64xbf16>
}
