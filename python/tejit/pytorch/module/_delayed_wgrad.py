"""Transformer Engine's `delay_wgrad_compute`: weight gradients computed
when the caller asks (`module.backward_dw()`), not in autograd's backward.

A module built with delay_wgrad_compute=True compiles its training
programs with the spec's `delay_wgrad_compute` (docs/delay-wgrad.md): the
compiler splits the backward into a dgrad half (the input and bias
gradients, run by autograd) and a wgrad half (the weight-gradient GEMMs).
The dgrad half writes what the wgrad GEMMs read that is not kept already
(the FP8 output gradient's transpose and its scale_inv, ...) into
"deferred" tensors in PyTorch's memory; each backward queues one
PendingWgrad, and backward_dw() runs the oldest (first in, first out, as
TE's wgrad store and Megatron-LM's pipeline schedules expect).

The weights' gradients reach them then: added to `.grad` (set when None,
as autograd accumulates), or, under fuse_wgrad_accumulation, added to
`.main_grad` inside the GEMM (with Megatron-LM's grad_added_to_main_grad
set). Autograd's backward gives those weights no gradient. Hooks given to
register_wgrad_accumulation_and_reduce_hooks run after each backward_dw.
"""
import collections

import torch

from . import _main_grad


class PendingWgrad:
    """One backward's weight gradients, not computed yet: what the wgrad
    half reads (everything else the backward had is released), and where
    its gradients go."""

    def __init__(self, compiled, device, pointers, keep, slots, wanted,
                 ready):
        # pointers: per kind ("inputs", "outputs", "saved", "grad_outputs",
        # "deferred") the tensors or addresses the wgrad half reads (None
        # elsewhere);
        # keep: the tensors behind them, alive until run(); slots: per
        # compiled.main_grad_inputs entry its _main_grad.Slot; wanted: per
        # program input, whether autograd asked for its gradient; ready:
        # an event recorded after the dgrad half on its stream.
        self.compiled = compiled
        self.device = device
        self.pointers = pointers
        self.keep = keep
        self.slots = slots
        self.wanted = wanted
        self.ready = ready

    def run(self, deliver):
        """Runs the wgrad half on the current stream and hands each weight
        gradient to `deliver(input name, gradient)` (the program input's
        module attribute path; main_grad weights are done in place)."""
        compiled, device = self.compiled, self.device
        stream = torch.cuda.current_stream(device)
        stream.wait_event(self.ready)
        for tensor in self.keep:
            # Freed after this call: not reused before the wgrad half ran
            # (parameters, kept by their module, and host tensors such as
            # GroupedLinear's m_splits need no record).
            if type(tensor) is torch.Tensor and tensor.is_cuda:
                tensor.record_stream(stream)
        main_grads, stacked = _main_grad.program_buffers(
            compiled, self.slots, device)
        grad_outputs = list(self.pointers["grad_outputs"])
        for output_index, index in zip(compiled.main_grad_outputs, stacked):
            grad_outputs[output_index] = stacked[index]
        grads = compiled.new_grad_inputs(device, stacked,
                                         half="wgrad")
        compiled.program.backward_wgrad_ex(
            stream, self.pointers["inputs"], self.pointers["outputs"],
            self.pointers["saved"], grad_outputs, grads,
            self.pointers["deferred"])
        for slot, input_index in zip(self.slots, compiled.main_grad_inputs):
            slot.finish(main_grads[compiled.grad_index[input_index]])
            slot.mark_added_to_main_grad()
        main_grad_inputs = set(compiled.main_grad_inputs)
        for input_index, index in enumerate(compiled.grad_index):
            if (index is None or index not in compiled.wgrad_writes
                    or input_index in main_grad_inputs
                    or not self.wanted[input_index]):
                continue
            deliver(compiled.input_names[input_index], grads[index])
        self.keep = None


class WgradQueue:
    """A module's PendingWgrads, oldest first, and its
    wgrad_accumulation_and_reduce hooks. Copies (deepcopy, pickle) start
    empty: pending work belongs to the original's autograd graph."""

    def __init__(self):
        self._pending = collections.deque()
        self.hooks = []

    def __len__(self):
        return len(self._pending)

    def put(self, pending):
        self._pending.append(pending)

    def pop(self):
        return self._pending.popleft() if self._pending else None

    def __deepcopy__(self, memo):
        copy = WgradQueue()
        copy.hooks = list(self.hooks)
        return copy

    def __getstate__(self):
        return {"hooks": []}

    def __setstate__(self, state):
        self._pending = collections.deque()
        self.hooks = state.get("hooks", [])


def accumulate(parameter, gradient):
    """Adds `gradient` to `parameter.grad` in the parameter's dtype (sets
    it when None), as autograd accumulates a leaf's gradients."""
    if parameter is None or not parameter.requires_grad:
        return
    gradient = gradient.to(parameter.dtype)
    if parameter.grad is None:
        parameter.grad = gradient
    else:
        parameter.grad.add_(gradient)
