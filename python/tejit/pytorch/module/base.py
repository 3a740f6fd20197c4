"""The base of tejit's PyTorch modules: parameters, the JIT cache of
compiled programs, the forward through autograd, and the FP8 meta state in
the state_dict.

Shapes: a module takes an input [..., features] of any leading dims, as
TE's do. Every op of these layers works per token, so the leading dims are
flattened into tokens and the program is compiled for seq_length = tokens,
batch_size = 1 (input [tokens, 1, features]); outputs get the input's
leading dims back. [s, b, h] (sbhd) and [b, s, h] (bshd) inputs of one
token count therefore share a program.

The attention modules (attention.py, multi_head_attention.py,
transformer.py) mix tokens, so they compile for the real [s, b] (or [b, s])
and qkv_format instead: their key holds (format, seq, batch) where the
others' holds the token count, plus what else selects their program (mask
type, dropout on or off, rotary embeddings, attention bias); see
_run_program.

JIT: a module compiles on the first call with a new key (token count,
activation dtype, recipe, training or inference, device) and keeps the
program (one per key, as the program holds state); a later call with that
key runs it without compiling. A compile runs tejit's pipeline but takes
its kernels from the kernel cache (in memory, then on disk), so a second
module of the same configuration, or a new process, compiles no kernels.

Training or inference: a training program (forward + backward, through
torch.autograd) when grad mode is on and the input or a parameter requires
grad, as autograd would record the call; otherwise an inference program
(forward only, nothing saved). Dropout follows the module's mode, as in
TE: a module in training mode that drops out runs its training program's
forward under torch.no_grad() too (not recorded; what it saves is
dropped).

Precision: the recipe of the innermost enabled fp8_autocast / autocast
(fp8.py), else none (the GEMMs in the activation dtype); with its fp8_dpa
the attention core too runs in FP8 (docs/fp8-attention.md), except in
KV-cache steps (_program_recipe). The activation
dtype is torch.autocast's when it is enabled (input and parameters are cast
to it, differentiably), else the input's, which must then be the
parameters' dtype (TE's rule).

Tensor parallelism (docs/tensor-parallel.md): TE's tp_group / tp_size
(and parallel_mode, set_parallel_mode); the parameters are this rank's
shards, the spec says the global sizes and `tp_size`, and the program sums
its partial results over the module's tp_group (set_tensor_parallel_group)
through torch.distributed (_distributed.py). With sequence_parallel (TE's,
only with tp_size > 1) the input and output are this rank's slice of dim 0
(column-parallel GEMMs all-gather it, row-parallel ones reduce-scatter
their output), the spec gets `sequence_parallel: true` and global sizes,
and the parameters whose gradients are then this rank's partial sums (the
norms', the row-parallel biases) carry TE's `sequence_parallel = True`.

Context parallelism (docs/context-parallel.md): TE's cp_group,
cp_global_ranks, cp_stream and cp_comm_type (the attention modules'
constructors, and set_context_parallel_group on every module, which
reaches its submodules). The modules with an attention core take this
rank's two load-balanced chunks of each sequence; their spec gets cp_size,
cp_rank, cp_comm_type and global sequence lengths, and the program gathers
keys and values over the group (cp_comm_type "all_gather") or trades
heads for tokens by all-to-alls ("a2a"; TE's default "p2p" where the heads
per rank divide by cp_size, else the all-gather) through torch.distributed
(_distributed.py). The per-token modules keep the arguments and use none
of them (their tokens are independent).

FP8 primary weights (TE's fp8_model_init, fp8.py): a module built inside
it holds its GEMM weights as Float8Tensors (float8_tensor.py) and has
`primary_weights_in_fp8 = True`. Under an FP8 recipe its program is
compiled with the layer's `fp8_weights: true` (also in the JIT key) and
reads the weights' FP8 data directly; without one it takes their
dequantized values (Float8BlockScaling refuses them: NotImplementedError).
module/_fp8_weights.py says how.
"""
import contextlib
import contextvars
import json
import math
import warnings

import torch

import tejit

from .. import _checkpointing, _distributed, fp8
from .._dynamo import outside_torch_compile
from ..float8_tensor import Float8Tensor
from . import (_args, _autograd, _compiled, _delayed_wgrad, _fp8_weights,
               _main_grad, _meta)
from ._args import default_init_method, gamma_init

SPEC_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16",
               torch.float32: "fp32"}

_compiles = 0


class WeightCastFlag:
    """TE's skip_fp8_weight_update: a device int32 that the weight-cast
    kernels of the programs given it read at each launch, 0 to cast the
    weights into the memory each program keeps (is_first_microbatch True or
    None), 1 to skip the casts and reuse what is there (False). Set on the
    current stream before a forward, so that one captured forward serves
    both (make_graphed_callables(fp8_weight_caching=True))."""

    def __init__(self, device=None):
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.tensor = torch.zeros(1, dtype=torch.int32, device=device)
        self.pointer = self.tensor.data_ptr()

    def set(self, is_first_microbatch):
        self.tensor.fill_(0 if is_first_microbatch in (True, None) else 1)


# What a call with is_first_microbatch=None means while
# make_graphed_callables(fp8_weight_caching=True) warms up and captures its
# graphs (a WeightCastFlag); None otherwise. Per thread and task, like
# fp8_autocast's state.
_captured_first_microbatch = contextvars.ContextVar(
    "tejit_captured_first_microbatch", default=None)


@contextlib.contextmanager
def first_microbatch_default(value):
    """Calls that pass is_first_microbatch=None (or nothing) run as if they
    passed `value` (True, False, or a WeightCastFlag), inside the block: how
    graph.py captures modules nested in containers that do not take the
    argument."""
    token = _captured_first_microbatch.set(value)
    try:
        yield
    finally:
        _captured_first_microbatch.reset(token)


def compile_count():
    """Programs compiled by tejit.pytorch modules in this process."""
    return _compiles


def _torch_autocast_dtype():
    """torch.autocast's CUDA dtype while it is enabled, else None (the
    device-type arguments are torch >= 2.4's; older ones take none)."""
    try:
        enabled = torch.is_autocast_enabled("cuda")
    except TypeError:
        enabled = torch.is_autocast_enabled()
    if not enabled:
        return None
    get_dtype = getattr(torch, "get_autocast_dtype", None)
    return get_dtype("cuda") if get_dtype else torch.get_autocast_gpu_dtype()


# Recipe fingerprint -> (spec, JIT key): building and validating a spec on
# every call is host time a forward does not need to spend again.
_RECIPE_SPECS = {}


def _recipe_spec(recipe, fp8_attention=True):
    """(The recipe's spec mapping, its JSON as the JIT key), or (None, None)
    without a recipe; without `fp8_attention` (a program with no attention
    core, or a KV-cache step's, whose attention stays in the activation
    dtype) the mapping leaves out fp8_dpa, so that such programs are those
    of the recipe without it. Recipes are mutable dataclasses: the memo is
    keyed by their field values (a recipe with unhashable values is not
    memoized)."""
    if recipe is None:
        return None, None
    try:
        fingerprint = (type(recipe), tuple(vars(recipe).items()),
                       bool(fp8_attention))
        found = _RECIPE_SPECS.get(fingerprint)
    except TypeError:
        fingerprint = found = None
    if found is not None:
        return found
    spec = recipe.to_spec()
    if not fp8_attention:
        spec.pop("fp8_dpa", None)
    found = (spec, json.dumps(spec, sort_keys=True))
    if fingerprint is not None:
        _RECIPE_SPECS[fingerprint] = found
    return found


def rng_fork(get_rng_state_tracker, name=None):
    """TE's `get_rng_state_tracker().fork(name)` (Megatron's CUDA RNG
    tracker: the model-parallel generator, which differs between
    tensor-parallel ranks), or a context that changes nothing without a
    tracker (torch's default generator)."""
    if get_rng_state_tracker is None:
        return contextlib.nullcontext()
    tracker = get_rng_state_tracker()
    return tracker.fork(name) if name else tracker.fork()


class GroupRef:
    """Holds a module's tensor-parallel process group: deepcopy shares it
    (a process group is not copied), pickling drops it (the copy needs
    set_tensor_parallel_group)."""

    def __init__(self, group=None):
        self.group = group

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        return {"group": None}


def _dropout_seed(device):
    """A seed for a program's dropout stream, drawn from torch's CUDA
    generator of `device` (so torch.manual_seed makes runs repeat)."""
    return int(torch.randint(0, 2**62, (1,), device=device).item())


TE_EXTRA_STATE = "_extra_state"


def skip_te_extra_state(state_dict, prefix):
    """`state_dict` without the `<prefix>_extra_state` entry Transformer
    Engine's modules save (their FP8 state, pickled), so that TE
    checkpoints load: tejit keeps its FP8 state as plain tensors
    (`fp8_meta.*`) and does not unpickle TE's; a non-empty one is reported
    once, as the FP8 scaling then starts afresh."""
    key = prefix + TE_EXTRA_STATE
    if key not in state_dict:
        return state_dict
    value = state_dict[key]
    size = (value.numel() if isinstance(value, torch.Tensor) else
            len(value.getbuffer()) if hasattr(value, "getbuffer") else
            0 if value is None else 1)
    if size:
        warnings.warn(f"tejit: '{key}' (Transformer Engine's pickled FP8 "
                      f"state) is not loaded; the FP8 scaling state starts "
                      f"afresh", stacklevel=4)
    return {k: v for k, v in state_dict.items() if k != key}


# The spec layer types with GEMM weights, which take the options below.
_GEMM_LAYERS = {"Linear", "LayerNormLinear", "LayerNormMLP",
                "MultiheadAttention", "TransformerLayer", "GroupedLinear"}


def _gemm_layer_options(layer, fp8_weights, delay_wgrad, fuse_wgrad,
                        main_grad_dtype):
    """Sets a GEMM layer's per-call spec options: FP8 weights
    (fp8_model_init), delay_wgrad_compute, fuse_wgrad_accumulation (unless
    the layer already says false) with the main_grads' dtype."""
    if layer.get("type") not in _GEMM_LAYERS:
        return
    if fp8_weights:
        # The GEMM weights arrive in FP8, with their scale_inv (and
        # transpose, for training) as inputs.
        layer["fp8_weights"] = True
    if delay_wgrad:
        # The backward's weight gradients wait for backward_dw.
        layer["delay_wgrad_compute"] = True
    if fuse_wgrad and layer.get("fuse_wgrad_accumulation", True):
        # The backward adds each GEMM weight's gradient to its .main_grad
        # (_autograd.py), of the main_grads' dtype.
        layer["fuse_wgrad_accumulation"] = True
        if main_grad_dtype != torch.float32:
            layer["main_grad_dtype"] = _main_grad.DTYPES[main_grad_dtype]


class TransformerEngineBaseModule(torch.nn.Module):
    """What the modules share. A subclass registers its parameters with
    _add_parameter (TE's names and initialization), describes its layer
    with _layer_spec() (docs/spec-format.md) and _input_features(), and
    calls _run() in forward."""

    # Norm modules run no GEMM: they ignore the FP8 recipe (as TE's do), so
    # autocast does not give them a second program.
    _uses_fp8 = True
    # The attention modules' programs hold an attention core, which a
    # recipe with fp8_dpa runs in FP8 (docs/fp8-attention.md): only their
    # specs carry the recipe's fp8_dpa.
    _has_attention = False
    # Tensor parallelism's defaults (__init__ sets them per module; these
    # serve modules unpickled from before they existed).
    tp_size = 1
    sequence_parallel = False
    _tp_group = GroupRef()
    _rng_tracker = None
    _rng_tracker_name = None
    _tracked = frozenset()
    # Context parallelism's defaults (_init_context_parallel and
    # set_context_parallel_group set them; likewise for old pickles).
    cp_size = 1
    cp_rank = 0
    _cp_group = GroupRef()
    cp_global_ranks = None
    cp_stream = None
    cp_comm_type = "p2p"
    # fp8_model_init's defaults (likewise).
    _fp8_init = None
    _fp8_weight_names = frozenset()
    primary_weights_in_fp8 = False
    # delay_wgrad_compute's default (_init_delay_wgrad sets it).
    delay_wgrad_compute = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        forward = cls.__dict__.get("forward")
        if forward is not None:
            cls.forward = outside_torch_compile(forward)

    def __init__(self, params_dtype):
        super().__init__()
        self.params_dtype = (torch.get_default_dtype() if params_dtype is None
                             else params_dtype)
        if self.params_dtype not in SPEC_DTYPES:
            raise TypeError(f"{type(self).__name__}: params_dtype must be "
                            f"torch.bfloat16, torch.float16 or torch.float32, "
                            f"got {self.params_dtype}")
        self._programs = {}        # JIT key -> CompiledProgram
        self._fp8_meta_state = _meta.Fp8MetaState()
        self._initializers = {}    # parameter name -> init function
        # return_bias: this parameter is returned, not added; the program
        # adds zeros in its place (one program shape for both uses).
        self._returned_bias = None
        self._zero_biases = {}     # (shape, dtype, device) -> zeros
        # The parameter tensors the last inference call gave its program
        # (_parameter_arguments).
        self._inference_parameters = None
        # Tensor parallelism (_init_tensor_parallel): the ranks of the
        # group, the group (set_tensor_parallel_group), TE's
        # get_rng_state_tracker and rng_tracker_name (weight
        # initialization; attention dropout seeds), and the parameters
        # initialized under the tracker.
        self.tp_size = 1
        # TE's self.sequence_parallel: tp_size > 1 and sequence_parallel.
        self.sequence_parallel = False
        self._tp_group = GroupRef()
        self._rng_tracker = None
        self._rng_tracker_name = None
        self._tracked = set()
        # fp8_model_init: its settings when the module was built inside an
        # enabled one (fp8.ModelInit), and the GEMM weights it makes
        # Float8Tensors (_fp8_weights.py). TE's attribute.
        self._fp8_init = fp8.get_fp8_model_init()
        self._fp8_weight_names = set()
        self.primary_weights_in_fp8 = self._fp8_init is not None
        # TE's delay_wgrad_compute: the weight gradients backward_dw()
        # computes, and the hooks it runs after (_delayed_wgrad.py).
        self._wgrad_queue = _delayed_wgrad.WgradQueue()

    # --- delayed weight gradients (TE's delay_wgrad_compute) -----------------

    def _init_delay_wgrad(self, delay_wgrad_compute):
        """TE's delay_wgrad_compute: the training programs split their
        backward (the spec's delay_wgrad_compute), autograd's backward
        computes no weight gradient, backward_dw() does."""
        self.delay_wgrad_compute = bool(delay_wgrad_compute)

    def need_backward_dw(self):
        """Whether backward_dw() must run to finish the weight gradients
        (TE's)."""
        return self.delay_wgrad_compute

    def backward_dw(self):
        """Computes the weight gradients of the oldest backward that
        delayed them (TE's): added to each weight's `.grad` (set when
        None), or to its `.main_grad` under fuse_wgrad_accumulation; then
        runs the hooks given to register_wgrad_accumulation_and_reduce_hooks.
        Does nothing without delay_wgrad_compute or a pending backward."""
        if not self.delay_wgrad_compute:
            return
        pending = self._queue().pop()
        if pending is None:
            return
        pending.run(self._deliver_wgrad)
        for hook in self._queue().hooks:
            hook()

    def _deliver_wgrad(self, name, gradient):
        """backward_dw: the gradient of the program's input `name` (a
        module attribute path) to its parameter."""
        _delayed_wgrad.accumulate(self._parameter(name), gradient)

    def register_wgrad_accumulation_and_reduce_hooks(self, hook):
        """TE's: `hook()` runs after each backward_dw (e.g. Megatron-LM's
        gradient reduction of the weights backward_dw finished)."""
        self._queue().hooks.append(hook)

    def _queue(self):
        if "_wgrad_queue" not in self.__dict__:  # unpickled from before
            self._wgrad_queue = _delayed_wgrad.WgradQueue()
        return self._wgrad_queue

    # --- tensor parallelism ------------------------------------------------

    def _init_tensor_parallel(self, owner, tp_group, tp_size,
                              sequence_parallel=False,
                              get_rng_state_tracker=None,
                              rng_tracker_name=None):
        """Takes TE's tensor-parallel arguments: sets and returns tp_size
        (tp_group's size when it is given), keeps the group and the RNG
        tracker, and sets sequence_parallel as TE does (only with tp_size
        > 1)."""
        self.tp_size = _args.tp_world_size(owner, tp_group, tp_size)
        self.sequence_parallel = _args.sequence_parallel_of(
            sequence_parallel, self.tp_size)
        self._tp_group = GroupRef(tp_group)
        self._rng_tracker = get_rng_state_tracker
        self._rng_tracker_name = rng_tracker_name
        return self.tp_size

    @property
    def tp_group(self):
        """The tensor-parallel process group (None until given)."""
        return self._tp_group.group

    def set_tensor_parallel_group(self, tp_group):
        """TE's: the process group this module's programs (and its
        submodules') sum their tensor-parallel partial results over; it
        must have tp_size ranks."""
        if tp_group is not None and self.tp_size > 1:
            size = _distributed.group_size(tp_group)
            if size != self.tp_size:
                raise ValueError(
                    f"{type(self).__name__}.set_tensor_parallel_group: the "
                    f"group has {size} rank(s), the module was built for "
                    f"tp_size {self.tp_size}")
        self._tp_group = GroupRef(tp_group)
        for child in self.children():
            setter = getattr(child, "set_tensor_parallel_group", None)
            if setter is not None:
                setter(tp_group)

    # --- context parallelism -----------------------------------------------

    def _init_context_parallel(self, owner, cp_group, cp_global_ranks,
                               cp_stream, cp_comm_type):
        """Takes TE's context-parallel arguments (_args.context_parallel_of:
        cp_size is cp_group's size, cp_rank this process's rank in it) and
        refuses a configuration context parallelism does not run
        (_context_parallel_refusals; with cp_comm_type "a2a", heads per
        rank that cp_size does not divide: _args.check_a2a_heads over
        _context_parallel_heads). Children are not reached (the
        constructors pass the arguments on)."""
        cp_size, cp_rank = _args.context_parallel_of(
            owner, cp_group, cp_global_ranks, cp_comm_type)
        _args.check_context_parallel_module(
            owner, cp_size if self._has_attention else 1,
            self._context_parallel_refusals())
        heads = self._context_parallel_heads()
        if self._has_attention and heads is not None:
            _args.check_a2a_heads(owner, cp_size, cp_comm_type, *heads,
                                  tp_size=self.tp_size)
        self.cp_size, self.cp_rank = cp_size, cp_rank
        self._cp_group = GroupRef(cp_group)
        self.cp_global_ranks = cp_global_ranks
        self.cp_stream = cp_stream
        self.cp_comm_type = cp_comm_type

    @property
    def cp_group(self):
        """The context-parallel process group (None: none, or dropped by
        pickling)."""
        return self._cp_group.group

    def set_context_parallel_group(self, cp_group, cp_global_ranks=None,
                                   cp_stream=None, cp_comm_type="p2p"):
        """TE's: the process group over which this module's attention (and
        its submodules') runs context parallelism, each rank holding its
        two load-balanced chunks of every sequence (docs/context-parallel.md);
        cp_size becomes the group's size (None: 1). cp_comm_type
        "all_gather" runs as tejit's all-gather of the keys and values,
        "a2a" as all-to-alls between heads and tokens (heads and key/value
        groups per rank divisible by cp_size), "p2p" (TE's default) as a2a
        where they divide, else as the all-gather (the same numbers, up to
        rounding); "a2a+p2p" is refused; cp_stream is accepted and unused (nothing
        overlaps the communication yet). The next call compiles programs
        for the new size, rank and comm type (they key the program)."""
        self._init_context_parallel(
            f"{type(self).__name__}.set_context_parallel_group", cp_group,
            cp_global_ranks, cp_stream, cp_comm_type)
        for child in self.children():
            setter = getattr(child, "set_context_parallel_group", None)
            if setter is not None:
                setter(cp_group, cp_global_ranks, cp_stream, cp_comm_type)

    def _context_parallel_refusals(self):
        """{argument as written: whether this module has it} for what its
        configuration brings that context parallelism does not run
        (_args.check_context_parallel_module); none by default."""
        return {}

    def _context_parallel_heads(self):
        """(num_attention_heads, num_gqa_groups) of the module's attention,
        global (tensor parallelism divides them), for cp_comm_type "a2a"'s
        check; None for a module without one."""
        return None

    def _context_parallel(self):
        """(cp_size, cp_rank, the spec's cp_comm_type: "all_gather" or
        "a2a") when this module's programs run context parallelism (a
        module with an attention core and cp_size > 1), else None: the
        spec's keys and part of the JIT key."""
        if self._has_attention and self.cp_size > 1:
            return (self.cp_size, self.cp_rank,
                    _args.spec_comm_type(self.cp_comm_type,
                                         self._p2p_runs_a2a()))
        return None

    def _p2p_runs_a2a(self):
        """Whether TE's default cp_comm_type "p2p" runs as "a2a" for this
        module (_args.spec_comm_type): its heads and key/value groups per
        rank divide by cp_size (_args.a2a_divides) and the library's groups
        take an all-to-all (TensorParallelGroup.takes_all_to_all)."""
        heads = self._context_parallel_heads()
        return (heads is not None
                and _args.a2a_divides(self.cp_size, *heads,
                                      tp_size=self.tp_size)
                and tejit.TensorParallelGroup.takes_all_to_all())

    def _required_cp_group(self):
        return self._required_group(
            self._cp_group, f"cp_size is {self.cp_size}",
            "context-parallel process group (a pickled copy drops it)",
            "cp_group", "set_context_parallel_group")

    def _tp_communicates(self):
        """Whether this module's programs sum over the tensor-parallel
        group (DotProductAttention's and a Linear's without parallel_mode
        do not)."""
        return self.tp_size > 1

    def _sequence_parallel_active(self):
        """Whether this module's programs run with sequence parallelism:
        sequence_parallel (already False at tp_size 1) on a module that
        communicates (a Linear without parallel_mode splits nothing, as in
        TE)."""
        return self.sequence_parallel and self._tp_communicates()

    def _sequence_parallel_input_is_slice(self):
        """With sequence parallelism, whether the input is this rank's
        slice of dim 0 (a column-parallel GEMM first: the program gathers
        it) rather than the whole of it (a row-parallel Linear)."""
        return True

    def _sequence_parallel_parameters(self):
        """The names (dotted for a submodule's) of the parameters that get
        TE's attribute `sequence_parallel` (their gradients are this rank's
        partial sums under sequence parallelism: the norms' and the
        row-parallel biases'), following TE's modules; none by default."""
        return ()

    def _mark_sequence_parallel(self):
        """TE's parameter attribute: `param.sequence_parallel =
        self.sequence_parallel` on _sequence_parallel_parameters (False
        without sequence parallelism, as TE sets it), so that Megatron-LM
        all-reduces their gradients over the tensor-parallel group."""
        for name in self._sequence_parallel_parameters():
            parameter = self._parameter(name)
            if parameter is not None:
                parameter.sequence_parallel = bool(self.sequence_parallel)

    def _required_tp_group(self):
        return self._required_group(
            self._tp_group, f"tp_size is {self.tp_size}",
            "tensor-parallel process group", "tp_group",
            "set_tensor_parallel_group")

    def _required_group(self, reference, size, what, argument, setter):
        """The process group `reference` (a GroupRef) holds, else
        RuntimeError saying `size` ("tp_size is 2"), that the module has no
        `what`, and to pass `argument` or call `setter`."""
        group = reference.group
        if group is None:
            raise RuntimeError(
                f"{type(self).__name__}: {size} but the module has no "
                f"{what}: pass {argument} to the constructor or call "
                f"{setter}(group) before the forward")
        return group

    def _dropout_seed_context(self):
        """Where a training program's dropout seed is drawn (base: torch's
        default CUDA generator; the attention modules: TE's RNG tracker
        when one is given, as TE draws attention dropout in
        tracker.fork())."""
        return contextlib.nullcontext()

    # --- parameters --------------------------------------------------------

    def _add_parameter(self, name, shape, init, device, tracked=False,
                       gemm_weight=False, tensor=None):
        """Parameter `name` initialized by `init`; `tracked`: under TE's
        RNG tracker when one is given (GEMM weights, as TE's);
        `gemm_weight`: a Float8Tensor under fp8_model_init (made by
        reset_parameters); `tensor`: its memory (e.g. a view of a buffer
        the module shares between parameters), else a new tensor."""
        if tensor is None:
            tensor = torch.empty(shape, dtype=self.params_dtype,
                                 device=device)
        self.register_parameter(name, torch.nn.Parameter(tensor))
        self._initializers[name] = init
        if tracked:
            self._tracked.add(name)
        if gemm_weight and self._fp8_init is not None:
            self._fp8_weight_names.add(name)

    def _add_linear_parameters(self, weight, bias, out_features, in_features,
                               init, device, returned=False):
        """A GEMM's weight [out, in] and, with self.use_bias, its bias (the
        one return_bias returns when `returned`); else `bias` is None. The
        sizes are this rank's (tensor parallelism)."""
        self._add_parameter(weight, (out_features, in_features),
                            init or default_init_method(), device,
                            tracked=True, gemm_weight=True)
        if not self.use_bias:
            self.register_parameter(bias, None)
            return
        self._add_parameter(bias, (out_features,), torch.nn.init.zeros_,
                            device)
        if returned and self.return_bias:
            self._returned_bias = bias

    def _add_norm_parameters(self, weight, bias, size, normalization,
                             zero_centered_gamma, device):
        self._add_parameter(weight, (size,), gamma_init(zero_centered_gamma),
                            device)
        if normalization == "LayerNorm":
            self._add_parameter(bias, (size,), torch.nn.init.zeros_, device)

    def reset_parameters(self):
        """(Re)initializes every parameter as TE does: GEMM weights under
        get_rng_state_tracker().fork() when a tracker is given (each
        tensor-parallel rank its own shard), the rest from torch's default
        generator. Parameters on the meta device are left for a later call
        (TE's deferred init). Under fp8_model_init the GEMM weights are
        initialized in high precision and quantized (_fp8_weights.py).
        Submodules that hold parameters (the attention modules' groups and
        sublayers) reset theirs too."""
        with torch.no_grad():
            for name, init in self._initializers.items():
                parameter = getattr(self, name)
                if parameter.device.type == "meta":
                    continue
                if name in self._fp8_weight_names:
                    init = _fp8_weights.quantizing_init(self, name, init,
                                                        self._fp8_init)
                if name in self._tracked:
                    with rng_fork(self._rng_tracker, self._rng_tracker_name):
                        init(parameter)
                else:
                    init(parameter)
        for child in self.children():
            reset = getattr(child, "reset_parameters", None)
            if reset is not None:
                reset()
        # TE sets its parallel attributes in reset_parameters too.
        self._mark_sequence_parallel()

    def _bias_output(self, name, like):
        """The bias a return_bias module returns, in the output's dtype."""
        bias = self._parameter(name)
        return None if bias is None else bias.to(like.dtype)

    def _parameter(self, name):
        """Parameter `name`, a dotted path for a submodule's; None for an
        absent one (bias=False)."""
        owner, _, leaf = name.rpartition(".")
        module = self.get_submodule(owner) if owner else self
        return getattr(module, leaf, None)

    # --- what a subclass describes -----------------------------------------

    def _layer_spec(self):
        raise NotImplementedError

    def _input_features(self):
        raise NotImplementedError

    # --- running -----------------------------------------------------------

    def _activation_dtype(self, inp):
        """torch.autocast's dtype while it is on, else the input's (the
        parameters must then have it too: _call_token checks)."""
        autocast_dtype = _torch_autocast_dtype()
        return autocast_dtype if autocast_dtype is not None else inp.dtype

    def _call_token(self, dtype, want_token):
        """What identifies the parameters' contents without reading them
        (None unless `want_token`): each one's address and version counter
        (moved on by every in-place change made through torch: optimizer
        steps, load_state_dict, copy_; not by writes through `.data`). The
        same walk checks, outside torch.autocast, that they have the
        activation dtype `dtype` (as in Transformer Engine): one walk per
        call. An FP8 weight (fp8_model_init) is its FP8 data's address, and
        both its own version (in-place ops through torch: they requantize
        inside its __torch_dispatch__, below the version counting) and its
        data's (a direct quantize_())."""
        check = _torch_autocast_dtype() is None
        fp8_weights = self.primary_weights_in_fp8
        token = []
        for parameter in self.parameters():
            if check and parameter.dtype != dtype:
                name = next(n for n, p in self.named_parameters()
                            if p is parameter)
                raise TypeError(
                    f"{type(self).__name__}: the input is {dtype} but "
                    f"'{name}' is {parameter.dtype}; outside torch.autocast "
                    f"they must match (as in Transformer Engine): cast the "
                    f"input or the module")
            if want_token:
                if fp8_weights and isinstance(parameter, Float8Tensor):
                    data = parameter._data
                    token.append((data.data_ptr(), parameter._version,
                                  data._version))
                    continue
                token.append((parameter.data_ptr(), parameter._version))
        return tuple(token) if want_token else None

    def _argument(self, name, dtype, fp8=False):
        """The tensor the program takes for parameter `name` (a dotted path
        for a submodule's: a submodule with its own `_argument`, such as
        the fused QKV weights, supplies it); `fp8`: the program takes it in
        FP8 (a Float8Tensor weight, passed as it is; one that is not, is
        dequantized)."""
        if name == self._returned_bias:
            parameter = self._parameter(name)
            return self._zero_bias(parameter.shape, dtype, parameter.device)
        child, rest = self._child_with(name, "_argument")
        if child is not None:
            return child._argument(rest, dtype, fp8)
        parameter = self._parameter(name)
        if fp8 or isinstance(parameter, Float8Tensor):
            return _fp8_weights.argument(parameter, name, dtype, fp8)
        # Casts only under torch.autocast; autograd carries the gradient
        # back to the parameter's dtype.
        return parameter.to(dtype).contiguous()

    def _zero_bias(self, shape, dtype, device):
        """Zeros of `shape` that a program adds in place of a bias the
        module returns (return_bias), kept per shape, dtype and device."""
        key = (tuple(shape), dtype, device)
        if key not in self._zero_biases:
            self._zero_biases[key] = torch.zeros(key[0], dtype=dtype,
                                                 device=device)
        return self._zero_biases[key]

    def _main_grad_slot(self, name):
        """Where the program's gradient of parameter input `name` goes
        under fuse_wgrad_accumulation (_main_grad.Slot), resolved as
        _argument resolves the tensor."""
        child, rest = self._child_with(name, "_main_grad_slot")
        if child is not None:
            return child._main_grad_slot(rest)
        return _main_grad.Slot([self._parameter(name)], [name])

    def _child_with(self, name, method):
        """(the submodule a dotted parameter name `name` starts with, the
        rest of the name) when that submodule has `method` (it resolves its
        own parameters: the fused QKV group), else (None, name)."""
        head, _, rest = name.partition(".")
        child = self._modules.get(head) if rest else None
        if child is not None and hasattr(child, method):
            return child, rest
        return None, name

    def _requires_grad(self, inp):
        return inp.requires_grad or any(
            parameter.requires_grad
            for name, parameter in self.named_parameters()
            if name != self._returned_bias)

    def _compile(self, key, spec, shape):
        global _compiles
        dtype, recipe_key, training, device_index = key[1:5]
        try:
            compiled = _compiled.compile_program(spec, training, device_index)
        except tejit.TejitError as error:
            detail = str(error)
            if detail.startswith(error.status_name + ": "):
                detail = detail[len(error.status_name) + 2:]
            raise tejit.TejitError(error.status, (
                f"{type(self).__name__}: cannot compile for input "
                f"{tuple(shape)} ({dtype}, "
                f"{'training' if training else 'inference'}, recipe "
                f"{recipe_key or 'none'}): {detail}")) from error
        _compiles += 1
        self._programs[key] = compiled
        return compiled

    def _run(self, inp, is_first_microbatch=None):
        """Runs the module's program on `inp` [..., features]: {output name
        ("output", "ln_output"): tensor [..., output features]}.
        `is_first_microbatch` as in _run_program."""
        name = type(self).__name__
        dtype = self._checked_input(inp)
        features = self._input_features()
        lead = tuple(inp.shape[:-1])
        tokens = math.prod(lead)
        sequence_parallel = self._sequence_parallel_active()
        # The spec's token count is global: with sequence parallelism a
        # column-parallel module's input holds this rank's 1/tp of dim 0
        # (flattened, rank r's tokens are rows [r*T/tp, (r+1)*T/tp) of the
        # gathered [T, 1, features]: chunk r of dim 0).
        spec_tokens = (_args.sequence_parallel_tokens(
            name, lead, self.tp_size,
            self._sequence_parallel_input_is_slice())
            if sequence_parallel else tokens)
        x = inp.to(dtype).contiguous().view(tokens, 1, features)
        outputs = self._run_program(
            {"input": x}, dtype, tokens,
            {"seq_length": spec_tokens, "batch_size": 1}, inp.shape,
            is_first_microbatch=is_first_microbatch)
        if sequence_parallel:
            # Outputs hold tp times (gathered) or 1/tp (scattered) of the
            # input's dim 0, or as much as it (the norm's output).
            return {output_name: out.view(-1, *lead[1:], out.shape[-1])
                    for output_name, out in outputs.items()}
        return {output_name: out.view(*lead, out.shape[-1])
                for output_name, out in outputs.items()}

    def _checked_input(self, inp):
        """Checks that `inp` is a CUDA tensor [..., _input_features()];
        returns the call's activation dtype (_checked_dtype)."""
        name = type(self).__name__
        if not isinstance(inp, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor input, got "
                            f"{type(inp).__name__}")
        features = self._input_features()
        if inp.dim() == 0 or inp.shape[-1] != features:
            raise ValueError(f"{name}: expected an input [..., {features}], "
                             f"got {tuple(inp.shape)}")
        if not inp.is_cuda:
            raise ValueError(f"{name}: the input must be a CUDA tensor, got "
                             f"one on {inp.device}")
        return self._checked_dtype(inp)

    def _checked_dtype(self, inp):
        """The activation dtype of a call on `inp` (_activation_dtype),
        checked to be one a spec takes."""
        dtype = self._activation_dtype(inp)
        if dtype not in SPEC_DTYPES:
            raise TypeError(f"{type(self).__name__}: unsupported activation "
                            f"dtype {dtype}")
        return dtype

    def _dropout_active(self):
        """Whether the module's programs in this mode draw dropout masks:
        then each training program is seeded from torch's CUDA generator
        when it is compiled."""
        return False

    def _warn_if_recomputed_without_fp8(self, recipe, dtype):
        """A forward inside a backward pass (an activation recomputation)
        without FP8 after forwards with it: torch.utils.checkpoint
        recomputes outside tejit's autocast, so the gradients would come
        from a forward in the activation dtype. te.checkpoint keeps the
        autocast; say so once per module."""
        if recipe is not None:
            self._ran_with_fp8 = True
            return
        if (not self._uses_fp8 or not getattr(self, "_ran_with_fp8", False)
                or getattr(self, "_warned_recompute", False)
                or torch._C._current_graph_task_id() == -1):
            return
        self._warned_recompute = True
        warnings.warn(
            f"tejit: {type(self).__name__} ran a forward inside a backward "
            f"pass without FP8 after forwards with FP8: an activation "
            f"recomputation outside fp8_autocast (torch.utils.checkpoint?) "
            f"computes its gradients in {SPEC_DTYPES[dtype]}. Use "
            f"tejit.pytorch.checkpoint, which recomputes under the first "
            f"forward's autocast.", stacklevel=3)

    def _program_recipe(self, kv_cache=False):
        """The recipe of this call's program: the innermost enabled
        autocast's (fp8.get_fp8_recipe()), for modules that run GEMMs;
        for one with an attention core but no GEMM (DotProductAttention)
        only a recipe with fp8_dpa, and not in a KV-cache step
        (`kv_cache`), whose attention stays in the activation dtype; else
        None."""
        recipe = fp8.get_fp8_recipe()
        if recipe is None or self._uses_fp8:
            return recipe
        if (self._has_attention and not kv_cache
                and getattr(recipe, "fp8_dpa", False)):
            return recipe
        return None

    def _run_program(self, activations, dtype, shape_key, shape_spec, shape,
                     layer_spec=None, variant=(), is_first_microbatch=None,
                     inference_only=False):
        """Runs the module's program for this call: `activations` maps the
        program's non-parameter inputs ("input", or "query"/"key"/"value",
        "attention_mask", "rotary_pos_emb") to contiguous CUDA tensors;
        `shape_key` (hashable) and `shape_spec` (the spec's seq_length,
        batch_size, input_format) describe their shape, `shape` is reported
        in errors, `layer_spec` (called only to compile) makes the layer's
        spec and defaults to _layer_spec, and `variant`
        (hashable) is what else of this call selects the program (the
        attention modules' mask type, dropout on or off, rotary
        embeddings, attention bias). `is_first_microbatch` is TE's: FP8
        weight casts kept between forwards (CompiledProgram.use_training_weight_casts,
        _infer_with_weight_casts). `inference_only` runs the inference
        program even where autograd would record the call (a KV-cache
        step: its programs have no backward; the caller refuses training
        mode; its attention stays in the activation dtype under fp8_dpa:
        _program_recipe, _recipe_spec). With FP8 weights (fp8_model_init)
        under an FP8 recipe, the program takes them in FP8
        (_fp8_weights.py). Returns {output name: tensor} in the program's
        shapes."""
        if is_first_microbatch is None:
            # make_graphed_callables(fp8_weight_caching=True) captures every
            # module with a device flag that decides the casts (graph.py).
            is_first_microbatch = _captured_first_microbatch.get()
        cast_flag = (is_first_microbatch
                     if isinstance(is_first_microbatch, WeightCastFlag)
                     else None)
        recipe = self._program_recipe(kv_cache=inference_only)
        recipe_spec, recipe_key = _recipe_spec(
            recipe, fp8_attention=self._has_attention and not inference_only)
        fp8_weights = (_fp8_weights.weights_of(self)
                       if recipe is not None and self.primary_weights_in_fp8
                       else ())
        if fp8_weights:
            _fp8_weights.refuse_block_scaling(type(self).__name__, recipe)
            # TE's weight caching: FP8 weights have no cast to keep.
            is_first_microbatch, cast_flag = None, None
        first = next(iter(activations.values()))
        self._warn_if_recomputed_without_fp8(recipe, dtype)
        recorded = not inference_only and torch.is_grad_enabled() and any(
            self._requires_grad(tensor) for tensor in activations.values()
            if tensor is not None)
        # A checkpointed function's first forward runs the training program
        # its recomputation will run (_checkpointing.py).
        rewinds = None if inference_only else _checkpointing.recording()
        training = not inference_only and (
            recorded or self._dropout_active() or rewinds is not None)
        # Inference calls keep what the token identifies (their parameter
        # inputs, the weight casts); checked before anything compiles.
        token = self._call_token(dtype, want_token=not training)
        fuse_wgrad = (training
                      and getattr(self, "fuse_wgrad_accumulation", False))
        main_grad_dtype = (_main_grad.main_grad_dtype(self.parameters())
                           if fuse_wgrad else None)
        context_parallel = self._context_parallel()
        key = (shape_key, dtype, recipe_key, training, first.device.index,
               variant, main_grad_dtype, bool(fp8_weights), context_parallel)
        compiled = self._programs.get(key)
        if compiled is None and self._tp_communicates():
            self._required_tp_group()  # refused before compiling
        if compiled is None and context_parallel is not None:
            self._required_cp_group()  # likewise
        if compiled is None:
            # One layer, or a list of them (tejit.pytorch.ops' chains,
            # whose layers say which GEMMs fuse_wgrad_accumulation takes).
            layers = (layer_spec or self._layer_spec)()
            layers = layers if isinstance(layers, list) else [layers]
            for layer in layers:
                _gemm_layer_options(layer, fp8_weights,
                                    training and self.delay_wgrad_compute,
                                    fuse_wgrad, main_grad_dtype)
            spec = {"name": type(self).__name__,
                    "params_dtype": SPEC_DTYPES[dtype], **shape_spec,
                    "layers": layers}
            if recipe_spec is not None:
                spec["recipe"] = recipe_spec
            compiled = self._compile(key, spec, shape)
            if training and self._dropout_active():
                with self._dropout_seed_context():
                    seed = _dropout_seed(first.device)
                if context_parallel is not None:
                    seed = _args.context_parallel_seed(seed,
                                                       context_parallel[1])
                compiled.program.set_seed(seed)

        if fp8_weights and training and torch.is_grad_enabled():
            # The scales the next requantizations (optimizer steps) use.
            _fp8_weights.update_scaling(fp8_weights,
                                        _distributed.reduction_group(
                                            recipe, fp8.get_fp8_group()))
        parameters, checked = self._parameter_arguments(compiled, dtype,
                                                        token)
        supplied = activations
        if fp8_weights:
            supplied = dict(activations)
            supplied.update(_fp8_weights.companion_inputs(compiled,
                                                          parameters))
        parameters = iter(parameters)
        arguments = []
        for input_name, parameter in zip(compiled.input_names,
                                         compiled.is_parameter):
            if parameter:
                arguments.append(next(parameters))
            elif input_name in supplied:
                arguments.append(supplied[input_name])
            else:
                raise RuntimeError(f"tejit: {type(self).__name__}'s program "
                                   f"takes an input '{input_name}' that the "
                                   f"module did not supply")
        compiled.check_inputs(arguments, compiled.input_names,
                              parameters_checked=checked)
        self._fp8_meta_state.activate(compiled)
        compiled.use_amax_reduction(_distributed.reduction_group(
            recipe, fp8.get_fp8_group()))
        if compiled.tp_size > 1:
            compiled.use_tp_group(self._required_tp_group())
        if context_parallel is not None or compiled.cp_size > 1:
            compiled.use_cp_group(self._required_cp_group())
        compiled.use_forward_state_updates(torch.is_grad_enabled())
        if rewinds is not None:
            rewind = compiled.dropout_stream_rewind()
            if rewind is not None:
                rewinds.append(rewind)
        if cast_flag is not None and (compiled.training
                                      or compiled.keeps_weight_casts):
            compiled.use_weight_cast_flag(cast_flag)
        elif compiled.training:
            compiled.use_training_weight_casts(is_first_microbatch)
        if recorded:
            slots = [self._main_grad_slot(compiled.input_names[index])
                     for index in compiled.main_grad_inputs]
            outputs = _autograd.ProgramFunction.apply(
                compiled, slots,
                self._queue() if self.delay_wgrad_compute else None,
                *arguments)
            if not isinstance(outputs, tuple):
                outputs = (outputs,)
        elif compiled.training:
            outputs = compiled.forward_unrecorded(arguments)
        elif compiled.keeps_weight_casts and cast_flag is not None:
            outputs = compiled.infer(arguments)
        elif compiled.keeps_weight_casts:
            outputs = self._infer_with_weight_casts(compiled, arguments,
                                                    token,
                                                    is_first_microbatch)
        else:
            outputs = compiled.infer(arguments)
        return dict(zip(compiled.output_names, outputs))

    def _parameter_arguments(self, compiled, dtype, token):
        """(The tensors `compiled` takes for its parameter inputs, in its
        order; whether check_inputs passed them before). An inference call
        (`token`: _call_token's) reuses those of
        the previous inference call of the same program while the token and
        dtype are unchanged and torch.autocast casts nothing: finding them
        (submodules, the fused QKV rows) is much of a small forward's host
        time. Calls that autograd records look them up every time (each
        builds its own graph)."""
        cached = self._inference_parameters
        if (token is not None and cached is not None
                and cached[0] is compiled and cached[1] == dtype
                and cached[2] == token):
            return cached[3], True
        parameters = [self._argument(name, dtype, fp8)
                      for name, fp8 in zip(compiled.parameter_names,
                                           compiled.parameter_fp8)]
        # Under autocast the arguments are cast copies: not kept alive.
        keep = token is not None and _torch_autocast_dtype() is None
        self._inference_parameters = ((compiled, dtype, token, parameters)
                                      if keep else None)
        return parameters, False

    def _infer_with_weight_casts(self, compiled, arguments, token,
                                 is_first_microbatch):
        """An inference forward of a program that keeps its weight casts
        (the FP8 copies of the weights) between forwards. TE's
        `is_first_microbatch`: None reuses them while the parameters are
        unchanged (their addresses and versions), outside CUDA-graph
        capture; True casts again; False reuses them also in capture (the
        graph's replays read the casts the latest casting forward left):
        the caller promises the weights have not changed since. `token`
        is the parameters' _call_token."""
        capturing = compiled.use_weight_casts(token, is_first_microbatch)
        outputs = compiled.infer(arguments)
        if (not compiled.weight_casts_done(token, capturing) and capturing
                and not getattr(self, "_warned_capture_casts", False)):
            self._warned_capture_casts = True
            warnings.warn(
                f"tejit: {type(self).__name__} was captured in a CUDA graph "
                f"with is_first_microbatch=False, but it had no FP8 weight "
                f"casts to reuse (no forward cast them for these parameters "
                f"and FP8 state outside the capture), so the graph casts the "
                f"weights at every replay. Run a forward with "
                f"is_first_microbatch=True (or None) before capturing.",
                stacklevel=4)
        return outputs

    # --- state_dict, copies --------------------------------------------------

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name, tensor in self._fp8_meta_state.tensors().items():
            destination[prefix + name] = tensor

    def _load_from_state_dict(self, state_dict, prefix, local_metadata,
                              strict, missing_keys, unexpected_keys,
                              error_msgs):
        state_dict = skip_te_extra_state(state_dict, prefix)
        meta_prefix = prefix + _meta.PREFIX
        meta_keys = [key for key in state_dict if key.startswith(meta_prefix)]
        if meta_keys:
            self._fp8_meta_state.load(
                {key[len(prefix):]: state_dict[key] for key in meta_keys},
                prefix, unexpected_keys, error_msgs)
            # The dotted names would read as a child module's to torch's
            # strict check: give it the rest only.
            taken = set(meta_keys)
            state_dict = {key: value for key, value in state_dict.items()
                          if key not in taken}
        super()._load_from_state_dict(state_dict, prefix, local_metadata,
                                      strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def __getstate__(self):
        # Programs own device memory through raw handles: a copy (deepcopy,
        # pickle) takes the FP8 state as tensors and compiles its own.
        state = self.__dict__.copy()
        state["_programs"] = {}
        state["_fp8_meta_state"] = self._fp8_meta_state.detached()
        state["_zero_biases"] = {}
        state["_inference_parameters"] = None
        return state
