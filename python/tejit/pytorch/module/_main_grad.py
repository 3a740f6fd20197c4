"""fuse_wgrad_accumulation: where a program's weight gradient goes.

Under fuse_wgrad_accumulation the backward takes a buffer per GEMM weight
(float32, or bfloat16/float16 when the main_grads are: main_grad_dtype in
the spec) and adds the weight's gradient to it in place (docs/runtime.md).
Usually that buffer is the parameter's own `.main_grad` (Megatron-LM's),
also when torch.autocast hands the program a cast copy of the weight. The
attention modules' QKV weight is made of other parameters' rows: TE's
split `query_weight`/`key_weight`/`value_weight`, or its fused weight
interleaved by key/value group. Then the program gets their main_grads in
its row order (a view when they lie back to back, else a copy that is
written back after the backward). GroupedLinear's stacked weight takes
its experts' main_grads as a view, or else one pointer per expert
(StackedSlot).
"""
import torch

# main_grad dtypes the backward accumulates into, and their spec names.
DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16",
          torch.float16: "fp16"}


def main_grad_dtype(parameters):
    """The one dtype of the .main_grad of `parameters` that are trained
    and have one (float32 when none has: checked_main_grad then says it is
    missing); RuntimeError for mixed or unsupported dtypes."""
    dtypes = {p.main_grad.dtype for p in parameters
              if p.requires_grad and getattr(p, "main_grad", None) is not None}
    if len(dtypes) > 1 or not dtypes <= DTYPES.keys():
        raise RuntimeError(
            f"tejit: fuse_wgrad_accumulation needs the main_grads of one "
            f"module to share one dtype of float32, bfloat16 or float16; "
            f"got {sorted(str(d) for d in dtypes)}")
    return dtypes.pop() if dtypes else torch.float32


def checked_main_grad(parameter, name, dtype=torch.float32):
    """`parameter.main_grad`, which the backward writes in place as a
    `dtype` tensor: a wrong tensor would be overrun, so refuse it."""
    main_grad = getattr(parameter, "main_grad", None)
    if main_grad is None:
        raise RuntimeError(
            f"tejit: fuse_wgrad_accumulation is set, but parameter '{name}' "
            f"has no .main_grad (a float32, bfloat16 or float16 tensor of "
            f"its shape its gradients accumulate into, as in Megatron-LM)")
    if (main_grad.shape != parameter.shape
            or main_grad.dtype != dtype
            or main_grad.device != parameter.device
            or not main_grad.is_contiguous()):
        raise RuntimeError(
            f"tejit: '{name}.main_grad' is {tuple(main_grad.shape)} "
            f"{main_grad.dtype} on {main_grad.device}"
            f"{'' if main_grad.is_contiguous() else ' (not contiguous)'}; "
            f"fuse_wgrad_accumulation needs a contiguous {dtype} tensor "
            f"{tuple(parameter.shape)} on the parameter's device (the "
            f"module's main_grads share one dtype)")
    return main_grad


def program_buffers(compiled, slots, device):
    """The main_grads a backward of `compiled` (a _compiled.CompiledProgram)
    adds to, one per `slots` entry (compiled.main_grad_inputs'): (gradient
    index -> buffer or GroupBuffers, the same with None for GroupBuffers,
    whose addresses the program is given here)."""
    main_grads, stacked, group_pointers = {}, {}, {}
    for slot, input_index, output_index in zip(
            slots, compiled.main_grad_inputs, compiled.main_grad_outputs):
        index = compiled.grad_index[input_index]
        buffer = slot.buffer(compiled.grad_input_shape(index),
                             compiled.grad_input_dtype(index), device)
        main_grads[index] = stacked[index] = buffer
        if isinstance(buffer, GroupBuffers):
            group_pointers[output_index] = buffer.pointers()
            stacked[index] = None
    if compiled.main_grad_outputs:
        compiled.use_group_pointers(group_pointers)
    return main_grads, stacked


class Slot:
    """One program input whose gradient goes to main_grad: the parameters
    it is made of, and how their main_grads become the program's buffer
    (`join`, None for the one parameter's main_grad itself) and go back
    (`split(buffer, main_grads)`, None when the buffer was no copy)."""

    def __init__(self, parameters, names, join=None, split=None):
        self.parameters = parameters
        self.names = names
        self._join = join
        self._split = split

    def _trained(self):
        return any(p.requires_grad for p in self.parameters)

    def buffer(self, shape, dtype, device):
        """The `dtype` buffer of `shape` the backward adds into. Frozen
        weights (no parameter requires grad) get a scratch buffer."""
        if not self._trained():
            return torch.zeros(shape, dtype=dtype, device=device)
        grads = [checked_main_grad(p, n, dtype)
                 for p, n in zip(self.parameters, self.names)]
        buffer = grads[0] if self._join is None else self._join(grads)
        if tuple(buffer.shape) != tuple(shape):
            raise RuntimeError(f"tejit: the main_grad of {self.names} makes "
                               f"{tuple(buffer.shape)}, the program takes "
                               f"{tuple(shape)}")
        return buffer

    def finish(self, buffer):
        """After the backward: the sums back into the main_grads."""
        if self._split is not None and self._trained():
            self._split(buffer, [p.main_grad for p in self.parameters])

    def mark_added_to_main_grad(self):
        """Sets Megatron-LM's `grad_added_to_main_grad` on the trained
        parameters when they all have it; whether they did."""
        if not self._trained() or not all(
                hasattr(p, "grad_added_to_main_grad")
                for p in self.parameters):
            return False
        for p in self.parameters:
            p.grad_added_to_main_grad = True
        return True

    def gradient(self, shape, dtype, device):
        """What autograd gets for the input (of `shape`, `dtype`), as in
        TE: with Megatron-LM's `grad_added_to_main_grad` on the weights, a
        placeholder (zeros with `zero_out_wgrad`) that autograd carries to
        them, and the attribute set; else None."""
        if not self.mark_added_to_main_grad():
            return None
        zero = any(getattr(p, "zero_out_wgrad", False)
                   for p in self.parameters)
        return (torch.zeros if zero else torch.empty)(shape, dtype=dtype,
                                                      device=device)


def rows_slot(parameters, names, adjacent):
    """The slot of a weight made of `parameters`' rows, in order
    (`adjacent(tensors)`: whether they lie back to back in one storage)."""
    def join(grads):
        if adjacent(grads):
            first = grads[0]
            shape = (sum(g.shape[0] for g in grads), *first.shape[1:])
            return first.as_strided(shape, first.stride(),
                                    first.storage_offset())
        return torch.cat(grads)

    def split(buffer, grads):
        if buffer.data_ptr() == grads[0].data_ptr():  # the view: in place
            return
        for grad, rows in zip(grads, buffer.split([g.shape[0]
                                                   for g in grads])):
            grad.copy_(rows)

    return Slot(parameters, names, join, split)


def reordered_slot(parameter, name, to_program, from_program):
    """The slot of a weight the program takes reordered
    (`to_program(t)`, undone by `from_program(t)`)."""
    return Slot([parameter], [name],
                join=lambda grads: to_program(grads[0]).contiguous(),
                split=lambda buffer, grads: grads[0].copy_(
                    from_program(buffer)))


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _stacked_view(first, count):
    """`count` tensors of `first`'s shape lying back to back from `first`
    on (contiguous) as one [count, *shape] view, without a copy."""
    shape = (count, *first.shape)
    return first.as_strided(shape, _contiguous_strides(shape),
                            first.storage_offset())


class GroupBuffers:
    """A stacked main_grad given to the program as G separate buffers, one
    per group (tejit.Program.set_group_pointers): the backward adds group
    g's gradient into `tensors[g]` in place."""

    def __init__(self, tensors):
        self.tensors = tensors

    def pointers(self):
        return [tensor.data_ptr() for tensor in self.tensors]


class StackedSlot(Slot):
    """The slot of a weight the program takes stacked, [G, *shape], from G
    parameters of that shape (GroupedLinear's `weight0`..`weight{G-1}`):
    their main_grads go to the program as one [G, *shape] view when every
    parameter is trained and they lie back to back in parameter order in
    one storage (`adjacent(tensors)`: same dtype, contiguous, each starting
    where the previous ends), else as G separate buffers (GroupBuffers:
    e.g. Megatron-Core's gradient buffer, which holds them in reverse
    order), without a copy either way. A frozen parameter (requires_grad
    False) needs no main_grad: a scratch buffer takes its place (what the
    program adds there is dropped). .grad follows TE's rule per parameter
    (`gradient`, with StackedParameters)."""

    def __init__(self, parameters, names, adjacent):
        super().__init__(parameters, names)
        self._adjacent = adjacent

    def buffer(self, shape, dtype, device):
        if not self._trained():
            return torch.zeros(shape, dtype=dtype, device=device)
        stacked = (len(self.parameters), *self.parameters[0].shape)
        if tuple(shape) != stacked:
            raise RuntimeError(f"tejit: the main_grads of {self.names} "
                               f"stack to {stacked}, the program takes "
                               f"{tuple(shape)}")
        grads = [checked_main_grad(p, n, dtype) if p.requires_grad else None
                 for p, n in zip(self.parameters, self.names)]
        if all(g is not None for g in grads) and self._adjacent(grads):
            return _stacked_view(grads[0], len(grads))
        return GroupBuffers([
            g if g is not None else torch.zeros(p.shape, dtype=dtype,
                                                device=device)
            for g, p in zip(grads, self.parameters)])

    def _takers(self):
        """Per parameter: trained and with Megatron-LM's
        `grad_added_to_main_grad`."""
        return [p.requires_grad and hasattr(p, "grad_added_to_main_grad")
                for p in self.parameters]

    def mark_added_to_main_grad(self):
        """Per parameter: sets `grad_added_to_main_grad` on the takers;
        whether there was one."""
        takers = self._takers()
        for parameter, taker in zip(self.parameters, takers):
            if taker:
                parameter.grad_added_to_main_grad = True
        return any(takers)

    def gradient(self, shape, dtype, device):
        """TE's rule per parameter (GroupedLinear's backward): a trained
        parameter with Megatron-LM's `grad_added_to_main_grad` gets it set
        and a placeholder .grad (zeros with its `zero_out_wgrad`, else
        uninitialized), one without it no .grad. Returns the stacked
        placeholder (None when no parameter takes one); StackedParameters
        passes each slice on only to parameters with the attribute."""
        takers = self._takers()
        if not self.mark_added_to_main_grad():
            return None
        placeholder = torch.empty(shape, dtype=dtype, device=device)
        for parameter, part, taker in zip(self.parameters,
                                          placeholder.unbind(0), takers):
            if taker and getattr(parameter, "zero_out_wgrad", False):
                part.zero_()
        return placeholder


class StackedParameters(torch.autograd.Function):
    """StackedParameters.apply(parameters, adjacent, *parts): `parts` (the
    `parameters` themselves, or their casts under torch.autocast) as one
    [G, *shape] tensor, a view when `adjacent(parts)` (the storage they
    share), else a stack; for a StackedSlot's program input. The gradient
    of slice g reaches part g only when parameters[g] has Megatron-LM's
    `grad_added_to_main_grad` (TE's rule under fuse_wgrad_accumulation:
    its placeholder .grad; the others get none, not zeros)."""

    @staticmethod
    def forward(ctx, parameters, adjacent, *parts):
        # An undefined gradient (no placeholder) stays None: no zeros.
        ctx.set_materialize_grads(False)
        ctx.parameters = parameters
        if adjacent(parts):
            return _stacked_view(parts[0].detach(), len(parts))
        return torch.stack([part.detach() for part in parts])

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return (None, None) + (None,) * len(ctx.parameters)
        return (None, None, *placeholder_grads(
            grad.unbind(0), ctx.parameters, ctx.needs_input_grad[2:]))


def placeholder_grads(parts, parameters, needed):
    """The gradients `parts` (one per parameter) where autograd takes them
    under fuse_wgrad_accumulation: part g reaches parameter g only when it
    is `needed` and the parameter has Megatron-LM's
    `grad_added_to_main_grad` (TE's rule: its placeholder .grad; the
    others get none, not zeros)."""
    return tuple(
        part if need and hasattr(parameter, "grad_added_to_main_grad")
        else None
        for part, parameter, need in zip(parts, parameters, needed))
