"""The casts that (re)quantize FP8 weights (float8_tensor.py), and their
DelayedScaling update, as small tejit programs: one generated kernel reads the high-precision weight once
and writes its E4M3 data and, when asked, the transpose (the program's
cast_transpose kernel, the one the layer programs cast with), with the
amax of what it cast. Under Float8CurrentScaling an amax pass and the
scale computation (te.compute_scale: TE's rules, power_2_scale included)
come first. No temporary tensor is made, so a requantize costs about one
read of the weight, as in a layer program, and runs on the current stream
(CUDA graphs capture it). The update is the layer programs' own
te.delayed_scaling_update kernel (shared/FP8.md's rules, as TE's).

A program is compiled per (shape, dtype, device, recipe kind, transpose or
not) on first use and kept for the process; its kernels come from tejit's
kernel cache after the first time."""
import threading

import torch

import tejit

_ELEMENT_TYPES = {torch.bfloat16: "bf16", torch.float16: "f16",
                  torch.float32: "f32"}
_FP8 = "f8E4M3FN"
_SLOT = "tensor<1xf32>"

_programs = {}
_lock = threading.Lock()


def _tensor_type(shape, element):
    return f"tensor<{'x'.join(str(d) for d in shape)}x{element}>"


def cast_ir(shape, element, transpose, current, power_2_scale):
    """The te IR of one weight cast: arguments `weight` (and `scale` under
    DelayedScaling), results `data`, `transpose` (when asked), then
    `amax` (DelayedScaling) or `scale` and `scale_inv` (current scaling)."""
    weight = _tensor_type(shape, element)
    data = _tensor_type(shape, _FP8)
    arguments = [f'%weight: {weight} {{te.name = "weight"}}']
    body = []
    if current:
        options = "fp8_type = f8E4M3FN" + (", power_2_scale"
                                           if power_2_scale else "")
        body += [f"%amax_now = te.amax %weight : {weight} -> {_SLOT}",
                 f"%scale, %scale_inv = te.compute_scale %amax_now "
                 f"{{{options}}} : {_SLOT} -> {_SLOT}, {_SLOT}"]
    else:
        arguments.append(f'%scale: {_SLOT} {{te.name = "scale"}}')
    body.append(f"%data, %amax = te.quantize %weight, %scale : {weight}, "
                f"{_SLOT} -> {data}, {_SLOT}")
    results = [("%data", data, "data")]
    if transpose:
        transposed = _tensor_type(tuple(reversed(shape)), _FP8)
        body.append(f"%transpose = te.transpose %data : {data} -> "
                    f"{transposed}")
        results.append(("%transpose", transposed, "transpose"))
    if current:
        results += [("%scale", _SLOT, "scale"),
                    ("%scale_inv", _SLOT, "scale_inv")]
    else:
        results.append(("%amax", _SLOT, "amax"))
    signature = ", ".join(f'{t} {{te.name = "{n}"}}' for _, t, n in results)
    values = ", ".join(v for v, _, _ in results)
    types = ", ".join(t for _, t, _ in results)
    lines = [f"func.func @fp8_weight_cast({', '.join(arguments)}) -> "
             f"({signature}) {{"]
    lines += [f"  {line}" for line in body]
    lines += [f"  return {values} : {types}", "}"]
    return "\n".join(lines) + "\n"


def update_ir(length, margin, most_recent, count=1):
    """The te IR of `count` weights' DelayedScaling update (one kernel for
    all): arguments `amax_history` [length, count] (row 0: the amaxes
    since the last update), `scale` [count] and `amax` (that row 0);
    results the new history, scales and scale_invs."""
    history = _tensor_type((length, count), "f32")
    slots = _tensor_type((count,), "f32")
    algo = "most_recent" if most_recent else "max"
    recipe = (f"#te.delayed_scaling<margin = {margin}, amax_history_len = "
              f"{length}, amax_compute_algo = {algo}, reduce_amax = false>")
    return (
        f'func.func @fp8_weight_update(%history: {history} {{te.name = '
        f'"amax_history"}}, %scale: {slots} {{te.name = "scale"}}, %amax: '
        f'{slots} {{te.name = "amax"}}) -> ({history} {{te.name = '
        f'"new_amax_history"}}, {slots} {{te.name = "new_scale"}}, {slots} '
        f'{{te.name = "new_scale_inv"}}) {{\n'
        f"  %h, %s, %si = te.delayed_scaling_update %history, %scale, %amax "
        f"{{fp8_type = f8E4M3FN, recipe = {recipe}}} : ({history}, {slots}, "
        f"{slots}) -> ({history}, {slots}, {slots})\n"
        f"  return %h, %s, %si : {history}, {slots}, {slots}\n}}\n")


def _compiled(key, ir, device):
    """The program of `key`, compiled from `ir` on first use."""
    with _lock:
        program = _programs.get(key)
        if program is None:
            program = tejit.Program.compile(ir(), training=False,
                                            device=device.index)
            _programs[key] = program
    return program


def _program(shape, dtype, device, transpose, current, power_2_scale):
    if device.type != "cuda":
        raise ValueError(
            f"tejit: FP8 weights are quantized by tejit's cast kernel on a "
            f"CUDA device; got a tensor on {device} (build modules inside "
            f"fp8_model_init with device='cuda')")
    element = _ELEMENT_TYPES.get(dtype)
    if element is None or len(shape) != 2:
        raise TypeError(f"tejit: FP8 weights are 2-D bf16, fp16 or fp32 "
                        f"tensors; got {tuple(shape)} {dtype}")
    key = ("cast", tuple(shape), dtype, device.index, transpose, current,
           power_2_scale)
    return _compiled(key, lambda: cast_ir(shape, element, transpose, current,
                                          power_2_scale), device)


def cast_delayed(weight, scale, data, transpose, amax):
    """data (and transpose, unless None) = e4m3(weight * scale), saturated;
    amax = max |weight|. All CUDA tensors of one device; `weight`
    contiguous."""
    program = _program(weight.shape, weight.dtype, weight.device,
                       transpose is not None, False, False)
    outputs = [data] + ([transpose] if transpose is not None else []) + [amax]
    program.forward(torch.cuda.current_stream(weight.device),
                    [weight, scale], outputs)


def cast_current(weight, power_2_scale, data, transpose, scale, scale_inv):
    """Float8CurrentScaling: scale = 448 / max |weight| (TE's rules), then
    data (and transpose, unless None) = e4m3(weight * scale); writes scale
    and scale_inv."""
    program = _program(weight.shape, weight.dtype, weight.device,
                       transpose is not None, True, power_2_scale)
    outputs = ([data] + ([transpose] if transpose is not None else [])
               + [scale, scale_inv])
    program.forward(torch.cuda.current_stream(weight.device), [weight],
                    outputs)


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
