"""The runtime's tensor-parallel groups (runtime/TensorParallel.h), on 2
GPUs, through the Python core (no tejit.pytorch module):

    torchrun --nproc_per_node=2 tests/gpu/tp_group_check.py

One program per rank: a LayerNormMLP with tp_size 2 (bf16, no FP8 recipe),
this rank's fc1 rows and fc2 columns, the same input, norm and fc2 bias on
every rank. Its forward sums fc2's partial output over the ranks, its
backward fc1's partial input gradient. Checked:
  * tp_size is 2, and a call without a group fails before it runs, naming
    tejit_program_set_tp_group;
  * a group of another size is refused when it is set;
  * the sums through tejit's NCCL communicator (TensorParallelGroup.create),
    the caller's communicator (from_nccl_comm, given torch's) and a
    function calling torch.distributed.all_reduce give bit for bit the same
    outputs and gradients, and the same on every rank;
  * they are the sums: a group whose function sums nothing gives each
    rank's partials, which add up (bias counted once) to the summed output,
    and (the norm's backward being linear) to the summed input gradient;
  * a forward and backward captured in a CUDA graph over the NCCL group
    replay to the eager results, bit for bit.
Sequence parallelism's collectives (tp_allgather, tp_reducescatter), first
in a plan written here (no kernels: a forward that gathers each rank's
`input` and its backward, which reduce-scatters the output's gradient), in
bf16, f16 and f32:
  * a group of functions lacking the all_gather (or reduce_scatter) fails
    the forward (or backward) before it runs, naming the function;
  * tejit's NCCL communicator, the caller's (torch's) and functions calling
    torch.distributed.all_gather_into_tensor / reduce_scatter_tensor give
    torch's gather (bit for bit) and reduce-scatter, with the collectives on
    tejit's side stream and (TEJIT_TP_OVERLAP=0) on the caller's;
  * a captured forward and backward over the NCCL group replay to them.
Then a LayerNormMLP with sequence_parallel (spec key) against the same
layer without it: this rank's rows of the output and input gradient, the
same fc1/fc2 weight gradients, and norm and fc2 bias gradients that sum
over the ranks to the layer's.
Context parallelism's all-to-all (cp_comm_type a2a: cp_alltoall steps
over the program's CP group, Program.set_cp_group), in a plan written
here (no kernels: a forward trading this rank's tokens of every head for
the whole sequence of its heads, and its backward, the reverse), sbhd and
bshd, load-balanced or in rank order, bf16, f16 and f32:
  * a group of functions without all_to_all fails the call before it
    runs, naming the function;
  * tejit's NCCL communicator, the caller's (torch's) and functions
    calling torch.distributed.all_to_all_single (from_function's
    all_to_all) give the blocks torch's all_gather says (bit for bit);
  * a captured forward and backward over the NCCL group replay to them.
Prints one line per check on rank 0; exits non-zero if any rank failed.
"""
import datetime
import json
import math
import os
import sys
import tempfile
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import tejit  # noqa: E402
from tejit.pytorch._device_view import device_view  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}
SPEC = {"name": "mlp", "params_dtype": "bf16", "seq_length": 32,
        "batch_size": 2,
        "layers": [{"type": "LayerNormMLP", "hidden_size": 64,
                    "ffn_hidden_size": 256, "tp_size": 2}]}
# This rank's shards; the other inputs are the same on every rank.
SHARDED = ("fc1_weight", "fc1_bias", "fc2_weight")


def tensors(infos, seed, sharded_seed=None):
    out = []
    for info in infos:
        own = sharded_seed is not None and any(s in info.name for s in SHARDED)
        generator = torch.Generator(device="cuda").manual_seed(
            sharded_seed if own else seed)
        out.append(torch.randn(*info.shape, generator=generator,
                               device="cuda", dtype=DTYPES[info.dtype]) * 0.5)
    return out


def run(program, group, stream, inputs, grad_outputs):
    """Forward and backward on `stream` over `group`: (outputs, grads)."""
    program.set_tp_group(group)
    outputs = [torch.zeros(*i.shape, device="cuda", dtype=DTYPES[i.dtype])
               for i in program.outputs]
    grads = [torch.zeros(*i.shape, device="cuda", dtype=DTYPES[i.dtype])
             for i in program.grad_inputs]
    with torch.cuda.stream(stream):
        program.forward(stream, inputs, outputs)
        program.backward(stream, grad_outputs, grads)
    stream.synchronize()
    return outputs, grads


def same_everywhere(tensor):
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return all(torch.equal(parts[0], p) for p in parts)


def summed(tensor):
    total = tensor.float().clone()
    dist.all_reduce(total)
    return total


def close(got, want, what):
    want = want.float()
    error = (got.float() - want).abs().max().item()
    scale = want.abs().max().item()
    assert error <= 2e-2 * scale, f"{what}: max error {error}, max {scale}"


# Sequence parallelism's collectives in a plan of no kernels: the forward
# gathers `input` (COUNT elements per rank) into `output`, its backward
# reduce-scatters `grad.output` into `grad.input`.
COUNT = 3 * 1024 + 5
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


def gather_scatter_plan(element, ranks, arch):
    def value(id, count, storage):
        return {"id": id, "type": f"tensor<{count}x{element}>",
                "bytes": count * ELEMENT_BYTES[element], "storage": storage}
    whole = ranks * COUNT
    return {
        "format": "tejit-plan", "version": 4, "arch": arch,
        "functions": [
            {"name": "gather", "arena_bytes": 0,
             "arguments": [{"value": 0, "te.name": "input"}],
             "results": [{"value": 1, "te.name": "output"}],
             "values": [value(0, COUNT, {"arg": 0}),
                        value(1, whole, {"result": 0})],
             "steps": [{"kind": "tp_allgather", "in": 0, "out": 1,
                        "ranks": ranks}]},
            {"name": "gather_backward", "backward_of": "gather",
             "arena_bytes": 0,
             "arguments": [{"value": 0, "te.name": "grad.output"}],
             "results": [{"value": 1, "te.name": "grad.input",
                          "te.grad_of": 0}],
             "values": [value(0, whole, {"arg": 0}),
                        value(1, COUNT, {"result": 0})],
             "steps": [{"kind": "tp_reducescatter", "in": 0, "out": 1,
                        "ranks": ranks}]}]}


def load_gather_scatter(element, device, overlap=True):
    """The program of gather_scatter_plan, loaded from a fresh bundle;
    without `overlap`, with its collectives on the caller's stream."""
    info = tejit.device_info(device)
    plan = gather_scatter_plan(element, dist.get_world_size(),
                               f"sm_{info.major}{info.minor}")
    saved = os.environ.get("TEJIT_TP_OVERLAP")
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "plan.json"), "w") as file:
            json.dump(plan, file)
        # Executors read it when they are made.
        os.environ["TEJIT_TP_OVERLAP"] = "1" if overlap else "0"
        try:
            return tejit.Program.load_bundle(directory, device)
        finally:
            if saved is None:
                del os.environ["TEJIT_TP_OVERLAP"]
            else:
                os.environ["TEJIT_TP_OVERLAP"] = saved


def torch_functions(device):
    """all_reduce, all_gather and reduce_scatter for
    TensorParallelGroup.from_function, through torch.distributed."""
    ranks = dist.get_world_size()

    def view(address, count, dtype):
        return device_view(address, count, getattr(torch, dtype), device)

    def on(handle):
        return torch.cuda.stream(torch.cuda.ExternalStream(handle or 0))

    def all_reduce(address, count, dtype, handle):
        with on(handle):
            dist.all_reduce(view(address, count, dtype))

    def all_gather(source, target, count, dtype, handle):
        with on(handle):
            dist.all_gather_into_tensor(view(target, ranks * count, dtype),
                                        view(source, count, dtype))

    def reduce_scatter(source, target, count, dtype, handle):
        with on(handle):
            dist.reduce_scatter_tensor(view(target, count, dtype),
                                       view(source, ranks * count, dtype))
    return all_reduce, all_gather, reduce_scatter


def torch_all_to_all(device):
    """all_to_all for TensorParallelGroup.from_function, through
    torch.distributed.all_to_all_single (block j of the output from rank
    j)."""
    ranks = dist.get_world_size()

    def all_to_all(source, target, count, dtype, handle):
        torch_dtype = getattr(torch, dtype)
        with torch.cuda.stream(torch.cuda.ExternalStream(handle or 0)):
            dist.all_to_all_single(
                device_view(target, ranks * count, torch_dtype, device),
                device_view(source, ranks * count, torch_dtype, device))
    return all_to_all


def replays_to(eager, program, stream, source, grad_output, what):
    """Captures `program`'s forward (of `source`) and backward (of
    `grad_output`) in a CUDA graph on `stream` and checks that a replay
    gives `eager` (the output and the input gradient) bit for bit; `what`
    names the two in the message."""
    output = torch.zeros_like(eager[0])
    grad_input = torch.zeros_like(eager[1])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        program.forward(stream, [source], [output])
        program.backward(stream, [grad_output], [grad_input])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(output, eager[0]), f"{what[0]}'s replay"
    assert torch.equal(grad_input, eager[1]), f"{what[1]}'s replay"


def gather_scatter_checks(check, device, groups):
    """The checks of sequence parallelism's collectives over `groups`
    (name -> TensorParallelGroup), the NCCL group first."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    stream = torch.cuda.Stream()
    for element, dtype in DTYPES.items():
        program = load_gather_scatter(element, device)
        generator = torch.Generator(device="cuda").manual_seed(10 + rank)
        source = torch.randn(COUNT, generator=generator, device="cuda",
                             dtype=dtype)
        # The output gradient differs across ranks: the scatter sums.
        grad_output = torch.randn(ranks * COUNT, generator=generator,
                                  device="cuda", dtype=dtype)
        gathered = torch.empty(ranks * COUNT, device="cuda", dtype=dtype)
        dist.all_gather_into_tensor(gathered, source)
        scattered = torch.empty(COUNT, device="cuda", dtype=dtype)
        dist.reduce_scatter_tensor(scattered, grad_output)
        summed_chunk = summed(grad_output)[rank * COUNT:(rank + 1) * COUNT]

        def run_on(program, group):
            program.set_tp_group(group)
            output = torch.zeros(ranks * COUNT, device="cuda", dtype=dtype)
            grad_input = torch.zeros(COUNT, device="cuda", dtype=dtype)
            with torch.cuda.stream(stream):
                program.forward(stream, [source], [output])
                program.backward(stream, [grad_output], [grad_input])
            stream.synchronize()
            return output, grad_input

        def missing_functions():
            assert program.tp_size == ranks, program.tp_size
            functions = torch_functions(device)
            no_gather = tejit.TensorParallelGroup.from_function(
                functions[0], reduce_scatter=functions[2])
            no_scatter = tejit.TensorParallelGroup.from_function(
                functions[0], all_gather=functions[1])
            output = torch.zeros(ranks * COUNT, device="cuda", dtype=dtype)
            grad_input = torch.zeros(COUNT, device="cuda", dtype=dtype)
            try:
                for group, call, name in (
                        (no_gather, "forward", "all_gather"),
                        (no_scatter, "backward", "reduce_scatter")):
                    program.set_tp_group(group)
                    try:
                        program.forward(stream, [source], [output])
                        if call == "backward":
                            program.backward(stream, [grad_output],
                                             [grad_input])
                    except tejit.TejitError as error:
                        assert error.status == 8, error
                        assert f"has no {name} function" in str(error), error
                        assert "tejit_tp_group_from_functions" in str(error)
                        continue
                    raise AssertionError(f"a {call} without {name} ran")
            finally:
                stream.synchronize()
                program.set_tp_group(None)
                no_gather.close()
                no_scatter.close()
        check(f"{element}: a missing function fails the call",
              missing_functions)

        def against_torch():
            first = None
            for name, group in groups.items():
                output, grad_input = run_on(program, group)
                assert torch.equal(output, gathered), f"{name}: the gather"
                close(grad_input, summed_chunk, f"{name}: the scatter")
                if first is None:
                    first = grad_input
                    if ranks == 2:  # one addition: no order to differ in
                        assert torch.equal(grad_input, scattered), name
                else:
                    assert torch.equal(grad_input, first), \
                        f"{name} differs from {next(iter(groups))}"
            serial = load_gather_scatter(element, device, overlap=False)
            try:
                for name, group in groups.items():
                    output, grad_input = run_on(serial, group)
                    assert torch.equal(output, gathered), name
                    assert torch.equal(grad_input, first), name
            finally:
                serial.close()
        check(f"{element}: gathers and reduce-scatters as torch does, over "
              f"every group, overlapped or not", against_torch)

        def graph_replays():
            eager = run_on(program, next(iter(groups.values())))
            replays_to(eager, program, stream, source, grad_output,
                       ("the gather", "the scatter"))
        check(f"{element}: a captured graph replays them", graph_replays)
        program.close()


# Context parallelism's all-to-all in a plan of no kernels: the forward
# (cp_alltoall to heads) takes this rank's 2 A2A_CHUNK tokens of all
# A2A_HEADS heads ([tokens, batch, heads, d] sbhd, [batch, tokens, heads,
# d] bshd) to the whole sequence of heads / N of them; its backward
# (cp_alltoall to sequence) the reverse.
A2A_CHUNK = 5
A2A_BATCH = 3
A2A_HEADS = 8
A2A_HEAD_DIM = 24


def all_to_all_shapes(layout, ranks):
    """(this rank's tokens of every head, the whole sequence of its
    heads)."""
    local, whole = 2 * A2A_CHUNK, 2 * A2A_CHUNK * ranks
    tokens = (local, A2A_BATCH) if layout == "sbhd" else (A2A_BATCH, local)
    sequence = (whole, A2A_BATCH) if layout == "sbhd" else (A2A_BATCH, whole)
    return ((*tokens, A2A_HEADS, A2A_HEAD_DIM),
            (*sequence, A2A_HEADS // ranks, A2A_HEAD_DIM))


def all_to_all_plan(element, ranks, arch, layout, load_balanced):
    def value(id, shape, storage):
        dims = "x".join(str(size) for size in shape)
        return {"id": id, "type": f"tensor<{dims}x{element}>",
                "bytes": math.prod(shape) * ELEMENT_BYTES[element],
                "storage": storage}
    tokens, heads = all_to_all_shapes(layout, ranks)
    step = {"kind": "cp_alltoall", "in": 0, "out": 1, "ranks": ranks,
            "seq_dim": 0 if layout == "sbhd" else 1, "head_dim": 2,
            "load_balanced": load_balanced}
    return {
        "format": "tejit-plan", "version": 4, "arch": arch,
        "functions": [
            {"name": "to_heads", "arena_bytes": 0,
             "arguments": [{"value": 0, "te.name": "input"}],
             "results": [{"value": 1, "te.name": "output"}],
             "values": [value(0, tokens, {"arg": 0}),
                        value(1, heads, {"result": 0})],
             "steps": [step]},
            {"name": "to_heads_backward", "backward_of": "to_heads",
             "arena_bytes": 0,
             "arguments": [{"value": 0, "te.name": "grad.output"}],
             "results": [{"value": 1, "te.name": "grad.input",
                          "te.grad_of": 0}],
             "values": [value(0, heads, {"arg": 0}),
                        value(1, tokens, {"result": 0})],
             "steps": [step]}]}


def load_all_to_all(element, device, layout, load_balanced):
    """The program of all_to_all_plan, loaded from a fresh bundle."""
    info = tejit.device_info(device)
    plan = all_to_all_plan(element, dist.get_world_size(),
                           f"sm_{info.major}{info.minor}", layout,
                           load_balanced)
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "plan.json"), "w") as file:
            json.dump(plan, file)
        return tejit.Program.load_bundle(directory, device)


def token_rows(rank, ranks, seq, load_balanced):
    """The positions of the sequence (of `seq`) rank `rank` holds:
    chunks rank and 2 ranks - 1 - rank of 2 ranks when load balanced,
    else the rank's 1/ranks in order."""
    if not load_balanced:
        local = seq // ranks
        rows = list(range(rank * local, (rank + 1) * local))
    else:
        chunk = seq // (2 * ranks)
        late = 2 * ranks - 1 - rank
        rows = (list(range(rank * chunk, (rank + 1) * chunk))
                + list(range(late * chunk, (late + 1) * chunk)))
    return torch.tensor(rows, device="cuda", dtype=torch.long)


def all_to_all_reference(source, grad_output, layout, load_balanced):
    """(the forward's output, the backward's grad.input) from every rank's
    tensors (torch's all_gather): the whole sequence of this rank's head
    block, and this rank's tokens of every rank's heads."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    seq_dim = 0 if layout == "sbhd" else 1
    seq = source.shape[seq_dim] * ranks
    per_rank = A2A_HEADS // ranks
    parts = [torch.empty_like(source) for _ in range(ranks)]
    dist.all_gather(parts, source)
    shape = list(source.shape)
    shape[seq_dim] = seq
    whole = torch.empty(shape, device="cuda", dtype=source.dtype)
    for other, part in enumerate(parts):
        whole.index_copy_(seq_dim,
                          token_rows(other, ranks, seq, load_balanced), part)
    output = whole.narrow(2, rank * per_rank, per_rank).contiguous()
    grads = [torch.empty_like(grad_output) for _ in range(ranks)]
    dist.all_gather(grads, grad_output)
    mine = token_rows(rank, ranks, seq, load_balanced)
    grad_input = torch.cat([grad.index_select(seq_dim, mine)
                            for grad in grads], dim=2)
    return output, grad_input


def all_to_all_checks(check, device, groups, without):
    """The checks of context parallelism's all-to-all over `groups` (name
    -> TensorParallelGroup, the NCCL group first); `without` a function
    group without all_to_all."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    stream = torch.cuda.Stream()
    for element, dtype in DTYPES.items():
        for layout in ("sbhd", "bshd"):
            for load_balanced in (True, False):
                program = load_all_to_all(element, device, layout,
                                          load_balanced)
                tokens, heads = all_to_all_shapes(layout, ranks)
                generator = torch.Generator(device="cuda").manual_seed(
                    20 + rank)
                source = torch.randn(*tokens, generator=generator,
                                     device="cuda", dtype=dtype)
                grad_output = torch.randn(*heads, generator=generator,
                                          device="cuda", dtype=dtype)
                want = all_to_all_reference(source, grad_output, layout,
                                            load_balanced)
                what = (f"{element} {layout}"
                        f"{' load-balanced' if load_balanced else ''}")

                def run_on(program, group):
                    program.set_cp_group(group)
                    output = torch.zeros(*heads, device="cuda", dtype=dtype)
                    grad_input = torch.zeros(*tokens, device="cuda",
                                             dtype=dtype)
                    with torch.cuda.stream(stream):
                        program.forward(stream, [source], [output])
                        program.backward(stream, [grad_output], [grad_input])
                    stream.synchronize()
                    return output, grad_input

                def against_torch():
                    assert program.cp_size == ranks, program.cp_size
                    for name, group in groups.items():
                        output, grad_input = run_on(program, group)
                        assert torch.equal(output, want[0]), \
                            f"{name}: to heads"
                        assert torch.equal(grad_input, want[1]), \
                            f"{name}: to sequence"
                check(f"{what}: all-to-alls as torch's all_gather says, "
                      f"over every group", against_torch)
                if not (layout == "sbhd" and load_balanced):
                    program.close()
                    continue

                def missing_function():
                    output = torch.zeros(*heads, device="cuda", dtype=dtype)
                    try:
                        program.set_cp_group(without)
                        program.forward(stream, [source], [output])
                    except tejit.TejitError as error:
                        assert error.status == 8, error
                        assert "has no all_to_all function" in str(error), \
                            error
                        return
                    finally:
                        stream.synchronize()
                        program.set_cp_group(None)
                    raise AssertionError("a forward without all_to_all ran")
                check(f"{what}: a group without all_to_all fails the call",
                      missing_function)

                def graph_replays():
                    eager = run_on(program, next(iter(groups.values())))
                    replays_to(eager, program, stream, source, grad_output,
                               ("to heads", "to sequence"))
                check(f"{what}: a captured graph replays them",
                      graph_replays)
                program.close()


def sequence_parallel_checks(check, device, group):
    """A LayerNormMLP with sequence_parallel against the same layer without
    it (itself checked above), both over `group`."""
    rank, ranks = dist.get_rank(), dist.get_world_size()
    stream = torch.cuda.Stream()
    spec = json.loads(json.dumps(SPEC))
    spec["layers"][0]["sequence_parallel"] = True

    def against_the_layer():
        whole = tejit.Program.compile(SPEC, training=True, recipe="none",
                                      device=device)
        parallel = tejit.Program.compile(spec, training=True, recipe="none",
                                         device=device)
        try:
            inputs = tensors(whole.inputs, seed=1, sharded_seed=100 + rank)
            grad_outputs = tensors(whole.grad_outputs, seed=2)
            want = run(whole, group, stream, inputs, grad_outputs)
            by_name = dict(zip((i.name for i in whole.inputs), inputs))
            rows = inputs[0].shape[0] // ranks
            mine = slice(rank * rows, (rank + 1) * rows)
            assert whole.inputs[0].name == "input", whole.inputs[0].name
            by_name["input"] = inputs[0][mine].contiguous()
            local_inputs = [by_name[i.name] for i in parallel.inputs]
            local_grads = [grad_outputs[0][mine].contiguous()]
            assert [tuple(i.shape) for i in parallel.inputs] == \
                [tuple(t.shape) for t in local_inputs], parallel.inputs
            got = run(parallel, group, stream, local_inputs, local_grads)
            close(got[0][0], want[0][0][mine], "this rank's output rows")
            names = [i.name for i in parallel.grad_inputs]
            assert names == [i.name for i in whole.grad_inputs], names
            for name, mine_grad, whole_grad in zip(names, got[1], want[1]):
                if name == "grad.input":
                    close(mine_grad, whole_grad[mine], name)
                elif "layer_norm" in name or "fc2_bias" in name:
                    # This rank's rows' part of the sum (TE's
                    # param.sequence_parallel gradients).
                    close(summed(mine_grad), whole_grad, name)
                else:
                    close(mine_grad, whole_grad, name)
        finally:
            whole.close()
            parallel.close()
    check("sequence_parallel LayerNormMLP: this rank's rows of the layer",
          against_the_layer)


def main():
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl", timeout=datetime.timedelta(minutes=5))
    device = torch.cuda.current_device()
    results = []

    def check(name, function):
        try:
            function()
            results.append((name, None))
        except Exception:  # noqa: BLE001 - reported below
            results.append((name, traceback.format_exc()))

    program = tejit.Program.compile(SPEC, training=True, recipe="none",
                                    device=device)
    inputs = tensors(program.inputs, seed=1, sharded_seed=100 + rank)
    grad_outputs = tensors(program.grad_outputs, seed=2)
    stream = torch.cuda.Stream()

    def no_group():
        assert program.tp_size == 2, program.tp_size
        outputs = [torch.zeros(*i.shape, device="cuda",
                               dtype=DTYPES[i.dtype]) for i in program.outputs]
        try:
            program.forward(stream, inputs, outputs)
        except tejit.TejitError as error:
            assert error.status == 8, error
            assert "tejit_program_set_tp_group" in str(error), error
            assert "tp_size 2" in str(error), error
            return
        raise AssertionError("a forward without a group ran")
    check("no group: the call fails", no_group)

    def wrong_size():
        alone = tejit.TensorParallelGroup.create(
            tejit.TensorParallelGroup.unique_id(), 1, 0, device)
        try:
            program.set_tp_group(alone)
        except tejit.TejitError as error:
            assert "has 1" in str(error), error
            return
        finally:
            alone.close()
        raise AssertionError("a group of 1 rank was accepted")
    check("a group of another size is refused", wrong_size)

    ids = [tejit.TensorParallelGroup.unique_id() if rank == 0 else None]
    dist.broadcast_object_list(ids, src=0)
    nccl = tejit.TensorParallelGroup.create(ids[0], dist.get_world_size(),
                                            rank, device)

    def through_torch(address, count, dtype, handle):
        tensor = device_view(address, count, getattr(torch, dtype), device)
        with torch.cuda.stream(torch.cuda.ExternalStream(handle or 0)):
            dist.all_reduce(tensor)
    function = tejit.TensorParallelGroup.from_function(through_torch)
    dist.barrier()  # torch's communicator exists from its first collective
    backend = dist.group.WORLD._get_backend(torch.device("cuda"))
    borrowed = tejit.TensorParallelGroup.from_nccl_comm(backend._comm_ptr())
    nothing = tejit.TensorParallelGroup.from_function(lambda *a: None)

    all_reduce, all_gather, reduce_scatter = torch_functions(device)
    # With all_to_all where the library takes one (context parallelism's
    # a2a; the checks below say when it does not).
    a2a = tejit.TensorParallelGroup.takes_all_to_all()
    functions = tejit.TensorParallelGroup.from_function(
        all_reduce, all_gather=all_gather, reduce_scatter=reduce_scatter,
        all_to_all=torch_all_to_all(device) if a2a else None)
    without_all_to_all = tejit.TensorParallelGroup.from_function(
        all_reduce, all_gather=all_gather, reduce_scatter=reduce_scatter)

    want = run(program, nccl, stream, inputs, grad_outputs)

    def groups_agree():
        for name, group in (("function", function), ("borrowed", borrowed)):
            got = run(program, group, stream, inputs, grad_outputs)
            for a, b in zip(want[0] + want[1], got[0] + got[1]):
                assert torch.equal(a, b), f"{name} differs from NCCL"
        for tensor in want[0]:
            assert same_everywhere(tensor), "outputs differ across ranks"
        grad_input = want[1][0]
        assert same_everywhere(grad_input), "input grads differ across ranks"
    check("NCCL, borrowed and function groups agree", groups_agree)

    def partials_add_up():
        partial = run(program, nothing, stream, inputs, grad_outputs)
        bias = [t for t, i in zip(inputs, program.inputs)
                if "fc2_bias" in i.name]
        assert len(bias) == 1, [i.name for i in program.inputs]
        extra = (dist.get_world_size() - 1) * bias[0].float()
        close(want[0][0], summed(partial[0][0]) - extra, "output")
        assert not torch.equal(want[0][0], partial[0][0])
        close(want[1][0], summed(partial[1][0]), "input gradient")
    check("the sums are sums of the partials", partials_add_up)

    def graph_replays():
        program.set_tp_group(nccl)
        outputs = [torch.zeros_like(t) for t in want[0]]
        grads = [torch.zeros_like(t) for t in want[1]]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            program.forward(stream, inputs, outputs)
            program.backward(stream, grad_outputs, grads)
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(want[0] + want[1], outputs + grads):
            assert torch.equal(a, b), "the replay differs"
    check("a captured graph replays the sums", graph_replays)

    gather_scatter_checks(check, device, {
        "NCCL": nccl, "borrowed": borrowed, "functions": functions})
    sequence_parallel_checks(check, device, nccl)
    if a2a:
        all_to_all_checks(check, device, {
            "NCCL": nccl, "borrowed": borrowed, "functions": functions},
            without_all_to_all)
    else:
        def library_has_all_to_all():
            raise AssertionError(
                f"this library ({tejit._capi.library_path()}) has no "
                f"tejit_tp_group_set_all_to_all: context parallelism's a2a "
                f"was not checked")
        check("all-to-all: the library gives function groups one",
              library_has_all_to_all)

    failed = [name for name, error in results if error]
    flags = torch.tensor([len(failed)], device="cuda")
    dist.all_reduce(flags)
    for name, error in results:
        if rank == 0 or error:
            print(f"rank {rank}: {'FAIL' if error else 'PASS'} {name}")
            if error:
                print(error)
    program.close()
    for group in (nccl, function, borrowed, nothing, functions,
                  without_all_to_all):
        group.close()
    dist.destroy_process_group()
    return 1 if flags.item() else 0


if __name__ == "__main__":
    sys.exit(main())
