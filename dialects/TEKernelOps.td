//===- TEKernelOps.td - fused kernel regions of te ---------*- tablegen -*-===//
//
// What te-fuse forms: a region of primitive ops that runs as one kernel (a
// generated elementwise/reduction kernel, or a GEMM with its epilogue).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECT_TE_KERNEL_OPS_TD
#define TEJIT_DIALECT_TE_KERNEL_OPS_TD

include "TEPrimitiveOps.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

def TE_FusedOp : TE_Op<"fused", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "Primitive ops that run as one kernel";
  let description = [{
    The region computes the op's results from its operands (the block
    arguments) and yields them; values it computes and does not yield never
    reach device memory. `kind` names the fusion pattern, which the backend
    turns into one generated kernel or one library call:
    `norm_cast` (normalization + FP8 cast + transpose), `act_cast`
    (bias + activation + FP8 cast + transpose), `dact_dbias_cast`
    (activation gradient + bias gradient + FP8 cast + transpose),
    `bias_dropout_add`, `cast_transpose` (FP8 cast + transpose, with the
    bias gradient and the dropout backward / residual add before it),
    `norm_bwd_add` (normalization backward whose input gradient is added to
    a residual gradient), and `gemm` (a GEMM with the epilogue ops cuBLASLt
    fuses: bias, GELU, dGELU and bias gradient for bf16/fp16 GEMMs, FP8
    output, and a residual `te.add` of a non-FP8 output, read as C).

    ```mlir
    %q, %amax = te.fused "norm_cast" (%x, %g, %b, %s)
        : (tensor<8192x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>,
           tensor<1xf32>) -> (tensor<8192x4096xf8E4M3FN>, tensor<1xf32>) {
    ^bb0(%x0: tensor<8192x4096xbf16>, ...):
      %y, %mean, %rsigma = te.layernorm_fwd %x0, %g0, %b0 ...
      %q0, %a0 = te.quantize %y, %s0 ...
      te.yield %q0, %a0 : tensor<8192x4096xf8E4M3FN>, tensor<1xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$inputs, StrAttr:$kind);
  let results = (outs Variadic<AnyType>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)
    $body
  }];
  let hasVerifier = 1;
}

def TE_YieldOp : TE_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"FusedOp">]> {
  let summary = "The results of a te.fused region";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* no values */ }]>];
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
}

#endif // TEJIT_DIALECT_TE_KERNEL_OPS_TD
