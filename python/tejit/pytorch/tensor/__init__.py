"""tejit.pytorch.tensor: where Transformer Engine 2.x keeps its quantized
tensors (`transformer_engine.pytorch.tensor`): Float8Tensor (tejit's, in
float8_tensor.py) and the distributed optimizer's helpers for FP8
weights (utils.py)."""
from ..float8_tensor import Float8Tensor
from . import utils

__all__ = ["Float8Tensor", "utils"]
