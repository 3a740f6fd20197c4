"""Amax reduction groups: the ranks whose DelayedScaling amaxes a program
reduces (MAX) before each scale update, over NCCL or a function of the
caller's (tejit.h, "Amax reduction across ranks")."""
import ctypes

from ._rank_group import RankGroup

# int (*)(void *user_data, void *amaxes, size_t count, void *stream)
REDUCE_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_void_p)


class AmaxGroup(RankGroup):
    """A group of ranks whose amaxes programs reduce; give it to
    Program.set_amax_group. Make one with:

      - AmaxGroup.unique_id() on one rank, the bytes sent to every rank, and
        AmaxGroup.create(id, ranks, rank, device) on each (an NCCL
        communicator of tejit's; blocks until every rank has joined);
      - AmaxGroup.from_nccl_comm(address): the caller's ncclComm_t, which
        must outlive the group and the programs using it;
      - AmaxGroup.from_function(fn): fn(amaxes_address, count, stream_handle)
        reduces `count` float32 values in place (MAX) on the stream.

    Programs keep a group alive while they use it; close() releases this
    handle."""

    KIND = "amax group"
    CREATE = "tejit_amax_group_create"
    FROM_NCCL_COMM = "tejit_amax_group_from_nccl_comm"
    FROM_FUNCTION = "tejit_amax_group_from_function"
    DESTROY = "tejit_amax_group_destroy"

    @classmethod
    def from_function(cls, function):
        """`function(amaxes, count, stream)`: addresses as ints (stream None
        for the legacy default stream). An exception it raises fails the
        program call, which raises it again (Program._check)."""

        def make_callback(group):
            def call(_user_data, amaxes, count, stream):
                try:
                    function(amaxes or 0, int(count), stream)
                    return 0
                except BaseException as error:  # noqa: BLE001 - re-raised
                    return group._failed(error)
            return REDUCE_FUNCTION(call)

        return cls._from_callback(make_callback)
