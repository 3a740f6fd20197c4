// RUN: te-opt %s --te-autodiff | FileCheck %s

// A Linear: dgrad dX = dY W, wgrad dW = dY^T X, dbias = sum(dY). X and W are
// forward arguments; nothing needs saving.
// CHECK-LABEL: func.func @linear(
// CHECK-SAME:  -> (tensor<8x16xbf16> {te.name = "y"})
// CHECK-LABEL: func.func @linear_backward(
// CHECK-SAME:  %[[DY:.*]]: tensor<8x16xbf16> {te.name = "grad.y"},
// CHECK-SAME:  %[[W:.*]]: tensor<16x32xbf16> {te.forward_arg = 1 : i64},
// CHECK-SAME:  %[[X:.*]]: tensor<8x32xbf16> {te.forward_arg = 0 : i64})
// CHECK-SAME:  -> (tensor<8x32xbf16> {te.grad_of = 0 : i64, te.name = "grad.x"}, tensor<16x32xbf16> {te.grad_of = 1 : i64, te.name = "grad.w"}, tensor<16xbf16> {te.grad_of = 2 : i64, te.name = "grad.b"})
// CHECK-SAME:  attributes {te.backward_of = @linear}
// CHECK-NEXT: %[[DB:.*]] = te.bias_grad %[[DY]] : tensor<8x16xbf16> -> tensor<16xbf16>
// CHECK-NEXT: %[[DX:.*]] = te.matmul %[[DY]], %[[W]] {role = #te.gemm_role<dgrad>} : tensor<8x16xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
// CHECK-NEXT: %[[DW:.*]] = te.matmul %[[DY]], %[[X]] {role = #te.gemm_role<wgrad>, transpose_a} : tensor<8x16xbf16>, tensor<8x32xbf16> -> tensor<16x32xbf16>
// CHECK-NEXT: return %[[DX]], %[[DW]], %[[DB]]
func.func @linear(%x: tensor<8x32xbf16> {te.name = "x"}, %w: tensor<16x32xbf16> {te.name = "w"}, %b: tensor<16xbf16> {te.name = "b"}) -> (tensor<8x16xbf16> {te.name = "y"}) {
  %0 = te.matmul %x, %w {transpose_b} : tensor<8x32xbf16>, tensor<16x32xbf16> -> tensor<8x16xbf16>
  %1 = te.bias_add %0, %b : tensor<8x16xbf16>, tensor<16xbf16> -> tensor<8x16xbf16>
  return %1 : tensor<8x16xbf16>
}

// The activation's input is saved (an extra forward result); its gradient
// flows into both uses of %x, which add up.
// CHECK-LABEL: func.func @saved_activation(
// CHECK-SAME:  -> (tensor<8x32xf32> {te.name = "y"}, tensor<8x64xf32> {te.name = "saved.0"})
// CHECK:      return %{{.*}}, %[[FC1:.*]] : tensor<8x32xf32>, tensor<8x64xf32>
// CHECK-LABEL: func.func @saved_activation_backward(
// CHECK-SAME:  %[[DY:[^:]*]]: tensor<8x32xf32> {te.name = "grad.y"}
// CHECK-SAME:  %[[SAVED:[^:]*]]: tensor<8x64xf32> {te.forward_result = 1 : i64}
// CHECK:      te.dact <swiglu> %{{.*}}, %[[SAVED]] : tensor<8x32xf32>, tensor<8x64xf32> -> tensor<8x64xf32>
// CHECK:      %[[SUM:.*]] = te.add %[[DY]], %{{.*}} : tensor<8x32xf32>
// CHECK:      return %[[SUM]], %{{.*}} : tensor<8x32xf32>, tensor<64x32xf32>
func.func @saved_activation(%x: tensor<8x32xf32> {te.name = "x"}, %w: tensor<64x32xf32> {te.name = "w"}) -> (tensor<8x32xf32> {te.name = "y"}) {
  %0 = te.matmul %x, %w {transpose_b} : tensor<8x32xf32>, tensor<64x32xf32> -> tensor<8x64xf32>
  %1 = te.act <swiglu> %0 : tensor<8x64xf32> -> tensor<8x32xf32>
  %2 = te.add %x, %1 : tensor<8x32xf32>
  return %2 : tensor<8x32xf32>
}

// te.dact takes te.act's activation and clamped_swiglu parameters.
// CHECK-LABEL: func.func @clamped_swiglu_backward(
// CHECK:      te.dact <clamped_swiglu> %{{.*}}, %{{.*}} {activation_limit = 7.500000e-01 : f64, glu_linear_offset = 0.000000e+00 : f64} : tensor<8x32xf32>, tensor<8x64xf32> -> tensor<8x64xf32>
func.func @clamped_swiglu(%x: tensor<8x32xf32> {te.name = "x"}, %w: tensor<64x32xf32> {te.name = "w"}) -> (tensor<8x32xf32> {te.name = "y"}) {
  %0 = te.matmul %x, %w {transpose_b} : tensor<8x32xf32>, tensor<64x32xf32> -> tensor<8x64xf32>
  %1 = te.act <clamped_swiglu> %0 {activation_limit = 0.75 : f64, glu_linear_offset = 0.0 : f64} : tensor<8x64xf32> -> tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// Gradients of the slices of a fused projection are concatenated; views of
// available values (the slices of argument %x) are recomputed in the
// backward function, while the product %0 is saved.
// CHECK-LABEL: func.func @slices(
// CHECK-SAME:  -> (tensor<8x16xf32> {te.name = "y"}, tensor<8x8xf32> {te.name = "saved.0"})
// CHECK-LABEL: func.func @slices_backward(
// CHECK-SAME:  %[[X:[^:]*]]: tensor<8x32xf32> {te.forward_arg = 0 : i64}
// CHECK-SAME:  %[[P:[^:]*]]: tensor<8x8xf32> {te.forward_result = 1 : i64}
// CHECK:      %[[A:.*]] = te.slice %[[X]][0] : tensor<8x32xf32> -> tensor<8x16xf32>
// CHECK:      te.matmul %[[P]], %{{.*}} {role = #te.gemm_role<wgrad>, transpose_a}
// CHECK:      te.slice %[[X]][16]
// CHECK:      %[[DX:.*]] = te.concat %{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x32xf32>
// CHECK-NEXT: return %[[DX]]
func.func @slices(%x: tensor<8x32xf32> {te.name = "x"}) -> (tensor<8x16xf32> {te.name = "y"}) {
  %a = te.slice %x[0] : tensor<8x32xf32> -> tensor<8x16xf32>
  %b = te.slice %x[16] : tensor<8x32xf32> -> tensor<8x16xf32>
  %0 = te.matmul %a, %b {transpose_b} : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x8xf32>
  %1 = te.matmul %0, %a : tensor<8x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// Norm statistics are saved for the backward ops; dropout saves no mask,
// only the RNG state its backward draws the same mask from again.
// CHECK-LABEL: func.func @norm_dropout(
// CHECK-SAME:  -> (tensor<8x32xbf16> {te.name = "y"}, tensor<2xi64> {te.name = "saved.0"}, tensor<8xf32> {te.name = "saved.1"})
// CHECK-LABEL: func.func @norm_dropout_backward(
// CHECK-SAME:  %[[RNG:[^:]*]]: tensor<2xi64> {te.forward_result = 1 : i64}
// CHECK:      te.dropout %{{.*}}, %[[RNG]] {rate = 2.500000e-01 : f64, stream = 3 : i64}
// CHECK:      te.rmsnorm_bwd
// CHECK:      return %{{.*}}, %{{.*}} : tensor<8x32xbf16>, tensor<32xbf16>
func.func @norm_dropout(%x: tensor<8x32xbf16> {te.name = "x"}, %g: tensor<32xbf16> {te.name = "g"}, %rng: tensor<2xi64> {te.name = "rng_state"}) -> (tensor<8x32xbf16> {te.name = "y"}) {
  %y, %rsigma = te.rmsnorm_fwd %x, %g {eps = 1.0e-5 : f64} : (tensor<8x32xbf16>, tensor<32xbf16>) -> (tensor<8x32xbf16>, tensor<8xf32>)
  %d = te.dropout %y, %rng {rate = 0.25 : f64, stream = 3 : i64} : tensor<8x32xbf16>, tensor<2xi64> -> tensor<8x32xbf16>
  return %d : tensor<8x32xbf16>
}

// Attention returned (reshaped) by the forward: the backward reads that
// result and reshapes it back; only the softmax statistics are saved.
// CHECK-LABEL: func.func @attention_output_read_back(
// CHECK-SAME:  -> (tensor<2x4x32xbf16> {te.name = "o"}, tensor<2x4x4xf32> {te.name = "saved.0"})
// CHECK:      %[[O:.*]], %[[LSE:.*]] = te.attention
// CHECK:      %[[FLAT:.*]] = te.reshape %[[O]]
// CHECK:      return %[[FLAT]], %[[LSE]]
// CHECK-LABEL: func.func @attention_output_read_back_backward(
// CHECK-SAME:  %[[DO:[^:]*]]: tensor<2x4x32xbf16> {te.name = "grad.o"}
// CHECK-SAME:  %[[OUT:[^:]*]]: tensor<2x4x32xbf16> {te.forward_result = 0 : i64}
// CHECK-SAME:  %[[STATS:[^:]*]]: tensor<2x4x4xf32> {te.forward_result = 1 : i64}
// CHECK:      %[[O4:.*]] = te.reshape %[[OUT]] : tensor<2x4x32xbf16> -> tensor<2x4x4x8xbf16>
// CHECK:      te.attention_bwd %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[O4]], %[[STATS]]
func.func @attention_output_read_back(%q: tensor<2x4x4x8xbf16> {te.name = "q"}, %k: tensor<2x4x4x8xbf16> {te.name = "k"}, %v: tensor<2x4x4x8xbf16> {te.name = "v"}) -> (tensor<2x4x32xbf16> {te.name = "o"}) {
  %o, %lse = te.attention %q, %k, %v {attn_mask_type = #te.attn_mask_type<no_mask>, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.125 : f64} : (tensor<2x4x4x8xbf16>, tensor<2x4x4x8xbf16>, tensor<2x4x4x8xbf16>) -> (tensor<2x4x4x8xbf16>, tensor<2x4x4xf32>)
  %flat = te.reshape %o : tensor<2x4x4x8xbf16> -> tensor<2x4x32xbf16>
  return %flat : tensor<2x4x32xbf16>
}

// Cross-attention with padded queries: the backward takes the key mask,
// the query mask and pad_keys_only as the forward did.
// CHECK-LABEL: func.func @attention_padded_queries_backward(
// CHECK:      te.attention_bwd {{.*}} mask(%{{.*}}) query_mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<padding>, pad_keys_only,
func.func @attention_padded_queries(%q: tensor<2x6x4x8xbf16> {te.name = "q"}, %k: tensor<2x6x4x8xbf16> {te.name = "k"}, %v: tensor<2x6x4x8xbf16> {te.name = "v"}, %m: tensor<2x1x1x6xi1> {te.name = "mask"}, %qm: tensor<2x1x1x6xi1> {te.name = "query_mask"}) -> (tensor<2x6x4x8xbf16> {te.name = "o"}) {
  %o, %lse = te.attention %q, %k, %v mask(%m) query_mask(%qm) {attn_mask_type = #te.attn_mask_type<padding>, pad_keys_only, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.125 : f64} : (tensor<2x6x4x8xbf16>, tensor<2x6x4x8xbf16>, tensor<2x6x4x8xbf16>, tensor<2x1x1x6xi1>, tensor<2x1x1x6xi1>) -> (tensor<2x6x4x8xbf16>, tensor<2x4x6xf32>)
  return %o : tensor<2x6x4x8xbf16>
}
