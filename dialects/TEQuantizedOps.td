//===- TEQuantizedOps.td - FP8 quantization ops of te -------*- tablegen -*-===//
//
// What te-place-scaling introduces: casts to FP8 that record amaxes, scaled
// GEMMs on FP8 operands, and the per-step scale bookkeeping of the recipes.
// Scales, scale inverses and amaxes are tensor<1xf32> values (one slot of a
// meta vector), so that te.slice and te.concat move them in and out of the
// tensor<Nxf32> meta state the runtime keeps on the device.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECT_TE_QUANTIZED_OPS_TD
#define TEJIT_DIALECT_TE_QUANTIZED_OPS_TD

include "TEPrimitiveOps.td"

def TE_QuantizeOp : TE_PrimOp<"quantize"> {
  let summary = "Casts to FP8 with a scale, recording the input's amax";
  let description = [{
    `output = fp8(input * scale)`, saturating to the FP8 type's largest
    finite value and rounding to nearest even (NaN stays NaN); `amax` is
    `max |input|` of the high-precision input. The FP8 type is the output's
    element type (f8E4M3FN or f8E5M2).

    ```mlir
    %q, %amax = te.quantize %x, %scale
        : tensor<8192x4096xbf16>, tensor<1xf32>
          -> tensor<8192x4096xf8E4M3FN>, tensor<1xf32>
    ```
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$scale);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$amax);
  let assemblyFormat = [{
    $input `,` $scale attr-dict `:` type($input) `,` type($scale) `->`
    type($output) `,` type($amax)
  }];
}

def TE_BlockQuantizeOp : TE_PrimOp<"block_quantize"> {
  let summary = "Casts to FP8 in blocks, each scaled by its own amax";
  let description = [{
    Float8BlockScaling's cast. The matrix cast is `input`, or `input`
    transposed with `transpose` (the "columnwise" copy a backward GEMM
    reads, quantized from the high-precision values: a 1-D block-scaled
    tensor cannot be transposed after the cast). It is cut into blocks of
    128 consecutive elements of a row (`block_dim = 1`) or 128 x 128 tiles
    (`block_dim = 2`); partial blocks at the edges are blocks too. Each
    block gets `scale = fp8_max / amax` with te.compute_scale's rules (1
    when amax is 0, inf or NaN; FLT_MAX on overflow; rounded down to a
    power of two with `power_2_scale`), `output = fp8(x * scale)` as
    te.quantize casts, and `scale_inv = 1 / scale` at the block's place in
    cuBLASLt's layout (dialects/BlockScaleLayout.h).

    ```mlir
    %q, %s = te.block_quantize %x {block_dim = 1 : i64, power_2_scale}
        : tensor<8192x4096xbf16> -> tensor<8192x4096xf8E4M3FN>, tensor<32x8192xf32>
    ```
  }];
  let arguments = (ins TE_AnyTensor:$input, I64Attr:$block_dim,
                   UnitAttr:$transpose, UnitAttr:$power_2_scale);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$scale_inv);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($output) `,` type($scale_inv)
  }];
}

def TE_AmaxOp : TE_PrimOp<"amax"> {
  let summary = "max |input| (the first pass of current scaling)";
  let arguments = (ins TE_AnyTensor:$input);
  let results = (outs TE_AnyTensor:$amax);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($amax)";
}

def TE_ComputeScaleOp : TE_PrimOp<"compute_scale"> {
  let summary = "Current scaling's scale from an amax";
  let description = [{
    `scale = fp8_max / amax`: 1 when amax is 0, inf or NaN; FLT_MAX when the
    quotient overflows; with `power_2_scale`, rounded down to a power of two
    (the mantissa masked off). `scale_inv = 1 / scale`. `fp8_max` is the
    largest finite value of `fp8_type`. Element-wise on vectors: one slot
    (`tensor<1xf32>`), or one per group for te.grouped_quantize.
  }];
  let arguments = (ins TE_AnyTensor:$amax, TypeAttr:$fp8_type,
                   UnitAttr:$power_2_scale);
  let results = (outs TE_AnyTensor:$scale, TE_AnyTensor:$scale_inv);
  let assemblyFormat = [{
    $amax attr-dict `:` type($amax) `->` type($scale) `,` type($scale_inv)
  }];
}

def TE_ScaledMatmulOp : TE_PrimOp<"scaled_matmul"> {
  let summary = "FP8 GEMM: `(a * a_scale_inv) (b * b_scale_inv)^T`";
  let description = [{
    Both FP8 operands are K-major, as Hopper's FP8 tensor cores need (TN):
    `a` is [M, K], `b` is [N, K], and the output [M, N] is
    `sum_k a[m,k] b[n,k] * a_scale_inv * b_scale_inv`, accumulated in f32
    (with `fast_accum`, cuBLASLt's faster and less precise accumulation,
    used for forward GEMMs). Never E5M2 x E5M2.

    A scale inverse is one meta slot (`tensor<1xf32>`, one scale for the
    operand) or, under Float8BlockScaling, the block scale inverses of
    te.block_quantize, whose shape says whether the operand's blocks are
    1-D or 2-D (dialects/BlockScaleLayout.h); never two 2-D operands, and
    block-scaled GEMMs accumulate without `fast_accum` (cuBLASLt has no
    such kernel).
  }];
  let arguments = (ins TE_AnyTensor:$a, TE_AnyTensor:$b,
                   TE_AnyTensor:$a_scale_inv, TE_AnyTensor:$b_scale_inv,
                   UnitAttr:$fast_accum);
  let results = (outs TE_AnyTensor:$output);
  let extraClassDeclaration = [{
    /// How operand a (b) is scaled: 0 = one scale, 1 or 2 = 1-D or 2-D
    /// blocks, -1 = an invalid scale_inv.
    int64_t getAScaling();
    int64_t getBScaling();
  }];
  let assemblyFormat = [{
    $a `,` $b `,` $a_scale_inv `,` $b_scale_inv attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_AmaxAllReduceOp : TE_PrimOp<"amax_allreduce",
    [AllTypesMatch<["amaxes", "output"]>]> {
  let summary = "MAX all-reduce of amaxes across ranks";
  let description = [{
    The identity in one process; over an NCCL communicator at run time.
    DelayedScaling with `reduce_amax` and Float8CurrentScaling with a
    tensor-parallel group reduce before their scales are computed.
  }];
  let arguments = (ins TE_AnyTensor:$amaxes);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = "$amaxes attr-dict `:` type($amaxes)";
}

def TE_DelayedScalingUpdateOp : TE_PrimOp<"delayed_scaling_update"> {
  let summary = "One step of DelayedScaling for a vector of meta slots";
  let description = [{
    For every slot `i` with this step's amax `a = amaxes[i]`: when `a == 0`
    nothing changes. Otherwise the window is `amax_history[1..len-1, i]`
    plus `a`; `amax = max(window)` (`max`) or `a` (`most_recent`); the
    history shifts up by one with `a` written last and row 0 cleared; and
    `scale = (fp8_max * 2^-margin) / amax` when amax is finite and > 0
    (FLT_MAX if that overflows), else the old scale. `scale_inv = 1/scale`.
    `fp8_type` picks fp8_max; margin, history length and algorithm come from
    `recipe`.
  }];
  let arguments = (ins TE_AnyTensor:$amax_history, TE_AnyTensor:$scale,
                   TE_AnyTensor:$amaxes, TE_DelayedScalingAttr:$recipe,
                   TypeAttr:$fp8_type);
  let results = (outs TE_AnyTensor:$new_amax_history, TE_AnyTensor:$new_scale,
                 TE_AnyTensor:$new_scale_inv);
  let assemblyFormat = [{
    $amax_history `,` $scale `,` $amaxes attr-dict
    `:` functional-type(operands, results)
  }];
}

def TE_DequantizeOp : TE_PrimOp<"dequantize"> {
  let summary = "FP8 back to high precision: `input * scale_inv`";
  let description = [{
    `output = float(input) * scale_inv`, rounded to the output's element
    type (bf16, f16 or f32); `scale_inv` is one meta slot. FP8 attention
    (docs/fp8-attention.md) hands its FP8 output and gradients back to the
    bf16/f16 graph with it, as Transformer Engine dequantizes them when
    `fp8_mha` is off.
  }];
  let arguments = (ins TE_AnyTensor:$input, TE_AnyTensor:$scale_inv);
  let results = (outs TE_AnyTensor:$output);
  let assemblyFormat = [{
    $input `,` $scale_inv attr-dict `:` type($input) `,` type($scale_inv)
    `->` type($output)
  }];
}

def TE_Fp8AttentionOp : TE_PrimOp<"fp8_attention",
    [AttrSizedOperandSegments]> {
  let summary = "te.attention on FP8 q, k, v with an FP8 output (fp8_dpa)";
  let description = [{
    Transformer Engine's FP8 dot-product attention (DelayedScaling with
    `fp8_dpa`, docs/fp8-attention.md). `query`, `key`, `value` are FP8
    (f8E4M3FN) in te.attention's 4-D layouts (sbhd or bshd), all three
    dequantized by `qkv_scale_inv`. With Q, K, V the dequantized values:
      P = softmax(Q K^T * softmax_scale + mask)
      O = P V
    `amax_s = max P` and `amax_o = max |O|` (each `tensor<1xf32>`); the
    output is `fp8(O * o_scale)` (f8E4M3FN, q's shape) and `softmax_lse`
    te.attention's f32 `[b, heads, s_q]` statistics. On the GPU, P is cast
    to E4M3 with the fixed scale 448 before the second matmul (cuDNN casts
    its running softmax's unnormalized probabilities, up to 1); the
    float64 reference (the interpreter) computes P V exactly. Masks, GQA,
    `pad_keys_only` as te.attention; `dropout` must be 0 (cuDNN's FP8
    engines fault on it); no bias, ALiBi, window or thd.
  }];
  let arguments = (ins TE_AnyTensor:$query, TE_AnyTensor:$key,
                   TE_AnyTensor:$value, TE_AnyTensor:$qkv_scale_inv,
                   TE_AnyTensor:$o_scale,
                   Optional<TE_AnyTensor>:$attention_mask,
                   Optional<TE_AnyTensor>:$query_mask,
                   Optional<TE_AnyTensor>:$rng_state,
                   TE_AttnMaskTypeAttr:$attn_mask_type,
                   TE_QkvFormatAttr:$qkv_format, F64Attr:$softmax_scale,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   DefaultValuedAttr<I64Attr, "0">:$stream,
                   UnitAttr:$pad_keys_only);
  let results = (outs TE_AnyTensor:$output, TE_AnyTensor:$softmax_lse,
                 TE_AnyTensor:$amax_s, TE_AnyTensor:$amax_o);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $qkv_scale_inv `,` $o_scale
    (`mask` `(` $attention_mask^ `)`)?
    (`query_mask` `(` $query_mask^ `)`)? (`rng` `(` $rng_state^ `)`)?
    attr-dict `:` functional-type(operands, results)
  }];
}

def TE_Fp8AttentionBwdOp : TE_PrimOp<"fp8_attention_bwd",
    [AttrSizedOperandSegments]> {
  let summary = "Gradients of te.fp8_attention, in FP8";
  let description = [{
    `grad` is dO in FP8 (the backward format: f8E5M2 under HYBRID,
    f8E4M3FN under E4M3) dequantized by `grad_scale_inv`; `query`, `key`,
    `value`, `output` and `softmax_lse` are te.fp8_attention's FP8 operands,
    its FP8 output (dequantized by `o_scale_inv`) and statistics. With the
    dequantized values the gradients are te.attention_bwd's: dP = dO V^T,
    dS = P * (dP - rowsum(dO * O)) * softmax_scale, dQ = dS K, dK = dS^T Q,
    dV = P^T dO. `amax_dp = max |dS|` (cuDNN's amax of its scaled dP: the
    gradient of the raw q k^T) and
    `amax_dq`, `amax_dk`, `amax_dv` are the gradients' max |.|; the results
    are `fp8(dQ * dqkv_scale)` etc. in `grad`'s FP8 type, q's, k's and v's
    shapes. On the GPU P is cast with the forward's fixed scale and dS
    with `dp_scale` to `grad`'s type, dequantized with `dp_scale_inv`; the
    float64 reference computes them exactly.
  }];
  let arguments = (ins TE_AnyTensor:$grad, TE_AnyTensor:$query,
                   TE_AnyTensor:$key, TE_AnyTensor:$value,
                   TE_AnyTensor:$output, TE_AnyTensor:$softmax_lse,
                   TE_AnyTensor:$qkv_scale_inv, TE_AnyTensor:$o_scale_inv,
                   TE_AnyTensor:$grad_scale_inv, TE_AnyTensor:$dp_scale,
                   TE_AnyTensor:$dp_scale_inv, TE_AnyTensor:$dqkv_scale,
                   Optional<TE_AnyTensor>:$attention_mask,
                   Optional<TE_AnyTensor>:$query_mask,
                   Optional<TE_AnyTensor>:$rng_state,
                   TE_AttnMaskTypeAttr:$attn_mask_type,
                   TE_QkvFormatAttr:$qkv_format, F64Attr:$softmax_scale,
                   DefaultValuedAttr<F64Attr, "0.0">:$dropout,
                   DefaultValuedAttr<I64Attr, "0">:$stream,
                   UnitAttr:$pad_keys_only);
  let results = (outs TE_AnyTensor:$query_grad, TE_AnyTensor:$key_grad,
                 TE_AnyTensor:$value_grad, TE_AnyTensor:$amax_dp,
                 TE_AnyTensor:$amax_dq, TE_AnyTensor:$amax_dk,
                 TE_AnyTensor:$amax_dv);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value `,` $output `,` $softmax_lse `,`
    $qkv_scale_inv `,` $o_scale_inv `,` $grad_scale_inv `,` $dp_scale `,`
    $dp_scale_inv `,` $dqkv_scale
    (`mask` `(` $attention_mask^ `)`)? (`query_mask` `(` $query_mask^ `)`)?
    (`rng` `(` $rng_state^ `)`)? attr-dict
    `:` functional-type(operands, results)
  }];
}

#endif // TEJIT_DIALECT_TE_QUANTIZED_OPS_TD
