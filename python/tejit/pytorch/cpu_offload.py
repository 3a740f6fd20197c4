"""Transformer Engine's activation offloading, `get_cpu_offload_context`:
the tensors a model's first layers save for their backward wait in pinned
CPU memory between the forward and the backward.

    context, sync = te.get_cpu_offload_context(
        enabled=True, num_layers=3, model_layers=4)
    for layer in layers:                 # model_layers of them
        with context:
            x = layer(x)
        x = sync(x)                      # ends the layer's group

Each layer (a group, ended by `sync`) records what autograd saves inside
the context (torch.autograd.graph.saved_tensors_hooks: tejit's programs'
saved buffers and kept activations, and any other op's). For the first
`num_layers` of every `model_layers` groups, `sync` starts copying the
group's tensors to pinned CPU memory on a side stream, and their GPU memory
is released when the copy is done. The backward brings a group back on
another side stream when it reaches it and prefetches the group before,
so copies overlap the layers' compute. The last groups stay on the GPU:
their backward comes first. Results are bit for bit those without
offloading.

Offloaded: CUDA tensors of at least 1 MiB that are not parameters
(`offload_weights=True` also offloads parameters that autograd saves). Not
supported: `double_buffering` (NotImplementedError); as in Megatron-LM,
micro-batches must not interleave their forwards (pipeline schedules)."""
import contextlib
import functools

import torch

# Smaller saved tensors stay on the GPU: copying them costs more than
# their memory is worth.
MIN_OFFLOAD_BYTES = 1 << 20


class _Offloaded:
    """One saved tensor while it is offloaded: on the GPU until the group's
    copy is issued, then in pinned CPU memory, then (reloaded) on the GPU
    again until autograd takes it."""

    def __init__(self, tensor):
        self.gpu = tensor
        self.cpu = None
        self.device = tensor.device
        self.ready = None  # the reload's event

    def offload(self, stream):
        """Issues the copy to pinned memory on `stream` (which waits for
        the tensor's producer) and lets the allocator reuse the GPU memory
        once the copy is done."""
        with torch.cuda.stream(stream):
            self.cpu = torch.empty(self.gpu.shape, dtype=self.gpu.dtype,
                                   pin_memory=True)
            self.cpu.copy_(self.gpu, non_blocking=True)
        self.gpu.record_stream(stream)
        self.gpu = None

    def reload(self, stream):
        if self.gpu is not None or self.cpu is None:
            return
        with torch.cuda.stream(stream):
            self.gpu = torch.empty(self.cpu.shape, dtype=self.cpu.dtype,
                                   device=self.device)
            self.gpu.copy_(self.cpu, non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record(stream)

    def take(self):
        """The tensor on the GPU, usable on the current stream (kept for a
        second unpack; autograd drops this object with its node)."""
        stream = torch.cuda.current_stream(self.device)
        if self.gpu is None:  # not reloaded yet: now, on this stream
            self.reload(stream)
        if self.ready is not None:
            stream.wait_event(self.ready)
            self.gpu.record_stream(stream)
            self.ready = None
        self.cpu = None
        return self.gpu


class OffloadHandler:
    """The groups' saved tensors and the two copy streams (see the module
    docstring)."""

    def __init__(self, num_layers, model_layers, offload_activations,
                 offload_weights):
        self.num_layers = num_layers
        self.model_layers = model_layers
        self.offload_activations = offload_activations
        self.offload_weights = offload_weights
        self.group = 0  # the forward's current group
        self.groups = {}  # group -> its _Offloaded tensors
        self._streams = None

    def streams(self, device):
        if self._streams is None:
            self._streams = (torch.cuda.Stream(device),
                             torch.cuda.Stream(device))
        return self._streams

    def _offloads(self, tensor):
        if not tensor.is_cuda or self.group >= self.num_layers:
            return False
        if tensor.numel() * tensor.element_size() < MIN_OFFLOAD_BYTES:
            return False
        if isinstance(tensor, torch.nn.Parameter):
            return self.offload_weights
        return self.offload_activations

    def pack(self, tensor):
        if not self._offloads(tensor):
            return tensor
        entry = _Offloaded(tensor)
        self.groups.setdefault(self.group, []).append(entry)
        return entry

    @staticmethod
    def unpack(packed):
        return packed.take() if isinstance(packed, _Offloaded) else packed

    def commit(self, device):
        """The forward ended group `self.group`: its tensors start their
        copies. Returns the group's index."""
        group = self.group
        entries = self.groups.get(group, [])
        if entries:
            offload = self.streams(device)[0]
            offload.wait_stream(torch.cuda.current_stream(device))
            for entry in entries:
                entry.offload(offload)
        self.group = (group + 1) % self.model_layers
        return group

    def reached(self, group, device):
        """The backward reached group `group` (its layer's backward comes
        next): reload it (if the prefetch did not) and prefetch the one
        before."""
        reload = self.streams(device)[1]
        reload.wait_stream(torch.cuda.current_stream(device))
        for index in (group, group - 1):
            for entry in self.groups.get(index, []):
                entry.reload(reload)
        # The group's entries are autograd's now (take() empties them).
        self.groups.pop(group, None)


class _GroupCommit(torch.autograd.Function):
    """Identity on a layer's output that ends its group: the forward starts
    the group's offload, the backward its reload and the previous group's
    prefetch."""

    @staticmethod
    def forward(ctx, tensor, handler):
        ctx.handler = handler
        ctx.device = tensor.device
        ctx.group = handler.commit(tensor.device)
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        ctx.handler.reached(ctx.group, ctx.device)
        return grad, None


def _commit(tensor, handler):
    if not torch.is_grad_enabled():  # no backward: nothing is saved
        return tensor
    return _GroupCommit.apply(tensor, handler)


def get_cpu_offload_context(enabled=False, num_layers=1, model_layers=1,
                            offload_activations=True, offload_weights=False,
                            double_buffering=False):
    """TE's: (a context manager to run each layer's forward in, a function
    `sync(tensor)` to call on each layer's output after it). Offloads the
    first `num_layers` (fewer than `model_layers`) layers' saved tensors;
    see the module docstring. With enabled=False: (a context that does
    nothing, the identity)."""
    if not enabled:
        return contextlib.nullcontext(), lambda tensor: tensor
    if double_buffering:
        raise NotImplementedError("get_cpu_offload_context: "
                                  "double_buffering is not supported by tejit")
    num_layers, model_layers = int(num_layers), int(model_layers)
    if not 0 <= num_layers < model_layers:
        raise ValueError(
            f"get_cpu_offload_context: num_layers must be at least 0 and "
            f"below model_layers (the last layer's backward comes first), "
            f"got num_layers={num_layers}, model_layers={model_layers}")
    handler = OffloadHandler(num_layers, model_layers,
                             bool(offload_activations), bool(offload_weights))
    context = torch.autograd.graph.saved_tensors_hooks(handler.pack,
                                                       handler.unpack)
    return context, functools.partial(_commit, handler=handler)
