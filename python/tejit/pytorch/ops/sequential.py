"""TE's Sequential container of fusible ops
(`transformer_engine.pytorch.ops.Sequential`)."""
import torch

from .._dynamo import outside_torch_compile
from ._fuser import OperationFuser
from .op import FusibleOperation


class Sequential(torch.nn.Module):
    """A drop-in for torch.nn.Sequential (TE's): modules applied in order,
    where each run of consecutive compiled ops (tejit.pytorch.ops) runs as
    one tejit program, and anything else (ops run as PyTorch code, any
    torch.nn.Module) runs as itself between them. forward(input,
    *extra_inputs): the extra inputs go, in order, to the ops that take
    one (AddExtraInput); with ops that make extra outputs
    (MakeExtraOutput) it returns (output, *extra outputs). Modules are
    keyed "0", "1", ... (or by a dict's keys), which name their
    parameters as in TE's state_dict."""

    def __init__(self, *args):
        super().__init__()
        self.__dict__["_module_groups"] = None
        if len(args) == 1 and isinstance(args[0], dict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for module in args:
                self.append(module)

    # --- the container (torch.nn.Sequential's and TE's methods) -------------

    def add_module(self, name, module):
        self.__dict__["_module_groups"] = None
        super().add_module(name, module)

    def _keys(self, index):
        keys = list(self._modules)
        if isinstance(index, slice):
            return keys[index]
        if not -len(keys) <= index < len(keys):
            raise IndexError(f"index {index} is out of range for a "
                             f"Sequential of {len(keys)} modules")
        return [keys[index]]

    def _next_key(self):
        taken = [int(key) for key in self._modules if key.isdigit()]
        return str(max(taken) + 1 if taken else 0)

    def __getitem__(self, index):
        keys = self._keys(index)
        if isinstance(index, slice):
            return Sequential(*(self._modules[key] for key in keys))
        return self._modules[keys[0]]

    def __setitem__(self, index, module):
        self.__dict__["_module_groups"] = None
        self._modules[self._keys(index)[0]] = module

    def __delitem__(self, index):
        self.__dict__["_module_groups"] = None
        for key in self._keys(index):
            del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(self._next_key(), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        self.__dict__["_module_groups"] = None
        keys = self._keys(slice(index, None)) + [self._next_key()]
        for i in reversed(range(1, len(keys))):
            self._modules[keys[i]] = self._modules[keys[i - 1]]
        self._modules[keys[0]] = module
        return self

    def pop(self, index):
        module = self[index]
        del self[index]
        return module

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, modules):
        return Sequential(*self, *modules)

    # --- running ----------------------------------------------------------------

    def _groups(self):
        """The modules in order, each run of consecutive compiled ops made
        one OperationFuser (kept until the container changes)."""
        groups = self.__dict__.get("_module_groups")
        if groups is not None:
            return groups
        groups, run = [], {}
        for key, module in self._modules.items():
            if isinstance(module, FusibleOperation) and module.compiled:
                run[key] = module
                continue
            if run:
                groups.append(OperationFuser(run))
                run = {}
            groups.append(module)
        if run:
            groups.append(OperationFuser(run))
        self.__dict__["_module_groups"] = groups
        return groups

    def _graph_fusers(self):
        """The fusers that own this container's programs
        (make_graphed_callables snapshots their FP8 state)."""
        return [group for group in self._groups()
                if isinstance(group, OperationFuser)]

    @outside_torch_compile
    def forward(self, input, *extra_inputs):  # noqa: A002 (TE's name)
        groups = self._groups()
        taken = sum(group.num_extra_inputs for group in groups
                    if isinstance(group, OperationFuser))
        if len(extra_inputs) != taken:
            raise ValueError(f"tejit.pytorch.ops.Sequential: its ops take "
                             f"{taken} extra input(s) (AddExtraInput), got "
                             f"{len(extra_inputs)}")
        x, extra_outputs = input, []
        for group in groups:
            if not isinstance(group, OperationFuser):
                x = group(x)
                continue
            taken = group.num_extra_inputs
            result = group(x, *extra_inputs[:taken])
            extra_inputs = extra_inputs[taken:]
            if isinstance(result, tuple):
                x, extra_outputs = result[0], extra_outputs + list(result[1:])
            else:
                x = result
        return (x, *extra_outputs) if extra_outputs else x

    def __getstate__(self):
        # Programs own device memory: a copy compiles its own.
        state = self.__dict__.copy()
        state["_module_groups"] = None
        return state
