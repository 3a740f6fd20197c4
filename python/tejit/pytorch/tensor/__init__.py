"""tejit.pytorch.tensor: where Transformer Engine 2.x keeps its quantized
tensors and quantizers (`transformer_engine.pytorch.tensor`):
Float8Tensor (tejit's, in ../float8_tensor.py), the per-tensor FP8
quantizers Float8Quantizer and Float8CurrentScalingQuantizer
(float8_tensor.py), the block-scaled Float8BlockQuantizer and
Float8BlockwiseQTensor (float8_blockwise_tensor.py), the Quantizer /
QuantizedTensor bases (quantized_tensor.py), TE's DType enum
(../constants.py), and the distributed optimizer's helpers for FP8 weights
(utils.py); docs/quantizers.md."""
from ..constants import DType
from ..float8_tensor import Float8Tensor, QuantizedTensor
from . import float8_blockwise_tensor, float8_tensor, quantized_tensor, utils
from .float8_blockwise_tensor import (Float8BlockQuantizer,
                                      Float8BlockwiseQTensor)
from .float8_tensor import Float8CurrentScalingQuantizer, Float8Quantizer
from .quantized_tensor import Quantizer

__all__ = ["Float8Tensor", "QuantizedTensor", "Quantizer", "DType",
           "Float8Quantizer", "Float8CurrentScalingQuantizer",
           "Float8BlockQuantizer", "Float8BlockwiseQTensor",
           "float8_tensor", "float8_blockwise_tensor", "quantized_tensor",
           "utils"]
