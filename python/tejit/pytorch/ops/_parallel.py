"""Tensor parallelism in tejit.pytorch.ops (TE's `tensor_parallel_mode`,
`tensor_parallel_group`, `sequence_parallel`): what the ops decide from
their arguments, and what a chain's spec layers say about the rows of its
tensors. No PyTorch here (tests/python load this file by its path);
the process groups are opaque values, their sizes given.

TE's semantics (transformer_engine/pytorch/ops/basic/basic_linear.py,
ops/linear.py), which the compiler's Linear layer runs
(docs/tensor-parallel.md):
- BasicLinear "column": weight [out/tp, in], input replicated, output this
  rank's out/tp features; its input gradient is summed over the ranks.
  With sequence_parallel the input is this rank's slice of dim 0, gathered
  before the GEMM (the gradient reduce-scattered).
- BasicLinear "row": weight [out, in/tp], input this rank's in/tp
  features, output summed over the ranks (sequence_parallel: reduce-
  scattered, this rank's slice of dim 0).
- A group of one rank turns it all off (mode None, no group, no sequence
  parallelism).
"""

MODES = (None, "column", "row")


def canonical(owner, mode, group, group_size, sequence_parallel,
              in_features, out_features,
              names=("in_features", "out_features")):
    """TE's BasicLinear._canonicalize_tensor_parallelism: (mode, group,
    size, sequence_parallel, local in_features, local out_features).
    `group_size` is a function of `group` (called only with a mode);
    `names` name the sizes in errors."""
    if mode not in MODES:
        raise ValueError(f"tejit: ops.{owner}: tensor_parallel_mode must be "
                         f"None, 'column' or 'row', got {mode!r}")
    size = 1 if mode is None else int(group_size(group))
    if size == 1:
        return None, None, 1, False, in_features, out_features
    split = {"column": (names[1], out_features),
             "row": (names[0], in_features)}[mode]
    if split[1] % size:
        raise ValueError(f"tejit: ops.{owner}: {split[0]} ({split[1]}) must "
                         f"be divisible by the tensor-parallel group's size "
                         f"({size}) with tensor_parallel_mode={mode!r}")
    if mode == "column":
        out_features //= size
    else:
        in_features //= size
    return mode, group, size, bool(sequence_parallel), in_features, \
        out_features


def linear_layer(name, in_features, out_features, bias, size=1, mode=None,
                 sequence_parallel=False, fuse_wgrad_accumulation=False):
    """The spec's Linear layer of a (Basic)Linear op: global sizes, and
    with size > 1 its tp_size, parallel_mode and sequence_parallel keys
    (none at size 1, so single-rank specs and their cache keys stay as
    they were)."""
    layer = {"type": "Linear", "name": name, "in_features": in_features,
             "out_features": out_features, "bias": bool(bias),
             "fuse_wgrad_accumulation": bool(fuse_wgrad_accumulation)}
    if size > 1:
        layer.update(tp_size=int(size), parallel_mode=mode)
        if sequence_parallel:
            layer["sequence_parallel"] = True
    return layer


def chain_group(owners, same):
    """The one process group of a chain's tensor-parallel ops: `owners` is
    [(op description, group, size)] for each op with tensor parallelism
    (size > 1); `same(a, b)` says whether two groups are one. (None, 1)
    without any; ValueError naming two ops whose groups differ."""
    first = None
    for owner in owners:
        if first is None:
            first = owner
        elif not same(first[1], owner[1]):
            raise ValueError(
                f"tejit.pytorch.ops: the ops of one chain (one program) "
                f"share one tensor_parallel_group: {first[0]} has a group of "
                f"{first[2]} ranks, {owner[0]} another of {owner[2]} ranks. "
                f"Give them the same group, or put a PyTorch module between "
                f"them to split the chain")
    return (None, 1) if first is None else (first[1], first[2])


def row_states(layers):
    """Where a chain's tensors stand on dim 0 under sequence parallelism:
    (the input's state, [the state of what each layer reads], the output's
    state), each True for this rank's slice of dim 0, False for all of it,
    or None throughout for a chain without a sequence-parallel Linear. A
    column-parallel one reads a slice (and writes all rows), a
    row-parallel one reads all rows (and writes a slice); other layers
    keep the rows they read, and those before the first such Linear read
    the chain's input."""
    reads, state = [], None
    first = None
    for layer in layers:
        reads.append(state)
        if layer.get("type") != "Linear" or not layer.get("sequence_parallel"):
            continue
        column = layer.get("parallel_mode") == "column"
        if first is None:
            first = column
        state = not column
    if first is None:
        return None, [None] * len(layers), None
    reads = [first if read is None else read for read in reads]
    return first, reads, state


def rows(input_rows, input_state, state, size):
    """Dim 0 of a tensor in `state` (row_states) when the chain's input,
    in `input_state`, has `input_rows` rows: the same without sequence
    parallelism or in the same state, size times more for all rows of a
    sliced input, 1/size for a slice of a whole one."""
    if input_state is None or state is None or state == input_state:
        return input_rows
    return input_rows // size if state else input_rows * size
