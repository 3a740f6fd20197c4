// The MoE permutation kernels (codegen/MoeKernels.cpp, MoeRowMapKernels.cpp;
// docs/moe-permutation.md) on IR as tejit.pytorch.permutation builds it:
// the row map of a mask is three kernels sharing the step scratch (count,
// scan, rank: per-warp ballots, one barrier a chunk); the row moves take a
// block per token in a grid-stride loop over the real tokens (counts[0]);
// `counts` is a host argument.
// RUN: te-compile %s --inference --emit=cuda | FileCheck %s
// RUN: rm -rf %t && te-compile %s --inference -o %t > /dev/null 2>&1
// RUN: FileCheck %s --check-prefix=PLAN < %t/plan.json

// CHECK-LABEL: ===== kernel moe_permute_moe_row_map_0: grid (4, 1, 1), block (256, 1, 1), shared 0 bytes, scratch 320 bytes, none zeroed
// CHECK: // params: in routing_map; in counts; out v0;
// CHECK: constexpr int kE = 16, kC = 16, kChunk = 256;
// CHECK: if (tj_i64(blockIdx.x) * kChunk >= tokens) return;
// CHECK: __shared__ int warp_counts[kChunk / 32][kE];
// CHECK: const unsigned ballot = __ballot_sync(0xffffffffu, (real && routing_map[t * kC + e].bits != 0));
// CHECK: for (int k = 0; k < kChunk / 32; ++k) n += warp_counts[k][e];
// CHECK-LABEL: ===== kernel moe_permute_moe_row_map_0_scan: grid (1, 1, 1), block (1024, 1, 1), shared 0 bytes, scratch 320 bytes as the previous kernel left them
// CHECK: const tj_i64 real_chunks = (tokens + kChunk - 1) / kChunk;
// CHECK: const int up = __shfl_up_sync(0xffffffffu, sum, o);
// CHECK-LABEL: ===== kernel moe_permute_moe_row_map_0_rank: grid (4, 1, 1), block (256, 1, 1), shared 0 bytes, scratch 320 bytes as the previous kernel left them
// CHECK: for (int k = 0; k < warp; ++k) row += warp_counts[k][e];
// CHECK-NEXT: const int value = row < out_rows ? int(row) : -1;
// CHECK-LABEL: ===== kernel moe_permute_moe_permute_0: grid (1024, 1, 1), block (128, 1, 1)
// CHECK: // params: in input; in v0; in counts; in probs; out output; out permuted_probs;
// CHECK: constexpr int kVec = 8, kThreads = 128, kPer = 4, kC = 16;
// CHECK: for (tj_i64 t = blockIdx.x; t < tokens; t += gridDim.x) {
// CHECK: permuted_probs[r] = probs[t * kC + c];
// CHECK: if (col < kVectors) tj_dst[row * kVectors + col] = v[i];
func.func @moe_permute(%input: tensor<1024x4096xbf16> {te.name = "input"},
                       %routing_map: tensor<1024x16xi1> {te.name = "routing_map"},
                       %counts: tensor<2xi32> {te.name = "counts"},
                       %probs: tensor<1024x16xf32> {te.name = "probs"})
    -> (tensor<2048x4096xbf16> {te.name = "output"},
        tensor<1024x16xi32> {te.name = "row_id_map"},
        tensor<2048xf32> {te.name = "permuted_probs"}) {
  %map = te.moe_row_map %routing_map, %counts {num_experts = 16 : i64}
      : (tensor<1024x16xi1>, tensor<2xi32>) -> tensor<1024x16xi32>
  %output, %permuted_probs = te.moe_permute %input, %map, %counts probs(%probs)
      : (tensor<1024x4096xbf16>, tensor<1024x16xi32>, tensor<2xi32>,
         tensor<1024x16xf32>) -> (tensor<2048x4096xbf16>, tensor<2048xf32>)
  return %output, %map, %permuted_probs
      : tensor<2048x4096xbf16>, tensor<1024x16xi32>, tensor<2048xf32>
}

// Unpermute with probs: float32 sums of the kept rows, in column order.
// CHECK-LABEL: ===== kernel moe_unpermute_moe_unpermute_0: grid (1024, 1, 1), block (128, 1, 1)
// CHECK: kept_weights[at] = tj_to_float(merging_probs[t * kC + c]);
// CHECK: float acc[kPer][kVec] = {};
// CHECK: for (int e = 0; e < kVec; ++e) acc[i][e] += weight * tj_to_float(v.v[e]);
// CHECK: for (int e = 0; e < kVec; ++e) out.v[e] = tj_convert<tj_bf16>::from(acc[i][e]);
func.func @moe_unpermute(%input: tensor<2048x4096xbf16> {te.name = "input"},
                         %map: tensor<1024x16xi32> {te.name = "row_id_map"},
                         %counts: tensor<2xi32> {te.name = "counts"},
                         %probs: tensor<1024x16xf32> {te.name = "merging_probs"})
    -> (tensor<1024x4096xbf16> {te.name = "output"}) {
  %output = te.moe_unpermute %input, %map, %counts probs(%probs)
      : (tensor<2048x4096xbf16>, tensor<1024x16xi32>, tensor<2xi32>,
         tensor<1024x16xf32>) -> tensor<1024x4096xbf16>
  return %output : tensor<1024x4096xbf16>
}

// FP8 rows move as 16-byte vectors of 16 elements; the chunk sort's row
// map finds each row's chunk by a binary search.
// CHECK-LABEL: ===== kernel moe_sort_chunks_moe_chunk_row_map_0: grid (4, 1, 1), block (256, 1, 1)
// CHECK: __shared__ int in_start[kN + 1], out_start[kN];
// CHECK: if (in_start[mid] <= t) lo = mid; else hi = mid - 1;
// CHECK-LABEL: ===== kernel moe_sort_chunks_moe_permute_0
// CHECK: constexpr int kVec = 16, kThreads = 64, kPer = 4, kC = 1;
// CHECK: const tj_vec<tj_e4m3, 16> *tj_src
func.func @moe_sort_chunks(%input: tensor<1024x4096xf8E4M3FN> {te.name = "input"},
                           %splits: tensor<8xi32> {te.name = "split_sizes"},
                           %sorted: tensor<8xi32> {te.name = "sorted_index"},
                           %counts: tensor<2xi32> {te.name = "counts"})
    -> (tensor<1024x4096xf8E4M3FN> {te.name = "output"},
        tensor<1024x1xi32> {te.name = "row_id_map"}) {
  %map = te.moe_chunk_row_map %splits, %sorted, %counts
      : (tensor<8xi32>, tensor<8xi32>, tensor<2xi32>) -> tensor<1024x1xi32>
  %output = te.moe_permute %input, %map, %counts
      : (tensor<1024x4096xf8E4M3FN>, tensor<1024x1xi32>, tensor<2xi32>)
        -> tensor<1024x4096xf8E4M3FN>
  return %output, %map : tensor<1024x4096xf8E4M3FN>, tensor<1024x1xi32>
}

// PLAN: "host": true,
// PLAN-NEXT: "te.name": "counts",
// PLAN: "name": "moe_permute_moe_row_map_0_scan",
// PLAN-NEXT: "scratch_bytes": 320,
// PLAN-NEXT: "scratch_from_previous_step": true
