// RUN: te-opt %s --te-decompose --te-autodiff --te-place-scaling | FileCheck %s
// RUN: te-opt %s --te-decompose=inference --te-place-scaling | FileCheck %s --check-prefix=INF
// RUN: te-opt %s --te-decompose --te-autodiff --te-place-scaling=recipe=none | FileCheck %s --check-prefix=NONE --implicit-check-not=fp8
// RUN: te-opt %s --te-decompose --te-autodiff '--te-place-scaling=recipe="#te.delayed_scaling<amax_history_len = 4>"' | FileCheck %s --check-prefix=NODPA --implicit-check-not=fp8_attention --implicit-check-not=fp8_recipe
// RUN: te-opt %s --te-decompose --te-autodiff '--te-place-scaling=recipe="#te.delayed_scaling<amax_history_len = 4, fp8_dpa = true>"' | FileCheck %s --check-prefix=OVERRIDE

// FP8 attention (fp8_dpa, docs/fp8-attention.md) by te-place-scaling.

#dpa = #te.delayed_scaling<amax_history_len = 4, fp8_dpa = true>

// DotProductAttention's core, bshd with a padding mask. Forward: three
// slots (qkv, s, o); q, k and v cast with the one qkv scale, its amax the
// largest of theirs; the FP8 output dequantized with o's scale_inv. The
// FP8 q, k, v, O and the scales the backward needs are saved.
// CHECK-LABEL: func.func @dpa(
// CHECK-SAME:  %[[Q:[^:]*]]: tensor<2x4x4x16xbf16> {te.name = "q"}, %[[K:[^:]*]]: tensor<2x4x4x16xbf16> {te.name = "k"}, %[[V:[^:]*]]: tensor<2x4x4x16xbf16> {te.name = "v"}, %[[M:[^:]*]]: tensor<2x1x1x4xi1> {te.name = "mask"},
// CHECK-SAME:  %[[SCALE:[^:]*]]: tensor<3xf32> {te.name = "fp8_meta.fwd.scale"}, %[[SCALE_INV:[^:]*]]: tensor<3xf32> {te.name = "fp8_meta.fwd.scale_inv"}, %{{[^:]*}}: tensor<4x3xf32> {te.name = "fp8_meta.fwd.amax_history"})
// CHECK-SAME:  -> (tensor<2x4x64xbf16> {te.name = "o"}, tensor<2x4x4xf32> {te.name = "saved.0"},
// CHECK-SAME:  tensor<2x4x4x16xf8E4M3FN> {te.name = "saved.fp8.5"}, tensor<2x4x4x16xf8E4M3FN> {te.name = "saved.fp8.6"}, tensor<2x4x4x16xf8E4M3FN> {te.name = "saved.fp8.7"}, tensor<2x4x4x16xf8E4M3FN> {te.name = "saved.fp8.8"}, tensor<1xf32> {te.name = "saved.fp8.9"}, tensor<1xf32> {te.name = "saved.fp8.10"})
// CHECK-NEXT: %[[QKV_S:.*]] = te.slice %[[SCALE]][0]
// CHECK-NEXT: %[[QKV_SI:.*]] = te.slice %[[SCALE_INV]][0]
// CHECK-NEXT: %[[O_S:.*]] = te.slice %[[SCALE]][2]
// CHECK-NEXT: %[[O_SI:.*]] = te.slice %[[SCALE_INV]][2]
// CHECK-NEXT: %[[Q8:.*]], %[[AQ:.*]] = te.quantize %[[Q]], %[[QKV_S]] : tensor<2x4x4x16xbf16>, tensor<1xf32> -> tensor<2x4x4x16xf8E4M3FN>, tensor<1xf32>
// CHECK-NEXT: %[[K8:.*]], %[[AK:.*]] = te.quantize %[[K]], %[[QKV_S]]
// CHECK-NEXT: %[[V8:.*]], %[[AV:.*]] = te.quantize %[[V]], %[[QKV_S]]
// CHECK-NEXT: %[[AQKV:.*]] = te.concat %[[AQ]], %[[AK]], %[[AV]] : tensor<1xf32>, tensor<1xf32>, tensor<1xf32> -> tensor<3xf32>
// CHECK-NEXT: %[[A:.*]] = te.amax %[[AQKV]] : tensor<3xf32> -> tensor<1xf32>
// CHECK-NEXT: %[[O8:.*]], %[[LSE:.*]], %[[AS:.*]], %[[AO:.*]] = te.fp8_attention %[[Q8]], %[[K8]], %[[V8]], %[[QKV_SI]], %[[O_S]] mask(%[[M]]) {attn_mask_type = #te.attn_mask_type<padding>, qkv_format = #te.qkv_format<bshd>, softmax_scale = 2.500000e-01 : f64}
// CHECK-SAME:  -> (tensor<2x4x4x16xf8E4M3FN>, tensor<2x4x4xf32>, tensor<1xf32>, tensor<1xf32>)
// CHECK-NEXT: %[[O:.*]] = te.dequantize %[[O8]], %[[O_SI]] : tensor<2x4x4x16xf8E4M3FN>, tensor<1xf32> -> tensor<2x4x4x16xbf16>
// CHECK-NEXT: %[[FLAT:.*]] = te.reshape %[[O]]
// CHECK-NEXT: %[[AMAXES:.*]] = te.concat %[[A]], %[[AS]], %[[AO]]
// CHECK:      return %[[FLAT]], %[[LSE]], %{{.*}}, %{{.*}}, %{{.*}}, %[[Q8]], %[[K8]], %[[V8]], %[[O8]], %[[QKV_SI]], %[[O_SI]] :

// Backward: dO cast to E5M2 (HYBRID) with the do slot, then the dp and
// dqkv slots; the FP8 gradients dequantized with dqkv's scale_inv. The
// high-precision q, k, v and output are no longer passed.
// CHECK-LABEL: func.func @dpa_backward(
// CHECK-SAME:  %[[DO:[^:]*]]: tensor<2x4x64xbf16> {te.name = "grad.o"}, %[[BM:[^:]*]]: tensor<2x1x1x4xi1> {te.forward_arg = 3 : i64}, %[[BLSE:[^:]*]]: tensor<2x4x4xf32> {te.forward_result = 1 : i64},
// CHECK-SAME:  %[[BSCALE:[^:]*]]: tensor<3xf32> {te.name = "fp8_meta.bwd.scale"}, %[[BSCALE_INV:[^:]*]]: tensor<3xf32> {te.name = "fp8_meta.bwd.scale_inv"}, %{{[^:]*}}: tensor<4x3xf32> {te.name = "fp8_meta.bwd.amax_history"},
// CHECK-SAME:  %[[BQ8:[^:]*]]: tensor<2x4x4x16xf8E4M3FN> {te.forward_result = 5 : i64}, %[[BK8:[^:]*]]: tensor<2x4x4x16xf8E4M3FN> {te.forward_result = 6 : i64}, %[[BV8:[^:]*]]: tensor<2x4x4x16xf8E4M3FN> {te.forward_result = 7 : i64}, %[[BO8:[^:]*]]: tensor<2x4x4x16xf8E4M3FN> {te.forward_result = 8 : i64},
// CHECK-SAME:  %[[BQKV_SI:[^:]*]]: tensor<1xf32> {te.forward_result = 9 : i64}, %[[BO_SI:[^:]*]]: tensor<1xf32> {te.forward_result = 10 : i64})
// CHECK-NOT:  te.forward_arg = 0
// CHECK:      %[[DO4:.*]] = te.reshape %[[DO]] : tensor<2x4x64xbf16> -> tensor<2x4x4x16xbf16>
// CHECK-NEXT: %[[DO_S:.*]] = te.slice %[[BSCALE]][0]
// CHECK-NEXT: %[[DO8:.*]], %[[ADO:.*]] = te.quantize %[[DO4]], %[[DO_S]] : tensor<2x4x4x16xbf16>, tensor<1xf32> -> tensor<2x4x4x16xf8E5M2>, tensor<1xf32>
// CHECK-NEXT: %[[DO_SI:.*]] = te.slice %[[BSCALE_INV]][0]
// CHECK-NEXT: %[[DP_S:.*]] = te.slice %[[BSCALE]][1]
// CHECK-NEXT: %[[DP_SI:.*]] = te.slice %[[BSCALE_INV]][1]
// CHECK-NEXT: %[[DQKV_S:.*]] = te.slice %[[BSCALE]][2]
// CHECK-NEXT: %[[DQKV_SI:.*]] = te.slice %[[BSCALE_INV]][2]
// CHECK-NEXT: %[[DQ8:.*]], %[[DK8:.*]], %[[DV8:.*]], %[[ADP:.*]], %[[ADQ:.*]], %[[ADK:.*]], %[[ADV:.*]] = te.fp8_attention_bwd %[[DO8]], %[[BQ8]], %[[BK8]], %[[BV8]], %[[BO8]], %[[BLSE]], %[[BQKV_SI]], %[[BO_SI]], %[[DO_SI]], %[[DP_S]], %[[DP_SI]], %[[DQKV_S]] mask(%[[BM]]) {attn_mask_type = #te.attn_mask_type<padding>, qkv_format = #te.qkv_format<bshd>, softmax_scale = 2.500000e-01 : f64}
// CHECK-SAME:  -> (tensor<2x4x4x16xf8E5M2>, tensor<2x4x4x16xf8E5M2>, tensor<2x4x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
// CHECK-NEXT: %[[ADQKV:.*]] = te.concat %[[ADQ]], %[[ADK]], %[[ADV]]
// CHECK-NEXT: %[[A2:.*]] = te.amax %[[ADQKV]]
// CHECK-NEXT: %[[DQ:.*]] = te.dequantize %[[DQ8]], %[[DQKV_SI]] : tensor<2x4x4x16xf8E5M2>, tensor<1xf32> -> tensor<2x4x4x16xbf16>
// CHECK-NEXT: %[[DK:.*]] = te.dequantize %[[DK8]], %[[DQKV_SI]]
// CHECK-NEXT: %[[DV:.*]] = te.dequantize %[[DV8]], %[[DQKV_SI]]
// CHECK-NEXT: te.concat %[[ADO]], %[[ADP]], %[[A2]]
// CHECK:      te.delayed_scaling_update {{.*}} {fp8_type = f8E5M2, recipe = #delayed_scaling}
// CHECK:      return %[[DQ]], %[[DK]], %[[DV]],
func.func @dpa(%q: tensor<2x4x4x16xbf16> {te.name = "q"}, %k: tensor<2x4x4x16xbf16> {te.name = "k"}, %v: tensor<2x4x4x16xbf16> {te.name = "v"}, %m: tensor<2x1x1x4xi1> {te.name = "mask"}) -> (tensor<2x4x64xbf16> {te.name = "o"}) {
  %o = te.dot_product_attention %q, %k, %v mask(%m) {attn_mask_type = #te.attn_mask_type<padding>, fp8_recipe = #dpa, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64} : (tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x1x1x4xi1>) -> tensor<2x4x64xbf16>
  return %o : tensor<2x4x64xbf16>
}

// MultiheadAttention: its GEMMs' four forward slots (x, qkv_weight, the
// attention's output, proj_weight) and the attention's three in program
// order; backward, two GEMM slots (the output's and dQKV's gradients) and
// the attention's three. q, k and v are column ranges of the QKV GEMM's
// output, which the casts read (so the slices are no views for cuDNN).
// No attention dropout under fp8_dpa (docs/fp8-attention.md).
// CHECK-LABEL: func.func @mha(
// CHECK-SAME:  tensor<7xf32> {te.name = "fp8_meta.fwd.scale"}
// CHECK:      %[[QKV:.*]] = te.scaled_matmul
// CHECK:      %[[QS:.*]] = te.slice %[[QKV]][0] : tensor<32x192xbf16> -> tensor<32x64xbf16>
// CHECK-NEXT: %[[Q4:.*]] = te.reshape %[[QS]] : tensor<32x64xbf16> -> tensor<16x2x4x16xbf16>
// CHECK:      %[[S2:.*]] = te.slice %{{.*}}[2] : tensor<7xf32> -> tensor<1xf32>
// CHECK:      te.quantize %[[Q4]], %[[S2]] : tensor<16x2x4x16xbf16>, tensor<1xf32> -> tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>
// CHECK:      te.fp8_attention {{.*}} {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 2.500000e-01 : f64}
// CHECK:      te.scaled_matmul
// CHECK:      te.delayed_scaling_update {{.*}} : (tensor<4x7xf32>, tensor<7xf32>, tensor<7xf32>)
// CHECK-LABEL: func.func @mha_backward(
// CHECK-SAME:  tensor<5xf32> {te.name = "fp8_meta.bwd.scale"}
// CHECK:      te.scaled_matmul
// CHECK:      te.fp8_attention_bwd {{.*}} {attn_mask_type = #te.attn_mask_type<causal>, qkv_format
// CHECK:      %[[DQ:.*]] = te.dequantize
// CHECK-NEXT: %[[DK:.*]] = te.dequantize
// CHECK-NEXT: %[[DV:.*]] = te.dequantize
// CHECK:      te.concat %{{.*}}, %{{.*}}, %{{.*}} : tensor<32x64xbf16>, tensor<32x64xbf16>, tensor<32x64xbf16> -> tensor<32x192xbf16>
// CHECK:      te.delayed_scaling_update {{.*}} : (tensor<4x5xf32>, tensor<5xf32>, tensor<5xf32>)
func.func @mha(%x: tensor<16x2x64xbf16> {te.name = "x"}, %wqkv: tensor<192x64xbf16> {te.name = "qkv_weight", te.parameter}, %wo: tensor<64x64xbf16> {te.name = "proj_weight", te.parameter}) -> (tensor<16x2x64xbf16> {te.name = "y"}) {
  %y = te.multihead_attention %x qkv_weight(%wqkv) proj_weight(%wo) {num_attention_heads = 4 : i64, attention_dropout = 0.0 : f64, fp8_recipe = #dpa} : (tensor<16x2x64xbf16>, tensor<192x64xbf16>, tensor<64x64xbf16>) -> tensor<16x2x64xbf16>
  return %y : tensor<16x2x64xbf16>
}

// Inference: the same forward, nothing saved.
// INF-LABEL: func.func @dpa(
// INF-NOT:   saved
// INF:       te.fp8_attention
// INF:       te.dequantize
// INF-LABEL: func.func @mha(
// INF:       te.fp8_attention {{.*}} {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>

// recipe=none: everything in high precision; the attention ops lose their
// recipe, as the GEMMs do.
// NONE-LABEL: func.func @dpa(
// NONE:       te.attention
// NONE-LABEL: func.func @dpa_backward(
// NONE:       te.attention_bwd

// An overriding recipe without fp8_dpa: FP8 GEMMs, bf16 attention.
// NODPA-LABEL: func.func @dpa(
// NODPA-NOT:   fp8_meta
// NODPA:       te.attention %{{.*}} {attn_mask_type = #te.attn_mask_type<padding>, qkv_format
// NODPA-LABEL: func.func @mha(
// NODPA-SAME:  tensor<4xf32> {te.name = "fp8_meta.fwd.scale"}
// NODPA:       te.attention
// NODPA-LABEL: func.func @mha_backward(
// NODPA-SAME:  tensor<2xf32> {te.name = "fp8_meta.bwd.scale"}
// NODPA:       te.attention_bwd

// An overriding recipe with fp8_dpa runs attention without a recipe of its
// own in FP8 too.
// OVERRIDE-LABEL: func.func @plain(
// OVERRIDE-SAME:  tensor<3xf32> {te.name = "fp8_meta.fwd.scale"}
// OVERRIDE:       te.fp8_attention
// OVERRIDE-LABEL: func.func @plain_backward(
// OVERRIDE-SAME:  tensor<3xf32> {te.name = "fp8_meta.bwd.scale"}
// OVERRIDE:       te.fp8_attention_bwd
func.func @plain(%q: tensor<16x2x4x32xbf16> {te.name = "q"}) -> (tensor<16x2x128xbf16> {te.name = "o"}) {
  %o = te.dot_product_attention %q, %q, %q : (tensor<16x2x4x32xbf16>, tensor<16x2x4x32xbf16>, tensor<16x2x4x32xbf16>) -> tensor<16x2x128xbf16>
  return %o : tensor<16x2x128xbf16>
}
