//===- ReversedGroups.h - per-group buffers in reverse order ----*- C++ -*-===//
//
// The grouped GEMM tests (GroupedGemmRunTest on the host, tejit-grouped-
// gemm-check on the GPU) lay G matrices of a stacked [G, M, N] buffer out in
// reverse group order, as Megatron-Core's gradient buffer holds a
// GroupedLinear's main_grads, to check per-group output pointers.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_RUNTIME_REVERSEDGROUPS_H
#define TEJIT_TESTS_RUNTIME_REVERSEDGROUPS_H

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tejit::testing {

/// Swaps group i's `groupBytes` with group G - 1 - i's in `bytes` (G
/// groups): its own inverse.
inline void reverseGroups(uint8_t *bytes, int64_t groups, size_t groupBytes) {
  for (int64_t i = 0; i < groups / 2; ++i)
    std::swap_ranges(bytes + size_t(i) * groupBytes,
                     bytes + size_t(i + 1) * groupBytes,
                     bytes + size_t(groups - 1 - i) * groupBytes);
}

} // namespace tejit::testing

#endif // TEJIT_TESTS_RUNTIME_REVERSEDGROUPS_H
