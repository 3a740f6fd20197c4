"""Transformer Engine's InferenceParams (TE 2.x): the KV cache of
autoregressive decoding, for tejit's DotProductAttention,
MultiheadAttention and TransformerLayer (`inference_params=`).

    params = te.InferenceParams(max_batch_size=8, max_sequence_length=2048,
                                num_heads_kv=8, head_dim_k=128,
                                dtype=torch.bfloat16)
    model.eval()
    with torch.no_grad():
        params.pre_step(OrderedDict({0: 37, 1: 12}))    # prefill
        y = layer(x_packed, inference_params=params, rotary_pos_emb=rope)
        params.pre_step(OrderedDict({0: 1, 1: 1}))      # one decode step
        y = layer(x_step, inference_params=params, rotary_pos_emb=rope)

Caches: per layer_number one key and one value tensor [max_batch_size,
max_sequence_length, num_heads_kv, head_dim] (bshd), zeros, allocated by
allocate_memory(layer_number) or by the first forward of that layer (which
also fills in num_heads_kv, head_dim_k/_v and dtype when the constructor
left them None). The compiled program writes each step's new keys and
values into them in place and attends to them (docs/kv-cache-plan.md): the
tensors keep their addresses, so a step captured in a CUDA graph replays
against them.

Paged caches (is_paged=True, total_num_pages=N, page_size=p; p must divide
max_sequence_length; docs/paged-kv-cache.md): per layer_number a key and a
value pool of pages [N, p, num_heads_kv, head_dim] (cache_manager, a
PagedKVCacheManager) and one page table [max_batch_size,
max_sequence_length // p] int32 shared by the layers
(cache_manager.page_table): row i lists the pages holding the i-th
sequence's rows in order, 0 past them. Sequences of different lengths
then share the memory instead of each reserving max_sequence_length rows.
pre_step gives pages out (_pages.py: finished sequences' pages go back to
the pool; each live sequence holds ceil(tokens / p) pages; RuntimeError,
nothing changed, when the pool runs dry) and writes the table with the
sequence tensors' copy. convert_paged_to_nonpaged(layer_number) gathers a
layer's pages back into [max_batch_size, max_sequence_length, ...] copies
(for checks and debugging).

pre_step (_inference_steps.py says how rows are ordered): batch row i of
every cache (paged: of the page table) holds the i-th sequence of
`step_dict`; a sequence of the previous step missing from `step_dict` has
finished and is dropped; a continuing sequence gains step_dict's count of
tokens (TE's non-paged manager adds 1 whatever the count; the same for
decode steps). It writes, with one host-to-device copy and no sync,
cu_seqlens_q (new tokens), cu_seqlens_kv (cached + new) [max_batch_size +
1] int32, padded with the last value past the live sequences, and
pre_step_seqlens [max_batch_size] (get_seqlens_pre_step(): tokens cached
before the step; rotary positions start there), the page table (paged)
and, for steps of up to 16 new tokens a sequence, each new token's rotary
position (which the layers of a step gather their angles with). These
tensors keep their addresses from step to step.

Not supported by tejit (NotImplementedError naming the argument): custom
cache managers, head_dim_v other than head_dim_k.
"""
from collections import OrderedDict

import torch

from ._inference_steps import plan_step, round_up
from ._pages import PageAllocator, check_paging

__all__ = ["InferenceParams", "KVCacheManager", "NonPagedKVCacheManager",
           "PagedKVCacheManager"]

_FORMATS = ("bshd", "sbhd", "thd")

# Steps with at most this many new tokens per row get their tokens' rotary
# positions from pre_step's copy; the buffer is a multiple of the modules'
# token granule (module/_thd.py's TOKEN_GRANULE), so a decode step's padded
# token count fits it.
_POSITIONED_TOKENS_PER_ROW = 16
_POSITIONS_GRANULE = 64
# The page table starts this many int32 into pre_step's device buffer
# apart (64 bytes), so its rows are as aligned as a tensor of its own.
_TABLE_GRANULE = 16


class KVCacheManager:
    """TE's base class of cache managers (custom managers derive from it;
    tejit runs only its own NonPagedKVCacheManager and
    PagedKVCacheManager)."""

    def __init__(self):
        self.cache = {}
        self.sequences = OrderedDict()

    def reset(self):
        self.sequences = OrderedDict()


class _OwnCacheManager(KVCacheManager):
    """What tejit's two managers share: the shape they were made for
    (num_heads, head dims and dtype may be filled in by the first layer
    that runs) and allocate_memory of a cache_shape()."""

    def __init__(self, max_batch_size, max_seqlen, num_heads, head_dim_k,
                 dtype, head_dim_v=None, device=None):
        super().__init__()
        self.max_batch_size = int(max_batch_size)
        self.max_seqlen = int(max_seqlen)
        self.num_heads = num_heads
        self.head_dim_k = head_dim_k
        self.head_dim_v = head_dim_v if head_dim_v is not None else head_dim_k
        self.dtype = dtype
        self.device = device

    def allocate_memory(self, layer_number):
        if None in (self.num_heads, self.head_dim_k, self.dtype):
            raise ValueError(
                "InferenceParams.allocate_memory: the cache shape is not "
                "known yet; pass num_heads_kv, head_dim_k and dtype to "
                "InferenceParams, or let the layer's first forward allocate "
                "its cache")
        self.cache[layer_number] = tuple(
            torch.zeros(*self.cache_shape(head_dim), dtype=self.dtype,
                        device=self.device)
            for head_dim in (self.head_dim_k, self.head_dim_v))


class NonPagedKVCacheManager(_OwnCacheManager):
    """The caches of one InferenceParams: cache[layer_number] = (key cache,
    value cache), each [max_batch_size, max_seqlen, num_heads, head_dim]."""

    def cache_shape(self, head_dim):
        """One layer's key or value cache shape."""
        return (self.max_batch_size, self.max_seqlen, self.num_heads,
                int(head_dim))

    def move_rows(self, moves, length):
        """Moves the first `length` positions of each (new row, old row)
        of every cache, in place (one gather and one scatter per cache)."""
        if not moves or length <= 0:
            return
        new = torch.tensor([m[0] for m in moves], device=self.device)
        old = torch.tensor([m[1] for m in moves], device=self.device)
        for caches in self.cache.values():
            for cache in caches:
                # The gather copies first: cycles of moves are safe.
                cache[new, :length] = cache[old, :length]


class PagedKVCacheManager(_OwnCacheManager):
    """The paged caches of one InferenceParams(is_paged=True):
    cache[layer_number] = (key cache, value cache), each [total_num_pages,
    page_size, num_heads, head_dim], and one page table [max_batch_size,
    max_seqlen // page_size] int32 on the device shared by the layers
    (`page_table`: a view of InferenceParams' pre_step buffer, so it keeps
    its address and pre_step's single copy fills it). Which pages each
    sequence holds is decided on the host (`allocator`,
    _pages.PageAllocator)."""

    def __init__(self, max_batch_size, max_seqlen, num_heads, head_dim_k,
                 dtype, total_num_pages, page_size, page_table,
                 head_dim_v=None, device=None):
        super().__init__(max_batch_size, max_seqlen, num_heads, head_dim_k,
                         dtype, head_dim_v, device)
        self.total_num_pages = int(total_num_pages)
        self.page_size = int(page_size)
        self.max_pages_per_seq = self.max_seqlen // self.page_size
        self.page_table = page_table
        self.allocator = PageAllocator(self.total_num_pages, self.page_size,
                                       self.max_batch_size,
                                       self.max_pages_per_seq)

    def reset(self):
        super().reset()
        self.allocator.reset()

    def cache_shape(self, head_dim):
        return (self.total_num_pages, self.page_size, self.num_heads,
                int(head_dim))

    def move_rows(self, moves, length):
        """Nothing moves: a sequence keeps its pages when its table row
        changes (pre_step rewrites the table)."""

    def gather(self, cache, lengths):
        """`cache` [P, page_size, h, d] as [max_batch_size, max_seqlen, h,
        d] through the page table: row i holds sequence i's `lengths[i]`
        rows, zeros past them (and in rows without a sequence)."""
        table = self.page_table.long()
        rows = cache[table].flatten(1, 2)  # [b, pages * page_size, h, d]
        limit = torch.zeros(self.max_batch_size, dtype=torch.long)
        limit[:len(lengths)] = torch.tensor(lengths, dtype=torch.long)
        position = torch.arange(self.max_seqlen)
        keep = (position[None, :] < limit[:, None]).to(rows.device)
        return torch.where(keep[:, :, None, None], rows,
                           torch.zeros((), dtype=rows.dtype,
                                       device=rows.device))


class InferenceParams:
    """TE's InferenceParams (non-paged or paged KV caches): see the
    module's docstring. Attributes TE's users read: max_batch_size,
    max_sequence_length, num_heads_kv, head_dim_k, head_dim_v, dtype,
    is_paged, total_num_pages, page_size, max_ctx_len, input_qkv_format,
    cache_qkv_format ("bshd"), sequences (seq_id -> tokens after the step,
    in row order), sequences_pre_step (seq_id -> tokens before it),
    batch_size (live sequences), cu_seqlens_q, cu_seqlens_kv,
    pre_step_seqlens, cache_manager (its `cache[layer_number]` = (key
    cache, value cache); paged: also its `page_table`).

    max_ctx_len (TE requires it with qkv_format="thd") also fixes the
    compiled step's longest new-token count: prefill and decode steps of
    one padded token count then share one program (and one CUDA graph).

    total_num_pages and page_size are read only with is_paged=True (TE
    ignores them otherwise; so does tejit)."""

    def __init__(self, max_batch_size, max_sequence_length, num_heads_kv=None,
                 head_dim_k=None, dtype=None, head_dim_v=None,
                 is_paged=False, total_num_pages=None, page_size=None,
                 max_ctx_len=None, qkv_format="bshd",
                 custom_cache_manager=None):
        if custom_cache_manager is not None:
            raise NotImplementedError(
                "InferenceParams(custom_cache_manager=...) is not supported "
                "by tejit: its compiled attention writes tejit's own caches "
                "(non-paged or paged) itself; leave it None")
        if (head_dim_v is not None and head_dim_k is not None
                and int(head_dim_v) != int(head_dim_k)):
            raise NotImplementedError(
                f"InferenceParams(head_dim_v={head_dim_v}) other than "
                f"head_dim_k ({head_dim_k}) is not supported by tejit")
        if int(max_batch_size) < 1 or int(max_sequence_length) < 1:
            raise ValueError(f"InferenceParams: max_batch_size and "
                             f"max_sequence_length must be positive, got "
                             f"{max_batch_size} and {max_sequence_length}")
        if is_paged:
            total_num_pages, page_size = check_paging(
                max_sequence_length, total_num_pages, page_size)
        else:
            total_num_pages, page_size = None, None
        if qkv_format not in _FORMATS:
            raise ValueError(f"InferenceParams: qkv_format must be one of "
                             f"{', '.join(_FORMATS)}, got {qkv_format!r}")
        if max_ctx_len is not None and not (
                1 <= int(max_ctx_len) <= int(max_sequence_length)):
            raise ValueError(f"InferenceParams: max_ctx_len must be in [1, "
                             f"max_sequence_length = {max_sequence_length}], "
                             f"got {max_ctx_len}")
        if qkv_format == "thd" and max_ctx_len is None:
            raise ValueError("InferenceParams: max_ctx_len is required with "
                             "qkv_format='thd' (as in Transformer Engine)")
        if dtype is not None and dtype not in (torch.bfloat16,
                                               torch.float16):
            raise TypeError(f"InferenceParams: tejit's caches are "
                            f"torch.bfloat16 or torch.float16, got {dtype}")
        self.max_batch_size = int(max_batch_size)
        self.max_sequence_length = int(max_sequence_length)
        self.num_heads_kv = None if num_heads_kv is None else int(
            num_heads_kv)
        self.head_dim_k = None if head_dim_k is None else int(head_dim_k)
        self.head_dim_v = (int(head_dim_v) if head_dim_v is not None
                           else self.head_dim_k)
        self.dtype = dtype
        self.is_paged = bool(is_paged)
        self.total_num_pages = total_num_pages
        self.page_size = page_size
        self.max_ctx_len = None if max_ctx_len is None else int(max_ctx_len)
        self.cache_qkv_format = "bshd"
        self.input_qkv_format = qkv_format
        self.output_qkv_format = (
            "bshd" if qkv_format == "bshd" else qkv_format + "_2bshd")
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if torch.cuda.is_available() else torch.device("cpu"))
        self._make_device_state()
        if self.is_paged:
            self.cache_manager = PagedKVCacheManager(
                self.max_batch_size, self.max_sequence_length,
                self.num_heads_kv, self.head_dim_k, dtype, total_num_pages,
                page_size, self._page_table, self.head_dim_v, self.device)
        else:
            self.cache_manager = NonPagedKVCacheManager(
                self.max_batch_size, self.max_sequence_length,
                self.num_heads_kv, self.head_dim_k, dtype, self.head_dim_v,
                self.device)
        self._angles = None
        self.reset()

    def _make_device_state(self):
        """pre_step's device buffer and its views: one buffer, one copy
        per step; the views keep their addresses (CUDA graphs replay
        against them). In order: cu_seqlens_q, cu_seqlens_kv,
        pre_step_seqlens, (paged) the page table from a 64-byte boundary,
        then each new token's rotary position for steps of up to
        _POSITIONED_TOKENS_PER_ROW tokens a row (decode, speculative and
        short chunked steps): the modules gather their rotary angles with
        these instead of deriving positions on the device in every layer
        (module/_kv_cache.py). The positions come last because a step
        copies only as many of them as it needs."""
        batch = self.max_batch_size
        sequences = 3 * batch + 2
        self._table_offset, table = sequences, 0
        if self.is_paged:
            self._table_offset = round_up(sequences, _TABLE_GRANULE)
            table = batch * (self.max_sequence_length // self.page_size)
        positions_offset = self._table_offset + table
        self._positioned_tokens = round_up(batch * _POSITIONED_TOKENS_PER_ROW,
                                           _POSITIONS_GRANULE)
        self._device_state = torch.zeros(
            positions_offset + self._positioned_tokens, dtype=torch.int32,
            device=self.device)
        self.cu_seqlens_q = self._device_state[:batch + 1]
        self.cu_seqlens_kv = self._device_state[batch + 1:2 * batch + 2]
        self.pre_step_seqlens = self._device_state[2 * batch + 2:sequences]
        self._page_table = (self._device_state[
            self._table_offset:positions_offset].view(batch, -1)
            if self.is_paged else None)
        self._token_positions = self._device_state[positions_offset:]
        # How many leading positions hold values from an earlier step (the
        # rest are 0): a step rewrites at least those, so tokens past its
        # own read 0.
        self._positions_written = 0

    # --- TE's interface -----------------------------------------------------

    def reset(self):
        """Forgets every sequence (the caches stay allocated; paged: every
        page is free again)."""
        self.sequences = OrderedDict()
        self.sequences_pre_step = OrderedDict()
        self.batch_size = 0
        self.cache_manager.reset()
        self._plan = None
        self._angles = None

    def allocate_memory(self, layer_number):
        """Allocates (zeros) layer `layer_number`'s key and value caches
        [max_batch_size, max_sequence_length, num_heads_kv, head_dim]
        (paged: [total_num_pages, page_size, num_heads_kv, head_dim])."""
        self.cache_manager.allocate_memory(layer_number)

    def pre_step(self, step_dict):
        """Starts a step: `step_dict` (OrderedDict seq_id -> new tokens of
        this step) lists the live sequences in row order. Non-paged: moves
        continuing sequences' cached tokens to their new rows when rows
        change; paged: frees finished sequences' pages and gives each live
        sequence the pages its new length needs (RuntimeError, nothing
        changed, when they run out). Writes cu_seqlens_q, cu_seqlens_kv,
        pre_step_seqlens, the page table (paged) and (steps of up to 16
        new tokens a row) each new token's rotary position, with one
        host-to-device copy."""
        plan = plan_step(self.sequences, step_dict, self.max_batch_size,
                         self.max_sequence_length)
        if self.is_paged:
            # Raises before anything changes when the pages run out.
            self.cache_manager.allocator.step(plan.sequences)
        self.cache_manager.move_rows(plan.moves, plan.move_length)
        self.sequences = OrderedDict(plan.sequences)
        self.cache_manager.sequences = self.sequences
        self.sequences_pre_step = OrderedDict(
            zip(plan.sequences, plan.cached))
        self.batch_size = plan.batch_size
        positioned = min(plan.total_new, self._positioned_tokens)
        written = max(positioned, self._positions_written)
        self._positions_written = positioned
        values = plan.device_values()
        positions = plan.token_positions(written)
        pinned = self.device.type == "cuda"
        if self.is_paged:
            # The table is copied from the allocator's array (a memcpy),
            # not through a Python list: it holds max_batch_size *
            # max_pages ids.
            table = torch.frombuffer(
                self.cache_manager.allocator.table_buffer(),
                dtype=torch.int32)
            end = self._table_offset + table.numel()
            staging = torch.zeros(end + len(positions), dtype=torch.int32,
                                  pin_memory=pinned)
            staging[:len(values)] = torch.tensor(values, dtype=torch.int32)
            staging[self._table_offset:end] = table
            if positions:
                staging[end:] = torch.tensor(positions, dtype=torch.int32)
        else:
            staging = torch.tensor(values + positions, dtype=torch.int32,
                                   pin_memory=pinned)
        target = self._device_state[:staging.numel()]
        # Pinned, so the copy waits for nothing; the pinned block is not
        # reused before the copy has run (PyTorch's host caching allocator
        # records the stream).
        target.copy_(staging, non_blocking=pinned)
        self._plan = plan
        self._angles = None

    def get_seqlens_pre_step(self):
        """[max_batch_size] int32 on the device: each row's tokens cached
        before this step (0 past the live rows)."""
        return self.pre_step_seqlens

    def step(self, layer_number, new_k, new_v, qkv_format):
        """TE's step(), in PyTorch (tejit's modules do this inside their
        program): writes the step's new keys/values (bshd [b, s, g, d],
        sbhd [s, b, g, d] or thd [t, g, d]) into layer `layer_number`'s
        caches (paged: into the pages pre_step gave each sequence) and
        returns (key cache, value cache, cu_seqlens_q, cu_seqlens_kv,
        max_sequence_length, output qkv_format); paged caches are read
        through cache_manager.page_table."""
        plan = self._step_plan("InferenceParams.step")
        if qkv_format not in _FORMATS:
            raise ValueError(f"InferenceParams.step: qkv_format must be one "
                             f"of {', '.join(_FORMATS)}, got {qkv_format!r}")
        self.input_qkv_format = qkv_format
        self.output_qkv_format = (
            "bshd" if qkv_format == "bshd" else qkv_format + "_2bshd")
        if layer_number not in self.cache_manager.cache:
            self._fill_shape("InferenceParams.step", new_k.shape[-2],
                             new_k.shape[-1], self.dtype or new_k.dtype)
            self.allocate_memory(layer_number)
        rows, positions = self._token_slots(plan)
        for cache, new in zip(self.cache_manager.cache[layer_number],
                              (new_k, new_v)):
            if qkv_format == "sbhd":
                new = new.transpose(0, 1)
            new = new.reshape(-1, *new.shape[-2:])[:plan.total_new]
            cache[rows, positions] = new.to(cache.dtype)
        k_cache, v_cache = self.cache_manager.cache[layer_number]
        return (k_cache, v_cache, self.cu_seqlens_q, self.cu_seqlens_kv,
                self.max_sequence_length, self.output_qkv_format)

    def convert_paged_to_nonpaged(self, layer_number):
        """TE's debugging helper: copies of layer `layer_number`'s paged
        key and value caches as non-paged ones [max_batch_size,
        max_sequence_length, num_heads_kv, head_dim], gathered through the
        page table: row i holds the i-th live sequence's rows (those of
        the last pre_step), zeros past its length and in rows without a
        sequence. Non-paged InferenceParams return copies of their
        caches."""
        if layer_number not in self.cache_manager.cache:
            raise KeyError(f"InferenceParams.convert_paged_to_nonpaged: "
                           f"layer {layer_number} has no cache yet")
        caches = self.cache_manager.cache[layer_number]
        if not self.is_paged:
            return tuple(cache.clone() for cache in caches)
        lengths = list(self.sequences.values())
        return tuple(self.cache_manager.gather(cache, lengths)
                     for cache in caches)

    def __repr__(self):
        paged = (f", total_num_pages={self.total_num_pages}, "
                 f"page_size={self.page_size}" if self.is_paged else "")
        return (f"dtype={self.dtype}, is_paged={self.is_paged}, "
                f"max_batch_size={self.max_batch_size}, "
                f"max_seqlen={self.max_sequence_length}, "
                f"num_heads={self.num_heads_kv}, "
                f"head_dim_k={self.head_dim_k}, "
                f"head_dim_v={self.head_dim_v}{paged}")

    # --- what tejit's modules use -------------------------------------------

    def _step_plan(self, owner):
        """The current step's StepPlan (host values: no sync)."""
        if self._plan is None:
            raise RuntimeError(f"{owner}: call inference_params.pre_step("
                               f"OrderedDict(seq_id -> new tokens)) before "
                               f"each step")
        return self._plan

    def _token_slots(self, plan):
        """(cache row, position) of each of the step's plan.total_new
        packed tokens, as device tensors: the non-paged cache's (row,
        position), the paged cache's (page, row in the page)."""
        if self.is_paged:
            allocator = self.cache_manager.allocator
            slots = [slot for seq, cached, new in zip(
                plan.sequences, plan.cached, plan.new_tokens)
                for slot in allocator.slots(allocator.pages[seq],
                                            range(cached, cached + new))]
            pages = torch.tensor([s[0] for s in slots], dtype=torch.long)
            inside = torch.tensor([s[1] for s in slots], dtype=torch.long)
            return pages.to(self.device), inside.to(self.device)
        rows = torch.repeat_interleave(
            torch.arange(plan.batch_size),
            torch.tensor(plan.new_tokens, dtype=torch.long))
        positions = torch.cat([
            torch.arange(cached, cached + new)
            for cached, new in zip(plan.cached, plan.new_tokens)]
            or [torch.zeros(0, dtype=torch.long)])
        return rows.to(self.device), positions.to(self.device)

    def _fill_shape(self, owner, num_heads_kv, head_dim, dtype):
        """Takes the cache shape from the first layer that runs when the
        constructor left it open; checks it otherwise."""
        given = {"num_heads_kv": (self.num_heads_kv, int(num_heads_kv)),
                 "head_dim_k": (self.head_dim_k, int(head_dim)),
                 "head_dim_v": (self.head_dim_v, int(head_dim)),
                 "dtype": (self.dtype, dtype)}
        for name, (have, want) in given.items():
            if have is not None and have != want:
                raise ValueError(
                    f"{owner}: InferenceParams has {name}={have}, but this "
                    f"layer's cache needs {want}")
        if dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"{owner}: tejit's KV caches are torch.bfloat16 "
                            f"or torch.float16; the layer runs in {dtype}")
        self.num_heads_kv, self.head_dim_k, self.head_dim_v, self.dtype = (
            int(num_heads_kv), int(head_dim), int(head_dim), dtype)
        manager = self.cache_manager
        manager.num_heads, manager.head_dim_k, manager.head_dim_v = (
            self.num_heads_kv, self.head_dim_k, self.head_dim_v)
        manager.dtype = dtype

    def _caches(self, owner, layer_number, num_heads_kv, head_dim, dtype,
                device):
        """Layer `layer_number`'s (key cache, value cache), allocated on
        first use, checked against the layer's shape and dtype."""
        self._fill_shape(owner, num_heads_kv, head_dim, dtype)
        if layer_number not in self.cache_manager.cache:
            self.allocate_memory(layer_number)
        caches = self.cache_manager.cache[layer_number]
        want = self.cache_manager.cache_shape(head_dim)
        for name, cache in zip(("key", "value"), caches):
            if (tuple(cache.shape) != want or cache.dtype != dtype
                    or not cache.is_contiguous()):
                raise ValueError(
                    f"{owner}: layer {layer_number}'s {name} cache is "
                    f"{tuple(cache.shape)} {cache.dtype}, the layer needs a "
                    f"contiguous {want} {dtype}")
            if cache.device != device:
                raise ValueError(f"{owner}: layer {layer_number}'s {name} "
                                 f"cache is on {cache.device}, the input "
                                 f"on {device}")
        if self._device_state.device != device:
            raise ValueError(f"{owner}: InferenceParams lives on "
                             f"{self._device_state.device} (the current "
                             f"CUDA device when it was made), the input on "
                             f"{device}")
        return caches
