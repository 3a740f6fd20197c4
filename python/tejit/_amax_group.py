"""Amax reduction groups: the ranks whose DelayedScaling amaxes a program
reduces (MAX) before each scale update, over NCCL or a function of the
caller's (tejit.h, "Amax reduction across ranks")."""
import ctypes

from . import _capi

ID_BYTES = 128  # TEJIT_AMAX_GROUP_ID_BYTES

# int (*)(void *user_data, void *amaxes, size_t count, void *stream)
REDUCE_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_void_p)


class AmaxGroup:
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

    def __init__(self, handle, function=None):
        self._handle = ctypes.c_void_p(handle)
        self._function = function  # the ctypes callback must stay alive
        self.error = None  # the exception a function raised, until raised

    @staticmethod
    def unique_id():
        """A fresh NCCL unique id (bytes) for create()."""
        buffer = (ctypes.c_ubyte * ID_BYTES)()
        _capi.check(_capi.lib().tejit_amax_group_unique_id(buffer))
        return bytes(buffer)

    @classmethod
    def create(cls, unique_id, ranks, rank, device):
        """Joins the NCCL communicator of `ranks` ranks named by unique_id as
        `rank`, on CUDA device `device`."""
        unique_id = bytes(unique_id)
        if len(unique_id) != ID_BYTES:
            raise ValueError(f"an amax group id is {ID_BYTES} bytes, got "
                             f"{len(unique_id)}")
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_amax_group_create(
            (ctypes.c_ubyte * ID_BYTES).from_buffer_copy(unique_id),
            int(ranks), int(rank), int(device), ctypes.byref(handle)))
        return cls(handle.value)

    @classmethod
    def from_nccl_comm(cls, comm_address):
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_amax_group_from_nccl_comm(
            ctypes.c_void_p(int(comm_address)), ctypes.byref(handle)))
        return cls(handle.value)

    @classmethod
    def from_function(cls, function):
        """`function(amaxes, count, stream)`: addresses as ints (stream None
        for the legacy default stream). An exception it raises fails the
        program call, which raises it again (Program._check)."""
        group = cls(None)

        def call(_user_data, amaxes, count, stream):
            try:
                function(amaxes or 0, int(count), stream)
                return 0
            except BaseException as error:  # noqa: BLE001 - re-raised later
                group.error = error
                return 1

        group._function = REDUCE_FUNCTION(call)
        handle = ctypes.c_void_p()
        _capi.check(_capi.lib().tejit_amax_group_from_function(
            group._function, None, ctypes.byref(handle)))
        group._handle = handle
        return group

    @property
    def handle(self):
        if not self._handle.value:
            raise ValueError("the amax group is closed")
        return self._handle

    def raise_pending(self):
        """Raises (and forgets) the exception the function last raised."""
        error, self.error = self.error, None
        if error is not None:
            raise error

    def close(self):
        """Releases this handle (programs using the group keep it)."""
        if getattr(self, "_handle", None) is not None and self._handle.value:
            _capi.lib().tejit_amax_group_destroy(self._handle)
            self._handle.value = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass
