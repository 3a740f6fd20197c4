"""tejit's Transformer Engine modules, one per file; base.py holds what they
share (JIT cache, autograd, FP8 meta state)."""
from .layernorm import LayerNorm
from .layernorm_linear import LayerNormLinear
from .layernorm_mlp import LayerNormMLP
from .linear import Linear
from .rmsnorm import RMSNorm

__all__ = ["Linear", "LayerNorm", "RMSNorm", "LayerNormLinear",
           "LayerNormMLP"]
