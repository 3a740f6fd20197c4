//===- StaticSteps.h - steps that depend only on parameters and state -----===//
//
// A step is static when everything it reads is a parameter, the FP8 meta
// state, or what earlier static steps wrote: the weight casts (an FP8
// quantize of a weight, and under current scaling the weight's amax and
// scale before it). Its outputs are the same on every run until a
// parameter or the state changes, so an inference program can keep them
// and skip the steps (Executor's static-step cache).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_STATICSTEPS_H
#define TEJIT_RUNTIME_STATICSTEPS_H

#include "runtime/Plan.h"

#include <vector>

namespace tejit::runtime {

struct StaticSteps {
  /// Per step of the function.
  std::vector<bool> isStatic;
  /// The values static steps write (arena values and results, none a
  /// view), in step order: what a cache must keep.
  std::vector<int64_t> outputs;
  /// The arguments static steps read, directly or through views.
  std::vector<size_t> arguments;

  bool empty() const { return outputs.empty(); }
};

/// The static steps of `function`. Only generated kernels qualify, and only
/// those whose outputs are arena values or results (a training forward's
/// weight cast writes the transpose its backward reads as a result) and
/// that hand no scratch to or from a neighbour; FP8 meta state is an
/// argument that a result updates or whose name starts with "fp8_meta.".
StaticSteps findStaticSteps(const FunctionPlan &function);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_STATICSTEPS_H
