//===- LayerChecks.cpp - shape and dtype rules shared by layer verifiers
//---===//
#include "dialects/LayerChecks.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::te;

LogicalResult mlir::te::expectType(Operation *op, Value value, StringRef what,
                                   Type expected) {
  if (value.getType() != expected)
    return op->emitOpError() << "'" << what << "' must be " << expected
                             << ", got " << value.getType();
  return success();
}

LogicalResult
mlir::te::verifyAttentionWindow(Operation *op,
                                std::optional<ArrayRef<int64_t>> window,
                                AttnMaskType maskType) {
  if (!window)
    return success();
  if (window->size() != 2 || (*window)[0] < -1 || (*window)[1] < -1)
    return op->emitOpError()
           << "'window_size' must be [left, right] with each >= -1 (-1: "
              "unbounded), got "
           << formatShape(*window);
  if (maskType == AttnMaskType::arbitrary)
    return op->emitOpError() << "'window_size' is not supported with the "
                                "arbitrary mask type";
  return success();
}

FailureOr<int64_t> mlir::te::verifyPackedSequences(
    Operation *op, Value cuSeqlens, StringRef cuName,
    std::optional<int64_t> maxSeqlen, StringRef maxName,
    std::optional<AttnMaskType> maskType, StringRef maskTypeName) {
  if (!cuSeqlens || !maxSeqlen)
    return op->emitOpError() << "packed sequences (thd) need '" << cuName
                             << "' (where each sequence starts) and '"
                             << maxName << "' (the longest length)";
  auto type = cast<RankedTensorType>(cuSeqlens.getType());
  if (type.getRank() != 1 || type.getShape()[0] < 2 ||
      !type.getElementType().isInteger(32))
    return op->emitOpError()
           << "'" << cuName << "' must be i32 [b + 1] with b >= 1, got "
           << cuSeqlens.getType();
  if (*maxSeqlen < 1)
    return op->emitOpError()
           << "'" << maxName << "' must be >= 1, got " << *maxSeqlen;
  if (maskType && *maskType != AttnMaskType::padding &&
      *maskType != AttnMaskType::padding_causal)
    return op->emitOpError()
           << "packed sequences (thd) need '" << maskTypeName
           << "' padding or padding_causal (each sequence attends to itself "
              "alone), got "
           << stringifyAttnMaskType(*maskType);
  return type.getShape()[0] - 1;
}

FailureOr<int64_t> mlir::te::verifyPageTable(Operation *op, Value pageTable,
                                             int64_t batch, int64_t pageSize) {
  auto type = cast<RankedTensorType>(pageTable.getType());
  ArrayRef<int64_t> shape = type.getShape();
  if (shape.size() != 2 || shape[0] != batch || shape[1] < 1 ||
      !type.getElementType().isInteger(32))
    return op->emitOpError()
           << "'page_table' must be i32 [b, max_pages] = [" << batch
           << ", max_pages] (the pages of each sequence), got " << type;
  return shape[1] * pageSize;
}

/// Checks one cache of an attention layer op: `[b, s_cache, kvHeads,
/// headDim]` of `element`, or `[pages, page_size, kvHeads, headDim]` when
/// `paged`, an argument of the function.
static LogicalResult verifyLayerCache(Operation *op, Value cache,
                                      StringRef name, bool paged, int64_t batch,
                                      int64_t kvHeads, int64_t headDim,
                                      Type element) {
  auto type = cast<RankedTensorType>(cache.getType());
  ArrayRef<int64_t> shape = type.getShape();
  if (shape.size() != 4 || shape[0] < 1 || (!paged && shape[0] != batch) ||
      shape[1] < 1 || shape[2] != kvHeads || shape[3] != headDim ||
      type.getElementType() != element) {
    InFlightDiagnostic diag = op->emitOpError() << "'" << name << "' must be ";
    if (paged)
      diag << "paged [pages, page_size, kv_heads, head_dim] = [pages, "
              "page_size, ";
    else
      diag << "[b, s_cache, kv_heads, head_dim] = [" << batch << ", s_cache, ";
    return diag << kvHeads << ", " << headDim << "] of " << element << ", got "
                << type;
  }
  if (!isa<BlockArgument>(cache))
    return op->emitOpError()
           << "'" << name
           << "' must be an argument of the function (the caller's cache, "
              "updated in place)";
  return success();
}

LogicalResult
mlir::te::verifyKvCache(Operation *op, Value keyCache, Value valueCache,
                        Value pageTable, Value cuSeqlensQ, Value cuSeqlensKv,
                        bool cuSeqlensKvIsCacheOnly, bool packed,
                        int64_t kvHeads, int64_t headDim, Type element,
                        std::optional<int64_t> maxSeqlen, bool window) {
  if (!keyCache && !valueCache) {
    if (pageTable)
      return op->emitOpError() << "'page_table' belongs to a paged KV cache "
                                  "('key_cache' and 'value_cache')";
    if (cuSeqlensKvIsCacheOnly && cuSeqlensKv)
      return op->emitOpError() << "'cu_seqlens_kv' belongs to the KV cache "
                                  "('key_cache' and 'value_cache')";
    return success();
  }
  if (!keyCache || !valueCache)
    return op->emitOpError()
           << "a KV cache needs both 'key_cache' and 'value_cache'";
  if (!packed)
    return op->emitOpError() << "a KV cache needs packed new tokens "
                                "(qkv_format = thd, with 'cu_seqlens')";
  if (!cuSeqlensKv)
    return op->emitOpError()
           << "a KV cache needs 'cu_seqlens_kv' (each sequence's length "
              "after the step: cached + new tokens, cumulated)";
  if (cuSeqlensQ && cuSeqlensKv.getType() != cuSeqlensQ.getType())
    return op->emitOpError()
           << "'cu_seqlens_kv' must be typed like the queries' cu_seqlens ("
           << cuSeqlensQ.getType() << "), got " << cuSeqlensKv.getType();
  if (window)
    return op->emitOpError()
           << "'window_size' is not supported with a KV cache";
  int64_t batch =
      cuSeqlensQ
          ? cast<RankedTensorType>(cuSeqlensQ.getType()).getShape()[0] - 1
          : ShapedType::kDynamic;
  bool paged = static_cast<bool>(pageTable);
  for (auto [value, name] :
       {std::pair{keyCache, "key_cache"}, std::pair{valueCache, "value_cache"}})
    if (failed(verifyLayerCache(op, value, name, paged, batch, kvHeads, headDim,
                                element)))
      return failure();
  if (keyCache.getType() != valueCache.getType() || keyCache == valueCache)
    return op->emitOpError() << "'key_cache' and 'value_cache' must be "
                                "distinct arguments of one type";
  int64_t rows = cast<RankedTensorType>(keyCache.getType()).getShape()[1];
  if (paged) {
    FailureOr<int64_t> pagedRows = verifyPageTable(op, pageTable, batch, rows);
    if (failed(pagedRows))
      return failure();
    rows = *pagedRows;
  }
  if (maxSeqlen && *maxSeqlen > rows)
    return op->emitOpError()
           << (paged ? "the paged caches hold " : "'key_cache' holds ") << rows
           << " tokens a sequence, fewer than the " << *maxSeqlen
           << " new tokens a sequence may bring (max_seqlen)";
  return success();
}

/// TE's name of a bias shape [1|b, 1|h, s_q, s_kv]: 1hss, b1ss, bhss, 11ss.
static std::string biasShapeName(ArrayRef<int64_t> shape) {
  return std::string(shape[0] == 1 ? "1" : "b") + (shape[1] == 1 ? "1" : "h") +
         "ss";
}

/// The bias operand's shape and element type, and the one shape a bias
/// gradient takes.
static LogicalResult verifyBiasOperand(Operation *op,
                                       const AttentionBiasNames &names,
                                       const AttentionBias &bias,
                                       ArrayRef<int64_t> dims, Type element) {
  auto type = cast<RankedTensorType>(bias.bias.getType());
  ArrayRef<int64_t> shape = type.getShape();
  bool ok = type.getElementType() == element && shape.size() == 4 &&
            (shape[0] == 1 || shape[0] == dims[0]) &&
            (shape[1] == 1 || shape[1] == dims[1]) && shape[2] == dims[2] &&
            shape[3] == dims[3];
  if (!ok)
    return op->emitOpError()
           << "'" << names.bias << "' must be " << element
           << " of shape [1 or b, 1 or heads, s_q, s_kv] = [1 or " << dims[0]
           << ", 1 or " << dims[1] << ", " << dims[2] << ", " << dims[3]
           << "] (q's element type), got " << type;
  if (bias.grad && (shape[0] != 1 || shape[1] != dims[1]))
    return op->emitOpError()
           << "'" << names.grad << "' needs '" << names.bias
           << "' of shape [1, heads, s_q, s_kv] (1hss: the bias gradient is "
              "summed over the batch), got "
           << formatShape(shape) << " (" << biasShapeName(shape) << ")";
  return success();
}

/// ALiBi slopes: f32 [heads] or [b, heads].
static LogicalResult verifySlopes(Operation *op, StringRef name, Value slopes,
                                  ArrayRef<int64_t> dims) {
  auto type = cast<RankedTensorType>(slopes.getType());
  ArrayRef<int64_t> shape = type.getShape();
  bool ok = type.getElementType().isF32() &&
            (shape == ArrayRef<int64_t>{dims[1]} ||
             shape == ArrayRef<int64_t>{dims[0], dims[1]});
  if (!ok)
    return op->emitOpError() << "'" << name << "' must be f32 [heads] = ["
                             << dims[1] << "] or [b, heads] = [" << dims[0]
                             << ", " << dims[1] << "], got " << type;
  return success();
}

LogicalResult mlir::te::verifyAttentionBias(Operation *op,
                                            const AttentionBiasNames &names,
                                            const AttentionBias &bias,
                                            ArrayRef<int64_t> dims,
                                            Type element, AttnMaskType maskType,
                                            StringRef unsupported) {
  if (!bias.any())
    return success();
  StringRef typeName = stringifyAttnBiasType(bias.type);
  if (!unsupported.empty() || maskType == AttnMaskType::arbitrary) {
    InFlightDiagnostic diag = op->emitOpError();
    if (bias.type != AttnBiasType::no_bias)
      diag << "'" << names.type << "' " << typeName;
    else
      diag << "'"
           << (bias.bias     ? names.bias
               : bias.slopes ? names.slopes
                             : names.grad)
           << "'";
    if (!unsupported.empty())
      return diag << " is not supported with " << unsupported;
    return diag << " is not supported with the arbitrary mask type (fold the "
                   "mask into a post_scale_bias, -10000 where masked, with "
                   "the no_mask type)";
  }
  bool postScale = bias.type == AttnBiasType::post_scale_bias;
  if (postScale != static_cast<bool>(bias.bias))
    return op->emitOpError() << names.type << " = " << typeName
                             << (bias.bias ? " takes no '" : " requires a '")
                             << names.bias << "' operand";
  if (bias.slopes && bias.type != AttnBiasType::alibi)
    return op->emitOpError() << "'" << names.slopes << "' needs " << names.type
                             << " = alibi, got " << typeName;
  if (bias.grad && !postScale)
    return op->emitOpError()
           << "'" << names.grad << "' needs " << names.type
           << " = post_scale_bias (ALiBi slopes take no gradient), got "
           << typeName;
  if (bias.bias && failed(verifyBiasOperand(op, names, bias, dims, element)))
    return failure();
  return bias.slopes ? verifySlopes(op, names.slopes, bias.slopes, dims)
                     : success();
}

AttnMaskType mlir::te::kvCacheMaskType(AttnMaskType maskType) {
  switch (maskType) {
  case AttnMaskType::causal:
  case AttnMaskType::padding_causal:
  case AttnMaskType::causal_bottom_right:
  case AttnMaskType::padding_causal_bottom_right:
    return AttnMaskType::padding_causal_bottom_right;
  default:
    return AttnMaskType::padding;
  }
}

std::string mlir::te::formatShape(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}

int64_t mlir::te::leadingDimsProduct(ShapedType type) {
  int64_t product = 1;
  for (int64_t dim : type.getShape().drop_back())
    product *= dim;
  return product;
}

static bool isLayerFloat(Type type) {
  return type.isBF16() || type.isF16() || type.isF32();
}

LogicalResult LayerChecker::floatTensor(Value value, StringRef name,
                                        int64_t minRank) {
  auto type = cast<RankedTensorType>(value.getType());
  if (!type.hasStaticShape())
    return emitError() << "'" << name << "' must have a static shape, got "
                       << type;
  if (type.getRank() < minRank)
    return emitError() << "'" << name << "' must have rank >= " << minRank
                       << ", got " << type;
  if (llvm::is_contained(type.getShape(), 0))
    return emitError() << "'" << name
                       << "' must not have a zero-size dimension, got " << type;
  Type element = type.getElementType();
  if (!isLayerFloat(element))
    return emitError() << "'" << name
                       << "' must have element type bf16, f16 or f32, got "
                       << element;
  if (!dtype) {
    dtype = element;
    dtypeSource = name.str();
    return success();
  }
  if (element != dtype)
    return emitError() << "'" << name << "' has element type " << element
                       << " but '" << dtypeSource << "' has " << dtype
                       << ": a layer's activations and parameters share one "
                          "dtype";
  return success();
}

LogicalResult LayerChecker::param(Value value, StringRef name,
                                  ArrayRef<int64_t> expected, StringRef rule) {
  if (failed(floatTensor(value, name)))
    return failure();
  ArrayRef<int64_t> shape = cast<RankedTensorType>(value.getType()).getShape();
  if (shape != expected)
    return emitError() << "'" << name << "' must have shape " << rule << " = "
                       << formatShape(expected) << ", got "
                       << formatShape(shape);
  return success();
}

LogicalResult LayerChecker::optionalParam(Value value, StringRef name,
                                          ArrayRef<int64_t> expected,
                                          StringRef rule) {
  return value ? param(value, name, expected, rule) : success();
}

LogicalResult LayerChecker::mask(Value value, ArrayRef<int64_t> expected,
                                 StringRef rule, StringRef name) {
  auto type = cast<RankedTensorType>(value.getType());
  if (!type.hasStaticShape())
    return emitError() << "'" << name << "' must have a static shape, got "
                       << type;
  if (!type.getElementType().isInteger(1))
    return emitError() << "'" << name
                       << "' must have element type i1 (true = masked out), "
                          "got "
                       << type.getElementType();
  if (type.getShape() != expected)
    return emitError() << "'" << name << "' must have shape " << rule << " = "
                       << formatShape(expected) << ", got "
                       << formatShape(type.getShape());
  return success();
}

LogicalResult LayerChecker::fp8Dims(FP8RecipeAttrInterface recipe,
                                    ArrayRef<Fp8Dim> dims) {
  if (!recipe)
    return success();
  for (const Fp8Dim &dim : dims)
    if (dim.size % dim.multiple != 0)
      return emitError() << "FP8 GEMMs need " << dim.what << " divisible by "
                         << dim.multiple << ", got " << dim.size
                         << " (fp8_recipe is set; pad the dim or drop the "
                            "recipe)";
  return success();
}

LogicalResult LayerChecker::normParams(Normalization norm, Value weight,
                                       Value bias, StringRef weightName,
                                       StringRef biasName, int64_t hidden) {
  if (failed(param(weight, weightName, {hidden}, "[hidden_size]")))
    return failure();
  if (norm == Normalization::RMSNorm && bias)
    return emitError() << "'" << biasName
                       << "' is not allowed with RMSNorm (it has no bias)";
  if (norm == Normalization::LayerNorm && !bias)
    return emitError() << "'" << biasName << "' is required by LayerNorm";
  return optionalParam(bias, biasName, {hidden}, "[hidden_size]");
}

FailureOr<int64_t> LayerChecker::mlpParams(Activation activation,
                                           Value fc1Weight, Value fc1Bias,
                                           Value fc2Weight, Value fc2Bias,
                                           int64_t hidden) {
  if (failed(verifyActivationParams(op, activation)) ||
      failed(floatTensor(fc2Weight, "fc2_weight", 2)))
    return failure();
  auto fc2Shape = cast<RankedTensorType>(fc2Weight.getType()).getShape();
  int64_t ffn = fc2Shape[1];
  if (failed(param(fc2Weight, "fc2_weight", {hidden, ffn},
                   "[hidden_size, ffn_hidden_size]")))
    return failure();
  bool gated = isGatedActivation(activation);
  int64_t fc1Rows = gated ? 2 * ffn : ffn;
  StringRef fc1Rule = gated ? "[2 * ffn_hidden_size, hidden_size] (gated "
                              "activation)"
                            : "[ffn_hidden_size, hidden_size]";
  if (failed(param(fc1Weight, "fc1_weight", {fc1Rows, hidden}, fc1Rule)))
    return failure();
  if (static_cast<bool>(fc1Bias) != static_cast<bool>(fc2Bias))
    return emitError() << "'fc1_bias' and 'fc2_bias' must be both present or "
                          "both absent";
  if (failed(optionalParam(fc1Bias, "fc1_bias", {fc1Rows},
                           gated ? "[2 * ffn_hidden_size]"
                                 : "[ffn_hidden_size]")) ||
      failed(optionalParam(fc2Bias, "fc2_bias", {hidden}, "[hidden_size]")))
    return failure();
  return ffn;
}
