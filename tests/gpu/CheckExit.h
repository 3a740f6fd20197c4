//===- CheckExit.h - how the GPU check programs stop ------------*- C++ -*-===//
//
// The GPU checks (tejit-grouped-gemm-check, tejit-grouped-kernels-check)
// stop at the first error outside a case (no device, a failed load): they
// print it and exit 1; exitSkipped (77, CTest's and automake's "skipped")
// says there was nothing to run on (no CUDA device).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_GPU_CHECKEXIT_H
#define TEJIT_TESTS_GPU_CHECKEXIT_H

#include "llvm/Support/Error.h"

#include <cstdio>
#include <cstdlib>

namespace tejit::gpucheck {

constexpr int exitSkipped = 77;

[[noreturn]] inline void die(llvm::Error error) {
  std::fprintf(stderr, "fatal: %s\n", llvm::toString(std::move(error)).c_str());
  std::exit(1);
}
template <typename T> T orDie(llvm::Expected<T> value) {
  if (!value)
    die(value.takeError());
  return std::move(*value);
}
inline void check(llvm::Error error) {
  if (error)
    die(std::move(error));
}

} // namespace tejit::gpucheck

#endif // TEJIT_TESTS_GPU_CHECKEXIT_H
