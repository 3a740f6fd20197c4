func.func @f(%x: tensor<4x8xbf16>) -> tensor<4x8xbf16> {
  %y = te.layernorm %x weight( : tensor<4x8xbf16>
  return %y : tensor<4x8xbf16>
}
