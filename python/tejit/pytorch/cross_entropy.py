"""Transformer Engine's parallel_cross_entropy (TE's module of that name):
a softmax cross entropy over logits whose vocab may be split over the ranks
of a process group, run by two small tejit programs (docs/cross-entropy.md).

The forward reads the logits once (one kernel: each row's max, sum of
exponentials, target logit and sum), gathers those four floats per row
over `dist_process_group` (never the logits), and writes the loss (and the
log-sum-exp the backward needs) per row; with reduce_loss the mean over
rows whose target is not ignore_idx, counted on the device (no host
synchronization: also CUDA-graph capturable, whatever is_cg_capturable
says). The backward reads the logits once more and writes their gradient
into the logits' own memory, as TE does, so that no second logits-sized
buffer is needed (2 GiB for a 128k vocab at 8k tokens in bf16). Hence:

  - after the backward, `inp` holds its gradient (read the logits before
    it, or pass a copy); a leaf `inp`'s .grad may share its storage;
  - a second backward through the same graph is refused (the logits it
    would read are gone);
  - a non-contiguous `inp` is copied once and the copy is overwritten.

Targets outside [0, V) that are not ignore_idx are not checked on the host
(that would synchronize): their loss is +inf and their gradient lacks the
-(1 - label_smoothing) term. Programs are compiled per (shape, dtype,
target dtype, device, ranks, rank, label_smoothing, reduce_loss,
ignore_idx) on first use and kept for the process: make the first call
outside a CUDA-graph capture."""
import warnings

import torch

from . import _distributed
from ._cross_entropy_ir import (backward_ir, check_options, check_shapes,
                                forward_ir)
from ._dynamo import outside_torch_compile
from ._weight_casts import _compiled

__all__ = ["parallel_cross_entropy"]

_ELEMENT_TYPES = {torch.bfloat16: "bf16", torch.float16: "f16",
                  torch.float32: "f32"}
_TARGET_TYPES = {torch.int64: "i64", torch.int32: "i32"}


def _group_ranks(process_group):
    """(ranks, rank) of `process_group` (1, 0 without one, as TE)."""
    if process_group is None:
        return 1, 0
    distributed = torch.distributed
    if not distributed.is_available() or not distributed.is_initialized():
        raise ValueError("tejit: parallel_cross_entropy's dist_process_group "
                         "was given, but torch.distributed is not "
                         "initialized")
    return (distributed.get_world_size(process_group),
            distributed.get_rank(process_group))


def _checked(inp, target):
    """(logits [rows, V_local], target [rows]) as the programs read them:
    contiguous and 16-byte aligned (vector loads), on one CUDA device."""
    if not isinstance(inp, torch.Tensor) or not isinstance(target,
                                                           torch.Tensor):
        raise TypeError("tejit: parallel_cross_entropy takes tensors inp and "
                        "target")
    if inp.dtype not in _ELEMENT_TYPES:
        raise TypeError(f"tejit: parallel_cross_entropy's inp must be "
                        f"bfloat16, float16 or float32 logits, got "
                        f"{inp.dtype}")
    if target.dtype not in _TARGET_TYPES:
        raise TypeError(f"tejit: parallel_cross_entropy's target must hold "
                        f"int64 (or int32) class indices, got {target.dtype}")
    if inp.device.type != "cuda":
        raise ValueError(f"tejit: parallel_cross_entropy runs on a CUDA "
                         f"device; inp is on {inp.device}")
    if target.device != inp.device:
        raise ValueError(f"tejit: parallel_cross_entropy's target must be on "
                         f"inp's device ({inp.device}), got {target.device}")
    rows, vocab_local = check_shapes(tuple(inp.shape), target.numel())
    logits = inp.detach()
    if not logits.is_contiguous() or logits.data_ptr() % 16:
        logits = logits.clone(memory_format=torch.contiguous_format)
    return logits.view(rows, vocab_local), target.reshape(rows).contiguous()


class _CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, target, label_smoothing, reduce_loss,
                dist_process_group, ignore_idx, is_cg_capturable):
        check_options(label_smoothing, ignore_idx)
        logits, flat_target = _checked(inp, target)
        rows, vocab_local = logits.shape
        ranks, rank = _group_ranks(dist_process_group)
        device = logits.device
        options = (rows, vocab_local, _ELEMENT_TYPES[logits.dtype],
                   _TARGET_TYPES[flat_target.dtype], ranks, rank,
                   float(label_smoothing), bool(reduce_loss), int(ignore_idx))
        program = _compiled(("cross_entropy", device.index) + options,
                            lambda: forward_ir(*options), device)
        if ranks > 1 and getattr(program, "_tejit_process_group",
                                 None) is not dist_process_group:
            program.set_tp_group(_distributed.tp_group(dist_process_group,
                                                       device.index))
            program._tejit_process_group = dist_process_group
        lse = torch.empty(rows, dtype=torch.float32, device=device)
        if reduce_loss:
            loss = torch.empty(1, dtype=torch.float32, device=device)
            count = torch.empty(1, dtype=torch.float32, device=device)
            outputs = [loss, count, lse]
        else:
            loss = torch.empty(rows, dtype=torch.float32, device=device)
            count = None
            outputs = [loss, lse]
        program.forward(torch.cuda.current_stream(device),
                        [logits, flat_target], outputs)
        saved = [logits, flat_target, lse] + ([count] if reduce_loss else [])
        ctx.save_for_backward(*saved)
        ctx.options = options
        ctx.inp_shape = inp.shape
        ctx.did_backward = False
        if reduce_loss:
            return loss.view(())
        return loss.view(inp.shape[:-1])

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.did_backward:
            raise RuntimeError(
                "tejit: parallel_cross_entropy's backward writes the logits' "
                "gradient over the saved logits, so the graph cannot be "
                "backpropagated through twice (retain_graph=True)")
        ctx.did_backward = True
        logits, target, lse, *count = ctx.saved_tensors
        options = ctx.options
        device = logits.device
        program = _compiled(("cross_entropy_backward", device.index)
                            + options, lambda: backward_ir(*options), device)
        grad_loss = grad_output.detach().to(torch.float32).reshape(-1)
        grad_loss = grad_loss.contiguous()
        program.forward(torch.cuda.current_stream(device),
                        [logits, target, lse, grad_loss] + count, [logits])
        # The logits were overwritten behind autograd's back: another op
        # that saved them for its backward must fail rather than read the
        # gradient, as after any in-place op.
        increment_version = getattr(torch.autograd.graph,
                                    "increment_version", None)
        if increment_version is not None:
            increment_version(logits)
        return (logits.view(ctx.inp_shape), None, None, None, None, None,
                None)


@outside_torch_compile
def parallel_cross_entropy(inp, target, label_smoothing=0.0,
                           reduce_loss=False, dist_process_group=None,
                           ignore_idx=-100, is_cg_capturable=False, *,
                           _input=None):
    """Cross entropy loss of logits `inp` ([B, SQ, V/ranks] or [SQ, B,
    V/ranks]; bf16, fp16 or fp32) against class indices `target` (int64
    [B, SQ] or [SQ, B]), as TE's: float32 loss per row (inp's first two
    dims), or with reduce_loss the mean over rows whose target is not
    ignore_idx; ignored rows have loss and gradient 0. With
    `dist_process_group`, rank r holds vocab columns [r V_local, (r + 1)
    V_local) and every rank returns the loss over the whole vocab.
    `label_smoothing` spreads that much of the target's weight over all V
    classes. The gradient (inp's dtype) is written over `inp` by the
    backward (module docstring). `_input` is TE's deprecated name of
    `inp`."""
    if _input is not None:
        warnings.warn("The '_input' parameter is deprecated. Please use "
                      "'inp' instead.", FutureWarning, stacklevel=2)
        inp = _input
    return _CrossEntropyFunction.apply(inp, target, label_smoothing,
                                       reduce_loss, dist_process_group,
                                       ignore_idx, is_cg_capturable)
