// FP8 attention (docs/fp8-attention.md) through te-compile's last stages,
// on hand-written IR shaped as te-place-scaling writes it: te.fp8_attention
// and te.fp8_attention_bwd are library steps (no kernel) with the ops'
// operands and results in order; te.dequantize is an element-wise kernel,
// and fuses with the cast the projection GEMM needs (the reshape to
// [tokens, hidden] moves to its FP8 input first).
// RUN: te-compile %s --inference --emit=fused | FileCheck %s --check-prefix=FUSED
// RUN: te-compile %s --inference --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: te-compile %s --inference --stats | FileCheck %s --check-prefix=STATS
// RUN: rm -rf %t && te-compile %s --inference -o %t 2>/dev/null
// RUN: FileCheck %s --check-prefix=PLAN < %t/plan.json

// FUSED-LABEL: func.func @fwd(
// FUSED:       %[[O8:.*]], %{{.*}}, %{{.*}}, %{{.*}} = te.fp8_attention
// FUSED-NEXT:  %[[R:.*]] = te.reshape %[[O8]] : tensor<16x2x4x64xf8E4M3FN> -> tensor<32x256xf8E4M3FN>
// FUSED-NEXT:  te.fused "cast_transpose"(%[[R]], %arg8, %arg9)
// FUSED-NEXT:  ^bb0(
// FUSED-NEXT:    te.dequantize {{.*}} -> tensor<32x256xbf16>
// FUSED-NEXT:    te.quantize
// FUSED-NEXT:    te.transpose
// FUSED-NEXT:    te.yield
// FUSED-LABEL: func.func @bwd(
// FUSED:       %[[DQ:[^,]*]], {{.*}} = te.fp8_attention_bwd
// FUSED-NEXT:  %[[DQ2:.*]] = te.reshape %[[DQ]] : tensor<16x2x4x64xf8E5M2> -> tensor<32x256xf8E5M2>
// FUSED-NEXT:  te.dequantize %[[DQ2]], %arg15 : tensor<32x256xf8E5M2>, tensor<1xf32> -> tensor<32x256xbf16>

// The forward: the three casts of q, k, v, then (after the library call)
// the dequantization of O with the projection input's cast and transpose:
// FP8 in, scaled by o_scale_inv, the amax of the dequantized value, FP8 out.
// CUDA:      ===== kernel fwd_quantize_0:
// CUDA:      ===== kernel fwd_quantize_1:
// CUDA:      ===== kernel fwd_quantize_2:
// CUDA-NOT:  ===== kernel fwd_fp8_attention
// CUDA:      ===== kernel fwd_cast_transpose_0: grid (4, 1, 1), block (256, 1, 1)
// CUDA-NEXT: // params: in v0; in o_scale_inv; in proj_input_scale; out output_5; out amax_6 (zeroed); out v1_2;
// CUDA:      const tj_e4m3 *__restrict__ v0,
// CUDA:      const float t0 = v0_in[u][i] * o_scale_inv_v;
// CUDA-NEXT: amax0 = fmaxf(amax0, fabsf(t0));
// CUDA-NEXT: const float t1 = t0 * proj_input_scale_v;
// CUDA:      tj_transpose_8x4(
// The backward: dO's cast, then dq, dk, dv dequantized (flat, 8 FP8
// elements a vector) before their concat.
// CUDA:      ===== kernel bwd_quantize_0:
// CUDA-NOT:  ===== kernel bwd_fp8_attention
// CUDA:      ===== kernel bwd_dequantize_0: grid (1, 1, 1), block (256, 1, 1)
// CUDA-NEXT: // params: in v1; in dqkv_scale_inv; out v2;
// CUDA:      const tj_e5m2 *__restrict__ v1,
// CUDA-NEXT: const float *__restrict__ dqkv_scale_inv,
// CUDA-NEXT: tj_bf16 *__restrict__ v2,
// CUDA:      constexpr int kVec = 8, kUnroll = 4;
// CUDA:      tj_load(v1_in[u], v1 + row * 256 + col);
// CUDA:      const float t0 = v1_in[u][i] * dqkv_scale_inv_v;
// CUDA-NEXT: v2_out[i] = t0;
// CUDA:      tj_store(v2 + row * 256 + col, v2_out);
// CUDA:      ===== kernel bwd_dequantize_1:
// CUDA:      ===== kernel bwd_dequantize_2:
// CUDA:      ===== kernel bwd_concat_0:

// STATS:      function kernels GEMMs FP8 GEMMs attention
// STATS-NEXT: fwd 4 0 0 1
// STATS-NEXT: bwd 5 0 0 1

// The steps' operands and results are value ids in the ops' order. In
// @fwd, ids 0-9 are the arguments, 10-19 the results (o is 12, lse 13,
// amax_s 17, amax_o 18) and 20-22 the casts of q, k, v in the arena.
// PLAN:      "name": "fwd",
// PLAN:      "name": "fwd_quantize_2",
// PLAN:      "attributes": {
// PLAN-NEXT:   "attn_mask_type": "#te.attn_mask_type<causal>",
// PLAN-NEXT:   "dropout": "0.000000e+00 : f64",
// PLAN-NEXT:   "qkv_format": "#te.qkv_format<sbhd>",
// PLAN-NEXT:   "softmax_scale": "1.250000e-01 : f64",
// PLAN-NEXT:   "stream": "0 : i64",
// PLAN:      },
// PLAN-NEXT: "kind": "fp8_attention",
// PLAN-NEXT: "operands": [
// PLAN-NEXT:   20,
// PLAN-NEXT:   21,
// PLAN-NEXT:   22,
// PLAN-NEXT:   4,
// PLAN-NEXT:   7
// PLAN-NEXT: ],
// PLAN-NEXT: "results": [
// PLAN-NEXT:   12,
// PLAN-NEXT:   13,
// PLAN-NEXT:   17,
// PLAN-NEXT:   18
// PLAN-NEXT: ]
// PLAN-NEXT: },
// PLAN-NOT:  "token_strides"
// PLAN:      "name": "fwd_cast_transpose_0",
// In @bwd, ids 0-17 are the arguments (the mask 16; s_scale, s_scale_inv
// and the RNG state unused: P's scale is fixed, there is no dropout),
// 18-23 the results (amax_dp 20, amax_dq 21, amax_dk 22, amax_dv 23), 25
// the cast of dO and 26-28 dq, dk, dv in the arena.
// PLAN:      "name": "bwd",
// PLAN:      "name": "bwd_quantize_0",
// PLAN:      "attributes": {
// PLAN-NEXT:   "attn_mask_type": "#te.attn_mask_type<padding_causal>",
// PLAN-NEXT:   "dropout": "0.000000e+00 : f64",
// PLAN-NEXT:   "qkv_format": "#te.qkv_format<sbhd>",
// PLAN-NEXT:   "softmax_scale": "1.250000e-01 : f64",
// PLAN-NEXT:   "stream": "2 : i64",
// PLAN:      },
// PLAN-NEXT: "kind": "fp8_attention_bwd",
// PLAN-NEXT: "operands": [
// PLAN-NEXT:   25,
// PLAN-NEXT:   1,
// PLAN-NEXT:   2,
// PLAN-NEXT:   3,
// PLAN-NEXT:   4,
// PLAN-NEXT:   5,
// PLAN-NEXT:   6,
// PLAN-NEXT:   7,
// PLAN-NEXT:   9,
// PLAN-NEXT:   12,
// PLAN-NEXT:   13,
// PLAN-NEXT:   14,
// PLAN-NEXT:   16
// PLAN-NEXT: ],
// PLAN-NEXT: "results": [
// PLAN-NEXT:   26,
// PLAN-NEXT:   27,
// PLAN-NEXT:   28,
// PLAN-NEXT:   20,
// PLAN-NEXT:   21,
// PLAN-NEXT:   22,
// PLAN-NEXT:   23
// PLAN-NEXT: ]
// PLAN-NEXT: },
// PLAN-NOT:  "token_strides"
// PLAN:      "name": "bwd_dequantize_0",

func.func @fwd(%q: tensor<16x2x4x64xbf16> {te.name = "q"},
               %k: tensor<16x2x2x64xbf16> {te.name = "k"},
               %v: tensor<16x2x2x64xbf16> {te.name = "v"},
               %qkv_s: tensor<1xf32> {te.name = "qkv_scale"},
               %qkv_si: tensor<1xf32> {te.name = "qkv_scale_inv"},
               %s_s: tensor<1xf32> {te.name = "s_scale (unused)"},
               %s_si: tensor<1xf32> {te.name = "s_scale_inv (unused)"},
               %o_s: tensor<1xf32> {te.name = "o_scale"},
               %o_si: tensor<1xf32> {te.name = "o_scale_inv"},
               %x_s: tensor<1xf32> {te.name = "proj_input_scale"})
    -> (tensor<32x256xf8E4M3FN>, tensor<256x32xf8E4M3FN>,
        tensor<16x2x4x64xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>,
        tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
        tensor<1xf32>) {
  %q8, %aq = te.quantize %q, %qkv_s : tensor<16x2x4x64xbf16>, tensor<1xf32> -> tensor<16x2x4x64xf8E4M3FN>, tensor<1xf32>
  %k8, %ak = te.quantize %k, %qkv_s : tensor<16x2x2x64xbf16>, tensor<1xf32> -> tensor<16x2x2x64xf8E4M3FN>, tensor<1xf32>
  %v8, %av = te.quantize %v, %qkv_s : tensor<16x2x2x64xbf16>, tensor<1xf32> -> tensor<16x2x2x64xf8E4M3FN>, tensor<1xf32>
  %o8, %lse, %amax_s, %amax_o = te.fp8_attention %q8, %k8, %v8, %qkv_si, %o_s
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.125 : f64}
      : (tensor<16x2x4x64xf8E4M3FN>, tensor<16x2x2x64xf8E4M3FN>, tensor<16x2x2x64xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x64xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  %o = te.dequantize %o8, %o_si : tensor<16x2x4x64xf8E4M3FN>, tensor<1xf32> -> tensor<16x2x4x64xbf16>
  %o2 = te.reshape %o : tensor<16x2x4x64xbf16> -> tensor<32x256xbf16>
  %x8, %ax = te.quantize %o2, %x_s : tensor<32x256xbf16>, tensor<1xf32> -> tensor<32x256xf8E4M3FN>, tensor<1xf32>
  %xt = te.transpose %x8 : tensor<32x256xf8E4M3FN> -> tensor<256x32xf8E4M3FN>
  return %x8, %xt, %o8, %lse, %aq, %ak, %av, %amax_s, %amax_o, %ax
      : tensor<32x256xf8E4M3FN>, tensor<256x32xf8E4M3FN>, tensor<16x2x4x64xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>
}

func.func @bwd(%dy: tensor<32x256xbf16> {te.name = "grad.output"},
               %q8: tensor<16x2x4x64xf8E4M3FN> {te.name = "saved.q"},
               %k8: tensor<16x2x2x64xf8E4M3FN> {te.name = "saved.k"},
               %v8: tensor<16x2x2x64xf8E4M3FN> {te.name = "saved.v"},
               %o8: tensor<16x2x4x64xf8E4M3FN> {te.name = "saved.o"},
               %lse: tensor<2x4x16xf32> {te.name = "saved.lse"},
               %qkv_si: tensor<1xf32> {te.name = "qkv_scale_inv"},
               %o_si: tensor<1xf32> {te.name = "o_scale_inv"},
               %do_s: tensor<1xf32> {te.name = "do_scale"},
               %do_si: tensor<1xf32> {te.name = "do_scale_inv"},
               %s_s: tensor<1xf32> {te.name = "s_scale"},
               %s_si: tensor<1xf32> {te.name = "s_scale_inv"},
               %dp_s: tensor<1xf32> {te.name = "dp_scale"},
               %dp_si: tensor<1xf32> {te.name = "dp_scale_inv"},
               %dqkv_s: tensor<1xf32> {te.name = "dqkv_scale"},
               %dqkv_si: tensor<1xf32> {te.name = "dqkv_scale_inv"},
               %mask: tensor<2x1x1x16xi1> {te.name = "attention_mask"},
               %rng: tensor<2xi64> {te.name = "rng_state"})
    -> (tensor<32x512xbf16>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>,
        tensor<1xf32>, tensor<1xf32>) {
  %do = te.reshape %dy : tensor<32x256xbf16> -> tensor<16x2x4x64xbf16>
  %do8, %ado = te.quantize %do, %do_s : tensor<16x2x4x64xbf16>, tensor<1xf32> -> tensor<16x2x4x64xf8E5M2>, tensor<1xf32>
  %dq8, %dk8, %dv8, %adp, %adq, %adk, %adv = te.fp8_attention_bwd %do8, %q8, %k8, %v8, %o8, %lse, %qkv_si, %o_si, %do_si, %dp_s, %dp_si, %dqkv_s mask(%mask)
      {attn_mask_type = #te.attn_mask_type<padding_causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.125 : f64, stream = 2 : i64}
      : (tensor<16x2x4x64xf8E5M2>, tensor<16x2x4x64xf8E4M3FN>, tensor<16x2x2x64xf8E4M3FN>, tensor<16x2x2x64xf8E4M3FN>, tensor<16x2x4x64xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<2x1x1x16xi1>)
        -> (tensor<16x2x4x64xf8E5M2>, tensor<16x2x2x64xf8E5M2>, tensor<16x2x2x64xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  %dq = te.dequantize %dq8, %dqkv_si : tensor<16x2x4x64xf8E5M2>, tensor<1xf32> -> tensor<16x2x4x64xbf16>
  %dk = te.dequantize %dk8, %dqkv_si : tensor<16x2x2x64xf8E5M2>, tensor<1xf32> -> tensor<16x2x2x64xbf16>
  %dv = te.dequantize %dv8, %dqkv_si : tensor<16x2x2x64xf8E5M2>, tensor<1xf32> -> tensor<16x2x2x64xbf16>
  %dq2 = te.reshape %dq : tensor<16x2x4x64xbf16> -> tensor<32x256xbf16>
  %dk2 = te.reshape %dk : tensor<16x2x2x64xbf16> -> tensor<32x128xbf16>
  %dv2 = te.reshape %dv : tensor<16x2x2x64xbf16> -> tensor<32x128xbf16>
  %dqkv = te.concat %dq2, %dk2, %dv2 : tensor<32x256xbf16>, tensor<32x128xbf16>, tensor<32x128xbf16> -> tensor<32x512xbf16>
  return %dqkv, %ado, %adp, %adq, %adk, %adv
      : tensor<32x512xbf16>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>
}
