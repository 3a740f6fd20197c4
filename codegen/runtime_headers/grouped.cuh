//===- grouped.cuh - GroupedLinear's row segments in a kernel -------------===//
//
// docs/grouped-linear.md: segment g of a [T, .] matrix is rows
// [o_g, o_g + m_g), o_g = m_0 + ... + m_{g-1}; the rows at and past o_G
// belong to no segment. Kernels get the G sizes as a device `const int *`
// (the runtime's copy of the host m_splits) and find the offsets
// themselves: G is small.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_GROUPED_CUH
#define TEJIT_GROUPED_CUH

/// The inclusive sum of `v` over lanes 0 .. lane of a warp.
__device__ __forceinline__ int tj_warp_scan(int v) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d)
      v += u;
  }
  return v;
}

/// ends[g] = o_{g+1} = m_0 + ... + m_g for g < groups, by warp 0 of the
/// block, 32 groups a step (a shuffle scan); the caller synchronizes before
/// reading `ends` (shared memory).
__device__ __forceinline__ void tj_segment_ends(const int *m_splits, int *ends,
                                                int groups) {
  if (threadIdx.x >= 32)
    return;
  const int lane = threadIdx.x;
  int carry = 0;
  for (int base = 0; base < groups; base += 32) {
    const int v =
        tj_warp_scan(base + lane < groups ? m_splits[base + lane] : 0);
    if (base + lane < groups)
      ends[base + lane] = carry + v;
    carry += __shfl_sync(0xffffffffu, v, 31);
  }
}

/// tj_segment_ends, and chunk_ends[g] = ceil(m_0 / rows) + ... +
/// ceil(m_g / rows): the chunks of at most `rows` rows, none crossing a
/// segment boundary, that segments 0 .. g cut into (the 1-D blocks of 128
/// tokens of a transposed block-scaled cast). tj_segment_of(chunk_ends,
/// groups, chunk) is then the segment of a chunk.
__device__ __forceinline__ void tj_chunk_ends(const int *m_splits, int *ends,
                                              int *chunk_ends, int groups,
                                              int rows) {
  if (threadIdx.x >= 32)
    return;
  const int lane = threadIdx.x;
  int carry = 0, chunk_carry = 0;
  for (int base = 0; base < groups; base += 32) {
    const int m = base + lane < groups ? m_splits[base + lane] : 0;
    const int v = tj_warp_scan(m), n = tj_warp_scan((m + rows - 1) / rows);
    if (base + lane < groups) {
      ends[base + lane] = carry + v;
      chunk_ends[base + lane] = chunk_carry + n;
    }
    carry += __shfl_sync(0xffffffffu, v, 31);
    chunk_carry += __shfl_sync(0xffffffffu, n, 31);
  }
}

/// The segment that holds row `row`: the first g with ends[g] > row (empty
/// segments are passed over), or `groups` for a padding row.
template <typename Index>
__device__ __forceinline__ int tj_segment_of(const int *ends, int groups,
                                             Index row) {
  int lo = 0, hi = groups;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (static_cast<Index>(ends[mid]) > row)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/// o_g and m_g of segment g, computed by each warp on its own (every lane
/// gets them; no shared memory, no barrier).
__device__ __forceinline__ void tj_segment(const int *m_splits, int g,
                                           int &begin, int &size) {
  const int lane = threadIdx.x % 32;
  int before = 0;
  for (int i = lane; i < g; i += 32)
    before += m_splits[i];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    before += __shfl_xor_sync(0xffffffffu, before, offset);
  begin = before;
  size = m_splits[g];
}

#endif // TEJIT_GROUPED_CUH
