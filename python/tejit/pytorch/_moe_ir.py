"""The te IR of tejit.pytorch.permutation's programs, their capacities and
the argument checks, without PyTorch (tests/python checks them on machines
without it; docs/moe-permutation.md is the contract).

Every program takes `counts` (i32 [2], in host memory): the real token
rows, then the real permuted rows. Its shapes are capacities, rows rounded
up to a power of two (at least 64): the kernels loop over the real rows
only, and the caller passes buffers of the real size (device addresses),
so one program serves every token count up to its capacity and a training
run compiles a program per op, hidden size, dtype, expert count and
power-of-two size class it meets."""
from tejit._ir_text import function as _function


ELEMENT_NAMES = ("bf16", "f16", "f32", "f8E4M3FN", "f8E5M2")
PROBS_NAMES = ("bf16", "f16", "f32")
COUNTS = "tensor<2xi32>"


def capacity(rows):
    """The rows a program holds for `rows` real rows."""
    return max(64, 1 << (max(rows, 1) - 1).bit_length())


def tensor(shape, element):
    return f"tensor<{'x'.join(str(d) for d in shape)}x{element}>"


def _op(results, name, operands, types, result_types, attributes=""):
    """One te op in its custom form: `operands` are SSA names or
    ("keyword", name) pairs for keyword operands."""
    plain = [f"%{o}" for o in operands if isinstance(o, str)]
    keywords = [f"{o[0]}(%{o[1]})" for o in operands if not isinstance(o, str)]
    out = ", ".join(f"%{r}" for r in results)
    rtypes = (result_types[0] if len(result_types) == 1
              else f"({', '.join(result_types)})")
    text = f"{out} = te.{name} {', '.join(plain)}"
    if keywords:
        text += " " + " ".join(keywords)
    if attributes:
        text += f" {{{attributes}}}"
    return f"{text} : ({', '.join(types)}) -> {rtypes}"


def _with_permute(name, arguments, body, row_map, tokens, out_rows,
                  hidden, columns, element, probs_element):
    """The function `name` whose `body` made %map (type `row_map`), ending
    with te.moe_permute of %input (and %probs [T, C] into permuted_probs
    [O] when `probs_element`): results output, row_id_map[,
    permuted_probs]."""
    x = tensor((tokens, hidden), element)
    out = tensor((out_rows, hidden), element)
    operands, types = ["input", "map", "counts"], [x, row_map, COUNTS]
    outs, out_types = ["output"], [out]
    results = [("output", out, "output"), ("map", row_map, "row_id_map")]
    if probs_element:
        probs = tensor((tokens, columns), probs_element)
        permuted = tensor((out_rows,), probs_element)
        arguments.append(("probs", probs, "probs"))
        operands.append(("probs", "probs"))
        types.append(probs)
        outs.append("permuted_probs")
        out_types.append(permuted)
        results.append(("permuted_probs", permuted, "permuted_probs"))
    body.append(_op(outs, "moe_permute", operands, types, out_types))
    return _function(name, [("input", x, "input")] + arguments, body,
                     results)


def permute_ir(tokens, out_rows, hidden, columns, experts, element,
               map_element, index_map, probs_element=None):
    """@moe_permute(input [T, H], routing_map [T, C], counts[, probs
    [T, C]]) -> (output [O, H], row_id_map i32 [T, C][, permuted_probs
    [O]]): the row map of the routing map, then the rows (and probs)
    moved."""
    routing = tensor((tokens, columns), map_element)
    row_map = tensor((tokens, columns), "i32")
    attributes = f"num_experts = {experts} : i64" + (
        ", index_map" if index_map else "")
    body = [_op(["map"], "moe_row_map", ["routing_map", "counts"],
                [routing, COUNTS], [row_map], attributes)]
    arguments = [("routing_map", routing, "routing_map"),
                 ("counts", COUNTS, "counts")]
    return _with_permute("moe_permute", arguments, body, row_map, tokens,
                         out_rows, hidden, columns, element, probs_element)


def unpermute_ir(tokens, out_rows, hidden, columns, element,
                 probs_element=None):
    """@moe_unpermute(input [O, H], row_id_map [T, C], counts[,
    merging_probs [T, C]]) -> output [T, H]. Also permute's backward
    (without probs)."""
    x = tensor((out_rows, hidden), element)
    row_map = tensor((tokens, columns), "i32")
    out = tensor((tokens, hidden), element)
    arguments = [("input", x, "input"), ("map", row_map, "row_id_map"),
                 ("counts", COUNTS, "counts")]
    operands, types = ["input", "map", "counts"], [x, row_map, COUNTS]
    if probs_element:
        probs = tensor((tokens, columns), probs_element)
        arguments.append(("probs", probs, "merging_probs"))
        operands.append(("probs", "probs"))
        types.append(probs)
    body = [_op(["output"], "moe_unpermute", operands, types, [out])]
    return _function("moe_unpermute", arguments, body,
                     [("output", out, "output")])


def permute_backward_ir(tokens, out_rows, hidden, columns, element,
                        probs_element=None):
    """@moe_permute_backward(grad [O, H], row_id_map [T, C], counts[,
    grad_probs [O]]) -> (input_grad [T, H][, probs_grad [T, C]])."""
    g = tensor((out_rows, hidden), element)
    row_map = tensor((tokens, columns), "i32")
    dx = tensor((tokens, hidden), element)
    arguments = [("grad", g, "grad"), ("map", row_map, "row_id_map"),
                 ("counts", COUNTS, "counts")]
    body = [_op(["dx"], "moe_unpermute", ["grad", "map", "counts"],
                [g, row_map, COUNTS], [dx])]
    results = [("dx", dx, "input_grad")]
    if probs_element:
        gp = tensor((out_rows,), probs_element)
        dp = tensor((tokens, columns), probs_element)
        arguments.append(("grad_probs", gp, "grad_probs"))
        body.append(_op(["dp"], "moe_gather_probs",
                        ["grad_probs", "map", "counts"],
                        [gp, row_map, COUNTS], [dp]))
        results.append(("dp", dp, "probs_grad"))
    return _function("moe_permute_backward", arguments, body, results)


def unpermute_backward_ir(tokens, out_rows, hidden, columns, element,
                          probs_element=None):
    """@moe_unpermute_backward: without probs (grad [T, H], row_id_map,
    counts) -> input_grad [O, H] (a permute); with them (grad, input
    [O, H], row_id_map, counts, merging_probs) -> (input_grad, probs_grad
    [T, C])."""
    g = tensor((tokens, hidden), element)
    x = tensor((out_rows, hidden), element)
    row_map = tensor((tokens, columns), "i32")
    if not probs_element:
        arguments = [("grad", g, "grad"), ("map", row_map, "row_id_map"),
                     ("counts", COUNTS, "counts")]
        body = [_op(["dx"], "moe_permute", ["grad", "map", "counts"],
                    [g, row_map, COUNTS], [x])]
        return _function("moe_unpermute_backward", arguments, body,
                         [("dx", x, "input_grad")])
    probs = tensor((tokens, columns), probs_element)
    arguments = [("grad", g, "grad"), ("input", x, "input"),
                 ("map", row_map, "row_id_map"), ("counts", COUNTS, "counts"),
                 ("probs", probs, "merging_probs")]
    body = [_op(["dx", "dp"], "moe_unpermute_grad",
                ["grad", "input", "map", "counts", "probs"],
                [g, x, row_map, COUNTS, probs], [x, probs])]
    return _function("moe_unpermute_backward", arguments, body,
                     [("dx", x, "input_grad"), ("dp", probs, "probs_grad")])


def sort_chunks_ir(tokens, hidden, chunks, element, probs_element=None):
    """@moe_sort_chunks(input [T, H], split_sizes i32 [n], sorted_index
    i32 [n], counts[, probs [T, 1]]) -> (output [T, H], row_id_map i32
    [T, 1][, permuted_probs [T]]). Its backward is permute_backward_ir
    with one column and as many permuted rows as tokens."""
    index = tensor((chunks,), "i32")
    row_map = tensor((tokens, 1), "i32")
    arguments = [("splits", index, "split_sizes"),
                 ("sorted", index, "sorted_index"),
                 ("counts", COUNTS, "counts")]
    body = [_op(["map"], "moe_chunk_row_map", ["splits", "sorted", "counts"],
                [index, index, COUNTS], [row_map])]
    return _with_permute("moe_sort_chunks", arguments, body, row_map, tokens,
                         tokens, hidden, 1, element, probs_element)


#
# Argument checks (ValueError naming the argument, as tejit's modules do).
#

def check_map_type(map_type):
    if map_type not in ("mask", "index"):
        raise ValueError(f"map_type should be one of 'mask' or 'index', got "
                         f"{map_type!r}")


def check_input(shape, name="inp"):
    """`shape` of a token matrix [num_tokens, hidden_size]."""
    if len(shape) != 2:
        raise ValueError(f"{name} must be a 2-D tensor [num_tokens, "
                         f"hidden_size], got shape {tuple(shape)}")


def check_routing_map(shape, tokens, map_type):
    what = "num_experts" if map_type == "mask" else "topK"
    if len(shape) != 2 or shape[0] != tokens or shape[1] < 1:
        raise ValueError(f"routing_map must be [num_tokens, {what}] = "
                         f"[{tokens}, {what}] for map_type={map_type!r}, got "
                         f"shape {tuple(shape)}")


MAX_EXPERTS = 1024


def check_experts(experts, map_type):
    """The row map kernels keep per-warp counts of every expert in shared
    memory: at most MAX_EXPERTS (an index map: its largest id + 1, rounded
    up to a power of two)."""
    if experts > MAX_EXPERTS:
        what = ("num_experts (its columns)" if map_type == "mask"
                else "expert ids (the largest + 1, rounded up to a power of "
                "two)")
        raise ValueError(f"routing_map: tejit's permutation takes at most "
                         f"{MAX_EXPERTS} experts; got {experts} {what}")


def check_num_out_tokens(num_out_tokens, most):
    """-1 (every routed token) or 0..`most` (the routed pairs)."""
    if not isinstance(num_out_tokens, int) or isinstance(num_out_tokens,
                                                         bool):
        raise ValueError(f"num_out_tokens must be an int, got "
                         f"{type(num_out_tokens).__name__}")
    if num_out_tokens != -1 and not 0 <= num_out_tokens <= most:
        raise ValueError(f"num_out_tokens must be -1 (no token dropped) or "
                         f"in [0, {most}] (the routed tokens), got "
                         f"{num_out_tokens}")


def check_probs(shape, expected, name):
    if tuple(shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got "
                         f"{tuple(shape)}")


def check_row_id_map(shape, tokens=None):
    if len(shape) != 2 or (tokens is not None and shape[0] != tokens):
        raise ValueError("row_id_map must be the [num_tokens, columns] "
                         "int32 map that moe_permute returned"
                         + (f" for {tokens} tokens" if tokens is not None
                            else "") + f", got shape {tuple(shape)}")


def check_chunks(split_sizes, sorted_index, tokens):
    """Lengths always; values when they are on the host (lists): sizes >= 0
    summing to the token count, sorted_index a permutation."""
    n, m = split_sizes[0], sorted_index[0]
    if n != m or n < 1:
        raise ValueError(f"split_sizes and sorted_index must have the same "
                         f"length >= 1, got {n} and {m}")
    if n > 2048:
        raise ValueError(f"split_sizes may have at most 2048 chunks, got {n}")
    sizes, index = split_sizes[1], sorted_index[1]
    if sizes is not None:
        if any(s < 0 for s in sizes) or sum(sizes) != tokens:
            raise ValueError(f"split_sizes must be >= 0 and sum to the "
                             f"{tokens} rows of inp, got {list(sizes)}")
    if index is not None and sorted(index) != list(range(n)):
        raise ValueError(f"sorted_index must be a permutation of 0..{n - 1}, "
                         f"got {list(index)}")
