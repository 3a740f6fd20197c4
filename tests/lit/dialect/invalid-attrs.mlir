// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the FP8 recipe attributes (#te.delayed_scaling,
// #te.current_scaling) and of the enum attributes. Recipe parameters are
// checked when the attribute is built, wherever it appears.

func.func @delayed_scaling_negative_margin(%x: tensor<16x64xbf16>,
                                           %w: tensor<64x64xbf16>) {
  // expected-error @+1 {{delayed_scaling margin must be >= 0, got -1}}
  %y = te.linear %x weight(%w) {fp8_recipe = #te.delayed_scaling<margin = -1>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @delayed_scaling_empty_history(%x: tensor<16x64xbf16>,
                                         %w: tensor<64x64xbf16>) {
  // expected-error @+2 {{delayed_scaling amax_history_len must be >= 1, got 0}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<amax_history_len = 0>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// Pure E5M2 is not a recipe format, for either recipe.
func.func @delayed_scaling_e5m2(%x: tensor<16x64xbf16>,
                                %w: tensor<64x64xbf16>) {
  // expected-error @+2 {{fp8_format = e5m2 is not a valid recipe format: use hybrid (E4M3 forward, E5M2 backward) or e4m3}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<fp8_format = e5m2>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @current_scaling_e5m2(%x: tensor<16x64xbf16>,
                                %w: tensor<64x64xbf16>) {
  // expected-error @+2 {{fp8_format = e5m2 is not a valid recipe format: use hybrid (E4M3 forward, E5M2 backward) or e4m3}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.current_scaling<fp8_format = e5m2>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// Bool parameters are spelled `true` or `false`.
func.func @delayed_scaling_bool_integer(%x: tensor<16x64xbf16>,
                                        %w: tensor<64x64xbf16>) {
  // expected-error @+3 {{expected 'true' or 'false'}}
  // expected-error @+2 {{failed to parse TE_DelayedScalingAttr parameter 'reduce_amax' which is to be a `bool`}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<reduce_amax = 1>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @current_scaling_bool_keyword(%x: tensor<16x64xbf16>,
                                        %w: tensor<64x64xbf16>) {
  // expected-error @+3 {{expected 'true' or 'false'}}
  // expected-error @+2 {{failed to parse TE_CurrentScalingAttr parameter 'power_2_scale' which is to be a `bool`}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.current_scaling<power_2_scale = yes>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @delayed_scaling_unknown_algo(%x: tensor<16x64xbf16>,
                                        %w: tensor<64x64xbf16>) {
  // expected-error @+3 {{invalid amax history reduction specification: mean}}
  // expected-error @+2 {{failed to parse TE_DelayedScalingAttr parameter 'amax_compute_algo'}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<amax_compute_algo = mean>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @delayed_scaling_unknown_format(%x: tensor<16x64xbf16>,
                                          %w: tensor<64x64xbf16>) {
  // expected-error @+3 {{invalid FP8 format of a scaling recipe specification: e6m1}}
  // expected-error @+2 {{failed to parse TE_DelayedScalingAttr parameter 'fp8_format'}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<fp8_format = e6m1>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @delayed_scaling_unknown_parameter(%x: tensor<16x64xbf16>,
                                             %w: tensor<64x64xbf16>) {
  // expected-error @+2 {{duplicate or unknown struct parameter name: history_len}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<history_len = 16>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// fp8_recipe takes a recipe attribute, not any te attribute.
func.func @fp8_recipe_not_a_recipe(%x: tensor<16x64xbf16>,
                                   %w: tensor<64x64xbf16>) {
  // expected-error @+1 {{attribute 'fp8_recipe' failed to satisfy constraint: FP8 recipe (#te.delayed_scaling, #te.current_scaling or #te.block_scaling)}}
  %y = te.linear %x weight(%w) {fp8_recipe = #te.activation<gelu>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @unknown_mask_type(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+3 {{expected ::mlir::te::AttnMaskType to be one of: no_mask, padding, causal, padding_causal, causal_bottom_right, padding_causal_bottom_right, arbitrary}}
  // expected-error @+2 {{failed to parse TE_AttnMaskTypeAttr parameter 'value'}}
  %o = te.dot_product_attention %q, %q, %q
      {attn_mask_type = #te.attn_mask_type<sliding_window>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

// Enum attributes are typed: a qkv_format is not an activation.
func.func @enum_attr_kind(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+2 {{attribute 'qkv_format' failed to satisfy constraint: memory layout of attention inputs}}
  %o = te.dot_product_attention %q, %q, %q
      {qkv_format = #te.activation<gelu>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>,
         tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @mha_needs_heads(%x: tensor<16x2x64xbf16>,
                           %wqkv: tensor<192x64xbf16>,
                           %wo: tensor<64x64xbf16>) {
  // expected-error @+1 {{'te.multihead_attention' op requires attribute 'num_attention_heads'}}
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo)
      : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>)
        -> tensor<16x2x64xbf16>
  return
}

// -----

// A drop-path group spans whole rows.
func.func @dropout_group_not_rows(%x: tensor<4x6xbf16>, %rng: tensor<2xi64>) {
  // expected-error @+1 {{'group' must be a multiple of the last dim that divides the element count, got 9 for 'tensor<4x6xbf16>'}}
  %y = te.dropout %x, %rng {rate = 0.5 : f64, stream = 5 : i64, group = 9 : i64}
      : tensor<4x6xbf16>, tensor<2xi64> -> tensor<4x6xbf16>
  return
}

// -----

func.func @block_scaling_dim_3(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>) {
  // expected-error @+2 {{block_scaling w_block_scaling_dim must be 1 or 2, got 3}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.block_scaling<w_block_scaling_dim = 3>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// fprop would pair a 2-D input with a 2-D weight.
func.func @block_scaling_2d_by_2d(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>) {
  // expected-error @+2 {{block_scaling: no GEMM can pair two 2-D scaled operands (x with w, grad with w, grad with x); got x = 2, w = 2, grad = 1}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.block_scaling<x_block_scaling_dim = 2>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @block_scaling_e5m2(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>) {
  // expected-error @+2 {{fp8_format = e5m2 is not a valid recipe format}}
  %y = te.linear %x weight(%w)
      {fp8_recipe = #te.block_scaling<fp8_format = e5m2>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}
