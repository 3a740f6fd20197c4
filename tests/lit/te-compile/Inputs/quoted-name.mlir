func.func @"../escaped name"(%x: tensor<4x8xbf16>, %w: tensor<8xbf16>) -> tensor<4x8xbf16> {
  %y = te.rmsnorm %x weight(%w) : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  return %y : tensor<4x8xbf16>
}
