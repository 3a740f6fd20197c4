//===- SpecErrorsTest.cpp - malformed layer specs and their diagnostics ---===//
//
// Every case imports a bad spec and expects no module and exactly one error,
// with its exact text at its exact line:column. Line 1 is the line after the
// raw string's opening `R"(`.
//
//===----------------------------------------------------------------------===//
#include "SpecTestUtils.h"

#include "compiler/spec/SpecMap.h"

#include "gmock/gmock.h"

using namespace mlir;
using namespace tejit::testing;
using ::testing::ElementsAre;

namespace {

// The layer types a spec takes, in the order the errors list them:
// Transformer Engine's class names, then the te op names.
#define LAYER_CLASS_NAMES                                                      \
  "Linear, LayerNorm, RMSNorm, LayerNormLinear, LayerNormMLP, "                \
  "DotProductAttention, MultiheadAttention, TransformerLayer, GroupedLinear, " \
  "Activation, Bias, AddExtraInput, MakeExtraOutput"
#define LAYER_OP_NAMES                                                         \
  "linear, layernorm, rmsnorm, layernorm_linear, layernorm_mlp, "              \
  "dot_product_attention, multihead_attention, transformer_layer, "            \
  "grouped_linear, act, bias_add, add_extra_input, make_extra_output"

struct ErrorCase {
  const char *name;
  const char *file;
  const char *spec;
  unsigned line, col;
  const char *message;
};

std::ostream &operator<<(std::ostream &os, const ErrorCase &test) {
  return os << test.name;
}

class SpecError : public SpecTest,
                  public ::testing::WithParamInterface<ErrorCase> {};

TEST_P(SpecError, IsReportedAtItsLocation) {
  const ErrorCase &test = GetParam();
  ImportResult result = import(test.spec, test.file);
  EXPECT_FALSE(result.module) << "the bad spec imported";
  std::vector<Diag> errors = result.errors();
  ASSERT_EQ(errors.size(), 1u) << result.describe();
  EXPECT_EQ(result.diags.size(), 1u) << result.describe();
  EXPECT_EQ(errors[0].file, test.file);
  EXPECT_EQ(errors[0].message, test.message);
  EXPECT_EQ(std::make_pair(errors[0].line, errors[0].col),
            std::make_pair(test.line, test.col))
      << errors[0];
}

std::string caseName(const ::testing::TestParamInfo<ErrorCase> &info) {
  return info.param.name;
}

//===----------------------------------------------------------------------===//
// Syntax: YAML, strict JSON, documents
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    Syntax, SpecError,
    ::testing::Values(
        ErrorCase{"YamlBadIndentation", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
   hidden_size: 64
)",
                  5, 15,
                  "invalid YAML: Unexpected token. Expected Block Entry or "
                  "Block End."},
        ErrorCase{"YamlUnclosedFlowList", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers: [
)",
                  3, 10, "invalid YAML: Could not find closing ]!"},
        ErrorCase{"YamlUnclosedQuote", "spec.yaml", R"(
name: "abc
seq_length: 16
)",
                  2, 15, "invalid YAML: Expected quote at end of scalar"},
        ErrorCase{"JsonTrailingCommaInList", "spec.json", R"({
  "seq_length": 16,
  "batch_size": 2,
  "layers": [{"type": "LayerNorm", "hidden_size": 64},]
}
)",
                  4, 55, "invalid JSON: Invalid JSON value"},
        ErrorCase{"JsonTrailingCommaInObject", "spec.json", R"({
  "seq_length": 16,
  "batch_size": 2,
}
)",
                  4, 1, "invalid JSON: Expected object key"},
        ErrorCase{"JsonLineComment", "spec.json", R"({
  "seq_length": 16, // tokens
  "batch_size": 2
}
)",
                  2, 21, "invalid JSON: Expected object key"},
        ErrorCase{"JsonBlockComment", "spec.json", R"({
  /* a layer spec */
  "seq_length": 16
}
)",
                  2, 3, "invalid JSON: Expected object key"},
        ErrorCase{"JsonHashComment", "spec.json", R"(# a layer spec
{"seq_length": 16}
)",
                  1, 1, "invalid JSON: Invalid JSON value"},
        ErrorCase{"JsonSingleQuotes", "spec.json", R"({'seq_length': 16}
)",
                  1, 2, "invalid JSON: Expected object key"},
        ErrorCase{"JsonBareWord", "spec.json", R"({"seq_length": sixteen}
)",
                  1, 16, "invalid JSON: Invalid JSON value"},
        ErrorCase{"JsonTextAfterDocument", "spec.json",
                  R"({"seq_length": 16} {"batch_size": 2}
)",
                  1, 20, "invalid JSON: Text after end of document"},
        ErrorCase{"JsonEmpty", "spec.json", "", 1, 1,
                  "invalid JSON: Unexpected EOF"},
        ErrorCase{"YamlEmpty", "spec.yaml", "", 1, 1,
                  "the layer spec is empty"},
        ErrorCase{"YamlOnlyComments", "spec.yaml", R"(
# seq_length: 16
# batch_size: 2
)",
                  1, 1, "the layer spec is empty"},
        ErrorCase{"YamlOnlyBlanks", "spec.yml", "\n   \n\n", 1, 1,
                  "the layer spec is empty"},
        ErrorCase{"TopLevelList", "spec.yaml", R"(
- type: LayerNorm
  hidden_size: 64
)",
                  1, 1,
                  "the spec must be a mapping of keys to values, got a list"},
        ErrorCase{"TopLevelScalar", "spec.yaml", R"(
just some words
)",
                  1, 1,
                  "the spec must be a mapping of keys to values, got a "
                  "scalar"},
        ErrorCase{"TopLevelNull", "spec.yaml", R"(
null
)",
                  1, 1,
                  "the spec must be a mapping of keys to values, got null"},
        ErrorCase{"JsonTopLevelList", "spec.json", R"([{"seq_length": 16}]
)",
                  1, 1,
                  "the spec must be a mapping of keys to values, got a list"},
        ErrorCase{"DuplicateTopLevelKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
seq_length: 32
)",
                  3, 1, "duplicate key 'seq_length'"},
        ErrorCase{"DuplicateLayerKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 64
    in_features: 32
)",
                  7, 5, "duplicate key 'in_features'"},
        ErrorCase{"JsonDuplicateKey", "spec.json",
                  R"({"seq_length": 16, "batch_size": 2, "seq_length": 16}
)",
                  1, 37, "duplicate key 'seq_length'"},
        ErrorCase{"YamlAlias", "spec.yaml", R"(
seq_length: 16
batch_size: *batch
)",
                  2, 13,
                  "YAML aliases and anchors are not supported in layer specs: "
                  "write the value out"},
        ErrorCase{"YamlAnchor", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - &norm
    type: LayerNorm
    hidden_size: 64
)",
                  4, 5,
                  "YAML anchors and aliases are not supported in layer specs: "
                  "write the value out"},
        ErrorCase{"YamlTag", "spec.yaml", R"(
seq_length: !!str 16
)",
                  1, 13, "YAML tags are not supported in layer specs"},
        ErrorCase{"MultipleDocuments", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - {type: LayerNorm, hidden_size: 64}
---
seq_length: 32
)",
                  6, 1,
                  "a layer spec holds one YAML document, this is a second "
                  "one"},
        ErrorCase{"ComplexKey", "spec.yaml", R"(
? [a, b]
: 1
)",
                  1, 3, "mapping keys must be plain strings"}),
    caseName);

//===----------------------------------------------------------------------===//
// Keys: unknown, misspelled, missing
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    Keys, SpecError,
    ::testing::Values(
        ErrorCase{"UnknownTopLevelKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
model: gpt
layers:
  - {type: LayerNorm, hidden_size: 64}
)",
                  3, 1,
                  "unknown key 'model' in the spec (valid keys: name, "
                  "params_dtype, seq_length, batch_size, input_format, "
                  "tokens, description, recipe, kv_cache, layers)"},
        ErrorCase{"MisspelledTopLevelKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_fromat: bshd
layers:
  - {type: LayerNorm, hidden_size: 64}
)",
                  3, 1,
                  "unknown key 'input_fromat' in the spec; did you mean "
                  "'input_format'?"},
        ErrorCase{"MisspelledRequiredTopLevelKey", "spec.yaml", R"(
seq_length: 16
batchsize: 2
layers:
  - {type: LayerNorm, hidden_size: 64}
)",
                  2, 1,
                  "unknown key 'batchsize' in the spec; did you mean "
                  "'batch_size'?"},
        ErrorCase{"UnknownLayerKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64
    dropout: 0.1
)",
                  6, 5,
                  "unknown key 'dropout' in LayerNorm (valid keys: type, "
                  "name, recipe, hidden_size, eps, zero_centered_gamma)"},
        ErrorCase{"MisspelledLayerKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 256
    num_attention_heads: 4
    hiden_dropout: 0.0
)",
                  8, 5,
                  "unknown key 'hiden_dropout' in TransformerLayer; did you "
                  "mean 'hidden_dropout'?"},
        ErrorCase{"MisspelledRequiredLayerKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hiden_size: 64
)",
                  5, 5,
                  "unknown key 'hiden_size' in LayerNorm; did you mean "
                  "'hidden_size'?"},
        ErrorCase{
            "KeyOfAnotherLayerType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 64
    activation: gelu
)",
            7, 5,
            "unknown key 'activation' in Linear (valid keys: type, "
            "name, recipe, fuse_wgrad_accumulation, main_grad_dtype, "
            "fp8_weights, delay_wgrad_compute, "
            "in_features, out_features, bias, tp_size, sequence_parallel, "
            "parallel_mode)"},
        ErrorCase{"MainGradOnALayerWithoutGemms", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: RMSNorm
    hidden_size: 64
    fuse_wgrad_accumulation: true
)",
                  6, 5,
                  "unknown key 'fuse_wgrad_accumulation' in RMSNorm (valid "
                  "keys: type, name, recipe, hidden_size, eps, "
                  "zero_centered_gamma)"},
        ErrorCase{"MainGradFlagNotABool", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 64
    fuse_wgrad_accumulation: yes please
)",
                  7, 30,
                  "'fuse_wgrad_accumulation' in Linear must be true or false, "
                  "got 'yes please'"},
        ErrorCase{"SequenceParallelSliceNotWhole", "spec.yaml", R"(
seq_length: 15
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 256
    num_attention_heads: 4
    tp_size: 2
    sequence_parallel: true
)",
                  9, 24,
                  "'sequence_parallel' cuts dim 0 of the activations "
                  "(seq_length 15) into tp_size (2) slices: it must be "
                  "divisible"},
        // GroupedLinear's FP8 weights (fp8_model_init) feed FP8 GEMMs only.
        ErrorCase{"GroupedLinearFp8WeightsWithoutRecipe", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: GroupedLinear
    num_gemms: 4
    in_features: 64
    out_features: 64
    fp8_weights: true
)",
                  8, 18,
                  "'fp8_weights' needs an FP8 recipe for the layer (FP8 "
                  "weights feed FP8 GEMMs only)"},
        ErrorCase{"GroupedLinearFp8WeightsNotABool", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling}
layers:
  - type: GroupedLinear
    num_gemms: 4
    in_features: 64
    out_features: 64
    fp8_weights: 4
)",
                  9, 18,
                  "'fp8_weights' in GroupedLinear must be true or false, got "
                  "'4'"},
        // GroupedLinear's tensor parallelism (docs/grouped-linear.md).
        ErrorCase{"GroupedLinearSequenceParallel", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: GroupedLinear
    num_gemms: 4
    in_features: 64
    out_features: 64
    tp_size: 2
    parallel_mode: column
    sequence_parallel: true
)",
                  10, 24,
                  "'sequence_parallel' is not supported by GroupedLinear "
                  "with tp_size > 1"},
        ErrorCase{"GroupedLinearRowParallelBias", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: GroupedLinear
    num_gemms: 4
    in_features: 64
    out_features: 64
    tp_size: 2
    parallel_mode: row
)",
                  9, 20,
                  "a row-parallel GroupedLinear (tp_size 2) has no bias: set "
                  "'bias: false'"},
        ErrorCase{"GroupedLinearColumnNotDivisible", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: GroupedLinear
    num_gemms: 4
    in_features: 64
    out_features: 63
    tp_size: 2
    parallel_mode: column
)",
                  7, 19,
                  "'out_features' (63) must be divisible by tp_size (2)"},
        ErrorCase{"GroupedLinearTpSizeNeedsParallelMode", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: GroupedLinear
    num_gemms: 4
    in_features: 64
    out_features: 64
    tp_size: 2
)",
                  8, 14,
                  "'tp_size' 2 needs 'parallel_mode': column (splits the "
                  "output features) or row (splits the input features)"},
        ErrorCase{"MisspelledLayerType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayr
)",
                  4, 11,
                  "'type' in a layer must be one of " LAYER_CLASS_NAMES
                  ", " LAYER_OP_NAMES "; got 'TransformerLayr' (did you "
                  "mean 'TransformerLayer'?)"},
        ErrorCase{"UnknownLayerType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Conv2d
)",
                  4, 11,
                  "'type' in a layer must be one of " LAYER_CLASS_NAMES
                  ", " LAYER_OP_NAMES "; got 'Conv2d'"},
        ErrorCase{"LayerWithoutType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - hidden_size: 64
)",
                  4, 5, "a layer needs 'type' (one of " LAYER_CLASS_NAMES ")"},
        ErrorCase{"LayerWithMisspelledTypeKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - hidden_size: 64
    tpye: LayerNorm
)",
                  5, 5, "unknown key 'tpye' in a layer; did you mean 'type'?"},
        ErrorCase{"MissingSeqLength", "spec.yaml", R"(
batch_size: 2
layers:
  - {type: LayerNorm, hidden_size: 64}
)",
                  1, 1, "the spec needs 'seq_length'"},
        ErrorCase{"MissingLayers", "spec.yaml", R"(
seq_length: 16
batch_size: 2
)",
                  1, 1,
                  "the spec needs 'layers', a list of one or more layers"},
        ErrorCase{"MissingRequiredLayerKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    num_attention_heads: 4
)",
                  4, 5, "TransformerLayer needs 'ffn_hidden_size'"},
        ErrorCase{"MissingKeyNextToAKnownOne", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    ffn_hidden_size: 256
    num_attention_heads: 4
)",
                  4, 5, "TransformerLayer needs 'hidden_size'"},
        ErrorCase{"MissingOutFeatures", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
)",
                  4, 5, "Linear needs 'out_features'"},
        ErrorCase{"MissingKvChannels", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
)",
                  4, 5, "DotProductAttention needs 'kv_channels'"},
        ErrorCase{"NullRequiredValue", "spec.json", R"({
  "seq_length": 16,
  "batch_size": 2,
  "layers": [{"type": "LayerNorm", "hidden_size": null}]
})",
                  4, 14, "LayerNorm needs 'hidden_size'"}),
    caseName);

//===----------------------------------------------------------------------===//
// Values: enums, types, ranges
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    Values, SpecError,
    ::testing::Values(
        ErrorCase{"MisspelledActivation", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: swigelu
)",
                  7, 17,
                  "'activation' in LayerNormMLP must be one of gelu, geglu, "
                  "qgelu, qgeglu, relu, reglu, srelu, sreglu, silu, swiglu, "
                  "clamped_swiglu; got 'swigelu' (did you mean 'swiglu'?)"},
        // clamped_swiglu's activation_params (TE's): a mapping of limit,
        // alpha and glu_linear_offset, only with that activation.
        ErrorCase{"ActivationParamsWithAnotherActivation", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: swiglu
    activation_params: {limit: 7.0}
)",
                  8, 5,
                  "'activation_params' in LayerNormMLP is for activation "
                  "clamped_swiglu only, got activation swiglu"},
        ErrorCase{"ActivationParamsWithTheDefaultActivation", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    activation_params:
      limit: 7.0
)",
                  8, 5,
                  "'activation_params' in TransformerLayer is for activation "
                  "clamped_swiglu only, got activation gelu"},
        ErrorCase{"ActivationParamsOnLayerNormLinear", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormLinear
    in_features: 64
    out_features: 64
    activation_params: {limit: 1.0}
)",
                  7, 5,
                  "unknown key 'activation_params' in LayerNormLinear (valid "
                  "keys: type, name, recipe, fuse_wgrad_accumulation, "
                  "main_grad_dtype, fp8_weights, delay_wgrad_compute, "
                  "in_features, out_features, "
                  "bias, return_layernorm_output, normalization, eps, "
                  "zero_centered_gamma, tp_size, sequence_parallel, "
                  "parallel_mode)"},
        ErrorCase{"ActivationParamsNotAMapping", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: clamped_swiglu
    activation_params: 7.0
)",
                  8, 24,
                  "'activation_params' in LayerNormMLP must be a mapping of "
                  "keys to values, got a scalar"},
        ErrorCase{"ActivationParamsUnknownKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: clamped_swiglu
    activation_params: {limit: 7.0, beta: 1.0}
)",
                  8, 37,
                  "unknown key 'beta' in activation_params (valid keys: "
                  "limit, alpha, glu_linear_offset)"},
        ErrorCase{"ActivationParamsMisspelledKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    activation: clamped_swiglu
    activation_params:
      alpha: 1.702
      limt: 7.0
)",
                  11, 7,
                  "unknown key 'limt' in activation_params; did you mean "
                  "'limit'?"},
        ErrorCase{"ActivationParamsNotANumber", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: clamped_swiglu
    activation_params: {alpha: fast}
)",
                  8, 32,
                  "'alpha' in activation_params must be a number, got 'fast'"},
        ErrorCase{"ActivationParamsQuotedNumber", "spec.json", R"({
  "seq_length": 16,
  "batch_size": 2,
  "layers": [{"type": "LayerNormMLP", "hidden_size": 64,
              "ffn_hidden_size": 64, "activation": "clamped_swiglu",
              "activation_params": {"limit": "7.0"}}]
})",
                  6, 46,
                  "'limit' in activation_params must be a number, got the "
                  "string '7.0'"},
        ErrorCase{"ActivationParamsZeroLimit", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: clamped_swiglu
    activation_params: {limit: 0}
)",
                  8, 32,
                  "'limit' in activation_params must be finite and > 0, got "
                  "0"},
        ErrorCase{"ActivationParamsNegativeLimit", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    activation: clamped_swiglu
    activation_params: {limit: -1.5, alpha: 1.702}
)",
                  9, 32,
                  "'limit' in activation_params must be finite and > 0, got "
                  "-1.5"},
        ErrorCase{"ActivationParamsLimitOverflows", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: clamped_swiglu
    activation_params: {limit: 1e400}
)",
                  8, 32,
                  "'limit' in activation_params must be finite and > 0, got "
                  "1e400"},
        ErrorCase{"ActivationParamsInfiniteAlpha", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: clamped_swiglu
    activation_params: {alpha: -inf}
)",
                  8, 32,
                  "'alpha' in activation_params must be finite, got -inf"},
        ErrorCase{"ActivationParamsNanOffset", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 64
    ffn_hidden_size: 64
    activation: clamped_swiglu
    activation_params: {glu_linear_offset: nan}
)",
                  8, 44,
                  "'glu_linear_offset' in activation_params must be finite, "
                  "got nan"},
        ErrorCase{"MisspelledNormalization", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormLinear
    in_features: 64
    out_features: 64
    normalization: RMSNrom
)",
                  7, 20,
                  "'normalization' in LayerNormLinear must be one of "
                  "LayerNorm, RMSNorm; got 'RMSNrom' (did you mean "
                  "'RMSNorm'?)"},
        ErrorCase{"MisspelledMaskType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    attn_mask_type: casual
)",
                  7, 21,
                  "'attn_mask_type' in MultiheadAttention must be one of "
                  "no_mask, padding, causal, padding_causal, "
                  "causal_bottom_right, padding_causal_bottom_right, "
                  "arbitrary; got 'casual' (did you mean 'causal'?)"},
        ErrorCase{"MisspelledDtype", "spec.yaml", R"(
params_dtype: bfloat61
seq_length: 16
batch_size: 2
)",
                  1, 15,
                  "'params_dtype' in the spec must be one of bf16, fp16, "
                  "fp32, bfloat16, float16, float32; got 'bfloat61' (did you "
                  "mean 'bfloat16'?)"},
        ErrorCase{"UnsupportedDtype", "spec.yaml", R"(
params_dtype: int8
seq_length: 16
batch_size: 2
)",
                  1, 15,
                  "'params_dtype' in the spec must be one of bf16, fp16, "
                  "fp32, bfloat16, float16, float32; got 'int8'"},
        ErrorCase{"MisspelledInputFormat", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: sbh
)",
                  3, 15,
                  "'input_format' in the spec must be one of sbhd, bshd, thd; "
                  "got 'sbh' (did you mean 'sbhd'?)"},
        ErrorCase{"TokensWithoutThd", "spec.yaml", R"(
seq_length: 16
batch_size: 2
tokens: 32
layers:
  - {type: LayerNorm, hidden_size: 64}
)",
                  3, 1,
                  "'tokens' (the packed token count) needs 'input_format: "
                  "thd'"},
        ErrorCase{"ThdNeedsAPaddingMaskType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: thd
layers:
  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 128,
     num_attention_heads: 4}
)",
                  5, 5,
                  "'te.transformer_layer' op packed sequences (thd) need "
                  "'self_attn_mask_type' padding or padding_causal (each "
                  "sequence attends to itself alone), got causal"},
        ErrorCase{"ThdCrossAttention", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: thd
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attention_type: cross, attn_mask_type: padding}
)",
                  5, 5,
                  "'te.multihead_attention' op packed sequences (thd) are "
                  "supported in self-attention only, not with "
                  "'encoder_output'"},
        ErrorCase{"ThdPaddedQueries", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: thd
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 16,
     attn_mask_type: padding, padded_queries: true}
)",
                  6, 31,
                  "'padded_queries' is not supported with packed sequences "
                  "(input_format thd: cu_seqlens gives the queries' "
                  "lengths)"},
        ErrorCase{"KvTokensWithoutThd", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 16,
     attn_mask_type: padding, kv_tokens: 8}
)",
                  5, 31,
                  "'kv_tokens' (the keys' packed token count) needs "
                  "'input_format: thd'"},
        ErrorCase{"StringForInt", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: "64"
)",
                  5, 18,
                  "'hidden_size' in LayerNorm must be an integer, got the "
                  "string '64'"},
        ErrorCase{"JsonStringForInt", "spec.json",
                  R"({"seq_length": "16", "batch_size": 2}
)",
                  1, 16,
                  "'seq_length' in the spec must be an integer, got the "
                  "string '16'"},
        ErrorCase{"FloatForInt", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64.0
)",
                  5, 18,
                  "'hidden_size' in LayerNorm must be an integer, got '64.0'"},
        ErrorCase{"WordForInt", "spec.yaml", R"(
seq_length: sixteen
batch_size: 2
)",
                  1, 13,
                  "'seq_length' in the spec must be an integer, got "
                  "'sixteen'"},
        ErrorCase{"MappingForScalar", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size:
      value: 64
)",
                  6, 7,
                  "'hidden_size' in LayerNorm must be an integer, got a "
                  "mapping"},
        ErrorCase{"ListForScalar", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64
    eps: [1.0e-5]
)",
                  6, 10, "'eps' in LayerNorm must be a number, got a list"},
        ErrorCase{"StringForFloat", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64
    eps: '1e-5'
)",
                  6, 10,
                  "'eps' in LayerNorm must be a number, got the string "
                  "'1e-5'"},
        ErrorCase{"QuotedBoolean", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 64
    bias: "false"
)",
                  7, 11,
                  "'bias' in Linear must be true or false, got the string "
                  "'false'"},
        ErrorCase{"JsonQuotedBoolean", "spec.json", R"({
  "seq_length": 16,
  "batch_size": 2,
  "layers": [{"type": "Linear", "in_features": 64, "out_features": 64,
              "bias": "true"}]
})",
                  5, 23,
                  "'bias' in Linear must be true or false, got the string "
                  "'true'"},
        ErrorCase{"IntForBool", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: RMSNorm
    hidden_size: 64
    zero_centered_gamma: 1
)",
                  6, 26,
                  "'zero_centered_gamma' in RMSNorm must be true or false, "
                  "got '1'"},
        ErrorCase{"ListForName", "spec.yaml", R"(
name: [a, b]
)",
                  1, 7, "'name' in the spec must be a string, got a list"},
        ErrorCase{"ZeroSize", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 0
    out_features: 64
)",
                  5, 18, "'in_features' in Linear must be >= 1, got 0"},
        ErrorCase{"NegativeSeqLength", "spec.yaml", R"(
seq_length: -4
batch_size: 2
)",
                  1, 13, "'seq_length' in the spec must be >= 1, got -4"},
        ErrorCase{"ZeroBatch", "spec.json",
                  R"({"seq_length": 4, "batch_size": 0}
)",
                  1, 33, "'batch_size' in the spec must be >= 1, got 0"},
        ErrorCase{"ZeroHeads", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 0
)",
                  7, 26,
                  "'num_attention_heads' in TransformerLayer must be >= 1, "
                  "got 0"},
        ErrorCase{"NegativeGqaGroups", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    num_gqa_groups: -2
)",
                  7, 21,
                  "'num_gqa_groups' in MultiheadAttention must be >= 1, got "
                  "-2"},
        ErrorCase{"HugeSize", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 9223372036854775807
    ffn_hidden_size: 64
    num_attention_heads: 1
)",
                  5, 18,
                  "'hidden_size' in TransformerLayer must be <= 1073741824 "
                  "(2^30), got 9223372036854775807"},
        ErrorCase{"IntegerOverflow", "spec.yaml", R"(
seq_length: 99999999999999999999
batch_size: 2
)",
                  1, 13,
                  "'seq_length' in the spec must be an integer, got "
                  "'99999999999999999999'"}),
    caseName);

//===----------------------------------------------------------------------===//
// Layer lists and names
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    Layers, SpecError,
    ::testing::Values(
        ErrorCase{"EmptyLayerList", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers: []
)",
                  3, 9,
                  "'layers' must be a non-empty list of layers, got an empty "
                  "list"},
        ErrorCase{"JsonEmptyLayerList", "spec.json", R"({
  "seq_length": 16,
  "batch_size": 2,
  "layers": []
})",
                  4, 13,
                  "'layers' must be a non-empty list of layers, got an empty "
                  "list"},
        ErrorCase{"NullLayers", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
name: x
)",
                  3, 1,
                  "'layers' must be a non-empty list of layers, got null"},
        ErrorCase{"LayersMapping", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  type: LayerNorm
  hidden_size: 64
)",
                  4, 3,
                  "'layers' must be a non-empty list of layers, got a "
                  "mapping"},
        ErrorCase{"LayerNotAMapping", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - LayerNorm
)",
                  4, 5,
                  "a layer must be a mapping of keys to values, got a "
                  "scalar"},
        ErrorCase{"BadFunctionName", "spec.yaml", R"(
name: 1st_model
seq_length: 16
)",
                  1, 7,
                  "'name' must be an identifier (letters, digits and '_', not "
                  "starting with a digit), got '1st_model'"},
        ErrorCase{"FunctionNameWithDash", "spec.yaml", R"(
name: my-model
seq_length: 16
)",
                  1, 7,
                  "'name' must be an identifier (letters, digits and '_', not "
                  "starting with a digit), got 'my-model'"},
        ErrorCase{"EmptyLayerName", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    name: ""
    hidden_size: 64
)",
                  5, 11,
                  "a layer's 'name' must not be empty: it prefixes the names "
                  "of its parameters"},
        ErrorCase{"WidthMismatch", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 32
  - type: LayerNorm
    hidden_size: 64
)",
                  8, 18,
                  "'hidden_size' of LayerNorm is 64 but its input, the "
                  "previous layer's output, has 32 features"},
        ErrorCase{"WidthMismatchAfterAttention", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
  - type: Linear
    in_features: 128
    out_features: 64
)",
                  8, 18,
                  "'in_features' of Linear is 128 but its input, the "
                  "previous layer's output, has 64 features"},
        ErrorCase{"DotProductAttentionNotFirst", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
)",
                  6, 5,
                  "DotProductAttention takes query, key and value, so it can "
                  "only be the first layer of a spec"},
        ErrorCase{"DecoderLayer", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    layer_type: decoder
    enc_dec_attn_mask_type: causal_bottom_right
)",
                  9, 29,
                  "'enc_dec_attn_mask_type' causal_bottom_right is not "
                  "supported with cross-attention (no_mask, causal, padding "
                  "and padding_causal are; causal aligns top-left)"},
        ErrorCase{"PaddedQueriesWithoutPadding", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    layer_type: decoder
    padded_queries: true
)",
                  9, 21,
                  "'padded_queries' needs the padding or padding_causal mask "
                  "type in 'enc_dec_attn_mask_type'"},
        ErrorCase{"DotProductAttentionPaddedQueriesWithoutPadding", "spec.yaml",
                  R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    padded_queries: true
)",
                  7, 21,
                  "'padded_queries' needs the padding or padding_causal mask "
                  "type in 'attn_mask_type'"},
        ErrorCase{"ParallelAttentionMlpInDecoder", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    layer_type: decoder
    parallel_attention_mlp: true
)",
                  9, 29,
                  "'parallel_attention_mlp' is not supported with "
                  "'layer_type' decoder"},
        ErrorCase{"ParallelAttentionMlpWithOutputLayernorm", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    output_layernorm: true
    parallel_attention_mlp: true
)",
                  9, 29,
                  "'parallel_attention_mlp' is not supported with "
                  "'output_layernorm' true"},
        ErrorCase{"LayernormOutputWithoutLayernorm", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    return_layernorm_output: true
)",
                  7, 30,
                  "'return_layernorm_output' needs 'input_layernorm: true'"},
        ErrorCase{"RotaryDimWithoutRotary", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    rotary_dim: 8
)",
                  7, 5, "'rotary_dim' needs 'rotary_pos_emb: true'"},
        ErrorCase{"OddRotaryDim", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    rotary_pos_emb: true
    rotary_dim: 7
)",
                  9, 17,
                  "'rotary_dim' must be even and at most kv_channels (16), "
                  "got 7"},
        ErrorCase{"EncDecMaskTypeOnEncoder", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    enc_dec_attn_mask_type: padding
)",
                  8, 5,
                  "'enc_dec_attn_mask_type' applies to cross-attention only "
                  "(layer_type 'decoder')"},
        ErrorCase{"CrossAttentionRotary", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    attention_type: cross
    rotary_pos_emb: true
)",
                  8, 21,
                  "'rotary_pos_emb' is not supported with cross-attention"},
        ErrorCase{"EncoderOutputLengthsDiffer", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attention_type: cross, kv_seq_length: 32}
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attention_type: cross, kv_seq_length: 48}
)",
                  6, 5,
                  "MultiheadAttention needs an 'encoder_output' of "
                  "'tensor<48x2x64xbf16>' (kv_seq_length 48, hidden_size 64), "
                  "but an earlier layer's is 'tensor<32x2x64xbf16>': the "
                  "layers of a spec attend to one encoder output"},
        ErrorCase{"ContradictingQkvFormat", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: bshd
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    qkv_format: sbhd
)",
                  8, 17,
                  "'qkv_format' (sbhd) contradicts the spec's input_format "
                  "(bshd): every layer of a spec shares one layout"},
        ErrorCase{"ContradictingAttnInputFormat", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    attn_input_format: bshd
)",
                  8, 24,
                  "'attn_input_format' (bshd) contradicts the spec's "
                  "input_format (sbhd): every layer of a spec shares one "
                  "layout"},
        ErrorCase{"RotaryTablesDisagree", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    rotary_pos_emb: true
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 2
    rotary_pos_emb: true
)",
                  8, 5,
                  "MultiheadAttention needs a 'rotary_pos_emb' input of "
                  "'tensor<16x1x1x32xf32>' (rotary_dim = 32), but an "
                  "earlier layer's is 'tensor<16x1x1x16xf32>': the layers of "
                  "a spec share one rotary table, so their rotary widths must "
                  "match"}),
    caseName);

//===----------------------------------------------------------------------===//
// Attention bias and ALiBi (docs/attention-bias.md)
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    AttentionBias, SpecError,
    ::testing::Values(
        ErrorCase{"PreScaleBias", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    core_attention_bias_type: pre_scale_bias
)",
                  7, 31,
                  "'core_attention_bias_type' pre_scale_bias is not "
                  "supported: pass bias * softmax_scale as a post_scale_bias "
                  "(scale * (q.k + bias) = scale * q.k + scale * bias)"},
        ErrorCase{"BiasShapeWithAlibi", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    core_attention_bias_type: alibi
    bias_shape: bhss
)",
                  9, 5,
                  "'bias_shape' needs 'core_attention_bias_type: "
                  "post_scale_bias'"},
        ErrorCase{"GradOfAlibi", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    core_attention_bias_type: alibi
    bias_requires_grad: true
)",
                  8, 5,
                  "'bias_requires_grad' needs 'core_attention_bias_type: "
                  "post_scale_bias'"},
        ErrorCase{"SlopesWithoutAlibi", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    alibi_slopes: heads
)",
                  7, 5,
                  "'alibi_slopes' needs 'core_attention_bias_type: alibi'"},
        ErrorCase{"GradOfB1ss", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    core_attention_bias_type: post_scale_bias
    bias_shape: b1ss
    bias_requires_grad: true
)",
                  9, 25,
                  "'bias_requires_grad' needs bias_shape 1hss (the gradient "
                  "is [1, heads, s, s_kv], summed over the batch), got b1ss"},
        ErrorCase{"BiasWithThd", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: thd
layers:
  - {type: TransformerLayer, hidden_size: 64, ffn_hidden_size: 128,
     num_attention_heads: 4, self_attn_mask_type: padding,
     core_attention_bias_type: alibi}
)",
                  7, 32,
                  "'core_attention_bias_type' alibi is not supported with "
                  "packed sequences (input_format thd)"},
        ErrorCase{"BiasWithKvCache", "spec.yaml", R"(
seq_length: 4
batch_size: 3
tokens: 16
input_format: thd
kv_cache: {max_sequence_length: 32}
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attn_mask_type: padding_causal,
     core_attention_bias_type: post_scale_bias}
)",
                  9, 32,
                  "'core_attention_bias_type' post_scale_bias is not "
                  "supported with a 'kv_cache' (inference)"},
        ErrorCase{"BiasWithArbitraryMask", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - {type: DotProductAttention, num_attention_heads: 4, kv_channels: 16,
     attn_mask_type: arbitrary, core_attention_bias_type: post_scale_bias}
)",
                  5, 59,
                  "'core_attention_bias_type' post_scale_bias is not "
                  "supported with the arbitrary mask type (fold the mask "
                  "into the bias)"},
        ErrorCase{"BiasShapesDisagree", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    core_attention_bias_type: post_scale_bias
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    core_attention_bias_type: post_scale_bias
    bias_shape: bhss
)",
                  12, 17,
                  "MultiheadAttention needs the input 'core_attention_bias' of "
                  "'tensor<2x4x16x16xbf16>', but an earlier layer's is "
                  "'tensor<1x4x16x16xbf16>': one 'core_attention_bias' "
                  "serves every layer of a spec, so their shapes must "
                  "agree"},
        ErrorCase{"SlopesDisagree", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     core_attention_bias_type: alibi, alibi_slopes: heads}
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     core_attention_bias_type: alibi, alibi_slopes: batch_heads}
)",
                  7, 53,
                  "MultiheadAttention needs the input 'alibi_slopes' of "
                  "'tensor<2x4xf32>', but an earlier layer's is "
                  "'tensor<4xf32>': one 'alibi_slopes' serves every layer "
                  "of a spec, so their shapes must agree"},
        ErrorCase{"BiasGradDisagrees", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     core_attention_bias_type: post_scale_bias, bias_requires_grad: true}
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     core_attention_bias_type: post_scale_bias}
)",
                  7, 32,
                  "'bias_requires_grad' is false here but true in an earlier "
                  "layer: the layers of a spec share one "
                  "'core_attention_bias', which takes a gradient or not"}),
    caseName);

//===----------------------------------------------------------------------===//
// Paged KV caches (docs/paged-kv-cache.md): `page_size` and `total_pages`
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    PagedKvCache, SpecError,
    ::testing::Values(
        ErrorCase{"PageSizeNotDividing", "spec.yaml", R"(
seq_length: 1
batch_size: 2
input_format: thd
kv_cache:
  max_sequence_length: 2048
  page_size: 48
  total_pages: 64
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attn_mask_type: padding_causal}
)",
                  6, 14,
                  "'page_size' (48) must divide 'max_sequence_length' (2048)"},
        ErrorCase{"PageSizeWithoutTotalPages", "spec.yaml", R"(
seq_length: 1
batch_size: 2
input_format: thd
kv_cache:
  max_sequence_length: 64
  page_size: 16
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attn_mask_type: padding_causal}
)",
                  6, 3,
                  "paged KV caches need both 'page_size' and 'total_pages': "
                  "'total_pages' (the pages of each layer's caches) is "
                  "missing"},
        ErrorCase{"TotalPagesWithoutPageSize", "spec.yaml", R"(
seq_length: 1
batch_size: 2
input_format: thd
kv_cache: {max_sequence_length: 64, total_pages: 8}
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attn_mask_type: padding_causal}
)",
                  4, 37,
                  "paged KV caches need both 'page_size' and 'total_pages': "
                  "'page_size' (the rows of a page) is missing"},
        ErrorCase{"PageSizeZero", "spec.yaml", R"(
seq_length: 1
batch_size: 2
input_format: thd
kv_cache: {max_sequence_length: 64, page_size: 0, total_pages: 8}
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attn_mask_type: padding_causal}
)",
                  4, 48, "'page_size' in kv_cache must be >= 1, got 0"},
        ErrorCase{"TotalPagesNegative", "spec.yaml", R"(
seq_length: 1
batch_size: 2
input_format: thd
kv_cache: {max_sequence_length: 64, page_size: 8, total_pages: -2}
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attn_mask_type: padding_causal}
)",
                  4, 64, "'total_pages' in kv_cache must be >= 1, got -2"},
        ErrorCase{"MisspelledPageSize", "spec.yaml", R"(
seq_length: 1
batch_size: 2
input_format: thd
kv_cache: {max_sequence_length: 64, page_sise: 8, total_pages: 8}
layers:
  - {type: MultiheadAttention, hidden_size: 64, num_attention_heads: 4,
     attn_mask_type: padding_causal}
)",
                  4, 37,
                  "unknown key 'page_sise' in kv_cache; did you mean "
                  "'page_size'?"}),
    caseName);

//===----------------------------------------------------------------------===//
// Recipes
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    Recipes, SpecError,
    ::testing::Values(
        ErrorCase{"MisspelledRecipeType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScalling
)",
                  4, 9,
                  "'type' in recipe must be one of DelayedScaling, "
                  "Float8CurrentScaling, Float8BlockScaling, delayed_scaling, "
                  "current_scaling, block_scaling; "
                  "got 'DelayedScalling' (did you mean 'DelayedScaling'?)"},
        ErrorCase{"UnknownRecipeType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: MXFP8BlockScaling
)",
                  4, 9,
                  "'type' in recipe must be one of DelayedScaling, "
                  "Float8CurrentScaling, Float8BlockScaling, delayed_scaling, "
                  "current_scaling, block_scaling; "
                  "got 'MXFP8BlockScaling' (did you mean "
                  "'Float8BlockScaling'?)"},
        ErrorCase{"RecipeWithoutType", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  fp8_format: HYBRID
)",
                  4, 3,
                  "recipe needs 'type' (DelayedScaling, "
                  "Float8CurrentScaling or Float8BlockScaling)"},
        ErrorCase{"RecipeWithMisspelledTypeKey", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  fp8_format: HYBRID
  typ: DelayedScaling
)",
                  5, 3, "unknown key 'typ' in recipe; did you mean 'type'?"},
        ErrorCase{"RecipeScalar", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe: DelayedScaling
)",
                  3, 9,
                  "recipe must be a mapping of keys to values, got a scalar"},
        ErrorCase{"DelayedFieldInCurrentScaling", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: Float8CurrentScaling
  amax_history_len: 16
)",
                  5, 3,
                  "unknown key 'amax_history_len' in Float8CurrentScaling "
                  "recipe (valid keys: type, fp8_format, power_2_scale)"},
        ErrorCase{"CurrentFieldInDelayedScaling", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  power_2_scale: true
)",
                  5, 3,
                  "unknown key 'power_2_scale' in DelayedScaling recipe "
                  "(valid keys: type, fp8_format, margin, amax_history_len, "
                  "amax_compute_algo, reduce_amax, fp8_dpa)"},
        ErrorCase{"E5M2Delayed", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  fp8_format: E5M2
)",
                  5, 15,
                  "'fp8_format' E5M2 is not a valid recipe format (as in "
                  "Transformer Engine): use HYBRID (E4M3 forward, E5M2 "
                  "backward) or E4M3"},
        ErrorCase{"E5M2Current", "spec.json", R"({
  "seq_length": 16,
  "batch_size": 2,
  "recipe": {"type": "Float8CurrentScaling", "fp8_format": "e5m2"}
})",
                  4, 60,
                  "'fp8_format' E5M2 is not a valid recipe format (as in "
                  "Transformer Engine): use HYBRID (E4M3 forward, E5M2 "
                  "backward) or E4M3"},
        ErrorCase{"MisspelledFp8Format", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  fp8_format: HYBIRD
)",
                  5, 15,
                  "'fp8_format' in DelayedScaling recipe must be one of "
                  "HYBRID, E4M3, E5M2; got 'HYBIRD' (did you mean "
                  "'HYBRID'?)"},
        ErrorCase{"MisspelledAmaxAlgo", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  amax_compute_algo: most_recnt
)",
                  5, 22,
                  "'amax_compute_algo' in DelayedScaling recipe must be one "
                  "of max, most_recent; got 'most_recnt' (did you mean "
                  "'most_recent'?)"},
        ErrorCase{"NegativeMargin", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  margin: -1
)",
                  5, 11,
                  "'margin' in DelayedScaling recipe must be >= 0, got -1"},
        ErrorCase{"ZeroAmaxHistory", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  amax_history_len: 0
)",
                  5, 21,
                  "'amax_history_len' in DelayedScaling recipe must be >= 1, "
                  "got 0"},
        ErrorCase{"QuotedReduceAmax", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  reduce_amax: 'no'
)",
                  5, 16,
                  "'reduce_amax' in DelayedScaling recipe must be true or "
                  "false, got the string 'no'"},
        ErrorCase{"RecipeOnLayerNorm", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64
    recipe:
      type: DelayedScaling
)",
                  6, 5,
                  "LayerNorm runs no GEMM, so a 'recipe' does not apply to "
                  "it"},
        ErrorCase{"RecipeOnRMSNorm", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - {type: RMSNorm, hidden_size: 64, recipe: {type: Float8CurrentScaling}}
)",
                  4, 38,
                  "RMSNorm runs no GEMM, so a 'recipe' does not apply to it"},
        ErrorCase{"RecipeOnDotProductAttention", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    recipe: {type: DelayedScaling}
)",
                  7, 5,
                  "DotProductAttention runs no GEMM, so a 'recipe' does not "
                  "apply to it"},
        ErrorCase{"Fp8DpaInCurrentScaling", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: Float8CurrentScaling
  fp8_dpa: true
)",
                  5, 3,
                  "fp8_dpa needs the DelayedScaling recipe, not "
                  "Float8CurrentScaling"},
        ErrorCase{"Fp8DpaInBlockScaling", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 64
    recipe: {type: Float8BlockScaling, fp8_dpa: true}
)",
                  7, 40,
                  "fp8_dpa needs the DelayedScaling recipe, not "
                  "Float8BlockScaling"},
        ErrorCase{"Fp8DpaNotBool", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
  fp8_dpa: 1
)",
                  5, 12,
                  "'fp8_dpa' in DelayedScaling recipe must be true or false, "
                  "got '1'"},
        ErrorCase{"RecipeWithoutFp8DpaOnDotProductAttention", "spec.yaml",
                  R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    recipe: {type: DelayedScaling, fp8_dpa: false}
)",
                  7, 5,
                  "DotProductAttention runs no GEMM, so a 'recipe' does not "
                  "apply to it"},
        ErrorCase{"BadLayerRecipe", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64
    out_features: 64
    recipe:
      type: DelayedScaling
      amax_history_len: -8
)",
                  9, 25,
                  "'amax_history_len' in DelayedScaling recipe must be >= 1, "
                  "got -8"}),
    caseName);

//===----------------------------------------------------------------------===//
// Layer verifiers: reported at the layer's location
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    Verifiers, SpecError,
    ::testing::Values(
        ErrorCase{"HeadsDoNotDivideHidden", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 5
)",
                  4, 5,
                  "'te.transformer_layer' op hidden size (64) must be "
                  "divisible by num_attention_heads (5) unless kv_channels "
                  "is given"},
        ErrorCase{"MultiheadHeadsDoNotDivideHidden", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 96
  - type: MultiheadAttention
    hidden_size: 96
    num_attention_heads: 7
)",
                  6, 5,
                  "'te.multihead_attention' op hidden size (96) must be "
                  "divisible by num_attention_heads (7) unless kv_channels "
                  "is given"},
        ErrorCase{"GqaGroupsDoNotDivideHeads", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    num_gqa_groups: 3
)",
                  4, 5,
                  "'te.transformer_layer' op num_attention_heads (4) must be "
                  "divisible by num_gqa_groups (3)"},
        ErrorCase{"DotProductAttentionGqa", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 8
    num_gqa_groups: 3
    kv_channels: 16
)",
                  4, 5,
                  "'te.dot_product_attention' op query heads (8) must be a "
                  "multiple of key/value heads (3)"},
        ErrorCase{"Fp8OutFeatures", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe:
  type: DelayedScaling
layers:
  - type: Linear
    in_features: 64
    out_features: 40
)",
                  6, 5,
                  "'te.linear' op FP8 GEMMs need out_features divisible by "
                  "16, got 40 (fp8_recipe is set; pad the dim or drop the "
                  "recipe)"},
        ErrorCase{"Fp8TokenCount", "spec.yaml", R"(
seq_length: 3
batch_size: 1
recipe: {type: Float8CurrentScaling}
layers:
  - type: Linear
    in_features: 64
    out_features: 64
)",
                  5, 5,
                  "'te.linear' op FP8 GEMMs need the token count (product of "
                  "the leading dims of 'input') divisible by 8, got 3 "
                  "(fp8_recipe is set; pad the dim or drop the recipe)"},
        ErrorCase{"Fp8FfnHiddenSize", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling}
layers:
  - type: LayerNorm
    hidden_size: 64
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 100
    num_attention_heads: 4
)",
                  7, 5,
                  "'te.transformer_layer' op FP8 GEMMs need ffn_hidden_size "
                  "divisible by 16, got 100 (fp8_recipe is set; pad the dim "
                  "or drop the recipe)"},
        ErrorCase{"Fp8InLayerRecipeOnly", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNormMLP
    hidden_size: 72
    ffn_hidden_size: 64
  - type: LayerNormLinear
    in_features: 72
    out_features: 64
    recipe: {type: DelayedScaling}
)",
                  7, 5,
                  "'te.layernorm_linear' op FP8 GEMMs need in_features "
                  "divisible by 16, got 72 (fp8_recipe is set; pad the dim "
                  "or drop the recipe)"},
        ErrorCase{"WindowNotAPair", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    window_size: [8]
)",
                  8, 18,
                  "'window_size' in TransformerLayer must be a list of 2 "
                  "integers, got a list of 1"},
        ErrorCase{"WindowNotIntegers", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    window_size: [8, zero]
)",
                  7, 22,
                  "'window_size' in MultiheadAttention must be a list of 2 "
                  "integers, got 'zero'"},
        ErrorCase{"KvSeqLengthZero", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    kv_seq_length: 0
)",
                  7, 20,
                  "'kv_seq_length' in DotProductAttention must be >= 1, got "
                  "0"},
        ErrorCase{"WindowBelowMinusOne", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    window_size: [-2, 0]
)",
                  7, 18,
                  "'window_size' in DotProductAttention must be [left, right] "
                  "with each >= -1 (-1: unbounded), got [-2, 0]"},
        ErrorCase{"WindowWithArbitraryMask", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    attn_mask_type: arbitrary
    window_size: [4, 0]
)",
                  8, 18,
                  "'window_size' is not supported with the arbitrary mask "
                  "type"},
        ErrorCase{"DropoutOutOfRange", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 4
    hidden_dropout: 1.0
)",
                  4, 5,
                  "'te.transformer_layer' op 'hidden_dropout' must be in [0, "
                  "1), got 1.000000e+00"},
        ErrorCase{"NegativeEps", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64
    eps: -0.5
)",
                  4, 5,
                  "'te.layernorm' op 'eps' must be finite and >= 0, got "
                  "-5.000000e-01"},
        ErrorCase{"ZeroSoftmaxScale", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    softmax_scale: 0
)",
                  4, 5,
                  "'te.dot_product_attention' op 'softmax_scale' must be "
                  "finite and > 0, got 0.000000e+00"}),
    caseName);

//===----------------------------------------------------------------------===//
// Diagnostics that come with notes or in numbers, and their rendering
//===----------------------------------------------------------------------===//

TEST_F(SpecTest, DuplicateLayerNameNotesTheEarlierLayer) {
  ImportResult result = import(R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    name: norm
    hidden_size: 64
  - type: Linear
    name: norm
    in_features: 64
    out_features: 64
)");
  EXPECT_FALSE(result.module);
  ASSERT_EQ(result.diags.size(), 1u) << result.describe();
  EXPECT_EQ(result.diags[0].message,
            "layer name 'norm' is already taken: each layer needs its own "
            "name, the prefix of its parameters' names");
  EXPECT_EQ(result.diags[0].line, 8u);
  EXPECT_EQ(result.diags[0].col, 11u);
  EXPECT_THAT(result.diags[0].notes,
              ElementsAre("5:11: the earlier layer is here"));
}

TEST_F(SpecTest, ExplicitNameClashingWithADefaultName) {
  ImportResult result = import(R"(
seq_length: 16
batch_size: 2
layers:
  - {type: LayerNorm, name: layers.1, hidden_size: 64}
  - {type: LayerNorm, hidden_size: 64}
)");
  EXPECT_FALSE(result.module);
  ASSERT_EQ(result.diags.size(), 1u) << result.describe();
  EXPECT_EQ(result.diags[0].message,
            "layer name 'layers.1' is already taken: each layer needs its "
            "own name, the prefix of its parameters' names");
  EXPECT_EQ(result.diags[0].line, 5u);
  EXPECT_EQ(result.diags[0].col, 5u);
  EXPECT_THAT(result.diags[0].notes,
              ElementsAre("4:29: the earlier layer is here"));
}

TEST_F(SpecTest, NestedLayerNames) {
  ImportResult result = import(R"(
seq_length: 16
batch_size: 2
layers:
  - {type: TransformerLayer, name: block, hidden_size: 64,
     ffn_hidden_size: 64, num_attention_heads: 4}
  - {type: Linear, name: block.self_attention.proj, in_features: 64,
     out_features: 64}
)");
  EXPECT_FALSE(result.module);
  ASSERT_EQ(result.diags.size(), 1u) << result.describe();
  EXPECT_EQ(result.diags[0].message,
            "layer name 'block.self_attention.proj' and the earlier 'block' "
            "nest (one is a dotted prefix of the other), so their "
            "parameters' names could coincide");
  EXPECT_EQ(result.diags[0].line, 6u);
  EXPECT_EQ(result.diags[0].col, 26u);
  EXPECT_THAT(result.diags[0].notes,
              ElementsAre("4:36: the earlier layer is here"));
}

TEST_F(SpecTest, EveryMissingKeyIsReported) {
  ImportResult result = import(R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
)");
  EXPECT_FALSE(result.module);
  std::vector<Diag> errors = result.errors();
  ASSERT_EQ(errors.size(), 2u) << result.describe();
  EXPECT_EQ(errors[0].message, "Linear needs 'in_features'");
  EXPECT_EQ(errors[1].message, "Linear needs 'out_features'");
  for (const Diag &error : errors) {
    EXPECT_EQ(error.line, 4u);
    EXPECT_EQ(error.col, 5u);
  }
}

TEST_F(SpecTest, TypeErrorsAndUnknownKeysOfOneLayerAreAllReported) {
  ImportResult result = import(R"(
seq_length: 16
batch_size: 2
layers:
  - type: Linear
    in_features: 64.5
    out_features: '64'
    bais: false
)");
  EXPECT_FALSE(result.module);
  std::vector<Diag> errors = result.errors();
  ASSERT_EQ(errors.size(), 3u) << result.describe();
  EXPECT_EQ(errors[0].message,
            "'in_features' in Linear must be an integer, got '64.5'");
  EXPECT_EQ(std::make_pair(errors[0].line, errors[0].col),
            std::make_pair(5u, 18u));
  EXPECT_EQ(errors[1].message,
            "'out_features' in Linear must be an integer, got the string "
            "'64'");
  EXPECT_EQ(std::make_pair(errors[1].line, errors[1].col),
            std::make_pair(6u, 19u));
  EXPECT_EQ(errors[2].message,
            "unknown key 'bais' in Linear; did you mean 'bias'?");
  EXPECT_EQ(std::make_pair(errors[2].line, errors[2].col),
            std::make_pair(7u, 5u));
}

TEST_F(SpecTest, ImportStopsAtTheFirstBadLayer) {
  ImportResult result = import(R"(
seq_length: 16
batch_size: 2
layers:
  - {type: Linear, in_features: 64, out_features: 0}
  - {type: Linear, in_features: 0, out_features: 64}
)");
  EXPECT_FALSE(result.module);
  ASSERT_EQ(result.diags.size(), 1u) << result.describe();
  EXPECT_EQ(result.diags[0].line, 4u);
}

TEST_F(SpecTest, RenderedLikeTeCompile) {
  bool imported = true;
  std::string output = importSpecRendered(context, R"(
seq_length: 16
batch_size: 2
layers:
  - type: LayerNorm
    hidden_size: 64.0
)",
                                          "models/bad.yaml", &imported);
  EXPECT_FALSE(imported);
  EXPECT_EQ(output, "models/bad.yaml:5:18: error: 'hidden_size' in LayerNorm "
                    "must be an integer, got '64.0'\n"
                    "    hidden_size: 64.0\n"
                    "                 ^\n");
}

TEST_F(SpecTest, VerifierErrorRenderedAtTheLayer) {
  bool imported = true;
  std::string output = importSpecRendered(context, R"(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling}
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 64
    num_attention_heads: 3
    kv_channels: 24
)",
                                          "spec.yaml", &imported);
  EXPECT_FALSE(imported);
  EXPECT_EQ(output,
            "spec.yaml:5:5: error: 'te.transformer_layer' op FP8 GEMMs need "
            "the QKV width ((heads + 2 * gqa_groups) * kv_channels) "
            "divisible by 16, got 216 (fp8_recipe is set; pad the dim or "
            "drop the recipe)\n"
            "  - type: TransformerLayer\n"
            "    ^\n");
}

TEST_F(SpecTest, JsonErrorRendered) {
  bool imported = true;
  std::string output = importSpecRendered(context, "{\"seq_length\": 16,}\n",
                                          "spec.json", &imported);
  EXPECT_FALSE(imported);
  EXPECT_EQ(output, "spec.json:1:19: error: invalid JSON: Expected object "
                    "key\n"
                    "{\"seq_length\": 16,}\n"
                    "                  ^\n");
}

TEST_F(SpecTest, ValidSpecRendersNothing) {
  bool imported = false;
  std::string output = importSpecRendered(context, R"(
seq_length: 16
batch_size: 2
layers: [{type: LayerNorm, hidden_size: 64}]
)",
                                          "spec.yaml", &imported);
  EXPECT_TRUE(imported);
  EXPECT_EQ(output, "");
}

//===----------------------------------------------------------------------===//
// closestMatch
//===----------------------------------------------------------------------===//

using tejit::spec::closestMatch;

TEST(ClosestMatch, SuggestsTheNearestCandidate) {
  std::vector<llvm::StringRef> keys = {"hidden_size", "ffn_hidden_size",
                                       "num_attention_heads"};
  EXPECT_EQ(closestMatch("hiden_size", keys), "hidden_size");
  EXPECT_EQ(closestMatch("ffn_hiden_size", keys), "ffn_hidden_size");
  EXPECT_EQ(closestMatch("num_attn_heads", keys), "num_attention_heads");
  EXPECT_EQ(closestMatch("swigelu", {"gelu", "swiglu", "geglu"}), "swiglu");
}

TEST(ClosestMatch, IgnoresCaseAndReturnsTheCandidateSpelling) {
  EXPECT_EQ(closestMatch("layernorm", {"Linear", "LayerNorm"}), "LayerNorm");
  EXPECT_EQ(closestMatch("RMSNORM", {"LayerNorm", "RMSNorm"}), "RMSNorm");
  EXPECT_EQ(closestMatch("hybird", {"HYBRID", "E4M3"}), "HYBRID");
}

TEST(ClosestMatch, RejectsFarWords) {
  EXPECT_EQ(closestMatch("model", {"name", "layers", "recipe"}), std::nullopt);
  EXPECT_EQ(closestMatch("Conv2d", {"Linear", "LayerNorm"}), std::nullopt);
  EXPECT_EQ(closestMatch("anything", {}), std::nullopt);
  // Short words that are other things, not misspellings.
  EXPECT_EQ(closestMatch("thd", {"sbhd", "bshd"}), std::nullopt);
  EXPECT_EQ(closestMatch("fp8", {"bf16", "fp16", "fp32"}), std::nullopt);
}

TEST(ClosestMatch, AllowsEditsInProportionToLength) {
  // One edit per three letters, rounded up.
  EXPECT_EQ(closestMatch("typ", {"type"}), "type");
  EXPECT_EQ(closestMatch("tpye", {"type"}), "type");
  EXPECT_EQ(closestMatch("tp", {"type"}), std::nullopt);
  EXPECT_EQ(closestMatch("t", {"type"}), std::nullopt);
  EXPECT_EQ(closestMatch("casual", {"causal"}), "causal");
  EXPECT_EQ(closestMatch("", {"type"}), std::nullopt);
  // 12 letters: up to 4 edits.
  EXPECT_EQ(closestMatch("hhidden_sizz", {"hidden_size"}), "hidden_size");
  EXPECT_EQ(closestMatch("xxxxxn_size", {"hidden_size"}), std::nullopt);
}

TEST(ClosestMatch, PrefersTheFirstOfEquallyCloseCandidates) {
  EXPECT_EQ(closestMatch("E4M2", {"HYBRID", "E4M3", "E5M2"}), "E4M3");
  EXPECT_EQ(closestMatch("E4M2", {"E5M2", "E4M3"}), "E5M2");
  EXPECT_EQ(closestMatch("sbhd", {"bshd", "sbhd"}), "sbhd");
}

//===----------------------------------------------------------------------===//
// Context parallelism (docs/context-parallel.md): cp_size, cp_rank,
// cp_comm_type and what the first version refuses
//===----------------------------------------------------------------------===//

INSTANTIATE_TEST_SUITE_P(
    ContextParallel, SpecError,
    ::testing::Values(
        ErrorCase{"CpSeqLengthNotDivisible", "spec.yaml", R"(
seq_length: 12
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    cp_size: 4
)",
                  8, 14,
                  "'seq_length' (12) must be divisible by 2 * cp_size (8): "
                  "each rank holds two chunks of every sequence"},
        ErrorCase{"CpRankOutOfRange", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    cp_size: 2
    cp_rank: 2
)",
                  8, 14, "'cp_rank' (2) must be in [0, cp_size) = [0, 2)"},
        // TE's hierarchical a2a+p2p is not built (p2p is: as a2a or
        // all_gather).
        ErrorCase{"CpCommTypeA2aP2p", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    cp_size: 2
    cp_comm_type: a2a+p2p
)",
                  8, 19,
                  "'cp_comm_type' a2a+p2p is not supported: the supported "
                  "values are all_gather, a2a and p2p"},
        // cp_comm_type a2a hands each rank 1/cp_size of the heads.
        ErrorCase{"CpA2aHeadsNotDivisible", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 96
    num_attention_heads: 6
    attn_mask_type: no_mask
    cp_size: 4
    cp_comm_type: a2a
)",
                  6, 26,
                  "'num_attention_heads' (6) must be divisible by cp_size (4) "
                  "with cp_comm_type a2a: each rank attends over 1/cp_size of "
                  "the heads"},
        ErrorCase{"CpA2aGroupsNotDivisible", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    num_gqa_groups: 1
    kv_channels: 16
    cp_size: 2
    cp_rank: 1
    cp_comm_type: a2a
)",
                  6, 21,
                  "'num_gqa_groups' (1) must be divisible by cp_size (2) with "
                  "cp_comm_type a2a: each rank attends over 1/cp_size of the "
                  "heads"},
        ErrorCase{"CpA2aHeadsOfATensorParallelRank", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    num_gqa_groups: 4
    tp_size: 2
    cp_size: 4
    cp_comm_type: a2a
)",
                  7, 26,
                  "'num_attention_heads' (4, 2 a rank with tp_size 2) must be "
                  "divisible by cp_size (4) with cp_comm_type a2a: each rank "
                  "attends over 1/cp_size of the heads"},
        ErrorCase{"CpPaddingMask", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    self_attn_mask_type: padding
    cp_size: 2
)",
                  8, 26,
                  "'cp_size' 2 is not supported with 'self_attn_mask_type' "
                  "(context parallelism takes no_mask or causal "
                  "self-attention without bias or KV cache; a window or FP8 "
                  "attention with cp_comm_type a2a)"},
        ErrorCase{"CpWindow", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    window_size: [4, 0]
    cp_size: 2
)",
                  7, 18,
                  "'cp_size' 2 with cp_comm_type all_gather is not supported "
                  "with 'window_size': cp_comm_type a2a runs it"},
        ErrorCase{"CpAttentionBias", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    core_attention_bias_type: alibi
    cp_size: 2
)",
                  7, 31,
                  "'cp_size' 2 is not supported with "
                  "'core_attention_bias_type' (context parallelism takes "
                  "no_mask or causal self-attention without bias or KV cache; "
                  "a window or FP8 attention with cp_comm_type a2a)"},
        ErrorCase{"CpFp8Attention", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling, fp8_dpa: true}
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    cp_size: 2
)",
                  9, 14,
                  "'cp_size' 2 with cp_comm_type all_gather is not supported "
                  "with 'fp8_dpa': cp_comm_type a2a runs it"},
        // p2p runs as all_gather where cp_size does not divide one rank's
        // heads or KV groups, so all_gather's refusals apply, saying why.
        ErrorCase{"CpP2pFp8AttentionHeadsNotDivisible", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling, fp8_dpa: true}
layers:
  - type: DotProductAttention
    num_attention_heads: 6
    kv_channels: 16
    cp_size: 4
    cp_comm_type: p2p
)",
                  8, 14,
                  "'cp_size' 4 with cp_comm_type p2p is not supported with "
                  "'fp8_dpa': cp_comm_type a2a runs it, but "
                  "'num_attention_heads' (6) is not divisible by cp_size (4), "
                  "so p2p runs as all_gather"},
        ErrorCase{"CpP2pWindowGroupsOfATensorParallelRank", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 8
    num_gqa_groups: 2
    window_size: [4, 0]
    tp_size: 2
    cp_size: 2
    cp_comm_type: p2p
)",
                  9, 18,
                  "'cp_size' 2 with cp_comm_type p2p is not supported with "
                  "'window_size': cp_comm_type a2a runs it, but "
                  "'num_gqa_groups' (2, 1 a rank with tp_size 2) is not "
                  "divisible by cp_size (2), so p2p runs as all_gather"},
        // Refusals a2a does not lift read the same with p2p.
        ErrorCase{"CpP2pPaddingMask", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    attn_mask_type: padding
    cp_size: 2
    cp_comm_type: p2p
)",
                  7, 21,
                  "'cp_size' 2 is not supported with 'attn_mask_type' (context "
                  "parallelism takes no_mask or causal self-attention without "
                  "bias or KV cache; a window or FP8 attention with "
                  "cp_comm_type a2a)"},
        // a2a runs a window and FP8 attention, not the other refusals.
        ErrorCase{"CpA2aPaddingMask", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    attn_mask_type: padding_causal
    window_size: [4, 0]
    cp_size: 2
    cp_comm_type: a2a
)",
                  7, 21,
                  "'cp_size' 2 is not supported with 'attn_mask_type' (context "
                  "parallelism takes no_mask or causal self-attention without "
                  "bias or KV cache; a window or FP8 attention with "
                  "cp_comm_type a2a)"},
        ErrorCase{"CpA2aFp8AttentionBias", "spec.yaml", R"(
seq_length: 16
batch_size: 2
recipe: {type: DelayedScaling, fp8_dpa: true}
layers:
  - type: DotProductAttention
    num_attention_heads: 4
    kv_channels: 16
    core_attention_bias_type: alibi
    cp_size: 2
    cp_comm_type: a2a
)",
                  8, 31,
                  "'cp_size' 2 is not supported with "
                  "'core_attention_bias_type' (context parallelism takes "
                  "no_mask or causal self-attention without bias or KV cache; "
                  "a window or FP8 attention with cp_comm_type a2a)"},
        ErrorCase{"CpDecoder", "spec.yaml", R"(
seq_length: 16
batch_size: 2
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    layer_type: decoder
    cp_size: 2
)",
                  8, 17,
                  "'cp_size' 2 is not supported with 'layer_type' (context "
                  "parallelism takes no_mask or causal self-attention without "
                  "bias or KV cache; a window or FP8 attention with "
                  "cp_comm_type a2a)"},
        ErrorCase{"CpPackedSequences", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: thd
tokens: 32
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    self_attn_mask_type: padding_causal
    cp_size: 2
)",
                  11, 14,
                  "'cp_size' 2 is not supported with packed sequences "
                  "(input_format thd)"},
        ErrorCase{"CpKvCache", "spec.yaml", R"(
seq_length: 4
batch_size: 2
input_format: thd
tokens: 8
kv_cache:
  max_sequence_length: 32
layers:
  - type: MultiheadAttention
    hidden_size: 64
    num_attention_heads: 4
    cp_size: 2
)",
                  11, 14,
                  "'cp_size' 2 is not supported with packed sequences "
                  "(input_format thd)"},
        ErrorCase{"CpLayersDisagree", "spec.yaml", R"(
seq_length: 16
batch_size: 2
input_format: bshd
layers:
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
    cp_size: 2
  - type: TransformerLayer
    hidden_size: 64
    ffn_hidden_size: 128
    num_attention_heads: 4
)",
                  10, 5,
                  "TransformerLayer reads all 16 tokens of each sequence "
                  "(cp_size 1), but its input, the previous layer's output, "
                  "holds 8: the attention layers of a spec share one "
                  "cp_size"}),
    caseName);

} // namespace
