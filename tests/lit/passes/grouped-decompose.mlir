// RUN: te-opt %s --te-decompose | FileCheck %s

// GroupedLinear (docs/grouped-linear.md): the tokens flattened to [T, K],
// one grouped GEMM that reads the stacked weights transposed, adds each
// segment's bias and keeps the layer's recipe, then the leading dims back.
// CHECK-LABEL: func.func @grouped_linear
// CHECK-SAME: (%[[X:.*]]: tensor<8x4x64xbf16>, %[[M:.*]]: tensor<4xi32>, %[[W:.*]]: tensor<4x48x64xbf16>, %[[B:.*]]: tensor<4x48xbf16>)
// CHECK-NEXT: %[[X2:.*]] = te.reshape %[[X]] : tensor<8x4x64xbf16> -> tensor<32x64xbf16>
// CHECK-NEXT: %[[Y:.*]] = te.grouped_matmul %[[X2]], %[[W]], %[[M]] bias(%[[B]]) {fp8_recipe = #delayed_scaling, role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x64xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>, tensor<4x48xbf16>) -> tensor<32x48xbf16>
// CHECK-NEXT: %[[OUT:.*]] = te.reshape %[[Y]] : tensor<32x48xbf16> -> tensor<8x4x48xbf16>
// CHECK-NEXT: return %[[OUT]]
func.func @grouped_linear(%x: tensor<8x4x64xbf16>, %m: tensor<4xi32>, %w: tensor<4x48x64xbf16>, %b: tensor<4x48xbf16>) -> tensor<8x4x48xbf16> {
  %y = te.grouped_linear %x splits(%m) weight(%w) bias(%b) {fp8_recipe = #te.delayed_scaling<amax_history_len = 4>} : (tensor<8x4x64xbf16>, tensor<4xi32>, tensor<4x48x64xbf16>, tensor<4x48xbf16>) -> tensor<8x4x48xbf16>
  return %y : tensor<8x4x48xbf16>
}

// A 2-D input needs no reshape; no bias, no recipe: a high-precision
// grouped GEMM without bias.
// CHECK-LABEL: func.func @grouped_linear_2d_no_bias
// CHECK-NEXT: %[[Y:.*]] = te.grouped_matmul %arg0, %arg2, %arg1 {role = #te.gemm_role<fprop>, transpose_b} : (tensor<24x16xf16>, tensor<3x8x16xf16>, tensor<3xi32>) -> tensor<24x8xf16>
// CHECK-NEXT: return %[[Y]]
func.func @grouped_linear_2d_no_bias(%x: tensor<24x16xf16>, %m: tensor<3xi32>, %w: tensor<3x8x16xf16>) -> tensor<24x8xf16> {
  %y = te.grouped_linear %x splits(%m) weight(%w) : (tensor<24x16xf16>, tensor<3xi32>, tensor<3x8x16xf16>) -> tensor<24x8xf16>
  return %y : tensor<24x8xf16>
}

// te.grouped_linear is a layer op: it counts for the dropout streams of
// the layers after it (16 * layer index + site, as in the interpreter).
// CHECK-LABEL: func.func @grouped_then_dropout
// CHECK:      te.grouped_matmul
// CHECK:      te.attention {{.*}}stream = 16 : i64
func.func @grouped_then_dropout(%x: tensor<24x16xf16>, %m: tensor<3xi32>, %w: tensor<3x8x16xf16>, %q: tensor<2x16x8x16xbf16>, %k: tensor<2x16x2x16xbf16>, %v: tensor<2x16x2x16xbf16>) -> (tensor<24x8xf16>, tensor<2x16x128xbf16>) {
  %y = te.grouped_linear %x splits(%m) weight(%w) : (tensor<24x16xf16>, tensor<3xi32>, tensor<3x8x16xf16>) -> tensor<24x8xf16>
  %o = te.dot_product_attention %q, %k, %v {attn_mask_type = #te.attn_mask_type<no_mask>, qkv_format = #te.qkv_format<bshd>, attention_dropout = 0.1 : f64} : (tensor<2x16x8x16xbf16>, tensor<2x16x2x16xbf16>, tensor<2x16x2x16xbf16>) -> tensor<2x16x128xbf16>
  return %y, %o : tensor<24x8xf16>, tensor<2x16x128xbf16>
}
