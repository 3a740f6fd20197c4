// RUN: te-opt %s --te-autodiff --te-place-scaling | FileCheck %s
// RUN: te-opt %s --te-place-scaling | FileCheck %s --check-prefix=FWD
// RUN: te-opt %s --te-autodiff '--te-place-scaling=recipe="#te.current_scaling<fp8_format = e4m3, power_2_scale = true>"' | FileCheck %s --check-prefix=CURRENT
// RUN: te-opt %s --te-autodiff --te-place-scaling=recipe=none | FileCheck %s --check-prefix=NONE
// RUN: te-opt %s --te-autodiff '--te-place-scaling=recipe="#te.block_scaling<>"' | FileCheck %s --check-prefix=BLOCK
// RUN: te-opt %s '--te-place-scaling=recipe="#te.block_scaling<fp8_format = hybrid, x_block_scaling_dim = 2, w_block_scaling_dim = 1, power_2_scale = false>"' | FileCheck %s --check-prefix=BLOCK-FWD

#ds = #te.delayed_scaling<amax_history_len = 4>

// Forward: input and weight cast to E4M3 with meta slots 0 and 1, an FP8
// GEMM with fast accumulation; the amaxes feed one state update, whose new
// state the function returns. The transposed FP8 copies that dgrad (W^T) and
// wgrad (X^T) read are saved for the backward function.
// CHECK-LABEL: func.func @linear(
// CHECK-SAME:  %[[X:[^:]*]]: tensor<16x32xbf16> {te.name = "x"}, %[[W:[^:]*]]: tensor<48x32xbf16> {te.name = "w"},
// CHECK-SAME:  %[[SCALE:[^:]*]]: tensor<2xf32> {te.name = "fp8_meta.fwd.scale"}, %[[SCALE_INV:[^:]*]]: tensor<2xf32> {te.name = "fp8_meta.fwd.scale_inv"}, %[[HIST:[^:]*]]: tensor<4x2xf32> {te.name = "fp8_meta.fwd.amax_history"})
// CHECK-SAME:  -> (tensor<16x48xbf16> {te.name = "y"}, tensor<4x2xf32> {te.name = "fp8_meta.fwd.amax_history", te.updates_arg = 4 : i64}, tensor<2xf32> {te.name = "fp8_meta.fwd.scale", te.updates_arg = 2 : i64}, tensor<2xf32> {te.name = "fp8_meta.fwd.scale_inv", te.updates_arg = 3 : i64},
// CHECK-SAME:  tensor<32x48xf8E4M3FN> {te.name = "saved.fp8.4"}, tensor<1xf32> {te.name = "saved.fp8.5"}, tensor<32x16xf8E4M3FN> {te.name = "saved.fp8.6"}, tensor<1xf32> {te.name = "saved.fp8.7"})
// CHECK:      %[[S0:.*]] = te.slice %[[SCALE]][0]
// CHECK-NEXT: %[[QX:.*]], %[[AX:.*]] = te.quantize %[[X]], %[[S0]] : tensor<16x32xbf16>, tensor<1xf32> -> tensor<16x32xf8E4M3FN>, tensor<1xf32>
// CHECK-NEXT: %[[QXT:.*]] = te.transpose %[[QX]] : tensor<16x32xf8E4M3FN> -> tensor<32x16xf8E4M3FN>
// CHECK-NEXT: %[[SI0:.*]] = te.slice %[[SCALE_INV]][0]
// CHECK-NEXT: %[[S1:.*]] = te.slice %[[SCALE]][1]
// CHECK-NEXT: %[[QW:.*]], %[[AW:.*]] = te.quantize %[[W]], %[[S1]]
// CHECK-NEXT: %[[QWT:.*]] = te.transpose %[[QW]] : tensor<48x32xf8E4M3FN> -> tensor<32x48xf8E4M3FN>
// CHECK-NEXT: %[[SI1:.*]] = te.slice %[[SCALE_INV]][1]
// CHECK-NEXT: %[[Y:.*]] = te.scaled_matmul %[[QX]], %[[QW]], %[[SI0]], %[[SI1]] {fast_accum}
// CHECK-NEXT: %[[AMAXES:.*]] = te.concat %[[AX]], %[[AW]]
// CHECK-NEXT: %[[REDUCED:.*]] = te.amax_allreduce %[[AMAXES]] : tensor<2xf32>
// CHECK-NEXT: %[[H:.*]], %[[NS:.*]], %[[NSI:.*]] = te.delayed_scaling_update %[[HIST]], %[[SCALE]], %[[REDUCED]] {fp8_type = f8E4M3FN, recipe = #delayed_scaling}
// CHECK-NEXT: return %[[Y]], %[[H]], %[[NS]], %[[NSI]], %[[QWT]], %[[SI1]], %[[QXT]], %[[SI0]]

// Backward: the output gradient cast once to E5M2 (HYBRID), used as is by
// dgrad and transposed by wgrad, both with split accumulation; W and X are
// no longer passed in high precision.
// CHECK-LABEL: func.func @linear_backward(
// CHECK-SAME:  %[[DY:[^:]*]]: tensor<16x48xbf16> {te.name = "grad.y"}
// CHECK-SAME:  {te.name = "fp8_meta.bwd.scale"}
// CHECK-SAME:  %[[WT:[^:]*]]: tensor<32x48xf8E4M3FN> {te.forward_result = 4 : i64}, %[[WSI:[^:]*]]: tensor<1xf32> {te.forward_result = 5 : i64}, %[[XT:[^:]*]]: tensor<32x16xf8E4M3FN> {te.forward_result = 6 : i64}, %[[XSI:[^:]*]]: tensor<1xf32> {te.forward_result = 7 : i64})
// CHECK-NOT:  te.forward_arg
// CHECK:      %[[QDY:.*]], %{{.*}} = te.quantize %[[DY]], %{{.*}} : tensor<16x48xbf16>, tensor<1xf32> -> tensor<16x48xf8E5M2>, tensor<1xf32>
// CHECK-NEXT: %[[QDYT:.*]] = te.transpose %[[QDY]] : tensor<16x48xf8E5M2> -> tensor<48x16xf8E5M2>
// CHECK-NEXT: %[[DSI:.*]] = te.slice
// CHECK-NEXT: %[[DX:.*]] = te.scaled_matmul %[[QDY]], %[[WT]], %[[DSI]], %[[WSI]] : (tensor<16x48xf8E5M2>, tensor<32x48xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<16x32xbf16>
// CHECK-NEXT: %[[DW:.*]] = te.scaled_matmul %[[QDYT]], %[[XT]], %[[DSI]], %[[XSI]] : (tensor<48x16xf8E5M2>, tensor<32x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<48x32xbf16>
// CHECK:      te.delayed_scaling_update {{.*}} {fp8_type = f8E5M2, recipe = #delayed_scaling}

// Inference: no backward, nothing saved.
// FWD-LABEL: func.func @linear(
// FWD-NOT:   saved
// FWD:       te.scaled_matmul
// FWD-NOT:   te.transpose

// Current scaling: per tensor amax, scale, cast; no state.
// CURRENT-LABEL: func.func @linear(
// CURRENT-NOT:   fp8_meta
// CURRENT:       %[[A:.*]] = te.amax %arg0 : tensor<16x32xbf16> -> tensor<1xf32>
// CURRENT-NEXT:  %[[S:.*]], %[[SI:.*]] = te.compute_scale %[[A]] {fp8_type = f8E4M3FN, power_2_scale}
// CURRENT-NEXT:  te.quantize %arg0, %[[S]]
// CURRENT-LABEL: func.func @linear_backward(
// CURRENT:       te.compute_scale %{{.*}} {fp8_type = f8E4M3FN, power_2_scale}
// CURRENT-NOT:   f8E5M2

// Float8BlockScaling: no meta state; 1-D blocks for x and dY, 2-D tiles for
// W, no fast accumulation; the transposed copies the backward reads are
// cast again from the high-precision tensors (x^T, W^T in the forward, dY^T
// in the backward), in E4M3 throughout (TE's default format here).
// BLOCK-LABEL: func.func @linear(
// BLOCK-NOT:   fp8_meta
// BLOCK-SAME:  -> (tensor<16x48xbf16> {te.name = "y"}, tensor<32x48xf8E4M3FN> {te.name = "saved.fp8.1"}, tensor<1x4xf32> {te.name = "saved.fp8.2"}, tensor<32x16xf8E4M3FN> {te.name = "saved.fp8.3"}, tensor<1x32xf32> {te.name = "saved.fp8.4"})
// BLOCK:       %[[QX:.*]], %[[SX:.*]] = te.block_quantize %arg0 {block_dim = 1 : i64, power_2_scale} : tensor<16x32xbf16> -> tensor<16x32xf8E4M3FN>, tensor<1x16xf32>
// BLOCK-NEXT:  %[[QXT:.*]], %[[SXT:.*]] = te.block_quantize %arg0 {block_dim = 1 : i64, power_2_scale, transpose} : tensor<16x32xbf16> -> tensor<32x16xf8E4M3FN>, tensor<1x32xf32>
// BLOCK-NEXT:  %[[QW:.*]], %[[SW:.*]] = te.block_quantize %arg1 {block_dim = 2 : i64, power_2_scale} : tensor<48x32xbf16> -> tensor<48x32xf8E4M3FN>, tensor<1x4xf32>
// BLOCK-NEXT:  %[[QWT:.*]], %[[SWT:.*]] = te.block_quantize %arg1 {block_dim = 2 : i64, power_2_scale, transpose} : tensor<48x32xbf16> -> tensor<32x48xf8E4M3FN>, tensor<1x4xf32>
// BLOCK-NEXT:  %[[Y:.*]] = te.scaled_matmul %[[QX]], %[[QW]], %[[SX]], %[[SW]] : (
// BLOCK-NEXT:  return %[[Y]], %[[QWT]], %[[SWT]], %[[QXT]], %[[SXT]] :
// BLOCK-LABEL: func.func @linear_backward(
// BLOCK-SAME:  %[[DY:[^:]*]]: tensor<16x48xbf16> {te.name = "grad.y"}, %[[WT:[^:]*]]: tensor<32x48xf8E4M3FN> {te.forward_result = 1 : i64}, %[[SWT2:[^:]*]]: tensor<1x4xf32> {te.forward_result = 2 : i64}, %[[XT:[^:]*]]: tensor<32x16xf8E4M3FN> {te.forward_result = 3 : i64}, %[[SXT2:[^:]*]]: tensor<1x32xf32> {te.forward_result = 4 : i64})
// BLOCK-NEXT:  %[[QDY:.*]], %[[SDY:.*]] = te.block_quantize %[[DY]] {block_dim = 1 : i64, power_2_scale} : tensor<16x48xbf16> -> tensor<16x48xf8E4M3FN>, tensor<1x16xf32>
// BLOCK-NEXT:  %[[QDYT:.*]], %[[SDYT:.*]] = te.block_quantize %[[DY]] {block_dim = 1 : i64, power_2_scale, transpose} : tensor<16x48xbf16> -> tensor<48x16xf8E4M3FN>, tensor<1x48xf32>
// BLOCK-NEXT:  te.scaled_matmul %[[QDY]], %[[WT]], %[[SDY]], %[[SWT2]] : (
// BLOCK-NEXT:  te.scaled_matmul %[[QDYT]], %[[XT]], %[[SDYT]], %[[SXT2]] : (

// Inference under a non-default block recipe: 2-D x, 1-D W, no transposes.
// BLOCK-FWD-LABEL: func.func @linear(
// BLOCK-FWD:       te.block_quantize %arg0 {block_dim = 2 : i64} : tensor<16x32xbf16> -> tensor<16x32xf8E4M3FN>, tensor<1x4xf32>
// BLOCK-FWD-NEXT:  te.block_quantize %arg1 {block_dim = 1 : i64} : tensor<48x32xbf16> -> tensor<48x32xf8E4M3FN>, tensor<1x48xf32>
// BLOCK-FWD-NOT:   transpose

// NONE-NOT: te.scaled_matmul
// NONE-NOT: fp8_recipe
func.func @linear(%x: tensor<16x32xbf16> {te.name = "x"}, %w: tensor<48x32xbf16> {te.name = "w"}) -> (tensor<16x48xbf16> {te.name = "y"}) {
  %y = te.matmul %x, %w {fp8_recipe = #ds, role = #te.gemm_role<fprop>, transpose_b} : tensor<16x32xbf16>, tensor<48x32xbf16> -> tensor<16x48xbf16>
  return %y : tensor<16x48xbf16>
}
