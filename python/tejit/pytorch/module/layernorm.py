"""te.LayerNorm: y = (x - mean) / sqrt(var + eps) * gamma + beta."""
from . import _args
from .base import TransformerEngineBaseModule


class LayerNorm(TransformerEngineBaseModule):
    """Transformer Engine's LayerNorm, compiled by tejit. Parameters
    `weight` and `bias` [hidden]; with zero_centered_gamma the weight starts
    at 0 and is applied as (1 + weight). The size comes from TE 2.x's
    `normalized_shape` or TE 1.x's `hidden_size`; `dtype` is TE 2.x's alias
    of params_dtype; `sm_margin` is accepted and unused (it only reserves
    SMs for communication kernels). Runs in the activation dtype under any
    FP8 autocast, as TE's does. `sequence_parallel` (TE's, deprecated
    there) changes nothing in the computation: when given (not None) the
    parameters get TE's attribute `sequence_parallel` with its value (a
    norm on a slice of the sequence has partial gradients, which
    Megatron-LM sums over the tensor-parallel group)."""

    _uses_fp8 = False
    _normalization = "LayerNorm"

    def __init__(self, normalized_shape=None, eps=1e-5,
                 sequence_parallel=None, params_dtype=None,
                 zero_centered_gamma=False, hidden_size=None, device="cuda",
                 dtype=None, sm_margin=0):
        owner = type(self).__name__
        super().__init__(params_dtype if params_dtype is not None else dtype)
        # TE's: kept as given (None: no attribute on the parameters).
        self.sequence_parallel = (None if sequence_parallel is None
                                  else bool(sequence_parallel))
        self.hidden_size = _args.normalized_size(owner, normalized_shape,
                                                 hidden_size)
        self.eps = float(eps)
        self.zero_centered_gamma = bool(zero_centered_gamma)
        self._add_norm_parameters("weight", "bias", self.hidden_size,
                                  self._normalization,
                                  self.zero_centered_gamma, device)
        self.reset_parameters()

    def _mark_sequence_parallel(self):
        if self.sequence_parallel is None:
            return
        for parameter in (self.weight, getattr(self, "bias", None)):
            if parameter is not None:
                parameter.sequence_parallel = self.sequence_parallel

    def _layer_spec(self):
        return {"type": self._normalization, "hidden_size": self.hidden_size,
                "eps": self.eps,
                "zero_centered_gamma": self.zero_centered_gamma}

    def _input_features(self):
        return self.hidden_size

    def forward(self, inp):
        return self._run(inp)["output"]

    def extra_repr(self):
        return (f"{self.hidden_size}, eps={self.eps}, "
                f"zero_centered_gamma={self.zero_centered_gamma}")
