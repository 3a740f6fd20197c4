"""The autograd Function over a training program.

forward_ex/backward_ex keep the tensors the forward saves for the backward
in PyTorch's memory, so several forwards may await their backward (gradient
accumulation, activation checkpointing, a module called twice in a step):
autograd owns those buffers through ctx.save_for_backward and frees them
with the graph. Everything runs on PyTorch's current stream of the input's
device; autograd runs a backward on the stream of its forward.
"""
import torch


def _kept(tensors, keep):
    """Tensors the backward reads; None (NULL for the program) elsewhere, so
    that autograd does not keep, e.g., a high-precision input alive that the
    backward only reads as its FP8 copy."""
    return [tensor if wanted else None for tensor, wanted in zip(tensors,
                                                                 keep)]


class ProgramFunction(torch.autograd.Function):
    """ProgramFunction.apply(compiled, *inputs): the program's outputs (one
    tensor, or a tuple when it has several), differentiable with respect to
    every input the program has a gradient for (activations such as
    `input`/`query` and the parameters; not masks or rotary tables).
    `compiled` is a module/_compiled.CompiledProgram compiled for training;
    the inputs are in the program's order, as CompiledProgram.check_inputs
    accepted them."""

    @staticmethod
    def forward(ctx, compiled, *inputs):
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
        # fuse_wgrad_accumulation: the parameters whose .main_grad the
        # backward adds to (read then, as TE does).
        ctx.main_grad_parameters = [inputs[index]
                                    for index in compiled.main_grad_inputs]
        for index, parameter in zip(compiled.main_grad_inputs,
                                    ctx.main_grad_parameters):
            if not isinstance(parameter, torch.nn.Parameter):
                raise NotImplementedError(
                    f"tejit: fuse_wgrad_accumulation needs "
                    f"'{compiled.input_names[index]}' to reach the program "
                    f"as the parameter itself, but it is a derived tensor "
                    f"(cast by torch.autocast to another dtype?): its "
                    f"gradient could not go into its main_grad")
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
        main_grads = compiled.main_grads(ctx.main_grad_parameters)
        grads = compiled.new_grad_inputs(device, main_grads)
        compiled.program.backward_ex(torch.cuda.current_stream(device),
                                     inputs, outputs, saved,
                                     dys + list(main_grads.values()), grads)
        returned = [grads[index] if index is not None and needed else None
                    for index, needed in zip(compiled.grad_index,
                                             ctx.needs_input_grad[1:])]
        for parameter, input_index in zip(ctx.main_grad_parameters,
                                          compiled.main_grad_inputs):
            returned[input_index] = (_main_grad_result(parameter)
                                     if parameter.requires_grad else None)
        # needs_input_grad[0] is `compiled`, not a tensor.
        return (None, *returned)


def _main_grad_result(parameter):
    """What a weight whose gradient went into .main_grad hands autograd, as
    in Transformer Engine: with Megatron-LM's `grad_added_to_main_grad`
    attribute, a placeholder of the weight's shape (zeros when
    `zero_out_wgrad`) and the attribute set; without it, None."""
    if not hasattr(parameter, "grad_added_to_main_grad"):
        return None
    parameter.grad_added_to_main_grad = True
    make = torch.zeros if getattr(parameter, "zero_out_wgrad", False) \
        else torch.empty
    return make(parameter.shape, dtype=parameter.dtype,
                device=parameter.device)
