// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the GEMM layers te.linear, te.layernorm_linear and
// te.layernorm_mlp. Shared tensor rules (static shape, dtype) are covered in
// invalid-norm.mlir; FP8 alignment applies only when fp8_recipe is set.

//===----------------------------------------------------------------------===//
// te.linear
//===----------------------------------------------------------------------===//

func.func @linear_input_rank(%x: tensor<64xbf16>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'input' must have rank >= 2, got 'tensor<64xbf16>'}}
  %r = te.linear %x weight(%w)
      : (tensor<64xbf16>, tensor<128x64xbf16>) -> tensor<128xbf16>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<16x64xbf16>, %w: tensor<64xbf16>) {
  // expected-error @+1 {{'weight' must have rank >= 2, got 'tensor<64xbf16>'}}
  %r = te.linear %x weight(%w)
      : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @linear_weight_dtype(%x: tensor<16x64xbf16>, %w: tensor<128x64xf16>) {
  // expected-error @+1 {{'weight' has element type 'f16' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.linear %x weight(%w)
      : (tensor<16x64xbf16>, tensor<128x64xf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @linear_weight_in_features(
    %x: tensor<16x64xbf16>, %w: tensor<128x32xbf16>) {
  // expected-error @+1 {{'weight' must have shape [out_features, in_features] = [128, 64], got [128, 32]}}
  %r = te.linear %x weight(%w)
      : (tensor<16x64xbf16>, tensor<128x32xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @linear_weight_rank3(%x: tensor<16x64xbf16>,
                               %w: tensor<128x64x1xbf16>) {
  // expected-error @+1 {{'weight' must have shape [out_features, in_features] = [128, 64], got [128, 64, 1]}}
  %r = te.linear %x weight(%w)
      : (tensor<16x64xbf16>, tensor<128x64x1xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @linear_bias_shape(%x: tensor<16x64xbf16>, %w: tensor<128x64xbf16>,
                             %b: tensor<64xbf16>) {
  // expected-error @+1 {{'bias' must have shape [out_features] = [128], got [64]}}
  %r = te.linear %x weight(%w) bias(%b)
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<64xbf16>)
         -> tensor<16x128xbf16>
  return
}

// -----

func.func @linear_bias_dtype(%x: tensor<16x64xbf16>, %w: tensor<128x64xbf16>,
                             %b: tensor<128xf32>) {
  // expected-error @+1 {{'bias' has element type 'f32' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.linear %x weight(%w) bias(%b)
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<128xf32>)
         -> tensor<16x128xbf16>
  return
}

// -----

func.func @linear_output_shape(%x: tensor<8x2x64xbf16>,
                               %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'output' must have shape [leading dims of 'input', out_features] = [8, 2, 128], got [16, 128]}}
  %r = te.linear %x weight(%w)
      : (tensor<8x2x64xbf16>, tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

// FP8 GEMMs need 8-aligned token counts: 4 x 3 = 12 tokens.
func.func @linear_fp8_tokens(%x: tensor<4x3x64xbf16>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need the token count (product of the leading dims of 'input') divisible by 8, got 12 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.linear %x weight(%w) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<4x3x64xbf16>, tensor<128x64xbf16>) -> tensor<4x3x128xbf16>
  return
}

// -----

func.func @linear_fp8_in_features(
    %x: tensor<16x40xbf16>, %w: tensor<128x40xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need in_features divisible by 16, got 40 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.linear %x weight(%w) {fp8_recipe = #te.current_scaling<>}
      : (tensor<16x40xbf16>, tensor<128x40xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @linear_fp8_out_features(
    %x: tensor<16x64xbf16>, %w: tensor<72x64xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need out_features divisible by 16, got 72 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.linear %x weight(%w) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x64xbf16>, tensor<72x64xbf16>) -> tensor<16x72xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.layernorm_linear
//===----------------------------------------------------------------------===//

func.func @layernorm_linear_input_rank(
    %x: tensor<64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'input' must have rank >= 2, got 'tensor<64xbf16>'}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      : (tensor<64xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>)
         -> tensor<128xbf16>
  return
}

// -----

func.func @layernorm_linear_weight_rank(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128xbf16>) {
  // expected-error @+1 {{'weight' must have rank >= 2, got 'tensor<128xbf16>'}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<128xbf16>)
         -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_ln_weight_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<128xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_weight' must have shape [hidden_size] = [64], got [128]}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      : (tensor<16x64xbf16>, tensor<128xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_ln_bias_required(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_bias' is required by LayerNorm}}
  %r = te.layernorm_linear %x ln_weight(%gamma) weight(%w)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>)
         -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_ln_bias_rmsnorm(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_bias' is not allowed with RMSNorm (it has no bias)}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {normalization = #te.normalization<RMSNorm>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_ln_bias_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<32xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_bias' must have shape [hidden_size] = [64], got [32]}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<32xbf16>,
         tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_weight_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x32xbf16>) {
  // expected-error @+1 {{'weight' must have shape [out_features, in_features] = [128, 64], got [128, 32]}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x32xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_bias_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>, %b: tensor<64xbf16>) {
  // expected-error @+1 {{'bias' must have shape [out_features] = [128], got [64]}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      bias(%b)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>, tensor<64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_output_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'output' must have shape [leading dims of 'input', out_features] = [16, 128], got [16, 64]}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// return_layernorm_output asks for the second result...
func.func @layernorm_linear_ln_output_missing(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_output' result must be present exactly when 'return_layernorm_output' is set}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {return_layernorm_output}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

// ... and the second result needs return_layernorm_output.
func.func @layernorm_linear_ln_output_unrequested(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_output' result must be present exactly when 'return_layernorm_output' is set}}
  %r0, %r1 = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> (tensor<16x128xbf16>, tensor<16x64xbf16>)
  return
}

// -----

func.func @layernorm_linear_ln_output_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_output' must have shape like 'input' = [16, 64], got [16, 128]}}
  %r0, %r1 = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {return_layernorm_output}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> (tensor<16x128xbf16>, tensor<16x128xbf16>)
  return
}

// -----

func.func @layernorm_linear_ln_output_dtype(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'ln_output' has element type 'f32' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r0, %r1 = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {return_layernorm_output}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> (tensor<16x128xbf16>, tensor<16x64xf32>)
  return
}

// -----

func.func @layernorm_linear_eps(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                                %beta: tensor<64xbf16>,
                                %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{'eps' must be finite and >= 0, got -1.000000e+00}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {eps = -1.0 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_fp8_tokens(
    %x: tensor<2x2x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<128x64xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need the token count (product of the leading dims of 'input') divisible by 8, got 4 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<2x2x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> tensor<2x2x128xbf16>
  return
}

// -----

func.func @layernorm_linear_fp8_in_features(
    %x: tensor<16x72xbf16>, %gamma: tensor<72xbf16>, %beta: tensor<72xbf16>,
    %w: tensor<128x72xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need in_features divisible by 16, got 72 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x72xbf16>, tensor<72xbf16>, tensor<72xbf16>,
         tensor<128x72xbf16>) -> tensor<16x128xbf16>
  return
}

// -----

func.func @layernorm_linear_fp8_out_features(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w: tensor<40x64xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need out_features divisible by 16, got 40 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {fp8_recipe = #te.current_scaling<>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<40x64xbf16>) -> tensor<16x40xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.layernorm_mlp
//===----------------------------------------------------------------------===//

func.func @layernorm_mlp_input_rank(
    %x: tensor<64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'input' must have rank >= 2, got 'tensor<64xbf16>'}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<64xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<256x64xbf16>,
         tensor<64x256xbf16>) -> tensor<64xbf16>
  return
}

// -----

func.func @layernorm_mlp_ln_weight_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<32xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'ln_weight' must have shape [hidden_size] = [64], got [32]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<32xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_ln_bias_required(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
    %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'ln_bias' is required by LayerNorm}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) fc1_weight(%w1) fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<256x64xbf16>,
         tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_ln_bias_rmsnorm(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'ln_bias' is not allowed with RMSNorm (it has no bias)}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {normalization = #te.normalization<RMSNorm>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_ln_bias_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<256xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'ln_bias' must have shape [hidden_size] = [64], got [256]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<256xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// FC2's weight gives ffn_hidden_size, so it is checked first.
func.func @layernorm_mlp_fc2_weight_rank(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64xbf16>) {
  // expected-error @+1 {{'fc2_weight' must have rank >= 2, got 'tensor<64xbf16>'}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fc2_weight_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<32x256xbf16>) {
  // expected-error @+1 {{'fc2_weight' must have shape [hidden_size, ffn_hidden_size] = [64, 256], got [32, 256]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<32x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fc1_weight_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<128x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_weight' must have shape [ffn_hidden_size, hidden_size] = [256, 64], got [128, 64]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// A non-gated activation has one FC1 half: [ffn, hidden].
func.func @layernorm_mlp_fc1_weight_not_gated(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<512x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_weight' must have shape [ffn_hidden_size, hidden_size] = [256, 64], got [512, 64]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<relu>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<512x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// A gated activation needs both FC1 halves: [2 * ffn, hidden].
func.func @layernorm_mlp_fc1_weight_gated(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_weight' must have shape [2 * ffn_hidden_size, hidden_size] (gated activation) = [512, 64], got [256, 64]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<swiglu>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// clamped_swiglu's parameters (activation_limit, activation_alpha,
// glu_linear_offset) on another activation.
func.func @layernorm_mlp_activation_params_not_clamped(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<512x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'te.layernorm_mlp' op 'activation_limit' is a parameter of activation clamped_swiglu only, not of swiglu}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      {activation = #te.activation<swiglu>, activation_limit = 7.0 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<512x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_activation_limit_not_positive(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<512x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'activation_limit' must be finite and > 0, got -1.000000e+00}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      {activation = #te.activation<clamped_swiglu>,
       activation_limit = -1.0 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<512x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_glu_linear_offset_nan(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<512x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'glu_linear_offset' must be finite, got nan}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      {activation = #te.activation<clamped_swiglu>,
       glu_linear_offset = 0x7FF8000000000000 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<512x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @act_activation_params_not_clamped(%h: tensor<16x512xf32>) {
  // expected-error @+1 {{'te.act' op 'activation_alpha' is a parameter of activation clamped_swiglu only, not of gelu}}
  %0 = te.act <gelu> %h {activation_alpha = 1.702 : f64}
      : tensor<16x512xf32> -> tensor<16x512xf32>
  return
}

// -----

func.func @dact_activation_limit_zero(%dy: tensor<16x256xf32>,
                                      %h: tensor<16x512xf32>) {
  // expected-error @+1 {{'te.dact' op 'activation_limit' must be finite and > 0, got 0.000000e+00}}
  %0 = te.dact <clamped_swiglu> %dy, %h {activation_limit = 0.0 : f64}
      : tensor<16x256xf32>, tensor<16x512xf32> -> tensor<16x512xf32>
  return
}

// -----

func.func @act_activation_alpha_infinite(%h: tensor<16x512xf32>) {
  // expected-error @+1 {{'te.act' op 'activation_alpha' must be finite, got INF}}
  %0 = te.act <clamped_swiglu> %h
      {activation_alpha = 0x7FF0000000000000 : f64}
      : tensor<16x512xf32> -> tensor<16x256xf32>
  return
}

// -----

func.func @act_activation_limit_not_f64(%h: tensor<16x512xf32>) {
  // expected-error @+1 {{attribute 'activation_limit' failed to satisfy constraint: 64-bit float attribute}}
  %0 = te.act <clamped_swiglu> %h {activation_limit = 7 : i64}
      : tensor<16x512xf32> -> tensor<16x256xf32>
  return
}

// -----

func.func @layernorm_mlp_fc1_bias_only(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %b1: tensor<256xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_bias' and 'fc2_bias' must be both present or both absent}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<256xbf16>, tensor<64x256xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fc2_bias_only(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>, %b2: tensor<64xbf16>) {
  // expected-error @+1 {{'fc1_bias' and 'fc2_bias' must be both present or both absent}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) fc2_bias(%b2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fc1_bias_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %b1: tensor<64xbf16>, %w2: tensor<64x256xbf16>,
    %b2: tensor<64xbf16>) {
  // expected-error @+1 {{'fc1_bias' must have shape [ffn_hidden_size] = [256], got [64]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64xbf16>, tensor<64x256xbf16>,
         tensor<64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fc1_bias_gated(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<512x64xbf16>, %b1: tensor<256xbf16>, %w2: tensor<64x256xbf16>,
    %b2: tensor<64xbf16>) {
  // expected-error @+1 {{'fc1_bias' must have shape [2 * ffn_hidden_size] = [512], got [256]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
      {activation = #te.activation<geglu>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<512x64xbf16>, tensor<256xbf16>, tensor<64x256xbf16>,
         tensor<64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fc2_bias_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %b1: tensor<256xbf16>, %w2: tensor<64x256xbf16>,
    %b2: tensor<256xbf16>) {
  // expected-error @+1 {{'fc2_bias' must have shape [hidden_size] = [64], got [256]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<256xbf16>, tensor<64x256xbf16>,
         tensor<256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fc_dtype(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'fc1_weight' has element type 'f16' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_output_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'output' must have shape like 'input' = [16, 64], got [16, 256]}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x256xbf16>
  return
}

// -----

func.func @layernorm_mlp_ln_output_missing(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'ln_output' result must be present exactly when 'return_layernorm_output' is set}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {return_layernorm_output}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_ln_output_unrequested(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'ln_output' result must be present exactly when 'return_layernorm_output' is set}}
  %r0, %r1 = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta)
      fc1_weight(%w1) fc2_weight(%w2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> (tensor<16x64xbf16>, tensor<16x64xbf16>)
  return
}

// -----

func.func @layernorm_mlp_ln_output_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'ln_output' must have shape like 'input' = [16, 64], got [16, 256]}}
  %r0, %r1 = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta)
      fc1_weight(%w1) fc2_weight(%w2) {return_layernorm_output}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>)
         -> (tensor<16x64xbf16>, tensor<16x256xbf16>)
  return
}

// -----

func.func @layernorm_mlp_eps(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                             %beta: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                             %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{'eps' must be finite and >= 0, got INF}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {eps = 0x7FF0000000000000 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fp8_tokens(
    %x: tensor<2x3x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need the token count (product of the leading dims of 'input') divisible by 8, got 6 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<2x3x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<2x3x64xbf16>
  return
}

// -----

func.func @layernorm_mlp_fp8_hidden(
    %x: tensor<16x40xbf16>, %gamma: tensor<40xbf16>, %beta: tensor<40xbf16>,
    %w1: tensor<256x40xbf16>, %w2: tensor<40x256xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need hidden_size divisible by 16, got 40 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x40xbf16>, tensor<40xbf16>, tensor<40xbf16>,
         tensor<256x40xbf16>, tensor<40x256xbf16>) -> tensor<16x40xbf16>
  return
}

// -----

func.func @layernorm_mlp_fp8_ffn(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<200x64xbf16>, %w2: tensor<64x200xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need ffn_hidden_size divisible by 16, got 200 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2) {fp8_recipe = #te.current_scaling<>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<200x64xbf16>, tensor<64x200xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

// For gated activations the rule is on ffn_hidden_size, not FC1's 2 * ffn rows.
func.func @layernorm_mlp_fp8_ffn_gated(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<48x64xbf16>, %w2: tensor<64x24xbf16>) {
  // expected-error @+1 {{FP8 GEMMs need ffn_hidden_size divisible by 16, got 24 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %r = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc2_weight(%w2)
      {activation = #te.activation<swiglu>, fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<48x64xbf16>, tensor<64x24xbf16>) -> tensor<16x64xbf16>
  return
}
