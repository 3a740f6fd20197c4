// RUN: te-opt %s --te-fuse --split-input-file | FileCheck %s

// LayerNorm + FP8 cast + transpose run as one kernel; the norm statistics
// and output stay available outside because others read them.
// CHECK-LABEL: func.func @norm_cast
// CHECK:      %[[K:.*]]:4 = te.fused "norm_cast"(%arg0, %arg1, %arg2, %arg3)
// CHECK:        te.layernorm_fwd
// CHECK-NEXT:   te.quantize
// CHECK-NEXT:   te.transpose
// CHECK-NEXT:   te.yield
// CHECK:      return %[[K]]#{{.*}}
func.func @norm_cast(%x: tensor<16x32xbf16>, %g: tensor<32xbf16>, %b: tensor<32xbf16>, %s: tensor<1xf32>) -> (tensor<16x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>, tensor<1xf32>, tensor<16xf32>) {
  %y, %mean, %rsigma = te.layernorm_fwd %x, %g, %b {eps = 1.0e-5 : f64} : (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<16xf32>, tensor<16xf32>)
  %q, %amax = te.quantize %y, %s : tensor<16x32xbf16>, tensor<1xf32> -> tensor<16x32xf8E4M3FN>, tensor<1xf32>
  %t = te.transpose %q : tensor<16x32xf8E4M3FN> -> tensor<32x16xf8E4M3FN>
  return %q, %t, %amax, %rsigma : tensor<16x32xf8E4M3FN>, tensor<32x16xf8E4M3FN>, tensor<1xf32>, tensor<16xf32>
}

// -----

// A plain GEMM takes its bias and GELU as cuBLASLt epilogues and keeps the
// pre-activation (aux) that backward reads.
// CHECK-LABEL: func.func @gemm_epilogue
// CHECK:      %[[K:.*]]:2 = te.fused "gemm"(%arg0, %arg1, %arg2)
// CHECK:        %[[MM:.*]] = te.matmul
// CHECK-NEXT:   %[[B:.*]] = te.bias_add %[[MM]]
// CHECK-NEXT:   %[[A:.*]] = te.act <gelu> %[[B]]
// CHECK-NEXT:   te.yield %[[B]], %[[A]]
func.func @gemm_epilogue(%a: tensor<16x32xbf16>, %w: tensor<64x32xbf16>, %bias: tensor<64xbf16>) -> (tensor<16x64xbf16>, tensor<16x64xbf16>) {
  %0 = te.matmul %a, %w {transpose_b} : tensor<16x32xbf16>, tensor<64x32xbf16> -> tensor<16x64xbf16>
  %1 = te.bias_add %0, %bias : tensor<16x64xbf16>, tensor<64xbf16> -> tensor<16x64xbf16>
  %2 = te.act <gelu> %1 : tensor<16x64xbf16> -> tensor<16x64xbf16>
  return %1, %2 : tensor<16x64xbf16>, tensor<16x64xbf16>
}

// -----

// An FP8 GEMM takes only its bias: GELU, the FP8 cast and its transpose run
// in one act_cast kernel over the bias-added output (the aux).
// CHECK-LABEL: func.func @fp8_gemm_gelu
// CHECK:      %[[G:.*]] = te.fused "gemm"(%arg0, %arg1, %arg2, %arg3)
// CHECK:        %[[MM:.*]] = te.scaled_matmul
// CHECK-NEXT:   %[[B:.*]] = te.bias_add %[[MM]]
// CHECK-NEXT:   te.yield %[[B]]
// CHECK:      te.fused "act_cast"(%[[G]], %arg2)
// CHECK:        te.act <gelu>
// CHECK-NEXT:   te.quantize
// CHECK-NEXT:   te.transpose
// CHECK-NEXT:   te.yield
func.func @fp8_gemm_gelu(%a: tensor<16x32xf8E4M3FN>, %w: tensor<64x32xf8E4M3FN>, %s: tensor<1xf32>, %bias: tensor<64xbf16>) -> (tensor<16x64xbf16>, tensor<16x64xf8E4M3FN>, tensor<64x16xf8E4M3FN>, tensor<1xf32>) {
  %0 = te.scaled_matmul %a, %w, %s, %s {fast_accum} : (tensor<16x32xf8E4M3FN>, tensor<64x32xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<16x64xbf16>
  %1 = te.bias_add %0, %bias : tensor<16x64xbf16>, tensor<64xbf16> -> tensor<16x64xbf16>
  %2 = te.act <gelu> %1 : tensor<16x64xbf16> -> tensor<16x64xbf16>
  %q, %amax = te.quantize %2, %s : tensor<16x64xbf16>, tensor<1xf32> -> tensor<16x64xf8E4M3FN>, tensor<1xf32>
  %t = te.transpose %q : tensor<16x64xf8E4M3FN> -> tensor<64x16xf8E4M3FN>
  return %1, %q, %t, %amax : tensor<16x64xbf16>, tensor<16x64xf8E4M3FN>, tensor<64x16xf8E4M3FN>, tensor<1xf32>
}

// -----

// Without the transpose (inference), an FP8 GEMM takes GELU too and writes
// FP8 directly.
// CHECK-LABEL: func.func @fp8_gemm_gelu_inference
// CHECK:      %[[K:.*]]:2 = te.fused "gemm"(%arg0, %arg1, %arg2, %arg3)
// CHECK:        %[[MM:.*]] = te.scaled_matmul
// CHECK-NEXT:   %[[B:.*]] = te.bias_add %[[MM]]
// CHECK-NEXT:   %[[A:.*]] = te.act <gelu> %[[B]]
// CHECK-NEXT:   %[[Q:.*]], %[[AM:.*]] = te.quantize %[[A]]
// CHECK-NEXT:   te.yield %[[Q]], %[[AM]]
func.func @fp8_gemm_gelu_inference(%a: tensor<16x32xf8E4M3FN>, %w: tensor<64x32xf8E4M3FN>, %s: tensor<1xf32>, %bias: tensor<64xbf16>) -> (tensor<16x64xf8E4M3FN>, tensor<1xf32>) {
  %0 = te.scaled_matmul %a, %w, %s, %s {fast_accum} : (tensor<16x32xf8E4M3FN>, tensor<64x32xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<16x64xbf16>
  %1 = te.bias_add %0, %bias : tensor<16x64xbf16>, tensor<64xbf16> -> tensor<16x64xbf16>
  %2 = te.act <gelu> %1 : tensor<16x64xbf16> -> tensor<16x64xbf16>
  %q, %amax = te.quantize %2, %s : tensor<16x64xbf16>, tensor<1xf32> -> tensor<16x64xf8E4M3FN>, tensor<1xf32>
  return %q, %amax : tensor<16x64xf8E4M3FN>, tensor<1xf32>
}

// -----

// A residual added to the bias-added product, its only use, is read by the
// GEMM as C (beta = 1) instead of by an add kernel of its own.
// CHECK-LABEL: func.func @fp8_gemm_bias_residual
// CHECK:      %[[K:.*]] = te.fused "gemm"(%arg0, %arg1, %arg2, %arg3, %arg4)
// CHECK:        %[[MM:.*]] = te.scaled_matmul
// CHECK-NEXT:   %[[B:.*]] = te.bias_add %[[MM]]
// CHECK-NEXT:   %[[R:.*]] = te.add %{{.*}}, %[[B]]
// CHECK-NEXT:   te.yield %[[R]]
// CHECK-NOT:  te.add
func.func @fp8_gemm_bias_residual(%a: tensor<16x32xf8E4M3FN>, %w: tensor<64x32xf8E4M3FN>, %s: tensor<1xf32>, %bias: tensor<64xbf16>, %x: tensor<16x64xbf16>) -> tensor<16x64xbf16> {
  %0 = te.scaled_matmul %a, %w, %s, %s {fast_accum} : (tensor<16x32xf8E4M3FN>, tensor<64x32xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<16x64xbf16>
  %1 = te.bias_add %0, %bias : tensor<16x64xbf16>, tensor<64xbf16> -> tensor<16x64xbf16>
  %2 = te.add %x, %1 : tensor<16x64xbf16>
  return %2 : tensor<16x64xbf16>
}

// -----

// The product is also returned (the backward reads it): the add stays a
// kernel of its own, the GEMM writes the product.
// CHECK-LABEL: func.func @gemm_product_kept
// CHECK:      %[[MM:.*]] = te.matmul
// CHECK-NEXT: te.add %arg2, %[[MM]]
func.func @gemm_product_kept(%a: tensor<16x32xbf16>, %w: tensor<64x32xbf16>, %x: tensor<16x64xbf16>) -> (tensor<16x64xbf16>, tensor<16x64xbf16>) {
  %0 = te.matmul %a, %w {transpose_b} : tensor<16x32xbf16>, tensor<64x32xbf16> -> tensor<16x64xbf16>
  %1 = te.add %x, %0 : tensor<16x64xbf16>
  return %0, %1 : tensor<16x64xbf16>, tensor<16x64xbf16>
}

// -----

// Backward: dGELU and the bias gradient are not GEMM epilogues (cuBLASLt
// runs them as a kernel of their own) but one generated kernel.
// CHECK-LABEL: func.func @gemm_dgelu_bgrad
// CHECK:      te.matmul
// CHECK-NEXT: te.fused "dact_dbias_cast"
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   te.dact <gelu>
// CHECK-NEXT:   te.bias_grad
func.func @gemm_dgelu_bgrad(%dy: tensor<16x32xbf16>, %w: tensor<32x64xbf16>, %aux: tensor<16x64xbf16>) -> (tensor<16x64xbf16>, tensor<64xbf16>) {
  %0 = te.matmul %dy, %w : tensor<16x32xbf16>, tensor<32x64xbf16> -> tensor<16x64xbf16>
  %1 = te.dact <gelu> %0, %aux : tensor<16x64xbf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>
  %2 = te.bias_grad %1 : tensor<16x64xbf16> -> tensor<64xbf16>
  return %1, %2 : tensor<16x64xbf16>, tensor<64xbf16>
}

// -----

// Behind an FP8 GEMM: dGELU, bias gradient, cast and transpose in one
// kernel.
// CHECK-LABEL: func.func @fp8_gemm_dgelu
// CHECK:      te.scaled_matmul
// CHECK-NEXT: te.fused "dact_dbias_cast"
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   te.dact <gelu>
// CHECK-NEXT:   te.bias_grad
// CHECK-NEXT:   te.quantize
// CHECK-NEXT:   te.transpose
func.func @fp8_gemm_dgelu(%dy: tensor<16x32xf8E5M2>, %w: tensor<64x32xf8E4M3FN>, %s: tensor<1xf32>, %aux: tensor<16x64xbf16>) -> (tensor<64xbf16>, tensor<16x64xf8E5M2>, tensor<64x16xf8E5M2>, tensor<1xf32>) {
  %0 = te.scaled_matmul %dy, %w, %s, %s : (tensor<16x32xf8E5M2>, tensor<64x32xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>) -> tensor<16x64xbf16>
  %1 = te.dact <gelu> %0, %aux : tensor<16x64xbf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>
  %2 = te.bias_grad %1 : tensor<16x64xbf16> -> tensor<64xbf16>
  %q, %amax = te.quantize %1, %s : tensor<16x64xbf16>, tensor<1xf32> -> tensor<16x64xf8E5M2>, tensor<1xf32>
  %t = te.transpose %q : tensor<16x64xf8E5M2> -> tensor<64x16xf8E5M2>
  return %2, %q, %t, %amax : tensor<64xbf16>, tensor<16x64xf8E5M2>, tensor<64x16xf8E5M2>, tensor<1xf32>
}

// -----

// The cast + transpose of a gradient takes in the residual add and the
// dropout backward before it and the bias gradient beside it; the sum stays
// available to its other reader.
// CHECK-LABEL: func.func @cast_transpose_producers
// CHECK:      %[[K:.*]]:5 = te.fused "cast_transpose"
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   %[[SUM:.*]] = te.add
// CHECK-NEXT:   %[[DX:.*]] = te.dropout %[[SUM]]
// CHECK-NEXT:   te.bias_grad %[[DX]]
// CHECK-NEXT:   te.quantize %[[DX]]
// CHECK-NEXT:   te.transpose
// CHECK-NEXT:   te.yield %[[SUM]]
// CHECK:      te.add %[[K]]#0
func.func @cast_transpose_producers(%dy: tensor<16x32xbf16>, %dr: tensor<16x32xbf16>, %rng: tensor<2xi64>, %s: tensor<1xf32>, %other: tensor<16x32xbf16>) -> (tensor<32xbf16>, tensor<16x32xf8E5M2>, tensor<32x16xf8E5M2>, tensor<1xf32>, tensor<16x32xbf16>) {
  %0 = te.add %dy, %dr : tensor<16x32xbf16>
  %1 = te.dropout %0, %rng {rate = 0.1 : f64, stream = 1 : i64} : tensor<16x32xbf16>, tensor<2xi64> -> tensor<16x32xbf16>
  %2 = te.bias_grad %1 : tensor<16x32xbf16> -> tensor<32xbf16>
  %q, %amax = te.quantize %1, %s : tensor<16x32xbf16>, tensor<1xf32> -> tensor<16x32xf8E5M2>, tensor<1xf32>
  %t = te.transpose %q : tensor<16x32xf8E5M2> -> tensor<32x16xf8E5M2>
  %3 = te.add %0, %other : tensor<16x32xbf16>
  return %2, %q, %t, %amax, %3 : tensor<32xbf16>, tensor<16x32xf8E5M2>, tensor<32x16xf8E5M2>, tensor<1xf32>, tensor<16x32xbf16>
}

// -----

// Other activations are not cuBLASLt epilogues: a dact + dbias + cast +
// transpose kernel.
// CHECK-LABEL: func.func @dact_dbias_cast
// CHECK:      te.matmul
// CHECK-NEXT: te.fused "dact_dbias_cast"
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   te.dact <swiglu>
// CHECK-NEXT:   te.bias_grad
// CHECK-NEXT:   te.quantize
// CHECK-NEXT:   te.transpose
func.func @dact_dbias_cast(%dy: tensor<16x32xbf16>, %w: tensor<32x32xbf16>, %x: tensor<16x64xbf16>, %s: tensor<1xf32>) -> (tensor<64xbf16>, tensor<16x64xf8E5M2>, tensor<64x16xf8E5M2>, tensor<1xf32>) {
  %0 = te.matmul %dy, %w : tensor<16x32xbf16>, tensor<32x32xbf16> -> tensor<16x32xbf16>
  %1 = te.dact <swiglu> %0, %x : tensor<16x32xbf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>
  %2 = te.bias_grad %1 : tensor<16x64xbf16> -> tensor<64xbf16>
  %q, %amax = te.quantize %1, %s : tensor<16x64xbf16>, tensor<1xf32> -> tensor<16x64xf8E5M2>, tensor<1xf32>
  %t = te.transpose %q : tensor<16x64xf8E5M2> -> tensor<64x16xf8E5M2>
  return %2, %q, %t, %amax : tensor<64xbf16>, tensor<16x64xf8E5M2>, tensor<64x16xf8E5M2>, tensor<1xf32>
}

// -----

// Under current scaling the cast needs the scale of the whole tensor, which
// the amax of the norm's output gives: fusing the cast would read the scale
// before it exists, so the norm kernel takes the amax instead.
// CHECK-LABEL: func.func @norm_amax
// CHECK:      %[[K:.*]]:2 = te.fused "norm_cast"
// CHECK:        te.rmsnorm_fwd
// CHECK-NEXT:   te.amax
// CHECK:      te.compute_scale %[[K]]#1
// CHECK:      te.quantize %[[K]]#0
func.func @norm_amax(%x: tensor<16x32xbf16>, %g: tensor<32xbf16>) -> tensor<16x32xf8E4M3FN> {
  %y, %rsigma = te.rmsnorm_fwd %x, %g {eps = 1.0e-5 : f64} : (tensor<16x32xbf16>, tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<16xf32>)
  %a = te.amax %y : tensor<16x32xbf16> -> tensor<1xf32>
  %s, %si = te.compute_scale %a {fp8_type = f8E4M3FN} : tensor<1xf32> -> tensor<1xf32>, tensor<1xf32>
  %q, %amax = te.quantize %y, %s : tensor<16x32xbf16>, tensor<1xf32> -> tensor<16x32xf8E4M3FN>, tensor<1xf32>
  return %q : tensor<16x32xf8E4M3FN>
}

// -----

// bias + dropout + residual add.
// CHECK-LABEL: func.func @bias_dropout_add
// CHECK:      te.fused "bias_dropout_add"
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   te.bias_add
// CHECK-NEXT:   te.dropout
// CHECK-NEXT:   te.add
func.func @bias_dropout_add(%x: tensor<16x32xbf16>, %b: tensor<32xbf16>, %res: tensor<16x32xbf16>, %rng: tensor<2xi64>) -> tensor<16x32xbf16> {
  %0 = te.bias_add %x, %b : tensor<16x32xbf16>, tensor<32xbf16> -> tensor<16x32xbf16>
  %1 = te.dropout %0, %rng {rate = 0.1 : f64, stream = 1 : i64} : tensor<16x32xbf16>, tensor<2xi64> -> tensor<16x32xbf16>
  %2 = te.add %res, %1 : tensor<16x32xbf16>
  return %2 : tensor<16x32xbf16>
}

// -----

// The residual connection's gradient is added to the norm's input gradient
// in the norm backward's kernel: dx itself never reaches memory.
// CHECK-LABEL: func.func @norm_bwd_add
// CHECK:      %[[K:.*]]:3 = te.fused "norm_bwd_add"(%arg0, %arg1, %arg2, %arg3, %arg4, %arg5)
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   %[[DX:.*]], %[[DG:.*]], %[[DB:.*]] = te.layernorm_bwd
// CHECK-NEXT:   %[[SUM:.*]] = te.add %{{.*}}, %[[DX]]
// CHECK-NEXT:   te.yield %[[DG]], %[[DB]], %[[SUM]]
// CHECK-NOT:  te.add
// CHECK:      return %[[K]]#2, %[[K]]#0, %[[K]]#1
func.func @norm_bwd_add(%dy: tensor<16x32xbf16>, %x: tensor<16x32xbf16>, %mean: tensor<16xf32>, %rsigma: tensor<16xf32>, %g: tensor<32xbf16>, %res: tensor<16x32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>) {
  %dx, %dg, %db = te.layernorm_bwd %dy, %x, %mean, %rsigma, %g : (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>)
  %0 = te.add %res, %dx : tensor<16x32xbf16>
  return %0, %dg, %db : tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>
}

// -----

// RMSNorm too, with dx as the add's first operand.
// CHECK-LABEL: func.func @rmsnorm_bwd_add
// CHECK:      te.fused "norm_bwd_add"
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   %[[DX:.*]], %{{.*}} = te.rmsnorm_bwd
// CHECK-NEXT:   te.add %[[DX]], %{{.*}}
func.func @rmsnorm_bwd_add(%dy: tensor<16x32xbf16>, %x: tensor<16x32xbf16>, %rsigma: tensor<16xf32>, %g: tensor<32xbf16>, %res: tensor<16x32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>) {
  %dx, %dg = te.rmsnorm_bwd %dy, %x, %rsigma, %g : (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16xf32>, tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>)
  %0 = te.add %dx, %res : tensor<16x32xbf16>
  return %0, %dg : tensor<16x32xbf16>, tensor<32xbf16>
}

// -----

// dx read by another op as well must be written anyway: the add stays a
// kernel of its own and the norm backward is not fused.
// CHECK-LABEL: func.func @norm_bwd_dx_read_twice
// CHECK-NOT:  te.fused
// CHECK:      %[[DX:.*]], %{{.*}}, %{{.*}} = te.layernorm_bwd
// CHECK-NEXT: te.add %{{.*}}, %[[DX]]
// CHECK-NEXT: te.bias_grad %[[DX]]
// CHECK-NOT:  te.fused
func.func @norm_bwd_dx_read_twice(%dy: tensor<16x32xbf16>, %x: tensor<16x32xbf16>, %mean: tensor<16xf32>, %rsigma: tensor<16xf32>, %g: tensor<32xbf16>, %res: tensor<16x32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<32xbf16>) {
  %dx, %dg, %db = te.layernorm_bwd %dy, %x, %mean, %rsigma, %g : (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>)
  %0 = te.add %res, %dx : tensor<16x32xbf16>
  %1 = te.bias_grad %dx : tensor<16x32xbf16> -> tensor<32xbf16>
  return %0, %dg, %db, %1 : tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<32xbf16>
}

// -----

// Before the cast of dropout's gradient, the norm backward takes the add:
// the sum is written once from the norm kernel (instead of dx, read back
// by the cast kernel with the residual gradient), and the cast reads it.
// CHECK-LABEL: func.func @norm_bwd_add_before_cast
// CHECK:      %[[N:.*]]:3 = te.fused "norm_bwd_add"
// CHECK:        te.layernorm_bwd
// CHECK-NEXT:   te.add
// CHECK-NEXT:   te.yield
// CHECK:      te.fused "cast_transpose"(%[[N]]#2, %arg6, %arg7)
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   te.dropout
// CHECK-NEXT:   te.quantize
// CHECK-NEXT:   te.transpose
func.func @norm_bwd_add_before_cast(%dy: tensor<16x32xbf16>, %x: tensor<16x32xbf16>, %mean: tensor<16xf32>, %rsigma: tensor<16xf32>, %g: tensor<32xbf16>, %res: tensor<16x32xbf16>, %rng: tensor<2xi64>, %s: tensor<1xf32>) -> (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<16x32xf8E5M2>, tensor<32x16xf8E5M2>, tensor<1xf32>) {
  %dx, %dg, %db = te.layernorm_bwd %dy, %x, %mean, %rsigma, %g : (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<16xf32>, tensor<16xf32>, tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>)
  %0 = te.add %res, %dx : tensor<16x32xbf16>
  %1 = te.dropout %0, %rng {rate = 0.1 : f64, stream = 1 : i64} : tensor<16x32xbf16>, tensor<2xi64> -> tensor<16x32xbf16>
  %q, %amax = te.quantize %1, %s : tensor<16x32xbf16>, tensor<1xf32> -> tensor<16x32xf8E5M2>, tensor<1xf32>
  %t = te.transpose %q : tensor<16x32xf8E5M2> -> tensor<32x16xf8E5M2>
  return %0, %dg, %db, %q, %t, %amax : tensor<16x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, tensor<16x32xf8E5M2>, tensor<32x16xf8E5M2>, tensor<1xf32>
}

// -----

// FP8 attention's output: the reshape to [tokens, hidden] moves to the FP8
// value, and the dequantization joins the cast and transpose for the next
// GEMM.
// CHECK-LABEL: func.func @dequantize_reshape_cast
// CHECK:      %[[R:.*]] = te.reshape %arg0 : tensor<4x2x2x16xf8E4M3FN> -> tensor<8x32xf8E4M3FN>
// CHECK-NEXT: te.fused "cast_transpose"(%[[R]], %arg1, %arg2)
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   te.dequantize {{.*}} -> tensor<8x32xbf16>
// CHECK-NEXT:   te.quantize
// CHECK-NEXT:   te.transpose
// CHECK-NEXT:   te.yield
func.func @dequantize_reshape_cast(%o8: tensor<4x2x2x16xf8E4M3FN>, %si: tensor<1xf32>, %s: tensor<1xf32>) -> (tensor<8x32xf8E4M3FN>, tensor<32x8xf8E4M3FN>, tensor<1xf32>) {
  %o = te.dequantize %o8, %si : tensor<4x2x2x16xf8E4M3FN>, tensor<1xf32> -> tensor<4x2x2x16xbf16>
  %x = te.reshape %o : tensor<4x2x2x16xbf16> -> tensor<8x32xbf16>
  %q, %amax = te.quantize %x, %s : tensor<8x32xbf16>, tensor<1xf32> -> tensor<8x32xf8E4M3FN>, tensor<1xf32>
  %t = te.transpose %q : tensor<8x32xf8E4M3FN> -> tensor<32x8xf8E4M3FN>
  return %q, %t, %amax : tensor<8x32xf8E4M3FN>, tensor<32x8xf8E4M3FN>, tensor<1xf32>
}

// -----

// A dequantized value that is also returned keeps its shape; the cast's
// kernel writes it too.
// CHECK-LABEL: func.func @dequantize_read_twice
// CHECK:      %[[K:.*]]:3 = te.fused "cast_transpose"(%arg0, %arg1, %arg2)
// CHECK-NEXT: ^bb0
// CHECK-NEXT:   %[[D:.*]] = te.dequantize {{.*}} -> tensor<4x2x2x16xbf16>
// CHECK-NEXT:   %[[Q:.*]], %[[A:.*]] = te.quantize %[[D]]
// CHECK-NEXT:   te.yield %[[D]], %[[Q]], %[[A]]
// CHECK:      te.reshape %[[K]]#0 : tensor<4x2x2x16xbf16> -> tensor<8x32xbf16>
func.func @dequantize_read_twice(%o8: tensor<4x2x2x16xf8E4M3FN>, %si: tensor<1xf32>, %s: tensor<1xf32>) -> (tensor<4x2x2x16xf8E5M2>, tensor<1xf32>, tensor<8x32xbf16>) {
  %o = te.dequantize %o8, %si : tensor<4x2x2x16xf8E4M3FN>, tensor<1xf32> -> tensor<4x2x2x16xbf16>
  %q, %amax = te.quantize %o, %s : tensor<4x2x2x16xbf16>, tensor<1xf32> -> tensor<4x2x2x16xf8E5M2>, tensor<1xf32>
  %x = te.reshape %o : tensor<4x2x2x16xbf16> -> tensor<8x32xbf16>
  return %q, %amax, %x : tensor<4x2x2x16xf8E5M2>, tensor<1xf32>, tensor<8x32xbf16>
}
