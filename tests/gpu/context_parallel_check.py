"""Context parallelism of tejit.pytorch's attention modules (TE's cp_group
with cp_comm_type all_gather and a2a, docs/context-parallel.md), on 2 (or
more) GPUs:

    torchrun --nproc-per-node 2 tests/gpu/context_parallel_check.py
        [--full] [--filter SUBSTRING] [--tol-scale X]

Built on tensor_parallel_check.py (imported: its steps, reports,
tolerances, precisions and runner). Every rank builds the same cp=1 module
(the same seed on every rank, biases and norm weights perturbed) and the
same module with cp_group=WORLD, whose parameters are copies of the cp=1
module's (context parallelism splits no parameter). Both run forward and
backward on the same data, the cp=1 module on the whole sequence, the
context-parallel one on this rank's load-balanced part of it
(tejit.pytorch.distributed.context_parallel_split: chunks r and 2 cp - 1 -
r of 2 cp along dim 0 for sbhd, dim 1 for bshd), inputs and output
gradient alike; the rotary table is the whole sequence's on every rank
(TE's semantics). Compared (tensor_parallel_check's errors and TE's
tolerances there):
  * the output: this rank's chunks against the same chunks of the cp=1
    output, and the whole output gathered over the ranks
    (context_parallel_gather) against it;
  * every input gradient: this rank's chunks against the cp=1 one's;
  * every parameter gradient, all-reduced (summed, in float32) over the CP
    group first (as Megatron-LM's gradient reduction over the CP and data-
    parallel ranks does), against the cp=1 gradient.
Precisions: bf16; DelayedScaling HYBRID on the GEMMs under
fp8_autocast(fp8_group=WORLD) (the group holds the CP ranks, so the amax
reduction gives every rank the whole sequence's amaxes and the cp=1
module's scales; after 2 warm-up steps); Float8CurrentScaling (each rank
scales its own tokens: FP8 tolerances); with a2a also fp8_dpa
(tensor_parallel_check's: DelayedScaling(fp8_dpa=True) under
fp8_autocast(fp8_group=WORLD), FP8 attention on top of the FP8 GEMMs,
after 2 warm-up steps; its tolerances are FP8 attention's, and the
context-parallel module's FP8 scales are compared with the cp=1
module's and must be the same bit for bit on every rank). Without
fp8_dpa DotProductAttention has no GEMM for a recipe to apply to: bf16
only. Cases: DotProductAttention with GQA (8 heads, 2
groups), MultiheadAttention with GQA and rotary embeddings, and a
TransformerLayer shaped like the seed layer but smaller (hidden 512, FFN
2048, 8 heads, seq 512, batch 2, no dropout), each causal and no_mask,
sbhd and bshd; a Llama-like TransformerLayer (RMSNorm, swiglu, GQA,
rotary); set_context_parallel_group after construction, with a pickled
copy (which drops its group) refusing to run until it gets one; and a
refusal (a padding mask). cp_comm_type a2a (all-to-alls trade heads for
tokens; heads and groups per rank divisible by cp_size: the GQA cases
take max(2, ranks) groups): the same modules, layouts and masks at cp 2
against their cp 1 twins as above (every precision for
MultiheadAttention and TransformerLayer), the Llama-like layer and
set_context_parallel_group with a2a; and each module against its
all_gather twin (the same parameters and local inputs, bf16): this rank's
output, input gradients and parameter gradients (not summed: each rank's
part is the same in both). What a2a runs and the all-gather refuses
(docs/context-parallel.md, "a2a runs more than all_gather"), at cp 2
against the cp 1 twins, each module in sbhd causal and bshd no_mask:
FP8 attention (fp8_dpa; DotProductAttention GQA 8/2 heads of 128,
MultiheadAttention hidden 1024 with rotary, TransformerLayer 1024/2048;
heads of 128: Hopper's FP8 attention backward takes no other) and
sliding windows (bf16; (128, 0) causal, (128, -1) no_mask: a right
bound other than 0 or -1 is refused, cuDNN's fused attention computes
none; the a2a modules' shapes above). --full adds the TransformerLayer
at hidden 4096, FFN 16384, 32 heads, seq 8192, batch 1 (causal, sbhd,
every precision; all_gather and a2a). TE's default cp_comm_type p2p runs
as a2a where the groups divide by cp_size (a TransformerLayer under
fp8_dpa, a MultiheadAttention under DelayedScaling) and as the all-gather
with one group (MQA: a DotProductAttention, a TransformerLayer under
Float8CurrentScaling), checked to run as which and against the cp=1 twins.

Prints one PASS/FAIL line per case on rank 0 and a pass count; exits
non-zero if any rank failed a case. With one process every case runs at
cp_size 1: a check of the script only. TEJIT_TEST_SEED=N repeats a run.
"""
import pickle
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
LAYOUTS = ("sbhd", "bshd")
MASKS = ("causal", "no_mask")
COMM_TYPES = ("all_gather", "a2a")
# The precisions of DelayedScaling, whose compared step follows warm-up
# steps: "fp8_dpa" (tensor_parallel_check's: FP8 attention too) runs with
# a2a only.
DELAYED_MODES = ("delayed", "fp8_dpa")
# A sliding window per mask (a right bound other than 0 or -1 is refused:
# cuDNN's fused attention computes none).
WINDOWS = {"causal": (128, 0), "no_mask": (128, -1)}


# --- the ranks' parts -------------------------------------------------------

def seq_dim(layout):
    return 0 if layout == "sbhd" else 1


def mine(tensor, dim):
    """This rank's load-balanced part of a whole-sequence tensor."""
    return te.distributed.context_parallel_split(tensor, tpc.WORLD, tpc.RANK,
                                                 dim)


def sum_over_ranks(tensor):
    """`tensor` summed over the CP group in float32 (the parameter
    gradients' reduction), in a new tensor."""
    total = tensor.detach().float().clone()
    if tpc.WORLD > 1:
        dist.all_reduce(total)
    return total


def a2a_groups(groups):
    """A GQA case's key/value groups under a2a: each rank takes
    groups / cp_size of them, so at least as many as ranks (8 heads:
    2 groups at cp 2, 4 at cp 4)."""
    return max(groups, tpc.WORLD)


def cp_arguments(comm_type):
    """The context-parallel module's arguments."""
    return {"cp_group": dist.group.WORLD, "cp_comm_type": comm_type}


def check_cp_module(module, comm_type):
    """The module's cp_size and cp_comm_type are the group's and
    `comm_type`; TE's default "p2p" runs as a2a where the module's
    key/value groups (heads are a multiple of them) divide by cp_size,
    else as the all-gather."""
    if module.cp_size != tpc.WORLD or module.cp_comm_type != comm_type:
        raise AssertionError(f"cp_size {module.cp_size}, cp_comm_type "
                             f"{module.cp_comm_type!r}, expected "
                             f"{tpc.WORLD}, {comm_type!r}")
    if comm_type == "p2p":
        runs = module._context_parallel()[2]
        expected = ("a2a" if module.num_gqa_groups % tpc.WORLD == 0
                    else "all_gather")
        if runs != expected:
            raise AssertionError(f"p2p runs as {runs!r}, expected "
                                 f"{expected!r} ({module.num_gqa_groups} "
                                 f"groups at cp {tpc.WORLD})")


def build_pair(make, seed, comm_type="all_gather"):
    """(cp=1 module, context-parallel module with the same parameters:
    tensor_parallel_check's build_pair with cp_group=WORLD and
    `comm_type`, every parameter whole). `make(**cp_arguments)` builds a
    module."""
    full, parallel = tpc.build_pair(make, lambda name: "rep", seed,
                                    arguments=cp_arguments(comm_type))
    check_cp_module(parallel, comm_type)
    return full, parallel


def build_twins(make, seed):
    """(all_gather module, a2a module), both context-parallel with the same
    parameters (those of build_pair's cp=1 module)."""
    full, gathered = build_pair(make, seed, "all_gather")
    exchanged = make(**cp_arguments("a2a"))
    check_cp_module(exchanged, "a2a")
    copy_parameters(full, exchanged)
    return gathered, exchanged


def copy_parameters(source, target):
    """`target`'s parameters set to `source`'s (the same names)."""
    want = dict(source.named_parameters())
    got = dict(target.named_parameters())
    if set(want) != set(got):
        raise AssertionError(f"parameter names differ: "
                             f"{sorted(set(want) ^ set(got))}")
    with torch.no_grad():
        for name, parameter in got.items():
            parameter.copy_(want[name])


# --- steps ------------------------------------------------------------------

def compare_cp_step(report, full, parallel, inputs, dy, dims, out_dim,
                    label="", call=None):
    """One step of both modules: the cp=1 one on the whole sequence, the
    context-parallel one on this rank's part of each input (along its
    `dims`) and of the output gradient (along `out_dim`)."""
    mode = report.mode
    want_out, want_dx, want_grads = tpc.step(full, inputs, dy, mode, call)
    out, dx, grads = tpc.step(parallel,
                              [mine(x, d) for x, d in zip(inputs, dims)],
                              mine(dy, out_dim), mode, call)
    report.compare(f"{label}output (this rank's chunks)", out,
                   mine(want_out, out_dim), gradient=False)
    report.compare(f"{label}output (gathered)",
                   te.distributed.context_parallel_gather(
                       out, dist.group.WORLD, out_dim),
                   want_out, gradient=False)
    for index, (got, want, dim) in enumerate(zip(dx, want_dx, dims)):
        report.compare(f"{label}input grad {index} (this rank's chunks)",
                       got, mine(want, dim))
    for name, got in grads.items():
        report.compare(f"{label}grad of {name} (summed over the ranks)",
                       sum_over_ranks(got), want_grads[name],
                       scale=tpc.gradient_scale(name, want_grads))


def cp_case(make, shapes, mode, seed, dims, out_shape, out_dim, call=None,
            comm_type="all_gather"):
    """One step of a module on whole inputs of `shapes` (each split along
    its `dims` for the context-parallel module, of `comm_type`) and an
    output of `out_shape` (split along `out_dim`); under DelayedScaling
    after warm-up steps, as tensor_parallel_check's module_case."""
    report = tpc.Report(mode)
    full, parallel = build_pair(make, seed, comm_type)
    inputs = [tpc.same_randn(shape, seed + 1 + index)
              for index, shape in enumerate(shapes)]
    dy = tpc.same_randn(out_shape, seed + 50)
    if mode in DELAYED_MODES:
        for step in range(tpc.DELAYED_WARMUP_STEPS):
            warm = [tpc.same_randn(shape, seed + 100 + 10 * step + index)
                    for index, shape in enumerate(shapes)]
            tpc.step(full, warm, dy, mode, call)
            tpc.step(parallel, [mine(x, d) for x, d in zip(warm, dims)],
                     mine(dy, out_dim), mode, call)
    compare_cp_step(report, full, parallel, inputs, dy, dims, out_dim,
                    call=call)
    detail = ""
    if mode == "fp8_dpa":
        detail = compare_scales(report, full, parallel)
    report.check()
    return report.summary() + detail


def compare_scales(report, full, parallel):
    """Under fp8_dpa: the context-parallel module's FP8 scales (forward
    and backward, the attention's slots with the GEMMs') against the cp=1
    module's (the same slots: the all-to-alls move bf16 and add none), and
    the same bit for bit on every rank (the amax reduction over fp8_group,
    which holds the CP ranks: each rank's amaxes cover only its heads of
    the sequence, or its tokens)."""
    want = {k: v for k, v in full.state_dict().items()
            if k.startswith("fp8_meta.") and k.endswith(".scale")}
    got = {k: v for k, v in parallel.state_dict().items()
           if k.startswith("fp8_meta.") and k.endswith(".scale")}
    if not want or set(got) != set(want):
        report.failures.append(f"FP8 scales: cp=1 {sorted(want)}, "
                               f"context-parallel {sorted(got)}")
        return ""
    for name, scale in got.items():
        if tuple(scale.shape) != tuple(want[name].shape):
            report.failures.append(
                f"{name}: {tuple(scale.shape)} slots, the cp=1 module "
                f"{tuple(want[name].shape)}")
            continue
        report.compare(name, scale, want[name])
        report.same_on_ranks(name, scale.cuda())
    return f", {len(got)} scale tensors"


def twins_case(make, shapes, seed, dims, out_shape, out_dim, call=None):
    """a2a against all_gather: one bf16 step of both context-parallel
    modules (the same parameters) on this rank's part of the same whole
    inputs and output gradient; this rank's output, input gradients and
    parameter gradients compared directly (each rank's parameter gradient
    is the same partial sum under both)."""
    report = tpc.Report("bf16")
    gathered, exchanged = build_twins(make, seed)
    inputs = [mine(tpc.same_randn(shape, seed + 1 + index), dim)
              for index, (shape, dim) in enumerate(zip(shapes, dims))]
    dy = mine(tpc.same_randn(out_shape, seed + 50), out_dim)
    want_out, want_dx, want_grads = tpc.step(gathered, inputs, dy, "bf16",
                                             call)
    out, dx, grads = tpc.step(exchanged, inputs, dy, "bf16", call)
    report.compare("a2a output (this rank's chunks)", out, want_out,
                   gradient=False)
    for index, (got, want) in enumerate(zip(dx, want_dx)):
        report.compare(f"a2a input grad {index} (this rank's chunks)", got,
                       want)
    for name, got in grads.items():
        report.compare(f"a2a grad of {name} (this rank's part)", got,
                       want_grads[name],
                       scale=tpc.gradient_scale(name, want_grads))
    report.check()
    return report.summary()


def lead(layout, seq, batch):
    return (seq, batch) if layout == "sbhd" else (batch, seq)


# --- cases ------------------------------------------------------------------

def dot_product_attention_case(seed, layout, mask, heads=8, groups=2, d=64,
                               seq=256, batch=2, comm_type="all_gather",
                               twins=False, mode="bf16", window_size=None):
    """GQA attention without parameters: q [.., heads, d], k/v [..,
    groups, d], each this rank's chunks; `twins`: a2a against all_gather
    (twins_case) instead of against the cp=1 module. `mode` bf16 or
    fp8_dpa (the recipe applies only with FP8 attention: no GEMM here);
    `window_size`: a sliding window."""
    def make(**cp):
        return te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                      attention_dropout=0.0,
                                      qkv_format=layout, attn_mask_type=mask,
                                      window_size=window_size, **cp)
    shape = lead(layout, seq, batch)
    dim = seq_dim(layout)
    shapes = [(*shape, heads, d), (*shape, groups, d), (*shape, groups, d)]
    if twins:
        return twins_case(make, shapes, seed, [dim] * 3,
                          (*shape, heads * d), dim)
    return cp_case(make, shapes, mode, seed, [dim] * 3,
                   (*shape, heads * d), dim, comm_type=comm_type)


def rotary_call(kv_channels, seq):
    """`call` running a module with the whole sequence's rotary table."""
    freqs = te.attention.RotaryPositionEmbedding(kv_channels)(seq)

    def call(module, hidden_states):
        return module(hidden_states, rotary_pos_emb=freqs)
    return call


def mha_case(mode, seed, layout, mask, hidden=256, heads=8, groups=4,
             seq=256, batch=2, comm_type="all_gather", twins=False,
             window_size=None):
    def make(**cp):
        return te.MultiheadAttention(
            hidden, heads, num_gqa_groups=groups, attention_dropout=0.0,
            input_layernorm=True, attn_mask_type=mask, qkv_format=layout,
            window_size=window_size, params_dtype=BF16, **cp)
    shape = (*lead(layout, seq, batch), hidden)
    call = rotary_call(hidden // heads, seq)
    if twins:
        return twins_case(make, [shape], seed, [seq_dim(layout)], shape,
                          seq_dim(layout), call=call)
    return cp_case(make, [shape], mode, seed, [seq_dim(layout)], shape,
                   seq_dim(layout), call=call, comm_type=comm_type)


def transformer_maker(layout, mask, hidden, ffn, heads, groups, **options):
    def make(**cp):
        return te.TransformerLayer(
            **tpc.transformer_kwargs(hidden, ffn, heads, groups),
            self_attn_mask_type=mask, attn_input_format=layout, **options,
            **cp)
    return make


def transformer_case(mode, seed, layout="sbhd", mask="causal", hidden=512,
                     ffn=2048, heads=8, groups=8, seq=512, batch=2,
                     rotary=False, comm_type="all_gather", twins=False,
                     **options):
    make = transformer_maker(layout, mask, hidden, ffn, heads, groups,
                             **options)
    shape = (*lead(layout, seq, batch), hidden)
    call = rotary_call(hidden // heads, seq) if rotary else None
    if twins:
        return twins_case(make, [shape], seed, [seq_dim(layout)], shape,
                          seq_dim(layout), call=call)
    return cp_case(make, [shape], mode, seed, [seq_dim(layout)], shape,
                   seq_dim(layout), call=call, comm_type=comm_type)


def set_group_case(seed, seq=256, batch=2, hidden=256,
                   comm_type="all_gather"):
    """set_context_parallel_group after construction: a pickled copy of a
    context-parallel layer (of `comm_type`) keeps cp_size but drops its
    group, refuses to run (naming set_context_parallel_group) and runs
    once it gets one."""
    base = transformer_maker("sbhd", "causal", hidden, 4 * hidden, 8,
                             a2a_groups(4))

    def make(**cp):
        layer = base(**cp)
        if not cp or tpc.WORLD == 1:
            return layer
        restored = pickle.loads(pickle.dumps(layer))
        if restored.cp_group is not None or restored.cp_size != tpc.WORLD:
            raise AssertionError("a pickled copy kept its group, or lost "
                                 "its cp_size")
        tpc.refuses_without_group(
            restored, torch.zeros(seq // tpc.WORLD, batch, hidden,
                                  dtype=BF16, device="cuda"),
            "set_context_parallel_group")
        restored.set_context_parallel_group(dist.group.WORLD, None, None,
                                            comm_type)
        core = restored.self_attention.core_attention
        if core.cp_group is not dist.group.WORLD or \
                core.cp_comm_type != comm_type:
            raise AssertionError("set_context_parallel_group did not reach "
                                 "the submodules")
        return restored
    shape = (seq, batch, hidden)
    return cp_case(make, [shape], "bf16", seed, [0], shape, 0,
                   comm_type=comm_type)


def refusal_case():
    """A padding mask under context parallelism: NotImplementedError
    naming the mask type (no compile, no collective)."""
    layer = transformer_maker("sbhd", "padding", 256, 1024, 8, 8)(
        cp_group=dist.group.WORLD)
    if tpc.WORLD == 1:
        return "one rank: nothing to refuse"
    x = torch.zeros(64, 2, 256, dtype=BF16, device="cuda")
    mask = torch.zeros(2, 1, 1, 64 * tpc.WORLD, dtype=torch.bool,
                       device="cuda")
    try:
        layer(x, attention_mask=mask)
    except NotImplementedError as error:
        if "self_attn_mask_type='padding'" not in str(error):
            raise AssertionError(f"unclear refusal: {error}") from error
        return "refused: " + str(error)[:60] + "..."
    raise AssertionError("a padding mask ran under context parallelism")


def comm_cases(seed, comm_type):
    """The modules at cp_comm_type `comm_type` against their cp=1 twins;
    a2a's GQA cases take a2a_groups."""
    tag = "" if comm_type == "all_gather" else "a2a "
    gqa = (lambda groups: groups) if comm_type == "all_gather" else a2a_groups
    result = []
    for layout in LAYOUTS:
        for mask in MASKS:
            result.append((
                f"CP {tag}DotProductAttention GQA 8/{gqa(2)} heads, d 64, "
                f"s 256 {layout} {mask} [bf16]",
                lambda layout=layout, mask=mask:
                dot_product_attention_case(seed, layout, mask,
                                           groups=gqa(2),
                                           comm_type=comm_type)))
    for mode in MODES:
        for layout in LAYOUTS:
            for mask in MASKS:
                result += [
                    (f"CP {tag}MultiheadAttention GQA 8/{gqa(4)} heads, "
                     f"rotary, s 256 {layout} {mask} [{mode}]",
                     lambda mode=mode, layout=layout, mask=mask:
                     mha_case(mode, seed, layout, mask, groups=gqa(4),
                              comm_type=comm_type)),
                    (f"CP {tag}TransformerLayer 512/2048/8 heads, s 512 b 2 "
                     f"{layout} {mask} [{mode}]",
                     lambda mode=mode, layout=layout, mask=mask:
                     transformer_case(mode, seed, layout, mask,
                                      comm_type=comm_type)),
                ]
    modes = ("bf16", "current") if comm_type == "all_gather" else ("bf16",)
    for mode in modes:
        result.append((
            f"CP {tag}TransformerLayer Llama-like (RMSNorm, swiglu, GQA "
            f"8/{gqa(2)}, rotary, no bias) [{mode}]",
            lambda mode=mode: transformer_case(
                mode, seed, groups=gqa(2), rotary=True,
                normalization="RMSNorm", activation="swiglu", bias=False,
                comm_type=comm_type)))
    result.append((
        f"CP {tag}TransformerLayer: set_context_parallel_group, and a copy "
        f"without a group refuses [bf16]",
        lambda: set_group_case(seed, comm_type=comm_type)))
    return result


def twin_cases(seed):
    """a2a against all_gather (bf16): each module, layout and mask."""
    result = []
    for layout in LAYOUTS:
        for mask in MASKS:
            result += [
                (f"CP a2a vs all_gather DotProductAttention GQA "
                 f"8/{a2a_groups(2)} heads, d 64, s 256 {layout} {mask} "
                 f"[bf16]",
                 lambda layout=layout, mask=mask:
                 dot_product_attention_case(seed, layout, mask,
                                            groups=a2a_groups(2),
                                            twins=True)),
                (f"CP a2a vs all_gather MultiheadAttention GQA "
                 f"8/{a2a_groups(4)} heads, rotary, s 256 {layout} {mask} "
                 f"[bf16]",
                 lambda layout=layout, mask=mask:
                 mha_case("bf16", seed, layout, mask, groups=a2a_groups(4),
                          twins=True)),
                (f"CP a2a vs all_gather TransformerLayer 512/2048/8 heads "
                 f"GQA 8/{a2a_groups(2)}, rotary, s 512 b 2 {layout} {mask} "
                 f"[bf16]",
                 lambda layout=layout, mask=mask:
                 transformer_case("bf16", seed, layout, mask,
                                  groups=a2a_groups(2), rotary=True,
                                  twins=True)),
            ]
    return result


def a2a_only_cases(seed):
    """What a2a runs and the all-gather refuses, against the cp=1 twins:
    FP8 attention (each module under fp8_dpa, heads of 128 channels:
    Hopper's FP8 attention backward takes no other) and sliding windows
    (bf16); each in sbhd with a causal mask and in bshd without one."""
    result = []
    for layout, mask in (("sbhd", "causal"), ("bshd", "no_mask")):
        result += [
            (f"CP a2a fp8_dpa DotProductAttention GQA 8/{a2a_groups(2)} "
             f"heads, d 128, s 256 {layout} {mask} [fp8_dpa]",
             lambda layout=layout, mask=mask:
             dot_product_attention_case(seed, layout, mask,
                                        groups=a2a_groups(2), d=128,
                                        comm_type="a2a", mode="fp8_dpa")),
            (f"CP a2a fp8_dpa MultiheadAttention 1024, GQA "
             f"8/{a2a_groups(2)} heads of 128, rotary, s 256 {layout} "
             f"{mask} [fp8_dpa]",
             lambda layout=layout, mask=mask:
             mha_case("fp8_dpa", seed, layout, mask, hidden=1024,
                      groups=a2a_groups(2), comm_type="a2a")),
            (f"CP a2a fp8_dpa TransformerLayer 1024/2048/8 heads of 128, "
             f"GQA 8/{a2a_groups(2)}, s 512 b 2 {layout} {mask} [fp8_dpa]",
             lambda layout=layout, mask=mask:
             transformer_case("fp8_dpa", seed, layout, mask, hidden=1024,
                              ffn=2048, groups=a2a_groups(2),
                              comm_type="a2a")),
        ]
    for layout, mask in (("sbhd", "causal"), ("bshd", "no_mask")):
        window = WINDOWS[mask]
        result += [
            (f"CP a2a window {window} DotProductAttention GQA "
             f"8/{a2a_groups(2)} heads, d 64, s 256 {layout} {mask} [bf16]",
             lambda layout=layout, mask=mask, window=window:
             dot_product_attention_case(seed, layout, mask,
                                        groups=a2a_groups(2),
                                        comm_type="a2a",
                                        window_size=window)),
            (f"CP a2a window {window} MultiheadAttention GQA "
             f"8/{a2a_groups(4)} heads, rotary, s 256 {layout} {mask} "
             f"[bf16]",
             lambda layout=layout, mask=mask, window=window:
             mha_case("bf16", seed, layout, mask, groups=a2a_groups(4),
                      comm_type="a2a", window_size=window)),
            (f"CP a2a window {window} TransformerLayer 512/2048/8 heads, "
             f"s 512 b 2 {layout} {mask} [bf16]",
             lambda layout=layout, mask=mask, window=window:
             transformer_case("bf16", seed, layout, mask, comm_type="a2a",
                              window_size=window)),
        ]
    return result


def p2p_cases(seed):
    """TE's default cp_comm_type "p2p" against the cp=1 twins: as a2a where
    the groups divide by cp_size (so FP8 attention runs), as the
    all-gather with one key/value group (MQA)."""
    return [
        (f"CP p2p (a2a) TransformerLayer 1024/2048/8 heads of 128, GQA "
         f"8/{a2a_groups(2)}, s 512 b 2 sbhd causal [fp8_dpa]",
         lambda: transformer_case("fp8_dpa", seed, "sbhd", "causal",
                                  hidden=1024, ffn=2048,
                                  groups=a2a_groups(2), comm_type="p2p")),
        (f"CP p2p (a2a) MultiheadAttention GQA 8/{a2a_groups(4)} heads, "
         f"rotary, s 256 bshd causal [delayed]",
         lambda: mha_case("delayed", seed, "bshd", "causal",
                          groups=a2a_groups(4), comm_type="p2p")),
        ("CP p2p (all_gather) DotProductAttention MQA 8/1 heads, d 64, "
         "s 256 sbhd causal [bf16]",
         lambda: dot_product_attention_case(seed, "sbhd", "causal",
                                            groups=1, comm_type="p2p")),
        ("CP p2p (all_gather) TransformerLayer 512/2048/8 heads, MQA, s 512 "
         "b 2 bshd no_mask [current]",
         lambda: transformer_case("current", seed, "bshd", "no_mask",
                                  groups=1, comm_type="p2p")),
    ]


def cases(full_size, seed):
    result = []
    for comm_type in COMM_TYPES:
        result += comm_cases(seed, comm_type)
    result += twin_cases(seed)
    result += a2a_only_cases(seed)
    result += p2p_cases(seed)
    result.append(("CP refuses a padding mask", refusal_case))
    if full_size:
        for comm_type in COMM_TYPES:
            tag = "" if comm_type == "all_gather" else "a2a "
            for mode in MODES:
                result.append((
                    f"CP {tag}TransformerLayer 4096/16384/32 heads, s 8192 "
                    f"b 1 sbhd causal [{mode}]",
                    lambda mode=mode, comm_type=comm_type: transformer_case(
                        mode, seed, hidden=4096, ffn=16384, heads=32,
                        groups=32, seq=8192, batch=1, comm_type=comm_type)))
    return result


if __name__ == "__main__":
    tpc.main(cases, "context_parallel_check",
             "also the TransformerLayer at hidden 4096, FFN 16384, 32 heads, "
             "seq 8192, batch 1")
