"""Transformer Engine's MoE token permutation (transformer_engine.pytorch's
moe_permute, moe_permute_with_probs, moe_unpermute, moe_sort_chunks_by_index
and moe_sort_chunks_by_index_with_probs) on tejit's generated kernels.
docs/moe-permutation.md is the contract.

Each op is a small tejit program, built as te IR (_moe_ir.py) and compiled
once per key: the op, hidden size, dtypes, expert or chunk count, and the
power-of-two capacities of the token and permuted rows. The real row
counts reach the program at run time (`counts`), and tensors of their real
size are passed by address, so token counts that change every step
(dropless routing, the all-to-all's output) reuse the programs.

row_id_map is tejit's own layout: int32 [num_tokens, C] (C = num_experts
for a mask map, topK for an index map) whose element (t, c) is the row of
the permuted tensor that column c of token t's routing went to, or -1.
FP8: a per-tensor scaled Float8Tensor input of moe_permute and the chunk
sorts is moved as bytes and keeps its scale_inv; moe_unpermute
dequantizes an FP8 input first (its output is high precision)."""
import torch

from . import _moe_ir
from ._dynamo import outside_torch_compile
from ._weight_casts import _compiled
from .float8_tensor import Float8Tensor

__all__ = ["moe_permute", "moe_permute_with_probs", "moe_unpermute",
           "moe_sort_chunks_by_index", "moe_sort_chunks_by_index_with_probs"]

_ELEMENTS = {torch.bfloat16: "bf16", torch.float16: "f16",
             torch.float32: "f32", torch.float8_e4m3fn: "f8E4M3FN",
             torch.float8_e5m2: "f8E5M2"}
_PROBS = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}


def _element(tensor, name, table=_ELEMENTS):
    element = table.get(tensor.dtype)
    if element is None:
        raise TypeError(f"{name} must be one of "
                        f"{', '.join(str(d) for d in table)}, got "
                        f"{tensor.dtype}")
    return element


def _cuda(tensor, name):
    if not tensor.is_cuda:
        raise ValueError(f"{name} must be a CUDA tensor (tejit runs its "
                         f"kernels on the GPU), got one on {tensor.device}")


def _counts(tokens, out_rows):
    # Read during the call (host argument): a new tensor per call is fine.
    return torch.tensor([tokens, out_rows], dtype=torch.int32)


def _pointer(tensor):
    """What the program takes for `tensor`: a device tensor of the real
    size by address (the program's shape is a capacity, so the byte check
    of a tensor object would not hold); `counts` (on the host) as it is."""
    if not tensor.is_cuda:
        return tensor
    if tensor.numel() == 0:
        # torch answers 0 for an empty tensor's data_ptr(); the program
        # wants a valid address, which it will not touch.
        return _scratch(tensor.device).data_ptr()
    return tensor.data_ptr()


_SCRATCH = {}


def _scratch(device):
    """16 bytes on `device`: the address given for empty tensors."""
    if device not in _SCRATCH:
        _SCRATCH[device] = torch.empty(16, dtype=torch.uint8, device=device)
    return _SCRATCH[device]


def _rows(rows, cols, dtype, device):
    """A new [rows, cols] tensor (a [rows] one when `cols` is None); an
    empty one's address is _pointer's scratch."""
    shape = (rows,) if cols is None else (rows, cols)
    return torch.empty(shape, dtype=dtype, device=device)


def _run(key, ir, device, inputs, outputs):
    program = _compiled(("moe", device.index) + key, ir, device)
    if not getattr(program, "_tejit_capturable", False):
        # The host `counts` follow the tensors' shapes, which a CUDA graph
        # fixes: replaying the captured counts is always right.
        program.set_capture_host_arguments(True)
        program._tejit_capturable = True
    program.forward(torch.cuda.current_stream(device),
                    [_pointer(t) for t in inputs],
                    [_pointer(t) for t in outputs])


def _fp8_parts(inp):
    """(data, wrap): the bytes to move and how to wrap moved bytes back
    into a Float8Tensor sharing inp's scale_inv (identity for others)."""
    if not isinstance(inp, Float8Tensor):
        return inp, lambda data: data

    def wrap(data):
        return Float8Tensor(data, inp._scale_inv, inp._scaling, inp.dtype)
    return inp._data, wrap


def _routing(routing_map, map_type):
    """The map as the program reads it: (contiguous tensor, IR element)."""
    if routing_map.is_floating_point() or routing_map.is_complex():
        raise TypeError(f"routing_map must be a bool or integer tensor, got "
                        f"{routing_map.dtype}")
    if map_type == "mask":
        if routing_map.dtype not in (torch.bool, torch.int32):
            routing_map = routing_map != 0
        element = "i1" if routing_map.dtype == torch.bool else "i32"
    else:
        routing_map = routing_map.to(torch.int32)
        element = "i32"
    return routing_map.contiguous(), element


def _move_forward(key, ir, data, arguments, tokens, out_rows, columns,
                  probs):
    """Runs a forward program (permute_ir, sort_chunks_ir): `data` [T, H],
    the map `arguments`, counts[, probs] -> (rows [out_rows, H], row map
    [T, columns][, moved probs [out_rows]])."""
    output = _rows(out_rows, data.shape[1], data.dtype, data.device)
    row_map = _rows(tokens, columns, torch.int32, data.device)
    inputs = [data.contiguous()] + arguments + [_counts(tokens, out_rows)]
    outputs = [output, row_map]
    moved_probs = None
    if probs is not None:
        inputs.append(probs.contiguous())
        moved_probs = _rows(out_rows, None, probs.dtype, data.device)
        outputs.append(moved_probs)
    _run(key, ir, data.device, inputs, outputs)
    return output, row_map, moved_probs


def _move_backward(ctx, grad, grad_probs, row_map, tokens, out_rows):
    """The backward of a forward program (permute_backward_ir): the
    gradient rows moved back to their tokens (summed), and the probs'
    gradient [T, C] when the probs (input 3) need one."""
    hidden, columns = grad.shape[1], row_map.shape[1]
    grad = grad.contiguous()
    element = _element(grad, "the gradient of the moved rows")
    probs_element = None
    if grad_probs is not None and ctx.needs_input_grad[3]:
        grad_probs = grad_probs.contiguous()
        probs_element = _element(grad_probs, "probs' gradient", _PROBS)
    cap_t, cap_o = _moe_ir.capacity(tokens), _moe_ir.capacity(out_rows)
    dx = _rows(tokens, hidden, grad.dtype, grad.device)
    inputs = [grad, row_map, _counts(tokens, out_rows)]
    outputs = [dx]
    dp = None
    if probs_element:
        inputs.append(grad_probs)
        dp = _rows(tokens, columns, grad_probs.dtype, grad.device)
        outputs.append(dp)
    key = ("permute_bwd", cap_t, cap_o, hidden, columns, element,
           probs_element)
    _run(key, lambda: _moe_ir.permute_backward_ir(
        cap_t, cap_o, hidden, columns, element, probs_element), grad.device,
        inputs, outputs)
    return dx, dp


class _Permute(torch.autograd.Function):
    """moe_permute / moe_permute_with_probs."""

    @staticmethod
    def forward(ctx, inp, routing_map, num_out_tokens, probs, map_type):
        data, wrap = _fp8_parts(inp)
        tokens, hidden = data.shape
        routing, map_element = _routing(routing_map, map_type)
        columns = routing.shape[1]
        if map_type == "mask":
            experts = columns
            if num_out_tokens < 0:
                _refuse_in_capture("moe_permute(num_out_tokens=-1) counts "
                                   "the routed tokens on the host; pass "
                                   "num_out_tokens")
                num_out_tokens = int(routing.count_nonzero())
        else:
            _refuse_in_capture("moe_permute(map_type='index') reads the "
                               "largest expert id on the host; use a mask "
                               "map with num_out_tokens")
            # Expert ids must be counted per expert: their range is read on
            # the host (a synchronization), rounded up to share programs.
            experts = _moe_ir.capacity(int(routing.max()) + 1 if tokens
                                       else 1)
            if num_out_tokens < 0:
                num_out_tokens = tokens * columns
        _moe_ir.check_experts(experts, map_type)
        element = _element(data, "inp")
        probs_element = None if probs is None else _element(probs, "probs",
                                                            _PROBS)
        cap_t, cap_o = (_moe_ir.capacity(tokens),
                        _moe_ir.capacity(num_out_tokens))
        key = ("permute", cap_t, cap_o, hidden, columns, experts, element,
               map_element, map_type == "index", probs_element)
        output, row_map, permuted_probs = _move_forward(
            key, lambda: _moe_ir.permute_ir(
                cap_t, cap_o, hidden, columns, experts, element, map_element,
                map_type == "index", probs_element),
            data, [routing], tokens, num_out_tokens, columns, probs)
        ctx.save_for_backward(row_map)
        ctx.shape = (tokens, num_out_tokens)
        ctx.mark_non_differentiable(row_map)
        return wrap(output), row_map, permuted_probs

    @staticmethod
    def backward(ctx, grad, _row_map_grad, grad_probs):
        (row_map,) = ctx.saved_tensors
        dx, dp = _move_backward(ctx, grad, grad_probs, row_map, *ctx.shape)
        return dx, None, None, dp, None


class _Unpermute(torch.autograd.Function):
    """moe_unpermute."""

    @staticmethod
    def forward(ctx, inp, row_id_map, merging_probs, restore_shape):
        if isinstance(inp, Float8Tensor):
            inp = inp.dequantize()
        inp, row_id_map = inp.contiguous(), row_id_map.contiguous()
        out_rows, hidden = inp.shape
        tokens, columns = row_id_map.shape
        element = _element(inp, "inp", _PROBS)
        probs_element = None
        inputs = [inp, row_id_map, _counts(tokens, out_rows)]
        if merging_probs is not None:
            merging_probs = merging_probs.contiguous()
            probs_element = _element(merging_probs, "merging_probs", _PROBS)
            inputs.append(merging_probs)
        cap_t, cap_o = _moe_ir.capacity(tokens), _moe_ir.capacity(out_rows)
        output = _rows(tokens, hidden, inp.dtype, inp.device)
        key = ("unpermute", cap_t, cap_o, hidden, columns, element,
               probs_element)
        _run(key, lambda: _moe_ir.unpermute_ir(
            cap_t, cap_o, hidden, columns, element, probs_element),
            inp.device, inputs, [output])
        saved = [row_id_map] + ([inp, merging_probs] if probs_element else [])
        ctx.save_for_backward(*saved)
        ctx.shape = (tokens, hidden, out_rows, columns, probs_element)
        if restore_shape is not None:
            output = output.view(restore_shape)
        return output

    @staticmethod
    def backward(ctx, grad):
        tokens, hidden, out_rows, columns, probs_element = ctx.shape
        row_map = ctx.saved_tensors[0]
        grad = grad.contiguous().view(tokens, hidden)
        element = _element(grad, "the gradient of the unpermuted tokens",
                           _PROBS)
        cap_t, cap_o = _moe_ir.capacity(tokens), _moe_ir.capacity(out_rows)
        dx = _rows(out_rows, hidden, grad.dtype, grad.device)
        counts = _counts(tokens, out_rows)
        key = ("unpermute_bwd", cap_t, cap_o, hidden, columns, element,
               probs_element)
        ir = lambda: _moe_ir.unpermute_backward_ir(  # noqa: E731
            cap_t, cap_o, hidden, columns, element, probs_element)
        if not probs_element:
            _run(key, ir, grad.device, [grad, row_map, counts], [dx])
            return dx, None, None, None
        _, inp, probs = ctx.saved_tensors
        dp = _rows(tokens, columns, probs.dtype, grad.device)
        _run(key, ir, grad.device, [grad, inp, row_map, counts, probs],
             [dx, dp])
        return dx, None, dp, None


class _SortChunks(torch.autograd.Function):
    """moe_sort_chunks_by_index(_with_probs)."""

    @staticmethod
    def forward(ctx, inp, split_sizes, sorted_index, probs):
        data, wrap = _fp8_parts(inp)
        tokens, hidden = data.shape
        chunks = split_sizes.shape[0]
        element = _element(data, "inp")
        probs_element = None if probs is None else _element(probs, "probs",
                                                            _PROBS)
        cap = _moe_ir.capacity(tokens)
        key = ("sort_chunks", cap, hidden, chunks, element, probs_element)
        output, row_map, permuted_probs = _move_forward(
            key, lambda: _moe_ir.sort_chunks_ir(cap, hidden, chunks, element,
                                                probs_element),
            data, [split_sizes, sorted_index], tokens, tokens, 1, probs)
        ctx.save_for_backward(row_map)
        return wrap(output), permuted_probs

    @staticmethod
    def backward(ctx, grad, grad_probs):
        (row_map,) = ctx.saved_tensors
        tokens = row_map.shape[0]
        dx, dp = _move_backward(ctx, grad, grad_probs, row_map, tokens,
                                tokens)
        return dx, None, None, None if dp is None else dp.view(tokens)


def _refuse_in_capture(what):
    """A RuntimeError, inside CUDA-graph capture, for a call that must read
    a device value on the host."""
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"tejit: {what}, which CUDA-graph capture does "
                           f"not allow")


def _count_value(num_out_tokens):
    """num_out_tokens as an int: Megatron-LM passes a one-element tensor
    when its router drops tokens (read here; on the host already after its
    synchronization point)."""
    if isinstance(num_out_tokens, torch.Tensor) and \
            num_out_tokens.numel() == 1 and \
            not num_out_tokens.is_floating_point():
        if num_out_tokens.is_cuda:
            _refuse_in_capture("moe_permute reads a CUDA num_out_tokens on "
                               "the host; pass an int")
        return int(num_out_tokens.item())
    return num_out_tokens


def _checked_permute_args(inp, routing_map, num_out_tokens, map_type,
                          probs=None):
    """The checks of moe_permute's arguments (in TE's order of importance:
    shapes first, then devices); returns num_out_tokens as an int."""
    num_out_tokens = _count_value(num_out_tokens)
    _moe_ir.check_map_type(map_type)
    _moe_ir.check_input(inp.shape)
    _moe_ir.check_routing_map(routing_map.shape, inp.shape[0], map_type)
    _moe_ir.check_num_out_tokens(
        num_out_tokens, routing_map.shape[0] * routing_map.shape[1])
    if probs is not None:
        _moe_ir.check_probs(probs.shape, routing_map.shape, "probs")
        _cuda(probs, "probs")
    _cuda(inp, "inp")
    _cuda(routing_map, "routing_map")
    return num_out_tokens


def _empty_permute(inp, routing_map, probs):
    """TE's answer for no tokens: the input, an empty map (and probs)."""
    row_map = torch.empty((0, routing_map.shape[1]), dtype=torch.int32,
                          device=inp.device)
    return inp, row_map, (None if probs is None else probs.reshape(0))


@outside_torch_compile
def moe_permute(inp, routing_map, num_out_tokens=-1, max_token_num=-1,
                map_type="mask"):
    """Groups the tokens (rows of `inp` [num_tokens, hidden]) by expert:
    (permuted [num_out_tokens, hidden], row_id_map). `routing_map` is a
    mask [num_tokens, num_experts] (bool or int32, nonzero = routed) or,
    with map_type="index", int32 expert ids [num_tokens, topK]. Rows are
    ordered by expert, then token; num_out_tokens below the routed count
    drops the last ones (-1: none dropped). max_token_num is accepted for
    TE's signature (tejit needs no workspace)."""
    num_out_tokens = _checked_permute_args(inp, routing_map, num_out_tokens,
                                           map_type)
    if inp.shape[0] == 0:
        output, row_map, _ = _empty_permute(inp, routing_map, None)
        return output, row_map
    output, row_map, _ = _Permute.apply(inp, routing_map, num_out_tokens,
                                        None, map_type)
    return output, row_map


@outside_torch_compile
def moe_permute_with_probs(inp, probs, routing_map, num_out_tokens=-1):
    """moe_permute with a mask map that also moves `probs` [num_tokens,
    num_experts]: (permuted, permuted_probs [num_out_tokens],
    row_id_map)."""
    num_out_tokens = _checked_permute_args(inp, routing_map, num_out_tokens,
                                           "mask", probs)
    if inp.shape[0] == 0:
        output, row_map, permuted = _empty_permute(inp, routing_map, probs)
        return output, permuted, row_map
    output, row_map, permuted = _Permute.apply(inp, routing_map,
                                               num_out_tokens, probs, "mask")
    return output, permuted, row_map


@outside_torch_compile
def moe_unpermute(inp, row_id_map, merging_probs=None, restore_shape=None,
                  map_type="mask", probs=None):
    """The inverse of moe_permute: token t's output row is the sum of its
    permuted rows, each times merging_probs[t, c] when given (float32
    accumulation), shaped as `restore_shape` when given. `probs` is TE's
    deprecated name of merging_probs."""
    if probs is not None:
        if merging_probs is not None:
            raise ValueError("Both merging_probs and probs kwarg are "
                             "provided. probs is deprecated.")
        merging_probs = probs
    _moe_ir.check_map_type(map_type)
    _moe_ir.check_input(inp.shape)
    _moe_ir.check_row_id_map(row_id_map.shape)
    if row_id_map.dtype != torch.int32:
        raise TypeError(f"row_id_map must be the int32 map moe_permute "
                        f"returned, got {row_id_map.dtype}")
    if merging_probs is not None:
        _moe_ir.check_probs(merging_probs.shape, row_id_map.shape,
                            "merging_probs")
        _cuda(merging_probs, "merging_probs")
    _cuda(inp, "inp")
    _cuda(row_id_map, "row_id_map")
    tokens = row_id_map.shape[0]
    if restore_shape is not None:
        restore_shape = tuple(restore_shape)
        if torch.Size(restore_shape).numel() != tokens * inp.shape[1]:
            raise ValueError(f"restore_shape must hold num_tokens x hidden "
                             f"= {tokens} x {inp.shape[1]} elements, got "
                             f"{restore_shape}")
    if tokens == 0:
        return torch.empty(restore_shape or (0, inp.shape[1]),
                           dtype=inp.dtype, device=inp.device)
    return _Unpermute.apply(inp, row_id_map, merging_probs, restore_shape)


def _chunk_argument(values, name, device):
    """(device int32 tensor, host values or None): sequences and CPU
    tensors are checked on the host; CUDA tensors are taken as they are."""
    if isinstance(values, torch.Tensor):
        if values.dim() != 1 or values.is_floating_point():
            raise ValueError(f"{name} must be a 1-D integer tensor, got a "
                             f"{values.dim()}-D {values.dtype} tensor")
        host = None if values.is_cuda else values.tolist()
        return values.to(device=device, dtype=torch.int32), host
    host = [int(v) for v in values]
    return torch.tensor(host, dtype=torch.int32, device=device), host


def _sort_chunks(inp, probs, split_sizes, sorted_index):
    _moe_ir.check_input(inp.shape)
    splits, split_host = _chunk_argument(split_sizes, "split_sizes",
                                         inp.device)
    index, index_host = _chunk_argument(sorted_index, "sorted_index",
                                        inp.device)
    _moe_ir.check_chunks((splits.shape[0], split_host),
                         (index.shape[0], index_host), inp.shape[0])
    if probs is not None:
        _moe_ir.check_probs(probs.shape, (inp.shape[0],), "probs")
        _cuda(probs, "probs")
    _cuda(inp, "inp")
    if inp.shape[0] == 0:
        return inp, probs
    return _SortChunks.apply(inp, splits, index, probs)


@outside_torch_compile
def moe_sort_chunks_by_index(inp, split_sizes, sorted_index):
    """Cuts the rows of `inp` into chunks of `split_sizes` rows and lays
    them out in the order `sorted_index` names (output chunk j = input
    chunk sorted_index[j])."""
    return _sort_chunks(inp, None, split_sizes, sorted_index)[0]


@outside_torch_compile
def moe_sort_chunks_by_index_with_probs(inp, probs, split_sizes,
                                        sorted_index):
    """moe_sort_chunks_by_index that also moves `probs` [num_tokens]:
    (output, permuted_probs)."""
    return _sort_chunks(inp, probs, split_sizes, sorted_index)
