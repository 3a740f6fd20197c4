// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -emit-bytecode | te-opt | FileCheck %s

// te.layernorm and te.rmsnorm normalize over the last dimension; the input
// may have any rank >= 1. Attributes at their default value (eps = 1e-5) are
// not printed.

// CHECK-LABEL: func.func @layernorm
// CHECK-SAME: (%[[X:.*]]: tensor<16x64xbf16>, %[[G:.*]]: tensor<64xbf16>, %[[B:.*]]: tensor<64xbf16>)
// CHECK: te.layernorm %[[X]] weight(%[[G]]) bias(%[[B]]) :
// CHECK-SAME: (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
func.func @layernorm(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                     %beta: tensor<64xbf16>) -> tensor<16x64xbf16> {
  %y = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
        -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// An explicit default eps is dropped; a non-default one and the unit
// attribute zero_centered_gamma are kept. f16, rank 3 ([s, b, hidden]).
// CHECK-LABEL: func.func @layernorm_attrs_f16
// CHECK: te.layernorm %{{.*}} weight(%{{.*}}) bias(%{{.*}}) :
// CHECK: te.layernorm %{{.*}} weight(%{{.*}}) bias(%{{.*}}) {eps = 1.000000e-03 : f64, zero_centered_gamma} :
// CHECK-SAME: (tensor<8x2x64xf16>, tensor<64xf16>, tensor<64xf16>) -> tensor<8x2x64xf16>
func.func @layernorm_attrs_f16(%x: tensor<8x2x64xf16>, %gamma: tensor<64xf16>,
                               %beta: tensor<64xf16>) -> tensor<8x2x64xf16> {
  %0 = te.layernorm %x weight(%gamma) bias(%beta) {eps = 1.0e-5 : f64}
      : (tensor<8x2x64xf16>, tensor<64xf16>, tensor<64xf16>)
        -> tensor<8x2x64xf16>
  %1 = te.layernorm %0 weight(%gamma) bias(%beta)
      {eps = 1.0e-3 : f64, zero_centered_gamma}
      : (tensor<8x2x64xf16>, tensor<64xf16>, tensor<64xf16>)
        -> tensor<8x2x64xf16>
  return %1 : tensor<8x2x64xf16>
}

// eps = 0 is allowed.
// CHECK-LABEL: func.func @layernorm_f32_rank1
// CHECK: te.layernorm %{{.*}} weight(%{{.*}}) bias(%{{.*}}) {eps = 0.000000e+00 : f64} :
// CHECK-SAME: (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
func.func @layernorm_f32_rank1(%x: tensor<64xf32>, %gamma: tensor<64xf32>,
                               %beta: tensor<64xf32>) -> tensor<64xf32> {
  %y = te.layernorm %x weight(%gamma) bias(%beta) {eps = 0.0 : f64}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %y : tensor<64xf32>
}

// CHECK-LABEL: func.func @rmsnorm
// CHECK-SAME: (%[[X:.*]]: tensor<16x64xbf16>, %[[G:.*]]: tensor<64xbf16>)
// CHECK: te.rmsnorm %[[X]] weight(%[[G]]) :
// CHECK-SAME: (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
func.func @rmsnorm(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>)
    -> tensor<16x64xbf16> {
  %y = te.rmsnorm %x weight(%gamma)
      : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
  return %y : tensor<16x64xbf16>
}

// CHECK-LABEL: func.func @rmsnorm_attrs
// CHECK: te.rmsnorm %{{.*}} weight(%{{.*}}) {eps = 1.000000e-08 : f64, zero_centered_gamma} :
// CHECK-SAME: (tensor<8x2x64xf16>, tensor<64xf16>) -> tensor<8x2x64xf16>
// CHECK: te.rmsnorm %{{.*}} weight(%{{.*}}) {zero_centered_gamma} :
// CHECK-SAME: (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
func.func @rmsnorm_attrs(%x: tensor<8x2x64xf16>, %gamma: tensor<64xf16>,
                         %x32: tensor<16x64xf32>, %gamma32: tensor<64xf32>)
    -> (tensor<8x2x64xf16>, tensor<16x64xf32>) {
  %0 = te.rmsnorm %x weight(%gamma) {eps = 1.0e-8 : f64, zero_centered_gamma}
      : (tensor<8x2x64xf16>, tensor<64xf16>) -> tensor<8x2x64xf16>
  %1 = te.rmsnorm %x32 weight(%gamma32) {zero_centered_gamma}
      : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  return %0, %1 : tensor<8x2x64xf16>, tensor<16x64xf32>
}

// Real size: 2048 tokens x batch 4, hidden 4096.
// CHECK-LABEL: func.func @norms_real_size
// CHECK: te.layernorm %{{.*}} weight(%{{.*}}) bias(%{{.*}}) :
// CHECK-SAME: (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>) -> tensor<2048x4x4096xbf16>
// CHECK: te.rmsnorm %{{.*}} weight(%{{.*}}) {eps = 1.000000e-08 : f64} :
// CHECK-SAME: (tensor<2048x4x4096xbf16>, tensor<4096xbf16>) -> tensor<2048x4x4096xbf16>
func.func @norms_real_size(%x: tensor<2048x4x4096xbf16>,
                           %gamma: tensor<4096xbf16>, %beta: tensor<4096xbf16>)
    -> tensor<2048x4x4096xbf16> {
  %0 = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>)
        -> tensor<2048x4x4096xbf16>
  %1 = te.rmsnorm %0 weight(%gamma) {eps = 1.0e-8 : f64}
      : (tensor<2048x4x4096xbf16>, tensor<4096xbf16>)
        -> tensor<2048x4x4096xbf16>
  return %1 : tensor<2048x4x4096xbf16>
}
