// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s

// FP8 attention (docs/fp8-attention.md): te.dequantize, te.fp8_attention
// and te.fp8_attention_bwd round-trip. sbhd, s = 16, b = 2, 4 heads of
// head_dim 16 (2 key/value heads in the GQA case).

// CHECK-LABEL: func.func @dequantize
// CHECK: te.dequantize %{{.*}}, %{{.*}} : tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32> -> tensor<16x2x4x16xbf16>
// CHECK: te.dequantize %{{.*}}, %{{.*}} : tensor<32x64xf8E5M2>, tensor<1xf32> -> tensor<32x64xf32>
func.func @dequantize(%x: tensor<16x2x4x16xf8E4M3FN>, %y: tensor<32x64xf8E5M2>,
                      %si: tensor<1xf32>)
    -> (tensor<16x2x4x16xbf16>, tensor<32x64xf32>) {
  %a = te.dequantize %x, %si : tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32> -> tensor<16x2x4x16xbf16>
  %b = te.dequantize %y, %si : tensor<32x64xf8E5M2>, tensor<1xf32> -> tensor<32x64xf32>
  return %a, %b : tensor<16x2x4x16xbf16>, tensor<32x64xf32>
}

// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[O:.*]], %[[LSE:.*]], %{{.*}}, %{{.*}} = te.fp8_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<padding>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 2.500000e-01 : f64, stream = 3 : i64}
// CHECK: te.fp8_attention_bwd %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %[[LSE]], {{.*}} mask(%{{[^)]*}})
// CHECK-SAME: -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x2x16xf8E5M2>, tensor<16x2x2x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
func.func @forward_backward(%q: tensor<16x2x4x16xf8E4M3FN>,
                            %k: tensor<16x2x2x16xf8E4M3FN>,
                            %v: tensor<16x2x2x16xf8E4M3FN>,
                            %do: tensor<16x2x4x16xf8E5M2>,
                            %mask: tensor<2x1x1x16xi1>, %s: tensor<1xf32>) {
  %o, %lse, %amax_s, %amax_o = te.fp8_attention %q, %k, %v, %s, %s
      mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       stream = 3 : i64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x2x16xf8E4M3FN>,
         tensor<16x2x2x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>,
         tensor<2x1x1x16xi1>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>,
            tensor<1xf32>)
  %dq, %dk, %dv, %adp, %adq, %adk, %adv = te.fp8_attention_bwd %do, %q, %k,
      %v, %o, %lse, %s, %s, %s, %s, %s, %s mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding>,
       qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64,
       stream = 3 : i64}
      : (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E4M3FN>,
         tensor<16x2x2x16xf8E4M3FN>, tensor<16x2x2x16xf8E4M3FN>,
         tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>,
         tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
         tensor<1xf32>, tensor<2x1x1x16xi1>)
        -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x2x16xf8E5M2>,
            tensor<16x2x2x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>,
            tensor<1xf32>, tensor<1xf32>)
  return
}

// bshd with a query mask of its own (cross-attention: 8 keys).
// CHECK-LABEL: func.func @bshd_query_mask
// CHECK: te.fp8_attention {{.*}} mask(%{{.*}}) query_mask(%{{.*}}) {attn_mask_type = #te.attn_mask_type<padding>, pad_keys_only, qkv_format = #te.qkv_format<bshd>
func.func @bshd_query_mask(%q: tensor<2x16x4x32xf8E4M3FN>,
                           %k: tensor<2x8x4x32xf8E4M3FN>,
                           %mask: tensor<2x1x1x8xi1>,
                           %qmask: tensor<2x1x1x16xi1>, %s: tensor<1xf32>) {
  %o, %lse, %amax_s, %amax_o = te.fp8_attention %q, %k, %k, %s, %s
      mask(%mask) query_mask(%qmask)
      {attn_mask_type = #te.attn_mask_type<padding>, pad_keys_only,
       qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.125 : f64}
      : (tensor<2x16x4x32xf8E4M3FN>, tensor<2x8x4x32xf8E4M3FN>,
         tensor<2x8x4x32xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>,
         tensor<2x1x1x8xi1>,
         tensor<2x1x1x16xi1>)
        -> (tensor<2x16x4x32xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>,
            tensor<1xf32>)
  return
}
