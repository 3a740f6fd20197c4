"""tejit: a JIT compiler doing Transformer Engine's job (FP8 training of
transformer layers on Hopper GPUs), from Python.

This core is framework-free: tensors cross as raw device addresses (ints) and
CUDA streams as ints (or any object with a `cuda_stream` attribute, such as a
torch.cuda.Stream). Framework bindings (tejit.pytorch) build on it.

    import tejit
    with tejit.Program.compile("examples/quickstart.yaml") as program:
        print(program.inputs, program.outputs)
        program.forward(stream, [x.data_ptr(), ...], [y.data_ptr()])
        program.backward(stream, [dy.data_ptr()], [dx.data_ptr(), ...])
"""
import collections
import ctypes
import json
import os
import sys

from . import _capi, _tensors
from ._amax_group import AmaxGroup
from ._capi import LibraryNotFoundError, TejitError
from ._tp_group import TensorParallelGroup

__all__ = ["Program", "AmaxGroup", "TensorParallelGroup", "TensorInfo",
           "DeviceInfo", "TejitError", "LibraryNotFoundError", "compile_ir",
           "device_info", "version"]

TensorInfo = collections.namedtuple(
    "TensorInfo", ["name", "dtype", "shape", "nbytes", "is_parameter",
                   "is_host"], defaults=(False,))
TensorInfo.__doc__ = ("A tensor a program exchanges: name, dtype ('bf16', "
                      "'f32', 'f8e4m3', ...), shape tuple, size in bytes, "
                      "whether it is a parameter, and whether it is passed as "
                      "a host pointer (a grouped layer's m_splits: int32 "
                      "values in host memory, e.g. a CPU tensor's data).")

DeviceInfo = collections.namedtuple("DeviceInfo",
                                    ["ordinal", "name", "major", "minor"])

IR_STAGES = ("te", "primitive", "autodiff", "scaled", "fused", "planned",
             "cuda")
_SPEC_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".mlir")


def version():
    """The tejit build id (git commit) of the loaded library."""
    text = _capi.lib().tejit_version()
    return text.decode("utf-8", "replace") if text else ""


def device_info(ordinal=0):
    """Name and compute capability of CUDA device `ordinal`. Raises
    TejitError (TEJIT_ERROR_NO_DEVICE / _UNSUPPORTED_DEVICE) without a usable
    GPU (FP8 needs sm_89 or newer)."""
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    name = ctypes.create_string_buffer(256)
    _capi.check(_capi.lib().tejit_device_info(
        ordinal, ctypes.byref(major), ctypes.byref(minor), name,
        ctypes.sizeof(name)))
    return DeviceInfo(ordinal, name.value.decode("utf-8", "replace"),
                      major.value, minor.value)


def _source_and_path(spec):
    """(source text, path) for tejit_compile: exactly one is not None.

    A dict is a spec (sent as JSON, which the spec reader accepts); a Path, or
    a one-line str ending in a spec/IR suffix, is a file; any other str is
    the text itself (YAML, JSON or te IR)."""
    if isinstance(spec, dict):
        return json.dumps(spec), None
    if isinstance(spec, os.PathLike):
        return None, os.fspath(spec)
    if isinstance(spec, bytes):
        spec = spec.decode("utf-8")
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a dict, a path or source text, not "
                        f"{type(spec).__name__}")
    looks_like_path = ("\n" not in spec and
                       spec.strip().lower().endswith(_SPEC_FILE_SUFFIXES))
    return (None, spec.strip()) if looks_like_path else (spec, None)


def _options(training, recipe, device):
    # The struct keeps a pointer to the recipe bytes: the caller must keep
    # the returned tuple's bytes alive for the duration of the call.
    recipe_bytes = _capi.encode(recipe)
    options = _capi.CompileOptions(1 if training else 0, recipe_bytes,
                                   int(device))
    return options, recipe_bytes


def compile_ir(spec, stage="te", training=True, recipe=None, device=0):
    """The IR of `spec` (as Program.compile takes it) at `stage`, one of
    IR_STAGES, as text. Needs no GPU."""
    if stage not in IR_STAGES:
        raise ValueError(f"stage must be one of {', '.join(IR_STAGES)}")
    source, path = _source_and_path(spec)
    options, _keep = _options(training, recipe, device)
    text = ctypes.c_void_p()
    library = _capi.lib()
    _capi.check(library.tejit_compile_ir(
        _capi.encode(source), _capi.encode(path), ctypes.byref(options),
        _capi.encode(stage), ctypes.byref(text)))
    try:
        return ctypes.string_at(text).decode("utf-8") if text.value else ""
    finally:
        library.tejit_free_string(text)


def _stream_handle(stream):
    """A CUDA stream as the C API takes it: None/0 is the legacy default
    stream; objects with `cuda_stream` (torch, cupy) are unwrapped."""
    if stream is None:
        return None
    stream = getattr(stream, "cuda_stream", stream)
    stream = getattr(stream, "ptr", stream)  # cupy.cuda.Stream
    return int(stream) or None


def _address(tensor, info=None):
    """A device address: an int, an object with data_ptr() (torch), the CUDA
    array interface (CuPy, Numba) or DLPack (JAX, ...). A tensor that
    describes its size must hold `info`'s bytes (any dtype: saved tensors
    travel as byte buffers)."""
    pointer, nbytes = _tensors.address(tensor,
                                       info.name if info else "tensor")
    if info is not None and nbytes is not None and nbytes != info.nbytes:
        raise ValueError(f"{info.name}: expected {info.nbytes} bytes "
                         f"(shape {tuple(info.shape)}, {info.dtype}), got a "
                         f"tensor of {nbytes} bytes")
    return pointer


# tejit_program_set_reuse_weight_casts's modes (tejit.h).
WEIGHT_CASTS_RUN = 0
WEIGHT_CASTS_REUSE = 1
WEIGHT_CASTS_REUSE_IN_GRAPHS = 2
WEIGHT_CASTS_KEEP = 3


# Program handles whose destruction waited for a stream capture to end.
_DEFERRED_DESTROYS = []


def _stream_capturing():
    """Whether PyTorch (when loaded) is capturing on this thread's current
    stream; the core package does not need torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return (torch.cuda.is_initialized()
                and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        return False


def _destroy_deferred():
    while _DEFERRED_DESTROYS:
        _capi.lib().tejit_program_destroy(
            ctypes.c_void_p(_DEFERRED_DESTROYS.pop()))


class Program:
    """A compiled layer stack with its state (FP8 meta, saved tensors,
    scratch) in device memory. Make one with Program.compile or
    Program.load_bundle; release it with close() or a `with` block."""

    def __init__(self, handle, spec=None, options=None):
        """Wraps a tejit_program * (an int). Use the class methods instead."""
        self._handle = ctypes.c_void_p(handle)
        self._spec = spec          # for ir(): what it was compiled from
        self._compile_options = options or {}
        self._meta_uploads = {}    # host buffers of pending meta_set copies
        self._amax_group = None    # set_amax_group's, kept for its errors
        self._tp_group = None      # set_tp_group's, likewise
        self._cp_group = None      # set_cp_group's, likewise
        self.inputs = self._infos(_capi.TEJIT_INPUT)
        self.outputs = self._infos(_capi.TEJIT_OUTPUT)
        self.grad_outputs = self._infos(_capi.TEJIT_GRAD_OUTPUT)
        self.grad_inputs = self._infos(_capi.TEJIT_GRAD_INPUT)
        self.meta = self._infos(_capi.TEJIT_META)
        self.saved = self._infos(_capi.TEJIT_SAVED)
        # delay_wgrad_compute's hand-over (none in a library before it,
        # which lists no tensors of an unknown kind).
        self.deferred = self._infos(_capi.TEJIT_DEFERRED)

    # --- construction ------------------------------------------------------

    @classmethod
    def compile(cls, spec, training=True, recipe=None, device=0):
        """Compiles `spec` for GPU `device`: a dict (a layer spec, see
        docs/spec-format.md), a path (.yaml/.yml/.json/.mlir) or source text
        (YAML, JSON or te IR). `recipe` overrides the spec's: "delayed",
        "current", "block", "none" or a #te recipe attribute. `training` adds the
        backward."""
        if not _stream_capturing():
            _destroy_deferred()
        source, path = _source_and_path(spec)
        options, _keep = _options(training, recipe, device)
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_compile(
            _capi.encode(source), _capi.encode(path), ctypes.byref(options),
            ctypes.byref(handle)))
        return cls(handle.value, spec,
                   dict(training=training, recipe=recipe, device=device))

    @classmethod
    def load_bundle(cls, directory, device=0):
        """Loads a bundle written by `te-compile --emit=cuda -o DIR`."""
        if not _stream_capturing():
            _destroy_deferred()
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_load_bundle(
            _capi.encode(os.fspath(directory)), int(device),
            ctypes.byref(handle)))
        return cls(handle.value)

    # --- lifetime ----------------------------------------------------------

    def close(self):
        """Destroys the program (idempotent). During a CUDA stream capture
        on this thread (torch.cuda.graph) the destruction waits until a
        later close or compile outside one: freeing device memory or
        unloading kernels there would invalidate the capture, and the
        garbage collector may finalize a program at any allocation."""
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            if _stream_capturing():
                _DEFERRED_DESTROYS.append(handle.value)
            else:
                _destroy_deferred()
                _capi.lib().tejit_program_destroy(handle)
            handle.value = None
        self._meta_uploads = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        # At interpreter exit module globals may be gone already: never raise
        # from a finalizer.
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self):
        """The tejit_program * as an int (raises once closed)."""
        if self._handle.value is None:
            raise ValueError("the program is closed")
        return self._handle.value

    # --- tensors -----------------------------------------------------------

    def _infos(self, kind):
        library = _capi.lib()
        count = library.tejit_num_tensors(self.handle, kind)
        infos = []
        for index in range(count):
            info = _capi.TensorInfoStruct()
            _capi.check(library.tejit_tensor_info_get(
                self.handle, kind, index, ctypes.byref(info)))
            infos.append(TensorInfo(
                name=info.name.decode("utf-8") if info.name else "",
                dtype=_capi.DTYPE_NAMES.get(info.dtype, f"dtype{info.dtype}"),
                shape=tuple(info.shape[i] for i in range(info.rank)),
                nbytes=int(info.bytes),
                is_parameter=bool(info.is_parameter),
                is_host=bool(library.tejit_tensor_is_host(self.handle, kind,
                                                          index))))
        return infos

    @property
    def is_training(self):
        return bool(_capi.lib().tejit_is_training(self.handle))

    # --- running -----------------------------------------------------------

    @staticmethod
    def _pointers(what, infos, tensors, allow_none=False):
        """A C array of one address per entry of `infos`; with
        `allow_none`, None passes NULL (entries a call does not touch)."""
        tensors = list(tensors)
        if len(tensors) != len(infos):
            raise ValueError(f"{what}: expected {len(infos)} pointers "
                             f"({', '.join(i.name for i in infos)}), got "
                             f"{len(tensors)}")
        return _capi.pointer_array(
            [None if allow_none and t is None else _address(t, info)
             for t, info in zip(tensors, infos)])

    def forward(self, stream, input_ptrs, output_ptrs):
        """Runs the forward on `stream`, asynchronously. One device address
        per entry of .inputs / .outputs, in order (a host address for an
        input with is_host, read during the call). A training program keeps
        the input addresses for the backward: keep them alive and unchanged
        until then."""
        inputs = self._pointers("inputs", self.inputs, input_ptrs)
        outputs = self._pointers("outputs", self.outputs, output_ptrs)
        self._check(_capi.lib().tejit_forward(
            self.handle, _stream_handle(stream), inputs, outputs))

    def backward(self, stream, grad_output_ptrs, grad_input_ptrs):
        """Runs the backward of the last forward on `stream`: one address per
        .grad_outputs / .grad_inputs entry; gradients are written, not
        accumulated."""
        grad_outputs = self._pointers("grad_outputs", self.grad_outputs,
                                      grad_output_ptrs)
        grad_inputs = self._pointers("grad_inputs", self.grad_inputs,
                                     grad_input_ptrs)
        self._check(_capi.lib().tejit_backward(
            self.handle, _stream_handle(stream), grad_outputs, grad_inputs))

    def forward_ex(self, stream, input_ptrs, output_ptrs, saved_ptrs):
        """The forward with the tensors it saves for the backward in the
        caller's memory: one address per .saved entry. Several such forwards
        may await their backward (what autograd needs)."""
        inputs = self._pointers("inputs", self.inputs, input_ptrs)
        outputs = self._pointers("outputs", self.outputs, output_ptrs)
        saved = self._pointers("saved", self.saved, saved_ptrs)
        self._check(_capi.lib().tejit_forward_ex(
            self.handle, _stream_handle(stream), inputs, outputs, saved))

    def backward_ex(self, stream, input_ptrs, output_ptrs, saved_ptrs,
                    grad_output_ptrs, grad_input_ptrs):
        """The backward of the forward_ex that saw these inputs, outputs and
        saved tensors (unchanged since)."""
        arrays = [self._pointers(what, infos, ptrs) for what, infos, ptrs in (
            ("inputs", self.inputs, input_ptrs),
            ("outputs", self.outputs, output_ptrs),
            ("saved", self.saved, saved_ptrs),
            ("grad_outputs", self.grad_outputs, grad_output_ptrs),
            ("grad_inputs", self.grad_inputs, grad_input_ptrs))]
        self._check(_capi.lib().tejit_backward_ex(
            self.handle, _stream_handle(stream), *arrays))

    # --- delay_wgrad_compute (docs/delay-wgrad.md) ---------------------------

    @property
    def delays_wgrad(self):
        """Whether the weight gradients are a half of the backward of their
        own (the spec's delay_wgrad_compute; False with a library before
        it)."""
        return (_capi.has("tejit_delays_wgrad")
                and bool(_capi.lib().tejit_delays_wgrad(self.handle)))

    _KINDS = {"inputs": _capi.TEJIT_INPUT, "outputs": _capi.TEJIT_OUTPUT,
              "grad_outputs": _capi.TEJIT_GRAD_OUTPUT,
              "grad_inputs": _capi.TEJIT_GRAD_INPUT,
              "saved": _capi.TEJIT_SAVED, "deferred": _capi.TEJIT_DEFERRED}

    def used_by_wgrad(self, kind, index):
        """Whether the weight-gradient half reads entry `index` of `kind`
        ("inputs", "outputs", "saved", "grad_outputs", "deferred") or writes
        it ("grad_inputs": the delayed weight gradients, which the
        data-gradient half does not write). The others may be freed once the
        data-gradient half has run, and passed as None to the wgrad half."""
        if kind not in self._KINDS:
            raise ValueError(f"used_by_wgrad: kind must be one of "
                             f"{', '.join(self._KINDS)}, got {kind!r}")
        if not self.delays_wgrad:
            return False
        return bool(_capi.lib().tejit_tensor_used_by_wgrad(
            self.handle, self._KINDS[kind], int(index)))

    def _backward_part(self, function, stream, ptrs, deferred_ptrs):
        """Runs `function` (a half of the backward) on the five pointer
        lists of backward_ex (`ptrs`) and the deferred tensors."""
        if not _capi.has(function):
            raise TejitError(_capi.TEJIT_ERROR_UNSUPPORTED,
                             f"{function}: the loaded library ("
                             f"{_capi.library_path()}) predates "
                             f"delay_wgrad_compute")
        lists = (("inputs", self.inputs), ("outputs", self.outputs),
                 ("saved", self.saved), ("grad_outputs", self.grad_outputs),
                 ("grad_inputs", self.grad_inputs))
        arrays = [self._pointers(what, infos, tensors, allow_none=True)
                  for (what, infos), tensors in zip(lists, ptrs)]
        deferred = self._pointers("deferred", self.deferred, deferred_ptrs)
        self._check(getattr(_capi.lib(), function)(
            self.handle, _stream_handle(stream), *arrays, deferred))

    def backward_dgrad_ex(self, stream, input_ptrs, output_ptrs, saved_ptrs,
                          grad_output_ptrs, grad_input_ptrs, deferred_ptrs):
        """The data-gradient half of backward_ex (a program with
        delays_wgrad): writes the .grad_inputs entries used_by_wgrad says
        it does not (data and bias gradients; the weights' may be None) and
        one tensor per .deferred entry (the caller's memory: several
        backwards may await their wgrad half), and updates the backward FP8
        state."""
        self._backward_part("tejit_backward_dgrad_ex", stream, (
            input_ptrs, output_ptrs, saved_ptrs, grad_output_ptrs,
            grad_input_ptrs), deferred_ptrs)

    def backward_wgrad_ex(self, stream, input_ptrs, output_ptrs, saved_ptrs,
                          grad_output_ptrs, grad_input_ptrs, deferred_ptrs):
        """The weight-gradient half (TE's backward_dw): reads the
        .deferred tensors its backward_dgrad_ex wrote and the entries
        used_by_wgrad names (others may be None), writes the weight
        gradients (adding main_grad under fuse_wgrad_accumulation). Run the
        halves in order, on one stream with the program's other calls."""
        self._backward_part("tejit_backward_wgrad_ex", stream, (
            input_ptrs, output_ptrs, saved_ptrs, grad_output_ptrs,
            grad_input_ptrs), deferred_ptrs)

    # --- FP8 meta state ----------------------------------------------------

    def _meta_info(self, index):
        if not 0 <= index < len(self.meta):
            raise IndexError(f"meta index {index} out of range "
                             f"({len(self.meta)} meta tensors)")
        return self.meta[index]

    def meta_get(self, index, stream=None):
        """The bytes of meta tensor `index` (float32 data, .meta[index]
        describes it); synchronizes `stream`."""
        info = self._meta_info(index)
        buffer = ctypes.create_string_buffer(info.nbytes)
        _capi.check(_capi.lib().tejit_meta_get(
            self.handle, index, buffer, info.nbytes, _stream_handle(stream)))
        return buffer.raw

    def meta_set(self, index, data, stream=None):
        """Overwrites meta tensor `index` with `data` (bytes of its size),
        ordered on `stream`."""
        info = self._meta_info(index)
        data = bytes(data)
        if len(data) != info.nbytes:
            raise ValueError(f"meta tensor {info.name} is {info.nbytes} "
                             f"bytes, got {len(data)}")
        buffer = ctypes.create_string_buffer(data, info.nbytes)
        # The copy is ordered on the stream and may read the host buffer
        # later: keep it alive until this index is set again or the program
        # closes.
        self._meta_uploads[index] = buffer
        _capi.check(_capi.lib().tejit_meta_set(
            self.handle, index, buffer, info.nbytes, _stream_handle(stream)))

    def meta_device_pointer(self, index):
        """The device address of meta tensor `index`."""
        self._meta_info(index)
        pointer = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_meta_device_pointer(
            self.handle, index, ctypes.byref(pointer)))
        return pointer.value or 0

    def set_forward_state_updates(self, enabled):
        """Whether forwards update the DelayedScaling state (True, the
        default) or leave it as it stands (TE's inference under
        torch.no_grad(); such forwards reduce nothing across ranks either).
        Backwards always update."""
        _capi.check(_capi.lib().tejit_program_set_forward_state_updates(
            self.handle, int(bool(enabled))))

    def set_reuse_weight_casts(self, reuse):
        """What the next forwards do with the weight casts (tejit.h):
        WEIGHT_CASTS_RUN (False: cast), WEIGHT_CASTS_REUSE (True: skip them
        while the parameter pointers and FP8 state are those of the last
        cast, outside CUDA-graph capture), WEIGHT_CASTS_REUSE_IN_GRAPHS
        (TE's is_first_microbatch=False: also after state updates and in
        capture), WEIGHT_CASTS_KEEP (is_first_microbatch=True: cast into
        the memory kept). Skipping, the caller promises the parameters'
        contents have not changed since the cast."""
        _capi.check(_capi.lib().tejit_program_set_reuse_weight_casts(
            self.handle, int(reuse)))

    def set_weight_cast_flag(self, pointer):
        """Weight casts decided on the device at each forward (TE's
        skip_fp8_weight_update): `pointer` is the address of a device int32
        the caller sets before each forward or graph replay, 0 to cast
        into the memory kept, nonzero to reuse what is there
        (tejit_program_set_weight_cast_flag). set_reuse_weight_casts leaves
        this mode."""
        _capi.check(_capi.lib().tejit_program_set_weight_cast_flag(
            self.handle, ctypes.c_void_p(int(pointer))))

    def set_capture_host_arguments(self, enabled):
        """Whether calls under CUDA-graph capture may read the host
        arguments (m_splits): the graph then replays the captured splits
        (tejit_program_set_capture_host_arguments); off by default."""
        _capi.check(_capi.lib().tejit_program_set_capture_host_arguments(
            self.handle, 1 if enabled else 0))

    def set_group_pointers(self, grad_output_index, pointers):
        """fuse_wgrad_accumulation of a grouped op whose weights' main_grads
        are G separate buffers: `pointers` (G device addresses, or [] to go
        back to one stacked buffer) for .grad_outputs[grad_output_index]
        (its stacked main_grad); later backwards add group g's gradient into
        pointers[g] and take None for that main_grad and its weight's
        gradient (tejit_program_set_group_pointers)."""
        _capi.check(_capi.lib().tejit_program_set_group_pointers(
            self.handle, int(grad_output_index),
            _capi.pointer_array(pointers), len(pointers)))

    def saved_cache_pointers(self):
        """Per .saved entry, where it lives in the kept weight casts under
        the current mode (tejit_saved_cache_pointer), 0 where it does not:
        forward_ex given these addresses uses the casts in place."""
        pointers = []
        for index in range(len(self.saved)):
            pointer = ctypes.c_void_p()
            _capi.check(_capi.lib().tejit_saved_cache_pointer(
                self.handle, index, ctypes.byref(pointer)))
            pointers.append(pointer.value or 0)
        return pointers

    @property
    def weight_cast_cache_bytes(self):
        """Device bytes kept for the weight casts (0: no cache)."""
        return _capi.lib().tejit_program_weight_cast_cache_bytes(self.handle)

    @property
    def skipped_steps(self):
        """Steps the last forward skipped (the weight casts it reused)."""
        return _capi.lib().tejit_program_skipped_steps(self.handle)

    # --- amax reduction across ranks ---------------------------------------

    @property
    def amax_reductions(self):
        """How many amax all-reduces the plan has (0: nothing to reduce)."""
        return _capi.lib().tejit_program_amax_reductions(self.handle)

    def set_amax_group(self, group):
        """Reduces DelayedScaling amaxes over `group` (an AmaxGroup) from the
        next call on; None: this process alone."""
        _capi.check(_capi.lib().tejit_program_set_amax_group(
            self.handle, group.handle if group is not None else None))
        self._amax_group = group

    # --- tensor parallelism ------------------------------------------------

    @property
    def tp_size(self):
        """The tensor-parallel size the program was compiled for: the ranks
        its tensor-parallel sums span (1: none)."""
        return _capi.lib().tejit_program_tp_size(self.handle)

    def set_tp_group(self, group):
        """Sums the partial results of tensor-parallel layers over `group`
        (a TensorParallelGroup) from the next call on; None clears it (a
        program with tp_size > 1 then fails its calls). Raises when the
        group is on another device or has another size than tp_size. The
        program keeps the group: an exception its function raises in a call
        is raised again by that call (_check)."""
        _capi.check(_capi.lib().tejit_program_set_tp_group(
            self.handle, group.handle if group is not None else None))
        self._tp_group = group

    # --- context parallelism -----------------------------------------------

    @property
    def cp_size(self):
        """The context-parallel size the program was compiled for: the
        ranks over which its attention gathers the sequence's keys and
        values (1: none; also with a library that predates context
        parallelism, which compiles no such program)."""
        if not _capi.has("tejit_program_cp_size"):
            return 1
        return _capi.lib().tejit_program_cp_size(self.handle)

    def set_cp_group(self, group):
        """Gathers the keys and values of context-parallel attention (and
        reduce-scatters their gradients) over `group` (a
        TensorParallelGroup: its all-gather and reduce-scatter functions
        are used; a program of cp_comm_type a2a uses its all-to-all) from
        the next call on; None clears it (a program with
        cp_size > 1 then fails its calls). Raises when the group is on
        another device or has another size than cp_size, and
        NotImplementedError when the library predates context parallelism
        (no tejit_program_set_cp_group). The program keeps the group, as
        set_tp_group's."""
        if not _capi.has("tejit_program_set_cp_group"):
            if group is None:
                self._cp_group = None
                return
            raise NotImplementedError(
                f"tejit: this library "
                f"({getattr(_capi.lib(), '_name', 'libtejit')}) has no "
                f"context parallelism (tejit_program_set_cp_group is "
                f"missing); rebuild it from a tree that has it")
        _capi.check(_capi.lib().tejit_program_set_cp_group(
            self.handle, group.handle if group is not None else None))
        self._cp_group = group

    def _check(self, status):
        """_capi.check for calls that may run the amax, tensor-parallel or
        context-parallel group's function: the exception it raised comes
        first."""
        if status:
            for group in (self._amax_group, self._tp_group,
                          getattr(self, "_cp_group", None)):
                if group is None:
                    continue
                try:
                    group.raise_pending()
                except BaseException as error:
                    raise _capi.TejitError(status,
                                           _capi.last_error()) from error
        _capi.check(status)

    def set_seed(self, seed):
        """The seed of the dropout random stream."""
        _capi.check(_capi.lib().tejit_set_seed(self.handle, int(seed)))

    def rng_state_device_pointer(self):
        """The device address of the dropout stream's state (two uint64:
        seed, offset), 0 when the program draws no dropout masks; copying
        it aside and back rewinds the stream."""
        pointer = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_rng_state_device_pointer(
            self.handle, ctypes.byref(pointer)))
        return pointer.value or 0

    # --- IR ----------------------------------------------------------------

    def ir(self, stage="te"):
        """The IR of what this program was compiled from, at `stage`."""
        if self._spec is None:
            raise ValueError("ir() needs the spec: this program was loaded "
                             "from a bundle")
        return compile_ir(self._spec, stage, **self._compile_options)

    def plan(self):
        """The executable plan (docs/plan-format.md) as a dict: every step
        with its kernel, launch geometry, GEMM shapes and buffers."""
        library = _capi.lib()
        text = ctypes.c_void_p()
        _capi.check(library.tejit_program_plan(self.handle, ctypes.byref(text)))
        try:
            return json.loads(ctypes.string_at(text.value).decode("utf-8"))
        finally:
            library.tejit_free_string(text)

    def __repr__(self):
        state = "closed" if self._handle.value is None else "open"
        return (f"<tejit.Program {state}: {len(self.inputs)} inputs, "
                f"{len(self.outputs)} outputs, {len(self.meta)} meta>")
