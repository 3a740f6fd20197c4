//===- check_cuda.cuh - stop a micro benchmark on a CUDA error ------------===//
//
// The micro benchmarks here are single-file nvcc programs; they share this
// one macro.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_MICRO_CHECK_CUDA_CUH
#define TEJIT_MICRO_CHECK_CUDA_CUH

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

/// Runs `call`; on an error prints where, what and why, and exits.
#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
                   cudaGetErrorString(e_));                                    \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

#endif // TEJIT_MICRO_CHECK_CUDA_CUH
