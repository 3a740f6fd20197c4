"""TE's `parameters_split` for Linear and LayerNormLinear: the GEMM's
weight (and bias) registered as several parameters, row blocks of the
output features, under names of the caller's choosing.

    te.Linear(1024, 3072, parameters_split=("query_", "key_", "value_"))
    -> query_weight, key_weight, value_weight [1024, 1024] (and *_bias)
    te.Linear(1024, 1536, parameters_split={"q": 1024, "kv": 512})
    -> q_weight [1024, 1024], kv_weight [512, 1024]

As in TE: a tuple or list of names splits out_features evenly; a dict
gives each name its rows; trailing underscores are stripped before
`_weight` / `_bias`; the sizes must add up to out_features; with
tensor parallelism in "column" mode each size must divide by tp_size and
each rank holds its shard of every part. The parts are views of one
buffer, rows in order, so the program takes the buffer itself (no copy,
_groups.joined_rows); after something gave a part memory of its own
(.to(), deepcopy, unpickling) they are packed again, and while they are
not adjacent (load_state_dict(assign=True)) they are concatenated per
call. The gradients split back into the parts; Megatron-LM's main_grads
(fuse_wgrad_accumulation) and delay_wgrad_compute's backward_dw deliver
each part its rows. Not with fp8_model_init (NotImplementedError).
"""
import torch

from . import _delayed_wgrad, _main_grad
from ._args import default_init_method
from ._groups import RepacksParts, adjacent, joined_rows, pack_rows

# The parameters the program takes, which split modules hold in parts.
_SPLIT = ("weight", "bias")


def split_sizes(owner, parameters_split, out_features, tp_size, column):
    """[(name prefix, this rank's rows)] for TE's `parameters_split`; a
    ValueError (TypeError for the wrong kind) naming parameters_split."""
    where = f"{owner}(parameters_split={parameters_split!r})"
    if isinstance(parameters_split, dict):
        items = list(parameters_split.items())
    elif isinstance(parameters_split, (tuple, list)):
        items = [(name, None) for name in parameters_split]
    else:
        raise TypeError(f"{where}: parameters_split must be a tuple or list "
                        f"of names, or a dict of name -> rows")
    if not items:
        raise ValueError(f"{where}: cannot split the weight into 0 "
                         f"parameters")
    if any(not isinstance(name, str) or not name.rstrip("_")
           for name, _ in items):
        raise TypeError(f"{where}: names must be non-empty strings")
    prefixes = [name.rstrip("_") for name, _ in items]
    if len(set(prefixes)) != len(prefixes):
        raise ValueError(f"{where}: names repeat (after stripping trailing "
                         f"underscores: {prefixes})")
    if items[0][1] is None:
        if out_features % len(items):
            raise ValueError(f"{where}: out_features = {out_features} does "
                             f"not split evenly into {len(items)} parts")
        sizes = [out_features // len(items)] * len(items)
    else:
        sizes = [size for _, size in items]
        if any(isinstance(size, bool) or not isinstance(size, int)
               or size <= 0 for size in sizes):
            raise ValueError(f"{where}: every size must be an int > 0")
        if sum(sizes) != out_features:
            raise ValueError(f"{where}: the sizes add up to {sum(sizes)}, "
                             f"not out_features = {out_features}")
    if column and tp_size > 1:
        if any(size % tp_size for size in sizes):
            raise ValueError(f"{where}: with parallel_mode='column' every "
                             f"size must divide by tp_size = {tp_size}")
        sizes = [size // tp_size for size in sizes]
    return list(zip(prefixes, sizes))


class SplitParameters(RepacksParts):
    """Mixin (before TransformerEngineBaseModule) of a module whose GEMM
    parameters `weight` / `bias` may be split (_init_split)."""

    _split_rows = None  # [(prefix, rows)] when split, else None

    def _init_split(self, owner, parameters_split, out_features, init,
                    device):
        """Registers the GEMM's parameters: split as `parameters_split`
        says (global `out_features`; self.in_features, self.out_features
        and self.use_bias set), else plain `weight` / `bias`."""
        if parameters_split is None:
            self._add_linear_parameters("weight", "bias", self.out_features,
                                        self.in_features, init, device,
                                        returned=True)
            return
        if self._fp8_init is not None:
            raise NotImplementedError(
                f"{owner}(parameters_split=...) inside fp8_model_init is not "
                f"supported by tejit: build the module without "
                f"parameters_split (one `weight`) or outside fp8_model_init")
        self._split_rows = split_sizes(
            owner, parameters_split, out_features, self.tp_size,
            getattr(self, "parallel_mode", None) == "column")
        rows = [size for _, size in self._split_rows]
        for kind, shape, part_init in (
                ("weight", (self.out_features, self.in_features),
                 init or default_init_method()),
                ("bias", (self.out_features,), torch.nn.init.zeros_)):
            if kind == "bias" and not self.use_bias:
                for prefix, _ in self._split_rows:
                    self.register_parameter(f"{prefix}_bias", None)
                continue
            buffer = torch.empty(shape, dtype=self.params_dtype,
                                 device=device)
            for (prefix, _), view in zip(self._split_rows,
                                         buffer.split(rows)):
                self._add_parameter(f"{prefix}_{kind}", None, part_init,
                                    device, tracked=kind == "weight",
                                    tensor=view)
        if self.use_bias and self.return_bias:
            self._returned_bias = "bias"

    def _parts(self, kind):
        return [getattr(self, f"{prefix}_{kind}")
                for prefix, _ in self._split_rows]

    def _parameter(self, name):
        # The joined parts stand for `weight` / `bias` (shape, dtype and
        # device for the returned bias's zeros; return_bias returns them
        # joined, differentiably).
        if self._split_rows is not None and name in _SPLIT:
            parts = self._parts(name)
            return None if parts[0] is None else joined_rows(
                parts, parts[0].dtype)
        return super()._parameter(name)

    def _argument(self, name, dtype, fp8=False):
        if (self._split_rows is not None and name in _SPLIT
                and name != self._returned_bias):
            return joined_rows(self._parts(name), dtype)
        return super()._argument(name, dtype, fp8)

    def _main_grad_slot(self, name):
        if self._split_rows is not None and name == "weight":
            parts = self._parts("weight")
            return _main_grad.rows_slot(
                parts, [f"{prefix}_weight" for prefix, _ in self._split_rows],
                adjacent)
        return super()._main_grad_slot(name)

    def _deliver_wgrad(self, name, gradient):
        if self._split_rows is not None and name in _SPLIT:
            rows = [size for _, size in self._split_rows]
            for part, block in zip(self._parts(name),
                                   gradient.split(rows, dim=0)):
                _delayed_wgrad.accumulate(part, block)
            return
        super()._deliver_wgrad(name, gradient)

    def _mark_sequence_parallel(self):
        # TE's attribute goes on each part of a split row-parallel bias.
        super()._mark_sequence_parallel()
        if self._split_rows is None:
            return
        for name in self._sequence_parallel_parameters():
            if name in _SPLIT:
                for part in self._parts(name):
                    if part is not None:
                        part.sequence_parallel = bool(self.sequence_parallel)

    def _repack(self):
        if self._split_rows is None:
            return
        for kind in _SPLIT:
            parts = self._parts(kind)
            if parts[0] is not None:
                pack_rows(parts)
