"""delay_wgrad_compute in the core binding (docs/delay-wgrad.md), without a
GPU: the compiled IR's wgrad function, and Program's halves of the backward
over a stand-in library (a real program needs a GPU): the arrays that reach
the C API, None for entries a half does not touch, and clear errors.
Run: python3 -m unittest discover tests/python"""
import os
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from tejit import TensorInfo  # noqa: E402
from torch_free import StandInLibrary, library_loads  # noqa: E402

DELAYED_LINEAR = {
    "name": "lin", "params_dtype": "bf16", "seq_length": 16, "batch_size": 2,
    "recipe": {"type": "DelayedScaling", "fp8_format": "HYBRID"},
    "layers": [{"type": "Linear", "in_features": 32, "out_features": 64,
                "delay_wgrad_compute": True}],
}


@unittest.skipUnless(library_loads(), "libtejit.so is not built")
class IrTest(unittest.TestCase):
    def test_the_backward_hands_the_wgrad_function_its_operands(self):
        text = tejit.compile_ir(DELAYED_LINEAR, "planned")
        self.assertIn("func.func @lin_backward_wgrad(", text)
        self.assertIn("te.wgrad_of = @lin_backward", text)
        self.assertIn('te.name = "deferred.0"', text)
        backward = text[text.index("func.func @lin_backward("):
                        text.index("func.func @lin_backward_wgrad(")]
        self.assertNotIn("grad.layers.0.weight", backward)

    def test_a_bad_value_is_a_located_compile_error(self):
        spec = dict(DELAYED_LINEAR, layers=[dict(
            DELAYED_LINEAR["layers"][0], delay_wgrad_compute="later")])
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.compile_ir(spec, "te")
        self.assertEqual(caught.exception.status, tejit._capi.
                         TEJIT_ERROR_COMPILE)
        self.assertIn("'delay_wgrad_compute' in Linear must be true or false",
                      str(caught.exception))


@unittest.skipUnless(library_loads(), "libtejit.so is not built")
class CApiMisuseTest(unittest.TestCase):
    """The C API's answers to misuse, which need no program."""

    def test_null_program(self):
        library = tejit._capi.lib()
        self.assertEqual(library.tejit_delays_wgrad(None), 0)
        self.assertEqual(library.tejit_tensor_used_by_wgrad(
            None, tejit._capi.TEJIT_DEFERRED, 0), 0)
        for name in ("tejit_backward_dgrad_ex", "tejit_backward_wgrad_ex"):
            status = getattr(library, name)(None, None, *[None] * 6)
            self.assertEqual(status, tejit._capi.TEJIT_ERROR_INVALID_ARGUMENT)
            self.assertEqual(tejit._capi.last_error(),
                             f"{name}: program is null")


def info(name, nbytes=4):
    return TensorInfo(name=name, dtype="f32", shape=(nbytes // 4,),
                      nbytes=nbytes, is_parameter=False, is_host=False)


class HalvesTest(StandInLibrary, unittest.TestCase):
    class FakeLibrary:
        """A program whose wgrad half reads grad_outputs[0] and deferred,
        and writes grad_inputs[1]."""

        def __init__(self):
            self.calls = []
            self.status = 0

        def tejit_delays_wgrad(self, program):
            return 1

        def tejit_tensor_used_by_wgrad(self, program, kind, index):
            used = {(tejit._capi.TEJIT_GRAD_OUTPUT, 0),
                    (tejit._capi.TEJIT_GRAD_INPUT, 1),
                    (tejit._capi.TEJIT_DEFERRED, 0)}
            return int((kind, index) in used)

        def _record(self, name, program, stream, *arrays):
            self.calls.append((name, program, stream, [
                [array[i] for i in range(count)]
                for array, count in zip(arrays, (1, 1, 1, 1, 2, 1))]))
            return self.status

        def tejit_backward_dgrad_ex(self, *arguments):
            return self._record("dgrad", *arguments)

        def tejit_backward_wgrad_ex(self, *arguments):
            return self._record("wgrad", *arguments)

        def tejit_last_error(self):
            return b"backward_wgrad: deferred tensor 0 ('deferred.0') is null"

    Library = FakeLibrary

    def setUp(self):
        super().setUp()
        self.program.inputs = [info("input")]
        self.program.outputs = [info("output")]
        self.program.saved = [info("saved.0")]
        self.program.grad_outputs = [info("grad.output")]
        self.program.grad_inputs = [info("grad.input"),
                                    info("grad.layers.0.weight")]
        self.program.deferred = [info("deferred.0")]

    def test_queries(self):
        self.assertTrue(self.program.delays_wgrad)
        self.assertTrue(self.program.used_by_wgrad("grad_outputs", 0))
        self.assertTrue(self.program.used_by_wgrad("grad_inputs", 1))
        self.assertFalse(self.program.used_by_wgrad("grad_inputs", 0))
        self.assertFalse(self.program.used_by_wgrad("saved", 0))
        with self.assertRaises(ValueError) as caught:
            self.program.used_by_wgrad("weights", 0)
        self.assertIn("grad_outputs", str(caught.exception))

    def test_halves_pass_none_as_null(self):
        self.program.backward_dgrad_ex(7, [0x10], [0x20], [0x30], [0x40],
                                       [0x50, None], [0x60])
        self.program.backward_wgrad_ex(7, [None], [None], [None], [0x40],
                                       [None, 0x58], [0x60])
        self.assertEqual(self.library.calls, [
            ("dgrad", 0x5000, 7, [[0x10], [0x20], [0x30], [0x40],
                                  [0x50, None], [0x60]]),
            ("wgrad", 0x5000, 7, [[None], [None], [None], [0x40],
                                  [None, 0x58], [0x60]])])

    def test_counts_and_errors(self):
        with self.assertRaises(ValueError) as caught:
            self.program.backward_wgrad_ex(None, [0], [0], [0], [0], [0, 0],
                                           [])
        self.assertIn("deferred: expected 1 pointers", str(caught.exception))
        self.library.status = tejit._capi.TEJIT_ERROR_INVALID_ARGUMENT
        with self.assertRaises(tejit.TejitError) as caught:
            self.program.backward_wgrad_ex(None, [0], [0], [0], [0], [0, 0],
                                           [0x60])
        self.assertIn("'deferred.0') is null", str(caught.exception))

    def test_an_older_library(self):
        class OldLibrary:
            _name = "/old/libtejit.so"
        self.library = OldLibrary()
        tejit._capi.lib = lambda: self.library
        self.assertFalse(self.program.delays_wgrad)
        self.assertFalse(self.program.used_by_wgrad("grad_inputs", 1))
        with self.assertRaises(tejit.TejitError) as caught:
            self.program.backward_dgrad_ex(None, [0], [0], [0], [0], [0, 0],
                                           [0])
        self.assertIn("/old/libtejit.so) predates delay_wgrad_compute",
                      str(caught.exception))


if __name__ == "__main__":
    unittest.main()
