"""Torch tensors over device memory tejit owns (FP8 amaxes, dropout stream
state, the tensors a tensor-parallel all-reduce sums), without a copy,
through the CUDA array interface."""
import torch

# bfloat16 has no array-interface type string: its 16-bit words are read
# as int16 and viewed as bfloat16 (the same memory).
_TYPESTR = {torch.float32: ("<f4", None), torch.int64: ("<i8", None),
            torch.float16: ("<f2", None), torch.int16: ("<i2", None),
            torch.bfloat16: ("<i2", torch.bfloat16)}


class _CudaArray:
    def __init__(self, address, count, typestr):
        self.__cuda_array_interface__ = {
            "shape": (count,), "typestr": typestr, "data": (address, False),
            "strides": None, "version": 3}


def device_view(address, count, dtype, device):
    """A 1-D `dtype` tensor of `count` elements at device `address` on CUDA
    device `device` (an index), sharing the memory."""
    typestr, view = _TYPESTR[dtype]
    tensor = torch.as_tensor(_CudaArray(address, count, typestr),
                             device=torch.device("cuda", device))
    return tensor.view(view) if view is not None else tensor
