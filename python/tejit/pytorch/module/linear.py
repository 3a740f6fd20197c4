"""te.Linear: y = x W^T + b, W [out_features, in_features]."""

from . import _args
from .base import TransformerEngineBaseModule


class Linear(TransformerEngineBaseModule):
    """Transformer Engine's Linear, compiled by tejit. Parameters `weight`
    [out_features, in_features] and `bias` [out_features] (absent with
    bias=False), initialized as TE's (init_method, default N(0, 0.023^2);
    zeros). forward(inp) takes [..., in_features] and returns [...,
    out_features], or (output, bias) with return_bias=True (the bias not
    added). Distributed arguments are accepted only at their defaults;
    get_rng_state_tracker, rng_tracker_name, ub_name and name are accepted
    and unused (they only matter with tensor parallelism or for debugging).
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
        _args.check_defaults(
            "Linear", sequence_parallel=sequence_parallel,
            tp_group=tp_group, tp_size=tp_size,
            parameters_split=parameters_split, ub_overlap_ag=ub_overlap_ag,
            ub_overlap_rs=ub_overlap_rs,
            ub_overlap_rs_dgrad=ub_overlap_rs_dgrad,
            ub_bulk_dgrad=ub_bulk_dgrad, ub_bulk_wgrad=ub_bulk_wgrad,
            delay_wgrad_compute=delay_wgrad_compute,
            symmetric_ar_type=symmetric_ar_type,
            save_original_input=save_original_input)
        _args.check_parallel_mode("Linear", parallel_mode)
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.use_bias = bool(bias)
        self.return_bias = bool(return_bias)
        self._add_linear_parameters("weight", "bias", self.out_features,
                                    self.in_features, init_method, device,
                                    returned=True)
        self.reset_parameters()

    def _layer_spec(self):
        return {"type": "Linear", "in_features": self.in_features,
                "out_features": self.out_features, "bias": self.use_bias}

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
