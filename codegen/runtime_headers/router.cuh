//===- router.cuh - top-k helpers of the MoE router kernels ---------------===//
//
// docs/router.md: a warp routes a token. Top-k picks values in the order
// "larger value first, then lower index", one pick a pass: a pass takes
// the best (value, index) that comes after the previous pick, so nothing
// needs marking and ties are broken the same way by every lane.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_ROUTER_CUH
#define TEJIT_ROUTER_CUH

/// Whether (v, i) comes before (w, j): larger value, then lower index.
__device__ __forceinline__ bool tj_router_before(float v, int i, float w,
                                                 int j) {
  return v > w || (v == w && i < j);
}

/// The first (v, i) of the warp's lanes in that order, in every lane.
__device__ __forceinline__ void tj_router_warp_best(float &v, int &i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, offset);
    const int j = __shfl_xor_sync(0xffffffffu, i, offset);
    if (tj_router_before(w, j, v, i)) {
      v = w;
      i = j;
    }
  }
}

/// The first of values[begin + k step] (k >= 0, below `end`) that comes
/// after (after_v, after_i); (-inf, INT_MAX) when none does.
__device__ __forceinline__ void tj_router_next(const float *values, int begin,
                                               int end, int step, float after_v,
                                               int after_i, float &v, int &i) {
  v = __int_as_float(0xff800000);
  i = 0x7fffffff;
  for (int e = begin; e < end; e += step) {
    const float x = values[e];
    if (tj_router_before(after_v, after_i, x, e) &&
        tj_router_before(x, e, v, i)) {
      v = x;
      i = e;
    }
  }
}

/// tokens_per_expert as a float, whatever its element type.
__device__ __forceinline__ float tj_router_count(int x) {
  return static_cast<float>(x);
}
__device__ __forceinline__ float tj_router_count(tj_i64 x) {
  return static_cast<float>(x);
}
__device__ __forceinline__ float tj_router_count(float x) { return x; }
__device__ __forceinline__ float tj_router_count(tj_bf16 x) {
  return tj_to_float(x);
}

#endif // TEJIT_ROUTER_CUH
