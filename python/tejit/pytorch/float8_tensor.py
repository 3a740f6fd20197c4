"""Float8Tensor: an FP8 weight held as a torch.Tensor (Transformer Engine's
`transformer_engine.pytorch.float8_tensor.Float8Tensor`), what
`fp8_model_init` (fp8.py) makes the modules' GEMM weights, and what TE
2.x's quantizers make (tensor/float8_tensor.py: any shape, E4M3 or E5M2,
the scaling state a QuantizerScaling over the quantizer, possibly
columnwise-only: `_data` None, `_transpose` TE's [last, *leading]).

The tensor is a wrapper: to PyTorch it is a tensor of the weight's shape
and nominal dtype (the module's params_dtype) on its device, so autograd,
nn.Parameter, optimizers and state_dicts take it where a bf16 weight would
be; its memory is `_data`, the weight quantized to E4M3 (1 byte per
element), with `_scale_inv`, the float32 [1] reciprocal of the scale it was
quantized with (value = data * scale_inv), and `_scaling`, the weight's own
scaling state (DelayedScalingState or CurrentScalingState below). A
training program under an FP8 recipe reads `_data` and `_scale_inv`
directly, and `transpose_data()` ([in, out], made on first use and
refreshed by every requantization afterwards) for its backward's dgrad
GEMM (module/base.py); tejit's core takes `_data`'s address for the tensor
(tejit/_tensors.py).

What torch does with it (__torch_dispatch__): `detach` (nn.Parameter,
`.data`, state_dict) gives a Float8Tensor that shares the data and state;
`copy_` quantizes its source into the tensor (a Float8Tensor source is
copied as it is: data, scale_inv and scaling state, as TE's copy_ does);
every other in-place op (an optimizer's add_, addcdiv_, mul_, ...)
dequantizes, runs, and quantizes the result back into the tensor; any other
op runs on the dequantized value and returns plain tensors (printing,
`.float()`, `zeros_like` for an optimizer's state, comparisons). In-place
ops through a view (`w[0].add_(1)`, `w[0] = x`) act on a dequantized copy
and do not reach the tensor; whole-tensor in-place ops and copy_ do.
`w.data = tensor` (Module.to()/.half()/.cuda() do it) quantizes `tensor`
into new FP8 memory of its device and takes its dtype as the nominal one,
as TE's does.

Quantization runs tejit's own cast kernel (_weight_casts.py: one read of
the weight writes the data and the transpose) and never waits for the
GPU (no .item(), no host branch on a device value): scales and amaxes
stay device tensors, the DelayedScaling update uses torch.where. torch.save / torch.load (pickled through Float8Tensor
itself, which tejit.pytorch adds to torch.serialization's safe globals so
that weights_only=True loads too) and copy.deepcopy keep data, scale_inv
and scaling state bit for bit.
"""
import copy

import torch
from torch.utils._pytree import tree_map

from ..common import recipe as _recipe
from . import _weight_casts
from .constants import to_dtype

__all__ = ["Float8Tensor", "QuantizedTensor", "DelayedScalingState",
           "CurrentScalingState"]

aten = torch.ops.aten

# The weights' format under every recipe (HYBRID's forward format too).
FP8_DTYPE = torch.float8_e4m3fn


def _reciprocal(scale):
    """1 / scale in float32, correctly rounded: the scale_inv."""
    return torch.ones_like(scale) / scale


def update_all(states):
    """DelayedScalingState.update of every state in `states`, states of
    one margin, history length, algorithm and device in one kernel."""
    batches = {}
    for state in states:
        key = (state.margin, state.amax_history_len,
               state.amax_compute_algo, state.scale.device)
        batches.setdefault(key, []).append(state)
    for (margin, _, algo, _), batch in batches.items():
        _weight_casts.update_delayed([s.amax_history for s in batch],
                                     [s.scale for s in batch], margin,
                                     algo == "most_recent")


class DelayedScalingState:
    """DelayedScaling of one weight (shared/FP8.md): `scale` [1] (starts
    1.0) and `amax_history` [amax_history_len] (zeros; element 0 holds the
    amaxes of the quantizations since the last update, max-reduced).
    quantize() scales with the current scale and records the amax;
    update() (once before each training forward of the module under FP8)
    computes the next scale from the history, as TE does at its autocast's
    exit."""

    kind = "DelayedScaling"

    def __init__(self, margin=0, amax_history_len=1024,
                 amax_compute_algo="max", device=None, scale=None,
                 amax_history=None):
        if callable(amax_compute_algo):
            raise NotImplementedError(
                "DelayedScaling: a callable amax_compute_algo is not "
                "supported for FP8 weights; use 'max' or 'most_recent'")
        if amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"amax_compute_algo must be 'max' or "
                             f"'most_recent', got {amax_compute_algo!r}")
        self.margin = int(margin)
        self.amax_history_len = int(amax_history_len)
        self.amax_compute_algo = amax_compute_algo
        self.scale = (torch.ones(1, dtype=torch.float32, device=device)
                      if scale is None else scale)
        self.amax_history = (
            torch.zeros(self.amax_history_len, dtype=torch.float32,
                        device=device)
            if amax_history is None else amax_history)

    def quantize(self, src, data, scale_inv, transpose=None):
        """Quantizes `src` (contiguous, on data's device) into `data` (and
        `transpose`, unless None) with the current scale, writes 1/scale
        into `scale_inv`, and max-reduces |src|'s amax into this step's
        history slot (several quantizations in one step share it, as TE's
        atomic max does)."""
        amax = torch.empty(1, dtype=torch.float32, device=data.device)
        _weight_casts.cast_delayed(src, self.scale, data, transpose, amax)
        slot = self.amax_history[:1]
        torch.maximum(slot, amax, out=slot)
        scale_inv.copy_(_reciprocal(self.scale))

    def update(self):
        """TE's update (shared/FP8.md), by the layer programs' own kernel:
        with last = history[0] (0: nothing was quantized since, nothing
        changes), amax = max(history[1:] and last) for "max" (NaN entries
        ignored), last for "most_recent"; the history shifts (history[i] =
        history[i + 1] for 1 <= i < len - 1, history[len - 1] = last,
        history[0] = 0), and scale = 448 * 2^-margin / amax when amax is
        finite and > 0 (FLT_MAX when that overflows), else the old scale.
        On the device, no synchronization."""
        update_all([self])

    def state(self):
        """The state as plain values and tensors (what a pickle holds)."""
        return (self.kind, self.margin, self.amax_history_len,
                self.amax_compute_algo, self.scale, self.amax_history)

    def copy_(self, other):
        """Takes `other`'s scale, and its history when of the same length
        (else the history starts afresh, as the modules' FP8 meta state
        does after a change of amax_history_len)."""
        if not isinstance(other, DelayedScalingState):
            return
        self.scale.copy_(other.scale)
        if other.amax_history.shape == self.amax_history.shape:
            self.amax_history.copy_(other.amax_history)

    def to(self, device):
        """A copy on `device`."""
        return DelayedScalingState(
            self.margin, self.amax_history_len, self.amax_compute_algo,
            scale=self.scale.to(device, copy=True),
            amax_history=self.amax_history.to(device, copy=True))

    def clone(self):
        return self.to(self.scale.device)

    def __repr__(self):
        return (f"DelayedScalingState(margin={self.margin}, "
                f"amax_history_len={self.amax_history_len}, "
                f"amax_compute_algo={self.amax_compute_algo!r})")


class CurrentScalingState:
    """Float8CurrentScaling of one weight: each quantization scales by
    448 / the amax of what it quantizes (1.0 for an amax of 0, inf or NaN;
    FLT_MAX when the quotient overflows; with `power_2_scale`, rounded down
    to a power of 2 by masking the mantissa). `scale` [1] is the last
    quantization's. update() does nothing."""

    kind = "Float8CurrentScaling"

    def __init__(self, power_2_scale=False, device=None, scale=None):
        self.power_2_scale = bool(power_2_scale)
        self.scale = (torch.ones(1, dtype=torch.float32, device=device)
                      if scale is None else scale)

    def quantize(self, src, data, scale_inv, transpose=None):
        """The amax of `src` now, the scale from it (the layer programs'
        own te.compute_scale), then the cast into `data` (and `transpose`,
        unless None); writes `scale` and `scale_inv`."""
        _weight_casts.cast_current(src, self.power_2_scale, data, transpose,
                                   self.scale, scale_inv)

    def update(self):
        pass

    def state(self):
        return (self.kind, self.power_2_scale, self.scale)

    def copy_(self, other):
        if isinstance(other, CurrentScalingState):
            self.scale.copy_(other.scale)

    def to(self, device):
        return CurrentScalingState(self.power_2_scale,
                                   scale=self.scale.to(device, copy=True))

    def clone(self):
        return self.to(self.scale.device)

    def __repr__(self):
        return f"CurrentScalingState(power_2_scale={self.power_2_scale})"


class QuantizerScaling:
    """The scaling state of a Float8Tensor made by a quantizer
    (tensor/float8_tensor.py): quantizations go through the quantizer,
    which owns the scale and amax (TE's Float8Tensor._quantizer)."""

    kind = "Quantizer"

    def __init__(self, quantizer):
        self.quantizer = quantizer

    def quantize(self, src, data, scale_inv, transpose=None):
        self.quantizer._quantize_into(src, data, scale_inv, transpose)

    def update(self):
        pass

    def state(self):
        return (self.kind, self.quantizer)

    def copy_(self, other):
        pass  # the quantizer's scale and amax are the caller's

    def to(self, device):
        return QuantizerScaling(self.quantizer._to(device))

    def clone(self):
        return self  # copies share the quantizer, as TE's clone does

    def __repr__(self):
        return f"QuantizerScaling({self.quantizer!r})"


def scaling_for(recipe, device=None):
    """A fresh scaling state for a weight quantized under `recipe`
    (DelayedScaling or Float8CurrentScaling; None: DelayedScaling();
    Float8BlockScaling: NotImplementedError)."""
    if recipe is None:
        recipe = _recipe.DelayedScaling()
    if isinstance(recipe, _recipe.DelayedScaling):
        recipe.to_spec()  # validates (a callable algorithm is refused)
        return DelayedScalingState(recipe.margin, recipe.amax_history_len,
                                   recipe.amax_compute_algo, device)
    if isinstance(recipe, _recipe.Float8CurrentScaling):
        return CurrentScalingState(recipe._power_2_scale(), device)
    if isinstance(recipe, _recipe.Float8BlockScaling):
        raise NotImplementedError(
            "Float8Tensor weights under Float8BlockScaling are not supported "
            "by tejit: a Float8Tensor holds one per-tensor scale, block "
            "scaling one per 128 x 128 tile; use DelayedScaling or "
            "Float8CurrentScaling")
    raise TypeError(f"FP8 weights take a DelayedScaling or "
                    f"Float8CurrentScaling recipe, not "
                    f"{type(recipe).__module__}.{type(recipe).__name__}")


def _scaling_from_state(state):
    """The scaling state of a `state()` tuple (unpickling)."""
    if not isinstance(state, tuple) or not state:
        raise ValueError(f"not a Float8Tensor scaling state: {state!r}")
    if state[0] == DelayedScalingState.kind and len(state) == 6:
        _, margin, length, algo, scale, history = state
        return DelayedScalingState(margin, length, algo, scale=scale,
                                   amax_history=history)
    if state[0] == CurrentScalingState.kind and len(state) == 3:
        return CurrentScalingState(state[1], scale=state[2])
    if state[0] == QuantizerScaling.kind and len(state) == 2:
        return QuantizerScaling(state[1])
    raise ValueError(f"not a Float8Tensor scaling state: {state[0]!r}")


def matrix_shape(shape):
    """TE's 2-D view of a tensor of `shape`: [prod(leading dims), last]
    (a 0-d tensor is [1, 1])."""
    if len(shape) == 0:
        return 1, 1
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    return rows, shape[-1]


def transpose_shape(shape):
    """TE's shape of the transpose (columnwise data) of a tensor of
    `shape`: [last, *leading] (the 2-D view transposed)."""
    return tuple(shape[-1:]) + tuple(shape[:-1])


def _transposed(data):
    """The 2-D view of `data` transposed, contiguous, in TE's transpose
    shape (as bytes: copies of any FP8 dtype)."""
    matrix = data.view(torch.uint8).reshape(matrix_shape(data.shape))
    return (matrix.t().contiguous().view(data.dtype)
            .reshape(transpose_shape(data.shape)))


class _Store:
    """What a Float8Tensor and its aliases (detach(), nn.Parameter,
    state_dict entries) share: the FP8 data, scale_inv, the scaling state,
    the transpose once made, the high-precision initial value if kept.
    `transpose_from`: for a tensor derived from another one per call (the
    interleaved QKV weight's rows reordered), what makes its transpose
    from the other's kept one (None: from the data)."""

    __slots__ = ("data", "scale_inv", "scaling", "transpose",
                 "high_precision_init_val", "transpose_from",
                 "transpose_stale")

    def __init__(self, data, scale_inv, scaling, transpose=None,
                 high_precision_init_val=None):
        self.data = data
        self.scale_inv = scale_inv
        self.scaling = scaling
        self.transpose = transpose
        self.high_precision_init_val = high_precision_init_val
        self.transpose_from = None
        # The data changed outside quantize_ (a distributed optimizer wrote
        # shards of it: tensor/utils.py): the kept transpose is remade, in
        # place, on its next use.
        self.transpose_stale = False

    def shape(self):
        """The tensor's shape: the data's, else the transpose's undone
        (a columnwise-only tensor, update_usage(rowwise_usage=False))."""
        if self.data is not None:
            return self.data.shape
        shape = self.transpose.shape
        return torch.Size(tuple(shape[1:]) + tuple(shape[:1]))

    def fp8(self):
        """The FP8 data (or, columnwise-only, the transpose)."""
        return self.data if self.data is not None else self.transpose

    def clone(self, memo=None):
        """An independent copy (deepcopy). With deepcopy's `memo`, a
        scale_inv and scaling state that several tensors share (split QKV
        weights) stay shared among the copies."""
        memo = {} if memo is None else memo

        def once(value):
            if id(value) not in memo:
                memo[id(value)] = value.clone()
            return memo[id(value)]

        return _Store(None if self.data is None else self.data.clone(),
                      once(self.scale_inv),
                      once(self.scaling),
                      None if self.transpose is None
                      else self.transpose.clone(),
                      None if self.high_precision_init_val is None
                      else self.high_precision_init_val.clone())

    def fresh(self, shape, device):
        """New FP8 memory of `shape` on `device` to quantize into, with a
        copy of the scaling state there (`w.data = tensor`)."""
        return _Store(torch.empty(shape, dtype=self.fp8().dtype,
                                  device=device),
                      torch.ones(1, dtype=torch.float32, device=device),
                      self.scaling.to(device), None,
                      self.high_precision_init_val)


# Per aten overload: the positions and names of the arguments it writes.
_WRITTEN = {}


def _written_arguments(func):
    written = _WRITTEN.get(func)
    if written is None:
        written = _WRITTEN[func] = tuple(
            (index, argument.name)
            for index, argument in enumerate(func._schema.arguments)
            if argument.alias_info is not None
            and argument.alias_info.is_write)
    return written


def _quantized_leaves(value):
    """The quantized tensors in `value` (a tensor or a list of them)."""
    if isinstance(value, QuantizedTensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, QuantizedTensor)]
    return []


def run_dequantized(func, args, kwargs):
    """Runs aten op `func` with every quantized tensor argument (a
    Float8Tensor, a Float8BlockwiseQTensor: `_dequantized()`, `quantize_`)
    as its dequantized value; those the op writes are quantized back from
    it afterwards (and stand for it in the result)."""
    written = []
    for index, name in _written_arguments(func):
        value = args[index] if index < len(args) else kwargs.get(name)
        written += _quantized_leaves(value)
    plain = {}

    def unwrap(value):
        if not isinstance(value, QuantizedTensor):
            return value
        if id(value) not in plain:
            plain[id(value)] = (value, value._dequantized())
        return plain[id(value)][1]

    args, kwargs = tree_map(unwrap, (args, kwargs))
    result = func(*args, **kwargs)
    if not written:
        return result
    back = {}
    for tensor in written:
        value = plain[id(tensor)][1]
        tensor.quantize_(value)
        back[id(value)] = tensor
    return tree_map(lambda value: back.get(id(value), value)
                    if isinstance(value, torch.Tensor) else value,
                    result)


class QuantizedTensor(torch.Tensor):
    """TE's base class of tensors holding quantized data
    (`transformer_engine.pytorch.tensor.quantized_tensor.QuantizedTensor`,
    also importable from tejit.pytorch.tensor.quantized_tensor): here for
    isinstance checks; tejit's kinds are Float8Tensor and
    Float8BlockwiseQTensor (tensor/float8_blockwise_tensor.py), each with
    `_dequantized(dtype=None)` and `quantize_(src)` (run_dequantized)."""

    __torch_function__ = torch._C._disabled_torch_function_impl


class Float8Tensor(QuantizedTensor):
    """A weight in FP8 (E4M3) with its scale, standing for a tensor of the
    nominal dtype (see the module docstring). Made by the modules under
    fp8_model_init, or by Float8Tensor.from_tensor(tensor, recipe).
    Fields (TE's names): `_data` (torch.float8_e4m3fn, contiguous, the
    tensor's shape), `_scale_inv` (float32 [1]), `_transpose` (the data
    transposed, or None until transpose_data() makes it), `_scaling` (a
    DelayedScalingState or CurrentScalingState)."""

    # Results are plain tensors unless __torch_dispatch__ says otherwise
    # (torch.Tensor's default would make every result a Float8Tensor).
    __torch_function__ = torch._C._disabled_torch_function_impl

    def __new__(cls, data, scale_inv, scaling, dtype, requires_grad=False,
                transpose=None, high_precision_init_val=None,
                is_param=False):
        """A Float8Tensor over FP8 `data` (its shape and device are the
        tensor's) with `scale_inv` and `scaling` (a scaling state, or its
        state() tuple), of nominal `dtype`. Unpickling calls this too
        (`is_param`: it was an nn.Parameter)."""
        if isinstance(scaling, tuple):
            scaling = _scaling_from_state(scaling)
        return cls._from_store(
            _Store(data, scale_inv, scaling, transpose,
                   high_precision_init_val),
            dtype, requires_grad, is_param)

    @classmethod
    def _from_store(cls, store, dtype, requires_grad=False, is_param=False):
        self = torch.Tensor._make_wrapper_subclass(
            cls, store.shape(), dtype=dtype, device=store.fp8().device,
            requires_grad=requires_grad)
        self._store = store
        if is_param:
            self._is_param = True
        return self

    @classmethod
    def from_tensor(cls, tensor, recipe=None, requires_grad=False,
                    preserve_high_precision_init_val=False, shared=None):
        """`tensor` (high precision) quantized into a new Float8Tensor of
        its shape, dtype and device, with a fresh scaling state for
        `recipe` (DelayedScaling, the default, quantizes with scale 1.0
        first, as TE does; Float8CurrentScaling with 448 / amax;
        Float8BlockScaling is a NotImplementedError). With
        `preserve_high_precision_init_val`, `tensor` is kept on the CPU
        (get_high_precision_init_val()). `shared`: a dict through which
        tensors made with it share one scale_inv and scaling state (the
        parts of one fused weight: split QKV weights), made by the first."""
        tensor = tensor.detach()
        data = torch.empty(tensor.shape, dtype=FP8_DTYPE,
                           device=tensor.device)
        shared = {} if shared is None else shared
        if "scaling" not in shared:
            shared["scale_inv"] = torch.ones(1, dtype=torch.float32,
                                             device=tensor.device)
            shared["scaling"] = scaling_for(recipe, tensor.device)
        result = cls(data, shared["scale_inv"], shared["scaling"],
                     tensor.dtype, requires_grad)
        result.quantize_(tensor)
        if preserve_high_precision_init_val:
            result._keep_high_precision_init_val(tensor)
        return result

    # --- fields (shared with aliases) -------------------------------------

    @property
    def _data(self):
        return self._store.data

    @property
    def _scale_inv(self):
        return self._store.scale_inv

    @property
    def _scaling(self):
        return self._store.scaling

    @property
    def _transpose(self):
        return self._store.transpose

    @property
    def _transpose_invalid(self):
        """TE's flag: no transpose kept, or one to be made again."""
        store = self._store
        return store.transpose is None or store.transpose_stale

    @property
    def _fp8_dtype(self):
        """The FP8 format as TE's DType (kFloat8E4M3 or kFloat8E5M2)."""
        return to_dtype(self._store.fp8().dtype)

    @property
    def _quantizer(self):
        """The quantizer that quantize_ uses (TE's): the one that made the
        tensor, or for an fp8_model_init weight a quantizer over its
        scaling state's own tensors (its scale; under DelayedScaling its
        amax is the history's pending slot), made per access."""
        scaling = self._store.scaling
        if isinstance(scaling, QuantizerScaling):
            return scaling.quantizer
        from .tensor.float8_tensor import quantizer_of_scaling
        return quantizer_of_scaling(scaling)

    @_quantizer.setter
    def _quantizer(self, quantizer):
        if quantizer is None or not hasattr(quantizer, "_quantize_into"):
            raise TypeError(f"Float8Tensor._quantizer must be a tejit "
                            f"quantizer, got {quantizer!r}")
        self._store.scaling = QuantizerScaling(quantizer)

    def _get_quantizer(self):
        return self._quantizer

    # --- values ------------------------------------------------------------

    def dequantize(self, dtype=None):
        """The value, data * scale_inv (in float32), as a plain tensor of
        `dtype` (default: the nominal dtype). With autograd on and a
        tensor that requires grad, the gradient of the result goes to the
        tensor as it is (TE's)."""
        if torch.is_grad_enabled() and self.requires_grad:
            return Dequantized.apply(self, dtype)
        return self._dequantized(dtype)

    def _dequantized(self, dtype=None):
        dtype = self.dtype if dtype is None else dtype
        store = self._store
        data = store.data
        if data is None:  # columnwise only: the transpose's 2-D view, back
            rows, cols = matrix_shape(self.shape)
            data = store.transpose.reshape(cols, rows).t().reshape(self.shape)
        # In float32, rounded once to `dtype` (a bf16 tensor times a float32
        # tensor would round scale_inv to bf16 first).
        return (data.float() * store.scale_inv).to(dtype)

    def quantize_(self, src, *, noop_flag=None):
        """Quantizes `src` (a tensor of this shape, or broadcastable to it;
        a quantized tensor is dequantized first) into this tensor, in place,
        with its scaling state; refreshes the transpose when it has one.
        `noop_flag` (TE's: a float32 [1] tensor, 1 = skip) is read on the
        host. Returns self."""
        if noop_flag is not None and bool(noop_flag.item() == 1.0):
            return self
        if isinstance(src, QuantizedTensor):
            src = src._dequantized()
        with torch.no_grad():
            # The casts read bf16, fp16 or fp32.
            dtype = (src.dtype if src.dtype in (torch.bfloat16, torch.float16,
                                                torch.float32)
                     else self.dtype)
            src = src.detach().to(self.device, dtype)
            if src.shape != self.shape:
                src = src.expand(self.shape)
            store = self._store
            store.scaling.quantize(src.contiguous(), store.data,
                                   store.scale_inv, store.transpose)
            store.transpose_stale = False
        return self

    def update_usage(self, rowwise_usage=None, columnwise_usage=None):
        """TE's: keeps or drops the data (rowwise) and the transpose
        (columnwise); what is asked for and missing is made from the other
        (bytes moved, values unchanged). None leaves a usage as it is;
        dropping both is an error."""
        store = self._store
        rowwise = (store.data is not None if rowwise_usage is None
                   else bool(rowwise_usage))
        columnwise = (store.transpose is not None if columnwise_usage is None
                      else bool(columnwise_usage))
        if not rowwise and not columnwise:
            raise ValueError("Float8Tensor.update_usage: a tensor needs "
                             "rowwise or columnwise data (or both)")
        if rowwise and store.data is None:
            rows, cols = matrix_shape(self.shape)
            fp8 = store.transpose
            store.data = (fp8.view(torch.uint8).reshape(cols, rows).t()
                          .contiguous().view(fp8.dtype).reshape(self.shape))
        if columnwise:
            self.transpose_data()
        else:
            store.transpose = None
        if not rowwise:
            store.data = None

    def clone(self, *, memory_format=None):
        """A Float8Tensor with copies of the data, transpose and scale_inv,
        sharing the scaling state (quantizer), as TE's clone."""
        store = self._store
        copy_ = _Store(None if store.data is None else store.data.clone(),
                       store.scale_inv.clone(), store.scaling,
                       None if store.transpose is None
                       else store.transpose.clone())
        copy_.transpose_stale = store.transpose_stale
        return Float8Tensor._from_store(copy_, self.dtype)

    def transpose_data(self):
        """The FP8 data transposed (TE's transpose shape: [in, out] for a
        weight; contiguous), which a training program's backward reads:
        made on first use and kept (every quantize_ refreshes it)."""
        store = self._store
        if store.data is None:
            return store.transpose
        if store.transpose is None:
            store.transpose = (_transposed(store.data)
                               if store.transpose_from is None
                               else store.transpose_from())
        elif store.transpose_stale:
            self._refresh_transpose()
        return store.transpose

    def _refresh_transpose(self):
        """The kept transpose made again from the data, in place (its
        memory stays: CUDA graphs may read it)."""
        store = self._store
        if store.transpose is not None and store.data is not None:
            rows, cols = matrix_shape(store.data.shape)
            with torch.no_grad():
                store.transpose.view(torch.uint8).view(cols, rows).copy_(
                    store.data.view(torch.uint8).view(rows, cols).t())
        store.transpose_stale = False

    def _copy_from(self, src):
        """copy_: a Float8Tensor source is taken as it is (data, scale_inv,
        scaling state), anything else quantized."""
        if not isinstance(src, Float8Tensor):
            self.quantize_(src)
            return
        store, other = self._store, src._store
        if store is other:
            return
        if store.data is None or other.data is None:
            self.quantize_(src)
            return
        with torch.no_grad():
            store.data.copy_(other.data)
            store.scale_inv.copy_(other.scale_inv)
            store.scaling.copy_(other.scaling)
        self._refresh_transpose()

    # --- the initial high-precision value ------------------------------------

    def _keep_high_precision_init_val(self, tensor):
        self._store.high_precision_init_val = tensor.detach().to(
            "cpu", copy=True)

    def get_high_precision_init_val(self):
        """The initial high-precision value (a CPU tensor) that
        fp8_model_init(preserve_high_precision_init_val=True) kept, for
        initializing master weights; None when none is kept."""
        return self._store.high_precision_init_val

    def clear_high_precision_init_val(self):
        """Drops the kept initial value."""
        self._store.high_precision_init_val = None

    # --- what tejit's core reads ---------------------------------------------

    def _tejit_data(self):
        """The tensor whose memory a program reads for this one (FP8)."""
        return self._store.data

    def data_ptr(self):
        return self._store.fp8().data_ptr()

    # --- torch ---------------------------------------------------------------

    def _alias(self):
        return Float8Tensor._from_store(self._store, self.dtype)

    def _get_data(self):
        return torch.Tensor.data.__get__(self)

    def _set_data(self, tensor):
        """`w.data = tensor`: a Float8Tensor is shared; another tensor is
        quantized, with a copy of this weight's scaling state, into new FP8
        memory on its device. The nominal dtype, shape and device become
        the tensor's (TE's Float8Tensor does the same)."""
        if tensor is self:
            return
        if isinstance(tensor, Float8Tensor):
            self._store = tensor._store
        else:
            self._store = self._store.fresh(tensor.shape, tensor.device)
            self.quantize_(tensor)
        if (tensor.dtype != self.dtype or tensor.shape != self.shape
                or tensor.device != self.device):
            # torch's own setter, given a wrapper of the new metadata (no
            # memory), updates the tensor's dtype, shape and device.
            torch.Tensor.data.__set__(self, torch.Tensor._make_wrapper_subclass(
                Float8Tensor, tensor.shape, dtype=tensor.dtype,
                device=tensor.device))

    data = property(_get_data, _set_data)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten.detach.default or func is aten.alias.default:
            return args[0]._alias()
        if func is aten.copy_.default and isinstance(args[0], Float8Tensor):
            args[0]._copy_from(args[1])
            return args[0]
        return run_dequantized(func, args, kwargs)

    def __repr__(self, *, tensor_contents=None):
        return (f"Float8Tensor(fp8_dtype={self._fp8_dtype.name}, "
                f"scale_inv={self._scale_inv.item()}, "
                f"data={self._dequantized()!r}"
                f"{', requires_grad=True' if self.requires_grad else ''})")

    def __reduce_ex__(self, protocol):
        # Through the class itself (torch.serialization's weights_only
        # unpickler then needs only Float8Tensor allowed); the transpose
        # is made again on first use, the initial value is not saved.
        columnwise_only = self._data is None
        return (Float8Tensor, (self._data, self._scale_inv,
                               self._scaling.state(), self.dtype,
                               self.requires_grad,
                               self._transpose if columnwise_only else None,
                               None,
                               bool(getattr(self, "_is_param", False))))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            result = Float8Tensor._from_store(self._store.clone(memo),
                                              self.dtype,
                                              self.requires_grad)
        memo[id(self)] = result
        for key, value in self.__dict__.items():
            if key != "_store":
                result.__dict__[key] = copy.deepcopy(value, memo)
        return result


class Dequantized(torch.autograd.Function):
    """Dequantized.apply(tensor, dtype): the Float8Tensor's value in
    `dtype` (None: its nominal one), a plain tensor, whose gradient goes
    to the tensor as it is, in its nominal dtype (dequantize under
    autograd; the modules' dequantized weights)."""

    @staticmethod
    def forward(ctx, tensor, dtype):
        ctx.dtype = tensor.dtype
        return tensor._dequantized(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype), None


# torch.load(weights_only=True) (torch's default since 2.6) rebuilds a
# Float8Tensor by calling the class: allow it (it builds tensors only).
_add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
if _add_safe_globals is not None:
    _add_safe_globals([Float8Tensor])
