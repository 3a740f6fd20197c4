//===- TEDialect.td - the te dialect definition ------------*- tablegen -*-===//
#ifndef TEJIT_DIALECT_TE_DIALECT_TD
#define TEJIT_DIALECT_TE_DIALECT_TD

include "mlir/IR/OpBase.td"

def TE_Dialect : Dialect {
  let name = "te";
  let cppNamespace = "::mlir::te";
  let summary = "Transformer layers and FP8 scaling recipes";
  let description = [{
    The `te` dialect describes transformer layers the way NVIDIA Transformer
    Engine's PyTorch modules do (`Linear`, `LayerNorm`, `RMSNorm`,
    `LayerNormLinear`, `LayerNormMLP`, `DotProductAttention`,
    `MultiheadAttention`, `TransformerLayer`) together with the FP8 recipes
    that scale them (`DelayedScaling`, `Float8CurrentScaling`,
    `Float8BlockScaling`).

    Layer ops take activations and parameters as operands; their attributes
    mirror the constructor arguments of the Transformer Engine module of the
    same name. A layer op with an `fp8_recipe` runs its GEMMs in FP8 under that
    recipe; one without runs them in its parameters' precision.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
  private:
    void registerAttributes();
  }];
}

class TE_Op<string mnemonic, list<Trait> traits = []>
    : Op<TE_Dialect, mnemonic, traits>;

#endif // TEJIT_DIALECT_TE_DIALECT_TD
