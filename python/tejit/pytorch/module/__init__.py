"""tejit's Transformer Engine modules, one per file; base.py holds what they
share (JIT cache, autograd, FP8 meta state)."""
from .attention import DotProductAttention
from .grouped_linear import Fp8Padding, Fp8Unpadding, GroupedLinear
from .layernorm import LayerNorm
from .layernorm_linear import LayerNormLinear
from .layernorm_mlp import LayerNormMLP
from .linear import Linear
from .multi_head_attention import MultiheadAttention
from .rmsnorm import RMSNorm
from .transformer import TransformerLayer

__all__ = ["Linear", "LayerNorm", "RMSNorm", "LayerNormLinear",
           "LayerNormMLP", "DotProductAttention", "MultiheadAttention",
           "TransformerLayer", "GroupedLinear", "Fp8Padding",
           "Fp8Unpadding"]
