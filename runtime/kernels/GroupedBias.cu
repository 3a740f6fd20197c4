// The bias rows of a block-scaled grouped GEMM (runtime/GroupedGemm.cpp),
// compiled to PTX at build time (runtime/CMakeLists.txt) and loaded by the
// driver's JIT once per context (GroupedGemm::biasRowsKernel).
//
// cuBLASLt's block-scaled GEMMs take no bias epilogue, so a rows-form
// grouped GEMM adds its bias as C: before the groups' GEMMs, this kernel
// writes row t of `out` with the bias row of t's group, out[t, :] =
// bias[g(t), :], for every row of up to TEJIT_BIAS_MAX_GROUPS consecutive
// groups, all in one launch (the host splits more groups into several).
// Group g of the launch owns rows [ends[g - 1], ends[g]) (ends[-1] = 0;
// an empty group owns none). It is a byte copy, so one kernel serves every
// element type: each row is `row_bytes` bytes, stored `vector_bytes` (16, 8,
// 4, 2 or 1, dividing row_bytes and both base addresses) at a time. Blocks
// stride over rows (a row's group is the same for the whole block, so the
// lookup reads the parameters at one address), threads over a row's
// vectors. The GEMMs read the rows right after: plain stores, kept in L2.
//
// The host mirror of the struct is GroupedBiasRowsParams in
// runtime/GroupedGemm.h; every field is 8 bytes wide so that both compilers
// lay it out alike.
#define TEJIT_BIAS_MAX_GROUPS 256
struct TejitGroupedBiasRows {
  unsigned char *out;        // the launch's first row
  const unsigned char *bias; // the bias row of the launch's first group
  long long rows;            // ends[groups - 1]
  long long row_bytes;
  long long vector_bytes;
  long long groups;
  long long ends[TEJIT_BIAS_MAX_GROUPS];
};

// The group owning row `row` < p.rows: the first whose end is past it.
__device__ long long tejitBiasGroupOf(const TejitGroupedBiasRows &p,
                                      long long row) {
  long long low = 0, high = p.groups - 1;
  while (low < high) {
    long long mid = (low + high) / 2;
    if (p.ends[mid] > row)
      high = mid;
    else
      low = mid + 1;
  }
  return low;
}

template <typename Vector>
__device__ void tejitBiasRows(const TejitGroupedBiasRows &p) {
  long long vectors = p.row_bytes / (long long)sizeof(Vector);
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    long long group = tejitBiasGroupOf(p, row);
    const Vector *from =
        reinterpret_cast<const Vector *>(p.bias + group * p.row_bytes);
    Vector *to = reinterpret_cast<Vector *>(p.out + row * p.row_bytes);
    for (long long i = threadIdx.x; i < vectors; i += blockDim.x)
      to[i] = from[i];
  }
}

// __grid_constant__: the lookup indexes `ends` in place, no local copy.
extern "C" __global__ void
tejit_grouped_bias_rows(const __grid_constant__ TejitGroupedBiasRows p) {
  // Uniform across the grid: one branch, no divergence.
  switch (p.vector_bytes) {
  case 16:
    tejitBiasRows<uint4>(p);
    break;
  case 8:
    tejitBiasRows<uint2>(p);
    break;
  case 4:
    tejitBiasRows<unsigned int>(p);
    break;
  case 2:
    tejitBiasRows<unsigned short>(p);
    break;
  default:
    tejitBiasRows<unsigned char>(p);
    break;
  }
}
