"""Torch tensors over device memory tejit owns (FP8 amaxes, dropout stream
state), without a copy, through the CUDA array interface."""
import torch

_TYPESTR = {torch.float32: "<f4", torch.int64: "<i8"}


class _CudaArray:
    def __init__(self, address, count, typestr):
        self.__cuda_array_interface__ = {
            "shape": (count,), "typestr": typestr, "data": (address, False),
            "strides": None, "version": 3}


def device_view(address, count, dtype, device):
    """A 1-D `dtype` tensor of `count` elements at device `address` on CUDA
    device `device` (an index), sharing the memory."""
    return torch.as_tensor(_CudaArray(address, count, _TYPESTR[dtype]),
                           device=torch.device("cuda", device))
