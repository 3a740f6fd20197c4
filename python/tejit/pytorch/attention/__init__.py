"""tejit.pytorch.attention: where Transformer Engine keeps its attention
helpers (transformer_engine.pytorch.attention). The rotary embedding table
and its application live in rope.py; the attention modules themselves are
tejit.pytorch.DotProductAttention and MultiheadAttention. InferenceParams
(the KV cache of decoding, inference.py) is also tejit.pytorch's."""
from .inference import InferenceParams
from .rope import RotaryPositionEmbedding, apply_rotary_pos_emb

__all__ = ["InferenceParams", "RotaryPositionEmbedding",
           "apply_rotary_pos_emb"]
