// RUN: te-opt %s --te-autodiff -verify-diagnostics -split-input-file

func.func @layer_op(%x: tensor<8x32xbf16>, %w: tensor<16x32xbf16>) -> tensor<8x16xbf16> {
  // expected-error @+1 {{'te.linear' op cannot be differentiated by te-autodiff (run te-decompose first for layer ops)}}
  %y = te.linear %x weight(%w) : (tensor<8x32xbf16>, tensor<16x32xbf16>) -> tensor<8x16xbf16>
  return %y : tensor<8x16xbf16>
}

// -----

func.func @backward_op(%dy: tensor<8x16xbf16>) -> tensor<16xbf16> {
  // expected-error @+1 {{'te.bias_grad' op cannot be differentiated by te-autodiff}}
  %db = te.bias_grad %dy : tensor<8x16xbf16> -> tensor<16xbf16>
  return %db : tensor<16xbf16>
}
