//===- PlanJson.h - hand-written plans for the plan tests -------*- C++ -*-===//
//
// The plan tests (PlanTest.cpp, GroupedGemmTest.cpp) start from a plan
// written out as JSON, reach into it with the accessors below, and break
// one of its fields per ErrorCase: the parser must refuse the plan with an
// error that holds every expected part (where it is and which field).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_RUNTIME_PLANJSON_H
#define TEJIT_TESTS_RUNTIME_PLANJSON_H

#include "runtime/Plan.h"

#include "llvm/Support/JSON.h"
#include "gtest/gtest.h"

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace tejit::runtime::plantest {

/// `text` parsed as JSON; a test failure naming `what` if it is not JSON.
inline llvm::json::Value parseJson(llvm::StringRef text, llvm::StringRef what) {
  llvm::Expected<llvm::json::Value> plan = llvm::json::parse(text);
  if (!plan) {
    ADD_FAILURE() << what.str()
                  << " is not JSON: " << llvm::toString(plan.takeError());
    return llvm::json::Object{};
  }
  return std::move(*plan);
}

inline llvm::json::Object &root(llvm::json::Value &plan) {
  return *plan.getAsObject();
}
inline llvm::json::Object &function(llvm::json::Value &plan, size_t index) {
  return *(*root(plan).getArray("functions"))[index].getAsObject();
}
/// Element `index` of function `fn`'s list `list` ("values", "steps", ...).
inline llvm::json::Object &entry(llvm::json::Value &plan, size_t fn,
                                 llvm::StringRef list, size_t index) {
  return *(*function(plan, fn).getArray(list))[index].getAsObject();
}
inline llvm::json::Object &step(llvm::json::Value &plan, size_t fn,
                                size_t index) {
  return entry(plan, fn, "steps", index);
}

/// One broken plan: `change` breaks the base plan, and the parser's error
/// must contain each of `expected`.
struct ErrorCase {
  std::string name;
  std::function<void(llvm::json::Value &)> change;
  /// Substrings of the error: where it is and which field.
  std::vector<std::string> expected;
};

inline void PrintTo(const ErrorCase &errorCase, std::ostream *os) {
  *os << errorCase.name;
}

inline std::string
errorCaseName(const ::testing::TestParamInfo<ErrorCase> &info) {
  return info.param.name;
}

/// Applies `errorCase` to `document` and expects the parser to refuse it
/// with every expected part in its message.
inline void expectRefused(llvm::json::Value document,
                          const ErrorCase &errorCase) {
  errorCase.change(document);
  llvm::Expected<Plan> plan = parsePlan(document);
  ASSERT_FALSE(bool(plan)) << "the broken plan parsed";
  std::string message = llvm::toString(plan.takeError());
  for (const std::string &part : errorCase.expected)
    EXPECT_NE(message.find(part), std::string::npos)
        << "expected \"" << part << "\" in: " << message;
}

} // namespace tejit::runtime::plantest

#endif // TEJIT_TESTS_RUNTIME_PLANJSON_H
