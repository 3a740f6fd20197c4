"""Transformer Engine 2.x's block-scaled FP8 quantizer
(`transformer_engine.pytorch.tensor.float8_blockwise_tensor`): named so
that TE code importing it loads, but not built yet. The compiler's
te.block_quantize (docs/block-scaling.md: 1x128 and 128x128 blocks, the
transposed columnwise copy, cuBLASLt's scale layout, which is TE's
GEMM-ready one) could serve it as a one-op program per shape, as
_weight_casts.py serves the per-tensor quantizers; the tensor type
(Float8BlockwiseQTensor: rowwise/columnwise data and scale_inv, its
dequantize from the block scales) is what is missing."""

__all__ = ["Float8BlockQuantizer", "Float8BlockwiseQTensor"]

_WHY = ("tejit does not build Float8BlockQuantizer / Float8BlockwiseQTensor "
        "yet: use Float8Quantizer or Float8CurrentScalingQuantizer "
        "(tejit.pytorch.tensor.float8_tensor) for direct quantization; the "
        "Float8BlockScaling recipe itself works in the modules "
        "(docs/block-scaling.md)")


class Float8BlockQuantizer:
    """Refused at construction (the module docstring says why)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(_WHY)


class Float8BlockwiseQTensor:
    """Refused at construction (the module docstring says why)."""

    def __new__(cls, *args, **kwargs):
        raise NotImplementedError(_WHY)
