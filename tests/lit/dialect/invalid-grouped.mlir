// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of GroupedLinear's ops (dialects/TEGroupedVerifiers.cpp,
// docs/grouped-linear.md): one case per rule. m_splits is an i32 [G]
// vector; its values (>= 0, summing to at most T, multiples of 16 under
// FP8) are checked at run time, not here.

//===----------------------------------------------------------------------===//
// te.grouped_linear
//===----------------------------------------------------------------------===//

func.func @linear_input_rank(%x: tensor<32xbf16>, %m: tensor<4xi32>,
                             %w: tensor<4x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op 'input' must have rank >= 2, got 'tensor<32xbf16>'}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      : (tensor<32xbf16>, tensor<4xi32>,
         tensor<4x48x32xbf16>) -> tensor<48xbf16>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                              %w: tensor<48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op 'weight' must have rank >= 3, got 'tensor<48x32xbf16>'}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      : (tensor<64x32xbf16>, tensor<4xi32>,
         tensor<48x32xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @linear_m_splits_type(%x: tensor<64x32xbf16>, %m: tensor<4xi64>,
                                %w: tensor<4x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op 'm_splits' must be an i32 vector [num_gemms] with num_gemms >= 1, got 'tensor<4xi64>'}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      : (tensor<64x32xbf16>, tensor<4xi64>,
         tensor<4x48x32xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

// One weight per group.
func.func @linear_weight_shape(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                               %w: tensor<3x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op 'weight' must have shape [num_gemms, out_features, in_features] = [4, 48, 32], got [3, 48, 32]}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      : (tensor<64x32xbf16>, tensor<4xi32>,
         tensor<3x48x32xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @linear_bias_shape(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                             %w: tensor<4x48x32xbf16>, %b: tensor<48xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op 'bias' must have shape [num_gemms, out_features] = [4, 48], got [48]}}
  %y = te.grouped_linear %x splits(%m) weight(%w) bias(%b)
      : (tensor<64x32xbf16>, tensor<4xi32>, tensor<4x48x32xbf16>,
         tensor<48xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @linear_output_shape(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                               %w: tensor<4x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op 'output' must have shape [leading dims of 'input', out_features] = [64, 48], got [64, 32]}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      : (tensor<64x32xbf16>, tensor<4xi32>,
         tensor<4x48x32xbf16>) -> tensor<64x32xbf16>
  return
}

// -----

// Float8BlockScaling casts token segments in 1-D blocks: x and grad blocks
// of 128 x 128 tiles are refused, naming the field.
func.func @linear_block_scaling_x(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                                  %w: tensor<4x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op Float8BlockScaling with x_block_scaling_dim = 2 is not supported by te.grouped_linear (token segments are cast in 1-D blocks; use 1)}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.block_scaling<x_block_scaling_dim = 2,
                                      w_block_scaling_dim = 1>}
      : (tensor<64x32xbf16>, tensor<4xi32>,
         tensor<4x48x32xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @linear_block_scaling_grad(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                                     %w: tensor<4x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op Float8BlockScaling with grad_block_scaling_dim = 2 is not supported by te.grouped_linear (token segments are cast in 1-D blocks; use 1)}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.block_scaling<grad_block_scaling_dim = 2,
                                      w_block_scaling_dim = 1>}
      : (tensor<64x32xbf16>, tensor<4xi32>,
         tensor<4x48x32xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

// The wgrad GEMMs read the token dim of transposed FP8 copies.
func.func @linear_fp8_tokens(%x: tensor<8x5x32xbf16>, %m: tensor<4xi32>,
                             %w: tensor<4x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op FP8 GEMMs need the token count (product of the leading dims of 'input') divisible by 16, got 40 (fp8_recipe is set; pad the dim or drop the recipe)}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<8x5x32xbf16>, tensor<4xi32>,
         tensor<4x48x32xbf16>) -> tensor<8x5x48xbf16>
  return
}

// -----

func.func @linear_fp8_in_features(%x: tensor<64x24xbf16>, %m: tensor<4xi32>,
                                  %w: tensor<4x48x24xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op FP8 GEMMs need in_features divisible by 16, got 24}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.current_scaling<>}
      : (tensor<64x24xbf16>, tensor<4xi32>,
         tensor<4x48x24xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @linear_fp8_out_features(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                                   %w: tensor<4x40x32xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op FP8 GEMMs need out_features divisible by 16, got 40}}
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<64x32xbf16>, tensor<4xi32>,
         tensor<4x40x32xbf16>) -> tensor<64x40xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.grouped_matmul
//===----------------------------------------------------------------------===//

func.func @matmul_m_splits_rank(%a: tensor<64x32xbf16>,
                                %b: tensor<4x48x32xbf16>, %m: tensor<2x2xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'm_splits' must be an i32 vector [num_gemms] with num_gemms >= 1, got 'tensor<2x2xi32>'}}
  %y = te.grouped_matmul %a, %b, %m {transpose_b}
      : (tensor<64x32xbf16>, tensor<4x48x32xbf16>,
         tensor<2x2xi32>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @matmul_a_rank(%a: tensor<4x16x32xbf16>, %b: tensor<4x48x32xbf16>,
                         %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'a' must be a matrix [T, .], got 'tensor<4x16x32xbf16>'}}
  %y = te.grouped_matmul %a, %b, %m {transpose_b}
      : (tensor<4x16x32xbf16>, tensor<4x48x32xbf16>,
         tensor<4xi32>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @matmul_rows_transpose_a(%a: tensor<32x64xbf16>,
                                   %b: tensor<4x48x32xbf16>,
                                   %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op the rows form (3-D 'b') takes no transpose_a}}
  %y = te.grouped_matmul %a, %b, %m {transpose_a, transpose_b}
      : (tensor<32x64xbf16>, tensor<4x48x32xbf16>,
         tensor<4xi32>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @matmul_rows_groups(%a: tensor<64x32xbf16>, %b: tensor<2x48x32xbf16>,
                              %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'b' must hold num_gemms = 4 matrices, got 'tensor<2x48x32xbf16>'}}
  %y = te.grouped_matmul %a, %b, %m {transpose_b}
      : (tensor<64x32xbf16>, tensor<2x48x32xbf16>,
         tensor<4xi32>) -> tensor<64x48xbf16>
  return
}

// -----

// Without transpose_b, b is [G, K, N].
func.func @matmul_rows_contracting(%a: tensor<64x32xbf16>,
                                   %b: tensor<4x48x32xbf16>,
                                   %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op contracting dims differ: 32 (a) vs 48 (b)}}
  %y = te.grouped_matmul %a, %b, %m
      : (tensor<64x32xbf16>, tensor<4x48x32xbf16>,
         tensor<4xi32>) -> tensor<64x32xbf16>
  return
}

// -----

func.func @matmul_rows_bias(%a: tensor<64x32xbf16>, %b: tensor<4x48x32xbf16>,
                            %m: tensor<4xi32>, %bias: tensor<4x32xbf16>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'bias' must be [num_gemms, N] = [4, 48], got 'tensor<4x32xbf16>'}}
  %y = te.grouped_matmul %a, %b, %m bias(%bias) {transpose_b}
      : (tensor<64x32xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>,
         tensor<4x32xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @matmul_rows_output(%a: tensor<64x32xbf16>, %b: tensor<4x48x32xbf16>,
                              %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'output' must be [T, N] = [64, 48], got 'tensor<48x64xbf16>'}}
  %y = te.grouped_matmul %a, %b, %m {transpose_b}
      : (tensor<64x32xbf16>, tensor<4x48x32xbf16>,
         tensor<4xi32>) -> tensor<48x64xbf16>
  return
}

// -----

// wgrad needs transpose_a.
func.func @matmul_contraction_flags(%a: tensor<64x48xbf16>,
                                    %b: tensor<64x32xbf16>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'b' must be [num_gemms, ., .] (rows form) or a matrix [T, N] with transpose_a alone (contraction form), got 'tensor<64x32xbf16>'}}
  %y = te.grouped_matmul %a, %b, %m
      : (tensor<64x48xbf16>, tensor<64x32xbf16>,
         tensor<4xi32>) -> tensor<4x48x32xf32>
  return
}

// -----

func.func @matmul_contraction_tokens(%a: tensor<64x48xbf16>,
                                     %b: tensor<48x32xbf16>,
                                     %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'a' [T, M] and 'b' [T, N] must share T, got 64 and 48}}
  %y = te.grouped_matmul %a, %b, %m {transpose_a}
      : (tensor<64x48xbf16>, tensor<48x32xbf16>,
         tensor<4xi32>) -> tensor<4x48x32xf32>
  return
}

// -----

func.func @matmul_contraction_bias(%a: tensor<64x48xbf16>,
                                   %b: tensor<64x32xbf16>, %m: tensor<4xi32>,
                                   %bias: tensor<4x48xbf16>) {
  // expected-error @+1 {{'te.grouped_matmul' op the contraction form takes no bias}}
  %y = te.grouped_matmul %a, %b, %m bias(%bias) {transpose_a}
      : (tensor<64x48xbf16>, tensor<64x32xbf16>, tensor<4xi32>,
         tensor<4x48xbf16>) -> tensor<4x48x32xf32>
  return
}

// -----

func.func @matmul_contraction_output(%a: tensor<64x48xbf16>,
                                     %b: tensor<64x32xbf16>,
                                     %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_matmul' op 'output' must be [num_gemms, M, N] = [4, 48, 32], got 'tensor<48x32xf32>'}}
  %y = te.grouped_matmul %a, %b, %m {transpose_a}
      : (tensor<64x48xbf16>, tensor<64x32xbf16>,
         tensor<4xi32>) -> tensor<48x32xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.grouped_bias_grad
//===----------------------------------------------------------------------===//

func.func @bias_grad_no_groups(%g: tensor<64x48xbf16>, %m: tensor<0xi32>) {
  // expected-error @+1 {{'te.grouped_bias_grad' op 'm_splits' must be an i32 vector [num_gemms] with num_gemms >= 1, got 'tensor<0xi32>'}}
  %db = te.grouped_bias_grad %g, %m
      : (tensor<64x48xbf16>, tensor<0xi32>) -> tensor<0x48xbf16>
  return
}

// -----

func.func @bias_grad_fp8(%g: tensor<64x48xf8E5M2>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_bias_grad' op 'grad' must be a bf16/f16/f32 matrix [T, N], got 'tensor<64x48xf8E5M2>'}}
  %db = te.grouped_bias_grad %g, %m
      : (tensor<64x48xf8E5M2>, tensor<4xi32>) -> tensor<4x48xbf16>
  return
}

// -----

func.func @bias_grad_output(%g: tensor<64x48xbf16>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_bias_grad' op 'output' must be [num_gemms, N] = [4, 48], got 'tensor<48xbf16>'}}
  %db = te.grouped_bias_grad %g, %m
      : (tensor<64x48xbf16>, tensor<4xi32>) -> tensor<48xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.grouped_quantize
//===----------------------------------------------------------------------===//

func.func @quantize_fp8_input(%x: tensor<64x32xf8E4M3FN>, %s: tensor<4xf32>,
                              %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'input' must be bf16, f16 or f32, got 'tensor<64x32xf8E4M3FN>'}}
  %q, %amax = te.grouped_quantize %x, %s, %m
      : (tensor<64x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  return
}

// -----

func.func @quantize_segments_rank(%x: tensor<4x48x32xbf16>, %s: tensor<4xf32>,
                                  %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'input' must be a matrix [T, K] with 'm_splits', got 'tensor<4x48x32xbf16>'}}
  %q, %amax = te.grouped_quantize %x, %s, %m
      : (tensor<4x48x32xbf16>, tensor<4xf32>,
         tensor<4xi32>) -> (tensor<4x48x32xf8E4M3FN>, tensor<4xf32>)
  return
}

// -----

func.func @quantize_stacked_rank(%x: tensor<64x32xbf16>, %s: tensor<4xf32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'input' must be [G, R, C] with G >= 1 without 'm_splits', got 'tensor<64x32xbf16>'}}
  %q, %amax = te.grouped_quantize %x, %s
      : (tensor<64x32xbf16>,
         tensor<4xf32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  return
}

// -----

func.func @quantize_m_splits(%x: tensor<64x32xbf16>, %s: tensor<4xf32>,
                             %m: tensor<4xf32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'm_splits' must be an i32 vector [num_gemms] with num_gemms >= 1, got 'tensor<4xf32>'}}
  %q, %amax = te.grouped_quantize %x, %s, %m
      : (tensor<64x32xbf16>, tensor<4xf32>,
         tensor<4xf32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  return
}

// -----

func.func @quantize_output_type(%x: tensor<64x32xbf16>, %s: tensor<4xf32>,
                                %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'output' must be an f8E4M3FN or f8E5M2 tensor shaped like 'input', got 'tensor<64x32xbf16>'}}
  %q, %amax = te.grouped_quantize %x, %s, %m
      : (tensor<64x32xbf16>, tensor<4xf32>,
         tensor<4xi32>) -> (tensor<64x32xbf16>, tensor<4xf32>)
  return
}

// -----

// Stacked weights transpose per group: [G, C, R].
func.func @quantize_output_transposed(%x: tensor<4x48x32xbf16>,
                                      %s: tensor<4xf32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'output' must be an f8E4M3FN or f8E5M2 tensor shaped like 'input' transposed per group, got 'tensor<4x48x32xf8E4M3FN>'}}
  %q, %amax = te.grouped_quantize %x, %s {transpose}
      : (tensor<4x48x32xbf16>,
         tensor<4xf32>) -> (tensor<4x48x32xf8E4M3FN>, tensor<4xf32>)
  return
}

// -----

func.func @quantize_scale(%x: tensor<64x32xbf16>, %s: tensor<1xf32>,
                          %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'scale' must be 'tensor<4xf32>' (one value per group), got 'tensor<1xf32>'}}
  %q, %amax = te.grouped_quantize %x, %s, %m
      : (tensor<64x32xbf16>, tensor<1xf32>,
         tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  return
}

// -----

func.func @quantize_amax(%x: tensor<64x32xbf16>, %s: tensor<4xf32>,
                         %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_quantize' op 'amax' must be 'tensor<4xf32>' (one value per group), got 'tensor<4xbf16>'}}
  %q, %amax = te.grouped_quantize %x, %s, %m
      : (tensor<64x32xbf16>, tensor<4xf32>,
         tensor<4xi32>) -> (tensor<64x32xf8E5M2>, tensor<4xbf16>)
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.grouped_block_quantize (T = 320 in 4 segments, K = 160; weights
// [4, 144, 160])
//===----------------------------------------------------------------------===//

func.func @block_quantize_block_dim(%w: tensor<4x144x160xbf16>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'block_dim' must be 1 or 2, got 3}}
  %q, %s = te.grouped_block_quantize %w {block_dim = 3 : i64}
      : (tensor<4x144x160xbf16>)
        -> (tensor<4x144x160xf8E4M3FN>, tensor<4x2x4xf32>)
  return
}

// -----

func.func @block_quantize_segments_2d(%x: tensor<320x160xbf16>,
                                      %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op token segments ('m_splits' given) are cast in 1-D blocks: 'block_dim' must be 1, got 2}}
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 2 : i64}
      : (tensor<320x160xbf16>, tensor<4xi32>)
        -> (tensor<320x160xf8E4M3FN>, tensor<3x4xf32>)
  return
}

// -----

func.func @block_quantize_segments_rank(%x: tensor<4x80x160xbf16>,
                                        %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'input' must be a matrix [T, K] with 'm_splits', got 'tensor<4x80x160xbf16>'}}
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64}
      : (tensor<4x80x160xbf16>, tensor<4xi32>)
        -> (tensor<4x80x160xf8E4M3FN>, tensor<2x320xf32>)
  return
}

// -----

func.func @block_quantize_output(%x: tensor<320x160xbf16>,
                                 %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'output' must be an f8E4M3FN or f8E5M2 tensor shaped like 'input' transposed per group, got 'tensor<320x160xf8E4M3FN>'}}
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, transpose}
      : (tensor<320x160xbf16>, tensor<4xi32>)
        -> (tensor<320x160xf8E4M3FN>, tensor<7x160xf32>)
  return
}

// -----

func.func @block_quantize_scale_type(%x: tensor<320x160xbf16>,
                                     %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'scale_inv' must be f32, got 'tensor<2x320xbf16>'}}
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64}
      : (tensor<320x160xbf16>, tensor<4xi32>)
        -> (tensor<320x160xf8E4M3FN>, tensor<2x320xbf16>)
  return
}

// -----

// Segments: [ceil(K/128), T] (here the transposed form's shape was given).
func.func @block_quantize_segments_scale(%x: tensor<320x160xbf16>,
                                         %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'scale_inv' must be [ceil(K/128), T] = [2, 320], got 'tensor<7x160xf32>'}}
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64}
      : (tensor<320x160xbf16>, tensor<4xi32>)
        -> (tensor<320x160xf8E4M3FN>, tensor<7x160xf32>)
  return
}

// -----

// Transposed segments: G more rows than te.block_quantize's [3, 160], for
// the short last block of each segment.
func.func @block_quantize_transposed_scale(%x: tensor<320x160xbf16>,
                                           %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'scale_inv' must be [ceil(T/128) + G, pad4(K)] = [7, 160], got 'tensor<3x160xf32>'}}
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, transpose}
      : (tensor<320x160xbf16>, tensor<4xi32>)
        -> (tensor<160x320xf8E4M3FN>, tensor<3x160xf32>)
  return
}

// -----

// Stacked: one te.block_quantize layout per group.
func.func @block_quantize_stacked_scale(%w: tensor<4x144x160xbf16>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'scale_inv' must be [G, s0, s1], s = te.block_quantize's scale shape of one group = [4, 2, 4], got 'tensor<2x4xf32>'}}
  %q, %s = te.grouped_block_quantize %w {block_dim = 2 : i64}
      : (tensor<4x144x160xbf16>) -> (tensor<4x144x160xf8E4M3FN>, tensor<2x4xf32>)
  return
}

// -----

// Stacked, transposed: the cast matrices are [160, 144], 1-D blocks.
func.func @block_quantize_stacked_transposed_scale(
    %w: tensor<4x144x160xbf16>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'scale_inv' must be [G, s0, s1], s = te.block_quantize's scale shape of one group = [4, 2, 160], got 'tensor<4x2x144xf32>'}}
  %q, %s = te.grouped_block_quantize %w {block_dim = 1 : i64, transpose}
      : (tensor<4x144x160xbf16>)
        -> (tensor<4x160x144xf8E4M3FN>, tensor<4x2x144xf32>)
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.grouped_amax
//===----------------------------------------------------------------------===//

// Stacked: G is the leading dim.
func.func @amax_groups(%w: tensor<4x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_amax' op 'amax' must be 'tensor<4xf32>' (one value per group), got 'tensor<2xf32>'}}
  %amax = te.grouped_amax %w
      : (tensor<4x48x32xbf16>) -> tensor<2xf32>
  return
}

// -----

func.func @amax_rank(%x: tensor<64x32xbf16>) {
  // expected-error @+1 {{'te.grouped_amax' op 'input' must be [G, R, C] with G >= 1 without 'm_splits', got 'tensor<64x32xbf16>'}}
  %amax = te.grouped_amax %x
      : (tensor<64x32xbf16>) -> tensor<4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.grouped_scaled_matmul
//===----------------------------------------------------------------------===//

func.func @scaled_m_splits(%a: tensor<64x32xf8E4M3FN>,
                           %b: tensor<4x48x32xf8E4M3FN>, %sa: tensor<4xf32>,
                           %sb: tensor<4xf32>, %m: tensor<4xi64>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'm_splits' must be an i32 vector [num_gemms] with num_gemms >= 1, got 'tensor<4xi64>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi64>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @scaled_operands(%a: tensor<64x32xbf16>, %b: tensor<4x48x32xf8E4M3FN>,
                           %sa: tensor<4xf32>, %sb: tensor<4xf32>,
                           %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op operands must be an FP8 matrix 'a' and FP8 'b' [G, N, K] or [N, T], got 'tensor<64x32xbf16>' and 'tensor<4x48x32xf8E4M3FN>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<64x32xbf16>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @scaled_e5m2(%a: tensor<48x64xf8E5M2>, %b: tensor<32x64xf8E5M2>,
                       %sa: tensor<4xf32>, %sb: tensor<4xf32>,
                       %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op E5M2 x E5M2 GEMMs are not supported by FP8 tensor cores}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<48x64xf8E5M2>, tensor<32x64xf8E5M2>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<4x48x32xf32>
  return
}

// -----

func.func @scaled_a_scale_inv(%a: tensor<64x32xf8E4M3FN>,
                              %b: tensor<4x48x32xf8E4M3FN>, %sa: tensor<1xf32>,
                              %sb: tensor<4xf32>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a_scale_inv' must be 'tensor<4xf32>' (one value per group), got 'tensor<1xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<1xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @scaled_b_scale_inv(%a: tensor<64x32xf8E4M3FN>,
                              %b: tensor<4x48x32xf8E4M3FN>, %sa: tensor<4xf32>,
                              %sb: tensor<4x1xf32>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'b_scale_inv' must be 'tensor<4xf32>' (one value per group), got 'tensor<4x1xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4x1xf32>, tensor<4xi32>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @scaled_output_type(%a: tensor<64x32xf8E4M3FN>,
                              %b: tensor<4x48x32xf8E4M3FN>, %sa: tensor<4xf32>,
                              %sb: tensor<4xf32>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'output' must be bf16, f16 or f32, got 'tensor<64x48xf8E4M3FN>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<64x48xf8E4M3FN>
  return
}

// -----

// TN only: b is K-major.
func.func @scaled_rows_b(%a: tensor<64x32xf8E4M3FN>,
                         %b: tensor<4x32x48xf8E4M3FN>, %sa: tensor<4xf32>,
                         %sb: tensor<4xf32>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'b' must be [num_gemms, N, K] = [4, N, 32], got 'tensor<4x32x48xf8E4M3FN>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<64x32xf8E4M3FN>, tensor<4x32x48xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @scaled_rows_bias(%a: tensor<64x32xf8E4M3FN>,
                            %b: tensor<4x48x32xf8E4M3FN>, %sa: tensor<4xf32>,
                            %sb: tensor<4xf32>, %m: tensor<4xi32>,
                            %bias: tensor<48xbf16>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'bias' must be [num_gemms, N] = [4, 48], got 'tensor<48xbf16>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m bias(%bias)
      : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>, tensor<48xbf16>) -> tensor<64x48xbf16>
  return
}

// -----

func.func @scaled_rows_output(%a: tensor<64x32xf8E4M3FN>,
                              %b: tensor<4x48x32xf8E4M3FN>, %sa: tensor<4xf32>,
                              %sb: tensor<4xf32>, %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'output' must be [T, N] = [64, 48], got 'tensor<4x64x48xbf16>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<4x64x48xbf16>
  return
}

// -----

// The contraction form reads the transposed copies [M, T] and [N, T].
func.func @scaled_contraction_tokens(%a: tensor<48x64xf8E5M2>,
                                     %b: tensor<64x32xf8E4M3FN>,
                                     %sa: tensor<4xf32>, %sb: tensor<4xf32>,
                                     %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a' [M, T] and 'b' [N, T] must share T, got 64 and 32}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<48x64xf8E5M2>, tensor<64x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<4x48x64xf32>
  return
}

// -----

func.func @scaled_contraction_bias(%a: tensor<48x64xf8E5M2>,
                                   %b: tensor<32x64xf8E4M3FN>,
                                   %sa: tensor<4xf32>, %sb: tensor<4xf32>,
                                   %m: tensor<4xi32>, %bias: tensor<4x48xf32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op the contraction form takes no bias}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m bias(%bias)
      : (tensor<48x64xf8E5M2>, tensor<32x64xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>, tensor<4x48xf32>) -> tensor<4x48x32xf32>
  return
}

// -----

func.func @scaled_contraction_output(%a: tensor<48x64xf8E5M2>,
                                     %b: tensor<32x64xf8E4M3FN>,
                                     %sa: tensor<4xf32>, %sb: tensor<4xf32>,
                                     %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'output' must be [num_gemms, M, N] = [4, 48, 32], got 'tensor<4x32x48xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<48x64xf8E5M2>, tensor<32x64xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<4x32x48xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.grouped_scaled_matmul with block scales (T = 320 in 4 segments,
// K = 160, N = 144)
//===----------------------------------------------------------------------===//

// Both operands block-scaled or neither.
func.func @block_scaled_mixed(%a: tensor<320x160xf8E4M3FN>,
                              %b: tensor<4x144x160xf8E4M3FN>,
                              %sa: tensor<4xf32>, %sb: tensor<4x2x4xf32>,
                              %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a_scale_inv' and 'b_scale_inv' must both be f32 [G] (one scale per group) or both block scales, got 'tensor<4xf32>' and 'tensor<4x2x4xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>, tensor<4xf32>,
         tensor<4x2x4xf32>, tensor<4xi32>) -> tensor<320x144xbf16>
  return
}

// -----

func.func @block_scaled_mixed_b(%a: tensor<320x160xf8E4M3FN>,
                                %b: tensor<4x144x160xf8E4M3FN>,
                                %sa: tensor<2x320xf32>, %sb: tensor<4xf32>,
                                %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a_scale_inv' and 'b_scale_inv' must both be f32 [G] (one scale per group) or both block scales, got 'tensor<2x320xf32>' and 'tensor<4xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>,
         tensor<2x320xf32>, tensor<4xf32>, tensor<4xi32>) -> tensor<320x144xbf16>
  return
}

// -----

// Rows form, a: the segments layout [ceil(K/128), T], not its transpose.
func.func @block_scaled_rows_a_scale(%a: tensor<320x160xf8E4M3FN>,
                                     %b: tensor<4x144x160xf8E4M3FN>,
                                     %sa: tensor<320x2xf32>,
                                     %sb: tensor<4x2x4xf32>,
                                     %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a_scale_inv' and 'b_scale_inv' must be f32 [G] or te.grouped_block_quantize's block scales of the operands (dialects/GroupedBlockScaleLayout.h), got 'tensor<320x2xf32>' and 'tensor<4x2x4xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>,
         tensor<320x2xf32>, tensor<4x2x4xf32>, tensor<4xi32>)
        -> tensor<320x144xbf16>
  return
}

// -----

// Rows form, b: stacked [G, s0, s1], one layout per group.
func.func @block_scaled_rows_b_scale(%a: tensor<320x160xf8E4M3FN>,
                                     %b: tensor<4x144x160xf8E4M3FN>,
                                     %sa: tensor<2x320xf32>,
                                     %sb: tensor<2x4xf32>,
                                     %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a_scale_inv' and 'b_scale_inv' must be f32 [G] or te.grouped_block_quantize's block scales of the operands (dialects/GroupedBlockScaleLayout.h), got 'tensor<2x320xf32>' and 'tensor<2x4xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>,
         tensor<2x320xf32>, tensor<2x4xf32>, tensor<4xi32>)
        -> tensor<320x144xbf16>
  return
}

// -----

// Contraction form: both operands in the transposed segments layout
// [ceil(T/128) + G, pad4(rows)]; te.block_quantize's [3, 144] lacks the G
// rows.
func.func @block_scaled_contraction_scale(%a: tensor<144x320xf8E5M2>,
                                          %b: tensor<160x320xf8E4M3FN>,
                                          %sa: tensor<3x144xf32>,
                                          %sb: tensor<7x160xf32>,
                                          %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a_scale_inv' and 'b_scale_inv' must be f32 [G] or te.grouped_block_quantize's block scales of the operands (dialects/GroupedBlockScaleLayout.h), got 'tensor<3x144xf32>' and 'tensor<7x160xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<144x320xf8E5M2>, tensor<160x320xf8E4M3FN>, tensor<3x144xf32>,
         tensor<7x160xf32>, tensor<4xi32>) -> tensor<4x144x160xf32>
  return
}

// -----

// Never two 2-D operands: a's segments are cast in 1-D blocks only, so 128 x
// 128 tiles of a ([ceil(T/128), pad4(ceil(K/128))]) are no layout of it.
func.func @block_scaled_two_2d(%a: tensor<320x160xf8E4M3FN>,
                               %b: tensor<4x144x160xf8E4M3FN>,
                               %sa: tensor<3x4xf32>, %sb: tensor<4x2x4xf32>,
                               %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op 'a_scale_inv' and 'b_scale_inv' must be f32 [G] or te.grouped_block_quantize's block scales of the operands (dialects/GroupedBlockScaleLayout.h), got 'tensor<3x4xf32>' and 'tensor<4x2x4xf32>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>, tensor<3x4xf32>,
         tensor<4x2x4xf32>, tensor<4xi32>) -> tensor<320x144xbf16>
  return
}

// -----

func.func @block_scaled_fast_accum(%a: tensor<320x160xf8E4M3FN>,
                                   %b: tensor<4x144x160xf8E4M3FN>,
                                   %sa: tensor<2x320xf32>,
                                   %sb: tensor<4x2x4xf32>,
                                   %m: tensor<4xi32>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op block-scaled GEMMs take no fast_accum}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m {fast_accum}
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>,
         tensor<2x320xf32>, tensor<4x2x4xf32>, tensor<4xi32>)
        -> tensor<320x144xbf16>
  return
}

// -----

func.func @block_scaled_bias_type(%a: tensor<320x160xf8E4M3FN>,
                                  %b: tensor<4x144x160xf8E4M3FN>,
                                  %sa: tensor<2x320xf32>,
                                  %sb: tensor<4x2x4xf32>,
                                  %m: tensor<4xi32>,
                                  %bias: tensor<4x144xf16>) {
  // expected-error @+1 {{'te.grouped_scaled_matmul' op a block-scaled grouped GEMM's 'bias' must have the output's element type 'bf16', got 'tensor<4x144xf16>'}}
  %y = te.grouped_scaled_matmul %a, %b, %sa, %sb, %m bias(%bias)
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>,
         tensor<2x320xf32>, tensor<4x2x4xf32>, tensor<4xi32>,
         tensor<4x144xf16>) -> tensor<320x144xbf16>
  return
}

// -----

func.func @block_quantize_no_groups(%w: tensor<0x48x32xbf16>) {
  // expected-error @+1 {{'te.grouped_block_quantize' op 'input' must be [G, R, C] with G >= 1 without 'm_splits', got 'tensor<0x48x32xbf16>'}}
  %q, %s = te.grouped_block_quantize %w {block_dim = 2 : i64}
      : (tensor<0x48x32xbf16>) -> (tensor<0x48x32xf8E4M3FN>, tensor<0x1x4xf32>)
  return
}

// -----

// Tensor parallelism (docs/grouped-linear.md): a split op names its mode,
// and a row-parallel one takes no bias (it would be added after the sum).
func.func @linear_tp_without_mode(%x: tensor<32x64xbf16>, %m: tensor<4xi32>,
                                  %w: tensor<4x48x64xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op 'tp_size' 2 needs a 'parallel_mode' (column or row)}}
  %y = te.grouped_linear %x splits(%m) weight(%w) {tp_size = 2 : i64}
      : (tensor<32x64xbf16>, tensor<4xi32>, tensor<4x48x64xbf16>)
        -> tensor<32x48xbf16>
  return
}

// -----

func.func @linear_row_parallel_bias(%x: tensor<32x64xbf16>,
                                    %m: tensor<4xi32>,
                                    %w: tensor<4x48x64xbf16>,
                                    %b: tensor<4x48xbf16>) {
  // expected-error @+1 {{'te.grouped_linear' op a row-parallel te.grouped_linear (tp_size 2) takes no 'bias'}}
  %y = te.grouped_linear %x splits(%m) weight(%w) bias(%b)
      {tp_size = 2 : i64, parallel_mode = #te.parallel_mode<row>}
      : (tensor<32x64xbf16>, tensor<4xi32>, tensor<4x48x64xbf16>,
         tensor<4x48xbf16>) -> tensor<32x48xbf16>
  return
}
