"""Tensor-parallel groups: the ranks over which a program compiled with
tp_size > 1 sums its partial results, over NCCL or a function of the
caller's (tejit.h, "Tensor parallelism"; docs/tensor-parallel.md)."""
import ctypes

from . import _capi
from ._rank_group import RankGroup

# int (*)(void *user_data, void *data, size_t count, int dtype, void *stream)
ALL_REDUCE_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_int, ctypes.c_void_p)

# The dtypes a tensor-parallel sum is given (tejit_dtype), by torch's names.
DTYPE_NAMES = {
    _capi.TEJIT_BF16: "bfloat16",
    _capi.TEJIT_F16: "float16",
    _capi.TEJIT_F32: "float32",
}


class TensorParallelGroup(RankGroup):
    """The tensor-parallel group of a program (TE's tp_group); give it to
    Program.set_tp_group. A program whose tp_size is above 1 fails its calls
    without one. Make one with:

      - TensorParallelGroup.unique_id() on one rank (an NCCL unique id, as
        AmaxGroup.unique_id: each communicator needs its own), the bytes
        sent to every rank, and TensorParallelGroup.create(id, ranks, rank,
        device) on each (an NCCL communicator of tejit's; blocks until every
        rank has joined);
      - TensorParallelGroup.from_nccl_comm(address): the caller's
        ncclComm_t, which must outlive the group and the programs using it;
      - TensorParallelGroup.from_function(fn): fn(address, count, dtype,
        stream) sums `count` elements of `dtype` ("bfloat16", "float16" or
        "float32") at device address `address` in place over the ranks, on
        the stream.

    Programs keep a group alive while they use it; close() releases this
    handle."""

    KIND = "tensor-parallel group"
    CREATE = "tejit_tp_group_create"
    FROM_NCCL_COMM = "tejit_tp_group_from_nccl_comm"
    FROM_FUNCTION = "tejit_tp_group_from_function"
    DESTROY = "tejit_tp_group_destroy"

    @classmethod
    def from_function(cls, function):
        """`function(address, count, dtype, stream)`: addresses as ints
        (stream None for the legacy default stream), dtype a name of
        DTYPE_NAMES. An exception it raises fails the program call, which
        raises it again (Program._check)."""

        def make_callback(group):
            def call(_user_data, data, count, dtype, stream):
                try:
                    name = DTYPE_NAMES.get(dtype)
                    if name is None:
                        raise ValueError(
                            f"tensor-parallel sum of dtype {dtype}")
                    function(data or 0, int(count), name, stream)
                    return 0
                except BaseException as error:  # noqa: BLE001 - re-raised
                    return group._failed(error)
            return ALL_REDUCE_FUNCTION(call)

        return cls._from_callback(make_callback)
