"""Tensor-parallel groups: the ranks over which a program compiled with
tp_size > 1 sums its partial results (and, with sequence parallelism,
gathers and reduce-scatters its activations), over NCCL or functions of the
caller's (tejit.h, "Tensor parallelism"; docs/tensor-parallel.md). A
program's context-parallel group is one too (docs/context-parallel.md: the
all-gather and reduce-scatter, and cp_comm_type a2a's all-to-all)."""
import ctypes

from . import _capi
from ._rank_group import RankGroup

# int (*)(void *user_data, void *data, size_t count, int dtype, void *stream)
ALL_REDUCE_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_int, ctypes.c_void_p)
# int (*)(void *user_data, const void *input, void *output, size_t count,
#         int dtype, void *stream): tejit_tp_all_gather_fn,
# tejit_tp_reduce_scatter_fn and tejit_tp_all_to_all_fn, `count` per rank.
GATHER_SCATTER_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                                           ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_void_p)

# The dtypes a tensor-parallel step is given (tejit_dtype), by torch's names.
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
      - TensorParallelGroup.from_function(all_reduce, all_gather=None,
        reduce_scatter=None, all_to_all=None): functions of the caller's
        (see there).

    Programs keep a group alive while they use it; close() releases this
    handle."""

    KIND = "tensor-parallel group"
    CREATE = "tejit_tp_group_create"
    FROM_NCCL_COMM = "tejit_tp_group_from_nccl_comm"
    FROM_FUNCTION = "tejit_tp_group_from_function"
    DESTROY = "tejit_tp_group_destroy"
    # The C function that gives a function group its all-to-all (a library
    # built before context parallelism's a2a lacks it).
    SET_ALL_TO_ALL = "tejit_tp_group_set_all_to_all"

    @classmethod
    def takes_all_to_all(cls):
        """Whether the loaded library gives function groups an all-to-all
        (tejit_tp_group_set_all_to_all): from_function takes all_to_all
        only then. False when no library loads (nothing would run)."""
        try:
            return _capi.has(cls.SET_ALL_TO_ALL)
        except _capi.LibraryNotFoundError:
            return False

    @classmethod
    def from_function(cls, all_reduce, all_gather=None, reduce_scatter=None,
                      all_to_all=None):
        """A group over the caller's functions, each enqueuing its
        collective over the ranks on `stream` (an int, None for the legacy
        default stream); addresses are ints, `dtype` a name of DTYPE_NAMES
        ("bfloat16", "float16" or "float32"), `count` elements per rank:

          - all_reduce(address, count, dtype, stream) sums the `count`
            elements at `address` in place;
          - all_gather(in_address, out_address, count, dtype, stream) writes
            every rank's `count` elements at in_address to out_address,
            rank r's at element r * count;
          - reduce_scatter(in_address, out_address, count, dtype, stream)
            sums the ranks * count elements at in_address over the ranks
            and writes this rank's chunk of `count` to out_address;
          - all_to_all(in_address, out_address, count, dtype, stream):
            both hold ranks * count elements (never overlapping); block j
            of out_address (elements [j * count, (j + 1) * count)) becomes
            block r of rank j's in_address, r being this rank (torch's
            all_to_all_single).

        Programs with sequence parallelism gather and scatter, and so do
        context-parallel ones (cp_comm_type all_gather); context-parallel
        ones with cp_comm_type a2a run the all-to-all. Any function may be
        None; a program with steps that need a missing one fails its
        calls, naming it. An exception a function raises fails the program
        call, which raises it again (Program._check). A library without
        tejit_tp_group_set_all_to_all (takes_all_to_all()) takes no
        all_to_all: NotImplementedError naming that function."""
        if all_to_all is not None and not cls.takes_all_to_all():
            raise NotImplementedError(
                f"TensorParallelGroup.from_function(all_to_all=...): this "
                f"library ({getattr(_capi.lib(), '_name', 'libtejit')}) "
                f"has no {cls.SET_ALL_TO_ALL} (it was built before context "
                f"parallelism's a2a); rebuild it, or leave all_to_all None")
        group = cls(None)
        # The ctypes callbacks stay alive with the group; `_function` is
        # the all-reduce's, as for a group of one function.
        group._function = _all_reduce_callback(group, all_reduce)
        group._callbacks = (
            group._function, _gather_scatter_callback(group, all_gather),
            _gather_scatter_callback(group, reduce_scatter))
        # The all-to-all's, kept apart (the C API takes it separately).
        group._all_to_all = _gather_scatter_callback(group, all_to_all)
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_tp_group_from_functions(
            *group._callbacks, None, ctypes.byref(handle)))
        group._handle = handle
        if group._all_to_all is not None:
            # A group the library refuses it is released.
            status = getattr(_capi.lib(), cls.SET_ALL_TO_ALL)(
                handle, group._all_to_all)
            if status != _capi.TEJIT_OK:
                message = _capi.last_error()
                group.close()
                raise _capi.TejitError(status, message)
        return group


def _dtype_name(dtype):
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        raise ValueError(f"tensor-parallel collective of dtype {dtype}")
    return name


def _all_reduce_callback(group, function):
    """The ctypes callback calling `function(address, count, dtype,
    stream)`, or None for None; what it raises goes to group.error."""
    if function is None:
        return None

    def call(_user_data, data, count, dtype, stream):
        try:
            function(data or 0, int(count), _dtype_name(dtype), stream)
            return 0
        except BaseException as error:  # noqa: BLE001 - re-raised
            return group._failed(error)
    return ALL_REDUCE_FUNCTION(call)


def _gather_scatter_callback(group, function):
    """The ctypes callback calling `function(in_address, out_address, count,
    dtype, stream)`, or None for None; what it raises goes to
    group.error."""
    if function is None:
        return None

    def call(_user_data, source, target, count, dtype, stream):
        try:
            function(source or 0, target or 0, int(count),
                     _dtype_name(dtype), stream)
            return 0
        except BaseException as error:  # noqa: BLE001 - re-raised
            return group._failed(error)
    return GATHER_SCATTER_FUNCTION(call)
