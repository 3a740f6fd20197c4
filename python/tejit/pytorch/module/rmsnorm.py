"""te.RMSNorm: y = x / sqrt(mean(x^2) + eps) * gamma."""
from .layernorm import LayerNorm


class RMSNorm(LayerNorm):
    """Transformer Engine's RMSNorm, compiled by tejit: LayerNorm's
    arguments, one parameter `weight` [hidden] (no bias)."""

    _normalization = "RMSNorm"
