"""Transformer Engine's data type enum (`transformer_engine_torch.DType`,
which TE's quantizers take as `fp8_dtype` and report as `dtype`), without
PyTorch: tests/python checks it on machines without it.

`DType` has TE's member names and values (those of NVTEDType). The
quantizers (tensor/float8_tensor.py) take a DType member or the matching
torch dtype (torch.float8_e4m3fn, torch.float8_e5m2); `fp8_dtype(value)`
names the one they hold. Torch dtypes are recognized by name, so that
this file needs no torch."""
import enum


class DType(enum.IntEnum):
    """TE's DType: kFloat8E4M3 (max 448) for forward tensors, kFloat8E5M2
    (max 57344) for gradients under HYBRID."""
    kByte = 0
    kInt16 = 1
    kInt32 = 2
    kInt64 = 3
    kFloat32 = 4
    kFloat16 = 5
    kBFloat16 = 6
    kFloat8E4M3 = 7
    kFloat8E5M2 = 8
    kFloat8E8M0 = 9
    kFloat4E2M1 = 10


# The FP8 formats the quantizers write: the torch dtype's name, the te IR
# element type, the largest finite value (shared/FP8.md).
FP8_FORMATS = {
    DType.kFloat8E4M3: ("float8_e4m3fn", "f8E4M3FN", 448.0),
    DType.kFloat8E5M2: ("float8_e5m2", "f8E5M2", 57344.0),
}

# Torch dtype names of DType members (TE's TE_DType, by name).
TORCH_NAMES = {
    "uint8": DType.kByte, "int16": DType.kInt16, "int32": DType.kInt32,
    "int64": DType.kInt64, "float32": DType.kFloat32,
    "float16": DType.kFloat16, "bfloat16": DType.kBFloat16,
    "float8_e4m3fn": DType.kFloat8E4M3, "float8_e5m2": DType.kFloat8E5M2,
}


def _torch_name(value):
    """"float8_e4m3fn" for torch.float8_e4m3fn (str(dtype) is
    "torch.<name>"); None for anything else."""
    text = str(value)
    if type(value).__name__ == "dtype" and text.startswith("torch."):
        return text[len("torch."):]
    return None


def to_dtype(value):
    """The DType of a DType member, its int value or a torch dtype."""
    if isinstance(value, DType):
        return value
    name = _torch_name(value)
    if name is not None and name in TORCH_NAMES:
        return TORCH_NAMES[name]
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return DType(value)
        except ValueError:
            pass
    raise TypeError(f"not a TE DType or torch dtype of one: {value!r}")


def fp8_dtype(value):
    """The FP8 DType named by `value` (DType.kFloat8E4M3 / kFloat8E5M2,
    or torch.float8_e4m3fn / torch.float8_e5m2); a clear error for
    anything else."""
    try:
        dtype = to_dtype(value)
    except TypeError:
        dtype = None
    if dtype not in FP8_FORMATS:
        raise TypeError(
            f"fp8_dtype must be DType.kFloat8E4M3 or DType.kFloat8E5M2 (or "
            f"torch.float8_e4m3fn / torch.float8_e5m2), got {value!r}")
    return dtype


def fp8_max(dtype):
    """The largest finite value of FP8 DType `dtype`."""
    return FP8_FORMATS[fp8_dtype(dtype)][2]


def ir_element(dtype):
    """The te IR element type of FP8 DType `dtype` ("f8E4M3FN")."""
    return FP8_FORMATS[fp8_dtype(dtype)][1]


def torch_name(dtype):
    """The torch dtype's name of FP8 DType `dtype` ("float8_e4m3fn")."""
    return FP8_FORMATS[fp8_dtype(dtype)][0]
