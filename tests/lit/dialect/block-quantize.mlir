// RUN: te-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// Float8BlockScaling's ops (docs/block-scaling.md): te.block_quantize and a
// te.scaled_matmul on block scales. The scale_inv shapes are cuBLASLt's
// layout: 1-D [ceil(cols/128), pad4(rows)], 2-D [ceil(rows/128),
// pad4(ceil(cols/128))]; edge blocks are partial.

// CHECK-LABEL: func.func @fprop
// CHECK: te.block_quantize %{{.*}} {block_dim = 1 : i64, power_2_scale} : tensor<200x300xbf16> -> tensor<200x300xf8E4M3FN>, tensor<3x200xf32>
// CHECK: te.block_quantize %{{.*}} {block_dim = 2 : i64} : tensor<136x300xbf16> -> tensor<136x300xf8E4M3FN>, tensor<2x4xf32>
// CHECK: te.block_quantize %{{.*}} {block_dim = 1 : i64, transpose} : tensor<200x300xbf16> -> tensor<300x200xf8E5M2>, tensor<2x300xf32>
// CHECK: te.scaled_matmul
func.func @fprop(%x: tensor<200x300xbf16>, %w: tensor<136x300xbf16>)
    -> (tensor<200x136xbf16>, tensor<300x200xf8E5M2>, tensor<2x300xf32>) {
  %qx, %sx = te.block_quantize %x {block_dim = 1 : i64, power_2_scale}
      : tensor<200x300xbf16> -> tensor<200x300xf8E4M3FN>, tensor<3x200xf32>
  %qw, %sw = te.block_quantize %w {block_dim = 2 : i64}
      : tensor<136x300xbf16> -> tensor<136x300xf8E4M3FN>, tensor<2x4xf32>
  %qt, %st = te.block_quantize %x {block_dim = 1 : i64, transpose}
      : tensor<200x300xbf16> -> tensor<300x200xf8E5M2>, tensor<2x300xf32>
  %y = te.scaled_matmul %qx, %qw, %sx, %sw
      : (tensor<200x300xf8E4M3FN>, tensor<136x300xf8E4M3FN>, tensor<3x200xf32>,
         tensor<2x4xf32>) -> tensor<200x136xbf16>
  return %y, %qt, %st : tensor<200x136xbf16>, tensor<300x200xf8E5M2>, tensor<2x300xf32>
}

// -----

func.func @wrong_scale_shape(%x: tensor<200x300xbf16>) {
  // expected-error @+1 {{'te.block_quantize' op 'scale_inv' must be 'tensor<3x200xf32>' (dialects/BlockScaleLayout.h), got 'tensor<200x3xf32>'}}
  %q, %s = te.block_quantize %x {block_dim = 1 : i64}
      : tensor<200x300xbf16> -> tensor<200x300xf8E4M3FN>, tensor<200x3xf32>
  return
}

// -----

func.func @untransposed_output(%x: tensor<200x300xbf16>) {
  // expected-error @+1 {{'te.block_quantize' op 'output' must be an f8E4M3FN or f8E5M2 [300, 200] matrix ('input' transposed), got 'tensor<200x300xf8E4M3FN>'}}
  %q, %s = te.block_quantize %x {block_dim = 1 : i64, transpose}
      : tensor<200x300xbf16> -> tensor<200x300xf8E4M3FN>, tensor<2x300xf32>
  return
}

// -----

func.func @block_dim_3(%x: tensor<256x256xbf16>) {
  // expected-error @+1 {{'te.block_quantize' op 'block_dim' must be 1 or 2, got 3}}
  %q, %s = te.block_quantize %x {block_dim = 3 : i64}
      : tensor<256x256xbf16> -> tensor<256x256xf8E4M3FN>, tensor<2x4xf32>
  return
}

// -----

func.func @two_2d(%a: tensor<256x256xf8E4M3FN>, %b: tensor<128x256xf8E4M3FN>,
                  %sa: tensor<2x4xf32>, %sb: tensor<1x4xf32>) {
  // expected-error @+1 {{'te.scaled_matmul' op cannot pair two 2-D block-scaled operands}}
  %y = te.scaled_matmul %a, %b, %sa, %sb
      : (tensor<256x256xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<2x4xf32>,
         tensor<1x4xf32>) -> tensor<256x128xbf16>
  return
}

// -----

func.func @mixed(%a: tensor<256x256xf8E4M3FN>, %b: tensor<128x256xf8E4M3FN>,
                 %sa: tensor<2x256xf32>, %sb: tensor<1xf32>) {
  // expected-error @+1 {{'te.scaled_matmul' op operands must both be block-scaled or both have one scale}}
  %y = te.scaled_matmul %a, %b, %sa, %sb
      : (tensor<256x256xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<2x256xf32>,
         tensor<1xf32>) -> tensor<256x128xbf16>
  return
}

// -----

func.func @fast_accum(%a: tensor<256x256xf8E4M3FN>, %b: tensor<128x256xf8E4M3FN>,
                      %sa: tensor<2x256xf32>, %sb: tensor<1x4xf32>) {
  // expected-error @+1 {{'te.scaled_matmul' op block-scaled GEMMs cannot use fast_accum}}
  %y = te.scaled_matmul %a, %b, %sa, %sb {fast_accum}
      : (tensor<256x256xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<2x256xf32>,
         tensor<1x4xf32>) -> tensor<256x128xbf16>
  return
}

// -----

func.func @bad_scale(%a: tensor<256x256xf8E4M3FN>, %b: tensor<128x256xf8E4M3FN>,
                     %sa: tensor<2x255xf32>, %sb: tensor<1x4xf32>) {
  // expected-error @+1 {{'te.scaled_matmul' op 'a_scale_inv' must be tensor<1xf32> (one scale) or block scales: tensor<2x256xf32> (1-D) or tensor<2x4xf32> (2-D), got 'tensor<2x255xf32>'}}
  %y = te.scaled_matmul %a, %b, %sa, %sb
      : (tensor<256x256xf8E4M3FN>, tensor<128x256xf8E4M3FN>, tensor<2x255xf32>,
         tensor<1x4xf32>) -> tensor<256x128xbf16>
  return
}

// -----

// At most 4 rows and 128 columns, 1-D and 2-D scales have one shape.
func.func @ambiguous(%a: tensor<4x64xf8E4M3FN>, %b: tensor<128x64xf8E4M3FN>,
                     %sa: tensor<1x4xf32>, %sb: tensor<1x128xf32>) {
  // expected-error @+1 {{'te.scaled_matmul' op 'a_scale_inv' cannot say whether its 4 x 64 operand has 1-D or 2-D blocks (both scale shapes are the same); block-scaled operands need more than 4 rows or 128 columns}}
  %y = te.scaled_matmul %a, %b, %sa, %sb
      : (tensor<4x64xf8E4M3FN>, tensor<128x64xf8E4M3FN>, tensor<1x4xf32>,
         tensor<1x128xf32>) -> tensor<4x128xbf16>
  return
}

// -----

func.func @fp8_input(%x: tensor<256x256xf8E4M3FN>) {
  // expected-error @+1 {{'te.block_quantize' op 'input' must be a bf16/f16/f32 matrix, got 'tensor<256x256xf8E4M3FN>'}}
  %q, %s = te.block_quantize %x {block_dim = 2 : i64}
      : tensor<256x256xf8E4M3FN> -> tensor<256x256xf8E4M3FN>, tensor<2x4xf32>
  return
}
