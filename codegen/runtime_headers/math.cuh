//===- math.cuh - MLP activations, their derivatives, the dropout RNG -----===//
//
// The formulas of compiler/interpreter/ActivationKernels.cpp and the RNG
// convention of compiler/interpreter/DropoutRng.h, in float on the device.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_MATH_CUH
#define TEJIT_MATH_CUH

/// GELU, tanh form: 0.5 x (1 + tanh(y)), y = sqrt(2/pi) (x + 0.044715 x^3),
/// and its derivative, in few instructions (the 8192 x 16384 dGELU + cast
/// kernel issues many per byte: libdevice's tanhf cost it 5% on an H200).
/// With r = 1 / (e^2y + 1) on the fast exponential and divide (off by
/// about 1e-7): tanh(y) = 1 - 2r, 0.5 (1 + tanh) = 1 - r, 1 - tanh^2 =
/// 4r(1 - r), so gelu = x (1 - r) and dgelu = (1 - r)(1 + 2 c x r (1 + 3a
/// x^2)). An infinite e^2y gives r = 0, an underflowing one r = 1.
__device__ __forceinline__ float tj_gelu_r(float x) {
  const float c = 0.7978845608028654f, a = 0.044715f;
  const float y = x * fmaf(c * a, x * x, c);
  return __fdividef(1.f, __expf(2.f * y) + 1.f);
}
__device__ __forceinline__ float tj_gelu(float x) {
  return x * (1.f - tj_gelu_r(x));
}
__device__ __forceinline__ float tj_dgelu(float x) {
  const float c = 0.7978845608028654f, a = 0.044715f;
  const float r = tj_gelu_r(x);
  const float k = x * fmaf(6.f * a * c, x * x, 2.f * c);
  return (1.f - r) * fmaf(k, r, 1.f);
}
/// The fast exponential (within ~2^-21 relatively) and the fast divide
/// (2 ulp; 1 / (1 + inf) and 1 / y past 2^126 are 0): the IEEE divide made
/// the inference SwiGLU + cast kernel compute-bound, 63% of copy bandwidth
/// against 101% with the same FP8 bytes
/// (benchmarks/gpu/micro/swiglu_cast_variants.cu).
__device__ __forceinline__ float tj_sigmoid(float x) {
  return __fdividef(1.f, 1.f + __expf(-x));
}
/// x sigmoid(k x): qgelu (k = 1.702) and silu (k = 1).
__device__ __forceinline__ float tj_xsigmoid(float x, float k) { return x * tj_sigmoid(k * x); }
__device__ __forceinline__ float tj_dxsigmoid(float x, float k) {
  const float s = tj_sigmoid(k * x);
  return s + k * x * s * (1.f - s);
}
__device__ __forceinline__ float tj_qgelu(float x) { return tj_xsigmoid(x, 1.702f); }
__device__ __forceinline__ float tj_dqgelu(float x) { return tj_dxsigmoid(x, 1.702f); }
__device__ __forceinline__ float tj_silu(float x) { return tj_xsigmoid(x, 1.f); }
__device__ __forceinline__ float tj_dsilu(float x) { return tj_dxsigmoid(x, 1.f); }
/// clamped_swiglu (GPT-OSS's SwiGLU) on its halves [a, b]:
/// a' sigmoid(alpha a') with a' = min(a, limit), times clamp(b, -limit,
/// limit) + offset. A clamp passes no gradient where it clamps (a > limit,
/// |b| > limit), and passes it at a = limit and |b| = limit, as Transformer
/// Engine's kernels do; fminf and fmaxf, as TE's min and max, turn a NaN
/// into the limit.
__device__ __forceinline__ float tj_clamped_silu(float a, float limit, float alpha) {
  return tj_xsigmoid(fminf(a, limit), alpha);
}
__device__ __forceinline__ float tj_dclamped_silu(float a, float limit, float alpha) {
  return a <= limit ? tj_dxsigmoid(a, alpha) : 0.f;
}
__device__ __forceinline__ float tj_clamped_linear(float b, float limit, float offset) {
  return fminf(fmaxf(b, -limit), limit) + offset;
}
__device__ __forceinline__ float tj_dclamped_linear(float b, float limit) {
  return b >= -limit && b <= limit ? 1.f : 0.f;
}
__device__ __forceinline__ float tj_relu(float x) { return x > 0.f ? x : 0.f; }
__device__ __forceinline__ float tj_drelu(float x) { return x > 0.f ? 1.f : 0.f; }
/// relu(x)^2.
__device__ __forceinline__ float tj_srelu(float x) { return x > 0.f ? x * x : 0.f; }
__device__ __forceinline__ float tj_dsrelu(float x) { return x > 0.f ? 2.f * x : 0.f; }

/// SplitMix64's output function (DropoutRng.h).
__device__ __forceinline__ tj_u64 tj_splitmix64(tj_u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
/// sm(sm(sm(seed) ^ offset) ^ stream): the part of the chain shared by
/// every element of one dropout.
__device__ __forceinline__ tj_u64 tj_dropout_key(tj_u64 seed, tj_u64 offset, tj_u64 stream) {
  return tj_splitmix64(tj_splitmix64(tj_splitmix64(seed) ^ offset) ^ stream);
}
/// The keep decisions of the pair of elements 2 pair (bit 0) and 2 pair + 1
/// (bit 1), from one hash: the low and the high 32 bits of sm(key ^ pair),
/// each kept iff >= `threshold` = ceil(rate * 2^32) (keepThreshold in
/// DropoutRng.h), which keeps neither at 2^32. Compared in 32 bits: with a
/// literal threshold the first test folds away.
__device__ __forceinline__ unsigned tj_dropout_keeps2(tj_u64 key, tj_u64 pair, tj_u64 threshold) {
  if (threshold > 0xFFFFFFFFull) return 0u;
  const tj_u64 h = tj_splitmix64(key ^ pair);
  const tj_u32 t = static_cast<tj_u32>(threshold);
  return unsigned(static_cast<tj_u32>(h) >= t) | unsigned(static_cast<tj_u32>(h >> 32) >= t) << 1;
}
/// Whether element `index` is kept: its half of its pair's hash.
__device__ __forceinline__ bool tj_dropout_keeps(tj_u64 key, tj_u64 index, tj_u64 threshold) {
  return tj_dropout_keeps2(key, index >> 1, threshold) >> (index & 1) & 1u;
}

#endif // TEJIT_MATH_CUH
