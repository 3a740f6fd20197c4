"""TEJIT_GEMM_TUNING for the programs a benchmark row creates.

The runtime reads the variable when it creates a program, so a row that
runs with a tuning file sets it around its compile (or first step), and
every other row runs with it unset, whatever the caller exported.
"""
import contextlib
import os

VARIABLE = "TEJIT_GEMM_TUNING"


@contextlib.contextmanager
def gemm_tuning_file(path):
    """TEJIT_GEMM_TUNING=path inside the block (unset for None); the
    caller's value afterwards."""
    saved = os.environ.pop(VARIABLE, None)
    if path:
        os.environ[VARIABLE] = path
    try:
        yield
    finally:
        os.environ.pop(VARIABLE, None)
        if saved is not None:
            os.environ[VARIABLE] = saved
