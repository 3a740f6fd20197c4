//===- HostAttention.h - host-side pieces of the attention checks -*- C++
//-*-===//
//
// What tejit-attention-check and tejit-fp8-attention-check both need on the
// host for their float64 references: where element (b, h, s, d) of a [b, h,
// s, d] tensor lies in the problem's layout, and a loop over all cores.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_GPU_HOSTATTENTION_H
#define TEJIT_TESTS_GPU_HOSTATTENTION_H

#include "runtime/Attention.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace tejit::gpucheck {

/// The offset of element (b, h, s, d) of a tensor of `batch` x `heads` x
/// `seq` x `dim` stored sbhd ([s, b, h, d]) or bshd ([b, s, h, d], also
/// thd's padded view).
inline size_t layoutIndex(runtime::AttentionLayout layout, int64_t batch,
                          int64_t heads, int64_t seq, int64_t dim, int64_t b,
                          int64_t h, int64_t s, int64_t d) {
  if (layout == runtime::AttentionLayout::Sbhd)
    return size_t(((s * batch + b) * heads + h) * dim + d);
  return size_t(((b * seq + s) * heads + h) * dim + d);
}

/// Runs body(i) for i in [0, count) on all cores, each thread taking the
/// next index as it finishes one.
template <typename Body> void parallelFor(size_t count, Body body) {
  size_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < std::min(threads, count); ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < count;)
        body(i);
    });
  for (std::thread &thread : pool)
    thread.join();
}

} // namespace tejit::gpucheck

#endif // TEJIT_TESTS_GPU_HOSTATTENTION_H
