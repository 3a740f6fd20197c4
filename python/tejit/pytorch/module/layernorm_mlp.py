"""te.LayerNormMLP: norm, fc1, activation, fc2 in one program."""

import torch

from . import _args
from .. import _checkpointing
from .base import TransformerEngineBaseModule

# docs/spec-format.md's activations; the gated ones split fc1's doubled
# output into act(first half) * second half (clamped_swiglu: GPT-OSS's
# SwiGLU, with TE's activation_params: _args.activation_params_of).
ACTIVATIONS = ("gelu", "geglu", "qgelu", "qgeglu", "relu", "reglu", "srelu",
               "sreglu", "silu", "swiglu", "clamped_swiglu")
GATED = ("geglu", "qgeglu", "reglu", "sreglu", "swiglu", "clamped_swiglu")


def with_activation_params(layer, activation_params):
    """`layer` (a spec) with `activation_params` (activation_params_of's)
    when there are any."""
    if activation_params is not None:
        layer["activation_params"] = dict(activation_params)
    return layer


class LayerNormMLP(TransformerEngineBaseModule):
    """Transformer Engine's LayerNormMLP, compiled by tejit. Parameters
    `layer_norm_weight`, `layer_norm_bias` [hidden] (no bias with RMSNorm),
    `fc1_weight` [ffn (x2 if gated), hidden], `fc1_bias`, `fc2_weight`
    [hidden, ffn], `fc2_bias`; fc1 initialized by init_method, fc2 by
    output_layer_init_method (both default N(0, 0.023^2)). forward(inp)
    returns the output, plus fc2's bias with return_bias (not added) and
    then the norm's output with return_layernorm_output, as TE's.

    Tensor parallelism (TE's): tp_group (or
    tp_size and set_tensor_parallel_group later) with
    set_parallel_mode=True (required with tp_size > 1): fc1
    column-parallel, fc2 row-parallel. Each rank holds the norm's
    parameters whole, fc1_weight [ffn/tp (x2 if gated: this rank's rows of
    the activation half, then of the gate half), hidden], fc1_bias [same
    rows], fc2_weight [hidden, ffn/tp] and fc2_bias [hidden] (added once,
    after the sum over the ranks); size_per_partition is ffn/tp, as in TE.
    fc1 and fc2 weights are initialized under get_rng_state_tracker().fork()
    when a tracker is given. sequence_parallel=True (ignored at tp_size 1,
    as in TE): the input and output are this rank's slice of dim 0 ([s/tp,
    b, hidden]; so is ln_output): the norm runs on the slice, fc1's input
    is all-gathered and fc2's output reduce-scattered before its bias;
    the gradients of the norm's parameters and of fc2_bias are then this
    rank's partial sums, and they carry TE's `sequence_parallel`
    attribute. Other distributed arguments only at their defaults;
    seq_length, micro_batch_size (userbuffers sizing) and name are
    accepted and unused.

    `activation` as TE's (gelu, geglu, qgelu, qgeglu, relu, reglu, srelu,
    sreglu, silu, swiglu, clamped_swiglu); `activation_params` (TE's)
    only with clamped_swiglu, GPT-OSS's SwiGLU: with a the first half of
    fc1's output and b the second, min(a, limit) * sigmoid(alpha *
    min(a, limit)) * (clamp(b, -limit, limit) + glu_linear_offset), keys
    limit, alpha, glu_linear_offset (TE's defaults 7.0, 1.702, 1.0).

    `checkpoint=True` (TE's): the block keeps only its input for the
    backward and recomputes its forward there (tejit.pytorch.checkpoint:
    the same FP8 scales, bit for bit the results of checkpoint=False).
    TE's own recomputation skips fc2, which this one reruns: one more GEMM
    of the six a step runs, for the memory of fc1's output and the
    activation."""

    activation_params = None  # (pickles from before clamped_swiglu)

    def __init__(self, hidden_size, ffn_hidden_size, eps=1e-5,
                 sequence_parallel=False, return_bias=False,
                 get_rng_state_tracker=None, tp_group=None, tp_size=1,
                 init_method=None, bias=True, normalization="LayerNorm",
                 activation="gelu", activation_params=None,
                 output_layer_init_method=None, fuse_wgrad_accumulation=False,
                 params_dtype=None, return_layernorm_output=False,
                 return_layernorm_output_gathered=False, seq_length=None,
                 micro_batch_size=None, set_parallel_mode=False,
                 zero_centered_gamma=False, device="cuda",
                 ub_overlap_ag=False, name=None, ub_overlap_rs=False,
                 ub_overlap_rs_dgrad=False, ub_bulk_dgrad=False,
                 ub_bulk_wgrad=False, delay_wgrad_compute=False,
                 symmetric_ar_type=None, checkpoint=False):
        super().__init__(params_dtype)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        owner = "LayerNormMLP"
        _args.check_defaults(
            owner,
            return_layernorm_output_gathered=return_layernorm_output_gathered,
            ub_overlap_ag=ub_overlap_ag, ub_overlap_rs=ub_overlap_rs,
            ub_overlap_rs_dgrad=ub_overlap_rs_dgrad,
            ub_bulk_dgrad=ub_bulk_dgrad, ub_bulk_wgrad=ub_bulk_wgrad,
            symmetric_ar_type=symmetric_ar_type)
        self._init_delay_wgrad(delay_wgrad_compute)
        tp = self._init_tensor_parallel(owner, tp_group, tp_size,
                                        sequence_parallel,
                                        get_rng_state_tracker)
        _args.check_set_parallel_mode(owner, set_parallel_mode, tp, "fc1",
                                      "fc2")
        self.set_parallel_mode = bool(set_parallel_mode)
        self.checkpoint = bool(checkpoint)
        if activation not in ACTIVATIONS:
            raise ValueError(f"{owner}: activation {activation!r} is not "
                             f"supported by tejit; choose one of "
                             f"{', '.join(ACTIVATIONS)}")
        self.activation_params = _args.activation_params_of(
            owner, activation, activation_params)
        self.hidden_size = int(hidden_size)
        self.ffn_hidden_size = int(ffn_hidden_size)
        self.eps = float(eps)
        self.normalization = _args.check_normalization(owner, normalization)
        self.zero_centered_gamma = bool(zero_centered_gamma)
        self.activation = activation
        self.use_bias = bool(bias)
        self.return_bias = bool(return_bias)
        self.return_layernorm_output = bool(return_layernorm_output)
        _args.check_divisible(owner, tp, ffn_hidden_size=self.ffn_hidden_size)
        # This rank's FFN features (TE's name).
        self.size_per_partition = self.ffn_hidden_size // tp
        fc1_rows = self.size_per_partition * (2 if activation in GATED else 1)
        self._add_norm_parameters("layer_norm_weight", "layer_norm_bias",
                                  self.hidden_size, self.normalization,
                                  self.zero_centered_gamma, device)
        self._add_linear_parameters("fc1_weight", "fc1_bias", fc1_rows,
                                    self.hidden_size, init_method, device)
        self._add_linear_parameters("fc2_weight", "fc2_bias",
                                    self.hidden_size, self.size_per_partition,
                                    output_layer_init_method, device,
                                    returned=True)
        self.reset_parameters()

    def _layer_spec(self):
        layer = {"type": "LayerNormMLP", "hidden_size": self.hidden_size,
                 "ffn_hidden_size": self.ffn_hidden_size,
                 "activation": self.activation, "bias": self.use_bias,
                 "normalization": self.normalization, "eps": self.eps,
                 "zero_centered_gamma": self.zero_centered_gamma,
                 "return_layernorm_output": self.return_layernorm_output}
        with_activation_params(layer, self.activation_params)
        return _args.tensor_parallel_spec(layer, self.tp_size, None,
                                          self.sequence_parallel)

    def _sequence_parallel_parameters(self):
        # TE's LayerNormMLP.reset_parameters: the norm's parameters, and
        # fc2_bias with set_parallel_mode (fc2 row-parallel).
        names = ["layer_norm_weight", "layer_norm_bias"]
        if self.set_parallel_mode:
            names.append("fc2_bias")
        return names

    def _input_features(self):
        return self.hidden_size

    def forward(self, inp, is_first_microbatch=None):
        """`is_first_microbatch`: TE's FP8 weight caching, as Linear's."""
        # Not again inside a checkpointed function (the caller's, or this
        # one's recomputation).
        if (self.checkpoint and torch.is_grad_enabled()
                and _checkpointing.recording() is None):
            outputs = _checkpointing.checkpoint(self._program_outputs, inp,
                                                is_first_microbatch)
        else:
            outputs = self._program_outputs(inp, is_first_microbatch)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        out = outputs[0]
        result = [out]
        if self.return_bias:
            result.append(self._bias_output("fc2_bias", out))
        if self.return_layernorm_output:
            result.append(outputs[1])
        return tuple(result) if len(result) > 1 else out

    def _program_outputs(self, inp, is_first_microbatch):
        """The program's output, and ln_output when returned."""
        outputs = self._run(inp, is_first_microbatch)
        if self.return_layernorm_output:
            return outputs["output"], outputs["ln_output"]
        return outputs["output"]

    def extra_repr(self):
        return (f"hidden_size={self.hidden_size}, "
                f"ffn_hidden_size={self.ffn_hidden_size}, "
                f"activation={self.activation}, "
                f"normalization={self.normalization}, bias={self.use_bias}")
