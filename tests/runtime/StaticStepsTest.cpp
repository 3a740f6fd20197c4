//===- StaticStepsTest.cpp - which steps an inference program may keep ----===//
//
// findStaticSteps on the inference and training plans te-compile writes for
// the bundled quickstart layer (DelayedScaling, current scaling and
// Float8BlockScaling): in the forward exactly the weight casts are static
// (one quantize per FP8 GEMM weight, under current scaling the weight's
// amax and scale before it, under block scaling a block cast, two in
// training), nothing that reads the activation input is, and every static
// output is an arena value (inference) or, in training, also the weight
// transposes the backward reads (results). Then a hand-made function where a
// static-looking kernel hands scratch to the next step, which must keep it
// out.
//
//===----------------------------------------------------------------------===//
#include "runtime/StaticSteps.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <set>

using namespace tejit::runtime;

namespace {

#ifdef TEJIT_TEST_PLAN_DIR
Plan loadPlan(llvm::StringRef name) {
  llvm::SmallString<256> path(TEJIT_TEST_PLAN_DIR);
  llvm::sys::path::append(path, name, "plan.json");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  EXPECT_TRUE(bool(buffer)) << path.str().str();
  if (!buffer)
    return Plan();
  llvm::Expected<Plan> plan = parsePlan((*buffer)->getBuffer());
  EXPECT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  return plan ? std::move(*plan) : Plan();
}

/// Whether `step` reads value `id` or a view of it.
bool reads(const FunctionPlan &function, const KernelStep &step, int64_t id) {
  for (const KernelArg &arg : step.args) {
    int64_t value = arg.value;
    while (true) {
      if (!arg.output && value == id)
        return true;
      const Storage &storage = function.values[value].storage;
      if (storage.kind != Storage::View)
        break;
      value = storage.index;
    }
  }
  return false;
}

void checkWeightCastsOnly(llvm::StringRef planName,
                          const std::set<std::string> &staticKinds,
                          size_t expectedQuantizes,
                          size_t expectedResults = 0) {
  bool training = expectedResults > 0;
  Plan plan = loadPlan(planName);
  ASSERT_EQ(plan.functions.size(), training ? 2u : 1u);
  const FunctionPlan &function = *plan.forward();
  StaticSteps found = findStaticSteps(function);
  ASSERT_EQ(found.isStatic.size(), function.steps.size());
  int64_t input = function.arguments.at(0).value;
  ASSERT_EQ(function.arguments[0].name, "input");
  size_t quantizes = 0;
  for (auto [index, step] : llvm::enumerate(function.steps)) {
    if (!found.isStatic[index])
      continue;
    const auto *kernel = std::get_if<KernelStep>(&step);
    ASSERT_NE(kernel, nullptr) << "step " << index << " is not a kernel";
    EXPECT_FALSE(reads(function, *kernel, input))
        << kernel->name << " reads the input but is static";
    bool known = false;
    for (const std::string &kind : staticKinds)
      known |= llvm::StringRef(kernel->name).contains(kind);
    EXPECT_TRUE(known) << kernel->name << " is static";
    // Inference casts a weight alone, training with its transpose.
    quantizes += llvm::StringRef(kernel->name).contains("_quantize_") ||
                 llvm::StringRef(kernel->name).contains("_cast_transpose_");
  }
  EXPECT_EQ(quantizes, expectedQuantizes);
  size_t results = 0;
  for (int64_t id : found.outputs) {
    Storage::Kind kind = function.values[id].storage.kind;
    EXPECT_TRUE(kind == Storage::Arena || (training && kind == Storage::Result))
        << id;
    if (kind == Storage::Result) {
      ++results;
      const InterfaceEntry &entry =
          function.results.at(function.values[id].storage.index);
      EXPECT_TRUE(llvm::StringRef(entry.name).starts_with("saved."))
          << entry.name;
    }
  }
  // Training: what the backward reads of the casts (each weight's
  // transpose; under current scaling its scale_inv too).
  EXPECT_EQ(results, expectedResults);
  // Every kernel that reads the input, and every GEMM and attention step,
  // is not static.
  for (auto [index, step] : llvm::enumerate(function.steps)) {
    const auto *kernel = std::get_if<KernelStep>(&step);
    if (!kernel || reads(function, *kernel, input)) {
      EXPECT_FALSE(found.isStatic[index]) << "step " << index;
    }
  }
  // The arguments they read: parameters and FP8 state, never the input.
  EXPECT_FALSE(found.arguments.empty());
  for (size_t argument : found.arguments) {
    const InterfaceEntry &entry = function.arguments.at(argument);
    EXPECT_TRUE(entry.parameter ||
                llvm::StringRef(entry.name).starts_with("fp8_meta."))
        << entry.name;
  }
}

TEST(StaticStepsTest, DelayedScalingInferenceKeepsTheWeightCasts) {
  // QKV, projection, fc1 and fc2 weights.
  checkWeightCastsOnly("quickstart_small_inference", {"_quantize_"}, 4);
}

TEST(StaticStepsTest, CurrentScalingInferenceKeepsAmaxScaleAndCast) {
  checkWeightCastsOnly("quickstart_small_current_inference",
                       {"_quantize_", "_amax_", "_compute_scale_"}, 4);
}

TEST(StaticStepsTest, BlockScalingInferenceKeepsTheWeightCasts) {
  // Each weight's 2-D block cast, scale_inv included.
  checkWeightCastsOnly("quickstart_small_block_inference", {"_block_quantize_"},
                       4);
}

TEST(StaticStepsTest, BlockScalingTrainingForwardKeepsTheWeightCasts) {
  // Each weight cast rowwise and, for dgrad, columnwise from the
  // high-precision weight, in one kernel per weight: the columnwise copies
  // and their scale_inv are saved for the backward.
  checkWeightCastsOnly("quickstart_small_block", {"_block_quantize_"}, 4,
                       /*expectedResults=*/8);
}

TEST(StaticStepsTest, DelayedScalingTrainingForwardKeepsTheWeightCasts) {
  checkWeightCastsOnly("quickstart_small", {"_cast_transpose_"}, 4,
                       /*expectedResults=*/4);
}

TEST(StaticStepsTest, CurrentScalingTrainingForwardKeepsAmaxScaleAndCast) {
  checkWeightCastsOnly("quickstart_small_current",
                       {"_cast_transpose_", "_amax_", "_compute_scale_"}, 4,
                       /*expectedResults=*/8);
}
#endif

/// One function: a kernel that reads only a parameter, writes an arena
/// value and leaves scratch for the next kernel; a kernel over the input.
FunctionPlan scratchHandingFunction(bool nextReadsScratch) {
  FunctionPlan function;
  function.name = "f";
  function.arguments = {{0, "input"}, {1, "weight", /*parameter=*/true}};
  auto value = [](int64_t id, Storage::Kind kind, int64_t index) {
    ValueInfo info;
    info.id = id;
    info.bytes = 64;
    info.storage.kind = kind;
    info.storage.index = index;
    return info;
  };
  function.values = {value(0, Storage::Argument, 0),
                     value(1, Storage::Argument, 1),
                     value(2, Storage::Arena, 0), value(3, Storage::Arena, 64)};
  KernelStep cast;
  cast.name = "f_quantize_0";
  cast.scratchBytes = 16;
  cast.args = {{1, false, false}, {2, true, false}};
  KernelStep next;
  next.name = "f_finalize_0";
  next.scratchBytes = 16;
  next.scratchFromPreviousStep = nextReadsScratch;
  next.args = {{0, false, false}, {2, false, false}, {3, true, false}};
  function.steps = {cast, next};
  return function;
}

TEST(StaticStepsTest, AStepWhoseScratchTheNextReadsIsNotStatic) {
  StaticSteps independent = findStaticSteps(scratchHandingFunction(false));
  EXPECT_EQ(independent.isStatic, (std::vector<bool>{true, false}));
  EXPECT_EQ(independent.outputs, (std::vector<int64_t>{2}));
  EXPECT_EQ(independent.arguments, (std::vector<size_t>{1}));

  StaticSteps handing = findStaticSteps(scratchHandingFunction(true));
  EXPECT_EQ(handing.isStatic, (std::vector<bool>{false, false}));
  EXPECT_TRUE(handing.empty());
}

} // namespace
