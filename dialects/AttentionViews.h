//===- AttentionViews.h - q/k/v and their gradients in place ----*- C++ -*-===//
//
// A fused QKV projection writes [tokens, (h + 2 kv_h) * d]; attention reads
// q, k and v as column ranges of it. cuDNN takes strided tensors, so those
// te.slice ops need no copy: the runtime hands cuDNN the sliced tensor with
// its row stride. The rotary kernel that turns q and k before attention
// reads them in place the same way. Likewise the backward's te.concat of
// dq, dk and dv: cuDNN writes each gradient straight into its columns of
// the concat's buffer.
// te-plan-memory, the kernel emitter and the plan writer agree on which ops
// these are through the predicates here.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECTS_ATTENTIONVIEWS_H
#define TEJIT_DIALECTS_ATTENTIONVIEWS_H

#include "dialects/TEDialect.h"

namespace mlir::te {

/// Whether `op` is a te.slice of a 2-D tensor that only attention (as its
/// q, k or v) and te.rotary (as its input) read, through a reshape to 4-D
/// that splits the rows into two token dims and the columns into heads and
/// head dim; start and row stride 16-byte aligned. Such a slice is a
/// strided view of its input.
bool isAttentionInputSlice(Operation *op);

/// Whether `op` is a te.concat whose every input is a gradient (dq, dk or
/// dv) of a te.attention_bwd reshaped to 2-D and read by nothing else,
/// with 16-byte aligned columns. Attention then writes the gradients into
/// the concat's buffer, which needs no kernel of its own.
bool isAttentionGradConcat(Operation *op);

/// For a result of te.attention_bwd that such a concat gathers: the concat
/// and the column at which the gradient starts in it.
std::optional<std::pair<ConcatOp, int64_t>> gradConcatSlot(Value grad);

/// Elements between consecutive tokens of the 4-D attention or rotary
/// operand, or attention result, `value` when it is a strided view (see
/// above); 0 when it is packed.
int64_t attentionTokenStride(Value value);

} // namespace mlir::te

#endif // TEJIT_DIALECTS_ATTENTIONVIEWS_H
