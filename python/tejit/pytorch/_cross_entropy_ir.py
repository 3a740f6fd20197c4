"""The te IR of parallel_cross_entropy's two programs (cross_entropy.py,
docs/cross-entropy.md), and the checks of its options. Imports neither
torch nor its package, so that tests without PyTorch load it
(tests/python/torch_free.py).

The forward program of rank `rank` of `ranks` takes the logits [rows,
vocab_local] and the targets [rows] and returns the loss per row (or the
mean and the count of rows not ignored) and the log-sum-exp per row; a
vocab split over ranks gathers four floats per row between its two
kernels (te.tp_all_gather: the program's tensor-parallel group). The
backward program takes the logits, targets, log-sum-exps, the loss's
gradient (and the count) and returns the logits' gradient: the caller
binds it to the logits' own memory."""
from tejit._ir_text import f64 as _float
from tejit._ir_text import function as _function
from tejit._ir_text import tensor_type as _tensor


ELEMENT_TYPES = ("bf16", "f16", "f32")
TARGET_TYPES = ("i32", "i64")


def check_options(label_smoothing, ignore_idx):
    """ValueError/TypeError naming the argument that parallel_cross_entropy
    cannot take."""
    if isinstance(label_smoothing, bool) or not isinstance(
            label_smoothing, (int, float)):
        raise TypeError(f"tejit: parallel_cross_entropy's label_smoothing "
                        f"must be a float, got {type(label_smoothing).__name__}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"tejit: parallel_cross_entropy's label_smoothing "
                         f"must be in [0, 1], got {label_smoothing}")
    if isinstance(ignore_idx, bool) or not isinstance(ignore_idx, int):
        raise TypeError(f"tejit: parallel_cross_entropy's ignore_idx must be "
                        f"an int, got {type(ignore_idx).__name__}")


def check_shapes(inp_shape, target_numel):
    """(rows, vocab_local) of logits of shape `inp_shape` ([B, SQ, V_local]
    or [SQ, B, V_local], as TE; also [rows, V_local]); ValueError naming
    `inp` or `target` otherwise."""
    if len(inp_shape) not in (2, 3):
        raise ValueError(f"tejit: parallel_cross_entropy's inp must be "
                         f"[B, SQ, V] or [SQ, B, V] logits, got shape "
                         f"{tuple(inp_shape)}")
    rows = 1
    for size in inp_shape[:-1]:
        rows *= size
    vocab_local = inp_shape[-1]
    if rows < 1 or vocab_local < 1:
        raise ValueError(f"tejit: parallel_cross_entropy's inp has no "
                         f"elements (shape {tuple(inp_shape)})")
    if target_numel != rows:
        raise ValueError(f"tejit: parallel_cross_entropy's target must hold "
                         f"one class index per row of inp ({rows} for inp "
                         f"{tuple(inp_shape)}), got {target_numel}")
    return rows, vocab_local


def forward_ir(rows, vocab_local, element, target_element, ranks, rank,
               label_smoothing, reduce_loss, ignore_idx):
    """@cross_entropy(logits, target) -> (loss [rows] | mean, count [1]),
    lse [rows]."""
    logits = _tensor((rows, vocab_local), element)
    target = _tensor((rows,), target_element)
    row, one = _tensor((rows,), "f32"), _tensor((1,), "f32")
    stats = _tensor((rows, 4), "f32")
    gathered = _tensor((ranks * rows, 4), "f32")
    body = [f"%stats = te.cross_entropy_stats %logits, %target "
            f"{{vocab_start = {rank * vocab_local}, ignore_index = "
            f"{ignore_idx}}} : ({logits}, {target}) -> {stats}"]
    if ranks > 1:
        body.append(f"%all = te.tp_all_gather %stats {{ranks = {ranks}}} : "
                    f"{stats} -> {gathered}")
    body.append(
        f"%loss, %lse = te.cross_entropy_loss "
        f"{'%all' if ranks > 1 else '%stats'}, %target {{vocab_size = "
        f"{ranks * vocab_local}, label_smoothing = "
        f"{_float(label_smoothing)}, ignore_index = {ignore_idx}, ranks = "
        f"{ranks}}} : ({gathered}, {target}) -> ({row}, {row})")
    if reduce_loss:
        body.append(f"%mean, %count = te.cross_entropy_mean %loss, %target "
                    f"{{ignore_index = {ignore_idx}}} : ({row}, {target}) -> "
                    f"({one}, {one})")
        results = [("%mean", one, "loss"), ("%count", one, "count"),
                   ("%lse", row, "lse")]
    else:
        results = [("%loss", row, "loss"), ("%lse", row, "lse")]
    return _function("cross_entropy", [("logits", logits),
                                       ("target", target)], body, results)


def backward_ir(rows, vocab_local, element, target_element, ranks, rank,
                label_smoothing, reduce_loss, ignore_idx):
    """@cross_entropy_backward(logits, target, lse, grad_loss[, count]) ->
    grad (the logits' shape and type)."""
    logits = _tensor((rows, vocab_local), element)
    target = _tensor((rows,), target_element)
    row, one = _tensor((rows,), "f32"), _tensor((1,), "f32")
    arguments = [("logits", logits), ("target", target), ("lse", row),
                 ("grad_loss", one if reduce_loss else row)]
    if reduce_loss:
        arguments.append(("count", one))
    types = ", ".join(t for _, t in arguments)
    count = " count(%count)" if reduce_loss else ""
    body = [f"%grad = te.cross_entropy_bwd %logits, %target, %lse, "
            f"%grad_loss{count} {{vocab_size = {ranks * vocab_local}, "
            f"vocab_start = {rank * vocab_local}, label_smoothing = "
            f"{_float(label_smoothing)}, ignore_index = {ignore_idx}}} : "
            f"({types}) -> {logits}"]
    return _function("cross_entropy_backward", arguments, body,
                     [("%grad", logits, "grad")])
