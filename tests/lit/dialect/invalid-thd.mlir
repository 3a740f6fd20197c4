// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of packed sequences (thd): 40 tokens, 3 sequences of at most
// 16, 4 heads of head_dim 16 (hidden 64).

func.func @dpa_thd_without_cu_seqlens(%q: tensor<40x4x16xbf16>) {
  // expected-error @+1 {{packed sequences (thd) need 'cu_seqlens_q' (where each sequence starts) and 'max_seqlen_q' (the longest length)}}
  %o = te.dot_product_attention %q, %q, %q
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>}
      : (tensor<40x4x16xbf16>, tensor<40x4x16xbf16>, tensor<40x4x16xbf16>)
        -> tensor<40x64xbf16>
  return
}

// -----

func.func @dpa_thd_rank4(%q: tensor<40x1x4x16xbf16>, %cu: tensor<4xi32>) {
  // expected-error @+1 {{'query' must have rank 3 ([t, h, d] for thd), got 'tensor<40x1x4x16xbf16>'}}
  %o = te.dot_product_attention %q, %q, %q cu_seqlens_q(%cu)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 16 : i64}
      : (tensor<40x1x4x16xbf16>, tensor<40x1x4x16xbf16>,
         tensor<40x1x4x16xbf16>, tensor<4xi32>) -> tensor<40x64xbf16>
  return
}

// -----

func.func @dpa_thd_causal(%q: tensor<40x4x16xbf16>, %cu: tensor<4xi32>) {
  // expected-error @+1 {{packed sequences (thd) need 'attn_mask_type' padding or padding_causal (each sequence attends to itself alone), got causal}}
  %o = te.dot_product_attention %q, %q, %q cu_seqlens_q(%cu)
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 16 : i64}
      : (tensor<40x4x16xbf16>, tensor<40x4x16xbf16>, tensor<40x4x16xbf16>,
         tensor<4xi32>) -> tensor<40x64xbf16>
  return
}

// -----

func.func @dpa_thd_cu_seqlens_i64(%q: tensor<40x4x16xbf16>,
                                  %cu: tensor<4xi64>) {
  // expected-error @+1 {{'cu_seqlens_q' must be i32 [b + 1] with b >= 1, got 'tensor<4xi64>'}}
  %o = te.dot_product_attention %q, %q, %q cu_seqlens_q(%cu)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 16 : i64}
      : (tensor<40x4x16xbf16>, tensor<40x4x16xbf16>, tensor<40x4x16xbf16>,
         tensor<4xi64>) -> tensor<40x64xbf16>
  return
}

// -----

func.func @dpa_cu_seqlens_without_thd(%q: tensor<16x2x4x16xbf16>,
                                      %cu: tensor<3xi32>) {
  // expected-error @+1 {{'cu_seqlens_q', 'cu_seqlens_kv', 'max_seqlen_q' and 'max_seqlen_kv' belong to packed sequences (qkv_format = thd)}}
  %o = te.dot_product_attention %q, %q, %q cu_seqlens_q(%cu)
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<3xi32>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_thd_rank3(%x: tensor<40x1x64xbf16>, %wqkv: tensor<192x64xbf16>,
                         %wo: tensor<64x64xbf16>, %cu: tensor<4xi32>) {
  // expected-error @+1 {{'input' must have rank 2 ([t, hidden] for thd), got rank 3}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cu)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 16 : i64}
      : (tensor<40x1x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>) -> tensor<40x1x64xbf16>
  return
}

// -----

func.func @mha_thd_without_max_seqlen(%x: tensor<40x64xbf16>,
                                      %wqkv: tensor<192x64xbf16>,
                                      %wo: tensor<64x64xbf16>,
                                      %cu: tensor<4xi32>) {
  // expected-error @+1 {{packed sequences (thd) need 'cu_seqlens' (where each sequence starts) and 'max_seqlen' (the longest length)}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cu)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>}
      : (tensor<40x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>) -> tensor<40x64xbf16>
  return
}

// -----

func.func @mha_thd_mask_operand(%x: tensor<40x64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x64xbf16>, %cu: tensor<4xi32>,
                                %m: tensor<3x1x1x16xi1>) {
  // expected-error @+1 {{packed sequences (thd) take their lengths from 'cu_seqlens', not from 'mask'}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) mask(%m)
      cu_seqlens(%cu)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 16 : i64}
      : (tensor<40x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<3x1x1x16xi1>, tensor<4xi32>) -> tensor<40x64xbf16>
  return
}

// -----

// Packed rotary angles have a row per token.
func.func @mha_thd_rotary_rows(%x: tensor<40x64xbf16>,
                               %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>, %cu: tensor<4xi32>,
                               %f: tensor<16x1x1x16xf32>) {
  // expected-error @+1 {{'rotary_pos_emb' must be f32 of shape [t, 1, 1, r] (each token's angles) = [40, 1, 1, r] with r even and at most kv_channels (16), got 'tensor<16x1x1x16xf32>'}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      rotary_pos_emb(%f) cu_seqlens(%cu)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 16 : i64}
      : (tensor<40x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<16x1x1x16xf32>, tensor<4xi32>) -> tensor<40x64xbf16>
  return
}

// -----

func.func @attention_thd_lse(%q: tensor<40x4x16xbf16>, %cu: tensor<4xi32>) {
  // expected-error @+1 {{'softmax_lse' must be 'tensor<3x4x16xf32>'}}
  %o, %lse = te.attention %q, %q, %q cu_seqlens_q(%cu)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, softmax_scale = 0.25 : f64,
       max_seqlen_q = 16 : i64, max_seqlen_kv = 16 : i64}
      : (tensor<40x4x16xbf16>, tensor<40x4x16xbf16>, tensor<40x4x16xbf16>,
         tensor<4xi32>) -> (tensor<40x4x16xbf16>, tensor<3x4x40xf32>)
  return
}

// -----

func.func @rotary_thd(%x: tensor<40x1x4x16xbf16>, %f: tensor<40x1x1x16xf32>) {
  // expected-error @+1 {{takes sbhd or bshd; packed (thd) tokens rotate as a [t, 1, h, d] sbhd view with per-token angles [t, 1, 1, r]}}
  %y = te.rotary %x, %f {qkv_format = #te.qkv_format<thd>}
      : tensor<40x1x4x16xbf16>, tensor<40x1x1x16xf32> -> tensor<40x1x4x16xbf16>
  return
}
