// Split-KV decode attention ("flash-decoding") for kv_cache_attention steps
// with few new queries per sequence (docs/kv-cache-plan.md, session 19),
// compiled to PTX at build time (runtime/CMakeLists.txt) like
// AttentionPrep.cu and loaded through ModuleSet::helper.
//
// Semantics (those of the cuDNN path, Attention.h): sequence i has n_i new
// queries (rows of q at q_offsets[i] + j * q_stride, j < n_i) and L_i keys
// (rows [0, L_i) of its bshd caches [b, S, kv_heads, d]); query j of head hq
// (kv head hq / (heads / kv_heads)) sees keys <= L_i - n_i + j when `causal`
// (padding_causal_bottom_right), all L_i otherwise. n_i, L_i and the q and
// o row offsets are the prep kernel's (clamped) lengths and ragged offsets.
//
// tejit_decode_attention (the split pass): grid (splits, b * kv_heads,
// row groups), 4 warps. The rows of one (sequence, kv head) are its
// (query j, head) pairs, row rho = j * (heads / kv_heads) + head in group,
// so the rows of the n_i live queries come first; a warp holds 4 rows in
// registers (q pre-scaled by softmax_scale * log2(e), fp32), a CTA
// row_blocks_per_cta (1, 2 or 4) such blocks, and its 4 / row_blocks_per_cta
// warps per block divide the CTA's keys: split s covers keys [s * chunk,
// (s + 1) * chunk). Lanes split the head dim (8 elements, 16 bytes, each):
// LPK lanes read one key row coalesced, a warp 32 / LPK keys per load and 8
// keys (K and V) in flight per step. Each group of LPK lanes keeps its own
// online softmax (running max in the log2 domain, sum, unnormalized o) for
// the keys it saw; at the end the CTA merges its groups through shared
// memory and writes one partial per (sequence, head, j, split): (max, sum)
// into partial_stats and o[d] into partial_o. A CTA whose keys are all past
// L_i or masked for its rows writes the empty partial (max -inf, sum 0).
//
// tejit_decode_attention_combine: one CTA per (sequence, head, j) row of
// [b, heads, s_q]; rows with j >= n_i write nothing (the prep kernel zeroes
// o's tail rows, and rows of other sequences are theirs). Merges the row's
// non-empty splits and rounds once to bf16 / f16 into o.
//
// The host mirror of the struct is in runtime/AttentionLauncher.cpp; every
// field is 8 bytes wide so that both compilers lay it out alike.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define TEJIT_DECODE_WARPS 4
#define TEJIT_DECODE_ROWS 4      // query rows a warp holds
#define TEJIT_DECODE_KEYS 8      // keys a warp reads per step
#define TEJIT_DECODE_SHARED 4096 // floats: rows * groups * d, at most

struct TejitDecodeAttention {
  const unsigned short *q;
  const unsigned short *k_cache, *v_cache;
  const int *seq_len_q, *seq_len_kv, *q_offsets, *o_offsets;
  float *partial_stats; // [b, heads, s_q, splits] x (max, sum)
  float *partial_o;     // [b, heads, s_q, splits, d]
  unsigned short *o;
  long long batch, heads, kv_heads, head_dim, seq_q, cache_rows, chunk, splits,
      q_stride, row_blocks_per_cta, causal, f16;
  double scale_log2; // softmax_scale * log2(e)
};

__device__ __forceinline__ float tejitExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <bool F16>
__device__ __forceinline__ float tejitToFloat(unsigned short bits) {
  if (F16)
    return __half2float(__ushort_as_half(bits));
  return __uint_as_float(unsigned(bits) << 16);
}

template <bool F16>
__device__ __forceinline__ void tejitUnpack8(const uint4 &raw, float out[8]) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    if (F16) {
      __half2 pair = *reinterpret_cast<const __half2 *>(&words[w]);
      float2 f = __half22float2(pair);
      out[2 * w] = f.x;
      out[2 * w + 1] = f.y;
    } else {
      out[2 * w] = __uint_as_float(words[w] << 16);
      out[2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
    }
  }
}

__device__ __forceinline__ uint4 tejitLoad16(const unsigned short *at) {
  return __ldg(reinterpret_cast<const uint4 *>(at));
}

// The row of the partials (and of o's [b, heads, s_q] rows) of CTA row rho
// of sequence i, kv head kh.
__device__ __forceinline__ long long
tejitDecodeRow(const TejitDecodeAttention &p, long long i, long long kh,
               int perKv, long long rho) {
  long long j = rho / perKv, hq = kh * perKv + rho % perKv;
  return (i * p.heads + hq) * p.seq_q + j;
}

template <int LPK, bool F16>
__device__ void tejitDecodeSplit(const TejitDecodeAttention &p, float *sO,
                                 float *sM, float *sL) {
  constexpr int KPG = 32 / LPK;              // keys per warp load
  constexpr int U = TEJIT_DECODE_KEYS / KPG; // warp loads per step
  constexpr int R = TEJIT_DECODE_ROWS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long split = blockIdx.x;
  const long long i = blockIdx.y / p.kv_heads, kh = blockIdx.y % p.kv_heads;
  const int rbPerCta = int(p.row_blocks_per_cta);
  const int keyParts = TEJIT_DECODE_WARPS / rbPerCta;
  const int perKv = int(p.heads / p.kv_heads);
  const int D = int(p.head_dim);
  const int n = p.seq_len_q[i], L = p.seq_len_kv[i];
  const long long liveRows = (long long)n * perKv;
  const long long ctaRow0 = (long long)blockIdx.z * rbPerCta * R;
  if (ctaRow0 >= liveRows)
    return; // rows of queries j >= n_i: nothing to write
  const long long ctaRowEnd =
      ctaRow0 + rbPerCta * R < liveRows ? ctaRow0 + rbPerCta * R : liveRows;
  // The last key any of the CTA's rows sees, plus one.
  const long long lastJ = (ctaRowEnd - 1) / perKv;
  const long long visible = p.causal ? L - n + lastJ + 1 : L;
  const long long keyBegin = split * p.chunk;
  const long long chunkEnd = keyBegin + p.chunk;
  const int keyEnd = int(chunkEnd < visible ? chunkEnd : visible);
  if (keyBegin >= keyEnd) {
    for (long long rho = ctaRow0 + threadIdx.x; rho < ctaRowEnd;
         rho += blockDim.x) {
      float *stats =
          p.partial_stats +
          2 * (tejitDecodeRow(p, i, kh, perKv, rho) * p.splits + split);
      stats[0] = -INFINITY;
      stats[1] = 0.f;
    }
    return;
  }

  const int rb = warp % rbPerCta, kp = warp / rbPerCta;
  const int groups = keyParts * KPG; // softmax states per row
  const int group = kp * KPG + lane / LPK;
  const int dim0 = (lane % LPK) * 8;
  const bool dimOk = dim0 < D;
  float q[R][8], o[R][8], m[R], l[R];
  int limit[R]; // the last key row r sees (-1: none)
#pragma unroll
  for (int r = 0; r < R; ++r) {
    long long rho = ctaRow0 + rb * R + r;
    bool live = rho < ctaRowEnd;
    long long j = rho / perKv, hq = kh * perKv + rho % perKv;
    m[r] = -INFINITY;
    l[r] = 0.f;
    limit[r] = live ? (p.causal ? int(L - n + j) : L - 1) : -1;
    const unsigned short *row =
        p.q + p.q_offsets[i] + j * p.q_stride + hq * D + dim0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      o[r][e] = 0.f;
      q[r][e] =
          live && dimOk ? tejitToFloat<F16>(row[e]) * float(p.scale_log2) : 0.f;
    }
  }

  const size_t rowStride = size_t(p.kv_heads) * D;
  const size_t first = (size_t(i) * p.cache_rows * p.kv_heads + kh) * D + dim0;
  const unsigned short *kBase = p.k_cache + first, *vBase = p.v_cache + first;
  const int stepKeys = keyParts * TEJIT_DECODE_KEYS;
  // Loads one step's K and V pieces (zeros past the keys or the head dim).
  auto load = [&](int base, uint4 *kr, uint4 *vr) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int key = base + u * KPG + lane / LPK;
      if (key < keyEnd && dimOk) {
        kr[u] = tejitLoad16(kBase + size_t(key) * rowStride);
        vr[u] = tejitLoad16(vBase + size_t(key) * rowStride);
      } else {
        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  // The next step's keys are in flight while this step's are used.
  uint4 kr[U], vr[U];
  load(int(keyBegin) + kp * TEJIT_DECODE_KEYS, kr, vr);
  for (int base = int(keyBegin) + kp * TEJIT_DECODE_KEYS; base < keyEnd;
       base += stepKeys) {
    uint4 kNext[U], vNext[U];
    load(base + stepKeys, kNext, vNext);
    float s[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      tejitUnpack8<F16>(kr[u], kf);
      int key = base + u * KPG + lane / LPK;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float acc = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc = fmaf(q[r][e], kf[e], acc);
#pragma unroll
        for (int offset = LPK / 2; offset > 0; offset /= 2)
          acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        s[u][r] = key < keyEnd && key <= limit[r] ? acc : -INFINITY;
      }
    }
    // Online softmax per row, then p = 2^(s - max) times v.
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float top = m[r];
#pragma unroll
      for (int u = 0; u < U; ++u)
        top = fmaxf(top, s[u][r]);
      if (top > m[r]) {
        float a = tejitExp2(m[r] - top); // 0 while m is -inf
        l[r] *= a;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          o[r][e] *= a;
        m[r] = top;
      }
      // With every key masked so far, m stays -inf and every p is 0.
      float shift = m[r] == -INFINITY ? 0.f : m[r];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[u][r] = tejitExp2(s[u][r] - shift);
        l[r] += s[u][r];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      tejitUnpack8<F16>(vr[u], vf);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < 8; ++e)
          o[r][e] = fmaf(s[u][r], vf[e], o[r][e]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      kr[u] = kNext[u];
      vr[u] = vNext[u];
    }
  }

  // Every group's state into shared memory, then one merge per (row, d).
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int at = (rb * R + r) * groups + group;
    if (lane % LPK == 0) {
      sM[at] = m[r];
      sL[at] = l[r];
    }
    if (dimOk)
#pragma unroll
      for (int e = 0; e < 8; ++e)
        sO[at * D + dim0 + e] = o[r][e];
  }
  __syncthreads();
  const int ctaRows = rbPerCta * R;
  for (int item = threadIdx.x; item < ctaRows * D; item += blockDim.x) {
    int row = item / D, d = item % D;
    long long rho = ctaRow0 + row;
    if (rho >= ctaRowEnd)
      continue;
    long long target = tejitDecodeRow(p, i, kh, perKv, rho) * p.splits + split;
    float top = -INFINITY;
    for (int g = 0; g < groups; ++g)
      top = fmaxf(top, sM[row * groups + g]);
    float sum = 0.f, acc = 0.f;
    if (top != -INFINITY)
      for (int g = 0; g < groups; ++g) {
        int at = row * groups + g;
        float w = tejitExp2(sM[at] - top);
        sum += sL[at] * w;
        acc += sO[at * D + d] * w;
      }
    p.partial_o[target * D + d] = acc;
    if (d == 0) {
      p.partial_stats[2 * target] = top;
      p.partial_stats[2 * target + 1] = sum;
    }
  }
}

extern "C" __global__ void __launch_bounds__(TEJIT_DECODE_WARPS * 32, 2)
    tejit_decode_attention(TejitDecodeAttention p) {
  __shared__ float sO[TEJIT_DECODE_SHARED];
  __shared__ float sM[TEJIT_DECODE_SHARED / 32], sL[TEJIT_DECODE_SHARED / 32];
  if (p.head_dim > 64) {
    if (p.f16)
      tejitDecodeSplit<16, true>(p, sO, sM, sL);
    else
      tejitDecodeSplit<16, false>(p, sO, sM, sL);
  } else if (p.head_dim > 32) {
    if (p.f16)
      tejitDecodeSplit<8, true>(p, sO, sM, sL);
    else
      tejitDecodeSplit<8, false>(p, sO, sM, sL);
  } else {
    if (p.f16)
      tejitDecodeSplit<4, true>(p, sO, sM, sL);
    else
      tejitDecodeSplit<4, false>(p, sO, sM, sL);
  }
}

extern "C" __global__ void
tejit_decode_attention_combine(TejitDecodeAttention p) {
  const long long row = blockIdx.x;
  const long long i = row / (p.heads * p.seq_q);
  const long long hq = row / p.seq_q % p.heads, j = row % p.seq_q;
  if (j >= p.seq_len_q[i])
    return;
  const float *stats = p.partial_stats + 2 * row * p.splits;
  float top = -INFINITY;
  for (long long s = 0; s < p.splits; ++s)
    if (stats[2 * s + 1] > 0.f)
      top = fmaxf(top, stats[2 * s]);
  float sum = 0.f;
  for (long long s = 0; s < p.splits; ++s)
    if (stats[2 * s + 1] > 0.f)
      sum += stats[2 * s + 1] * tejitExp2(stats[2 * s] - top);
  const long long D = p.head_dim;
  unsigned short *out = p.o + p.o_offsets[i] + (j * p.heads + hq) * D;
  const float *partial = p.partial_o + row * p.splits * D;
  for (long long d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (long long s = 0; s < p.splits; ++s)
      if (stats[2 * s + 1] > 0.f)
        acc += partial[s * D + d] * tejitExp2(stats[2 * s] - top);
    float value = sum > 0.f ? acc / sum : 0.f;
    out[d] = p.f16 ? __half_as_ushort(__float2half_rn(value))
                   : __bfloat16_as_ushort(__float2bfloat16_rn(value));
  }
}
