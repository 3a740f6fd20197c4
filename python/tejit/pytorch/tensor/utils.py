"""Transformer Engine's helpers for FP8 primary weights under a
distributed optimizer (`transformer_engine.pytorch.tensor.utils`), which
Megatron-LM calls with fp8_model_init's weights and --fp8-param-gather:

- cast_master_weights_to_fp8: after the optimizer step, each data-parallel
  rank holds a shard of each float32 master weight (a flat range of the
  weight's elements, possibly empty) and quantizes only that range of the
  FP8 weight; the ranks then all-gather the FP8 bytes. The scales agree
  across ranks: DelayedScaling quantizes with the weight's current scale
  and max-reduces the shards' amaxes into every rank's history (the next
  update then computes the same scale everywhere); Float8CurrentScaling
  max-reduces the shards' amaxes first and scales every shard by the
  whole weight's amax. As in TE, the master is first rounded to the
  weight's nominal dtype (what an unquantized bf16 weight would hold), and
  the kept high-precision initial value is dropped.
- post_all_gather_processing: the FP8 transposes the backward reads, made
  again from the gathered data (in place). A weight whose data changed
  this way also remakes its transpose on its next use.
- replace_raw_data: moves an FP8 weight's data into caller-given memory
  (the optimizer's contiguous parameter buffer), values unchanged.

The shard casts are PyTorch ops on the flat range (round to nearest even,
saturated to +-448: the bits tejit's cast kernel writes, which the 2-GPU
check tests/gpu/fp8_master_weights_check.py compares) so that shards of
any length need no compiled program.
"""
import torch

from ..float8_tensor import (FP8_DTYPE, CurrentScalingState,
                             DelayedScalingState, Float8Tensor, _reciprocal)
from .float8_tensor import scale_from_amax

__all__ = ["cast_master_weights_to_fp8", "post_all_gather_processing",
           "replace_raw_data"]

E4M3_MAX = 448.0


def _check_weights(model_weights):
    for index, weight in enumerate(model_weights):
        if not isinstance(weight, Float8Tensor):
            raise TypeError(
                f"cast_master_weights_to_fp8: model_weights[{index}] is a "
                f"{type(weight).__name__}, not a tejit Float8Tensor "
                f"(fp8_model_init's weights); cast other weights with "
                f"copy_")
        if not isinstance(weight._scaling, (DelayedScalingState,
                                            CurrentScalingState)):
            raise NotImplementedError(
                f"cast_master_weights_to_fp8: model_weights[{index}] has a "
                f"{type(weight._scaling).__name__} scaling state")


def _shard_range(index, weight, master, offset):
    """(start, end) of the master shard in the weight's flat elements."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"cast_master_weights_to_fp8: start_offsets[{index}]"
                         f" must be an int >= 0 with a master shard, got "
                         f"{offset!r}")
    end = offset + master.numel()
    if end > weight.numel():
        raise ValueError(
            f"cast_master_weights_to_fp8: master_weights[{index}] "
            f"({master.numel()} elements from offset {offset}) runs past the "
            f"weight's {weight.numel()} elements")
    return offset, end


def _cast_into(data, values, scale):
    """FP8 E4M3 of values * scale (float32), saturated, into `data` (a
    flat range of a weight's FP8 data)."""
    scaled = values.float() * scale
    data.copy_(scaled.clamp_(-E4M3_MAX, E4M3_MAX).to(FP8_DTYPE))


def _scale_from_amax(amax, state):
    """Float8CurrentScaling's scale from an amax (tejit's te.compute_scale:
    448 / amax, 1 for an amax of 0, inf or NaN, FLT_MAX on overflow, with
    power_2_scale rounded down to a power of 2)."""
    return scale_from_amax(amax, E4M3_MAX, state.power_2_scale)


def cast_master_weights_to_fp8(model_weights, master_weights, start_offsets,
                               group, fsdp_shard_model_weights=None):
    """Quantizes each rank's master shards into its FP8 weights (the
    module docstring). `model_weights`: Float8Tensors (whole, on every
    rank); `master_weights`: per weight this rank's shard (any shape, its
    elements the weight's flat elements from `start_offsets[i]`) or None;
    `group`: the data-parallel group over which amaxes are max-reduced
    (None: the default group; nothing without torch.distributed).
    Every rank must call it with the same weights in the same order."""
    if fsdp_shard_model_weights is not None:
        raise NotImplementedError(
            "cast_master_weights_to_fp8(fsdp_shard_model_weights=...) is not "
            "supported by tejit: FSDP's sharded FP8 weights are not built")
    if not len(model_weights) == len(master_weights) == len(start_offsets):
        raise ValueError(
            f"cast_master_weights_to_fp8: {len(model_weights)} model "
            f"weights, {len(master_weights)} master weights and "
            f"{len(start_offsets)} offsets")
    if not model_weights:
        return
    _check_weights(model_weights)
    device = model_weights[0].device
    ranges, shards = [], []
    for index, (weight, master, offset) in enumerate(
            zip(model_weights, master_weights, start_offsets)):
        weight.clear_high_precision_init_val()
        if master is None:
            ranges.append(None)
            shards.append(None)
            continue
        ranges.append(_shard_range(index, weight, master, offset))
        # As an unquantized weight would hold it (TE's consistency rule).
        shards.append(master.detach().reshape(-1).to(weight.dtype))
    # Every weight's shard amax (0 without a shard), max-reduced in one
    # collective.
    amaxes = torch.zeros(len(model_weights), dtype=torch.float32,
                         device=device)
    with torch.no_grad():
        for index, shard in enumerate(shards):
            if shard is not None and shard.numel():
                amaxes[index] = shard.abs().max().float()
        for index, (weight, shard, span) in enumerate(
                zip(model_weights, shards, ranges)):
            scaling = weight._scaling
            if shard is None or not isinstance(scaling, DelayedScalingState):
                continue
            # DelayedScaling: the weight's current scale, on every rank.
            _cast_into(weight._data.view(-1)[span[0]:span[1]], shard,
                       scaling.scale)
        if torch.distributed.is_available() and \
                torch.distributed.is_initialized():
            torch.distributed.all_reduce(
                amaxes, op=torch.distributed.ReduceOp.MAX, group=group)
        for index, (weight, shard, span) in enumerate(
                zip(model_weights, shards, ranges)):
            store, scaling = weight._store, weight._scaling
            if isinstance(scaling, DelayedScalingState):
                slot = scaling.amax_history[:1]
                torch.maximum(slot, amaxes[index:index + 1], out=slot)
                store.scale_inv.copy_(_reciprocal(scaling.scale))
            else:
                scaling.scale.copy_(_scale_from_amax(amaxes[index:index + 1],
                                                     scaling))
                store.scale_inv.copy_(_reciprocal(scaling.scale))
                if shard is not None:
                    _cast_into(store.data.view(-1)[span[0]:span[1]], shard,
                               scaling.scale)
            store.transpose_stale = True


def post_all_gather_processing(model_weights):
    """After the FP8 data of `model_weights` was all-gathered: each kept
    transpose made again from the data, in place."""
    for weight in model_weights:
        if isinstance(weight, Float8Tensor):
            weight._refresh_transpose()


def replace_raw_data(tensor, new_raw_data):
    """Moves `tensor`'s FP8 data into `new_raw_data` (as many elements,
    contiguous, torch.float8_e4m3fn or uint8: the optimizer's parameter
    buffer), copying the bytes; values, scale and state unchanged."""
    if not isinstance(tensor, Float8Tensor):
        raise TypeError(f"replace_raw_data takes a tejit Float8Tensor, not "
                        f"{type(tensor).__name__}")
    if new_raw_data.dtype not in (FP8_DTYPE, torch.uint8):
        raise TypeError(f"replace_raw_data: new_raw_data must be "
                        f"{FP8_DTYPE} or torch.uint8, got "
                        f"{new_raw_data.dtype}")
    if (new_raw_data.numel() != tensor.numel()
            or not new_raw_data.is_contiguous()
            or new_raw_data.device != tensor.device):
        raise ValueError(
            f"replace_raw_data: new_raw_data must be a contiguous tensor of "
            f"{tensor.numel()} elements on {tensor.device}, got "
            f"{tuple(new_raw_data.shape)} on {new_raw_data.device}")
    store = tensor._store
    data = new_raw_data.view(FP8_DTYPE).view(store.data.shape)
    with torch.no_grad():
        data.copy_(store.data)
    store.data = data
