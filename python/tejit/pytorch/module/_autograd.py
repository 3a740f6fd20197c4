"""The autograd Function over a training program.

forward_ex/backward_ex keep the tensors the forward saves for the backward
in PyTorch's memory, so several forwards may await their backward (gradient
accumulation, activation checkpointing, a module called twice in a step):
autograd owns those buffers through ctx.save_for_backward and frees them
with the graph. Everything runs on PyTorch's current stream of the input's
device; autograd runs a backward on the stream of its forward.
"""
import torch

from . import _delayed_wgrad, _main_grad


def _kept(tensors, keep):
    """Tensors the backward reads; None (NULL for the program) elsewhere, so
    that autograd does not keep, e.g., a high-precision input alive that the
    backward only reads as its FP8 copy."""
    return [tensor if wanted else None for tensor, wanted in zip(tensors,
                                                                 keep)]


class ProgramFunction(torch.autograd.Function):
    """ProgramFunction.apply(compiled, slots, wgrad_queue, *inputs): the
    program's outputs (one tensor, or a tuple when it has several),
    differentiable with respect to every input the program has a gradient
    for (activations such as `input`/`query` and the parameters; not masks
    or rotary tables).
    `compiled` is a module/_compiled.CompiledProgram compiled for training;
    the inputs are in the program's order, as CompiledProgram.check_inputs
    accepted them (an FP8 weight, fp8_model_init's, is its Float8Tensor:
    the program reads its FP8 data, and autograd takes the gradient for it
    in high precision); `slots` (fuse_wgrad_accumulation) a _main_grad.Slot per
    compiled.main_grad_inputs entry, where those inputs' gradients go;
    `wgrad_queue` (delay_wgrad_compute: a _delayed_wgrad.WgradQueue, else
    None) where a program that delays its weight gradients queues them:
    its backward runs the dgrad half only and autograd gets no gradient for
    those weights."""

    @staticmethod
    def forward(ctx, compiled, slots, wgrad_queue, *inputs):
        device = inputs[0].device
        outputs = compiled.new_outputs(device)
        saved = compiled.new_saved(device)
        # Some may point at the program's kept weight casts: the backward
        # takes the same ones.
        ctx.saved_in_cache = compiled.saved_in_cache()
        compiled.program.forward_ex(
            torch.cuda.current_stream(device), inputs, outputs,
            compiled.saved_pointers(saved, ctx.saved_in_cache))
        ctx.compiled = compiled
        ctx.device = device
        # fuse_wgrad_accumulation: the main_grads are read in the backward,
        # as TE reads them.
        ctx.slots = slots
        ctx.wgrad_queue = wgrad_queue if compiled.delays_wgrad else None
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
        # The addresses in the buffer as autograd hands it back: saved
        # tensor hooks (torch.autograd.graph.save_on_cpu, CPU offloading)
        # may have moved it since the forward.
        saved = compiled.saved_pointers(tensors[-1], ctx.saved_in_cache)
        dys = []
        for index, dy in enumerate(grad_outputs):
            if dy is None:  # an output nothing downstream used
                dy = compiled.zero_grad_output(index, device)
            else:  # e.g. the expanded ones of a .sum(): materialize
                dy = dy.to(compiled.output_dtype(index)).contiguous()
            dys.append(dy)
        if ctx.wgrad_queue is not None:
            return _dgrad_only(ctx, inputs, outputs, tensors[-1], saved,
                               dys)
        # fuse_wgrad_accumulation: gradient index -> the main_grad it adds
        # to, and the same with None for per-group ones.
        main_grads, stacked = _main_grad.program_buffers(compiled, ctx.slots,
                                                         device)
        grads = compiled.new_grad_inputs(device, stacked)
        compiled.program.backward_ex(torch.cuda.current_stream(device),
                                     inputs, outputs, saved,
                                     dys + list(stacked.values()), grads)
        returned = [grads[index] if index is not None and needed else None
                    for index, needed in zip(compiled.grad_index,
                                             _input_needs(ctx))]
        for slot, input_index in zip(ctx.slots, compiled.main_grad_inputs):
            slot.finish(main_grads[compiled.grad_index[input_index]])
            # (An FP8 weight's gradient is of the activations' dtype.)
            shape, dtype = compiled.gradient_spec(input_index)
            returned[input_index] = (
                slot.gradient(shape, dtype, device)
                if _input_needs(ctx)[input_index] else None)
        return (None, None, None, *returned)


def _input_needs(ctx):
    """needs_input_grad of the program's inputs (the first three of apply's
    arguments are `compiled`, `slots` and `wgrad_queue`)."""
    return ctx.needs_input_grad[3:]


def _dgrad_only(ctx, inputs, outputs, saved_buffer, saved, dys):
    """The backward of a program that delays its weight gradients: the
    dgrad half now, the wgrad half queued (with what it reads) for
    backward_dw. Returns autograd's gradients: none for the weights the
    wgrad half computes."""
    compiled, device = ctx.compiled, ctx.device
    stream = torch.cuda.current_stream(device)
    deferred_buffer = compiled.new_deferred(device)
    deferred = compiled.deferred_pointers(deferred_buffer)
    # main_grads are read by the wgrad half only (NULL here).
    grad_outputs = dys + [None] * len(compiled.main_grad_outputs)
    grads = compiled.new_grad_inputs(device, half="dgrad")
    compiled.program.backward_dgrad_ex(stream, inputs, outputs, saved,
                                       grad_outputs, grads, deferred)
    ready = torch.cuda.Event()
    ready.record(stream)
    reads = compiled.wgrad_reads
    keep = [deferred_buffer]
    if any(reads["saved"]):  # else freed with autograd's graph, as usual
        keep.append(saved_buffer)
    # What the wgrad half reads (tensors, or the saved addresses), None
    # elsewhere.
    pointers = {"saved": [p if used else None for p, used in
                          zip(saved, reads["saved"])],
                "deferred": deferred}
    for kind, tensors in (("inputs", inputs), ("outputs", outputs),
                          ("grad_outputs", grad_outputs)):
        kept = [t if used and t is not None else None
                for t, used in zip(tensors, reads[kind])]
        keep += [t for t in kept if t is not None]
        pointers[kind] = kept
    ctx.wgrad_queue.put(_delayed_wgrad.PendingWgrad(
        compiled, device, pointers, keep, ctx.slots, list(_input_needs(ctx)),
        ready))
    return (None, None, None,
            *[grads[index] if index is not None and needed
              and index not in compiled.wgrad_writes else None
              for index, needed in zip(compiled.grad_index,
                                       _input_needs(ctx))])
