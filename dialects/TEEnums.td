//===- TEEnums.td - enums of the te dialect ----------------*- tablegen -*-===//
#ifndef TEJIT_DIALECT_TE_ENUMS_TD
#define TEJIT_DIALECT_TE_ENUMS_TD

include "mlir/IR/EnumAttr.td"
include "TEDialect.td"

class TE_Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::mlir::te";
  let genSpecializedAttr = 0;
}

// Printed as `#te.activation<gelu>`; EnumAttr's default format (`$value`)
// would print `#te.activation gelu`, which the dialect parser cannot read back.
class TE_EnumAttr<TE_Enum enumInfo, string mnemonic>
    : EnumAttr<TE_Dialect, enumInfo, mnemonic> {
  let assemblyFormat = "`<` $value `>`";
}

// E5M2 is listed so that it parses and its verifier can explain why it is
// not a recipe format, as Transformer Engine's Format enum also lists it.
def TE_Fp8Format : TE_Enum<"Fp8Format", "FP8 format of a scaling recipe", [
  I32EnumAttrCase<"E4M3", 0, "e4m3">,
  I32EnumAttrCase<"E5M2", 1, "e5m2">,
  I32EnumAttrCase<"HYBRID", 2, "hybrid">
]>;

// The summary also names the enum in parse errors ("invalid amax history
// reduction specification: mean").
def TE_AmaxComputeAlgo : TE_Enum<"AmaxComputeAlgo", "amax history reduction", [
  I32EnumAttrCase<"max", 0>,
  I32EnumAttrCase<"most_recent", 1>
]>;

def TE_Activation : TE_Enum<"Activation", "MLP activation function", [
  I32EnumAttrCase<"gelu", 0>,
  I32EnumAttrCase<"geglu", 1>,
  I32EnumAttrCase<"qgelu", 2>,
  I32EnumAttrCase<"qgeglu", 3>,
  I32EnumAttrCase<"relu", 4>,
  I32EnumAttrCase<"reglu", 5>,
  I32EnumAttrCase<"srelu", 6>,
  I32EnumAttrCase<"sreglu", 7>,
  I32EnumAttrCase<"silu", 8>,
  I32EnumAttrCase<"swiglu", 9>,
  I32EnumAttrCase<"clamped_swiglu", 10>
]>;
def TE_ActivationAttr : TE_EnumAttr<TE_Activation, "activation">;

def TE_Normalization : TE_Enum<"Normalization", "normalization layer kind", [
  I32EnumAttrCase<"LayerNorm", 0>,
  I32EnumAttrCase<"RMSNorm", 1>
]>;
def TE_NormalizationAttr : TE_EnumAttr<TE_Normalization, "normalization">;

def TE_AttnMaskType : TE_Enum<"AttnMaskType", "attention mask type", [
  I32EnumAttrCase<"no_mask", 0>,
  I32EnumAttrCase<"padding", 1>,
  I32EnumAttrCase<"causal", 2>,
  I32EnumAttrCase<"padding_causal", 3>,
  I32EnumAttrCase<"causal_bottom_right", 4>,
  I32EnumAttrCase<"padding_causal_bottom_right", 5>,
  I32EnumAttrCase<"arbitrary", 6>
]>;
def TE_AttnMaskTypeAttr : TE_EnumAttr<TE_AttnMaskType, "attn_mask_type">;

// Transformer Engine's core_attention_bias_type (docs/attention-bias.md):
// `post_scale_bias` adds a bias operand to the scaled scores, `alibi` adds
// -slope[h] * |i - j + off| (TE's ALiBi). TE's `pre_scale_bias` is not a
// case: callers pass bias * softmax_scale as a post-scale bias.
def TE_AttnBiasType : TE_Enum<"AttnBiasType", "attention bias type", [
  I32EnumAttrCase<"no_bias", 0>,
  I32EnumAttrCase<"post_scale_bias", 1>,
  I32EnumAttrCase<"alibi", 2>
]>;
def TE_AttnBiasTypeAttr : TE_EnumAttr<TE_AttnBiasType, "attn_bias_type">;

def TE_QkvFormat : TE_Enum<"QkvFormat",
    "memory layout of attention inputs (s = sequence, b = batch, h = heads, "
    "d = head dim)", [
  I32EnumAttrCase<"sbhd", 0>,
  I32EnumAttrCase<"bshd", 1>,
  // Packed variable-length sequences: the tokens of every sequence back to
  // back ([t, h, d]), with cu_seqlens saying where each starts.
  I32EnumAttrCase<"thd", 2>
]>;
def TE_QkvFormatAttr : TE_EnumAttr<TE_QkvFormat, "qkv_format">;

def TE_GemmRole : TE_Enum<"GemmRole", "GEMM role in a Linear's training step", [
  I32EnumAttrCase<"fprop", 0>,
  I32EnumAttrCase<"dgrad", 1>,
  I32EnumAttrCase<"wgrad", 2>
]>;
def TE_GemmRoleAttr : TE_EnumAttr<TE_GemmRole, "gemm_role">;

// How a Linear's GEMM is split over the ranks of a tensor-parallel group
// (Megatron's, as Transformer Engine's `parallel_mode`): `column` splits the
// output features, `row` the input features (its outputs are summed).
def TE_ParallelMode : TE_Enum<"ParallelMode",
    "tensor-parallel split of a Linear", [
  I32EnumAttrCase<"column", 0>,
  I32EnumAttrCase<"row", 1>
]>;
def TE_ParallelModeAttr : TE_EnumAttr<TE_ParallelMode, "parallel_mode">;

#endif // TEJIT_DIALECT_TE_ENUMS_TD
