// RUN: te-opt %s --te-autodiff --te-place-scaling -verify-diagnostics -split-input-file
// RUN: not te-opt %s -split-input-file --te-place-scaling=recipe=bogus 2>&1 | FileCheck %s --check-prefix=OPTION

// OPTION: te-place-scaling: 'recipe' must be a #te.delayed_scaling, #te.current_scaling or #te.block_scaling attribute, or none; got 'bogus'

#cs = #te.current_scaling<>

// 24 tokens pass the forward rule (a multiple of 8) but wgrad contracts over
// them, and FP8 GEMMs need a contracting dim divisible by 16.
func.func @wgrad_tokens(%x: tensor<24x32xbf16>, %w: tensor<48x32xbf16>) -> tensor<24x48xbf16> {
  // expected-error @+1 {{'te.matmul' op wgrad GEMM in FP8 needs its contracting dim divisible by 16 (for wgrad, the token count), got 24}}
  %y = te.matmul %x, %w {fp8_recipe = #cs, role = #te.gemm_role<fprop>, transpose_b} : tensor<24x32xbf16>, tensor<48x32xbf16> -> tensor<24x48xbf16>
  return %y : tensor<24x48xbf16>
}

// -----

#cs = #te.current_scaling<>

func.func @fprop_k(%x: tensor<16x24xbf16>, %w: tensor<48x24xbf16>) -> tensor<16x48xbf16> {
  // expected-error @+1 {{'te.matmul' op fprop GEMM in FP8 needs its contracting dim divisible by 16, got 24}}
  %y = te.matmul %x, %w {fp8_recipe = #cs, role = #te.gemm_role<fprop>, transpose_b} : tensor<16x24xbf16>, tensor<48x24xbf16> -> tensor<16x48xbf16>
  return %y : tensor<16x48xbf16>
}
