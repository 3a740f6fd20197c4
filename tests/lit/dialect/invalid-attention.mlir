// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the attention layers te.dot_product_attention,
// te.multihead_attention and te.transformer_layer. Unless noted, shapes are
// sbhd with s = 16, b = 2, 4 heads of head_dim 16 (hidden 64).

//===----------------------------------------------------------------------===//
// te.dot_product_attention
//===----------------------------------------------------------------------===//

func.func @dpa_query_rank3(%q: tensor<16x2x64xbf16>, %k: tensor<16x2x4x16xbf16>,
                           %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'query' must have rank 4 ([s, b, h, d] for sbhd), got 'tensor<16x2x64xbf16>'}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x64xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_query_mask_without_padding(%q: tensor<16x2x4x16xbf16>,
                                          %k: tensor<16x2x4x16xbf16>,
                                          %v: tensor<16x2x4x16xbf16>,
                                          %qm: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{'query_mask' (padded queries) needs the padding or padding_causal mask type}}
  %r = te.dot_product_attention %q, %k, %v query_mask(%qm)
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

// The query mask is as long as the queries (16), not the keys (8).
func.func @dpa_query_mask_shape(%q: tensor<16x2x4x16xbf16>,
                                %k: tensor<8x2x4x16xbf16>,
                                %v: tensor<8x2x4x16xbf16>,
                                %m: tensor<2x1x1x8xi1>) {
  // expected-error @+1 {{'query_mask' must have shape [b, 1, 1, s_q] = [2, 1, 1, 16], got [2, 1, 1, 8]}}
  %r = te.dot_product_attention %q, %k, %v mask(%m) query_mask(%m)
      {attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xbf16>, tensor<8x2x4x16xbf16>, tensor<8x2x4x16xbf16>,
         tensor<2x1x1x8xi1>, tensor<2x1x1x8xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_window_three(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
                            %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'window_size' must be [left, right] with each >= -1 (-1: unbounded), got [1, 2, 3]}}
  %r = te.dot_product_attention %q, %k, %v {window_size = array<i64: 1, 2, 3>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_window_below_minus_one(%q: tensor<16x2x4x16xbf16>,
                                      %k: tensor<16x2x4x16xbf16>,
                                      %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'window_size' must be [left, right] with each >= -1 (-1: unbounded), got [-3, 0]}}
  %r = te.dot_product_attention %q, %k, %v {window_size = array<i64: -3, 0>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_window_arbitrary(%q: tensor<16x2x4x16xbf16>,
                                %k: tensor<16x2x4x16xbf16>,
                                %v: tensor<16x2x4x16xbf16>,
                                %m: tensor<2x4x16x16xi1>) {
  // expected-error @+1 {{'window_size' is not supported with the arbitrary mask type}}
  %r = te.dot_product_attention %q, %k, %v mask(%m)
      {attn_mask_type = #te.attn_mask_type<arbitrary>,
       window_size = array<i64: 2, 0>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x4x16x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_key_rank5(%q: tensor<16x2x4x16xbf16>,
                         %k: tensor<16x2x4x16x1xbf16>,
                         %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'key' must have rank 4 ([s, b, h, d] for sbhd), got 'tensor<16x2x4x16x1xbf16>'}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16x1xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_value_rank_bshd(%q: tensor<2x16x4x16xbf16>,
                               %k: tensor<2x16x4x16xbf16>,
                               %v: tensor<2x16x64xbf16>) {
  // expected-error @+1 {{'value' must have rank 4 ([b, s, h, d] for bshd), got 'tensor<2x16x64xbf16>'}}
  %r = te.dot_product_attention %q, %k, %v {qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x16x4x16xbf16>, tensor<2x16x4x16xbf16>, tensor<2x16x64xbf16>)
         -> tensor<2x16x64xbf16>
  return
}

// -----

func.func @dpa_dynamic_query(%q: tensor<16x?x4x16xbf16>,
                             %k: tensor<16x2x4x16xbf16>,
                             %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'query' must have a static shape, got 'tensor<16x?x4x16xbf16>'}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x?x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

// Attention takes high-precision q, k, v; it has no fp8_recipe.
func.func @dpa_fp8_query(%q: tensor<16x2x4x16xf8E4M3FN>,
                         %k: tensor<16x2x4x16xf8E4M3FN>,
                         %v: tensor<16x2x4x16xf8E4M3FN>) {
  // expected-error @+1 {{'query' must have element type bf16, f16 or f32, got 'f8E4M3FN'}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>,
         tensor<16x2x4x16xf8E4M3FN>) -> tensor<16x2x64xf8E4M3FN>
  return
}

// -----

func.func @dpa_key_dtype(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xf16>,
                         %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'key' has element type 'f16' but 'query' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_key_batch(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x1x4x16xbf16>,
                         %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'key' must have shape [s_kv, b, gqa_groups, head_dim] = [16, 2, 4, 16], got [16, 1, 4, 16]}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x1x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_key_head_dim(%q: tensor<16x2x4x16xbf16>,
                            %k: tensor<16x2x4x32xbf16>,
                            %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'key' must have shape [s_kv, b, gqa_groups, head_dim] = [16, 2, 4, 16], got [16, 2, 4, 32]}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x32xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_key_batch_bshd(%q: tensor<2x16x4x16xbf16>,
                              %k: tensor<1x16x4x16xbf16>,
                              %v: tensor<1x16x4x16xbf16>) {
  // expected-error @+1 {{'key' must have shape [b, s_kv, gqa_groups, head_dim] = [2, 16, 4, 16], got [1, 16, 4, 16]}}
  %r = te.dot_product_attention %q, %k, %v {qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x16x4x16xbf16>, tensor<1x16x4x16xbf16>, tensor<1x16x4x16xbf16>)
         -> tensor<2x16x64xbf16>
  return
}

// -----

// 'value' must have the shape of 'key'.
func.func @dpa_value_heads(%q: tensor<16x2x4x16xbf16>,
                           %k: tensor<16x2x4x16xbf16>,
                           %v: tensor<16x2x2x16xbf16>) {
  // expected-error @+1 {{'value' must have shape [s_kv, b, gqa_groups, head_dim] = [16, 2, 4, 16], got [16, 2, 2, 16]}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x2x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_value_seq(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
                         %v: tensor<32x2x4x16xbf16>) {
  // expected-error @+1 {{'value' must have shape [s_kv, b, gqa_groups, head_dim] = [16, 2, 4, 16], got [32, 2, 4, 16]}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_gqa_not_divisible(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x3x16xbf16>,
    %v: tensor<16x2x3x16xbf16>) {
  // expected-error @+1 {{query heads (4) must be a multiple of key/value heads (3)}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x3x16xbf16>, tensor<16x2x3x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_gqa_zero_heads(%q: tensor<16x2x4x16xbf16>,
                              %k: tensor<16x2x0x16xbf16>,
                              %v: tensor<16x2x0x16xbf16>) {
  // expected-error @+1 {{'key' must not have a zero-size dimension, got 'tensor<16x2x0x16xbf16>'}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x0x16xbf16>, tensor<16x2x0x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_output_shape(%q: tensor<16x2x4x16xbf16>,
                            %k: tensor<16x2x4x16xbf16>,
                            %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'output' must have shape [s_q, b, heads * head_dim] = [16, 2, 64], got [16, 2, 4, 16]}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x4x16xbf16>
  return
}

// -----

func.func @dpa_output_shape_bshd(
    %q: tensor<2x16x4x16xbf16>, %k: tensor<2x16x4x16xbf16>,
    %v: tensor<2x16x4x16xbf16>) {
  // expected-error @+1 {{'output' must have shape [b, s_q, heads * head_dim] = [2, 16, 64], got [16, 2, 64]}}
  %r = te.dot_product_attention %q, %k, %v {qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x16x4x16xbf16>, tensor<2x16x4x16xbf16>, tensor<2x16x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_output_dtype(%q: tensor<16x2x4x16xbf16>,
                            %k: tensor<16x2x4x16xbf16>,
                            %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'output' has element type 'f32' but 'query' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.dot_product_attention %q, %k, %v
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xf32>
  return
}

// -----

func.func @dpa_padding_needs_mask(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{attn_mask_type = padding requires a 'mask' operand}}
  %r = te.dot_product_attention %q, %k, %v
      {attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_padding_causal_needs_mask(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{attn_mask_type = padding_causal requires a 'mask' operand}}
  %r = te.dot_product_attention %q, %k, %v
      {attn_mask_type = #te.attn_mask_type<padding_causal>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_padding_causal_bottom_right_needs_mask(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{attn_mask_type = padding_causal_bottom_right requires a 'mask' operand}}
  %r = te.dot_product_attention %q, %k, %v
      {attn_mask_type = #te.attn_mask_type<padding_causal_bottom_right>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_arbitrary_needs_mask(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{attn_mask_type = arbitrary requires a 'mask' operand}}
  %r = te.dot_product_attention %q, %k, %v
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

// The default mask type, causal, takes no mask.
func.func @dpa_causal_takes_no_mask(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{attn_mask_type = causal takes no 'mask' operand}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_no_mask_takes_no_mask(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{attn_mask_type = no_mask takes no 'mask' operand}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<no_mask>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_causal_bottom_right_takes_no_mask(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{attn_mask_type = causal_bottom_right takes no 'mask' operand}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<causal_bottom_right>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_mask_element_type(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<2x1x1x16xi8>) {
  // expected-error @+1 {{'mask' must have element type i1 (true = masked out), got 'i8'}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x1x1x16xi8>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_mask_dynamic(%q: tensor<16x2x4x16xbf16>,
                            %k: tensor<16x2x4x16xbf16>,
                            %v: tensor<16x2x4x16xbf16>,
                            %mask: tensor<?x1x1x16xi1>) {
  // expected-error @+1 {{'mask' must have a static shape, got 'tensor<?x1x1x16xi1>'}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<?x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_padding_mask_shape(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<2x1x16x16xi1>) {
  // expected-error @+1 {{'mask' must have shape [b, 1, 1, s_kv] = [2, 1, 1, 16], got [2, 1, 16, 16]}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x1x16x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

// A padding mask covers the keys: its last dim is s_kv (32), not s_q (16).
func.func @dpa_padding_mask_s_kv(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<32x2x4x16xbf16>,
    %v: tensor<32x2x4x16xbf16>, %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{'mask' must have shape [b, 1, 1, s_kv] = [2, 1, 1, 32], got [2, 1, 1, 16]}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_padding_mask_bshd(
    %q: tensor<2x16x4x16xbf16>, %k: tensor<2x16x4x16xbf16>,
    %v: tensor<2x16x4x16xbf16>, %mask: tensor<16x1x1x2xi1>) {
  // expected-error @+1 {{'mask' must have shape [b, 1, 1, s_kv] = [2, 1, 1, 16], got [16, 1, 1, 2]}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x16x4x16xbf16>, tensor<2x16x4x16xbf16>, tensor<2x16x4x16xbf16>,
         tensor<16x1x1x2xi1>) -> tensor<2x16x64xbf16>
  return
}

// -----

// An arbitrary mask broadcasts over b and heads only, not over s_q.
func.func @dpa_arbitrary_mask_s_q(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<2x4x1x16xi1>) {
  // expected-error @+1 {{'mask' must have shape [b or 1, heads or 1, s_q, s_kv] = [2, 4, 16, 16], got [2, 4, 1, 16]}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<2x4x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_arbitrary_mask_heads(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<1x2x16x16xi1>) {
  // expected-error @+1 {{'mask' must have shape [b or 1, heads or 1, s_q, s_kv] = [1, 4, 16, 16], got [1, 2, 16, 16]}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<1x2x16x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_arbitrary_mask_rank(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>, %mask: tensor<4x16x16xi1>) {
  // expected-error @+1 {{'mask' must have shape [b or 1, heads or 1, s_q, s_kv] = [2, 4, 16, 16], got [4, 16, 16]}}
  %r = te.dot_product_attention %q, %k, %v mask(%mask)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<4x16x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_dropout_one(%q: tensor<16x2x4x16xbf16>,
                           %k: tensor<16x2x4x16xbf16>,
                           %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'attention_dropout' must be in [0, 1), got 1.000000e+00}}
  %r = te.dot_product_attention %q, %k, %v {attention_dropout = 1.0 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_dropout_negative(%q: tensor<16x2x4x16xbf16>,
                                %k: tensor<16x2x4x16xbf16>,
                                %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'attention_dropout' must be in [0, 1), got -1.000000e-01}}
  %r = te.dot_product_attention %q, %k, %v {attention_dropout = -0.1 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_dropout_nan(%q: tensor<16x2x4x16xbf16>,
                           %k: tensor<16x2x4x16xbf16>,
                           %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'attention_dropout' must be in [0, 1), got nan}}
  %r = te.dot_product_attention %q, %k, %v
      {attention_dropout = 0x7FF8000000000000 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_softmax_scale_zero(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'softmax_scale' must be finite and > 0, got 0.000000e+00}}
  %r = te.dot_product_attention %q, %k, %v {softmax_scale = 0.0 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_softmax_scale_negative(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'softmax_scale' must be finite and > 0, got -2.500000e-01}}
  %r = te.dot_product_attention %q, %k, %v {softmax_scale = -0.25 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @dpa_softmax_scale_inf(
    %q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
    %v: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'softmax_scale' must be finite and > 0, got INF}}
  %r = te.dot_product_attention %q, %k, %v
      {softmax_scale = 0x7FF0000000000000 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.multihead_attention
//===----------------------------------------------------------------------===//

func.func @mha_input_rank2(%x: tensor<32x64xbf16>, %wqkv: tensor<192x64xbf16>,
                           %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'input' must have rank 3 ([s, b, hidden] for sbhd, [b, s, hidden] for bshd), got rank 2}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64}
      : (tensor<32x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<32x64xbf16>
  return
}

// -----

func.func @mha_input_rank4(%x: tensor<16x2x4x16xbf16>,
                           %wqkv: tensor<48x16xbf16>, %wo: tensor<16x16xbf16>) {
  // expected-error @+1 {{'input' must have rank 3 ([s, b, hidden] for sbhd, [b, s, hidden] for bshd), got rank 4}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x4x16xbf16>, tensor<48x16xbf16>, tensor<16x16xbf16>)
         -> tensor<16x2x4x16xbf16>
  return
}

// -----

func.func @mha_dynamic_input(%x: tensor<16x?x64xbf16>,
                             %wqkv: tensor<192x64xbf16>,
                             %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'input' must have a static shape, got 'tensor<16x?x64xbf16>'}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64}
      : (tensor<16x?x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

// Input normalization is on only when ln_weight is given.
func.func @mha_ln_bias_without_ln_weight(
    %x: tensor<16x2x64xbf16>, %beta: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'ln_bias' needs 'ln_weight' (input normalization is on when 'ln_weight' is given)}}
  %r = te.multihead_attention %x ln_bias(%beta) qkv_weight(%wqkv)
      proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<192x64xbf16>,
         tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_ln_bias_required(%x: tensor<16x2x64xbf16>,
                                %gamma: tensor<64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'ln_bias' is required by LayerNorm}}
  %r = te.multihead_attention %x ln_weight(%gamma) qkv_weight(%wqkv)
      proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<192x64xbf16>,
         tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_ln_bias_rmsnorm(%x: tensor<16x2x64xbf16>,
                               %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
                               %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'ln_bias' is not allowed with RMSNorm (it has no bias)}}
  %r = te.multihead_attention %x ln_weight(%gamma) ln_bias(%beta)
      qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64,
       normalization = #te.normalization<RMSNorm>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_ln_weight_shape(%x: tensor<16x2x64xbf16>,
                               %gamma: tensor<32xbf16>, %beta: tensor<64xbf16>,
                               %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'ln_weight' must have shape [hidden_size] = [64], got [32]}}
  %r = te.multihead_attention %x ln_weight(%gamma) ln_bias(%beta)
      qkv_weight(%wqkv) proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<32xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_ln_bias_shape(%x: tensor<16x2x64xbf16>, %gamma: tensor<64xbf16>,
                             %beta: tensor<32xbf16>, %wqkv: tensor<192x64xbf16>,
                             %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'ln_bias' must have shape [hidden_size] = [64], got [32]}}
  %r = te.multihead_attention %x ln_weight(%gamma) ln_bias(%beta)
      qkv_weight(%wqkv) proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<32xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_ln_weight_dtype(%x: tensor<16x2x64xbf16>, %gamma: tensor<64xf32>,
                               %beta: tensor<64xbf16>,
                               %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'ln_weight' has element type 'f32' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.multihead_attention %x ln_weight(%gamma) ln_bias(%beta)
      qkv_weight(%wqkv) proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xf32>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_zero_heads(%x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
                          %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'num_attention_heads' must be >= 1, got 0}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 0 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_negative_heads(%x: tensor<16x2x64xbf16>,
                              %wqkv: tensor<192x64xbf16>,
                              %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'num_attention_heads' must be >= 1, got -4}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = -4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_heads_not_dividing_hidden(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{hidden size (64) must be divisible by num_attention_heads (3) unless kv_channels is given}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 3 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_zero_kv_channels(%x: tensor<16x2x64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'kv_channels' must be >= 1, got 0}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, kv_channels = 0 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_gqa_not_dividing_heads(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{num_attention_heads (4) must be divisible by num_gqa_groups (3)}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, num_gqa_groups = 3 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_gqa_more_than_heads(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{num_attention_heads (4) must be divisible by num_gqa_groups (8)}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, num_gqa_groups = 8 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_gqa_zero(%x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
                        %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{num_attention_heads (4) must be divisible by num_gqa_groups (0)}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, num_gqa_groups = 0 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_qkv_bias_only(%x: tensor<16x2x64xbf16>,
                             %wqkv: tensor<192x64xbf16>,
                             %bqkv: tensor<192xbf16>, %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'qkv_bias' and 'proj_bias' must be both present or both absent}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) qkv_bias(%bqkv)
      proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<192xbf16>,
         tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_proj_bias_only(%x: tensor<16x2x64xbf16>,
                              %wqkv: tensor<192x64xbf16>,
                              %wo: tensor<64x64xbf16>, %bo: tensor<64xbf16>) {
  // expected-error @+1 {{'qkv_bias' and 'proj_bias' must be both present or both absent}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      proj_bias(%bo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

// With 2 key/value heads, qkv_weight has (4 + 2 * 2) * 16 = 128 rows.
func.func @mha_qkv_weight_gqa(%x: tensor<16x2x64xbf16>,
                              %wqkv: tensor<192x64xbf16>,
                              %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'qkv_weight' must have shape [(num_attention_heads + 2 * num_gqa_groups) * kv_channels, hidden_size] = [128, 64], got [192, 64]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_qkv_weight_hidden(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x32xbf16>,
    %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'qkv_weight' must have shape [(num_attention_heads + 2 * num_gqa_groups) * kv_channels, hidden_size] = [192, 64], got [192, 32]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x32xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_qkv_bias_shape(%x: tensor<16x2x64xbf16>,
                              %wqkv: tensor<192x64xbf16>,
                              %bqkv: tensor<64xbf16>, %wo: tensor<64x64xbf16>,
                              %bo: tensor<64xbf16>) {
  // expected-error @+1 {{'qkv_bias' must have shape [(num_attention_heads + 2 * num_gqa_groups) * kv_channels] = [192], got [64]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) qkv_bias(%bqkv)
      proj_weight(%wo) proj_bias(%bo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64xbf16>,
         tensor<64x64xbf16>, tensor<64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

// kv_channels = 32 makes the attention width 4 * 32 = 128.
func.func @mha_proj_weight_kv_channels(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<384x64xbf16>,
    %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'proj_weight' must have shape [hidden_size, num_attention_heads * kv_channels] = [64, 128], got [64, 64]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, kv_channels = 32 : i64}
      : (tensor<16x2x64xbf16>, tensor<384x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_proj_bias_shape(%x: tensor<16x2x64xbf16>,
                               %wqkv: tensor<192x64xbf16>,
                               %bqkv: tensor<192xbf16>, %wo: tensor<64x64xbf16>,
                               %bo: tensor<192xbf16>) {
  // expected-error @+1 {{'proj_bias' must have shape [hidden_size] = [64], got [192]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) qkv_bias(%bqkv)
      proj_weight(%wo) proj_bias(%bo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<192xbf16>,
         tensor<64x64xbf16>, tensor<192xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_padding_needs_mask(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{attn_mask_type = padding requires a 'mask' operand}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_causal_takes_no_mask(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{attn_mask_type = causal takes no 'mask' operand}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) mask(%mask)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_mask_element_type(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %mask: tensor<2x1x1x16xf32>) {
  // expected-error @+1 {{'mask' must have element type i1 (true = masked out), got 'f32'}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) mask(%mask)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<2x1x1x16xf32>) -> tensor<16x2x64xbf16>
  return
}

// -----

// Self-attention: s_kv = s_q = 16, b = 2 (bshd input [2, 16, 64]).
func.func @mha_padding_mask_shape_bshd(
    %x: tensor<2x16x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %mask: tensor<16x1x1x2xi1>) {
  // expected-error @+1 {{'mask' must have shape [b, 1, 1, s_kv] = [2, 1, 1, 16], got [16, 1, 1, 2]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) mask(%mask)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x16x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<16x1x1x2xi1>) -> tensor<2x16x64xbf16>
  return
}

// -----

func.func @mha_arbitrary_mask_shape(
    %x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %mask: tensor<2x4x16x8xi1>) {
  // expected-error @+1 {{'mask' must have shape [b or 1, heads or 1, s_q, s_kv] = [2, 4, 16, 16], got [2, 4, 16, 8]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) mask(%mask)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<2x4x16x8xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_dropout(%x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
                       %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'attention_dropout' must be in [0, 1), got 1.500000e+00}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, attention_dropout = 1.5 : f64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

// Rotary embeddings are f32 angles, whatever the layer's dtype.
func.func @mha_rotary_dtype(%x: tensor<16x2x64xbf16>,
                            %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>,
                            %rope: tensor<16x1x1x16xbf16>) {
  // expected-error @+1 {{'rotary_pos_emb' must be f32 of shape [s, 1, 1, r] = [16, 1, 1, r] with r even and at most kv_channels (16), got 'tensor<16x1x1x16xbf16>'}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      rotary_pos_emb(%rope) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<16x1x1x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_rotary_head_dim(%x: tensor<16x2x64xbf16>,
                               %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>,
                               %rope: tensor<16x1x1x64xf32>) {
  // expected-error @+1 {{'rotary_pos_emb' must be f32 of shape [s, 1, 1, r] = [16, 1, 1, r] with r even and at most kv_channels (16), got 'tensor<16x1x1x64xf32>'}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      rotary_pos_emb(%rope) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<16x1x1x64xf32>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_rotary_seq_bshd(%x: tensor<2x16x64xbf16>,
                               %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>,
                               %rope: tensor<2x1x1x16xf32>) {
  // expected-error @+1 {{'rotary_pos_emb' must be f32 of shape [s, 1, 1, r] = [16, 1, 1, r] with r even and at most kv_channels (16), got 'tensor<2x1x1x16xf32>'}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      rotary_pos_emb(%rope)
      {num_attention_heads = 4 : i64, qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x16x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<2x1x1x16xf32>) -> tensor<2x16x64xbf16>
  return
}

// -----

func.func @mha_output_shape(%x: tensor<16x2x64xbf16>,
                            %wqkv: tensor<192x64xbf16>,
                            %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'output' must have shape like 'input' = [16, 2, 64], got [16, 2, 192]}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<16x2x192xbf16>
  return
}

// -----

func.func @mha_layernorm_epsilon(
    %x: tensor<16x2x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'layernorm_epsilon' must be finite and >= 0, got -1.000000e-05}}
  %r = te.multihead_attention %x ln_weight(%gamma) ln_bias(%beta)
      qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, layernorm_epsilon = -1.0e-05 : f64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_fp8_tokens(%x: tensor<3x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
                          %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need the token count (product of the leading dims of 'input') divisible by 8, got 6 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<3x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
         -> tensor<3x2x64xbf16>
  return
}

// -----

func.func @mha_fp8_hidden(%x: tensor<16x2x40xbf16>, %wqkv: tensor<120x40xbf16>,
                          %wo: tensor<40x40xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need hidden_size divisible by 16, got 40 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x2x40xbf16>, tensor<120x40xbf16>, tensor<40x40xbf16>)
         -> tensor<16x2x40xbf16>
  return
}

// -----

// 3 heads of kv_channels 8: the QKV GEMM has (3 + 2 * 3) * 8 = 72 rows.
func.func @mha_fp8_qkv_width(%x: tensor<16x2x48xbf16>,
                             %wqkv: tensor<72x48xbf16>,
                             %wo: tensor<48x24xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need the QKV width ((heads + 2 * gqa_groups) * kv_channels) divisible by 16, got 72 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 3 : i64, kv_channels = 8 : i64,
       fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x2x48xbf16>, tensor<72x48xbf16>, tensor<48x24xbf16>)
         -> tensor<16x2x48xbf16>
  return
}

// -----

// 2 heads of kv_channels 4 (1 key/value head): QKV width (2 + 2) * 4 = 16 is
// aligned, the projection's 2 * 4 = 8 inputs are not.
func.func @mha_fp8_proj_in(%x: tensor<16x2x64xbf16>, %wqkv: tensor<16x64xbf16>,
                           %wo: tensor<64x8xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need num_attention_heads * kv_channels divisible by 16, got 8 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 2 : i64, num_gqa_groups = 1 : i64,
       kv_channels = 4 : i64, fp8_recipe = #te.current_scaling<>}
      : (tensor<16x2x64xbf16>, tensor<16x64xbf16>, tensor<64x8xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.transformer_layer
//===----------------------------------------------------------------------===//

func.func @tl_input_rank2(%x: tensor<32x64xbf16>, %g1: tensor<64xbf16>,
                          %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                          %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                          %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                          %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'input' must have rank 3 ([s, b, hidden] for sbhd, [b, s, hidden] for bshd), got rank 2}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<32x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<32x64xbf16>
  return
}

// -----

func.func @tl_parallel_with_post_ln_residual(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'parallel_attention_mlp' is not supported with 'apply_residual_connection_post_layernorm'}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, parallel_attention_mlp,
       apply_residual_connection_post_layernorm}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_input_dtype(%x: tensor<16x2x64xf64>, %g1: tensor<64xbf16>,
                          %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                          %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                          %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                          %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'input' must have element type bf16, f16 or f32, got 'f64'}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xf64>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xf64>
  return
}

// -----

func.func @tl_attn_ln_bias_required(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>, %b2: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'attn_ln_bias' is required by LayerNorm}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) qkv_weight(%wqkv)
      proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1)
      fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<192x64xbf16>,
         tensor<64x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_attn_ln_bias_rmsnorm(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'attn_ln_bias' is not allowed with RMSNorm (it has no bias)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) fc1_weight(%w1)
      fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       normalization = #te.normalization<RMSNorm>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_attn_ln_weight_shape(
    %x: tensor<16x2x64xbf16>, %g1: tensor<32xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'attn_ln_weight' must have shape [hidden_size] = [64], got [32]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<32xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_attn_ln_bias_shape(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<32xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'attn_ln_bias' must have shape [hidden_size] = [64], got [32]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<32xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_mlp_ln_bias_required(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'mlp_ln_bias' is required by LayerNorm}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) fc1_weight(%w1)
      fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_mlp_ln_bias_rmsnorm(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>, %b2: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'mlp_ln_bias' is not allowed with RMSNorm (it has no bias)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) qkv_weight(%wqkv)
      proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1)
      fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       normalization = #te.normalization<RMSNorm>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<192x64xbf16>,
         tensor<64x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_mlp_ln_weight_shape(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<256xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'mlp_ln_weight' must have shape [hidden_size] = [64], got [256]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<256xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_mlp_ln_bias_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                                %b1: tensor<64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                                %b2: tensor<256xbf16>, %w1: tensor<256x64xbf16>,
                                %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'mlp_ln_bias' must have shape [hidden_size] = [64], got [256]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<256xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_zero_heads(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                         %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                         %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                         %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                         %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'num_attention_heads' must be >= 1, got 0}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 0 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_heads_not_dividing_hidden(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{hidden size (64) must be divisible by num_attention_heads (5) unless kv_channels is given}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 5 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_negative_kv_channels(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'kv_channels' must be >= 1, got -16}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, kv_channels = -16 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_gqa_not_dividing_heads(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{num_attention_heads (4) must be divisible by num_gqa_groups (3)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, num_gqa_groups = 3 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_qkv_bias_only(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                            %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                            %bqkv: tensor<192xbf16>, %wo: tensor<64x64xbf16>,
                            %g2: tensor<64xbf16>, %b2: tensor<64xbf16>,
                            %w1: tensor<256x64xbf16>, %bf1: tensor<256xbf16>,
                            %w2: tensor<64x256xbf16>, %bf2: tensor<64xbf16>) {
  // expected-error @+1 {{'qkv_bias' and 'proj_bias' must be both present or both absent}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) mlp_ln_weight(%g2)
      mlp_ln_bias(%b2) fc1_weight(%w1) fc1_bias(%bf1) fc2_weight(%w2)
      fc2_bias(%bf2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<192xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<64xbf16>, tensor<256x64xbf16>,
         tensor<256xbf16>, tensor<64x256xbf16>, tensor<64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_proj_bias_only(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                             %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                             %wo: tensor<64x64xbf16>, %bo: tensor<64xbf16>,
                             %g2: tensor<64xbf16>, %b2: tensor<64xbf16>,
                             %w1: tensor<256x64xbf16>,
                             %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'qkv_bias' and 'proj_bias' must be both present or both absent}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) proj_bias(%bo) mlp_ln_weight(%g2)
      mlp_ln_bias(%b2) fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<64xbf16>, tensor<256x64xbf16>,
         tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

// MQA: one key/value head, qkv_weight has (4 + 2) * 16 = 96 rows.
func.func @tl_qkv_weight_mqa(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                             %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                             %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                             %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                             %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'qkv_weight' must have shape [(num_attention_heads + 2 * num_gqa_groups) * kv_channels, hidden_size] = [96, 64], got [192, 64]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, num_gqa_groups = 1 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_qkv_bias_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                             %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                             %bqkv: tensor<64xbf16>, %wo: tensor<64x64xbf16>,
                             %bo: tensor<64xbf16>, %g2: tensor<64xbf16>,
                             %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                             %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'qkv_bias' must have shape [(num_attention_heads + 2 * num_gqa_groups) * kv_channels] = [192], got [64]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo)
      mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<256x64xbf16>,
         tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_proj_weight_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                                %b1: tensor<64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x192xbf16>, %g2: tensor<64xbf16>,
                                %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                                %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'proj_weight' must have shape [hidden_size, num_attention_heads * kv_channels] = [64, 64], got [64, 192]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x192xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_proj_bias_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                              %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                              %bqkv: tensor<192xbf16>, %wo: tensor<64x64xbf16>,
                              %bo: tensor<32xbf16>, %g2: tensor<64xbf16>,
                              %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                              %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'proj_bias' must have shape [hidden_size] = [64], got [32]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo)
      mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<192xbf16>, tensor<64x64xbf16>,
         tensor<32xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<256x64xbf16>,
         tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_padding_needs_mask(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{self_attn_mask_type = padding requires a 'mask' operand}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       self_attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_causal_takes_no_mask(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>,
    %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{self_attn_mask_type = causal takes no 'mask' operand}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) mask(%mask)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_mask_element_type(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                                %b1: tensor<64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                                %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                                %w2: tensor<64x256xbf16>,
                                %mask: tensor<2x1x1x16xi8>) {
  // expected-error @+1 {{'mask' must have element type i1 (true = masked out), got 'i8'}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) mask(%mask)
      {num_attention_heads = 4 : i64,
       self_attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<2x1x1x16xi8>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_padding_mask_shape(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>,
    %mask: tensor<2x16xi1>) {
  // expected-error @+1 {{'mask' must have shape [b, 1, 1, s_kv] = [2, 1, 1, 16], got [2, 16]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) mask(%mask)
      {num_attention_heads = 4 : i64,
       self_attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<2x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_arbitrary_mask_shape(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>,
    %mask: tensor<2x1x16x32xi1>) {
  // expected-error @+1 {{'mask' must have shape [b or 1, heads or 1, s_q, s_kv] = [2, 1, 16, 16], got [2, 1, 16, 32]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) mask(%mask)
      {num_attention_heads = 4 : i64,
       self_attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<2x1x16x32xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_rotary_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                           %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                           %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                           %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                           %w2: tensor<64x256xbf16>, %rope: tensor<16x16xf32>) {
  // expected-error @+1 {{'rotary_pos_emb' must be f32 of shape [s, 1, 1, r] = [16, 1, 1, r] with r even and at most kv_channels (16), got 'tensor<16x16xf32>'}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) rotary_pos_emb(%rope)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<16x16xf32>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_attention_dropout(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                                %b1: tensor<64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                                %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                                %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'attention_dropout' must be in [0, 1), got -5.000000e-01}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, attention_dropout = -0.5 : f64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc2_weight_rank(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                              %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                              %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                              %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                              %w2: tensor<64xbf16>) {
  // expected-error @+1 {{'fc2_weight' must have rank >= 2, got 'tensor<64xbf16>'}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc2_weight_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                               %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                               %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                               %w2: tensor<256x256xbf16>) {
  // expected-error @+1 {{'fc2_weight' must have shape [hidden_size, ffn_hidden_size] = [64, 256], got [256, 256]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<256x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc1_weight_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                               %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                               %b2: tensor<64xbf16>, %w1: tensor<256x32xbf16>,
                               %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_weight' must have shape [ffn_hidden_size, hidden_size] = [256, 64], got [256, 32]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x32xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc1_weight_gated(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                               %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                               %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                               %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                               %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_weight' must have shape [2 * ffn_hidden_size, hidden_size] (gated activation) = [512, 64], got [256, 64]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, activation = #te.activation<reglu>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

// clamped_swiglu's parameters on the default activation (gelu).
func.func @tl_activation_params_not_clamped(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
    %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'te.transformer_layer' op 'glu_linear_offset' is a parameter of activation clamped_swiglu only, not of gelu}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, glu_linear_offset = 0.0 : f64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_activation_limit_infinite(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
    %b2: tensor<64xbf16>, %w1: tensor<512x64xbf16>,
    %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'te.transformer_layer' op 'activation_limit' must be finite and > 0, got INF}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       activation = #te.activation<clamped_swiglu>,
       activation_limit = 0x7FF0000000000000 : f64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<512x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc1_bias_only(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                            %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                            %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                            %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                            %bf1: tensor<256xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_bias' and 'fc2_bias' must be both present or both absent}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc1_bias(%bf1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<256xbf16>,
         tensor<64x256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc2_bias_only(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                            %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                            %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                            %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                            %w2: tensor<64x256xbf16>, %bf2: tensor<64xbf16>) {
  // expected-error @+1 {{'fc1_bias' and 'fc2_bias' must be both present or both absent}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) fc2_bias(%bf2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc1_bias_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                             %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                             %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                             %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                             %bf1: tensor<64xbf16>, %w2: tensor<64x256xbf16>,
                             %bf2: tensor<64xbf16>) {
  // expected-error @+1 {{'fc1_bias' must have shape [ffn_hidden_size] = [256], got [64]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc1_bias(%bf1) fc2_weight(%w2) fc2_bias(%bf2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64xbf16>,
         tensor<64x256xbf16>, tensor<64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc2_bias_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                             %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                             %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                             %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                             %bf1: tensor<256xbf16>, %w2: tensor<64x256xbf16>,
                             %bf2: tensor<256xbf16>) {
  // expected-error @+1 {{'fc2_bias' must have shape [hidden_size] = [64], got [256]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc1_bias(%bf1) fc2_weight(%w2) fc2_bias(%bf2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<256xbf16>,
         tensor<64x256xbf16>, tensor<256xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fc1_dtype(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                        %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                        %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                        %b2: tensor<64xbf16>, %w1: tensor<256x64xf32>,
                        %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_weight' has element type 'f32' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xf32>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_output_shape(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                           %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                           %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                           %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                           %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'output' must have shape like 'input' = [16, 2, 64], got [16, 2, 256]}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x256xbf16>
  return
}

// -----

func.func @tl_layernorm_epsilon(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                                %b1: tensor<64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                                %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                                %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'layernorm_epsilon' must be finite and >= 0, got nan}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       layernorm_epsilon = 0x7FF8000000000000 : f64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_hidden_dropout(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                             %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                             %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                             %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                             %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'hidden_dropout' must be in [0, 1), got 1.000000e+00}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, hidden_dropout = 1.0 : f64}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fp8_tokens(%x: tensor<5x2x64xbf16>, %g1: tensor<64xbf16>,
                         %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                         %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                         %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                         %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need the token count (product of the leading dims of 'input') divisible by 8, got 10 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<5x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<5x2x64xbf16>
  return
}

// -----

func.func @tl_fp8_hidden(%x: tensor<16x2x40xbf16>, %g1: tensor<40xbf16>,
                         %b1: tensor<40xbf16>, %wqkv: tensor<120x40xbf16>,
                         %wo: tensor<40x40xbf16>, %g2: tensor<40xbf16>,
                         %b2: tensor<40xbf16>, %w1: tensor<256x40xbf16>,
                         %w2: tensor<40x256xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need hidden_size divisible by 16, got 40 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x2x40xbf16>, tensor<40xbf16>, tensor<40xbf16>,
         tensor<120x40xbf16>, tensor<40x40xbf16>, tensor<40xbf16>,
         tensor<40xbf16>, tensor<256x40xbf16>, tensor<40x256xbf16>)
         -> tensor<16x2x40xbf16>
  return
}

// -----

func.func @tl_fp8_qkv_width(%x: tensor<16x2x48xbf16>, %g1: tensor<48xbf16>,
                            %b1: tensor<48xbf16>, %wqkv: tensor<72x48xbf16>,
                            %wo: tensor<48x24xbf16>, %g2: tensor<48xbf16>,
                            %b2: tensor<48xbf16>, %w1: tensor<256x48xbf16>,
                            %w2: tensor<48x256xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need the QKV width ((heads + 2 * gqa_groups) * kv_channels) divisible by 16, got 72 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 3 : i64, kv_channels = 8 : i64,
       fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x2x48xbf16>, tensor<48xbf16>, tensor<48xbf16>,
         tensor<72x48xbf16>, tensor<48x24xbf16>, tensor<48xbf16>,
         tensor<48xbf16>, tensor<256x48xbf16>, tensor<48x256xbf16>)
         -> tensor<16x2x48xbf16>
  return
}

// -----

func.func @tl_fp8_proj_in(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                          %b1: tensor<64xbf16>, %wqkv: tensor<16x64xbf16>,
                          %wo: tensor<64x8xbf16>, %g2: tensor<64xbf16>,
                          %b2: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                          %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need num_attention_heads * kv_channels divisible by 16, got 8 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 2 : i64, num_gqa_groups = 1 : i64,
       kv_channels = 4 : i64, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<16x64xbf16>, tensor<64x8xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @tl_fp8_ffn(%x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>,
                      %b1: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                      %wo: tensor<64x64xbf16>, %g2: tensor<64xbf16>,
                      %b2: tensor<64xbf16>, %w1: tensor<200x64xbf16>,
                      %w2: tensor<64x200xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need ffn_hidden_size divisible by 16, got 200 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g2) mlp_ln_bias(%b2)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64, fp8_recipe = #te.current_scaling<>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<200x64xbf16>, tensor<64x200xbf16>)
         -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_rotary_odd_head_dim(%x: tensor<16x2x60xbf16>,
                                   %wqkv: tensor<180x60xbf16>,
                                   %wo: tensor<60x60xbf16>,
                                   %rope: tensor<16x1x1x15xf32>) {
  // expected-error @+1 {{'rotary_pos_emb' must be f32 of shape [s, 1, 1, r] = [16, 1, 1, r] with r even and at most kv_channels (15), got 'tensor<16x1x1x15xf32>'}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      rotary_pos_emb(%rope) {num_attention_heads = 4 : i64}
      : (tensor<16x2x60xbf16>, tensor<180x60xbf16>, tensor<60x60xbf16>,
         tensor<16x1x1x15xf32>) -> tensor<16x2x60xbf16>
  return
}

// -----

func.func @mha_kv_weight_without_encoder(%x: tensor<16x2x64xbf16>,
                                         %wqkv: tensor<192x64xbf16>,
                                         %wkv: tensor<128x64xbf16>,
                                         %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'kv_weight' and 'kv_bias' belong to cross-attention: they need 'encoder_output'}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) kv_weight(%wkv)
      proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<128x64xbf16>,
         tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

// Cross-attention: qkv_weight holds only the query rows.
func.func @mha_cross_query_rows(%x: tensor<16x2x64xbf16>,
                                %enc: tensor<8x2x64xbf16>,
                                %wqkv: tensor<192x64xbf16>,
                                %wkv: tensor<128x64xbf16>,
                                %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'qkv_weight' must have shape [num_attention_heads * kv_channels, hidden_size] (the query rows) = [64, 64], got [192, 64]}}
  %r = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wqkv)
      kv_weight(%wkv) proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<192x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_cross_encoder_batch(%x: tensor<16x2x64xbf16>,
                                   %enc: tensor<8x3x64xbf16>,
                                   %wq: tensor<64x64xbf16>,
                                   %wkv: tensor<128x64xbf16>,
                                   %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'encoder_output' must be [s_kv, b, hidden_size] with the input's batch (2) and hidden (64), got [8, 3, 64]}}
  %r = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<8x3x64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_cross_kv_rows(%x: tensor<16x2x64xbf16>,
                             %enc: tensor<8x2x64xbf16>,
                             %wq: tensor<64x64xbf16>,
                             %wkv: tensor<32x64xbf16>,
                             %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'kv_weight' must have shape [2 * num_gqa_groups * kv_channels, hidden_size] (rows of k, then v) = [64, 64], got [32, 64]}}
  %r = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) {num_attention_heads = 4 : i64,
      num_gqa_groups = 2 : i64}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64x64xbf16>,
         tensor<32x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_cross_mask_over_keys(%x: tensor<16x2x64xbf16>,
                                    %enc: tensor<8x2x64xbf16>,
                                    %wq: tensor<64x64xbf16>,
                                    %wkv: tensor<128x64xbf16>,
                                    %wo: tensor<64x64xbf16>,
                                    %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{'mask' must have shape [b, 1, 1, s_kv] = [2, 1, 1, 8], got [2, 1, 1, 16]}}
  %r = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) mask(%mask)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<2x1x1x16xi1>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_cross_rotary(%x: tensor<16x2x64xbf16>,
                            %enc: tensor<8x2x64xbf16>,
                            %wq: tensor<64x64xbf16>,
                            %wkv: tensor<128x64xbf16>,
                            %wo: tensor<64x64xbf16>,
                            %rope: tensor<16x1x1x16xf32>) {
  // expected-error @+1 {{'rotary_pos_emb' is not supported with cross-attention ('encoder_output')}}
  %r = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) rotary_pos_emb(%rope)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<16x1x1x16xf32>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @decoder_without_inter_weights(
    %x: tensor<16x2x64xbf16>, %enc: tensor<8x2x64xbf16>,
    %g: tensor<64xbf16>, %b: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %w1: tensor<128x64xbf16>,
    %w2: tensor<64x128xbf16>) {
  // expected-error @+1 {{a decoder layer ('encoder_output') needs 'inter_ln_weight', 'inter_q_weight', 'inter_kv_weight' and 'inter_proj_weight'}}
  %r = te.transformer_layer %x encoder_output(%enc) attn_ln_weight(%g)
      attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g)
      mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>,
         tensor<64x128xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @decoder_enc_dec_mask_needed(
    %x: tensor<16x2x64xbf16>, %enc: tensor<8x2x64xbf16>,
    %g: tensor<64xbf16>, %b: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
    %wo: tensor<64x64xbf16>, %wq: tensor<64x64xbf16>,
    %wkv: tensor<128x64xbf16>, %w1: tensor<128x64xbf16>,
    %w2: tensor<64x128xbf16>) {
  // expected-error @+1 {{enc_dec_attn_mask_type = padding requires a 'enc_dec_mask' operand}}
  %r = te.transformer_layer %x encoder_output(%enc) attn_ln_weight(%g)
      attn_ln_bias(%b) qkv_weight(%wqkv) proj_weight(%wo)
      inter_ln_weight(%g) inter_ln_bias(%b) inter_q_weight(%wq)
      inter_kv_weight(%wkv) inter_proj_weight(%wo) mlp_ln_weight(%g)
      mlp_ln_bias(%b) fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       enc_dec_attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<128x64xbf16>, tensor<64x128xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @encoder_with_enc_dec_mask_type(
    %x: tensor<16x2x64xbf16>, %g: tensor<64xbf16>, %b: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>,
    %w1: tensor<128x64xbf16>, %w2: tensor<64x128xbf16>) {
  // expected-error @+1 {{the inter_* operands, 'enc_dec_mask' and 'enc_dec_attn_mask_type' belong to a decoder layer: they need 'encoder_output'}}
  %r = te.transformer_layer %x attn_ln_weight(%g) attn_ln_bias(%b)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b)
      fc1_weight(%w1) fc2_weight(%w2)
      {num_attention_heads = 4 : i64,
       enc_dec_attn_mask_type = #te.attn_mask_type<causal>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<128x64xbf16>, tensor<64x128xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_query_mask_on_self_attention(%x: tensor<16x2x64xbf16>,
                                            %wqkv: tensor<192x64xbf16>,
                                            %wo: tensor<64x64xbf16>,
                                            %mask: tensor<2x1x1x16xi1>) {
  // expected-error @+1 {{'query_mask' (padded queries) needs cross-attention with the padding or padding_causal mask type}}
  %r = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      mask(%mask) query_mask(%mask)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<2x1x1x16xi1>, tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_cross_query_mask_shape(%x: tensor<16x2x64xbf16>,
                                      %enc: tensor<8x2x64xbf16>,
                                      %wq: tensor<64x64xbf16>,
                                      %wkv: tensor<128x64xbf16>,
                                      %wo: tensor<64x64xbf16>,
                                      %mask: tensor<2x1x1x8xi1>) {
  // expected-error @+1 {{'query_mask' must have shape [b, 1, 1, s] = [2, 1, 1, 16], got [2, 1, 1, 8]}}
  %r = te.multihead_attention %x encoder_output(%enc) qkv_weight(%wq)
      kv_weight(%wkv) proj_weight(%wo) mask(%mask) query_mask(%mask)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64x64xbf16>,
         tensor<128x64xbf16>, tensor<64x64xbf16>, tensor<2x1x1x8xi1>,
         tensor<2x1x1x8xi1>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_ln_output_without_norm(%x: tensor<16x2x64xbf16>,
                                      %wqkv: tensor<192x64xbf16>,
                                      %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'return_layernorm_output' needs the input normalization ('ln_weight')}}
  %y, %ln = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, return_layernorm_output}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
        -> (tensor<16x2x64xbf16>, tensor<16x2x64xbf16>)
  return
}
