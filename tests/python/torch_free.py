"""Loads one file of python/tejit/pytorch by its path, without importing
the package (whose __init__ needs PyTorch): the torch-free tests check what
such files decide (argument checks, specs) on machines without PyTorch.
The file must import neither torch nor its package's relatives. Also the
helpers the Python tests share (RefusalAssertions, StandInLibrary), and
what the tests of tejit.pytorch start with: the checkout's python/ on
sys.path and HAVE_TORCH (they skip without PyTorch)."""
import ctypes
import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
PYTHON_DIR = os.path.join(REPO, "python")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def load(relative, module_name):
    """python/tejit/pytorch/<relative> ("module/_grouped.py") as a new
    module named `module_name`."""
    path = os.path.join(REPO, "python", "tejit", "pytorch",
                        *relative.split("/"))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RefusalAssertions:
    """A mixin for unittest.TestCase tests of refusals."""

    def assertRefused(self, error, call, *words):
        """`call()` raises `error` with every one of `words` in its
        message; returns the message."""
        with self.assertRaises(error) as caught:
            call()
        message = str(caught.exception)
        for word in words:
            self.assertIn(word, message)
        return message


def library_loads():
    """Whether libtejit.so loads here (tests that compile skip without it)."""
    import tejit
    try:
        tejit.version()
        return True
    except tejit.LibraryNotFoundError:
        return False


class StandInLibrary:
    """A mixin for unittest.TestCase tests of tejit.Program's methods over
    a stand-in library (a real program needs a GPU): setUp puts an
    instance of the class's `Library` in the place of libtejit
    (self.library, read at each call: a test may replace it) and makes
    self.program, a Program over handle 0x5000 without groups, and
    self.group, a TensorParallelGroup over handle 0x6000 (neither real:
    nothing is freed); tearDown puts the library back."""

    Library = None

    def setUp(self):
        import tejit
        self.library = self.Library()
        self.saved_library = tejit._capi.lib
        tejit._capi.lib = lambda: self.library
        self.program = tejit.Program.__new__(tejit.Program)
        self.program._handle = ctypes.c_void_p(0x5000)
        self.program._amax_group = None
        self.program._tp_group = None
        self.program._cp_group = None
        self.group = tejit.TensorParallelGroup(0x6000)

    def tearDown(self):
        import tejit
        self.group._handle.value = None
        self.program._handle.value = None
        tejit._capi.lib = self.saved_library
