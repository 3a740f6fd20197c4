// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s

// The MoE token permutation ops (docs/moe-permutation.md): row maps from a
// mask or index routing map and from chunk sizes, the row moves and the
// probabilities' gradients. `counts` (i32 [2]) holds the real token rows
// and the real permuted rows.

// CHECK-LABEL: func.func @mask_permute
// CHECK: %[[MAP:.*]] = te.moe_row_map %{{.*}}, %[[C:.*]] {num_experts = 8 : i64} : (tensor<64x8xi1>, tensor<2xi32>) -> tensor<64x8xi32>
// CHECK: te.moe_permute %{{.*}}, %[[MAP]], %[[C]] probs(%{{.*}}) : (tensor<64x32xbf16>, tensor<64x8xi32>, tensor<2xi32>, tensor<64x8xf32>) -> (tensor<128x32xbf16>, tensor<128xf32>)
func.func @mask_permute(%x: tensor<64x32xbf16>, %routing: tensor<64x8xi1>,
                        %counts: tensor<2xi32>, %probs: tensor<64x8xf32>)
    -> (tensor<128x32xbf16>, tensor<128xf32>, tensor<64x8xi32>) {
  %map = te.moe_row_map %routing, %counts {num_experts = 8 : i64}
      : (tensor<64x8xi1>, tensor<2xi32>) -> tensor<64x8xi32>
  %rows, %p = te.moe_permute %x, %map, %counts probs(%probs)
      : (tensor<64x32xbf16>, tensor<64x8xi32>, tensor<2xi32>,
         tensor<64x8xf32>) -> (tensor<128x32xbf16>, tensor<128xf32>)
  return %rows, %p, %map : tensor<128x32xbf16>, tensor<128xf32>, tensor<64x8xi32>
}

// CHECK-LABEL: func.func @index_fp8_permute
// CHECK: te.moe_row_map %{{.*}}, %{{.*}} {index_map, num_experts = 16 : i64} : (tensor<64x2xi32>, tensor<2xi32>) -> tensor<64x2xi32>
// CHECK: te.moe_permute {{.*}} : (tensor<64x32xf8E4M3FN>, tensor<64x2xi32>, tensor<2xi32>) -> tensor<128x32xf8E4M3FN>
func.func @index_fp8_permute(%x: tensor<64x32xf8E4M3FN>, %ids: tensor<64x2xi32>,
                             %counts: tensor<2xi32>) -> tensor<128x32xf8E4M3FN> {
  %map = te.moe_row_map %ids, %counts {num_experts = 16 : i64, index_map}
      : (tensor<64x2xi32>, tensor<2xi32>) -> tensor<64x2xi32>
  %rows = te.moe_permute %x, %map, %counts
      : (tensor<64x32xf8E4M3FN>, tensor<64x2xi32>, tensor<2xi32>)
        -> tensor<128x32xf8E4M3FN>
  return %rows : tensor<128x32xf8E4M3FN>
}

// CHECK-LABEL: func.func @unpermute_and_grads
// CHECK: te.moe_unpermute %{{.*}}, %{{.*}}, %{{.*}} probs(%{{.*}}) : (tensor<128x32xbf16>, tensor<64x8xi32>, tensor<2xi32>, tensor<64x8xf32>) -> tensor<64x32xbf16>
// CHECK: te.moe_unpermute_grad {{.*}} -> (tensor<128x32xbf16>, tensor<64x8xf32>)
// CHECK: te.moe_gather_probs {{.*}} : (tensor<128xf32>, tensor<64x8xi32>, tensor<2xi32>) -> tensor<64x8xf32>
func.func @unpermute_and_grads(%rows: tensor<128x32xbf16>, %map: tensor<64x8xi32>,
                               %counts: tensor<2xi32>, %probs: tensor<64x8xf32>,
                               %dy: tensor<64x32xbf16>, %dp: tensor<128xf32>)
    -> (tensor<64x32xbf16>, tensor<128x32xbf16>, tensor<64x8xf32>,
        tensor<64x8xf32>) {
  %y = te.moe_unpermute %rows, %map, %counts probs(%probs)
      : (tensor<128x32xbf16>, tensor<64x8xi32>, tensor<2xi32>,
         tensor<64x8xf32>) -> tensor<64x32xbf16>
  %dx, %dprobs = te.moe_unpermute_grad %dy, %rows, %map, %counts, %probs
      : (tensor<64x32xbf16>, tensor<128x32xbf16>, tensor<64x8xi32>,
         tensor<2xi32>, tensor<64x8xf32>)
        -> (tensor<128x32xbf16>, tensor<64x8xf32>)
  %g = te.moe_gather_probs %dp, %map, %counts
      : (tensor<128xf32>, tensor<64x8xi32>, tensor<2xi32>) -> tensor<64x8xf32>
  return %y, %dx, %dprobs, %g
      : tensor<64x32xbf16>, tensor<128x32xbf16>, tensor<64x8xf32>,
        tensor<64x8xf32>
}

// CHECK-LABEL: func.func @sort_chunks
// CHECK: te.moe_chunk_row_map %{{.*}}, %{{.*}}, %{{.*}} : (tensor<6xi32>, tensor<6xi32>, tensor<2xi32>) -> tensor<64x1xi32>
func.func @sort_chunks(%x: tensor<64x32xf32>, %splits: tensor<6xi32>,
                       %sorted: tensor<6xi32>, %counts: tensor<2xi32>)
    -> tensor<64x32xf32> {
  %map = te.moe_chunk_row_map %splits, %sorted, %counts
      : (tensor<6xi32>, tensor<6xi32>, tensor<2xi32>) -> tensor<64x1xi32>
  %y = te.moe_permute %x, %map, %counts
      : (tensor<64x32xf32>, tensor<64x1xi32>, tensor<2xi32>) -> tensor<64x32xf32>
  return %y : tensor<64x32xf32>
}
