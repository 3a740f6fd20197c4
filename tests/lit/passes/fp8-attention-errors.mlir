// RUN: te-opt %s --te-place-scaling -verify-diagnostics -split-input-file

// What FP8 attention (fp8_dpa, docs/fp8-attention.md) refuses, at the
// attention: each message names the attribute. bshd, b = 2, s = 4, 4 heads
// of head_dim 16 unless noted.

#dpa = #te.delayed_scaling<fp8_dpa = true>

func.func @bias(%q: tensor<2x4x4x16xbf16>, %b: tensor<1x4x4x4xbf16>) -> tensor<2x4x4x16xbf16> {
  // expected-error @+1 {{'te.attention' op runs in FP8 (fp8_dpa), which does not support bias_type = post_scale_bias (an attention bias or ALiBi)}}
  %o, %lse = te.attention %q, %q, %q bias(%b) {attn_mask_type = #te.attn_mask_type<no_mask>, bias_type = #te.attn_bias_type<post_scale_bias>, fp8_recipe = #dpa, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64} : (tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<1x4x4x4xbf16>) -> (tensor<2x4x4x16xbf16>, tensor<2x4x4xf32>)
  return %o : tensor<2x4x4x16xbf16>
}

// -----

#dpa = #te.delayed_scaling<fp8_dpa = true>

func.func @alibi(%q: tensor<2x4x4x16xbf16>) -> tensor<2x4x4x16xbf16> {
  // expected-error @+1 {{'te.attention' op runs in FP8 (fp8_dpa), which does not support bias_type = alibi (an attention bias or ALiBi)}}
  %o, %lse = te.attention %q, %q, %q {attn_mask_type = #te.attn_mask_type<causal>, bias_type = #te.attn_bias_type<alibi>, fp8_recipe = #dpa, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64} : (tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>) -> (tensor<2x4x4x16xbf16>, tensor<2x4x4xf32>)
  return %o : tensor<2x4x4x16xbf16>
}

// -----

#dpa = #te.delayed_scaling<fp8_dpa = true>

// Packed sequences: 8 tokens of 2 sequences.
func.func @thd(%q: tensor<8x4x16xbf16>, %cu: tensor<3xi32>) -> tensor<8x4x16xbf16> {
  // expected-error @+1 {{'te.attention' op runs in FP8 (fp8_dpa), which does not support qkv_format = thd (packed sequences)}}
  %o, %lse = te.attention %q, %q, %q cu_seqlens_q(%cu) {attn_mask_type = #te.attn_mask_type<padding>, fp8_recipe = #dpa, max_seqlen_kv = 4 : i64, max_seqlen_q = 4 : i64, qkv_format = #te.qkv_format<thd>, softmax_scale = 0.25 : f64} : (tensor<8x4x16xbf16>, tensor<8x4x16xbf16>, tensor<8x4x16xbf16>, tensor<3xi32>) -> (tensor<8x4x16xbf16>, tensor<2x4x4xf32>)
  return %o : tensor<8x4x16xbf16>
}

// -----

#dpa = #te.delayed_scaling<fp8_dpa = true>

func.func @window(%q: tensor<2x4x4x16xbf16>) -> tensor<2x4x4x16xbf16> {
  // expected-error @+1 {{'te.attention' op runs in FP8 (fp8_dpa), which does not support window_size = [2, 0] (sliding-window attention)}}
  %o, %lse = te.attention %q, %q, %q {attn_mask_type = #te.attn_mask_type<causal>, fp8_recipe = #dpa, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64, window_size = array<i64: 2, 0>} : (tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>) -> (tensor<2x4x4x16xbf16>, tensor<2x4x4xf32>)
  return %o : tensor<2x4x4x16xbf16>
}

// -----

#dpa = #te.delayed_scaling<fp8_dpa = true>

func.func @head_dim_24(%q: tensor<2x4x4x24xbf16>) -> tensor<2x4x4x24xbf16> {
  // expected-error @+1 {{'te.attention' op runs in FP8 (fp8_dpa), which does not support head dim 24 (it needs a multiple of 16, at most 256)}}
  %o, %lse = te.attention %q, %q, %q {attn_mask_type = #te.attn_mask_type<causal>, fp8_recipe = #dpa, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64} : (tensor<2x4x4x24xbf16>, tensor<2x4x4x24xbf16>, tensor<2x4x4x24xbf16>) -> (tensor<2x4x4x24xbf16>, tensor<2x4x4xf32>)
  return %o : tensor<2x4x4x24xbf16>
}

// -----

#dpa = #te.delayed_scaling<fp8_dpa = true>

func.func @head_dim_272(%q: tensor<2x4x1x272xbf16>) -> tensor<2x4x1x272xbf16> {
  // expected-error @+1 {{'te.attention' op runs in FP8 (fp8_dpa), which does not support head dim 272 (it needs a multiple of 16, at most 256)}}
  %o, %lse = te.attention %q, %q, %q {attn_mask_type = #te.attn_mask_type<causal>, fp8_recipe = #dpa, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64} : (tensor<2x4x1x272xbf16>, tensor<2x4x1x272xbf16>, tensor<2x4x1x272xbf16>) -> (tensor<2x4x1x272xbf16>, tensor<2x1x4xf32>)
  return %o : tensor<2x4x1x272xbf16>
}

// -----

#dpa = #te.delayed_scaling<fp8_dpa = true>

// A backward whose attention runs in FP8 while its forward's does not (an
// fp8_recipe written on one of the pair only).
func.func @forward(%q: tensor<2x4x4x16xbf16> {te.name = "q"}) -> (tensor<2x4x4x16xbf16> {te.name = "o"}, tensor<2x4x4xf32> {te.name = "saved.0"}) {
  %o, %lse = te.attention %q, %q, %q {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64} : (tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>) -> (tensor<2x4x4x16xbf16>, tensor<2x4x4xf32>)
  return %o, %lse : tensor<2x4x4x16xbf16>, tensor<2x4x4xf32>
}

func.func @forward_backward(%do: tensor<2x4x4x16xbf16> {te.name = "grad.o"}, %q: tensor<2x4x4x16xbf16> {te.forward_arg = 0 : i64}, %o: tensor<2x4x4x16xbf16> {te.forward_result = 0 : i64}, %lse: tensor<2x4x4xf32> {te.forward_result = 1 : i64}) -> (tensor<2x4x4x16xbf16> {te.name = "grad.q"}) attributes {te.backward_of = @forward} {
  // expected-error @+1 {{'te.attention_bwd' op is the gradient of an attention that does not run in FP8; fp8_dpa must run both}}
  %dq, %dk, %dv = te.attention_bwd %do, %q, %q, %q, %o, %lse {attn_mask_type = #te.attn_mask_type<causal>, fp8_recipe = #dpa, qkv_format = #te.qkv_format<bshd>, softmax_scale = 0.25 : f64} : (tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4xf32>) -> (tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>, tensor<2x4x4x16xbf16>)
  return %dq : tensor<2x4x4x16xbf16>
}
