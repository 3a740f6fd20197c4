// RUN: te-opt %s --te-autodiff --te-place-scaling -verify-diagnostics -split-input-file

// Grouped GEMMs (GroupedLinear, docs/grouped-linear.md) that te-autodiff
// and te-place-scaling refuse.

#bs = #te.block_scaling<x_block_scaling_dim = 2, w_block_scaling_dim = 1>

// Float8BlockScaling casts the token segments (x, dY) in 1-D blocks only
// (te.grouped_linear's verifier says so too; a grouped GEMM written by hand
// or a `recipe` override reaches te-place-scaling without it).
func.func @block_scaling_x_2d(%x: tensor<32x64xbf16>, %m: tensor<4xi32>, %w: tensor<4x48x64xbf16>) -> tensor<32x48xbf16> {
  // expected-error @+1 {{'te.grouped_matmul' op is a grouped GEMM (GroupedLinear), whose token segments Float8BlockScaling casts in 1-D blocks; got x_block_scaling_dim = 2 (use 1)}}
  %y = te.grouped_matmul %x, %w, %m {fp8_recipe = #bs, role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x64xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>) -> tensor<32x48xbf16>
  return %y : tensor<32x48xbf16>
}

// -----

#bs = #te.block_scaling<grad_block_scaling_dim = 2, w_block_scaling_dim = 1>

func.func @block_scaling_grad_2d(%x: tensor<32x64xbf16>, %m: tensor<4xi32>, %w: tensor<4x48x64xbf16>) -> tensor<32x48xbf16> {
  // expected-error @+1 {{'te.grouped_matmul' op is a grouped GEMM (GroupedLinear), whose token segments Float8BlockScaling casts in 1-D blocks; got grad_block_scaling_dim = 2 (use 1)}}
  %y = te.grouped_matmul %x, %w, %m {fp8_recipe = #bs, role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x64xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>) -> tensor<32x48xbf16>
  return %y : tensor<32x48xbf16>
}

// -----

#bs = #te.block_scaling<>

// FP8 weights (fp8_weights, fp8_model_init) have one scale per expert,
// which Float8BlockScaling's grouped GEMMs cannot read.
func.func @fp8_weights_block(%x: tensor<32x64xbf16>, %m: tensor<4xi32>, %w: tensor<4x48x64xbf16> {te.fp8_weight, te.name = "experts.weight"}) -> tensor<32x48xbf16> {
  // expected-error @+1 {{'te.grouped_matmul' op reads FP8 weight 'experts.weight' (fp8_weights), which Float8BlockScaling does not support yet; use DelayedScaling or Float8CurrentScaling}}
  %y = te.grouped_matmul %x, %w, %m {fp8_recipe = #bs, role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x64xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>) -> tensor<32x48xbf16>
  return %y : tensor<32x48xbf16>
}

// -----

// Only FP8 grouped GEMMs read FP8 weights.
func.func @fp8_weights_no_recipe(%x: tensor<32x64xbf16>, %m: tensor<4xi32>, %w: tensor<4x48x64xbf16> {te.fp8_weight, te.name = "experts.weight"}) -> tensor<32x48xbf16> {
  // expected-error @+1 {{'te.grouped_matmul' op reads FP8 weight 'experts.weight' (fp8_weights), but only FP8 GEMMs can read it; give the layer an FP8 recipe or drop fp8_weights}}
  %y = te.grouped_matmul %x, %w, %m {role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x64xbf16>, tensor<4x48x64xbf16>, tensor<4xi32>) -> tensor<32x48xbf16>
  return %y : tensor<32x48xbf16>
}

// -----

#cs = #te.current_scaling<>

// An FP8 grouped GEMM needs K divisible by 16.
func.func @fprop_k(%x: tensor<32x24xbf16>, %m: tensor<4xi32>, %w: tensor<4x48x24xbf16>) -> tensor<32x48xbf16> {
  // expected-error @+1 {{'te.grouped_matmul' op grouped fprop GEMM in FP8 needs its contracting dim divisible by 16 and its output width by 8, got K = 24 and N = 48}}
  %y = te.grouped_matmul %x, %w, %m {fp8_recipe = #cs, role = #te.gemm_role<fprop>, transpose_b} : (tensor<32x24xbf16>, tensor<4x48x24xbf16>, tensor<4xi32>) -> tensor<32x48xbf16>
  return %y : tensor<32x48xbf16>
}

// -----

// The contraction form (a wgrad GEMM) has no gradient rule.
func.func @contraction(%dy: tensor<32x48xbf16>, %x: tensor<32x64xbf16>, %m: tensor<4xi32>) -> tensor<4x48x64xbf16> {
  // expected-error @+1 {{'te.grouped_matmul' op in the contraction form (a wgrad GEMM) cannot be differentiated by te-autodiff}}
  %dw = te.grouped_matmul %dy, %x, %m {transpose_a} : (tensor<32x48xbf16>, tensor<32x64xbf16>, tensor<4xi32>) -> tensor<4x48x64xbf16>
  return %dw : tensor<4x48x64xbf16>
}
