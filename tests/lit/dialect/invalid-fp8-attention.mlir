// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of te.dequantize, te.fp8_attention and te.fp8_attention_bwd
// (docs/fp8-attention.md). sbhd, s = 16, b = 2, 4 heads of head_dim 16.

func.func @dequantize_bf16_input(%x: tensor<32x64xbf16>, %si: tensor<1xf32>) {
  // expected-error @+1 {{'input' must be an f8E4M3FN or f8E5M2 tensor, got 'tensor<32x64xbf16>'}}
  %y = te.dequantize %x, %si : tensor<32x64xbf16>, tensor<1xf32> -> tensor<32x64xbf16>
  return
}

// -----

func.func @dequantize_scale_vector(%x: tensor<32x64xf8E4M3FN>, %si: tensor<2xf32>) {
  // expected-error @+1 {{'scale_inv' must be 'tensor<1xf32>', got 'tensor<2xf32>'}}
  %y = te.dequantize %x, %si : tensor<32x64xf8E4M3FN>, tensor<2xf32> -> tensor<32x64xbf16>
  return
}

// -----

func.func @dequantize_shape(%x: tensor<32x64xf8E4M3FN>, %si: tensor<1xf32>) {
  // expected-error @+1 {{'output' must be a bf16/f16/f32 tensor shaped like 'input', got 'tensor<64x32xbf16>'}}
  %y = te.dequantize %x, %si : tensor<32x64xf8E4M3FN>, tensor<1xf32> -> tensor<64x32xbf16>
  return
}

// -----

func.func @dequantize_fp8_output(%x: tensor<32x64xf8E4M3FN>, %si: tensor<1xf32>) {
  // expected-error @+1 {{'output' must be a bf16/f16/f32 tensor shaped like 'input', got 'tensor<32x64xf8E5M2>'}}
  %y = te.dequantize %x, %si : tensor<32x64xf8E4M3FN>, tensor<1xf32> -> tensor<32x64xf8E5M2>
  return
}

// -----

func.func @fp8_attention_bf16_query(%q: tensor<16x2x4x16xbf16>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{'query' must be f8E4M3FN, got 'tensor<16x2x4x16xbf16>'}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_e5m2_value(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E5M2>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{'value' must be f8E4M3FN, got 'tensor<16x2x4x16xf8E5M2>'}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_thd(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{takes sbhd or bshd; packed sequences (qkv_format = thd) are not supported by FP8 attention}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<thd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

// te.attention's shape rules: key/value of another batch.
func.func @fp8_attention_kv_batch(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x3x4x16xf8E4M3FN>, %v: tensor<16x3x4x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{key/value must share query's batch and head dim, with query heads a multiple of theirs}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x3x4x16xf8E4M3FN>, tensor<16x3x4x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_kv_types(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x2x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{key and value must have one type}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x2x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_head_dim_24(%q: tensor<16x2x4x24xf8E4M3FN>, %k: tensor<16x2x4x24xf8E4M3FN>, %v: tensor<16x2x4x24xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{head dim must be a multiple of 16 and at most 256 for FP8 attention, got 24}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x24xf8E4M3FN>, tensor<16x2x4x24xf8E4M3FN>, tensor<16x2x4x24xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x24xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_head_dim_272(%q: tensor<16x2x4x272xf8E4M3FN>, %k: tensor<16x2x4x272xf8E4M3FN>, %v: tensor<16x2x4x272xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{head dim must be a multiple of 16 and at most 256 for FP8 attention, got 272}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x272xf8E4M3FN>, tensor<16x2x4x272xf8E4M3FN>, tensor<16x2x4x272xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x272xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_scale_vector(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<2xf32>) {
  // expected-error @+1 {{'o_scale' must be 'tensor<1xf32>', got 'tensor<2xf32>'}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>, tensor<2xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_bf16_output(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{'output' must be 'tensor<16x2x4x16xf8E4M3FN>', got 'tensor<16x2x4x16xbf16>'}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_lse(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{'softmax_lse' must be 'tensor<2x4x16xf32>', got 'tensor<2x16x4xf32>'}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x16x4xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_amax(%q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>) {
  // expected-error @+1 {{'amax_o' must be 'tensor<1xf32>', got 'tensor<1xbf16>'}}
  %o:4 = te.fp8_attention %q, %k, %v, %s0, %s3
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xbf16>)
  return
}

// -----

func.func @fp8_attention_bwd_bf16_grad(%g: tensor<16x2x4x16xbf16>, %q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %o: tensor<16x2x4x16xf8E4M3FN>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{'grad' must be an f8E4M3FN or f8E5M2 tensor of query's shape, got 'tensor<16x2x4x16xbf16>'}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_bwd_grad_shape(%g: tensor<16x2x4x32xf8E5M2>, %q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %o: tensor<16x2x4x16xf8E4M3FN>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{'grad' must be an f8E4M3FN or f8E5M2 tensor of query's shape, got 'tensor<16x2x4x32xf8E5M2>'}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x32xf8E5M2>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

// The gradients are in grad's FP8 type.
func.func @fp8_attention_bwd_query_grad_type(%g: tensor<16x2x4x16xf8E5M2>, %q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %o: tensor<16x2x4x16xf8E4M3FN>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{'query_grad' must be 'tensor<16x2x4x16xf8E5M2>', got 'tensor<16x2x4x16xf8E4M3FN>'}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_bwd_value_grad_bf16(%g: tensor<16x2x4x16xf8E5M2>, %q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %o: tensor<16x2x4x16xf8E4M3FN>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{'value_grad' must be 'tensor<16x2x4x16xf8E5M2>', got 'tensor<16x2x4x16xbf16>'}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xbf16>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_bwd_dp_scale(%g: tensor<16x2x4x16xf8E5M2>, %q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %o: tensor<16x2x4x16xf8E4M3FN>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1x1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{'dp_scale' must be 'tensor<1xf32>', got 'tensor<1x1xf32>'}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1x1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_bwd_output(%g: tensor<16x2x4x16xf8E5M2>, %q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %o: tensor<16x2x4x16xf8E5M2>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{'output' must be 'tensor<16x2x4x16xf8E4M3FN>', got 'tensor<16x2x4x16xf8E5M2>'}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E5M2>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @fp8_attention_bwd_amax_dv(%g: tensor<16x2x4x16xf8E5M2>, %q: tensor<16x2x4x16xf8E4M3FN>, %k: tensor<16x2x4x16xf8E4M3FN>, %v: tensor<16x2x4x16xf8E4M3FN>, %o: tensor<16x2x4x16xf8E4M3FN>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{'amax_dv' must be 'tensor<1xf32>', got 'tensor<2xf32>'}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<16x2x4x16xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<2xf32>)
  return
}

// -----

func.func @fp8_attention_bwd_head_dim(%g: tensor<16x2x4x8xf8E5M2>, %q: tensor<16x2x4x8xf8E4M3FN>, %k: tensor<16x2x4x8xf8E4M3FN>, %v: tensor<16x2x4x8xf8E4M3FN>, %o: tensor<16x2x4x8xf8E4M3FN>, %lse: tensor<2x4x16xf32>, %s0: tensor<1xf32>, %s1: tensor<1xf32>, %s2: tensor<1xf32>, %s3: tensor<1xf32>, %s4: tensor<1xf32>, %s5: tensor<1xf32>, %s6: tensor<1xf32>, %s7: tensor<1xf32>) {
  // expected-error @+1 {{head dim must be a multiple of 16 and at most 256 for FP8 attention, got 8}}
  %r:7 = te.fp8_attention_bwd %g, %q, %k, %v, %o, %lse, %s0, %s1, %s2, %s5, %s6, %s7
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64}
      : (tensor<16x2x4x8xf8E5M2>, tensor<16x2x4x8xf8E4M3FN>, tensor<16x2x4x8xf8E4M3FN>, tensor<16x2x4x8xf8E4M3FN>, tensor<16x2x4x8xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
        -> (tensor<16x2x4x8xf8E5M2>, tensor<16x2x4x8xf8E5M2>, tensor<16x2x4x8xf8E5M2>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

// te.attention's recipe asks for FP8 attention.
func.func @attention_recipe_without_fp8_dpa(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{'fp8_recipe' runs the attention in FP8, so it needs fp8_dpa = true}}
  %o, %lse = te.attention %q, %q, %q {attn_mask_type = #te.attn_mask_type<causal>, fp8_recipe = #te.delayed_scaling<>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64} : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>) -> (tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @attention_current_scaling(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{attribute 'fp8_recipe' failed to satisfy constraint}}
  %o, %lse = te.attention %q, %q, %q {attn_mask_type = #te.attn_mask_type<causal>, fp8_recipe = #te.current_scaling<>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64} : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>) -> (tensor<16x2x4x16xbf16>, tensor<2x4x16xf32>)
  return
}

// -----

// DotProductAttention runs no GEMM: only fp8_dpa gives its recipe a meaning.
func.func @dpa_current_scaling(%q: tensor<16x2x4x16xbf16>) {
  // expected-error @+1 {{runs no GEMM, so its 'fp8_recipe' must be a #te.delayed_scaling with fp8_dpa = true (FP8 attention), got #te.current_scaling<>}}
  %o = te.dot_product_attention %q, %q, %q {fp8_recipe = #te.current_scaling<>}
      : (tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>, tensor<16x2x4x16xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @fp8_attention_dropout(%q: tensor<16x2x4x16xf8E4M3FN>, %s: tensor<1xf32>, %rng: tensor<2xi64>) {
  // expected-error @+1 {{'dropout' must be 0: FP8 attention does not support attention dropout, got 1.000000e-01}}
  %o:4 = te.fp8_attention %q, %q, %q, %s, %s rng(%rng)
      {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64, dropout = 0.1 : f64}
      : (tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<16x2x4x16xf8E4M3FN>, tensor<1xf32>, tensor<1xf32>, tensor<2xi64>)
        -> (tensor<16x2x4x16xf8E4M3FN>, tensor<2x4x16xf32>, tensor<1xf32>, tensor<1xf32>)
  return
}
