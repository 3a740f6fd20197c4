//===- CublasLt.h - cuBLASLt, loaded on first use ---------------*- C++ -*-===//
//
// tejit never links cuBLASLt: every binary starts on a machine without the
// CUDA libraries (CI, the build machines), and the runtime says what is
// missing only when a program first needs a GEMM. cublasLt.h is included for
// its types and enums only; the entry points keep its names and types and
// are resolved with dlsym.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_CUBLASLT_H
#define TEJIT_RUNTIME_CUBLASLT_H

#include "runtime/Errors.h"

#include <cublasLt.h>

#include <string>

namespace tejit::runtime {

struct AlgoConfig;

/// The cuBLASLt entry points we use. Each member is a pointer to the function
/// cublasLt.h declares under that name.
struct CublasLt {
#define TEJIT_CUBLASLT_FUNCTIONS(X)                                            \
  X(cublasLtGetVersion)                                                        \
  X(cublasLtGetStatusName)                                                     \
  X(cublasLtGetStatusString)                                                   \
  X(cublasLtCreate)                                                            \
  X(cublasLtDestroy)                                                           \
  X(cublasLtMatmulDescCreate)                                                  \
  X(cublasLtMatmulDescDestroy)                                                 \
  X(cublasLtMatmulDescSetAttribute)                                            \
  X(cublasLtMatrixLayoutCreate)                                                \
  X(cublasLtMatrixLayoutDestroy)                                               \
  X(cublasLtMatmulPreferenceCreate)                                            \
  X(cublasLtMatmulPreferenceDestroy)                                           \
  X(cublasLtMatmulPreferenceSetAttribute)                                      \
  X(cublasLtMatmulAlgoGetHeuristic)                                            \
  X(cublasLtMatmulAlgoInit)                                                    \
  X(cublasLtMatmulAlgoConfigSetAttribute)                                      \
  X(cublasLtMatmulAlgoConfigGetAttribute)                                      \
  X(cublasLtMatmulAlgoCheck)                                                   \
  X(cublasLtMatmul)
#define TEJIT_DECLARE(fn) decltype(&::fn) fn = nullptr;
  TEJIT_CUBLASLT_FUNCTIONS(TEJIT_DECLARE)
#undef TEJIT_DECLARE

  /// The file the library was loaded from.
  std::string path;
  /// cublasLtGetVersion(): major * 10000 + minor * 100 + patch.
  size_t version = 0;

  /// The loaded library, or why it cannot be used (ErrorCode::Cublas): no
  /// libcublasLt.so.13 or libcublasLt.so the dynamic loader can find, or one
  /// too old or lacking an entry point. Loaded once per process, never
  /// unloaded.
  static llvm::Expected<const CublasLt &> get();

  /// "13.1.0".
  std::string versionString() const;
  /// "CUBLAS_STATUS_NOT_SUPPORTED (status 15: the functionality requested is
  /// not supported)".
  std::string statusText(cublasStatus_t status) const;
  /// `algo`'s configuration attributes.
  llvm::Expected<AlgoConfig> configOf(const cublasLtMatmulAlgo_t &algo) const;
  /// The algorithm `config` describes, for GEMMs of these types (compute
  /// 32F, scale 32F); cublasLtMatmulAlgoCheck says whether a problem can
  /// run it.
  llvm::Expected<cublasLtMatmulAlgo_t>
  algoOf(cublasLtHandle_t handle, const AlgoConfig &config, cudaDataType_t a,
         cudaDataType_t b, cudaDataType_t c, cudaDataType_t d) const;
  /// An ErrorCode::Cublas error: "<what>: <statusText>".
  llvm::Error error(cublasStatus_t status, const llvm::Twine &what) const;
  /// Success, or error(status, what).
  llvm::Error check(cublasStatus_t status, const llvm::Twine &what) const {
    if (status == CUBLAS_STATUS_SUCCESS)
      return llvm::Error::success();
    return error(status, what);
  }
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_CUBLASLT_H
