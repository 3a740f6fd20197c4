//===- fp8.cuh - storage types, conversions and vector access -------------===//
//
// Device helpers every generated kernel starts with. They use no CUDA toolkit
// header, so that NVRTC compiles kernels on a machine with only the driver
// and NVRTC: FP8, bf16 and fp16 conversions are PTX `cvt` (sm_89+ for FP8).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_FP8_CUH
#define TEJIT_FP8_CUH

typedef unsigned char tj_u8;
typedef unsigned short tj_u16;
typedef unsigned int tj_u32;
typedef unsigned long long tj_u64;
typedef long long tj_i64;

/// Storage types: bit patterns, so that no toolkit header is needed.
struct tj_bf16 { tj_u16 bits; };
struct tj_f16 { tj_u16 bits; };
struct tj_e4m3 { tj_u8 bits; };
struct tj_e5m2 { tj_u8 bits; };
/// i1 tensors (dropout masks) take one byte per element.
struct tj_bool { tj_u8 bits; };

__device__ __forceinline__ float tj_to_float(float x) { return x; }
__device__ __forceinline__ float tj_to_float(tj_bool x) { return x.bits ? 1.f : 0.f; }
__device__ __forceinline__ float tj_to_float(tj_bf16 x) {
  return __uint_as_float(static_cast<tj_u32>(x.bits) << 16);
}
__device__ __forceinline__ float tj_to_float(tj_f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
/// FP8 widens exactly to f16 (cvt.rn.f16x2.e4m3x2), then to f32.
__device__ __forceinline__ float tj_to_float(tj_e4m3 x) {
  tj_u32 pair;
  asm("{ .reg .b16 t; mov.b16 t, %1; cvt.rn.f16x2.e4m3x2 %0, t; }"
      : "=r"(pair) : "h"(static_cast<tj_u16>(x.bits)));
  return tj_to_float(tj_f16{static_cast<tj_u16>(pair & 0xffffu)});
}
__device__ __forceinline__ float tj_to_float(tj_e5m2 x) {
  tj_u32 pair;
  asm("{ .reg .b16 t; mov.b16 t, %1; cvt.rn.f16x2.e5m2x2 %0, t; }"
      : "=r"(pair) : "h"(static_cast<tj_u16>(x.bits)));
  return tj_to_float(tj_f16{static_cast<tj_u16>(pair & 0xffffu)});
}

template <typename T> struct tj_convert;
template <> struct tj_convert<float> {
  static __device__ __forceinline__ float from(float x) { return x; }
};
template <> struct tj_convert<tj_bool> {
  static __device__ __forceinline__ tj_bool from(float x) {
    return tj_bool{static_cast<tj_u8>(x != 0.f)};
  }
};
template <> struct tj_convert<tj_bf16> {
  static __device__ __forceinline__ tj_bf16 from(float x) {
    tj_u16 bits;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    return tj_bf16{bits};
  }
};
template <> struct tj_convert<tj_f16> {
  static __device__ __forceinline__ tj_f16 from(float x) {
    tj_u16 bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    return tj_f16{bits};
  }
};
/// Round to nearest even, saturating to the largest finite value; NaN stays
/// NaN (FP8.md). The x2 forms put their first source in the upper byte.
template <> struct tj_convert<tj_e4m3> {
  static __device__ __forceinline__ tj_u16 pair(float lo, float hi) {
    tj_u16 bits;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(bits) : "f"(hi), "f"(lo));
    return bits;
  }
  static __device__ __forceinline__ tj_e4m3 from(float x) {
    return tj_e4m3{static_cast<tj_u8>(pair(x, 0.f) & 0xffu)};
  }
};
template <> struct tj_convert<tj_e5m2> {
  static __device__ __forceinline__ tj_u16 pair(float lo, float hi) {
    tj_u16 bits;
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(bits) : "f"(hi), "f"(lo));
    return bits;
  }
  static __device__ __forceinline__ tj_e5m2 from(float x) {
    return tj_e5m2{static_cast<tj_u8>(pair(x, 0.f) & 0xffu)};
  }
};

/// N elements moved as one access: 16 bytes when N * sizeof(T) is 16 (wider
/// vectors split into 16-byte accesses).
template <typename T, int N>
struct alignas(sizeof(T) * N >= 16 ? 16 : sizeof(T) * N) tj_vec {
  T v[N];
};

/// Loads N contiguous elements at `src` (aligned to the vector) as floats.
template <int N, typename T>
__device__ __forceinline__ void tj_load(float (&dst)[N], const T *src) {
  const tj_vec<T, N> in = *reinterpret_cast<const tj_vec<T, N> *>(src);
#pragma unroll
  for (int i = 0; i < N; ++i)
    dst[i] = tj_to_float(in.v[i]);
}

template <typename T, int N>
__device__ __forceinline__ void tj_pack(tj_vec<T, N> &out, const float (&src)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    out.v[i] = tj_convert<T>::from(src[i]);
}
/// FP8 converts two elements per cvt.
template <typename T, int N>
__device__ __forceinline__ void tj_pack_fp8(tj_vec<T, N> &out, const float (&src)[N]) {
  if constexpr (N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      tj_u16 bits = tj_convert<T>::pair(src[i], src[i + 1]);
      out.v[i].bits = static_cast<tj_u8>(bits & 0xffu);
      out.v[i + 1].bits = static_cast<tj_u8>(bits >> 8);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i)
      out.v[i] = tj_convert<T>::from(src[i]);
  }
}
template <int N>
__device__ __forceinline__ void tj_pack(tj_vec<tj_e4m3, N> &out, const float (&src)[N]) {
  tj_pack_fp8(out, src);
}
template <int N>
__device__ __forceinline__ void tj_pack(tj_vec<tj_e5m2, N> &out, const float (&src)[N]) {
  tj_pack_fp8(out, src);
}

/// Converts N floats to T and stores them at `dst` as one access.
template <int N, typename T>
__device__ __forceinline__ void tj_store(T *dst, const float (&src)[N]) {
  tj_vec<T, N> out;
  tj_pack(out, src);
  *reinterpret_cast<tj_vec<T, N> *>(dst) = out;
}

/// Hides the value of a vector of whole words from the optimizer (an empty
/// asm per word; no instruction), so that what was computed from it before
/// is computed again after it rather than kept: a row of 16-bit elements
/// stays in half the registers of the floats converted from it.
template <typename T, int N>
__device__ __forceinline__ void tj_hide_words(tj_vec<T, N> &v) {
  static_assert(sizeof(v) % 4 == 0, "whole words");
  tj_u32 words[sizeof(v) / 4];
  memcpy(words, &v, sizeof(v));
#pragma unroll
  for (int j = 0; j < int(sizeof(v) / 4); ++j)
    asm volatile("" : "+r"(words[j]));
  memcpy(&v, words, sizeof(v));
}

/// Converts N floats (N % 4 == 0) to FP8 type T in N / 4 words, the lowest
/// element in the lowest byte: the bytes of a row-major store and of a
/// shared tile for the transposed one, converted once. (Words, not a
/// tj_vec<T, N> read back through a tj_u32 pointer: that reinterpretation
/// gave wrong row-major bytes on an H200.)
template <typename T, int N>
__device__ __forceinline__ void tj_pack_words(tj_vec<tj_u32, N / 4> &out,
                                              const float (&src)[N]) {
  static_assert(N % 4 == 0, "four FP8 elements a word");
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    const tj_u32 lo = tj_convert<T>::pair(src[4 * j], src[4 * j + 1]);
    const tj_u32 hi = tj_convert<T>::pair(src[4 * j + 2], src[4 * j + 3]);
    out.v[j] = lo | hi << 16;
  }
}

/// Transposes an 8-row x 4-byte block of one-byte elements at `src` (rows
/// `stride` bytes apart, 4-byte aligned): column j's rows 0-3 come back in
/// lo[j] and rows 4-7 in hi[j], lowest row in the lowest byte. Eight 4-byte
/// reads and sixteen byte permutes instead of 32 one-byte reads.
__device__ __forceinline__ void tj_transpose_8x4(tj_u32 (&lo)[4], tj_u32 (&hi)[4],
                                                 const tj_u8 *src, int stride) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    tj_u32 w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = *reinterpret_cast<const tj_u32 *>(src + (4 * half + k) * stride);
    // Interleave bytes 0-1 and 2-3 of row pairs, then pick the columns.
    const tj_u32 a01 = __byte_perm(w[0], w[1], 0x5140), a23 = __byte_perm(w[2], w[3], 0x5140);
    const tj_u32 b01 = __byte_perm(w[0], w[1], 0x7362), b23 = __byte_perm(w[2], w[3], 0x7362);
    tj_u32 (&out)[4] = half ? hi : lo;
    out[0] = __byte_perm(a01, a23, 0x5410);
    out[1] = __byte_perm(a01, a23, 0x7632);
    out[2] = __byte_perm(b01, b23, 0x5410);
    out[3] = __byte_perm(b01, b23, 0x7632);
  }
}

#endif // TEJIT_FP8_CUH
