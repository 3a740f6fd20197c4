"""te.LayerNormLinear: a LayerNorm or RMSNorm, then a Linear, in one
program (the norm kernel writes the FP8 GEMM operand directly)."""

from . import _args
from ._split_params import SplitParameters
from .base import TransformerEngineBaseModule


class LayerNormLinear(SplitParameters, TransformerEngineBaseModule):
    """Transformer Engine's LayerNormLinear, compiled by tejit. Parameters
    `layer_norm_weight` and `layer_norm_bias` [in_features] (no bias with
    normalization="RMSNorm"), `weight` [out_features, in_features], `bias`
    [out_features]. forward(inp) returns the output, plus the bias with
    return_bias (not added) and then the norm's output with
    return_layernorm_output, as TE's.

    Tensor parallelism (TE's): tp_group (or tp_size and
    set_tensor_parallel_group later) with parallel_mode="column": the
    norm's parameters [in_features] whole on every rank, weight [out/tp,
    in], bias [out/tp], output [..., out/tp]; the input gradient is summed
    over the ranks before the norm's backward. out_features is then this
    rank's, as in TE. parallel_mode="row" is refused with tp_size > 1;
    None splits nothing. Weights are initialized under
    get_rng_state_tracker().fork() when a tracker is given.
    sequence_parallel=True (ignored at tp_size 1, as in TE): the input is
    this rank's slice of dim 0 ([s/tp, b, in]), normalized there and
    all-gathered before the GEMM (output [s, b, out/tp]; ln_output [s/tp,
    b, in]); the norm's gradients are then this rank's partial sums, and
    its parameters carry TE's `sequence_parallel` attribute. Other
    distributed arguments only at their defaults; ub_name and name are
    unused. parameters_split (TE's): the GEMM's weight and bias registered
    as several parameters, row blocks named `<name>_weight` /
    `<name>_bias` (_split_params.py)."""

    def __init__(self, in_features, out_features, eps=1e-5,
                 sequence_parallel=False, fuse_wgrad_accumulation=False,
                 tp_group=None, tp_size=1, get_rng_state_tracker=None,
                 init_method=None, bias=True, normalization="LayerNorm",
                 return_bias=False, params_dtype=None, parallel_mode=None,
                 return_layernorm_output=False,
                 return_layernorm_output_gathered=False,
                 parameters_split=None, zero_centered_gamma=False,
                 device="cuda", ub_overlap_ag=False, ub_overlap_rs=False,
                 ub_overlap_rs_dgrad=False, ub_bulk_wgrad=False,
                 ub_bulk_dgrad=False, ub_name=None, delay_wgrad_compute=False,
                 symmetric_ar_type=None, name=None):
        super().__init__(params_dtype)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        owner = "LayerNormLinear"
        _args.check_defaults(
            owner,
            return_layernorm_output_gathered=return_layernorm_output_gathered,
            ub_overlap_ag=ub_overlap_ag,
            ub_overlap_rs=ub_overlap_rs,
            ub_overlap_rs_dgrad=ub_overlap_rs_dgrad,
            ub_bulk_wgrad=ub_bulk_wgrad, ub_bulk_dgrad=ub_bulk_dgrad,
            symmetric_ar_type=symmetric_ar_type)
        self._init_delay_wgrad(delay_wgrad_compute)
        self.parallel_mode = _args.check_parallel_mode(owner, parallel_mode)
        tp = self._init_tensor_parallel(owner, tp_group, tp_size,
                                        sequence_parallel,
                                        get_rng_state_tracker)
        _args.check_row_parallel(owner, self.parallel_mode, tp)
        self.in_features = int(in_features)
        # The global output size (the spec's); out_features is this
        # rank's, as in TE.
        self._global_out_features = int(out_features)
        self.out_features = self._global_out_features
        if self.parallel_mode == "column":
            _args.check_divisible(owner, tp, out_features=self.out_features)
            self.out_features //= tp
        self.eps = float(eps)
        self.normalization = _args.check_normalization(owner, normalization)
        self.zero_centered_gamma = bool(zero_centered_gamma)
        self.use_bias = bool(bias)
        self.return_bias = bool(return_bias)
        self.return_layernorm_output = bool(return_layernorm_output)
        self._add_norm_parameters("layer_norm_weight", "layer_norm_bias",
                                  self.in_features, self.normalization,
                                  self.zero_centered_gamma, device)
        self._init_split(owner, parameters_split, self._global_out_features,
                         init_method, device)
        self.reset_parameters()

    def _tp_communicates(self):
        # "row" is refused with tp_size > 1.
        return self.tp_size > 1 and self.parallel_mode == "column"

    def _layer_spec(self):
        layer = {"type": "LayerNormLinear", "in_features": self.in_features,
                 "out_features": self._global_out_features,
                 "bias": self.use_bias, "normalization": self.normalization,
                 "eps": self.eps,
                 "zero_centered_gamma": self.zero_centered_gamma,
                 "return_layernorm_output": self.return_layernorm_output}
        if not self._tp_communicates():
            return layer  # parallel_mode None: a whole layer per rank
        return _args.tensor_parallel_spec(layer, self.tp_size, "column",
                                          self.sequence_parallel)

    def _sequence_parallel_parameters(self):
        # TE's LayerNormLinear.reset_parameters: the norm's parameters, and
        # a row-parallel bias (refused with tp_size > 1 here; at tp_size 1
        # it gets False, as in TE).
        names = ["layer_norm_weight", "layer_norm_bias"]
        if self.parallel_mode == "row":
            names.append("bias")
        return names

    def _input_features(self):
        return self.in_features

    def forward(self, inp, is_first_microbatch=None, fp8_output=False,
                fp8_grad=False):
        """`is_first_microbatch`: TE's FP8 weight caching, as Linear's."""
        _args.check_forward("LayerNormLinear", fp8_output, fp8_grad)
        outputs = self._run(inp, is_first_microbatch)
        out = outputs["output"]
        result = [out]
        if self.return_bias:
            result.append(self._bias_output("bias", out))
        if self.return_layernorm_output:
            result.append(outputs["ln_output"])
        return tuple(result) if len(result) > 1 else out

    def extra_repr(self):
        return (f"in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.use_bias}, "
                f"normalization={self.normalization}")
