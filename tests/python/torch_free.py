"""Loads one file of python/tejit/pytorch by its path, without importing
the package (whose __init__ needs PyTorch): the torch-free tests check what
such files decide (argument checks, specs) on machines without PyTorch.
The file must import neither torch nor its package's relatives."""
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def load(relative, module_name):
    """python/tejit/pytorch/<relative> ("module/_grouped.py") as a new
    module named `module_name`."""
    path = os.path.join(REPO, "python", "tejit", "pytorch",
                        *relative.split("/"))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def library_loads():
    """Whether libtejit.so loads here (tests that compile skip without it)."""
    import tejit
    try:
        tejit.version()
        return True
    except tejit.LibraryNotFoundError:
        return False
