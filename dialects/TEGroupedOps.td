//===- TEGroupedOps.td - grouped GEMM ops of te (GroupedLinear) -*- tablegen -*-===//
//
// What te.grouped_linear (Transformer Engine's GroupedLinear, the experts of
// a mixture-of-experts layer) lowers to. The tokens of the input are cut
// into consecutive row segments by `m_splits`, an i32 [G] tensor whose
// values are known only at run time (the runtime reads them on the host:
// docs/grouped-linear.md); segment g is rows [o_g, o_g + m_splits[g]) with
// o_g = m_splits[0] + ... + m_splits[g - 1]. Rows at and past
// o_G = sum(m_splits) (padding the caller added so that token counts share
// a program) belong to no segment: they produce zeros and enter no sum.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECT_TE_GROUPED_OPS_TD
#define TEJIT_DIALECT_TE_GROUPED_OPS_TD

include "TEPrimitiveOps.td"

def TE_GroupedMatmulOp : TE_PrimOp<"grouped_matmul"> {
  let summary = "One matrix product per row segment (GroupedLinear's GEMMs)";
  let description = [{
    Two forms, told apart by the rank of `b`:
    - rows (`b` is [G, ., .], one matrix per group): `a` [T, K] (not
      transposed); segment g of the output [T, N] is
      `a[seg g] op(b[g])` (`op` transposes with `transpose_b`: b [G, N, K];
      without it b is [G, K, N]), plus `bias[g]` when given (bias [G, N]).
      Rows past the segments are 0. GroupedLinear's forward is
      `te.grouped_matmul %x, %w, %m_splits bias(%b) {transpose_b}` and its
      dgrad `te.grouped_matmul %dy, %w, %m_splits`.
    - contraction (`b` is [T, N], `transpose_a`): `a` [T, M]; the output
      [G, M, N] holds `a[seg g]^T b[seg g]` for each group (zeros for an
      empty segment): GroupedLinear's wgrad
      `te.grouped_matmul %dy, %x, %m_splits {transpose_a}`. No bias.
    Accumulation is f32. `fp8_recipe` and `role` are te.matmul's.
  }];
  let arguments = (ins TE_AnyTensor:$a, TE_AnyTensor:$b,
                   TE_AnyTensor:$m_splits, Optional<TE_AnyTensor>:$bias,
                   UnitAttr:$transpose_a, UnitAttr:$transpose_b,
                   OptionalAttr<TE_FP8RecipeAttr>:$fp8_recipe,
                   OptionalAttr<TE_GemmRoleAttr>:$role);
  let results = (outs TE_AnyTensor:$output);
  let extraClassDeclaration = [{
    /// True for the rows form (b holds one matrix per group).
    bool isRowsForm() { return getB().getType().getRank() == 3; }
  }];
  let assemblyFormat = [{
    $a `,` $b `,` $m_splits (`bias` `(` $bias^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_GroupedBiasGradOp : TE_PrimOp<"grouped_bias_grad"> {
  let summary = "Per-segment column sums of a gradient (GroupedLinear dbias)";
  let description = [{
    `output[g, n] = sum over the rows t of segment g of grad[t, n]`,
    accumulated in f32 and rounded to the output's element type (0 for an
    empty segment). `grad` is [T, N], the output [G, N].
  }];
  let arguments = (ins TE_AnyTensor:$grad, TE_AnyTensor:$m_splits);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $grad `,` $m_splits attr-dict `:` functional-type(operands, results)
  }];
}

def TE_GroupedQuantizeOp : TE_PrimOp<"grouped_quantize"> {
  let summary = "Casts to FP8 with one scale per group";
  let description = [{
    te.quantize with a scale and an amax per group (`scale`, `amax`: f32
    [G]). Groups are the row segments of a matrix [T, K] when `m_splits`
    is given, else the leading index of a [G, R, C] tensor (GroupedLinear's
    stacked weights). Each element is cast as te.quantize casts it, with its
    group's scale; `amax[g]` is max |x| over the group (0 when empty). Rows
    past the segments are written as 0 and enter no amax. With `transpose`
    the output is the cast transposed per group: [K, T] for a matrix (its
    segment g is columns [o_g, o_g + m_splits[g])), [G, C, R] for stacked
    matrices; that is the copy a backward GEMM reads K-major.

    ```mlir
    %q, %amax = te.grouped_quantize %x, %scale, %m_splits
        : (tensor<8192x4096xbf16>, tensor<8xf32>, tensor<8xi32>)
          -> (tensor<8192x4096xf8E4M3FN>, tensor<8xf32>)
    ```
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$scale,
                   Optional<TE_AnyTensor>:$m_splits, UnitAttr:$transpose);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$amax);
  let extraClassDeclaration = [{
    /// The number of groups (the size of `scale`).
    int64_t getNumGroups();
  }];
  let assemblyFormat = [{
    $input `,` $scale (`,` $m_splits^)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_GroupedBlockQuantizeOp : TE_PrimOp<"grouped_block_quantize"> {
  let summary = "Casts to FP8 in blocks, per group (Float8BlockScaling)";
  let description = [{
    te.block_quantize for GroupedLinear: each group is cast as its own
    matrix would be, so a block never spans two groups. With `m_splits`,
    `input` is x [T, K] in row segments and `block_dim` is 1: without
    `transpose` each row's blocks of 128 along K (output [T, K]); with it
    the cast is x^T [K, T] with blocks of 128 columns counted from each
    segment's first column. Without `m_splits`, `input` is [G, R, C] and
    group g is cast as te.block_quantize casts input[g] (1-D or 2-D
    blocks, transposed with `transpose`). Rows (columns) past the segments
    are written as 0. Scales follow te.block_quantize's rules; `scale_inv`
    lies where each group's GEMM reads it
    (dialects/GroupedBlockScaleLayout.h): f32 [ceil(K/128), T] (segments),
    [ceil(T/128) + G, pad4(K)] (transposed segments) or [G, s0, s1]
    (stacked).

    ```mlir
    %q, %s = te.grouped_block_quantize %x, %m_splits {block_dim = 1 : i64, power_2_scale}
        : (tensor<8192x4096xbf16>, tensor<8xi32>)
          -> (tensor<8192x4096xf8E4M3FN>, tensor<32x8192xf32>)
    ```
  }];
  let arguments = (ins TE_AnyTensor:$input, Optional<TE_AnyTensor>:$m_splits,
                   I64Attr:$block_dim, UnitAttr:$transpose,
                   UnitAttr:$power_2_scale);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$scale_inv);
  let assemblyFormat = [{
    $input (`,` $m_splits^)? attr-dict `:` functional-type(operands, results)
  }];
}

def TE_GroupedAmaxOp : TE_PrimOp<"grouped_amax"> {
  let summary = "max |input| per group (current scaling's first pass)";
  let description = [{
    `amax[g]` (f32 [G]) is te.grouped_quantize's amax of group g: row
    segments of a [T, K] matrix with `m_splits`, else slices of [G, R, C].
  }];
  let arguments = (ins TE_AnyTensor:$input, Optional<TE_AnyTensor>:$m_splits);
  let results = (outs TE_AnyTensor:$amax);
  let assemblyFormat = [{
    $input (`,` $m_splits^)? attr-dict `:` functional-type(operands, results)
  }];
}

def TE_GroupedScaledMatmulOp : TE_PrimOp<"grouped_scaled_matmul"> {
  let summary = "FP8 grouped GEMM, per-group scale inverses";
  let description = [{
    te.grouped_matmul on K-major FP8 operands (TN, as te.scaled_matmul),
    with `a_scale_inv` and `b_scale_inv` f32 [G] (one scale per group and
    operand), or, under Float8BlockScaling, both te.grouped_block_quantize's
    block scales (each group's GEMM scaled as te.scaled_matmul with block
    scales; no `fast_accum`, never two 2-D operands):
    - rows (`b` [G, N, K]): `a` [T, K]; output [T, N], segment g =
      `(a[seg g] * a_scale_inv[g]) (b[g] * b_scale_inv[g])^T (+ bias[g])`,
      rows past the segments 0.
    - contraction (`b` [N, T]): `a` [M, T]; output [G, M, N], group g =
      `(a[:, seg g] * a_scale_inv[g]) (b[:, seg g] * b_scale_inv[g])^T`
      (the segments are column ranges: the transposed copies of
      te.grouped_quantize), zeros for an empty segment. No bias.
    Never E5M2 x E5M2; `fast_accum` as te.scaled_matmul.
  }];
  let arguments = (ins TE_AnyTensor:$a, TE_AnyTensor:$b,
                   TE_AnyTensor:$a_scale_inv, TE_AnyTensor:$b_scale_inv,
                   TE_AnyTensor:$m_splits, Optional<TE_AnyTensor>:$bias,
                   UnitAttr:$fast_accum);
  let results = (outs TE_AnyTensor:$output);
  let extraClassDeclaration = [{
    /// True for the rows form (b holds one matrix per group).
    bool isRowsForm() { return getB().getType().getRank() == 3; }
    /// How operand a (b) is scaled: 0 = one scale per group, 1 or 2 = 1-D
    /// or 2-D blocks (dialects/GroupedBlockScaleLayout.h), -1 = invalid.
    int64_t getAScaling();
    int64_t getBScaling();
  }];
  let assemblyFormat = [{
    $a `,` $b `,` $a_scale_inv `,` $b_scale_inv `,` $m_splits
    (`bias` `(` $bias^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

#endif // TEJIT_DIALECT_TE_GROUPED_OPS_TD
