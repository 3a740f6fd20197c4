// Split-KV decode attention ("flash-decoding") for kv_cache_attention steps
// with few new queries per sequence (docs/kv-cache-plan.md, "Decode
// attention without cuDNN"), compiled to PTX at build time
// (runtime/CMakeLists.txt) like AttentionPrep.cu and loaded through
// ModuleSet::helper.
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
// warps per block divide the CTA's keys, 8 keys a warp per step (a CTA's
// step: 8 * 4 / row_blocks_per_cta keys).
//
// The split is made on the device, per sequence: `splits` is fixed at
// create(), and a CTA whose rows see `visible` keys (L_i, or under `causal`
// L_i - n_i + 1 + the last query j of its rows) takes the chunk
// c = ceil(visible / splits) rounded up to its step's keys: split s covers
// keys [s * c, min((s + 1) * c, visible)). Every split of every sequence
// so gets about the same work whatever L_i is; the splits do not depend on
// the cache's rows S, and nothing is read back to the host (the step stays
// CUDA-graph capturable; a replay with longer caches is right).
//
// Keys reach the warps through shared memory: each lane copies its own
// 16-byte pieces of K and V (cp.async, zero-filled past the chunk or the
// head dim) into a private ring of 3 steps and reads back only what it
// copied, so no barrier is needed in the loop and two steps are in flight
// while one is used; the registers stay few enough for 4 CTAs an SM.
// Lanes split the head dim (8 elements, 16 bytes, each): LPK lanes read one
// key row coalesced, a warp 32 / LPK keys per copy. A key's 4 q.k partial
// sums (one a row) are reduced across the LPK lanes by a reduce-scatter
// then an all-gather (8 shuffles for LPK 16, not 16): slot r of a lane holds
// row r ^ x, x = (lane / (LPK / 4)) & 3, so no lane selects what it sends.
// Each group of LPK lanes keeps its own online softmax (running max in the
// log2 domain, sum, unnormalized o) for the keys it saw; at the end the CTA
// merges its groups through shared memory (the ring's bytes) and writes one
// partial per (sequence, head, j, split): (max, sum) into partial_stats and
// o[d] into partial_o. A CTA whose chunk is empty (past visible) or whose keys
// are all masked for its rows writes the empty partial (max -inf, sum 0).
//
// tejit_decode_attention_combine: one CTA per (sequence, head, j) row of
// [b, heads, s_q]; rows with j >= n_i write nothing (the prep kernel zeroes
// o's tail rows, and rows of other sequences are theirs). Merges the row's
// non-empty splits and rounds once to bf16 / f16 into o.
//
// bf16 and f16 share one body (a uniform branch where elements widen).
// The host mirror of the struct is in runtime/AttentionLauncher.cpp; every
// field is 8 bytes wide so that both compilers lay it out alike.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define TEJIT_DECODE_WARPS 4
#define TEJIT_DECODE_ROWS 4   // query rows a warp holds
#define TEJIT_DECODE_KEYS 8   // keys a warp reads per step
#define TEJIT_DECODE_STAGES 3 // steps in the ring: two in flight, one used
// 16-byte pieces of K (and V) a lane copies per step, at most.
#define TEJIT_DECODE_PIECES 4
// The ring: stages x (K, V) x pieces x threads of 16 bytes (48 KiB); the
// merge reuses it (rows * groups * d <= 4096 floats, then max and sum).
#define TEJIT_DECODE_RING                                                      \
  (TEJIT_DECODE_STAGES * 2 * TEJIT_DECODE_PIECES * TEJIT_DECODE_WARPS * 32)
#define TEJIT_DECODE_SHARED 4096

struct TejitDecodeAttention {
  const unsigned short *q;
  const unsigned short *k_cache, *v_cache;
  const int *seq_len_q, *seq_len_kv, *q_offsets, *o_offsets;
  float *partial_stats; // [b, heads, s_q, splits] x (max, sum)
  float *partial_o;     // [b, heads, s_q, splits, d]
  unsigned short *o;
  long long batch, heads, kv_heads, head_dim, seq_q, cache_rows, splits,
      q_stride, row_blocks_per_cta, causal, f16;
  double scale_log2; // softmax_scale * log2(e)
};

__device__ __forceinline__ float tejitExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float tejitToFloat(unsigned short bits, bool f16) {
  if (f16)
    return __half2float(__ushort_as_half(bits));
  return __uint_as_float(unsigned(bits) << 16);
}

__device__ __forceinline__ void tejitUnpack8(const uint4 &raw, float out[8],
                                             bool f16) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
  if (f16) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      __half2 pair = *reinterpret_cast<const __half2 *>(&words[w]);
      float2 f = __half22float2(pair);
      out[2 * w] = f.x;
      out[2 * w + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      out[2 * w] = __uint_as_float(words[w] << 16);
      out[2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
    }
  }
}

// 16 bytes from global to shared memory, asynchronously; `bytes` 0 fills
// zeros (and reads nothing).
__device__ __forceinline__ void
tejitCopy16(unsigned shared, const unsigned short *global, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared),
               "l"(global), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void tejitCopyCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void tejitCopyWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The row of the partials (and of o's [b, heads, s_q] rows) of CTA row rho
// of sequence i, kv head kh.
// 32-bit: every count here is far below 2^31, and a 64-bit division is a
// ~70-instruction routine that the short-cache split pass (a few steps a
// CTA) paid several times per row.
__device__ __forceinline__ int tejitDecodeRow(int heads, int seqQ, int i,
                                              int kh, int perKv, int rho) {
  int j = rho / perKv, hq = kh * perKv + rho % perKv;
  return (i * heads + hq) * seqQ + j;
}

template <int LPK>
__device__ void tejitDecodeSplit(const TejitDecodeAttention &p, uint4 *ring) {
  constexpr int KPG = 32 / LPK;              // keys per warp copy
  constexpr int U = TEJIT_DECODE_KEYS / KPG; // pieces per step (K or V)
  constexpr int R = TEJIT_DECODE_ROWS;
  constexpr int T = TEJIT_DECODE_WARPS * 32;
  static_assert(U <= TEJIT_DECODE_PIECES, "the ring holds 4 pieces a step");
  const bool f16 = p.f16 != 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int split = int(blockIdx.x), splits = int(p.splits);
  const int kvHeads = int(p.kv_heads), heads = int(p.heads),
            seqQ = int(p.seq_q);
  const int i = int(blockIdx.y) / kvHeads, kh = int(blockIdx.y) % kvHeads;
  const int rbPerCta = int(p.row_blocks_per_cta);
  const int keyParts = TEJIT_DECODE_WARPS / rbPerCta;
  const int perKv = heads / kvHeads;
  const int D = int(p.head_dim);
  const int n = p.seq_len_q[i], L = p.seq_len_kv[i];
  const int liveRows = n * perKv;
  const int ctaRow0 = int(blockIdx.z) * rbPerCta * R;
  if (ctaRow0 >= liveRows)
    return; // rows of queries j >= n_i: nothing to write
  const int ctaRowEnd =
      ctaRow0 + rbPerCta * R < liveRows ? ctaRow0 + rbPerCta * R : liveRows;
  // The last key any of the CTA's rows sees, plus one.
  const int lastJ = (ctaRowEnd - 1) / perKv;
  const int visible = p.causal ? L - n + lastJ + 1 : L;
  // This sequence's chunk: visible / splits, rounded up to whole steps.
  const int stepKeys = keyParts * TEJIT_DECODE_KEYS;
  const int perSplit = visible > 0 ? (visible + splits - 1) / splits : 0;
  const int chunk = (perSplit + stepKeys - 1) / stepKeys * stepKeys;
  const long long keyBegin = (long long)split * chunk;
  const int keyEnd =
      int(keyBegin + chunk < visible ? keyBegin + chunk : (long long)visible);
  if (keyBegin >= keyEnd) {
    for (int rho = ctaRow0 + threadIdx.x; rho < ctaRowEnd; rho += blockDim.x) {
      float *stats =
          p.partial_stats +
          2 * (size_t(tejitDecodeRow(heads, seqQ, i, kh, perKv, rho)) * splits +
               split);
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
  const size_t rowStride = size_t(p.kv_heads) * D;
  const size_t first =
      (size_t(i) * size_t(p.cache_rows) * size_t(kvHeads) + size_t(kh)) * D +
      dim0;
  const unsigned short *kBase = p.k_cache + first, *vBase = p.v_cache + first;
  // Step t of this warp: keys keyBegin + t * stepKeys + kp * 8 + [0, 8);
  // piece u of a lane is key u * KPG + lane / LPK of those.
  const int warpKey0 = int(keyBegin) + kp * TEJIT_DECODE_KEYS + lane / LPK;
  const int steps = (keyEnd - int(keyBegin) + stepKeys - 1) / stepKeys;
  const unsigned ringBase = unsigned(__cvta_generic_to_shared(ring));
  // Slot (stage, kv, u) of this thread: 16 bytes, threads side by side.
  auto slot = [&](int stage, int kv, int u) {
    return ((stage * 2 + kv) * TEJIT_DECODE_PIECES + u) * T + int(threadIdx.x);
  };
  auto issue = [&](int t) {
    if (t < steps) {
      const int stage = t % TEJIT_DECODE_STAGES;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        int key = warpKey0 + t * stepKeys + u * KPG;
        bool ok = key < keyEnd && dimOk;
        size_t at = ok ? size_t(key) * rowStride : 0;
        tejitCopy16(ringBase + 16u * unsigned(slot(stage, 0, u)), kBase + at,
                    ok ? 16 : 0);
        tejitCopy16(ringBase + 16u * unsigned(slot(stage, 1, u)), vBase + at,
                    ok ? 16 : 0);
      }
    }
    tejitCopyCommit(); // empty groups keep the count uniform
  };
  // Loaded before the copies are issued, so that its latency overlaps
  // theirs (q's rows depend on it).
  const long long qOffset = p.q_offsets[i];
  issue(0);
  issue(1);

  // Slot r of a lane holds row r ^ x of its warp's rows, x from the lane's
  // place among the LPK: the score reduction below then needs no selects.
  constexpr int HALF = LPK / 2, QUARTER = LPK / 4;
  const int x = (lane / QUARTER) & 3;
  float q[R][8], o[R][8], m[R], l[R];
  int limit[R]; // the last key row r sees (-1: none)
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int rho = ctaRow0 + rb * R + (r ^ x);
    bool live = rho < ctaRowEnd;
    int j = rho / perKv, hq = kh * perKv + rho % perKv;
    m[r] = -INFINITY;
    l[r] = 0.f;
    limit[r] = live ? (p.causal ? L - n + j : L - 1) : -1;
    if (limit[r] >= keyEnd)
      limit[r] = keyEnd - 1;
    // Element by element: q's rows need not be 16-byte aligned.
    const unsigned short *row =
        p.q + qOffset + (long long)j * p.q_stride + hq * D + dim0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      o[r][e] = 0.f;
      q[r][e] =
          live && dimOk ? tejitToFloat(row[e], f16) * float(p.scale_log2) : 0.f;
    }
  }

  for (int t = 0; t < steps; ++t) {
    // The slot refilled here was used by step t - 1, whose values are
    // already consumed (this thread's own reads, in order).
    issue(t + 2);
    tejitCopyWait<2>(); // step t has landed
    const int stage = t % TEJIT_DECODE_STAGES;
    const int base = warpKey0 + t * stepKeys;
    float s[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      tejitUnpack8(ring[slot(stage, 0, u)], kf, f16);
      int key = base + u * KPG;
      float acc[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        acc[r] = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[r] = fmaf(q[r][e], kf[e], acc[r]);
      }
      // Reduce-scatter over the LPK lanes, then all-gather: 8 shuffles
      // for LPK 16 (7 for 8, 6 for 4) instead of 4 * log2(LPK). The
      // partner at offset HALF holds rows x ^ 2 in its slots 0, 1 (ours
      // in its slots 2, 3), the one at QUARTER row x in its slot 1.
      float a0 = acc[0] + __shfl_xor_sync(0xffffffffu, acc[2], HALF);
      float a1 = acc[1] + __shfl_xor_sync(0xffffffffu, acc[3], HALF);
      a0 += __shfl_xor_sync(0xffffffffu, a1, QUARTER);
#pragma unroll
      for (int offset = QUARTER / 2; offset > 0; offset /= 2)
        a0 += __shfl_xor_sync(0xffffffffu, a0, offset);
      // a0: row x's score, the same bits in every lane that holds it.
      acc[0] = a0;
      acc[1] = __shfl_xor_sync(0xffffffffu, a0, QUARTER);
      acc[2] = __shfl_xor_sync(0xffffffffu, a0, HALF);
      acc[3] = __shfl_xor_sync(0xffffffffu, acc[1], HALF);
#pragma unroll
      for (int r = 0; r < R; ++r)
        s[u][r] = key <= limit[r] ? acc[r] : -INFINITY;
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
      tejitUnpack8(ring[slot(stage, 1, u)], vf, f16);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int e = 0; e < 8; ++e)
          o[r][e] = fmaf(s[u][r], vf[e], o[r][e]);
    }
  }
  tejitCopyWait<0>();
  __syncthreads(); // every thread is done with the ring: the merge reuses it

  // Every group's state into shared memory, then one merge per (row, d).
  float *sO = reinterpret_cast<float *>(ring);
  float *sM = sO + TEJIT_DECODE_SHARED, *sL = sM + TEJIT_DECODE_SHARED / 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int at = (rb * R + (r ^ x)) * groups + group;
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
  // One row at a time, a thread per element of d: the row's merge weights
  // and its partials' place are worked out once per row, not per element.
  const int ctaRows = ctaRowEnd - ctaRow0;
  for (int row = 0; row < ctaRows; ++row) {
    const float *rowM = sM + row * groups, *rowL = sL + row * groups;
    float top = -INFINITY;
    for (int g = 0; g < groups; ++g)
      top = fmaxf(top, rowM[g]);
    const size_t target =
        size_t(tejitDecodeRow(heads, seqQ, i, kh, perKv, ctaRow0 + row)) *
            splits +
        split;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float sum = 0.f, acc = 0.f;
      if (top != -INFINITY)
        for (int g = 0; g < groups; ++g) {
          float w = tejitExp2(rowM[g] - top);
          sum += rowL[g] * w;
          acc += sO[(row * groups + g) * D + d] * w;
        }
      p.partial_o[target * D + d] = acc;
      if (d == 0) {
        p.partial_stats[2 * target] = top;
        p.partial_stats[2 * target + 1] = sum;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(TEJIT_DECODE_WARPS * 32, 4)
    tejit_decode_attention(TejitDecodeAttention p) {
  __shared__ uint4 ring[TEJIT_DECODE_RING];
  if (p.head_dim > 64)
    tejitDecodeSplit<16>(p, ring);
  else if (p.head_dim > 32)
    tejitDecodeSplit<8>(p, ring);
  else
    tejitDecodeSplit<4>(p, ring);
}

extern "C" __global__ void
tejit_decode_attention_combine(TejitDecodeAttention p) {
  // Latency first: the splits' stats in one load a thread, their weights
  // through shared memory, then the o partials 8 loads at a time.
  __shared__ float sTop[64], sWeight[64], sSum[64];
  const int row = int(blockIdx.x), heads = int(p.heads), seqQ = int(p.seq_q);
  const int i = row / (heads * seqQ), hq = row / seqQ % heads, j = row % seqQ;
  if (j >= p.seq_len_q[i])
    return;
  const int splits = int(p.splits), t = int(threadIdx.x);
  const float *stats = p.partial_stats + 2 * size_t(row) * splits;
  if (t < 64) {
    float m = -INFINITY, l = 0.f;
    if (t < splits) {
      m = stats[2 * t];
      l = stats[2 * t + 1];
    }
    sTop[t] = l > 0.f ? m : -INFINITY; // empty splits count for nothing
    sSum[t] = l > 0.f ? l : 0.f;
  }
  __syncthreads();
  float top = -INFINITY;
  for (int s = 0; s < splits; ++s)
    top = fmaxf(top, sTop[s]);
  if (t < 64)
    sWeight[t] = sSum[t] > 0.f ? tejitExp2(sTop[t] - top) : 0.f;
  __syncthreads();
  float sum = 0.f;
  for (int s = 0; s < splits; ++s)
    sum += sSum[s] * sWeight[s];
  const int D = int(p.head_dim);
  unsigned short *out =
      p.o + p.o_offsets[i] + (size_t(j) * heads + hq) * size_t(D);
  const float *partial = p.partial_o + size_t(row) * splits * D;
  for (int d = t; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int s0 = 0; s0 < splits; s0 += 8) {
      float x[8];
#pragma unroll
      for (int k = 0; k < 8; ++k)
        x[k] = s0 + k < splits ? partial[(s0 + k) * D + d] : 0.f;
        // Empty splits wrote no o: their (unset) values are never used.
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (s0 + k < splits && sWeight[s0 + k] > 0.f)
          acc = fmaf(sWeight[s0 + k], x[k], acc);
    }
    float value = sum > 0.f ? acc / sum : 0.f;
    out[d] = p.f16 ? __half_as_ushort(__float2half_rn(value))
                   : __bfloat16_as_ushort(__float2bfloat16_rn(value));
  }
}
