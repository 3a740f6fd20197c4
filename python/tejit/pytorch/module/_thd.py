"""Packed variable-length sequences (Transformer Engine's thd layout): the
tokens of every sequence back to back, [t, ...], with cu_seqlens [b + 1]
(int32, on the GPU) holding where each sequence starts.

tejit's programs take packed tokens as they are: the spec's input_format
is thd with `tokens` T, `batch_size` b and `seq_length` the longest
sequence rounded up to a multiple of 64; cu_seqlens is a program input,
and cuDNN's flash attention reads each sequence in place through ragged
offsets. T is the call's token count t rounded up to a multiple of 64 (so
that batches of similar sizes share one program, and FP8 GEMMs get the
multiple of 16 they need): a call whose t is not a multiple gets zero
tokens appended (one copy of its inputs) and its outputs cut back to t.
The norms and GEMMs run on every token; tokens after cu_seqlens[-1] (the
tail of a packed buffer) go through them too, as in TE, but their
attention output (and its gradient) is 0.

Padding between sequences (cu_seqlens_q_padded: sequence i starts at
cu_seqlens_q_padded[i], its cu_seqlens_q[i + 1] - cu_seqlens_q[i] tokens
followed by padding): the tokens are permuted so that the program sees
the sequences back to back and the padding as its tail, and the outputs
permuted back (SequenceGaps: two gathers, no host sync); the padding's
attention output is 0.

Without max_seqlen_q (or max_seqlen_kv) the call reads cu_seqlens back to
the host to find the longest sequence and check the offsets (one sync per
call); with it, the offsets are checked on the device (a violation is a
device-side assert, a CUDA error) and nothing waits. While a CUDA graph is
being captured, max_seqlen_q must be given and both cu_seqlens must be the
same tensor.
"""
import torch

from ..attention.rope import sequence_positions, token_sequences

# The compiled max_seqlen is rounded up to this: fewer distinct programs,
# little extra attention work.
MAX_SEQ_GRANULE = 64
# The compiled token count is rounded up to this (a multiple of 16, as
# FP8 GEMMs need).
TOKEN_GRANULE = 64
PADDING_MASK_TYPES = ("padding", "padding_causal",
                      "padding_causal_bottom_right")


def _check_cu_seqlens(owner, name, cu_seqlens, device):
    if cu_seqlens is None:
        raise ValueError(f"{owner}: qkv_format='thd' needs {name} (int32 "
                         f"[b + 1], where each sequence starts)")
    if (not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1
            or cu_seqlens.numel() < 2 or cu_seqlens.dtype != torch.int32):
        raise ValueError(f"{owner}: {name} must be an int32 tensor [b + 1], "
                         f"got {getattr(cu_seqlens, 'dtype', None)} "
                         f"{tuple(getattr(cu_seqlens, 'shape', ()))}")
    if cu_seqlens.device != device:
        raise ValueError(f"{owner}: {name} is on {cu_seqlens.device}, the "
                         f"tokens on {device}")


def thd_mask_type(owner, mask_type):
    """The program's mask type for a thd call: TE's rule (a padding type),
    with bottom-right alignment the same as top-left (each sequence's
    queries and keys have one length)."""
    if mask_type not in PADDING_MASK_TYPES:
        raise ValueError(f"{owner}: qkv_format='thd' needs a padding mask "
                         f"type ({', '.join(PADDING_MASK_TYPES)}), as in "
                         f"Transformer Engine; got {mask_type!r}")
    if mask_type == "padding_causal_bottom_right":
        return "padding_causal"
    return mask_type


class PackedCall:
    """One side (queries, or keys packed on their own) of a checked thd
    call on `tokens` packed tokens: `cu_seqlens` (int32, contiguous),
    `batch`, the longest sequence the caller vouched for or the offsets
    hold (`longest`), and the compiled `max_s` and `padded_tokens`."""

    def __init__(self, owner, tokens, device, cu_seqlens, max_seqlen=None,
                 name="cu_seqlens_q"):
        _check_cu_seqlens(owner, name, cu_seqlens, device)
        if torch.cuda.is_current_stream_capturing() and max_seqlen is None:
            raise ValueError(f"{owner}: qkv_format='thd' while capturing a "
                             f"CUDA graph needs max_seqlen_q (and "
                             f"max_seqlen_kv for keys packed on their own)")
        self.tokens = int(tokens)
        self.batch = cu_seqlens.numel() - 1
        self.cu_seqlens = cu_seqlens.contiguous()
        starts = cu_seqlens.long()
        lengths = starts[1:] - starts[:-1]
        if max_seqlen is not None:
            # Checked on the device, without waiting for it: a violation
            # raises a CUDA error (device-side assert) instead of reading
            # another sequence's tokens.
            self.longest = int(max_seqlen)
            torch._assert_async(
                (starts[0] == 0) & (lengths.min() >= 0)
                & (starts[-1] <= self.tokens)
                & (lengths.max() <= self.longest),
                "tejit: thd cu_seqlens must start at 0, never decrease, end "
                "at most at the token count, and hold no sequence longer "
                "than max_seqlen")
        else:
            # One read-back for every check.
            first, last, longest, shortest = torch.stack([
                starts[0], starts[-1], lengths.max(),
                lengths.min()]).tolist()
            if first != 0 or shortest < 0 or last > self.tokens:
                raise ValueError(
                    f"{owner}: {name} must start at 0, never decrease and "
                    f"end at most at the token count ({self.tokens}); got "
                    f"{cu_seqlens.tolist()}")
            self.longest = longest
        granule = MAX_SEQ_GRANULE
        self.max_s = max(granule, -(-self.longest // granule) * granule)
        granule = TOKEN_GRANULE
        self.padded_tokens = max(granule,
                                 -(-self.tokens // granule) * granule)
        # Padding between the sequences (TE's cu_seqlens_q_padded), or None.
        self.gaps = None

    def shape_key(self):
        """What of the call's shape selects the program."""
        return ("thd", self.padded_tokens, self.batch, self.max_s)

    def shape_spec(self):
        """The spec's top-level shape keys."""
        return {"seq_length": self.max_s, "batch_size": self.batch,
                "input_format": "thd", "tokens": self.padded_tokens}

    def pad(self, tensor):
        """[t, ...] -> [T, ...] (zero tokens appended; differentiable), or
        `tensor` itself when t is already T; with padding between the
        sequences, their tokens moved back to back first."""
        if self.gaps is not None:
            tensor = self.gaps.pack(tensor)
        extra = self.padded_tokens - self.tokens
        if extra == 0:
            return tensor
        return torch.cat([tensor, tensor.new_zeros(extra, *tensor.shape[1:])])

    def unpad(self, tensor):
        """A program output [T, ...] back to the call's [t, ...] (and its
        padding between sequences)."""
        tensor = tensor[:self.tokens]
        if self.gaps is not None:
            tensor = self.gaps.unpack(tensor)
        return tensor

    def token_angles(self, owner, freqs):
        """TE's rotary table [s, 1, 1, r] (angles of positions 0, 1, ...)
        as each token's angles [t, 1, 1, r]: positions restart at every
        sequence, as TE's apply_rotary_pos_emb with cu_seqlens does.
        Tokens of the tail (and of the padding to T) take position 0."""
        if freqs.shape[0] < self.longest:
            raise ValueError(f"{owner}: rotary_pos_emb covers "
                             f"{freqs.shape[0]} positions, but a sequence "
                             f"may be {self.longest} long")
        position = sequence_positions(self.cu_seqlens, self.padded_tokens)
        return freqs.detach().to(torch.float32).index_select(
            0, position.clamp(0, freqs.shape[0] - 1)).contiguous()


def packed_calls(owner, tokens, kv_tokens, device, cu_seqlens_q,
                 cu_seqlens_kv, cu_seqlens_q_padded=None,
                 cu_seqlens_kv_padded=None, max_seqlen_q=None,
                 max_seqlen_kv=None, pad_between_seqs=None, cross=False):
    """Checks a thd call's sequence arguments (TE's names): (the queries'
    PackedCall, the keys' PackedCall, or None when the keys are packed as
    the queries). Keys packed otherwise (other cu_seqlens_kv, or another
    token count) need `cross` (DotProductAttention's cross-attention)."""
    capturing = torch.cuda.is_current_stream_capturing()
    if cu_seqlens_kv is None:
        cu_seqlens_kv = cu_seqlens_q
    # Padding between sequences: where each sequence starts when it is not
    # where the previous one ends.
    padded = cu_seqlens_q_padded
    if padded is cu_seqlens_q:
        padded = None
    # The keys' padded offsets must be the queries' (or, without padding,
    # the keys' own offsets).
    kv_padded_agrees = (
        cu_seqlens_kv_padded is None
        or cu_seqlens_kv_padded is cu_seqlens_q_padded
        or (padded is None and cu_seqlens_kv_padded is cu_seqlens_kv)
        or (not capturing and cu_seqlens_q_padded is not None
            and torch.equal(cu_seqlens_kv_padded, cu_seqlens_q_padded)))
    if not kv_padded_agrees:
        raise NotImplementedError(
            f"{owner}: cu_seqlens_kv_padded other than "
            f"cu_seqlens_q_padded is not supported by tejit (pass one "
            f"tensor for both)")
    if pad_between_seqs and padded is None:
        raise ValueError(f"{owner}: pad_between_seqs=True needs "
                         f"cu_seqlens_q_padded (where each sequence starts)")
    _check_cu_seqlens(owner, "cu_seqlens_q", cu_seqlens_q, device)
    _check_cu_seqlens(owner, "cu_seqlens_kv", cu_seqlens_kv, device)
    same = kv_tokens == tokens and (
        cu_seqlens_kv is cu_seqlens_q or (
            not capturing and torch.equal(cu_seqlens_q, cu_seqlens_kv)))
    if same:
        if (max_seqlen_kv is not None and max_seqlen_q is not None
                and int(max_seqlen_kv) != int(max_seqlen_q)):
            raise ValueError(f"{owner}: max_seqlen_kv ({max_seqlen_kv}) "
                             f"differs from max_seqlen_q ({max_seqlen_q}) "
                             f"for keys packed as the queries")
        longest = max_seqlen_q if max_seqlen_q is not None else max_seqlen_kv
        queries = PackedCall(owner, tokens, device, cu_seqlens_q, longest)
        if padded is not None:
            queries.gaps = SequenceGaps(owner, cu_seqlens_q, padded,
                                        queries.tokens, longest is not None)
        return queries, None
    if padded is not None:
        raise NotImplementedError(f"{owner}: padding between sequences "
                                  f"(cu_seqlens_q_padded) with keys packed "
                                  f"on their own is not supported by tejit")
    if not cross:
        raise NotImplementedError(
            f"{owner}: qkv_format='thd' with cu_seqlens_kv other than "
            f"cu_seqlens_q (keys packed otherwise than the queries) is "
            f"supported in DotProductAttention only" + (
                " (while capturing a CUDA graph, pass the same tensor for "
                "both)" if capturing else ""))
    queries = PackedCall(owner, tokens, device, cu_seqlens_q, max_seqlen_q)
    keys = PackedCall(owner, kv_tokens, device, cu_seqlens_kv, max_seqlen_kv,
                      "cu_seqlens_kv")
    if keys.batch != queries.batch:
        raise ValueError(f"{owner}: cu_seqlens_q and cu_seqlens_kv hold "
                         f"{queries.batch} and {keys.batch} sequences")
    return queries, keys


class SequenceGaps:
    """Padding between packed sequences (TE's cu_seqlens_q_padded): sequence
    i's cu_seqlens[i + 1] - cu_seqlens[i] tokens start at padded[i]
    instead of cu_seqlens[i]. The program sees them back to back: the
    call's tokens are permuted so that the sequences come first, as
    cu_seqlens says, and the padding tokens after them (the program's
    tail: attention output 0, no gradient); outputs are permuted back, so
    the padding's rows come back 0 from the attention. Two gathers, no
    host sync."""

    def __init__(self, owner, cu_seqlens, padded, tokens, trusted):
        _check_cu_seqlens(owner, "cu_seqlens_q_padded", padded,
                          cu_seqlens.device)
        if padded.numel() != cu_seqlens.numel():
            raise ValueError(f"{owner}: cu_seqlens_q_padded holds "
                             f"{padded.numel() - 1} sequences, cu_seqlens_q "
                             f"{cu_seqlens.numel() - 1}")
        starts, ends = padded.long(), cu_seqlens.long()
        lengths = ends[1:] - ends[:-1]
        room = starts[1:] - starts[:-1]
        ok = ((starts[0] == 0) & (room >= lengths).all()
              & (starts[-1] <= tokens))
        if trusted:
            torch._assert_async(ok, "tejit: thd cu_seqlens_q_padded must "
                                "start at 0, leave each sequence room for "
                                "its tokens and end at most at the token "
                                "count")
        elif not bool(ok):
            raise ValueError(f"{owner}: cu_seqlens_q_padded must start at 0, "
                             f"leave each sequence room for its tokens and "
                             f"end at most at the token count ({tokens}); "
                             f"got {padded.tolist()} for cu_seqlens_q "
                             f"{cu_seqlens.tolist()}")
        sequence, before_tail, within = token_sequences(starts, tokens)
        inside = before_tail & (within < lengths[sequence])
        # Each row's place in the program's order: its sequence's packed
        # position, or after the sequences, in order.
        outside = torch.cumsum((~inside).long(), 0) - 1
        self.to_program = torch.where(inside, ends[sequence] + within,
                                      ends[-1] + outside)
        self.from_program = torch.empty_like(self.to_program)
        self.from_program[self.to_program] = torch.arange(
            tokens, device=padded.device)

    def pack(self, tensor):
        """The call's rows in the program's order."""
        return tensor.index_select(0, self.from_program)

    def unpack(self, tensor):
        """The program's rows in the call's order."""
        return tensor.index_select(0, self.to_program)
