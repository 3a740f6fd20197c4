// GroupedLinear's kernels (codegen/GroupedKernels.cpp) over shapes and
// types that take each of their paths: row segments (m_splits) and stacked
// groups; whole and partial tiles; 16-byte to 1-element vectors; a
// row-major and a transposed cast of one input (one kernel after te-fuse),
// transposed copies as words and byte by byte; E4M3 and E5M2; amaxes; bias
// gradients in one pass and split over blocks; te.compute_scale on [G].
// nvcc_compile.py compiles every kernel (te-compile --inference
// --emit=cuda).

func.func @x_casts(%x: tensor<4096x512xbf16>, %s: tensor<8xf32>, %m: tensor<8xi32>) -> (tensor<4096x512xf8E4M3FN>, tensor<512x4096xf8E4M3FN>, tensor<8xf32>) {
  %q, %a = te.grouped_quantize %x, %s, %m : (tensor<4096x512xbf16>, tensor<8xf32>, tensor<8xi32>) -> (tensor<4096x512xf8E4M3FN>, tensor<8xf32>)
  %qt, %at = te.grouped_quantize %x, %s, %m {transpose} : (tensor<4096x512xbf16>, tensor<8xf32>, tensor<8xi32>) -> (tensor<512x4096xf8E4M3FN>, tensor<8xf32>)
  return %q, %qt, %a : tensor<4096x512xf8E4M3FN>, tensor<512x4096xf8E4M3FN>, tensor<8xf32>
}

func.func @dy_transposed(%dy: tensor<336x192xbf16>, %s: tensor<3xf32>, %m: tensor<3xi32>) -> (tensor<192x336xf8E5M2>, tensor<3xf32>) {
  %q, %a = te.grouped_quantize %dy, %s, %m {transpose} : (tensor<336x192xbf16>, tensor<3xf32>, tensor<3xi32>) -> (tensor<192x336xf8E5M2>, tensor<3xf32>)
  return %q, %a : tensor<192x336xf8E5M2>, tensor<3xf32>
}

func.func @odd_rows(%x: tensor<100x96xf16>, %s: tensor<2xf32>, %m: tensor<2xi32>) -> (tensor<96x100xf8E4M3FN>, tensor<2xf32>) {
  %q, %a = te.grouped_quantize %x, %s, %m {transpose} : (tensor<100x96xf16>, tensor<2xf32>, tensor<2xi32>) -> (tensor<96x100xf8E4M3FN>, tensor<2xf32>)
  return %q, %a : tensor<96x100xf8E4M3FN>, tensor<2xf32>
}

func.func @odd_cols(%x: tensor<64x37xf32>, %s: tensor<2xf32>, %m: tensor<2xi32>) -> (tensor<64x37xf8E4M3FN>, tensor<2xf32>) {
  %q, %a = te.grouped_quantize %x, %s, %m : (tensor<64x37xf32>, tensor<2xf32>, tensor<2xi32>) -> (tensor<64x37xf8E4M3FN>, tensor<2xf32>)
  return %q, %a : tensor<64x37xf8E4M3FN>, tensor<2xf32>
}

func.func @weights(%w: tensor<4x48x64xbf16>, %s: tensor<4xf32>) -> (tensor<4x48x64xf8E4M3FN>, tensor<4x64x48xf8E4M3FN>, tensor<4xf32>) {
  %q, %a = te.grouped_quantize %w, %s : (tensor<4x48x64xbf16>, tensor<4xf32>) -> (tensor<4x48x64xf8E4M3FN>, tensor<4xf32>)
  %qt, %at = te.grouped_quantize %w, %s {transpose} : (tensor<4x48x64xbf16>, tensor<4xf32>) -> (tensor<4x64x48xf8E4M3FN>, tensor<4xf32>)
  return %q, %qt, %a : tensor<4x48x64xf8E4M3FN>, tensor<4x64x48xf8E4M3FN>, tensor<4xf32>
}

func.func @weights_bytes(%w: tensor<3x20x36xf16>, %s: tensor<3xf32>) -> (tensor<3x36x20xf8E5M2>, tensor<3xf32>) {
  %q, %a = te.grouped_quantize %w, %s {transpose} : (tensor<3x20x36xf16>, tensor<3xf32>) -> (tensor<3x36x20xf8E5M2>, tensor<3xf32>)
  return %q, %a : tensor<3x36x20xf8E5M2>, tensor<3xf32>
}

func.func @amaxes(%x: tensor<8192x256xbf16>, %m: tensor<4xi32>, %w: tensor<6x40x24xf32>) -> (tensor<4xf32>, tensor<6xf32>, tensor<4xf32>, tensor<4xf32>) {
  %a = te.grouped_amax %x, %m : (tensor<8192x256xbf16>, tensor<4xi32>) -> tensor<4xf32>
  %b = te.grouped_amax %w : (tensor<6x40x24xf32>) -> tensor<6xf32>
  %s, %si = te.compute_scale %a {fp8_type = f8E4M3FN, power_2_scale} : tensor<4xf32> -> tensor<4xf32>, tensor<4xf32>
  return %a, %b, %s, %si : tensor<4xf32>, tensor<6xf32>, tensor<4xf32>, tensor<4xf32>
}

func.func @bias_grads(%dy: tensor<1024x512xbf16>, %m: tensor<8xi32>, %tall: tensor<8192x256xbf16>, %m1: tensor<1xi32>, %odd: tensor<300x45xf32>, %m3: tensor<3xi32>) -> (tensor<8x512xbf16>, tensor<1x256xf32>, tensor<3x45xf16>) {
  %a = te.grouped_bias_grad %dy, %m : (tensor<1024x512xbf16>, tensor<8xi32>) -> tensor<8x512xbf16>
  %b = te.grouped_bias_grad %tall, %m1 : (tensor<8192x256xbf16>, tensor<1xi32>) -> tensor<1x256xf32>
  %c = te.grouped_bias_grad %odd, %m3 : (tensor<300x45xf32>, tensor<3xi32>) -> tensor<3x45xf16>
  return %a, %b, %c : tensor<8x512xbf16>, tensor<1x256xf32>, tensor<3x45xf16>
}
