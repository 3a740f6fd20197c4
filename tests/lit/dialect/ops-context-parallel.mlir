// RUN: te-opt %s | te-opt | FileCheck %s

// Context parallelism (docs/context-parallel.md) round-trips: the
// collectives (all-gather, reduce-scatter, all-to-all both ways),
// te.attention(_bwd)'s cp attributes and the layer ops' (cp_comm_type only
// when not the default all_gather).

// CHECK: #delayed_scaling = #te.delayed_scaling<fp8_dpa = true>
// CHECK-LABEL: func.func @collectives
// CHECK: te.cp_all_gather %{{.*}} {load_balanced, ranks = 2 : i64, seq_dim = 0 : i64} : tensor<4x2x2x8xbf16> -> tensor<8x2x2x8xbf16>
// CHECK: te.cp_reduce_scatter %{{.*}} {ranks = 2 : i64, seq_dim = 1 : i64} : tensor<2x8x2x8xbf16> -> tensor<2x4x2x8xbf16>
func.func @collectives(%k: tensor<4x2x2x8xbf16>, %dk: tensor<2x8x2x8xbf16>) -> (tensor<8x2x2x8xbf16>, tensor<2x4x2x8xbf16>) {
  %0 = te.cp_all_gather %k {ranks = 2 : i64, seq_dim = 0 : i64, load_balanced} : tensor<4x2x2x8xbf16> -> tensor<8x2x2x8xbf16>
  %1 = te.cp_reduce_scatter %dk {ranks = 2 : i64, seq_dim = 1 : i64} : tensor<2x8x2x8xbf16> -> tensor<2x4x2x8xbf16>
  return %0, %1 : tensor<8x2x2x8xbf16>, tensor<2x4x2x8xbf16>
}

// CHECK-LABEL: func.func @all_to_all
// CHECK: te.cp_all_to_all %{{.*}} {head_dim = 2 : i64, load_balanced, ranks = 2 : i64, seq_dim = 0 : i64} : tensor<4x2x4x8xbf16> -> tensor<8x2x2x8xbf16>
// CHECK: te.cp_all_to_all %{{.*}} {head_dim = 2 : i64, ranks = 2 : i64, seq_dim = 1 : i64} : tensor<2x8x2x8xf32> -> tensor<2x4x4x8xf32>
func.func @all_to_all(%q: tensor<4x2x4x8xbf16>, %o: tensor<2x8x2x8xf32>) -> (tensor<8x2x2x8xbf16>, tensor<2x4x4x8xf32>) {
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 2 : i64, load_balanced} : tensor<4x2x4x8xbf16> -> tensor<8x2x2x8xbf16>
  %1 = te.cp_all_to_all %o {ranks = 2 : i64, seq_dim = 1 : i64, head_dim = 2 : i64} : tensor<2x8x2x8xf32> -> tensor<2x4x4x8xf32>
  return %0, %1 : tensor<8x2x2x8xbf16>, tensor<2x4x4x8xf32>
}

// CHECK-LABEL: func.func @attention
// CHECK: te.attention {{.*}}cp_rank = 1 : i64, cp_ranks = 2 : i64
// CHECK: te.attention_bwd {{.*}}cp_rank = 1 : i64, cp_ranks = 2 : i64
func.func @attention(%q: tensor<4x2x4x8xbf16>, %k: tensor<8x2x2x8xbf16>, %v: tensor<8x2x2x8xbf16>) {
  %o, %lse = te.attention %q, %k, %v {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.35 : f64, cp_ranks = 2 : i64, cp_rank = 1 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<8x2x2x8xbf16>, tensor<8x2x2x8xbf16>) -> (tensor<4x2x4x8xbf16>, tensor<2x4x4xf32>)
  %dq, %dk, %dv = te.attention_bwd %o, %q, %k, %v, %o, %lse {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.35 : f64, cp_ranks = 2 : i64, cp_rank = 1 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x4x8xbf16>, tensor<8x2x2x8xbf16>, tensor<8x2x2x8xbf16>, tensor<4x2x4x8xbf16>, tensor<2x4x4xf32>) -> (tensor<4x2x4x8xbf16>, tensor<8x2x2x8xbf16>, tensor<8x2x2x8xbf16>)
  return
}

// CHECK-LABEL: func.func @layers
// CHECK: te.dot_product_attention {{.*}}{cp_rank = 1 : i64, cp_size = 2 : i64}
// CHECK: te.multihead_attention {{.*}}{cp_size = 2 : i64, num_attention_heads
// CHECK: te.dot_product_attention {{.*}}{cp_comm_type = "a2a", cp_rank = 1 : i64, cp_size = 2 : i64}
// CHECK: te.dot_product_attention {{.*}}{attn_mask_type = #te.attn_mask_type<no_mask>, cp_comm_type = "a2a", cp_size = 2 : i64, window_size = array<i64: 2, 2>}
// CHECK: te.multihead_attention {{.*}}cp_comm_type = "a2a"{{.*}}fp8_recipe = #delayed_scaling
func.func @layers(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x2x8xbf16>, %x: tensor<4x2x32xbf16>, %w: tensor<64x32xbf16>, %p: tensor<32x32xbf16>, %f: tensor<8x1x1x8xf32>) {
  %o = te.dot_product_attention %q, %k, %k {cp_size = 2 : i64, cp_rank = 1 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>) -> tensor<4x2x32xbf16>
  %y = te.multihead_attention %x qkv_weight(%w) proj_weight(%p) rotary_pos_emb(%f) {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64, cp_size = 2 : i64, cp_rank = 0 : i64}
      : (tensor<4x2x32xbf16>, tensor<64x32xbf16>, tensor<32x32xbf16>, tensor<8x1x1x8xf32>) -> tensor<4x2x32xbf16>
  %a = te.dot_product_attention %q, %k, %k {cp_size = 2 : i64, cp_rank = 1 : i64, cp_comm_type = "a2a"}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>) -> tensor<4x2x32xbf16>
  // A window and FP8 attention run with a2a.
  %win = te.dot_product_attention %q, %k, %k {attn_mask_type = #te.attn_mask_type<no_mask>, window_size = array<i64: 2, 2>, cp_size = 2 : i64, cp_rank = 0 : i64, cp_comm_type = "a2a"}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>) -> tensor<4x2x32xbf16>
  %fp8 = te.multihead_attention %x qkv_weight(%w) proj_weight(%p) rotary_pos_emb(%f) {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64, attention_dropout = 0.0 : f64, fp8_recipe = #te.delayed_scaling<fp8_dpa = true>, cp_size = 2 : i64, cp_rank = 1 : i64, cp_comm_type = "a2a"}
      : (tensor<4x2x32xbf16>, tensor<64x32xbf16>, tensor<32x32xbf16>, tensor<8x1x1x8xf32>) -> tensor<4x2x32xbf16>
  return
}
