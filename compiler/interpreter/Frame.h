//===- Frame.h - values of a running function; op handlers ------*- C++ -*-===//
#ifndef TEJIT_COMPILER_INTERPRETER_FRAME_H
#define TEJIT_COMPILER_INTERPRETER_FRAME_H

#include "compiler/interpreter/DropoutRng.h"
#include "compiler/interpreter/Kernels.h"
#include "dialects/LayerChecks.h"

#include "llvm/ADT/DenseMap.h"

#include <unordered_map>

namespace tejit::interp {

/// The tensors bound to the SSA values of the function being run.
class Frame {
public:
  explicit Frame(const Options &options) : options(options) {}

  /// The tensor of `value`, which must have been bound.
  const Tensor &get(mlir::Value value) const;

  /// The tensor of an optional operand, or null when it is absent.
  const Tensor *getOptional(mlir::Value value) const {
    return value ? &get(value) : nullptr;
  }

  /// Binds `value` (a result of `op`) to `tensor`; reports an error at `op`
  /// when the tensor is not shaped as the value's type.
  mlir::LogicalResult set(mlir::Operation *op, mlir::Value value,
                          Tensor tensor);

  /// Rebinds a function argument the running op writes in place (a KV
  /// cache): later ops, and Options::updatedArguments, see `tensor`.
  void updateArgument(mlir::BlockArgument argument, Tensor tensor);

  /// The key of dropout `site` of the layer op being run.
  DropoutKey layerDropoutKey(dropout::LayerDropoutSite site) const {
    return {options.seed, options.offset,
            dropout::layerStream(layerIndex, site)};
  }

  /// `local` summed over the ranks (itself in one process).
  Tensor sumOverRanks(const Tensor &local) const {
    return options.collectives ? options.collectives->sum(local) : local;
  }
  /// `local`'s element-wise maximum over the ranks.
  Tensor maxOverRanks(const Tensor &local) const {
    return options.collectives ? options.collectives->max(local) : local;
  }

  /// Sequence parallelism: the ranks' slices of dim 0 concatenated (the
  /// input of a column-parallel GEMM); an error at `op` in one process.
  mlir::FailureOr<Tensor> gatherOverRanks(mlir::Operation *op,
                                          const Tensor &local) const;
  /// Sequence parallelism: this rank's chunk of dim 0 of `partial` summed
  /// over the `ranks` ranks (a row-parallel GEMM's output); an error at
  /// `op` in one process.
  mlir::FailureOr<Tensor> scatterSumOverRanks(mlir::Operation *op,
                                              const Tensor &partial,
                                              int64_t ranks) const;

  /// Context parallelism (docs/context-parallel.md): the ranks' tokens of
  /// dim `seqDim` (`ranks` of them, this rank's `local`) as the whole
  /// sequence, in sequence order when `loadBalanced` (rank r holds chunks r
  /// and 2 ranks - 1 - r), else in rank order; an error at `op` in one
  /// process (ContextParallel.cpp).
  mlir::FailureOr<Tensor> gatherSequence(mlir::Operation *op,
                                         const Tensor &local, int64_t ranks,
                                         int64_t seqDim,
                                         bool loadBalanced) const;
  /// The inverse's gradient: `whole` summed over the ranks, of which this
  /// rank keeps its tokens (in its local order).
  mlir::FailureOr<Tensor> scatterSequenceSum(mlir::Operation *op,
                                             const Tensor &whole, int64_t ranks,
                                             int64_t seqDim,
                                             bool loadBalanced) const;

  /// cp_comm_type a2a's all-to-all (te.cp_all_to_all) on `x` [.., h, d]
  /// with tokens along `seqDim`: `toHeads`, this rank's tokens of all
  /// heads to the whole sequence (placed as gatherSequence places them) of
  /// head block `rank` of `ranks`; else the inverse. An error at `op` in
  /// one process (ContextParallel.cpp).
  mlir::FailureOr<Tensor> exchangeHeads(mlir::Operation *op, const Tensor &x,
                                        int64_t ranks, int64_t seqDim,
                                        bool loadBalanced, bool toHeads) const;

  /// The position of the layer op being run among the function's layer ops.
  uint64_t layerIndex = 0;

private:
  /// Fails at `op` unless the run has the other ranks' collectives.
  mlir::LogicalResult needCollectives(mlir::Operation *op) const;

  const Options &options;
  /// Node-based, so that a reference from get() stays valid while results
  /// are bound (a DenseMap would move its tensors when it grows).
  std::unordered_map<const void *, Tensor> values;
};

/// Context parallelism: the chunks `rank` and 2 `ranks` - 1 - `rank` of
/// `2 ranks` along dim `seqDim` of the whole sequence `whole` (the rotary
/// angles of a rank's tokens).
Tensor sequenceChunksOfRank(const Tensor &whole, int64_t ranks, int64_t rank,
                            int64_t seqDim);

/// Whether `op` is one of the eight layer ops (TE modules), as opposed to a
/// primitive.
bool isLayerOp(mlir::Operation *op);

/// Packed sequences (thd): checks the queries' offsets `cuQ` (and the keys'
/// `cuKv`; null: packed as the queries) against the longest lengths and the
/// token counts the tensors hold (packedSequencesError), naming them
/// `nameQ` / `nameKv` in `op`'s diagnostics, and points `params` at them
/// (PrimitiveOps.cpp).
mlir::LogicalResult
setPackedSequences(mlir::Operation *op, AttentionParams &params,
                   const Tensor &cuQ, const Tensor *cuKv, int64_t maxQ,
                   int64_t maxKv, int64_t tokensQ, int64_t tokensKv,
                   llvm::StringRef nameQ, llvm::StringRef nameKv);

/// Points `params` at the bias operands of an attention op
/// (docs/attention-bias.md) and takes its bias type (PrimitiveOps.cpp).
void setAttentionBias(AttentionParams &params,
                      const mlir::te::AttentionBias &bias, const Frame &frame);

/// te.kv_cache_attention's sequences checked (kvCacheSequencesError, and
/// pageTableError when paged, at `op`), the new tokens stored into the
/// cache arguments `keyCache` / `valueCache` (Frame::updateArgument; through
/// `pageTable` when not null) and the queries' attention over them returned
/// ([t, h, d]); `params` gives the mask type and scale (PrimitiveOps.cpp).
mlir::FailureOr<Tensor> runKvCacheAttention(
    mlir::Operation *op, Frame &frame, const Tensor &query, const Tensor &key,
    const Tensor &value, mlir::Value keyCache, mlir::Value valueCache,
    const Tensor &cuSeqlensQ, const Tensor &cuSeqlensKv,
    const Tensor *pageTable, int64_t maxSeqlenQ, const AttentionParams &params);

/// The AttentionParams of te.fp8_attention / te.fp8_attention_bwd: layout,
/// masks (checked as te.attention's) and softmax scale (their verifier pins
/// dropout to 0; PrimitiveOps.cpp).
mlir::FailureOr<AttentionParams> fp8AttentionParams(mlir::te::Fp8AttentionOp op,
                                                    const Frame &frame);
mlir::FailureOr<AttentionParams>
fp8AttentionParams(mlir::te::Fp8AttentionBwdOp op, const Frame &frame);

/// Runs a layer op (LayerOps.cpp).
mlir::LogicalResult runLayerOp(mlir::Operation *op, Frame &frame);

/// Runs a primitive te op (PrimitiveOps.cpp), handing the FP8 quantization
/// ops to runQuantizedOp; fails on other ops.
mlir::LogicalResult runPrimitiveOp(mlir::Operation *op, Frame &frame);

/// Runs an FP8 quantization op (QuantizedOps.cpp), handing the grouped ops
/// to runGroupedOp; fails on other ops.
mlir::LogicalResult runQuantizedOp(mlir::Operation *op, Frame &frame);

/// Runs te.grouped_linear or one of the grouped ops it lowers to, after the
/// run-time checks of `m_splits` (GroupedOps.cpp); fails on other ops.
mlir::LogicalResult runGroupedOp(mlir::Operation *op, Frame &frame);

/// Whether `op` is a cross entropy op (te.cross_entropy_*; LossOps.cpp).
bool isLossOp(mlir::Operation *op);
/// Runs a cross entropy op (LossOps.cpp).
mlir::LogicalResult runLossOp(mlir::Operation *op, Frame &frame);
/// Whether `op` is one of the MoE token permutation ops, which runMoeOp
/// runs (MoeOps.cpp, docs/moe-permutation.md).
bool isMoeOp(mlir::Operation *op);
mlir::LogicalResult runMoeOp(mlir::Operation *op, Frame &frame);
/// Whether `op` is a MoE router op (te.router_*; RouterOps.cpp).
bool isRouterOp(mlir::Operation *op);
mlir::LogicalResult runRouterOp(mlir::Operation *op, Frame &frame);

} // namespace tejit::interp

#endif // TEJIT_COMPILER_INTERPRETER_FRAME_H
