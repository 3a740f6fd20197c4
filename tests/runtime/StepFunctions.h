//===- StepFunctions.h - plan functions for the step tests ------*- C++ -*-===//
//
// The attention launcher tests (AttentionTest.cpp, Fp8AttentionTest.cpp)
// read steps over a FunctionPlan whose values they list by type alone.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_RUNTIME_STEPFUNCTIONS_H
#define TEJIT_TESTS_RUNTIME_STEPFUNCTIONS_H

#include "runtime/Plan.h"

#include "llvm/ADT/STLExtras.h"

#include <vector>

namespace tejit::runtime::steptest {

/// A function named "layer" whose value i has types[i].
inline FunctionPlan functionWith(const std::vector<TensorType> &types) {
  FunctionPlan function;
  function.name = "layer";
  for (auto [id, type] : llvm::enumerate(types)) {
    ValueInfo value;
    value.id = int64_t(id);
    value.type = type;
    value.bytes = type.bytes();
    function.values.push_back(value);
  }
  return function;
}

inline TensorType tensorOf(std::vector<int64_t> shape, ElementType element) {
  TensorType type;
  type.shape = std::move(shape);
  type.element = element;
  return type;
}

} // namespace tejit::runtime::steptest

#endif // TEJIT_TESTS_RUNTIME_STEPFUNCTIONS_H
