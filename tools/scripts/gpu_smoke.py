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
   others (dropout backward, residual add) are left to the module tests
   (tests/gpu/test_attention_layers.py). Each run draws new data and scales.
3. Launches every bias + dropout + residual kernel (bias_dropout_add_*) on
   fresh random data and a random RNG state, and checks the mask it applied
   bit-exact against a NumPy re-implementation of the RNG convention
   (compiler/interpreter/DropoutRng.h: one SplitMix64 per pair of elements,
   32 bits each), and its output against residual + keep * x / (1 - rate).
   No mask is stored (the backward draws it again), so the mask is read
   off the output: the dropout input is at least 1 in magnitude and the
   residual below 0.1, so an element equals its residual exactly where it
   was dropped and nowhere else. The rate, stream and dropout input are
   read from the kernel's source.
Prints a table; exits 1 on any mismatch."""
import json, os, re, sys

import cupy
import numpy as np
import torch

VERBOSE = os.environ.get("TEJIT_SMOKE_VERBOSE") == "1"
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
          "f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2,
          "i1": torch.uint8, "i64": torch.int64}


def skip_flag(step):
    """The trailing `const int *tj_skip` of plan format 4's kernels: null,
    so the kernel runs (as the runtime passes it outside weight-cast
    graphs)."""
    return [np.uint64(0)] if step.get("skip_flag") else []


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
    # Cross-block sums (a bias gradient) take scratch, last, as the runtime
    # passes it; all of it zeroed here, where the runtime zeroes only the
    # step's "scratch_zero" bytes (the arrival counters).
    if step.get("scratch_bytes", 0):
        scratch = torch.zeros(step["scratch_bytes"], dtype=torch.uint8,
                              device="cuda")
        pointers.append(np.uint64(scratch.data_ptr()))
    pointers += skip_flag(step)
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


MASK64 = (1 << 64) - 1


def splitmix64(x):
    """SplitMix64's output function on a Python int or a NumPy uint64 array
    (whose products wrap modulo 2^64, as the device's do)."""
    if isinstance(x, int):
        x = (x + 0x9E3779B97F4A7C15) & MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
        return x ^ (x >> 31)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def reference_keep(seed, offset, stream, threshold, count):
    """The keep mask of elements 0..count-1 under DropoutRng.h's convention."""
    key = splitmix64(splitmix64(splitmix64(seed) ^ offset) ^ stream)
    index = np.arange(count, dtype=np.uint64)
    h = splitmix64(np.uint64(key) ^ (index >> np.uint64(1)))
    bits = np.where(index & np.uint64(1), h >> np.uint64(32),
                    h & np.uint64(0xFFFFFFFF))
    return bits >= np.uint64(threshold)


def check_bias_dropout_add(fn, step, values, source, rng):
    signature = source.split('extern "C"', 1)[-1].split("{", 1)[0]
    params = re.findall(r"\*__restrict__ (\w+)", signature)
    key = re.search(r"tj_dropout_key\((\w+)\[0\], \1\[1\], (\d+)ull\)", source)
    threshold = re.search(r"tj_dropout_keeps2?\(\w+, .*, (\d+)ull\)", source)
    dropped = re.search(r"keep\w* \? (\w+)_in\[u\]\[i\] \* ([0-9.e+-]+)f", source)
    if not (key and threshold and dropped) or len(params) != len(step["args"]):
        return "kernel source not understood (RNG key, threshold, input)"
    seed, offset = (int(v) for v in rng.integers(0, 1 << 62, 2))
    tensors = {}
    for name, arg in zip(params, step["args"]):
        shape, elem = parse_type(values[arg["value"]]["type"])
        if name == key.group(1):
            t = torch.tensor([seed, offset], dtype=torch.int64, device="cuda")
        elif name == dropped.group(1):
            # Never 0 (torch.sign would make an exact 0 of randn one).
            r = torch.randn(shape, device="cuda")
            t = torch.where(r < 0, -1.0 - r.abs(), 1.0 + r.abs()).to(
                DTYPES[elem])
        elif not arg["output"]:
            t = (0.03 * torch.randn(shape, device="cuda")).clamp(
                -0.09, 0.09).to(DTYPES[elem])
        else:
            t = torch.empty(shape, dtype=DTYPES[elem], device="cuda")
            t.view(torch.uint8).fill_(0x7F)
        tensors[name] = t
    fn(tuple(step["grid"]), tuple(step["block"]),
       tuple(np.uint64(t.data_ptr()) for t in tensors.values())
       + tuple(skip_flag(step)))
    torch.cuda.synchronize()
    x = tensors[dropped.group(1)]
    residual = [t for n, t in tensors.items() if n not in
                (dropped.group(1), key.group(1)) and
                not step["args"][params.index(n)]["output"]]
    out = [t for n, t in tensors.items()
           if step["args"][params.index(n)]["output"]]
    if len(residual) != 1 or len(out) != 1:
        return "unexpected arguments"
    want = torch.from_numpy(reference_keep(
        seed, offset, int(key.group(2)), int(threshold.group(1)),
        x.numel())).to("cuda").view(x.shape)
    bad = []
    got = out[0] != residual[0]
    if not torch.equal(got, want):
        bad.append(f"keep mask: {int((got != want).sum())} of {want.numel()} "
                   "differ from DropoutRng.h")
    scale = float(dropped.group(2))
    ref = residual[0].float() + torch.where(want, x.float() * scale, 0.0)
    err = (out[0].float() - ref).abs().max().item()
    if not err <= 2.0 ** -7 * ref.abs().max().item():
        bad.append(f"output off by {err:.3g}")
    rate = 1.0 - want.float().mean().item()
    return "; ".join(bad) or f"mask bit-exact, output ok (drop rate {rate:.4f})"


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
            if "bias_dropout_add" in step["name"]:
                source = open(os.path.join(
                    bundle, step["binary"][:-len(".cubin")] + ".cu")).read()
                verdict = check_bias_dropout_add(
                    fn, step, function["values"], source, rng)
                failures += not verdict.startswith("mask bit-exact")
                rows.append((step["name"], verdict))
                continue
            if "cast_transpose" not in step["name"]:
                continue
            if not is_plain_cast(step, function["values"]):
                rows.append((step["name"], "skipped (fuses its input's "
                             "producers: checked by the layer suite)"))
                continue
            problems = check_cast_transpose(fn, step, function["values"], rng)
            failures += bool(problems)
            rows.append((step["name"], problems or "bit-exact"))
    print(f"\nloaded {loaded} kernels\n\n| kernel | check |\n|---|---|")
    for name, verdict in rows:
        print(f"| {name} | {verdict} |")
    skipped = sum(verdict.startswith("skipped") for _, verdict in rows)
    print(f"\n{len(rows) - failures - skipped} passed, {failures} failed, "
          f"{skipped} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
