//===- ImportState.cpp - the function a layer spec is imported into
//--------===//
#include "compiler/spec/ImportState.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::spec;
using llvm::StringRef;

void LayerOpParts::add(Value value) {
  operands.push_back(value);
  segments.push_back(1);
}

void LayerOpParts::addOptional(Value value) {
  if (value)
    operands.push_back(value);
  segments.push_back(value ? 1 : 0);
}

void LayerOpParts::set(StringRef name, Attribute value) {
  if (value)
    attributes.set(name, value);
}

ImportState::ImportState(MLIRContext *context, Location loc,
                         StringRef functionName)
    : module(ModuleOp::create(loc)), builder(context) {
  function = func::FuncOp::create(loc, functionName,
                                  FunctionType::get(context, {}, {}));
  module->push_back(function);
  builder.setInsertionPointToStart(function.addEntryBlock());
}

Value ImportState::addInput(StringRef name, Type type, Location loc) {
  auto it = inputsByName.find(name);
  if (it != inputsByName.end())
    return it->second;
  Value arg = function.front().addArgument(type, loc);
  argNames.push_back(name.str());
  argIsParam.push_back(false);
  argMainGradType.push_back(Type());
  argIsFp8Weight.push_back(false);
  argDelaysWgrad.push_back(false);
  inputsByName[name] = arg;
  return arg;
}

LogicalResult ImportState::claimLayerName(StringRef name, Location loc) {
  if (name.empty())
    return emitError(loc) << "a layer's 'name' must not be empty: it prefixes "
                             "the names of its parameters";
  for (auto &[other, otherLoc] : layerNames) {
    bool same = other == name;
    if (!same && !StringRef(other).starts_with(name.str() + ".") &&
        !name.starts_with(other + "."))
      continue;
    InFlightDiagnostic diag = emitError(loc);
    if (same)
      diag << "layer name '" << name << "' is already taken: each layer "
           << "needs its own name, the prefix of its parameters' names";
    else
      diag << "layer name '" << name << "' and the earlier '" << other
           << "' nest (one is a dotted prefix of the other), so their "
              "parameters' names could coincide";
    diag.attachNote(otherLoc) << "the earlier layer is here";
    return diag;
  }
  layerNames.emplace_back(name.str(), loc);
  return success();
}

Value ImportState::addParam(StringRef name, ArrayRef<int64_t> shape,
                            Location loc) {
  Value arg =
      function.front().addArgument(RankedTensorType::get(shape, dtype), loc);
  argNames.push_back(name.str());
  argIsParam.push_back(true);
  argMainGradType.push_back(Type());
  argIsFp8Weight.push_back(false);
  argDelaysWgrad.push_back(false);
  return arg;
}

SmallVector<size_t> ImportState::gemmWeightArguments(size_t firstArgument,
                                                     unsigned rank) {
  SmallVector<size_t> indices;
  for (size_t index = firstArgument; index < argNames.size(); ++index) {
    auto type =
        cast<RankedTensorType>(function.front().getArgument(index).getType());
    if (argIsParam[index] && type.getRank() == rank)
      indices.push_back(index);
  }
  return indices;
}

size_t ImportState::markMainGrads(size_t firstArgument, unsigned rank,
                                  Type elementType) {
  SmallVector<size_t> indices = gemmWeightArguments(firstArgument, rank);
  for (size_t index : indices)
    argMainGradType[index] = elementType;
  return indices.size();
}

size_t ImportState::markFp8Weights(size_t firstArgument, unsigned rank) {
  SmallVector<size_t> indices = gemmWeightArguments(firstArgument, rank);
  for (size_t index : indices)
    argIsFp8Weight[index] = true;
  return indices.size();
}

size_t ImportState::markDelayedWgrads(size_t firstArgument, unsigned rank) {
  SmallVector<size_t> indices = gemmWeightArguments(firstArgument, rank);
  for (size_t index : indices)
    argDelaysWgrad[index] = true;
  return indices.size();
}

RankedTensorType ImportState::activationType(int64_t width) const {
  if (inputFormat == QkvFormat::thd)
    return RankedTensorType::get({tokens, width}, dtype);
  if (inputFormat == QkvFormat::sbhd)
    return RankedTensorType::get({seqLength, batchSize, width}, dtype);
  return RankedTensorType::get({batchSize, seqLength, width}, dtype);
}

Value ImportState::cuSeqlens(Location loc) {
  if (inputFormat != QkvFormat::thd)
    return Value();
  return addInput(
      "cu_seqlens",
      RankedTensorType::get({batchSize + 1}, builder.getIntegerType(32)), loc);
}

Value ImportState::cuSeqlensKv(Location loc) {
  return addInput(
      "cu_seqlens_kv",
      RankedTensorType::get({batchSize + 1}, builder.getIntegerType(32)), loc);
}

Value ImportState::pageTable(Location loc) {
  if (!kvCacheRows || kvCachePageSize == 0)
    return Value();
  return addInput(
      "page_table",
      RankedTensorType::get({batchSize, *kvCacheRows / kvCachePageSize},
                            builder.getIntegerType(32)),
      loc);
}

SmallVector<int64_t, 4> ImportState::kvCacheShape(int64_t kvHeads,
                                                  int64_t headDim) const {
  if (kvCachePageSize > 0)
    return {kvCachePages, kvCachePageSize, kvHeads, headDim};
  return {batchSize, *kvCacheRows, kvHeads, headDim};
}

FailureOr<Value> ImportState::mSplits(int64_t groups, Location loc) {
  auto type = RankedTensorType::get({groups}, builder.getIntegerType(32));
  if (Value existing = lookupInput("m_splits")) {
    int64_t earlier = cast<RankedTensorType>(existing.getType()).getDimSize(0);
    if (earlier == groups)
      return existing;
    InFlightDiagnostic diag = emitError(loc);
    diag << "'num_gemms' is " << groups << ", but an earlier GroupedLinear has "
         << earlier
         << ": every GroupedLinear of a spec reads the one 'm_splits' input "
            "(the tokens of each GEMM), so their num_gemms must agree";
    diag.attachNote(*mSplitsLoc) << "the earlier num_gemms is here";
    return diag;
  }
  mSplitsLoc = loc;
  return addInput("m_splits", type, loc);
}

FailureOr<Operation *>
ImportState::createLayerOp(StringRef opName, Location loc, LayerOpParts &parts,
                           TypeRange resultTypes, bool segmented) {
  OperationState state(loc, opName);
  state.addOperands(parts.operands);
  state.addTypes(resultTypes);
  state.addAttributes(parts.attributes);
  if (segmented)
    state.addAttribute("operandSegmentSizes",
                       builder.getDenseI32ArrayAttr(parts.segments));
  Operation *op = builder.create(state);
  assert(op->getDiscardableAttrDictionary().empty() &&
         "a layer attribute name is not one of the op's own");
  if (failed(verify(op)))
    return failure();
  return op;
}

void ImportState::addResult(StringRef name, Value value, bool first) {
  results.insert(first ? results.begin() : results.end(), {name.str(), value});
}

OwningOpRef<ModuleOp> ImportState::finish(Location loc) {
  SmallVector<Value> values;
  for (auto &[name, value] : results)
    values.push_back(value);
  builder.create<func::ReturnOp>(loc, values);
  function.setType(builder.getFunctionType(function.front().getArgumentTypes(),
                                           ValueRange(values).getTypes()));
  for (auto [index, name] : llvm::enumerate(argNames)) {
    function.setArgAttr(index, "te.name", builder.getStringAttr(name));
    if (argIsParam[index])
      function.setArgAttr(index, "te.parameter", builder.getUnitAttr());
    if (argMainGradType[index])
      function.setArgAttr(index, "te.main_grad",
                          TypeAttr::get(argMainGradType[index]));
    if (argIsFp8Weight[index])
      function.setArgAttr(index, "te.fp8_weight", builder.getUnitAttr());
    if (argDelaysWgrad[index])
      function.setArgAttr(index, "te.delay_wgrad", builder.getUnitAttr());
  }
  for (auto [index, result] : llvm::enumerate(results))
    function.setResultAttr(index, "te.name",
                           builder.getStringAttr(result.first));
  return std::move(module);
}

FailureOr<FP8RecipeAttrInterface>
tejit::spec::readRecipe(const SpecNode &node, const SpecLocations &locations) {
  if (node.kind == SpecNode::Kind::Scalar &&
      (node.isNull() || StringRef(node.text).equals_insensitive("none")))
    return FP8RecipeAttrInterface();
  FailureOr<SpecMap> map = SpecMap::get(node, locations, "recipe");
  if (failed(map))
    return failure();
  FailureOr<std::optional<std::string>> type = map->getChoice(
      "type", {"DelayedScaling", "Float8CurrentScaling", "Float8BlockScaling",
               "delayed_scaling", "current_scaling", "block_scaling"});
  if (failed(type))
    return failure();
  if (!*type) {
    if (failed(map->checkMisspelled("type")))
      return failure();
    return emitError(map->loc())
           << "recipe needs 'type' (DelayedScaling, Float8CurrentScaling or "
              "Float8BlockScaling)";
  }
  bool delayed = **type == "DelayedScaling" || **type == "delayed_scaling";
  bool block = **type == "Float8BlockScaling" || **type == "block_scaling";
  map->setWhat(delayed ? "DelayedScaling recipe"
               : block ? "Float8BlockScaling recipe"
                       : "Float8CurrentScaling recipe");
  FailureOr<std::optional<std::string>> formatName =
      map->getChoice("fp8_format", {"HYBRID", "E4M3", "E5M2"});
  if (failed(formatName))
    return failure();
  // Range errors are reported here, at the value; the attribute verifiers
  // below could only point at the whole recipe.
  if (*formatName == "E5M2")
    return emitError(map->valueLoc("fp8_format"))
           << "'fp8_format' E5M2 is not a valid recipe format (as in "
              "Transformer Engine): use HYBRID (E4M3 forward, E5M2 backward) "
              "or E4M3";
  // TE's default format: HYBRID, but E4M3 for Float8BlockScaling.
  Fp8Format format =
      symbolizeFp8Format(
          StringRef(formatName->value_or(block ? "E4M3" : "HYBRID")).lower())
          .value();
  MLIRContext *context = locations.getContext();
  auto emitRecipeError = [&] { return emitError(map->loc()); };
  // FP8 attention is DelayedScaling's alone (docs/fp8-attention.md). The
  // other recipes take a false fp8_dpa, as Transformer Engine's carry it,
  // without listing the key as theirs.
  FailureOr<bool> fp8Dpa = false;
  if (!delayed && map->has("fp8_dpa")) {
    fp8Dpa = map->getBool("fp8_dpa", false);
    if (succeeded(fp8Dpa) && *fp8Dpa) {
      emitError(map->keyLoc("fp8_dpa"))
          << "fp8_dpa needs the DelayedScaling recipe, not "
          << (block ? "Float8BlockScaling" : "Float8CurrentScaling");
      fp8Dpa = failure();
    }
  }

  if (block) {
    SmallVector<int64_t, 3> dims;
    bool dimsOk = true;
    for (StringRef key : {"x_block_scaling_dim", "w_block_scaling_dim",
                          "grad_block_scaling_dim"}) {
      int64_t fallback = key.starts_with("w") ? 2 : 1;
      FailureOr<int64_t> dim = map->getInt(key, fallback);
      if (succeeded(dim) && *dim != 1 && *dim != 2) {
        emitError(map->valueLoc(key)) << "'" << key << "' in " << map->getWhat()
                                      << " must be 1 or 2, got " << *dim;
        dim = failure();
      }
      dimsOk &= succeeded(dim);
      dims.push_back(succeeded(dim) ? *dim : fallback);
    }
    FailureOr<bool> power2 = map->getBool("power_2_scale", true);
    if (failed(map->finish()) || !dimsOk || failed(power2) || failed(fp8Dpa))
      return failure();
    BlockScalingAttr attr = BlockScalingAttr::getChecked(
        emitRecipeError, context, format, dims[0], dims[1], dims[2], *power2);
    if (!attr)
      return failure();
    return cast<FP8RecipeAttrInterface>(attr);
  }

  if (!delayed) {
    FailureOr<bool> power2 = map->getBool("power_2_scale", false);
    if (failed(map->finish()) || failed(power2) || failed(fp8Dpa))
      return failure();
    CurrentScalingAttr attr = CurrentScalingAttr::getChecked(
        emitRecipeError, context, format, *power2);
    if (!attr)
      return failure();
    return cast<FP8RecipeAttrInterface>(attr);
  }
  FailureOr<int64_t> margin = map->getInt("margin", 0);
  if (succeeded(margin) && *margin < 0) {
    emitError(map->valueLoc("margin"))
        << "'margin' in " << map->getWhat() << " must be >= 0, got " << *margin;
    margin = failure();
  }
  FailureOr<std::optional<int64_t>> historyLen =
      map->getPositive("amax_history_len");
  FailureOr<std::optional<std::string>> algo =
      map->getChoice("amax_compute_algo", {"max", "most_recent"});
  FailureOr<bool> reduceAmax = map->getBool("reduce_amax", true);
  fp8Dpa = map->getBool("fp8_dpa", false);
  if (failed(map->finish()) || failed(margin) || failed(historyLen) ||
      failed(algo) || failed(reduceAmax) || failed(fp8Dpa))
    return failure();
  DelayedScalingAttr attr = DelayedScalingAttr::getChecked(
      emitRecipeError, context, *margin, format, historyLen->value_or(1024),
      symbolizeAmaxComputeAlgo(algo->value_or("max")).value(), *reduceAmax,
      *fp8Dpa);
  if (!attr)
    return failure();
  return cast<FP8RecipeAttrInterface>(attr);
}
