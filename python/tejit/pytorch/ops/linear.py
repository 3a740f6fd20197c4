"""TE's fusible Linear (`transformer_engine.pytorch.ops.Linear`): a
BasicLinear and, with bias=True, a Bias, as one op."""
import torch

from .basic import Bias, BasicLinear
from .op import FusedOperation


class Linear(FusedOperation):
    """y = x W^T + b: a drop-in for torch.nn.Linear (TE's). `weight` and
    `bias` are its basic ops' parameters, registered on it too; as in TE
    its state_dict holds them once, as `basic_ops.0.weight` and
    `basic_ops.1.bias`, and load_state_dict takes either form. Keyword
    arguments as BasicLinear's (tensor parallelism only over one rank)."""

    def __init__(self, in_features, out_features, *, bias=True, device=None,
                 dtype=None, tensor_parallel_mode=None,
                 tensor_parallel_group=None, sequence_parallel=False,
                 rng_state_tracker_function=None,
                 accumulate_into_main_grad=False):
        linear = BasicLinear(
            in_features, out_features, device=device, dtype=dtype,
            tensor_parallel_mode=tensor_parallel_mode,
            tensor_parallel_group=tensor_parallel_group,
            sequence_parallel=sequence_parallel,
            rng_state_tracker_function=rng_state_tracker_function,
            accumulate_into_main_grad=accumulate_into_main_grad)
        ops = [linear]
        if bias:
            ops.append(Bias(out_features, device=device, dtype=dtype))
        super().__init__(ops)
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self._bias_idx = 1 if bias else None
        torch.nn.Module.register_parameter(self, "weight", linear.weight)
        torch.nn.Module.register_parameter(
            self, "bias", ops[1].bias if bias else None)

    def register_parameter(self, name, param):
        """Also hands the parameter to the basic op that owns it (TE's)."""
        if name == "bias" and self._bias_idx is None and param is not None:
            raise ValueError("tejit: ops.Linear was built with bias=False: "
                             "it has no bias to set")
        super().register_parameter(name, param)
        if name == "weight":
            self.basic_ops[0].weight = param
        elif name == "bias" and self._bias_idx is not None:
            self.basic_ops[self._bias_idx].bias = param

    def state_dict(self, *args, prefix="", **kwargs):
        state = super().state_dict(*args, prefix=prefix, **kwargs)
        state.pop(f"{prefix}weight", None)
        state.pop(f"{prefix}bias", None)
        return state

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # TE's checkpoints hold the basic ops' names only.
        basic = {"weight": f"{prefix}basic_ops.0.weight",
                 "bias": (f"{prefix}basic_ops.{self._bias_idx}.bias"
                          if self._bias_idx is not None else None)}
        for name, key in basic.items():
            if key is not None and f"{prefix}{name}" not in state_dict \
                    and key in state_dict:
                state_dict[f"{prefix}{name}"] = state_dict[key]
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
