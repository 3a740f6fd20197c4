"""fuse_wgrad_accumulation: where a program's weight gradient goes.

Under fuse_wgrad_accumulation the backward takes a buffer per GEMM weight
(float32, or bfloat16/float16 when the main_grads are: main_grad_dtype in
the spec) and adds the weight's gradient to it in place (docs/runtime.md).
Usually that buffer is the parameter's own `.main_grad` (Megatron-LM's),
also when torch.autocast hands the program a cast copy of the weight. The
attention modules' QKV weight is made of other parameters' rows: TE's
split `query_weight`/`key_weight`/`value_weight`, or its fused weight
interleaved by key/value group. Then the program gets their main_grads in
its row order (a view when they lie back to back, else a copy that is
written back after the backward).
"""
import torch

# main_grad dtypes the backward accumulates into, and their spec names.
DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16",
          torch.float16: "fp16"}


def main_grad_dtype(parameters):
    """The one dtype of the .main_grad of `parameters` that are trained
    and have one (float32 when none has: checked_main_grad then says it is
    missing); RuntimeError for mixed or unsupported dtypes."""
    dtypes = {p.main_grad.dtype for p in parameters
              if p.requires_grad and getattr(p, "main_grad", None) is not None}
    if len(dtypes) > 1 or not dtypes <= DTYPES.keys():
        raise RuntimeError(
            f"tejit: fuse_wgrad_accumulation needs the main_grads of one "
            f"module to share one dtype of float32, bfloat16 or float16; "
            f"got {sorted(str(d) for d in dtypes)}")
    return dtypes.pop() if dtypes else torch.float32


def checked_main_grad(parameter, name, dtype=torch.float32):
    """`parameter.main_grad`, which the backward writes in place as a
    `dtype` tensor: a wrong tensor would be overrun, so refuse it."""
    main_grad = getattr(parameter, "main_grad", None)
    if main_grad is None:
        raise RuntimeError(
            f"tejit: fuse_wgrad_accumulation is set, but parameter '{name}' "
            f"has no .main_grad (a float32, bfloat16 or float16 tensor of "
            f"its shape its gradients accumulate into, as in Megatron-LM)")
    if (main_grad.shape != parameter.shape
            or main_grad.dtype != dtype
            or main_grad.device != parameter.device
            or not main_grad.is_contiguous()):
        raise RuntimeError(
            f"tejit: '{name}.main_grad' is {tuple(main_grad.shape)} "
            f"{main_grad.dtype} on {main_grad.device}"
            f"{'' if main_grad.is_contiguous() else ' (not contiguous)'}; "
            f"fuse_wgrad_accumulation needs a contiguous {dtype} tensor "
            f"{tuple(parameter.shape)} on the parameter's device (the "
            f"module's main_grads share one dtype)")
    return main_grad


class Slot:
    """One program input whose gradient goes to main_grad: the parameters
    it is made of, and how their main_grads become the program's buffer
    (`join`, None for the one parameter's main_grad itself) and go back
    (`split(buffer, main_grads)`, None when the buffer was no copy)."""

    def __init__(self, parameters, names, join=None, split=None):
        self.parameters = parameters
        self.names = names
        self._join = join
        self._split = split

    def _trained(self):
        return any(p.requires_grad for p in self.parameters)

    def buffer(self, shape, dtype, device):
        """The `dtype` buffer of `shape` the backward adds into. Frozen
        weights (no parameter requires grad) get a scratch buffer."""
        if not self._trained():
            return torch.zeros(shape, dtype=dtype, device=device)
        grads = [checked_main_grad(p, n, dtype)
                 for p, n in zip(self.parameters, self.names)]
        buffer = grads[0] if self._join is None else self._join(grads)
        if tuple(buffer.shape) != tuple(shape):
            raise RuntimeError(f"tejit: the main_grad of {self.names} makes "
                               f"{tuple(buffer.shape)}, the program takes "
                               f"{tuple(shape)}")
        return buffer

    def finish(self, buffer):
        """After the backward: the sums back into the main_grads."""
        if self._split is not None and self._trained():
            self._split(buffer, [p.main_grad for p in self.parameters])

    def gradient(self, shape, dtype, device):
        """What autograd gets for the input (of `shape`, `dtype`), as in
        TE: with Megatron-LM's `grad_added_to_main_grad` on the weights, a
        placeholder (zeros with `zero_out_wgrad`) that autograd carries to
        them, and the attribute set; else None."""
        if not self._trained() or not all(
                hasattr(p, "grad_added_to_main_grad")
                for p in self.parameters):
            return None
        for p in self.parameters:
            p.grad_added_to_main_grad = True
        zero = any(getattr(p, "zero_out_wgrad", False)
                   for p in self.parameters)
        return (torch.zeros if zero else torch.empty)(shape, dtype=dtype,
                                                      device=device)


def rows_slot(parameters, names, adjacent):
    """The slot of a weight made of `parameters`' rows, in order
    (`adjacent(tensors)`: whether they lie back to back in one storage)."""
    def join(grads):
        if adjacent(grads):
            first = grads[0]
            shape = (sum(g.shape[0] for g in grads), *first.shape[1:])
            return first.as_strided(shape, first.stride(),
                                    first.storage_offset())
        return torch.cat(grads)

    def split(buffer, grads):
        if buffer.data_ptr() == grads[0].data_ptr():  # the view: in place
            return
        for grad, rows in zip(grads, buffer.split([g.shape[0]
                                                   for g in grads])):
            grad.copy_(rows)

    return Slot(parameters, names, join, split)


def reordered_slot(parameter, name, to_program, from_program):
    """The slot of a weight the program takes reordered
    (`to_program(t)`, undone by `from_program(t)`)."""
    return Slot([parameter], [name],
                join=lambda grads: to_program(grads[0]).contiguous(),
                split=lambda buffer, grads: grads[0].copy_(
                    from_program(buffer)))
