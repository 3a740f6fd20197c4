"""tejit.pytorch.ops: Transformer Engine's operation fuser
(`transformer_engine.pytorch.ops`), compiled by tejit.

    import tejit.pytorch as te
    mlp = te.ops.Sequential(
        te.ops.RMSNorm(4096), te.ops.Linear(4096, 2 * 14336, bias=False),
        te.ops.SwiGLU(), te.ops.Linear(14336, 4096, bias=False))
    with te.fp8_autocast(fp8_recipe=recipe.DelayedScaling()):
        y = mlp(x)

Where TE fuses a handful of op patterns by hand, tejit hands each run of
consecutive ops to its compiler as one program (docs/fusible-ops.md): the
chain above compiles to the kernels of te.LayerNormMLP. Ops: BasicLinear,
Linear, Bias, LayerNorm, RMSNorm, GELU, QGELU, ReLU, SReLU, SiLU, GEGLU,
QGEGLU, ReGLU, SReGLU, SwiGLU, ClampedSwiGLU, AddExtraInput,
MakeExtraOutput (compiled; BasicLinear and Linear with TE's tensor
parallelism, communicating inside the chain's program); Identity, Reshape,
ConstantScale, Dropout, Quantize, AllReduce, AllGather, ReduceScatter (run
as PyTorch code between programs)."""
from .basic import (GEGLU, GELU, QGEGLU, QGELU, AddExtraInput,  # noqa: F401
                    BasicLinear, Bias, ClampedSwiGLU, ConstantScale, Dropout,
                    Identity, LayerNorm, MakeExtraOutput, Quantize, ReGLU,
                    ReLU, Reshape, RMSNorm, SiLU, SReGLU, SReLU, SwiGLU)
from ._collectives import AllGather, AllReduce, ReduceScatter  # noqa: F401
from .linear import Linear  # noqa: F401
from .op import BasicOperation, FusedOperation, FusibleOperation  # noqa: F401
from .sequential import Sequential  # noqa: F401

__all__ = ["Sequential", "FusibleOperation", "BasicOperation",
           "FusedOperation", "BasicLinear", "Linear", "Bias", "LayerNorm",
           "RMSNorm", "GELU", "QGELU", "ReLU", "SReLU", "SiLU", "GEGLU",
           "QGEGLU", "ReGLU", "SReGLU", "SwiGLU", "ClampedSwiGLU",
           "AddExtraInput", "MakeExtraOutput", "Identity", "Reshape",
           "ConstantScale", "Dropout", "Quantize", "AllReduce", "AllGather",
           "ReduceScatter"]
