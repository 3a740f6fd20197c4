//===- GemmTuning.h - measured cuBLASLt algorithms per GEMM -----*- C++ -*-===//
//
// cuBLASLt's heuristic ranks algorithms for a GPU running at its top clocks.
// Hopper boards at their power limit run long GEMM sequences slower, and
// there another algorithm can be faster: on an H100 at 700 W, a 176x128
// tile beat the heuristic's 192x192 by 5-8% on the forward GEMMs of a
// 4096-wide layer (benchmarks/RESULTS.md, session 11). A tuning file records
// such measurements; the GEMM runner (Gemm.cpp) uses the recorded algorithm
// for a matching FP8 GEMM instead of the heuristic's first.
//
// The file (JSON; tejit-gemm-algos --write-tuning writes it):
//
//   {"format": "tejit-gemm-tuning", "version": 1,
//    "device": "NVIDIA H100 80GB HBM3", "cublaslt": "13.1.0",
//    "gemms": [{"m": 8192, "n": 16384, "k": 4096,
//               "a": "f8E4M3FN", "b": "f8E4M3FN", "fast_accum": true,
//               "algo": {"id": 66, "tile": 201, "stages": 36,
//                        "split_k": 1, "reduction": 0, "swizzle": 0,
//                        "custom": 2, "cluster": 5, "inner": 0},
//               "heuristic_ms": 0.853, "tuned_ms": 0.786}]}
//
// m, n, k, a and b are the plan's row-major view of an FP8 "TN" GEMM
// (out[m, n] = a[m, k] * b[n, k]^T); the algorithm fields are cuBLASLt's
// algorithm configuration attributes (cublasLt.h's enum values). An entry
// of a Float8BlockScaling GEMM adds "a_scaling" and "b_scaling" ("block_1d"
// or "block_2d", as in the plan); without them it is a GEMM with one scale
// per operand ("tensor"), and it only applies to such GEMMs: block-scaled
// kernels are others. Entries apply only on the device and cuBLASLt version
// they were measured with.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_GEMMTUNING_H
#define TEJIT_RUNTIME_GEMMTUNING_H

#include "runtime/Plan.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace tejit::runtime {

/// A cuBLASLt algorithm, as its configuration attributes describe it
/// (cublasLtMatmulAlgoConfigAttributes_t).
struct AlgoConfig {
  int64_t id = 0, tile = 0, stages = 0, splitK = 1, reduction = 0, swizzle = 0,
          custom = 0, cluster = 0, inner = 0;

  auto tie() const {
    return std::tie(id, tile, stages, splitK, reduction, swizzle, custom,
                    cluster, inner);
  }
  bool operator==(const AlgoConfig &other) const {
    return tie() == other.tie();
  }
  /// "algo 66 tile 201 stages 36 split_k 1 reduction 0 swizzle 0 custom 2
  /// cluster 5 inner 0".
  std::string describe() const;
};

/// One measured GEMM: its shape and operand types, and the algorithm to run.
struct TunedGemm {
  int64_t m = 0, n = 0, k = 0;
  ElementType a = ElementType::F8E4M3, b = ElementType::F8E4M3;
  bool fastAccum = false;
  /// How a and b are scaled ("a_scaling", "b_scaling"; Tensor when absent).
  GemmScaling aScaling = GemmScaling::Tensor, bScaling = GemmScaling::Tensor;
  AlgoConfig algo;
  /// What the measurement found (ms per GEMM), for people reading the file.
  double heuristicMs = 0, tunedMs = 0;
};

struct GemmTuning {
  /// The device name (as the driver reports it) and cuBLASLt version
  /// ("13.1.0") the entries were measured with.
  std::string device, cublasLt;
  std::vector<TunedGemm> gemms;

  /// Parses a tuning file's text; errors name `source` and the field.
  static llvm::Expected<GemmTuning> parse(llvm::StringRef text,
                                          llvm::StringRef source);
  static llvm::Expected<GemmTuning> load(llvm::StringRef path);
  /// Writes the file parse() reads.
  void write(llvm::raw_ostream &os) const;

  /// The entry for an FP8 GEMM of this shape, these types and scalings,
  /// if any.
  const TunedGemm *find(int64_t m, int64_t n, int64_t k, ElementType a,
                        ElementType b, bool fastAccum,
                        GemmScaling aScaling = GemmScaling::Tensor,
                        GemmScaling bScaling = GemmScaling::Tensor) const;
  /// Why the entries do not apply to `deviceName` with cuBLASLt
  /// `cublasLtVersion`, or "" when they do.
  std::string mismatch(llvm::StringRef deviceName,
                       llvm::StringRef cublasLtVersion) const;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_GEMMTUNING_H
