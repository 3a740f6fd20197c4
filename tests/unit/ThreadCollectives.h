//===- ThreadCollectives.h - interpreter ranks in threads -------*- C++ -*-===//
//
// The collectives of a group of interpreter ranks, each running in its own
// thread: shared by the tensor- and context-parallel tests.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_UNIT_THREADCOLLECTIVES_H
#define TEJIT_TESTS_UNIT_THREADCOLLECTIVES_H

#include "compiler/interpreter/Interpreter.h"

#include "gtest/gtest.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace tejit::testing {

using interp::Tensor;

/// The collectives of `ranks` interpreters running in threads: each call
/// waits until every rank has made it, and all get the same result.
class ThreadCollectives final : public interp::Collectives {
public:
  explicit ThreadCollectives(int ranks) : ranks(ranks) {}

  Tensor sum(const Tensor &local) override { return reduce(local, false); }
  Tensor max(const Tensor &local) override { return reduce(local, true); }

  Tensor allGather(const Tensor &local, int64_t rank) override {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t round = generation;
    if (arrived == 0)
      slices.assign(ranks, Tensor());
    slices[rank] = local;
    if (++arrived == ranks) {
      result = Tensor(local.shape, {});
      result.shape[0] *= ranks;
      for (const Tensor &slice : slices) {
        EXPECT_EQ(slice.shape, local.shape);
        result.data.insert(result.data.end(), slice.data.begin(),
                           slice.data.end());
      }
      arrived = 0;
      ++generation;
      changed.notify_all();
    } else {
      changed.wait(lock, [&] { return generation != round; });
    }
    return result;
  }

private:
  Tensor reduce(const Tensor &local, bool takeMax) {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t round = generation;
    if (arrived == 0) {
      accumulated = local;
    } else {
      EXPECT_EQ(accumulated.shape, local.shape);
      for (size_t i = 0; i < local.data.size(); ++i)
        accumulated.data[i] = takeMax
                                  ? std::max(accumulated.data[i], local.data[i])
                                  : accumulated.data[i] + local.data[i];
    }
    if (++arrived == ranks) {
      result = accumulated;
      arrived = 0;
      ++generation;
      changed.notify_all();
    } else {
      changed.wait(lock, [&] { return generation != round; });
    }
    // The next round cannot finish before this rank joins it, so `result`
    // is still this round's.
    return result;
  }

  int ranks;
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  uint64_t generation = 0;
  Tensor accumulated, result;
  std::vector<Tensor> slices;
};

/// Runs `function` as rank `rank` of the group `collectives` (null: one
/// process); the interpreter's result, or an empty vector after a failure.
inline std::vector<Tensor> interpret(mlir::func::FuncOp function,
                                     llvm::ArrayRef<Tensor> args,
                                     interp::Collectives *collectives,
                                     int rank = 0) {
  interp::Options options;
  options.collectives = collectives;
  options.rank = rank;
  mlir::FailureOr<std::vector<Tensor>> results =
      interp::run(function, args, options);
  EXPECT_TRUE(mlir::succeeded(results));
  return mlir::succeeded(results) ? *results : std::vector<Tensor>();
}

/// Runs `run(rank, collectives)` for each of `ranks` ranks, each in its own
/// thread, over one ThreadCollectives.
template <typename Fn> void onRanks(int ranks, Fn run) {
  ThreadCollectives collectives(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] { run(rank, collectives); });
  for (std::thread &thread : threads)
    thread.join();
}

} // namespace tejit::testing

#endif // TEJIT_TESTS_UNIT_THREADCOLLECTIVES_H
