"""tejit.pytorch: Transformer Engine's PyTorch API over tejit, so that TE
code changes only its import lines:

    import tejit.pytorch as te       # was: transformer_engine.pytorch as te
    from tejit.common import recipe  # was: transformer_engine.common

    layer = te.LayerNormMLP(4096, 16384, params_dtype=torch.bfloat16)
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe.DelayedScaling()):
        y = layer(x)
    y.sum().backward()

Modules: Linear, LayerNorm, RMSNorm, LayerNormLinear, LayerNormMLP,
DotProductAttention, MultiheadAttention, TransformerLayer, GroupedLinear
(mixture-of-experts GEMMs, with Fp8Padding / Fp8Unpadding), with TE's
constructor arguments and state_dict names; each compiles a program on its
first call per shape/dtype/recipe/mode (module/base.py says how).
FP8: autocast (TE 2.x) and fp8_autocast (TE 1.x) in fp8.py (also
importable as quantization, TE 2.x's name), with TE's availability checks
and FP8GlobalStateManager (_state_manager.py); FP8 primary
weights: fp8_model_init (TE 2.x also quantized_model_init), which makes
the GEMM weights Float8Tensors (float8_tensor.py). CUDA graphs:
make_graphed_callables (graph.py), TE's signature. Activation
checkpointing: checkpoint (_checkpointing.py), TE's. Rotary embeddings:
attention.RotaryPositionEmbedding and attention.apply_rotary_pos_emb
(attention/rope.py), where TE keeps them. KV caches for decoding:
InferenceParams (attention/inference.py), TE's, passed to the attention
modules' forward as inference_params. Context parallelism (cp_group on
the attention modules): distributed.context_parallel_split / _merge /
_gather cut a whole sequence into a rank's load-balanced chunks and join
them (distributed.py). Loss: parallel_cross_entropy (cross_entropy.py),
TE's vocab-parallel cross entropy. MoE router fusions (router.py, TE's
module of that name): fused_topk_with_score_function,
fused_compute_score_for_moe_aux_loss and fused_moe_aux_loss. Operation
fuser: ops.Sequential and TE's fusible ops (ops/), each run of ops
compiled as one program (docs/fusible-ops.md). Direct quantization: TE
2.x's quantizers in tensor/ (tensor.float8_tensor.Float8Quantizer,
Float8CurrentScalingQuantizer; tensor.quantized_tensor.Quantizer) with
TE's DType enum in constants.py (docs/quantizers.md).

Only this subpackage needs PyTorch; tejit (programs) and tejit.common do
not.
"""
try:
    import torch  # noqa: F401
except ImportError as error:
    raise ImportError(
        "tejit.pytorch needs PyTorch, which could not be imported "
        f"({error}). Install PyTorch with CUDA support (see "
        "https://pytorch.org); tejit itself (tejit.Program) and "
        "tejit.common.recipe work without it.") from error

from .fp8 import (autocast, fp8_autocast, fp8_model_init,  # noqa: E402
                  get_default_fp8_recipe, get_default_recipe,
                  is_fp8_available, is_fp8_block_scaling_available,
                  is_mxfp8_available, is_nvfp4_available,
                  quantized_model_init)
from . import quantization  # noqa: E402  (TE 2.x's name for fp8)
from . import float8_tensor  # noqa: E402  (TE's module of that name)
from . import constants, tensor  # noqa: E402  (TE's DType; quantizers)
from .float8_tensor import Float8Tensor  # noqa: E402
from .module import (DotProductAttention, Fp8Padding,  # noqa: E402
                     Fp8Unpadding, GroupedLinear, LayerNorm,
                     LayerNormLinear, LayerNormMLP, Linear,
                     MultiheadAttention, RMSNorm, TransformerLayer)
from .module.base import compile_count  # noqa: E402
from .graph import make_graphed_callables  # noqa: E402
from ._checkpointing import checkpoint  # noqa: E402
from . import attention  # noqa: E402  (TE's RotaryPositionEmbedding)
from . import distributed  # noqa: E402  (context parallelism's split)
from .attention.inference import InferenceParams  # noqa: E402
from . import optimizers  # noqa: E402  (TE's FusedAdam, FusedSGD)
from .cpu_offload import get_cpu_offload_context  # noqa: E402
from . import cross_entropy  # noqa: E402  (TE's module of that name)
from .cross_entropy import parallel_cross_entropy  # noqa: E402
from . import ops  # noqa: E402  (TE's operation fuser, compiled)
from . import permutation  # noqa: E402  (TE's MoE token permutation)
from .permutation import (moe_permute, moe_permute_with_probs,  # noqa: E402
                          moe_sort_chunks_by_index,
                          moe_sort_chunks_by_index_with_probs, moe_unpermute)
from . import router  # noqa: E402  (TE's MoE router fusions)
from .router import (fused_compute_score_for_moe_aux_loss,  # noqa: E402
                     fused_moe_aux_loss, fused_topk_with_score_function)

__all__ = ["Linear", "LayerNorm", "RMSNorm", "LayerNormLinear",
           "LayerNormMLP", "DotProductAttention", "MultiheadAttention",
           "TransformerLayer", "GroupedLinear", "Fp8Padding",
           "Fp8Unpadding", "fp8_autocast", "autocast", "fp8_model_init",
           "quantized_model_init", "Float8Tensor", "float8_tensor",
           "constants", "tensor",
           "get_default_fp8_recipe", "get_default_recipe",
           "is_fp8_available", "is_fp8_block_scaling_available",
           "is_mxfp8_available", "is_nvfp4_available", "quantization",
           "compile_count",
           "make_graphed_callables", "checkpoint", "attention",
           "distributed", "InferenceParams", "optimizers",
           "get_cpu_offload_context", "cross_entropy",
           "parallel_cross_entropy", "permutation", "moe_permute",
           "moe_permute_with_probs", "moe_unpermute",
           "moe_sort_chunks_by_index", "moe_sort_chunks_by_index_with_probs",
           "router", "fused_topk_with_score_function",
           "fused_compute_score_for_moe_aux_loss", "fused_moe_aux_loss",
           "ops"]
