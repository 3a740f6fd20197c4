// RUN: te-opt %s | FileCheck %s
// CHECK: te.linear
func.func @f(%x: tensor<16x32xbf16>, %w: tensor<48x32xbf16>) -> tensor<16x48xbf16> {
  %y = te.linear %x weight(%w) : (tensor<16x32xbf16>, tensor<48x32xbf16>) -> tensor<16x48xbf16>
  return %y : tensor<16x48xbf16>
}
