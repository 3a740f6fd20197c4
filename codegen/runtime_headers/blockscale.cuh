//===- blockscale.cuh - amaxes and scales of Float8BlockScaling's blocks --===//
//
// docs/block-scaling.md: a block's amax is exact and propagates NaN (as
// te.amax), its scale follows te.compute_scale's rules in float32.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_BLOCKSCALE_CUH
#define TEJIT_BLOCKSCALE_CUH

/// The bits of |x|. Non-negative floats order as their bits do and every
/// NaN with its sign cleared lies above inf, so an unsigned max of these is
/// a float max that keeps NaN (fmaxf would drop it).
__device__ __forceinline__ tj_u32 tj_abs_bits(float x) {
  return __float_as_uint(x) & 0x7fffffffu;
}
__device__ __forceinline__ tj_u32 tj_max_bits(tj_u32 a, tj_u32 b) {
  return a > b ? a : b;
}

/// te.compute_scale for the amax whose bits are `amax_bits`: fp8_max / amax
/// in float32; 1 when amax is 0, inf or NaN; FLT_MAX when the quotient
/// overflows; with `power2`, rounded down to a power of two by clearing the
/// mantissa after the FLT_MAX substitution (as TE).
__device__ __forceinline__ float tj_block_scale(tj_u32 amax_bits, float fp8_max,
                                                bool power2) {
  const float amax = __uint_as_float(amax_bits);
  float scale = 1.f;
  if (amax > 0.f && amax < __int_as_float(0x7f800000)) {
    scale = fp8_max / amax;
    if (scale == __int_as_float(0x7f800000))
      scale = __int_as_float(0x7f7fffff);  // FLT_MAX
    if (power2)
      scale = __int_as_float(__float_as_int(scale) & 0xff800000);
  }
  return scale;
}

#endif // TEJIT_BLOCKSCALE_CUH
