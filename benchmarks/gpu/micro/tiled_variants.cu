// Variants of the tiled pointwise kernel (the dGELU + bias gradient + FP8
// cast + transpose of a 8192 x 16384 bf16 gradient, the largest generated
// kernel of the headline layer), to find where its time goes before
// changing codegen/PointwiseKernels.cpp. Every variant is checked against
// the baseline's bytes (FP8 outputs bit-exact, bias gradient within float
// reassociation) and timed with CUDA events against a device copy.
//
// On the GPU machine, from the repository root:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//     -Icodegen/runtime_headers benchmarks/gpu/micro/tiled_variants.cu \
//     -o /tmp/tiled && /tmp/tiled
#include "fp8.cuh"
#include "math.cuh"
#include "reduce.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

#include "check_cuda.cuh"


constexpr int kRows = 8192, kCols = 16384;

// kPasses: 32-row passes per tile; kFast: one FP8 cvt per element, 32-bit
// offsets, no bounds checks (the shape divides the tile); kWordT: the
// transposed read takes 4-byte words and byte permutes.
template <int kPasses, bool kFast, bool kWordT>
__global__ void __launch_bounds__(256)
    dact(const tj_bf16 *__restrict__ dy, const tj_bf16 *__restrict__ x,
         const float *__restrict__ scale, tj_bf16 *__restrict__ dbias,
         tj_e5m2 *__restrict__ out, float *__restrict__ amax,
         tj_e5m2 *__restrict__ outT, float *__restrict__ scratch) {
  constexpr int kVec = 8, kUnroll = kPasses;
  constexpr int kThreadsX = 8, kRowsPerPass = 32, kTileRows = 32 * kPasses,
                kTileCols = 64;
  const float s = scale[0];
  float amax0 = 0.f;
  float acc[kVec] = {};
  __shared__ __align__(16) tj_u8 tile[kTileRows][kTileCols + 4];
  const int col0 = blockIdx.x * kTileCols;
  for (int row0 = blockIdx.y * kTileRows; row0 < kRows;
       row0 += gridDim.y * kTileRows) {
    float dy_in[kUnroll][kVec], x_in[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int row = row0 + threadIdx.x / kThreadsX + u * kRowsPerPass;
      const int col = col0 + threadIdx.x % kThreadsX * kVec;
      if (kFast || (row < kRows && col < kCols)) {
        tj_load(x_in[u], x + row * kCols + col);
        tj_load(dy_in[u], dy + row * kCols + col);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int row = row0 + threadIdx.x / kThreadsX + u * kRowsPerPass;
      const int col = col0 + threadIdx.x % kThreadsX * kVec;
      if (kFast || (row < kRows && col < kCols)) {
        float o[kVec];
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          const float t0 = dy_in[u][i] * tj_dgelu(x_in[u][i]);
          acc[i] += t0;
          amax0 = fmaxf(amax0, fabsf(t0));
          o[i] = t0 * s;
        }
        tj_vec<tj_u32, kVec / 4> words;
        if (kFast) { // converted once, as the emitter does
          tj_pack_words<tj_e5m2>(words, o);
        } else { // the baseline converts twice, once per layout
          tj_vec<tj_e5m2, kVec> bytes;
          tj_pack(bytes, o);
          *reinterpret_cast<tj_vec<tj_e5m2, kVec> *>(out + row * kCols +
                                                     col) = bytes;
          tj_pack(bytes, o);
          words = *reinterpret_cast<const tj_vec<tj_u32, kVec / 4> *>(&bytes);
        }
        if (kFast)
          *reinterpret_cast<tj_vec<tj_u32, kVec / 4> *>(out + row * kCols +
                                                        col) = words;
#pragma unroll
        for (int w = 0; w < kVec / 4; ++w)
          *reinterpret_cast<tj_u32 *>(&tile[row - row0][col - col0 + 4 * w]) =
              words.v[w];
      }
    }
    __syncthreads();
    if constexpr (!kWordT) {
#pragma unroll
      for (int chunk = threadIdx.x; chunk < kTileCols * kTileRows / 8;
           chunk += blockDim.x) {
        // 64 rows x 8 columns per 512 chunks; taller tiles repeat below.
        const int cc = chunk % 512 % 8 + chunk % 512 / 64 * 8;
        const int r2 = chunk % 512 / 8 % 8 * 8 + chunk / 512 * 64;
        if (kFast || (col0 + cc < kCols && row0 + r2 < kRows)) {
          tj_vec<tj_e5m2, 8> column;
#pragma unroll
          for (int k = 0; k < 8; ++k)
            column.v[k].bits = tile[r2 + k][cc];
          *reinterpret_cast<tj_vec<tj_e5m2, 8> *>(
              outT + static_cast<tj_i64>(col0 + cc) * kRows + row0 + r2) =
              column;
        }
      }
    } else {
      // Task: 8 rows x 4 columns; 8 row groups run down a warp so that each
      // column's 64 bytes leave in one store instruction.
      for (int task = threadIdx.x; task < kTileRows / 8 * kTileCols / 4;
           task += blockDim.x) {
        const int rg = task % (kTileRows / 8), cg = task / (kTileRows / 8);
        const int r = rg * 8, c = cg * 4;
        tj_u32 w[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
          w[k] = *reinterpret_cast<const tj_u32 *>(&tile[r + k][c]);
        tj_u32 lo[4], hi[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const tj_u32 *q = w + 4 * h;
          const tj_u32 t0 = __byte_perm(q[0], q[1], 0x5140),
                       t1 = __byte_perm(q[2], q[3], 0x5140),
                       t2 = __byte_perm(q[0], q[1], 0x7362),
                       t3 = __byte_perm(q[2], q[3], 0x7362);
          tj_u32 *d = h ? hi : lo;
          d[0] = __byte_perm(t0, t1, 0x5410);
          d[1] = __byte_perm(t0, t1, 0x7632);
          d[2] = __byte_perm(t2, t3, 0x5410);
          d[3] = __byte_perm(t2, t3, 0x7632);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j)
          *reinterpret_cast<uint2 *>(
              outT + static_cast<tj_i64>(col0 + c + j) * kRows + row0 + r) =
              make_uint2(lo[j], hi[j]);
      }
    }
    __syncthreads();
  }
  const float block_amax = tj_block_max(amax0);
  if (threadIdx.x == 0)
    tj_atomic_amax(amax, block_amax);
  __shared__ float rows[kRowsPerPass][kTileCols + 1];
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    rows[threadIdx.x / kThreadsX][threadIdx.x % kThreadsX * kVec + i] = acc[i];
  __syncthreads();
  if (threadIdx.x < kTileCols) {
    float sum = 0.f;
    for (int r = 0; r < kRowsPerPass; ++r)
      sum += rows[r][threadIdx.x];
    scratch[blockIdx.y * kCols + col0 + threadIdx.x] = sum;
  }
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    last = atomicAdd(
               &reinterpret_cast<unsigned *>(scratch + 64 * kCols)[blockIdx.x],
               1u) == gridDim.y - 1;
  __syncthreads();
  if (!last)
    return;
  __threadfence();
  const volatile float *partials = scratch;
  if (threadIdx.x < kTileCols) {
    float sum = 0.f;
    for (unsigned sy = 0; sy < gridDim.y; ++sy)
      sum += partials[sy * kCols + col0 + threadIdx.x];
    dbias[col0 + threadIdx.x] = tj_convert<tj_bf16>::from(sum);
  }
}

struct Buffers {
  tj_bf16 *dy, *x, *dbias;
  float *scale, *amax, *scratch;
  tj_e5m2 *out, *outT;
};

using Kernel = void (*)(const tj_bf16 *, const tj_bf16 *, const float *,
                        tj_bf16 *, tj_e5m2 *, float *, tj_e5m2 *, float *);

void launch(Kernel k, int gridY, const Buffers &b) {
  CHECK(cudaMemsetAsync(b.amax, 0, 4));
  CHECK(cudaMemsetAsync(b.scratch + 64 * kCols, 0, 4 * kCols));
  k<<<dim3(kCols / 64, gridY), 256>>>(b.dy, b.x, b.scale, b.dbias, b.out,
                                      b.amax, b.outT, b.scratch);
}

template <typename F> float timeIt(F f) {
  cudaEvent_t a, z;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&z));
  for (int i = 0; i < 5; ++i)
    f();
  std::vector<float> ms;
  for (int batch = 0; batch < 7; ++batch) {
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < 20; ++i)
      f();
    CHECK(cudaEventRecord(z));
    CHECK(cudaEventSynchronize(z));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, z));
    ms.push_back(t / 20);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t n = size_t(kRows) * kCols;
  Buffers b;
  CHECK(cudaMalloc(&b.dy, n * 2));
  CHECK(cudaMalloc(&b.x, n * 2));
  CHECK(cudaMalloc(&b.dbias, kCols * 2));
  CHECK(cudaMalloc(&b.scale, 4));
  CHECK(cudaMalloc(&b.amax, 4));
  CHECK(cudaMalloc(&b.scratch, 65 * kCols * 4));
  CHECK(cudaMalloc(&b.out, n));
  CHECK(cudaMalloc(&b.outT, n));
  {
    std::vector<uint16_t> h(n);
    uint64_t st = 12345;
    for (auto *p : {b.dy, b.x}) {
      for (size_t i = 0; i < n; ++i) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        float f = (float((st >> 40) & 0xffff) / 32768.f - 1.f) * 3.f;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        h[i] = uint16_t(bits >> 16);
      }
      CHECK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice));
    }
    float s = 4.f;
    CHECK(cudaMemcpy(b.scale, &s, 4, cudaMemcpyHostToDevice));
  }
  // Reference: the baseline.
  std::vector<uint8_t> refOut(n), refT(n), got(n);
  std::vector<uint16_t> refBias(kCols), gotBias(kCols);
  float refAmax, gotAmax;
  launch(dact<2, false, false>, 5, b);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(refOut.data(), b.out, n, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(refT.data(), b.outT, n, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(refBias.data(), b.dbias, kCols * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&refAmax, b.amax, 4, cudaMemcpyDeviceToHost));
  // The transpose against the direct output, on the host.
  for (size_t r = 0; r < kRows; r += 97)
    for (size_t c = 0; c < kCols; ++c)
      if (refT[c * kRows + r] != refOut[r * kCols + c]) {
        std::printf("baseline transpose wrong at %zu %zu\n", r, c);
        return 1;
      }
  void *copySrc, *copyDst;
  const size_t copyBytes = size_t(384) << 20; // 768 MiB moved
  CHECK(cudaMalloc(&copySrc, copyBytes));
  CHECK(cudaMalloc(&copyDst, copyBytes));
  const float copyMs = timeIt([&] {
    CHECK(
        cudaMemcpyAsync(copyDst, copySrc, copyBytes, cudaMemcpyDeviceToDevice));
  });
  const double moved = double(n) * 6;
  std::printf("# %s, %d SMs; copy of 768 MiB moved: %.1f us (%.0f GB/s)\n",
              prop.name, prop.multiProcessorCount, copyMs * 1e3,
              2.0 * copyBytes / copyMs / 1e6);
  std::printf("| variant | grid.y | regs | us | GB/s | %% of copy | check "
              "|\n|---|---|---|---|---|---|---|\n");
  struct V {
    const char *name;
    Kernel k;
    int gridY;
  };
  const V variants[] = {
      {"baseline (generated)", dact<2, false, false>, 5},
      {"baseline", dact<2, false, false>, 4},
      {"baseline", dact<2, false, false>, 2},
      {"fast", dact<2, true, false>, 5},
      {"fast", dact<2, true, false>, 4},
      {"fast+wordT", dact<2, true, true>, 5},
      {"fast+wordT", dact<2, true, true>, 4},
      {"fast+wordT", dact<2, true, true>, 2},
      {"fast+wordT 128-row tiles", dact<4, true, true>, 4},
      {"fast+wordT 128-row tiles", dact<4, true, true>, 2},
      {"fast+wordT 128-row tiles", dact<4, true, true>, 1},
      {"fast 128-row tiles", dact<4, true, false>, 2},
  };
  for (const V &v : variants) {
    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, v.k));
    CHECK(cudaMemset(b.out, 0, n));
    CHECK(cudaMemset(b.outT, 0, n));
    launch(v.k, v.gridY, b);
    CHECK(cudaDeviceSynchronize());
    auto differing = [&](const std::vector<uint8_t> &ref) {
      size_t count = 0;
      for (size_t i = 0; i < n; ++i)
        count += got[i] != ref[i];
      return count;
    };
    CHECK(cudaMemcpy(got.data(), b.out, n, cudaMemcpyDeviceToHost));
    const size_t outDiff = differing(refOut);
    CHECK(cudaMemcpy(got.data(), b.outT, n, cudaMemcpyDeviceToHost));
    const size_t outTDiff = differing(refT);
    CHECK(
        cudaMemcpy(gotBias.data(), b.dbias, kCols * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&gotAmax, b.amax, 4, cudaMemcpyDeviceToHost));
    int biasDiff = 0;
    for (int c = 0; c < kCols; ++c) {
      auto f = [](uint16_t h) {
        uint32_t bits = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        return f;
      };
      biasDiff += std::fabs(f(gotBias[c]) - f(refBias[c])) >
                  0.02f * std::fabs(f(refBias[c])) + 0.5f;
    }
    const bool ok = !outDiff && !outTDiff && !biasDiff && gotAmax == refAmax;
    char check[160];
    std::snprintf(check, sizeof check,
                  "%s (out %zu, outT %zu bytes differ; bias %d; amax %g/%g)",
                  ok ? "ok" : "MISMATCH", outDiff, outTDiff, biasDiff, gotAmax,
                  refAmax);
    const float ms = timeIt([&] { launch(v.k, v.gridY, b); });
    std::printf("| %s | %d | %d | %.1f | %.0f | %.0f | %s |\n", v.name, v.gridY,
                attr.numRegs, ms * 1e3, moved / ms / 1e6,
                100.0 * (moved / ms) / (2.0 * copyBytes / copyMs), check);
  }
  return 0;
}
