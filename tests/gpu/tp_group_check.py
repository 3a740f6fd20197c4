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
Prints one line per check on rank 0; exits non-zero if any rank failed.
"""
import datetime
import os
import sys
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
    error = (got.float() - want).abs().max().item()
    scale = want.abs().max().item()
    assert error <= 2e-2 * scale, f"{what}: max error {error}, max {scale}"


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

    failed = [name for name, error in results if error]
    flags = torch.tensor([len(failed)], device="cuda")
    dist.all_reduce(flags)
    for name, error in results:
        if rank == 0 or error:
            print(f"rank {rank}: {'FAIL' if error else 'PASS'} {name}")
            if error:
                print(error)
    program.close()
    for group in (nccl, function, borrowed, nothing):
        group.close()
    dist.destroy_process_group()
    return 1 if flags.item() else 0


if __name__ == "__main__":
    sys.exit(main())
