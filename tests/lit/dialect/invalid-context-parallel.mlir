// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of context parallelism (docs/context-parallel.md): the
// collectives, te.attention's cp attributes and the layer ops' cp_size and
// cp_comm_type.

func.func @gather_shape(%k: tensor<4x2x2x8xbf16>) {
  // expected-error @+1 {{the whole tensor 'tensor<4x4x2x8xbf16>' must be the local 'tensor<4x2x2x8xbf16>' with 2 times its dim 0}}
  %0 = te.cp_all_gather %k {ranks = 2 : i64, seq_dim = 0 : i64} : tensor<4x2x2x8xbf16> -> tensor<4x4x2x8xbf16>
  return
}

// -----

func.func @scatter_seq_dim(%k: tensor<8x2x2x8xbf16>) {
  // expected-error @+1 {{seq_dim must be 0 (sbhd) or 1 (bshd), got 2}}
  %0 = te.cp_reduce_scatter %k {ranks = 2 : i64, seq_dim = 2 : i64} : tensor<8x2x2x8xbf16> -> tensor<8x2x1x8xbf16>
  return
}

// -----

func.func @odd_chunks(%k: tensor<3x2x2x8xbf16>) {
  // expected-error @+1 {{load_balanced needs an even local dim 0 (two chunks a rank), got 3}}
  %0 = te.cp_all_gather %k {ranks = 2 : i64, seq_dim = 0 : i64, load_balanced} : tensor<3x2x2x8xbf16> -> tensor<6x2x2x8xbf16>
  return
}

// -----

func.func @one_rank(%k: tensor<4x2x2x8xbf16>) {
  // expected-error @+1 {{ranks must be at least 2, got 1}}
  %0 = te.cp_all_gather %k {ranks = 1 : i64, seq_dim = 0 : i64} : tensor<4x2x2x8xbf16> -> tensor<4x2x2x8xbf16>
  return
}

// -----

func.func @attention_keys(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x2x8xbf16>) {
  // expected-error @+1 {{with cp_ranks 2 the query holds two chunks of this rank's tokens (an even length) and key/value the whole sequence (cp_ranks times it), got 4 queries and 4 keys}}
  %o, %lse = te.attention %q, %k, %k {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.35 : f64, cp_ranks = 2 : i64, cp_rank = 0 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>) -> (tensor<4x2x4x8xbf16>, tensor<2x4x4xf32>)
  return
}

// -----

func.func @attention_rank(%q: tensor<4x2x4x8xbf16>, %k: tensor<8x2x2x8xbf16>) {
  // expected-error @+1 {{'cp_rank' must be in [0, cp_ranks), with cp_ranks >= 1; got cp_rank 2 of 2}}
  %o, %lse = te.attention %q, %k, %k {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.35 : f64, cp_ranks = 2 : i64, cp_rank = 2 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<8x2x2x8xbf16>, tensor<8x2x2x8xbf16>) -> (tensor<4x2x4x8xbf16>, tensor<2x4x4xf32>)
  return
}

// -----

func.func @attention_window(%q: tensor<4x2x4x8xbf16>, %k: tensor<8x2x2x8xbf16>) {
  // expected-error @+1 {{context parallelism (cp_ranks 2) is not supported with 'window_size'}}
  %o, %lse = te.attention %q, %k, %k {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.35 : f64, window_size = array<i64: 2, 0>, cp_ranks = 2 : i64, cp_rank = 0 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<8x2x2x8xbf16>, tensor<8x2x2x8xbf16>) -> (tensor<4x2x4x8xbf16>, tensor<2x4x4xf32>)
  return
}

// -----

func.func @layer_rank(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x2x8xbf16>) {
  // expected-error @+1 {{'cp_rank' must be in [0, cp_size) with cp_size >= 1, got cp_rank 3 and cp_size 2}}
  %o = te.dot_product_attention %q, %k, %k {cp_size = 2 : i64, cp_rank = 3 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>) -> tensor<4x2x32xbf16>
  return
}

// -----

func.func @layer_padding(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x2x8xbf16>, %m: tensor<2x1x1x4xi1>) {
  // expected-error @+1 {{context parallelism (cp_size 2) is not supported with 'attn_mask_type' padding (no_mask and causal are supported)}}
  %o = te.dot_product_attention %q, %k, %k mask(%m) {attn_mask_type = #te.attn_mask_type<padding>, cp_size = 2 : i64, cp_rank = 0 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>, tensor<2x1x1x4xi1>) -> tensor<4x2x32xbf16>
  return
}

// -----

// A window and FP8 attention run with cp_comm_type a2a alone (each rank's
// attention is an ordinary one there; ops-context-parallel.mlir).
func.func @layer_window_all_gather(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x2x8xbf16>) {
  // expected-error @+1 {{context parallelism (cp_size 2) with cp_comm_type all_gather is not supported with 'window_size'; cp_comm_type a2a runs it}}
  %o = te.dot_product_attention %q, %k, %k {attn_mask_type = #te.attn_mask_type<no_mask>, window_size = array<i64: 2, 2>, cp_size = 2 : i64, cp_rank = 0 : i64}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>) -> tensor<4x2x32xbf16>
  return
}

// -----

func.func @layer_fp8_attention_all_gather(%x: tensor<4x2x64xbf16>, %w: tensor<128x64xbf16>, %p: tensor<64x64xbf16>) {
  // expected-error @+1 {{context parallelism (cp_size 2) with cp_comm_type all_gather is not supported with FP8 attention (fp8_dpa); cp_comm_type a2a runs it}}
  %y = te.multihead_attention %x qkv_weight(%w) proj_weight(%p) {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64, attention_dropout = 0.0 : f64, fp8_recipe = #te.delayed_scaling<fp8_dpa = true>, cp_size = 2 : i64, cp_rank = 1 : i64, cp_comm_type = "all_gather"}
      : (tensor<4x2x64xbf16>, tensor<128x64xbf16>, tensor<64x64xbf16>) -> tensor<4x2x64xbf16>
  return
}

// -----

// The refusals a2a keeps: a padding mask.
func.func @layer_a2a_padding(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x2x8xbf16>, %m: tensor<2x1x1x8xi1>) {
  // expected-error @+1 {{context parallelism (cp_size 2) is not supported with 'attn_mask_type' padding (no_mask and causal are supported)}}
  %o = te.dot_product_attention %q, %k, %k mask(%m) {attn_mask_type = #te.attn_mask_type<padding>, window_size = array<i64: 2, 0>, cp_size = 2 : i64, cp_rank = 0 : i64, cp_comm_type = "a2a"}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>, tensor<2x1x1x8xi1>) -> tensor<4x2x32xbf16>
  return
}

// -----

func.func @layer_odd_tokens(%q: tensor<3x2x4x8xbf16>, %k: tensor<3x2x2x8xbf16>) {
  // expected-error @+1 {{with cp_size 2 each rank holds two chunks of every sequence, so the local sequence length must be even, got 3}}
  %o = te.dot_product_attention %q, %k, %k {cp_size = 2 : i64, cp_rank = 0 : i64}
      : (tensor<3x2x4x8xbf16>, tensor<3x2x2x8xbf16>, tensor<3x2x2x8xbf16>) -> tensor<3x2x32xbf16>
  return
}

// -----

func.func @rotary_is_global(%x: tensor<4x2x32xbf16>, %w: tensor<64x32xbf16>, %p: tensor<32x32xbf16>, %f: tensor<4x1x1x8xf32>) {
  // expected-error @+1 {{'rotary_pos_emb' must be f32 of shape [s, 1, 1, r] (the whole sequence's, cp_size times the local one) = [8, 1, 1, r]}}
  %y = te.multihead_attention %x qkv_weight(%w) proj_weight(%p) rotary_pos_emb(%f) {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64, cp_size = 2 : i64, cp_rank = 0 : i64}
      : (tensor<4x2x32xbf16>, tensor<64x32xbf16>, tensor<32x32xbf16>, tensor<4x1x1x8xf32>) -> tensor<4x2x32xbf16>
  return
}

// -----

func.func @decoder(%x: tensor<4x2x32xbf16>, %e: tensor<4x2x32xbf16>, %w: tensor<32x32xbf16>, %kv: tensor<32x32xbf16>, %p: tensor<32x32xbf16>) {
  // expected-error @+1 {{context parallelism (cp_size 2) is not supported with cross-attention ('encoder_output')}}
  %y = te.multihead_attention %x encoder_output(%e) qkv_weight(%w) kv_weight(%kv) proj_weight(%p) {num_attention_heads = 4 : i64, num_gqa_groups = 2 : i64, attn_mask_type = #te.attn_mask_type<no_mask>, cp_size = 2 : i64, cp_rank = 0 : i64}
      : (tensor<4x2x32xbf16>, tensor<4x2x32xbf16>, tensor<32x32xbf16>, tensor<32x32xbf16>, tensor<32x32xbf16>) -> tensor<4x2x32xbf16>
  return
}

// -----

func.func @all_to_all_shape(%q: tensor<4x2x4x8xbf16>) {
  // expected-error @+1 {{the output 'tensor<8x2x4x8xbf16>' must be the input 'tensor<4x2x4x8xbf16>' with 2 times its dim 0 (tokens) and 1/2 of its dim 2 (heads), or the other way round}}
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 2 : i64} : tensor<4x2x4x8xbf16> -> tensor<8x2x4x8xbf16>
  return
}

// -----

func.func @all_to_all_other_dims(%q: tensor<4x2x4x8xbf16>) {
  // expected-error @+1 {{the output 'tensor<8x2x2x4xbf16>' must be the input 'tensor<4x2x4x8xbf16>' with 2 times its dim 0}}
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 2 : i64} : tensor<4x2x4x8xbf16> -> tensor<8x2x2x4xbf16>
  return
}

// -----

func.func @all_to_all_element(%q: tensor<4x2x4x8xbf16>) {
  // expected-error @+1 {{the output 'tensor<8x2x2x8xf16>' must be the input 'tensor<4x2x4x8xbf16>'}}
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 2 : i64} : tensor<4x2x4x8xbf16> -> tensor<8x2x2x8xf16>
  return
}

// -----

func.func @all_to_all_heads_not_divisible(%q: tensor<4x2x3x8xbf16>) {
  // expected-error @+1 {{must be the input 'tensor<4x2x3x8xbf16>' with 2 times its dim 0 (tokens) and 1/2 of its dim 2 (heads)}}
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 2 : i64} : tensor<4x2x3x8xbf16> -> tensor<8x2x1x8xbf16>
  return
}

// -----

func.func @all_to_all_rank(%q: tensor<4x8x32xbf16>) {
  // expected-error @+1 {{takes and returns rank-4 tensors (tokens, heads, head_dim), got 'tensor<4x8x32xbf16>' -> 'tensor<8x4x32xbf16>'}}
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 2 : i64} : tensor<4x8x32xbf16> -> tensor<8x4x32xbf16>
  return
}

// -----

func.func @all_to_all_head_dim(%q: tensor<4x2x4x8xbf16>) {
  // expected-error @+1 {{head_dim must be 2 (the heads of [s, b, h, d] or [b, s, h, d]), got 1}}
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 1 : i64} : tensor<4x2x4x8xbf16> -> tensor<8x1x4x8xbf16>
  return
}

// -----

func.func @all_to_all_seq_dim(%q: tensor<2x2x4x8xbf16>) {
  // expected-error @+1 {{seq_dim must be 0 (sbhd) or 1 (bshd), got 2}}
  %0 = te.cp_all_to_all %q {ranks = 2 : i64, seq_dim = 2 : i64, head_dim = 2 : i64} : tensor<2x2x4x8xbf16> -> tensor<2x2x4x8xbf16>
  return
}

// -----

func.func @all_to_all_odd_chunks(%o: tensor<6x2x2x8xbf16>) {
  // expected-error @+1 {{load_balanced needs an even local dim 0 (two chunks a rank), got 3}}
  %0 = te.cp_all_to_all %o {ranks = 2 : i64, seq_dim = 0 : i64, head_dim = 2 : i64, load_balanced} : tensor<6x2x2x8xbf16> -> tensor<3x2x4x8xbf16>
  return
}

// -----

func.func @all_to_all_one_rank(%q: tensor<4x2x4x8xbf16>) {
  // expected-error @+1 {{ranks must be at least 2, got 1}}
  %0 = te.cp_all_to_all %q {ranks = 1 : i64, seq_dim = 0 : i64, head_dim = 2 : i64} : tensor<4x2x4x8xbf16> -> tensor<4x2x4x8xbf16>
  return
}

// -----

func.func @layer_comm_type(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x2x8xbf16>) {
  // expected-error @+1 {{'cp_comm_type' must be all_gather or a2a, got 'p2p'}}
  %o = te.dot_product_attention %q, %k, %k {cp_size = 2 : i64, cp_rank = 0 : i64, cp_comm_type = "p2p"}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x2x8xbf16>, tensor<4x2x2x8xbf16>) -> tensor<4x2x32xbf16>
  return
}

// -----

func.func @layer_a2a_groups(%q: tensor<4x2x4x8xbf16>, %k: tensor<4x2x1x8xbf16>) {
  // expected-error @+1 {{with cp_comm_type a2a the key/value heads (1) must be divisible by cp_size (2): each rank attends over 1/cp_size of them}}
  %o = te.dot_product_attention %q, %k, %k {cp_size = 2 : i64, cp_rank = 0 : i64, cp_comm_type = "a2a"}
      : (tensor<4x2x4x8xbf16>, tensor<4x2x1x8xbf16>, tensor<4x2x1x8xbf16>) -> tensor<4x2x32xbf16>
  return
}

// -----

func.func @layer_a2a_heads(%x: tensor<4x2x48xbf16>, %w: tensor<144x48xbf16>, %p: tensor<48x48xbf16>) {
  // expected-error @+1 {{with cp_comm_type a2a the query heads (3) must be divisible by cp_size (2): each rank attends over 1/cp_size of them}}
  %y = te.multihead_attention %x qkv_weight(%w) proj_weight(%p) {num_attention_heads = 3 : i64, attn_mask_type = #te.attn_mask_type<no_mask>, cp_size = 2 : i64, cp_rank = 1 : i64, cp_comm_type = "a2a"}
      : (tensor<4x2x48xbf16>, tensor<144x48xbf16>, tensor<48x48xbf16>) -> tensor<4x2x48xbf16>
  return
}

// -----

func.func @layer_comm_type_one_rank(%x: tensor<4x2x32xbf16>, %w: tensor<96x32xbf16>, %p: tensor<32x32xbf16>) {
  // expected-error @+1 {{'cp_comm_type' must be all_gather or a2a, got 'ring'}}
  %y = te.multihead_attention %x qkv_weight(%w) proj_weight(%p) {num_attention_heads = 4 : i64, cp_comm_type = "ring"}
      : (tensor<4x2x32xbf16>, tensor<96x32xbf16>, tensor<32x32xbf16>) -> tensor<4x2x32xbf16>
  return
}
