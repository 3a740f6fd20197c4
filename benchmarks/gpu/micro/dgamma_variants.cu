//===- dgamma_variants.cu - the norm backward's dgamma/dbeta kernel -------===//
//
// A standalone microbenchmark of the column-sum kernel that
// codegen/RowKernels.cpp emits for LayerNorm/RMSNorm backward ("_dgamma"):
// dgamma[c] = sum_r dy[r][c] * (x[r][c] - mean[r]) * rsigma[r], dbeta[c] =
// sum_r dy[r][c]. It holds the kernels the emitter generated before for
// examples/quickstart.yaml and examples/llama.yaml (8192 x 4096 bf16)
// verbatim as baselines, and a template of the same algorithm (column strips
// x row splits, partial sums in scratch added in split order by each strip's
// last block: deterministic, no float atomics) whose block size, registers,
// row split, unrolling and reductions vary. With -DDGAMMA_EMITTED it also
// runs te-compile's current kernels verbatim, as plan.json launches them
// (emit_dgamma_specs.sh writes that include). Every kernel is checked
// against a float64 CPU sum of the same terms (and bitwise against its own
// second run), then timed with CUDA events: the median of 40 per-launch
// times after warm-up, as GB/s read and as a percentage of a cudaMemcpy
// device-to-device copy's read+write bandwidth.
//
// Sections (all when none is named): sweep (block sizes, unrolling,
// reductions, splits), splits (the chosen sizes against their neighbours),
// odd (correctness on odd shapes), emitted.
//
// nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//   benchmarks/gpu/micro/dgamma_variants.cu -o /tmp/d && /tmp/d sweep
// benchmarks/gpu/micro/emit_dgamma_specs.sh && \
// nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//   -DDGAMMA_EMITTED='"dgamma_emitted.inc"' \
//   benchmarks/gpu/micro/dgamma_variants.cu -o /tmp/d && /tmp/d emitted
//
// On an H200 (copy 4.0 TB/s; a read-only kernel reads the 128 MiB in 35
// us), 8192 x 4096 bf16: LayerNorm 62.2 -> 40.2 us (54% -> 84% of the
// copy), RMSNorm 59.0 -> 38.0 us (57% -> 88%); see writeNormDgamma in
// codegen/RowKernels.cpp.
//
//===----------------------------------------------------------------------===//
#include "../../../codegen/runtime_headers/fp8.cuh"
#include "../../../codegen/runtime_headers/reduce.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "check_cuda.cuh"

//===----------------------------------------------------------------------===//
// Baselines: te-compile examples/{quickstart,llama}.yaml, verbatim
// (grid (64, 5), block 512, scratch: 5 splits x sums x 4096 floats, then 64
// arrival counters).
//===----------------------------------------------------------------------===//
// clang-format off
// quickstart_backward_norm_bwd_add_0_dgamma: te.norm_bwd_add at loc("examples/quickstart.yaml":15:5)
extern "C" __global__ void __launch_bounds__(512)
quickstart_backward_norm_bwd_add_0_dgamma(
    const tj_bf16 *__restrict__ v9,
    const tj_bf16 *__restrict__ arg6,
    const float *__restrict__ arg5,
    const float *__restrict__ arg4,
    tj_bf16 *__restrict__ gamma_grad,
    tj_bf16 *__restrict__ beta_grad,
    float *__restrict__ tj_scratch) {
  constexpr int kVec = 8, kLanes = 8, kGroups = 64, kUnroll = 4;
  constexpr tj_i64 kRows = 8192, kCols = 4096, kSplitRows = 1639;
  const int lane = threadIdx.x % kLanes, group = threadIdx.x / kLanes;
  const tj_i64 col = (static_cast<tj_i64>(blockIdx.x) * kLanes + lane) * kVec;
  const tj_i64 row_begin = static_cast<tj_i64>(blockIdx.y) * kSplitRows;
  const tj_i64 row_end = row_begin + kSplitRows < kRows ? row_begin + kSplitRows : kRows;
  float dgamma_acc[kVec] = {}, dbeta_acc[kVec] = {};
  if (col < kCols) {
    for (tj_i64 base = row_begin + group; base < row_end; base += kGroups * kUnroll) {
      float dy_v[kUnroll][kVec], x_v[kUnroll][kVec], mu_v[kUnroll], rs_v[kUnroll];
      // Every load, the row statistics too, before the first use.
      #pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const tj_i64 row = base + u * kGroups;
        if (row < row_end) {
          tj_load(dy_v[u], v9 + row * kCols + col);
          tj_load(x_v[u], arg6 + row * kCols + col);
          mu_v[u] = arg5[row];
          rs_v[u] = arg4[row];
        }
      }
      #pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kGroups >= row_end) break;
        #pragma unroll
        for (int i = 0; i < kVec; ++i) {
          dgamma_acc[i] += dy_v[u][i] * (x_v[u][i] - mu_v[u]) * rs_v[u];
          dbeta_acc[i] += dy_v[u][i];
        }
      }
    }
  }
  __shared__ float partial[kGroups][kLanes * kVec + 1];
  __syncthreads();
  for (int i = 0; i < kVec; ++i) partial[group][lane * kVec + i] = dgamma_acc[i];
  __syncthreads();
  for (int c = threadIdx.x; c < kLanes * kVec; c += blockDim.x) {
    const tj_i64 out = static_cast<tj_i64>(blockIdx.x) * kLanes * kVec + c;
    float sum = 0.f;
    for (int g = 0; g < kGroups; ++g) sum += partial[g][c];
    if (out < kCols) tj_scratch[(blockIdx.y * 2 + 0) * kCols + out] = sum;
  }
  __syncthreads();
  for (int i = 0; i < kVec; ++i) partial[group][lane * kVec + i] = dbeta_acc[i];
  __syncthreads();
  for (int c = threadIdx.x; c < kLanes * kVec; c += blockDim.x) {
    const tj_i64 out = static_cast<tj_i64>(blockIdx.x) * kLanes * kVec + c;
    float sum = 0.f;
    for (int g = 0; g < kGroups; ++g) sum += partial[g][c];
    if (out < kCols) tj_scratch[(blockIdx.y * 2 + 1) * kCols + out] = sum;
  }
  __shared__ bool tj_last_block;
  __threadfence();  // this block's partial sums before its ticket
  __syncthreads();
  if (threadIdx.x == 0) tj_last_block = atomicAdd(&reinterpret_cast<unsigned *>(tj_scratch + 40960)[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!tj_last_block) return;
  __threadfence();
  const volatile float *partials = tj_scratch;
  for (int c = threadIdx.x; c < kLanes * kVec; c += blockDim.x) {
    const tj_i64 out = static_cast<tj_i64>(blockIdx.x) * kLanes * kVec + c;
    if (out >= kCols) break;
    float sum_dgamma = 0.f;
    for (unsigned s = 0; s < gridDim.y; ++s) sum_dgamma += partials[(s * 2 + 0) * kCols + out];
    gamma_grad[out] = tj_convert<tj_bf16>::from(sum_dgamma);
    float sum_dbeta = 0.f;
    for (unsigned s = 0; s < gridDim.y; ++s) sum_dbeta += partials[(s * 2 + 1) * kCols + out];
    beta_grad[out] = tj_convert<tj_bf16>::from(sum_dbeta);
  }
}

// llama_backward_norm_bwd_add_0_dgamma: te.norm_bwd_add at loc("examples/llama.yaml":13:5)
extern "C" __global__ void __launch_bounds__(512)
llama_backward_norm_bwd_add_0_dgamma(
    const tj_bf16 *__restrict__ v7,
    const tj_bf16 *__restrict__ arg4,
    const float *__restrict__ arg3,
    tj_bf16 *__restrict__ gamma_grad,
    float *__restrict__ tj_scratch) {
  constexpr int kVec = 8, kLanes = 8, kGroups = 64, kUnroll = 4;
  constexpr tj_i64 kRows = 8192, kCols = 4096, kSplitRows = 1639;
  const int lane = threadIdx.x % kLanes, group = threadIdx.x / kLanes;
  const tj_i64 col = (static_cast<tj_i64>(blockIdx.x) * kLanes + lane) * kVec;
  const tj_i64 row_begin = static_cast<tj_i64>(blockIdx.y) * kSplitRows;
  const tj_i64 row_end = row_begin + kSplitRows < kRows ? row_begin + kSplitRows : kRows;
  float dgamma_acc[kVec] = {}, dbeta_acc[kVec] = {};
  if (col < kCols) {
    for (tj_i64 base = row_begin + group; base < row_end; base += kGroups * kUnroll) {
      float dy_v[kUnroll][kVec], x_v[kUnroll][kVec], mu_v[kUnroll], rs_v[kUnroll];
      // Every load, the row statistics too, before the first use.
      #pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const tj_i64 row = base + u * kGroups;
        if (row < row_end) {
          tj_load(dy_v[u], v7 + row * kCols + col);
          tj_load(x_v[u], arg4 + row * kCols + col);
          mu_v[u] = 0.f;
          rs_v[u] = arg3[row];
        }
      }
      #pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kGroups >= row_end) break;
        #pragma unroll
        for (int i = 0; i < kVec; ++i) {
          dgamma_acc[i] += dy_v[u][i] * (x_v[u][i] - mu_v[u]) * rs_v[u];
          dbeta_acc[i] += dy_v[u][i];
        }
      }
    }
  }
  __shared__ float partial[kGroups][kLanes * kVec + 1];
  __syncthreads();
  for (int i = 0; i < kVec; ++i) partial[group][lane * kVec + i] = dgamma_acc[i];
  __syncthreads();
  for (int c = threadIdx.x; c < kLanes * kVec; c += blockDim.x) {
    const tj_i64 out = static_cast<tj_i64>(blockIdx.x) * kLanes * kVec + c;
    float sum = 0.f;
    for (int g = 0; g < kGroups; ++g) sum += partial[g][c];
    if (out < kCols) tj_scratch[(blockIdx.y * 1 + 0) * kCols + out] = sum;
  }
  __shared__ bool tj_last_block;
  __threadfence();  // this block's partial sums before its ticket
  __syncthreads();
  if (threadIdx.x == 0) tj_last_block = atomicAdd(&reinterpret_cast<unsigned *>(tj_scratch + 20480)[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!tj_last_block) return;
  __threadfence();
  const volatile float *partials = tj_scratch;
  for (int c = threadIdx.x; c < kLanes * kVec; c += blockDim.x) {
    const tj_i64 out = static_cast<tj_i64>(blockIdx.x) * kLanes * kVec + c;
    if (out >= kCols) break;
    float sum_dgamma = 0.f;
    for (unsigned s = 0; s < gridDim.y; ++s) sum_dgamma += partials[(s * 1 + 0) * kCols + out];
    gamma_grad[out] = tj_convert<tj_bf16>::from(sum_dgamma);
  }
}

// clang-format on

//===----------------------------------------------------------------------===//
// Variants: the same algorithm as a template.
//===----------------------------------------------------------------------===//

/// Block (strip blockIdx.x of kLanes * kVec columns, split blockIdx.y of
/// split_rows rows). kThreads / kLanes row groups; each thread issues the
/// loads of kUnroll rows before their first use. kShfl: the row groups of a
/// warp add up by shuffles first, so that shared memory holds one row of
/// partial sums per warp (else one per group, as the baseline). Scratch:
/// [splits][sums][cols] floats, then one arrival counter per strip (reset
/// by the strip's last block, so no memset is needed between launches).
/// Outputs are float here for a tight check (the emitter converts).
template <typename T, typename Idx, int kVec, int kThreads, int kLanes,
          int kUnroll, int kMinBlocks, bool kLN, bool kShfl, bool kRaw,
          long long kRowsC, long long kColsC, bool kPar>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    dgamma_variant(const T *__restrict__ dy, const T *__restrict__ x,
                   const float *__restrict__ mean,
                   const float *__restrict__ rsigma, float *__restrict__ dgamma,
                   float *__restrict__ dbeta, float *__restrict__ scratch,
                   Idx rows_arg, Idx cols_arg, Idx split_rows) {
  // kRowsC, kColsC: the shape as constants, as the emitter writes it (0:
  // from the arguments).
  const Idx rows = kRowsC ? static_cast<Idx>(kRowsC) : rows_arg;
  const Idx cols = kColsC ? static_cast<Idx>(kColsC) : cols_arg;
  constexpr int kGroups = kThreads / kLanes, kSums = kLN ? 2 : 1;
  constexpr int kStrip = kLanes * kVec;
  static_assert(kThreads % kLanes == 0 && (!kShfl || 32 % kLanes == 0), "");
  const int lane = threadIdx.x % kLanes, group = threadIdx.x / kLanes;
  const Idx col = (static_cast<Idx>(blockIdx.x) * kLanes + lane) * kVec;
  const Idx row_begin = static_cast<Idx>(blockIdx.y) * split_rows;
  const Idx row_end =
      row_begin + split_rows < rows ? row_begin + split_rows : rows;
  float acc[kSums][kVec] = {};
  if (col < cols) {
    for (Idx base = row_begin + group; base < row_end;
         base += kGroups * kUnroll) {
      // kRaw: the loads stay in their storage type until used (half the
      // registers of floats for 16-bit types).
      using Raw = tj_vec<T, kVec>;
      Raw dy_r[kUnroll], x_r[kUnroll];
      float dy_v[kRaw ? 1 : kUnroll][kVec], x_v[kRaw ? 1 : kUnroll][kVec];
      float mu_v[kUnroll], rs_v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const Idx row = base + u * kGroups;
        if (row < row_end) {
          if (kRaw) {
            dy_r[u] = *reinterpret_cast<const Raw *>(dy + row * cols + col);
            x_r[u] = *reinterpret_cast<const Raw *>(x + row * cols + col);
          } else {
            tj_load(dy_v[u], dy + row * cols + col);
            tj_load(x_v[u], x + row * cols + col);
          }
          mu_v[u] = kLN ? mean[row] : 0.f;
          rs_v[u] = rsigma[row];
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kGroups >= row_end)
          break;
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float d = kRaw ? tj_to_float(dy_r[u].v[i]) : dy_v[u][i];
          const float v = kRaw ? tj_to_float(x_r[u].v[i]) : x_v[u][i];
          acc[0][i] += d * (v - mu_v[u]) * rs_v[u];
          if (kLN)
            acc[kSums - 1][i] += d;
        }
      }
    }
  }
  const bool split = gridDim.y > 1;
  if constexpr (kShfl) {
    constexpr int kWarps = kThreads / 32;
    __shared__ float partial[kSums][kWarps][kStrip];
#pragma unroll
    for (int s = 0; s < kSums; ++s)
#pragma unroll
      for (int i = 0; i < kVec; ++i)
#pragma unroll
        for (int offset = kLanes; offset < 32; offset *= 2)
          acc[s][i] += __shfl_xor_sync(0xffffffffu, acc[s][i], offset);
    if (threadIdx.x % 32 < kLanes)
#pragma unroll
      for (int s = 0; s < kSums; ++s)
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          partial[s][threadIdx.x / 32][lane * kVec + i] = acc[s][i];
    __syncthreads();
    for (int c = threadIdx.x; c < kSums * kStrip; c += kThreads) {
      const int s = c / kStrip, cc = c % kStrip;
      const Idx out = static_cast<Idx>(blockIdx.x) * kStrip + cc;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
        sum += partial[s][w][cc];
      if (out < cols) {
        if (split)
          scratch[(static_cast<Idx>(blockIdx.y) * kSums + s) * cols + out] =
              sum;
        else
          (s == 0 ? dgamma : dbeta)[out] = sum;
      }
    }
  } else {
    __shared__ float partial[kGroups][kStrip + 1];
    for (int s = 0; s < kSums; ++s) {
      __syncthreads();
      for (int i = 0; i < kVec; ++i)
        partial[group][lane * kVec + i] = acc[s][i];
      __syncthreads();
      for (int c = threadIdx.x; c < kStrip; c += kThreads) {
        const Idx out = static_cast<Idx>(blockIdx.x) * kStrip + c;
        float sum = 0.f;
        for (int g = 0; g < kGroups; ++g)
          sum += partial[g][c];
        if (out < cols) {
          if (split)
            scratch[(static_cast<Idx>(blockIdx.y) * kSums + s) * cols + out] =
                sum;
          else
            (s == 0 ? dgamma : dbeta)[out] = sum;
        }
      }
    }
  }
  if (!split)
    return;
  unsigned *counters =
      reinterpret_cast<unsigned *>(scratch + gridDim.y * kSums * cols);
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
    if (last)
      counters[blockIdx.x] = 0;
  }
  __syncthreads();
  if (!last)
    return;
  __threadfence();
  const volatile float *partials = scratch;
  // Splits in order (the sum does not depend on which block came last), 8
  // loads in flight at a time. kPar: when the strip's sums are fewer than
  // the threads, kParts threads per sum take every kParts-th split, and
  // their sums meet in shared memory (also in a fixed order).
  constexpr int kOuts = kSums * kStrip;
  constexpr int kParts = kPar && kOuts < kThreads ? kThreads / kOuts : 1;
  if constexpr (kParts > 1) {
    __shared__ float final_part[kParts][kOuts];
    const int c = threadIdx.x % kOuts, part = threadIdx.x / kOuts;
    const int s = c / kStrip;
    const Idx out = static_cast<Idx>(blockIdx.x) * kStrip + c % kStrip;
    float sum = 0.f;
    if (out < cols)
      for (unsigned p0 = part; p0 < gridDim.y; p0 += 8 * kParts) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (p0 + j * kParts < gridDim.y)
            v[j] = partials[((p0 + j * kParts) * kSums + s) * cols + out];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (p0 + j * kParts < gridDim.y)
            sum += v[j];
      }
    final_part[part][c] = sum;
    __syncthreads();
    if (part == 0 && out < cols) {
#pragma unroll
      for (int q = 1; q < kParts; ++q)
        sum += final_part[q][c];
      (s == 0 ? dgamma : dbeta)[out] = sum;
    }
  } else {
    for (int c = threadIdx.x; c < kOuts; c += kThreads) {
      const int s = c / kStrip, cc = c % kStrip;
      const Idx out = static_cast<Idx>(blockIdx.x) * kStrip + cc;
      if (out >= cols)
        continue;
      float sum = 0.f;
      for (unsigned p0 = 0; p0 < gridDim.y; p0 += 8) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (p0 + j < gridDim.y)
            v[j] = partials[((p0 + j) * kSums + s) * cols + out];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (p0 + j < gridDim.y)
            sum += v[j];
      }
      (s == 0 ? dgamma : dbeta)[out] = sum;
    }
  }
}

/// The read-only ceiling: dy and x read once, 16-byte loads, 4 in flight
/// per thread per tensor, one float written per thread.
__global__ void __launch_bounds__(256)
    read_only(const uint4 *__restrict__ a, const uint4 *__restrict__ b,
              long long n, float *out) {
  unsigned acc = 0;
  const long long stride = 4ll * gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * blockDim.x * 4ll + threadIdx.x; i < n;
       i += stride) {
    uint4 va[4], vb[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i + u * blockDim.x < n) {
        va[u] = a[i + u * blockDim.x];
        vb[u] = b[i + u * blockDim.x];
      } else {
        va[u] = vb[u] = make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      acc ^= va[u].x ^ va[u].y ^ va[u].z ^ va[u].w ^ vb[u].x ^ vb[u].y ^
             vb[u].z ^ vb[u].w;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = __uint_as_float(acc);
}

//===----------------------------------------------------------------------===//
// Host
//===----------------------------------------------------------------------===//

namespace {

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float fromBf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Rng {
  uint64_t s;
  float next() { // uniform in [-1, 1)
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return static_cast<float>((s >> 40) * (1.0 / (1ull << 23))) - 1.f;
  }
};

enum class DType { BF16, F16, F32 };
int dtypeBytes(DType t) { return t == DType::F32 ? 4 : 2; }

/// Runs f(begin, end) over [0, n) on every core.
void parallelFor(long long n,
                 const std::function<void(long long, long long)> &f) {
  int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(f, n * t / threads, n * (t + 1) / threads);
  for (std::thread &thread : pool)
    thread.join();
}

/// dy, x (values exact in bf16, stored as `dtype`), mean and rsigma of x's
/// rows, and the float64 sums.
struct Problem {
  long long rows, cols;
  bool ln;
  DType dtype;
  void *dy = nullptr, *x = nullptr;
  float *mean = nullptr, *rsigma = nullptr;
  std::vector<double> ref[2], mag[2]; // dgamma, dbeta: sum, sum of |terms|

  Problem(long long rows, long long cols, bool ln, uint64_t seed,
          DType dtype = DType::BF16)
      : rows(rows), cols(cols), ln(ln), dtype(dtype) {
    size_t n = rows * cols;
    std::vector<uint16_t> hdy(n), hx(n);
    std::vector<float> hmean(rows), hrs(rows);
    parallelFor(rows, [&](long long begin, long long end) {
      for (long long r = begin; r < end; ++r) {
        Rng rng{(seed * 0x9E3779B97F4A7C15ull) ^ (r * 0xBF58476D1CE4E5B9ull) ^
                1};
        for (int i = 0; i < 4; ++i)
          rng.next();
        float offset = 0.5f * rng.next(), scale = 1.f + rng.next() * 0.5f;
        double s = 0, s2 = 0;
        for (long long c = 0; c < cols; ++c) {
          hdy[r * cols + c] = toBf16(rng.next());
          hx[r * cols + c] = toBf16(offset + scale * rng.next());
          double v = fromBf16(hx[r * cols + c]);
          s += v, s2 += v * v;
        }
        double mu = ln ? s / cols : 0.0;
        double var = s2 / cols - (ln ? mu * mu : 0.0);
        hmean[r] = static_cast<float>(mu);
        hrs[r] = static_cast<float>(1.0 / std::sqrt(var + 1e-5));
      }
    });
    for (int k = 0; k < 2; ++k)
      ref[k].assign(cols, 0.0), mag[k].assign(cols, 0.0);
    std::mutex mutex;
    parallelFor(rows, [&](long long begin, long long end) {
      std::vector<double> part[4];
      for (auto &v : part)
        v.assign(cols, 0.0);
      for (long long r = begin; r < end; ++r)
        for (long long c = 0; c < cols; ++c) {
          double d = fromBf16(hdy[r * cols + c]),
                 v = fromBf16(hx[r * cols + c]);
          double term = d * (v - (ln ? hmean[r] : 0.f)) * hrs[r];
          part[0][c] += term, part[1][c] += std::fabs(term);
          part[2][c] += d, part[3][c] += std::fabs(d);
        }
      std::lock_guard<std::mutex> lock(mutex);
      for (long long c = 0; c < cols; ++c) {
        ref[0][c] += part[0][c], mag[0][c] += part[1][c];
        ref[1][c] += part[2][c], mag[1][c] += part[3][c];
      }
    });
    size_t bytes = n * dtypeBytes(dtype);
    CHECK(cudaMalloc(&dy, bytes));
    CHECK(cudaMalloc(&x, bytes));
    CHECK(cudaMalloc(&mean, rows * 4));
    CHECK(cudaMalloc(&rsigma, rows * 4));
    upload(dy, hdy);
    upload(x, hx);
    CHECK(cudaMemcpy(mean, hmean.data(), rows * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(rsigma, hrs.data(), rows * 4, cudaMemcpyHostToDevice));
  }
  ~Problem() { cudaFree(dy), cudaFree(x), cudaFree(mean), cudaFree(rsigma); }
  void upload(void *device, const std::vector<uint16_t> &bits) {
    if (dtype == DType::BF16) {
      CHECK(cudaMemcpy(device, bits.data(), bits.size() * 2,
                       cudaMemcpyHostToDevice));
      return;
    }
    std::vector<uint32_t> converted(dtype == DType::F32 ? bits.size()
                                                        : bits.size() / 2 + 1);
    parallelFor(bits.size(), [&](long long begin, long long end) {
      for (long long i = begin; i < end; ++i) {
        float f = fromBf16(bits[i]);
        if (dtype == DType::F32)
          std::memcpy(&converted[i], &f, 4);
        else
          reinterpret_cast<__half *>(converted.data())[i] = __float2half_rn(f);
      }
    });
    CHECK(cudaMemcpy(device, converted.data(), bits.size() * dtypeBytes(dtype),
                     cudaMemcpyHostToDevice));
  }
  double bytes() const {
    return rows * cols * 2.0 * dtypeBytes(dtype) + rows * (ln ? 8.0 : 4.0);
  }
  int sums() const { return ln ? 2 : 1; }
  std::string shape() const {
    const char *type[] = {"", " f16", " f32"};
    return std::to_string(rows) + "x" + std::to_string(cols) +
           (ln ? " LN" : " RMS") + type[static_cast<int>(dtype)];
  }

  /// Worst |got - ref| / (tolerance) over the outputs; <= 1 passes. Float
  /// outputs: float accumulation only; 16-bit outputs: one rounding more.
  double error(const std::vector<float> got[2], bool rounded) const {
    double worst = 0;
    for (int k = 0; k < sums(); ++k)
      for (long long c = 0; c < cols; ++c) {
        double tol = 2e-5 * mag[k][c] + 1e-6 +
                     (rounded ? std::fabs(ref[k][c]) / 128 : 0.0);
        double e = std::fabs(got[k][c] - ref[k][c]) / tol;
        worst = std::max(worst, std::isnan(e) ? INFINITY : e); // unwritten
      }
    return worst;
  }
};

/// Device scratch and outputs, big enough for every variant.
struct Buffers {
  float *scratch = nullptr, *out[2] = {};
  uint16_t *out16[2] = {};
  size_t scratchBytes = 64 << 20;
  Buffers() {
    CHECK(cudaMalloc(&scratch, scratchBytes));
    CHECK(cudaMemset(scratch, 0, scratchBytes));
    for (int k = 0; k < 2; ++k) {
      CHECK(cudaMalloc(&out[k], 1 << 22));
      CHECK(cudaMalloc(&out16[k], 1 << 21));
    }
  }
};

struct Launch {
  std::string name;
  dim3 grid, block;
  int regs = 0, spill = 0, occupancy = 0;
  size_t counterOffset = 0, counterBytes = 0; // zeroed before each launch
  DType outType = DType::F32; // 16-bit outputs go to Buffers::out16
  std::function<void()> run;
};

/// The splits for a strip count: whole waves of `slots` concurrent blocks
/// (SMs x blocks per SM) when rows allow it, about `waves` waves of them.
int wholeWaveSplits(long long rows, long long strips, long long rowsPerPass,
                    long long slots, int waves) {
  long long maxSplits = std::max(1ll, rows / rowsPerPass);
  long long unit = slots / std::gcd(slots, strips);
  long long want = (waves * slots + strips - 1) / strips;
  if (unit <= maxSplits)
    return unit * std::clamp((want + unit - 1) / unit, 1ll, maxSplits / unit);
  return std::clamp(want, 1ll, maxSplits);
}

/// The current emitter's choice: about 264 blocks.
int baselineSplits(long long rows, long long strips, long long rowsPerPass) {
  return std::clamp((264 + strips - 1) / strips, 1ll,
                    (rows + rowsPerPass - 1) / rowsPerPass);
}

struct VariantDesc {
  std::string name;
  int vec, threads, lanes, unroll;
  std::function<Launch(const Problem &, Buffers &, int splits)> make;
  std::function<int()> occupancy;
};

template <typename Idx, int kVec, int kThreads, int kLanes, int kUnroll,
          int kMinBlocks, bool kShfl, bool kRaw = true, long long kRowsC = 0,
          long long kColsC = 0, bool kPar = false>
VariantDesc variant(const std::string &name) {
  VariantDesc d;
  d.name = name;
  d.vec = kVec, d.threads = kThreads, d.lanes = kLanes, d.unroll = kUnroll;
  d.occupancy = [] {
    int occ = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &occ,
        dgamma_variant<tj_bf16, Idx, kVec, kThreads, kLanes, kUnroll,
                       kMinBlocks, true, kShfl, kRaw, kRowsC, kColsC, kPar>,
        kThreads, 0));
    return occ;
  };
  d.make = [name](const Problem &p, Buffers &b, int splits) {
    Launch l;
    if ((kRowsC && kRowsC != p.rows) || (kColsC && kColsC != p.cols) ||
        p.dtype != DType::BF16) {
      std::fprintf(stderr, "%s: compiled for another shape\n", name.c_str());
      std::exit(1);
    }
    long long strips = (p.cols + kLanes * kVec - 1) / (kLanes * kVec);
    long long splitRows = (p.rows + splits - 1) / splits;
    splits = static_cast<int>((p.rows + splitRows - 1) / splitRows);
    l.name = name + " s" + std::to_string(splits);
    l.grid = dim3(strips, splits), l.block = dim3(kThreads);
    l.counterOffset = size_t(splits) * p.sums() * p.cols * 4;
    l.counterBytes = splits > 1 ? strips * 4 : 0;
    auto kernel = p.ln ? dgamma_variant<tj_bf16, Idx, kVec, kThreads, kLanes,
                                        kUnroll, kMinBlocks, true, kShfl, kRaw,
                                        kRowsC, kColsC, kPar>
                       : dgamma_variant<tj_bf16, Idx, kVec, kThreads, kLanes,
                                        kUnroll, kMinBlocks, false, kShfl, kRaw,
                                        kRowsC, kColsC, kPar>;
    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, kernel));
    l.regs = attr.numRegs, l.spill = static_cast<int>(attr.localSizeBytes);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&l.occupancy, kernel,
                                                        kThreads, 0));
    const Problem *pp = &p;
    Buffers *bb = &b;
    dim3 grid = l.grid;
    l.run = [=] {
      kernel<<<grid, kThreads>>>(
          reinterpret_cast<const tj_bf16 *>(pp->dy),
          reinterpret_cast<const tj_bf16 *>(pp->x), pp->mean, pp->rsigma,
          bb->out[0], bb->out[1], bb->scratch, static_cast<Idx>(pp->rows),
          static_cast<Idx>(pp->cols), static_cast<Idx>(splitRows));
    };
    return l;
  };
  return d;
}

/// The generated kernels verbatim (8192 x 4096 only).
Launch baseline(const Problem &p, Buffers &b) {
  Launch l;
  l.name = std::string("generated (") + (p.ln ? "quickstart" : "llama") + ")";
  l.grid = dim3(64, 5), l.block = dim3(512);
  l.counterOffset = size_t(5) * p.sums() * p.cols * 4;
  l.counterBytes = 64 * 4;
  l.outType = DType::BF16;
  const void *fn = p.ln
                       ? (const void *)quickstart_backward_norm_bwd_add_0_dgamma
                       : (const void *)llama_backward_norm_bwd_add_0_dgamma;
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, fn));
  l.regs = attr.numRegs, l.spill = static_cast<int>(attr.localSizeBytes);
  CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&l.occupancy, fn, 512, 0));
  const Problem *pp = &p;
  Buffers *bb = &b;
  l.run = [=] {
    auto dy = reinterpret_cast<const tj_bf16 *>(pp->dy);
    auto x = reinterpret_cast<const tj_bf16 *>(pp->x);
    auto g = reinterpret_cast<tj_bf16 *>(bb->out16[0]);
    auto be = reinterpret_cast<tj_bf16 *>(bb->out16[1]);
    if (pp->ln)
      quickstart_backward_norm_bwd_add_0_dgamma<<<dim3(64, 5), 512>>>(
          dy, x, pp->mean, pp->rsigma, g, be, bb->scratch);
    else
      llama_backward_norm_bwd_add_0_dgamma<<<dim3(64, 5), 512>>>(
          dy, x, pp->rsigma, g, bb->scratch);
  };
  return l;
}

/// Median of per-launch CUDA event times (us), after warm-up; `before` runs
/// outside the timed span.
double timeIt(const std::function<void()> &before,
              const std::function<void()> &run, int launches = 40) {
  for (int i = 0; i < 3; ++i)
    before(), run();
  std::vector<cudaEvent_t> start(launches), stop(launches);
  for (int i = 0; i < launches; ++i) {
    CHECK(cudaEventCreate(&start[i]));
    CHECK(cudaEventCreate(&stop[i]));
  }
  for (int i = 0; i < launches; ++i) {
    before();
    CHECK(cudaEventRecord(start[i]));
    run();
    CHECK(cudaEventRecord(stop[i]));
  }
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaGetLastError());
  std::vector<double> us(launches);
  for (int i = 0; i < launches; ++i) {
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
    us[i] = ms * 1e3;
    cudaEventDestroy(start[i]), cudaEventDestroy(stop[i]);
  }
  std::nth_element(us.begin(), us.begin() + launches / 2, us.end());
  return us[launches / 2];
}

std::vector<float> fetch(const float *d, long long n) {
  std::vector<float> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

struct Result {
  double us, usWithMemset, error;
  bool deterministic;
};

/// Checks a launch against the float64 sums (and its rerun bitwise), then
/// times it.
Result measure(const Problem &p, Buffers &b, Launch &l, bool timed) {
  auto zero = [&] {
    if (l.counterBytes)
      CHECK(
          cudaMemsetAsync(reinterpret_cast<char *>(b.scratch) + l.counterOffset,
                          0, l.counterBytes));
  };
  auto outputs = [&] {
    std::vector<float> got[2];
    for (int k = 0; k < p.sums(); ++k) {
      if (l.outType != DType::F32) {
        std::vector<uint16_t> h(p.cols);
        CHECK(cudaMemcpy(h.data(), b.out16[k], p.cols * 2,
                         cudaMemcpyDeviceToHost));
        for (uint16_t v : h) {
          __half_raw raw;
          raw.x = v;
          got[k].push_back(l.outType == DType::BF16 ? fromBf16(v)
                                                    : __half2float(raw));
        }
      } else {
        got[k] = fetch(b.out[k], p.cols);
      }
    }
    return std::make_pair(got[0], got[1]);
  };
  for (int k = 0; k < 2; ++k) {
    CHECK(cudaMemset(b.out[k], 0xff, p.cols * 4));
    CHECK(cudaMemset(b.out16[k], 0xff, p.cols * 2));
  }
  zero();
  l.run();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaGetLastError());
  auto first = outputs();
  std::vector<float> got[2] = {first.first, first.second};
  Result r;
  r.error = p.error(got, l.outType != DType::F32);
  r.us = timed ? timeIt(zero, l.run) : 0.0;
  // As the executor launches it: all of the scratch zeroed first.
  r.usWithMemset =
      timed ? timeIt([] {},
                     [&] {
                       CHECK(cudaMemsetAsync(b.scratch, 0,
                                             l.counterOffset + l.counterBytes));
                       l.run();
                     })
            : 0.0;
  if (!timed) {
    zero();
    l.run();
  }
  CHECK(cudaDeviceSynchronize());
  auto again = outputs();
  r.deterministic = again == first;
  return r;
}

/// A kernel of dgamma_emitted.inc (emit_dgamma.py).
struct EmittedDgamma {
  const char *name;
  long long rows, cols;
  bool ln;
  int outputs;
  DType dtype, outType;
  dim3 grid, block;
  size_t scratchBytes;
  void (*launch)(const void *dy, const void *x, const float *mean,
                 const float *rsigma, void *out0, void *out1, float *scratch);
  const void *kernel;
};

} // namespace

#ifdef DGAMMA_EMITTED
#include DGAMMA_EMITTED
#endif

/// Sections to run (all when none is named): sweep, splits, odd, emitted.
int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0); // a log cut short keeps its lines
  std::set<std::string> sections(argv + 1, argv + argc);
  auto want = [&](const char *name) {
    return sections.empty() || sections.count(name);
  };
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, sms,
              prop.l2CacheSize >> 20);
  Buffers buffers;
  bool allPass = true;

  // Copy bandwidth: cudaMemcpy of the bytes the kernel reads (dy and x).
  const long long kRows = 8192, kCols = 4096;
  size_t copyBytes = kRows * kCols * 4;
  void *src, *dst;
  CHECK(cudaMalloc(&src, copyBytes));
  CHECK(cudaMalloc(&dst, copyBytes));
  CHECK(cudaMemset(src, 1, copyBytes));
  double copyUs = timeIt(
      [] {},
      [&] {
        CHECK(cudaMemcpyAsync(dst, src, copyBytes, cudaMemcpyDeviceToDevice));
      });
  double copyGBs = 2.0 * copyBytes / copyUs * 1e-3;
  std::printf("cudaMemcpy D2D %.0f MiB: %.1f us, %.0f GB/s read+write\n",
              copyBytes / 1048576.0, copyUs, copyGBs);
  {
    float *sink;
    CHECK(cudaMalloc(&sink, size_t(sms) * 8 * 256 * 4));
    long long n = copyBytes / 2 / 16;
    double us = timeIt([] {},
                       [&] {
                         read_only<<<sms * 8, 256>>>(
                             static_cast<const uint4 *>(src),
                             static_cast<const uint4 *>(dst), n, sink);
                       });
    std::printf("read-only kernel, same bytes: %.1f us, %.0f GB/s (%.0f%% of "
                "copy)\n",
                us, copyBytes / us * 1e-3,
                100.0 * copyBytes / us * 1e-3 / copyGBs);
  }
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));

  auto report = [&](const Problem &p, Launch &l, bool timed) {
    Result r = measure(p, buffers, l, timed);
    bool pass = r.error <= 1.0 && r.deterministic;
    allPass &= pass;
    double gbs = timed ? p.bytes() / r.us * 1e-3 : 0;
    std::printf("%-14s %-34s grid %5ux%-3u blk %4u reg %3d spill %3d occ %d "
                "waves %5.2f",
                p.shape().c_str(), l.name.c_str(), l.grid.x, l.grid.y,
                l.block.x, l.regs, l.spill, l.occupancy,
                double(l.grid.x) * l.grid.y / (sms * std::max(1, l.occupancy)));
    if (timed)
      std::printf(" | %6.1f us %5.0f GB/s %5.1f%% (+memset %5.1f us)", r.us,
                  gbs, 100.0 * gbs / copyGBs, r.usWithMemset);
    std::printf(" | err %.2f %s%s\n", r.error, r.deterministic ? "" : "NONDET ",
                pass ? "ok" : "FAIL");
    return r.us;
  };

  using I = int;
  using L = long long;
  constexpr long long R = kRows, C = kCols;
  // The main shape's variants: the shape compiled in, as the emitter does.
  std::vector<std::pair<VariantDesc, std::vector<int>>> ln = {
      {variant<I, 8, 512, 8, 4, 1, false, false, R, C>("t512 l8 u4 b1 float"),
       {5, 33}},
      {variant<I, 8, 512, 8, 4, 1, false, true, R, C>("t512 l8 u4 b1"), {33}},
      {variant<I, 8, 512, 8, 4, 1, true, true, R, C>("t512 l8 u4 b1 shfl"),
       {33}},
      {variant<I, 8, 512, 8, 4, 2, true, true, R, C>("t512 l8 u4 b2 shfl"),
       {33}},
      {variant<I, 8, 256, 8, 4, 4, true, true, R, C>("t256 l8 u4 b4 shfl"),
       {16, 17, 32, 33, 66, 99}},
      {variant<I, 8, 256, 8, 4, 4, false, true, R, C>("t256 l8 u4 b4"), {33}},
      {variant<I, 8, 256, 8, 4, 4, true, false, R, C>(
           "t256 l8 u4 b4 shfl float"),
       {33}},
      {variant<L, 8, 256, 8, 4, 4, true, true, R, C>("t256 l8 u4 b4 shfl i64"),
       {33}},
      {variant<I, 8, 256, 8, 2, 4, true, true, R, C>("t256 l8 u2 b4 shfl"),
       {33, 66}},
      {variant<I, 8, 256, 8, 4, 3, true, true, R, C>("t256 l8 u4 b3 shfl"),
       {33, 99}},
      {variant<I, 8, 256, 8, 3, 4, true, true, R, C>("t256 l8 u3 b4 shfl"),
       {33}},
      {variant<I, 8, 256, 8, 8, 2, true, true, R, C>("t256 l8 u8 b2 shfl"),
       {33}},
      {variant<I, 8, 256, 8, 8, 3, true, true, R, C>("t256 l8 u8 b3 shfl"),
       {33, 99}},
      {variant<I, 8, 128, 8, 4, 8, true, true, R, C>("t128 l8 u4 b8 shfl"),
       {33, 66}},
      {variant<I, 8, 128, 8, 8, 4, true, true, R, C>("t128 l8 u8 b4 shfl"),
       {33, 66}},
      {variant<I, 8, 256, 16, 4, 4, true, true, R, C>("t256 l16 u4 b4 shfl"),
       {33, 66}},
      {variant<I, 8, 256, 32, 4, 4, true, true, R, C>("t256 l32 u4 b4 shfl"),
       {66, 132}},
      {variant<I, 8, 256, 4, 4, 4, true, true, R, C>("t256 l4 u4 b4 shfl"),
       {33}},
      {variant<I, 8, 1024, 8, 4, 1, true, true, R, C>("t1024 l8 u4 b1 shfl"),
       {33}},
  };
  // Other shapes: the shape from the arguments.
  std::vector<VariantDesc> anyShape = {
      variant<I, 8, 512, 8, 4, 1, false, false>("t512 l8 u4 b1 float"),
      variant<I, 8, 256, 8, 4, 4, true, true>("t256 l8 u4 b4 shfl"),
      variant<I, 8, 256, 8, 2, 4, true, true>("t256 l8 u2 b4 shfl"),
      variant<I, 8, 256, 8, 8, 2, true, true>("t256 l8 u8 b2 shfl"),
      variant<I, 8, 128, 8, 8, 4, true, true>("t128 l8 u8 b4 shfl"),
  };

  // Section "sweep": block sizes, unrolling, reductions, splits.
  if (want("sweep")) {
    std::printf("\n== 8192 x 4096 bf16, LayerNorm (dgamma + dbeta) ==\n");
    Problem p(kRows, kCols, true, 1);
    Launch b = baseline(p, buffers);
    report(p, b, true);
    for (auto &[desc, splitList] : ln) {
      for (int s : splitList) {
        Launch l = desc.make(p, buffers, s);
        report(p, l, true);
      }
      int occ = desc.occupancy();
      long long strips =
          (kCols + desc.lanes * desc.vec - 1) / (desc.lanes * desc.vec);
      int s = wholeWaveSplits(kRows, strips,
                              desc.threads / desc.lanes * desc.unroll,
                              132ll * occ, 4);
      Launch l = desc.make(p, buffers, s);
      l.name += " (policy)";
      report(p, l, true);
    }
  }

  if (want("sweep")) {
    std::printf("\n== 8192 x 4096 bf16, RMSNorm (dgamma) ==\n");
    Problem p(kRows, kCols, false, 2);
    Launch b = baseline(p, buffers);
    report(p, b, true);
    for (int i : {0, 4, 8, 9, 10, 11, 14}) {
      auto &desc = ln[i].first;
      for (int s : {i == 0 ? 5 : 33, 66}) {
        Launch l = desc.make(p, buffers, s);
        report(p, l, true);
      }
    }
  }

  if (want("sweep"))
    std::printf("\n== other shapes (t512 l8 u4 b1 at the current emitter's "
                "splits vs candidates at whole waves) ==\n");
  for (auto [rows, cols] : {std::pair<long long, long long>{8192, 1024},
                            {4096, 4096},
                            {16384, 8192},
                            {32768, 768}}) {
    if (!want("sweep"))
      break;
    Problem p(rows, cols, true, rows + cols);
    for (int i = 0; i < int(anyShape.size()); ++i) {
      auto &desc = anyShape[i];
      long long strips =
          (cols + desc.lanes * desc.vec - 1) / (desc.lanes * desc.vec);
      long long rowsPerPass = desc.threads / desc.lanes * desc.unroll;
      int s = i == 0 ? baselineSplits(rows, strips, rowsPerPass)
                     : wholeWaveSplits(rows, strips, rowsPerPass,
                                       132ll * desc.occupancy(), 4);
      Launch l = desc.make(p, buffers, s);
      report(p, l, true);
    }
  }

  // Section "odd": the template on odd shapes.
  if (want("odd")) {
    std::printf("\n== correctness: odd shapes, vector widths 8/4/1 ==\n");
    auto v8 = variant<I, 8, 256, 8, 4, 4, true>("v8 t256 l8 u4");
    auto v8n = variant<I, 8, 256, 8, 4, 4, false>("v8 t256 l8 u4 noshfl");
    auto v4 = variant<I, 4, 256, 8, 4, 4, true>("v4 t256 l8 u4");
    auto v1 = variant<I, 1, 256, 32, 4, 4, true>("v1 t256 l32 u4");
    auto v1b = variant<I, 1, 256, 2, 4, 4, true>("v1 t256 l2 u4");
    auto v8p = variant<I, 8, 256, 8, 8, 2, true, true, 0, 0, true>(
        "v8 t256 l8 u8 par");
    auto v1p = variant<I, 1, 256, 32, 8, 2, true, true, 0, 0, true>(
        "v1 t256 l32 u8 par");
    struct Case {
      long long rows, cols;
      VariantDesc *desc;
    };
    for (bool isLn : {true, false})
      for (Case c :
           {Case{1000, 1000, &v8}, Case{3, 24, &v8}, Case{64, 64, &v8},
            Case{100003, 64, &v8}, Case{1000, 1000, &v8n}, Case{50, 36, &v4},
            Case{777, 1004, &v4}, Case{777, 1001, &v1}, Case{5, 3, &v1},
            Case{2049, 3, &v1b}, Case{1000, 1000, &v8p}, Case{3, 24, &v8p},
            Case{100003, 64, &v8p}, Case{777, 1001, &v1p}}) {
        Problem p(c.rows, c.cols, isLn, c.rows * 7 + c.cols);
        long long strips = (c.cols + c.desc->lanes * c.desc->vec - 1) /
                           (c.desc->lanes * c.desc->vec);
        int policy = wholeWaveSplits(
            c.rows, strips, c.desc->threads / c.desc->lanes * c.desc->unroll,
            132ll * c.desc->occupancy(), 4);
        for (int s : {1, 7, policy}) {
          if (s > c.rows)
            continue;
          Launch l = c.desc->make(p, buffers, s);
          report(p, l, false);
        }
      }
  }

  // Section "splits": the chosen sizes (256 threads, 8 rows in flight, two
  // blocks per SM) against their neighbours, over split counts.
  if (want("splits")) {
    auto a = variant<I, 8, 256, 8, 8, 2, true, true, R, C>("t256 l8 u8 b2");
    auto ap = variant<I, 8, 256, 8, 8, 2, true, true, R, C, true>(
        "t256 l8 u8 b2 par");
    auto b = variant<I, 8, 128, 8, 8, 4, true, true, R, C>("t128 l8 u8 b4");
    auto c = variant<I, 8, 256, 8, 4, 4, true, true, R, C>("t256 l8 u4 b4");
    auto d = variant<I, 8, 256, 8, 4, 3, true, true, R, C>("t256 l8 u4 b3");
    for (bool isLn : {true, false}) {
      std::printf("\n== 8192 x 4096 bf16, %s: split counts ==\n",
                  isLn ? "LayerNorm" : "RMSNorm");
      Problem p(kRows, kCols, isLn, 3);
      Launch base = baseline(p, buffers);
      report(p, base, true);
      for (auto [desc, splitList] :
           {std::pair<VariantDesc *, std::vector<int>>{&a, {9, 13, 17, 25}},
            {&ap, {9, 17, 33}},
            {&b, {17, 25, 33}},
            {&c, {8, 12, 16}},
            {&d, {12, 16, 24}}})
        for (int s : splitList) {
          Launch l = desc->make(p, buffers, s);
          report(p, l, true);
        }
    }
    std::printf("\n== other shapes: split counts ==\n");
    auto ar = variant<I, 8, 256, 8, 8, 2, true, true>("t256 l8 u8 b2");
    auto arp = variant<I, 8, 256, 8, 8, 2, true, true, 0, 0, true>(
        "t256 l8 u8 b2 par");
    auto cr = variant<I, 8, 256, 8, 4, 4, true, true>("t256 l8 u4 b4");
    struct Case {
      long long rows, cols;
      bool ln;
      VariantDesc *desc;
      std::vector<int> splits;
    };
    for (const Case &k : {Case{8192, 1024, true, &ar, {16, 32, 64}},
                          Case{8192, 1024, true, &cr, {16, 33}},
                          Case{32768, 768, true, &ar, {44, 88, 176}},
                          Case{32768, 768, true, &cr, {44, 88}},
                          Case{16384, 8192, false, &ar, {5, 9, 17}},
                          Case{100003, 64, false, &ar, {128, 390}},
                          Case{100003, 64, false, &arp, {128, 390}}}) {
      Problem p(k.rows, k.cols, k.ln, k.rows ^ k.cols);
      for (int s : k.splits) {
        Launch l = k.desc->make(p, buffers, s);
        report(p, l, true);
      }
    }
  }

#ifdef DGAMMA_EMITTED
  // Section "emitted": te-compile's kernels verbatim, launched as the plan
  // says (all of the scratch zeroed first, as the executor does).
  if (want("emitted")) {
    std::printf("\n== emitted kernels (%s) ==\n", DGAMMA_EMITTED);
    std::set<std::string> timedShapes;
    for (const EmittedDgamma &e : kEmitted) {
      Problem p(e.rows, e.cols, e.ln, e.rows * 31 + e.cols, e.dtype);
      Launch l;
      l.name = e.name;
      l.grid = e.grid, l.block = e.block;
      l.counterOffset = 0, l.counterBytes = e.scratchBytes;
      l.outType = e.outType;
      cudaFuncAttributes attr;
      CHECK(cudaFuncGetAttributes(&attr, e.kernel));
      l.regs = attr.numRegs, l.spill = static_cast<int>(attr.localSizeBytes);
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &l.occupancy, e.kernel, e.block.x * e.block.y * e.block.z, 0));
      const Problem *pp = &p;
      Buffers *bb = &buffers;
      bool wide = e.outType == DType::F32;
      l.run = [=] {
        e.launch(pp->dy, pp->x, pp->mean, pp->rsigma,
                 wide ? (void *)bb->out[0] : (void *)bb->out16[0],
                 wide ? (void *)bb->out[1] : (void *)bb->out16[1], bb->scratch);
      };
      // Time one kernel of each shape, when big enough to mean anything.
      bool timed =
          e.rows * e.cols >= (1 << 20) && timedShapes.insert(p.shape()).second;
      report(p, l, timed);
    }
  }
#endif
  std::printf("\n%s\n", allPass ? "ALL CHECKS PASSED" : "SOME CHECKS FAILED");
  return allPass ? 0 : 1;
}
