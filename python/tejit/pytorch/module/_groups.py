"""The parameter groups of the attention modules: what TE holds in its
sublayers `layernorm_qkv` (or `qkv`) and `proj`, with TE's state_dict names
and initialization. A group is not callable: the attention module's one
program reads its tensors through `_argument`.

The compiler's fused QKV weight is [(heads + 2 * groups) * kv_channels,
hidden], rows of q, then k, then v (docs/spec-format.md). TE registers it
as
- fuse_qkv_params=False (TE's default): `query_weight`, `key_weight`,
  `value_weight` (and `*_bias`). Here they are views of one contiguous
  buffer, rows q | k | v, so the program gets the buffer itself, without a
  copy, while the three stay adjacent (_AdjacentRows); after something
  replaced one of them (load_state_dict(assign=True), ...) they are
  concatenated per call instead.
- fuse_qkv_params=True: `weight` and `bias`, in TE's layout:
  qkv_weight_interleaved=True (TE's default then) interleaves the heads by
  key/value group, rows [groups, heads / groups + 2, kv_channels] (a
  group's queries, its key, its value), which is permuted into q | k | v
  per call (differentiably); with False the rows already are q | k | v.

With tensor parallelism the groups hold this rank's shard, built with its
head and group counts (heads / tp_size, groups / tp_size): the rows above
are this rank's q heads, k groups and v groups (TE's local layout), and
`proj.weight` is [hidden, heads / tp_size * kv_channels].

Under fp8_model_init (fp8.py) a group's GEMM weights (`proj.weight`, the
fused QKV `weight`) are Float8Tensors, as the modules' are
(_fp8_weights.py); the interleaved fused weight's FP8 rows are permuted
into q | k | v per call. Split Q/K/V weights are Float8Tensors sharing
one scale (DelayedScaling), joined per call.
"""
import torch

from .. import fp8 as _fp8
from ..float8_tensor import Float8Tensor
from . import _fp8_weights, _main_grad
from ._attention_specs import QKV_SPLIT
from .base import rng_fork, skip_te_extra_state


class _AdjacentRows(torch.autograd.Function):
    """_AdjacentRows.apply(*parts): the rows of `parts` (tensors that lie
    back to back in one storage) as one tensor, without a copy; the
    gradient splits back into the parts."""

    @staticmethod
    def forward(ctx, *parts):
        ctx.rows = [part.shape[0] for part in parts]
        # No gradient stays None for every part (a delayed wgrad's, which
        # backward_dw delivers later), not zeros.
        ctx.set_materialize_grads(False)
        first = parts[0]
        shape = (sum(ctx.rows), *first.shape[1:])
        return first.detach().as_strided(shape, first.stride(),
                                         first.storage_offset())

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return (None,) * len(ctx.rows)
        return tuple(grad.split(ctx.rows, dim=0))


def _storage_address(tensor):
    """Where `tensor`'s storage starts (untyped_storage: torch >= 2.0)."""
    storage = getattr(tensor, "untyped_storage", None)
    return (storage() if storage else tensor.storage()).data_ptr()


def adjacent(parts):
    """Whether `parts` are contiguous tensors of one dtype and storage, each
    starting where the previous one ends, with equal trailing dims."""
    first = parts[0]
    if first.device.type == "meta" or not first.is_contiguous():
        return False
    storage = _storage_address(first)
    end = first.data_ptr() + first.numel() * first.element_size()
    for part in parts[1:]:
        if (part.dtype != first.dtype or part.device != first.device
                or not part.is_contiguous()
                or part.shape[1:] != first.shape[1:]
                or _storage_address(part) != storage
                or part.data_ptr() != end):
            return False
        end += part.numel() * part.element_size()
    return True


def pack_rows(parts):
    """Packs `parts` (parameters of one dtype and device, equal trailing
    dims) into one new buffer, rows back to back, when they are not
    adjacent already, keeping the Parameter objects (an optimizer may hold
    them): joined_rows then gives the buffer itself. Leaves them as they
    are when they differ in dtype or device, or are on the meta device."""
    if adjacent(parts):
        return
    if (len({(p.dtype, p.device) for p in parts}) != 1
            or parts[0].device.type == "meta"):
        return
    with torch.no_grad():
        buffer = torch.cat([p.data for p in parts])
    for part, view in zip(parts, buffer.split([p.shape[0] for p in parts])):
        part.data = view


class RepacksParts:
    """Mixin (before torch.nn.Module in the bases) of a module whose
    parameters are views of one buffer: `_repack()` runs after .to() /
    .cuda() / .half() (which give every parameter its own tensor) and
    after copy.deepcopy or unpickling, which do too."""

    def _apply(self, *args, **kwargs):
        result = super()._apply(*args, **kwargs)
        self._repack()
        return result

    def __setstate__(self, state):
        super().__setstate__(state)
        self._repack()


def joined_rows(parts, dtype):
    """The rows of `parts` as one tensor in `dtype`: the storage they share
    when adjacent, else a concatenation (both differentiable)."""
    if all(part.dtype == dtype for part in parts) and adjacent(parts):
        return _AdjacentRows.apply(*parts)
    return torch.cat([part.to(dtype) for part in parts])


class ParameterGroup(torch.nn.Module):
    """Parameters under one TE sublayer name (`proj`, ...). `_argument`
    gives the tensor a program takes for one of them. `rng_tracker`: TE's
    get_rng_state_tracker, under whose fork() the GEMM weights are
    initialized (None: torch's default generator)."""

    _rng_tracker = None
    _tracked = frozenset()
    _fp8_init = None
    _fp8_weight_names = frozenset()
    _fp8_joined = frozenset()

    def __init__(self, params_dtype, rng_tracker=None):
        super().__init__()
        self.params_dtype = params_dtype
        self._initializers = {}  # parameter name -> init function
        self._rng_tracker = rng_tracker
        self._tracked = set()    # initialized under the tracker
        # fp8_model_init's settings (fp8.ModelInit) when built inside an
        # enabled one, and the GEMM weights it makes Float8Tensors.
        self._fp8_init = _fp8.get_fp8_model_init()
        self._fp8_weight_names = set()
        self._fp8_joined = set()

    def add(self, name, shape, init, device, tracked=False,
            gemm_weight=False):
        tensor = torch.empty(shape, dtype=self.params_dtype, device=device)
        self.register_parameter(name, torch.nn.Parameter(tensor))
        self._initializers[name] = init
        if tracked:
            self._tracked.add(name)
        if gemm_weight and self._fp8_init is not None:
            self._fp8_weight_names.add(name)

    def add_linear(self, weight, bias, out_features, in_features, init,
                   use_bias, device):
        self.add(weight, (out_features, in_features), init, device,
                 tracked=True, gemm_weight=True)
        if use_bias:
            self.add(bias, (out_features,), torch.nn.init.zeros_, device)
        else:
            self.register_parameter(bias, None)

    def reset_parameters(self):
        # The split QKV weights' shared FP8 scale, made by the first.
        shared = {}
        with torch.no_grad():
            for name, init in self._initializers.items():
                parameter = getattr(self, name)
                if parameter.device.type == "meta":
                    continue
                if name in self._fp8_weight_names:
                    init = _fp8_weights.quantizing_init(
                        self, name, init, self._fp8_init,
                        shared if name in self._fp8_joined else None)
                if name in self._tracked:
                    with rng_fork(self._rng_tracker):
                        init(parameter)
                else:
                    init(parameter)

    def _argument(self, name, dtype, fp8=False):
        """The tensor the program takes for `name` (`fp8`: in FP8; see
        TransformerEngineBaseModule._argument)."""
        parameter = getattr(self, name)
        if fp8 or isinstance(parameter, Float8Tensor):
            return _fp8_weights.argument(parameter, name, dtype, fp8)
        return parameter.to(dtype).contiguous()

    def _main_grad_slot(self, name):
        """Where the program's gradient of `name` goes under
        fuse_wgrad_accumulation (_main_grad.Slot)."""
        return _main_grad.Slot([getattr(self, name)], [name])

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(
            skip_te_extra_state(state_dict, prefix), prefix, *args, **kwargs)


class QkvGroup(RepacksParts, ParameterGroup):
    """TE's `layernorm_qkv` (with the input norm's `layer_norm_weight`,
    `layer_norm_bias`) or `qkv`: the Q, K and V projections, registered as
    the module docstring says. `_argument("weight")` / `("bias")` give the
    fused q | k | v tensors the program takes.

    With `parts` a subset of them, the same for cross-attention's groups:
    ("query",) for `layernorm_query` (split name `query_weight`) and
    ("key", "value") for `key_value` (split `key_weight`, `value_weight`;
    fused and interleaved, TE's rows [groups, 2, kv_channels]: each
    group's key, then its value)."""

    def __init__(self, hidden_size, heads, groups, kv_channels, fuse,
                 interleaved, use_bias, norm, init, params_dtype, device,
                 parts=QKV_SPLIT, rng_tracker=None):
        """`norm`: None, or (normalization, gamma init) for
        layernorm_qkv; `heads`, `groups`: this rank's (tensor
        parallelism); `rng_tracker`: as ParameterGroup's."""
        super().__init__(params_dtype, rng_tracker)
        self.parts = tuple(parts)
        # Queries per key/value group in the interleaved layout.
        heads = heads if "query" in self.parts else 0
        self.heads, self.groups, self.kv_channels = heads, groups, kv_channels
        self.fuse = bool(fuse)
        self.interleaved = (self.fuse and bool(interleaved)
                            and self.parts != ("query",))
        self.use_bias = bool(use_bias)
        if norm is not None:
            normalization, gamma_init = norm
            self.add("layer_norm_weight", (hidden_size,), gamma_init, device)
            if normalization == "LayerNorm":
                self.add("layer_norm_bias", (hidden_size,),
                         torch.nn.init.zeros_, device)
        part_rows = {"query": heads * kv_channels,
                     "key": groups * kv_channels,
                     "value": groups * kv_channels}
        rows = [part_rows[part] for part in self.parts]
        if self.fuse:
            self.add_linear("weight", "bias", sum(rows), hidden_size, init,
                            use_bias, device)
            return
        self._rows = rows
        self._add_split("weight", (sum(rows), hidden_size), init, device,
                        tracked=True)
        if use_bias:
            self._add_split("bias", (sum(rows),), torch.nn.init.zeros_,
                            device)
        else:
            for part in self.parts:
                self.register_parameter(f"{part}_bias", None)

    def _add_split(self, kind, shape, init, device, tracked=False):
        """`query_<kind>`, `key_<kind>`, `value_<kind>` (those of
        `parts`): views of one buffer `shape`, rows q | k | v."""
        buffer = torch.empty(shape, dtype=self.params_dtype, device=device)
        for part, view in zip(self.parts, buffer.split(self._rows)):
            self.register_parameter(f"{part}_{kind}",
                                    torch.nn.Parameter(view))
            self._initializers[f"{part}_{kind}"] = init
            if tracked:
                self._tracked.add(f"{part}_{kind}")
            if kind == "weight" and self._fp8_init is not None:
                # fp8_model_init: Float8Tensors sharing one scale, as the
                # parts of TE's one fused weight (_fp8_weights.joined).
                self._fp8_weight_names.add(f"{part}_{kind}")
                self._fp8_joined.add(f"{part}_{kind}")

    def _split(self, kind):
        return [getattr(self, f"{part}_{kind}") for part in self.parts]

    def _argument(self, name, dtype, fp8=False):
        if name not in ("weight", "bias"):
            return super()._argument(name, dtype, fp8)
        if not self.fuse:
            parts = self._split(name)
            if name == "weight" and (fp8 or any(
                    isinstance(part, Float8Tensor) for part in parts)):
                return _fp8_weights.joined(
                    parts, [f"{part}_weight" for part in self.parts], dtype,
                    fp8)
            return joined_rows(parts, dtype)
        parameter = getattr(self, name)
        if self.interleaved and isinstance(parameter, Float8Tensor):
            # fp8_model_init: the FP8 rows (or the dequantized ones)
            # reordered, the gradient reordered back.
            return _fp8_weights.reordered(parameter, dtype, fp8,
                                          self.to_qkv_rows,
                                          self.from_qkv_rows)
        if fp8 or isinstance(parameter, Float8Tensor):
            return _fp8_weights.argument(parameter, name, dtype, fp8)
        fused = parameter.to(dtype)
        return self.to_qkv_rows(fused) if self.interleaved else fused

    def _main_grad_slot(self, name):
        if name != "weight":
            return super()._main_grad_slot(name)
        if not self.fuse:
            parts = self._split(name)
            return _main_grad.rows_slot(
                parts, [f"{part}_weight" for part in self.parts], adjacent)
        if self.interleaved:
            return _main_grad.reordered_slot(self.weight, "weight",
                                             self.to_qkv_rows,
                                             self.from_qkv_rows)
        return super()._main_grad_slot(name)

    def from_qkv_rows(self, tensor):
        """to_qkv_rows undone: q | k | v rows back into TE's interleaved
        [groups, heads / groups + 2, kv_channels] layout (heads 0 for
        key_value)."""
        per_group = self.heads // self.groups
        trailing = tuple(tensor.shape[1:])
        rows = self.kv_channels
        sizes = [self.heads * rows, self.groups * rows, self.groups * rows]
        blocks = [part.reshape(self.groups, count, rows, *trailing)
                  for part, count in zip(tensor.split(sizes),
                                         (per_group, 1, 1)) if count]
        return torch.cat(blocks, dim=1).reshape(-1, *trailing)

    def to_qkv_rows(self, tensor):
        """TE's interleaved rows [groups, heads / groups + 2, kv_channels]
        of a fused weight or bias, reordered q | k | v (differentiable;
        k | v for key_value, whose groups hold no queries)."""
        per_group = self.heads // self.groups
        trailing = tuple(tensor.shape[1:])
        grouped = tensor.reshape(self.groups, per_group + 2,
                                 self.kv_channels, *trailing)
        parts = [grouped[:, per_group].reshape(-1, *trailing),
                 grouped[:, per_group + 1].reshape(-1, *trailing)]
        if per_group:
            parts.insert(0, grouped[:, :per_group].reshape(-1, *trailing))
        return torch.cat(parts)

    def _repack(self):
        """Packs the split parameters into one buffer again when they are
        not adjacent, keeping the Parameter objects (an optimizer may hold
        them): the program then takes the buffer itself, the same tensor on
        every call, instead of a concatenation made per call."""
        if self.fuse:
            return
        for kind in ("weight", "bias"):
            parts = self._split(kind)
            # FP8 weights (fp8_model_init) have their own memory each and
            # are joined per call (_fp8_weights.joined).
            if (parts[0] is None
                    or any(isinstance(p, Float8Tensor) for p in parts)):
                continue
            pack_rows(parts)
