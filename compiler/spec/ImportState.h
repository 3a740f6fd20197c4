//===- ImportState.h - the function a spec is imported into -----*- C++ -*-===//
#ifndef TEJIT_COMPILER_SPEC_IMPORTSTATE_H
#define TEJIT_COMPILER_SPEC_IMPORTSTATE_H

#include "compiler/spec/SpecMap.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"

namespace tejit::spec {

/// Operands and inherent attributes of a layer op under construction.
/// Optional operands are recorded with their segment sizes, so that ops with
/// AttrSizedOperandSegments get `operandSegmentSizes` for free.
struct LayerOpParts {
  llvm::SmallVector<mlir::Value> operands;
  llvm::SmallVector<int32_t> segments;
  mlir::NamedAttrList attributes;

  void add(mlir::Value value);
  void addOptional(mlir::Value value);
  /// Sets `name` when `value` is non-null.
  void set(llvm::StringRef name, mlir::Attribute value);
};

/// Builds the function a spec becomes: its arguments are the activations and
/// parameters the layers ask for, in order, each named by a `te.name`
/// argument attribute (parameters also carry `te.parameter`).
class ImportState {
public:
  ImportState(mlir::MLIRContext *context, mlir::Location loc,
              llvm::StringRef functionName);

  /// Shapes every layer shares. Packed sequences (input_format thd): b =
  /// batchSize sequences of at most seqLength tokens, packed in `tokens`.
  int64_t seqLength = 0, batchSize = 0, tokens = 0;
  mlir::te::QkvFormat inputFormat = mlir::te::QkvFormat::sbhd;
  /// Sequence parallelism: the slices of dim 0 the input holds when the
  /// first layer reads either (a per-token layer); the importer sets it
  /// from the first sequence-parallel layer.
  int64_t firstInputSlices = 1;
  /// `kv_cache: {max_sequence_length: S}` (inference with a KV cache): S,
  /// the cache rows per sequence.
  std::optional<int64_t> kvCacheRows;
  /// Paged caches (`kv_cache: {page_size, total_pages}`): the rows of a page
  /// and the pages of each layer's caches; 0 when the caches are not paged.
  int64_t kvCachePageSize = 0, kvCachePages = 0;
  /// Whether the `core_attention_bias` input takes a gradient, once a layer
  /// has added it (every layer that reads it must agree).
  std::optional<bool> biasRequiresGrad;
  mlir::Type dtype;

  /// An activation argument; asking twice for one name returns the same
  /// argument (one mask or rotary table serves every layer).
  mlir::Value addInput(llvm::StringRef name, mlir::Type type,
                       mlir::Location loc);
  /// The activation argument named `name`, or null.
  mlir::Value lookupInput(llvm::StringRef name) const {
    return inputsByName.lookup(name);
  }
  /// Records the name of the layer at `loc` (the prefix of its parameters'
  /// names); fails unless it is non-empty and neither equal to nor a dotted
  /// prefix of an earlier layer's name, which could make parameter names
  /// coincide.
  mlir::LogicalResult claimLayerName(llvm::StringRef name, mlir::Location loc);
  /// A parameter argument of the layer dtype.
  mlir::Value addParam(llvm::StringRef name, llvm::ArrayRef<int64_t> shape,
                       mlir::Location loc);
  /// [s, b, width] or [b, s, width], per the input format ([tokens,
  /// width] for thd).
  mlir::RankedTensorType activationType(int64_t width) const;
  /// Packed sequences: the `cu_seqlens` input (i32 [b + 1], where each
  /// sequence starts), shared by every layer; null unless thd.
  mlir::Value cuSeqlens(mlir::Location loc);
  /// KV cache: the `cu_seqlens_kv` input (each sequence's length after the
  /// step, cumulated), added once.
  mlir::Value cuSeqlensKv(mlir::Location loc);
  /// Paged KV caches: the `page_table` input (i32 [b, S / page_size], each
  /// sequence's pages), shared by every layer and added once; null unless
  /// the caches are paged. Asked for right after cuSeqlensKv, so that it
  /// follows cu_seqlens_kv among the inputs.
  mlir::Value pageTable(mlir::Location loc);
  /// The shape of each layer's key or value cache: [b, S, kvHeads, headDim],
  /// or [pages, page_size, kvHeads, headDim] when paged.
  llvm::SmallVector<int64_t, 4> kvCacheShape(int64_t kvHeads,
                                             int64_t headDim) const;
  /// GroupedLinear: the `m_splits` input (i32 [groups], the tokens of each
  /// GEMM), shared by every GroupedLinear of the spec; fails at `loc` (the
  /// layer's `num_gemms`) when an earlier one has another number of GEMMs.
  mlir::FailureOr<mlir::Value> mSplits(int64_t groups, mlir::Location loc);

  /// Creates a layer op; fails when the op does not verify.
  mlir::FailureOr<mlir::Operation *>
  createLayerOp(llvm::StringRef opName, mlir::Location loc, LayerOpParts &parts,
                mlir::TypeRange resultTypes, bool segmented);

  /// The number of function arguments so far (activations and parameters).
  size_t numArguments() const { return argNames.size(); }
  /// Marks the GEMM weight parameters (those of rank `rank`: 2 for [out,
  /// in] matrices, 3 for GroupedLinear's stacked weights) among the
  /// arguments from `firstArgument` on with `te.main_grad = <element
  /// type>`: their
  /// gradients accumulate into a main_grad of that type the backward takes
  /// (Transformer Engine's fuse_wgrad_accumulation). Returns how many it
  /// marked.
  size_t markMainGrads(size_t firstArgument, unsigned rank,
                       mlir::Type elementType);
  /// Marks the same parameters with `te.fp8_weight` (Transformer Engine's
  /// fp8_model_init): te-place-scaling makes them FP8 arguments. Returns how
  /// many it marked.
  size_t markFp8Weights(size_t firstArgument, unsigned rank);
  /// Marks the same parameters with `te.delay_wgrad` (Transformer Engine's
  /// delay_wgrad_compute): te-split-wgrad moves their weight gradients into
  /// a function of their own. Returns how many it marked.
  size_t markDelayedWgrads(size_t firstArgument, unsigned rank);

  /// Adds a named function result after those added so far, or before them
  /// with `first` (the spec's `output` leads, as a layer's output leads the
  /// tuple a Transformer Engine module returns).
  void addResult(llvm::StringRef name, mlir::Value value, bool first = false);

  /// Finishes the function (return op, type, names) and hands out the module.
  mlir::OwningOpRef<mlir::ModuleOp> finish(mlir::Location loc);

  mlir::OpBuilder &getBuilder() { return builder; }
  mlir::MLIRContext *getContext() { return builder.getContext(); }

private:
  /// The GEMM weight parameters (of rank `rank`) among the arguments from
  /// `firstArgument` on.
  llvm::SmallVector<size_t> gemmWeightArguments(size_t firstArgument,
                                                unsigned rank);

  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp function;
  mlir::OpBuilder builder;
  llvm::SmallVector<std::string> argNames;
  llvm::SmallVector<bool> argIsParam;
  /// The main_grad element type of each argument; null for none.
  llvm::SmallVector<mlir::Type> argMainGradType;
  llvm::SmallVector<bool> argIsFp8Weight;
  llvm::SmallVector<bool> argDelaysWgrad;
  llvm::StringMap<mlir::Value> inputsByName;
  llvm::SmallVector<std::pair<std::string, mlir::Location>> layerNames;
  /// Where the first GroupedLinear gave its `num_gemms`.
  std::optional<mlir::Location> mSplitsLoc;
  llvm::SmallVector<std::pair<std::string, mlir::Value>> results;
};

/// Reads a recipe mapping (`type: DelayedScaling | Float8CurrentScaling` and
/// its options) or `none`. Returns a null attribute for `none`.
mlir::FailureOr<mlir::te::FP8RecipeAttrInterface>
readRecipe(const SpecNode &node, const SpecLocations &locations);

} // namespace tejit::spec

#endif // TEJIT_COMPILER_SPEC_IMPORTSTATE_H
