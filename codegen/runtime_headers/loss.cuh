//===- loss.cuh - online softmax statistics for the cross entropy kernels -===//
//
// docs/cross-entropy.md: a row's (max m, sum d of exp(x - m)) pairs merge
// as m = max(m1, m2), d = d1 e^(m1 - m) + d2 e^(m2 - m). An empty part has
// m = -inf and d = 0 and must contribute 0, not e^(-inf + inf) = NaN.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_LOSS_CUH
#define TEJIT_LOSS_CUH

__device__ __forceinline__ void tj_softmax_merge(float &m, float &d, float m2,
                                                 float d2) {
  const float mn = fmaxf(m, m2);
  if (mn == __int_as_float(0xff800000))
    return;
  d = (d == 0.f ? 0.f : d * __expf(m - mn)) +
      (d2 == 0.f ? 0.f : d2 * __expf(m2 - mn));
  m = mn;
}

/// Merges the (m, d) of a warp's lanes and sums their `s`, in every lane.
__device__ __forceinline__ void tj_warp_softmax_stats(float &m, float &d,
                                                      float &s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float d2 = __shfl_xor_sync(0xffffffffu, d, offset);
    s += __shfl_xor_sync(0xffffffffu, s, offset);
    tj_softmax_merge(m, d, m2, d2);
  }
}

/// Merges every thread's (m, d) and sums its `s` over the block; valid in
/// thread 0. Every thread of the block must call it (blockDim.x a multiple
/// of 32, at most 1024).
__device__ __forceinline__ void tj_block_softmax_stats(float &m, float &d,
                                                       float &s) {
  __shared__ float part_m[32], part_d[32], part_s[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  tj_warp_softmax_stats(m, d, s);
  if (lane == 0) {
    part_m[warp] = m;
    part_d[warp] = d;
    part_s[warp] = s;
  }
  __syncthreads();
  if (warp != 0)
    return;
  const bool has = lane < int(blockDim.x / 32);
  m = has ? part_m[lane] : __int_as_float(0xff800000);
  d = has ? part_d[lane] : 0.f;
  s = has ? part_s[lane] : 0.f;
  tj_warp_softmax_stats(m, d, s);
}

/// The sums of `a` and `b` over the block, valid in thread 0 (every thread
/// calls it; blockDim.x a multiple of 32). A fixed order: deterministic.
__device__ __forceinline__ void tj_block_sum2(float &a, float &b) {
  __shared__ float part_a[32], part_b[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  a = tj_warp_sum(a);
  b = tj_warp_sum(b);
  if (lane == 0) {
    part_a[warp] = a;
    part_b[warp] = b;
  }
  __syncthreads();
  const bool has = lane < int(blockDim.x / 32);
  a = warp == 0 && has ? part_a[lane] : 0.f;
  b = warp == 0 && has ? part_b[lane] : 0.f;
  a = tj_warp_sum(a);
  b = tj_warp_sum(b);
}

#endif // TEJIT_LOSS_CUH
