"""Device addresses of the tensors callers hand to a program: an int, an
object with data_ptr() (torch), the CUDA array interface (CuPy, Numba,
torch), or DLPack (JAX, CuPy, torch, ...). No framework is imported.

An object with a `_tejit_data()` method stands for the tensor it returns:
tejit.pytorch's Float8Tensor (an FP8 weight, nominally of a high-precision
dtype) gives its FP8 data, whose address and size the program takes."""
import ctypes

_DLPACK_CUDA = 2  # kDLCUDA
_DLPACK_CUDA_MANAGED = 13  # kDLCUDAManaged


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    """DLPack's DLTensor, the first member of the DLManagedTensor a
    "dltensor" capsule points to."""
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _row_major(shape, strides):
    """Whether element strides describe a dense row-major layout."""
    expected = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _count(shape):
    count = 1
    for size in shape:
        count *= size
    return count


def _from_cuda_array_interface(interface, what):
    data, _read_only = interface["data"]
    shape = tuple(interface["shape"])
    itemsize = int(interface["typestr"][2:])
    strides = interface.get("strides")
    if strides is not None and not _row_major(
            shape, [s // itemsize for s in strides]):
        raise ValueError(f"{what}: the tensor is not contiguous "
                         "(row-major); make it contiguous first")
    return int(data), _count(shape) * itemsize


def _from_dlpack(tensor, what):
    capsule = tensor.__dlpack__()
    dl = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    if dl.device.device_type not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        raise ValueError(f"{what}: not a CUDA tensor (DLPack device type "
                         f"{dl.device.device_type}); tejit runs on the GPU")
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    if dl.strides and not _row_major(shape,
                                     [dl.strides[i] for i in range(dl.ndim)]):
        raise ValueError(f"{what}: the tensor is not contiguous (row-major); "
                         "make it contiguous first")
    # The capsule stays unconsumed: the producer keeps owning the memory,
    # and `tensor` (the caller's) keeps it alive.
    itemsize = dl.dtype.bits * dl.dtype.lanes // 8
    return int(dl.data or 0) + int(dl.byte_offset), _count(shape) * itemsize


def address(tensor, what="tensor"):
    """The device address of `tensor` (None stays None), and its size in
    bytes when the object describes one (else None)."""
    if tensor is None:
        return None, None
    if isinstance(tensor, int):
        return tensor, None
    stands_for = getattr(tensor, "_tejit_data", None)
    if stands_for is not None:
        tensor = stands_for()
    # torch first: its __cuda_array_interface__ refuses bf16.
    data_ptr = getattr(tensor, "data_ptr", None)
    if callable(data_ptr):
        nbytes = getattr(tensor, "nbytes", None)  # torch: numel * itemsize
        return int(data_ptr()), int(nbytes) if nbytes is not None else None
    interface = getattr(tensor, "__cuda_array_interface__", None)
    if interface is not None:
        return _from_cuda_array_interface(interface, what)
    if hasattr(tensor, "__dlpack__"):
        return _from_dlpack(tensor, what)
    return int(tensor), None
