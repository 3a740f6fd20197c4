// RUN: te-opt %s --te-autodiff --te-place-scaling | FileCheck %s
// RUN: te-opt %s --te-place-scaling | FileCheck %s --check-prefix=FWD
// RUN: te-opt %s --te-autodiff '--te-place-scaling=recipe="#te.current_scaling<power_2_scale = true>"' | FileCheck %s --check-prefix=CURRENT
// RUN: te-opt %s --te-autodiff --te-place-scaling=recipe=none | FileCheck %s --check-prefix=NONE

#ds = #te.delayed_scaling<amax_history_len = 4>

// GroupedLinear (docs/grouped-linear.md) then a Linear, under DelayedScaling
// HYBRID. Forward: x cast per row segment with the G = 4 slots 0..3 of the
// meta vectors, the stacked weights per matrix with slots 4..7, then the
// Linear's two slots 8 and 9; each [4] amax joins the update in slot order.
// The K-major copies the backward GEMMs read are cast again from the
// high-precision tensors with the same scales (te.grouped_quantize
// {transpose}: x^T [K, T] for wgrad, W^T [G, K, N] for dgrad) and saved.
// CHECK-LABEL: func.func @grouped(
// CHECK-SAME:  %[[X:[^:]*]]: tensor<32x64xbf16> {te.name = "x"}, %[[M:[^:]*]]: tensor<4xi32> {te.name = "m"}, %[[W:[^:]*]]: tensor<4x48x64xbf16> {te.name = "w"}, %[[B:[^:]*]]: tensor<4x48xbf16> {te.name = "b"},
// CHECK-SAME:  %[[SCALE:[^:]*]]: tensor<10xf32> {te.name = "fp8_meta.fwd.scale"}, %[[SCALE_INV:[^:]*]]: tensor<10xf32> {te.name = "fp8_meta.fwd.scale_inv"}, %{{.*}}: tensor<4x10xf32> {te.name = "fp8_meta.fwd.amax_history"})
// CHECK-SAME:  tensor<4x64x48xf8E4M3FN> {te.name = "saved.fp8.9"}, tensor<4xf32> {te.name = "saved.fp8.10"}, tensor<64x32xf8E4M3FN> {te.name = "saved.fp8.11"}, tensor<4xf32> {te.name = "saved.fp8.12"})
// CHECK:      %[[SX:.*]] = te.slice %[[SCALE]][0] : tensor<10xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[QX:.*]], %[[AX:.*]] = te.grouped_quantize %[[X]], %[[SX]], %[[M]] : (tensor<32x64xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<4xf32>)
// CHECK-NEXT: %[[QXT:.*]], %{{.*}} = te.grouped_quantize %[[X]], %[[SX]], %[[M]] {transpose} : (tensor<32x64xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
// CHECK-NEXT: %[[SIX:.*]] = te.slice %[[SCALE_INV]][0] : tensor<10xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[SW:.*]] = te.slice %[[SCALE]][4] : tensor<10xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[QW:.*]], %[[AW:.*]] = te.grouped_quantize %[[W]], %[[SW]] : (tensor<4x48x64xbf16>, tensor<4xf32>) -> (tensor<4x48x64xf8E4M3FN>, tensor<4xf32>)
// CHECK-NEXT: %[[QWT:.*]], %{{.*}} = te.grouped_quantize %[[W]], %[[SW]] {transpose} : (tensor<4x48x64xbf16>, tensor<4xf32>) -> (tensor<4x64x48xf8E4M3FN>, tensor<4xf32>)
// CHECK-NEXT: %[[SIW:.*]] = te.slice %[[SCALE_INV]][4] : tensor<10xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[Y:.*]] = te.grouped_scaled_matmul %[[QX]], %[[QW]], %[[SIX]], %[[SIW]], %[[M]] bias(%[[B]]) {fast_accum} : (tensor<32x64xf8E4M3FN>, tensor<4x48x64xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<32x48xbf16>
// CHECK-NEXT: te.slice %[[SCALE]][8] : tensor<10xf32> -> tensor<1xf32>
// CHECK-NEXT: %{{.*}}, %[[AY:.*]] = te.quantize %[[Y]]
// CHECK:      te.slice %[[SCALE]][9] : tensor<10xf32> -> tensor<1xf32>
// CHECK-NEXT: %{{.*}}, %[[AW2:.*]] = te.quantize
// CHECK:      te.scaled_matmul
// CHECK-NEXT: %[[AMAXES:.*]] = te.concat %[[AX]], %[[AW]], %[[AY]], %[[AW2]] : tensor<4xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32> -> tensor<10xf32>
// CHECK-NEXT: %[[REDUCED:.*]] = te.amax_allreduce %[[AMAXES]] : tensor<10xf32>
// CHECK-NEXT: te.delayed_scaling_update %{{.*}}, %[[SCALE]], %[[REDUCED]] {fp8_type = f8E4M3FN, recipe = #delayed_scaling}
// CHECK-NEXT: return {{.*}}, %[[QWT]], %[[SIW]], %[[QXT]], %[[SIX]] :

// Backward: the Linear's output gradient takes slot 0; the grouped GEMMs'
// gradient dY is cast per segment to E5M2 with slots 1..4, row-wise for
// dgrad (against the saved W^T) and again transposed ([N, T]) for wgrad
// (against the saved x^T), both without fast accumulation; the bias
// gradient sums dY per segment in high precision. m_splits is the
// forward's argument; x and W are no longer passed in high precision.
// CHECK-LABEL: func.func @grouped_backward(
// CHECK-SAME:  %[[BM:[^:]*]]: tensor<4xi32> {te.forward_arg = 1 : i64}, %[[BSCALE:[^:]*]]: tensor<5xf32> {te.name = "fp8_meta.bwd.scale"}, %[[BSCALE_INV:[^:]*]]: tensor<5xf32> {te.name = "fp8_meta.bwd.scale_inv"}
// CHECK-SAME:  %[[WT:[^:]*]]: tensor<4x64x48xf8E4M3FN> {te.forward_result = 8 : i64}, %[[WSI:[^:]*]]: tensor<4xf32> {te.forward_result = 9 : i64}, %[[XT:[^:]*]]: tensor<64x32xf8E4M3FN> {te.forward_result = 10 : i64}, %[[XSI:[^:]*]]: tensor<4xf32> {te.forward_result = 11 : i64})
// CHECK-NOT:  te.forward_arg = 0
// CHECK:      %[[DY:.*]] = te.scaled_matmul
// CHECK:      %[[SDY:.*]] = te.slice %[[BSCALE]][1] : tensor<5xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[QDY:.*]], %[[ADY:.*]] = te.grouped_quantize %[[DY]], %[[SDY]], %[[BM]] : (tensor<32x48xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<32x48xf8E5M2>, tensor<4xf32>)
// CHECK-NEXT: %[[QDYT:.*]], %{{.*}} = te.grouped_quantize %[[DY]], %[[SDY]], %[[BM]] {transpose} : (tensor<32x48xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<48x32xf8E5M2>, tensor<4xf32>)
// CHECK-NEXT: %[[SIDY:.*]] = te.slice %[[BSCALE_INV]][1] : tensor<5xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[DX:.*]] = te.grouped_scaled_matmul %[[QDY]], %[[WT]], %[[SIDY]], %[[WSI]], %[[BM]] : (tensor<32x48xf8E5M2>, tensor<4x64x48xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>) -> tensor<32x64xbf16>
// CHECK-NEXT: %[[DW:.*]] = te.grouped_scaled_matmul %[[QDYT]], %[[XT]], %[[SIDY]], %[[XSI]], %[[BM]] : (tensor<48x32xf8E5M2>, tensor<64x32xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>) -> tensor<4x48x64xbf16>
// CHECK-NEXT: %[[DB:.*]] = te.grouped_bias_grad %[[DY]], %[[BM]] : (tensor<32x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16>
// CHECK-NEXT: te.concat %{{.*}}, %[[ADY]] : tensor<1xf32>, tensor<4xf32> -> tensor<5xf32>
// CHECK:      te.delayed_scaling_update {{.*}} {fp8_type = f8E5M2, recipe = #delayed_scaling}
// CHECK:      return %[[DX]], %[[DW]], %[[DB]],

// Inference: no transposed casts, nothing saved.
// FWD-LABEL: func.func @grouped(
// FWD-NOT:   saved
// FWD-NOT:   transpose
// FWD:       te.grouped_scaled_matmul
// FWD-NOT:   transpose

// Float8CurrentScaling: per-group amaxes, scales computed on [4] vectors,
// no state; HYBRID (the default format): dY in E5M2.
// CURRENT-LABEL: func.func @grouped(
// CURRENT-NOT:   fp8_meta
// CURRENT:       %[[A:.*]] = te.grouped_amax %arg0, %arg1 : (tensor<32x64xbf16>, tensor<4xi32>) -> tensor<4xf32>
// CURRENT-NEXT:  %[[S:.*]], %[[SI:.*]] = te.compute_scale %[[A]] {fp8_type = f8E4M3FN, power_2_scale} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
// CURRENT-NEXT:  te.grouped_quantize %arg0, %[[S]], %arg1 :
// CURRENT-NEXT:  te.grouped_quantize %arg0, %[[S]], %arg1 {transpose} :
// CURRENT-NEXT:  %[[AW:.*]] = te.grouped_amax %arg2 : (tensor<4x48x64xbf16>) -> tensor<4xf32>
// CURRENT-NEXT:  %[[SW:.*]], %[[SIW:.*]] = te.compute_scale %[[AW]] {fp8_type = f8E4M3FN, power_2_scale}
// CURRENT-NEXT:  te.grouped_quantize %arg2, %[[SW]] :
// CURRENT-NEXT:  te.grouped_quantize %arg2, %[[SW]] {transpose} :
// CURRENT-NEXT:  te.grouped_scaled_matmul %{{.*}}, %{{.*}}, %[[SI]], %[[SIW]], %arg1 bias(%arg3) {fast_accum}
// CURRENT-LABEL: func.func @grouped_backward(
// CURRENT-NOT:   fp8_meta
// CURRENT:       te.grouped_amax %{{.*}}, %arg1 : (tensor<32x48xbf16>, tensor<4xi32>) -> tensor<4xf32>
// CURRENT-NEXT:  te.compute_scale %{{.*}} {fp8_type = f8E5M2, power_2_scale} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
// CURRENT-NEXT:  te.grouped_quantize {{.*}} -> (tensor<32x48xf8E5M2>, tensor<4xf32>)
// CURRENT-NEXT:  te.grouped_quantize {{.*}} {transpose} : {{.*}} -> (tensor<48x32xf8E5M2>, tensor<4xf32>)
// CURRENT-NEXT:  te.grouped_scaled_matmul
// CURRENT-NEXT:  te.grouped_scaled_matmul

// recipe=none: the grouped GEMMs stay in high precision, without recipe.
// NONE-LABEL: func.func @grouped_backward(
// NONE-NOT:   quantize
// NONE:       te.grouped_matmul %{{.*}} {role = #te.gemm_role<dgrad>}
// NONE-NEXT:  te.grouped_matmul %{{.*}} {role = #te.gemm_role<wgrad>, transpose_a}
func.func @grouped(%x: tensor<32x64xbf16> {te.name = "x"}, %m: tensor<4xi32> {te.name = "m"}, %w: tensor<4x48x64xbf16> {te.name = "w"}, %b: tensor<4x48xbf16> {te.name = "b"}, %w2: tensor<16x48xbf16> {te.name = "w2"}) -> (tensor<32x16xbf16> {te.name = "y"}) {
  %y = te.grouped_matmul %x, %w, %m bias(%b) {fp8_recipe = #ds, role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x64xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<32x48xbf16>
  %z = te.matmul %y, %w2 {fp8_recipe = #ds, role = #te.gemm_role<fprop>, transpose_b} : tensor<32x48xbf16>, tensor<16x48xbf16> -> tensor<32x16xbf16>
  return %z : tensor<32x16xbf16>
}
