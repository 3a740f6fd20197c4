// RUN: te-opt %s --te-fuse --split-input-file | FileCheck %s
// RUN: te-compile %examples/grouped_linear_small.yaml --emit=fused --recipe=current | FileCheck %s --check-prefix=PIPELINE

// GroupedLinear's kernels (docs/grouped-linear.md). A tensor's per-group
// cast and its transposed cast with the same scales and segments are one
// "grouped_quantize" kernel (it reads the tensor once), for the row
// segments of an activation as for stacked weights. The grouped GEMM stays
// outside te.fused (a library call, as te.scaled_matmul), and so do the
// reads of meta slots.
// CHECK-LABEL: func.func @row_and_transposed_casts
// CHECK:      %[[S:.*]] = te.slice %arg3[0]
// CHECK-NEXT: %[[X:.*]]:3 = te.fused "grouped_quantize"(%arg0, %[[S]], %arg1)
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_quantize %{{.*}}, %{{.*}}, %{{.*}} :
// CHECK-NEXT:   te.grouped_quantize %{{.*}}, %{{.*}}, %{{.*}} {transpose} :
// CHECK-NEXT:   te.yield
// CHECK:      %[[W:.*]]:3 = te.fused "grouped_quantize"(%arg2, %{{.*}})
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_quantize
// CHECK-NEXT:   te.grouped_quantize {{.*}} {transpose}
// CHECK-NEXT:   te.yield
// CHECK-NOT:  te.fused
// CHECK:      %[[Y:.*]] = te.grouped_scaled_matmul %[[X]]#0, %[[W]]#0, %{{.*}}, %{{.*}}, %arg1 bias(%arg4) {fast_accum}
// CHECK-NEXT: te.concat %[[X]]#1, %[[W]]#1
// CHECK:      return %[[Y]], %{{.*}}, %[[W]]#2, %[[X]]#2
func.func @row_and_transposed_casts(%x: tensor<32x64xbf16>, %m: tensor<4xi32>, %w: tensor<4x48x64xbf16>, %scale: tensor<8xf32>, %b: tensor<4x48xbf16>) -> (tensor<32x48xbf16>, tensor<8xf32>, tensor<4x64x48xf8E4M3FN>, tensor<64x32xf8E4M3FN>) {
  %0 = te.slice %scale[0] : tensor<8xf32> -> tensor<4xf32>
  %qx, %ax = te.grouped_quantize %x, %0, %m : (tensor<32x64xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<4xf32>)
  %qxt, %axt = te.grouped_quantize %x, %0, %m {transpose} : (tensor<32x64xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  %1 = te.slice %scale[4] : tensor<8xf32> -> tensor<4xf32>
  %qw, %aw = te.grouped_quantize %w, %1 : (tensor<4x48x64xbf16>, tensor<4xf32>) -> (tensor<4x48x64xf8E4M3FN>, tensor<4xf32>)
  %qwt, %awt = te.grouped_quantize %w, %1 {transpose} : (tensor<4x48x64xbf16>, tensor<4xf32>) -> (tensor<4x64x48xf8E4M3FN>, tensor<4xf32>)
  %y = te.grouped_scaled_matmul %qx, %qw, %0, %1, %m bias(%b) {fast_accum} : (tensor<32x64xf8E4M3FN>, tensor<4x48x64xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<32x48xbf16>
  %amaxes = te.concat %ax, %aw : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
  return %y, %amaxes, %qwt, %qxt : tensor<32x48xbf16>, tensor<8xf32>, tensor<4x64x48xf8E4M3FN>, tensor<64x32xf8E4M3FN>
}

// -----

// Casts of one tensor with other scales (or other segments) are kernels of
// their own; so is a lone cast (inference reads no transposed copy).
// CHECK-LABEL: func.func @other_scales
// CHECK:      te.fused "grouped_quantize"(%arg0, %arg2, %arg1) : {{.*}} -> tensor<32x64xf8E4M3FN> {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_quantize
// CHECK-NEXT:   te.yield
// CHECK:      te.fused "grouped_quantize"(%arg0, %arg3, %arg1) : {{.*}} -> tensor<64x32xf8E4M3FN> {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_quantize {{.*}} {transpose}
// CHECK-NEXT:   te.yield
// CHECK:      te.fused "grouped_quantize"(%arg0, %arg2, %arg4) : {{.*}} -> tensor<64x32xf8E4M3FN> {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_quantize {{.*}} {transpose}
// CHECK-NEXT:   te.yield
func.func @other_scales(%x: tensor<32x64xbf16>, %m: tensor<4xi32>, %s1: tensor<4xf32>, %s2: tensor<4xf32>, %m2: tensor<4xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<64x32xf8E4M3FN>, tensor<64x32xf8E4M3FN>) {
  %q, %a = te.grouped_quantize %x, %s1, %m : (tensor<32x64xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<4xf32>)
  %qt, %at = te.grouped_quantize %x, %s2, %m {transpose} : (tensor<32x64xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  %qt2, %at2 = te.grouped_quantize %x, %s1, %m2 {transpose} : (tensor<32x64xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  return %q, %qt, %qt2 : tensor<32x64xf8E4M3FN>, tensor<64x32xf8E4M3FN>, tensor<64x32xf8E4M3FN>
}

// -----

// Float8BlockScaling: the block casts of one tensor in the same groups (same
// m_splits, or both stacked) are one "grouped_block_quantize" kernel that
// reads it once; a cast of it in other segments is a kernel of its own.
// CHECK-LABEL: func.func @block_casts
// CHECK:      %[[X:.*]]:4 = te.fused "grouped_block_quantize"(%arg0, %arg1) : {{.*}} -> (tensor<32x64xf8E4M3FN>, tensor<1x32xf32>, tensor<64x32xf8E4M3FN>, tensor<5x64xf32>) {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_block_quantize %{{.*}}, %{{.*}} {block_dim = 1 : i64} :
// CHECK-NEXT:   te.grouped_block_quantize %{{.*}}, %{{.*}} {block_dim = 1 : i64, transpose} :
// CHECK-NEXT:   te.yield
// CHECK:      %[[X2:.*]] = te.fused "grouped_block_quantize"(%arg0, %arg2) : {{.*}} -> tensor<64x32xf8E4M3FN> {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_block_quantize {{.*}} transpose
// CHECK-NEXT:   te.yield
// CHECK:      %[[W:.*]]:4 = te.fused "grouped_block_quantize"(%arg3) : {{.*}} -> (tensor<4x48x64xf8E4M3FN>, tensor<4x1x4xf32>, tensor<4x64x48xf8E4M3FN>, tensor<4x1x4xf32>) {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_block_quantize %{{.*}} {block_dim = 2 : i64} :
// CHECK-NEXT:   te.grouped_block_quantize %{{.*}} {block_dim = 2 : i64, transpose} :
// CHECK-NEXT:   te.yield
// CHECK-NOT:  te.fused
// CHECK:      %[[Y:.*]] = te.grouped_scaled_matmul %[[X]]#0, %[[W]]#0, %[[X]]#1, %[[W]]#1, %arg1 :
// CHECK-NEXT: return %[[Y]], %[[X]]#2, %[[X]]#3, %[[X2]], %[[W]]#2, %[[W]]#3
func.func @block_casts(%x: tensor<32x64xbf16>, %m: tensor<4xi32>, %m2: tensor<4xi32>, %w: tensor<4x48x64xbf16>) -> (tensor<32x48xbf16>, tensor<64x32xf8E4M3FN>, tensor<5x64xf32>, tensor<64x32xf8E4M3FN>, tensor<4x64x48xf8E4M3FN>, tensor<4x1x4xf32>) {
  %qx, %sx = te.grouped_block_quantize %x, %m {block_dim = 1 : i64} : (tensor<32x64xbf16>, tensor<4xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<1x32xf32>)
  %qxt, %sxt = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, transpose} : (tensor<32x64xbf16>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<5x64xf32>)
  %qxt2, %sxt2 = te.grouped_block_quantize %x, %m2 {block_dim = 1 : i64, transpose} : (tensor<32x64xbf16>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<5x64xf32>)
  %qw, %sw = te.grouped_block_quantize %w {block_dim = 2 : i64} : (tensor<4x48x64xbf16>) -> (tensor<4x48x64xf8E4M3FN>, tensor<4x1x4xf32>)
  %qwt, %swt = te.grouped_block_quantize %w {block_dim = 2 : i64, transpose} : (tensor<4x48x64xbf16>) -> (tensor<4x64x48xf8E4M3FN>, tensor<4x1x4xf32>)
  %y = te.grouped_scaled_matmul %qx, %qw, %sx, %sw, %m : (tensor<32x64xf8E4M3FN>, tensor<4x48x64xf8E4M3FN>, tensor<1x32xf32>, tensor<4x1x4xf32>, tensor<4xi32>) -> tensor<32x48xbf16>
  return %y, %qxt, %sxt, %qxt2, %qwt, %swt : tensor<32x48xbf16>, tensor<64x32xf8E4M3FN>, tensor<5x64xf32>, tensor<64x32xf8E4M3FN>, tensor<4x64x48xf8E4M3FN>, tensor<4x1x4xf32>
}

// -----

// Current scaling's per-group amax and the bias gradient are kernels of
// their own; te.compute_scale on the [G] vector stays a kernel outside
// te.fused, as for per-tensor scales.
// CHECK-LABEL: func.func @amax_and_bias_grad
// CHECK:      %[[A:.*]] = te.fused "grouped_amax"(%arg0, %arg1) : (tensor<32x48xbf16>, tensor<4xi32>) -> tensor<4xf32> {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_amax
// CHECK-NEXT:   te.yield
// CHECK:      %[[S:.*]], %{{.*}} = te.compute_scale %[[A]]
// CHECK:      te.fused "grouped_quantize"(%arg0, %[[S]], %arg1)
// CHECK:      te.fused "grouped_bias_grad"(%arg0, %arg1) : (tensor<32x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16> {
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   te.grouped_bias_grad
// CHECK-NEXT:   te.yield
func.func @amax_and_bias_grad(%dy: tensor<32x48xbf16>, %m: tensor<4xi32>) -> (tensor<32x48xf8E5M2>, tensor<48x32xf8E5M2>, tensor<4xf32>, tensor<4x48xbf16>) {
  %a = te.grouped_amax %dy, %m : (tensor<32x48xbf16>, tensor<4xi32>) -> tensor<4xf32>
  %s, %si = te.compute_scale %a {fp8_type = f8E5M2} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
  %q, %qa = te.grouped_quantize %dy, %s, %m : (tensor<32x48xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<32x48xf8E5M2>, tensor<4xf32>)
  %qt, %qta = te.grouped_quantize %dy, %s, %m {transpose} : (tensor<32x48xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<48x32xf8E5M2>, tensor<4xf32>)
  %db = te.grouped_bias_grad %dy, %m : (tensor<32x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16>
  return %q, %qt, %si, %db : tensor<32x48xf8E5M2>, tensor<48x32xf8E5M2>, tensor<4xf32>, tensor<4x48xbf16>
}

// fuse_wgrad_accumulation: a wgrad GEMM (contraction form) whose only use
// adds a main_grad becomes a "gemm" region with the add (the runtime's
// "accumulate": cuBLASLt's C, beta = 1). Not the rows form (its padding
// rows are zeroed), and not a product read elsewhere too.
// CHECK-LABEL: func.func @wgrad_into_main_grad
// CHECK:      %[[DW:.*]] = te.fused "gemm"(%arg0, %arg1, %arg2, %arg3)
// CHECK-NEXT: ^bb0(
// CHECK-NEXT:   %[[P:.*]] = te.grouped_matmul {{.*}} {role = #te.gemm_role<wgrad>, transpose_a}
// CHECK-NEXT:   %[[S:.*]] = te.add %[[P]], %{{.*}} : tensor<4x48x32xf32>
// CHECK-NEXT:   te.yield %[[S]]
// CHECK:      %[[Y:.*]] = te.grouped_matmul %arg4, %arg5, %arg2 :
// CHECK-NEXT: te.add %[[Y]], %arg6 : tensor<64x48xf32>
// CHECK-NEXT: %[[T:.*]] = te.grouped_matmul %arg0, %arg1, %arg2 {transpose_a}
// CHECK-NEXT: te.add %[[T]], %arg3
// CHECK-NOT:  te.fused
// CHECK:      return
func.func @wgrad_into_main_grad(%dy: tensor<64x48xbf16>, %x: tensor<64x32xbf16>, %m: tensor<4xi32>, %main: tensor<4x48x32xf32>, %a: tensor<64x32xf32>, %w: tensor<4x32x48xf32>, %r: tensor<64x48xf32>) -> (tensor<4x48x32xf32>, tensor<64x48xf32>, tensor<4x48x32xf32>, tensor<4x48x32xf32>) {
  %dw = te.grouped_matmul %dy, %x, %m {transpose_a, role = #te.gemm_role<wgrad>} : (tensor<64x48xbf16>, tensor<64x32xbf16>, tensor<4xi32>) -> tensor<4x48x32xf32>
  %acc = te.add %dw, %main : tensor<4x48x32xf32>
  %y = te.grouped_matmul %a, %w, %m : (tensor<64x32xf32>, tensor<4x32x48xf32>, tensor<4xi32>) -> tensor<64x48xf32>
  %yr = te.add %y, %r : tensor<64x48xf32>
  %twice = te.grouped_matmul %dy, %x, %m {transpose_a} : (tensor<64x48xbf16>, tensor<64x32xbf16>, tensor<4xi32>) -> tensor<4x48x32xf32>
  %acc2 = te.add %twice, %main : tensor<4x48x32xf32>
  return %acc, %yr, %acc2, %twice : tensor<4x48x32xf32>, tensor<64x48xf32>, tensor<4x48x32xf32>, tensor<4x48x32xf32>
}

// -----

// The example spec under current scaling: the forward's amaxes, casts and
// grouped GEMM; the backward's dY amax, cast pair, two GEMMs and bias
// gradient.
// PIPELINE-LABEL: func.func @grouped_linear_small(
// PIPELINE:       te.fused "grouped_amax"
// PIPELINE:       te.compute_scale
// PIPELINE:       te.fused "grouped_quantize"
// PIPELINE:       te.fused "grouped_amax"
// PIPELINE:       te.compute_scale
// PIPELINE:       te.fused "grouped_quantize"
// PIPELINE:       te.grouped_scaled_matmul {{.*}} {fast_accum}
// PIPELINE-LABEL: func.func @grouped_linear_small_backward(
// PIPELINE:       te.fused "grouped_amax"
// PIPELINE:       te.compute_scale {{.*}} {fp8_type = f8E5M2}
// PIPELINE:       te.fused "grouped_quantize"
// PIPELINE:       te.grouped_scaled_matmul
// PIPELINE-NEXT:  te.grouped_scaled_matmul
// PIPELINE-NEXT:  te.fused "grouped_bias_grad"
