// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the MoE token permutation ops (dialects/TEMoeVerifiers.cpp,
// docs/moe-permutation.md): one case per rule. The values of `counts`,
// split_sizes and sorted_index are checked at run time, not here.

func.func @counts_shape(%m: tensor<8x4xi1>, %c: tensor<3xi32>) {
  // expected-error @+1 {{'te.moe_row_map' op 'counts' must be tensor<2xi32> (the real token rows, then the real permuted rows), got 'tensor<3xi32>'}}
  %r = te.moe_row_map %m, %c {num_experts = 4 : i64} : (tensor<8x4xi1>, tensor<3xi32>) -> tensor<8x4xi32>
  return
}

// -----

func.func @mask_columns(%m: tensor<8x4xi1>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'routing_map' of a mask map must have num_experts = 6 columns, got 'tensor<8x4xi1>'}}
  %r = te.moe_row_map %m, %c {num_experts = 6 : i64} : (tensor<8x4xi1>, tensor<2xi32>) -> tensor<8x4xi32>
  return
}

// -----

func.func @mask_dtype(%m: tensor<8x4xf32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'routing_map' of a mask map must be i1 or i32 [tokens, num_experts], got 'tensor<8x4xf32>'}}
  %r = te.moe_row_map %m, %c {num_experts = 4 : i64} : (tensor<8x4xf32>, tensor<2xi32>) -> tensor<8x4xi32>
  return
}

// -----

func.func @index_dtype(%m: tensor<8x2xi64>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'routing_map' of an index map must be i32 expert ids [tokens, topK], got 'tensor<8x2xi64>'}}
  %r = te.moe_row_map %m, %c {num_experts = 4 : i64, index_map} : (tensor<8x2xi64>, tensor<2xi32>) -> tensor<8x2xi32>
  return
}

// -----

func.func @num_experts(%m: tensor<8x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'num_experts' must be >= 1, got 0}}
  %r = te.moe_row_map %m, %c {num_experts = 0 : i64, index_map} : (tensor<8x2xi32>, tensor<2xi32>) -> tensor<8x2xi32>
  return
}

// -----

func.func @row_map_result(%m: tensor<8x4xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'row_map' must be 'tensor<8x4xi32>' (the routing map's shape), got 'tensor<8x4xi64>'}}
  %r = te.moe_row_map %m, %c {num_experts = 4 : i64} : (tensor<8x4xi32>, tensor<2xi32>) -> tensor<8x4xi64>
  return
}

// -----

func.func @split_sizes(%s: tensor<4xi64>, %i: tensor<4xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'split_sizes' must be an i32 vector [n] with 1 <= n <= 2048, got 'tensor<4xi64>'}}
  %r = te.moe_chunk_row_map %s, %i, %c : (tensor<4xi64>, tensor<4xi32>, tensor<2xi32>) -> tensor<8x1xi32>
  return
}

// -----

func.func @sorted_index(%s: tensor<4xi32>, %i: tensor<3xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'sorted_index' must be i32 [4] like 'split_sizes', got 'tensor<3xi32>'}}
  %r = te.moe_chunk_row_map %s, %i, %c : (tensor<4xi32>, tensor<3xi32>, tensor<2xi32>) -> tensor<8x1xi32>
  return
}

// -----

func.func @chunk_row_map(%s: tensor<4xi32>, %i: tensor<4xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'row_map' must be [rows, 1], got 'tensor<8x2xi32>'}}
  %r = te.moe_chunk_row_map %s, %i, %c : (tensor<4xi32>, tensor<4xi32>, tensor<2xi32>) -> tensor<8x2xi32>
  return
}

// -----

func.func @permute_tokens(%x: tensor<8x16xbf16>, %m: tensor<4x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'row_map' must have the input's 8 token rows, got 'tensor<4x2xi32>'}}
  %y = te.moe_permute %x, %m, %c : (tensor<8x16xbf16>, tensor<4x2xi32>, tensor<2xi32>) -> tensor<16x16xbf16>
  return
}

// -----

func.func @permute_input(%x: tensor<8x16xi32>, %m: tensor<8x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'input' must be a matrix [rows, hidden] of bf16, f16, f32, f8E4M3FN or f8E5M2, got 'tensor<8x16xi32>'}}
  %y = te.moe_permute %x, %m, %c : (tensor<8x16xi32>, tensor<8x2xi32>, tensor<2xi32>) -> tensor<16x16xi32>
  return
}

// -----

func.func @permute_row_map(%x: tensor<8x16xbf16>, %m: tensor<8x2xi64>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'row_map' must be an i32 matrix [tokens, columns], got 'tensor<8x2xi64>'}}
  %y = te.moe_permute %x, %m, %c : (tensor<8x16xbf16>, tensor<8x2xi64>, tensor<2xi32>) -> tensor<16x16xbf16>
  return
}

// -----

func.func @permute_hidden(%x: tensor<8x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'output' must be [permuted rows, 16] (the input's hidden size), got 'tensor<16x8xbf16>'}}
  %y = te.moe_permute %x, %m, %c : (tensor<8x16xbf16>, tensor<8x2xi32>, tensor<2xi32>) -> tensor<16x8xbf16>
  return
}

// -----

func.func @permute_output_type(%x: tensor<8x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'output' must have input's element type 'bf16', got 'tensor<16x16xf32>'}}
  %y = te.moe_permute %x, %m, %c : (tensor<8x16xbf16>, tensor<8x2xi32>, tensor<2xi32>) -> tensor<16x16xf32>
  return
}

// -----

func.func @permute_probs_shape(%x: tensor<8x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>, %p: tensor<8x4xf32>) {
  // expected-error @+1 {{'probs' must be the row map's shape [tokens, columns] = [8, 2], got 'tensor<8x4xf32>'}}
  %y, %q = te.moe_permute %x, %m, %c probs(%p) : (tensor<8x16xbf16>, tensor<8x2xi32>, tensor<2xi32>, tensor<8x4xf32>) -> (tensor<16x16xbf16>, tensor<16xf32>)
  return
}

// -----

func.func @permuted_probs_shape(%x: tensor<8x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>, %p: tensor<8x2xf32>) {
  // expected-error @+1 {{'permuted_probs' must be [permuted rows] = [16], got 'tensor<8xf32>'}}
  %y, %q = te.moe_permute %x, %m, %c probs(%p) : (tensor<8x16xbf16>, tensor<8x2xi32>, tensor<2xi32>, tensor<8x2xf32>) -> (tensor<16x16xbf16>, tensor<8xf32>)
  return
}

// -----

func.func @permute_probs_result(%x: tensor<8x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>, %p: tensor<8x2xf32>) {
  // expected-error @+1 {{has 'permuted_probs' exactly when it has 'probs'}}
  %y = te.moe_permute %x, %m, %c probs(%p) : (tensor<8x16xbf16>, tensor<8x2xi32>, tensor<2xi32>, tensor<8x2xf32>) -> tensor<16x16xbf16>
  return
}

// -----

func.func @unpermute_fp8(%x: tensor<16x16xf8E4M3FN>, %m: tensor<8x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'input' must be a matrix [rows, hidden] of bf16, f16, f32, got 'tensor<16x16xf8E4M3FN>'}}
  %y = te.moe_unpermute %x, %m, %c : (tensor<16x16xf8E4M3FN>, tensor<8x2xi32>, tensor<2xi32>) -> tensor<8x16xf8E4M3FN>
  return
}

// -----

func.func @unpermute_output(%x: tensor<16x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'output' must be [tokens of row_map, hidden of input] = [8, 16], got 'tensor<16x16xbf16>'}}
  %y = te.moe_unpermute %x, %m, %c : (tensor<16x16xbf16>, tensor<8x2xi32>, tensor<2xi32>) -> tensor<16x16xbf16>
  return
}

// -----

func.func @unpermute_probs_type(%x: tensor<16x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>, %p: tensor<8x2xi32>) {
  // expected-error @+1 {{'probs' must be bf16, f16 or f32, got 'tensor<8x2xi32>'}}
  %y = te.moe_unpermute %x, %m, %c probs(%p) : (tensor<16x16xbf16>, tensor<8x2xi32>, tensor<2xi32>, tensor<8x2xi32>) -> tensor<8x16xbf16>
  return
}

// -----

func.func @unpermute_grad_types(%g: tensor<8x16xbf16>, %x: tensor<16x16xf32>, %m: tensor<8x2xi32>, %c: tensor<2xi32>, %p: tensor<8x2xf32>) {
  // expected-error @+1 {{'input' must have grad's element type 'bf16', got 'tensor<16x16xf32>'}}
  %dx, %dp = te.moe_unpermute_grad %g, %x, %m, %c, %p : (tensor<8x16xbf16>, tensor<16x16xf32>, tensor<8x2xi32>, tensor<2xi32>, tensor<8x2xf32>) -> (tensor<16x16xf32>, tensor<8x2xf32>)
  return
}

// -----

func.func @unpermute_grad_probs_grad(%g: tensor<8x16xbf16>, %x: tensor<16x16xbf16>, %m: tensor<8x2xi32>, %c: tensor<2xi32>, %p: tensor<8x2xf32>) {
  // expected-error @+1 {{'probs_grad' must be 'tensor<8x2xf32>' (the probs' type), got 'tensor<8x2xbf16>'}}
  %dx, %dp = te.moe_unpermute_grad %g, %x, %m, %c, %p : (tensor<8x16xbf16>, tensor<16x16xbf16>, tensor<8x2xi32>, tensor<2xi32>, tensor<8x2xf32>) -> (tensor<16x16xbf16>, tensor<8x2xbf16>)
  return
}

// -----

func.func @gather_probs(%q: tensor<16x1xf32>, %m: tensor<8x2xi32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'permuted_probs' must be a bf16, f16 or f32 vector [permuted rows], got 'tensor<16x1xf32>'}}
  %p = te.moe_gather_probs %q, %m, %c : (tensor<16x1xf32>, tensor<8x2xi32>, tensor<2xi32>) -> tensor<8x2xf32>
  return
}
