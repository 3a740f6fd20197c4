"""The pages of a paged KV cache (InferenceParams(is_paged=True)), decided
on the host without PyTorch (so that tests/python checks them on machines
without PyTorch, loading this file by path; docs/paged-kv-cache.md).

Every layer's key and value caches are pools of `total_pages` pages of
`page_size` rows; one page table [max_batch_size, max_pages] says which
pages hold each sequence's rows (logical row r of the sequence in table
row i lives in page table[i][r // page_size], row r % page_size). The
table is shared by all layers: a sequence holds the same pages in every
layer, so allocating once per step serves the whole model.

PageAllocator.step() runs in pre_step, after _inference_steps.plan_step
has decided the step's rows: sequences that finished (left out of the
step) give their pages back, then each live sequence takes the pages its
new length needs. Pages are never moved: a sequence that changes table
row keeps its pages, only its table row changes (where the non-paged
cache moves rows, the paged one rewrites a few table entries).

The free pool is first in, first out: new pages come from its front,
freed ones join its end (initially 0 .. total_pages - 1). A page freed
late is then reused late, and the ids a long run hands out end up mixed,
which is what a server's caches look like (and what the GPU tests
exercise); nothing depends on the order.
"""
from array import array
from collections import OrderedDict, deque

OWNER = "InferenceParams.pre_step"


def check_paging(max_sequence_length, total_num_pages, page_size):
    """(total_num_pages, page_size) as ints, or ValueError naming the
    argument: both positive, page_size dividing max_sequence_length (a
    sequence's rows then fill whole table entries, and the compiled
    program's capacity max_pages * page_size is max_sequence_length)."""
    for name, value in (("total_num_pages", total_num_pages),
                        ("page_size", page_size)):
        if value is None:
            raise ValueError(f"InferenceParams(is_paged=True) needs "
                             f"{name} (a positive int)")
        if int(value) < 1:
            raise ValueError(f"InferenceParams: {name} must be positive, "
                             f"got {value}")
    if int(max_sequence_length) % int(page_size):
        raise ValueError(f"InferenceParams: page_size ({page_size}) must "
                         f"divide max_sequence_length "
                         f"({max_sequence_length})")
    return int(total_num_pages), int(page_size)


def pages_for(length, page_size):
    """The pages `length` rows occupy: ceil(length / page_size)."""
    return -(-int(length) // page_size)


class PageAllocator:
    """Which pages each live sequence holds, and the free pool.

    pages   OrderedDict seq_id -> its page ids in logical order, in the
            table's row order (the last step's)
    free    the free pool (a deque; front: handed out next)
    """

    def __init__(self, total_pages, page_size, max_batch_size, max_pages):
        self.total_pages = int(total_pages)
        self.page_size = int(page_size)
        self.max_batch_size = int(max_batch_size)
        self.max_pages = int(max_pages)
        self.reset()

    def reset(self):
        """Every page free again, in id order; no sequence holds any."""
        self.pages = OrderedDict()
        self.free = deque(range(self.total_pages))
        # The table, kept from step to step and rewritten only where it
        # changed (a server's table holds max_batch_size * max_pages ids:
        # rebuilding it in Python every step would cost more than the
        # step), and what each of its rows held after the last step: (seq
        # id, pages written).
        self._flat = array("i", bytes(4 * self.max_batch_size *
                                      self.max_pages))
        self._rows = []

    def step(self, sequences):
        """Allocates for one step: `sequences` (OrderedDict seq_id ->
        rows after the step, in table row order; plan_step's). Raises
        RuntimeError before changing anything when the pool cannot hold
        them (so the caller keeps a usable manager)."""
        finished = [seq for seq in self.pages if seq not in sequences]
        self._check_fits(sequences, finished)
        for seq in finished:
            self.free.extend(self.pages.pop(seq))
        pages = OrderedDict()
        for seq, length in sequences.items():
            held = self.pages.get(seq, [])
            missing = pages_for(length, self.page_size) - len(held)
            held.extend(self.free.popleft() for _ in range(max(missing, 0)))
            pages[seq] = held
        self.pages = pages
        self._write_rows()

    def _write_rows(self):
        """Brings the table up to date with `pages`: a row that holds the
        same sequence as before gets only its new pages; another row is
        rewritten, and entries past its pages that held ids become 0."""
        width, flat = self.max_pages, self._flat
        rows = [(seq, len(held)) for seq, held in self.pages.items()]
        for i in range(max(len(rows), len(self._rows))):
            seq, count = rows[i] if i < len(rows) else (None, 0)
            old_seq, old_count = (self._rows[i] if i < len(self._rows)
                                  else (None, 0))
            start = old_count if seq is not None and seq == old_seq else 0
            at = i * width
            if start < count:
                flat[at + start:at + count] = array(
                    "i", self.pages[seq][start:count])
            if old_count > count:
                flat[at + count:at + old_count] = array(
                    "i", bytes(4 * (old_count - count)))
        self._rows = rows

    def _check_fits(self, sequences, finished):
        """RuntimeError naming the first sequence (in row order) whose new
        pages the pool lacks, counting the finished sequences' pages as
        free."""
        available = len(self.free) + sum(len(self.pages[seq])
                                         for seq in finished)
        for seq, length in sequences.items():
            held = len(self.pages.get(seq, ()))
            wanted = pages_for(length, self.page_size)
            missing = max(wanted - held, 0)
            if missing > available:
                raise RuntimeError(
                    f"{OWNER}: out of KV cache pages: sequence {seq!r} "
                    f"needs {missing} more page(s) ({wanted} for {length} "
                    f"tokens at page_size {self.page_size}, holding "
                    f"{held}), {available} left of total_num_pages = "
                    f"{self.total_pages} this step; raise total_num_pages "
                    f"or finish sequences first (nothing was changed)")
            available -= missing

    def table(self):
        """The page table [max_batch_size][max_pages], flattened (row i:
        the i-th sequence's pages in order, then 0), as a list."""
        return self._flat.tolist()

    def table_buffer(self):
        """The same table, the allocator's own int32 array (no copy):
        what pre_step copies to the device. Valid until the next step."""
        return self._flat

    def slots(self, row_pages, positions):
        """(page, row in page) of logical `positions` of a sequence
        holding `row_pages`."""
        return [(row_pages[p // self.page_size], p % self.page_size)
                for p in positions]
