"""Transformer Engine's optimizers (`transformer_engine.pytorch.optimizers`):
FusedAdam and FusedSGD, with TE's arguments, including fp32 master
weights kept by the optimizer for bf16/fp16 and FP8 (fp8_model_init)
parameters. Megatron-LM imports both from here when it finds them.

Each step runs PyTorch's multi-tensor (foreach) kernels over all the
parameters of a group at once, in float32; an FP8 parameter
(te.Float8Tensor) is requantized from its updated value by tejit's cast
kernel (one read, data and transpose written)."""
from .fused_adam import FusedAdam
from .fused_sgd import FusedSGD

__all__ = ["FusedAdam", "FusedSGD"]
