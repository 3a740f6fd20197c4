//===- TensorParallelGroupTest.cpp - the tensor-parallel group's checks ---===//
//
// What needs no GPU: the check a run makes before it enqueues anything
// (GroupNeeds: a group of the steps' size is set, and a group of the
// caller's functions has the one each kind of step needs, for tensor and
// context parallelism), and that a group of functions hands the
// steps' buffers, counts and dtypes to the caller's functions as tejit.h
// says. The collectives themselves run in tests/gpu/tp_group_check.py.
//
//===----------------------------------------------------------------------===//
#include "runtime/TensorParallel.h"

#include "gtest/gtest.h"

#include <tuple>
#include <vector>

using namespace tejit::runtime;

namespace {

/// A function with `steps` (tensor-parallel steps over `ranks`, values 0
/// and 1), as a plan built in memory.
FunctionPlan functionWith(std::vector<Step> steps) {
  FunctionPlan function;
  function.name = "layer";
  function.steps = std::move(steps);
  return function;
}

template <typename StepType> Step tpStep(int64_t ranks = 2) {
  StepType step;
  step.in = 0;
  step.out = 1;
  step.ranks = ranks;
  return step;
}

/// The code and message of `error` (success: ErrorCode(0), "").
std::pair<ErrorCode, std::string> describe(llvm::Error error) {
  if (!error)
    return {ErrorCode(0), ""};
  std::string message;
  ErrorCode code = takeError(std::move(error), message);
  return {code, message};
}

Step cpStep(TpCollective collective, int64_t ranks = 2) {
  CpCollectiveStep step;
  step.in = 0;
  step.out = 1;
  step.ranks = ranks;
  step.gather = collective == TpCollective::AllGather;
  step.allToAll = collective == TpCollective::AllToAll;
  return step;
}

GroupNeeds needsOf(std::vector<Step> steps,
                   const Parallelism &parallelism = Parallelism::Tensor) {
  llvm::Expected<GroupNeeds> needs =
      GroupNeeds::of(functionWith(std::move(steps)), parallelism);
  if (!needs) {
    ADD_FAILURE() << llvm::toString(needs.takeError());
    return {};
  }
  return *needs;
}

/// Records what the functions of a group were given.
struct Call {
  TpCollective collective;
  const void *input;
  void *output;
  size_t count;
  int dtype;
  void *stream;
};

struct Recorder {
  std::vector<Call> calls;
  int status = 0;
};

int allReduce(void *userData, void *data, size_t count, int dtype,
              void *stream) {
  auto *recorder = static_cast<Recorder *>(userData);
  recorder->calls.push_back(
      {TpCollective::AllReduce, data, data, count, dtype, stream});
  return recorder->status;
}

int allGather(void *userData, const void *input, void *output, size_t count,
              int dtype, void *stream) {
  auto *recorder = static_cast<Recorder *>(userData);
  recorder->calls.push_back(
      {TpCollective::AllGather, input, output, count, dtype, stream});
  return recorder->status;
}

int reduceScatter(void *userData, const void *input, void *output, size_t count,
                  int dtype, void *stream) {
  auto *recorder = static_cast<Recorder *>(userData);
  recorder->calls.push_back(
      {TpCollective::ReduceScatter, input, output, count, dtype, stream});
  return recorder->status;
}

TEST(TensorParallelGroupTest, NeedsListTheCollectivesOfTheSteps) {
  GroupNeeds none = needsOf({AmaxAllReduceStep{}});
  EXPECT_EQ(none.ranks, 0);
  EXPECT_EQ(none.uses, (std::array<bool, kNumTpCollectives>{}));

  GroupNeeds sums = needsOf({tpStep<TpAllReduceStep>()});
  EXPECT_EQ(sums.ranks, 2);
  EXPECT_EQ(sums.uses,
            (std::array<bool, kNumTpCollectives>{true, false, false}));

  GroupNeeds sequence =
      needsOf({tpStep<TpAllGatherStep>(4), KernelStep{},
               tpStep<TpReduceScatterStep>(4), tpStep<TpAllGatherStep>(4)});
  EXPECT_EQ(sequence.ranks, 4);
  EXPECT_EQ(sequence.uses,
            (std::array<bool, kNumTpCollectives>{false, true, true}));
}

TEST(TensorParallelGroupTest, StepsOverOtherRanksAreRefused) {
  llvm::Expected<GroupNeeds> needs =
      GroupNeeds::of(functionWith({tpStep<TpAllReduceStep>(2),
                                   tpStep<TpReduceScatterStep>(4)}),
                     Parallelism::Tensor);
  ASSERT_FALSE(bool(needs));
  auto [code, message] = describe(needs.takeError());
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
  EXPECT_EQ(message, "function 'layer', step 1: a tp_reducescatter over 4 "
                     "ranks after a tensor-parallel step over 2");
}

TEST(TensorParallelGroupTest, AFunctionWithoutStepsNeedsNoGroup) {
  GroupNeeds none = needsOf({KernelStep{}});
  EXPECT_EQ(describe(none.check("layer", nullptr, Parallelism::Tensor)).first,
            ErrorCode(0));
}

int allToAll(void *userData, const void *input, void *output, size_t count,
             int dtype, void *stream) {
  auto *recorder = static_cast<Recorder *>(userData);
  recorder->calls.push_back(
      {TpCollective::AllToAll, input, output, count, dtype, stream});
  return recorder->status;
}

TEST(TensorParallelGroupTest, RunWithoutAGroupNamesTheSetter) {
  for (Step step : {tpStep<TpAllReduceStep>(), tpStep<TpAllGatherStep>(),
                    tpStep<TpReduceScatterStep>()}) {
    auto [code, message] =
        describe(needsOf({step}).check("layer", nullptr, Parallelism::Tensor));
    EXPECT_EQ(code, ErrorCode::State);
    EXPECT_EQ(message, "function 'layer': this program is compiled for tensor "
                       "parallelism over 2 ranks (tp_size 2); give it a "
                       "tensor-parallel group (tejit_program_set_tp_group)");
  }
}

TEST(TensorParallelGroupTest, MissingFunctionIsNamed) {
  Recorder recorder;
  CallbackTensorParallelGroup sumsOnly({allReduce, nullptr, nullptr},
                                       &recorder);
  CallbackTensorParallelGroup gathersOnly({nullptr, allGather, nullptr},
                                          &recorder);
  CallbackTensorParallelGroup all({allReduce, allGather, reduceScatter},
                                  &recorder);

  GroupNeeds sequence =
      needsOf({tpStep<TpAllGatherStep>(), tpStep<TpReduceScatterStep>()});
  auto [code, message] =
      describe(sequence.check("layer", &sumsOnly, Parallelism::Tensor));
  EXPECT_EQ(code, ErrorCode::State);
  EXPECT_EQ(message, "function 'layer' has tp_allgather steps (sequence "
                     "parallelism), but its tensor-parallel group (the "
                     "caller's function) has no all_gather function: give "
                     "one to tejit_tp_group_from_functions (in Python, "
                     "TensorParallelGroup.from_function's all_gather)");
  std::tie(code, message) =
      describe(sequence.check("layer", &gathersOnly, Parallelism::Tensor));
  EXPECT_EQ(code, ErrorCode::State);
  EXPECT_NE(message.find("has tp_reducescatter steps (sequence "
                         "parallelism), but its tensor-parallel group (the "
                         "caller's function) has no reduce_scatter function"),
            std::string::npos)
      << message;
  EXPECT_EQ(describe(sequence.check("layer", &all, Parallelism::Tensor)).first,
            ErrorCode(0));

  GroupNeeds sums = needsOf({tpStep<TpAllReduceStep>()});
  std::tie(code, message) =
      describe(sums.check("layer", &gathersOnly, Parallelism::Tensor));
  EXPECT_EQ(code, ErrorCode::State);
  EXPECT_NE(message.find("function 'layer' has tp_allreduce steps, but its "
                         "tensor-parallel group (the caller's function) has "
                         "no all_reduce function"),
            std::string::npos)
      << message;
  EXPECT_EQ(describe(sums.check("layer", &sumsOnly, Parallelism::Tensor)).first,
            ErrorCode(0));
  // Nothing was called by the checks.
  EXPECT_TRUE(recorder.calls.empty());

  EXPECT_TRUE(all.has(TpCollective::AllReduce));
  EXPECT_FALSE(sumsOnly.has(TpCollective::AllGather));
  EXPECT_FALSE(sumsOnly.has(TpCollective::ReduceScatter));
  EXPECT_FALSE(gathersOnly.has(TpCollective::AllReduce));
  EXPECT_TRUE(gathersOnly.has(TpCollective::AllGather));
  EXPECT_EQ(tpFunctionName(TpCollective::AllReduce), "all_reduce");
  EXPECT_EQ(tpFunctionName(TpCollective::AllGather), "all_gather");
  EXPECT_EQ(tpFunctionName(TpCollective::ReduceScatter), "reduce_scatter");
}

TEST(TensorParallelGroupTest, FunctionsGetTheBuffersCountsAndDtypes) {
  Recorder recorder;
  CallbackTensorParallelGroup group({allReduce, allGather, reduceScatter},
                                    &recorder);
  auto stream = reinterpret_cast<CUstream>(0x5000);
  CUdeviceptr in = 0x1000, out = 0x2000;
  // Counts are per rank, as the executor passes them: the gather's input,
  // the scatter's output.
  EXPECT_FALSE(bool(group.allGather(in, out, 16, ElementType::BF16, stream)));
  EXPECT_FALSE(bool(group.reduceScatter(in, out, 8, ElementType::F32, stream)));
  // In place: no copy before the call (which would need a GPU).
  EXPECT_FALSE(
      bool(group.allReduceSum(out, out, 32, ElementType::F16, stream)));
  ASSERT_EQ(recorder.calls.size(), 3u);
  const Call &gather = recorder.calls[0];
  EXPECT_EQ(gather.collective, TpCollective::AllGather);
  EXPECT_EQ(gather.input, reinterpret_cast<const void *>(in));
  EXPECT_EQ(gather.output, reinterpret_cast<void *>(out));
  EXPECT_EQ(gather.count, 16u);
  EXPECT_EQ(gather.dtype, int(ElementType::BF16));
  EXPECT_EQ(gather.stream, static_cast<void *>(stream));
  const Call &scatter = recorder.calls[1];
  EXPECT_EQ(scatter.collective, TpCollective::ReduceScatter);
  EXPECT_EQ(scatter.input, reinterpret_cast<const void *>(in));
  EXPECT_EQ(scatter.output, reinterpret_cast<void *>(out));
  EXPECT_EQ(scatter.count, 8u);
  EXPECT_EQ(scatter.dtype, int(ElementType::F32));
  const Call &sum = recorder.calls[2];
  EXPECT_EQ(sum.collective, TpCollective::AllReduce);
  EXPECT_EQ(sum.output, reinterpret_cast<void *>(out));
  EXPECT_EQ(sum.count, 32u);
  EXPECT_EQ(sum.dtype, int(ElementType::F16));
}

TEST(TensorParallelGroupTest, FailingOrMissingFunctionsAreErrors) {
  Recorder recorder;
  recorder.status = 3;
  CallbackTensorParallelGroup group({nullptr, allGather, reduceScatter},
                                    &recorder);
  auto [code, message] =
      describe(group.allGather(0x1000, 0x2000, 16, ElementType::BF16, nullptr));
  EXPECT_EQ(code, ErrorCode::Internal);
  EXPECT_EQ(message, "the tensor-parallel all_gather function returned 3 for "
                     "16 bf16 elements");
  std::tie(code, message) = describe(
      group.reduceScatter(0x1000, 0x2000, 4, ElementType::F32, nullptr));
  EXPECT_EQ(code, ErrorCode::Internal);
  EXPECT_EQ(message, "the tensor-parallel reduce_scatter function returned 3 "
                     "for 4 f32 elements");
  // Runs check first; a call anyway fails without calling anything.
  std::tie(code, message) = describe(
      group.allReduceSum(0x2000, 0x2000, 4, ElementType::F32, nullptr));
  EXPECT_EQ(code, ErrorCode::Internal);
  EXPECT_EQ(message, "the tensor-parallel group has no all_reduce function");
  EXPECT_EQ(recorder.calls.size(), 2u);
}

// Context parallelism's a2a: the all-to-all is set on a group of functions
// after it is made (tejit_tp_group_set_all_to_all).
TEST(TensorParallelGroupTest, AllToAllIsSetLater) {
  Recorder recorder;
  CallbackTensorParallelGroup group({nullptr, allGather, reduceScatter},
                                    &recorder);
  auto stream = reinterpret_cast<CUstream>(0x5000);
  EXPECT_FALSE(group.has(TpCollective::AllToAll));
  auto [code, message] =
      describe(group.allToAll(0x1000, 0x2000, 4, ElementType::BF16, stream));
  EXPECT_EQ(code, ErrorCode::Internal);
  EXPECT_EQ(message, "the tensor-parallel group has no all_to_all function");
  EXPECT_TRUE(recorder.calls.empty());

  group.setAllToAll(allToAll);
  EXPECT_TRUE(group.has(TpCollective::AllToAll));
  EXPECT_FALSE(
      bool(group.allToAll(0x1000, 0x2000, 24, ElementType::F16, stream)));
  ASSERT_EQ(recorder.calls.size(), 1u);
  const Call &exchange = recorder.calls[0];
  EXPECT_EQ(exchange.collective, TpCollective::AllToAll);
  EXPECT_EQ(exchange.input, reinterpret_cast<const void *>(0x1000));
  EXPECT_EQ(exchange.output, reinterpret_cast<void *>(0x2000));
  EXPECT_EQ(exchange.count, 24u);
  EXPECT_EQ(exchange.dtype, int(ElementType::F16));
  EXPECT_EQ(exchange.stream, static_cast<void *>(stream));

  recorder.status = 3;
  std::tie(code, message) =
      describe(group.allToAll(0x1000, 0x2000, 24, ElementType::F32, stream));
  EXPECT_EQ(code, ErrorCode::Internal);
  EXPECT_EQ(message, "the tensor-parallel all_to_all function returned 3 for "
                     "24 f32 elements");
  EXPECT_EQ(tpFunctionName(TpCollective::AllToAll), "all_to_all");
}

/// A group that knows its size and runs nothing (for the checks).
class SizedGroup final : public TensorParallelGroup {
public:
  explicit SizedGroup(int ranks) : size(ranks) {}
  llvm::Error allReduceSum(CUdeviceptr, CUdeviceptr, size_t, ElementType,
                           CUstream) override {
    return llvm::Error::success();
  }
  llvm::Error allGather(CUdeviceptr, CUdeviceptr, size_t, ElementType,
                        CUstream) override {
    return llvm::Error::success();
  }
  llvm::Error reduceScatter(CUdeviceptr, CUdeviceptr, size_t, ElementType,
                            CUstream) override {
    return llvm::Error::success();
  }
  llvm::Error allToAll(CUdeviceptr, CUdeviceptr, size_t, ElementType,
                       CUstream) override {
    return llvm::Error::success();
  }
  int ranks() const override { return size; }
  std::string describe() const override {
    return "a group of " + std::to_string(size);
  }

private:
  int size;
};

TEST(TensorParallelGroupTest, GroupOfAnotherSizeIsRefused) {
  SizedGroup four(4), two(2);
  Recorder recorder;
  CallbackTensorParallelGroup unknown({allReduce, nullptr, nullptr}, &recorder);
  GroupNeeds sums = needsOf({tpStep<TpAllReduceStep>(2)});
  auto [code, message] =
      describe(sums.checkRanks("layer", &four, Parallelism::Tensor));
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
  EXPECT_EQ(message, "function 'layer' is compiled for tensor parallelism "
                     "over 2 ranks (tp_size 2), but the tensor-parallel "
                     "group (a group of 4) has 4");
  EXPECT_EQ(describe(sums.checkRanks("layer", &two, Parallelism::Tensor)).first,
            ErrorCode(0));
  EXPECT_EQ(
      describe(sums.checkRanks("layer", &unknown, Parallelism::Tensor)).first,
      ErrorCode(0));
  EXPECT_EQ(
      describe(sums.checkRanks("layer", nullptr, Parallelism::Tensor)).first,
      ErrorCode(0));
  // A function without steps takes any group.
  EXPECT_EQ(describe(needsOf({KernelStep{}})
                         .checkRanks("layer", &four, Parallelism::Tensor))
                .first,
            ErrorCode(0));

  GroupNeeds cp =
      needsOf({cpStep(TpCollective::AllGather, 2)}, Parallelism::Context);
  std::tie(code, message) =
      describe(cp.checkRanks("layer", &four, Parallelism::Context));
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
  EXPECT_EQ(message, "function 'layer' is compiled for context parallelism "
                     "over 2 ranks (cp_size 2), but the context-parallel "
                     "group (a group of 4) has 4");
}

// Context parallelism's steps need the same of their own group, in its
// words (cp_size, tejit_program_set_cp_group).
TEST(TensorParallelGroupTest, ContextParallelNeeds) {
  // Each parallelism sees only its own steps.
  std::vector<Step> steps = {tpStep<TpAllReduceStep>(2),
                             cpStep(TpCollective::AllGather, 4), KernelStep{},
                             cpStep(TpCollective::ReduceScatter, 4)};
  GroupNeeds tp = needsOf(steps, Parallelism::Tensor);
  EXPECT_EQ(tp.ranks, 2);
  EXPECT_EQ(tp.uses,
            (std::array<bool, kNumTpCollectives>{true, false, false, false}));
  GroupNeeds cp = needsOf(steps, Parallelism::Context);
  EXPECT_EQ(cp.ranks, 4);
  EXPECT_EQ(cp.uses,
            (std::array<bool, kNumTpCollectives>{false, true, true, false}));
  GroupNeeds exchange =
      needsOf({cpStep(TpCollective::AllToAll)}, Parallelism::Context);
  EXPECT_EQ(exchange.uses,
            (std::array<bool, kNumTpCollectives>{false, false, false, true}));
  EXPECT_EQ(needsOf({tpStep<TpAllReduceStep>()}, Parallelism::Context).ranks,
            0);

  auto [code, message] =
      describe(cp.check("layer", nullptr, Parallelism::Context));
  EXPECT_EQ(code, ErrorCode::State);
  EXPECT_EQ(message, "function 'layer': this program is compiled for context "
                     "parallelism over 4 ranks (cp_size 4); give it a "
                     "context-parallel group (tejit_program_set_cp_group)");

  Recorder recorder;
  CallbackTensorParallelGroup gathers({nullptr, allGather, reduceScatter},
                                      &recorder);
  EXPECT_EQ(describe(cp.check("layer", &gathers, Parallelism::Context)).first,
            ErrorCode(0));
  std::tie(code, message) =
      describe(exchange.check("layer", &gathers, Parallelism::Context));
  EXPECT_EQ(code, ErrorCode::State);
  EXPECT_EQ(message, "function 'layer' has cp_alltoall steps (context "
                     "parallelism), but its context-parallel group (the "
                     "caller's function) has no all_to_all function: give "
                     "one to tejit_tp_group_set_all_to_all (in Python, "
                     "TensorParallelGroup.from_function's all_to_all)");
  CallbackTensorParallelGroup sumsOnly({allReduce, nullptr, nullptr},
                                       &recorder);
  std::tie(code, message) =
      describe(cp.check("layer", &sumsOnly, Parallelism::Context));
  EXPECT_EQ(code, ErrorCode::State);
  EXPECT_NE(message.find("has cp_allgather steps (context parallelism), but "
                         "its context-parallel group (the caller's function) "
                         "has no all_gather function"),
            std::string::npos)
      << message;
  EXPECT_TRUE(recorder.calls.empty());

  llvm::Expected<GroupNeeds> mixed =
      GroupNeeds::of(functionWith({cpStep(TpCollective::AllGather, 2),
                                   cpStep(TpCollective::AllToAll, 4)}),
                     Parallelism::Context);
  ASSERT_FALSE(bool(mixed));
  std::tie(code, message) = describe(mixed.takeError());
  EXPECT_EQ(code, ErrorCode::InvalidArgument);
  EXPECT_EQ(message, "function 'layer', step 1: a cp_alltoall over 4 ranks "
                     "after a context-parallel step over 2");
}

} // namespace
