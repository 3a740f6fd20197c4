func.func @f(%x: tensor<4x8xbf16>, %w: tensor<16x4xbf16>) -> tensor<4x16xbf16> {
  %y = te.linear %x weight(%w) : (tensor<4x8xbf16>, tensor<16x4xbf16>) -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}
