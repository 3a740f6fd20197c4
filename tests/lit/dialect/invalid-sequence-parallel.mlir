// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of sequence parallelism (docs/tensor-parallel.md): the layer
// ops' `sequence_parallel` and the collectives te.tp_all_gather /
// te.tp_reduce_scatter.

func.func @needs_tensor_parallelism(%x: tensor<8x2x64xbf16>, %g: tensor<64xbf16>, %w1: tensor<128x64xbf16>, %w2: tensor<64x128xbf16>) {
  // expected-error @+1 {{'sequence_parallel' needs 'tp_size' > 1, got 1}}
  %r = te.layernorm_mlp %x ln_weight(%g) fc1_weight(%w1) fc2_weight(%w2) {sequence_parallel}
      : (tensor<8x2x64xbf16>, tensor<64xbf16>, tensor<128x64xbf16>, tensor<64x128xbf16>) -> tensor<8x2x64xbf16>
  return
}

// -----

func.func @column_output_is_gathered(%x: tensor<8x2x64xbf16>, %w: tensor<32x64xbf16>) {
  // expected-error @+1 {{'output' must have shape [dim 0 of 'input' * tp_size, other leading dims of 'input', out_features] (sequence_parallel) = [16, 2, 32], got [8, 2, 32]}}
  %r = te.linear %x weight(%w) {tp_size = 2 : i64, parallel_mode = #te.parallel_mode<column>, sequence_parallel}
      : (tensor<8x2x64xbf16>, tensor<32x64xbf16>) -> tensor<8x2x32xbf16>
  return
}

// -----

func.func @row_input_not_divisible(%x: tensor<7x2x32xbf16>, %w: tensor<64x32xbf16>) {
  // expected-error @+1 {{dim 0 of 'input' (7) must be divisible by tp_size (2): sequence_parallel scatters it over the ranks}}
  %r = te.linear %x weight(%w) {tp_size = 2 : i64, parallel_mode = #te.parallel_mode<row>, sequence_parallel}
      : (tensor<7x2x32xbf16>, tensor<64x32xbf16>) -> tensor<3x2x64xbf16>
  return
}

// -----

func.func @gather_shape(%x: tensor<8x64xbf16>) {
  // expected-error @+1 {{the whole tensor 'tensor<8x64xbf16>' must be the slice 'tensor<8x64xbf16>' with 2 times its dim 0}}
  %r = te.tp_all_gather %x {ranks = 2 : i64} : tensor<8x64xbf16> -> tensor<8x64xbf16>
  return
}

// -----

func.func @scatter_ranks(%x: tensor<16x64xbf16>) {
  // expected-error @+1 {{ranks must be at least 2, got 1}}
  %r = te.tp_reduce_scatter %x {ranks = 1 : i64} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  return
}
