"""te.Linear: y = x W^T + b, W [out_features, in_features]."""

from . import _args
from ._split_params import SplitParameters
from .base import TransformerEngineBaseModule


class Linear(SplitParameters, TransformerEngineBaseModule):
    """Transformer Engine's Linear, compiled by tejit. Parameters `weight`
    [out_features, in_features] and `bias` [out_features] (absent with
    bias=False), initialized as TE's (init_method, default N(0, 0.023^2);
    zeros). forward(inp) takes [..., in_features] and returns [...,
    out_features], or (output, bias) with return_bias=True (the bias not
    added).

    Tensor parallelism (TE's): tp_group (or tp_size, the group given later
    by set_tensor_parallel_group) with parallel_mode "column" (weight
    [out/tp, in], bias [out/tp], output [..., out/tp]; the input gradient
    summed over the ranks) or "row" (weight [out, in/tp], bias [out] added
    once after the sum; input [..., in/tp], output [..., out] summed over
    the ranks). As in TE, in_features / out_features are then this rank's;
    parallel_mode None splits nothing and communicates nothing. Weights
    are initialized under get_rng_state_tracker().fork(rng_tracker_name)
    when a tracker is given. sequence_parallel=True (ignored at tp_size 1,
    as in TE): "column" takes this rank's slice of the input's dim 0 ([s/tp,
    b, in]) and all-gathers it (output [s, b, out/tp]); "row" reduce-
    scatters its output along dim 0 (input [s, b, in/tp], output [s/tp, b,
    out]; dim 0 must divide by tp_size) and adds the bias to its slice, so
    the bias's gradient is this rank's partial sum: the row bias carries
    TE's `sequence_parallel` attribute. Other distributed arguments only at
    their defaults; ub_name and name are accepted and unused.

    parameters_split (TE's): the weight and bias registered as several
    parameters, row blocks named `<name>_weight` / `<name>_bias`
    (_split_params.py).
    """

    def __init__(self, in_features, out_features, sequence_parallel=False,
                 fuse_wgrad_accumulation=False, tp_group=None, tp_size=1,
                 get_rng_state_tracker=None, rng_tracker_name=None,
                 init_method=None, bias=True, return_bias=False,
                 params_dtype=None, parallel_mode=None,
                 parameters_split=None, device="cuda", ub_overlap_ag=False,
                 ub_overlap_rs=False, ub_overlap_rs_dgrad=False,
                 ub_bulk_dgrad=False, ub_bulk_wgrad=False, ub_name=None,
                 delay_wgrad_compute=False, symmetric_ar_type=None,
                 save_original_input=False, name=None):
        super().__init__(params_dtype)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        owner = "Linear"
        _args.check_defaults(
            owner, ub_overlap_ag=ub_overlap_ag,
            ub_overlap_rs=ub_overlap_rs,
            ub_overlap_rs_dgrad=ub_overlap_rs_dgrad,
            ub_bulk_dgrad=ub_bulk_dgrad, ub_bulk_wgrad=ub_bulk_wgrad,
            symmetric_ar_type=symmetric_ar_type,
            save_original_input=save_original_input)
        self._init_delay_wgrad(delay_wgrad_compute)
        self.parallel_mode = _args.check_parallel_mode(owner, parallel_mode)
        tp = self._init_tensor_parallel(
            owner, tp_group, tp_size, sequence_parallel,
            get_rng_state_tracker, rng_tracker_name)
        # The global sizes (the spec's); in_features / out_features are
        # this rank's, as in TE.
        self._global_features = (int(in_features), int(out_features))
        self.in_features, self.out_features = self._global_features
        if self.parallel_mode == "column":
            _args.check_divisible(owner, tp, out_features=self.out_features)
            self.out_features //= tp
        elif self.parallel_mode == "row":
            _args.check_divisible(owner, tp, in_features=self.in_features)
            self.in_features //= tp
        self.use_bias = bool(bias)
        self.return_bias = bool(return_bias)
        self._init_split(owner, parameters_split, self._global_features[1],
                         init_method, device)
        self.reset_parameters()

    def _tp_communicates(self):
        return self.tp_size > 1 and self.parallel_mode is not None

    def _layer_spec(self):
        in_features, out_features = self._global_features
        layer = {"type": "Linear", "in_features": in_features,
                 "out_features": out_features, "bias": self.use_bias}
        if not self._tp_communicates():
            return layer  # parallel_mode None: a whole layer per rank
        return _args.tensor_parallel_spec(layer, self.tp_size,
                                          self.parallel_mode,
                                          self.sequence_parallel)

    def _sequence_parallel_input_is_slice(self):
        return self.parallel_mode == "column"

    def _sequence_parallel_parameters(self):
        # TE's Linear.reset_parameters: a row-parallel bias gets
        # `sequence_parallel` (a column-parallel one the tensor-parallel
        # attributes instead; parallel_mode None: nothing).
        return ("bias",) if self.parallel_mode == "row" else ()

    def _input_features(self):
        return self.in_features

    def forward(self, inp, is_first_microbatch=None, fp8_output=False,
                fp8_grad=False):
        """`is_first_microbatch` is TE's FP8 weight caching, under FP8:
        - training (gradient accumulation, pipeline micro-batches): None
          quantizes the weights in every forward; True quantizes them into
          memory the module's program keeps (2 bytes per weight element,
          allocated on first use); False reuses what the latest forward
          with True left there, with the scale it was quantized with, and
          records no weight amax (TE's rule). The backward of every forward
          with True or False reads the latest quantized weights.
        - inference forwards (no autograd), whose programs always keep the
          quantized weights: None reuses them while the parameters are
          unchanged (same tensors, same torch version counters), outside
          CUDA-graph capture; True quantizes again; False reuses them, also
          inside CUDA-graph capture (the graph's replays read whatever the
          latest quantizing forward left, so a graph captured once keeps up
          with weights refreshed by an eager forward with True).
        With False the caller promises the weights have not changed since
        the forward that quantized them.
        """
        _args.check_forward("Linear", fp8_output, fp8_grad)
        out = self._run(inp, is_first_microbatch)["output"]
        if self.return_bias:
            return out, self._bias_output("bias", out)
        return out

    def extra_repr(self):
        return (f"in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.use_bias}")
