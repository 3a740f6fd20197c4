// Variants of the inference SwiGLU + FP8 cast kernel (act_cast without a
// transpose: silu(a) * b over the two halves of an 8192 x 28672 bf16 fc1
// output, scaled and cast to E4M3, with the amax), the Llama-style layer's
// largest generated kernel in an inference forward, which ran at about 60%
// of copy bandwidth on an H200 while its training variant (which also
// writes the transpose) reached 85%. Every variant's FP8 bytes are compared
// with the baseline's (exactly, or within one code where the math differs)
// and timed with CUDA events against a device-to-device copy of as many
// bytes.
//
// On the GPU machine, from the repository root:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
//     -Icodegen/runtime_headers benchmarks/gpu/micro/swiglu_cast_variants.cu \
//     -o /tmp/swiglu && /tmp/swiglu
#include "fp8.cuh"
#include "math.cuh"
#include "reduce.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

#include "check_cuda.cuh"


constexpr int kRows = 8192, kCols = 14336; // output columns (half of fc1)

/// silu with the fast divide (__fdividef) instead of the IEEE one.
__device__ __forceinline__ float fast_silu(float x) {
  return x * __fdividef(1.f, 1.f + __expf(-x));
}

// kVec elements per access, kUnroll accesses in flight per thread; kFast:
// fast_silu.
template <int kVec, int kUnroll, bool kFast>
__global__ void __launch_bounds__(256)
    swiglu(const tj_bf16 *__restrict__ in, const float *__restrict__ scale,
           tj_e4m3 *__restrict__ out, float *__restrict__ amax) {
  const float s = scale[0];
  float amax0 = 0.f;
  int rows[kUnroll], cols[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int v = (blockIdx.x * kUnroll + u) * blockDim.x + threadIdx.x;
    rows[u] = v / (kCols / kVec);
    cols[u] = v % (kCols / kVec) * kVec;
  }
  float hi[kUnroll][kVec], lo[kUnroll][kVec];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    tj_load(hi[u], in + rows[u] * (2 * kCols) + cols[u] + kCols);
    tj_load(lo[u], in + rows[u] * (2 * kCols) + cols[u]);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    float o[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float t = (kFast ? fast_silu(lo[u][i]) : tj_silu(lo[u][i])) *
                      hi[u][i];
      amax0 = fmaxf(amax0, fabsf(t));
      o[i] = t * s;
    }
    tj_store(out + rows[u] * kCols + cols[u], o);
  }
  const float block = tj_block_max(amax0);
  if (threadIdx.x == 0)
    tj_atomic_amax(amax, block);
}

template <int kVec, int kUnroll, bool kFast>
float run(const tj_bf16 *in, const float *scale, tj_e4m3 *out, float *amax,
          cudaEvent_t a, cudaEvent_t b) {
  const long long threads = (long long)kRows * kCols / kVec;
  const int blocks = int(threads / (256 * kUnroll));
  for (int i = 0; i < 5; ++i)
    swiglu<kVec, kUnroll, kFast><<<blocks, 256>>>(in, scale, out, amax);
  CHECK(cudaEventRecord(a));
  constexpr int kIters = 50;
  for (int i = 0; i < kIters; ++i)
    swiglu<kVec, kUnroll, kFast><<<blocks, 256>>>(in, scale, out, amax);
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms * 1e3f / kIters;
}

int main() {
  const size_t inElems = size_t(kRows) * 2 * kCols, outElems =
                                                        size_t(kRows) * kCols;
  std::vector<uint16_t> host(inElems);
  uint32_t state = 12345;
  for (auto &h : host) { // bf16 of a uniform value in (-4, 4)
    state = state * 1664525u + 1013904223u;
    float f = (state >> 8) * (8.f / 16777216.f) - 4.f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    h = uint16_t(bits >> 16);
  }
  tj_bf16 *in;
  tj_e4m3 *out, *ref;
  float *scale, *amax;
  CHECK(cudaMalloc(&in, inElems * 2));
  CHECK(cudaMalloc(&out, outElems));
  CHECK(cudaMalloc(&ref, outElems));
  CHECK(cudaMalloc(&scale, 4));
  CHECK(cudaMalloc(&amax, 4));
  CHECK(cudaMemcpy(in, host.data(), inElems * 2, cudaMemcpyHostToDevice));
  const float one = 1.f;
  CHECK(cudaMemcpy(scale, &one, 4, cudaMemcpyHostToDevice));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));

  // The copy yardstick: as many bytes read and written as the kernel moves.
  const size_t bytes = inElems * 2 + outElems;
  void *copyDst;
  CHECK(cudaMalloc(&copyDst, bytes / 2));
  for (int i = 0; i < 5; ++i)
    CHECK(cudaMemcpyAsync(copyDst, in, bytes / 2, cudaMemcpyDeviceToDevice));
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < 50; ++i)
    CHECK(cudaMemcpyAsync(copyDst, in, bytes / 2, cudaMemcpyDeviceToDevice));
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float copyMs = 0;
  CHECK(cudaEventElapsedTime(&copyMs, a, b));
  const float copyUs = copyMs * 1e3f / 50;
  std::printf("copy of %.0f MB (read + write): %.1f us, %.0f GB/s\n",
              bytes / 1e6, copyUs, bytes / copyUs / 1e3);

  std::vector<uint8_t> want(outElems), got(outElems);
  float baseline = run<8, 4, false>(in, scale, ref, amax, a, b);
  CHECK(cudaMemcpy(want.data(), ref, outElems, cudaMemcpyDeviceToHost));
  auto report = [&](const char *name, float us, bool exact) {
    CHECK(cudaMemcpy(got.data(), out, outElems, cudaMemcpyDeviceToHost));
    size_t differ = 0, far = 0;
    for (size_t i = 0; i < outElems; ++i) {
      differ += got[i] != want[i];
      far += std::abs(int(got[i]) - int(want[i])) > 1;
    }
    bool ok = exact ? differ == 0 : far == 0;
    std::printf("%-40s %7.1f us  %5.0f GB/s  %3.0f%% of copy  %s "
                "(%zu bytes differ)\n",
                name, us, bytes / us / 1e3, 100.f * copyUs / us,
                ok ? "ok" : "MISMATCH", differ);
  };
  std::printf("%-40s %7.1f us  %5.0f GB/s  %3.0f%% of copy\n",
              "baseline (vec 8, unroll 4, IEEE silu)", baseline,
              bytes / baseline / 1e3, 100.f * copyUs / baseline);
  report("vec 8, unroll 4, fast silu",
         run<8, 4, true>(in, scale, out, amax, a, b), false);
  report("vec 8, unroll 2, IEEE silu",
         run<8, 2, false>(in, scale, out, amax, a, b), true);
  report("vec 8, unroll 1, IEEE silu",
         run<8, 1, false>(in, scale, out, amax, a, b), true);
  report("vec 16, unroll 2, IEEE silu",
         run<16, 2, false>(in, scale, out, amax, a, b), true);
  report("vec 16, unroll 2, fast silu",
         run<16, 2, true>(in, scale, out, amax, a, b), false);
  report("vec 8, unroll 2, fast silu",
         run<8, 2, true>(in, scale, out, amax, a, b), false);
  return 0;
}
