// Runtime helper kernels (attention steps, the dropout state, weight-cast
// flags), compiled to PTX at build time (runtime/CMakeLists.txt) and loaded by
// the driver's JIT on first use.
//
// tejit_attention_prep takes one TejitAttentionPrep by value. Block 0:
//  - a padding mask (`[b, 1, 1, s]` bytes, nonzero = masked out, Transformer
//    Engine's convention) becomes cuDNN's int32 sequence lengths: the count
//    of unmasked positions, taken as a right-padded prefix as TE's fused
//    attention does;
//  - the program's dropout state (seed, offset) is copied with the offset
//    moved by `rng_offset_delta`, so each attention site of a program draws
//    its own Philox stream instead of repeating the first site's mask;
//  - thd: cu_seqlens (int32 [b + 1], side 0 = queries, 1 = keys) become the
//    sequence lengths and each ragged tensor's start offsets in elements.
//    Untrusted input stays in bounds: every cu_seqlens entry is clamped to
//    [0, t] and every length to [0, max_seqlen], so no sequence cuDNN reads
//    or writes reaches past a tensor's last token.
// Every block, thd: the rows cuDNN does not write (before cu_seqlens[0] and
// from cu_seqlens[b] on: a packed buffer's tail) of o, or of dq, dk and dv,
// are zeroed, grid-stride, 16 bytes a store where alignment allows.
//
// kv cache (append_to set): side 0 is the step's new tokens, side 1 the
// cached ones (cu_seqlens_kv: cached + new per sequence, tokens[1] a bound
// on its entries, max_seqlen[1] the cache's rows S). Each sequence's query
// length is also clamped to its key length (n_i <= L_i), and every block
// appends, grid-stride, new token j < n_i of sequence i (row cu_q[i] + j of
// append_from, k then v) to row L_i - n_i + j of sequence i's cache. Every
// block derives n_i and L_i from cu_seqlens itself: no block reads what
// another writes, so cuDNN, launched after this kernel on the same stream,
// sees the lengths and the appended rows alike.
//
// Paged kv cache (page_table set): the caches are pools of pages
// [pages, page_size, append_width] and logical row r of sequence i is row
// r % page_size of page page_table[i][r / page_size]. The append goes
// through the table, and every block writes its share of page_table_out: the
// table with each id clamped into [0, pages), which the attention reads, so
// that bad ids (the caller's to avoid) give wrong rows, never a fault.
//
// The host mirror of the struct is in runtime/AttentionLauncher.cpp; every
// field is 8 bytes wide so that both compilers lay it out alike.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define TEJIT_PREP_RAGGED 7
#define TEJIT_PREP_ZEROED 3
struct TejitAttentionPrep {
  const unsigned char *mask;
  int *mask_lengths;
  long long batch, mask_seq;
  const unsigned long long *rng_in;
  unsigned long long *rng_out;
  unsigned long long rng_offset_delta;
  const int *cu_seqlens[2];
  long long tokens[2], max_seqlen[2];
  int *lengths[2];
  int *offsets[TEJIT_PREP_RAGGED];
  long long offset_side[TEJIT_PREP_RAGGED], offset_scale[TEJIT_PREP_RAGGED];
  unsigned short *zeroed[TEJIT_PREP_ZEROED];
  long long zeroed_side[TEJIT_PREP_ZEROED], zeroed_width[TEJIT_PREP_ZEROED],
      zeroed_stride[TEJIT_PREP_ZEROED];
  // kv cache: the new k and v tokens (`append_stride` elements from one
  // token to the next) and the caches [b, max_seqlen[1], append_width].
  const unsigned short *append_from[2];
  unsigned short *append_to[2];
  long long append_stride[2], append_width;
  // Paged kv cache: the caller's int32 [batch, pages_per_sequence] table
  // and its clamped copy.
  const int *page_table;
  int *page_table_out;
  long long page_size, pages, pages_per_sequence;
};

// The page holding logical row `row` of sequence i, clamped into
// [0, pages).
__device__ long long tejitPage(const TejitAttentionPrep &p, long long i,
                               long long row) {
  long long page = p.page_table[i * p.pages_per_sequence + row / p.page_size];
  return page < 0 ? 0 : (page >= p.pages ? p.pages - 1 : page);
}

// Element offset of logical cache row `row` of sequence i.
__device__ long long tejitCacheRow(const TejitAttentionPrep &p, long long i,
                                   long long row) {
  if (!p.page_table)
    return i * p.max_seqlen[1] + row;
  return tejitPage(p, i, row) * p.page_size + row % p.page_size;
}

// Every block's share of the clamped page table.
__device__ void tejitClampPageTable(const TejitAttentionPrep &p) {
  long long entries = p.batch * p.pages_per_sequence;
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
       e < entries; e += step) {
    long long page = p.page_table[e];
    p.page_table_out[e] =
        int(page < 0 ? 0 : (page >= p.pages ? p.pages - 1 : page));
  }
}

// cu_seqlens[side][i] clamped to [0, t].
__device__ long long tejitSequenceStart(const TejitAttentionPrep &p, int side,
                                        long long i) {
  long long start = p.cu_seqlens[side][i];
  return start < 0 ? 0 : (start > p.tokens[side] ? p.tokens[side] : start);
}

// The difference of sequence i's clamped cu_seqlens entries on `side`,
// clamped to [0, max_seqlen].
__device__ long long tejitClampedLength(const TejitAttentionPrep &p, int side,
                                        long long i) {
  long long length =
      tejitSequenceStart(p, side, i + 1) - tejitSequenceStart(p, side, i);
  length = length < 0 ? 0 : length;
  return length > p.max_seqlen[side] ? p.max_seqlen[side] : length;
}

// Sequence i's length on `side`; with a kv cache, the new tokens (side 0)
// are at most the sequence's tokens in all (side 1).
__device__ long long tejitSequenceLength(const TejitAttentionPrep &p, int side,
                                         long long i) {
  long long length = tejitClampedLength(p, side, i);
  if (side == 0 && p.append_to[0]) {
    long long total = tejitClampedLength(p, 1, i);
    length = length > total ? total : length;
  }
  return length;
}

__device__ void tejitMaskLengths(const TejitAttentionPrep &p) {
  for (long long row = threadIdx.x; p.mask && row < p.batch;
       row += blockDim.x) {
    const unsigned char *bytes = p.mask + row * p.mask_seq;
    int kept = 0;
    for (long long j = 0; j < p.mask_seq; ++j)
      kept += bytes[j] == 0;
    p.mask_lengths[row] = kept;
  }
}

__device__ void tejitThdOffsets(const TejitAttentionPrep &p) {
  for (long long i = threadIdx.x; i <= p.batch; i += blockDim.x) {
    for (int side = 0; side < 2; ++side) {
      if (!p.cu_seqlens[side])
        continue;
      long long start = tejitSequenceStart(p, side, i);
      if (i < p.batch && p.lengths[side])
        p.lengths[side][i] = int(tejitSequenceLength(p, side, i));
      for (int k = 0; k < TEJIT_PREP_RAGGED; ++k)
        if (p.offsets[k] && p.offset_side[k] == side)
          p.offsets[k][i] = int(start * p.offset_scale[k]);
    }
  }
}

// Zeroes rows [0, first) and [last, t) of zeroed[z], `width` 16-bit
// elements each, `stride` elements apart.
__device__ void tejitZeroRows(const TejitAttentionPrep &p, int z) {
  int side = int(p.zeroed_side[z]);
  if (!p.cu_seqlens[side])
    return;
  long long first = tejitSequenceStart(p, side, 0);
  long long last = tejitSequenceStart(p, side, p.batch);
  long long rows = first + (p.tokens[side] - last);
  long long width = p.zeroed_width[z], stride = p.zeroed_stride[z];
  unsigned short *base = p.zeroed[z];
  bool vector =
      ((unsigned long long)base % 16 == 0) && stride % 8 == 0 && width % 8 == 0;
  long long unit = vector ? 8 : 1, perRow = width / unit;
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
       item < rows * perRow; item += step) {
    long long tail = item / perRow;
    long long row = tail < first ? tail : last + (tail - first);
    unsigned short *at = base + row * stride + item % perRow * unit;
    if (vector)
      *reinterpret_cast<uint4 *>(at) = make_uint4(0, 0, 0, 0);
    else
      *at = 0;
  }
}

// kv cache: copies new token j < n_i of each sequence i from append_from[c]
// to its cache row L_i - n_i + j (c = 0: k, 1: v). One work item is one
// store (16 bytes where alignment allows) of one (sequence, j) row pair;
// rows past n_i are items with nothing to do.
__device__ void tejitAppend(const TejitAttentionPrep &p) {
  long long width = p.append_width, rowsPerSequence = p.max_seqlen[0];
  long long cacheRows = p.max_seqlen[1];
  bool vector = width % 8 == 0;
  for (int c = 0; c < 2; ++c)
    vector = vector && (unsigned long long)p.append_from[c] % 16 == 0 &&
             (unsigned long long)p.append_to[c] % 16 == 0 &&
             p.append_stride[c] % 8 == 0;
  long long unit = vector ? 8 : 1, perRow = width / unit;
  long long items = p.batch * rowsPerSequence * perRow;
  long long step = (long long)gridDim.x * blockDim.x;
  for (long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
       item < items; item += step) {
    long long i = item / (rowsPerSequence * perRow);
    long long j = item / perRow % rowsPerSequence;
    long long column = item % perRow * unit;
    long long fresh = tejitSequenceLength(p, 0, i);
    if (j >= fresh)
      continue;
    long long row = tejitSequenceLength(p, 1, i) - fresh + j;
    // In [0, S) by the clamps (n_i <= L_i <= S); kept as the bound check.
    if (row < 0 || row >= cacheRows)
      continue;
    long long token = tejitSequenceStart(p, 0, i) + j;
    for (int c = 0; c < 2; ++c) {
      const unsigned short *from =
          p.append_from[c] + token * p.append_stride[c] + column;
      unsigned short *to =
          p.append_to[c] + tejitCacheRow(p, i, row) * width + column;
      if (vector)
        *reinterpret_cast<uint4 *>(to) = *reinterpret_cast<const uint4 *>(from);
      else
        *to = *from;
    }
  }
}

extern "C" __global__ void tejit_attention_prep(TejitAttentionPrep p) {
  if (blockIdx.x == 0) {
    tejitMaskLengths(p);
    if (p.rng_in && threadIdx.x == 0) {
      p.rng_out[0] = p.rng_in[0];
      p.rng_out[1] = p.rng_in[1] + p.rng_offset_delta;
    }
    tejitThdOffsets(p);
  }
  for (int z = 0; z < TEJIT_PREP_ZEROED; ++z)
    if (p.zeroed[z])
      tejitZeroRows(p, z);
  if (p.append_to[0])
    tejitAppend(p);
  if (p.page_table)
    tejitClampPageTable(p);
}

// Moves a program's dropout state (seed, offset) on by `delta` after a
// forward, on the device, so a forward captured in a CUDA graph draws fresh
// masks at every replay.
extern "C" __global__ void tejit_rng_advance(unsigned long long *state,
                                             unsigned long long delta) {
  if (threadIdx.x == 0)
    state[1] += delta;
}

// Copies `bytes` from `from` to `to` unless *flag is nonzero, decided on the
// device at each launch: a weight's scale_inv kept with its cast, in a CUDA
// graph that replays both for micro-batches that cast the weights and for
// ones that reuse the casts (Executor::run's skip flag).
extern "C" __global__ void tejit_copy_unless_flag(const int *flag,
                                                  unsigned char *to,
                                                  const unsigned char *from,
                                                  unsigned long long bytes) {
  if (*flag != 0)
    return;
  for (unsigned long long i = threadIdx.x; i < bytes; i += blockDim.x)
    to[i] = from[i];
}

// Context parallelism (docs/context-parallel.md): the backward of a causal
// step runs its query chunks as several cuDNN calls over parts of the keys,
// some into scratch buffers laid out as the gradient they belong to; this
// kernel adds src's rows [add_from, add_to) to dst and zeroes dst's rows from
// `zero_from` on (keys no local query sees). Both hold `batch` sequences of
// `rows` positions of `width` elements (bf16, or f16 with is_half), a
// position's elements `stride` apart from the next's; sbhd (is_sbhd) stores
// position-major ([rows, batch]), bshd batch-major.
struct TejitCpAccumulate {
  unsigned short *dst;
  const unsigned short *src;
  long long batch, rows, width, stride, add_from, add_to, zero_from, is_sbhd,
      is_half;
};

__device__ inline float tejitLoad16(unsigned short bits, bool half) {
  if (half)
    return __half2float(__ushort_as_half(bits));
  return __uint_as_float(unsigned(bits) << 16);
}

__device__ inline unsigned short tejitStore16(float value, bool half) {
  if (half)
    return __half_as_ushort(__float2half_rn(value));
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

extern "C" __global__ void tejit_cp_accumulate(TejitCpAccumulate p) {
  long long total = p.batch * p.rows * p.width;
  bool half = p.is_half != 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
       i < total; i += (long long)gridDim.x * blockDim.x) {
    long long token = i / p.width, column = i % p.width;
    long long row = p.is_sbhd ? token / p.batch : token % p.rows;
    long long at = token * p.stride + column;
    if (row >= p.add_from && row < p.add_to)
      p.dst[at] = tejitStore16(
          tejitLoad16(p.dst[at], half) + tejitLoad16(p.src[at], half), half);
    else if (row >= p.zero_from)
      p.dst[at] = 0;
  }
}
