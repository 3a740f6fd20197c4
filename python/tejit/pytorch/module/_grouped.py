"""What GroupedLinear (module/grouped_linear.py) decides without PyTorch:
the checks of its constructor arguments and of `m_splits`, the token
count its programs are compiled for, its layer spec, and Fp8Padding's
split sizes (docs/grouped-linear.md).

No torch and no relative imports: tests/python loads this file by path on
machines without PyTorch (test_grouped_linear_args.py).
"""
import operator

OWNER = "GroupedLinear"

# A compiled program serves every token count up to a multiple of this:
# the module appends zero rows (padding past sum(m_splits), which the
# program leaves out of every result) and cuts the output back.
TOKEN_ALIGNMENT = 64

# Under an FP8 recipe every split must be a multiple of this (the wgrad
# GEMMs read FP8 copies whose segment g starts at token o_g: cuBLASLt needs
# 16-byte aligned operands), as in Transformer Engine, whose Fp8Padding
# pads the splits to it.
FP8_SPLIT_ALIGNMENT = 16

# Arguments tejit's GroupedLinear takes only at their defaults, with what
# each would need.
_UNSUPPORTED = {
    "ub_overlap_rs": (False, "no userbuffers communication overlap"),
    "ub_overlap_ag": (False, "no userbuffers communication overlap"),
    "save_original_input": (
        False, "the backward keeps the FP8 copies of the input"),
}


def _as_int(owner, name, value, minimum):
    """`value` as an int >= minimum (bools refused), else ValueError."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got "
                         f"{value!r}") from None
    if number < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got "
                         f"{number}")
    return number


def check_sizes(num_gemms, in_features, out_features, owner=OWNER):
    """(num_gemms, in_features, out_features) as positive ints."""
    return (_as_int(owner, "num_gemms", num_gemms, 1),
            _as_int(owner, "in_features", in_features, 1),
            _as_int(owner, "out_features", out_features, 1))


def check_unsupported(owner=OWNER, **arguments):
    """NotImplementedError naming the first of `arguments` (names of
    _UNSUPPORTED) that is not at its default."""
    for name, value in arguments.items():
        default, why = _UNSUPPORTED[name]
        if bool(value) != default:
            raise NotImplementedError(
                f"{owner}({name}={value!r}) is not supported by tejit yet "
                f"({why}); leave it at {default!r}")


def check_tensor_parallel(tp_size, parallel_mode, bias=False, owner=OWNER):
    """Tensor parallelism of the experts, as Transformer Engine's
    GroupedLinear does it (docs/grouped-linear.md): tp_size and
    parallel_mode ("column" or "row") only set each rank's weight shapes;
    the layer communicates nothing (the MoE token dispatcher does, as
    Megatron-LM's does around TE's), so sequence_parallel changes nothing
    either and is not checked. parallel_mode must be None, "column" or "row" (ValueError);
    with tp_size > 1 a bias is refused (ValueError naming bias=True), as
    TE refuses it: added on every rank, a row-parallel one would be summed
    tp_size times by the dispatcher."""
    if parallel_mode not in (None, "column", "row"):
        raise ValueError(f"{owner}: parallel_mode must be None, 'column' or "
                         f"'row', got {parallel_mode!r}")
    if tp_size > 1 and bias:
        raise ValueError(
            f"{owner}(tp_size={tp_size}, bias=True): GroupedLinear takes no "
            f"bias with tensor parallelism (Transformer Engine's rule: the "
            f"layer communicates nothing, the MoE dispatcher sums over the "
            f"ranks); pass bias=False")


def local_features(tp_size, parallel_mode, in_features, out_features,
                   owner=OWNER):
    """One rank's (in_features, out_features): out_features / tp_size
    for "column", in_features / tp_size for "row" (ValueError naming the
    size tp_size does not divide), both whole otherwise."""
    if tp_size > 1 and parallel_mode == "column":
        if out_features % tp_size:
            raise ValueError(f"{owner}: out_features ({out_features}) must "
                             f"be divisible by tp_size ({tp_size})")
        return in_features, out_features // tp_size
    if tp_size > 1 and parallel_mode == "row":
        if in_features % tp_size:
            raise ValueError(f"{owner}: in_features ({in_features}) must "
                             f"be divisible by tp_size ({tp_size})")
        return in_features // tp_size, out_features
    return in_features, out_features


def check_recipe(recipe, owner=OWNER):
    """The recipes the grouped GEMMs run: DelayedScaling,
    Float8CurrentScaling and Float8BlockScaling with 1-D blocks for the
    token segments (x and grad; weights 1-D or 2-D). Anything else is
    refused before anything compiles. `recipe` is a tejit.common.recipe
    object or None."""
    if recipe is None:
        return
    block = getattr(recipe, "float8_block_scaling", None)
    if block is None or not block():
        return
    for field in ("x_block_scaling_dim", "grad_block_scaling_dim"):
        dim = getattr(recipe, field)
        if dim != 1:
            raise NotImplementedError(
                f"{owner} under Float8BlockScaling({field}={dim}) is not "
                f"supported by tejit: the token segments of each GEMM are "
                f"cast in 1-D blocks; use {field}=1 (TE's default)")


def split_list(m_splits, num_gemms, owner=OWNER):
    """`m_splits` (a sequence: the tokens of each GEMM, in order) as a list
    of `num_gemms` ints >= 0; ValueError naming m_splits otherwise."""
    if isinstance(m_splits, (str, bytes)):
        raise ValueError(f"{owner}: m_splits must be a list of "
                         f"{num_gemms} ints, got {m_splits!r}")
    try:
        values = list(m_splits)
    except TypeError:
        raise ValueError(f"{owner}: m_splits must be a list of {num_gemms} "
                         f"ints (or a 1-D integer tensor), got "
                         f"{type(m_splits).__name__}") from None
    if len(values) != num_gemms:
        raise ValueError(f"{owner}: m_splits has {len(values)} entries, the "
                         f"module has num_gemms={num_gemms}: give one token "
                         f"count per GEMM")
    # Token counts: ints >= 0.
    return [_as_int(owner, f"m_splits[{index}]", value, 0)
            for index, value in enumerate(values)]


def checked_splits(m_splits, num_gemms, tokens, fp8, owner=OWNER):
    """`m_splits` (a sequence of G ints: the tokens of each GEMM, in
    order) checked against the input's `tokens`: one per GEMM, each >= 0,
    summing to `tokens`, and with `fp8` (an FP8 recipe) each a multiple of
    16. Returns them as a list of ints; ValueError naming m_splits
    otherwise."""
    splits = split_list(m_splits, num_gemms, owner)
    if sum(splits) != tokens:
        raise ValueError(f"{owner}: m_splits sums to {sum(splits)}, but the "
                         f"input has {tokens} tokens (rows after flattening "
                         f"its leading dims): the splits must cover them "
                         f"exactly")
    if fp8:
        odd = [(i, m) for i, m in enumerate(splits)
               if m % FP8_SPLIT_ALIGNMENT]
        if odd:
            index, split = odd[0]
            raise ValueError(
                f"{owner}: under an FP8 recipe every m_splits entry must be "
                f"a multiple of {FP8_SPLIT_ALIGNMENT}, but m_splits[{index}] "
                f"is {split}: pad each expert's tokens with "
                f"Fp8Padding(num_gemms) before the layer and remove them "
                f"with Fp8Unpadding(num_gemms) after it, as in Transformer "
                f"Engine")
    return splits


def padded_tokens(tokens):
    """The token count a call on `tokens` rows is compiled for: rounded up
    to a multiple of TOKEN_ALIGNMENT (at least one multiple), so that
    calls whose counts differ by routing share a program."""
    blocks = max(1, -(-int(tokens) // TOKEN_ALIGNMENT))
    return blocks * TOKEN_ALIGNMENT


# fuse_wgrad_accumulation's main_grad dtypes as the spec names them
# (float32 is the spec's default, left out as module/base.py leaves it).
MAIN_GRAD_DTYPES = ("fp32", "bf16", "fp16")


def layer_spec(num_gemms, in_features, out_features, bias,
               fuse_wgrad_accumulation=False, main_grad_dtype="fp32"):
    """The spec's layer (docs/spec-format.md, `type: GroupedLinear`). `fuse_wgrad_accumulation` (a training program's: the backward
    then takes `main_grad.layers.0.weight` [G, out, in] of
    `main_grad_dtype`, one of MAIN_GRAD_DTYPES, and adds the weights'
    gradients to it) adds the keys module/base.py adds to every module's
    layer for it. A tensor-parallel module's sizes are its rank's (the
    layer communicates nothing, as TE's; the spec's own tp_size /
    parallel_mode keys, which sum as Linear's do, are for te-compile)."""
    layer = {"type": "GroupedLinear", "num_gemms": int(num_gemms),
             "in_features": int(in_features),
             "out_features": int(out_features), "bias": bool(bias)}
    if main_grad_dtype not in MAIN_GRAD_DTYPES:
        raise ValueError(f"{OWNER}: main_grad_dtype must be one of "
                         f"{', '.join(MAIN_GRAD_DTYPES)}, got "
                         f"{main_grad_dtype!r}")
    if fuse_wgrad_accumulation:
        layer["fuse_wgrad_accumulation"] = True
        if main_grad_dtype != "fp32":
            layer["main_grad_dtype"] = main_grad_dtype
    elif main_grad_dtype != "fp32":
        raise ValueError(f"{OWNER}: main_grad_dtype={main_grad_dtype!r} "
                         f"needs fuse_wgrad_accumulation")
    return layer


def alignment(align_size, owner="Fp8Padding"):
    """Fp8Padding's `align_size`: an int >= 1, FP8_SPLIT_ALIGNMENT for
    None (TE's default for the per-tensor FP8 recipes)."""
    if align_size is None:
        return FP8_SPLIT_ALIGNMENT
    return _as_int(owner, "align_size", align_size, 1)


def aligned_splits(m_splits, align_size=FP8_SPLIT_ALIGNMENT):
    """Fp8Padding's split sizes: each rounded up to a multiple of
    `align_size` (an int >= 1)."""
    align_size = alignment(align_size)
    return [-(-int(m) // align_size) * align_size for m in m_splits]
