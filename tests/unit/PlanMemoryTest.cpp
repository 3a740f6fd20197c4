//===- PlanMemoryTest.cpp - te-plan-memory's plans are valid and tight ----===//
//
// Every example spec (all of examples/, found at run time) is imported and
// run through te-decompose, te-autodiff and te-plan-memory (and, for
// inference, te-decompose alone). `checkPlan` then re-derives sizes and live
// ranges from the IR, independently of the pass, and checks the recorded
// offsets: no two buffers live at the same time share a byte, every offset is
// 256-aligned, and the arena is no smaller than the peak live size. Which ops
// alias (reshapes, attention's strided q/k/v and gradients) is the rule it
// checks against, from dialects/AttentionViews.h. The same
// check runs on random functions of copies and views, and on deliberately
// broken plans, to show that it can fail.
//
//===----------------------------------------------------------------------===//
#include "compiler/passes/PlanMemory.h"
#include "compiler/passes/Passes.h"
#include "compiler/spec/SpecImporter.h"
#include "dialects/AttentionViews.h"
#include "dialects/InPlaceSum.h"
#include "dialects/TEDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cctype>
#include <iostream>
#include <random>

using namespace mlir;

namespace {

/// The most the arena may exceed the peak live size on the examples.
constexpr double kMaxArenaOverPeak = 1.5;

/// One arena buffer as the checker derives it from the IR.
struct Buffer {
  Value value;
  int64_t bytes, start, end, offset;
};

/// What checking one function's recorded plan found.
struct Report {
  std::vector<std::string> problems;
  std::vector<Buffer> buffers;
  int64_t peakLiveBytes = 0, arenaBytes = 0;

  std::string describe() const {
    std::string text;
    for (const std::string &problem : problems)
      text += problem + "\n";
    return text;
  }
};

/// Element sizes as the memory plan is specified (i1 masks take a byte).
int64_t elementBytes(Type type) {
  if (type.isBF16() || type.isF16())
    return 2;
  if (type.isF32())
    return 4;
  if (type.isFloat8E4M3FN() || type.isFloat8E5M2() || type.isInteger(1))
    return 1;
  if (type.isInteger(64))
    return 8;
  ADD_FAILURE() << "no size for element type";
  return 0;
}

int64_t alignedBytes(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  int64_t bytes = type.getNumElements() * elementBytes(type.getElementType());
  return (bytes + 255) / 256 * 256;
}

std::string where(Value value) {
  auto result = cast<OpResult>(value);
  return "'" + result.getOwner()->getName().getStringRef().str() +
         "' result #" + std::to_string(result.getResultNumber());
}

/// The arena buffers of `function` with the offsets its `te.offsets`
/// attributes record, and every way those attributes disagree with the
/// liveness rules (views alias, arguments and returned values are the
/// caller's).
Report deriveBuffers(func::FuncOp function) {
  Report report;
  Block &block = function.front();
  DenseMap<Value, Value> storageOf;
  DenseMap<Value, int64_t> defined, lastUse, firstUse;
  SmallVector<Operation *> collectives;
  llvm::DenseSet<Value> callerOwned(block.args_begin(), block.args_end());
  for (BlockArgument arg : block.getArguments())
    storageOf[arg] = arg;
  for (auto [position, op] : llvm::enumerate(block)) {
    for (Value operand : op.getOperands()) {
      Value storage = storageOf.lookup(operand);
      lastUse[storage] = position;
      firstUse.try_emplace(storage, position);
      if (isa<func::ReturnOp>(op))
        callerOwned.insert(storage);
    }
    // Views: reshapes, q/k/v slices only attention reads (strided), and
    // tensor-parallel sums in place (whose readers read their input).
    bool view = isa<te::ReshapeOp>(op) || te::isAttentionInputSlice(&op) ||
                te::isInPlaceSum(&op);
    if (isa<te::TpAllReduceOp, te::TpAllGatherOp, te::TpReduceScatterOp>(op) &&
        !view)
      collectives.push_back(&op);
    for (Value result : op.getResults()) {
      storageOf[result] = view ? storageOf.lookup(op.getOperand(0)) : result;
      // Attention gradients that a concat gathers are written into the
      // concat's buffer, which is live from the first of them on.
      if (auto slot = te::gradConcatSlot(result)) {
        Value gathered = slot->first.getOutput();
        storageOf[result] = gathered;
        defined.try_emplace(gathered, position);
      }
      defined.try_emplace(result, position);
    }
  }
  // A tensor-parallel collective runs beside the ops up to its output's
  // first reader (SumOverlap.h): its input's bytes stay untouched until
  // then.
  for (Operation *collective : collectives) {
    Value input = storageOf.lookup(collective->getOperand(0));
    auto read = firstUse.find(storageOf.lookup(collective->getResult(0)));
    if (read != firstUse.end())
      lastUse[input] = std::max(lastUse.lookup(input), read->second);
  }
  for (Operation &op : block.without_terminator()) {
    auto offsets = op.getAttrOfType<ArrayAttr>("te.offsets");
    if (!offsets || offsets.size() != op.getNumResults()) {
      report.problems.push_back("'" + op.getName().getStringRef().str() +
                                "' has no te.offsets with one per result");
      continue;
    }
    for (auto [result, attr] : llvm::zip(op.getResults(), offsets)) {
      int64_t offset = cast<IntegerAttr>(attr).getInt();
      if (storageOf[result] != result || callerOwned.contains(result)) {
        if (offset != -1)
          report.problems.push_back(where(result) +
                                    " owns no arena memory but has offset " +
                                    std::to_string(offset));
        continue;
      }
      int64_t start = defined[result];
      report.buffers.push_back({result, alignedBytes(result), start,
                                std::max(start, lastUse.lookup(result)),
                                offset});
    }
  }
  return report;
}

bool liveTogether(const Buffer &a, const Buffer &b) {
  return a.start <= b.end && b.start <= a.end;
}

/// Checks the plan recorded on `function` against the rules.
Report checkPlan(func::FuncOp function) {
  Report report = deriveBuffers(function);
  auto complain = [&](const std::string &text) {
    report.problems.push_back(text);
  };
  std::vector<Buffer> &buffers = report.buffers;
  int64_t top = 0, positions = 0;
  for (const Buffer &buffer : buffers) {
    if (buffer.offset < 0 || buffer.offset % 256 != 0)
      complain(where(buffer.value) + " has offset " +
               std::to_string(buffer.offset) + ", not a multiple of 256");
    top = std::max(top, buffer.offset + buffer.bytes);
    positions = std::max(positions, buffer.end + 1);
  }
  for (size_t i = 0; i < buffers.size(); ++i)
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      const Buffer &a = buffers[i], &b = buffers[j];
      if (liveTogether(a, b) && a.offset < b.offset + b.bytes &&
          b.offset < a.offset + a.bytes)
        complain(where(a.value) + " and " + where(b.value) +
                 " are live together and share bytes");
    }
  for (int64_t position = 0; position < positions; ++position) {
    int64_t live = 0;
    for (const Buffer &buffer : buffers)
      if (buffer.start <= position && position <= buffer.end)
        live += buffer.bytes;
    report.peakLiveBytes = std::max(report.peakLiveBytes, live);
  }
  auto arena = function->getAttrOfType<IntegerAttr>("te.arena_bytes");
  auto peak = function->getAttrOfType<IntegerAttr>("te.peak_live_bytes");
  if (!arena || !peak)
    return complain("te.arena_bytes or te.peak_live_bytes missing"), report;
  report.arenaBytes = arena.getInt();
  if (report.arenaBytes != top)
    complain("te.arena_bytes is " + std::to_string(report.arenaBytes) +
             ", the buffers end at " + std::to_string(top));
  if (report.arenaBytes < report.peakLiveBytes)
    complain("the arena is smaller than the peak live size");
  if (peak.getInt() != report.peakLiveBytes)
    complain("te.peak_live_bytes is " + std::to_string(peak.getInt()) +
             ", expected " + std::to_string(report.peakLiveBytes));
  return report;
}

double arenaOverPeak(const Report &report) {
  return report.peakLiveBytes == 0
             ? 1.0
             : double(report.arenaBytes) / double(report.peakLiveBytes);
}

/// Every spec in examples/, so that new examples are covered unasked.
std::vector<std::string> exampleSpecs() {
  std::vector<std::string> files;
  std::error_code error;
  for (llvm::sys::fs::directory_iterator it(TEJIT_EXAMPLES_DIR, error), end;
       it != end && !error; it.increment(error)) {
    StringRef name = llvm::sys::path::filename(it->path());
    if (name.ends_with(".yaml") || name.ends_with(".json"))
      files.push_back(name.str());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class PlanMemoryTest : public ::testing::Test {
protected:
  PlanMemoryTest()
      : handler(&context, [](Diagnostic &diag) {
          ADD_FAILURE() << diag.str();
          return success();
        }) {
    context.loadDialect<te::TEDialect, func::FuncDialect>();
  }

  OwningOpRef<ModuleOp> importExample(StringRef file) {
    auto buffer = llvm::MemoryBuffer::getFile(std::string(TEJIT_EXAMPLES_DIR) +
                                              "/" + file.str());
    EXPECT_TRUE(bool(buffer)) << file.str();
    if (!buffer)
      return nullptr;
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
    return tejit::importLayerSpec(sourceMgr, &context);
  }

  /// Decompose (and differentiate, for training), then plan memory.
  LogicalResult compile(ModuleOp module, bool training) {
    PassManager pm(&context);
    tejit::TEDecomposeOptions decompose;
    decompose.inference = !training;
    pm.addNestedPass<func::FuncOp>(tejit::createTEDecompose(decompose));
    if (training)
      pm.addPass(tejit::createTEAutodiff());
    pm.addNestedPass<func::FuncOp>(tejit::createTEPlanMemory());
    return pm.run(module);
  }

  MLIRContext context;
  ScopedDiagnosticHandler handler;
};

/// (example file, training).
class ExamplePlans
    : public PlanMemoryTest,
      public ::testing::WithParamInterface<std::tuple<std::string, bool>> {};

TEST_P(ExamplePlans, ValidAndTight) {
  auto [file, training] = GetParam();
  OwningOpRef<ModuleOp> module = importExample(file);
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(compile(*module, training)));
  for (func::FuncOp function : module->getOps<func::FuncOp>()) {
    Report report = checkPlan(function);
    EXPECT_TRUE(report.problems.empty()) << function.getName().str() << ":\n"
                                         << report.describe();
    double ratio = arenaOverPeak(report);
    std::cout << "[ plan     ] " << function.getName().str() << " ("
              << (training ? "training" : "inference") << "): arena "
              << report.arenaBytes << " B, peak live " << report.peakLiveBytes
              << " B, ratio " << ratio << ", " << report.buffers.size()
              << " buffers\n";
    EXPECT_LE(ratio, kMaxArenaOverPeak) << function.getName().str();

    // The C++ API gives the numbers the pass recorded.
    FailureOr<tejit::MemoryPlan> plan = tejit::planMemory(function);
    ASSERT_TRUE(succeeded(plan));
    EXPECT_EQ(plan->arenaBytes, report.arenaBytes);
    EXPECT_EQ(plan->peakLiveBytes, report.peakLiveBytes);
    EXPECT_EQ(plan->buffers.size(), report.buffers.size());
    for (const Buffer &buffer : report.buffers)
      EXPECT_EQ(plan->offsetOf(buffer.value), buffer.offset);
  }
}

TEST(ExampleSpecs, AreFound) { EXPECT_GE(exampleSpecs().size(), 6u); }

std::string exampleName(
    const ::testing::TestParamInfo<std::tuple<std::string, bool>> &info) {
  std::string name = std::get<0>(info.param);
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name + (std::get<1>(info.param) ? "_training" : "_inference");
}

INSTANTIATE_TEST_SUITE_P(Examples, ExamplePlans,
                         ::testing::Combine(::testing::ValuesIn(exampleSpecs()),
                                            ::testing::Bool()),
                         exampleName);

/// A tensor-parallel sum of a GEMM output runs in place (its output a view,
/// dialects/InPlaceSum.h) unless its output is a function result, the
/// caller's buffer: with a bias after it, in place; without, not.
TEST_F(PlanMemoryTest, TensorParallelSumsRunInPlaceUnlessReturned) {
  for (bool bias : {true, false}) {
    std::string spec = "seq_length: 16\nbatch_size: 2\nlayers:\n  - {type: "
                       "Linear, in_features: 64, out_features: 32, tp_size: "
                       "2, parallel_mode: row, bias: " +
                       std::string(bias ? "true" : "false") + "}\n";
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBufferCopy(spec),
                                 llvm::SMLoc());
    OwningOpRef<ModuleOp> module = tejit::importLayerSpec(sourceMgr, &context);
    ASSERT_TRUE(module);
    ASSERT_TRUE(succeeded(compile(*module, /*training=*/false)));
    int sums = 0;
    module->walk([&](te::TpAllReduceOp sum) {
      ++sums;
      EXPECT_EQ(te::isInPlaceSum(sum), bias) << "bias: " << bias;
    });
    EXPECT_EQ(sums, 1);
    for (func::FuncOp function : module->getOps<func::FuncOp>()) {
      Report report = checkPlan(function);
      EXPECT_TRUE(report.problems.empty()) << report.describe();
    }
  }
}

/// Sets the offset recorded for `value`.
void setOffset(Value value, int64_t offset) {
  auto result = cast<OpResult>(value);
  Operation *op = result.getOwner();
  SmallVector<int64_t> offsets;
  for (Attribute attr : op->getAttrOfType<ArrayAttr>("te.offsets"))
    offsets.push_back(cast<IntegerAttr>(attr).getInt());
  offsets[result.getResultNumber()] = offset;
  op->setAttr("te.offsets", Builder(op->getContext()).getI64ArrayAttr(offsets));
}

/// The checker must catch broken plans, or the tests above prove nothing.
TEST_F(PlanMemoryTest, CheckerCatchesBrokenPlans) {
  OwningOpRef<ModuleOp> module = importExample("quickstart_small.yaml");
  ASSERT_TRUE(module);
  ASSERT_TRUE(succeeded(compile(*module, /*training=*/true)));
  func::FuncOp backward =
      module->lookupSymbol<func::FuncOp>("quickstart_small_backward");
  ASSERT_TRUE(checkPlan(backward).problems.empty());
  std::vector<Buffer> buffers = checkPlan(backward).buffers;
  auto overlapping = std::find_if(
      buffers.begin() + 1, buffers.end(),
      [&](const Buffer &buffer) { return liveTogether(buffers[0], buffer); });
  ASSERT_NE(overlapping, buffers.end());

  setOffset(overlapping->value, buffers[0].offset);
  EXPECT_FALSE(checkPlan(backward).problems.empty());
  setOffset(overlapping->value, overlapping->offset + 128);
  EXPECT_FALSE(checkPlan(backward).problems.empty());
  setOffset(overlapping->value, overlapping->offset);
  EXPECT_TRUE(checkPlan(backward).problems.empty());

  te::ReshapeOp view = *backward.getOps<te::ReshapeOp>().begin();
  setOffset(view.getResult(), 0);
  EXPECT_FALSE(checkPlan(backward).problems.empty());
  setOffset(view.getResult(), -1);
  EXPECT_TRUE(checkPlan(backward).problems.empty());

  backward->setAttr("te.peak_live_bytes",
                    Builder(&context).getI64IntegerAttr(256));
  EXPECT_FALSE(checkPlan(backward).problems.empty());
}

/// Random functions of copies (te.add, te.slice, te.concat) and view round
/// trips (two te.reshape) on [rows, n] tensors, returning some of them.
class RandomFunction {
public:
  RandomFunction(ModuleOp module, uint64_t seed)
      : rng(seed), builder(OpBuilder::atBlockEnd(module.getBody())) {
    Type elements[] = {builder.getF32Type(), builder.getBF16Type(),
                       builder.getI1Type(),
                       builder.getType<Float8E4M3FNType>()};
    element = elements[pick(4)];
    rows = 1 + pick(16);
    SmallVector<Type> argTypes;
    for (int i = 0, e = 1 + pick(3); i < e; ++i)
      argTypes.push_back(type(1 + pick(256)));
    function = builder.create<func::FuncOp>(
        builder.getUnknownLoc(), "random_" + std::to_string(seed),
        builder.getFunctionType(argTypes, {}));
    Block *body = function.addEntryBlock();
    values.append(body->args_begin(), body->args_end());
    builder.setInsertionPointToEnd(body);
  }

  func::FuncOp build() {
    for (int i = 0, e = 5 + pick(60); i < e; ++i)
      values.push_back(nextValue());
    SmallVector<Value> results;
    for (int i = 0, e = 1 + pick(4); i < e; ++i)
      results.push_back(values[pick(values.size())]);
    builder.create<func::ReturnOp>(loc(), results);
    function.setType(builder.getFunctionType(function.getArgumentTypes(),
                                             ValueRange(results).getTypes()));
    return function;
  }

private:
  Value nextValue() {
    // Recent values are read more often, as in real layers.
    auto operand = [&] {
      size_t back = std::min<size_t>(pick(8), values.size() - 1);
      return pick(3) ? values[values.size() - 1 - back]
                     : values[pick(values.size())];
    };
    Value x = operand();
    int64_t width = cast<RankedTensorType>(x.getType()).getShape().back();
    switch (pick(4)) {
    case 0:
      return builder.create<te::AddOp>(loc(), x.getType(), x, x);
    case 1: {
      int64_t size = 1 + pick(width);
      return builder.create<te::SliceOp>(
          loc(), type(size), x,
          builder.getI64IntegerAttr(pick(width - size + 1)));
    }
    case 2: {
      Value y = operand();
      int64_t total =
          width + cast<RankedTensorType>(y.getType()).getShape().back();
      return builder.create<te::ConcatOp>(loc(), type(total), ValueRange{x, y});
    }
    default: {
      auto flat = RankedTensorType::get({rows * width}, element);
      Value view = builder.create<te::ReshapeOp>(loc(), flat, x);
      return builder.create<te::ReshapeOp>(loc(), x.getType(), view);
    }
    }
  }

  RankedTensorType type(int64_t width) {
    return RankedTensorType::get({rows, width}, element);
  }
  Location loc() { return builder.getUnknownLoc(); }
  int64_t pick(int64_t n) {
    return std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
  }

  std::mt19937_64 rng;
  OpBuilder builder;
  Type element;
  int64_t rows;
  func::FuncOp function;
  SmallVector<Value> values;
};

TEST_F(PlanMemoryTest, RandomFunctions) {
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  for (uint64_t seed = 0; seed < 300; ++seed)
    RandomFunction(*module, seed).build();
  ASSERT_TRUE(succeeded(module->verify()));
  PassManager pm(&context);
  pm.addNestedPass<func::FuncOp>(tejit::createTEPlanMemory());
  ASSERT_TRUE(succeeded(pm.run(*module)));
  double worst = 1.0, total = 0.0;
  int count = 0;
  for (func::FuncOp function : module->getOps<func::FuncOp>()) {
    Report report = checkPlan(function);
    EXPECT_TRUE(report.problems.empty()) << function.getName().str() << ":\n"
                                         << report.describe();
    worst = std::max(worst, arenaOverPeak(report));
    total += arenaOverPeak(report);
    ++count;
  }
  std::cout << "[ plan     ] " << count
            << " random functions: arena / peak live mean " << total / count
            << ", worst " << worst << "\n";
}

} // namespace
