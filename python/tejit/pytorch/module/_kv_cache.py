"""One step of autoregressive decoding through a KV cache (TE's
`inference_params`, attention/inference.py) in DotProductAttention,
MultiheadAttention and TransformerLayer.

The program of a step (docs/kv-cache-plan.md, "The contract") takes the
step's new tokens packed (thd): `tokens` T = the input's token count
rounded up to _thd.TOKEN_GRANULE (zero tokens appended; outputs cut back),
`batch_size` = max_batch_size (cache rows; rows past the live sequences
have no tokens), `seq_length` = the most new tokens of one sequence
(InferenceParams.max_ctx_len when given) rounded up by query_bucket (a
power of two up to 16: 1 for a decode step; beyond, a multiple of
_thd.MAX_SEQ_GRANULE; at most max_sequence_length), and `kv_cache:
{max_sequence_length}` (paged caches, docs/paged-kv-cache.md: also
page_size and total_pages); inputs cu_seqlens
(InferenceParams.cu_seqlens_q), cu_seqlens_kv, (paged) page_table and the
layer's key_cache / value_cache, passed by pointer: the program writes
the new keys and values into them (paged: into the pages the table
lists) and attends to rows [0, cached + new) of each sequence. Everything a step needs from the host comes from pre_step's
plan, so a step never waits for the GPU and is CUDA-graph capturable
(fixed input shape, the same InferenceParams and rotary table).

Input layouts: thd [t, ...] (sequences back to back as pre_step listed
them; tokens after the last one are a tail whose attention output is 0),
or bshd [b, s, ...] / sbhd [s, b, ...] when every live sequence has s new
tokens this step (a decode step: s = 1); b may exceed the live sequences
(the extra rows are a tail), so a fixed-shape step survives sequences
finishing.
"""
import torch
import torch.nn.functional as F

from . import _attention_specs, _bias, _thd
from ..attention.inference import InferenceParams
from ..attention.rope import token_sequences
from ..attention._inference_steps import round_up


def check_inference_call(owner, module, inference_params, attention_mask,
                         window, cross=False):
    """Refuses what a KV-cache step does not run."""
    if not isinstance(inference_params, InferenceParams):
        raise TypeError(f"{owner}: inference_params must be a "
                        f"tejit.pytorch.InferenceParams, got "
                        f"{type(inference_params).__name__}")
    if module.training and torch.is_grad_enabled():
        raise RuntimeError(
            f"{owner}: inference_params (a KV cache) runs in inference only: "
            f"call module.eval() or run under torch.no_grad() (the cache "
            f"is written in place; nothing is differentiated)")
    if module._dropout_active():
        raise RuntimeError(f"{owner}: inference_params with dropout active "
                           f"(training mode): call module.eval()")
    if cross:
        raise NotImplementedError(f"{owner}: inference_params with "
                                  f"cross-attention is not supported by "
                                  f"tejit (self-attention only)")
    if attention_mask is not None:
        raise ValueError(f"{owner}: with inference_params the sequences' "
                         f"lengths come from InferenceParams.pre_step; pass "
                         f"attention_mask=None")
    if tuple(window) not in ((-1, -1), (-1, 0)):
        raise NotImplementedError(f"{owner}: window_size {tuple(window)} "
                                  f"with inference_params is not supported "
                                  f"by tejit")


def check_sequence_arguments(owner, plan, inference_params, cu_seqlens_q,
                             cu_seqlens_kv, max_seqlen_q):
    """The forward's own sequence arguments must agree with the
    InferenceParams' step (TE's callers pass its tensors)."""
    for name, given, own in (
            ("cu_seqlens_q", cu_seqlens_q, inference_params.cu_seqlens_q),
            ("cu_seqlens_kv", cu_seqlens_kv,
             inference_params.cu_seqlens_kv)):
        if given is None or given is own:
            continue
        if torch.cuda.is_current_stream_capturing():
            raise ValueError(f"{owner}: while capturing a CUDA graph, pass "
                             f"inference_params.{name} itself as {name} "
                             f"(or leave it None)")
        want = (plan.cu_seqlens_q if name == "cu_seqlens_q"
                else plan.cu_seqlens_kv)
        values = given.tolist()
        if values != want[:len(values)] or len(values) < plan.batch_size + 1:
            raise ValueError(f"{owner}: {name} {values} is not the step's "
                             f"{want[:plan.batch_size + 1]} "
                             f"(InferenceParams.pre_step's); leave it None")
    if max_seqlen_q is not None and int(max_seqlen_q) < plan.max_new:
        raise ValueError(f"{owner}: max_seqlen_q={max_seqlen_q}, but a "
                         f"sequence has {plan.max_new} new tokens this step")


class Layout:
    """A call's tensors as the step's packed tokens [t, ...] and back."""

    def __init__(self, owner, qkv_format, plan, lead):
        """`lead`: the input's leading dims ([t], [b, s] or [s, b])."""
        self.format = qkv_format
        if qkv_format == "thd":
            self.tokens = lead[0]
            return
        seq, batch = ((lead[0], lead[1]) if qkv_format == "sbhd"
                      else (lead[1], lead[0]))
        uneven = any(n != seq for n in plan.new_tokens)
        if uneven or batch < plan.batch_size:
            shape = "[s, b, ...]" if qkv_format == "sbhd" else "[b, s, ...]"
            raise ValueError(
                f"{owner}: with inference_params, a {qkv_format} input "
                f"{shape} = {list(lead)} needs b >= the step's "
                f"{plan.batch_size} sequences, each with s = {seq} new "
                f"tokens; pre_step gave {plan.new_tokens}. Pass packed "
                f"tokens (qkv_format='thd') for steps of uneven lengths")
        self.seq, self.batch = seq, batch
        self.tokens = seq * batch

    def pack(self, tensor):
        """[b, s, ...] / [s, b, ...] / [t, ...] -> [t, ...] (b-major)."""
        if self.format == "thd":
            return tensor
        if self.format == "sbhd":
            tensor = tensor.transpose(0, 1)
        return tensor.reshape(self.tokens, *tensor.shape[2:])

    def unpack(self, tensor):
        if self.format == "thd":
            return tensor
        tensor = tensor.view(self.batch, self.seq, *tensor.shape[1:])
        return tensor.transpose(0, 1) if self.format == "sbhd" else tensor


class KvStep:
    """One forward's step of `inference_params` on `tokens` packed tokens:
    the compiled shape, the program's sequence and cache inputs, padding
    to the compiled token count."""

    def __init__(self, owner, inference_params, plan, tokens):
        if tokens < plan.total_new:
            raise ValueError(f"{owner}: the input holds {tokens} tokens, "
                             f"but pre_step gave {plan.total_new} new tokens "
                             f"({plan.new_tokens})")
        self.params = inference_params
        self.plan = plan
        self.tokens = int(tokens)
        self.padded_tokens = round_up(max(self.tokens, 1),
                                      _thd.TOKEN_GRANULE)
        longest = plan.max_new
        if inference_params.max_ctx_len is not None:
            if longest > inference_params.max_ctx_len:
                raise ValueError(
                    f"{owner}: a sequence has {longest} new tokens this "
                    f"step, more than InferenceParams.max_ctx_len "
                    f"({inference_params.max_ctx_len})")
            longest = inference_params.max_ctx_len
        # At most the cache's length (the compiler requires it; pre_step
        # keeps every sequence's new tokens within it).
        self.max_s = min(query_bucket(longest),
                         inference_params.max_sequence_length)

    def paging(self):
        """(page_size, total pages) of paged caches, else (None, None)."""
        params = self.params
        return ((params.page_size, params.total_num_pages)
                if params.is_paged else (None, None))

    def shape_key(self):
        return ("kv_cache", self.padded_tokens, self.params.max_batch_size,
                self.max_s, self.params.max_sequence_length, *self.paging())

    def shape_spec(self):
        return _attention_specs.kv_cache_shape_spec(
            self.params.max_batch_size, self.max_s, self.padded_tokens,
            self.params.max_sequence_length, *self.paging())

    def pad(self, tensor):
        extra = self.padded_tokens - self.tokens
        if extra == 0:
            return tensor
        # Zero rows after the last: (0, 0) for every inner dim, then dim 0.
        return F.pad(tensor, (0, 0) * (tensor.dim() - 1) + (0, extra))

    def unpad(self, tensor):
        return tensor[:self.tokens]

    def inputs(self, owner, module, groups, kv_channels, dtype, device):
        """The program's sequence and cache inputs, with module's
        (layer_number's) caches and, paged, the shared page table (after
        cu_seqlens_kv, as the program takes it). The caches and the table
        go as they are (the program writes the caches; pre_step rewrites
        the table in place, which a captured step replays against): no
        copy may stand in for them."""
        key_cache, value_cache = self.params._caches(
            owner, layer_number_of(module), groups, kv_channels, dtype,
            device)
        inputs = {"cu_seqlens": self.params.cu_seqlens_q,
                  "cu_seqlens_kv": self.params.cu_seqlens_kv}
        if self.params.is_paged:
            inputs["page_table"] = self.params.cache_manager.page_table
        inputs.update(key_cache=key_cache, value_cache=value_cache)
        return inputs

    def token_angles(self, owner, rotary_pos_emb, kv_channels, device):
        """TE's rotary table [max_s, 1, 1, r] as the angles of each packed
        token [T, 1, 1, r]: new token j of sequence i takes position
        pre_step_seqlens[i] + j; the tail takes position 0. Gathered on the
        device from the whole table (a captured step replays later steps
        right). Outside a capture, the layers of one step share the
        gathered angles."""
        # The forward's checks (a pair, shape, width, device), on the
        # positions this step reaches.
        from .attention import rotary_input
        rotary_input(owner, rotary_pos_emb, max(self.plan.max_total, 1),
                     kv_channels, device)
        freqs = (rotary_pos_emb[0] if isinstance(rotary_pos_emb,
                                                 (tuple, list))
                 else rotary_pos_emb)
        params = self.params
        capturing = (torch.cuda.is_available()
                     and torch.cuda.is_current_stream_capturing())
        key = (self.padded_tokens, freqs.data_ptr(), freqs.shape,
               freqs.dtype, freqs._version)
        if not capturing and params._angles is not None \
                and params._angles[0] == key:
            return params._angles[1]
        table = freqs.detach().to(torch.float32)
        if self.padded_tokens <= params._token_positions.numel():
            # pre_step's host-made positions (zeros past the step's tokens).
            position = params._token_positions[:self.padded_tokens]
        else:
            sequence, inside, offset = token_sequences(params.cu_seqlens_q,
                                                       self.padded_tokens)
            start = params.pre_step_seqlens.long().index_select(0, sequence)
            position = torch.where(inside, start + offset, 0)
        if capturing:
            # A replay's later steps reach positions the check above did
            # not see: past the table they read its last row, never out of
            # bounds.
            position = position.clamp(0, table.shape[0] - 1)
        angles = table.index_select(0, position).contiguous()
        if not capturing:
            params._angles = (key, angles)
        return angles


# Steps of at most this many new tokens per sequence compile max_seqlen_q
# as a power of two: the runtime's decode attention kernel takes them
# (runtime kDecodeMaxQueries, docs/kv-cache-plan.md), and a decode step
# then computes one query row per sequence, not a 64-row tile.
DECODE_QUERIES = 16


def query_bucket(longest):
    """The compiled max_seqlen_q of a step whose longest sequence has
    `longest` new tokens: the next power of two up to DECODE_QUERIES, a
    multiple of _thd.MAX_SEQ_GRANULE beyond (few programs either way)."""
    longest = max(int(longest), 1)
    if longest <= DECODE_QUERIES:
        return 1 << (longest - 1).bit_length()
    return round_up(longest, _thd.MAX_SEQ_GRANULE)


def layer_number_of(module):
    """The cache's key, as TE's attention takes it (1 when unset)."""
    number = getattr(module, "layer_number", None)
    return 1 if number is None else number


def start_step(owner, module, inference_params, qkv_format, mask_type,
               attention_mask, window, cross, lead, call_arguments,
               cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=None):
    """What every cached forward checks and sets up once its inputs are
    checked: (the program's mask type, the input's Layout, the KvStep).
    `lead`: the input's leading dims; `call_arguments` the forward's
    arguments check_attention_call refuses."""
    from .attention import check_attention_call
    _bias.refuse(owner, "inference_params (a KV cache)",
                 **_bias.pop_arguments(call_arguments))
    check_inference_call(owner, module, inference_params, attention_mask,
                         window, cross)
    mask_type = _attention_specs.kv_cache_mask_type(owner, mask_type)
    check_attention_call(owner, None, **call_arguments)
    plan = inference_params._step_plan(owner)
    check_sequence_arguments(owner, plan, inference_params, cu_seqlens_q,
                             cu_seqlens_kv, max_seqlen_q)
    layout = Layout(owner, qkv_format, plan, lead)
    return mask_type, layout, KvStep(owner, inference_params, plan,
                                     layout.tokens)


def run_kv_cache_block(module, owner, hidden_states, hidden_size, qkv_format,
                       mask_type, attention_mask, rotary_pos_emb, kv_channels,
                       groups, layer_spec, is_first_microbatch, window,
                       inference_params, cross=False, cu_seqlens_q=None,
                       cu_seqlens_kv=None, max_seqlen_q=None,
                       max_seqlen_kv=None, **call_arguments):
    """MultiheadAttention's or TransformerLayer's step with a KV cache on
    hidden_states [t, hidden] (thd), [b, s, hidden] (bshd) or [s, b,
    hidden] (sbhd): {output name: tensor} in the input's layout.
    `layer_spec(rotary_dim)` is the layer's spec; `call_arguments` the
    forward's arguments check_attention_call refuses."""
    from .attention import check_input
    check_input(owner, "hidden_states", hidden_states,
                2 if qkv_format == "thd" else 3)
    if hidden_states.shape[-1] != hidden_size:
        raise ValueError(f"{owner}: expected hidden_states [..., "
                         f"{hidden_size}] ({qkv_format}), got "
                         f"{list(hidden_states.shape)}")
    mask_type, layout, step = start_step(
        owner, module, inference_params, qkv_format, mask_type,
        attention_mask, window, cross, hidden_states.shape[:-1],
        call_arguments, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q)
    dtype = module._checked_dtype(hidden_states)
    device = hidden_states.device
    activations = {"input": step.pad(layout.pack(
        hidden_states.to(dtype)).contiguous())}
    activations.update(step.inputs(owner, module, groups, kv_channels, dtype,
                                   device))
    rotary_dim = 0
    if rotary_pos_emb is not None:
        angles = step.token_angles(owner, rotary_pos_emb, kv_channels, device)
        activations["rotary_pos_emb"] = angles
        rotary_dim = angles.shape[3]
    variant = ("kv_cache", mask_type, rotary_dim)
    outputs = module._run_program(
        activations, dtype, step.shape_key(), step.shape_spec(),
        hidden_states.shape, lambda: layer_spec(rotary_dim), variant,
        is_first_microbatch=is_first_microbatch, inference_only=True)
    return {name: layout.unpack(step.unpad(tensor))
            for name, tensor in outputs.items()}
