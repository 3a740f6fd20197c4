"""Transformer Engine's fp8_model_init in the modules: GEMM weights held as
Float8Tensors (float8_tensor.py) and what a program call does with them.

Building: a module (or attention parameter group) built inside an enabled
fp8_model_init keeps its settings (fp8.ModelInit) and marks its GEMM
weights; reset_parameters initializes each as without it, in high
precision, then makes it nn.Parameter(Float8Tensor) quantized under the
settings' recipe (the high-precision tensor is dropped: 1 byte per element
stays); a later reset_parameters initializes a high-precision tensor and
quantizes it into the same Float8Tensor. Parameters on the meta device
wait for a reset on a real device, as the others do.

Calling (module/base.py): under an FP8 recipe a module with FP8 weights
compiles its program with the layer's `fp8_weights: true`, passes each
Float8Tensor itself as the weight input (the program reads its `_data`; it
stays the autograd input, so the weight gradient reaches param.grad in the
nominal dtype) and supplies the program's `<weight>.scale_inv` and, in
training programs, `<weight>.transpose` inputs from it
(companion_inputs). Before a training forward under FP8 (grad enabled)
each FP8 weight's scaling state takes its update (DelayedScaling; TE
updates at the autocast's exit: either way the next requantization scales
from the amaxes of the earlier ones). TE's weight caching
(is_first_microbatch) has nothing to cache then. Without an FP8 recipe the
program takes a dequantized copy (Dequantized), whose gradient goes to the
Float8Tensor as it is.

TE's interleaved fused QKV weight (qkv_weight_interleaved) is reordered
q | k | v per call: the FP8 rows are permuted into a Float8Tensor of the
same scale (ReorderedRows), whose gradient is permuted back. Split Q/K/V
weights (fuse_qkv_params=False, TE's default) share one scale_inv and
scaling state, as the parts of TE's one fused weight do (DelayedScaling
only); a call joins their FP8 rows (JoinedRows).
"""
import torch

from ...common import recipe as _recipe
from ..float8_tensor import DelayedScalingState, Float8Tensor, update_all
from ..float8_tensor import Dequantized  # the weight's value, grad through


def refuse_split_qkv(owner, settings, fuse_qkv_params):
    """Split Q/K/V weights (fuse_qkv_params=False) share one scale, as the
    parts of TE's one fused weight do: that takes DelayedScaling, whose
    scale moves only at updates. Under Float8CurrentScaling each part's
    requantization would set the shared scale from its own amax:
    NotImplementedError."""
    if (settings is not None and not fuse_qkv_params
            and not isinstance(settings.recipe, _recipe.DelayedScaling)):
        raise NotImplementedError(
            f"{owner}(fuse_qkv_params=False) under fp8_model_init with "
            f"{type(settings.recipe).__name__} is not supported by tejit: "
            f"split FP8 Q/K/V weights share one scale, which needs "
            f"DelayedScaling; or use fuse_qkv_params=True")


def refuse_block_scaling(owner, recipe):
    """FP8 weights (per-tensor scaled, made under DelayedScaling or
    Float8CurrentScaling) cannot feed a Float8BlockScaling program, whose
    GEMMs read block-scaled weights: the compiler refuses fp8_weights
    under block scaling, so refuse the call here with a message that says
    what to do (NotImplementedError)."""
    if isinstance(recipe, _recipe.Float8BlockScaling):
        raise NotImplementedError(
            f"{owner} holds FP8 weights (built under fp8_model_init) and "
            f"runs under fp8_autocast with Float8BlockScaling: FP8 primary "
            f"weights are not supported under block scaling by tejit. Build "
            f"the module without fp8_model_init, or run it under "
            f"DelayedScaling or Float8CurrentScaling")


def quantizing_init(owner, name, init, settings, shared=None):
    """`init` for GEMM weight `name` of module `owner` built under
    fp8_model_init (`settings`, an fp8.ModelInit): called on the
    parameter, it initializes a high-precision value and quantizes it:
    into a new nn.Parameter(Float8Tensor) that replaces a plain parameter,
    or in place into a Float8Tensor one. `shared` (a dict): the weights
    made with it share one scale_inv and scaling state (split QKV)."""
    def initialize(parameter):
        preserve = settings.preserve_high_precision_init_val
        if isinstance(parameter, Float8Tensor):
            value = torch.empty(parameter.shape, dtype=parameter.dtype,
                                device=parameter.device)
            init(value)
            parameter.quantize_(value)
            if preserve:
                parameter._keep_high_precision_init_val(value)
            return
        init(parameter)
        weight = Float8Tensor.from_tensor(
            parameter, settings.recipe,
            preserve_high_precision_init_val=preserve, shared=shared)
        setattr(owner, name, torch.nn.Parameter(
            weight, requires_grad=parameter.requires_grad))
    return initialize


def weights_of(module):
    """The module's Float8Tensor parameters (its submodules' too)."""
    return [p for p in module.parameters() if isinstance(p, Float8Tensor)]


def update_scaling(weights, group=None):
    """Each weight's scaling update, before a training forward under FP8
    (on the device; nothing for current scaling); a state that several
    weights share (split QKV) once. `group` (a torch ProcessGroup, or
    None): the autocast's amax reduction group, over which the weights'
    amaxes since the last update are max-reduced first, as TE reduces them
    with the forward's other amaxes (tensor-parallel shards then share
    the whole weight's scale; replicated weights are unchanged)."""
    # One update per scale tensor: an unpickled module's split QKV weights
    # have scaling states of their own over the same tensors.
    states, seen = [], set()
    for weight in weights:
        if id(weight._scaling.scale) not in seen:
            seen.add(id(weight._scaling.scale))
            states.append(weight._scaling)
    delayed = [state for state in states
               if isinstance(state, DelayedScalingState)]
    if group is not None and delayed:
        amaxes = torch.cat([state.amax_history[:1] for state in delayed])
        torch.distributed.all_reduce(
            amaxes, op=torch.distributed.ReduceOp.MAX, group=group)
        for state, amax in zip(delayed, amaxes.split(1)):
            state.amax_history[:1].copy_(amax)
    # One update kernel for all of them (current scaling has none).
    update_all(delayed)


def _reordered_rows(data, to_rows):
    """`to_rows` of FP8 `data`'s rows (done on the bytes), contiguous."""
    return to_rows(data.view(torch.uint8)).contiguous().view(data.dtype)


def _reordered_columns(transpose, to_rows):
    """`to_rows` of the columns of FP8 `transpose` ([in, rows]): the
    transpose of the reordered rows, contiguous."""
    rows = to_rows(transpose.view(torch.uint8).t())
    return rows.t().contiguous().view(transpose.dtype)


class ReorderedRows(torch.autograd.Function):
    """ReorderedRows.apply(weight, to_rows, from_rows): a Float8Tensor
    whose FP8 rows are `to_rows` of the weight's (a row permutation, done
    on the bytes), with the weight's scale_inv; its transpose (a training
    program's input) is the weight's kept transpose with its columns
    reordered alike. The gradient: `from_rows` of the output's."""

    @staticmethod
    def forward(ctx, weight, to_rows, from_rows):
        ctx.from_rows = from_rows
        result = Float8Tensor(_reordered_rows(weight._data, to_rows),
                              weight._scale_inv, weight._scaling,
                              weight.dtype)
        result._store.transpose_from = lambda: _reordered_columns(
            weight.transpose_data(), to_rows)
        return result

    @staticmethod
    def backward(ctx, grad):
        return ctx.from_rows(grad), None, None


def argument(parameter, name, dtype, fp8):
    """The tensor a program takes for GEMM weight `parameter` (`name`, in
    errors) when it is a Float8Tensor or the program takes FP8 (`fp8`): the
    Float8Tensor itself for an FP8 input, else its dequantized value in
    `dtype` (differentiable)."""
    if not isinstance(parameter, Float8Tensor):
        raise RuntimeError(
            f"tejit: '{name}' is a plain {parameter.dtype} tensor, but the "
            f"module's other GEMM weights are Float8Tensors "
            f"(fp8_model_init), and its program takes them all in FP8. "
            f"Load values into the weight (load_state_dict without "
            f"assign=True, copy_) rather than replacing it")
    if fp8:
        return parameter
    return Dequantized.apply(parameter, dtype)


def reordered(parameter, dtype, fp8, to_rows, from_rows):
    """A Float8Tensor weight whose rows the program takes reordered by
    `to_rows` (undone by `from_rows`): the FP8 rows reordered for an FP8
    input, else the dequantized value's (both differentiable)."""
    if fp8:
        return ReorderedRows.apply(parameter, to_rows, from_rows)
    return to_rows(Dequantized.apply(parameter, dtype))


class JoinedRows(torch.autograd.Function):
    """JoinedRows.apply(*parts): split Q/K/V Float8Tensor weights that share
    one scale_inv and scaling state, as the one fused Float8Tensor the
    program takes (their FP8 rows concatenated, a copy of 1 byte per
    element); its transpose joins the parts' kept transposes' columns. The
    gradient splits back into the parts."""

    @staticmethod
    def forward(ctx, *parts):
        ctx.rows = [part.shape[0] for part in parts]
        first = parts[0]
        result = Float8Tensor(
            torch.cat([part._data.view(torch.uint8) for part in parts])
            .view(first._data.dtype), first._scale_inv, first._scaling,
            first.dtype)
        result._store.transpose_from = lambda: torch.cat(
            [part.transpose_data().view(torch.uint8) for part in parts],
            dim=1).view(first._data.dtype)
        return result

    @staticmethod
    def backward(ctx, grad):
        return tuple(grad.split(ctx.rows, dim=0))


def joined(parts, names, dtype, fp8):
    """The fused QKV weight a program takes from split Float8Tensor parts
    (`names`, in errors): their FP8 rows joined for an FP8 input, else the
    dequantized values' (both differentiable)."""
    for part, name in zip(parts, names):
        if not isinstance(part, Float8Tensor):
            argument(part, name, dtype, fp8)  # raises
        if (part._scaling.scale is not parts[0]._scaling.scale
                or part._scale_inv is not parts[0]._scale_inv):
            raise RuntimeError(
                f"tejit: the split QKV weights {', '.join(names)} must "
                f"share one FP8 scale (built together under "
                f"fp8_model_init), but '{name}' has its own: load values "
                f"into them (load_state_dict without assign=True, copy_) "
                f"rather than replacing them")
    if fp8:
        return JoinedRows.apply(*parts)
    return torch.cat([Dequantized.apply(part, dtype) for part in parts])


def companion_inputs(compiled, parameters):
    """{input name: tensor} for the program's `<weight>.scale_inv` and
    `<weight>.transpose` inputs, from the Float8Tensors `parameters` (the
    program's parameter arguments, in its order) hold."""
    inputs = {}
    for name, position, kind in compiled.fp8_weight_companions:
        weight = parameters[position]
        if not isinstance(weight, Float8Tensor):
            raise RuntimeError(
                f"tejit: the program takes FP8 weight "
                f"'{compiled.parameter_names[position]}', but the module "
                f"gave a plain {weight.dtype} tensor")
        inputs[name] = (weight._scale_inv if kind == "scale_inv"
                        else weight.transpose_data())
    return inputs
