"""tejit.pytorch.distributed: where Transformer Engine keeps its
distributed helpers (transformer_engine.pytorch.distributed). Here:
context parallelism's load-balanced sequence split (docs/context-parallel.md),
as Megatron-LM's get_batch_on_this_cp_rank cuts a batch.

With cp_size ranks, a sequence of s positions is cut into 2 cp_size chunks
of c = s / (2 cp_size) positions, and rank r holds chunk r followed by
chunk 2 cp_size - 1 - r (so every rank gets as much causal attention work):
that is what the attention modules' inputs, outputs and input gradients
hold on each rank under context parallelism, along dim 0 (sbhd) or dim 1
(bshd). The rotary table stays whole (TE's semantics).

    local = context_parallel_split(x, cp_size, rank, seq_dim=0)
    whole = context_parallel_merge([local_0, local_1, ...], seq_dim=0)
    whole = context_parallel_gather(local, cp_group, seq_dim=0)

Also TE's CudaRNGStatesTracker (_rng_tracker.py: named CUDA RNG streams,
for the modules' and checkpoint's get_rng_state_tracker).

torch is imported only when tensors are joined or the tracker is asked
for (tests/python checks the split and the merge without PyTorch, loading
this file by path).
"""


def __getattr__(name):
    # The tracker needs torch: imported on first use (PEP 562).
    if name == "CudaRNGStatesTracker":
        from ._rng_tracker import CudaRNGStatesTracker
        return CudaRNGStatesTracker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_split(cp_size, cp_rank=0):
    if isinstance(cp_size, bool) or int(cp_size) != cp_size or cp_size < 1:
        raise ValueError(f"cp_size must be an int >= 1, got {cp_size!r}")
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank must be in [0, cp_size = {cp_size}), got "
                         f"{cp_rank!r}")


def _chunk(seq_length, cp_size, what="the sequence length"):
    """c = seq_length / (2 cp_size), else ValueError."""
    if seq_length % (2 * cp_size):
        raise ValueError(f"{what} ({seq_length}) must be divisible by 2 * "
                         f"cp_size = {2 * cp_size}")
    return seq_length // (2 * cp_size)


def context_parallel_chunks(cp_size, cp_rank):
    """The two chunks (of 2 cp_size) rank `cp_rank` holds, in its order:
    (cp_rank, 2 cp_size - 1 - cp_rank)."""
    _check_split(cp_size, cp_rank)
    return cp_rank, 2 * cp_size - 1 - cp_rank


def context_parallel_positions(seq_length, cp_size, cp_rank):
    """The global positions of rank `cp_rank`'s local rows, in order (a
    list of seq_length / cp_size ints)."""
    chunk = _chunk(seq_length, cp_size)
    return [index * chunk + offset
            for index in context_parallel_chunks(cp_size, cp_rank)
            for offset in range(chunk)]


def _cat(parts, dim):
    import torch
    return torch.cat(parts, dim)


def context_parallel_split(tensor, cp_size, cp_rank, seq_dim=0):
    """Rank `cp_rank`'s part of `tensor` (the whole sequence along
    `seq_dim`: 0 for sbhd, 1 for bshd): its chunks r and 2 cp_size - 1 - r,
    joined (a new tensor; the tensor itself at cp_size 1)."""
    _check_split(cp_size, cp_rank)
    if cp_size == 1:
        return tensor
    chunk = _chunk(tensor.shape[seq_dim], cp_size,
                   f"dim {seq_dim} of the tensor")
    return _cat([tensor.narrow(seq_dim, index * chunk, chunk)
                 for index in context_parallel_chunks(cp_size, cp_rank)],
                seq_dim)


def context_parallel_merge(parts, seq_dim=0):
    """The whole sequence from every rank's part (`parts`, in rank order,
    as context_parallel_split cuts them) along `seq_dim`."""
    parts = list(parts)
    cp_size = len(parts)
    _check_split(cp_size)
    if cp_size == 1:
        return parts[0]
    local = parts[0].shape[seq_dim]
    if any(part.shape[seq_dim] != local for part in parts):
        raise ValueError(f"the parts differ in dim {seq_dim}: "
                         f"{[part.shape[seq_dim] for part in parts]}")
    if local % 2:
        raise ValueError(f"each part holds two chunks along dim {seq_dim}: "
                         f"its length ({local}) must be even")
    chunk = local // 2
    # Chunk k of the whole: the first half of rank k's part for k < cp,
    # else the second half of rank 2 cp - 1 - k's.
    pieces = []
    for index in range(2 * cp_size):
        rank, half = ((index, 0) if index < cp_size
                      else (2 * cp_size - 1 - index, 1))
        pieces.append(parts[rank].narrow(seq_dim, half * chunk, chunk))
    return _cat(pieces, seq_dim)


def context_parallel_gather(tensor, cp_group, seq_dim=0):
    """The whole sequence from this rank's part `tensor` (the same call on
    every rank of `cp_group`, a torch process group): an all-gather, then
    context_parallel_merge. Not differentiable (for checks and
    outputs)."""
    import torch
    import torch.distributed as dist
    local = tensor.detach().contiguous()
    if (not dist.is_available() or not dist.is_initialized()
            or dist.get_world_size(cp_group) == 1):
        return local
    parts = [torch.empty_like(local)
             for _ in range(dist.get_world_size(cp_group))]
    dist.all_gather(parts, local, group=cp_group)
    return context_parallel_merge(parts, seq_dim)


__all__ = ["context_parallel_chunks", "context_parallel_positions",
           "context_parallel_split", "context_parallel_merge",
           "context_parallel_gather"]
