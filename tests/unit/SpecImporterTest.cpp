//===- SpecImporterTest.cpp - valid layer specs and the IR they import to -===//
//
// Each test imports an inline spec and checks the function it becomes: the
// ops, their attributes, and the arguments' `te.name`s and types. Defaults
// are checked against Transformer Engine's constructor defaults.
//
//===----------------------------------------------------------------------===//
#include "SpecTestUtils.h"

#include "compiler/spec/SpecImporter.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "gmock/gmock.h"

#include <map>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::testing;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

namespace {

using SpecImporter = SpecTest;

double toDouble(const llvm::APFloat &value) { return value.convertToDouble(); }

//===----------------------------------------------------------------------===//
// Top level: function name, dtype, shapes, layout
//===----------------------------------------------------------------------===//

constexpr llvm::StringLiteral kLinearSpec = R"yaml(
name: lin
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 32
)yaml";

TEST_F(SpecImporter, LinearWithDefaults) {
  func::FuncOp function = importOk(kLinearSpec);
  ASSERT_TRUE(function);
  EXPECT_EQ(function.getSymName(), "lin");
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "layers.0.weight", "layers.0.bias"));
  EXPECT_THAT(paramNames(function),
              ElementsAre("layers.0.weight", "layers.0.bias"));
  EXPECT_EQ(argType(function, "input"), "tensor<16x2x64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.weight"), "tensor<32x64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.bias"), "tensor<32xbf16>");
  EXPECT_THAT(resultNames(function), ElementsAre("output"));
  EXPECT_EQ(str(function.getFunctionType()),
            "(tensor<16x2x64xbf16>, tensor<32x64xbf16>, tensor<32xbf16>) -> "
            "tensor<16x2x32xbf16>");
  EXPECT_THAT(opNames(function), ElementsAre("te.linear"));

  LinearOp linear = opsOf<LinearOp>(function).at(0);
  EXPECT_EQ(linear.getInput(), function.getArgument(0));
  EXPECT_EQ(linear.getWeight(), function.getArgument(1));
  EXPECT_EQ(linear.getBias(), function.getArgument(2));
  EXPECT_FALSE(linear.getFp8Recipe().has_value());
  // The op's location is the layer's mapping in the spec.
  EXPECT_EQ(locString(linear.getLoc()), "5:5");
  auto returnOp = cast<func::ReturnOp>(function.front().getTerminator());
  EXPECT_EQ(returnOp.getOperand(0), linear.getOutput());
  EXPECT_TRUE(succeeded(verify(function)));
}

TEST_F(SpecImporter, FunctionNameDefaultsToTheFileStem) {
  constexpr llvm::StringLiteral spec = R"yaml(
seq_length: 8
batch_size: 1
layers:
  - {type: LayerNorm, hidden_size: 16}
)yaml";
  func::FuncOp function = importOk(spec, "dir/my-model.v2.yaml");
  ASSERT_TRUE(function);
  EXPECT_EQ(function.getSymName(), "my_model_v2");
  // A stem starting with a digit is made an identifier.
  function = importOk(spec, "3layers.yml");
  ASSERT_TRUE(function);
  EXPECT_EQ(function.getSymName(), "layer_3layers");
}

TEST_F(SpecImporter, DescriptionIsIgnored) {
  func::FuncOp function = importOk(R"yaml(
name: described
description: "free text: any words"
seq_length: 8
batch_size: 1
layers:
  - {type: RMSNorm, hidden_size: 16}
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(opNames(function), ElementsAre("te.rmsnorm"));
}

struct DtypeCase {
  const char *spelling;
  const char *element;
};

class ParamsDtype : public SpecTest,
                    public ::testing::WithParamInterface<DtypeCase> {};

TEST_P(ParamsDtype, SetsActivationAndParameterTypes) {
  std::string spec = "seq_length: 4\nbatch_size: 2\n";
  if (*GetParam().spelling)
    spec += std::string("params_dtype: ") + GetParam().spelling + "\n";
  spec += "layers:\n  - {type: Linear, in_features: 8, out_features: 4}\n";
  func::FuncOp function = importOk(spec);
  ASSERT_TRUE(function);
  std::string element = GetParam().element;
  EXPECT_EQ(argType(function, "input"), "tensor<4x2x8x" + element + ">");
  EXPECT_EQ(argType(function, "layers.0.weight"),
            "tensor<4x8x" + element + ">");
  EXPECT_EQ(argType(function, "layers.0.bias"), "tensor<4x" + element + ">");
  EXPECT_EQ(str(function.getResultTypes()[0]), "tensor<4x2x4x" + element + ">");
}

INSTANTIATE_TEST_SUITE_P(
    AllSpellings, ParamsDtype,
    ::testing::Values(DtypeCase{"", "bf16"}, DtypeCase{"bf16", "bf16"},
                      DtypeCase{"bfloat16", "bf16"}, DtypeCase{"BF16", "bf16"},
                      DtypeCase{"fp16", "f16"}, DtypeCase{"float16", "f16"},
                      DtypeCase{"fp32", "f32"}, DtypeCase{"float32", "f32"}),
    [](const ::testing::TestParamInfo<DtypeCase> &info) {
      std::string name = *info.param.spelling ? info.param.spelling : "default";
      return name;
    });

TEST_F(SpecImporter, BshdLaysActivationsOutBatchFirst) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
input_format: bshd
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    attn_input_format: bshd
    self_attn_mask_type: padding
    rotary_pos_emb: true
)yaml");
  ASSERT_TRUE(function);
  EXPECT_EQ(argType(function, "input"), "tensor<2x32x64xbf16>");
  EXPECT_EQ(argType(function, "attention_mask"), "tensor<2x1x1x32xi1>");
  EXPECT_EQ(argType(function, "rotary_pos_emb"), "tensor<32x1x1x16xf32>");
  EXPECT_EQ(str(function.getResultTypes()[0]), "tensor<2x32x64xbf16>");
  TransformerLayerOp layer = opsOf<TransformerLayerOp>(function).at(0);
  EXPECT_EQ(layer.getAttnInputFormat(), QkvFormat::bshd);
  EXPECT_TRUE(succeeded(verify(function)));
}

TEST_F(SpecImporter, SbhdIsTheDefaultLayout) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    qkv_format: sbhd
)yaml");
  ASSERT_TRUE(function);
  EXPECT_EQ(argType(function, "input"), "tensor<32x2x64xbf16>");
  EXPECT_EQ(opsOf<MultiheadAttentionOp>(function).at(0).getQkvFormat(),
            QkvFormat::sbhd);
}

TEST_F(SpecImporter, LayerTypeAcceptsOpNamesAndAnyCase) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 4
batch_size: 2
layers:
  - {type: layernorm, hidden_size: 16}
  - {type: LINEAR, in_features: 16, out_features: 16}
  - {type: rmsNorm, hidden_size: 16}
  - {type: layernorm_mlp, hidden_size: 16, ffn_hidden_size: 32}
  - {type: transformer_layer, hidden_size: 16, ffn_hidden_size: 32,
     num_attention_heads: 2}
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(opNames(function),
              ElementsAre("te.layernorm", "te.linear", "te.rmsnorm",
                          "te.layernorm_mlp", "te.transformer_layer"));
}

TEST_F(SpecImporter, IsLayerSpecPath) {
  EXPECT_TRUE(tejit::isLayerSpecPath("a/b.yaml"));
  EXPECT_TRUE(tejit::isLayerSpecPath("b.yml"));
  EXPECT_TRUE(tejit::isLayerSpecPath("b.json"));
  EXPECT_FALSE(tejit::isLayerSpecPath("b.mlir"));
  EXPECT_FALSE(tejit::isLayerSpecPath("yaml"));
  EXPECT_FALSE(tejit::isLayerSpecPath("b.yaml.txt"));
  // Extensions are matched case-insensitively.
  EXPECT_TRUE(tejit::isLayerSpecPath("B.YAML"));
  EXPECT_TRUE(tejit::isLayerSpecPath("b.Json"));
}

TEST_F(SpecImporter, UpperCaseJsonExtensionIsStrictJson) {
  ImportResult result =
      import("{\"seq_length\": 4, \"batch_size\": 1,}", "SPEC.JSON");
  EXPECT_FALSE(result.module);
  ASSERT_EQ(result.diags.size(), 1u) << result.describe();
  EXPECT_EQ(result.diags[0].message, "invalid JSON: Expected object key");
}

//===----------------------------------------------------------------------===//
// Dense layers
//===----------------------------------------------------------------------===//

TEST_F(SpecImporter, LinearWithoutBias) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    name: proj
    in_features: 64
    out_features: 32
    bias: false
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function), ElementsAre("input", "proj.weight"));
  LinearOp linear = opsOf<LinearOp>(function).at(0);
  EXPECT_FALSE(linear.getBias());
}

TEST_F(SpecImporter, LayerNormDefaultsMatchTransformerEngine) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    name: ln
    hidden_size: 64
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function), ElementsAre("input", "ln.weight", "ln.bias"));
  EXPECT_EQ(argType(function, "ln.weight"), "tensor<64xbf16>");
  EXPECT_EQ(argType(function, "ln.bias"), "tensor<64xbf16>");
  LayerNormOp norm = opsOf<LayerNormOp>(function).at(0);
  // te.pytorch.LayerNorm(hidden_size, eps=1e-5, zero_centered_gamma=False)
  EXPECT_EQ(toDouble(norm.getEps()), 1e-5);
  EXPECT_FALSE(norm.getZeroCenteredGamma());
  EXPECT_EQ(str(norm.getOutput().getType()), "tensor<16x2x64xbf16>");
}

TEST_F(SpecImporter, RMSNormHasNoBias) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: RMSNorm
    name: rms
    hidden_size: 64
    eps: 1.0e-6
    zero_centered_gamma: true
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function), ElementsAre("input", "rms.weight"));
  RMSNormOp norm = opsOf<RMSNormOp>(function).at(0);
  EXPECT_EQ(toDouble(norm.getEps()), 1e-6);
  EXPECT_TRUE(norm.getZeroCenteredGamma());
}

TEST_F(SpecImporter, LayerNormLinearDefaults) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormLinear
    in_features: 64
    out_features: 192
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "layers.0.layer_norm_weight",
                          "layers.0.layer_norm_bias", "layers.0.weight",
                          "layers.0.bias"));
  EXPECT_EQ(argType(function, "layers.0.layer_norm_weight"), "tensor<64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.weight"), "tensor<192x64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.bias"), "tensor<192xbf16>");
  EXPECT_THAT(resultNames(function), ElementsAre("output"));
  LayerNormLinearOp op = opsOf<LayerNormLinearOp>(function).at(0);
  // te.pytorch.LayerNormLinear(..., eps=1e-5, bias=True,
  //   normalization="LayerNorm", return_layernorm_output=False)
  EXPECT_EQ(op.getNormalization(), Normalization::LayerNorm);
  EXPECT_EQ(toDouble(op.getEps()), 1e-5);
  EXPECT_FALSE(op.getZeroCenteredGamma());
  EXPECT_FALSE(op.getReturnLayernormOutput());
  EXPECT_FALSE(op.getLnOutput());
  EXPECT_EQ(op->getNumResults(), 1u);
}

TEST_F(SpecImporter, LayerNormLinearReturnsTheNormOutput) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormLinear
    name: qkv
    in_features: 64
    out_features: 192
    normalization: RMSNorm
    bias: false
    zero_centered_gamma: true
    eps: 0.001
    return_layernorm_output: true
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "qkv.layer_norm_weight", "qkv.weight"));
  // `output` first, then the layer's extra result, as TE returns
  // (out, ln_out).
  EXPECT_THAT(resultNames(function), ElementsAre("output", "qkv.ln_output"));
  EXPECT_EQ(str(function.getFunctionType().getResult(0)),
            "tensor<16x2x192xbf16>");
  EXPECT_EQ(str(function.getFunctionType().getResult(1)),
            "tensor<16x2x64xbf16>");
  LayerNormLinearOp op = opsOf<LayerNormLinearOp>(function).at(0);
  EXPECT_EQ(op.getNormalization(), Normalization::RMSNorm);
  EXPECT_TRUE(op.getReturnLayernormOutput());
  EXPECT_TRUE(op.getZeroCenteredGamma());
  EXPECT_EQ(toDouble(op.getEps()), 0.001);
  EXPECT_FALSE(op.getLnBias());
  EXPECT_FALSE(op.getBias());
  auto returnOp = cast<func::ReturnOp>(function.front().getTerminator());
  EXPECT_EQ(returnOp.getOperand(0), op.getOutput());
  EXPECT_EQ(returnOp.getOperand(1), op.getLnOutput());
}

TEST_F(SpecImporter, LayerNormMLPDefaults) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    name: mlp
    hidden_size: 64
    ffn_hidden_size: 256
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "mlp.layer_norm_weight",
                          "mlp.layer_norm_bias", "mlp.fc1_weight",
                          "mlp.fc1_bias", "mlp.fc2_weight", "mlp.fc2_bias"));
  EXPECT_EQ(argType(function, "mlp.fc1_weight"), "tensor<256x64xbf16>");
  EXPECT_EQ(argType(function, "mlp.fc1_bias"), "tensor<256xbf16>");
  EXPECT_EQ(argType(function, "mlp.fc2_weight"), "tensor<64x256xbf16>");
  EXPECT_EQ(argType(function, "mlp.fc2_bias"), "tensor<64xbf16>");
  LayerNormMLPOp op = opsOf<LayerNormMLPOp>(function).at(0);
  // te.pytorch.LayerNormMLP(..., eps=1e-5, bias=True,
  //   normalization="LayerNorm", activation="gelu")
  EXPECT_EQ(op.getActivation(), Activation::gelu);
  EXPECT_EQ(op.getNormalization(), Normalization::LayerNorm);
  EXPECT_EQ(toDouble(op.getEps()), 1e-5);
  EXPECT_FALSE(op.getReturnLayernormOutput());
  EXPECT_FALSE(op.getFp8Recipe().has_value());
}

TEST_F(SpecImporter, LayerNormMLPWithoutBiasesAndRMSNorm) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    name: mlp
    hidden_size: 64
    ffn_hidden_size: 256
    bias: false
    normalization: RMSNorm
    return_layernorm_output: true
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "mlp.layer_norm_weight", "mlp.fc1_weight",
                          "mlp.fc2_weight"));
  EXPECT_THAT(resultNames(function), ElementsAre("output", "mlp.ln_output"));
}

TEST_F(SpecImporter, OutputLeadsTheLayerNormOutputs) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - {type: LayerNormLinear, name: a, in_features: 32, out_features: 64,
     return_layernorm_output: true}
  - {type: Linear, in_features: 64, out_features: 64}
  - {type: LayerNormMLP, name: b, hidden_size: 64, ffn_hidden_size: 128,
     return_layernorm_output: true}
  - {type: Linear, in_features: 64, out_features: 16}
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(resultNames(function),
              ElementsAre("output", "a.ln_output", "b.ln_output"));
  EXPECT_EQ(str(function.getFunctionType()),
            "(tensor<16x2x32xbf16>, tensor<32xbf16>, tensor<32xbf16>, "
            "tensor<64x32xbf16>, tensor<64xbf16>, tensor<64x64xbf16>, "
            "tensor<64xbf16>, tensor<64xbf16>, tensor<64xbf16>, "
            "tensor<128x64xbf16>, tensor<128xbf16>, tensor<64x128xbf16>, "
            "tensor<64xbf16>, tensor<16x64xbf16>, tensor<16xbf16>) -> "
            "(tensor<16x2x16xbf16>, tensor<16x2x32xbf16>, "
            "tensor<16x2x64xbf16>)");
  EXPECT_TRUE(succeeded(verify(function)));
}

struct ActivationCase {
  const char *name;
  bool gated;
};

class MLPActivation : public SpecTest,
                      public ::testing::WithParamInterface<ActivationCase> {};

TEST_P(MLPActivation, GatedActivationsDoubleFC1) {
  std::string spec = "seq_length: 8\nbatch_size: 2\nlayers:\n"
                     "  - type: LayerNormMLP\n    hidden_size: 32\n"
                     "    ffn_hidden_size: 48\n    activation: " +
                     std::string(GetParam().name) + "\n";
  func::FuncOp function = importOk(spec);
  ASSERT_TRUE(function);
  LayerNormMLPOp op = opsOf<LayerNormMLPOp>(function).at(0);
  EXPECT_EQ(stringifyActivation(op.getActivation()), GetParam().name);
  std::string rows = GetParam().gated ? "96" : "48";
  EXPECT_EQ(argType(function, "layers.0.fc1_weight"),
            "tensor<" + rows + "x32xbf16>");
  EXPECT_EQ(argType(function, "layers.0.fc1_bias"),
            "tensor<" + rows + "xbf16>");
  EXPECT_EQ(argType(function, "layers.0.fc2_weight"), "tensor<32x48xbf16>");
  // No activation_params: no parameter attributes, whatever the activation.
  for (StringRef name : activationParamNames())
    EXPECT_FALSE(op->hasAttr(name)) << name.str();
  EXPECT_TRUE(succeeded(verify(function)));
}

INSTANTIATE_TEST_SUITE_P(
    All, MLPActivation,
    ::testing::Values(
        ActivationCase{"gelu", false}, ActivationCase{"geglu", true},
        ActivationCase{"qgelu", false}, ActivationCase{"qgeglu", true},
        ActivationCase{"relu", false}, ActivationCase{"reglu", true},
        ActivationCase{"srelu", false}, ActivationCase{"sreglu", true},
        ActivationCase{"silu", false}, ActivationCase{"swiglu", true},
        ActivationCase{"clamped_swiglu", true}),
    [](const ::testing::TestParamInfo<ActivationCase> &info) {
      return std::string(info.param.name);
    });

/// The parameter attributes `op` carries, by name (absent ones left out).
static std::map<std::string, double> activationParamAttrs(Operation *op) {
  std::map<std::string, double> params;
  for (StringRef name : activationParamNames())
    if (auto attr = op->getAttrOfType<FloatAttr>(name))
      params[name.str()] = attr.getValueAsDouble();
  return params;
}

TEST_F(SpecImporter, ClampedSwigluTakesActivationParams) {
  // GPT-OSS's MLP (TE's activation="clamped_swiglu", activation_params=
  // {"limit": 7.0, "alpha": 1.702}); the parameters a spec gives, and only
  // those, become attributes; integers are numbers too.
  func::FuncOp function = importOk(R"yaml(
seq_length: 8
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 32
    ffn_hidden_size: 48
    activation: clamped_swiglu
    activation_params: {limit: 0.75, alpha: 1.5, glu_linear_offset: 0}
  - type: TransformerLayer
    hidden_size: 32
    ffn_hidden_size: 16
    num_attention_heads: 2
    activation: clamped_swiglu
    activation_params:
      limit: 10
  - type: TransformerLayer
    hidden_size: 32
    ffn_hidden_size: 16
    num_attention_heads: 2
    activation: clamped_swiglu
  - type: LayerNormMLP
    hidden_size: 32
    ffn_hidden_size: 48
    activation: clamped_swiglu
    activation_params: {}
)yaml");
  ASSERT_TRUE(function);
  std::vector<LayerNormMLPOp> mlps = opsOf<LayerNormMLPOp>(function);
  std::vector<TransformerLayerOp> layers = opsOf<TransformerLayerOp>(function);
  ASSERT_EQ(mlps.size(), 2u);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(mlps[0].getActivation(), Activation::clamped_swiglu);
  EXPECT_EQ(layers[0].getActivation(), Activation::clamped_swiglu);
  using Params = std::map<std::string, double>;
  EXPECT_EQ(activationParamAttrs(mlps[0]),
            (Params{{"activation_limit", 0.75},
                    {"activation_alpha", 1.5},
                    {"glu_linear_offset", 0.0}}));
  EXPECT_EQ(activationParamAttrs(layers[0]),
            (Params{{"activation_limit", 10.0}}));
  EXPECT_EQ(activationParamAttrs(layers[1]), Params{});
  EXPECT_EQ(activationParamAttrs(mlps[1]), Params{});
  // Absent parameters are TE's defaults.
  ActivationParams params = ActivationParams::of(layers[0]);
  EXPECT_EQ(params.limit, 10.0);
  EXPECT_EQ(params.alpha, 1.702);
  EXPECT_EQ(params.offset, 1.0);
  // Gated: FC1 makes 2 * ffn features.
  EXPECT_EQ(argType(function, "layers.0.fc1_weight"), "tensor<96x32xbf16>");
  EXPECT_EQ(argType(function, "layers.1.layernorm_mlp.fc1_weight"),
            "tensor<32x32xbf16>");
  EXPECT_TRUE(succeeded(verify(function)));
}

//===----------------------------------------------------------------------===//
// Attention layers
//===----------------------------------------------------------------------===//

TEST_F(SpecImporter, DotProductAttentionDefaults) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 8
    kv_channels: 16
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function), ElementsAre("query", "key", "value"));
  EXPECT_THAT(paramNames(function), IsEmpty());
  EXPECT_EQ(argType(function, "query"), "tensor<32x2x8x16xbf16>");
  EXPECT_EQ(argType(function, "key"), "tensor<32x2x8x16xbf16>");
  EXPECT_EQ(argType(function, "value"), "tensor<32x2x8x16xbf16>");
  EXPECT_EQ(str(function.getResultTypes()[0]), "tensor<32x2x128xbf16>");
  DotProductAttentionOp op = opsOf<DotProductAttentionOp>(function).at(0);
  // te.pytorch.DotProductAttention(num_attention_heads, kv_channels,
  //   num_gqa_groups=None, attention_dropout=0.0, qkv_format="sbhd",
  //   attn_mask_type="causal", softmax_scale=None)
  EXPECT_EQ(op.getAttnMaskType(), AttnMaskType::causal);
  EXPECT_EQ(toDouble(op.getAttentionDropout()), 0.0);
  EXPECT_EQ(op.getQkvFormat(), QkvFormat::sbhd);
  EXPECT_FALSE(op.getSoftmaxScale().has_value());
  EXPECT_FALSE(op.getAttentionMask());
}

TEST_F(SpecImporter, DotProductAttentionGQABshd) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
input_format: bshd
layers:
  - type: DotProductAttention
    num_attention_heads: 8
    kv_channels: 16
    num_gqa_groups: 2
    attention_dropout: 0.25
    softmax_scale: 0.125
    qkv_format: bshd
)yaml");
  ASSERT_TRUE(function);
  EXPECT_EQ(argType(function, "query"), "tensor<2x32x8x16xbf16>");
  EXPECT_EQ(argType(function, "key"), "tensor<2x32x2x16xbf16>");
  EXPECT_EQ(argType(function, "value"), "tensor<2x32x2x16xbf16>");
  EXPECT_EQ(str(function.getResultTypes()[0]), "tensor<2x32x128xbf16>");
  DotProductAttentionOp op = opsOf<DotProductAttentionOp>(function).at(0);
  EXPECT_EQ(op.getQkvFormat(), QkvFormat::bshd);
  EXPECT_EQ(toDouble(op.getAttentionDropout()), 0.25);
  ASSERT_TRUE(op.getSoftmaxScale().has_value());
  EXPECT_EQ(toDouble(*op.getSoftmaxScale()), 0.125);
}

TEST_F(SpecImporter, DotProductAttentionPaddedQueries) {
  // TE's mask pair: the keys' mask and the queries' own, here with as many
  // keys as queries.
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    attn_mask_type: padding_causal
    padded_queries: true
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function), ElementsAre("query", "key", "value",
                                              "attention_mask", "query_mask"));
  EXPECT_EQ(argType(function, "query_mask"), "tensor<2x1x1x32xi1>");
  DotProductAttentionOp op = opsOf<DotProductAttentionOp>(function).at(0);
  EXPECT_EQ(op.getQueryMask(), function.getArgument(4));
  EXPECT_EQ(op.getAttentionMask(), function.getArgument(3));
}

struct MaskCase {
  const char *type;
  const char *argName; // null: no mask argument
  const char *argType;
};

class AttentionMask : public SpecTest,
                      public ::testing::WithParamInterface<MaskCase> {};

TEST_P(AttentionMask, DotProductAttentionTakesTheMaskItsTypeNeeds) {
  std::string spec = "seq_length: 32\nbatch_size: 2\nlayers:\n"
                     "  - type: DotProductAttention\n"
                     "    num_attention_heads: 4\n    kv_channels: 16\n"
                     "    attn_mask_type: " +
                     std::string(GetParam().type) + "\n";
  func::FuncOp function = importOk(spec);
  ASSERT_TRUE(function);
  DotProductAttentionOp op = opsOf<DotProductAttentionOp>(function).at(0);
  EXPECT_EQ(stringifyAttnMaskType(op.getAttnMaskType()), GetParam().type);
  if (!GetParam().argName) {
    EXPECT_THAT(argNames(function), ElementsAre("query", "key", "value"));
    EXPECT_FALSE(op.getAttentionMask());
  } else {
    EXPECT_THAT(argNames(function),
                ElementsAre("query", "key", "value", GetParam().argName));
    EXPECT_EQ(argType(function, GetParam().argName), GetParam().argType);
    EXPECT_EQ(op.getAttentionMask(), function.getArgument(3));
  }
  EXPECT_TRUE(succeeded(verify(function)));
}

TEST_P(AttentionMask, TransformerLayerTakesTheMaskItsTypeNeeds) {
  std::string spec = "seq_length: 32\nbatch_size: 2\nlayers:\n"
                     "  - type: TransformerLayer\n    hidden_size: 64\n"
                     "    ffn_hidden_size: 64\n    num_attention_heads: 4\n"
                     "    self_attn_mask_type: " +
                     std::string(GetParam().type) + "\n";
  func::FuncOp function = importOk(spec);
  ASSERT_TRUE(function);
  TransformerLayerOp op = opsOf<TransformerLayerOp>(function).at(0);
  EXPECT_EQ(stringifyAttnMaskType(op.getSelfAttnMaskType()), GetParam().type);
  EXPECT_EQ(argType(function,
                    GetParam().argName ? GetParam().argName : "attention_mask"),
            GetParam().argName ? GetParam().argType : "<none>");
  EXPECT_EQ(static_cast<bool>(op.getAttentionMask()),
            GetParam().argName != nullptr);
  EXPECT_TRUE(succeeded(verify(function)));
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, AttentionMask,
    ::testing::Values(
        MaskCase{"no_mask", nullptr, nullptr},
        MaskCase{"causal", nullptr, nullptr},
        MaskCase{"causal_bottom_right", nullptr, nullptr},
        MaskCase{"padding", "attention_mask", "tensor<2x1x1x32xi1>"},
        MaskCase{"padding_causal", "attention_mask", "tensor<2x1x1x32xi1>"},
        MaskCase{"padding_causal_bottom_right", "attention_mask",
                 "tensor<2x1x1x32xi1>"},
        MaskCase{"arbitrary", "arbitrary_attention_mask",
                 "tensor<2x1x32x32xi1>"}),
    [](const ::testing::TestParamInfo<MaskCase> &info) {
      return std::string(info.param.type);
    });

TEST_F(SpecImporter, MultiheadAttentionDefaults) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
layers:
  - type: MultiheadAttention
    name: attn
    hidden_size: 64
    num_attention_heads: 4
)yaml");
  ASSERT_TRUE(function);
  // input_layernorm defaults to False: a plain `qkv` Linear.
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "attn.qkv.weight", "attn.qkv.bias",
                          "attn.proj.weight", "attn.proj.bias"));
  EXPECT_EQ(argType(function, "attn.qkv.weight"), "tensor<192x64xbf16>");
  EXPECT_EQ(argType(function, "attn.qkv.bias"), "tensor<192xbf16>");
  EXPECT_EQ(argType(function, "attn.proj.weight"), "tensor<64x64xbf16>");
  EXPECT_EQ(argType(function, "attn.proj.bias"), "tensor<64xbf16>");
  MultiheadAttentionOp op = opsOf<MultiheadAttentionOp>(function).at(0);
  // te.pytorch.MultiheadAttention(hidden_size, num_attention_heads,
  //   kv_channels=None, attention_dropout=0.1, layernorm_epsilon=1e-5,
  //   attn_mask_type="causal", num_gqa_groups=None, input_layernorm=False,
  //   normalization="LayerNorm", bias=True, qkv_format="sbhd")
  EXPECT_EQ(op.getNumAttentionHeads(), 4u);
  EXPECT_FALSE(op.getNumGqaGroups().has_value());
  EXPECT_FALSE(op.getKvChannels().has_value());
  EXPECT_EQ(op.getAttnMaskType(), AttnMaskType::causal);
  EXPECT_EQ(toDouble(op.getAttentionDropout()), 0.1);
  EXPECT_EQ(toDouble(op.getLayernormEpsilon()), 1e-5);
  EXPECT_EQ(op.getNormalization(), Normalization::LayerNorm);
  EXPECT_EQ(op.getQkvFormat(), QkvFormat::sbhd);
  EXPECT_FALSE(op.getZeroCenteredGamma());
  EXPECT_FALSE(op.getLnWeight());
  EXPECT_FALSE(op.getLnBias());
  EXPECT_FALSE(op.getAttentionMask());
  EXPECT_FALSE(op.getRotaryPosEmb());
  EXPECT_FALSE(op.getFp8Recipe().has_value());
}

TEST_F(SpecImporter, MultiheadAttentionWithInputLayerNormGQAAndRotary) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
layers:
  - type: MultiheadAttention
    name: attn
    hidden_size: 64
    num_attention_heads: 4
    num_gqa_groups: 2
    kv_channels: 32
    input_layernorm: true
    normalization: RMSNorm
    layernorm_epsilon: 1.0e-6
    zero_centered_gamma: true
    bias: false
    rotary_pos_emb: true
    attention_dropout: 0.0
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "attn.layernorm_qkv.layer_norm_weight",
                          "attn.layernorm_qkv.weight", "attn.proj.weight",
                          "rotary_pos_emb"));
  // (heads + 2 * groups) * kv_channels = (4 + 4) * 32 rows of q, k, v.
  EXPECT_EQ(argType(function, "attn.layernorm_qkv.weight"),
            "tensor<256x64xbf16>");
  EXPECT_EQ(argType(function, "attn.proj.weight"), "tensor<64x128xbf16>");
  EXPECT_EQ(argType(function, "rotary_pos_emb"), "tensor<32x1x1x32xf32>");
  EXPECT_THAT(paramNames(function),
              ElementsAre("attn.layernorm_qkv.layer_norm_weight",
                          "attn.layernorm_qkv.weight", "attn.proj.weight"));
  MultiheadAttentionOp op = opsOf<MultiheadAttentionOp>(function).at(0);
  EXPECT_EQ(op.getNumGqaGroups(), std::optional<uint64_t>(2));
  EXPECT_EQ(op.getKvChannels(), std::optional<uint64_t>(32));
  EXPECT_EQ(op.getNormalization(), Normalization::RMSNorm);
  EXPECT_EQ(toDouble(op.getLayernormEpsilon()), 1e-6);
  EXPECT_TRUE(op.getZeroCenteredGamma());
  EXPECT_EQ(toDouble(op.getAttentionDropout()), 0.0);
  EXPECT_EQ(op.getRotaryPosEmb(), argNamed(function, "rotary_pos_emb"));
  EXPECT_FALSE(op.getQkvBias());
  EXPECT_FALSE(op.getProjBias());
  EXPECT_TRUE(succeeded(verify(function)));
}

TEST_F(SpecImporter, TransformerLayerDefaultsMatchTransformerEngine) {
  func::FuncOp function = importOk(R"yaml(
name: quickstart_small
seq_length: 32
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 256
    num_attention_heads: 4
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(
      argNames(function),
      ElementsAre("input",
                  "layers.0.self_attention.layernorm_qkv.layer_norm_weight",
                  "layers.0.self_attention.layernorm_qkv.layer_norm_bias",
                  "layers.0.self_attention.layernorm_qkv.weight",
                  "layers.0.self_attention.layernorm_qkv.bias",
                  "layers.0.self_attention.proj.weight",
                  "layers.0.self_attention.proj.bias",
                  "layers.0.layernorm_mlp.layer_norm_weight",
                  "layers.0.layernorm_mlp.layer_norm_bias",
                  "layers.0.layernorm_mlp.fc1_weight",
                  "layers.0.layernorm_mlp.fc1_bias",
                  "layers.0.layernorm_mlp.fc2_weight",
                  "layers.0.layernorm_mlp.fc2_bias"));
  EXPECT_EQ(paramNames(function).size(), 12u);
  EXPECT_EQ(argType(function, "input"), "tensor<32x2x64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.self_attention.layernorm_qkv.weight"),
            "tensor<192x64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.self_attention.proj.weight"),
            "tensor<64x64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.layernorm_mlp.fc1_weight"),
            "tensor<256x64xbf16>");
  EXPECT_EQ(argType(function, "layers.0.layernorm_mlp.fc2_weight"),
            "tensor<64x256xbf16>");
  EXPECT_EQ(argType(function, "layers.0.layernorm_mlp.fc2_bias"),
            "tensor<64xbf16>");
  TransformerLayerOp op = opsOf<TransformerLayerOp>(function).at(0);
  // te.pytorch.TransformerLayer(hidden_size, ffn_hidden_size,
  //   num_attention_heads, num_gqa_groups=None, layernorm_epsilon=1e-5,
  //   hidden_dropout=0.1, attention_dropout=0.1, kv_channels=None,
  //   self_attn_mask_type="causal", apply_residual_connection_post_layernorm
  //   =False, layer_type="encoder", zero_centered_gamma=False, bias=True,
  //   activation="gelu", normalization="LayerNorm", attn_input_format="sbhd")
  EXPECT_EQ(op.getNumAttentionHeads(), 4u);
  EXPECT_FALSE(op.getNumGqaGroups().has_value());
  EXPECT_FALSE(op.getKvChannels().has_value());
  EXPECT_EQ(toDouble(op.getLayernormEpsilon()), 1e-5);
  EXPECT_EQ(toDouble(op.getHiddenDropout()), 0.1);
  EXPECT_EQ(toDouble(op.getAttentionDropout()), 0.1);
  EXPECT_EQ(op.getSelfAttnMaskType(), AttnMaskType::causal);
  EXPECT_FALSE(op.getApplyResidualConnectionPostLayernorm());
  EXPECT_FALSE(op.getZeroCenteredGamma());
  EXPECT_EQ(op.getActivation(), Activation::gelu);
  EXPECT_EQ(op.getNormalization(), Normalization::LayerNorm);
  EXPECT_EQ(op.getAttnInputFormat(), QkvFormat::sbhd);
  EXPECT_FALSE(op.getFp8Recipe().has_value());
  EXPECT_FALSE(op.getAttentionMask());
  EXPECT_FALSE(op.getRotaryPosEmb());
  EXPECT_TRUE(succeeded(verify(function)));
}

TEST_F(SpecImporter, TransformerLayerLlamaStyle) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 64
batch_size: 2
layers:
  - type: TransformerLayer
    name: block
    hidden_size: 128
    ffn_hidden_size: 352
    num_attention_heads: 4
    num_gqa_groups: 2
    normalization: RMSNorm
    activation: swiglu
    bias: false
    hidden_dropout: 0.0
    attention_dropout: 0.0
    layernorm_epsilon: 1.0e-6
    apply_residual_connection_post_layernorm: true
    zero_centered_gamma: true
    rotary_pos_emb: true
    layer_type: encoder
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(
      argNames(function),
      ElementsAre("input",
                  "block.self_attention.layernorm_qkv.layer_norm_weight",
                  "block.self_attention.layernorm_qkv.weight",
                  "block.self_attention.proj.weight",
                  "block.layernorm_mlp.layer_norm_weight",
                  "block.layernorm_mlp.fc1_weight",
                  "block.layernorm_mlp.fc2_weight", "rotary_pos_emb"));
  // (4 + 2 * 2) heads of 32.
  EXPECT_EQ(argType(function, "block.self_attention.layernorm_qkv.weight"),
            "tensor<256x128xbf16>");
  // swiglu is gated: FC1 makes 2 * 352 features.
  EXPECT_EQ(argType(function, "block.layernorm_mlp.fc1_weight"),
            "tensor<704x128xbf16>");
  EXPECT_EQ(argType(function, "block.layernorm_mlp.fc2_weight"),
            "tensor<128x352xbf16>");
  EXPECT_EQ(argType(function, "rotary_pos_emb"), "tensor<64x1x1x32xf32>");
  TransformerLayerOp op = opsOf<TransformerLayerOp>(function).at(0);
  EXPECT_EQ(op.getNumGqaGroups(), std::optional<uint64_t>(2));
  EXPECT_EQ(op.getNormalization(), Normalization::RMSNorm);
  EXPECT_EQ(op.getActivation(), Activation::swiglu);
  EXPECT_EQ(toDouble(op.getHiddenDropout()), 0.0);
  EXPECT_EQ(toDouble(op.getAttentionDropout()), 0.0);
  EXPECT_EQ(toDouble(op.getLayernormEpsilon()), 1e-6);
  EXPECT_TRUE(op.getApplyResidualConnectionPostLayernorm());
  EXPECT_TRUE(op.getZeroCenteredGamma());
  EXPECT_FALSE(op.getAttnLnBias());
  EXPECT_FALSE(op.getFc1Bias());
  EXPECT_TRUE(succeeded(verify(function)));
}

//===----------------------------------------------------------------------===//
// Recipes
//===----------------------------------------------------------------------===//

/// The recipe of the single te.linear of `spec`'s function, printed.
std::string linearRecipe(SpecTest &test, func::FuncOp function) {
  std::vector<LinearOp> ops = opsOf<LinearOp>(function);
  if (ops.size() != 1)
    return "<" + std::to_string(ops.size()) + " linear ops>";
  std::optional<FP8RecipeAttrInterface> recipe = ops[0].getFp8Recipe();
  return recipe ? str(*recipe) : "<none>";
}

std::string linearSpecWithRecipe(llvm::StringRef recipe) {
  return "seq_length: 16\nbatch_size: 2\nrecipe:\n" + recipe.str() +
         "layers:\n  - {type: Linear, in_features: 64, out_features: 32}\n";
}

TEST_F(SpecImporter, DelayedScalingDefaultsMatchTransformerEngine) {
  func::FuncOp function =
      importOk(linearSpecWithRecipe("  type: DelayedScaling\n"));
  ASSERT_TRUE(function);
  auto recipe = dyn_cast<DelayedScalingAttr>(
      *opsOf<LinearOp>(function).at(0).getFp8Recipe());
  ASSERT_TRUE(recipe);
  // transformer_engine.common.recipe.DelayedScaling(margin=0,
  //   fp8_format=Format.HYBRID, amax_history_len=1024,
  //   amax_compute_algo="max", reduce_amax=True)
  EXPECT_EQ(recipe.getMargin(), 0);
  EXPECT_EQ(recipe.getFp8Format(), Fp8Format::HYBRID);
  EXPECT_EQ(recipe.getAmaxHistoryLen(), 1024);
  EXPECT_EQ(recipe.getAmaxComputeAlgo(), AmaxComputeAlgo::max);
  EXPECT_TRUE(recipe.getReduceAmax());
  EXPECT_EQ(str(Attribute(recipe)), "#te.delayed_scaling<>");
}

TEST_F(SpecImporter, DelayedScalingAllFields) {
  func::FuncOp function = importOk(linearSpecWithRecipe(
      "  type: DelayedScaling\n  fp8_format: E4M3\n  margin: 2\n"
      "  amax_history_len: 16\n  amax_compute_algo: most_recent\n"
      "  reduce_amax: false\n"));
  ASSERT_TRUE(function);
  auto recipe = dyn_cast<DelayedScalingAttr>(
      *opsOf<LinearOp>(function).at(0).getFp8Recipe());
  ASSERT_TRUE(recipe);
  EXPECT_EQ(recipe.getMargin(), 2);
  EXPECT_EQ(recipe.getFp8Format(), Fp8Format::E4M3);
  EXPECT_EQ(recipe.getAmaxHistoryLen(), 16);
  EXPECT_EQ(recipe.getAmaxComputeAlgo(), AmaxComputeAlgo::most_recent);
  EXPECT_FALSE(recipe.getReduceAmax());
}

TEST_F(SpecImporter, DelayedScalingFp8Dpa) {
  // TE's DelayedScaling(fp8_dpa=False) by default; true prints.
  func::FuncOp function =
      importOk(linearSpecWithRecipe("  type: DelayedScaling\n"));
  ASSERT_TRUE(function);
  auto recipe = dyn_cast<DelayedScalingAttr>(
      *opsOf<LinearOp>(function).at(0).getFp8Recipe());
  ASSERT_TRUE(recipe);
  EXPECT_FALSE(recipe.getFp8Dpa());
  function = importOk(
      linearSpecWithRecipe("  type: DelayedScaling\n  fp8_dpa: true\n"));
  ASSERT_TRUE(function);
  EXPECT_EQ(linearRecipe(*this, function),
            "#te.delayed_scaling<fp8_dpa = true>");
  // Transformer Engine's other recipes carry fp8_dpa = False too.
  function = importOk(
      linearSpecWithRecipe("  type: Float8CurrentScaling\n  fp8_dpa: false\n"));
  ASSERT_TRUE(function);
  EXPECT_EQ(linearRecipe(*this, function), "#te.current_scaling<>");
}

TEST_F(SpecImporter, DotProductAttentionFp8Dpa) {
  // DotProductAttention runs no GEMM, but fp8_dpa (from the spec's recipe
  // or its own) runs its attention in FP8; a recipe without it is ignored
  // at the top level.
  const char *spec = R"yaml(
seq_length: 32
batch_size: 2
recipe: {type: DelayedScaling, fp8_dpa: %s}
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
)yaml";
  for (bool fp8Dpa : {true, false}) {
    std::string text = spec;
    text.replace(text.find("%s"), 2, fp8Dpa ? "true" : "false");
    func::FuncOp function = importOk(text);
    ASSERT_TRUE(function);
    DotProductAttentionOp op = opsOf<DotProductAttentionOp>(function).at(0);
    std::optional<FP8RecipeAttrInterface> recipe = op.getFp8Recipe();
    EXPECT_EQ(recipe.has_value(), fp8Dpa);
    if (recipe)
      EXPECT_EQ(str(*recipe), "#te.delayed_scaling<fp8_dpa = true>");
    EXPECT_TRUE(succeeded(verify(function)));
  }
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    recipe: {type: DelayedScaling, fp8_dpa: true, amax_history_len: 8}
)yaml");
  ASSERT_TRUE(function);
  std::optional<FP8RecipeAttrInterface> recipe =
      opsOf<DotProductAttentionOp>(function).at(0).getFp8Recipe();
  ASSERT_TRUE(recipe.has_value());
  EXPECT_EQ(str(*recipe),
            "#te.delayed_scaling<amax_history_len = 8, fp8_dpa = true>");
}

TEST_F(SpecImporter, CurrentScalingDefaultsMatchTransformerEngine) {
  func::FuncOp function =
      importOk(linearSpecWithRecipe("  type: Float8CurrentScaling\n"));
  ASSERT_TRUE(function);
  auto recipe = dyn_cast<CurrentScalingAttr>(
      *opsOf<LinearOp>(function).at(0).getFp8Recipe());
  ASSERT_TRUE(recipe);
  // Float8CurrentScaling(fp8_format=Format.HYBRID); scales are not rounded
  // to powers of two by default.
  EXPECT_EQ(recipe.getFp8Format(), Fp8Format::HYBRID);
  EXPECT_FALSE(recipe.getPower_2Scale());
  EXPECT_EQ(str(Attribute(recipe)), "#te.current_scaling<>");
}

TEST_F(SpecImporter, BlockScalingDefaultsMatchTransformerEngine) {
  func::FuncOp function =
      importOk(linearSpecWithRecipe("  type: Float8BlockScaling\n"));
  ASSERT_TRUE(function);
  auto recipe = dyn_cast<BlockScalingAttr>(
      *opsOf<LinearOp>(function).at(0).getFp8Recipe());
  ASSERT_TRUE(recipe);
  // Float8BlockScaling(fp8_format=Format.E4M3): 1-D blocks for inputs and
  // gradients, 2-D for weights, power-of-two scales.
  EXPECT_EQ(recipe.getFp8Format(), Fp8Format::E4M3);
  EXPECT_EQ(recipe.getXBlockScalingDim(), 1);
  EXPECT_EQ(recipe.getWBlockScalingDim(), 2);
  EXPECT_EQ(recipe.getGradBlockScalingDim(), 1);
  EXPECT_TRUE(recipe.getPower_2Scale());
  EXPECT_EQ(str(Attribute(recipe)), "#te.block_scaling<>");
}

struct RecipeCase {
  const char *name;
  const char *recipe; // the recipe's YAML lines
  const char *printed;
};

class RecipeSpelling : public SpecTest,
                       public ::testing::WithParamInterface<RecipeCase> {};

TEST_P(RecipeSpelling, PrintsAsExpected) {
  func::FuncOp function = importOk(linearSpecWithRecipe(GetParam().recipe));
  ASSERT_TRUE(function);
  EXPECT_EQ(linearRecipe(*this, function), GetParam().printed);
}

INSTANTIATE_TEST_SUITE_P(
    All, RecipeSpelling,
    ::testing::Values(
        RecipeCase{"SnakeCaseDelayed", "  type: delayed_scaling\n",
                   "#te.delayed_scaling<>"},
        RecipeCase{"SnakeCaseCurrent", "  type: current_scaling\n",
                   "#te.current_scaling<>"},
        RecipeCase{"LowerCaseFormat",
                   "  type: DelayedScaling\n  fp8_format: e4m3\n",
                   "#te.delayed_scaling<fp8_format = e4m3>"},
        RecipeCase{"CurrentE4M3Power2",
                   "  type: Float8CurrentScaling\n  fp8_format: E4M3\n"
                   "  power_2_scale: true\n",
                   "#te.current_scaling<fp8_format = e4m3, power_2_scale = "
                   "true>"},
        RecipeCase{"DelayedHistory",
                   "  type: DelayedScaling\n  fp8_format: HYBRID\n"
                   "  amax_history_len: 16\n  amax_compute_algo: max\n",
                   "#te.delayed_scaling<amax_history_len = 16>"},
        RecipeCase{"SnakeCaseBlock", "  type: block_scaling\n",
                   "#te.block_scaling<>"},
        RecipeCase{"BlockHybridX2",
                   "  type: Float8BlockScaling\n"
                   "  fp8_format: HYBRID\n  x_block_scaling_dim: 2\n"
                   "  w_block_scaling_dim: 1\n  power_2_scale: false\n",
                   "#te.block_scaling<fp8_format = hybrid, x_block_scaling_dim "
                   "= 2, w_block_scaling_dim = 1, power_2_scale = false>"},
        RecipeCase{"NoneWord", "  none\n", "<none>"},
        RecipeCase{"Null", "  null\n", "<none>"}),
    [](const ::testing::TestParamInfo<RecipeCase> &info) {
      return std::string(info.param.name);
    });

TEST_F(SpecImporter, NoRecipeMeansNoFp8) {
  func::FuncOp function = importOk(kLinearSpec);
  ASSERT_TRUE(function);
  EXPECT_EQ(linearRecipe(*this, function), "<none>");
}

TEST_F(SpecImporter, LayerRecipesOverrideTheSpecRecipe) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  amax_history_len: 16
layers:
  - type: LayerNorm
    hidden_size: 64
    recipe: none
  - type: Linear
    in_features: 64
    out_features: 64
  - type: Linear
    in_features: 64
    out_features: 64
    recipe: none
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 128
    recipe:
      type: Float8CurrentScaling
      power_2_scale: true
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
)yaml");
  ASSERT_TRUE(function);
  std::vector<LinearOp> linears = opsOf<LinearOp>(function);
  ASSERT_EQ(linears.size(), 2u);
  ASSERT_TRUE(linears[0].getFp8Recipe().has_value());
  EXPECT_EQ(str(*linears[0].getFp8Recipe()),
            "#te.delayed_scaling<amax_history_len = 16>");
  EXPECT_FALSE(linears[1].getFp8Recipe().has_value());
  LayerNormMLPOp mlp = opsOf<LayerNormMLPOp>(function).at(0);
  ASSERT_TRUE(mlp.getFp8Recipe().has_value());
  EXPECT_EQ(str(*mlp.getFp8Recipe()),
            "#te.current_scaling<power_2_scale = true>");
  TransformerLayerOp layer = opsOf<TransformerLayerOp>(function).at(0);
  ASSERT_TRUE(layer.getFp8Recipe().has_value());
  EXPECT_EQ(str(*layer.getFp8Recipe()),
            "#te.delayed_scaling<amax_history_len = 16>");
  EXPECT_TRUE(succeeded(verify(function)));
}

TEST_F(SpecImporter, SpecRecipeNoneAndLayerRecipe) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
recipe: none
layers:
  - type: Linear
    in_features: 64
    out_features: 64
    recipe: {type: DelayedScaling, margin: 1}
  - type: Linear
    in_features: 64
    out_features: 64
)yaml");
  ASSERT_TRUE(function);
  std::vector<LinearOp> linears = opsOf<LinearOp>(function);
  ASSERT_EQ(linears.size(), 2u);
  ASSERT_TRUE(linears[0].getFp8Recipe().has_value());
  EXPECT_EQ(str(*linears[0].getFp8Recipe()), "#te.delayed_scaling<margin = 1>");
  EXPECT_FALSE(linears[1].getFp8Recipe().has_value());
}

TEST_F(SpecImporter, RecipeReachesEveryGemmLayer) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
recipe: {type: Float8CurrentScaling}
layers:
  - {type: LayerNormLinear, in_features: 64, out_features: 64}
  - {type: LayerNormMLP, hidden_size: 64, ffn_hidden_size: 64}
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4}
  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 64,
     num_attention_heads: 4}
  - {type: RMSNorm, hidden_size: 64}
)yaml");
  ASSERT_TRUE(function);
  int withRecipe = 0;
  function.walk([&](Operation *op) {
    if (auto recipe = op->getAttrOfType<FP8RecipeAttrInterface>("fp8_recipe")) {
      EXPECT_EQ(str(Attribute(recipe)), "#te.current_scaling<>");
      ++withRecipe;
    }
  });
  EXPECT_EQ(withRecipe, 4);
}

//===----------------------------------------------------------------------===//
// Chained layers and shared inputs
//===----------------------------------------------------------------------===//

TEST_F(SpecImporter, ChainedLayersFeedEachOther) {
  func::FuncOp function = importOk(R"yaml(
name: chain
params_dtype: fp32
seq_length: 8
batch_size: 2
layers:
  - {type: LayerNorm, name: ln, hidden_size: 32}
  - {type: Linear, name: up, in_features: 32, out_features: 64}
  - {type: RMSNorm, hidden_size: 64}
  - {type: Linear, in_features: 64, out_features: 16, bias: false}
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function),
              ElementsAre("input", "ln.weight", "ln.bias", "up.weight",
                          "up.bias", "layers.2.weight", "layers.3.weight"));
  EXPECT_THAT(opNames(function), ElementsAre("te.layernorm", "te.linear",
                                             "te.rmsnorm", "te.linear"));
  std::vector<Operation *> ops;
  for (Operation &op : function.front().without_terminator())
    ops.push_back(&op);
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0]->getOperand(0), function.getArgument(0));
  for (unsigned i = 1; i < ops.size(); ++i)
    EXPECT_EQ(ops[i]->getOperand(0), ops[i - 1]->getResult(0)) << i;
  EXPECT_EQ(str(ops[1]->getResult(0).getType()), "tensor<8x2x64xf32>");
  EXPECT_EQ(str(function.getFunctionType()),
            "(tensor<8x2x32xf32>, tensor<32xf32>, tensor<32xf32>, "
            "tensor<64x32xf32>, tensor<64xf32>, tensor<64xf32>, "
            "tensor<16x64xf32>) -> tensor<8x2x16xf32>");
  // Each op is located at its layer.
  EXPECT_EQ(locString(ops[0]->getLoc()), "6:5");
  EXPECT_EQ(locString(ops[3]->getLoc()), "9:5");
}

TEST_F(SpecImporter, DotProductAttentionFeedsLaterLayers) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 32
batch_size: 2
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 16}
  - {type: Linear, name: proj, in_features: 64, out_features: 64}
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(argNames(function),
              ElementsAre("query", "key", "value", "proj.weight", "proj.bias"));
  EXPECT_EQ(str(function.getResultTypes()[0]), "tensor<32x2x64xbf16>");
}

TEST_F(SpecImporter, MaskAndRotaryTableAreShared) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    self_attn_mask_type: padding_causal
    rotary_pos_emb: true
    bias: false
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    attn_mask_type: padding
    rotary_pos_emb: true
    bias: false
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 2
    kv_channels: 16
    self_attn_mask_type: arbitrary
    rotary_pos_emb: true
    bias: false
)yaml");
  ASSERT_TRUE(function);
  std::vector<std::string> names = argNames(function);
  EXPECT_EQ(std::count(names.begin(), names.end(), "attention_mask"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "rotary_pos_emb"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "arbitrary_attention_mask"),
            1);
  EXPECT_EQ(argType(function, "attention_mask"), "tensor<2x1x1x16xi1>");
  EXPECT_EQ(argType(function, "arbitrary_attention_mask"),
            "tensor<2x1x16x16xi1>");
  EXPECT_EQ(argType(function, "rotary_pos_emb"), "tensor<16x1x1x16xf32>");
  // The inputs are not parameters.
  for (const std::string &name : paramNames(function))
    EXPECT_NE(name.find('.'), std::string::npos) << name;

  std::vector<TransformerLayerOp> layers = opsOf<TransformerLayerOp>(function);
  MultiheadAttentionOp attention = opsOf<MultiheadAttentionOp>(function).at(0);
  ASSERT_EQ(layers.size(), 2u);
  BlockArgument mask = argNamed(function, "attention_mask");
  BlockArgument rotary = argNamed(function, "rotary_pos_emb");
  EXPECT_EQ(layers[0].getAttentionMask(), mask);
  EXPECT_EQ(attention.getAttentionMask(), mask);
  EXPECT_EQ(layers[1].getAttentionMask(),
            argNamed(function, "arbitrary_attention_mask"));
  EXPECT_EQ(layers[0].getRotaryPosEmb(), rotary);
  EXPECT_EQ(attention.getRotaryPosEmb(), rotary);
  EXPECT_EQ(layers[1].getRotaryPosEmb(), rotary);
  EXPECT_TRUE(succeeded(verify(function)));
}

// Attention bias (docs/attention-bias.md): DotProductAttention with
// keys of their own length, a decoder TransformerLayer (its self-attention
// takes the bias) and a MultiheadAttention share one bias input.
TEST_F(SpecImporter, AttentionBiasIsOneSharedInput) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    attn_mask_type: no_mask
    core_attention_bias_type: post_scale_bias
    bias_requires_grad: true
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    layer_type: decoder
    core_attention_bias_type: post_scale_bias
    bias_shape: 1hss
    bias_requires_grad: true
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    core_attention_bias_type: post_scale_bias
    bias_requires_grad: true
)yaml");
  ASSERT_TRUE(function);
  std::vector<std::string> names = argNames(function);
  EXPECT_EQ(std::count(names.begin(), names.end(), "core_attention_bias"), 1);
  EXPECT_EQ(argType(function, "core_attention_bias"), "tensor<1x4x16x16xbf16>");
  BlockArgument bias = argNamed(function, "core_attention_bias");
  DotProductAttentionOp dpa = opsOf<DotProductAttentionOp>(function).at(0);
  TransformerLayerOp layer = opsOf<TransformerLayerOp>(function).at(0);
  MultiheadAttentionOp mha = opsOf<MultiheadAttentionOp>(function).at(0);
  EXPECT_EQ(dpa.getCoreAttentionBias(), bias);
  EXPECT_EQ(layer.getCoreAttentionBias(), bias);
  EXPECT_EQ(mha.getCoreAttentionBias(), bias);
  EXPECT_EQ(dpa.getCoreAttentionBiasType(), AttnBiasType::post_scale_bias);
  EXPECT_EQ(layer.getCoreAttentionBiasType(), AttnBiasType::post_scale_bias);
  EXPECT_TRUE(dpa.getBiasRequiresGrad());
  EXPECT_TRUE(layer.getBiasRequiresGrad());
  EXPECT_TRUE(mha.getBiasRequiresGrad());
  EXPECT_FALSE(layer.getAlibiSlopes());
  // The bias is an input, not a parameter.
  for (const std::string &name : paramNames(function))
    EXPECT_NE(name, "core_attention_bias");
}

struct BiasShapeCase {
  const char *shape;
  const char *type;
};

class BiasShape : public SpecTest,
                  public ::testing::WithParamInterface<BiasShapeCase> {};

// Cross-attention: s_kv is kv_seq_length (24); bshd.
TEST_P(BiasShape, CrossAttentionBiasOfEachShape) {
  std::string spec = R"yaml(
seq_length: 16
batch_size: 2
input_format: bshd
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    attention_type: cross
    kv_seq_length: 24
    core_attention_bias_type: post_scale_bias
    bias_shape: )yaml" +
                     std::string(GetParam().shape) + "\n";
  func::FuncOp function = importOk(spec);
  ASSERT_TRUE(function);
  EXPECT_EQ(argType(function, "core_attention_bias"), GetParam().type);
  MultiheadAttentionOp op = opsOf<MultiheadAttentionOp>(function).at(0);
  EXPECT_EQ(op.getCoreAttentionBias(),
            argNamed(function, "core_attention_bias"));
  EXPECT_FALSE(op.getBiasRequiresGrad());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BiasShape,
    ::testing::Values(BiasShapeCase{"1hss", "tensor<1x4x16x24xbf16>"},
                      BiasShapeCase{"b1ss", "tensor<2x1x16x24xbf16>"},
                      BiasShapeCase{"bhss", "tensor<2x4x16x24xbf16>"},
                      BiasShapeCase{"11ss", "tensor<1x1x16x24xbf16>"}),
    [](const auto &info) { return std::string(info.param.shape); });

// ALiBi: vanilla slopes take no input; `heads` and `batch_heads` add the
// f32 input alibi_slopes, [heads] or [batch, heads] (one rank's heads).
TEST_F(SpecImporter, AlibiSlopes) {
  func::FuncOp vanilla = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 64,
     num_attention_heads: 4, core_attention_bias_type: alibi}
)yaml");
  ASSERT_TRUE(vanilla);
  TransformerLayerOp layer = opsOf<TransformerLayerOp>(vanilla).at(0);
  EXPECT_EQ(layer.getCoreAttentionBiasType(), AttnBiasType::alibi);
  EXPECT_FALSE(layer.getAlibiSlopes());
  EXPECT_FALSE(layer.getCoreAttentionBias());
  std::vector<std::string> names = argNames(vanilla);
  EXPECT_EQ(std::count(names.begin(), names.end(), "alibi_slopes"), 0);

  func::FuncOp slopes = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     core_attention_bias_type: alibi, alibi_slopes: batch_heads}
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     core_attention_bias_type: alibi}
  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 64,
     num_attention_heads: 4, core_attention_bias_type: alibi,
     alibi_slopes: batch_heads}
)yaml");
  ASSERT_TRUE(slopes);
  EXPECT_EQ(argType(slopes, "alibi_slopes"), "tensor<2x4xf32>");
  std::vector<MultiheadAttentionOp> mhas = opsOf<MultiheadAttentionOp>(slopes);
  BlockArgument input = argNamed(slopes, "alibi_slopes");
  EXPECT_EQ(mhas.at(0).getAlibiSlopes(), input);
  EXPECT_FALSE(mhas.at(1).getAlibiSlopes());
  EXPECT_EQ(opsOf<TransformerLayerOp>(slopes).at(0).getAlibiSlopes(), input);

  func::FuncOp heads = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 16,
     core_attention_bias_type: alibi, alibi_slopes: heads}
)yaml");
  ASSERT_TRUE(heads);
  EXPECT_EQ(argType(heads, "alibi_slopes"), "tensor<4xf32>");
}

TEST_F(SpecImporter, TwoTransformerLayersGetTheirOwnParameters) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
layers:
  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 64,
     num_attention_heads: 2, bias: false, normalization: RMSNorm}
  - {type: TransformerLayer, hidden_size: 32, ffn_hidden_size: 64,
     num_attention_heads: 2, bias: false, normalization: RMSNorm}
)yaml");
  ASSERT_TRUE(function);
  EXPECT_THAT(
      paramNames(function),
      ElementsAre("layers.0.self_attention.layernorm_qkv.layer_norm_weight",
                  "layers.0.self_attention.layernorm_qkv.weight",
                  "layers.0.self_attention.proj.weight",
                  "layers.0.layernorm_mlp.layer_norm_weight",
                  "layers.0.layernorm_mlp.fc1_weight",
                  "layers.0.layernorm_mlp.fc2_weight",
                  "layers.1.self_attention.layernorm_qkv.layer_norm_weight",
                  "layers.1.self_attention.layernorm_qkv.weight",
                  "layers.1.self_attention.proj.weight",
                  "layers.1.layernorm_mlp.layer_norm_weight",
                  "layers.1.layernorm_mlp.fc1_weight",
                  "layers.1.layernorm_mlp.fc2_weight"));
  std::vector<TransformerLayerOp> layers = opsOf<TransformerLayerOp>(function);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[1].getInput(), layers[0].getOutput());
}

//===----------------------------------------------------------------------===//
// YAML and JSON
//===----------------------------------------------------------------------===//

TEST_F(SpecImporter, JsonAndYamlImportTheSame) {
  constexpr llvm::StringLiteral yaml = R"yaml(
name: same
params_dtype: fp16
seq_length: 64
batch_size: 2
input_format: bshd
recipe:
  type: DelayedScaling
  fp8_format: E4M3
  amax_history_len: 32
layers:
  - type: TransformerLayer
    hidden_size: 128
    ffn_hidden_size: 256
    num_attention_heads: 4
    num_gqa_groups: 2
    normalization: RMSNorm
    activation: swiglu
    bias: false
    rotary_pos_emb: true
    hidden_dropout: 0.0
  - type: Linear
    name: head
    in_features: 128
    out_features: 64
    recipe: none
)yaml";
  constexpr llvm::StringLiteral json = R"json({
  "name": "same",
  "params_dtype": "fp16",
  "seq_length": 64,
  "batch_size": 2,
  "input_format": "bshd",
  "recipe": {"type": "DelayedScaling", "fp8_format": "E4M3",
             "amax_history_len": 32},
  "layers": [
    {"type": "TransformerLayer", "hidden_size": 128, "ffn_hidden_size": 256,
     "num_attention_heads": 4, "num_gqa_groups": 2,
     "normalization": "RMSNorm", "activation": "swiglu", "bias": false,
     "rotary_pos_emb": true, "hidden_dropout": 0.0},
    {"type": "Linear", "name": "head", "in_features": 128,
     "out_features": 64, "recipe": null}
  ]
})json";
  func::FuncOp fromYaml = importOk(yaml, "same.yaml");
  func::FuncOp fromJson = importOk(json, "same.json");
  ASSERT_TRUE(fromYaml && fromJson);
  EXPECT_EQ(str(fromYaml), str(fromJson));
  EXPECT_THAT(
      argNames(fromJson),
      ElementsAre("input",
                  "layers.0.self_attention.layernorm_qkv.layer_norm_weight",
                  "layers.0.self_attention.layernorm_qkv.weight",
                  "layers.0.self_attention.proj.weight",
                  "layers.0.layernorm_mlp.layer_norm_weight",
                  "layers.0.layernorm_mlp.fc1_weight",
                  "layers.0.layernorm_mlp.fc2_weight", "rotary_pos_emb",
                  "head.weight", "head.bias"));
  EXPECT_EQ(argType(fromJson, "input"), "tensor<2x64x128xf16>");
  // JSON locations are line:col in the .json file too.
  Operation *layer = &fromJson.front().front();
  auto loc = dyn_cast<FileLineColLoc>(layer->getLoc());
  ASSERT_TRUE(loc);
  EXPECT_EQ(loc.getFilename().str(), "same.json");
  EXPECT_EQ(locString(loc), "10:5");
}

TEST_F(SpecImporter, JsonSpecDoesNotNeedAJsonNameToImport) {
  // YAML is a superset of JSON's flow syntax; a .yaml buffer may hold JSON.
  func::FuncOp function = importOk(
      R"({"seq_length": 4, "batch_size": 1, "layers": [{"type": "RMSNorm", "hidden_size": 8}]})",
      "flow.yaml");
  ASSERT_TRUE(function);
  EXPECT_EQ(function.getSymName(), "flow");
  EXPECT_THAT(argNames(function), ElementsAre("input", "layers.0.weight"));
}

//===----------------------------------------------------------------------===//
// Printing and the examples
//===----------------------------------------------------------------------===//

TEST_F(SpecImporter, PrintedIRParsesBack) {
  func::FuncOp function = importOk(R"yaml(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling, margin: 1, reduce_amax: false}
layers:
  - {type: LayerNorm, hidden_size: 64, zero_centered_gamma: true}
  - {type: LayerNormLinear, in_features: 64, out_features: 64,
     normalization: RMSNorm, return_layernorm_output: true}
  - {type: LayerNormMLP, hidden_size: 64, ffn_hidden_size: 64,
     activation: sreglu, recipe: {type: Float8CurrentScaling}}
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     input_layernorm: true, attn_mask_type: padding_causal_bottom_right}
  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 64,
     num_attention_heads: 4, self_attn_mask_type: arbitrary,
     rotary_pos_emb: true, activation: qgelu}
)yaml");
  ASSERT_TRUE(function);
  ModuleOp module = cast<ModuleOp>(function->getParentOp());
  std::string printed = str(module.getOperation());
  OwningOpRef<ModuleOp> reparsed =
      parseSourceString<ModuleOp>(printed, ParserConfig(&context));
  ASSERT_TRUE(reparsed) << printed;
  EXPECT_TRUE(succeeded(verify(*reparsed)));
  EXPECT_EQ(str(reparsed->getOperation()), printed);
}

#ifdef TEJIT_EXAMPLES_DIR
struct ExampleCase {
  const char *file;
  std::vector<std::string> ops;
  size_t numArgs;
};

TEST_F(SpecImporter, ExamplesImportAndVerify) {
  std::vector<ExampleCase> examples = {
      {"all_layers_small.yaml",
       {"te.layernorm", "te.linear", "te.rmsnorm", "te.layernorm_linear",
        "te.layernorm_mlp", "te.multihead_attention", "te.linear"},
       22},
      {"attention_small.yaml", {"te.dot_product_attention"}, 4},
      {"decoder_small.yaml",
       {"te.transformer_layer", "te.transformer_layer"},
       23},
      {"gptj_small.yaml", {"te.transformer_layer", "te.transformer_layer"}, 26},
      // input, m_splits, weight, bias.
      {"grouped_linear_small.yaml", {"te.grouped_linear"}, 4},
      {"llama.yaml", {"te.transformer_layer"}, 8},
      // input, 10 + 6 parameters, rotary_pos_emb, cu_seqlens.
      {"packed_small.yaml",
       {"te.transformer_layer", "te.multihead_attention"},
       19},
      {"llama_small.json",
       {"te.transformer_layer", "te.transformer_layer"},
       14},
      {"quickstart.yaml", {"te.transformer_layer"}, 13},
      {"quickstart_small.yaml", {"te.transformer_layer"}, 13},
  };
  for (const ExampleCase &example : examples) {
    SCOPED_TRACE(example.file);
    llvm::SmallString<256> path(TEJIT_EXAMPLES_DIR);
    llvm::sys::path::append(path, example.file);
    auto buffer = llvm::MemoryBuffer::getFile(path);
    ASSERT_TRUE(buffer) << path.str().str();
    ImportResult result =
        importSpec(context, (*buffer)->getBuffer(), path.str());
    ASSERT_TRUE(result.module) << result.describe();
    func::FuncOp function = getFunction(*result.module);
    EXPECT_EQ(function.getSymName(), llvm::sys::path::stem(example.file));
    EXPECT_EQ(opNames(function), example.ops);
    EXPECT_EQ(function.getNumArguments(), example.numArgs);
    EXPECT_TRUE(succeeded(verify(*result.module)));
  }
}
#endif

} // namespace
