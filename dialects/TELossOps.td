//===- TELossOps.td - vocab-parallel cross entropy ops of te -*- tablegen -*-===//
//
// Transformer Engine's parallel_cross_entropy (docs/cross-entropy.md): a
// softmax cross entropy over logits [N, V_local] whose vocab may be split
// over the ranks of a tensor-parallel group (rank r holds the columns
// [vocab_start, vocab_start + V_local) of the full vocab V). Each rank
// reduces its columns to four floats per row (te.cross_entropy_stats); a
// te.tp_all_gather of those row statistics (never of logits) lets every
// rank compute the loss and the log-sum-exp of the whole row
// (te.cross_entropy_loss); te.cross_entropy_bwd turns the saved logits into
// their gradient in one pass. Rows whose target is `ignore_index` have loss
// 0 and gradient 0.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECT_TE_LOSS_OPS_TD
#define TEJIT_DIALECT_TE_LOSS_OPS_TD

include "TEPrimitiveOps.td"

def TE_CrossEntropyStatsOp : TE_PrimOp<"cross_entropy_stats"> {
  let summary = "One rank's row statistics of a vocab-parallel softmax";
  let description = [{
    For each row i of `logits` [N, V_local] (bf16, f16 or f32) and its
    target `target[i]` (i32 or i64 [N]), in one pass over the row, the f32
    `stats[i]` = (m, d, t, s): the maximum m of the row, d = sum_j
    exp(x_j - m), the target's logit t = x[target - vocab_start] when this
    rank holds that column, else -inf, and s = sum_j x_j. A row whose
    target is `ignore_index` is not read: (-inf, 0, -inf, 0).

    ```mlir
    %stats = te.cross_entropy_stats %logits, %target {vocab_start = 32000}
        : (tensor<8192x32000xbf16>, tensor<8192xi64>) -> tensor<8192x4xf32>
    ```
  }];
  let arguments = (ins TE_AnyTensor:$logits, TE_AnyTensor:$target,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs TE_AnyTensor:$stats);
  let assemblyFormat = [{
    $logits `,` $target attr-dict `:` functional-type(operands, results)
  }];
}

def TE_CrossEntropyLossOp : TE_PrimOp<"cross_entropy_loss"> {
  let summary = "Per-row loss and log-sum-exp from the ranks' statistics";
  let description = [{
    `stats` [ranks N, 4] holds each rank's te.cross_entropy_stats, rank r's
    at rows [r N, (r + 1) N) (a te.tp_all_gather's output; [N, 4] for one
    rank). Per row: m = max_r m_r, d = sum_r d_r exp(m_r - m),
    lse = m + log d, t = max_r t_r (the rank holding the target column),
    s = sum_r s_r, and with ε = `label_smoothing` over the full vocab V =
    `vocab_size`:

      loss = lse - (1 - ε) t - (ε / V) s

    (TE's smoothed loss, as torch.nn.functional.cross_entropy's). Rows
    whose target is `ignore_index` get loss 0 and lse 0. A target outside
    [0, V) gives loss +inf (no rank holds it; docs/cross-entropy.md).
    Results: `loss` and `lse`, f32 [N].
  }];
  let arguments = (ins TE_AnyTensor:$stats, TE_AnyTensor:$target,
                   I64Attr:$vocab_size,
                   DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                   DefaultValuedAttr<I64Attr, "1">:$ranks);
  let results = (outs TE_AnyTensor:$loss, TE_AnyTensor:$lse);
  let assemblyFormat = [{
    $stats `,` $target attr-dict `:` functional-type(operands, results)
  }];
}

def TE_CrossEntropyMeanOp : TE_PrimOp<"cross_entropy_mean"> {
  let summary = "The mean loss over the rows that are not ignored";
  let description = [{
    `reduce_loss`: `mean` = sum_i loss[i] / max(1, count), where `count` is
    the number of rows whose target is not `ignore_index` (as TE and
    torch's reduction "mean" with ignore_index). Both results are f32 [1];
    the backward divides the gradient by `count`.
  }];
  let arguments = (ins TE_AnyTensor:$loss, TE_AnyTensor:$target,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs TE_AnyTensor:$mean, TE_AnyTensor:$count);
  let assemblyFormat = [{
    $loss `,` $target attr-dict `:` functional-type(operands, results)
  }];
}

def TE_CrossEntropyBwdOp : TE_PrimOp<"cross_entropy_bwd"> {
  let summary = "Gradient of the cross entropy with respect to the logits";
  let description = [{
    For row i (target y, not `ignore_index`) and this rank's column j
    (vocab column vocab_start + j):

      grad[i, j] = (exp(x[i, j] - lse[i]) - ε / V
                    - (1 - ε) [vocab_start + j == y]) g_i

    with g_i = `grad_loss[i]` (`grad_loss` [N]), or, given `count` (the
    mean's, f32 [1]), g_i = grad_loss[0] / max(1, count) (`grad_loss` [1]).
    Ignored rows get 0. `grad` has the logits' type. The runtime may bind
    `grad` to the logits' own memory: each element is read before it is
    written, by the same thread (docs/cross-entropy.md).

    ```mlir
    %grad = te.cross_entropy_bwd %logits, %target, %lse, %grad_loss
        {vocab_size = 64000, vocab_start = 32000}
        : (tensor<8192x32000xbf16>, tensor<8192xi64>, tensor<8192xf32>,
           tensor<8192xf32>) -> tensor<8192x32000xbf16>
    ```
  }];
  let arguments = (ins TE_AnyTensor:$logits, TE_AnyTensor:$target,
                   TE_AnyTensor:$lse, TE_AnyTensor:$grad_loss,
                   Optional<TE_AnyTensor>:$count,
                   I64Attr:$vocab_size,
                   DefaultValuedAttr<I64Attr, "0">:$vocab_start,
                   DefaultValuedAttr<F64Attr, "0.0">:$label_smoothing,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs TE_AnyTensor:$grad);
  let assemblyFormat = [{
    $logits `,` $target `,` $lse `,` $grad_loss (`count` `(` $count^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
}

#endif // TEJIT_DIALECT_TE_LOSS_OPS_TD
