// RUN: te-opt %s --te-autodiff --te-place-scaling --te-split-wgrad | FileCheck %s
// RUN: te-opt %s --te-autodiff '--te-place-scaling=recipe=none' --te-split-wgrad | FileCheck %s --check-prefix=NONE
// RUN: sed 's/te.delay_wgrad, //' %s | te-opt --te-autodiff --te-place-scaling --te-split-wgrad | FileCheck %s --check-prefix=UNMARKED

#ds = #te.delayed_scaling<amax_history_len = 4>

// A Linear with bias whose weight delays its gradient (delay_wgrad_compute).
func.func @linear(%x: tensor<16x32xbf16> {te.name = "x"},
                  %w: tensor<48x32xbf16> {te.delay_wgrad, te.name = "w", te.parameter},
                  %b: tensor<48xbf16> {te.name = "b", te.parameter})
    -> (tensor<16x48xbf16> {te.name = "y"}) {
  %0 = te.matmul %x, %w {fp8_recipe = #ds, role = #te.gemm_role<fprop>, transpose_b} : tensor<16x32xbf16>, tensor<48x32xbf16> -> tensor<16x48xbf16>
  %1 = te.bias_add %0, %b : tensor<16x48xbf16>, tensor<48xbf16> -> tensor<16x48xbf16>
  return %1 : tensor<16x48xbf16>
}

// The backward keeps dgrad, the bias gradient and dY's cast with its
// transpose, and returns the transpose and dY's scale_inv slot as it was
// before the scale update (deferred.0, deferred.1) in place of dW.
// CHECK-LABEL: func.func @linear_backward(
// CHECK-SAME:  %[[DY:[^:]*]]: tensor<16x48xbf16> {te.name = "grad.y"}
// CHECK-SAME:  %[[BWD_SI:[^:]*]]: tensor<1xf32> {te.name = "fp8_meta.bwd.scale_inv"}
// CHECK-SAME:  -> (tensor<16x32xbf16> {te.grad_of = 0 : i64, te.name = "grad.x"}, tensor<48xbf16> {te.grad_of = 2 : i64, te.name = "grad.b"},
// CHECK-SAME:  tensor<48x16xf8E5M2> {te.name = "deferred.0"}, tensor<1xf32> {te.name = "deferred.1"})
// CHECK:      %[[DB:.*]] = te.bias_grad %[[DY]]
// CHECK:      %[[QDY:.*]], %{{.*}} = te.quantize %[[DY]]
// CHECK-NEXT: %[[QDYT:.*]] = te.transpose %[[QDY]]
// CHECK-NEXT: %[[DSI:.*]] = te.slice %[[BWD_SI]][0]
// CHECK-NEXT: %[[DX:.*]] = te.scaled_matmul %[[QDY]]
// CHECK-NOT:  te.scaled_matmul
// CHECK:      te.delayed_scaling_update
// CHECK-NEXT: return %[[DX]], %[[DB]], {{.*}}, %[[QDYT]], %[[DSI]] :

// The wgrad function reads the deferred values and the forward's saved x^T
// and its scale_inv directly (te.forward_result).
// CHECK-LABEL: func.func @linear_backward_wgrad(
// CHECK-SAME:  %[[A:[^:]*]]: tensor<48x16xf8E5M2> {te.backward_result = 5 : i64, te.name = "deferred.0"}
// CHECK-SAME:  %[[XT:[^:]*]]: tensor<32x16xf8E4M3FN> {te.forward_result = 6 : i64}
// CHECK-SAME:  %[[ASI:[^:]*]]: tensor<1xf32> {te.backward_result = 6 : i64, te.name = "deferred.1"}
// CHECK-SAME:  %[[XSI:[^:]*]]: tensor<1xf32> {te.forward_result = 7 : i64}
// CHECK-SAME:  -> (tensor<48x32xbf16> {te.grad_of = 1 : i64, te.name = "grad.w"})
// CHECK-SAME:  attributes {te.wgrad_of = @linear_backward}
// CHECK-NEXT: %[[DW:.*]] = te.scaled_matmul %[[A]], %[[XT]], %[[ASI]], %[[XSI]]
// CHECK-NEXT: return %[[DW]]

// High precision: the wgrad GEMM reads the output gradient (the backward's
// argument) and x (the forward's) itself; nothing is deferred.
// NONE-LABEL: func.func @linear_backward(
// NONE-SAME:  -> (tensor<16x32xbf16> {te.grad_of = 0 : i64, te.name = "grad.x"}, tensor<48xbf16> {te.grad_of = 2 : i64, te.name = "grad.b"})
// NONE-LABEL: func.func @linear_backward_wgrad(
// NONE-SAME:  %[[DY:[^:]*]]: tensor<16x48xbf16> {te.backward_arg = 0 : i64, te.name = "grad.y"}
// NONE-SAME:  %[[X:[^:]*]]: tensor<16x32xbf16> {te.forward_arg = 0 : i64}
// NONE-NEXT:  %[[DW:.*]] = te.matmul %[[DY]], %[[X]] {role = #te.gemm_role<wgrad>, transpose_a}
// NONE-NEXT:  return %[[DW]]

// Unmarked weights: no split.
// UNMARKED-LABEL: func.func @linear_backward(
// UNMARKED-SAME:  tensor<48x32xbf16> {te.grad_of = 1 : i64, te.name = "grad.w"}
// UNMARKED-NOT:   _wgrad
