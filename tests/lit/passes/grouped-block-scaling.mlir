// RUN: te-opt %s --te-autodiff --te-place-scaling | FileCheck %s
// RUN: te-opt %s --te-place-scaling | FileCheck %s --check-prefix=FWD
// RUN: te-opt %s --te-autodiff '--te-place-scaling=recipe="#te.block_scaling<fp8_format = hybrid, w_block_scaling_dim = 1, power_2_scale = false>"' | FileCheck %s --check-prefix=HYBRID
// RUN: te-opt %s --te-autodiff --te-place-scaling --te-fuse | FileCheck %s --check-prefix=FUSED
// RUN: te-opt %s --te-place-scaling --te-fuse | FileCheck %s --check-prefix=FWD-FUSED

#bs = #te.block_scaling<>

// GroupedLinear (G = 3 experts, 160 -> 144 features over 256 tokens) then a
// Linear, under Float8BlockScaling (docs/grouped-linear.md, "Float8Block
// Scaling"): TE's defaults, E4M3 everywhere, 1-D blocks for x and dY, 2-D
// tiles for the weights, scales rounded to powers of two. No meta state.
// Forward: x is cast in row segments (scale_inv [ceil(K/128), T] =
// [2, 256]) and, for wgrad, transposed in column segments (x^T [K, T],
// scale_inv [ceil(T/128) + G, pad4(K)] = [5, 160]); the stacked weights per
// matrix ([G, ceil(N/128), pad4(ceil(K/128))] = [3, 2, 4]) and, for dgrad,
// transposed (W^T [G, K, N], [3, 2, 4]). The grouped GEMM keeps its bias and
// has no fast accumulation. The transposed casts are saved for the backward.
// CHECK-LABEL: func.func @grouped(
// CHECK-SAME:  %[[X:[^:]*]]: tensor<256x160xbf16> {te.name = "x"}, %[[M:[^:]*]]: tensor<3xi32> {te.name = "m"}, %[[W:[^:]*]]: tensor<3x144x160xbf16> {te.name = "w"}, %[[B:[^:]*]]: tensor<3x144xbf16> {te.name = "b"}, %{{[^:]*}}: tensor<32x144xbf16> {te.name = "w2"})
// CHECK-NOT:   fp8_meta
// CHECK-SAME:  tensor<3x160x144xf8E4M3FN> {te.name = "saved.fp8.6"}, tensor<3x2x4xf32> {te.name = "saved.fp8.7"}, tensor<160x256xf8E4M3FN> {te.name = "saved.fp8.8"}, tensor<5x160xf32> {te.name = "saved.fp8.9"})
// CHECK-NEXT:  %[[QX:.*]], %[[SX:.*]] = te.grouped_block_quantize %[[X]], %[[M]] {block_dim = 1 : i64, power_2_scale} : (tensor<256x160xbf16>, tensor<3xi32>) -> (tensor<256x160xf8E4M3FN>, tensor<2x256xf32>)
// CHECK-NEXT:  %[[QXT:.*]], %[[SXT:.*]] = te.grouped_block_quantize %[[X]], %[[M]] {block_dim = 1 : i64, power_2_scale, transpose} : (tensor<256x160xbf16>, tensor<3xi32>) -> (tensor<160x256xf8E4M3FN>, tensor<5x160xf32>)
// CHECK-NEXT:  %[[QW:.*]], %[[SW:.*]] = te.grouped_block_quantize %[[W]] {block_dim = 2 : i64, power_2_scale} : (tensor<3x144x160xbf16>) -> (tensor<3x144x160xf8E4M3FN>, tensor<3x2x4xf32>)
// CHECK-NEXT:  %[[QWT:.*]], %[[SWT:.*]] = te.grouped_block_quantize %[[W]] {block_dim = 2 : i64, power_2_scale, transpose} : (tensor<3x144x160xbf16>) -> (tensor<3x160x144xf8E4M3FN>, tensor<3x2x4xf32>)
// CHECK-NEXT:  %[[Y:.*]] = te.grouped_scaled_matmul %[[QX]], %[[QW]], %[[SX]], %[[SW]], %[[M]] bias(%[[B]]) : (tensor<256x160xf8E4M3FN>, tensor<3x144x160xf8E4M3FN>, tensor<2x256xf32>, tensor<3x2x4xf32>, tensor<3xi32>, tensor<3x144xbf16>) -> tensor<256x144xbf16>
// CHECK-NEXT:  te.block_quantize %[[Y]] {block_dim = 1 : i64, power_2_scale}
// CHECK-NEXT:  te.block_quantize %[[Y]] {block_dim = 1 : i64, power_2_scale, transpose}
// CHECK:       te.scaled_matmul
// CHECK-NEXT:  return {{.*}}, %[[QWT]], %[[SWT]], %[[QXT]], %[[SXT]] :

// Backward: the Linear's dgrad gives dY [256, 144], cast per segment in 1-D
// blocks row-wise (dgrad's a, against the saved W^T) and transposed (dY^T
// [N, T], wgrad's a, against the saved x^T); no fast accumulation. The bias
// gradient sums dY per segment in high precision. m_splits is the forward's
// argument; x and W are no longer passed in high precision.
// CHECK-LABEL: func.func @grouped_backward(
// CHECK-SAME:  %[[BM:[^:]*]]: tensor<3xi32> {te.forward_arg = 1 : i64}
// CHECK-NOT:   fp8_meta
// CHECK-SAME:  %[[WT:[^:]*]]: tensor<3x160x144xf8E4M3FN> {te.forward_result = 5 : i64}, %[[WTS:[^:]*]]: tensor<3x2x4xf32> {te.forward_result = 6 : i64}, %[[XT:[^:]*]]: tensor<160x256xf8E4M3FN> {te.forward_result = 7 : i64}, %[[XTS:[^:]*]]: tensor<5x160xf32> {te.forward_result = 8 : i64})
// CHECK-NOT:   te.forward_arg = 0
// CHECK-NOT:   te.forward_arg = 2
// CHECK:       %[[DY:.*]] = te.scaled_matmul
// CHECK-NEXT:  te.scaled_matmul
// CHECK-NEXT:  %[[QDY:.*]], %[[SDY:.*]] = te.grouped_block_quantize %[[DY]], %[[BM]] {block_dim = 1 : i64, power_2_scale} : (tensor<256x144xbf16>, tensor<3xi32>) -> (tensor<256x144xf8E4M3FN>, tensor<2x256xf32>)
// CHECK-NEXT:  %[[QDYT:.*]], %[[SDYT:.*]] = te.grouped_block_quantize %[[DY]], %[[BM]] {block_dim = 1 : i64, power_2_scale, transpose} : (tensor<256x144xbf16>, tensor<3xi32>) -> (tensor<144x256xf8E4M3FN>, tensor<5x144xf32>)
// CHECK-NEXT:  %[[DX:.*]] = te.grouped_scaled_matmul %[[QDY]], %[[WT]], %[[SDY]], %[[WTS]], %[[BM]] : (tensor<256x144xf8E4M3FN>, tensor<3x160x144xf8E4M3FN>, tensor<2x256xf32>, tensor<3x2x4xf32>, tensor<3xi32>) -> tensor<256x160xbf16>
// CHECK-NEXT:  %[[DW:.*]] = te.grouped_scaled_matmul %[[QDYT]], %[[XT]], %[[SDYT]], %[[XTS]], %[[BM]] : (tensor<144x256xf8E4M3FN>, tensor<160x256xf8E4M3FN>, tensor<5x144xf32>, tensor<5x160xf32>, tensor<3xi32>) -> tensor<3x144x160xbf16>
// CHECK-NEXT:  %[[DB:.*]] = te.grouped_bias_grad %[[DY]], %[[BM]] : (tensor<256x144xbf16>, tensor<3xi32>) -> tensor<3x144xbf16>
// CHECK-NEXT:  return %[[DX]], %[[DW]], %[[DB]],

// Inference: no transposed casts, nothing saved.
// FWD-LABEL: func.func @grouped(
// FWD-NOT:   saved
// FWD-NOT:   transpose
// FWD:       te.grouped_block_quantize %arg0, %arg1 {block_dim = 1 : i64, power_2_scale} :
// FWD-NEXT:  te.grouped_block_quantize %arg2 {block_dim = 2 : i64, power_2_scale} :
// FWD-NEXT:  te.grouped_scaled_matmul
// FWD-NOT:   transpose
// FWD:       return

// HYBRID with 1-D weight blocks and float32 scales: E4M3 forward casts, dY
// in E5M2; W in 1-D blocks along K ([G, ceil(K/128), pad4(N)] = [3, 2, 144])
// and W^T along N ([3, ceil(N/128), pad4(K)] = [3, 2, 160]).
// HYBRID-LABEL: func.func @grouped(
// HYBRID:       te.grouped_block_quantize %arg0, %arg1 {block_dim = 1 : i64} : {{.*}} -> (tensor<256x160xf8E4M3FN>, tensor<2x256xf32>)
// HYBRID-NEXT:  te.grouped_block_quantize %arg0, %arg1 {block_dim = 1 : i64, transpose} : {{.*}} -> (tensor<160x256xf8E4M3FN>, tensor<5x160xf32>)
// HYBRID-NEXT:  te.grouped_block_quantize %arg2 {block_dim = 1 : i64} : (tensor<3x144x160xbf16>) -> (tensor<3x144x160xf8E4M3FN>, tensor<3x2x144xf32>)
// HYBRID-NEXT:  te.grouped_block_quantize %arg2 {block_dim = 1 : i64, transpose} : (tensor<3x144x160xbf16>) -> (tensor<3x160x144xf8E4M3FN>, tensor<3x2x160xf32>)
// HYBRID-NEXT:  te.grouped_scaled_matmul {{.*}} : (tensor<256x160xf8E4M3FN>, tensor<3x144x160xf8E4M3FN>, tensor<2x256xf32>, tensor<3x2x144xf32>, tensor<3xi32>, tensor<3x144xbf16>) -> tensor<256x144xbf16>
// HYBRID-LABEL: func.func @grouped_backward(
// HYBRID:       te.grouped_block_quantize %{{.*}}, %{{.*}} {block_dim = 1 : i64} : {{.*}} -> (tensor<256x144xf8E5M2>, tensor<2x256xf32>)
// HYBRID-NEXT:  te.grouped_block_quantize %{{.*}}, %{{.*}} {block_dim = 1 : i64, transpose} : {{.*}} -> (tensor<144x256xf8E5M2>, tensor<5x144xf32>)
// HYBRID-NEXT:  te.grouped_scaled_matmul {{.*}} : (tensor<256x144xf8E5M2>, tensor<3x160x144xf8E4M3FN>, tensor<2x256xf32>, tensor<3x2x160xf32>, tensor<3xi32>) -> tensor<256x160xbf16>
// HYBRID-NEXT:  te.grouped_scaled_matmul {{.*}} : (tensor<144x256xf8E5M2>, tensor<160x256xf8E4M3FN>, tensor<5x144xf32>, tensor<5x160xf32>, tensor<3xi32>) -> tensor<3x144x160xbf16>

// te-fuse: the casts of one tensor in the same groups (row-wise and
// transposed) are one "grouped_block_quantize" kernel, which reads it once;
// the Linear's casts are "block_quantize" kernels; the grouped GEMMs stay
// outside te.fused.
// FUSED-LABEL: func.func @grouped(
// FUSED:       %[[X:.*]]:4 = te.fused "grouped_block_quantize"(%arg0, %arg1) : (tensor<256x160xbf16>, tensor<3xi32>) -> (tensor<256x160xf8E4M3FN>, tensor<2x256xf32>, tensor<160x256xf8E4M3FN>, tensor<5x160xf32>) {
// FUSED-NEXT:  ^bb0(
// FUSED-NEXT:    te.grouped_block_quantize %{{.*}}, %{{.*}} {block_dim = 1 : i64, power_2_scale} :
// FUSED-NEXT:    te.grouped_block_quantize %{{.*}}, %{{.*}} {block_dim = 1 : i64, power_2_scale, transpose} :
// FUSED-NEXT:    te.yield
// FUSED-NEXT:  }
// FUSED-NEXT:  %[[W:.*]]:4 = te.fused "grouped_block_quantize"(%arg2) : (tensor<3x144x160xbf16>) -> (tensor<3x144x160xf8E4M3FN>, tensor<3x2x4xf32>, tensor<3x160x144xf8E4M3FN>, tensor<3x2x4xf32>) {
// FUSED-NEXT:  ^bb0(
// FUSED-NEXT:    te.grouped_block_quantize %{{.*}} {block_dim = 2 : i64, power_2_scale} :
// FUSED-NEXT:    te.grouped_block_quantize %{{.*}} {block_dim = 2 : i64, power_2_scale, transpose} :
// FUSED-NEXT:    te.yield
// FUSED-NEXT:  }
// FUSED-NEXT:  %[[Y:.*]] = te.grouped_scaled_matmul %[[X]]#0, %[[W]]#0, %[[X]]#1, %[[W]]#1, %arg1 bias(%arg3) :
// FUSED-NEXT:  te.fused "block_quantize"(%[[Y]])
// FUSED:       return {{.*}}, %[[W]]#2, %[[W]]#3, %[[X]]#2, %[[X]]#3 :
// FUSED-LABEL: func.func @grouped_backward(
// FUSED:       %[[DY:.*]]:4 = te.fused "grouped_block_quantize"(%{{.*}}, %arg1) : (tensor<256x144xbf16>, tensor<3xi32>) -> (tensor<256x144xf8E4M3FN>, tensor<2x256xf32>, tensor<144x256xf8E4M3FN>, tensor<5x144xf32>) {
// FUSED-NEXT:  ^bb0(
// FUSED-NEXT:    te.grouped_block_quantize
// FUSED-NEXT:    te.grouped_block_quantize {{.*}} transpose
// FUSED-NEXT:    te.yield
// FUSED-NEXT:  }
// FUSED-NEXT:  te.grouped_scaled_matmul %[[DY]]#0, %{{.*}}, %[[DY]]#1,
// FUSED-NEXT:  te.grouped_scaled_matmul %[[DY]]#2, %{{.*}}, %[[DY]]#3,
// FUSED-NEXT:  te.fused "grouped_bias_grad"

// Inference: each lone cast is a kernel region of its own.
// FWD-FUSED-LABEL: func.func @grouped(
// FWD-FUSED:       %[[X:.*]]:2 = te.fused "grouped_block_quantize"(%arg0, %arg1) : (tensor<256x160xbf16>, tensor<3xi32>) -> (tensor<256x160xf8E4M3FN>, tensor<2x256xf32>) {
// FWD-FUSED-NEXT:  ^bb0(
// FWD-FUSED-NEXT:    te.grouped_block_quantize
// FWD-FUSED-NEXT:    te.yield
// FWD-FUSED-NEXT:  }
// FWD-FUSED-NEXT:  %[[W:.*]]:2 = te.fused "grouped_block_quantize"(%arg2) : (tensor<3x144x160xbf16>) -> (tensor<3x144x160xf8E4M3FN>, tensor<3x2x4xf32>) {
// FWD-FUSED-NEXT:  ^bb0(
// FWD-FUSED-NEXT:    te.grouped_block_quantize
// FWD-FUSED-NEXT:    te.yield
// FWD-FUSED-NEXT:  }
// FWD-FUSED-NEXT:  te.grouped_scaled_matmul %[[X]]#0, %[[W]]#0, %[[X]]#1, %[[W]]#1, %arg1 bias(%arg3) :
func.func @grouped(%x: tensor<256x160xbf16> {te.name = "x"}, %m: tensor<3xi32> {te.name = "m"}, %w: tensor<3x144x160xbf16> {te.name = "w"}, %b: tensor<3x144xbf16> {te.name = "b"}, %w2: tensor<32x144xbf16> {te.name = "w2"}) -> (tensor<256x32xbf16> {te.name = "y"}) {
  %y = te.grouped_matmul %x, %w, %m bias(%b) {fp8_recipe = #bs, role = #te.gemm_role<fprop>, transpose_b} : (tensor<256x160xbf16>, tensor<3x144x160xbf16>, tensor<3xi32>, tensor<3x144xbf16>) -> tensor<256x144xbf16>
  %z = te.matmul %y, %w2 {fp8_recipe = #bs, role = #te.gemm_role<fprop>, transpose_b} : tensor<256x144xbf16>, tensor<32x144xbf16> -> tensor<256x32xbf16>
  return %z : tensor<256x32xbf16>
}
