"""The C API through the Python binding, on a machine without a GPU (CI):
IR inspection at every stage, located compile errors, and clear errors for
anything that needs a GPU. Run: python3 -m unittest discover tests/python"""
import ctypes
import json
import os
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import tejit  # noqa: E402
from torch_free import StandInLibrary  # noqa: E402

SMALL_MLP = {
    "name": "mlp", "params_dtype": "bf16", "seq_length": 32, "batch_size": 2,
    "recipe": {"type": "DelayedScaling", "fp8_format": "HYBRID"},
    "layers": [{"type": "LayerNormMLP", "hidden_size": 64,
                "ffn_hidden_size": 256}],
}


def has_gpu():
    try:
        tejit.device_info(0)
        return True
    except tejit.TejitError:
        return False


def check_made_and_released(test, group_class):
    """A group of `group_class` (tejit.AmaxGroup, tejit.TensorParallelGroup)
    made from a function has a handle until closed (twice is fine), and the
    function is not called without a program."""
    calls = []
    group = group_class.from_function(
        lambda *arguments: calls.append(arguments))
    test.assertTrue(group.handle.value)
    group.close()
    group.close()  # idempotent
    with test.assertRaises(ValueError):
        group.handle  # noqa: B018 - the property raises once closed
    test.assertEqual(calls, [])  # nothing ran without a program


class IrTest(unittest.TestCase):
    def test_every_stage_of_a_dict_spec(self):
        expected = {"te": "te.layernorm_mlp", "primitive": "te.matmul",
                    "autodiff": "mlp_backward", "scaled": "te.scaled_matmul",
                    "fused": "te.fused", "planned": "te.offsets",
                    "cuda": "extern \"C\" __global__"}
        for stage, marker in expected.items():
            with self.subTest(stage=stage):
                self.assertIn(marker, tejit.compile_ir(SMALL_MLP, stage))

    def test_recipe_override_and_inference(self):
        text = tejit.compile_ir(SMALL_MLP, "scaled", recipe="none")
        self.assertNotIn("te.scaled_matmul", text)
        text = tejit.compile_ir(SMALL_MLP, "planned", training=False)
        self.assertNotIn("mlp_backward", text)

    def test_yaml_path_and_ir_text(self):
        path = os.path.join(REPO, "examples", "layernorm_mlp_small.yaml")
        te_ir = tejit.compile_ir(path, "te")
        self.assertIn("te.layernorm_mlp", te_ir)
        # The te IR compiles further as IR text.
        self.assertIn("te.scaled_matmul", tejit.compile_ir(te_ir, "scaled"))


class ErrorTest(unittest.TestCase):
    def assertStatus(self, error, status):
        self.assertEqual(error.status, status, str(error))

    def test_spec_error_names_the_field_and_line(self):
        spec = "name: bad\nseq_length: 32\nbatch_size: 2\nlayers:\n" \
               "  - type: Linear\n    in_features: 64\n    out_feature: 64\n"
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.compile_ir(spec, "te")
        self.assertStatus(caught.exception, 2)  # TEJIT_ERROR_COMPILE
        self.assertIn("out_feature", str(caught.exception))
        self.assertIn(":7:", str(caught.exception))  # line of the bad key

    def test_fp8_shape_rule(self):
        spec = dict(SMALL_MLP, layers=[{"type": "LayerNormMLP",
                                        "hidden_size": 72,
                                        "ffn_hidden_size": 256}])
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.compile_ir(spec, "te")
        self.assertIn("16", str(caught.exception))

    def test_unknown_stage(self):
        with self.assertRaises((ValueError, tejit.TejitError)) as caught:
            tejit.compile_ir(SMALL_MLP, "optimized")
        self.assertIn("stage", str(caught.exception))

    def test_missing_bundle(self):
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.Program.load_bundle("/nonexistent/bundle")
        self.assertIn("plan.json", str(caught.exception))

    @unittest.skipIf(has_gpu(), "a GPU is present")
    def test_no_gpu_is_reported_clearly(self):
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.Program.compile(SMALL_MLP)
        self.assertStatus(caught.exception, 3)  # TEJIT_ERROR_NO_DEVICE
        self.assertRegex(str(caught.exception), "no CUDA (driver|device)")
        with self.assertRaises(tejit.TejitError):
            tejit.device_info(0)

    def test_version(self):
        self.assertTrue(tejit.version())

    def test_amax_reduction_is_in_the_plan_when_the_recipe_asks(self):
        # DelayedScaling reduces amaxes across ranks by default (TE's
        # reduce_amax): one te.amax_allreduce before each scale update.
        scaled = tejit.compile_ir(SMALL_MLP, "scaled")
        self.assertEqual(scaled.count("te.amax_allreduce"), 2)  # fwd + bwd
        local = dict(SMALL_MLP, recipe=dict(SMALL_MLP["recipe"],
                                            reduce_amax=False))
        self.assertNotIn("te.amax_allreduce", tejit.compile_ir(local, "scaled"))


class AmaxGroupTest(unittest.TestCase):
    """Amax groups without a GPU: what can be made here, clear errors for
    what needs one."""

    def test_function_group_is_made_and_released(self):
        check_made_and_released(self, tejit.AmaxGroup)

    def test_null_function_is_refused(self):
        library = tejit._capi.lib()
        handle = ctypes.c_void_p()
        status = library.tejit_amax_group_from_function(
            None, None, ctypes.byref(handle))
        self.assertEqual(status, 1)  # TEJIT_ERROR_INVALID_ARGUMENT
        self.assertIn("function", tejit._capi.last_error())
        self.assertFalse(handle.value)

    def test_rank_out_of_range_names_it(self):
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.AmaxGroup.create(bytes(128), ranks=2, rank=2, device=0)
        self.assertEqual(caught.exception.status, 1)
        self.assertIn("rank 2 is not in [0, ranks = 2)", str(caught.exception))

    def test_id_of_the_wrong_size_is_refused(self):
        with self.assertRaises(ValueError):
            tejit.AmaxGroup.create(b"short", ranks=2, rank=0, device=0)

    @unittest.skipIf(has_gpu(), "a GPU is present")
    def test_nccl_group_without_a_gpu_is_reported_clearly(self):
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.AmaxGroup.create(bytes(128), ranks=2, rank=0, device=0)
        self.assertEqual(caught.exception.status, 3)  # NO_DEVICE
        self.assertRegex(str(caught.exception), "no CUDA (driver|device)")

    def test_null_program_has_no_reductions(self):
        library = tejit._capi.lib()
        self.assertEqual(library.tejit_program_amax_reductions(None), 0)
        self.assertEqual(library.tejit_program_set_amax_group(None, None), 1)
        self.assertIn("program is null", tejit._capi.last_error())
        self.assertEqual(
            library.tejit_program_set_forward_state_updates(None, 0), 1)
        self.assertIn("program is null", tejit._capi.last_error())
        pointer = ctypes.c_void_p()
        self.assertEqual(library.tejit_rng_state_device_pointer(
            None, ctypes.byref(pointer)), 1)
        self.assertIn("null argument", tejit._capi.last_error())

    def test_null_program_has_no_weight_cast_cache(self):
        library = tejit._capi.lib()
        self.assertEqual(
            library.tejit_program_set_reuse_weight_casts(None, 1), 1)
        self.assertIn("program is null", tejit._capi.last_error())
        self.assertEqual(library.tejit_program_weight_cast_cache_bytes(None),
                         0)
        self.assertEqual(library.tejit_program_skipped_steps(None), 0)
        pointer = ctypes.c_void_p()
        self.assertEqual(library.tejit_saved_cache_pointer(
            None, 0, ctypes.byref(pointer)), 1)
        self.assertIn("null argument", tejit._capi.last_error())

    def test_weight_cast_reuse_modes_are_checked(self):
        library = tejit._capi.lib()
        for mode in (-1, 4):
            self.assertEqual(
                library.tejit_program_set_reuse_weight_casts(None, mode), 1)
            self.assertIn(f"reuse is {mode}", tejit._capi.last_error())
        self.assertEqual(
            library.tejit_program_set_reuse_weight_casts(
                None, tejit.WEIGHT_CASTS_KEEP), 1)
        self.assertIn("program is null", tejit._capi.last_error())

    def test_weight_cast_flag_needs_a_program_and_a_flag(self):
        library = tejit._capi.lib()
        self.assertEqual(library.tejit_program_set_weight_cast_flag(
            None, ctypes.c_void_p(0x1000)), 1)
        self.assertIn("program is null", tejit._capi.last_error())
        # A program handle is opaque: any non-null pointer reaches the flag
        # check, which comes before the program is used.
        fake = ctypes.cast(ctypes.pointer(ctypes.c_int(0)), ctypes.c_void_p)
        self.assertEqual(library.tejit_program_set_weight_cast_flag(
            fake, None), 1)
        self.assertIn("flag is null", tejit._capi.last_error())

    def test_group_pointers_need_a_program_and_pointers(self):
        library = tejit._capi.lib()
        pointers = tejit._capi.pointer_array([0x1000, 0x2000])
        self.assertEqual(library.tejit_program_set_group_pointers(
            None, 0, pointers, 2), 1)
        self.assertIn("program is null", tejit._capi.last_error())
        # Null pointers for a count: refused before the program is used.
        fake = ctypes.cast(ctypes.pointer(ctypes.c_int(0)), ctypes.c_void_p)
        self.assertEqual(library.tejit_program_set_group_pointers(
            fake, 0, None, 2), 1)
        self.assertIn("pointers is null for a count of 2",
                      tejit._capi.last_error())


class TensorParallelGroupTest(unittest.TestCase):
    """Tensor-parallel groups without a GPU: the function kind end to end
    through its ctypes callback, clear errors for null or invalid arguments
    of the C API, and what needs a GPU refused clearly."""

    def test_function_group_is_made_and_released(self):
        check_made_and_released(self, tejit.TensorParallelGroup)

    def test_function_gets_torch_dtype_names(self):
        # What the runtime calls (CallbackTensorParallelGroup): the dtype is
        # a tejit_dtype, the function sees torch's name for it.
        calls = []
        group = tejit.TensorParallelGroup.from_function(
            lambda *arguments: calls.append(arguments))
        for dtype in (2, 1, 0):  # TEJIT_BF16, TEJIT_F16, TEJIT_F32
            self.assertEqual(group._function(None, 0x1000, 64, dtype, None),
                             0)
        self.assertEqual(calls, [(0x1000, 64, "bfloat16", None),
                                 (0x1000, 64, "float16", None),
                                 (0x1000, 64, "float32", None)])
        group.raise_pending()  # nothing pending
        # An element type a tensor-parallel sum never has fails the call.
        self.assertEqual(group._function(None, 0x1000, 64, 3, None), 1)
        self.assertEqual(len(calls), 3)
        with self.assertRaisesRegex(ValueError, "dtype 3"):
            group.raise_pending()
        group.close()

    def test_exception_of_the_function_is_raised_by_the_program_call(self):
        def fail(*_arguments):
            raise RuntimeError("all_reduce failed")
        group = tejit.TensorParallelGroup.from_function(fail)
        self.assertEqual(group._function(None, 0x1000, 8, 2, None), 1)
        program = tejit.Program.__new__(tejit.Program)
        program._amax_group = None
        program._tp_group = group
        with self.assertRaises(tejit.TejitError) as caught:
            program._check(9)  # TEJIT_ERROR_INTERNAL
        self.assertIsInstance(caught.exception.__cause__, RuntimeError)
        self.assertEqual(caught.exception.status, 9)
        group.raise_pending()  # raised once, then forgotten
        group.close()

    def test_null_arguments_are_refused(self):
        library = tejit._capi.lib()
        handle = ctypes.c_void_p()
        self.assertEqual(library.tejit_tp_group_from_function(
            None, None, ctypes.byref(handle)), 1)
        self.assertIn("tejit_tp_group_from_function: function and group",
                      tejit._capi.last_error())
        self.assertFalse(handle.value)
        function = tejit._tp_group.ALL_REDUCE_FUNCTION(lambda *a: 0)
        self.assertEqual(library.tejit_tp_group_from_function(
            function, None, None), 1)
        self.assertEqual(library.tejit_tp_group_create(
            None, 2, 0, 0, ctypes.byref(handle)), 1)
        self.assertIn("tejit_tp_group_create: id and group must not be null",
                      tejit._capi.last_error())
        identifier = (ctypes.c_ubyte * 128)()
        self.assertEqual(library.tejit_tp_group_create(
            identifier, 2, 0, 0, None), 1)
        self.assertEqual(library.tejit_tp_group_from_nccl_comm(
            ctypes.c_void_p(0x1000), None), 1)
        self.assertIn("tejit_tp_group_from_nccl_comm: group is null",
                      tejit._capi.last_error())
        # A null communicator is named before NCCL is loaded.
        self.assertEqual(library.tejit_tp_group_from_nccl_comm(
            None, ctypes.byref(handle)), 1)
        self.assertIn("tensor-parallel group: the NCCL communicator is null",
                      tejit._capi.last_error())
        self.assertFalse(handle.value)
        library.tejit_tp_group_destroy(None)  # does nothing

    def test_gather_and_scatter_functions_get_their_arguments(self):
        # Sequence parallelism's collectives (tejit_tp_all_gather_fn and
        # tejit_tp_reduce_scatter_fn, called as CallbackTensorParallelGroup
        # does): addresses, the count per rank, torch's dtype name, stream.
        calls = []
        group = tejit.TensorParallelGroup.from_function(
            lambda *a: calls.append(("all_reduce",) + a),
            all_gather=lambda *a: calls.append(("all_gather",) + a),
            reduce_scatter=lambda *a: calls.append(("reduce_scatter",) + a))
        self.assertTrue(group.handle.value)
        reduce, gather, scatter = group._callbacks
        self.assertIs(reduce, group._function)
        self.assertEqual(gather(None, 0x1000, 0x2000, 16, 2, 0x5000), 0)
        self.assertEqual(scatter(None, 0x2000, 0x3000, 8, 0, None), 0)
        self.assertEqual(reduce(None, 0x3000, 4, 1, None), 0)
        self.assertEqual(calls, [
            ("all_gather", 0x1000, 0x2000, 16, "bfloat16", 0x5000),
            ("reduce_scatter", 0x2000, 0x3000, 8, "float32", None),
            ("all_reduce", 0x3000, 4, "float16", None)])
        group.raise_pending()  # nothing pending
        group.close()

    def test_gather_and_scatter_failures_are_kept_for_the_call(self):
        def fail(*_arguments):
            raise RuntimeError("all_gather failed")
        group = tejit.TensorParallelGroup.from_function(
            None, all_gather=fail, reduce_scatter=lambda *a: None)
        self.assertIsNone(group._function)
        _, gather, scatter = group._callbacks
        self.assertEqual(gather(None, 0x1000, 0x2000, 16, 2, None), 1)
        with self.assertRaisesRegex(RuntimeError, "all_gather failed"):
            group.raise_pending()
        # An element type no collective has fails the call too.
        self.assertEqual(scatter(None, 0x1000, 0x2000, 16, 3, None), 1)
        with self.assertRaisesRegex(ValueError, "dtype 3"):
            group.raise_pending()
        group.close()

    def test_functions_may_be_missing(self):
        # A group of no function is made; a program with steps that need
        # one refuses it at its call (runtime/TensorParallel.h, GroupNeeds).
        for functions in ((None,), (None, None, lambda *a: None),
                          (lambda *a: None,)):
            group = tejit.TensorParallelGroup.from_function(*functions)
            self.assertTrue(group.handle.value)
            self.assertEqual([c is not None for c in group._callbacks],
                             [f is not None for f in
                              functions + (None,) * (3 - len(functions))])
            group.close()
        library = tejit._capi.lib()
        handle = ctypes.c_void_p()
        self.assertEqual(library.tejit_tp_group_from_functions(
            None, None, None, None, ctypes.byref(handle)), 0)
        self.assertTrue(handle.value)
        library.tejit_tp_group_destroy(handle)
        self.assertEqual(library.tejit_tp_group_from_functions(
            None, None, None, None, None), 1)
        self.assertIn("tejit_tp_group_from_functions: group is null",
                      tejit._capi.last_error())

    @staticmethod
    def gather_plan(out_type, ranks=2):
        """A bundle's plan whose forward all-gathers its 64-element input
        (sequence parallelism's tp_allgather) into an `out_type` output."""
        count = int(out_type[len("tensor<"):].split("x")[0])
        return {
            "format": "tejit-plan", "version": 4, "arch": "sm_90a",
            "functions": [{
                "name": "gather", "arena_bytes": 0,
                "arguments": [{"value": 0, "te.name": "input"}],
                "results": [{"value": 1, "te.name": "output"}],
                "values": [
                    {"id": 0, "type": "tensor<64xbf16>", "bytes": 128,
                     "storage": {"arg": 0}},
                    {"id": 1, "type": out_type, "bytes": 2 * count,
                     "storage": {"result": 0}}],
                "steps": [{"kind": "tp_allgather", "in": 0, "out": 1,
                           "ranks": ranks}]}]}

    def load_plan(self, plan):
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "plan.json"), "w") as file:
                json.dump(plan, file)
            with self.assertRaises(tejit.TejitError) as caught:
                tejit.Program.load_bundle(directory).close()
        return caught.exception

    def test_bundle_with_a_bad_gather_names_the_step(self):
        # Parsed before a device is looked for: no GPU needed.
        error = self.load_plan(self.gather_plan("tensor<96xbf16>"))
        self.assertEqual(error.status, 1)
        self.assertIn("plan: function 'gather', step 0 (tp_allgather): 'out' "
                      "is value 1 of type tensor<96xbf16> (96 elements), but "
                      "'in' (value 0) holds 64; a tensor-parallel all-gather "
                      "over 2 ranks writes 2 times the elements it reads",
                      str(error))

    @unittest.skipIf(has_gpu(), "a GPU is present")
    def test_bundle_with_a_gather_parses(self):
        error = self.load_plan(self.gather_plan("tensor<256xbf16>", ranks=4))
        self.assertEqual(error.status, 3)  # NO_DEVICE: it parsed

    def test_null_program(self):
        library = tejit._capi.lib()
        self.assertEqual(library.tejit_program_tp_size(None), 0)
        self.assertEqual(library.tejit_program_set_tp_group(None, None), 1)
        self.assertIn("tejit_program_set_tp_group: program is null",
                      tejit._capi.last_error())
        group = tejit.TensorParallelGroup.from_function(lambda *a: None)
        self.assertEqual(
            library.tejit_program_set_tp_group(None, group.handle), 1)
        self.assertIn("program is null", tejit._capi.last_error())
        group.close()

    def test_rank_out_of_range_names_it(self):
        for ranks, rank in ((2, 2), (2, -1), (0, 0)):
            with self.assertRaises(tejit.TejitError) as caught:
                tejit.TensorParallelGroup.create(bytes(128), ranks=ranks,
                                                 rank=rank, device=0)
            self.assertEqual(caught.exception.status, 1)
            self.assertIn(f"tensor-parallel group: rank {rank} is not in "
                          f"[0, ranks = {ranks})", str(caught.exception))

    def test_id_of_the_wrong_size_is_refused(self):
        with self.assertRaisesRegex(ValueError, "128 bytes, got 5"):
            tejit.TensorParallelGroup.create(b"short", ranks=2, rank=0,
                                             device=0)

    @unittest.skipIf(has_gpu(), "a GPU is present")
    def test_nccl_group_without_a_gpu_is_reported_clearly(self):
        with self.assertRaises(tejit.TejitError) as caught:
            tejit.TensorParallelGroup.create(bytes(128), ranks=2, rank=0,
                                             device=0)
        self.assertEqual(caught.exception.status, 3)  # NO_DEVICE
        self.assertRegex(str(caught.exception), "no CUDA (driver|device)")


class ProgramTensorParallelTest(StandInLibrary, unittest.TestCase):
    """Program.set_tp_group and Program.tp_size over a stand-in library (a
    real program needs a GPU): what reaches the C API, and that the program
    keeps the group only once it is accepted."""

    class FakeLibrary:
        def __init__(self):
            self.calls = []
            self.status = 0

        def tejit_program_set_tp_group(self, program, group):
            self.calls.append((program, group.value if group else None))
            return self.status

        def tejit_program_tp_size(self, program):
            return 4

        def tejit_last_error(self):
            return b"the tensor-parallel group has 2 ranks"

    Library = FakeLibrary

    def test_set_and_clear(self):
        self.assertEqual(self.program.tp_size, 4)
        self.program.set_tp_group(self.group)
        self.assertIs(self.program._tp_group, self.group)
        self.program.set_tp_group(None)
        self.assertIsNone(self.program._tp_group)
        self.assertEqual(self.library.calls,
                         [(0x5000, 0x6000), (0x5000, None)])

    def test_refused_group_is_not_kept(self):
        self.library.status = 1
        with self.assertRaisesRegex(tejit.TejitError, "has 2 ranks"):
            self.program.set_tp_group(self.group)
        self.assertIsNone(self.program._tp_group)


class TensorAddressTest(unittest.TestCase):
    """What Program.forward accepts as a tensor, checked without a GPU."""

    def test_cuda_array_interface(self):
        from tejit import _tensors

        class Fake:
            __cuda_array_interface__ = {"data": (0x7000, False),
                                        "shape": (4, 8), "typestr": "<f2",
                                        "strides": None, "version": 3}
        self.assertEqual(_tensors.address(Fake()), (0x7000, 64))

        class Transposed:
            __cuda_array_interface__ = {"data": (0x7000, False),
                                        "shape": (4, 8), "typestr": "<f2",
                                        "strides": (2, 8), "version": 3}
        with self.assertRaises(ValueError) as caught:
            _tensors.address(Transposed(), "layers.0.weight")
        self.assertIn("not contiguous", str(caught.exception))

    def test_size_is_checked(self):
        class Fake:
            __cuda_array_interface__ = {"data": (0x7000, False),
                                        "shape": (4, 8), "typestr": "<f2",
                                        "version": 3}
        info = tejit.TensorInfo("input", "bf16", (4, 4), 32, False)
        with self.assertRaises(ValueError) as caught:
            tejit._address(Fake(), info)
        self.assertIn("expected 32 bytes", str(caught.exception))

    def test_ints_and_none(self):
        from tejit import _tensors
        self.assertEqual(_tensors.address(1234), (1234, None))
        self.assertEqual(_tensors.address(None), (None, None))


class DeferredDestroyTest(unittest.TestCase):
    """A program closed (or garbage-collected) during a stream capture is
    destroyed only after it: freeing its device memory there would
    invalidate the capture."""

    class FakeLibrary:
        def __init__(self):
            self.destroyed = []

        def tejit_program_destroy(self, handle):
            self.destroyed.append(handle.value)

    def setUp(self):
        self.library = self.FakeLibrary()
        self.saved = (tejit._capi.lib, tejit._stream_capturing)
        tejit._capi.lib = lambda: self.library
        self.capturing = False
        tejit._stream_capturing = lambda: self.capturing

    def tearDown(self):
        tejit._capi.lib, tejit._stream_capturing = self.saved
        tejit._DEFERRED_DESTROYS.clear()

    def program(self, handle):
        program = tejit.Program.__new__(tejit.Program)
        program._handle = ctypes.c_void_p(handle)
        return program

    def test_close_during_capture_waits_for_the_next_close(self):
        first, second = self.program(0x1000), self.program(0x2000)
        self.capturing = True
        first.close()
        first.close()  # idempotent: one deferred destroy
        self.assertEqual(self.library.destroyed, [])
        self.capturing = False
        second.close()
        self.assertEqual(sorted(self.library.destroyed), [0x1000, 0x2000])

    def test_garbage_collected_during_capture(self):
        self.capturing = True
        program = self.program(0x3000)
        del program
        self.assertEqual(self.library.destroyed, [])
        self.assertEqual(tejit._DEFERRED_DESTROYS, [0x3000])
        self.capturing = False
        tejit._destroy_deferred()
        self.assertEqual(self.library.destroyed, [0x3000])


if __name__ == "__main__":
    unittest.main()
