// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of te.layernorm and te.rmsnorm, and the tensor rules that every
// layer op shares (LayerChecker): static shapes, minimum rank, a bf16/f16/f32
// element type, and one dtype for all activations and parameters.

//===----------------------------------------------------------------------===//
// Tensor rules shared by all layer ops
//===----------------------------------------------------------------------===//

func.func @dynamic_input(%x: tensor<?x64xbf16>, %gamma: tensor<64xbf16>,
                         %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'input' must have a static shape, got 'tensor<?x64xbf16>'}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<?x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @dynamic_weight(%x: tensor<16x64xbf16>, %gamma: tensor<?xbf16>) {
  // expected-error @+1 {{'weight' must have a static shape, got 'tensor<?xbf16>'}}
  %r = te.rmsnorm %x weight(%gamma)
      : (tensor<16x64xbf16>, tensor<?xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @dynamic_output(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                          %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'output' must have a static shape, got 'tensor<16x?xbf16>'}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
         -> tensor<16x?xbf16>
  return
}

// -----

func.func @rank0_input(%x: tensor<bf16>, %gamma: tensor<64xbf16>,
                       %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'input' must have rank >= 1, got 'tensor<bf16>'}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<bf16>, tensor<64xbf16>, tensor<64xbf16>) -> tensor<bf16>
  return
}

// -----

func.func @rank0_weight(%x: tensor<16x64xbf16>, %gamma: tensor<bf16>) {
  // expected-error @+1 {{'weight' must have rank >= 1, got 'tensor<bf16>'}}
  %r = te.rmsnorm %x weight(%gamma)
      : (tensor<16x64xbf16>, tensor<bf16>) -> tensor<16x64xbf16>
  return
}

// -----

// FP8 and f64 tensors are not layer dtypes: a layer takes high-precision
// tensors and casts to FP8 itself under its fp8_recipe.
func.func @fp8_input(%x: tensor<16x64xf8E4M3FN>, %gamma: tensor<64xf8E4M3FN>,
                     %beta: tensor<64xf8E4M3FN>) {
  // expected-error @+1 {{'input' must have element type bf16, f16 or f32, got 'f8E4M3FN'}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xf8E4M3FN>, tensor<64xf8E4M3FN>, tensor<64xf8E4M3FN>)
         -> tensor<16x64xf8E4M3FN>
  return
}

// -----

func.func @f64_input(%x: tensor<16x64xf64>, %gamma: tensor<64xf64>) {
  // expected-error @+1 {{'input' must have element type bf16, f16 or f32, got 'f64'}}
  %r = te.rmsnorm %x weight(%gamma)
      : (tensor<16x64xf64>, tensor<64xf64>) -> tensor<16x64xf64>
  return
}

// -----

func.func @integer_weight(%x: tensor<16x64xbf16>, %gamma: tensor<64xi8>) {
  // expected-error @+1 {{'weight' must have element type bf16, f16 or f32, got 'i8'}}
  %r = te.rmsnorm %x weight(%gamma)
      : (tensor<16x64xbf16>, tensor<64xi8>) -> tensor<16x64xbf16>
  return
}

// -----

// The first tensor checked ('input') fixes the dtype.
func.func @dtype_weight(%x: tensor<16x64xbf16>, %gamma: tensor<64xf32>,
                        %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'weight' has element type 'f32' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<64xf32>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @dtype_bias(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                      %beta: tensor<64xf16>) {
  // expected-error @+1 {{'bias' has element type 'f16' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @dtype_output(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>) {
  // expected-error @+1 {{'output' has element type 'f32' but 'input' has 'bf16': a layer's activations and parameters share one dtype}}
  %r = te.rmsnorm %x weight(%gamma)
      : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x64xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.layernorm
//===----------------------------------------------------------------------===//

func.func @layernorm_weight_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<32xbf16>, %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'weight' must have shape [hidden_size] = [64], got [32]}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<32xbf16>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_weight_rank(
    %x: tensor<16x64xbf16>, %gamma: tensor<1x64xbf16>, %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'weight' must have shape [hidden_size] = [64], got [1, 64]}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<1x64xbf16>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_bias_shape(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                                %beta: tensor<128xbf16>) {
  // expected-error @+1 {{'bias' must have shape [hidden_size] = [64], got [128]}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<128xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_output_shape(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'output' must have shape like 'input' = [16, 64], got [8, 64]}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
         -> tensor<8x64xbf16>
  return
}

// -----

func.func @layernorm_eps_negative(
    %x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>, %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'eps' must be finite and >= 0, got -1.000000e-05}}
  %r = te.layernorm %x weight(%gamma) bias(%beta) {eps = -1.0e-05 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_eps_inf(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                             %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'eps' must be finite and >= 0, got INF}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      {eps = 0x7FF0000000000000 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

func.func @layernorm_eps_nan(%x: tensor<16x64xbf16>, %gamma: tensor<64xbf16>,
                             %beta: tensor<64xbf16>) {
  // expected-error @+1 {{'eps' must be finite and >= 0, got nan}}
  %r = te.layernorm %x weight(%gamma) bias(%beta)
      {eps = 0x7FF8000000000000 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
         -> tensor<16x64xbf16>
  return
}

// -----

//===----------------------------------------------------------------------===//
// te.rmsnorm
//===----------------------------------------------------------------------===//

func.func @rmsnorm_weight_shape(%x: tensor<8x2x64xbf16>,
                                %gamma: tensor<8xbf16>) {
  // expected-error @+1 {{'weight' must have shape [hidden_size] = [64], got [8]}}
  %r = te.rmsnorm %x weight(%gamma)
      : (tensor<8x2x64xbf16>, tensor<8xbf16>) -> tensor<8x2x64xbf16>
  return
}

// -----

func.func @rmsnorm_output_shape(%x: tensor<16x64xbf16>,
                                %gamma: tensor<64xbf16>) {
  // expected-error @+1 {{'output' must have shape like 'input' = [16, 64], got [16, 2, 64]}}
  %r = te.rmsnorm %x weight(%gamma)
      : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x2x64xbf16>
  return
}

// -----

func.func @rmsnorm_eps_negative(%x: tensor<16x64xbf16>,
                                %gamma: tensor<64xbf16>) {
  // expected-error @+1 {{'eps' must be finite and >= 0, got -1.000000e+00}}
  %r = te.rmsnorm %x weight(%gamma) {eps = -1.0 : f64}
      : (tensor<16x64xbf16>, tensor<64xbf16>) -> tensor<16x64xbf16>
  return
}

// -----

func.func @zero_size_dim(%x: tensor<0x64xbf16>, %w: tensor<64xbf16>) -> tensor<0x64xbf16> {
  // expected-error @+1 {{'input' must not have a zero-size dimension, got 'tensor<0x64xbf16>'}}
  %y = te.rmsnorm %x weight(%w) : (tensor<0x64xbf16>, tensor<64xbf16>) -> tensor<0x64xbf16>
  return %y : tensor<0x64xbf16>
}
