#!/usr/bin/env python3
"""The framework-free core takes any GPU tensor: a Linear program (fp16, no
recipe, inference) runs on torch tensors, then on the same memory seen only
through DLPack, then only through the CUDA array interface; all three must
write the same bits. Exits 1 on a mismatch.
    PYTHONPATH=python python3 tests/gpu/test_tensor_interop.py"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import torch  # noqa: E402

import tejit  # noqa: E402


class OnlyDlpack:
    """Shows a tensor through __dlpack__ alone (as JAX arrays do)."""

    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, stream=None):
        return self._tensor.__dlpack__()

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


class OnlyCudaArrayInterface:
    """Shows a tensor through __cuda_array_interface__ alone (CuPy, Numba)."""

    def __init__(self, tensor):
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def main():
    spec = {"name": "interop", "params_dtype": "fp16", "seq_length": 32,
            "batch_size": 2, "layers": [{"type": "Linear", "in_features": 64,
                                          "out_features": 128}]}
    program = tejit.Program.compile(spec, training=False)
    inputs = [torch.randn(i.shape, device="cuda", dtype=torch.float16)
              for i in program.inputs]
    stream = torch.cuda.current_stream().cuda_stream
    results = {}
    for name, wrap in (("torch", lambda t: t), ("dlpack", OnlyDlpack),
                       ("cuda_array_interface", OnlyCudaArrayInterface)):
        out = torch.full(program.outputs[0].shape, float("nan"),
                         device="cuda", dtype=torch.float16)
        program.forward(stream, [wrap(t) for t in inputs], [wrap(out)])
        torch.cuda.synchronize()
        results[name] = out
    failed = [name for name, out in results.items()
              if not torch.equal(out, results["torch"])
              or not torch.isfinite(out).all()]
    try:  # a host tensor is refused with a clear message
        program.forward(stream, [OnlyDlpack(t.cpu()) for t in inputs],
                        [results["torch"]])
        failed.append("host tensor accepted")
    except ValueError as error:
        print("host tensor refused:", error)
    program.close()
    print("FAIL: " + ", ".join(failed) if failed else
          "PASS  torch, DLPack and CUDA-array-interface tensors agree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
