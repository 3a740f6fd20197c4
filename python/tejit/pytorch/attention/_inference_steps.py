"""What InferenceParams.pre_step decides on the host, without PyTorch (so
that tests/python checks it on machines without PyTorch, loading this file
by path).

The cache holds one batch row per live sequence, in the order of the
step's `step_dict` (an OrderedDict seq_id -> new tokens this step). A
sequence of the previous step left out of `step_dict` has finished: it is
dropped and its row freed. A sequence seen before keeps its tokens: when
its row changes (an earlier one finished, or `step_dict` lists it
elsewhere) its cached tokens move to its new row. A new sequence takes
whatever row its place gives it and writes from position 0. Transformer
Engine orders its rows the same way when `step_dict` lists the continuing
sequences first, in their order, then the new ones (TE builds
cu_seqlens_q in `step_dict`'s order and the cache in that one, so its
callers list them so).
"""
import operator
from collections import OrderedDict

OWNER = "InferenceParams.pre_step"


def _count(seq_id, value):
    try:
        count = operator.index(value)
    except TypeError:
        raise TypeError(f"{OWNER}: step_dict[{seq_id!r}] must be the "
                        f"number of new tokens (an int), got "
                        f"{type(value).__name__}") from None
    if count < 1:
        raise ValueError(f"{OWNER}: step_dict[{seq_id!r}] must be a "
                         f"positive number of new tokens, got {value!r} "
                         f"(leave a finished sequence out of step_dict)")
    return count


class StepPlan:
    """One step of the cache, decided on the host:

    sequences     OrderedDict seq_id -> tokens in the cache after the step
                  (cached + new), in row order
    new_tokens    each live row's new tokens this step
    cached        each live row's tokens before the step (its new tokens go
                  to positions cached[i] ...)
    moves         [(new row, old row)] of continuing sequences whose row
                  changes; move_length: the cached positions to move (the
                  longest of them)
    cu_seqlens_q, cu_seqlens_kv   [max_batch_size + 1], padded with the
                  last value past the live rows (TE's)
    pre_step_seqlens   [max_batch_size], 0 past the live rows
    token_positions(count)   each packed new token's position in its
                  sequence (rotary), for the step's first `count` tokens
    """

    def __init__(self, sequences, new_tokens, cached, moves, move_length,
                 max_batch_size):
        self.sequences = sequences
        self.new_tokens = new_tokens
        self.cached = cached
        self.moves = moves
        self.move_length = move_length
        self.batch_size = len(new_tokens)
        self.total_new = sum(new_tokens)
        self.max_new = max(new_tokens, default=0)
        self.max_total = max(sequences.values(), default=0)
        pad = max_batch_size - self.batch_size
        self.cu_seqlens_q = _offsets(new_tokens, pad)
        self.cu_seqlens_kv = _offsets(list(sequences.values()), pad)
        self.pre_step_seqlens = list(cached) + [0] * pad

    def device_values(self):
        """cu_seqlens_q, cu_seqlens_kv and pre_step_seqlens back to back:
        what one host-to-device copy writes."""
        return self.cu_seqlens_q + self.cu_seqlens_kv + self.pre_step_seqlens

    def token_positions(self, count):
        """The first `count` packed tokens' positions: new token j of row i
        is at cached[i] + j; tokens after the live rows' (a tail) take 0."""
        positions = []
        for before, new in zip(self.cached, self.new_tokens):
            positions.extend(range(before, before + new))
            if len(positions) >= count:
                return positions[:count]
        return positions + [0] * (count - len(positions))


def _offsets(lengths, pad):
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return offsets + [offsets[-1]] * pad


def plan_step(previous, step_dict, max_batch_size, max_sequence_length):
    """The StepPlan of `step_dict` after the sequences `previous`
    (OrderedDict seq_id -> cached tokens, in row order)."""
    if not isinstance(step_dict, dict):
        raise TypeError(f"{OWNER}: step_dict must be an OrderedDict seq_id "
                        f"-> new tokens, got {type(step_dict).__name__}")
    if len(step_dict) > max_batch_size:
        raise ValueError(f"{OWNER}: {len(step_dict)} sequences in one step, "
                         f"more than max_batch_size ({max_batch_size})")
    old_rows = {seq_id: row for row, seq_id in enumerate(previous)}
    sequences = OrderedDict()
    new_tokens, cached, moves = [], [], []
    move_length = 0
    for row, (seq_id, value) in enumerate(step_dict.items()):
        count = _count(seq_id, value)
        before = previous.get(seq_id, 0)
        total = before + count
        if total > max_sequence_length:
            raise ValueError(
                f"{OWNER}: sequence {seq_id!r} would hold {total} tokens "
                f"({before} cached + {count} new), more than "
                f"max_sequence_length ({max_sequence_length})")
        sequences[seq_id] = total
        new_tokens.append(count)
        cached.append(before)
        old_row = old_rows.get(seq_id)
        if old_row is not None and old_row != row and before > 0:
            moves.append((row, old_row))
            move_length = max(move_length, before)
    return StepPlan(sequences, new_tokens, cached, moves, move_length,
                    max_batch_size)


def round_up(value, granule):
    """`value` rounded up to a multiple of `granule`, at least `granule`."""
    return max(granule, -(-int(value) // granule) * granule)
