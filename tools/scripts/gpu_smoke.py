#!/usr/bin/env python3
"""GPU smoke test of a te-compile bundle (te-compile SPEC --emit=cuda -o DIR).

Run on the GPU machine (PyTorch + CuPy there): python3 gpu_smoke.py DIR
1. Loads every kernel binary of DIR/plan.json on the GPU and resolves its
   entry point (the cubins must suit the device).
2. Launches every FP8 cast(+transpose) kernel (cast_transpose_*) with the
   plan's launch geometry on fresh random data, outputs poisoned first, and
   checks against PyTorch: the FP8 bytes bit-exact against the saturating
   cast (x.float() * scale).clamp(+-max).to(float8), the transpose exact,
   the amax exact, a bias gradient beside the cast (cast_transpose_bgrad)
   against the column sums. Kernels that also compute the cast's input from
   others (dropout backward, residual add) are left to the layer suite.
   Each run draws new data and scales.
Prints a table; exits 1 on any mismatch."""
import json, os, sys

import cupy
import numpy as np
import torch

VERBOSE = os.environ.get("TEJIT_SMOKE_VERBOSE") == "1"
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
          "f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2,
          "i1": torch.uint8, "i64": torch.int64}


def parse_type(text):  # "tensor<192x64xbf16>" -> ([192, 64], "bf16")
    dims = text[len("tensor<"):-1].split("x")
    return [int(d) for d in dims[:-1]], dims[-1]


def is_plain_cast(step, values):
    """One tensor in (and its scale): the cast reads nothing else."""
    inputs = [parse_type(values[a["value"]]["type"])[1]
              for a in step["args"] if not a["output"]]
    return sum(elem != "f32" for elem in inputs) == 1 and "i1" not in inputs


def check_cast_transpose(fn, step, values, rng):
    tensors, roles = [], []
    for arg in step["args"]:
        shape, elem = parse_type(values[arg["value"]]["type"])
        if not arg["output"]:
            if elem == "f32":  # the scale slot
                t = torch.tensor([float(rng.uniform(0.5, 64.0))], device="cuda")
            else:
                t = (torch.randn(shape, device="cuda") * 4).to(DTYPES[elem])
            roles.append("scale" if elem == "f32" else "x")
        else:
            t = torch.empty(shape, dtype=DTYPES[elem], device="cuda")
            if arg["zero_before_launch"]:
                t.zero_()
            else:  # poison: any byte the kernel fails to write shows up
                t.view(torch.uint8).fill_(0x7F)
            roles.append("amax" if elem == "f32" else
                         "dbias" if len(shape) == 1 else
                         ("q" if "q" not in roles else "qt"))
        tensors.append(t)
    pointers = [np.uint64(t.data_ptr()) for t in tensors]
    # Cross-block sums (a bias gradient) take zeroed scratch, last, as the
    # runtime passes it.
    if step.get("scratch_bytes", 0):
        scratch = torch.zeros(step["scratch_bytes"], dtype=torch.uint8,
                              device="cuda")
        pointers.append(np.uint64(scratch.data_ptr()))
    fn(tuple(step["grid"]), tuple(step["block"]), tuple(pointers))
    torch.cuda.synchronize()
    get = {r: t for r, t in zip(roles, tensors)}
    x, scale = get["x"], get["scale"]
    # FP8 casts saturate (FP8.md); PyTorch's .to(float8) would give NaN for
    # values beyond the largest finite one, so clamp first.
    fmax = torch.finfo(get["q"].dtype).max
    q = (x.float() * scale).clamp(-fmax, fmax).to(get["q"].dtype)
    bad = []
    mismatched = get["q"].view(torch.uint8) != q.view(torch.uint8)
    if mismatched.any():
        where = mismatched.nonzero()[0].tolist()
        bad.append(f"q: {int(mismatched.sum())} of {q.numel()} bytes differ, "
                   f"first at {where} of {list(q.shape)}")
    if "qt" in get and not torch.equal(get["qt"].view(torch.uint8),
                                       q.view(torch.uint8).t().contiguous()):
        bad.append(f"transpose {list(get['qt'].shape)} differs")
    if "amax" in get and get["amax"].item() != x.float().abs().max().item():
        bad.append(f"amax {get['amax'].item()} vs {x.float().abs().max().item()}")
    if "dbias" in get:
        want = x.double().sum(0)
        err = ((get["dbias"].double() - want).norm() / want.norm()).item()
        if not err <= 1e-2:
            bad.append(f"bias gradient rel L2 {err:.2e}")
    return "; ".join(bad)


def main(bundle):
    plan = json.load(open(os.path.join(bundle, "plan.json")))
    print(torch.cuda.get_device_name(), "plan arch", plan["arch"], flush=True)
    rng = np.random.default_rng()
    loaded, rows, failures = 0, [], 0
    for function in plan["functions"]:
        for step in function["steps"]:
            if step["kind"] != "kernel":
                continue
            if VERBOSE:
                print(f"  loading {step['name']}", file=sys.stderr, flush=True)
            module = cupy.RawModule(path=os.path.join(bundle, step["binary"]))
            fn = module.get_function(step["name"])
            loaded += 1
            if "cast_transpose" not in step["name"]:
                continue
            if not is_plain_cast(step, function["values"]):
                rows.append((step["name"], "skipped (fuses its input's "
                             "producers: checked by the layer suite)"))
                continue
            problems = check_cast_transpose(fn, step, function["values"], rng)
            failures += bool(problems)
            rows.append((step["name"], problems or "bit-exact"))
    print(f"\nloaded {loaded} kernels\n\n| kernel | FP8 bytes, transpose, amax |\n|---|---|")
    for name, verdict in rows:
        print(f"| {name} | {verdict} |")
    skipped = sum(verdict.startswith("skipped") for _, verdict in rows)
    print(f"\n{len(rows) - failures - skipped} passed, {failures} failed, "
          f"{skipped} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
