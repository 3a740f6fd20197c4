// te.block_quantize over shapes and types that take each path of its
// kernel (codegen/BlockScalingKernels.cpp): whole and partial tiles; 16-byte
// to 1-element vectors; row, column and tile amaxes; transposed copies as
// words and byte by byte; E4M3 and E5M2; with and without power-of-two
// scales; and a group of three casts of one input. nvcc_compile.py compiles
// every kernel (te-compile --inference --emit=cuda).

func.func @cast0(%x: tensor<256x512xbf16>) -> (tensor<256x512xf8E4M3FN>, tensor<4x256xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 1 : i64, power_2_scale} : tensor<256x512xbf16> -> tensor<256x512xf8E4M3FN>, tensor<4x256xf32>
  return %q, %s : tensor<256x512xf8E4M3FN>, tensor<4x256xf32>
}

func.func @cast1(%x: tensor<256x512xbf16>) -> (tensor<512x256xf8E4M3FN>, tensor<2x512xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 1 : i64, transpose, power_2_scale} : tensor<256x512xbf16> -> tensor<512x256xf8E4M3FN>, tensor<2x512xf32>
  return %q, %s : tensor<512x256xf8E4M3FN>, tensor<2x512xf32>
}

func.func @cast2(%x: tensor<256x512xbf16>) -> (tensor<256x512xf8E4M3FN>, tensor<2x4xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 2 : i64, power_2_scale} : tensor<256x512xbf16> -> tensor<256x512xf8E4M3FN>, tensor<2x4xf32>
  return %q, %s : tensor<256x512xf8E4M3FN>, tensor<2x4xf32>
}

func.func @cast3(%x: tensor<256x512xbf16>) -> (tensor<512x256xf8E4M3FN>, tensor<4x4xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 2 : i64, transpose, power_2_scale} : tensor<256x512xbf16> -> tensor<512x256xf8E4M3FN>, tensor<4x4xf32>
  return %q, %s : tensor<512x256xf8E4M3FN>, tensor<4x4xf32>
}

func.func @cast4(%x: tensor<200x136xbf16>) -> (tensor<136x200xf8E5M2>, tensor<2x136xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 1 : i64, transpose, power_2_scale} : tensor<200x136xbf16> -> tensor<136x200xf8E5M2>, tensor<2x136xf32>
  return %q, %s : tensor<136x200xf8E5M2>, tensor<2x136xf32>
}

func.func @cast5(%x: tensor<130x262xf16>) -> (tensor<262x130xf8E4M3FN>, tensor<3x4xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 2 : i64, transpose, power_2_scale} : tensor<130x262xf16> -> tensor<262x130xf8E4M3FN>, tensor<3x4xf32>
  return %q, %s : tensor<262x130xf8E4M3FN>, tensor<3x4xf32>
}

func.func @cast6(%x: tensor<130x262xf16>) -> (tensor<262x130xf8E5M2>, tensor<2x264xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 1 : i64, transpose} : tensor<130x262xf16> -> tensor<262x130xf8E5M2>, tensor<2x264xf32>
  return %q, %s : tensor<262x130xf8E5M2>, tensor<2x264xf32>
}

func.func @cast7(%x: tensor<257x131xf32>) -> (tensor<257x131xf8E4M3FN>, tensor<2x260xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 1 : i64} : tensor<257x131xf32> -> tensor<257x131xf8E4M3FN>, tensor<2x260xf32>
  return %q, %s : tensor<257x131xf8E4M3FN>, tensor<2x260xf32>
}

func.func @cast8(%x: tensor<257x131xf32>) -> (tensor<131x257xf8E4M3FN>, tensor<3x132xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 1 : i64, transpose, power_2_scale} : tensor<257x131xf32> -> tensor<131x257xf8E4M3FN>, tensor<3x132xf32>
  return %q, %s : tensor<131x257xf8E4M3FN>, tensor<3x132xf32>
}

func.func @cast9(%x: tensor<72x40xf32>) -> (tensor<72x40xf8E5M2>, tensor<1x4xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 2 : i64, power_2_scale} : tensor<72x40xf32> -> tensor<72x40xf8E5M2>, tensor<1x4xf32>
  return %q, %s : tensor<72x40xf8E5M2>, tensor<1x4xf32>
}

func.func @cast10(%x: tensor<384x260xbf16>) -> (tensor<260x384xf8E4M3FN>, tensor<3x4xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 2 : i64, transpose} : tensor<384x260xbf16> -> tensor<260x384xf8E4M3FN>, tensor<3x4xf32>
  return %q, %s : tensor<260x384xf8E4M3FN>, tensor<3x4xf32>
}

func.func @cast11(%x: tensor<8x6xbf16>) -> (tensor<6x8xf8E4M3FN>, tensor<1x8xf32>) {
  %q, %s = te.block_quantize %x {block_dim = 1 : i64, transpose, power_2_scale} : tensor<8x6xbf16> -> tensor<6x8xf8E4M3FN>, tensor<1x8xf32>
  return %q, %s : tensor<6x8xf8E4M3FN>, tensor<1x8xf32>
}

func.func @fused(%x: tensor<200x136xbf16>) -> (tensor<200x136xf8E4M3FN>, tensor<2x200xf32>, tensor<136x200xf8E4M3FN>, tensor<2x136xf32>, tensor<136x200xf8E5M2>, tensor<2x4xf32>) {
  %r:6 = te.fused "block_quantize"(%x) : (tensor<200x136xbf16>) -> (tensor<200x136xf8E4M3FN>, tensor<2x200xf32>, tensor<136x200xf8E4M3FN>, tensor<2x136xf32>, tensor<136x200xf8E5M2>, tensor<2x4xf32>) {
  ^bb0(%a: tensor<200x136xbf16>):
    %q0, %s0 = te.block_quantize %a {block_dim = 1 : i64, power_2_scale} : tensor<200x136xbf16> -> tensor<200x136xf8E4M3FN>, tensor<2x200xf32>
    %q1, %s1 = te.block_quantize %a {block_dim = 1 : i64, transpose, power_2_scale} : tensor<200x136xbf16> -> tensor<136x200xf8E4M3FN>, tensor<2x136xf32>
    %q2, %s2 = te.block_quantize %a {block_dim = 2 : i64, transpose} : tensor<200x136xbf16> -> tensor<136x200xf8E5M2>, tensor<2x4xf32>
    te.yield %q0, %s0, %q1, %s1, %q2, %s2 : tensor<200x136xf8E4M3FN>, tensor<2x200xf32>, tensor<136x200xf8E4M3FN>, tensor<2x136xf32>, tensor<136x200xf8E5M2>, tensor<2x4xf32>
  }
  return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<200x136xf8E4M3FN>, tensor<2x200xf32>, tensor<136x200xf8E4M3FN>, tensor<2x136xf32>, tensor<136x200xf8E5M2>, tensor<2x4xf32>
}
