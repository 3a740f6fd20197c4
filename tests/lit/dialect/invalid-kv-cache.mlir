// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the KV cache: 3 sequences, at most 4 new tokens each in
// 16, caches of 32 rows, 4 heads of head_dim 16, 2 key/value heads.

func.func @cache_not_an_argument(%q: tensor<16x4x16xbf16>,
                                 %k: tensor<16x2x16xbf16>,
                                 %vc: tensor<3x32x2x16xbf16>,
                                 %cq: tensor<4xi32>) {
  %kc = te.reshape %vc : tensor<3x32x2x16xbf16> -> tensor<3x32x2x16xbf16>
  // expected-error @+1 {{'key_cache' must be an argument of the function (the caller's cache, which the op updates in place)}}
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq)
      {attn_mask_type = #te.attn_mask_type<padding>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<3x32x2x16xbf16>, tensor<3x32x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>) -> tensor<16x4x16xbf16>
  return
}

// -----

func.func @top_left_causal(%q: tensor<16x4x16xbf16>, %k: tensor<16x2x16xbf16>,
                           %kc: tensor<3x32x2x16xbf16>,
                           %vc: tensor<3x32x2x16xbf16>, %cq: tensor<4xi32>) {
  // expected-error @+1 {{'attn_mask_type' must be padding or padding_causal_bottom_right (new tokens see the cache up to their own position), got padding_causal}}
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq)
      {attn_mask_type = #te.attn_mask_type<padding_causal>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<3x32x2x16xbf16>, tensor<3x32x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>) -> tensor<16x4x16xbf16>
  return
}

// -----

func.func @cache_batch(%q: tensor<16x4x16xbf16>, %k: tensor<16x2x16xbf16>,
                       %kc: tensor<2x32x2x16xbf16>,
                       %vc: tensor<2x32x2x16xbf16>, %cq: tensor<4xi32>) {
  // expected-error @+1 {{key_cache must be [b, s_cache, kv_heads, d] = [3, s_cache, 2, 16], got 'tensor<2x32x2x16xbf16>'}}
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq)
      {attn_mask_type = #te.attn_mask_type<padding>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<2x32x2x16xbf16>, tensor<2x32x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>) -> tensor<16x4x16xbf16>
  return
}

// -----

func.func @mha_cache_without_thd(%x: tensor<4x4x64xbf16>,
                                 %wqkv: tensor<128x64xbf16>,
                                 %wo: tensor<64x64xbf16>,
                                 %ckv: tensor<5xi32>,
                                 %kc: tensor<4x32x2x16xbf16>) {
  // expected-error @+1 {{a KV cache needs packed new tokens (qkv_format = thd, with 'cu_seqlens')}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens_kv(%ckv) key_cache(%kc) value_cache(%kc)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64}
      : (tensor<4x4x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<5xi32>, tensor<4x32x2x16xbf16>, tensor<4x32x2x16xbf16>)
        -> tensor<4x4x64xbf16>
  return
}

// -----

func.func @mha_cache_rows(%x: tensor<16x64xbf16>, %wqkv: tensor<128x64xbf16>,
                          %wo: tensor<64x64xbf16>, %cq: tensor<4xi32>,
                          %kc: tensor<3x2x2x16xbf16>,
                          %vc: tensor<3x2x2x16xbf16>) {
  // expected-error @+1 {{'key_cache' holds 2 tokens a sequence, fewer than the 4 new tokens a sequence may bring (max_seqlen)}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%cq) key_cache(%kc) value_cache(%vc)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<3x2x2x16xbf16>,
         tensor<3x2x2x16xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @mha_stray_cu_seqlens_kv(%x: tensor<16x64xbf16>,
                                   %wqkv: tensor<128x64xbf16>,
                                   %wo: tensor<64x64xbf16>,
                                   %cq: tensor<4xi32>) {
  // expected-error @+1 {{'cu_seqlens_kv' belongs to the KV cache ('key_cache' and 'value_cache')}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%cq)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>) -> tensor<16x64xbf16>
  return
}

// -----

// Paged caches (docs/paged-kv-cache.md): pools of 10 pages of 8 rows.

func.func @paged_table_batch(%q: tensor<16x4x16xbf16>,
                             %k: tensor<16x2x16xbf16>,
                             %kc: tensor<10x8x2x16xbf16>,
                             %vc: tensor<10x8x2x16xbf16>, %cq: tensor<4xi32>,
                             %pt: tensor<2x4xi32>) {
  // expected-error @+1 {{'page_table' must be i32 [b, max_pages] = [3, max_pages] (the pages of each sequence), got 'tensor<2x4xi32>'}}
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq) page_table(%pt)
      {attn_mask_type = #te.attn_mask_type<padding>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<10x8x2x16xbf16>, tensor<10x8x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>, tensor<2x4xi32>) -> tensor<16x4x16xbf16>
  return
}

// -----

func.func @paged_table_type(%q: tensor<16x4x16xbf16>,
                            %k: tensor<16x2x16xbf16>,
                            %kc: tensor<10x8x2x16xbf16>,
                            %vc: tensor<10x8x2x16xbf16>, %cq: tensor<4xi32>,
                            %pt: tensor<3x4xi64>) {
  // expected-error @+1 {{'page_table' must be i32 [b, max_pages] = [3, max_pages] (the pages of each sequence), got 'tensor<3x4xi64>'}}
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq) page_table(%pt)
      {attn_mask_type = #te.attn_mask_type<padding>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<10x8x2x16xbf16>, tensor<10x8x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>, tensor<3x4xi64>) -> tensor<16x4x16xbf16>
  return
}

// -----

func.func @paged_cache_heads(%q: tensor<16x4x16xbf16>,
                             %k: tensor<16x2x16xbf16>,
                             %kc: tensor<10x8x4x16xbf16>,
                             %vc: tensor<10x8x4x16xbf16>, %cq: tensor<4xi32>,
                             %pt: tensor<3x4xi32>) {
  // expected-error @+1 {{key_cache must be paged [pages, page_size, kv_heads, d] = [pages, page_size, 2, 16], got 'tensor<10x8x4x16xbf16>'}}
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq) page_table(%pt)
      {attn_mask_type = #te.attn_mask_type<padding>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<10x8x4x16xbf16>, tensor<10x8x4x16xbf16>, tensor<4xi32>,
         tensor<4xi32>, tensor<3x4xi32>) -> tensor<16x4x16xbf16>
  return
}

// -----

func.func @paged_rows(%q: tensor<16x4x16xbf16>, %k: tensor<16x2x16xbf16>,
                      %kc: tensor<10x1x2x16xbf16>,
                      %vc: tensor<10x1x2x16xbf16>, %cq: tensor<4xi32>,
                      %pt: tensor<3x2xi32>) {
  // expected-error @+1 {{'max_seqlen_q' (4) exceeds the paged cache's 2 rows}}
  %o = te.kv_cache_attention %q, %k, %k, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq) page_table(%pt)
      {attn_mask_type = #te.attn_mask_type<padding>,
       softmax_scale = 0.25 : f64, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<10x1x2x16xbf16>, tensor<10x1x2x16xbf16>, tensor<4xi32>,
         tensor<4xi32>, tensor<3x2xi32>) -> tensor<16x4x16xbf16>
  return
}

// -----

func.func @mha_page_table_without_caches(%x: tensor<16x64xbf16>,
                                         %wqkv: tensor<128x64xbf16>,
                                         %wo: tensor<64x64xbf16>,
                                         %cq: tensor<4xi32>,
                                         %pt: tensor<3x4xi32>) {
  // expected-error @+1 {{'page_table' belongs to a paged KV cache ('key_cache' and 'value_cache')}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) page_table(%pt)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<3x4xi32>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @dpa_page_table_without_caches(%q: tensor<16x4x16xbf16>,
                                         %k: tensor<16x2x16xbf16>,
                                         %cq: tensor<4xi32>,
                                         %pt: tensor<3x4xi32>) {
  // expected-error @+1 {{'page_table' belongs to a paged KV cache ('key_cache' and 'value_cache')}}
  %o = te.dot_product_attention %q, %k, %k cu_seqlens_q(%cq)
      cu_seqlens_kv(%cq) page_table(%pt)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<thd>, max_seqlen_q = 4 : i64}
      : (tensor<16x4x16xbf16>, tensor<16x2x16xbf16>, tensor<16x2x16xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<3x4xi32>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @mha_paged_cache_shape(%x: tensor<16x64xbf16>,
                                 %wqkv: tensor<128x64xbf16>,
                                 %wo: tensor<64x64xbf16>, %cq: tensor<4xi32>,
                                 %kc: tensor<10x8x2x32xbf16>,
                                 %vc: tensor<10x8x2x32xbf16>,
                                 %pt: tensor<3x4xi32>) {
  // expected-error @+1 {{'key_cache' must be paged [pages, page_size, kv_heads, head_dim] = [pages, page_size, 2, 16] of 'bf16', got 'tensor<10x8x2x32xbf16>'}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%cq) key_cache(%kc) value_cache(%vc)
      page_table(%pt)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<10x8x2x32xbf16>,
         tensor<10x8x2x32xbf16>, tensor<3x4xi32>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @mha_paged_table_shape(%x: tensor<16x64xbf16>,
                                 %wqkv: tensor<128x64xbf16>,
                                 %wo: tensor<64x64xbf16>, %cq: tensor<4xi32>,
                                 %kc: tensor<10x8x2x16xbf16>,
                                 %vc: tensor<10x8x2x16xbf16>,
                                 %pt: tensor<3xi32>) {
  // expected-error @+1 {{'page_table' must be i32 [b, max_pages] = [3, max_pages] (the pages of each sequence), got 'tensor<3xi32>'}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%cq) key_cache(%kc) value_cache(%vc)
      page_table(%pt)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<10x8x2x16xbf16>,
         tensor<10x8x2x16xbf16>, tensor<3xi32>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @mha_paged_rows(%x: tensor<16x64xbf16>, %wqkv: tensor<128x64xbf16>,
                          %wo: tensor<64x64xbf16>, %cq: tensor<4xi32>,
                          %kc: tensor<10x1x2x16xbf16>,
                          %vc: tensor<10x1x2x16xbf16>, %pt: tensor<3x2xi32>) {
  // expected-error @+1 {{the paged caches hold 2 tokens a sequence, fewer than the 4 new tokens a sequence may bring (max_seqlen)}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      cu_seqlens(%cq) cu_seqlens_kv(%cq) key_cache(%kc) value_cache(%vc)
      page_table(%pt)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       qkv_format = #te.qkv_format<thd>, max_seqlen = 4 : i64}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<4xi32>, tensor<4xi32>, tensor<10x1x2x16xbf16>,
         tensor<10x1x2x16xbf16>, tensor<3x2xi32>) -> tensor<16x64xbf16>
  return
}
