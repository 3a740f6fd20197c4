"""Context parallelism of tejit.pytorch's attention modules (TE's cp_group
with cp_comm_type all_gather, docs/context-parallel.md), on 2 (or more)
GPUs:

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
scales its own tokens: FP8 tolerances). DotProductAttention has no GEMM
(the recipe would apply only with fp8_dpa, which context parallelism
refuses): bf16 only. Cases: DotProductAttention with GQA (8 heads, 2
groups), MultiheadAttention with GQA and rotary embeddings, and a
TransformerLayer shaped like the seed layer but smaller (hidden 512, FFN
2048, 8 heads, seq 512, batch 2, no dropout), each causal and no_mask,
sbhd and bshd; a Llama-like TransformerLayer (RMSNorm, swiglu, GQA,
rotary); set_context_parallel_group after construction, with a pickled
copy (which drops its group) refusing to run until it gets one; and a
refusal (a padding mask). --full adds the TransformerLayer at hidden 4096,
FFN 16384, 32 heads, seq 8192, batch 1 (causal, sbhd, every precision).

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


def build_pair(make, seed):
    """(cp=1 module, context-parallel module with the same parameters:
    tensor_parallel_check's build_pair with cp_group=WORLD, every
    parameter whole). `make(**cp_arguments)` builds a module."""
    full, parallel = tpc.build_pair(make, lambda name: "rep", seed,
                                    arguments={"cp_group": dist.group.WORLD})
    if parallel.cp_size != tpc.WORLD:
        raise AssertionError(f"cp_size {parallel.cp_size}, expected "
                             f"{tpc.WORLD}")
    return full, parallel


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
        scale = None
        if name.endswith("key_bias"):
            # Zero in exact arithmetic (tensor_parallel_check says why).
            scale = want_grads[name[:-len("key_bias")] + "value_bias"]
        report.compare(f"{label}grad of {name} (summed over the ranks)",
                       sum_over_ranks(got), want_grads[name], scale=scale)


def cp_case(make, shapes, mode, seed, dims, out_shape, out_dim, call=None):
    """One step of a module on whole inputs of `shapes` (each split along
    its `dims` for the context-parallel module) and an output of
    `out_shape` (split along `out_dim`); under DelayedScaling after
    warm-up steps, as tensor_parallel_check's module_case."""
    report = tpc.Report(mode)
    full, parallel = build_pair(make, seed)
    inputs = [tpc.same_randn(shape, seed + 1 + index)
              for index, shape in enumerate(shapes)]
    dy = tpc.same_randn(out_shape, seed + 50)
    if mode == "delayed":
        for step in range(tpc.DELAYED_WARMUP_STEPS):
            warm = [tpc.same_randn(shape, seed + 100 + 10 * step + index)
                    for index, shape in enumerate(shapes)]
            tpc.step(full, warm, dy, mode, call)
            tpc.step(parallel, [mine(x, d) for x, d in zip(warm, dims)],
                     mine(dy, out_dim), mode, call)
    compare_cp_step(report, full, parallel, inputs, dy, dims, out_dim,
                    call=call)
    report.check()
    return report.summary()


def lead(layout, seq, batch):
    return (seq, batch) if layout == "sbhd" else (batch, seq)


# --- cases ------------------------------------------------------------------

def dot_product_attention_case(seed, layout, mask, heads=8, groups=2, d=64,
                               seq=256, batch=2):
    """GQA attention without parameters: q [.., heads, d], k/v [..,
    groups, d], each this rank's chunks."""
    def make(**cp):
        return te.DotProductAttention(heads, d, num_gqa_groups=groups,
                                      attention_dropout=0.0,
                                      qkv_format=layout, attn_mask_type=mask,
                                      **cp)
    shape = lead(layout, seq, batch)
    dim = seq_dim(layout)
    return cp_case(make, [(*shape, heads, d), (*shape, groups, d),
                          (*shape, groups, d)], "bf16", seed,
                   [dim] * 3, (*shape, heads * d), dim)


def rotary_call(kv_channels, seq):
    """`call` running a module with the whole sequence's rotary table."""
    freqs = te.attention.RotaryPositionEmbedding(kv_channels)(seq)

    def call(module, hidden_states):
        return module(hidden_states, rotary_pos_emb=freqs)
    return call


def mha_case(mode, seed, layout, mask, hidden=256, heads=8, groups=4,
             seq=256, batch=2):
    def make(**cp):
        return te.MultiheadAttention(
            hidden, heads, num_gqa_groups=groups, attention_dropout=0.0,
            input_layernorm=True, attn_mask_type=mask, qkv_format=layout,
            params_dtype=BF16, **cp)
    shape = (*lead(layout, seq, batch), hidden)
    return cp_case(make, [shape], mode, seed, [seq_dim(layout)], shape,
                   seq_dim(layout), call=rotary_call(hidden // heads, seq))


def transformer_maker(layout, mask, hidden, ffn, heads, groups, **options):
    def make(**cp):
        return te.TransformerLayer(
            **tpc.transformer_kwargs(hidden, ffn, heads, groups),
            self_attn_mask_type=mask, attn_input_format=layout, **options,
            **cp)
    return make


def transformer_case(mode, seed, layout="sbhd", mask="causal", hidden=512,
                     ffn=2048, heads=8, groups=8, seq=512, batch=2,
                     rotary=False, **options):
    make = transformer_maker(layout, mask, hidden, ffn, heads, groups,
                             **options)
    shape = (*lead(layout, seq, batch), hidden)
    call = rotary_call(hidden // heads, seq) if rotary else None
    return cp_case(make, [shape], mode, seed, [seq_dim(layout)], shape,
                   seq_dim(layout), call=call)


def set_group_case(seed, seq=256, batch=2, hidden=256):
    """set_context_parallel_group after construction: a pickled copy of a
    context-parallel layer keeps cp_size but drops its group, refuses to
    run (naming set_context_parallel_group) and runs once it gets one."""
    base = transformer_maker("sbhd", "causal", hidden, 4 * hidden, 8, 4)

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
                                            "all_gather")
        if restored.self_attention.core_attention.cp_group is not \
                dist.group.WORLD:
            raise AssertionError("set_context_parallel_group did not reach "
                                 "the submodules")
        return restored
    shape = (seq, batch, hidden)
    return cp_case(make, [shape], "bf16", seed, [0], shape, 0)


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


def cases(full_size, seed):
    result = []
    for layout in LAYOUTS:
        for mask in MASKS:
            result.append((
                f"CP DotProductAttention GQA 8/2 heads, d 64, s 256 {layout} "
                f"{mask} [bf16]",
                lambda layout=layout, mask=mask:
                dot_product_attention_case(seed, layout, mask)))
    for mode in MODES:
        for layout in LAYOUTS:
            for mask in MASKS:
                result += [
                    (f"CP MultiheadAttention GQA 8/4 heads, rotary, s 256 "
                     f"{layout} {mask} [{mode}]",
                     lambda mode=mode, layout=layout, mask=mask:
                     mha_case(mode, seed, layout, mask)),
                    (f"CP TransformerLayer 512/2048/8 heads, s 512 b 2 "
                     f"{layout} {mask} [{mode}]",
                     lambda mode=mode, layout=layout, mask=mask:
                     transformer_case(mode, seed, layout, mask)),
                ]
    for mode in ("bf16", "current"):
        result.append((
            f"CP TransformerLayer Llama-like (RMSNorm, swiglu, GQA 8/2, "
            f"rotary, no bias) [{mode}]",
            lambda mode=mode: transformer_case(
                mode, seed, groups=2, rotary=True, normalization="RMSNorm",
                activation="swiglu", bias=False)))
    result += [
        ("CP TransformerLayer: set_context_parallel_group, and a copy "
         "without a group refuses [bf16]", lambda: set_group_case(seed)),
        ("CP refuses a padding mask", refusal_case),
    ]
    if full_size:
        for mode in MODES:
            result.append((
                f"CP TransformerLayer 4096/16384/32 heads, s 8192 b 1 sbhd "
                f"causal [{mode}]",
                lambda mode=mode: transformer_case(
                    mode, seed, hidden=4096, ffn=16384, heads=32, groups=32,
                    seq=8192, batch=1)))
    return result


if __name__ == "__main__":
    tpc.main(cases, "context_parallel_check",
             "also the TransformerLayer at hidden 4096, FFN 16384, 32 heads, "
             "seq 8192, batch 1")
