// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -emit-bytecode | te-opt | FileCheck %s

// GroupedLinear (docs/grouped-linear.md): the layer op te.grouped_linear and
// the grouped GEMM, bias-gradient, quantize and amax ops it lowers to, with
// te.compute_scale on per-group vectors. m_splits is an i32 [G] operand.

// CHECK-DAG: #delayed_scaling = #te.delayed_scaling<amax_history_len = 16>
// CHECK-DAG: #current_scaling = #te.current_scaling<>
// CHECK-DAG: #block_scaling = #te.block_scaling<>

//===----------------------------------------------------------------------===//
// te.grouped_linear
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @grouped_linear
// CHECK-SAME: (%[[X:.*]]: tensor<64x32xbf16>, %[[M:.*]]: tensor<4xi32>, %[[W:.*]]: tensor<4x48x32xbf16>, %[[B:.*]]: tensor<4x48xbf16>)
// CHECK: te.grouped_linear %[[X]] splits(%[[M]]) weight(%[[W]]) bias(%[[B]]) :
// CHECK-SAME: (tensor<64x32xbf16>, tensor<4xi32>, tensor<4x48x32xbf16>, tensor<4x48xbf16>) -> tensor<64x48xbf16>
func.func @grouped_linear(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                          %w: tensor<4x48x32xbf16>, %b: tensor<4x48xbf16>)
    -> tensor<64x48xbf16> {
  %y = te.grouped_linear %x splits(%m) weight(%w) bias(%b)
      : (tensor<64x32xbf16>, tensor<4xi32>, tensor<4x48x32xbf16>,
         tensor<4x48xbf16>) -> tensor<64x48xbf16>
  return %y : tensor<64x48xbf16>
}

// Without bias, leading dims [s, b] kept, under DelayedScaling.
// CHECK-LABEL: func.func @grouped_linear_no_bias_fp8
// CHECK: te.grouped_linear %{{.*}} splits(%{{.*}}) weight(%{{.*}}) {fp8_recipe = #delayed_scaling} :
// CHECK-SAME: (tensor<8x8x32xf16>, tensor<2xi32>, tensor<2x16x32xf16>) -> tensor<8x8x16xf16>
func.func @grouped_linear_no_bias_fp8(%x: tensor<8x8x32xf16>,
                                      %m: tensor<2xi32>,
                                      %w: tensor<2x16x32xf16>)
    -> tensor<8x8x16xf16> {
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.delayed_scaling<amax_history_len = 16>}
      : (tensor<8x8x32xf16>, tensor<2xi32>, tensor<2x16x32xf16>)
        -> tensor<8x8x16xf16>
  return %y : tensor<8x8x16xf16>
}

// Under Float8CurrentScaling.
// CHECK-LABEL: func.func @grouped_linear_current
// CHECK: te.grouped_linear {{.*}} {fp8_recipe = #current_scaling}
func.func @grouped_linear_current(%x: tensor<32x16xf32>, %m: tensor<1xi32>,
                                  %w: tensor<1x16x16xf32>)
    -> tensor<32x16xf32> {
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.current_scaling<>}
      : (tensor<32x16xf32>, tensor<1xi32>, tensor<1x16x16xf32>)
        -> tensor<32x16xf32>
  return %y : tensor<32x16xf32>
}

//===----------------------------------------------------------------------===//
// te.grouped_matmul and te.grouped_bias_grad: a Linear step's three GEMMs
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @grouped_gemms
// CHECK-SAME: (%[[X:.*]]: tensor<64x32xbf16>, %[[M:.*]]: tensor<4xi32>, %[[W:.*]]: tensor<4x48x32xbf16>, %[[B:.*]]: tensor<4x48xbf16>, %[[DY:.*]]: tensor<64x48xbf16>)
// CHECK: te.grouped_matmul %[[X]], %[[W]], %[[M]] bias(%[[B]]) {role = #te.gemm_role<fprop>, transpose_b} :
// CHECK-SAME: (tensor<64x32xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<64x48xbf16>
// CHECK: te.grouped_matmul %[[DY]], %[[W]], %[[M]] {role = #te.gemm_role<dgrad>} :
// CHECK-SAME: (tensor<64x48xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>) -> tensor<64x32xbf16>
// CHECK: te.grouped_matmul %[[DY]], %[[X]], %[[M]] {role = #te.gemm_role<wgrad>, transpose_a} :
// CHECK-SAME: (tensor<64x48xbf16>, tensor<64x32xbf16>, tensor<4xi32>) -> tensor<4x48x32xf32>
// CHECK: te.grouped_bias_grad %[[DY]], %[[M]] :
// CHECK-SAME: (tensor<64x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16>
func.func @grouped_gemms(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                         %w: tensor<4x48x32xbf16>, %b: tensor<4x48xbf16>,
                         %dy: tensor<64x48xbf16>)
    -> (tensor<64x48xbf16>, tensor<64x32xbf16>, tensor<4x48x32xf32>,
        tensor<4x48xbf16>) {
  %y = te.grouped_matmul %x, %w, %m bias(%b)
      {transpose_b, role = #te.gemm_role<fprop>}
      : (tensor<64x32xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>,
         tensor<4x48xbf16>) -> tensor<64x48xbf16>
  %dx = te.grouped_matmul %dy, %w, %m {role = #te.gemm_role<dgrad>}
      : (tensor<64x48xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>)
        -> tensor<64x32xbf16>
  %dw = te.grouped_matmul %dy, %x, %m {transpose_a, role = #te.gemm_role<wgrad>}
      : (tensor<64x48xbf16>, tensor<64x32xbf16>, tensor<4xi32>)
        -> tensor<4x48x32xf32>
  %db = te.grouped_bias_grad %dy, %m
      : (tensor<64x48xbf16>, tensor<4xi32>) -> tensor<4x48xbf16>
  return %y, %dx, %dw, %db : tensor<64x48xbf16>, tensor<64x32xbf16>,
      tensor<4x48x32xf32>, tensor<4x48xbf16>
}

// fp8_recipe on the GEMM (what te-place-scaling rewrites).
// CHECK-LABEL: func.func @grouped_matmul_fp8
// CHECK: te.grouped_matmul %{{.*}}, %{{.*}}, %{{.*}} {fp8_recipe = #current_scaling, role = #te.gemm_role<fprop>, transpose_b}
func.func @grouped_matmul_fp8(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                              %w: tensor<4x48x32xbf16>) -> tensor<64x48xbf16> {
  %y = te.grouped_matmul %x, %w, %m
      {transpose_b, fp8_recipe = #te.current_scaling<>,
       role = #te.gemm_role<fprop>}
      : (tensor<64x32xbf16>, tensor<4x48x32xbf16>, tensor<4xi32>)
        -> tensor<64x48xbf16>
  return %y : tensor<64x48xbf16>
}

//===----------------------------------------------------------------------===//
// FP8: te.grouped_amax, te.compute_scale on [G], te.grouped_quantize,
// te.grouped_scaled_matmul
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @grouped_fp8
// CHECK-SAME: (%[[X:.*]]: tensor<64x32xbf16>, %[[M:.*]]: tensor<4xi32>, %[[W:.*]]: tensor<4x48x32xbf16>, %[[B:.*]]: tensor<4x48xbf16>, %[[DY:.*]]: tensor<64x48xbf16>)
// CHECK: %[[AX:.*]] = te.grouped_amax %[[X]], %[[M]] : (tensor<64x32xbf16>, tensor<4xi32>) -> tensor<4xf32>
// CHECK: %[[AW:.*]] = te.grouped_amax %[[W]] : (tensor<4x48x32xbf16>) -> tensor<4xf32>
// CHECK: %[[SX:.*]], %[[SIX:.*]] = te.compute_scale %[[AX]] {fp8_type = f8E4M3FN} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
// CHECK: %[[SW:.*]], %[[SIW:.*]] = te.compute_scale %[[AW]] {fp8_type = f8E4M3FN, power_2_scale} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
// CHECK: %[[QX:.*]], %{{.*}} = te.grouped_quantize %[[X]], %[[SX]], %[[M]] :
// CHECK-SAME: (tensor<64x32xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
// CHECK: %[[QXT:.*]], %{{.*}} = te.grouped_quantize %[[X]], %[[SX]], %[[M]] {transpose} :
// CHECK-SAME: (tensor<64x32xbf16>, tensor<4xf32>, tensor<4xi32>) -> (tensor<32x64xf8E4M3FN>, tensor<4xf32>)
// CHECK: %[[QW:.*]], %{{.*}} = te.grouped_quantize %[[W]], %[[SW]] :
// CHECK-SAME: (tensor<4x48x32xbf16>, tensor<4xf32>) -> (tensor<4x48x32xf8E4M3FN>, tensor<4xf32>)
// CHECK: %[[QWT:.*]], %{{.*}} = te.grouped_quantize %[[W]], %[[SW]] {transpose} :
// CHECK-SAME: (tensor<4x48x32xbf16>, tensor<4xf32>) -> (tensor<4x32x48xf8E4M3FN>, tensor<4xf32>)
// CHECK: %[[QDYT:.*]], %{{.*}} = te.grouped_quantize %[[DY]], %[[SX]], %[[M]] {transpose} :
// CHECK-SAME: -> (tensor<48x64xf8E5M2>, tensor<4xf32>)
// CHECK: te.grouped_scaled_matmul %[[QX]], %[[QW]], %[[SIX]], %[[SIW]], %[[M]] bias(%[[B]]) {fast_accum} :
// CHECK-SAME: (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<64x48xbf16>
// CHECK: te.grouped_scaled_matmul %[[QDYT]], %[[QXT]], %[[SIX]], %[[SIX]], %[[M]] :
// CHECK-SAME: (tensor<48x64xf8E5M2>, tensor<32x64xf8E4M3FN>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>) -> tensor<4x48x32xf32>
func.func @grouped_fp8(%x: tensor<64x32xbf16>, %m: tensor<4xi32>,
                       %w: tensor<4x48x32xbf16>, %b: tensor<4x48xbf16>,
                       %dy: tensor<64x48xbf16>)
    -> (tensor<64x48xbf16>, tensor<4x48x32xf32>, tensor<4x32x48xf8E4M3FN>) {
  %ax = te.grouped_amax %x, %m
      : (tensor<64x32xbf16>, tensor<4xi32>) -> tensor<4xf32>
  %aw = te.grouped_amax %w : (tensor<4x48x32xbf16>) -> tensor<4xf32>
  %sx, %six = te.compute_scale %ax {fp8_type = f8E4M3FN}
      : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
  %sw, %siw = te.compute_scale %aw {fp8_type = f8E4M3FN, power_2_scale}
      : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
  %qx, %amx = te.grouped_quantize %x, %sx, %m
      : (tensor<64x32xbf16>, tensor<4xf32>, tensor<4xi32>)
        -> (tensor<64x32xf8E4M3FN>, tensor<4xf32>)
  %qxt, %amxt = te.grouped_quantize %x, %sx, %m {transpose}
      : (tensor<64x32xbf16>, tensor<4xf32>, tensor<4xi32>)
        -> (tensor<32x64xf8E4M3FN>, tensor<4xf32>)
  %qw, %amw = te.grouped_quantize %w, %sw
      : (tensor<4x48x32xbf16>, tensor<4xf32>)
        -> (tensor<4x48x32xf8E4M3FN>, tensor<4xf32>)
  %qwt, %amwt = te.grouped_quantize %w, %sw {transpose}
      : (tensor<4x48x32xbf16>, tensor<4xf32>)
        -> (tensor<4x32x48xf8E4M3FN>, tensor<4xf32>)
  %qdyt, %amdy = te.grouped_quantize %dy, %sx, %m {transpose}
      : (tensor<64x48xbf16>, tensor<4xf32>, tensor<4xi32>)
        -> (tensor<48x64xf8E5M2>, tensor<4xf32>)
  %y = te.grouped_scaled_matmul %qx, %qw, %six, %siw, %m bias(%b) {fast_accum}
      : (tensor<64x32xf8E4M3FN>, tensor<4x48x32xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<64x48xbf16>
  %dw = te.grouped_scaled_matmul %qdyt, %qxt, %six, %six, %m
      : (tensor<48x64xf8E5M2>, tensor<32x64xf8E4M3FN>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xi32>) -> tensor<4x48x32xf32>
  return %y, %dw, %qwt
      : tensor<64x48xbf16>, tensor<4x48x32xf32>, tensor<4x32x48xf8E4M3FN>
}

//===----------------------------------------------------------------------===//
// Float8BlockScaling: te.grouped_block_quantize and te.grouped_scaled_matmul
// with block scales (dialects/GroupedBlockScaleLayout.h). T = 320 tokens in
// G = 4 segments, K = 160, N = 144.
//===----------------------------------------------------------------------===//

// The layer op takes the recipe with 1-D x and grad blocks (TE's defaults).
// CHECK-LABEL: func.func @grouped_linear_block
// CHECK: te.grouped_linear {{.*}} {fp8_recipe = #block_scaling}
func.func @grouped_linear_block(%x: tensor<320x160xbf16>, %m: tensor<4xi32>,
                                %w: tensor<4x144x160xbf16>)
    -> tensor<320x144xbf16> {
  %y = te.grouped_linear %x splits(%m) weight(%w)
      {fp8_recipe = #te.block_scaling<>}
      : (tensor<320x160xbf16>, tensor<4xi32>, tensor<4x144x160xbf16>)
        -> tensor<320x144xbf16>
  return %y : tensor<320x144xbf16>
}

// Each form: segments [ceil(K/128), T], transposed segments
// [ceil(T/128) + G, pad4(K)], stacked [G, s0, s1] with 2-D tiles and with
// 1-D blocks of the per-group transpose.
// CHECK-LABEL: func.func @grouped_block_quantize
// CHECK-SAME: (%[[X:.*]]: tensor<320x160xbf16>, %[[M:.*]]: tensor<4xi32>, %[[W:.*]]: tensor<4x144x160xbf16>)
// CHECK: te.grouped_block_quantize %[[X]], %[[M]] {block_dim = 1 : i64, power_2_scale} :
// CHECK-SAME: (tensor<320x160xbf16>, tensor<4xi32>) -> (tensor<320x160xf8E4M3FN>, tensor<2x320xf32>)
// CHECK: te.grouped_block_quantize %[[X]], %[[M]] {block_dim = 1 : i64, power_2_scale, transpose} :
// CHECK-SAME: (tensor<320x160xbf16>, tensor<4xi32>) -> (tensor<160x320xf8E5M2>, tensor<7x160xf32>)
// CHECK: te.grouped_block_quantize %[[W]] {block_dim = 2 : i64, power_2_scale} :
// CHECK-SAME: (tensor<4x144x160xbf16>) -> (tensor<4x144x160xf8E4M3FN>, tensor<4x2x4xf32>)
// CHECK: te.grouped_block_quantize %[[W]] {block_dim = 1 : i64, transpose} :
// CHECK-SAME: (tensor<4x144x160xbf16>) -> (tensor<4x160x144xf8E4M3FN>, tensor<4x2x160xf32>)
func.func @grouped_block_quantize(%x: tensor<320x160xbf16>, %m: tensor<4xi32>,
                                  %w: tensor<4x144x160xbf16>)
    -> (tensor<2x320xf32>, tensor<7x160xf32>, tensor<4x2x4xf32>,
        tensor<4x2x160xf32>) {
  %q, %s = te.grouped_block_quantize %x, %m {block_dim = 1 : i64, power_2_scale}
      : (tensor<320x160xbf16>, tensor<4xi32>)
        -> (tensor<320x160xf8E4M3FN>, tensor<2x320xf32>)
  %qt, %st = te.grouped_block_quantize %x, %m
      {block_dim = 1 : i64, transpose, power_2_scale}
      : (tensor<320x160xbf16>, tensor<4xi32>)
        -> (tensor<160x320xf8E5M2>, tensor<7x160xf32>)
  %qw, %sw = te.grouped_block_quantize %w {block_dim = 2 : i64, power_2_scale}
      : (tensor<4x144x160xbf16>)
        -> (tensor<4x144x160xf8E4M3FN>, tensor<4x2x4xf32>)
  %qwt, %swt = te.grouped_block_quantize %w {block_dim = 1 : i64, transpose}
      : (tensor<4x144x160xbf16>)
        -> (tensor<4x160x144xf8E4M3FN>, tensor<4x2x160xf32>)
  return %s, %st, %sw, %swt : tensor<2x320xf32>, tensor<7x160xf32>,
      tensor<4x2x4xf32>, tensor<4x2x160xf32>
}

// fprop (rows form, 2-D weights, bias), dgrad (rows form, 1-D blocks of
// W^T) and wgrad (contraction form, both transposed segments).
// CHECK-LABEL: func.func @grouped_block_scaled_gemms
// CHECK-SAME: (%[[QX:[^:]*]]: tensor<320x160xf8E4M3FN>, %[[SX:[^:]*]]: tensor<2x320xf32>, %[[QW:[^:]*]]: tensor<4x144x160xf8E4M3FN>, %[[SW:[^:]*]]: tensor<4x2x4xf32>, %[[M:[^:]*]]: tensor<4xi32>, %[[B:[^:]*]]: tensor<4x144xbf16>,
// CHECK: te.grouped_scaled_matmul %[[QX]], %[[QW]], %[[SX]], %[[SW]], %[[M]] bias(%[[B]]) :
// CHECK-SAME: (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>, tensor<2x320xf32>, tensor<4x2x4xf32>, tensor<4xi32>, tensor<4x144xbf16>) -> tensor<320x144xbf16>
// CHECK: te.grouped_scaled_matmul
// CHECK-SAME: (tensor<320x144xf8E5M2>, tensor<4x160x144xf8E4M3FN>, tensor<2x320xf32>, tensor<4x2x160xf32>, tensor<4xi32>) -> tensor<320x160xbf16>
// CHECK: te.grouped_scaled_matmul
// CHECK-SAME: (tensor<144x320xf8E5M2>, tensor<160x320xf8E4M3FN>, tensor<7x144xf32>, tensor<7x160xf32>, tensor<4xi32>) -> tensor<4x144x160xf32>
func.func @grouped_block_scaled_gemms(
    %qx: tensor<320x160xf8E4M3FN>, %sx: tensor<2x320xf32>,
    %qw: tensor<4x144x160xf8E4M3FN>, %sw: tensor<4x2x4xf32>,
    %m: tensor<4xi32>, %b: tensor<4x144xbf16>,
    %qdy: tensor<320x144xf8E5M2>, %sdy: tensor<2x320xf32>,
    %qwt: tensor<4x160x144xf8E4M3FN>, %swt: tensor<4x2x160xf32>,
    %qdyt: tensor<144x320xf8E5M2>, %sdyt: tensor<7x144xf32>,
    %qxt: tensor<160x320xf8E4M3FN>, %sxt: tensor<7x160xf32>)
    -> (tensor<320x144xbf16>, tensor<320x160xbf16>, tensor<4x144x160xf32>) {
  %y = te.grouped_scaled_matmul %qx, %qw, %sx, %sw, %m bias(%b)
      : (tensor<320x160xf8E4M3FN>, tensor<4x144x160xf8E4M3FN>,
         tensor<2x320xf32>, tensor<4x2x4xf32>, tensor<4xi32>,
         tensor<4x144xbf16>) -> tensor<320x144xbf16>
  %dx = te.grouped_scaled_matmul %qdy, %qwt, %sdy, %swt, %m
      : (tensor<320x144xf8E5M2>, tensor<4x160x144xf8E4M3FN>,
         tensor<2x320xf32>, tensor<4x2x160xf32>, tensor<4xi32>)
        -> tensor<320x160xbf16>
  %dw = te.grouped_scaled_matmul %qdyt, %qxt, %sdyt, %sxt, %m
      : (tensor<144x320xf8E5M2>, tensor<160x320xf8E4M3FN>, tensor<7x144xf32>,
         tensor<7x160xf32>, tensor<4xi32>) -> tensor<4x144x160xf32>
  return %y, %dx, %dw
      : tensor<320x144xbf16>, tensor<320x160xbf16>, tensor<4x144x160xf32>
}
