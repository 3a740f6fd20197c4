// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -emit-bytecode | te-opt | FileCheck %s

// The attention layers: te.dot_product_attention, te.multihead_attention and
// te.transformer_layer. Unless noted, shapes are sbhd with s = 16, b = 2,
// 4 heads of head_dim 16 (hidden 64). Attributes at their default value
// (attn_mask_type = causal, qkv_format = sbhd, dropouts) are not printed.

// CHECK-DAG: #delayed_scaling = #te.delayed_scaling<>
// CHECK-DAG: #current_scaling = #te.current_scaling<>

//===----------------------------------------------------------------------===//
// te.dot_product_attention
//===----------------------------------------------------------------------===//

// q, k, v are [s, b, heads, head_dim]; the output is [s, b, heads * head_dim].
// CHECK-LABEL: func.func @dpa
// CHECK-SAME: (%[[Q:.*]]: tensor<16x2x4x16xbf16>, %[[K:.*]]: tensor<16x2x4x16xbf16>, %[[V:.*]]: tensor<16x2x4x16xbf16>)
// CHECK: te.dot_product_attention %[[Q]], %[[K]], %[[V]] :
// CHECK-SAME: (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
func.func @dpa(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
               %v: tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16> {
  %o = te.dot_product_attention %q, %k, %v
      {attn_mask_type = #te.attn_mask_type<causal>,
       qkv_format = #te.qkv_format<sbhd>, attention_dropout = 0.0 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return %o : tensor<16x2x64xbf16>
}

// TE's mask pair: the keys' padding mask and the queries' own (query_mask,
// [b, 1, 1, s_q]), here with as many keys as queries.
// CHECK-LABEL: func.func @dpa_query_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<16x2x4x16xbf16>, %{{.*}}: tensor<16x2x4x16xbf16>, %{{.*}}: tensor<16x2x4x16xbf16>, %[[M:.*]]: tensor<2x1x1x16xi1>, %[[QM:.*]]: tensor<2x1x1x16xi1>)
// CHECK: te.dot_product_attention %[[Q]], %{{.*}}, %{{.*}} mask(%[[M]]) query_mask(%[[QM]])
func.func @dpa_query_mask(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
                          %v: tensor<16x2x4x16xbf16>, %m: tensor<2x1x1x16xi1>,
                          %qm: tensor<2x1x1x16xi1>) -> tensor<16x2x64xbf16> {
  %o = te.dot_product_attention %q, %k, %v mask(%m) query_mask(%qm)
      {attn_mask_type = #te.attn_mask_type<padding_causal>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>, tensor<2x1x1x16xi1>, tensor<2x1x1x16xi1>)
        -> tensor<16x2x64xbf16>
  return %o : tensor<16x2x64xbf16>
}

// The mask types that take no mask operand.
// Sliding windows (window_size = [left, right], -1 = unbounded).
// CHECK-LABEL: func.func @dpa_windows
// CHECK: te.dot_product_attention {{.*}}window_size = array<i64: 4096, 0>
// CHECK: te.dot_product_attention {{.*}}window_size = array<i64: -1, 8>
func.func @dpa_windows(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xbf16>,
                       %v: tensor<16x2x4x16xbf16>) {
  %a = te.dot_product_attention %q, %k, %v {window_size = array<i64: 4096, 0>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  %b = te.dot_product_attention %q, %k, %v
      {attn_mask_type = #te.attn_mask_type<no_mask>,
       window_size = array<i64: -1, 8>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// CHECK-LABEL: func.func @dpa_mask_types_without_mask
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} {attn_mask_type = #te.attn_mask_type<no_mask>} :
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} {attn_mask_type = #te.attn_mask_type<causal_bottom_right>} :
func.func @dpa_mask_types_without_mask(%q: tensor<16x2x4x16xf16>,
                                       %kv: tensor<32x2x4x16xf16>)
    -> (tensor<16x2x64xf16>, tensor<16x2x64xf16>) {
  %0 = te.dot_product_attention %q, %kv, %kv
      {attn_mask_type = #te.attn_mask_type<no_mask>}
      : (tensor<16x2x4x16xf16>, tensor<32x2x4x16xf16>,
         tensor<32x2x4x16xf16>) -> tensor<16x2x64xf16>
  %1 = te.dot_product_attention %q, %kv, %kv
      {attn_mask_type = #te.attn_mask_type<causal_bottom_right>}
      : (tensor<16x2x4x16xf16>, tensor<32x2x4x16xf16>,
         tensor<32x2x4x16xf16>) -> tensor<16x2x64xf16>
  return %0, %1 : tensor<16x2x64xf16>, tensor<16x2x64xf16>
}

// Padding masks are i1 [b, 1, 1, s_kv] (true = masked out); s_kv = 32 here.
// CHECK-LABEL: func.func @dpa_padding_masks
// CHECK-SAME: %[[MASK:[^:]*]]: tensor<2x1x1x32xi1>
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} mask(%[[MASK]]) {attn_mask_type = #te.attn_mask_type<padding>} :
// CHECK-SAME: (tensor<16x2x4x16xf32>, tensor<32x2x4x16xf32>, tensor<32x2x4x16xf32>, tensor<2x1x1x32xi1>) -> tensor<16x2x64xf32>
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} mask(%[[MASK]]) {attn_mask_type = #te.attn_mask_type<padding_causal>} :
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} mask(%[[MASK]]) {attn_mask_type = #te.attn_mask_type<padding_causal_bottom_right>} :
func.func @dpa_padding_masks(%q: tensor<16x2x4x16xf32>,
                             %kv: tensor<32x2x4x16xf32>,
                             %mask: tensor<2x1x1x32xi1>)
    -> (tensor<16x2x64xf32>, tensor<16x2x64xf32>, tensor<16x2x64xf32>) {
  %0 = te.dot_product_attention %q, %kv, %kv mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x4x16xf32>, tensor<32x2x4x16xf32>,
         tensor<32x2x4x16xf32>, tensor<2x1x1x32xi1>) -> tensor<16x2x64xf32>
  %1 = te.dot_product_attention %q, %kv, %kv mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding_causal>}
      : (tensor<16x2x4x16xf32>, tensor<32x2x4x16xf32>,
         tensor<32x2x4x16xf32>, tensor<2x1x1x32xi1>) -> tensor<16x2x64xf32>
  %2 = te.dot_product_attention %q, %kv, %kv mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding_causal_bottom_right>}
      : (tensor<16x2x4x16xf32>, tensor<32x2x4x16xf32>,
         tensor<32x2x4x16xf32>, tensor<2x1x1x32xi1>) -> tensor<16x2x64xf32>
  return %0, %1, %2
      : tensor<16x2x64xf32>, tensor<16x2x64xf32>, tensor<16x2x64xf32>
}

// An arbitrary mask is [b, heads, s_q, s_kv]; b and heads may be 1
// (broadcast).
// CHECK-LABEL: func.func @dpa_arbitrary_masks
// CHECK: te.dot_product_attention {{.*}} mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<arbitrary>} : ({{.*}}, tensor<2x4x16x32xi1>)
// CHECK: te.dot_product_attention {{.*}} mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<arbitrary>} : ({{.*}}, tensor<1x4x16x32xi1>)
// CHECK: te.dot_product_attention {{.*}} mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<arbitrary>} : ({{.*}}, tensor<2x1x16x32xi1>)
// CHECK: te.dot_product_attention {{.*}} mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<arbitrary>} : ({{.*}}, tensor<1x1x16x32xi1>)
func.func @dpa_arbitrary_masks(%q: tensor<16x2x4x16xbf16>,
                               %kv: tensor<32x2x4x16xbf16>,
                               %full: tensor<2x4x16x32xi1>,
                               %per_head: tensor<1x4x16x32xi1>,
                               %per_batch: tensor<2x1x16x32xi1>,
                               %shared: tensor<1x1x16x32xi1>) {
  %0 = te.dot_product_attention %q, %kv, %kv mask(%full)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<32x2x4x16xbf16>, tensor<2x4x16x32xi1>) -> tensor<16x2x64xbf16>
  %1 = te.dot_product_attention %q, %kv, %kv mask(%per_head)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<32x2x4x16xbf16>, tensor<1x4x16x32xi1>) -> tensor<16x2x64xbf16>
  %2 = te.dot_product_attention %q, %kv, %kv mask(%per_batch)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<32x2x4x16xbf16>, tensor<2x1x16x32xi1>) -> tensor<16x2x64xbf16>
  %3 = te.dot_product_attention %q, %kv, %kv mask(%shared)
      {attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<16x2x4x16xbf16>, tensor<32x2x4x16xbf16>,
         tensor<32x2x4x16xbf16>, tensor<1x1x16x32xi1>) -> tensor<16x2x64xbf16>
  return
}

// bshd: q, k, v are [b, s, heads, head_dim], the output [b, s, hidden].
// CHECK-LABEL: func.func @dpa_bshd
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<padding>, qkv_format = #te.qkv_format<bshd>} :
// CHECK-SAME: (tensor<2x16x4x16xbf16>, tensor<2x32x4x16xbf16>, tensor<2x32x4x16xbf16>, tensor<2x1x1x32xi1>) -> tensor<2x16x64xbf16>
func.func @dpa_bshd(%q: tensor<2x16x4x16xbf16>, %kv: tensor<2x32x4x16xbf16>,
                    %mask: tensor<2x1x1x32xi1>) -> tensor<2x16x64xbf16> {
  %o = te.dot_product_attention %q, %kv, %kv mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<bshd>}
      : (tensor<2x16x4x16xbf16>, tensor<2x32x4x16xbf16>,
         tensor<2x32x4x16xbf16>, tensor<2x1x1x32xi1>) -> tensor<2x16x64xbf16>
  return %o : tensor<2x16x64xbf16>
}

// GQA (2 key/value heads for 4 query heads) and MQA (1), with an explicit
// softmax_scale and attention dropout.
// CHECK-LABEL: func.func @dpa_gqa_mqa
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} {attention_dropout = 1.000000e-01 : f64, softmax_scale = 1.250000e-01 : f64} :
// CHECK-SAME: (tensor<16x2x4x16xbf16>, tensor<16x2x2x16xbf16>, tensor<16x2x2x16xbf16>) -> tensor<16x2x64xbf16>
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} :
// CHECK-SAME: (tensor<16x2x4x16xbf16>, tensor<16x2x1x16xbf16>, tensor<16x2x1x16xbf16>) -> tensor<16x2x64xbf16>
func.func @dpa_gqa_mqa(%q: tensor<16x2x4x16xbf16>,
                       %kv2: tensor<16x2x2x16xbf16>,
                       %kv1: tensor<16x2x1x16xbf16>)
    -> (tensor<16x2x64xbf16>, tensor<16x2x64xbf16>) {
  %0 = te.dot_product_attention %q, %kv2, %kv2
      {softmax_scale = 0.125 : f64, attention_dropout = 0.1 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x2x16xbf16>,
         tensor<16x2x2x16xbf16>) -> tensor<16x2x64xbf16>
  %1 = te.dot_product_attention %q, %kv1, %kv1
      : (tensor<16x2x4x16xbf16>, tensor<16x2x1x16xbf16>,
         tensor<16x2x1x16xbf16>) -> tensor<16x2x64xbf16>
  return %0, %1 : tensor<16x2x64xbf16>, tensor<16x2x64xbf16>
}

// Real size: 32 query heads, 8 key/value heads, head_dim 128, seq 2048,
// batch 4.
// CHECK-LABEL: func.func @dpa_real_size
// CHECK: te.dot_product_attention %{{.*}}, %{{.*}}, %{{.*}} :
// CHECK-SAME: (tensor<2048x4x32x128xbf16>, tensor<2048x4x8x128xbf16>, tensor<2048x4x8x128xbf16>) -> tensor<2048x4x4096xbf16>
func.func @dpa_real_size(%q: tensor<2048x4x32x128xbf16>,
                         %k: tensor<2048x4x8x128xbf16>,
                         %v: tensor<2048x4x8x128xbf16>)
    -> tensor<2048x4x4096xbf16> {
  %o = te.dot_product_attention %q, %k, %v
      : (tensor<2048x4x32x128xbf16>, tensor<2048x4x8x128xbf16>,
         tensor<2048x4x8x128xbf16>) -> tensor<2048x4x4096xbf16>
  return %o : tensor<2048x4x4096xbf16>
}

//===----------------------------------------------------------------------===//
// te.multihead_attention
//===----------------------------------------------------------------------===//

// Without ln_weight there is no input normalization. qkv_weight is
// [(heads + 2 * heads) * head_dim, hidden] = [192, 64].
// CHECK-LABEL: func.func @mha
// CHECK-SAME: (%[[X:.*]]: tensor<16x2x64xbf16>, %[[WQKV:.*]]: tensor<192x64xbf16>, %[[WO:.*]]: tensor<64x64xbf16>)
// CHECK: te.multihead_attention %[[X]] qkv_weight(%[[WQKV]]) proj_weight(%[[WO]]) {num_attention_heads = 4 : i64} :
// CHECK-SAME: (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
func.func @mha(%x: tensor<16x2x64xbf16>, %wqkv: tensor<192x64xbf16>,
               %wo: tensor<64x64xbf16>) -> tensor<16x2x64xbf16> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64}
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
        -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// Every optional operand: LayerNorm parameters, QKV and projection biases,
// a padding mask and rotary embeddings (f32 [s, 1, 1, head_dim]).
// CHECK-LABEL: func.func @mha_all_operands
// CHECK-SAME: (%[[X:.*]]: tensor<16x2x64xf16>, %[[G:.*]]: tensor<64xf16>, %[[B:.*]]: tensor<64xf16>, %[[WQKV:.*]]: tensor<192x64xf16>, %[[BQKV:.*]]: tensor<192xf16>, %[[WO:.*]]: tensor<64x64xf16>, %[[BO:.*]]: tensor<64xf16>, %[[MASK:.*]]: tensor<2x1x1x16xi1>, %[[ROPE:.*]]: tensor<16x1x1x16xf32>)
// CHECK: te.multihead_attention %[[X]] ln_weight(%[[G]]) ln_bias(%[[B]]) qkv_weight(%[[WQKV]]) qkv_bias(%[[BQKV]]) proj_weight(%[[WO]]) proj_bias(%[[BO]]) mask(%[[MASK]]) rotary_pos_emb(%[[ROPE]]) {attention_dropout = 0.000000e+00 : f64, attn_mask_type = #te.attn_mask_type<padding_causal>, fp8_recipe = #delayed_scaling, layernorm_epsilon = 1.000000e-08 : f64, num_attention_heads = 4 : i64, zero_centered_gamma} :
// CHECK-SAME: (tensor<16x2x64xf16>, tensor<64xf16>, tensor<64xf16>, tensor<192x64xf16>, tensor<192xf16>, tensor<64x64xf16>, tensor<64xf16>, tensor<2x1x1x16xi1>, tensor<16x1x1x16xf32>) -> tensor<16x2x64xf16>
func.func @mha_all_operands(
    %x: tensor<16x2x64xf16>, %gamma: tensor<64xf16>, %beta: tensor<64xf16>,
    %wqkv: tensor<192x64xf16>, %bqkv: tensor<192xf16>,
    %wo: tensor<64x64xf16>, %bo: tensor<64xf16>,
    %mask: tensor<2x1x1x16xi1>, %rope: tensor<16x1x1x16xf32>)
    -> tensor<16x2x64xf16> {
  %y = te.multihead_attention %x ln_weight(%gamma) ln_bias(%beta)
      qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo)
      mask(%mask) rotary_pos_emb(%rope)
      {num_attention_heads = 4 : i64,
       attn_mask_type = #te.attn_mask_type<padding_causal>,
       attention_dropout = 0.0 : f64, layernorm_epsilon = 1.0e-8 : f64,
       zero_centered_gamma, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x2x64xf16>, tensor<64xf16>, tensor<64xf16>,
         tensor<192x64xf16>, tensor<192xf16>, tensor<64x64xf16>,
         tensor<64xf16>, tensor<2x1x1x16xi1>, tensor<16x1x1x16xf32>)
        -> tensor<16x2x64xf16>
  return %y : tensor<16x2x64xf16>
}

// The normalized input as a second result (return_layernorm_output), and a
// rotary table of 8 of the 16 channels with interleaved pairs (GPT-J's).
// CHECK-LABEL: func.func @mha_ln_output_partial_rotary
// CHECK: %{{.*}}, %{{.*}} = te.multihead_attention %{{.*}} ln_weight(%{{.*}}) qkv_weight(%{{.*}}) proj_weight(%{{.*}}) rotary_pos_emb(%{{.*}}) {{{.*}}return_layernorm_output, rotary_pos_interleaved} :
// CHECK-SAME: -> (tensor<16x2x64xbf16>, tensor<16x2x64xbf16>)
func.func @mha_ln_output_partial_rotary(
    %x: tensor<16x2x64xbf16>, %gamma: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>,
    %rope: tensor<16x1x1x8xf32>)
    -> (tensor<16x2x64xbf16>, tensor<16x2x64xbf16>) {
  %y, %ln = te.multihead_attention %x ln_weight(%gamma) qkv_weight(%wqkv)
      proj_weight(%wo) rotary_pos_emb(%rope)
      {num_attention_heads = 4 : i64, normalization = #te.normalization<RMSNorm>,
       return_layernorm_output, rotary_pos_interleaved}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<192x64xbf16>,
         tensor<64x64xbf16>, tensor<16x1x1x8xf32>)
        -> (tensor<16x2x64xbf16>, tensor<16x2x64xbf16>)
  return %y, %ln : tensor<16x2x64xbf16>, tensor<16x2x64xbf16>
}

// RMSNorm: ln_weight without ln_bias. GQA with 2 key/value heads:
// qkv_weight is [(4 + 2 * 2) * 16, 64] = [128, 64].
// CHECK-LABEL: func.func @mha_rmsnorm_gqa
// CHECK: te.multihead_attention %{{.*}} ln_weight(%{{.*}}) qkv_weight(%{{.*}}) proj_weight(%{{.*}}) {normalization = #te.normalization<RMSNorm>, num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64} :
// CHECK-SAME: (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
func.func @mha_rmsnorm_gqa(%x: tensor<16x2x64xbf16>, %gamma: tensor<64xbf16>,
                           %wqkv: tensor<128x64xbf16>,
                           %wo: tensor<64x64xbf16>) -> tensor<16x2x64xbf16> {
  %y = te.multihead_attention %x ln_weight(%gamma) qkv_weight(%wqkv)
      proj_weight(%wo)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       normalization = #te.normalization<RMSNorm>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>,
         tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// MQA: one key/value head, qkv_weight [(4 + 2) * 16, 64] = [96, 64].
// CHECK-LABEL: func.func @mha_mqa
// CHECK: te.multihead_attention %{{.*}} qkv_weight(%{{.*}}) proj_weight(%{{.*}}) {fp8_recipe = #current_scaling, num_attention_heads = 4 : i64, num_gqa_groups = 1 : i64} :
// CHECK-SAME: (tensor<16x2x64xbf16>, tensor<96x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
func.func @mha_mqa(%x: tensor<16x2x64xbf16>, %wqkv: tensor<96x64xbf16>,
                   %wo: tensor<64x64xbf16>) -> tensor<16x2x64xbf16> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 4 : i64, num_gqa_groups = 1 : i64,
       fp8_recipe = #te.current_scaling<>}
      : (tensor<16x2x64xbf16>, tensor<96x64xbf16>, tensor<64x64xbf16>)
        -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// kv_channels sets head_dim apart from hidden / heads, which then need not
// divide: 3 heads of 16 over hidden 64, qkv_weight [(3 + 6) * 16, 64],
// proj_weight [64, 3 * 16].
// CHECK-LABEL: func.func @mha_kv_channels
// CHECK: te.multihead_attention %{{.*}} qkv_weight(%{{.*}}) proj_weight(%{{.*}}) {kv_channels = 16 : i64, num_attention_heads = 3 : i64} :
// CHECK-SAME: (tensor<16x2x64xf32>, tensor<144x64xf32>, tensor<64x48xf32>) -> tensor<16x2x64xf32>
func.func @mha_kv_channels(%x: tensor<16x2x64xf32>, %wqkv: tensor<144x64xf32>,
                           %wo: tensor<64x48xf32>) -> tensor<16x2x64xf32> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 3 : i64, kv_channels = 16 : i64}
      : (tensor<16x2x64xf32>, tensor<144x64xf32>, tensor<64x48xf32>)
        -> tensor<16x2x64xf32>
  return %y : tensor<16x2x64xf32>
}

// bshd input [b, s, hidden] with an arbitrary mask broadcast over the batch.
// CHECK-LABEL: func.func @mha_bshd_arbitrary
// CHECK: te.multihead_attention %{{.*}} qkv_weight(%{{.*}}) proj_weight(%{{.*}}) mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<arbitrary>, num_attention_heads = 4 : i64, qkv_format = #te.qkv_format<bshd>} :
// CHECK-SAME: (tensor<2x16x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<1x4x16x16xi1>) -> tensor<2x16x64xbf16>
func.func @mha_bshd_arbitrary(%x: tensor<2x16x64xbf16>,
                              %wqkv: tensor<192x64xbf16>,
                              %wo: tensor<64x64xbf16>,
                              %mask: tensor<1x4x16x16xi1>)
    -> tensor<2x16x64xbf16> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      mask(%mask)
      {num_attention_heads = 4 : i64, qkv_format = #te.qkv_format<bshd>,
       attn_mask_type = #te.attn_mask_type<arbitrary>}
      : (tensor<2x16x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>,
         tensor<1x4x16x16xi1>) -> tensor<2x16x64xbf16>
  return %y : tensor<2x16x64xbf16>
}

// Without an fp8_recipe, GEMM dims need no FP8 alignment: 5 x 2 tokens,
// hidden 40, 5 heads of 8.
// CHECK-LABEL: func.func @mha_unaligned_without_recipe
// CHECK: te.multihead_attention %{{.*}} qkv_weight(%{{.*}}) proj_weight(%{{.*}}) {num_attention_heads = 5 : i64} :
// CHECK-SAME: (tensor<5x2x40xf32>, tensor<120x40xf32>, tensor<40x40xf32>) -> tensor<5x2x40xf32>
func.func @mha_unaligned_without_recipe(%x: tensor<5x2x40xf32>,
                                        %wqkv: tensor<120x40xf32>,
                                        %wo: tensor<40x40xf32>)
    -> tensor<5x2x40xf32> {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      {num_attention_heads = 5 : i64}
      : (tensor<5x2x40xf32>, tensor<120x40xf32>, tensor<40x40xf32>)
        -> tensor<5x2x40xf32>
  return %y : tensor<5x2x40xf32>
}

// Real size: hidden 4096, 32 heads, 8 key/value heads (qkv_weight
// [(32 + 16) * 128, 4096]), seq 2048, batch 4, rotary embeddings, FP8.
// CHECK-LABEL: func.func @mha_real_size
// CHECK: te.multihead_attention %{{.*}} ln_weight(%{{.*}}) qkv_weight(%{{.*}}) proj_weight(%{{.*}}) rotary_pos_emb(%{{.*}}) {fp8_recipe = #delayed_scaling, normalization = #te.normalization<RMSNorm>, num_attention_heads = 32 : i64, num_gqa_groups = 8 : i64} :
// CHECK-SAME: (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<6144x4096xbf16>, tensor<4096x4096xbf16>, tensor<2048x1x1x128xf32>) -> tensor<2048x4x4096xbf16>
func.func @mha_real_size(%x: tensor<2048x4x4096xbf16>,
                         %gamma: tensor<4096xbf16>,
                         %wqkv: tensor<6144x4096xbf16>,
                         %wo: tensor<4096x4096xbf16>,
                         %rope: tensor<2048x1x1x128xf32>)
    -> tensor<2048x4x4096xbf16> {
  %y = te.multihead_attention %x ln_weight(%gamma) qkv_weight(%wqkv)
      proj_weight(%wo) rotary_pos_emb(%rope)
      {num_attention_heads = 32 : i64, num_gqa_groups = 8 : i64,
       normalization = #te.normalization<RMSNorm>,
       fp8_recipe = #te.delayed_scaling<>}
      : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<6144x4096xbf16>,
         tensor<4096x4096xbf16>, tensor<2048x1x1x128xf32>)
        -> tensor<2048x4x4096xbf16>
  return %y : tensor<2048x4x4096xbf16>
}

//===----------------------------------------------------------------------===//
// te.transformer_layer
//===----------------------------------------------------------------------===//

// GPT-style block: LayerNorm, biases everywhere, gelu MLP with ffn 256.
// CHECK-LABEL: func.func @transformer_layer
// CHECK-SAME: (%[[X:.*]]: tensor<16x2x64xbf16>, %[[G1:.*]]: tensor<64xbf16>, %[[B1:.*]]: tensor<64xbf16>, %[[WQKV:.*]]: tensor<192x64xbf16>, %[[BQKV:.*]]: tensor<192xbf16>, %[[WO:.*]]: tensor<64x64xbf16>, %[[BO:.*]]: tensor<64xbf16>, %[[G2:.*]]: tensor<64xbf16>, %[[B2:.*]]: tensor<64xbf16>, %[[W1:.*]]: tensor<256x64xbf16>, %[[BF1:.*]]: tensor<256xbf16>, %[[W2:.*]]: tensor<64x256xbf16>, %[[BF2:.*]]: tensor<64xbf16>)
// CHECK: te.transformer_layer %[[X]] attn_ln_weight(%[[G1]]) attn_ln_bias(%[[B1]]) qkv_weight(%[[WQKV]]) qkv_bias(%[[BQKV]]) proj_weight(%[[WO]]) proj_bias(%[[BO]]) mlp_ln_weight(%[[G2]]) mlp_ln_bias(%[[B2]]) fc1_weight(%[[W1]]) fc1_bias(%[[BF1]]) fc2_weight(%[[W2]]) fc2_bias(%[[BF2]]) {num_attention_heads = 4 : i64} :
// CHECK-SAME: -> tensor<16x2x64xbf16>
func.func @transformer_layer(
    %x: tensor<16x2x64xbf16>, %g1: tensor<64xbf16>, %b1: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %bqkv: tensor<192xbf16>,
    %wo: tensor<64x64xbf16>, %bo: tensor<64xbf16>,
    %g2: tensor<64xbf16>, %b2: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %bf1: tensor<256xbf16>,
    %w2: tensor<64x256xbf16>, %bf2: tensor<64xbf16>) -> tensor<16x2x64xbf16> {
  %y = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo)
      mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1) fc1_bias(%bf1)
      fc2_weight(%w2) fc2_bias(%bf2)
      {num_attention_heads = 4 : i64, hidden_dropout = 0.1 : f64,
       self_attn_mask_type = #te.attn_mask_type<causal>,
       attn_input_format = #te.qkv_format<sbhd>,
       activation = #te.activation<gelu>}
      : (tensor<16x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<192xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<256xbf16>, tensor<64x256xbf16>,
         tensor<64xbf16>) -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// Llama-style block: RMSNorm (no ln biases), no linear biases, GQA, SwiGLU,
// rotary embeddings, no dropout, and every other attribute set.
// CHECK-LABEL: func.func @transformer_layer_llama
// CHECK-SAME: (%[[X:.*]]: tensor<16x2x64xf16>, %[[G1:.*]]: tensor<64xf16>, %[[WQKV:.*]]: tensor<128x64xf16>, %[[WO:.*]]: tensor<64x64xf16>, %[[G2:.*]]: tensor<64xf16>, %[[W1:.*]]: tensor<512x64xf16>, %[[W2:.*]]: tensor<64x256xf16>, %[[ROPE:.*]]: tensor<16x1x1x16xf32>)
// CHECK: te.transformer_layer %[[X]] attn_ln_weight(%[[G1]]) qkv_weight(%[[WQKV]]) proj_weight(%[[WO]]) mlp_ln_weight(%[[G2]]) fc1_weight(%[[W1]]) fc2_weight(%[[W2]]) rotary_pos_emb(%[[ROPE]])
// CHECK-SAME: {activation = #te.activation<swiglu>, apply_residual_connection_post_layernorm, attention_dropout = 0.000000e+00 : f64, fp8_recipe = #current_scaling, hidden_dropout = 0.000000e+00 : f64, kv_channels = 16 : i64, layernorm_epsilon = 1.000000e-08 : f64, normalization = #te.normalization<RMSNorm>, num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64, zero_centered_gamma} :
// CHECK-SAME: (tensor<16x2x64xf16>, tensor<64xf16>, tensor<128x64xf16>, tensor<64x64xf16>, tensor<64xf16>, tensor<512x64xf16>, tensor<64x256xf16>, tensor<16x1x1x16xf32>) -> tensor<16x2x64xf16>
func.func @transformer_layer_llama(
    %x: tensor<16x2x64xf16>, %g1: tensor<64xf16>, %wqkv: tensor<128x64xf16>,
    %wo: tensor<64x64xf16>, %g2: tensor<64xf16>, %w1: tensor<512x64xf16>,
    %w2: tensor<64x256xf16>, %rope: tensor<16x1x1x16xf32>)
    -> tensor<16x2x64xf16> {
  %y = te.transformer_layer %x attn_ln_weight(%g1) qkv_weight(%wqkv)
      proj_weight(%wo) mlp_ln_weight(%g2) fc1_weight(%w1) fc2_weight(%w2)
      rotary_pos_emb(%rope)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       kv_channels = 16 : i64, normalization = #te.normalization<RMSNorm>,
       activation = #te.activation<swiglu>, layernorm_epsilon = 1.0e-8 : f64,
       zero_centered_gamma, hidden_dropout = 0.0 : f64,
       attention_dropout = 0.0 : f64,
       apply_residual_connection_post_layernorm,
       fp8_recipe = #te.current_scaling<>}
      : (tensor<16x2x64xf16>, tensor<64xf16>, tensor<128x64xf16>,
         tensor<64x64xf16>, tensor<64xf16>, tensor<512x64xf16>,
         tensor<64x256xf16>, tensor<16x1x1x16xf32>) -> tensor<16x2x64xf16>
  return %y : tensor<16x2x64xf16>
}

// bshd with a padding mask; MQA; f32.
// CHECK-LABEL: func.func @transformer_layer_bshd_padding
// CHECK: te.transformer_layer {{.*}} fc2_weight(%{{.*}}) mask(%{{.*}}) {attn_input_format = #te.qkv_format<bshd>, num_attention_heads = 4 : i64, num_gqa_groups = 1 : i64, self_attn_mask_type = #te.attn_mask_type<padding>} :
// CHECK-SAME: (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<96x64xf32>, tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>, tensor<64x256xf32>, tensor<2x1x1x16xi1>) -> tensor<2x16x64xf32>
func.func @transformer_layer_bshd_padding(
    %x: tensor<2x16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>,
    %wqkv: tensor<96x64xf32>, %wo: tensor<64x64xf32>,
    %w1: tensor<256x64xf32>, %w2: tensor<64x256xf32>,
    %mask: tensor<2x1x1x16xi1>) -> tensor<2x16x64xf32> {
  %y = te.transformer_layer %x attn_ln_weight(%g) attn_ln_bias(%b)
      qkv_weight(%wqkv) proj_weight(%wo) mlp_ln_weight(%g) mlp_ln_bias(%b)
      fc1_weight(%w1) fc2_weight(%w2) mask(%mask)
      {num_attention_heads = 4 : i64, num_gqa_groups = 1 : i64,
       attn_input_format = #te.qkv_format<bshd>,
       self_attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<96x64xf32>, tensor<64x64xf32>, tensor<64xf32>,
         tensor<64xf32>, tensor<256x64xf32>, tensor<64x256xf32>,
         tensor<2x1x1x16xi1>) -> tensor<2x16x64xf32>
  return %y : tensor<2x16x64xf32>
}

// Real size: the TransformerLayer(4096, 16384, 32) of the te.transformer_layer
// documentation, seq 2048, batch 4, in FP8.
// CHECK-LABEL: func.func @transformer_layer_real_size
// CHECK: te.transformer_layer {{.*}} {fp8_recipe = #delayed_scaling, num_attention_heads = 32 : i64} :
// CHECK-SAME: (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>, tensor<12288x4096xbf16>, tensor<12288xbf16>, tensor<4096x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>, tensor<16384x4096xbf16>, tensor<16384xbf16>, tensor<4096x16384xbf16>, tensor<4096xbf16>) -> tensor<2048x4x4096xbf16>
func.func @transformer_layer_real_size(
    %x: tensor<2048x4x4096xbf16>, %g1: tensor<4096xbf16>,
    %b1: tensor<4096xbf16>, %wqkv: tensor<12288x4096xbf16>,
    %bqkv: tensor<12288xbf16>, %wo: tensor<4096x4096xbf16>,
    %bo: tensor<4096xbf16>, %g2: tensor<4096xbf16>, %b2: tensor<4096xbf16>,
    %w1: tensor<16384x4096xbf16>, %bf1: tensor<16384xbf16>,
    %w2: tensor<4096x16384xbf16>, %bf2: tensor<4096xbf16>)
    -> tensor<2048x4x4096xbf16> {
  %y = te.transformer_layer %x attn_ln_weight(%g1) attn_ln_bias(%b1)
      qkv_weight(%wqkv) qkv_bias(%bqkv) proj_weight(%wo) proj_bias(%bo)
      mlp_ln_weight(%g2) mlp_ln_bias(%b2) fc1_weight(%w1) fc1_bias(%bf1)
      fc2_weight(%w2) fc2_bias(%bf2)
      {num_attention_heads = 32 : i64, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
         tensor<12288x4096xbf16>, tensor<12288xbf16>, tensor<4096x4096xbf16>,
         tensor<4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
         tensor<16384x4096xbf16>, tensor<16384xbf16>,
         tensor<4096x16384xbf16>, tensor<4096xbf16>)
        -> tensor<2048x4x4096xbf16>
  return %y : tensor<2048x4x4096xbf16>
}

// Cross-attention MultiheadAttention: queries from the 16-token input,
// keys and values from an 8-token encoder output, keys padded.
// CHECK-LABEL: func.func @multihead_attention_cross
// CHECK: te.multihead_attention %{{.*}} encoder_output(%{{.*}}) ln_weight(%{{.*}}) ln_bias(%{{.*}}) qkv_weight(%{{.*}}) qkv_bias(%{{.*}}) kv_weight(%{{.*}}) kv_bias(%{{.*}}) proj_weight(%{{.*}}) proj_bias(%{{.*}}) mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<padding>, num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64}
func.func @multihead_attention_cross(
    %x: tensor<16x2x64xbf16>, %enc: tensor<8x2x64xbf16>,
    %g: tensor<64xbf16>, %b: tensor<64xbf16>, %wq: tensor<64x64xbf16>,
    %bq: tensor<64xbf16>, %wkv: tensor<64x64xbf16>, %bkv: tensor<64xbf16>,
    %wo: tensor<64x64xbf16>, %bo: tensor<64xbf16>,
    %mask: tensor<2x1x1x8xi1>) -> tensor<16x2x64xbf16> {
  %y = te.multihead_attention %x encoder_output(%enc) ln_weight(%g)
      ln_bias(%b) qkv_weight(%wq) qkv_bias(%bq) kv_weight(%wkv) kv_bias(%bkv)
      proj_weight(%wo) proj_bias(%bo) mask(%mask)
      {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64,
       attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64xbf16>,
         tensor<64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64x64xbf16>, tensor<64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<2x1x1x8xi1>) -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// A decoder TransformerLayer (T5's): the inter_* cross-attention block over
// the encoder output, its keys' padding mask.
// CHECK-LABEL: func.func @transformer_layer_decoder
// CHECK: te.transformer_layer %{{.*}} encoder_output(%{{.*}}) attn_ln_weight(%{{.*}}) qkv_weight(%{{.*}}) proj_weight(%{{.*}}) inter_ln_weight(%{{.*}}) inter_q_weight(%{{.*}}) inter_kv_weight(%{{.*}}) inter_proj_weight(%{{.*}}) mlp_ln_weight(%{{.*}}) fc1_weight(%{{.*}}) fc2_weight(%{{.*}}) enc_dec_mask(%{{.*}}) {enc_dec_attn_mask_type = #te.attn_mask_type<padding>, normalization = #te.normalization<RMSNorm>, num_attention_heads = 4 : i64}
func.func @transformer_layer_decoder(
    %x: tensor<16x2x64xbf16>, %enc: tensor<8x2x64xbf16>, %g: tensor<64xbf16>,
    %wqkv: tensor<192x64xbf16>, %wo: tensor<64x64xbf16>,
    %wq: tensor<64x64xbf16>, %wkv: tensor<128x64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>,
    %mask: tensor<2x1x1x8xi1>) -> tensor<16x2x64xbf16> {
  %y = te.transformer_layer %x encoder_output(%enc) attn_ln_weight(%g)
      qkv_weight(%wqkv) proj_weight(%wo) inter_ln_weight(%g)
      inter_q_weight(%wq) inter_kv_weight(%wkv) inter_proj_weight(%wo)
      mlp_ln_weight(%g) fc1_weight(%w1) fc2_weight(%w2) enc_dec_mask(%mask)
      {num_attention_heads = 4 : i64,
       normalization = #te.normalization<RMSNorm>,
       enc_dec_attn_mask_type = #te.attn_mask_type<padding>}
      : (tensor<16x2x64xbf16>, tensor<8x2x64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>, tensor<64x64xbf16>, tensor<64xbf16>,
         tensor<64x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>,
         tensor<64xbf16>, tensor<256x64xbf16>, tensor<64x256xbf16>,
         tensor<2x1x1x8xi1>) -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}
