//===- StaticSteps.cpp - steps that depend only on parameters and state ---===//
#include "runtime/StaticSteps.h"

#include "llvm/ADT/StringRef.h"

#include <set>

using namespace tejit::runtime;

StaticSteps tejit::runtime::findStaticSteps(const FunctionPlan &function) {
  StaticSteps result;
  result.isStatic.assign(function.steps.size(), false);
  // Values known to be static, by base value id.
  std::vector<bool> isStaticValue(function.values.size(), false);
  std::set<size_t> stateArguments;
  for (const InterfaceEntry &entry : function.results)
    if (entry.updatesArg)
      stateArguments.insert(*entry.updatesArg);
  for (auto [index, entry] : llvm::enumerate(function.arguments))
    if (entry.parameter || stateArguments.count(index) ||
        llvm::StringRef(entry.name).starts_with("fp8_meta."))
      isStaticValue[entry.value] = true;

  std::set<size_t> argumentsRead;
  for (auto [index, step] : llvm::enumerate(function.steps)) {
    const auto *kernel = std::get_if<KernelStep>(&step);
    if (!kernel || kernel->scratchFromPreviousStep)
      continue;
    // The next step must not read the scratch this one leaves.
    if (index + 1 < function.steps.size())
      if (const auto *next =
              std::get_if<KernelStep>(&function.steps[index + 1]);
          next && next->scratchFromPreviousStep)
        continue;
    bool readsOnlyStatic = true, writesOwnValues = true, writesAny = false;
    for (const KernelArg &arg : kernel->args) {
      int64_t base = function.viewBase(arg.value).first;
      if (arg.output) {
        writesAny = true;
        Storage::Kind kind = function.values[arg.value].storage.kind;
        writesOwnValues &= kind == Storage::Arena || kind == Storage::Result;
      } else {
        readsOnlyStatic &= isStaticValue[base];
      }
    }
    if (!readsOnlyStatic || !writesOwnValues || !writesAny)
      continue;
    result.isStatic[index] = true;
    for (const KernelArg &arg : kernel->args) {
      if (arg.output) {
        isStaticValue[arg.value] = true;
        result.outputs.push_back(arg.value);
        continue;
      }
      int64_t base = function.viewBase(arg.value).first;
      if (function.values[base].storage.kind == Storage::Argument)
        argumentsRead.insert(function.values[base].storage.index);
    }
  }
  result.arguments.assign(argumentsRead.begin(), argumentsRead.end());
  return result;
}
