"""One chain of compiled ops as one tejit program (TE's OperationFuser).

The chain's spec is the ops' spec layers in order (docs/spec-format.md,
"Fusible ops"), each named by the op's key (its index in the Sequential),
so the program's parameter inputs are the ops' own parameters by their
state_dict names, and extra inputs / outputs are `<key>.extra_input` /
`<key>.extra_output`. The compiler decomposes, differentiates and fuses
the chain as it does a layer: a norm, Linear, activation, Linear chain
compiles to the kernels of te.LayerNormMLP. Everything a module does
around its program (the JIT cache per shape, dtype, recipe and mode, FP8
state, autograd, main_grad accumulation, CUDA graphs) comes from
TransformerEngineBaseModule.

Tensor parallelism (TE's BasicLinear tensor_parallel_mode, ops.Linear's):
the ops' Linear layers carry tp_size, parallel_mode and sequence_parallel
(_parallel.py), so the chain stays one program, which communicates over
the one process group its ops share (a chain of ops with different groups
is refused). With sequence parallelism the chain's input, output and
extra tensors hold this rank's slice of dim 0 where the chain's layers
say so (_parallel.row_states) and the spec's token count is global.
"""
import math

import torch

from ..module import _args
from ..module.base import GroupRef, TransformerEngineBaseModule
from . import _parallel
from ._collectives import _group


class OperationFuser(TransformerEngineBaseModule):
    """Runs `ops` ({key: op}, compiled ops in order) as one program. Holds
    the ops as its children (they are the Sequential's too; the fuser is
    not registered there, so the state_dict names stay the Sequential's)."""

    def __init__(self, ops):
        first = next(iter(p for op in ops.values() for p in op.parameters()),
                     None)
        super().__init__(first.dtype if first is not None
                         else torch.get_default_dtype())
        # The ops carry their own parameters and initialization; FP8
        # primary weights are refused where the ops are built.
        self._fp8_init = None
        self.primary_weights_in_fp8 = False
        for key, op in ops.items():
            self.add_module(key, op)
        self._uses_fp8 = any(op.has_gemm for op in ops.values())
        self.fuse_wgrad_accumulation = any(
            getattr(basic, "_accumulate_into_main_grad", False)
            for op in ops.values() for basic in op.basic_ops)
        self.num_extra_inputs = sum(op.num_extra_inputs
                                    for op in ops.values())
        self.num_extra_outputs = sum(op.num_extra_outputs
                                     for op in ops.values())
        # Tensor parallelism: the group of the ops' communicating layers.
        group, self.tp_size = _parallel.chain_group(
            [(f"op '{key}' ({type(op).__name__})", _group(group), size)
             for key, op in ops.items()
             for group, size in op._tensor_parallel_groups()],
            lambda first, second: first is second)
        self._tp_group = GroupRef(group)
        # (input features, layers, extra inputs, extra outputs, output
        # features, the input's sequence-parallel state): _chain_plan's,
        # for the latest input width.
        self._plan = None

    def _chain_plan(self, features):
        """(spec layers, [(extra input name, features, dim-0 state)],
        [extra output names], output features, the input's dim-0 state)
        for an input of `features` features; a dim-0 state is
        _parallel.row_states' (None without sequence parallelism)."""
        if self._plan is None or self._plan[0] != features:
            layers, width = [], features
            for key, op in self._modules.items():
                if op.input_features not in (None, width):
                    raise ValueError(
                        f"tejit.pytorch.ops: op '{key}' "
                        f"({type(op).__name__}) takes {op.input_features} "
                        f"features, but its input has {width}")
                own, width = op._layers(key, width)
                layers += own
            input_state, reads, _ = _parallel.row_states(layers)
            extra_inputs, extra_outputs = [], []
            for layer, state in zip(layers, reads):
                if layer["type"] == "AddExtraInput":
                    extra_inputs.append((f"{layer['name']}.extra_input",
                                         layer["features"], state))
                elif layer["type"] == "MakeExtraOutput":
                    extra_outputs.append(f"{layer['name']}.extra_output")
            self._plan = (features, layers, extra_inputs, extra_outputs,
                          width, input_state)
        return self._plan[1:]

    def _input_features(self):
        return next(iter(self._modules.values())).input_features

    def _layer_spec(self):
        # _run_program asks for it only to compile, after forward has made
        # the plan for this call's input width.
        return [dict(layer) for layer in self._plan[1]]

    def forward(self, inp, *extra_inputs):
        """(output, [extra outputs]) of the chain on `inp` [..., features]
        and its extra inputs (each shaped like the tensor it is added
        to)."""
        name = "tejit.pytorch.ops"
        if not isinstance(inp, torch.Tensor) or inp.dim() == 0:
            raise TypeError(f"{name}: expected an input tensor [..., "
                            f"features], got {inp!r:.80}")
        features = inp.shape[-1]
        expected = self._input_features()
        if expected is not None and features != expected:
            raise ValueError(f"{name}: the first op takes [..., {expected}] "
                             f"inputs, got {tuple(inp.shape)}")
        if not inp.is_cuda:
            raise ValueError(f"{name}: the input must be a CUDA tensor, got "
                             f"one on {inp.device}")
        _, extra_specs, extra_outputs, _, input_state = self._chain_plan(
            features)
        if len(extra_inputs) != len(extra_specs):
            raise ValueError(f"{name}: the ops take {len(extra_specs)} extra "
                             f"input(s) (AddExtraInput), got "
                             f"{len(extra_inputs)}")
        dtype = self._checked_dtype(inp)
        lead = tuple(inp.shape[:-1])
        tokens = math.prod(lead)
        if tokens == 0:
            raise ValueError(f"{name}: the input {tuple(inp.shape)} has no "
                             f"tokens")
        # With sequence parallelism the spec's token count is global (the
        # input holds 1/tp of dim 0 when the chain gathers it first).
        spec_tokens = tokens if input_state is None else \
            _args.sequence_parallel_tokens(name, lead, self.tp_size,
                                           input_state)
        activations = {"input": inp.to(dtype).contiguous().view(
            tokens, 1, features)}
        for (input_name, width, state), extra in zip(extra_specs,
                                                     extra_inputs):
            shape = lead and (_parallel.rows(lead[0], input_state, state,
                                             self.tp_size),) + lead[1:]
            if not isinstance(extra, torch.Tensor) or \
                    tuple(extra.shape) != shape + (width,):
                got = (tuple(extra.shape) if isinstance(extra, torch.Tensor)
                       else type(extra).__name__)
                raise ValueError(
                    f"{name}: extra input '{input_name}' must have the shape "
                    f"of the tensor it is added to, {shape + (width,)}; got "
                    f"{got}")
            activations[input_name] = extra.to(dtype).contiguous().view(
                -1, 1, width)
        # A chain that starts with an op of any width (an activation)
        # compiles per width too.
        outputs = self._run_program(
            activations, dtype, (tokens, features),
            {"seq_length": spec_tokens, "batch_size": 1}, inp.shape)
        # Under sequence parallelism outputs hold tp times, 1/tp of, or as
        # many rows as the input's dim 0.
        rows = lead if input_state is None else (-1,) + lead[1:]
        out = outputs["output"]
        extras = [outputs[key] for key in extra_outputs]
        return (out.view(*rows, out.shape[-1]),
                [extra.view(*rows, extra.shape[-1]) for extra in extras])

    def __call__(self, inp, *extra_inputs):
        out, extras = super().__call__(inp, *extra_inputs)
        return (out, *extras) if extras else out
