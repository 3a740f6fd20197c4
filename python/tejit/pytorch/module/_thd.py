"""DotProductAttention's thd layout (Transformer Engine's packed
variable-length sequences): the tokens of every sequence back to back,
query [t, heads, d] and key/value [t, gqa_groups, d], with cu_seqlens
[b + 1] (int32, on the GPU) holding where each sequence starts.

tejit runs such a call as bshd with a padding mask: the call's q, k and v
are scattered (differentiably) into [b, max_s, heads, d], where max_s is
the longest sequence rounded up to a multiple of 64 (so that batches of
similar lengths share one program), the padded program runs, and the
output rows are gathered back to [t, heads * d]. Tokens after
cu_seqlens[-1] (the tail of a packed buffer) get a zero output and no
gradient. The extra traffic is one copy of q, k, v and the output.

Without max_seqlen_q (or max_seqlen_kv) the call reads cu_seqlens back to
the host to find the longest sequence and check the offsets (one sync per
call); with it, the offsets are checked on the device (a violation is a
device-side assert, a CUDA error) and nothing waits. While a CUDA graph is
being captured, max_seqlen_q must be given and both cu_seqlens must be the
same tensor.
"""
import torch

# max_s is rounded up to this: fewer distinct programs, little padding.
MAX_SEQ_GRANULE = 64


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
                         f"query on {device}")


def _same_sequences(owner, cu_seqlens_q, cu_seqlens_kv, capturing):
    """Refuses keys/values packed otherwise than the queries."""
    if cu_seqlens_kv is cu_seqlens_q:
        return
    if capturing or not torch.equal(cu_seqlens_q, cu_seqlens_kv):
        raise NotImplementedError(
            f"{owner}: qkv_format='thd' with cu_seqlens_kv other than "
            f"cu_seqlens_q (cross-attention of packed sequences) is not "
            f"supported by tejit" + (" (while capturing a CUDA graph, pass "
                                     "the same tensor for both)"
                                     if capturing else ""))


def _scatter(tensor, rows, padded_rows):
    """`tensor`'s rows at `rows` of a zero [padded_rows, ...] tensor (row
    index padded_rows: dropped)."""
    buffer = tensor.new_zeros(padded_rows + 1, *tensor.shape[1:])
    buffer.index_copy_(0, rows, tensor)
    return buffer[:padded_rows]


def _gather(padded, rows, inside):
    """Rows `rows` of `padded`, zero where not `inside`."""
    out = padded.index_select(0, rows)
    return out.masked_fill_(~inside.view(-1, *[1] * (out.dim() - 1)), 0)


class _Pad(torch.autograd.Function):
    """[t, ...] -> [padded_rows, ...] and its gradient, the gather back
    (no atomics: every token has its own row)."""

    @staticmethod
    def forward(ctx, tensor, packed):
        ctx.packed = packed
        return _scatter(tensor, packed.rows, packed.padded_rows)

    @staticmethod
    def backward(ctx, grad):
        packed = ctx.packed
        return _gather(grad, packed.gather_rows, packed.inside), None


class _Unpad(torch.autograd.Function):
    """[padded_rows, ...] -> [t, ...] (zero tail rows) and its gradient."""

    @staticmethod
    def forward(ctx, padded, packed):
        ctx.packed = packed
        return _gather(padded, packed.gather_rows, packed.inside)

    @staticmethod
    def backward(ctx, grad):
        packed = ctx.packed
        return _scatter(grad.contiguous(), packed.rows,
                        packed.padded_rows), None


class PackedSequences:
    """Where each token of a thd call goes in the padded [b, max_s]
    layout; `mask` is the padded layout's [b, 1, 1, max_s] padding mask
    (True = padding)."""

    def __init__(self, owner, cu_seqlens, tokens, max_seqlen):
        device = cu_seqlens.device
        self.batch = cu_seqlens.numel() - 1
        capturing = torch.cuda.is_current_stream_capturing()
        starts = cu_seqlens.long()
        lengths = starts[1:] - starts[:-1]
        if capturing and max_seqlen is None:
            raise ValueError(f"{owner}: qkv_format='thd' while capturing a "
                             f"CUDA graph needs max_seqlen_q")
        if max_seqlen is not None:
            # Checked on the device, without waiting for it: a violation
            # raises a CUDA error (device-side assert) instead of packing
            # tokens into another sequence's rows.
            longest = int(max_seqlen)
            torch._assert_async(
                (starts[0] == 0) & (lengths.min() >= 0)
                & (starts[-1] <= tokens) & (lengths.max() <= longest),
                "tejit: thd cu_seqlens must start at 0, never decrease, end "
                "at most at the token count, and hold no sequence longer "
                "than max_seqlen")
        else:
            # One read-back for every check.
            first, last, longest, shortest = torch.stack([
                starts[0], starts[-1], lengths.max(),
                lengths.min()]).tolist()
            if first != 0 or shortest < 0 or last > tokens:
                raise ValueError(
                    f"{owner}: cu_seqlens must start at 0, never decrease "
                    f"and end at most at the token count ({tokens}); got "
                    f"{cu_seqlens.tolist()}")
            if max_seqlen is not None and int(max_seqlen) < longest:
                raise ValueError(f"{owner}: max_seqlen {max_seqlen} is "
                                 f"shorter than the longest sequence "
                                 f"({longest})")
        granule = MAX_SEQ_GRANULE
        self.max_s = max(granule, -(-longest // granule) * granule)
        token = torch.arange(tokens, device=device)
        sequence = torch.searchsorted(starts[1:], token, right=True)
        inside = sequence < self.batch
        sequence = sequence.clamp(max=self.batch - 1)
        # Tokens after the last sequence go to one spare row at the end
        # (scattering) or read row 0 and are zeroed (gathering).
        self.padded_rows = self.batch * self.max_s
        self.inside = inside
        self.gather_rows = torch.where(
            inside, sequence * self.max_s + token - starts[sequence], 0)
        self.rows = torch.where(inside, self.gather_rows, self.padded_rows)
        positions = torch.arange(self.max_s, device=device)
        self.mask = (positions[None, :] >= lengths[:, None]).view(
            self.batch, 1, 1, self.max_s)

    def pad(self, tensor):
        """[t, heads, d] -> [b, max_s, heads, d], zeros where padded."""
        return _Pad.apply(tensor, self).view(self.batch, self.max_s,
                                             *tensor.shape[1:])

    def unpad(self, output):
        """[b, max_s, width] -> [t, width] (zero rows after the last
        sequence)."""
        return _Unpad.apply(
            output.reshape(self.padded_rows, output.shape[-1]), self)


def thd_call(owner, query_layer, key_layer, value_layer, attention_mask,
             mask_type, cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_padded,
             cu_seqlens_kv_padded, max_seqlen_q, max_seqlen_kv,
             pad_between_seqs):
    """Checks a thd call and packs it: (PackedSequences, padded q, k, v,
    the padded call's mask type). TE's rules: 3-D q/k/v, a padding mask
    type, cu_seqlens given; tejit's: keys/values packed as the queries,
    no separate padded offsets."""
    for name, tensor in (("query_layer", query_layer),
                         ("key_layer", key_layer),
                         ("value_layer", value_layer)):
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 3:
            raise ValueError(f"{owner}: qkv_format='thd' takes 3-D {name} "
                             f"[t, heads, d], got "
                             f"{tuple(getattr(tensor, 'shape', ()))}")
    if key_layer.shape[0] != query_layer.shape[0] or (
            value_layer.shape[:2] != key_layer.shape[:2]):
        raise ValueError(f"{owner}: thd query, key and value must hold the "
                         f"same tokens, got {list(query_layer.shape)}, "
                         f"{list(key_layer.shape)}, "
                         f"{list(value_layer.shape)}")
    if "padding" not in mask_type:
        raise ValueError(f"{owner}: qkv_format='thd' needs a padding mask "
                         f"type (padding, padding_causal, "
                         f"padding_causal_bottom_right), as in Transformer "
                         f"Engine; got {mask_type!r}")
    if attention_mask is not None:
        raise ValueError(f"{owner}: qkv_format='thd' takes the sequences "
                         f"from cu_seqlens_q/cu_seqlens_kv, not an "
                         f"attention_mask")
    device = query_layer.device
    _check_cu_seqlens(owner, "cu_seqlens_q", cu_seqlens_q, device)
    _check_cu_seqlens(owner, "cu_seqlens_kv", cu_seqlens_kv, device)
    capturing = torch.cuda.is_current_stream_capturing()
    _same_sequences(owner, cu_seqlens_q, cu_seqlens_kv, capturing)
    for name, padded in (("cu_seqlens_q_padded", cu_seqlens_q_padded),
                         ("cu_seqlens_kv_padded", cu_seqlens_kv_padded)):
        if padded is not None and not (padded is cu_seqlens_q or (
                not capturing and torch.equal(padded, cu_seqlens_q))):
            raise NotImplementedError(
                f"{owner}: {name} other than the sequences' offsets "
                f"(padding between packed sequences) is not supported by "
                f"tejit")
    if pad_between_seqs:
        raise NotImplementedError(f"{owner}: pad_between_seqs=True is not "
                                  f"supported by tejit")
    if (max_seqlen_kv is not None and max_seqlen_q is not None
            and int(max_seqlen_kv) != int(max_seqlen_q)):
        raise NotImplementedError(f"{owner}: thd with max_seqlen_kv other "
                                  f"than max_seqlen_q is not supported by "
                                  f"tejit")
    packed = PackedSequences(owner, cu_seqlens_q, query_layer.shape[0],
                             max_seqlen_q if max_seqlen_q is not None
                             else max_seqlen_kv)
    # Each sequence's queries and keys have one length: bottom-right and
    # top-left alignments agree.
    if mask_type == "padding_causal_bottom_right":
        mask_type = "padding_causal"
    return (packed, packed.pad(query_layer), packed.pad(key_layer),
            packed.pad(value_layer), mask_type)
