"""GroupedLinear under fp8_model_init (docs/fp8-weights.md): each expert's
`weight{i}` is a Float8Tensor of its own, with its own scale_inv and
scaling state, as in Transformer Engine; the program takes them as one
FP8 `weight` [G, out, in] with `weight.scale_inv` [G] and, for training,
`weight.transpose` [G, in, out].

So that a call copies nothing, the experts' FP8 data, scale_invs and
transposes each lie back to back in one buffer (the module packs them at
construction, after .to()/deepcopy/unpickling, and whenever a call finds
them apart, e.g. after load_state_dict(assign=True)); the program reads
views of those buffers. Each Float8Tensor still owns its slice:
requantizations (optimizer steps, copy_, load_state_dict) write into it in
place.
"""
import torch

from ..float8_tensor import Float8Tensor
from . import _fp8_weights, _main_grad
from ._groups import adjacent

_FIELDS = ("data", "scale_inv", "transpose")


def _pack_field(stores, field):
    """Moves `field` of each store into one new buffer, back to back in
    store order, unless it lies so already (or some store has none)."""
    values = [getattr(store, field) for store in stores]
    if any(value is None for value in values) or adjacent(values):
        return
    dtype = values[0].dtype
    with torch.no_grad():
        # As bytes: stack takes no FP8 dtype on every torch version.
        buffer = torch.stack([value.view(torch.uint8) for value in values]
                             if dtype.itemsize == 1 else values)
    for store, view in zip(stores, buffer.view(dtype).unbind(0)):
        setattr(store, field, view)


def pack(weights):
    """Packs the FP8 data, scale_invs and (once all are made) transposes of
    Float8Tensor `weights` (one expert each, equal shapes, one device),
    each into one buffer in expert order."""
    stores = [weight._store for weight in weights]
    if stores[0].data.device.type == "meta":
        return
    for field in _FIELDS:
        _pack_field(stores, field)


def stacked_transposes(weights):
    """The experts' kept transposes as one [G, in, out] view (made on first
    use and packed)."""
    for weight in weights:
        weight.transpose_data()
    pack(weights)
    return _main_grad._stacked_view(weights[0]._transpose, len(weights))


class StackedFloat8(torch.autograd.Function):
    """StackedFloat8.apply(main_grad_parameters, *weights): Float8Tensor
    experts as the one Float8Tensor [G, out, in] the program takes: views
    of their packed data and scale_invs ([G]), its transpose the packed
    transposes. The gradient's slice g goes to expert g; under
    fuse_wgrad_accumulation (`main_grad_parameters` the weights, else
    None) by _main_grad.placeholder_grads' rule."""

    @staticmethod
    def forward(ctx, main_grad_parameters, *weights):
        ctx.set_materialize_grads(False)
        ctx.parameters = main_grad_parameters
        pack(weights)
        first, count = weights[0], len(weights)
        # Each scale_inv is [1]: their stack [G, 1] is the program's [G].
        scale_invs = _main_grad._stacked_view(first._scale_inv, count)
        result = Float8Tensor(_main_grad._stacked_view(first._data, count),
                              scale_invs.view(count), first._scaling,
                              first.dtype)
        result._store.transpose_from = lambda: stacked_transposes(weights)
        return result

    @staticmethod
    def backward(ctx, grad):
        count = len(ctx.needs_input_grad) - 1
        if grad is None:
            return (None,) * (count + 1)
        parts = grad.unbind(0)
        if ctx.parameters is not None:
            parts = _main_grad.placeholder_grads(parts, ctx.parameters,
                                                 ctx.needs_input_grad[1:])
        return (None, *parts)


def stacked(weights, names, dtype, fp8, fuse_wgrad_accumulation):
    """The program's `weight` [G, out, in] from Float8Tensor experts
    `weights` (`names`, in errors): in FP8 for an FP8 program (`fp8`),
    else their dequantized values in `dtype` (no FP8 autocast); both
    differentiable, with fuse_wgrad_accumulation's gradient rule when set
    (_main_grad.StackedParameters')."""
    for weight, name in zip(weights, names):
        if not isinstance(weight, Float8Tensor):
            _fp8_weights.argument(weight, name, dtype, fp8)  # raises
    parameters = tuple(weights) if fuse_wgrad_accumulation else None
    if fp8:
        return StackedFloat8.apply(parameters, *weights)
    values = [_fp8_weights.Dequantized.apply(weight, dtype)
              for weight in weights]
    if parameters is None:
        return torch.stack(values)
    return _main_grad.StackedParameters.apply(parameters,
                                              lambda parts: False, *values)
