//===- GemmLanes.h - side streams for a grouped GEMM's groups ---*- C++ -*-===//
//
// A grouped GEMM of small groups (fine-grained experts: a few hundred
// tokens each) leaves most of the GPU idle when its per-group GEMMs run one
// after another: each fills a few dozen of the SMs. Lanes are side streams,
// each with a GEMM runner and a workspace of its own (a runner's workspace
// serves one GEMM at a time), that run groups concurrently: the caller's
// stream forks into them (an event each waits for) and joins them again
// (it waits for an event of each). Under CUDA-graph capture the fork and
// join make parallel branches of the graph. The executor uses them only
// there: eagerly, small groups wait for the host (about 7-14 us of
// cublasLtMatmul each), and the fork and join only add to that. On an
// H200, 32 FP8 GEMMs of 256 x 1408 x 2048 replayed from a graph took
// 0.177 ms one after another and 0.111 ms on four lanes (1.6x;
// tejit-grouped-gemm-check); eagerly 0.223 and 0.255 ms.
//
// One set per CUDA context, shared by every program (as Transformer
// Engine shares its side streams): a lane's work is ordered on its stream
// whoever enqueued it, and `mutex` keeps one caller's fork, GEMMs and join
// together when several host threads use them.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_GEMMLANES_H
#define TEJIT_RUNTIME_GEMMLANES_H

#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Gemm.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <mutex>
#include <vector>

namespace tejit::runtime {

class GemmLanes {
public:
  /// `count` lanes with `workspaceBytes` of cuBLASLt workspace each, in the
  /// current context.
  static llvm::Expected<std::unique_ptr<GemmLanes>>
  create(size_t count, size_t workspaceBytes);
  /// The current context's lanes (configuredCount() of them, made on first
  /// use and kept until the process ends), or null when none are
  /// configured.
  static llvm::Expected<GemmLanes *> shared();
  /// The cuBLASLt workspace of each shared lane.
  static constexpr size_t kWorkspaceBytes = size_t(16) << 20;

  /// Held from fork to join.
  std::mutex mutex;
  ~GemmLanes();
  GemmLanes(const GemmLanes &) = delete;
  GemmLanes &operator=(const GemmLanes &) = delete;

  size_t size() const { return lanes.size(); }
  GemmRunner &runner(size_t lane) { return *lanes[lane].runner; }
  CUstream stream(size_t lane) const { return lanes[lane].stream; }

  /// Every lane waits for what `stream` has enqueued so far.
  llvm::Error fork(CUstream stream);
  /// `stream` waits for everything the lanes have enqueued.
  llvm::Error join(CUstream stream);

  /// The lanes a grouped GEMM uses from the environment,
  /// TEJIT_GROUPED_GEMM_STREAMS=N (default 4, at most 16; 0 or 1: none,
  /// the groups run on the caller's stream).
  static size_t configuredCount();

private:
  explicit GemmLanes(const CudaDriver &driver) : driver(driver) {}

  struct Lane {
    CUstream stream = nullptr;
    CUevent done = nullptr;
    DeviceBuffer workspace;
    std::unique_ptr<GemmRunner> runner;
  };
  const CudaDriver &driver;
  CUevent forked = nullptr;
  std::vector<Lane> lanes;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_GEMMLANES_H
