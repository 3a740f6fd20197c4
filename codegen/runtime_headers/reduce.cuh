//===- reduce.cuh - warp and block reductions, the amax atomic ------------===//
#ifndef TEJIT_REDUCE_CUH
#define TEJIT_REDUCE_CUH

__device__ __forceinline__ float tj_warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float tj_warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The max of `v` over the block, valid in thread 0. Every thread of the
/// block must call it (blockDim.x * blockDim.y a multiple of 32).
__device__ __forceinline__ float tj_block_max(float v) {
  __shared__ float warp_max[32];
  const int thread = threadIdx.y * blockDim.x + threadIdx.x;
  const int warps = blockDim.x * blockDim.y / 32;
  v = tj_warp_max(v);
  if (thread % 32 == 0)
    warp_max[thread / 32] = v;
  __syncthreads();
  v = thread < warps ? warp_max[thread] : 0.f;
  return tj_warp_max(v);
}

/// Folds a block's amax into the tensor's amax: non-negative floats order
/// as their bit patterns do, so an integer atomicMax on the bits is a float
/// max. The launcher zeroes `amax` before the launch.
__device__ __forceinline__ void tj_atomic_amax(float *amax, float v) {
  atomicMax(reinterpret_cast<unsigned int *>(amax), __float_as_uint(v));
}

#endif // TEJIT_REDUCE_CUH
