//===- Plan.cpp - an executable plan, parsed from plan.json ---------------===//
//
// Parsing checks everything the executor relies on: every value id is in
// range, every storage lies inside its argument, result, arena or viewed
// value, byte counts match the types, kernel launches have a geometry and
// GEMMs have what cuBLASLt needs. Errors name where in the document the
// problem is: "plan: function 'f', step 3 (gemm): 'a' refers to value 99
// but the function has 44 values".
//
//===----------------------------------------------------------------------===//
#include "runtime/Plan.h"

#include "dialects/BlockScaleLayout.h"
#include "dialects/GroupedBlockScaleLayout.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <tuple>

using namespace tejit::runtime;
namespace json = llvm::json;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
using llvm::Twine;

//===----------------------------------------------------------------------===//
// Element and tensor types
//===----------------------------------------------------------------------===//

size_t tejit::runtime::elementBytes(ElementType type) {
  switch (type) {
  case ElementType::F32:
  case ElementType::I32:
    return 4;
  case ElementType::F16:
  case ElementType::BF16:
    return 2;
  case ElementType::I64:
    return 8;
  case ElementType::F8E4M3:
  case ElementType::F8E5M2:
  case ElementType::I8:
  case ElementType::I1:
    return 1;
  }
  llvm_unreachable("unknown element type");
}

StringRef tejit::runtime::elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F8E4M3:
    return "f8E4M3FN";
  case ElementType::F8E5M2:
    return "f8E5M2";
  case ElementType::I64:
    return "i64";
  case ElementType::I32:
    return "i32";
  case ElementType::I8:
    return "i8";
  case ElementType::I1:
    return "i1";
  }
  llvm_unreachable("unknown element type");
}

bool tejit::runtime::isFp8(ElementType type) {
  return type == ElementType::F8E4M3 || type == ElementType::F8E5M2;
}

int64_t TensorType::numElements() const {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

namespace {
std::string printType(const TensorType &type) {
  std::string text = "tensor<";
  for (int64_t size : type.shape)
    text += std::to_string(size) + "x";
  return text + elementTypeName(type.element).str() + ">";
}

bool sameType(const TensorType &a, const TensorType &b) {
  return a.shape == b.shape && a.element == b.element;
}
} // namespace

bool FunctionPlan::isViewed(int64_t id) const {
  return llvm::any_of(values, [&](const ValueInfo &value) {
    return value.storage.kind == Storage::View && value.storage.index == id;
  });
}

bool FunctionPlan::isUnused(int64_t id) const {
  if (isViewed(id) || llvm::any_of(results, [&](const InterfaceEntry &result) {
        return result.value == id;
      }))
    return false;
  bool touched = false;
  for (const Step &step : steps)
    forEachStepValue(step,
                     [&](int64_t value, bool) { touched |= value == id; });
  return !touched;
}

std::vector<size_t> FunctionPlan::hostArguments() const {
  std::vector<size_t> indices;
  for (auto [index, entry] : llvm::enumerate(arguments))
    if (entry.host)
      indices.push_back(index);
  return indices;
}

int64_t GroupedGemmStep::tokens() const {
  if (aType.shape.size() != 2)
    return 0;
  // Rows: a [T, K]. Contraction: the dimension of a that is op(a)'s K.
  if (form == Form::Rows)
    return aType.shape[0];
  return !fp8 && transposeA ? aType.shape[0] : aType.shape[1];
}

StringRef tejit::runtime::groupedFormName(GroupedGemmStep::Form form) {
  return form == GroupedGemmStep::Form::Rows ? "rows" : "contraction";
}

std::optional<std::pair<StringRef, std::string>>
tejit::runtime::groupedScalingProblem(const GroupedGemmStep &step,
                                      std::optional<ElementType> biasElement) {
  auto quoted = [](GemmScaling scaling) {
    return ("\"" + gemmScalingName(scaling) + "\"").str();
  };
  bool aBlocks = step.aScaling != GemmScaling::Tensor,
       bBlocks = step.bScaling != GemmScaling::Tensor;
  if (!step.fp8) {
    if (aBlocks || bBlocks)
      return std::pair{aBlocks ? StringRef("a_scaling") : "b_scaling",
                       "is " + quoted(aBlocks ? step.aScaling : step.bScaling) +
                           " for a grouped GEMM that is not FP8"};
    return std::nullopt;
  }
  if (aBlocks != bBlocks)
    return std::pair{aBlocks ? StringRef("b_scaling") : "a_scaling",
                     "is \"tensor\", but '" +
                         std::string(aBlocks ? "a_scaling" : "b_scaling") +
                         "' is " +
                         quoted(aBlocks ? step.aScaling : step.bScaling) +
                         ": both operands are block-scaled or neither"};
  if (!aBlocks)
    return std::nullopt;
  if (step.aScaling == GemmScaling::Block2D &&
      step.bScaling == GemmScaling::Block2D)
    return std::pair{StringRef("b_scaling"),
                     std::string("is \"block_2d\" like 'a_scaling'; cuBLASLt "
                                 "has no GEMM of two 2-D block-scaled "
                                 "operands")};
  bool rows = step.form == GroupedGemmStep::Form::Rows;
  if (step.aScaling == GemmScaling::Block2D ||
      (!rows && step.bScaling == GemmScaling::Block2D))
    return std::pair{
        step.aScaling == GemmScaling::Block2D ? StringRef("a_scaling")
                                              : "b_scaling",
        "is \"block_2d\", but only b of a grouped GEMM of form \"rows\" (the "
        "stacked weights) takes 2-D blocks; token segments are cast in 1-D "
        "blocks (dialects/GroupedBlockScaleLayout.h)"};
  if (step.fastAccum)
    return std::pair{StringRef("fast_accum"),
                     std::string("is true for a block-scaled grouped GEMM, "
                                 "which accumulates without it")};
  // No bias epilogue with block scales: GroupedGemm writes each group's
  // out rows with its bias row and the GEMM adds onto them as C.
  if (biasElement && *biasElement != step.outType.element)
    return std::pair{StringRef("bias"),
                     ("is " + elementTypeName(*biasElement) +
                      "; a block-scaled grouped GEMM adds its bias as C "
                      "(beta = 1), which must have out's element type " +
                      elementTypeName(step.outType.element))
                         .str()};
  return std::nullopt;
}

TensorType tejit::runtime::groupedScaleType(const GroupedGemmStep &step,
                                            bool operandB) {
  namespace layout = tejit::groupedblockscale;
  GemmScaling scaling = operandB ? step.bScaling : step.aScaling;
  if (scaling == GemmScaling::Tensor)
    return TensorType{{step.groups}, ElementType::F32};
  const std::vector<int64_t> &shape =
      operandB ? step.bType.shape : step.aType.shape;
  // Contraction: a [M, T] and b [N, T], the transposed casts of the token
  // segments; rows: b [G, N, K] one te.block_quantize per group, a [T, K]
  // in row segments.
  layout::Layout kind = step.form == GroupedGemmStep::Form::Contraction
                            ? layout::Layout::TransposedSegments
                        : operandB ? layout::Layout::Stacked
                                   : layout::Layout::Segments;
  std::vector<int64_t> dims = layout::castScaleShape(
      kind, shape.data(), step.groups, scaling == GemmScaling::Block1D ? 1 : 2);
  return TensorType{std::move(dims), ElementType::F32};
}

bool FunctionPlan::resultCopiedFirst(size_t index) const {
  int64_t id = results[index].value;
  int64_t base = viewBase(id).first;
  if (values[id].storage.kind == Storage::Result ||
      values[base].storage.kind != Storage::Argument || isViewed(id))
    return false;
  // The copy before the steps must see what a copy after them would: no
  // step writes the argument.
  bool written = false;
  for (const Step &step : steps)
    forEachStepValue(step, [&](int64_t value, bool writes) {
      written |= writes && viewBase(value).first == base;
    });
  return !written;
}

std::optional<size_t> FunctionPlan::soleWriter(size_t resultIndex,
                                               int64_t argument) const {
  int64_t result = results[resultIndex].value;
  const Storage &storage = values[result].storage;
  if (storage.kind != Storage::Result ||
      storage.index != int64_t(resultIndex) || isViewed(result))
    return std::nullopt;
  std::optional<size_t> writer;
  bool resultElsewhere = false, argumentAfterWriter = false;
  for (auto [index, step] : llvm::enumerate(steps))
    forEachStepValue(step, [&](int64_t value, bool written) {
      if (value == result) {
        if (written && (!writer || *writer == index))
          writer = index;
        else
          resultElsewhere = true;
      } else if (writer && index > *writer &&
                 viewBase(value).first == argument) {
        argumentAfterWriter = true;
      }
    });
  if (resultElsewhere || argumentAfterWriter)
    return std::nullopt;
  return writer;
}

bool FunctionPlan::canUpdateInPlace(size_t resultIndex) const {
  if (resultIndex >= results.size() || !results[resultIndex].updatesArg ||
      size_t(*results[resultIndex].updatesArg) >= arguments.size())
    return false;
  int64_t argument = arguments[*results[resultIndex].updatesArg].value;
  std::optional<size_t> writer = soleWriter(resultIndex, argument);
  if (!writer || !std::holds_alternative<KernelStep>(steps[*writer]))
    return false;
  // A result copied after the steps would see the new state.
  for (auto [index, entry] : llvm::enumerate(results))
    if (index != resultIndex && viewBase(entry.value).first == argument &&
        !resultCopiedFirst(index))
      return false;
  return true;
}

bool FunctionPlan::canAccumulateInPlace(size_t resultIndex) const {
  if (resultIndex >= results.size() || !results[resultIndex].accumulatesArg ||
      size_t(*results[resultIndex].accumulatesArg) >= arguments.size())
    return false;
  int64_t argument = arguments[*results[resultIndex].accumulatesArg].value;
  std::optional<size_t> writer = soleWriter(resultIndex, argument);
  // cuBLASLt reads C and writes D at the same places (C may be D); a
  // generated kernel may take its pointers __restrict__.
  if (!writer)
    return false;
  if (const auto *grouped = std::get_if<GroupedGemmStep>(&steps[*writer]))
    return grouped->accumulate == argument;
  const auto *gemm = std::get_if<GemmStep>(&steps[*writer]);
  return gemm && gemm->epilogue.residual &&
         *gemm->epilogue.residual == argument;
}

std::optional<size_t>
FunctionPlan::groupedAccumulation(size_t resultIndex) const {
  if (!canAccumulateInPlace(resultIndex))
    return std::nullopt;
  int64_t argument = arguments[*results[resultIndex].accumulatesArg].value;
  std::optional<size_t> writer = soleWriter(resultIndex, argument);
  if (!writer || !std::holds_alternative<GroupedGemmStep>(steps[*writer]) ||
      isViewed(argument))
    return std::nullopt;
  bool elsewhere = false;
  for (auto [index, step] : llvm::enumerate(steps))
    if (index != *writer)
      forEachStepValue(step, [&](int64_t value, bool) {
        elsewhere |= viewBase(value).first == argument;
      });
  for (const auto &entry : results)
    elsewhere |= viewBase(entry.value).first == argument;
  if (elsewhere)
    return std::nullopt;
  return writer;
}

std::vector<bool>
FunctionPlan::stepsNeededWithout(llvm::ArrayRef<size_t> dropped) const {
  // A value's memory: an argument's or a result's buffer (several values
  // may name one, e.g. a result and its reshape), else the value itself.
  auto memory = [&](int64_t value) -> int64_t {
    int64_t base = viewBase(value).first;
    const Storage &storage = values[base].storage;
    if (storage.kind == Storage::Argument)
      return -2 - 2 * storage.index;
    if (storage.kind == Storage::Result)
      return -1 - 2 * storage.index;
    return base;
  };
  // Backwards from the end: the memory a needed step or a kept result
  // touches.
  llvm::DenseSet<int64_t> touched;
  for (size_t index = 0; index < results.size(); ++index)
    if (!llvm::is_contained(dropped, index))
      touched.insert(-1 - 2 * int64_t(index));
  std::vector<bool> needed(steps.size(), false);
  bool laterReadsScratch = false;
  for (size_t index = steps.size(); index-- > 0;) {
    bool writes = false, keep = laterReadsScratch;
    forEachStepValue(steps[index], [&](int64_t value, bool written) {
      if (!written)
        return;
      writes = true;
      int64_t where = memory(value);
      // Arguments are the caller's memory (caches, accumulated gradients).
      keep |= touched.contains(where) || (where < 0 && where % 2 == 0);
    });
    needed[index] = keep || !writes;
    if (!needed[index])
      continue;
    // Written values too: a step may read what it overwrites in place.
    forEachStepValue(steps[index], [&](int64_t value, bool) {
      touched.insert(memory(value));
    });
    const auto *kernel = std::get_if<KernelStep>(&steps[index]);
    laterReadsScratch = kernel && kernel->scratchFromPreviousStep;
  }
  return needed;
}

void tejit::runtime::forEachStepValue(
    const Step &step, llvm::function_ref<void(int64_t, bool)> visit) {
  auto maybe = [&](std::optional<int64_t> value, bool written) {
    if (value)
      visit(*value, written);
  };
  if (const auto *kernel = std::get_if<KernelStep>(&step)) {
    for (const KernelArg &arg : kernel->args)
      visit(arg.value, arg.output);
  } else if (const auto *gemm = std::get_if<GemmStep>(&step)) {
    visit(gemm->a, false);
    visit(gemm->b, false);
    maybe(gemm->aScaleInv, false);
    maybe(gemm->bScaleInv, false);
    const GemmEpilogue &epilogue = gemm->epilogue;
    maybe(epilogue.bias, false);
    maybe(epilogue.dScale, false);
    maybe(epilogue.residual, false);
    maybe(epilogue.aux, epilogue.gelu);
    maybe(epilogue.amaxD, true);
    maybe(epilogue.biasGrad, true);
    visit(gemm->out, true);
  } else if (const auto *attention = std::get_if<AttentionStep>(&step)) {
    // A kv-cache attention stores the new tokens into k_cache and v_cache
    // (operands 3 and 4): they are state the step changes, never inputs
    // that a copy before the steps or a cache of static steps may keep.
    for (auto [index, value] : llvm::enumerate(attention->operands))
      visit(value, attention->kvCache && (index == 3 || index == 4));
    for (int64_t value : attention->results)
      visit(value, true);
  } else if (const auto *reduce = std::get_if<AmaxAllReduceStep>(&step)) {
    visit(reduce->in, false);
    visit(reduce->out, true);
  } else if (std::optional<TpStepRef> collective = asTpStep(step)) {
    visit(collective->step.in, false);
    visit(collective->step.out, true);
  } else if (const auto *cp = std::get_if<CpCollectiveStep>(&step)) {
    visit(cp->in, false);
    visit(cp->out, true);
  } else if (const auto *grouped = std::get_if<GroupedGemmStep>(&step)) {
    visit(grouped->a, false);
    visit(grouped->b, false);
    visit(grouped->mSplits, false);
    maybe(grouped->aScaleInv, false);
    maybe(grouped->bScaleInv, false);
    maybe(grouped->bias, false);
    maybe(grouped->accumulate, false);
    visit(grouped->out, true);
  }
}

std::optional<TpStepRef> tejit::runtime::asTpStep(const Step &step) {
  if (const auto *sum = std::get_if<TpAllReduceStep>(&step))
    return TpStepRef{TpCollective::AllReduce, *sum};
  if (const auto *gather = std::get_if<TpAllGatherStep>(&step))
    return TpStepRef{TpCollective::AllGather, *gather};
  if (const auto *scatter = std::get_if<TpReduceScatterStep>(&step))
    return TpStepRef{TpCollective::ReduceScatter, *scatter};
  return std::nullopt;
}

StringRef tejit::runtime::tpStepKind(TpCollective collective) {
  switch (collective) {
  case TpCollective::AllReduce:
    return "tp_allreduce";
  case TpCollective::AllGather:
    return "tp_allgather";
  case TpCollective::ReduceScatter:
    return "tp_reducescatter";
  case TpCollective::AllToAll:
    return "cp_alltoall";
  }
  llvm_unreachable("unknown tensor-parallel collective");
}

StringRef tejit::runtime::cpStepKind(TpCollective collective) {
  switch (collective) {
  case TpCollective::AllGather:
    return "cp_allgather";
  case TpCollective::ReduceScatter:
    return "cp_reducescatter";
  case TpCollective::AllToAll:
    return "cp_alltoall";
  case TpCollective::AllReduce:
    break;
  }
  llvm_unreachable("no context-parallel step sums");
}

StringRef tejit::runtime::gemmScalingName(GemmScaling scaling) {
  switch (scaling) {
  case GemmScaling::Tensor:
    return "tensor";
  case GemmScaling::Block1D:
    return "block_1d";
  case GemmScaling::Block2D:
    return "block_2d";
  }
  llvm_unreachable("unknown GEMM scaling");
}

std::optional<GemmScaling> tejit::runtime::parseGemmScaling(StringRef name) {
  for (GemmScaling scaling :
       {GemmScaling::Tensor, GemmScaling::Block1D, GemmScaling::Block2D})
    if (name == gemmScalingName(scaling))
      return scaling;
  return std::nullopt;
}

std::optional<ElementType> tejit::runtime::parseElementType(StringRef name) {
  return llvm::StringSwitch<std::optional<ElementType>>(name)
      .Case("f32", ElementType::F32)
      .Case("f16", ElementType::F16)
      .Case("bf16", ElementType::BF16)
      .Case("f8E4M3FN", ElementType::F8E4M3)
      .Case("f8E5M2", ElementType::F8E5M2)
      .Case("i64", ElementType::I64)
      .Case("i32", ElementType::I32)
      .Case("i8", ElementType::I8)
      .Case("i1", ElementType::I1)
      .Default(std::nullopt);
}

Expected<TensorType> tejit::runtime::parseTensorType(StringRef text) {
  auto fail = [&](const Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "invalid tensor type '" + text +
                                       "': " + why);
  };
  StringRef body = text;
  if (!body.consume_front("tensor<") || !body.consume_back(">"))
    return fail("expected a ranked tensor type, 'tensor<...>'");
  // Element type names contain no 'x', so the last 'x'-separated part is the
  // element type and the others are the dimensions.
  llvm::SmallVector<StringRef> parts;
  body.split(parts, 'x');
  StringRef element = parts.pop_back_val();
  std::optional<ElementType> elementType = parseElementType(element);
  if (!elementType)
    return fail("unknown element type '" + element +
                "' (expected f32, f16, bf16, f8E4M3FN, f8E5M2, i64, i32, i8 "
                "or i1)");
  TensorType type;
  type.element = *elementType;
  // The byte count must fit too, so bound the element count by the largest
  // element size.
  constexpr int64_t maxElements = std::numeric_limits<int64_t>::max() / 8;
  int64_t elements = 1;
  for (StringRef part : parts) {
    uint64_t size;
    // getAsInteger accepts a sign; dimensions are plain digits.
    if (part.empty() || !llvm::all_of(part, llvm::isDigit) ||
        part.getAsInteger(10, size) || size > uint64_t(maxElements))
      return fail("dimension '" + part +
                  "' is not a static size (a non-negative integer)");
    type.shape.push_back(int64_t(size));
    if (size != 0 && elements > maxElements / int64_t(size))
      return fail("too many elements");
    elements *= int64_t(size);
  }
  return type;
}

//===----------------------------------------------------------------------===//
// Plan lookups
//===----------------------------------------------------------------------===//

std::pair<int64_t, int64_t> FunctionPlan::viewBase(int64_t id) const {
  int64_t offset = 0;
  while (values[id].storage.kind == Storage::View) {
    offset += values[id].storage.byteOffset;
    id = values[id].storage.index;
  }
  return {id, offset};
}

const FunctionPlan *Plan::find(StringRef name) const {
  for (const FunctionPlan &function : functions)
    if (function.name == name)
      return &function;
  return nullptr;
}

const FunctionPlan *Plan::forward() const {
  for (const FunctionPlan &function : functions)
    if (function.backwardOf.empty() && function.wgradOf.empty())
      return &function;
  return nullptr;
}

const FunctionPlan *Plan::wgradOf(const FunctionPlan &backward) const {
  for (const FunctionPlan &function : functions)
    if (!function.wgradOf.empty() && function.wgradOf == backward.name)
      return &function;
  return nullptr;
}

const FunctionPlan *Plan::backwardOf(const FunctionPlan &forward) const {
  for (const FunctionPlan &function : functions)
    if (!function.backwardOf.empty() && function.backwardOf == forward.name)
      return &function;
  return nullptr;
}

int64_t Plan::contextParallelRanks() const {
  for (const FunctionPlan &function : functions)
    for (const Step &step : function.steps)
      if (const auto *cp = std::get_if<CpCollectiveStep>(&step))
        return cp->ranks;
  return 1;
}

int64_t Plan::tensorParallelRanks() const {
  for (const FunctionPlan &function : functions)
    for (const Step &step : function.steps)
      if (std::optional<TpStepRef> collective = asTpStep(step))
        return collective->step.ranks;
  return 1;
}

std::string tejit::runtime::previousScratchProblem(llvm::ArrayRef<Step> before,
                                                   const KernelStep &step) {
  if (before.empty())
    return "there is no step before it";
  std::string at = "step " + std::to_string(before.size() - 1);
  const auto *previous = std::get_if<KernelStep>(&before.back());
  if (!previous)
    return at + ", before it, is not a kernel";
  if (previous->scratchBytes < step.scratchBytes)
    return (at + " ('" + previous->name + "'), before it, has " +
            Twine(previous->scratchBytes) + " bytes of scratch, fewer than " +
            Twine(step.scratchBytes))
        .str();
  return "";
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {

/// A place in the document ("function 'f', step 3 (gemm)") and typed access
/// to the fields of the JSON object there; errors name the place and field.
class Scope {
public:
  /// `prefix` goes before the names of fields in errors ("args[2].").
  explicit Scope(std::string where, std::string prefix = "")
      : where(std::move(where)), prefix(std::move(prefix)) {}

  Error error(const Twine &message) const {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "plan: " + (where.empty() ? "" : where + ": ") + message);
  }
  /// "'field' <message>".
  Error error(StringRef field, const Twine &message) const {
    return error("'" + prefix + field + "' " + message);
  }
  /// The same place, with `prefix` added before field names.
  Scope nested(const Twine &prefix) const {
    return Scope(where, this->prefix + prefix.str());
  }

  Expected<const json::Value *> field(const json::Object &object,
                                      StringRef key) const {
    if (const json::Value *value = object.get(key))
      return value;
    return error(key, "is missing");
  }

  Expected<int64_t> integer(const json::Value &value, StringRef name) const {
    if (std::optional<int64_t> number = value.getAsInteger())
      return *number;
    return error(name, "must be an integer, got " + describe(value));
  }
  Expected<int64_t> integer(const json::Object &object, StringRef key) const {
    Expected<const json::Value *> value = field(object, key);
    if (!value)
      return value.takeError();
    return integer(**value, key);
  }
  /// A required integer that is at least 0.
  Expected<int64_t> count(const json::Object &object, StringRef key) const {
    Expected<int64_t> number = integer(object, key);
    if (number && *number < 0)
      return error(key, "is " + Twine(*number) + ", which is negative");
    return number;
  }
  /// A required integer that is at least 0 and fits `unsigned`.
  Expected<unsigned> unsignedInteger(const json::Value &value,
                                     StringRef name) const {
    Expected<int64_t> number = integer(value, name);
    if (!number)
      return number.takeError();
    if (*number < 0 || *number > std::numeric_limits<unsigned>::max())
      return error(name, "is " + Twine(*number) + ", out of range");
    return unsigned(*number);
  }

  Expected<StringRef> string(const json::Object &object, StringRef key) const {
    Expected<const json::Value *> value = field(object, key);
    if (!value)
      return value.takeError();
    if (std::optional<StringRef> text = (*value)->getAsString())
      return *text;
    return error(key, "must be a string, got " + describe(**value));
  }
  /// An optional boolean; `fallback` when absent.
  Expected<bool> boolean(const json::Object &object, StringRef key,
                         bool fallback = false) const {
    const json::Value *value = object.get(key);
    if (!value)
      return fallback;
    if (std::optional<bool> flag = value->getAsBoolean())
      return *flag;
    return error(key, "must be a boolean, got " + describe(*value));
  }
  Expected<const json::Array *> array(const json::Object &object,
                                      StringRef key) const {
    Expected<const json::Value *> value = field(object, key);
    if (!value)
      return value.takeError();
    if (const json::Array *elements = (*value)->getAsArray())
      return elements;
    return error(key, "must be an array, got " + describe(**value));
  }
  Expected<const json::Object *> object(const json::Value &value,
                                        StringRef name) const {
    if (const json::Object *fields = value.getAsObject())
      return fields;
    return error(name, "must be an object, got " + describe(value));
  }
  Expected<const json::Object *> object(const json::Object &object,
                                        StringRef key) const {
    Expected<const json::Value *> value = field(object, key);
    if (!value)
      return value.takeError();
    return this->object(**value, key);
  }

  /// A short rendering of `value` for messages.
  static std::string describe(const json::Value &value) {
    switch (value.kind()) {
    case json::Value::Null:
      return "null";
    case json::Value::Boolean:
      return "a boolean";
    case json::Value::Number:
      return "the number " + llvm::formatv("{0}", value).str();
    case json::Value::String:
      return "the string \"" + value.getAsString()->str() + "\"";
    case json::Value::Array:
      return "an array";
    case json::Value::Object:
      return "an object";
    }
    llvm_unreachable("unknown JSON kind");
  }

  std::string where, prefix;
};

/// Parses and checks one function on its own; references to other functions
/// (backward_of and the training interface) are checked once all are read.
class FunctionParser {
public:
  FunctionParser(const json::Object &source, FunctionPlan &function,
                 std::string where)
      : source(source), function(function), functionScope(std::move(where)) {}

  Error parse();

private:
  Error parseValues(const json::Array &values);
  Error parseValue(const json::Value &node, int64_t index);
  Error checkViews();
  /// Where `id`'s bytes are: the storage at the end of its chain of views
  /// (checkViews() must have passed) and the bytes past its start.
  std::pair<Storage, int64_t> resolve(int64_t id) const;
  Error parseInterface(const json::Array &entries, bool results);
  Error parseStep(const json::Value &node, size_t index);
  Error parseKernel(const json::Object &node, const Scope &scope,
                    KernelStep &step);
  Error parseScratch(const json::Object &node, const Scope &scope,
                     KernelStep &step);
  Error parseGemm(const json::Object &node, const Scope &scope, GemmStep &step);
  /// A "grouped_gemm" step (docs/grouped-linear.md).
  Error parseGroupedGemm(const json::Object &node, const Scope &scope,
                         GroupedGemmStep &step);
  /// An FP8 grouped GEMM's scaling rules and its scale_inv values, whose
  /// types follow from the scalings and the (checked) operand shapes.
  Error parseGroupedScales(const json::Object &node, const Scope &scope,
                           GroupedGemmStep &step);
  /// The operand ids and types of a GEMM step ("a"/"a_type", "b"/"b_type",
  /// "out"/"out_type"); each type must be its value's.
  Error parseOperands(const json::Object &node, const Scope &scope, int64_t &a,
                      int64_t &b, int64_t &out, TensorType &aType,
                      TensorType &bType, TensorType &outType);
  /// Checks what the steps do with host arguments: none writes one.
  Error checkHostArguments();
  /// An FP8 GEMM's "a_scaling" and "b_scaling" and the scale_inv values
  /// they describe.
  Error parseScaling(const json::Object &node, const Scope &scope,
                     GemmStep &step);
  Error parseAttention(const json::Object &node, const Scope &scope,
                       AttentionStep &step);
  /// The `in` and `out` value ids of an all-reduce step.
  Error parseInOut(const json::Object &node, const Scope &scope, int64_t &in,
                   int64_t &out);
  Error parseAmaxAllReduce(const json::Object &node, const Scope &scope,
                           AmaxAllReduceStep &step);
  /// A tp_allreduce, tp_allgather or tp_reducescatter step.
  Error parseTpCollective(const json::Object &node, const Scope &scope,
                          TpCollective collective, TpCollectiveStep &step);
  /// A cp_allgather or cp_reducescatter step (`step.gather` set), or a
  /// cp_alltoall (`step.allToAll` set).
  Error parseCpCollective(const json::Object &node, const Scope &scope,
                          CpCollectiveStep &step);
  /// A cp_alltoall's head_dim and shapes; sets its direction.
  Error parseCpAllToAllShapes(const json::Object &node, const Scope &scope,
                              CpCollectiveStep &step);
  /// A gather's or reduce-scatter's whole and local shapes.
  Error checkCpGatherShapes(const Scope &scope, const CpCollectiveStep &step,
                            StringRef what);
  /// seq_dim: 0 or 1 of a tensor of rank `rank`.
  Error checkCpSeqDim(const Scope &scope, int64_t seqDim, size_t rank);
  /// Load balancing needs an even number of local tokens.
  Error checkCpChunks(const Scope &scope, const CpCollectiveStep &step,
                      const TensorType &local);
  /// Whether values `a` and `b` share bytes (of one argument, one result or
  /// the arena).
  bool shareBytes(int64_t a, int64_t b) const;

  /// A value id of this function; `name` is how errors call the field.
  Expected<int64_t> valueId(const json::Value &node, StringRef name,
                            const Scope &scope) const;
  Expected<int64_t> valueId(const json::Object &object, StringRef key,
                            const Scope &scope) const;
  Expected<std::vector<int64_t>>
  valueIds(const json::Object &object, StringRef key, const Scope &scope) const;
  /// An id whose value is a single f32 (a float[1] that cuBLASLt reads or
  /// writes through a pointer).
  Expected<int64_t> scalarF32(const json::Value &node, StringRef name,
                              const Scope &scope) const;
  Expected<TensorType> type(const json::Object &object, StringRef key,
                            const Scope &scope) const;

  /// The function's object in the document.
  const json::Object &source;
  FunctionPlan &function;
  /// "function 'name'".
  Scope functionScope;
};

Expected<int64_t> FunctionParser::valueId(const json::Value &node,
                                          StringRef name,
                                          const Scope &scope) const {
  Expected<int64_t> id = scope.integer(node, name);
  if (!id)
    return id.takeError();
  int64_t count = int64_t(function.values.size());
  if (*id < 0 || *id >= count)
    return scope.error(name, "refers to value " + Twine(*id) +
                                 " but the function has " + Twine(count) +
                                 " values");
  return *id;
}

Expected<int64_t> FunctionParser::valueId(const json::Object &object,
                                          StringRef key,
                                          const Scope &scope) const {
  Expected<const json::Value *> value = scope.field(object, key);
  if (!value)
    return value.takeError();
  return valueId(**value, key, scope);
}

Expected<std::vector<int64_t>>
FunctionParser::valueIds(const json::Object &object, StringRef key,
                         const Scope &scope) const {
  Expected<const json::Array *> array = scope.array(object, key);
  if (!array)
    return array.takeError();
  std::vector<int64_t> ids;
  for (auto [index, element] : llvm::enumerate(**array)) {
    Expected<int64_t> id =
        valueId(element, (key + "[" + Twine(index) + "]").str(), scope);
    if (!id)
      return id.takeError();
    ids.push_back(*id);
  }
  return ids;
}

Expected<int64_t> FunctionParser::scalarF32(const json::Value &node,
                                            StringRef name,
                                            const Scope &scope) const {
  Expected<int64_t> id = valueId(node, name, scope);
  if (!id)
    return id.takeError();
  const TensorType &type = function.values[*id].type;
  if (type.element != ElementType::F32 || type.numElements() != 1)
    return scope.error(name, "refers to value " + Twine(*id) + " of type " +
                                 printType(type) +
                                 ", expected a single f32 (tensor<1xf32>)");
  return *id;
}

Expected<TensorType> FunctionParser::type(const json::Object &object,
                                          StringRef key,
                                          const Scope &scope) const {
  Expected<StringRef> text = scope.string(object, key);
  if (!text)
    return text.takeError();
  Expected<TensorType> type = parseTensorType(*text);
  if (!type)
    return scope.error("'" + scope.prefix + key +
                       "': " + llvm::toString(type.takeError()));
  return type;
}

Error FunctionParser::parse() {
  Expected<StringRef> name = functionScope.string(source, "name");
  if (!name)
    return name.takeError();
  if (name->empty())
    return functionScope.error("name", "is empty");
  function.name = name->str();
  functionScope.where = "function '" + function.name + "'";

  if (const json::Value *of = source.get("backward_of")) {
    std::optional<StringRef> text = of->getAsString();
    if (!text || text->empty())
      return functionScope.error("backward_of",
                                 "must be a function name, got " +
                                     Scope::describe(*of));
    function.backwardOf = text->str();
  }
  if (const json::Value *of = source.get("wgrad_of")) {
    std::optional<StringRef> text = of->getAsString();
    if (!text || text->empty())
      return functionScope.error("wgrad_of", "must be a function name, got " +
                                                 Scope::describe(*of));
    function.wgradOf = text->str();
  }
  // Without arena_bytes (a function te-plan-memory did not plan), no value
  // may live in the arena.
  if (source.get("arena_bytes")) {
    Expected<int64_t> arena = functionScope.count(source, "arena_bytes");
    if (!arena)
      return arena.takeError();
    function.arenaBytes = *arena;
  }

  // Storage indices are checked against the interface's length, so size it
  // before the values; its entries refer to values, so fill it after them.
  Expected<const json::Array *> arguments =
      functionScope.array(source, "arguments");
  if (!arguments)
    return arguments.takeError();
  Expected<const json::Array *> results =
      functionScope.array(source, "results");
  if (!results)
    return results.takeError();
  function.arguments.resize((*arguments)->size());
  function.results.resize((*results)->size());

  Expected<const json::Array *> values = functionScope.array(source, "values");
  if (!values)
    return values.takeError();
  if (Error error = parseValues(**values))
    return error;
  if (Error error = parseInterface(**arguments, /*results=*/false))
    return error;
  if (Error error = parseInterface(**results, /*results=*/true))
    return error;

  Expected<const json::Array *> steps = functionScope.array(source, "steps");
  if (!steps)
    return steps.takeError();
  for (auto [index, step] : llvm::enumerate(**steps))
    if (Error error = parseStep(step, index))
      return error;
  return checkHostArguments();
}

Error FunctionParser::checkHostArguments() {
  std::vector<size_t> hosts = function.hostArguments();
  if (hosts.empty())
    return Error::success();
  for (auto [index, step] : llvm::enumerate(function.steps)) {
    Error error = Error::success();
    forEachStepValue(step, [&](int64_t value, bool written) {
      if (!written || error)
        return;
      const Storage &root =
          function.values[function.viewBase(value).first].storage;
      if (root.kind == Storage::Argument && function.arguments[root.index].host)
        error = Scope(functionScope.where + ", step " + std::to_string(index))
                    .error("writes value " + Twine(value) + " of argument " +
                           Twine(root.index) +
                           ", a host argument (\"host\": true), which steps "
                           "only read");
    });
    if (error)
      return error;
  }
  return Error::success();
}

Error FunctionParser::parseValues(const json::Array &values) {
  function.values.resize(values.size());
  for (auto [index, value] : llvm::enumerate(values))
    if (Error error = parseValue(value, int64_t(index)))
      return error;
  return checkViews();
}

Error FunctionParser::parseValue(const json::Value &node, int64_t index) {
  Scope scope(functionScope.where + ", value " + std::to_string(index));
  Expected<const json::Object *> object = scope.object(node, "values[]");
  if (!object)
    return object.takeError();
  ValueInfo &value = function.values[index];
  Expected<int64_t> id = scope.integer(**object, "id");
  if (!id)
    return id.takeError();
  if (*id != index)
    return scope.error("id", "is " + Twine(*id) +
                                 ": values must be listed by id, densely "
                                 "from 0 (expected " +
                                 Twine(index) + ")");
  value.id = *id;
  Expected<TensorType> type = this->type(**object, "type", scope);
  if (!type)
    return type.takeError();
  value.type = std::move(*type);
  Expected<int64_t> bytes = scope.count(**object, "bytes");
  if (!bytes)
    return bytes.takeError();
  value.bytes = *bytes;
  // Views too: a view's type is how its bytes are read, so they must all be
  // inside the viewed value. (i1 takes a byte per element, as kernels store
  // it and as the writer counts it.)
  if (value.bytes != value.type.bytes())
    return scope.error("bytes", "is " + Twine(value.bytes) + " but " +
                                    printType(value.type) + " takes " +
                                    Twine(value.type.bytes()) + " bytes");

  Expected<const json::Object *> storage = scope.object(**object, "storage");
  if (!storage)
    return storage.takeError();
  const json::Object &where = **storage;
  int kinds = 0;
  for (StringRef key : {"arg", "result", "arena_offset", "view_of"})
    kinds += where.get(key) != nullptr;
  if (kinds != 1 || where.size() != (where.get("view_of") ? 2u : 1u))
    return scope.error("storage",
                       "must be one of {\"arg\": i}, {\"result\": i}, "
                       "{\"arena_offset\": n} or {\"view_of\": id, "
                       "\"byte_offset\": n}");
  Scope fields = scope.nested("storage.");
  Storage &place = value.storage;
  auto interfaceIndex = [&](StringRef key, size_t count,
                            StringRef what) -> Error {
    Expected<int64_t> at = fields.integer(where, key);
    if (!at)
      return at.takeError();
    if (*at < 0 || *at >= int64_t(count))
      return fields.error(key, "is " + Twine(*at) + " but the function has " +
                                   Twine(count) + " " + what);
    place.index = *at;
    return Error::success();
  };
  if (where.get("arg")) {
    place.kind = Storage::Argument;
    return interfaceIndex("arg", function.arguments.size(), "arguments");
  }
  if (where.get("result")) {
    place.kind = Storage::Result;
    return interfaceIndex("result", function.results.size(), "results");
  }
  if (where.get("arena_offset")) {
    place.kind = Storage::Arena;
    Expected<int64_t> offset = fields.integer(where, "arena_offset");
    if (!offset)
      return offset.takeError();
    place.index = *offset;
    if (*offset < 0)
      return fields.error("arena_offset",
                          "is " + Twine(*offset) +
                              ", so the value has no place in the arena");
    if (*offset > function.arenaBytes - value.bytes)
      return fields.error("arena_offset",
                          "is " + Twine(*offset) + ", and the value's " +
                              Twine(value.bytes) + " bytes end past the " +
                              Twine(function.arenaBytes) +
                              " bytes of the arena ('arena_bytes')");
    return Error::success();
  }
  // The viewed value may come later in the list: checkViews() checks it.
  place.kind = Storage::View;
  Expected<int64_t> base = fields.integer(where, "view_of");
  if (!base)
    return base.takeError();
  place.index = *base;
  Expected<int64_t> byteOffset = fields.integer(where, "byte_offset");
  if (!byteOffset)
    return byteOffset.takeError();
  place.byteOffset = *byteOffset;
  return Error::success();
}

Error FunctionParser::checkViews() {
  int64_t count = int64_t(function.values.size());
  for (const ValueInfo &value : function.values) {
    if (value.storage.kind != Storage::View)
      continue;
    Scope scope(functionScope.where + ", value " + std::to_string(value.id));
    int64_t base = value.storage.index;
    if (base < 0 || base >= count)
      return scope.error("storage.view_of", "refers to value " + Twine(base) +
                                                " but the function has " +
                                                Twine(count) + " values");
    if (base == value.id)
      return scope.error("storage.view_of", "refers to the value itself");
    const ValueInfo &viewed = function.values[base];
    int64_t offset = value.storage.byteOffset;
    if (offset < 0)
      return scope.error("storage.byte_offset",
                         "is " + Twine(offset) + ", which is negative");
    if (offset > viewed.bytes - value.bytes)
      return scope.error("storage.byte_offset",
                         "is " + Twine(offset) + ", and the view's " +
                             Twine(value.bytes) + " bytes end past the " +
                             Twine(viewed.bytes) + " bytes of value " +
                             Twine(base));
    // Views of views are fine (a reshape of a reshape); a cycle has no
    // storage at all.
    int64_t at = base;
    for (int64_t hops = 0; function.values[at].storage.kind == Storage::View;
         ++hops) {
      at = function.values[at].storage.index;
      if (at < 0 || at >= count)
        break; // Reported for the value that views it.
      if (hops > count)
        return scope.error("storage.view_of",
                           "starts a cycle of views through value " +
                               Twine(base));
    }
  }
  return Error::success();
}

std::pair<Storage, int64_t> FunctionParser::resolve(int64_t id) const {
  auto [base, offset] = function.viewBase(id);
  return {function.values[base].storage, offset};
}

Error FunctionParser::parseInterface(const json::Array &entries, bool results) {
  StringRef kind = results ? "result" : "argument";
  std::vector<InterfaceEntry> &list =
      results ? function.results : function.arguments;
  for (auto [index, node] : llvm::enumerate(entries)) {
    Scope scope(functionScope.where + ", " + kind.str() + " " +
                std::to_string(index));
    Expected<const json::Object *> object =
        scope.object(node, results ? "results[]" : "arguments[]");
    if (!object)
      return object.takeError();
    InterfaceEntry &entry = list[index];
    Expected<int64_t> id = valueId(**object, "value", scope);
    if (!id)
      return id.takeError();
    entry.value = *id;
    // An argument's value is the caller's buffer; a result's value is
    // written into the caller's result buffer (maybe through views), or
    // lives elsewhere (a view of an argument or of another result) and is
    // copied there after the steps; never at an offset of its own buffer.
    const Storage &storage = function.values[*id].storage;
    if (!results &&
        (storage.kind != Storage::Argument || storage.index != int64_t(index)))
      return scope.error("value", "is value " + Twine(*id) +
                                      ", whose storage is not {\"arg\": " +
                                      Twine(index) + "}");
    if (results) {
      auto [root, offset] = resolve(*id);
      if (root.kind == Storage::Result && root.index == int64_t(index) &&
          offset != 0)
        return scope.error("value", "is value " + Twine(*id) +
                                        ", which does not live at the start "
                                        "of result " +
                                        Twine(index) +
                                        " (its storage is not {\"result\": " +
                                        Twine(index) + "})");
    }

    if ((*object)->get("te.name")) {
      Expected<StringRef> name = scope.string(**object, "te.name");
      if (!name)
        return name.takeError();
      entry.name = name->str();
    }
    Expected<bool> parameter = scope.boolean(**object, "te.parameter");
    if (!parameter)
      return parameter.takeError();
    entry.parameter = *parameter;
    // A host argument: G int32 values in the caller's host memory (a
    // grouped op's m_splits), which the runtime reads before the steps.
    Expected<bool> host = scope.boolean(**object, "host");
    if (!host)
      return host.takeError();
    entry.host = *host;
    if (entry.host) {
      const TensorType &type = function.values[*id].type;
      if (results)
        return scope.error("host", "is set on a result; only arguments live "
                                   "in host memory");
      if (entry.parameter)
        return scope.error("host", "is set on a parameter ('te.parameter'); "
                                   "host arguments are m_splits vectors");
      if (type.element != ElementType::I32 || type.shape.size() != 1)
        return scope.error("host", "is set on value " + Twine(*id) +
                                       " of type " + printType(type) +
                                       "; a host argument is an i32 vector "
                                       "(m_splits, tensor<Gxi32>)");
    }
    for (auto [key, slot] :
         {std::pair{"te.forward_arg", &entry.forwardArg},
          std::pair{"te.forward_result", &entry.forwardResult},
          std::pair{"te.grad_of", &entry.gradOf},
          std::pair{"te.updates_arg", &entry.updatesArg},
          std::pair{"te.backward_arg", &entry.backwardArg},
          std::pair{"te.backward_result", &entry.backwardResult}}) {
      if (!(*object)->get(key))
        continue;
      Expected<int64_t> number = scope.count(**object, key);
      if (!number)
        return number.takeError();
      *slot = *number;
    }
    // te.updates_arg names the argument the runtime overwrites with this
    // result, so both must be the same tensor. (The training interface
    // attributes refer to the forward: checked once it is read.)
    if (entry.updatesArg &&
        *entry.updatesArg >= int64_t(function.arguments.size()))
      return scope.error("te.updates_arg",
                         "is " + Twine(*entry.updatesArg) +
                             " but the function has " +
                             Twine(function.arguments.size()) + " arguments");
    // te.accumulates names the argument (by te.name: passes add and drop
    // arguments after te-autodiff sets it).
    if ((*object)->get("te.accumulates")) {
      Expected<StringRef> name = scope.string(**object, "te.accumulates");
      if (!name)
        return name.takeError();
      auto found = llvm::find_if(function.arguments,
                                 [&](const InterfaceEntry &argument) {
                                   return argument.name == *name;
                                 });
      if (found == function.arguments.end())
        return scope.error("te.accumulates", "names '" + *name +
                                                 "', which is not an argument "
                                                 "of the function");
      entry.accumulatesArg = found - function.arguments.begin();
    }
    // The state a result updates, or the main_grad it accumulates into, is
    // device memory.
    for (auto [key, slot] :
         {std::pair{"te.updates_arg", &entry.updatesArg},
          std::pair{"te.accumulates", &entry.accumulatesArg}})
      if (*slot && function.arguments[**slot].host)
        return scope.error(key, "names argument " + Twine(**slot) +
                                    ", a host argument (\"host\": true), "
                                    "which results cannot update");
  }
  return Error::success();
}

Error FunctionParser::parseStep(const json::Value &node, size_t index) {
  Scope scope(functionScope.where + ", step " + std::to_string(index));
  Expected<const json::Object *> object = scope.object(node, "steps[]");
  if (!object)
    return object.takeError();
  Expected<StringRef> kind = scope.string(**object, "kind");
  if (!kind)
    return kind.takeError();
  // docs/grouped-linear.md spells the grouped GEMM step `"op":
  // "grouped_gemm"`: a "gemm" kind with that op, or a kind of its own.
  if (const json::Value *op = (*object)->get("op")) {
    std::optional<StringRef> name = op->getAsString();
    if (!name || *name != "grouped_gemm" ||
        (*kind != "gemm" && *kind != "grouped_gemm"))
      return scope.error("op", "is " + Scope::describe(*op) +
                                   " in a step of kind \"" + *kind +
                                   "\"; the only op is \"grouped_gemm\", in "
                                   "a \"gemm\" or \"grouped_gemm\" step");
    *kind = "grouped_gemm";
  }
  scope.where += " (" + kind->str() + ")";
  if (*kind == "grouped_gemm") {
    GroupedGemmStep step;
    if (Error error = parseGroupedGemm(**object, scope, step))
      return error;
    function.steps.push_back(std::move(step));
  } else if (*kind == "kernel") {
    KernelStep step;
    if (Error error = parseKernel(**object, scope, step))
      return error;
    function.steps.push_back(std::move(step));
  } else if (*kind == "gemm") {
    GemmStep step;
    if (Error error = parseGemm(**object, scope, step))
      return error;
    function.steps.push_back(std::move(step));
  } else if (*kind == "attention" || *kind == "attention_bwd" ||
             *kind == "attention_backward" || *kind == "kv_cache_attention" ||
             *kind == "fp8_attention" || *kind == "fp8_attention_bwd") {
    AttentionStep step;
    step.backward = *kind == "attention_bwd" || *kind == "attention_backward" ||
                    *kind == "fp8_attention_bwd";
    step.kvCache = *kind == "kv_cache_attention";
    step.fp8 = kind->starts_with("fp8_");
    if (Error error = parseAttention(**object, scope, step))
      return error;
    function.steps.push_back(std::move(step));
  } else if (*kind == "amax_allreduce") {
    AmaxAllReduceStep step;
    if (Error error = parseAmaxAllReduce(**object, scope, step))
      return error;
    function.steps.push_back(step);
  } else if (*kind == "tp_allreduce") {
    TpAllReduceStep step;
    if (Error error =
            parseTpCollective(**object, scope, TpCollective::AllReduce, step))
      return error;
    function.steps.push_back(step);
  } else if (*kind == "tp_allgather") {
    TpAllGatherStep step;
    if (Error error =
            parseTpCollective(**object, scope, TpCollective::AllGather, step))
      return error;
    function.steps.push_back(step);
  } else if (*kind == "tp_reducescatter") {
    TpReduceScatterStep step;
    if (Error error = parseTpCollective(**object, scope,
                                        TpCollective::ReduceScatter, step))
      return error;
    function.steps.push_back(step);
  } else if (*kind == "cp_allgather" || *kind == "cp_reducescatter" ||
             *kind == "cp_alltoall") {
    CpCollectiveStep step;
    step.gather = *kind == "cp_allgather";
    step.allToAll = *kind == "cp_alltoall";
    if (Error error = parseCpCollective(**object, scope, step))
      return error;
    function.steps.push_back(step);
  } else {
    return scope.error("kind", "is unknown (expected kernel, gemm, "
                               "grouped_gemm, attention, attention_bwd, "
                               "fp8_attention, fp8_attention_bwd, "
                               "kv_cache_attention, amax_allreduce, "
                               "tp_allreduce, tp_allgather, "
                               "tp_reducescatter, cp_allgather, "
                               "cp_reducescatter or cp_alltoall)");
  }
  return Error::success();
}

Error FunctionParser::parseKernel(const json::Object &node, const Scope &scope,
                                  KernelStep &step) {
  Expected<StringRef> name = scope.string(node, "name");
  if (!name)
    return name.takeError();
  if (name->empty())
    return scope.error("name", "is empty");
  step.name = name->str();
  Expected<StringRef> binary = scope.string(node, "binary");
  if (!binary)
    return binary.takeError();
  if (binary->empty())
    return scope.error("binary", "is empty");
  step.binary = binary->str();

  for (auto [key, dims] :
       {std::pair{"grid", &step.grid}, std::pair{"block", &step.block}}) {
    Expected<const json::Array *> array = scope.array(node, key);
    if (!array)
      return array.takeError();
    if ((*array)->size() != 3)
      return scope.error(key, "must list 3 sizes (x, y, z), got " +
                                  Twine((*array)->size()));
    for (auto [axis, size] : llvm::enumerate(**array)) {
      std::string field = (Twine(key) + "[" + Twine(axis) + "]").str();
      Expected<unsigned> value = scope.unsignedInteger(size, field);
      if (!value)
        return value.takeError();
      if (*value == 0)
        return scope.error(field, "is 0; launch sizes must be positive");
      (*dims)[axis] = *value;
    }
  }
  if (const json::Value *shared = node.get("shared_bytes")) {
    Expected<unsigned> bytes = scope.unsignedInteger(*shared, "shared_bytes");
    if (!bytes)
      return bytes.takeError();
    step.sharedBytes = *bytes;
  }
  if (Error error = parseScratch(node, scope, step))
    return error;
  Expected<bool> skipFlag = scope.boolean(node, "skip_flag");
  if (!skipFlag)
    return skipFlag.takeError();
  step.skipFlag = *skipFlag;

  Expected<const json::Array *> args = scope.array(node, "args");
  if (!args)
    return args.takeError();
  for (auto [index, arg] : llvm::enumerate(**args)) {
    Scope argScope = scope.nested("args[" + Twine(index) + "].");
    Expected<const json::Object *> object =
        scope.object(arg, ("args[" + Twine(index) + "]").str());
    if (!object)
      return object.takeError();
    KernelArg kernelArg;
    Expected<int64_t> id = valueId(**object, "value", argScope);
    if (!id)
      return id.takeError();
    kernelArg.value = *id;
    Expected<bool> output = argScope.boolean(**object, "output");
    if (!output)
      return output.takeError();
    kernelArg.output = *output;
    Expected<bool> zero = argScope.boolean(**object, "zero_before_launch");
    if (!zero)
      return zero.takeError();
    kernelArg.zeroBeforeLaunch = *zero;
    if (kernelArg.zeroBeforeLaunch && !kernelArg.output)
      return argScope.error("zero_before_launch",
                            "is set on an input (only outputs the kernel "
                            "accumulates into are zeroed)");
    step.args.push_back(kernelArg);
  }
  return Error::success();
}

/// How much scratch a kernel takes and what of it is zeroed first: the byte
/// range "scratch_zero" (all of it when absent, as in plans written before
/// it), or nothing when it reads what the previous step left there.
Error FunctionParser::parseScratch(const json::Object &node, const Scope &scope,
                                   KernelStep &step) {
  if (const json::Value *scratch = node.get("scratch_bytes")) {
    Expected<unsigned> bytes = scope.unsignedInteger(*scratch, "scratch_bytes");
    if (!bytes)
      return bytes.takeError();
    step.scratchBytes = *bytes;
  }
  Expected<bool> fromPrevious =
      scope.boolean(node, "scratch_from_previous_step");
  if (!fromPrevious)
    return fromPrevious.takeError();
  step.scratchFromPreviousStep = *fromPrevious;
  const json::Value *zero = node.get("scratch_zero");
  if (step.scratchFromPreviousStep) {
    if (zero)
      return scope.error("scratch_zero",
                         "is given, but the step reads the scratch as the "
                         "previous step left it "
                         "('scratch_from_previous_step')");
    if (!step.scratchBytes)
      return scope.error("scratch_from_previous_step",
                         "is set, but the step takes no scratch "
                         "('scratch_bytes')");
    std::string problem = previousScratchProblem(function.steps, step);
    if (!problem.empty())
      return scope.error("scratch_from_previous_step",
                         "is set, but " + problem);
    return Error::success();
  }
  if (!zero) {
    step.scratchZeroBytes = step.scratchBytes;
    return Error::success();
  }
  Expected<const json::Object *> range = scope.object(*zero, "scratch_zero");
  if (!range)
    return range.takeError();
  Scope fields = scope.nested("scratch_zero.");
  for (auto [key, slot] : {std::pair{"offset", &step.scratchZeroOffset},
                           std::pair{"bytes", &step.scratchZeroBytes}}) {
    Expected<const json::Value *> value = fields.field(**range, key);
    if (!value)
      return value.takeError();
    Expected<unsigned> number = fields.unsignedInteger(**value, key);
    if (!number)
      return number.takeError();
    *slot = *number;
  }
  if (uint64_t(step.scratchZeroOffset) + step.scratchZeroBytes >
      step.scratchBytes)
    return scope.error("scratch_zero",
                       "is " + Twine(step.scratchZeroBytes) +
                           " bytes from byte " + Twine(step.scratchZeroOffset) +
                           ", past the end of the step's " +
                           Twine(step.scratchBytes) + " bytes of scratch");
  return Error::success();
}

Error FunctionParser::parseOperands(const json::Object &node,
                                    const Scope &scope, int64_t &a, int64_t &b,
                                    int64_t &out, TensorType &aType,
                                    TensorType &bType, TensorType &outType) {
  // Each operand's id and type; the type must be the value's.
  for (auto [key, typeKey, id, type] :
       {std::tuple{"a", "a_type", &a, &aType},
        std::tuple{"b", "b_type", &b, &bType},
        std::tuple{"out", "out_type", &out, &outType}}) {
    Expected<int64_t> value = valueId(node, key, scope);
    if (!value)
      return value.takeError();
    *id = *value;
    Expected<TensorType> parsed = this->type(node, typeKey, scope);
    if (!parsed)
      return parsed.takeError();
    *type = std::move(*parsed);
    const TensorType &actual = function.values[*value].type;
    if (!sameType(*type, actual))
      return scope.error(typeKey, "is " + printType(*type) + " but '" + key +
                                      "' (value " + Twine(*value) + ") is " +
                                      printType(actual));
  }
  return Error::success();
}

Error FunctionParser::parseGemm(const json::Object &node, const Scope &scope,
                                GemmStep &step) {
  if (Error error = parseOperands(node, scope, step.a, step.b, step.out,
                                  step.aType, step.bType, step.outType))
    return error;

  step.scaled = node.get("a_scale_inv") || node.get("b_scale_inv") ||
                node.get("layout") || isFp8(step.aType.element) ||
                isFp8(step.bType.element);
  if (step.scaled) {
    if (!isFp8(step.aType.element) || !isFp8(step.bType.element))
      return scope.error(
          isFp8(step.aType.element) ? "b_type" : "a_type",
          "must be FP8 in a scaled (FP8) GEMM, got " +
              printType(isFp8(step.aType.element) ? step.bType : step.aType));
    if (Error error = parseScaling(node, scope, step))
      return error;
    if (node.get("layout")) {
      Expected<StringRef> layout = scope.string(node, "layout");
      if (!layout)
        return layout.takeError();
      if (*layout != "TN")
        return scope.error("layout",
                           "is \"" + *layout + "\"; FP8 GEMMs are TN");
    }
    Expected<bool> fastAccum = scope.boolean(node, "fast_accum");
    if (!fastAccum)
      return fastAccum.takeError();
    step.fastAccum = *fastAccum;
    if (step.fastAccum && step.aScaling != GemmScaling::Tensor)
      return scope.error("fast_accum", "is true for a block-scaled GEMM, "
                                       "which accumulates without it");
    for (StringRef key : {"transpose_a", "transpose_b"})
      if (node.get(key))
        return scope.error(key, "is given for an FP8 GEMM, which is TN");
  } else {
    for (StringRef key : {"fast_accum", "a_scaling", "b_scaling"})
      if (node.get(key))
        return scope.error(key, "is given for a GEMM that is not FP8");
    Expected<bool> transposeA = scope.boolean(node, "transpose_a");
    if (!transposeA)
      return transposeA.takeError();
    Expected<bool> transposeB = scope.boolean(node, "transpose_b");
    if (!transposeB)
      return transposeB.takeError();
    step.transposeA = *transposeA;
    step.transposeB = *transposeB;
  }

  // The epilogue; the writer always writes one, if empty.
  const json::Value *epilogueJson = node.get("epilogue");
  if (!epilogueJson)
    return Error::success();
  Expected<const json::Object *> epilogue =
      scope.object(*epilogueJson, "epilogue");
  if (!epilogue)
    return epilogue.takeError();
  GemmEpilogue &terms = step.epilogue;
  for (const auto &[key, value] : **epilogue) {
    StringRef name = key;
    std::string field = ("epilogue." + name).str();
    std::optional<int64_t> *slot =
        llvm::StringSwitch<std::optional<int64_t> *>(name)
            .Case("bias", &terms.bias)
            .Case("aux", &terms.aux)
            .Case("d_scale", &terms.dScale)
            .Case("amax_d", &terms.amaxD)
            .Case("bias_grad", &terms.biasGrad)
            .Case("residual", &terms.residual)
            .Default(nullptr);
    if (name == "gelu" || name == "dgelu") {
      std::optional<bool> flag = value.getAsBoolean();
      if (!flag)
        return scope.error(field,
                           "must be a boolean, got " + Scope::describe(value));
      (name == "gelu" ? terms.gelu : terms.dgelu) = *flag;
      continue;
    }
    if (!slot)
      return scope.error(field, "is not an epilogue term (bias, gelu, aux, "
                                "d_scale, amax_d, dgelu, bias_grad, "
                                "residual)");
    // A gelu whose pre-activation is not kept (inference) has a null aux.
    if (name == "aux" && value.kind() == json::Value::Null)
      continue;
    Expected<int64_t> id = (name == "d_scale" || name == "amax_d")
                               ? scalarF32(value, field, scope)
                               : valueId(value, field, scope);
    if (!id)
      return id.takeError();
    *slot = *id;
  }
  // A residual (cuBLASLt's C, beta = 1) is the one term they take.
  if (step.aScaling != GemmScaling::Tensor &&
      llvm::any_of(**epilogue,
                   [](const auto &entry) { return entry.first != "residual"; }))
    return scope.error("epilogue", "has terms other than a residual, which "
                                   "block-scaled GEMMs do not take "
                                   "(docs/block-scaling.md)");
  if (terms.gelu && terms.dgelu)
    return scope.error("epilogue", "has both gelu and dgelu");
  if (terms.dgelu && !terms.aux)
    return scope.error("epilogue.aux", "is missing; dgelu reads the "
                                       "pre-activation from it");
  if (terms.aux && !terms.gelu && !terms.dgelu)
    return scope.error("epilogue.aux", "is given without gelu or dgelu");
  if (terms.aux && function.values[*terms.aux].type.shape != step.outType.shape)
    return scope.error("epilogue.aux",
                       "is value " + Twine(*terms.aux) + " of type " +
                           printType(function.values[*terms.aux].type) +
                           ", not of the GEMM output's shape (" +
                           printType(step.outType) + ")");
  if (terms.residual &&
      (function.values[*terms.residual].type.shape != step.outType.shape ||
       function.values[*terms.residual].type.element != step.outType.element))
    return scope.error("epilogue.residual",
                       "is value " + Twine(*terms.residual) + " of type " +
                           printType(function.values[*terms.residual].type) +
                           ", not the GEMM output's type (" +
                           printType(step.outType) + ")");
  if (terms.residual && (terms.gelu || terms.dgelu || terms.biasGrad))
    return scope.error("epilogue.residual",
                       "is only added after a bias (not with gelu, dgelu or "
                       "bias_grad)");
  bool fp8Out = isFp8(step.outType.element);
  if (fp8Out && !terms.dScale)
    return scope.error("epilogue.d_scale",
                       "is missing; an FP8 output needs a scale");
  if (!fp8Out && (terms.dScale || terms.amaxD))
    return scope.error(terms.dScale ? "epilogue.d_scale" : "epilogue.amax_d",
                       "is given but the output " + printType(step.outType) +
                           " is not FP8");
  return Error::success();
}

Error FunctionParser::parseScaling(const json::Object &node, const Scope &scope,
                                   GemmStep &step) {
  struct Operand {
    StringRef scalingKey, scaleKey, typeKey;
    const TensorType &type;
    GemmScaling &scaling;
    std::optional<int64_t> &scaleInv;
  };
  Operand operands[] = {{"a_scaling", "a_scale_inv", "a_type", step.aType,
                         step.aScaling, step.aScaleInv},
                        {"b_scaling", "b_scale_inv", "b_type", step.bType,
                         step.bScaling, step.bScaleInv}};
  for (Operand &operand : operands) {
    // Plans written before the key scale every operand by one scale_inv.
    operand.scaling = GemmScaling::Tensor;
    if (node.get(operand.scalingKey)) {
      Expected<StringRef> name = scope.string(node, operand.scalingKey);
      if (!name)
        return name.takeError();
      std::optional<GemmScaling> scaling = parseGemmScaling(*name);
      if (!scaling)
        return scope.error(operand.scalingKey,
                           "is \"" + *name +
                               "\"; expected \"tensor\", \"block_1d\" or "
                               "\"block_2d\"");
      operand.scaling = *scaling;
    }
    const json::Value *value = node.get(operand.scaleKey);
    if (!value)
      return scope.error(operand.scaleKey,
                         "is missing; FP8 GEMMs need both scale_inv values");
    if (operand.scaling == GemmScaling::Tensor) {
      Expected<int64_t> id = scalarF32(*value, operand.scaleKey, scope);
      if (!id)
        return id.takeError();
      operand.scaleInv = *id;
      continue;
    }
    // Block scales: the f32 tensor BlockScaleLayout.h lays out for the
    // operand, [rows, K].
    if (operand.type.shape.size() != 2)
      return scope.error(operand.typeKey, "is " + printType(operand.type) +
                                              ", but a " +
                                              gemmScalingName(operand.scaling) +
                                              " operand must be a matrix");
    Expected<int64_t> id = valueId(*value, operand.scaleKey, scope);
    if (!id)
      return id.takeError();
    std::array<int64_t, 2> shape = tejit::blockscale::scaleShape(
        operand.type.shape[0], operand.type.shape[1],
        operand.scaling == GemmScaling::Block1D ? 1 : 2);
    const TensorType &actual = function.values[*id].type;
    TensorType expected{{shape[0], shape[1]}, ElementType::F32};
    if (!sameType(actual, expected))
      return scope.error(
          operand.scaleKey,
          "refers to value " + Twine(*id) + " of type " + printType(actual) +
              ", expected " + printType(expected) + " (the " +
              gemmScalingName(operand.scaling) + " scales of " +
              printType(operand.type) + ", dialects/BlockScaleLayout.h)");
    operand.scaleInv = *id;
  }
  bool aBlocks = step.aScaling != GemmScaling::Tensor,
       bBlocks = step.bScaling != GemmScaling::Tensor;
  if (aBlocks != bBlocks)
    return scope.error(
        aBlocks ? "b_scaling" : "a_scaling",
        "is \"tensor\", but '" + Twine(aBlocks ? "a_scaling" : "b_scaling") +
            "' is \"" +
            gemmScalingName(aBlocks ? step.aScaling : step.bScaling) +
            "\": both operands are block-scaled or neither");
  if (step.aScaling == GemmScaling::Block2D &&
      step.bScaling == GemmScaling::Block2D)
    return scope.error("b_scaling",
                       "is \"block_2d\" like 'a_scaling'; cuBLASLt has no "
                       "GEMM of two 2-D block-scaled operands");
  return Error::success();
}

Error FunctionParser::parseGroupedGemm(const json::Object &node,
                                       const Scope &scope,
                                       GroupedGemmStep &step) {
  using Form = GroupedGemmStep::Form;
  Expected<StringRef> form = scope.string(node, "form");
  if (!form)
    return form.takeError();
  if (*form != "rows" && *form != "contraction")
    return scope.error("form", "is \"" + *form +
                                   "\"; expected \"rows\" or \"contraction\"");
  step.form = *form == "rows" ? Form::Rows : Form::Contraction;
  bool rows = step.form == Form::Rows;
  if (Error error = parseOperands(node, scope, step.a, step.b, step.out,
                                  step.aType, step.bType, step.outType))
    return error;

  // m_splits: the host argument holding the G segment sizes.
  Expected<int64_t> splits = valueId(node, "m_splits", scope);
  if (!splits)
    return splits.takeError();
  step.mSplits = *splits;
  const ValueInfo &splitsValue = function.values[*splits];
  bool host = splitsValue.storage.kind == Storage::Argument &&
              function.arguments[splitsValue.storage.index].host;
  if (!host)
    return scope.error("m_splits", "is value " + Twine(*splits) +
                                       ", which is not a host argument's "
                                       "value (an argument with \"host\": "
                                       "true)");
  Expected<int64_t> groups = scope.integer(node, "groups");
  if (!groups)
    return groups.takeError();
  if (*groups < 1)
    return scope.error("groups", "is " + Twine(*groups) +
                                     "; a grouped GEMM has at least 1 group");
  step.groups = *groups;
  int64_t g = *groups;
  TensorType splitsType{{g}, ElementType::I32};
  if (!sameType(splitsValue.type, splitsType))
    return scope.error("m_splits", "is value " + Twine(*splits) + " of type " +
                                       printType(splitsValue.type) +
                                       ", expected " + printType(splitsType) +
                                       " ('groups' is " + Twine(g) + ")");

  // FP8 (TN, per-group scales) or high precision (transposes).
  Expected<bool> fp8 = scope.boolean(node, "fp8");
  if (!fp8)
    return fp8.takeError();
  step.fp8 = *fp8;
  ElementType aElement = step.aType.element, bElement = step.bType.element,
              outElement = step.outType.element;
  auto isFloat = [](ElementType type) {
    return type == ElementType::BF16 || type == ElementType::F16 ||
           type == ElementType::F32;
  };
  if (isFp8(outElement) || !isFloat(outElement))
    return scope.error("out_type", "is " + printType(step.outType) +
                                       "; a grouped GEMM writes bf16, f16 or "
                                       "f32");
  if (step.fp8) {
    if (!isFp8(aElement) || !isFp8(bElement))
      return scope.error(
          isFp8(aElement) ? "b_type" : "a_type",
          "is " + printType(isFp8(aElement) ? step.bType : step.aType) +
              ", but an FP8 grouped GEMM ('fp8': true) takes FP8 operands");
    if (aElement == ElementType::F8E5M2 && bElement == ElementType::F8E5M2)
      return scope.error("b_type", "is E5M2 like 'a_type'; FP8 GEMMs take "
                                   "at most one E5M2 operand");
    for (StringRef key : {"transpose_a", "transpose_b"}) {
      Expected<bool> transpose = scope.boolean(node, key);
      if (!transpose)
        return transpose.takeError();
      if (*transpose)
        return scope.error(key, "is true for an FP8 grouped GEMM, which is "
                                "TN");
    }
    Expected<bool> fastAccum = scope.boolean(node, "fast_accum");
    if (!fastAccum)
      return fastAccum.takeError();
    step.fastAccum = *fastAccum;
    // How the operands are scaled; their scale_inv values are checked once
    // the shapes are (parseGroupedScales).
    for (auto [key, scaling] : {std::pair{"a_scaling", &step.aScaling},
                                std::pair{"b_scaling", &step.bScaling}}) {
      if (!node.get(key))
        continue; // "tensor", as in plans written before the keys
      Expected<StringRef> name = scope.string(node, key);
      if (!name)
        return name.takeError();
      std::optional<GemmScaling> parsed = parseGemmScaling(*name);
      if (!parsed)
        return scope.error(key, "is \"" + *name +
                                    "\"; expected \"tensor\", \"block_1d\" "
                                    "or \"block_2d\"");
      *scaling = *parsed;
    }
  } else {
    if (isFp8(aElement) || isFp8(bElement))
      return scope.error("fp8", "is not true, but the operands are FP8 (" +
                                    printType(step.aType) + ", " +
                                    printType(step.bType) + ")");
    if (aElement != bElement || !isFloat(aElement))
      return scope.error("b_type", "is " + printType(step.bType) + " and " +
                                       "'a_type' " + printType(step.aType) +
                                       "; a grouped GEMM takes two bf16, f16 "
                                       "or f32 operands of one type");
    if (outElement != aElement && outElement != ElementType::F32)
      return scope.error("out_type", "is " + printType(step.outType) +
                                         "; it must be the operands' type or "
                                         "f32");
    for (StringRef key :
         {"a_scale_inv", "b_scale_inv", "a_scaling", "b_scaling"})
      if (node.get(key))
        return scope.error(key, "is given for a grouped GEMM that is not FP8 "
                                "('fp8' is not true)");
    Expected<bool> fastAccum = scope.boolean(node, "fast_accum");
    if (!fastAccum)
      return fastAccum.takeError();
    if (*fastAccum)
      return scope.error("fast_accum", "is true for a grouped GEMM that is "
                                       "not FP8");
    Expected<bool> transposeA = scope.boolean(node, "transpose_a");
    if (!transposeA)
      return transposeA.takeError();
    Expected<bool> transposeB = scope.boolean(node, "transpose_b");
    if (!transposeB)
      return transposeB.takeError();
    step.transposeA = *transposeA;
    step.transposeB = *transposeB;
  }

  // Shapes. op(x) is x, or x transposed; FP8 is TN (transpose_b).
  const std::vector<int64_t> &aShape = step.aType.shape,
                             &bShape = step.bType.shape,
                             &outShape = step.outType.shape;
  bool transposeB = step.fp8 || step.transposeB;
  auto shapeError = [&](StringRef key, const TensorType &type,
                        const Twine &expected) {
    return scope.error(key, "is " + printType(type) + ", expected " + expected +
                                " for a grouped GEMM of form \"" +
                                groupedFormName(step.form) + "\"" +
                                (step.fp8 ? " (FP8, TN)" : ""));
  };
  auto dims = [](std::initializer_list<StringRef> names) {
    return "[" + llvm::join(names, ", ") + "]";
  };
  int64_t tokens = 0, n = 0;
  if (rows) {
    // a [T, K] (never transposed: segments are its rows), b [G, N, K] or
    // [G, K, N], out [T, N].
    if (step.transposeA)
      return scope.error("transpose_a", "is true, but a grouped GEMM of form "
                                        "\"rows\" takes a as [T, K] (its "
                                        "segments are rows)");
    if (aShape.size() != 2)
      return shapeError("a_type", step.aType, dims({"T", "K"}));
    tokens = aShape[0];
    int64_t k = aShape[1];
    StringRef bDims = transposeB ? "[G, N, K]" : "[G, K, N]";
    if (bShape.size() != 3 || bShape[0] != g || bShape[transposeB ? 2 : 1] != k)
      return shapeError("b_type", step.bType,
                        bDims + " with G = " + Twine(g) +
                            " ('groups') and K = " + Twine(k) +
                            " (a's columns)");
    n = bShape[transposeB ? 1 : 2];
    if (outShape != std::vector<int64_t>{tokens, n})
      return shapeError("out_type", step.outType,
                        "[T, N] = [" + Twine(tokens) + ", " + Twine(n) + "]");
  } else {
    // The segments run along op(a)'s and op(b)'s K, which is T: FP8 a
    // [M, T], b [N, T]; else a [T, M] with transpose_a, b [T, N] without
    // transpose_b (or the transposed layouts).
    bool transposeA = !step.fp8 && step.transposeA;
    StringRef aDims = transposeA ? "[T, M]" : "[M, T]";
    StringRef bDims = transposeB ? "[N, T]" : "[T, N]";
    if (aShape.size() != 2)
      return shapeError("a_type", step.aType, aDims);
    tokens = transposeA ? aShape[0] : aShape[1];
    int64_t m = transposeA ? aShape[1] : aShape[0];
    if (bShape.size() != 2 || bShape[transposeB ? 1 : 0] != tokens)
      return shapeError("b_type", step.bType,
                        bDims + " with T = " + Twine(tokens) + " (from a)");
    n = transposeB ? bShape[0] : bShape[1];
    if (outShape != std::vector<int64_t>{g, m, n})
      return shapeError("out_type", step.outType,
                        "[G, M, N] = [" + Twine(g) + ", " + Twine(m) + ", " +
                            Twine(n) + "]");
  }

  // The bias: one [N] row per group, added to that group's rows.
  if (const json::Value *bias = node.get("bias");
      bias && bias->kind() != json::Value::Null) {
    if (!rows)
      return scope.error("bias", "is given for a grouped GEMM of form "
                                 "\"contraction\"; only the rows form adds a "
                                 "bias");
    Expected<int64_t> id = valueId(*bias, "bias", scope);
    if (!id)
      return id.takeError();
    const TensorType &type = function.values[*id].type;
    bool floatBias = step.fp8 ? type.element == ElementType::BF16 ||
                                    type.element == ElementType::F16
                              : isFloat(type.element);
    if (type.shape != std::vector<int64_t>{g, n} || !floatBias)
      return scope.error("bias",
                         "refers to value " + Twine(*id) + " of type " +
                             printType(type) + ", expected [G, N] = [" +
                             Twine(g) + ", " + Twine(n) + "] of " +
                             (step.fp8 ? "bf16 or f16" : "bf16, f16 or f32"));
    step.bias = *id;
  }

  // What each group's GEMM adds its product to (cuBLASLt's C, beta = 1).
  if (const json::Value *accumulate = node.get("accumulate");
      accumulate && accumulate->kind() != json::Value::Null) {
    if (rows)
      return scope.error("accumulate", "is given for a grouped GEMM of form "
                                       "\"rows\"; only the contraction form "
                                       "accumulates");
    Expected<int64_t> id = valueId(*accumulate, "accumulate", scope);
    if (!id)
      return id.takeError();
    const TensorType &type = function.values[*id].type;
    if (!sameType(type, step.outType))
      return scope.error("accumulate", "refers to value " + Twine(*id) +
                                           " of type " + printType(type) +
                                           "; it must have out's type " +
                                           printType(step.outType));
    step.accumulate = *id;
  }
  if (step.fp8)
    return parseGroupedScales(node, scope, step);
  return Error::success();
}

Error FunctionParser::parseGroupedScales(const json::Object &node,
                                         const Scope &scope,
                                         GroupedGemmStep &step) {
  std::optional<ElementType> biasElement;
  if (step.bias)
    biasElement = function.values[*step.bias].type.element;
  if (std::optional<std::pair<StringRef, std::string>> problem =
          groupedScalingProblem(step, biasElement))
    return scope.error(problem->first, problem->second);
  for (bool operandB : {false, true}) {
    StringRef key = operandB ? "b_scale_inv" : "a_scale_inv";
    if (!node.get(key))
      return scope.error(key, "is missing; an FP8 grouped GEMM needs both "
                              "scale_inv vectors (or block scale tensors)");
    Expected<int64_t> id = valueId(node, key, scope);
    if (!id)
      return id.takeError();
    const TensorType &type = function.values[*id].type;
    TensorType expected = groupedScaleType(step, operandB);
    GemmScaling scaling = operandB ? step.bScaling : step.aScaling;
    if (!sameType(type, expected)) {
      std::string what = "one scale_inv per group";
      if (scaling != GemmScaling::Tensor) {
        const TensorType &operand = operandB ? step.bType : step.aType;
        StringRef layout =
            step.form == GroupedGemmStep::Form::Contraction
                ? "cast transposed in token segments"
                : (operandB ? "cast per group" : "cast in row segments");
        what = ("the " + gemmScalingName(scaling) + " scales of " +
                printType(operand) + " " + layout +
                ", dialects/GroupedBlockScaleLayout.h")
                   .str();
      }
      return scope.error(key, "refers to value " + Twine(*id) + " of type " +
                                  printType(type) + ", expected " +
                                  printType(expected) + " (" + what + ")");
    }
    (operandB ? step.bScaleInv : step.aScaleInv) = *id;
  }
  return Error::success();
}

Error FunctionParser::parseAttention(const json::Object &node,
                                     const Scope &scope, AttentionStep &step) {
  Expected<std::vector<int64_t>> operands = valueIds(node, "operands", scope);
  if (!operands)
    return operands.takeError();
  step.operands = std::move(*operands);
  Expected<std::vector<int64_t>> results = valueIds(node, "results", scope);
  if (!results)
    return results.takeError();
  step.results = std::move(*results);
  // The operands the runtime writes in place must be there to be written.
  if (step.kvCache &&
      ((step.operands.size() != 7 && step.operands.size() != 8) ||
       step.results.size() != 1))
    return scope.error(
        "operands",
        "must be [q, k, v, k_cache, v_cache, cu_seqlens_q, cu_seqlens_kv] "
        "(and page_table when paged) with results [o] for a "
        "kv_cache_attention step; got " +
            Twine(step.operands.size()) + " operands and " +
            Twine(step.results.size()) + " results");
  if (node.get("token_strides")) {
    Expected<const json::Object *> strides =
        scope.object(node, "token_strides");
    if (!strides)
      return strides.takeError();
    for (const auto &[key, value] : **strides) {
      StringRef role = key;
      if (!llvm::is_contained({"q", "k", "v", "grad_q", "grad_k", "grad_v"},
                              role))
        return scope.error(("token_strides." + role).str(),
                           "is not a role (q, k, v, grad_q, grad_k, grad_v)");
      Expected<int64_t> stride = scope.count(**strides, role);
      if (!stride)
        return stride.takeError();
      if (*stride <= 0)
        return scope.error(("token_strides." + role).str(),
                           "must be positive, got " + Twine(*stride));
      step.tokenStrides[role.str()] = *stride;
    }
  }
  if (!node.get("attributes"))
    return Error::success();
  Expected<const json::Object *> attributes = scope.object(node, "attributes");
  if (!attributes)
    return attributes.takeError();
  for (const auto &[key, value] : **attributes) {
    std::optional<StringRef> text = value.getAsString();
    if (!text)
      return scope.error(("attributes." + StringRef(key)).str(),
                         "must be a string (the printed attribute), got " +
                             Scope::describe(value));
    step.attributes[std::string(StringRef(key))] = text->str();
  }
  return Error::success();
}

Error FunctionParser::parseInOut(const json::Object &node, const Scope &scope,
                                 int64_t &in, int64_t &out) {
  Expected<int64_t> inId = valueId(node, "in", scope);
  if (!inId)
    return inId.takeError();
  Expected<int64_t> outId = valueId(node, "out", scope);
  if (!outId)
    return outId.takeError();
  in = *inId;
  out = *outId;
  return Error::success();
}

Error FunctionParser::parseAmaxAllReduce(const json::Object &node,
                                         const Scope &scope,
                                         AmaxAllReduceStep &step) {
  if (Error error = parseInOut(node, scope, step.in, step.out))
    return error;
  const TensorType &inType = function.values[step.in].type;
  const TensorType &outType = function.values[step.out].type;
  if (inType.element != ElementType::F32 || !sameType(inType, outType))
    return scope.error("out", "is value " + Twine(step.out) + " of type " +
                                  printType(outType) + ", but 'in' (value " +
                                  Twine(step.in) + ") is " + printType(inType) +
                                  "; both must be the same f32 vector");
  return Error::success();
}

/// How errors call a tensor-parallel collective.
StringRef tpCollectiveName(TpCollective collective) {
  switch (collective) {
  case TpCollective::AllReduce:
    return "all-reduce";
  case TpCollective::AllGather:
    return "all-gather";
  case TpCollective::ReduceScatter:
    return "reduce-scatter";
  case TpCollective::AllToAll:
    return "all-to-all";
  }
  llvm_unreachable("unknown tensor-parallel collective");
}

bool FunctionParser::shareBytes(int64_t a, int64_t b) const {
  auto [aRoot, aOffset] = resolve(a);
  auto [bRoot, bOffset] = resolve(b);
  if (aRoot.kind != bRoot.kind)
    return false;
  // Arena values are offsets into one buffer; arguments and results are
  // buffers of their own.
  if (aRoot.kind == Storage::Arena) {
    aOffset += aRoot.index;
    bOffset += bRoot.index;
  } else if (aRoot.index != bRoot.index) {
    return false;
  }
  int64_t aBytes = function.values[a].bytes, bBytes = function.values[b].bytes;
  return aBytes && bBytes && aOffset < bOffset + bBytes &&
         bOffset < aOffset + aBytes;
}

Error FunctionParser::parseTpCollective(const json::Object &node,
                                        const Scope &scope,
                                        TpCollective collective,
                                        TpCollectiveStep &step) {
  if (Error error = parseInOut(node, scope, step.in, step.out))
    return error;
  Expected<int64_t> ranks = scope.integer(node, "ranks");
  if (!ranks)
    return ranks.takeError();
  int64_t in = step.in, out = step.out;
  step.ranks = *ranks;
  std::string what =
      ("a tensor-parallel " + tpCollectiveName(collective)).str();
  // One rank has nothing to combine with: the compiler leaves no step then.
  if (*ranks < 2)
    return scope.error("ranks", "is " + Twine(*ranks) + "; " + what +
                                    " spans at least 2 ranks");
  const TensorType &inType = function.values[in].type;
  const TensorType &outType = function.values[out].type;
  // What NCCL sums and the layers' activations and gradients are.
  if (inType.element != ElementType::BF16 &&
      inType.element != ElementType::F16 && inType.element != ElementType::F32)
    return scope.error(
        "in",
        "is value " + Twine(in) + " of type " + printType(inType) + "; " +
            what +
            (collective == TpCollective::AllGather ? " gathers" : " sums") +
            " bf16, f16 or f32");
  if (collective == TpCollective::AllReduce) {
    if (!sameType(inType, outType))
      return scope.error("out", "is value " + Twine(out) + " of type " +
                                    printType(outType) + ", but 'in' (value " +
                                    Twine(in) + ") is " + printType(inType) +
                                    "; both must have the same type");
    return Error::success();
  }
  if (inType.element != outType.element)
    return scope.error("out", "is value " + Twine(out) + " of type " +
                                  printType(outType) + ", but 'in' (value " +
                                  Twine(in) + ") is " + printType(inType) +
                                  "; both must have the same element type");
  // The gather writes a chunk per rank; the scatter reads one per rank and
  // keeps this rank's.
  bool gather = collective == TpCollective::AllGather;
  StringRef wholeField = gather ? "out" : "in";
  StringRef chunkField = gather ? "in" : "out";
  int64_t wholeId = gather ? out : in, chunkId = gather ? in : out;
  const TensorType &wholeType = function.values[wholeId].type;
  int64_t whole = wholeType.numElements();
  int64_t chunk = function.values[chunkId].type.numElements();
  if (whole % *ranks != 0 || whole / *ranks != chunk)
    return scope.error(
        wholeField,
        "is value " + Twine(wholeId) + " of type " + printType(wholeType) +
            " (" + Twine(whole) + " elements), but '" + chunkField +
            "' (value " + Twine(chunkId) + ") holds " + Twine(chunk) + "; " +
            what + " over " + Twine(*ranks) + " ranks " +
            (gather ? "writes " : "reads ") + Twine(*ranks) +
            " times the elements it " + (gather ? "reads" : "writes"));
  // NCCL's in-place forms want `in` at this rank's chunk of `out`; the
  // plans never ask for them.
  if (shareBytes(in, out))
    return scope.error("out", "is value " + Twine(out) +
                                  ", which shares bytes with 'in' (value " +
                                  Twine(in) + "); " + what +
                                  " runs out of place");
  return Error::success();
}

Error FunctionParser::parseCpCollective(const json::Object &node,
                                        const Scope &scope,
                                        CpCollectiveStep &step) {
  if (Error error = parseInOut(node, scope, step.in, step.out))
    return error;
  Expected<int64_t> ranks = scope.integer(node, "ranks");
  if (!ranks)
    return ranks.takeError();
  Expected<int64_t> seqDim = scope.integer(node, "seq_dim");
  if (!seqDim)
    return seqDim.takeError();
  Expected<bool> loadBalanced = scope.boolean(node, "load_balanced");
  if (!loadBalanced)
    return loadBalanced.takeError();
  step.ranks = *ranks;
  step.seqDim = *seqDim;
  step.loadBalanced = *loadBalanced;
  StringRef what = step.allToAll ? "a context-parallel all-to-all"
                   : step.gather ? "a context-parallel all-gather"
                                 : "a context-parallel reduce-scatter";
  if (*ranks < 2)
    return scope.error("ranks", "is " + Twine(*ranks) + "; " + what +
                                    " spans at least 2 ranks");
  const TensorType &inType = function.values[step.in].type;
  const TensorType &outType = function.values[step.out].type;
  if ((inType.element != ElementType::BF16 &&
       inType.element != ElementType::F16 &&
       inType.element != ElementType::F32) ||
      inType.element != outType.element)
    return scope.error("out", "is value " + Twine(step.out) + " of type " +
                                  printType(outType) + " and 'in' (value " +
                                  Twine(step.in) + ") " + printType(inType) +
                                  "; " + what +
                                  " takes one element type, bf16, f16 or f32");
  if (step.allToAll) {
    if (Error error = parseCpAllToAllShapes(node, scope, step))
      return error;
  } else if (Error error = checkCpGatherShapes(scope, step, what))
    return error;
  if (shareBytes(step.in, step.out))
    return scope.error("out", "is value " + Twine(step.out) +
                                  ", which shares bytes with 'in' (value " +
                                  Twine(step.in) + "); " + what +
                                  " runs out of place");
  return Error::success();
}

Error FunctionParser::checkCpGatherShapes(const Scope &scope,
                                          const CpCollectiveStep &step,
                                          StringRef what) {
  const TensorType &inType = function.values[step.in].type;
  const TensorType &outType = function.values[step.out].type;
  int64_t ranks = step.ranks, seqDim = step.seqDim;
  // The whole sequence and this rank's tokens: the same shape but for dim
  // seq_dim, ranks times longer in the whole one.
  const TensorType &whole = step.gather ? outType : inType;
  const TensorType &local = step.gather ? inType : outType;
  size_t rank = whole.shape.size();
  if (Error error = checkCpSeqDim(scope, seqDim, rank))
    return error;
  bool shapesMatch = local.shape.size() == rank;
  for (size_t dim = 0; shapesMatch && dim < rank; ++dim)
    shapesMatch = whole.shape[dim] ==
                  local.shape[dim] * (dim == size_t(seqDim) ? ranks : 1);
  if (!shapesMatch)
    return scope.error(step.gather ? "out" : "in",
                       "is " + printType(whole) + ", this rank's tokens " +
                           printType(local) + "; " + what + " over " +
                           Twine(ranks) +
                           " ranks has the same shape with dim seq_dim " +
                           Twine(ranks) + " times longer");
  return checkCpChunks(scope, step, local);
}

Error FunctionParser::parseCpAllToAllShapes(const json::Object &node,
                                            const Scope &scope,
                                            CpCollectiveStep &step) {
  Expected<int64_t> headDim = scope.integer(node, "head_dim");
  if (!headDim)
    return headDim.takeError();
  step.headDim = *headDim;
  const TensorType &inType = function.values[step.in].type;
  const TensorType &outType = function.values[step.out].type;
  size_t rank = inType.shape.size();
  if (Error error = checkCpSeqDim(scope, step.seqDim, rank))
    return error;
  if (*headDim < 0 || size_t(*headDim) >= rank || *headDim == step.seqDim)
    return scope.error("head_dim", "is " + Twine(*headDim) +
                                       "; the heads are a dim other than "
                                       "seq_dim (" +
                                       Twine(step.seqDim) +
                                       ") of a tensor of rank " + Twine(rank));
  // To heads: the sequence N times longer and the heads N times fewer in
  // `out`; to sequence the other way round; every other dim the same.
  auto relates = [&](const TensorType &tokens, const TensorType &heads) {
    if (tokens.shape.size() != rank || heads.shape.size() != rank)
      return false;
    for (size_t dim = 0; dim < rank; ++dim) {
      int64_t expected = tokens.shape[dim];
      if (int64_t(dim) == step.seqDim)
        expected *= step.ranks;
      else if (int64_t(dim) == *headDim) {
        if (expected % step.ranks != 0)
          return false;
        expected /= step.ranks;
      }
      if (heads.shape[dim] != expected)
        return false;
    }
    return true;
  };
  if (relates(inType, outType))
    step.gather = true;
  else if (relates(outType, inType))
    step.gather = false;
  else
    return scope.error(
        "out", "is " + printType(outType) + " and 'in' " + printType(inType) +
                   "; a context-parallel all-to-all over " + Twine(step.ranks) +
                   " ranks makes dim seq_dim that many times longer and dim "
                   "head_dim that many times shorter, or the reverse");
  return checkCpChunks(scope, step, step.gather ? inType : outType);
}

Error FunctionParser::checkCpSeqDim(const Scope &scope, int64_t seqDim,
                                    size_t rank) {
  if (seqDim < 0 || seqDim > 1 || size_t(seqDim) >= rank)
    return scope.error("seq_dim", "is " + Twine(seqDim) +
                                      "; the sequence is dim 0 (sbhd) or 1 "
                                      "(bshd) of a tensor of rank " +
                                      Twine(rank));
  return Error::success();
}

Error FunctionParser::checkCpChunks(const Scope &scope,
                                    const CpCollectiveStep &step,
                                    const TensorType &local) {
  if (step.loadBalanced && local.shape[step.seqDim] % 2 != 0)
    return scope.error("load_balanced",
                       "is set, but this rank's " +
                           Twine(local.shape[step.seqDim]) +
                           " tokens do not split into two chunks");
  return Error::success();
}

/// Checks that every context-parallel step of the plan spans as many ranks:
/// a program runs over one context-parallel group.
Error checkContextParallelRanks(const Plan &plan) {
  int64_t ranks = 0;
  for (const FunctionPlan &function : plan.functions)
    for (auto [index, step] : llvm::enumerate(function.steps)) {
      const auto *cp = std::get_if<CpCollectiveStep>(&step);
      if (!cp)
        continue;
      if (ranks && cp->ranks != ranks)
        return Scope("function '" + function.name + "', step " +
                     std::to_string(index))
            .error("ranks",
                   "is " + Twine(cp->ranks) +
                       ", but an earlier "
                       "context-parallel step has " +
                       Twine(ranks) +
                       "; a plan runs over one context-parallel group");
      ranks = cp->ranks;
    }
  return Error::success();
}

/// Checks that every tensor-parallel step of the plan (tp_allreduce,
/// tp_allgather, tp_reducescatter) spans as many ranks: a program runs over
/// one tensor-parallel group.
Error checkTensorParallelRanks(const Plan &plan) {
  std::optional<std::string> first;
  int64_t ranks = 0;
  for (const FunctionPlan &function : plan.functions)
    for (auto [index, step] : llvm::enumerate(function.steps)) {
      std::optional<TpStepRef> collective = asTpStep(step);
      if (!collective)
        continue;
      int64_t stepRanks = collective->step.ranks;
      std::string where = "function '" + function.name + "', step " +
                          std::to_string(index) + " (" +
                          tpStepKind(collective->collective).str() + ")";
      if (!first) {
        first = where;
        ranks = stepRanks;
      } else if (stepRanks != ranks) {
        return Scope(where).error("ranks", "is " + Twine(stepRanks) + ", but " +
                                               *first + " has " + Twine(ranks) +
                                               "; a plan runs over one "
                                               "tensor-parallel group");
      }
    }
  return Error::success();
}

/// Checks te.backward_arg / te.backward_result of a wgrad function's entry
/// (`backward`: the backward it is the wgrad function of, else null)
/// against the backward's entry.
Error checkBackwardEntry(const Scope &here, const InterfaceEntry &entry,
                         const TensorType &type, const FunctionPlan *backward) {
  for (auto [key, slot, ofResults] :
       {std::tuple{"te.backward_arg", &entry.backwardArg, false},
        std::tuple{"te.backward_result", &entry.backwardResult, true}}) {
    if (!*slot)
      continue;
    if (!backward)
      return here.error(key, "is given in a function that is not a wgrad "
                             "function ('wgrad_of' is missing)");
    const std::vector<InterfaceEntry> &entries =
        ofResults ? backward->results : backward->arguments;
    int64_t at = **slot;
    if (at >= int64_t(entries.size()))
      return here.error(key, "is " + Twine(at) + " but '" + backward->name +
                                 "' has " + Twine(entries.size()) +
                                 (ofResults ? " results" : " arguments"));
    const TensorType &backwardType = backward->values[entries[at].value].type;
    if (!sameType(type, backwardType))
      return here.error(key, "is " + Twine(at) + ", of type " +
                                 printType(backwardType) + " in '" +
                                 backward->name + "', but the argument is " +
                                 printType(type));
  }
  return Error::success();
}

/// Checks what refers to other functions: backward_of, and the training
/// interface of each backward (te.forward_arg, te.forward_result,
/// te.grad_of), whose entries must match the forward's types.
Error checkFunctions(const Plan &plan) {
  llvm::StringMap<size_t> names;
  for (auto [index, function] : llvm::enumerate(plan.functions))
    if (!names.try_emplace(function.name, index).second)
      return Scope("function '" + function.name + "'")
          .error("name", "is used by functions " + Twine(names[function.name]) +
                             " and " + Twine(index));

  llvm::StringMap<const FunctionPlan *> backwards, wgrads;
  for (const FunctionPlan &function : plan.functions) {
    Scope scope("function '" + function.name + "'");
    const FunctionPlan *forward = nullptr;
    if (!function.backwardOf.empty()) {
      forward = plan.find(function.backwardOf);
      if (!forward)
        return scope.error("backward_of", "names '" + function.backwardOf +
                                              "', which is not a function of "
                                              "the plan");
      if (forward == &function)
        return scope.error("backward_of", "names the function itself");
      if (!forward->backwardOf.empty())
        return scope.error("backward_of", "names '" + forward->name +
                                              "', which is itself a backward");
      auto [it, inserted] = backwards.try_emplace(forward->name, &function);
      if (!inserted)
        return scope.error("backward_of", "names '" + forward->name +
                                              "', whose backward is '" +
                                              it->second->name + "' already");
    }
    // A wgrad function reads the forward's tensors as its backward does.
    const FunctionPlan *backward = nullptr;
    if (!function.wgradOf.empty()) {
      backward = plan.find(function.wgradOf);
      if (!function.backwardOf.empty())
        return scope.error("wgrad_of", "is given with 'backward_of'; a "
                                       "function is one or the other");
      if (!backward || backward->backwardOf.empty())
        return scope.error("wgrad_of", "names '" + function.wgradOf +
                                           "', which is not a backward "
                                           "function of the plan");
      auto [it, inserted] = wgrads.try_emplace(backward->name, &function);
      if (!inserted)
        return scope.error("wgrad_of", "names '" + backward->name +
                                           "', whose wgrad function is '" +
                                           it->second->name + "' already");
      forward = plan.find(backward->backwardOf);
      if (!forward)
        return scope.error("wgrad_of", "names '" + backward->name +
                                           "', whose forward is missing");
    }

    for (bool results : {false, true}) {
      const std::vector<InterfaceEntry> &entries =
          results ? function.results : function.arguments;
      StringRef kind = results ? "result" : "argument";
      for (auto [index, entry] : llvm::enumerate(entries)) {
        Scope here(scope.where + ", " + kind.str() + " " +
                   std::to_string(index));
        const TensorType &type = function.values[entry.value].type;
        for (auto [key, slot] :
             {std::pair{"te.updates_arg", &entry.updatesArg},
              std::pair{"te.accumulates", &entry.accumulatesArg}}) {
          if (!*slot)
            continue;
          const InterfaceEntry &target = function.arguments[**slot];
          const TensorType &updated = function.values[target.value].type;
          if (!sameType(type, updated))
            return here.error(key, "is " + Twine(**slot) +
                                       ", an argument of type " +
                                       printType(updated) + ", but the " +
                                       kind + " is " + printType(type));
          // A main_grad is the caller's own argument, beside the gradients.
          if (slot == &entry.accumulatesArg &&
              (!results || !entry.gradOf || target.forwardArg ||
               target.forwardResult))
            return here.error(key, "must be on a gradient result and name an "
                                   "argument of the backward's own (not a "
                                   "forward argument or result)");
        }
        if (Error error = checkBackwardEntry(here, entry, type, backward))
          return error;
        for (auto [key, slot, ofResults] :
             {std::tuple{"te.forward_arg", &entry.forwardArg, false},
              std::tuple{"te.forward_result", &entry.forwardResult, true},
              std::tuple{"te.grad_of", &entry.gradOf, false}}) {
          if (!*slot)
            continue;
          if (!forward)
            return here.error(key, "is given in a function that is not a "
                                   "backward ('backward_of' is missing)");
          const std::vector<InterfaceEntry> &forwardEntries =
              ofResults ? forward->results : forward->arguments;
          StringRef forwardKind = ofResults ? "results" : "arguments";
          int64_t at = **slot;
          if (at >= int64_t(forwardEntries.size()))
            return here.error(
                key, "is " + Twine(at) + " but '" + forward->name + "' has " +
                         Twine(forwardEntries.size()) + " " + forwardKind);
          const TensorType &forwardType =
              forward->values[forwardEntries[at].value].type;
          // A gradient accumulated into main_grad has main_grad's type
          // (float32 unless main_grad_dtype says otherwise).
          bool highPrecision = type.element == ElementType::F32 ||
                               type.element == ElementType::BF16 ||
                               type.element == ElementType::F16;
          bool mainGrad = slot == &entry.gradOf && entry.accumulatesArg &&
                          highPrecision && type.shape == forwardType.shape;
          // An FP8 weight (fp8_weights) has a high-precision gradient.
          bool fp8WeightGrad = slot == &entry.gradOf && highPrecision &&
                               isFp8(forwardType.element) &&
                               type.shape == forwardType.shape;
          if (!mainGrad && !fp8WeightGrad && !sameType(type, forwardType))
            return here.error(key, "is " + Twine(at) + ", of type " +
                                       printType(forwardType) + " in '" +
                                       forward->name + "', but the " + kind +
                                       " is " + printType(type));
          // The backward is given the pointer the forward was: host memory
          // exactly when the forward's argument is a host argument.
          if (slot == &entry.forwardArg &&
              entry.host != forwardEntries[at].host)
            return here.error(key,
                              "is " + Twine(at) + ", " +
                                  (forwardEntries[at].host ? "a" : "not a") +
                                  " host argument of '" + forward->name +
                                  "', but the argument is " +
                                  (entry.host ? "one" : "not") +
                                  " (\"host\" must agree)");
        }
      }
    }
  }
  return Error::success();
}

} // namespace

Expected<Plan> tejit::runtime::parsePlan(const json::Value &document) {
  Scope scope("");
  const json::Object *root = document.getAsObject();
  if (!root)
    return scope.error("must be an object, got " + Scope::describe(document));
  Expected<StringRef> format = scope.string(*root, "format");
  if (!format)
    return format.takeError();
  if (*format != "tejit-plan")
    return scope.error("format", "is \"" + *format + "\", not \"tejit-plan\"");
  Expected<int64_t> version = scope.integer(*root, "version");
  if (!version)
    return version.takeError();
  // Version 2 added the scratch hand-over between steps
  // (scratch_from_previous_step): a reader of version 1 alone would zero the
  // scratch and compute with zeros, so version-2 plans are refused there.
  // Version 3 says its state updates may run in place (Plan::version).
  // Version 4 kernels may take a skip flag last ("skip_flag"): a reader of
  // version 3 would launch them one argument short.
  // Version 5 adds host arguments ("host": true) and grouped_gemm steps.
  // Version 6 adds wgrad functions ("wgrad_of", delay_wgrad_compute): a
  // reader of version 5 would run the backward without the weight gradients.
  if (*version < 1 || *version > 6)
    return scope.error("version",
                       "is " + Twine(*version) + "; versions 1 to 6 are read");

  Plan plan;
  plan.version = *version;
  Expected<StringRef> arch = scope.string(*root, "arch");
  if (!arch)
    return arch.takeError();
  plan.arch = arch->str();
  if (root->get("build_id")) {
    Expected<StringRef> buildId = scope.string(*root, "build_id");
    if (!buildId)
      return buildId.takeError();
    plan.buildId = buildId->str();
  }

  Expected<const json::Array *> functions = scope.array(*root, "functions");
  if (!functions)
    return functions.takeError();
  if ((*functions)->empty())
    return scope.error("functions", "is empty");
  plan.functions.resize((*functions)->size());
  for (auto [index, function] : llvm::enumerate(**functions)) {
    std::string where = "function " + std::to_string(index);
    Expected<const json::Object *> object =
        Scope(where).object(function, "functions[]");
    if (!object)
      return object.takeError();
    if (Error error =
            FunctionParser(**object, plan.functions[index], where).parse())
      return error;
  }
  if (Error error = checkFunctions(plan))
    return error;
  if (Error error = checkContextParallelRanks(plan))
    return error;
  if (Error error = checkTensorParallelRanks(plan))
    return error;
  return plan;
}

Expected<Plan> tejit::runtime::parsePlan(StringRef text) {
  Expected<json::Value> document = json::parse(text);
  if (!document)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "plan: not valid JSON: " +
                                       llvm::toString(document.takeError()));
  return parsePlan(*document);
}
