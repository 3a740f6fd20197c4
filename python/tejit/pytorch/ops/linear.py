"""TE's fusible Linear (`transformer_engine.pytorch.ops.Linear`): a
BasicLinear and, with bias=True, a Bias, as one op (row tensor
parallelism: a local BasicLinear, a Bias and the reduction, as TE's)."""
import torch

from . import _parallel
from ._collectives import AllReduce, ReduceScatter, sum_over_ranks
from .basic import Bias, BasicLinear, _group_size, _positive
from .op import FusedOperation, group_attribute


class Linear(FusedOperation):
    """y = x W^T + b: a drop-in for torch.nn.Linear (TE's). `weight` and
    `bias` are its basic ops' parameters, registered on it too; as in TE
    its state_dict holds them once, as `basic_ops.0.weight` and
    `basic_ops.1.bias`, and load_state_dict takes either form. Keyword
    arguments as BasicLinear's.

    Tensor parallelism (TE's ops.Linear): "column" is a column-parallel
    BasicLinear and a Bias of this rank's out/tp features; "row" is, as in
    TE, a BasicLinear of this rank's in/tp input features, a Bias of all
    out features, then the sum over the ranks (AllReduce; with
    sequence_parallel ReduceScatter along dim 0): each rank's bias is
    added before the sum, so the output carries the sum of the ranks'
    biases, and each rank's bias gradient is the whole output gradient's
    sum. The chain's program runs it as the compiler's row-parallel Linear
    layer, whose bias is added once after the sum: its bias argument is
    the ranks' biases summed (a small all-reduce before the program; its
    gradient summed back under sequence parallelism, where the program's
    is this rank's part)."""

    tensor_parallel_group = group_attribute("tensor_parallel_group")

    def __init__(self, in_features, out_features, *, bias=True, device=None,
                 dtype=None, tensor_parallel_mode=None,
                 tensor_parallel_group=None, sequence_parallel=False,
                 rng_state_tracker_function=None,
                 accumulate_into_main_grad=False):
        _positive("Linear", in_features=in_features,
                  out_features=out_features)
        mode, group, size, sequence, local_in, _ = _parallel.canonical(
            "Linear", tensor_parallel_mode, tensor_parallel_group,
            _group_size, sequence_parallel, int(in_features),
            int(out_features))
        common = dict(device=device, dtype=dtype,
                      rng_state_tracker_function=rng_state_tracker_function,
                      accumulate_into_main_grad=accumulate_into_main_grad)
        if mode == "row":
            ops = [BasicLinear(local_in, out_features, **common)]
            if bias:
                # TE's: [out] on each rank (size out * tp, split tp ways).
                ops.append(Bias(out_features * size, device=device,
                                dtype=dtype, tensor_parallel=True,
                                tensor_parallel_group=group))
            ops.append(ReduceScatter(group) if sequence else AllReduce(group))
        else:
            ops = [BasicLinear(in_features, out_features,
                               tensor_parallel_mode=mode,
                               tensor_parallel_group=group,
                               sequence_parallel=sequence, **common)]
            if bias:
                ops.append(Bias(out_features, device=device, dtype=dtype,
                                tensor_parallel=mode is not None,
                                tensor_parallel_group=group))
        super().__init__(ops)
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.tensor_parallel_mode = mode
        self.tensor_parallel_group = group
        self.tensor_parallel_size = size
        self.sequence_parallel = sequence
        self._bias_idx = 1 if bias else None
        torch.nn.Module.register_parameter(self, "weight", ops[0].weight)
        torch.nn.Module.register_parameter(
            self, "bias", ops[1].bias if bias else None)

    def _tensor_parallel_groups(self):
        if self.tensor_parallel_mode == "row":
            return [(self.tensor_parallel_group, self.tensor_parallel_size)]
        return super()._tensor_parallel_groups()

    def _layers(self, name, features):
        if self.tensor_parallel_mode != "row":
            return super()._layers(name, features)
        # One row-parallel Linear layer, its parameters `<name>.weight` and
        # `<name>.bias` (this op's: _argument).
        return [_parallel.linear_layer(
            name, self.in_features, self.out_features,
            self._bias_idx is not None, self.tensor_parallel_size, "row",
            self.sequence_parallel,
            self.basic_ops[0]._accumulate_into_main_grad)
        ], self.out_features

    def _argument(self, name, dtype, fp8=False):
        """The tensor the chain's program takes for this op's parameter
        `name` (the fuser's _argument): the parameter in `dtype`; a
        row-parallel bias summed over the ranks (the class says why)."""
        value = self.get_parameter(name).to(dtype).contiguous()
        if name == "bias" and self.tensor_parallel_mode == "row":
            value = sum_over_ranks(value, self.tensor_parallel_group,
                                   reduce_backward=self.sequence_parallel)
        return value

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
