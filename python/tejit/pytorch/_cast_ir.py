"""The te IR of the per-tensor FP8 casts (FP8 weights, float8_tensor.py,
and the quantizers of tensor/float8_tensor.py) and of the weights'
DelayedScaling update, without PyTorch: tests/python compiles it on
machines without a GPU; _weight_casts.py runs it.

A cast is one generated kernel that reads the high-precision matrix once
and writes its FP8 data and, when asked, the transpose (the layer
programs' cast_transpose kernel), with the amax of what it cast. Modes:
- "delayed": arguments `weight`, `scale`; results data, [transpose], amax.
- "current": argument `weight`; an amax pass and te.compute_scale first;
  results data, [transpose], scale, scale_inv, amax.
- "from_amax": arguments `weight`, `amax` (an amax the caller reduced or
  clamped); te.compute_scale from it; results data, [transpose], scale,
  scale_inv.
`amax_ir` is the amax pass alone (te.amax), for "from_amax".

`block_cast_ir` is Float8BlockScaling's cast (tensor/
float8_blockwise_tensor.py's Float8BlockQuantizer): te.block_quantize of
the matrix (rowwise) and of its transpose (columnwise), both in one
kernel that reads the input once; `block_scale_shape` is where their
scale_inv go (dialects/BlockScaleLayout.h, which is TE's GEMM-ready
layout)."""
from tejit._ir_text import function as _function
from tejit._ir_text import tensor_type


FP8_ELEMENTS = ("f8E4M3FN", "f8E5M2")
SOURCE_ELEMENTS = ("bf16", "f16", "f32")
MODES = ("delayed", "current", "from_amax")
SLOT = "tensor<1xf32>"


def kernel_transposes(rows, cols):
    """Whether the cast kernel can write the transpose of a [rows, cols]
    matrix (codegen/PointwiseKernels.cpp: the tiled transpose needs rows %
    8 == 0 and a last dim % 4 == 0); callers transpose the FP8 bytes
    themselves otherwise."""
    return rows % 8 == 0 and cols % 4 == 0 and rows > 0 and cols > 0


def _check(shape, element, fp8):
    if len(shape) != 2 or any(d <= 0 for d in shape):
        raise ValueError(f"a cast takes a non-empty matrix, got shape "
                         f"{tuple(shape)}")
    if element not in SOURCE_ELEMENTS:
        raise ValueError(f"a cast reads {', '.join(SOURCE_ELEMENTS)}, not "
                         f"{element}")
    if fp8 not in FP8_ELEMENTS:
        raise ValueError(f"a cast writes {' or '.join(FP8_ELEMENTS)}, not "
                         f"{fp8}")


def cast_ir(shape, element, transpose, mode, power_2_scale=False,
            fp8="f8E4M3FN"):
    """The te IR of one cast of a [rows, cols] `element` matrix to `fp8`
    (the module docstring's modes; `power_2_scale` for the scale
    computations)."""
    _check(shape, element, fp8)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got "
                         f"{mode!r}")
    weight = tensor_type(shape, element)
    data = tensor_type(shape, fp8)
    arguments = [("%weight", weight, "weight")]
    body = []
    options = f"fp8_type = {fp8}" + (", power_2_scale" if power_2_scale
                                      else "")
    if mode == "delayed":
        arguments.append(("%scale", SLOT, "scale"))
    else:
        if mode == "current":
            body.append(f"%amax_now = te.amax %weight : {weight} -> {SLOT}")
        else:
            arguments.append(("%amax_now", SLOT, "amax"))
        body.append(f"%scale, %scale_inv = te.compute_scale %amax_now "
                    f"{{{options}}} : {SLOT} -> {SLOT}, {SLOT}")
    body.append(f"%data, %amax = te.quantize %weight, %scale : {weight}, "
                f"{SLOT} -> {data}, {SLOT}")
    results = [("%data", data, "data")]
    if transpose:
        transposed = tensor_type(tuple(reversed(shape)), fp8)
        body.append(f"%transpose = te.transpose %data : {data} -> "
                    f"{transposed}")
        results.append(("%transpose", transposed, "transpose"))
    if mode == "delayed":
        results.append(("%amax", SLOT, "amax"))
    else:
        results += [("%scale", SLOT, "scale"),
                    ("%scale_inv", SLOT, "scale_inv")]
        if mode == "current":
            results.append(("%amax_now", SLOT, "amax"))
    return _function("fp8_weight_cast", arguments, body, results)


def amax_ir(shape, element):
    """The te IR of max |weight| of a [rows, cols] `element` matrix."""
    _check(shape, element, FP8_ELEMENTS[0])
    weight = tensor_type(shape, element)
    return _function("fp8_amax", [("%weight", weight, "weight")],
                     [f"%amax = te.amax %weight : {weight} -> {SLOT}"],
                     [("%amax", SLOT, "amax")])


def update_ir(length, margin, most_recent, count=1):
    """The te IR of `count` weights' DelayedScaling update (one kernel for
    all): arguments `amax_history` [length, count] (row 0: the amaxes
    since the last update), `scale` [count] and `amax` (that row 0);
    results the new history, scales and scale_invs."""
    history = tensor_type((length, count), "f32")
    slots = tensor_type((count,), "f32")
    algo = "most_recent" if most_recent else "max"
    recipe = (f"#te.delayed_scaling<margin = {margin}, amax_history_len = "
              f"{length}, amax_compute_algo = {algo}, reduce_amax = false>")
    return (
        f'func.func @fp8_weight_update(%history: {history} {{te.name = '
        f'"amax_history"}}, %scale: {slots} {{te.name = "scale"}}, %amax: '
        f'{slots} {{te.name = "amax"}}) -> ({history} {{te.name = '
        f'"new_amax_history"}}, {slots} {{te.name = "new_scale"}}, {slots} '
        f'{{te.name = "new_scale_inv"}}) {{\n'
        f"  %h, %s, %si = te.delayed_scaling_update %history, %scale, %amax "
        f"{{fp8_type = f8E4M3FN, recipe = {recipe}}} : ({history}, {slots}, "
        f"{slots}) -> ({history}, {slots}, {slots})\n"
        f"  return %h, %s, %si : {history}, {slots}, {slots}\n}}\n")


BLOCK = 128
# The block cast kernel's grid has one row of CTAs per 128 input rows, and
# CUDA grids at most 65535 rows (codegen/BlockScalingKernels.cpp).
MAX_BLOCK_ROWS = 65535 * BLOCK


def block_scale_shape(rows, cols, block_dim):
    """The scale_inv shape of te.block_quantize's FP8 [rows, cols] matrix
    (dialects/BlockScaleLayout.h): 1-D blocks [ceil(cols/128),
    pad4(rows)], 2-D [ceil(rows/128), pad4(ceil(cols/128))]."""
    def pad4(n):
        return (n + 3) // 4 * 4

    def blocks(n):
        return (n + BLOCK - 1) // BLOCK

    if block_dim == 1:
        return blocks(cols), pad4(rows)
    return blocks(rows), pad4(blocks(cols))


def block_cast_ir(shape, element, block_dim, rowwise, columnwise,
                  power_2_scale, fp8="f8E4M3FN"):
    """The te IR of Float8BlockScaling's cast of a [rows, cols] `element`
    matrix in `block_dim`-D blocks (1 or 2): argument `input`; results
    `rowwise_data` [rows, cols] and `rowwise_scale_inv` with `rowwise`,
    then `columnwise_data` [cols, rows] (the transpose, cast from the
    high-precision values) and `columnwise_scale_inv` with `columnwise`."""
    _check(shape, element, fp8)
    if shape[0] > MAX_BLOCK_ROWS:
        raise ValueError(
            f"a block cast takes at most {MAX_BLOCK_ROWS} rows (65535 tiles "
            f"of 128; rows = the product of the leading dims), got "
            f"{shape[0]}")
    if block_dim not in (1, 2):
        raise ValueError(f"block_dim must be 1 or 2, got {block_dim!r}")
    if not (rowwise or columnwise):
        raise ValueError("a block cast writes rowwise or columnwise data "
                         "(or both)")
    source = tensor_type(shape, element)
    body, results = [], []
    for name, transpose in (("rowwise", False), ("columnwise", True)):
        if not (rowwise if name == "rowwise" else columnwise):
            continue
        cast = tuple(reversed(shape)) if transpose else tuple(shape)
        data = tensor_type(cast, fp8)
        scale = tensor_type(block_scale_shape(*cast, block_dim), "f32")
        options = [f"block_dim = {block_dim} : i64"]
        options += ["transpose"] if transpose else []
        options += ["power_2_scale"] if power_2_scale else []
        body.append(f"%{name}, %{name}_scale_inv = te.block_quantize %input "
                    f"{{{', '.join(options)}}} : {source} -> {data}, "
                    f"{scale}")
        results += [(f"%{name}", data, f"{name}_data"),
                    (f"%{name}_scale_inv", scale, f"{name}_scale_inv")]
    return _function("fp8_block_cast", [("%input", source, "input")], body,
                     results)
