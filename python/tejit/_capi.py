"""ctypes binding of the tejit C API (include/tejit/tejit.h).

This module mirrors the header one to one: the enums as integer constants,
the two structs as ctypes.Structure, and every function with its argtypes and
restype. It loads libtejit.so lazily (on the first call of `lib()`), so that
`import tejit` works on machines without the library, e.g. to read the docs.

Keep this file in step with tejit.h: ctypes cannot check the declarations
against the library, and a wrong argtype corrupts arguments silently.
"""
import ctypes
import os
from pathlib import Path

# --- enums (C enums are int-sized on every ABI we target) -------------------

TEJIT_OK = 0
TEJIT_ERROR_INVALID_ARGUMENT = 1
TEJIT_ERROR_COMPILE = 2
TEJIT_ERROR_NO_DEVICE = 3
TEJIT_ERROR_UNSUPPORTED_DEVICE = 4
TEJIT_ERROR_CUDA = 5
TEJIT_ERROR_CUBLAS = 6
TEJIT_ERROR_UNSUPPORTED = 7
TEJIT_ERROR_STATE = 8
TEJIT_ERROR_INTERNAL = 9

STATUS_NAMES = {
    TEJIT_OK: "TEJIT_OK",
    TEJIT_ERROR_INVALID_ARGUMENT: "TEJIT_ERROR_INVALID_ARGUMENT",
    TEJIT_ERROR_COMPILE: "TEJIT_ERROR_COMPILE",
    TEJIT_ERROR_NO_DEVICE: "TEJIT_ERROR_NO_DEVICE",
    TEJIT_ERROR_UNSUPPORTED_DEVICE: "TEJIT_ERROR_UNSUPPORTED_DEVICE",
    TEJIT_ERROR_CUDA: "TEJIT_ERROR_CUDA",
    TEJIT_ERROR_CUBLAS: "TEJIT_ERROR_CUBLAS",
    TEJIT_ERROR_UNSUPPORTED: "TEJIT_ERROR_UNSUPPORTED",
    TEJIT_ERROR_STATE: "TEJIT_ERROR_STATE",
    TEJIT_ERROR_INTERNAL: "TEJIT_ERROR_INTERNAL",
}

TEJIT_F32 = 0
TEJIT_F16 = 1
TEJIT_BF16 = 2
TEJIT_F8E4M3 = 3
TEJIT_F8E5M2 = 4
TEJIT_I64 = 5
TEJIT_I32 = 6
TEJIT_I8 = 7
TEJIT_BOOL = 8

# The short dtype names of the Python API (the spelling of te IR and specs).
DTYPE_NAMES = {
    TEJIT_F32: "f32",
    TEJIT_F16: "f16",
    TEJIT_BF16: "bf16",
    TEJIT_F8E4M3: "f8e4m3",
    TEJIT_F8E5M2: "f8e5m2",
    TEJIT_I64: "i64",
    TEJIT_I32: "i32",
    TEJIT_I8: "i8",
    TEJIT_BOOL: "bool",
}

TEJIT_INPUT = 0
TEJIT_OUTPUT = 1
TEJIT_GRAD_OUTPUT = 2
TEJIT_GRAD_INPUT = 3
TEJIT_META = 4
TEJIT_SAVED = 5
TEJIT_DEFERRED = 6

# --- structs -----------------------------------------------------------------


class CompileOptions(ctypes.Structure):
    """struct tejit_compile_options."""
    _fields_ = [
        ("training", ctypes.c_int),
        ("recipe", ctypes.c_char_p),
        ("device", ctypes.c_int),
    ]


class TensorInfoStruct(ctypes.Structure):
    """struct tejit_tensor_info. `name` points into the program: copy it
    before the program is destroyed."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("shape", ctypes.c_int64 * 8),
        ("bytes", ctypes.c_size_t),
        ("is_parameter", ctypes.c_int),
    ]


# --- errors ------------------------------------------------------------------


class TejitError(RuntimeError):
    """A tejit call failed. `status` is the tejit_status code, the message
    tejit_last_error() of the failing call."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, f"status {status}")
        super().__init__(f"{self.status_name}: {message}" if message
                         else self.status_name)


class LibraryNotFoundError(OSError):
    """libtejit.so could not be loaded from any of the places searched."""


# --- loading -----------------------------------------------------------------

LIBRARY_NAME = "libtejit.so"
_PACKAGE_DIR = Path(__file__).resolve().parent
# python/tejit/_capi.py -> <repo>/build/lib: the tree's build, for running
# from a checkout without installing.
_REPO_BUILD_LIB = _PACKAGE_DIR.parent.parent / "build" / "lib"

_lib = None


def _recorded_build_lib():
    """build/lib of the repository an installed package was built from
    (tejit/_build_info.py, written by python/build_backend), or None when
    running from a checkout."""
    try:
        from . import _build_info
    except ImportError:
        return None
    return Path(_build_info.REPO) / "build" / "lib"


def _candidates():
    """(description, path-or-name) pairs, in the order they are tried."""
    env = os.environ.get("TEJIT_LIBRARY")
    if env:
        # An explicit choice: trying anything else would hide its mistakes.
        return [("$TEJIT_LIBRARY", env)]
    candidates = [
        ("the package folder", str(_PACKAGE_DIR / LIBRARY_NAME)),
        ("the repository's build/lib", str(_REPO_BUILD_LIB / LIBRARY_NAME)),
    ]
    recorded = _recorded_build_lib()
    if recorded is not None and recorded != _REPO_BUILD_LIB:
        candidates.append(("the build/lib of the repository the package was "
                           "built from", str(recorded / LIBRARY_NAME)))
    candidates.append(("the dynamic loader's search path", LIBRARY_NAME))
    return candidates


def _load():
    tried = []
    for where, path in _candidates():
        is_file_path = os.sep in path
        if is_file_path and not os.path.exists(path):
            tried.append(f"  {where}: {path} (no such file)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as error:
            # An existing file that fails to load usually lacks a dependency
            # (libLLVM, libcudnn): say so rather than silently moving on.
            tried.append(f"  {where}: {path} ({error})")
    raise LibraryNotFoundError(
        "could not load the tejit library; tried:\n" + "\n".join(tried) +
        "\nBuild it (tools/scripts/build.sh), or set TEJIT_LIBRARY to the "
        "path of libtejit.so, and make sure its dependencies (libLLVM, CUDA, "
        "cuDNN) are on LD_LIBRARY_PATH.")


def _declare(lib):
    """Sets argtypes/restype of every function of tejit.h."""
    c_int, c_size_t, c_void_p, c_char_p = (ctypes.c_int, ctypes.c_size_t,
                                           ctypes.c_void_p, ctypes.c_char_p)
    P = ctypes.POINTER
    status = c_int  # tejit_status
    program = c_void_p  # tejit_program *
    signatures = {
        "tejit_last_error": (c_char_p, []),
        "tejit_version": (c_char_p, []),
        "tejit_device_info": (status, [c_int, P(c_int), P(c_int), c_char_p,
                                       c_size_t]),
        "tejit_compile": (status, [c_char_p, c_char_p, P(CompileOptions),
                                   P(c_void_p)]),
        "tejit_load_bundle": (status, [c_char_p, c_int, P(c_void_p)]),
        "tejit_program_destroy": (None, [program]),
        # char **text is declared as void ** so that the pointer survives
        # (a c_char_p result would be copied to bytes and leak the string).
        "tejit_compile_ir": (status, [c_char_p, c_char_p, P(CompileOptions),
                                      c_char_p, P(c_void_p)]),
        "tejit_free_string": (None, [c_void_p]),
        "tejit_program_plan": (status, [program, P(c_void_p)]),
        "tejit_num_tensors": (c_size_t, [program, c_int]),
        "tejit_tensor_info_get": (status, [program, c_int, c_size_t,
                                           P(TensorInfoStruct)]),
        "tejit_tensor_is_host": (c_int, [program, c_int, c_size_t]),
        "tejit_is_training": (c_int, [program]),
        "tejit_forward": (status, [program, c_void_p, P(c_void_p),
                                   P(c_void_p)]),
        "tejit_backward": (status, [program, c_void_p, P(c_void_p),
                                    P(c_void_p)]),
        "tejit_forward_ex": (status, [program, c_void_p, P(c_void_p),
                                      P(c_void_p), P(c_void_p)]),
        "tejit_backward_ex": (status, [program, c_void_p, P(c_void_p),
                                       P(c_void_p), P(c_void_p), P(c_void_p),
                                       P(c_void_p)]),
        "tejit_meta_get": (status, [program, c_size_t, c_void_p, c_size_t,
                                    c_void_p]),
        "tejit_meta_set": (status, [program, c_size_t, c_void_p, c_size_t,
                                    c_void_p]),
        "tejit_meta_device_pointer": (status, [program, c_size_t,
                                               P(c_void_p)]),
        "tejit_set_seed": (status, [program, ctypes.c_uint64]),
        "tejit_rng_state_device_pointer": (status, [program, P(c_void_p)]),
        # tejit_amax_group * is a c_void_p; the id an unsigned char[128].
        "tejit_amax_group_unique_id": (status, [c_void_p]),
        "tejit_amax_group_create": (status, [c_void_p, c_int, c_int, c_int,
                                             P(c_void_p)]),
        "tejit_amax_group_from_nccl_comm": (status, [c_void_p, P(c_void_p)]),
        "tejit_amax_group_from_function": (status, [c_void_p, c_void_p,
                                                    P(c_void_p)]),
        "tejit_amax_group_destroy": (None, [c_void_p]),
        "tejit_program_set_amax_group": (status, [program, c_void_p]),
        "tejit_program_amax_reductions": (c_size_t, [program]),
        # tejit_tp_group * is a c_void_p; the id an unsigned char[128].
        "tejit_tp_group_create": (status, [c_void_p, c_int, c_int, c_int,
                                           P(c_void_p)]),
        "tejit_tp_group_from_nccl_comm": (status, [c_void_p, P(c_void_p)]),
        "tejit_tp_group_from_function": (status, [c_void_p, c_void_p,
                                                  P(c_void_p)]),
        # The three functions (ctypes callbacks or None), then user_data.
        "tejit_tp_group_from_functions": (status, [c_void_p, c_void_p,
                                                   c_void_p, c_void_p,
                                                   P(c_void_p)]),
        # A group's all-to-all (a ctypes callback): context parallelism's
        # a2a, on a group of tejit_tp_group_from_functions.
        "tejit_tp_group_set_all_to_all": (status, [c_void_p, c_void_p]),
        "tejit_tp_group_destroy": (None, [c_void_p]),
        "tejit_program_set_tp_group": (status, [program, c_void_p]),
        "tejit_program_tp_size": (ctypes.c_int64, [program]),
        # Context parallelism: the CP group is a tejit_tp_group * too.
        "tejit_program_set_cp_group": (status, [program, c_void_p]),
        "tejit_program_cp_size": (ctypes.c_int64, [program]),
        "tejit_program_set_forward_state_updates": (status, [program, c_int]),
        "tejit_program_set_reuse_weight_casts": (status, [program, c_int]),
        "tejit_program_set_weight_cast_flag": (status, [program, c_void_p]),
        "tejit_program_weight_cast_cache_bytes": (c_size_t, [program]),
        "tejit_program_skipped_steps": (c_size_t, [program]),
        "tejit_saved_cache_pointer": (status, [program, c_size_t,
                                               P(c_void_p)]),
        "tejit_program_set_capture_host_arguments": (status,
                                                     [program, c_int]),
        "tejit_program_set_group_pointers": (status, [program, c_size_t,
                                                      P(c_void_p), c_size_t]),
        # delay_wgrad_compute: the backward in two halves.
        "tejit_delays_wgrad": (c_int, [program]),
        "tejit_tensor_used_by_wgrad": (c_int, [program, c_int, c_size_t]),
        "tejit_backward_dgrad_ex": (status, [program, c_void_p] +
                                    [P(c_void_p)] * 6),
        "tejit_backward_wgrad_ex": (status, [program, c_void_p] +
                                    [P(c_void_p)] * 6),
    }
    for name, (restype, argtypes) in signatures.items():
        if name in OPTIONAL and not hasattr(lib, name):
            continue
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


# Functions a library built before them lacks (context parallelism, its
# a2a's all-to-all, delay_wgrad_compute's halves): left undeclared there;
# has() says whether the loaded library has one.
OPTIONAL = frozenset({"tejit_program_set_cp_group", "tejit_program_cp_size",
                      "tejit_tp_group_set_all_to_all", "tejit_delays_wgrad",
                      "tejit_tensor_used_by_wgrad", "tejit_backward_dgrad_ex",
                      "tejit_backward_wgrad_ex"})


def has(name):
    """Whether the loaded library has the function `name` (those of
    OPTIONAL may be missing in an older build)."""
    return hasattr(lib(), name)


def lib():
    """The loaded library, its functions declared (loaded on first use)."""
    global _lib
    if _lib is None:
        loaded = _load()
        _declare(loaded)
        _lib = loaded
    return _lib


def library_path():
    """The path the library was loaded from (loads it if needed)."""
    return lib()._name


def last_error():
    message = lib().tejit_last_error()
    return message.decode("utf-8", "replace") if message else ""


def check(status):
    """Raises TejitError with tejit_last_error() unless status is TEJIT_OK."""
    if status != TEJIT_OK:
        raise TejitError(status, last_error())
    return status


def encode(text):
    """str -> bytes for const char * arguments (None stays NULL)."""
    if text is None:
        return None
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def pointer_array(pointers):
    """A C array of void * from ints (device addresses); 0/None is NULL."""
    values = [int(p) if p is not None else None for p in pointers]
    return (ctypes.c_void_p * max(len(values), 1))(*values)
