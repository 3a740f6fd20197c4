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
// Two split passes share the grid (splits, b * kv_heads, row groups) of 4
// warps, the split rule and the partials: tejit_decode_attention_mma for
// head dims 64 and 128, on tensor cores (see tejitDecodeSplitMma: the CTA's
// at most 16 rows are the M of mma.m16n8k16, each warp 16 keys a step), and
// tejit_decode_attention for the other head dims, on the CUDA cores:
//
// tejit_decode_attention (the CUDA-core split pass): 4 warps. The rows of one
// (sequence, kv head) are its (query j, head) pairs, row rho = j * (heads /
// kv_heads) + head in group, so the rows of the n_i live queries come first; a
// warp holds 4 rows in registers (q pre-scaled by softmax_scale * log2(e),
// fp32), a CTA row_blocks_per_cta (1, 2 or 4) such blocks, and its 4 /
// row_blocks_per_cta warps per block divide the CTA's keys, 8 keys a warp per
// step (a CTA's step: 8 * 4 / row_blocks_per_cta keys).
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
// Paged caches (page_table set; docs/paged-kv-cache.md): the caches are pools
// [pages, page_size, kv_heads, d] and key r of sequence i is row
// r % page_size of page page_table[i][r / page_size] (the prep kernel's
// clamped copy of the table, so every id is in range); tejitPagedRow maps
// keys as their pieces are copied (the tensor-core pass: once a tile).
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
// Resident CTAs an SM (the launch bounds; the host's decodeResidentCtas):
// the tensor-core pass needs up to 168 registers a thread (the fp32 o of 16
// rows x d 128 alone takes 64), the other 128.
#define TEJIT_DECODE_CTAS_PER_SM 4
#define TEJIT_DECODE_MMA_CTAS_PER_SM 3

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
  // Paged caches: int32 [b, pages_per_sequence], ids in [0, pages).
  const int *page_table;
  long long page_size, pages_per_sequence;
};

// Paged caches: the pool row (in units of kv_heads * d elements) holding key
// `key` of sequence i.
__device__ __forceinline__ size_t tejitPagedRow(const TejitDecodeAttention &p,
                                                int i, int key) {
  const int size = int(p.page_size);
  const int page = p.page_table[i * int(p.pages_per_sequence) + key / size];
  return size_t(page) * size_t(size) + size_t(key % size);
}

// Where sequence i's rows start: row 0 of its plain cache, or the pool's
// start (paged: tejitPagedRow places each key).
__device__ __forceinline__ size_t
tejitSequenceRows(const TejitDecodeAttention &p, int i) {
  return p.page_table ? 0 : size_t(i) * size_t(p.cache_rows);
}

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

// Where a split-pass CTA works: its sequence i, kv head kh, its rows
// [row0, rowEnd) of (i, kh) and its split's keys [keyBegin, keyEnd).
struct TejitDecodeCta {
  int split, splits, heads, seqQ, kvHeads, perKv, i, kh, n, L;
  int row0, rowEnd, keyBegin, keyEnd;
};

// Fills `c` for a CTA of `ctaRows` rows whose steps take `stepKeys` keys;
// false when the CTA has nothing to do: its rows are those of queries j >=
// n_i (nothing to write), or its split is empty (its rows' empty partials,
// max -inf and sum 0, are written here).
__device__ __forceinline__ bool tejitDecodePlace(const TejitDecodeAttention &p,
                                                 int ctaRows, int stepKeys,
                                                 TejitDecodeCta &c) {
  c.split = int(blockIdx.x);
  c.splits = int(p.splits);
  c.heads = int(p.heads);
  c.seqQ = int(p.seq_q);
  c.kvHeads = int(p.kv_heads);
  c.perKv = c.heads / c.kvHeads;
  c.i = int(blockIdx.y) / c.kvHeads;
  c.kh = int(blockIdx.y) % c.kvHeads;
  c.n = p.seq_len_q[c.i];
  c.L = p.seq_len_kv[c.i];
  const int liveRows = c.n * c.perKv;
  c.row0 = int(blockIdx.z) * ctaRows;
  if (c.row0 >= liveRows)
    return false;
  c.rowEnd = c.row0 + ctaRows < liveRows ? c.row0 + ctaRows : liveRows;
  // The last key any of the CTA's rows sees, plus one.
  const int lastJ = (c.rowEnd - 1) / c.perKv;
  const int visible = p.causal ? c.L - c.n + lastJ + 1 : c.L;
  // This sequence's chunk: visible / splits, rounded up to whole steps.
  const int perSplit = visible > 0 ? (visible + c.splits - 1) / c.splits : 0;
  const long long chunk = (perSplit + stepKeys - 1) / stepKeys * stepKeys;
  const long long begin = (long long)c.split * chunk;
  const long long end = begin + chunk < visible ? begin + chunk : visible;
  if (begin >= end) {
    for (int rho = c.row0 + int(threadIdx.x); rho < c.rowEnd;
         rho += int(blockDim.x)) {
      float *stats =
          p.partial_stats + 2 * (size_t(tejitDecodeRow(c.heads, c.seqQ, c.i,
                                                       c.kh, c.perKv, rho)) *
                                     c.splits +
                                 c.split);
      stats[0] = -INFINITY;
      stats[1] = 0.f;
    }
    return false;
  }
  c.keyBegin = int(begin);
  c.keyEnd = int(end);
  return true;
}

// The last key row `rho` of the CTA sees within its split (-1: none, or
// a row past the CTA's live rows): L_i - n_i + j under `causal`, else
// L_i - 1, at most keyEnd - 1.
__device__ __forceinline__ int tejitDecodeLimit(const TejitDecodeAttention &p,
                                                const TejitDecodeCta &c,
                                                int rho) {
  if (rho >= c.rowEnd)
    return -1;
  const int last = p.causal ? c.L - c.n + rho / c.perKv : c.L - 1;
  return last < c.keyEnd ? last : c.keyEnd - 1;
}

// The CTA's partials from the softmax states its `groups` groups left in
// shared memory (sM, sL: [row][group]; sO: [row][group][d], rows local to
// the CTA). One row at a time, a thread per element of d: the row's merge
// weights and its partials' place are worked out once per row.
__device__ __forceinline__ void tejitDecodeMerge(const TejitDecodeAttention &p,
                                                 const TejitDecodeCta &c,
                                                 const float *sO,
                                                 const float *sM,
                                                 const float *sL, int groups) {
  const int D = int(p.head_dim), rows = c.rowEnd - c.row0;
  for (int row = 0; row < rows; ++row) {
    const float *rowM = sM + row * groups, *rowL = sL + row * groups;
    float top = -INFINITY;
    for (int g = 0; g < groups; ++g)
      top = fmaxf(top, rowM[g]);
    const size_t target = size_t(tejitDecodeRow(c.heads, c.seqQ, c.i, c.kh,
                                                c.perKv, c.row0 + row)) *
                              c.splits +
                          c.split;
    for (int d = int(threadIdx.x); d < D; d += int(blockDim.x)) {
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

template <int LPK, bool PAGED>
__device__ void tejitDecodeSplit(const TejitDecodeAttention &p, uint4 *ring) {
  constexpr int KPG = 32 / LPK;              // keys per warp copy
  constexpr int U = TEJIT_DECODE_KEYS / KPG; // pieces per step (K or V)
  constexpr int R = TEJIT_DECODE_ROWS;
  constexpr int T = TEJIT_DECODE_WARPS * 32;
  static_assert(U <= TEJIT_DECODE_PIECES, "the ring holds 4 pieces a step");
  const bool f16 = p.f16 != 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rbPerCta = int(p.row_blocks_per_cta);
  const int keyParts = TEJIT_DECODE_WARPS / rbPerCta;
  const int stepKeys = keyParts * TEJIT_DECODE_KEYS;
  const int D = int(p.head_dim);
  TejitDecodeCta c;
  if (!tejitDecodePlace(p, rbPerCta * R, stepKeys, c))
    return;
  const int i = c.i, kh = c.kh, perKv = c.perKv;
  const int ctaRow0 = c.row0, keyEnd = c.keyEnd;
  const int ctaRowEnd = c.rowEnd;
  const long long keyBegin = c.keyBegin;

  const int rb = warp % rbPerCta, kp = warp / rbPerCta;
  const int groups = keyParts * KPG; // softmax states per row
  const int group = kp * KPG + lane / LPK;
  const int dim0 = (lane % LPK) * 8;
  const bool dimOk = dim0 < D;
  const size_t rowStride = size_t(p.kv_heads) * D;
  constexpr bool paged = PAGED;
  const size_t first =
      (tejitSequenceRows(p, i) * size_t(p.kv_heads) + size_t(kh)) * D + dim0;
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
        size_t row = paged && ok ? tejitPagedRow(p, i, key) : size_t(key);
        size_t at = ok ? row * rowStride : 0;
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
    limit[r] = tejitDecodeLimit(p, c, rho);
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
  tejitDecodeMerge(p, c, sO, sM, sL, groups);
}

// Tensor-core primitives of the split pass for head dims 64 and 128.
template <bool F16>
__device__ __forceinline__ void tejitMma(float c[4], const unsigned a[4],
                                         unsigned b0, unsigned b1) {
  if (F16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
}

template <bool TRANS>
__device__ __forceinline__ void tejitLdmatrix4(unsigned r[4],
                                               unsigned address) {
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

// Two floats rounded to one register of two 16-bit elements, lo first.
template <bool F16>
__device__ __forceinline__ unsigned tejitPack2(float lo, float hi) {
  unsigned short a, b;
  if (F16) {
    a = __half_as_ushort(__float2half_rn(lo));
    b = __half_as_ushort(__float2half_rn(hi));
  } else {
    a = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
    b = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
  }
  return unsigned(a) | (unsigned(b) << 16);
}

// The split pass on tensor cores (head dims 64 and 128). The CTA's rows
// (at most 16: rowBlocksPerCta * 4) are the M = 16 rows of mma.m16n8k16;
// each warp takes 16 keys a step (a CTA 64), its own online softmax over
// them, so q.k and p.v are 2 * D / 8 mma instructions per 16 keys and no
// shuffle reduction. Per key step: S = Q K^T (fp32), masked and scaled into
// the log2 domain, p = 2^(S - max) rounded to bf16/f16 as the A operand of
// O += P V (fp32), as flash attention does. K and V tiles (16 keys x D) go
// through a ring of 3 tile slots per warp by cp.async, in the order K0 V0 K1
// V1 ..., so that two tiles are in flight while one is used; 16-byte pieces
// are XOR-swizzled by key row so that ldmatrix reads conflict-free.
// How the tensor-core pass finds a key's cache row: row [i, key] of a plain
// cache; through the table once a 16-key tile (pages of a multiple of 16
// rows hold whole tiles); through the table key by key (other page sizes).
#define TEJIT_PLAIN_ROWS 0
#define TEJIT_PAGED_TILES 1
#define TEJIT_PAGED_KEYS 2

template <int D, bool F16, int PAGING>
__device__ void tejitDecodeSplitMma(const TejitDecodeAttention &p,
                                    uint4 *ring) {
  constexpr int KEYS = 16;            // a warp's keys per step
  constexpr int CHUNKS = D / 8;       // 16-byte pieces of a key row
  constexpr int SLOT = KEYS * CHUNKS; // 16-byte pieces of a tile
  constexpr int PER_LANE = SLOT / 32; // pieces a lane copies per tile
  constexpr int W = TEJIT_DECODE_WARPS;
  constexpr int STEP = W * KEYS; // a CTA's keys per step
  static_assert(CHUNKS >= 8, "the swizzle takes 8 pieces a row");
  static_assert(W * 3 * SLOT <= TEJIT_DECODE_RING, "the ring holds 3 tiles");
  static_assert(16 * W * D + 2 * 16 * W <= TEJIT_DECODE_RING * 4,
                "the merge fits the ring");
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int g = lane >> 2, t = lane & 3; // mma fragment coordinates
  TejitDecodeCta c;
  if (!tejitDecodePlace(p, int(p.row_blocks_per_cta) * TEJIT_DECODE_ROWS, STEP,
                        c))
    return;
  // Loaded first, so that its latency overlaps the copies' (q's rows
  // depend on it).
  const long long qOffset = p.q_offsets[c.i];

  const size_t rowStride = size_t(c.kvHeads) * D;
  const size_t first =
      (tejitSequenceRows(p, c.i) * size_t(c.kvHeads) + size_t(c.kh)) * D;
  const unsigned short *kBase = p.k_cache + first, *vBase = p.v_cache + first;
  // A warp's tiles start at multiples of 16 keys (keyBegin is whole steps):
  // with pages of a multiple of 16 rows a tile lies in one page, and one
  // table read places all of it; other page sizes place every key.
  constexpr bool paged = PAGING != TEJIT_PLAIN_ROWS;
  constexpr bool tileInPage = PAGING != TEJIT_PAGED_KEYS;
  const int warpKey0 = c.keyBegin + warp * KEYS;
  const int steps = (c.keyEnd - c.keyBegin + STEP - 1) / STEP;
  const unsigned slots =
      unsigned(__cvta_generic_to_shared(ring + warp * 3 * SLOT));
  // Piece (key row, chunk) of a tile slot, swizzled.
  auto piece = [](int slot, int row, int chunk) {
    return 16u * unsigned(slot * SLOT + row * CHUNKS + (chunk ^ (row & 7)));
  };
  // Paged, a tile in one page: the page id of step s's tile (-1 past the
  // split's keys), read a step before its copies are issued so that the
  // table's latency overlaps a step's math; and the tile's first row.
  auto tilePage = [&](int step) {
    const int key0 = warpKey0 + step * STEP;
    return paged && tileInPage && step < steps && key0 < c.keyEnd
               ? p.page_table[c.i * int(p.pages_per_sequence) +
                              key0 / int(p.page_size)]
               : -1;
  };
  auto tileRow = [&](int step, int page) {
    const int key0 = warpKey0 + step * STEP;
    if (!paged || !tileInPage || page < 0)
      return size_t(key0);
    const int size = int(p.page_size);
    return size_t(page) * size_t(size) + size_t(key0 % size);
  };
  // Item q of the warp's stream: the K tile of step q / 2 (q even) or its
  // V tile, into slot q % 3, the tile's first key at cache row `row0`
  // (tileRow's); past the last step an empty group keeps the count of
  // groups uniform.
  auto issue = [&](int item, size_t row0) {
    const int step = item >> 1;
    if (step < steps) {
      const unsigned short *base = (item & 1) ? vBase : kBase;
      const int key0 = warpKey0 + step * STEP;
      // Paged tiles: the tile's first row, then each piece's offset from it.
      const unsigned short *tile = base + row0 * rowStride;
#pragma unroll
      for (int u = 0; u < PER_LANE; ++u) {
        const int at = u * 32 + lane, row = at / CHUNKS, chunk = at % CHUNKS;
        const int key = key0 + row;
        const bool ok = key < c.keyEnd;
        const unsigned short *from;
        if constexpr (PAGING == TEJIT_PLAIN_ROWS)
          from = base + (ok ? size_t(key) * rowStride : 0);
        else if constexpr (PAGING == TEJIT_PAGED_TILES)
          from = ok ? tile + size_t(row) * rowStride : base;
        else
          from = base + (ok ? tejitPagedRow(p, c.i, key) * rowStride : 0);
        tejitCopy16(slots + piece(item % 3, row, chunk), from + chunk * 8,
                    ok ? 16 : 0);
      }
    }
    tejitCopyCommit();
  };
  // The rows of the tiles of the step after the one being issued (`next`)
  // and of the one after that (from `ahead`, the page read early).
  const size_t tile0 = tileRow(0, tilePage(0));
  issue(0, tile0);
  issue(1, tile0);
  size_t next = tileRow(1, tilePage(1));
  issue(2, next);
  int ahead = -1;

  // Q as A fragments: rows g and g + 8 of the CTA's 16, k-chunks of 16.
  // Element by element: q's rows need not be 4-byte aligned.
  unsigned qa[D / 16][4];
  int limit[2]; // the last key row g + 8 * half sees (-1: none)
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int rho = c.row0 + g + 8 * half;
    const bool live = rho < c.rowEnd;
    const int j = rho / c.perKv, hq = c.kh * c.perKv + rho % c.perKv;
    limit[half] = tejitDecodeLimit(p, c, rho);
    const unsigned short *row =
        p.q + qOffset + (long long)j * p.q_stride + hq * D + 2 * t;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
#pragma unroll
      for (int part = 0; part < 2; ++part) {
        const int col = kc * 16 + part * 8;
        qa[kc][half + 2 * part] =
            live ? unsigned(row[col]) | (unsigned(row[col + 1]) << 16) : 0u;
      }
  }

  const float scaleLog2 = float(p.scale_log2);
  float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[nt][e] = 0.f;
  const int matrix = lane >> 3, matrixRow = lane & 7;

  for (int step = 0; step < steps; ++step) {
    const int kSlot = (2 * step) % 3, vSlot = (2 * step + 1) % 3;
    if (paged)
      ahead = tilePage(step + 2); // used at the step's end
    tejitCopyWait<2>(); // this step's K has landed (its V, next K in flight)
    __syncwarp();       // ... every lane's part of it
    // S = Q K^T: two n-tiles of 8 keys. Matrix mi of an ldmatrix.x4: keys
    // (mi / 2) * 8 + [0, 8), dims of chunk 2 kc + mi % 2: b0 b1 of n-tile
    // 0, then of n-tile 1.
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      unsigned b[4];
      const int row = (matrix >> 1) * 8 + matrixRow;
      tejitLdmatrix4<false>(b,
                            slots + piece(kSlot, row, 2 * kc + (matrix & 1)));
      tejitMma<F16>(sc[0], qa[kc], b[0], b[1]);
      tejitMma<F16>(sc[1], qa[kc], b[2], b[3]);
    }
    __syncwarp(); // every lane has read the K tile: its slot takes a V next
    issue(2 * step + 3, next);

    // Online softmax. sc[nt][e]: row g + 8 * (e / 2), key nt * 8 + 2 t +
    // e % 2 of the warp's 16; a row's values sit in the 4 lanes of its g.
    const int key0 = warpKey0 + step * STEP + 2 * t;
    float top[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int half = e >> 1, key = key0 + nt * 8 + (e & 1);
        sc[nt][e] = key <= limit[half] ? sc[nt][e] * scaleLog2 : -INFINITY;
        top[half] = fmaxf(top[half], sc[nt][e]);
      }
    float shift[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      top[half] = fmaxf(top[half], __shfl_xor_sync(0xffffffffu, top[half], 1));
      top[half] = fmaxf(top[half], __shfl_xor_sync(0xffffffffu, top[half], 2));
      // With every key masked so far, the max stays -inf and every p is 0.
      const float a =
          top[half] == -INFINITY ? 1.f : tejitExp2(m[half] - top[half]);
      m[half] = top[half];
      l[half] *= a;
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        o[nt][2 * half] *= a;
        o[nt][2 * half + 1] *= a;
      }
      shift[half] = top[half] == -INFINITY ? 0.f : top[half];
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[nt][e] = tejitExp2(sc[nt][e] - shift[e >> 1]);
        l[e >> 1] += sc[nt][e];
      }
    // P as the A fragment of k = the warp's 16 keys.
    const unsigned pa[4] = {tejitPack2<F16>(sc[0][0], sc[0][1]),
                            tejitPack2<F16>(sc[0][2], sc[0][3]),
                            tejitPack2<F16>(sc[1][0], sc[1][1]),
                            tejitPack2<F16>(sc[1][2], sc[1][3])};

    tejitCopyWait<2>(); // this step's V has landed
    __syncwarp();
    // O += P V: matrix mi of an ldmatrix.x4.trans: keys (mi % 2) * 8 +
    // [0, 8), dims of chunk 2 dp + mi / 2: b0 b1 of n-tile 2 dp, then of
    // n-tile 2 dp + 1.
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      unsigned b[4];
      const int row = (matrix & 1) * 8 + matrixRow;
      tejitLdmatrix4<true>(b,
                           slots + piece(vSlot, row, 2 * dp + (matrix >> 1)));
      tejitMma<F16>(o[2 * dp], pa, b[0], b[1]);
      tejitMma<F16>(o[2 * dp + 1], pa, b[2], b[3]);
    }
    __syncwarp(); // every lane has read the V tile: its slot takes a K next
    next = tileRow(step + 2, ahead);
    issue(2 * step + 4, next);
  }
  tejitCopyWait<0>();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 1);
    l[half] += __shfl_xor_sync(0xffffffffu, l[half], 2);
  }
  __syncthreads(); // every warp is done with the ring: the merge reuses it

  // Each warp's state per row (its group) into shared memory, then merged.
  float *sO = reinterpret_cast<float *>(ring);
  float *sM = sO + 16 * W * D, *sL = sM + 16 * W;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int at = (g + 8 * half) * W + warp;
    if (t == 0) {
      sM[at] = m[half];
      sL[at] = l[half];
    }
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      sO[at * D + nt * 8 + 2 * t] = o[nt][2 * half];
      sO[at * D + nt * 8 + 2 * t + 1] = o[nt][2 * half + 1];
    }
  }
  __syncthreads();
  tejitDecodeMerge(p, c, sO, sM, sL, W);
}

template <int PAGING>
__device__ __forceinline__ void
tejitDecodeSplitMmaFor(const TejitDecodeAttention &p, uint4 *ring) {
  if (p.head_dim == 128)
    p.f16 ? tejitDecodeSplitMma<128, true, PAGING>(p, ring)
          : tejitDecodeSplitMma<128, false, PAGING>(p, ring);
  else
    p.f16 ? tejitDecodeSplitMma<64, true, PAGING>(p, ring)
          : tejitDecodeSplitMma<64, false, PAGING>(p, ring);
}

// The split pass for head dims 64 and 128 (the host's
// decodeUsesTensorCores). A kernel of its own: its launch bounds differ, and
// one function holding both passes spills. Paged caches have kernels of
// their own (the _paged names): page lookups in the plain pass's kernel,
// even behind a uniform branch, cost it 10-30% (the pass is issue-bound;
// H200, session 31).
extern "C" __global__ void __launch_bounds__(TEJIT_DECODE_WARPS * 32,
                                             TEJIT_DECODE_MMA_CTAS_PER_SM)
    tejit_decode_attention_mma(TejitDecodeAttention p) {
  __shared__ uint4 ring[TEJIT_DECODE_RING];
  tejitDecodeSplitMmaFor<TEJIT_PLAIN_ROWS>(p, ring);
}

extern "C" __global__ void __launch_bounds__(TEJIT_DECODE_WARPS * 32,
                                             TEJIT_DECODE_MMA_CTAS_PER_SM)
    tejit_decode_attention_mma_paged(TejitDecodeAttention p) {
  __shared__ uint4 ring[TEJIT_DECODE_RING];
  tejitDecodeSplitMmaFor<TEJIT_PAGED_TILES>(p, ring);
}

// Pages of other sizes (not a multiple of 16 rows), each key through the
// table: a kernel of its own (with the tile pass in one function, 8 bytes
// of spills).
extern "C" __global__ void __launch_bounds__(TEJIT_DECODE_WARPS * 32,
                                             TEJIT_DECODE_MMA_CTAS_PER_SM)
    tejit_decode_attention_mma_paged_keys(TejitDecodeAttention p) {
  __shared__ uint4 ring[TEJIT_DECODE_RING];
  tejitDecodeSplitMmaFor<TEJIT_PAGED_KEYS>(p, ring);
}

template <bool PAGED>
__device__ __forceinline__ void
tejitDecodeSplitFor(const TejitDecodeAttention &p, uint4 *ring) {
  if (p.head_dim > 64)
    tejitDecodeSplit<16, PAGED>(p, ring);
  else if (p.head_dim > 32)
    tejitDecodeSplit<8, PAGED>(p, ring);
  else
    tejitDecodeSplit<4, PAGED>(p, ring);
}

// The split pass for the other head dims, on the CUDA cores.
extern "C" __global__ void __launch_bounds__(TEJIT_DECODE_WARPS * 32,
                                             TEJIT_DECODE_CTAS_PER_SM)
    tejit_decode_attention(TejitDecodeAttention p) {
  __shared__ uint4 ring[TEJIT_DECODE_RING];
  tejitDecodeSplitFor<false>(p, ring);
}

extern "C" __global__ void __launch_bounds__(TEJIT_DECODE_WARPS * 32,
                                             TEJIT_DECODE_CTAS_PER_SM)
    tejit_decode_attention_paged(TejitDecodeAttention p) {
  __shared__ uint4 ring[TEJIT_DECODE_RING];
  tejitDecodeSplitFor<true>(p, ring);
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
