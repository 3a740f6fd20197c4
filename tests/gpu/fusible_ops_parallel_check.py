"""Tensor parallelism of tejit.pytorch.ops (TE's tensor_parallel_mode,
tensor_parallel_group and sequence_parallel; docs/fusible-ops.md), on 2
(or more) GPUs:

    python3 -m torch.distributed.run --nproc-per-node 2 \
        tests/gpu/fusible_ops_parallel_check.py [--filter SUBSTRING]
        [--tol-scale X]

Built on tensor_parallel_check.py (imported: its shards, steps, reports,
tolerances and runner) and sequence_parallel_check.py (gathers). Every rank
builds the same tp=1 te.ops.Sequential and the same chain with
tensor_parallel_group=WORLD, whose parameters are this rank's shards of the
tp=1 chain's: a column-parallel Linear's rows (weight and bias), a
row-parallel one's weight columns, norms whole. TE's ops.Linear in row
mode adds each rank's bias before the sum over the ranks: every rank holds
1/tp of the tp=1 bias (the sum is the tp=1 bias), and each rank's bias
gradient is the tp=1 bias's whole gradient. A Bias op after a row-parallel
BasicLinear (TE's basic ops) is added once, after the sum: it holds the
tp=1 bias whole.

Both chains run forward and backward on the same data (the parallel chain
on this rank's slice of dim 0 with sequence_parallel: its input, output,
extra input and extra output, its output gradient), under DelayedScaling
after 2 warm-up steps. Compared (tensor_parallel_check's errors and
tolerances): outputs and input gradients (gathered along dim 0 with
sequence parallelism; else bit for bit the same on every rank too), and
every parameter gradient against its shard of the tp=1 gradient; with
sequence parallelism the gradients of parameters that act on this rank's
slice only (the norms', a Bias after a row-parallel BasicLinear) are
summed over the ranks first (TE's ops do not mark them; Megatron-LM sums
them).

Cases: LayerNorm, Linear column, GELU, Linear row (bias), with and without
sequence parallelism, in bf16, DelayedScaling and Float8CurrentScaling; a
residual block (RMSNorm, MakeExtraOutput, Linear column, ReLU, Linear row,
AddExtraInput); TE's basic ops (BasicLinear column, Bias(tensor_parallel),
GELU, BasicLinear row, Bias); the communication ops AllReduce, AllGather
and ReduceScatter against their definitions (forward and backward); a
chain whose ops have different groups is refused.

Prints one PASS/FAIL line per case on rank 0 and a pass count; exits
non-zero if any rank failed a case. With one process every case runs at
tp_size 1 (TE turns tensor parallelism off): a check of the script and of
the single-rank path. TEJIT_TEST_SEED=N repeats a run.
"""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tejit.pytorch as te  # noqa: E402
import tensor_parallel_check as tpc  # noqa: E402 - beside this script
from sequence_parallel_check import gather, sum_over_ranks  # noqa: E402

BF16 = tpc.BF16
HIDDEN, FFN, SEQ, BATCH = 256, 1024, 64, 2


# --- chains -----------------------------------------------------------------

class Chain:
    """How to build one chain and read its parameters: `make(**tp)` (tp:
    {} for the tp=1 chain, {"tp_group": group} for the parallel one),
    `kinds` {op key: kind of its weight, kind of its bias} (tpc.shard's
    "col", "row", "rep"), `summed_bias` the keys whose bias is added
    before the sum over the ranks (ops.Linear row), `slice_params` the
    keys whose parameters act on this rank's slice only under sequence
    parallelism (partial gradients)."""

    def __init__(self, make, kinds, summed_bias=(), slice_params=()):
        self.make, self.kinds = make, kinds
        self.summed_bias, self.slice_params = set(summed_bias), \
            set(slice_params)

    def kind(self, name):
        key, _, leaf = name.partition(".")
        weight_kind, bias_kind = self.kinds.get(key, ("rep", "rep"))
        return bias_kind if leaf.endswith("bias") else weight_kind

    def split_bias(self, parallel):
        """A summed bias: 1/tp of the tp=1 one on every rank."""
        with torch.no_grad():
            for key in self.summed_bias:
                parallel[int(key)].bias.div_(tpc.WORLD)


def tp_args(tp, mode, sequence_parallel):
    """The op's tensor-parallel keyword arguments (none for tp=1)."""
    if not tp:
        return {}
    return {"tensor_parallel_mode": mode,
            "tensor_parallel_group": tp["tp_group"],
            "sequence_parallel": sequence_parallel}


def mlp_chain(sequence_parallel):
    def make(**tp):
        return te.ops.Sequential(
            te.ops.LayerNorm(HIDDEN, dtype=BF16),
            te.ops.Linear(HIDDEN, FFN, dtype=BF16,
                          **tp_args(tp, "column", sequence_parallel)),
            te.ops.GELU(),
            te.ops.Linear(FFN, HIDDEN, dtype=BF16,
                          **tp_args(tp, "row", sequence_parallel)))
    return Chain(make, {"1": ("col", "col"), "3": ("row", "rep")},
                 summed_bias=["3"], slice_params=["0"])


def residual_chain(sequence_parallel):
    def make(**tp):
        return te.ops.Sequential(
            te.ops.RMSNorm(HIDDEN, dtype=BF16),
            te.ops.MakeExtraOutput(),
            te.ops.Linear(HIDDEN, FFN, dtype=BF16,
                          **tp_args(tp, "column", sequence_parallel)),
            te.ops.ReLU(),
            te.ops.Linear(FFN, HIDDEN, dtype=BF16,
                          **tp_args(tp, "row", sequence_parallel)),
            te.ops.AddExtraInput())
    return Chain(make, {"2": ("col", "col"), "4": ("row", "rep")},
                 summed_bias=["4"], slice_params=["0"])


def basic_chain(sequence_parallel):
    def make(**tp):
        column = tp_args(tp, "column", sequence_parallel)
        return te.ops.Sequential(
            te.ops.BasicLinear(HIDDEN, FFN, dtype=BF16, **column),
            te.ops.Bias(FFN, dtype=BF16, tensor_parallel=bool(tp),
                        tensor_parallel_group=tp.get("tp_group")),
            te.ops.GELU(),
            te.ops.BasicLinear(FFN, HIDDEN, dtype=BF16,
                               **tp_args(tp, "row", sequence_parallel)),
            te.ops.Bias(HIDDEN, dtype=BF16))
    return Chain(make, {"0": ("col", "col"), "1": ("col", "col"),
                        "3": ("row", "row")}, slice_params=["4"])


def residual_call(module, x, residual):
    """The block's output plus half its normalized input (the extra
    output), so that both carry gradient."""
    out, normalized = module(x, residual)
    return out + 0.5 * normalized


# --- steps ------------------------------------------------------------------

def chain_case(chain, mode, seed, sequence_parallel, residual=False):
    """One step of the tp=1 chain and of the parallel one on the same data
    (the parallel chain on this rank's slice of dim 0 under sequence
    parallelism); everything compared as the module docstring says."""
    report = tpc.Report(mode)
    full, parallel = tpc.build_pair(chain.make, chain.kind, seed,
                                    after=chain.split_bias)
    shape = (SEQ, BATCH, HIDDEN)
    count = 2 if residual else 1
    call = residual_call if residual else None
    split = 0 if sequence_parallel and tpc.WORLD > 1 else None

    def part(tensor):
        return tensor if split is None else tpc.mine(tensor, split)

    dy = tpc.same_randn(shape, seed + 50)
    if mode == "delayed":
        for step in range(tpc.DELAYED_WARMUP_STEPS):
            warm = [tpc.same_randn(shape, seed + 100 + 10 * step + index)
                    for index in range(count)]
            tpc.step(full, warm, dy, mode, call)
            tpc.step(parallel, [part(x) for x in warm], part(dy), mode, call)
    inputs = [tpc.same_randn(shape, seed + 1 + index)
              for index in range(count)]
    want_out, want_dx, want_grads = tpc.step(full, inputs, dy, mode, call)
    out, dx, grads = tpc.step(parallel, [part(x) for x in inputs], part(dy),
                              mode, call)

    def whole(what, tensor, want, gradient):
        if split is None:
            report.compare(what, tensor, want, gradient=gradient)
            report.same_on_ranks(what, tensor)
        else:
            report.compare(f"{what} (gathered)", gather(tensor, split), want,
                           gradient=gradient)

    whole("output", out, want_out, False)
    for index, (got, want) in enumerate(zip(dx, want_dx)):
        whole(f"input grad {index}", got, want, True)
    for name, got in grads.items():
        kind = chain.kind(name)
        key = name.partition(".")[0]
        what = f"grad of {name}"
        if split is not None and key in chain.slice_params:
            got, what = sum_over_ranks(got), what + " (summed over the ranks)"
        report.compare(what, got, tpc.shard(want_grads[name], kind))
        if kind == "rep":
            report.same_on_ranks(what, got)
    report.check()
    return report.summary()


def collectives_case(seed):
    """AllReduce, AllGather and ReduceScatter against their definitions:
    forward and backward, on the same output gradient on every rank."""
    report = tpc.Report("bf16")
    rank, world = tpc.RANK, tpc.WORLD
    x = tpc.same_randn((8 * world, 4, 32), seed + 1) * (rank + 1)
    every = [tpc.same_randn((8 * world, 4, 32), seed + 1) * (r + 1)
             for r in range(world)]
    total = sum(t.float() for t in every).to(BF16)
    dy_whole = tpc.same_randn((8 * world * world, 4, 32), seed + 2)
    checks = [
        # (op, its output, the input gradient for output gradient dy)
        (te.ops.AllReduce(dist.group.WORLD), total,
         lambda dy: dy),
        (te.ops.AllGather(dist.group.WORLD), torch.cat(every, 0),
         lambda dy: world * tpc.mine(dy, 0)),
        (te.ops.ReduceScatter(dist.group.WORLD), tpc.mine(total, 0),
         lambda dy: gather(dy, 0)),
    ]
    for op, want, want_dx in checks:
        name = type(op).__name__
        leaf = x.detach().clone().requires_grad_()
        out = op(leaf)
        dy = dy_whole[:out.shape[0]]
        out.backward(dy)
        report.compare(f"{name} output", out, want, gradient=False)
        report.compare(f"{name} input grad", leaf.grad, want_dx(dy))
    report.check()
    return "AllReduce, AllGather, ReduceScatter"


def mixed_groups_case():
    """The ops of one chain share one group: another one is refused."""
    if tpc.WORLD == 1:
        return "skipped at one rank (tensor parallelism is off)"
    other = dist.new_group(list(range(tpc.WORLD)))
    chain = te.ops.Sequential(
        te.ops.Linear(HIDDEN, FFN, dtype=BF16, tensor_parallel_mode="column",
                      tensor_parallel_group=dist.group.WORLD),
        te.ops.Linear(FFN, HIDDEN, dtype=BF16, tensor_parallel_mode="row",
                      tensor_parallel_group=other))
    x = tpc.same_randn((SEQ, HIDDEN), 1)
    try:
        chain(x)
    except ValueError as error:
        if "one tensor_parallel_group" not in str(error):
            raise
        return "refused: " + str(error)[:60]
    raise AssertionError("a chain of two groups ran")


def cases(full_size, seed):
    del full_size  # one size
    result = []
    for mode in tpc.MODES:
        for sp in (False, True):
            tag = ", sequence parallel" if sp else ""
            result.append((
                f"ops LayerNorm, Linear column, GELU, Linear row{tag} "
                f"[{mode}]",
                lambda mode=mode, sp=sp: chain_case(mlp_chain(sp), mode,
                                                    seed, sp)))
    for mode in ("bf16", "delayed"):
        for sp in (False, True):
            tag = ", sequence parallel" if sp else ""
            result += [
                (f"ops residual block (extra input and output){tag} "
                 f"[{mode}]",
                 lambda mode=mode, sp=sp: chain_case(
                     residual_chain(sp), mode, seed, sp, residual=True)),
                (f"ops BasicLinear column, Bias, GELU, BasicLinear row, "
                 f"Bias{tag} [{mode}]",
                 lambda mode=mode, sp=sp: chain_case(basic_chain(sp), mode,
                                                     seed, sp)),
            ]
    result += [
        ("ops AllReduce, AllGather, ReduceScatter",
         lambda: collectives_case(seed)),
        ("ops chain over two groups is refused", mixed_groups_case),
    ]
    return result


if __name__ == "__main__":
    tpc.main(cases, "fusible_ops_parallel_check")
