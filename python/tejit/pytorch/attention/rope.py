"""Rotary position embeddings with Transformer Engine's interface.

RotaryPositionEmbedding(dim)(seq) builds the angle table TE's attention
modules take as `rotary_pos_emb`: float32 [seq, 1, 1, dim], position p and
frequency index i giving p * base^(-2i / dim), the dim / 2 frequencies
written twice (halves, or adjacent pairs when interleaved).
tejit's MultiheadAttention / TransformerLayer apply such a table inside
their compiled program; apply_rotary_pos_emb applies one in PyTorch, for
code that rotates q / k itself.
"""
import torch


class RotaryPositionEmbedding(torch.nn.Module):
    """TE's RotaryPositionEmbedding(dim, rotary_percent=1.0,
    seq_len_interpolation_factor=None,
    pretrained_max_position_embeddings=None, rotary_base=10000.0,
    interleaved=False); forward(max_seq_len, offset=0) returns the
    [max_seq_len, 1, 1, rotated dim] float32 table on the module's device
    (the current CUDA device at construction, as TE's).

    rotary_percent < 1 rotates only the first int(dim * rotary_percent)
    channels of each head (in tejit's compiled attention too).
    With both seq_len_interpolation_factor and
    pretrained_max_position_embeddings (TE uses neither alone), positions
    are divided by the factor (linear position interpolation), or, for a
    sequence longer than pretrained x factor, squeezed into the pretrained
    length (TE's dynamic rule)."""

    def __init__(self, dim, rotary_percent=1.0,
                 seq_len_interpolation_factor=None,
                 pretrained_max_position_embeddings=None,
                 rotary_base=10000.0, interleaved=False):
        super().__init__()
        if not 0.0 < rotary_percent <= 1.0:
            raise ValueError(f"RotaryPositionEmbedding: rotary_percent must "
                             f"be in (0, 1], got {rotary_percent}")
        if rotary_percent < 1.0:
            dim = int(dim * rotary_percent)
        if dim <= 0 or dim % 2:
            raise ValueError(f"RotaryPositionEmbedding: the rotated "
                             f"dimension must be a positive even number, got "
                             f"{dim}")
        if rotary_base <= 0:
            raise ValueError(f"RotaryPositionEmbedding: rotary_base must be "
                             f"positive, got {rotary_base}")
        self.dim = dim
        self.seq_len_interpolation_factor = seq_len_interpolation_factor
        self.pretrained_max_position_embeddings = \
            pretrained_max_position_embeddings
        self.rotary_base = rotary_base
        self.interleaved = interleaved
        device = (torch.device("cuda", torch.cuda.current_device())
                  if torch.cuda.is_available() else torch.device("cpu"))
        exponents = torch.arange(0, dim, 2, dtype=torch.float32,
                                 device=device) / dim
        self.register_buffer("inv_freq", 1.0 / (rotary_base ** exponents),
                             persistent=False)

    def forward(self, max_seq_len, offset=0):
        positions = torch.arange(max_seq_len, dtype=self.inv_freq.dtype,
                                 device=self.inv_freq.device) + offset
        factor = self.seq_len_interpolation_factor
        pretrained = self.pretrained_max_position_embeddings
        # TE interpolates only when both are given.
        if factor is not None and pretrained is not None:
            if max_seq_len > pretrained * factor:
                positions = positions * (pretrained / max_seq_len)
            else:
                positions = positions / factor
        angles = torch.outer(positions, self.inv_freq)  # [s, dim / 2]
        if self.interleaved:
            table = angles.repeat_interleave(2, dim=-1)
        else:
            table = torch.cat([angles, angles], dim=-1)
        return table.view(max_seq_len, 1, 1, self.dim)


def _rotate_half(t, interleaved):
    """The partner of each channel, negated for the first of the pair:
    (x1, x2) -> (-x2, x1) over the two halves, or over adjacent pairs when
    interleaved."""
    if interleaved:
        pairs = t.unflatten(-1, (-1, 2))
        return torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(
            -2)
    half = t.shape[-1] // 2
    return torch.cat([-t[..., half:], t[..., :half]], dim=-1)


def token_sequences(starts, tokens):
    """For each of `tokens` rows, given where each of b sequences starts
    (`starts` [b + 1], the last entry where the tail begins): (its
    sequence, clamped to b - 1; whether it comes before the tail; its
    offset from its sequence's start). On the device, no host sync."""
    starts = starts.long()
    batch = starts.numel() - 1
    row = torch.arange(tokens, device=starts.device)
    sequence = torch.searchsorted(starts[1:], row, right=True)
    before_tail = sequence < batch
    sequence = sequence.clamp(max=batch - 1)
    return sequence, before_tail, row - starts[sequence]


def sequence_positions(cu_seqlens, tokens):
    """Each of `tokens` packed tokens' position in its sequence (cu_seqlens
    int32 [b + 1]: where each starts); tokens after the last sequence take
    position 0."""
    _, inside, offset = token_sequences(cu_seqlens, tokens)
    return torch.where(inside, offset, 0)


def apply_rotary_pos_emb(t, freqs, tensor_format="sbhd", interleaved=False,
                         fused=False, cu_seqlens=None, cp_size=1, cp_rank=0):
    """TE's apply_rotary_pos_emb: the first freqs.shape[-1] channels of
    every head of t ([s, b, h, d], [b, s, h, d], or packed sequences [t,
    h, d] with cu_seqlens) become t cos(f) + rotate_half(t) sin(f) with f
    the table's row of the token's position (cos / sin taken in float32,
    then cast to t's dtype, as TE's unfused path); the remaining channels
    pass through. thd positions restart at every sequence (tokens after
    cu_seqlens[-1] take position 0, which leaves them as they are); a
    position past the table is a device-side assert. `fused` is accepted
    (this is one PyTorch expression either way). Context parallelism is
    not supported."""
    owner = "apply_rotary_pos_emb"
    if tensor_format not in ("sbhd", "bshd", "thd"):
        raise ValueError(f"{owner}: tensor_format must be 'sbhd', 'bshd' or "
                         f"'thd', got {tensor_format!r}")
    if cp_size != 1 or cp_rank != 0:
        raise NotImplementedError(
            f"{owner}: context parallelism (cp_size, cp_rank) is not "
            f"supported by tejit")
    packed = tensor_format == "thd"
    if packed != (cu_seqlens is not None):
        raise ValueError(f"{owner}: cu_seqlens goes with tensor_format "
                         f"'thd' (packed sequences) and only with it")
    if (t.dim() != (3 if packed else 4) or freqs.dim() != 4
            or tuple(freqs.shape[1:3]) != (1, 1)):
        raise ValueError(f"{owner}: t must be {'3' if packed else '4'}-D "
                         f"({tensor_format}) and freqs [s, 1, 1, d], got "
                         f"{tuple(t.shape)} and {tuple(freqs.shape)}")
    rot_dim = freqs.shape[-1]
    if packed:
        if rot_dim > t.shape[-1] or rot_dim % 2:
            raise ValueError(f"{owner}: freqs {tuple(freqs.shape)} must "
                             f"cover at most the {t.shape[-1]} channels of a "
                             f"head, an even number of them")
        positions = sequence_positions(cu_seqlens, t.shape[0])
        torch._assert_async(positions.max() < freqs.shape[0],
                            "tejit: a packed sequence is longer than the "
                            "rotary table")
        angles = freqs.float().index_select(
            0, positions.clamp(max=freqs.shape[0] - 1)).view(
                t.shape[0], 1, rot_dim)
    else:
        seq = t.shape[0] if tensor_format == "sbhd" else t.shape[1]
        if freqs.shape[0] < seq or rot_dim > t.shape[-1] or rot_dim % 2:
            raise ValueError(f"{owner}: freqs {tuple(freqs.shape)} must "
                             f"cover the {seq} positions and at most the "
                             f"{t.shape[-1]} channels of a head, an even "
                             f"number of them")
        angles = freqs[:seq].float()
        if tensor_format == "bshd":
            angles = angles.transpose(0, 1)  # [1, s, 1, d]
    cos, sin = torch.cos(angles).to(t.dtype), torch.sin(angles).to(t.dtype)
    rotated, passed = t[..., :rot_dim], t[..., rot_dim:]
    rotated = rotated * cos + _rotate_half(rotated, interleaved) * sin
    return torch.cat([rotated, passed], dim=-1) if passed.numel() else rotated
