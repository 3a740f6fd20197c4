//===- AlibiSlopes.h - TE's vanilla ALiBi slopes ----------------*- C++ -*-===//
//
// ALiBi without the caller's slopes (docs/attention-bias.md): Transformer
// Engine's vanilla slopes. Plain C++ (no MLIR), so that the interpreter and
// the runtime compute the very same f32 values.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECTS_ALIBISLOPES_H
#define TEJIT_DIALECTS_ALIBISLOPES_H

#include <cmath>
#include <cstdint>

namespace tejit::alibi {

/// The vanilla slope of head `head` of `heads`: with n the largest power of
/// 2 <= heads, 2^(-8 (k + 1) / n) for k < n, then 2^(-4 (2 (k - n) + 1) /
/// n); computed in float64, rounded to f32.
inline float vanillaSlope(int64_t head, int64_t heads) {
  int64_t n = 1;
  while (2 * n <= heads)
    n *= 2;
  double exponent = head < n ? -8.0 * double(head + 1) / double(n)
                             : -4.0 * double(2 * (head - n) + 1) / double(n);
  return static_cast<float>(std::exp2(exponent));
}

} // namespace tejit::alibi

#endif // TEJIT_DIALECTS_ALIBISLOPES_H
