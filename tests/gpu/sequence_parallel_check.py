"""Sequence parallelism of tejit.pytorch's modules (TE's
sequence_parallel=True, docs/tensor-parallel.md), on 2 (or more) GPUs:

    python3 -m torch.distributed.run --nproc_per_node=2 \
        tests/gpu/sequence_parallel_check.py [--full] [--filter SUBSTRING]
        [--tol-scale X]

Built on tensor_parallel_check.py (imported: its shards, steps, reports,
tolerances and runner). Every rank builds the same tp=1 module and the
same module with tp_group=WORLD and sequence_parallel=True, whose
parameters are this rank's shards of the tp=1 module's (as there). Both
run forward and backward on the same data, the sequence-parallel module
on this rank's part of it:
  * its input is chunk `rank` of the whole input along dim 0 ([s/tp, b, h]
    sbhd, [b/tp, s, h] bshd; a decoder's encoder output too), except a
    row-parallel Linear's, which is the whole of dim 0 and this rank's
    columns (its output is chunk `rank` of dim 0);
  * its output gradient is chunk `rank` of the whole one, along dim 0, or
    along the features for a column-parallel Linear / LayerNormLinear
    (whose output is the whole sequence, this rank's columns).
Compared (tensor_parallel_check's errors and tolerances):
  * the output and the input gradients, gathered over the ranks (rank
    order) into whole tensors, against the tp=1 module's;
  * every parameter gradient, a shard's against the same shard of the
    tp=1 gradient; the replicated parameters (norms, row-parallel biases)
    must carry TE's `sequence_parallel` attribute (True), their gradients
    are this rank's partial sums, all-reduced over the group first (as
    Megatron-LM does) and then compared, and must then be the same on
    every rank; no other parameter may carry it.
Precisions: bf16, DelayedScaling HYBRID under fp8_autocast(fp8_group=
WORLD) (after 2 warm-up steps; tejit gathers the bf16 tensor before the
FP8 cast, so the amaxes are the whole tensor's, as the tp=1 module's) and
Float8CurrentScaling. Cases: Linear column and row, LayerNormLinear,
LayerNormMLP gelu and swiglu, MultiheadAttention (GQA 8/4, split and fused
interleaved QKV), TransformerLayer sbhd, bshd (the batch split), decoder
(encoder output split too), with a padding mask (the mask is the whole
batch's and sequence's), 3 DelayedScaling steps with the scales compared;
the dropout streams of a sequence-parallel TransformerLayer seeded in the
RNG tracker's fork() (they differ by rank). --full adds LayerNormMLP and
TransformerLayer at hidden 4096, FFN 16384, 32 heads, seq 2048, batch 2.

Prints one PASS/FAIL line per case on rank 0 and a pass count; exits
non-zero if any rank failed a case. With one process every case runs at
tp_size 1 (sequence_parallel is then ignored, as in TE): a check of the
script only. TEJIT_TEST_SEED=N repeats a run.
"""
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tejit.pytorch as te  # noqa: E402
import tensor_parallel_check as tpc  # noqa: E402 - beside this script

BF16 = tpc.BF16
MODES = tpc.MODES


# --- the ranks' parts -------------------------------------------------------

def gather(tensor, dim):
    """The whole tensor of which each rank holds its chunk along `dim`, in
    rank order."""
    local = tensor.detach().contiguous()
    if tpc.WORLD == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(tpc.WORLD)]
    dist.all_gather(parts, local)
    return torch.cat(parts, dim)


def sum_over_ranks(tensor):
    """`tensor` summed over the ranks (Megatron-LM's all-reduce of the
    sequence-parallel parameters' gradients), in a new tensor."""
    total = tensor.detach().clone()
    if tpc.WORLD > 1:
        dist.all_reduce(total)
    return total


def sequence_parallel(make_module):
    """`make(**tp)` for build_pair: the tp=1 module without arguments, the
    sequence-parallel one with tp_group=WORLD, `extra` (parallel_mode or
    set_parallel_mode) and sequence_parallel=True."""
    def make(extra, **tp):
        if tp:
            tp.update(extra, sequence_parallel=True)
        return make_module(**tp)
    return make


# --- steps ------------------------------------------------------------------

def check_attribute(report, label, name, parameter, kind):
    """TE's `sequence_parallel` attribute: True on the replicated
    parameters (partial gradients) with more than one rank, False at
    tp_size 1 (TE sets the module's value), absent or False elsewhere.
    Returns whether the gradient is partial."""
    marked = bool(getattr(parameter, "sequence_parallel", False))
    partial = kind == "rep" and tpc.WORLD > 1
    if marked != partial:
        report.failures.append(
            f"{label}'{name}' ({kind}) has sequence_parallel="
            f"{getattr(parameter, 'sequence_parallel', None)!r}, expected "
            f"{partial}")
    return partial


def compare_sp_step(report, full, parallel, inputs, dy, kind_of,
                    input_splits, output_split, qkv=None, label="",
                    call=None):
    """One step of both modules on the same data: the sequence-parallel
    module gets chunk `rank` of each input along its `input_splits` dim and
    of the output gradient along `output_split`; its output and input
    gradients are gathered along the same dims and compared whole."""
    mode = report.mode
    want_out, want_dx, want_grads = tpc.step(full, inputs, dy, mode, call)
    local_inputs = [tpc.mine(x, dim) for x, dim in zip(inputs, input_splits)]
    out, dx, grads = tpc.step(parallel, local_inputs,
                              tpc.mine(dy, output_split), mode, call)
    report.compare(f"{label}output (gathered)", gather(out, output_split),
                   want_out, gradient=False)
    for index, (got, want, dim) in enumerate(zip(dx, want_dx,
                                                 input_splits)):
        report.compare(f"{label}input grad {index} (gathered)",
                       gather(got, dim), want)
    parameters = dict(parallel.named_parameters())
    for name, got in grads.items():
        kind = kind_of(name)
        partial = check_attribute(report, label, name, parameters[name],
                                  kind)
        if partial:
            got = sum_over_ranks(got)
        want = tpc.shard(want_grads[name], kind, qkv)
        scale = None
        if name.endswith("key_bias"):
            # Zero in exact arithmetic (tensor_parallel_check says why).
            scale = tpc.shard(
                want_grads[name[:-len("key_bias")] + "value_bias"], kind,
                qkv)
        what = f"{label}grad of {name}" + (" (summed over the ranks)"
                                           if partial else "")
        report.compare(what, got, want, scale=scale)
        if kind == "rep":
            report.same_on_ranks(what, got)


def sp_case(make, kind_of, shapes, mode, seed, input_splits=None,
            output_split=0, out_shape=None, qkv=None, call=None):
    """One step of a module on inputs of `shapes` (whole), its output of
    `out_shape` (default the first input's); under DelayedScaling after
    warm-up steps, as tensor_parallel_check's module_case."""
    report = tpc.Report(mode)
    full, parallel = tpc.build_pair(make, kind_of, seed, qkv)
    input_splits = input_splits or [0] * len(shapes)
    inputs = [tpc.same_randn(shape, seed + 1 + index)
              for index, shape in enumerate(shapes)]
    dy = tpc.same_randn(out_shape or shapes[0], seed + 50)
    if mode == "delayed":
        for step in range(tpc.DELAYED_WARMUP_STEPS):
            warm = [tpc.same_randn(shape, seed + 100 + 10 * step + index)
                    for index, shape in enumerate(shapes)]
            tpc.step(full, warm, dy, mode, call)
            tpc.step(parallel, [tpc.mine(x, dim) for x, dim in
                                zip(warm, input_splits)],
                     tpc.mine(dy, output_split), mode, call)
    compare_sp_step(report, full, parallel, inputs, dy, kind_of,
                    input_splits, output_split, qkv, call=call)
    report.check()
    return report.summary()


# --- cases ------------------------------------------------------------------

def linear_case(mode, parallel_mode, seed, seq=64, batch=2):
    make = sequence_parallel(lambda **tp: te.Linear(256, 512,
                                                    params_dtype=BF16, **tp))

    def build(**tp):
        return make({"parallel_mode": parallel_mode}, **tp)
    if parallel_mode == "column":
        # [s/tp, b, in] -> [s, b, out/tp].
        return sp_case(build, lambda name: "col", [(seq, batch, 256)], mode,
                       seed, input_splits=[0], output_split=-1,
                       out_shape=(seq, batch, 512))
    # [s, b, in/tp] -> [s/tp, b, out]; the bias added to the slice.
    return sp_case(build, tpc.row_linear_kind, [(seq, batch, 256)], mode,
                   seed, input_splits=[-1], output_split=0,
                   out_shape=(seq, batch, 512))


def layernorm_linear_case(mode, seed, seq=64, batch=2):
    make = sequence_parallel(lambda **tp: te.LayerNormLinear(
        256, 512, params_dtype=BF16, **tp))

    def build(**tp):
        return make({"parallel_mode": "column"}, **tp)
    return sp_case(build, tpc.block_kind, [(seq, batch, 256)], mode, seed,
                   input_splits=[0], output_split=-1,
                   out_shape=(seq, batch, 512))


def mlp_case(mode, activation, seed, hidden=256, ffn=1024, seq=64, batch=2):
    make = sequence_parallel(lambda **tp: te.LayerNormMLP(
        hidden, ffn, activation=activation, params_dtype=BF16, **tp))
    gated = activation.endswith("glu")
    return sp_case(lambda **tp: make({"set_parallel_mode": True}, **tp),
                   lambda name: tpc.block_kind(name, gated=gated),
                   [(seq, batch, hidden)], mode, seed)


def mha_case(mode, seed, fuse_qkv_params=False, seq=64, batch=2):
    hidden, heads, groups = 256, 8, 4
    d = hidden // heads
    make = sequence_parallel(lambda **tp: te.MultiheadAttention(
        hidden, heads, num_gqa_groups=groups, attention_dropout=0.0,
        input_layernorm=True, fuse_qkv_params=fuse_qkv_params,
        params_dtype=BF16, **tp))
    return sp_case(lambda **tp: make({"set_parallel_mode": True}, **tp),
                   tpc.block_kind, [(seq, batch, hidden)], mode, seed,
                   qkv=(heads, groups, d))


def transformer_maker(hidden, ffn, heads, groups, **kwargs):
    make = sequence_parallel(lambda **tp: te.TransformerLayer(
        **tpc.transformer_kwargs(hidden, ffn, heads, groups), **kwargs,
        **tp))
    return lambda **tp: make({"set_parallel_mode": True}, **tp)


def transformer_case(mode, seed, hidden=256, ffn=1024, heads=8, groups=4,
                     seq=64, batch=2, activation="gelu", layout="sbhd"):
    """sbhd splits the sequence; bshd ([b, s, h]) the batch, which must
    then be a multiple of the ranks."""
    make = transformer_maker(hidden, ffn, heads, groups,
                             activation=activation,
                             attn_input_format=layout)
    shape = (seq, batch, hidden) if layout == "sbhd" else (batch, seq,
                                                           hidden)
    gated = activation.endswith("glu")
    return sp_case(make, lambda name: tpc.block_kind(name, gated=gated),
                   [shape], mode, seed)


def decoder_case(mode, seed, hidden=256, ffn=1024, heads=8, groups=4,
                 seq=64, seq_kv=32, batch=2):
    """A decoder TransformerLayer: the encoder output is this rank's slice
    of its sequence too, gathered before the key/value projection."""
    make = transformer_maker(hidden, ffn, heads, groups,
                             layer_type="decoder")

    def call(module, hidden_states, encoder_output):
        return module(hidden_states, encoder_output=encoder_output)
    return sp_case(make, tpc.block_kind,
                   [(seq, batch, hidden), (seq_kv, batch, hidden)], mode,
                   seed, input_splits=[0, 0], call=call)


def padding_case(mode, seed, hidden=256, ffn=1024, heads=8, groups=4,
                 seq=64, batch=2):
    """A padding mask: the whole batch's and sequence's [b, 1, 1, s] on
    every rank, while each holds a slice of the sequence."""
    make = transformer_maker(hidden, ffn, heads, groups,
                             self_attn_mask_type="padding")
    mask = torch.zeros(batch, 1, 1, seq, dtype=torch.bool, device="cuda")
    mask[1:, ..., seq - seq // 4:] = True  # the later sequences end early

    def call(module, hidden_states):
        return module(hidden_states, attention_mask=mask)
    return sp_case(make, tpc.block_kind, [(seq, batch, hidden)], mode, seed,
                   call=call)


def scale_history_case(seed, steps=3, hidden=256, ffn=1024, heads=8,
                       groups=4, seq=64, batch=2):
    """DelayedScaling over several steps (new data each, growing): outputs
    and gradients keep matching the tp=1 layer's, and so do the scales
    (the amaxes of the gathered tensors are the whole tensors')."""
    report = tpc.Report("delayed")
    make = transformer_maker(hidden, ffn, heads, groups)
    full, parallel = tpc.build_pair(make, tpc.block_kind, seed)
    for index in range(steps):
        x = tpc.same_randn((seq, batch, hidden), seed + 10 * index + 1,
                           scale=1.0 + index)
        dy = tpc.same_randn((seq, batch, hidden), seed + 10 * index + 2)
        compare_sp_step(report, full, parallel, [x], dy, tpc.block_kind,
                        [0], 0, label=f"step {index + 1}: ")
    want = {k: v for k, v in full.state_dict().items() if "fp8_meta" in k}
    got = {k: v for k, v in parallel.state_dict().items() if "fp8_meta" in k}
    scales = [k for k in want if k.endswith(".scale") and k in got
              and tuple(got[k].shape) == tuple(want[k].shape)]
    if not scales:
        report.failures.append(f"no FP8 scales to compare (tp=1: "
                               f"{sorted(want)}, sp: {sorted(got)})")
    for name in scales:
        report.compare(f"{name} after {steps} steps", got[name], want[name])
        report.same_on_ranks(name, got[name].cuda())
    report.check()
    return report.summary() + f", {len(scales)} scale tensors"


def dropout_case(seed, hidden=256, ffn=1024, heads=8, seq=64, batch=2):
    """Hidden and attention dropout and drop path under sequence
    parallelism, with an RNG tracker seeded per rank (Megatron-LM's): each
    rank's tokens draw their own masks, the layer's dropout stream being
    seeded in the tracker's fork(), so the ranks' streams differ; the
    step runs and its results are finite."""
    report = tpc.Report("bf16")
    tracker = tpc.rank_tracker(seed + 1000 + tpc.RANK)
    torch.manual_seed(seed)  # the same default generator on every rank
    layer = te.TransformerLayer(
        hidden, ffn, heads, hidden_dropout=0.1, attention_dropout=0.1,
        drop_path_rate=0.1, params_dtype=BF16, tp_group=dist.group.WORLD,
        set_parallel_mode=True, sequence_parallel=True,
        get_rng_state_tracker=lambda: tracker)
    x = tpc.same_randn((seq, batch, hidden), seed + 1)
    dy = tpc.same_randn((seq, batch, hidden), seed + 2)
    out, (dx,), grads = tpc.step(layer, [tpc.mine(x, 0)], tpc.mine(dy, 0),
                                 "bf16")
    for what, tensor in [("output", out), ("input grad", dx),
                         *grads.items()]:
        if not torch.isfinite(tensor).all():
            report.failures.append(f"{what} is not finite")
    if tpc.WORLD > 1:
        streams = tpc.dropout_streams(layer)
        parts = [torch.empty_like(streams) for _ in range(tpc.WORLD)]
        dist.all_gather(parts, streams)
        if torch.equal(parts[0], parts[1]):
            report.failures.append(
                "TransformerLayer: the ranks' dropout streams are equal; "
                "expected seeds from the per-rank tracker under "
                "sequence parallelism")
    report.check()
    return "per-rank dropout seeds under sequence parallelism"


def cases(full_size, seed):
    result = []
    for mode in MODES:
        result += [
            (f"SP Linear column 256 -> 512 [{mode}]",
             lambda mode=mode: linear_case(mode, "column", seed)),
            (f"SP Linear row 256 -> 512 [{mode}]",
             lambda mode=mode: linear_case(mode, "row", seed)),
            (f"SP LayerNormLinear column 256 -> 512 [{mode}]",
             lambda mode=mode: layernorm_linear_case(mode, seed)),
            (f"SP LayerNormMLP gelu 256/1024 [{mode}]",
             lambda mode=mode: mlp_case(mode, "gelu", seed)),
            (f"SP LayerNormMLP swiglu 256/1024 [{mode}]",
             lambda mode=mode: mlp_case(mode, "swiglu", seed)),
            (f"SP MultiheadAttention GQA 8/4 heads, split QKV [{mode}]",
             lambda mode=mode: mha_case(mode, seed)),
            (f"SP MultiheadAttention GQA 8/4 heads, fused interleaved QKV "
             f"[{mode}]",
             lambda mode=mode: mha_case(mode, seed, fuse_qkv_params=True)),
            (f"SP TransformerLayer 256/1024/8 heads/4 groups sbhd [{mode}]",
             lambda mode=mode: transformer_case(mode, seed)),
        ]
    result += [
        ("SP TransformerLayer bshd (batch split) [bf16]",
         lambda: transformer_case("bf16", seed, layout="bshd",
                                  batch=2 * tpc.WORLD)),
        ("SP TransformerLayer bshd (batch split) [delayed]",
         lambda: transformer_case("delayed", seed, layout="bshd",
                                  batch=2 * tpc.WORLD)),
        ("SP TransformerLayer swiglu 256/1024 [bf16]",
         lambda: transformer_case("bf16", seed, activation="swiglu")),
        ("SP TransformerLayer decoder (encoder output split) [bf16]",
         lambda: decoder_case("bf16", seed)),
        ("SP TransformerLayer decoder (encoder output split) [delayed]",
         lambda: decoder_case("delayed", seed)),
        ("SP TransformerLayer padding mask [bf16]",
         lambda: padding_case("bf16", seed)),
        ("SP TransformerLayer, 3 DelayedScaling steps (scale history)",
         lambda: scale_history_case(seed)),
        ("SP dropout: per-rank dropout seeds [bf16]",
         lambda: dropout_case(seed)),
    ]
    if full_size:
        for mode in MODES:
            result += [
                (f"SP LayerNormMLP 4096/16384, s 2048 b 2 [{mode}]",
                 lambda mode=mode: mlp_case(mode, "gelu", seed, hidden=4096,
                                            ffn=16384, seq=2048, batch=2)),
                (f"SP TransformerLayer 4096/16384/32 heads, s 2048 b 2 "
                 f"[{mode}]",
                 lambda mode=mode: transformer_case(
                     mode, seed, hidden=4096, ffn=16384, heads=32,
                     groups=32, seq=2048, batch=2)),
            ]
    return result


if __name__ == "__main__":
    tpc.main(cases, "sequence_parallel_check",
             "also LayerNormMLP and TransformerLayer at hidden 4096, FFN "
             "16384, 32 heads, seq 2048, batch 2")
