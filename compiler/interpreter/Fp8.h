//===- Fp8.h - bit-exact emulation of FP8 conversions -----------*- C++ -*-===//
//
// What a cast to FP8 does to a value, in double: Transformer Engine's
// saturating conversion (CUDA's __NV_SATFINITE), as shared/FP8.md describes.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_INTERPRETER_FP8_H
#define TEJIT_COMPILER_INTERPRETER_FP8_H

namespace tejit::interp {

/// The two FP8 formats: E4M3 (`f8E4M3FN`, no infinities) and E5M2.
enum class Fp8Kind { E4M3, E5M2 };

/// The largest finite value of `kind`: 448 (E4M3) or 57344 (E5M2).
double fp8MaxFinite(Fp8Kind kind);

/// Rounds `x` to the nearest value representable in `kind`, ties to even
/// (subnormals included), then saturates to +-fp8MaxFinite(kind); infinities
/// saturate too, NaN stays NaN and the sign of zero is kept.
double roundToFp8(double x, Fp8Kind kind);

} // namespace tejit::interp

#endif // TEJIT_COMPILER_INTERPRETER_FP8_H
