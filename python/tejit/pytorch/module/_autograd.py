"""The autograd Function over a training program.

forward_ex/backward_ex keep the tensors the forward saves for the backward
in PyTorch's memory, so several forwards may await their backward (gradient
accumulation, activation checkpointing, a module called twice in a step):
autograd owns those buffers through ctx.save_for_backward and frees them
with the graph. Everything runs on PyTorch's current stream of the input's
device; autograd runs a backward on the stream of its forward.
"""
import torch

from . import _main_grad


def _kept(tensors, keep):
    """Tensors the backward reads; None (NULL for the program) elsewhere, so
    that autograd does not keep, e.g., a high-precision input alive that the
    backward only reads as its FP8 copy."""
    return [tensor if wanted else None for tensor, wanted in zip(tensors,
                                                                 keep)]


class ProgramFunction(torch.autograd.Function):
    """ProgramFunction.apply(compiled, slots, *inputs): the program's
    outputs (one tensor, or a tuple when it has several), differentiable
    with respect to every input the program has a gradient for (activations
    such as `input`/`query` and the parameters; not masks or rotary
    tables).
    `compiled` is a module/_compiled.CompiledProgram compiled for training;
    the inputs are in the program's order, as CompiledProgram.check_inputs
    accepted them (an FP8 weight, fp8_model_init's, is its Float8Tensor:
    the program reads its FP8 data, and autograd takes the gradient for it
    in high precision); `slots` (fuse_wgrad_accumulation) a _main_grad.Slot per
    compiled.main_grad_inputs entry, where those inputs' gradients go."""

    @staticmethod
    def forward(ctx, compiled, slots, *inputs):
        device = inputs[0].device
        outputs = compiled.new_outputs(device)
        saved = compiled.new_saved(device)
        # Some may point at the program's kept weight casts: the backward
        # takes the same list.
        ctx.saved_pointers = compiled.saved_pointers(saved)
        compiled.program.forward_ex(torch.cuda.current_stream(device),
                                    inputs, outputs, ctx.saved_pointers)
        ctx.compiled = compiled
        ctx.device = device
        # fuse_wgrad_accumulation: the main_grads are read in the backward,
        # as TE reads them.
        ctx.slots = slots
        ctx.counts = (len(inputs), len(outputs))
        ctx.save_for_backward(*_kept(inputs, compiled.keep_inputs),
                              *_kept(outputs, compiled.keep_outputs), saved)
        return tuple(outputs) if len(outputs) > 1 else outputs[0]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grad_outputs):
        compiled, device = ctx.compiled, ctx.device
        num_inputs, num_outputs = ctx.counts
        tensors = ctx.saved_tensors
        inputs = tensors[:num_inputs]
        outputs = tensors[num_inputs:num_inputs + num_outputs]
        saved = ctx.saved_pointers  # tensors[-1], the buffer, kept alive
        dys = []
        for index, dy in enumerate(grad_outputs):
            if dy is None:  # an output nothing downstream used
                dy = compiled.zero_grad_output(index, device)
            else:  # e.g. the expanded ones of a .sum(): materialize
                dy = dy.to(compiled.output_dtype(index)).contiguous()
            dys.append(dy)
        main_grads = {}  # gradient index -> the buffer the backward adds to
        stacked = {}  # the same, None for per-group main_grads (NULL)
        group_pointers = {}  # main_grad output index -> per-group addresses
        for slot, input_index, output_index in zip(
                ctx.slots, compiled.main_grad_inputs,
                compiled.main_grad_outputs):
            index = compiled.grad_index[input_index]
            main_grads[index] = slot.buffer(compiled.grad_input_shape(index),
                                            compiled.grad_input_dtype(index),
                                            device)
            stacked[index] = main_grads[index]
            if isinstance(main_grads[index], _main_grad.GroupBuffers):
                group_pointers[output_index] = main_grads[index].pointers()
                stacked[index] = None
        if compiled.main_grad_outputs:
            compiled.use_group_pointers(group_pointers)
        grads = compiled.new_grad_inputs(device, stacked)
        compiled.program.backward_ex(torch.cuda.current_stream(device),
                                     inputs, outputs, saved,
                                     dys + list(stacked.values()), grads)
        # needs_input_grad[:2] are `compiled` and `slots`, not tensors.
        returned = [grads[index] if index is not None and needed else None
                    for index, needed in zip(compiled.grad_index,
                                             ctx.needs_input_grad[2:])]
        for slot, input_index in zip(ctx.slots, compiled.main_grad_inputs):
            slot.finish(main_grads[compiled.grad_index[input_index]])
            # (An FP8 weight's gradient is of the activations' dtype.)
            shape, dtype = compiled.gradient_spec(input_index)
            returned[input_index] = (
                slot.gradient(shape, dtype, device)
                if ctx.needs_input_grad[2 + input_index] else None)
        return (None, None, *returned)
