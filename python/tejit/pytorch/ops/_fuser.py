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
"""
import math

import torch

from ..module.base import TransformerEngineBaseModule


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
        # (input features, layers, extra inputs, extra outputs, output
        # features): _chain_plan's, for the latest input width.
        self._plan = None

    def _chain_plan(self, features):
        """(spec layers, [(extra input name, features)], [extra output
        names], output features) for an input of `features` features."""
        if self._plan is None or self._plan[0] != features:
            layers, extra_inputs, extra_outputs = [], [], []
            width = features
            for key, op in self._modules.items():
                if op.input_features not in (None, width):
                    raise ValueError(
                        f"tejit.pytorch.ops: op '{key}' "
                        f"({type(op).__name__}) takes {op.input_features} "
                        f"features, but its input has {width}")
                own, out = op._layers(key, width)
                for layer in own:
                    if layer["type"] == "AddExtraInput":
                        extra_inputs.append((f"{layer['name']}.extra_input",
                                             width))
                    elif layer["type"] == "MakeExtraOutput":
                        extra_outputs.append(
                            f"{layer['name']}.extra_output")
                layers += own
                width = out
            self._plan = (features, layers, extra_inputs, extra_outputs,
                          width)
        return self._plan[1:]

    def _input_features(self):
        return next(iter(self._modules.values())).input_features

    def _layer_spec(self):
        return [dict(layer) for layer in self._chain_plan(
            self._features)[0]]

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
        self._features = features
        _, extra_specs, extra_outputs, _ = self._chain_plan(features)
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
        activations = {"input": inp.to(dtype).contiguous().view(
            tokens, 1, features)}
        for (input_name, width), extra in zip(extra_specs, extra_inputs):
            if not isinstance(extra, torch.Tensor) or \
                    tuple(extra.shape) != lead + (width,):
                shape = (tuple(extra.shape) if isinstance(extra, torch.Tensor)
                         else type(extra).__name__)
                raise ValueError(
                    f"{name}: extra input '{input_name}' must have the shape "
                    f"of the tensor it is added to, {lead + (width,)}; got "
                    f"{shape}")
            activations[input_name] = extra.to(dtype).contiguous().view(
                tokens, 1, width)
        # A chain that starts with an op of any width (an activation)
        # compiles per width too.
        outputs = self._run_program(
            activations, dtype, (tokens, features),
            {"seq_length": tokens, "batch_size": 1}, inp.shape)
        out = outputs["output"]
        extras = [outputs[key] for key in extra_outputs]
        return (out.view(*lead, out.shape[-1]),
                [extra.view(*lead, extra.shape[-1]) for extra in extras])

    def __call__(self, inp, *extra_inputs):
        out, extras = super().__call__(inp, *extra_inputs)
        return (out, *extras) if extras else out
