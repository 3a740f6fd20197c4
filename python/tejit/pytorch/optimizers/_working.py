"""What FusedAdam and FusedSGD share: the float32 tensors a step works on
and how their results go back to parameters, master weights and state of
other dtypes."""
import torch

from ..float8_tensor import Float8Tensor

FLOAT32 = torch.float32


def float32_of(tensor):
    """`tensor` itself when it is a plain float32 tensor (updated in
    place), else a float32 copy (a Float8Tensor's dequantized value)."""
    if isinstance(tensor, Float8Tensor):
        return tensor.dequantize(FLOAT32)
    return tensor if tensor.dtype == FLOAT32 else tensor.float()


def store(target, working):
    """Writes `working` (float32_of(target)'s result) back into `target`
    when it was a copy: rounded to target's dtype, or quantized into a
    Float8Tensor (its scaling state, its transpose refreshed)."""
    if working is target:
        return
    if isinstance(target, Float8Tensor):
        target.quantize_(working)
    else:
        target.copy_(working)


def gradient_of(parameter, use_decoupled_grad):
    """The gradient a step reads: `.grad`, or Megatron-LM's
    `.decoupled_grad` (use_decoupled_grad: FP8 parameters whose gradient
    cannot be their .grad); None when it has none."""
    if use_decoupled_grad:
        return getattr(parameter, "decoupled_grad", None)
    return parameter.grad


def master_of(parameter, dtype):
    """A new master weight of `dtype` for `parameter`: the high-precision
    initial value fp8_model_init(preserve_high_precision_init_val=True)
    kept (then dropped, as TE does), else the parameter's value."""
    keep = getattr(parameter, "get_high_precision_init_val", None)
    initial = keep() if keep is not None else None
    if initial is not None:
        parameter.clear_high_precision_init_val()
        return initial.to(parameter.device, dtype).clone()
    value = (parameter.dequantize(FLOAT32)
             if isinstance(parameter, Float8Tensor) else parameter.detach())
    return value.to(dtype, copy=True)


def check_dtype(owner, name, dtype, allowed):
    if dtype not in allowed:
        names = ", ".join(str(d) for d in allowed)
        raise NotImplementedError(
            f"{owner}: {name}={dtype} is not supported by tejit; use one of "
            f"{names}")


def restore_state_dtypes(optimizer, state_dict):
    """After torch.optim.Optimizer.load_state_dict, which casts every
    floating-point state tensor to its parameter's dtype: the state as
    `state_dict` holds it (float32 moments and master weights of a bf16
    parameter stay float32), on the parameter's device."""
    for saved_group, group in zip(state_dict["param_groups"],
                                  optimizer.param_groups):
        for index, parameter in zip(saved_group["params"], group["params"]):
            for key, value in state_dict["state"].get(index, {}).items():
                if torch.is_tensor(value) and value.is_floating_point():
                    optimizer.state[parameter][key] = value.to(
                        parameter.device, copy=True)
