//===- TEAttributes.td - FP8 recipe attributes -------------*- tablegen -*-===//
#ifndef TEJIT_DIALECT_TE_ATTRIBUTES_TD
#define TEJIT_DIALECT_TE_ATTRIBUTES_TD

include "mlir/IR/AttrTypeBase.td"
include "TEEnums.td"

def TE_FP8RecipeAttrInterface : AttrInterface<"FP8RecipeAttrInterface"> {
  let cppNamespace = "::mlir::te";
  let description = [{
    An FP8 scaling recipe: says how the tensors feeding a layer's GEMMs are
    quantized to FP8 and how their scales are chosen.
  }];
  let methods = [
    InterfaceMethod<"The recipe's FP8 format (e4m3 or hybrid).",
      "::mlir::te::Fp8Format", "getFormat">
  ];
  let extraClassDeclaration = [{
    /// Element type of forward-pass FP8 tensors (inputs, weights): E4M3.
    ::mlir::FloatType getForwardType() const;
    /// Element type of backward-pass FP8 tensors (output gradients): E5M2
    /// under hybrid, E4M3 under e4m3.
    ::mlir::FloatType getBackwardType() const;
  }];
}

class TE_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<TE_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

// A bool recipe parameter written as `true`/`false`.
class TE_BoolParameter<string desc, string default>
    : AttrOrTypeParameter<"bool", desc> {
  let parser = "::mlir::te::parseBoolParameter($_parser)";
  let printer = "$_printer << ($_self ? \"true\" : \"false\")";
  let defaultValue = default;
}

def TE_DelayedScalingAttr : TE_Attr<"DelayedScaling", "delayed_scaling",
    [DeclareAttrInterfaceMethods<TE_FP8RecipeAttrInterface>]> {
  let summary = "Transformer Engine's DelayedScaling recipe";
  let description = [{
    Scales each tensor from the amax history of earlier steps:
    `scale = (fp8_max * 2^-margin) / amax`, where `amax` is the maximum
    (`max`) or the latest entry (`most_recent`) of a window of
    `amax_history_len` steps. With `reduce_amax`, amaxes are all-reduced
    (MAX) across the data-parallel group before the update. Parameters left
    out take Transformer Engine's defaults.

    ```mlir
    #te.delayed_scaling<fp8_format = hybrid, amax_history_len = 16, amax_compute_algo = max>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "0", "scale margin (power of two)">:$margin,
    DefaultValuedParameter<"::mlir::te::Fp8Format",
      "::mlir::te::Fp8Format::HYBRID", "FP8 format">:$fp8_format,
    DefaultValuedParameter<"int64_t", "1024", "amax history length">:$amax_history_len,
    DefaultValuedParameter<"::mlir::te::AmaxComputeAlgo",
      "::mlir::te::AmaxComputeAlgo::max", "amax reduction over the history">:$amax_compute_algo,
    TE_BoolParameter<"all-reduce amaxes across ranks", "true">:$reduce_amax,
    TE_BoolParameter<"FP8 dot-product attention (TE's fp8_dpa)", "false">:$fp8_dpa
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def TE_CurrentScalingAttr : TE_Attr<"CurrentScaling", "current_scaling",
    [DeclareAttrInterfaceMethods<TE_FP8RecipeAttrInterface>]> {
  let summary = "Transformer Engine's Float8CurrentScaling recipe";
  let description = [{
    Scales each tensor from its own amax in the same step
    (`scale = fp8_max / amax`): one pass computes the amax, a second casts.
    With `power_2_scale`, each scale is rounded down to a power of two.

    ```mlir
    #te.current_scaling<fp8_format = hybrid>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"::mlir::te::Fp8Format",
      "::mlir::te::Fp8Format::HYBRID", "FP8 format">:$fp8_format,
    TE_BoolParameter<"round scales down to powers of two", "false">:$power_2_scale
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def TE_BlockScalingAttr : TE_Attr<"BlockScaling", "block_scaling",
    [DeclareAttrInterfaceMethods<TE_FP8RecipeAttrInterface>]> {
  let summary = "Transformer Engine's Float8BlockScaling recipe";
  let description = [{
    Scales each block of a tensor by that block's own amax in the same
    step (DeepSeek-V3's recipe): blocks of 128 consecutive elements along a
    GEMM's contracting dim (`*_block_scaling_dim = 1`) or tiles of 128 x 128
    (`= 2`), for GEMM inputs (x), weights (w) and output gradients (grad).
    No GEMM may pair two 2-D operands (cuBLASLt has no such kernel). With
    `power_2_scale` (TE's default), scales are rounded down to powers of
    two. Transformer Engine's default format here is e4m3.

    ```mlir
    #te.block_scaling<fp8_format = e4m3, x_block_scaling_dim = 1, w_block_scaling_dim = 2>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"::mlir::te::Fp8Format",
      "::mlir::te::Fp8Format::E4M3", "FP8 format">:$fp8_format,
    DefaultValuedParameter<"int64_t", "1", "block dims of GEMM inputs">:$x_block_scaling_dim,
    DefaultValuedParameter<"int64_t", "2", "block dims of weights">:$w_block_scaling_dim,
    DefaultValuedParameter<"int64_t", "1", "block dims of output gradients">:$grad_block_scaling_dim,
    TE_BoolParameter<"round scales down to powers of two", "true">:$power_2_scale
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def TE_FP8RecipeAttr : Attr<
    CPred<"::llvm::isa<::mlir::te::FP8RecipeAttrInterface>($_self)">,
    "FP8 recipe (#te.delayed_scaling, #te.current_scaling or #te.block_scaling)"> {
  let storageType = "::mlir::te::FP8RecipeAttrInterface";
  let returnType = "::mlir::te::FP8RecipeAttrInterface";
  let convertFromStorage = "$_self";
}

// A sliding attention window: array<i64: left, right>, -1 = unbounded.
defvar TE_AttentionWindow = DenseI64ArrayAttr;

#endif // TEJIT_DIALECT_TE_ATTRIBUTES_TD
