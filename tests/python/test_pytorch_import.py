"""Without PyTorch, `import tejit.pytorch` fails with an ImportError that
names PyTorch, while tejit and tejit.common import and never pull torch in.
Skipped where torch is installed (tests/gpu/test_pytorch_modules.py covers
the modules there). Run: python3 -m unittest discover tests/python"""
import importlib.util
import os
import subprocess
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
PYTHON_DIR = os.path.join(REPO, "python")


def run_python(code):
    """Runs `code` in a fresh interpreter (an import failure leaves partial
    modules behind in this one)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=PYTHON_DIR))


@unittest.skipIf(importlib.util.find_spec("torch") is not None,
                 "PyTorch is installed")
class WithoutTorchTest(unittest.TestCase):
    def test_import_error_names_pytorch(self):
        result = run_python(
            "try:\n"
            "    import tejit.pytorch\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ImportError: tejit.pytorch needs PyTorch",
                      result.stdout)

    def test_core_and_common_do_not_import_torch(self):
        result = run_python(
            "import sys, tejit\n"
            "from tejit.common import recipe\n"
            "recipe.DelayedScaling().to_spec()\n"
            "print('torch' in sys.modules)\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "False")


if __name__ == "__main__":
    unittest.main()
