// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -emit-bytecode | te-opt | FileCheck %s

// The GEMM layers: te.linear, te.layernorm_linear and te.layernorm_mlp.
// Attributes at their default value (normalization = LayerNorm,
// activation = gelu, eps = 1e-5) are not printed. Recipes print through the
// #delayed_scaling / #current_scaling aliases.

// CHECK-DAG: #delayed_scaling = #te.delayed_scaling<>
// CHECK-DAG: #delayed_scaling1 = #te.delayed_scaling<amax_history_len = 16, amax_compute_algo = most_recent>
// CHECK-DAG: #current_scaling = #te.current_scaling<>

//===----------------------------------------------------------------------===//
// te.linear
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<16x64xbf16>, %[[W:.*]]: tensor<128x64xbf16>)
// CHECK: te.linear %[[X]] weight(%[[W]]) :
// CHECK-SAME: (tensor<16x64xbf16>, tensor<128x64xbf16>) -> tensor<16x128xbf16>
func.func @linear(%x: tensor<16x64xbf16>, %w: tensor<128x64xbf16>)
    -> tensor<16x128xbf16> {
  %y = te.linear %x weight(%w)
      : (tensor<16x64xbf16>, tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return %y : tensor<16x128xbf16>
}

// Leading dims of the input ([s, b] here) carry over to the output.
// CHECK-LABEL: func.func @linear_bias_f16
// CHECK-SAME: (%[[X:.*]]: tensor<8x2x64xf16>, %[[W:.*]]: tensor<128x64xf16>, %[[B:.*]]: tensor<128xf16>)
// CHECK: te.linear %[[X]] weight(%[[W]]) bias(%[[B]]) :
// CHECK-SAME: (tensor<8x2x64xf16>, tensor<128x64xf16>, tensor<128xf16>) -> tensor<8x2x128xf16>
func.func @linear_bias_f16(%x: tensor<8x2x64xf16>, %w: tensor<128x64xf16>,
                           %b: tensor<128xf16>) -> tensor<8x2x128xf16> {
  %y = te.linear %x weight(%w) bias(%b)
      : (tensor<8x2x64xf16>, tensor<128x64xf16>, tensor<128xf16>)
        -> tensor<8x2x128xf16>
  return %y : tensor<8x2x128xf16>
}

// CHECK-LABEL: func.func @linear_f32
// CHECK: te.linear %{{.*}} weight(%{{.*}}) bias(%{{.*}}) :
// CHECK-SAME: (tensor<16x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<16x32xf32>
func.func @linear_f32(%x: tensor<16x64xf32>, %w: tensor<32x64xf32>,
                      %b: tensor<32xf32>) -> tensor<16x32xf32> {
  %y = te.linear %x weight(%w) bias(%b)
      : (tensor<16x64xf32>, tensor<32x64xf32>, tensor<32xf32>)
        -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}

// With an fp8_recipe the GEMM runs in FP8. Equal recipes share one alias.
// CHECK-LABEL: func.func @linear_fp8
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #delayed_scaling} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #delayed_scaling} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #delayed_scaling1} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) bias(%{{.*}}) {fp8_recipe = #current_scaling} :
func.func @linear_fp8(%x: tensor<16x64xbf16>, %w: tensor<128x64xbf16>,
                      %b: tensor<128xbf16>)
    -> (tensor<16x128xbf16>, tensor<16x128xbf16>, tensor<16x128xbf16>,
        tensor<16x128xbf16>) {
  %0 = te.linear %x weight(%w) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>) -> tensor<16x128xbf16>
  %1 = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<fp8_format = hybrid>}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>) -> tensor<16x128xbf16>
  %2 = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<amax_history_len = 16,
                                        amax_compute_algo = most_recent>}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>) -> tensor<16x128xbf16>
  %3 = te.linear %x weight(%w) bias(%b) {fp8_recipe = #te.current_scaling<>}
      : (tensor<16x64xbf16>, tensor<128x64xbf16>, tensor<128xbf16>)
        -> tensor<16x128xbf16>
  return %0, %1, %2, %3
      : tensor<16x128xbf16>, tensor<16x128xbf16>, tensor<16x128xbf16>,
        tensor<16x128xbf16>
}

// FP8 alignment (tokens % 8, features % 16) applies only with an fp8_recipe:
// 12 tokens, 40 -> 72 features is fine in high precision.
// CHECK-LABEL: func.func @linear_unaligned_without_recipe
// CHECK: te.linear %{{.*}} weight(%{{.*}}) :
// CHECK-SAME: (tensor<4x3x40xbf16>, tensor<72x40xbf16>) -> tensor<4x3x72xbf16>
func.func @linear_unaligned_without_recipe(%x: tensor<4x3x40xbf16>,
                                           %w: tensor<72x40xbf16>)
    -> tensor<4x3x72xbf16> {
  %y = te.linear %x weight(%w)
      : (tensor<4x3x40xbf16>, tensor<72x40xbf16>) -> tensor<4x3x72xbf16>
  return %y : tensor<4x3x72xbf16>
}

// Real size: FC1 of a 4096 -> 16384 MLP over 2048 x 4 tokens.
// CHECK-LABEL: func.func @linear_real_size
// CHECK: te.linear %{{.*}} weight(%{{.*}}) bias(%{{.*}}) {fp8_recipe = #delayed_scaling} :
// CHECK-SAME: (tensor<2048x4x4096xbf16>, tensor<16384x4096xbf16>, tensor<16384xbf16>) -> tensor<2048x4x16384xbf16>
func.func @linear_real_size(%x: tensor<2048x4x4096xbf16>,
                            %w: tensor<16384x4096xbf16>,
                            %b: tensor<16384xbf16>)
    -> tensor<2048x4x16384xbf16> {
  %y = te.linear %x weight(%w) bias(%b) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<2048x4x4096xbf16>, tensor<16384x4096xbf16>,
         tensor<16384xbf16>) -> tensor<2048x4x16384xbf16>
  return %y : tensor<2048x4x16384xbf16>
}

//===----------------------------------------------------------------------===//
// te.layernorm_linear
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @layernorm_linear
// CHECK-SAME: (%[[X:.*]]: tensor<16x64xbf16>, %[[G:.*]]: tensor<64xbf16>, %[[B:.*]]: tensor<64xbf16>, %[[W:.*]]: tensor<128x64xbf16>)
// CHECK: te.layernorm_linear %[[X]] ln_weight(%[[G]]) ln_bias(%[[B]]) weight(%[[W]]) :
// CHECK-SAME: (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>) -> tensor<16x128xbf16>
func.func @layernorm_linear(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                            %beta: tensor<64xbf16>, %w: tensor<128x64xbf16>)
    -> tensor<16x128xbf16> {
  %y = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      {normalization = #te.normalization<LayerNorm>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<128x64xbf16>) -> tensor<16x128xbf16>
  return %y : tensor<16x128xbf16>
}

// ln_bias and bias are both optional operands of the same type: the
// operand segments keep them apart. return_layernorm_output adds the
// normalized input as a second result.
// CHECK-LABEL: func.func @layernorm_linear_bias_ln_output
// CHECK-SAME: (%[[X:.*]]: tensor<8x2x64xf16>, %[[G:.*]]: tensor<64xf16>, %[[B:.*]]: tensor<64xf16>, %[[W:.*]]: tensor<64x64xf16>, %[[WB:.*]]: tensor<64xf16>)
// CHECK: %{{.*}}, %{{.*}} = te.layernorm_linear %[[X]] ln_weight(%[[G]]) ln_bias(%[[B]]) weight(%[[W]]) bias(%[[WB]]) {return_layernorm_output, zero_centered_gamma} :
// CHECK-SAME: (tensor<8x2x64xf16>, tensor<64xf16>, tensor<64xf16>, tensor<64x64xf16>, tensor<64xf16>) -> (tensor<8x2x64xf16>, tensor<8x2x64xf16>)
func.func @layernorm_linear_bias_ln_output(
    %x: tensor<8x2x64xf16>, %gamma: tensor<64xf16>, %beta: tensor<64xf16>,
    %w: tensor<64x64xf16>, %b: tensor<64xf16>)
    -> (tensor<8x2x64xf16>, tensor<8x2x64xf16>) {
  %y, %ln = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      bias(%b) {return_layernorm_output, zero_centered_gamma}
      : (tensor<8x2x64xf16>, tensor<64xf16>, tensor<64xf16>,
         tensor<64x64xf16>, tensor<64xf16>)
        -> (tensor<8x2x64xf16>, tensor<8x2x64xf16>)
  return %y, %ln : tensor<8x2x64xf16>, tensor<8x2x64xf16>
}

// RMSNorm has no ln_bias.
// CHECK-LABEL: func.func @layernorm_linear_rmsnorm
// CHECK-SAME: (%[[X:.*]]: tensor<16x64xf32>, %[[G:.*]]: tensor<64xf32>, %[[W:.*]]: tensor<32x64xf32>, %[[WB:.*]]: tensor<32xf32>)
// CHECK: te.layernorm_linear %[[X]] ln_weight(%[[G]]) weight(%[[W]]) bias(%[[WB]]) {eps = 1.000000e-08 : f64, fp8_recipe = #current_scaling, normalization = #te.normalization<RMSNorm>} :
// CHECK-SAME: (tensor<16x64xf32>, tensor<64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<16x32xf32>
func.func @layernorm_linear_rmsnorm(%x: tensor<16x64xf32>,
                                    %gamma: tensor<64xf32>,
                                    %w: tensor<32x64xf32>, %b: tensor<32xf32>)
    -> tensor<16x32xf32> {
  %y = te.layernorm_linear %x ln_weight(%gamma) weight(%w) bias(%b)
      {normalization = #te.normalization<RMSNorm>, eps = 1.0e-8 : f64,
       fp8_recipe = #te.current_scaling<>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<32x64xf32>,
         tensor<32xf32>) -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}

// Real size: the fused QKV projection of a 4096-wide, 32-head layer.
// CHECK-LABEL: func.func @layernorm_linear_real_size
// CHECK: te.layernorm_linear %{{.*}} ln_weight(%{{.*}}) ln_bias(%{{.*}}) weight(%{{.*}}) bias(%{{.*}}) {fp8_recipe = #delayed_scaling} :
// CHECK-SAME: (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>, tensor<12288x4096xbf16>, tensor<12288xbf16>) -> tensor<2048x4x12288xbf16>
func.func @layernorm_linear_real_size(
    %x: tensor<2048x4x4096xbf16>, %gamma: tensor<4096xbf16>,
    %beta: tensor<4096xbf16>, %w: tensor<12288x4096xbf16>,
    %b: tensor<12288xbf16>) -> tensor<2048x4x12288xbf16> {
  %y = te.layernorm_linear %x ln_weight(%gamma) ln_bias(%beta) weight(%w)
      bias(%b) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
         tensor<12288x4096xbf16>, tensor<12288xbf16>)
        -> tensor<2048x4x12288xbf16>
  return %y : tensor<2048x4x12288xbf16>
}

//===----------------------------------------------------------------------===//
// te.layernorm_mlp
//===----------------------------------------------------------------------===//

// hidden 64, ffn_hidden_size 256.
// CHECK-LABEL: func.func @layernorm_mlp
// CHECK-SAME: (%[[X:.*]]: tensor<16x64xbf16>, %[[G:.*]]: tensor<64xbf16>, %[[B:.*]]: tensor<64xbf16>, %[[W1:.*]]: tensor<256x64xbf16>, %[[B1:.*]]: tensor<256xbf16>, %[[W2:.*]]: tensor<64x256xbf16>, %[[B2:.*]]: tensor<64xbf16>)
// CHECK: te.layernorm_mlp %[[X]] ln_weight(%[[G]]) ln_bias(%[[B]]) fc1_weight(%[[W1]]) fc1_bias(%[[B1]]) fc2_weight(%[[W2]]) fc2_bias(%[[B2]]) :
// CHECK-SAME: (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<256x64xbf16>, tensor<256xbf16>, tensor<64x256xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
func.func @layernorm_mlp(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                         %beta: tensor<64xbf16>, %w1: tensor<256x64xbf16>,
                         %b1: tensor<256xbf16>, %w2: tensor<64x256xbf16>,
                         %b2: tensor<64xbf16>) -> tensor<16x64xbf16> {
  %y = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<256xbf16>, tensor<64x256xbf16>,
         tensor<64xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// Llama-style: RMSNorm, SwiGLU (FC1 is [2 * ffn, hidden]), no biases, plus
// the normalized input as a second result.
// CHECK-LABEL: func.func @layernorm_mlp_rmsnorm_swiglu
// CHECK-SAME: (%[[X:.*]]: tensor<8x2x64xf16>, %[[G:.*]]: tensor<64xf16>, %[[W1:.*]]: tensor<512x64xf16>, %[[W2:.*]]: tensor<64x256xf16>)
// CHECK: %{{.*}}, %{{.*}} = te.layernorm_mlp %[[X]] ln_weight(%[[G]]) fc1_weight(%[[W1]]) fc2_weight(%[[W2]]) {activation = #te.activation<swiglu>, eps = 1.000000e-08 : f64, fp8_recipe = #delayed_scaling1, normalization = #te.normalization<RMSNorm>, return_layernorm_output, zero_centered_gamma} :
// CHECK-SAME: (tensor<8x2x64xf16>, tensor<64xf16>, tensor<512x64xf16>, tensor<64x256xf16>) -> (tensor<8x2x64xf16>, tensor<8x2x64xf16>)
func.func @layernorm_mlp_rmsnorm_swiglu(
    %x: tensor<8x2x64xf16>, %gamma: tensor<64xf16>, %w1: tensor<512x64xf16>,
    %w2: tensor<64x256xf16>) -> (tensor<8x2x64xf16>, tensor<8x2x64xf16>) {
  %y, %ln = te.layernorm_mlp %x ln_weight(%gamma) fc1_weight(%w1)
      fc2_weight(%w2)
      {normalization = #te.normalization<RMSNorm>,
       activation = #te.activation<swiglu>, eps = 1.0e-8 : f64,
       zero_centered_gamma, return_layernorm_output,
       fp8_recipe = #te.delayed_scaling<amax_history_len = 16,
                                        amax_compute_algo = most_recent>}
      : (tensor<8x2x64xf16>, tensor<64xf16>, tensor<512x64xf16>,
         tensor<64x256xf16>) -> (tensor<8x2x64xf16>, tensor<8x2x64xf16>)
  return %y, %ln : tensor<8x2x64xf16>, tensor<8x2x64xf16>
}

// Every activation. FC1 has ffn = 256 rows, or 2 * ffn = 512 for the gated
// ones (geglu, qgeglu, reglu, sreglu, swiglu; clamped_swiglu below). gelu is
// the default.
// CHECK-LABEL: func.func @layernorm_mlp_activations
// CHECK: te.layernorm_mlp {{.*}} fc2_weight(%{{.*}}) : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<geglu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<qgelu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<qgeglu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<relu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<reglu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<srelu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<sreglu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<silu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<swiglu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
func.func @layernorm_mlp_activations(
    %x: tensor<16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>,
    %w1: tensor<256x64xf32>, %w1g: tensor<512x64xf32>,
    %w2: tensor<64x256xf32>) {
  %gelu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<gelu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<256x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %geglu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1g)
      fc2_weight(%w2) {activation = #te.activation<geglu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %qgelu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<qgelu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<256x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %qgeglu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1g)
      fc2_weight(%w2) {activation = #te.activation<qgeglu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %relu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<relu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<256x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %reglu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1g)
      fc2_weight(%w2) {activation = #te.activation<reglu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %srelu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<srelu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<256x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %sreglu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1g)
      fc2_weight(%w2) {activation = #te.activation<sreglu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %silu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<silu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<256x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %swiglu = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1g)
      fc2_weight(%w2) {activation = #te.activation<swiglu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  return
}

// clamped_swiglu (GPT-OSS's SwiGLU) is gated; its parameters are optional
// F64 attributes (absent: Transformer Engine's limit 7, alpha 1.702, offset
// 1), which print in full and only where given.
// CHECK-LABEL: func.func @layernorm_mlp_clamped_swiglu
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<clamped_swiglu>, activation_alpha = 1.702000e+00 : f64, activation_limit = 7.500000e-01 : f64, glu_linear_offset = 0.000000e+00 : f64} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<clamped_swiglu>, activation_limit = 1.000000e+01 : f64} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
// CHECK: te.layernorm_mlp {{.*}} {activation = #te.activation<clamped_swiglu>} : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<512x64xf32>
func.func @layernorm_mlp_clamped_swiglu(
    %x: tensor<16x64xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>,
    %w1: tensor<512x64xf32>, %w2: tensor<64x256xf32>) {
  %0 = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2)
      {activation = #te.activation<clamped_swiglu>,
       activation_limit = 0.75 : f64, activation_alpha = 1.702 : f64,
       glu_linear_offset = 0.0 : f64}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %1 = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2)
      {activation = #te.activation<clamped_swiglu>,
       activation_limit = 10.0 : f64}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  %2 = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2) {activation = #te.activation<clamped_swiglu>}
      : (tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>,
         tensor<512x64xf32>, tensor<64x256xf32>) -> tensor<16x64xf32>
  return
}

// te.act and te.dact carry the same parameters.
// CHECK-LABEL: func.func @act_clamped_swiglu
// CHECK: te.act <clamped_swiglu> %{{.*}} {activation_limit = 7.500000e-01 : f64, glu_linear_offset = 0.000000e+00 : f64} : tensor<16x512xf32> -> tensor<16x256xf32>
// CHECK: te.dact <clamped_swiglu> %{{.*}}, %{{.*}} {activation_alpha = 1.500000e+00 : f64, activation_limit = 7.500000e-01 : f64} : tensor<16x256xf32>, tensor<16x512xf32> -> tensor<16x512xf32>
// CHECK: te.act <swiglu> %{{.*}} : tensor<16x512xf32> -> tensor<16x256xf32>
func.func @act_clamped_swiglu(%h: tensor<16x512xf32>, %dy: tensor<16x256xf32>)
    -> (tensor<16x256xf32>, tensor<16x512xf32>, tensor<16x256xf32>) {
  %0 = te.act <clamped_swiglu> %h
      {activation_limit = 0.75 : f64, glu_linear_offset = 0.0 : f64}
      : tensor<16x512xf32> -> tensor<16x256xf32>
  %1 = te.dact <clamped_swiglu> %dy, %h
      {activation_limit = 0.75 : f64, activation_alpha = 1.5 : f64}
      : tensor<16x256xf32>, tensor<16x512xf32> -> tensor<16x512xf32>
  %2 = te.act <swiglu> %h : tensor<16x512xf32> -> tensor<16x256xf32>
  return %0, %1, %2
      : tensor<16x256xf32>, tensor<16x512xf32>, tensor<16x256xf32>
}

// Gated activations with biases: fc1_bias is [2 * ffn].
// CHECK-LABEL: func.func @layernorm_mlp_gated_bias
// CHECK: te.layernorm_mlp %{{.*}} ln_weight(%{{.*}}) ln_bias(%{{.*}}) fc1_weight(%{{.*}}) fc1_bias(%{{.*}}) fc2_weight(%{{.*}}) fc2_bias(%{{.*}}) {activation = #te.activation<geglu>} :
// CHECK-SAME: (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>, tensor<512x64xbf16>, tensor<512xbf16>, tensor<64x256xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
func.func @layernorm_mlp_gated_bias(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>,
    %w1: tensor<512x64xbf16>, %b1: tensor<512xbf16>, %w2: tensor<64x256xbf16>,
    %b2: tensor<64xbf16>) -> tensor<16x64xbf16> {
  %y = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
      {activation = #te.activation<geglu>}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<512x64xbf16>, tensor<512xbf16>, tensor<64x256xbf16>,
         tensor<64xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// Real size: hidden 4096, ffn_hidden_size 16384, 2048 x 4 tokens, in FP8.
// CHECK-LABEL: func.func @layernorm_mlp_real_size
// CHECK: te.layernorm_mlp %{{.*}} ln_weight(%{{.*}}) ln_bias(%{{.*}}) fc1_weight(%{{.*}}) fc1_bias(%{{.*}}) fc2_weight(%{{.*}}) fc2_bias(%{{.*}}) {fp8_recipe = #delayed_scaling} :
// CHECK-SAME: (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>, tensor<16384x4096xbf16>, tensor<16384xbf16>, tensor<4096x16384xbf16>, tensor<4096xbf16>) -> tensor<2048x4x4096xbf16>
func.func @layernorm_mlp_real_size(
    %x: tensor<2048x4x4096xbf16>, %gamma: tensor<4096xbf16>,
    %beta: tensor<4096xbf16>, %w1: tensor<16384x4096xbf16>,
    %b1: tensor<16384xbf16>, %w2: tensor<4096x16384xbf16>,
    %b2: tensor<4096xbf16>) -> tensor<2048x4x4096xbf16> {
  %y = te.layernorm_mlp %x ln_weight(%gamma) ln_bias(%beta) fc1_weight(%w1)
      fc1_bias(%b1) fc2_weight(%w2) fc2_bias(%b2)
      {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
         tensor<16384x4096xbf16>, tensor<16384xbf16>,
         tensor<4096x16384xbf16>, tensor<4096xbf16>)
        -> tensor<2048x4x4096xbf16>
  return %y : tensor<2048x4x4096xbf16>
}
