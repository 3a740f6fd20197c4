"""A tejit.Program as the PyTorch modules use it: its tensors as torch
dtypes and module attribute names, buffers from PyTorch's allocator, and
what its backward reads.

One CompiledProgram serves one JIT key of one module (module/base.py); the
program's FP8 meta state belongs to that module (module/_meta.py).
"""
import ctypes

import torch

import tejit

from .. import _distributed
from .._device_view import device_view
from ..float8_tensor import Float8Tensor
from ._attention_specs import KV_CACHE_TENSORS, kv_cache_input_name

TORCH_DTYPES = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2,
    "i64": torch.int64, "i32": torch.int32, "i8": torch.int8,
    "bool": torch.bool,
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)

# fp8_model_init: the inputs a program with FP8 weights takes beside each
# (`<weight>.scale_inv`, and `<weight>.transpose` in training programs).
FP8_WEIGHT_COMPANIONS = ("scale_inv", "transpose")

# Bytes between the starts of consecutive saved tensors in a forward's
# buffer (a multiple of every alignment the kernels and cuBLASLt ask for).
SAVED_ALIGNMENT = 256

# The single layer of a module's spec is `layers.0`: parameters arrive as
# "layers.0.<TE state_dict name>", extra outputs as "layers.0.<name>".
LAYER_PREFIX = "layers.0."


def attribute_name(tensor_name):
    """"layers.0.fc1_weight" -> "fc1_weight"; "input", "output" unchanged."""
    if tensor_name.startswith(LAYER_PREFIX):
        return tensor_name[len(LAYER_PREFIX):]
    return tensor_name


def _backward_reads(program):
    """(input names, output names) the backward reads, from the plan
    (docs/plan-format.md: backward arguments with te.forward_arg /
    te.forward_result index the forward's arguments / results). Autograd
    then keeps alive only these (as TE keeps the FP8 copies, not the
    high-precision input, of an FP8 GEMM's operand); the others are passed
    to the backward as NULL. A plan this code does not understand keeps
    everything."""
    everything = ({info.name for info in program.inputs},
                  {info.name for info in program.outputs})
    try:
        functions = program.plan()["functions"]
        forward = next(f for f in functions if not f.get("backward_of"))
        backward = next(f for f in functions if f.get("backward_of"))
        arguments = [a.get("te.name") for a in forward["arguments"]]
        results = [r.get("te.name") for r in forward["results"]]
        inputs = {arguments[a["te.forward_arg"]]
                  for a in backward["arguments"] if "te.forward_arg" in a}
        read = {results[a["te.forward_result"]]
                for a in backward["arguments"] if "te.forward_result" in a}
    except (KeyError, IndexError, StopIteration, TypeError):
        return everything
    if None in inputs or None in read:
        return everything
    return inputs, read & everything[1]


def _packed_offsets(infos):
    """(The offset of each tensor in one byte buffer, at 256-byte aligned
    offsets (FP8 GEMM operands need 16); the buffer's size)."""
    offsets, offset = [], 0
    for info in infos:
        offsets.append(offset)
        offset += -(-info.nbytes // SAVED_ALIGNMENT) * SAVED_ALIGNMENT
    return offsets, offset


class CompiledProgram:
    """A compiled program with what the modules need to call it."""

    def __init__(self, program, device_index):
        self.program = program
        self.device_index = device_index
        self.training = program.is_training
        # DelayedScaling with reduce_amax: the process group the program
        # reduces its amaxes over (use_amax_reduction).
        self.amax_reductions = program.amax_reductions
        self._reduction_group = None
        # Tensor parallelism: the ranks the program's tp_allreduce steps
        # sum over (1: none), and the process group it was last given
        # (use_tp_group).
        self.tp_size = int(getattr(program, "tp_size", 1))
        self._tp_process_group = None
        # Context parallelism, likewise (use_cp_group).
        self.cp_size = int(getattr(program, "cp_size", 1))
        self._cp_process_group = None
        self._forward_updates_state = True
        # Inference programs that keep their weight casts (the runtime made
        # them a cache; TEJIT_WEIGHT_CAST_CACHE=0 at compile time did not):
        # the parameters' (address, version) at the last forward that cast
        # them (use_weight_casts), and the reuse mode the program was last
        # given.
        self.keeps_weight_casts = program.weight_cast_cache_bytes > 0
        self._weights_token = None
        self._reuse_weight_casts = tejit.WEIGHT_CASTS_RUN
        # Training programs: per saved tensor, its address in the kept
        # weight casts while forwards keep or reuse them (else None).
        self._saved_in_cache = None
        inputs = program.inputs
        if not inputs or inputs[0].is_parameter:
            raise RuntimeError(f"tejit: expected the program's first input "
                               f"to be an activation ('input', 'query'), "
                               f"got {[i.name for i in inputs]}")
        # Every input in the program's order: activations by their program
        # name ("input", "query", "attention_mask", ...), parameters by
        # their module attribute path.
        # A KV-cache program's caches are the caller's buffers (the
        # InferenceParams'), whatever the plan marks them: activations here.
        self.input_names = [kv_cache_input_name(attribute_name(i.name))
                            for i in inputs]
        self.is_parameter = [bool(i.is_parameter)
                             and name not in KV_CACHE_TENSORS
                             for i, name in zip(inputs, self.input_names)]
        # Inputs passed as host pointers (GroupedLinear's m_splits: CPU
        # int32 tensors), which the runtime reads during the call.
        self.is_host = [bool(getattr(i, "is_host", False)) for i in inputs]
        # The per-token modules' programs take "input" then parameters.
        self.parameter_names = [name for name, parameter in
                                zip(self.input_names, self.is_parameter)
                                if parameter]
        self.output_names = [attribute_name(o.name) for o in program.outputs]
        self._inputs = [(tuple(i.shape), TORCH_DTYPES[i.dtype])
                        for i in inputs]
        self._outputs = [(tuple(o.shape), TORCH_DTYPES[o.dtype])
                         for o in program.outputs]
        self._grad_inputs = [(tuple(g.shape), TORCH_DTYPES[g.dtype])
                             for g in program.grad_inputs]
        # fp8_model_init (the spec's `fp8_weights`): whether each parameter
        # input is FP8 (the module passes the Float8Tensor), and the
        # companions the module supplies from it: (input name, the weight's
        # position among the parameters, "scale_inv" or "transpose").
        self.parameter_fp8 = [dtype in FP8_DTYPES for (_, dtype), parameter
                              in zip(self._inputs, self.is_parameter)
                              if parameter]
        position = {name: index
                    for index, name in enumerate(self.parameter_names)}
        self.fp8_weight_companions = []
        for name, parameter in zip(self.input_names, self.is_parameter):
            weight, _, kind = name.rpartition(".")
            if (not parameter and kind in FP8_WEIGHT_COMPANIONS
                    and weight in position):
                self.fp8_weight_companions.append(
                    (name, position[weight], kind))
        # The gradient of input i is grad_inputs[grad_index[i]] ("grad." +
        # its name); None for inputs without one (masks, rotary tables).
        grads = {g.name: index for index, g in enumerate(program.grad_inputs)}
        self.grad_index = [grads.get("grad." + i.name) for i in inputs]
        if len(grads) == len(inputs) and None in self.grad_index:
            # Unnamed gradients: one per input, in order.
            self.grad_index = list(range(len(inputs)))
        # fuse_wgrad_accumulation: the backward takes, after the output
        # gradients, a "main_grad.<weight>" per GEMM weight and adds
        # the weight's gradient to it (the caller passes the same tensor as
        # that gradient's buffer: in place). By input index, in that order.
        # main_grad_outputs: their indices among the backward's inputs.
        position = {i.name: index for index, i in enumerate(inputs)}
        main_grads = [(position[g.name[len("main_grad."):]], index)
                      for index, g in enumerate(getattr(program,
                                                        "grad_outputs", []))
                      if g.name.startswith("main_grad.")]
        self.main_grad_inputs = [entry[0] for entry in main_grads]
        self.main_grad_outputs = [entry[1] for entry in main_grads]
        # Per main_grad output index: the per-group main_grad addresses the
        # program was last given (use_group_pointers; none: stacked).
        self._group_pointers = {}
        # The saved tensors live in one byte buffer per forward (one
        # allocation instead of one per tensor), each at a 256-byte aligned
        # offset (FP8 GEMM operands need 16).
        self._saved_offsets, self._saved_bytes = _packed_offsets(
            program.saved)
        # delay_wgrad_compute (_delayed_wgrad.py): the tensors the dgrad
        # half writes for the wgrad half (one byte buffer per backward, as
        # the saved ones), what the wgrad half reads per kind, and the
        # gradient indices it writes (the dgrad half writes the others).
        self.delays_wgrad = bool(getattr(program, "delays_wgrad", False))
        self._deferred_offsets, self._deferred_bytes = _packed_offsets(
            getattr(program, "deferred", []) if self.delays_wgrad else [])
        self.wgrad_reads, self.wgrad_writes = {}, frozenset()
        if self.delays_wgrad:
            self.wgrad_reads = {
                kind: [program.used_by_wgrad(kind, index)
                       for index in range(len(getattr(program, kind)))]
                for kind in ("inputs", "outputs", "saved", "grad_outputs")}
            self.wgrad_writes = frozenset(
                index for index in range(len(program.grad_inputs))
                if program.used_by_wgrad("grad_inputs", index))
        if self.training:
            read_inputs, read_outputs = _backward_reads(program)
            # A host input (a few bytes) is always kept: the backward reads
            # the forward's values of it wherever the plan says.
            self.keep_inputs = [i.name in read_inputs or host
                                for i, host in zip(inputs, self.is_host)]
            self.keep_outputs = [o.name in read_outputs
                                 for o in program.outputs]
        # FP8 meta tensors by name: (index for meta_get/meta_set, shape).
        self.meta = {info.name: (index, tuple(info.shape))
                     for index, info in enumerate(program.meta)}

    # --- buffers -------------------------------------------------------------

    @staticmethod
    def _allocate(specs, device):
        return [torch.empty(shape, dtype=dtype, device=device)
                for shape, dtype in specs]

    def new_outputs(self, device):
        return self._allocate(self._outputs, device)

    def new_saved(self, device):
        """One byte buffer for every tensor a forward saves (the caching
        allocator aligns blocks to 512 bytes); saved_pointers gives their
        addresses in it."""
        return torch.empty(self._saved_bytes, dtype=torch.uint8,
                           device=device)

    def saved_pointers(self, buffer, in_cache=False):
        """The address of each saved tensor in `buffer` (new_saved's), or,
        for the weight casts a training forward keeps or reuses
        (use_training_weight_casts), in the program's kept casts: those of
        now, or `in_cache` (saved_in_cache() of the forward, for its
        backward)."""
        if in_cache is False:
            in_cache = self._saved_in_cache
        base = buffer.data_ptr()
        pointers = [base + offset for offset in self._saved_offsets]
        if in_cache:
            pointers = [kept or pointer for kept, pointer in
                        zip(in_cache, pointers)]
        return pointers

    def saved_in_cache(self):
        """Per saved tensor, its address in the kept weight casts (else
        None), as a forward now uses them; None when none is kept."""
        return self._saved_in_cache

    def new_deferred(self, device):
        """One byte buffer for the tensors a delayed-wgrad backward's dgrad
        half writes for its wgrad half; deferred_pointers gives their
        addresses."""
        return torch.empty(self._deferred_bytes, dtype=torch.uint8,
                           device=device)

    def deferred_pointers(self, buffer):
        base = buffer.data_ptr()
        return [base + offset for offset in self._deferred_offsets]

    def use_group_pointers(self, pointers):
        """Gives the program, for each main_grad output index in
        `pointers`, its per-group main_grad addresses (a grouped weight's
        main_grads in separate buffers: tejit.Program.set_group_pointers),
        and takes back the ones of main_grads not in it (stacked buffers
        again); calls the library only where that changes."""
        for index in self.main_grad_outputs:
            wanted = tuple(pointers.get(index, ()))
            if self._group_pointers.get(index, ()) != wanted:
                self.program.set_group_pointers(index, wanted)
                self._group_pointers[index] = wanted

    def new_grad_inputs(self, device, given=None, half=None):
        """Buffers for the backward's gradients; `given` maps gradient
        indices to tensors to use instead (main_grads; None: no buffer,
        NULL). `half` ("dgrad" or "wgrad", delay_wgrad_compute) allocates
        only the gradients that half of the backward writes (the wgrad
        half: wgrad_writes), None (NULL) for the others."""
        given = given or {}

        def written(index):
            return half is None or (index in self.wgrad_writes) == (
                half == "wgrad")
        return [given[index] if index in given else
                torch.empty(shape, dtype=dtype, device=device)
                if written(index) else None
                for index, (shape, dtype) in enumerate(self._grad_inputs)]

    def grad_input_shape(self, index):
        return self._grad_inputs[index][0]

    def grad_input_dtype(self, index):
        return self._grad_inputs[index][1]

    def input_spec(self, index):
        """(shape, torch dtype) of input `index`."""
        return self._inputs[index]

    def gradient_spec(self, index):
        """(shape, torch dtype) of the gradient autograd takes for input
        `index`: the input's; for an FP8 weight (a Float8Tensor, nominally
        of a high-precision dtype) the activations' dtype (autograd casts
        it to the weight's nominal one)."""
        shape, dtype = self._inputs[index]
        if dtype in FP8_DTYPES:
            dtype = self._inputs[0][1]
        return shape, dtype

    def zero_grad_output(self, index, device):
        """The gradient of an output autograd left undefined (unused)."""
        shape, dtype = self._outputs[index]
        return torch.zeros(shape, dtype=dtype, device=device)

    def output_dtype(self, index):
        return self._outputs[index][1]

    # --- checks --------------------------------------------------------------

    def check_inputs(self, tensors, names, parameters_checked=False):
        """The program reads raw pointers: a tensor of another shape, dtype
        or layout would be read out of bounds, so refuse it here. With
        `parameters_checked`, the parameter inputs passed before (the same
        tensors, unchanged). A Float8Tensor is checked as its FP8 data,
        what the program reads. A host input (is_host) is a CPU tensor."""
        for tensor, (shape, dtype), name, parameter, host in zip(
                tensors, self._inputs, names, self.is_parameter,
                self.is_host):
            if parameters_checked and parameter:
                continue
            if isinstance(tensor, Float8Tensor):
                tensor = tensor._data
            placed = (tensor.device.type == "cpu" if host
                      else tensor.is_cuda)
            if (tuple(tensor.shape) != shape or tensor.dtype != dtype
                    or not placed or not tensor.is_contiguous()):
                raise ValueError(
                    f"tejit: '{name}' is {tuple(tensor.shape)} "
                    f"{tensor.dtype} on {tensor.device}"
                    f"{'' if tensor.is_contiguous() else ' (not contiguous)'}"
                    f"; the compiled program takes a contiguous "
                    f"{'CPU' if host else 'CUDA'} tensor {shape} {dtype}")

    # --- FP8 meta state ------------------------------------------------------

    def stream(self):
        """PyTorch's current stream on the program's device."""
        return torch.cuda.current_stream(self.device_index)

    def read_meta(self, name):
        """Meta tensor `name` as a CPU float32 tensor; synchronizes the
        current stream, so it holds the state after all queued steps."""
        index, shape = self.meta[name]
        data = bytearray(self.program.meta_get(index, self.stream()))
        return torch.frombuffer(data, dtype=torch.float32).reshape(shape)

    def write_meta(self, name, tensor):
        """Overwrites meta tensor `name` (ordered on the current stream)."""
        index, _ = self.meta[name]
        host = tensor.detach().to("cpu", torch.float32).contiguous()
        # Raw bytes without NumPy (not a PyTorch dependency).
        self.program.meta_set(index, ctypes.string_at(
            host.data_ptr(), host.numel() * host.element_size()),
            self.stream())

    # --- running -------------------------------------------------------------

    def dropout_stream_rewind(self):
        """A function that puts the program's dropout stream back where it
        is now (both copies ordered on the current stream), or None when
        the program draws no masks."""
        address = self.program.rng_state_device_pointer()
        if not address:
            return None
        state = device_view(address, 2, torch.int64, self.device_index)
        saved = state.clone()
        return lambda: state.copy_(saved)

    def use_forward_state_updates(self, enabled):
        """Whether this call's forward updates the FP8 state: TE updates it
        only while autograd records (not under torch.no_grad())."""
        if enabled != self._forward_updates_state:
            self.program.set_forward_state_updates(enabled)
            self._forward_updates_state = enabled

    def use_amax_reduction(self, process_group):
        """Reduces the program's amaxes across `process_group` (None: this
        process alone) from this call on; its backward reduces over the
        group of the latest forward."""
        if not self.amax_reductions or process_group is self._reduction_group:
            return
        self.program.set_amax_group(
            _distributed.amax_group(process_group, self.device_index)
            if process_group is not None else None)
        self._reduction_group = process_group

    def use_tp_group(self, process_group):
        """Sums the program's tensor-parallel partial results over
        `process_group` (a torch ProcessGroup of tp_size ranks) from this
        call on."""
        self._use_group("tp", "tensor", process_group)

    def use_cp_group(self, process_group):
        """Gathers the keys and values of the program's context-parallel
        attention (and reduce-scatters their gradients) over
        `process_group` (a torch ProcessGroup of cp_size ranks) from this
        call on."""
        self._use_group("cp", "context", process_group)

    def _use_group(self, kind, name, process_group):
        """Gives the program (Program.set_tp_group / set_cp_group, `kind`
        "tp" or "cp") the tejit group over `process_group`, unless it has
        it already; ValueError unless the process group has the
        {kind}_size ranks the program was compiled for. Both kinds use
        _distributed.tp_group's object for the process group."""
        attribute = f"_{kind}_process_group"
        if process_group is getattr(self, attribute):
            return
        size = getattr(self, f"{kind}_size")
        ranks = _distributed.group_size(process_group)
        if ranks != size:
            raise ValueError(
                f"tejit: the {name}-parallel group has {ranks} rank(s), the "
                f"program was compiled for {kind}_size {size}")
        getattr(self.program, f"set_{kind}_group")(
            _distributed.tp_group(process_group, self.device_index))
        setattr(self, attribute, process_group)

    def use_weight_casts(self, token, is_first_microbatch=None):
        """Sets whether this inference forward reuses the weight casts the
        program kept (TE's `is_first_microbatch`): None reuses them when
        `token` (the module's parameters' addresses and versions, which
        every in-place change through torch moves on) is what it was at the
        last forward that cast them, and never in CUDA-graph capture (the
        captured forward casts at every replay); True casts; False reuses
        them, also in capture (the graph's replays read the casts as the
        latest casting forward left them): the caller promises the weights
        have not changed since. The runtime checks the rest (the same
        argument pointers, an FP8 state neither updated nor written since)
        and casts when it must. Returns whether the stream is capturing,
        for weight_casts_done."""
        capturing = torch.cuda.is_current_stream_capturing()
        if is_first_microbatch is None:
            reuse = (tejit.WEIGHT_CASTS_REUSE
                     if token is not None and token == self._weights_token
                     and not capturing else tejit.WEIGHT_CASTS_RUN)
        elif is_first_microbatch:
            reuse = tejit.WEIGHT_CASTS_RUN
        else:
            reuse = tejit.WEIGHT_CASTS_REUSE_IN_GRAPHS
        if reuse != self._reuse_weight_casts:
            self.program.set_reuse_weight_casts(reuse)
            self._reuse_weight_casts = reuse
        return capturing

    def use_training_weight_casts(self, is_first_microbatch):
        """TE's FP8 weight caching across micro-batches for this training
        forward: None casts the weights (into the saved tensors, as without
        caching); True casts them into the memory the program keeps (its
        first use allocates it: 2 bytes per weight element); False reuses
        what the latest forward with True left there, with the scale_inv it
        was cast with (the caller promises the weights have not changed
        since; TE records no amax for them). The backward of every forward
        that kept or reused the casts reads the latest ones."""
        reuse = (tejit.WEIGHT_CASTS_RUN if is_first_microbatch is None
                 else tejit.WEIGHT_CASTS_KEEP if is_first_microbatch
                 else tejit.WEIGHT_CASTS_REUSE_IN_GRAPHS)
        if reuse == self._reuse_weight_casts:
            return
        self.program.set_reuse_weight_casts(reuse)
        self._reuse_weight_casts = reuse
        self._saved_in_cache = (None if reuse == tejit.WEIGHT_CASTS_RUN
                                else self.program.saved_cache_pointers())

    def use_weight_cast_flag(self, flag):
        """The weight casts decided on the device at each forward, from
        `flag` (base.WeightCastFlag: a device int32, 0 casts into the
        memory kept, nonzero reuses what is there), so that one CUDA graph
        serves micro-batches that cast and ones that reuse the casts.
        `flag` must outlive the program's forwards in this mode."""
        key = ("flag", flag.pointer)
        if key == self._reuse_weight_casts:
            return
        self.program.set_weight_cast_flag(flag.pointer)
        self._reuse_weight_casts = key
        # What the kept casts hold is decided on the device from now on.
        self._weights_token = None
        self._saved_in_cache = (self.program.saved_cache_pointers()
                                if self.training else None)

    def weight_casts_done(self, token, capturing):
        """After the forward use_weight_casts prepared: a forward that cast
        makes `token` the casts' (None when captured: replays cast whatever
        the parameters hold then). Returns False when a forward told to
        reuse the casts even in capture (is_first_microbatch=False) had to
        cast, True otherwise."""
        if (self._reuse_weight_casts == tejit.WEIGHT_CASTS_REUSE_IN_GRAPHS
                and self.program.skipped_steps > 0):
            return True
        # WEIGHT_CASTS_REUSE is chosen only when `token` is the casts'.
        self._weights_token = None if capturing else token
        return self._reuse_weight_casts != \
            tejit.WEIGHT_CASTS_REUSE_IN_GRAPHS

    def infer(self, inputs):
        """An inference forward (no autograd) on the current stream."""
        device = inputs[0].device
        outputs = self.new_outputs(device)
        self.program.forward(torch.cuda.current_stream(device), inputs,
                             outputs)
        return outputs

    def forward_unrecorded(self, inputs):
        """A training program's forward outside autograd (a training-mode
        module with dropout under torch.no_grad()): the outputs; the tensors
        saved for a backward are dropped."""
        device = inputs[0].device
        outputs = self.new_outputs(device)
        saved = self.new_saved(device)
        self.program.forward_ex(torch.cuda.current_stream(device), inputs,
                                outputs, self.saved_pointers(saved))
        return outputs


def compile_program(spec, training, device_index):
    """tejit.Program.compile through the kernel cache (memory, then disk),
    wrapped for the modules."""
    program = tejit.Program.compile(spec, training=training,
                                    device=device_index)
    try:
        return CompiledProgram(program, device_index)
    except BaseException:
        program.close()
        raise
