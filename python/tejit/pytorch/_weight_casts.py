"""The casts that (re)quantize FP8 weights (float8_tensor.py), and their
DelayedScaling update, and the quantizers' casts (tensor/float8_tensor.py),
as small tejit programs (te IR in _cast_ir.py): one generated kernel reads
the high-precision matrix once and writes its E4M3 or E5M2 data and, when
asked, the transpose (the program's
cast_transpose kernel, the one the layer programs cast with), with the
amax of what it cast. Under Float8CurrentScaling an amax pass and the
scale computation (te.compute_scale: TE's rules, power_2_scale included)
come first. No temporary tensor is made, so a requantize costs about one
read of the weight, as in a layer program, and runs on the current stream
(CUDA graphs capture it). The update is the layer programs' own
te.delayed_scaling_update kernel (shared/FP8.md's rules, as TE's).

A program is compiled per (shape, dtype, device, mode, transpose or not,
FP8 type) on first use and kept for the process; its kernels come from tejit's
kernel cache after the first time. Float8BlockQuantizer's block casts
(cast_blocks: te.block_quantize, rowwise and transposed, one kernel) are
such programs too, one per (shape, dtype, device, block dim, pow2,
usages, FP8 type)."""
import threading

import torch

import tejit

from ._cast_ir import (amax_ir, block_cast_ir, cast_ir, kernel_transposes,
                       update_ir)

_ELEMENT_TYPES = {torch.bfloat16: "bf16", torch.float16: "f16",
                  torch.float32: "f32"}
FP8_ELEMENTS = {torch.float8_e4m3fn: "f8E4M3FN", torch.float8_e5m2: "f8E5M2"}

_programs = {}
_lock = threading.Lock()


def _compiled(key, ir, device):
    """The program of `key`, compiled from `ir` on first use."""
    with _lock:
        program = _programs.get(key)
        if program is None:
            program = tejit.Program.compile(ir(), training=False,
                                            device=device.index)
            _programs[key] = program
    return program


def _formats(source, data):
    """The te IR element types of `source` (a CUDA matrix) and of `data`
    (FP8), with clear errors for anything else."""
    device = source.device
    if device.type != "cuda":
        raise ValueError(
            f"tejit: FP8 casts run tejit's cast kernel on a CUDA device; "
            f"got a tensor on {device} (build modules inside "
            f"fp8_model_init with device='cuda')")
    element = _ELEMENT_TYPES.get(source.dtype)
    if element is None or source.dim() != 2:
        raise TypeError(f"tejit: FP8 casts take 2-D bf16, fp16 or fp32 "
                        f"tensors; got {tuple(source.shape)} {source.dtype}")
    fp8 = FP8_ELEMENTS.get(data.dtype)
    if fp8 is None:
        raise TypeError(f"tejit: FP8 casts write torch.float8_e4m3fn or "
                        f"torch.float8_e5m2, not {data.dtype}")
    return element, fp8


def _program(source, data, transpose, mode, power_2_scale=False):
    """The cast program of `source` (a CUDA matrix) into `data`'s FP8
    type, writing the transpose when asked and the kernel can."""
    device = source.device
    element, fp8 = _formats(source, data)
    shape = tuple(source.shape)
    key = ("cast", shape, source.dtype, device.index, transpose, mode,
           power_2_scale, fp8)
    return _compiled(key, lambda: cast_ir(shape, element, transpose, mode,
                                          power_2_scale, fp8), device)


def _run(source, inputs, data, transpose, tail, mode, power_2_scale=False):
    """Runs the cast of `source` (arguments `inputs` after it) into `data`
    and `transpose` (unless None), then the results `tail`. A transpose
    the kernel cannot write (kernel_transposes) is copied from the data's
    bytes after the cast: the same bits."""
    in_kernel = transpose is not None and kernel_transposes(*source.shape)
    program = _program(source, data, in_kernel, mode, power_2_scale)
    outputs = [data] + ([transpose] if in_kernel else []) + list(tail)
    program.forward(torch.cuda.current_stream(source.device),
                    [source] + list(inputs), outputs)
    if transpose is not None and not in_kernel:
        transpose.view(torch.uint8).copy_(data.view(torch.uint8).t())


def cast_delayed(weight, scale, data, transpose, amax):
    """data (and transpose, unless None) = fp8(weight * scale), saturated,
    in data's FP8 type; amax = max |weight|. All CUDA tensors of one
    device; `weight` a contiguous matrix."""
    _run(weight, [scale], data, transpose, [amax], "delayed")


def cast_current(weight, power_2_scale, data, transpose, scale, scale_inv,
                 amax=None):
    """Float8CurrentScaling: scale = fp8_max / max |weight| (TE's rules),
    then data (and transpose, unless None) = fp8(weight * scale); writes
    scale, scale_inv and, unless None, amax."""
    amax = torch.empty_like(scale) if amax is None else amax
    _run(weight, [], data, transpose, [scale, scale_inv, amax], "current",
         power_2_scale)


def cast_from_amax(weight, amax, power_2_scale, data, transpose, scale,
                   scale_inv):
    """cast_current with the amax given (reduced over ranks, or clamped
    by an epsilon, by the caller): the scale from `amax` by TE's rules."""
    _run(weight, [amax], data, transpose, [scale, scale_inv], "from_amax",
         power_2_scale)


def cast_blocks(source, block_dim, power_2_scale, rowwise, columnwise):
    """Float8BlockScaling's cast of `source` (a contiguous CUDA matrix
    [rows, cols]) in `block_dim`-D blocks (_cast_ir.block_cast_ir):
    `rowwise` and `columnwise` are None or (data, scale_inv), the FP8 data
    [rows, cols] (or [cols, rows], the transpose) and the float32 scale
    inverses in te.block_quantize's layout, all contiguous, written."""
    pairs = [pair for pair in (rowwise, columnwise) if pair is not None]
    element, fp8 = _formats(source, pairs[0][0])
    shape, device = tuple(source.shape), source.device
    key = ("block", shape, source.dtype, device.index, block_dim,
           power_2_scale, rowwise is not None, columnwise is not None, fp8)
    program = _compiled(key, lambda: block_cast_ir(
        shape, element, block_dim, rowwise is not None,
        columnwise is not None, power_2_scale, fp8), device)
    program.forward(torch.cuda.current_stream(device), [source],
                    [tensor for pair in pairs for tensor in pair])


def amax_of(weight, amax):
    """amax = max |weight| (NaN propagates), by te.amax."""
    device = weight.device
    element = _ELEMENT_TYPES.get(weight.dtype)
    shape = tuple(weight.shape)
    if device.type != "cuda" or element is None or len(shape) != 2:
        raise TypeError(f"tejit: amax_of takes a 2-D bf16, fp16 or fp32 "
                        f"CUDA tensor; got {shape} {weight.dtype} on "
                        f"{device}")
    program = _compiled(("amax", shape, weight.dtype, device.index),
                        lambda: amax_ir(shape, element), device)
    program.forward(torch.cuda.current_stream(device), [weight], [amax])


def update_delayed(histories, scales, margin, most_recent):
    """TE's DelayedScaling update of several weights' states with one
    margin, history length and algorithm, in place and in one kernel:
    `histories` their amax_history tensors [length] (element 0 the amax
    since the last update), `scales` their scale tensors [1], all on one
    device. The states are gathered into one [length, count] history and
    scattered back (two copies each way for any count)."""
    count, length = len(histories), histories[0].shape[0]
    device = histories[0].device
    program = _compiled(
        ("update", length, margin, most_recent, count, device.index),
        lambda: update_ir(length, margin, most_recent, count), device)
    history = torch.stack(histories, dim=1).contiguous()
    scale = torch.cat(scales)
    new_history = torch.empty_like(history)
    new_scale = torch.empty_like(scale)
    new_scale_inv = torch.empty_like(scale)
    program.forward(torch.cuda.current_stream(device),
                    [history, scale, history[0]],
                    [new_history, new_scale, new_scale_inv])
    torch._foreach_copy_(list(histories), list(new_history.unbind(1)))
    torch._foreach_copy_(list(scales), list(new_scale.split(1)))
