"""The operations of tejit.pytorch.ops (Transformer Engine's operation
fuser, `transformer_engine.pytorch.ops`): what an op is and how one runs
alone.

An op that the compiler takes (`compiled = True`) describes itself as spec
layers (docs/spec-format.md, "Fusible ops"); consecutive such ops run as
one tejit program (_fuser.py). Others (`compiled = False`) run as their
PyTorch code between programs. Called alone, an op runs as a chain of one.
"""
import torch

from .._dynamo import outside_torch_compile
from ..module.base import GroupRef


def group_attribute(name):
    """A property `name` holding a process group in a GroupRef (kept in
    `_<name>_ref`), so that deepcopy shares the group and pickling drops
    it, as the modules' tp_group."""
    slot = f"_{name}_ref"

    def get(self):
        ref = self.__dict__.get(slot)
        return None if ref is None else ref.group

    def set_(self, group):
        self.__dict__[slot] = GroupRef(group)
    return property(get, set_)


class FusibleOperation(torch.nn.Module):
    """TE's FusibleOperation: a module that tejit.pytorch.ops.Sequential
    (and the op's own call) may fuse with its neighbours.

    A compiled op implements `_layers(name, features)`: (its spec layers,
    named `name` and below, for an input of `features` features; the
    features of its output). It takes `num_extra_inputs` extra tensor
    inputs and makes `num_extra_outputs` extra outputs (AddExtraInput,
    MakeExtraOutput). An op that is not compiled implements
    `_eager(x)`."""

    compiled = True
    num_extra_inputs = 0
    num_extra_outputs = 0
    # Whether the op runs a GEMM (the FP8 recipe then applies to its chain).
    has_gemm = False

    @property
    def is_fused_op(self):
        return False

    @property
    def input_features(self):
        """The features of the op's input, when it fixes them; None for
        ops of any width (activations, extra inputs and outputs)."""
        return None

    def _layers(self, name, features):
        raise NotImplementedError

    def _tensor_parallel_groups(self):
        """[(process group, its size)] over which the op's layers
        communicate (BasicLinear's tensor_parallel_mode): the chain's
        program takes that group (_fuser.py); none by default."""
        return []

    def _eager(self, x):
        raise NotImplementedError

    def _chain(self):
        """The fuser that runs this op alone, made on first use and kept
        outside the module tree (not a child: it holds this op as one)."""
        fuser = self.__dict__.get("_own_fuser")
        if fuser is None:
            from ._fuser import OperationFuser
            fuser = OperationFuser({"op": self})
            self.__dict__["_own_fuser"] = fuser
        return fuser

    def _graph_fusers(self):
        """The fuser that runs this op alone (make_graphed_callables
        snapshots its FP8 state); none for ops run as PyTorch code."""
        return [self._chain()] if self.compiled else []

    @outside_torch_compile
    def forward(self, input, *extra_inputs):  # noqa: A002 (TE's name)
        """The op applied to `input` (and its extra inputs); with extra
        outputs, (output, *extra outputs), as TE's."""
        if not self.compiled:
            return self._eager(input)
        return self._chain()(input, *extra_inputs)

    def __getstate__(self):
        # Programs own device memory: a copy compiles its own.
        state = self.__dict__.copy()
        state.pop("_own_fuser", None)
        return state


class BasicOperation(FusibleOperation):
    """TE's BasicOperation: a single operation (it is its own basic op)."""

    @property
    def basic_ops(self):
        return [self]


class FusedOperation(FusibleOperation):
    """TE's FusedOperation: operations applied in sequence as one op, kept
    in `basic_ops` (a ModuleList, hence TE's state_dict names
    `basic_ops.<i>.<parameter>`)."""

    def __init__(self, basic_ops):
        super().__init__()
        self.basic_ops = torch.nn.ModuleList(basic_ops)
        self.has_gemm = any(op.has_gemm for op in basic_ops)

    @property
    def is_fused_op(self):
        return True

    @property
    def input_features(self):
        return self.basic_ops[0].input_features

    def _tensor_parallel_groups(self):
        return [found for op in self.basic_ops
                for found in op._tensor_parallel_groups()]

    def _layers(self, name, features):
        layers = []
        for index, op in enumerate(self.basic_ops):
            own, features = op._layers(f"{name}.basic_ops.{index}", features)
            layers += own
        return layers, features
