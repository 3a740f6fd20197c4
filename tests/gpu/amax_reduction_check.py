"""DelayedScaling's amax reduction across ranks, on 2 or more GPUs:

    torchrun --nproc_per_node=2 tests/gpu/amax_reduction_check.py [--full]

Every rank trains the same parameters on its own random data, so each
rank's amaxes differ. With reduce_amax (TE's default) every rank must scale
from the element-wise max over the ranks:
  * after the first step (every scale still 1, so each rank's amaxes are
    exactly those of a twin that does not reduce), the amax history of every
    FP8 tensor equals, bit for bit, the max over the ranks of the twins'
    histories, which differ from rank to rank;
  * after several steps the whole FP8 state (scales, scale_inv, histories)
    is bit for bit the same on every rank;
  * without fp8_group, torch.distributed's default group is used (TE's
    default): the same state as with fp8_group=WORLD;
  * the same through tejit's own NCCL communicator (tejit.AmaxGroup.create,
    the C API's path) on a program compiled from a spec, and through the
    caller's communicator (from_nccl_comm, given torch's);
  * graphs from make_graphed_callables replay the reduction: graphed steps
    equal an eager twin's bit for bit;
  * forwards under torch.no_grad() reduce nothing and leave the state
    (TE's rule): ranks may run different numbers of them;
  * under DistributedDataParallel, whose gradient all-reduces run on the
    same process group between the layers' reductions, training steps keep
    parameters and FP8 state equal across ranks.
Layers: LayerNormMLP, Linear and TransformerLayer (hidden 256); --full adds
the quickstart's LayerNormMLP (hidden 4096, FFN 16384, 8192 tokens per
rank). Prints one line per check on rank 0; exits non-zero if any rank
failed one.
"""
import argparse
import copy
import datetime
import os
import random
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import tejit  # noqa: E402
import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

BF16 = torch.bfloat16
STEPS = 3


def delayed(reduce_amax=True):
    return recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                 amax_history_len=8, amax_compute_algo="max",
                                 reduce_amax=reduce_amax)


def gather(tensor):
    """[this tensor on every rank], in rank order (CPU copies)."""
    local = tensor.detach().to("cuda").contiguous()
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return [p.cpu() for p in parts]


def meta_state(module):
    return {k: v.detach().cpu() for k, v in module.state_dict().items()
            if "fp8_meta" in k}


def train_step(module, x, dy, fp8_recipe, **autocast_args):
    x = x.detach().requires_grad_()
    module.zero_grad(set_to_none=True)
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe,
                         **autocast_args):
        out = module(x)
    out.backward(dy)
    return out.detach()


def same_on_every_rank(state, what):
    for name, value in state.items():
        parts = gather(value)
        for rank, part in enumerate(parts[1:], start=1):
            assert torch.equal(part, parts[0]), \
                f"{what}: {name} differs between rank 0 and rank {rank}"


def check_module(make, shape, seed, what, out_shape=None):
    """The first-step max rule, state equality after STEPS steps, and the
    default group, for one module type (input `shape`, output `out_shape`,
    default the same)."""
    torch.manual_seed(seed)  # the same parameters on every rank
    grouped = make()
    with torch.no_grad():
        for p in grouped.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    local, defaulted = copy.deepcopy(grouped), copy.deepcopy(grouped)
    # Each rank's own data.
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed * 1000 + 1 + dist.get_rank())
    steps = [(torch.randn(*shape, device="cuda", dtype=BF16,
                          generator=generator) * (1 + dist.get_rank()),
              torch.randn(*(out_shape or shape), device="cuda", dtype=BF16,
                          generator=generator))
             for _ in range(STEPS)]
    world = dist.group.WORLD
    for index, (x, dy) in enumerate(steps):
        out = train_step(grouped, x, dy, delayed(), fp8_group=world)
        out_default = train_step(defaulted, x, dy, delayed())
        train_step(local, x, dy, delayed(reduce_amax=False))
        assert torch.isfinite(out).all(), f"{what}: output, step {index}"
        assert torch.equal(out_default, out), \
            f"{what}: default group output differs, step {index}"
        if index == 0:
            got, twin = meta_state(grouped), meta_state(local)
            histories = [k for k in got if k.endswith("amax_history")]
            assert histories, f"{what}: no amax history in the state"
            differs = False
            for name in histories:
                ranks = gather(twin[name])
                want = torch.stack(ranks).amax(dim=0)
                differs |= any(not torch.equal(r, ranks[0]) for r in ranks)
                assert torch.count_nonzero(want) > 0, \
                    f"{what}: {name}: nothing recorded"
                assert torch.equal(got[name], want), (
                    f"{what}: {name} after step 1 is not the max over the "
                    f"ranks: got {got[name][1]}, want {want[1]}")
            assert differs, (f"{what}: the ranks' own amaxes are equal: the "
                             f"check could not fail")
    state = meta_state(grouped)
    same_on_every_rank(state, what)
    default_state = meta_state(defaulted)
    for name, value in state.items():
        assert torch.equal(default_state[name], value), \
            f"{what}: the default group's {name} differs from fp8_group's"
    local_state = meta_state(local)
    assert any(not all(torch.equal(p, parts[0]) for p in parts)
               for parts in (gather(v) for v in local_state.values())), \
        f"{what}: without reduction the ranks' states agree anyway"


def check_core_nccl(seed):
    """tejit.Program + tejit.AmaxGroup.create (tejit's NCCL communicator):
    after one step the histories are the max of twin programs' that do not
    reduce."""
    rank, device = dist.get_rank(), torch.cuda.current_device()
    spec = {"name": "mlp", "params_dtype": "bf16", "seq_length": 128,
            "batch_size": 2,
            "recipe": {"type": "DelayedScaling", "fp8_format": "HYBRID",
                       "amax_history_len": 4},
            "layers": [{"type": "LayerNormMLP", "hidden_size": 256,
                        "ffn_hidden_size": 1024}]}
    ids = [tejit.AmaxGroup.unique_id() if rank == 0 else None]
    dist.broadcast_object_list(ids, src=0)
    group = tejit.AmaxGroup.create(ids[0], dist.get_world_size(), rank,
                                   device)
    grouped = tejit.Program.compile(spec, device=device)
    twin = tejit.Program.compile(spec, device=device)
    assert grouped.amax_reductions == 2, grouped.amax_reductions
    grouped.set_amax_group(group)
    group.close()  # the program keeps it alive
    dtypes = {"bf16": BF16, "f32": torch.float32}
    torch.manual_seed(seed)
    inputs = [torch.randn(*i.shape, device="cuda",
                          dtype=dtypes[i.dtype]) * 0.05 for i in grouped.inputs]
    inputs[0] = torch.randn_like(inputs[0]) * (1 + rank)  # this rank's data
    dys = [torch.randn(*i.shape, device="cuda", dtype=dtypes[i.dtype])
           for i in grouped.grad_outputs]
    stream = torch.cuda.current_stream()
    for program in (grouped, twin):
        outputs = [torch.empty(*i.shape, device="cuda", dtype=dtypes[i.dtype])
                   for i in program.outputs]
        grads = [torch.empty(*i.shape, device="cuda", dtype=dtypes[i.dtype])
                 for i in program.grad_inputs]
        program.forward(stream, inputs, outputs)
        program.backward(stream, dys, grads)
    checked = 0
    for index, info in enumerate(grouped.meta):
        if not info.name.endswith("amax_history"):
            continue
        got = torch.frombuffer(bytearray(grouped.meta_get(index, stream)),
                               dtype=torch.float32)
        own = torch.frombuffer(bytearray(twin.meta_get(index, stream)),
                               dtype=torch.float32)
        want = torch.stack(gather(own)).amax(dim=0)
        assert torch.count_nonzero(want) > 0, f"{info.name}: nothing recorded"
        assert torch.equal(got, want), \
            f"core NCCL: {info.name} is not the max over the ranks"
        same_on_every_rank({info.name: got}, "core NCCL")
        checked += 1
    assert checked == 2, checked
    grouped.close()
    twin.close()


def check_borrowed_comm(seed):
    """tejit.AmaxGroup.from_nccl_comm over the caller's communicator (here
    the default process group's own, a private PyTorch accessor): after one
    step, the same state as a program reducing through torch.distributed."""
    backend = dist.group.WORLD._get_backend(torch.device("cuda"))
    comm = backend._comm_ptr()
    spec = {"name": "linear", "params_dtype": "bf16", "seq_length": 64,
            "batch_size": 2, "recipe": {"type": "DelayedScaling"},
            "layers": [{"type": "Linear", "in_features": 256,
                        "out_features": 256}]}
    device = torch.cuda.current_device()
    borrowed = tejit.Program.compile(spec, device=device)
    through_torch = tejit.Program.compile(spec, device=device)
    borrowed.set_amax_group(tejit.AmaxGroup.from_nccl_comm(comm))
    from tejit.pytorch import _distributed  # noqa: PLC0415
    through_torch.set_amax_group(
        _distributed.amax_group(dist.group.WORLD, device))
    torch.manual_seed(seed)
    inputs = [torch.randn(*i.shape, device="cuda", dtype=BF16) * 0.05
              for i in borrowed.inputs]
    inputs[0] = torch.randn_like(inputs[0]) * (1 + dist.get_rank())
    dy = [torch.randn(*i.shape, device="cuda", dtype=BF16)
          for i in borrowed.grad_outputs]
    stream = torch.cuda.current_stream()
    for program in (borrowed, through_torch):
        outputs = [torch.empty(*i.shape, device="cuda", dtype=BF16)
                   for i in program.outputs]
        grads = [torch.empty(*i.shape, device="cuda", dtype=BF16)
                 for i in program.grad_inputs]
        program.forward(stream, inputs, outputs)
        program.backward(stream, dy, grads)
    for index, info in enumerate(borrowed.meta):
        got = borrowed.meta_get(index, stream)
        assert got == through_torch.meta_get(index, stream), \
            f"borrowed communicator: {info.name} differs"
    history = [i for i, info in enumerate(borrowed.meta)
               if info.name.endswith("amax_history")]
    same_on_every_rank({borrowed.meta[i].name: torch.frombuffer(
        bytearray(borrowed.meta_get(i, stream)), dtype=torch.float32)
        for i in history}, "borrowed communicator")
    borrowed.close()
    through_torch.close()


def check_graphed(seed):
    """make_graphed_callables with the reduction: the graphs replay the
    all-reduces they captured, so graphed steps equal an eager twin's bit
    for bit (outputs, gradients, FP8 state), and the state is the same on
    every rank."""
    torch.manual_seed(seed)
    eager = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    graphed = copy.deepcopy(eager)
    sample = torch.randn(128, 256, device="cuda", dtype=BF16,
                         requires_grad=True)
    graphed = te.make_graphed_callables(
        graphed, (sample,), fp8_enabled=True, fp8_recipe=delayed(),
        fp8_group=dist.group.WORLD)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed + 11 + dist.get_rank())
    for index in range(STEPS):
        x = torch.randn(128, 256, device="cuda", dtype=BF16,
                        generator=generator)
        dy = torch.randn(128, 256, device="cuda", dtype=BF16,
                         generator=generator)
        want = train_step(eager, x, dy, delayed(),
                          fp8_group=dist.group.WORLD)
        got = train_step(graphed, x, dy, delayed(),
                         fp8_group=dist.group.WORLD)
        assert torch.equal(got, want), f"graphed: output, step {index}"
        for (name, p), q in zip(eager.named_parameters(),
                                graphed.parameters()):
            assert torch.equal(q.grad, p.grad), \
                f"graphed: gradient of {name}, step {index}"
    want_state = meta_state(eager)
    for name, value in meta_state(graphed).items():
        assert torch.equal(value, want_state[name]), f"graphed: {name}"
    same_on_every_rank(want_state, "graphed")


def check_no_grad_is_local(seed):
    """Under torch.no_grad() nothing is reduced and the state stays as it
    is (TE reduces and updates only while autograd records): ranks may run
    different numbers of inference forwards without waiting for each
    other."""
    torch.manual_seed(seed)
    module = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed + 13 + dist.get_rank())
    x = torch.randn(128, 256, device="cuda", dtype=BF16, generator=generator)
    train_step(module, x, torch.randn_like(x), delayed(),
               fp8_group=dist.group.WORLD)  # a trained state, the same on all
    module.eval()
    before = meta_state(module)
    assert before, "no FP8 state after a training step"
    with torch.no_grad():
        for _ in range(1 + dist.get_rank()):  # rank r runs r + 1 forwards
            x = torch.randn(128, 256, device="cuda", dtype=BF16,
                            generator=generator) * (1 + dist.get_rank())
            with te.fp8_autocast(enabled=True, fp8_recipe=delayed(),
                                 fp8_group=dist.group.WORLD):
                assert torch.isfinite(module(x)).all()
    torch.cuda.synchronize()
    for name, value in meta_state(module).items():
        assert torch.equal(value, before[name]), \
            f"no_grad forwards changed {name}"


def check_ddp(seed):
    """DDP + FP8 (default group): parameters and FP8 state stay equal."""
    torch.manual_seed(seed)
    model = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[torch.cuda.current_device()])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed + 7 + dist.get_rank())
    for _ in range(4):
        x = torch.randn(128, 256, device="cuda", dtype=BF16,
                        generator=generator)
        optimizer.zero_grad(set_to_none=True)
        with te.fp8_autocast(enabled=True, fp8_recipe=delayed()):
            loss = ddp(x).float().pow(2).mean()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss), "DDP: loss"
    same_on_every_rank({n: p.detach().cpu()
                        for n, p in model.named_parameters()}, "DDP params")
    same_on_every_rank(meta_state(model), "DDP FP8 state")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--full", action="store_true",
                        help="also the quickstart's LayerNormMLP size")
    args = parser.parse_args()
    # A rank that fails a check mid-collective must not hang the others
    # for NCCL's default 10 minutes.
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    seeds = [int(os.environ.get("TEJIT_TEST_SEED",
                                random.SystemRandom().randrange(1 << 30)))]
    dist.broadcast_object_list(seeds, src=0)
    seed = seeds[0]
    if rank == 0:
        print(f"amax_reduction_check: {dist.get_world_size()} ranks on "
              f"{torch.cuda.get_device_name()}, seed {seed} "
              f"(TEJIT_TEST_SEED={seed} repeats this run)", flush=True)
    checks = [
        ("LayerNormMLP 256/1024, 256 tokens", lambda: check_module(
            lambda: te.LayerNormMLP(256, 1024, params_dtype=BF16),
            (256, 256), seed, "LayerNormMLP")),
        ("Linear 256 -> 512, 128 tokens", lambda: check_module(
            lambda: te.Linear(256, 512, params_dtype=BF16), (128, 256),
            seed, "Linear", out_shape=(128, 512))),
        ("TransformerLayer 256/1024/4 heads, s 128 b 2", lambda: check_module(
            lambda: te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                        attention_dropout=0.0,
                                        params_dtype=BF16),
            (128, 2, 256), seed, "TransformerLayer")),
        ("tejit.Program + tejit's NCCL communicator",
         lambda: check_core_nccl(seed)),
        ("the caller's NCCL communicator (torch's)",
         lambda: check_borrowed_comm(seed)),
        ("make_graphed_callables replays the reduction",
         lambda: check_graphed(seed)),
        ("torch.no_grad() forwards reduce nothing",
         lambda: check_no_grad_is_local(seed)),
        ("DistributedDataParallel training", lambda: check_ddp(seed)),
    ]
    if args.full:
        checks.append(("LayerNormMLP 4096/16384, 8192 tokens per rank",
                       lambda: check_module(
                           lambda: te.LayerNormMLP(4096, 16384,
                                                   params_dtype=BF16),
                           (8192, 4096), seed, "LayerNormMLP full size")))
    failed = 0
    for name, check in checks:
        error = None
        try:
            check()
        except Exception:  # noqa: BLE001 - reported, then counted
            error = traceback.format_exc()
        flag = torch.tensor([error is not None], device="cuda",
                            dtype=torch.int32)
        dist.all_reduce(flag)
        if error is not None:
            print(f"[rank {rank}] {name}: FAILED\n{error}", flush=True)
        if rank == 0 and not flag.item():
            print(f"PASS  {name}", flush=True)
        elif rank == 0:
            print(f"FAIL  {name} (on {flag.item()} rank(s))", flush=True)
        failed += bool(flag.item())
    if rank == 0:
        print(f"amax_reduction_check: {len(checks) - failed}/{len(checks)} "
              f"passed", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
