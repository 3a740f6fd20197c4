//===- block_gemm_layout_check.cpp - cuBLASLt's block-scale layout
//---------===//
//
// Checks, on a Hopper GPU, that cuBLASLt's VEC128_32F and BLK128x128_32F
// scale modes read scale inverses where dialects/BlockScaleLayout.h puts
// them: random FP8 operands and random power-of-two block scales (2^-4 ..
// 2^4, so a misplaced scale moves a product by up to 2^8), against a float64
// product on the host, for 1-D x 2-D, 1-D x 1-D and 2-D x 1-D operands and
// shapes with partial edge blocks. A layout error shows as a relative L2
// error near 1; a correct one leaves the FP8 tensor cores' accumulation
// error (about 2e-4 on an H200).
//
// Built by tools/scripts/pack-gpu.sh into .gpu/bin/tejit-block-gemm-check;
// run on the GPU machine after `source tools/scripts/gpu-env.sh`.
//
//===----------------------------------------------------------------------===//
#include "dialects/BlockScaleLayout.h"
#include <cmath>
#include <cstdio>
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <random>
#include <vector>
using namespace tejit::blockscale;
#define CK(x)                                                                  \
  do {                                                                         \
    auto s = (x);                                                              \
    if (s != 0) {                                                              \
      printf("%s failed: %d line %d\n", #x, (int)s, __LINE__);                 \
      return 1;                                                                \
    }                                                                          \
  } while (0)

static float e4m3ToFloat(uint8_t v) {
  __nv_fp8_e4m3 x;
  x.__x = v;
  return float(x);
}

int run(cublasLtHandle_t h, int M, int N, int K, int aDim, int bDim) {
  std::mt19937 rng(M * 7 + N * 3 + K + aDim * 11 + bDim);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> ex(-4, 4);
  std::vector<uint8_t> a(size_t(M) * K), b(size_t(N) * K);
  for (auto &v : a) {
    do
      v = byte(rng);
    while ((v & 0x7f) == 0x7f);
  }
  for (auto &v : b) {
    do
      v = byte(rng);
    while ((v & 0x7f) == 0x7f);
  }
  auto sa = scaleShape(M, K, aDim), sb = scaleShape(N, K, bDim);
  std::vector<float> as(sa[0] * sa[1], 0.f), bs(sb[0] * sb[1], 0.f);
  // Fill every used scale with a random power of two.
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < K; c += 128)
      as[scaleIndex(M, K, aDim, r, c)] = std::ldexp(1.f, ex(rng));
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < K; c += 128)
      bs[scaleIndex(N, K, bDim, r, c)] = std::ldexp(1.f, ex(rng));
  std::vector<double> ref(size_t(M) * N, 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(e4m3ToFloat(a[size_t(m) * K + k])) *
             as[scaleIndex(M, K, aDim, m, k)] *
             double(e4m3ToFloat(b[size_t(n) * K + k])) *
             bs[scaleIndex(N, K, bDim, n, k)];
      ref[size_t(m) * N + n] = s;
    }
  void *da, *db, *dsa, *dsb, *dd, *ws;
  size_t wsSize = 32 << 20;
  CK(cudaMalloc(&da, a.size()));
  CK(cudaMalloc(&db, b.size()));
  CK(cudaMalloc(&dsa, as.size() * 4));
  CK(cudaMalloc(&dsb, bs.size() * 4));
  CK(cudaMalloc(&dd, size_t(M) * N * 4));
  CK(cudaMalloc(&ws, wsSize));
  CK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsa, as.data(), as.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dsb, bs.data(), bs.size() * 4, cudaMemcpyHostToDevice));
  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t T = CUBLAS_OP_T, Nn = CUBLAS_OP_N;
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T,
                                    sizeof(T)));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &Nn,
                                    sizeof(Nn)));
  // cuBLAS A = our b (N x K), cuBLAS B = our a.
  int32_t modeA = bDim == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                            : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  int32_t modeB = aDim == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                            : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                    &modeA, sizeof(modeA)));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                    &modeB, sizeof(modeB)));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                    &dsb, sizeof(dsb)));
  CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                    &dsa, sizeof(dsa)));
  cublasLtMatrixLayout_t la, lb, ld;
  CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, N, K));
  CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, M, K));
  CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, N, M, N));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  CK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsSize, sizeof(wsSize)));
  cublasLtMatmulHeuristicResult_t heur;
  int got = 0;
  auto st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1,
                                           &heur, &got);
  if (st != 0 || got == 0) {
    printf("M=%d N=%d K=%d a=%dD b=%dD: NO ALGO (status %d)\n", M, N, K, aDim,
           bDim, (int)st);
    return 0;
  }
  float alpha = 1, beta = 0;
  CK(cublasLtMatmul(h, desc, &alpha, db, la, da, lb, &beta, dd, ld, dd, ld,
                    &heur.algo, ws, wsSize, 0));
  CK(cudaDeviceSynchronize());
  std::vector<float> out(size_t(M) * N);
  CK(cudaMemcpy(out.data(), dd, out.size() * 4, cudaMemcpyDeviceToHost));
  double err = 0, norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    err += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  double rel = std::sqrt(err / norm);
  bool pass = rel < 1e-3;
  printf("%s M=%d N=%d K=%d a=%dD b=%dD: rel L2 error %.3g\n",
         pass ? "PASS" : "FAIL", M, N, K, aDim, bDim, rel);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dsa);
  cudaFree(dsb);
  cudaFree(dd);
  cudaFree(ws);
  return pass ? 0 : 1;
}

int main() {
  // Exits 1 when a product is off by more than accumulation error.
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  int failures = 0;
  int shapes[][3] = {{256, 384, 512},
                     {264, 392, 400},
                     {128, 256, 128},
                     {64, 128, 256},
                     {16, 48, 32}};
  for (auto &s : shapes)
    for (auto [ad, bd] : {std::pair{1, 2}, {1, 1}, {2, 1}})
      failures += run(h, s[0], s[1], s[2], ad, bd) != 0;
  return failures ? 1 : 0;
}
