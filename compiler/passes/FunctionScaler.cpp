//===- FunctionScaler.cpp - FP8 casts and scale state of one function -----===//
#include "compiler/passes/FunctionScaler.h"
#include "dialects/BlockScaleLayout.h"
#include "dialects/GroupedBlockScaleLayout.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit;

static RankedTensorType slotType(MLIRContext *context) {
  return RankedTensorType::get({1}, Float32Type::get(context));
}

FunctionScaler::FunctionScaler(func::FuncOp function, StringRef metaPrefix)
    : function(function), metaPrefix(metaPrefix.str()),
      builder(function.getContext()) {}

Value FunctionScaler::addArgument(Type type, StringRef name) {
  unsigned index = function.getNumArguments();
  function.insertArgument(index, type,
                          builder.getDictionaryAttr(builder.getNamedAttr(
                              "te.name", builder.getStringAttr(name))),
                          function.getLoc());
  return function.getArgument(index);
}

FunctionScaler::MetaGroup &FunctionScaler::metaGroup(DelayedScalingAttr recipe,
                                                     FloatType fp8Type) {
  auto key = std::make_pair(Attribute(recipe), Type(fp8Type));
  auto it = groups.find(key);
  if (it != groups.end())
    return it->second;
  // One slot to start with; finish() widens the vectors to the slot count.
  std::string prefix = metaPrefix;
  if (!groups.empty())
    prefix += "." + std::to_string(groups.size());
  MLIRContext *context = function.getContext();
  MetaGroup group{recipe, fp8Type, {}, {}, {}, 0, {}};
  group.scale =
      cast<BlockArgument>(addArgument(slotType(context), prefix + ".scale"));
  group.scaleInv = cast<BlockArgument>(
      addArgument(slotType(context), prefix + ".scale_inv"));
  group.history = cast<BlockArgument>(
      addArgument(RankedTensorType::get({recipe.getAmaxHistoryLen(), 1},
                                        Float32Type::get(context)),
                  prefix + ".amax_history"));
  return groups.insert({key, group}).first->second;
}

Value FunctionScaler::slots(Value vector, int64_t index, int64_t count,
                            Location loc) {
  auto type =
      RankedTensorType::get({count}, Float32Type::get(function.getContext()));
  return builder.create<SliceOp>(loc, type, vector,
                                 builder.getI64IntegerAttr(index));
}

MetaSlot FunctionScaler::addSlot(DelayedScalingAttr recipe, FloatType fp8Type,
                                 Operation *user) {
  builder.setInsertionPoint(user);
  Location loc = user->getLoc();
  MetaGroup &group = metaGroup(recipe, fp8Type);
  int64_t index = group.slots++;
  group.amaxes.push_back(nullptr);
  return {slots(group.scale, index, 1, loc),
          slots(group.scaleInv, index, 1, loc),
          {recipe, fp8Type},
          group.amaxes.size() - 1};
}

void FunctionScaler::setAmax(const MetaSlot &slot, Value amax) {
  groups.find(slot.group)->second.amaxes[slot.amaxIndex] = amax;
}

/// `value` [rows, cols] (or its transpose) cast in blocks.
static Fp8Value blockQuantize(OpBuilder &builder, Location loc, Value value,
                              FloatType fp8Type, int64_t blockDim, bool power2,
                              bool transpose) {
  auto type = cast<RankedTensorType>(value.getType());
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  if (transpose)
    std::swap(rows, cols);
  auto shape = tejit::blockscale::scaleShape(rows, cols, blockDim);
  auto quantized = builder.create<BlockQuantizeOp>(
      loc, RankedTensorType::get({rows, cols}, fp8Type),
      RankedTensorType::get({shape[0], shape[1]}, builder.getF32Type()), value,
      builder.getI64IntegerAttr(blockDim),
      transpose ? builder.getUnitAttr() : nullptr,
      power2 ? builder.getUnitAttr() : nullptr);
  return {quantized.getOutput(), quantized.getScaleInv(), value, blockDim,
          power2};
}

/// The block dims Float8BlockScaling gives an operand of `role`.
static int64_t blockDimOf(BlockScalingAttr block, OperandRole role) {
  switch (role) {
  case OperandRole::weight:
    return block.getWBlockScalingDim();
  case OperandRole::grad:
    return block.getGradBlockScalingDim();
  case OperandRole::input:
    break;
  }
  return block.getXBlockScalingDim();
}

Fp8Value FunctionScaler::quantize(Value value, FP8RecipeAttrInterface recipe,
                                  FloatType fp8Type, Operation *user,
                                  OperandRole role) {
  auto key = std::make_pair(value, Type(fp8Type));
  if (auto it = casts.find(key); it != casts.end())
    return it->second;
  builder.setInsertionPoint(user);
  Location loc = user->getLoc();
  MLIRContext *context = function.getContext();
  auto fp8TensorType = RankedTensorType::get(
      cast<RankedTensorType>(value.getType()).getShape(), fp8Type);
  Fp8Value result;
  if (auto delayed = dyn_cast<DelayedScalingAttr>(recipe)) {
    MetaGroup &group = metaGroup(delayed, fp8Type);
    int64_t index = group.slots++;
    Value scale = slots(group.scale, index, 1, loc);
    auto quantized = builder.create<QuantizeOp>(
        loc, fp8TensorType, slotType(context), value, scale);
    group.amaxes.push_back(quantized.getAmax());
    result = {quantized.getOutput(), slots(group.scaleInv, index, 1, loc)};
  } else if (auto block = dyn_cast<BlockScalingAttr>(recipe)) {
    result = blockQuantize(builder, loc, value, fp8Type,
                           blockDimOf(block, role), block.getPower_2Scale(),
                           /*transpose=*/false);
  } else {
    auto current = cast<CurrentScalingAttr>(recipe);
    Value amax = builder.create<AmaxOp>(loc, slotType(context), value);
    auto scales = builder.create<ComputeScaleOp>(
        loc, slotType(context), slotType(context), amax, TypeAttr::get(fp8Type),
        current.getPower_2Scale() ? builder.getUnitAttr() : nullptr);
    auto quantized = builder.create<QuantizeOp>(
        loc, fp8TensorType, slotType(context), value, scales.getScale());
    result = {quantized.getOutput(), scales.getScaleInv()};
  }
  casts[key] = result;
  return result;
}

/// The type of `value` cast to `fp8Type` by te.grouped_quantize, transposed
/// per group with `transpose` (the last two dims swapped).
static RankedTensorType groupedCastType(Value value, FloatType fp8Type,
                                        bool transpose) {
  SmallVector<int64_t> shape(
      cast<RankedTensorType>(value.getType()).getShape());
  if (transpose)
    std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
  return RankedTensorType::get(shape, fp8Type);
}

/// The number of groups of a grouped cast of `value`: the size of
/// `mSplits`, else the leading dim of stacked matrices [G, R, C].
static int64_t numGroups(Value value, Value mSplits) {
  return cast<RankedTensorType>((mSplits ? mSplits : value).getType())
      .getDimSize(0);
}

/// `value` cast per group in blocks (te.grouped_block_quantize): its row
/// segments with `mSplits`, else its stacked matrices; transposed per group
/// with `transpose`.
static Fp8Value groupedBlockQuantize(OpBuilder &builder, Location loc,
                                     Value value, Value mSplits,
                                     FloatType fp8Type, int64_t blockDim,
                                     bool power2, bool transpose) {
  int64_t groups = numGroups(value, mSplits);
  RankedTensorType castType = groupedCastType(value, fp8Type, transpose);
  namespace layout = tejit::groupedblockscale;
  layout::Layout kind = !mSplits    ? layout::Layout::Stacked
                        : transpose ? layout::Layout::TransposedSegments
                                    : layout::Layout::Segments;
  auto scaleType = RankedTensorType::get(
      layout::castScaleShape(kind, castType.getShape().data(), groups,
                             blockDim),
      builder.getF32Type());
  auto quantized = builder.create<GroupedBlockQuantizeOp>(
      loc, castType, scaleType, value, mSplits,
      builder.getI64IntegerAttr(blockDim),
      transpose ? builder.getUnitAttr() : nullptr,
      power2 ? builder.getUnitAttr() : nullptr);
  Fp8Value result{quantized.getOutput(), quantized.getScaleInv(), value,
                  blockDim, power2};
  result.grouped = true;
  result.mSplits = mSplits;
  return result;
}

Fp8Value FunctionScaler::quantizeGrouped(Value value, Value mSplits,
                                         FP8RecipeAttrInterface recipe,
                                         FloatType fp8Type, Operation *user,
                                         OperandRole role) {
  auto key = std::make_tuple(value, Type(fp8Type), mSplits);
  if (auto it = groupedCasts.find(key); it != groupedCasts.end())
    return it->second;
  builder.setInsertionPoint(user);
  Location loc = user->getLoc();
  if (auto block = dyn_cast<BlockScalingAttr>(recipe))
    return groupedCasts[key] = groupedBlockQuantize(
               builder, loc, value, mSplits, fp8Type, blockDimOf(block, role),
               block.getPower_2Scale(), /*transpose=*/false);
  int64_t groups = numGroups(value, mSplits);
  auto vectorType =
      RankedTensorType::get({groups}, Float32Type::get(function.getContext()));
  Value scale, scaleInv;
  GroupedQuantizeOp quantized;
  auto castRows = [&] {
    return builder.create<GroupedQuantizeOp>(
        loc, groupedCastType(value, fp8Type, /*transpose=*/false), vectorType,
        value, scale, mSplits, /*transpose=*/nullptr);
  };
  if (auto delayed = dyn_cast<DelayedScalingAttr>(recipe)) {
    // G consecutive slots; the [G] amax fills them in the update.
    MetaGroup &group = metaGroup(delayed, fp8Type);
    int64_t index = group.slots;
    group.slots += groups;
    scale = slots(group.scale, index, groups, loc);
    quantized = castRows();
    group.amaxes.push_back(quantized.getAmax());
    scaleInv = slots(group.scaleInv, index, groups, loc);
  } else {
    // Current scaling: each group's scale from its own amax.
    auto current = cast<CurrentScalingAttr>(recipe);
    Value amax = builder.create<GroupedAmaxOp>(loc, vectorType, value, mSplits);
    auto scales = builder.create<ComputeScaleOp>(
        loc, vectorType, vectorType, amax, TypeAttr::get(fp8Type),
        current.getPower_2Scale() ? builder.getUnitAttr() : nullptr);
    scale = scales.getScale();
    scaleInv = scales.getScaleInv();
    quantized = castRows();
  }
  Fp8Value result{quantized.getOutput(), scaleInv};
  result.source = value;
  result.grouped = true;
  result.groupScale = scale;
  result.mSplits = mSplits;
  return groupedCasts[key] = result;
}

Fp8Value FunctionScaler::transpose(Fp8Value value) {
  if (auto it = transposed.find(value.data); it != transposed.end())
    return it->second;
  builder.setInsertionPointAfterValue(value.data);
  if (value.isGrouped() && value.blockDim) {
    // Cast again from the high-precision source, per group and transposed,
    // with blocks of its own (along the tokens of each segment for x^T).
    auto fp8Type = cast<FloatType>(
        cast<RankedTensorType>(value.data.getType()).getElementType());
    return transposed[value.data] = groupedBlockQuantize(
               builder, value.data.getLoc(), value.source, value.mSplits,
               fp8Type, value.blockDim, value.power2, /*transpose=*/true);
  }
  if (value.isGrouped()) {
    // Cast again from the high-precision source, per group with the same
    // scales: the K-major copy a backward GEMM reads (its amax is the row
    // cast's again, and unused).
    auto fp8Type = cast<FloatType>(
        cast<RankedTensorType>(value.data.getType()).getElementType());
    auto quantized = builder.create<GroupedQuantizeOp>(
        value.data.getLoc(),
        groupedCastType(value.source, fp8Type, /*transpose=*/true),
        value.groupScale.getType(), value.source, value.groupScale,
        value.mSplits, builder.getUnitAttr());
    Fp8Value result = value;
    result.data = quantized.getOutput();
    return transposed[value.data] = result;
  }
  if (value.blockDim) {
    auto fp8Type = cast<FloatType>(
        cast<RankedTensorType>(value.data.getType()).getElementType());
    return transposed[value.data] = blockQuantize(
               builder, value.data.getLoc(), value.source, fp8Type,
               value.blockDim, value.power2, /*transpose=*/true);
  }
  auto type = cast<RankedTensorType>(value.data.getType());
  auto transposedType = RankedTensorType::get(
      {type.getDimSize(1), type.getDimSize(0)}, type.getElementType());
  Value data = builder.create<TransposeOp>(value.data.getLoc(), transposedType,
                                           value.data);
  Fp8Value result{data, value.scaleInv};
  transposed[value.data] = result;
  return result;
}

Fp8Value FunctionScaler::fp8Argument(BlockArgument weight, StringRef name,
                                     FloatType fp8Type, bool withTranspose) {
  // A matrix [R, C], or GroupedLinear's stacked matrices [G, R, C], each
  // with a scale of its own (scale_inv [G]) and transposed per matrix.
  auto type = cast<RankedTensorType>(weight.getType());
  bool stacked = type.getRank() == 3;
  auto castKey = std::make_pair(Value(weight), Type(fp8Type));
  auto groupedKey = std::make_tuple(Value(weight), Type(fp8Type), Value());
  if (auto it = casts.find(castKey); it != casts.end())
    return it->second;
  if (auto it = groupedCasts.find(groupedKey); it != groupedCasts.end())
    return it->second;
  weight.setType(RankedTensorType::get(type.getShape(), fp8Type));
  MLIRContext *context = function.getContext();
  int64_t scales = stacked ? type.getDimSize(0) : 1;
  Fp8Value result{weight, addArgument(RankedTensorType::get(
                                          {scales}, Float32Type::get(context)),
                                      (name + ".scale_inv").str())};
  result.grouped = stacked;
  if (withTranspose) {
    SmallVector<int64_t> shape(type.getShape());
    std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
    Value data = addArgument(RankedTensorType::get(shape, fp8Type),
                             (name + ".transpose").str());
    Fp8Value transpose = result;
    transpose.data = data;
    transposed[weight] = transpose;
  }
  function.setType(FunctionType::get(
      context, function.front().getArgumentTypes(), function.getResultTypes()));
  if (stacked)
    return groupedCasts[groupedKey] = result;
  return casts[castKey] = result;
}

void FunctionScaler::addResult(Value value, StringRef name,
                               BlockArgument updates) {
  auto returnOp = cast<func::ReturnOp>(function.front().getTerminator());
  returnOp.getOperandsMutable().append(value);
  unsigned index = function.getNumResults();
  function.insertResult(
      index, value.getType(),
      builder.getDictionaryAttr(
          {builder.getNamedAttr("te.name", builder.getStringAttr(name)),
           builder.getNamedAttr(
               "te.updates_arg",
               builder.getI64IntegerAttr(updates.getArgNumber()))}));
}

void FunctionScaler::finish() {
  auto returnOp = cast<func::ReturnOp>(function.front().getTerminator());
  for (auto &[key, group] : groups) {
    int64_t slots = group.slots;
    auto vectorType =
        RankedTensorType::get({slots}, Float32Type::get(function.getContext()));
    group.scale.setType(vectorType);
    group.scaleInv.setType(vectorType);
    group.history.setType(
        RankedTensorType::get({group.recipe.getAmaxHistoryLen(), slots},
                              vectorType.getElementType()));

    assert(llvm::all_of(group.amaxes, [](Value amax) { return amax; }) &&
           "a meta slot without its amax");
    builder.setInsertionPoint(returnOp);
    Location loc = function.getLoc();
    Value amaxes =
        group.amaxes.size() == 1
            ? group.amaxes.front()
            : builder.create<ConcatOp>(loc, vectorType, group.amaxes);
    if (group.recipe.getReduceAmax())
      amaxes = builder.create<AmaxAllReduceOp>(loc, amaxes);
    auto update = builder.create<DelayedScalingUpdateOp>(
        loc, group.history.getType(), vectorType, vectorType, group.history,
        group.scale, amaxes, group.recipe, TypeAttr::get(group.fp8Type));
    StringRef prefix =
        function
            .getArgAttrOfType<StringAttr>(group.scale.getArgNumber(), "te.name")
            .getValue()
            .drop_back(strlen(".scale"));
    addResult(update.getNewAmaxHistory(), (prefix + ".amax_history").str(),
              group.history);
    addResult(update.getNewScale(), (prefix + ".scale").str(), group.scale);
    addResult(update.getNewScaleInv(), (prefix + ".scale_inv").str(),
              group.scaleInv);
  }
  function.setType(FunctionType::get(function.getContext(),
                                     function.front().getArgumentTypes(),
                                     returnOp.getOperandTypes()));
}
