"""One module's FP8 meta state (TE's per-module fp8_meta), across the
programs it compiles, and in its state_dict.

A module compiles one program per JIT key (shape, dtype, recipe, training);
each program holds its own copy of the delayed-scaling state (scale,
scale_inv, amax_history, forward and backward) in device memory. The module
has one state: when a call runs a program other than the last one, the
latest value of each meta tensor is copied into it first, so that the
scaling history continues across shapes and across training/inference
programs. Only tensors of equal shape are copied: after a change of
amax_history_len the scales carry over and the history starts fresh. The
state moves at forward time, for forward and backward tensors alike.
Copies go through the host (tejit_meta_get synchronizes the stream) and
only happen when the program changes, never on consecutive calls of one
program.

In the state_dict the state is plain float32 CPU tensors under the
program's names, `fp8_meta.{fwd,bwd}.{scale,scale_inv,amax_history}`
(history [len, slots], row 0 the current step's), not TE's pickled
`_extra_state`: a checkpoint loads with torch.load(weights_only=True).
Loaded tensors wait until the next call runs a program, which takes them.
"""
import warnings

import torch

PREFIX = "fp8_meta."
NAMES = tuple(f"fp8_meta.{direction}.{tensor}"
              for direction in ("fwd", "bwd")
              for tensor in ("scale", "scale_inv", "amax_history"))


class Fp8MetaState:
    """The module's meta tensors: each either held by the program that ran
    last with it, or loaded from a state_dict and not yet in a program."""

    def __init__(self):
        self._holders = {}  # name -> CompiledProgram with the latest value
        self._loaded = {}   # name -> CPU float32 tensor from a state_dict
        self._active = None  # the program of the last call

    def activate(self, compiled):
        """Makes `compiled` hold the module's state before it runs."""
        if compiled is self._active and not self._loaded:
            return
        for name, (_, shape) in compiled.meta.items():
            loaded = self._loaded.pop(name, None)
            holder = self._holders.get(name)
            if loaded is not None:
                if tuple(loaded.shape) == shape:
                    compiled.write_meta(name, loaded)
                else:
                    warnings.warn(
                        f"tejit: the loaded FP8 meta tensor {name} is "
                        f"{tuple(loaded.shape)}, the program's {shape} (a "
                        f"different recipe?): starting from a fresh state",
                        stacklevel=4)
            elif (holder is not None and holder is not compiled
                  and holder.meta[name][1] == shape):
                compiled.write_meta(name, holder.read_meta(name))
            self._holders[name] = compiled
        self._active = compiled

    def tensors(self):
        """{name: CPU float32 tensor}, the latest value of each meta tensor
        the module has (none before its first FP8 call or load)."""
        result = {}
        for name in NAMES:
            if name in self._loaded:
                result[name] = self._loaded[name].clone()
            elif name in self._holders:
                result[name] = self._holders[name].read_meta(name)
        return result

    def load(self, entries, prefix, unexpected_keys, error_msgs):
        """Takes `entries` ({name: value} of the state_dict keys under
        `prefix` + PREFIX), reporting as torch's load_state_dict does."""
        for name, value in entries.items():
            if name not in NAMES:
                unexpected_keys.append(prefix + name)
            elif (not isinstance(value, torch.Tensor)
                  or not value.is_floating_point()):
                error_msgs.append(
                    f"{prefix}{name}: expected a float32 tensor, got "
                    f"{type(value).__name__}")
            else:
                self._loaded[name] = value.detach().to(
                    "cpu", torch.float32, copy=True).contiguous()

    def restore(self, snapshot):
        """Puts `snapshot` (what tensors() returned earlier) back into the
        program that ran last, and TE's initial state (scales 1, histories
        0) where it has no value: what make_graphed_callables does after its
        warm-up steps. The program keeps its device buffers, so graphs
        captured over them start from the restored state."""
        if self._active is None:
            return
        for name, (_, shape) in self._active.meta.items():
            value = snapshot.get(name)
            if value is None or tuple(value.shape) != shape:
                fill = 0.0 if name.endswith("amax_history") else 1.0
                value = torch.full(shape, fill, dtype=torch.float32)
            self._active.write_meta(name, value)
            self._holders[name] = self._active
            self._loaded.pop(name, None)

    def detached(self):
        """A copy with every tensor loaded (no program): what a deepcopy or
        pickle of the module carries."""
        copy = Fp8MetaState()
        copy._loaded = self.tensors()
        return copy
