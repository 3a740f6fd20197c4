// RUN: te-opt %s --te-autodiff | FileCheck %s

// GroupedLinear's GEMM (docs/grouped-linear.md): dX = the dgrad grouped GEMM
// (rows form, W not transposed), dW = the wgrad grouped GEMM (contraction
// form, dY^T X per segment), db = per-segment column sums of dY; both GEMMs
// keep the recipe. m_splits, an integer input, gets no gradient; the
// backward reads it as the forward's argument (as it reads x and W).
// CHECK-LABEL: func.func @grouped(
// CHECK-SAME:  -> (tensor<32x48xbf16> {te.name = "y"})
// CHECK-LABEL: func.func @grouped_backward(
// CHECK-SAME:  %[[DY:[^:]*]]: tensor<32x48xbf16> {te.name = "grad.y"},
// CHECK-SAME:  %[[M:[^:]*]]: tensor<4xi32> {te.forward_arg = 1 : i64},
// CHECK-SAME:  %[[W:[^:]*]]: tensor<4x48x64xbf16> {te.forward_arg = 2 : i64},
// CHECK-SAME:  %[[X:[^:]*]]: tensor<32x64xbf16> {te.forward_arg = 0 : i64})
// CHECK-SAME:  -> (tensor<32x64xbf16> {te.grad_of = 0 : i64, te.name = "grad.x"}, tensor<4x48x64xbf16> {te.grad_of = 2 : i64, te.name = "grad.w"}, tensor<4x48xbf16> {te.grad_of = 3 : i64, te.name = "grad.b"})
// CHECK-NOT:  grad.m
// CHECK-NEXT: %[[DX:.*]] = te.grouped_matmul %[[DY]], %[[W]], %[[M]] {fp8_recipe = #delayed_scaling, role = #te.gemm_role<dgrad>} : (tensor<32x48xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>) -> tensor<32x64xbf16>
// CHECK-NEXT: %[[DW:.*]] = te.grouped_matmul %[[DY]], %[[X]], %[[M]] {fp8_recipe = #delayed_scaling, role = #te.gemm_role<wgrad>, transpose_a} : (tensor<32x48xbf16>, tensor<32x64xbf16>, tensor<4xi32>) -> tensor<4x48x64xbf16>
// CHECK-NEXT: %[[DB:.*]] = te.grouped_bias_grad %[[DY]], %[[M]] : (tensor<32x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16>
// CHECK-NEXT: return %[[DX]], %[[DW]], %[[DB]]
func.func @grouped(%x: tensor<32x64xbf16> {te.name = "x"}, %m: tensor<4xi32> {te.name = "m"}, %w: tensor<4x48x64xbf16> {te.name = "w"}, %b: tensor<4x48xbf16> {te.name = "b"}) -> (tensor<32x48xbf16> {te.name = "y"}) {
  %y = te.grouped_matmul %x, %w, %m bias(%b) {fp8_recipe = #te.delayed_scaling<amax_history_len = 4>, role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x64xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<32x48xbf16>
  return %y : tensor<32x48xbf16>
}

// b not transposed ([G, K, N]): dX reads it transposed, and dW is X^T dY
// per segment ([G, K, N] again).
// CHECK-LABEL: func.func @grouped_kn_backward(
// CHECK:      te.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} {role = #te.gemm_role<dgrad>, transpose_b} : (tensor<32x48xf32>, tensor<2x64x48xf32>, tensor<2xi32>) -> tensor<32x64xf32>
// CHECK-NEXT: te.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} {role = #te.gemm_role<wgrad>, transpose_a} : (tensor<32x64xf32>, tensor<32x48xf32>, tensor<2xi32>) -> tensor<2x64x48xf32>
// CHECK-NOT:  grouped_bias_grad
func.func @grouped_kn(%x: tensor<32x64xf32>, %m: tensor<2xi32>, %w: tensor<2x64x48xf32>) -> tensor<32x48xf32> {
  %y = te.grouped_matmul %x, %w, %m : (tensor<32x64xf32>, tensor<2x64x48xf32>, tensor<2xi32>) -> tensor<32x48xf32>
  return %y : tensor<32x48xf32>
}
