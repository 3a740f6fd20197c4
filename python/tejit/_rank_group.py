"""What tejit's groups of ranks share (AmaxGroup, TensorParallelGroup): a
C handle made from an NCCL unique id, the caller's ncclComm_t or a Python
function, and the exception that function last raised."""
import ctypes

from . import _capi

ID_BYTES = 128  # TEJIT_AMAX_GROUP_ID_BYTES: an NCCL unique id


class RankGroup:
    """A tejit_*_group handle. Subclasses name their C functions: KIND (for
    messages) and the names of the create, from_nccl_comm, from_function
    and destroy functions."""

    KIND = "group"
    CREATE = FROM_NCCL_COMM = FROM_FUNCTION = DESTROY = None

    def __init__(self, handle, function=None):
        self._handle = ctypes.c_void_p(handle)
        self._function = function  # the ctypes callback must stay alive
        self.error = None  # the exception a function raised, until raised

    @staticmethod
    def unique_id():
        """A fresh NCCL unique id (bytes) for create(); every communicator
        needs its own."""
        buffer = (ctypes.c_ubyte * ID_BYTES)()
        _capi.check(_capi.lib().tejit_amax_group_unique_id(buffer))
        return bytes(buffer)

    @classmethod
    def create(cls, unique_id, ranks, rank, device):
        """Joins the NCCL communicator of `ranks` ranks named by unique_id as
        `rank`, on CUDA device `device` (blocks until every rank has)."""
        unique_id = bytes(unique_id)
        if len(unique_id) != ID_BYTES:
            raise ValueError(f"{cls.KIND} id is {ID_BYTES} bytes, got "
                             f"{len(unique_id)}")
        handle = ctypes.c_void_p()
        _capi.check(getattr(_capi.lib(), cls.CREATE)(
            (ctypes.c_ubyte * ID_BYTES).from_buffer_copy(unique_id),
            int(ranks), int(rank), int(device), ctypes.byref(handle)))
        return cls(handle.value)

    @classmethod
    def from_nccl_comm(cls, comm_address):
        """Over the caller's ncclComm_t, which must outlive the group and the
        programs using it."""
        handle = ctypes.c_void_p()
        _capi.check(getattr(_capi.lib(), cls.FROM_NCCL_COMM)(
            ctypes.c_void_p(int(comm_address)), ctypes.byref(handle)))
        return cls(handle.value)

    @classmethod
    def _from_callback(cls, make_callback):
        """A group over the ctypes callback make_callback(group) returns; an
        exception the callback catches goes to group.error."""
        group = cls(None)
        group._function = make_callback(group)
        handle = ctypes.c_void_p()
        _capi.check(getattr(_capi.lib(), cls.FROM_FUNCTION)(
            group._function, None, ctypes.byref(handle)))
        group._handle = handle
        return group

    def _failed(self, error):
        """Keeps what the function raised for raise_pending; returns the
        C status the callback returns (1: failed)."""
        self.error = error
        return 1

    @property
    def handle(self):
        if not self._handle.value:
            raise ValueError(f"the {self.KIND} is closed")
        return self._handle

    def raise_pending(self):
        """Raises (and forgets) the exception the function last raised."""
        error, self.error = self.error, None
        if error is not None:
            raise error

    def close(self):
        """Releases this handle (programs using the group keep it)."""
        if getattr(self, "_handle", None) is not None and self._handle.value:
            getattr(_capi.lib(), self.DESTROY)(self._handle)
            self._handle.value = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass
